/* SPDX-License-Identifier: MIT */
/* libopjit-jit.so: the ORC LLJIT session and the module's API table.
 *
 * Why a target machine of our own: LLJIT's default builder takes the host triple but compiles
 * at the default code-generation level; the kernels are emitted as explicit vector IR, so no IR
 * pass pipeline runs at all (the O3 pipeline cost 10-590 ms per kernel here for no gain), and
 * the code generator runs at its aggressive level for the host CPU and its features.
 *
 * A session per ISA and compile thread: the host's own features for its widest ISA, and for a
 * narrower one (AVX2 forced on an AVX-512 machine) the same features with every wider
 * extension turned off, so that the backend can emit no EVEX encoding at all. */
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
#include <time.h>

/* Kernels compiled in this session, by name: asking twice returns the first. */
typedef struct compiled_s {
  struct compiled_s *next;
  char name[128];
  jt_gemm_fn fn;
  size_t size;
  void *obj;                    /* the relocatable object LLJIT linked (malloc'ed) */
  size_t obj_len;
  LLVMOrcResourceTrackerRef rt; /* the kernel's code and symbols, removable on their own */
  LLVMOrcLLJITRef jit;          /* the session that compiled it (drop_sessions keeps it) */
  int refs;                     /* gemm() calls that returned it, less release() calls */
} compiled_t;
static compiled_t *compiled;

/* The object file of the module this thread is compiling, copied as ORC's object layer passes
 * it on to be linked: what the agent persists and reloads without LLVM in a later run. */
static __thread void *captured;
static __thread size_t captured_len;

static __thread LLVMOrcLLJITRef sessions[JT_ISA_COUNT]; /* per compile thread and ISA: the C API's
                                                      LLJIT compiles with one target machine,
                                                      not concurrently */
static pthread_cond_t done = PTHREAD_COND_INITIALIZER; /* a compile in progress finished */
static int native_ready;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* the session and the list */
static char *triple, *cpu_name, *features;
static char *isa_features[JT_ISA_COUNT]; /* the host's features narrowed to each ISA */
static int host_isa;                     /* the widest JT_ISA_* the host has */
static char version[32];

/* Copies an LLVM error's message into err and consumes it; returns -1. */
static int llvm_fail(LLVMErrorRef e, const char *what, char *err, size_t len)
{
  char *msg = LLVMGetErrorMessage(e);
  snprintf(err, len, "%s: %s", what, msg);
  LLVMDisposeErrorMessage(msg);
  return -1;
}

/* A target machine for this host's CPU with isa's features, aggressive code generation. */
static LLVMTargetMachineRef host_machine(int isa, char *err, size_t len)
{
  LLVMTargetRef target;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
    snprintf(err, len, "no LLVM target for %s: %s", triple, msg ? msg : "?");
    LLVMDisposeMessage(msg);
    return NULL;
  }
  return LLVMCreateTargetMachine(target, triple, cpu_name, isa_features[isa],
                                 LLVMCodeGenLevelAggressive, LLVMRelocPIC, LLVMCodeModelJITDefault);
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

/* 1 when LLVM's feature list fl ("+avx2,-avx512f,...") enables feature f. */
static int has_feature(const char *fl, const char *f)
{
  size_t n = strlen(f);
  for (const char *p = fl; p && *p; p = strchr(p, ','), p = p ? p + 1 : NULL)
    if (p[0] == '+' && strncmp(p + 1, f, n) == 0 && (p[1 + n] == ',' || p[1 + n] == 0))
      return 1;
  return 0;
}

/* The host's features with every extension wider than AVX2 turned off (malloc'ed). */
static char *narrow_to_avx2(const char *fl)
{
  char *r = strdup(fl);
  static const char *const wider[] = {"avx512", "evex512", "avx10", "amx"};
  for (char *p = r; p && *p; p = strchr(p, ','), p = p ? p + 1 : NULL)
    for (size_t i = 0; i < sizeof wider / sizeof *wider; i++)
      if (p[0] == '+' && strncmp(p + 1, wider[i], strlen(wider[i])) == 0)
        p[0] = '-';
  return r;
}

/* Process-wide LLVM set-up (once): the target, the host's CPU and the features per ISA. */
static int native_init(char *err, size_t len)
{
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
    int avx2 = has_feature(features, "avx2") && has_feature(features, "fma") &&
               has_feature(features, "f16c");
    int avx512 = avx2 && has_feature(features, "avx512f") && has_feature(features, "avx512vl") &&
                 has_feature(features, "avx512bw") && has_feature(features, "avx512dq");
    host_isa = avx512 ? JT_ISA_AVX512 : avx2 ? JT_ISA_AVX2 : JT_ISA_AUTO;
    isa_features[JT_ISA_AVX512] = features;
    isa_features[JT_ISA_AVX2] = narrow_to_avx2(features);
    native_ready = 1;
  }
  pthread_mutex_unlock(&mu);
  if (host_isa == JT_ISA_AUTO) {
    snprintf(err, len, "the JIT generates AVX2 (with FMA and F16C) or AVX-512 code: this %s has "
             "neither", cpu_name);
    return -1;
  }
  return 0;
}

