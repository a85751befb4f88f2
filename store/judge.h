/* SPDX-License-Identifier: MIT */
/* The never-slower judge's rounds on one variant, pooled over the runs that placed it: the
 * agent's judge saves and resumes them (agent/compare.h), the store keeps them between runs
 * (store/store.h, judge_pools). A plain struct and nothing else, so that both may include it. */
#ifndef OPJIT_STORE_JUDGE_H
#define OPJIT_STORE_JUDGE_H

#include <stdint.h>

#define ST_JUDGE_RATIOS 32   /* ratios kept: the judge's window (AG_CMP_ROUNDS) */
#define ST_JUDGE_MIN_RATIOS 4 /* fewer: no figures from the judge's median (from these on,
                                 with a verdict or not: AG_CMP_EARLY_ROUNDS, the fewest any
                                 verdict rests on) */

/* The judge's sufficient statistics for its rule: the window's ratios and the counters the
 * rule and the fair means read. */
typedef struct st_judge_pool_s {
  uint32_t rounds, judged, runs; /* rounds and runs that added to it, over every run */
  int kept;                      /* the variant won a verdict */
  uint64_t o_n, o_ns, v_n, v_ns; /* the rounds' original and variant calls and nanoseconds */
  uint32_t n;                    /* ratios held (at most ST_JUDGE_RATIOS) */
  float ratio[ST_JUDGE_RATIOS];  /* variant / original per round, the most recent, oldest first */
} st_judge_pool_t;

/* The median of n ratios (n <= ST_JUDGE_RATIOS; 0 when n is 0): the middle one, or the mean of
 * the middle two. The judge's rule, the store's readers and the agent's exit summary all take
 * the rounds' median by it, so that each shows the same figure. */
static inline double st_judge_median(const float *ratio, uint32_t n)
{
  float s[ST_JUDGE_RATIOS];
  n = n < ST_JUDGE_RATIOS ? n : ST_JUDGE_RATIOS;
  for (uint32_t i = 0; i < n; i++) { /* insertion sort: a few dozen values */
    uint32_t j = i;
    for (; j > 0 && s[j - 1] > ratio[i]; j--)
      s[j] = s[j - 1];
    s[j] = ratio[i];
  }
  if (!n)
    return 0;
  return n % 2 ? s[n / 2] : 0.5 * ((double)s[n / 2 - 1] + s[n / 2]);
}

#endif
