/* SPDX-License-Identifier: MIT */
/* A library's pool spinning, as the judge's bursts see it (spin.h): the process's other threads
 * read from /proc/self/task and their CPU clocks. */
#define _GNU_SOURCE
#include "spin.h"
#include "agent.h"
#include "tcount.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

_Atomic uint64_t ag_spin_hold;
static _Atomic int armed; /* a burst's end begins a hold */

#define MAX_THREADS 256 /* threads followed; more are not counted */
#define MIN_WINDOW_NS 10000000u /* a shorter window may catch a spinning thread off its CPU */

/* The threads seen at the last look, with their CPU time then. */
typedef struct seen_s {
  pid_t tid;
  uint64_t cpu_ns;
} seen_t;
static seen_t seen[MAX_THREADS];
static int nseen;
static uint64_t last_ns; /* the last look's time; 0: none */
static uint64_t busy_since;

/* Thread tid's CPU time (the kernel's per-thread clock), or -1 when it is gone. */
static int64_t thread_cpu_ns(pid_t tid)
{
  struct timespec ts;
  clockid_t clock = (clockid_t)((~(unsigned)tid << 3) | 6); /* CPUCLOCK_SCHED | PERTHREAD */
  if (clock_gettime(clock, &ts) != 0)
    return -1;
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static const seen_t *find(pid_t tid)
{
  for (int i = 0; i < nseen; i++)
    if (seen[i].tid == tid)
      return &seen[i];
  return NULL;
}

uint64_t ag_spin_others_ns(uint64_t *window_ns)
{
  static seen_t now_seen[MAX_THREADS];
  *window_ns = 0;
  DIR *d = opendir("/proc/self/task");
  if (!d) {
    last_ns = 0;
    return 0;
  }
  pid_t self = gettid();
  uint64_t now = ag_now_ns(), busy = 0;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) && n < MAX_THREADS) {
    pid_t tid = (pid_t)atoi(de->d_name);
    int64_t cpu = tid > 0 && tid != self && !ag_agent_tid(tid) ? thread_cpu_ns(tid) : -1;
    if (cpu < 0)
      continue;
    const seen_t *was = find(tid);
    now_seen[n++] = (seen_t){tid, (uint64_t)cpu};
    if (was && (uint64_t)cpu > was->cpu_ns && !ag_tcount_has_tid(tid))
      busy += (uint64_t)cpu - was->cpu_ns;
  }
  closedir(d);
  memcpy(seen, now_seen, (size_t)n * sizeof *seen);
  nseen = n;
  if (last_ns)
    *window_ns = now - last_ns;
  last_ns = now;
  return *window_ns ? busy : 0;
}

int ag_spin_rule(uint64_t busy_ns, uint64_t window_ns, uint64_t now_ns, uint64_t *busy_since_ns,
                 int *quiet)
{
  *quiet = (double)busy_ns < AG_SPIN_BUSY_SHARE * (double)window_ns;
  if (*quiet) {
    *busy_since_ns = 0;
    return 1;
  }
  if (!*busy_since_ns)
    *busy_since_ns = now_ns - window_ns; /* busy through the window */
  return now_ns - *busy_since_ns < AG_SPIN_BUSY_MAX_NS;
}

void ag_spin_begin_hold(void)
{
  uint64_t now = ag_now_ns();
  atomic_store_explicit(&ag_spin_hold, now ? now : 1, memory_order_relaxed);
}

void ag_spin_burst_end(void)
{
  if (atomic_load_explicit(&armed, memory_order_relaxed))
    ag_spin_begin_hold();
}

int ag_spin_armed(void) { return atomic_load_explicit(&armed, memory_order_relaxed); }

static void set_armed(int v)
{
  if (atomic_load_explicit(&armed, memory_order_relaxed) != v)
    atomic_store_explicit(&armed, v, memory_order_relaxed);
}

static void end_hold(void)
{
  if (atomic_load_explicit(&ag_spin_hold, memory_order_relaxed))
    atomic_store_explicit(&ag_spin_hold, 0, memory_order_relaxed);
}

void ag_spin_look(int split_live)
{
  if (!split_live || !ag_host_threaded()) {
    set_armed(0);
    end_hold();
    last_ns = busy_since = 0;
    nseen = 0;
    return;
  }
  uint64_t from = last_ns, window;
  if (from && ag_now_ns() - from < MIN_WINDOW_NS)
    return; /* the window grows to the next look */
  uint64_t busy = ag_spin_others_ns(&window);
  if (!window) { /* the first look (or none readable): armed, nothing measured to end a hold */
    set_armed(last_ns != 0);
    if (!last_ns)
      end_hold();
    return;
  }
  int quiet, arm = ag_spin_rule(busy, window, from + window, &busy_since, &quiet);
  set_armed(arm);
  if (!arm) {
    end_hold();
    return;
  }
  /* a quiet window that began before the hold may hold the burst and not the spin after it; a
   * hold begun meanwhile (a burst's end on another thread) stays */
  uint64_t h = atomic_load_explicit(&ag_spin_hold, memory_order_relaxed);
  if (h && quiet && from >= h)
    atomic_compare_exchange_strong_explicit(&ag_spin_hold, &h, 0, memory_order_relaxed,
                                            memory_order_relaxed);
}

void ag_spin_after_fork_child(void)
{
  atomic_store(&armed, 0);
  atomic_store(&ag_spin_hold, 0);
  last_ns = busy_since = 0;
  nseen = 0;
}
