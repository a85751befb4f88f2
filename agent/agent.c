/* SPDX-License-Identifier: MIT */
/* The agent's lifecycle: options at start-up, activation on the first counted call, the writer
 * thread that owns every database byte, fork children as runs of their own, and the final
 * write at exit.
 *
 * Why a writer thread and a separately loaded store: a host thread must never wait on I/O,
 * and a process that never calls an operator must pay nothing (no SQLite load, no file, no
 * thread). So the host thread only bumps counters; the writer dlopen()s libopjit-store.so
 * (which links SQLite) beside this library, opens the database and copies the counters into it
 * every OPJIT_FLUSH_MS. Each flush writes cumulative totals, so a failed one loses nothing:
 * the next writes the same rows again. */
#define _GNU_SOURCE
#include "agent.h"
#include "background.h"
#include "codemap.h"
#include "compare.h"
#include "fleet.h"
#include "heap.h"
#include "host.h"
#include "opjit.h"
#include "log.h"
#include "machine.h"
#include "opt.h"
#include "runinfo.h"
#include "series.h"
#include "spin.h"
#include "summary.h"
#include "tier.h"
#include "warm.h"
#include "crash.h"
#include "jit/jit.h"
#include "../sampler/aggregate.h"
#include "../sampler/sampler.h"
#include "../store/store.h"

#ifndef OPJIT_LLVM_VERSION
#define OPJIT_LLVM_VERSION "none"
#endif

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

_Atomic int ag_state;
_Atomic uint64_t ag_tick_scale; /* atomic: the writer refines it (ag_tick_refine) while an
                                   activation may read it */
static uint64_t tick_tsc0, tick_ns0; /* the calibration's start: a TSC read and its time */
ag_table_t *ag_table;
_Atomic uint64_t ag_overflow_calls;
_Atomic uint32_t ag_duels;
_Atomic int ag_exiting;
/* The writer's final step was asked (exit, _exit, exec: stop_writer; a failed exec clears it):
 * the warm start places nothing now. */
static _Atomic int final_asked;
static int ending(void) { return atomic_load(&ag_exiting) || atomic_load(&final_asked); }
uint32_t ag_time_mask;
static long hosts_on; /* OPJIT_HOSTS: none means off; no host of always interposed symbols
                         AG_COUNT_HOOKED */
AG_TLS ag_thread_t ag_tl;

ag_opts_t ag_opts;
uint64_t ag_hot_calls;
static char self_dir[PATH_MAX]; /* folder of libopjit.so: the store module lives beside it */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t activate_mu = PTHREAD_MUTEX_INITIALIZER;

/* Writer state. mu guards stop/writer_running and is held by the writer while it touches the
 * database, so fork's prepare handler can wait for a quiet moment. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond; /* on CLOCK_MONOTONIC: made by init_cond() */
static pthread_mutex_t db_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t writer;
static int writer_running, stop;
static const char *end_status = "exited"; /* what the final step records */
static int64_t run_start_ns, parent_start_ns;
static pid_t parent_pid; /* the forking parent, as seen at fork time */
static int fork_db_held; /* prepare got db_mu */
static pthread_mutex_t sqlite_mu = PTHREAD_MUTEX_INITIALIZER; /* ag_sqlite_lock */
static int fork_sqlite_held;                                  /* prepare got sqlite_mu */
/* Held by the writer while it loads libraries and walks the loader's list (its start: the
 * sampler, the fleet, the machine model; its rescans). glibc's fork resets the loader's main
 * lock in the child, but not the one dl_iterate_phdr takes, and finishes no half-made link
 * map: a child forked meanwhile had a writer that waited for ever on that lock or jumped into
 * a library half loaded (its run lost; test_preload's fork test, 3 runs in 600 under load).
 * fork's prepare handler waits for it. */
static pthread_mutex_t loader_mu = PTHREAD_MUTEX_INITIALIZER;
static int fork_loader_held; /* prepare got loader_mu */
static int loader_unsafe;    /* a fork child of a parent whose writer held it: no loader work */

void ag_sqlite_lock(void) { pthread_mutex_lock(&sqlite_mu); }

void ag_sqlite_unlock(void) { pthread_mutex_unlock(&sqlite_mu); }

/* Writer-thread-only state. */
static const st_api_t *store;
static st_db_t *db;
static char db_path[PATH_MAX]; /* db's file */
static int64_t run_id;
static int store_dead;
static int store_damaged; /* SQLite met damage in the file (write_failed): nothing more is read */
static int store_retry; /* the last step met a transient error (locked, full) */
static uint64_t *flushed_calls; /* per entry: calls at the last successful flush */
static uint32_t *flushed_gen;   /* per entry: its state's generation then (tier.h) */
static uint32_t flushed_cap;
static uint64_t flushed_overflow;
static uint32_t flushed_n; /* entries [0, flushed_n) have their signature rows in the database */
static ag_runinfo_t runinfo; /* large: read once per process image (warm start or first write) */
static int runinfo_read;
static uint64_t first_call_ns; /* when the first counted call activated the agent (ag_now_ns) */
/* How long after the first call the warm start was done: its stored kernels serving (0: none).
 * Atomic: a host thread that takes the warm start over sets it while the writer may record it
 * (record_early, under db_mu, which the host thread does not hold then). */
static _Atomic int64_t warm_ns;
static int warm_done;        /* once per process image: a fork child inherits the variants */
static sp_agg_t *agg;       /* what the sampler found in this run */
static int sampling;        /* sp_start succeeded for this writer */
static int agg_opmods;      /* resolved originals already declared to agg */
static ag_series_t *series; /* the run over time, noted every tick (NULL: none yet) */
/* The connections this process inherited from its forking ancestors, one per generation: never
 * closed (see atfork_child), but kept reachable, so that their memory is what it is, held on
 * purpose, and not a leak to a leak checker. */
static st_db_t **inherited;
static size_t ninherited;

/* Originals resolved so far: their modules are where operator time goes (sampler attribution). */
static const void *_Atomic resolved[32];
static _Atomic int nresolved;

static void report_option(const char *line) { ag_log(AG_LOG_ERROR, "%s", line); }

static const char *env_get(const char *name) { return getenv(name); }

/* The warm start in flight: the writer runs it first, the first call waits for it (warm_mu). */
static pthread_mutex_t warm_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t warm_cond;
static int warm_pending;
static int warm_taken; /* a thread runs it: the writer, or a host thread it left waiting */
/* Set while the warm start is pending and the writer may not have taken it: host threads look
 * at it in ag_call_pick (warm_take_over). */
static _Atomic int warm_untaken;
/* A host thread took the warm start over, OPJIT_FLEET named: the fleet's part is the writer's
 * (warm_fleet), as a host thread never waits on the network. warm_mu guards it. */
static int fleet_left;
#define WARM_TAKE_OVER_MS 20 /* a writer that has not begun the warm start by then has no CPU */
/* The tests' seams on the writer (OPJIT_TEST_FAULT, read once at init): writer_stall, a writer
 * without a CPU, waits until a host thread ran the warm start; writer_late begins once the
 * program's exit has, and no host thread takes the warm start over meanwhile. */
static enum { WRITER_ON_TIME, WRITER_STALL, WRITER_LATE } writer_fault;

static void warm_start(int writer_thread, int network);
static void warm_finish(int writer_thread, int network);
static void warm_fleet(void);
static void warm_take_over(void);
static void warm_wait_us(long us);
static void collect_crashes(void);
static void record_early(void);

/* The writer's wake-up and the warm start's end: their deadlines are CLOCK_MONOTONIC, so the
 * conditions must be too. */
static void init_cond(void)
{
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&cond, &ca);
  pthread_cond_init(&warm_cond, &ca);
  pthread_condattr_destroy(&ca);
}

static void agent_atexit(void);
static void exit_begins(void);
static void atfork_prepare(void);
static void atfork_parent(void);
static void atfork_child(void);

/* Whether OPJIT_HOSTS (bits) has a host whose symbols are always interposed (host.h,
 * AG_HOST_SYMBOLS): else only the hosts that hook themselves in count. */
static int symbols_on(long bits)
{
  for (size_t i = 0; i < ag_nhosts; i++)
    if ((ag_hosts[i]->traits & AG_HOST_SYMBOLS) && (bits & (long)ag_hosts[i]->opt_bit))
      return 1;
  return 0;
}

static void init_once_fn(void)
{
  if (getauxval(AT_SECURE)) { /* setuid and friends: no agent at all */
    atomic_store(&ag_state, AG_PASS);
    return;
  }
  init_cond();
  const char *fault = getenv("OPJIT_TEST_FAULT");
  writer_fault = !fault                          ? WRITER_ON_TIME
                 : !strcmp(fault, "writer_late")  ? WRITER_LATE
                 : !strcmp(fault, "writer_stall") ? WRITER_STALL
                                                  : WRITER_ON_TIME;
  /* A bad value's report goes where the log goes: its file is set before the options are
   * parsed (its level after: until then, the default's) */
  ag_log_setup(AG_LOG_WARN, env_get("OPJIT_LOG_FILE"));
  ag_opts_parse(&ag_opts, env_get, report_option);
  ag_opts_unknown(environ, report_option); /* a misspelt name, ignored without a word before */
  ag_log_setup((int)ag_opts.num[AG_OPT_LOG], ag_opts.str[AG_OPT_LOG_FILE]);
  ag_time_mask = (uint32_t)ag_opts.num[AG_OPT_TIME_EVERY] - 1;
  hosts_on = ag_opts.num[AG_OPT_HOSTS];
  ag_hot_calls = ag_opts.num[AG_OPT_MODE] == AG_MODE_JIT ? (uint64_t)ag_opts.num[AG_OPT_HOT_CALLS] : 0;
  Dl_info di;
  if (dladdr((void *)init_once_fn, &di) && di.dli_fname) {
    char *real = realpath(di.dli_fname, NULL);
    snprintf(self_dir, sizeof self_dir, "%s", real ? real : di.dli_fname);
    free(real);
    char *slash = strrchr(self_dir, '/');
    if (slash)
      *slash = 0;
    else
      snprintf(self_dir, sizeof self_dir, ".");
  }
  int off = ag_opts.num[AG_OPT_DISABLE] || ag_opts.num[AG_OPT_MODE] == AG_MODE_OFF || !hosts_on;
  if (!off && ag_opts.num[AG_OPT_SAMPLE_HZ] > 0)
    sp_expect();
  if (!off) {
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    /* Registered now, the final write runs after every exit handler registered later, so
     * operator calls made from those handlers are in the run too. */
    atexit(agent_atexit);
  }
  /* or-ed in: an activation that came first (a host's own) keeps its AG_LIVE */
  atomic_fetch_or(&ag_state, off ? AG_PASS : symbols_on(hosts_on) ? AG_COUNT : AG_COUNT_HOOKED);
}

void ag_init(void) { pthread_once(&init_once, init_once_fn); }

int ag_call_admit(int hooked)
{
  int st = atomic_load_explicit(&ag_state, memory_order_acquire);
  if (!(st & ~AG_LIVE)) {
    ag_init();
    st = atomic_load_explicit(&ag_state, memory_order_acquire);
  }
  int mode = st & ~AG_LIVE;
  if ((mode != AG_COUNT && !(hooked && mode == AG_COUNT_HOOKED)) || ag_tl.depth)
    return 0;
  return (st & AG_LIVE) || !ag_activate();
}

const char *ag_self_dir(void) { return self_dir; }

__attribute__((constructor)) static void agent_constructor(void)
{
  ag_note_process_cpus(); /* before main pins anything */
  ag_init();
}

#define BURST_LEN 64        /* calls a burst lasts at first */
#define BURST_LEN_MAX 1024   /* ... at most, when signatures recur less often than it lasts */

/* The gap to the next timed call, uniform in [1, 2 g - 1]: g is OPJIT_TIME_EVERY, times the
 * scale the thread's last timed call set (ag_call_timed). */
