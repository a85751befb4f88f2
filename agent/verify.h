/* SPDX-License-Identifier: MIT */
/* Verification numerics: how far a JIT kernel's result may stray from the original library's
 * and by how much it did. Pure functions of the problem and its operands: no clock, no globals,
 * no locks (the tiers keep the counts of verifications and turn a result into a verdict).
 *
 * A sum of k products computed in another order differs from the exact one by at most about
 * k eps times the sum of the products' magnitudes (eps: the type's epsilon). The bounds below
 * take 4 (k + 2) eps times an upper bound of that magnitude, plus a few of the smallest normal
 * doubles (an exact zero against a denormal): any kernel that reorders or blocks the sum passes,
 * one that drops, repeats or mis-scales a term fails. */
#ifndef OPJIT_AGENT_VERIFY_H
#define OPJIT_AGENT_VERIFY_H

#include "jit/jit.h"

#include <stdint.h>

/* ---- GEMM, GEMV and AXPY variants (column-major g, as the tiers give the kernel) ---- */

/* Largest magnitude in a rows x cols column-major block of leading dimension ld (NaN counts as
 * its magnitude, so a NaN anywhere makes the result NaN or infinite). */
double ag_verify_max_abs(const void *p, long rows, long cols, long ld, int f64);

/* Runs variant fn on the host's C (a, b, c, alpha, beta as the kernel takes them), keeps its
 * result aside and restores C: returns a malloc'ed copy of 2 m n elements (C's as they were,
 * then the variant's, compact: column j at j m whatever ldc is) and sets *bound to what the
 * variant may differ from a correct result by; NULL when out of memory (fn did not run). */
void *ag_verify_gemm_run(const jt_gemm_t *g, jt_gemm_fn fn, const void *a, const void *b, void *c,
                         double alpha, double beta, double *bound);

/* The largest difference between the variant's result in copy (ag_verify_gemm_run) and C as
 * the original left it, its element in *wi (row) and *wj (column): 0 when equal (infinities and
 * NaNs included), infinite when one is NaN and the other is not, or when an element g's kind
 * does not write (jit.h, jt_kind_t.writes: a SYRK's other triangle) differs at all. The bound
 * ag_verify_gemm_run gave weighs only the elements the kind writes. */
double ag_verify_gemm_worst(const jt_gemm_t *g, const void *copy, const void *c, long *wi,
                            long *wj);

/* ---- dot products ---- */

/* The bound of a k-long dot product of x and y (f64: doubles, else floats), unit strides. */
double ag_verify_dot_bound(int f64, long k, const void *x, const void *y);

/* How far variant is from original: 0 when equal (NaN against NaN too), infinite when one is
 * NaN. */
double ag_verify_diff(double variant, double original);

/* ---- ggml MUL_MAT kernels ---- */

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
int ag_verify_mm_selftest(const jt_gemm_t *g, void (*fn)(void), double *worst, double *bound);

#endif
