/* SPDX-License-Identifier: MIT */
/* The warm start: a run begins where the program's earlier runs left off.
 *
 * On a process's first counted call in jit mode (OPJIT_WARM), before that call runs, the
 * agent reads the program's profile on this machine (store.h, st_profile: its recent runs,
 * each weighing half as much every OPJIT_DECAY runs) and, for each signature:
 *   still called, with a valid object for this CPU -> placed without LLVM: all of them in one
 *                                                     batch (tier.h, ag_tier_batch_add), made
 *                                                     executable at once and published in the
 *                                                     profile's order, hottest first (placing
 *                                                     costs microseconds: no payback test)
 *   hot (the payback test), with no usable object  -> queued for compilation at once
 *   not called any more (its decayed calls weigh under AG_WARM_DECAYED_BELOW), with an object
 *                                                  -> invalidated: "decayed"
 *   demoted in the newest run that had a variant for it, by this generator version
 *                                                  -> left to the original (neither placed nor
 *                                                     compiled: it measured slower here)
 * An object is usable when it was built for this CPU (model and flags), by this generator
 * version and LLVM version, and its checksum holds; otherwise it is invalidated with that
 * reason ("cpu", "generator", "llvm", "checksum", "unloadable") and recompiled. With
 * OPJIT_FLEET, a signature this profile would compile takes the fleet's kernel first when it has
 * one that verifies (agent/fleet.h). Objects are stored per signature and machine, not per
 * program: a signature that gets hot later (in a program whose profile lacks it) takes the
 * object any program stored for it (ag_warm_place), and the warm start lists those signatures
 * for the payback test (ag_warm_shelved). */
#ifndef OPJIT_AGENT_WARM_H
#define OPJIT_AGENT_WARM_H

#include "runinfo.h"
#include "table.h"
#include "../store/store.h"

#include <stddef.h>
#include <stdint.h>

#define AG_WARM_DECAYED_BELOW 1.0 /* decayed calls under one call's weight: not called any more */

typedef struct ag_warm_s {
  int64_t runs;          /* earlier runs the profile came from */
  int loaded, queued, invalidated;
} ag_warm_t;

/* Why an object (what it was built for and with, its code and checksum) cannot be placed on
 * this machine, whose object key (machine.h) is key: the reason's sentence in why, its first
 * word the reason (cpu, generator, llvm, checksum); NULL when it can. */
const char *ag_warm_unusable(const char *cpu, int generator, const char *llvm,
                             const void *code, size_t code_len, uint64_t checksum,
                             const char *key, char *why, size_t len);

/* A signature that got hot in this run (entry e, QUEUED, on the compile thread that took it):
 * the kernel stored for it on this machine (store.h, st_object: stored by any program's run,
 * the warm start placing only its own profile's) placed with its judge pool, as the warm start
 * places one, when it can be (tier.h, ag_tier_load_queued's returns: 0 placed, 1 not placed
 * and e settled, demoted by the pool or the code cache full); -1 when there is none, it cannot be
 * placed here (another generator, LLVM, split, or damaged: compiled anew, and the compile's
 * object replaces it at the run's end) or the store cannot be read. store and db open, their
 * owner's lock held. */
int ag_warm_place(const st_api_t *store, st_db_t *db, const ag_runinfo_t *ri, ag_entry_t *e);

/* Whether the database had a kernel for key on this machine when the warm start read it (its
 * shelf, listed after the profile's kernels are placed): such a signature is charged a placing,
 * not a compile, when it gets hot (tier.c). 0 before the warm start, or without one (no
 * database yet, an untrusted one). Any thread. */
int ag_warm_shelved(const ag_sig_t *key);

/* Reads the profile through store and db (open) and acts on it; the signature table exists.
 * A store error leaves the run cold, with one warning. */
void ag_warm_start(const st_api_t *store, st_db_t *db, const ag_runinfo_t *ri, ag_warm_t *out);

#endif
