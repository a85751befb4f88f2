/* SPDX-License-Identifier: MIT */
/* The code cache: the bytes of JIT code this process keeps against its budget
 * (OPJIT_CODE_CACHE_MB), the kernels evicted to make room that wait out their grace period, and
 * the signatures that found no room. State the caller owns and locks (the tiers' code mutex):
 * nothing here locks, allocates (but for what it is handed) or reads a global.
 *
 *   live ──evicted (unpublished first, then the threads' snapshot)──▶ retired ──grace period
 *     ▲                                                                  │      over: freed,
 *     └──────────compiled again before it was freed (resurrected)────────┘      bytes given back
 *
 * Grace periods: code that was unpublished may still be running on a thread that loaded the
 * pointer before. Every registered thread's count of finished calls is snapshot after the
 * unpublishing (tcount.h); once each of them has finished a call since, or exited, none can be
 * inside the code, and only then is it freed. The caller's ops say whether a snapshot's grace
 * period is over and free the code. */
#ifndef OPJIT_AGENT_CODECACHE_H
#define OPJIT_AGENT_CODECACHE_H

#include "tcount.h"

#include <stddef.h>
#include <stdint.h>

#define AG_CC_RESERVE 4096 /* bytes held for each compile in progress */
#define AG_CC_RETIRED 64   /* evicted kernels awaiting their grace period, at most */
#define AG_CC_DEFERRED                                                                             \
  256 /* signatures waiting for room, at most (more are dropped: hot again
                              later, they ask again) */

typedef struct ag_cc_retired_s {
  void *fn;         /* the kernel's entry */
  size_t size;      /* the bytes it was charged */
  size_t nsnap;     /* the threads' snapshot taken after it was unpublished */
  ag_epoch_t *snap; /* malloc'ed, the cache's */
} ag_cc_retired_t;

typedef struct ag_codecache_s {
  size_t budget; /* bytes */
  size_t bytes;  /* charged: live and retired kernels, compiles in progress */
  ag_cc_retired_t retired[AG_CC_RETIRED];
  int nretired;
  uint32_t deferred[AG_CC_DEFERRED]; /* entries that found no room */
  int ndeferred;
} ag_codecache_t;

/* What the cache needs from its caller to free code. */
typedef struct ag_cc_ops_s {
  /* Whether every thread in snap has finished a call since (or exited): ag_tcount_passed. */
  int (*passed)(void *ctx, const ag_epoch_t *snap, size_t nsnap);
  /* Frees fn's code: 1 freed, 0 still used by another signature (one kernel two share), -1 it
   * could not be freed. */
  int (*release)(void *ctx, void *fn);
  void *ctx;
} ag_cc_ops_t;

/* Whether size more bytes fit the budget. */
int ag_cc_fits(const ag_codecache_t *c, size_t size);
/* Charges size bytes (a compile's reservation, a kernel's code), or gives them back. */
void ag_cc_charge(ag_codecache_t *c, size_t size);
void ag_cc_refund(ag_codecache_t *c, size_t size);

/* Of the n entries for which ready says yes, the one whose variant served the fewest calls
 * (vcalls; the first of equals): the eviction victim. UINT32_MAX when none is ready. */
uint32_t ag_cc_victim(const uint64_t *vcalls, uint32_t n, int (*ready)(void *ctx, uint32_t i),
                      void *ctx);

/* Whether the retired list is full (then nothing can be evicted). */
int ag_cc_retired_full(const ag_codecache_t *c);
/* Keeps unpublished fn, charged size bytes, until the grace period of snap (malloc'ed, taken
 * over) is over. 0, or -1 when the list is full (snap is then the caller's still). */
int ag_cc_retire(ag_codecache_t *c, void *fn, size_t size, ag_epoch_t *snap, size_t nsnap);
/* Frees every retired kernel whose grace period is over through ops->release and gives its
 * bytes back (whatever release says: the reference is gone). Returns how many were freed. */
int ag_cc_free_retired(ag_codecache_t *c, const ag_cc_ops_t *ops);
/* A compile got fn back while it was retired (the JIT keeps a kernel by name): it is live again,
 * still charged, no longer to be freed. 1, or 0 when fn is not retired. */
int ag_cc_resurrect(ag_codecache_t *c, void *fn);

/* Entry i found no room: queued again when there is. 0, or -1 when the list is full. */
int ag_cc_defer(ag_codecache_t *c, uint32_t i);
/* Takes up to max deferred entries, the latest first, for as many as a compile's reservation
 * each fits the budget now; returns how many it put in out. */
int ag_cc_undefer(ag_codecache_t *c, uint32_t *out, int max);

/* Fork child: the child's own deferrals start afresh (its compile queue is empty). */
void ag_cc_after_fork_child(ag_codecache_t *c);

#endif