static int32_t draw_gap(void)
{
  uint32_t x = ag_tl.rng;
  x ^= x << 13, x ^= x >> 17, x ^= x << 5;
  ag_tl.rng = x;
  uint32_t every = ag_time_mask + 1; /* a power of two, at most 128 */
  if (ag_tl.gap_scale > 1)
    every *= ag_tl.gap_scale; /* at most AG_CMP_GAP_SCALE_MAX */
  return (int32_t)(1 + (x >> 8) % (2 * every - 1));
}

/* Hands a finished burst's timings to the judge (tier.c), and lengthens the next burst when
 * this one ran variants' originals but timed none (no signature came twice in it), or a
 * signature's timings were still falling when it ended (compare.h, ag_cmp_settle_t). */
static void burst_flush(void)
{
  /* a host without threads of its own keeps its burst: the agent's work runs on another CPU
   * (a first run's verdicts waited for its compiles, and its loop ran 0.94-0.95x as fast) */
  int timed = 0, falling = 0, quiet = !ag_bg_disturbed_since(ag_tl.burst_bg);
  for (uint32_t i = 0; quiet && i < ag_tl.nbt; i++) {
    uint64_t n, ns;
    ag_cmp_settle_take(&ag_tl.bt[i], &n, &ns);
    falling |= ag_cmp_settle_falling(&ag_tl.bt[i]);
    if (!n)
      continue;
    timed = 1;
    ag_entry_t *e = ag_table_entry(ag_table, ag_tl.bt[i].id);
    ag_tcount_book_held(e->index); /* the round's variant timings are this thread's, mostly */
    atomic_fetch_add_explicit(&e->timed, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->timed_ns, ns, memory_order_relaxed);
    ag_tier_burst(e, n, ns);
  }
  if (quiet && ag_tl.burst_saw_variant && (!timed || falling) && ag_tl.burst_len < BURST_LEN_MAX)
    ag_tl.burst_len *= 2;
  ag_tl.nbt = 0;
  ag_tl.burst_saw_variant = 0;
}

/* Entry index's place in this thread's burst table when it already ran in this burst, else -1;
 * the first time, it is noted (a burst notes AG_BURST_SIGS signatures at most: more are never
 * timed in it). */
static int burst_seen(uint32_t index)
{
  for (uint32_t i = 0; i < ag_tl.nbt; i++)
    if (ag_tl.bt[i].id == index)
      return (int)i;
  if (ag_tl.nbt < AG_BURST_SIGS)
    ag_tl.bt[ag_tl.nbt++] = (ag_cmp_settle_t){.id = index};
  return -1;
}

/* Whether every signature this burst noted has settled warm timings (compare.h). */
static int burst_timed_enough(void)
{
  for (uint32_t i = 0; i < ag_tl.nbt; i++)
    if (ag_tl.bt[i].state != AG_CMP_DONE)
      return 0;
  return ag_tl.nbt > 0;
}

/* The thread's next n calls (at least: a longer chain running goes on) come to ag_call_pick
 * (agent.h, ag_call_long), the gap to its next random timing kept meanwhile. Outside a burst. */
static void chain_start(int32_t n)
{
  if (!ag_tl.chain)
    ag_tl.resume = ag_tl.tick; /* the calls to the next timed one, that one included */
  if (n > ag_tl.chain)
    ag_tl.chain = n;
  ag_tl.tick = 1;
}

/* The thread's burst is over, its next timed call tick calls away: the chain it held or its long
 * calls started goes on. */
static void burst_over(void)
{
  ag_spin_burst_end(); /* a library's pool may spin on after it (spin.h) */
  if (ag_tl.chain_after > 0) {
    chain_start(ag_tl.chain_after);
    ag_tl.chain_after = 0;
  }
}

void ag_call_burst_timed(const ag_call_t *c, uint64_t dt)
{
  /* an outlier is left out of the round and of the recorded mean */
  if (!ag_timing_outlier(atomic_load_explicit(&c->e->timed, memory_order_relaxed),
                         atomic_load_explicit(&c->e->timed_ns, memory_order_relaxed), dt))
    ag_cmp_settle_add(&ag_tl.bt[c->slot], dt);
  if (ag_tl.burst > 0 && burst_timed_enough()) {
    /* Every signature it ran has its round's timings: the burst ends here, and the calls it
     * did not run go back to the budget (the next comes as many calls sooner), so signatures
     * that recur every few calls get a round per few dozen calls of bursts, not per
     * burst_len. */
    int32_t ran = ag_tl.burst_len - ag_tl.burst;
    ag_tl.to_burst -= ag_tl.burst * AG_CMP_BURST_EVERY;
    ag_tl.burst = 0;
    ag_tl.tick = ran + draw_gap();
    burst_over();
  }
  if (!ag_tl.burst)
    burst_flush();
}

/* Whether the n-th call of e on this thread is timed whatever the gap drew (a forced timing,
 * table.h): a thread's first, and every call while e is long (agent.h, AG_LONG_CALL_NS). */
static int always_timed(const ag_entry_t *e, uint64_t n)
{
  return n == 1 || atomic_load_explicit(&e->best_ns, memory_order_relaxed) >= AG_LONG_CALL_NS;
}

void ag_call_pick(ag_call_t *c, uint64_t n, int hooked)
{
  ag_entry_t *e = c->e;
  if (ag_unlikely(atomic_load_explicit(&warm_untaken, memory_order_relaxed)))
    warm_take_over();
  /* a thread's first call of a signature is timed whatever its gap drew: forced (table.h) */
  c->forced = n == 1;
  if (hooked) { /* a plain timed call; a burst in progress on this thread goes on */
    ag_tl.chain = 0;
    ag_tl.tick = ag_tl.burst > 0 ? 0 : draw_gap();
    c->t0 = ag_tick();
    return;
  }
  if (ag_tl.burst > 0) {
    int last = --ag_tl.burst == 0;
    /* After the burst, the thread's next timings wait a burst's length: the variants' first
     * calls after it find their code and data where the originals left them. */
    ag_tl.tick = last ? ag_tl.burst_len + draw_gap() : 0;
    if (last)
      burst_over();
    /* A variant still verifying keeps its calls: they run both it and the original. */
    if (atomic_load_explicit(&e->variant, memory_order_relaxed) &&
        atomic_load_explicit(&e->verify, memory_order_relaxed) <= 0) {
      c->orig = 1;
      ag_tl.burst_saw_variant = 1;
      if ((c->slot = burst_seen(e->index)) >= 0) {
        c->t0 = ag_tick(); /* warm: the signature already ran in this burst */
        return;
      }
    } else if (always_timed(e, n)) {
      c->forced = 1;
      c->t0 = ag_tick();
    }
    if (last)
      burst_flush();
    return;
  }
  if (ag_tl.nbt)
    burst_flush();
  if (ag_tl.chain > 0) { /* after a long call (ag_call_long) */
    ag_tl.chain--;
    c->forced = always_timed(e, n);
    if (--ag_tl.resume > 0) { /* not the gap's timed call */
      if (c->forced)
        c->t0 = ag_tick();
      ag_tl.tick = ag_tl.chain > 0 ? 1 : ag_tl.resume; /* over: the gap runs on */
      return;
    } /* else the gap's timed call (forced all the same for a long one): a new gap, as below */
  }
  if (!ag_tl.burst_len) { /* the thread's first pick: its first burst comes a period later */
    ag_tl.burst_len = BURST_LEN;
    ag_tl.to_burst = BURST_LEN * AG_CMP_BURST_EVERY / 2 +
                     (int32_t)(ag_tl.rng % (BURST_LEN * AG_CMP_BURST_EVERY / 2));
  }
  int32_t gap = draw_gap();
  ag_tl.tick = gap;
  /* The gap's calls count toward the next burst at this call's rate (compare.h, the bursts'
   * budget): a timed call is one drawn at random, so over many gaps each signature's calls
   * count at its own rate. */
  int awaiting = !atomic_load_explicit(&e->awaiting, memory_order_relaxed) ? AG_CMP_JUDGED
                 : atomic_load_explicit(&e->best_ns, memory_order_relaxed) >= AG_LONG_CALL_NS
                     ? AG_CMP_AWAITING_LONG
                     : AG_CMP_AWAITING;
  if (n != 1 && ag_cmp_burst_due(&ag_tl.to_burst, ag_tl.burst_len, gap, awaiting)) {
    /* it would not be timed (background.h), or a library's pool still spins after the last
     * one (spin.h): due again a burst's length on */
    if (ag_bg_disturbs() || atomic_load_explicit(&ag_spin_hold, memory_order_relaxed))
      ag_tl.to_burst = ag_tl.burst_len;
    else if (atomic_load_explicit(&ag_tier_live, memory_order_relaxed)) { /* from the next call on */
      ag_tl.burst = ag_tl.burst_len;
      ag_tl.nbt = 0;
      ag_tl.burst_saw_variant = 0;
      ag_tl.burst_bg = ag_bg_mark();
      ag_tl.tick = 0;
      if (ag_tl.chain > ag_tl.chain_after) /* a burst's calls all come here: held till it ends */
        ag_tl.chain_after = ag_tl.chain;
      ag_tl.chain = 0;
    }
  }
  if (ag_tl.chain > 0) { /* the chain goes on over the new gap */
    ag_tl.resume = ag_tl.tick;
    ag_tl.tick = 1;
  }
  c->t0 = ag_tick();
}

void ag_call_long(const ag_call_t *c, uint64_t dt)
{
  const ag_host_t *host = ag_host_of(c->e->key.host);
  if (!host || !(host->traits & AG_HOST_DUELS))
    return;
  int32_t chain = ag_long_chain(dt);
  if (ag_tl.burst <= 0)
    chain_start(chain);
  else if (chain > ag_tl.chain_after) /* from the burst's end (burst_over) */
    ag_tl.chain_after = chain;
  ag_tier_long_timed(c->e);
}

void *ag_call_pair(ag_call_t *c, void *v)
{
  ag_entry_t *e = c->e;
  if (atomic_load_explicit(&e->verify, memory_order_relaxed) > 0)
    return v; /* verifying: the call runs both sides */
  /* One pair every `every` pairs of calls; o v, then v o, ...: neighbouring pairs in both
   * orders, so that a drift over the run (the caches the program leaves, a neighbour's load)
   * weighs on both sides alike. */
  uint32_t every = atomic_load_explicit(&e->pair, memory_order_relaxed);
  uint32_t k = atomic_fetch_add_explicit(&e->pair_n, 1, memory_order_relaxed);
  uint32_t cycle = 2 * (every ? every : 1), at = k % cycle;
  if (at >= 2)
    return v; /* between pairs: the variant, untimed by the pair */
  int variant = (int)((k / cycle + at) & 1);
  c->orig = variant ? AG_VARIANT_PAIR : AG_ORIG_PAIR;
  c->t0 = ag_tick();
  return variant ? v : NULL;
}

void ag_call_pair_timed(const ag_call_t *c, uint64_t dt)
{
  ag_entry_t *e = c->e;
  if (c->orig == AG_VARIANT_PAIR) {
    if (c->variant)
      ag_tier_pair(e, AG_CMP_PAIR_VARIANT, dt);
    return;
  }
  if (!ag_timing_outlier(atomic_load_explicit(&e->timed, memory_order_relaxed),
                         atomic_load_explicit(&e->timed_ns, memory_order_relaxed), dt)) {
    atomic_fetch_add_explicit(&e->timed, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->timed_ns, dt, memory_order_relaxed);
  }
  ag_entry_orig_best(e, dt);
  ag_tier_pair(e, AG_CMP_PAIR_ORIG, dt);
}

/* Whether the timings' budget (compare.h, ag_cmp_gap_scale) spaces the thread's next timed call
 * after this one: a call its variant served once that variant has its verdict, or the original's
 * of a signature that has no variant to judge and gets none this run (unsupported, failed,
 * demoted or tied): no decision waits for its timings. A variant awaiting its verdict, a
 * signature still on its way to one (cold, queued), and the bursts' and pairs' calls keep
 * OPJIT_TIME_EVERY's rate. */
