/* SPDX-License-Identifier: MIT */
/* The never-slower judge pooled across runs, in a real host (jit_prog, every result checked
 * against the reference BLAS) and a real database: a sweep whose signatures are each called a
 * few times, 50 ms apart, gives each run too few cold pairs for a verdict of its own; the
 * rounds pile up in judge_pools run after run until the judge's rule decides. The test seam
 * (OPJIT_TEST_FAULT=slow: the variant's pair timings count 16 times; fast: the original's)
 * makes the outcome deterministic, whatever the machine's load. */
#include "harness.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

TestSuite(pooled, .init = h_setup_jit, .fini = h_teardown, .timeout = 600);

#define SIGS "8"   /* signatures the sweep calls */
#define PASSES "8" /* calls of each in a run, 50 ms apart: a handful of pairs a run */
#define MAX_RUNS 10

/* Every signature hot from its first call, compiled after the first pass (jit_prog settles),
 * no duel before publication (the in-run judge alone). */
static void sweep(int run, const char *fault)
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
  sweep(1, "slow");
  int64_t compiled = events(1, "published");
  cr_assert_gt(compiled, 0);
  cr_assert_eq(events(1, "demoted"), 0, "one run's pairs decide nothing");
  int64_t demoted = 0;
  int run = 1;
  while (demoted < compiled && run < MAX_RUNS) {
    sweep(++run, "slow");
    demoted += events(run, "demoted");
  }
  cr_assert_eq(demoted, compiled, "every kernel demoted within %d runs", run);
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
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects"), 0, "the losers' objects dropped");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM judge_pools"), 0, "... and their rounds");
  /* The next run keeps the original: nothing placed, nothing compiled. */
  sweep(++run, "slow");
  cr_assert_eq(events(run, "loaded"), 0);
  cr_assert_eq(events(run, "queued"), 0);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=%d AND state='lost'", run),
               compiled, "lost until the generator changes");
}

Test(pooled, a_kernel_faster_on_rare_calls_is_kept_with_its_rounds_pooled)
{
  skip_if_sanitized();
  sweep(1, "fast");
  int64_t compiled = events(1, "published");
  cr_assert_gt(compiled, 0);
  int run = 1;
  while (h_query(NULL, "SELECT count(*) FROM judge_pools WHERE kept=1") < compiled &&
         run < MAX_RUNS) {
    sweep(++run, "fast");
    cr_assert_eq(events(run, "loaded"), compiled, "run %d places every kernel", run);
  }
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE kind='demoted'"), 0);
  /* Every verdict came from more than one run's rounds, and stands. */
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM judge_pools WHERE kept=1 AND runs >= 2 AND"
                             " rounds >= 8"),
               compiled, "after %d runs", run);
  sweep(++run, "fast");
  cr_assert_eq(events(run, "loaded"), compiled, "placed again after its verdict");
}
