/* SPDX-License-Identifier: MIT */
/* The BLAS host's row (host.h): its keys named for people, "sgemm NN 64x64x64 β=0". */
#include "../host.h"
#include "../opt.h"

#include <stdio.h>

#define APPEND(...) ag_appendf(&at, end, __VA_ARGS__)

static const char *const op_names[] = {"?", "gemm", "gemv", "axpy", "dot"};
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
  if (s->api == AG_API_CBLAS && (s->op == AG_OP_GEMM || s->op == AG_OP_GEMV))
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
  default:
    APPEND(",\"n\":%d,\"incx\":%d,\"incy\":%d", s->m, s->lda, s->ldb);
    if (s->op == AG_OP_AXPY)
      APPEND(",\"alpha\":\"%s\"", scalar(ac));
    break;
  }
  APPEND("}");
}

const ag_host_t ag_host_blas = {
    .id = AG_HOST_ID_BLAS,
    .name = "blas",
    .opt_bit = AG_HOST_BLAS,
    .interposes = "the Fortran and CBLAS symbols of ?gemm, ?gemv, ?axpy and ?dot",
    .traits = AG_HOST_DUELS,
    .opname = opname,
    .format = format,
    .params_json = params_json,
};
