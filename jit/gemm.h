/* SPDX-License-Identifier: MIT */
/* The GEMM kernel generator (IR only; jit/session.c compiles it). */
#ifndef OPJIT_JIT_GEMM_H
#define OPJIT_JIT_GEMM_H

#include "jit.h"

#include <llvm-c/Core.h>

/* The emitters take s resolved (jt_gemm_resolve).
 * Adds the kernel for s to mod (whose data layout is set) and returns the function. */
LLVMValueRef jt_gemm_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s);

/* Adds the dot-product kernel for s (s->dot set) to mod and returns the function. */
LLVMValueRef jt_dot_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s);

/* Adds the fused ADD + RMS_NORM + MUL kernel for s (s->add_rms_mul set; jt_add_rms_mul_fn). */
LLVMValueRef jt_add_rms_mul_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s);

/* Adds ggml's MUL_MAT kernel for s (s->mm set; jt_mm_fn). */
LLVMValueRef jt_mm_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s);

/* Fills r with s, its zero generation fields (isa, vbits, mr_vecs, nr, tails) decided for a
 * host whose widest ISA is host_isa. Returns 0, or -1 with a sentence in err when s asks for
 * what the host or the ISA cannot give (a wider ISA, too many registers). */
int jt_gemm_resolve(const jt_gemm_t *s, int host_isa, jt_gemm_t *r, char *err, size_t len);

/* Up to max resolved candidates for s on host_isa, the default (jt_gemm_resolve's) first, then
 * the other blockings and widths the model finds plausible for s's shape; returns how many. */
int jt_gemm_candidates(const jt_gemm_t *s, int host_isa, jt_gemm_t *out, int max);

/* "avx2", "avx512" ("auto" for JT_ISA_AUTO, "?" otherwise). */
const char *jt_isa_name(int isa);

/* The kernel's symbol name: unique per resolved jt_gemm_t. */
void jt_gemm_name(const jt_gemm_t *s, char *buf, size_t len);

/* The symbol of the empty function emitted right after each kernel: the kernel's name and this
 * suffix. Its address ends the kernel's code (ORC's C API gives no symbol sizes). */
#define JT_END_SUFFIX "_end"

#endif