static int timing_budgeted(const ag_call_t *c)
{
  if (c->orig)
    return 0;
  if (c->variant)
    return !atomic_load_explicit(&c->e->awaiting, memory_order_relaxed);
  uint32_t tier = atomic_load_explicit(&c->e->tier, memory_order_relaxed);
  return tier == AG_TIER_NONE || tier == AG_TIER_FAILED || tier == AG_TIER_DEMOTED;
}

/* Holds an ordinary timing dt of c's short call on the thread (tcount.h: booked AG_HELD_MAX at
 * a time, so threads that time one signature do not take its entry's line from each other at
 * every timing); 0 where it must be booked now: a side's first AG_HELD_AFTER (the payback
 * test's mean, the outlier filter and a verdict's first rounds take them as they come), an
 * original's among its slowest (table.h: in the sums before it is noted), a long call's (the
 * long-call rule reads them as they come), a call of a host that does not duel (a graph host's
 * nodes, judged in rounds of their own), or a thread without an array of its own. */
static int hold(const ag_call_t *c, uint64_t dt)
{
  ag_entry_t *e = c->e;
  const ag_host_t *host = ag_host_of(e->key.host);
  if (!ag_tl.calls || dt >= AG_LONG_CALL_NS || !host || !(host->traits & AG_HOST_DUELS))
    return 0;
  if (atomic_load_explicit(c->variant ? &e->vtimed : &e->timed, memory_order_relaxed) <
          AG_HELD_AFTER ||
      (!c->variant && ag_entry_slowest(e, dt)))
    return 0;
  _Atomic uint64_t *h = ag_tcount_held(ag_tl.calls, e->index) + (c->variant ? 2 : 0);
  uint64_t n = atomic_load_explicit(&h[0], memory_order_relaxed) + 1;
  atomic_store_explicit(&h[1], atomic_load_explicit(&h[1], memory_order_relaxed) + dt,
                        memory_order_relaxed);
  atomic_store_explicit(&h[0], n, memory_order_relaxed);
  if (n >= AG_HELD_MAX)
    ag_tcount_book_held(e->index);
  return 1;
}

/* The timings booked on c's side of its entry: the variant's, or the original's drawn and forced
 * ones (table.h). */
static uint64_t side_booked(const ag_call_t *c)
{
  if (c->variant)
    return atomic_load_explicit(&c->e->vtimed, memory_order_relaxed);
  return atomic_load_explicit(&c->e->timed, memory_order_relaxed) +
         atomic_load_explicit(&c->e->forced, memory_order_relaxed);
}

void ag_call_timed(const ag_call_t *c, uint64_t ticks)
{
  ag_entry_t *e = c->e;
  uint64_t dt = ag_tick_ns(ticks);
  int was_long = atomic_load_explicit(&e->best_ns, memory_order_relaxed) >= AG_LONG_CALL_NS;
  if (ag_unlikely(!ag_tl.timing_ns)) /* two reads of the calls' clock: 0 until the model is ready */
    ag_tl.timing_ns = (float)(2 * ag_machine_timer_ns());
  ag_tl.gap_scale = timing_budgeted(c) ? ag_cmp_gap_scale(ag_tl.timing_ns, dt, ag_time_mask + 1) : 1;
  /* a side's first timing is booked even then: a mean from it beats none (a signature whose few
   * calls all came while the machine model measured the CPU, under a sanitizer, had none) */
  if (ag_unlikely(atomic_load_explicit(&ag_duels, memory_order_relaxed)) ||
      ag_unlikely((ag_bg_disturbs() ||
                   (c->variant && !c->orig && /* a spin a burst started (spin.h) */
                    atomic_load_explicit(&ag_spin_hold, memory_order_relaxed) &&
                    ag_vrun[e->index].parts > 1)) &&
                  (c->orig || side_booked(c)))) {
    if (c->orig) /* not booked (agent.h), nor is its burst lengthened */
      ag_tl.burst_saw_variant = 0;
    else if (!c->variant) /* nor is its mean, but a long call's fastest is (only slower) */
      ag_entry_orig_best(e, dt);
  } else if (ag_unlikely(c->orig)) {
    if (c->orig == AG_ORIG_BURST)
      ag_call_burst_timed(c, dt);
    else
      ag_call_pair_timed(c, dt);
  } else {
    _Atomic uint64_t *tc = c->variant ? &e->vtimed : &e->timed;
    _Atomic uint64_t *tn = c->variant ? &e->vtimed_ns : &e->timed_ns;
    if (!c->variant)
      ag_entry_orig_best(e, dt);
    if (!c->variant && c->forced) {
      ag_entry_orig_book(e, dt, 1); /* apart from the sample (table.h) */
    } else if (!ag_timing_outlier(atomic_load_explicit(tc, memory_order_relaxed),
                                  atomic_load_explicit(tn, memory_order_relaxed), dt) &&
               !hold(c, dt)) {
      if (!c->variant) {
        ag_entry_orig_book(e, dt, 0); /* its slowest noted (table.h) */
      } else {
        atomic_fetch_add_explicit(tc, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(tn, dt, memory_order_relaxed);
      }
    }
  }
  if (ag_unlikely(dt >= AG_LONG_CALL_NS))
    ag_call_long(c, dt);
  else if (ag_unlikely(was_long) && !c->variant)
    ag_tier_short_timed(e);
}

void *ag_resolve_slow(void *_Atomic *cache, const char *name)
{
  void *fn = dlsym(RTLD_NEXT, name);
  /* the program resolved the operator by name without linking its library (host.h, libs) */
  for (size_t i = 0; !fn && i < ag_nhosts; i++)
    for (const char *const *lib = ag_hosts[i]->libs; !fn && lib && *lib; lib++) {
      void *h = dlopen(*lib, RTLD_NOW | RTLD_LOCAL);
      fn = h ? dlsym(h, name) : NULL;
    }
  if (!fn) {
    ag_log_once(AG_LOG_ERROR, "no definition of %s after the agent and none in the system's "
                              "libraries: such calls are skipped", name);
    return NULL;
  }
  if (!atomic_exchange(cache, fn)) {
    int i = atomic_fetch_add(&nresolved, 1);
    if (i < (int)(sizeof resolved / sizeof *resolved))
      atomic_store(&resolved[i], fn);
  }
  return fn;
}

/* ---- writer thread ---------------------------------------------------------------------- */

/* A locked or full database: the next flush retries. The first such failure of the process
 * is said, whichever write met it (opening the database, recording the run, a flush); the
 * retries that follow are not. */
static void retry_later(const char *msg)
{
  static atomic_int said;
  store_retry = 1;
  if (!atomic_exchange(&said, 1))
    ag_log(AG_LOG_WARN, "%s; will retry", msg);
}

/* Loads the store module and opens the database; sets store_dead on permanent failure. */
static void open_store(void)
{
  char path[PATH_MAX + 32], dbpath[PATH_MAX], err[512];
  if (!store) {
    snprintf(path, sizeof path, "%s/%s", self_dir, ST_MODULE_NAME);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const st_api_t *api = h ? dlsym(h, ST_API_SYMBOL) : NULL;
    if (!api || api->abi != ST_API_ABI) {
      ag_log(AG_LOG_ERROR, "cannot load the store %s (%s): profiles are not recorded", path,
             h ? "wrong ABI" : dlerror());
      store_dead = 1;
      return;
    }
    store = api;
  }
  if (ag_opts_db_path(&ag_opts, env_get, dbpath, sizeof dbpath)) {
    const char *set = ag_opts.str[AG_OPT_DB];
    if (set && *set)
      ag_log(AG_LOG_ERROR, "OPJIT_DB is %zu characters long, longer than a path can be (%d): "
                           "profiles are not recorded", strlen(set), PATH_MAX - 1);
    else
      ag_log(AG_LOG_ERROR, "no database path (set OPJIT_DB, HOME or XDG_CACHE_HOME): profiles "
                           "are not recorded");
    store_dead = 1;
    return;
  }
  int rc = store->open(dbpath, ST_OPEN_CREATE, (int)ag_opts.num[AG_OPT_BUSY_MS], &db, err, sizeof err);
  if (rc == ST_EBUSY || rc == ST_EFULL) {
    retry_later(err);
    return;
  }
  if (rc) {
    ag_log(AG_LOG_ERROR, "%s: profiles are not recorded, the program runs unchanged", err);
    store_dead = 1;
    return;
  }
  ag_log(AG_LOG_INFO, "recording into %s", dbpath);
  snprintf(db_path, sizeof db_path, "%s", dbpath);
  ag_crash_arm(db_path, 0); /* a crash before the run is recorded still names its kernel */
}

/* Handles a failed write: transient codes retry at the next flush, others stop recording. */
static void write_failed(const char *what, int rc)
{
  if (store_dead && (rc != ST_ECORRUPT || store_damaged))
    return; /* said once: the first permanent failure stopped every write (damage found after
               another is said too) */
  if (rc == ST_EBUSY || rc == ST_EFULL) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s: %s", what, store->errstr(rc));
    retry_later(msg);
    return;
  }
  store_damaged = rc == ST_ECORRUPT;
  if (store_damaged) /* SQLite met damage: nothing more is read from it or written into it */
    ag_log(AG_LOG_ERROR, "%s: %s is damaged: profiles are no longer recorded, the program runs "
           "unchanged (opjit doctor --db %s checks it; " ST_DAMAGED_ADVICE ")", what, db_path,
           db_path);
  else
    ag_log(AG_LOG_ERROR, "%s: %s: profiles are no longer recorded, the program runs unchanged",
           what, store->errstr(rc));
  store_dead = 1;
}

static const ag_runinfo_t *run_info(void)
{
  if (!runinfo_read)
    ag_runinfo_read(&runinfo), runinfo_read = 1;
  return &runinfo;
}

/* What this machine's kernels are stored under (machine.h): the object key, in key. */
static void object_key(char *key, size_t len)
{
  ag_machine_object_key(run_info()->cpu_key, run_info()->cpu_flags, key, len);
}

static void begin_run(void)
{
  static char optbuf[4096];
  const ag_runinfo_t *ri = run_info();
  size_t used = 0;
  for (int id = 0; id < AG_OPT__COUNT; id++) {
    char val[512];
    ag_opts_format(&ag_opts, id, val, sizeof val);
    int n = snprintf(optbuf + used, sizeof optbuf - used, "%s=%s", ag_opt_desc(id)->name, val);
    if (n < 0 || (size_t)n >= sizeof optbuf - used)
      break;
    used += (size_t)n + 1;
  }
  st_run_info_t in = {
      .exe = ri->exe, .build_id = ri->build_id, .script = ri->script, .cmdline = ri->cmdline,
      .cmdline_len = ri->cmdline_len, .options = optbuf, .options_len = used,
      .cpu_model = ri->cpu_model, .cpu_flags = ri->cpu_flags, .ncpu = ri->ncpu,
      .pid = getpid(), .ppid = parent_start_ns ? parent_pid : getppid(),
      .parent_start_ns = parent_start_ns, .start_ns = run_start_ns,
      .agent_version = OPJIT_VERSION, .warm_ns = warm_ns,
  };
  int rc = store->run_begin(db, &in, &run_id);
  if (rc) {
    write_failed("cannot record the run", rc);
  } else {
    ag_log(AG_LOG_INFO, "run %lld started", (long long)run_id);
    ag_crash_arm(db_path, run_id);
  }
}

/* A flush of the run's calls succeeded (what an exit that cannot wait for the final write
 * keeps). */
static _Atomic int flushed_once;

