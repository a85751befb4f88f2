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
 * judged at every watch from AG_CMP_MIN_ROUNDS rounds on until the first verdict; before that,
 *   EARLY   from AG_CMP_EARLY_ROUNDS rounds on, every round of the window beyond a factor the
 *           same way (each ratio below 1/2: FASTER; each above AG_CMP_EARLY_SLOWER: SLOWER). A
 *           sign test alone would need 7 rounds for p <= 0.01; with the factor, 4 rounds are as
 *           significant wherever noise alone makes one side of a pair twice the other in fewer
 *           than half the pairs (P <= 2 (1/4)^4 < 0.01), or the variant 1.5x the original in
 *           fewer than 3 pairs of 10 (P <= 0.3^4 < 0.01: one-sided, the safe side). A long call
 *           (a 1024^3 product at 80 ms a call on a library below the CPU, its kernel 5x faster)
 *           is then judged on 4 of its calls on each side, not 8, and a kernel 1.5x as slow
 *           serves 4 rounds' calls fewer (a split float GEMV 2048^2 at 1.5-1.75x the library on
 *           its two threads, Zen 5: 330-850 calls at 8 rounds).
 * A verdict
 * for the variant (FASTER or a tie it won) stands; it is judged again only on each following
 * window of AG_CMP_ROUNDS new rounds (windows that do not overlap, so the chance of a wrong
 * demotion does not grow with every look), and only a significant SLOWER overturns it.
 * A sign test needs no assumption about the timings' distribution, and one preempted call
 * moves one round's ratio, not the verdict. */
#ifndef OPJIT_AGENT_COMPARE_H
#define OPJIT_AGENT_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#include "store/judge.h"

#define AG_CMP_ROUNDS 32     /* rounds the verdict looks at (the most recent) */
#define AG_CMP_MIN_ROUNDS 8  /* fewer: UNDECIDED, but for an early verdict */
#define AG_CMP_EARLY_ROUNDS 4 /* fewer: UNDECIDED */
#define AG_CMP_EARLY_SLOWER 1.5f /* every ratio above it: an early SLOWER (above) */
#define AG_CMP_MARGIN 0.03   /* a median ratio within 3 % of 1 is a tie, never a verdict */
#define AG_CMP_MIN_VCALLS 2  /* variant timings a round needs; fewer wait for the next burst */
#define AG_CMP_BURST_EVERY 256  /* a thread's bursts start every so many burst lengths of calls */
#define AG_CMP_BURST_EVERY_NEW 8 /* ... of calls to signatures whose variant awaits its verdict */
_Static_assert(ST_JUDGE_RATIOS == AG_CMP_ROUNDS, "the store keeps the judge's window");
_Static_assert(ST_JUDGE_MIN_RATIOS == AG_CMP_EARLY_ROUNDS,
               "the readers' figures need the rounds of the earliest verdict");

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
  /* Rounds from earlier runs (ag_cmp_resume): the window may hold them, pooled with this run's. */
  uint32_t pooled_rounds, pooled_runs;
  /* Open pair (ag_cmp_pair): one side's cold timing waiting for the other side's. */
  int pair_side;              /* AG_CMP_PAIR_ORIG or AG_CMP_PAIR_VARIANT; 0: none open */
  uint64_t pair_ns;
  uint32_t paired;            /* rounds this run closed from cold pairs */
} ag_cmp_t;

enum { AG_CMP_PAIR_ORIG = 1, AG_CMP_PAIR_VARIANT = 2 };

/* Adds one burst's warm original timings (n calls, ns in all) and, given the variant's
 * cumulative timed calls and nanoseconds now, closes a round when the variant has
 * AG_CMP_MIN_VCALLS timings since the last one. Returns 1 when a round was closed. */
int ag_cmp_burst(ag_cmp_t *c, uint64_t n, uint64_t ns, uint64_t v_total_n, uint64_t v_total_ns);

