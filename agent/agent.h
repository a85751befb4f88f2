/* SPDX-License-Identifier: MIT */
/* The agent core as host adapters see it: per-call accounting on the host thread (inline,
 * nanoseconds) and the resolution of original operators. Everything slow happens on the
 * writer thread (agent.c), which starts with the process's first counted call.
 *
 *   ag_state:  UNINIT ──init──▶ PASS (disabled, secure, mode off)
 *                         └───▶ COUNT ──first call──▶ COUNT | AG_LIVE (table, writer thread)
 *   fork child: AG_LIVE cleared, counters zeroed; its first call starts its own run. */
#ifndef OPJIT_AGENT_AGENT_H
#define OPJIT_AGENT_AGENT_H

#include "background.h"
#include "opt.h"
#include "table.h"
#include "tcount.h"
#include "tier.h"
#include "../sampler/sampler.h"

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <x86intrin.h>

#define AG_EXPORT __attribute__((visibility("default")))
#define AG_TLS __thread __attribute__((tls_model("initial-exec")))
#define ag_likely(x) __builtin_expect(!!(x), 1)
#define ag_unlikely(x) __builtin_expect(!!(x), 0)

/* AG_COUNT_HOOKED: counting only at the call sites of the hosts that hook themselves in
 * (ag_call_begin_host's hooked): OPJIT_HOSTS leaves out the hosts whose symbols are always
 * interposed (host.h, AG_HOST_SYMBOLS). */
enum { AG_UNINIT = 0, AG_PASS, AG_COUNT, AG_COUNT_HOOKED };
/* ag_state's bit set while the table and the writer exist in this process (ag_activate; a fork
 * child clears it): a counted call reads one flag, COUNT | AG_LIVE, with one acquire load. */
#define AG_LIVE 4

extern _Atomic int ag_state;       /* enum above, | AG_LIVE */
extern ag_table_t *ag_table;       /* valid while live */
extern _Atomic uint64_t ag_overflow_calls; /* calls that found the table full */
extern uint32_t ag_time_mask;      /* OPJIT_TIME_EVERY - 1 */
extern uint64_t ag_hot_calls;      /* OPJIT_HOT_CALLS */
/* Whether a thread's n-th call of a signature may take the hot test (tier.h, ag_tier_hot): at
 * OPJIT_HOT_CALLS, every 4096th and, for a signature of long calls (ag_hot_test_long), at every
 * power of two in between. Doubling the calls between tests, a signature of long calls is
 * queued once their time pays a compile back: a double GEMV 1024^2 at 140 us a call (Zen 5, a
 * library on two threads) failed its test at 64 calls and waited for the sampler's, 263 ms into
 * a 440 ms loop of 3000 calls; now it passes at 128-256 (45-60 ms). Short calls keep the
 * sparse schedule: tested at every doubling too, bench_smallgemm's 14 shapes queued sooner and
 * its 1st run was no faster (plain/run 0.995 and 1.013 against 1.021 and 1.021, Zen 5). The
 * first test is the fast path's: it lets through a superset (with the 12 n in each 4096 past
 * the first that have a single bit below 4096), the second picks the calls tested. */
#define ag_hot_test_due(n) ((n) == ag_hot_calls || ((n) & ((n) - 1) & 4095) == 0)
#define ag_hot_test_long(e, n)                                                                \
  ((n) == ag_hot_calls || ((n) & 4095) == 0 ||                                               \
   (((n) & ((n) - 1)) == 0 &&                                                                 \
    atomic_load_explicit(&(e)->best_ns, memory_order_relaxed) >= AG_LONG_CALL_NS))
extern ag_opts_t ag_opts;          /* the options, parsed once */
/* Duels running on compile threads now (duel.h): their kernels and originals compete with the
 * host's calls for the core (2 vCPUs are often one core's two hyperthreads) and for the
 * library's locks, so the host's timings meanwhile are not booked, either side's. */
extern _Atomic uint32_t ag_duels;
/* How long the exit waits for them (agent.c, exit_begins): a duel or check in flight calls the
 * library no more once the exit began and ends in milliseconds, or longer on a thread without a
 * CPU (it was 200 ms: a compile thread can wait that long for a CPU on a loaded 2-vCPU
 * machine). The wait ends when they do. */
