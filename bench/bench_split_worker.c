/* SPDX-License-Identifier: MIT */
/* bench_split_worker: the program bench_split runs plain and under the agent. One product in a
 * loop, through the Fortran symbols of the system BLAS (its library's own threads, as the
 * driver asks), operands allocated and filled once:
 *   bench_split_worker gemm|gemv s|d N ITERATIONS
 * gemm: C = A B, N x N x N, beta 0; gemv: y = A x, A N x N column-major, beta 0. Prints
 * "loop_ms MS" (the loop's wall time) and "checksum X" on stdout. ITERATIONS = 0 loads the BLAS
 * and exits (bench_split asks OpenBLAS which core it runs that way). */
#define _GNU_SOURCE
#include "bench.h"
#include "blas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
  if (argc != 5 || (strcmp(argv[1], "gemm") && strcmp(argv[1], "gemv")) ||
      (strcmp(argv[2], "s") && strcmp(argv[2], "d"))) {
    fprintf(stderr, "usage: %s gemm|gemv s|d N ITERATIONS\n", argv[0]);
    return 2;
  }
  int gemm = !strcmp(argv[1], "gemm"), f64 = !strcmp(argv[2], "d");
  blasint n = atoi(argv[3]), one = 1;
  long iters = atol(argv[4]);
  if (n < 1 || iters < 0) {
    fprintf(stderr, "bench_split_worker: N >= 1 and ITERATIONS >= 0\n");
    return 2;
  }
  size_t es = f64 ? 8 : 4, nn = (size_t)n * (size_t)n, nb = gemm ? nn : (size_t)n;
  char *a = malloc(nn * es), *b = malloc(nb * es), *c = malloc(nb * es);
  if (!a || !b || !c) {
    fprintf(stderr, "bench_split_worker: out of memory\n");
    return 1;
  }
  uint64_t s = 12345;
  for (size_t i = 0; i < nn + nb; i++) { /* values in [-1, 1) */
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double v = (double)(s >> 11) / 9007199254740992.0 * 2 - 1;
    char *p = i < nn ? a : b;
    size_t j = i < nn ? i : i - nn;
    f64 ? (((double *)p)[j] = v) : (((float *)p)[j] = (float)v);
  }
  double checksum = 0, dz = 0, d1 = 1;
  float fz = 0, f1 = 1;
  uint64_t t0 = bn_now_ns();
  for (long it = 0; it < iters; it++) {
    if (gemm && f64)
      dgemm_("N", "N", &n, &n, &n, &d1, (double *)a, &n, (double *)b, &n, &dz, (double *)c, &n);
    else if (gemm)
      sgemm_("N", "N", &n, &n, &n, &f1, (float *)a, &n, (float *)b, &n, &fz, (float *)c, &n);
    else if (f64)
      dgemv_("N", &n, &n, &d1, (double *)a, &n, (double *)b, &one, &dz, (double *)c, &one);
    else
      sgemv_("N", &n, &n, &f1, (float *)a, &n, (float *)b, &one, &fz, (float *)c, &one);
    checksum += f64 ? ((double *)c)[it % (long)n] : ((float *)c)[it % (long)n];
  }
  printf("loop_ms %.3f\nchecksum %.9g\n", (double)(bn_now_ns() - t0) / 1e6, checksum);
  free(a), free(b), free(c);
  return 0;
}
