/* SPDX-License-Identifier: MIT */
/* bench_soak_worker: the long-running BLAS program bench_soak watches under the agent. It
 * walks a pool of POOL distinct small GEMM shapes in laps until SECONDS have passed, calling
 * each shape CALLS times per visit: sgemm and dgemm, NN, NT, TN and TT, M, N, K from 1 to 32,
 * half through CBLAS row-major and half through the Fortran symbols, tight leading dimensions.
 * The pool is a fixed pseudo-random draw (the same every run), so after the first lap the
 * agent's signature table stops growing while its code cache keeps churning: with CALLS a
 * multiple of 4096 every visit crosses the agent's re-ask point, so a shape whose kernel was
 * evicted is compiled again on its next visit.
 *   bench_soak_worker SECONDS POOL CALLS
 * prints "visits N", "calls N" and "checksum X" on stdout at the end. SECONDS = 0 loads the BLAS
 * and exits. */
#define _GNU_SOURCE
#include "bench.h"
#include "blas.h"

#include <stdio.h>
#include <stdlib.h>

#define DIM_MAX 32

typedef struct shape_s {
  char dt, api, ta, tb; /* 's'/'d', 'F' (Fortran) / 'C' (CBLAS row-major), 'N'/'T' */
  blasint m, n, k;
} shape_t;

static double a[DIM_MAX * DIM_MAX], b[DIM_MAX * DIM_MAX], c[DIM_MAX * DIM_MAX];
static float fa[DIM_MAX * DIM_MAX], fb[DIM_MAX * DIM_MAX], fc[DIM_MAX * DIM_MAX];

/* Shape i of the pool: a fixed function of i, distinct for distinct i below the space's size
 * (2 types x 4 transpositions x 2 APIs x 32^3 = 2^19 shapes: an odd multiplier permutes it),
 * consecutive i spread over it. */
static shape_t shape_of(unsigned i)
{
  unsigned space = 2u * 4u * 2u * DIM_MAX * DIM_MAX * DIM_MAX;
  unsigned v = (unsigned)(((unsigned long long)i * 40503u + 12345u) % space);
  shape_t s;
  s.dt = v & 1 ? 'd' : 's';
  v >>= 1;
  s.ta = v & 1 ? 'T' : 'N';
  s.tb = v & 2 ? 'T' : 'N';
  v >>= 2;
  s.api = v & 1 ? 'C' : 'F';
  v >>= 1;
  s.m = (blasint)(v % DIM_MAX) + 1;
  s.n = (blasint)(v / DIM_MAX % DIM_MAX) + 1;
  s.k = (blasint)(v / (DIM_MAX * DIM_MAX) % DIM_MAX) + 1;
  return s;
}

static void call(const shape_t *s)
{
  int row = s->api == 'C';
  blasint ar = s->ta == 'N' ? s->m : s->k, ac = s->ta == 'N' ? s->k : s->m;
  blasint br = s->tb == 'N' ? s->k : s->n, bc = s->tb == 'N' ? s->n : s->k;
  blasint lda = row ? ac : ar, ldb = row ? bc : br, ldc = row ? s->n : s->m;
  int cta = s->ta == 'N' ? CBLAS_NO_TRANS : CBLAS_TRANS;
  int ctb = s->tb == 'N' ? CBLAS_NO_TRANS : CBLAS_TRANS;
  if (s->dt == 'd') {
    const double one = 1, zero = 0;
    if (row)
      cblas_dgemm(CBLAS_ROW_MAJOR, cta, ctb, s->m, s->n, s->k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
    else
      dgemm_(&s->ta, &s->tb, &s->m, &s->n, &s->k, &one, a, &lda, b, &ldb, &zero, c, &ldc);
  } else {
    const float one = 1, zero = 0;
    if (row)
      cblas_sgemm(CBLAS_ROW_MAJOR, cta, ctb, s->m, s->n, s->k, 1.0f, fa, lda, fb, ldb, 0.0f, fc,
                  ldc);
    else
      sgemm_(&s->ta, &s->tb, &s->m, &s->n, &s->k, &one, fa, &lda, fb, &ldb, &zero, fc, &ldc);
  }
}

int main(int argc, char **argv)
{
  if (argc != 4 || atol(argv[1]) < 0 || atol(argv[2]) < 1 || atol(argv[3]) < 1) {
    fprintf(stderr, "usage: bench_soak_worker SECONDS POOL CALLS\n");
    return 2;
  }
  long seconds = atol(argv[1]), pool = atol(argv[2]), per = atol(argv[3]);
  if (!seconds)
    return 0;
  unsigned seed = 1;
  for (size_t i = 0; i < DIM_MAX * DIM_MAX; i++) { /* values in [-1, 1]: both types' bits */
    seed = seed * 1103515245u + 12345u;
    a[i] = (double)(seed >> 8 & 0xffff) / 32767.5 - 1.0;
    b[i] = -a[i] / 2;
    fa[i] = (float)a[i], fb[i] = (float)b[i];
  }
  uint64_t end = bn_now_ns() + (uint64_t)seconds * 1000000000u;
  long visits = 0;
  double sum = 0;
  while (bn_now_ns() < end) {
    shape_t s = shape_of((unsigned)(visits % pool));
    for (long r = 0; r < per; r++)
      call(&s);
    sum += s.dt == 'd' ? c[0] : fc[0];
    visits++;
  }
  printf("visits %ld\ncalls %ld\nchecksum %.6g\n", visits, visits * per, sum);
  return 0;
}
