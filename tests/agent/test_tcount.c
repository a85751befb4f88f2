/* SPDX-License-Identifier: MIT */
/* The registry of host threads (tcount.c, linked in, with the thread state agent.c would
 * define): per-thread counters summed with the table's, a thread's counts folded into the table
 * when it exits, the operator a thread is running seen from elsewhere, and a fork child that
 * keeps only its own thread, its counts at zero. */
#define _GNU_SOURCE
#include "agent/agent.h"
#include "agent/hosts/blas_key.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

/* The thread state the agent defines in agent.c, which tcount.c keeps its registration in. */
AG_TLS ag_thread_t ag_tl;

#define CAP 16
static ag_table_t *table;

static void setup(void)
{
  table = ag_table_new(CAP, NULL);
  cr_assert_not_null(table);
  for (int i = 0; i < 4; i++) {
    ag_sig_t k = ag_sig_make(AG_HOST_ID_BLAS, AG_OP_GEMM, AG_F32, AG_API_CBLAS, 0, 0, 0, 0, i + 1,
                             1, 1, 1, 1, 1);
    cr_assert_not_null(ag_table_get(table, &k));
  }
  cr_assert_eq(ag_tcount_init(table, CAP), 0);
}
TestSuite(tcount, .init = setup);

/* n calls of entry i on this thread, k of them through its variant, as ag_call_begin/end count. */
static void count(uint32_t i, uint64_t n, uint64_t k)
{
  if (!ag_tl.cur)
    ag_tcount_register();
  cr_assert_not_null(ag_tl.calls);
  atomic_fetch_add(&ag_tl.calls[i], n);
  atomic_fetch_add(&ag_tl.calls[CAP + i], k);
}

static _Atomic int stage;

static void *worker(void *arg)
{
  (void)arg;
  count(1, 100, 30);
  count(2, 5, 0);
  atomic_store(&ag_tl.cur[0], 3 + 1); /* inside entry 3's operator */
  atomic_store(&stage, 1);
  while (atomic_load(&stage) == 1)
    usleep(100);
  atomic_store(&ag_tl.cur[0], 0);
  return NULL;
}

static uint64_t calls_of(uint32_t i, uint64_t *vcalls)
{
  uint64_t c;
  ag_tcount_sum_one(i, &c, vcalls);
  return c;
}

Test(tcount, counts_are_summed_live_and_folded_into_the_table_at_exit)
{
  count(1, 7, 7);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, worker, NULL), 0);
  while (atomic_load(&stage) != 1)
    usleep(100);
  uint64_t v;
  cr_assert_eq(calls_of(1, &v), 107);
  cr_assert_eq(v, 37);
  cr_assert_eq(calls_of(2, &v), 5);
  cr_assert_eq(ag_tcount_inflight(), 3 + 1, "the worker is inside entry 3");
  uint64_t all[4], vall[4];
  ag_tcount_sum(all, vall, 4);
  cr_assert(all[0] == 0 && all[1] == 107 && all[2] == 5 && all[3] == 0);
  cr_assert_eq(atomic_load(&ag_table_entry(table, 1)->calls), 0, "still the thread's own");
  atomic_store(&stage, 2);
  pthread_join(t, NULL);
  cr_assert_eq(ag_tcount_inflight(), 0);
  cr_assert_eq(atomic_load(&ag_table_entry(table, 1)->calls), 100, "folded at its exit");
  cr_assert_eq(atomic_load(&ag_table_entry(table, 1)->vcalls), 30);
  cr_assert_eq(calls_of(1, &v), 107, "nothing lost or counted twice");
  cr_assert_eq(v, 37);
}

