/* SPDX-License-Identifier: MIT */
/* A BLAS routine without call-frame information, as hand-written assembly kernels are: built
 * with -fno-asynchronous-unwind-tables, no .eh_frame entry (what unwinders read at run time)
 * covers its code, and its kernel keeps a frame of its own, so that a walk cannot guess its
 * way out. cblas_sdot, computed by a static kernel in blocks. For stack_prog. */

/* One block of the dot product: partial sums in a frame of their own. */
__attribute__((noinline)) static float dot_kernel(int n, const float *x, int incx, const float *y,
                                                  int incy)
{
  volatile float part[8] = {0};
  for (int i = 0; i < n; i++)
    part[i & 7] += x[(long)i * incx] * y[(long)i * incy];
  return part[0] + part[1] + part[2] + part[3] + part[4] + part[5] + part[6] + part[7];
}

float cblas_sdot(int n, const float *x, int incx, const float *y, int incy)
{
  float sum = 0;
  for (int i = 0; i < n; i += 256) {
    int m = n - i < 256 ? n - i : 256;
    sum += dot_kernel(m, x + (long)i * incx, incx, y + (long)i * incy, incy);
  }
  return sum;
}
