/* SPDX-License-Identifier: MIT */
/* A host program for the SYRK tests: ssyrk_/dsyrk_/cblas_ssyrk/cblas_dsyrk calls through
 * whatever the process resolves (the agent, when preloaded), each result checked against
 * Debian's reference BLAS (libblas3's netlib library, loaded explicitly so the agent never sees
 * those calls): C's triangle within the bound of a sum of k products, the other triangle bit
 * for bit as it was.
 *   sweep S P SEED   S random signatures (Fortran and CBLAS row/column-major, both triangles,
 *                    both transposes, alpha in {1, -1, 0.5}, beta in {0, 1, 0.25}, padded
 *                    leading dimensions, float and double, n in 2..100, k in 1..100), each
 *                    called P times in passes separated by short pauses (so compiled variants
 *                    serve the later passes)
 * Prints "calls N mismatches M" and exits 1 when M > 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REFBLAS "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"

typedef void (*ssyrk_t)(const char *, const char *, const int *, const int *, const float *,
                        const float *, const int *, const float *, float *, const int *);
typedef void (*dsyrk_t)(const char *, const char *, const int *, const int *, const double *,
                        const double *, const int *, const double *, double *, const int *);
void ssyrk_(const char *, const char *, const int *, const int *, const float *, const float *,
            const int *, const float *, float *, const int *);
void dsyrk_(const char *, const char *, const int *, const int *, const double *, const double *,
            const int *, const double *, double *, const int *);
void cblas_ssyrk(int, int, int, int, int, float, const float *, int, float, float *, int);
void cblas_dsyrk(int, int, int, int, int, double, const double *, int, double, double *, int);

static ssyrk_t ref_s;
static dsyrk_t ref_d;
static long calls, mismatches;

typedef struct syrk_sig_s {
  int api, row, f64; /* api 0: Fortran, 1: CBLAS (row: row-major) */
  char uplo, trans;
  int n, k, lda, ldc;
  double alpha, beta;
} syrk_sig_t;

