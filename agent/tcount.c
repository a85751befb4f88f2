/* SPDX-License-Identifier: MIT */
/* The registry of host threads: counter arrays summed by the writer, and the current-operator
 * slots the sampler reads. */
#define _GNU_SOURCE
#include "tcount.h"
#include "agent.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct tc_thread_s {
  struct tc_thread_s *next, *prev;
  _Atomic uint64_t *calls; /* NULL: this thread counts on the shared entries */
  _Atomic uint32_t *ends;  /* the thread's count of finished calls (cur slot, or NULL) */
  int cur_slot;            /* index in cur_slots, or -1 (ag_tl.own_cur is used) */
  pid_t tid;               /* the thread's id (gettid) */
  ag_tlc_slot_t tlc[AG_TLC_SLOTS]; /* the thread's key cache (agent.h): ag_tl.tlc */
} tc_thread_t;

/* Current-operator slots, one cache line each: written by their thread on every counted call,
 * read by signal handlers in other threads. Claimed at registration, released at exit. */
typedef struct cur_slot_s {
  _Atomic uint32_t op;   /* ag_tl.cur points here */
  _Atomic uint32_t ends; /* ... and this follows it: calls finished */
  _Atomic int owned;
  char pad[52];
} cur_slot_t;
static cur_slot_t cur_slots[AG_CUR_SLOTS];
static _Atomic int cur_hiwater;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static tc_thread_t reg_head = {&reg_head, &reg_head, NULL}; /* circular list */
static pthread_key_t reg_key;
static ag_table_t *reg_table;
static size_t reg_bytes;
uint32_t ag_tcount_capacity;
static AG_TLS tc_thread_t *tl_self;
/* Arrays of exited threads, zeroed by their fold, for the next threads to register: a host that
 * starts a thread per task (a graph computed on fresh threads each time) would otherwise map and
 * unmap one per thread, each unmap a TLB shootdown across the process's CPUs. reg_mu. */
#define SPARE_MAX 64
static _Atomic uint64_t *spare[SPARE_MAX];
static int nspare;

/* Books held timings h (4 words: tcount.h) on entry e and zeroes them: their thread, its fold,
 * or the process's end (ag_tcount_book_held_all: the words taken at once, as their thread may
 * be adding to them). */
static void book_held(ag_entry_t *e, _Atomic uint64_t *h)
{
  for (int side = 0; side < 2; side++, h += 2) {
    if (!atomic_load_explicit(&h[0], memory_order_relaxed))
      continue;
    uint64_t n = atomic_exchange_explicit(&h[0], 0, memory_order_relaxed);
    uint64_t ns = atomic_exchange_explicit(&h[1], 0, memory_order_relaxed);
    atomic_fetch_add_explicit(side ? &e->vtimed : &e->timed, n, memory_order_relaxed);
    atomic_fetch_add_explicit(side ? &e->vtimed_ns : &e->timed_ns, ns, memory_order_relaxed);
  }
}

void ag_tcount_book_held(uint32_t i)
{
  if (ag_tl.calls)
    book_held(ag_table_entry(reg_table, i), ag_tcount_held(ag_tl.calls, i));
}

void ag_tcount_book_held_all(int try)
{
  uint32_t n = ag_table_count(reg_table);
  if (try ? pthread_mutex_trylock(&reg_mu) != 0 : pthread_mutex_lock(&reg_mu) != 0) {
    for (uint32_t i = 0; i < n; i++)
      ag_tcount_book_held(i);
    return;
  }
  for (tc_thread_t *t = reg_head.next; t != &reg_head; t = t->next)
    for (uint32_t i = 0; t->calls && i < n; i++)
      book_held(ag_table_entry(reg_table, i), ag_tcount_held(t->calls, i));
  pthread_mutex_unlock(&reg_mu);
}

/* Adds a thread's counts and held timings to the table's entries and zeroes them. Called with
 * reg_mu held. */
static void fold(tc_thread_t *t)
{
  uint32_t n = t->calls ? ag_table_count(reg_table) : 0;
  for (uint32_t i = 0; i < n; i++) {
    ag_entry_t *e = ag_table_entry(reg_table, i);
    book_held(e, ag_tcount_held(t->calls, i));
    uint64_t c = atomic_load_explicit(&t->calls[i], memory_order_relaxed);
    uint64_t v = atomic_load_explicit(&t->calls[ag_tcount_capacity + i], memory_order_relaxed);
    if (c) {
      atomic_fetch_add_explicit(&e->calls, c, memory_order_relaxed);
      atomic_store_explicit(&t->calls[i], 0, memory_order_relaxed);
    }
    if (v) {
      atomic_fetch_add_explicit(&e->vcalls, v, memory_order_relaxed);
      atomic_store_explicit(&t->calls[ag_tcount_capacity + i], 0, memory_order_relaxed);
    }
  }
}

