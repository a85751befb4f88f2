/* SPDX-License-Identifier: MIT */
/* The SYRK kernel generator (IR only; jit/session.c compiles it through its kind's row). */
#ifndef OPJIT_JIT_SYRK_H
#define OPJIT_JIT_SYRK_H

#include "jit.h"

#include <llvm-c/Core.h>

/* s->syrk set (jt_gemm_t): s with its ISA decided for a host whose widest is host_isa and the
 * generation fields that do not apply zeroed; 0, or -1 with a sentence in err when the ISA is
 * not the host's or a tile's GEMM kernel cannot be built. */
int jt_syrk_resolve(const jt_gemm_t *s, int host_isa, jt_gemm_t *r, char *err, size_t len);

/* The kernel's symbol, unique per resolved s: "opjit_ssyrk_UN_64x32_l64_64_a1_b0_avx512". */
void jt_syrk_name(const jt_gemm_t *s, char *buf, size_t len);

/* Adds the kernel for resolved s (jt_gemm_fn; its B argument is not read) and its end marker to
 * mod; returns the kernel. */
LLVMValueRef jt_syrk_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s);

#endif
