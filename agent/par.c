/* SPDX-License-Identifier: MIT */
/* Kernels on several cores (par.h): a pool of workers that run a split call's other parts. */
#define _GNU_SOURCE
#include "par.h"
#include "agent.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The call the workers run: written by the call that holds the pool before it bumps gen. */
typedef struct job_s {
  jt_gemm_fn fn;
  const char *a, *b;
  char *c;
  double alpha, beta;
  size_t a_step, b_step, c_step;
} job_t;

static struct {
  _Atomic int busy;          /* a call holds the pool */
  _Atomic int started;       /* 0 none, 1 starting, 2 workers up (as many as nworkers) */
  int nworkers;              /* workers running */
  uint32_t start_gen;        /* gen when they were started: the first job bumps it */
  job_t job;
  /* The job's number and its parts in one word (a futex word): a worker reads both in one
   * load, so one that missed a job can never take the next one's parts for it. */
  _Atomic uint32_t gen;
  /* The job's gen (high half) and its next part not yet taken (low half): a part is taken by
   * whoever moves it on first, the caller or a worker, and only for the job its gen names. */
  _Atomic uint64_t claim;
  _Atomic uint32_t done;     /* the job's parts finished (a futex word) */
  _Atomic int sleepers;      /* workers asleep on gen */
  _Atomic int waiting;       /* the caller asleep on done */
  _Atomic uint64_t together, serial;
} pool;

#define GEN_PARTS 15u /* gen's low bits: the job's parts (AG_PAR_MAX fits) */
_Static_assert(AG_PAR_MAX <= GEN_PARTS, "a job's parts fit gen's low bits");

static long futex(_Atomic uint32_t *word, int op, uint32_t val)
{
  return syscall(SYS_futex, (uint32_t *)word, op, val, NULL, NULL, 0);
}

/* Spins until *word differs from seen, AG_PAR_SPIN_NS at most: 1 when it did. Every 256 pauses
 * (~10 us on today's cores) it yields its core, then reads the clock: the thread it waits for
 * may be waiting for that core. A library's pool spinning beside the calls (its threads awake
 * while the judge's bursts run the original) makes three runnable threads on two vCPUs; where
 * the caller and a worker shared one, whichever spun took the other's time: a split double GEMV
 * 1024^2 (Zen 5, a 6.18 kernel) ran 220-290 us a call in one run of three or four, its parts
 * 62 us, was demoted and stayed on the original in later runs. Yielding, no run of 14 lost it
 * (7 with the worker's spin yielding: 0; without: 1, its 2nd run 0.94x plain where the others
 * ran 1.5-2x), at some cost where each has its core (the 2nd runs' calls 90-112 us against
 * 69-96). */
static int spin_until_changed(_Atomic uint32_t *word, uint32_t seen)
{
  uint64_t end = 0;
  for (unsigned i = 1;; i++) {
    if (atomic_load_explicit(word, memory_order_acquire) != seen)
      return 1;
    __builtin_ia32_pause();
    if (i % 256 == 0) {
      sched_yield();
      uint64_t now = ag_now_ns();
      if (!end)
        end = now + AG_PAR_SPIN_NS;
      else if (now >= end)
        return 0;
    }
  }
}

static void run_part(const job_t *j, uint32_t p)
{
  j->fn(j->a + (size_t)p * j->a_step, j->b + (size_t)p * j->b_step, j->c + (size_t)p * j->c_step,
        j->alpha, j->beta);
}

/* Runs the parts of job gen g that nobody has taken yet, one after another, until none is
 * left (or another job is out: a late worker takes nothing of it); returns how many it ran. */
static uint32_t take_parts(uint32_t g)
{
  uint32_t ran = 0;
  uint64_t c = atomic_load_explicit(&pool.claim, memory_order_acquire);
  while ((uint32_t)(c >> 32) == g && (uint32_t)c < (g & GEN_PARTS)) {
    if (!atomic_compare_exchange_weak_explicit(&pool.claim, &c, c + 1, memory_order_acq_rel,
                                               memory_order_acquire))
      continue;
    run_part(&pool.job, (uint32_t)c); /* the job stays until its every part is done */
    ran++;
    atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
    c = atomic_load_explicit(&pool.claim, memory_order_acquire);
  }
  return ran;
}

static void *worker(void *arg)
{
  (void)arg;
  ag_agent_thread_begin("opjit-par");
  uint32_t seen = pool.start_gen; /* not gen now: the first job may be out already */
  for (;;) {
    if (!spin_until_changed(&pool.gen, seen)) {
      atomic_fetch_add(&pool.sleepers, 1);
      while (atomic_load(&pool.gen) == seen)
        futex(&pool.gen, FUTEX_WAIT_PRIVATE, seen);
      atomic_fetch_sub(&pool.sleepers, 1);
    }
    seen = atomic_load_explicit(&pool.gen, memory_order_acquire);
    if (take_parts(seen) && atomic_load(&pool.waiting))
      futex(&pool.done, FUTEX_WAKE_PRIVATE, 1);
  }
  return NULL;
}

