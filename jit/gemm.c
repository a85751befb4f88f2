/* SPDX-License-Identifier: MIT */
/* The GEMM generator: LLVM IR for one jt_gemm_t, every shape constant baked in.
 *
 * Register blocking (DESIGN.md §5): C is computed in MR x NR blocks held in vector registers,
 * MR = mr_vecs vectors of vbits (jt_gemm_t), so that mr_vecs * NR accumulators + mr_vecs A
 * vectors + 1 broadcast fit the ISA's registers (or, with fewer columns than vectors, NR
 * broadcasts + 1 A vector): AVX2 2 ymm x 6 or 4 x 3 (16 registers), AVX-512 2 zmm x 14, 3 x 9,
 * 4 x 6 or 1 x 30 (32 registers). For each k: mr_vecs vector loads of op(A)'s column
 * slice, NR broadcasts of op(B)[k, j], mr_vecs * NR fused multiply-adds (llvm.fma). K is an IR
 * loop whose accumulators are phis (straight code up to UNROLL_K k's); nothing is left for a
 * heavy pass pipeline to discover.
 *
 *   for each block of nc columns (one block unless B's K block outgrows L2: jt_gemm_t.nc):
 *   for each block of kc k's (one block unless K is large: jt_gemm_t.kc):
 *     for each row block i0 (MR rows; the last one partial):
 *       if op(A) = A^T: copy the block's rows of A^T into a contiguous MR x K panel on the
 *                       stack, so the micro-kernel reads it as it reads a plain A (one pass,
 *                       not per j0); K blocked: copy the block's slice of A into the panel
 *       for each column block j0 (NR columns; the last one narrower):
 *         acc = 0; for k in the block: acc += op(A)[i0.., k] * op(B)[k, j0..]
 *         C[i0.., j0..] = alpha * acc + beta * C  (beta = 0: C is never read; alpha = 1: no
 *                         scale; K blocked: beta in the first block, + C in the others)
 * (K blocked with B's columns piling up in one L1 set: column blocks outside, each one's sliver
 * of B copied, row blocks inside; those in blocks of mc rows, each block's column blocks in
 * turn, where A's part of the K block outgrows half of L2: jt_gemm_t.mc.) Rows beyond M in the
 * last block are never loaded from A or C nor stored (masked loads and stores, or pieces and
 * scalar stores: jt_gemm_t.tails), so the kernel touches exactly the memory BLAS would. A block
 * of one 512-bit vector of rows (M within a vector, or mr_vecs = 1) with op(A) = A, op(B) = B
 * goes over pairs of k's instead: op(A)'s columns k and k + 1 interleaved, one broadcast of the
 * pair B[k..k+1, j] for two FMAs into two accumulators a column, their lanes added back into
 * rows after the loop (pairs, emit_pairs). A matrix-vector product with op(A) = A^T is a set of
 * dot products instead (emit_dots); one with op(A) = A whose A fills an L1 sweeps A's columns
 * (emit_sweep, jt_gemm_t.gemv). */
#include "gemm.h"
#include "irloop.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MAXV 64 /* lanes of a vector, at most (transposes, shuffle masks) */
#define GEMM_KC_BYTES 1024 /* a K block's share of each B column */
#define UNROLL_K 8          /* K loops of at most this many k's are straight code: n = 4, 8
                              5-15 % faster (an AVX-512 Xeon); at 16 (dgemm NN 79 -> 73 ns)
                              it took 2-4x the compile time (40-70 ms; on a Xeon model 167,
                              3x: 10 -> 30-40 ms, for 5-8 %; on a Zen 5, 1.5-2x for nothing:
                              dgemm 10-16 1.00-1.01x, sgemm 16 1.00x, 12 0.94x), and 4 k's
                              per iteration of longer loops gained 1-3 % at n = 32, 64 for
                              1.3x. Longer loops over a whole even K take 2 k's per
                              iteration (the Xeon model 167, interleaved: dgemm 16^3 1.030x,
                              32^3 1.021x, 64^3 1.026x, 96^3 1.009x; sgemm 1.003-1.015x;
                              compiles 1.0-1.4x) */

typedef struct gen_s {
  LLVMContextRef cx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMValueRef fn;
  const jt_gemm_t *g;
  LLVMTypeRef elem, vec, i64, i32, ptr;
  int V, MV, MR, NR;         /* lanes per vector, vectors and rows per block, columns per block */
  LLVMValueRef a, bm, c;     /* the kernel's pointer arguments */
  LLVMValueRef alpha, beta;  /* splatted vectors */
  LLVMValueRef pack;         /* the A^T panel (alloca; MUL_MAT: the scratch), or NULL */
  LLVMValueRef xr;           /* MUL_MAT: the x sliver (in the scratch; against f16 weights
                                rounded to f16) */
  LLVMValueRef res, out;     /* MUL_MAT + ADD: the residual and the sum's destination */
  LLVMValueRef kc, kc_end;   /* GEMM with K blocked: the block's k's (i64), else NULL */
  LLVMValueRef bpack;        /* ... and op(B) = B: the block's sliver of B's columns */
  LLVMValueRef first;        /* ... and whether it is the first block (i1), which applies beta */
  LLVMValueRef fma;          /* llvm.fma on vec */
  LLVMTypeRef fma_t;
  char name[128];            /* the kernel's symbol (jt_gemm_name) */
} gen_t;

static LLVMValueRef i64c(gen_t *g, long v) { return LLVMConstInt(g->i64, (unsigned long long)v, 1); }

/* Opens a counted loop iv = start; iv < end; iv += step, leaving the builder in its body. A
 * loop whose constant bounds give it one iteration is its body alone, iv = start: no pass
 * removes the branches around it (single-trip loops of row and column blocks cost sgemm and
 * dgemm 4^3 17 % of their time, 8^3 3-13 %). */
static jt_loop_t loop_to(gen_t *g, LLVMValueRef start, LLVMValueRef end, long step, const char *name)
{
  if (LLVMIsAConstantInt(start) && LLVMIsAConstantInt(end) &&
      LLVMConstIntGetSExtValue(start) < LLVMConstIntGetSExtValue(end) &&
      LLVMConstIntGetSExtValue(end) - LLVMConstIntGetSExtValue(start) <= step)
    return (jt_loop_t){.iv = start, .step = step};
  return jt_loop_open(g->b, g->fn, start, end, step, name);
}

static jt_loop_t loop_begin(gen_t *g, LLVMValueRef start, long end, long step, const char *name)
{
  return loop_to(g, start, i64c(g, end), step, name);
}

/* Closes a loop: the step, the back edge; the builder continues after the loop (a loop of one
 * iteration: where it is). */
static void loop_end(gen_t *g, jt_loop_t *l)
{
  if (l->head)
    jt_loop_close(g->b, l);
}

/* Opens "if (cond)", leaving the builder in its body; returns the block after it. */
static LLVMBasicBlockRef if_open(gen_t *g, LLVMValueRef cond)
{
  LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(g->cx, g->fn, "then");
  LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(g->cx, g->fn, "endif");
  LLVMBuildCondBr(g->b, cond, then, after);
  LLVMPositionBuilderAtEnd(g->b, then);
  return after;
}

static void if_close(gen_t *g, LLVMBasicBlockRef after)
{
  LLVMBuildBr(g->b, after);
  LLVMPositionBuilderAtEnd(g->b, after);
}

/* &base[index] in elements. */
static LLVMValueRef at(gen_t *g, LLVMValueRef base, LLVMValueRef index)
{
  return LLVMBuildInBoundsGEP2(g->b, g->elem, base, &index, 1, "p");
}

/* &base[index] where that may lie outside the array: the masked loads and stores that use it
 * touch only elements inside. */
static LLVMValueRef at_near(gen_t *g, LLVMValueRef base, LLVMValueRef index)
{
  return LLVMBuildGEP2(g->b, g->elem, base, &index, 1, "p");
}

static LLVMValueRef add(gen_t *g, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildNSWAdd(g->b, x, y, ""); }
static LLVMValueRef mul(gen_t *g, LLVMValueRef x, long y) { return LLVMBuildNSWMul(g->b, x, i64c(g, y), ""); }

/* a * x + y, elementwise. */
static LLVMValueRef fma3(gen_t *g, LLVMValueRef a, LLVMValueRef x, LLVMValueRef y)
{
  LLVMValueRef args[3] = {a, x, y};
  return LLVMBuildCall2(g->b, g->fma_t, g->fma, args, 3, "fma");
}

/* scalar in each of the V lanes of a vector of its type. */
static LLVMValueRef splat(gen_t *g, LLVMValueRef scalar)
{
  LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(scalar), (unsigned)g->V);
  LLVMValueRef v = LLVMBuildInsertElement(g->b, LLVMGetUndef(vt), scalar,
                                          LLVMConstInt(g->i32, 0, 0), "ins");
  return LLVMBuildShuffleVector(g->b, v, LLVMGetUndef(vt),
                                LLVMConstNull(LLVMVectorType(g->i32, (unsigned)g->V)), "splat");
}

static LLVMValueRef intrinsic(gen_t *g, const char *name, LLVMTypeRef *types, size_t n,
                              LLVMTypeRef *fn_type)
{
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(g->mod, id, types, n);
  *fn_type = LLVMGlobalGetValueType(f);
  return f;
}

/* The mask of a vector's first lanes lanes. */
static LLVMValueRef lane_mask(gen_t *g, int lanes)
{
  LLVMTypeRef i1 = LLVMInt1TypeInContext(g->cx);
  LLVMValueRef m[MAXV];
  for (int i = 0; i < g->V; i++)
    m[i] = LLVMConstInt(i1, i < lanes, 0);
  return LLVMConstVector(m, (unsigned)g->V);
}

/* Declares the vector intrinsics the kernel may call and gives it its vector width. */
static void vector_intrinsics(gen_t *g)
{
  LLVMTypeRef vt = g->vec;
  g->fma = intrinsic(g, "llvm.fma", &vt, 1, &g->fma_t);
  /* Without these the x86 backend splits 512-bit vectors in two on CPUs tuned to prefer 256
   * bits (Intel's AVX-512 cores), whatever the IR asks for. */
  char w[8];
  snprintf(w, sizeof w, "%d", g->g->vbits);
  LLVMAddTargetDependentFunctionAttr(g->fn, "min-legal-vector-width", w);
  LLVMAddTargetDependentFunctionAttr(g->fn, "prefer-vector-width", w);
}

/* A call of llvm.masked.load or .store (name) on vectors of g's current width (the packing
 * loops narrow it: set_lanes) with its four arguments. */
static LLVMValueRef masked_call(gen_t *g, const char *name, LLVMValueRef *args, const char *as)
{
  LLVMTypeRef vp[2] = {g->vec, g->ptr}, t;
  LLVMValueRef f = intrinsic(g, name, vp, 2, &t);
  return LLVMBuildCall2(g->b, t, f, args, 4, as);
}

/* The lanes of the vector at p where mask (a <V x i1>) holds, zero elsewhere: nothing else is
 * read. */
static LLVMValueRef vload_where(gen_t *g, LLVMValueRef p, LLVMValueRef mask)
{
  LLVMValueRef args[4] = {p, LLVMConstInt(g->i32, g->g->f64 ? 8 : 4, 0), mask,
                          LLVMConstNull(g->vec)};
  return masked_call(g, "llvm.masked.load", args, "v");
}

/* The lanes below n (an i64, any value) of a vector: a <V x i1>. */
static LLVMValueRef lanes_below(gen_t *g, LLVMValueRef n)
{
  LLVMValueRef iota[MAXV];
  for (int i = 0; i < g->V; i++)
    iota[i] = i64c(g, i);
  return LLVMBuildICmp(g->b, LLVMIntSLT, LLVMConstVector(iota, (unsigned)g->V), splat(g, n),
                       "below");
}

/* Stores the lanes of v where mask (a <V x i1>) holds at p: nothing else is written. */
static void vstore_where(gen_t *g, LLVMValueRef v, LLVMValueRef p, LLVMValueRef mask)
{
  LLVMValueRef args[4] = {v, p, LLVMConstInt(g->i32, g->g->f64 ? 8 : 4, 0), mask};
  masked_call(g, "llvm.masked.store", args, "");
}

/* A vector load of lanes elements at p (nothing past them is read; missing lanes are zero). */
static LLVMValueRef vload(gen_t *g, LLVMValueRef p, int lanes)
{
  unsigned align = g->g->f64 ? 8 : 4; /* element alignment: BLAS arrays need no more */
  if (lanes == g->V) {
    LLVMValueRef v = LLVMBuildLoad2(g->b, g->vec, p, "v");
    LLVMSetAlignment(v, align);
    return v;
  }
  if (g->g->tails == 1)
    return vload_where(g, p, lane_mask(g, lanes));
  /* The first lanes elements, in halving pieces (8, 4, 2, 1 floats), the rest zero: plain
   * loads that read nothing past them. */
  LLVMValueRef v = LLVMConstNull(g->vec);
  int off = 0;
  for (int w = g->V / 2; w >= 1; w /= 2) {
    if (lanes - off < w)
      continue;
    LLVMValueRef ix = i64c(g, off), q = LLVMBuildInBoundsGEP2(g->b, g->elem, p, &ix, 1, "q");
    if (w == 1) {
      LLVMValueRef x = LLVMBuildLoad2(g->b, g->elem, q, "x");
      LLVMSetAlignment(x, align);
      v = LLVMBuildInsertElement(g->b, v, x, LLVMConstInt(g->i32, (unsigned)off, 0), "v");
    } else {
      LLVMTypeRef wt = LLVMVectorType(g->elem, (unsigned)w);
      LLVMValueRef piece = LLVMBuildLoad2(g->b, wt, q, "piece");
      LLVMSetAlignment(piece, align);
      LLVMValueRef widen[MAXV], merge[MAXV];
      for (int i = 0; i < g->V; i++) {
        widen[i] = i < w ? LLVMConstInt(g->i32, (unsigned)i, 0) : LLVMGetUndef(g->i32);
        merge[i] = LLVMConstInt(g->i32, (unsigned)(i >= off && i < off + w ? g->V + i - off : i), 0);
      }
      LLVMValueRef wide = LLVMBuildShuffleVector(g->b, piece, LLVMGetUndef(wt),
                                                 LLVMConstVector(widen, (unsigned)g->V), "wide");
      v = LLVMBuildShuffleVector(g->b, v, wide, LLVMConstVector(merge, (unsigned)g->V), "v");
    }
    off += w;
  }
  return v;
}

/* Stores the first lanes elements of v at p: a whole vector, else a masked store or one scalar
 * store per lane (AMD's AVX2 masked stores are microcoded: scalar stores are several times
 * faster there). */
static void vstore(gen_t *g, LLVMValueRef v, LLVMValueRef p, int lanes)
{
  unsigned align = g->g->f64 ? 8 : 4;
  if (lanes == g->V) {
    LLVMSetAlignment(LLVMBuildStore(g->b, v, p), align);
    return;
  }
  if (g->g->tails == 1) {
    vstore_where(g, v, p, lane_mask(g, lanes));
    return;
  }
  for (int i = 0; i < lanes; i++) {
    LLVMValueRef x = LLVMBuildExtractElement(g->b, v, LLVMConstInt(g->i32, (unsigned)i, 0), "x");
    LLVMValueRef ix = i64c(g, i);
    LLVMSetAlignment(LLVMBuildStore(g->b, x, LLVMBuildInBoundsGEP2(g->b, g->elem, p, &ix, 1, "q")), align);
  }
}

/* Transposes V vectors of V lanes in place: log2(V) rounds of swapping off-diagonal blocks,
 * from blocks of from lanes down (from = V / 2: all of them; less: the larger blocks are
 * swapped already). */
static void transpose_from(gen_t *g, LLVMValueRef *v, int from)
{
  for (int b = from; b >= 1; b /= 2)
    for (int r = 0; r < g->V; r++) {
      if (r & b)
        continue;
      LLVMValueRef lo[MAXV], hi[MAXV];
      for (int i = 0; i < g->V; i++) {
        lo[i] = LLVMConstInt(g->i32, (unsigned)(i & b ? g->V + i - b : i), 0);
        hi[i] = LLVMConstInt(g->i32, (unsigned)(i & b ? g->V + i : i + b), 0);
      }
      LLVMValueRef x = v[r], y = v[r + b];
      v[r] = LLVMBuildShuffleVector(g->b, x, y, LLVMConstVector(lo, (unsigned)g->V), "t");
      v[r + b] = LLVMBuildShuffleVector(g->b, x, y, LLVMConstVector(hi, (unsigned)g->V), "t");
    }
}

/* Makes g's vector lanes wide and returns the previous width, to restore with the same call.
 * The packing loops transpose 256-bit vectors whatever the micro-kernel's width: the backend
 * lowers 16 x 16 zmm transposes slowly (kernels packing A^T compiled in 89 ms on average
 * instead of 53 with 8 x 8 transposes). */
static int set_lanes(gen_t *g, int lanes)
{
  int old = g->V;
  g->V = lanes;
  g->vec = LLVMVectorType(g->elem, (unsigned)lanes);
  return old;
}

static int pack_lanes(const gen_t *g)
{
  int l = LLVMGetTypeKind(g->elem) == LLVMDoubleTypeKind ? 4 : 8;
  return g->V < l ? g->V : l;
}

/* x and y side by side, a vector twice as wide. */
static LLVMValueRef concat(gen_t *g, LLVMValueRef x, LLVMValueRef y)
{
  LLVMValueRef m[MAXV];
  for (int i = 0; i < 2 * g->V; i++)
    m[i] = LLVMConstInt(g->i32, (unsigned)i, 0);
  return LLVMBuildShuffleVector(g->b, x, y, LLVMConstVector(m, 2 * (unsigned)g->V), "cat");
}

