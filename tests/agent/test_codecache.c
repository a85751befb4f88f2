/* SPDX-License-Identifier: MIT */
/* The code cache: byte accounting against the budget, the eviction victim, deferrals, and grace
 * periods proven with the agent's real thread registry (tcount.c, linked in): a kernel evicted
 * while a host thread is inside it is freed only once that thread has finished its call (or
 * exited); threads that register later never hold it up. The "kernels" are real functions
 * that host threads really run. */
#include "agent/agent.h"
#include "agent/codecache.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* The thread state the agent defines in agent.c, which tcount.c keeps its registration in. */
AG_TLS ag_thread_t ag_tl;

static ag_table_t *table;

static void setup(void)
{
  table = ag_table_new(64, NULL);
  cr_assert_not_null(table);
  cr_assert_eq(ag_tcount_init(table, 64), 0);
}
TestSuite(codecache, .init = setup);

/* ---- what the caller gives the cache: the registry's grace test and a freeing that counts ---- */

static void *freed[64];
static int nfreed, shared_left; /* release says "still shared" this many times first */

static int passed(void *ctx, const ag_epoch_t *snap, size_t nsnap)
{
  (void)ctx;
  return ag_tcount_passed(snap, nsnap);
}

static int release(void *ctx, void *fn)
{
  (void)ctx;
  if (shared_left > 0) {
    shared_left--;
    return 0;
  }
  freed[nfreed++] = fn;
  return 1;
}

static const ag_cc_ops_t ops = {passed, release, NULL};

/* Unpublishes nothing (the test's kernels have no entry): snapshots the registered threads as
 * the tiers do after unpublishing fn, and retires it. */
static void retire(ag_codecache_t *c, void *fn, size_t size)
{
  ag_epoch_t *snap = calloc(1024, sizeof *snap);
  size_t n = ag_tcount_snapshot(snap, 1024);
  cr_assert_leq(n, 1024);
  cr_assert_eq(ag_cc_retire(c, fn, size, snap, n), 0);
}

/* ---- a host thread running a kernel ---- */

static _Atomic int inside, let_go, quit, calls_done;

/* The kernel: stays inside until let go. */
static void kernel(void)
{
  atomic_store(&inside, 1);
  while (!atomic_load(&let_go))
    usleep(100);
  atomic_store(&inside, 0);
}

/* A host thread: registers, makes one call into the kernel, finishing it as ag_call_end does,
 * then waits to be told to exit (or makes one more, short, call first when more_calls). */
static void *host(void *arg)
{
  int more_calls = (int)(uintptr_t)arg;
  ag_tcount_register();
  cr_assert_not_null(ag_tl.cur);
  atomic_store(&ag_tl.cur[0], 1);
  kernel();
  atomic_store(&ag_tl.cur[0], 0);
  atomic_store_explicit(&ag_tl.cur[1], atomic_load(&ag_tl.cur[1]) + 1, memory_order_release);
  atomic_fetch_add(&calls_done, 1);
  while (!atomic_load(&quit) && !more_calls)
    usleep(100);
  return NULL;
}

static void reset(void)
{
  atomic_store(&inside, 0), atomic_store(&let_go, 0), atomic_store(&quit, 0);
  atomic_store(&calls_done, 0);
  nfreed = 0, shared_left = 0;
}

Test(codecache, a_kernel_evicted_while_a_thread_runs_it_is_freed_only_after_the_call)
{
  reset();
  ag_codecache_t c = {.budget = 1 << 20};
  ag_cc_charge(&c, 3000);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, host, NULL), 0);
  while (!atomic_load(&inside))
    usleep(100);
  retire(&c, (void *)kernel, 3000); /* unpublished while the thread is inside */
  for (int i = 0; i < 20; i++) {
    cr_assert_eq(ag_cc_free_retired(&c, &ops), 0, "the thread is still inside");
    usleep(500);
  }
  cr_assert_eq(nfreed, 0);
  cr_assert_eq(c.bytes, 3000, "still charged");
  atomic_store(&let_go, 1);
  while (atomic_load(&calls_done) < 1)
    usleep(100);
  cr_assert_eq(ag_cc_free_retired(&c, &ops), 1, "its call finished: nothing can be inside");
  cr_assert_eq(nfreed, 1);
  cr_assert_eq(freed[0], (void *)kernel);
  cr_assert_eq(c.bytes, 0);
  cr_assert_eq(c.nretired, 0);
  atomic_store(&quit, 1);
  pthread_join(t, NULL);
}

Test(codecache, a_thread_that_exits_inside_no_call_ends_the_grace_period)
{
  reset();
  ag_codecache_t c = {.budget = 1 << 20};
  pthread_t t;
  atomic_store(&let_go, 1);
  cr_assert_eq(pthread_create(&t, NULL, host, NULL), 0);
  while (atomic_load(&calls_done) < 1)
    usleep(100);
  /* registered, between calls: the snapshot holds it until it calls again or exits */
  ag_cc_charge(&c, 100);
  retire(&c, (void *)reset, 100);
  cr_assert_eq(ag_cc_free_retired(&c, &ops), 0, "it might have loaded the pointer");
  atomic_store(&quit, 1);
  pthread_join(t, NULL); /* gone: the registry forgets it */
  cr_assert_eq(ag_cc_free_retired(&c, &ops), 1);
  cr_assert_eq(c.bytes, 0);
}

