/* SPDX-License-Identifier: MIT */
/* The FLASH_ATTN_EXT generator: LLVM IR for ggml's flash attention over one head's query rows
 * (jt_fa_fn), f32 queries, f16 keys, values and mask, DK and DV baked in.
 *
 * It computes what ggml's tiled CPU path computes, row by row in the same float steps: the
 * scores of a row against a tile of TJ keys as sums over d in order (one FMA chain per score,
 * started from zero), times scale, plus the mask; the tile's maximum, the old sums and outputs
 * rescaled by e^(old max - new max) when it grows, e^(s - max) per score (ggml's own vector
 * e^x, with its constants), the tile's sum added in double to the float sum, and the outputs
 * accumulated over the tile's keys in order by FMAs; at the end each output times 1 / sum. A
 * tile masked for every row of a block is skipped. Only e^(old max - new max), which ggml
 * takes from libm, may differ by an ulp.
 *
 *   once per call: keys transposed into KT[tile][d][TJ] (f32, gathered two halves at a time),
 *                  values converted into V32[key][DV] (f32), both zero past n_kv
 *   for each block of R query rows (the last one's missing rows repeat its last row, never
 *   stored):
 *     for each key tile: mask (R x TJ, -inf past n_kv); skip the tile if all -inf
 *       S[r][:] = sum over d of q[r][d] * KT[tile][d][:]     (R x NJ vector accumulators)
 *       per row: the online softmax, P[r][:] = e^(S - max), alpha[r]
 *       O[r][:] = O[r][:] * alpha[r] + sum over keys j of P[r][j] * V32[j][:]   (R x DVC)
 *     out[r] = O[r] * (1 / sum[r])
 *
 * Blocking: AVX-512 tiles of 4 zmm (64 keys) by 6 rows (24 accumulators); AVX2 2 ymm (16 keys)
 * by 4 rows.
 *
 * fa == 2 (fa16_block, below) is ggml's path for fewer rows, step by step (jit.h says which):
 * one key at a time for a block of heads side by side, the accumulators in registers as f32
 * values that are f16 values, rounded after each step, e^x glibc's expf in vector form, the
 * rescale a branch taken only when a maximum grows. Query heads grouped on K/V heads (GQA)
 * are taken a group at a time, in blocks of its heads that convert each key and value vector
 * once for all of them:
 *
 *   group > 1: for each K/V head: its heads in blocks of nr, nr / 2, ..., 1: rows: fa16_block
 *   group 1:   the heads in blocks of nr, nr / 2, ..., 1:                   rows: fa16_block
 *
 * Blocks of nr = V / 2 heads (8 under AVX-512, 4 under AVX2: the lanes e^x takes, in double),
 * whatever DV: their accumulators (DV / V vectors a head) do not fit the registers from DV 64
 * under AVX-512 (and any DV under AVX2), and LLVM spills some of them in the key loop, but
 * fewer heads cost more. bench_fa, Xeon model 167 (one thread, 15 rounds, ggml/opjit): heads
 * of 128 under AVX-512 ran 2.1-2.3x ggml with blocks of 8, 1.7-2.0x with 6, 1.7-1.8x with 2 (no
 * vector spill in the key loop); AVX2 heads of 64 2.0x with 4 against 1.1x with 1 (none
 * spilled). e^x (a gather, in double), the sums across lanes and the branches are taken once
 * per key for the block: a spill's store and load, forwarded from L1, cost less than their
 * share. Smaller blocks after the big ones take what is left (a thread's 6 heads: 4 and 2). */
#include "fa.h"
#include "gemm.h"
#include "irloop.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAXV 16         /* lanes of a vector, at most */
#define MAXR 8          /* rows of a block, at most */
#define MAXNJ 4         /* vectors of a key tile, at most */
#define MAXDVC 4        /* vectors of outputs accumulated at once, at most */
#define EXP_MIN -120.0f /* e^x below this is 0 (ggml's is 0 below about -103.9 too) */

typedef struct fgen_s {
  LLVMContextRef cx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMValueRef fn;
  const jt_gemm_t *s;
  LLVMTypeRef f32, f64, vec, i64, i32, i16, half, hvec, ivec, ptr, args_t;
  int V, NJ, TJ, R, DVC, DK, DV;
  LLVMValueRef fma;
  LLVMTypeRef fma_t;
  char name[128];
} fgen_t;

static LLVMValueRef c64(fgen_t *g, long v)
{
  return LLVMConstInt(g->i64, (unsigned long long)v, 1);
}
static LLVMValueRef c32(fgen_t *g, long v)
{
  return LLVMConstInt(g->i32, (unsigned long long)v, 1);
}
static LLVMValueRef cf(fgen_t *g, double v) { return LLVMConstReal(g->f32, v); }

static LLVMValueRef vconst(fgen_t *g, double v)
{
  LLVMValueRef e[MAXV];
  for (int i = 0; i < g->V; i++)
    e[i] = cf(g, v);
  return LLVMConstVector(e, (unsigned)g->V);
}

static LLVMValueRef add(fgen_t *g, LLVMValueRef x, LLVMValueRef y)
{
  return LLVMBuildNSWAdd(g->b, x, y, "");
}
static LLVMValueRef mulc(fgen_t *g, LLVMValueRef x, long y)
{
  return LLVMBuildNSWMul(g->b, x, c64(g, y), "");
}

/* &base[index] for elements of type t. */
static LLVMValueRef gep(fgen_t *g, LLVMTypeRef t, LLVMValueRef base, LLVMValueRef index)
{
  return LLVMBuildInBoundsGEP2(g->b, t, base, &index, 1, "p");
}

static LLVMValueRef ld(fgen_t *g, LLVMTypeRef t, LLVMValueRef p, unsigned align)
{
  LLVMValueRef v = LLVMBuildLoad2(g->b, t, p, "");
  LLVMSetAlignment(v, align);
  return v;
}

static void st(fgen_t *g, LLVMValueRef v, LLVMValueRef p, unsigned align)
{
  LLVMSetAlignment(LLVMBuildStore(g->b, v, p), align);
}

/* A float vector at f32 element index ix of base. */
static LLVMValueRef vld(fgen_t *g, LLVMValueRef base, LLVMValueRef ix)
{
  return ld(g, g->vec, gep(g, g->f32, base, ix), 4);
}

static void vst(fgen_t *g, LLVMValueRef v, LLVMValueRef base, LLVMValueRef ix)
{
  st(g, v, gep(g, g->f32, base, ix), 4);
}

static LLVMValueRef splat(fgen_t *g, LLVMValueRef scalar)
{
  LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(scalar), (unsigned)g->V);
  LLVMValueRef v = LLVMBuildInsertElement(g->b, LLVMGetUndef(vt), scalar, c32(g, 0), "");
  return LLVMBuildShuffleVector(g->b, v, LLVMGetUndef(vt),
                                LLVMConstNull(LLVMVectorType(g->i32, (unsigned)g->V)), "splat");
}

static LLVMValueRef fma3(fgen_t *g, LLVMValueRef a, LLVMValueRef x, LLVMValueRef y)
{
  LLVMValueRef args[3] = {a, x, y};
  return LLVMBuildCall2(g->b, g->fma_t, g->fma, args, 3, "");
}

static LLVMValueRef intrinsic(fgen_t *g, const char *name, LLVMTypeRef *types, size_t n,
                              LLVMTypeRef *fn_type)
{
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(g->mod, id, types, n);
  *fn_type = LLVMGlobalGetValueType(f);
  return f;
}

