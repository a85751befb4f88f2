/* SPDX-License-Identifier: MIT */
/* The signature table: open addressing over a fixed slot array, read without locks, entries
 * inserted under one mutex and published with release stores. Entries never move and are
 * never removed, so a pointer returned by ag_table_get stays valid for the table's life.
 * Counters are relaxed atomics: a host thread adds, the writer thread reads. */
#ifndef OPJIT_AGENT_TABLE_H
#define OPJIT_AGENT_TABLE_H

#include "sig.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* One signature: its counters and its JIT variant. 64-byte aligned so two signatures never
 * share a cache line; the fields a host thread reads on every call come first. */
typedef struct ag_entry_s {
  ag_sig_t key;
  uint32_t hash;             /* low half of the key's hash: a cheap reject while probing */
  uint32_t index;            /* position in the table (per-thread counter arrays use it) */
  void *_Atomic variant;     /* the published kernel, or NULL: the original runs (tier.h) */
  _Atomic uint32_t tier;     /* enum ag_tier (tier.h) */
  _Atomic uint32_t pair;     /* n > 0: one pair of its variant's calls in n goes in a cold pair
                                (agent.h, ag_call_pair; the judge's watch sets it for a
                                rarely called signature); 0: none */
  _Atomic uint32_t pair_n;   /* its paired calls so far: which side the next one runs */
  _Atomic int32_t verify;    /* calls still to verify against the original */
  _Atomic uint32_t awaiting; /* 1 while its published variant awaits the judge's first verdict:
                                bursts come more often on its calls (compare.h, the bursts'
                                budget; the tiers set it) */
  _Atomic uint64_t calls;    /* calls seen (threads with their own counters add at exit) */
  _Atomic uint64_t timed;    /* original's calls timed as a sample (drawn, a burst's, a pair's,
                                a thread's held ones), not forced */
  _Atomic uint64_t timed_ns; /* sum of their durations */
  _Atomic uint64_t forced;   /* original's calls timed because every such call is (a thread's
                                first, each while it is long: agent.h, AG_LONG_CALL_NS) */
  _Atomic uint64_t forced_ns; /* ... their durations' sum */
  uint64_t slow_ns[3];       /* the slowest of the sampled timings booked, slowest first (0:
                                none; written under table.c's one lock for every entry's, read
                                under it or atomically: ag_entry_orig_book) */
  _Atomic uint64_t best_ns;  /* the fastest timed original call, outliers and calls while a
                                duel ran included (0: none) */
  _Atomic uint64_t best_n;   /* ... of so many timed calls, counted up to AG_ENTRY_BEST_N */
  _Atomic uint64_t vcalls;   /* calls the variant served (threads with counters add at exit) */
  _Atomic uint64_t vtimed, vtimed_ns;  /* variant's timed calls */
  _Atomic uint64_t compile_ns;         /* the variant's compile time (the writer reads it) */
  uint32_t tier_flags;                 /* compile thread only: 1 = speed verdict taken, 2 = the
                                          judge found the published variant faster */
  _Atomic uint32_t fails;              /* compile failures so far (backoff, then blacklist) */
  _Atomic uint64_t guard_miss;         /* calls a variant could not take: a guard failed */
  _Atomic uint32_t offsets; /* where the program's operands lie: A's, B's and C's byte offsets
                               into a 64-byte line (a dot product's x and y as A and B), 6 bits
                               each from bit 0, as a call through its host's full path last
                               passed them (the host notes them); 0 before any. The duel
                               places its scratch operands alike (host.h): a kernel's loads that
                               split lines there and not in the duel, or the other way round,
                               measured another kernel than the program's */
} __attribute__((aligned(64))) ag_entry_t;
/* What a call its variant serves reads of its entry lies in one cache line (the key is read only
 * when the thread's cache misses). */
_Static_assert(offsetof(ag_entry_t, index) < 64 && offsetof(ag_entry_t, variant) < 64 &&
                   offsetof(ag_entry_t, pair) < 64 && offsetof(ag_entry_t, verify) + 4 <= 64,
               "the per-call fields share the entry's first cache line");

