/* SPDX-License-Identifier: MIT */
/* The agent's own threads' names and CPUs (agent.h: ag_agent_thread_begin). */
#define _GNU_SOURCE
#include "agent.h"
#include "crash.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int ag_thread_running_cpu(pid_t tid)
{
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return -1;
  buf[n] = 0;
  char *q = strrchr(buf, ')'); /* the name's end (field 2): a name may hold spaces and ')' */
  if (!q || q[1] != ' ' || q[2] != 'R')
    return -1;
  for (int f = 2; q && f < 39; f++) /* q: the space before field f + 1 */
    q = strchr(q + 1, ' ');
  return q ? atoi(q + 1) : -1;
}

/* The CPU this thread was last kept off, plus 2 (1: none, every CPU of the process; 0: not set
 * yet, so that the TLS stays zero-initialised). */
static AG_TLS int kept_off;

void ag_agent_keep_off(pid_t caller)
{
  if (!have_process_cpus || CPU_COUNT(&process_cpus) < 2 || !ag_agent_tid(gettid()))
    return; /* only the agent's own threads are moved */
  int c = caller > 0 ? ag_thread_running_cpu(caller) : -1;
  if (c < 0 || c >= CPU_SETSIZE || !CPU_ISSET(c, &process_cpus))
    c = -1;
  if (c + 2 == kept_off)
    return;
  cpu_set_t want = process_cpus;
  if (c >= 0)
    CPU_CLR(c, &want);
  if (pthread_setaffinity_np(pthread_self(), sizeof want, &want) == 0)
    kept_off = c + 2;
}

AG_TLS int ag_tl_starting;

int ag_agent_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                           void *arg)
{
  ag_tl_starting = 1;
  int rc = pthread_create(t, attr, fn, arg);
  ag_tl_starting = 0;
  return rc;
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
  ag_crash_unblock(); /* no host signal lands here, but its own faults reach the hook */
  cpu_set_t cur;
  if (have_process_cpus && pthread_getaffinity_np(pthread_self(), sizeof cur, &cur) == 0 &&
      (CPU_EQUAL(&cur, &process_cpus) ||
       pthread_setaffinity_np(pthread_self(), sizeof process_cpus, &process_cpus) == 0))
    kept_off = 1; /* on every CPU of the process: a keep_off with no caller has nothing to do */
}
