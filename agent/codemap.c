/* SPDX-License-Identifier: MIT */
/* The code map (codemap.h): chunked slots with sequence counts, a free list, interned names. */
#include "codemap.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot_s {
  _Atomic uint32_t seq;        /* odd while the slot is being written */
  _Atomic uint64_t lo, hi;     /* lo == hi: free */
  const char *_Atomic name;
  const ag_sig_t *_Atomic key; /* the signature that registered it */
  jt_loaded_t loaded;          /* writers only (under mu) */
} slot_t;

static slot_t *_Atomic chunks[AG_CODE_CHUNKS];
static _Atomic uint32_t nslots; /* slots ever used: readers scan [0, nslots) */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t *freed;         /* free slot indices (a stack), under mu */
static uint32_t nfreed, freed_cap;
static size_t live;
static _Atomic uint64_t generation; /* registrations and removals so far */

/* Interned names: a chained hash set, never freed (bounded by the distinct names). */
typedef struct name_s {
  struct name_s *next;
  char s[];
} name_t;
static name_t *names[1024];

static slot_t *slot(uint32_t i)
{
  slot_t *c = atomic_load_explicit(&chunks[i / AG_CODE_CHUNK], memory_order_acquire);
  return &c[i % AG_CODE_CHUNK];
}

