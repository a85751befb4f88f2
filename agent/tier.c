/* SPDX-License-Identifier: MIT */
/* Tiers: the state machine of tier.h, over the modules that hold each part of it, each on
 * state kept here and passed in:
 *   cqueue.h     the compile queue and its threads     (compile_next, compile_between)
 *   problem.h    a key's kernel and its operands' extents
 *   codecache.h  bytes against the budget, eviction's grace periods, deferrals (code_mu)
 *   persist.h    each variant's object on its way to the store
 *   verify.h     the numerics of verification against the original
 *   events.h     the event log the writer records
 *   policy.h, compare.h  promotion, and the never-slower judge (cmp_mu)
 *   reason.h     each signature's state and why, set by the decision that moved it (decide)
 * What stays here: the hot tests, compile_one and publish, the watch (demotions), fork.
 *
 * Never slower: once a variant is published, short original bursts (agent.c, ag_call_pick)
 * time the original warm, paired round by round with the variant's warm timings; the judge
 * (compare.h) demotes a variant that loses by its stated rule. Verification: before it is
 * published, a kernel of a host that duels is checked against its original on scratch operands
 * (scratch_check: a failure blacklists it, a pass makes it storable), then the first
 * OPJIT_VERIFY calls run the variant on a copy of C and the original on the host's C; both
 * compare within a bound derived from K and the type's epsilon, and the host always keeps the
 * original's result on those calls. */
#define _GNU_SOURCE
#include "tier.h"
#include "spin.h"
#include "warm.h"
#include "agent.h"
#include "background.h"
#include "codecache.h"
#include "codemap.h"
#include "compare.h"
#include "crash.h"
#include "cqueue.h"
#include "duel.h"
#include "events.h"
#include "heap.h"
#include "persist.h"
#include "policy.h"
#include "par.h"
#include "problem.h"
#include "reason.h"
#include "host.h"
#include "verify.h"
#include "machine.h"
#include "log.h"
#include "opt.h"
#include "jit/jit.h"
#include "jit/objload.h"
#include "sampler/unwind.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TUNE_CANDIDATES 3  /* blockings timed per kernel (jit.h, tune) */
#define TUNE_MIN_CALLS 4096 /* calls a signature has had before its kernel is worth tuning */
/* The duel before publication may take as long as the compile did, within these bounds. */
#define DUEL_MIN_NS 2000000ull
#define DUEL_MAX_NS 20000000ull
/* A problem of more floating-point operations gets neither the check on scratch operands nor
 * the duel, timed or not (too_large): their original calls on the compile thread would still
 * run when a short program exits (the exit waits for them, agent.c), and a library's
 * destructor that stops its thread pool while such a call uses it leaves a pool thread asleep
 * with no job and no stop: numpy on its library's Prescott kernels (0.3.21), 6 float 2048^3
 * products, whose calls were never timed (hot by sampled CPU time), hung at exit 5 of 6 runs,
 * its pool thread asleep with queue 0 and status SLEEP after the shutdown. 2 x 512^3: under
 * 30 ms on a library at 10 GF/s. The first OPJIT_VERIFY calls verify such a kernel on the
 * program's thread instead. */
#define CHECK_MAX_FLOPS (2.0 * 512 * 512 * 512)
/* ... and so does one with an operand of more bytes: the check fills scratch operands of the
 * call's size (random values, NaN guards, its error bound), ~2.5 ns a byte of CPU, on a core a
 * threaded library's pool wants. A float GEMV 2048^2 (16 MB of A) was checked in 38-48 ms of CPU,
 * ~150 of its library calls, in a 0.25 s numpy-like loop on two library threads (Zen 3, 2 vCPUs):
 * that loop's first run went from 0.71x plain to 0.85x without the check (medians of 9 rounds);
 * GEMVs of 4 and 8 MB did not move (0.92 / 0.93, 0.78 / 0.79). */
#define CHECK_MAX_BYTES (8.0 * 1024 * 1024)
/* A variant awaiting its verdict whose signature is called less often than this per second is
 * judged in cold pairs (agent.h, ag_call_pair). */
#define PAIR_HZ 1000.0
#define PAIR_WINDOW_NS 10000000.0 /* ... a rate seen over this long at least: two looks 20-110 us
                                     apart saw no call of a signature called 10-60 thousand times
                                     a second in between, and paired its calls */
#define PAIR_KEPT 32 /* ... one pair of calls in so many once a verdict keeps the variant */

/* The compile queue and its threads (cqueue.h). */
static void compile_begin(void *ctx);
static void compile_next(void *ctx, uint32_t i, int alone);
static long compile_between(void *ctx);
static unsigned compile_pick(void *ctx, const uint32_t *items, unsigned n);
static const ag_cq_ops_t cq_ops = {.begin = compile_begin, .compile = compile_next,
                                   .between = compile_between, .pick = compile_pick};
static ag_cqueue_t cq = AG_CQUEUE_INIT(&cq_ops);
static pthread_mutex_t code_mu = PTHREAD_MUTEX_INITIALIZER; /* the code cache, the code list,
                                                               the estimates, speed verdicts */

/* The JIT module, once a compile thread loaded it (release): the writer reads it too. */
static const jt_api_t *_Atomic jit;
static _Atomic int jit_dead;  /* no compile thread: nothing is queued */
static _Atomic int llvm_dead; /* LLVM cannot compile here (llvm_unusable): stored kernels only */
static _Atomic int hold_hot; /* tier.h, ag_tier_hold: AG_HOLD_QUEUE, AG_HOLD_RUN or none */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER; /* hold_cond: hold_hot lifted */
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static jt_gemm_t *shapes; /* per entry: the column-major problem its variant solves */
ag_vrun_t *ag_vrun;        /* per entry: what a call through the variant needs (tier.h) */

/* The code cache (codecache.h); code_mu. */
static ag_codecache_t cache;

/* Per entry: its variant's object, as the warm start and the writer see it (persist.h). */
static ag_persist_book_t objects = AG_PERSIST_BOOK_INIT;

/* Per entry: the never-slower comparison of its published variant (cmp_mu); the signature's
 * calls at the watch's last look; why a DEMOTED entry is (compile threads). */
static ag_cmp_t *cmps;
/* ... what its saved pool (ag_cmp_save) last changed at: a closed round, a verdict, a new
 * comparison (cmp_rev), and what the writer last stored (cmp_stored); cmp_mu */
static uint32_t *cmp_rev, *cmp_stored;
static uint64_t *watched_calls, *watched_ns; /* ... and the time of that look */
static uint32_t *watched_bg; /* ... and the agent's background work then (ag_bg_mark) */

/* The next rate window of entry i starts now (now_ns), at its calls so far. */
static void watch_from(uint32_t i, uint64_t calls, uint64_t now_ns)
{
  watched_calls[i] = calls, watched_ns[i] = now_ns, watched_bg[i] = ag_bg_mark();
}
static uint64_t *pub_calls; /* per entry: the signature's calls when its variant was published */
enum { AG_DEMOTED_SLOWER = 0, AG_DEMOTED_TIE, AG_DEMOTED_GUARD, AG_DEMOTED_CRASH };
static uint8_t *demoted;
static uint8_t *prepared; /* per entry: shapes[] and ag_vrun[] hold its problem (cq locked) */
static float *duel_won; /* per entry: the median ratio of the duel its variant won (0: none) */
static float *prof_ns;  /* per entry: its original's mean call in earlier runs (0: unknown) */
static _Atomic uint8_t *long_wait; /* per entry: 1 while hot but waiting for its calls' timings
                                      (library_wins, ag_tier_long_timed) */
static pthread_mutex_t cmp_mu = PTHREAD_MUTEX_INITIALIZER;
/* OPJIT_TEST_FAULT=slow: 64 (the variant's side runs 64 times in the duel, its pair timings
 * count 64 times), fast: -16 (the original's, 16 times). The loser's factor is the larger: the
 * original's side can cost many times a small kernel's for reasons of its own (a library taking
 * its locks for a tiny product, which ThreadSanitizer intercepts: 1.5 us against the kernel's
 * 55 ns for an 8^3 product on a Zen 5). */
static int fault_reps;
_Atomic int ag_tier_live;

/* What promotion has learnt: the judge's verdicts per size class (policy.h). Compile threads
 * write, host threads read racily (an estimate). */
static ag_policy_t policy;

/* e's size class for the policy. */
static int size_class(const ag_entry_t *e) { return ag_policy_class(e->key.m, e->key.n, e->key.k); }

static ag_events_t events = AG_EVENTS_INIT;
/* Records an event about entry e (events.h). */
#define event(e, ...) ag_events_add(&events, (e)->index, __VA_ARGS__)

/* Per entry: its state and why, as the last decision on it put them (reason.h). */
static ag_reasons_t reasons = AG_REASONS_INIT;

/* Every decision that moves a signature's state ends here: entry e is in state st, for the
 * reason formatted from fmt; kind >= 0 also records the event of that kind in the same words. */
