/* SPDX-License-Identifier: MIT */
/* libopjit-jit.so: the ORC LLJIT session and the module's API table.
 *
 * Why a target machine of our own: LLJIT's default builder takes the host triple but compiles
 * at the default code-generation level; the kernels are emitted as explicit vector IR, so no IR
 * pass pipeline runs at all (the O3 pipeline cost 10-590 ms per kernel here for no gain), and
 * the code generator runs at its aggressive level for the host CPU and its features. */
#include "gemm.h"
#include "jit.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Kernels compiled in this session, by name: asking twice returns the first. */
typedef struct compiled_s {
  struct compiled_s *next;
  char name[128];
  jt_gemm_fn fn;
  size_t size;
  LLVMOrcResourceTrackerRef rt; /* the kernel's code and symbols, removable on their own */
} compiled_t;
static compiled_t *compiled;

static LLVMOrcLLJITRef jit;
static LLVMOrcThreadSafeContextRef tsc;
static char *triple, *cpu_name, *features;
static char version[32];

/* Copies an LLVM error's message into err and consumes it; returns -1. */
static int llvm_fail(LLVMErrorRef e, const char *what, char *err, size_t len)
{
  char *msg = LLVMGetErrorMessage(e);
  snprintf(err, len, "%s: %s", what, msg);
  LLVMDisposeErrorMessage(msg);
  return -1;
}

/* A target machine for this host: its CPU name and features, aggressive code generation. */
static LLVMTargetMachineRef host_machine(char *err, size_t len)
{
  LLVMTargetRef target;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
    snprintf(err, len, "no LLVM target for %s: %s", triple, msg ? msg : "?");
    LLVMDisposeMessage(msg);
    return NULL;
  }
  return LLVMCreateTargetMachine(target, triple, cpu_name, features, LLVMCodeGenLevelAggressive,
                                 LLVMRelocPIC, LLVMCodeModelJITDefault);
}

static int jit_init(char *err, size_t len)
{
  if (jit)
    return 0;
  if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter()) {
    snprintf(err, len, "LLVM has no native target for this machine");
    return -1;
  }
  unsigned maj, min, pat;
  LLVMGetVersion(&maj, &min, &pat);
  snprintf(version, sizeof version, "%u.%u.%u", maj, min, pat);
  triple = LLVMGetDefaultTargetTriple();
  cpu_name = LLVMGetHostCPUName();
  features = LLVMGetHostCPUFeatures();
  LLVMTargetMachineRef tm = host_machine(err, len);
  if (!tm)
    return -1;
  LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
      builder, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
  LLVMErrorRef e = LLVMOrcCreateLLJIT(&jit, builder);
  if (e)
    return jit = NULL, llvm_fail(e, "cannot create the LLJIT session", err, len);
  tsc = LLVMOrcCreateNewThreadSafeContext();
  return 0;
}

static int jit_gemm(const jt_gemm_t *g, jt_gemm_fn *out, size_t *size, char *err, size_t len)
{
  if (!jit && jit_init(err, len))
    return -1;
  if (!jt_gemm_supported(g)) {
    snprintf(err, len, "shape outside the generator's limits");
    return -1;
  }
  char name[128];
  jt_gemm_name(g, name, sizeof name);
  for (compiled_t *c = compiled; c; c = c->next)
    if (strcmp(c->name, name) == 0)
      return *out = c->fn, *size = c->size, 0;
  compiled_t *entry = calloc(1, sizeof *entry);
  if (!entry) {
    snprintf(err, len, "out of memory");
    return -1;
  }
  LLVMOrcJITTargetAddress addr = 0;
  LLVMContextRef cx = LLVMOrcThreadSafeContextGetContext(tsc);
  LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(name, cx);
  LLVMSetTarget(mod, triple);
  LLVMSetDataLayout(mod, LLVMOrcLLJITGetDataLayoutStr(jit));
  if (g->dot)
    jt_dot_emit(cx, mod, g);
  else
    jt_gemm_emit(cx, mod, g);
  char *msg = NULL;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
    snprintf(err, len, "generated IR does not verify: %.300s", msg ? msg : "?");
    LLVMDisposeMessage(msg);
    LLVMDisposeModule(mod);
    free(entry);
    return -1;
  }
  LLVMDisposeMessage(msg);
  LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, tsc);
  entry->rt = LLVMOrcJITDylibCreateResourceTracker(LLVMOrcLLJITGetMainJITDylib(jit));
  LLVMErrorRef e = LLVMOrcLLJITAddLLVMIRModuleWithRT(jit, entry->rt, tsm);
  if (e) {
    LLVMOrcDisposeThreadSafeModule(tsm);
    LLVMOrcReleaseResourceTracker(entry->rt);
    free(entry);
    return llvm_fail(e, "cannot add the kernel", err, len);
  }
  if ((e = LLVMOrcLLJITLookup(jit, &addr, name))) {
    LLVMConsumeError(LLVMOrcResourceTrackerRemove(entry->rt));
    LLVMOrcReleaseResourceTracker(entry->rt);
    free(entry);
    return llvm_fail(e, "cannot compile the kernel", err, len);
  }
  char end[160];
  LLVMOrcJITTargetAddress end_addr = 0;
  snprintf(end, sizeof end, "%s_end", name);
  if ((e = LLVMOrcLLJITLookup(jit, &end_addr, end)))
    LLVMConsumeError(e);
  entry->size = *size = end_addr > addr && end_addr - addr < (1u << 20) ? end_addr - addr : 0;
  snprintf(entry->name, sizeof entry->name, "%s", name);
  entry->fn = *out = (jt_gemm_fn)(uintptr_t)addr;
  entry->next = compiled;
  compiled = entry;
  return 0;
}

static int jit_release(jt_gemm_fn fn, char *err, size_t len)
{
  for (compiled_t **p = &compiled; *p; p = &(*p)->next) {
    compiled_t *c = *p;
    if (c->fn != fn)
      continue;
    *p = c->next;
    LLVMErrorRef e = LLVMOrcResourceTrackerRemove(c->rt);
    LLVMOrcReleaseResourceTracker(c->rt);
    free(c);
    return e ? llvm_fail(e, "cannot free the kernel", err, len) : 0;
  }
  snprintf(err, len, "no such kernel");
  return -1;
}

static const char *jit_llvm_version(void) { return version; }
static const char *jit_cpu(void) { return cpu_name ? cpu_name : ""; }

__attribute__((visibility("default"))) const jt_api_t opjit_jit_api = {
    .abi = JT_API_ABI,
    .init = jit_init,
    .gemm = jit_gemm,
    .gemm_name = jt_gemm_name,
    .release = jit_release,
    .llvm_version = jit_llvm_version,
    .cpu = jit_cpu,
};
