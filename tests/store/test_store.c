/* SPDX-License-Identifier: MIT */
/* The store: schema creation and migration, refusal of what is not ours, cumulative flushes,
 * crash safety under SIGKILL, and gc. Real SQLite files in a temporary folder. */
#include "store/store.h"
#include "tests/common/fixture.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char path[128]; /* a store file two folders below fx_dir (st_open makes them) */

static void setup(void)
{
  fx_setup();
  snprintf(path, sizeof path, "%s/sub/deeper/p.db", fx_dir);
}

TestSuite(store, .init = setup, .fini = fx_teardown);


static const char cmdline[] = "prog\0--flag\0x y";
static const char options[] = "MODE=profile\0DB=/x";

static int64_t begin(st_db_t *db, int pid)
{
  st_run_info_t in = {.exe = "/bin/prog", .build_id = "abcd", .cmdline = cmdline,
                      .cmdline_len = sizeof cmdline, .options = options,
                      .options_len = sizeof options, .cpu_model = "Test CPU",
                      .cpu_flags = "fpu avx2 fma", .ncpu = 2, .pid = pid, .ppid = 1,
                      .start_ns = 1000, .agent_version = "test"};
  int64_t run = 0;
  cr_assert_eq(st_run_begin(db, &in, &run), ST_OK);
  cr_assert_gt(run, 0);
  return run;
}

static st_sig_rec_t rec(const char *sig, uint64_t calls)
{
  static char keys[8][32];
  static int next;
  char *key = keys[next++ % 8];
  memset(key, 0, 32);
  memcpy(key, sig, strlen(sig));
  return (st_sig_rec_t){.key = key, .key_len = 32, .sig = sig, .op = "sgemm",
                        .name = "sgemm NN 4x4x4 β=0", .params = "{}", .calls = calls,
                        .timed_calls = calls / 2, .timed_ns = calls * 10};
}

Test(store, creates_schema_private_file_and_folders)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  int v;
  cr_assert_eq(st_schema_version(db, &v), ST_OK);
  cr_assert_eq(v, ST_SCHEMA_VERSION);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM meta WHERE value='opjit'"), 1);
  st_close(db);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600, "db mode %o", st.st_mode & 0777);
  char folder[128];
  snprintf(folder, sizeof folder, "%s/sub/deeper", fx_dir);
  cr_assert_eq(stat(folder, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700, "folder mode %o", st.st_mode & 0777);
}

/* A new file is created without syncs (nothing in it to lose); its connection, and every later
 * one, then syncs as NORMAL says (1). */
Test(store, a_new_database_is_left_synchronous_normal_in_wal_mode)
{
  for (int open = 0; open < 2; open++) { /* created, then opened again */
    st_db_t *db = fx_open(path, ST_OPEN_CREATE);
    cr_assert_eq(fx_query(db, "PRAGMA synchronous"), 1, "open %d", open);
    cr_assert_eq(fx_query(db, "SELECT count(*) FROM pragma_journal_mode WHERE journal_mode='wal'"),
                 1, "open %d", open);
    st_close(db);
  }
}

Test(store, migrates_from_version_1_keeping_data)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE | ST_OPEN_NO_MIGRATE);
  cr_assert_eq(st_migrate_to(db, 1), ST_OK);
  int v;
  st_schema_version(db, &v);
  cr_assert_eq(v, 1);
  cr_assert_eq(sqlite3_exec(st_sqlite(db),
                            "INSERT INTO programs VALUES(1, '/bin/old', '');"
                            "INSERT INTO machines VALUES(1, 'cpu', 'f', 1);"
                            "INSERT INTO runs(id, program_id, machine_id, pid, ppid, argv, options,"
                            " agent_version, start_ns) VALUES(7, 1, 1, 5, 1, '[]', '{}', 'v1', 9);",
                            NULL, NULL, NULL),
               SQLITE_OK);
  /* A version-1 file has no parent_run column yet. */
  cr_assert_neq(sqlite3_exec(st_sqlite(db), "SELECT parent_run FROM runs", NULL, NULL, NULL),
                SQLITE_OK);
  st_close(db);
  db = fx_open(path, ST_OPEN_CREATE);
  st_schema_version(db, &v);
  cr_assert_eq(v, ST_SCHEMA_VERSION);
  cr_assert_eq(fx_query(db, "SELECT pid FROM runs WHERE id=7"), 5);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM runs WHERE parent_run IS NULL AND overflow_calls=0"), 1);
  /* Version 5 rebuilt programs with a script column: the run still finds its program. */
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM runs r JOIN programs p ON p.id = r.program_id"
                         " WHERE p.exe='/bin/old' AND p.script=''"), 1);
  st_close(db);
}

static void expect_refused(int want, const char *words)
{
  st_db_t *db = NULL;
  char err[512] = "";
  int rc = st_open(path, ST_OPEN_CREATE, 100, &db, err, sizeof err);
  cr_assert_eq(rc, want, "got %d (%s): %s", rc, st_errstr(rc), err);
  cr_assert_null(db);
  cr_assert(strstr(err, words), "message '%s' lacks '%s'", err, words);
  rc = st_open(path, ST_OPEN_READONLY, 100, &db, err, sizeof err);
  cr_assert_eq(rc, want, "read-only open: %d", rc);
}