/* Rows grp*V .. grp*V+V-1 of op(A) = A^T (of which those past mr are zero) at the ks <= V k's
 * from k, transposed into v[j] = op(A)[grp*V .., k + j] (zero for j >= ks). The first round
 * of the transpose (swapping halves) comes from the loads: each vector is two half loads side
 * by side, which x86 does with a load and an insert from memory instead of a lane-crossing
 * shuffle, whose single port bounded the packing (dgemm TN 64^3 spent ~10 % of its time
 * there). */
static void pack_group(gen_t *g, LLVMValueRef i0, LLVMValueRef k, int grp, int mr, int ks,
                       LLVMValueRef *v)
{
  int h = g->V / 2;
  LLVMValueRef zero = LLVMConstNull(g->vec);
  LLVMValueRef row[MAXV];
  for (int r = 0; r < g->V; r++) {
    int i = grp * g->V + r;
    row[r] = i < mr ? at(g, g->a, add(g, mul(g, add(g, i0, i64c(g, i)), g->g->lda), k)) : NULL;
  }
  if (h < 2) { /* vectors of two or fewer: a whole-vector transpose */
    for (int r = 0; r < g->V; r++)
      v[r] = row[r] ? vload(g, row[r], ks) : zero;
    transpose_from(g, v, h);
    return;
  }
  int wide = set_lanes(g, h);
  LLVMValueRef hz = LLVMConstNull(g->vec), lo[MAXV], hi[MAXV];
  for (int r = 0; r < 2 * h; r++) {
    lo[r] = row[r] ? vload(g, row[r], ks < h ? ks : h) : hz;
    hi[r] = row[r] && ks > h ? vload(g, at(g, row[r], i64c(g, h)), ks - h) : hz;
  }
  for (int r = 0; r < h; r++) {
    v[r] = concat(g, lo[r], lo[r + h]);
    v[r + h] = concat(g, hi[r], hi[r + h]);
  }
  set_lanes(g, wide);
  transpose_from(g, v, h / 2);
}

/* The panel's rows k .. k+ks-1 (ks <= V): every group of rows transposed and stored. Doubles
 * are stored as whole vectors of the micro-kernel's width kv (two transposes side by side
 * where it is twice theirs): its load cannot be forwarded from two narrower stores, and at
 * small K it reads the panel while they are still in flight (dgemm TT 8^3: 17 ns, 22 with two
 * stores). Floats are stored as they are transposed: LLVM turns two 256-bit transposes side
 * by side into 512-bit shuffles, which x86 runs on one port (sgemm TT 64^3 5 % slower, and
 * no faster at 16). */
static void pack_rows(gen_t *g, LLVMValueRef i0, LLVMValueRef k, int mr, int ks, int kv)
{
  int per = g->g->f64 ? kv / g->V : 1; /* transposes per store */
  for (int grp = 0; grp < g->MR / g->V; grp += per) {
    LLVMValueRef v[2][MAXV];
    for (int p = 0; p < per; p++)
      pack_group(g, i0, k, grp + p, mr, ks, v[p]);
    for (int j = 0; j < ks; j++) {
      LLVMValueRef x = per == 2 ? concat(g, v[0][j], v[1][j]) : v[0][j];
      LLVMValueRef dst = add(g, mul(g, add(g, k, i64c(g, j)), g->MR), i64c(g, grp * g->V));
      LLVMSetAlignment(LLVMBuildStore(g->b, x, at(g, g->pack, dst)), g->g->f64 ? 8 : 4);
    }
  }
}

/* Copies rows i0 .. i0+mr-1 of op(A) = A^T into the panel: pack[k*MR + i] = A[k + (i0+i)*lda],
 * pack_lanes k's at a time, then the last k's in one partial step (pack_rows).
 * Rows mr .. MR-1 are zeroed: the micro-kernel loads whole vectors from the panel, and stale
 * stack bytes there (a signalling NaN, say) would raise floating-point exception flags. */
static void emit_pack(gen_t *g, LLVMValueRef i0, int mr)
{
  int kv = g->V, wide = set_lanes(g, pack_lanes(g));
  long K = g->g->k, kfull = K / g->V * g->V;
  if (kfull) {
    jt_loop_t k = loop_begin(g, i64c(g, 0), kfull, g->V, "pk");
    pack_rows(g, i0, k.iv, mr, g->V, kv);
    loop_end(g, &k);
  }
  if (K > kfull)
    pack_rows(g, i0, i64c(g, kfull), mr, (int)(K - kfull), kv);
  set_lanes(g, wide);
}

/* A micro-kernel's K loop: kloop_open enters it with k (from k0) and the nv x nr accumulators
 * as phis (0 on entry); kloop_close closes it on the accumulators' next values, k += step
 * while k < kend, and leaves the builder after it. */
typedef struct kloop_s {
  LLVMBasicBlockRef head, done;
  LLVMValueRef k;
} kloop_t;

typedef LLVMValueRef accs_t[JT_MAX_MR_VECS][JT_MAX_NR];

static kloop_t kloop_open(gen_t *g, int nv, int nr, accs_t acc, LLVMValueRef k0)
{
  kloop_t l;
  LLVMValueRef zero = LLVMConstNull(g->vec);
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  l.head = LLVMAppendBasicBlockInContext(g->cx, g->fn, "k");
  l.done = LLVMAppendBasicBlockInContext(g->cx, g->fn, "store");
  LLVMBuildBr(g->b, l.head);
  LLVMPositionBuilderAtEnd(g->b, l.head);
  l.k = LLVMBuildPhi(g->b, g->i64, "k");
  LLVMAddIncoming(l.k, &k0, &pre, 1);
  for (int v = 0; v < nv; v++)
    for (int j = 0; j < nr; j++) {
      acc[v][j] = LLVMBuildPhi(g->b, g->vec, "acc");
      LLVMAddIncoming(acc[v][j], &zero, &pre, 1);
    }
  return l;
}

static void kloop_close(gen_t *g, const kloop_t *l, int nv, int nr, accs_t acc, accs_t next,
                        LLVMValueRef kend, long step)
{
  LLVMValueRef k1 = LLVMBuildNSWAdd(g->b, l->k, i64c(g, step), "k1");
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->b);
  LLVMAddIncoming(l->k, &k1, &latch, 1);
  for (int v = 0; v < nv; v++)
    for (int j = 0; j < nr; j++)
      LLVMAddIncoming(acc[v][j], &next[v][j], &latch, 1);
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, k1, kend, ""), l->head, l->done);
  LLVMPositionBuilderAtEnd(g->b, l->done);
}

/* The first lanes elements at p, loaded only after the first K block (a masked load whose mask
 * is off in the first: under beta = 0, C is never read). */
static LLVMValueRef load_after_first(gen_t *g, LLVMValueRef p, int lanes)
{
  LLVMValueRef later = splat(g, LLVMBuildNot(g->b, g->first, "later"));
  return vload_where(g, p, LLVMBuildAnd(g->b, later, lane_mask(g, lanes), "m"));
}

/* The k's a K loop of len k's goes over an iteration: 4 under AVX2 where len has them, else
 * otherwise where len has them, else 1 (AVX-512 keeps its 2 or 1: 4 not measured there). */
static int k_unroll(const gen_t *g, long len, int otherwise)
{
  return g->g->isa == JT_ISA_AVX2 && len % 4 == 0 ? 4 : len % otherwise == 0 ? otherwise : 1;
}

/* Whether s's K is in blocks of kc (jt_gemm_emit's K-block loop). */
static int k_blocked(const jt_gemm_t *s) { return !s->ta && s->kc < s->k; }

/* One k of a block's K loop: next = acc + op(A)[i0.., k] * op(B)[k, j0..]. The block holds
 * its accumulators and whichever of its operands takes fewer registers: op(A)'s nv vectors,
 * each then multiplied by one broadcast of op(B) per column, or, where the block has fewer
 * columns than vectors of rows, op(B)'s nr broadcasts, each vector of op(A) then loaded just
 * before its FMAs (LIBXSMM's AVX2 order: 4 vectors x 3 columns fit AVX2's 16 registers as 12
 * accumulators, 3 broadcasts and one vector of A). */
static void block_k(gen_t *g, LLVMValueRef i0, LLVMValueRef j0, int mr, int nr, LLVMValueRef k,
                    accs_t acc, accs_t next)
{
  const jt_gemm_t *s = g->g;
  int nv = (mr + g->V - 1) / g->V;
  /* where op(A)[i0 + v*V .., k] lies: in A (column k) or in the packed panel, which has room
   * for full vectors (lanes past mr are never stored) */
  LLVMValueRef ap[JT_MAX_MR_VECS], bj[JT_MAX_NR];
  int lanes[JT_MAX_MR_VECS];
  for (int v = 0; v < nv; v++) {
    lanes[v] = g->pack || mr - v * g->V >= g->V ? g->V : mr - v * g->V;
    if (g->pack) { /* the panel's k's start at the block's first */
      LLVMValueRef kp = g->kc ? LLVMBuildNSWSub(g->b, k, g->kc, "kp") : k;
      ap[v] = at(g, g->pack, LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, kp, i64c(g, g->MR), ""),
                                             i64c(g, v * g->V), ""));
    } else {
      LLVMValueRef row = LLVMBuildNSWAdd(g->b, i0, i64c(g, v * g->V), "row");
      ap[v] = at(g, g->a, add(g, row, LLVMBuildNSWMul(g->b, k, i64c(g, s->lda), "")));
    }
  }
  for (int j = 0; j < nr; j++) {
    LLVMValueRef col = LLVMBuildNSWAdd(g->b, j0, i64c(g, j), "col");
    LLVMValueRef ix = s->tb ? LLVMBuildNSWAdd(g->b, col, LLVMBuildNSWMul(g->b, k, i64c(g, s->ldb), ""), "")
                            : LLVMBuildNSWAdd(g->b, k, LLVMBuildNSWMul(g->b, col, i64c(g, s->ldb), ""), "");
    if (g->bpack) /* the block's sliver of B: [j][k - kc] */
      ix = add(g, mul(g, LLVMConstInt(g->i64, (unsigned)j, 0), s->kc), LLVMBuildNSWSub(g->b, k, g->kc, ""));
    bj[j] = at(g, g->bpack ? g->bpack : g->bm, ix);
  }
  if (nr < nv) {
    for (int j = 0; j < nr; j++)
      bj[j] = splat(g, LLVMBuildLoad2(g->b, g->elem, bj[j], "b"));
    for (int v = 0; v < nv; v++) {
      LLVMValueRef a = vload(g, ap[v], lanes[v]);
      for (int j = 0; j < nr; j++)
        next[v][j] = fma3(g, a, bj[j], acc[v][j]);
    }
    return;
  }
  for (int v = 0; v < nv; v++)
    ap[v] = vload(g, ap[v], lanes[v]);
  for (int j = 0; j < nr; j++) {
    LLVMValueRef b = splat(g, LLVMBuildLoad2(g->b, g->elem, bj[j], "b"));
    for (int v = 0; v < nv; v++)
      next[v][j] = fma3(g, ap[v], b, acc[v][j]);
  }
}

/* Whether s's blocks of one vector of rows and nr columns go over pairs of k's (block_pair):
 * such a block takes a broadcast of op(B) per FMA and one load more for op(A), more loads than
 * FMAs (Zen 5: an assembly 1 x 16 loop 0.91-0.94x a 2 x 8 one with the same FMAs), where a
 * pair's broadcast feeds two FMAs and the pairs end in one shuffle and add per column. It
 * needs op(A) = A read where it lies, op(B) = B (a pair is adjacent in memory), K of at least
 * PAIRS_MIN_K (the sums' shuffles cost more than they save below: sgemm, dgemm 4^3
 * 0.71-0.78x) in one block (the caller's to check: kc is resolved after nr), 512-bit vectors
 * and 2 nr + 3 registers. Measured on a Zen 5 against the plain block, interleaved: dgemm 5^3
 * to 8^3 1.05-1.18x, 8x32x8 1.04x, sgemm 12^3 1.13-1.16x, 16^3 1.03-1.10x (2 blocks of 8
 * columns against one of 16), 16x64x16 1.09x, 16x32x16 1.15x. Not 256-bit vectors, whose
 * loads this core keeps up with: dgemm 4x16x16 0.82x (AVX-512 at 256 bits), sgemm 7x16x7
 * 0.96x, and under AVX2 sgemm 8x16x8 0.91x against 8^3 1.12-1.25x and dgemm 4x16x4 1.13x. */
#define PAIRS_MIN_K 5
static int pairs(const jt_gemm_t *s, int mr_vecs, int nr)
{
  return !s->mm && !s->dot && !s->add_rms_mul && !s->syrk && !s->fa && !s->ta && !s->tb &&
         mr_vecs == 1 && s->n > 1 && s->k >= PAIRS_MIN_K && s->vbits == 512 && 2 * nr + 3 <= 32;
}

/* A shuffle of x and y (y's lanes numbered from V) by the mask m(i) of V lanes. */
static LLVMValueRef shuffle(gen_t *g, LLVMValueRef x, LLVMValueRef y, int (*m)(int i, int V, int P))
{
  LLVMValueRef ix[MAXV];
  int P = LLVMGetTypeKind(g->elem) == LLVMDoubleTypeKind ? 2 : 4; /* elements per 128 bits */
  for (int i = 0; i < g->V; i++)
    ix[i] = LLVMConstInt(g->i32, (unsigned)m(i, g->V, P), 0);
  return LLVMBuildShuffleVector(g->b, x, y, LLVMConstVector(ix, (unsigned)g->V), "pair");
}

/* Within each 128-bit lane of P elements: the low (high) half's rows of x and y interleaved,
 * x's (k's) in even lanes, y's (k+1's) in odd (unpcklps/unpcklpd, unpckh*). */
static int pair_lo(int i, int V, int P) { return i / P * P + i % P / 2 + (i % 2 ? V : 0); }
static int pair_hi(int i, int V, int P) { return i / P * P + P / 2 + i % P / 2 + (i % 2 ? V : 0); }
/* Back: row i's k (parity 0) or k+1 (parity 1) product from the lo and hi accumulators. */
static int pair_even(int i, int V, int P)
{
  int L = i / P * P, r = i % P;
  return r < P / 2 ? L + 2 * r : V + L + 2 * (r - P / 2);
}
static int pair_odd(int i, int V, int P) { return pair_even(i, V, P) + 1; }
static int pair_splat(int i, int V, int P) { (void)V, (void)P; return i % 2; }

/* Two k's of a one-vector block (k, k + 1): op(A)'s two columns interleaved into lo and hi
 * (rows of each 128-bit lane's low and high half, k's and k+1's side by side), each of B's
 * pairs B[k..k+1, j] broadcast once (one load) for two FMAs, acc[0][j] += lo * pair,
 * acc[1][j] += hi * pair. */
static void block_pair(gen_t *g, LLVMValueRef i0, LLVMValueRef j0, int mr, int nr, LLVMValueRef k,
                       accs_t acc, accs_t next)
{
  const jt_gemm_t *s = g->g;
  LLVMValueRef a0 = at(g, g->a, add(g, i0, LLVMBuildNSWMul(g->b, k, i64c(g, s->lda), "")));
  LLVMValueRef x = vload(g, a0, mr), y = vload(g, at(g, a0, i64c(g, s->lda)), mr);
  LLVMValueRef lo = shuffle(g, x, y, pair_lo), hi = shuffle(g, x, y, pair_hi);
  LLVMTypeRef two = LLVMVectorType(g->elem, 2);
  for (int j = 0; j < nr; j++) {
    LLVMValueRef ix = add(g, k, mul(g, add(g, j0, i64c(g, j)), s->ldb));
    LLVMValueRef pv = LLVMBuildLoad2(g->b, two, at(g, g->bm, ix), "bp");
    LLVMSetAlignment(pv, s->f64 ? 8 : 4);
    LLVMValueRef bj = shuffle(g, pv, LLVMGetUndef(two), pair_splat);
    next[0][j] = fma3(g, lo, bj, acc[0][j]);
    next[1][j] = fma3(g, hi, bj, acc[1][j]);
  }
}

/* A one-vector block's K over pairs of k's (at most UNROLL_K k's: straight code), into
 * sum[0][j]: the lo and hi accumulators' even and odd lanes added, in the rows' order; then
 * the last k of an odd K as a plain k. */
static void emit_pairs(gen_t *g, LLVMValueRef i0, LLVMValueRef j0, int mr, int nr, accs_t sum)
{
  int k2 = g->g->k / 2 * 2;
  accs_t acc, next;
  if (k2 <= UNROLL_K) {
    for (int v = 0; v < 2; v++)
      for (int j = 0; j < nr; j++)
        next[v][j] = LLVMConstNull(g->vec);
    for (int k = 0; k < k2; k += 2) {
      memcpy(acc, next, sizeof acc);
      block_pair(g, i0, j0, mr, nr, i64c(g, k), acc, next);
    }
  } else {
    kloop_t l = kloop_open(g, 2, nr, acc, i64c(g, 0));
    block_pair(g, i0, j0, mr, nr, l.k, acc, next);
    kloop_close(g, &l, 2, nr, acc, next, i64c(g, k2), 2);
  }
  for (int j = 0; j < nr; j++)
    sum[0][j] = LLVMBuildFAdd(g->b, shuffle(g, next[0][j], next[1][j], pair_even),
                              shuffle(g, next[0][j], next[1][j], pair_odd), "psum");
  if (g->g->k % 2) {
    memcpy(acc, sum, sizeof acc);
    block_k(g, i0, j0, mr, nr, i64c(g, g->g->k - 1), acc, sum);
  }
}


