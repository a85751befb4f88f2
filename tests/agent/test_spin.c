/* SPDX-License-Identifier: MIT */
/* A library's pool spinning as the judge sees it (spin.c, tcount.c and cpus.c, linked in, with
 * the thread state agent.c would define): the other threads' CPU time counts real threads that
 * spin and leaves out the agent's (from whenever they begin as such) and those that call
 * operators; the rule arms holds while the other threads rest or have been busy for under
 * AG_SPIN_BUSY_MAX_NS; a hold (a burst's end, a publication's) lasts while a window that began
 * after it finds them busy, and ends at the first quiet one; nothing holds without a split
 * variant, in a host without threads, or in a fork child. */
#define _GNU_SOURCE
#include "agent/agent.h"
#include "agent/spin.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The thread state the agent defines in agent.c (tcount.c registers callers in it). */
AG_TLS ag_thread_t ag_tl;

/* threads.c's: whether the host started threads of its own. */
static int threaded = 1;
int ag_host_threaded(void) { return threaded; }

static void setup(void)
{
  static ag_table_t *table;
  if (!table) {
    table = ag_table_new(16, NULL);
    cr_assert_not_null(table);
    cr_assert_eq(ag_tcount_init(table, 16), 0);
  }
  threaded = 1;
  ag_spin_look(0); /* no split variant: the state starts over */
}
TestSuite(spin, .init = setup);

static void sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts))
    ;
}

/* A thread that spins while spinning is set, else sleeps, until stop; one of the agent's
 * threads (ag_agent_thread_begin) when named, a caller of operators when caller is set, and the
 * agent's from when become_agent is set. */
typedef struct spinner_s {
  pthread_t th;
  const char *name;
  int caller;
  _Atomic int spinning, stop, ready, become_agent;
  clockid_t clock;
} spinner_t;

static void *spinner_main(void *arg)
{
  spinner_t *s = arg;
  if (s->name)
    ag_agent_thread_begin(s->name);
  if (s->caller)
    ag_tcount_register();
  atomic_store(&s->ready, 1);
  while (!atomic_load(&s->stop)) {
    if (atomic_exchange(&s->become_agent, 0))
      ag_agent_thread_begin("opjit-late");
    if (!atomic_load(&s->spinning))
      sleep_ms(1);
  }
  return NULL;
}

static void start(spinner_t *s, const char *name, int caller)
{
  *s = (spinner_t){.name = name, .caller = caller};
  atomic_store(&s->spinning, 1);
  cr_assert_eq(pthread_create(&s->th, NULL, spinner_main, s), 0);
  cr_assert_eq(pthread_getcpuclockid(s->th, &s->clock), 0);
  while (!atomic_load(&s->ready)) /* named and registered */
    sleep_ms(1);
}

static void finish(spinner_t *s)
{
  atomic_store(&s->stop, 1);
  pthread_join(s->th, NULL);
}