/* e's mean original call as the readers take it (what a plain run's mean must agree with).
 * Two kinds of timing are booked. One drawn at random (agent.h, ag_call_pick: OPJIT_TIME_EVERY)
 * samples the calls; one forced (a thread's first call of the signature, and every call while
 * the signature is long and its chain runs) samples nothing: it was taken because the call
 * came, and where such calls come in a slow spell, a mean over both kinds is the spell's.
 * numpy's double GEMV 128x256 on two library threads, 4 us a call, had its 2nd to 7th calls take
 * 1.7-4.8 ms in a first run (the agent's startup held the CPU its library's thread waited for),
 * each timed as long (its first took 285 us); with 6 later calls drawn at 4-6 us, its mean read
 * 1.6 ms, its run's operator time 2.7 s of 0.94 s. So the mean is the drawn timings' once there
 * is one, less the slowest few (slow_ns) each more than AG_ENTRY_SLOW times the mean of at least
 * two left (a plain run's mean over many calls does not feel a few stalls, a few timed calls'
 * does: the rule later timings meet as they are booked, agent.h, ag_timing_outlier, applied
 * once the slowest have company); the forced timings' until then. */
#define AG_ENTRY_SLOW 8
void ag_entry_orig_timed(ag_entry_t *e, uint64_t *n, uint64_t *ns);
/* Books dt, a timing of e's original call, as ag_entry_orig_timed reads them: forced (1) or
 * drawn (0; noted among the slowest, slow_ns, once the sums hold it). */
void ag_entry_orig_book(ag_entry_t *e, uint64_t dt, int forced);

/* Whether dt is slower than the third slowest of e's original timings: ag_entry_orig_book notes
 * it among them (a timing that is not can be booked later with others: tcount.h, held
 * timings). */
static inline int ag_entry_slowest(ag_entry_t *e, uint64_t dt)
{
  size_t last = sizeof e->slow_ns / sizeof e->slow_ns[0] - 1;
  return dt > __atomic_load_n(&e->slow_ns[last], __ATOMIC_RELAXED);
}

/* Notes an original call of e that took dt ns in its fastest (a lost race between two threads
 * loses one timing's chance to be the fastest, never a figure's consistency), and counts it up to
 * AG_ENTRY_BEST_N: its readers ask for 4 (policy.h), and a locked add on every timing moved the
 * entry's line between the cores of threads that call it. */
#define AG_ENTRY_BEST_N 64
static inline void ag_entry_orig_best(ag_entry_t *e, uint64_t dt)
{
  uint64_t best = atomic_load_explicit(&e->best_ns, memory_order_relaxed);
  if (dt && (!best || dt < best))
    atomic_store_explicit(&e->best_ns, dt, memory_order_relaxed);
  if (atomic_load_explicit(&e->best_n, memory_order_relaxed) < AG_ENTRY_BEST_N)
    atomic_fetch_add_explicit(&e->best_n, 1, memory_order_relaxed);
}

typedef struct ag_table_s ag_table_t;
typedef uint64_t (*ag_hash_fn)(const ag_sig_t *key);

/* A table holding up to capacity signatures; hash is ag_sig_hash unless a test needs
 * collisions. Returns NULL when out of memory. */
ag_table_t *ag_table_new(uint32_t capacity, ag_hash_fn hash);
void ag_table_free(ag_table_t *t);

/* The entry of key, inserted if new. NULL when the table is full (the caller counts the
 * call as overflow). Lock-free when the key is present. */
ag_entry_t *ag_table_get(ag_table_t *t, const ag_sig_t *key);

/* Number of entries, and entry i (0 <= i < count): for the writer's snapshots. */
uint32_t ag_table_count(const ag_table_t *t);
ag_entry_t *ag_table_entry(ag_table_t *t, uint32_t i);

/* Zeroes every counter (a fork child starts its own run with the parent's signatures). */
void ag_table_reset_counts(ag_table_t *t);

/* The table's insert mutex and the slowest timings' (ag_entry_orig_book), for pthread_atfork:
 * held across fork so no child inherits them locked mid-update. */
void ag_table_lock(ag_table_t *t);
void ag_table_unlock(ag_table_t *t);

#endif
