/* SPDX-License-Identifier: MIT */
/* top, op, runs and export on databases crafted with exact counts. */
#include "helpers.h"

#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Three signatures: est = calls × timed_ns / timed_calls = 500000, 300000 and 0 (untimed). */
static const fake_sig_t three[] = {
    {.m = 64, .calls = 1000, .timed_calls = 100, .timed_ns = 100 * 500},
    {.m = 32, .calls = 300, .timed_calls = 30, .timed_ns = 30 * 1000},
    {.m = 8, .calls = 50},
};

static const cJSON *find_sig(const cJSON *sigs, int m)
{
  const cJSON *s;
  cJSON_ArrayForEach(s, sigs)
    if (cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(s, "params"), "m")) == m)
      return s;
  cr_assert_fail("no signature with m=%d", m);
  return NULL;
}

static double num(const cJSON *o, const char *key)
{
  const cJSON *j = cJSON_GetObjectItem(o, key);
  cr_assert(cJSON_IsNumber(j), "%s is not a number", key);
  return j->valuedouble;
}

static const char *text(const cJSON *o, const char *key)
{
  const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, key));
  cr_assert(s, "%s is not a string", key);
  return s;
}

Test(top, json_shares_and_counts_match_what_was_written)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft_run(db, 0, 0, 1, three, 3);
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect_eq(num(j, "run"), run);
  cr_expect_eq(num(j, "total_calls"), 1350);
  cr_expect_eq(num(j, "est_ns"), 800000);
  cr_expect_eq(num(j, "wall_ns"), 2000000);
  const cJSON *sigs = cJSON_GetObjectItem(j, "signatures");
  cr_assert_eq(cJSON_GetArraySize(sigs), 3);
  cr_expect_eq(num(cJSON_GetArrayItem(sigs, 0), "calls"), 1000, "ranked by estimated time");
  const cJSON *a = find_sig(sigs, 64), *b = find_sig(sigs, 32), *c = find_sig(sigs, 8);
  cr_expect(fabs(num(a, "share_pct") - 62.5) < 1e-9);
  cr_expect(fabs(num(b, "share_pct") - 37.5) < 1e-9);
  cr_expect_eq(num(c, "share_pct"), 0);
  cr_expect_eq(num(a, "calls"), 1000);
  cr_expect_eq(num(a, "timed_calls"), 100);
  cr_expect_eq(num(a, "est_ns"), 500000);
  cr_expect_eq(num(a, "mean_ns"), 500);
  cr_expect_eq(num(b, "mean_ns"), 1000);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(c, "mean_ns")), "untimed: no mean");
  cr_expect_str_eq(text(a, "name"), "cblas_sgemm row NN 64x64x64 β=0");
  cr_expect_eq(strlen(text(a, "sig")), 16);
  cJSON_Delete(j);
  proc_free(&p);
}

Test(top, table_shows_share_time_mean_sig_and_name)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, 0, 1, three, 3);
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "62.5%"), "%s", p.out);
  cr_expect(strstr(p.out, "500 µs"), "est. time of the first signature: %s", p.out);
  cr_expect(strstr(p.out, "1.00 µs"), "mean of the second: %s", p.out);
  cr_expect(strstr(p.out, "cblas_sgemm row NN 32x32x32 β=0"), "%s", p.out);
  cr_expect(strstr(p.out, "1350 calls in 3 signatures"), "%s", p.out);
  cr_expect(!strchr(p.out, '\033'), "no colour when stdout is not a tty");
  proc_free(&p);
}

Test(top, default_is_newest_run_with_signatures_and_all_sums_runs)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, 0, 1, three, 3);
  int64_t second = craft_run(db, 0, 0, 1, (fake_sig_t[]){{.m = 64, .calls = 7, .timed_calls = 1,
                                                          .timed_ns = 10}}, 1);
  craft_run(db, 0, 0, 1, NULL, 0); /* newest, but no calls */
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, "--json", NULL});
  cJSON *j = proc_json(&p);
  cr_expect_eq(num(j, "run"), second);
  cr_expect_eq(num(j, "total_calls"), 7);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"top", "--db", db, "--all", "--json", NULL});
  j = proc_json(&p);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "run")));
  cr_expect_eq(num(j, "runs"), 3);
  cr_expect_eq(num(j, "total_calls"), 1357);
  const cJSON *a = find_sig(cJSON_GetObjectItem(j, "signatures"), 64);
  cr_expect_eq(num(a, "calls"), 1007);
  cr_expect_eq(num(a, "est_ns"), 500000 + 70, "estimates are per run, then summed");
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"top", "--db", db, "--all", "--limit", "1", "--json", NULL});
  j = proc_json(&p);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "signatures")), 1);
  cr_expect_eq(num(j, "total_signatures"), 3);
  cJSON_Delete(j);
  proc_free(&p);
}

