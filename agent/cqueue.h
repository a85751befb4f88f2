/* SPDX-License-Identifier: MIT */
/* The compile queue: signatures (entry indices) waiting to be compiled, and the compile threads
 * that take them. A queue the caller owns: what a compile is, and what a thread does while the
 * queue is empty, are the caller's ops; the queue knows only indices.
 *
 * Which waiting signature goes next is the caller's pick (the tiers take the one with the most
 * calls, those whose library runs near the peak last, policy.h: a program whose signatures all
 * get hot while the first compile loads LLVM has its hottest compiled first, not last); without one, last in, first out (a signature just found hot
 * is compiled before those queued before it). At most AG_CQ_MAX wait; a full queue refuses more (the caller asks again
 * later). The first thread starts with the first signature; another, up to the caller's
 * maximum, whenever a signature is queued behind another. Threads block every signal (a host
 * signal is never delivered on one) and never exit: the process's exit ends them.
 *
 *   thread: [ops->begin] ─▶ take ops->pick's (the newest) ─▶ ops->compile(i, alone) ─▶ ...
 *           queue empty ─▶ ms = ops->between() ─▶ wait for a push, or ms ─▶ take ... */
#ifndef OPJIT_AGENT_CQUEUE_H
#define OPJIT_AGENT_CQUEUE_H

#include <pthread.h>
#include <stdint.h>

#define AG_CQ_MAX 1024 /* signatures waiting, at most */

typedef struct ag_cq_ops_s {
  void (*begin)(void *ctx);                          /* first, on each new thread */
  void (*compile)(void *ctx, uint32_t i, int alone); /* alone: nothing else was queued */
  long (*between)(void *ctx); /* the queue is empty: returns how long to wait (ms) for more */
  /* NULL, or which of the n waiting signatures (items, oldest first) to compile next: its
   * position; called with the queue's mutex held */
  unsigned (*pick)(void *ctx, const uint32_t *items, unsigned n);
  void *ctx;
} ag_cq_ops_t;

typedef struct ag_cqueue_s {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  pthread_cond_t idle; /* broadcast when the queue is empty and no thread compiles */
  uint32_t items[AG_CQ_MAX]; /* [0, len): oldest first */
  unsigned len;
  int nthreads; /* started */
  int busy;     /* threads inside ops->compile */
  const ag_cq_ops_t *ops;
} ag_cqueue_t;
#define AG_CQUEUE_INIT(ops_)                                                                       \
  {                                                                                                \
    .mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,                             \
    .idle = PTHREAD_COND_INITIALIZER, .ops = (ops_)                                                \
  }

/* The queue's mutex: held around the calls marked "locked" (the caller may decide what to queue
 * under it too). */
void ag_cq_lock(ag_cqueue_t *q);
void ag_cq_unlock(ag_cqueue_t *q);

/* Locked: whether AG_CQ_MAX signatures wait. */
int ag_cq_full(const ag_cqueue_t *q);
/* Locked, not full: queues i and wakes a waiting thread. */
void ag_cq_push(ag_cqueue_t *q, uint32_t i);
/* Locked: starts a thread when there is none, or when more than one signature waits; never
 * more than max_threads. Returns -1 when one was needed, none runs and none could be started
 * (nothing queued will be compiled), else 0. */
int ag_cq_start(ag_cqueue_t *q, int max_threads);

/* Starts a detached thread running fn(arg) as a compile thread is started: with every host
 * signal blocked but the faults (SIGSEGV, SIGILL, SIGBUS, SIGFPE), which reach the crash hook
 * (crash.h). Returns 0 or -1. Any thread; the queue is not involved. */
int ag_cq_spawn(void *(*fn)(void *), void *arg);

/* Locked: waits until nothing is queued and no thread is inside ops->compile, or until deadline
 * (CLOCK_REALTIME) passes. Returns 0 when idle, 1 at the deadline. A queue whose threads cannot
 * start (ag_cq_start said -1) never becomes idle by itself: the caller knows and does not wait. */
int ag_cq_wait_idle(ag_cqueue_t *q, const struct timespec *deadline);
/* Fork child: the threads did not survive; the queue is empty, its mutex and condition fresh. */
void ag_cq_after_fork_child(ag_cqueue_t *q);

#endif
