/* SPDX-License-Identifier: MIT */
/* A library's pool spinning, as the judge's bursts see it (spin.h): the process's other threads
 * read from /proc/self/task and their CPU clocks. */
#define _GNU_SOURCE
#include "spin.h"
#include "agent.h"
#include "tcount.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Atomic int ag_spin_hold;
static _Atomic int armed; /* a burst's end begins a hold */
static _Atomic uint64_t hold_at; /* when the hold began: only a window after it may end it */

#define MAX_THREADS 256 /* threads followed; more are not counted */

/* The threads seen at the last look: their CPU time then, whether they are the agent's. */
typedef struct seen_s {
  pid_t tid;
  int ours;         /* named "opjit-...": the agent's */
  int named;        /* its name was read at this many looks */
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

/* Whether thread tid is named as the agent's threads are. */
static int named_ours(pid_t tid)
{
  char path[64], name[32] = "";
  snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, name, sizeof name - 1);
  close(fd);
  return n > 0 && strncmp(name, "opjit-", 6) == 0;
}

static const seen_t *find(const seen_t *from, int n, pid_t tid)
{
  for (int i = 0; i < n; i++)
    if (from[i].tid == tid)
      return &from[i];
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
  pid_t self = (pid_t)syscall(SYS_gettid);
  uint64_t now = ag_now_ns(), busy = 0;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) && n < MAX_THREADS) {
    pid_t tid = (pid_t)atoi(de->d_name);
    if (tid <= 0 || tid == self)
      continue;
    const seen_t *was = find(seen, nseen, tid);
    int64_t cpu = thread_cpu_ns(tid);
    if (cpu < 0)
      continue;
    /* the agent's threads name themselves once started: a name read at the first look that
     * saw the thread may be the one it began with, so it is read at the next one too (~5 us a
     * thread: a look reads the rest's clocks alone) */
    seen_t s = {tid, 0, was ? was->named : 0, (uint64_t)cpu};
    s.ours = was && (was->ours || was->named >= 2) ? was->ours : named_ours(tid);
    s.named += s.named < 2;
    now_seen[n++] = s;
    if (was && !s.ours && s.cpu_ns > was->cpu_ns && !ag_tcount_has_tid(tid))
      busy += s.cpu_ns - was->cpu_ns;
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

void ag_spin_burst_end(void)
{
  if (!atomic_load_explicit(&armed, memory_order_relaxed))
    return;
  atomic_store_explicit(&hold_at, ag_now_ns(), memory_order_relaxed);
  atomic_store_explicit(&ag_spin_hold, 1, memory_order_relaxed);
}

void ag_spin_look(int split_live)
{
  if (!split_live || !ag_host_threaded()) {
    atomic_store_explicit(&armed, 0, memory_order_relaxed);
    atomic_store_explicit(&ag_spin_hold, 0, memory_order_relaxed);
    last_ns = busy_since = 0;
    nseen = 0;
    return;
  }
  uint64_t window;
  uint64_t busy = ag_spin_others_ns(&window);
  if (!window) { /* the first look (or none readable): armed, no hold before a measure */
    atomic_store_explicit(&armed, last_ns != 0, memory_order_relaxed);
    atomic_store_explicit(&ag_spin_hold, 0, memory_order_relaxed);
    return;
  }
  uint64_t now = ag_now_ns();
  int quiet, arm = ag_spin_rule(busy, window, now, &busy_since, &quiet);
  atomic_store_explicit(&armed, arm, memory_order_relaxed);
  /* a quiet window that began before the hold may hold the burst and not the spin after it */
  if ((quiet && now - window >= atomic_load_explicit(&hold_at, memory_order_relaxed)) || !arm)
    atomic_store_explicit(&ag_spin_hold, 0, memory_order_relaxed);
}

void ag_spin_after_fork_child(void)
{
  atomic_store(&armed, 0);
  atomic_store(&hold_at, 0);
  atomic_store(&ag_spin_hold, 0);
  last_ns = busy_since = 0;
  nseen = 0;
}