#define AG_EXIT_DUEL_WAIT_MS 2000
/* Set when the process begins to exit (agent.c, exit_begins: its first exit handler where the
 * first call came from main, 1; or at an _exit, 2): no duel or check starts, a running duel
 * stops at its next round (the libraries it calls run their destructors later in the exit), no
 * signature is queued or compiled (the exit's _dl_fini would wait for LLVM's load). A fork child
 * inherits exit()'s: one forked by an exit handler goes on exiting (not an _exit's: another
 * thread's fork raced it). (An exec, which may fail, only stops the warm start: agent.c,
 * final_asked.) */
extern _Atomic int ag_exiting;

/* The folder libopjit.so was loaded from (its modules live beside it). */
const char *ag_self_dir(void);
/* Held by an agent thread other than the writer while it is inside SQLite (the machine model's
 * read, the fleet thread's local work but not its round trips to the server), as the writer
 * holds its own lock: fork takes both first (for a bounded time), so the child never inherits
 * a lock SQLite held in a thread that does not exist there. Never held while waiting for the
 * writer. */
void ag_sqlite_lock(void);
void ag_sqlite_unlock(void);
/* Per-thread cache of recently seen keys: most calls find their entry here with four word
 * compares (eight when it is its set's second), without hashing or probing the shared table.
 * Two ways per set, the set picked by the key's hash; a miss puts its key first in its set and
 * the first second (so a program cycling through up to two keys a set hits every call: a loop
 * over 14 shapes, say, where the 8 direct-mapped slots this replaced missed for ~80 % of its
 * calls). Entries never move, so a cached pointer stays valid for the process's life (fork
 * children included). The cache (2.5 KB) lives with the thread's registration (tcount.h), not
 * in its TLS: static TLS beyond ~1.5 KB makes a dlopen of the agent fail (glibc's surplus). */
#define AG_TLC_SET_BITS 5
#define AG_TLC_SLOTS (2u << AG_TLC_SET_BITS)
typedef struct ag_tlc_slot_s {
  uint64_t w[4];  /* the key's words */
  ag_entry_t *e;  /* NULL: empty slot */
} ag_tlc_slot_t;

/* The first of key's set's two slots in tlc. */
static inline __attribute__((always_inline)) ag_tlc_slot_t *ag_tlc_set(ag_tlc_slot_t *tlc,
                                                                      const uint64_t *w)
{
  uint64_t h = (w[0] ^ w[1] ^ w[2] ^ w[3]) * 0x9e3779b97f4a7c15ull;
  return &tlc[2 * (unsigned)(h >> (64 - AG_TLC_SET_BITS))];
}

/* 1 when slot s holds the key whose words are w. */
static inline __attribute__((always_inline)) int ag_tlc_holds(const ag_tlc_slot_t *s,
                                                               const uint64_t *w)
{
  return s->e && s->w[0] == w[0] && s->w[1] == w[1] && s->w[2] == w[2] && s->w[3] == w[3];
}

#define AG_BURST_SIGS 32 /* signatures one burst notes and times; more wait for another burst */

/* Everything a host thread keeps: one thread-local block, so the hot path finds it with one
 * address computation. */
typedef struct ag_thread_s {
  int depth;                 /* > 0 while this thread is inside an intercepted call */
  uint32_t rng;              /* xorshift state: the gaps between timed calls, and which of them
                                run the original (random, so a periodic call pattern cannot
                                alias with it) */
  int32_t tick;              /* counted calls until the next timed one (ag_call_pick) */
  uint32_t gap_scale;        /* the next gap's length in OPJIT_TIME_EVERYs, from the last timed
                                call (compare.h, ag_cmp_gap_scale); 0 or 1: one */
  float timing_ns;           /* what a timing costs (two reads of ag_tick's clock, the machine
                                model's figure), kept once the model is ready; 0 before */
  int32_t chain;             /* > 0: calls left in which every call comes to ag_call_pick and
                                a long signature's is timed (ag_call_long) */
  int32_t chain_after;       /* ... the chain to go on with once the thread's burst is over */
  int32_t resume;            /* ... meanwhile, the calls left of the gap to the next timed call
                                (counted toward the next burst already) */
  int32_t burst;             /* calls left in this thread's original burst (compare.h): while
                                > 0, every call runs its original and comes to ag_call_pick */
  int32_t to_burst;          /* counted calls until the next burst */
  int32_t burst_len;         /* calls a burst lasts: grows while bursts time nothing */
  int32_t burst_saw_variant; /* this burst ran a variant's original */
  uint32_t burst_bg;         /* the agent's background work when it began (ag_bg_mark) */
  uint32_t nbt;              /* signatures seen in this burst, in bt */
  ag_cmp_settle_t bt[AG_BURST_SIGS]; /* each noted signature's warm original timings (after
                                        its first call in the burst; id: its entry index) */
  _Atomic uint64_t *calls;   /* this thread's counters (tcount.h), or NULL: shared entries */
  _Atomic uint64_t *vcalls;  /* ... and its variant calls' (calls + capacity) */
  _Atomic uint32_t *cur;     /* where this thread's current operator is kept, followed by its
                                count of finished calls (code unpublished before that count
                                moved can no longer be running on the thread: tier.c frees
                                it); NULL until the thread registers (tcount.h) */
  _Atomic uint32_t own_cur[2]; /* ... when no shared slot was free */
  ag_tlc_slot_t *tlc;          /* the key cache, AG_TLC_SLOTS: set with calls (NULL before) */
} ag_thread_t;
/* The agent's static TLS must stay well below glibc's surplus (~1.5 KB): beyond it a dlopen of
 * the agent fails (see the key cache above). */
