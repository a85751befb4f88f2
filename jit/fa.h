/* SPDX-License-Identifier: MIT */
/* The FLASH_ATTN_EXT kernel generator (IR only; jit/session.c compiles it through its kind's
 * row). */
#ifndef OPJIT_JIT_FA_H
#define OPJIT_JIT_FA_H

#include "jit.h"

#include <llvm-c/Core.h>

/* s->fa set (jt_gemm_t): s with its ISA and vector width decided for a host whose widest is
 * host_isa, its blocking fixed (mr_vecs the vectors of a key tile, nr the query rows of a
 * block); 0, or -1 with a sentence in err when the ISA is not the host's. */
int jt_fa_resolve(const jt_gemm_t *s, int host_isa, jt_gemm_t *r, char *err, size_t len);

/* The kernel's symbol, unique per resolved s: "opjit_flash_attn_dk64_dv64_n512_avx512_v512". */
void jt_fa_name(const jt_gemm_t *s, char *buf, size_t len);

/* Adds the kernel for resolved s (jt_fa_fn) and its end marker to mod; returns the kernel. */
LLVMValueRef jt_fa_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s);

#endif
