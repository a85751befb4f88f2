/* SPDX-License-Identifier: MIT */
/* `opjit run` on real programs: exit statuses, signals, and the profile a numpy program leaves
 * behind (read back through top, op and runs). */
#define _GNU_SOURCE
#include "helpers.h"

#include "tests/common/fixture.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NUMPY_100_SGEMM                                                                      \
  "import numpy as np; a = np.ones((64, 64), dtype=np.float32)\n"                            \
  "for i in range(100): a @ a\n"

Test(run, records_a_numpy_program_and_top_reads_it)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  proc_t p = opjit(NULL, (const char *[]){"run", "--db", db, "--", PYTHON, "-c", NUMPY_100_SGEMM,
                                          NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.err, "opjit: recorded run 1 ") && strstr(p.err, "opjit top --db"),
            "%s", p.err);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"top", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p), *s;
  int found = 0;
  cJSON_ArrayForEach(s, cJSON_GetObjectItem(j, "signatures"))
    if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s, "name")),
               "cblas_sgemm row NN 64x64x64 β=0") == 0) {
      found = 1;
      cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(s, "calls")), 100);
      cr_expect_gt(cJSON_GetNumberValue(cJSON_GetObjectItem(s, "timed_calls")), 0);
      cr_expect_gt(cJSON_GetNumberValue(cJSON_GetObjectItem(s, "share_pct")), 0);
    }
  cr_expect(found, "no 64x64x64 sgemm in: %s", p.out);
  cr_expect_gt(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "wall_ns")), 0);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"runs", "--db", db, NULL});
  cr_expect(strstr(p.out, "exited") && strstr(p.out, "python3"), "%s", p.out);
  proc_free(&p);
}

Test(run, keeps_existing_ld_preload_entries)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  proc_t p = opjit((const char *[]){"LD_PRELOAD=libm.so.6", NULL},
                   (const char *[]){"run", "--quiet", "--db", db, "--", "/bin/sh", "-c",
                                    "echo \"$LD_PRELOAD|$OPJIT_DB\"", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "/libopjit.so:libm.so.6|"), "agent first, then the old entry: %s",
            p.out);
  cr_expect(strstr(p.out, db), "--db becomes OPJIT_DB: %s", p.out);
  cr_expect_str_eq(p.err, "", "--quiet");
  proc_free(&p);
}

Test(run, propagates_exit_status_and_signals)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  proc_t p = opjit(NULL, (const char *[]){"run", "--db", db, "--", "sh", "-c", "exit 3", NULL});
  cr_expect_eq(p.status, 3);
  cr_expect(strstr(p.err, "no run recorded"), "a program without BLAS calls: %s", p.err);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"run", "--db", db, "--", "sh", "-c", "kill -TERM $$", NULL});
  cr_expect_eq(p.status, 128 + SIGTERM);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"run", "--db", db, "--", "/nonexistent/program", NULL});
  cr_expect_eq(p.status, 127);
  cr_expect(strstr(p.err, "/nonexistent/program: command not found"), "%s", p.err);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"run", "--db", db, NULL});
  cr_expect_eq(p.status, 2, "no command: a usage error");
  proc_free(&p);
}

Test(run, forwards_sigterm_sent_to_the_launcher)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db"), *ready = path_in(dir, "ready");
  char *script;
  cr_assert(asprintf(&script, "trap 'exit 7' TERM; touch %s; sleep 30 & wait", ready) > 0);
  int pid = opjit_spawn(NULL, (const char *[]){"run", "--db", db, "--", "sh", "-c", script, NULL});
  for (int i = 0; i < 1000 && access(ready, F_OK) != 0; i++)
    usleep(10000);
  cr_assert(access(ready, F_OK) == 0, "the program never started");
  kill(pid, SIGTERM);
  cr_expect_eq(wait_status(pid), 7, "the program's TERM trap ran: the launcher forwarded it");
}

/* A program killed with SIGKILL after its first flush: its run stays "running" in the file,
 * and the readers show it as lost. */