/* sql's first value on the file at path, read with plain SQLite (-1000 when no row). */
static int64_t raw_query(const char *sql)
{
  sqlite3 *raw;
  cr_assert_eq(sqlite3_open_v2(path, &raw, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  int64_t v = -1000;
  sqlite3_stmt *st;
  cr_assert_eq(sqlite3_prepare_v2(raw, sql, -1, &st, NULL), SQLITE_OK);
  if (sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(raw);
  return v;
}

Test(store, follows_no_dangling_link_and_opens_no_device)
{
  char target[192], sub[160];
  snprintf(target, sizeof target, "%s/elsewhere.db", fx_dir);
  snprintf(sub, sizeof sub, "%s/sub", fx_dir);
  cr_assert_eq(mkdir(sub, 0700), 0);
  snprintf(sub, sizeof sub, "%s/sub/deeper", fx_dir);
  cr_assert_eq(mkdir(sub, 0700), 0);
  cr_assert_eq(symlink(target, path), 0);
  expect_refused(ST_EIO, "symbolic link to nothing");
  cr_assert_neq(access(target, F_OK), 0, "the link's target was created");
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(symlink("/dev/null", path), 0);
  expect_refused(ST_EIO, "not a regular file");
  cr_assert_neq(access("/dev/null-journal", F_OK), 0, "a journal beside the device");
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(mkdir(path, 0700), 0);
  expect_refused(ST_EIO, "not a regular file");
  cr_assert_eq(rmdir(path), 0);
  /* A link to a real database is the user's choice: followed. */
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  st_close(db);
  cr_assert_eq(rename(path, target), 0);
  cr_assert_eq(symlink(target, path), 0);
  db = fx_open(path, ST_OPEN_CREATE);
  st_close(db);
}

Test(store, a_profile_on_read_only_media_is_read_and_none_is_created_there)
{
  char mnt[160], copy[200], fresh[200], cmd[512];
  snprintf(mnt, sizeof mnt, "%s/ro", fx_dir);
  cr_assert_eq(mkdir(mnt, 0700), 0);
  if (geteuid() != 0 || mount("opjit-test", mnt, "tmpfs", 0, "size=1m") != 0)
    cr_skip_test("needs root to mount a read-only file system");
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  st_close(db);
  snprintf(copy, sizeof copy, "%s/p.db", mnt);
  snprintf(cmd, sizeof cmd, "cp %s %s", path, copy);
  cr_assert_eq(system(cmd), 0);
  int ro = mount("opjit-test", mnt, "tmpfs", MS_REMOUNT | MS_RDONLY, "size=1m");
  char err[512] = "";
  int rc = ro ? ST_OK : st_open(copy, ST_OPEN_READONLY, 100, &db, err, sizeof err);
  int version = -1;
  if (!ro && rc == ST_OK) {
    rc = st_schema_version(db, &version);
    st_close(db);
  }
  snprintf(fresh, sizeof fresh, "%s/new.db", mnt);
  char err2[512] = "";
  int rc2 = ro ? ST_OK : st_open(fresh, ST_OPEN_CREATE, 100, &db, err2, sizeof err2);
  umount(mnt);
  cr_assert_eq(ro, 0, "remount read-only: %s", strerror(errno));
  cr_assert_eq(rc, ST_OK, "read-only media: %s", err);
  cr_assert_eq(version, ST_SCHEMA_VERSION);
  cr_assert_eq(rc2, ST_EREADONLY, "%d: %s", rc2, err2);
  cr_assert(strstr(err2, "cannot create") && strstr(err2, "Read-only"), "%s", err2);
}

Test(store, refuses_a_newer_schema)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  cr_assert_eq(sqlite3_exec(st_sqlite(db), "PRAGMA user_version=99", NULL, NULL, NULL), SQLITE_OK);
  st_close(db);
  expect_refused(ST_ENEWER, "newer");
  cr_assert_eq(raw_query("PRAGMA user_version"), 99, "a refused file must not be downgraded");
}

Test(store, refuses_a_negative_schema_version_and_never_rewrites_it)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  begin(db, 100);
  cr_assert_eq(sqlite3_exec(st_sqlite(db), "PRAGMA user_version=-1", NULL, NULL, NULL), SQLITE_OK);
  st_close(db);
  expect_refused(ST_ECORRUPT, "schema version -1, which no opjit writes");
  char err[512] = "";
  cr_assert_eq(st_open(path, ST_OPEN_NO_MIGRATE, 100, &db, err, sizeof err), ST_ECORRUPT);
  cr_assert_eq(raw_query("PRAGMA user_version"), -1, "a refused file must not be rewritten");
  cr_assert_eq(raw_query("SELECT count(*) FROM runs"), 1, "its runs stay");
}

Test(store, migrate_to_stops_at_a_negative_version)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE | ST_OPEN_NO_MIGRATE);
  cr_assert_eq(st_migrate_to(db, 2), ST_OK);
  cr_assert_eq(sqlite3_exec(st_sqlite(db), "PRAGMA user_version=-5", NULL, NULL, NULL), SQLITE_OK);
  cr_expect_eq(st_migrate_to(db, ST_SCHEMA_VERSION), ST_ECORRUPT);
  cr_expect_eq(st_migrate_to(db, -1), ST_ECORRUPT);
  cr_expect_eq(fx_query(db, "PRAGMA user_version"), -5);
  cr_expect_eq(fx_query(db, "SELECT count(*) FROM sqlite_master WHERE name = 'variants'"), 0,
               "no migration ran");
  st_close(db);
}

Test(store, refuses_an_sqlite_file_that_is_not_ours)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE | ST_OPEN_NO_MIGRATE);
  cr_assert_eq(sqlite3_exec(st_sqlite(db), "CREATE TABLE users(name TEXT)", NULL, NULL, NULL),
               SQLITE_OK);
  st_close(db);
  expect_refused(ST_ENOTOURS, "not an opjit profile");
}

Test(store, refuses_a_garbage_file)
{
  st_close(fx_open(path, ST_OPEN_CREATE));
  FILE *f = fopen(path, "w");
  for (int i = 0; i < 8192; i++)
    fputc((i * 7919) & 0xff, f);
  fclose(f);
  char wal[160];
  snprintf(wal, sizeof wal, "%s-wal", path);
  unlink(wal);
  expect_refused(ST_ECORRUPT, "not an SQLite database");
}

Test(store, flushes_are_cumulative_not_additive)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  int64_t run = begin(db, 42);
  st_sig_rec_t r[2] = {rec("aaaa", 10), rec("bbbb", 3)};
  cr_assert_eq(st_run_flush(db, run, r, 2, 0, 2000), ST_OK);
  r[0].calls = 25;
  cr_assert_eq(st_run_flush(db, run, r, 2, 4, 3000), ST_OK);
  cr_assert_eq(st_run_flush(db, run, r, 1, 4, 3500), ST_OK, "repeating a flush is harmless");
  cr_assert_eq(st_run_end(db, run, 4000, "exited"), ST_OK);
  cr_assert_eq(fx_query(db, "SELECT calls FROM run_sigs JOIN signatures ON id=sig_id WHERE sig='aaaa'"), 25);
  cr_assert_eq(fx_query(db, "SELECT calls FROM run_sigs JOIN signatures ON id=sig_id WHERE sig='bbbb'"), 3);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM signatures"), 2);
  cr_assert_eq(fx_query(db, "SELECT overflow_calls FROM runs"), 4);
  cr_assert_eq(fx_query(db, "SELECT end_ns FROM runs WHERE status='exited'"), 4000);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM runs WHERE argv='[\"prog\",\"--flag\",\"x y\"]'"), 1);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM runs WHERE options='{\"MODE\":\"profile\",\"DB\":\"/x\"}'"), 1);
  /* A second run of the same program on the same machine shares program and machine rows. */
  begin(db, 43);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM programs"), 1);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM machines"), 1);
  st_close(db);
}

