/* SPDX-License-Identifier: MIT */
/* Verification numerics (verify.h): the bounds and the differences. */
#include "verify.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

double ag_verify_max_abs(const void *p, long rows, long cols, long ld, int f64)
{
  double m = 0;
  for (long j = 0; j < cols; j++)
    for (long i = 0; i < rows; i++) {
      double v = f64 ? ((const double *)p)[j * ld + i] : ((const float *)p)[j * ld + i];
      m = fabs(v) > m || isnan(v) ? fabs(v) : m;
    }
  return m;
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

void *ag_verify_gemm_run(const jt_gemm_t *g, jt_gemm_fn fn, const void *a, const void *b, void *c,
                         double alpha, double beta, double *bound)
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
  fn(a, b, c, alpha, beta);
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