Test(run, sigkilled_program_shows_as_lost)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int pid = opjit_spawn((const char *[]){"OPJIT_FLUSH_MS=20", NULL},
                        (const char *[]){"run", "--db", db, "--", PYTHON, "-c",
                                         NUMPY_100_SGEMM "import time; time.sleep(60)\n", NULL});
  long long victim = 0, calls = 0;
  for (int i = 0; i < 3000 && calls < 100; i++) { /* up to 30 s on a slow machine */
    usleep(10000);
    sqlite3 *s;
    sqlite3_stmt *st;
    if (access(db, F_OK) != 0 || sqlite3_open_v2(db, &s, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
      continue;
    sqlite3_busy_timeout(s, 1000);
    if (sqlite3_prepare_v2(s, "SELECT r.pid, sum(rs.calls) FROM runs r JOIN run_sigs rs"
                              " ON rs.run_id = r.id GROUP BY r.id", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      victim = sqlite3_column_int64(st, 0), calls = sqlite3_column_int64(st, 1);
    sqlite3_finalize(st);
    sqlite3_close(s);
  }
  cr_assert(victim > 0 && calls >= 100, "the program's calls never reached the database");
  kill((pid_t)victim, SIGKILL);
  cr_expect_eq(wait_status(pid), 128 + SIGKILL);

  proc_t p = opjit(NULL, (const char *[]){"runs", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "runs"), 0);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(r, "status")), "lost");
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(r, "pid")), victim);
  cr_expect_geq(cJSON_GetNumberValue(cJSON_GetObjectItem(r, "calls")), 100);
  cJSON_Delete(j);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"runs", "--db", db, NULL});
  cr_expect(strstr(p.out, " lost "), "%s", p.out);
  proc_free(&p);
}

/* A run left "running" whose process is alive and started before it (this test's process) is
 * running, not lost, whatever the recorded start: a start within 2 s of the largest time used
 * to overflow the 2 s allowance (UBSan in fuzz_inspect_edit) and wrap to a past time, so the
 * run read as lost. */
Test(run, a_live_running_run_at_the_end_of_time_is_not_lost)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, INT64_MAX - 1000000000, 0, (const fake_sig_t[]){{.m = 8, .calls = 3}}, 1);
  proc_t p = opjit(NULL, (const char *[]){"runs", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "runs"), 0);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(r, "status")), "running");
  cJSON_Delete(j);
  proc_free(&p);
}

/* How many times needle occurs in s. */
static int occurrences(const char *s, const char *needle)
{
  int n = 0;
  for (const char *at = s; (at = strstr(at, needle)); at += strlen(needle))
    n++;
  return n;
}

/* A program killed before the agent's first write (profile mode writes at the flush period,
 * 60 s here) recorded nothing: the line names the signal, not a lack of BLAS calls. */
Test(run, names_the_signal_that_ended_a_program_before_the_agent_wrote)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  proc_t p = opjit((const char *[]){"OPJIT_MODE=profile", "OPJIT_FLUSH_MS=60000", NULL},
                   (const char *[]){"run", "--db", db, "--", PYTHON, "-c",
                                    NUMPY_100_SGEMM "import os; os.kill(os.getpid(), 9)\n",
                                    NULL});
  cr_expect_eq(p.status, 128 + SIGKILL);
  cr_expect(strstr(p.err, "opjit: no run recorded for pid ") &&
                strstr(p.err, ": signal 9 (Killed) ended it before the agent wrote"),
            "%s", p.err);
  cr_expect(!strstr(p.err, "no BLAS call"), "it made 100: %s", p.err);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"run", "--db", db, "--", "sh", "-c", "kill -ABRT $$", NULL});
  cr_expect_eq(p.status, 128 + SIGABRT);
  cr_expect(strstr(p.err, ": signal 6 (Aborted) ended it"), "%s", p.err);
  proc_free(&p);
}

/* A program without BLAS calls: the line says the agent's own message would name a database it
 * could not write, or, where OPJIT_LOG=error hides a locked database's warning, how to see it. */
