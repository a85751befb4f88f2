/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the persisted-kernel loader and its call-frame rewrite (jit/objload.h) on
 * hostile bytes, as the agent meets them when a stored object passed its checksum.
 * Input: the entry symbol's name, a NUL, then the object (fuzz/corpus/objload holds real ones
 * an LLJIT run stored). A placed function must lie inside its mapping, and rules that were
 * written must be one CIE and one FDE whose lengths add up to what was returned; the code is
 * never run. The object is copied to a buffer of its own, as the agent's is (a malloc'ed copy
 * of the stored blob): aligned, and ASan sees a read one byte past it. */
#include "jit/objload.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The rewrite into buffers of the agent's size (tier.c) and smaller: the length must fit cap
 * and the two records must cover it exactly. */
static void check_cfi(const uint8_t *obj, size_t len, const char *sym, uint64_t code, size_t cap)
{
  uint8_t out[512];
  char err[160];
  long n = jt_obj_cfi(obj, len, sym, code, out, cap, err, sizeof err);
  if (n < 0)
    return;
  if ((size_t)n > cap || n < 8)
    __builtin_trap();
  uint32_t cl, fl;
  memcpy(&cl, out, 4);
  if ((size_t)cl + 4 + 8 > (size_t)n)
    __builtin_trap();
  memcpy(&fl, out + cl + 4, 4);
  if ((size_t)cl + 4 + fl + 4 != (size_t)n)
    __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const uint8_t *nul = memchr(data, 0, size < 128 ? size : 128);
  if (!nul)
    return -1; /* not in the corpus: no symbol name */
  const char *sym = (const char *)data;
  size_t len = size - (size_t)(nul + 1 - data);
  uint8_t *obj = malloc(len ? len : 1);
  if (!obj)
    return 0;
  memcpy(obj, nul + 1, len);

  jt_loaded_t l;
  char err[160];
  uint64_t code = 0x7f0000001000ull;
  if (jt_obj_load(obj, len, sym, &l, err, sizeof err) == 0) {
    const char *m = l.map, *fn = l.fn;
    if (fn < m || l.size > l.map_len || (size_t)(fn - m) > l.map_len - l.size)
      __builtin_trap();
    code = (uint64_t)(uintptr_t)fn;
    jt_obj_unload(&l);
  }
  check_cfi(obj, len, sym, code, 512);
  check_cfi(obj, len, sym, code, 40);
  free(obj);
  return 0;
}