static void release(tc_thread_t *t)
{
  if (t->calls)
    munmap((void *)t->calls, reg_bytes);
  t->calls = NULL;
  if (t->cur_slot >= 0) {
    atomic_store(&cur_slots[t->cur_slot].op, 0);
    atomic_fetch_add(&cur_slots[t->cur_slot].ends, 1); /* the next owner starts elsewhere */
    atomic_store(&cur_slots[t->cur_slot].owned, 0);
  }
  free(t);
}

/* Thread exit: fold, unlink, free. The thread makes no more counted calls through this
 * array (ag_tl.calls is cleared; a later call from another destructor registers anew). */
static void thread_gone(void *arg)
{
  tc_thread_t *t = arg;
  pthread_mutex_lock(&reg_mu);
  fold(t); /* which zeroes every entry the thread counted: the array is as new */
  if (t->calls && nspare < SPARE_MAX)
    spare[nspare++] = t->calls, t->calls = NULL;
  t->prev->next = t->next;
  t->next->prev = t->prev;
  pthread_mutex_unlock(&reg_mu);
  ag_tl.calls = ag_tl.vcalls = NULL;
  ag_tl.tlc = NULL;
  ag_tl.cur = NULL;
  tl_self = NULL;
  release(t);
}

int ag_tcount_init(ag_table_t *t, uint32_t capacity)
{
  reg_table = t;
  reg_bytes = 6 * (size_t)capacity * sizeof(uint64_t); /* calls, variant calls, held timings */
  ag_tcount_capacity = capacity;
  return pthread_key_create(&reg_key, thread_gone) ? -1 : 0;
}

/* Claims a free current-operator slot; -1 when all are taken. */
static int claim_cur_slot(void)
{
  for (int i = 0; i < AG_CUR_SLOTS; i++) {
    int free_ = 0;
    if (atomic_compare_exchange_strong(&cur_slots[i].owned, &free_, 1)) {
      int hi = atomic_load(&cur_hiwater);
      while (hi <= i && !atomic_compare_exchange_weak(&cur_hiwater, &hi, i + 1))
        ;
      return i;
    }
  }
  return -1;
}