/* One mr x nr block of C at (i0, j0): the K loop over accumulators (at most UNROLL_K k's in
 * one block: straight code, no loop; an even K in one block: two k's per iteration), then the
 * update of C. */
/* r (a block's sums for lanes rows of C at p) as C's new value in one K block: alpha r, plus
 * beta C as beta's class says (beta = 0: C is never read). */
static LLVMValueRef scaled_plus_c(gen_t *g, LLVMValueRef r, LLVMValueRef p, int lanes,
                                  LLVMValueRef mask)
{
  const jt_gemm_t *s = g->g;
  if (!s->alpha_one)
    r = LLVMBuildFMul(g->b, r, g->alpha, "ar");
  if (!s->beta_class)
    return r;
  LLVMValueRef c = mask ? vload_where(g, p, mask) : vload(g, p, lanes);
  return s->beta_class == 1 ? LLVMBuildFAdd(g->b, r, c, "r") : fma3(g, g->beta, c, r);
}

static void emit_block(gen_t *g, LLVMValueRef i0, LLVMValueRef j0, int mr, int nr)
{
  const jt_gemm_t *s = g->g;
  int nv = (mr + g->V - 1) / g->V;
  accs_t acc, next_acc;
  if (!g->kc && pairs(s, s->mr_vecs, nr)) {
    emit_pairs(g, i0, j0, mr, nr, next_acc);
  } else if (!g->kc && s->k <= UNROLL_K) {
    for (int v = 0; v < nv; v++)
      for (int j = 0; j < nr; j++)
        next_acc[v][j] = LLVMConstNull(g->vec);
    for (int k = 0; k < s->k; k++) {
      memcpy(acc, next_acc, sizeof acc);
      block_k(g, i0, j0, mr, nr, i64c(g, k), acc, next_acc);
    }
  } else {
    /* K blocked: blocks of any length, one k an iteration (Zen 3, 4 against 2 k's: sgemm 64^3
     * 1.07-1.09x, 128^3 1.03-1.05x, dgemm 32^3 1.08x, 64^3 1.07-1.09x; sgemm 32^3 and 96^3,
     * dgemm 96^3 0.99-1.01x) */
    int step = k_blocked(s) ? 1 : k_unroll(g, s->k, 2);
    kloop_t l = kloop_open(g, nv, nr, acc, g->kc ? g->kc : i64c(g, 0));
    accs_t cur; /* the accumulators after each k of the iteration (acc: its phis) */
    memcpy(cur, acc, sizeof cur);
    for (int q = 0; q < step; q++) {
      block_k(g, i0, j0, mr, nr, q ? add(g, l.k, i64c(g, q)) : l.k, cur, next_acc);
      memcpy(cur, next_acc, sizeof cur);
    }
    kloop_close(g, &l, nv, nr, acc, next_acc, g->kc ? g->kc_end : i64c(g, s->k), step);
  }
  for (int j = 0; j < nr; j++) {
    LLVMValueRef col = LLVMBuildNSWMul(g->b, LLVMBuildNSWAdd(g->b, j0, i64c(g, j), ""),
                                       i64c(g, s->ldc), "ccol");
    for (int v = 0; v < nv; v++) {
      int lanes = mr - v * g->V < g->V ? mr - v * g->V : g->V;
      LLVMValueRef p = at(g, g->c, LLVMBuildNSWAdd(g->b, col, LLVMBuildNSWAdd(g->b, i0, i64c(g, v * g->V), ""), ""));
      LLVMValueRef r = next_acc[v][j];
      if (g->first && s->beta_class != 1) { /* K blocked: C as beta says in the first block,
                                               else C itself */
        if (!s->alpha_one)
          r = LLVMBuildFMul(g->b, r, g->alpha, "ar");
        LLVMValueRef c = s->beta_class ? vload(g, p, lanes) : load_after_first(g, p, lanes);
        LLVMValueRef plus = LLVMBuildFAdd(g->b, r, c, "r");
        LLVMValueRef r1 = s->beta_class == 2 ? fma3(g, g->beta, c, r) : r;
        r = LLVMBuildSelect(g->b, g->first, r1, plus, "r"); /* beta = 0: C's NaNs never enter */
      } else {
        r = scaled_plus_c(g, r, p, lanes, NULL);
      }
      vstore(g, r, p, lanes);
    }
  }
}

/* K blocked, op(B) = B: copies the block's k's of columns j0 .. j0+nr-1 of B into the sliver,
 * bpack[j*kc + k - kc0], V at a time then one by one. B's columns lie ldb apart, and with ldb
 * a multiple of 4 KB (512 doubles) the NR elements each k broadcasts fall in one L1 set, more
 * lines than it has ways, each reused for V k's (dgemm 512^3 ran at 27-37 % of peak). */
static void emit_bcopy(gen_t *g, LLVMValueRef j0, int nr)
{
  LLVMValueRef len = LLVMBuildNSWSub(g->b, g->kc_end, g->kc, "len");
  LLVMValueRef vlen = LLVMBuildAnd(g->b, len, i64c(g, -(long)g->V), "vlen");
  for (int j = 0; j < nr; j++) {
    LLVMValueRef src = at(g, g->bm, add(g, mul(g, add(g, j0, i64c(g, j)), g->g->ldb), g->kc));
    LLVMValueRef dst = at(g, g->bpack, i64c(g, (long)j * g->g->kc));
    jt_loop_t v = loop_to(g, i64c(g, 0), vlen, g->V, "bv");
    vstore(g, vload(g, at(g, src, v.iv), g->V), at(g, dst, v.iv), g->V);
    loop_end(g, &v);
    jt_loop_t e = loop_to(g, vlen, len, 1, "be");
    LLVMBuildStore(g->b, LLVMBuildLoad2(g->b, g->elem, at(g, src, e.iv), "b"), at(g, dst, e.iv));
    loop_end(g, &e);
  }
}

/* K blocked, B read where it lies: copies rows i0 .. i0+mr-1 of A, the block's k's, into the
 * panel, pack[(k - kc)*MR + i] = A[i0 + i + k*lda], so that A's slice, read again for every
 * column block, is contiguous in L1. Lanes past mr are zero. */
static void emit_copy(gen_t *g, LLVMValueRef i0, int mr)
{
  jt_loop_t k = loop_to(g, g->kc, g->kc_end, 1, "ck");
  LLVMValueRef src = at(g, g->a, add(g, i0, mul(g, k.iv, g->g->lda)));
  LLVMValueRef dst = at(g, g->pack, mul(g, LLVMBuildNSWSub(g->b, k.iv, g->kc, ""), g->MR));
  for (int v = 0; v * g->V < mr; v++) {
    int lanes = mr - v * g->V < g->V ? mr - v * g->V : g->V;
    LLVMValueRef x = vload(g, at(g, src, i64c(g, v * g->V)), lanes);
    LLVMSetAlignment(LLVMBuildStore(g->b, x, at(g, dst, i64c(g, v * g->V))), g->g->f64 ? 8 : 4);
  }
  loop_end(g, &k);
}

/* The most lines of n spans of span bytes, stride bytes apart (the first on a line boundary),
 * that fall into one of an L1 data cache's 64 sets of 64-byte lines (Intel's and AMD's alike). */
static int most_in_one_set(long n, long stride, long span)
{
  int count[64] = {0}, most = 0;
  for (long i = 0; i < n; i++)
    for (long line = i * stride / 64; line <= (i * stride + span - 1) / 64; line++)
      most = ++count[line % 64] > most ? count[line % 64] : most;
  return most;
}

/* Whether B's columns, ldb elements apart, pile up in the L1 cache: more than 4 of a block's
 * nr columns start in one set (most_in_one_set), each such line reused for V k's. Then the
 * block's sliver of B is copied (bench: dgemm 512^3 1.31x) rather than A's slice (dgemm
 * 300x200x700 1.13x the other way). */
static int b_piles_up(const jt_gemm_t *s)
{
  return !s->tb && most_in_one_set(s->nr, (long)s->ldb * (s->f64 ? 8 : 4), 1) > 4;
}

/* All row blocks of the column block at j0 (nr columns): K blocked, with op(B) = B packed. */
static void emit_col_block(gen_t *g, LLVMValueRef j0, int nr)
{
  const jt_gemm_t *s = g->g;
  emit_bcopy(g, j0, nr);
  int mfull = s->m / g->MR * g->MR, mtail = s->m % g->MR;
  if (mfull) {
    jt_loop_t i = loop_begin(g, i64c(g, 0), mfull, g->MR, "i");
    emit_block(g, i.iv, j0, g->MR, nr);
    loop_end(g, &i);
  }
  if (mtail)
    emit_block(g, i64c(g, mfull), j0, mtail, nr);
}

/* All column blocks of the row block at i0 (mr rows). */
static void emit_row_block(gen_t *g, LLVMValueRef i0, int mr)
{
  const jt_gemm_t *s = g->g;
  if (g->pack && g->kc)
    emit_copy(g, i0, mr);
  else if (g->pack)
    emit_pack(g, i0, mr);
  int nfull = s->n / g->NR * g->NR, ntail = s->n % g->NR;
  if (nfull) {
    jt_loop_t j = loop_begin(g, i64c(g, 0), nfull, g->NR, "j");
    emit_block(g, i0, j.iv, mr, g->NR);
    loop_end(g, &j);
  }
  if (ntail)
    emit_block(g, i0, i64c(g, nfull), mr, ntail);
}

/* The sum of v's lanes, in any order (reassociated). */
static LLVMValueRef hsum(gen_t *g, LLVMValueRef v)
{
  LLVMTypeRef vt = g->vec, rt;
  LLVMValueRef red = intrinsic(g, "llvm.vector.reduce.fadd", &vt, 1, &rt);
  LLVMValueRef args[2] = {LLVMConstReal(g->elem, -0.0), v};
  LLVMValueRef r = LLVMBuildCall2(g->b, rt, red, args, 2, "r");
  LLVMSetFastMathFlags(r, LLVMFastMathAllowReassoc);
  return r;
}

/* ---- what to generate: ISA, width, blocking ------------------------------------------------
 *
 * The model: the ISA's widest vectors (half as wide for a GEMM whose M fits half of one); a
 * GEMM's rows in blocks of two vectors (one when M fits one); as many columns as the registers
 * left hold, evened out over N so that the last block is not a sliver; tails in pieces and
 * scalar stores: AMD microcodes AVX2's vmaskmov stores, and on an Intel Xeon with AVX-512
 * (bench_kernels) k-masked tails measured 0.95-1.01x of pieces at m = 37-100 and 0.51x at
 * m = 20 (a masked A load per k splitting cache lines).
 * What the model cannot tell (1, 2, 3 or 4 vectors of rows; K in blocks or not; full or half
 * width, which double-pumping AMD cores and small M may prefer; masked or pieced tails;
 * MUL_MAT panels of 16 or 32 rows, 8 or more columns; A's panels copied always or only when
 * unaligned; a GEMV's sweep or blocks of rows) is what jt_gemm_candidates offers tune(), most
 * plausible first: the agent times 3,
 * so where A can be copied that choice comes third, before the width (it never meets a K-block
 * choice: a copy needs one K block whose panel fits). */

const char *jt_isa_name(int isa)
{
  return isa == JT_ISA_AVX512 ? "avx512" : isa == JT_ISA_AVX2 ? "avx2" : isa == JT_ISA_AUTO ? "auto" : "?";
}

#define MM_NR 14 /* MUL_MAT columns per block by default, under AVX-512 (2 zmm x 14: 28 of the 32
                    registers accumulate): on a Xeon model 167, 1.05-1.10x 2 x 8 at 768x512x768,
                    2048x512x768 and 768x512x2048 (f32 and f16; 256 rows a call, 201
                    interleaved calls: medians and fastest tenths alike) */

/* Whether s's kernel can copy A's row-block panels into an aligned stack panel (jt_gemm_t's
 * copy_a): op(A) = A in one K block, A of 32 KB or more (an L1's; below it the split loads
 * cost little), its panel within JT_GEMM_PANEL_BYTES. Where A's columns do not start on a
 * vector boundary (malloc and numpy hand out 16-byte aligned operands, numpy's at 0, 16, 32
 * or 48 bytes of a line alike) the copy repays itself: on the Zen 3, A 16 bytes off a line
 * against aligned, without the copy: sgemm 96^3 0.72x, 128^3 0.74x, dgemm 64^3 0.90x; sgemm
 * 32^3 and 64^3, dgemm 32^3 0.98-1.05x. With it, against without (interleaved, one process):
 * A 16 bytes off, sgemm 96^3 1.32x, 128^3 1.45x, 160^3 1.22x, 200x100x150 1.15x, dgemm 64^3
 * 1.15-1.19x, 100^3 1.07x (and 48^3, A 18 KB, 0.96-0.97x: not copied). */
static int realigns(const jt_gemm_t *s, int mr)
{
  long esz = s->f64 ? 8 : 4;
  return !s->ta && !k_blocked(s) && (long)s->m * s->k * esz >= 32768 &&
         (long)mr * s->k * esz <= JT_GEMM_PANEL_BYTES;
}

/* Whether A's row block, read where it lies, piles up in the L1 cache: more than 5 of its
 * lines (mr rows of each of K columns, lda apart) in one set (most_in_one_set; 8 ways or more,
 * the rest for B's and C's lines), where the block is read again for every column block. Then it is
 * copied whatever its alignment. Zen 3, A aligned, the copy against reading A where it lies
 * (interleaved, one process; NN / NT), by the most lines in one set: 16 or more, sgemm 128^3
 * 1.13 / 1.26x, 192^3 1.12 / 1.20x, 256^3 1.12 / 1.19x, dgemm 128^3 1.12-1.22 / 1.18-1.30x,
 * 192^3 1.19 / 1.29x, 256^3 1.23 / 1.25x; 8, dgemm 64^3 1.00-1.03 / 1.06-1.11x; 6, dgemm
 * 96^3 1.00 / 1.05x. At 5 or fewer it stays where it lies: sgemm 160^3 (5) 0.98 / 1.04x,
 * 112^3 0.97 / 0.94x, dgemm 72^3 0.97 / 0.96x, 80^3 1.00 / 0.96x, 100^3 (5) 0.96 / 0.99x,
 * 112^3 0.95 / 0.98x; but sgemm 128^3 at lda 136 (5) 1.51 / 1.49x, which tune(), timing the
 * other choice, finds. With one column block (N within a block) A is read once: not copied
 * unless unaligned (and a GEMV of 32 KB or more sweeps A, copying nothing). */
static int a_piles_up(const jt_gemm_t *s, int mr)
{
  long esz = s->f64 ? 8 : 4;
  return most_in_one_set(s->k, s->lda * esz, (mr < s->m ? mr : s->m) * esz) > 5;
}

/* This CPU's L2 cache per core, in bytes (what the C library reads from CPUID; 256 KB, the
 * smallest of the x86-64 cores this project meets, where it cannot tell). */
static long l2_bytes(void)
{
  static _Atomic long bytes; /* compile threads read it at once; any of them finds the same */
  long b = atomic_load_explicit(&bytes, memory_order_relaxed);
  if (!b) {
    b = sysconf(_SC_LEVEL2_CACHE_SIZE);
    b = b > 0 ? b : 256 * 1024;
    atomic_store_explicit(&bytes, b, memory_order_relaxed);
  }
  return b;
}

/* total in blocks of at most most, as few as that allows, their size evened out over them in
 * whole units (the last may be smaller): the blocks' size, total where there is one block. */
static int even_blocks(long total, long most, int unit)
{
  long blocks = (total + most - 1) / most;
  long size = ((total + blocks - 1) / blocks + unit - 1) / unit * unit;
  return size < total ? (int)size : (int)total;
}

/* N's block for r (its kc resolved): all of N where B's part of a K block, kc (or K) elements
 * of each of its columns, fits this CPU's L2; else as many columns (whole column blocks) as
 * fill half of it, the rest for A's panels and C. Past L2 every row block reads B's block
 * from L3 again, and with columns a page apart (ldb of 1024 floats) each reaches another page
 * (Zen 3, L2 512 KB, interleaved against N in one block: sgemm 768^3 1.00-1.10x, 1024^3
 * 1.10x, 1536^3 1.31x, 2048^3 1.07x; sgemm 512^3, whose block just fits, 0.97x). */
static int n_block(const jt_gemm_t *r)
{
  long col = (long)(r->kc ? r->kc : r->k) * (r->f64 ? 8 : 4);
  if ((long)r->n * col <= l2_bytes())
    return r->n;
  long most = l2_bytes() / 2 / col; /* at least a column block */
  return even_blocks(r->n, most < r->nr ? r->nr : most, r->nr);
}

/* M's block for r (its kc and block of rows resolved), where each column block's sliver of B
 * is copied and every row block passes over it (emit_col_block): all of M where A's part of a
 * K block fits half this CPU's L2, else as many rows (whole row blocks) as fill half of it,
 * evened out over the blocks. Past L2 each column block reads A's part again from L3. */
static int m_block(const jt_gemm_t *r, int rows)
{
  long row = (long)r->kc * (r->f64 ? 8 : 4);
  if ((long)r->m * row <= l2_bytes() / 2)
    return r->m;
  long most = l2_bytes() / 2 / row / rows * rows;
  return even_blocks(r->m, most < rows ? rows : most, rows);
}