_Static_assert(sizeof(ag_thread_t) <= 1024, "the thread block outgrew the agent's TLS budget");
/* 1 once the host has started a thread (threads.c's pthread_create; the agent's own do not
 * count), else 0: a host without runs its calls on its callers' threads alone. */
int ag_host_threaded(void);
/* Whether the agent's background work disturbs the host's timings: now, or since mark
 * (background.h). Only a host with threads of its own is: the work takes a CPU its threads want;
 * a host without runs on its callers' threads, and the work on another CPU. */
static inline int ag_bg_disturbs(void) { return ag_host_threaded() && ag_bg_busy(); }
static inline int ag_bg_disturbed_since(uint32_t mark)
{
  return ag_host_threaded() && !ag_bg_quiet_since(mark);
}
extern AG_TLS ag_thread_t ag_tl;
/* The agent's threads (writer, compile, machine, fleet) run on the CPUs the process could use
 * when the agent loaded, not on those of the host thread that happened to start them: a host
 * that pins its threads (OpenMP's OMP_PROC_BIND, a pool bound core by core) would otherwise
 * have the compiles and the writes share its pinned thread's core while the others idle. A
 * process bound as a whole (taskset, a cpuset) keeps its binding. ag_note_process_cpus runs in
 * the agent's constructor; each agent thread starts with ag_agent_thread_begin, which names it
 * (name: at most 15 characters), moves it there and unblocks the fault signals for the crash
 * hook (its creator blocked every signal). */
void ag_note_process_cpus(void);
void ag_agent_thread_begin(const char *name);
/* pthread_create for the agent's own threads (every one of them starts here): threads.c's
 * interposer does not count them as the host's (ag_host_threaded), even where another
 * interposer (a sanitizer's runtime, preloaded first) wraps their start routine in its own.
 * ag_tl_starting is set meanwhile, on the creating thread. */
int ag_agent_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                           void *arg);
extern AG_TLS int ag_tl_starting;
/* Where thread tid of this process is (from /proc/self/task/TID/stat): the CPU it last ran on
 * (field 39) when it is running or waiting for a CPU (state R, field 3), else -1. */
int ag_thread_running_cpu(pid_t tid);
/* Keeps the calling agent thread off the CPU that thread caller (a gettid of this process) last
 * ran on while caller runs (or waits for a CPU), where the process has CPUs besides it; else
 * (caller 0, asleep, blocked, gone) the thread runs on all the process's CPUs. Called on a
 * thread that is not the agent's (ag_agent_tid), it does nothing. */
void ag_agent_keep_off(pid_t caller);
/* ag_agent_keep_off for the host's one calling thread, where one thread calls operators
 * (tcount.c, ag_tcount_only_caller), whether or not the host has other threads (a library's
 * pool, which runs the calls it splits beside it: the agent's work takes that pool's CPU or the
 * calling thread's either way). The writer, the compile threads and the machine model's call it
 * before each piece of work (a flush, a compile, a measurement: the host's thread may have
 * moved or stopped since). On a 2-vCPU guest whose scheduler woke them on the host thread's CPU
 * and left them there for one or two 4 ms slices while the other CPU idled, a first run's loop
 * waited 15-25 ms of 450 (docs/benchmarks.md, stop 47). */
void ag_agent_keep_off_host(void);
/* Whether thread tid (a gettid) began as one of the agent's (ag_agent_thread_begin; the first
 * AG_AGENT_TIDS of them, fork children's included): a library's pool is not (spin.h). */
#define AG_AGENT_TIDS 64
int ag_agent_tid(int tid);
/* How many CPUs the process could use when the agent loaded (before ag_note_process_cpus ran:
 * the calling thread's); 0 when unknown. The same in every thread, pinned or not. */
