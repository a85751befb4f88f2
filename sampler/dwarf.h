/* SPDX-License-Identifier: MIT */
/* Bounded readers of DWARF's encodings (call-frame information): a cursor over [p, end) that
 * never reads past end and sets bad instead. Async-signal-safe (no locks, no allocation, no
 * errno): the sampler's stack walker reads CFI with them inside its signal handler, and the
 * JIT's object loader when it rewrites a kernel's rules. */
#ifndef OPJIT_SAMPLER_DWARF_H
#define OPJIT_SAMPLER_DWARF_H

#include <stdint.h>
#include <string.h>

typedef struct rd_s {
  const uint8_t *p, *end;
  int bad;
} rd_t;

static inline uint8_t u8(rd_t *r)
{
  if (r->p >= r->end) {
    r->bad = 1;
    return 0;
  }
  return *r->p++;
}

static inline uint64_t uleb(rd_t *r)
{
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t b = u8(r);
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      return v;
  }
  r->bad = 1;
  return 0;
}

static inline int64_t sleb(rd_t *r)
{
  int64_t v = 0;
  int shift = 0;
  uint8_t b;
  do {
    b = u8(r);
    v |= (int64_t)(b & 0x7f) << shift;
    shift += 7;
  } while ((b & 0x80) && shift < 64);
  if (shift < 64 && (b & 0x40))
    v |= -((int64_t)1 << shift);
  return v;
}

static inline uint64_t fixed(rd_t *r, int bytes)
{
  if (r->end - r->p < bytes) {
    r->bad = 1;
    return 0;
  }
  uint64_t v = 0;
  memcpy(&v, r->p, (size_t)bytes);
  r->p += bytes;
  return v;
}

#endif
