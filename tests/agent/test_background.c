/* SPDX-License-Identifier: MIT */
/* The agent's background work as the judge's bursts see it (background.c, linked in): a mark
 * taken while nothing runs stays quiet until work begins; work that began, even if it has
 * ended, or that was running when the mark was taken, makes it loud; any thread may begin and
 * end work; a fork child has none under way. */
#include "agent/background.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

Test(background, a_mark_is_quiet_until_work_begins)
{
  uint32_t m = ag_bg_mark();
  cr_assert(ag_bg_quiet_since(m));
  cr_assert(ag_bg_quiet_since(m), "asking twice changes nothing");
  cr_assert_not(ag_bg_busy());
  ag_bg_begin();
  cr_assert(ag_bg_busy());
  cr_assert_not(ag_bg_quiet_since(m), "work under way");
  ag_bg_end();
  cr_assert_not(ag_bg_busy());
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

Test(background, a_fork_child_has_no_work_under_way)
{
  ag_bg_begin(); /* the parent's compile, say, in flight when the host forks */
  uint32_t before = ag_bg_mark();
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    ag_bg_after_fork_child();
    int ok = !ag_bg_busy() && !ag_bg_quiet_since(before) && ag_bg_quiet_since(ag_bg_mark());
    _exit(ok ? 0 : 1);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child still saw the parent's work");
  cr_assert(ag_bg_busy(), "the parent's work goes on");
  ag_bg_end();
  cr_assert_not(ag_bg_busy());
}
