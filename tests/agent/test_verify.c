/* SPDX-License-Identifier: MIT */
/* Verification numerics on real results: GEMMs, dot products and MUL_MATs computed by naive
 * loops in float and double. A kernel that sums in another order stays within the bounds; one
 * that drops a term, or is off by a few bounds in one element, does not, and the element is
 * named. C is always handed back as it was. */
#include "agent/verify.h"
#include "agent/hosts/ggml_verify.h"

#include <criterion/criterion.h>
#include <fenv.h>
#include <limits.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What the test kernels compute (a compiled kernel knows its shape; these read it here). */
static const jt_gemm_t *shape;
static int reversed;           /* sum k from the end */
static int drop_last;          /* leave out the last k */
static long bad_i = -1, bad_j; /* add bad to this element of the result */
static int whole;              /* a SYRK written beyond its triangle */
static double bad;

static double rnd_state = 0.123;
static double rnd(void)
{
  rnd_state = fmod(rnd_state * 9301.0 + 49297.0, 233280.0);
  return rnd_state / 233280.0 - 0.5;
}

/* Element (r, c) of a column-major matrix of leading dimension ld, transposed when t. */
static double at(const void *p, int f64, int t, long ld, long r, long c)
{
  long ix = t ? r * ld + c : c * ld + r;
  return f64 ? ((const double *)p)[ix] : ((const float *)p)[ix];
}

/* C = alpha op(A) op(B) + beta C, each sum in the type's own precision. */
static void naive(const void *a, const void *b, void *c, double alpha, double beta)
{
  const jt_gemm_t *g = shape;
  long k = g->k - drop_last;
  for (long j = 0; j < g->n; j++)
    for (long i = 0; i < g->m; i++) {
      if (g->syrk && !whole && (g->syrk == 1 ? i > j : i < j))
        continue; /* a SYRK's other triangle */
      double sd = 0;
      float sf = 0;
      for (long t = 0; t < k; t++) {
        long kk = reversed ? k - 1 - t : t;
        double p = at(a, g->f64, g->ta, g->lda, i, kk) * at(b, g->f64, g->tb, g->ldb, kk, j);
        if (g->f64)
          sd += p;
        else
          sf += (float)p;
      }
      double s = g->f64 ? sd : sf;
      double *cd = (double *)c + j * g->ldc + i;
      float *cf = (float *)c + j * g->ldc + i;
      double old = g->beta_class ? (g->f64 ? *cd : *cf) : 0;
      double v = alpha * s + beta * old + (i == bad_i && j == bad_j ? bad : 0);
      if (g->f64)
        *cd = v;
      else
        *cf = (float)v;
    }
}

typedef struct {
  jt_gemm_t g;
  double alpha, beta;
} gcase_t;

static const gcase_t cases[] = {
    {{.f64 = 0, .m = 13, .n = 7, .k = 29, .lda = 13, .ldb = 29, .ldc = 16}, 1, 0},
    {{.f64 = 1, .m = 13, .n = 7, .k = 29, .lda = 13, .ldb = 29, .ldc = 16}, 1, 0},
    {{.f64 = 0, .ta = 1, .m = 9, .n = 11, .k = 64, .lda = 64, .ldb = 64, .ldc = 9, .beta_class = 1},
     0.5,
     1},
    {{.f64 = 1,
      .tb = 1,
      .m = 20,
      .n = 3,
      .k = 100,
      .lda = 21,
      .ldb = 3,
      .ldc = 20,
      .beta_class = 2},
     -2,
     0.25},
    {{.f64 = 0, .m = 1000, .n = 1, .k = 1, .lda = 1000, .ldb = 1, .ldc = 1000, .beta_class = 1},
     3,
     1}, /* an AXPY */
};

/* Runs the test kernel as a variant through ag_verify_gemm_run, the forward naive loop as the
 * original on C, and returns the worst difference; *bound as the run set it. */
