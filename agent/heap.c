/* SPDX-License-Identifier: MIT */
/* The warm start's heap made present in bulk (heap.h). */
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

void *ag_heap_warm_begin(size_t bytes)
{
  size_t n = (bytes < AG_HEAP_MAX ? bytes : AG_HEAP_MAX) / AG_HEAP_BLOCK;
  void *blk[AG_HEAP_MAX / AG_HEAP_BLOCK];
  size_t got = 0;
  for (; got < n && (blk[got] = malloc(AG_HEAP_BLOCK)); got++) {
    uintptr_t lo = ((uintptr_t)blk[got] + 4095) & ~(uintptr_t)4095;
    uintptr_t hi = ((uintptr_t)blk[got] + AG_HEAP_BLOCK) & ~(uintptr_t)4095;
    madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
  }
  for (size_t i = 0; i + 1 < got; i++)
    free(blk[i]);
  return got ? blk[got - 1] : NULL;
}

void ag_heap_warm_end(void *kept) { free(kept); }