int ag_process_cpu_count(void);
/* Set on compile threads (and the calibration's, tier.c): the C++ static destructors of what
 * it loads and runs (LLVM) are not registered with __cxa_atexit (process.c), so exit never
 * destroys LLVM under a compile. */
extern AG_TLS int ag_tl_keep_statics;

/* Parses options once (normally from the constructor; any thread may get here first). */
void ag_init(void);
/* Creates the table and starts the writer; returns 0 when counting can go on. */
int ag_activate(void);
/* The table and the writer exist in this process (ag_state's AG_LIVE; acquire). */
static inline int ag_is_active(void)
{
  return (atomic_load_explicit(&ag_state, memory_order_acquire) & AG_LIVE) != 0;
}
/* ag_call_begin_host's slow start (out of line): a call that found ag_state other than counting
 * and live inits the agent and activates it, as this call may; returns 1 when it is counted. */
int ag_call_admit(int hooked);
/* Waits until the warm start has placed the stored kernels, ms milliseconds at most (for a host
 * whose first operator is long: a whole graph). */
void ag_warm_wait(long ms);
/* A signature that got hot (entry e, QUEUED, on the compile thread that took it; warm.h,
 * ag_warm_shelved): the kernel the database stores for it on this machine placed, as warm.h's
 * ag_warm_place returns; -1 also when the database is not open, unusable or not trusted with
 * code, or with OPJIT_WARM=0. Waits while the writer holds the database for the lookup. */
int ag_place_stored(ag_entry_t *e);
/* Entry e (QUEUED, on the compile thread that took it), before its kernel is placed or
 * compiled: the crash markers processes left beside the database since the last look recorded,
 * then whether this generator's kernel for e crashed a run, of any program, on this machine: 1
 * with why (len bytes) saying which, else 0 (also when the database is not open). Waits while
 * the writer holds the database. */
int ag_crashed_before(ag_entry_t *e, char *why, size_t len);

/* Around exec: the run of the image being replaced gets its final write (status "exec") before
 * the exec; if the exec fails, the writer starts again and the run goes on. */
void ag_before_exec(void);
void ag_after_failed_exec(void);
/* Before _exit/_Exit: the run's final write, as at exit(). */
void ag_before_exit(void);

/* An original operator, resolved once into *cache: the next definition after the agent
 * (RTLD_NEXT), else the first in the host rows' system libraries (host.h, libs). NULL (with
 * one error message) when none exists. */
void *ag_resolve_slow(void *_Atomic *cache, const char *name);

static inline __attribute__((always_inline)) void *ag_resolve(void *_Atomic *cache,
                                                              const char *name)
{
  void *fn = atomic_load_explicit(cache, memory_order_acquire);
  return ag_likely(fn != NULL) ? fn : ag_resolve_slow(cache, name);
}

static inline uint64_t ag_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The calling thread's CPU time, in ns (a preempted thread is not charged the wait). */
static inline uint64_t ag_thread_cpu_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The clock of the calls' timings (ag_call_t's t0, ag_call_timed): the invariant TSC where the
 * CPU has one (ag_machine_tsc_invariant), read after an lfence as the kernel's own clock reads
 * it, else ag_now_ns. On a Zen 5 VM (kvm-clock) a read costs ~21 ns where clock_gettime costs
 * ~30 (idle), and 1 call in OPJIT_TIME_EVERY reads it twice. The TSC is the clock once it has a
 * scale: set once, before the first activation publishes AG_LIVE, and never 0 after; ag_tick_ns
 * converts a difference of two reads to nanoseconds. */
extern _Atomic uint64_t ag_tick_scale; /* ns per TSC tick, 32.32 fixed point (0: no TSC): measured
                                          over the activation, refined by the writer over the run */
static inline uint64_t ag_tick(void)
{
  if (ag_likely(atomic_load_explicit(&ag_tick_scale, memory_order_relaxed))) {
    _mm_lfence();
    return __rdtsc();
  }
  return ag_now_ns();
}
static inline uint64_t ag_tick_ns(uint64_t dt)
{
  uint64_t scale = atomic_load_explicit(&ag_tick_scale, memory_order_relaxed);
  return scale ? (uint64_t)(((unsigned __int128)dt * scale) >> 32) : dt;
}
/* The writer's refinement of ag_tick_scale (over the time since the first activation). */
void ag_tick_refine(void);