/* Whether GEMM s (not a MUL_MAT, dot or norm) is a GEMV with op(A) = A that sweeps A's columns
 * (emit_sweep): asked to (gemv 1), or by default where A fills an L1 (32 KB) or more and no
 * blocking is asked for. */
static int sweeps(const jt_gemm_t *s)
{
  if (s->n != 1 || s->ta || s->gemv == 2)
    return 0;
  return s->gemv == 1 || (!s->mr_vecs && !s->nr && !s->kc && !s->copy_a &&
                          (long)s->m * s->k * (s->f64 ? 8 : 4) >= 32768);
}

static int isa_regs(int isa) { return isa == JT_ISA_AVX512 ? 32 : 16; }
static int isa_bits(int isa) { return isa == JT_ISA_AVX512 ? 512 : 256; }

/* A dot product's chains of FMAs where it has 4 vectors a chain (jt_dot_emit: resolved as
 * 4 x 2; 2 x 2 from 16 vectors, else 2 x 1): an FMA's latency times the FMAs a cycle, 4 x 2 on
 * these CPUs, so the loop is bound by its loads, not by one chain's latency. Zen 3, against
 * the 2 chains before, interleaved in one process: x and y aligned, sdot 1024 1.34-1.37x, 4096
 * 1.18-1.42x, ddot 512 1.16x, 2048 1.65x; both 16 bytes off a line, 1.00-1.02x without the
 * peel (dot_realigns: the split loads bind), with it sdot 256 1.15x, 1024 1.33x, 4096 1.34x,
 * ddot 512 1.37x, 2048 1.44x; sdot 16384 (64 KB, from L2) 1.00-1.06x. */
#define DOT_CHAINS 8

/* The registers a block of mv vectors of rows by nr columns takes: its accumulators, and op(A)'s
 * mv vectors and a broadcast of op(B), or (bfirst: a GEMM block, block_k) with fewer columns
 * than vectors op(B)'s nr broadcasts and one vector of op(A) at a time. */
static int block_regs(int mv, int nr, int bfirst)
{
  return mv * nr + (bfirst && nr < mv ? nr : mv) + 1;
}

/* The most columns mv vectors of rows leave registers for (at least 1, at most cap), evened
 * out over n. */
static int fit_nr(int regs, int mv, int n, int cap, int bfirst)
{
  int most = 1;
  while (most < cap && block_regs(mv, most + 1, bfirst) <= regs)
    most++;
  int blocks = (n + most - 1) / most;
  return (n + blocks - 1) / blocks;
}

/* The bits of s's elements: 64 for a double GEMM, GEMV or dot; 32 otherwise (ggml's MUL_MAT
 * and norms compute in float whatever f64 says). */
static int elem_bits(const jt_gemm_t *s) { return s->f64 && !s->mm && !s->add_rms_mul ? 64 : 32; }

int jt_gemm_resolve(const jt_gemm_t *s, int host_isa, jt_gemm_t *r, char *err, size_t len)
{
  *r = *s;
  r->isa = s->isa ? s->isa : host_isa;
  if (r->isa < JT_ISA_AVX2 || r->isa >= JT_ISA_COUNT || r->isa > host_isa) {
    snprintf(err, len, "this CPU cannot run %s code (it has %s)", jt_isa_name(r->isa),
             jt_isa_name(host_isa));
    return -1;
  }
  r->vbits = s->vbits ? s->vbits : isa_bits(r->isa);
  /* A GEMM whose M fits half a vector gets half-width vectors: the other half would be
   * masked or pieced off in every load and store, and the A^T panel of 512-bit rows is
   * written by 256-bit stores that its loads cannot forward from (dgemm TN 4^3 took 34 ns at
   * 512 bits, 6 ns at 256, on an AVX-512 Xeon) */
  if (!s->vbits && !s->mm && !s->dot && !s->add_rms_mul && !jt_gemm_dots(s) && r->vbits > 128 &&
      (long)s->m * elem_bits(s) <= r->vbits / 2)
    r->vbits /= 2;
  if ((r->vbits != 128 && r->vbits != 256 && r->vbits != 512) || r->vbits > isa_bits(r->isa)) {
    snprintf(err, len, "%s has no %d-bit vectors", jt_isa_name(r->isa), r->vbits);
    return -1;
  }
  if (s->nc < 0) {
    snprintf(err, len, "nc is a number of columns, or 0, not %d", s->nc);
    return -1;
  }
  if (s->mc < 0) {
    snprintf(err, len, "mc is a number of rows, or 0, not %d", s->mc);
    return -1;
  }
  if (s->copy_a < 0 || s->copy_a > 2) {
    snprintf(err, len, "copy_a is 1 (A's panels copied where unaligned), 2 (always) or 0, not %d",
             s->copy_a);
    return -1;
  }
  int regs = isa_regs(r->isa), V = r->vbits / elem_bits(s);
  r->tails = s->tails ? s->tails : 2;
  if (s->gemv < 0 || s->gemv > 2) {
    snprintf(err, len, "gemv is 1 (a sweep over A's columns), 2 (blocks of rows) or 0, not %d",
             s->gemv);
    return -1;
  }
  r->copy_a = 0, r->nc = 0, r->mc = 0, r->gemv = 0;
  if (s->mm) { /* panels of JT_MM_MR rows, or twice that (two zmm); k blocks of JT_MM_KC */
    r->kc = 0;
    if (s->n == 1) /* decode's kernel goes row by row: no blocking */
      r->mr_vecs = JT_MM_MR / V, r->nr = 1;
    r->mr_vecs = r->mr_vecs ? r->mr_vecs : V == 16 ? 2 : JT_MM_MR / V;
    r->nr = r->nr ? r->nr : fit_nr(regs, r->mr_vecs, s->n, MM_NR, 0); /* s->nr up to JT_MM_MAX_NR */
    int rows = r->mr_vecs * V;
    if (r->nr > JT_MM_MAX_NR || (rows != JT_MM_MR && rows != 2 * JT_MM_MR) ||
        (rows != JT_MM_MR && r->isa != JT_ISA_AVX512)) {
      snprintf(err, len, "MUL_MAT blocks are %d (or under AVX-512 %d) rows by at most %d columns",
               JT_MM_MR, 2 * JT_MM_MR, JT_MM_MAX_NR);
      return -1;
    }
  } else if (s->dot) { /* one loop over k, in mr_vecs x nr chains of FMAs, 4 vectors each */
    int vecs = (s->k + V - 1) / V, chains = vecs >= 4 * DOT_CHAINS ? DOT_CHAINS : vecs >= 16 ? 4 : 2;
    r->mr_vecs = s->mr_vecs ? s->mr_vecs : chains > 2 ? chains / 2 : 2;
    r->nr = s->nr ? s->nr : chains > 2 ? 2 : 1;
    r->kc = 0;
  } else if (s->add_rms_mul) { /* one loop over k: no blocking to choose */
    r->mr_vecs = 2, r->nr = 1, r->kc = 0;
  } else if (jt_gemm_dots(s)) { /* dot products (emit_dots): no blocking to choose */
    r->mr_vecs = 1, r->nr = 1, r->kc = 0;
  } else if (sweeps(s)) { /* a GEMV sweeping A (emit_sweep): its blocking is its own */
    if ((s->mr_vecs && s->mr_vecs != 1) || (s->nr && s->nr != 1) || (s->kc && s->kc != s->k) ||
        s->copy_a) { /* any other than its own, resolved */
      snprintf(err, len, "a GEMV's sweep (gemv 1) has no blocking to ask for");
      return -1;
    }
    r->gemv = 1, r->mr_vecs = r->nr = 1, r->kc = s->k, r->nc = s->n;
  } else {
    /* a matrix-vector product's chains are its vectors of rows: 4 where M has them. A GEMM's
     * rows in one block where M fits 3 vectors (AVX-512 and AVX2 alike, bench: 1.04-1.13x
     * over 2 vectors for sgemm n = 36-48, dgemm 18-24; 1.04-1.10x for AVX2 sgemm 20-24,
     * dgemm 10-12), or, for floats, exactly 4 under AVX-512's 32 registers (4 x 6: op(A)'s
     * whole column per k, each of B's and C's columns touched once per call; interleaved
     * against 2 x 13, sgemm 64^3 1.02-1.03x; not dgemm 32^3, 0.99x against 2 x 11, nor sgemm
     * 56^3, with a tail in the fourth vector, 0.96-0.98x); else 2 vectors (3 or 4 over a
     * longer M measured 0.94-1.02x). Under AVX2's 16 registers, 4 vectors by 3 columns
     * (block_k: op(B)'s broadcasts held, op(A) a vector at a time) where M's vectors end in a
     * block of 3 or 4, or span 10 or more (Zen 3, interleaved against the 2 x 6 default: sgemm
     * 32^3 1.15x, 56^3 1.10x, 64^3 1.10x, 80^3 1.10x, 96^3 1.06x, 128^3 1.00x, dgemm 28^3
     * 1.14x, 32^3 1.13x, 64^3 1.03x, 96^3 1.05x, 16^3 1.00x; not 4 + 1 or 4 + 2: sgemm 40^3
     * 0.87x against 3 + 2, 48^3 0.94x, dgemm 20^3 0.90x, 24^3 0.92x).
     * op(A) = A^T keeps 2: its panel's rows bound K, and its packing was not measured so */
    int vecs = (s->m + V - 1) / V;
    int four = regs == 32 ? vecs == 4 && s->m % V == 0 && !s->f64
                          : vecs % 4 == 0 || vecs % 4 == 3 || vecs >= 10;
    int mv = s->n == 1 ? 4 : !s->ta && vecs <= 3 ? vecs : !s->ta && four ? 4 : 2;
    r->mr_vecs = s->mr_vecs ? s->mr_vecs : s->m > (mv - 1) * V ? mv : vecs;
    /* a block of one vector over pairs of k's holds two accumulators a column */
    jt_gemm_t two = *r;
    two.nr = 1;
    int acc_vecs = pairs(&two, r->mr_vecs, two.nr) ? 2 : r->mr_vecs;
    r->nr = s->nr ? s->nr : fit_nr(regs, acc_vecs, s->n, JT_MAX_NR, 1);
    long esz = s->f64 ? 8 : 4, rows = (long)r->mr_vecs * V;
    long width = rows > r->nr ? rows : r->nr; /* a K block's A panel, or B sliver (emit_bcopy) */
    if (s->ta) {
      r->kc = 0;
    } else { /* 1 KB of each B column per block, as the panel allows, where K spans more than
                two: bench_kernels measured blocked / one block at 1.43x for dgemm 512^3, 1.00x
                for sgemm 512^3 and 256^3, 0.87x for dgemm 256^3 (two blocks) */
      long most = GEMM_KC_BYTES / esz;
      most = most * width * esz > JT_GEMM_PANEL_BYTES ? JT_GEMM_PANEL_BYTES / (width * esz) : most;
      r->kc = s->kc == -1 ? s->k : s->kc ? s->kc : s->k <= 2 * most ? s->k : (int)most;
    }
    long panel = (s->ta ? rows * s->k : r->kc < s->k ? width * r->kc : 0) * esz;
    if (panel > JT_GEMM_PANEL_BYTES || r->kc < 0 || r->kc > s->k) {
      snprintf(err, len, "a packed panel of %ld x %d elements exceeds %d bytes",
               s->ta ? rows : width, s->ta ? s->k : r->kc, JT_GEMM_PANEL_BYTES);
      return -1;
    }
    if (realigns(r, (int)rows)) /* the block is read again only where N has two column blocks */
      r->copy_a = s->copy_a ? s->copy_a : s->n > r->nr && a_piles_up(r, (int)rows) ? 2 : 1;
    r->nc = s->nc > 0 && s->nc < s->n ? s->nc : s->nc ? s->n : n_block(r);
    if (k_blocked(r) && b_piles_up(r)) /* the sliver's order: M in blocks that stay in L2 */
      r->mc = s->mc > 0 && s->mc < s->m ? s->mc : s->mc ? s->m : m_block(r, (int)rows);
    r->gemv = s->n == 1 && !s->ta ? 2 : 0; /* a GEMV in blocks of rows */
  }
  if (r->mr_vecs < 1 || r->mr_vecs > JT_MAX_MR_VECS || r->nr < 1 || r->nr > JT_MAX_NR ||
      block_regs(r->mr_vecs, r->nr, !s->mm) > regs ||
      r->tails < 1 || r->tails > 2) {
    snprintf(err, len, "a %d x %d block of %d-bit vectors does not fit %s's %d registers",
             r->mr_vecs, r->nr, r->vbits, jt_isa_name(r->isa), regs);
    return -1;
  }
  return 0;
}

int jt_gemm_candidates(const jt_gemm_t *s, int host_isa, jt_gemm_t *out, int max)
{
  jt_gemm_t d;
  char err[160], names[JT_TUNE_MAX][160];
  if (jt_gemm_resolve(s, host_isa, &d, err, sizeof err))
    return 0;
  int wide = isa_bits(d.isa), V = wide / elem_bits(s);
  /* Proposals over the default, most plausible first; a field s sets stays s's. */
  jt_gemm_t p[8] = {{0}};
  int np = 1; /* p[0]: the default */
  if (s->mm) {
    if (s->n > 1) {
      p[np++].nr = 8;
      p[np++].mr_vecs = d.mr_vecs * V == JT_MM_MR ? 2 * JT_MM_MR / V : JT_MM_MR / V;
    }
    p[np++].vbits = wide / 2;
  } else if (s->dot) {
    p[np++].vbits = wide / 2;
    p[np].mr_vecs = 2, p[np++].nr = 1;
  } else if (!s->add_rms_mul) {
    if (d.gemv == 1) /* blocks of rows (the sweep measured 0.73x where A fits L1) */
      p[np++].gemv = 2;
    p[np++].mr_vecs = d.mr_vecs > 2 ? 2 : s->m > 2 * V ? 3 : 1;
    if (d.copy_a)
      p[np++].copy_a = 3 - d.copy_a;
    if (d.kc && d.kc < s->k)
      p[np++].kc = -1;
    else if (!s->ta && s->k > GEMM_KC_BYTES / (s->f64 ? 8 : 4))
      p[np++].kc = GEMM_KC_BYTES / (s->f64 ? 8 : 4);
    p[np++].vbits = d.vbits == wide ? wide / 2 : wide;
    if (s->m > 3 * V && d.mr_vecs != 4)
      p[np++].mr_vecs = 4;
    if (s->m % V)
      p[np++].tails = d.tails == 1 ? 2 : 1;
  }
  int n = 0;
  for (int i = 0; i < np && n < max && n < JT_TUNE_MAX; i++) {
    jt_gemm_t c = *s;
    c.vbits = s->vbits ? s->vbits : p[i].vbits;
    c.mr_vecs = s->mr_vecs ? s->mr_vecs : p[i].mr_vecs;
    c.nr = s->nr ? s->nr : p[i].nr;
    c.tails = s->tails ? s->tails : p[i].tails;
    c.kc = s->kc ? s->kc : p[i].kc;
    c.copy_a = s->copy_a ? s->copy_a : p[i].copy_a;
    c.nc = s->nc;
    c.mc = s->mc;
    c.gemv = s->gemv ? s->gemv : p[i].gemv;
    if (jt_gemm_resolve(&c, host_isa, &out[n], err, sizeof err))
      continue;
    jt_gemm_name(&out[n], names[n], sizeof names[n]);
    int dup = 0;
    for (int j = 0; j < n; j++)
      dup |= strcmp(names[j], names[n]) == 0;
    n += !dup;
  }
  return n;
}

void jt_gemm_name(const jt_gemm_t *s, char *buf, size_t len)
{
  char how[64]; /* the resolved generation choices */
  int blocked = s->nc > 0 && s->nc < s->n; /* N in blocks: their width (else nothing) */
  int mblocked = s->mc > 0 && s->mc < s->m; /* M in blocks: their height (else nothing) */
  snprintf(how, sizeof how, "_%s_v%d_%dx%d_t%d_k%d_c%d%s%.0d%s%.0d%s%.0d", jt_isa_name(s->isa),
           s->vbits, s->mr_vecs, s->nr, s->tails, s->kc, s->copy_a, blocked ? "_n" : "",
           blocked ? s->nc : 0, mblocked ? "_m" : "", mblocked ? s->mc : 0, s->gemv ? "_w" : "",
           s->gemv);
  if (s->add_rms_mul) {
    snprintf(buf, len, "opjit_%s_f32_n%d%s", s->add_rms_mul == 2 ? "rms_mul" : "add_rms_mul", s->k,
             how);
    return;
  }
  if (s->mm) {
    snprintf(buf, len, "opjit_mul_mat%s_%s_%dx%dx%d%s", s->mm_add ? "_add" : "",
             s->w16 == 2 ? "f16x32" : s->w16 ? "f16" : "f32", s->m, s->n, s->k, how);
    return;
  }
  if (s->dot) {
    snprintf(buf, len, "opjit_%cdot_n%d%s", s->f64 ? 'd' : 's', s->k, how);
    return;
  }
  snprintf(buf, len, "opjit_%cgemm_%c%c_%dx%dx%d_l%d_%d_%d_a%d_b%d%s", s->f64 ? 'd' : 's',
           s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->m, s->n, s->k, s->lda, s->ldb, s->ldc,
           s->alpha_one, s->beta_class, how);
}

