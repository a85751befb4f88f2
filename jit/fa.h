/* SPDX-License-Identifier: MIT */
/* The FLASH_ATTN_EXT kernel generator (IR only; jit/session.c compiles it through its kind's
 * row), and the problem its kernels are asked for. LLVM's handles are spelled as their opaque
 * structs (as jit/kind.c's), so that the agent and the benches include this without LLVM. */
#ifndef OPJIT_JIT_FA_H
#define OPJIT_JIT_FA_H

#include "jit.h"

/* The attention problem (jt_gemm_t's fa): fa 1, ggml's f32 tiled path for a prompt's n query
 * rows, or 2, its f16 steps for fewer rows (n 1: one kernel takes any rows and any K/V
 * grouping); DK dk, DV dv; isa JT_ISA_* (0: the host's widest). */
static inline jt_gemm_t jt_fa_spec(int fa, int dk, int dv, int n, int isa)
{
  return (jt_gemm_t){.fa = fa, .k = dk, .m = dv, .n = fa == 2 ? 1 : n, .isa = isa};
}

/* s->fa set (jt_gemm_t): s with its ISA and vector width decided for a host whose widest is
 * host_isa, its blocking fixed (mr_vecs the vectors of a key tile, nr the query rows of a
 * block; fa 2: the heads of the biggest blocks of heads, V / 2: fa.c says why); 0,
 * or -1 with a sentence in err when the ISA is not the host's. */
int jt_fa_resolve(const jt_gemm_t *s, int host_isa, jt_gemm_t *r, char *err, size_t len);

/* The kernel's symbol, unique per resolved s: "opjit_flash_attn_dk64_dv64_n512_avx512_v512",
 * "opjit_flash_attn16_dk128_dv128_avx512_v512" (fa 2: no rows). */
void jt_fa_name(const jt_gemm_t *s, char *buf, size_t len);

/* Adds the kernel for resolved s (jt_fa_fn) and its end marker to mod; returns the kernel. */
struct LLVMOpaqueValue *jt_fa_emit(struct LLVMOpaqueContext *cx, struct LLVMOpaqueModule *mod,
                                   const jt_gemm_t *s);

#endif
