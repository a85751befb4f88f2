/* SPDX-License-Identifier: MIT */
/* Verification numerics: how far a JIT kernel's result may stray from the original library's
 * and by how much it did. Functions of the problem and its operands: no clock, no state of their
 * own (the tiers keep the counts of verifications and turn a result into a verdict); a kernel
 * whose N (a GEMV's M) is in parts runs them through par.h's pool.
 *
 * A sum of k products computed in another order differs from the exact one by at most about
 * k eps times the sum of the products' magnitudes (eps: the type's epsilon). The bounds below
 * take 4 (k + 2) eps times an upper bound of that magnitude, plus a few of the smallest normal
 * doubles (an exact zero against a denormal): any kernel that reorders or blocks the sum passes,
 * one that drops, repeats or mis-scales a term fails. */
#ifndef OPJIT_AGENT_VERIFY_H
#define OPJIT_AGENT_VERIFY_H

#include "problem.h"
#include "jit/jit.h"

#include <stddef.h>
#include <stdint.h>

/* ---- GEMM, GEMV and AXPY variants (column-major g, as the tiers give the kernel) ---- */

/* Largest magnitude in a rows x cols column-major block of leading dimension ld (NaN counts as
 * its magnitude, so a NaN anywhere makes the result NaN or infinite). */
double ag_verify_max_abs(const void *p, long rows, long cols, long ld, int f64);

/* Runs variant fn on the host's C (a, b, c, alpha, beta as the kernel takes them; as run says,
 * problem.h and par.h: its parts on several cores where it has them; NULL: once), keeps its
 * result aside and restores C: returns a malloc'ed copy of 2 m n elements (C's as they were,
 * then the variant's, compact: column j at j m whatever ldc is) and sets *bound to what the
 * variant may differ from a correct result by; NULL when out of memory (fn did not run). */
void *ag_verify_gemm_run(const jt_gemm_t *g, const ag_vrun_t *run, jt_gemm_fn fn, const void *a,
                         const void *b, void *c, double alpha, double beta, double *bound);

/* The largest difference between the variant's result in copy (ag_verify_gemm_run) and C as
 * the original left it, its element in *wi (row) and *wj (column): 0 when equal (infinities and
 * NaNs included), infinite when one is NaN and the other is not, or when an element g's kind
 * does not write (jit.h, jt_kind_t.writes: a SYRK's other triangle) differs at all. The bound
 * ag_verify_gemm_run gave weighs only the elements the kind writes. */
double ag_verify_gemm_worst(const jt_gemm_t *g, const void *copy, const void *c, long *wi,
                            long *wj);

/* ---- Checks on scratch operands, before a kernel is published ---- */

/* The original's side of a scratch check: computes into c what the kernel should, from a and b
 * as the kernel takes them (g's column-major view: the callee swaps a row-major caller's back),
 * with alpha and beta; a dot product stores its result at c, in g's type. */
typedef void (*ag_verify_orig_fn)(void *ctx, const void *a, const void *b, void *c, double alpha,
                                  double beta);

/* What a scratch check found. */
typedef struct ag_scratch_s {
  double worst, bound; /* the largest difference from the original's result, and its bound */
  long wi, wj;         /* ... at C[wi, wj] (g's view; 0, 0 for a dot product) */
  int outside;         /* 1: the kernel wrote outside its result, at element at of C's buffer
                          (counted from C[0, 0], negative before it); worst is then infinite */
  long at;
} ag_scratch_t;

/* Checks kernel fn, built for g (for a part of g's N, run as run says: ag_verify_gemm_run),
 * against orig on scratch operands of g's exact shape, on the calling thread: fn runs once, then orig once on the same C, and ag_verify_gemm_worst (a dot
 * product: ag_verify_diff) compares them within ag_verify_gemm_run's bound (ag_verify_dot_bound).
 * The operands are random in [-1, 1] (from seed: the same seed, the same operands), alpha and
 * beta as given (the caller rounds them to g's type, as a call passes them), B as b_fixed when
 * every call passes the same one (an AXPY's [1]; NULL: scratch), A as B too for a SYRK. In A's
 * and B's leading-dimension padding and in 16 elements before and after each operand, quiet
 * NaNs: a kernel that reads outside its operands and uses what it read poisons its result. C's
 * padding and the 16 elements on each side of it hold a NaN pattern that must stay bit for bit:
 * a kernel that writes outside its m x n (its kind's triangle, for a SYRK) fails. Returns 1
 * when fn passed, 0 when it failed (*out says how), -1 when it was not checked: the operands
 * would take more than max_bytes, no memory, or the original itself wrote outside C's m x n. */
int ag_verify_scratch(const jt_gemm_t *g, const ag_vrun_t *run, jt_gemm_fn fn,
                      ag_verify_orig_fn orig, void *ctx,
                      double alpha, double beta, const void *b_fixed, uint64_t seed,
                      size_t max_bytes, ag_scratch_t *out);

/* ---- dot products ---- */

/* The bound of a k-long dot product of x and y (f64: doubles, else floats), unit strides. */
double ag_verify_dot_bound(int f64, long k, const void *x, const void *y);

/* How far variant is from original: 0 when equal (NaN against NaN too), infinite when one is
 * NaN. */
double ag_verify_diff(double variant, double original);

#endif