static uint64_t next(uint64_t *s)
{
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static void random_sig(syrk_sig_t *g, uint64_t *s)
{
  static const double alphas[] = {1, -1, 0.5}, betas[] = {0, 1, 0.25};
  g->api = (int)(next(s) % 2);
  g->row = g->api && next(s) % 2;
  g->f64 = (int)(next(s) % 2);
  g->uplo = next(s) % 2 ? 'U' : 'L';
  g->trans = next(s) % 2 ? 'T' : 'N';
  g->n = 2 + (int)(next(s) % 99);
  g->k = 1 + (int)(next(s) % 100);
  int pad = next(s) % 3 == 0 ? 3 : 0;
  /* A's stored lines are as long as n (op(A) = A in column-major, or A^T in row-major) or k */
  g->lda = ((g->trans == 'N') != g->row ? g->n : g->k) + pad;
  g->ldc = g->n + pad;
  g->alpha = alphas[next(s) % 3];
  g->beta = betas[next(s) % 3];
}

static double get(const char *p, size_t i, int f64)
{
  return f64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

static void put(char *p, size_t i, double v, int f64)
{
  if (f64)
    ((double *)p)[i] = v;
  else
    ((float *)p)[i] = (float)v;
}

/* The reference on C (column-major terms: a row-major call is the other triangle and the other
 * transpose of the same memory). */
static void reference(const syrk_sig_t *g, char uplo, char trans, double alpha, const char *a,
                      double beta, char *c)
{
  float fa = (float)alpha, fb = (float)beta;
  if (g->f64)
    ref_d(&uplo, &trans, &g->n, &g->k, &alpha, (const double *)a, &g->lda, &beta, (double *)c,
          &g->ldc);
  else
    ref_s(&uplo, &trans, &g->n, &g->k, &fa, (const float *)a, &g->lda, &fb, (float *)c, &g->ldc);
}

static void call_and_check(const syrk_sig_t *g, uint64_t *s, int nan_c)
{
  size_t es = g->f64 ? 8 : 4,
         na = (size_t)g->lda * (size_t)((g->trans == 'N') != g->row ? g->k : g->n);
  size_t nc = (size_t)g->ldc * (size_t)g->n;
  char *a = malloc(na * es), *aa = malloc(na * es), *c = malloc(nc * es), *c0 = malloc(nc * es);
  char *r = malloc(nc * es), *mag = malloc(nc * es);
  for (size_t i = 0; i < na; i++) {
    double v = ((double)(next(s) % 2001) - 1000) / 1000;
    put(a, i, v, g->f64), put(aa, i, fabs(v), g->f64);
  }
  for (size_t i = 0; i < nc; i++) {
    double v = nan_c ? NAN : ((double)(next(s) % 2001) - 1000) / 1000;
    put(c, i, v, g->f64), put(mag, i, isnan(v) ? 0 : fabs(v), g->f64);
  }
  memcpy(c0, c, nc * es), memcpy(r, c, nc * es);
  int cu = g->uplo == 'U' ? 121 : 122, ct = g->trans == 'N' ? 111 : 112;
  float fa = (float)g->alpha, fb = (float)g->beta;
  if (g->api == 0 && g->f64)
    dsyrk_(&g->uplo, &g->trans, &g->n, &g->k, &g->alpha, (double *)a, &g->lda, &g->beta,
           (double *)c, &g->ldc);
  else if (g->api == 0)
    ssyrk_(&g->uplo, &g->trans, &g->n, &g->k, &fa, (float *)a, &g->lda, &fb, (float *)c, &g->ldc);
  else if (g->f64)
    cblas_dsyrk(g->row ? 101 : 102, cu, ct, g->n, g->k, g->alpha, (double *)a, g->lda, g->beta,
                (double *)c, g->ldc);
  else
    cblas_ssyrk(g->row ? 101 : 102, cu, ct, g->n, g->k, fa, (float *)a, g->lda, fb, (float *)c,
                g->ldc);
  int upper = (g->uplo == 'U') != g->row; /* the triangle of the column-major memory */
  char u = upper ? 'U' : 'L', t = (g->trans == 'N') != g->row ? 'N' : 'T';
  reference(g, u, t, g->alpha, a, g->beta, r);
  reference(g, u, t, fabs(g->alpha), aa, fabs(g->beta), mag);
  double eps = g->f64 ? DBL_EPSILON : FLT_EPSILON;
  long bad = 0;
  for (int j = 0; j < g->n; j++)
    for (int i = 0; i < g->ldc; i++) {
      size_t ix = (size_t)j * g->ldc + i;
      if (i >= g->n || (upper ? i > j : i < j)) { /* outside the triangle: untouched */
        bad += memcmp(c + ix * es, c0 + ix * es, es) != 0;
        continue;
      }
      double x = get(c, ix, g->f64), y = get(r, ix, g->f64);
      double bound = 2.0 * (g->k + 2) * eps * get(mag, ix, g->f64) + 4 * DBL_MIN;
      bad += isnan(x) != isnan(y) || fabs(x - y) > bound;
    }
  if (bad)
    fprintf(stderr, "mismatch: %s %csyrk %s %c%c n %d k %d ld %d %d alpha %g beta %g: %ld\n",
            g->api ? "cblas" : "f77", g->f64 ? 'd' : 's', g->row ? "row" : "col", g->uplo, g->trans,
            g->n, g->k, g->lda, g->ldc, g->alpha, g->beta, bad);
  calls++;
  mismatches += bad != 0;
  free(a), free(aa), free(c), free(c0), free(r), free(mag);
}

/* Whether the compile thread worked through its queue: opjit_settle (agent/opjit.h) waits for
 * it however loaded the machine is; 0 without the agent in jit mode. */
static int settled(void)
{
  int (*settle)(long) = (int (*)(long))dlsym(RTLD_DEFAULT, "opjit_settle");
  return settle && settle(60000) >= 0;
}

static void sweep(int nsigs, int passes, uint64_t seed)
{
  syrk_sig_t *sigs = calloc((size_t)nsigs, sizeof *sigs);
  uint64_t s = seed;
  for (int i = 0; i < nsigs; i++)
    random_sig(&sigs[i], &s);
  for (int p = 0; p < passes; p++) {
    for (int i = 0; i < nsigs; i++)
      call_and_check(&sigs[i], &s, sigs[i].beta == 0 && next(&s) % 2);
    if (p > 0 || !settled()) /* without the agent: a guess (a SYRK compiles 1-4 GEMMs) */
      usleep(p == 0 ? 50000 * (useconds_t)nsigs : 100000);
  }
  free(sigs);
}

int main(int argc, char **argv)
{
  void *h = dlopen(REFBLAS, RTLD_NOW | RTLD_LOCAL);
  ref_s = h ? (ssyrk_t)dlsym(h, "ssyrk_") : NULL;
  ref_d = h ? (dsyrk_t)dlsym(h, "dsyrk_") : NULL;
  if (!ref_s || !ref_d) {
    fprintf(stderr, "reference BLAS %s not found (package libblas3)\n", REFBLAS);
    return 77;
  }
  if (argc < 5 || strcmp(argv[1], "sweep") != 0) {
    fprintf(stderr, "usage: %s sweep S P SEED\n", argv[0]);
    return 2;
  }
  sweep(atoi(argv[2]), atoi(argv[3]), strtoull(argv[4], NULL, 10));
  printf("calls %ld mismatches %ld\n", calls, mismatches);
  return mismatches > 0;
}