static void decide(ag_entry_t *e, enum ag_state st, int kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void decide(ag_entry_t *e, enum ag_state st, int kind, const char *fmt, ...)
{
  char text[AG_REASON_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (ag_reasons_init(&reasons, ag_tcount_capacity) == 0)
    ag_reason_set(&reasons, e->index, st, "%s", text);
  if (kind >= 0)
    event(e, kind, "%s", text);
}

/* decide, for a decision on a program's call (the promotion test): the reason kept as figs
 * (size bytes) and worded by words when read (reason.h); formats nothing, records no event. */
static void decide_figs(ag_entry_t *e, enum ag_state st, ag_reason_words_fn words,
                        const void *figs, size_t size)
{
  if (ag_reasons_init(&reasons, ag_tcount_capacity) == 0)
    ag_reason_set_figs(&reasons, e->index, st, words, figs, size);
}

/* Starts the comparison of e's variant, about to be published: afresh, or resumed from the
 * rounds earlier runs pooled on it (pool, NULL: none). Its calls are not paired until the
 * watch finds them rare. */
static void judge(ag_entry_t *e, const st_judge_pool_t *pool)
{
  atomic_store(&e->pair, 0);
  atomic_store(&e->pair_n, 0);
  pthread_mutex_lock(&cmp_mu);
  if (pool)
    ag_cmp_resume(&cmps[e->index], pool, atomic_load(&e->vtimed), atomic_load(&e->vtimed_ns));
  else
    ag_cmp_start(&cmps[e->index], atomic_load(&e->vtimed), atomic_load(&e->vtimed_ns));
  cmp_rev[e->index]++;
  atomic_store(&e->awaiting, !cmps[e->index].kept);
  pthread_mutex_unlock(&cmp_mu);
  atomic_fetch_add(&ag_tier_live, 1);
}

/* Publishes fn as e's variant: READY, its comparison with the original started (from pool's
 * rounds, NULL: none), and then the pointer host threads load (release: what came before is
 * visible to a thread that calls it). The first verify calls run against the original (0:
 * none). Every variant, compiled or placed from the store, becomes callable here and only
 * here. */
static void publish(ag_entry_t *e, void *fn, int32_t verify, const st_judge_pool_t *pool)
{
  uint64_t calls, vcalls; /* the watch measures the call rate from here (before READY: the
                             watch looks at READY entries only) */
  ag_tcount_sum_one(e->index, &calls, &vcalls);
  pub_calls[e->index] = calls;
  watch_from(e->index, calls, ag_now_ns());
  atomic_store(&e->verify, verify);
  atomic_store(&e->tier, AG_TIER_READY);
  judge(e, pool);
  atomic_store_explicit(&e->variant, fn, memory_order_release);
}

size_t ag_tier_events(ag_event_rec_t *out, size_t max) { return ag_events_take(&events, out, max); }

const char *ag_tier_cpu(void)
{
  const jt_api_t *j = atomic_load_explicit(&jit, memory_order_acquire);
  return j ? j->cpu() : "";
}

/* The kernel e's key asks for (problem.h). */
static int gemm_of(const ag_sig_t *k, jt_gemm_t *g, int *swap)
{
  return ag_problem_of(k, ag_opts.num[AG_OPT_JIT_MAX_DIM], g, swap);
}

static char jit_error[160]; /* why LLVM is unavailable, once load_jit failed (llvm_dead) */

/* LLVM compiles nothing more in this process (why: the states' reasons say it); the kernels the
 * database stores for this machine are still placed, which needs no LLVM. */
static void llvm_unusable(const char *why)
{
  snprintf(jit_error, sizeof jit_error, "%s", why);
  atomic_store(&llvm_dead, 1);
}

/* Whether e may be queued: a compile thread can run, and LLVM can compile or the database
 * stores e's kernel for this machine (warm.h, ag_warm_shelved). */
static int may_queue(ag_entry_t *e)
{
  return !atomic_load(&jit_dead) && (!atomic_load(&llvm_dead) || ag_warm_shelved(&e->key));
}

/* Loads libopjit-jit.so (and LLVM) beside the agent. */
static int load_jit_now(void)
{
  char path[4200], err[512] = "";
  snprintf(path, sizeof path, "%s/%s", ag_self_dir(), JT_MODULE_NAME);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const jt_api_t *api = h ? dlsym(h, JT_API_SYMBOL) : NULL;
  if (!api || api->abi != JT_API_ABI || api->init(err, sizeof err)) {
    snprintf(jit_error, sizeof jit_error, "%s", api ? (err[0] ? err : "wrong ABI") : dlerror());
    ag_log(AG_LOG_WARN, "the JIT is unavailable (%s): every signature stays on the original "
                        "library", jit_error);
    return -1;
  }
  atomic_store_explicit(&jit, api, memory_order_release); /* after its init */
  ag_log(AG_LOG_INFO, "JIT ready: LLVM %s for %s", api->llvm_version(), api->cpu());
  return 0;
}

static _Atomic int jit_tried; /* a compile thread has started loading LLVM */
static _Atomic int compile_waits; /* a compile thread is about to compile (it measures one) */

/* The module, loaded once for all compile threads; returns 0 when it is usable. *load_ns: the
 * CPU time of the load where this call made it (what the payback test charges the first
 * compile besides: pays_back; the caller notes it), else 0. */
static int load_jit(uint64_t *load_ns)
{
  static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
  static int state; /* 0 not tried, 1 loaded, -1 unavailable */
  atomic_store(&jit_tried, 1);
  *load_ns = 0;
  pthread_mutex_lock(&load_mu);
  if (!state) {
    uint64_t t0 = ag_thread_cpu_ns();
    state = load_jit_now() == 0 ? 1 : -1;
    if (state == 1)
      *load_ns = ag_thread_cpu_ns() - t0;
  }
  pthread_mutex_unlock(&load_mu);
  return state == 1 ? 0 : -1;
}

/* The ISA the JIT compiles for: the machine model's choice (OPJIT_ISA). */
static int jit_isa(void)
{
  return ag_machine_isa() == AG_ISA_AVX512 ? JT_ISA_AVX512 : JT_ISA_AVX2;
}

/* The cache's size in bytes (a test may shrink it through OPJIT_TEST_CODE_CACHE_BYTES). */
static size_t cache_budget(void)
{
  const char *test = getenv("OPJIT_TEST_CODE_CACHE_BYTES");
  return test ? (size_t)strtoull(test, NULL, 10) : (size_t)ag_opts.num[AG_OPT_CODE_CACHE_MB] << 20;
}

/* Frees an evicted kernel's code (codecache.h, ag_cc_ops_t): a placed one's mapping, a compiled
 * one's reference in the JIT session; then its call-frame rules and name go too. code_mu. */
static int release_code(void *ctx, void *fn)
{
  (void)ctx;
  char err[256] = "the JIT is not loaded";
  ag_code_t k;
  int known = ag_code_find(fn, &k) == 0;
  int freed = -1; /* 1 freed, 0 still another signature's (LLJIT shares a kernel by name) */
  if (known && k.loaded.map) {
    jt_obj_unload(&k.loaded);
    freed = 1;
  } else if (atomic_load(&llvm_dead)) { /* a fork child's LLVM is not touched: the code stays */
    snprintf(err, sizeof err, "LLVM is not used in this process (%s)", jit_error);
    freed = 0;
  } else if (jit) {
    int rc = jit->release((jt_gemm_fn)fn, err, sizeof err);
    freed = rc == 0 ? 1 : rc == 1 ? 0 : -1;
  }
  if (freed != 0) { /* gone, or unknown to the session now: its rules and name go too (new
                       code may take its place at the next compile on a compile thread) */
    uw_remove_code((uint64_t)(uintptr_t)fn);
    ag_code_remove(fn); /* no PC is in it any more; its slot serves the next kernel */
  }
  if (freed < 0)
    ag_log_once(AG_LOG_WARN, "an evicted kernel could not be freed: %s", err);
  return freed;
}

static int grace_passed(void *ctx, const ag_epoch_t *snap, size_t nsnap)
{
  (void)ctx;
  return ag_tcount_passed(snap, nsnap);
}

/* Frees the evicted kernels whose grace period has passed. Compile thread only. */
static void free_retired(void)
{
  static const ag_cc_ops_t ops = {grace_passed, release_code, NULL};
  ag_cc_free_retired(&cache, &ops);
}

static int is_ready(void *ctx, uint32_t i)
{
  (void)ctx;
  return atomic_load(&ag_table_entry(ag_table, i)->tier) == AG_TIER_READY;
}


/* Retires fn, charged the bytes of its code (its mapping, for a placed kernel), until the grace
 * period of snap (malloc'ed, taken over; NULL when no host thread ever ran it). code_mu held. */
static void retire(void *fn, ag_epoch_t *snap, size_t nsnap)
{
  ag_code_t k;
  size_t size = ag_code_find(fn, &k) ? 0 : k.loaded.map ? k.loaded.map_len : k.hi - k.lo;
  if (ag_cc_retire(&cache, fn, size, snap, nsnap))
    free(snap);
}

/* Evicts the ready variant that has served the fewest calls: unpublished now, freed after the
 * grace period. Returns 0, or -1 when there is nothing to evict. Compile thread only. */
static int evict_one(void)
{
  uint32_t n = ag_table_count(ag_table);
  uint64_t *calls = calloc(n ? n : 1, sizeof *calls), *vcalls = calloc(n ? n : 1, sizeof *vcalls);
  ag_epoch_t *snap = calloc(1024, sizeof *snap);
  int rc = -1;
  if (!calls || !vcalls || !snap || ag_cc_retired_full(&cache))
    goto out;
  ag_tcount_sum(calls, vcalls, n);
  uint32_t victim = ag_cc_victim(vcalls, n, is_ready, NULL);
  if (victim == UINT32_MAX)
    goto out;
  ag_entry_t *e = ag_table_entry(ag_table, victim);
  uint32_t ready = AG_TIER_READY; /* a host thread's verification may have failed it since */
  if (!atomic_compare_exchange_strong(&e->tier, &ready, AG_TIER_COLD))
    goto out; /* FAILED: its code stays, as a blacklisted variant's does */
  void *fn = atomic_exchange(&e->variant, NULL); /* seq_cst: before the snapshot below */
  if (!fn)
    goto out;
  size_t nsnap = ag_tcount_snapshot(snap, 1024);
  if (nsnap > 1024) { /* too many threads to prove a grace period: the code stays */
    free(snap);
    snap = NULL;
    nsnap = 0;
  } else {
    retire(fn, snap, nsnap); /* not full: checked above */
    snap = NULL;
  }
  decide(e, AG_STATE_WAITING, AG_EV_EVICTED, "evicted: code cache full, it served %llu calls, "
         "the fewest of the ready variants; compiled again once hot again",
         (unsigned long long)vcalls[victim]);
  rc = 0;
out:
  free(calls), free(vcalls), free(snap);
  return rc;
}

/* Registers a kernel's code (for the sampler, perf and freeing); code_mu held. */
/* Frees retired code, then evicts until bytes fit the code cache or nothing is left to evict:
 * whether they fit. code_mu held. */
static int make_room(size_t bytes)
{
  free_retired();
  while (!ag_cc_fits(&cache, bytes) && evict_one() == 0)
    free_retired();
  return ag_cc_fits(&cache, bytes);
}

static void add_code(void *fn, size_t size, const char *name, const jt_loaded_t *loaded,
                     const void *obj, size_t obj_len, const ag_sig_t *key)
{
  int rc = ag_code_add(fn, size, name, loaded, key);
  if (rc == 1)
    return; /* one kernel two signatures share (LLJIT's by name): named and walked already */
  if (rc < 0)
    ag_log_once(AG_LOG_WARN, "no memory to register JIT kernel %s: samples in it are not named",
                name);
  /* Its call-frame rules, for the sampler's stack walks through it (from the object it was
   * placed from; without one, or without its rules, samples there keep the kernel's PC and
   * the operator alone). */
  uint64_t lo = (uint64_t)(uintptr_t)fn;
  uint8_t cfi[512];
  char err[160] = "no object";
  long n = obj ? jt_obj_cfi(obj, obj_len, name, lo, cfi, sizeof cfi, err, sizeof err) : -1;
  if (n <= 0 || uw_add_code(lo, lo + size, cfi, (size_t)n))
    ag_log(AG_LOG_DEBUG, "stacks end inside JIT kernel %s: %s", name, n > 0 ? "no memory" : err);
  if (ag_opts.num[AG_OPT_PERF_MAP]) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *f = fopen(path, "ae");
    if (f) {
      fprintf(f, "%llx %zx %s\n", (unsigned long long)lo, size, name);
      fclose(f);
    }
  }
}

/* Entry i got a variant: obj (owned from now on, may be NULL) is its object, loaded says
 * whether it came from the store. */
static void set_persisted(uint32_t i, void *obj, size_t len, const char *symbol, int loaded)
{
  uint64_t pre = 0, served;
  if (!loaded)
    ag_tcount_sum_one(i, &pre, &served);
  ag_persist_set(&objects, i, obj, len, symbol, loaded, pre);
}

/* The duel before publication (duel.h): the kernels of hosts whose originals can run alone
 * (host.h, AG_HOST_DUELS; the others judge their kernels on their calls). A kernel that loses,
 * or ties (no gain: duel.h), is never published: demoted as the in-run judge demotes a loser,
 * with its event, and left on the original in later runs until the generator changes (LOST or
 * TIED, both medians in the reason). The first verdict teaches the promotion policy. reps: the
 * test seam's (host.h, duel: 16 makes the kernel slower, -16 the original). said gets what the
 * publication's event and reason should add: the duel's verdict, or why there was none. Returns
 * 1 when the kernel lost. Compile thread only. */
static int too_large(ag_entry_t *e);
static double library_call_ns(ag_entry_t *e);

/* "; A, B, C 16, 16, 0 bytes into a line, as the program's" where the duel placed an operand
 * off a line (offsets: ag_entry_t.offsets), else "". */
static void placed_words(uint32_t offsets, char *buf, size_t len)
{
  buf[0] = 0;
  if (offsets)
    snprintf(buf, len, "; A, B, C %u, %u, %u bytes into a line, as the program's",
             offsets & 63, offsets >> 6 & 63, offsets >> 12 & 63);
}

static int duel_lost(ag_entry_t *e, jt_gemm_fn fn, uint64_t compile_ns, uint64_t calls_before,
                     int reps, char *said, size_t len)
{
  uint64_t budget = compile_ns < DUEL_MIN_NS ? DUEL_MIN_NS : compile_ns > DUEL_MAX_NS ? DUEL_MAX_NS
                                                                                     : compile_ns;
  const ag_host_t *host = ag_host_of(e->key.host);
  ag_duel_result_t r;
  if (!ag_opts.num[AG_OPT_DUEL] || !host || !(host->traits & AG_HOST_DUELS) || !host->duel) {
    snprintf(said, len, "; no duel (%s): no verdict from the in-run judge yet",
             ag_opts.num[AG_OPT_DUEL] ? "its host's kernels are judged on the program's calls"
                                      : "OPJIT_DUEL=0");
    return 0;
  }
  /* a library call too long for the judge's fewest rounds within the budget, on the timings the
   * long-call rule weighs (the first alone may be a warm-up's): the duel would time one call a
   * side to find that out (a 1024^3 double product on a library below the CPU: 0.4-0.7 s before
   * publication); a problem too large for one, timed or not (too_large) */
  double call_ns = atomic_load_explicit(&e->best_n, memory_order_relaxed) >= AG_POLICY_LONG_TIMINGS
                       ? library_call_ns(e)
                       : 0;
  if (call_ns > 0 && ag_duel_need_ns((uint64_t)call_ns) > budget) {
    snprintf(said, len, "; no duel (its library's call, %.2f ms, is too long for one): no "
             "verdict from the in-run judge yet", call_ns / 1e6);
    return 0;
  }
  if (too_large(e)) { /* the operands the duel's scratch would need (CHECK_MAX_*) */
    snprintf(said, len, "; no duel (a product this large is neither checked nor duelled on "
             "scratch operands): no verdict from the in-run judge yet");
    return 0;
  }
  /* A split kernel's library runs the call on threads of its own: a duel while the program
   * calls it runs on the same cores and threads as the program's calls (one timed the library at
   * 1.7 ms a call where a plain call takes 0.04, and "won" at 0.03) */
  uint32_t offsets = atomic_load_explicit(&e->offsets, memory_order_relaxed);
  uint64_t calls0, calls1, served;
  ag_tcount_sum_one(e->index, &calls0, &served);
  int split = ag_vrun[e->index].parts > 1;
  if (split && calls0 > calls_before) {
    snprintf(said, len, "; no duel (the program made %llu such calls while it compiled, on the "
             "cores a split kernel's duel takes): no verdict from the in-run judge yet",
             (unsigned long long)(calls0 - calls_before));
    return 0;
  }
  int rc = host->duel(&e->key, (void *)fn, &ag_vrun[e->index], offsets, reps, budget, &r);
  if (rc == -2)
    return 1; /* the process is exiting: not published, no verdict kept */
  if (rc) {
    snprintf(said, len, "; no duel (no scratch operands of its shape): no verdict from the in-run "
             "judge yet");
    return 0;
  }
  ag_tcount_sum_one(e->index, &calls1, &served);
  if (r.verdict != AG_CMP_UNDECIDED && split && calls1 > calls0) {
    snprintf(said, len, "; no verdict from its duel (the program made %llu such calls meanwhile, "
             "on the same cores), nor from the in-run judge yet",
             (unsigned long long)(calls1 - calls0));
    return 0;
  }
  if (r.verdict == AG_CMP_UNDECIDED) {
    snprintf(said, len, "; no verdict in its duel (%u rounds), nor from the in-run judge yet",
             r.rounds);
    return 0;
  }
  char placed[96];
  placed_words(offsets, placed, sizeof placed);
  snprintf(said, len, "; won its duel: variant %.0f ns per call, original %.0f ns (median ratio "
           "%.2f over %u rounds%s)", r.var_ns, r.orig_ns, r.median, r.rounds, placed);
  pthread_mutex_lock(&code_mu); /* the policy's writers, and the code cache below */
  e->tier_flags |= 1;
  ag_policy_learn(&policy, size_class(e), r.median);
  if (r.verdict == AG_CMP_FASTER) {
    duel_won[e->index] = (float)r.median;
    pthread_mutex_unlock(&code_mu);
    return 0;
  }
  /* No host thread ever ran the loser (only this thread, in the duel): its code goes back to
   * the cache at the next free, with no grace period to wait for. */
  retire((void *)fn, NULL, 0); /* a full list keeps it */
  pthread_mutex_unlock(&code_mu);
  uint32_t i = e->index;
  demoted[i] = AG_DEMOTED_SLOWER; /* before the tier: the writer reads it once DEMOTED */
  atomic_store(&e->tier, AG_TIER_DEMOTED);
  decide(e, r.verdict == AG_CMP_TIE ? AG_STATE_TIED : AG_STATE_LOST, AG_EV_DEMOTED,
         "%s before publication: variant %.0f ns per call, original %.0f ns (duel on scratch "
         "operands; median ratio %.2f over %u rounds%s)",
         r.verdict == AG_CMP_TIE ? "tie" : "slower", r.var_ns, r.orig_ns, r.median, r.rounds,
         placed);
  if (ag_persist_drop(&objects, i))
    event(e, AG_EV_INVALIDATED, "slower: %.0f ns per call, original %.0f ns", r.var_ns, r.orig_ns);
  return 1;
}

/* The check of e's new kernel fn before publication, on scratch operands against its host's
 * original (host.h, check: the hosts that duel), unless OPJIT_VERIFY=0 or the tests' fault seam
 * leaves a wrong kernel to the in-call verification (OPJIT_TEST_FAULT=wrong-in-call): what the
 * host's check returns (1 passed, 0 failed: *out says how, -2 the process is exiting), -1 when
 * there was none (also for a problem too large for one: too_large); *ns the CPU time it took
 * (the compile thread's: a preempted check is not charged the wait). Compile thread only,
 * code_mu not held (it calls the library). */
static int scratch_check(ag_entry_t *e, jt_gemm_fn fn, const char *fault, ag_scratch_t *out,
                         uint64_t *ns)
{
  const ag_host_t *host = ag_host_of(e->key.host);
  if (!ag_opts.num[AG_OPT_VERIFY] || !host || !(host->traits & AG_HOST_DUELS) || !host->check ||
      (fault && strcmp(fault, "wrong-in-call") == 0) || too_large(e))
    return -1;
  uint64_t t0 = ag_thread_cpu_ns();
  int rc = host->check(&e->key, &shapes[e->index], (void *)fn, &ag_vrun[e->index], out);
  *ns = ag_thread_cpu_ns() - t0;
  return rc;
}

/* ", N in P parts on as many cores" where entry i's kernel splits N (a GEMV's: M; par.h), else
 * "". */
static const char *split_words(uint32_t i, char *buf, size_t len)
{
  int parts = ag_vrun[i].parts;
  if (parts > 1)
    snprintf(buf, len, ", %c in %d parts on as many cores", ag_problem_split_dim(&shapes[i]),
             parts);
  else
    buf[0] = 0;
  return buf;
}

/* The CPUs online (at least 1), read once. */
static long online_cpus(void)
{
  static _Atomic long online;
  long n = atomic_load_explicit(&online, memory_order_relaxed);
  if (!n) {
    n = sysconf(_SC_NPROCESSORS_ONLN);
    n = n > 0 ? n : 1;
    atomic_store_explicit(&online, n, memory_order_relaxed);
  }
  return n;
}

/* The CPUs the program's threads take from the compile thread for entry e's compile (g: its
 * problem, gemm_of's, or NULL where it has none), of the
 * *ncpu online: its threads that call operators (registered; a library's own thread pool is not
 * seen), or all of them where e's calls keep every CPU busy. A call too long for the duel whose
 * fastest timed call is that long is such a call: it is what a library spreads over its own
 * threads, which take the core the count thinks idle (the README demo's 512^3 products on a
 * library's two threads had their kernel compiled as a first trial, published after their last
 * call). So is a call large enough to split between two cores (par.h) on a host whose library
 * runs threads of its own, however many parts this run takes (*pool set): its library spreads
 * it, and a compile then holds the core the library's next call waits for (numpy's float
 * 1024^2 GEMV on two threads: 2-4 ms a call instead of 0.06-0.1 while the kernel compiled and
 * was checked). Fewer than *ncpu: a core is idle for the compile. */
static long cpus_taken(const ag_entry_t *e, const jt_gemm_t *g, long *ncpu, int *pool)
{
  *ncpu = online_cpus();
  ag_epoch_t snap[64];
  long busy = (long)ag_tcount_snapshot(snap, 64);
  uint64_t best = atomic_load_explicit(&e->best_ns, memory_order_relaxed);
  ag_vrun_t spread;
  *pool = g && ag_host_threaded() && ag_problem_split(g, 2, &spread) > 1;
  return *pool || (best && ag_duel_need_ns(best) > DUEL_MAX_NS) ? *ncpu : busy;
}

/* Compiles and publishes entry i; idle: nothing else waits in the queue. Compile thread only. */
static void compile_one(uint32_t i, int idle)
{
  ag_entry_t *e = ag_table_entry(ag_table, i);
  jt_gemm_t g = ag_problem_part(&shapes[i], &ag_vrun[i]); /* a part's kernel (par.h) */
  const char *fault = getenv("OPJIT_TEST_FAULT"); /* fault injection for the tests only */
  char err[512] = "";
  jt_gemm_fn fn = NULL;
  size_t size = 0, obj_len = 0;
  void *obj = NULL;
  ag_reason_state(&reasons, i, AG_STATE_COMPILING); /* why it was queued stays the reason */
  duel_won[i] = 0, e->tier_flags &= ~2u;             /* a new variant: no verdict on it yet */
  pthread_mutex_lock(&code_mu);
  if (!make_room(AG_CC_RESERVE)) { /* nothing left to evict, or not freed yet */
    atomic_store(&e->tier, AG_TIER_COLD);
    decide(e, AG_STATE_DEFERRED, AG_EV_DEFERRED, "code cache full (%zu bytes, "
           "OPJIT_CODE_CACHE_MB): stays on the original until evicted code is freed", cache.bytes);
    ag_cc_defer(&cache, i); /* when full, hot again later, it asks again */
    pthread_mutex_unlock(&code_mu);
    return;
  }
  ag_cc_charge(&cache, AG_CC_RESERVE); /* while compiling (other threads may compile meanwhile) */
  pthread_mutex_unlock(&code_mu);
  uint64_t t0 = ag_now_ns();
  if (fault && strncmp(fault, "wrong", 5) == 0) { /* wrong, or wrong-in-call (scratch_check) */
    g.beta_class = g.beta_class ? 0 : 1; /* a real kernel that adds, or ignores, the old C */
    g.k -= g.mm && g.k > 1; /* an mm kernel that leaves out the last k */
  }
  /* The ISA the machine model chose (OPJIT_ISA). Where the model leaves the blocking open, the
   * JIT times a few candidates on the real shape and keeps the fastest (its name says which),
   * when the compile thread has time to spare, on a core the program leaves idle, and the
   * signature has been called often enough for tuning (2-3 compiles) to pay; else the model's
   * own pick (a program with hundreds of hot signatures gets them all compiled first, a short
   * one gets its kernels soonest, and one whose threads take every core loses a compile's CPU
   * time, not three: the candidates measured within 3 % of the model's pick on a Zen 5). */
  uint64_t calls, vcalls;
  ag_tcount_sum_one(i, &calls, &vcalls);
  long ncpu;
  int pool, tune = idle && calls >= TUNE_MIN_CALLS && jt_kind(&g)->tunes;
  if (tune) {
    long taken = cpus_taken(e, &shapes[i], &ncpu, &pool);
    tune = taken < ncpu;
  }
  g.isa = jit_isa();
  jt_gemm_t best = g;
  jt_tune_t rep = {0};
  uint64_t cpu0 = ag_thread_cpu_ns();
  int rc = fault && strcmp(fault, "compile") == 0
               ? (snprintf(err, sizeof err, "injected compile failure"), -1)
           : !tune ? jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err)
                   : jit->tune(&g, TUNE_CANDIDATES, &best, &fn, &size, &obj, &obj_len, &rep, err,
                               sizeof err);
  g = best;
  /* a tuning's compiles, each its share (its timings are no compile's cost) */
  uint64_t dt = ag_now_ns() - t0;
  uint64_t cpu_dt = !tune ? ag_thread_cpu_ns() - cpu0
                    : rep.n > 0 ? rep.compile_cpu_ns / (uint64_t)rep.n : 0;
  /* whatever the checks find next (under 0.1 ms: a kernel compiled before, shared) */
  if (rc == 0 && cpu_dt >= 100000)
    ag_machine_note_compile(ag_problem_family(&shapes[i]), cpu_dt);
  double worst = 0, bound = 0;
  /* against the signature's own problem (shapes[i]), not what was compiled (g) */
  const ag_host_t *host = ag_host_of(e->key.host);
  int self = rc == 0 && host && host->selftest
                 ? host->selftest(&shapes[i], (void (*)(void))fn, &worst, &bound)
                 : -1;
  ag_scratch_t sc;
  uint64_t check_ns = 0;
  int checked = rc == 0 && self < 0 ? scratch_check(e, fn, fault, &sc, &check_ns) : -1;
  pthread_mutex_lock(&code_mu);
  ag_cc_refund(&cache, AG_CC_RESERVE);
  /* the session still had this kernel: evicted, not yet freed */
  int resurrected = rc == 0 && ag_cc_resurrect(&cache, (void *)fn);
  if (resurrected)
    jit->release(fn, err, sizeof err); /* the evicted variant's reference: 1, this one stays */
  if (rc) { /* back off: hot again after 8192, then 16384 calls; the third failure is final */
    free(obj);
    uint32_t fails = atomic_fetch_add(&e->fails, 1) + 1;
    atomic_store(&e->tier, fails >= 3 ? AG_TIER_FAILED : AG_TIER_COLD);
    decide(e, AG_STATE_FAILED, AG_EV_FAILED, "%s (%s)", err,
           fails >= 3 ? "blacklisted after 3 failures" : "will retry");
    pthread_mutex_unlock(&code_mu);
    ag_log_once(AG_LOG_WARN, "a kernel failed to compile (%s): its signature stays on the "
                             "original library", err);
    return;
  }
  char name[128];
  jit->gemm_name(&g, name, sizeof name); /* the kernel compiled (a test's fault changes it) */
  if (!resurrected) {
    ag_cc_charge(&cache, size);
    if (size)
      add_code((void *)fn, size, name, NULL, obj, obj_len, &e->key);
  }
  set_persisted(i, obj, obj_len, name, 0);
  if (checked == -2) { /* the process is exiting: not published, no verdict kept */
    pthread_mutex_unlock(&code_mu);
    return;
  }
  if (self == 0 || checked == 0) { /* never published; its code stays, as a blacklisted
                                      variant's does */
    atomic_store(&e->tier, AG_TIER_FAILED);
    pthread_mutex_unlock(&code_mu);
    ag_persist_drop(&objects, i);
    char how[112];
    if (self == 0)
      snprintf(how, sizeof how, "self-test off by %.3g, bound %.3g", worst, bound);
    else if (sc.outside)
      snprintf(how, sizeof how, "on scratch operands: wrote outside its result (element %ld "
               "from C[0,0], ldc %d)", sc.at, shapes[i].ldc);
    else if (shapes[i].dot)
      snprintf(how, sizeof how, "on scratch operands: its result off by %.3g, bound %.3g",
               sc.worst, sc.bound);
    else
      snprintf(how, sizeof how, "on scratch operands: C[%ld,%ld] off by %.3g, bound %.3g", sc.wi,
               sc.wj, sc.worst, sc.bound);
    decide(e, AG_STATE_FAILED, AG_EV_VERIFY_FAILED, "%s: blacklisted before its first call",
           how);
    ag_log(AG_LOG_WARN, "a JIT kernel failed its check before publication (%s): it is "
                        "blacklisted, results stay the original's", how);
    return;
  }
  if (self == 1) {
    ag_persist_pass(&objects, i, (uint32_t)ag_opts.num[AG_OPT_VERIFY]);
    event(e, AG_EV_VERIFIED, "self-test within %.3g", bound);
  }
  if (checked == 1) { /* storable once published, called again or not */
    ag_persist_pass(&objects, i, (uint32_t)ag_opts.num[AG_OPT_VERIFY]);
    event(e, AG_EV_VERIFIED, "on scratch operands: matches the original within %.3g, wrote "
          "only its result (checked in %.0f us of CPU)", sc.bound, (double)check_ns / 1e3);
  }
  e->compile_ns = dt;
  pthread_mutex_unlock(&code_mu);
  char said[AG_REASON_LEN];
  _Static_assert(sizeof ((ag_event_rec_t *)0)->detail >= AG_REASON_LEN,
                 "an event's detail holds the reason it records");
  int reps = fault_reps ? fault_reps : 1; /* the duel's, as the pairs' (arrays) */
  if (duel_lost(e, fn, dt, calls, reps, said, sizeof said))
    return;
  /* the reason before the pointer: a writer that sees the variant serve sees why */
  char split[48], tuned[40] = "";
  if (tune && rep.n > 1)
    snprintf(tuned, sizeof tuned, " (the fastest of %d blockings)", rep.n);
  decide(e, AG_STATE_SERVING, AG_EV_PUBLISHED, "compiled in %.2f ms%s%s%s", (double)dt / 1e6,
         tuned, split_words(i, split, sizeof split), said);
  publish(e, (void *)fn, (int32_t)ag_opts.num[AG_OPT_VERIFY], NULL);
  if (ag_vrun[i].parts > 1 && ag_host_threaded())
    ag_spin_begin_hold(); /* the library's last calls, and a duel's, leave its pool spinning */
}