Test(top, unknown_run_and_bad_arguments)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, 0, 1, three, 3);
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, "99", NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "opjit: no run 99"), "%s", p.err);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"top", "--db", db, "1", "--all", NULL});
  cr_expect_eq(p.status, 2);
  cr_expect(strstr(p.err, "usage: opjit top"), "%s", p.err);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"top", "--db", db, "--limit", "x", NULL});
  cr_expect_eq(p.status, 2);
  proc_free(&p);
}

Test(op, prefix_resolves_ambiguity_lists_unknown_fails)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  const fake_sig_t sigs[] = {
      {.m = 4, .sig = "abc0000000000001", .calls = 10, .timed_calls = 2, .timed_ns = 200},
      {.m = 5, .sig = "abc0000000000002", .calls = 20},
      {.m = 6, .sig = "def0000000000003", .calls = 30, .timed_calls = 3, .timed_ns = 900},
  };
  int64_t r1 = craft_run(db, 0, 0, 1, sigs, 3);
  int64_t r2 = craft_run(db, 0, 0, 1, sigs + 2, 1);

  proc_t p = opjit(NULL, (const char *[]){"op", "--db", db, "abc", NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "ambiguous"), "%s", p.err);
  cr_expect(strstr(p.err, "abc0000000000001") && strstr(p.err, "abc0000000000002"), "%s", p.err);
  cr_expect(!strstr(p.err, "def0000000000003"), "%s", p.err);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"op", "--db", db, "--json", "DE", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect_str_eq(text(j, "sig"), "def0000000000003");
  cr_expect_str_eq(text(j, "name"), "cblas_sgemm row NN 6x6x6 β=0");
  cr_expect_eq(num(cJSON_GetObjectItem(j, "params"), "k"), 6);
  const cJSON *runs = cJSON_GetObjectItem(j, "runs");
  cr_assert_eq(cJSON_GetArraySize(runs), 2);
  cr_expect_eq(num(cJSON_GetArrayItem(runs, 0), "run"), r2, "newest run first");
  cr_expect_eq(num(cJSON_GetArrayItem(runs, 1), "run"), r1);
  cr_expect_eq(num(cJSON_GetArrayItem(runs, 1), "calls"), 30);
  cr_expect_eq(num(cJSON_GetArrayItem(runs, 1), "mean_ns"), 300);
  cr_expect_eq(num(j, "total_calls"), 60);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"op", "--db", db, "abc0000000000002", NULL});
  cr_expect_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "cblas_sgemm row NN 5x5x5 β=0"), "%s", p.out);
  cr_expect(strstr(p.out, "m=5 n=5 k=5"), "params spelt out: %s", p.out);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"op", "--db", db, "0123", NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "no signature 0123"), "%s", p.err);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"op", "--db", db, "xyz", NULL});
  cr_expect_eq(p.status, 2, "not hex: a usage error");
  proc_free(&p);
}