static double verify_case(const gcase_t *gc, double *bound, long *wi, long *wj)
{
  const jt_gemm_t *g = &gc->g;
  size_t esz = g->f64 ? 8 : 4;
  long acols = g->ta ? g->m : g->k, bcols = g->tb ? g->k : g->n;
  char *a = malloc((size_t)(g->lda * acols) * esz), *b = malloc((size_t)(g->ldb * bcols) * esz);
  char *c = malloc((size_t)(g->ldc * g->n) * esz), *c0 = malloc((size_t)(g->ldc * g->n) * esz);
  for (long i = 0; i < g->lda * acols; i++)
    g->f64 ? (((double *)a)[i] = rnd()) : (((float *)a)[i] = (float)rnd());
  for (long i = 0; i < g->ldb * bcols; i++)
    g->f64 ? (((double *)b)[i] = rnd()) : (((float *)b)[i] = (float)rnd());
  for (long i = 0; i < g->ldc * g->n; i++)
    g->f64 ? (((double *)c)[i] = 4 * rnd()) : (((float *)c)[i] = 4 * (float)rnd());
  memcpy(c0, c, (size_t)(g->ldc * g->n) * esz);
  shape = g;
  void *copy = ag_verify_gemm_run(g, NULL, naive, a, b, c, gc->alpha, gc->beta, bound);
  cr_assert_not_null(copy);
  cr_assert_eq(memcmp(c, c0, (size_t)(g->ldc * g->n) * esz), 0, "C is restored");
  for (long j = 0; j < g->n; j++)
    cr_assert_eq(memcmp((char *)copy + (size_t)(j * g->m) * esz, c0 + (size_t)(j * g->ldc) * esz,
                        (size_t)g->m * esz),
                 0, "the copy starts with C as it was");
  int r = reversed, d = drop_last, w = whole;
  long bi = bad_i;
  reversed = 0, drop_last = 0, bad_i = -1, whole = 0; /* the original */
  naive(a, b, c, gc->alpha, gc->beta);
  reversed = r, drop_last = d, bad_i = bi, whole = w;
  double worst = ag_verify_gemm_worst(g, copy, c, wi, wj);
  free(copy), free(a), free(b), free(c), free(c0);
  return worst;
}

Test(verify, a_gemm_summed_in_another_order_is_within_the_bound)
{
  int differed = 0;
  for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
    double bound;
    long wi, wj;
    reversed = 1;
    double worst = verify_case(&cases[t], &bound, &wi, &wj);
    reversed = 0;
    cr_assert(isfinite(bound) && bound > 0, "case %zu", t);
    cr_assert_leq(worst, bound, "case %zu: off by %g, bound %g", t, worst, bound);
    /* the bound is not loose beyond use: under a thousandth of the result's magnitude */
    cr_assert_lt(bound, cases[t].g.f64 ? 1e-9 : 1e-2, "case %zu: bound %g", t, bound);
    differed += worst > 0;
  }
  cr_assert_geq(differed, 2, "the two orders round differently in some cases");
}

Test(verify, a_gemm_that_drops_a_term_is_caught)
{
  for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
    if (cases[t].g.k == 1)
      continue; /* the AXPY's one term: dropping it is the perturbation test's */
    double bound;
    long wi, wj;
    drop_last = 1;
    double worst = verify_case(&cases[t], &bound, &wi, &wj);
    drop_last = 0;
    cr_assert_gt(worst, bound, "case %zu: off by %g, bound %g", t, worst, bound);
  }
}

Test(verify, one_element_a_few_bounds_off_is_caught_and_named)
{
  for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
    double bound, b0;
    long wi, wj;
    rnd_state = 0.123;
    verify_case(&cases[t], &b0, &wi, &wj); /* the bound of these inputs */
    bad_i = cases[t].g.m - 1, bad_j = cases[t].g.n - 1, bad = 4 * b0;
    rnd_state = 0.123;
    double worst = verify_case(&cases[t], &bound, &wi, &wj);
    bad_i = -1;
    cr_assert_eq(bound, b0, "the same inputs, the same bound");
    cr_assert_gt(worst, bound, "case %zu: off by %g, bound %g", t, worst, bound);
    cr_assert_eq(wi, cases[t].g.m - 1);
    cr_assert_eq(wj, cases[t].g.n - 1);
  }
}