Test(run, a_program_without_blas_calls_is_told_where_the_agents_message_is)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  proc_t p = opjit(NULL, (const char *[]){"run", "--db", db, "--", "true", NULL});
  cr_expect_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.err, ": it made no BLAS call the agent intercepts, or the agent could not "
                          "write the database (its own message says why)"), "%s", p.err);
  proc_free(&p);
  p = opjit((const char *[]){"OPJIT_LOG=error", NULL},
            (const char *[]){"run", "--db", db, "--", "true", NULL});
  cr_expect_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.err, "(OPJIT_LOG=warn shows its message)"), "%s", p.err);
  proc_free(&p);
}

/* A damaged database: the agent's own line names it (it records nothing into it), so the
 * launcher says only that the agent cannot record there, not the damage a second time. */
Test(run, a_damaged_database_is_named_once_by_the_agent_not_again)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, 0, 1, (const fake_sig_t[]){{.m = 8, .calls = 3}}, 1);
  fx_damage_root(db, "runs");
  proc_t p = opjit(NULL, (const char *[]){"run", "--db", db, "--", PYTHON, "-c",
                                          NUMPY_100_SGEMM, NULL});
  cr_expect_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.err, " is damaged") && strstr(p.err, "the agent cannot record into the "
                                                          "database"), "%s", p.err);
  cr_expect_eq(occurrences(p.err, " is damaged"), 1, "%s", p.err);
  proc_free(&p);
}

/* OPJIT_HOSTS without blas on a BLAS program: the line names the option, as for none. */
Test(run, names_opjit_hosts_when_it_leaves_blas_out)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  proc_t p = opjit((const char *[]){"OPJIT_HOSTS=ggml", NULL},
                   (const char *[]){"run", "--db", db, "--", PYTHON, "-c", NUMPY_100_SGEMM,
                                    NULL});
  cr_expect_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.err, "opjit: no run recorded for pid ") &&
                strstr(p.err, ": OPJIT_HOSTS=ggml leaves BLAS calls alone"),
            "%s", p.err);
  proc_free(&p);
}

/* The agent reads an empty OPJIT_DB as the default database: --db '' would record there while
 * the launcher looked in no file, so it is a usage error and nothing runs. */
Test(run, rejects_an_empty_db_path)
{
  proc_t p = opjit(NULL, (const char *[]){"run", "--db", "", "--", "sh", "-c", "echo ran", NULL});
  cr_expect_eq(p.status, 2, "%s", p.err);
  cr_expect(strstr(p.err, "opjit run: --db wants a path") && strstr(p.err, "usage: opjit run"),
            "%s", p.err);
  cr_expect_str_eq(p.out, "", "the program did not run");
  proc_free(&p);
}

/* A database the agent cannot record into (not opjit's, a folder, no path at all): the agent's
 * line names the problem, and the launcher's line does not say it again. */
Test(run, says_a_database_problem_once)
{
  char *dir = scratch_dir(), *theirs = path_in(dir, "theirs.db"), *folder = path_in(dir, "d.db");
  sql_exec(theirs, "CREATE TABLE t(x)");
  cr_assert(mkdir(folder, 0700) == 0);
  static const char unusable[] = ": the agent cannot record into the database";
  const struct {
    const char *db, *problem;
    const char *env[4];
  } cases[] = {
      {theirs, "not an opjit profile", {NULL}},
      {folder, "is not a regular file", {NULL}},
      /* putenv("NAME") unsets NAME (glibc) */
      {NULL, "database path", {"OPJIT_DB", "HOME", "XDG_CACHE_HOME", NULL}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *with_db[] = {"run", "--db", cases[i].db, "--", PYTHON, "-c", NUMPY_100_SGEMM,
                             NULL};
    const char *no_db[] = {"run", "--", PYTHON, "-c", NUMPY_100_SGEMM, NULL};
    proc_t p = opjit(cases[i].env, cases[i].db ? with_db : no_db);
    cr_expect_eq(p.status, 0, "%s", p.err);
    cr_expect_eq(occurrences(p.err, cases[i].problem), 1, "said once: %s", p.err);
    cr_expect(strstr(p.err, "opjit: no run recorded for pid ") && strstr(p.err, unusable),
              "%s", p.err);
    cr_expect(!strstr(p.err, "cannot look up") && !strstr(p.err, "no BLAS call"), "%s", p.err);
    proc_free(&p);
  }
}