/* The types of s's element and vector, and its blocking. */
static void setup_types(gen_t *g)
{
  LLVMContextRef cx = g->cx;
  int f64 = elem_bits(g->g) == 64;
  g->elem = f64 ? LLVMDoubleTypeInContext(cx) : LLVMFloatTypeInContext(cx);
  g->V = g->g->vbits / (f64 ? 64 : 32);
  g->MV = g->g->mr_vecs;
  g->MR = g->MV * g->V;
  g->NR = g->g->nr;
  g->vec = LLVMVectorType(g->elem, (unsigned)g->V);
  g->i64 = LLVMInt64TypeInContext(cx);
  g->i32 = LLVMInt32TypeInContext(cx);
  g->ptr = LLVMPointerTypeInContext(cx, 0);
}

/* The kernel function (jt_gemm_fn's signature), its attributes and intrinsics, a builder at
 * its entry. */
static void begin_kernel(gen_t *g)
{
  setup_types(g);
  jt_gemm_name(g->g, g->name, sizeof g->name);
  LLVMContextRef cx = g->cx;
  LLVMTypeRef dbl = LLVMDoubleTypeInContext(cx);
  LLVMTypeRef params[5] = {g->ptr, g->ptr, g->ptr, dbl, dbl};
  g->fn = LLVMAddFunction(g->mod, g->name, LLVMFunctionType(LLVMVoidTypeInContext(cx), params, 5, 0));
  /* A large frame (the A^T panel) touches the stack page by page: past the guard page it would
   * fault like any deep call instead of silently writing over what lies below the stack. */
  LLVMAddTargetDependentFunctionAttr(g->fn, "probe-stack", "inline-asm");
  for (unsigned i = 0; i < 3; i++) { /* A, B and C never alias: the caller's guard checks */
    unsigned kind = LLVMGetEnumAttributeKindForName("noalias", 7);
    LLVMAddAttributeAtIndex(g->fn, i + 1, LLVMCreateEnumAttribute(cx, kind, 0));
  }
  vector_intrinsics(g);
  g->b = LLVMCreateBuilderInContext(cx);
  LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(cx, g->fn, "entry"));
  g->a = LLVMGetParam(g->fn, 0);
  g->bm = LLVMGetParam(g->fn, 1);
  g->c = LLVMGetParam(g->fn, 2);
}

/* Closes the kernel the builder is in; returns it. */
static LLVMValueRef end_kernel(gen_t *g)
{
  LLVMBuildRetVoid(g->b);
  /* An empty function right after the kernel: its address ends the kernel's code, which perf
   * maps and the sampler need (ORC's C API gives no symbol sizes). */
  char end[160];
  snprintf(end, sizeof end, "%s" JT_END_SUFFIX, g->name);
  LLVMValueRef marker =
      LLVMAddFunction(g->mod, end, LLVMFunctionType(LLVMVoidTypeInContext(g->cx), NULL, 0, 0));
  LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->cx, marker, "entry"));
  LLVMBuildRetVoid(g->b);
  LLVMDisposeBuilder(g->b);
  return g->fn;
}

/* ---- GEMV-shaped, op(A) = A^T and n = 1: y = alpha A^T x + beta y -------------------------
 *
 * (numpy's A @ x on a C-order A arrives so; x = op(B) contiguous: jt_gemm_dots.) Each C[i] is
 * the dot product of A's column i, contiguous in k, with x: DOT_ROWS columns at a time, each over DOT_ACC vector accumulators
 * (8 chains of FMAs), x's vector loaded once for the DOT_ROWS of them; the k's past the last
 * whole step in partial vectors (vload: nothing past them is read), then each column's lanes
 * summed. No panel is packed: the A^T panel was a transpose of what is already contiguous. */
#define DOT_ROWS 4
#define DOT_ACC 2
_Static_assert(DOT_ROWS <= JT_MAX_MR_VECS && DOT_ACC <= JT_MAX_NR, "kloop_open's accumulators");

/* Where a GEMV realigns A at run time (emit_dots, emit_sweep): head, the elements of each
 * column up to its first vector boundary (0 .. V-1); kend, where the whole vectors from there
 * end (the dots' K loop: a multiple of its step, at least one step; the sweep's rows: fixed);
 * the lanes of the partial vectors: the head's, the last head lanes of the (aligned) vector
 * before the boundary, and the two at most after kend. */
typedef struct realign_s {
  LLVMValueRef head, kend, head_mask, tail_mask[DOT_ACC];
  int tails; /* how many of those may have lanes */
} realign_t;

/* Columns i0 .. i0+rows-1 of A (rows <= DOT_ROWS) dotted with x into C: their first head
 * elements (a partial vector: emit_dots) apart, or ra->head of them (found at run time: ra),
 * the rest in vectors from there. */
static void dots_block(gen_t *g, LLVMValueRef i0, int rows, LLVMValueRef alpha, LLVMValueRef beta,
                       int head, const realign_t *ra)
{
  const jt_gemm_t *s = g->g;
  long K = s->k - head, V = g->V, kstep = DOT_ACC * V, kloop = K / kstep * kstep;
  LLVMValueRef skip = ra ? ra->head : i64c(g, head), x = at(g, g->bm, skip);
  LLVMValueRef col[DOT_ROWS];
  for (int r = 0; r < rows; r++)
    col[r] = at(g, g->a, add(g, mul(g, add(g, i0, i64c(g, r)), s->lda), skip));
  accs_t acc, next;
  for (int r = 0; r < rows; r++)
    for (int a = 0; a < DOT_ACC; a++)
      next[r][a] = LLVMConstNull(g->vec);
  if (ra) { /* the next block's columns' first lines: each block's four streams start cold */
    LLVMTypeRef pt = g->ptr, t;
    LLVMValueRef f = intrinsic(g, "llvm.prefetch", &pt, 1, &t);
    for (int r = 0; r < rows; r++) {
      LLVMValueRef args[4] = {at_near(g, col[r], i64c(g, (long)DOT_ROWS * s->lda)),
                              LLVMConstInt(g->i32, 0, 0), LLVMConstInt(g->i32, 3, 0),
                              LLVMConstInt(g->i32, 1, 0)};
      LLVMBuildCall2(g->b, t, f, args, 4, "");
    }
  }
  if (ra || kloop) {
    kloop_t l = kloop_open(g, rows, DOT_ACC, acc, i64c(g, 0));
    for (int a = 0; a < DOT_ACC; a++) {
      LLVMValueRef kk = add(g, l.k, i64c(g, a * V));
      LLVMValueRef xv = vload(g, at(g, x, kk), g->V);
      for (int r = 0; r < rows; r++)
        next[r][a] = fma3(g, vload(g, at(g, col[r], kk), g->V), xv, acc[r][a]);
    }
    kloop_close(g, &l, rows, DOT_ACC, acc, next, ra ? ra->kend : i64c(g, kloop), kstep);
  }
  if (ra) { /* the two vectors after the loop, each whole, partial or empty, then the head */
    for (int a = 0; a < ra->tails; a++) {
      LLVMValueRef kk = add(g, ra->kend, i64c(g, a * V)); /* (may lie past the column's end) */
      LLVMValueRef xv = vload_where(g, at_near(g, x, kk), ra->tail_mask[a]);
      for (int r = 0; r < rows; r++)
        next[r][a] = fma3(g, vload_where(g, at_near(g, col[r], kk), ra->tail_mask[a]), xv,
                          next[r][a]);
    }
    LLVMValueRef back = i64c(g, -V); /* the head in the vector before the boundary's */
    LLVMValueRef xv = vload_where(g, at_near(g, x, back), ra->head_mask);
    for (int r = 0; r < rows; r++)
      next[r][0] = fma3(g, vload_where(g, at_near(g, col[r], back), ra->head_mask), xv,
                        next[r][0]);
  }
  for (long kk = ra ? K : kloop; kk < K; kk += V) { /* whole vectors, then a partial one */
    int lanes = K - kk < V ? (int)(K - kk) : (int)V;
    LLVMValueRef xv = vload(g, at(g, x, i64c(g, kk)), lanes);
    for (int r = 0; r < rows; r++) {
      LLVMValueRef *a = &next[r][(kk - kloop) / V % DOT_ACC];
      *a = fma3(g, vload(g, at(g, col[r], i64c(g, kk)), lanes), xv, *a);
    }
  }
  if (head) {
    LLVMValueRef xv = vload(g, g->bm, head);
    for (int r = 0; r < rows; r++)
      next[r][0] = fma3(g, vload(g, at(g, col[r], i64c(g, -head)), head), xv, next[r][0]);
  }
  for (int r = 0; r < rows; r++) {
    LLVMValueRef v = next[r][0];
    for (int a = 1; a < DOT_ACC; a++)
      v = LLVMBuildFAdd(g->b, v, next[r][a], "a");
    LLVMValueRef sum = hsum(g, v), p = at(g, g->c, add(g, i0, i64c(g, r)));
    if (!s->alpha_one)
      sum = LLVMBuildFMul(g->b, sum, alpha, "as");
    if (s->beta_class) {
      LLVMValueRef c = LLVMBuildLoad2(g->b, g->elem, p, "c");
      sum = s->beta_class == 1 ? LLVMBuildFAdd(g->b, sum, c, "s")
                               : LLVMBuildFAdd(g->b, sum, LLVMBuildFMul(g->b, c, beta, "bc"), "s");
    }
    LLVMBuildStore(g->b, sum, p);
  }
}

/* Every column of A, head elements of each apart (or ra->head: dots_block). */
static void dots_all(gen_t *g, LLVMValueRef alpha, LLVMValueRef beta, int head,
                     const realign_t *ra)
{
  int m = g->g->m, mfull = m / DOT_ROWS * DOT_ROWS;
  if (mfull) {
    jt_loop_t i = loop_begin(g, i64c(g, 0), mfull, DOT_ROWS, "i");
    dots_block(g, i.iv, DOT_ROWS, alpha, beta, head, ra);
    loop_end(g, &i);
  }
  if (m > mfull)
    dots_block(g, i64c(g, mfull), m - mfull, alpha, beta, head, ra);
}

/* Emits body(g, head, ctx) for each offset from a vector boundary key (an i64: the offset of an
 * operand's address, bytes) may hold that a kernel realigns, 16, 32 or 48 bytes (head: the
 * elements up to the boundary), and body(g, 0, ctx) for the others (on a boundary, or off it by
 * another amount: read where it lies); the paths join after it. Where the bodies return a value
 * (a vector), that is the join's, else NULL. */
static LLVMValueRef by_offset(gen_t *g, LLVMValueRef key,
                              LLVMValueRef (*body)(gen_t *g, int head, void *ctx), void *ctx)
{
  int esz = g->g->f64 ? 8 : 4, vb = g->V * esz, ncase = vb / 16 - 1;
  LLVMBasicBlockRef plain = LLVMAppendBasicBlockInContext(g->cx, g->fn, "aligned");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->cx, g->fn, "joined");
  LLVMValueRef sw = LLVMBuildSwitch(g->b, key, plain, (unsigned)ncase);
  LLVMValueRef vals[4];
  LLVMBasicBlockRef from[4];
  for (int c = 0; c <= ncase; c++) { /* the cases, then the plain path (c == ncase) */
    if (c < ncase) {
      LLVMBasicBlockRef bb = LLVMAppendBasicBlockInContext(g->cx, g->fn, "realigned");
      LLVMAddCase(sw, i64c(g, 16 * (c + 1)), bb);
      LLVMPositionBuilderAtEnd(g->b, bb);
    } else {
      LLVMPositionBuilderAtEnd(g->b, plain);
    }
    vals[c] = body(g, c < ncase ? (vb - 16 * (c + 1)) / esz : 0, ctx);
    from[c] = LLVMGetInsertBlock(g->b);
    LLVMBuildBr(g->b, done);
  }
  LLVMPositionBuilderAtEnd(g->b, done);
  if (!vals[0])
    return NULL;
  LLVMValueRef joined = LLVMBuildPhi(g->b, LLVMTypeOf(vals[0]), "joined");
  LLVMAddIncoming(joined, vals, from, (unsigned)ncase + 1);
  return joined;
}

/* The offset of g's A from a vector boundary, in bytes (by_offset's key). */
static LLVMValueRef a_offset(gen_t *g)
{
  return LLVMBuildAnd(g->b, LLVMBuildPtrToInt(g->b, g->a, g->i64, ""),
                      i64c(g, g->V * (g->g->f64 ? 8 : 4) - 1), "off");
}

/* Whether a GEMV realigns A by its offset (emit_sweep, emit_dots): vectors of 32 bytes or more,
 * every column as far off a vector boundary as the first (lda a multiple of a vector's bytes),
 * along vectors at least along A's columns (along). */
static int a_realigns(const jt_gemm_t *s, int V, int along, int vectors)
{
  long esz = s->f64 ? 8 : 4, vb = V * esz;
  return vb >= 32 && (long)s->lda * esz % vb == 0 && along >= vectors * V;
}

/* dots_all as by_offset calls it: ctx the scaled alpha and beta. */
static LLVMValueRef dots_from(gen_t *g, int head, void *ctx)
{
  LLVMValueRef *ab = ctx;
  dots_all(g, ab[0], ab[1], head, NULL);
  return NULL;
}

/* Where a GEMV realigns A at run time, along (K or M) elements down each column: the head from
 * A's offset (where it is off a vector boundary by whole elements; else none); the end of the
 * whole vectors after it, end (>= 0: the sweep's, fixed) or the K loop's (-1: a multiple of
 * its step); the masks of the head's partial vector and of the two after the end. */
static realign_t realign_at_run_time(gen_t *g, long along, long end)
{
  long esz = g->g->f64 ? 8 : 4, vb = g->V * esz, kstep = DOT_ACC * g->V;
  LLVMValueRef off = a_offset(g);
  LLVMValueRef whole = LLVMBuildICmp(g->b, LLVMIntEQ, LLVMBuildURem(g->b, off, i64c(g, esz), ""),
                                     i64c(g, 0), "whole");
  LLVMValueRef up = LLVMBuildAnd(g->b, LLVMBuildSub(g->b, i64c(g, vb), off, ""), i64c(g, vb - 1),
                                 "");
  realign_t ra;
  ra.head = LLVMBuildSelect(g->b, whole, LLVMBuildUDiv(g->b, up, i64c(g, esz), ""), i64c(g, 0),
                            "head");
  LLVMValueRef left = LLVMBuildNSWSub(g->b, i64c(g, along), ra.head, "left");
  ra.kend = end >= 0 ? i64c(g, end) : mul(g, LLVMBuildUDiv(g->b, left, i64c(g, kstep), ""), kstep);
  LLVMValueRef rest = LLVMBuildNSWSub(g->b, left, ra.kend, "rest");
  ra.head_mask = LLVMBuildNot(g->b, lanes_below(g, LLVMBuildNSWSub(g->b, i64c(g, g->V), ra.head,
                                                                  "")), "lead");
  for (int a = 0; a < DOT_ACC; a++)
    ra.tail_mask[a] = lanes_below(g, LLVMBuildNSWSub(g->b, rest, i64c(g, a * g->V), ""));
  ra.tails = end >= 0 ? (int)((along - end + g->V - 1) / g->V) : DOT_ACC;
  return ra;
}

/* As the sweep does (emit_sweep), the dots start A's columns at a vector boundary where they lie
 * off one, every column as far off as the first (lda a multiple of a vector's bytes), K two
 * vectors or more: their first elements up to it in a partial vector (x's loads stay where x
 * lies: it is read again for every block of columns, from L1). A float GEMV^T 2048^2 on the
 * Zen 5, A 16 bytes off against aligned: 331 us a call against 219 on one core. From K of
 * eight vectors on, one body takes A's offset at run time (any whole elements off: the loop's
 * trip count and the partial vectors' masks follow from it); below, a body per offset (16, 32,
 * 48 bytes) is picked at run time (the masks and loop cost 3-30 % of a call at K of 3-4
 * vectors, Zen 5). One body where there were four (AVX-512; two under AVX2): a float GEMV^T
 * 1024^2 compiles in 7.9-9.6 ms against 16.4-17.4, 864 bytes of code against 2528, and runs
 * as fast (0.98-1.02x at every offset, float and double, 1024^2 and 2048^2, Zen 5). With one
 * body, each block of columns prefetches the first line of the next block's: without, a double
 * GEMV^T 2048^2 (A from memory) ran 1.02-1.06x slower than with the body per offset (whose
 * partial loads at a block's end happened to touch those lines), with, 0.98-1.02x. */
static void emit_dots(gen_t *g, LLVMValueRef alpha, LLVMValueRef beta)
{
  LLVMValueRef ab[2] = {alpha, beta};
  if (a_realigns(g->g, g->V, g->g->k, 8)) {
    realign_t ra = realign_at_run_time(g, g->g->k, -1);
    dots_all(g, alpha, beta, 0, &ra);
  } else if (a_realigns(g->g, g->V, g->g->k, 2)) {
    by_offset(g, a_offset(g), dots_from, ab);
  } else {
    dots_from(g, 0, ab);
  }
}

/* emit(g, start, len) for every block of step in [0, total): the full ones in an IR loop, the
 * last, shorter one after it. */
static void emit_blocks(gen_t *g, int total, int step, const char *name,
                        void (*emit)(gen_t *, LLVMValueRef, int))
{
  int full = total / step * step;
  if (full) {
    jt_loop_t l = loop_begin(g, i64c(g, 0), full, step, name);
    emit(g, l.iv, step);
    loop_end(g, &l);
  }
  if (total > full)
    emit(g, i64c(g, full), total - full);
}

/* count elements on the stack, on a cache line of their own: the micro-kernel's vector loads
 * from a panel never split a line. Allocated in the entry block, whatever block the builder is
 * in: a fixed frame, however many times the code that uses it runs. */
