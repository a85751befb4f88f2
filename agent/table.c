/* SPDX-License-Identifier: MIT */
/* Signature table. Slots hold entry index + 1 (0 = empty); the slot array has at least twice
 * as many slots as entries, so probes stay short and always end at an empty slot. */
#include "table.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct ag_table_s {
  ag_hash_fn hash;
  uint32_t mask, capacity;
  _Atomic uint32_t count;
  _Atomic uint32_t *slots;
  ag_entry_t *entries;
  pthread_mutex_t lock;
};

static size_t slots_bytes(const ag_table_t *t) { return ((size_t)t->mask + 1) * sizeof *t->slots; }

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
  /* Mapped, not calloc'd: the kernel zeroes a page at its first use, where calloc cleared every
   * page at once, on the host thread's first call (32 KB at 4096 signatures, reused heap: 8
   * fresh pages, 115-250 us on a Firecracker guest). */
  void *slots = mmap(NULL, slots_bytes(t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
  t->slots = slots == MAP_FAILED ? NULL : slots;
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
  if (t->slots)
    munmap((void *)t->slots, slots_bytes(t));
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
    atomic_store_explicit(&e->forced, 0, memory_order_relaxed);
    atomic_store_explicit(&e->forced_ns, 0, memory_order_relaxed);
    memset(e->slow_ns, 0, sizeof e->slow_ns); /* the table's only thread (fork child) */
    atomic_store_explicit(&e->best_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&e->best_n, 0, memory_order_relaxed);
    atomic_store_explicit(&e->vcalls, 0, memory_order_relaxed);
    atomic_store_explicit(&e->vtimed, 0, memory_order_relaxed);
    atomic_store_explicit(&e->vtimed_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&e->guard_miss, 0, memory_order_relaxed);
  }
}

/* The slowest timings of every entry: their few updates and reads are rare (a timing slower than
 * the entry's third slowest, a reader of the mean). */
static pthread_mutex_t slow_mu = PTHREAD_MUTEX_INITIALIZER;

#define NSLOW (sizeof ((ag_entry_t *)0)->slow_ns / sizeof *((ag_entry_t *)0)->slow_ns)

/* Notes dt among e's slowest timings. */
static void note_slow(ag_entry_t *e, uint64_t dt)
{
  if (!ag_entry_slowest(e, dt))
    return;
  pthread_mutex_lock(&slow_mu);
  size_t at = NSLOW - 1;
  while (at > 0 && dt > e->slow_ns[at - 1])
    at--;
  if (dt > e->slow_ns[at]) {
    for (size_t i = NSLOW - 1; i > at; i--) /* the lock-free look above reads the last */
      __atomic_store_n(&e->slow_ns[i], e->slow_ns[i - 1], __ATOMIC_RELAXED);
    __atomic_store_n(&e->slow_ns[at], dt, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&slow_mu);
}

void ag_entry_orig_book(ag_entry_t *e, uint64_t dt, int forced)
{
  if (forced) {
    atomic_fetch_add_explicit(&e->forced, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->forced_ns, dt, memory_order_relaxed);
    return;
  }
  atomic_fetch_add_explicit(&e->timed, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&e->timed_ns, dt, memory_order_relaxed);
  note_slow(e, dt); /* after: a reader drops only what the sums hold */
}

void ag_entry_orig_timed(ag_entry_t *e, uint64_t *n, uint64_t *ns)
{
  /* the slowest first: each is in the sums by then (booked before it is noted) */
  uint64_t slow[NSLOW];
  pthread_mutex_lock(&slow_mu);
  memcpy(slow, e->slow_ns, sizeof slow);
  pthread_mutex_unlock(&slow_mu);
  uint64_t t = atomic_load_explicit(&e->timed, memory_order_relaxed);
  uint64_t tns = atomic_load_explicit(&e->timed_ns, memory_order_relaxed);
  /* the most of the slowest that are each AG_ENTRY_SLOW times the mean of what they leave (tried
   * from the most: stalls alike keep each other company) */
  for (size_t j = NSLOW; j > 0; j--) {
    uint64_t out = 0;
    for (size_t i = 0; i < j; i++)
      out += slow[i];
    if (t >= j + 2 && out < tns && slow[j - 1] &&
        slow[j - 1] * (t - j) > AG_ENTRY_SLOW * (tns - out)) {
      t -= j, tns -= out;
      break;
    }
  }
  if (!t) { /* none drawn yet: the forced ones' */
    t = atomic_load_explicit(&e->forced, memory_order_relaxed);
    tns = atomic_load_explicit(&e->forced_ns, memory_order_relaxed);
  }
  *n = t, *ns = tns;
}

void ag_table_lock(ag_table_t *t)
{
  pthread_mutex_lock(&t->lock);
  pthread_mutex_lock(&slow_mu);
}

void ag_table_unlock(ag_table_t *t)
{
  pthread_mutex_unlock(&slow_mu);
  pthread_mutex_unlock(&t->lock);
}
