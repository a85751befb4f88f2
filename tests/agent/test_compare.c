/* SPDX-License-Identifier: MIT */
/* The never-slower judge: rounds pair a burst's original timings with the variant's since the
 * last round; the sign test and the margin decide, ties go to the original. */
#include "agent/compare.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

/* Feeds rounds whose variant/original ratio is ratio[i % n]: each round, the variant is timed
 * vcalls times at vns each, then a burst times the original 2 calls at ons each. */
static void feed(ag_cmp_t *c, const double *ratio, int n, int rounds, uint64_t *vt, uint64_t *vns)
{
  for (int i = 0; i < rounds; i++) {
    uint64_t ons = 1000, v = (uint64_t)llround(ratio[i % n] * (double)ons);
    *vt += 3, *vns += 3 * v;
    cr_assert_eq(ag_cmp_burst(c, 2, 2 * ons, *vt, *vns), 1, "round %d closes", i);
  }
}

Test(compare, sign_threshold_is_the_binomial_tail_at_one_percent)
{
  /* P(X >= 8 | n = 8) = 1/256 <= 0.01, P(X >= 7) = 9/256 > 0.01. */
  cr_assert_eq(ag_cmp_sign_threshold(8), 8);
  /* n = 10: P(X >= 10) = 1/1024, P(X >= 9) = 11/1024 > 0.01. */
  cr_assert_eq(ag_cmp_sign_threshold(10), 10);
  /* n = 20: P(X >= 16) = 0.0059, P(X >= 15) = 0.0207. */
  cr_assert_eq(ag_cmp_sign_threshold(20), 16);
  /* n = 32: P(X >= 24) = 0.0035, P(X >= 23) = 0.0100 (just above 0.01) */
  cr_assert_eq(ag_cmp_sign_threshold(32), 24);
  cr_assert_eq(ag_cmp_sign_threshold(3), 4, "three coin flips can never be significant");
}

Test(compare, a_round_waits_for_the_variant_timings)
{
  ag_cmp_t c;
  ag_cmp_start(&c, 100, 100000); /* the variant's counters before it was published */
  cr_assert_eq(ag_cmp_burst(&c, 2, 2000, 101, 100500), 0, "one variant timing is not enough");
  cr_assert_eq(ag_cmp_burst(&c, 2, 2400, 102, 101000), 1);
  cr_assert_eq(c.rounds, 1);
  /* original: 4 calls, 4400 ns; variant: 2 calls, 1000 ns */
  cr_assert_float_eq(c.ratio[0], (500.0 / 1100.0), 1e-6);
  cr_assert_float_eq(ag_cmp_orig_ns(&c), 1100.0, 1e-9);
  cr_assert_float_eq(ag_cmp_variant_ns(&c), 500.0, 1e-9);
}

Test(compare, a_clearly_faster_variant_wins_after_the_minimum_rounds)
{
  ag_cmp_t c;
  uint64_t vt = 0, vns = 0;
  ag_cmp_start(&c, 0, 0);
  const double r[] = {0.5, 0.55, 0.45, 0.6};
  feed(&c, r, 4, AG_CMP_MIN_ROUNDS - 1, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_UNDECIDED, "too few rounds");
  feed(&c, r, 4, 1, &vt, &vns);
  double med;
  cr_assert_eq(ag_cmp_judge(&c, &med), AG_CMP_FASTER);
  cr_assert(med > 0.45 && med < 0.6, "median %f", med);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_UNDECIDED, "a verdict is given once");
}

Test(compare, a_slower_variant_loses_despite_outlier_rounds)
{
  ag_cmp_t c;
  uint64_t vt = 0, vns = 0;
  ag_cmp_start(&c, 0, 0);
  /* 1.3x slower, but one round in 8 the original was preempted (ratio 0.1) */
  const double r[] = {1.3, 1.25, 1.35, 0.1, 1.3, 1.28, 1.32, 1.3};
  feed(&c, r, 8, 16, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_SLOWER);
}

Test(compare, a_tie_waits_for_a_full_window_then_goes_to_the_original_above_1)
{
  ag_cmp_t c;
  uint64_t vt = 0, vns = 0;
  ag_cmp_start(&c, 0, 0);
  const double r[] = {1.02, 0.99, 1.03, 1.01};
  feed(&c, r, 4, AG_CMP_ROUNDS - 1, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_UNDECIDED, "within the margin");
  feed(&c, r, 4, 1, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_TIE, "a full window with median above 1");

  ag_cmp_start(&c, 0, 0);
  vt = vns = 0;
  const double s[] = {0.98, 1.01, 0.99, 0.97};
  feed(&c, s, 4, AG_CMP_ROUNDS, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_FASTER, "median below 1 keeps the variant");
}

