/* SPDX-License-Identifier: MIT */
/* The run's series (series.c, linked in): running totals become per-interval differences, the
 * intervals stay at most AG_SERIES_MAX by merging in pairs as the interval doubles, the totals
 * over the run never change, and only signatures that had calls get a row. */
#include "agent/series.h"

#include <criterion/criterion.h>

#define MS 1000000ull

/* The sum of a row's intervals [0, count). */
static uint64_t sum(const uint64_t *v, uint32_t count)
{
  uint64_t s = 0;
  for (uint32_t k = 0; k < count; k++)
    s += v[k];
  return s;
}

Test(series, differences_go_to_the_interval_of_the_tick)
{
  ag_series_t *s = ag_series_new(100 * MS);
  cr_assert_not_null(s);
  uint64_t calls[3] = {10, 0, 4}, vcalls[3] = {0, 0, 1}, samples[3] = {2, 0, 0};
  cr_assert_eq(ag_series_tick(s, 50 * MS, 3, calls, vcalls, samples, 7), 0);
  calls[0] = 25, vcalls[0] = 5, samples[0] = 3;
  cr_assert_eq(ag_series_tick(s, 250 * MS, 3, calls, vcalls, samples, 9), 0);
  cr_assert_eq(ag_series_count(s), 3);
  const ag_series_row_t *r = ag_series_row(s, 0);
  cr_assert_not_null(r);
  cr_assert_eq(r->calls[0], 10);
  cr_assert_eq(r->calls[1], 0);
  cr_assert_eq(r->calls[2], 15);
  cr_assert_eq(r->vcalls[2], 5);
  cr_assert_eq(r->samples[0], 2);
  cr_assert_eq(r->samples[2], 1);
  cr_assert_null(ag_series_row(s, 1), "entry 1 had no call: no row");
  cr_assert_eq(ag_series_row(s, 2)->calls[0], 4);
  cr_assert_eq(ag_series_row(s, 2)->calls[2], 0, "no growth after its first tick");
  cr_assert_eq(ag_series_outside(s)->samples[0], 7);
  cr_assert_eq(ag_series_outside(s)->samples[2], 2);
  cr_assert_null(ag_series_row(s, 3), "beyond the entries ever seen");
  ag_series_free(s);
}

Test(series, a_long_run_merges_intervals_in_pairs_and_keeps_the_totals)
{
  const uint64_t tick = 10 * MS;
  ag_series_t *s = ag_series_new(tick);
  cr_assert_not_null(s);
  uint64_t calls = 0, vcalls = 0, samples = 0, outside = 0;
  /* 5000 ticks: the interval must double 5 times (256 * 2^4 < 5000 <= 256 * 2^5). */
  for (uint64_t t = 1; t <= 5000; t++) {
    calls += t % 7, vcalls += t % 3 == 0, samples += 1, outside += t % 2;
    cr_assert_eq(ag_series_tick(s, t * tick, 1, &calls, &vcalls, &samples, outside), 0);
    cr_assert_leq(ag_series_count(s), AG_SERIES_MAX);
  }
  cr_assert_eq(ag_series_interval(s), tick << 5);
  cr_assert_eq(ag_series_count(s), 5000 / 32 + 1);
  const ag_series_row_t *r = ag_series_row(s, 0);
  uint32_t n = ag_series_count(s);
  cr_assert_eq(sum(r->calls, n), calls);
  cr_assert_eq(sum(r->vcalls, n), vcalls);
  cr_assert_eq(sum(r->samples, n), samples);
  cr_assert_eq(sum(ag_series_outside(s)->samples, n), outside);
  /* Interval k now holds ticks [32k, 32k + 32): one sample each (tick 0 was never made). */
  cr_assert_eq(r->samples[0], 31);
  for (uint32_t k = 1; k + 1 < n; k++)
    cr_assert_eq(r->samples[k], 32, "interval %u", k);
  cr_assert_eq(r->samples[n - 1], 5000 - 32 * (n - 1) + 1, "ticks 32(n - 1) to 5000");
  for (uint32_t k = n; k < AG_SERIES_MAX; k++)
    cr_assert_eq(r->calls[k] | r->samples[k], 0, "interval %u is past the data", k);
  ag_series_free(s);
}

Test(series, a_tick_far_ahead_merges_as_often_as_it_needs)
{
  ag_series_t *s = ag_series_new(1 * MS);
  uint64_t calls = 3;
  cr_assert_eq(ag_series_tick(s, 0, 1, &calls, NULL, NULL, 0), 0);
  calls = 8;
  cr_assert_eq(ag_series_tick(s, 1000 * MS, 1, &calls, NULL, NULL, 0), 0);
  cr_assert_eq(ag_series_interval(s), 4 * MS, "1000 ms fits 256 intervals of 4 ms");
  cr_assert_eq(ag_series_count(s), 251);
  cr_assert_eq(ag_series_row(s, 0)->calls[0], 3);
  cr_assert_eq(ag_series_row(s, 0)->calls[250], 5);
  ag_series_free(s);
}

Test(series, totals_that_shrink_restart_from_them)
{
  ag_series_t *s = ag_series_new(1 * MS);
  uint64_t calls = 100;
  ag_series_tick(s, 0, 1, &calls, NULL, NULL, 0);
  calls = 4; /* a fork child's counts restart from zero */
  ag_series_tick(s, 2 * MS, 1, &calls, NULL, NULL, 0);
  cr_assert_eq(ag_series_row(s, 0)->calls[2], 4);
  ag_series_free(s);
}

Test(series, signatures_past_the_first_ones_share_the_rest)
{
  enum { N = AG_SERIES_SIGS + 3 };
  ag_series_t *s = ag_series_new(1 * MS);
  static uint64_t calls[N], samples[N];
  for (int i = 0; i < N; i++)
    calls[i] = i % 2 ? 0 : 1; /* the odd entries are called at the second tick */
  cr_assert_eq(ag_series_tick(s, 0, N, calls, NULL, samples, 0), 0);
  cr_assert_null(ag_series_rest(s), "(N + 1) / 2 signatures: a row each");
  for (int i = 0; i < N; i++)
    calls[i] = 3, samples[i] = 1;
  cr_assert_eq(ag_series_tick(s, 1 * MS, N, calls, NULL, samples, 0), 0);
  uint32_t own = 0;
  for (int i = 0; i < N; i++)
    own += ag_series_row(s, (uint32_t)i) != NULL;
  cr_expect_eq(own, AG_SERIES_SIGS);
  const ag_series_row_t *rest = ag_series_rest(s);
  cr_assert_not_null(rest);
  uint32_t shared = N - AG_SERIES_SIGS;
  cr_expect_eq(rest->calls[1], 3 * shared, "their calls, summed");
  cr_expect_eq(rest->samples[1], shared);
  cr_expect_eq(ag_series_row(s, 0)->calls[1], 2, "a row of its own keeps its own");
  ag_series_free(s);
}