/* The bursts' budget. A thread counts its calls toward its next burst in *to_burst; gap calls of
 * one signature count AG_CMP_BURST_EVERY / AG_CMP_BURST_EVERY_NEW times each when it awaits
 * (AG_CMP_AWAITING: its variant awaits its first verdict), AG_CMP_BURST_EVERY /
 * AG_CMP_BURST_EVERY_LONG times when it awaits and its library's calls are long
 * (AG_CMP_AWAITING_LONG: AG_LONG_CALL_NS or more, agent.h), once otherwise. Returns 1 when a
 * burst of len calls is due, and rearms *to_burst to len * AG_CMP_BURST_EVERY. So bursts run at
 * most 1/AG_CMP_BURST_EVERY_NEW of the calls to signatures awaiting a verdict (a verdict needs 8
 * rounds, a round a burst: a signature called a few thousand times gets one within its calls),
 * 1/AG_CMP_BURST_EVERY_LONG of a long signature's (a program calls those a few hundred times:
 * numpy's float GEMV 2048^2, 1000 calls in 0.25-0.3 s, ~800 of them after its kernel's
 * publication, got no verdict at one in 8, its kernel serving at 0.6x to the end; a third
 * makes 8 rounds of ~13-call bursts take ~300 calls) and 1/AG_CMP_BURST_EVERY of the others,
 * whatever the other signatures await: a program whose kernels were judged in earlier runs
 * does not pay the first run's rate for a few rarely called ones. */
#define AG_CMP_BURST_EVERY_LONG 2
enum { AG_CMP_JUDGED = 0, AG_CMP_AWAITING, AG_CMP_AWAITING_LONG };
int ag_cmp_burst_due(int32_t *to_burst, int32_t len, int32_t gap, int awaiting);

/* A burst's warm timings of one signature (agent.c keeps one per signature a burst ran). The
 * library does not come back to a plain run's speed at its second call: after the variant served
 * for a while, a library that runs threads of its own finds them asleep and their cores cold,
 * and its calls speed up over the first milliseconds (a float GEMV 2048^2 on a library's two
 * threads, Zen 3, after 50 ms of one-thread calls: 590, 517, 461, 401, 320, 294, 298, 282 ...
 * us, where a plain loop takes 205-273). So the timings come in blocks of AG_CMP_BLOCK, and two
 * neighbouring blocks have settled when the later block's sum is not more than AG_CMP_SETTLE
 * below the earlier's. When the first two settle, the round gets both; when an earlier pair
 * fell, the round gets the block after the pair that settled, not that pair (its earlier block
 * was kept for being low: a steady log-normal noise of 20 % a call read 1.3 % low that way, 2.7 %
 * at 40 %, and 0.0-0.1 % with the fresh block, in 100,000 simulated bursts). A signature whose
 * timings still fell when the burst ended gives none (the next burst is then longer: agent.c);
 * one with fewer than two blocks gives what it has (a burst shared by many signatures: no trend
 * to see), and one collecting its fresh block gives the part it has. 24 bytes, the caller's id
 * included: 32 of them live in each thread's TLS (agent.h). */
#define AG_CMP_BLOCK 4
#define AG_CMP_SETTLE 0.05
typedef struct ag_cmp_settle_s {
  uint32_t id;      /* the caller's: whose timings (agent.c: the signature's entry index) */
  uint8_t n;        /* timings in the current block */
  uint8_t blocks;   /* blocks filled so far (at most 255 counted) */
  uint8_t fell;     /* a pair of blocks compared had not settled */
  uint8_t state;    /* AG_CMP_WARMING, AG_CMP_FRESH (settled after a fall: the next block is
                       the round's), AG_CMP_DONE (the round's timings are in) */
  uint64_t prev_ns; /* the previous full block's sum */
  uint64_t ns;      /* the current block's sum */
} ag_cmp_settle_t;
_Static_assert(sizeof(ag_cmp_settle_t) == 24, "a thread's TLS holds 32 (agent.h)");
enum { AG_CMP_WARMING = 0, AG_CMP_FRESH, AG_CMP_DONE };