/* 0, 1, ..., V-1 as i64 lanes. */
static LLVMValueRef iota(fgen_t *g)
{
  LLVMValueRef e[MAXV];
  for (int i = 0; i < g->V; i++)
    e[i] = c64(g, i);
  return LLVMConstVector(e, (unsigned)g->V);
}

/* Lanes of v combined pairwise down to lane 0 (halves first, as _mm512_reduce_add_ps): op 0
 * adds, 1 takes the maximum. */
static LLVMValueRef reduce(fgen_t *g, LLVMValueRef v, int max)
{
  for (int w = g->V / 2; w >= 1; w /= 2) {
    LLVMValueRef m[MAXV];
    for (int i = 0; i < g->V; i++)
      m[i] = c32(g, i < w ? i + w : i);
    LLVMValueRef hi = LLVMBuildShuffleVector(g->b, v, v, LLVMConstVector(m, (unsigned)g->V), "");
    v = max ? LLVMBuildSelect(g->b, LLVMBuildFCmp(g->b, LLVMRealOGT, v, hi, ""), v, hi, "")
            : LLVMBuildFAdd(g->b, v, hi, "");
  }
  return LLVMBuildExtractElement(g->b, v, c32(g, 0), "");
}

/* e^x for x <= 0 (or NaN), lane by lane: ggml's ggml_v_expf (x = n ln2 + b, a degree-5
 * polynomial in b, times 2^n), 2^n applied in two exact halves (n >= -174 here); 0 below
 * EXP_MIN. */
static LLVMValueRef vexp(fgen_t *g, LLVMValueRef x)
{
  LLVMBuilderRef b = g->b;
  LLVMValueRef low = LLVMBuildFCmp(b, LLVMRealOLT, x, vconst(g, EXP_MIN), "");
  LLVMValueRef xc = LLVMBuildSelect(b, low, vconst(g, EXP_MIN), x, "");
  LLVMValueRef r = vconst(g, 0x1.8p23);
  LLVMValueRef z = fma3(g, xc, vconst(g, 0x1.715476p+0), r);
  LLVMValueRef n = LLVMBuildFSub(b, z, r, "n");
  LLVMValueRef nn = LLVMBuildFNeg(b, n, "");
  LLVMValueRef bb = fma3(g, nn, vconst(g, 0x1.7f7d1cp-20), fma3(g, nn, vconst(g, 0x1.62e4p-1), xc));
  LLVMValueRef u = LLVMBuildFMul(b, bb, bb, "u");
  LLVMValueRef j = fma3(g,
                        fma3(g, fma3(g, vconst(g, 0x1.0e4020p-7), bb, vconst(g, 0x1.573e2ep-5)), u,
                             fma3(g, vconst(g, 0x1.555e66p-3), bb, vconst(g, 0x1.fffdb6p-2))),
                        u, fma3(g, vconst(g, 0x1.ffffecp-1), bb, vconst(g, 1.0)));
  LLVMValueRef ni = LLVMBuildFPToSI(b, n, g->ivec, "ni");
  LLVMValueRef one = splat(g, c32(g, 1)), bias = splat(g, c32(g, 127)), sh = splat(g, c32(g, 23));
  LLVMValueRef h1 = LLVMBuildAShr(b, ni, one, "");
  LLVMValueRef h2 = LLVMBuildSub(b, ni, h1, "");
  LLVMValueRef p1 =
      LLVMBuildBitCast(b, LLVMBuildShl(b, LLVMBuildAdd(b, h1, bias, ""), sh, ""), g->vec, "");
  LLVMValueRef p2 =
      LLVMBuildBitCast(b, LLVMBuildShl(b, LLVMBuildAdd(b, h2, bias, ""), sh, ""), g->vec, "");
  LLVMValueRef res = LLVMBuildFMul(b, LLVMBuildFMul(b, j, p1, ""), p2, "e");
  return LLVMBuildSelect(b, low, vconst(g, 0), res, "");
}

/* ---- loops -------------------------------------------------------------------------------- */

/* A straight loop of n (> 0, a multiple of unroll) iterations whose cnt vector values are phis
 * (acc: their values on entry, and on exit): body(g, iv, acc, ctx) updates acc for iteration
 * iv, unroll times per trip. */
typedef void body_fn(fgen_t *g, LLVMValueRef iv, LLVMValueRef *acc, void *ctx);
static void acc_loop(fgen_t *g, long n, int unroll, LLVMValueRef *acc, int cnt, body_fn *body,
                     void *ctx, const char *name)
{
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(g->cx, g->fn, name);
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->cx, g->fn, "exit");
  LLVMBuildBr(g->b, loop);
  LLVMPositionBuilderAtEnd(g->b, loop);
  LLVMValueRef iv = LLVMBuildPhi(g->b, g->i64, "iv"), phi[MAXR * MAXNJ], zero = c64(g, 0);
  LLVMAddIncoming(iv, &zero, &pre, 1);
  for (int a = 0; a < cnt; a++) {
    phi[a] = LLVMBuildPhi(g->b, g->vec, "acc");
    LLVMAddIncoming(phi[a], &acc[a], &pre, 1);
    acc[a] = phi[a];
  }
  for (int u = 0; u < unroll; u++)
    body(g, u ? add(g, iv, c64(g, u)) : iv, acc, ctx);
  LLVMValueRef next = add(g, iv, c64(g, unroll));
  LLVMBasicBlockRef from = LLVMGetInsertBlock(g->b);
  LLVMAddIncoming(iv, &next, &from, 1);
  for (int a = 0; a < cnt; a++)
    LLVMAddIncoming(phi[a], &acc[a], &from, 1);
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, next, c64(g, n), ""), loop, exit);
  LLVMPositionBuilderAtEnd(g->b, exit);
}

/* ---- the kernel ----------------------------------------------------------------------------- */

/* What the loops of one call read. */
typedef struct call_s {
  LLVMValueRef q, k, v, mask, out, qs, ks, vs, ms, os, nkv, i0, i1, scale;
  LLVMValueRef kt, v32, p, o, stat; /* scratch: KT, V32, P (R x TJ), O (R x DV), stats */
  LLVMValueRef tile, j0;            /* the key tile (its index, its first key) */
  LLVMValueRef row[MAXR];           /* the block's query rows (clamped to i1 - 1) */
  int c0;                           /* GEMM2: the first output vector of the chunk */
} call_t;

/* stats: m[r] at r, l[r] at MAXR + r, alpha[r] at 2 MAXR + r */
static LLVMValueRef stat_at(fgen_t *g, call_t *c, int which, int r)
{
  return gep(g, g->f32, c->stat, c64(g, which * MAXR + r));
}

