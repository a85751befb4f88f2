/* SPDX-License-Identifier: MIT */
/* Subprocesses, scratch folders and crafted databases for the inspect tests. */
#define _GNU_SOURCE
#include "helpers.h"

#include "agent/sig.h"
#include "agent/hosts/blas_key.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char *scratch; /* this test's folder, removed when the test process exits */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static void remove_scratch(void)
{
  if (scratch)
    nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

char *scratch_dir(void)
{
  char *d = strdup("/tmp/opjit-inspect-XXXXXX");
  cr_assert(d && mkdtemp(d), "mkdtemp: %s", strerror(errno));
  cr_assert(!scratch, "one scratch folder per test");
  scratch = d;
  atexit(remove_scratch);
  return d;
}

char *path_in(const char *dir, const char *name)
{
  char *p;
  cr_assert(asprintf(&p, "%s/%s", dir, name) > 0);
  return p;
}

int64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* In the child: adds env, execs opjit with args. A program `opjit run` starts waits for its
 * final write until it ends (at the default 2 s, a writer without a CPU that long on a loaded
 * machine loses the run's end, which the tests read); env may set another wait. */
static void exec_opjit(const char *const *env, const char *const *args)
{
  putenv((char *)"OPJIT_EXIT_WAIT_MS=60000");
  for (; env && *env; env++)
    putenv((char *)*env);
  size_t n = 0;
  while (args[n])
    n++;
  char **argv = calloc(n + 2, sizeof *argv);
  argv[0] = (char *)"opjit";
  memcpy(argv + 1, args, n * sizeof *argv);
  execv(OPJIT_EXE, argv);
  _exit(255);
}

int wait_status(int pid)
{
  int st;
  while (waitpid(pid, &st, 0) < 0)
    cr_assert(errno == EINTR, "waitpid: %s", strerror(errno));
  return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

int opjit_spawn(const char *const *env, const char *const *args)
{
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 1);
    dup2(null, 2);
    exec_opjit(env, args);
  }
  return pid;
}

/* Appends what fd has to *buf; returns 0 at end of file. */
static int drain(int fd, char **buf, size_t *len)
{
  char chunk[4096];
  ssize_t r = read(fd, chunk, sizeof chunk);
  if (r <= 0)
    return r < 0 && errno == EINTR;
  *buf = realloc(*buf, *len + (size_t)r + 1);
  memcpy(*buf + *len, chunk, (size_t)r);
  (*buf)[*len += (size_t)r] = 0;
  return 1;
}

#define NOBODY 65534 /* Debian's nobody and nogroup */

uid_t unprivileged_uid(void) { return geteuid() == 0 ? NOBODY : geteuid(); }

/* opjit(), as nobody when unprivileged and this process is root. */
static proc_t run_opjit(int unprivileged, const char *const *env, const char *const *args)
{
  int out[2], err[2];
  cr_assert(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    if (unprivileged && geteuid() == 0 &&
        (setgroups(0, NULL) || setresgid(NOBODY, NOBODY, NOBODY) ||
         setresuid(NOBODY, NOBODY, NOBODY))) {
      fprintf(stderr, "root cannot become nobody here: %s\n", strerror(errno));
      _exit(254);
    }
    if (unprivileged && access(OPJIT_EXE, X_OK) != 0) { /* a checkout under a private folder */
      fprintf(stderr, "nobody cannot run %s: %s\n", OPJIT_EXE, strerror(errno));
      _exit(254);
    }
    exec_opjit(env, args);
  }
  close(out[1]);
  close(err[1]);
  proc_t p = {.out = calloc(1, 1), .err = calloc(1, 1)};
  size_t olen = 0, elen = 0;
  struct pollfd fds[2] = {{.fd = out[0], .events = POLLIN}, {.fd = err[0], .events = POLLIN}};
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    if (poll(fds, 2, -1) < 0) {
      cr_assert(errno == EINTR);
      continue;
    }
    for (int i = 0; i < 2; i++)
      if (fds[i].fd >= 0 && fds[i].revents &&
          !drain(fds[i].fd, i ? &p.err : &p.out, i ? &elen : &olen)) {
        close(fds[i].fd);
        fds[i].fd = -1;
      }
  }
  p.status = wait_status(pid);
  return p;
}

proc_t opjit(const char *const *env, const char *const *args) { return run_opjit(0, env, args); }

