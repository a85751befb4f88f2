/* SPDX-License-Identifier: MIT */
/* Promotion policy: whether compiling a signature's kernel pays back, from costs measured on
 * this machine. Pure arithmetic on explicit state (no clock, no globals, no locks): the tiers
 * keep one ag_policy_t, feed it the judge's verdicts (compare.h) and the machine model's
 * compile times (machine.h), and ask it on hot signatures.
 *
 *   expected saving of a size class = (AG_POLICY_PRIOR_GAIN + sum of its verdicts' savings)
 *                                     / (1 + its verdicts)          (a loss counts as 0)
 *   charge of a compile             = compile time (and LLVM's load, before the first) x
 *                                     AG_POLICY_IDLE_SHARE when the threads that call operators
 *                                     leave a core idle; x the CPUs when the operator runs on a
 *                                     library's pool over every CPU (which stops as a whole
 *                                     while the compile holds one of them); else x 1
 *   pays back                       = time spent so far x expected saving
 *                                     >= OPJIT_HOT_PAYBACK x charge
 *                                     or: a core is idle and the class has had neither a
 *                                     verdict nor a trial yet (the first hot signature of a
 *                                     class is compiled to measure what the class gains)
 * The time spent so far predicts as much again to come; the prior counts as one verdict, so a
 * few losses lower the expectation without closing a class for good. */
#ifndef OPJIT_AGENT_POLICY_H
#define OPJIT_AGENT_POLICY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define AG_POLICY_CLASSES 6     /* cube root of m n k up to 8, 16, 32, 64, 128, more */
#define AG_POLICY_PRIOR_GAIN 0.3 /* the saving expected of a class before any verdict on it */
#define AG_POLICY_IDLE_SHARE 0.1 /* what a compile on an otherwise idle core takes from the
                                    program: shared caches and memory bandwidth, not the core */

typedef struct ag_policy_s {
  /* Written by one thread (the judge's), read by any: atomics, so a reader sees whole values. */
  _Atomic double gain_sum[AG_POLICY_CLASSES]; /* verdicts' savings (1 - variant/original, in
                                                 [0, 0.9]) */
  _Atomic int gain_n[AG_POLICY_CLASSES];      /* verdicts */
  _Atomic int trials[AG_POLICY_CLASSES]; /* compiles granted to learn a class (any thread) */
} ag_policy_t;

/* The size class of an m x n x k problem (0 for a dimension means 1: vectors). */
int ag_policy_class(uint32_t m, uint32_t n, uint32_t k);

/* Records a verdict on a variant of class cls: the judge's median ratio variant / original. */
void ag_policy_learn(ag_policy_t *p, int cls, double median_ratio);

/* The saving expected of a new variant of class cls (a fraction of the original's time). */
double ag_policy_gain(const ag_policy_t *p, int cls);

/* What placing a kernel the database stores is charged, in place of a compile (tier.c): its
 * lookup and its placing on the compile thread, no LLVM: 0.95-1.3 ms of wall time on a Zen 5
 * (the lookup 0.7-1.1 ms, the placing 0.18-0.25), where a compile charges 10-60. */
#define AG_POLICY_PLACE_NS 1500000.0

/* What a compile of compile_ns costs the program, with busy threads calling operators on ncpu
 * online CPUs; pool: the operator runs on a library's threads on every CPU, in lockstep (a
 * numpy float GEMV^T 2048^2 on 2 CPUs, Zen 5: a compile of ~45 ms of CPU, LLVM's load with it,
 * cost the loop ~100 ms, the library's two threads waiting on the one the compile held). */
double ag_policy_charge(double compile_ns, long busy, long ncpu, int pool);

/* Whether spent_ns already spent on a signature of class cls repays payback times the charge
 * (payback 0: always): 1; else 2 when the class is to be tried (idle: a core is idle for the
 * compile) and its trial is still free; else 0. */
int ag_policy_pays_back(const ag_policy_t *p, int cls, double spent_ns, double charge,
                        long payback, int idle);
/* ag_policy_pays_back, with the decision in words into why (len bytes): ag_policy_test and
 * ag_policy_words. */
int ag_policy_decide(const ag_policy_t *p, int cls, double spent_ns, double charge, long payback,
                     int idle, char *why, size_t len);

/* The figures one payback test weighed, kept to be worded later (a test on a program's call
 * formats nothing: reason.h words it when read). */
typedef struct ag_payback_s {
  double spent_ns, gain, charge; /* time spent, the class's expected saving, the charge */
  long payback;                  /* OPJIT_HOT_PAYBACK */
  int idle;                      /* a core is idle for the compile */
  int verdict;                   /* what the test returned: 1, 2 or 0 */
  int placing;                   /* the charge is a stored kernel's placing, not a compile */
} ag_payback_t;