/* Keys transposed into KT[tile][d][TJ] and values converted into V32[j][DV], zero past n_kv. */
static void pack(fgen_t *g, call_t *c, LLVMValueRef ntiles)
{
  LLVMBuilderRef b = g->b;
  LLVMTypeRef gv[2] = {g->ivec, LLVMVectorType(g->ptr, (unsigned)g->V)}, gt;
  LLVMValueRef gather = intrinsic(g, "llvm.masked.gather", gv, 2, &gt);
  LLVMTypeRef h16 = LLVMVectorType(g->i16, (unsigned)g->V);
  jt_loop_t t = jt_loop_open(g->b, g->fn, c64(g, 0), ntiles, 1, "kt_tile");
  for (int vv = 0; vv < g->NJ; vv++) {
    LLVMValueRef j =
        add(g, splat(g, add(g, mulc(g, t.iv, g->TJ), c64(g, (long)vv * g->V))), iota(g));
    LLVMValueRef valid = LLVMBuildICmp(b, LLVMIntSLT, j, splat(g, c->nkv), "valid");
    LLVMValueRef rowoff = LLVMBuildMul(b, j, splat(g, c->ks), "");
    jt_loop_t d = jt_loop_open(g->b, g->fn, c64(g, 0), c64(g, g->DK), 2, "kt_d");
    LLVMValueRef off = LLVMBuildAdd(b, rowoff, splat(g, d.iv), "");
    LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(b, g->i16, c->k, &off, 1, "ptrs");
    LLVMValueRef args[4] = {ptrs, c32(g, 2), valid, LLVMConstNull(g->ivec)};
    LLVMValueRef pair = LLVMBuildCall2(b, gt, gather, args, 4, "pair");
    LLVMValueRef lo = LLVMBuildTrunc(b, pair, h16, "");
    LLVMValueRef hi = LLVMBuildTrunc(b, LLVMBuildLShr(b, pair, splat(g, c32(g, 16)), ""), h16, "");
    LLVMValueRef base =
        add(g, mulc(g, add(g, mulc(g, t.iv, g->DK), d.iv), g->TJ), c64(g, (long)vv * g->V));
    vst(g, LLVMBuildFPExt(b, LLVMBuildBitCast(b, lo, g->hvec, ""), g->vec, ""), c->kt, base);
    vst(g, LLVMBuildFPExt(b, LLVMBuildBitCast(b, hi, g->hvec, ""), g->vec, ""), c->kt,
        add(g, base, c64(g, g->TJ)));
    jt_loop_close(g->b, &d);
  }
  jt_loop_close(g->b, &t);
  jt_loop_t j = jt_loop_open(g->b, g->fn, c64(g, 0), c->nkv, 1, "v32");
  for (int cc = 0; cc < g->DV / g->V; cc++) {
    LLVMValueRef src =
        gep(g, g->half, c->v, add(g, LLVMBuildMul(b, j.iv, c->vs, ""), c64(g, (long)cc * g->V)));
    vst(g, LLVMBuildFPExt(b, ld(g, g->hvec, src, 2), g->vec, ""), c->v32,
        add(g, mulc(g, j.iv, g->DV), c64(g, (long)cc * g->V)));
  }
  jt_loop_close(g->b, &j);
  jt_loop_t z = jt_loop_open(g->b, g->fn, c->nkv, mulc(g, ntiles, g->TJ), 1, "v32_pad");
  for (int cc = 0; cc < g->DV / g->V; cc++)
    vst(g, vconst(g, 0), c->v32, add(g, mulc(g, z.iv, g->DV), c64(g, (long)cc * g->V)));
  jt_loop_close(g->b, &z);
}

/* GEMM1's k step: acc[r][v] += q[row r][d] * KT[tile][d][v]. */
static void scores_step(fgen_t *g, LLVMValueRef d, LLVMValueRef *acc, void *ctx)
{
  call_t *c = ctx;
  LLVMValueRef kt[MAXNJ];
  LLVMValueRef base = mulc(g, add(g, mulc(g, c->tile, g->DK), d), g->TJ);
  for (int v = 0; v < g->NJ; v++)
    kt[v] = vld(g, c->kt, add(g, base, c64(g, (long)v * g->V)));
  for (int r = 0; r < g->R; r++) {
    LLVMValueRef qp = gep(g, g->f32, c->q, add(g, LLVMBuildMul(g->b, c->row[r], c->qs, ""), d));
    LLVMValueRef qb = splat(g, ld(g, g->f32, qp, 4));
    for (int v = 0; v < g->NJ; v++)
      acc[r * g->NJ + v] = fma3(g, kt[v], qb, acc[r * g->NJ + v]);
  }
}

/* GEMM2's k step: acc[r][cc] += P[r][jj] * V32[j0 + jj][c0 + cc]. */
static void values_step(fgen_t *g, LLVMValueRef jj, LLVMValueRef *acc, void *ctx)
{
  call_t *c = ctx;
  LLVMValueRef vv[MAXDVC];
  LLVMValueRef base = mulc(g, add(g, c->j0, jj), g->DV);
  for (int cc = 0; cc < g->DVC; cc++)
    vv[cc] = vld(g, c->v32, add(g, base, c64(g, (long)(c->c0 + cc) * g->V)));
  for (int r = 0; r < g->R; r++) {
    LLVMValueRef pb =
        splat(g, ld(g, g->f32, gep(g, g->f32, c->p, add(g, c64(g, (long)r * g->TJ), jj)), 4));
    for (int cc = 0; cc < g->DVC; cc++)
      acc[r * g->DVC + cc] = fma3(g, vv[cc], pb, acc[r * g->DVC + cc]);
  }
}