void ag_tcount_register(void)
{
  ag_tl.cur = ag_tl.own_cur;
  ag_tl.rng = (uint32_t)(uintptr_t)&ag_tl ^ (uint32_t)ag_now_ns();
  if (!ag_tl.rng)
    ag_tl.rng = 1; /* xorshift's one fixed point */
  tc_thread_t *t = calloc(1, sizeof *t);
  if (!t)
    return;
  pthread_mutex_lock(&reg_mu);
  t->calls = nspare ? spare[--nspare] : NULL;
  pthread_mutex_unlock(&reg_mu);
  if (!t->calls) {
    void *mem = mmap(NULL, reg_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    t->calls = mem == MAP_FAILED ? NULL : mem;
  }
  t->cur_slot = claim_cur_slot();
  t->tid = gettid();
  t->ends = t->cur_slot >= 0 ? &cur_slots[t->cur_slot].ends : NULL;
  if (pthread_setspecific(reg_key, t)) {
    release(t);
    return;
  }
  pthread_mutex_lock(&reg_mu);
  t->next = reg_head.next;
  t->prev = &reg_head;
  reg_head.next->prev = t;
  reg_head.next = t;
  pthread_mutex_unlock(&reg_mu);
  tl_self = t;
  ag_tl.tlc = t->tlc;
  ag_tl.calls = t->calls;
  ag_tl.vcalls = t->calls ? t->calls + ag_tcount_capacity : NULL;
  if (t->cur_slot >= 0)
    ag_tl.cur = &cur_slots[t->cur_slot].op;
}

int ag_tcount_has_tid(pid_t tid)
{
  int found = 0;
  pthread_mutex_lock(&reg_mu);
  for (tc_thread_t *t = reg_head.next; !found && t != &reg_head; t = t->next)
    found = t->tid == tid;
  pthread_mutex_unlock(&reg_mu);
  return found;
}

pid_t ag_tcount_only_caller(void)
{
  pid_t only = 0;
  int n = 0;
  pthread_mutex_lock(&reg_mu);
  for (tc_thread_t *t = reg_head.next; n < 2 && t != &reg_head; t = t->next)
    if (!ag_agent_tid(t->tid))
      only = t->tid, n++;
  pthread_mutex_unlock(&reg_mu);
  return n == 1 ? only : 0;
}

void ag_agent_keep_off_host(void) { ag_agent_keep_off(ag_tcount_only_caller()); }

uint32_t ag_tcount_inflight(void)
{
  int n = atomic_load_explicit(&cur_hiwater, memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    uint32_t op = atomic_load_explicit(&cur_slots[i].op, memory_order_relaxed);
    if (op)
      return op;
  }
  return 0;
}

void ag_tcount_sum(uint64_t *calls, uint64_t *vcalls, uint32_t n)
{
  pthread_mutex_lock(&reg_mu);
  for (uint32_t i = 0; i < n; i++) {
    calls[i] = atomic_load_explicit(&ag_table_entry(reg_table, i)->calls, memory_order_relaxed);
    vcalls[i] = atomic_load_explicit(&ag_table_entry(reg_table, i)->vcalls, memory_order_relaxed);
  }
  for (tc_thread_t *t = reg_head.next; t != &reg_head; t = t->next)
    for (uint32_t i = 0; t->calls && i < n; i++) {
      calls[i] += atomic_load_explicit(&t->calls[i], memory_order_relaxed);
      vcalls[i] += atomic_load_explicit(&t->calls[ag_tcount_capacity + i], memory_order_relaxed);
    }
  pthread_mutex_unlock(&reg_mu);
}

void ag_tcount_sum_one(uint32_t i, uint64_t *calls, uint64_t *vcalls)
{
  pthread_mutex_lock(&reg_mu);
  *calls = atomic_load_explicit(&ag_table_entry(reg_table, i)->calls, memory_order_relaxed);
  *vcalls = atomic_load_explicit(&ag_table_entry(reg_table, i)->vcalls, memory_order_relaxed);
  for (tc_thread_t *t = reg_head.next; t != &reg_head; t = t->next)
    if (t->calls) {
      *calls += atomic_load_explicit(&t->calls[i], memory_order_relaxed);
      *vcalls += atomic_load_explicit(&t->calls[ag_tcount_capacity + i], memory_order_relaxed);
    }
  pthread_mutex_unlock(&reg_mu);
}

size_t ag_tcount_snapshot(ag_epoch_t *out, size_t max)
{
  size_t n = 0;
  pthread_mutex_lock(&reg_mu);
  for (tc_thread_t *t = reg_head.next; t != &reg_head; t = t->next, n++) {
    if (!t->ends)
      n = max; /* a thread without a slot: its calls cannot be seen, no grace can be proven */
    if (n < max)
      out[n] = (ag_epoch_t){t, atomic_load_explicit(t->ends, memory_order_acquire)};
  }
  pthread_mutex_unlock(&reg_mu);
  return n;
}

int ag_tcount_passed(const ag_epoch_t *snap, size_t n)
{
  int passed = 1;
  pthread_mutex_lock(&reg_mu);
  for (size_t i = 0; i < n && passed; i++)
    for (tc_thread_t *t = reg_head.next; t != &reg_head; t = t->next)
      if (t == snap[i].thread && t->ends &&
          atomic_load_explicit(t->ends, memory_order_acquire) == snap[i].ends)
        passed = 0; /* still registered and no call finished since: it might be inside */
  pthread_mutex_unlock(&reg_mu);
  return passed;
}

void ag_tcount_lock(void) { pthread_mutex_lock(&reg_mu); }
void ag_tcount_unlock(void) { pthread_mutex_unlock(&reg_mu); }

void ag_tcount_after_fork_child(void)
{
  for (tc_thread_t *t = reg_head.next, *next; t != &reg_head; t = next) {
    next = t->next;
    if (t != tl_self)
      release(t); /* its thread did not survive the fork */
  }
  reg_head.next = reg_head.prev = &reg_head;
  if (tl_self) {
    if (tl_self->calls)
      madvise((void *)tl_self->calls, reg_bytes, MADV_DONTNEED); /* zero pages again */
    tl_self->next = tl_self->prev = &reg_head;
    tl_self->tid = gettid(); /* the child's */
    reg_head.next = reg_head.prev = tl_self;
  }
  pthread_mutex_unlock(&reg_mu);
}