static LLVMValueRef stack_panel(gen_t *g, long count, const char *name)
{
  LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(g->fn);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(g->cx);
  LLVMValueRef first = LLVMGetFirstInstruction(entry);
  if (first)
    LLVMPositionBuilderBefore(b, first);
  else
    LLVMPositionBuilderAtEnd(b, entry);
  LLVMValueRef p = LLVMBuildAlloca(b, LLVMArrayType2(g->elem, (uint64_t)count), name);
  LLVMSetAlignment(p, 64);
  LLVMDisposeBuilder(b);
  return p;
}

/* The stack panels of a GEMM kernel (NULL where it has none): A's K-block slice or B's sliver
 * (jt_gemm_t.kc), A's copied panel (copy_a). */
typedef struct panels_s {
  LLVMValueRef slice, sliver, copied;
} panels_t;

/* Rows i0 .. i0+rows-1 of C, K blocked with op(B) = B copied: every column block, its sliver
 * copied and the rows' row blocks passing over it, so that A's part stays in L2 (m_block). */
static void emit_m_block(gen_t *g, LLVMValueRef i0, int rows)
{
  const jt_gemm_t *s = g->g;
  jt_gemm_t part = *s;
  part.m = rows;
  LLVMValueRef a0 = g->a, c0 = g->c;
  g->a = at(g, a0, i0);
  g->c = at(g, c0, i0);
  g->g = &part;
  emit_blocks(g, part.n, g->NR, "j", emit_col_block);
  g->g = s, g->a = a0, g->c = c0;
}

/* The product over g->g's n columns, B's at g->bm and C's at g->c: K in blocks (each row
 * block's slice of A, or each column block's sliver of B, copied), or A's panels copied (where
 * unaligned, or always), or the blocks reading A where it lies. */
static void emit_columns(gen_t *g, const panels_t *p)
{
  const jt_gemm_t *s = g->g;
  jt_loop_t kb = {0};
  if (k_blocked(s)) {
    g->pack = p->slice, g->bpack = p->sliver;
    kb = loop_begin(g, i64c(g, 0), s->k, s->kc, "kc");
    g->kc = kb.iv;
    LLVMValueRef e = LLVMBuildNSWAdd(g->b, kb.iv, i64c(g, s->kc), "kce");
    g->kc_end = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, e, i64c(g, s->k), ""), e,
                                i64c(g, s->k), "kce");
    g->first = LLVMBuildICmp(g->b, LLVMIntEQ, kb.iv, i64c(g, 0), "first");
  }
  LLVMBasicBlockRef done = NULL;
  if (s->copy_a == 1) { /* A read where it lies when its columns are on a vector boundary */
    long vbytes = s->vbits / 8, lda_bytes = (long)s->lda * (s->f64 ? 8 : 4);
    LLVMValueRef at_a = LLVMBuildPtrToInt(g->b, g->a, g->i64, "");
    LLVMValueRef off = LLVMBuildAnd(g->b, LLVMBuildOr(g->b, at_a, i64c(g, lda_bytes), ""),
                                    i64c(g, vbytes - 1), "off");
    LLVMBasicBlockRef plain = LLVMAppendBasicBlockInContext(g->cx, g->fn, "aligned");
    LLVMBasicBlockRef copied = LLVMAppendBasicBlockInContext(g->cx, g->fn, "unaligned");
    done = LLVMAppendBasicBlockInContext(g->cx, g->fn, "done");
    LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntEQ, off, i64c(g, 0), ""), plain, copied);
    LLVMPositionBuilderAtEnd(g->b, plain);
    emit_blocks(g, s->m, g->MR, "i", emit_row_block);
    LLVMBuildBr(g->b, done);
    LLVMPositionBuilderAtEnd(g->b, copied);
  }
  if (s->copy_a) { /* one K block, A's panel copied all the same */
    g->pack = p->copied;
    g->kc = i64c(g, 0), g->kc_end = i64c(g, s->k);
    g->first = LLVMConstInt(LLVMInt1TypeInContext(g->cx), 1, 0);
  }
  if (g->bpack && s->mc > 0 && s->mc < s->m) /* ... in blocks of rows that stay in L2 */
    emit_blocks(g, s->m, s->mc, "ic", emit_m_block);
  else if (g->bpack) /* columns outside, rows inside: the sliver stays in L1 */
    emit_blocks(g, s->n, g->NR, "j", emit_col_block);
  else
    emit_blocks(g, s->m, g->MR, "i", emit_row_block);
  if (k_blocked(s))
    loop_end(g, &kb);
  if (done) {
    LLVMBuildBr(g->b, done);
    LLVMPositionBuilderAtEnd(g->b, done);
  }
  if (!s->ta)
    g->pack = NULL;
  g->bpack = g->kc = g->kc_end = g->first = NULL;
}

/* ---- GEMV-shaped, op(A) = A and n = 1: y = alpha A x + beta y, a sweep over A's columns ----
 *
 * Rows in chunks of SWEEP_BYTES of each column; per chunk, y's partial sums in a stack panel
 * (zeroed first), then k's SWEEP_K at a time: their x's broadcast, and every vector of the chunk
 * loaded from the panel, updated by those columns of A and stored back. A's columns stream
 * from front to back, SWEEP_K of them side by side, where blocks of rows would step a column
 * (lda) apart from one k to the next: a page apart at lda = 1024 floats, where the prefetchers
 * give up. The chunk's sums then go to C as beta says. Zen 3, one thread, interleaved, against
 * OpenBLAS's Zen ?gemv / the blocks of rows: sgemv 256^2 1.05 / 1.27x, 512^2 1.06 / 1.32x,
 * 1024^2 0.92 / 2.31x, 2048^2 0.97 / 3.91x; dgemv 256^2 1.24 / 1.34x, 2048^2 1.01 / 3.46x
 * (docs/jit.md). 4 k's at a time 0.77x of OpenBLAS at sgemv 2048^2, chunks of 2 KB half as
 * fast, 8 KB 0.86-1.05x. Where A fits L1 (sgemv 64^2) the blocks' sums in registers win. */
#define SWEEP_BYTES 4096
#define SWEEP_K 8
_Static_assert(DOT_ACC >= 2, "realign_t: the rows after the sweep's whole vectors take two");

/* What a pass over a chunk's vectors does to each (sweep_pass). */
enum { SWEEP_ZERO, SWEEP_COLS, SWEEP_STORE };

/* A chunk's rows beyond its rows from A's vector boundary on, found at run time (realign_t):
 * those before the boundary (lead: a partial vector in the panel's first) and the partial
 * vectors of rows after them (trail); NULL: none. */
typedef struct edges_s {
  const realign_t *lead, *trail;
} edges_t;

/* One vector of the chunk at i0 from row r (an i64, within the chunk), lanes of it or (mask)
 * those where mask holds, its sums in the panel's vector at pr: zeroed, or updated by ku
 * columns of A (col: each column's chunk; xb: their x's broadcast), or stored to C as alpha
 * and beta say. The panel has room for whole vectors. */
static void sweep_vec(gen_t *g, int what, LLVMValueRef i0, LLVMValueRef r, LLVMValueRef pr,
                      int lanes, LLVMValueRef mask, const LLVMValueRef *col,
                      const LLVMValueRef *xb, int ku)
{
  LLVMValueRef py = at(g, g->pack, pr);
  if (what == SWEEP_ZERO) {
    vstore(g, LLVMConstNull(g->vec), py, g->V);
  } else if (what == SWEEP_COLS) {
    LLVMValueRef t = vload(g, py, g->V);
    for (int u = 0; u < ku; u++) {
      LLVMValueRef a = mask ? vload_where(g, at_near(g, col[u], r), mask)
                            : vload(g, at(g, col[u], r), lanes);
      t = fma3(g, a, xb[u], t);
    }
    vstore(g, t, py, g->V);
  } else {
    LLVMValueRef pc = (mask ? at_near : at)(g, g->c, add(g, i0, r));
    LLVMValueRef v = scaled_plus_c(g, vload(g, py, g->V), pc, lanes, mask);
    if (mask)
      vstore_where(g, v, pc, mask);
    else
      vstore(g, v, pc, lanes);
  }
}

/* sweep_vec over the chunk at i0: its edges before (e), then a loop over the whole vectors of
 * the rows after them, then the partial one, then its edges after. */
static void sweep_pass(gen_t *g, int what, LLVMValueRef i0, const edges_t *e, int rows,
                       const LLVMValueRef *col, const LLVMValueRef *xb, int ku)
{
  int full = rows / g->V * g->V, p0 = e->lead ? g->V : 0;
  if (e->lead) { /* (none where A lies on a boundary: its masked loads would cost 3 %) */
    LLVMBasicBlockRef after = if_open(g, LLVMBuildICmp(g->b, LLVMIntNE, e->lead->head,
                                                       i64c(g, 0), "lead"));
    sweep_vec(g, what, i0, i64c(g, -g->V), i64c(g, 0), 0, e->lead->head_mask, col, xb, ku);
    if_close(g, after);
  }
  if (full) {
    jt_loop_t v = loop_begin(g, i64c(g, 0), full, g->V, "sv");
    sweep_vec(g, what, i0, v.iv, add(g, v.iv, i64c(g, p0)), g->V, NULL, col, xb, ku);
    loop_end(g, &v);
  }
  if (rows > full)
    sweep_vec(g, what, i0, i64c(g, full), i64c(g, p0 + full), rows - full, NULL, col, xb, ku);
  for (int t = 0; e->trail && t < e->trail->tails; t++)
    sweep_vec(g, what, i0, i64c(g, rows + t * g->V), i64c(g, p0 + rows + t * g->V), 0,
              e->trail->tail_mask[t], col, xb, ku);
}

/* The chunk at i0 (its edges and rows), ku columns from k: panel += A[i0.., k..k+ku-1] x[k..]. */
static void sweep_cols(gen_t *g, LLVMValueRef i0, const edges_t *e, int rows, LLVMValueRef k,
                       int ku)
{
  const jt_gemm_t *s = g->g;
  LLVMValueRef xb[SWEEP_K], col[SWEEP_K];
  for (int u = 0; u < ku; u++) {
    LLVMValueRef kk = add(g, k, i64c(g, u));
    LLVMValueRef ix = s->tb ? mul(g, kk, s->ldb) : kk; /* op(B)'s only column */
    xb[u] = splat(g, LLVMBuildLoad2(g->b, g->elem, at(g, g->bm, ix), "x"));
    col[u] = at(g, g->a, add(g, i0, mul(g, kk, s->lda)));
  }
  sweep_pass(g, SWEEP_COLS, i0, e, rows, col, xb, ku);
}

/* The chunk of rows at i0 (its edges and rows): the panel zeroed, every k, then C. */
static void sweep_chunk_with(gen_t *g, LLVMValueRef i0, const edges_t *e, int rows)
{
  const jt_gemm_t *s = g->g;
  sweep_pass(g, SWEEP_ZERO, i0, e, rows, NULL, NULL, 0);
  int kfull = s->k / SWEEP_K * SWEEP_K;
  if (kfull) {
    jt_loop_t k = loop_begin(g, i64c(g, 0), kfull, SWEEP_K, "sk");
    sweep_cols(g, i0, e, rows, k.iv, SWEEP_K);
    loop_end(g, &k);
  }
  if (s->k > kfull)
    sweep_cols(g, i0, e, rows, i64c(g, kfull), s->k - kfull);
  sweep_pass(g, SWEEP_STORE, i0, e, rows, NULL, NULL, 0);
}

static void sweep_chunk(gen_t *g, LLVMValueRef i0, int rows)
{
  static const edges_t none;
  sweep_chunk_with(g, i0, &none, rows);
}

/* Rows [from, from + rows) in chunks of chunk rows: A and C seen from row from on. */
static void sweep_rows(gen_t *g, int from, int rows, int chunk)
{
  const jt_gemm_t *s = g->g;
  if (rows <= 0)
    return;
  jt_gemm_t part = *s;
  part.m = rows;
  LLVMValueRef a0 = g->a, c0 = g->c;
  g->a = at(g, a0, i64c(g, from)), g->c = at(g, c0, i64c(g, from)), g->g = &part;
  emit_blocks(g, part.m, chunk, "sc", sweep_chunk);
  g->g = s, g->a = a0, g->c = c0;
}

/* The sweep with A's offset found at run time: A and C seen from A's first vector boundary
 * (head rows on), m0 rows from there in whole vectors in chunks (as many as any head leaves),
 * the head's rows before the first chunk's, the rest (under two vectors) after the last's. */
static void sweep_realigned(gen_t *g, int chunk)
{
  const jt_gemm_t *s = g->g;
  long V = g->V, m0 = (s->m - (V - 1)) / V * V;
  realign_t ra = realign_at_run_time(g, s->m, m0);
  LLVMValueRef a0 = g->a, c0 = g->c;
  g->a = at(g, a0, ra.head), g->c = at(g, c0, ra.head);
  int first = m0 < chunk ? (int)m0 : chunk, last = first + ((int)m0 - first - 1) / chunk * chunk;
  sweep_chunk_with(g, i64c(g, 0), &(edges_t){.lead = &ra, .trail = first == m0 ? &ra : NULL},
                   first);
  if (m0 > first) {
    sweep_rows(g, first, last - first, chunk);
    sweep_chunk_with(g, i64c(g, last), &(edges_t){.trail = &ra}, (int)m0 - last);
  }
  g->a = a0, g->c = c0;
}

/* The sweep, in chunks of SWEEP_BYTES of rows. Where A's columns start off a vector boundary
 * (malloc and numpy hand out 16-byte aligned arrays: 16, 32 or 48 bytes off), each of the sweep's
 * vector loads would span two cache lines: A streams at half the rate (a float GEMV 2048^2
 * split in two on the Zen 5, A 16 bytes off, 179-216 us a call against 97-122 aligned, its
 * library's 150-170). So the first chunk starts with the rows up to A's first boundary (a
 * partial vector), and every load after them is aligned, A's offset found at run time
 * (sweep_realigned: one body for every offset, where there was one per offset, 16, 32 and 48
 * bytes, and one for the rest: a float GEMV 1024^2 compiles in 8.0-8.3 ms against 16.7-18.5,
 * 1136 bytes of code against 2768, a double one in 9.4-9.8 against 19.8-20.7, and runs as fast,
 * 0.98-1.03x at every offset, M of 32 to 2048, Zen 5). */
static void emit_sweep(gen_t *g)
{
  const jt_gemm_t *s = g->g;
  int chunk = SWEEP_BYTES / (s->f64 ? 8 : 4);
  chunk = chunk < s->m ? chunk : (s->m + g->V - 1) / g->V * g->V;
  int realign = a_realigns(s, g->V, s->m, 2);
  g->pack = stack_panel(g, chunk + (realign ? 3 * g->V : 0), "ysum");
  if (realign)
    sweep_realigned(g, chunk);
  else
    sweep_rows(g, 0, s->m, chunk);
}

/* The product's columns [j0, j0 + cols) (j0 an i64) as one N block: emit_columns over B and C
 * from there, with n = cols. */
static void emit_n_block(gen_t *g, LLVMValueRef j0, int cols, const panels_t *p)
{
  const jt_gemm_t *s = g->g;
  jt_gemm_t part = *s;
  part.n = cols;
  LLVMValueRef b0 = g->bm, c0 = g->c;
  g->bm = at(g, b0, LLVMBuildNSWMul(g->b, j0, i64c(g, s->tb ? 1 : s->ldb), ""));
  g->c = at(g, c0, LLVMBuildNSWMul(g->b, j0, i64c(g, s->ldc), ""));
  g->g = &part;
  emit_columns(g, p);
  g->g = s, g->bm = b0, g->c = c0;
}

LLVMValueRef jt_gemm_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s)
{
  gen_t g = {.cx = cx, .mod = mod, .g = s};
  begin_kernel(&g);
  LLVMValueRef alpha = LLVMGetParam(g.fn, 3), beta = LLVMGetParam(g.fn, 4);
  if (!s->f64) {
    alpha = LLVMBuildFPTrunc(g.b, alpha, g.elem, "alpha");
    beta = LLVMBuildFPTrunc(g.b, beta, g.elem, "beta");
  }
  if (jt_gemm_dots(s)) {
    emit_dots(&g, alpha, beta);
    return end_kernel(&g);
  }
  g.alpha = splat(&g, alpha);
  g.beta = splat(&g, beta);
  if (s->gemv == 1) {
    emit_sweep(&g);
    return end_kernel(&g);
  }
  if (s->ta)
    g.pack = stack_panel(&g, (long)g.MR * s->k, "pack");
  /* K in blocks of kc (jt_gemm_resolve: 1 KB of each B column, fewer where a panel would
   * exceed JT_GEMM_PANEL_BYTES), so that B's block stays in L2 while every row block passes
   * over it; each row block's slice of A copied into a panel (emit_copy), or where B's columns
   * pile up in L1 each column block's sliver of B (emit_bcopy). The A^T panel bounds K
   * already: no blocking there. N in blocks of nc where B's part of a K block would outgrow
   * L2 (n_block). */
  panels_t p = {0};
  if (k_blocked(s) && b_piles_up(s))
    p.sliver = stack_panel(&g, (long)g.NR * s->kc, "sliver");
  else if (k_blocked(s))
    p.slice = stack_panel(&g, (long)g.MR * s->kc, "panel");
  if (s->copy_a)
    p.copied = stack_panel(&g, (long)g.MR * s->k, "copied");
  int nc = s->nc > 0 && s->nc < s->n ? s->nc : s->n, full = s->n / nc * nc;
  if (nc == s->n) {
    emit_columns(&g, &p);
  } else {
    jt_loop_t jc = loop_begin(&g, i64c(&g, 0), full, nc, "jc");
    emit_n_block(&g, jc.iv, nc, &p);
    loop_end(&g, &jc);
    if (full < s->n)
      emit_n_block(&g, i64c(&g, full), s->n - full, &p);
  }
  return end_kernel(&g);
}

