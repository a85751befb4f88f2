/* SPDX-License-Identifier: MIT */
/* Per-thread call counters: each host thread counts its calls in an array of its own, indexed
 * like the signature table, with plain (relaxed) stores, so a call never pays for a locked
 * add. The writer sums the table's counters and every live thread's array under one mutex; a
 * thread that exits adds its counts to the table first (pthread key destructor).
 *
 *   total calls of entry i = table.entry[i].calls + sum over live threads of thread.calls[i]
 *
 * The arrays are anonymous mappings the size of the table: only the pages a thread touches
 * become memory. A thread whose array cannot be made falls back to atomic adds on the entry. */
#ifndef OPJIT_AGENT_TCOUNT_H
#define OPJIT_AGENT_TCOUNT_H

#include "table.h"

#include <stdatomic.h>
#include <stdint.h>

/* Sets up the registry for table t (once per process, before the first call is counted). */
int ag_tcount_init(ag_table_t *t, uint32_t capacity);

/* Registers the calling thread; returns its counter array or NULL (then use atomic adds). */
_Atomic uint64_t *ag_tcount_register(void);

/* Total calls of entries [0, n) into out[0..n). */
void ag_tcount_sum(uint64_t *out, uint32_t n);

/* Fork child: the threads that did not survive the fork are forgotten, and the surviving
 * thread's counts zeroed (the child's run starts from zero). */
void ag_tcount_after_fork_child(void);
/* Around fork, the registry mutex is held so the child never inherits it locked. */
void ag_tcount_lock(void);
void ag_tcount_unlock(void);

#endif