/* One key tile of one row block (the builder inside the tile loop). */
static void tile(fgen_t *g, call_t *c)
{
  LLVMBuilderRef b = g->b;
  int R = g->R, NJ = g->NJ;
  /* the mask, -inf past n_kv (masked lanes are not read) */
  LLVMTypeRef mt[2] = {g->hvec, g->ptr}, mft;
  LLVMValueRef mload = intrinsic(g, "llvm.masked.load", mt, 2, &mft);
  LLVMValueRef ninf_h = LLVMConstReal(g->half, -INFINITY), ninf_hv[MAXV];
  for (int i = 0; i < g->V; i++)
    ninf_hv[i] = ninf_h;
  LLVMValueRef pass = LLVMConstVector(ninf_hv, (unsigned)g->V);
  LLVMValueRef ninf = vconst(g, -INFINITY), mk[MAXR * MAXNJ], any = NULL;
  for (int v = 0; v < NJ; v++) {
    LLVMValueRef j = add(g, splat(g, add(g, c->j0, c64(g, (long)v * g->V))), iota(g));
    LLVMValueRef valid = LLVMBuildICmp(b, LLVMIntSLT, j, splat(g, c->nkv), "valid");
    for (int r = 0; r < R; r++) {
      LLVMValueRef p =
          gep(g, g->half, c->mask,
              add(g, LLVMBuildMul(b, c->row[r], c->ms, ""), add(g, c->j0, c64(g, (long)v * g->V))));
      LLVMValueRef args[4] = {p, c32(g, 2), valid, pass};
      mk[r * NJ + v] = LLVMBuildFPExt(b, LLVMBuildCall2(b, mft, mload, args, 4, "m"), g->vec, "");
      LLVMValueRef live = LLVMBuildFCmp(b, LLVMRealUNE, mk[r * NJ + v], ninf, "");
      any = any ? LLVMBuildOr(b, any, live, "") : live;
    }
  }
  LLVMTypeRef iv = LLVMIntTypeInContext(g->cx, (unsigned)g->V);
  LLVMValueRef live =
      LLVMBuildICmp(b, LLVMIntNE, LLVMBuildBitCast(b, any, iv, ""), LLVMConstInt(iv, 0, 0), "");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->cx, g->fn, "tile");
  LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(g->cx, g->fn, "tile_done");
  LLVMBuildCondBr(b, live, body, after);
  LLVMPositionBuilderAtEnd(b, body);
  /* scores */
  LLVMValueRef acc[MAXR * MAXNJ];
  for (int a = 0; a < R * NJ; a++)
    acc[a] = vconst(g, 0);
  acc_loop(g, g->DK, 2, acc, R * NJ, scores_step, c, "scores");
  LLVMValueRef scale = splat(g, c->scale);
  for (int r = 0; r < R; r++) {
    LLVMValueRef s[MAXNJ], tmax = NULL;
    for (int v = 0; v < NJ; v++) {
      s[v] = LLVMBuildFAdd(b, LLVMBuildFMul(b, acc[r * NJ + v], scale, ""), mk[r * NJ + v], "s");
      tmax = tmax
                 ? LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, tmax, s[v], ""), tmax, s[v], "")
                 : s[v];
    }
    LLVMValueRef mx = reduce(g, tmax, 1);
    LLVMValueRef mold = ld(g, g->f32, stat_at(g, c, 0, r), 4),
                 lold = ld(g, g->f32, stat_at(g, c, 1, r), 4);
    LLVMValueRef skip = LLVMBuildFCmp(b, LLVMRealOEQ, mx, cf(g, -INFINITY), "skip");
    LLVMValueRef grows = LLVMBuildFCmp(b, LLVMRealOGT, mx, mold, "");
    LLVMValueRef mnew = LLVMBuildSelect(b, grows, mx, mold, "mnew");
    LLVMValueRef ediff = LLVMBuildExtractElement(
        b, vexp(g, splat(g, LLVMBuildFSub(b, mold, mnew, ""))), c32(g, 0), "");
    LLVMValueRef alpha = LLVMBuildSelect(b, grows, ediff, cf(g, 1.0), "alpha");
    LLVMValueRef sum = LLVMConstReal(g->f64, 0), msplat = splat(g, mnew), zero = vconst(g, 0);
    for (int v = 0; v < NJ; v++) {
      LLVMValueRef p = vexp(g, LLVMBuildFSub(b, s[v], msplat, ""));
      p = LLVMBuildSelect(b, skip, zero, p, "p");
      vst(g, p, c->p, c64(g, (long)r * g->TJ + (long)v * g->V));
      sum = LLVMBuildFAdd(b, sum, LLVMBuildFPExt(b, reduce(g, p, 0), g->f64, ""), "");
    }
    LLVMValueRef l1 = LLVMBuildFMul(b, lold, alpha, "");
    LLVMValueRef lnew = LLVMBuildFPTrunc(
        b, LLVMBuildFAdd(b, LLVMBuildFPExt(b, l1, g->f64, ""), sum, ""), g->f32, "");
    st(g, LLVMBuildSelect(b, skip, mold, mnew, ""), stat_at(g, c, 0, r), 4);
    st(g, LLVMBuildSelect(b, skip, lold, lnew, ""), stat_at(g, c, 1, r), 4);
    st(g, LLVMBuildSelect(b, skip, cf(g, 1.0), alpha, ""), stat_at(g, c, 2, r), 4);
  }
  /* outputs: rescaled, then the tile's values weighted */
  for (c->c0 = 0; c->c0 < g->DV / g->V; c->c0 += g->DVC) {
    LLVMValueRef oacc[MAXR * MAXDVC];
    for (int r = 0; r < R; r++) {
      LLVMValueRef al = splat(g, ld(g, g->f32, stat_at(g, c, 2, r), 4));
      for (int cc = 0; cc < g->DVC; cc++)
        oacc[r * g->DVC + cc] = LLVMBuildFMul(
            b, vld(g, c->o, c64(g, (long)r * g->DV + (long)(c->c0 + cc) * g->V)), al, "");
    }
    acc_loop(g, g->TJ, 2, oacc, R * g->DVC, values_step, c, "values");
    for (int r = 0; r < R; r++)
      for (int cc = 0; cc < g->DVC; cc++)
        vst(g, oacc[r * g->DVC + cc], c->o, c64(g, (long)r * g->DV + (long)(c->c0 + cc) * g->V));
  }
  LLVMBuildBr(b, after);
  LLVMPositionBuilderAtEnd(b, after);
}

/* One block of R query rows from row i. */
static void row_block(fgen_t *g, call_t *c, LLVMValueRef i, LLVMValueRef ntiles)
{
  LLVMBuilderRef b = g->b;
  LLVMValueRef last = LLVMBuildNSWSub(b, c->i1, c64(g, 1), "last");
  for (int r = 0; r < g->R; r++) {
    LLVMValueRef ir = add(g, i, c64(g, r));
    c->row[r] = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, ir, c->i1, ""), ir, last, "row");
    st(g, cf(g, -INFINITY), stat_at(g, c, 0, r), 4);
    st(g, cf(g, 0), stat_at(g, c, 1, r), 4);
    for (int cc = 0; cc < g->DV / g->V; cc++)
      vst(g, vconst(g, 0), c->o, c64(g, (long)r * g->DV + (long)cc * g->V));
  }
  jt_loop_t t = jt_loop_open(g->b, g->fn, c64(g, 0), ntiles, 1, "tile");
  c->tile = t.iv;
  c->j0 = mulc(g, t.iv, g->TJ);
  tile(g, c);
  jt_loop_close(g->b, &t);
  for (int r = 0; r < g->R; r++) {
    LLVMValueRef keep = LLVMBuildICmp(b, LLVMIntSLT, add(g, i, c64(g, r)), c->i1, "");
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(g->cx, g->fn, "store");
    LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(g->cx, g->fn, "stored");
    LLVMBuildCondBr(b, keep, then, after);
    LLVMPositionBuilderAtEnd(b, then);
    LLVMValueRef l = ld(g, g->f32, stat_at(g, c, 1, r), 4);
    LLVMValueRef inv = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOEQ, l, cf(g, 0), ""), cf(g, 0),
                                       LLVMBuildFDiv(b, cf(g, 1.0), l, ""), "inv");
    LLVMValueRef is = splat(g, inv);
    LLVMValueRef dst = gep(g, g->f32, c->out, LLVMBuildMul(b, c->row[r], c->os, ""));
    for (int cc = 0; cc < g->DV / g->V; cc++)
      vst(g, LLVMBuildFMul(b, vld(g, c->o, c64(g, (long)r * g->DV + (long)cc * g->V)), is, ""), dst,
          c64(g, (long)cc * g->V));
    LLVMBuildBr(b, after);
    LLVMPositionBuilderAtEnd(b, after);
  }
}

/* ---- ggml's few-row path (fa == 2) ------------------------------------------------------- */

/* x rounded to f16 (to nearest even, as vcvtps2ph $0) and back. */
static LLVMValueRef r16(fgen_t *g, LLVMValueRef x)
{
  return LLVMBuildFPExt(g->b, LLVMBuildFPTrunc(g->b, x, g->hvec, ""), g->vec, "r16");
}

/* Lane r of the result: t[r]'s lanes summed in the order of ggml's GGML_F32Cx16_REDUCE (halves
 * first, down to one) or, for 8 lanes, GGML_F32Cx8_REDUCE (halves, then two horizontal adds:
 * (0 + 1) + (2 + 3)), for r < n <= V. The n sums are taken level by level side by side: each
 * level pairs the vectors, whose heads hold L lanes each, into vectors of twice the heads of
 * L / 2 lanes, adding the lanes ggml's level adds (a missing partner repeats the last vector). */
static LLVMValueRef tsum(fgen_t *g, const LLVMValueRef *t, int n)
{
  LLVMValueRef cur[MAXV], next[MAXV];
  memcpy(cur, t, (size_t)n * sizeof *t);
  for (int L = g->V; L > 1; L /= 2) {
    int G = g->V / L, half = L / 2, adjacent = g->V == 8 && L == 4, nn = 0;
    for (int p = 0; p < n; p += 2) {
      LLVMValueRef m1[MAXV], m2[MAXV];
      for (int h = 0; h < 2 * G; h++)
        for (int i = 0; i < half; i++) {
          int at = (h < G ? 0 : g->V) + h % G * L;
          m1[h * half + i] = c32(g, at + (adjacent ? 2 * i : i));
          m2[h * half + i] = c32(g, at + (adjacent ? 2 * i + 1 : i + half));
        }
      LLVMValueRef x = cur[p], y = cur[p + 1 < n ? p + 1 : p];
      next[nn++] = LLVMBuildFAdd(
          g->b, LLVMBuildShuffleVector(g->b, x, y, LLVMConstVector(m1, (unsigned)g->V), ""),
          LLVMBuildShuffleVector(g->b, x, y, LLVMConstVector(m2, (unsigned)g->V), ""), "");
    }
    memcpy(cur, next, (size_t)nn * sizeof *next);
    n = nn;
  }
  return cur[0];
}