/* Starts want workers once; 1 when some run. They never take a host's signal: every one is
 * blocked in them but a fault's, which must reach the crash hook (crash.h) as a compile thread's
 * does (cqueue.c). The sampler's, blocked too, disarms them (sampler.h): a part they run is not
 * sampled. */
static int start_workers(int want)
{
  int st = atomic_load(&pool.started);
  if (st == 2)
    return pool.nworkers > 0;
  if (st == 1 || !atomic_compare_exchange_strong(&pool.started, &st, 1))
    return 0; /* another call is starting them */
  sigset_t all, old;
  sigfillset(&all); /* never a host signal on a worker (its faults: ag_agent_thread_begin) */
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pool.start_gen = atomic_load(&pool.gen);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int n = 0;
  for (int w = 1; w <= want && w < AG_PAR_MAX; w++) {
    pthread_t th;
    if (ag_agent_thread_create(&th, &at, worker, NULL) != 0)
      break;
    n++;
  }
  pthread_attr_destroy(&at);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pool.nworkers = n;
  atomic_store(&pool.started, 2);
  return n > 0;
}

int ag_par_parts(long option, int host_threaded)
{
  if (option > 0)
    return option < AG_PAR_MAX ? (int)option : AG_PAR_MAX;
  int n = host_threaded ? ag_process_cpu_count() : 1; /* not the calling thread's: it may be
                                                         pinned, and the parts are per process */
  return n < 1 ? 1 : n < AG_PAR_MAX ? n : AG_PAR_MAX;
}

void ag_par_gemm(const ag_vrun_t *run, jt_gemm_fn fn, const void *a, const void *b, void *c,
                 double alpha, double beta)
{
  int parts = run ? run->parts : 1;
  if (parts <= 1) {
    fn(a, b, c, alpha, beta);
    return;
  }
  job_t j = {fn, a, b, c, alpha, beta, run->a_step, run->b_step, run->c_step}; /* parts > 1 */
  int free_ = 0;
  if (!atomic_compare_exchange_strong(&pool.busy, &free_, 1) || !start_workers(parts - 1)) {
    if (!free_) /* the pool was ours, without workers */
      atomic_store(&pool.busy, 0);
    atomic_fetch_add_explicit(&pool.serial, 1, memory_order_relaxed);
    for (uint32_t p = 0; p < (uint32_t)parts; p++)
      run_part(&j, p);
    return;
  }
  pool.job = j;
  atomic_store(&pool.done, 0);
  uint32_t g = (atomic_load(&pool.gen) & ~GEN_PARTS) + GEN_PARTS + 1 + (uint32_t)parts;
  /* Part 0 is the caller's (before gen: a worker that sees g finds the claim word of g) */
  atomic_store(&pool.claim, (uint64_t)g << 32 | 1);
  /* publishes the job (seq_cst: before sleepers' read) */
  atomic_store(&pool.gen, g);
  if (atomic_load(&pool.sleepers))
    futex(&pool.gen, FUTEX_WAKE_PRIVATE, AG_PAR_MAX);
  run_part(&j, 0);
  atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
  /* then every part no worker has taken by the time it is free: a worker that is slow to get a
   * core (another pool's thread spinning on it) costs the call at most the parts it would have
   * run, never a wait for it to start */
  take_parts(g);
  uint32_t d;
  while ((d = atomic_load_explicit(&pool.done, memory_order_acquire)) < (uint32_t)parts) {
    if (spin_until_changed(&pool.done, d))
      continue;
    atomic_store(&pool.waiting, 1);
    if (atomic_load(&pool.done) == d)
      futex(&pool.done, FUTEX_WAIT_PRIVATE, d);
    atomic_store(&pool.waiting, 0);
  }
  atomic_fetch_add_explicit(&pool.together, 1, memory_order_relaxed);
  atomic_store(&pool.busy, 0);
}

void ag_par_counts(uint64_t *together, uint64_t *serial)
{
  *together = atomic_load(&pool.together);
  *serial = atomic_load(&pool.serial);
}

void ag_par_after_fork_child(void)
{
  /* the workers stayed in the parent; a call the fork interrupted holds nothing here */
  atomic_store(&pool.busy, 0);
  atomic_store(&pool.started, 0);
  pool.nworkers = 0;
  atomic_store(&pool.sleepers, 0);
  atomic_store(&pool.waiting, 0);
}
