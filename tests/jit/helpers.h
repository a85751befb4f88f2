/* SPDX-License-Identifier: MIT */
/* What the JIT's tests share: the module, loaded and initialised, and a seeded generator. */
#ifndef OPJIT_TESTS_JIT_HELPERS_H
#define OPJIT_TESTS_JIT_HELPERS_H

#include "jit/jit.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdint.h>

/* libopjit-jit.so from this build, its session initialised (the test fails otherwise). */
static inline const jt_api_t *jt_test_module(void)
{
  void *h = dlopen(OPJIT_BUILD_DIR "/" JT_MODULE_NAME, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(h, "%s", dlerror());
  const jt_api_t *jit = dlsym(h, JT_API_SYMBOL);
  cr_assert_not_null(jit);
  char err[512] = "";
  cr_assert_eq(jit->init(err, sizeof err), 0, "%s", err);
  return jit;
}

/* 1 when this CPU can run code of the ISA (as the JIT's host_isa reads LLVM's features). */
static inline int jt_test_cpu_has(int isa)
{
  __builtin_cpu_init();
  int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == JT_ISA_AVX2)
    return avx2;
  return isa == JT_ISA_AVX512 && avx2 && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq");
}

/* Skips the test when the CPU cannot run isa's code. */
#define JT_TEST_NEEDS(isa)                                                                   \
  do {                                                                                       \
    if (!jt_test_cpu_has(isa))                                                               \
      cr_skip_test("this CPU has no %s", (isa) == JT_ISA_AVX512 ? "AVX-512 (F, VL, BW, DQ)"   \
                                                               : "AVX2 with FMA");           \
  } while (0)

/* A number in [0, n) from the generator state *s (a 64-bit LCG: reproducible sweeps). */
static inline uint32_t jt_test_rnd(uint64_t *s, uint32_t n)
{
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 33) % n;
}

#endif