/* Wall-clock nanoseconds since the epoch (what the database records). */
static inline int64_t ag_realtime_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The absolute time us microseconds from now on clock (for timed waits). */
static inline struct timespec ag_deadline_after_us(clockid_t clock, long us)
{
  struct timespec dl;
  clock_gettime(clock, &dl);
  dl.tv_sec += us / 1000000;
  dl.tv_nsec += (us % 1000000) * 1000;
  if (dl.tv_nsec >= 1000000000)
    dl.tv_sec++, dl.tv_nsec -= 1000000000;
  return dl;
}
/* ... ms milliseconds from now. */
static inline struct timespec ag_deadline_after(clockid_t clock, long ms)
{
  return ag_deadline_after_us(clock, ms * 1000);
}

/* One intercepted call in flight. */
typedef struct ag_call_s {
  ag_entry_t *e;  /* NULL when the table is full */
  uint64_t t0;    /* start time when this call is timed (ag_tick), else 0 */
  int variant;    /* 1 when the JIT variant served the call */
  int orig;       /* AG_ORIG_BURST: a burst runs the original though a variant exists (agent.c);
                     AG_ORIG_PAIR, AG_VARIANT_PAIR: a cold pair's original or variant side */
  int slot;       /* ... and its signature's place in the thread's burst table (when timed) */
  int forced;     /* timed because every such call is (its first, a long one's), not drawn */
} ag_call_t;

enum { AG_ORIG_BURST = 1, AG_ORIG_PAIR, AG_VARIANT_PAIR };

/* A timed call (the thread's tick ran out, or its first call of the signature, n == 1):
 * draws the gap to the next timed call, uniform in [1, 2 g - 1] where g is OPJIT_TIME_EVERY, or
 * a multiple of it after a short call of a judged variant (ag_tl.gap_scale), and starts the
 * clock. Inside an original burst (compare.h) every call comes here: a signature with a
 * published variant runs its original, timed when the signature already ran in this burst
 * (warm). Bursts start every few thousand calls while a variant is published, more often on
 * the calls of signatures whose variant still awaits its verdict (compare.h, the bursts'
 * budget). The calls of a host that hooks itself in (hooked set) take no part in bursts: such
 * a host judges its kernels in rounds of its own. Out of line: the common call pays one
 * decrement. */
void ag_call_pick(ag_call_t *c, uint64_t n, int hooked);

/* A call this long (ns) is timed every time on a host that duels its kernels (ag_call_long):
 * two clock reads cost well under 0.1 % of it, and the tiers weigh a long call's library on its
 * fastest call (tier.c, policy.h), which a few timings a run would leave to chance. A signature
 * is long once its fastest timed call is (table.h, best_ns). */
#define AG_LONG_CALL_NS 100000u
/* The chain after a long call of dt ns: AG_LONG_CHAIN calls, or one per AG_LONG_CHAIN_NS of the
 * call where that is more (at most AG_LONG_CHAIN_MAX). A chained call takes the full path and a pick: 4-11
 * ns more than on the fast path (Zen 3, an 8^3 float kernel's 45 ns call, the 400 calls after a
 * 512^3 product against 400 later ones, medians of 100 rounds), so the chain costs under 1 % of
 * the call that started it, and a 1 ms product keeps it over 500 short calls (a program's small
 * GEMMs between its large ones). */
#define AG_LONG_CHAIN 32
#define AG_LONG_CHAIN_NS 2000u
#define AG_LONG_CHAIN_MAX (1 << 20)
static inline int32_t ag_long_chain(uint64_t dt)
{
  uint64_t n = dt / AG_LONG_CHAIN_NS;
  return n < AG_LONG_CHAIN ? AG_LONG_CHAIN : n > AG_LONG_CHAIN_MAX ? AG_LONG_CHAIN_MAX : (int32_t)n;
}

/* A timed call of c->e took dt >= AG_LONG_CALL_NS ns, on a host that duels: the thread's next
 * ag_long_chain(dt) calls come to ag_call_pick (outside a burst, whose calls come anyway),
 * which times those of long signatures and renews the chain at each (never shortening it); the
 * gap to the thread's next random timing runs on meanwhile (ag_tl.resume), so the calls counted
 * toward the next burst and the random timings stay as they were. A burst (whose calls come to
 * the pick anyway, long ones timed) holds the chain and the one its long calls start, and the
 * thread goes on with it once the burst is over. So every call of a long signature is timed
 * while such calls come within their chains, and a thread without long calls pays nothing. A signature waiting for such timings is asked again (tier.h,
 * ag_tier_long_timed). Out of line: such calls are long. */
