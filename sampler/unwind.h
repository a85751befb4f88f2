/* SPDX-License-Identifier: MIT */
/* Stack walking inside the sampler's signal handler, without libunwind on the common path.
 *
 * libunwind costs 15-25 us a sample here: its step-by-step walk looks every frame up through
 * dl_iterate_phdr, and unw_backtrace starts that walk over whenever its trace cache meets a
 * frame it cannot classify (gcc's realigned AVX frames in ggml, for one). Under a host whose
 * threads meet at a barrier after every node, each of those microseconds stalls them all.
 *
 * This walker reads each loaded object's .eh_frame_hdr search table itself, interprets the
 * call-frame instructions x86-64 compilers emit for the three values a walk needs (the CFA,
 * RBP and the return address; including gcc's realignment forms, CFA = *(RBP + k) and, in a
 * realigned frame's prologue and epilogue, CFA = DRAP register + k, and the linker's lazy PLT
 * expression), and caches
 * the resulting rules in lock-free tables every thread shares: by return address, and for an
 * interrupted PC (a new instruction nearly every sample) by its CFI row's code range. A warm
 * walk is a table probe and two or three stack loads a frame.
 *
 * What it never does: read memory outside the walked thread's stack bounds (given by the
 * caller) and the readable segments of the objects in its snapshot; take a lock; allocate.
 * The snapshot of loaded objects is made outside the handler (uw_refresh) and replaced when
 * objects come or go; uw_unload_begin/uw_unload_end bracket a dlclose so that no walk reads
 * an object while it is unmapped. */
#ifndef OPJIT_SAMPLER_UNWIND_H
#define OPJIT_SAMPLER_UNWIND_H

#include <stddef.h>
#include <stdint.h>

/* Why a walk stopped. */
enum uw_stop {
  UW_END = 0,     /* the outermost frame (its return address is undefined, or 0) */
  UW_MAX,         /* out filled */
  UW_UNSUPPORTED, /* a frame whose rule this walker does not interpret */
  UW_NOINFO,      /* a code address in no object of the snapshot, or with no FDE (JIT code
                     nobody gave: uw_add_code) */
  UW_BOUNDS,      /* a load outside the stack bounds, or a frame that does not move outwards */
  UW_OFF,         /* no snapshot (never refreshed, or an unload in progress: ours, or the
                     loader's own, which r_debug shows) */
};

typedef struct uw_regs_s {
  uint64_t ip, sp, bp; /* of the interrupted frame */
  uint64_t r10, r13;   /* gcc's DRAP registers: a realigned frame's CFA in its prologue and
                          epilogue (left 0, such an interrupted frame stops the walk) */
} uw_regs_t;

/* Takes a new snapshot when objects were loaded or unloaded since the last one (glibc's
 * dl_iterate_phdr counters), when JIT code came or went (uw_add_code) or when none exists; frees the old one once no walk uses it.
 * Not for the signal handler. Returns 0, or -1 when out of memory (the old snapshot stays). */
int uw_refresh(void);

/* Around a dlclose: begin withdraws the snapshot and waits until no walk is inside it; end
 * forgets the cached rules (the addresses may hold other code later) and takes a new one. */
void uw_unload_begin(void);
void uw_unload_end(void);

/* Code outside every loaded object (opjit's JIT kernels): [lo, hi) and its call-frame rules,
 * cfi: one CIE then one FDE with absolute pointers (jit/objload.h, jt_obj_cfi), copied (code
 * at lo already registered is replaced). Walks step out of its frames from the next snapshot
 * on (the next uw_refresh: cheap here, as a warm start may place thousands of kernels).
 * uw_remove_code, once the code is freed and before any other code can take its place, takes
 * them out and forgets the rules cached for its addresses, with a new snapshot at once. Not
 * for the signal handler. uw_add_code returns 0, or -1 (bad rules, out of memory: its frames
 * stop walks). */
int uw_add_code(uint64_t lo, uint64_t hi, const uint8_t *cfi, size_t len);
void uw_remove_code(uint64_t lo);

/* In a fork child: the parent's walks in progress belong to threads the child lacks. */
void uw_after_fork_child(void);

/* Async-signal-safe. Walks from r, writing code addresses innermost first: out[0] = r.ip, then
 * each caller's return address, at most max. Loads from the stack only inside [lo, hi).
 * Returns the number written (>= 1 when max >= 1) and sets *stop. */
int uw_walk(uw_regs_t r, uint64_t lo, uint64_t hi, uint64_t *out, int max, int *stop);
/* The same walk; *at gets the registers of the frame it ended in (out[n - 1]'s: its RSP, and
 * RBP as far as the walk knew it), so that a caller can tell whether a frame it knows lies
 * further out and resume from there (sampler.c's stitching). */
int uw_walk_at(uw_regs_t r, uint64_t lo, uint64_t hi, uint64_t *out, int max, int *stop,
               uw_regs_t *at);

#endif