/* Writes every signature whose count or JIT state moved since the last successful flush. */
static void flush(void)
{
  uint32_t n = ag_table_count(ag_table);
  if (n > flushed_cap) {
    uint64_t *p = realloc(flushed_calls, n * sizeof *p);
    if (p)
      flushed_calls = p;
    uint32_t *g = p ? realloc(flushed_gen, n * sizeof *g) : NULL;
    if (!g)
      return;
    memset(p + flushed_cap, 0, (n - flushed_cap) * sizeof *p);
    memset(g + flushed_cap, 0, (n - flushed_cap) * sizeof *g);
    flushed_gen = g, flushed_cap = n;
  }
  st_sig_rec_t *recs = calloc(n ? n : 1, sizeof *recs);
  char (*text)[4][256] = calloc(n ? n : 1, sizeof *text);
  uint64_t *total = calloc(n ? n : 1, sizeof *total), *calls = calloc(n ? n : 1, sizeof *calls);
  uint64_t *vtotal = calloc(n ? n : 1, sizeof *vtotal);
  uint32_t *idx = calloc(n ? n : 1, sizeof *idx), *gens = calloc(n ? n : 1, sizeof *gens);
  ag_reason_t *whys = calloc(n ? n : 1, sizeof *whys);
  size_t m = 0;
  uint64_t overflow = atomic_load(&ag_overflow_calls);
  if (!recs || !text || !total || !calls || !idx || !vtotal || !gens || !whys)
    goto out;
  ag_tcount_sum(total, vtotal, n);
  for (uint32_t i = 0; i < n; i++) {
    ag_entry_t *e = ag_table_entry(ag_table, i);
    uint64_t c = total[i];
    if (c == flushed_calls[i] && ag_tier_reason_gen(i) == flushed_gen[i])
      continue;
    st_sig_rec_t *r = &recs[m];
    snprintf(text[m][0], sizeof text[m][0], "%016llx", (unsigned long long)ag_sig_hash(&e->key));
    ag_sig_opname(&e->key, text[m][1], sizeof text[m][1]);
    ag_sig_format(&e->key, text[m][2], sizeof text[m][2]);
    ag_sig_params_json(&e->key, text[m][3], sizeof text[m][3]);
    uint64_t timed, tns; /* what a plain run's mean must agree with */
    ag_entry_orig_timed(e, &timed, &tns);
    *r = (st_sig_rec_t){.key = &e->key, .key_len = sizeof e->key, .sig = text[m][0],
                        .op = text[m][1], .name = text[m][2], .params = text[m][3],
                        .calls = c, .timed_calls = timed, .timed_ns = tns};
    gens[m] = ag_tier_reason(i, c, &whys[m]);
    if (whys[m].state != AG_STATE_UNDECIDED)
      r->state = ag_state_name(whys[m].state), r->reason = whys[m].text;
    calls[m] = c;
    idx[m++] = i;
  }
  if (m == 0 && overflow == flushed_overflow) {
    flushed_n = n; /* every entry that has calls is in the database already */
    goto out;
  }
  int rc = store->run_flush(db, run_id, recs, m, overflow, ag_realtime_ns());
  if (rc) {
    write_failed("cannot write the profile", rc);
    goto out;
  }
  for (size_t j = 0; j < m; j++)
    flushed_calls[idx[j]] = calls[j], flushed_gen[idx[j]] = gens[j];
  atomic_store(&flushed_once, 1);
  flushed_overflow = overflow;
  flushed_n = n;
out:
  free(recs), free(text), free(total), free(vtotal), free(calls), free(idx), free(gens), free(whys);
}

/* ---- sampling (on the writer thread) ----------------------------------------------------- */

static uint32_t own_op(void) { return ag_tl.cur ? atomic_load_explicit(ag_tl.cur, memory_order_relaxed) : 0; }

/* Threads that registered are host threads: their samples are theirs alone. The others (a
 * library's pool threads) work for whichever operator is in flight. */
static uint32_t pool_op(void) { return ag_tl.cur ? 0 : ag_tcount_inflight(); }

/* OPJIT_SAMPLE_BUDGET as a share of CPU time; a rate the user asked for (OPJIT_SAMPLE_HZ set
 * without a budget) is kept: no limit. */
static double sample_budget(void)
{
  if (ag_opts.from_env[AG_OPT_SAMPLE_HZ] && !ag_opts.from_env[AG_OPT_SAMPLE_BUDGET])
    return 0;
  return (double)ag_opts.num[AG_OPT_SAMPLE_BUDGET] / 1000;
}

static void start_sampling(void)
{
  static const char *const events[] = {"auto", "cycles", "task-clock", "cpu-clock", "timer"};
  sampling = 0;
  if (ag_opts.num[AG_OPT_SAMPLE_HZ] <= 0)
    return;
  if (!agg && !(agg = sp_agg_new()))
    return;
  sp_agg_code_lookup(agg, ag_code_at, ag_code_generation);
  sp_config_t c = {.hz = (int)ag_opts.num[AG_OPT_SAMPLE_HZ],
                   .events = events[ag_opts.num[AG_OPT_EVENTS]],
                   .stack_depth = (int)ag_opts.num[AG_OPT_STACK_DEPTH],
                   .budget = sample_budget(),
                   .attrib = {own_op, pool_op}};
  int rc = sp_start(&c);
  sp_status_t st;
  sp_status(&st);
  for (char *p = st.notes; *p; p++)
    if (*p == '\n')
      *p = ';';
  /* No PMU in a VM is normal: the note is kept in the run; a refusal of perf_event is not. */
  int refused = rc || st.fallback || (ag_opts.num[AG_OPT_EVENTS] == 1 && st.mode != SP_PERF_HW);
  if (rc)
    ag_log(AG_LOG_WARN, "sampling is off: %s", st.notes);
  else if (refused)
    ag_log(AG_LOG_WARN, "sampling with %s: %s", st.event, st.notes);
  else if (st.notes[0])
    ag_log(AG_LOG_INFO, "sampling with %s: %s", st.event, st.notes);
  sampling = rc == 0;
}

/* Moves the sampler's rings into the aggregation. */
static void drain_samples(void)
{
  static sp_sample_t buf[512];
  int n = atomic_load(&nresolved);
  for (; agg_opmods < n && agg_opmods < (int)(sizeof resolved / sizeof *resolved); agg_opmods++)
    sp_agg_operator_module(agg, atomic_load(&resolved[agg_opmods]));
  sp_status_t st;
  sp_status(&st);
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  size_t total = 0;
  for (size_t got; (got = sp_drain(buf, sizeof buf / sizeof *buf)) > 0; total += got)
    sp_agg_add(agg, buf, got, st.ncounters);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
  sp_adapt(total ? ns / (double)total : 0); /* the samples' measured cost, OPJIT_SAMPLE_BUDGET */
}

/* The cold operators with enough samples to be worth a look by the tiers (1 ms of CPU time:
 * the payback test needs more), filled by sp_agg_visit. */
typedef struct sampled_ops_s {
  uint32_t op[64];
  uint64_t samples[64];
  size_t n;
} sampled_ops_t;

static void visit_op(void *ctx, uint32_t op, uint64_t n)
{
  sampled_ops_t *so = ctx;
  long hz = ag_opts.num[AG_OPT_SAMPLE_HZ];
  if (op && op <= ag_table_count(ag_table) && n * 1000 >= (uint64_t)hz && so->n < 64 &&
      atomic_load(&ag_table_entry(ag_table, op - 1)->tier) == AG_TIER_COLD)
    so->op[so->n] = op, so->samples[so->n++] = n;
}

/* Growable arrays of store records, filled by sp_agg_visit. */
typedef struct samples_out_s {
  st_pc_rec_t *pcs;
  st_stack_rec_t *stacks;
  st_counter_rec_t *counters;
  size_t npcs, nstacks, ncounters, cap[3];
  sp_status_t st;
  int oom;
} samples_out_t;

/* The key of operator op (entry index + 1), or NULL for 0 and unknown operators. */
static const ag_sig_t *op_key(uint32_t op)
{
  return op && op <= ag_table_count(ag_table) ? &ag_table_entry(ag_table, op - 1)->key : NULL;
}

#define PUSH(o, arr, n, capi, rec)                                                           \
  do {                                                                                       \
    if ((o)->n == (o)->cap[capi]) {                                                          \
      size_t nc_ = (o)->cap[capi] ? 2 * (o)->cap[capi] : 64;                                 \
      void *p_ = realloc((o)->arr, nc_ * sizeof *(o)->arr);                                  \
      if (!p_) {                                                                             \
        (o)->oom = 1;                                                                        \
        break;                                                                               \
      }                                                                                      \
      (o)->arr = p_, (o)->cap[capi] = nc_;                                                   \
    }                                                                                        \
    (o)->arr[(o)->n++] = rec;                                                                \
  } while (0)

static void visit_pc(void *ctx, uint32_t op, const char *module, const char *symbol, uint64_t n)
{
  samples_out_t *o = ctx;
  const ag_sig_t *k = op_key(op);
  PUSH(o, pcs, npcs, 0, ((st_pc_rec_t){k, k ? sizeof *k : 0, module, symbol, n}));
}

static void visit_stack(void *ctx, uint32_t op, const char *folded, uint64_t n)
{
  samples_out_t *o = ctx;
  const ag_sig_t *k = op_key(op);
  PUSH(o, stacks, nstacks, 1, ((st_stack_rec_t){k, k ? sizeof *k : 0, folded, n}));
}

static void visit_counter(void *ctx, uint32_t op, int c, uint64_t v)
{
  samples_out_t *o = ctx;
  const ag_sig_t *k = op_key(op);
  if (c < o->st.ncounters)
    PUSH(o, counters, ncounters, 2, ((st_counter_rec_t){k, k ? sizeof *k : 0, o->st.counter_names[c], v}));
}

/* The run's sampling summary as a JSON object (on the writer: its CPU time is the writer's). */
static void sampling_json(const sp_status_t *st, char *buf, size_t len)
{
  static const char *const modes[] = {"off", "perf", "perf", "timer"};
  struct timespec cpu = {0, 0};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  int n = snprintf(buf, len,
                   "{\"mode\":\"%s\",\"event\":\"%s\",\"hz\":%d,\"stack_depth\":%d,"
                   "\"samples\":%llu,\"lost\":%llu,\"thinned\":%llu,\"stacks\":{\"walked\":%llu,"
                   "\"libunwind\":%llu},\"cost\":{\"delivery_ns\":%.0f,\"handler_ns\":%.0f,"
                   "\"writer_ns\":%.0f,\"stride\":%u,\"lockstep\":%d,\"budget\":%.4f,"
                   "\"writer_cpu_ms\":%.1f},"
                   "\"counters\":[",
                   modes[st->mode], st->event, st->hz, st->stack_depth,
                   (unsigned long long)st->samples, (unsigned long long)st->lost,
                   (unsigned long long)st->thinned, (unsigned long long)st->walked,
                   (unsigned long long)st->unwound, st->delivery_ns, st->handler_ns,
                   st->consumer_ns, st->stride,
                   st->lockstep, sample_budget(),
                   (double)cpu.tv_sec * 1e3 + (double)cpu.tv_nsec / 1e6);
  for (int i = 0; i < st->ncounters && n > 0 && (size_t)n < len; i++)
    n += snprintf(buf + n, len - (size_t)n, "%s\"%s\"", i ? "," : "", st->counter_names[i]);
  if (n > 0 && (size_t)n < len)
    n += snprintf(buf + n, len - (size_t)n, "],\"notes\":[");
  for (const char *p = st->notes; *p && n > 0 && (size_t)n + 8 < len;) {
    size_t l = strcspn(p, "\n");
    n += snprintf(buf + n, len - (size_t)n, "%s\"", p == st->notes ? "" : ",");
    for (size_t i = 0; i < l && (size_t)n + 4 < len; i++)
      buf[n++] = p[i] == '"' || p[i] == '\\' ? '\'' : p[i];
    n += snprintf(buf + n, len - (size_t)n, "\"");
    p += l + (p[l] == '\n');
  }
  if (n > 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, "]}");
}

/* The run's summary says why it was not sampled (top's footer: "not sampled: ..."): noted. */
static int unsampled_noted;