Test(store, sigkill_mid_write_keeps_every_committed_run)
{
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  st_close(fx_open(path, ST_OPEN_CREATE));
  pid_t pid = fork();
  if (pid == 0) { /* child: record runs as fast as it can, report each commit */
    close(fds[0]);
    st_db_t *db;
    if (st_open(path, ST_OPEN_CREATE, 1000, &db, NULL, 0))
      _exit(1);
    for (int i = 1;; i++) {
      int64_t run = begin(db, i);
      st_sig_rec_t r[3] = {rec("k1", (uint64_t)i), rec("k2", 2 * (uint64_t)i), rec("k3", 7)};
      for (int j = 0; j < 5; j++)
        st_run_flush(db, run, r, 3, 0, 10 + j);
      if (st_run_end(db, run, 99, "exited"))
        _exit(2);
      if (write(fds[1], &i, sizeof i) != sizeof i)
        _exit(3);
    }
  }
  close(fds[1]);
  int last = 0, got;
  while (last < 40 && read(fds[0], &got, sizeof got) == sizeof got)
    last = got;
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  while (read(fds[0], &got, sizeof got) == sizeof got) /* commits reported before the kill */
    last = got;
  close(fds[0]);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child ended otherwise: %d", status);
  cr_assert_geq(last, 40);
  st_db_t *db = fx_open(path, ST_OPEN_READONLY);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check='ok'"), 1);
  cr_assert_geq(fx_query(db, "SELECT count(*) FROM runs WHERE status='exited'"), last);
  char sql[256];
  snprintf(sql, sizeof sql,
           "SELECT count(*) FROM runs r JOIN run_sigs s ON s.run_id=r.id WHERE r.status='exited'"
           " AND r.pid<=%d AND ((s.calls=r.pid) OR (s.calls=2*r.pid) OR s.calls=7)", last);
  cr_assert_eq(fx_query(db, sql), 3 * last, "every committed run keeps its three signatures");
  st_close(db);
}

Test(store, gc_keeps_the_newest_runs_and_drops_orphans)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  for (int i = 0; i < 5; i++) {
    int64_t run = begin(db, 900000 + i); /* pids that do not exist */
    st_sig_rec_t r = rec(i < 4 ? "old" : "new", 1);
    st_run_flush(db, run, &r, 1, 0, 5);
    st_run_end(db, run, 10, "exited");
  }
  st_gc_result_t res;
  cr_assert_eq(st_gc(db, 1, 0, &res), ST_OK);
  cr_assert_eq(res.runs, 4);
  cr_assert_eq(res.signatures, 1, "the signature only old runs used is gone");
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM runs"), 1);
  cr_assert_eq(fx_query(db, "SELECT sig FROM signatures") != -1, 1);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM signatures WHERE sig='new'"), 1);
  st_close(db);
}

Test(store, gc_never_collects_a_live_running_run)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  begin(db, getpid()); /* this process: alive, still running */
  int64_t done = begin(db, 900001);
  st_run_end(db, done, 10, "exited");
  st_gc_result_t res;
  cr_assert_eq(st_gc(db, 0, 0, &res), ST_OK);
  cr_assert_eq(res.runs, 1);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM runs WHERE status='running'"), 1);
  st_close(db);
}

Test(store, fork_lineage_links_whichever_run_is_recorded_first)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  st_run_info_t child = {.exe = "/bin/p", .build_id = "", .cmdline = "p", .cmdline_len = 2,
                         .options = "", .options_len = 0, .cpu_model = "c", .cpu_flags = "f",
                         .ncpu = 1, .pid = 200, .ppid = 100, .parent_start_ns = 5000,
                         .start_ns = 6000, .agent_version = "t"};
  st_run_info_t parent = child;
  parent.pid = 100, parent.ppid = 1, parent.parent_start_ns = 0, parent.start_ns = 5000;
  int64_t c1, p, c2;
  cr_assert_eq(st_run_begin(db, &child, &c1), ST_OK); /* the child writes first */
  cr_assert_eq(st_run_begin(db, &parent, &p), ST_OK);
  child.pid = 201, child.start_ns = 7000;
  cr_assert_eq(st_run_begin(db, &child, &c2), ST_OK); /* a later child finds it directly */
  char sql[128];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE parent_run=%lld", (long long)p);
  cr_assert_eq(fx_query(db, sql), 2);
  snprintf(sql, sizeof sql, "SELECT parent_run IS NULL FROM runs WHERE id=%lld", (long long)p);
  cr_assert_eq(fx_query(db, sql), 1);
  st_close(db);
}

Test(store, samples_are_cumulative_and_host_time_is_sig_zero)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  int64_t run = begin(db, 77);
  st_sig_rec_t r = rec("gemm", 10);
  cr_assert_eq(st_run_flush(db, run, &r, 1, 0, 5), ST_OK);
  st_pc_rec_t pcs[2] = {{r.key, r.key_len, "/lib/libblas.so", "sgemm_kernel", 30},
                        {NULL, 0, "/bin/prog", "main", 10}};
  st_stack_rec_t stacks[1] = {{r.key, r.key_len, "prog`main;libblas.so`sgemm_", 30}};
  st_counter_rec_t ctr[1] = {{r.key, r.key_len, "instructions", 1000}};
  st_samples_t s = {"{\"mode\":\"perf\"}", pcs, 2, stacks, 1, ctr, 1};
  cr_assert_eq(st_run_samples(db, run, &s), ST_OK);
  pcs[0].samples = 45;
  cr_assert_eq(st_run_samples(db, run, &s), ST_OK);
  cr_assert_eq(fx_query(db, "SELECT samples FROM run_pcs JOIN symbols ON id=symbol_id"
                         " WHERE name='sgemm_kernel'"), 45, "overwritten, not added");
  cr_assert_eq(fx_query(db, "SELECT samples FROM run_pcs WHERE sig_id=0"), 10);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM symbols"), 2);
  cr_assert_eq(fx_query(db, "SELECT samples FROM run_stacks"), 30);
  cr_assert_eq(fx_query(db, "SELECT value FROM run_counters WHERE event='instructions'"), 1000);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM runs WHERE sampling LIKE '%perf%'"), 1);
  st_pc_rec_t unknown = {"never-flushed-key-never-flushed!", 32, "m", "s", 1};
  st_samples_t bad = {NULL, &unknown, 1, NULL, 0, NULL, 0};
  cr_assert_eq(st_run_samples(db, run, &bad), ST_ENOENT);
  st_close(db);
}