/* n copies of constant c. */
static LLVMValueRef cvec(LLVMValueRef c, unsigned n)
{
  LLVMValueRef e[MAXV];
  for (unsigned i = 0; i < n; i++)
    e[i] = c;
  return LLVMConstVector(e, n);
}

/* glibc's expf (sysdeps/ieee754/flt-32/e_expf.c as its FMA build computes it: every float in
 * [-104, 0] was checked bit for bit against libm's) on the first V / 2 lanes of x <= 0, the
 * others undefined: x N / ln 2 = k + r rounded by a shift, 2^(k / N) from a table of N = 32
 * entries, a cubic in r, in double; 0 below ln 2^-150 (-inf among them). */
static LLVMValueRef vexpf(fgen_t *g, LLVMValueRef x)
{
  static const unsigned long long tab[32] = {
      0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
      0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
      0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
      0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
      0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
      0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
      0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
      0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
  LLVMBuilderRef b = g->b;
  unsigned H = (unsigned)g->V / 2;
  LLVMTypeRef dv = LLVMVectorType(g->f64, H), lv = LLVMVectorType(g->i64, H), ft;
  LLVMValueRef lo[MAXV], wide[MAXV], te[32];
  for (unsigned i = 0; i < (unsigned)g->V; i++)
    lo[i] = c32(g, i % H), wide[i] = c32(g, i < H ? (long)i : 0);
  LLVMValueRef xs = LLVMBuildShuffleVector(b, x, LLVMGetUndef(g->vec), LLVMConstVector(lo, H), "");
  LLVMValueRef xd = LLVMBuildFPExt(b, xs, dv, "");
  LLVMValueRef fma = intrinsic(g, "llvm.fma", &dv, 1, &ft);
  LLVMValueRef inv = cvec(LLVMConstReal(g->f64, 0x1.71547652b82fep+0 * 32), H);
  LLVMValueRef shift = cvec(LLVMConstReal(g->f64, 0x1.8p+52), H);
  LLVMValueRef args[3] = {inv, xd, shift};
  LLVMValueRef kd = LLVMBuildCall2(b, ft, fma, args, 3, "");
  LLVMValueRef ki = LLVMBuildBitCast(b, kd, lv, "ki");
  kd = LLVMBuildFSub(b, kd, shift, "kd");
  args[2] = LLVMBuildFNeg(b, kd, "");
  LLVMValueRef r = LLVMBuildCall2(b, ft, fma, args, 3, "r");
  for (int i = 0; i < 32; i++)
    te[i] = LLVMConstInt(g->i64, tab[i], 0);
  LLVMValueRef table = LLVMAddGlobal(g->mod, LLVMArrayType(g->i64, 32), "opjit_expf_tab");
  LLVMSetInitializer(table, LLVMConstArray(g->i64, te, 32));
  LLVMSetGlobalConstant(table, 1);
  LLVMSetLinkage(table, LLVMPrivateLinkage);
  LLVMValueRef idx = LLVMBuildAnd(b, ki, cvec(LLVMConstInt(g->i64, 31, 0), H), "");
  LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(b, g->i64, table, &idx, 1, "");
  LLVMTypeRef gv[2] = {lv, LLVMVectorType(g->ptr, H)}, gt;
  LLVMValueRef gather = intrinsic(g, "llvm.masked.gather", gv, 2, &gt);
  LLVMValueRef gargs[4] = {
      ptrs, c32(g, 8), cvec(LLVMConstInt(LLVMInt1TypeInContext(g->cx), 1, 0), H), LLVMGetUndef(lv)};
  LLVMValueRef t = LLVMBuildCall2(b, gt, gather, gargs, 4, "t");
  t = LLVMBuildAdd(b, t, LLVMBuildShl(b, ki, cvec(LLVMConstInt(g->i64, 47, 0), H), ""), "");
  LLVMValueRef sc = LLVMBuildBitCast(b, t, dv, "s");
  LLVMValueRef c0 = cvec(LLVMConstReal(g->f64, 0x1.c6af84b912394p-5 / 32 / 32 / 32), H);
  LLVMValueRef c1 = cvec(LLVMConstReal(g->f64, 0x1.ebfce50fac4f3p-3 / 32 / 32), H);
  LLVMValueRef c2 = cvec(LLVMConstReal(g->f64, 0x1.62e42ff0c52d6p-1 / 32), H);
  LLVMValueRef a1[3] = {c0, r, c1}, a2[3] = {c2, r, cvec(LLVMConstReal(g->f64, 1.0), H)};
  LLVMValueRef z = LLVMBuildCall2(b, ft, fma, a1, 3, "");
  LLVMValueRef y = LLVMBuildCall2(b, ft, fma, a2, 3, "");
  LLVMValueRef a3[3] = {z, LLVMBuildFMul(b, r, r, "r2"), y};
  y = LLVMBuildFMul(b, LLVMBuildCall2(b, ft, fma, a3, 3, ""), sc, "");
  LLVMValueRef low =
      LLVMBuildFCmp(b, LLVMRealOLT, xs, cvec(LLVMConstReal(g->f32, -0x1.9fe368p6f), H), "");
  LLVMValueRef e = LLVMBuildSelect(b, low, LLVMConstNull(LLVMVectorType(g->f32, H)),
                                   LLVMBuildFPTrunc(b, y, LLVMVectorType(g->f32, H), ""), "");
  return LLVMBuildShuffleVector(b, e, LLVMGetUndef(LLVMTypeOf(e)),
                                LLVMConstVector(wide, (unsigned)g->V), "expf");
}

/* Lane r of v in every lane. */
static LLVMValueRef bcast(fgen_t *g, LLVMValueRef v, int r)
{
  return LLVMBuildShuffleVector(g->b, v, LLVMGetUndef(LLVMTypeOf(v)),
                                cvec(c32(g, r), (unsigned)g->V), "");
}

/* A block of fa16_block's heads: R side by side, head r at index hr[r] of the call's, its keys
 * at kp[r] and values at vp[r]. shared: the R heads are one K/V group's (kp[r] and vp[r] are the
 * first's), and each key's vectors are converted once for them all. */
typedef struct fa16_blk_s {
  int R, shared;
  LLVMValueRef hr[MAXR], kp[MAXR], vp[MAXR];
} fa16_blk_t;

/* Query row i of block k's heads over keys [c0, c1) (the builder in the rows loop's body); qbuf:
 * k->R DK floats of the caller's, for the rounded queries; hs: the call's q, k, v and out head
 * strides. The heads go through each key side by side: their scores summed across lanes
 * together (tsum), the softmax's steps on a vector of the heads, e^x by vexpf, the accumulators
 * rescaled when any head's maximum grows (by 1, exactly, for the others). Each head's dot
 * product keeps ggml's 4 partial sums: a shared block takes the key's vectors one at a time into
 * every head's sums (4 R registers), an unshared one a head at a time (4). */
static void fa16_block(fgen_t *g, call_t *c, const fa16_blk_t *k, LLVMValueRef c0, LLVMValueRef c1,
                       LLVMValueRef msout, LLVMValueRef heads, const LLVMValueRef *hs,
                       LLVMValueRef i, LLVMValueRef qbuf)
{
  LLVMBuilderRef b = g->b;
  int NQ = g->DK / g->V, NO = g->DV / g->V, R = k->R;
  for (int r = 0; r < R; r++) {
    LLVMValueRef qoff = add(g, LLVMBuildMul(b, k->hr[r], hs[0], ""), LLVMBuildMul(b, i, c->qs, ""));
    LLVMValueRef qp = gep(g, g->f32, c->q, qoff);
    for (int d = 0; d < NQ; d++)
      vst(g, r16(g, vld(g, qp, c64(g, (long)d * g->V))), qbuf, c64(g, (long)(r * NQ + d) * g->V));
  }
  LLVMValueRef mrow = LLVMBuildMul(b, i, c->ms, "");
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(g->cx, g->fn, "key");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->cx, g->fn, "key_body");
  LLVMBasicBlockRef live = LLVMAppendBasicBlockInContext(g->cx, g->fn, "key_live");
  LLVMBasicBlockRef grow = LLVMAppendBasicBlockInContext(g->cx, g->fn, "key_grows");
  LLVMBasicBlockRef mad = LLVMAppendBasicBlockInContext(g->cx, g->fn, "key_mad");
  LLVMBasicBlockRef latch = LLVMAppendBasicBlockInContext(g->cx, g->fn, "key_next");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->cx, g->fn, "keys_done");
  LLVMBuildBr(b, head);
  /* head: the key, the heads' maxima M and sums S, their accumulators */
  LLVMPositionBuilderAtEnd(b, head);
  LLVMValueRef zero = vconst(g, 0), minf = vconst(g, -INFINITY), acc[MAXR * JT_FA_MAX_D / 8];
  LLVMValueRef j = LLVMBuildPhi(b, g->i64, "j"), m = LLVMBuildPhi(b, g->vec, "M"),
               sum = LLVMBuildPhi(b, g->vec, "S");
  LLVMAddIncoming(j, &c0, &pre, 1);
  LLVMAddIncoming(m, &minf, &pre, 1);
  LLVMAddIncoming(sum, &zero, &pre, 1);
  for (int a = 0; a < R * NO; a++) {
    acc[a] = LLVMBuildPhi(b, g->vec, "vkq");
    LLVMAddIncoming(acc[a], &zero, &pre, 1);
  }
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, j, c1, ""), body, exit);
  /* body: the mask (every head's) leaves the key out, or not */
  LLVMPositionBuilderAtEnd(b, body);
  LLVMValueRef mv =
      LLVMBuildFPExt(b, ld(g, g->half, gep(g, g->half, c->mask, add(g, mrow, j)), 2), g->f32, "mv");
  LLVMBuildCondBr(b, LLVMBuildFCmp(b, LLVMRealOEQ, mv, cf(g, -INFINITY), ""), latch, live);
  /* live: the scores, the new maxima, e^x */
  LLVMPositionBuilderAtEnd(b, live);
  LLVMValueRef t[MAXR], part[MAXR][4], koff = LLVMBuildMul(b, j, c->ks, "");
  for (int r = 0; r < R; r++)
    for (int p = 0; p < 4; p++)
      part[r][p] = NULL;
  for (int r = 0; r < (k->shared ? 1 : R); r++) {
    LLVMValueRef kr = gep(g, g->half, k->kp[r], koff);
    for (int d = 0; d < NQ; d++) {
      LLVMValueRef kv = LLVMBuildFPExt(
          b, ld(g, g->hvec, gep(g, g->half, kr, c64(g, (long)d * g->V)), 2), g->vec, "");
      for (int u = k->shared ? 0 : r; u < (k->shared ? R : r + 1); u++) {
        LLVMValueRef qv = vld(g, qbuf, c64(g, (long)(u * NQ + d) * g->V)), *pp = &part[u][d % 4];
        *pp = *pp ? fma3(g, kv, qv, *pp) : LLVMBuildFMul(b, kv, qv, "");
      }
    }
    for (int u = k->shared ? 0 : r; u < (k->shared ? R : r + 1); u++)
      t[u] = LLVMBuildFAdd(b, LLVMBuildFAdd(b, part[u][0], part[u][2], ""),
                           LLVMBuildFAdd(b, part[u][1], part[u][3], ""), "");
  }
  LLVMValueRef s =
      LLVMBuildFAdd(b, LLVMBuildFMul(b, tsum(g, t, R), splat(g, c->scale), ""), splat(g, mv), "s");
  LLVMValueRef grows = LLVMBuildFCmp(b, LLVMRealOGT, s, m, "grows");
  LLVMValueRef e = vexpf(
      g, LLVMBuildSelect(b, grows, LLVMBuildFSub(b, m, s, ""), LLVMBuildFSub(b, s, m, ""), ""));
  LLVMValueRef one = vconst(g, 1.0), ms = LLVMBuildSelect(b, grows, e, one, "ms");
  LLVMTypeRef bits = LLVMIntTypeInContext(g->cx, (unsigned)g->V);
  LLVMValueRef any = LLVMBuildAnd(b, LLVMBuildBitCast(b, grows, bits, ""),
                                  LLVMConstInt(bits, (1ull << R) - 1, 0), "");
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntNE, any, LLVMConstInt(bits, 0, 0), ""), grow, mad);
  /* grows: the accumulators rescaled (by 1 where the maximum stays) */
  LLVMPositionBuilderAtEnd(b, grow);
  LLVMValueRef scaled[MAXR * JT_FA_MAX_D / 8];
  for (int r = 0; r < R; r++) {
    LLVMValueRef f = bcast(g, ms, r);
    for (int o = 0; o < NO; o++)
      scaled[r * NO + o] = r16(g, LLVMBuildFMul(b, acc[r * NO + o], f, ""));
  }
  LLVMBuildBr(b, mad);
  /* mad: the values added at their weights (a shared value vector into every head's) */
  LLVMPositionBuilderAtEnd(b, mad);
  LLVMValueRef cur[MAXR * JT_FA_MAX_D / 8], nacc[MAXR * JT_FA_MAX_D / 8];
  for (int a = 0; a < R * NO; a++) {
    cur[a] = LLVMBuildPhi(b, g->vec, "");
    LLVMAddIncoming(cur[a], &acc[a], &live, 1);
    LLVMAddIncoming(cur[a], &scaled[a], &grow, 1);
  }
  LLVMValueRef vs = LLVMBuildSelect(b, grows, one, e, "vs"), voff = LLVMBuildMul(b, j, c->vs, "");
  LLVMValueRef w[MAXR];
  for (int r = 0; r < (k->shared ? 1 : R); r++) {
    LLVMValueRef vr = gep(g, g->half, k->vp[r], voff);
    for (int o = 0; o < NO; o++) {
      LLVMValueRef vv = LLVMBuildFPExt(
          b, ld(g, g->hvec, gep(g, g->half, vr, c64(g, (long)o * g->V)), 2), g->vec, "");
      for (int u = k->shared ? 0 : r; u < (k->shared ? R : r + 1); u++) {
        if (!o)
          w[u] = bcast(g, vs, u);
        nacc[u * NO + o] = r16(g, fma3(g, vv, w[u], cur[u * NO + o]));
      }
    }
  }
  LLVMValueRef nsum = LLVMBuildFAdd(b, LLVMBuildFMul(b, sum, ms, ""), vs, "");
  LLVMValueRef nm = LLVMBuildSelect(b, grows, s, m, "");
  LLVMBuildBr(b, latch);
  /* latch: the next key */
  LLVMPositionBuilderAtEnd(b, latch);
  LLVMBasicBlockRef from[2] = {body, mad};
  LLVMValueRef lm = LLVMBuildPhi(b, g->vec, ""), ls = LLVMBuildPhi(b, g->vec, "");
  LLVMValueRef mi[2] = {m, nm}, si[2] = {sum, nsum};
  LLVMAddIncoming(lm, mi, from, 2);
  LLVMAddIncoming(ls, si, from, 2);
  for (int a = 0; a < R * NO; a++) {
    LLVMValueRef la = LLVMBuildPhi(b, g->vec, ""), ai[2] = {acc[a], nacc[a]};
    LLVMAddIncoming(la, ai, from, 2);
    LLVMAddIncoming(acc[a], &la, &latch, 1);
  }
  LLVMValueRef next = add(g, j, c64(g, 1));
  LLVMAddIncoming(j, &next, &latch, 1);
  LLVMAddIncoming(m, &lm, &latch, 1);
  LLVMAddIncoming(sum, &ls, &latch, 1);
  LLVMBuildBr(b, head);
  /* the heads' accumulators, maxima and sums */
  LLVMPositionBuilderAtEnd(b, exit);
  LLVMValueRef at0 = LLVMBuildMul(b, LLVMBuildNSWSub(b, i, c->i0, ""), heads, "");
  for (int r = 0; r < R; r++) {
    LLVMValueRef dst =
        gep(g, g->f32, c->out,
            add(g, LLVMBuildMul(b, k->hr[r], hs[3], ""), LLVMBuildMul(b, i, c->os, "")));
    for (int o = 0; o < NO; o++)
      vst(g, acc[r * NO + o], dst, c64(g, (long)o * g->V));
    LLVMValueRef at = mulc(g, add(g, at0, k->hr[r]), 2);
    st(g, LLVMBuildExtractElement(b, m, c32(g, r), ""), gep(g, g->f32, msout, at), 4);
    st(g, LLVMBuildExtractElement(b, sum, c32(g, r), ""),
       gep(g, g->f32, msout, add(g, at, c64(g, 1))), 4);
  }
}