Test(verify, nan_against_a_number_is_infinitely_off_and_nan_against_nan_is_equal)
{
  double bound;
  long wi, wj;
  bad_i = 2, bad_j = 1, bad = NAN;
  double worst = verify_case(&cases[0], &bound, &wi, &wj);
  bad_i = -1;
  cr_assert(isinf(worst));
  cr_assert_eq(wi, 2);
  cr_assert_eq(wj, 1);
  cr_assert_eq(ag_verify_diff(NAN, NAN), 0);
  cr_assert(isinf(ag_verify_diff(NAN, 1)));
  cr_assert(isinf(ag_verify_diff(1, NAN)));
  cr_assert_eq(ag_verify_diff(INFINITY, INFINITY), 0);
  cr_assert_eq(ag_verify_diff(1.5, 1.25), 0.25);
  float nanf_[3] = {1, NAN, 2};
  cr_assert(isnan(ag_verify_max_abs(nanf_, 3, 1, 3, 0)), "NaN poisons the magnitude");
  double m[6] = {1, -7, 99, 2, 3, -4}; /* 2 x 2 of ld 3: rows 0-1 of columns 0-1 */
  cr_assert_eq(ag_verify_max_abs(m, 2, 2, 3, 1), 7, "row 2 is outside the block");
  float col[2 * 21]; /* columns longer than the 8 lanes taken at once, and their rest */
  for (int i = 0; i < 2 * 21; i++)
    col[i] = (float)(i % 5) * 0.5f;
  col[21 + 13] = -9;
  cr_assert_eq(ag_verify_max_abs(col, 20, 2, 21, 0), 9, "a lane's largest, negative");
  col[21 + 19] = INFINITY;
  cr_assert(isinf(ag_verify_max_abs(col, 20, 2, 21, 0)), "an infinity in a column's rest");
  col[5] = NAN;
  cr_assert(isnan(ag_verify_max_abs(col, 20, 2, 21, 0)), "a NaN above every infinity");
  double dcol[19] = {0};
  dcol[16] = -3e300, dcol[18] = 5e300;
  cr_assert_eq(ag_verify_max_abs(dcol, 17, 1, 19, 1), 3e300, "rows past 17 are outside");
}

/* A k-long dot product in the type, forward or backward, perhaps without its last term. */
static double dot(int f64, long k, const void *x, const void *y, int back, int drop)
{
  double sd = 0;
  float sf = 0;
  for (long t = 0; t < k - drop; t++) {
    long i = back ? k - 1 - drop - t : t;
    if (f64)
      sd += ((const double *)x)[i] * ((const double *)y)[i];
    else
      sf += ((const float *)x)[i] * ((const float *)y)[i];
  }
  return f64 ? sd : sf;
}

Test(verify, dot_products_in_float_and_double)
{
  enum { K = 256 };
  static double xd[K], yd[K];
  static float xf[K], yf[K];
  for (int i = 0; i < K; i++)
    xd[i] = rnd(), yd[i] = rnd();
  xd[K - 1] = yd[K - 1] = 0.5; /* the last term, a kernel's tail: 0.25 */
  for (int i = 0; i < K; i++)
    xf[i] = (float)xd[i], yf[i] = (float)yd[i];
  for (int f64 = 0; f64 < 2; f64++) {
    const void *x = f64 ? (void *)xd : (void *)xf, *y = f64 ? (void *)yd : (void *)yf;
    double orig = dot(f64, K, x, y, 0, 0), bound = ag_verify_dot_bound(f64, K, x, y);
    double other = ag_verify_diff(dot(f64, K, x, y, 1, 0), orig);
    cr_assert_leq(other, bound, "f64 %d: another order off by %g, bound %g", f64, other, bound);
    cr_assert_gt(other, 0, "f64 %d: the orders round differently", f64);
    double dropped = ag_verify_diff(dot(f64, K, x, y, 0, 1), orig);
    cr_assert_gt(dropped, bound, "f64 %d: the tail dropped off by %g, bound %g", f64, dropped,
                 bound);
  }
}

/* ---- MUL_MAT ---- */

static const jt_gemm_t *mm_shape;
static int mm_drop; /* leave out the last k */

static double w_at(const void *w, int w16, long ix)
{
  return w16 ? (double)((const _Float16 *)w)[ix] : ((const float *)w)[ix];
}

static void mm_naive(const void *w, const float *x, float *y, int64_t i0, int64_t i1,
                     float *scratch)
{
  (void)scratch;
  const jt_gemm_t *g = mm_shape;
  for (int64_t j = 0; j < g->n; j++)
    for (int64_t i = i0; i < i1; i++) {
      float s = 0;
      for (int64_t kk = 0; kk < g->k - mm_drop; kk++) {
        float xv = g->w16 == 1 ? (float)(_Float16)x[j * g->k + kk] : x[j * g->k + kk];
        s += (float)w_at(w, g->w16, i * g->k + kk) * xv;
      }
      y[j * g->m + i] = s;
    }
}

