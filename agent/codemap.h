/* SPDX-License-Identifier: MIT */
/* The code map: every JIT kernel's code this process runs, by address range, with its name and,
 * for a kernel placed from the store, its mapping (jit/objload.h). The tiers register a kernel
 * when it is published or placed and remove it when its code is freed; the sampler's
 * aggregation asks which kernel holds a PC.
 *
 * Slots are reused: a process that compiles and evicts kernels for ever keeps as many slots as
 * it ever had kernels live at once (at most AG_CODE_MAX). Writers take the map's mutex; readers
 * (ag_code_at) take no lock: each slot carries a sequence count, odd while it is being written,
 * and a reader retries a slot whose count moved under it. Names are interned once per distinct
 * name and never freed, so a name a reader got stays valid for the process's life. */
#ifndef OPJIT_AGENT_CODEMAP_H
#define OPJIT_AGENT_CODEMAP_H

#include "sig.h"
#include "jit/objload.h"

#include <stddef.h>
#include <stdint.h>

#define AG_CODE_CHUNK 1024    /* slots allocated at a time */
#define AG_CODE_CHUNKS 64     /* ... up to AG_CODE_MAX live kernels */
#define AG_CODE_MAX (AG_CODE_CHUNK * AG_CODE_CHUNKS)

/* One registered kernel, as ag_code_find copies it out. */
typedef struct ag_code_s {
  uint64_t lo, hi;      /* its code: [lo, hi) */
  const char *name;     /* interned: valid for the process's life */
  const ag_sig_t *key;  /* the signature that registered it (its table entry's key) */
  jt_loaded_t loaded;   /* placed from the store by this process (map set): freed with
                           jt_obj_unload; else zero (LLJIT's code is freed through the JIT) */
} ag_code_t;

/* Registers fn's code [fn, fn + size) for the signature whose key is *key (a table entry's: it
 * lives as long as the process). Returns 0; 1 when fn is registered already (one kernel two
 * signatures share: the first registration stands); -1 when out of memory or AG_CODE_MAX
 * kernels are live (nothing is registered then). */
int ag_code_add(const void *fn, size_t size, const char *name, const jt_loaded_t *loaded,
                const ag_sig_t *key);

/* Copies fn's registration into *out; 0, or -1 when fn is not registered. */
int ag_code_find(const void *fn, ag_code_t *out);

/* Removes fn's registration (its code is being freed): no PC is in it from now on, and its
 * slot serves the next registration. 0, or -1 when fn is not registered. */
int ag_code_remove(const void *fn);

/* The kernel holding pc: 1 with its extent and name, or 0. Any thread but a signal handler. */
int ag_code_at(uint64_t pc, uint64_t *lo, uint64_t *hi, const char **name);

/* A number that changes with every registration and removal: a reader that cached what
 * ag_code_at said about a PC knows by it whether that may have changed. */
uint64_t ag_code_generation(void);

/* ag_code_at from a signal handler (agent/crash.c): async-signal-safe, no lock, no spinning on a
 * slot being written (after a few tries it is passed over), and the key of the signature that
 * registered it. 1 or 0. */
int ag_code_at_signal(uint64_t pc, uint64_t *lo, uint64_t *hi, const char **name,
                      const ag_sig_t **key);

/* Kernels registered now. */
size_t ag_code_live(void);

/* Fork child: the map's mutex starts unlocked (a parent thread may have held it). */
void ag_code_after_fork_child(void);

#endif