/* The rows of the R heads from h of a call (f its arguments), rows loop inside (fa16_block).
 * Unshared (shared 0): each head's K/V head its own ((head0 + head) / group - head0 / group: any
 * grouping); shared: all K/V head kvh. */
static void fa16_rows(fgen_t *g, call_t *c, int R, int shared, LLVMValueRef h, LLVMValueRef kvh,
                      LLVMValueRef group, LLVMValueRef head0, LLVMValueRef *f, LLVMValueRef qbuf)
{
  LLVMBuilderRef b = g->b;
  fa16_blk_t k = {.R = R, .shared = shared};
  LLVMValueRef first = shared ? NULL : LLVMBuildSDiv(b, head0, group, "");
  for (int r = 0; r < R; r++) {
    k.hr[r] = add(g, h, c64(g, r));
    LLVMValueRef u =
        shared ? kvh
               : LLVMBuildNSWSub(b, LLVMBuildSDiv(b, add(g, head0, k.hr[r]), group, ""), first, "");
    k.kp[r] = gep(g, g->half, c->k, LLVMBuildMul(b, u, f[18], ""));
    k.vp[r] = gep(g, g->half, c->v, LLVMBuildMul(b, u, f[19], ""));
  }
  jt_loop_t i = jt_loop_open(b, g->fn, c->i0, c->i1, 1, "rows");
  fa16_block(g, c, &k, f[14], f[15], f[21], f[16], f + 17, i.iv, qbuf);
  jt_loop_close(b, &i);
}