/* Writes the sampled profile so far (cumulative, like the counts); for a run that never sampled,
 * once, why (final: the run's last write, at an exit, _exit or exec). */
static void write_samples(int final)
{
  if (!agg) {
    int off = ag_opts.num[AG_OPT_SAMPLE_HZ] <= 0;
    if (unsampled_noted || (!off && !final))
      return; /* sampling starts on the writer's next step */
    sp_status_t st = {.mode = SP_OFF, .event = "off"};
    snprintf(st.notes, sizeof st.notes, "%s",
             off ? "OPJIT_SAMPLE_HZ=0" : "the program ended before the sampler started");
    char json[2048];
    sampling_json(&st, json, sizeof json);
    st_samples_t s = {json};
    int rc = store->run_samples(db, run_id, &s);
    if (rc)
      write_failed("cannot write the samples", rc);
    unsampled_noted = !rc;
    return;
  }
  samples_out_t o = {0};
  sp_status(&o.st);
  char json[2048];
  sampling_json(&o.st, json, sizeof json);
  sp_agg_visit(agg, &(sp_agg_visit_t){&o, NULL, visit_pc, visit_stack, visit_counter});
  if (!o.oom) {
    st_samples_t s = {json, o.pcs, o.npcs, o.stacks, o.nstacks, o.counters, o.ncounters};
    int rc = store->run_samples(db, run_id, &s);
    if (rc)
      write_failed("cannot write the samples", rc);
  }
  free(o.pcs), free(o.stacks), free(o.counters);
}

/* ---- JIT variants and events (on the writer thread) ------------------------------------- */

static ag_event_rec_t pending_events[512]; /* drained from the tiers, not yet written */
static size_t npending;

/* Writes every signature's variant and the events since the last successful write. */
static void write_variants(void)
{
#define AG_EV_NAME_(id, name) [AG_EV_##id] = name,
  static const char *const kinds[] = {ST_EVENT_KINDS(AG_EV_NAME_)};
#undef AG_EV_NAME_
  npending += ag_tier_events(pending_events + npending,
                             sizeof pending_events / sizeof *pending_events - npending);
  /* Only signatures the database already has: a row for one that turned hot since the last
   * flush would not find its signature (it waits for the next write). */
  uint32_t n = flushed_n;
  uint64_t *calls = calloc(n ? n : 1, sizeof *calls), *vcalls = calloc(n ? n : 1, sizeof *vcalls);
  st_variant_rec_t *v = calloc(n ? n : 1, sizeof *v);
  ag_persist_t *obj = calloc(n ? n : 1, sizeof *obj);
  uint32_t *vidx = calloc(n ? n : 1, sizeof *vidx);
  st_judge_pool_t *judges = calloc(n ? n : 1, sizeof *judges);
  uint32_t *revs = calloc(n ? n : 1, sizeof *revs);
  st_event_rec_t ev[512];
  size_t nv = 0, nev = 0;
  int rc = 0;
  if (!calls || !vcalls || !v || !obj || !vidx || !judges || !revs)
    goto out;
  ag_tcount_sum(calls, vcalls, n);
  char cpu_key[336]; /* what this run's kernels are stored under (machine.h) */
  object_key(cpu_key, sizeof cpu_key);
  for (uint32_t i = 0; i < n; i++) {
    ag_entry_t *e = ag_table_entry(ag_table, i);
    uint32_t t = atomic_load(&e->tier);
    int variant = t != AG_TIER_COLD && t != AG_TIER_NONE && calls[i];
    ag_persist_t *p = &obj[nv];
    if (!ag_tier_persist(i, p) && !variant)
      continue;
    if (!variant && !p->object && !p->drop)
      continue;
    /* A row without a status stores or drops the object only (a signature this run has not
     * called, or whose variant has gone). */
    int loaded = strcmp(p->origin, "loaded") == 0;
    /* The judge's rounds, when they changed since the last write (not beside a drop, which
     * deletes them, nor without the symbol the store keeps them under) */
    int judged = !p->drop && p->symbol[0] && ag_tier_judge_pool(i, &judges[nv], &revs[nv]);
    const char *status = variant ? ag_tier_status(i) : NULL;
    /* A placed kernel's CPU is this machine's object key, and so is a crashed one's (what
     * st_crashed asks by, as st_crash records it); a compiled one's, the JIT's CPU. */
    int keyed = loaded || (status && !strcmp(status, "crashed"));
    v[nv] = (st_variant_rec_t){&e->key, sizeof e->key, status,
                               /* the LLVM the JIT was built with: what a warm start checks
                                  a stored object against, with no LLVM loaded */
                               JT_GENERATOR_VERSION, OPJIT_LLVM_VERSION,
                               keyed ? cpu_key : ag_tier_cpu(),
                               atomic_load(&e->compile_ns), vcalls[i], atomic_load(&e->vtimed),
                               atomic_load(&e->vtimed_ns), p->origin,
                               p->pre_calls, cpu_key, p->object, p->object_len, p->symbol,
                               p->checksum, p->drop, judged ? &judges[nv] : NULL,
                               variant ? ag_tier_judge_ratio(i) : 0};
    vidx[nv++] = i;
  }
  for (size_t i = 0; i < npending; i++) {
    if (pending_events[i].index >= n)
      continue;
    ag_entry_t *e = ag_table_entry(ag_table, pending_events[i].index);
    ev[nev++] = (st_event_rec_t){&e->key, sizeof e->key, pending_events[i].time_ns,
                                 kinds[pending_events[i].kind], pending_events[i].detail};
  }
  if (!nv && !nev)
    goto out;
  rc = store->run_variants(db, run_id, v, nv, ev, nev);
  if (rc) {
    write_failed("cannot write the JIT variants", rc);
  } else { /* keep the events of signatures not in the database yet */
    size_t kept = 0;
    for (size_t i = 0; i < npending; i++)
      if (pending_events[i].index >= n)
        pending_events[kept++] = pending_events[i];
    npending = kept;
  }
out:
  for (size_t i = 0; i < nv; i++) {
    if (rc == 0 && v[i].judge)
      ag_tier_judge_stored(vidx[i], revs[i]);
    ag_tier_persisted(vidx[i], &obj[i], rc == 0);
  }
  free(calls), free(vcalls), free(v), free(obj), free(vidx), free(judges), free(revs);
}

/* ---- the run over time (on the writer thread) ------------------------------------------ */

/* The running totals series_note hands the series, grown with the signature table. */
typedef struct series_scratch_s {
  uint64_t *calls, *vcalls, *samples, outside;
  uint32_t n, cap;
} series_scratch_t;
static series_scratch_t scratch;

static void series_op(void *ctx, uint32_t op, uint64_t n)
{
  series_scratch_t *x = ctx;
  if (!op)
    x->outside = n;
  else if (op <= x->n)
    x->samples[op - 1] = n;
}

/* Adds this tick's running totals (calls, variant calls, samples per operator) to the run's
 * series; first makes the series, whose first interval lasts interval_ms. Called with db_mu
 * held, so a fork never sees it half-changed. */
static void series_note(long interval_ms)
{
  if (!series && !(series = ag_series_new((uint64_t)interval_ms * 1000000u)))
    return;
  uint32_t n = ag_table_count(ag_table);
  if (n > scratch.cap) {
    uint64_t *c = realloc(scratch.calls, n * sizeof *c);
    if (c)
      scratch.calls = c;
    uint64_t *v = c ? realloc(scratch.vcalls, n * sizeof *v) : NULL;
    if (v)
      scratch.vcalls = v;
    uint64_t *p = v ? realloc(scratch.samples, n * sizeof *p) : NULL;
    if (!p)
      return;
    scratch.samples = p, scratch.cap = n;
  }
  scratch.n = n, scratch.outside = 0;
  memset(scratch.samples, 0, n * sizeof *scratch.samples);
  ag_tcount_sum(scratch.calls, scratch.vcalls, n);
  if (agg)
    sp_agg_visit(agg, &(sp_agg_visit_t){&scratch, series_op, NULL, NULL, NULL});
  int64_t t = ag_realtime_ns() - run_start_ns;
  ag_series_tick(series, t > 0 ? (uint64_t)t : 0, n, scratch.calls, scratch.vcalls,
                 scratch.samples, scratch.outside);
}

/* Replaces the run's series in the database: the signatures it has rows for, the rest, and the
 * samples outside operators when the run is sampled. */
static void write_series(void)
{
  if (!series || !ag_series_count(series))
    return;
  uint32_t n = ag_series_rows(series) < flushed_n ? ag_series_rows(series) : flushed_n;
  st_series_rec_t *rows = calloc(n + 2, sizeof *rows);
  if (!rows)
    return;
  size_t m = 0;
  for (uint32_t i = 0; i < n; i++) {
    const ag_series_row_t *r = ag_series_row(series, i);
    if (r)
      rows[m++] = (st_series_rec_t){&ag_table_entry(ag_table, i)->key, sizeof(ag_sig_t), 0,
                                    r->calls, r->vcalls, r->samples};
  }
  const ag_series_row_t *rest = ag_series_rest(series);
  if (rest)
    rows[m++] = (st_series_rec_t){.rest = 1, .calls = rest->calls, .vcalls = rest->vcalls,
                                  .samples = rest->samples};
  if (sampling)
    rows[m++] = (st_series_rec_t){.samples = ag_series_outside(series)->samples};
  int rc = store->run_series(db, run_id, (int64_t)ag_series_interval(series), run_start_ns,
                             ag_series_count(series), rows, m);
  if (rc)
    write_failed("cannot write the run's series", rc);
  free(rows);
}

/* One writer step: open what is not open yet, then flush; the last step also ends the run.
 * Returns 1 when a transient error (locked, full) left work undone. */
static int writer_step(int final)
{
  pthread_mutex_lock(&db_mu);
  store_retry = 0;
  if (!store_dead && !db)
    open_store();
  if (!store_dead && db && !run_id)
    begin_run();
  if (!store_dead && db && run_id) {
    flush();
    if (!store_dead && !store_retry)
      write_samples(final);
    if (!store_dead && !store_retry)
      write_variants();
    if (!store_dead && !store_retry)
      write_series();
    if (!store_dead && ag_machine_save(store, db, final) == ST_ECORRUPT)
      write_failed("cannot store the machine model", ST_ECORRUPT);
    if (final && !store_dead && !store_retry) {
      int rc = store->run_end(db, run_id, ag_realtime_ns(), end_status);
      if (rc)
        write_failed("cannot record the end of the run", rc);
    }
  }
  pthread_mutex_unlock(&db_mu);
  return !store_dead && store_retry;
}

/* The final step retries transient errors while the exit wait allows (another process of the
 * same program may be writing its own final step right now). The series notes the last
 * totals in an interval of tick_ms when none was noted yet. */
static void final_step(long tick_ms)
{
  if (sampling)
    sp_stop();
  ag_agent_keep_off_host(); /* the host's thread waits for it: its CPU is free again */
  pthread_mutex_lock(&db_mu); /* fork waits for the aggregation to be consistent */
  if (sampling)
    drain_samples();
  series_note(tick_ms);
  pthread_mutex_unlock(&db_mu);
  uint64_t deadline = ag_now_ns() + (uint64_t)ag_opts.num[AG_OPT_EXIT_WAIT_MS] * 1000000u * 3 / 4;
  while (writer_step(1) && ag_now_ns() < deadline)
    nanosleep(&(struct timespec){0, 20 * 1000000}, NULL);
  ag_fleet_final();
}

/* What the database stores for this CPU's machine model (machine.h), read on the writer's
 * connection (one of the model's own cost ~1.5 ms of CPU beside the host) into *rec: 1, 0 when
 * none is stored, -1 when it was not read (no connection, an error: the model's thread reads
 * it). */
static int machine_read(st_machine_t *rec)
{
  int have = -1;
  pthread_mutex_lock(&db_mu);
  if (db && !store_dead) {
    int rc = store->machine_load(db, run_info()->cpu_key, rec);
    have = rc == ST_OK ? 1 : rc == ST_ENOENT ? 0 : -1;
  }
  pthread_mutex_unlock(&db_mu);
  return have;
}

