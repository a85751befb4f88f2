/* SPDX-License-Identifier: MIT */
/* The SYRK kernel kind (jit/syrk.c through its row in jit/kind.c): C = alpha op(A) op(A)^T +
 * beta C on one triangle, against a double-precision reference within the bound of a sum of k
 * products, and the other triangle and the padding past n in each column of C left bit for bit
 * as they were (NaN sentinels: a kernel that reads them with beta 0 would spread them). */
#include "helpers.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const jt_api_t *jit;
static uint64_t rng = 777;

static void setup(void) { jit = jt_test_module(); }

TestSuite(syrk, .init = setup, .timeout = 600);

static double rnd(void) { return (double)jt_test_rnd(&rng, 2001) / 1000.0 - 1.0; }

/* The SYRK g (column-major) for uplo (1 upper, 2 lower), trans, n, k and the leading
 * dimensions. */
static jt_gemm_t syrk(int f64, int uplo, int trans, int n, int k, int lda, int ldc, int alpha_one,
                      int beta_class)
{
  return (jt_gemm_t){.f64 = f64,
                     .syrk = uplo,
                     .ta = trans,
                     .tb = !trans,
                     .m = n,
                     .n = n,
                     .k = k,
                     .lda = lda,
                     .ldb = lda,
                     .ldc = ldc,
                     .alpha_one = alpha_one,
                     .beta_class = beta_class};
}

static double get(const void *p, size_t i, int f64)
{
  return f64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

static void put(void *p, size_t i, double v, int f64)
{
  if (f64)
    ((double *)p)[i] = v;
  else
    ((float *)p)[i] = (float)v;
}

/* Compiles g, runs it once on random operands and checks every element of C; returns the
 * kernel's worst error over its bound (<= 1 passes). */
static double run(const jt_gemm_t *g, double alpha, double beta)
{
  char err[512] = "";
  jt_gemm_fn fn;
  size_t size, obj_len;
  void *obj;
  cr_assert(jt_gemm_supported(g), "n=%d k=%d", g->n, g->k);
  cr_assert_eq(jit->gemm(g, &fn, &size, &obj, &obj_len, err, sizeof err), 0, "%s", err);
  cr_assert_gt(size, 0, "the kernel's extent covers its tiles' kernels");
  cr_assert_not_null(obj, "an object to store");
  free(obj);
  int f64 = g->f64, n = g->n, k = g->k;
  size_t esz = f64 ? 8 : 4, alen = (size_t)g->lda * (g->ta ? n : k), clen = (size_t)g->ldc * n;
  void *a = malloc(alen * esz), *c = malloc(clen * esz), *c0 = malloc(clen * esz);
  for (size_t i = 0; i < alen; i++)
    put(a, i, rnd(), f64);
  for (int j = 0; j < n; j++)
    for (int i = 0; i < g->ldc; i++) {
      int inside = i < n && (g->syrk == 1 ? i <= j : i >= j);
      /* beta 0: C is never read, so NaN there must not come through */
      put(c, (size_t)j * g->ldc + i, inside && g->beta_class ? rnd() : NAN, f64);
    }
  memcpy(c0, c, clen * esz);
  fn(a, a, c, alpha, beta);
  double worst = 0;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < g->ldc; i++) {
      size_t ix = (size_t)j * g->ldc + i;
      int inside = i < n && (g->syrk == 1 ? i <= j : i >= j);
      if (!inside) {
        cr_assert_eq(memcmp((char *)c + ix * esz, (char *)c0 + ix * esz, esz), 0,
                     "C[%d,%d] outside the triangle was written (n=%d k=%d)", i, j, n, k);
        continue;
      }
      double exact = 0, mag = 0;
      for (int p = 0; p < k; p++) {
        size_t ai = g->ta ? (size_t)i * g->lda + p : (size_t)p * g->lda + i;
        size_t aj = g->ta ? (size_t)j * g->lda + p : (size_t)p * g->lda + j;
        double t = get(a, ai, f64) * get(a, aj, f64);
        exact += t, mag += fabs(t);
      }
      double old = g->beta_class ? get(c0, ix, f64) : 0;
      exact = alpha * exact + beta * old;
      double eps = f64 ? DBL_EPSILON : FLT_EPSILON;
      double bound = 4.0 * (k + 2) * eps * (fabs(alpha) * mag + fabs(beta * old)) + 4 * DBL_MIN;
      double d = fabs(get(c, ix, f64) - exact) / bound;
      cr_assert(isfinite(d), "C[%d,%d] = %g, exact %g", i, j, get(c, ix, f64), exact);
      worst = d > worst ? d : worst;
    }
  free(a), free(c), free(c0);
  cr_assert_eq(jit->release(fn, err, sizeof err), 0, "%s", err);
  return worst;
}

