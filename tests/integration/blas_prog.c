/* SPDX-License-Identifier: MIT */
/* A host program for the integration tests: calls every interposed BLAS function with random
 * shapes, transposes, strides, alpha/beta, in Fortran and in CBLAS row- and column-major, and
 * writes (1) the raw bytes of every output to OUT.bin and (2) how many times it called each
 * function to OUT.counts ("name count" lines). Usage: blas_prog OUT [SEED [CALLS]]. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int blasint;
#define F77_GEMM(T, name)                                                                    \
  void name(const char *, const char *, const blasint *, const blasint *, const blasint *,   \
            const T *, const T *, const blasint *, const T *, const blasint *, const T *, T *, \
            const blasint *);
#define F77_GEMV(T, name)                                                                    \
  void name(const char *, const blasint *, const blasint *, const T *, const T *,            \
            const blasint *, const T *, const blasint *, const T *, T *, const blasint *);
F77_GEMM(float, sgemm_)
F77_GEMM(double, dgemm_)
F77_GEMV(float, sgemv_)
F77_GEMV(double, dgemv_)
void saxpy_(const blasint *, const float *, const float *, const blasint *, float *, const blasint *);
void daxpy_(const blasint *, const double *, const double *, const blasint *, double *, const blasint *);
float sdot_(const blasint *, const float *, const blasint *, const float *, const blasint *);
double ddot_(const blasint *, const double *, const blasint *, const double *, const blasint *);
void cblas_sgemm(int, int, int, blasint, blasint, blasint, float, const float *, blasint,
                 const float *, blasint, float, float *, blasint);
void cblas_dgemm(int, int, int, blasint, blasint, blasint, double, const double *, blasint,
                 const double *, blasint, double, double *, blasint);
void cblas_sgemv(int, int, blasint, blasint, float, const float *, blasint, const float *,
                 blasint, float, float *, blasint);
void cblas_dgemv(int, int, blasint, blasint, double, const double *, blasint, const double *,
                 blasint, double, double *, blasint);
void cblas_saxpy(blasint, float, const float *, blasint, float *, blasint);
void cblas_daxpy(blasint, double, const double *, blasint, double *, blasint);
float cblas_sdot(blasint, const float *, blasint, const float *, blasint);
double cblas_ddot(blasint, const double *, blasint, const double *, blasint);

enum { F_SGEMM, F_DGEMM, F_SGEMV, F_DGEMV, F_SAXPY, F_DAXPY, F_SDOT, F_DDOT, NF };
static const char *const names[2][NF] = {
    {"sgemm", "dgemm", "sgemv", "dgemv", "saxpy", "daxpy", "sdot", "ddot"},
    {"cblas_sgemm", "cblas_dgemm", "cblas_sgemv", "cblas_dgemv", "cblas_saxpy", "cblas_daxpy",
     "cblas_sdot", "cblas_ddot"}};
static long counts[2][NF];
static uint64_t rng_state;
static FILE *out;

static uint32_t rnd(uint32_t n)
{
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33) % n;
}

static double scalar(void)
{
  static const double s[] = {0.0, 1.0, -1.0, 0.5, -2.25};
  return s[rnd(5)];
}

#define MAXD 48
static float sa[MAXD * MAXD * 2], sb[MAXD * MAXD * 2], sc[MAXD * MAXD * 2];
static double da[MAXD * MAXD * 2], db[MAXD * MAXD * 2], dc[MAXD * MAXD * 2];

static void fill(void)
{
  for (size_t i = 0; i < sizeof sa / sizeof *sa; i++) {
    sa[i] = (float)rnd(2000) / 1000 - 1, sb[i] = (float)rnd(2000) / 1000 - 1;
    sc[i] = (float)rnd(2000) / 1000 - 1;
    da[i] = (double)rnd(2000) / 1000 - 1, db[i] = (double)rnd(2000) / 1000 - 1;
    dc[i] = (double)rnd(2000) / 1000 - 1;
  }
}

static void one_call(int f, int cblas)
{
  blasint m = 1 + (blasint)rnd(MAXD), n = 1 + (blasint)rnd(MAXD), k = 1 + (blasint)rnd(MAXD);
  blasint pad = (blasint)rnd(3), inc = 1 + (blasint)rnd(2), incy = rnd(3) ? 1 : 2;
  int row = cblas && rnd(2);
  char ta = "NTC"[rnd(3)], tb = "NTC"[rnd(3)];
  int cta = ta == 'N' ? 111 : ta == 'T' ? 112 : 113, ctb = tb == 'N' ? 111 : tb == 'T' ? 112 : 113;
  double al = scalar(), be = scalar();
  float fal = (float)al, fbe = (float)be;
  /* Leading dimensions: rows of each stored operand (in its order) plus padding. */
  blasint arows = (ta == 'N') != row ? m : k, brows = (tb == 'N') != row ? k : n;
  blasint lda = ((ta == 'N') != row ? m : k) + pad, ldb = brows + pad, ldc = (row ? n : m) + pad;
  (void)arows;
  blasint gl = (row ? n : m) + pad; /* gemv lda */
  counts[cblas][f]++;
  switch (f) {
  case F_SGEMM:
    if (cblas)
      cblas_sgemm(row ? 101 : 102, cta, ctb, m, n, k, fal, sa, lda, sb, ldb, fbe, sc, ldc);
    else
      sgemm_(&ta, &tb, &m, &n, &k, &fal, sa, &lda, sb, &ldb, &fbe, sc, &ldc);
    fwrite(sc, sizeof *sc, (size_t)(ldc * (row ? m : n)), out);
    break;
  case F_DGEMM:
    if (cblas)
      cblas_dgemm(row ? 101 : 102, cta, ctb, m, n, k, al, da, lda, db, ldb, be, dc, ldc);
    else
      dgemm_(&ta, &tb, &m, &n, &k, &al, da, &lda, db, &ldb, &be, dc, &ldc);
    fwrite(dc, sizeof *dc, (size_t)(ldc * (row ? m : n)), out);
    break;
  case F_SGEMV: {
    blasint ylen = ta == 'N' ? m : n;
    if (cblas)
      cblas_sgemv(row ? 101 : 102, cta, m, n, fal, sa, gl, sb, inc, fbe, sc, incy);
    else
      sgemv_(&ta, &m, &n, &fal, sa, &gl, sb, &inc, &fbe, sc, &incy);
    fwrite(sc, sizeof *sc, (size_t)(ylen * incy), out);
    break;
  }
  case F_DGEMV: {
    blasint ylen = ta == 'N' ? m : n;
    if (cblas)
      cblas_dgemv(row ? 101 : 102, cta, m, n, al, da, gl, db, inc, be, dc, incy);
    else
      dgemv_(&ta, &m, &n, &al, da, &gl, db, &inc, &be, dc, &incy);
    fwrite(dc, sizeof *dc, (size_t)(ylen * incy), out);
    break;
  }
  case F_SAXPY:
    n *= 8;
    if (cblas)
      cblas_saxpy(n, fal, sa, inc, sc, incy);
    else
      saxpy_(&n, &fal, sa, &inc, sc, &incy);
    fwrite(sc, sizeof *sc, (size_t)(n * incy), out);
    break;
  case F_DAXPY:
    n *= 8;
    if (cblas)
      cblas_daxpy(n, al, da, inc, dc, incy);
    else
      daxpy_(&n, &al, da, &inc, dc, &incy);
    fwrite(dc, sizeof *dc, (size_t)(n * incy), out);
    break;
  case F_SDOT: {
    n *= 8;
    float r = cblas ? cblas_sdot(n, sa, inc, sb, incy) : sdot_(&n, sa, &inc, sb, &incy);
    fwrite(&r, sizeof r, 1, out);
    break;
  }
  case F_DDOT: {
    n *= 8;
    double r = cblas ? cblas_ddot(n, da, inc, db, incy) : ddot_(&n, da, &inc, db, &incy);
    fwrite(&r, sizeof r, 1, out);
    break;
  }
  }
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: %s OUT [SEED [CALLS]]\n", argv[0]);
    return 2;
  }
  rng_state = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
  long calls = argc > 3 ? atol(argv[3]) : 4000;
  char path[4096];
  snprintf(path, sizeof path, "%s.bin", argv[1]);
  if (!(out = fopen(path, "wb")))
    return 1;
  fill();
  for (long i = 0; i < calls; i++)
    one_call((int)rnd(NF), (int)rnd(2));
  /* One fixed signature with a known count: sgemm NN 64x64x64 beta=0, 17 times. */
  static float a[64 * 64], b[64 * 64], c[64 * 64];
  for (int i = 0; i < 64 * 64; i++)
    a[i] = (float)(i % 7), b[i] = (float)(i % 5);
  blasint s = 64;
  float one = 1, zero = 0;
  for (int i = 0; i < 17; i++, counts[0][F_SGEMM]++)
    sgemm_("N", "N", &s, &s, &s, &one, a, &s, b, &s, &zero, c, &s);
  fwrite(c, sizeof c, 1, out);
  fclose(out);
  snprintf(path, sizeof path, "%s.counts", argv[1]);
  FILE *cf = fopen(path, "w");
  if (!cf)
    return 1;
  for (int api = 0; api < 2; api++)
    for (int f = 0; f < NF; f++)
      fprintf(cf, "%s %ld\n", names[api][f], counts[api][f]);
  fclose(cf);
  return 0;
}
