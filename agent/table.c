/* SPDX-License-Identifier: MIT */
/* Signature table. Slots hold entry index + 1 (0 = empty); the slot array has at least twice
 * as many slots as entries, so probes stay short and always end at an empty slot. */
#include "table.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct ag_table_s {
  ag_hash_fn hash;
  uint32_t mask, capacity;
  _Atomic uint32_t count;
  _Atomic uint32_t *slots;
  ag_entry_t *entries;
  pthread_mutex_t lock;
};

ag_table_t *ag_table_new(uint32_t capacity, ag_hash_fn hash)
{
  ag_table_t *t = calloc(1, sizeof *t);
  if (!t)
    return NULL;
  uint32_t nslots = 16;
  while (nslots < 2 * capacity)
    nslots <<= 1;
  t->hash = hash ? hash : ag_sig_hash;
  t->mask = nslots - 1;
  t->capacity = capacity;
  t->slots = calloc(nslots, sizeof *t->slots);
  t->entries = aligned_alloc(64, (size_t)capacity * sizeof *t->entries);
  if (!t->slots || !t->entries) {
    ag_table_free(t);
    return NULL;
  }
  pthread_mutex_init(&t->lock, NULL);
  return t;
}

void ag_table_free(ag_table_t *t)
{
  if (!t)
    return;
  free(t->slots);
  free(t->entries);
  free(t);
}

/* Probes for key from its home slot; returns the entry, or NULL with *empty at the first
 * empty slot. */
static ag_entry_t *probe(ag_table_t *t, const ag_sig_t *key, uint64_t h, uint32_t *empty)
{
  for (uint32_t i = (uint32_t)h & t->mask;; i = (i + 1) & t->mask) {
    uint32_t u = atomic_load_explicit(&t->slots[i], memory_order_acquire);
    if (!u) {
      *empty = i;
      return NULL;
    }
    ag_entry_t *e = &t->entries[u - 1];
    if (e->hash == (uint32_t)h && memcmp(&e->key, key, sizeof *key) == 0)
      return e;
  }
}

ag_entry_t *ag_table_get(ag_table_t *t, const ag_sig_t *key)
{
  uint64_t h = t->hash(key);
  uint32_t empty;
  ag_entry_t *e = probe(t, key, h, &empty);
  if (e)
    return e;
  pthread_mutex_lock(&t->lock);
  e = probe(t, key, h, &empty); /* another thread may have inserted it meanwhile */
  if (!e) {
    uint32_t n = atomic_load_explicit(&t->count, memory_order_relaxed);
    if (n < t->capacity) {
      e = &t->entries[n];
      memset(e, 0, sizeof *e);
      e->key = *key;
      e->hash = (uint32_t)h;
      e->index = n;
      atomic_store_explicit(&t->count, n + 1, memory_order_release);
      atomic_store_explicit(&t->slots[empty], n + 1, memory_order_release);
    }
  }
  pthread_mutex_unlock(&t->lock);
  return e;
}

uint32_t ag_table_count(const ag_table_t *t)
{
  return atomic_load_explicit(&((ag_table_t *)t)->count, memory_order_acquire);
}

ag_entry_t *ag_table_entry(ag_table_t *t, uint32_t i) { return &t->entries[i]; }

void ag_table_reset_counts(ag_table_t *t)
{
  uint32_t n = ag_table_count(t);
  for (uint32_t i = 0; i < n; i++) {
    ag_entry_t *e = &t->entries[i];
    atomic_store_explicit(&e->calls, 0, memory_order_relaxed);
    atomic_store_explicit(&e->timed, 0, memory_order_relaxed);
    atomic_store_explicit(&e->timed_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&e->first_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&e->slow_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&e->best_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&e->best_n, 0, memory_order_relaxed);
    atomic_store_explicit(&e->vcalls, 0, memory_order_relaxed);
    atomic_store_explicit(&e->vtimed, 0, memory_order_relaxed);
    atomic_store_explicit(&e->vtimed_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&e->guard_miss, 0, memory_order_relaxed);
  }
}

void ag_table_lock(ag_table_t *t) { pthread_mutex_lock(&t->lock); }
void ag_table_unlock(ag_table_t *t) { pthread_mutex_unlock(&t->lock); }
