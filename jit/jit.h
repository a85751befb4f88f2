/* SPDX-License-Identifier: MIT */
/* The JIT: LLVM-compiled, shape-specialised BLAS kernels. Lives in its own shared object,
 * libopjit-jit.so (which links libLLVM), loaded with dlopen by the agent's compile thread the
 * first time something is worth compiling, so a process that never compiles never loads LLVM.
 * An ORC LLJIT session per compile thread and ISA, targeting the host CPU name and features
 * (narrowed to the ISA); code is never writable and executable at once (ORC's memory manager
 * maps it RW, then RX).
 * Any number of compile threads may call it at once (each kernel's IR is built in a context of
 * its own); compiled kernels may be called from any thread. Every function returns 0, or -1
 * with a sentence in err. */
#ifndef OPJIT_JIT_H
#define OPJIT_JIT_H

#include <stddef.h>
#include <stdint.h>

#define JT_GENERATOR_VERSION 37 /* bumped whenever generated code changes */

/* Instruction sets the generator targets (jt_gemm_t.isa). Each is compiled by a session of its
 * own whose target features are the host's with everything wider turned off, so forcing AVX2 on
 * an AVX-512 machine yields code without EVEX encodings or zmm registers. */
enum {
  JT_ISA_AUTO = 0,   /* the widest this host has */
  JT_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C: vectors of 128 or 256 bits, 16 registers */
  JT_ISA_AVX512 = 2, /* AVX-512 F/VL/BW/DQ: vectors of 128, 256 or 512 bits, 32 registers */
  JT_ISA_COUNT
};
#define JT_MAX_MR_VECS 4 /* vectors per block of rows, at most */
#define JT_MAX_NR 30     /* columns per block, at most */

/* A column-major GEMM, C = alpha * op(A) * op(B) + beta * C, with every shape constant known.
 * Row-major (CBLAS) calls are mapped onto it by the caller: C^T = op(B)^T op(A)^T. */