/* This thread's session for isa (created on first use). */
static LLVMOrcLLJITRef session(int isa, char *err, size_t len)
{
  if (sessions[isa])
    return sessions[isa];
  LLVMTargetMachineRef tm = host_machine(isa, err, len);
  if (!tm)
    return NULL;
  LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
      builder, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
  LLVMErrorRef e = LLVMOrcCreateLLJIT(&sessions[isa], builder);
  if (e)
    return sessions[isa] = NULL, llvm_fail(e, "cannot create the LLJIT session", err, len), NULL;
  LLVMOrcObjectTransformLayerSetTransform(LLVMOrcLLJITGetObjTransformLayer(sessions[isa]),
                                          capture_object, NULL);
  return sessions[isa];
}

/* Process-wide LLVM set-up (once), then this thread's session for the host's widest ISA. */
static int jit_init(char *err, size_t len)
{
  if (native_init(err, len))
    return -1;
  return session(host_isa, err, len) ? 0 : -1;
}

/* The test seam OPJIT_TEST_FAULT=crash: kernel name traps (ud2, SIGILL) as its first
 * instruction, as a damaged kernel would fault inside its code. */
static void trap_on_entry(LLVMContextRef cx, LLVMModuleRef mod, const char *name)
{
  LLVMValueRef fn = LLVMGetNamedFunction(mod, name);
  if (!fn || !LLVMCountBasicBlocks(fn))
    return;
  unsigned id = LLVMLookupIntrinsicID("llvm.trap", 9);
  LLVMValueRef trap = LLVMGetIntrinsicDeclaration(mod, id, NULL, 0);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(cx);
  LLVMPositionBuilderBefore(b, LLVMGetFirstInstruction(LLVMGetEntryBasicBlock(fn)));
  LLVMBuildCall2(b, LLVMIntrinsicGetType(cx, id, NULL, 0), trap, NULL, 0, "");
  LLVMDisposeBuilder(b);
}

/* Builds, adds and compiles the kernel for g (resolved) into this thread's session for its
 * ISA; fills entry (fn last, under the caller's lock). */
