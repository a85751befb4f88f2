/* SPDX-License-Identifier: MIT */
/* The compile queue (cqueue.h): an array under a mutex, taken in the caller's order (else LIFO),
 * and its threads' loop. */
#include "cqueue.h"
#include "agent.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

void ag_cq_lock(ag_cqueue_t *q) { pthread_mutex_lock(&q->mu); }

void ag_cq_unlock(ag_cqueue_t *q) { pthread_mutex_unlock(&q->mu); }

int ag_cq_full(const ag_cqueue_t *q) { return q->len == AG_CQ_MAX; }

void ag_cq_push(ag_cqueue_t *q, uint32_t i)
{
  q->items[q->len++] = i;
  pthread_cond_signal(&q->cond);
}

/* A compile thread. */
static void *cq_main(void *arg)
{
  ag_cqueue_t *q = arg;
  const ag_cq_ops_t *ops = q->ops;
  if (ops->begin)
    ops->begin(ops->ctx);
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (q->len) {
      unsigned at = ops->pick ? ops->pick(ops->ctx, q->items, q->len) : q->len - 1;
      if (at >= q->len)
        at = q->len - 1;
      uint32_t i = q->items[at];
      memmove(&q->items[at], &q->items[at + 1], (q->len - at - 1) * sizeof *q->items);
      q->len--;
      int alone = q->len == 0;
      q->busy++;
      pthread_mutex_unlock(&q->mu);
      ops->compile(ops->ctx, i, alone);
      pthread_mutex_lock(&q->mu);
      if (--q->busy <= 0 && q->len == 0)
        pthread_cond_broadcast(&q->idle);
    }
    pthread_mutex_unlock(&q->mu);
    long ms = ops->between(ops->ctx);
    pthread_mutex_lock(&q->mu);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += (ms % 1000) * 1000000;
    if (dl.tv_nsec >= 1000000000)
      dl.tv_sec++, dl.tv_nsec -= 1000000000;
    if (!q->len)
      pthread_cond_timedwait(&q->cond, &q->mu, &dl);
  }
  return NULL;
}

int ag_cq_spawn(void *(*fn)(void *), void *arg)
{
  sigset_t all, old;
  pthread_t t;
  sigfillset(&all); /* never a host signal here (its faults: ag_agent_thread_begin) */
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int started = ag_agent_thread_create(&t, NULL, fn, arg) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (started)
    pthread_detach(t);
  return started ? 0 : -1;
}

int ag_cq_start(ag_cqueue_t *q, int max_threads)
{
  if (q->nthreads >= max_threads || (q->nthreads && q->len <= 1))
    return 0;
  if (ag_cq_spawn(cq_main, q) == 0)
    q->nthreads++;
  return q->nthreads ? 0 : -1;
}

int ag_cq_wait_idle(ag_cqueue_t *q, const struct timespec *deadline)
{
  while (q->len || q->busy > 0)
    if (pthread_cond_timedwait(&q->idle, &q->mu, deadline) == ETIMEDOUT)
      return q->len || q->busy > 0;
  return 0;
}

void ag_cq_after_fork_child(ag_cqueue_t *q)
{
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cond, NULL);
  pthread_cond_init(&q->idle, NULL);
  q->len = 0;
  q->nthreads = 0;
  q->busy = 0;
}