Test(compare, only_a_significant_window_of_new_rounds_overturns_a_verdict)
{
  ag_cmp_t c;
  uint64_t vt = 0, vns = 0;
  ag_cmp_start(&c, 0, 0);
  const double fast[] = {0.5}, tie[] = {1.02, 0.99, 1.03, 1.01}, slow[] = {1.5};
  feed(&c, fast, 1, AG_CMP_ROUNDS, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_FASTER);
  feed(&c, tie, 4, AG_CMP_ROUNDS, &vt, &vns); /* a window of ties: no demotion */
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_UNDECIDED);
  feed(&c, slow, 1, AG_CMP_ROUNDS - 1, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_UNDECIDED, "the next window is not complete");
  feed(&c, slow, 1, 1, &vt, &vns); /* the workload changed: this window is all slower */
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_SLOWER);
}

/* A variant 5 % faster under noise (a round's ratio 0.95 x e^N(0, 0.08)), judged after every
 * round over 5000 rounds, as the watch does: the verdict for it is never overturned. (The
 * first version of this judge, which looked at every sliding window, demoted such a variant
 * in 30 % of such runs.) */
Test(compare, noise_never_demotes_a_faster_variant_however_long_the_run)
{
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int run = 0; run < 20; run++) {
    ag_cmp_t c;
    uint64_t vt = 0, vns = 0;
    ag_cmp_start(&c, 0, 0);
    for (int i = 0; i < 5000; i++) {
      double z = 0; /* an N(0, 1) draw: the sum of 12 uniforms, less 6 */
      for (int k = 0; k < 12; k++)
        x ^= x << 13, x ^= x >> 7, x ^= x << 17, z += (double)(x >> 11) / 9007199254740992.0;
      double ratio[] = {0.95 * exp(0.08 * (z - 6))};
      feed(&c, ratio, 1, 1, &vt, &vns);
      cr_assert_neq(ag_cmp_judge(&c, NULL), AG_CMP_SLOWER, "run %d, round %d", run, i);
      cr_assert_neq(ag_cmp_judge(&c, NULL), AG_CMP_TIE, "run %d, round %d", run, i);
    }
  }
}

Test(compare, a_round_rebases_when_the_counters_were_reset)
{
  ag_cmp_t c;
  ag_cmp_start(&c, 5000, 5000000); /* the parent's counters; the fork child's start at 0 */
  cr_assert_eq(ag_cmp_burst(&c, 2, 2000, 1, 500), 0);
  cr_assert_eq(ag_cmp_burst(&c, 2, 2000, 3, 1500), 1);
  cr_assert_float_eq(c.ratio[0], 500.0 / 1000.0, 1e-6);
}

/* One thread's calls through the bursts' budget as agent.c's pick takes them: blocks of block
 * calls of one signature, every every_awaiting-th block (0: none) of a signature awaiting its
 * verdict (kind: AG_CMP_AWAITING, or AG_CMP_AWAITING_LONG for a long one), a timed call every
 * 1-31 calls at random (OPJIT_TIME_EVERY 16), a burst of 64 calls whenever one is due. Adds
 * the calls to *n and the burst calls among them to *b, [0] for the awaiting signature's, [1]
 * for the others'. */
static void stream(int blocks, int block, int every_awaiting, int kind, uint64_t n[2],
                   uint64_t b[2])
{
  int32_t to_burst = 64 * AG_CMP_BURST_EVERY / 2, burst = 0, tick = 1;
  uint32_t x = 2463534242u;
  for (int k = 0; k < blocks; k++) {
    int aw = every_awaiting && k % every_awaiting == 0;
    for (int i = 0; i < block; i++) {
      n[!aw]++;
      if (burst > 0) {
        burst--, b[!aw]++;
        continue;
      }
      if (--tick > 0)
        continue;
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      tick = 1 + (int32_t)(x % 31);
      if (ag_cmp_burst_due(&to_burst, 64, tick, aw ? kind : AG_CMP_JUDGED))
        burst = 64;
    }
  }
}