typedef struct jt_gemm_s {
  int f64;            /* 0: float, 1: double */
  int ta, tb;         /* 0: op(X) = X, 1: op(X) = X^T (conjugate = plain for real types) */
  int m, n, k;        /* C is m x n, op(A) m x k, op(B) k x n; all >= 1 */
  int lda, ldb, ldc;
  int alpha_one;      /* alpha == 1: the product is not scaled */
  int beta_class;     /* 0: beta == 0 (C is never read), 1: beta == 1, 2: any other */
  int dot;            /* 1: a dot product instead: *C = sum of A[i] B[i] for i < k, unit
                         strides (the other fields but f64 and k are ignored) */
  int add_rms_mul;    /* 1: ggml's ADD + RMS_NORM + MUL fused instead, over rows of k floats
                         (jt_add_rms_mul_fn; the other fields are ignored); 2: RMS_NORM + MUL
                         alone, of x = a (b and x are neither read nor written) */
  int mm;             /* 1: ggml's MUL_MAT instead (jt_mm_fn): m weight rows of k (w16: f16,
                         else f32), n activation columns of k floats; only m, n, k, w16 count */
  int w16;           /* 1: f16 weights, activations rounded to f16 (ggml's own MUL_MAT); 2: f16
                         weights, f32 activations (ggml's AMX buffer computes them so) */
  int mm_add;         /* with mm: the product then a residual ADD (jt_mm_add_fn) */
  int syrk;           /* BLAS ?syrk instead, C = alpha op(A) op(A)^T + beta C on one triangle
                         of the n x n C: 1 the upper (row <= column), 2 the lower; stated as the
                         GEMM whose B is A (m = n, tb = !ta, ldb = lda: the caller passes A as
                         B too), of which the other triangle is neither read nor written */
  int fa;             /* 1: ggml's FLASH_ATTN_EXT instead (jt_fa_fn): k the keys' and queries'
                         length (DK), m the values' (DV), n the query rows of the signature
                         (the kernel takes any rows and any number of keys); 2: the same in
                         the f16 steps ggml takes for fewer rows (decode's), n 1 (fa.h,
                         jt_fa_spec) */
  /* How the kernel is generated. 0 everywhere means "decide for this host": the widest ISA it
   * has and the generator's default blocking for the shape. gemm() resolves the zeros (the
   * kernel's name, gemm_name(), spells the resolved values out); tune() returns them resolved
   * to its pick. A GEMM's block is mr_vecs vectors of rows by nr columns: mr_vecs * nr
   * accumulators + mr_vecs + 1 registers must fit the ISA's 16 or 32 (else gemm() fails).
   * MUL_MAT panels are JT_MM_MR rows or, under AVX-512, twice that (mr_vecs = rows / lanes),
   * by nr <= JT_MM_MAX_NR columns. Fields that do not apply to the kernel kind (decode's n = 1,
   * dot products, the RMS norm, jt_gemm_dots) resolve to fixed values. */
  int isa;            /* JT_ISA_*; a wider one than the host has fails */
  int vbits;          /* vector width in bits: 128, 256 or 512 (at most the ISA's; resolved:
                         the ISA's widest, or half that for a GEMM whose M fits half of it) */
  int mr_vecs;        /* GEMM: vectors of rows per block, 1 .. JT_MAX_MR_VECS */
  int nr;             /* columns per block (GEMM, MUL_MAT with n > 1), 1 .. JT_MAX_NR */
  int tails;          /* partial vectors: 1 masked loads and stores (llvm.masked.*: AVX-512
                         k-masks, AVX2 vmaskmov, which AMD microcodes), 2 pieces of 4/2/1
                         elements and scalar stores */
  int kc;             /* GEMM (op(A) = A): K in blocks of kc, each row block's slice of A (or,
                         where B's columns pile up in one L1 set, each column block's sliver of
                         B) copied into a stack panel of at most JT_GEMM_PANEL_BYTES; -1 one
                         block (resolved: kc = k; 0 for kinds without K blocks) */
  int copy_a;         /* GEMM (op(A) = A in one K block, A of 32 KB or more): each row block's
                         slice of A copied into an aligned stack panel before its column blocks
                         read it, 1 where A's columns do not start on a vector boundary (a
                         runtime test), 2 always; 0 decide (resolved: the generator's pick, or
                         0 where the kernel reads A where it lies) */
  int nc;             /* GEMM: N in blocks of nc columns, each block's K blocks and row blocks
                         in turn, so that the part of B every row block reads again stays in L2
                         (and within the TLB's reach); 0 decide (resolved: the generator's pick,
                         n where N is not blocked) */
  int mc;             /* GEMM, K in blocks with each column block's sliver of B copied (B's
                         columns pile up in L1): M in blocks of mc rows, each block's column
                         blocks in turn, so that A's part of a K block (mc x kc), read again for
                         every column block, stays in L2; 0 decide (resolved: the generator's
                         pick, m where M is not blocked; 0 for kernels without such blocks) */
  int gemv;           /* GEMM with n = 1 and op(A) = A (a GEMV): 1 a sweep over A's columns, 8 at
                         a time, y's partial sums in a stack panel; 2 blocks of rows, as a GEMM;
                         0 decide (resolved: the generator's pick; 0 for other shapes) */
} jt_gemm_t;

/* ggml's MUL_MAT, rows [i0, i1) of y (multiples of JT_MM_MR, or i1 = m):
 *   y[j*m + i] = sum over kk < k of w[i*k + kk] * x[j*k + kk]     (i < m, j < n)
 * with x rounded to f16 against f16 weights, as ggml does.
 * Cache-blocked: for each block of JT_MM_KC k's, blocks of JT_MM_MC rows of w are packed (and
 * converted from f16) into the micro-kernel's layout in scratch, then multiplied with the
 * activations' JT_MM_KC-long column slices, copied (against f16 weights rounded) into the
 * scratch, where they stay in L1 across the block's rows. scratch:
 * JT_MM_SCRATCH floats, 64-byte aligned, the caller's (a thread's stack may be too small).
 * n = 1: each row's dot product in one pass over its weights, nothing packed (scratch holds
 * x rounded to f16: JT_MM_SCRATCH_FLOATS(k) floats in every case). */
