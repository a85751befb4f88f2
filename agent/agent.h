/* SPDX-License-Identifier: MIT */
/* The agent core as host adapters see it: per-call accounting on the host thread (inline,
 * nanoseconds) and the resolution of original operators. Everything slow happens on the
 * writer thread (agent.c), which starts with the process's first counted call.
 *
 *   ag_state:  UNINIT ──init──▶ PASS (disabled, secure, mode off)
 *                         └───▶ COUNT ──first call──▶ active (table, writer thread)
 *   fork child: active → inactive, counters zeroed; its first call starts its own run. */
#ifndef OPJIT_AGENT_AGENT_H
#define OPJIT_AGENT_AGENT_H

#include "table.h"

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#define OPJIT_VERSION "0.1.0"
#define AG_EXPORT __attribute__((visibility("default")))
#define AG_TLS __thread __attribute__((tls_model("initial-exec")))
#define ag_likely(x) __builtin_expect(!!(x), 1)
#define ag_unlikely(x) __builtin_expect(!!(x), 0)

enum { AG_UNINIT = 0, AG_PASS, AG_COUNT };

extern _Atomic int ag_state;       /* enum above */
extern _Atomic int ag_active;      /* the table and the writer exist in this process */
extern ag_table_t *ag_table;       /* valid while ag_active */
extern _Atomic uint64_t ag_overflow_calls; /* calls that found the table full */
extern uint32_t ag_time_mask;      /* OPJIT_TIME_EVERY - 1 */
extern long ag_hosts;              /* OPJIT_HOSTS mask, valid once ag_state != UNINIT */
extern AG_TLS int ag_tl_depth;     /* > 0 while this thread is inside an intercepted call */
extern AG_TLS uint32_t ag_tl_tick; /* this thread's counted calls, for timing one in N */

/* Parses options once (normally from the constructor; any thread may get here first). */
void ag_init(void);
/* Creates the table and starts the writer; returns 0 when counting can go on. */
int ag_activate(void);

/* Around exec: the run of the image being replaced gets its final write (status "exec") before
 * the exec; if the exec fails, the writer starts again and the run goes on. */
void ag_before_exec(void);
void ag_after_failed_exec(void);
/* Before _exit/_Exit: the run's final write, as at exit(). */
void ag_before_exit(void);

/* An original operator, resolved once into *cache: the next definition after the agent
 * (RTLD_NEXT), else the system BLAS. NULL (with one error message) when none exists. */
void *ag_resolve(void *_Atomic *cache, const char *name);

static inline uint64_t ag_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One intercepted call in flight. */
typedef struct ag_call_s {
  ag_entry_t *e;  /* NULL when the table is full */
  uint64_t t0;    /* start time when this call is timed, else 0 */
} ag_call_t;

/* Accounts for a call of key by host (AG_HOST_* bit). Returns 1 when the call is counted
 * (then ag_call_end must follow the forwarded call), 0 for a pure pass-through: the agent is
 * off, or this thread is already inside an intercepted call (a CBLAS wrapper calling the
 * Fortran symbol, say), which is the original's own business. */
static inline int ag_call_begin(ag_call_t *c, const ag_sig_t *key, long host)
{
  int st = atomic_load_explicit(&ag_state, memory_order_acquire);
  if (ag_unlikely(st != AG_COUNT)) {
    if (st == AG_PASS)
      return 0;
    ag_init();
    if (atomic_load(&ag_state) != AG_COUNT)
      return 0;
  }
  if (ag_tl_depth || !(ag_hosts & host))
    return 0;
  if (ag_unlikely(!atomic_load_explicit(&ag_active, memory_order_acquire)) && ag_activate())
    return 0;
  ag_tl_depth++;
  ag_entry_t *e = ag_table_get(ag_table, key);
  c->e = e;
  c->t0 = 0;
  if (ag_unlikely(!e)) {
    atomic_fetch_add_explicit(&ag_overflow_calls, 1, memory_order_relaxed);
    return 1;
  }
  atomic_fetch_add_explicit(&e->calls, 1, memory_order_relaxed);
  if ((++ag_tl_tick & ag_time_mask) == 0 ||
      ag_unlikely(!atomic_load_explicit(&e->timed, memory_order_relaxed)))
    c->t0 = ag_now_ns();
  return 1;
}

static inline void ag_call_end(ag_call_t *c)
{
  if (c->t0) {
    uint64_t dt = ag_now_ns() - c->t0;
    atomic_fetch_add_explicit(&c->e->timed, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->e->timed_ns, dt, memory_order_relaxed);
  }
  ag_tl_depth--;
}

#endif
