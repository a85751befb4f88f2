/* SPDX-License-Identifier: MIT */
/* The BLAS host's row (host.h): its keys named for people, "sgemm NN 64x64x64 β=0", and
 * decoded into their families' typed problems (blas_key.h) and those into kernels. */
#include "blas.h"
#include "blas_key.h"
#include "../host.h"
#include "../problem.h"
#include "../opt.h"

#include <stdio.h>

#define APPEND(...) ag_appendf(&at, end, __VA_ARGS__)

static const char *const op_names[] = {"?", "gemm", "gemv", "axpy", "dot", "syrk"};
static const char trans_chars[] = "NTC?";
static const char *const scalar_names[] = {"1", "0", "-1", "*", ""};

static const char *op_name(const ag_sig_t *s)
{
  return s->op < sizeof op_names / sizeof *op_names ? op_names[s->op] : "?";
}

static const char *scalar(unsigned c) { return scalar_names[c < 5 ? c : 4]; }

static const char *opname(const ag_sig_t *s, char *buf, size_t len)
{
  snprintf(buf, len, "%s%c%s", s->api == AG_API_CBLAS ? "cblas_" : "",
           s->dtype == AG_F64 ? 'd' : 's', op_name(s));
  return buf;
}

static void format(const ag_sig_t *s, char *buf, size_t len)
{
  char *at = buf, *end = buf + len, name[32];
  unsigned ac = s->ab & 15, bc = s->ab >> 4;
  APPEND("%s", opname(s, name, sizeof name));
  if (s->api == AG_API_CBLAS && (s->op == AG_OP_GEMM || s->op == AG_OP_GEMV || s->op == AG_OP_SYRK))
    APPEND(" %s", s->order == AG_ROW ? "row" : "col");
  switch (s->op) {
  case AG_OP_GEMM: {
    /* The tight leading dimensions are the stored rows of each operand in its order. */
    int row = s->order == AG_ROW;
    int a_rows = (s->ta == AG_N) != row ? s->m : s->k;
    int b_rows = (s->tb == AG_N) != row ? s->k : s->n;
    int c_rows = row ? s->n : s->m;
    APPEND(" %c%c %dx%dx%d", trans_chars[s->ta & 3], trans_chars[s->tb & 3], s->m, s->n, s->k);
    if (ac != AG_S_ONE)
      APPEND(" α=%s", scalar(ac));
    APPEND(" β=%s", scalar(bc));
    if (s->lda != a_rows)
      APPEND(" lda=%d", s->lda);
    if (s->ldb != b_rows)
      APPEND(" ldb=%d", s->ldb);
    if (s->ldc != c_rows)
      APPEND(" ldc=%d", s->ldc);
    break;
  }
  case AG_OP_GEMV:
    APPEND(" %c %dx%d", trans_chars[s->ta & 3], s->m, s->n);
    if (ac != AG_S_ONE)
      APPEND(" α=%s", scalar(ac));
    APPEND(" β=%s", scalar(bc));
    if (s->lda != (s->order == AG_ROW ? s->n : s->m))
      APPEND(" lda=%d", s->lda);
    if (s->ldb != 1)
      APPEND(" incx=%d", s->ldb);
    if (s->ldc != 1)
      APPEND(" incy=%d", s->ldc);
    break;
  case AG_OP_SYRK: {
    /* "ssyrk U T 64x32": n x k; the tight lda is op(A)'s stored rows in its order */
    ag_blas_syrk_t p = ag_blas_syrk_of(s);
    APPEND(" %c %c %dx%d", "UL?"[p.uplo < 2 ? p.uplo : 2], trans_chars[p.trans & 3], p.n, p.k);
    if (p.alpha != AG_S_ONE)
      APPEND(" α=%s", scalar(p.alpha));
    APPEND(" β=%s", scalar(p.beta));
    if (p.lda != ((p.trans == AG_N) != (p.order == AG_ROW) ? p.n : p.k))
      APPEND(" lda=%d", p.lda);
    if (p.ldc != p.n)
      APPEND(" ldc=%d", p.ldc);
    break;
  }
  default:
    APPEND(" n=%d", s->m);
    if (s->op == AG_OP_AXPY && ac != AG_S_ONE)
      APPEND(" α=%s", scalar(ac));
    if (s->lda != 1)
      APPEND(" incx=%d", s->lda);
    if (s->ldb != 1)
      APPEND(" incy=%d", s->ldb);
    break;
  }
}

