/* SPDX-License-Identifier: MIT */
/* The BLAS host: interposes the Fortran (sgemm_ ...) and CBLAS (cblas_sgemm ...) symbols,
 * reduces each call to a signature and forwards it, arguments untouched, to the next
 * definition in the process. Integers are LP64 BLAS ints (int32), as Debian's libblas.so.3. */
#include "../agent.h"
#include "../opt.h"

typedef int blasint;

enum { CBLAS_ROW_MAJOR = 101, CBLAS_COL_MAJOR = 102 };
enum { CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112, CBLAS_CONJ_TRANS = 113 };

static uint8_t cblas_trans(int t)
{
  return t == CBLAS_NO_TRANS ? AG_N : t == CBLAS_TRANS ? AG_T : t == CBLAS_CONJ_TRANS ? AG_C : AG_TRANS_BAD;
}

static uint8_t classes(double alpha, double beta)
{
  return (uint8_t)(ag_scalar_class(alpha) | ag_scalar_class(beta) << 4);
}

/* Each interposed symbol resolves its original once and accounts for the call around it; KEY
 * is an expression building the call's ag_sig_t (ag_sig_make) from the arguments. When the
 * signature has a published JIT variant, the variant runs in front of the original.
 *
 * A GEMM, GEMV or AXPY (A, B, C, alpha, beta name the operands and scalars: for a GEMV B is x
 * and C is y; an AXPY is y += alpha x [1], B being that 1). */
