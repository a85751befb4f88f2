/* SPDX-License-Identifier: MIT */
/* Operator signatures: every intercepted call reduced to a fixed-size key. The exact key
 * compare is the guard; the hash only finds the slot. The layout is persisted (the key is
 * stored in the database and its hash is the signature's id), so fields are only appended. */
#ifndef OPJIT_AGENT_SIG_H
#define OPJIT_AGENT_SIG_H

#include <stddef.h>
#include <stdint.h>

enum ag_host { AG_HOST_ID_BLAS = 1 };
enum ag_op { AG_OP_GEMM = 1, AG_OP_GEMV, AG_OP_AXPY, AG_OP_DOT };
enum ag_dtype { AG_F32 = 1, AG_F64 };
enum ag_api { AG_API_F77 = 1, AG_API_CBLAS };
enum ag_order { AG_COL = 0, AG_ROW = 1 };
enum ag_trans { AG_N = 0, AG_T = 1, AG_C = 2, AG_TRANS_BAD = 3 };
enum ag_scalar { AG_S_ONE = 0, AG_S_ZERO, AG_S_MINUS_ONE, AG_S_OTHER, AG_S_NONE };

/* 32 bytes, no implicit padding: keys are compared and hashed as bytes. */
typedef struct ag_sig_s {
  uint8_t host, op, dtype, api; /* enum ag_host, ag_op, ag_dtype, ag_api */
  uint8_t order, ta, tb;        /* enum ag_order; enum ag_trans of A and B (gemv: ta) */
  uint8_t ab;                   /* alpha class (low nibble), beta class (high), ag_scalar */
  int32_t m, n, k;              /* gemm: M N K; gemv: M N; axpy/dot: n */
  int32_t lda, ldb, ldc;        /* gemm: lda ldb ldc; gemv: lda incx incy; axpy/dot: incx incy */
} ag_sig_t;

_Static_assert(sizeof(ag_sig_t) == 32, "ag_sig_t must be 32 bytes without padding");

/* The class of a scalar value. */
static inline uint8_t ag_scalar_class(double v)
{
  return v == 1.0 ? AG_S_ONE : v == 0.0 ? AG_S_ZERO : v == -1.0 ? AG_S_MINUS_ONE : AG_S_OTHER;
}

/* Fortran transpose character to enum ag_trans. */
static inline uint8_t ag_trans_char(char c)
{
  switch (c) {
  case 'N': case 'n': return AG_N;
  case 'T': case 't': return AG_T;
  case 'C': case 'c': return AG_C;
  default: return AG_TRANS_BAD;
  }
}

/* The key's hash (stable across builds and machines: it is the persisted signature id). */
static inline uint64_t ag_sig_hash(const ag_sig_t *s)
{
  const uint64_t *w = (const uint64_t *)(const void *)s;
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 4; i++) {
    h ^= w[i];
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return h ^ (h >> 29);
}

/* The operator's name as a BLAS user spells it: "sgemm", "cblas_ddot". */
const char *ag_sig_opname(const ag_sig_t *s, char *buf, size_t len);

/* Human form, e.g. "sgemm NN 64x64x64 β=0", "cblas_dgemv row T 256x128 α=* β=0 incx=2". */
void ag_sig_format(const ag_sig_t *s, char *buf, size_t len);

/* The key's parameters as one JSON object. */
void ag_sig_params_json(const ag_sig_t *s, char *buf, size_t len);

#endif