/* A run of script (of /bin/prog) on the test CPU. */
static int64_t begin_script(st_db_t *db, const char *script, int pid)
{
  st_run_info_t in = {.exe = "/bin/prog", .build_id = "abcd", .script = script,
                      .cmdline = cmdline, .cmdline_len = sizeof cmdline, .options = options,
                      .options_len = sizeof options, .cpu_model = "Test CPU",
                      .cpu_flags = "fpu avx2 fma", .ncpu = 2, .pid = pid, .ppid = 1,
                      .start_ns = 1000 + pid, .agent_version = "test", .warm_ns = 1234};
  int64_t run = 0;
  cr_assert_eq(st_run_begin(db, &in, &run), ST_OK);
  return run;
}

static st_hot_t *find_hot(st_profile_t *p, const char *sig)
{
  for (size_t i = 0; i < p->n; i++)
    if (strcmp((const char *)p->sigs[i].key, sig) == 0)
      return &p->sigs[i];
  return NULL;
}

Test(store, profile_weighs_runs_by_age_and_returns_objects)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  /* Runs 1-2 call "old", runs 3-4 call "new"; another script's run calls "other". */
  for (int r = 1; r <= 4; r++) {
    int64_t run = begin_script(db, "/w/a.py", r);
    st_sig_rec_t one = rec(r <= 2 ? "old" : "new", 1000);
    cr_assert_eq(st_run_flush(db, run, &one, 1, 0, 5), ST_OK);
  }
  int64_t brun = begin_script(db, "/w/b.py", 9);
  st_sig_rec_t other = rec("other", 5000);
  cr_assert_eq(st_run_flush(db, brun, &other, 1, 0, 5), ST_OK);
  cr_assert_eq(fx_query(db, "SELECT warm_ns FROM runs WHERE id=1"), 1234);

  /* An object for "new" on cpuA and one for "old" on cpuB. */
  st_sig_rec_t k_new = rec("new", 0), k_old = rec("old", 0);
  const char code[] = "\x7f" "ELF pretend object bytes";
  st_variant_rec_t v[2] = {
      {.key = k_new.key, .key_len = 32, .status = "ready", .generator = 3, .llvm = "19.1.7",
       .cpu = "znver4", .origin = "compiled", .machine_cpu = "cpuA", .object = code,
       .object_len = sizeof code, .symbol = "opjit_new", .checksum = 42},
      {.key = k_old.key, .key_len = 32, .status = "ready", .generator = 3, .llvm = "19.1.7",
       .cpu = "znver4", .origin = "compiled", .machine_cpu = "cpuB", .object = code,
       .object_len = sizeof code, .symbol = "opjit_old", .checksum = 43}};
  cr_assert_eq(st_run_variants(db, 4, v, 2, NULL, 0), ST_OK);

  st_run_info_t prog = {.exe = "/bin/prog", .build_id = "abcd", .script = "/w/a.py",
                        .cpu_model = "Test CPU", .cpu_flags = "fpu avx2 fma"};
  st_profile_t p;
  cr_assert_eq(st_profile(db, &prog, "cpuA", 1.0, 64, &p), ST_OK);
  cr_assert_eq(p.runs, 4);
  cr_assert_eq(p.n, 2, "only this script's signatures");
  /* Weights 1, 1/2, 1/4, 1/8, newest first. */
  st_hot_t *hn = find_hot(&p, "new"), *ho = find_hot(&p, "old");
  cr_assert(hn && ho);
  cr_assert_float_eq(hn->score, 1000 * 1.5, 1e-9);
  cr_assert_float_eq(ho->score, 1000 * 0.375, 1e-9);
  cr_assert_eq(&p.sigs[0], hn, "hottest first");
  cr_assert_float_eq(hn->mean_ns, 20.0, 1e-9); /* rec(): timed_ns / timed_calls = 10 n / (n/2) */
  cr_assert_gt(hn->object_id, 0);
  cr_assert_str_eq(hn->cpu, "cpuA");
  cr_assert_str_eq(hn->symbol, "opjit_new");
  cr_assert_eq(hn->generator, 3);
  cr_assert_eq(hn->checksum, 42);
  cr_assert_eq(hn->code_len, sizeof code);
  cr_assert(memcmp(hn->code, code, sizeof code) == 0);
  cr_assert_str_eq(ho->cpu, "cpuB", "another CPU's object when there is none for ours");
  st_profile_free(&p);

  /* A slower decay weighs the old runs more. */
  cr_assert_eq(st_profile(db, &prog, "cpuA", 1000.0, 64, &p), ST_OK);
  cr_assert_float_eq(find_hot(&p, "old")->score, 2000.0, 5.0);
  st_profile_free(&p);
  /* The window: the newest 2 runs only. */
  cr_assert_eq(st_profile(db, &prog, "cpuA", 1.0, 2, &p), ST_OK);
  cr_assert_eq(p.runs, 2);
  cr_assert_eq(p.n, 1);
  st_profile_free(&p);

  /* Replacing, then dropping, an object. */
  v[0].generator = 4;
  cr_assert_eq(st_run_variants(db, 4, v, 1, NULL, 0), ST_OK);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM objects"), 2);
  cr_assert_eq(fx_query(db, "SELECT generator FROM objects WHERE cpu='cpuA'"), 4);
  v[0].object = NULL, v[0].drop_object = 1;
  cr_assert_eq(st_run_variants(db, 4, v, 1, NULL, 0), ST_OK);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM objects WHERE cpu='cpuA'"), 0);
  cr_assert_eq(fx_query(db, "SELECT pre_calls FROM variants WHERE run_id=4 AND origin='compiled'"), 0);
  st_close(db);
}

