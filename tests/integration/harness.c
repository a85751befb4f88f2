/* SPDX-License-Identifier: MIT */
/* Integration harness: fork/exec with a controlled environment, captured output, SQLite reads. */
#include "harness.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
char h_dir[64], h_db[128];

/* The process that made h_dir: a test that skips after its fixture ran never reaches the
 * fixture's .fini (Criterion runs none after cr_skip_test), so the folder goes at that process's
 * exit instead (not at a forked child's). */
static pid_t h_owner;

static void h_remove_at_exit(void)
{
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", h_dir);
  if (h_owner == getpid() && h_dir[0] && system(cmd) != 0)
    fprintf(stderr, "harness: could not remove %s\n", h_dir);
}

void h_setup(void)
{
  snprintf(h_dir, sizeof h_dir, "/tmp/opjit-it-XXXXXX");
  cr_assert_not_null(mkdtemp(h_dir));
  snprintf(h_db, sizeof h_db, "%s/profile.db", h_dir);
  if (!h_owner)
    atexit(h_remove_at_exit);
  h_owner = getpid();
}

void h_teardown(void)
{
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", h_dir);
  cr_assert_eq(system(cmd), 0);
}

const char *h_artefact(const char *path)
{
  static char buf[4][512];
  static int next;
  const char *dir = getenv("OPJIT_TEST_ARTEFACTS");
  size_t n = strlen(OPJIT_BUILD_DIR);
  if (!dir || !*dir || strncmp(path, OPJIT_BUILD_DIR "/", n + 1))
    return path;
  char *b = buf[next++ % 4];
  snprintf(b, sizeof buf[0], "%s%s", dir, path + n);
  return b;
}

pid_t h_spawn(const char *tag, int agent, const char *const *env, const char *const *argv)
{
  /* The child's environment: the test's entries first (getenv takes the first match), then
   * ours minus any OPJIT_ and LD_PRELOAD, then the defaults the test did not set. */
  static char dbvar[160], preload[1024];
  const char *envp[512];
  size_t n = 0;
  for (const char *const *t = env; t && *t && n < 100; t++)
    envp[n++] = *t;
  /* Under ASan, a host that is not ours (python3, node) is not leak-checked: it frees little at
   * exit, and what it keeps is no finding of the agent's (our hosts are checked). */
  if (*OPJIT_TEST_PRELOAD && strncmp(argv[0], OPJIT_BUILD_DIR "/", strlen(OPJIT_BUILD_DIR) + 1))
    envp[n++] = "ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0";
  for (char **e = environ; *e && n < 500; e++)
    if (strncmp(*e, "OPJIT_", 6) && strncmp(*e, "LD_PRELOAD=", 11))
      envp[n++] = *e;
  snprintf(dbvar, sizeof dbvar, "OPJIT_DB=%s", h_db);
  /* Each default only where the test's entries leave it unset: a program that rebuilds its
   * child's environment (valgrind) may keep the last of two entries of one name. */
  const char *defaults[] = {
      dbvar, "OPJIT_MODE=profile", /* bit-identical outputs; the JIT tests ask for jit */
      "OPENBLAS_NUM_THREADS=1",
      /* The final write's wait ends with the write: at the default 2 s, a writer without a CPU
       * that long on a loaded machine (a sanitizer lane) loses the run's end, which the tests
       * read. */
      "OPJIT_EXIT_WAIT_MS=60000"};
  for (size_t d = 0; d < sizeof defaults / sizeof *defaults; d++) {
    size_t len = strcspn(defaults[d], "=") + 1;
    int set = 0;
    for (const char *const *t = env; t && *t && !set; t++)
      set = strncmp(*t, defaults[d], len) == 0;
    if (!set)
      envp[n++] = defaults[d];
  }
  if (agent) {
    /* A sanitizer's runtime first (ASan must come first in the initial library list: an
     * uninstrumented host would otherwise bind malloc to libc's). */
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s%s%s", OPJIT_TEST_PRELOAD,
             *OPJIT_TEST_PRELOAD ? ":" : "", h_artefact(H_AGENT));
    envp[n++] = preload;
  }
  envp[n] = NULL;
  char out[160], err[160];
  snprintf(out, sizeof out, "%s/%s.out", h_dir, tag);
  snprintf(err, sizeof err, "%s/%s.err", h_dir, tag);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
      _exit(126);
    execve(h_artefact(argv[0]), (char *const *)argv, (char *const *)envp);
    _exit(127);
  }
  return pid;
}

