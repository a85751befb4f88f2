/* SPDX-License-Identifier: MIT */
/* Problems: what kernel a signature's key asks for. A BLAS GEMM, GEMV, AXPY or DOT key, a ggml
 * MUL_MAT (alone or with its residual ADD) or an RMS-norm group becomes the column-major
 * jt_gemm_t the generator builds, with the order its operands are passed in and the bytes each
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
  uint8_t swapped;            /* the kernel takes B before A (CBLAS row-major GEMM) */
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

/* The kernel family of g, as the machine model keeps compile times (machine.h): "mm",
 * "add_rms_mul", "dot" or "gemm". */
const char *ag_problem_family(const jt_gemm_t *g);

/* The bytes g's operands span (0 for kernels whose hosts check overlaps themselves: dot
 * products, MUL_MATs, norms) and the operand order, into *r. */
void ag_problem_extents(const jt_gemm_t *g, int swapped, ag_vrun_t *r);

#endif
