/* SPDX-License-Identifier: MIT */
/* The never-slower judge pooled across runs, in a real host (jit_prog, every result checked
 * against the reference BLAS) and a real database: a sweep whose signatures are each called a
 * few times, 50 ms apart, gives each run too few cold pairs for a verdict of its own; the
 * rounds pile up in judge_pools run after run until the judge's rule decides. The test seam
 * (OPJIT_TEST_FAULT=slow: the variant's pair timings count 64 times; fast: the original's 16)
 * makes the outcome deterministic, whatever the machine's load. */
#include "harness.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

TestSuite(pooled, .init = h_setup_jit, .fini = h_teardown, .timeout = 600);

#define SIGS "8"   /* signatures the sweep calls */
#define PASSES "8" /* calls of each in a run, 50 ms apart: a handful of pairs a run */
/* Runs a test pools over at most: 3 rounds in run 1 at most (7 calls after the first pass's
 * compiles: pairs close at the 2nd, 4th and 6th), 4 in a run that places the kernel; the rule
 * needs 4 rounds all beyond 2x on the
 * seam's side (its early verdict), else every one of 8 rounds, 10 of 11, ... 22 of 29, and a
 * loaded machine can disturb a few (a preempted call on the original's side of a pair), each
 * costing more rounds. */
#define MAX_RUNS 16

/* Every signature hot from its first call, compiled after the first pass (jit_prog settles),
 * no duel before publication (the in-run judge alone); extra: one more environment entry (NULL:
 * none). */
static void sweep(int run, const char *fault, const char *extra)
{
  char tag[16], f[64];
  snprintf(tag, sizeof tag, "run%d", run);
  snprintf(f, sizeof f, "OPJIT_TEST_FAULT=%s", fault);
  const char *env[] = {"OPJIT_MODE=jit",
                       "OPJIT_HOT_PAYBACK=0",
                       "OPJIT_DUEL=0",
                       "OPJIT_HOT_CALLS=1",
                       "OPJIT_SAMPLE_HZ=0",
                       "OPJIT_WARM_WAIT_US=60000000",
                       f,
                       extra,
                       NULL};
  int st = h_run(tag, 1, env, (const char *[]){H_JIT_PROG, "sweep", SIGS, PASSES, "17", NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d\n%s\n%s", tag, st,
            h_output(tag, "out"), h_output(tag, "err"));
  cr_assert(strstr(h_output(tag, "out"), "mismatches 0"), "%s", h_output(tag, "out"));
}

static int64_t events(int run, const char *kind)
{
  return h_query(NULL, "SELECT count(*) FROM events WHERE run_id=%d AND kind='%s'", run, kind);
}

static void skip_if_sanitized(void)
{
  if (h_sanitized())
    cr_skip_test("run 1 compiles only part of its signatures under a sanitizer: the plain suite "
                 "checks this");
}

Test(pooled, a_kernel_slower_on_rare_calls_is_demoted_once_its_pooled_rounds_decide)
{
  skip_if_sanitized();
  sweep(1, "slow", NULL);
  int64_t compiled = events(1, "published");
  cr_assert_gt(compiled, 0);
  cr_assert_eq(events(1, "demoted"), 0, "one run's pairs decide nothing");
  int64_t demoted = 0;
  int run = 1;
  while (demoted < compiled && run < MAX_RUNS) {
    sweep(++run, "slow", NULL);
    demoted += events(run, "demoted");
  }
  cr_assert_eq(demoted, compiled, "every kernel demoted within %d runs: %lld of %lld; rounds pooled"
               " on the others: %lld at most", run, (long long)demoted, (long long)compiled,
               (long long)h_query(NULL, "SELECT coalesce(max(rounds), 0) FROM judge_pools"));
  /* Each on rounds pooled over runs, in words naming both sides' figures: demoted by the watch
   * within a run, or at the warm start when the last run's final pairs decided. */
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE kind='demoted' AND (detail LIKE"
                             " 'variant %%' OR detail LIKE 'slower, not placed: variant %%') AND"
                             " detail LIKE '%% ns per call, original %% ns (%%; median ratio %%"
                             " over %% rounds, %% of them from %% earlier run%%)'"),
               compiled);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE kind='invalidated' AND detail"
                             " LIKE 'slower:%%'"),
               compiled);
  /* Each run's variant rows keep the judge's ratio over the window then (the readers' figures:
   * slower, though the pool is dropped), every one above 1 under the seam; each kernel has one
   * from the run whose rounds decided. */
  cr_assert_eq(h_query(NULL, "SELECT count(DISTINCT sig_id) FROM variants WHERE ratio > 1"),
               compiled);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM variants WHERE ratio <= 1"), 0);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects"), 0, "the losers' objects dropped");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM judge_pools"), 0, "... and their rounds");
  /* The next run keeps the original: nothing placed, nothing compiled. */
  sweep(++run, "slow", NULL);
  cr_assert_eq(events(run, "loaded"), 0);
  cr_assert_eq(events(run, "queued"), 0);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=%d AND state='lost'", run),
               compiled, "lost until the generator changes");
}

