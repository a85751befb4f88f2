/* SPDX-License-Identifier: MIT */
/* Problems (problem.h): a signature's key decoded into the kernel the generator would build. */
#include "problem.h"

const char *ag_problem_family(const jt_gemm_t *g)
{
  return g->mm ? "mm" : g->add_rms_mul ? "add_rms_mul" : g->dot ? "dot" : "gemm";
}

int ag_problem_of(const ag_sig_t *k, long maxd, jt_gemm_t *g, int *swap)
{
  int fused = k->host == AG_HOST_ID_GGML && k->op == AG_GGML_OP_FUSED;
  if (fused && (k->ta == AG_FUSE_ADD_RMS_MUL || k->ta == AG_FUSE_RMS_MUL)) {
    *swap = 0;
    *g = (jt_gemm_t){.add_rms_mul = k->ta == AG_FUSE_RMS_MUL ? 2 : 1, .k = k->m};
    return jt_gemm_supported(g);
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
    return (k->dtype == AG_GGML_TYPE_F32 || k->dtype == AG_GGML_TYPE_F16) &&
           k->api == AG_GGML_TYPE_F32 && k->order == AG_GGML_TYPE_F32 + 1 && k->lda == 1 &&
           k->ldb == 1 && jt_gemm_supported(g);
  }
  if (k->host != AG_HOST_ID_BLAS)
    return 0; /* other ggml nodes: profiled, not compiled */
  unsigned ac = k->ab & 15, bc = k->ab >> 4;
  int row = k->order == AG_ROW;
  if (k->op == AG_OP_DOT || k->op == AG_OP_AXPY) {
    if (k->lda != 1 || k->ldb != 1 || k->m < 1 || (k->op == AG_OP_AXPY && ac == AG_S_ZERO))
      return 0; /* unit strides only */
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
    return jt_gemm_supported(g) && k->m <= maxd * maxd;
  }
  if ((k->op != AG_OP_GEMM && k->op != AG_OP_GEMV) || k->ta == AG_TRANS_BAD ||
      k->tb == AG_TRANS_BAD || k->order == AG_ORDER_BAD || ac == AG_S_ZERO)
    return 0;
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
      return 0;
    *swap = 0;
    int t = (k->ta != AG_N) != row; /* op(A) applied to the column-major storage */
    int rows = row ? k->n : k->m, cols = row ? k->m : k->n; /* the stored matrix, col-major */
    g->ta = t, g->tb = 0, g->n = 1;
    g->m = t ? cols : rows, g->k = t ? rows : cols;
    g->lda = k->lda, g->ldb = g->k, g->ldc = g->m;
  }
  return jt_gemm_supported(g) && g->m <= maxd && g->n <= maxd && g->k <= maxd;
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
