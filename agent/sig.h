/* SPDX-License-Identifier: MIT */
/* Operator signatures: every intercepted call reduced to a fixed-size key. The exact key
 * compare is the guard; the hash only finds the slot. The layout is persisted (the key is
 * stored in the database and its hash is the signature's id), so fields are only appended. */
#ifndef OPJIT_AGENT_SIG_H
#define OPJIT_AGENT_SIG_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A ggml key (host AG_HOST_ID_GGML) is one graph node's work: op = the ggml op, dtype = its
 * first source's ggml type (its own when it has none), api = its own type, order = the second
 * source's type + 1 (0: none), ta = the op's sub-op for UNARY and GLU, m n = its ne[0] ne[1],
 * k = the first source's ne[0] (MUL_MAT's K), lda ldb = its ne[2] ne[3]; ab = 1 for a
 * MUL_MAT whose f16 weights lie in ggml's AMX buffer (it multiplies them with f32
 * activations, not rounded to f16 as its own MUL_MAT does), 0 otherwise. */
enum ag_host { AG_HOST_ID_BLAS = 1, AG_HOST_ID_GGML = 2 };
/* A ggml key whose op is AG_GGML_OP_FUSED is a group of nodes the agent runs as one: ta names
 * the pattern; ADD+RMS_NORM+MUL and RMS_NORM+MUL: m the row length; MUL_MAT+MUL_MAT+SWIGLU and
 * MUL_MAT+ADD: the products' key (dtype their weights', m n k their shape, ab theirs); SHARED-INPUT
 * MUL_MATS: the same with m their rows together, tb how many. */
enum { AG_GGML_OP_FUSED = 0xF0 };
enum ag_fusion { AG_FUSE_ADD_RMS_MUL = 1, AG_FUSE_MM_SWIGLU, AG_FUSE_SHARED_INPUT, AG_FUSE_MM_ADD,
                 AG_FUSE_RMS_MUL };
/* ggml's numbers, checked against its headers in hosts/ggml.c (whose op table is checked
 * against the running ggml's): known to the tiers before the ggml host has seen a graph. */
enum { AG_GGML_TYPE_F32 = 0, AG_GGML_TYPE_F16 = 1 };
enum { AG_GGML_OP_MUL_MAT = 29 };
enum ag_op { AG_OP_GEMM = 1, AG_OP_GEMV, AG_OP_AXPY, AG_OP_DOT, AG_OP_SYRK };
enum ag_dtype { AG_F32 = 1, AG_F64 };
enum ag_api { AG_API_F77 = 1, AG_API_CBLAS };
enum ag_order { AG_COL = 0, AG_ROW = 1, AG_ORDER_BAD = 2 };
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

/* Builds a key from its fields as four 64-bit words (little-endian x86-64: the same bytes as
 * assigning the fields). Word stores let the lookup's word loads forward from them; eight byte
 * stores read back as one word would stall the hot path on every call. */
static inline ag_sig_t ag_sig_make(uint8_t host, uint8_t op, uint8_t dtype, uint8_t api,
                                   uint8_t order, uint8_t ta, uint8_t tb, uint8_t ab, int32_t m,
                                   int32_t n, int32_t k, int32_t lda, int32_t ldb, int32_t ldc)
{
  union {
    ag_sig_t s;
    uint64_t w[4];
  } u;
  u.w[0] = (uint64_t)host | (uint64_t)op << 8 | (uint64_t)dtype << 16 | (uint64_t)api << 24 |
           (uint64_t)order << 32 | (uint64_t)ta << 40 | (uint64_t)tb << 48 | (uint64_t)ab << 56;
  u.w[1] = (uint32_t)m | (uint64_t)(uint32_t)n << 32;
  u.w[2] = (uint32_t)k | (uint64_t)(uint32_t)lda << 32;
  u.w[3] = (uint32_t)ldb | (uint64_t)(uint32_t)ldc << 32;
  return u.s;
}

/* The class of a scalar value, by its bits: four integer compares (1, +-0 and -1 are exact
 * bit patterns; every NaN and every other value is OTHER, as the floating compares said). */
static inline uint8_t ag_scalar_class(double v)
{
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  return b == 0x3ff0000000000000ull   ? AG_S_ONE
         : (b << 1) == 0              ? AG_S_ZERO
         : b == 0xbff0000000000000ull ? AG_S_MINUS_ONE
                                      : AG_S_OTHER;
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

/* The names of ggml's ops, types and sub-ops, as the running library spells them (the ggml
 * host sets them once it has checked the library; until then ggml keys are named by number).
 * Kept by the ggml host's naming (hosts/ggml_sig.c). */
typedef struct ag_ggml_names_s {
  const char *const *ops, *const *types, *const *unary, *const *glu;
  int nops, ntypes, nunary, nglu;
  int op_unary, op_glu, op_mul_mat; /* the ops whose keys carry a sub-op, and MUL_MAT */
} ag_ggml_names_t;
void ag_sig_set_ggml_names(const ag_ggml_names_t *names);
/* 1 when s is a ggml MUL_MAT node's key. */
static inline int ag_sig_ggml_mul_mat(const ag_sig_t *s)
{
  return s->host == AG_HOST_ID_GGML && s->op == AG_GGML_OP_MUL_MAT;
}

/* Naming, by the key's host's row (host.h); a key of no known host is "host#N ...". */

/* The operator's name as a BLAS user spells it: "sgemm", "cblas_ddot"; a ggml op's name:
 * "MUL_MAT". */
const char *ag_sig_opname(const ag_sig_t *s, char *buf, size_t len);

/* Human form, e.g. "sgemm NN 64x64x64 β=0", "cblas_dgemv row T 256x128 α=* β=0 incx=2". */
void ag_sig_format(const ag_sig_t *s, char *buf, size_t len);

/* The key's parameters as one JSON object. */
void ag_sig_params_json(const ag_sig_t *s, char *buf, size_t len);

#endif