Test(codecache, threads_registered_after_the_eviction_do_not_hold_it_up)
{
  reset();
  ag_codecache_t c = {.budget = 1 << 20};
  ag_cc_charge(&c, 64);
  retire(&c, (void *)host, 64); /* no host thread registered in this process yet */
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, host, NULL), 0);
  while (!atomic_load(&inside))
    usleep(100);
  cr_assert_eq(ag_cc_free_retired(&c, &ops), 1, "it registered after the snapshot");
  atomic_store(&let_go, 1), atomic_store(&quit, 1);
  pthread_join(t, NULL);
}

Test(codecache, a_shared_kernel_gives_back_its_reference_bytes_and_a_resurrected_one_stays)
{
  reset();
  ag_codecache_t c = {.budget = 1 << 20};
  ag_cc_charge(&c, 500 + 700);
  retire(&c, (void *)kernel, 500);
  retire(&c, (void *)host, 700);
  cr_assert_eq(ag_cc_resurrect(&c, (void *)host), 1, "compiled again before it was freed");
  cr_assert_eq(ag_cc_resurrect(&c, (void *)host), 0);
  shared_left = 1;
  cr_assert_eq(ag_cc_free_retired(&c, &ops), 1);
  cr_assert_eq(nfreed, 0, "another signature still uses it");
  cr_assert_eq(c.bytes, 700, "this reference's bytes are given back; the resurrected stay");
}

Test(codecache, the_retired_list_is_bounded)
{
  ag_codecache_t c = {.budget = 1 << 20};
  for (int i = 0; i < AG_CC_RETIRED; i++)
    retire(&c, (char *)kernel + i, 1);
  cr_assert(ag_cc_retired_full(&c));
  ag_epoch_t *snap = calloc(1, sizeof *snap);
  cr_assert_eq(ag_cc_retire(&c, (void *)host, 1, snap, 0), -1, "the code stays live");
  free(snap);
  reset();
  cr_assert_eq(ag_cc_free_retired(&c, &ops), AG_CC_RETIRED);
  cr_assert_not(ag_cc_retired_full(&c));
}

static int ready_even(void *ctx, uint32_t i)
{
  (void)ctx;
  return i % 2 == 0;
}

static int ready_none(void *ctx, uint32_t i)
{
  (void)ctx, (void)i;
  return 0;
}

Test(codecache, the_victim_is_the_ready_variant_that_served_fewest_calls)
{
  uint64_t vcalls[] = {50, 1, 7, 0, 7, 3};
  cr_assert_eq(ag_cc_victim(vcalls, 6, ready_even, NULL), 2, "of 0, 2 and 4: the first of the 7s");
  cr_assert_eq(ag_cc_victim(vcalls, 6, ready_none, NULL), UINT32_MAX);
  cr_assert_eq(ag_cc_victim(vcalls, 0, ready_even, NULL), UINT32_MAX);
}

Test(codecache, deferred_entries_come_back_latest_first_as_room_allows)
{
  ag_codecache_t c = {.budget = 3 * AG_CC_RESERVE};
  ag_cc_charge(&c, 3 * AG_CC_RESERVE);
  cr_assert_not(ag_cc_fits(&c, 1));
  for (uint32_t i = 0; i < AG_CC_DEFERRED; i++)
    cr_assert_eq(ag_cc_defer(&c, i), 0);
  cr_assert_eq(ag_cc_defer(&c, 999), -1, "full: dropped");
  uint32_t out[64];
  cr_assert_eq(ag_cc_undefer(&c, out, 64), 0, "no room yet");
  ag_cc_refund(&c, 2 * AG_CC_RESERVE + 10);
  cr_assert_eq(ag_cc_undefer(&c, out, 64), 2, "room for two compiles' reservations");
  cr_assert_eq(out[0], AG_CC_DEFERRED - 1);
  cr_assert_eq(out[1], AG_CC_DEFERRED - 2);
  ag_cc_after_fork_child(&c);
  ag_cc_refund(&c, c.bytes);
  cr_assert_eq(ag_cc_undefer(&c, out, 64), 0, "a fork child's deferrals start afresh");
}

/* What tier.c's old append-only table broke on: a process that keeps compiling and evicting.
 * 10,000 kernels each reserved, charged, evicted and freed, with a budget for 8: the bytes
 * always come back, and every kernel is freed once. */
Test(codecache, ten_thousand_kernels_through_a_budget_of_eight)
{
  reset();
  ag_codecache_t c = {.budget = 8 * 4096};
  static char code[10000];
  int live = 0, evicted = 0, total_freed = 0;
  for (int i = 0; i < 10000; i++) {
    ag_cc_free_retired(&c, &ops);
    total_freed += nfreed, nfreed = 0;
    while (!ag_cc_fits(&c, AG_CC_RESERVE)) {
      cr_assert_gt(live, 0, "kernel %d: something to evict", i);
      retire(&c, &code[evicted++], 4096 - AG_CC_RESERVE / 2);
      live--;
      ag_cc_free_retired(&c, &ops);
      total_freed += nfreed, nfreed = 0;
    }
    ag_cc_charge(&c, AG_CC_RESERVE);
    ag_cc_refund(&c, AG_CC_RESERVE);
    ag_cc_charge(&c, 4096 - AG_CC_RESERVE / 2);
    live++;
  }
  while (live)
    retire(&c, &code[evicted++], 4096 - AG_CC_RESERVE / 2), live--;
  ag_cc_free_retired(&c, &ops);
  total_freed += nfreed;
  cr_assert_eq(evicted, 10000);
  cr_assert_eq(total_freed, 10000);
  cr_assert_eq(c.bytes, 0);
}
