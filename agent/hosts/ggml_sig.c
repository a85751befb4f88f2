/* SPDX-License-Identifier: MIT */
/* The ggml host's row (host.h): its keys named for people, "MUL_MAT f16 K=256 M=768 N=8", with
 * the running library's own names for ops, types and sub-ops once the host has checked it, and
 * decoded into their typed problems (ggml_key.h) and those into kernels. */
#include "ggml_key.h"
#include "ggml_verify.h"
#include "../host.h"
#include "../problem.h"
#include "../opt.h"
#include "jit/fa.h"

#include <stdio.h>

#define APPEND(...) ag_appendf(&at, end, __VA_ARGS__)

static ag_ggml_names_t gg; /* set once, before any ggml key is formatted */

void ag_ggml_set_names(const ag_ggml_names_t *names) { gg = *names; }

/* names[i], or "#i" in buf. */
static const char *gg_name(const char *const *names, int n, int i, char *buf, size_t len)
{
  if (names && i >= 0 && i < n && names[i])
    return names[i];
  snprintf(buf, len, "#%d", i);
  return buf;
}

static const char *const fusion_names[] = {
    "?",           "ADD+RMS_NORM+MUL", "MUL_MAT+MUL_MAT+SWIGLU", "SHARED-INPUT MUL_MATS",
    "MUL_MAT+ADD", "RMS_NORM+MUL"};

