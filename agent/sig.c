/* SPDX-License-Identifier: MIT */
/* Signature naming: the operator name, the human form and the JSON parameters of a key. */
#include "sig.h"

#include <stdio.h>

static const char *const op_names[] = {"?", "gemm", "gemv", "axpy", "dot"};
static const char trans_chars[] = "NTC?";
static const char *const scalar_names[] = {"1", "0", "-1", "*", ""};

static const char *op_name(const ag_sig_t *s)
{
  return s->op < sizeof op_names / sizeof *op_names ? op_names[s->op] : "?";
}

/* Appends printf output at *at, never past end. */
#define APPEND(...)                                                                          \
  do {                                                                                       \
    if (at < end) {                                                                          \
      int n_ = snprintf(at, (size_t)(end - at), __VA_ARGS__);                                \
      at += n_ > 0 ? n_ : 0;                                                                 \
    }                                                                                        \
  } while (0)

static ag_ggml_names_t gg; /* set once, before any ggml key is formatted */

void ag_sig_set_ggml_names(const ag_ggml_names_t *names) { gg = *names; }

/* names[i], or "#i" in buf. */
static const char *gg_name(const char *const *names, int n, int i, char *buf, size_t len)
{
  if (names && i >= 0 && i < n && names[i])
    return names[i];
  snprintf(buf, len, "#%d", i);
  return buf;
}

static const char *const fusion_names[] = {"?", "ADD+RMS_NORM+MUL", "MUL_MAT+MUL_MAT+SWIGLU",
                                           "SHARED-INPUT MUL_MATS", "MUL_MAT+ADD",
                                           "RMS_NORM+MUL"};

const char *ag_sig_opname(const ag_sig_t *s, char *buf, size_t len)
{
  if (s->host == AG_HOST_ID_GGML && s->op == AG_GGML_OP_FUSED) {
    snprintf(buf, len, "FUSED");
    return buf;
  }
  if (s->host == AG_HOST_ID_GGML) {
    char tmp[16];
    snprintf(buf, len, "%s", gg_name(gg.ops, gg.nops, s->op, tmp, sizeof tmp));
    return buf;
  }
  snprintf(buf, len, "%s%c%s", s->api == AG_API_CBLAS ? "cblas_" : "",
           s->dtype == AG_F64 ? 'd' : 's', op_name(s));
  return buf;
}

/* A ggml op's sub-op name (UNARY, GLU), or NULL. */
static const char *gg_subop(const ag_sig_t *s, char *buf, size_t len)
{
  if (s->op == AG_GGML_OP_FUSED)
    return gg_name(fusion_names, sizeof fusion_names / sizeof *fusion_names, s->ta, buf, len);
  if (gg.ops && s->op == gg.op_unary)
    return gg_name(gg.unary, gg.nunary, s->ta, buf, len);
  if (gg.ops && s->op == gg.op_glu)
    return gg_name(gg.glu, gg.nglu, s->ta, buf, len);
  return NULL;
}

/* "MUL_MAT f16 K=256 M=768 N=8", "GLU SWIGLU f32 768x8", "RMS_NORM f32 256x8". */
static void gg_format(const ag_sig_t *s, char *buf, size_t len)
{
  char *at = buf, *end = buf + len, name[32], sub[16], t[16];
  APPEND("%s", ag_sig_opname(s, name, sizeof name));
  const char *so = gg_subop(s, sub, sizeof sub);
  if (so)
    APPEND(" %s", so);
  APPEND(" %s", gg_name(gg.types, gg.ntypes, s->dtype, t, sizeof t));
  if ((gg.ops && s->op == gg.op_mul_mat) ||
      (s->op == AG_GGML_OP_FUSED && (s->ta == AG_FUSE_MM_SWIGLU || s->ta == AG_FUSE_SHARED_INPUT ||
                                     s->ta == AG_FUSE_MM_ADD))) {
    APPEND(" K=%d M=%d N=%d", s->k, s->m, s->n);
    if (s->lda > 1 || s->ldb > 1)
      APPEND(" x%dx%d", s->lda, s->ldb);
    return;
  }
  APPEND(" %d", s->m);
  int dims = s->ldb > 1 ? 4 : s->lda > 1 ? 3 : s->n > 1 ? 2 : 1;
  if (dims > 1)
    APPEND("x%d", s->n);
  if (dims > 2)
    APPEND("x%d", s->lda);
  if (dims > 3)
    APPEND("x%d", s->ldb);
}

