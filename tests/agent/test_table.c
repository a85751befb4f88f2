/* SPDX-License-Identifier: MIT */
/* The signature table: one entry per distinct key, collisions resolved by the full key, and
 * no count lost when many threads hammer it. */
#include "agent/table.h"
#include "agent/hosts/blas_key.h"

#include <criterion/criterion.h>
#include <pthread.h>

static ag_sig_t key(int i)
{
  ag_sig_t s = {.host = AG_HOST_ID_BLAS, .op = (uint8_t)(1 + i % 4), .dtype = AG_F32,
                .api = AG_API_F77, .m = i, .n = 2 * i, .k = 3, .lda = i, .ldb = 1, .ldc = i};
  return s;
}

static uint64_t constant_hash(const ag_sig_t *s)
{
  (void)s;
  return 42; /* every key collides */
}

Test(table, equal_calls_map_to_one_entry)
{
  ag_table_t *t = ag_table_new(64, NULL);
  ag_sig_t a = key(7), b = key(7);
  ag_entry_t *ea = ag_table_get(t, &a), *eb = ag_table_get(t, &b);
  cr_assert_not_null(ea);
  cr_assert_eq(ea, eb);
  cr_assert_eq(ag_table_count(t), 1);
  ag_table_free(t);
}

Test(table, distinct_keys_never_confused_even_when_hashes_collide)
{
  ag_table_t *t = ag_table_new(64, constant_hash);
  ag_entry_t *e[40];
  for (int i = 0; i < 40; i++) {
    ag_sig_t k = key(i);
    e[i] = ag_table_get(t, &k);
    cr_assert_not_null(e[i]);
    cr_assert_eq(memcmp(&e[i]->key, &k, sizeof k), 0);
  }
  cr_assert_eq(ag_table_count(t), 40);
  for (int i = 0; i < 40; i++) {
    ag_sig_t k = key(i);
    cr_assert_eq(ag_table_get(t, &k), e[i], "key %d found another entry", i);
    for (int j = 0; j < i; j++)
      cr_assert_neq(e[i], e[j]);
  }
  ag_table_free(t);
}

Test(table, full_table_returns_null_and_keeps_its_entries)
{
  ag_table_t *t = ag_table_new(16, NULL);
  for (int i = 0; i < 16; i++) {
    ag_sig_t k = key(i);
    cr_assert_not_null(ag_table_get(t, &k));
  }
  ag_sig_t extra = key(99), old = key(3);
  cr_assert_null(ag_table_get(t, &extra));
  cr_assert_not_null(ag_table_get(t, &old));
  cr_assert_eq(ag_table_count(t), 16);
  ag_table_free(t);
}

/* A table of 16 holding key(1)'s entry, into *t. */
static ag_entry_t *one_entry(ag_table_t **t)
{
  *t = ag_table_new(16, NULL);
  ag_sig_t k = key(1);
  ag_entry_t *e = ag_table_get(*t, &k);
  cr_assert_not_null(e);
  return e;
}

Test(table, reset_zeroes_counts_keeps_keys)
{
  ag_table_t *t;
  ag_entry_t *e = one_entry(&t);
  ag_sig_t k = key(1);
  atomic_fetch_add(&e->calls, 5);
  atomic_fetch_add(&e->timed_ns, 50);
  ag_table_reset_counts(t);
  cr_assert_eq(atomic_load(&e->calls), 0);
  cr_assert_eq(atomic_load(&e->timed_ns), 0);
  cr_assert_eq(ag_table_get(t, &k), e);
  ag_table_free(t);
}

/* Books n timings into e's original as the agent does (agent.c, ag_call_timed: the first call's
 * forced, the others drawn), then checks the mean call the readers get, and that a reset leaves
 * none. */
static void expect_mean(const uint64_t *dt, int n, uint64_t want_n, uint64_t want_ns)
{
  ag_table_t *t;
  ag_entry_t *e = one_entry(&t);
  for (int i = 0; i < n; i++)
    ag_entry_orig_book(e, dt[i], i == 0);
  uint64_t got_n, got_ns;
  ag_entry_orig_timed(e, &got_n, &got_ns);
  cr_expect(got_n == want_n && got_ns == want_ns, "%d timings: %llu in %llu ns, not %llu in %llu",
            n, (unsigned long long)got_n, (unsigned long long)got_ns,
            (unsigned long long)want_n, (unsigned long long)want_ns);
  ag_table_reset_counts(t);
  ag_entry_orig_timed(e, &got_n, &got_ns);
  cr_expect(got_n == 0 && got_ns == 0, "reset");
  ag_table_free(t);
}

/* The original's mean call as the readers get it: the first call (forced) left out once one is
 * drawn, and up to three stalls each more than 8x the mean of at least two others (a double
 * GEMV's 2nd to 4th calls at 1.5-5 ms, its library's thread kept off a CPU, where the others took
 * 4 us). */
