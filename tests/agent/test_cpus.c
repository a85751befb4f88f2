/* SPDX-License-Identifier: MIT */
/* The agent's threads and the host's calling thread's CPU (cpus.c, ag_agent_keep_off): while
 * that thread runs, an agent thread runs on the process's other CPUs, and follows it when it
 * moves; while it sleeps, or with no such thread, on all of them; a thread not the agent's is
 * left as it is. The host's thread here is the test's, pinned to one CPU and then another. */
#define _GNU_SOURCE
#include "agent/agent.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

/* Pins the calling thread to CPU c alone. */
static void pin(int c)
{
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(c, &one);
  cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
  for (int i = 0; i < 1000 && sched_getcpu() != c; i++) /* until the move is done */
    usleep(1000);
  cr_assert_eq(sched_getcpu(), c);
}

/* The agent's thread: asked (ask > 0), it keeps off thread ask (ask - 1: 0 none), once that
 * thread sleeps when asleep is set, notes its CPUs and writes a byte to done; ask -1 ends it. */
static _Atomic long ask;
static _Atomic int asleep;
static cpu_set_t got;
static int done[2];

/* Waits (1 s at most) until thread tid is not running (cpus.c: not in state R). */
static void wait_asleep(pid_t tid)
{
  for (int i = 0; i < 1000 && ag_thread_running_cpu(tid) >= 0; i++)
    usleep(1000);
}

static void *agent_main(void *arg)
{
  (void)arg;
  ag_agent_thread_begin("opjit-test");
  for (long a; (a = atomic_load(&ask)) >= 0;) {
    if (!a) {
      usleep(200);
      continue;
    }
    if (atomic_load(&asleep)) /* the asker is on its way into read(): until it is there */
      wait_asleep((pid_t)(a - 1));
    ag_agent_keep_off((pid_t)(a - 1));
    pthread_getaffinity_np(pthread_self(), sizeof got, &got);
    atomic_store(&ask, 0);
    cr_assert_eq(write(done[1], "", 1), 1);
  }
  return NULL;
}

/* Asks the agent's thread to keep off caller while this thread runs (spinning: state R) or
 * sleeps (blocked in a read); returns the agent thread's CPUs then. */
static cpu_set_t keep_off(pid_t caller, int running)
{
  char c;
  atomic_store(&asleep, !running);
  atomic_store(&ask, caller + 1);
  if (running)
    while (atomic_load(&ask))
      ;
  cr_assert_eq(read(done[0], &c, 1), 1);
  return got;
}

/* Whether set is the process's CPUs without CPU c (c < 0: all of them). */
static int all_but(const cpu_set_t *set, const cpu_set_t *all, int c)
{
  cpu_set_t want = *all;
  if (c >= 0)
    CPU_CLR(c, &want);
  return CPU_EQUAL(set, &want);
}

Test(cpus, an_agent_thread_keeps_off_the_cpu_of_the_host_thread_while_it_runs)
{
  ag_note_process_cpus(); /* as the agent's constructor does, before anything is pinned */
  cpu_set_t all, mine;
  cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
  if (CPU_COUNT(&all) < 2)
    cr_skip_test("needs a process that may use at least 2 CPUs (it has %d)", CPU_COUNT(&all));
  int first = -1, second = -1;
  for (int c = 0; c < CPU_SETSIZE && second < 0; c++)
    if (CPU_ISSET(c, &all))
      *(first < 0 ? &first : &second) = c;
  cr_assert_eq(pipe(done), 0);
  pid_t me = gettid();
  pin(first);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, agent_main, NULL), 0);

  cpu_set_t s = keep_off(me, 1);
  cr_expect(all_but(&s, &all, first), "the agent thread may run on %d CPUs, the host's (%d) "
            "%s", CPU_COUNT(&s), first, CPU_ISSET(first, &s) ? "among them" : "not");

  pin(second); /* the host's thread moved: the next piece of work follows it */
  s = keep_off(me, 1);
  cr_expect(all_but(&s, &all, second), "the agent thread stayed off CPU %d, not %d", first,
            second);

  s = keep_off(me, 0); /* the host's thread sleeps: its CPU is free */
  cr_expect(all_but(&s, &all, -1), "beside a sleeping host thread, the agent thread runs on %d "
            "of %d CPUs", CPU_COUNT(&s), CPU_COUNT(&all));

  s = keep_off(me, 1);
  cr_expect(all_but(&s, &all, second), "kept off again once the host's thread runs");
  s = keep_off(0, 1); /* no one calling thread (several call operators, or none yet) */
  cr_expect(all_but(&s, &all, -1), "with no host thread to keep off, %d of %d CPUs",
            CPU_COUNT(&s), CPU_COUNT(&all));

  ag_agent_keep_off(me); /* from the host's own thread: not an agent thread, left as it is */
  cr_assert_eq(sched_getaffinity(0, sizeof mine, &mine), 0);
  cr_expect(CPU_COUNT(&mine) == 1 && CPU_ISSET(second, &mine), "the host thread's own CPUs "
            "changed");

  atomic_store(&ask, -1);
  pthread_join(t, NULL);
}
