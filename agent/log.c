/* SPDX-License-Identifier: MIT */
/* Agent logging: formats into a stack buffer and writes the line with one write(2). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static int log_level = AG_LOG_WARN;
static int log_fd = 2;
static void (*log_sink)(int, const char *);

void ag_log_setup(int level, int fd)
{
  log_level = level;
  log_fd = fd < 0 ? 2 : fd;
}

void ag_log_set_sink(void (*sink)(int, const char *)) { log_sink = sink; }

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
  if (log_sink) {
    buf[n] = 0;
    log_sink(level, buf);
    return;
  }
  buf[n++] = '\n';
  ssize_t w = write(log_fd, buf, (size_t)n);
  (void)w;
}