void ag_tier_burst(ag_entry_t *e, uint32_t n, uint64_t ns)
{
  if (!cmps || atomic_load(&e->tier) != AG_TIER_READY)
    return;
  pthread_mutex_lock(&cmp_mu);
  cmp_rev[e->index] +=
      ag_cmp_burst(&cmps[e->index], n, ns, atomic_load(&e->vtimed), atomic_load(&e->vtimed_ns));
  pthread_mutex_unlock(&cmp_mu);
}

void ag_tier_pair(ag_entry_t *e, int side, uint64_t ns)
{
  if (!cmps || atomic_load(&e->tier) != AG_TIER_READY)
    return;
  /* the test seam (OPJIT_TEST_FAULT=slow, fast): the variant's timings, or the original's, as
   * if the side ran that many times (duel.h's reps in the duel) */
  if (fault_reps > 0 && side == AG_CMP_PAIR_VARIANT)
    ns *= (uint64_t)fault_reps;
  else if (fault_reps < 0 && side == AG_CMP_PAIR_ORIG)
    ns *= (uint64_t)-fault_reps;
  pthread_mutex_lock(&cmp_mu);
  cmp_rev[e->index] += ag_cmp_pair(&cmps[e->index], side, ns);
  pthread_mutex_unlock(&cmp_mu);
}

/* Entry i's judge rounds are worth keeping: a variant serving, or one tied for this run (its tie
 * is the next run's to read); a slower one's object and rounds are dropped. */
static int judge_kept(uint32_t i)
{
  if (!cmps)
    return 0;
  uint32_t t = atomic_load(&ag_table_entry(ag_table, i)->tier);
  return t == AG_TIER_READY || (t == AG_TIER_DEMOTED && demoted[i] == AG_DEMOTED_TIE);
}

