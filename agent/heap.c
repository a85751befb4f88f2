/* SPDX-License-Identifier: MIT */
/* The warm start's and the compile threads' heaps made present in bulk, and scratch operands on
 * huge pages (heap.h). */
#include "heap.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels refuse it: the blocks stay as they are */
#endif

size_t ag_heap_warm_size(const char *dbpath)
{
  char wal[PATH_MAX + 8];
  struct stat db, w;
  if (stat(dbpath, &db) != 0)
    return 0;
  snprintf(wal, sizeof wal, "%s-wal", dbpath);
  return 2 * ((size_t)db.st_size + (stat(wal, &w) == 0 ? (size_t)w.st_size : 0));
}

void *ag_heap_present(size_t bytes)
{
  /* each block holds the one before it: all stay allocated until the last, so that none is
   * carved from a freed one, then all but the last are freed */
  void *last = NULL;
  for (size_t got = 0; got < bytes / AG_HEAP_BLOCK; got++) {
    void *b = malloc(AG_HEAP_BLOCK);
    if (!b)
      break;
    uintptr_t lo = ((uintptr_t)b + 4095) & ~(uintptr_t)4095;
    uintptr_t hi = ((uintptr_t)b + AG_HEAP_BLOCK) & ~(uintptr_t)4095;
    madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
    *(void **)b = last;
    last = b;
  }
  for (void *b = last ? *(void **)last : NULL, *prev; b; b = prev) {
    prev = *(void **)b;
    free(b);
  }
  return last;
}

void *ag_heap_warm_begin(size_t bytes)
{
  return ag_heap_present(bytes < AG_HEAP_MAX ? bytes : AG_HEAP_MAX);
}

void ag_heap_warm_end(void *kept) { free(kept); }

/* The bytes a scratch mapping of bytes takes: whole 2 MB pages (its last one can be huge too,
 * and its tail is trimmed at a page boundary); 0 below AG_HEAP_SCRATCH_HUGE, and under
 * AddressSanitizer, whose malloc guards the operands' ends. */
static size_t scratch_span(size_t bytes)
{
#ifdef __SANITIZE_ADDRESS__
  (void)bytes;
  return 0;
#else
  size_t al = AG_HEAP_SCRATCH_HUGE;
  return bytes < al ? 0 : (bytes + al - 1) & ~(al - 1);
#endif
}

void *ag_heap_scratch(size_t bytes)
{
  size_t sz = scratch_span(bytes), al = AG_HEAP_SCRATCH_HUGE;
  if (!sz)
    return malloc(bytes ? bytes : 1);
  char *p = mmap(NULL, sz + al, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  char *q = (char *)(((uintptr_t)p + al - 1) & ~(uintptr_t)(al - 1));
  if (q > p) /* the mapping's head, and its tail (never empty: q < p + al), go back at once */
    munmap(p, (size_t)(q - p));
  munmap(q + sz, (size_t)(p + al - q));
  madvise(q, sz, MADV_HUGEPAGE); /* refused (no THP): 4 KB pages, as malloc's */
  return q;
}

void ag_heap_scratch_free(void *p, size_t bytes)
{
  size_t sz = scratch_span(bytes);
  if (!sz)
    free(p);
  else if (p)
    munmap(p, sz);
}