proc_t opjit_unprivileged(const char *const *env, const char *const *args)
{
  return run_opjit(1, env, args);
}

void proc_free(proc_t *p)
{
  free(p->out);
  free(p->err);
}

cJSON *proc_json(const proc_t *p)
{
  cJSON *j = cJSON_Parse(p->out);
  cr_assert(j, "not JSON (status %d): %s\nstderr: %s", p->status, p->out, p->err);
  return j;
}

/* The crafted gemm key of size m (what craft_run flushes for a fake_sig_t of that m). */
static ag_sig_t fake_key(int m)
{
  return (ag_sig_t){.host = AG_HOST_ID_BLAS, .op = AG_OP_GEMM, .dtype = AG_F32,
                    .api = AG_API_CBLAS, .order = AG_ROW, .ab = AG_S_ZERO << 4, .m = m, .n = m,
                    .k = m, .lda = m, .ldb = m, .ldc = m};
}

void craft_object(const char *path, int64_t run, int m, const char *cpu)
{
  st_db_t *db;
  char err[512];
  cr_assert_eq(st_open(path, 0, 1000, &db, err, sizeof err), ST_OK, "st_open: %s", err);
  ag_sig_t key = fake_key(m);
  static const char code[] = "\x7f" "ELF crafted";
  st_variant_rec_t v = {.key = &key, .key_len = sizeof key, .status = "ready", .generator = 1,
                        .llvm = "19.1.7", .cpu = "test", .origin = "compiled",
                        .machine_cpu = cpu, .object = code, .object_len = sizeof code,
                        .symbol = "opjit_crafted", .checksum = 1};
  cr_assert_eq(st_run_variants(db, run, &v, 1, NULL, 0), ST_OK);
  st_close(db);
}

int64_t craft_run(const char *path, int pid, int64_t start_ns, int ended, const fake_sig_t *sigs,
                  size_t n)
{
  st_db_t *db;
  char err[512];
  int rc = st_open(path, ST_OPEN_CREATE, 1000, &db, err, sizeof err);
  cr_assert_eq(rc, ST_OK, "st_open: %s", err);
  static const char cmdline[] = "/usr/bin/fake\0--size\0" "42";
  static const char options[] = "MODE=profile\0TIME_EVERY=16";
  st_run_info_t info = {.exe = "/usr/bin/fake", .build_id = "", .cmdline = cmdline,
                        .cmdline_len = sizeof cmdline, .options = options,
                        .options_len = sizeof options, .cpu_model = "Test CPU",
                        .cpu_flags = "fpu avx2 fma", .ncpu = 2, .pid = pid ? pid : getpid(),
                        .ppid = getppid(), .start_ns = start_ns ? start_ns : now_ns(),
                        .agent_version = "test"};
  int64_t run;
  cr_assert_eq(st_run_begin(db, &info, &run), ST_OK);
  ag_sig_t *keys = calloc(n ? n : 1, sizeof *keys);
  st_sig_rec_t *recs = calloc(n ? n : 1, sizeof *recs);
  char (*text)[4][256] = calloc(n ? n : 1, sizeof *text);
  for (size_t i = 0; i < n; i++) {
    int m = sigs[i].m;
    keys[i] = fake_key(m);
    snprintf(text[i][0], sizeof text[i][0], "%016llx", (unsigned long long)ag_sig_hash(&keys[i]));
    ag_sig_opname(&keys[i], text[i][1], sizeof text[i][1]);
    ag_sig_format(&keys[i], text[i][2], sizeof text[i][2]);
    ag_sig_params_json(&keys[i], text[i][3], sizeof text[i][3]);
    recs[i] = (st_sig_rec_t){.key = &keys[i], .key_len = sizeof keys[i],
                             .sig = sigs[i].sig ? sigs[i].sig : text[i][0], .op = text[i][1],
                             .name = text[i][2], .params = text[i][3], .calls = sigs[i].calls,
                             .timed_calls = sigs[i].timed_calls, .timed_ns = sigs[i].timed_ns};
  }
  cr_assert_eq(st_run_flush(db, run, recs, n, 0, info.start_ns + 1000000), ST_OK);
  if (ended)
    cr_assert_eq(st_run_end(db, run, info.start_ns + 2000000, "exited"), ST_OK);
  st_close(db);
  free(keys), free(recs), free(text);
  return run;
}