Test(runs, status_exited_running_and_lost)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t exited = craft_run(db, 0, 0, 1, three, 1);
  int64_t running = craft_run(db, getpid(), 0, 0, three, 1); /* this process: alive */
  int64_t lost = craft_run(db, dead_pid(), 0, 0, three, 2);
  proc_t p = opjit(NULL, (const char *[]){"runs", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *runs = cJSON_GetObjectItem(j, "runs"), *r;
  cr_assert_eq(cJSON_GetArraySize(runs), 3);
  cJSON_ArrayForEach(r, runs)
  {
    int64_t id = (int64_t)num(r, "id");
    const char *want = id == exited ? "exited" : id == running ? "running" : "lost";
    cr_expect_str_eq(text(r, "status"), want, "run %lld", (long long)id);
    if (id == lost) {
      cr_expect_eq(num(r, "signatures"), 2);
      cr_expect_eq(num(r, "calls"), 1300);
      cr_expect_eq(num(r, "duration_ns"), 1000000, "a lost run lasts until its last flush");
    }
  }
  cr_expect_eq(num(cJSON_GetArrayItem(runs, 0), "id"), lost, "newest first");
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"runs", "--db", db, NULL});
  cr_expect(strstr(p.out, "lost") && strstr(p.out, "fake --size 42"), "%s", p.out);
  proc_free(&p);
}

Test(export, dumps_runs_with_parsed_argv_options_and_signatures)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, 0, 1, three, 3);
  int64_t second = craft_run(db, 0, 0, 1, three, 1);
  proc_t p = opjit(NULL, (const char *[]){"export", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *runs = cJSON_GetObjectItem(j, "runs");
  cr_assert_eq(cJSON_GetArraySize(runs), 2);
  const cJSON *r = cJSON_GetArrayItem(runs, 0);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "argv"), 2)),
                   "42");
  cr_expect_str_eq(text(cJSON_GetObjectItem(r, "options"), "TIME_EVERY"), "16");
  cr_expect_str_eq(text(cJSON_GetObjectItem(r, "program"), "exe"), "/usr/bin/fake");
  cr_expect_eq(num(cJSON_GetObjectItem(r, "machine"), "ncpu"), 2);
  const cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "signatures"), 0);
  cr_expect_eq(num(s, "calls"), 1000);
  cr_expect_eq(num(s, "timed_ns"), 50000);
  cr_expect_eq(num(cJSON_GetObjectItem(s, "params"), "m"), 64);
  cJSON_Delete(j);
  proc_free(&p);

  char id[24];
  snprintf(id, sizeof id, "%lld", (long long)second);
  p = opjit(NULL, (const char *[]){"export", "--json", "--db", db, id, NULL});
  j = proc_json(&p);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "runs")), 1);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"export", "--db", db, NULL});
  cr_expect_eq(p.status, 2, "the format is required");
  proc_free(&p);
}

/* A run's start in nanoseconds since the epoch is above 2^53: --json gives its digits as they
 * are (a double printed 1.7965366162244851e+18), in runs, diff and export alike. */
Test(runs, json_timestamps_keep_every_digit)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  const int64_t start = INT64_C(1796536616224485123);
  int64_t r1 = craft_run(db, 0, start, 1, three, 3), r2 = craft_run(db, 0, start + 1, 1, three, 3);
  char a[24], b[24];
  snprintf(a, sizeof a, "%lld", (long long)r1);
  snprintf(b, sizeof b, "%lld", (long long)r2);
  const char *const cmds[][6] = {{"runs", "--json", NULL},
                                 {"diff", a, b, "--json", NULL},
                                 {"export", "--json", b, NULL}};
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
    const char *argv[10] = {cmds[i][0], "--db", db};
    for (int k = 1; cmds[i][k]; k++)
      argv[2 + k] = cmds[i][k];
    proc_t p = opjit(NULL, argv);
    cr_assert_eq(p.status, 0, "opjit %s: %s", cmds[i][0], p.err);
    cr_expect(strstr(p.out, "1796536616224485124"), "opjit %s: %s", cmds[i][0], p.out);
    cr_expect(!strstr(p.out, "e+18"), "opjit %s: %s", cmds[i][0], p.out);
    proc_free(&p);
  }
}

/* An empty --db names no file: one message saying so, for every command that reads one. */
Test(top, an_empty_db_path_is_refused)
{
  static const char *const cmds[] = {"top", "runs", "variants", "events", "doctor", "gc"};
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
    proc_t p = opjit(NULL, (const char *[]){cmds[i], "--db", "", NULL});
    cr_expect_neq(p.status, 0, "opjit %s --db ''", cmds[i]);
    cr_expect(strstr(p.err, "--db wants a path") && !strstr(p.err, "profile yet"),
              "opjit %s: %s", cmds[i], p.err);
    proc_free(&p);
  }
}
