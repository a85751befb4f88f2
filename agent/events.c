/* SPDX-License-Identifier: MIT */
/* The event log (events.h): a mutex-guarded array, taken from the front. */
#include "events.h"
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

void ag_events_vadd(ag_events_t *log, uint32_t index, int kind, const char *fmt, va_list ap)
{
  pthread_mutex_lock(&log->mu);
  if (log->len == AG_EVENTS_MAX) {
    if (!log->dropped++)
      ag_log(AG_LOG_WARN, "JIT events come faster than they are written: some are not recorded");
  } else {
    ag_event_rec_t *r = &log->recs[log->len++];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r->time_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    r->index = index;
    r->kind = kind;
    vsnprintf(r->detail, sizeof r->detail, fmt, ap);
  }
  pthread_mutex_unlock(&log->mu);
}

void ag_events_add(ag_events_t *log, uint32_t index, int kind, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  ag_events_vadd(log, index, kind, fmt, ap);
  va_end(ap);
}

size_t ag_events_take(ag_events_t *log, ag_event_rec_t *out, size_t max)
{
  pthread_mutex_lock(&log->mu);
  size_t n = log->len < max ? log->len : max;
  memcpy(out, log->recs, n * sizeof *out);
  memmove(log->recs, log->recs + n, (log->len - n) * sizeof *log->recs);
  log->len -= (unsigned)n;
  pthread_mutex_unlock(&log->mu);
  return n;
}

uint64_t ag_events_dropped(ag_events_t *log)
{
  pthread_mutex_lock(&log->mu);
  uint64_t n = log->dropped;
  pthread_mutex_unlock(&log->mu);
  return n;
}

void ag_events_after_fork_child(ag_events_t *log)
{
  pthread_mutex_init(&log->mu, NULL);
  log->len = 0;
}
