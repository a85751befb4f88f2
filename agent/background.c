/* SPDX-License-Identifier: MIT */
/* The agent's background work, as the judge's bursts see it (background.h). */
#include "background.h"

#include <stdatomic.h>

/* Work under way in the low 16 bits, each begin counted in the rest: a mark taken while no
 * work ran is still the value when none has begun since. */
static _Atomic uint32_t bg_state;

void ag_bg_begin(void) { atomic_fetch_add(&bg_state, 1u + (1u << 16)); }

void ag_bg_end(void) { atomic_fetch_sub(&bg_state, 1u); }

uint32_t ag_bg_mark(void) { return atomic_load_explicit(&bg_state, memory_order_relaxed); }

int ag_bg_quiet_since(uint32_t mark)
{
  return !(mark & 0xffffu) && atomic_load_explicit(&bg_state, memory_order_relaxed) == mark;
}
