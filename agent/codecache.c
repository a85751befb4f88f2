/* SPDX-License-Identifier: MIT */
/* The code cache (codecache.h): byte accounting, the retired list, the deferred list. */
#include "codecache.h"

#include <stdlib.h>

int ag_cc_fits(const ag_codecache_t *c, size_t size) { return c->bytes + size <= c->budget; }

void ag_cc_charge(ag_codecache_t *c, size_t size) { c->bytes += size; }

void ag_cc_refund(ag_codecache_t *c, size_t size) { c->bytes -= size; }

uint32_t ag_cc_victim(const uint64_t *vcalls, uint32_t n, int (*ready)(void *ctx, uint32_t i),
                      void *ctx)
{
  uint32_t victim = UINT32_MAX;
  for (uint32_t i = 0; i < n; i++)
    if (ready(ctx, i) && (victim == UINT32_MAX || vcalls[i] < vcalls[victim]))
      victim = i;
  return victim;
}

int ag_cc_retired_full(const ag_codecache_t *c) { return c->nretired == AG_CC_RETIRED; }

int ag_cc_retire(ag_codecache_t *c, void *fn, size_t size, ag_epoch_t *snap, size_t nsnap)
{
  if (ag_cc_retired_full(c))
    return -1;
  c->retired[c->nretired++] = (ag_cc_retired_t){fn, size, nsnap, snap};
  return 0;
}

int ag_cc_free_retired(ag_codecache_t *c, const ag_cc_ops_t *ops)
{
  int freed = 0;
  for (int i = 0; i < c->nretired;) {
    ag_cc_retired_t *r = &c->retired[i];
    if (!ops->passed(ops->ctx, r->snap, r->nsnap)) {
      i++;
      continue;
    }
    ops->release(ops->ctx, r->fn);
    c->bytes -= r->size; /* this reference's bytes, whatever became of the code */
    free(r->snap);
    *r = c->retired[--c->nretired];
    freed++;
  }
  return freed;
}

int ag_cc_resurrect(ag_codecache_t *c, void *fn)
{
  for (int r = 0; r < c->nretired; r++)
    if (c->retired[r].fn == fn) {
      free(c->retired[r].snap);
      c->retired[r] = c->retired[--c->nretired];
      return 1;
    }
  return 0;
}

int ag_cc_defer(ag_codecache_t *c, uint32_t i)
{
  if (c->ndeferred == AG_CC_DEFERRED)
    return -1;
  c->deferred[c->ndeferred++] = i;
  return 0;
}

int ag_cc_undefer(ag_codecache_t *c, uint32_t *out, int max)
{
  int n = 0;
  while (c->ndeferred && n < max && ag_cc_fits(c, (size_t)(n + 1) * AG_CC_RESERVE))
    out[n++] = c->deferred[--c->ndeferred];
  return n;
}

void ag_cc_after_fork_child(ag_codecache_t *c) { c->ndeferred = 0; }