static uint64_t cpu_ns(const spinner_t *s)
{
  struct timespec ts;
  cr_assert_eq(clock_gettime(s->clock, &ts), 0);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A pool of POOL threads spinning: busy on a loaded machine too. */
#define POOL 4
static void pool_start(spinner_t *p)
{
  for (int i = 0; i < POOL; i++)
    start(&p[i], NULL, 0);
}

/* The pool goes to sleep, and the judge looks over a window after that. */
static void pool_rest(spinner_t *p)
{
  for (int i = 0; i < POOL; i++)
    atomic_store(&p[i].spinning, 0);
  sleep_ms(15);
  ag_spin_look(1);
  sleep_ms(30);
  ag_spin_look(1);
}

static void pool_finish(spinner_t *p)
{
  for (int i = 0; i < POOL; i++)
    finish(&p[i]);
}

Test(spin, the_other_threads_are_the_hosts_own_not_the_agents_nor_the_callers)
{
  spinner_t pool, agent, caller;
  start(&pool, NULL, 0);
  start(&agent, "opjit-test", 0);
  start(&caller, NULL, 1);
  uint64_t window;
  cr_assert_eq(ag_spin_others_ns(&window), 0, "the first look has nothing to compare with");
  cr_assert_eq(window, 0);
  uint64_t before = cpu_ns(&pool);
  (void)ag_spin_others_ns(&window); /* from here, until the pool thread has had 20 ms of CPU
                                       (however loaded the machine is) */
  for (int i = 0; i < 500 && cpu_ns(&pool) - before < 20000000u; i++)
    sleep_ms(10);
  uint64_t busy = ag_spin_others_ns(&window), got = cpu_ns(&pool) - before;
  cr_assert_geq(window + 1000000u, got, "the window %.1f ms", window / 1e6);
  cr_assert_geq(got, 20000000u, "the spinning thread ran (%.1f ms)", got / 1e6);
  /* the agent's and the caller's spin as long: counted, they would triple it */
  cr_assert(busy <= got + 1000000u && busy + got / 5 + 1000000u >= got,
            "the others took %.1f ms, the pool thread %.1f ms", busy / 1e6, got / 1e6);
  atomic_store(&pool.spinning, 0);
  sleep_ms(5);
  (void)ag_spin_others_ns(&window);
  sleep_ms(40);
  busy = ag_spin_others_ns(&window);
  cr_assert_lt(busy, window / 10, "the pool thread sleeps: %.1f ms of %.1f", busy / 1e6,
               window / 1e6);
  finish(&pool), finish(&agent), finish(&caller);
}

Test(spin, a_thread_that_begins_as_the_agents_after_a_first_look_is_the_agents)
{
  spinner_t late;
  start(&late, NULL, 0);
  uint64_t window;
  (void)ag_spin_others_ns(&window);
  atomic_store(&late.become_agent, 1);
  while (atomic_load(&late.become_agent))
    sleep_ms(1);
  (void)ag_spin_others_ns(&window);
  sleep_ms(30);
  uint64_t busy = ag_spin_others_ns(&window);
  cr_assert_lt(busy, window / 10, "%.1f ms of %.1f counted", busy / 1e6, window / 1e6);
  finish(&late);
}

Test(spin, the_rule_arms_while_the_others_rest_or_were_busy_briefly)
{
  uint64_t since = 0, ms = 1000000;
  int quiet;
  cr_assert(ag_spin_rule(4 * ms, 20 * ms, 1000 * ms, &since, &quiet));
  cr_assert(quiet, "a fifth of a CPU");
  cr_assert_eq(since, 0);
  cr_assert(ag_spin_rule(15 * ms, 20 * ms, 1020 * ms, &since, &quiet));
  cr_assert_not(quiet, "three quarters of a CPU");
  cr_assert_eq(since, 1000 * ms, "busy from the window's start");
  cr_assert(ag_spin_rule(20 * ms, 20 * ms, 1499 * ms, &since, &quiet), "busy for 499 ms");
  cr_assert_not(ag_spin_rule(20 * ms, 20 * ms, 1500 * ms, &since, &quiet),
                "busy for AG_SPIN_BUSY_MAX_NS: their own work");
  cr_assert_not(quiet);
  cr_assert(ag_spin_rule(0, 20 * ms, 1520 * ms, &since, &quiet), "they rest: armed again");
  cr_assert(quiet);
  cr_assert_eq(since, 0);
  cr_assert(ag_spin_rule(39 * ms, 40 * ms, 1560 * ms, &since, &quiet));
  cr_assert_eq(since, 1520 * ms, "a new busy stretch counts from its own start");
}

Test(spin, a_bursts_hold_lasts_until_a_later_window_is_quiet)
{
  ag_spin_look(1); /* the first look: armed */
  sleep_ms(15);
  ag_spin_burst_end();
  cr_assert(atomic_load(&ag_spin_hold), "a burst's end holds");
  ag_spin_look(1);
  cr_assert(atomic_load(&ag_spin_hold), "the window began before the burst ended");
  sleep_ms(15);
  ag_spin_look(1);
  cr_assert_not(atomic_load(&ag_spin_hold), "a quiet window after it");

  spinner_t p[POOL];
  pool_start(p);
  sleep_ms(15);
  ag_spin_look(1);
  ag_spin_burst_end();
  sleep_ms(30);
  ag_spin_look(1);
  cr_assert(atomic_load(&ag_spin_hold), "the pool spins after the burst");
  sleep_ms(30);
  ag_spin_look(1);
  cr_assert(atomic_load(&ag_spin_hold), "and spins on");
  pool_rest(p);
  cr_assert_not(atomic_load(&ag_spin_hold), "the pool went to sleep");
  pool_finish(p);
}

Test(spin, a_publication_holds_before_any_look)
{
  ag_spin_begin_hold(); /* no split variant was live: not armed */
  cr_assert(atomic_load(&ag_spin_hold));
  ag_spin_look(1);
  cr_assert(atomic_load(&ag_spin_hold), "the first look measures nothing");
  sleep_ms(15);
  ag_spin_look(1);
  cr_assert_not(atomic_load(&ag_spin_hold), "a quiet window after it");
}

Test(spin, threads_busy_for_long_are_the_programs_own_work)
{
  spinner_t p[POOL];
  pool_start(p);
  /* before the first look: the rule counts them busy from it (the window a look measures starts
   * at the look before), so a clock read after it found the holds stopped at 499 ms */
  uint64_t t0 = ag_now_ns(), t = t0;
  ag_spin_look(1);
  int held = 1; /* until a burst's end no longer holds (a look that finds them resting, on a
                   loaded machine, starts the count again: the end may come later, never sooner) */
  while (held && t - t0 < 4000000000u) {
    sleep_ms(25);
    ag_spin_look(1);
    ag_spin_burst_end();
    held = atomic_load(&ag_spin_hold);
    t = ag_now_ns();
  }
  cr_assert_not(held, "busy for %.0f ms on end: still holding", (t - t0) / 1e6);
  cr_assert_geq(t - t0, AG_SPIN_BUSY_MAX_NS, "holds stopped after %.0f ms", (t - t0) / 1e6);
  pool_rest(p);
  ag_spin_burst_end();
  cr_assert(atomic_load(&ag_spin_hold), "they rested: a burst holds again");
  pool_finish(p);
}

Test(spin, nothing_holds_without_a_split_variant_or_a_threaded_host)
{
  ag_spin_look(1);
  ag_spin_burst_end();
  cr_assert(atomic_load(&ag_spin_hold));
  ag_spin_look(0);
  cr_assert_not(atomic_load(&ag_spin_hold), "the split variant went");
  ag_spin_burst_end();
  cr_assert_not(atomic_load(&ag_spin_hold), "not armed");
  threaded = 0;
  ag_spin_look(1);
  ag_spin_look(1);
  ag_spin_burst_end();
  cr_assert_not(atomic_load(&ag_spin_hold), "a host without threads of its own");
}

Test(spin, a_fork_child_holds_nothing)
{
  ag_spin_look(1);
  ag_spin_burst_end();
  cr_assert(atomic_load(&ag_spin_hold));
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    ag_spin_after_fork_child();
    int held = atomic_load(&ag_spin_hold);
    ag_spin_burst_end();
    _exit(held || atomic_load(&ag_spin_hold) ? 1 : 0);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child held");
}