static const char *intern(const char *s)
{
  uint64_t h = 1469598103934665603ull;
  for (const char *p = s; *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211ull;
  name_t **b = &names[h % (sizeof names / sizeof *names)];
  for (name_t *n = *b; n; n = n->next)
    if (strcmp(n->s, s) == 0)
      return n->s;
  size_t len = strlen(s) + 1;
  name_t *n = malloc(sizeof *n + len);
  if (!n)
    return NULL;
  memcpy(n->s, s, len);
  n->next = *b;
  *b = n;
  return n->s;
}

/* The live slot of fn, or -1; mu held. */
static long find(const void *fn)
{
  uint64_t lo = (uint64_t)(uintptr_t)fn;
  uint32_t n = atomic_load_explicit(&nslots, memory_order_relaxed);
  for (uint32_t i = 0; i < n; i++) {
    slot_t *s = slot(i);
    uint64_t l = atomic_load_explicit(&s->lo, memory_order_relaxed);
    if (l == lo && atomic_load_explicit(&s->hi, memory_order_relaxed) > l)
      return (long)i;
  }
  return -1;
}

/* Writes slot s (mu held): the count goes odd, the fields change, the count goes even. */
static void write_slot(slot_t *s, uint64_t lo, uint64_t hi, const char *name,
                       const ag_sig_t *key)
{
  uint32_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
  atomic_store_explicit(&s->seq, q + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&s->lo, lo, memory_order_relaxed);
  atomic_store_explicit(&s->hi, hi, memory_order_relaxed);
  atomic_store_explicit(&s->name, name, memory_order_relaxed);
  atomic_store_explicit(&s->key, key, memory_order_relaxed);
  atomic_store_explicit(&s->seq, q + 2, memory_order_release);
}

int ag_code_add(const void *fn, size_t size, const char *name, const jt_loaded_t *loaded,
                const ag_sig_t *key)
{
  int rc = -1;
  pthread_mutex_lock(&mu);
  if (find(fn) >= 0) {
    rc = 1;
    goto out;
  }
  const char *iname = intern(name);
  if (!iname)
    goto out;
  if (live + 1 > freed_cap) { /* room to free it later: a remove never fails */
    uint32_t cap = freed_cap ? 2 * freed_cap : 64;
    uint32_t *p = realloc(freed, cap * sizeof *p);
    if (!p)
      goto out;
    freed = p, freed_cap = cap;
  }
  uint32_t i;
  if (nfreed) {
    i = freed[--nfreed];
  } else {
    i = atomic_load_explicit(&nslots, memory_order_relaxed);
    if (i == AG_CODE_MAX)
      goto out;
    if (i % AG_CODE_CHUNK == 0 && !atomic_load(&chunks[i / AG_CODE_CHUNK])) {
      slot_t *c = calloc(AG_CODE_CHUNK, sizeof *c);
      if (!c)
        goto out;
      atomic_store_explicit(&chunks[i / AG_CODE_CHUNK], c, memory_order_release);
    }
  }
  slot_t *s = slot(i);
  s->loaded = loaded ? *loaded : (jt_loaded_t){0};
  write_slot(s, (uint64_t)(uintptr_t)fn, (uint64_t)(uintptr_t)fn + size, iname, key);
  if (i == atomic_load_explicit(&nslots, memory_order_relaxed))
    atomic_store_explicit(&nslots, i + 1, memory_order_release);
  live++;
  atomic_fetch_add_explicit(&generation, 1, memory_order_release);
  rc = 0;
out:
  pthread_mutex_unlock(&mu);
  return rc;
}

int ag_code_find(const void *fn, ag_code_t *out)
{
  pthread_mutex_lock(&mu);
  long i = find(fn);
  if (i >= 0) {
    slot_t *s = slot((uint32_t)i);
    *out = (ag_code_t){atomic_load(&s->lo), atomic_load(&s->hi), atomic_load(&s->name),
                       atomic_load(&s->key), s->loaded};
  }
  pthread_mutex_unlock(&mu);
  return i >= 0 ? 0 : -1;
}

int ag_code_remove(const void *fn)
{
  int rc = -1;
  pthread_mutex_lock(&mu);
  long i = find(fn);
  if (i < 0)
    goto out;
  slot_t *s = slot((uint32_t)i);
  write_slot(s, 0, 0, NULL, NULL);
  s->loaded = (jt_loaded_t){0};
  freed[nfreed++] = (uint32_t)i;
  live--;
  atomic_fetch_add_explicit(&generation, 1, memory_order_release);
  rc = 0;
out:
  pthread_mutex_unlock(&mu);
  return rc;
}

int ag_code_at(uint64_t pc, uint64_t *lo, uint64_t *hi, const char **name)
{
  uint32_t n = atomic_load_explicit(&nslots, memory_order_acquire);
  for (uint32_t i = 0; i < n; i++) {
    slot_t *s = slot(i);
    uint64_t l, h;
    const char *nm;
    uint32_t q;
    do {
      while ((q = atomic_load_explicit(&s->seq, memory_order_acquire)) & 1)
        ;
      l = atomic_load_explicit(&s->lo, memory_order_relaxed);
      h = atomic_load_explicit(&s->hi, memory_order_relaxed);
      nm = atomic_load_explicit(&s->name, memory_order_relaxed);
      atomic_thread_fence(memory_order_acquire);
    } while (atomic_load_explicit(&s->seq, memory_order_relaxed) != q);
    if (pc >= l && pc < h) {
      *lo = l, *hi = h, *name = nm;
      return 1;
    }
  }
  return 0;
}

uint64_t ag_code_generation(void)
{
  return atomic_load_explicit(&generation, memory_order_acquire);
}

int ag_code_at_signal(uint64_t pc, uint64_t *lo, uint64_t *hi, const char **name,
                      const ag_sig_t **key)
{
  uint32_t n = atomic_load_explicit(&nslots, memory_order_acquire);
  for (uint32_t i = 0; i < n; i++) {
    slot_t *s = slot(i);
    for (int tries = 0; tries < 64; tries++) { /* a slot odd for good: its writer is this thread */
      uint32_t q = atomic_load_explicit(&s->seq, memory_order_acquire);
      if (q & 1)
        continue;
      uint64_t l = atomic_load_explicit(&s->lo, memory_order_relaxed);
      uint64_t h = atomic_load_explicit(&s->hi, memory_order_relaxed);
      const char *nm = atomic_load_explicit(&s->name, memory_order_relaxed);
      const ag_sig_t *k = atomic_load_explicit(&s->key, memory_order_relaxed);
      atomic_thread_fence(memory_order_acquire);
      if (atomic_load_explicit(&s->seq, memory_order_relaxed) != q)
        continue;
      if (pc >= l && pc < h) {
        *lo = l, *hi = h, *name = nm, *key = k;
        return 1;
      }
      break;
    }
  }
  return 0;
}

size_t ag_code_live(void)
{
  pthread_mutex_lock(&mu);
  size_t n = live;
  pthread_mutex_unlock(&mu);
  return n;
}

void ag_code_after_fork_child(void)
{
  pthread_mutex_init(&mu, NULL);
  /* A slot a parent thread was writing when the fork came stays odd for ever: readers would
   * spin on it. It is freed (its kernel is unknown to the child from now on). */
  uint32_t n = atomic_load(&nslots);
  for (uint32_t i = 0; i < n; i++) {
    slot_t *s = slot(i);
    uint32_t q = atomic_load(&s->seq);
    if (!(q & 1))
      continue;
    atomic_store(&s->lo, 0), atomic_store(&s->hi, 0), atomic_store(&s->name, NULL);
    atomic_store(&s->seq, q + 1);
  }
}
