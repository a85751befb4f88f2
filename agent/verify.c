/* SPDX-License-Identifier: MIT */
/* Verification numerics (verify.h): the bounds and the differences. */
#include "verify.h"
#include "heap.h"
#include "par.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The largest magnitude's bits: an IEEE number's magnitude orders as its bits without the sign
 * do (a NaN's above infinity's), so the maximum is one of unsigned integers, kept in 8
 * independent lanes. One chain of compare and select per element took 12.8 ms for a float
 * GEMV 2048^2's A (Zen 5, alone; 35 ms of the program's thread in a verification of its first
 * call, beside a compile); this 1.3-1.7 ms. */
#define MAX_ABS_BITS(T, U, SIGN)                                                                  \
  static U max_abs_bits_##T(const T *p, long rows, long cols, long ld)                            \
  {                                                                                               \
    U m[8] = {0};                                                                                 \
    for (long j = 0; j < cols; j++) {                                                             \
      const T *col = p + j * ld;                                                                  \
      long i = 0;                                                                                 \
      for (; i + 8 <= rows; i += 8)                                                               \
        for (int l = 0; l < 8; l++) {                                                             \
          U b;                                                                                    \
          memcpy(&b, &col[i + l], sizeof b);                                                      \
          b &= ~SIGN;                                                                             \
          m[l] = b > m[l] ? b : m[l];                                                             \
        }                                                                                         \
      for (; i < rows; i++) {                                                                     \
        U b;                                                                                      \
        memcpy(&b, &col[i], sizeof b);                                                            \
        b &= ~SIGN;                                                                               \
        m[0] = b > m[0] ? b : m[0];                                                               \
      }                                                                                           \
    }                                                                                             \
    for (int l = 1; l < 8; l++)                                                                   \
      m[0] = m[l] > m[0] ? m[l] : m[0];                                                           \
    return m[0];                                                                                  \
  }
MAX_ABS_BITS(float, uint32_t, 0x80000000u)
MAX_ABS_BITS(double, uint64_t, 0x8000000000000000ull)

double ag_verify_max_abs(const void *p, long rows, long cols, long ld, int f64)
{
  if (f64) {
    uint64_t b = max_abs_bits_double(p, rows, cols, ld);
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
  }
  uint32_t b = max_abs_bits_float(p, rows, cols, ld);
  float v;
  memcpy(&v, &b, sizeof v);
  return v;
}

/* The largest magnitude among the elements of C the kernel writes (its kind's region). */
static double written_max_abs(const jt_gemm_t *g, const void *c)
{
  int (*writes)(const jt_gemm_t *, long, long) = jt_kind(g)->writes;
  if (!writes)
    return ag_verify_max_abs(c, g->m, g->n, g->ldc, g->f64);
  double m = 0;
  for (long j = 0; j < g->n; j++)
    for (long i = 0; i < g->m; i++)
      if (writes(g, i, j)) {
        double v = g->f64 ? ((const double *)c)[j * g->ldc + i] : ((const float *)c)[j * g->ldc + i];
        m = fabs(v) > m || isnan(v) ? fabs(v) : m;
      }
  return m;
}

void *ag_verify_gemm_run(const jt_gemm_t *g, const ag_vrun_t *run, jt_gemm_fn fn, const void *a,
                         const void *b, void *c, double alpha, double beta, double *bound)
{
  size_t esz = g->f64 ? 8 : 4;
  size_t col = (size_t)g->m * esz, region = col * (size_t)g->n;
  char *saved = malloc(2 * region);
  if (!saved)
    return NULL;
  char *result = saved + region;
  for (long j = 0; j < g->n; j++)
    memcpy(saved + (size_t)j * col, (char *)c + (size_t)j * (size_t)g->ldc * esz, col);
  double amax = ag_verify_max_abs(a, g->ta ? g->k : g->m, g->ta ? g->m : g->k, g->lda, g->f64);
  double bmax = ag_verify_max_abs(b, g->tb ? g->n : g->k, g->tb ? g->k : g->n, g->ldb, g->f64);
  double cmax = g->beta_class ? written_max_abs(g, c) : 0;
  ag_par_gemm(run, fn, a, b, c, alpha, beta);
  for (long j = 0; j < g->n; j++) {
    char *cj = (char *)c + (size_t)j * (size_t)g->ldc * esz;
    memcpy(result + (size_t)j * col, cj, col);
    memcpy(cj, saved + (size_t)j * col, col);
  }
  double eps = g->f64 ? DBL_EPSILON : FLT_EPSILON;
  *bound =
      4.0 * (g->k + 2) * eps * (fabs(alpha) * g->k * amax * bmax + fabs(beta) * cmax) + 4 * DBL_MIN;
  return saved;
}