/* Heads [h, end) in blocks of g->R heads, then of half as many, down to one: whole blocks, no
 * head computed twice (12 heads of one call under AVX-512: 8 and 4; a thread's 6: 4 and 2). */
static void fa16_blocks(fgen_t *g, call_t *c, int shared, LLVMValueRef h, LLVMValueRef end,
                        LLVMValueRef kvh, LLVMValueRef group, LLVMValueRef *f, LLVMValueRef qbuf)
{
  for (int R = g->R; R >= 1; R /= 2) {
    jt_loop_t l = jt_loop_open(g->b, g->fn, h, LLVMBuildNSWSub(g->b, end, c64(g, R - 1), ""), R,
                               shared ? "group_heads" : "heads");
    fa16_rows(g, c, R, shared, l.iv, kvh, group, f[23], f, qbuf);
    jt_loop_close(g->b, &l);
    h = l.iv;
  }
}

static int isa_bits(int isa) { return isa == JT_ISA_AVX512 ? 512 : 256; }

int jt_fa_resolve(const jt_gemm_t *s, int host_isa, jt_gemm_t *r, char *err, size_t len)
{
  *r = *s;
  r->isa = s->isa ? s->isa : host_isa;
  r->copy_a = 0, r->nc = 0, r->mc = 0, r->gemv = 0;
  if (r->isa < JT_ISA_AVX2 || r->isa >= JT_ISA_COUNT || r->isa > host_isa) {
    snprintf(err, len, "this CPU cannot run %s code (it has %s)",
             r->isa == JT_ISA_AVX512 ? "avx512"
             : r->isa == JT_ISA_AVX2 ? "avx2"
                                     : "?",
             host_isa == JT_ISA_AVX512 ? "avx512"
             : host_isa == JT_ISA_AVX2 ? "avx2"
                                       : "?");
    return -1;
  }
  r->vbits = isa_bits(r->isa);
  int V = r->vbits / 32;
  r->mr_vecs = V == 16 ? 4 : 2; /* keys per tile: 64 (4 zmm) or 16 (2 ymm) */
  r->nr = V == 16 ? 6 : 4;      /* query rows per block */
  r->tails = 0, r->kc = 0;
  if (s->fa == 2) {
    r->mr_vecs = 1, r->nr = V / 2; /* heads side by side: e^x's lanes (doubles) */
    if (s->k % (4 * V) || s->m % V || s->k > JT_FA_MAX_D || s->m > JT_FA_MAX_D) {
      snprintf(err, len,
               "f16 FLASH_ATTN_EXT kernels take a DK in steps of 4 vectors (ggml's dot) and a DV "
               "in whole vectors, both at most %d (DK %d, DV %d, %d-lane vectors)",
               JT_FA_MAX_D, s->k, s->m, V);
      return -1;
    }
    return 0;
  }
  if (s->k % 2 || s->m % V || s->k > JT_FA_MAX_D || s->m > JT_FA_MAX_D) {
    snprintf(err, len,
             "FLASH_ATTN_EXT kernels take an even DK and a DV in whole vectors, both "
             "at most %d (DK %d, DV %d)",
             JT_FA_MAX_D, s->k, s->m);
    return -1;
  }
  return 0;
}

void jt_fa_name(const jt_gemm_t *s, char *buf, size_t len)
{
  const char *isa = s->isa == JT_ISA_AVX512 ? "avx512" : "avx2";
  if (s->fa == 2)
    snprintf(buf, len, "opjit_flash_attn16_dk%d_dv%d_%s_v%d", s->k, s->m, isa, s->vbits);
  else
    snprintf(buf, len, "opjit_flash_attn_dk%d_dv%d_n%d_%s_v%d", s->k, s->m, s->n, isa, s->vbits);
}

