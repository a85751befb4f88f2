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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Kernels compiled in this session, by name: asking twice returns the first. */
typedef struct compiled_s {
  struct compiled_s *next;
  char name[128];
  jt_gemm_fn fn;
  size_t size;
  void *obj;                    /* the relocatable object LLJIT linked (malloc'ed) */
  size_t obj_len;
  LLVMOrcResourceTrackerRef rt; /* the kernel's code and symbols, removable on their own */
  int refs;                     /* gemm() calls that returned it, less release() calls */
} compiled_t;
static compiled_t *compiled;

/* The object file of the module this thread is compiling, copied as ORC's object layer passes
 * it on to be linked: what the agent persists and reloads without LLVM in a later run. */
static __thread void *captured;
static __thread size_t captured_len;

static __thread LLVMOrcLLJITRef jit; /* one session per compile thread: the C API's LLJIT
                                        compiles with one target machine, not concurrently */
static pthread_cond_t done = PTHREAD_COND_INITIALIZER; /* a compile in progress finished */
static int native_ready;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* the session and the list */
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

/* ORC's object transform: keeps a copy of each object before it is linked (materialization
 * runs on the thread that looks the kernel up, so the copy is this thread's). */
static LLVMErrorRef capture_object(void *ctx, LLVMMemoryBufferRef *obj)
{
  (void)ctx;
  size_t len = LLVMGetBufferSize(*obj);
  void *copy = malloc(len ? len : 1);
  free(captured);
  captured = copy, captured_len = copy ? len : 0;
  if (copy)
    memcpy(copy, LLVMGetBufferStart(*obj), len);
  return NULL;
}

/* Process-wide LLVM set-up (once), then this thread's session. */
static int jit_init(char *err, size_t len)
{
  if (jit)
    return 0;
  pthread_mutex_lock(&mu);
  if (!native_ready) {
    if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter()) {
      pthread_mutex_unlock(&mu);
      snprintf(err, len, "LLVM has no native target for this machine");
      return -1;
    }
    unsigned maj, min, pat;
    LLVMGetVersion(&maj, &min, &pat);
    snprintf(version, sizeof version, "%u.%u.%u", maj, min, pat);
    triple = LLVMGetDefaultTargetTriple();
    cpu_name = LLVMGetHostCPUName();
    features = LLVMGetHostCPUFeatures();
    native_ready = 1;
  }
  pthread_mutex_unlock(&mu);
  LLVMTargetMachineRef tm = host_machine(err, len);
  if (!tm)
    return -1;
  LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
      builder, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
  LLVMErrorRef e = LLVMOrcCreateLLJIT(&jit, builder);
  if (e)
    return jit = NULL, llvm_fail(e, "cannot create the LLJIT session", err, len);
  LLVMOrcObjectTransformLayerSetTransform(LLVMOrcLLJITGetObjTransformLayer(jit), capture_object,
                                          NULL);
  return 0;
}

/* Builds, adds and compiles the kernel for g into this thread's session; fills entry (fn last,
 * under the caller's lock). */
static int compile(const jt_gemm_t *g, const char *name, compiled_t *entry, char *err, size_t len)
{
  LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
  LLVMContextRef cx = LLVMOrcThreadSafeContextGetContext(tsc);
  LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(name, cx);
  LLVMSetTarget(mod, triple);
  LLVMSetDataLayout(mod, LLVMOrcLLJITGetDataLayoutStr(jit));
  if (g->add_rms_mul)
    jt_add_rms_mul_emit(cx, mod, g);
  else if (g->mm)
    jt_mm_emit(cx, mod, g);
  else if (g->dot)
    jt_dot_emit(cx, mod, g);
  else
    jt_gemm_emit(cx, mod, g);
  char *msg = NULL;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
    snprintf(err, len, "generated IR does not verify: %.300s", msg ? msg : "?");
    LLVMDisposeMessage(msg);
    LLVMDisposeModule(mod);
    LLVMOrcDisposeThreadSafeContext(tsc);
    return -1;
  }
  LLVMDisposeMessage(msg);
  LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, tsc);
  LLVMOrcDisposeThreadSafeContext(tsc); /* the module holds its own reference */
  LLVMOrcResourceTrackerRef rt = LLVMOrcJITDylibCreateResourceTracker(LLVMOrcLLJITGetMainJITDylib(jit));
  LLVMErrorRef e = LLVMOrcLLJITAddLLVMIRModuleWithRT(jit, rt, tsm);
  if (e) {
    LLVMOrcDisposeThreadSafeModule(tsm);
    LLVMOrcReleaseResourceTracker(rt);
    return llvm_fail(e, "cannot add the kernel", err, len);
  }
  LLVMOrcJITTargetAddress addr = 0, end_addr = 0;
  free(captured);
  captured = NULL, captured_len = 0;
  if ((e = LLVMOrcLLJITLookup(jit, &addr, name))) { /* the compile happens here */
    LLVMConsumeError(LLVMOrcResourceTrackerRemove(rt));
    LLVMOrcReleaseResourceTracker(rt);
    return llvm_fail(e, "cannot compile the kernel", err, len);
  }
  char end[160];
  snprintf(end, sizeof end, "%s" JT_END_SUFFIX, name);
  if ((e = LLVMOrcLLJITLookup(jit, &end_addr, end)))
    LLVMConsumeError(e);
  entry->size = end_addr > addr && end_addr - addr < (1u << 20) ? end_addr - addr : 0;
  entry->rt = rt;
  entry->obj = captured, entry->obj_len = captured_len;
  captured = NULL, captured_len = 0;
  pthread_mutex_lock(&mu);
  entry->fn = (jt_gemm_fn)(uintptr_t)addr;
  pthread_mutex_unlock(&mu);
  return 0;
}