double ag_verify_gemm_worst(const jt_gemm_t *g, const void *copy, const void *c, long *wi, long *wj)
{
  double worst = 0;
  *wi = 0, *wj = 0;
  size_t esz = g->f64 ? 8 : 4;
  const char *result = (const char *)copy + (size_t)g->m * (size_t)g->n * esz;
  int (*writes)(const jt_gemm_t *, long, long) = jt_kind(g)->writes;
  for (long j = 0; j < g->n; j++)
    for (long i = 0; i < g->m; i++) {
      long ix = j * g->ldc + i, rx = j * g->m + i;
      if (writes && !writes(g, i, j)) { /* left as it was, bit for bit; never loaded as a number:
                                           a signalling NaN there would raise FE_INVALID in the
                                           host's thread */
        if (memcmp(result + (size_t)rx * esz, (const char *)c + (size_t)ix * esz, esz) != 0)
          worst = INFINITY, *wi = i, *wj = j;
        continue;
      }
      double x = g->f64 ? ((const double *)result)[rx] : ((const float *)result)[rx];
      double y = g->f64 ? ((const double *)c)[ix] : ((const float *)c)[ix];
      if (x == y || (isnan(x) && isnan(y))) /* equal, infinities and NaNs included */
        continue;
      double d = isnan(x) || isnan(y) ? INFINITY : fabs(x - y);
      if (d > worst)
        worst = d, *wi = i, *wj = j;
    }
  return worst;
}

double ag_verify_dot_bound(int f64, long k, const void *x, const void *y)
{
  double mag = 0;
  for (long i = 0; i < k; i++)
    mag += f64 ? fabs(((const double *)x)[i] * ((const double *)y)[i])
               : fabs((double)((const float *)x)[i] * ((const float *)y)[i]);
  double eps = f64 ? DBL_EPSILON : FLT_EPSILON;
  return 4.0 * (k + 2) * eps * mag + 4 * DBL_MIN;
}

double ag_verify_diff(double variant, double original)
{
  return variant == original || (isnan(variant) && isnan(original)) ? 0
         : isnan(variant) || isnan(original)                        ? INFINITY
                                                                    : fabs(variant - original);
}

/* ---- Checks on scratch operands ---- */

#define GUARD 16 /* elements around each operand: a 512-bit vector of floats */

/* Quiet NaNs with payloads of their own: one in A's and B's padding and guards (read, it poisons
 * what it reaches; quiet, it raises nothing), one in C's (checked bit for bit, never loaded). */
static void fill_nan(void *p, size_t n, int f64, int c_pattern)
{
  uint64_t d = c_pattern ? 0x7ff8c0ffee5a5a5aull : 0x7ff80000000a0a0aull;
  uint32_t f = c_pattern ? 0x7fc5a5a5u : 0x7fc00a0au;
  for (size_t i = 0; i < n; i++)
    if (f64)
      memcpy((char *)p + i * 8, &d, 8);
    else
      memcpy((char *)p + i * 4, &f, 4);
}

/* rows x cols of leading dimension ld at p: random in [-1, 1] from *s (xorshift64). */
static void fill_random(void *p, long rows, long cols, long ld, int f64, uint64_t *s)
{
  for (long j = 0; j < cols; j++)
    for (long i = 0; i < rows; i++) {
      *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
      double v = (double)(*s >> 11) / (double)(1ull << 52) - 1.0;
      if (f64)
        ((double *)p)[j * ld + i] = v;
      else
        ((float *)p)[j * ld + i] = (float)v;
    }
}

/* The first element of C's buffer (nc elements of C, GUARD on each side: cbuf) that differs
 * from saved outside the m x n of leading dimension ldc at C[0, 0] (0 x 0: anywhere), counted
 * from C[0, 0]; LONG_MIN when none does. */
