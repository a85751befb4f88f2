/* SPDX-License-Identifier: MIT */
/* The kernel kinds' table (jit.h, jt_kinds): one row per kind of kernel the generator builds.
 * Linked into the agent (which asks supported and writes before it loads LLVM) and into
 * libopjit-jit.so (which resolves, names and emits through the same rows). */
#include "jit.h"

#include <stdio.h>

/* The generator's functions (gemm.h, syrk.h, fa.h), referred to weakly: NULL outside
 * libopjit-jit.so (jit.h says why); declared with LLVM's handles spelled as their opaque
 * structs, so that this file needs no LLVM header. */
typedef struct LLVMOpaqueValue *emit_fn(struct LLVMOpaqueContext *, struct LLVMOpaqueModule *,
                                        const jt_gemm_t *);
#define WEAK __attribute__((weak, visibility("hidden")))
WEAK emit_fn jt_gemm_emit, jt_dot_emit, jt_add_rms_mul_emit, jt_mm_emit, jt_syrk_emit, jt_fa_emit;
WEAK int jt_gemm_resolve(const jt_gemm_t *s, int host_isa, jt_gemm_t *r, char *err, size_t len);
WEAK int jt_syrk_resolve(const jt_gemm_t *s, int host_isa, jt_gemm_t *r, char *err, size_t len);
WEAK void jt_gemm_name(const jt_gemm_t *s, char *buf, size_t len);
WEAK void jt_syrk_name(const jt_gemm_t *s, char *buf, size_t len);
WEAK int jt_fa_resolve(const jt_gemm_t *s, int host_isa, jt_gemm_t *r, char *err, size_t len);
WEAK void jt_fa_name(const jt_gemm_t *s, char *buf, size_t len);

static int gemm_supported(const jt_gemm_t *g)
{
  return g->m >= 1 && g->n >= 1 && g->k >= 1 && g->m <= JT_GEMM_MAX_DIM &&
         g->n <= JT_GEMM_MAX_DIM &&
         g->k <= (g->ta && !jt_gemm_dots(g) ? JT_GEMM_MAX_K_PACKED : JT_GEMM_MAX_K) &&
         g->lda >= (g->ta ? g->k : g->m) && g->ldb >= (g->tb ? g->n : g->k) && g->ldc >= g->m;
}

/* A dot product of k, or a norm over rows of k. */
static int k_supported(const jt_gemm_t *g) { return g->k >= 1 && g->k <= (1 << 20); }

static int mm_supported(const jt_gemm_t *g)
{
  return g->m >= JT_MM_MR && g->m % JT_MM_MR == 0 && (g->n == 1 || g->n >= JT_MM_MIN_N) &&
         g->k >= 1 && g->m <= (1 << 24) && g->n <= (1 << 16) && g->k <= (1 << 20);
}

/* A SYRK is computed by GEMM kernels on its triangle's tiles (syrk.c): what they compile, n up
 * to JT_SYRK_MAX_N (its tiles are straight code, their number grows with n^2). */
static int syrk_supported(const jt_gemm_t *g)
{
  return (g->syrk == 1 || g->syrk == 2) && g->m == g->n && g->tb == !g->ta && g->ldb == g->lda &&
         g->n > 1 && g->n <= JT_SYRK_MAX_N && gemm_supported(g);
}

/* A head's attention: an even DK and a DV of whole 512-bit vectors, both at most JT_FA_MAX_D
 * (fa.c's blocking), any query rows; in f16 steps (fa 2), a DK of whole steps of ggml's
 * AVX-512 dot (64). */
static int fa_supported(const jt_gemm_t *g)
{
  return (g->fa == 1 || (g->fa == 2 && g->k % 64 == 0)) && g->k >= 2 && g->k % 2 == 0 &&
         g->k <= JT_FA_MAX_D && g->m >= 16 && g->m % 16 == 0 && g->m <= JT_FA_MAX_D && g->n >= 1 &&
         g->n <= (1 << 20);
}

static int syrk_writes(const jt_gemm_t *g, long i, long j)
{
  return g->syrk == 1 ? i <= j : i >= j;
}

const jt_kind_t jt_kinds[JT_KINDS] = {
    [JT_KIND_GEMM] = {.name = "gemm",
                      .abi = JT_ABI_GEMM,
                      .tunes = 1,
                      .guards = 1,
                      .supported = gemm_supported,
                      .resolve = jt_gemm_resolve,
                      .symbol = jt_gemm_name,
                      .emit = jt_gemm_emit},
    [JT_KIND_DOT] = {.name = "dot",
                     .abi = JT_ABI_GEMM,
                     .tunes = 1,
                     .supported = k_supported,
                     .resolve = jt_gemm_resolve,
                     .symbol = jt_gemm_name,
                     .emit = jt_dot_emit},
    [JT_KIND_ADD_RMS_MUL] = {.name = "add_rms_mul",
                             .abi = JT_ABI_ADD_RMS_MUL,
                             .supported = k_supported,
                             .resolve = jt_gemm_resolve,
                             .symbol = jt_gemm_name,
                             .emit = jt_add_rms_mul_emit},
    [JT_KIND_MM] = {.name = "mm",
                    .abi = JT_ABI_MM,
                    .tunes = 1,
                    .supported = mm_supported,
                    .resolve = jt_gemm_resolve,
                    .symbol = jt_gemm_name,
                    .emit = jt_mm_emit},
    [JT_KIND_MM_ADD] = {.name = "mm",
                        .abi = JT_ABI_MM_ADD,
                        .tunes = 1,
                        .supported = mm_supported,
                        .resolve = jt_gemm_resolve,
                        .symbol = jt_gemm_name,
                        .emit = jt_mm_emit},
    [JT_KIND_SYRK] = {.name = "syrk",
                      .abi = JT_ABI_GEMM,
                      .guards = 1,
                      .supported = syrk_supported,
                      .writes = syrk_writes,
                      .resolve = jt_syrk_resolve,
                      .symbol = jt_syrk_name,
                      .emit = jt_syrk_emit},
    [JT_KIND_FA] = {.name = "fa",
                    .abi = JT_ABI_FA,
                    .supported = fa_supported,
                    .resolve = jt_fa_resolve,
                    .symbol = jt_fa_name,
                    .emit = jt_fa_emit},
};