/* The dot product: two vector accumulators over K (partial loads for the tail), summed, then
 * reduced across lanes (reassociation allowed: the order differs from a scalar loop's, within
 * the bound the verification checks). */
/* The sum of x[i] * y[i], i < k, as a vector whose lanes add up to it: the s's mr_vecs x nr
 * chains of FMAs over whole steps, the vectors left then the partial one spread over them, the
 * chains summed pairwise. */
static LLVMValueRef dot_sum(gen_t *g, LLVMValueRef x, LLVMValueRef y, int k)
{
  int chains = g->g->mr_vecs * g->g->nr, step = chains * g->V;
  int full = k / step * step;
  accs_t acc, next;
  for (int c = 0; c < chains; c++)
    next[0][c] = LLVMConstNull(g->vec);
  if (full) {
    kloop_t l = kloop_open(g, 1, chains, acc, i64c(g, 0));
    for (int c = 0; c < chains; c++) {
      LLVMValueRef ix = add(g, l.k, i64c(g, c * g->V));
      next[0][c] = fma3(g, vload(g, at(g, x, ix), g->V), vload(g, at(g, y, ix), g->V),
                        acc[0][c]);
    }
    kloop_close(g, &l, 1, chains, acc, next, i64c(g, full), step);
  }
  for (int off = full, c = 0; off < k; off += g->V, c = (c + 1) % chains) {
    int lanes = k - off < g->V ? k - off : g->V;
    LLVMValueRef ix = i64c(g, off);
    next[0][c] = fma3(g, vload(g, at(g, x, ix), lanes), vload(g, at(g, y, ix), lanes),
                      next[0][c]);
  }
  for (int w = chains; w > 1;) {
    int h = (w + 1) / 2;
    for (int c = 0; c + h < w; c++)
      next[0][c] = LLVMBuildFAdd(g->b, next[0][c], next[0][c + h], "sum");
    w = h;
  }
  return next[0][0];
}

/* Whether s's dot product peels x up to a vector boundary where it lies 16, 32 or 48 bytes off
 * one and y lies off one too (malloc and numpy hand out 16-byte aligned arrays; a vector load
 * across two lines costs two): y's loads come aligned as well where it lies as far off as x.
 * 1 KB of x at least. With 256-bit vectors, x and y both 16 bytes off, sdot 256 1.15x, 1024
 * 1.33x, 4096 1.34x, ddot 2048 1.44x (Zen 3, generator 29); with 512-bit ones (every offset but
 * 0 splits every load; Zen 5, generator 33), sdot 4096 76-79 ns a call aligned, 163 with both
 * off alike, 152 off apart, 117 with one of them off (1024: 20, 43, 40, 31). */
static int dot_realigns(const jt_gemm_t *s)
{
  return s->vbits >= 256 && (long)s->k * (s->f64 ? 8 : 4) >= 1024;
}

/* x . y as by_offset calls it: the first head elements (a partial vector; 0: none) apart, the
 * rest from there. */
static LLVMValueRef dot_from(gen_t *g, int head, void *ctx)
{
  (void)ctx;
  if (!head)
    return dot_sum(g, g->a, g->bm, g->g->k);
  LLVMValueRef first = fma3(g, vload(g, g->a, head), vload(g, g->bm, head), LLVMConstNull(g->vec));
  LLVMValueRef rest =
      dot_sum(g, at(g, g->a, i64c(g, head)), at(g, g->bm, i64c(g, head)), g->g->k - head);
  return LLVMBuildFAdd(g->b, rest, first, "sum");
}

LLVMValueRef jt_dot_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s)
{
  gen_t g = {.cx = cx, .mod = mod, .g = s};
  begin_kernel(&g);
  LLVMValueRef sum;
  if (dot_realigns(s)) {
    int vb = s->vbits / 8;
    LLVMValueRef off[2];
    for (int v = 0; v < 2; v++)
      off[v] = LLVMBuildAnd(g.b, LLVMBuildPtrToInt(g.b, v ? g.bm : g.a, g.i64, ""),
                            i64c(&g, vb - 1), "off");
    /* x's offset where y's is the same (both come aligned) or y is off a boundary too (half the
     * loads come aligned), else 0: read where they lie (aligning x would split y's loads) */
    LLVMValueRef keep = LLVMBuildOr(g.b, LLVMBuildICmp(g.b, LLVMIntEQ, off[0], off[1], ""),
                                    LLVMBuildICmp(g.b, LLVMIntNE, off[1], i64c(&g, 0), ""), "");
    sum = by_offset(&g, LLVMBuildSelect(g.b, keep, off[0], i64c(&g, 0), "key"), dot_from, NULL);
  } else {
    sum = dot_from(&g, 0, NULL);
  }
  LLVMSetAlignment(LLVMBuildStore(g.b, hsum(&g, sum), g.c), s->f64 ? 8 : 4);
  return end_kernel(&g);
}

/* The fused ADD + RMS_NORM + MUL (jt_add_rms_mul_fn): per row, one pass computes and stores
 * x = a + b (RMS_NORM + MUL alone: x = a, not stored) and sums x^2 (products in float, sums in
 * a double vector), the scale follows ggml's float steps, and a second pass stores
 * s = x * scale and y = s * w. */
LLVMValueRef jt_add_rms_mul_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s)
{
  gen_t g = {.cx = cx, .mod = mod, .g = s};
  setup_types(&g);
  jt_gemm_name(s, g.name, sizeof g.name);
  LLVMTypeRef f32 = LLVMFloatTypeInContext(cx), f64 = LLVMDoubleTypeInContext(cx);
  LLVMTypeRef params[8] = {g.ptr, g.ptr, g.ptr, g.ptr, g.ptr, g.ptr, g.i64, f32};
  g.fn = LLVMAddFunction(mod, g.name, LLVMFunctionType(LLVMVoidTypeInContext(cx), params, 8, 0));
  vector_intrinsics(&g);
  g.b = LLVMCreateBuilderInContext(cx);
  LLVMPositionBuilderAtEnd(g.b, LLVMAppendBasicBlockInContext(cx, g.fn, "entry"));
  LLVMValueRef pa = LLVMGetParam(g.fn, 0), pb = LLVMGetParam(g.fn, 1), pw = LLVMGetParam(g.fn, 2);
  LLVMValueRef px = LLVMGetParam(g.fn, 3), ps = LLVMGetParam(g.fn, 4), py = LLVMGetParam(g.fn, 5);
  LLVMValueRef rows = LLVMGetParam(g.fn, 6), eps = LLVMGetParam(g.fn, 7);
  LLVMTypeRef dvec = LLVMVectorType(f64, (unsigned)g.V), dvt = dvec, f32t = f32, rt;
  LLVMValueRef reduce = intrinsic(&g, "llvm.vector.reduce.fadd", &dvt, 1, &rt);
  LLVMTypeRef sqrt_t;
  LLVMValueRef sqrtf_ = intrinsic(&g, "llvm.sqrt", &f32t, 1, &sqrt_t);
  int n = s->k, full = n / g.V * g.V;

  /* for (r = 0; r < rows; r++): a runtime loop (rows is not baked in) */
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g.b);
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(cx, g.fn, "row");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(cx, g.fn, "rowbody");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(cx, g.fn, "done");
  LLVMBuildBr(g.b, head);
  LLVMPositionBuilderAtEnd(g.b, head);
  LLVMValueRef r = LLVMBuildPhi(g.b, g.i64, "r"), zero64 = i64c(&g, 0);
  LLVMAddIncoming(r, &zero64, &pre, 1);
  LLVMBuildCondBr(g.b, LLVMBuildICmp(g.b, LLVMIntSLT, r, rows, ""), body, done);
  LLVMPositionBuilderAtEnd(g.b, body);
  LLVMValueRef base = LLVMBuildNSWMul(g.b, r, i64c(&g, n), "base");
  int add_ = s->add_rms_mul == 1; /* else RMS_NORM + MUL of x = a */
  LLVMValueRef ra = at(&g, pa, base), rb = add_ ? at(&g, pb, base) : NULL;
  LLVMValueRef rx = add_ ? at(&g, px, base) : ra;
  LLVMValueRef rs = at(&g, ps, base), ry = at(&g, py, base);

  /* Pass 1: x = a + b, acc += (double)(x * x). */
  LLVMValueRef acc = LLVMConstNull(dvec);
  if (full) {
    LLVMBasicBlockRef p1pre = LLVMGetInsertBlock(g.b);
    LLVMBasicBlockRef p1 = LLVMAppendBasicBlockInContext(cx, g.fn, "sumsq");
    LLVMBasicBlockRef p1end = LLVMAppendBasicBlockInContext(cx, g.fn, "sumsq_end");
    LLVMBuildBr(g.b, p1);
    LLVMPositionBuilderAtEnd(g.b, p1);
    LLVMValueRef i = LLVMBuildPhi(g.b, g.i64, "i"), pacc = LLVMBuildPhi(g.b, dvec, "acc");
    LLVMValueRef dzero = LLVMConstNull(dvec);
    LLVMAddIncoming(i, &zero64, &p1pre, 1);
    LLVMAddIncoming(pacc, &dzero, &p1pre, 1);
    LLVMValueRef vx = vload(&g, at(&g, ra, i), g.V);
    if (add_) {
      vx = LLVMBuildFAdd(g.b, vx, vload(&g, at(&g, rb, i), g.V), "x");
      vstore(&g, vx, at(&g, rx, i), g.V);
    }
    LLVMValueRef sq = LLVMBuildFPExt(g.b, LLVMBuildFMul(g.b, vx, vx, "sq"), dvec, "sqd");
    LLVMValueRef nacc = LLVMBuildFAdd(g.b, pacc, sq, "acc1");
    LLVMValueRef next = LLVMBuildNSWAdd(g.b, i, i64c(&g, g.V), "next");
    LLVMAddIncoming(i, &next, &p1, 1);
    LLVMAddIncoming(pacc, &nacc, &p1, 1);
    LLVMBuildCondBr(g.b, LLVMBuildICmp(g.b, LLVMIntSLT, next, i64c(&g, full), ""), p1, p1end);
    LLVMPositionBuilderAtEnd(g.b, p1end);
    acc = nacc;
  }
  LLVMValueRef args[2] = {LLVMConstReal(f64, -0.0), acc};
  LLVMValueRef sum = LLVMBuildCall2(g.b, rt, reduce, args, 2, "sum");
  LLVMSetFastMathFlags(sum, LLVMFastMathAllowReassoc);
  for (int t = full; t < n; t++) { /* the last n % V elements, one by one */
    LLVMValueRef ix = i64c(&g, t);
    LLVMValueRef x = LLVMBuildLoad2(g.b, f32, at(&g, ra, ix), "a");
    if (add_) {
      x = LLVMBuildFAdd(g.b, x, LLVMBuildLoad2(g.b, f32, at(&g, rb, ix), "b"), "x");
      LLVMBuildStore(g.b, x, at(&g, rx, ix));
    }
    sum = LLVMBuildFAdd(g.b, sum, LLVMBuildFPExt(g.b, LLVMBuildFMul(g.b, x, x, ""), f64, ""), "sum");
  }
  /* mean = (float)(sum / n); scale = 1.0f / sqrtf(mean + eps) */
  LLVMValueRef mean = LLVMBuildFPTrunc(g.b, LLVMBuildFDiv(g.b, sum, LLVMConstReal(f64, n), ""), f32, "mean");
  LLVMValueRef sarg[1] = {LLVMBuildFAdd(g.b, mean, eps, "")};
  LLVMValueRef root = LLVMBuildCall2(g.b, sqrt_t, sqrtf_, sarg, 1, "root");
  LLVMValueRef scale = LLVMBuildFDiv(g.b, LLVMConstReal(f32, 1.0), root, "scale");
  LLVMValueRef vscale = splat(&g, scale);

  /* Pass 2: s = x * scale (the norm's output), y = s * w. */
  if (full) {
    jt_loop_t j = loop_begin(&g, zero64, full, g.V, "j");
    LLVMValueRef vs = LLVMBuildFMul(g.b, vload(&g, at(&g, rx, j.iv), g.V), vscale, "s");
    vstore(&g, vs, at(&g, rs, j.iv), g.V);
    vstore(&g, LLVMBuildFMul(g.b, vs, vload(&g, at(&g, pw, j.iv), g.V), "y"), at(&g, ry, j.iv), g.V);
    loop_end(&g, &j);
  }
  for (int t = full; t < n; t++) {
    LLVMValueRef ix = i64c(&g, t);
    LLVMValueRef x = LLVMBuildLoad2(g.b, f32, at(&g, rx, ix), "x");
    LLVMValueRef w = LLVMBuildLoad2(g.b, f32, at(&g, pw, ix), "w");
    LLVMValueRef sv = LLVMBuildFMul(g.b, x, scale, "s");
    LLVMBuildStore(g.b, sv, at(&g, rs, ix));
    LLVMBuildStore(g.b, LLVMBuildFMul(g.b, sv, w, "y"), at(&g, ry, ix));
  }
  LLVMValueRef rnext = LLVMBuildNSWAdd(g.b, r, i64c(&g, 1), "rnext");
  LLVMBasicBlockRef last = LLVMGetInsertBlock(g.b);
  LLVMAddIncoming(r, &rnext, &last, 1);
  LLVMBuildBr(g.b, head);
  LLVMPositionBuilderAtEnd(g.b, done);
  return end_kernel(&g);
}

/* ---- ggml's MUL_MAT (jt_mm_fn) -------------------------------------------------------------
 *
 *   for each block of MC rows in [i0, i1):
 *     for each block of KC k's (the first stores into y, the others add to it):
 *       pack its rows' KC-long slices into MR-row panels: panel[k*MR + r] (f16 converted)
 *       for each block of NR columns of x:
 *         copy (f16: round) the columns' KC-long slices into the scratch
 *         for each MR-row panel: acc[MR x NR] = panel * x[k.., j..]; y[i.., j..] (+)= acc
 * The panel (MR x KC floats, 16 KB) and the NR column slices (4 KB) stay in L1, the packed
 * block (MC x KC, 128 KB) and the block's rows of y (MC x N) in L2 across the k blocks (with
 * the k blocks outside, every k block swept all of y and x through L2 again: 1.02-1.53x
 * slower); each element of w is read from memory once per call, each of x once per MC rows
 * (MC = 256 rather than 64: 0.99-1.19x, the most at 4096x512x1024). KC = 128 rather than 256 costs ~2 % of speed and halves the float
 * sums' error (each output sums k products in KC-long runs). */

/* &base[index] for elements of type t. */
static LLVMValueRef gep(gen_t *g, LLVMTypeRef t, LLVMValueRef base, LLVMValueRef index)
{
  return LLVMBuildInBoundsGEP2(g->b, t, base, &index, 1, "p");
}


/* V consecutive weights at element index ix of w, as floats. */
static LLVMValueRef mm_wload(gen_t *g, LLVMValueRef ix)
{
  if (!g->g->w16)
    return vload(g, at(g, g->a, ix), g->V);
  LLVMTypeRef h = LLVMHalfTypeInContext(g->cx), hv = LLVMVectorType(h, (unsigned)g->V);
  LLVMValueRef v = LLVMBuildLoad2(g->b, hv, gep(g, h, g->a, ix), "h");
  LLVMSetAlignment(v, 2);
  return LLVMBuildFPExt(g->b, v, g->vec, "w");
}

static LLVMValueRef mm_wload1(gen_t *g, LLVMValueRef ix)
{
  if (!g->g->w16)
    return LLVMBuildLoad2(g->b, g->elem, at(g, g->a, ix), "w");
  LLVMTypeRef h = LLVMHalfTypeInContext(g->cx);
  return LLVMBuildFPExt(g->b, LLVMBuildLoad2(g->b, h, gep(g, h, g->a, ix), "h"), g->elem, "w");
}

/* Row row0 + r of the weights; in a half panel (full false: only JT_MM_MR rows left) rows past
 * them are read from the first ones instead, which exist, and zeroed by the caller. */
static LLVMValueRef mm_row(gen_t *g, LLVMValueRef row0, int r, LLVMValueRef full)
{
  LLVMValueRef row = add(g, row0, i64c(g, r));
  if (!full || r < JT_MM_MR)
    return row;
  return LLVMBuildSelect(g->b, full, row, add(g, row0, i64c(g, r - JT_MM_MR)), "row");
}

/* Packs rows row0 .. row0+MR-1, k's kc .. kc+kcl-1, into panel[k*MR + r]. With MR =
 * 2 JT_MM_MR, full (an i1) says whether all are there: else the panel's second half is zero. */
