/* SPDX-License-Identifier: MIT */
/* Operator signatures: every intercepted call reduced to a fixed-size key. The exact key
 * compare is the guard; the hash only finds the slot. The layout is persisted (the key is
 * stored in the database and its hash is the signature's id), so fields are only appended.
 * What the fields after host hold is the host's: each host's key header (hosts/<host>_key.h)
 * lays its typed problems out in them. */
#ifndef OPJIT_AGENT_SIG_H
#define OPJIT_AGENT_SIG_H

#include <stddef.h>
#include <stdint.h>

/* 32 bytes, no implicit padding: keys are compared and hashed as bytes. */
typedef struct ag_sig_s {
  uint8_t host; /* the host's id (host.h, ag_host_t.id) */
  uint8_t op, dtype, api, order, ta, tb, ab;
  int32_t m, n, k, lda, ldb, ldc;
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
  /* The ints zero-extended in registers first: left to itself, GCC composed a word from an int
   * it had spilled in 32 bits and reloaded in 64 (the shift discards the upper half), a
   * store-forwarding stall on every call of a wrapper whose ints come by value. A constant (a
   * family's unused 0) stays a constant. */
#define AG_SIG_REG_(v)                                                                         \
  do {                                                                                         \
    if (!__builtin_constant_p(v))                                                              \
      __asm__("" : "+r"(v));                                                                   \
  } while (0)
  uint64_t x0 = (uint32_t)m, x1 = (uint32_t)n, x2 = (uint32_t)k, x3 = (uint32_t)lda,
           x4 = (uint32_t)ldb, x5 = (uint32_t)ldc;
  AG_SIG_REG_(x0);
  AG_SIG_REG_(x1);
  AG_SIG_REG_(x2);
  AG_SIG_REG_(x3);
  AG_SIG_REG_(x4);
  AG_SIG_REG_(x5);
#undef AG_SIG_REG_
  u.w[1] = x0 | x1 << 32;
  u.w[2] = x2 | x3 << 32;
  u.w[3] = x4 | x5 << 32;
  return u.s;
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

/* Naming, by the key's host's row (host.h); a key of no known host is "host#N ...". */

/* The operator's name as its host's users spell it (the host row's opname). */
const char *ag_sig_opname(const ag_sig_t *s, char *buf, size_t len);

/* Human form: the operator's name and its key's fields (the host row's format). */
void ag_sig_format(const ag_sig_t *s, char *buf, size_t len);

/* The key's parameters as one JSON object. */
void ag_sig_params_json(const ag_sig_t *s, char *buf, size_t len);

#endif