Test(table, the_originals_mean_leaves_out_the_first_call_and_its_stalls)
{
  expect_mean((const uint64_t[]){500}, 1, 1, 500);
  expect_mean((const uint64_t[]){1300000, 4000}, 2, 1, 4000);
  /* a stall and one other: which is the norm is not known yet */
  expect_mean((const uint64_t[]){1300000, 3800000, 4000}, 3, 2, 3804000);
  expect_mean((const uint64_t[]){1300000, 3800000, 4000, 4200}, 4, 2, 8200);
  expect_mean((const uint64_t[]){1300000, 3800000, 5000, 3900, 4100, 4000, 4000}, 7, 5, 21000);
  /* a stall may come last; each of the slowest goes that is 8x what the others leave */
  expect_mean((const uint64_t[]){900, 4000, 4000, 40000, 4000, 4000, 4000, 600000}, 8, 5, 20000);
  expect_mean((const uint64_t[]){900, 4000, 4000, 20000, 4000, 4000, 4000, 600000}, 8, 6, 40000);
  /* 7.5x the others' mean is not a stall: kept */
  expect_mean((const uint64_t[]){1000, 4000, 4000, 4000, 30000}, 5, 4, 42000);
  /* three stalls in a row, then the calls' own pace (a first run's, measured); with a fourth the
   * three slowest leave a mean it holds up: all stay */
  expect_mean((const uint64_t[]){4631816, 3946733, 3842285, 3508941, 6241, 4889, 5370, 3586},
              8, 4, 20086);
  expect_mean((const uint64_t[]){900, 5000000, 4000000, 3000000, 2000000, 4000, 4000}, 7, 6,
              14008000);
}

/* An entry whose timings came from bursts, pairs or a thread's held ones has none forced: every
 * one counts. */
Test(table, without_a_forced_timing_every_sampled_one_counts)
{
  ag_table_t *t;
  ag_entry_t *e = one_entry(&t);
  atomic_store(&e->timed, 3);
  atomic_store(&e->timed_ns, 300);
  uint64_t n, ns;
  ag_entry_orig_timed(e, &n, &ns);
  cr_expect(n == 3 && ns == 300, "%llu in %llu ns", (unsigned long long)n, (unsigned long long)ns);
  ag_table_free(t);
}

/* numpy's double GEMV 128x256 in a first run (measured, agent.c's timings): its first call and
 * its six next, slow while its library's thread waited for a CPU, were each timed as it was
 * long, the first fast one too; then six drawn at its own pace. The mean of all 14 read 1.6 ms
 * a call (1.9 s over its calls, in a phase that took 98 ms); the drawn ones' is its pace. Before
 * any is drawn, the forced ones give the mean. */
Test(table, the_mean_is_the_drawn_timings_once_there_is_one)
{
  static const uint64_t forced[] = {285000,  1690800, 4133300, 3824600,
                                    4066900, 2217100, 4803100, 8900};
  static const uint64_t drawn[] = {4300, 4500, 5800, 5800, 4200, 5800};
  ag_table_t *t;
  ag_entry_t *e = one_entry(&t);
  uint64_t n, ns, fns = 0;
  for (size_t i = 0; i < sizeof forced / sizeof *forced; i++)
    ag_entry_orig_book(e, forced[i], 1), fns += forced[i];
  ag_entry_orig_timed(e, &n, &ns);
  cr_expect(n == 8 && ns == fns, "%llu in %llu ns", (unsigned long long)n,
            (unsigned long long)ns);
  for (size_t i = 0; i < sizeof drawn / sizeof *drawn; i++)
    ag_entry_orig_book(e, drawn[i], 0);
  ag_entry_orig_timed(e, &n, &ns);
  cr_expect(n == 6 && ns == 30400, "%llu in %llu ns", (unsigned long long)n,
            (unsigned long long)ns);
  ag_table_reset_counts(t);
  ag_entry_orig_timed(e, &n, &ns);
  cr_expect(n == 0 && ns == 0, "reset");
  ag_table_free(t);
}

#define THREADS 8
#define KEYS 97
#define ROUNDS 20000

struct hammer {
  ag_table_t *t;
  int id;
};

static void *hammer_main(void *arg)
{
  struct hammer *h = arg;
  for (int r = 0; r < ROUNDS; r++) {
    ag_sig_t k = key((r * 7 + h->id * 13) % KEYS);
    ag_entry_t *e = ag_table_get(h->t, &k);
    if (!e)
      return (void *)1;
    atomic_fetch_add_explicit(&e->calls, 1, memory_order_relaxed);
  }
  return NULL;
}

static void hammer(ag_hash_fn hash)
{
  ag_table_t *t = ag_table_new(128, hash);
  pthread_t th[THREADS];
  struct hammer h[THREADS];
  for (int i = 0; i < THREADS; i++) {
    h[i] = (struct hammer){t, i};
    cr_assert_eq(pthread_create(&th[i], NULL, hammer_main, &h[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    void *rv;
    pthread_join(th[i], &rv);
    cr_assert_null(rv, "thread %d found the table full", i);
  }
  /* Each thread's calls per key are known: recount them and compare key by key. */
  uint64_t expect[KEYS] = {0}, total = 0;
  for (int i = 0; i < THREADS; i++)
    for (int r = 0; r < ROUNDS; r++)
      expect[(r * 7 + i * 13) % KEYS]++;
  cr_assert_eq(ag_table_count(t), KEYS);
  for (int i = 0; i < KEYS; i++) {
    ag_sig_t k = key(i);
    ag_entry_t *e = ag_table_get(t, &k);
    cr_assert_eq(atomic_load(&e->calls), expect[i], "key %d: %llu calls, expected %llu", i,
                 (unsigned long long)atomic_load(&e->calls), (unsigned long long)expect[i]);
    total += atomic_load(&e->calls);
  }
  cr_assert_eq(total, (uint64_t)THREADS * ROUNDS);
  ag_table_free(t);
}

Test(table, eight_threads_lose_no_count) { hammer(NULL); }

Test(table, eight_threads_with_colliding_hashes_lose_no_count) { hammer(constant_hash); }