static void mm_pack(gen_t *g, LLVMValueRef row0, LLVMValueRef kc, int kcl, LLVMValueRef panel,
                    LLVMValueRef full)
{
  int wide = set_lanes(g, pack_lanes(g));
  long K = g->g->k;
  int kfull = kcl / g->V * g->V;
  LLVMValueRef vzero = LLVMConstNull(g->vec), zero = LLVMConstNull(g->elem);
  if (kfull) {
    jt_loop_t k = loop_begin(g, i64c(g, 0), kfull, g->V, "pk");
    LLVMValueRef kk = add(g, kc, k.iv);
    for (int grp = 0; grp < g->MR / g->V; grp++) {
      LLVMValueRef v[MAXV];
      for (int r = 0; r < g->V; r++) {
        int row = grp * g->V + r;
        v[r] = mm_wload(g, add(g, mul(g, mm_row(g, row0, row, full), K), kk));
        if (full && row >= JT_MM_MR)
          v[r] = LLVMBuildSelect(g->b, full, v[r], vzero, "w");
      }
      transpose_from(g, v, g->V / 2);
      for (int j = 0; j < g->V; j++) {
        LLVMValueRef d = add(g, mul(g, add(g, k.iv, i64c(g, j)), g->MR), i64c(g, grp * g->V));
        LLVMSetAlignment(LLVMBuildStore(g->b, v[j], at(g, panel, d)), (unsigned)g->V * 4);
      }
    }
    loop_end(g, &k);
  }
  for (int kk = kfull; kk < kcl; kk++)
    for (int r = 0; r < g->MR; r++) {
      LLVMValueRef x = mm_wload1(g, add(g, mul(g, mm_row(g, row0, r, full), K), add(g, kc, i64c(g, kk))));
      if (full && r >= JT_MM_MR)
        x = LLVMBuildSelect(g->b, full, x, zero, "w");
      LLVMBuildStore(g->b, x, at(g, panel, i64c(g, (long)kk * g->MR + r)));
    }
  set_lanes(g, wide);
}

/* Prefetches the lines of the MR x nr block of y at row i, column j0 into L1 (only the first
 * JT_MM_MR rows of a half panel: full false): the block adds to y after its K loop, and y's
 * lines, last touched a whole k block before, are in L2 by then; fetched during the loop, their
 * loads no longer stall the stores at its end. */
static void mm_prefetch_y(gen_t *g, LLVMValueRef i, LLVMValueRef j0, int nr, LLVMValueRef full)
{
  LLVMTypeRef pt = g->ptr, t;
  LLVMValueRef f = intrinsic(g, "llvm.prefetch", &pt, 1, &t);
  int lines = (full ? JT_MM_MR : g->MR) * 4 / 64;
  for (int j = 0; j < nr; j++)
    for (int l = 0; l < lines; l++) {
      LLVMValueRef ix = add(g, mul(g, add(g, j0, i64c(g, j)), g->g->m), add(g, i, i64c(g, l * 16)));
      LLVMValueRef args[4] = {at(g, g->c, ix), LLVMConstInt(g->i32, 1, 0),
                              LLVMConstInt(g->i32, 3, 0), LLVMConstInt(g->i32, 1, 0)};
      LLVMBuildCall2(g->b, t, f, args, 4, "");
    }
}

/* One MR x nr block of y at row i, column j0: the kcl k's of the panel; y stored or added to;
 * in the last k block of a MUL_MAT + ADD, that sum plus the residual stored to out. */
static void mm_micro(gen_t *g, LLVMValueRef panel, LLVMValueRef i, LLVMValueRef j0, int kcl,
                     int nr, int accumulate, int last, LLVMValueRef full)
{
  const jt_gemm_t *s = g->g;
  int nv = g->MV;
  accs_t acc, next;
  if (accumulate)
    mm_prefetch_y(g, i, j0, nr, full);
  /* (Zen 3, 4 k's an iteration against 1: f32 768x32x256 1.09x, 256x32x768 1.32x,
   * 1024x128x1024 1.24x, 768x512x768 1.02x; f16 1.07-1.13x) */
  int step = k_unroll(g, kcl, 1);
  kloop_t l = kloop_open(g, nv, nr, acc, i64c(g, 0));
  accs_t cur; /* the accumulators after each k of the iteration (acc: its phis) */
  memcpy(cur, acc, sizeof cur);
  for (int q = 0; q < step; q++) {
    LLVMValueRef k = q ? add(g, l.k, i64c(g, q)) : l.k;
    LLVMValueRef av[JT_MAX_MR_VECS];
    for (int v = 0; v < nv; v++) {
      av[v] = LLVMBuildLoad2(g->b, g->vec, at(g, panel, add(g, mul(g, k, g->MR), i64c(g, v * g->V))), "a");
      LLVMSetAlignment(av[v], (unsigned)g->V * 4);
    }
    for (int j = 0; j < nr; j++) {
      /* the sliver of x, [j][k] (mm_copy_x) */
      LLVMValueRef xp = at(g, g->xr, add(g, i64c(g, (long)j * kcl), k));
      LLVMValueRef bj = splat(g, LLVMBuildLoad2(g->b, g->elem, xp, "x"));
      for (int v = 0; v < nv; v++)
        next[v][j] = fma3(g, av[v], bj, cur[v][j]);
    }
    memcpy(cur, next, sizeof cur);
  }
  kloop_close(g, &l, nv, nr, acc, next, i64c(g, kcl), step);
  /* y's rows; in a half panel only the first JT_MM_MR exist (the rest belong to another
   * thread, or to no one) */
  int nv0 = full ? JT_MM_MR / g->V : nv;
  LLVMBasicBlockRef after = NULL;
  for (int half = 0; half < 2; half++) {
    if (half && !full)
      break;
    if (half)
      after = if_open(g, full);
    for (int j = 0; j < nr; j++)
      for (int v = half ? nv0 : 0; v < (half ? nv : nv0); v++) {
        LLVMValueRef ix = add(g, mul(g, add(g, j0, i64c(g, j)), s->m), add(g, i, i64c(g, v * g->V)));
        LLVMValueRef p = at(g, g->c, ix), r = next[v][j];
        if (accumulate)
          r = LLVMBuildFAdd(g->b, r, vload(g, p, g->V), "r");
        vstore(g, r, p, g->V); /* with a residual too: the product stays whole in y */
        if (last && g->res)
          vstore(g, LLVMBuildFAdd(g->b, r, vload(g, at(g, g->res, ix), g->V), "o"), at(g, g->out, ix), g->V);
      }
  }
  if (after)
    if_close(g, after);
}

/* Copies the nr columns' kcl-long slices from j0 into xr[j*kcl + k], V at a time, once per
 * row block: contiguous, where x's columns lie k floats apart (4 KB apart at k = 1024, all in
 * one L1 set: more columns than the cache has ways evict each other; f32 prefill at
 * 1024x128x1024 ran ~10 % slower than f16 before its slices were copied). ggml multiplies f16
 * weights with activations rounded to f16 (its vec_dot type): against f16 weights the copy
 * rounds (not those its AMX buffer holds, w16 = 2: it multiplies them with f32 activations). */
static void mm_copy_x(gen_t *g, LLVMValueRef j0, LLVMValueRef kc, int kcl, int nr)
{
  LLVMTypeRef h = LLVMHalfTypeInContext(g->cx), hv = LLVMVectorType(h, (unsigned)g->V);
  int kfull = kcl / g->V * g->V;
  for (int j = 0; j < nr; j++) {
    LLVMValueRef src = at(g, g->bm, add(g, mul(g, add(g, j0, i64c(g, j)), g->g->k), kc));
    LLVMValueRef dst = at(g, g->xr, i64c(g, (long)j * kcl));
    if (kfull) {
      jt_loop_t k = loop_begin(g, i64c(g, 0), kfull, g->V, "rx");
      LLVMValueRef v = vload(g, at(g, src, k.iv), g->V);
      if (g->g->w16 == 1)
        v = LLVMBuildFPExt(g->b, LLVMBuildFPTrunc(g->b, v, hv, "xh"), g->vec, "xr");
      vstore(g, v, at(g, dst, k.iv), g->V);
      loop_end(g, &k);
    }
    for (int t = kfull; t < kcl; t++) {
      LLVMValueRef x = LLVMBuildLoad2(g->b, g->elem, at(g, src, i64c(g, t)), "x");
      if (g->g->w16 == 1)
        x = LLVMBuildFPExt(g->b, LLVMBuildFPTrunc(g->b, x, h, "xh"), g->elem, "xr");
      LLVMBuildStore(g->b, x, at(g, dst, i64c(g, t)));
    }
  }
}

/* With panels of 2 JT_MM_MR rows, whether the panel at row r of the cnt is whole (an i1);
 * NULL when panels are JT_MM_MR rows (always whole). */
static LLVMValueRef mm_full(gen_t *g, LLVMValueRef cnt, LLVMValueRef r)
{
  if (g->MR == JT_MM_MR)
    return NULL;
  return LLVMBuildICmp(g->b, LLVMIntSGE, LLVMBuildNSWSub(g->b, cnt, r, ""), i64c(g, g->MR), "full");
}

/* The cnt rows from ic (at most JT_MM_MC) for the k's kc .. kc+kcl-1. */
static void mm_kblock(gen_t *g, LLVMValueRef ic, LLVMValueRef cnt, LLVMValueRef kc, int kcl,
                      int accumulate, int last)
{
  const jt_gemm_t *s = g->g;
  /* panels of MR rows; with MR = 2 JT_MM_MR the last may hold JT_MM_MR rows only (rows come
   * in multiples of JT_MM_MR): a half panel, which the same code runs */
  jt_loop_t pr = loop_to(g, i64c(g, 0), cnt, g->MR, "pr");
  mm_pack(g, add(g, ic, pr.iv), kc, kcl, at(g, g->pack, mul(g, pr.iv, kcl)), mm_full(g, cnt, pr.iv));
  loop_end(g, &pr);
  int nfull = s->n / g->NR * g->NR, ntail = s->n % g->NR;
  for (int part = 0; part < 2; part++) {
    int nr = part ? ntail : g->NR;
    if (!(part ? ntail : nfull))
      continue;
    jt_loop_t jr = part ? (jt_loop_t){0} : loop_begin(g, i64c(g, 0), nfull, g->NR, "jr");
    LLVMValueRef j0 = part ? i64c(g, nfull) : jr.iv;
    mm_copy_x(g, j0, kc, kcl, nr);
    jt_loop_t ir = loop_to(g, i64c(g, 0), cnt, g->MR, "ir");
    mm_micro(g, at(g, g->pack, mul(g, ir.iv, kcl)), add(g, ic, ir.iv), j0, kcl, nr,
             accumulate, last, mm_full(g, cnt, ir.iv));
    loop_end(g, &ir);
    if (!part)
      loop_end(g, &jr);
  }
}

/* n = 1, a matrix-vector product (llama's decode): one pass over the weights, nothing packed.
 * Row by row, so that each row is one sequential stream for the hardware prefetchers (rows
 * read in interleaved groups left f16 weights at half the memory bandwidth when a row spans
 * less than a page); MV_ACC vector accumulators over the k's in whole vectors, then summed
 * across lanes, the k's left over added one by one. x (rounded to f16 once per call into the
 * scratch against f16 weights) stays in L1. With a residual, out = y + r as each row's y is
 * stored. */
#define MV_ACC 4
_Static_assert(MV_ACC <= JT_MAX_NR, "kloop_open's accumulators");
static void mm_gemv(gen_t *g, LLVMValueRef i0, LLVMValueRef i1, LLVMValueRef scratch)
{
  long K = g->g->k, V = g->V, kstep = MV_ACC * V, kloop = K / kstep * kstep, kvec = K / V * V;
  LLVMValueRef x = g->bm;
  if (g->g->w16 == 1) { /* x rounded into the scratch of k floats (JT_MM_SCRATCH_FLOATS) */
    g->xr = x = scratch;
    mm_copy_x(g, i64c(g, 0), i64c(g, 0), (int)K, 1);
  }
  jt_loop_t ir = loop_to(g, i0, i1, 1, "mr");
  LLVMValueRef row = mul(g, ir.iv, K);
  accs_t acc, next;
  for (int a = 0; a < MV_ACC; a++)
    next[0][a] = LLVMConstNull(g->vec);
  if (kloop) {
    kloop_t l = kloop_open(g, 1, MV_ACC, acc, i64c(g, 0));
    for (int a = 0; a < MV_ACC; a++) {
      LLVMValueRef kk = add(g, l.k, i64c(g, a * V));
      next[0][a] = fma3(g, mm_wload(g, add(g, row, kk)), vload(g, at(g, x, kk), g->V), acc[0][a]);
    }
    kloop_close(g, &l, 1, MV_ACC, acc, next, i64c(g, kloop), kstep);
  }
  for (long kk = kloop; kk < kvec; kk += V) { /* whole vectors past the loop */
    LLVMValueRef *a = &next[0][(kk - kloop) / V];
    *a = fma3(g, mm_wload(g, add(g, row, i64c(g, kk))), vload(g, at(g, x, i64c(g, kk)), g->V), *a);
  }
  for (int w = MV_ACC / 2; w >= 1; w /= 2) /* pairwise */
    for (int a = 0; a < w; a++)
      next[0][a] = LLVMBuildFAdd(g->b, next[0][a], next[0][a + w], "a");
  LLVMValueRef sum = hsum(g, next[0][0]);
  for (long kk = kvec; kk < K; kk++) {
    LLVMValueRef xs = LLVMBuildLoad2(g->b, g->elem, at(g, x, i64c(g, kk)), "x");
    sum = LLVMBuildFAdd(g->b, sum, LLVMBuildFMul(g->b, mm_wload1(g, add(g, row, i64c(g, kk))), xs, "p"), "s");
  }
  LLVMBuildStore(g->b, sum, at(g, g->c, ir.iv)); /* with a residual too: y stays the product */
  if (g->res) {
    LLVMValueRef rv = LLVMBuildLoad2(g->b, g->elem, at(g, g->res, ir.iv), "r");
    LLVMBuildStore(g->b, LLVMBuildFAdd(g->b, sum, rv, "o"), at(g, g->out, ir.iv));
  }
  loop_end(g, &ir);
}

LLVMValueRef jt_mm_emit(LLVMContextRef cx, LLVMModuleRef mod, const jt_gemm_t *s)
{
  gen_t g = {.cx = cx, .mod = mod, .g = s};
  setup_types(&g);
  jt_gemm_name(s, g.name, sizeof g.name);
  /* (w, x, y, i0, i1, scratch), or with a residual (w, x, y, r, out, i0, i1, scratch) */
  int na = s->mm_add ? 2 : 0;
  LLVMTypeRef params[8] = {g.ptr, g.ptr, g.ptr, g.ptr, g.ptr, g.ptr, g.ptr, g.ptr};
  params[3 + na] = params[4 + na] = g.i64;
  g.fn = LLVMAddFunction(mod, g.name, LLVMFunctionType(LLVMVoidTypeInContext(cx), params,
                                                       6 + (unsigned)na, 0));
  /* w, x, scratch; y too unless out may be its memory (attribute indices count from 1) */
  unsigned noalias[] = {1, 2, 6 + (unsigned)na, 3};
  for (unsigned i = 0; i < (na ? 3u : 4u); i++) {
    unsigned kind = LLVMGetEnumAttributeKindForName("noalias", 7);
    LLVMAddAttributeAtIndex(g.fn, noalias[i], LLVMCreateEnumAttribute(cx, kind, 0));
  }
  vector_intrinsics(&g);
  g.b = LLVMCreateBuilderInContext(cx);
  LLVMPositionBuilderAtEnd(g.b, LLVMAppendBasicBlockInContext(cx, g.fn, "entry"));
  g.a = LLVMGetParam(g.fn, 0);
  g.bm = LLVMGetParam(g.fn, 1);
  g.c = LLVMGetParam(g.fn, 2);
  if (na)
    g.res = LLVMGetParam(g.fn, 3), g.out = LLVMGetParam(g.fn, 4);
  LLVMValueRef i0 = LLVMGetParam(g.fn, 3 + (unsigned)na), i1 = LLVMGetParam(g.fn, 4 + (unsigned)na);
  if (s->n == 1) {
    mm_gemv(&g, i0, i1, LLVMGetParam(g.fn, 5 + (unsigned)na));
    return end_kernel(&g);
  }
  int kc0 = s->k < JT_MM_KC ? s->k : JT_MM_KC;
  /* the x sliver, nr <= JT_MM_MAX_NR columns of JT_MM_KC, fits JT_MM_SCRATCH */
  g.pack = LLVMGetParam(g.fn, 5 + (unsigned)na); /* JT_MM_MC x JT_MM_KC floats, the x sliver */
  g.xr = at(&g, g.pack, i64c(&g, (long)JT_MM_MC * JT_MM_KC));
  int single = s->k <= JT_MM_KC;
  jt_loop_t ic = loop_to(&g, i0, i1, JT_MM_MC, "ic");
  LLVMValueRef left = LLVMBuildNSWSub(g.b, i1, ic.iv, "left");
  LLVMValueRef cnt = LLVMBuildSelect(g.b, LLVMBuildICmp(g.b, LLVMIntSLT, left, i64c(&g, JT_MM_MC), ""),
                                     left, i64c(&g, JT_MM_MC), "cnt");
  mm_kblock(&g, ic.iv, cnt, i64c(&g, 0), kc0, 0, single); /* the first block stores */
  if (!single) { /* the full blocks in a loop, then the tail; with a residual the last block
                    stands apart (it adds the residual as it stores) */
    int kfull = s->k / JT_MM_KC * JT_MM_KC, ktail = s->k - kfull;
    int loop_to_ = s->mm_add && !ktail ? kfull - JT_MM_KC : kfull;
    if (loop_to_ > JT_MM_KC) {
      jt_loop_t kc = loop_begin(&g, i64c(&g, JT_MM_KC), loop_to_, JT_MM_KC, "kc");
      mm_kblock(&g, ic.iv, cnt, kc.iv, JT_MM_KC, 1, 0);
      loop_end(&g, &kc);
    }
    if (ktail || s->mm_add)
      mm_kblock(&g, ic.iv, cnt, i64c(&g, loop_to_), ktail ? ktail : JT_MM_KC, 1, 1);
  }
  loop_end(&g, &ic);
  return end_kernel(&g);
}
