/* SPDX-License-Identifier: MIT */
/* The compile queue with real threads: the newest signature is taken first (or the caller's
 * pick), a full queue refuses more, threads start with the first signature and one more per
 * signature queued behind another up to the maximum, a push wakes a waiting thread at once, the
 * idle step comes as often as it asks, and a wait for idle ends once nothing is queued or
 * compiling. Compiles here are callbacks that record what they were given. */
#include "agent/cqueue.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t order[AG_CQ_MAX];
static int alone_of[AG_CQ_MAX], ndone;
static _Atomic int begun, betweens, hold_first, in_compile;
static long between_ms = 10000;

static void begin(void *ctx)
{
  (void)ctx;
  atomic_fetch_add(&begun, 1);
}

static void compile(void *ctx, uint32_t i, int alone)
{
  (void)ctx;
  atomic_fetch_add(&in_compile, 1);
  while (atomic_load(&hold_first)) /* the first compile is slow: more queue up behind it */
    usleep(200);
  pthread_mutex_lock(&rec_mu);
  order[ndone] = i, alone_of[ndone] = alone, ndone++;
  pthread_mutex_unlock(&rec_mu);
}

static long between(void *ctx)
{
  (void)ctx;
  atomic_fetch_add(&betweens, 1);
  return between_ms;
}

static const ag_cq_ops_t ops = {.begin = begin, .compile = compile, .between = between};

static int done(void)
{
  pthread_mutex_lock(&rec_mu);
  int n = ndone;
  pthread_mutex_unlock(&rec_mu);
  return n;
}

/* Waits (up to 10 s: a loaded machine) until f() reaches n. */
static int wait_for(int (*f)(void), int n)
{
  for (int t = 0; t < 100000 && f() < n; t++)
    usleep(100);
  return f();
}

static int compiles_entered(void) { return atomic_load(&in_compile); }
static int betweens_seen(void) { return atomic_load(&betweens); }
static int threads_begun(void) { return atomic_load(&begun); }

static void push(ag_cqueue_t *q, uint32_t i, int max_threads)
{
  ag_cq_lock(q);
  ag_cq_push(q, i);
  cr_assert_eq(ag_cq_start(q, max_threads), 0);
  ag_cq_unlock(q);
}

Test(cqueue, the_newest_signature_is_compiled_first)
{
  static ag_cqueue_t q = AG_CQUEUE_INIT(&ops);
  atomic_store(&hold_first, 1);
  push(&q, 100, 1);
  cr_assert_eq(wait_for(compiles_entered, 1), 1);
  for (uint32_t i = 1; i <= 5; i++)
    push(&q, 100 + i, 1);
  atomic_store(&hold_first, 0);
  cr_assert_eq(wait_for(done, 6), 6);
  uint32_t want[] = {100, 105, 104, 103, 102, 101};
  for (int k = 0; k < 6; k++)
    cr_assert_eq(order[k], want[k], "compile %d", k);
  cr_assert_eq(alone_of[0], 1, "nothing else was queued yet");
  cr_assert_eq(alone_of[1], 0);
  cr_assert_eq(alone_of[5], 1, "the last one");
  cr_assert_eq(atomic_load(&begun), 1, "one thread at most");
}

/* A pick that takes the largest index waiting (the tiers take the most called). */
static unsigned largest(void *ctx, const uint32_t *items, unsigned n)
{
  (void)ctx;
  unsigned best = 0;
  for (unsigned k = 1; k < n; k++)
    if (items[k] > items[best])
      best = k;
  return best;
}

Test(cqueue, the_callers_pick_chooses_which_waiting_signature_goes_next)
{
  static const ag_cq_ops_t picking = {.begin = begin, .compile = compile, .between = between,
                                      .pick = largest};
  static ag_cqueue_t q = AG_CQUEUE_INIT(&picking);
  atomic_store(&hold_first, 1);
  push(&q, 100, 1);
  cr_assert_eq(wait_for(compiles_entered, 1), 1);
  const uint32_t queued[] = {103, 101, 105, 102, 104};
  for (int k = 0; k < 5; k++)
    push(&q, queued[k], 1);
  atomic_store(&hold_first, 0);
  cr_assert_eq(wait_for(done, 6), 6);
  uint32_t want[] = {100, 105, 104, 103, 102, 101};
  for (int k = 0; k < 6; k++)
    cr_assert_eq(order[k], want[k], "compile %d", k);
  cr_assert_eq(alone_of[5], 1, "the last one");
}

