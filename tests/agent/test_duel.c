/* SPDX-License-Identifier: MIT */
/* The duel before publication: both sides on a clock of the test's own, whose calls advance it by
 * what they cost, so every verdict follows from the costs alone. */
#include "agent/duel.h"

#include <criterion/criterion.h>

static uint64_t clock_ns;
static uint64_t now(void) { return clock_ns; }

/* A side: each call costs `ns`, `cold` more when the other side ran last, and a deterministic noise
 * of +-noise_pct % (xorshift). */
typedef struct side_s {
  uint64_t ns, cold;
  uint64_t spike_at, spike; /* its call number spike_at costs spike more (a preemption) */
  int noise_pct;
  uint64_t calls;
} side_t;
static side_t orig, var;
static int last; /* 1: the original ran last, 2: the variant */
static uint32_t rng = 2463534242u;

static void run(side_t *s, int who)
{
  uint64_t cost = s->ns + (last != who ? s->cold : 0) + (s->calls == s->spike_at ? s->spike : 0);
  if (s->noise_pct) {
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    int pct = (int)(rng % (uint32_t)(2 * s->noise_pct + 1)) - s->noise_pct;
    cost = cost * (uint64_t)(100 + pct) / 100;
  }
  clock_ns += cost;
  s->calls++;
  last = who;
}
static void run_orig(void *ctx) { (void)ctx, run(&orig, 1); }
static void run_var(void *ctx) { (void)ctx, run(&var, 2); }

static ag_duel_result_t duel(uint64_t o_ns, uint64_t v_ns, int noise, uint64_t budget)
{
  clock_ns = 1000, last = 0;
  orig = (side_t){.ns = o_ns, .noise_pct = noise};
  var = (side_t){.ns = v_ns, .noise_pct = noise};
  ag_duel_t d = {run_orig, run_var, NULL, now, budget};
  ag_duel_result_t r;
  ag_duel_run(&d, &r);
  return r;
}

Test(duel, a_clearly_faster_variant_wins_in_the_fewest_rounds)
{
  ag_duel_result_t r = duel(1000, 500, 0, 10000000); /* exactly 2x: no early verdict */
  cr_assert_eq(r.verdict, AG_CMP_FASTER);
  cr_assert_eq(r.rounds, AG_CMP_MIN_ROUNDS, "it stops at the first verdict");
  cr_assert_float_eq(r.median, 0.5, 1e-6);
  cr_assert_float_eq(r.orig_ns, 1000.0, 1e-6);
  cr_assert_float_eq(r.var_ns, 500.0, 1e-6);
  cr_assert_eq(r.batch, AG_DUEL_BATCH_NS / 1000, "the slower side's call sizes the batch");
  /* calibration: a warming call and a timed one; then each round a warming call and a batch */
  cr_assert_eq(orig.calls, 2 + AG_CMP_MIN_ROUNDS * (r.batch + 1));
}

Test(duel, a_variant_more_than_twice_as_fast_wins_early)
{
  ag_duel_result_t r = duel(1000, 400, 0, 10000000);
  cr_assert_eq(r.verdict, AG_CMP_FASTER);
  cr_assert_eq(r.rounds, AG_CMP_EARLY_ROUNDS, "every round beyond 2x: an early verdict");
  cr_assert_float_eq(r.median, 0.4, 1e-6);
}

Test(duel, a_slower_variant_loses_through_noise)
{
  ag_duel_result_t r = duel(1000, 1150, 10, 10000000);
  cr_assert_eq(r.verdict, AG_CMP_SLOWER, "verdict %d, median %f", r.verdict, r.median);
  cr_assert(r.median > 1.0 + AG_CMP_MARGIN, "median %f", r.median);
}

Test(duel, within_the_margin_the_original_keeps_the_tie)
{
  ag_duel_result_t r = duel(1000, 1010, 0, 100000000);
  cr_assert_eq(r.verdict, AG_CMP_TIE, "1 %% slower is no verdict, and the tie is the original's");
  cr_assert_eq(r.rounds, AG_CMP_ROUNDS);
  r = duel(1000, 995, 0, 100000000);
  cr_assert_eq(r.verdict, AG_CMP_TIE, "0.5 %% faster is no win before the first call either");
  cr_assert_eq(r.rounds, AG_CMP_ROUNDS);
}

