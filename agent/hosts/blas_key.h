/* SPDX-License-Identifier: MIT */
/* The BLAS host's typed problems: each operator family with its own fields, and where each
 * field lives in the persisted 32-byte key (sig.h). The encoders are the only code that lays a
 * BLAS key out, and the decoders give a key's fields back by their names; the layouts below
 * are those every database has stored since each family was added (tests/agent/test_problem.c
 * pins their bytes and hashes), so they never change: a new family gets a new op and a layout
 * of its own.
 *
 *   key field   op  order  ta      tb      ab   m  n  k  lda   ldb   ldc
 *   GEMM        1   order  transa  transb  α|β  m  n  k  lda   ldb   ldc
 *   GEMV        2   order  trans   0       α|β  m  n  0  lda   incx  incy
 *   AXPY, DOT   3/4 col    0       0       α|β  n  0  0  incx  incy  0
 *   SYRK        5   order  trans   uplo    α|β  n  n  k  lda   0     ldc
 * (every family: host AG_HOST_ID_BLAS, dtype its enum ag_dtype, api its enum ag_api)
 *
 * Everything here is inline: the interposed symbols build a key on every call. */
#ifndef OPJIT_AGENT_HOSTS_BLAS_KEY_H
#define OPJIT_AGENT_HOSTS_BLAS_KEY_H

#include "../sig.h"

#include <string.h>

/* The BLAS host's id: its keys' first byte (persisted; host.h). */
enum { AG_HOST_ID_BLAS = 1 };
enum ag_op { AG_OP_GEMM = 1, AG_OP_GEMV, AG_OP_AXPY, AG_OP_DOT, AG_OP_SYRK };
enum ag_dtype { AG_F32 = 1, AG_F64 };
enum ag_api { AG_API_F77 = 1, AG_API_CBLAS };
enum ag_order { AG_COL = 0, AG_ROW = 1, AG_ORDER_BAD = 2 };
enum ag_trans { AG_N = 0, AG_T = 1, AG_C = 2, AG_TRANS_BAD = 3 };
enum ag_scalar { AG_S_ONE = 0, AG_S_ZERO, AG_S_MINUS_ONE, AG_S_OTHER, AG_S_NONE };

/* The class of a scalar value, by its bits: four integer compares (1, +-0 and -1 are exact
 * bit patterns; every NaN and every other value is OTHER, as the floating compares said). */
static inline uint8_t ag_scalar_class_b64(uint64_t b)
{
  return b == 0x3ff0000000000000ull   ? AG_S_ONE
         : (b << 1) == 0              ? AG_S_ZERO
         : b == 0xbff0000000000000ull ? AG_S_MINUS_ONE
                                      : AG_S_OTHER;
}
static inline uint8_t ag_scalar_class(double v)
{
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  return ag_scalar_class_b64(b);
}

/* The same classes of a float, by its own bits: converting it to double first costs the key two
 * conversions on the path to the lookup, and gives the same class (a float is 1, +-0 or -1
 * exactly when its double is; a denormal is OTHER either way, unless the thread flushes
 * denormal inputs to zero, DAZ, when the conversion said ZERO: OTHER is a class every kernel
 * computes exactly). */
static inline uint8_t ag_scalar_class_b32(uint32_t b)
{
  return b == 0x3f800000u   ? AG_S_ONE
         : (b << 1) == 0    ? AG_S_ZERO
         : b == 0xbf800000u ? AG_S_MINUS_ONE
                            : AG_S_OTHER;
}
static inline uint8_t ag_scalar_class_f(float v)
{
  uint32_t b;
  memcpy(&b, &v, sizeof b);
  return ag_scalar_class_b32(b);
}

/* The class of the scalar a Fortran argument points to, read as an integer (no vector load). */
static inline uint8_t ag_scalar_class_at_f(const float *p)
{
  uint32_t b;
  memcpy(&b, p, sizeof b);
  return ag_scalar_class_b32(b);
}
static inline uint8_t ag_scalar_class_at_d(const double *p)
{
  uint64_t b;
  memcpy(&b, p, sizeof b);
  return ag_scalar_class_b64(b);
}

/* Fortran transpose character to enum ag_trans, by table (a switch costs a dozen branches on
 * every gemm call); entries hold the value XOR AG_TRANS_BAD, so the table's zeros read BAD. */
static inline uint8_t ag_trans_char(char c)
{
#define AG_TR_(v) (uint8_t)((v) ^ AG_TRANS_BAD)
  static const uint8_t tab[256] = {
      ['N'] = AG_TR_(AG_N), ['n'] = AG_TR_(AG_N), ['T'] = AG_TR_(AG_T),
      ['t'] = AG_TR_(AG_T), ['C'] = AG_TR_(AG_C), ['c'] = AG_TR_(AG_C),
  };
#undef AG_TR_
  return (uint8_t)(tab[(unsigned char)c] ^ AG_TRANS_BAD);
}