static void gg_params_json(const ag_sig_t *s, char *buf, size_t len)
{
  char *at = buf, *end = buf + len, name[32], sub[16], t0[16], t1[16], t2[16];
  const char *so = gg_subop(s, sub, sizeof sub);
  APPEND("{\"host\":\"ggml\",\"op\":\"%s\"", ag_sig_opname(s, name, sizeof name));
  if (so)
    APPEND(",\"subop\":\"%s\"", so);
  APPEND(",\"src0_type\":\"%s\",\"type\":\"%s\"", gg_name(gg.types, gg.ntypes, s->dtype, t0, sizeof t0),
         gg_name(gg.types, gg.ntypes, s->api, t1, sizeof t1));
  if (s->order)
    APPEND(",\"src1_type\":\"%s\"", gg_name(gg.types, gg.ntypes, s->order - 1, t2, sizeof t2));
  APPEND(",\"ne\":[%d,%d,%d,%d],\"src0_ne0\":%d}", s->m, s->n, s->lda, s->ldb, s->k);
}

static const char *scalar(unsigned c) { return scalar_names[c < 5 ? c : 4]; }

void ag_sig_format(const ag_sig_t *s, char *buf, size_t len)
{
  if (s->host == AG_HOST_ID_GGML) {
    gg_format(s, buf, len);
    return;
  }
  char *at = buf, *end = buf + len, name[32];
  unsigned ac = s->ab & 15, bc = s->ab >> 4;
  APPEND("%s", ag_sig_opname(s, name, sizeof name));
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

void ag_sig_params_json(const ag_sig_t *s, char *buf, size_t len)
{
  if (s->host == AG_HOST_ID_GGML) {
    gg_params_json(s, buf, len);
    return;
  }
  char *at = buf, *end = buf + len;
  unsigned ac = s->ab & 15, bc = s->ab >> 4;
  APPEND("{\"op\":\"%s\",\"dtype\":\"%s\",\"api\":\"%s\"", op_name(s),
         s->dtype == AG_F64 ? "f64" : "f32", s->api == AG_API_CBLAS ? "cblas" : "fortran");
  switch (s->op) {
  case AG_OP_GEMM:
    APPEND(",\"order\":\"%s\",\"transa\":\"%c\",\"transb\":\"%c\",\"m\":%d,\"n\":%d,\"k\":%d,"
           "\"lda\":%d,\"ldb\":%d,\"ldc\":%d,\"alpha\":\"%s\",\"beta\":\"%s\"",
           s->order == AG_ROW ? "row" : "col", trans_chars[s->ta & 3], trans_chars[s->tb & 3],
           s->m, s->n, s->k, s->lda, s->ldb, s->ldc, scalar(ac), scalar(bc));
    break;
  case AG_OP_GEMV:
    APPEND(",\"order\":\"%s\",\"trans\":\"%c\",\"m\":%d,\"n\":%d,\"lda\":%d,\"incx\":%d,"
           "\"incy\":%d,\"alpha\":\"%s\",\"beta\":\"%s\"",
           s->order == AG_ROW ? "row" : "col", trans_chars[s->ta & 3], s->m, s->n, s->lda,
           s->ldb, s->ldc, scalar(ac), scalar(bc));
    break;
  default:
    APPEND(",\"n\":%d,\"incx\":%d,\"incy\":%d", s->m, s->lda, s->ldb);
    if (s->op == AG_OP_AXPY)
      APPEND(",\"alpha\":\"%s\"", scalar(ac));
    break;
  }
  APPEND("}");
}
