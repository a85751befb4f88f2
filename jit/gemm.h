/* SPDX-License-Identifier: MIT */
/* The GEMM kernel generator (IR only; jit/session.c compiles it). */
#ifndef OPJIT_JIT_GEMM_H
#define OPJIT_JIT_GEMM_H

#include "jit.h"

#include <llvm-c/Core.h>

/* Adds the kernel for s to mod (whose data layout is set) and returns the function. */
LLVMValueRef jt_gemm_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s);

/* Adds the dot-product kernel for s (s->dot set) to mod and returns the function. */
LLVMValueRef jt_dot_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s);

/* Adds the fused ADD + RMS_NORM + MUL kernel for s (s->add_rms_mul set; jt_add_rms_mul_fn). */
LLVMValueRef jt_add_rms_mul_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s);

/* Adds ggml's MUL_MAT kernel for s (s->mm set; jt_mm_fn). */
LLVMValueRef jt_mm_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s);

/* The kernel's symbol name: unique per jt_gemm_t. */
void jt_gemm_name(const jt_gemm_t *s, char *buf, size_t len);

/* The symbol of the empty function emitted right after each kernel: the kernel's name and this
 * suffix. Its address ends the kernel's code (ORC's C API gives no symbol sizes). */
#define JT_END_SUFFIX "_end"

#endif
