/* SPDX-License-Identifier: MIT */
/* The agent's background work, as the judge's bursts see it.
 * The agent's background work (a compile thread's kernel: loading the JIT, its compile, tuning,
 * self-test and duel; the machine thread's measurement; the writer's flush) takes a CPU a host's own threads may
 * want: a threaded library's helpers on a machine with few cores wait for it, so that an
 * original timed in bursts meanwhile measured 9-60 us a call where a plain run's calls take
 * 7.5-8 (a matrix-vector product on 2 threads, 2 vCPUs; docs/never-slower.md). In a host with
 * threads of its own (agent.h, ag_bg_disturbs and ag_bg_disturbed_since) a burst is not begun
 * while such work runs, one it overlapped is not timed, nor is a call's timing booked (but for
 * a side's first), nor a window of calls taken for their rate. Any thread; lock-free. */
#ifndef OPJIT_AGENT_BACKGROUND_H
#define OPJIT_AGENT_BACKGROUND_H

#include <stdint.h>

/* Brackets one piece of background work (nested or on several threads at once). */
void ag_bg_begin(void);
void ag_bg_end(void);
/* Whether any background work runs now. */
int ag_bg_busy(void);
/* A mark to take when a burst starts ... */
uint32_t ag_bg_mark(void);
/* ... and whether no background work ran from then to now (none under way at the mark, none
 * begun since). */
int ag_bg_quiet_since(uint32_t mark);
/* In a fork child: the parent's threads, whose work was under way, do not exist here. */
void ag_bg_after_fork_child(void);

#endif