static int compile(const jt_gemm_t *g, const char *name, compiled_t *entry, char *err, size_t len)
{
  LLVMOrcLLJITRef jit = session(g->isa, err, len);
  if (!jit)
    return -1;
  LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
  LLVMContextRef cx = LLVMOrcThreadSafeContextGetContext(tsc);
  LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(name, cx);
  LLVMSetTarget(mod, triple);
  LLVMSetDataLayout(mod, LLVMOrcLLJITGetDataLayoutStr(jit));
  jt_kind(g)->emit(cx, mod, g);
  const char *fault = getenv("OPJIT_TEST_FAULT"); /* fault injection for the tests only */
  if (fault && strcmp(fault, "crash") == 0)
    trap_on_entry(cx, mod, name);
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
  entry->rt = rt, entry->jit = jit;
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
static int jit_gemm(const jt_gemm_t *gu, jt_gemm_fn *out, size_t *size, void **obj,
                    size_t *obj_len, char *err, size_t len)
{
  *obj = NULL, *obj_len = 0;
  if (native_init(err, len))
    return -1;
  const jt_kind_t *kind = jt_kind(gu);
  if (!kind->supported(gu)) {
    snprintf(err, len, "shape outside the generator's limits");
    return -1;
  }
  jt_gemm_t rg;
  if (kind->resolve(gu, host_isa, &rg, err, len))
    return -1;
  const jt_gemm_t *g = &rg;
  char name[128];
  kind->symbol(g, name, sizeof name);
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

/* A session whose kernel another thread still holds (it shared the kernel by name) is kept. */
static void jit_drop_sessions(void)
{
  free(captured);
  captured = NULL, captured_len = 0;
  for (int isa = 0; isa < JT_ISA_COUNT; isa++) {
    if (!sessions[isa])
      continue;
    pthread_mutex_lock(&mu);
    const compiled_t *c = compiled;
    while (c && c->jit != sessions[isa])
      c = c->next;
    pthread_mutex_unlock(&mu);
    if (c)
      continue;
    LLVMErrorRef e = LLVMOrcDisposeLLJIT(sessions[isa]);
    if (e)
      LLVMConsumeError(e);
    sessions[isa] = NULL;
  }
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

/* ---- tune(): candidates timed on scratch data ------------------------------------------------
 *
 * Every candidate runs on the same scratch operands (small values, no denormals), in rounds
 * that interleave the candidates (in an order that rotates each round), each sample a batch of
 * calls of about SAMPLE_NS; a candidate's time is its median per-call time over the rounds, so
 * a noisy neighbour that slows one round slows every candidate in it. Heavy kernels (a sample
 * of one call) get fewer rounds, down to 3, so that the timing stays near BUDGET_NS. A MUL_MAT
 * is timed on its first rows only (a call is then a few MFlop, or one 32-row panel): the
 * blocking's speed per row is what is compared, not the whole product. */
#define ROUNDS 7
#define SAMPLE_NS 400000.0
#define BUDGET_NS 40e6

static uint64_t clock_ns(clockid_t id)
{
  struct timespec t;
  clock_gettime(id, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* Scratch operands for g's kernels. */
typedef struct operands_s {
  void *a, *b, *c, *r, *out, *scratch;
  int64_t rows; /* MUL_MAT: the rows timed */
} operands_t;

/* bytes of elements of esz bytes (2: f16, 4: float, 8: double), small values or zero: no
 * denormal, whose assists would time something else than the kernel. */
static void *filled(size_t bytes, int esz)
{
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p)
    return NULL;
  for (size_t i = 0; i < bytes / (size_t)esz; i++) {
    float v = (float)((int)(i * 2654435761u % 17) - 8) / 16;
    if (esz == 2)
      ((_Float16 *)p)[i] = (_Float16)v;
    else if (esz == 4)
      ((float *)p)[i] = v;
    else
      ((double *)p)[i] = v;
  }
  return p;
}

static void operands_free(operands_t *o)
{
  free(o->a), free(o->b), free(o->c), free(o->r), free(o->out), free(o->scratch);
}

static int operands(const jt_gemm_t *g, operands_t *o)
{
  memset(o, 0, sizeof *o);
  size_t esz = g->f64 ? 8 : 4;
  int abi = jt_kind(g)->abi;
  if (abi == JT_ABI_MM || abi == JT_ABI_MM_ADD) {
    /* a few MFlop per call, but a whole 32-row panel at least: fewer rows than a candidate's
     * panel would favour narrower panels (16 rows timed made 32-row panels run half empty:
     * tune() picked 16-row panels that measured 0.91x in bench_kernels) */
    int64_t rows = (int64_t)(4e6 / (2.0 * g->n * g->k)) / (2 * JT_MM_MR) * (2 * JT_MM_MR);
    rows = rows < 2 * JT_MM_MR ? 2 * JT_MM_MR : rows > JT_MM_MC ? JT_MM_MC : rows;
    o->rows = rows > g->m ? g->m : rows;
    /* y, r and out span n columns of m rows, of which the kernel touches its rows only: zeroed
     * pages (calloc maps large blocks), so the rows never timed cost no memory */
    size_t ybytes = ((size_t)(g->n - 1) * g->m + (size_t)o->rows) * 4;
    o->a = filled((size_t)o->rows * g->k * (g->w16 ? 2 : 4), g->w16 ? 2 : 4);
    o->b = filled((size_t)g->n * g->k * 4, 4);
    o->c = calloc(1, ybytes);
    if (abi == JT_ABI_MM_ADD)
      o->r = calloc(1, ybytes), o->out = calloc(1, ybytes);
    o->scratch = filled(JT_MM_SCRATCH_FLOATS(g->k) * 4, 4);
    return o->a && o->b && o->c && o->scratch && (abi != JT_ABI_MM_ADD || (o->r && o->out)) ? 0 : -1;
  }
  if (jt_kind_of(g) == JT_KIND_DOT) {
    o->a = filled((size_t)g->k * esz, (int)esz), o->b = filled((size_t)g->k * esz, (int)esz);
    o->c = filled(esz, (int)esz);
  } else {
    o->a = filled((size_t)g->lda * (g->ta ? g->m : g->k) * esz, (int)esz);
    o->b = filled((size_t)g->ldb * (g->tb ? g->k : g->n) * esz, (int)esz);
    o->c = filled((size_t)g->ldc * g->n * esz, (int)esz);
  }
  return o->a && o->b && o->c ? 0 : -1;
}

static void call(const jt_gemm_t *g, jt_gemm_fn fn, const operands_t *o)
{
  switch (jt_kind(g)->abi) {
  case JT_ABI_MM_ADD:
    ((jt_mm_add_fn)(void (*)(void))fn)(o->a, o->b, o->c, o->r, o->out, 0, o->rows, o->scratch);
    break;
  case JT_ABI_MM:
    ((jt_mm_fn)(void (*)(void))fn)(o->a, o->b, o->c, 0, o->rows, o->scratch);
    break;
  default: /* a kind that tunes has one of these ABIs or jt_gemm_fn's */
    fn(o->a, o->b, o->c, 0.5, 0.5); /* beta 0.5 keeps a C updated thousands of times bounded */
  }
}

static int cmp_double(const void *x, const void *y)
{
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static int jit_tune(const jt_gemm_t *g, int ncand, jt_gemm_t *best, jt_gemm_fn *out,
                    size_t *size, void **obj, size_t *obj_len, jt_tune_t *report, char *err,
                    size_t len)
{
  jt_tune_t rep = {0};
  jt_gemm_fn fn[JT_TUNE_MAX] = {0};
  size_t sz[JT_TUNE_MAX];
  void *ob[JT_TUNE_MAX] = {0};
  size_t oblen[JT_TUNE_MAX];
  *obj = NULL, *obj_len = 0;
  if (native_init(err, len))
    return -1;
  const jt_kind_t *kind = jt_kind(g);
  int n = !kind->tunes ? !kind->resolve(g, host_isa, &rep.cand[0], err, len)
                       : jt_gemm_candidates(g, host_isa, rep.cand, ncand < 1 ? 1 : ncand);
  if (!n) { /* resolving says why there is none; else it is a gap in the candidates */
    if (kind->tunes && !kind->resolve(g, host_isa, best, err, len))
      snprintf(err, len, "no candidate");
    return -1;
  }
  uint64_t t0 = now_ns(), cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  for (int i = 0; i < n; i++)
    if (jit_gemm(&rep.cand[i], &fn[i], &sz[i], &ob[i], &oblen[i], err, len)) {
      for (int j = 0; j < i; j++)
        jit_release(fn[j], err, len), free(ob[j]);
      return -1;
    }
  uint64_t t1 = now_ns();
  rep.n = n;
  rep.compile_ns = t1 - t0;
  rep.compile_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
  operands_t o;
  if (n > 1 && operands(g, &o) == 0) {
    double per[JT_TUNE_MAX][ROUNDS], round_ns = 0;
    long calls[JT_TUNE_MAX];
    for (int i = 0; i < n; i++) { /* warm: one call, then the batch that takes SAMPLE_NS */
      call(g, fn[i], &o);
      uint64_t s = now_ns();
      call(g, fn[i], &o);
      double one = (double)(now_ns() - s) + 1;
      calls[i] = one >= SAMPLE_NS ? 1 : (long)(SAMPLE_NS / one);
      round_ns += one * (double)calls[i];
    }
    int rounds = (int)(BUDGET_NS / round_ns) | 1; /* odd: a median of its own */
    rounds = rounds < 3 ? 3 : rounds > ROUNDS ? ROUNDS : rounds;
    for (int r = 0; r < rounds; r++)
      for (int t = 0; t < n; t++) {
        int i = (t + r) % n;
        uint64_t s = now_ns();
        for (long c = 0; c < calls[i]; c++)
          call(g, fn[i], &o);
        per[i][r] = (double)(now_ns() - s) / (double)calls[i];
      }
    for (int i = 0; i < n; i++) {
      qsort(per[i], (size_t)rounds, sizeof per[i][0], cmp_double);
      rep.ns[i] = per[i][rounds / 2];
      if (rep.ns[i] < rep.ns[rep.best])
        rep.best = i;
    }
    operands_free(&o);
  }
  rep.time_ns = now_ns() - t1;
  for (int i = 0; i < n; i++)
    if (i != rep.best) {
      jit_release(fn[i], err, len);
      free(ob[i]);
    }
  *best = rep.cand[rep.best];
  *out = fn[rep.best], *size = sz[rep.best], *obj = ob[rep.best], *obj_len = oblen[rep.best];
  if (report)
    *report = rep;
  return 0;
}

static const char *jit_llvm_version(void) { return version; }
static const char *jit_cpu(void) { return cpu_name ? cpu_name : ""; }
static int jit_host_isa(void) { return host_isa; }

/* The name of g's kernel as jit_gemm compiles it (an unresolvable g: its fields as they are). */
static void jit_gemm_name(const jt_gemm_t *g, char *buf, size_t len)
{
  const jt_kind_t *kind = jt_kind(g);
  jt_gemm_t r;
  char err[160];
  if (kind->resolve(g, host_isa, &r, err, sizeof err))
    r = *g;
  kind->symbol(&r, buf, len);
}

__attribute__((visibility("default"))) const jt_api_t opjit_jit_api = {
    .abi = JT_API_ABI,
    .init = jit_init,
    .gemm = jit_gemm,
    .tune = jit_tune,
    .gemm_name = jit_gemm_name,
    .release = jit_release,
    .drop_sessions = jit_drop_sessions,
    .llvm_version = jit_llvm_version,
    .cpu = jit_cpu,
    .host_isa = jit_host_isa,
    .isa_name = jt_isa_name,
};
