/* SPDX-License-Identifier: MIT */
/* bench_smallgemm_worker: the held-out "realistic program" bench_smallgemm runs plain and
 * under the agent. A loop over 14 small GEMM shapes, as a simulation or a small network's
 * inner step would call them: sgemm and dgemm mixed, M, N, K from 4 to 64, some not square,
 * mostly NN with a few transposed, beta 0 and 1, alpha 1, mostly through the Fortran symbols
 * and three through CBLAS row-major; the smallest are called several times per iteration.
 * Nothing in it was chosen for opjit: its shapes are not bench_jit's.
 *   bench_smallgemm_worker ITERATIONS
 * prints "loop_ms MS" (the loop's wall time: every BLAS call of the program), "loop_cpu_ms MS"
 * (the CPU time the loop's thread had meanwhile: what a busy machine's other processes take
 * from the wall time is not in it, and neither is the agent's own threads' work), "calls N"
 * and "checksum X" on stdout. ITERATIONS = 0 loads the BLAS and exits (bench_smallgemm asks
 * OpenBLAS which core it runs that way). */
#define _GNU_SOURCE
#include "bench.h"
#include "blas.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct shape_s {
  char dt, api, ta, tb; /* 's'/'d', 'F' (Fortran) / 'C' (CBLAS row-major), 'N'/'T' */
  blasint m, n, k;
  int beta, reps;       /* beta 0 or 1; calls per iteration */
  blasint lda, ldb, ldc;
  void *a, *b, *c;
} shape_t;

static shape_t shapes[] = {
    {'s', 'F', 'N', 'N', 4, 4, 4, 1, 4},    {'d', 'F', 'N', 'N', 8, 8, 8, 0, 4},
    {'s', 'F', 'N', 'N', 16, 16, 16, 1, 2}, {'d', 'F', 'N', 'N', 12, 20, 16, 1, 2},
    {'s', 'F', 'N', 'T', 32, 32, 32, 0, 1}, {'d', 'F', 'N', 'N', 32, 32, 32, 1, 1},
    {'s', 'C', 'N', 'N', 48, 24, 64, 1, 1}, {'d', 'F', 'T', 'N', 24, 24, 48, 0, 1},
    {'s', 'F', 'N', 'N', 64, 64, 64, 1, 1}, {'d', 'C', 'N', 'N', 64, 64, 64, 1, 1},
    {'s', 'F', 'T', 'N', 20, 36, 12, 1, 2}, {'d', 'F', 'N', 'T', 40, 16, 56, 0, 1},
    {'s', 'C', 'N', 'N', 8, 64, 32, 0, 2},  {'d', 'F', 'N', 'N', 56, 56, 56, 1, 1},
};
enum { NSHAPES = sizeof shapes / sizeof *shapes };

/* An array of rows x cols elements of shape s's type, values in [-1, 1] from seed. */
static void *operand(const shape_t *s, blasint rows, blasint cols, unsigned seed)
{
  size_t len = (size_t)rows * (size_t)cols, esz = s->dt == 'd' ? 8 : 4;
  void *p = malloc(len * esz);
  if (!p) {
    perror("bench_smallgemm_worker");
    exit(1);
  }
  for (size_t i = 0; i < len; i++) {
    seed = seed * 1103515245u + 12345u;
    double v = (double)(seed >> 8 & 0xffff) / 32767.5 - 1.0;
    if (s->dt == 'd')
      ((double *)p)[i] = v;
    else
      ((float *)p)[i] = (float)v;
  }
  return p;
}

/* Operands with tight leading dimensions: op(A) is m x k, op(B) k x n, C m x n, stored
 * column-major (Fortran) or row-major (CBLAS). */
static void setup(shape_t *s, unsigned seed)
{
  int row = s->api == 'C';
  blasint ar = s->ta == 'N' ? s->m : s->k, ac = s->ta == 'N' ? s->k : s->m;
  blasint br = s->tb == 'N' ? s->k : s->n, bc = s->tb == 'N' ? s->n : s->k;
  s->lda = row ? ac : ar, s->ldb = row ? bc : br, s->ldc = row ? s->n : s->m;
  s->a = operand(s, ar, ac, seed);
  s->b = operand(s, br, bc, seed + 1);
  s->c = operand(s, s->m, s->n, seed + 2);
}

static void call(const shape_t *s)
{
  int cta = s->ta == 'N' ? CBLAS_NO_TRANS : CBLAS_TRANS;
  int ctb = s->tb == 'N' ? CBLAS_NO_TRANS : CBLAS_TRANS;
  if (s->dt == 'd') {
    const double one = 1, beta = s->beta;
    if (s->api == 'C')
      cblas_dgemm(CBLAS_ROW_MAJOR, cta, ctb, s->m, s->n, s->k, 1.0, s->a, s->lda, s->b,
                  s->ldb, beta, s->c, s->ldc);
    else
      dgemm_(&s->ta, &s->tb, &s->m, &s->n, &s->k, &one, s->a, &s->lda, s->b, &s->ldb, &beta,
             s->c, &s->ldc);
  } else {
    const float one = 1, beta = (float)s->beta;
    if (s->api == 'C')
      cblas_sgemm(CBLAS_ROW_MAJOR, cta, ctb, s->m, s->n, s->k, 1.0f, s->a, s->lda, s->b,
                  s->ldb, beta, s->c, s->ldc);
    else
      sgemm_(&s->ta, &s->tb, &s->m, &s->n, &s->k, &one, s->a, &s->lda, s->b, &s->ldb, &beta,
             s->c, &s->ldc);
  }
}

int main(int argc, char **argv)
{
  if (argc != 2 || atol(argv[1]) < 0) {
    fprintf(stderr, "usage: bench_smallgemm_worker ITERATIONS\n");
    return 2;
  }
  long iters = atol(argv[1]), calls = 0;
  if (!iters)
    return 0; /* the BLAS is loaded (and OpenBLAS named its core) before main */
  for (int i = 0; i < NSHAPES; i++)
    setup(&shapes[i], 7u * (unsigned)i + 1u);
  struct timespec c0, c1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  uint64_t t0 = bn_now_ns();
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < NSHAPES; i++)
      for (int r = 0; r < shapes[i].reps; r++, calls++)
        call(&shapes[i]);
  double ms = (double)(bn_now_ns() - t0) / 1e6;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  double cpu_ms = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
  double sum = 0;
  for (int i = 0; i < NSHAPES; i++)
    sum += shapes[i].dt == 'd' ? ((double *)shapes[i].c)[0] : ((float *)shapes[i].c)[0];
  printf("loop_ms %.3f\nloop_cpu_ms %.3f\ncalls %ld\nchecksum %.6g\n", ms, cpu_ms, calls, sum);
  return 0;
}
