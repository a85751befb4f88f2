/* SPDX-License-Identifier: MIT */
#ifndef OPJIT_AGENT_BACKGROUND_H
#define OPJIT_AGENT_BACKGROUND_H

#include <stdint.h>

/* The agent's background work (a compile thread's kernel: its compile, tuning, self-test and
 * duel; the machine thread's measurement) takes a CPU a host's own threads may want: a
 * threaded library's helpers on a machine with few cores wait for it, so that an original
 * timed in bursts meanwhile measured 9-60 us a call where a plain run's calls take 7.5-8
 * (a matrix-vector product on 2 threads, 2 vCPUs; docs/never-slower.md). A burst spanning
 * any of it is not timed. begin/end bracket the work (any thread); mark is taken when a
 * burst starts, and quiet_since(mark) says no work ran from then to now. */
void ag_bg_begin(void);
void ag_bg_end(void);
uint32_t ag_bg_mark(void);
int ag_bg_quiet_since(uint32_t mark);

#endif