/* st_object: a signature's kernel for one CPU, whichever program's run stored it. */
Test(store, object_and_shelf_find_the_kernels_for_one_cpu_whoever_stored_them)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  int64_t run = begin_script(db, "/w/a.py", 1);
  st_sig_rec_t r = rec("gemm", 100);
  cr_assert_eq(st_run_flush(db, run, &r, 1, 0, 5), ST_OK);
  const char code[] = "\x7f" "ELF pretend object bytes";
  st_variant_rec_t v = {.key = r.key, .key_len = 32, .status = "ready", .generator = 3,
                        .llvm = "19.1.7", .cpu = "znver4", .origin = "compiled",
                        .machine_cpu = "cpuA", .object = code, .object_len = sizeof code,
                        .symbol = "opjit_gemm", .checksum = 42};
  cr_assert_eq(st_run_variants(db, run, &v, 1, NULL, 0), ST_OK);

  st_hot_t h;
  cr_assert_eq(st_object(db, r.key, r.key_len, "cpuA", &h), ST_OK);
  cr_assert_gt(h.object_id, 0);
  cr_assert_eq(h.key_len, r.key_len);
  cr_assert(memcmp(h.key, r.key, r.key_len) == 0);
  cr_assert_str_eq(h.cpu, "cpuA");
  cr_assert_str_eq(h.llvm, "19.1.7");
  cr_assert_str_eq(h.symbol, "opjit_gemm");
  cr_assert_eq(h.generator, 3);
  cr_assert_eq(h.checksum, 42);
  cr_assert_eq(h.code_len, sizeof code);
  cr_assert(memcmp(h.code, code, sizeof code) == 0);
  cr_assert_eq(h.mine, 0, "never this profile's to drop");
  cr_assert_eq(h.has_judge, 0, "no rounds pooled yet");
  st_hot_free(&h);
  cr_assert_null(h.code);

  cr_assert_eq(st_object(db, r.key, r.key_len, "cpuB", &h), ST_OK);
  cr_assert_eq(h.object_id, 0, "another CPU's object is not this one's");
  st_hot_free(&h);
  st_sig_rec_t u = rec("unknown", 1);
  cr_assert_eq(st_object(db, u.key, u.key_len, "cpuA", &h), ST_OK);
  cr_assert_eq(h.object_id, 0, "a signature never recorded");
  st_hot_free(&h);

  /* The shelf: the keys with an object for a CPU, in memcmp order, of the length asked. */
  st_sig_rec_t a = rec("aaa", 1);
  cr_assert_eq(st_run_flush(db, run, &a, 1, 0, 6), ST_OK);
  st_variant_rec_t va = v;
  va.key = a.key, va.symbol = "opjit_aaa";
  cr_assert_eq(st_run_variants(db, run, &va, 1, NULL, 0), ST_OK);
  void *keys;
  size_t n;
  cr_assert_eq(st_shelf(db, "cpuA", 3, "19.1.7", r.key_len, &keys, &n), ST_OK);
  cr_assert_eq(n, 2);
  cr_assert(memcmp(keys, a.key, a.key_len) == 0, "\"aaa\" first");
  cr_assert(memcmp((char *)keys + r.key_len, r.key, r.key_len) == 0);
  free(keys);
  cr_assert_eq(st_shelf(db, "cpuB", 3, "19.1.7", r.key_len, &keys, &n), ST_OK);
  cr_assert_eq(n, 0, "none for another CPU");
  free(keys);
  cr_assert_eq(st_shelf(db, "cpuA", 4, "19.1.7", r.key_len, &keys, &n), ST_OK);
  cr_assert_eq(n, 0, "none for another generator");
  free(keys);
  cr_assert_eq(st_shelf(db, "cpuA", 3, "20.1.0", r.key_len, &keys, &n), ST_OK);
  cr_assert_eq(n, 0, "none for another LLVM");
  free(keys);
  cr_assert_eq(st_shelf(db, "cpuA", 3, "19.1.7", r.key_len + 1, &keys, &n), ST_OK);
  cr_assert_eq(n, 0, "none of another key length");
  free(keys);
  st_close(db);
}

/* st_crashed: the run, of any program, whose kernel for a signature (one generator, one CPU)
 * crashed it, as st_crash recorded it. */
Test(store, crashed_names_the_run_a_kernel_crashed_whichever_program_it_was)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  int64_t run = begin_script(db, "/w/a.py", 7);
  st_sig_rec_t r = rec("gemm", 100), u = rec("unknown", 1);
  cr_assert_eq(st_run_flush(db, run, &r, 1, 0, 5), ST_OK);
  /* The run had flushed its variant (under the JIT's CPU name) before it crashed. */
  st_variant_rec_t v = {.key = r.key, .key_len = 32, .status = "ready", .generator = 3,
                        .llvm = "19.1.7", .cpu = "znver4", .origin = "compiled",
                        .machine_cpu = "cpuA"};
  cr_assert_eq(st_run_variants(db, run, &v, 1, NULL, 0), ST_OK);
  int64_t found = -1;
  cr_assert_eq(st_crashed(db, r.key, r.key_len, "cpuA", 3, &found), ST_OK);
  cr_assert_eq(found, 0, "no crash yet");
  st_crash_t c = {.run_id = run, .pid = 7, .time_ns = 99, .key = r.key, .key_len = r.key_len,
                  .generator = 3, .llvm = "19.1.7", .cpu = "cpuA", .detail = "crashed in it"};
  st_crash_result_t res;
  cr_assert_eq(st_crash(db, &c, &res), ST_OK);
  cr_assert(res.recorded);
  begin_script(db, "/w/b.py", 8); /* another program's run asks */
  cr_assert_eq(st_crashed(db, r.key, r.key_len, "cpuA", 3, &found), ST_OK);
  cr_assert_eq(found, run);
  cr_assert_eq(st_crashed(db, r.key, r.key_len, "cpuA", 4, &found), ST_OK);
  cr_assert_eq(found, 0, "another generator's kernel did not crash");
  cr_assert_eq(st_crashed(db, r.key, r.key_len, "cpuB", 3, &found), ST_OK);
  cr_assert_eq(found, 0, "nor this one on another CPU");
  cr_assert_eq(st_crashed(db, u.key, u.key_len, "cpuA", 3, &found), ST_OK);
  cr_assert_eq(found, 0, "a signature never recorded");
  st_close(db);
}