Test(duel, cold_calls_after_the_other_side_are_never_timed)
{
  /* The original pays 5x on its first call after the variant ran (its code and operands were pushed
   * out): timed cold it would lose; warm it is the slower side by 10 %. */
  clock_ns = 1000, last = 0;
  orig = (side_t){.ns = 1000, .cold = 4000};
  var = (side_t){.ns = 1100, .cold = 4400};
  ag_duel_t d = {run_orig, run_var, NULL, now, 10000000};
  ag_duel_result_t r;
  ag_duel_run(&d, &r);
  cr_assert_eq(r.verdict, AG_CMP_SLOWER, "verdict %d, median %f", r.verdict, r.median);
  cr_assert_float_eq(r.orig_ns, 1000.0, 1e-6);
}

Test(duel, calls_too_long_for_the_budget_get_no_duel)
{
  /* 8 rounds of 2 x (2 + 1) calls of 1 ms do not fit in 20 ms: only the calibration runs. */
  ag_duel_result_t r = duel(1000000, 900000, 0, 20000000);
  cr_assert_eq(r.verdict, AG_CMP_UNDECIDED);
  cr_assert_eq(r.rounds, 0);
  cr_assert_eq(r.batch, 2);
  cr_assert_eq(orig.calls, 2);
  cr_assert_eq(var.calls, 2);
}

Test(duel, a_budget_spent_before_a_verdict_leaves_it_undecided)
{
  /* Noise keeps a 2 % difference from a verdict; the budget ends the duel before 32 rounds. */
  ag_duel_result_t r = duel(10000, 10200, 5, 1000000);
  cr_assert_eq(r.verdict, AG_CMP_UNDECIDED, "verdict %d after %u rounds", r.verdict, r.rounds);
  cr_assert(r.rounds >= 1 && r.rounds < AG_CMP_ROUNDS, "%u rounds", r.rounds);
  cr_assert(clock_ns - 1000 <= 1000000 + 2 * (r.batch + 1) * 10200 * 105 / 100,
            "the duel overran its budget by more than a round: %llu ns",
            (unsigned long long)(clock_ns - 1000));
}

Test(duel, short_calls_are_batched_up_to_the_cap)
{
  ag_duel_result_t r = duel(50, 25, 0, 10000000);
  cr_assert_eq(r.batch, AG_DUEL_BATCH_MAX);
  cr_assert_eq(r.verdict, AG_CMP_FASTER);
}

Test(duel, a_preempted_batch_moves_neither_verdict_nor_figures)
{
  /* The original's 40th call is preempted for 5 ms: one round's ratio moves, the medians not. */
  clock_ns = 1000, last = 0;
  orig = (side_t){.ns = 1000, .spike_at = 40, .spike = 5000000};
  var = (side_t){.ns = 800};
  ag_duel_t d = {run_orig, run_var, NULL, now, 100000000};
  ag_duel_result_t r;
  ag_duel_run(&d, &r);
  cr_assert_eq(r.verdict, AG_CMP_FASTER);
  cr_assert_float_eq(r.orig_ns, 1000.0, 1e-6);
  cr_assert_float_eq(r.var_ns, 800.0, 1e-6);
}

/* The thread's CPU clock of this test: half the wall clock's pace (preempted half the time). */
static uint64_t cpu(void) { return clock_ns / 2; }

Test(duel, the_budget_is_spent_on_the_thread_s_own_time)
{
  /* A 1 ms budget on a clock that runs at half the wall's pace: twice the rounds a wall-clock
   * budget would allow (a preempted thread keeps its budget). */
  clock_ns = 1000, last = 0;
  orig = (side_t){.ns = 10000};
  var = (side_t){.ns = 10100}; /* within the margin: no verdict before the budget ends */
  ag_duel_t d = {run_orig, run_var, NULL, now, 1000000, NULL};
  ag_duel_result_t wall;
  ag_duel_run(&d, &wall);
  clock_ns = 1000, last = 0;
  orig.calls = var.calls = 0;
  d.spent = cpu;
  ag_duel_result_t own;
  ag_duel_run(&d, &own);
  cr_assert_eq(wall.verdict, AG_CMP_UNDECIDED, "the wall's budget ends the duel");
  cr_assert(own.rounds > wall.rounds, "%u rounds on the thread's clock, %u on the wall's",
            own.rounds, wall.rounds);
}