void ag_call_long(const ag_call_t *c, uint64_t dt);

/* A burst's warm original call of c->e took dt ns (out of line: bursts are rare). */
void ag_call_burst_timed(const ag_call_t *c, uint64_t dt);

/* A call of a signature whose variant v is judged in cold pairs (its entry's pair: one pair of
 * calls in that many): picks the side this call runs, alternating o v, v o, ... over the
 * signature's paired calls, so that each pair has the original and the variant as cold as the
 * program's own calls leave them and in both orders, and starts the clock. Returns v, or NULL
 * for the original. A variant still verifying, and a call inside a burst, are not paired. Out
 * of line: such calls are rare. */
void *ag_call_pair(ag_call_t *c, void *v);
/* A cold pair's call took dt ns: the judge's (tier.h, ag_tier_pair), and an original's is one of
 * the signature's recorded original timings too (what the call costs in this program, as rare
 * as it is). A variant side the guards sent to the original is no timing of either. */
void ag_call_pair_timed(const ag_call_t *c, uint64_t dt);

/* The entry of key: the thread's cache first, then the shared table (NULL when full). */
static inline __attribute__((always_inline)) ag_entry_t *ag_lookup(const ag_sig_t *key)
{
  const uint64_t *w = (const uint64_t *)(const void *)key;
  ag_tlc_slot_t *s = ag_tl.tlc ? ag_tlc_set(ag_tl.tlc, w) : NULL;
  if (ag_likely(s != NULL)) {
    if (ag_likely(ag_tlc_holds(&s[0], w)))
      return s[0].e;
    if (ag_likely(ag_tlc_holds(&s[1], w)))
      return s[1].e;
  }
  ag_sig_t miss = *key; /* the caller's key never escapes: its words stay in registers */
  ag_entry_t *e = ag_table_get(ag_table, &miss);
  if (e && s) {
    s[1] = s[0];
    s[0].w[0] = w[0], s[0].w[1] = w[1], s[0].w[2] = w[2], s[0].w[3] = w[3];
    s[0].e = e;
  }
  return e;
}

/* Accounts for a call of key. Returns 1 when the call is counted
 * (then ag_call_end must follow the forwarded call), 0 for a pure pass-through: the agent (or
 * the call's host) is off, or this thread is already inside an intercepted call (one entry
 * point of a library calling another, say), which is the original's own business. hooked is 1
 * at the call sites of a host that hooks itself in, only when its OPJIT_HOSTS bit is set
 * (host.h: no AG_HOST_SYMBOLS), and judges its kernels in rounds of its own; 0 at the always
 * interposed symbols' (ag_call_begin). A constant: those sites compile as if it were not there. */
static inline __attribute__((always_inline)) int ag_call_begin_host(ag_call_t *c,
                                                                    const ag_sig_t *key,
                                                                    int hooked)
{
  int st = atomic_load_explicit(&ag_state, memory_order_acquire);
  if (ag_unlikely(st != (AG_COUNT | AG_LIVE)) && !(hooked && st == (AG_COUNT_HOOKED | AG_LIVE))) {
    if (!ag_call_admit(hooked))
      return 0;
  } else if (ag_tl.depth) {
    return 0;
  }
  ag_tl.depth++;
  sp_tl_entry_frame = (uintptr_t)__builtin_frame_address(0); /* stitched stacks (sampler.h) */
  atomic_signal_fence(memory_order_release);                 /* stored before the op */
  if (ag_unlikely(!ag_tl.cur))
    ag_tcount_register();
  ag_entry_t *e = ag_lookup(key);
  c->e = e;
  c->t0 = 0;
  c->variant = 0;
  c->orig = 0;
  if (ag_unlikely(!e)) {
    atomic_fetch_add_explicit(&ag_overflow_calls, 1, memory_order_relaxed);
    return 1;
  }
  atomic_store_explicit(ag_tl.cur, e->index + 1, memory_order_relaxed);
  uint64_t n;
  if (ag_likely(ag_tl.calls != NULL)) { /* only this thread stores here: no locked add */
    _Atomic uint64_t *p = &ag_tl.calls[e->index];
    n = atomic_load_explicit(p, memory_order_relaxed) + 1;
    atomic_store_explicit(p, n, memory_order_relaxed);
  } else {
    n = atomic_fetch_add_explicit(&e->calls, 1, memory_order_relaxed) + 1;
  }
  if (ag_unlikely(ag_hot_test_due(n)) && ag_hot_test_long(e, n)) /* hot; later: a full queue */
    ag_tier_hot(e, n);
  if (ag_unlikely(--ag_tl.tick <= 0 || n == 1))
    ag_call_pick(c, n, hooked);
  return 1;
}