enum ag_uplo { AG_UPPER = 0, AG_LOWER = 1, AG_UPLO_BAD = 2 };

/* Fortran uplo character to enum ag_uplo. */
static inline uint8_t ag_uplo_char(char c)
{
  return c == 'U' || c == 'u' ? AG_UPPER : c == 'L' || c == 'l' ? AG_LOWER : AG_UPLO_BAD;
}

/* C = alpha op(A) op(B) + beta C: ?gemm. */
typedef struct ag_blas_gemm_s {
  uint8_t dtype, api, order; /* enum ag_dtype, ag_api, ag_order */
  uint8_t ta, tb;            /* enum ag_trans */
  uint8_t alpha, beta;       /* enum ag_scalar: their classes */
  int32_t m, n, k, lda, ldb, ldc;
} ag_blas_gemm_t;

/* y = alpha op(A) x + beta y: ?gemv. */
typedef struct ag_blas_gemv_s {
  uint8_t dtype, api, order, trans, alpha, beta;
  int32_t m, n, lda, incx, incy;
} ag_blas_gemv_t;

/* y = alpha x + y (?axpy, op AG_OP_AXPY: beta is AG_S_ONE) or x . y (?dot, AG_OP_DOT: both
 * scalars AG_S_NONE). */
typedef struct ag_blas_vec_s {
  uint8_t op, dtype, api, alpha, beta;
  int32_t n, incx, incy;
} ag_blas_vec_t;

/* C = alpha op(A) op(A)^T + beta C on C's uplo triangle, C n x n, op(A) n x k: ?syrk. */
typedef struct ag_blas_syrk_s {
  uint8_t dtype, api, order, uplo, trans, alpha, beta; /* uplo: enum ag_uplo */
  int32_t n, k, lda, ldc;
} ag_blas_syrk_t;

static inline uint8_t ag_blas_ab(uint8_t alpha, uint8_t beta)
{
  return (uint8_t)(alpha | beta << 4);
}

static inline ag_sig_t ag_blas_gemm_key(const ag_blas_gemm_t *p)
{
  return ag_sig_make(AG_HOST_ID_BLAS, AG_OP_GEMM, p->dtype, p->api, p->order, p->ta, p->tb,
                     ag_blas_ab(p->alpha, p->beta), p->m, p->n, p->k, p->lda, p->ldb, p->ldc);
}

static inline ag_sig_t ag_blas_gemv_key(const ag_blas_gemv_t *p)
{
  return ag_sig_make(AG_HOST_ID_BLAS, AG_OP_GEMV, p->dtype, p->api, p->order, p->trans, 0,
                     ag_blas_ab(p->alpha, p->beta), p->m, p->n, 0, p->lda, p->incx, p->incy);
}

static inline ag_sig_t ag_blas_vec_key(const ag_blas_vec_t *p)
{
  return ag_sig_make(AG_HOST_ID_BLAS, p->op, p->dtype, p->api, AG_COL, 0, 0,
                     ag_blas_ab(p->alpha, p->beta), p->n, 0, 0, p->incx, p->incy, 0);
}

static inline ag_sig_t ag_blas_syrk_key(const ag_blas_syrk_t *p)
{
  return ag_sig_make(AG_HOST_ID_BLAS, AG_OP_SYRK, p->dtype, p->api, p->order, p->trans, p->uplo,
                     ag_blas_ab(p->alpha, p->beta), p->n, p->n, p->k, p->lda, 0, p->ldc);
}

/* The decoders: k's fields by its family (k->op). */
static inline ag_blas_gemm_t ag_blas_gemm_of(const ag_sig_t *k)
{
  return (ag_blas_gemm_t){k->dtype, k->api, k->order, k->ta,  k->tb,  k->ab & 15, k->ab >> 4,
                          k->m,     k->n,   k->k,     k->lda, k->ldb, k->ldc};
}

static inline ag_blas_gemv_t ag_blas_gemv_of(const ag_sig_t *k)
{
  return (ag_blas_gemv_t){k->dtype, k->api, k->order, k->ta,  k->ab & 15, k->ab >> 4,
                          k->m,     k->n,   k->lda,   k->ldb, k->ldc};
}

static inline ag_blas_vec_t ag_blas_vec_of(const ag_sig_t *k)
{
  return (ag_blas_vec_t){k->op, k->dtype, k->api, k->ab & 15, k->ab >> 4, k->m, k->lda, k->ldb};
}

static inline ag_blas_syrk_t ag_blas_syrk_of(const ag_sig_t *k)
{
  return (ag_blas_syrk_t){k->dtype,   k->api, k->order, k->tb,  k->ta, k->ab & 15,
                          k->ab >> 4, k->m,   k->k,     k->lda, k->ldc};
}

#endif
