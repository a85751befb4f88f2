/* SPDX-License-Identifier: MIT */
/* The never-slower judge: does a variant run faster than the original it replaces, on this
 * machine, on this program's calls? Pure data and arithmetic (no clock, no threads, no
 * globals): the callers time, and lock an ag_cmp_t while they add to it.
 *
 * Both sides are timed warm and paired in rounds. The original is timed only in bursts: for a
 * short stretch a thread runs every call's original, as a plain run would, and times the calls
 * whose signature already ran in the same burst (the library's code and the operands are as
 * warm as in a plain run); the variant is timed on ordinary calls, not those right after a
 * burst. One round = one burst's original mean for the signature against the variant's mean
 * over its calls timed since the previous round. Comparing round by round cancels the drifts
 * of a shared, noisy machine (both sides of a round ran in the same few milliseconds).
 *
 * The rule (ag_cmp_judge), on a window of the last AG_CMP_ROUNDS rounds:
 *   SLOWER  the rounds in which the variant was slower are too many for a fair coin (one-sided
 *           sign test, p <= 0.01) and the median ratio variant/original exceeds
 *           1 + AG_CMP_MARGIN;
 *   FASTER  the mirror image: significantly more rounds faster, median below 1 - AG_CMP_MARGIN;
 *   TIE     AG_CMP_ROUNDS rounds and neither: the median above 1 goes to the original (it is
 *           the safe one), at or below 1 to the variant, which is then kept as FASTER is;
 * judged at every watch from AG_CMP_MIN_ROUNDS rounds on until the first verdict. A verdict
 * for the variant (FASTER or a tie it won) stands; it is judged again only on each following
 * window of AG_CMP_ROUNDS new rounds (windows that do not overlap, so the chance of a wrong
 * demotion does not grow with every look), and only a significant SLOWER overturns it.
 * A sign test needs no assumption about the timings' distribution, and one preempted call
 * moves one round's ratio, not the verdict. */
#ifndef OPJIT_AGENT_COMPARE_H
#define OPJIT_AGENT_COMPARE_H

#include <stdint.h>

#define AG_CMP_ROUNDS 32     /* rounds the verdict looks at (the most recent) */
#define AG_CMP_MIN_ROUNDS 8  /* fewer: UNDECIDED */
#define AG_CMP_MARGIN 0.03   /* a median ratio within 3 % of 1 is a tie, never a verdict */
#define AG_CMP_MIN_VCALLS 2  /* variant timings a round needs; fewer wait for the next burst */

enum ag_verdict { AG_CMP_UNDECIDED = 0, AG_CMP_FASTER, AG_CMP_SLOWER,
                  AG_CMP_TIE };      /* a tie that goes to the original (see above) */

typedef struct ag_cmp_s {
  float ratio[AG_CMP_ROUNDS]; /* variant mean / original mean, per round (a ring) */
  uint32_t rounds;            /* rounds closed so far (the ring holds the last ones) */
  /* What the rounds are made of, summed over every closed round: the fair means. */
  uint64_t o_n, o_ns;         /* warm original calls timed in bursts, their nanoseconds */
  uint64_t v_n, v_ns;         /* warm variant calls timed, their nanoseconds */
  /* Open round: the original's burst timings waiting for enough variant timings. */
  uint64_t po_n, po_ns;
  /* The variant's cumulative timings at the last closed round (the caller's counters). */
  uint64_t v_base_n, v_base_ns;
  int kept;                   /* the variant won a verdict (FASTER, or a tie at or below 1) */
  uint32_t judged;            /* rounds when that verdict was taken or last confirmed */
} ag_cmp_t;

/* Adds one burst's warm original timings (n calls, ns in all) and, given the variant's
 * cumulative timed calls and nanoseconds now, closes a round when the variant has
 * AG_CMP_MIN_VCALLS timings since the last one. Returns 1 when a round was closed. */
int ag_cmp_burst(ag_cmp_t *c, uint64_t n, uint64_t ns, uint64_t v_total_n, uint64_t v_total_ns);

/* Sets the variant's baseline (its cumulative timed calls when it was published): timings
 * before it are not the variant's. */
void ag_cmp_start(ag_cmp_t *c, uint64_t v_total_n, uint64_t v_total_ns);

/* The verdict now by the rule above, remembering a verdict for the variant: UNDECIDED while
 * there is none yet and after one (until a window overturns it: SLOWER). *median (may be
 * NULL) gets the median ratio of the rounds looked at (0 when there are none). */
enum ag_verdict ag_cmp_judge(ag_cmp_t *c, double *median);

/* The fair means in ns per call (0 when nothing was timed). */
double ag_cmp_orig_ns(const ag_cmp_t *c);
double ag_cmp_variant_ns(const ag_cmp_t *c);

/* The smallest k with P(X >= k) <= 0.01 for X ~ Binomial(n, 1/2) (n + 1 when none). */
int ag_cmp_sign_threshold(int n);

#endif