Test(store, profile_gives_each_of_many_signatures_its_own_figures_and_object)
{
  /* 40 signatures, each its own number of calls, the first half called in run 1 and the second
   * in run 2 (the profile reads the newest run first, so its signatures by id come out of
   * order), their objects stored in the reverse order: each signature's row must carry its own
   * score and its own object, whatever order the profile's statements read them in. */
  enum { N = 40 };
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  int64_t run1 = begin_script(db, "/w/many.py", 1), run2 = begin_script(db, "/w/many.py", 2);
  static char keys[N][32], names[N][8], syms[N][16];
  st_sig_rec_t recs[N];
  for (int i = 0; i < N; i++) {
    snprintf(names[i], sizeof names[i], "s%02d", i);
    snprintf(syms[i], sizeof syms[i], "opjit_s%02d", i);
    memcpy(keys[i], names[i], strlen(names[i]));
    recs[i] = (st_sig_rec_t){.key = keys[i], .key_len = 32, .sig = names[i], .op = "sgemm",
                             .name = "sgemm NN 4x4x4 β=0", .params = "{}",
                             .calls = 100 + (uint64_t)i * 7, .timed_calls = 10,
                             .timed_ns = 100 * (uint64_t)(i + 1)};
  }
  cr_assert_eq(st_run_flush(db, run1, recs, N / 2, 0, 5), ST_OK);
  cr_assert_eq(st_run_flush(db, run2, recs + N / 2, N / 2, 0, 5), ST_OK);
  const char code[] = "\x7f" "ELF pretend object bytes";
  for (int i = N - 1; i >= 0; i--) {
    st_variant_rec_t v = {.key = keys[i], .key_len = 32, .status = "ready", .generator = 3,
                          .llvm = "19.1.7", .cpu = "znver4", .origin = "compiled",
                          .machine_cpu = "cpuA", .object = code,
                          .object_len = sizeof code - (size_t)(i % 5),
                          .symbol = syms[i], .checksum = 1000 + (uint64_t)i};
    cr_assert_eq(st_run_variants(db, i < N / 2 ? run1 : run2, &v, 1, NULL, 0), ST_OK);
  }
  st_run_info_t prog = {.exe = "/bin/prog", .build_id = "abcd", .script = "/w/many.py",
                        .cpu_model = "Test CPU", .cpu_flags = "fpu avx2 fma"};
  st_profile_t p;
  cr_assert_eq(st_profile(db, &prog, "cpuA", 1.0, 64, &p), ST_OK);
  cr_assert_eq(p.n, N, "every signature once: %zu of %d", p.n, N);
  for (int i = 0; i < N; i++) {
    st_hot_t *h = find_hot(&p, names[i]);
    cr_assert(h, "%s is in the profile", names[i]);
    /* decay 1: run 2, the newest, weighs 1, run 1 1/2 */
    cr_assert_float_eq(h->score, (100.0 + i * 7) * (i < N / 2 ? 0.5 : 1.0), 1e-9, "%s's calls",
                       names[i]);
    cr_assert_float_eq(h->mean_ns, 10.0 * (i + 1), 1e-9, "%s's mean", names[i]);
    cr_assert_str_eq(h->symbol, syms[i], "%s's object", names[i]);
    cr_assert_eq(h->checksum, 1000 + (uint64_t)i);
    cr_assert_eq(h->code_len, sizeof code - (size_t)(i % 5));
  }
  for (size_t i = 1; i < p.n; i++)
    cr_assert_geq(p.sigs[i - 1].score, p.sigs[i].score, "hottest first");
  st_profile_free(&p);
  st_close(db);
}

Test(store, profile_says_when_the_newest_variant_of_a_signature_was_demoted)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  /* Runs 1-3 call "a" and "b"; run 1's variant of "a" was demoted, run 2 had none, run 3's was
   * ready; "b"'s variant was ready in run 1 and demoted in run 2 (generator 7), none in run 3. */
  for (int r = 1; r <= 3; r++) {
    int64_t run = begin_script(db, "/w/a.py", r);
    st_sig_rec_t recs[2] = {rec("a", 100), rec("b", 100)};
    cr_assert_eq(st_run_flush(db, run, recs, 2, 0, 5), ST_OK);
  }
  st_sig_rec_t ka = rec("a", 0), kb = rec("b", 0);
  st_variant_rec_t v = {.key_len = 32, .generator = 7, .llvm = "19.1.7", .cpu = "x",
                        .origin = "compiled", .machine_cpu = "cpuA"};
  const struct { int run; const void *key; const char *status; } rows[] = {
      {1, ka.key, "demoted"}, {3, ka.key, "ready"}, {1, kb.key, "ready"}, {2, kb.key, "demoted"}};
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    v.key = rows[i].key, v.status = rows[i].status;
    cr_assert_eq(st_run_variants(db, rows[i].run, &v, 1, NULL, 0), ST_OK);
  }
  st_run_info_t prog = {.exe = "/bin/prog", .build_id = "abcd", .script = "/w/a.py",
                        .cpu_model = "Test CPU", .cpu_flags = "fpu avx2 fma"};
  st_profile_t p;
  cr_assert_eq(st_profile(db, &prog, "cpuA", 1.0, 64, &p), ST_OK);
  cr_assert_eq(find_hot(&p, "a")->demoted_gen, 0, "ready in the newest run with a variant");
  cr_assert_eq(find_hot(&p, "b")->demoted_gen, 7, "demoted in the newest run with a variant");
  st_profile_free(&p);
  st_close(db);
}

Test(store, gc_drops_objects_no_remaining_run_called)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  int64_t r1 = begin_script(db, "", 1), r2 = begin_script(db, "", 2);
  st_sig_rec_t a = rec("a", 10), b = rec("b", 10);
  cr_assert_eq(st_run_flush(db, r1, &a, 1, 0, 5), ST_OK);
  cr_assert_eq(st_run_flush(db, r2, &b, 1, 0, 5), ST_OK);
  const char code[] = "obj";
  st_variant_rec_t v[2] = {{.key = a.key, .key_len = 32, .status = "ready", .llvm = "19",
                            .cpu = "c", .machine_cpu = "m", .object = code, .object_len = 3,
                            .symbol = "s"},
                           {.key = b.key, .key_len = 32, .status = "ready", .llvm = "19",
                            .cpu = "c", .machine_cpu = "m", .object = code, .object_len = 3,
                            .symbol = "s"}};
  cr_assert_eq(st_run_variants(db, r2, v, 2, NULL, 0), ST_OK);
  st_run_end(db, r1, 10, "exited");
  st_run_end(db, r2, 11, "exited");
  st_gc_result_t res;
  cr_assert_eq(st_gc(db, 1, 0, &res), ST_OK); /* keeps run 2, which called b only */
  cr_assert_eq(res.runs, 1);
  cr_assert_eq(res.objects, 1);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM objects o JOIN signatures s ON s.id = o.sig_id"
                         " WHERE s.sig='b'"), 1);
  st_close(db);
}