typedef void (*jt_mm_fn)(const void *w, const float *x, float *y, int64_t i0, int64_t i1,
                         float *scratch);
/* MUL_MAT then ggml's ADD of a residual r (fusion 2), rows [i0, i1):
 *   out[j*m + i] = y[j*m + i] + r[j*m + i],  y as jt_mm_fn computes it
 * The product is computed into y (the MUL_MAT's own output, whole at the end, as jt_mm_fn
 * leaves it: a reader the graph does not show, in another split, sees the product); the last
 * k block stores it and then out, its sum with the residual: the float steps of jt_mm_fn
 * followed by ggml's ADD, bit for bit. out may be the very memory of y (then it ends as the
 * sum) or of r; y must not overlap r. */
typedef void (*jt_mm_add_fn)(const void *w, const float *x, float *y, const float *r, float *out,
                             int64_t i0, int64_t i1, float *scratch);
#define JT_MM_MR 16
#define JT_MM_MC 256
#define JT_MM_KC 128
#define JT_MM_MAX_NR 24 /* columns per MUL_MAT block, at most (the x sliver in the scratch) */
#define JT_MM_SCRATCH ((JT_MM_MC + JT_MM_MAX_NR) * JT_MM_KC) /* the packed block, the x sliver */
/* The scratch a MUL_MAT kernel of k takes, in floats (n = 1 rounds all of x into it). */
#define JT_MM_SCRATCH_FLOATS(k) ((size_t)((k) > JT_MM_SCRATCH ? (k) : JT_MM_SCRATCH))
#define JT_MM_MIN_N 16 /* fewer columns are matrix-vector products, bound by one pass over the
                          weights: packing them would only add a second. One column (decode)
                          has a kernel of its own that packs nothing; 2 .. MIN_N-1 stay on ggml */

/* The fused ADD + RMS_NORM + MUL kernel, row by row (each row k floats, rows contiguous):
 *   x = a + b;  s = x * 1/sqrt(mean(x^2) + eps);  y = s * w
 * with ggml's arithmetic: x^2 in float, summed in double, mean and scale in float. Every
 * node's output is written, as ggml would (the ADD's is read again as the next residual; the
 * norm's may be read by another split). Outputs may be the very memory of an input (each
 * element is read before it is written), never a part of it. */
typedef void (*jt_add_rms_mul_fn)(const float *a, const float *b, const float *w, float *x,
                                  float *s, float *y, int64_t rows, float eps);

/* ggml's FLASH_ATTN_EXT (fa) over query rows [i0, i1) of one head: f32 queries, f16 keys,
 * values and mask, softmax online over key tiles (ggml's tiled CPU path, f32 throughout):
 *   s_j = (q_i . k_j) * scale + mask_ij;   out_i = sum_j e^(s_j - max) v_j / sum_j e^(s_j - max)
 * with q_i at q + i * q_stride (DK floats), k_j at k + j * k_stride (DK halves), v_j alike (DV
 * halves), mask_ij at mask[i * mask_stride + j] (f16; -inf leaves a key out), out_i at out +
 * i * out_stride (DV floats); strides in elements. A row whose keys are all masked gets zeros.
 * Key tiles masked for every row of a block are skipped (a causal mask's upper triangle).
 * scratch: JT_FA_SCRATCH_FLOATS(DK, DV, n_kv) floats, 64-byte aligned, the caller's (the keys
 * transposed and the values converted to f32 once per call, then the row blocks' scores). */