/* Adds one warm timing (ignored once done); returns 1 when the round's timings are in. */
int ag_cmp_settle_add(ag_cmp_settle_t *s, uint64_t dt);

/* What the timings give the round when the burst ends: *n timings of *ns in all (0: none). */
void ag_cmp_settle_take(const ag_cmp_settle_t *s, uint64_t *n, uint64_t *ns);

/* Whether the timings were still falling (two blocks or more, none settled yet). */
static inline int ag_cmp_settle_falling(const ag_cmp_settle_t *s)
{
  return s->state == AG_CMP_WARMING && s->fell;
}

/* The timings' budget. A timed call costs about two reads of the calls' clock (timing_ns,
 * measured by the machine model; 0 while unknown) on top of the call. After a timed call that
 * took dt ns, served by a variant that has its verdict, or the original's call of a signature
 * that gets no variant in the run (agent.c), the thread's next gap to a timed call is drawn
 * this many times longer than OPJIT_TIME_EVERY's: so long that the timings cost at most
 * 1/AG_CMP_TIMING_SHARE of the calls' time, at most AG_CMP_GAP_SCALE_MAX times longer, and 1
 * for a call as long as AG_CMP_TIMING_SHARE timings / every. The judge's rounds for such a
 * variant still get their timings (a round needs AG_CMP_MIN_VCALLS between bursts that come
 * AG_CMP_BURST_EVERY burst lengths apart); a variant awaiting its verdict, and the original's
 * calls of a signature still on its way to one, keep the OPJIT_TIME_EVERY rate. */
#define AG_CMP_TIMING_SHARE 64
#define AG_CMP_GAP_SCALE_MAX 8
uint32_t ag_cmp_gap_scale(double timing_ns, uint64_t dt, uint32_t every);

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

/* Cold pairs, for a signature called too rarely for bursts to time it warm (agent.c): its calls
 * alternate between the original and the variant (o v v o o v v o ...), each timed as it comes,
 * as cold as the program leaves it, and two neighbouring calls of opposite sides close a round
 * (one call a side); a pair with a side 8x that side's mean so far (from 8 rounds on) is
 * dropped. Adds one timing of side (AG_CMP_PAIR_*); returns 1 when it closed a round. */
int ag_cmp_pair(ag_cmp_t *c, int side, uint64_t ns);

/* Pooling across runs, in the store's record (store/judge.h). ag_cmp_save copies c's statistics
 * into *out for the store (runs counts this run in when it added a round); ag_cmp_resume starts
 * a comparison as ag_cmp_start does, then takes *p's rounds and verdict over, so that this
 * run's rounds join the earlier runs' under the same rule (windows, kept verdicts and all). A
 * pool from a newer build that holds more ratios than AG_CMP_ROUNDS keeps the most recent. */
void ag_cmp_save(const ag_cmp_t *c, st_judge_pool_t *out);
void ag_cmp_resume(ag_cmp_t *c, const st_judge_pool_t *p, uint64_t v_total_n, uint64_t v_total_ns);

/* The judge's figures in words, for an event or a reason: "variant N ns per call, original M ns
 * (<how>; median ratio R over K rounds[, J of them from N earlier runs])". how says what the
 * rounds were (warm, interleaved; cold pairs ...). Returns buf. */
const char *ag_cmp_describe(const ag_cmp_t *c, double median, const char *how, char *buf,
                            size_t len);

/* The smallest k with P(X >= k) <= 0.01 for X ~ Binomial(n, 1/2) (n + 1 when none). */
int ag_cmp_sign_threshold(int n);

/* The sanitizer this build is instrumented with ("ThreadSanitizer", "AddressSanitizer"), or NULL.
 * The variant's side of every timing runs the instrumented agent, the original's side the host's
 * library, which is not instrumented, so a sanitized build's SLOWER or TIE measures the
 * sanitizer: the tiers record it and do not demote on it (tier.c). */
const char *ag_cmp_sanitizer(void);

#endif
