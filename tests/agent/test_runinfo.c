/* SPDX-License-Identifier: MIT */
/* Program and machine identity: every field is a terminated string whatever the struct held
 * before, and reading it writes only the pages its strings need (the warm start's path reads it
 * before any stored kernel serves: each page the struct spans is a fault there). */
#include "agent/runinfo.h"

#include <criterion/criterion.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A fresh anonymous mapping for the struct: none of its pages is resident until written. */
static ag_runinfo_t *fresh(size_t *len)
{
  *len = (sizeof(ag_runinfo_t) + 4095) & ~(size_t)4095;
  void *p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(p, MAP_FAILED);
  return p;
}

Test(runinfo, every_field_is_read_whatever_the_struct_held)
{
  static ag_runinfo_t zeroed, dirty;
  memset(&dirty, 0x5a, sizeof dirty);
  ag_runinfo_read(&zeroed);
  ag_runinfo_read(&dirty);
  cr_assert_str_eq(dirty.exe, zeroed.exe);
  cr_assert(strstr(dirty.exe, "test_runinfo"), "the executable: %s", dirty.exe);
  cr_assert_str_eq(dirty.build_id, zeroed.build_id);
  cr_assert_str_eq(dirty.script, "", "not an interpreter");
  cr_assert_str_eq(dirty.cpu_key, zeroed.cpu_key);
  cr_assert_str_eq(dirty.cpu_model, zeroed.cpu_model);
  cr_assert_str_eq(dirty.cpu_flags, zeroed.cpu_flags);
  cr_assert_eq(dirty.cmdline_len, zeroed.cmdline_len);
  cr_assert_gt(dirty.cmdline_len, 0);
  cr_assert_eq(memcmp(dirty.cmdline, zeroed.cmdline, dirty.cmdline_len), 0);
  cr_assert_eq(dirty.ncpu, zeroed.ncpu);
}

Test(runinfo, reading_writes_the_pages_its_strings_need_not_the_whole_struct)
{
  size_t len;
  ag_runinfo_t *ri = fresh(&len);
  ag_runinfo_read(ri);
  size_t pages = len / 4096, resident = 0;
  unsigned char vec[64];
  cr_assert_leq(pages, sizeof vec);
  cr_assert_eq(mincore(ri, len, vec), 0);
  for (size_t i = 0; i < pages; i++)
    resident += vec[i] & 1;
  /* Each string's first page and what it fills (exe, build-id and script share the first two,
   * the CPU's key, argv's first page, the model name and flags the last two): under half. */
  cr_assert_lt(resident, pages / 2, "%zu of the struct's %zu pages written", resident, pages);
  cr_assert_str_neq(ri->cpu_key, "");
  munmap(ri, len);
}
