/* SPDX-License-Identifier: MIT */
/* The real system calls behind sp_sys. */
#define _GNU_SOURCE
#include "sys.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int real_perf_event_open(struct perf_event_attr *attr, pid_t tid, int cpu, int group_fd,
                                unsigned long flags)
{
  return (int)syscall(SYS_perf_event_open, attr, tid, cpu, group_fd, flags);
}

static int real_fcntl(int fd, int cmd, long arg) { return fcntl(fd, cmd, arg); }
static int real_ioctl(int fd, unsigned long req, unsigned long arg) { return ioctl(fd, req, arg); }

#define REAL_CALLS                                                                           \
  {                                                                                          \
    .perf_event_open = real_perf_event_open, .fcntl = real_fcntl, .ioctl = real_ioctl,       \
    .read = read, .close = close, .timer_create = timer_create,                              \
    .timer_settime = timer_settime, .timer_delete = timer_delete,                            \
  }

const sp_sys_t sp_sys_real = REAL_CALLS;
sp_sys_t sp_sys = REAL_CALLS;
