/* SPDX-License-Identifier: MIT */
/* The ggml host's MUL_MAT and FLASH_ATTN_EXT checks: the exact products and softmaxes its
 * kernels are held to (ggml_kernels.c checks its calls' results with them) and the self-tests
 * a kernel passes before it is published (the host row's selftest, host.h). Pure functions of their operands, with the
 * bounds of verify.h; compiled without the ggml headers (the tests use them too). */
#ifndef OPJIT_AGENT_HOSTS_GGML_VERIFY_H
#define OPJIT_AGENT_HOSTS_GGML_VERIFY_H

#include "jit/jit.h"

#include <stdint.h>

/* Checking a ggml MUL_MAT's results, y[j*m + i] = sum over kk < k of w[i*k + kk] x[j*k + kk]
 * (w f16 when w16, as jt_gemm_t's: 1 with x rounded to f16, as ggml's own MUL_MAT does; 2 with
 * x as it is, as ggml's AMX buffer does): the exact element (i, j), in double,
 * with its products' magnitude in *mag; and a tally of elements against their exact values
 * within the bound of a float sum of k products (skipped when mag is not finite: no bound). */
typedef struct ag_mm_check_s {
  double worst, bound; /* the worst excess over its bound; while none, the loosest bound met */
  int checked;
} ag_mm_check_t;
double ag_mm_exact(const void *w, int w16, const float *x, int64_t k, int64_t i, int64_t j,
                   double *mag);
void ag_mm_tally(ag_mm_check_t *c, double got, double exact, double mag, int64_t k);

/* A MUL_MAT kernel's check before it is published (g->mm; g->mm_add: fn is a jt_mm_add_fn, else
 * a jt_mm_fn): 80 rows from row 16 (two row blocks, at an offset as a thread's share has) of a
 * product of random inputs at its exact shape, 32 columns (the first and last NR-wide blocks,
 * the rest at random), against exact dot products within the bound of a float sum of k
 * products. Returns 1 (passed), 0 (failed: *worst and *bound say by how much), -1 (no memory). */
int ag_ggml_mm_selftest(const jt_gemm_t *g, void (*fn)(void), double *worst, double *bound);

/* Checking a FLASH_ATTN_EXT row (jt_fa_fn's arguments a, of a head of dk x dv): row i's exact
 * outputs (dv of them, in double: the softmax over its unmasked keys; zeros when it has none)
 * into exact, and in *bound the bound of the kernel's float steps on each: (2 (dk scale A + 8)
 * + n_kv + 4) eps max |v_j| with A the largest sum over d of |q_d k_jd| among its keys (each
 * score's float sum of dk products and e^x's rounding shift its weight by a relative
 * (dk scale A + 8) eps; the sums over the keys add (n_kv + 4) eps). */
void ag_fa_exact(const jt_fa_args_t *a, int dk, int dv, int64_t i, double *exact, double *bound);
/* Tallies dv outputs got against exact within bound (ag_mm_check_t's worst and bound). */
void ag_fa_tally(ag_mm_check_t *c, const float *got, const double *exact, int dv, double bound);

/* A FLASH_ATTN_EXT kernel's check before it is published (g->fa; fn a jt_fa_fn): one head of
 * g->n query rows against as many keys under a causal mask with holes, its first 24 rows and its
 * last 40 computed (two calls) and each output checked; an f16 kernel (g->fa 2) against
 * ag_fa16_ref instead (fa16_selftest). Returns ag_ggml_mm_selftest's. */
int ag_ggml_fa_selftest(const jt_gemm_t *g, void (*fn)(void), double *worst, double *bound);

/* ggml's few-row FLASH_ATTN_EXT steps (jit.h, fa == 2) in C, what the f16 kernel computes for
 * a's heads, rows and keys, into a->out and a->ms: its dot products summed over lanes-wide
 * vectors (16 or 8: the order of ggml's AVX-512 or AVX2 code; an ulp of a score apart
 * otherwise), e^x by libm's expf (ggml's). The stand-in for the f16 kernel and what it is
 * checked against. */
void ag_fa16_ref(const jt_fa_args_t *a, int dk, int dv, int lanes);
/* The bound on an f16 kernel's outputs of a row (normalised or not) against ref, the
 * reference's dv of them: 4 f16 ulps of the row's largest |ref| (a kernel that sums over
 * other lanes than ggml, forced to AVX2 on an AVX-512 CPU, has a score an ulp apart now and
 * then, which may round an accumulator the other way). */
double ag_fa16_bound(const float *ref, int dv);

#endif