Test(tcount, a_fork_child_keeps_its_own_thread_with_zero_counts)
{
  count(0, 9, 0);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, worker, NULL), 0);
  while (atomic_load(&stage) != 1)
    usleep(100);
  ag_epoch_t snap[8];
  cr_assert_eq(ag_tcount_snapshot(snap, 8), 2);
  ag_tcount_lock(); /* as the agent's prepare handler does */
  pid_t pid = fork();
  if (pid == 0) {
    ag_tcount_after_fork_child();
    uint64_t c, v;
    ag_tcount_sum_one(0, &c, &v);
    int bad = c != 0;                               /* the parent's counts are the parent's */
    bad |= (ag_tcount_snapshot(snap, 8) != 1) << 1; /* the worker did not survive */
    bad |= (ag_tcount_inflight() != 0) << 2;        /* nor did its operator */
    count(0, 2, 0);
    ag_tcount_sum_one(0, &c, &v);
    bad |= (c != 2) << 3; /* the child counts on */
    _exit(bad);
  }
  ag_tcount_unlock();
  cr_assert_gt(pid, 0);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st));
  cr_assert_eq(WEXITSTATUS(st), 0, "child's failures (bits): %d", WEXITSTATUS(st));
  uint64_t v;
  cr_assert_eq(calls_of(0, &v), 9, "the parent's own, untouched");
  atomic_store(&stage, 2);
  pthread_join(t, NULL);
}

/* n timings of ns each on the calling thread's held words of entry i, side 0 the original's, 1
 * the variant's, as agent.c's hold() keeps them (tcount.h). */
static void hold(uint32_t i, int side, uint64_t n, uint64_t ns)
{
  if (!ag_tl.cur)
    ag_tcount_register();
  cr_assert_not_null(ag_tl.calls);
  _Atomic uint64_t *h = ag_tcount_held(ag_tl.calls, i) + 2 * side;
  atomic_fetch_add(&h[0], n);
  atomic_fetch_add(&h[1], n * ns);
}

static void *holder(void *arg)
{
  (void)arg;
  hold(1, 0, 5, 100);
  hold(1, 1, 3, 70);
  hold(2, 1, 7, 10); /* never booked by the thread itself: its fold does */
  ag_tcount_book_held(1);
  ag_entry_t *e = ag_table_entry(table, 1);
  int bad = atomic_load(&e->timed) != 5 || atomic_load(&e->timed_ns) != 500;
  bad |= (atomic_load(&e->vtimed) != 3 || atomic_load(&e->vtimed_ns) != 210) << 1;
  hold(1, 0, 2, 40); /* held again after its booking */
  return (void *)(long)bad;
}

/* Held timings reach the entry once each: booked by their thread for one entry, by its fold when
 * it exits (which zeroes them: the array goes to the next thread that registers), or by the
 * process's end; a booking zeroes them, so a second adds nothing. */
Test(tcount, held_timings_are_booked_once_by_their_thread_or_its_fold)
{
  pthread_t t;
  void *bad;
  cr_assert_eq(pthread_create(&t, NULL, holder, NULL), 0);
  cr_assert_eq(pthread_join(t, &bad), 0);
  cr_assert_eq((long)bad, 0, "the thread's own booking of entry 1 (bits): %ld", (long)bad);
  ag_entry_t *e1 = ag_table_entry(table, 1), *e2 = ag_table_entry(table, 2);
  cr_assert_eq(atomic_load(&e1->timed), 7, "its fold booked what it held after");
  cr_assert_eq(atomic_load(&e1->timed_ns), 580);
  cr_assert_eq(atomic_load(&e1->vtimed), 3, "nothing booked twice");
  cr_assert_eq(atomic_load(&e2->vtimed), 7);
  cr_assert_eq(atomic_load(&e2->vtimed_ns), 70);
  cr_assert_eq(atomic_load(&e2->timed), 0, "a side with nothing held stays as it was");

  hold(3, 0, 4, 25); /* this thread's (on the array the holder left), booked with every entry's */
  hold(0, 1, 1, 9);
  ag_tcount_book_held_all(0);
  ag_tcount_book_held_all(0);
  ag_entry_t *e3 = ag_table_entry(table, 3), *e0 = ag_table_entry(table, 0);
  cr_assert(atomic_load(&e3->timed) == 4 && atomic_load(&e3->timed_ns) == 100);
  cr_assert(atomic_load(&e0->vtimed) == 1 && atomic_load(&e0->vtimed_ns) == 9);
  cr_assert_eq(atomic_load(&e1->timed), 7, "the fold left nothing held in the array it gave up");
  cr_assert_eq(atomic_load(&e2->vtimed), 7);
}