static void mm_add_naive(const void *w, const float *x, float *y, const float *r, float *out,
                         int64_t i0, int64_t i1, float *scratch)
{
  mm_naive(w, x, y, i0, i1, scratch);
  for (int64_t j = 0; j < mm_shape->n; j++)
    for (int64_t i = i0; i < i1; i++)
      out[j * mm_shape->m + i] = y[j * mm_shape->m + i] + r[j * mm_shape->m + i];
}

static int selftest(const jt_gemm_t *g, double *worst, double *bound)
{
  mm_shape = g;
  void (*fn)(void) = g->mm_add ? (void (*)(void))mm_add_naive : (void (*)(void))mm_naive;
  return ag_ggml_mm_selftest(g, fn, worst, bound);
}

Test(verify, mul_mat_self_test_passes_a_correct_kernel_and_fails_one_short_of_a_term)
{
  const jt_gemm_t shapes[] = {
      {.mm = 1, .m = 128, .n = 40, .k = 96},
      {.mm = 1, .w16 = 1, .m = 128, .n = 40, .k = 96},
      {.mm = 1, .mm_add = 1, .m = 100, .n = 20, .k = 64},
      {.mm = 1, .w16 = 1, .m = 32, .n = 1, .k = 300},
      {.mm = 1, .w16 = 2, .m = 64, .n = 24, .k = 200}, /* x not rounded: ggml's AMX buffer */
  };
  for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
    double worst, bound;
    cr_assert_eq(selftest(&shapes[t], &worst, &bound), 1, "shape %zu: off by %g, bound %g", t,
                 worst, bound);
    cr_assert_gt(bound, 0, "shape %zu: elements were checked", t);
    mm_drop = 1;
    int rc = selftest(&shapes[t], &worst, &bound);
    mm_drop = 0;
    cr_assert_eq(rc, 0, "shape %zu: without its last term", t);
    cr_assert_gt(worst, bound);
  }
}

Test(verify, mul_mat_tally_skips_elements_without_a_finite_bound)
{
  float w[4] = {1, 2, 3, 4}, x[4] = {0.5f, 0.25f, 1, -1};
  double mag, exact = ag_mm_exact(w, 0, x, 4, 0, 0, &mag);
  cr_assert_eq(exact, 0.5 + 0.5 + 3 - 4);
  cr_assert_eq(mag, 0.5 + 0.5 + 3 + 4);
  ag_mm_check_t c = {0};
  ag_mm_tally(&c, exact, exact, INFINITY, 4);
  cr_assert_eq(c.checked, 0);
  ag_mm_tally(&c, (float)exact, exact, mag, 4);
  cr_assert_eq(c.checked, 1);
  cr_assert_leq(c.worst, c.bound);
  ag_mm_tally(&c, exact + 1, exact, mag, 4);
  cr_assert_gt(c.worst, c.bound, "off by 1 on a magnitude of 8 in 4 terms");
  ag_mm_tally(&c, NAN, exact, mag, 4);
  cr_assert(isinf(c.worst), "NaN is the worst");
}

Test(verify, a_syrk_is_checked_on_its_triangle_and_the_other_must_stay_untouched)
{
  /* C = alpha A A^T + beta C on the upper (then lower) triangle: B is A^T's storage, A */
  for (int uplo = 1; uplo <= 2; uplo++) {
    gcase_t gc = {{.f64 = uplo == 2, .syrk = uplo, .tb = 1, .m = 12, .n = 12, .k = 30, .lda = 12,
                   .ldb = 12, .ldc = 13, .beta_class = 2},
                  0.5,
                  -1};
    double bound;
    long wi, wj;
    reversed = 1;
    double worst = verify_case(&gc, &bound, &wi, &wj);
    cr_assert(isfinite(bound) && bound > 0);
    cr_assert_leq(worst, bound, "uplo %d: the triangle summed in another order", uplo);
    whole = 1; /* and the other triangle written too, with values of its own */
    worst = verify_case(&gc, &bound, &wi, &wj);
    whole = 0, reversed = 0;
    cr_assert(isinf(worst), "uplo %d: a write outside the triangle is a mismatch", uplo);
    cr_assert(uplo == 1 ? wi > wj : wi < wj, "the element named is outside: C[%ld,%ld]", wi, wj);
  }
}

