/* SPDX-License-Identifier: MIT */
/* Problems: what kernel a signature's key asks for. The key's host (host.h) decodes it into
 * its operator family's typed problem (hosts/<host>_key.h: a GEMM, GEMV, AXPY, DOT or SYRK; a
 * graph's node or group) and that into the column-major jt_gemm_t the generator builds,
 * with the order its operands are passed in; the kernel's kind (jit.h) says the bytes each
 * spans (for the overlap guard). Pure functions of the key: no globals (the size limit is the
 * caller's), so the same key always gives the same kernel. */
#ifndef OPJIT_AGENT_PROBLEM_H
#define OPJIT_AGENT_PROBLEM_H

#include "sig.h"
#include "jit/jit.h"

#include <stddef.h>
#include <stdint.h>

/* What a call through a variant needs, computed once when it is queued. */
typedef struct ag_vrun_s {
  size_t ext_a, ext_b, ext_c; /* bytes each operand spans */
  uint8_t swapped;            /* the kernel takes B before A (a row-major GEMM) */
  uint8_t parts;              /* the kernel computes 1 / parts of N (a GEMV's: of M), run once
                                 per part (par.h); 0 or 1: all of it */
  size_t a_step, b_step, c_step; /* bytes from one part to the next in (the kernel's) A, B, C */
} ag_vrun_t;

/* The kernel key k asks for, in *g: 1, with *swap set when the kernel takes the call's operands
 * in the other order (a row-major GEMM is the column-major C^T = op(B)^T op(A)^T); 0 when the
 * generator cannot build it, or a dimension passes max_dim (OPJIT_JIT_MAX_DIM; max_dim^2 for a
 * vector's length). */
int ag_problem_of(const ag_sig_t *k, long max_dim, jt_gemm_t *g, int *swap);
/* ag_problem_of, saying why when it returns 0: one sentence naming the limit the key passes (a
 * dimension, the dtype, a transpose, the layout, the host, OPJIT_JIT_MAX_DIM) into why (len
 * bytes; NULL: none wanted). */
int ag_problem_check(const ag_sig_t *k, long max_dim, jt_gemm_t *g, int *swap, char *why,
                     size_t len);

/* For the hosts' kernel functions (host.h): a refusal, its sentence into why (len bytes; NULL:
 * none wanted), returning 0; and whether the generator builds g (jt_gemm_supported), when not
 * which of its limits g passes, m, n, k naming the dimensions as the caller's key does (a
 * row-major GEMM swaps g's m and n) and op the operator as the host's users know it (its
 * sentences on a matrix-multiply kernel name it). */
int ag_problem_no(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int ag_problem_takes(const jt_gemm_t *g, const char *op, int m, int n, int k, char *why,
                     size_t len);

/* The kernel family of g, as the machine model keeps compile times (machine.h): its kind's
 * name, "mm", "add_rms_mul", "dot", "syrk" or "gemm". */
const char *ag_problem_family(const jt_gemm_t *g);

/* A long GEMM's N, or a large GEMV's M, in parts (par.h), for at most parts cores: where g is a
 * GEMM (not a SYRK, a dot product nor a graph's node) of AG_PROBLEM_SPLIT_FLOPS or more whose N
 * divides into that many parts of AG_PROBLEM_SPLIT_COLS columns or more, or a GEMV (n = 1, of
 * either transpose; not an AXPY, k = 1) whose A spans AG_PROBLEM_SPLIT_BYTES or more and whose
 * M divides into that many parts of AG_PROBLEM_SPLIT_ROWS rows or a multiple of them,
 * r->parts = parts and the steps between parts set (a GEMV's part: y's rows and the rows of
 * op(A) that give them, x whole), else r->parts = 1. Returns r->parts. */
#define AG_PROBLEM_SPLIT_FLOPS (2.0 * 256 * 256 * 256) /* ~0.5 ms on one core: a worker's wake
                                                          (tens of us) is a few % of it */
#define AG_PROBLEM_SPLIT_COLS 32
#define AG_PROBLEM_SPLIT_BYTES (1u << 20) /* a GEMV streams A: from 1 MB, two cores' caches
                                             and load ports run it 1.1-2x faster than one
                                             (a library's float GEMV on 1 and 2 threads,
                                             Zen 3: 512^2 20 vs 15-18 us, 1024^2 77 vs
                                             52-69, 2048^2 380-490 vs 200-270; docs/jit.md) */
#define AG_PROBLEM_SPLIT_ROWS 16 /* a cache line of y's floats: where y is 64-byte aligned, no
                                    line is written by two parts */
int ag_problem_split(const jt_gemm_t *g, int parts, ag_vrun_t *r);
/* The dimension a split of g cuts: 'M' for a GEMV (n = 1), else 'N'. */
static inline char ag_problem_split_dim(const jt_gemm_t *g) { return g->n == 1 ? 'M' : 'N'; }
/* The problem each part's kernel solves where r splits g: g with n / r->parts columns, a GEMV
 * with m / r->parts rows (g itself where r->parts is 0 or 1). */
jt_gemm_t ag_problem_part(const jt_gemm_t *g, const ag_vrun_t *r);

/* Whether a stored kernel's symbol (jt_gemm_name: opjit_?gemm_XX_<m>x<n>x<k>_l...) was compiled
 * for part, the problem a part's kernel solves in this run (a stored kernel of another split
 * computes other columns, or rows): 1 when it was, or when it is no GEMM's (never split); else 0. */
int ag_problem_symbol_fits(const jt_gemm_t *part, const char *symbol);

/* The bytes g's operands span (0 for kinds whose hosts check overlaps themselves: dot
 * products, MUL_MATs, norms) and the operand order, into *r. */
void ag_problem_extents(const jt_gemm_t *g, int swapped, ag_vrun_t *r);

#endif