int ag_tier_judge_pool(uint32_t i, st_judge_pool_t *out, uint32_t *rev)
{
  if (!judge_kept(i))
    return 0;
  pthread_mutex_lock(&cmp_mu);
  int changed = cmp_rev[i] != cmp_stored[i];
  if (changed)
    ag_cmp_save(&cmps[i], out), *rev = cmp_rev[i];
  pthread_mutex_unlock(&cmp_mu);
  return changed && out->rounds > 0;
}

void ag_tier_judge_stored(uint32_t i, uint32_t rev)
{
  pthread_mutex_lock(&cmp_mu);
  cmp_stored[i] = rev;
  pthread_mutex_unlock(&cmp_mu);
}

double ag_tier_judge_ratio(uint32_t i)
{
  if (!cmps)
    return 0;
  st_judge_pool_t pool;
  pthread_mutex_lock(&cmp_mu);
  ag_cmp_save(&cmps[i], &pool);
  pthread_mutex_unlock(&cmp_mu);
  return pool.n >= ST_JUDGE_MIN_RATIOS ? st_judge_median(pool.ratio, pool.n) : 0;
}

/* The in-run judge found e's variant faster (median ratio med), or no slower (a tie the rule
 * gives to the variant: compare.h): that is now the basis of its serving, with the duel it won
 * before publication, if any (a placed kernel had none in this run); fig: the judge's figures in
 * words (compare.h, ag_cmp_describe). The factor is the median's, as the readers' speedup is (the
 * means may disagree: a few slow variant calls after a burst, the library's threads spinning,
 * put a kernel that tied at 0.98 at "0.8x faster" by its means). */
static void judged_faster(ag_entry_t *e, double med, const char *fig)
{
  ag_reason_t r;
  ag_reason_get(&reasons, e->index, &r);
  int placed = r.state == AG_STATE_PLACED;
  char duel[64] = "";
  if (duel_won[e->index] > 0)
    snprintf(duel, sizeof duel, "won its duel (median ratio %.2f), then ", duel_won[e->index]);
  char how[48];
  if (med > 0 && med < 1 - AG_CMP_MARGIN)
    snprintf(how, sizeof how, "%.2fx faster", 1 / med);
  else
    snprintf(how, sizeof how, "no slower (a tie)");
  decide(e, placed ? AG_STATE_PLACED : AG_STATE_SERVING, -1,
         "%s%s%s on the program's calls: %s", placed ? "placed from the store; " : "", duel, how,
         fig);
}

static _Atomic int awaiting_verdict; /* READY variants awaiting a first verdict (last look) */
static uint64_t watched_at;           /* the last look's time (code_mu) */

/* Demotes READY variants that measure slower than the original, by the judge's rule
 * (compare.h; a sanitized build only says so), counts the live ones and marks those awaiting a
 * verdict for the bursts. Compile thread only. */
static void watch_speed(void)
{
  uint64_t now = ag_now_ns();
  watched_at = now;
  uint32_t n = ag_table_count(ag_table);
  int live = 0, awaiting = 0, split = 0;
  for (uint32_t i = 0; i < n; i++) {
    ag_entry_t *e = ag_table_entry(ag_table, i);
    if (atomic_load(&e->tier) != AG_TIER_READY) {
      if (atomic_load_explicit(&e->awaiting, memory_order_relaxed)) /* demoted meanwhile */
        atomic_store_explicit(&e->awaiting, 0, memory_order_relaxed);
      continue;
    }
    /* The guard: calls sent to the variant that failed its speculative guards (C overlapping
     * A or B) ran the original. A variant most calls cannot use is not worth keeping. */
    uint64_t miss = atomic_load(&e->guard_miss), calls, hits;
    if (miss >= 256 && (ag_tcount_sum_one(i, &calls, &hits), miss > hits)) {
      atomic_store_explicit(&e->variant, NULL, memory_order_release);
      demoted[i] = AG_DEMOTED_GUARD;
      atomic_store(&e->tier, AG_TIER_DEMOTED);
      /* a stored object stays: the guards fail on this program's data */
      ag_persist_discard(&objects, i);
      decide(e, AG_STATE_DEMOTED, AG_EV_INVALIDATED, "guard: %llu of %llu calls failed the "
             "variant's guards (C overlapping A or B)", (unsigned long long)miss,
             (unsigned long long)(miss + hits));
      continue;
    }
    pthread_mutex_lock(&cmp_mu);
    double med;
    int was_kept = cmps[i].kept;
    uint32_t was_judged = cmps[i].judged;
    enum ag_verdict v = ag_cmp_judge(&cmps[i], &med);
    cmp_rev[i] += cmps[i].kept != was_kept || cmps[i].judged != was_judged; /* a verdict */
    double omean = ag_cmp_orig_ns(&cmps[i]), vmean = ag_cmp_variant_ns(&cmps[i]);
    uint32_t rounds = cmps[i].rounds, pooled = cmps[i].pooled_rounds;
    int kept = cmps[i].kept;
    uint32_t await = v == AG_CMP_UNDECIDED && !kept;
    if (atomic_load_explicit(&e->awaiting, memory_order_relaxed) != await)
      atomic_store_explicit(&e->awaiting, await, memory_order_relaxed);
    /* The figures in words: a demotion's event, or a win's reason ("in-run judge: ...") */
    char fig[AG_REASON_LEN - 64], how[64];
    uint32_t paired = cmps[i].paired, own = rounds - pooled;
    snprintf(how, sizeof how, "%s%s", v == AG_CMP_FASTER ? "in-run judge: " : "",
             !paired ? "warm, interleaved" : paired == own ? "cold pairs, interleaved"
                                                          : "warm bursts and cold pairs, interleaved");
    ag_cmp_describe(&cmps[i], med, how, fig, sizeof fig);
    pthread_mutex_unlock(&cmp_mu);
    live++;
    int parts = ag_vrun[i].parts; /* a split variant (spin.h) */
    split += parts > 1;
    uint64_t ncalls, nvcalls;
    ag_tcount_sum_one(i, &ncalls, &nvcalls);
    if (v == AG_CMP_UNDECIDED) {
      /* Called since its publication, and less than PAIR_HZ times a second: bursts seldom see
       * it twice, and its code and operands go cold between calls, so its calls go in cold
       * pairs (agent.h, ag_call_pair): every call while it awaits its first verdict, one pair
       * in PAIR_KEPT after (the windows that may overturn a verdict need new rounds too). */
      double dt = (double)(now - watched_ns[i]); /* since the last look, or the publication */
      if (dt < PAIR_WINDOW_NS) { /* too short to tell a rate: the next look widens it */
        awaiting += !kept;
        continue;
      }
      /* A window in which the calls ran slower than the program's own pace tells no rate: the
       * variant's first calls still verifying (each runs both sides and compares), or, in a
       * host with threads of its own, the agent's background work taking a CPU they want
       * (background.h). numpy's float GEMV 2048^2 on two library threads, 5000 calls a second,
       * made 2 calls in the 20 ms after its kernel's publication, and went to cold pairs. So in
       * such a host the window that holds a compiled kernel's publication (made inside its
       * compile's background work) never counts, and while the compile queue keeps the thread
       * busy no signature goes to cold pairs: bursts judge them meanwhile, or nothing does. */
      if (atomic_load_explicit(&e->verify, memory_order_relaxed) > 0 ||
          ag_bg_disturbed_since(watched_bg[i])) {
        watch_from(i, ncalls, now);
        awaiting += !kept;
        continue;
      }
      int rare = ncalls > pub_calls[i] && (double)(ncalls - watched_calls[i]) * 1e9 < PAIR_HZ * dt;
      uint32_t every = !rare ? 0 : kept ? PAIR_KEPT : 1;
      if (atomic_load_explicit(&e->pair, memory_order_relaxed) != every)
        atomic_store_explicit(&e->pair, every, memory_order_relaxed);
      awaiting += !kept;
      watch_from(i, ncalls, now);
      continue;
    }
    if (v == AG_CMP_FASTER) /* its calls were rare: they stay so */
      atomic_store_explicit(&e->pair, atomic_load(&e->pair) ? PAIR_KEPT : 0, memory_order_relaxed);
    if (!(e->tier_flags & 1)) { /* first verdict on this variant: teach the promotion estimate */
      e->tier_flags |= 1;
      ag_policy_learn(&policy, size_class(e), med);
    }
    if (v == AG_CMP_FASTER) {
      if (!(e->tier_flags & 2)) { /* the judge's first word on it: the basis of its serving */
        e->tier_flags |= 2;
        judged_faster(e, med, fig);
      }
      continue;
    }
    /* Built with a sanitizer: the verdict measures its instrumentation (compare.h,
     * ag_cmp_sanitizer). Said once; the variant serves on, its rounds still recorded (its
     * rare calls stay in pairs as a kept variant's do). */
    const char *sanitizer = ag_cmp_sanitizer();
    if (sanitizer) {
      atomic_store_explicit(&e->pair, atomic_load(&e->pair) ? PAIR_KEPT : 0, memory_order_relaxed);
      if (!(e->tier_flags & 2)) {
        e->tier_flags |= 2;
        ag_reason_t r;
        ag_reason_get(&reasons, e->index, &r);
        decide(e, r.state == AG_STATE_PLACED ? AG_STATE_PLACED : AG_STATE_SERVING, -1,
               "%s, not demoted: built with %s, whose cost the variant's side carries: %s",
               v == AG_CMP_TIE ? "tie" : "slower", sanitizer, fig);
      }
      continue;
    }
    /* A tie on this run's rounds alone: the original stays for this run; the stored kernel is
     * kept, and its rounds (a later run reads the tie). Slower, or a tie on rounds pooled over
     * runs: the original from now on (a tie must not keep a kernel placed run after run). */
    int tie_run = v == AG_CMP_TIE && !pooled;
    atomic_store_explicit(&e->variant, NULL, memory_order_release);
    demoted[i] = tie_run ? AG_DEMOTED_TIE : AG_DEMOTED_SLOWER;
    atomic_store(&e->tier, AG_TIER_DEMOTED);
    live--;
    split -= parts > 1;
    if (tie_run) {
      decide(e, AG_STATE_TIED, AG_EV_DEMOTED, "tie: %s: the original stays for this run", fig);
      continue;
    }
    decide(e, AG_STATE_DEMOTED, AG_EV_DEMOTED, "%s%s", v == AG_CMP_TIE ? "tie: " : "", fig);
    if (ag_persist_drop(&objects, i))
      event(e, AG_EV_INVALIDATED, "slower: %.0f ns per call, original %.0f ns", vmean, omean);
  }
  atomic_store(&ag_tier_live, live);
  awaiting_verdict = awaiting;
  ag_spin_look(split > 0);
}

static void enqueue(ag_entry_t *e, const char *why, int at_call);

/* The blocks keeping the compile threads' heaps present (heap.h: AG_HEAP_JIT), each linked to
 * the one before by its first word. Never freed, as compile threads never end; held here, not in
 * the thread's TLS, where LeakSanitizer does not look and reports them leaked. */
static _Atomic(void *) compile_heaps;

/* A compile thread (cqueue.h) starts. */
static void compile_begin(void *ctx)
{
  (void)ctx;
  ag_agent_thread_begin("opjit-jit");
  ag_agent_keep_off_host();
  ag_tl_keep_statics = 1; /* LLVM's static destructors are never registered (process.c) */
  void *kept = ag_heap_present(AG_HEAP_JIT);
  if (kept)
    *(void **)kept = atomic_exchange(&compile_heaps, kept);
}

static double problem_flops(const jt_gemm_t *g);

/* Waiting entry i as the queue's pick weighs it (policy.h): its calls and, for a host that duels
 * (its timings are its library's alone), its library's fastest call against the peak of the
 * kernel's vector width (0 while the machine model is not ready). cq locked. */
static void pick_of(uint32_t i, ag_pick_t *p)
{
  ag_entry_t *e = ag_table_entry(ag_table, i);
  const ag_host_t *host = ag_host_of(e->key.host);
  uint64_t vcalls;
  *p = (ag_pick_t){0};
  ag_tcount_sum_one(i, &p->calls, &vcalls);
  if (!prepared[i] || !host || !(host->traits & AG_HOST_DUELS))
    return;
  p->flops = problem_flops(&shapes[i]);
  p->best_ns = (double)atomic_load_explicit(&e->best_ns, memory_order_relaxed);
  p->peak_gflops = ag_machine_peak_gflops(ag_isa_bits(ag_machine_isa()), shapes[i].f64);
}

/* The waiting signature to compile next (cqueue.h, pick): policy.h's order, those whose library
 * runs below AG_POLICY_LIB_SHARE of the peak first, then the most calls. A tie goes to the
 * newest. cq locked. */
static unsigned compile_pick(void *ctx, const uint32_t *items, unsigned n)
{
  (void)ctx;
  unsigned best = n - 1;
  ag_pick_t top, p;
  pick_of(items[best], &top);
  for (unsigned k = n - 1; k-- > 0;) {
    pick_of(items[k], &p);
    if (ag_policy_pick_before(&p, &top))
      top = p, best = k;
  }
  return best;
}

/* Waits while JIT code may not run yet (ag_tier_hold: AG_HOLD_RUN, the run not recorded). */
static void wait_run(void)
{
  if (atomic_load(&hold_hot) == AG_HOLD_NONE)
    return;
  pthread_mutex_lock(&hold_mu);
  while (atomic_load(&hold_hot) != AG_HOLD_NONE)
    pthread_cond_wait(&hold_cond, &hold_mu);
  pthread_mutex_unlock(&hold_mu);
}

/* Whether queued entry e is settled by the kernel the database stores for it on this machine
 * (agent.h, ag_place_stored): placed, as the warm start places one (no LLVM, no compile), or
 * demoted by its pool. */
static int placed_from_store(ag_entry_t *e)
{
  ag_bg_begin();
  int placed = ag_place_stored(e);
  ag_bg_end();
  return placed == 0 || atomic_load(&e->tier) == AG_TIER_DEMOTED;
}

/* Queued entry e, whose kernel by this generator crashed a run on this machine (agent.h,
 * ag_crashed_before: another program's, or one that crashed since this run began): demoted,
 * the original serves it; 1. Else 0. */