static void *stays(void *arg)
{
  (void)arg;
  hold(2, 0, 6, 50);
  atomic_store(&stage, 1);
  while (atomic_load(&stage) == 1)
    usleep(100);
  return NULL;
}

/* The process's end books every registered thread's held timings: threads still alive at exit
 * (a pool's workers) have no fold before the last write. */
Test(tcount, the_process_end_books_the_held_timings_of_threads_still_alive)
{
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, stays, NULL), 0);
  while (atomic_load(&stage) != 1)
    usleep(100);
  hold(2, 0, 1, 20);
  ag_tcount_book_held_all(0);
  ag_entry_t *e2 = ag_table_entry(table, 2);
  cr_assert_eq(atomic_load(&e2->timed), 7, "the worker's 6 and this thread's 1");
  cr_assert_eq(atomic_load(&e2->timed_ns), 320);
  atomic_store(&stage, 2);
  pthread_join(t, NULL);
  cr_assert_eq(atomic_load(&e2->timed), 7, "its fold found nothing left to book");
}

static void *locker(void *arg)
{
  (void)arg;
  ag_tcount_lock(); /* as a thread inside its registration or fold would */
  atomic_store(&stage, 1);
  while (atomic_load(&stage) == 1)
    usleep(100);
  ag_tcount_unlock();
  return NULL;
}

/* From _exit (perhaps a signal handler's, the interrupted thread inside the registry), the
 * booking never waits for the registry's lock: it books the calling thread's own held timings. */
Test(tcount, the_booking_on_exit_never_waits_for_the_registry)
{
  hold(1, 1, 2, 30);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, locker, NULL), 0);
  while (atomic_load(&stage) != 1)
    usleep(100);
  ag_tcount_book_held_all(1);
  ag_entry_t *e1 = ag_table_entry(table, 1);
  cr_assert(atomic_load(&e1->vtimed) == 2 && atomic_load(&e1->vtimed_ns) == 60);
  atomic_store(&stage, 2);
  pthread_join(t, NULL);
}

/* A thread that calls once and stays registered until stage leaves 1; one of the agent's
 * (a compile thread's duel, say) when arg is set. */
static void *caller(void *arg)
{
  if (arg)
    ag_agent_thread_begin("opjit-test");
  count(0, 1, 0);
  atomic_store(&stage, 1);
  while (atomic_load(&stage) == 1)
    usleep(100);
  return NULL;
}

/* Starts caller(agent) and waits until it has called; stage is 1 until it is let go. */
static pthread_t start_caller(int agent)
{
  pthread_t t;
  atomic_store(&stage, 0);
  cr_assert_eq(pthread_create(&t, NULL, caller, agent ? &stage : NULL), 0);
  while (atomic_load(&stage) != 1)
    usleep(100);
  return t;
}

static void stop_caller(pthread_t t)
{
  atomic_store(&stage, 2);
  pthread_join(t, NULL);
}

Test(tcount, the_only_caller_is_the_one_host_thread_that_calls)
{
  cr_assert_eq(ag_tcount_only_caller(), 0, "no thread has called yet");
  count(0, 1, 0);
  cr_assert_eq(ag_tcount_only_caller(), gettid());
  pthread_t t = start_caller(1);
  cr_assert_eq(ag_tcount_only_caller(), gettid(), "an agent thread's calls do not count");
  stop_caller(t);
  t = start_caller(0);
  cr_assert_eq(ag_tcount_only_caller(), 0, "two host threads call");
  stop_caller(t);
  cr_assert_eq(ag_tcount_only_caller(), gettid(), "the second one exited");
}