#define INTERPOSE_JIT(name, params, args, KEY, A, B, C, ALPHA, BETA)                          \
  typedef void (*name##_fn) params;                                                          \
  AG_EXPORT void name params                                                                 \
  {                                                                                          \
    static void *_Atomic real;                                                               \
    name##_fn fn = (name##_fn)ag_resolve(&real, #name);                                      \
    ag_sig_t k = KEY;                                                                        \
    ag_call_t c;                                                                             \
    if (!ag_call_begin(&c, &k)) {                                              \
      if (fn)                                                                                \
        fn args;                                                                             \
      return;                                                                                \
    }                                                                                        \
    void *v = ag_call_variant(&c);                                                           \
    ag_verify_t vf;                                                                          \
    int how = v ? ag_tier_gemm(c.e, v, A, B, C, ALPHA, BETA, &vf) : AG_RUN_ORIGINAL;         \
    if (how == AG_RUN_DONE)                                                                  \
      c.variant = 1;                                                                         \
    else if (fn)                                                                             \
      fn args;                                                                               \
    if (how == AG_RUN_VERIFY) {                                                              \
      c.t0 = 0; /* ran both: a timing of neither */                                          \
      ag_tier_verify_end(&vf);                                                               \
    }                                                                                        \
    ag_call_end(&c);                                                                         \
  }
/* A dot product (X and Y name the vectors). */
#define INTERPOSE_DOT(T, name, params, args, KEY, X, Y)                                       \
  typedef T (*name##_fn) params;                                                             \
  AG_EXPORT T name params                                                                    \
  {                                                                                          \
    static void *_Atomic real;                                                               \
    name##_fn fn = (name##_fn)ag_resolve(&real, #name);                                      \
    ag_sig_t k = KEY;                                                                        \
    ag_call_t c;                                                                             \
    if (!ag_call_begin(&c, &k))                                                \
      return fn ? fn args : (T)0;                                                            \
    void *v = ag_call_variant(&c);                                                           \
    double r = 0;                                                                            \
    int how = v ? ag_tier_dot(c.e, v, X, Y, &r) : AG_RUN_ORIGINAL;                           \
    T out = (T)r;                                                                            \
    if (how == AG_RUN_DONE) {                                                                \
      c.variant = 1;                                                                         \
    } else {                                                                                 \
      out = fn ? fn args : (T)0;                                                             \
      if (how == AG_RUN_VERIFY) {                                                            \
        c.t0 = 0;                                                                            \
        ag_tier_dot_verify_end(c.e, r, out, X, Y);                                           \
      }                                                                                      \
    }                                                                                        \
    ag_call_end(&c);                                                                         \
    return out;                                                                              \
  }

#define BLAS_KEY(...) ag_sig_make(AG_HOST_ID_BLAS, __VA_ARGS__)
#define NO_SCALARS (AG_S_NONE | AG_S_NONE << 4)

/* ---- Fortran ----------------------------------------------------------------------------- */

#define F77_GEMM(name, T, DT)                                                                \
  INTERPOSE_JIT(name,                                                                       \
            (const char *ta, const char *tb, const blasint *m, const blasint *n,             \
             const blasint *k_, const T *alpha, const T *a, const blasint *lda, const T *b,  \
             const blasint *ldb, const T *beta, T *c_, const blasint *ldc),                  \
            (ta, tb, m, n, k_, alpha, a, lda, b, ldb, beta, c_, ldc),                        \
            BLAS_KEY(AG_OP_GEMM, DT, AG_API_F77, AG_COL, ag_trans_char(*ta),                 \
                     ag_trans_char(*tb), classes(*alpha, *beta), *m, *n, *k_, *lda, *ldb,    \
                     *ldc),                                                                  \
            a, b, c_, *alpha, *beta)

#define F77_GEMV(name, T, DT)                                                                \
  INTERPOSE_JIT(name,                                                                        \
            (const char *tr, const blasint *m, const blasint *n, const T *alpha, const T *a, \
             const blasint *lda, const T *x, const blasint *incx, const T *beta, T *y,       \
             const blasint *incy),                                                           \
            (tr, m, n, alpha, a, lda, x, incx, beta, y, incy),                               \
            BLAS_KEY(AG_OP_GEMV, DT, AG_API_F77, AG_COL, ag_trans_char(*tr), 0,              \
                     classes(*alpha, *beta), *m, *n, 0, *lda, *incx, *incy),                 \
            a, x, y, *alpha, *beta)

/* An AXPY runs as a one-column GEMM: y += alpha x [1] (B is that 1). */
#define F77_AXPY(name, T, DT)                                                                \
  INTERPOSE_JIT(name,                                                                        \
            (const blasint *n, const T *alpha, const T *x, const blasint *incx, T *y,        \
             const blasint *incy),                                                           \
            (n, alpha, x, incx, y, incy),                                                    \
            BLAS_KEY(AG_OP_AXPY, DT, AG_API_F77, AG_COL, 0, 0, classes(*alpha, 1.0), *n, 0,  \
                     0, *incx, *incy, 0),                                                    \
            x, (const T[]){1}, y, *alpha, 1.0)

#define F77_DOT(name, T, DT)                                                                 \
  INTERPOSE_DOT(T, name,                                                                     \
            (const blasint *n, const T *x, const blasint *incx, const T *y,                  \
             const blasint *incy),                                                           \
            (n, x, incx, y, incy),                                                           \
            BLAS_KEY(AG_OP_DOT, DT, AG_API_F77, AG_COL, 0, 0, NO_SCALARS, *n, 0, 0, *incx,   \
                     *incy, 0),                                                              \
            x, y)

F77_GEMM(sgemm_, float, AG_F32)
F77_GEMM(dgemm_, double, AG_F64)
F77_GEMV(sgemv_, float, AG_F32)
F77_GEMV(dgemv_, double, AG_F64)
F77_AXPY(saxpy_, float, AG_F32)
F77_AXPY(daxpy_, double, AG_F64)
F77_DOT(sdot_, float, AG_F32)
F77_DOT(ddot_, double, AG_F64)

/* ---- CBLAS ------------------------------------------------------------------------------- */

/* An order that is neither is kept apart (AG_ORDER_BAD): such calls are never compiled, and the
 * original library reports them as BLAS does. */
#define ORDER(o) ((o) == CBLAS_ROW_MAJOR ? AG_ROW : (o) == CBLAS_COL_MAJOR ? AG_COL : AG_ORDER_BAD)

#define CBLAS_GEMM(name, T, DT)                                                              \
  INTERPOSE_JIT(name,                                                                       \
            (int order, int ta, int tb, blasint m, blasint n, blasint k_, T alpha,           \
             const T *a, blasint lda, const T *b, blasint ldb, T beta, T *c_, blasint ldc),  \
            (order, ta, tb, m, n, k_, alpha, a, lda, b, ldb, beta, c_, ldc),                 \
            BLAS_KEY(AG_OP_GEMM, DT, AG_API_CBLAS, ORDER(order), cblas_trans(ta),            \
                     cblas_trans(tb), classes(alpha, beta), m, n, k_, lda, ldb, ldc),        \
            a, b, c_, alpha, beta)

#define CBLAS_GEMV(name, T, DT)                                                              \
  INTERPOSE_JIT(name,                                                                        \
            (int order, int tr, blasint m, blasint n, T alpha, const T *a, blasint lda,      \
             const T *x, blasint incx, T beta, T *y, blasint incy),                          \
            (order, tr, m, n, alpha, a, lda, x, incx, beta, y, incy),                        \
            BLAS_KEY(AG_OP_GEMV, DT, AG_API_CBLAS, ORDER(order), cblas_trans(tr), 0,         \
                     classes(alpha, beta), m, n, 0, lda, incx, incy),                        \
            a, x, y, alpha, beta)

#define CBLAS_AXPY(name, T, DT)                                                              \
  INTERPOSE_JIT(name, (blasint n, T alpha, const T *x, blasint incx, T *y, blasint incy),    \
            (n, alpha, x, incx, y, incy),                                                    \
            BLAS_KEY(AG_OP_AXPY, DT, AG_API_CBLAS, AG_COL, 0, 0, classes(alpha, 1.0), n, 0,  \
                     0, incx, incy, 0),                                                      \
            x, (const T[]){1}, y, alpha, 1.0)

#define CBLAS_DOT(name, T, DT)                                                               \
  INTERPOSE_DOT(T, name, (blasint n, const T *x, blasint incx, const T *y, blasint incy),    \
            (n, x, incx, y, incy),                                                           \
            BLAS_KEY(AG_OP_DOT, DT, AG_API_CBLAS, AG_COL, 0, 0, NO_SCALARS, n, 0, 0, incx,   \
                     incy, 0),                                                               \
            x, y)

CBLAS_GEMM(cblas_sgemm, float, AG_F32)
CBLAS_GEMM(cblas_dgemm, double, AG_F64)
CBLAS_GEMV(cblas_sgemv, float, AG_F32)
CBLAS_GEMV(cblas_dgemv, double, AG_F64)
CBLAS_AXPY(cblas_saxpy, float, AG_F32)
CBLAS_AXPY(cblas_daxpy, double, AG_F64)
CBLAS_DOT(cblas_sdot, float, AG_F32)
CBLAS_DOT(cblas_ddot, double, AG_F64)