Test(compare, bursts_spend_their_budget_on_the_calls_that_await_a_verdict)
{
  uint64_t n[2] = {0}, b[2] = {0};
  stream(1000, 1000, 1, AG_CMP_AWAITING, n, b); /* every call awaits: one in 8 (+1: the burst) */
  double share = (double)b[0] / (double)n[0];
  cr_assert(share > 0.10 && share < 0.125, "awaiting alone: %.4f of the calls in bursts", share);

  memset(n, 0, sizeof n), memset(b, 0, sizeof b);
  stream(1000, 1000, 0, AG_CMP_AWAITING, n, b); /* nothing awaits: one call in 256 */
  share = (double)b[1] / (double)n[1];
  cr_assert(share > 0.003 && share < 0.0045, "none awaiting: %.4f of the calls", share);

  /* One signature in 50 awaits (the first warm run of a program whose other kernels earlier
   * runs judged): its calls keep their bursts, the others pay the steady rate, not 1 in 8. */
  memset(n, 0, sizeof n), memset(b, 0, sizeof b);
  stream(5000, 1000, 50, AG_CMP_AWAITING, n, b);
  double mine = (double)b[0] / (double)n[0], others = (double)b[1] / (double)n[1];
  cr_assert(mine > 0.08, "the awaiting signature's calls: %.4f in bursts", mine);
  cr_assert(others < 0.006, "the judged signatures' calls: %.4f in bursts", others);

  /* A long signature awaiting its verdict: one call in 2 (+1), so that a program's few hundred
   * calls of it reach a verdict. */
  memset(n, 0, sizeof n), memset(b, 0, sizeof b);
  stream(1000, 1000, 1, AG_CMP_AWAITING_LONG, n, b);
  share = (double)b[0] / (double)n[0];
  cr_assert(share > 0.30 && share < 0.34, "long, awaiting: %.4f of the calls in bursts", share);
}

Test(compare, short_judged_calls_are_timed_less_often_within_the_timings_budget)
{
  /* the clock unknown, or a call that took no measurable time: the plain rate */
  cr_assert_eq(ag_cmp_gap_scale(0, 40, 16), 1);
  cr_assert_eq(ag_cmp_gap_scale(30, 0, 16), 1);
  /* a call as long as the budget's share of the timings, or longer: the plain rate */
  cr_assert_eq(ag_cmp_gap_scale(60, 60 * AG_CMP_TIMING_SHARE / 16, 16), 1);
  cr_assert_eq(ag_cmp_gap_scale(60, 100000, 16), 1);
  /* shorter calls: gaps long enough that the timings cost at most 1/AG_CMP_TIMING_SHARE of the
   * calls' time between them, up to AG_CMP_GAP_SCALE_MAX */
  for (uint64_t dt = 1; dt < 2000; dt += 7) {
    uint32_t s = ag_cmp_gap_scale(60, dt, 16);
    cr_assert(s >= 1 && s <= AG_CMP_GAP_SCALE_MAX, "dt %llu: scale %u", (unsigned long long)dt, s);
    if (s < AG_CMP_GAP_SCALE_MAX)
      cr_assert(60.0 / (16.0 * s * (double)dt) <= 1.0 / AG_CMP_TIMING_SHARE + 1e-12,
                "dt %llu: scale %u leaves the timings over budget", (unsigned long long)dt, s);
    if (s > 1)
      cr_assert(60.0 / (16.0 * (s - 1) * (double)dt) > 1.0 / AG_CMP_TIMING_SHARE,
                "dt %llu: scale %u is longer than the budget needs", (unsigned long long)dt, s);
    cr_assert(ag_cmp_gap_scale(60, dt + 7, 16) <= s, "a longer call never gets a longer gap");
  }
  cr_assert_eq(ag_cmp_gap_scale(60, 5, 16), AG_CMP_GAP_SCALE_MAX);
}

/* Before AG_CMP_MIN_ROUNDS: a verdict only where every round of at least AG_CMP_EARLY_ROUNDS is
 * beyond a factor the same way (1/2 faster, 1.5 slower); one round within it (or exactly 2x)
 * waits for the sign test. */
