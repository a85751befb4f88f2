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
  int nworkers;              /* workers running: worker w runs part w */
  uint32_t start_gen;        /* gen when they were started: the first job bumps it */
  job_t job;
  /* The job's number and its parts in one word (a futex word): a worker reads both in one
   * load, so one that missed a job can never take the next one's parts for it. */
  _Atomic uint32_t gen;
  _Atomic uint32_t done;     /* the job's parts the workers finished (a futex word) */
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

/* Spins until *word differs from seen, AG_PAR_SPIN_NS at most: 1 when it did. */
static int spin_until_changed(_Atomic uint32_t *word, uint32_t seen)
{
  uint64_t end = 0;
  for (unsigned i = 1;; i++) {
    if (atomic_load_explicit(word, memory_order_acquire) != seen)
      return 1;
    __builtin_ia32_pause();
    if (i % 256 == 0) { /* the clock every 256 pauses: ~10 us on today's cores */
      uint64_t now = ag_now_ns();
      if (!end)
        end = now + AG_PAR_SPIN_NS;
      else if (now >= end)
        return 0;
    }
  }
}

static void run_part(const job_t *j, int p)
{
  j->fn(j->a + (size_t)p * j->a_step, j->b + (size_t)p * j->b_step, j->c + (size_t)p * j->c_step,
        j->alpha, j->beta);
}

static void *worker(void *arg)
{
  int w = (int)(intptr_t)arg;
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
    if (w >= (int)(seen & GEN_PARTS))
      continue; /* a job of fewer parts than workers */
    run_part(&pool.job, w);
    atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
    if (atomic_load(&pool.waiting))
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
  sigfillset(&all);
  sigdelset(&all, SIGSEGV), sigdelset(&all, SIGILL), sigdelset(&all, SIGBUS);
  sigdelset(&all, SIGFPE);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pool.start_gen = atomic_load(&pool.gen);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int n = 0;
  for (int w = 1; w <= want && w < AG_PAR_MAX; w++) {
    pthread_t th;
    if (pthread_create(&th, &at, worker, (void *)(intptr_t)w) != 0)
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
    for (int p = 0; p < parts; p++)
      run_part(&j, p);
    return;
  }
  int helped = parts - 1 < pool.nworkers ? parts - 1 : pool.nworkers;
  pool.job = j;
  atomic_store(&pool.done, 0);
  /* publishes the job (seq_cst: before sleepers' read) */
  uint32_t g = atomic_load(&pool.gen);
  atomic_store(&pool.gen, (g & ~GEN_PARTS) + GEN_PARTS + 1 + (uint32_t)parts);
  if (atomic_load(&pool.sleepers))
    futex(&pool.gen, FUTEX_WAKE_PRIVATE, AG_PAR_MAX);
  run_part(&j, 0);
  for (int p = helped + 1; p < parts; p++) /* parts beyond the workers: ours */
    run_part(&j, p);
  uint32_t d;
  while ((d = atomic_load_explicit(&pool.done, memory_order_acquire)) < (uint32_t)helped) {
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
