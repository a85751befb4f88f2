/* SPDX-License-Identifier: MIT */
/* The event log: what happened to each signature's variant (queued, published, verified,
 * demoted, evicted, ...), kept in order until the writer takes it into the database. A bounded
 * buffer the caller owns: any thread adds, the writer takes the oldest first. When the writer
 * falls AG_EVENTS_MAX events behind, new events are dropped (counted, and warned about once)
 * rather than waited for: adding never blocks on the database. */
#ifndef OPJIT_AGENT_EVENTS_H
#define OPJIT_AGENT_EVENTS_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define AG_EVENTS_MAX 512 /* events held before new ones are dropped */

/* One recorded event, for the writer. */
typedef struct ag_event_rec_s {
  int64_t time_ns;  /* CLOCK_REALTIME */
  uint32_t index;   /* entry */
  int kind;         /* enum ag_event (tier.h) */
  char detail[224]; /* truncated to fit (as long as a state's reason: reason.h) */
} ag_event_rec_t;

typedef struct ag_events_s {
  pthread_mutex_t mu;
  ag_event_rec_t recs[AG_EVENTS_MAX]; /* [0, len): oldest first */
  unsigned len;
  uint64_t dropped; /* events that found the log full */
} ag_events_t;
#define AG_EVENTS_INIT                                                                             \
  {                                                                                                \
    .mu = PTHREAD_MUTEX_INITIALIZER                                                                \
  }

/* Records an event of kind about entry index, stamped now, its detail formatted from fmt; when
 * the log is full the event is dropped and counted (the first drop warns). Any thread. */
void ag_events_add(ag_events_t *log, uint32_t index, int kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same with the format's arguments in ap (a caller's own variadic form hands them on). */
void ag_events_vadd(ag_events_t *log, uint32_t index, int kind, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* Moves up to max of the oldest events into out, in the order they were added; returns how
 * many. The rest stay, oldest first. */
size_t ag_events_take(ag_events_t *log, ag_event_rec_t *out, size_t max);

/* Events dropped so far because the log was full. */
uint64_t ag_events_dropped(ag_events_t *log);

/* Fork child: the log is empty (the parent records its own) and its mutex unlocked. */
void ag_events_after_fork_child(ag_events_t *log);

#endif
