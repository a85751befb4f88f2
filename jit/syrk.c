/* SPDX-License-Identifier: MIT */
/* The SYRK kernel: C = alpha op(A) op(A)^T + beta C on one triangle of the n x n C, built from
 * the GEMM generator's kernels through its public functions (gemm.h) only. Entry point:
 * jt_syrk_emit.
 *
 * C is cut into tiles of TILE x TILE (the last row and column of tiles narrower). A tile off
 * the diagonal is a plain GEMM on C (op(A)'s rows of the tile times op(A)^T's columns), one
 * kernel per tile shape (at most two). A tile on the diagonal is a GEMM into a stack tile
 * (alpha 1, beta 0), of which the triangle's half is then scaled into C: the other half of C
 * is neither read nor written. The tiles' kernels are private functions of the module, placed
 * between the SYRK kernel and its end marker, so the kernel's extent covers them. */
#include "syrk.h"
#include "gemm.h"
#include "irloop.h"

#include <stdio.h>
#include <string.h>

#define TILE 32 /* rows and columns of a tile: one tile up to n = 32, then 32 x 32 GEMMs */

/* The GEMM problem of an m x n tile of s's C (ldc: of the C it writes). */
static jt_gemm_t tile_problem(const jt_gemm_t *s, int m, int n, int ldc, int alpha_one,
                              int beta_class)
{
  return (jt_gemm_t){.f64 = s->f64,
                     .ta = s->ta,
                     .tb = s->tb,
                     .m = m,
                     .n = n,
                     .k = s->k,
                     .lda = s->lda,
                     .ldb = s->ldb,
                     .ldc = ldc,
                     .alpha_one = alpha_one,
                     .beta_class = beta_class,
                     .isa = s->isa};
}

int jt_syrk_resolve(const jt_gemm_t *s, int host_isa, jt_gemm_t *r, char *err, size_t len)
{
  *r = *s;
  r->isa = s->isa ? s->isa : host_isa;
  r->vbits = r->mr_vecs = r->nr = r->tails = r->kc = r->copy_a = r->nc = r->mc = r->gemv = 0;
  if (r->isa < JT_ISA_AVX2 || r->isa >= JT_ISA_COUNT || r->isa > host_isa) {
    snprintf(err, len, "this CPU cannot run %s code (it has %s)", jt_isa_name(r->isa),
             jt_isa_name(host_isa));
    return -1;
  }
  /* every tile's GEMM kernel must be one the generator builds */
  int tiles = (s->n + TILE - 1) / TILE,
      size[2] = {s->n < TILE ? s->n : TILE, s->n - (tiles - 1) * TILE};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      jt_gemm_t t = tile_problem(r, size[i], size[j], s->ldc, s->alpha_one, s->beta_class), rt;
      if (jt_gemm_resolve(&t, host_isa, &rt, err, len))
        return -1;
    }
  return 0;
}

void jt_syrk_name(const jt_gemm_t *s, char *buf, size_t len)
{
  snprintf(buf, len, "opjit_%csyrk_%c%c_%dx%d_l%d_%d_a%d_b%d_%s", s->f64 ? 'd' : 's',
           s->syrk == 1 ? 'U' : 'L', s->ta ? 'T' : 'N', s->n, s->k, s->lda, s->ldc, s->alpha_one,
           s->beta_class, jt_isa_name(s->isa));
}

typedef struct gen_s {
  LLVMContextRef cx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMValueRef fn;
  const jt_gemm_t *s;
  LLVMTypeRef elem, i64, ptr, dbl, kernel_t; /* kernel_t: jt_gemm_fn's type */
  long esz;
} gen_t;

static LLVMValueRef i64c(gen_t *g, long v)
{
  return LLVMConstInt(g->i64, (unsigned long long)v, 1);
}

/* p + i elements. */
static LLVMValueRef at(gen_t *g, LLVMValueRef p, LLVMValueRef i)
{
  return LLVMBuildGEP2(g->b, g->elem, p, &i, 1, "");
}

/* The GEMM kernel of an m x n tile of C (ldc: the C it writes), resolved as the generator
 * would for itself, as a private function of the module (emitted once per shape). */
static LLVMValueRef tile_kernel(gen_t *g, int m, int n, int ldc, int alpha_one, int beta_class)
{
  jt_gemm_t t = tile_problem(g->s, m, n, ldc, alpha_one, beta_class), r;
  char err[160], name[160];
  if (jt_gemm_resolve(&t, g->s->isa, &r, err, sizeof err)) /* jt_syrk_resolve checked them */
    return NULL;
  jt_gemm_name(&r, name, sizeof name);
  LLVMValueRef f = LLVMGetNamedFunction(g->mod, name);
  if (f)
    return f;
  f = jt_gemm_emit(g->cx, g->mod, &r);
  LLVMSetLinkage(f, LLVMPrivateLinkage);
  strncat(name, JT_END_SUFFIX, sizeof name - strlen(name) - 1);
  LLVMDeleteFunction(LLVMGetNamedFunction(g->mod, name)); /* the SYRK kernel's marker ends it */
  return f;
}

/* The triangle's half of the d x d product in tile (compact, alpha 1) into C's diagonal block
 * at cd: alpha times it, plus beta times C's element unless beta is 0 (then C is not read). */