static void params_json(const ag_sig_t *s, char *buf, size_t len)
{
  char *at = buf, *end = buf + len;
  unsigned ac = s->ab & 15, bc = s->ab >> 4;
  APPEND("{\"op\":\"%s\",\"dtype\":\"%s\",\"api\":\"%s\"", op_name(s),
         s->dtype == AG_F64 ? "f64" : "f32", s->api == AG_API_CBLAS ? "cblas" : "fortran");
  switch (s->op) {
  case AG_OP_GEMM:
    APPEND(",\"order\":\"%s\",\"transa\":\"%c\",\"transb\":\"%c\",\"m\":%d,\"n\":%d,\"k\":%d,"
           "\"lda\":%d,\"ldb\":%d,\"ldc\":%d,\"alpha\":\"%s\",\"beta\":\"%s\"",
           s->order == AG_ROW ? "row" : "col", trans_chars[s->ta & 3], trans_chars[s->tb & 3], s->m,
           s->n, s->k, s->lda, s->ldb, s->ldc, scalar(ac), scalar(bc));
    break;
  case AG_OP_GEMV:
    APPEND(",\"order\":\"%s\",\"trans\":\"%c\",\"m\":%d,\"n\":%d,\"lda\":%d,\"incx\":%d,"
           "\"incy\":%d,\"alpha\":\"%s\",\"beta\":\"%s\"",
           s->order == AG_ROW ? "row" : "col", trans_chars[s->ta & 3], s->m, s->n, s->lda, s->ldb,
           s->ldc, scalar(ac), scalar(bc));
    break;
  case AG_OP_SYRK: {
    ag_blas_syrk_t p = ag_blas_syrk_of(s);
    APPEND(",\"order\":\"%s\",\"uplo\":\"%c\",\"trans\":\"%c\",\"n\":%d,\"k\":%d,\"lda\":%d,"
           "\"ldc\":%d,\"alpha\":\"%s\",\"beta\":\"%s\"",
           p.order == AG_ROW ? "row" : "col", "UL?"[p.uplo < 2 ? p.uplo : 2],
           trans_chars[p.trans & 3], p.n, p.k, p.lda, p.ldc, scalar(p.alpha), scalar(p.beta));
    break;
  }
  default:
    APPEND(",\"n\":%d,\"incx\":%d,\"incy\":%d", s->m, s->lda, s->ldb);
    if (s->op == AG_OP_AXPY)
      APPEND(",\"alpha\":\"%s\"", scalar(ac));
    break;
  }
  APPEND("}");
}

/* ---- Kernels (host.h, kernel) -------------------------------------------------------------- */

/* The kernel's scaling of a product alpha op(A) op(B) + beta C by its scalars' classes. */
static void scalars(jt_gemm_t *g, uint8_t alpha, uint8_t beta)
{
  g->alpha_one = alpha == AG_S_ONE;
  g->beta_class = beta == AG_S_ZERO ? 0 : beta == AG_S_ONE ? 1 : 2;
}

/* What every matrix family refuses alike: the library's own error paths, alpha = 0. */
static int matrix_args(uint8_t ta, uint8_t tb, uint8_t order, uint8_t alpha, char *why, size_t len)
{
  if (ta == AG_TRANS_BAD || tb == AG_TRANS_BAD)
    return ag_problem_no(why, len, "an invalid transpose argument: the library's own error path");
  if (order == AG_ORDER_BAD)
    return ag_problem_no(why, len, "an invalid CBLAS order: the library's own error path");
  if (alpha == AG_S_ZERO)
    return ag_problem_no(why, len, "alpha = 0: C = beta C, no product to compute");
  return 1;
}