/* The writer: drains the sampler every tick (sized so no ring overflows: 250 ms at the default
 * rate), rescans threads every 5 ticks, and writes to the database every OPJIT_FLUSH_MS. */
static void *writer_main(void *arg)
{
  (void)arg;
  ag_agent_thread_begin("opjit-writer");
  ag_agent_keep_off_host();
  for (int ms = 0; writer_fault == WRITER_LATE && !ending() && ms < 60000; ms++)
    usleep(1000);
  if (writer_fault == WRITER_STALL) {
    struct timespec dl = ag_deadline_after_us(CLOCK_MONOTONIC, 60 * 1000000L);
    pthread_mutex_lock(&warm_mu);
    while (warm_pending && pthread_cond_timedwait(&warm_cond, &warm_mu, &dl) == 0)
      ;
    pthread_mutex_unlock(&warm_mu);
  }
  pthread_mutex_lock(&warm_mu);
  int warm = warm_pending && !warm_taken;
  warm_taken |= warm;
  pthread_mutex_unlock(&warm_mu);
  if (warm) {
    warm_finish(1, 1);
  } else {
    record_early(); /* a host thread runs the warm start (warm_take_over), or none is due */
    pthread_mutex_lock(&warm_mu);
    int due = warm_pending; /* (its warm_finish lets JIT code run) */
    pthread_mutex_unlock(&warm_mu);
    if (!due) /* the database open and the run recorded, as far as they could be */
      ag_tier_hold(AG_HOLD_NONE);
    warm_fleet();
  }
  ag_agent_keep_off_host(); /* again: the first call registers its thread after starting this */
  /* A program that ended before the writer got here left nothing to sample: its exit does not
   * wait for the sampler to start (libunwind loaded, every thread armed) and stop again. */
  pthread_mutex_lock(&mu);
  int ended = stop;
  pthread_mutex_unlock(&mu);
  if (!loader_unsafe) {
    static st_machine_t rec; /* large: not on the writer's stack */
    int have = ag_hot_calls ? machine_read(&rec) : -1; /* before loader_mu: no SQLite in it */
    pthread_mutex_lock(&loader_mu);
    if (!ended)
      start_sampling();
    ag_fleet_start();
    if (ag_hot_calls) /* the only mode that weighs the model */
      ag_machine_start(run_info()->cpu_key, &rec, have);
    pthread_mutex_unlock(&loader_mu);
  }
  /* A ring holds 256 samples: drain it twice per fill at the sampling rate, at most 4x/s. */
  long flush_ms = ag_opts.num[AG_OPT_FLUSH_MS], hz = ag_opts.num[AG_OPT_SAMPLE_HZ];
  long tick_ms = sampling ? 128000 / (hz > 0 ? hz : 1) : flush_ms;
  tick_ms = tick_ms < 20 ? 20 : tick_ms > 250 ? 250 : tick_ms;
  if (tick_ms > flush_ms)
    tick_ms = flush_ms;
  uint64_t next_flush = ag_now_ns() + (uint64_t)flush_ms * 1000000u;
  /* SCHED_BATCH: a tick's wake-up no longer preempts a host thread (whose partners may be
   * waiting for it at a barrier: a graph host's, after every node); the writer waits for a free
   * core or the running thread's slice end, keeping its fair share (at nice 19 a fork child's
   * final write missed its deadline, 1 test run in 3 on a loaded machine). A compile thread it
   * starts later (for what its samples made hot) inherits it and runs beside the host alike.
   * Not once stop_writer has asked for the final step (it made the writer a normal thread). */
  pthread_mutex_lock(&mu);
  if (!stop)
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &(struct sched_param){0});
  for (unsigned ticks = 1;; ticks++) {
    struct timespec dl = ag_deadline_after(CLOCK_MONOTONIC, tick_ms);
    while (!stop && pthread_cond_timedwait(&cond, &mu, &dl) != ETIMEDOUT)
      ;
    int final = stop;
    pthread_mutex_unlock(&mu);
    if (final) {
      final_step(tick_ms);
      return NULL;
    }
    ag_tick_refine();
    if (sampling) {
      pthread_mutex_lock(&db_mu); /* fork waits for the aggregation to be consistent */
      drain_samples();
      sampled_ops_t so = {0};
      if (ag_hot_calls)
        sp_agg_visit(agg, &(sp_agg_visit_t){&so, visit_op, NULL, NULL, NULL});
      series_note(tick_ms);
      pthread_mutex_unlock(&db_mu);
      for (size_t i = 0; i < so.n; i++)
        ag_tier_sampled(ag_table_entry(ag_table, so.op[i] - 1),
                        (double)so.samples[i] * 1e9 / (double)hz);
      if (ticks % 5 == 0) {
        pthread_mutex_lock(&loader_mu);
        sp_rescan();
        pthread_mutex_unlock(&loader_mu);
      }
    } else {
      pthread_mutex_lock(&db_mu);
      series_note(tick_ms);
      pthread_mutex_unlock(&db_mu);
    }
    if (ag_now_ns() >= next_flush) {
      ag_agent_keep_off_host();
      ag_bg_begin(); /* its SQLite work takes a CPU too (background.h) */
      writer_step(0);
      ag_bg_end();
      next_flush = ag_now_ns() + (uint64_t)flush_ms * 1000000u;
    }
    pthread_mutex_lock(&mu);
  }
}

/* Asks the writer for its final step (recording status) and waits for it, at most
 * OPJIT_EXIT_WAIT_MS. With try set (_exit, possibly from a signal handler that interrupted a
 * thread holding the writer's mutex) the wait for the mutex counts in that bound too: the
 * writer holds it between its ticks, and a writer without a CPU on a loaded machine held it
 * long enough that a fork child's _exit, which gave up at once then, lost the child's run.
 * Returns 1 when the writer has finished. */
static int stop_writer(const char *status, int try)
{
  long ms = ag_opts.num[AG_OPT_EXIT_WAIT_MS];
  struct timespec dl = ag_deadline_after(CLOCK_REALTIME, ms);
  atomic_store(&final_asked, 1); /* an exec or _exit too: the warm start places nothing now */
  if (try ? pthread_mutex_timedlock(&mu, &dl) != 0 : pthread_mutex_lock(&mu) != 0)
    return 0;
  int running = writer_running;
  stop = 1;
  end_status = status;
  /* This thread now waits for the writer's final step: wake it as a normal thread (a
   * SCHED_BATCH wake-up waits for a free core or a slice end: 2-18 ms at exit on a loaded
   * machine). Not from _exit's path: it may run in a signal handler. */
  if (running && !try)
    pthread_setschedparam(writer, SCHED_OTHER, &(struct sched_param){0});
  pthread_cond_signal(&cond);
  pthread_mutex_unlock(&mu);
  if (!running)
    return 1;
  if (pthread_timedjoin_np(writer, NULL, &dl) == 0) {
    writer_running = 0;
    return 1;
  }
  ag_log(AG_LOG_WARN, "the final database write did not finish within %ld ms; %s", ms,
         atomic_load(&flushed_once) ? "the run keeps its last periodic flush"
                                    : "none of the run's calls were recorded");
  return 0;
}

/* The process this agent state belongs to: a vfork child shares the parent's memory and must
 * not stop the parent's writer from its exec or _exit. */
static pid_t active_pid;

static int ours(void) { return ag_is_active() && getpid() == active_pid; }

AG_EXPORT int opjit_settle(long timeout_ms)
{
  if (!ours() || ag_opts.num[AG_OPT_MODE] != AG_MODE_JIT)
    return -1;
  long ms = timeout_ms > 0 ? timeout_ms : 0;
  uint64_t t0 = ag_now_ns();
  warm_wait_us(ms * 1000); /* the warm start queues what calls made hot meanwhile */
  long left = ms - (long)((ag_now_ns() - t0) / 1000000u);
  /* a call too long for the duel is decided on the model's peak (tier.c, library_wins) */
  if (!ag_machine_wait(left > 0 ? left : 0))
    return 1;
  left = ms - (long)((ag_now_ns() - t0) / 1000000u);
  return ag_tier_settle(left > 0 ? left : 0);
}

/* exit() has begun: no duel or check starts, and those running end at their next round, before
 * the host's libraries run their destructors. They call the library no more (original_once
 * looks at the exit before each call) and end in milliseconds, but a compile thread without a
 * CPU on a loaded machine takes longer: the exit waits AG_EXIT_DUEL_WAIT_MS from its first
 * step (this runs twice: agent_atexit), and a call left running past that meets a finalised
 * library. */
static void exit_begins(void)
{
  static _Atomic uint64_t until;
  uint64_t none = 0;
  atomic_store(&ag_exiting, 1);
  atomic_compare_exchange_strong(&until, &none, ag_now_ns() + AG_EXIT_DUEL_WAIT_MS * 1000000ull);
  while (atomic_load(&ag_duels) && ag_now_ns() < atomic_load(&until))
    usleep(1000);
}

static void agent_atexit(void)
{
  exit_begins(); /* again, for an activation that came before main (a library's constructor) */
  if (!ours())
    return;
  ag_tcount_book_held_all(0); /* every thread's: no fold follows exit() */
  int done = stop_writer("exited", 0);
  ag_summary_print(done ? run_id : 0, run_start_ns); /* OPJIT_SUMMARY: what the writer stored */
}

/* Starts the writer thread with every signal blocked (it must never take a host signal).
 * Called with activate_mu held. */
static void start_writer(void)
{
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_mutex_lock(&mu);
  stop = 0;
  writer_running = ag_agent_thread_create(&writer, NULL, writer_main, NULL) == 0;
  pthread_mutex_unlock(&mu);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!writer_running)
    ag_log_once(AG_LOG_ERROR, "cannot start the writer thread: calls are counted but not recorded");
}

void ag_before_exec(void)
{
  if (!ours())
    return;
  ag_tcount_book_held_all(0);
  stop_writer("exec", 0);
  sp_stop(); /* even when the writer timed out: no event may signal the new image, */
  sp_discard_pending(); /* nor a signal stay pending into it (its action would kill it) */
}

void ag_before_exit(void)
{
  if (!ours())
    return;
  ag_tcount_book_held_all(1); /* _exit: perhaps from a signal handler */
  atomic_store(&ag_exiting, 2); /* no coming back: nothing is queued or duelled now */
  stop_writer("exited", 1);
}

void ag_after_failed_exec(void)
{
  if (!ours())
    return;
  atomic_store(&final_asked, 0); /* a warm start skipped meanwhile stays skipped */
  pthread_mutex_lock(&activate_mu);
  if (!writer_running)
    start_writer(); /* the run goes on (sampling too); its next final step records the end */
  pthread_mutex_unlock(&activate_mu);
}

/* Whether path (a file or a folder) can be changed by a user other than this process's (or
 * root): owned by another, or writable by group or others (a folder with the sticky bit only
 * lets each user replace their own files). Sets *what to the reason. */
static int others_can_write(const char *path, int folder, const char **what)
{
  struct stat st;
  if (stat(path, &st) != 0)
    return 0; /* nothing there: nothing to trust */
  if (st.st_uid != geteuid() && st.st_uid != 0)
    return *what = "is owned by another user", 1;
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(folder && (st.st_mode & S_ISVTX)))
    return *what = "can be written by other users", 1;
  return 0;
}

/* The database holds executable kernels: whoever can write it or replace it can run code in
 * this program. A database (or its folder) that others can change starts nothing from its
 * profile: no stored kernel is placed, with one warning; the run is still recorded. */
