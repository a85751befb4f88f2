/* SPDX-License-Identifier: MIT */
/* A program whose stacks the sampler must walk to main through a BLAS library without CFI
 * (nocfi_blas.c), calling it from a static function: its own functions are in .symtab only
 * (nothing is exported: no -rdynamic).
 *   stack_prog N     N rounds of cblas_sdot n=4096 from dot_rounds; prints the sum */
#include <stdio.h>
#include <stdlib.h>

float cblas_sdot(int n, const float *x, int incx, const float *y, int incy);

static float x[4096], y[4096];

__attribute__((noinline)) static double dot_rounds(long rounds)
{
  double sum = 0;
  for (long r = 0; r < rounds; r++)
    sum += cblas_sdot(4096, x, 1, y, 1);
  return sum;
}

int main(int argc, char **argv)
{
  for (int i = 0; i < 4096; i++)
    x[i] = (float)(i % 5) / 4, y[i] = (float)(i % 3) / 2;
  printf("sum %.9g\n", dot_rounds(argc > 1 ? atol(argv[1]) : 1));
  return 0;
}
