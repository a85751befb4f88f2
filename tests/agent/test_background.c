/* SPDX-License-Identifier: MIT */
/* The agent's background work as the judge's bursts see it (background.c, linked in): a mark
 * taken while nothing runs stays quiet until work begins; work that began, even if it has
 * ended, or that was running when the mark was taken, makes it loud; any thread may begin and
 * end work. */
#include "agent/background.h"

#include <criterion/criterion.h>
#include <pthread.h>

Test(background, a_mark_is_quiet_until_work_begins)
{
  uint32_t m = ag_bg_mark();
  cr_assert(ag_bg_quiet_since(m));
  cr_assert(ag_bg_quiet_since(m), "asking twice changes nothing");
  ag_bg_begin();
  cr_assert_not(ag_bg_quiet_since(m), "work under way");
  ag_bg_end();
  cr_assert_not(ag_bg_quiet_since(m), "work ran since the mark");
  cr_assert(ag_bg_quiet_since(ag_bg_mark()), "a new mark after it is quiet");
}

Test(background, a_mark_taken_during_work_is_never_quiet)
{
  ag_bg_begin();
  uint32_t m = ag_bg_mark();
  cr_assert_not(ag_bg_quiet_since(m));
  ag_bg_end();
  cr_assert_not(ag_bg_quiet_since(m), "the work overlapped the burst's start");
}

static void *worker(void *arg)
{
  for (int i = 0; i < 10000; i++) {
    ag_bg_begin();
    ag_bg_end();
  }
  return arg;
}

Test(background, threads_begin_and_end_work_at_once)
{
  pthread_t t[4];
  uint32_t m = ag_bg_mark();
  for (int i = 0; i < 4; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, worker, NULL), 0);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  cr_assert_not(ag_bg_quiet_since(m));
  cr_assert(ag_bg_quiet_since(ag_bg_mark()), "every begin was ended: nothing runs now");
}