Test(compare, every_round_beyond_its_factor_decides_early)
{
  ag_cmp_t c;
  uint64_t vt = 0, vns = 0;
  double med;
  const double fast[] = {0.2, 0.3, 0.25, 0.45}, slow[] = {2.5, 3, 2.2, 4};
  ag_cmp_start(&c, 0, 0);
  feed(&c, fast, 4, AG_CMP_EARLY_ROUNDS - 1, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_UNDECIDED, "too few rounds even for an early one");
  feed(&c, fast + 3, 1, 1, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, &med), AG_CMP_FASTER);
  cr_assert(med > 0.2 && med < 0.45, "median %f", med);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_UNDECIDED, "a verdict is given once, and kept");

  vt = vns = 0;
  ag_cmp_start(&c, 0, 0);
  feed(&c, slow, 4, AG_CMP_EARLY_ROUNDS, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_SLOWER);

  /* The safe side sooner: every round above 1.5x demotes early; its mirror image waits. */
  const double slowish[] = {1.6, 1.55, 1.75, 1.7}, fastish[] = {0.62, 0.64, 0.57, 0.58};
  vt = vns = 0;
  ag_cmp_start(&c, 0, 0);
  feed(&c, slowish, 4, AG_CMP_EARLY_ROUNDS, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_SLOWER);
  vt = vns = 0;
  ag_cmp_start(&c, 0, 0);
  feed(&c, fastish, 4, AG_CMP_EARLY_ROUNDS, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_UNDECIDED, "1/0.6 is not beyond 2");
  const double one_in[] = {1.6, 1.45, 1.75, 1.7}; /* one round within 1.5x */
  vt = vns = 0;
  ag_cmp_start(&c, 0, 0);
  feed(&c, one_in, 4, AG_CMP_EARLY_ROUNDS, &vt, &vns);
  cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_UNDECIDED);

  /* one round within a factor of 2 (or exactly 2x): the sign test at AG_CMP_MIN_ROUNDS */
  const double mixed[] = {0.2, 0.3, 0.6, 0.25}, edge[] = {0.5, 0.3, 0.2, 0.25};
  const double *within[] = {mixed, edge};
  for (int w = 0; w < 2; w++) {
    vt = vns = 0;
    ag_cmp_start(&c, 0, 0);
    for (int i = 1; i < AG_CMP_MIN_ROUNDS; i++) {
      feed(&c, within[w] + (i - 1) % 4, 1, 1, &vt, &vns);
      cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_UNDECIDED, "case %d, round %d", w, i);
    }
    feed(&c, within[w], 4, 1, &vt, &vns);
    cr_assert_eq(ag_cmp_judge(&c, NULL), AG_CMP_FASTER, "case %d", w);
  }
}

/* Feeds timings to a fresh settle record until it settles or they run out; returns how many
 * it took (n + 1: never settled). */
static int settle(ag_cmp_settle_t *s, const uint64_t *t, int n)
{
  memset(s, 0, sizeof *s);
  for (int i = 0; i < n; i++)
    if (ag_cmp_settle_add(s, t[i]))
      return i + 1;
  return n + 1;
}

Test(compare, a_bursts_timings_count_once_they_stop_falling)
{
  ag_cmp_settle_t s;
  uint64_t n, ns;
  /* Steady from the start: two blocks, and the round gets both. */
  const uint64_t steady[] = {100, 104, 98, 101, 99, 103, 100, 97, 500};
  cr_assert_eq(settle(&s, steady, 9), 8);
  ag_cmp_settle_take(&s, &n, &ns);
  cr_assert_eq(n, 8);
  cr_assert_eq(ns, 802, "the two settled blocks, not the timing after them");
  cr_assert_eq(ag_cmp_settle_add(&s, 500), 1, "settled timings take no more");

  /* A threaded library waking (Zen 3, numpy sgemv 2048^2, us): the first blocks fall by more
   * than AG_CMP_SETTLE, the next two settle, and the round gets the block after them (the pair
   * was chosen for its low first block). */
  const uint64_t waking[] = {517, 461, 401, 320, 294, 298, 282, 289,
                             286, 287, 273, 300, 281, 290, 285, 279, 900};
  cr_assert_eq(settle(&s, waking, 17), 16);
  cr_assert(!ag_cmp_settle_falling(&s));
  ag_cmp_settle_take(&s, &n, &ns);
  cr_assert_eq(n, 4);
  cr_assert_eq(ns, 281 + 290 + 285 + 279);
  /* ... and when the burst ends within that block, the part of it there is */
  cr_assert_eq(settle(&s, waking, 14), 15);
  ag_cmp_settle_take(&s, &n, &ns);
  cr_assert_eq(n, 2);
  cr_assert_eq(ns, 281 + 290);

  /* Still falling when the burst ends: nothing, however many timings (a partial block too). */
  const uint64_t falling[] = {800, 800, 800, 800, 600, 600, 600, 600, 400, 400};
  cr_assert_eq(settle(&s, falling, 10), 11);
  cr_assert(ag_cmp_settle_falling(&s), "the burst that ends so is lengthened (agent.c)");
  ag_cmp_settle_take(&s, &n, &ns);
  cr_assert_eq(n, 0);
  cr_assert_eq(ns, 0);

  /* A block slower than the one before has settled (noise or a neighbour, not a warm-up). */
  const uint64_t rising[] = {100, 100, 100, 100, 130, 130, 130, 130};
  cr_assert_eq(settle(&s, rising, 8), 8);

  /* No two blocks to compare (a burst shared by many signatures): what there is. */
  const uint64_t few[] = {300, 200, 100, 90, 80};
  cr_assert_eq(settle(&s, few, 3), 4);
  ag_cmp_settle_take(&s, &n, &ns);
  cr_assert_eq(n, 3);
  cr_assert_eq(ns, 600);
  cr_assert_eq(settle(&s, few, 5), 6);
  ag_cmp_settle_take(&s, &n, &ns);
  cr_assert_eq(n, 5, "one full block and the next one's start");
  cr_assert_eq(ns, 770);
}
