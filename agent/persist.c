/* SPDX-License-Identifier: MIT */
/* Object persistence (persist.h): the slots' state machine under one mutex. */
#include "persist.h"
#include "jit/objload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  P_NONE = 0,
  P_PENDING, /* a variant's object, not stored yet */
  P_STORING, /* handed to the writer (ag_persist_take) */
  P_STORED
}; /* the store has it (stored by this run, or loaded from it) */

int ag_persist_init(ag_persist_book_t *b, uint32_t capacity)
{
  ag_pslot_t *slots = calloc(capacity ? capacity : 1, sizeof *slots);
  atomic_store(&b->slots, slots); /* after the zeroes */
  return slots ? 0 : -1;
}

void ag_persist_set(ag_persist_book_t *b, uint32_t i, void *obj, size_t len, const char *symbol,
                    int loaded, uint64_t pre_calls)
{
  pthread_mutex_lock(&b->mu);
  ag_pslot_t *p = &b->slots[i];
  void *old = p->obj;
  *p = (ag_pslot_t){.obj = loaded ? NULL : obj,
                    .len = len,
                    .checksum = obj ? jt_obj_checksum(obj, len) : 0,
                    .state = loaded ? P_STORED
                             : obj  ? P_PENDING
                                    : P_NONE,
                    .loaded = (uint8_t)loaded,
                    .had_variant = 1,
                    .drop = p->drop,
                    .pre_calls = pre_calls};
  snprintf(p->symbol, sizeof p->symbol, "%s", symbol);
  pthread_mutex_unlock(&b->mu);
  free(old);
}

void ag_persist_pass(ag_persist_book_t *b, uint32_t i, uint32_t n)
{
  pthread_mutex_lock(&b->mu);
  b->slots[i].passed += n;
  pthread_mutex_unlock(&b->mu);
}

int ag_persist_drop(ag_persist_book_t *b, uint32_t i)
{
  pthread_mutex_lock(&b->mu);
  ag_pslot_t *p = &b->slots[i];
  int stored = p->state == P_STORED || p->state == P_STORING;
  void *obj = p->obj;
  p->obj = NULL;
  p->state = P_NONE;
  p->drop = 1;
  pthread_mutex_unlock(&b->mu);
  free(obj);
  return stored;
}

void ag_persist_discard(ag_persist_book_t *b, uint32_t i)
{
  pthread_mutex_lock(&b->mu);
  ag_pslot_t *p = &b->slots[i];
  void *obj = p->obj;
  p->obj = NULL;
  if (p->state == P_PENDING)
    p->state = P_NONE;
  pthread_mutex_unlock(&b->mu);
  free(obj);
}

int ag_persist_take(ag_persist_book_t *b, uint32_t i, int ready, uint32_t needed, ag_persist_t *out)
{
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&b->mu);
  ag_pslot_t *p = &b->slots[i];
  int any = p->had_variant || p->drop;
  out->origin = p->loaded ? "loaded" : "compiled";
  out->pre_calls = p->pre_calls;
  snprintf(out->symbol, sizeof out->symbol, "%s", p->symbol);
  if (p->state == P_PENDING && ready && p->passed >= needed) { /* the writer owns it now */
    out->object = p->obj, out->object_len = p->len, out->checksum = p->checksum;
    p->obj = NULL;
    p->state = P_STORING;
  }
  out->drop = p->drop;
  pthread_mutex_unlock(&b->mu);
  return any;
}

void ag_persist_done(ag_persist_book_t *b, uint32_t i, ag_persist_t *done, int ok)
{
  pthread_mutex_lock(&b->mu);
  ag_pslot_t *p = &b->slots[i];
  int current = done->object && p->state == P_STORING; /* not dropped while it was written */
  if (current) {
    p->state = ok ? P_STORED : P_PENDING;
    if (!ok)
      p->obj = done->object, done->object = NULL;
  }
  /* The write deleted the invalid object, or stored the slot's current one over it. An object
   * dropped while it was being written is invalid itself: the drop stays for the next write. */
  if (ok && (done->drop || current))
    p->drop = 0;
  pthread_mutex_unlock(&b->mu);
  free(done->object);
  done->object = NULL;
}

void ag_persist_after_fork_child(ag_persist_book_t *b, uint32_t n)
{
  pthread_mutex_init(&b->mu, NULL);
  for (uint32_t i = 0; b->slots && i < n; i++) {
    ag_pslot_t *p = &b->slots[i];
    p->obj = NULL;
    if (p->state == P_PENDING || p->state == P_STORING)
      p->state = P_STORED;
  }
}