typedef struct jt_fa_args_s {
  const float *q;
  const uint16_t *k, *v, *mask;
  float *out;
  int64_t q_stride, k_stride, v_stride, mask_stride, out_stride;
  int64_t n_kv;   /* keys (and values), >= 1 */
  int64_t i0, i1; /* the query rows computed */
  float scale;
  /* fa == 2 only (the f16 kernel reads these, the f32 one does not): */
  int64_t c0, c1; /* the keys taken, [c0, c1) of n_kv */
  int64_t heads;  /* heads [0, heads): head h's q and out h times these strides on, its k and
                     v its K/V head's times theirs (in elements; the mask is every head's) */
  int64_t q_head, k_head, v_head, out_head;
  float *ms; /* row i of head h: its maximum score at ms[2 ((i - i0) heads + h)], its sum at the
                next float */
  int64_t group; /* query heads per K/V head (GQA; 0 or 1: a K/V head each) */
  int64_t head0; /* head 0's place in its group, < group: head h's K/V head is
                    (head0 + h) / group - head0 / group (k and v point at head 0's) */
} jt_fa_args_t;
/* With fa == 2 the kernel takes ggml's one_chunk steps (ggml-cpu/ops.cpp, F16 K and V) for
 * each row over keys [c0, c1), and leaves the softmax unnormalised for the caller to combine
 * chunks as ggml does: the query rounded to f16; each unmasked key's score its f32 dot with
 * the rounded query (products summed as ggml_vec_dot_f16 sums them: 4 vector accumulators over
 * DK in steps of 4 vectors, added 0+2, 1+3, then across lanes) times scale plus the mask; when
 * it exceeds the maximum M, the accumulator times e^(M - s) rounded to f16 and the weight 1,
 * else the weight e^(s - M) (e^x glibc's expf, which ggml calls, bit for bit); the accumulator
 * plus weight times v_j, rounded to f16; the sum S times the rescale plus the weight. out_i
 * gets the accumulator (DV floats of f16 values), ms M and S (-inf and 0 when every key is
 * masked). DK a multiple of 4 vectors, DV of one. */
typedef void (*jt_fa_fn)(const jt_fa_args_t *args, float *scratch);
#define JT_FA_TILE 64 /* keys per tile, at most (the scratch's padding) */
#define JT_FA_MAX_D 256 /* DK and DV at most */
#define JT_FA_SCRATCH_FLOATS(dk, dv, n_kv)                                                         \
  ((size_t)((dk) + (dv)) * (size_t)(((n_kv) + JT_FA_TILE - 1) / JT_FA_TILE * JT_FA_TILE) +         \
   8 * (size_t)(JT_FA_TILE + (dv) + 4))

/* The compiled kernel. alpha and beta are passed as doubles whatever the type; the kernel
 * honours only what its class leaves variable. A and B must not overlap C. */
typedef void (*jt_gemm_fn)(const void *a, const void *b, void *c, double alpha, double beta);

/* What tune() did: every candidate it compiled and timed, resolved, and its median time. */
#define JT_TUNE_MAX 4
typedef struct jt_tune_s {
  int n;                       /* candidates compiled and timed */
  int best;                    /* the index of the pick in cand */
  jt_gemm_t cand[JT_TUNE_MAX]; /* resolved (every generation field set) */
  double ns[JT_TUNE_MAX];      /* median ns per call (MUL_MAT: a call over the timed rows) */
  uint64_t compile_ns;         /* spent compiling the candidates */
  uint64_t compile_cpu_ns;     /* ... of the calling thread's CPU time (what a compile costs) */
  uint64_t time_ns;            /* spent timing them (scratch data included) */
} jt_tune_t;

