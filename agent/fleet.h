/* SPDX-License-Identifier: MIT */
/* The agent's side of the fleet store (store/fleet.h), on when OPJIT_FLEET names one. Nothing
 * here runs on a host thread: the warm start's fetch runs on the writer (bounded by
 * OPJIT_FLEET_WAIT_MS, like the rest of the warm start the first call waits for it
 * OPJIT_WARM_WAIT_US at most), the pushes on a thread of their own. libopjit-fleet.so (and
 * with it libpq and libcrypto) is loaded only then.
 *
 *   fetch (writer, warm start) ─▶ the program's fleet profile and this CPU's kernels, kept
 *        └─ ag_fleet_place: a signature the local profile cannot serve gets the fleet's kernel
 *           when its tag verifies under OPJIT_FLEET_KEY and warm.h's checks pass; otherwise a
 *           "refused" event and the local path (compile)
 *   push (opjit-fleet thread): at start, every OPJIT_FLEET_PUSH_MS, and once more after the
 *        run's final write (ag_fleet_final): finished local runs the fleet lacks, models,
 *        objects. A fleet down or refusing costs one warning per process; the backlog goes with
 *        a later push (this run's, or a later run's).
 * A fork child keeps none of this (its writer starts its own); the parent's connection is
 * never touched by the child. */
#ifndef OPJIT_AGENT_FLEET_H
#define OPJIT_AGENT_FLEET_H

#include "runinfo.h"
#include "table.h"
#include "warm.h"

/* Writer thread, in the warm start, before the local profile is read: fetches the program's
 * fleet profile and this CPU's kernels (nothing without OPJIT_FLEET; no kernel with
 * OPJIT_FLEET_KERNELS=0). Returns 1 when the fleet knows the program, 0 otherwise (a fleet
 * that cannot be reached costs one warning). */
int ag_fleet_fetch(const ag_runinfo_t *ri);

/* Places the fleet's kernel for cold entry e, if the fetch brought one that verifies; a kernel
 * that does not is refused with an event. Returns 1 when placed. */
int ag_fleet_place(ag_entry_t *e);

/* Writer thread, after the local warm start: places the fleet's kernels of every signature
 * still cold that the fleet's profile calls, queues those it makes hot and has no kernel for
 * (counted in *w), then frees what the fetch kept. */
void ag_fleet_warm(ag_warm_t *w);

/* Writer thread: starts the push thread (once per process; nothing without OPJIT_FLEET). */
void ag_fleet_start(void);

/* Writer thread, after the run's final write: asks for a last push and waits for it
 * OPJIT_FLEET_WAIT_MS at most (and half of OPJIT_EXIT_WAIT_MS at most). */
void ag_fleet_final(void);

#endif