static int db_trusted(const char *dbpath)
{
  char dir[PATH_MAX];
  const char *what = NULL, *slash = strrchr(dbpath, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - dbpath) + (slash == dbpath) : 1,
           slash ? dbpath : ".");
  const char *which = others_can_write(dbpath, 0, &what) ? dbpath
                      : others_can_write(dir, 1, &what) ? dir
                                                        : NULL;
  if (!which)
    return 1;
  ag_log_once(AG_LOG_WARN, "%s %s: its stored kernels are code, so none is loaded (make it "
                           "yours and private: chmod go-w, or start an empty database)",
              which, what);
  return 0;
}

int ag_place_stored(ag_entry_t *e)
{
  st_hot_t h;
  const st_api_t *api = NULL;
  int found = -1;
  pthread_mutex_lock(&db_mu); /* the lookup only: the placing needs no database */
  if (ag_opts.num[AG_OPT_WARM] && db && !store_dead &&
      db_trusted(db_path) && /* as the warm start's: asked at each placing */
      (found = ag_warm_stored(store, db, run_info(), e, &h)) >= 0)
    api = store;
  pthread_mutex_unlock(&db_mu);
  int placed = found == 1 ? ag_warm_place(e, &h) : -1;
  if (api)
    api->hot_free(&h);
  return placed;
}

int ag_crashed_before(ag_entry_t *e, char *why, size_t len)
{
  int64_t run = 0;
  pthread_mutex_lock(&db_mu);
  if (db && !store_dead) {
    collect_crashes();
    char cpu_key[336]; /* what this machine's kernels are stored under (machine.h) */
    object_key(cpu_key, sizeof cpu_key);
    if (store->crashed(db, &e->key, sizeof e->key, cpu_key, JT_GENERATOR_VERSION, &run))
      run = 0; /* unknown: as before the crash hook, the kernel is tried */
  }
  pthread_mutex_unlock(&db_mu);
  if (run)
    snprintf(why, len, "its kernel by generator %d crashed a program on this machine (recorded "
             "in run %lld): the original serves until the generator changes",
             JT_GENERATOR_VERSION, (long long)run);
  return run != 0;
}

/* In jit mode, on the writer before JIT code can run: the crashes earlier processes left are
 * recorded, and this run is, so that a crash in its JIT code finds its run (crash.h). */
static void record_early(void)
{
  if (!ag_hot_calls)
    return;
  pthread_mutex_lock(&db_mu);
  if (!store_dead && !db)
    open_store();
  collect_crashes();
  if (!store_dead && db && !run_id)
    begin_run();
  else if (!store_dead && db && warm_ns && store->run_warm(db, run_id, warm_ns))
    ag_log(AG_LOG_DEBUG, "cannot record what the warm start cost");
  pthread_mutex_unlock(&db_mu);
}

/* Records the crashes other processes left beside the database since the last look (crash.h):
 * each crashed run, and for a fault inside a JIT kernel, its signature's stored object dropped
 * and the signature kept on the original from this run on (until the generator changes). At
 * the run's start, and before each signature's kernel is placed or compiled (a process that
 * crashed meanwhile is learnt then); db_mu held. */
static void collect_crashes(void)
{
  if (!db || store_dead) /* the crash files wait for a run that can record them */
    return;
  ag_crash_rec_t recs[16];
  int n = ag_crash_collect(db_path, recs, 16);
  char cpu_key[336]; /* what this machine's kernels are stored under (machine.h) */
  object_key(cpu_key, sizeof cpu_key);
  for (int i = 0; i < n; i++) {
    const ag_crash_rec_t *r = &recs[i];
    char detail[AG_REASON_LEN];
    if (r->in_jit == AG_CRASH_KERNEL)
      snprintf(detail, sizeof detail, "crashed in %s (%s at +0x%llx of its %llu bytes, run %lld, "
               "pid %d): its stored kernel is dropped and the original serves until the "
               "generator changes", r->name, ag_crash_signame(r->signo),
               (unsigned long long)(r->pc - r->lo), (unsigned long long)(r->hi - r->lo),
               (long long)r->run_id, (int)r->pid);
    else if (r->in_jit == AG_CRASH_TRIAL)
      snprintf(detail, sizeof detail, "crashed while its kernel was compiled or tried (%s at %s, "
               "run %lld, pid %d): the original serves until the generator changes",
               ag_crash_signame(r->signo), r->name, (long long)r->run_id, (int)r->pid);
    else /* opjit's own code is libopjit.so and its modules (libopjit-store.so, ...) */
      snprintf(detail, sizeof detail, "%s at %s, outside JIT code: %s", ag_crash_signame(r->signo),
               r->name, strncmp(r->name, "libopjit", 8) ? "the program's own fault"
                                                        : "in opjit's own code, a bug to report");
    st_crash_t c = {r->run_id, r->pid, r->time_ns, r->in_jit ? &r->key : NULL, sizeof r->key,
                    r->generator, OPJIT_LLVM_VERSION, cpu_key, detail};
    st_crash_result_t res;
    int rc = store_dead ? ST_EIO : store->crash(db, &c, &res); /* dead: the rest unrecorded */
    if (rc == ST_ECORRUPT)
      write_failed("cannot record a crash", rc); /* the rest are not written either */
    else if (rc && !store_dead)
      ag_log(AG_LOG_WARN, "cannot record a crash of run %lld: %s", (long long)r->run_id,
             store->errstr(rc));
    else if (!rc)
      ag_log(AG_LOG_WARN, "an earlier process on this database %s%s", r->in_jit ? "" : "died of ",
             detail);
    ag_entry_t *e = r->in_jit && r->generator == JT_GENERATOR_VERSION && ag_table
                        ? ag_table_get(ag_table, &r->key)
                        : NULL;
    if (e) /* unrecorded, the crash still keeps this run on the original */
      ag_tier_crashed(e, rc || !res.recorded, "%s", detail);
  }
}

/* Before the first counted call runs and before the writer starts (so this thread may use
 * the writer's store and database): opens the database and starts from the profile. On the
 * writer thread it first records the crashes left beside the database and begins the run.
 * With network set (the writer itself) the fleet's profile is fetched and placed too; a host
 * thread leaves that to the writer (warm_fleet), or, without one, to no one. */
static void warm_start(int writer_thread, int network)
{
  char dbpath[PATH_MAX];
  warm_done = 1;
  /* A program that began to end (exit, _exit, exec) first calls no kernel it would place: its
   * exit waited for the heap's pages, the profile's read and the placing (5-10 ms of a short
   * program's), and for the fleet's fetch. Asked again before each of those steps. */
  int ended = ending();
  int fleet = network && !ended && ag_fleet_fetch(run_info()); /* OPJIT_FLEET's profile */
  ag_warm_t w = {0};
  /* No profile yet: the writer creates the database, off this thread. */
  int local = !ag_opts_db_path(&ag_opts, env_get, dbpath, sizeof dbpath) &&
              access(dbpath, F_OK) == 0 && db_trusted(dbpath);
  if (!local && !fleet)
    return;
  if (local) {
    ended |= ending();
    void *heap = ended ? NULL : ag_heap_warm_begin(ag_heap_warm_size(dbpath)); /* heap.h */
    pthread_mutex_lock(&db_mu);
    if (!store_dead && !db)
      open_store();
    if (writer_thread)
      collect_crashes(); /* before the profile: a crashed kernel is not placed */
    if (writer_thread && !store_dead && db && !run_id)
      begin_run(); /* before any kernel is placed: a crash in one finds its run recorded */
    ended |= ending(); /* at the profile's read, once more */
    if (db && !ended && !store_damaged)
      ag_warm_start(store, db, run_info(), &w);
    if (w.damaged)
      write_failed("cannot read this program's profile", ST_ECORRUPT);
    pthread_mutex_unlock(&db_mu);
    ag_heap_warm_end(heap);
  }
  if (ended) {
    ag_log(AG_LOG_INFO, "the program ended before the warm start: no stored kernel placed");
    return;
  }
  if (network && !ending()) /* what it would place, nothing would call */
    ag_fleet_warm(&w);
  warm_ns = (int64_t)(ag_now_ns() - first_call_ns);
  if (w.complete) { /* after the warm start's figure: its kernels serve already */
    pthread_mutex_lock(&db_mu);
    if (db && !store_dead)
      ag_warm_read_shelf(store, db, run_info());
    pthread_mutex_unlock(&db_mu);
  }
  if (w.runs)
    ag_log(AG_LOG_INFO, "warm start from %lld runs, done %.2f ms after the first call: %d "
                        "kernels loaded, %d queued, %d invalidated", (long long)w.runs,
           (double)warm_ns / 1e6, w.loaded, w.queued, w.invalidated);
}

/* Runs the warm start, lets hot signatures queue again (compile threads load LLVM meanwhile), on
 * the writer thread records the run (creating the database takes tens of milliseconds of
 * fsyncs), then lets JIT code run, and wakes whoever waits for the warm start. */
static void warm_finish(int writer_thread, int network)
{
  warm_start(writer_thread, network);
  ag_tier_hold(writer_thread ? AG_HOLD_RUN : AG_HOLD_NONE);
  if (writer_thread)
    record_early(); /* before the first compile runs its kernel */
  ag_tier_hold(AG_HOLD_NONE);
  pthread_mutex_lock(&warm_mu);
  warm_pending = 0;
  atomic_store(&warm_untaken, 0);
  pthread_cond_broadcast(&warm_cond);
  pthread_mutex_unlock(&warm_mu);
}

/* A host thread's look (ag_call_pick) while the warm start is pending: when the writer has not
 * begun it WARM_TAKE_OVER_MS after the first call (3-5 ms is usual), it has no CPU (say the host
 * thread runs SCHED_FIFO and every other CPU is taken: it would wait for the run's end, every
 * call on the original), and this thread runs the warm start itself, as the writer would have,
 * once: all of it but the fleet's fetch (up to OPJIT_FLEET_WAIT_MS on the network, inside the
 * host's call), which the writer does when it runs (warm_fleet). */
static void warm_take_over(void)
{
  if (writer_fault == WRITER_LATE || ag_now_ns() - first_call_ns < WARM_TAKE_OVER_MS * 1000000ull)
    return;
  const char *named = ag_opts.str[AG_OPT_FLEET];
  pthread_mutex_lock(&warm_mu);
  int take = warm_pending && !warm_taken;
  warm_taken |= take;
  fleet_left |= take && named && *named;
  atomic_store(&warm_untaken, 0);
  pthread_mutex_unlock(&warm_mu);
  if (take) {
    ag_log(AG_LOG_INFO, "the writer has not begun the warm start %d ms after the first call: "
           "a host thread runs it", WARM_TAKE_OVER_MS);
    if (named && *named)
      ag_log(AG_LOG_INFO, "the fleet's part of the warm start is left to the writer: a host "
                          "thread does not wait on the network");
    warm_finish(1, 0);
  }
}

/* The writer, after a host thread took the warm start over: once that warm start is done, the
 * fleet's part it left (fleet_left): the fleet's kernels placed for what the local profile did
 * not serve, and what the fleet's profile makes hot queued. */
static void warm_fleet(void)
{
  pthread_mutex_lock(&warm_mu);
  int left = fleet_left;
  fleet_left = 0;
  while (left && warm_pending)
    pthread_cond_wait(&warm_cond, &warm_mu);
  pthread_mutex_unlock(&warm_mu);
  if (!left || ending() || !ag_fleet_fetch(run_info()))
    return; /* ending: nothing would call what it places (warm_start) */
  ag_warm_t w = {0};
  ag_fleet_warm(&w);
  ag_log(AG_LOG_INFO, "the fleet's part of the warm start, on the writer: %d kernels loaded, %d "
                      "queued", w.loaded, w.queued);
}

/* Waits until the warm start is done, us microseconds at most; past WARM_TAKE_OVER_MS after
 * the first call, this thread runs a warm start the writer has not begun (warm_take_over). */
