/* SPDX-License-Identifier: MIT */
/* Problems (problem.h): a signature's key decoded into the kernel the generator would build. */
#include "problem.h"

#include <stdarg.h>
#include <stdio.h>

const char *ag_problem_family(const jt_gemm_t *g)
{
  return g->mm ? "mm" : g->add_rms_mul ? "add_rms_mul" : g->dot ? "dot" : "gemm";
}

/* No kernel: why (when wanted) gets the sentence; returns 0. */
static int no(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int no(char *why, size_t len, const char *fmt, ...)
{
  if (why && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
  }
  return 0;
}

/* Whether the generator builds g (jt_gemm_supported); when not, which of its limits g passes.
 * m, n, k name the dimensions as the caller's key does (a row-major GEMM swaps g's m and n). */
static int generator_takes(const jt_gemm_t *g, int m, int n, int k, char *why, size_t len)
{
  if (jt_gemm_supported(g))
    return 1;
  if (g->mm)
    return g->m < JT_MM_MR || g->m % JT_MM_MR
               ? no(why, len, "%d rows: MUL_MAT kernels take multiples of %d", g->m, JT_MM_MR)
           : g->n != 1 && g->n < JT_MM_MIN_N
               ? no(why, len, "%d columns: MUL_MAT kernels take 1 or at least %d", g->n,
                    JT_MM_MIN_N)
               : no(why, len, "a dimension above the MUL_MAT generator's limits (%dx%dx%d)",
                    g->m, g->n, g->k);
  if (g->add_rms_mul || g->dot)
    return no(why, len, "length %d: the generator takes 1 to %d", g->k, 1 << 20);
  int kmax = g->ta && !jt_gemm_dots(g) ? JT_GEMM_MAX_K_PACKED : JT_GEMM_MAX_K;
  if (m < 1 || n < 1 || k < 1)
    return no(why, len, "an empty product (M=%d N=%d K=%d)", m, n, k);
  if (g->m > JT_GEMM_MAX_DIM || g->n > JT_GEMM_MAX_DIM)
    return no(why, len, "%c=%d is above the generator's limit of %d", m > JT_GEMM_MAX_DIM ? 'M' : 'N',
              m > JT_GEMM_MAX_DIM ? m : n, JT_GEMM_MAX_DIM);
  if (g->k > kmax)
    return no(why, len, "K=%d is above the generator's limit of %d%s", k, kmax,
              kmax == JT_GEMM_MAX_K_PACKED ? " for a transposed A" : "");
  return no(why, len, "a leading dimension smaller than its matrix's rows: a layout the "
            "generator does not take");
}

int ag_problem_of(const ag_sig_t *k, long maxd, jt_gemm_t *g, int *swap)
{
  return ag_problem_check(k, maxd, g, swap, NULL, 0);
}

int ag_problem_check(const ag_sig_t *k, long maxd, jt_gemm_t *g, int *swap, char *why,
                     size_t len)
{
  int fused = k->host == AG_HOST_ID_GGML && k->op == AG_GGML_OP_FUSED;
  if (fused && (k->ta == AG_FUSE_ADD_RMS_MUL || k->ta == AG_FUSE_RMS_MUL)) {
    *swap = 0;
    *g = (jt_gemm_t){.add_rms_mul = k->ta == AG_FUSE_RMS_MUL ? 2 : 1, .k = k->m};
    return generator_takes(g, 0, 0, k->m, why, len);
  }
  /* 2-D, f32 or f16 weights, f32 activations and output; alone or with a residual ADD */
  if (ag_sig_ggml_mul_mat(k) || (fused && k->ta == AG_FUSE_MM_ADD)) {
    *swap = 0;
    *g = (jt_gemm_t){.mm = 1,
                     .w16 = k->dtype == AG_GGML_TYPE_F16,
                     .m = k->m,
                     .n = k->n,
                     .k = k->k,
                     .mm_add = fused};
    if (k->dtype != AG_GGML_TYPE_F32 && k->dtype != AG_GGML_TYPE_F16)
      return no(why, len, "weights of ggml type %d: MUL_MAT kernels take f32 or f16", k->dtype);
    if (k->api != AG_GGML_TYPE_F32 || k->order != AG_GGML_TYPE_F32 + 1)
      return no(why, len, "activations or output not f32: MUL_MAT kernels take f32");
    if (k->lda != 1 || k->ldb != 1)
      return no(why, len, "operands not contiguous or not 2-D: a layout MUL_MAT kernels do not "
                "take");
    return generator_takes(g, k->m, k->n, k->k, why, len);
  }
  if (k->host != AG_HOST_ID_BLAS)
    return no(why, len, "this ggml operator is profiled, not compiled: no kernel family for it");
  unsigned ac = k->ab & 15, bc = k->ab >> 4;
  int row = k->order == AG_ROW;
  if (k->op == AG_OP_DOT || k->op == AG_OP_AXPY) {
    if (k->lda != 1 || k->ldb != 1)
      return no(why, len, "strided vectors (incx=%d, incy=%d): kernels take unit strides only",
                k->lda, k->ldb);
    if (k->m < 1)
      return no(why, len, "an empty vector: nothing to compute");
    if (k->op == AG_OP_AXPY && ac == AG_S_ZERO)
      return no(why, len, "alpha = 0: y stays as it is, nothing to compute");
    *swap = 0;
    *g = (jt_gemm_t){.f64 = k->dtype == AG_F64, .k = k->m, .dot = k->op == AG_OP_DOT};
    if (k->op == AG_OP_AXPY) /* y = alpha x + y: a GEMM y (n x 1) += alpha x (n x 1) * [1] */
      *g = (jt_gemm_t){.f64 = g->f64,
                       .m = k->m,
                       .n = 1,
                       .k = 1,
                       .lda = k->m,
                       .ldb = 1,
                       .ldc = k->m,
                       .alpha_one = ac == AG_S_ONE,
                       .beta_class = 1};
    if (k->m > maxd * maxd)
      return no(why, len, "length %d is above OPJIT_JIT_MAX_DIM squared (%ld)", k->m, maxd * maxd);
    return generator_takes(g, k->m, 1, 1, why, len);
  }
  if (k->op != AG_OP_GEMM && k->op != AG_OP_GEMV)
    return no(why, len, "no kernel family for this operator: profiled, not compiled");
  if (k->ta == AG_TRANS_BAD || k->tb == AG_TRANS_BAD)
    return no(why, len, "an invalid transpose argument: the library's own error path");
  if (k->order == AG_ORDER_BAD)
    return no(why, len, "an invalid CBLAS order: the library's own error path");
  if (ac == AG_S_ZERO)
    return no(why, len, "alpha = 0: C = beta C, no product to compute");
  *g = (jt_gemm_t){.f64 = k->dtype == AG_F64,
                   .alpha_one = ac == AG_S_ONE,
                   .beta_class = bc == AG_S_ZERO  ? 0
                                 : bc == AG_S_ONE ? 1
                                                  : 2};
  if (k->op == AG_OP_GEMM) {
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands. */
    *swap = row;
    g->ta = row ? k->tb != AG_N : k->ta != AG_N, g->tb = row ? k->ta != AG_N : k->tb != AG_N;
    g->m = row ? k->n : k->m, g->n = row ? k->m : k->n, g->k = k->k;
    g->lda = row ? k->ldb : k->lda, g->ldb = row ? k->lda : k->ldb, g->ldc = k->ldc;
  } else {
    /* y = op(A) x is a GEMM with one column: B = x (k x 1), C = y (m x 1); unit strides only.
     * A row-major A is the column-major A^T, so row-major flips the transpose. */
    if (k->ldb != 1 || k->ldc != 1)
      return no(why, len, "strided vectors (incx=%d, incy=%d): kernels take unit strides only",
                k->ldb, k->ldc);
    *swap = 0;
    int t = (k->ta != AG_N) != row; /* op(A) applied to the column-major storage */
    int rows = row ? k->n : k->m, cols = row ? k->m : k->n; /* the stored matrix, col-major */
    g->ta = t, g->tb = 0, g->n = 1;
    g->m = t ? cols : rows, g->k = t ? rows : cols;
    g->lda = k->lda, g->ldb = g->k, g->ldc = g->m;
  }
  int kk = k->op == AG_OP_GEMM ? k->k : 1;
  if (k->m > maxd || k->n > maxd || kk > maxd)
    return no(why, len, "%c=%d is above OPJIT_JIT_MAX_DIM=%ld", k->m > maxd ? 'M' : k->n > maxd ? 'N' : 'K',
              k->m > maxd ? k->m : k->n > maxd ? k->n : kk, maxd);
  return generator_takes(g, k->m, k->n, k->op == AG_OP_GEMM ? k->k : 1, why, len);
}
void ag_problem_extents(const jt_gemm_t *g, int swapped, ag_vrun_t *r)
{
  size_t esz = g->f64 ? 8 : 4;
  int flat = g->dot || g->add_rms_mul || g->mm; /* no overlap guard: their hosts check it */
  r->ext_a =
      flat
          ? 0
          : ((size_t)g->lda * (size_t)((g->ta ? g->m : g->k) - 1) + (size_t)(g->ta ? g->k : g->m)) *
                esz;
  r->ext_b =
      flat
          ? 0
          : ((size_t)g->ldb * (size_t)((g->tb ? g->k : g->n) - 1) + (size_t)(g->tb ? g->n : g->k)) *
                esz;
  r->ext_c = flat ? 0 : ((size_t)g->ldc * (size_t)(g->n - 1) + (size_t)g->m) * esz;
  r->swapped = (uint8_t)swapped;
}
