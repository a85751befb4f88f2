/* SPDX-License-Identifier: MIT */
/* The warm start's heap: after ag_heap_warm_begin, the thread's next allocations land on pages
 * already present (the warm start faults none in one by one), and its size follows the
 * database's bytes on disk. */
#define _GNU_SOURCE
#include "agent/heap.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define OWN_ALLOCATOR 1 /* the sanitizer's allocator: freed blocks are quarantined, not reused */
#else
#define OWN_ALLOCATOR 0
#endif

/* This thread's page faults so far. */
static long faults(void)
{
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

enum { SZ = 4400 }; /* SQLite's page cache: pages of 4 KB and their headers */

/* n allocations of SZ bytes written through on this thread: counts[0] the page faults that
 * took, counts[1] the pages they span. */
static void write_through(int n, long counts[2])
{
  static void *p[2 * AG_HEAP_MAX / SZ];
  cr_assert_leq(n, (int)(sizeof p / sizeof *p));
  long f0 = faults();
  for (int i = 0; i < n; i++)
    if ((p[i] = malloc(SZ)))
      memset(p[i], 1, SZ);
  counts[0] = faults() - f0;
  counts[1] = (long)n * SZ / 4096;
  for (int i = 0; i < n; i++)
    free(p[i]);
}

/* On a thread of its own (a heap of its own, as the writer's): what a warm start would allocate
 * after ag_heap_warm_begin. */
static void *allocate(void *arg)
{
  void *kept = ag_heap_warm_begin(AG_HEAP_MAX);
  write_through(128, arg);
  ag_heap_warm_end(kept);
  return NULL;
}

/* On a thread of its own, as a compile thread: AG_HEAP_JIT made present, then allocations of
 * twice the warm start's AG_HEAP_MAX. */
static void *allocate_jit(void *arg)
{
  void *kept = ag_heap_present(AG_HEAP_JIT);
  write_through(2 * AG_HEAP_MAX / SZ, arg);
  free(kept);
  return NULL;
}

/* Runs body on a thread of its own and checks that its writes faulted under 1 page in 10
 * (skips where the allocator or the kernel cannot make the heap present). */
static void faults_under_a_tenth(void *(*body)(void *))
{
  if (OWN_ALLOCATOR)
    cr_skip_test("a sanitizer's allocator does not reuse the freed blocks");
  void *probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  int populates = madvise(probe, 4096, 23 /* MADV_POPULATE_WRITE */) == 0;
  munmap(probe, 4096);
  if (!populates)
    cr_skip_test("this kernel has no MADV_POPULATE_WRITE (Linux 5.14): nothing is populated");
  long counts[2];
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, body, counts), 0);
  pthread_join(t, NULL);
  cr_assert_lt(counts[0] * 10, counts[1], "%ld faults writing %ld pages' worth", counts[0],
               counts[1]);
}

Test(heap, the_warm_starts_allocations_fault_no_page_in_one_by_one)
{
  faults_under_a_tenth(allocate);
}

Test(heap, a_compile_thread_s_heap_is_present_beyond_the_warm_start_s_share)
{
  faults_under_a_tenth(allocate_jit);
  cr_assert_null(ag_heap_present(AG_HEAP_BLOCK - 1), "less than a block");
}

Test(heap, nothing_is_kept_for_nothing)
{
  cr_assert_null(ag_heap_warm_begin(0));
  cr_assert_null(ag_heap_warm_begin(AG_HEAP_BLOCK - 1), "less than a block");
  ag_heap_warm_end(NULL);
}

Test(heap, the_size_is_twice_the_database_and_its_wal_and_0_without_one)
{
  char dir[] = "/tmp/opjit-heap-XXXXXX", db[64], wal[72];
  cr_assert_not_null(mkdtemp(dir));
  snprintf(db, sizeof db, "%s/p.db", dir);
  snprintf(wal, sizeof wal, "%s-wal", db);
  cr_assert_eq(ag_heap_warm_size(db), 0, "no database");
  FILE *f = fopen(db, "w");
  cr_assert_not_null(f);
  cr_assert_eq(ftruncate(fileno(f), 4096), 0);
  fclose(f);
  cr_assert_eq(ag_heap_warm_size(db), 8192);
  f = fopen(wal, "w");
  cr_assert_not_null(f);
  cr_assert_eq(ftruncate(fileno(f), 100000), 0);
  fclose(f);
  cr_assert_eq(ag_heap_warm_size(db), 2 * (4096 + 100000));
  unlink(wal);
  unlink(db);
  rmdir(dir);
}

Test(heap, scratch_from_2_mb_is_aligned_for_huge_pages_and_unmapped_when_freed)
{
  size_t bytes = (9u << 20) + 12345, span = 10u << 20; /* whole 2 MB pages */
  char *p = ag_heap_scratch(bytes);
  cr_assert_not_null(p);
  memset(p, 0x5a, bytes); /* every byte is the caller's */
  cr_expect_eq(p[bytes - 1], 0x5a);
#ifndef __SANITIZE_ADDRESS__ /* (there it is malloc's: heap.h) */
  unsigned char vec[(10u << 20) / 4096];
  cr_expect_eq((uintptr_t)p % AG_HEAP_SCRATCH_HUGE, 0, "%p", (void *)p);
  cr_assert_eq(mincore(p, span, vec), 0, "mapped");
  cr_expect_eq(mincore(p + span, 4096, vec), -1, "what the mapping took beyond it went back");
  ag_heap_scratch_free(p, bytes);
  cr_expect_eq(mincore(p, span, vec), -1, "unmapped, not kept");
#else
  (void)span;
  ag_heap_scratch_free(p, bytes);
#endif
  char *q = ag_heap_scratch(100); /* small: from malloc */
  cr_assert_not_null(q);
  memset(q, 1, 100);
  ag_heap_scratch_free(q, 100);
}
