/* SPDX-License-Identifier: MIT */
/* The agent's own threads' names and CPUs (agent.h: ag_agent_thread_begin). */
#define _GNU_SOURCE
#include "agent.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

/* The CPUs the process could use when the agent loaded (its constructor, before main). */
static cpu_set_t process_cpus;
static int have_process_cpus;

void ag_note_process_cpus(void)
{
  have_process_cpus = sched_getaffinity(0, sizeof process_cpus, &process_cpus) == 0;
}

int ag_process_cpu_count(void)
{
  cpu_set_t now;
  if (have_process_cpus)
    return CPU_COUNT(&process_cpus);
  return sched_getaffinity(0, sizeof now, &now) == 0 ? CPU_COUNT(&now) : 0;
}

static _Atomic int agent_tids[AG_AGENT_TIDS]; /* [0, nagent): the agent's threads' ids */
static _Atomic int nagent;

int ag_agent_tid(int tid)
{
  int n = atomic_load(&nagent);
  for (int i = 0; i < n && i < AG_AGENT_TIDS; i++)
    if (atomic_load_explicit(&agent_tids[i], memory_order_relaxed) == tid)
      return 1;
  return 0;
}

void ag_agent_thread_begin(const char *name)
{
  int at = atomic_fetch_add(&nagent, 1);
  if (at < AG_AGENT_TIDS)
    atomic_store(&agent_tids[at], gettid());
  pthread_setname_np(pthread_self(), name);
  cpu_set_t cur;
  if (have_process_cpus && pthread_getaffinity_np(pthread_self(), sizeof cur, &cur) == 0 &&
      !CPU_EQUAL(&cur, &process_cpus))
    pthread_setaffinity_np(pthread_self(), sizeof process_cpus, &process_cpus); /* else as is */
}