static void warm_wait_us(long us)
{
  uint64_t now = ag_now_ns(), over = first_call_ns + WARM_TAKE_OVER_MS * 1000000ull;
  long until_over = now < over ? (long)((over - now) / 1000u) + 1 : 0;
  struct timespec dl = ag_deadline_after_us(CLOCK_MONOTONIC, until_over < us ? until_over : us);
  for (int round = 0; round < 2; round++) {
    pthread_mutex_lock(&warm_mu);
    while (warm_pending && pthread_cond_timedwait(&warm_cond, &warm_mu, &dl) == 0)
      ;
    int pending = warm_pending;
    pthread_mutex_unlock(&warm_mu);
    if (!pending || until_over >= us)
      return;
    warm_take_over(); /* the writer's time is up: unless it began, this thread runs it */
    dl = ag_deadline_after_us(CLOCK_MONOTONIC, us - until_over);
  }
}

void ag_warm_wait(long ms) { warm_wait_us(ms * 1000); }

/* Whether the warm start may find a profile: the database is there, or a fleet is named (one
 * access(2) on the host thread). */
static int profile_may_exist(void)
{
  char dbpath[PATH_MAX];
  const char *fleet = ag_opts.str[AG_OPT_FLEET];
  return (fleet && *fleet) ||
         (!ag_opts_db_path(&ag_opts, env_get, dbpath, sizeof dbpath) && access(dbpath, F_OK) == 0);
}

/* The TSC as the calls' clock (agent.h, ag_tick), where CPUID says it is invariant
 * (ag_machine_tsc_invariant), measured against CLOCK_MONOTONIC: first over the first activation
 * (TICK_CALIB_NS at least), then by the writer over the run so far. */
#define TICK_CALIB_NS 100000 /* the first measure's span: its reads' error within ~0.1 % */

/* A TSC read and the time it was taken: of three tries, the one whose clock read two TSC reads
 * bracket most closely (a thread preempted between them would skew the scale). */
static void tick_pair(uint64_t *tsc, uint64_t *ns)
{
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 3; i++) {
    _mm_lfence();
    uint64_t a = __rdtsc();
    uint64_t t = ag_now_ns();
    _mm_lfence();
    uint64_t b = __rdtsc();
    if (b - a < best)
      best = b - a, *tsc = a + (b - a) / 2, *ns = t;
  }
}

/* A scale is never 0 once set: 0 says "no TSC" (ag_tick). */
static void tick_set_scale(uint64_t tsc, uint64_t ns)
{
  if (tsc <= tick_tsc0 || ns <= tick_ns0)
    return;
  uint64_t scale = (uint64_t)(((unsigned __int128)(ns - tick_ns0) << 32) / (tsc - tick_tsc0));
  if (scale)
    atomic_store_explicit(&ag_tick_scale, scale, memory_order_relaxed);
}

/* Before the first activation: the measure's start (a fork child keeps its parent's clock). */
static void tick_start(void)
{
  if (atomic_load_explicit(&ag_tick_scale, memory_order_relaxed) || tick_ns0 ||
      !ag_machine_tsc_invariant())
    return;
  tick_pair(&tick_tsc0, &tick_ns0);
}

/* ... and its end, before AG_LIVE: the TSC becomes the clock with its scale. */
static void tick_finish(void)
{
  if (atomic_load_explicit(&ag_tick_scale, memory_order_relaxed) || !tick_ns0)
    return;
  uint64_t tsc, ns;
  do
    tick_pair(&tsc, &ns);
  while (ns - tick_ns0 < TICK_CALIB_NS);
  tick_set_scale(tsc, ns);
}

void ag_tick_refine(void)
{
  if (!atomic_load_explicit(&ag_tick_scale, memory_order_relaxed))
    return;
  uint64_t tsc, ns;
  tick_pair(&tsc, &ns);
  tick_set_scale(tsc, ns);
}

int ag_activate(void)
{
  pthread_mutex_lock(&activate_mu);
  if (ag_is_active()) {
    pthread_mutex_unlock(&activate_mu);
    return 0;
  }
  int rc = -1;
  tick_start();
  if (!ag_table) {
    uint32_t cap = (uint32_t)ag_opts.num[AG_OPT_MAX_SIGS];
    if (!(ag_table = ag_table_new(cap, NULL)) || ag_tcount_init(ag_table, cap)) {
      ag_log_once(AG_LOG_ERROR, "out of memory for the signature table: calls are not counted");
      ag_table_free(ag_table);
      ag_table = NULL;
      goto out;
    }
  }
  run_start_ns = ag_realtime_ns();
  first_call_ns = ag_now_ns();
  active_pid = getpid();
  /* The handler registered at load time runs when the loader finalises libopjit.so, among the
   * libraries' destructors and in the loader's order (under TSan, after every other one). One
   * registered now, after the loader's own handler (main's first call), runs before it, so
   * before every destructor: no duel or check may call a finalised library. (A first call from
   * a library's constructor, before main, registers it too early: the load-time order stands.) */
  static int exit_watched;
  if (!exit_watched)
    exit_watched = atexit(exit_begins) == 0;
  /* The warm start runs on the writer thread; the first call waits for it OPJIT_WARM_WAIT_US
   * at most, counted from the call. By default it does not wait: loading the store, opening
   * the database, recording the run, reading the profile and placing its kernels take 3-5 ms,
   * so any shorter wait is the host's time lost; its calls run the original meanwhile. */
  int warm = ag_hot_calls && ag_opts.num[AG_OPT_WARM] && !warm_done;
  pthread_mutex_lock(&warm_mu);
  warm_pending = warm;
  warm_taken = 0;
  pthread_mutex_unlock(&warm_mu);
  /* Without a profile there is nothing to decide: hot signatures are queued at once (their
   * compiles load LLVM meanwhile), only JIT code waits for the run to be recorded. */
  if (warm)
    ag_tier_hold(profile_may_exist() ? AG_HOLD_QUEUE : AG_HOLD_RUN);
  else if (ag_hot_calls) /* (a fork child's) its compiles and placings wait for its writer */
    ag_tier_hold(AG_HOLD_RUN);
  if (ag_hot_calls)
    ag_crash_install(); /* before any JIT code can run */
  atomic_store(&warm_untaken, warm); /* before a writer can take the warm start and clear it */
  start_writer();
  if (!warm && !writer_running)
    ag_tier_hold(AG_HOLD_NONE);
  long wait_us = ag_opts.num[AG_OPT_WARM_WAIT_US] - (long)((ag_now_ns() - first_call_ns) / 1000u);
  if (warm && !writer_running) /* no writer: the warm start runs here, the fleet's part none */
    warm_finish(0, 0);
  else if (warm && wait_us > 0)
    warm_wait_us(wait_us);
  tick_finish();
  atomic_fetch_or_explicit(&ag_state, AG_LIVE, memory_order_release);
  rc = 0;
out:
  pthread_mutex_unlock(&activate_mu);
  return rc;
}

/* ---- fork -------------------------------------------------------------------------------- */

/* Before fork: wait (bounded) until the writer and the agent's other threads are outside
 * SQLite, so the child never inherits a lock mid-transaction (or SQLite's own mutexes held by
 * a thread it does not have: its writer would wait on them for ever); hold the table's insert
 * lock for the same reason. */
static void atfork_prepare(void)
{
  /* loader_mu before all: the writer takes none of these while it holds it. Bounded (a host
   * forking from a library's constructor holds the loader's lock the writer may wait for), but
   * longer than the others: the writer's start takes a few milliseconds, more under load. */
  struct timespec ldl = ag_deadline_after(CLOCK_REALTIME, 1000);
  fork_loader_held = pthread_mutex_timedlock(&loader_mu, &ldl) == 0;
  /* activate_mu next: the warm start takes db_mu while holding it. */
  pthread_mutex_lock(&activate_mu);
  struct timespec dl = ag_deadline_after(CLOCK_REALTIME, 100); /* bounded: fork must stay fast */
  fork_db_held = pthread_mutex_timedlock(&db_mu, &dl) == 0;
  fork_sqlite_held = pthread_mutex_timedlock(&sqlite_mu, &dl) == 0;
  if (ag_table) {
    ag_table_lock(ag_table);
    ag_tcount_lock();
  }
}

static void atfork_parent(void)
{
  if (ag_table) {
    ag_tcount_unlock();
    ag_table_unlock(ag_table);
  }
  pthread_mutex_unlock(&activate_mu);
  if (fork_db_held)
    pthread_mutex_unlock(&db_mu);
  if (fork_sqlite_held)
    pthread_mutex_unlock(&sqlite_mu);
  if (fork_loader_held)
    pthread_mutex_unlock(&loader_mu);
}

/* The child is a new run: same signatures, zero counts, no writer until its first call. The
 * parent's connection is kept aside in inherited, never closed: closing it here could
 * checkpoint or delete the parent's WAL. */
static void atfork_child(void)
{
  atomic_store(&ag_duels, 0); /* a duel in flight was the parent's compile thread's */
  ag_bg_after_fork_child();   /* ... and so was any background work */
  ag_spin_after_fork_child(); /* ... and the judge's looks at the other threads */
  ag_par_after_fork_child();  /* ... and the kernels' workers (par.h) */
  atomic_store(&final_asked, 0); /* an exec's or _exit's of another of the parent's threads */
  int by_exit_now = 2; /* that _exit's (exit()'s, 1, goes on in a child an exit handler forks) */
  atomic_compare_exchange_strong(&ag_exiting, &by_exit_now, 0);
  if (ag_table) {
    ag_table_unlock(ag_table);
    ag_table_reset_counts(ag_table);
    ag_tcount_after_fork_child();
  }
  ag_tier_after_fork_child();
  sp_after_fork_child();
  npending = 0; /* the parent's events */
  flushed_n = 0;
  if (fork_db_held) { /* else the parent's writer may have been changing them: left as they are */
    sp_agg_free(agg); /* the parent's samples */
    ag_series_free(series);
  }
  agg = NULL;
  series = NULL; /* the child's run has its own */
  agg_opmods = 0;
  sampling = 0;
  pthread_mutex_unlock(&activate_mu);
  pthread_mutex_init(&mu, NULL);
  pthread_mutex_init(&warm_mu, NULL); /* a parent thread may have held it */
  warm_pending = warm_taken = fleet_left = 0; /* the fleet is the parent's (fleet.h) */
  atomic_store(&warm_untaken, 0);
  init_cond();
  if (fork_db_held)
    pthread_mutex_unlock(&db_mu); /* prepare's: this thread holds it */
  else
    pthread_mutex_init(&db_mu, NULL); /* the writer's, which does not exist here */
  if (fork_sqlite_held)
    pthread_mutex_unlock(&sqlite_mu);
  else
    pthread_mutex_init(&sqlite_mu, NULL);
  parent_start_ns = run_start_ns;
  parent_pid = getppid();
  run_id = 0;
  atomic_store(&flushed_once, 0); /* the child's run is its own */
  unsampled_noted = 0;
  st_db_t **keep = db ? realloc(inherited, (ninherited + 1) * sizeof *keep) : NULL;
  if (keep) {
    keep[ninherited++] = db;
    inherited = keep;
  }
  db = NULL;
  if (!fork_db_held && !store_dead) { /* the writer was stuck inside SQLite */
    store_dead = 1;
    ag_log(AG_LOG_WARN, "forked while the profile was being written: this child's run is "
                        "not recorded");
  }
  if (fork_loader_held) {
    pthread_mutex_unlock(&loader_mu);
  } else { /* the loader's state is the parent's writer's, half changed: touch none of it */
    pthread_mutex_init(&loader_mu, NULL); /* else each fork of this child waits 1 s for it */
    loader_unsafe = 1;
    if (!store_dead) {
      store_dead = 1;
      ag_log(AG_LOG_WARN, "forked while the agent was loading a library: this child's run is "
                          "not recorded");
    }
  }
  free(flushed_calls);
  free(flushed_gen);
  flushed_calls = NULL;
  flushed_gen = NULL;
  flushed_cap = 0;
  flushed_overflow = 0;
  atomic_store(&ag_overflow_calls, 0);
  writer_running = 0;
  stop = 0;
  atomic_fetch_and(&ag_state, ~AG_LIVE);
}
