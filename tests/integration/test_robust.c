/* SPDX-License-Identifier: MIT */
/* Bad input never harms the host: a corrupt, foreign, newer, locked, read-only or full
 * database, and bad option values, each get one clear message while the host's output stays
 * bit-identical and its exit status zero. */
#include "harness.h"

#include "tests/common/fixture.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(robust, .init = h_setup, .fini = h_teardown, .timeout = 120);

/* Runs blas_prog with and without the agent (extra env for the agent run, optionally under
 * a command prefix such as setpriv); asserts identical outputs and a clean exit, and returns
 * the agent run's stderr. */
static const char *host_unchanged(const char *const *env, const char *const *prefix)
{
  char plain[160], agent[160], a[200], b[200];
  snprintf(plain, sizeof plain, "%s/plain", h_dir);
  snprintf(agent, sizeof agent, "%s/agent", h_dir);
  int st = h_run("plain", 0, NULL, (const char *[]){H_BLAS_PROG, plain, "3", "600", NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  const char *argv[16];
  int n = 0;
  for (; prefix && prefix[n]; n++)
    argv[n] = prefix[n];
  const char *tail[] = {H_BLAS_PROG, agent, "3", "600", NULL};
  memcpy(argv + n, tail, sizeof tail);
  st = h_run("agent", 1, env, argv);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "host failed (%d): %s", st,
            h_output("agent", "err"));
  snprintf(a, sizeof a, "%s.bin", plain);
  snprintf(b, sizeof b, "%s.bin", agent);
  cr_assert(h_same_file(a, b), "the host's output changed");
  return h_output("agent", "err");
}

static void write_file(const char *path, const char *bytes, size_t n)
{
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  fwrite(bytes, 1, n, f);
  fclose(f);
}

static void sql(const char *path, const char *text)
{
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(db, text, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
  sqlite3_close(db);
}

Test(robust, corrupt_database)
{
  char junk[8192];
  for (size_t i = 0; i < sizeof junk; i++)
    junk[i] = (char)(i * 131 + 7);
  write_file(h_db, junk, sizeof junk);
  const char *err = host_unchanged(NULL, NULL);
  cr_assert_eq(h_count_lines(err, "opjit"), 1, "expected one message: %s", err);
  cr_assert(strstr(err, "not an SQLite database"), "%s", err);
}

static void copy_file(const char *from, const char *to)
{
  static char buf[1 << 20];
  FILE *f = fopen(from, "rb");
  cr_assert_not_null(f);
  size_t n = fread(buf, 1, sizeof buf, f);
  cr_assert(feof(f), "%s is larger than the copy's buffer", from);
  fclose(f);
  write_file(to, buf, n);
}

/* h_db and its WAL files. */
static void remove_db(void)
{
  char path[200];
  const char *tails[] = {"", "-wal", "-shm"};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s%s", h_db, tails[i]);
    unlink(path);
  }
}

/* A profile SQLite finds damaged, where the open reads (the meta table), where the run is
 * recorded (runs; in a jit run the warm start's read of the profile meets it again, unsaid), or
 * where a jit run's warm start reads the profile (run_sigs, after the run's row was written):
 * one message that says so and what to do, the host unchanged; where the damage stops the run's
 * first write, the file is left as it was. */
Test(robust, a_damaged_profile_is_named_so_once_and_left_as_it_was)
{
  const char *jit[] = {"OPJIT_MODE=jit", "OPJIT_WARM_WAIT_US=60000000", NULL};
  const struct {
    const char *table;
    const char *const *env;
  } cases[] = {{"meta", NULL}, {"runs", NULL}, {"runs", jit}, {"run_sigs", jit}};
  for (int i = 0; i < 4; i++) {
    remove_db();
    host_unchanged(cases[i].env, NULL);
    fx_damage_root(h_db, cases[i].table);
    char copy[200];
    snprintf(copy, sizeof copy, "%s.copy", h_db);
    copy_file(h_db, copy);
    const char *err = host_unchanged(cases[i].env, NULL);
    cr_assert_eq(h_count_lines(err, "opjit"), 1, "%s: one message: %s", cases[i].table, err);
    cr_assert(strstr(err, " is damaged") && strstr(err, ".recover"), "%s: %s", cases[i].table,
              err);
    cr_assert(strcmp(cases[i].table, "run_sigs") == 0 || h_same_file(h_db, copy),
              "%s: the damaged file was changed", cases[i].table);
  }
}

Test(robust, foreign_sqlite_file_is_left_untouched)
{
  sql(h_db, "CREATE TABLE mine(x); INSERT INTO mine VALUES(42);");
  const char *err = host_unchanged(NULL, NULL);
  cr_assert_eq(h_count_lines(err, "opjit"), 1, "%s", err);
  cr_assert(strstr(err, "not an opjit profile"), "%s", err);
  cr_assert_eq(h_query(NULL, "SELECT x FROM mine"), 42);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM sqlite_master"), 1);
}

Test(robust, newer_schema_is_refused)
{
  sql(h_db, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
            "INSERT INTO meta VALUES('application', 'opjit'); PRAGMA user_version=99;");
  const char *err = host_unchanged(NULL, NULL);
  cr_assert_eq(h_count_lines(err, "opjit"), 1, "%s", err);
  cr_assert(strstr(err, "newer"), "%s", err);
  cr_assert_eq(h_query(NULL, "PRAGMA user_version"), 99);
}

Test(robust, a_log_file_that_cannot_be_written_falls_back_to_stderr)
{
  /* /dev/full opens but every write fails: the message must still reach the user, once. A
   * 5000-character OPJIT_DB is the message: it says why, not "no database path". */
  static char db[5100];
  memcpy(db, "OPJIT_DB=/", 10);
  memset(db + 10, 'x', 5000);
  db[5010] = 0;
  const char *env[] = {db, "OPJIT_LOG_FILE=/dev/full", NULL};
  const char *err = host_unchanged(env, NULL);
  cr_assert_eq(h_count_lines(err, "cannot be written"), 1, "%s", err);
  cr_assert_eq(h_count_lines(err, "OPJIT_DB is 5001 characters long"), 1, "%s", err);
  cr_assert_eq(h_count_lines(err, "no database path"), 0, "%s", err);
}

Test(robust, locked_database_warns_once_and_the_host_carries_on)
{
  sqlite3 *lock;
  cr_assert_eq(sqlite3_open(h_db, &lock), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(lock, "CREATE TABLE t(x); BEGIN EXCLUSIVE; INSERT INTO t VALUES(1);",
                            NULL, NULL, NULL), SQLITE_OK);
  const char *env[] = {"OPJIT_BUSY_MS=20", "OPJIT_FLUSH_MS=10", "OPJIT_EXIT_WAIT_MS=300", NULL};
  const char *err = host_unchanged(env, NULL);
  sqlite3_exec(lock, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_close(lock);
  cr_assert_eq(h_count_lines(err, "locked"), 1, "%s", err);
}

/* A final write the exit cannot wait for (the lock held longer than OPJIT_EXIT_WAIT_MS) says
 * what the run kept: here no flush ever got through, so nothing. */
Test(robust, a_final_write_locked_out_says_nothing_was_recorded)
{
  sqlite3 *lock;
  cr_assert_eq(sqlite3_open(h_db, &lock), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(lock, "CREATE TABLE t(x); BEGIN EXCLUSIVE; INSERT INTO t VALUES(1);",
                            NULL, NULL, NULL), SQLITE_OK);
  const char *env[] = {"OPJIT_BUSY_MS=2000", "OPJIT_EXIT_WAIT_MS=300", NULL};
  const char *err = host_unchanged(env, NULL);
  sqlite3_exec(lock, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_close(lock);
  cr_assert_eq(h_count_lines(err, "did not finish within 300 ms; none of the run's calls were "
                                  "recorded"), 1, "%s", err);
  cr_assert_eq(h_count_lines(err, "periodic flush"), 0, "%s", err);
}

Test(robust, read_only_database)
{
  if (!h_nobody_can_use_build())
    cr_skip_test("needs root, setpriv and a build folder user nobody can read");
  /* A database owned by root, readable by all: the host runs as nobody. */
  char cmd[512];
  int st = h_run("mk", 1, NULL, (const char *[]){H_HOST_PROG, "threads", "1", "3", NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  snprintf(cmd, sizeof cmd, "chmod 755 %s && chmod 644 %s", h_dir, h_db);
  cr_assert_eq(system(cmd), 0);
  int64_t before = h_query(NULL, "SELECT count(*) FROM runs");
  const char *prefix[] = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", NULL};
  snprintf(cmd, sizeof cmd, "chmod 1777 %s", h_dir); /* the host writes its outputs there */
  cr_assert_eq(system(cmd), 0);
  const char *err = host_unchanged(NULL, prefix);
  cr_assert_eq(h_count_lines(err, "opjit"), 1, "expected one message: %s", err);
  cr_assert(strstr(err, "read-only") || strstr(err, "readonly"), "%s", err);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs"), before);
}

Test(robust, full_disk)
{
  char mnt[160];
  snprintf(mnt, sizeof mnt, "%s/small", h_dir);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "mkdir -p %s", mnt);
  cr_assert_eq(system(cmd), 0);
  if (mount("opjit-test", mnt, "tmpfs", 0, "size=64k") != 0)
    cr_skip_test("cannot mount a small tmpfs here (needs CAP_SYS_ADMIN)");
  /* Fill it, leaving a few KiB: enough to create the file, not to write the profile. */
  snprintf(cmd, sizeof cmd, "dd if=/dev/zero of=%s/fill bs=1k count=56 2>/dev/null", mnt);
  int filled = system(cmd);
  char dbvar[200];
  snprintf(dbvar, sizeof dbvar, "OPJIT_DB=%s/profile.db", mnt);
  /* The final write retries a full disk for 3/4 of the exit wait; the last quarter is the
   * writer's to end in (at 300 ms, 75 ms: a writer without a CPU that long on a loaded machine
   * adds the exit wait's own warning). 8 s: two seconds for a few milliseconds of work (one
   * second was once not enough at load 9, with the suite's other tests beside it). */
  const char *env[] = {dbvar, "OPJIT_EXIT_WAIT_MS=8000", NULL};
  const char *err = host_unchanged(env, NULL);
  umount2(mnt, MNT_DETACH);
  cr_assert_eq(filled, 0);
  cr_assert_eq(h_count_lines(err, "opjit"), 1, "expected one message: %s", err);
  cr_assert(strstr(err, "full") || strstr(err, "disk"), "%s", err);
}

Test(robust, bad_options_one_line_each_defaults_kept)
{
  const char *env[] = {"OPJIT_FLUSH_MS=soon", "OPJIT_MODE=turbo", NULL};
  const char *err = host_unchanged(env, NULL);
  cr_assert_eq(h_count_lines(err, "opjit"), 2, "%s", err);
  cr_assert_eq(h_count_lines(err, "OPJIT_FLUSH_MS='soon'"), 1, "%s", err);
  cr_assert_eq(h_count_lines(err, "OPJIT_MODE='turbo'"), 1, "%s", err);
  cr_assert_gt(h_query(NULL, "SELECT sum(calls) FROM run_sigs"), 600, "defaults kept: profiled");
}

/* With OPJIT_LOG_FILE, a bad value's report goes to the file, as every later message does. */
Test(robust, bad_option_reports_go_to_the_log_file)
{
  char file[200], log[220];
  snprintf(file, sizeof file, "%s/agent.log", h_dir);
  snprintf(log, sizeof log, "OPJIT_LOG_FILE=%s", file);
  const char *env[] = {"OPJIT_MODE=turbo", log, NULL};
  const char *err = h_count_lines(host_unchanged(env, NULL), "OPJIT_MODE='turbo'") ? "stderr" : "";
  cr_assert_str_empty(err, "the report went to stderr");
  FILE *f = fopen(file, "r");
  cr_assert_not_null(f, "no log file %s", file);
  char text[4096];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  cr_assert_eq(h_count_lines(text, "OPJIT_MODE='turbo'"), 1, "%s", text);
}

/* A misspelt option name was ignored without a word: now one line names it and the option. */
Test(robust, a_misspelt_option_name_gets_one_line)
{
  const char *env[] = {"OPJIT_SAMPLEHZ=0", NULL};
  const char *err = host_unchanged(env, NULL);
  cr_assert_eq(h_count_lines(err, "opjit"), 1, "%s", err);
  cr_assert_eq(h_count_lines(err, "OPJIT_SAMPLEHZ is not an opjit option (did you mean "
                                  "OPJIT_SAMPLE_HZ?)"), 1, "%s", err);
}