static long first_outside(const jt_gemm_t *g, const char *cbuf, const char *saved, size_t nc,
                          long m, long n, long ldc)
{
  size_t esz = g->f64 ? 8 : 4;
  for (size_t x = 0; x < nc + 2 * GUARD; x++) {
    long at = (long)x - GUARD;
    if (at >= 0 && at < (long)nc && at % ldc < m && at / ldc < n)
      continue; /* C's m x n */
    if (memcmp(cbuf + x * esz, saved + x * esz, esz) != 0)
      return at;
  }
  return LONG_MIN;
}

int ag_verify_scratch(const jt_gemm_t *g, const ag_vrun_t *run, jt_gemm_fn fn,
                      ag_verify_orig_fn orig, void *ctx,
                      double alpha, double beta, const void *b_fixed, uint64_t seed,
                      size_t max_bytes, ag_scratch_t *out)
{
  memset(out, 0, sizeof *out);
  size_t esz = g->f64 ? 8 : 4;
  /* Each operand as the kernel sees it, column-major: rows x cols of leading dimension ld (a dot
   * product's vectors: k x 1, its result: 1 x 1). */
  long ra = g->dot ? g->k : g->ta ? g->k : g->m, ca = g->dot ? 1 : g->ta ? g->m : g->k;
  long rb = g->dot ? g->k : g->tb ? g->n : g->k, cb = g->dot ? 1 : g->tb ? g->k : g->n;
  long lda = g->dot ? g->k : g->lda, ldb = g->dot ? g->k : g->ldb, ldc = g->dot ? 1 : g->ldc;
  long m = g->dot ? 1 : g->m, n = g->dot ? 1 : g->n;
  int own_b = !b_fixed && !g->syrk; /* a SYRK's B is its A */
  size_t na = (size_t)lda * (size_t)ca, nb = own_b ? (size_t)ldb * (size_t)cb : 0;
  size_t nc = (size_t)ldc * (size_t)n;
  size_t total = (na + nb + 2 * nc + 7 * GUARD) * esz; /* C twice: its buffer, saved */
  if (ra < 1 || ca < 1 || rb < 1 || cb < 1 || m < 1 || n < 1 || total > max_bytes)
    return -1;
  char *mem = ag_heap_scratch(total);
  if (!mem)
    return -1;
  fill_nan(mem, na + nb + 3 * GUARD, g->f64, 0);
  char *a = mem + GUARD * esz, *b = own_b ? a + (na + GUARD) * esz : (char *)(uintptr_t)b_fixed;
  char *cbuf = mem + (na + nb + 3 * GUARD) * esz, *c = cbuf + GUARD * esz;
  char *saved = cbuf + (nc + 2 * GUARD) * esz;
  if (g->syrk)
    b = a;
  uint64_t s = seed | 1;
  fill_random(a, ra, ca, lda, g->f64, &s);
  if (own_b)
    fill_random(b, rb, cb, ldb, g->f64, &s);
  fill_nan(cbuf, nc + 2 * GUARD, g->f64, 1);
  fill_random(c, m, n, ldc, g->f64, &s);
  memcpy(saved, cbuf, (nc + 2 * GUARD) * esz);
  int rc = -1;
  void *copy = NULL;
  double variant = 0, original = 0;
  if (g->dot) {
    fn(a, b, c, 0, 0);
    variant = g->f64 ? *(double *)(void *)c : *(float *)(void *)c;
    memcpy(c, saved + GUARD * esz, esz);
    out->bound = ag_verify_dot_bound(g->f64, g->k, a, b);
  } else if (!(copy = ag_verify_gemm_run(g, run, fn, a, b, c, alpha, beta, &out->bound))) {
    goto out;
  }
  /* C is as it was where the kernel may write (ag_verify_gemm_run put it back): it must be so
   * everywhere */
  long at = first_outside(g, cbuf, saved, nc, 0, 0, ldc);
  if (at != LONG_MIN) {
    out->outside = 1, out->at = at, out->worst = INFINITY;
    rc = 0;
    goto out;
  }
  orig(ctx, a, b, c, alpha, beta);
  if (first_outside(g, cbuf, saved, nc, m, n, ldc) != LONG_MIN)
    goto out; /* the original wrote there: no verdict on the kernel */
  if (g->dot) {
    original = g->f64 ? *(double *)(void *)c : *(float *)(void *)c;
    out->worst = ag_verify_diff(variant, original);
  } else {
    out->worst = ag_verify_gemm_worst(g, copy, c, &out->wi, &out->wj);
  }
  rc = out->worst <= out->bound;
out:
  free(copy);
  ag_heap_scratch_free(mem, total);
  return rc;
}
