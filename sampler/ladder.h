/* SPDX-License-Identifier: MIT */
/* Which sampling mechanism a process gets (sampler.h's event choice), as pure functions of the
 * asked event, the rate and the scheduler's tick: the sampler walks this ladder probing each
 * step, and `opjit doctor` walks it with the events it probed itself, so both say the same. */
#ifndef OPJIT_SAMPLER_LADDER_H
#define OPJIT_SAMPLER_LADDER_H

#include "sampler.h"

#include <string.h>
#include <time.h>

/* The scheduler's tick rate (CONFIG_HZ): a coarse clock advances once per tick, so its
 * resolution is the tick's period. 0 when the kernel does not say. */
static inline int sp_tick_hz(void)
{
  struct timespec res;
  if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) || res.tv_sec || res.tv_nsec <= 0)
    return 0;
  return (int)(1000000000L / res.tv_nsec);
}

/* The mechanisms to try for events want ("auto", "cycles", "task-clock", "cpu-clock", "timer")
 * at hz samples a second, best first, ending with SP_OFF. Without a PMU a thread's CPU-time
 * timer comes before a perf clock when the rate fits the tick (0: unknown): the timer expires
 * on the tick that interrupts the thread anyway, while each task-clock sample is an interrupt
 * of its own (an hrtimer), which costs far more than its signal in a virtual machine
 * (bench_lockstep, docs/stacks.md: 35-124 us of two lock-step threads' wall time a task-clock
 * sample, 0-49 us a timer's, whose handler alone takes 6-11 us). Above the tick rate a timer
 * could not keep the rate (its samples would weigh the periods they miss), so the perf clock
 * comes first. */
static inline void sp_ladder(const char *want, int hz, int tick, int out[4])
{
  int n = 0, auto_ = strcmp(want, "auto") == 0, cycles = auto_ || strcmp(want, "cycles") == 0;
  int clock = cycles || strcmp(want, "task-clock") == 0 || strcmp(want, "cpu-clock") == 0;
  int timer_first = cycles && tick > 0 && hz <= tick;
  if (cycles)
    out[n++] = SP_PERF_HW;
  if (timer_first)
    out[n++] = SP_TIMER;
  if (clock)
    out[n++] = SP_PERF_SW;
  if (!timer_first)
    out[n++] = SP_TIMER;
  out[n] = SP_OFF;
}

/* The event a ladder's step samples with, as status and reports name it. */
static inline const char *sp_mode_event(int mode, const char *want)
{
  if (mode == SP_PERF_SW)
    return strcmp(want, "cpu-clock") == 0 ? "cpu-clock" : "task-clock";
  return mode == SP_TIMER ? "timer" : mode == SP_PERF_HW ? "cycles" : "off";
}

#endif
