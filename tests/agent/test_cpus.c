/* SPDX-License-Identifier: MIT */
/* The agent's threads and the host thread's CPU (cpus.c, ag_agent_keep_off_host): where the host
 * runs its calls on one thread, an agent thread runs on the process's other CPUs, follows that
 * thread when it moves, and runs on all of them once the host has threads of its own. The host's
 * thread here is the test's first thread, pinned to one CPU and then another. */
#define _GNU_SOURCE
#include "agent/agent.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
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

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  int ask; /* 0 idle, 1 keep off (host without threads), 2 keep off (host threaded), 3 stop */
  cpu_set_t got; /* the agent thread's CPUs after the last ask */
} agent_t;

static void *agent_main(void *arg)
{
  agent_t *a = arg;
  ag_agent_thread_begin("opjit-test");
  pthread_mutex_lock(&a->mu);
  for (;;) {
    while (!a->ask)
      pthread_cond_wait(&a->cond, &a->mu);
    if (a->ask == 3)
      break;
    ag_agent_keep_off_host(a->ask == 2);
    pthread_getaffinity_np(pthread_self(), sizeof a->got, &a->got);
    a->ask = 0;
    pthread_cond_broadcast(&a->cond);
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

/* Asks the agent thread to keep off (host_threaded as given); returns its CPUs then. */
static cpu_set_t ask(agent_t *a, int host_threaded)
{
  pthread_mutex_lock(&a->mu);
  a->ask = host_threaded ? 2 : 1;
  pthread_cond_broadcast(&a->cond);
  while (a->ask)
    pthread_cond_wait(&a->cond, &a->mu);
  cpu_set_t got = a->got;
  pthread_mutex_unlock(&a->mu);
  return got;
}

Test(cpus, an_agent_thread_keeps_off_the_cpu_of_a_host_that_has_one_thread)
{
  ag_note_process_cpus(); /* as the agent's constructor does, before anything is pinned */
  cpu_set_t all;
  cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
  if (CPU_COUNT(&all) < 2)
    cr_skip_test("needs a process that may use at least 2 CPUs (it has %d)", CPU_COUNT(&all));
  int first = -1, second = -1;
  for (int c = 0; c < CPU_SETSIZE && second < 0; c++)
    if (CPU_ISSET(c, &all))
      *(first < 0 ? &first : &second) = c;
  pin(first);
  agent_t a = {.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, agent_main, &a), 0);

  cpu_set_t got = ask(&a, 0), want = all;
  CPU_CLR(first, &want);
  cr_expect(CPU_EQUAL(&got, &want), "the agent thread may run on %d CPUs, the host's among "
            "them: %d", CPU_COUNT(&got), CPU_ISSET(first, &got));

  pin(second); /* the host's thread moved: the next piece of work follows it */
  got = ask(&a, 0), want = all;
  CPU_CLR(second, &want);
  cr_expect(CPU_EQUAL(&got, &want), "the agent thread stayed off CPU %d, not %d", first,
            second);

  got = ask(&a, 1); /* a host with threads of its own: every CPU may be one of theirs */
  cr_expect(CPU_EQUAL(&got, &all), "a threaded host's agent thread runs on %d of %d CPUs",
            CPU_COUNT(&got), CPU_COUNT(&all));

  pthread_mutex_lock(&a.mu);
  a.ask = 3;
  pthread_cond_broadcast(&a.cond);
  pthread_mutex_unlock(&a.mu);
  pthread_join(t, NULL);
}