static int crashed_before(ag_entry_t *e)
{
  char why[AG_REASON_LEN];
  ag_bg_begin();
  int crashed = ag_crashed_before(e, why, sizeof why);
  ag_bg_end();
  if (!crashed)
    return 0;
  demoted[e->index] = AG_DEMOTED_CRASH; /* no reader before the tier: it had no variant */
  atomic_store(&e->tier, AG_TIER_DEMOTED);
  decide(e, AG_STATE_CRASHED, AG_EV_CRASHED, "%s", why);
  return 1;
}

/* A compile thread took entry i. A signature the database stores a kernel for (warm.h,
 * ag_warm_shelved) gets it placed once JIT code may run, without LLVM. Else LLVM is loaded
 * with the first compile, so a thread that only places or watches never loads it; the compile
 * (which runs its kernel: tuning, self-test, duel) waits until JIT code may run (LLVM loads
 * meanwhile). Neither happens where this generator's kernel for it crashed a run on this
 * machine, any program's (crashed_before). */
static void compile_next(void *ctx, uint32_t i, int alone)
{
  (void)ctx;
  ag_entry_t *e = ag_table_entry(ag_table, i);
  int placed = 0;
  int shelved = ag_warm_shelved(&e->key);
  ag_agent_keep_off_host(); /* the host's thread may have moved since */
  if (shelved) {
    wait_run();
    if (crashed_before(e))
      return;
    placed = placed_from_store(e);
  }
  if (!placed && atomic_load(&ag_exiting)) { /* queued before the exit began (may_queue) */
    uint32_t queued = AG_TIER_QUEUED;
    if (atomic_compare_exchange_strong(&e->tier, &queued, AG_TIER_COLD))
      decide(e, AG_STATE_WAITING, -1, "queued, and the program exited before its compile: "
             "compiled when hot in a later run");
    return;
  }
  if (!placed) {
    int loaded = 0;
    if (!atomic_load(&llvm_dead)) {
      uint64_t load_ns;
      ag_bg_begin(); /* not while it waits for the run (wait_run) */
      atomic_store(&compile_waits, 1); /* a calibration loading LLVM leaves it the compile */
      loaded = load_jit(&load_ns) == 0;
      ag_bg_end();
      if (load_ns)
        ag_machine_note_compile(AG_MACHINE_LLVM_LOAD, load_ns);
    }
    uint32_t queued = AG_TIER_QUEUED;
    if (!loaded && shelved && atomic_load(&llvm_dead)) {
      /* not placed (the database not open yet in a fork child, busy, or the object gone):
       * hot again later, backing off as after a failed compile (ag_tier_hot) */
      atomic_fetch_add(&e->fails, 1);
      if (atomic_compare_exchange_strong(&e->tier, &queued, AG_TIER_COLD))
        decide(e, AG_STATE_WAITING, -1, "its stored kernel was not placed, and LLVM compiles "
               "nothing here (%s): tried again when hot", jit_error);
      return;
    }
    if (!loaded) {
      atomic_store(&llvm_dead, 1);
      if (!atomic_compare_exchange_strong(&e->tier, &queued, AG_TIER_FAILED))
        return; /* settled meanwhile (load_allowed's decision stands) */
      decide(e, AG_STATE_FAILED, -1, "the JIT is unavailable (%s): the original library serves",
             jit_error);
      return;
    }
    wait_run();
    if (!shelved && crashed_before(e))
      return;
    ag_crash_trial(&e->key); /* a fault meanwhile blames it */
    ag_bg_begin();
    compile_one(i, alone);
    ag_bg_end();
    ag_crash_trial(NULL);
  }
  /* A queue that keeps the thread compiling (or placing) does not keep the judge from looking
   * when its look is due (compile_between): the variants published meanwhile would await their
   * verdicts, their calls at the bursts' first rate (compare.h), to the end of a short run. */
  pthread_mutex_lock(&code_mu);
  if (ag_now_ns() - watched_at >= (awaiting_verdict ? 20 : 200) * 1000000ull)
    watch_speed();
  pthread_mutex_unlock(&code_mu);
}

/* A compile thread found the queue empty: the judge's look, the code cache's freeing, the
 * deferred signatures queued again once freed code made room. Returns how long to wait. */
static long compile_between(void *ctx)
{
  (void)ctx;
  pthread_mutex_lock(&code_mu);
  watch_speed();
  free_retired();
  uint32_t again[64];
  int nagain = ag_cc_undefer(&cache, again, 64);
  pthread_mutex_unlock(&code_mu);
  for (int k = 0; k < nagain; k++)
    enqueue(ag_table_entry(ag_table, again[k]), "room in the code cache again", 0);
  /* The judge looks every 20 ms while a variant awaits its verdict, called or not yet (a short
   * program must get its verdicts, the bursts' rate must come down, and a rare signature's
   * pairs must start, within its run), else every 200 ms. */
  return awaiting_verdict || ag_spin_armed() ? 20 : 200; /* a split variant's looks: spin.h */
}

/* Whether OPJIT_HOT_PAYBACK judges e by time: not when its host says its original's timing
 * does not give a saving per call (host.h, no_payback); calls decide for it then. */
static int payback_applies(const ag_entry_t *e)
{
  const ag_host_t *host;
  return ag_opts.num[AG_OPT_HOT_PAYBACK] &&
         !((host = ag_host_of(e->key.host)) && host->no_payback && host->no_payback(&e->key));
}

/* Queues e as enqueue does; pb 2 (a size class's trial, policy.h): the trial is taken once the
 * compile is queued, and another thread that took it first keeps e cold. */
static void enqueue_counted(ag_entry_t *e, const char *why, int pb, int at_call)
{
  if (pb == 2 && !ag_policy_take_trial(&policy, size_class(e)))
    return;
  enqueue(e, why, at_call);
}

/* Whether spent_ns of e's time repays compiling its kernel (policy.h), charged the machine
 * model's compile time for its kernel family on this CPU (machine.h: measured over this and
 * earlier runs) and the CPUs the program's threads take (cpus_taken). */
static int pays_back(const ag_entry_t *e, double spent_ns, ag_payback_t *t)
{
  long ncpu;
  jt_gemm_t g;
  int pool, have = gemm_of(&e->key, &g, &(int){0});
  long busy = cpus_taken(e, have ? &g : NULL, &ncpu, &pool);
  /* a kernel the database stores: placed, not compiled (compile_next) */
  int placing = ag_warm_shelved(&e->key);
  double ns = placing ? AG_POLICY_PLACE_NS
                      : (double)ag_machine_compile_ns(have ? ag_problem_family(&g) : "gemm");
  if (!placing && !atomic_load(&jit_tried)) /* the first compile loads LLVM */
    ns += (double)ag_machine_compile_ns(AG_MACHINE_LLVM_LOAD);
  int pb = ag_policy_test(&policy, size_class(e), spent_ns,
                          ag_policy_charge(ns, busy, ncpu, pool && !placing),
                          ag_opts.num[AG_OPT_HOT_PAYBACK], busy < ncpu, t);
  if (t)
    t->placing = placing;
  return pb;
}

void ag_tier_hold(int level)
{
  pthread_mutex_lock(&hold_mu);
  int was = atomic_exchange(&hold_hot, level);
  if (level == AG_HOLD_NONE)
    pthread_cond_broadcast(&hold_cond);
  pthread_mutex_unlock(&hold_mu);
  if (level == AG_HOLD_QUEUE || was != AG_HOLD_QUEUE || !ag_table)
    return;
  uint32_t n = ag_table_count(ag_table);
  for (uint32_t i = 0; i < n; i++) {
    ag_entry_t *e = ag_table_entry(ag_table, i);
    uint64_t calls, vcalls;
    if (atomic_load(&e->tier) != AG_TIER_COLD)
      continue;
    ag_tcount_sum_one(i, &calls, &vcalls);
    ag_tier_hot(e, calls);
  }
}

static int compilable(const ag_sig_t *k, jt_gemm_t *g, int *row, char *why, size_t len);
static int arrays(void);
static int library_wins(ag_entry_t *e, const jt_gemm_t *g, int at_call, char *no, size_t len);

/* A failed payback test, as the reason keeps it: the test's figures and what they were on. */
typedef struct test_figs_s {
  ag_payback_t t;
  double on; /* the calls (calls_words) or the sampled CPU ns (sampled_words) */
} test_figs_t;

_Static_assert(sizeof(test_figs_t) <= AG_REASON_FIGS, "a test's figures fit a reason's slot");

static void calls_words(const void *figs, char *buf, size_t len)
{
  const test_figs_t *f = figs;
  char test[AG_REASON_LEN - 40];
  ag_policy_words(&f->t, test, sizeof test);
  snprintf(buf, len, "after %llu calls, %s", (unsigned long long)f->on, test);
}

static void sampled_words(const void *figs, char *buf, size_t len)
{
  const test_figs_t *f = figs;
  char test[AG_REASON_LEN - 48];
  ag_policy_words(&f->t, test, sizeof test);
  snprintf(buf, len, "%.1f ms of sampled CPU time: %s", f->on / 1e6, test);
}

static void calibrate_unmeasured(void);

/* Cold entry e failed the payback test (f, worded by words): it waits, unless no kernel can
 * replace it at all, or its calls are long and its library already runs them as fast as a
 * kernel could (library_wins, on the final machine model: the class's expected saving is a prior
 * or other signatures' verdicts, this one's library is measured): then it is NONE, as enqueue
 * would make it, and never tested again. What a compile costs, where this CPU never measured
 * it, is measured now (calibrate_unmeasured), either way. */
static void not_yet(ag_entry_t *e, ag_reason_words_fn words, const test_figs_t *f)
{
  jt_gemm_t g;
  int row;
  char no[AG_REASON_LEN];
  uint32_t cold = AG_TIER_COLD;
  int can = compilable(&e->key, &g, &row, no, sizeof no), lib = 0;
  ag_cq_lock(&cq); /* the verdict and the state together: another thread's test decides too */
  if (can && !f->t.placing) /* a call its library runs as fast as a kernel could: no wait */
    lib = arrays() && library_wins(e, &g, 1, no, sizeof no) == 1;
  if (can && !lib) {
    if (atomic_load(&e->tier) == AG_TIER_COLD)
      decide_figs(e, AG_STATE_WAITING, words, f, sizeof *f);
  } else if (atomic_compare_exchange_strong(&e->tier, &cold, AG_TIER_NONE)) {
    decide(e, AG_STATE_UNSUPPORTED, -1, "%s", no);
  }
  ag_cq_unlock(&cq);
  if (can && !f->t.placing)
    calibrate_unmeasured(); /* a test failed: later ones, other signatures', charge figures */
}

void ag_tier_hot(ag_entry_t *e, uint64_t n)
{
  if (n < ag_hot_calls || ag_hot_calls == 0 || atomic_load(&e->tier) != AG_TIER_COLD ||
      !may_queue(e) ||
      atomic_load_explicit(&hold_hot, memory_order_relaxed) == AG_HOLD_QUEUE)
    return;
  uint32_t fails = atomic_load(&e->fails);
  if (fails && n >> 12 < (1u << fails)) /* backing off after a failed compile */
    return;
  uint64_t timed, tns;
  ag_entry_orig_timed(e, &timed, &tns);
  int pb = 1;
  char test[AG_REASON_LEN - 40] = "", why[AG_REASON_LEN];
  if (payback_applies(e) && timed) {
    test_figs_t f = {.on = (double)n};
    pb = pays_back(e, (double)n * (double)tns / (double)timed, &f.t);
    if (!pb) { /* not worth it yet: asked again (agent.h, ag_hot_test_due) */
      not_yet(e, calls_words, &f);
      return;
    }
    ag_policy_words(&f.t, test, sizeof test); /* once: it is queued */
  }
  snprintf(why, sizeof why, "hot after %llu calls%s%s", (unsigned long long)n, *test ? ": " : "",
           test);
  enqueue_counted(e, why, pb, 1);
}

void ag_tier_sampled(ag_entry_t *e, double cpu_ns)
{
  if (ag_hot_calls == 0 || !ag_opts.num[AG_OPT_HOT_PAYBACK] ||
      atomic_load(&e->tier) != AG_TIER_COLD || atomic_load(&e->fails) || !may_queue(e))
    return;
  char test[AG_REASON_LEN - 48], why[AG_REASON_LEN];
  test_figs_t f = {.on = cpu_ns};
  int pb = pays_back(e, cpu_ns, &f.t);
  if (!pb) {
    uint64_t calls, vcalls;
    ag_tcount_sum_one(e->index, &calls, &vcalls);
    if (calls < ag_hot_calls) /* else the calls' own test speaks for it (ag_tier_hot) */
      not_yet(e, sampled_words, &f);
    return;
  }
  ag_policy_words(&f.t, test, sizeof test);
  snprintf(why, sizeof why, "hot: %.1f ms of sampled CPU time: %s", cpu_ns / 1e6, test);
  enqueue_counted(e, why, pb, 0);
}

/* The per-entry arrays, made when the tiers take their first signature; cq locked. */
static int arrays(void)
{
  if (!shapes) {
    cache.budget = cache_budget();
    shapes = calloc(ag_tcount_capacity, sizeof *shapes);
    ag_vrun = calloc(ag_tcount_capacity, sizeof *ag_vrun);
    ag_persist_init(&objects, ag_tcount_capacity);
    cmps = calloc(ag_tcount_capacity, sizeof *cmps);
    cmp_rev = calloc(ag_tcount_capacity, sizeof *cmp_rev);
    cmp_stored = calloc(ag_tcount_capacity, sizeof *cmp_stored);
    watched_calls = calloc(ag_tcount_capacity, sizeof *watched_calls);
    watched_ns = calloc(ag_tcount_capacity, sizeof *watched_ns);
    watched_bg = calloc(ag_tcount_capacity, sizeof *watched_bg);
    pub_calls = calloc(ag_tcount_capacity, sizeof *pub_calls);
    prepared = calloc(ag_tcount_capacity, sizeof *prepared);
    demoted = calloc(ag_tcount_capacity, sizeof *demoted);
    duel_won = calloc(ag_tcount_capacity, sizeof *duel_won);
    prof_ns = calloc(ag_tcount_capacity, sizeof *prof_ns);
    long_wait = calloc(ag_tcount_capacity, sizeof *long_wait);
    const char *fault = getenv("OPJIT_TEST_FAULT"); /* fault injection for the tests only */
    fault_reps = !fault ? 0 : !strcmp(fault, "slow") ? 64 : !strcmp(fault, "fast") ? -16 : 0;
  }
  return shapes && ag_vrun && objects.slots && cmps && cmp_rev && cmp_stored && watched_calls &&
         watched_ns && watched_bg && pub_calls && demoted && duel_won && prof_ns && long_wait &&
         prepared;
}

