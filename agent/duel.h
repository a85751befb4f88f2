/* SPDX-License-Identifier: MIT */
/* The duel: a freshly compiled variant against the original it would replace, timed by the compile
 * thread on scratch operands of the signature's own shape, before the variant serves a single call.
 * A kernel that measures slower there is never published, so a signature that a program calls too
 * rarely for the run's own judge (compare.h) to reach a verdict is not left on a slower kernel; the
 * in-run judge still watches every published one on the program's real calls.
 *
 * Both sides run warm and interleaved, in batches: a round is one batch of the original and one of
 * the variant (their order alternating from round to round), each batch one untimed call (the other
 * side has just run) and then `batch` timed calls under one clock read pair. The rounds feed the
 * never-slower judge (compare.h) and its rule decides: the duel stops at the first verdict, after
 * AG_CMP_ROUNDS rounds, or when its time budget is spent (then UNDECIDED: the variant is published
 * and left to the in-run judge).
 *
 * Pure: the caller passes both sides and the clock; no globals, no threads. */
#ifndef OPJIT_AGENT_DUEL_H
#define OPJIT_AGENT_DUEL_H

#include "compare.h"
#include <stdint.h>

typedef struct ag_duel_s {
  void (*original)(void *ctx); /* one call of the original on the scratch operands */
  void (*variant)(void *ctx);  /* one call of the variant on the same operands */
  void *ctx;
  uint64_t (*now)(void);   /* monotonic nanoseconds (ag_now_ns; a test's own clock) */
  uint64_t budget_ns;      /* the duel's time in all, calibration included, on spent */
  int (*stop)(void);       /* nonzero: end the duel now, undecided (NULL: never) */
  uint64_t (*spent)(void); /* the clock the budget is spent on: the calling thread's CPU time,
                              so that a thread preempted on a busy machine still gets its rounds
                              (NULL: now) */
} ag_duel_t;

typedef struct ag_duel_result_s {
  enum ag_verdict verdict; /* the judge's rule on the rounds, stricter for the variant: FASTER
                              only for a significant win (median below 1 - AG_CMP_MARGIN); a
                              tie either way after AG_CMP_ROUNDS rounds is TIE (no gain) */
  double median;           /* median ratio variant / original over the rounds (0: none) */
  double orig_ns, var_ns;  /* ns per call of each side: the median of its rounds (a preempted
                              batch moves neither) */
  uint32_t rounds;
  uint32_t batch; /* timed calls per side and round */
} ag_duel_result_t;

/* Smallest batch making a side's timed stretch about AG_DUEL_BATCH_NS long (at least 2 calls, as
 * the judge's rounds need; at most AG_DUEL_BATCH_MAX). */
#define AG_DUEL_BATCH_NS 20000u
#define AG_DUEL_BATCH_MAX 64u

/* What a duel of calls costing call_ns each needs to reach the judge's fewest rounds
 * (AG_CMP_MIN_ROUNDS): both sides' batches and their untimed first calls, in ns. A budget below
 * it gets no duel at all (ag_duel_run). */
uint64_t ag_duel_need_ns(uint64_t call_ns);

/* Runs the duel; *out gets its outcome. */
void ag_duel_run(const ag_duel_t *d, ag_duel_result_t *out);

#endif
