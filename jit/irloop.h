/* SPDX-License-Identifier: MIT */
/* Counted loops for the IR generators (gemm.c, syrk.c, fa.c): iv = start; iv < end; iv += step,
 * with a phi for iv in the loop's head. */
#ifndef OPJIT_JIT_IRLOOP_H
#define OPJIT_JIT_IRLOOP_H

#include <llvm-c/Core.h>

typedef struct jt_loop_s {
  LLVMBasicBlockRef head, exit; /* head NULL: no loop was built (a caller's one-trip shortcut) */
  LLVMValueRef iv;              /* an i64, start's type */
  long step;
} jt_loop_t;

/* Opens the loop in fn at b's position (start and end i64), leaving b in its body. */
static inline jt_loop_t jt_loop_open(LLVMBuilderRef b, LLVMValueRef fn, LLVMValueRef start,
                                     LLVMValueRef end, long step, const char *name)
{
  LLVMContextRef cx = LLVMGetTypeContext(LLVMTypeOf(start));
  jt_loop_t l = {.step = step};
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
  l.head = LLVMAppendBasicBlockInContext(cx, fn, name);
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(cx, fn, "body");
  l.exit = LLVMAppendBasicBlockInContext(cx, fn, "exit");
  LLVMBuildBr(b, l.head);
  LLVMPositionBuilderAtEnd(b, l.head);
  l.iv = LLVMBuildPhi(b, LLVMTypeOf(start), name);
  LLVMAddIncoming(l.iv, &start, &pre, 1);
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, l.iv, end, "more"), body, l.exit);
  LLVMPositionBuilderAtEnd(b, body);
  return l;
}

/* Closes l: the step, the back edge; b continues after the loop. */
static inline void jt_loop_close(LLVMBuilderRef b, const jt_loop_t *l)
{
  LLVMValueRef step = LLVMConstInt(LLVMTypeOf(l->iv), (unsigned long long)l->step, 1);
  LLVMValueRef next = LLVMBuildNSWAdd(b, l->iv, step, "next");
  LLVMBasicBlockRef from = LLVMGetInsertBlock(b);
  LLVMAddIncoming(l->iv, &next, &from, 1);
  LLVMBuildBr(b, l->head);
  LLVMPositionBuilderAtEnd(b, l->exit);
}

#endif
