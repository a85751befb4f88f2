/* SPDX-License-Identifier: MIT */
/* The registry of host threads: each thread that makes a counted call registers once and gets
 *  - its own call counters, an array indexed like the signature table, bumped with plain
 *    (relaxed) stores so a call never pays for a locked add. The writer sums the table's
 *    counters and every live thread's array under one mutex; a thread that exits adds its
 *    counts to the table first (pthread key destructor):
 *        total calls of entry i = table.entry[i].calls + sum over live threads of calls[i]
 *    The arrays are anonymous mappings the size of the table: only touched pages cost memory;
 *    an exited thread's array, zeroed by its fold, goes to the next thread that registers.
 *    A thread whose array cannot be made counts with atomic adds on the shared entries.
 *  - its held timings: the ordinary timings of its short calls (agent.c, ag_call_timed), summed
 *    in the same array (4 words an entry from [2 capacity]: the original's count and ns, the
 *    variant's) and booked on the entry AG_HELD_MAX at a time, at the thread's bursts for the
 *    burst's signatures, when it exits (the fold), and every thread's when the process ends. Two
 *    threads that timed one signature's calls each booked with locked adds on one line of its
 *    entry, which moved between their cores at every timing: ~20 ns a call at the default 1
 *    timing in 16 (Zen 5, two threads of a double 16^3 product in profile mode), where one
 *    thread pays nothing. Until the rest of the run books them, a reader of the entry misses at
 *    most AG_HELD_MAX - 1 of each side's timings per thread (the rounds of a signature several
 *    threads call may take another thread's from before the last round).
 *  - its "current operator" slot (entry index + 1, 0 = none), which the sampler's signal
 *    handler reads: the thread's own for its samples, every thread's for samples taken in
 *    threads that never call an operator themselves (a library's pool threads). */
#ifndef OPJIT_AGENT_TCOUNT_H
#define OPJIT_AGENT_TCOUNT_H

#include "table.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define AG_CUR_SLOTS 256 /* threads whose operator pool threads can see; more keep their own */

/* Sets up the registry for table t (once per process, before the first call is counted). */
int ag_tcount_init(ag_table_t *t, uint32_t capacity);

/* Registers the calling thread: sets ag_tl.calls (NULL: count on the shared entries) and
 * ag_tl.cur (never NULL afterwards). */
void ag_tcount_register(void);

/* Total calls of entries [0, n) into calls[0..n), and the calls their variants served into
 * vcalls[0..n). A thread's array holds both: calls at [i], variant calls at [capacity + i]. */
void ag_tcount_sum(uint64_t *calls, uint64_t *vcalls, uint32_t n);
/* The same for entry i alone. */
void ag_tcount_sum_one(uint32_t i, uint64_t *calls, uint64_t *vcalls);
extern uint32_t ag_tcount_capacity;

#define AG_HELD_MAX 8 /* a side's timings a thread holds before it books them */
#define AG_HELD_AFTER 32 /* ... once the entry has booked so many of that side's: its first ones
                            reach the readers (the payback test's mean, the outlier filter, a
                            verdict's first rounds) as they come */
/* Entry i's held timings in a thread's array calls (its ag_tl.calls). */
static inline _Atomic uint64_t *ag_tcount_held(_Atomic uint64_t *calls, uint32_t i)
{
  return calls + 2 * (size_t)ag_tcount_capacity + 4 * (size_t)i;
}
/* Books the calling thread's held timings of entry i (from ag_tl.calls; nothing without). */
void ag_tcount_book_held(uint32_t i);
/* Books every registered thread's held timings of every entry: before the process's last write
 * (exit, _exit, exec), which no other thread's fold may follow. A thread holding a timing at
 * that very moment may have one booked without its time, or lost. try: on a path a signal
 * handler may take (_exit), where the registry's lock is taken only when free (the interrupted
 * thread may hold it); else the calling thread's alone are booked. */
void ag_tcount_book_held_all(int try);

/* Whether thread tid (a gettid) is registered: calls operators. Takes the registry's mutex. */
int ag_tcount_has_tid(pid_t tid);
/* The thread that calls operators where exactly one registered thread does (the agent's own
 * aside: agent.h, ag_agent_tid); 0 when none or several do. Takes the registry's mutex. */
pid_t ag_tcount_only_caller(void);

/* For the sampler's handler (async-signal-safe): the operator some registered thread is
 * running now (entry index + 1), or 0. */
uint32_t ag_tcount_inflight(void);

/* Grace periods for code that was unpublished: a snapshot of every registered thread's count of
 * finished calls, and whether each of those threads has since finished a call (or exited), so
 * that none can still be inside code unpublished before the snapshot. */
typedef struct ag_epoch_s {
  const void *thread;
  uint32_t ends;
} ag_epoch_t;
/* Fills out with up to max entries; returns the number of registered threads, or at least max
 * when a thread has no current-operator slot (then no grace period can be proven: the caller
 * must not free). */
size_t ag_tcount_snapshot(ag_epoch_t *out, size_t max);
int ag_tcount_passed(const ag_epoch_t *snap, size_t n);

/* Fork child: the threads that did not survive the fork are forgotten, and the surviving
 * thread's counts zeroed (the child's run starts from zero). */
void ag_tcount_after_fork_child(void);
/* Around fork, the registry mutex is held so the child never inherits it locked. */
void ag_tcount_lock(void);
void ag_tcount_unlock(void);

#endif
