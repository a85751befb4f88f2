/* SPDX-License-Identifier: MIT */
/* The BLAS entry points the benchmark workers call, declared once (the system's libblas.so.3
 * ships no header here: Debian's OpenBLAS -dev package is not a dependency). */
#ifndef OPJIT_BENCH_BLAS_H
#define OPJIT_BENCH_BLAS_H

typedef int blasint;

void sgemm_(const char *ta, const char *tb, const blasint *m, const blasint *n,
            const blasint *k, const float *alpha, const float *a, const blasint *lda,
            const float *b, const blasint *ldb, const float *beta, float *c, const blasint *ldc);
void dgemm_(const char *ta, const char *tb, const blasint *m, const blasint *n,
            const blasint *k, const double *alpha, const double *a, const blasint *lda,
            const double *b, const blasint *ldb, const double *beta, double *c,
            const blasint *ldc);
void cblas_sgemm(int order, int ta, int tb, blasint m, blasint n, blasint k, float alpha,
                 const float *a, blasint lda, const float *b, blasint ldb, float beta, float *c,
                 blasint ldc);
void cblas_dgemm(int order, int ta, int tb, blasint m, blasint n, blasint k, double alpha,
                 const double *a, blasint lda, const double *b, blasint ldb, double beta,
                 double *c, blasint ldc);

void sgemv_(const char *t, const blasint *m, const blasint *n, const float *alpha,
            const float *a, const blasint *lda, const float *x, const blasint *incx,
            const float *beta, float *y, const blasint *incy);
void dgemv_(const char *t, const blasint *m, const blasint *n, const double *alpha,
            const double *a, const blasint *lda, const double *x, const blasint *incx,
            const double *beta, double *y, const blasint *incy);

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

#endif