Test(verify, a_syrk_other_triangle_is_compared_as_bits_never_as_numbers)
{
  /* numpy's C comes from np.empty: its other triangle may hold a signalling NaN, which loaded
   * as a number raises FE_INVALID in the host's thread (numpy then warns "invalid value") */
  const jt_gemm_t g = {.syrk = 1, .tb = 1, .m = 4, .n = 4, .k = 2, .lda = 4, .ldb = 4, .ldc = 4};
  float copy[32], c[16];
  const uint32_t snan = 0x7fa00000u;
  for (int j = 0; j < 4; j++)
    for (int i = 0; i < 4; i++) {
      float v = (float)(i + 4 * j);
      if (i > j)
        memcpy(&v, &snan, sizeof v);
      copy[j * 4 + i] = copy[16 + j * 4 + i] = c[j * 4 + i] = v;
    }
  long wi, wj;
  feclearexcept(FE_ALL_EXCEPT);
  double worst = ag_verify_gemm_worst(&g, copy, c, &wi, &wj);
  cr_assert_eq(fetestexcept(FE_INVALID), 0, "a signalling NaN was loaded as a number");
  cr_assert_eq(worst, 0);
}

/* ---- Checks on scratch operands ---- */

static long pad_write = LONG_MIN; /* the test kernel also writes C's buffer here, from C[0, 0] */
static int pad_read;        /* ... and adds 0 x A's first padding element to C[0, 0] */

/* The test kernel as a variant: naive's result, then the faults above. */
static void faulty(const void *a, const void *b, void *c, double alpha, double beta)
{
  const jt_gemm_t *g = shape;
  if (g->dot) {
    double r = dot(g->f64, g->k, a, b, reversed, drop_last);
    g->f64 ? (*(double *)c = r) : (*(float *)c = (float)r);
  } else {
    naive(a, b, c, alpha, beta);
  }
  size_t esz = g->f64 ? 8 : 4;
  if (pad_write != LONG_MIN)
    memset((char *)c + pad_write * (long)esz, 0, esz);
  if (pad_read) { /* A's element just past its first column's rows */
    long rows = g->ta ? g->k : g->m;
    double p = g->f64 ? ((const double *)a)[rows] : ((const float *)a)[rows];
    g->f64 ? (*(double *)c += 0 * p) : (*(float *)c += (float)(0 * p));
  }
}

static int orig_writes_pad; /* the original writes C's element just before C[0, 0] */

/* The original: naive forward, without the faults. */
static void original(void *ctx, const void *a, const void *b, void *c, double alpha, double beta)
{
  const jt_gemm_t *g = ctx;
  int r = reversed, d = drop_last, w = whole;
  reversed = 0, drop_last = 0, whole = 0;
  if (g->dot) {
    double v = dot(g->f64, g->k, a, b, 0, 0);
    g->f64 ? (*(double *)c = v) : (*(float *)c = (float)v);
  } else {
    naive(a, b, c, alpha, beta);
  }
  if (orig_writes_pad)
    memset((char *)c - (g->f64 ? 8 : 4), 0, g->f64 ? 8 : 4);
  reversed = r, drop_last = d, whole = w;
}

static const float one_f[1] = {1};

/* ag_verify_scratch of the test kernel for case gc (b_fixed: an AXPY's [1]). */
static int scratch(const gcase_t *gc, const void *b_fixed, ag_scratch_t *out)
{
  shape = &gc->g;
  return ag_verify_scratch(&gc->g, NULL, faulty, original, (void *)&gc->g, gc->alpha, gc->beta, b_fixed,
                           42, 64u << 20, out);
}

static const gcase_t scratch_cases[] = {
    {{.f64 = 0, .m = 13, .n = 7, .k = 29, .lda = 15, .ldb = 29, .ldc = 16}, 1, 0},
    {{.f64 = 1, .ta = 1, .tb = 1, .m = 9, .n = 11, .k = 64, .lda = 70, .ldb = 12, .ldc = 10,
      .beta_class = 2},
     0.5,
     -0.25},
    {{.f64 = 0, .syrk = 2, .tb = 1, .m = 12, .n = 12, .k = 30, .lda = 13, .ldb = 13, .ldc = 14,
      .beta_class = 1},
     -1,
     1},
    {{.f64 = 1, .dot = 1, .k = 300}, 0, 0},
};