Test(syrk, both_triangles_both_transposes_against_the_reference)
{
  /* 65 x 256: a last tile of one column, whose GEMM (a GEMV of 32 x 256, 32 KB of floats)
   * sweeps A's columns */
  static const int shapes[][2] = {{2, 1},   {7, 5},  {31, 17}, {32, 32},
                                  {33, 8},  {70, 64}, {100, 3}, {65, 256}};
  static const double alphas[] = {1, 0.75}, betas[] = {0, 1, -0.5};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int v = 0; v < 8; v++) {
      int f64 = v & 1, uplo = 1 + (v >> 1 & 1), trans = v >> 2 & 1;
      int n = shapes[s][0], k = shapes[s][1], ai = (int)(s + v) % 2, bi = (int)(s + v) % 3;
      int lda = (trans ? k : n) + (int)(s % 3), ldc = n + (int)(v % 2) * 3;
      jt_gemm_t g = syrk(f64, uplo, trans, n, k, lda, ldc, ai == 0, bi == 0 ? 0 : bi == 1 ? 1 : 2);
      double w = run(&g, alphas[ai], betas[bi]);
      cr_assert_leq(w, 1.0, "n=%d k=%d f64=%d uplo=%d trans=%d: off by %.3g bounds", n, k, f64,
                    uplo, trans, w);
    }
}

Test(syrk, narrower_isa_kernels_are_correct_too)
{
  JT_TEST_NEEDS(JT_ISA_AVX2);
  jt_gemm_t g = syrk(0, 2, 0, 45, 20, 45, 45, 1, 0);
  g.isa = JT_ISA_AVX2;
  cr_assert_leq(run(&g, 1, 0), 1.0);
}

Test(syrk, the_kind_row_names_and_limits_it)
{
  jt_gemm_t g = syrk(1, 1, 1, 64, 32, 32, 64, 1, 0);
  cr_assert_eq(jt_kind_of(&g), JT_KIND_SYRK);
  cr_assert_str_eq(jt_kind(&g)->name, "syrk");
  cr_assert_not_null(jt_kind(&g)->writes);
  cr_assert(jt_kind(&g)->writes(&g, 3, 4), "the upper triangle is written");
  cr_assert_not(jt_kind(&g)->writes(&g, 4, 3), "the lower one is not");
  char name[128];
  jit->gemm_name(&g, name, sizeof name);
  static const char want[] = "opjit_dsyrk_UT_64x32_l32_64_a1_b0_";
  cr_assert(strncmp(name, want, sizeof want - 1) == 0, "%s", name);
  jt_gemm_t bad = g;
  bad.ldb = 40; /* B is not A */
  cr_assert_not(jt_gemm_supported(&bad));
  bad = g, bad.n = 65; /* not square */
  cr_assert_not(jt_gemm_supported(&bad));
  bad = g, bad.m = bad.n = JT_GEMM_MAX_DIM + 1, bad.ldc = bad.m;
  cr_assert_not(jt_gemm_supported(&bad));
  bad = g, bad.m = bad.n = JT_SYRK_MAX_N + 1, bad.ldc = bad.m; /* its tiles in straight code */
  cr_assert_not(jt_gemm_supported(&bad));
  bad.m = bad.n = JT_SYRK_MAX_N, bad.ldc = bad.m;
  cr_assert(jt_gemm_supported(&bad));
}