Test(cqueue, a_full_queue_refuses_more)
{
  static ag_cqueue_t q = AG_CQUEUE_INIT(&ops);
  ag_cq_lock(&q);
  for (uint32_t i = 0; i < AG_CQ_MAX; i++) {
    cr_assert_not(ag_cq_full(&q));
    ag_cq_push(&q, i);
  }
  cr_assert(ag_cq_full(&q));
  cr_assert_eq(ag_cq_start(&q, 1), 0);
  ag_cq_unlock(&q);
  cr_assert_eq(wait_for(done, AG_CQ_MAX), AG_CQ_MAX, "every one compiled once");
  cr_assert_eq(order[0], AG_CQ_MAX - 1);
  ag_cq_lock(&q);
  cr_assert_not(ag_cq_full(&q));
  ag_cq_unlock(&q);
}

Test(cqueue, threads_start_with_the_first_signature_and_grow_with_the_queue_up_to_the_maximum)
{
  static ag_cqueue_t q = AG_CQUEUE_INIT(&ops);
  atomic_store(&hold_first, 1);
  push(&q, 1, 3);
  cr_assert_eq(wait_for(compiles_entered, 1), 1);
  cr_assert_eq(q.nthreads, 1);
  push(&q, 2, 3); /* alone in the queue: the running thread takes it next */
  cr_assert_eq(q.nthreads, 1);
  push(&q, 3, 3); /* behind another: a second thread */
  cr_assert_eq(q.nthreads, 2);
  for (uint32_t i = 4; i < 10; i++)
    push(&q, i, 3);
  cr_assert_eq(q.nthreads, 3, "no more than the maximum");
  atomic_store(&hold_first, 0);
  cr_assert_eq(wait_for(done, 9), 9);
  cr_assert_eq(wait_for(threads_begun, 3), 3, "each thread started");
}

Test(cqueue, a_push_wakes_a_waiting_thread_and_the_idle_step_comes_as_asked)
{
  static ag_cqueue_t q = AG_CQUEUE_INIT(&ops);
  between_ms = 100000; /* the thread would sleep 100 s without a push */
  push(&q, 1, 1);
  cr_assert_eq(wait_for(betweens_seen, 1), 1);
  usleep(20000);
  push(&q, 2, 1);
  cr_assert_eq(wait_for(done, 2), 2, "woken by the push, not the timeout");
  cr_assert_eq(wait_for(betweens_seen, 2), 2, "the idle step after each batch");
  between_ms = 1;
  push(&q, 3, 1); /* from now on the thread looks every millisecond */
  cr_assert_geq(wait_for(betweens_seen, 20), 20);
}

/* The deadline for ag_cq_wait_idle, ms from now. */
static struct timespec after_ms(long ms)
{
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += ms / 1000, t.tv_nsec += (ms % 1000) * 1000000;
  if (t.tv_nsec >= 1000000000)
    t.tv_sec++, t.tv_nsec -= 1000000000;
  return t;
}

Test(cqueue, waiting_for_idle_ends_when_the_queue_is_empty_and_no_compile_runs)
{
  static ag_cqueue_t q = AG_CQUEUE_INIT(&ops);
  struct timespec dl = after_ms(0);
  ag_cq_lock(&q);
  cr_assert_eq(ag_cq_wait_idle(&q, &dl), 0, "nothing queued: idle at once");
  ag_cq_unlock(&q);
  atomic_store(&hold_first, 1);
  push(&q, 1, 1);
  cr_assert_eq(wait_for(compiles_entered, 1), 1);
  push(&q, 2, 1);
  dl = after_ms(50);
  ag_cq_lock(&q);
  cr_assert_eq(ag_cq_wait_idle(&q, &dl), 1, "a compile is running: not idle by the deadline");
  ag_cq_unlock(&q);
  atomic_store(&hold_first, 0);
  dl = after_ms(10000);
  ag_cq_lock(&q);
  cr_assert_eq(ag_cq_wait_idle(&q, &dl), 0);
  cr_assert_eq(done(), 2, "idle only once both were compiled");
  ag_cq_unlock(&q);
}

Test(cqueue, a_fork_child_starts_with_no_queue_and_no_thread)
{
  static ag_cqueue_t q = AG_CQUEUE_INIT(&ops);
  atomic_store(&hold_first, 1);
  push(&q, 1, 1);
  cr_assert_eq(wait_for(compiles_entered, 1), 1);
  push(&q, 2, 1);
  ag_cq_lock(&q); /* as fork finds it: a parent thread holds the mutex */
  ag_cq_after_fork_child(&q);
  cr_assert_eq(q.len, 0);
  cr_assert_eq(q.nthreads, 0);
  atomic_store(&hold_first, 0);
  cr_assert_eq(wait_for(done, 1), 1);
  push(&q, 7, 1); /* a new thread takes it */
  cr_assert_eq(q.nthreads, 1);
  cr_assert_eq(wait_for(done, 2), 2);
  cr_assert_eq(order[1], 7);
  cr_assert_eq(wait_for(threads_begun, 2), 2);
}