typedef struct jt_api_s {
  int abi; /* JT_API_ABI */
  /* Creates this thread's session for the host's widest ISA (fails on a CPU without AVX2, FMA
   * and F16C); sessions for narrower ISAs are created when first asked for. */
  int (*init)(char *err, size_t len);
  /* Compiles one kernel; *size receives its code's length in bytes (an upper bound), *obj a
   * malloc'ed copy of the relocatable ELF object it was linked from (NULL if none was
   * captured; jit/objload.h loads it without LLVM) and *obj_len its length. */
  int (*gemm)(const jt_gemm_t *g, jt_gemm_fn *out, size_t *size, void **obj, size_t *obj_len,
              char *err, size_t len);
  /* Compiles up to ncand (<= JT_TUNE_MAX) candidates for g where the generator's model leaves
   * the choice open (fields of g that are set stay fixed: an isa set keeps every candidate
   * within it), times each on the compile thread on g's shape with scratch data (interleaved
   * rounds, medians; a MUL_MAT on 32-256 of its rows), and keeps the fastest:
   * *best receives its resolved parameters (its kernel name, gemm_name(best), tells them
   * apart: store it with the object), *out etc. its kernel as gemm() returns it (one
   * reference); the others are released. report (may be NULL) receives what was measured.
   * Costs (bench_kernels, 3 candidates, an AVX-512 Xeon under load): the compiles, 18-61 ms
   * for GEMMs up to 100^3, 18-110 ms for MUL_MATs, plus 2-17 ms of timing (7 rounds; kernels
   * whose calls take milliseconds get as few as 3, near 40 ms); dot products, dot-product
   * GEMVs and decode kernels have 2 candidates (full and half width), the fused RMS norm 1.
   * ncand <= 1 is gemm(). */
  int (*tune)(const jt_gemm_t *g, int ncand, jt_gemm_t *best, jt_gemm_fn *out, size_t *size,
              void **obj, size_t *obj_len, jt_tune_t *report, char *err, size_t len);
  /* The kernel's symbol name (for perf maps and profiles), g's zero fields resolved for this
   * host as gemm() resolves them. */
  void (*gemm_name)(const jt_gemm_t *g, char *buf, size_t len);
  /* Drops one reference to a kernel: each successful gemm() returns one, and two signatures
   * whose problems are one kernel share it. The last frees its code and symbols (the caller
   * guarantees no thread can still run it) and returns 0; 1: other references remain; -1. */
  int (*release)(jt_gemm_fn fn, char *err, size_t len);
  /* Disposes of the calling thread's sessions, before the thread ends (one that compiled for a
   * while: their memory would outlive it), once it has released its kernels; a session whose
   * kernel another thread still holds (shared by name: gemm()) is kept. A later gemm() on the
   * thread makes a session again. */
  void (*drop_sessions)(void);
  /* "19.1.7", and the CPU the code is generated for ("znver3"). */
  const char *(*llvm_version)(void);
  const char *(*cpu)(void);
  /* The widest JT_ISA_* this host has (what JT_ISA_AUTO means), and an ISA's name ("avx2",
   * "avx512"; "auto" for 0): what a stored kernel's key must carry. */
  int (*host_isa)(void);
  const char *(*isa_name)(int isa);
} jt_api_t;
#define JT_API_ABI 13
#define JT_API_SYMBOL "opjit_jit_api"
#define JT_MODULE_NAME "libopjit-jit.so"

/* The generator's limits: larger shapes stay on the original library. K comes in blocks (kc)
 * and, where B's part of a K block would outgrow L2, N in blocks (nc): bench_jit's "large" set
 * measures the large products against OpenBLAS on its best and on its SSE3 kernels. */
#define JT_GEMM_MAX_DIM 2048
#define JT_GEMM_MAX_K 2048
#define JT_SYRK_MAX_N 512 /* a SYRK's n: its kernel calls a GEMM per tile in straight code */
#define JT_GEMM_MAX_K_PACKED 256 /* with op(A) = A^T the kernel packs an MR x K panel on the
                                    stack (and it probes the stack as it grows), unless it
                                    computes dot products (jt_gemm_dots) */
