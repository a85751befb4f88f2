/* SPDX-License-Identifier: MIT */
/* The never-slower judge's rounds on one variant, pooled over the runs that placed it: the
 * agent's judge saves and resumes them (agent/compare.h), the store keeps them between runs
 * (store/store.h, judge_pools). A plain struct and nothing else, so that both may include it. */
#ifndef OPJIT_STORE_JUDGE_H
#define OPJIT_STORE_JUDGE_H

#include <stdint.h>

#define ST_JUDGE_RATIOS 32 /* ratios kept: the judge's window (AG_CMP_ROUNDS) */

/* The judge's sufficient statistics for its rule: the window's ratios and the counters the
 * rule and the fair means read. */
typedef struct st_judge_pool_s {
  uint32_t rounds, judged, runs; /* rounds and runs that added to it, over every run */
  int kept;                      /* the variant won a verdict */
  uint64_t o_n, o_ns, v_n, v_ns; /* the rounds' original and variant calls and nanoseconds */
  uint32_t n;                    /* ratios held (at most ST_JUDGE_RATIOS) */
  float ratio[ST_JUDGE_RATIOS];  /* variant / original per round, the most recent, oldest first */
} st_judge_pool_t;

#endif
