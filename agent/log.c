/* SPDX-License-Identifier: MIT */
/* Agent logging: formats into a stack buffer and writes the line with one write(2). */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int log_level = AG_LOG_WARN;
static const char *log_path; /* NULL: stderr */
static _Atomic int log_fd = -1; /* opened at the first message (a signal handler reads it) */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

void ag_log_setup(int level, const char *path)
{
  log_level = level;
  log_path = path && *path ? path : NULL;
}

static void open_log(void)
{
  if (!log_path) {
    log_fd = 2;
    return;
  }
  log_fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (log_fd < 0) {
    char buf[512];
    int n = snprintf(buf, sizeof buf, "opjit[%d]: OPJIT_LOG_FILE=%.300s cannot be opened (%s); "
                     "logging to stderr\n", (int)getpid(), log_path, strerror(errno));
    log_fd = 2;
    ssize_t w = write(2, buf, n > 0 && n < (int)sizeof buf ? (size_t)n : sizeof buf - 1);
    (void)w;
  }
}

void ag_log(int level, const char *fmt, ...)
{
  if (level > log_level)
    return;
  char buf[512];
  int n = snprintf(buf, sizeof buf, "opjit[%d]: ", (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (m < 0)
    m = 0;
  n += m;
  if (n > (int)sizeof buf - 2)
    n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  pthread_once(&log_once, open_log);
  int fd = log_fd;
  if (write(fd, buf, (size_t)n) < 0 && fd != 2) { /* a full disk, /dev/full: not lost */
    char note[512];
    int k = snprintf(note, sizeof note, "opjit[%d]: OPJIT_LOG_FILE=%.300s cannot be written (%s); "
                     "logging to stderr\n", (int)getpid(), log_path, strerror(errno));
    log_fd = 2; /* every thread's next message goes there (a stale read repeats this once) */
    ssize_t w = write(2, note, k > 0 && k < (int)sizeof note ? (size_t)k : sizeof note - 1);
    w = write(2, buf, (size_t)n);
    (void)w;
  }
}

void ag_log_signal(int level, const char *msg, size_t len)
{
  if (level > log_level)
    return;
  char buf[384];
  size_t n = 0;
  const char *head = "opjit[";
  while (*head)
    buf[n++] = *head++;
  char digits[12];
  int d = 0;
  for (unsigned v = (unsigned)getpid(); v || !d; v /= 10)
    digits[d++] = (char)('0' + v % 10);
  while (d)
    buf[n++] = digits[--d];
  buf[n++] = ']', buf[n++] = ':', buf[n++] = ' ';
  for (size_t i = 0; i < len && n < sizeof buf - 1; i++)
    buf[n++] = msg[i];
  buf[n++] = '\n';
  /* The log file if a message opened it; else stderr, or the file opened now (pthread_once is
   * no signal handler's). */
  int opened = log_fd, fd = opened;
  if (fd < 0)
    fd = log_path ? open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : 2;
  ssize_t w = write(fd < 0 ? 2 : fd, buf, n);
  (void)w;
  if (opened < 0 && fd > 2)
    close(fd);
}