/* Whether the per-entry arrays exist (made now if not), cq taken for it. */
static int arrays_locked(void)
{
  ag_cq_lock(&cq);
  int ok = arrays();
  ag_cq_unlock(&cq);
  return ok;
}

/* Whether a kernel can replace key k on this machine with these options: 1 with its problem in
 * *g; 0 with the limit that stops it in why (len bytes). */
static int compilable(const ag_sig_t *k, jt_gemm_t *g, int *row, char *why, size_t len)
{
  /* The generator needs AVX2 and FMA: OPJIT_ISA=sse2 leaves every signature on the library. */
  if (ag_machine_isa() == AG_ISA_SSE2) {
    snprintf(why, len, "no AVX2 and FMA (this CPU, or OPJIT_ISA=sse2): the kernels need both");
    return 0;
  }
  return ag_problem_check(k, ag_opts.num[AG_OPT_JIT_MAX_DIM], g, row, why, len);
}

/* Computes the problem e's variant solves and what a call through it needs; 0 when e cannot
 * be compiled, with why (len bytes). cq locked, e not published. */
static int prepare(ag_entry_t *e, char *why, size_t len)
{
  int row = 0;
  jt_gemm_t g;
  if (!arrays()) {
    snprintf(why, len, "no memory for the JIT's tables");
    return 0;
  }
  if (!compilable(&e->key, &g, &row, why, len))
    return 0;
  if (prepared[e->index])
    return 1; /* the same again (a key's problem never changes): a host thread still in an
                 evicted variant's call may be reading them */
  shapes[e->index] = g;
  ag_vrun_t *r = &ag_vrun[e->index]; /* computed once: the overlap guard, the parts (par.h) */
  ag_problem_extents(&g, row, r);
  ag_problem_split(&g, ag_par_parts(ag_opts.num[AG_OPT_KERNEL_THREADS], ag_host_threaded()), r);
  prepared[e->index] = 1;
  return 1;
}

/* Starts a compile thread when the queue needs one (cqueue.h); cq locked. */
static void start_thread(void)
{
  if (ag_cq_start(&cq, (int)ag_opts.num[AG_OPT_JIT_THREADS]))
    atomic_store(&jit_dead, 1);
}

/* One compile of g on this thread, its kernel released at once: its CPU time, or 0 when it
 * failed. The calibration's thread, LLVM loaded. */
static uint64_t compile_cost(const jt_gemm_t *g)
{
  char err[256];
  jt_gemm_fn fn = NULL;
  size_t size = 0, obj_len = 0;
  void *obj = NULL;
  uint64_t t0 = ag_thread_cpu_ns();
  int rc = jit->gemm(g, &fn, &size, &obj, &obj_len, err, sizeof err);
  uint64_t ns = ag_thread_cpu_ns() - t0;
  free(obj);
  if (rc == 0)
    jit->release(fn, err, sizeof err); /* never published: no thread can be inside it */
  else
    ag_log(AG_LOG_INFO, "the compile that measures what one costs failed: %s", err);
  return rc == 0 ? ns : 0;
}

#define CEDE_WAIT_MS 1000 /* the calibration's wait for a compile thread's compile note */

/* Whether any kernel family's compile is measured on this CPU within ms (polled; the
 * calibration's thread). */
static int compile_noted(long ms)
{
  uint64_t end = ag_now_ns() + (uint64_t)ms * 1000000u;
  while (!ag_machine_compile_measured(NULL) && ag_now_ns() < end)
    nanosleep(&(struct timespec){0, 2000000}, NULL);
  return ag_machine_compile_measured(NULL);
}

/* For the calibration: waits until the machine has a CPU no other thread wants (fewer running
 * or runnable than it has CPUs, this one aside: /proc/loadavg's count, which counts a library
 * pool's spinning threads too), polled every 5 ms, then less often up to every 80 ms, holding
 * nothing; or until a compile thread needs LLVM (compile_waits: it measures its own compile),
 * or the program waits for the calibration (settling: ag_tier_settle) or exits
 * (calibrate then stops: the exit's save would wait for its figures, machine_run.c). At once
 * where /proc/loadavg cannot be read. */
static _Atomic int settling; /* ag_tier_settle waits for the compiles and the calibration */

static void spare_cpu(void)
{
  long ncpu = online_cpus();
  char buf[128];
  for (long ms = 5;; ms = ms < 80 ? 2 * ms : ms) {
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC); /* "0.52 0.41 0.30 3/412 9876" */
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
      close(fd);
    buf[n > 0 ? n : 0] = 0;
    long running;
    if (sscanf(buf, "%*s %*s %*s %ld/", &running) != 1 || running - 1 < ncpu ||
        atomic_load(&compile_waits) || atomic_load(&settling) || atomic_load(&ag_exiting))
      return;
    nanosleep(&(struct timespec){0, ms * 1000000}, NULL);
  }
}

/* The calibration (calibrate_unmeasured), on a thread of its own: LLVM's load, then the same
 * kernel compiled twice, the first compile paying what a session's first one sets up (the
 * target, its tables: ~8-10 ms on the Zen 5), noted as part of LLVM's load; the second is the
 * family's compile. The kernel is a float 64x64x64 GEMM (bench_jit's product; this project's
 * kernels compiled in 4-35 ms, median 7-9): real compiles refine the family's figure as they
 * come. (A compile thread that loads LLVM for a compile notes the load alone, and that
 * compile's note carries the set-up; where one waited for this thread's load, this thread
 * measures the load and waits for that compile's note, compiling only where none comes.)
 * Each part waits for a CPU no thread wants (spare_cpu) rather than run at SCHED_IDLE: a thread
 * of that class, preempted beside threads on every CPU, held what others wait for until they
 * stopped (a compile thread its load, load_jit's lock: two threads of one small product on 2
 * CPUs got no kernel in their run), and an unprivileged thread cannot leave the class again. */
static void *calibrate(void *arg)
{
  (void)arg;
  ag_agent_thread_begin("opjit-calibrate");
  ag_tl_keep_statics = 1; /* LLVM's static destructors are never registered (process.c) */
  uint64_t load_ns = 0;
  spare_cpu();
  /* a compile thread started meanwhile: its compile measures (and it loads LLVM); or the
   * process exits: its save would only wait for the measurement */
  if (atomic_load(&jit_tried) || atomic_load(&compile_waits) || atomic_load(&ag_exiting)) {
    ag_machine_calibrating(0);
    return NULL;
  }
  ag_bg_begin();
  int loaded = !atomic_load(&llvm_dead) && load_jit(&load_ns) == 0;
  ag_bg_end();
  if (!loaded) {
    atomic_store(&llvm_dead, 1); /* as a compile would find it (compile_next) */
  } else {
    /* leading dimensions of 67: no signature's kernel, whose compile gemm() would share */
    jt_gemm_t g = {.m = 64, .n = 64, .k = 64, .lda = 67, .ldb = 67, .ldc = 67,
                   .alpha_one = 1, .beta_class = 1, .isa = jit_isa()};
    /* none where a compile thread waited for the load and its compile is noted (the CPUs go
     * to its kernel rather than to these two, 20-30 ms more): compiled here where it is not */
    int waited = atomic_load(&compile_waits);
    if (!waited) {
      spare_cpu();
      waited = atomic_load(&compile_waits);
    }
    if (waited && load_ns) /* at once: the exit may come before that compile's note */
      ag_machine_note_compile(AG_MACHINE_LLVM_LOAD, load_ns);
    int ceded = (waited && compile_noted(CEDE_WAIT_MS)) || atomic_load(&ag_exiting);
    ag_bg_begin();
    uint64_t first = ceded ? 0 : compile_cost(&g), again = first ? compile_cost(&g) : 0;
    if (again < 100000)
      again = 0; /* shared with a kernel compiled meanwhile after all: nothing measured */
    jit->drop_sessions(); /* the thread ends: its kernels are released */
    /* said before the notes: an exit waits for those alone (ag_machine_save) */
    if (!ceded)
      ag_log(AG_LOG_INFO, "a compile measured on this CPU: LLVM's load %.1f ms, a first "
             "compile %.1f, the next %.1f (CPU time)", (double)load_ns / 1e6,
             (double)first / 1e6, (double)again / 1e6);
    else
      ag_log(AG_LOG_INFO, "LLVM's load measured on this CPU: %.1f ms (CPU time); a compile's "
             "cost %s", (double)load_ns / 1e6,
             waited ? "is measured already" : "is left to a later run (the process exits)");
    if (load_ns && !waited) /* a compile thread that loaded LLVM before noted it (compile_next) */
      ag_machine_note_compile(AG_MACHINE_LLVM_LOAD,
                              load_ns + (again && first > again ? first - again : 0));
    if (again)
      ag_machine_note_compile(ag_problem_family(&g), again);
    ag_bg_end();
  }
  ag_machine_calibrating(0);
  return NULL;
}

/* Where this CPU has no measured figure for LLVM's load or for any kernel's compile (machine.h:
 * none stored, none noted in this run), measures them on a thread of its own (calibrate), once
 * per process, once the machine model is ready: from a signature's payback test
 * in the run that failed on the guesses (not_yet), so the tests after it, and the next run's (its
 * warm start's too), charge what was measured. A test that passes needs none: its compile is
 * measured as it ends, whatever its checks find (a tuning's compiles each at their share; a
 * compile that failed is not measured: a later run measures); nor does a run that only places
 * stored kernels (it never loads LLVM), nor the warm start's or the fleet's tests of a
 * profile's signatures. LLVM stays loaded for the compiles to come. */
static void calibrate_unmeasured(void)
{
  static _Atomic int asked;
  /* not before the model is ready: the stored figures are merged by then (machine_run.c); nor
   * once a compile thread has started on LLVM: that compile measures them */
  if (atomic_load(&asked) || !ag_machine() || atomic_load(&jit_tried) ||
      atomic_load(&jit_dead) || atomic_load(&llvm_dead))
    return;
  if (ag_machine_compile_measured(NULL) && ag_machine_compile_measured(AG_MACHINE_LLVM_LOAD)) {
    atomic_store(&asked, 1); /* for good: no later test looks again */
    return;
  }
  if (atomic_exchange(&asked, 1))
    return;
  ag_machine_calibrating(1);
  if (ag_cq_spawn(calibrate, NULL) != 0)
    ag_machine_calibrating(0);
}

/* e's mean original call, in ns: over earlier runs when the warm start noted it
 * (ag_tier_profile_mean), else over this run's drawn timings (its forced ones, its first call's
 * among them, until one is drawn: table.h); 0 when none was timed. arrays. */
static double orig_mean_ns(ag_entry_t *e)
{
  uint64_t timed, tns;
  if (prof_ns[e->index] > 0)
    return prof_ns[e->index];
  ag_entry_orig_timed(e, &timed, &tns);
  return timed ? (double)tns / (double)timed : 0;
}

/* e's library call as the duel would time it (0: none timed): its mean (orig_mean_ns), or its
 * fastest timed call where that is faster (a call whose fastest fits the duel gets one: a
 * threaded library's call can stall for a millisecond). arrays. */
static double library_call_ns(ag_entry_t *e)
{
  double call_ns = orig_mean_ns(e);
  double best = (double)atomic_load_explicit(&e->best_ns, memory_order_relaxed);
  return best > 0 && (call_ns <= 0 || best < call_ns) ? best : call_ns;
}

/* Whether e's problem is too large for the check on scratch operands and the duel:
 * CHECK_MAX_FLOPS or more, or an operand (A, B or C as the kernel sees them, leading dimensions
 * aside) of more than CHECK_MAX_BYTES, timed or not. */
static int too_large(ag_entry_t *e)
{
  const jt_gemm_t *g = &shapes[e->index];
  double most = g->dot ? g->k : fmax(fmax((double)g->m * g->k, (double)g->k * g->n),
                                     (double)g->m * g->n);
  return problem_flops(g) >= CHECK_MAX_FLOPS || most * (g->f64 ? 8 : 4) > CHECK_MAX_BYTES;
}

/* The floating-point operations of one call of problem g: a SYRK computes one triangle of its
 * n x n result, n (n + 1) / 2 dot products of K. */
static double problem_flops(const jt_gemm_t *g)
{
  return g->syrk ? (double)g->m * (g->m + 1) * g->k : 2.0 * g->m * g->n * (g->k > 0 ? g->k : 1);
}

/* For entry e's calls (orig_mean_ns) when they are too long for the duel before
 * publication (DUEL_MAX_NS), in the kernels of hosts that duel: 1 when the library already runs
 * them as fast as a kernel could (policy.h, ag_policy_long_call: its fastest call, timed this run
 * or earlier runs' mean, against the measured peak of the JIT's vector width); 2 while that
 * cannot be said yet (the machine model is not ready: its thread measures or reads it, or a
 * library found at its peak waits for the peak to be final: a disturbed measurement only
 * lowers it; too few calls timed) and, asked off a call of e (at_call 0: the writer's sampled
 * time, the warm start), until its next call (ag_tier_long_timed): a few long calls often end
 * before the writer finds them hot, and a kernel compiled then serves none of them in its run;
 * the caller that queues then marks e to be asked again at its next call (long_wait); else 0 (a
 * model without that peak leaves it to the duel and the judge). g: e's problem; no (len bytes)
 * gets why. Changes nothing (a failed payback test asks it too: not_yet). cq locked. */
