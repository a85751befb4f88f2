/* SPDX-License-Identifier: MIT */
/* The thread's key cache (agent.h: ag_lookup, with the thread state agent.c would define): a
 * loop over more keys than the direct-mapped cache it replaced had slots finds every key in the
 * cache from its second pass on, and a set keeps its two most recent keys, each lookup
 * returning its key's own entry. */
#include "agent/agent.h"
#include "agent/hosts/blas_key.h"

#include <criterion/criterion.h>

AG_TLS ag_thread_t ag_tl;
ag_table_t *ag_table;

static ag_tlc_slot_t tlc[AG_TLC_SLOTS];

static void setup(void)
{
  ag_tl.tlc = tlc; /* as the thread's registration sets it (tcount.c) */
  ag_table = ag_table_new(1024, NULL);
  cr_assert_not_null(ag_table);
}

static void teardown(void) { ag_table_free(ag_table); }

TestSuite(lookup, .init = setup, .fini = teardown);

static ag_sig_t gemm(int f64, int m, int n, int k)
{
  return ag_sig_make(AG_HOST_ID_BLAS, AG_OP_GEMM, f64 ? AG_F64 : AG_F32, AG_API_F77, 0, 0, 0, 0,
                     m, n, k, m, k, m);
}

/* 1 when key is in one of its set's two slots. */
static int cached(const ag_sig_t *key)
{
  const uint64_t *w = (const uint64_t *)(const void *)key;
  ag_tlc_slot_t *s = ag_tlc_set(ag_tl.tlc, w);
  return ag_tlc_holds(&s[0], w) || ag_tlc_holds(&s[1], w);
}

Test(lookup, a_loop_over_fourteen_shapes_finds_each_in_the_cache_from_its_second_pass)
{
  /* bench_smallgemm_worker's shapes: 14 keys, which 8 direct-mapped slots could not hold */
  static const int shapes[14][4] = {
      {0, 4, 4, 4},    {1, 8, 8, 8},    {0, 16, 16, 16}, {1, 12, 20, 16}, {0, 32, 32, 32},
      {1, 32, 32, 32}, {0, 48, 24, 64}, {1, 24, 24, 48}, {0, 64, 64, 64}, {1, 64, 64, 64},
      {0, 20, 36, 12}, {1, 40, 16, 56}, {0, 8, 64, 32},  {1, 56, 56, 56}};
  ag_entry_t *e[14];
  for (int pass = 0; pass < 3; pass++)
    for (int i = 0; i < 14; i++) {
      ag_sig_t k = gemm(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
      if (pass)
        cr_assert(cached(&k), "pass %d: shape %d missed the thread's cache", pass, i);
      ag_entry_t *got = ag_lookup(&k);
      cr_assert_not_null(got);
      if (!pass)
        e[i] = got;
      cr_assert_eq(got, e[i], "pass %d: shape %d found another entry", pass, i);
      cr_assert_eq(got, ag_table_get(ag_table, &k));
    }
}

Test(lookup, a_set_keeps_its_two_most_recent_keys)
{
  /* three keys of one set, found by their hash */
  ag_sig_t k[3];
  int n = 0;
  ag_sig_t first = gemm(0, 1, 1, 1);
  ag_tlc_slot_t *set = ag_tlc_set(ag_tl.tlc, (const uint64_t *)(const void *)&first);
  k[n++] = first;
  for (int m = 2; n < 3 && m < 100000; m++) {
    ag_sig_t c = gemm(0, m, 1, 1);
    if (ag_tlc_set(ag_tl.tlc, (const uint64_t *)(const void *)&c) == set)
      k[n++] = c;
  }
  cr_assert_eq(n, 3, "no three keys of one set among 100,000");
  ag_entry_t *e[3];
  for (int i = 0; i < 3; i++)
    e[i] = ag_lookup(&k[i]);
  cr_assert(!cached(&k[0]), "the set's oldest key stayed beside two newer ones");
  cr_assert(cached(&k[1]) && cached(&k[2]));
  cr_assert_eq(set[0].e, e[2], "the newest key is not first in its set");
  cr_assert_eq(set[1].e, e[1]);
  for (int i = 0; i < 3; i++) /* the evicted key's entry comes from the table, unchanged */
    cr_assert_eq(ag_lookup(&k[i]), e[i]);
  cr_assert(cached(&k[1]) && cached(&k[2]) && !cached(&k[0]));
}