void craft_samples(const char *path, int64_t run, const fake_samples_t *s)
{
  size_t n = s->npcs + s->nstacks + s->ncounters;
  ag_sig_t *keys = calloc(n ? n : 1, sizeof *keys);
  st_pc_rec_t *pcs = calloc(s->npcs + 1, sizeof *pcs);
  st_stack_rec_t *stacks = calloc(s->nstacks + 1, sizeof *stacks);
  st_counter_rec_t *counters = calloc(s->ncounters + 1, sizeof *counters);
  size_t k = 0;
#define KEY(m) ((m) ? (keys[k] = fake_key(m), &keys[k++]) : NULL)
  for (size_t i = 0; i < s->npcs; i++)
    pcs[i] = (st_pc_rec_t){.key = KEY(s->pcs[i].m), .key_len = sizeof *keys,
                           .module = s->pcs[i].module, .symbol = s->pcs[i].symbol,
                           .samples = s->pcs[i].samples};
  for (size_t i = 0; i < s->nstacks; i++)
    stacks[i] = (st_stack_rec_t){.key = KEY(s->stacks[i].m), .key_len = sizeof *keys,
                                 .stack = s->stacks[i].stack, .samples = s->stacks[i].samples};
  for (size_t i = 0; i < s->ncounters; i++)
    counters[i] = (st_counter_rec_t){.key = KEY(s->counters[i].m), .key_len = sizeof *keys,
                                     .event = s->counters[i].event,
                                     .value = s->counters[i].value};
#undef KEY
  st_db_t *db;
  char err[512];
  cr_assert_eq(st_open(path, 0, 1000, &db, err, sizeof err), ST_OK, "st_open: %s", err);
  st_samples_t rec = {.sampling = s->sampling, .pcs = pcs, .npcs = s->npcs, .stacks = stacks,
                      .nstacks = s->nstacks, .counters = counters, .ncounters = s->ncounters};
  int rc = st_run_samples(db, run, &rec);
  cr_assert_eq(rc, ST_OK, "st_run_samples: %s", st_errstr(rc));
  st_close(db);
  free(keys), free(pcs), free(stacks), free(counters);
}

void craft_variants(const char *path, int64_t run, const fake_variant_t *v, size_t nv,
                    const fake_event_t *ev, size_t nev)
{
  ag_sig_t *keys = calloc(nv + nev + 1, sizeof *keys);
  st_variant_rec_t *vr = calloc(nv + 1, sizeof *vr);
  st_event_rec_t *er = calloc(nev + 1, sizeof *er);
  st_db_t *db;
  char err[512];
  cr_assert_eq(st_open(path, 0, 1000, &db, err, sizeof err), ST_OK, "st_open: %s", err);
  sqlite3_stmt *st;
  int64_t start = 0;
  cr_assert_eq(sqlite3_prepare_v2(st_sqlite(db), "SELECT start_ns FROM runs WHERE id = ?", -1,
                                  &st, NULL), SQLITE_OK);
  sqlite3_bind_int64(st, 1, run);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "no run %lld", (long long)run);
  start = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  for (size_t i = 0; i < nv; i++) {
    keys[i] = fake_key(v[i].m);
    vr[i] = (st_variant_rec_t){.key = &keys[i], .key_len = sizeof *keys, .status = v[i].status,
                               .generator = 1, .llvm = v[i].llvm ? v[i].llvm : "19.1.7",
                               .cpu = v[i].cpu ? v[i].cpu : "znver4",
                               .compile_ns = v[i].compile_ns, .calls = v[i].calls,
                               .timed_calls = v[i].timed_calls, .timed_ns = v[i].timed_ns};
  }
  for (size_t i = 0; i < nev; i++) {
    keys[nv + i] = fake_key(ev[i].m);
    er[i] = (st_event_rec_t){.key = &keys[nv + i], .key_len = sizeof *keys,
                             .time_ns = start + ev[i].offset_ns, .kind = ev[i].kind,
                             .detail = ev[i].detail};
  }
  int rc = st_run_variants(db, run, vr, nv, er, nev);
  cr_assert_eq(rc, ST_OK, "st_run_variants: %s", st_errstr(rc));
  st_close(db);
  free(keys), free(vr), free(er);
}

void sql_exec(const char *path, const char *sql)
{
  sqlite3 *db;
  char *msg = NULL;
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
  cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
  sqlite3_close(db);
}

int dead_pid(void)
{
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0)
    _exit(0);
  wait_status(pid);
  return pid;
}