LLVMValueRef jt_fa_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s)
{
  fgen_t g = {.cx = cx, .mod = mod, .s = s};
  g.f32 = LLVMFloatTypeInContext(cx), g.f64 = LLVMDoubleTypeInContext(cx);
  g.i64 = LLVMInt64TypeInContext(cx), g.i32 = LLVMInt32TypeInContext(cx);
  g.i16 = LLVMInt16TypeInContext(cx), g.half = LLVMHalfTypeInContext(cx);
  g.ptr = LLVMPointerTypeInContext(cx, 0);
  g.V = s->vbits / 32, g.NJ = s->mr_vecs, g.TJ = g.NJ * g.V, g.R = s->nr, g.DK = s->k, g.DV = s->m;
  g.DVC = g.DV / g.V < MAXDVC ? g.DV / g.V : MAXDVC;
  if (g.V == 8)
    g.DVC = 2; /* 4 rows x 2 ymm with the 2 value vectors and a broadcast: 16 registers */
  while ((g.DV / g.V) % g.DVC)
    g.DVC--;
  g.vec = LLVMVectorType(g.f32, (unsigned)g.V), g.hvec = LLVMVectorType(g.half, (unsigned)g.V);
  g.ivec = LLVMVectorType(g.i32, (unsigned)g.V);
  LLVMTypeRef fields[24] = {g.ptr, g.ptr, g.ptr, g.ptr, g.ptr, g.i64, g.i64, g.i64,
                            g.i64, g.i64, g.i64, g.i64, g.i64, g.f32, g.i64, g.i64,
                            g.i64, g.i64, g.i64, g.i64, g.i64, g.ptr, g.i64, g.i64};
  g.args_t = LLVMStructTypeInContext(cx, fields, 24, 0);
  jt_fa_name(s, g.name, sizeof g.name);
  LLVMTypeRef params[2] = {g.ptr, g.ptr};
  g.fn = LLVMAddFunction(mod, g.name, LLVMFunctionType(LLVMVoidTypeInContext(cx), params, 2, 0));
  unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
  LLVMAddAttributeAtIndex(g.fn, 2, LLVMCreateEnumAttribute(cx, noalias, 0)); /* the scratch */
  LLVMTypeRef vt = g.vec;
  g.fma = intrinsic(&g, "llvm.fma", &vt, 1, &g.fma_t);
  char w[8];
  snprintf(w, sizeof w, "%d", s->vbits);
  LLVMAddTargetDependentFunctionAttr(g.fn, "min-legal-vector-width", w);
  LLVMAddTargetDependentFunctionAttr(g.fn, "prefer-vector-width", w);
  g.b = LLVMCreateBuilderInContext(cx);
  LLVMPositionBuilderAtEnd(g.b, LLVMAppendBasicBlockInContext(cx, g.fn, "entry"));
  LLVMValueRef ap = LLVMGetParam(g.fn, 0), scratch = LLVMGetParam(g.fn, 1);
  LLVMValueRef f[24];
  for (unsigned i = 0; i < (s->fa == 2 ? 24u : 14u); i++)
    f[i] = ld(&g, fields[i], LLVMBuildStructGEP2(g.b, g.args_t, ap, i, ""), 8);
  call_t c = {.q = f[0],
              .k = f[1],
              .v = f[2],
              .mask = f[3],
              .out = f[4],
              .qs = f[5],
              .ks = f[6],
              .vs = f[7],
              .ms = f[8],
              .os = f[9],
              .nkv = f[10],
              .i0 = f[11],
              .i1 = f[12],
              .scale = f[13]};
  if (s->fa == 2) {
    LLVMValueRef qbuf = LLVMBuildArrayAlloca(g.b, g.f32, c64(&g, (long)g.R * g.DK), "q16");
    LLVMSetAlignment(qbuf, 64);
    LLVMValueRef group = LLVMBuildSelect(g.b, LLVMBuildICmp(g.b, LLVMIntSGT, f[22], c64(&g, 1), ""),
                                         f[22], c64(&g, 1), "group");
    LLVMBasicBlockRef pre = LLVMAppendBasicBlockInContext(cx, g.fn, "groups_pre");
    LLVMBasicBlockRef unshared = LLVMAppendBasicBlockInContext(cx, g.fn, "unshared");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(cx, g.fn, "done");
    LLVMBuildCondBr(g.b, LLVMBuildICmp(g.b, LLVMIntSGT, group, c64(&g, 1), ""), pre, unshared);
    /* K/V groups: a group's heads at a time, from head 0's place in its group */
    LLVMPositionBuilderAtEnd(g.b, pre);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(cx, g.fn, "groups");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(cx, g.fn, "group");
    LLVMBuildBr(g.b, head);
    LLVMPositionBuilderAtEnd(g.b, head);
    LLVMValueRef h = LLVMBuildPhi(g.b, g.i64, "h"), zero = c64(&g, 0);
    LLVMAddIncoming(h, &zero, &pre, 1);
    LLVMBuildCondBr(g.b, LLVMBuildICmp(g.b, LLVMIntSLT, h, f[16], ""), body, done);
    LLVMPositionBuilderAtEnd(g.b, body);
    LLVMValueRef at = add(&g, f[23], h);
    LLVMValueRef gend =
        LLVMBuildNSWSub(g.b, add(&g, h, group), LLVMBuildSRem(g.b, at, group, ""), "");
    LLVMValueRef end = LLVMBuildSelect(g.b, LLVMBuildICmp(g.b, LLVMIntSLT, gend, f[16], ""), gend,
                                       f[16], "end");
    LLVMValueRef kvh = LLVMBuildNSWSub(g.b, LLVMBuildSDiv(g.b, at, group, ""),
                                       LLVMBuildSDiv(g.b, f[23], group, ""), "kvh");
    fa16_blocks(&g, &c, 1, h, end, kvh, group, f, qbuf);
    LLVMBasicBlockRef from = LLVMGetInsertBlock(g.b);
    LLVMAddIncoming(h, &end, &from, 1);
    LLVMBuildBr(g.b, head);
    /* a K/V head per query head */
    LLVMPositionBuilderAtEnd(g.b, unshared);
    fa16_blocks(&g, &c, 0, zero, f[16], NULL, group, f, qbuf);
    LLVMBuildBr(g.b, done);
    LLVMPositionBuilderAtEnd(g.b, done);
  } else {
    LLVMValueRef ntiles =
        LLVMBuildSDiv(g.b, add(&g, c.nkv, c64(&g, g.TJ - 1)), c64(&g, g.TJ), "ntiles");
    LLVMValueRef padded = mulc(&g, ntiles, g.TJ);
    c.kt = scratch;
    c.v32 = gep(&g, g.f32, scratch, mulc(&g, padded, g.DK));
    c.p = gep(&g, g.f32, c.v32, mulc(&g, padded, g.DV));
    c.o = gep(&g, g.f32, c.p, c64(&g, (long)MAXR * g.TJ));
    c.stat = gep(&g, g.f32, c.o, c64(&g, (long)MAXR * g.DV));
    pack(&g, &c, ntiles);
    jt_loop_t i = jt_loop_open(g.b, g.fn, c.i0, c.i1, g.R, "rows");
    row_block(&g, &c, i.iv, ntiles);
    jt_loop_close(g.b, &i);
  }
  LLVMBuildRetVoid(g.b);
  /* the end marker (gemm.h, JT_END_SUFFIX) */
  char end[160];
  snprintf(end, sizeof end, "%s" JT_END_SUFFIX, g.name);
  LLVMValueRef marker =
      LLVMAddFunction(mod, end, LLVMFunctionType(LLVMVoidTypeInContext(cx), NULL, 0, 0));
  LLVMPositionBuilderAtEnd(g.b, LLVMAppendBasicBlockInContext(cx, marker, "entry"));
  LLVMBuildRetVoid(g.b);
  LLVMDisposeBuilder(g.b);
  return g.fn;
}