/* The published variant the call should run, or NULL for the original: calls inside an
 * original burst run the original anyway (ag_call_pick), so the variant is always compared
 * with a fresh, warm measurement of the original, and variant calls are timed too. */
#define ag_call_begin(c, key) ag_call_begin_host((c), (key), 0)

static inline __attribute__((always_inline)) void *ag_call_variant(ag_call_t *c)
{
  void *v = c->e ? atomic_load_explicit(&c->e->variant, memory_order_acquire) : NULL;
  if (!v || c->orig)
    return NULL;
  if (ag_unlikely(atomic_load_explicit(&c->e->pair, memory_order_relaxed)))
    return ag_call_pair(c, v);
  return v;
}

/* A timed call of c (c->t0 set) took ticks of ag_tick's clock (converted here): books it as the
 * original's or the variant's timing, a burst's or a cold pair's, or none while a duel runs
 * (ag_duels) or, in a host with threads of its own (ag_host_threaded), while the agent's
 * background work runs, but for a side's first timing (background.h: it takes a CPU the
 * library's threads want, and a library's float GEMV 2048^2 on two threads, 270 us a call
 * plain, was booked at 943 us from the calls its kernel's compile overlapped, its kernel "2.1x"
 * when it ran at 0.6x), starts a long call's chain (ag_call_long), and sets the thread's next
 * gap (ag_tl.gap_scale). Out of line: one call in OPJIT_TIME_EVERY comes here. */
void ag_call_timed(const ag_call_t *c, uint64_t ticks);

/* A timing dt against n earlier ones of ns in all: AG_ENTRY_SLOW (8) times their mean is a
 * preemption or a page fault, not the operator, and is left out (from 8 timings on), so that
 * one stall cannot tip the variant-versus-original comparison (table.h: the original's mean
 * applies the same rule to its slowest timings once they have company). */
static inline int ag_timing_outlier(uint64_t n, uint64_t ns, uint64_t dt)
{
  return n >= 8 && dt * n > AG_ENTRY_SLOW * ns;
}
static inline __attribute__((always_inline)) void ag_call_end(ag_call_t *c)
{
  ag_entry_t *e = c->e;
  _Atomic uint32_t *cur = ag_tl.cur;
  atomic_store_explicit(&cur[0], 0, memory_order_relaxed);
  atomic_store_explicit(&cur[1], atomic_load_explicit(&cur[1], memory_order_relaxed) + 1,
                        memory_order_release); /* after the call: see tier.h, code cache */
  if (c->variant) {
    if (ag_likely(ag_tl.calls != NULL)) {
      _Atomic uint64_t *p = &ag_tl.vcalls[e->index];
      atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + 1,
                            memory_order_relaxed);
    } else {
      atomic_fetch_add_explicit(&e->vcalls, 1, memory_order_relaxed);
    }
  }
  if (ag_unlikely(c->t0)) /* its end time read here, its booking out of line */
    ag_call_timed(c, ag_tick() - c->t0);
  ag_tl.depth--;
}

/* ---- the fast path ---------------------------------------------------------------------------
 * Most counted calls need nothing of the above but their count: the agent live and counting, the
 * thread outside any intercepted call and counting in its own array, the key in its cache, no
 * hot test (ag_hot_test_due), not its first call, no timed call due, and
 * a published variant (if any) not verifying, nor this call one of a cold pair's. A wrapper
 * checks all of that first (ag_fast_ready, ag_fast_lookup), without a store or a call, so that
 * the host's arguments stay in registers until the forwarded call; then ag_fast_enter, the call,
 * ag_fast_leave. A call that
 * fails any check goes to the full path (ag_call_begin ... ag_call_end) from the start, out of
 * line, which decides it as before: nothing is done twice, and every call is counted, timed and
 * served exactly as the full path would. (The always interposed symbols' wrappers, ag_call_begin's;
 * a host that hooks itself in keeps the full path.) callgrind, dgemm_ NN n=4 (AVX2 kernels, Zen 5):
 * 237.5 -> 198.3 instructions added to a served call, 201.6 -> 168.7 to a counted one (profile
 * mode), the full path's calls and the timings included. The wrapper calls the full path with a
 * plain call, not
 * a tail call (AG_NO_SIBCALL): for a sibling call with arguments on the stack GCC 12 copies
 * every one of them into its frame on entry, on the fast path too. */