/* Run 1 compiles the kernels of "fast" (faster than the original); the next runs place every
 * one of them and pool their rounds until each is kept (MAX_RUNS at most). Returns the last
 * run; *compiled: the kernels run 1 published. */
static int pool_fast_until_kept(int64_t *compiled)
{
  sweep(1, "fast", NULL);
  *compiled = events(1, "published");
  cr_assert_gt(*compiled, 0);
  int run = 1;
  while (h_query(NULL, "SELECT count(*) FROM judge_pools WHERE kept=1") < *compiled &&
         run < MAX_RUNS) {
    sweep(++run, "fast", NULL);
    cr_assert_eq(events(run, "loaded"), *compiled, "run %d places every kernel", run);
  }
  return run;
}

Test(pooled, a_kernel_faster_on_rare_calls_is_kept_with_its_rounds_pooled)
{
  skip_if_sanitized();
  int64_t compiled;
  int run = pool_fast_until_kept(&compiled);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE kind='demoted'"), 0);
  /* Every verdict came from more than one run's rounds (4 at least: the earliest verdict's,
   * agent/compare.h, every round beyond 2x under the seam), and stands. */
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM judge_pools WHERE kept=1 AND runs >= 2 AND"
                             " rounds >= 4"),
               compiled, "after %d runs", run);
  sweep(++run, "fast", NULL);
  cr_assert_eq(events(run, "loaded"), compiled, "placed again after its verdict");
}

/* A run can end before its watch looks at rounds that already decide (a first run's compile
 * thread is busy compiling and dueling): the next run's warm start takes the verdict on them at
 * placement, as the watch's first look would, and the placed kernel starts kept (its calls at
 * the bursts' steady rate, compare.h), with the verdict in its reason and its pool. */
Test(pooled, a_verdict_the_pooled_rounds_reach_carries_over_at_placement)
{
  skip_if_sanitized();
  int64_t compiled;
  int run = pool_fast_until_kept(&compiled);
  /* as if no watch had looked: the rounds stored, no verdict on them */
  h_exec("UPDATE judge_pools SET kept=0, judged=0");
  sweep(++run, "fast", NULL);
  cr_assert_eq(events(run, "loaded"), compiled);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=%d AND state='placed' AND"
                             " reason LIKE '%%; found faster on %% rounds over %% earlier runs,"
                             " judged again on new ones'", run),
               compiled, "run %d placed every kernel kept", run);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM judge_pools WHERE kept=1"), compiled,
               "the verdicts stored again");
}

/* The writer stores a pool when it changed since its last flush, and only then: a trigger logs
 * every write of a pool row in run 2, whose writer flushes every 20 ms while its rare calls close
 * a round a pair, 50 ms apart. */
Test(pooled, the_writer_stores_a_pool_only_when_it_changed)
{
  skip_if_sanitized();
  sweep(1, "fast", NULL);
  int64_t rounds1 = h_query(NULL, "SELECT coalesce(sum(rounds), 0) FROM judge_pools");
  cr_assert_gt(rounds1, 0, "run 1 stored its rounds");
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(h_db, &db), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(db,
                            "CREATE TABLE pool_writes(id INTEGER PRIMARY KEY, sig_id, cpu, runs,"
                            " rounds, kept, judged, orig_calls, var_calls, ratios);"
                            "CREATE TRIGGER pool_inserted AFTER INSERT ON judge_pools BEGIN"
                            " INSERT INTO pool_writes VALUES(NULL, new.sig_id, new.cpu, new.runs,"
                            " new.rounds, new.kept, new.judged, new.orig_calls, new.var_calls,"
                            " new.ratios); END;"
                            "CREATE TRIGGER pool_updated AFTER UPDATE ON judge_pools BEGIN"
                            " INSERT INTO pool_writes VALUES(NULL, new.sig_id, new.cpu, new.runs,"
                            " new.rounds, new.kept, new.judged, new.orig_calls, new.var_calls,"
                            " new.ratios); END;",
                            NULL, NULL, NULL),
               SQLITE_OK, "%s", sqlite3_errmsg(db));
  sqlite3_close(db);
  sweep(2, "fast", "OPJIT_FLUSH_MS=20");
  cr_assert_gt(h_query(NULL, "SELECT coalesce(sum(rounds), 0) FROM judge_pools"), rounds1,
               "run 2 stored the rounds it added");
  cr_assert_gt(h_query(NULL, "SELECT count(*) FROM pool_writes"), 0);
  /* no write repeats the one before it on the same row */
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM pool_writes a JOIN pool_writes b ON b.id ="
                             " (SELECT min(id) FROM pool_writes c WHERE c.sig_id = a.sig_id AND"
                             " c.cpu = a.cpu AND c.id > a.id) WHERE a.runs = b.runs AND"
                             " a.rounds = b.rounds AND a.kept = b.kept AND a.judged = b.judged AND"
                             " a.orig_calls = b.orig_calls AND a.var_calls = b.var_calls AND"
                             " a.ratios = b.ratios"),
               0, "of %lld writes", (long long)h_query(NULL, "SELECT count(*) FROM pool_writes"));
}
