/* SPDX-License-Identifier: MIT */
/* Kernels on several cores: a long GEMM's N (a large GEMV's M) in equal parts, one per core of
 * the process.
 *
 * A host whose library runs its long calls on several threads (a numeric library's pool: the
 * process's cores) is raced by a kernel on one core: a single-threaded kernel must be that many
 * times as fast per core to win (a GEMV, bound by the loads of one core, cannot). So a long
 * GEMM's kernel may be compiled for a part of N (problem.h, ag_vrun_t.parts: the kernel computes
 * n / parts columns, B and C offset by a part's width), a large GEMV's for a part of M (m / parts
 * rows of y, A offset by as many rows of op(A), x whole), and each call runs the parts at
 * once, as the library's own pool would: the calling thread runs the first, and each other part
 * is taken by whichever thread gets to it first, a worker or the caller, which takes every part
 * still untaken when it is free: a worker slow to start (another pool's thread spinning on its
 * core) costs the call a part's time, never a wait for it to start (a split GEMV judged in cold
 * pairs against a library whose threads spun on took 460-570 us a call where its parts take
 * 50); one preempted in its part is still waited for. The workers
 * are the agent's threads (not the host's: agent.h, ag_host_threaded), started at the first
 * split call; between calls each spins for AG_PAR_SPIN_NS, yielding its core every ~10 us (as
 * the caller does while it waits for a part: par.c, spin_until_changed), then sleeps on a futex
 * until the next (a program that calls a long GEMM in a loop finds them awake; one that stopped
 * pays them no CPU). One call at a time: a call that
 * finds the pool taken (another host thread's call, a check on the compile thread) or without
 * workers (none could be started; a forked child's pool stays empty until its first split call
 * starts its own) runs its parts one after the other on its own thread, with the same result.
 * The parts write disjoint columns (rows) of C and read A and B only: the result is the one the
 * kernel gives part by part, bit for bit, however the parts are spread. */
#ifndef OPJIT_AGENT_PAR_H
#define OPJIT_AGENT_PAR_H

#include "problem.h"

#define AG_PAR_MAX 8             /* parts (and so cores) a call is split into, at most */
#define AG_PAR_SPIN_NS 200000    /* a worker's spin after a call before it sleeps */

/* The parts a long GEMM's (a large GEMV's) kernel may take in this process: option
 * (OPJIT_KERNEL_THREADS) when set (1: never split), else, where the host runs threads of its own (host_threaded: agent.h,
 * ag_host_threaded; its library's pool), the CPUs the process could run on when the agent
 * loaded (agent.h, ag_process_cpu_count: the same whichever thread asks), capped at
 * AG_PAR_MAX; 1 otherwise. */
int ag_par_parts(long option, int host_threaded);

/* Runs kernel fn on a call's operands as run says (a, b in the kernel's order): fn once when
 * run is NULL or run->parts <= 1, else once per part, part p on A + p a_step, B + p b_step and
 * C + p c_step bytes, the parts at once where the pool is free (above), else one after the other. */
void ag_par_gemm(const ag_vrun_t *run, jt_gemm_fn fn, const void *a, const void *b, void *c,
                 double alpha, double beta);

/* A forked child's pool: empty (the workers stayed in the parent), free (a call the fork
 * interrupted holds nothing in the child); its first split call starts workers of its own. */
void ag_par_after_fork_child(void);

/* Split calls so far that ran their parts at once, and that ran them one after another (the
 * pool taken or without workers): for the tests. */
void ag_par_counts(uint64_t *together, uint64_t *serial);

#endif
