/* SPDX-License-Identifier: MIT */
/* The event log: events come out oldest first, in batches of the writer's size; a full log
 * drops and counts new events instead of blocking; details are truncated, never overrun; many
 * threads adding at once lose nothing that fits. */
#include "agent/events.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

Test(events, taken_oldest_first_in_batches_with_their_stamp_and_detail)
{
  static ag_events_t log = AG_EVENTS_INIT;
  int64_t t0 = now_ns();
  for (uint32_t i = 0; i < 10; i++)
    ag_events_add(&log, i, (int)i % 3, "event %u", i);
  int64_t t1 = now_ns();
  ag_event_rec_t out[4];
  uint32_t next = 0;
  int64_t last = 0;
  size_t n;
  while ((n = ag_events_take(&log, out, 4)) > 0) {
    cr_assert_leq(n, 4);
    for (size_t j = 0; j < n; j++, next++) {
      char want[32];
      snprintf(want, sizeof want, "event %u", next);
      cr_assert_eq(out[j].index, next);
      cr_assert_eq(out[j].kind, (int)next % 3);
      cr_assert_str_eq(out[j].detail, want);
      cr_assert(out[j].time_ns >= t0 && out[j].time_ns <= t1, "stamped when added");
      cr_assert_geq(out[j].time_ns, last, "in the order they were added");
      last = out[j].time_ns;
    }
  }
  cr_assert_eq(next, 10, "every event once");
  cr_assert_eq(ag_events_take(&log, out, 4), 0);
}

Test(events, a_full_log_drops_and_counts_new_events_and_keeps_the_old)
{
  static ag_events_t log = AG_EVENTS_INIT;
  for (uint32_t i = 0; i < AG_EVENTS_MAX + 7; i++)
    ag_events_add(&log, i, 0, "%u", i);
  cr_assert_eq(ag_events_dropped(&log), 7);
  static ag_event_rec_t out[AG_EVENTS_MAX + 7];
  cr_assert_eq(ag_events_take(&log, out, AG_EVENTS_MAX + 7), AG_EVENTS_MAX);
  cr_assert_eq(out[0].index, 0);
  cr_assert_eq(out[AG_EVENTS_MAX - 1].index, AG_EVENTS_MAX - 1,
               "the newest kept is the last that fit");
  ag_events_add(&log, 99, 1, "room again");
  cr_assert_eq(ag_events_take(&log, out, 8), 1);
  cr_assert_eq(out[0].index, 99);
  cr_assert_eq(ag_events_dropped(&log), 7);
}

Test(events, a_long_detail_is_truncated_to_fit)
{
  static ag_events_t log = AG_EVENTS_INIT;
  char longer[400];
  memset(longer, 'x', sizeof longer - 1);
  longer[sizeof longer - 1] = 0;
  ag_events_add(&log, 1, 2, "%s", longer);
  ag_event_rec_t out;
  cr_assert_eq(ag_events_take(&log, &out, 1), 1);
  cr_assert_eq(strlen(out.detail), sizeof out.detail - 1);
}

static ag_events_t shared = AG_EVENTS_INIT;

static void *adder(void *arg)
{
  uint32_t base = (uint32_t)(uintptr_t)arg;
  for (uint32_t i = 0; i < 100; i++)
    ag_events_add(&shared, base + i, 0, "t");
  return NULL;
}

Test(events, threads_adding_at_once_lose_nothing_that_fits)
{
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, adder, (void *)(i * 1000)), 0);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  static ag_event_rec_t out[AG_EVENTS_MAX];
  size_t n = ag_events_take(&shared, out, AG_EVENTS_MAX);
  cr_assert_eq(n, 400);
  int seen[4] = {0}, prev[4] = {-1, -1, -1, -1};
  for (size_t j = 0; j < n; j++) {
    int th = (int)(out[j].index / 1000), i = (int)(out[j].index % 1000);
    cr_assert_eq(i, prev[th] + 1, "each thread's events in its order");
    prev[th] = i, seen[th]++;
  }
  for (int i = 0; i < 4; i++)
    cr_assert_eq(seen[i], 100);
  cr_assert_eq(ag_events_dropped(&shared), 0);
}