/* ag_policy_pays_back, with the figures it weighed into *t (when t is not NULL). */
int ag_policy_test(const ag_policy_t *p, int cls, double spent_ns, double charge, long payback,
                   int idle, ag_payback_t *t);

/* t in words into why (len bytes): the figures (time spent, expected saving, OPJIT_HOT_PAYBACK,
 * the compile's charge) and which way they went, as a signature's state shows it (reason.h);
 * "its size's first trial" for 2 (no kernel of its size class measured yet, and a core idle
 * for the compile). */
void ag_policy_words(const ag_payback_t *t, char *why, size_t len);

/* Takes class cls's trial once its compile is queued: 1, or 0 when another took it first. */
int ag_policy_take_trial(ag_policy_t *p, int cls);

/* A long call against one core. The generator's kernels block K, and N past L2, but pack
 * neither operand as a library does: on products long enough for the rule (a call too long for
 * the duel before publication, duel.h, ~0.4 ms) they reach 0.56-0.77 of one core's measured FMA
 * peak (bench_jit on the Xeon model 167: f64 at 256^3 0.77, f32 and f64 at 512^3 0.56-0.67). A
 * library that already runs a call at AG_POLICY_LIB_SHARE of that peak or more (on several
 * threads, or with kernels as good) leaves a kernel nothing to gain, and such a kernel would
 * serve unmeasured until the in-run judge's verdict; below it the kernel may win (the library's
 * f64 256^3 on one thread, 0.58, lost 1.3x) or tie, and the judge decides. One core's peak even
 * where the kernel splits N between cores (par.h): a library at the share on two threads beats
 * the split kernel as well (Zen 3, a float 1024^3 product: a library's Zen kernels 151 GF/s on
 * two threads, the kernel's halves 113), and its threads, spinning after each of its calls, take
 * the core a part of the kernel's next call needs (the judge's pairs, one library call between
 * two of the kernel's, found it 2.2x slower there). 1 when a call of flops took call_ns on the
 * library and that reaches AG_POLICY_LIB_SHARE of peak_gflops; 0 when it does not or either
 * figure is unknown (0). */
#define AG_POLICY_LIB_SHARE 0.75
int ag_policy_library_wins(double flops, double call_ns, double peak_gflops);

/* The compile queue's order. One waiting signature as the pick weighs it: its calls so far, and
 * its library's fastest timed call against one core's measured peak (as ag_policy_library_wins
 * weighs it; 0 where a figure is unknown). */
typedef struct ag_pick_s {
  uint64_t calls;     /* the signature's calls so far */
  double flops;       /* one call's floating-point operations */
  double best_ns;     /* the library's fastest timed call of it */
  double peak_gflops; /* the measured FMA peak of the kernel's type and vector width */
} ag_pick_t;

/* Whether a waiting signature goes before b: one whose library runs below AG_POLICY_LIB_SHARE of
 * the peak before one at it or above (a kernel can gain little there: on the Zen 5 the duel found
 * such shapes 0-12 % faster, the others 14-86 %, and a tie compiled early kept a short program's
 * other kernels off for its compile and a 32-round duel, ~30 ms), then the most calls (the most
 * to gain from a kernel, without a verdict on it yet). Equal: 0 (the caller's order decides). */
int ag_policy_pick_before(const ag_pick_t *a, const ag_pick_t *b);

/* Which side a long call's library leaves a kernel (ag_policy_long_call). */
enum ag_long { AG_LONG_KERNEL, AG_LONG_LIBRARY, AG_LONG_WAIT };
#define AG_POLICY_LONG_TIMINGS 4 /* timed calls of a long signature before its library is found
                                    below AG_POLICY_LIB_SHARE (the first pays its warm-up) */

/* A long call's library weighed on its fastest timed call, best_ns, of timed: a library's call
 * on several threads takes 1.0-2.4 ms for the same 512^3 float product (two threads on the Xeon
 * model 167) depending on what the other cores run, the agent's own compile thread among them,
 * while its fastest call is what it can do: so a mean below the share with a fastest call above
 * it keeps the library (the mean flipped the rule from run to run). A slow timing can only hide
 * the library's speed, never invent it, so AG_LONG_LIBRARY is taken on any number of timings,
 * AG_LONG_KERNEL only on AG_POLICY_LONG_TIMINGS or more: AG_LONG_WAIT until then. Unknown
 * figures (0) never keep the library: AG_LONG_KERNEL with enough timings. */
enum ag_long ag_policy_long_call(double flops, double best_ns, uint64_t timed,
                                 double peak_gflops);

#endif
