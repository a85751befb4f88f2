/* SPDX-License-Identifier: MIT */
/* Tiers: when a signature gets a JIT variant, how it is published, verified, kept honest and
 * dropped. Compile threads (the first started with the first hot signature, more up to
 * OPJIT_JIT_THREADS as the queue grows) load libopjit-jit.so — and with it LLVM — and are the
 * only threads that call it, with the thread that measures what a compile costs on this CPU
 * (tier.c, calibrate); host threads only read the published variant pointer.
 *
 *   NONE ◀── not compilable (op, shape, alpha = 0, strided vectors)
 *   COLD ──hot (calls or sampled time)──▶ QUEUED ──compiled──▶ READY (variant published)
 *     ▲                                      └──LLVM error──▶ COLD: hot again after 8192, then
 *     └────────────────────────────────────────────────────── 16384 calls; the third: FAILED
 *   QUEUED ──compiled, its check before publication failed (on scratch operands against the
 *            original, or a host's self-test)──▶ FAILED (never published)
 *   READY ──verification mismatch──▶ FAILED      READY ──measured slower──▶ DEMOTED
 *   READY ──code cache (OPJIT_CODE_CACHE_MB) full──▶ COLD (evicted; compiled again if hot again)
 *   QUEUED ──no room, nothing left to evict──▶ COLD (deferred: queued again once evicted code
 *                                                  is freed)
 * Only evicted code is freed, and only after a grace period: every thread that was registered
 * when it was unpublished has finished a call since (or exited), so none can still be inside it.
 * Demoted and blacklisted variants' code stays (it is small, and they never come back). Nor is
 * LLVM ever torn down: a compile thread (or the calibration's) may be inside it when the host
 * exits, so LLVM's static destructors are never registered (ag_tl_keep_statics). */
#ifndef OPJIT_AGENT_TIER_H
#define OPJIT_AGENT_TIER_H

#include "compare.h"
#include "events.h"
#include "par.h"
#include "persist.h"
#include "problem.h"
#include "reason.h"
#include "table.h"
#include "verify.h"
#include "../store/store.h"

#include <stdatomic.h>
#include <stddef.h>

#include <stdint.h>

enum ag_tier { AG_TIER_COLD = 0, AG_TIER_NONE, AG_TIER_QUEUED, AG_TIER_READY, AG_TIER_FAILED,
               AG_TIER_DEMOTED };

/* Event kinds, as recorded in the database. */
enum ag_event {
#define AG_EV_ENUM_(id, name) AG_EV_##id,
  ST_EVENT_KINDS(AG_EV_ENUM_)
#undef AG_EV_ENUM_
};

/* Called on a host thread when entry e reached OPJIT_HOT_CALLS calls on it (n calls), and again
 * every 4096, and at every power of two where its calls are long (agent.h, ag_hot_test_due):
 * queues it for compilation if it can be compiled and, unless OPJIT_HOT_PAYBACK is 0, if the
 * time a variant would have saved on the calls so far (their measured mean times the saving the
 * judge has measured for this process's variants of its size; before any verdict,
 * 30 %) is OPJIT_HOT_PAYBACK times what the compile costs the program (policy.h: the machine
 * model's compile time, a tenth of it when a core is idle for the compile thread). Cheap;
 * never waits. */
void ag_tier_hot(ag_entry_t *e, uint64_t n);

/* What the tiers hold back at the start of a run (ag_tier_hold):
 *   AG_HOLD_QUEUE  hot signatures are not queued: the warm start (on the writer) is deciding
 *                  which to place from the store and which to compile
 *   AG_HOLD_RUN    they are queued and compile threads load LLVM, but no JIT code runs (no
 *                  compile, whose tuning, self-test and duel run the kernel) until the run is
 *                  recorded, so that a crash in JIT code finds its run (crash.h)
 *   AG_HOLD_NONE   nothing is held */
enum { AG_HOLD_NONE = 0, AG_HOLD_RUN, AG_HOLD_QUEUE };
/* Sets what is held. Leaving AG_HOLD_QUEUE, every cold signature that got hot meanwhile gets
 * its ag_tier_hot; reaching AG_HOLD_NONE wakes the compile threads waiting to run. */
void ag_tier_hold(int level);

/* The never-slower judge's input (compare.h): variants published now (no bursts without one).
 * Which of them await a verdict is each entry's awaiting (table.h). */
extern _Atomic int ag_tier_live;
/* One original burst timed n warm calls of e, ns in all: a round of e's comparison when its
 * variant has timings since the last one. Any host thread; takes a short lock. */
void ag_tier_burst(ag_entry_t *e, uint32_t n, uint64_t ns);