/* The key's dimensions against OPJIT_JIT_MAX_DIM, then the generator's own limits (op: the
 * routine's family, as problem.h's ag_problem_takes names it). */
static int within(const jt_gemm_t *g, const char *op, long maxd, int m, int n, int k, char *why,
                  size_t len)
{
  if (m > maxd || n > maxd || k > maxd) {
    char d = m > maxd ? 'M' : n > maxd ? 'N' : 'K';
    return ag_problem_no(why, len, "%c=%d is above OPJIT_JIT_MAX_DIM=%ld", d,
                         d == 'M' ? m : d == 'N' ? n : k, maxd);
  }
  return ag_problem_takes(g, op, m, n, k, why, len);
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the operands swapped. */
static int gemm_kernel(const ag_blas_gemm_t *p, long maxd, jt_gemm_t *g, int *swap, char *why,
                       size_t len)
{
  if (!matrix_args(p->ta, p->tb, p->order, p->alpha, why, len))
    return 0;
  int row = p->order == AG_ROW;
  *g = (jt_gemm_t){.f64 = p->dtype == AG_F64};
  scalars(g, p->alpha, p->beta);
  *swap = row;
  g->ta = row ? p->tb != AG_N : p->ta != AG_N, g->tb = row ? p->ta != AG_N : p->tb != AG_N;
  g->m = row ? p->n : p->m, g->n = row ? p->m : p->n, g->k = p->k;
  g->lda = row ? p->ldb : p->lda, g->ldb = row ? p->lda : p->ldb, g->ldc = p->ldc;
  return within(g, "gemm", maxd, p->m, p->n, p->k, why, len);
}

/* y = op(A) x is a GEMM with one column: B = x (k x 1), C = y (m x 1); unit strides only. A
 * row-major A is the column-major A^T, so row-major flips the transpose. */
static int gemv_kernel(const ag_blas_gemv_t *p, long maxd, jt_gemm_t *g, int *swap, char *why,
                       size_t len)
{
  if (!matrix_args(p->trans, AG_N, p->order, p->alpha, why, len))
    return 0;
  if (p->incx != 1 || p->incy != 1)
    return ag_problem_no(why, len,
                         "strided vectors (incx=%d, incy=%d): kernels take unit strides only",
                         p->incx, p->incy);
  int row = p->order == AG_ROW;
  *g = (jt_gemm_t){.f64 = p->dtype == AG_F64};
  scalars(g, p->alpha, p->beta);
  *swap = 0;
  int t = (p->trans != AG_N) != row; /* op(A) applied to the column-major storage */
  int rows = row ? p->n : p->m, cols = row ? p->m : p->n; /* the stored matrix, col-major */
  g->ta = t, g->tb = 0, g->n = 1;
  g->m = t ? cols : rows, g->k = t ? rows : cols;
  g->lda = p->lda, g->ldb = g->k, g->ldc = g->m;
  return within(g, "gemv", maxd, p->m, p->n, 1, why, len);
}

/* A dot product, or y = alpha x + y as a GEMM y (n x 1) += alpha x (n x 1) * [1]; unit strides
 * only, vectors up to max_dim^2. */
static int vec_kernel(const ag_blas_vec_t *p, long maxd, jt_gemm_t *g, int *swap, char *why,
                      size_t len)
{
  if (p->incx != 1 || p->incy != 1)
    return ag_problem_no(why, len,
                         "strided vectors (incx=%d, incy=%d): kernels take unit strides only",
                         p->incx, p->incy);
  if (p->n < 1)
    return ag_problem_no(why, len, "an empty vector: nothing to compute");
  if (p->op == AG_OP_AXPY && p->alpha == AG_S_ZERO)
    return ag_problem_no(why, len, "alpha = 0: y stays as it is, nothing to compute");
  *swap = 0;
  int f64 = p->dtype == AG_F64;
  if (p->op == AG_OP_DOT)
    *g = (jt_gemm_t){.f64 = f64, .k = p->n, .dot = 1};
  else
    *g = (jt_gemm_t){.f64 = f64,
                     .m = p->n,
                     .n = 1,
                     .k = 1,
                     .lda = p->n,
                     .ldb = 1,
                     .ldc = p->n,
                     .alpha_one = p->alpha == AG_S_ONE,
                     .beta_class = 1};
  if (p->n > maxd * maxd)
    return ag_problem_no(why, len, "length %d is above OPJIT_JIT_MAX_DIM squared (%ld)", p->n,
                         maxd * maxd);
  return ag_problem_takes(g, p->op == AG_OP_DOT ? "dot" : "axpy", p->n, 1, 1, why, len);
}

/* C = alpha op(A) op(A)^T + beta C on a triangle: the GEMM whose B is A, of which one triangle
 * is computed (jit.h, syrk). Row-major C is the column-major C^T, whose triangle is the other
 * one, and A's row-major storage is op(A)^T column-major: the other transpose. */
static int syrk_kernel(const ag_blas_syrk_t *p, long maxd, jt_gemm_t *g, int *swap, char *why,
                       size_t len)
{
  if (p->uplo == AG_UPLO_BAD)
    return ag_problem_no(why, len, "an invalid uplo argument: the library's own error path");
  if (!matrix_args(p->trans, AG_N, p->order, p->alpha, why, len))
    return 0;
  int row = p->order == AG_ROW, t = (p->trans != AG_N) != row;
  *swap = 0;
  *g = (jt_gemm_t){.f64 = p->dtype == AG_F64,
                   .syrk = (p->uplo == AG_UPPER) != row ? 1 : 2,
                   .ta = t,
                   .tb = !t,
                   .m = p->n,
                   .n = p->n,
                   .k = p->k,
                   .lda = p->lda,
                   .ldb = p->lda,
                   .ldc = p->ldc};
  scalars(g, p->alpha, p->beta);
  return within(g, "syrk", maxd, p->n, p->n, p->k, why, len);
}

static int kernel(const ag_sig_t *k, long maxd, jt_gemm_t *g, int *swap, char *why, size_t len)
{
  switch (k->op) {
  case AG_OP_GEMM: {
    ag_blas_gemm_t p = ag_blas_gemm_of(k);
    return gemm_kernel(&p, maxd, g, swap, why, len);
  }
  case AG_OP_GEMV: {
    ag_blas_gemv_t p = ag_blas_gemv_of(k);
    return gemv_kernel(&p, maxd, g, swap, why, len);
  }
  case AG_OP_AXPY:
  case AG_OP_DOT: {
    ag_blas_vec_t p = ag_blas_vec_of(k);
    return vec_kernel(&p, maxd, g, swap, why, len);
  }
  case AG_OP_SYRK: {
    ag_blas_syrk_t p = ag_blas_syrk_of(k);
    return syrk_kernel(&p, maxd, g, swap, why, len);
  }
  }
  return ag_problem_no(why, len, "no kernel family for this operator: profiled, not compiled");
}

/* The duel and the check are the interposers' (blas.c): absent, NULL, where the rows are linked
 * without them. */
#pragma weak ag_blas_duel
#pragma weak ag_blas_check

static const char *const libs[] = {"libblas.so.3", "libopenblas.so.0", "libcblas.so.3", NULL};

const ag_host_t ag_host_blas = {
    .id = AG_HOST_ID_BLAS,
    .name = "blas",
    .opt_bit = AG_HOST_BIT(blas),
    .interposes = "the Fortran and CBLAS symbols of ?gemm, ?gemv, ?axpy, ?dot and ?syrk",
    .libs = libs,
    .traits = AG_HOST_DUELS | AG_HOST_SYMBOLS,
    .opname = opname,
    .format = format,
    .params_json = params_json,
    .kernel = kernel,
    .duel = ag_blas_duel,
    .check = ag_blas_check,
};