static st_machine_t model(const char *cpu, double f32_256)
{
  st_machine_t m = {.vregs = 32, .timer_ns = 18.5, .method = 1, .measured_ns = 12345};
  snprintf(m.cpu, sizeof m.cpu, "%s", cpu);
  snprintf(m.isa, sizeof m.isa, "sse2 avx2 fma avx512f");
  m.gflops[0][0] = 40, m.gflops[0][1] = f32_256, m.gflops[0][2] = 150;
  m.gflops[1][1] = f32_256 / 2;
  return m;
}

Test(store, machine_model_round_trips_per_cpu_and_is_replaced)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  st_machine_t got, m = model("Test CPU [flags 1]", 80);
  cr_assert_eq(st_machine_load(db, m.cpu, &got), ST_ENOENT, "nothing stored yet");
  cr_assert_eq(st_machine_save(db, &m, NULL, 0), ST_OK);
  cr_assert_eq(st_machine_save(db, &(st_machine_t){.cpu = "Other CPU"}, NULL, 0), ST_OK,
               "no model and no notes: nothing to write, no error");
  cr_assert_eq(st_machine_load(db, "Other CPU", &got), ST_ENOENT);
  cr_assert_eq(st_machine_load(db, m.cpu, &got), ST_OK);
  cr_expect_str_eq(got.isa, m.isa);
  cr_expect_eq(got.vregs, 32);
  cr_expect_eq(got.gflops[0][1], 80);
  cr_expect_eq(got.gflops[1][1], 40);
  cr_expect_eq(got.gflops[1][0], 0, "an unmeasured width reads as 0");
  cr_expect_eq(fx_query(db, "SELECT count(*) FROM machine_models WHERE f64_128 IS NULL"), 1,
               "and is stored as NULL");
  cr_expect_eq(got.timer_ns, 18.5);
  cr_expect_eq(got.measured_ns, 12345);
  cr_expect_eq(got.settled, 0);
  cr_expect_eq(got.nfamilies, 0);
  st_machine_t again = model(m.cpu, 90);
  again.settled = 1;
  cr_assert_eq(st_machine_save(db, &again, NULL, 0), ST_OK);
  cr_assert_eq(st_machine_load(db, m.cpu, &got), ST_OK);
  cr_expect_eq(got.gflops[0][1], 90, "a new measurement replaces the old");
  cr_expect_eq(got.settled, 1);
  cr_expect_eq(fx_query(db, "SELECT count(*) FROM machine_models"), 1);
  st_close(db);
}

Test(store, compile_times_add_up_over_saves_with_a_bounded_window)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE);
  const char *cpu = "Test CPU [flags 2]";
  st_machine_t notes_only = {0}, got;
  snprintf(notes_only.cpu, sizeof notes_only.cpu, "%s", cpu);
  st_compile_note_t first[] = {{"gemm", 9000000}, {"dot", 2000000}, {"gemm", 7000000},
                               {"gemm", 8000000}};
  cr_assert_eq(st_machine_save(db, &notes_only, first, 4), ST_OK);
  cr_assert_eq(st_machine_load(db, cpu, &got), ST_OK, "compile times alone are a model to read");
  cr_expect_eq(got.measured_ns, 0, "but not a measured one");
  cr_assert_eq(got.nfamilies, 2);
  const st_compile_stat_t *g = &got.families[0]; /* the most compiled first */
  cr_expect_str_eq(g->family, "gemm");
  cr_expect_eq(g->n, 3);
  cr_expect_eq(g->median_ns, 8000000);
  cr_expect_eq(g->mean_ns, 8000000);
  cr_expect_eq(got.families[1].n, 1);
  /* A second process's notes add to the first's. */
  st_compile_note_t more[ST_MACHINE_RECENT + 4];
  for (size_t i = 0; i < sizeof more / sizeof *more; i++)
    more[i] = (st_compile_note_t){"gemm", 1000000 + i};
  cr_assert_eq(st_machine_save(db, &notes_only, more, sizeof more / sizeof *more), ST_OK);
  cr_assert_eq(st_machine_load(db, cpu, &got), ST_OK);
  g = &got.families[0];
  cr_expect_eq(g->n, 3 + ST_MACHINE_RECENT + 4);
  cr_expect_eq(g->nrecent, ST_MACHINE_RECENT, "the window keeps the latest only");
  cr_expect_eq(g->recent[ST_MACHINE_RECENT - 1], 1000000 + ST_MACHINE_RECENT + 3);
  cr_expect_eq(g->recent[0], 1000004, "the oldest went first");
  cr_expect_eq(g->median_ns, 1000000 + 4 + (ST_MACHINE_RECENT - 1) / 2);
  cr_expect_eq(fx_query(db, "SELECT median_ns FROM machine_compiles WHERE family='gemm'"),
               (int64_t)g->median_ns, "readers can use the stored median");
  st_close(db);
}

Test(store, migrating_from_version_5_adds_the_machine_tables)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE | ST_OPEN_NO_MIGRATE);
  cr_assert_eq(st_migrate_to(db, 5), ST_OK);
  st_machine_t m = model("cpu", 80), got;
  cr_assert_neq(st_machine_save(db, &m, NULL, 0), ST_OK, "version 5 has no machine tables");
  cr_assert_neq(st_machine_load(db, "cpu", &got), ST_OK);
  st_close(db);
  db = fx_open(path, ST_OPEN_CREATE);
  cr_assert_eq(st_machine_save(db, &m, NULL, 0), ST_OK);
  cr_assert_eq(st_machine_load(db, "cpu", &got), ST_OK);
  st_close(db);
}