void h_assert_no_sanitizer_report(const char *tag)
{
  static const char *const reports[] = {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                                        "WARNING: ThreadSanitizer", "ThreadSanitizer: ",
                                        "runtime error: "};
  const char *err = h_output(tag, "err");
  for (size_t i = 0; i < sizeof reports / sizeof *reports; i++) {
    const char *at = strstr(err, reports[i]);
    cr_assert_null(at, "%s: a sanitizer report:\n%.6000s", tag, at ? at : "");
  }
}

int h_run(const char *tag, int agent, const char *const *env, const char *const *argv)
{
  int status;
  pid_t pid = h_spawn(tag, agent, env, argv);
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  h_assert_no_sanitizer_report(tag);
  return status;
}

const char *h_output(const char *tag, const char *ext)
{
  static char bufs[4][1 << 16]; /* four in turn: one message may print out and err */
  static unsigned next;
  char *buf = bufs[next++ % 4], path[160];
  snprintf(path, sizeof path, "%s/%s.%s", h_dir, tag, ext);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof bufs[0] - 1, f) : 0;
  if (f)
    fclose(f);
  buf[n] = 0;
  return buf;
}

int h_count_lines(const char *text, const char *needle)
{
  int n = 0;
  for (const char *l = text; l && *l;) {
    const char *end = strchr(l, '\n');
    size_t len = end ? (size_t)(end - l) : strlen(l);
    char line[1024];
    snprintf(line, sizeof line, "%.*s", (int)len, l);
    n += strstr(line, needle) != NULL;
    l = end ? end + 1 : NULL;
  }
  return n;
}

int h_same_file(const char *a, const char *b)
{
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb;
  for (int ca = 0, cb = 0; same && ca != EOF;) {
    ca = fgetc(fa), cb = fgetc(fb);
    same = ca == cb;
  }
  if (fa)
    fclose(fa);
  if (fb)
    fclose(fb);
  return same;
}

/* Opens path (h_db when NULL) with flags; the statement fmt formats into sql. */
static sqlite3 *open_for(const char *path, int flags, char *sql, size_t len, const char *fmt,
                         va_list ap)
{
  vsnprintf(sql, len, fmt, ap);
  sqlite3 *db;
  cr_assert_eq(sqlite3_open_v2(path ? path : h_db, &db, flags, NULL), SQLITE_OK, "cannot open %s",
               path ? path : h_db);
  sqlite3_busy_timeout(db, 2000);
  return db;
}

int64_t h_query(const char *path, const char *fmt, ...)
{
  char sql[2048];
  va_list ap;
  va_start(ap, fmt);
  sqlite3 *db = open_for(path, SQLITE_OPEN_READONLY, sql, sizeof sql, fmt, ap);
  va_end(ap);
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
  int64_t v = -1;
  if (sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

int h_db_has(const char *table)
{
  struct stat st;
  return stat(h_db, &st) == 0 &&
         h_query(NULL, "SELECT count(*) FROM sqlite_master WHERE name='%s'", table) == 1;
}

void h_exec(const char *fmt, ...)
{
  char sql[2048];
  va_list ap;
  va_start(ap, fmt);
  sqlite3 *db = open_for(NULL, SQLITE_OPEN_READWRITE, sql, sizeof sql, fmt, ap);
  va_end(ap);
  char *msg = NULL;
  cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql, msg);
  cr_assert_gt(sqlite3_changes(db), 0, "%s changed nothing", sql);
  sqlite3_close(db);
}

int h_sanitized(void)
{
  const char *artefacts = getenv("OPJIT_TEST_ARTEFACTS");
#if defined(__SANITIZE_ADDRESS__)
  (void)artefacts;
  return 1;
#else
  return artefacts && *artefacts;
#endif
}

void h_skip_threaded_fork_under_asan(void)
{
#if defined(__SANITIZE_ADDRESS__)
  cr_skip_test("ASan's runtime is not fork-safe in a threaded host (its quarantine lock, its "
               "stack poison): the plain suite runs this test");
#endif
}

void h_setup_jit(void)
{
  struct stat st;
  if (stat(h_artefact(OPJIT_BUILD_DIR "/libopjit-jit.so"), &st) != 0)
    cr_skip_test("the JIT module was not built (LLVM 19 missing)");
  h_setup();
}

int h_nobody_can_use_build(void)
{
  if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0)
    return 0;
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups /bin/sh -c "
           "'test -r %s && test -x %s && test -x %s' 2>/dev/null",
           h_artefact(H_AGENT), h_artefact(H_BLAS_PROG), h_artefact(H_HOST_PROG));
  return system(cmd) == 0;
}