static const char *opname(const ag_sig_t *s, char *buf, size_t len)
{
  char tmp[16];
  snprintf(buf, len, "%s",
           s->op == AG_GGML_OP_FUSED ? "FUSED" : gg_name(gg.ops, gg.nops, s->op, tmp, sizeof tmp));
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

/* "MUL_MAT f16 K=256 M=768 N=8" ("MUL_MAT f16 AMX K=..." with ggml's AMX buffer's weights),
 * "GLU SWIGLU f32 768x8", "RMS_NORM f32 256x8". */
static void format(const ag_sig_t *s, char *buf, size_t len)
{
  char *at = buf, *end = buf + len, name[32], sub[16], t[16];
  APPEND("%s", opname(s, name, sizeof name));
  const char *so = gg_subop(s, sub, sizeof sub);
  if (so)
    APPEND(" %s", so);
  APPEND(" %s", gg_name(gg.types, gg.ntypes, s->dtype, t, sizeof t));
  if ((gg.ops && s->op == gg.op_mul_mat) ||
      (s->op == AG_GGML_OP_FUSED &&
       (s->ta == AG_FUSE_MM_SWIGLU || s->ta == AG_FUSE_SHARED_INPUT || s->ta == AG_FUSE_MM_ADD))) {
    if (s->ab == 1) /* f16 weights in ggml's AMX buffer */
      APPEND(" AMX");
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

static void params_json(const ag_sig_t *s, char *buf, size_t len)
{
  char *at = buf, *end = buf + len, name[32], sub[16], t0[16], t1[16], t2[16];
  const char *so = gg_subop(s, sub, sizeof sub);
  APPEND("{\"host\":\"ggml\",\"op\":\"%s\"", opname(s, name, sizeof name));
  if (so)
    APPEND(",\"subop\":\"%s\"", so);
  APPEND(",\"src0_type\":\"%s\",\"type\":\"%s\"",
         gg_name(gg.types, gg.ntypes, s->dtype, t0, sizeof t0),
         gg_name(gg.types, gg.ntypes, s->api, t1, sizeof t1));
  if (s->order)
    APPEND(",\"src1_type\":\"%s\"", gg_name(gg.types, gg.ntypes, s->order - 1, t2, sizeof t2));
  APPEND(",\"ne\":[%d,%d,%d,%d],\"src0_ne0\":%d}", s->m, s->n, s->lda, s->ldb, s->k);
}

/* ---- Kernels (host.h, kernel) -------------------------------------------------------------- */

/* A 2-D MUL_MAT (alone, or with its residual ADD), f32 or f16 weights, f32 activations and
 * output. */
static int mm_kernel(uint8_t wtype, int amx, int f32_io, int flat, int32_t m, int32_t n, int32_t k,
                     int add, jt_gemm_t *g, char *why, size_t len)
{
  *g = (jt_gemm_t){.mm = 1,
                   .w16 = wtype != AG_GGML_TYPE_F16 ? 0 : amx ? 2 : 1,
                   .m = m,
                   .n = n,
                   .k = k,
                   .mm_add = add};
  if (wtype != AG_GGML_TYPE_F32 && wtype != AG_GGML_TYPE_F16)
    return ag_problem_no(why, len, "weights of ggml type %d: MUL_MAT kernels take f32 or f16",
                         wtype);
  if (amx > 1 || (amx && wtype != AG_GGML_TYPE_F16))
    return ag_problem_no(why, len, "a MUL_MAT key marked %d: only f16 weights in ggml's AMX "
                         "buffer are", amx);
  if (amx && n < JT_MM_MIN_N) /* hosts/ggml_match.c, find_mm */
    return ag_problem_no(why, len, "%d columns against weights in ggml's AMX buffer: its own "
                         "kernel computes them (only products of %d columns or more get ours)",
                         n, JT_MM_MIN_N);
  if (!f32_io)
    return ag_problem_no(why, len, "activations or output not f32: MUL_MAT kernels take f32");
  if (!flat)
    return ag_problem_no(why, len, "operands not contiguous or not 2-D: a layout MUL_MAT "
                         "kernels do not take");
  return ag_problem_takes(g, "MUL_MAT", m, n, k, why, len);
}

/* ggml's FLASH_ATTN_EXT: f32 queries and output, f16 keys (and, as the matcher checks, f16
 * values and mask); node shape DV x heads x query rows, K its DK, K/V heads grouped any way. A
 * prompt's rows in f32, fewer (decode's) in ggml's f16 steps by one kernel for every row count
 * (n 1: it takes the rows as an argument). The matcher (hosts/ggml_match.c, find_fa) asks this
 * too. */
static int fa_kernel(const ag_ggml_node_t *p, jt_gemm_t *g, char *why, size_t len)
{
  int f16 = p->ne[2] < AG_GGML_FA_MIN_ROWS;
  *g = jt_fa_spec(f16 ? 2 : 1, p->src0_ne0, p->ne[0], p->ne[2], 0);
  if (p->src0_type != AG_GGML_TYPE_F32 || p->type != AG_GGML_TYPE_F32 || !p->has_src1 ||
      p->src1_type != AG_GGML_TYPE_F16)
    return ag_problem_no(why, len, "FLASH_ATTN_EXT kernels take f32 queries and output, f16 keys "
                         "and values");
  if (p->ne[3] != 1)
    return ag_problem_no(why, len, "a 4-D attention output: FLASH_ATTN_EXT kernels take 3-D");
  if (f16 && g->k % 64)
    return ag_problem_no(why, len, "DK %d: the f16 kernel (fewer than %d query rows) takes DK in "
                         "whole steps of ggml's dot product, 64", g->k, AG_GGML_FA_MIN_ROWS);
  return ag_problem_takes(g, "FLASH_ATTN_EXT", g->m, g->n, g->k, why, len);
}

static int kernel(const ag_sig_t *key, long maxd, jt_gemm_t *g, int *swap, char *why,
                  size_t len)
{
  (void)maxd; /* ggml's shapes are the model's: MUL_MAT kernels have limits of their own */
  *swap = 0;
  if (key->op == AG_GGML_OP_FUSED) {
    ag_ggml_group_t p = ag_ggml_group_of(key);
    if (ag_ggml_group_is_norm(p.pattern)) {
      *g = (jt_gemm_t){.add_rms_mul = p.pattern == AG_FUSE_RMS_MUL ? 2 : 1, .k = p.m};
      return ag_problem_takes(g, "RMS_NORM", 0, 0, p.m, why, len);
    }
    if (p.pattern == AG_FUSE_MM_ADD)
      return mm_kernel(p.wtype, p.amx, 1, 1, p.m, p.n, p.k, 1, g, why, len);
  } else if (key->op == AG_GGML_OP_FLASH_ATTN_EXT) {
    ag_ggml_node_t p = ag_ggml_node_of(key);
    return fa_kernel(&p, g, why, len);
  } else if (key->op == AG_GGML_OP_MUL_MAT) {
    ag_ggml_node_t p = ag_ggml_node_of(key);
    return mm_kernel(p.src0_type, p.amx,
                     p.type == AG_GGML_TYPE_F32 && p.has_src1 && p.src1_type == AG_GGML_TYPE_F32,
                     p.ne[2] == 1 && p.ne[3] == 1, p.ne[0], p.ne[1], p.src0_ne0, 0, g, why, len);
  }
  return ag_problem_no(why, len, "this ggml operator is profiled, not compiled: no kernel family "
                       "for it");
}

/* ---- Before publication (host.h, selftest), in the profile (stands_in), by payback ---------- */

/* The MUL_MAT kernels (alone or with their ADD) and the attention's are checked: a prefill
 * computes its graph once per process. The norm groups' kernels are checked on their calls. */
static int selftest(const jt_gemm_t *g, void (*fn)(void), double *worst, double *bound)
{
  return g->mm ? ag_ggml_mm_selftest(g, fn, worst, bound)
         : g->fa ? ag_ggml_fa_selftest(g, fn, worst, bound)
                 : -1;
}

/* A MUL_MAT + ADD group runs unfused as its product until its kernel is there, timed under the
 * product's signature (the group's own calls are timed only fused). */
static int stands_in(const ag_sig_t *k, ag_sig_t *as)
{
  if (k->op != AG_GGML_OP_FUSED || k->ta != AG_FUSE_MM_ADD)
    return 0;
  *as = ag_ggml_mm_add_product(k);
  return 1;
}

/* A group's original is timed over a round (hosts/ggml.c), mostly barriers, which a per-call
 * saving estimate does not weigh. */
static int no_payback(const ag_sig_t *k) { return k->op == AG_GGML_OP_FUSED; }

const ag_host_t ag_host_ggml = {
    .id = AG_HOST_ID_GGML,
    .name = "ggml",
    .opt_bit = AG_HOST_BIT(ggml),
    .interposes = "ggml's CPU backend: ggml_graph_compute and the ggml_compute_forward_<op> "
                  "functions it calls per node",
    .traits = 0,
    .opname = opname,
    .format = format,
    .params_json = params_json,
    .kernel = kernel,
    .selftest = selftest,
    .stands_in = stands_in,
    .no_payback = no_payback,
};
