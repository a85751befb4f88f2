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

#endif