Test(store, migrating_from_version_6_keeps_the_runs_and_adds_states)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE | ST_OPEN_NO_MIGRATE);
  cr_assert_eq(st_migrate_to(db, 6), ST_OK);
  int64_t run = begin(db, 42);
  /* What a version-6 agent wrote: counts, no state. */
  cr_assert_eq(sqlite3_exec(st_sqlite(db),
                            "INSERT INTO signatures(key, sig, op, name, params)"
                            " VALUES(x'01', 'old', 'sgemm', 'sgemm', '{}');"
                            "INSERT INTO run_sigs SELECT 1, id, 7, 1, 10 FROM signatures",
                            NULL, NULL, NULL), SQLITE_OK);
  cr_assert_lt(fx_query(db, "SELECT count(*) FROM pragma_table_info('run_sigs')"
                         " WHERE name IN ('state', 'reason')"), 1);
  st_close(db);
  db = fx_open(path, ST_OPEN_CREATE);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM run_sigs WHERE calls=7 AND state IS NULL"
                         " AND reason IS NULL"), 1, "the old row kept, with no state");
  st_sig_rec_t r[2] = {rec("new", 10), rec("none", 3)};
  r[0].state = "waiting", r[0].reason = "not hot yet: 10 of 64 calls";
  cr_assert_eq(st_run_flush(db, run, r, 2, 0, 2000), ST_OK);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM run_sigs JOIN signatures ON id=sig_id WHERE"
                         " sig='new' AND state='waiting' AND reason LIKE 'not hot yet:%'"), 1);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM run_sigs JOIN signatures ON id=sig_id WHERE"
                         " sig='none' AND state IS NULL"), 1, "no decision: NULL");
  r[0].state = "queued", r[0].reason = "hot";
  cr_assert_eq(st_run_flush(db, run, r, 1, 0, 3000), ST_OK);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM run_sigs WHERE state='queued' AND reason='hot'"),
               1, "a flush replaces the state");
  st_close(db);
}

Test(store, migrating_from_version_7_keeps_the_runs_and_gc_takes_the_series_with_its_run)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE | ST_OPEN_NO_MIGRATE);
  cr_assert_eq(st_migrate_to(db, 7), ST_OK);
  int64_t old = begin(db, 900001); /* a pid that does not exist: gc may take the run */
  st_sig_rec_t r = rec("old", 5);
  cr_assert_eq(st_run_flush(db, old, &r, 1, 0, 2000), ST_OK);
  cr_assert_eq(st_run_end(db, old, 3000, "exited"), ST_OK);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM sqlite_master WHERE name='run_series'"), 0);
  st_close(db);
  /* A reader of the version-7 file sees an empty series, and leaves the file as it is. */
  db = fx_open(path, ST_OPEN_READONLY);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM run_series"), 0);
  int version;
  cr_assert_eq(st_schema_version(db, &version), ST_OK);
  cr_assert_eq(version, 7);
  st_close(db);
  db = fx_open(path, 0);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM run_sigs WHERE calls=5"), 1, "the run kept");
  int64_t run = begin(db, 900002);
  r = rec("new", 9);
  cr_assert_eq(st_run_flush(db, run, &r, 1, 0, 2000), ST_OK);
  uint64_t calls[3] = {1, 2, 6}, samples[3] = {0, 4, 1};
  st_series_rec_t rows[2] = {{r.key, r.key_len, 0, calls, NULL, samples},
                             {NULL, 0, 0, NULL, NULL, samples}};
  cr_assert_eq(st_run_series(db, old, 100, 1000, 3, rows, 1), ST_OK);
  cr_assert_eq(st_run_series(db, run, 100, 1000, 3, rows, 2), ST_OK);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM run_series"), 3);
  cr_assert_eq(fx_query(db, "SELECT length(calls) FROM run_series WHERE sig_id != 0 AND run_id = 2"),
               3, "one byte per small value");
  st_gc_result_t res;
  cr_assert_eq(st_gc(db, 1, 0, &res), ST_OK);
  cr_assert_eq(res.runs, 1);
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM run_series WHERE run_id = 1"), 0,
               "deleted with its run");
  cr_assert_eq(fx_query(db, "SELECT count(*) FROM run_series WHERE run_id = 2"), 2);
  st_close(db);
}

Test(store, a_model_stored_before_version_10_reads_as_not_settled)
{
  st_db_t *db = fx_open(path, ST_OPEN_CREATE | ST_OPEN_NO_MIGRATE);
  cr_assert_eq(st_migrate_to(db, 9), ST_OK);
  cr_assert_eq(sqlite3_exec(st_sqlite(db),
                            "INSERT INTO machine_models VALUES('cpu', 'sse2 avx fma avx2', 16, 50,"
                            " 100, NULL, 25, 50, NULL, 20, 2, 777)", NULL, NULL, NULL),
               SQLITE_OK);
  st_close(db);
  /* a reader of the version-9 file (opjit doctor) reads it through a view */
  st_machine_t got;
  db = fx_open(path, ST_OPEN_READONLY);
  cr_assert_eq(st_machine_load(db, "cpu", &got), ST_OK);
  cr_expect_eq(got.gflops[0][1], 100);
  cr_expect_eq(got.settled, 0);
  st_close(db);
  db = fx_open(path, 0);
  cr_assert_eq(st_machine_load(db, "cpu", &got), ST_OK);
  cr_expect_eq(got.measured_ns, 777, "the model kept");
  cr_expect_eq(got.settled, 0, "and measured again by the next run");
  got.settled = 1;
  cr_assert_eq(st_machine_save(db, &got, NULL, 0), ST_OK);
  cr_assert_eq(fx_query(db, "SELECT settled FROM machine_models"), 1);
  st_close(db);
}

/* Eight processes open a database none has created yet, all at once, 40 times: each either
 * opens it or is told it is busy for now (the agent retries); none takes another's schema,
 * half created, for a file that is not an opjit profile. */
Test(store, processes_creating_one_database_at_once_never_find_it_foreign)
{
  enum { P = 8, ROUNDS = 40 };
  for (int r = 0; r < ROUNDS; r++) {
    char db[160];
    snprintf(db, sizeof db, "%s/race%d.db", fx_dir, r);
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t kids[P];
    for (int k = 0; k < P; k++) {
      if ((kids[k] = fork()) == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 0)
          _exit(99);
        st_db_t *h;
        char err[512];
        int rc = st_open(db, ST_OPEN_CREATE, 200, &h, err, sizeof err);
        st_close(h);
        _exit(rc == ST_OK || rc == ST_EBUSY ? 0 : 10 + (rc < 0 ? -rc : rc) % 80);
      }
    }
    close(go[0]);
    close(go[1]); /* every child's read returns at once */
    for (int k = 0; k < P; k++) {
      int status;
      cr_assert_eq(waitpid(kids[k], &status, 0), kids[k]);
      cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "round %d: a process's open failed (exit %d)", r, WEXITSTATUS(status));
    }
  }
}