#define AG_NO_SIBCALL() __asm__ volatile("")
typedef struct ag_fast_s {
  ag_thread_t *t;        /* this thread's block */
  ag_entry_t *e;         /* the call's entry */
  uint32_t i;            /* ... its index */
  int32_t tick;          /* the thread's countdown after the call (> 0) */
  uint64_t n;            /* its count on this thread after the call */
  void *v;               /* the published variant, or NULL: the original */
  int paired;            /* its signature is in cold pairs: this call is one between them */
} ag_fast_t;

/* Whether this thread's call may take the fast path, before its key is built: the agent live
 * and counting, the thread outside any intercepted call and counting in its own array. */
static inline __attribute__((always_inline)) int ag_fast_ready(ag_fast_t *f)
{
  ag_thread_t *t = &ag_tl;
  f->t = t;
  return ag_likely(!t->depth && t->calls &&
                   atomic_load_explicit(&ag_state, memory_order_acquire) == (AG_COUNT | AG_LIVE));
}

/* The rest of the checks, on the call's key: 1 when the fast path serves the call (f->v the
 * variant to run, or NULL), 0 for the full path. No store. */
static inline __attribute__((always_inline)) int ag_fast_lookup(ag_fast_t *f, const ag_sig_t *key)
{
  ag_thread_t *t = f->t;
  const uint64_t *w = (const uint64_t *)(const void *)key;
  const ag_tlc_slot_t *s = ag_tlc_set(t->tlc, w); /* ag_lookup's cache (set with t->calls) */
  if (ag_unlikely(!ag_tlc_holds(s, w)) && ag_unlikely(!ag_tlc_holds(++s, w)))
    return 0;
  ag_entry_t *e = s->e;
  uint32_t idx = e->index;
  uint64_t n = atomic_load_explicit(&t->calls[idx], memory_order_relaxed) + 1;
  int32_t tick = t->tick - 1;
  if (ag_unlikely(ag_hot_test_due(n) || tick <= 0))
    return 0; /* hot test (the first call among them), or a timed call */
  void *v = atomic_load_explicit(&e->variant, memory_order_acquire);
  int paired = 0;
  if (v) {
    if (ag_unlikely(atomic_load_explicit(&e->verify, memory_order_relaxed) > 0))
      return 0;
    /* A signature in cold pairs (ag_call_pair): the calls between its pairs are the fast
     * path's, counted on its pair_n as ag_call_pair counts them (ag_fast_enter); a pair's call
     * goes to the full path, which counts it there. (Threads racing on one paired signature may
     * serve a pair's call untimed: one pair fewer, as a lost timing.) */
    uint32_t every = atomic_load_explicit(&e->pair, memory_order_relaxed);
    if (ag_unlikely(every)) {
      if (atomic_load_explicit(&e->pair_n, memory_order_relaxed) % (2 * every) < 2)
        return 0;
      paired = 1;
    }
  }
  f->e = e, f->i = idx, f->n = n, f->tick = tick, f->v = v, f->paired = paired;
  return 1;
}

/* Before the forwarded call: what ag_call_begin stores for it. */
static inline __attribute__((always_inline)) void ag_fast_enter(const ag_fast_t *f)
{
  ag_thread_t *t = f->t;
  t->depth = 1;
  sp_tl_entry_frame = (uintptr_t)__builtin_frame_address(0); /* stitched stacks (sampler.h) */
  atomic_signal_fence(memory_order_release);                 /* stored before the op */
  atomic_store_explicit(&t->calls[f->i], f->n, memory_order_relaxed);
  t->tick = f->tick;
  atomic_store_explicit(t->cur, f->i + 1, memory_order_relaxed);
  if (ag_unlikely(f->paired))
    atomic_fetch_add_explicit(&f->e->pair_n, 1, memory_order_relaxed);
}

/* After it (served: f->v ran): what ag_call_end does for an untimed call. */
static inline __attribute__((always_inline)) void ag_fast_leave(const ag_fast_t *f, int served)
{
  ag_thread_t *t = f->t;
  _Atomic uint32_t *cur = t->cur;
  atomic_store_explicit(&cur[0], 0, memory_order_relaxed);
  atomic_store_explicit(&cur[1], atomic_load_explicit(&cur[1], memory_order_relaxed) + 1,
                        memory_order_release); /* after the call: see tier.h, code cache */
  if (served) {
    _Atomic uint64_t *p = &t->vcalls[f->i];
    atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + 1,
                          memory_order_relaxed);
  }
  t->depth = 0;
}

#endif