static int library_wins(ag_entry_t *e, const jt_gemm_t *g, int at_call, char *no, size_t len)
{
  const ag_host_t *host = ag_host_of(e->key.host);
  double call_ns = library_call_ns(e);
  double best = (double)atomic_load_explicit(&e->best_ns, memory_order_relaxed);
  if (!host || !(host->traits & AG_HOST_DUELS))
    return 0;
  /* none timed yet (hot at its first call's start): the duel and the judge decide */
  if (call_ns <= 0 || ag_duel_need_ns((uint64_t)call_ns) <= DUEL_MAX_NS)
    return 0;
  double flops = problem_flops(g);
  double peak = ag_machine_peak_gflops(ag_isa_bits(ag_machine_isa()), g->f64);
  if (peak <= 0 && !ag_machine()) {
    snprintf(no, len, "a call this long (%.2f ms) waits for the machine model's FMA peak, "
             "against which its library is weighed", call_ns / 1e6);
    return 2;
  }
  if (peak <= 0)
    return 0;
  /* every call this long is timed (agent.h, AG_LONG_CALL_NS) */
  if (prof_ns[e->index] > 0 && (best <= 0 || prof_ns[e->index] < best))
    best = prof_ns[e->index];
  uint64_t timed = atomic_load_explicit(&e->best_n, memory_order_relaxed);
  switch (ag_policy_long_call(flops, best, timed, peak)) {
  case AG_LONG_KERNEL:
    if (at_call)
      return 0;
    snprintf(no, len, "a call this long (%.2f ms, its library at %.0f GF/s at its fastest) is "
             "queued at its next call: compiled while it is called", call_ns / 1e6,
             flops / best);
    return 2;
  case AG_LONG_WAIT:
    snprintf(no, len, "a call this long (%.2f ms) waits for %d timed calls, its library weighed "
             "on the fastest (%llu so far)", call_ns / 1e6, AG_POLICY_LONG_TIMINGS,
             (unsigned long long)timed);
    return 2;
  case AG_LONG_LIBRARY:
    break;
  }
  /* a peak not final yet may still rise (machine.h): the verdict waits for it */
  int final = ag_machine_final();
  snprintf(no, len, "the library runs it at %.0f GF/s at its fastest (%.2f ms), %.0f%% of %s "
           "(%.0f GF/s): %s", flops / best, best / 1e6, 100 * flops / best / peak,
           final ? "one core's measured peak" : "the peak measured so far", peak,
           final ? "a kernel would not repay its compile"
                 : "waits for the machine model's next measurement");
  return final ? 1 : 2;
}

/* Queues cold entry e for compilation (NONE if it cannot be compiled); starts a compile thread
 * if the queue needs one. */
static void enqueue(ag_entry_t *e, const char *why, int at_call)
{
  char no[AG_REASON_LEN];
  int lib = 0;
  ag_cq_lock(&cq);
  uint32_t cold = AG_TIER_COLD;
  if (atomic_load(&e->tier) != AG_TIER_COLD) {
    /* queued or served already */
  } else if (atomic_load(&ag_exiting)) {
    /* A kernel compiled now serves no call, and the exit, which takes the loader's lock in
     * _dl_fini, waits for LLVM's load: a 10 ms program whose warm start ended after its loop,
     * its signature queued then as its size's trial, took 15 ms more to exit than plain in
     * every warm run, and the kernel was never compiled. */
    decide(e, AG_STATE_WAITING, -1, "hot as the program exited (%s): compiled when hot in a "
           "later run", why);
  } else if (ag_cq_full(&cq)) {
    decide(e, AG_STATE_WAITING, -1, "the compile queue is full: asked again at its next "
           "promotion test (%s)", why);
  } else if (!prepare(e, no, sizeof no) ||
             (lib = library_wins(e, &shapes[e->index], at_call, no, sizeof no)) == 1) {
    if (atomic_compare_exchange_strong(&e->tier, &cold, AG_TIER_NONE))
      decide(e, AG_STATE_UNSUPPORTED, -1, "%s", no);
  } else if (lib == 2) { /* asked again at its next call (ask_again) */
    atomic_store(&long_wait[e->index], 1);
    decide(e, AG_STATE_WAITING, -1, "%s", no);
  } else if (atomic_compare_exchange_strong(&e->tier, &cold, AG_TIER_QUEUED)) {
    ag_cq_push(&cq, e->index);
    decide(e, AG_STATE_QUEUED, AG_EV_QUEUED, "%s", why);
    start_thread();
  }
  ag_cq_unlock(&cq);
}

/* Queues cold entry e, hot but waiting as a long call (library_wins), for why. */
static void ask_again(ag_entry_t *e, const char *why)
{
  if (atomic_load(&e->tier) != AG_TIER_COLD || !may_queue(e) ||
      atomic_load_explicit(&hold_hot, memory_order_relaxed) == AG_HOLD_QUEUE)
    return;
  ag_cq_lock(&cq);
  int asked = long_wait && atomic_exchange(&long_wait[e->index], 0);
  ag_cq_unlock(&cq);
  if (asked)
    enqueue(e, why, 1);
}

void ag_tier_long_timed(ag_entry_t *e)
{
  if (atomic_load_explicit(&e->best_n, memory_order_relaxed) >= AG_POLICY_LONG_TIMINGS)
    ask_again(e, "hot, asked again at a call once its library's calls were timed");
}

void ag_tier_short_timed(ag_entry_t *e)
{
  ask_again(e, "hot, asked again at a call: its calls are short after all");
}

int ag_tier_profile_hot(const ag_entry_t *e, double calls, double mean_ns)
{
  if (ag_hot_calls == 0)
    return 0;
  /* Without a timing of the original calls decide. */
  return payback_applies(e) && mean_ns > 0 ? pays_back(e, calls * mean_ns, NULL) == 1
                                           : calls >= (double)ag_hot_calls;
}

void ag_tier_profile_mean(ag_entry_t *e, double mean_ns)
{
  if (mean_ns > 0 && arrays_locked())
    prof_ns[e->index] = (float)mean_ns;
}

void ag_tier_keep_original(ag_entry_t *e)
{
  uint32_t cold = AG_TIER_COLD;
  if (atomic_compare_exchange_strong(&e->tier, &cold, AG_TIER_DEMOTED))
    decide(e, AG_STATE_LOST, -1, "its kernel by generator %d lost or tied against the original "
           "on this machine in an earlier run: the original serves until the generator changes",
           JT_GENERATOR_VERSION);
}