/* Called on the writer thread with the CPU time the sampler has attributed to e so far: queues
 * it, as ag_tier_hot does, when that time passes the same payback test. This finds what call
 * counts miss: a signature with few, long calls, or with calls spread over many threads, each
 * under OPJIT_HOT_CALLS. Off with OPJIT_HOT_PAYBACK=0. */
void ag_tier_sampled(ag_entry_t *e, double cpu_ns);

/* Called on a host thread after a timed call of e that took AG_LONG_CALL_NS or more (agent.h):
 * a cold signature that was hot but waited (a call too long for the duel is weighed against its
 * library's fastest first, policy.h, ag_policy_long_call: for AG_POLICY_LONG_TIMINGS timed
 * calls, the machine model's peak, or one of its own calls) is asked again once that many of
 * its calls are timed, without waiting for its next promotion test (a few long calls may never
 * reach one). Cheap until then. */
void ag_tier_long_timed(ag_entry_t *e);
/* Called on a host thread after a timed original call of e shorter than AG_LONG_CALL_NS when
 * its fastest call so far was that long: a signature that waited as a long one (above) is
 * short after all, its first call a stall (a library's thread kept off a CPU on a loaded
 * machine: a 69 us double GEMV's first call took 4.19 ms, it waited for 4 timings its 1-in-16
 * sampled calls did not give in 24 calls), and is asked again at once. */
void ag_tier_short_timed(ag_entry_t *e);

/* ---- across runs (agent/warm.c and the writer) ---- */

/* Whether a signature whose calls the profile weighs at calls (decayed: store.h, st_profile),
 * of mean_ns each, is hot: the test ag_tier_hot and ag_tier_sampled apply within a run. */
int ag_tier_profile_hot(const ag_entry_t *e, double calls, double mean_ns);

/* The warm start notes that earlier runs timed e's original calls at mean_ns each (for the
 * signatures it places or queues): what decides whether its library already runs them as fast
 * as a kernel could (tier.c, library_wins), rather than this run's first call, which pays the
 * library's warm-up. */
void ag_tier_profile_mean(ag_entry_t *e, double mean_ns);

/* Cold entry e stays on the original for the run, as DEMOTED (its kernel by this generator
 * measured slower than the original on this machine in an earlier run): never compiled. */
void ag_tier_keep_original(ag_entry_t *e);

/* Cold entry e stays on the original for the run, as DEMOTED with status "crashed": its kernel by
 * this generator crashed the program (agent/crash.h). The reason is formatted from fmt; with
 * with_event it is also recorded as a "crashed" event of this run. Nothing when e is not cold. */
