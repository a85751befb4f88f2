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
 * program: after the warm start, the signatures that have one are listed (ag_warm_read_shelf),
 * and one that gets hot later (in a program whose profile lacks it) is charged a placing and
 * takes the object any program stored for it (ag_warm_stored, ag_warm_place). */
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
  int complete;          /* the whole profile was read and acted on */
  int damaged;           /* the profile's read met damage (ST_ECORRUPT): the caller says it */
} ag_warm_t;

/* Why an object (what it was built for and with, its code and checksum) cannot be placed on
 * this machine, whose object key (machine.h) is key: the reason's sentence in why, its first
 * word the reason (cpu, generator, llvm, checksum); NULL when it can. */
const char *ag_warm_unusable(const char *cpu, int generator, const char *llvm,
                             const void *code, size_t code_len, uint64_t checksum,
                             const char *key, char *why, size_t len);

/* After the warm start (and only after one that read the whole profile: ag_warm_t.complete, so
 * that no signature it leaves on the original takes another program's kernel), once per
 * process: lists the signatures the database has a kernel for on this machine, built by this
 * generator and LLVM, by any program's run (st_shelf). store and db open, their owner's lock
 * held. */
void ag_warm_read_shelf(const st_api_t *store, st_db_t *db, const ag_runinfo_t *ri);

/* Whether key is on that list: such a signature, hot, is charged a placing rather than a
 * compile (tier.c) and its compile thread places the stored kernel (ag_warm_stored,
 * ag_warm_place). 0 before the list is read, or without one. Any thread. */
int ag_warm_shelved(const ag_sig_t *key);

/* Entry e's stored kernel (st_object, any program's) into *h: 1 when it can be placed here, 0
 * when it is gone or cannot be (a refused event says why: it is compiled), -1 when the store
 * cannot be read. h is freed with store->hot_free whatever the return. store and db open, their
 * owner's lock held. */
int ag_warm_stored(const st_api_t *store, st_db_t *db, const ag_runinfo_t *ri, ag_entry_t *e,
                   st_hot_t *h);

/* Places h (ag_warm_stored's) for e, QUEUED on the compile thread that took it, with its judge
 * pool, as tier.h's ag_tier_load_queued returns (0 placed; 1 demoted by the pool, or the code
 * cache full even after evicting; -1 not placed: a refused event says why). No lock needed. */
int ag_warm_place(ag_entry_t *e, const st_hot_t *h);

/* Reads the profile through store and db (open) and acts on it; the signature table exists.
 * A store error leaves the run cold, with one warning (damage: out->damaged, unsaid). */
void ag_warm_start(const st_api_t *store, st_db_t *db, const ag_runinfo_t *ri, ag_warm_t *out);

#endif