void ag_tier_crashed(ag_entry_t *e, int with_event, const char *fmt, ...)
{
  char why[AG_REASON_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  int ok = arrays_locked();
  uint32_t cold = AG_TIER_COLD;
  if (!ok || !atomic_compare_exchange_strong(&e->tier, &cold, AG_TIER_DEMOTED))
    return;
  demoted[e->index] = AG_DEMOTED_CRASH; /* no reader before the tier: it was COLD */
  decide(e, AG_STATE_CRASHED, with_event ? AG_EV_CRASHED : -1, "%s", why);
}

void ag_tier_event(ag_entry_t *e, int kind, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  ag_events_vadd(&events, e->index, kind, fmt, ap);
  va_end(ap);
}

int ag_tier_settle(long ms)
{
  if (atomic_load(&jit_dead))
    return 0; /* what is queued fails at once, or was never taken */
  struct timespec dl = ag_deadline_after(CLOCK_REALTIME, ms);
  if (atomic_load(&hold_hot) == AG_HOLD_QUEUE)
    return 1; /* a warm start still deciding (the caller waits for it first) */
  ag_cq_lock(&cq);
  int rc = ag_cq_wait_idle(&cq, &dl);
  ag_cq_unlock(&cq);
  struct timespec now;
  atomic_fetch_add(&settling, 1); /* the calibration waits for no spare CPU now */
  while (!rc && ag_machine_calibration_running()) { /* calibrate */
    clock_gettime(CLOCK_REALTIME, &now);
    rc = now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec);
    if (!rc)
      nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  atomic_fetch_sub(&settling, 1);
  return rc;
}

void ag_tier_queue(ag_entry_t *e, const char *why)
{
  if (ag_hot_calls && may_queue(e))
    enqueue(e, why, 0);
}

/* The judge's rule on the rounds earlier runs pooled on e's stored kernel (compare.h): when they
 * already find it slower, or tied against it, e is demoted without placing it (its object
 * dropped, the event and reason naming both sides' pooled figures): 1; else 0 (always in a
 * sanitized build: compare.h, ag_cmp_sanitizer). */
static int pool_lost(ag_entry_t *e, const st_judge_pool_t *pool)
{
  if (ag_cmp_sanitizer()) /* its rounds measured the sanitizer: the watch says so once */
    return 0;
  ag_cmp_t c;
  ag_cmp_resume(&c, pool, 0, 0);
  double med;
  enum ag_verdict v = ag_cmp_judge(&c, &med);
  if (v != AG_CMP_SLOWER && v != AG_CMP_TIE)
    return 0;
  char fig[AG_REASON_LEN - 64];
  ag_cmp_describe(&c, med, "pooled over runs", fig, sizeof fig);
  demoted[e->index] = AG_DEMOTED_SLOWER; /* before the tier: the writer reads it once DEMOTED */
  atomic_store(&e->tier, AG_TIER_DEMOTED);
  decide(e, v == AG_CMP_TIE ? AG_STATE_TIED : AG_STATE_LOST, AG_EV_DEMOTED, "%s, not placed: %s",
         v == AG_CMP_TIE ? "tie" : "slower", fig);
  ag_persist_drop(&objects, e->index);
  event(e, AG_EV_INVALIDATED, "slower: %.0f ns per call, original %.0f ns (pooled over runs)",
        ag_cmp_variant_ns(&c), ag_cmp_orig_ns(&c));
  return 1;
}

/* Whether symbol, a stored kernel, may be placed for e, whose tier is from (COLD, or QUEUED on
 * the compile thread that took it: ag_tier_load's first checks): 0, or 1 / -1 with err as
 * ag_tier_load returns them (e's tier and reason set where they change). */
static int load_allowed(ag_entry_t *e, uint32_t from, const char *symbol,
                        const st_judge_pool_t *pool, char *err, size_t errlen)
{
  char no[AG_REASON_LEN];
  ag_cq_lock(&cq);
  uint32_t was = from;
  int ok = atomic_load(&e->tier) == from && prepare(e, no, sizeof no);
  int parts = ok ? ag_vrun[e->index].parts : 1;
  jt_gemm_t part = ok ? ag_problem_part(&shapes[e->index], &ag_vrun[e->index]) : (jt_gemm_t){0};
  if (ok && !ag_problem_symbol_fits(&part, symbol)) { /* N (M) in other parts here (par.h) */
    ag_cq_unlock(&cq);
    snprintf(err, errlen, "compiled for another split of %c between cores than this run's (%d "
             "part%s: OPJIT_KERNEL_THREADS, the CPUs, the host's threads)",
             ag_problem_split_dim(&part), parts > 1 ? parts : 1, parts > 1 ? "s" : "");
    return -1;
  }
  /* not compilable with these options (OPJIT_JIT_MAX_DIM): NONE, as enqueue does */
  if (!ok && atomic_compare_exchange_strong(&e->tier, &was, AG_TIER_NONE))
    decide(e, AG_STATE_REFUSED, -1, "its stored kernel is not placed: %s", no);
  ag_cq_unlock(&cq);
  if (!ok) {
    snprintf(err, errlen, "the signature is not compilable with these options");
    return -1;
  }
  if (pool && pool_lost(e, pool)) {
    snprintf(err, errlen, "its pooled rounds find it slower than the original");
    return 1;
  }
  return 0;
}

/* Charges size bytes of placed code for e to the code cache: 0, or 1 with err when it is full
 * (e's reason says so). code_mu held. */
static int load_charge(ag_entry_t *e, size_t size, char *err, size_t errlen)
{
  if (!ag_cc_fits(&cache, size)) {
    snprintf(err, errlen, "the code cache is full");
    decide(e, AG_STATE_REFUSED, -1, "its stored kernel is not placed: the code cache is full "
           "(OPJIT_CODE_CACHE_MB); compiled if it gets hot and room is made");
    return 1;
  }
  ag_cc_charge(&cache, size);
  return 0;
}

/* Publishes e's placed kernel l (executable, charged, registered), placed in ns; hot: at a
 * compile thread's turn (ag_tier_load_queued), not at the warm start. */
static void load_publish(ag_entry_t *e, const jt_loaded_t *l, const char *symbol,
                         const st_judge_pool_t *pool, uint64_t ns, int hot)
{
  /* The verdict on the pooled rounds carries over: the judge's rule on them now, as the watch's
   * first look would take it, so that a kernel earlier runs found faster starts kept (judged
   * again on later windows, its calls at the bursts' steady rate: compare.h) */
  st_judge_pool_t now;
  if (pool && pool->rounds) {
    ag_cmp_t c;
    ag_cmp_resume(&c, pool, 0, 0);
    ag_cmp_judge(&c, NULL);
    ag_cmp_save(&c, &now);
    pool = &now;
  }
  set_persisted(e->index, NULL, 0, symbol, 1);
  double us = (double)ns / 1e3;
  char judged[96] = "no verdict from the in-run judge yet";
  if (pool && pool->rounds && pool->kept)
    snprintf(judged, sizeof judged, "found faster on %u rounds over %u earlier runs, judged "
             "again on new ones", pool->rounds, pool->runs);
  else if (pool && pool->rounds)
    snprintf(judged, sizeof judged, "no verdict yet: the judge resumes from %u rounds over %u "
             "earlier runs", pool->rounds, pool->runs);
  char split[48];
  decide(e, AG_STATE_PLACED, -1, "placed from the store (%zu bytes of code in %.0f us, no "
         "compile; verified in the run that stored it%s); %s", l->size, us,
         split_words(e->index, split, sizeof split), judged);
  publish(e, l->fn, 0, pool); /* verified in the run that stored it; the checksum holds */
  event(e, AG_EV_LOADED, "%zu bytes of code placed in %.0f us, no compile%s", l->size, us,
        hot ? " (the store had it when the signature got hot)" : "");
}

/* ag_tier_load for e in tier from (load_allowed). */
static int load(ag_entry_t *e, uint32_t from, const void *obj, size_t len, const char *symbol,
                const st_judge_pool_t *pool, char *err, size_t errlen)
{
  uint64_t t0 = ag_now_ns();
  int rc = load_allowed(e, from, symbol, pool, err, errlen);
  if (rc)
    return rc;
  jt_loaded_t l;
  if (jt_obj_load(obj, len, symbol, &l, err, errlen))
    return -1;
  pthread_mutex_lock(&code_mu);
  if (from == AG_TIER_QUEUED) /* hot: room made as a compile would make it (compile_one) */
    make_room(l.map_len);
  if (load_charge(e, l.map_len, err, errlen)) {
    pthread_mutex_unlock(&code_mu);
    jt_obj_unload(&l);
    return 1;
  }
  add_code(l.fn, l.size, symbol, &l, obj, len, &e->key);
  pthread_mutex_unlock(&code_mu);
  load_publish(e, &l, symbol, pool, ag_now_ns() - t0, from == AG_TIER_QUEUED);
  ag_cq_lock(&cq);
  start_thread(); /* it watches the variant's speed and guards */
  ag_cq_unlock(&cq);
  return 0;
}

int ag_tier_load(ag_entry_t *e, const void *obj, size_t len, const char *symbol,
                 const st_judge_pool_t *pool, char *err, size_t errlen)
{
  return load(e, AG_TIER_COLD, obj, len, symbol, pool, err, errlen);
}

int ag_tier_load_queued(ag_entry_t *e, const void *obj, size_t len, const char *symbol,
                        const st_judge_pool_t *pool, char *err, size_t errlen)
{
  return load(e, AG_TIER_QUEUED, obj, len, symbol, pool, err, errlen);
}

/* One kernel of a batch, placed and waiting for the commit. */
typedef struct batch_item_s {
  ag_entry_t *e;
  jt_loaded_t l;
  const char *symbol;
  st_judge_pool_t pool;
  int has_pool;
  uint64_t ns; /* its own placing time */
} batch_item_t;

struct ag_tier_batch_s {
  jt_obj_batch_t obj;
  size_t n, cap;
  batch_item_t items[];
};

ag_tier_batch_t *ag_tier_batch_new(size_t n, size_t bytes)
{
  char err[128];
  ag_tier_batch_t *b = calloc(1, sizeof *b + (n ? n : 1) * sizeof *b->items);
  if (!b)
    return NULL;
  b->cap = n;
  if (jt_obj_batch_begin(&b->obj, bytes, err, sizeof err)) {
    ag_log(AG_LOG_DEBUG, "stored kernels are placed one by one: %s", err);
    free(b);
    return NULL;
  }
  return b;
}

int ag_tier_batch_add(ag_tier_batch_t *b, ag_entry_t *e, const void *obj, size_t len,
                      const char *symbol, const st_judge_pool_t *pool, char *err, size_t errlen)
{
  uint64_t t0 = ag_now_ns();
  if (b->n == b->cap) {
    snprintf(err, errlen, "the batch is full");
    return -1;
  }
  int rc = load_allowed(e, AG_TIER_COLD, symbol, pool, err, errlen);
  if (rc)
    return rc;
  long size = jt_obj_size(obj, len, err, errlen);
  if (size < 0)
    return -1;
  batch_item_t *it = &b->items[b->n];
  pthread_mutex_lock(&code_mu);
  if (load_charge(e, (size_t)size, err, errlen)) {
    pthread_mutex_unlock(&code_mu);
    return 1;
  }
  if (jt_obj_place(&b->obj, obj, len, symbol, &it->l, err, errlen)) {
    ag_cc_refund(&cache, (size_t)size);
    pthread_mutex_unlock(&code_mu);
    return -1;
  }
  add_code(it->l.fn, it->l.size, symbol, &it->l, obj, len, &e->key);
  pthread_mutex_unlock(&code_mu);
  it->e = e, it->symbol = symbol, it->has_pool = pool != NULL;
  if (pool)
    it->pool = *pool;
  it->ns = ag_now_ns() - t0;
  b->n++;
  return 0;
}

int ag_tier_batch_commit(ag_tier_batch_t *b, char *err, size_t errlen)
{
  uint64_t t0 = ag_now_ns();
  int rc = jt_obj_batch_commit(&b->obj, err, errlen);
  uint64_t share = b->n ? (ag_now_ns() - t0) / b->n : 0;
  int published = 0;
  for (size_t i = 0; i < b->n; i++) {
    batch_item_t *it = &b->items[i];
    if (rc == 0) {
      load_publish(it->e, &it->l, it->symbol, it->has_pool ? &it->pool : NULL, it->ns + share,
                   0);
      published++;
      continue;
    }
    pthread_mutex_lock(&code_mu); /* unmapped with the batch: never ran */
    uw_remove_code((uint64_t)(uintptr_t)it->l.fn);
    ag_code_remove(it->l.fn);
    ag_cc_refund(&cache, it->l.map_len);
    pthread_mutex_unlock(&code_mu);
  }
  if (published) {
    ag_cq_lock(&cq);
    start_thread(); /* it watches the variants' speed and guards */
    ag_cq_unlock(&cq);
  }
  free(b);
  return rc ? -1 : published;
}

void ag_tier_invalidate(ag_entry_t *e, const char *fmt, ...)
{
  char detail[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  int ok = arrays_locked();
  if (ok)
    ag_persist_drop(&objects, e->index);
  decide(e, AG_STATE_INVALIDATED, AG_EV_INVALIDATED, "%s", detail);
}

void ag_tier_refuse(ag_entry_t *e, const char *fmt, ...)
{
  char detail[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  event(e, AG_EV_REFUSED, "%s", detail);
}

const char *ag_tier_status(uint32_t i)
{
  switch (atomic_load(&ag_table_entry(ag_table, i)->tier)) {
  case AG_TIER_QUEUED:
    return "queued";
  case AG_TIER_READY:
    return "ready";
  case AG_TIER_FAILED:
    return "failed";
  case AG_TIER_DEMOTED:
    return !demoted || demoted[i] == AG_DEMOTED_SLOWER ? "demoted"
           : demoted[i] == AG_DEMOTED_TIE             ? "tied"
           : demoted[i] == AG_DEMOTED_CRASH           ? "crashed"
                                                      : "guarded";
  default:
    return NULL;
  }
}

uint32_t ag_tier_reason_gen(uint32_t i) { return ag_reason_gen(&reasons, i); }

uint32_t ag_tier_reason(uint32_t i, uint64_t calls, ag_reason_t *out)
{
  uint32_t gen = ag_reason_get(&reasons, i, out);
  if (out->state != AG_STATE_UNDECIDED)
    return gen;
  ag_entry_t *e = ag_table_entry(ag_table, i);
  jt_gemm_t g;
  int row;
  char *why = out->text;
  size_t len = sizeof out->text;
  out->state = AG_STATE_WAITING;
  if (ag_hot_calls == 0) {
    out->state = AG_STATE_OFF;
    snprintf(why, len, "the JIT is off (OPJIT_MODE=profile): calls are counted and timed only");
  } else if (!may_queue(e)) {
    out->state = AG_STATE_FAILED;
    snprintf(why, len, "the JIT is unavailable (%s): the original library serves",
             atomic_load(&jit_dead) ? "no compile thread" : jit_error);
  } else if (!compilable(&e->key, &g, &row, why, len)) {
    out->state = AG_STATE_UNSUPPORTED;
  } else if (calls < ag_hot_calls) {
    snprintf(why, len, "not hot yet: %llu of the %llu calls (OPJIT_HOT_CALLS) before %s",
             (unsigned long long)calls, (unsigned long long)ag_hot_calls,
             payback_applies(e) ? "the payback test" : "it is compiled");
  } else { /* the tests run per thread: calls spread over threads may not have reached one */
    snprintf(why, len, "%llu calls: promotion is tested when one thread reaches "
             "OPJIT_HOT_CALLS=%llu calls, then every 4096 (long calls at every doubling)",
             (unsigned long long)calls, (unsigned long long)ag_hot_calls);
  }
  return gen;
}

int ag_tier_persist(uint32_t i, ag_persist_t *out)
{
  if (!objects.slots) {
    memset(out, 0, sizeof *out);
    out->origin = "compiled";
    return 0;
  }
  int ready = atomic_load(&ag_table_entry(ag_table, i)->tier) == AG_TIER_READY;
  return ag_persist_take(&objects, i, ready, (uint32_t)ag_opts.num[AG_OPT_VERIFY], out);
}

void ag_tier_persisted(uint32_t i, ag_persist_t *done, int ok)
{
  ag_persist_done(&objects, i, done, ok);
}

int ag_tier_gemm_verify(ag_entry_t *e, void *v, const void *a, const void *b, void *c,
                        double alpha, double beta, ag_verify_t *vf)
{
  jt_gemm_fn fn = (jt_gemm_fn)v;
  const ag_vrun_t *run = &ag_vrun[e->index];
  if (atomic_fetch_sub(&e->verify, 1) <= 0) { /* another thread took the last verification */
    ag_par_gemm(run, fn, a, b, c, alpha, beta);
    return AG_RUN_DONE;
  }
  /* Verification: the variant runs on the host's C, its result is kept aside, C is restored,
   * and the caller runs the original on it; the host keeps the original's result. */
  double bound;
  void *copy = ag_verify_gemm_run(&shapes[e->index], run, fn, a, b, c, alpha, beta, &bound);
  if (!copy)
    return AG_RUN_ORIGINAL;
  *vf = (ag_verify_t){e, copy, c, bound};
  return AG_RUN_VERIFY;
}

/* The outcome of one verification: no verdict without a finite bound (Inf or NaN in the
 * inputs), "verified" after the last one, else the variant is unpublished and blacklisted. */
static void verdict(ag_entry_t *e, double worst, double bound, long wi, long wj)
{
  if (!isfinite(bound)) {
    atomic_fetch_add(&e->verify, 1);
    return;
  }
  if (worst <= bound) {
    ag_persist_pass(&objects, e->index, 1);
    if (atomic_load(&e->verify) <= 0)
      event(e, AG_EV_VERIFIED, "matches the original within %.3g", bound);
    return;
  }
  uint32_t ready = AG_TIER_READY;
  if (atomic_compare_exchange_strong(&e->tier, &ready, AG_TIER_FAILED)) {
    atomic_store_explicit(&e->variant, NULL, memory_order_release);
    /* never stored, or stored by a race: deleted either way */
    ag_persist_drop(&objects, e->index);
    decide(e, AG_STATE_FAILED, AG_EV_VERIFY_FAILED, "C[%ld,%ld] off by %.3g, bound %.3g: "
           "blacklisted", wi, wj, worst, bound);
    ag_log(AG_LOG_WARN, "a JIT kernel disagreed with the original library (C[%ld,%ld] off by "
                        "%.3g): it is blacklisted, results stay the original's", wi, wj, worst);
  }
}

void ag_tier_verify_result(ag_entry_t *e, double worst, double bound)
{
  verdict(e, worst, bound, 0, 0);
}

void ag_tier_verify_end(ag_verify_t *vf)
{
  long wi, wj;
  double worst = ag_verify_gemm_worst(&shapes[vf->e->index], vf->copy, vf->c, &wi, &wj);
  free(vf->copy);
  verdict(vf->e, worst, vf->bound, wi, wj);
}

int ag_tier_dot(ag_entry_t *e, void *v, int f64, const void *x, const void *y, double *r)
{
  double rd = 0;
  float rf = 0;
  ((jt_gemm_fn)v)(x, y, f64 ? (void *)&rd : (void *)&rf, 0, 0);
  *r = f64 ? rd : rf;
  if (atomic_load_explicit(&e->verify, memory_order_relaxed) <= 0 ||
      atomic_fetch_sub(&e->verify, 1) <= 0)
    return AG_RUN_DONE;
  return AG_RUN_VERIFY;
}

void ag_tier_dot_verify_end(ag_entry_t *e, double variant, double original, const void *x,
                            const void *y)
{
  const jt_gemm_t *g = &shapes[e->index];
  verdict(e, ag_verify_diff(variant, original), ag_verify_dot_bound(g->f64, g->k, x, y), 0, 0);
}

void ag_tier_after_fork_child(void)
{
  uint32_t n = ag_table ? ag_table_count(ag_table) : 0;
  /* Module by module, the locks a parent thread may have held and what died with its threads. */
  ag_cq_after_fork_child(&cq);                /* no queue, no compile thread */
  ag_events_after_fork_child(&events);        /* the parent records its own events */
  ag_persist_after_fork_child(&objects, n);   /* ... and stores (or drops) its own objects */
  pthread_mutex_init(&code_mu, NULL);
  ag_cc_after_fork_child(&cache);             /* the child's own deferrals start afresh */
  ag_code_after_fork_child();                 /* the code map */
  pthread_mutex_init(&cmp_mu, NULL);
  ag_reasons_after_fork_child(&reasons);      /* the decisions so far stay */
  /* The tiers' own state. A warm start in the parent's writer did not survive. */
  atomic_store(&hold_hot, AG_HOLD_NONE);
  pthread_mutex_init(&hold_mu, NULL); /* a parent thread may have held it */
  pthread_cond_init(&hold_cond, NULL);
  /* The child's counters start from zero: its comparisons' baselines too, their rounds so far
   * (pooled from earlier runs, and the parent's) kept: the child's writer stores them with its
   * own. Whether a compile thread will watch its variants is not known yet: until one does, no
   * bursts. */
  for (uint32_t i = 0; cmps && i < n; i++) {
    st_judge_pool_t pool;
    ag_cmp_save(&cmps[i], &pool);
    ag_cmp_resume(&cmps[i], &pool, 0, 0);
    watched_calls[i] = 0;
  }
  atomic_store(&ag_tier_live, 0);
  /* If the parent had loaded LLVM, its state in the child is whatever a compile thread left
   * mid-compile: the child keeps the variants it inherited and compiles nothing new, but places
   * the kernels the database stores (may_queue). (A parent whose compile thread only watched
   * loaded kernels never touched LLVM.) */
  if (atomic_load(&jit_tried))
    llvm_unusable("this process was forked from one that had loaded LLVM");
  /* Queued work died with the parent's compile thread: let it be hot again. */
  for (uint32_t i = 0; i < n; i++) {
    uint32_t queued = AG_TIER_QUEUED;
    ag_entry_t *e = ag_table_entry(ag_table, i);
    if (atomic_compare_exchange_strong(&e->tier, &queued, AG_TIER_COLD))
      decide(e, AG_STATE_WAITING, -1, "its compile, queued in the parent process, did not "
             "survive fork: queued again once hot in this one");
  }
}