Test(verify, scratch_a_correct_kernel_passes_with_its_bound)
{
  for (size_t t = 0; t < sizeof scratch_cases / sizeof *scratch_cases; t++) {
    ag_scratch_t r;
    reversed = 1;
    int rc = scratch(&scratch_cases[t], NULL, &r);
    reversed = 0;
    cr_assert_eq(rc, 1, "case %zu: off by %g at C[%ld,%ld], bound %g, outside %d", t, r.worst,
                 r.wi, r.wj, r.bound, r.outside);
    cr_assert(isfinite(r.bound) && r.bound > 0, "case %zu", t);
    cr_assert_eq(r.outside, 0);
  }
  /* an AXPY: y += alpha x [1], B the 1 every call passes */
  gcase_t axpy = {{.m = 500, .n = 1, .k = 1, .lda = 500, .ldb = 1, .ldc = 500, .beta_class = 1},
                  (float)0.7, 1};
  ag_scratch_t r;
  cr_assert_eq(scratch(&axpy, one_f, &r), 1, "off by %g, bound %g", r.worst, r.bound);
}

Test(verify, scratch_a_kernel_that_drops_a_term_fails)
{
  for (size_t t = 0; t < sizeof scratch_cases / sizeof *scratch_cases; t++) {
    ag_scratch_t r;
    drop_last = 1;
    int rc = scratch(&scratch_cases[t], NULL, &r);
    drop_last = 0;
    cr_assert_eq(rc, 0, "case %zu: off by %g, bound %g", t, r.worst, r.bound);
    cr_assert_gt(r.worst, r.bound);
    cr_assert_eq(r.outside, 0);
  }
}

Test(verify, scratch_a_kernel_that_writes_outside_its_result_fails_and_says_where)
{
  for (size_t t = 0; t < sizeof scratch_cases / sizeof *scratch_cases; t++) {
    const jt_gemm_t *g = &scratch_cases[t].g;
    long ldc = g->dot ? 1 : g->ldc, m = g->dot ? 1 : g->m, n = g->dot ? 1 : g->n;
    /* C's padding below its first column (where ldc > m), just past its end, just before it */
    long places[] = {ldc > m ? m : -1, ldc * (n - 1) + m, -1};
    for (size_t p = 0; p < 3; p++) {
      ag_scratch_t r;
      pad_write = places[p];
      int rc = scratch(&scratch_cases[t], NULL, &r);
      pad_write = LONG_MIN;
      cr_assert_eq(rc, 0, "case %zu: a write at %ld", t, places[p]);
      cr_assert_eq(r.outside, 1);
      cr_assert_eq(r.at, places[p]);
      cr_assert(isinf(r.worst));
    }
  }
  /* a SYRK that writes its other triangle */
  ag_scratch_t r;
  whole = 1;
  int rc = scratch(&scratch_cases[2], NULL, &r);
  whole = 0;
  cr_assert_eq(rc, 0);
  cr_assert(isinf(r.worst));
  cr_assert_lt(r.wi, r.wj, "C[%ld,%ld] is in the upper triangle", r.wi, r.wj);
}

Test(verify, scratch_a_kernel_that_reads_the_padding_of_a_fails)
{
  ag_scratch_t r;
  pad_read = 1; /* case 0: A 13 x 29 of lda 15 */
  int rc = scratch(&scratch_cases[0], NULL, &r);
  pad_read = 0;
  cr_assert_eq(rc, 0);
  cr_assert(isinf(r.worst), "NaN from the padding: off by %g", r.worst);
  cr_assert_eq(r.outside, 0);
}

Test(verify, scratch_no_verdict_when_the_original_writes_outside_or_operands_are_too_big)
{
  ag_scratch_t r;
  orig_writes_pad = 1;
  int rc = scratch(&scratch_cases[0], NULL, &r);
  orig_writes_pad = 0;
  cr_assert_eq(rc, -1, "the original's fault is no verdict on the kernel");
  shape = &scratch_cases[0].g;
  cr_assert_eq(ag_verify_scratch(shape, NULL, faulty, original, (void *)shape, 1, 0, NULL, 42, 1024, &r),
               -1, "over max_bytes");
}
