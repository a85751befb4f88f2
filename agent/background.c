/* SPDX-License-Identifier: MIT */
/* The agent's background work, as the judge's bursts see it (background.h). */
#include "background.h"

#include <stdatomic.h>

/* Work under way in the low 16 bits, begins counted in the rest: a mark taken while no work ran
 * is still the value when none has begun since (unless exactly 65536 began meanwhile, some
 * minutes of compiles inside one burst of a few milliseconds). Relaxed: a mark orders nothing,
 * it only tells whether the value moved. */
#define BG_WORK 0xffffu
static _Atomic uint32_t bg_state;

void ag_bg_begin(void) /* one more begin, one more piece of work under way */
{
  atomic_fetch_add_explicit(&bg_state, (BG_WORK + 1u) + 1u, memory_order_relaxed);
}

void ag_bg_end(void) { atomic_fetch_sub_explicit(&bg_state, 1u, memory_order_relaxed); }

int ag_bg_busy(void) { return (atomic_load_explicit(&bg_state, memory_order_relaxed) & BG_WORK) != 0; }

uint32_t ag_bg_mark(void) { return atomic_load_explicit(&bg_state, memory_order_relaxed); }

int ag_bg_quiet_since(uint32_t mark)
{
  return !(mark & BG_WORK) && atomic_load_explicit(&bg_state, memory_order_relaxed) == mark;
}

void ag_bg_after_fork_child(void)
{
  /* no work under way, and a new count of begins: a mark the forking thread holds is not quiet */
  atomic_store_explicit(&bg_state, (atomic_load(&bg_state) | BG_WORK) + 1u, memory_order_relaxed);
}