void ag_tier_crashed(ag_entry_t *e, int with_event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records an event of kind (enum ag_event) about entry e in this run's log, its detail
 * formatted from fmt, without changing e's tier or reason: what a host decided about some of
 * the calls e's variant serves (some of them sent back to the original, its variant kept). */
void ag_tier_event(ag_entry_t *e, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Queues cold entry e for compilation now (the profile says it is hot). */
void ag_tier_queue(ag_entry_t *e, const char *why);
/* Waits until no signature is queued and no compile (its verification and duel included) runs,
 * at most ms: 0 once idle, 1 at the deadline, or at once while a warm start still holds back
 * what calls made hot (the caller waits for the warm start first). Any thread but a compile
 * thread or the writer. */
int ag_tier_settle(long ms);

/* Places a persisted kernel (jit/objload.h) as e's variant: published at once, not verified
 * again (it was verified in the run that stored it, and its checksum was checked), watched
 * for speed and guards like a compiled one. pool (NULL: none) holds the judge's rounds on this
 * kernel from earlier runs (compare.h): its judge resumes from them, judged at once (a kernel
 * they already find faster starts kept, its calls at the bursts' steady rate), and a kernel they
 * already find slower, or tied against it, is not placed: it is demoted (LOST, with the pooled
 * figures in its event and reason, the object dropped) and later runs leave the signature on
 * the original until the generator changes. Returns 0; -1 with a sentence in err when the object
 * cannot be placed (or e cannot have a variant: then e's tier is NONE; or the object was
 * compiled for another split of N (M) between cores, par.h: e compiles anew once hot); 1 when it was not
 * placed (the code cache is full for now; or demoted by its pool: then e's tier is DEMOTED). */
int ag_tier_load(ag_entry_t *e, const void *obj, size_t len, const char *symbol,
                 const st_judge_pool_t *pool, char *err, size_t errlen);
/* ag_tier_load for e QUEUED, on the compile thread that took it (a signature that got hot, for
 * which the store had a kernel: agent.h, ag_place_stored): the same checks and returns. */
int ag_tier_load_queued(ag_entry_t *e, const void *obj, size_t len, const char *symbol,
                        const st_judge_pool_t *pool, char *err, size_t errlen);

/* A warm start's placement (jit/objload.h, the batch): stored kernels placed into one mapping
 * that one W->X transition makes executable, then published in the order they were added, where
 * ag_tier_load costs a mapping, an mprotect and a TLB shootdown per kernel. */
typedef struct ag_tier_batch_s ag_tier_batch_t;

/* A batch for at most n kernels taking bytes in all (jt_obj_size's sum), or NULL (no memory, or
 * no mapping: the caller places with ag_tier_load). */
ag_tier_batch_t *ag_tier_batch_new(size_t n, size_t bytes);

/* ag_tier_load into batch b: the same checks and returns, but on 0 the kernel is placed,
 * charged to the code cache and in the code map, neither executable nor published (e stays
 * COLD) until ag_tier_batch_commit. symbol must stay valid until then. */
int ag_tier_batch_add(ag_tier_batch_t *b, ag_entry_t *e, const void *obj, size_t len,
                      const char *symbol, const st_judge_pool_t *pool, char *err, size_t errlen);

/* Makes b's kernels executable (one mprotect), publishes each as ag_tier_load does (its event's
 * time: its own placing plus its share of the commit) and frees b. Returns how many were
 * published, or -1 with err when the code could not be made executable: then none was, their
 * code map entries and cache charges are undone and each entry is still COLD. */
int ag_tier_batch_commit(ag_tier_batch_t *b, char *err, size_t errlen);

/* Entry i's judge rounds (its variant's, this run's pooled with the earlier runs' it resumed
 * from) for the writer to store with the variant, when they changed since it stored them last
 * (ag_tier_judge_stored): 1 with *out and their revision *rev, 0 when it has none to store. */
int ag_tier_judge_pool(uint32_t i, st_judge_pool_t *out, uint32_t *rev);

/* The writer committed entry i's rounds of revision rev (ag_tier_judge_pool): until they change
 * again, they are not handed out. */
void ag_tier_judge_stored(uint32_t i, uint32_t rev);

/* Entry i's judge median ratio variant / original (store/judge.h, st_judge_median) over its
 * window now — this run's rounds and any pooled from earlier runs, whatever the verdict: a
 * variant demoted as slower has one above 1 — with ST_JUDGE_MIN_RATIOS rounds or more, the
 * fewest any verdict rests on (0 else). The
 * writer records it with the run's variant row, and the exit summary's speedups and saving come
 * from it as the readers' do (store/query.h, ST_SIG_RATIO). */
double ag_tier_judge_ratio(uint32_t i);

/* One cold pair timing of e's call (agent.h, ag_call_variant): side is AG_CMP_PAIR_ORIG or
 * AG_CMP_PAIR_VARIANT, ns its duration (compare.h, ag_cmp_pair). */
void ag_tier_pair(ag_entry_t *e, int side, uint64_t ns);

/* Records why e's stored object is invalid (the detail's first word is the reason) and has the
 * writer delete it. */
void ag_tier_invalidate(ag_entry_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records that a kernel offered for e from outside (the fleet, agent/fleet.h) was not placed:
 * a "refused" event whose detail starts with the reason. e is left as it was. */
void ag_tier_refuse(ag_entry_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Entry i's variant status as the database records it: "queued", "ready", "failed", and for
 * a demoted variant "demoted" (measured slower: later runs on this machine leave it on the
 * original), "tied" (no faster within the judge's window: the original for this run only),
 * "guarded" (most calls failed its guards) or "crashed" (its kernel crashed the program: later
 * runs leave it on the original); NULL for the other tiers. */
const char *ag_tier_status(uint32_t i);

/* Entry i's JIT state and why (reason.h) into *out, for the writer: as the tiers' last decision
 * on it put them; for a signature no decision has touched yet, what the tiers say of it now:
 * off (OPJIT_MODE=profile), failed (no JIT), unsupported (the limit named), else waiting
 * (calls: its calls so far, against OPJIT_HOT_CALLS). Returns the decision's generation, as
 * ag_tier_reason_gen. */
uint32_t ag_tier_reason(uint32_t i, uint64_t calls, ag_reason_t *out);
/* Entry i's decision generation: 0 before its first decision, then changed by each. Cheap. */
uint32_t ag_tier_reason_gen(uint32_t i);

/* Fills *out for entry i; returns 0 when the entry never had a variant nor an invalidation. */
int ag_tier_persist(uint32_t i, ag_persist_t *out);
/* After the write of *p (ok: committed): takes the object back or frees it. */
void ag_tier_persisted(uint32_t i, ag_persist_t *p, int ok);

/* How a GEMM call with a published variant goes. */
enum ag_run { AG_RUN_ORIGINAL = 0, /* a guard failed: the caller runs the original */
              AG_RUN_DONE,         /* the variant computed C */
              AG_RUN_VERIFY };     /* the variant's result is set aside and C restored: the
                                      caller runs the original on C, then ag_tier_verify_end */
typedef struct ag_verify_s {
  ag_entry_t *e;
  void *copy;    /* C's m x n elements as they were, then the variant's result (compact) */
  void *c;       /* the host's C */
  double bound;
} ag_verify_t;

/* What a call through entry i's variant needs (problem.h), computed when it was queued. */
extern ag_vrun_t *ag_vrun;

/* The verification path of ag_tier_gemm (out of line). */
int ag_tier_gemm_verify(ag_entry_t *e, void *v, const void *a, const void *b, void *c,
                        double alpha, double beta, ag_verify_t *vf);

/* The guard of a GEMM, GEMV or AXPY call through e's variant: the kernel's own operand order
 * into *a and *b (a row-major GEMM's kernel takes B first), and 1 when C (y) overlaps neither A
 * nor B (x), the kernel's speculative assumption; 0 when it does. No store: the fast path
 * (agent.h) checks it before it commits to the call. */
static inline __attribute__((always_inline)) int ag_tier_gemm_guard(const ag_entry_t *e,
                                                                    const void **a,
                                                                    const void **b, const void *c)
{
  const ag_vrun_t *r = &ag_vrun[e->index];
  if (r->swapped) { /* the kernel solves C^T = op(B)^T op(A)^T */
    const void *t = *a;
    *a = *b, *b = t;
  }
  uintptr_t c0 = (uintptr_t)c, c1 = c0 + r->ext_c, a0 = (uintptr_t)*a, b0 = (uintptr_t)*b;
  return !((c0 < a0 + r->ext_a && a0 < c1) || (c0 < b0 + r->ext_b && b0 < c1));
}

/* Dispatches a GEMM, GEMV or AXPY call to e's variant v: the call's own arguments (A and B —
 * x for a GEMV — as the host passed them, row-major included), guarded against C (y)
 * overlapping A or B (x). Inline: it runs on every call a variant serves. */
static inline __attribute__((always_inline)) int ag_tier_gemm(ag_entry_t *e, void *v,
                                                              const void *a, const void *b,
                                                              void *c, double alpha, double beta,
                                                              ag_verify_t *vf)
{
  if (!ag_tier_gemm_guard(e, &a, &b, c)) {
    atomic_fetch_add_explicit(&e->guard_miss, 1, memory_order_relaxed);
    return AG_RUN_ORIGINAL;
  }
  if (__builtin_expect(atomic_load_explicit(&e->verify, memory_order_relaxed) > 0, 0))
    return ag_tier_gemm_verify(e, v, a, b, c, alpha, beta, vf);
  const ag_vrun_t *r = &ag_vrun[e->index];
  if (__builtin_expect(r->parts > 1, 0)) /* N (a GEMV's M) on several cores (par.h) */
    ag_par_gemm(r, (jt_gemm_fn)v, a, b, c, alpha, beta);
  else
    ((void (*)(const void *, const void *, void *, double, double))v)(a, b, c, alpha, beta);
  return AG_RUN_DONE;
}
/* A dot product through e's variant v (f64: on doubles, else floats): *r is the variant's
 * result. AG_RUN_DONE, or AG_RUN_VERIFY: the caller also runs the original, returns its result,
 * and passes both to ag_tier_dot_verify_end. */
int ag_tier_dot(ag_entry_t *e, void *v, int f64, const void *x, const void *y, double *r);
void ag_tier_dot_verify_end(ag_entry_t *e, double variant, double original, const void *x,
                            const void *y);

/* A host's own verification of e's variant (its fused groups): the largest difference from
 * the original and the bound it must stay within (a mismatch blacklists the variant). */
void ag_tier_verify_result(ag_entry_t *e, double worst, double bound);

/* Compares the variant's copy with the original's C: a mismatch beyond the bound unpublishes
 * and blacklists the variant (the host keeps the original's result either way). */
void ag_tier_verify_end(ag_verify_t *vf);

/* Moves up to max events recorded since the last call into out; returns how many. */
size_t ag_tier_events(ag_event_rec_t *out, size_t max);

/* The CPU the variants were compiled for (LLVM's name), for the run's record ("" before the
 * first compile). */
const char *ag_tier_cpu(void);

/* Fork child: the one place the tiers' fork reset is ordered. Each module's own reset (the
 * compile queue, the event log, object persistence, the code cache, the code map), then the
 * tiers' state: the compile threads did not survive, queued signatures are cold again, the
 * judge starts afresh (variants stay valid). */
void ag_tier_after_fork_child(void);

#endif
