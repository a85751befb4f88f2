/* SPDX-License-Identifier: MIT */
/* The sampler's system calls, all through one table so tests can inject failures (EACCES,
 * ENOENT, EMFILE, ENOSYS for seccomp) without touching the code under test. */
#ifndef OPJIT_SAMPLER_SYS_H
#define OPJIT_SAMPLER_SYS_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

struct perf_event_attr;

typedef struct sp_sys_s {
  int (*perf_event_open)(struct perf_event_attr *attr, pid_t tid, int cpu, int group_fd,
                         unsigned long flags);
  int (*fcntl)(int fd, int cmd, long arg);
  int (*ioctl)(int fd, unsigned long request, unsigned long arg);
  ssize_t (*read)(int fd, void *buf, size_t len);
  int (*close)(int fd);
  int (*timer_create)(clockid_t clock, struct sigevent *ev, timer_t *out);
  int (*timer_settime)(timer_t t, int flags, const struct itimerspec *v, struct itimerspec *old);
  int (*timer_delete)(timer_t t);
} sp_sys_t;

/* The calls in use: the real ones unless a test replaced some. Each returns -1 with errno set
 * on failure, as the system call does. */
extern sp_sys_t sp_sys;
/* The real calls, for tests that restore or wrap them. */
extern const sp_sys_t sp_sys_real;

#endif