static void merge_diagonal(gen_t *g, LLVMValueRef tile, LLVMValueRef cd, int d, LLVMValueRef alpha,
                           LLVMValueRef beta)
{
  const jt_gemm_t *s = g->s;
  jt_loop_t lj = jt_loop_open(g->b, g->fn, i64c(g, 0), i64c(g, d), 1, "dj");
  LLVMValueRef lo = s->syrk == 1 ? i64c(g, 0) : lj.iv;
  LLVMValueRef hi = s->syrk == 1 ? LLVMBuildNSWAdd(g->b, lj.iv, i64c(g, 1), "") : i64c(g, d);
  jt_loop_t li = jt_loop_open(g->b, g->fn, lo, hi, 1, "di");
  LLVMValueRef t =
      at(g, tile, LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, lj.iv, i64c(g, d), ""), li.iv, ""));
  LLVMValueRef c = at(
      g, cd, LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, lj.iv, i64c(g, s->ldc), ""), li.iv, ""));
  LLVMValueRef v = LLVMBuildLoad2(g->b, g->elem, t, "t");
  if (!s->alpha_one)
    v = LLVMBuildFMul(g->b, v, alpha, "");
  if (s->beta_class) {
    LLVMValueRef old = LLVMBuildLoad2(g->b, g->elem, c, "c");
    v = LLVMBuildFAdd(g->b, v, s->beta_class == 1 ? old : LLVMBuildFMul(g->b, old, beta, ""), "");
  }
  LLVMBuildStore(g->b, v, c);
  jt_loop_close(g->b, &li);
  jt_loop_close(g->b, &lj);
}

/* op(A)'s rows from i0 (equally op(A)^T's columns from i0): where they start in A. */
static LLVMValueRef rows_of_a(gen_t *g, LLVMValueRef a, int i0)
{
  return at(g, a, i64c(g, g->s->ta ? (long)i0 * g->s->lda : i0));
}

static void call(gen_t *g, LLVMValueRef f, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c,
                 LLVMValueRef alpha, LLVMValueRef beta)
{
  LLVMValueRef args[5] = {a, b, c, alpha, beta};
  LLVMBuildCall2(g->b, g->kernel_t, f, args, 5, "");
}

LLVMValueRef jt_syrk_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s)
{
  gen_t g = {.cx = cx, .mod = mod, .s = s, .esz = s->f64 ? 8 : 4};
  g.elem = s->f64 ? LLVMDoubleTypeInContext(cx) : LLVMFloatTypeInContext(cx);
  g.i64 = LLVMInt64TypeInContext(cx);
  g.ptr = LLVMPointerTypeInContext(cx, 0);
  g.dbl = LLVMDoubleTypeInContext(cx);
  LLVMTypeRef params[5] = {g.ptr, g.ptr, g.ptr, g.dbl, g.dbl};
  g.kernel_t = LLVMFunctionType(LLVMVoidTypeInContext(cx), params, 5, 0);
  char name[160];
  jt_syrk_name(s, name, sizeof name);
  g.fn = LLVMAddFunction(mod, name, g.kernel_t);
  LLVMAddTargetDependentFunctionAttr(g.fn, "probe-stack", "inline-asm");
  g.b = LLVMCreateBuilderInContext(cx);
  LLVMPositionBuilderAtEnd(g.b, LLVMAppendBasicBlockInContext(cx, g.fn, "entry"));
  LLVMValueRef a = LLVMGetParam(g.fn, 0), c = LLVMGetParam(g.fn, 2);
  LLVMValueRef alpha = LLVMGetParam(g.fn, 3), beta = LLVMGetParam(g.fn, 4);
  LLVMValueRef alpha_e = s->f64 ? alpha : LLVMBuildFPTrunc(g.b, alpha, g.elem, "alpha");
  LLVMValueRef beta_e = s->f64 ? beta : LLVMBuildFPTrunc(g.b, beta, g.elem, "beta");
  int n = s->n, tiles = (n + TILE - 1) / TILE, last = n - (tiles - 1) * TILE;
  int d0 = n < TILE ? n : TILE;
  LLVMValueRef tile = LLVMBuildArrayAlloca(g.b, g.elem, i64c(&g, (long)d0 * d0), "tile");
  LLVMSetAlignment(tile, 64);
  LLVMValueRef one = LLVMConstReal(g.dbl, 1), zero = LLVMConstReal(g.dbl, 0);
  for (int tj = 0; tj < tiles; tj++)
    for (int ti = 0; ti < tiles; ti++) {
      if (s->syrk == 1 ? ti > tj : ti < tj)
        continue;
      int i0 = ti * TILE, j0 = tj * TILE;
      int m = ti == tiles - 1 ? last : TILE, w = tj == tiles - 1 ? last : TILE;
      LLVMValueRef ra = rows_of_a(&g, a, i0), cb = rows_of_a(&g, a, j0);
      LLVMValueRef ct = at(&g, c, i64c(&g, (long)j0 * s->ldc + i0));
      if (ti != tj) {
        call(&g, tile_kernel(&g, m, w, s->ldc, s->alpha_one, s->beta_class), ra, cb, ct, alpha,
             beta);
        continue;
      }
      call(&g, tile_kernel(&g, m, m, m, 1, 0), ra, cb, tile, one, zero);
      merge_diagonal(&g, tile, ct, m, alpha_e, beta_e);
    }
  LLVMBuildRetVoid(g.b);
  strncat(name, JT_END_SUFFIX, sizeof name - strlen(name) - 1);
  LLVMValueRef marker =
      LLVMAddFunction(mod, name, LLVMFunctionType(LLVMVoidTypeInContext(cx), NULL, 0, 0));
  LLVMPositionBuilderAtEnd(g.b, LLVMAppendBasicBlockInContext(cx, marker, "entry"));
  LLVMBuildRetVoid(g.b);
  LLVMDisposeBuilder(g.b);
  return g.fn;
}