/* A copy of c's object for the caller (none if it could not be captured or copied). */
static void copy_object(const compiled_t *c, void **obj, size_t *obj_len)
{
  *obj = c->obj ? malloc(c->obj_len) : NULL;
  *obj_len = *obj ? c->obj_len : 0;
  if (*obj)
    memcpy(*obj, c->obj, c->obj_len);
}

/* Compiles one kernel (or finds it compiled): IR in a context of its own, added to this
 * thread's session under its own resource tracker, so threads compile in parallel. */
static int jit_gemm(const jt_gemm_t *g, jt_gemm_fn *out, size_t *size, void **obj,
                    size_t *obj_len, char *err, size_t len)
{
  *obj = NULL, *obj_len = 0;
  if (jit_init(err, len))
    return -1;
  if (!jt_gemm_supported(g)) {
    snprintf(err, len, "shape outside the generator's limits");
    return -1;
  }
  char name[128];
  jt_gemm_name(g, name, sizeof name);
  /* The list holds every kernel by name; an entry whose fn is NULL is being compiled by another
   * thread: wait for it rather than compile the same name twice. */
  pthread_mutex_lock(&mu);
  for (;;) {
    compiled_t *c = compiled;
    while (c && strcmp(c->name, name) != 0)
      c = c->next;
    if (!c)
      break;
    if (c->fn) {
      *out = c->fn, *size = c->size;
      c->refs++;
      copy_object(c, obj, obj_len);
      pthread_mutex_unlock(&mu);
      return 0;
    }
    pthread_cond_wait(&done, &mu);
  }
  compiled_t *entry = calloc(1, sizeof *entry);
  if (entry) {
    snprintf(entry->name, sizeof entry->name, "%s", name);
    entry->next = compiled;
    compiled = entry;
  }
  pthread_mutex_unlock(&mu);
  if (!entry) {
    snprintf(err, len, "out of memory");
    return -1;
  }
  int rc = compile(g, name, entry, err, len);
  pthread_mutex_lock(&mu);
  if (rc) { /* forget the placeholder */
    for (compiled_t **p = &compiled; *p; p = &(*p)->next)
      if (*p == entry) {
        *p = entry->next;
        break;
      }
    free(entry);
  } else {
    *out = entry->fn, *size = entry->size;
    entry->refs = 1;
    copy_object(entry, obj, obj_len);
  }
  pthread_cond_broadcast(&done);
  pthread_mutex_unlock(&mu);
  return rc;
}

static int jit_release(jt_gemm_fn fn, char *err, size_t len)
{
  pthread_mutex_lock(&mu);
  for (compiled_t **p = &compiled; *p; p = &(*p)->next) {
    compiled_t *c = *p;
    if (c->fn != fn)
      continue;
    if (--c->refs > 0) { /* another signature's variant runs it */
      pthread_mutex_unlock(&mu);
      return 1;
    }
    *p = c->next;
    LLVMErrorRef e = LLVMOrcResourceTrackerRemove(c->rt);
    pthread_mutex_unlock(&mu);
    LLVMOrcReleaseResourceTracker(c->rt);
    free(c->obj);
    free(c);
    return e ? llvm_fail(e, "cannot free the kernel", err, len) : 0;
  }
  pthread_mutex_unlock(&mu);
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