#define JT_GEMM_PANEL_BYTES 32768 /* that panel's size at most, and a K block's (kc): a blocking
                                     whose panel would be larger fails (2 zmm x 256 k's fit) */

/* 1 when g is a matrix-vector product the generator computes as dot products over A's
 * columns: op(A) = A^T, n = 1 and x = op(B) contiguous. */
static inline int jt_gemm_dots(const jt_gemm_t *g)
{
  return !g->mm && !g->dot && !g->add_rms_mul && !g->syrk && g->ta && g->n == 1 &&
         (!g->tb || g->ldb == 1);
}

/* ---- Kernel kinds ----------------------------------------------------------------------------
 *
 * A jt_gemm_t describes one kernel of one kind; the kind's row in jt_kinds says everything that
 * differs between kinds: what the generator compiles, how the kernel is called, how its result
 * is checked, how it is named and emitted. A new kernel kind is its emitter (one file in jit/),
 * its enum value, its flag in jt_gemm_t and one row in jit/kind.c. jt_kind_of is the only place
 * that tells kinds apart by their flags.
 *
 * Why weak references: the rows are read both by the agent, which links no LLVM and must decide
 * what is compilable before it loads libopjit-jit.so, and by that module, which emits. kind.c is
 * linked into both; its emit, resolve and symbol columns refer to the generator's functions
 * weakly, so they are the generator's in libopjit-jit.so and NULL in the agent, which never
 * calls them. */
enum jt_kind {
  JT_KIND_GEMM = 0,    /* a GEMM, GEMV (n = 1) or AXPY (k = 1) */
  JT_KIND_DOT,         /* dot */
  JT_KIND_ADD_RMS_MUL, /* add_rms_mul */
  JT_KIND_MM,          /* mm */
  JT_KIND_MM_ADD,      /* mm with mm_add */
  JT_KIND_SYRK,        /* syrk */
  JT_KIND_FA,          /* fa */
  JT_KINDS
};

/* How a kernel of a kind is called. */
enum jt_abi {
  JT_ABI_GEMM = 0,    /* jt_gemm_fn */
  JT_ABI_MM,          /* jt_mm_fn */
  JT_ABI_MM_ADD,      /* jt_mm_add_fn */
  JT_ABI_ADD_RMS_MUL, /* jt_add_rms_mul_fn */
  JT_ABI_FA,          /* jt_fa_fn */
};

struct LLVMOpaqueContext; /* LLVM's handles (llvm-c/Types.h), spelled as their opaque structs */
struct LLVMOpaqueModule;
struct LLVMOpaqueValue;

typedef struct jt_kind_s {
  const char *name; /* "gemm", "dot", "add_rms_mul", "mm", "syrk", "fa": the machine model keeps
                       compile times by it (agent/machine.h) */
  int abi;          /* enum jt_abi */
  int tunes;        /* 1: tune() times candidate blockings; 0: one kernel per problem */
  int guards;       /* 1: a JT_ABI_GEMM kernel whose C must overlap neither op(A) nor op(B): the
                       caller guards each call (0: its host checks overlaps itself) */
  /* 1 when g is within what the generator compiles for this kind (pure: no LLVM, no host). */
  int (*supported)(const jt_gemm_t *g);
  /* Verification of a JT_ABI_GEMM kernel: 1 when it writes C's element (row i, column j) of
   * the m x n C; NULL: every one. Every element it does not write must be left as it was. */
  int (*writes)(const jt_gemm_t *g, long i, long j);
  /* In libopjit-jit.so (NULL elsewhere): g's zero generation fields decided for a host whose
   * widest ISA is host_isa (0, or -1 with a sentence in err: jt_gemm_resolve's contract); the
   * kernel's symbol, unique per resolved g; the IR of the kernel (resolved g) added to mod,
   * followed by its JT_END_SUFFIX marker (gemm.h), returning the kernel's function. */
  int (*resolve)(const jt_gemm_t *g, int host_isa, jt_gemm_t *r, char *err, size_t len);
  void (*symbol)(const jt_gemm_t *g, char *buf, size_t len);
  struct LLVMOpaqueValue *(*emit)(struct LLVMOpaqueContext *cx, struct LLVMOpaqueModule *mod,
                                  const jt_gemm_t *g);
} jt_kind_t;

/* The rows, indexed by enum jt_kind (jit/kind.c). */
extern const jt_kind_t jt_kinds[JT_KINDS];

/* The kind of g. */
static inline int jt_kind_of(const jt_gemm_t *g)
{
  return g->fa            ? JT_KIND_FA
         : g->syrk        ? JT_KIND_SYRK
         : g->mm          ? (g->mm_add ? JT_KIND_MM_ADD : JT_KIND_MM)
         : g->add_rms_mul ? JT_KIND_ADD_RMS_MUL
         : g->dot         ? JT_KIND_DOT
                          : JT_KIND_GEMM;
}

/* g's kind's row. */
static inline const jt_kind_t *jt_kind(const jt_gemm_t *g) { return &jt_kinds[jt_kind_of(g)]; }

/* 1 when g is within what the generator compiles. */
static inline int jt_gemm_supported(const jt_gemm_t *g) { return jt_kind(g)->supported(g); }

#endif
