/* SPDX-License-Identifier: MIT */
/* The code map: ranges found by PC, shared kernels registered once, slots reused so a process
 * that keeps compiling and evicting never runs out, and lock-free readers that never see a
 * slot half-written. Addresses are plain numbers here: the map never touches the code. */
#include "agent/codemap.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define BASE 0x100000000ull

static void name_of(uint64_t lo, char *buf, size_t len) { snprintf(buf, len, "k_%llx", (unsigned long long)lo); }

static void add(uint64_t lo, size_t size)
{
  char name[32];
  name_of(lo, name, sizeof name);
  cr_assert_eq(ag_code_add((void *)(uintptr_t)lo, size, name, NULL, NULL), 0, "%s", name);
}

Test(codemap, finds_kernels_by_pc_and_registers_a_shared_kernel_once)
{
  size_t before = ag_code_live();
  uint64_t gen = ag_code_generation();
  add(BASE + 0x1000, 0x100);
  cr_assert_neq(ag_code_generation(), gen, "a registration changes the generation");
  add(BASE + 0x2000, 0x80);
  gen = ag_code_generation();
  cr_assert_eq(ag_code_add((void *)(uintptr_t)(BASE + 0x1000), 0x100, "other", NULL, NULL), 1);
  cr_assert_eq(ag_code_generation(), gen, "a kernel registered already changes nothing");
  uint64_t lo, hi;
  const char *name;
  cr_assert_eq(ag_code_at(BASE + 0x10ff, &lo, &hi, &name), 1);
  cr_assert_eq(lo, BASE + 0x1000);
  cr_assert_eq(hi, BASE + 0x1100);
  char want[32];
  name_of(BASE + 0x1000, want, sizeof want);
  cr_assert_str_eq(name, want, "the first registration stands");
  cr_assert_eq(ag_code_at(BASE + 0x1100, &lo, &hi, &name), 0, "one past the end");
  cr_assert_eq(ag_code_at(BASE + 0x2040, &lo, &hi, &name), 1);
  cr_assert_eq(ag_code_live(), before + 2);
  ag_code_t k;
  cr_assert_eq(ag_code_find((void *)(uintptr_t)(BASE + 0x2000), &k), 0);
  cr_assert_eq(k.hi - k.lo, 0x80);
  cr_assert_null(k.loaded.map);
  cr_assert_eq(ag_code_remove((void *)(uintptr_t)(BASE + 0x1000)), 0);
  cr_assert_neq(ag_code_generation(), gen, "a removal changes the generation");
  gen = ag_code_generation();
  cr_assert_eq(ag_code_remove((void *)(uintptr_t)(BASE + 0x1000)), -1, "removed already");
  cr_assert_eq(ag_code_generation(), gen);
  cr_assert_eq(ag_code_at(BASE + 0x1010, &lo, &hi, &name), 0, "no PC is in removed code");
  name_of(BASE + 0x2000, want, sizeof want);
  cr_assert_str_eq(name, want, "a name handed out stays valid");
  cr_assert_eq(ag_code_remove((void *)(uintptr_t)(BASE + 0x2000)), 0);
  cr_assert_eq(ag_code_live(), before);
}

/* What tier.c's append-only table of 4096 failed at: after 4096 registrations every new kernel
 * was dropped. 10,000 kernels registered and evicted, 64 live at a time, all found. */
Test(codemap, ten_thousand_kernels_registered_and_evicted_in_turn)
{
  size_t before = ag_code_live();
  for (uint64_t i = 0; i < 10000; i++) {
    uint64_t lo = BASE + 0x10000000 + i * 0x1000;
    add(lo, 0x200);
    uint64_t l, h;
    const char *name;
    char want[32];
    name_of(lo, want, sizeof want);
    cr_assert_eq(ag_code_at(lo + 0x1ff, &l, &h, &name), 1, "kernel %llu found", (unsigned long long)i);
    cr_assert_str_eq(name, want);
    if (i >= 64)
      cr_assert_eq(ag_code_remove((void *)(uintptr_t)(lo - 64 * 0x1000)), 0);
  }
  cr_assert_eq(ag_code_live(), before + 64);
  for (uint64_t i = 10000 - 64; i < 10000; i++)
    cr_assert_eq(ag_code_remove((void *)(uintptr_t)(BASE + 0x10000000 + i * 0x1000)), 0);
  cr_assert_eq(ag_code_live(), before);
}

/* A reader scanning while a writer adds and removes: every hit is one whole registration (its
 * name names its start, its end is start + 0x100), never a mix of two. */
static _Atomic int stop;

static void *writer(void *arg)
{
  (void)arg;
  for (uint64_t i = 0; !atomic_load(&stop); i++) {
    uint64_t lo = BASE + 0x40000000 + (i % 8) * 0x100;
    char name[32];
    name_of(lo, name, sizeof name);
    ag_code_add((void *)(uintptr_t)lo, 0x100, name, NULL, NULL);
    ag_code_remove((void *)(uintptr_t)(BASE + 0x40000000 + ((i + 4) % 8) * 0x100));
  }
  return NULL;
}

Test(codemap, readers_never_see_a_slot_half_written)
{
  pthread_t w;
  pthread_create(&w, NULL, writer, NULL);
  long hits = 0;
  for (long round = 0; hits < 100000 && round < 200000000; round++) {
    uint64_t pc = BASE + 0x40000000 + (uint64_t)(round % 8) * 0x100 + 0x80, lo, hi;
    const char *name;
    if (!ag_code_at(pc, &lo, &hi, &name))
      continue;
    hits++;
    char want[32];
    name_of(lo, want, sizeof want);
    cr_assert_eq(hi, lo + 0x100);
    cr_assert(pc >= lo && pc < hi);
    cr_assert_str_eq(name, want);
  }
  atomic_store(&stop, 1);
  pthread_join(w, NULL);
  cr_assert_gt(hits, 0, "the reader saw registrations");
}
