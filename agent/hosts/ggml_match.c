/* SPDX-License-Identifier: MIT */
/* The ggml host's matcher: the node groups of a graph the agent can run as one custom node,
 * each under every guard (types, contiguity, shapes, uses, no partial overlap of outputs and
 * inputs), and gg_kinds, the table of their kinds — how each is found, which signatures it
 * runs under, which host nodes it stands for and what its custom node reads and runs. A new
 * kind is one row. ggml_rewrite.c's gg_cache_of walks a graph with it. */
#include "ggml_host.h"

#include "../problem.h"
#include "../tier.h"
#include "jit/jit.h"

#include <string.h>

static int same_shape(const struct ggml_tensor *x, const struct ggml_tensor *y)
{
  return x->ne[0] == y->ne[0] && x->ne[1] == y->ne[1] && x->ne[2] == y->ne[2] &&
         x->ne[3] == y->ne[3];
}

/* 1 when two tensors' bytes are the same range or do not overlap at all. */
static int clean_alias(const struct ggml_tensor *x, const struct ggml_tensor *y, size_t bytes)
{
  uintptr_t a = (uintptr_t)x->data, b = (uintptr_t)y->data;
  return a == b || a + bytes <= b || b + bytes <= a;
}

/* 1 when node t (node at of g) feeds no node of g but user. ggml computes a graph's nodes in
 * order, so only the nodes after t can read it: the scan starts there (a decode graph is
 * matched afresh every token, on one thread, before the others start). */
static int feeds_only(struct ggml_cgraph *g, int at, int n, const struct ggml_tensor *t,
                      const struct ggml_tensor *user)
{
  for (int j = at + 1; j < n; j++) {
    const struct ggml_tensor *u = gg_api.node(g, j);
    for (int k = 0; k < GGML_MAX_SRC; k++)
      if (u->src[k] == t && u != user)
        return 0;
  }
  return !(t->flags & GGML_TENSOR_FLAG_OUTPUT);
}

/* The ADD + RMS_NORM + MUL group at nodes i..i+2 of g (with_add), or RMS_NORM + MUL at i, i+1,
 * under every guard; 0 when there is none. */
static int find_group(struct ggml_cgraph *g, int n, int i, gg_fusion_t *f, int with_add)
{
  int at = i + with_add;
  if (at + 1 >= n)
    return 0;
  struct ggml_tensor *add = with_add ? gg_api.node(g, i) : NULL;
  struct ggml_tensor *rms = gg_api.node(g, at), *mul = gg_api.node(g, at + 1);
  if ((add && add->op != GGML_OP_ADD) || rms->op != GGML_OP_RMS_NORM || mul->op != GGML_OP_MUL ||
      (add && rms->src[0] != add) || mul->src[0] != rms)
    return 0;
  /* the row's inputs: the ADD's two, or the norm's one */
  const struct ggml_tensor *a = add ? add->src[0] : rms->src[0], *b = add ? add->src[1] : a;
  const struct ggml_tensor *w = mul->src[1], *x = add ? add : a;
  if (!a || !b || !w || x->type != GGML_TYPE_F32 || a->type != GGML_TYPE_F32 ||
      b->type != GGML_TYPE_F32 || rms->type != GGML_TYPE_F32 || mul->type != GGML_TYPE_F32 ||
      w->type != GGML_TYPE_F32)
    return 0;
  if (!same_shape(a, x) || !same_shape(b, x) || !same_shape(rms, x) || !same_shape(mul, x) ||
      w->ne[0] != x->ne[0] || w->ne[1] != 1 || w->ne[2] != 1 || w->ne[3] != 1)
    return 0;
  if ((add && add->view_src) || rms->view_src || mul->view_src || !gg_api.contiguous(a) ||
      !gg_api.contiguous(b) || !gg_api.contiguous(w) || !gg_api.contiguous(x) ||
      !gg_api.contiguous(mul))
    return 0;
  if (!a->data || !b->data || !w->data || !x->data || !rms->data || !mul->data ||
      !gg_api.contiguous(rms) || x->ne[0] > (1 << 20))
    return 0;
  /* Nodes ggml would skip (not selected for computing) are not the agent's to compute. */
  if ((add && !(add->flags & GGML_TENSOR_FLAG_COMPUTE)) ||
      !(rms->flags & GGML_TENSOR_FLAG_COMPUTE) || !(mul->flags & GGML_TENSOR_FLAG_COMPUTE))
    return 0;
  size_t bytes = (size_t)(x->ne[0] * x->ne[1] * x->ne[2] * x->ne[3]) * sizeof(float);
  size_t wbytes = (size_t)w->ne[0] * sizeof(float);
  const struct ggml_tensor *outs[3] = {rms, mul, add}, *ins[2] = {a, b};
  /* Exact aliasing is fine: ggml's allocator gives a node a dead tensor's memory, and each
   * element is read before it is written; partial overlaps are not. */
  for (int o = 0; o < 2 + with_add; o++) {
    for (int k = 0; k < 2; k++)
      if (!clean_alias(outs[o], ins[k], bytes))
        return 0;
    for (int k = 0; k < o; k++)
      if (!clean_alias(outs[o], outs[k], bytes))
        return 0;
    uintptr_t od = (uintptr_t)outs[o]->data, wd = (uintptr_t)w->data;
    if (!(od + bytes <= wd || wd + wbytes <= od)) /* the weight is read by every row */
      return 0;
  }
  if (!feeds_only(g, at, n, rms, mul)) /* the norm's output feeds the MUL alone */
    return 0;
  *f = (gg_fusion_t){.first = add ? add : rms,
                     .span = 2 + with_add,
                     .add = add,
                     .rms = rms,
                     .mul = mul,
                     .n = x->ne[0],
                     .rows = x->ne[1] * x->ne[2] * x->ne[3]};
  memcpy(&f->eps, rms->op_params, sizeof f->eps);
  return 1;
}

/* The MUL_MAT at node i of g, when the generator's kernel can compute it: 2-D, f32 or f16
 * weights in plain memory (not repacked by an extra buffer type: extra unset), f32
 * activations and output, all contiguous, the output apart from both inputs. Of the extra
 * buffer types' weights only f16 ones in ggml's AMX buffer (a CPU with AMX), whose bytes are
 * plain and which ggml multiplies with f32 activations: their kernel keeps the activations
 * in f32 (gg_w16 2), and only for prefill's products (N >= JT_MM_MIN_N; decode's stay
 * ggml's). */
static int find_mm(struct ggml_cgraph *g, int i, gg_fusion_t *f)
{
  struct ggml_tensor *t = gg_api.node(g, i);
  const struct ggml_tensor *w = t->src[0], *x = t->src[1];
  if (t->op != GGML_OP_MUL_MAT || !w || !x || t->type != GGML_TYPE_F32 ||
      (w->type != GGML_TYPE_F32 && w->type != GGML_TYPE_F16) || x->type != GGML_TYPE_F32)
    return 0;
  int w16 = gg_w16(w);
  if (w16 < 0 || (w16 == 2 && t->ne[1] < JT_MM_MIN_N))
    return 0;
  if (t->view_src || !(t->flags & GGML_TENSOR_FLAG_COMPUTE) || !w->data || !x->data ||
      !t->data || !gg_api.contiguous(w) || !gg_api.contiguous(x) || !gg_api.contiguous(t))
    return 0;
  for (int d = 2; d < GGML_MAX_DIMS; d++)
    if (t->ne[d] != 1 || w->ne[d] != 1 || x->ne[d] != 1)
      return 0;
  if (t->ne[0] != w->ne[1] || t->ne[1] != x->ne[1] || w->ne[0] != x->ne[0])
    return 0;
  jt_gemm_t s = {.mm = 1,
                 .w16 = w16,
                 .m = (int)t->ne[0],
                 .n = (int)t->ne[1],
                 .k = (int)w->ne[0]};
  if (t->ne[0] > INT32_MAX || t->ne[1] > INT32_MAX || w->ne[0] > INT32_MAX ||
      !jt_gemm_supported(&s))
    return 0;
  uintptr_t y0 = (uintptr_t)t->data, y1 = y0 + (size_t)(t->ne[0] * t->ne[1]) * sizeof(float);
  const struct ggml_tensor *ins[2] = {w, x};
  for (int k = 0; k < 2; k++) {
    uintptr_t a0 = (uintptr_t)ins[k]->data, a1 = a0 + (size_t)ins[k]->nb[1] * (size_t)ins[k]->ne[1];
    if (!(y1 <= a0 || a1 <= y0))
      return 0;
  }
  *f = (gg_fusion_t){
      .first = t, .span = 1, .mul = t, .n = t->ne[0], .rows = t->ne[1]};
  return 1;
}

/* The FFN's gate and up MUL_MATs (either order) at nodes i, i+1 of g and the SWIGLU at i+2
 * that joins them (split form, not swapped): both products under find_mm's guards with the
 * same input, weight type and shape; the GLU's f32 output contiguous, of their shape, and
 * either the very memory of a product's output or apart from it. */
static int find_swiglu(struct ggml_cgraph *g, int n, int i, gg_fusion_t *f)
{
  gg_fusion_t a, b;
  if (!gg_api.swiglu || i + 2 >= n || !find_mm(g, i, &a) || !find_mm(g, i + 1, &b))
    return 0;
  struct ggml_tensor *glu = gg_api.node(g, i + 2), *x = a.mul->src[1];
  if (glu->op != GGML_OP_GLU || glu->op_params[0] != GGML_GLU_OP_SWIGLU ||
      glu->op_params[1] != 0 /* swapped */ || !glu->src[0] || !glu->src[1] ||
      glu->type != GGML_TYPE_F32 || glu->view_src || !gg_api.contiguous(glu) || !glu->data ||
      !(glu->flags & GGML_TENSOR_FLAG_COMPUTE) || !same_shape(glu, a.mul))
    return 0;
  struct ggml_tensor *gate = glu->src[0], *up = glu->src[1];
  if (!((gate == a.mul && up == b.mul) || (gate == b.mul && up == a.mul)) || b.mul->src[1] != x ||
      a.mul->src[0]->type != b.mul->src[0]->type || !same_shape(a.mul, b.mul) ||
      a.mul->src[0]->ne[0] != b.mul->src[0]->ne[0])
    return 0;
  size_t bytes = (size_t)(glu->ne[0] * glu->ne[1]) * sizeof(float);
  if (!clean_alias(glu, gate, bytes) || !clean_alias(glu, up, bytes) ||
      !clean_alias(gate, up, bytes) || gate->data == up->data)
    return 0;
  /* Every output apart from every input: one thread may write a product while another still
   * reads the other's weight (ggml's allocator may place a node on a dead input's memory). */
  const struct ggml_tensor *outs[3] = {glu, gate, up}, *ins[3] = {x, gate->src[0], up->src[0]};
  for (int o = 0; o < 3; o++)
    for (int k = 0; k < 3; k++) {
      uintptr_t o0 = (uintptr_t)outs[o]->data, a0 = (uintptr_t)ins[k]->data;
      if (!(o0 + bytes <= a0 || a0 + (size_t)ins[k]->nb[1] * (size_t)ins[k]->ne[1] <= o0))
        return 0;
    }
  *f = (gg_fusion_t){.first = gg_api.node(g, i),
                     .span = 3,
                     .gate = gate,
                     .up = up,
                     .mul = glu,
                     .n = glu->ne[0],
                     .rows = glu->ne[1]};
  return 1;
}

/* 1 when tensors a and b (those with memory) have no byte in common. */
static int apart(const struct ggml_tensor *a, const struct ggml_tensor *b)
{
  if (!a || !b || !a->data || !b->data)
    return 1;
  uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
  return a0 + gg_api.nbytes(a) <= b0 || b0 + gg_api.nbytes(b) <= a0;
}

/* A MUL_MAT at node i of g under find_mm's guards whose output only the ADD at i + 1 reads,
 * adding a residual of its shape (f32, contiguous). The product is computed in the MUL_MAT's own
 * memory (whole at the end: a reader in another split, which the graph does not show, sees
 * it), which must therefore share nothing with the residual; the ADD's output may be the
 * very memory of either, else apart from both, and apart from the product's inputs (one thread
 * writes its rows while another still reads them). */
static int find_mm_add(struct ggml_cgraph *g, int n, int i, gg_fusion_t *f)
{
  gg_fusion_t p, norm;
  if (i + 1 >= n || !find_mm(g, i, &p))
    return 0;
  /* Decode's (N = 1) residual ADD goes to the norm after it (ADD + RMS_NORM + MUL): as many
   * nodes either way, and that kernel also saves the norm's own pass over the row. */
  if (p.rows == 1 && find_group(g, n, i + 1, &norm, 1))
    return 0;
  struct ggml_tensor *mm = p.mul, *add = gg_api.node(g, i + 1);
  if (add->op != GGML_OP_ADD || add->type != GGML_TYPE_F32 || add->view_src || !add->data ||
      !gg_api.contiguous(add) || !(add->flags & GGML_TENSOR_FLAG_COMPUTE) || !same_shape(add, mm))
    return 0;
  const struct ggml_tensor *res = add->src[0] == mm   ? add->src[1]
                                  : add->src[1] == mm ? add->src[0]
                                                      : NULL;
  if (!res || res == mm || res->type != GGML_TYPE_F32 || !res->data || !gg_api.contiguous(res) ||
      !same_shape(res, add) || !feeds_only(g, i, n, mm, add))
    return 0;
  size_t bytes = (size_t)(add->ne[0] * add->ne[1]) * sizeof(float);
  const struct ggml_tensor *w = mm->src[0], *x = mm->src[1];
  if (!apart(mm, res) || !clean_alias(add, mm, bytes) || !clean_alias(add, res, bytes) ||
      !apart(add, w) || !apart(add, x))
    return 0;
  *f = (gg_fusion_t){.first = mm,
                     .span = 2,
                     .add = add,
                     .mul = add,
                     .n = mm->ne[0],
                     .rows = mm->ne[1],
                     .nprod = 1};
  f->prod[0] = mm;
  return 1;
}

/* Products of one input (Q, K and V of an attention: 2 or 3 MUL_MATs under find_mm's guards
 * with the same input, weight type, K and N, within 16 nodes from node i) computed together at
 * the first one's place. The later ones move earlier past the nodes in between, so those
 * nodes, their sources included, must share no memory with the moved products' outputs or
 * weights: ggml's allocator may have placed a moved product on memory that is alive until it
 * (the first product's output, say, dead once its ROPE has read it). */
static int find_shared(struct ggml_cgraph *g, int n, int i, gg_fusion_t *f)
{
  gg_fusion_t a, b;
  if (!find_mm(g, i, &a))
    return 0;
  *f = (gg_fusion_t){.first = a.mul,
                     .span = 1,
                     .mul = a.mul,
                     .n = a.mul->ne[0],
                     .rows = a.mul->ne[1],
                     .nprod = 1};
  f->prod[0] = a.mul;
  const struct ggml_tensor *x = a.mul->src[1];
  int at[GG_PARTS] = {i};
  for (int j = i + 1; j < n && j <= i + 16 && f->nprod < GG_PARTS; j++) {
    if (!find_mm(g, j, &b) || b.mul->src[1] != x || b.mul->src[0]->type != a.mul->src[0]->type ||
        b.mul->ne[1] != a.mul->ne[1])
      continue;
    at[f->nprod] = j;
    f->prod[f->nprod++] = b.mul;
  }
  if (f->nprod < 2)
    return 0;
  for (int p = 1; p < f->nprod; p++) /* the nodes product p moves before */
    for (int j = i + 1; j < at[p]; j++) {
      struct ggml_tensor *t = gg_api.node(g, j);
      int member = 0;
      for (int q = 1; q < f->nprod; q++)
        member |= t == f->prod[q];
      if (member)
        continue;
      if (!apart(f->prod[p], t) || !apart(f->prod[p]->src[0], t))
        return 0;
      for (int k = 0; k < GGML_MAX_SRC; k++)
        if (!apart(f->prod[p], t->src[k]))
          return 0;
    }
  for (int p = 0; p < f->nprod; p++) /* and each product apart from the others' */
    for (int q = 0; q < f->nprod; q++)
      if (p != q && (!apart(f->prod[p], f->prod[q]) || !apart(f->prod[p], f->prod[q]->src[0])))
        return 0;
  return 1;
}

_Static_assert((int)GGML_OP_FLASH_ATTN_EXT == (int)AG_GGML_OP_FLASH_ATTN_EXT,
               "ggml_key.h's FLASH_ATTN_EXT");

/* The FLASH_ATTN_EXT at node i of g, when the generator's kernel can compute it: what its
 * signature says the kernel takes (hosts/ggml_sig.c, fa_kernel: one predicate for both), a
 * prompt's (at least AG_GGML_FA_MIN_ROWS query rows, where ggml computes it in f32 as the kernel
 * does) or fewer, decode's among them (ggml's f16 steps, the f16 kernel's: K and V heads grouped
 * alike and one mask for all), f32 queries and output, f16 keys, values and mask, no sinks, no
 * ALiBi bias and no logit softcap, rows of each operand contiguous (heads and rows at any
 * stride, K and V heads shared by whole groups of query heads), the output contiguous and apart
 * from every input. */
static int find_fa(struct ggml_cgraph *g, int n, int i, gg_fusion_t *f)
{
  (void)n;
  struct ggml_tensor *t = gg_api.node(g, i);
  const struct ggml_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2], *mask = t->src[3];
  if (t->op != GGML_OP_FLASH_ATTN_EXT || !q || !k || !v || !mask || t->src[4] ||
      t->type != GGML_TYPE_F32 || q->type != GGML_TYPE_F32 || k->type != GGML_TYPE_F16 ||
      v->type != GGML_TYPE_F16 || mask->type != GGML_TYPE_F16)
    return 0;
  float p[3]; /* scale, max_bias, logit_softcap */
  memcpy(p, t->op_params, sizeof p);
  if (p[1] != 0 || p[2] != 0)
    return 0;
  if (t->view_src || !(t->flags & GGML_TENSOR_FLAG_COMPUTE) || !t->data || !q->data ||
      !k->data || !v->data || !mask->data || !gg_api.contiguous(t))
    return 0;
  int64_t dk = q->ne[0], dv = v->ne[0], nq = q->ne[1], nh = q->ne[2], nkv = k->ne[1];
  if (k->ne[0] != dk || v->ne[1] != nkv || nkv < 1 || q->ne[3] != 1 || k->ne[3] != 1 ||
      v->ne[3] != 1 || mask->ne[3] != 1 || k->ne[2] < 1 || v->ne[2] < 1 || mask->ne[2] < 1 ||
      nh % k->ne[2] || nh % v->ne[2] || t->ne[0] != dv || t->ne[1] != nh || t->ne[2] != nq ||
      t->ne[3] != 1 || mask->ne[0] < nkv || mask->ne[1] < nq || nq > INT32_MAX ||
      nkv > INT32_MAX)
    return 0;
  if (nq < AG_GGML_FA_MIN_ROWS && (k->ne[2] != v->ne[2] || mask->ne[2] != 1))
    return 0;
  if (q->nb[0] != 4 || k->nb[0] != 2 || v->nb[0] != 2 || mask->nb[0] != 2 || q->nb[1] % 4 ||
      q->nb[2] % 4 || k->nb[1] % 2 || k->nb[2] % 2 || v->nb[1] % 2 || v->nb[2] % 2 ||
      mask->nb[1] % 2 || mask->nb[2] % 2)
    return 0;
  ag_sig_t key = gg_key_of(t);
  jt_gemm_t s;
  int swap;
  if (!ag_problem_of(&key, 0, &s, &swap) || !apart(t, q) || !apart(t, k) || !apart(t, v) ||
      !apart(t, mask))
    return 0;
  *f = (gg_fusion_t){.first = t, .span = 1, .mul = t, .n = dv, .rows = nq};
  return 1;
}

static int find_norm_add(struct ggml_cgraph *g, int n, int i, gg_fusion_t *f)
{
  return find_group(g, n, i, f, 1);
}

static int find_norm(struct ggml_cgraph *g, int n, int i, gg_fusion_t *f)
{
  return find_group(g, n, i, f, 0);
}

static int find_one_mm(struct ggml_cgraph *g, int n, int i, gg_fusion_t *f)
{
  (void)n;
  return find_mm(g, i, f);
}

/* ---- signatures and implementations ------------------------------------------------------ */

/* f's implementation number l: the kernels of k[0..n), its custom node booked under book. */
static void impl(gg_fusion_t *f, int l, ag_entry_t *const *k, int n, ag_entry_t *book)
{
  f->impl[l] = (gg_impl_t){.n = n, .book = book};
  memcpy(f->impl[l].k, k, (size_t)n * sizeof *k);
  f->nimpl = l + 1;
}

/* A norm group's signature (one per row length: the kernel takes the rows) and kernel. */
static int sign_norm(gg_fusion_t *f, int pattern)
{
  ag_sig_t k = ag_ggml_group_key(
      &(ag_ggml_group_t){.pattern = (uint8_t)pattern, .wtype = GGML_TYPE_F32, .m = (int32_t)f->n});
  if (!(f->e = ag_table_get(ag_table, &k)))
    return 0;
  impl(f, 0, &f->e, 1, f->e);
  return 1;
}

static int sign_norm_add(gg_fusion_t *f) { return sign_norm(f, AG_FUSE_ADD_RMS_MUL); }
static int sign_norm_only(gg_fusion_t *f) { return sign_norm(f, AG_FUSE_RMS_MUL); }

/* A MUL_MAT's (or FLASH_ATTN_EXT's) own signature: its profile is the original's. */
static int sign_mm(gg_fusion_t *f)
{
  ag_sig_t k = gg_key_of(f->mul);
  if (!(f->e = ag_table_get(ag_table, &k)))
    return 0;
  impl(f, 0, &f->e, 1, f->e);
  return 1;
}

/* The SWIGLU group's own signature; its products' kernel (they have one shape). */
static int sign_swiglu(gg_fusion_t *f)
{
  ag_sig_t kk = gg_key_of(f->gate);
  ag_sig_t k = ag_ggml_group_key(&(ag_ggml_group_t){.pattern = AG_FUSE_MM_SWIGLU,
                                                     .wtype = (uint8_t)f->gate->src[0]->type,
                                                     .m = kk.m, .n = kk.n, .k = kk.k,
                                                     .amx = kk.ab});
  ag_entry_t *ke;
  if (!(f->e = ag_table_get(ag_table, &k)) || !(ke = ag_table_get(ag_table, &kk)))
    return 0;
  impl(f, 0, &ke, 1, f->e);
  return 1;
}

/* Products of one input: their own signature; each product's kernel. */
static int sign_shared(gg_fusion_t *f)
{
  ag_entry_t *pke[GG_PARTS];
  int32_t rows = 0;
  for (int p = 0; p < f->nprod; p++) {
    ag_sig_t pk = gg_key_of(f->prod[p]);
    rows += pk.m;
    if (!(pke[p] = ag_table_get(ag_table, &pk)))
      return 0;
  }
  ag_sig_t kk = gg_key_of(f->mul);
  ag_sig_t k = ag_ggml_group_key(&(ag_ggml_group_t){.pattern = AG_FUSE_SHARED_INPUT,
                                                     .wtype = (uint8_t)f->mul->src[0]->type,
                                                     .count = (uint8_t)f->nprod,
                                                     .m = rows, .n = kk.n, .k = kk.k,
                                                     .amx = kk.ab});
  if (!(f->e = ag_table_get(ag_table, &k)))
    return 0;
  impl(f, 0, pke, f->nprod, f->e);
  return 1;
}

/* A MUL_MAT + ADD: its own signature and kernel, then its product's kernel (and ggml's ADD),
 * booked under the product's signature. */
static int sign_mm_add(gg_fusion_t *f)
{
  ag_sig_t kk = gg_key_of(f->prod[0]);
  ag_sig_t k = ag_ggml_group_key(&(ag_ggml_group_t){.pattern = AG_FUSE_MM_ADD,
                                                     .wtype = (uint8_t)f->prod[0]->src[0]->type,
                                                     .m = kk.m, .n = kk.n, .k = kk.k,
                                                     .amx = kk.ab});
  kk = ag_ggml_mm_add_product(&k); /* the product's signature: whether it is hot */
  ag_entry_t *pke;
  if (!(pke = ag_table_get(ag_table, &kk)) || !(f->e = ag_table_get(ag_table, &k)))
    return 0;
  impl(f, 0, &f->e, 1, f->e);
  impl(f, 1, &pke, 1, pke);
  return 1;
}

/* ---- members and sources ------------------------------------------------------------------ */

static int members_norm(const gg_fusion_t *f, struct ggml_tensor *m[GG_MEMBERS])
{
  int n = 0;
  if (f->add)
    m[n++] = f->add;
  m[n++] = f->rms, m[n++] = f->mul;
  return n;
}

static int members_mm(const gg_fusion_t *f, struct ggml_tensor *m[GG_MEMBERS])
{
  m[0] = f->mul;
  return 1;
}

static int members_mm_add(const gg_fusion_t *f, struct ggml_tensor *m[GG_MEMBERS])
{
  m[0] = f->prod[0], m[1] = f->add;
  return 2;
}

static int members_swiglu(const gg_fusion_t *f, struct ggml_tensor *m[GG_MEMBERS])
{
  m[0] = f->gate, m[1] = f->up, m[2] = f->mul;
  return 3;
}

static int members_shared(const gg_fusion_t *f, struct ggml_tensor *m[GG_MEMBERS])
{
  for (int p = 0; p < f->nprod; p++)
    m[p] = f->prod[p];
  return f->nprod;
}

static int sources_norm(const gg_fusion_t *f, struct ggml_tensor *a[1 + GG_PARTS])
{
  if (!f->add) {
    a[0] = f->rms->src[0], a[1] = f->mul->src[1];
    return 2;
  }
  a[0] = f->add->src[0], a[1] = f->add->src[1], a[2] = f->mul->src[1];
  return 3;
}

static int sources_mm(const gg_fusion_t *f, struct ggml_tensor *a[1 + GG_PARTS])
{
  a[0] = f->mul->src[0], a[1] = f->mul->src[1];
  return 2;
}

static int sources_fa(const gg_fusion_t *f, struct ggml_tensor *a[1 + GG_PARTS])
{
  for (int k = 0; k < 4; k++) /* Q, K, V, the mask */
    a[k] = f->mul->src[k];
  return 4;
}

static int sources_mm_add(const gg_fusion_t *f, struct ggml_tensor *a[1 + GG_PARTS])
{
  a[0] = f->prod[0]->src[0], a[1] = f->prod[0]->src[1];
  a[2] = (struct ggml_tensor *)gg_residual_of(f);
  return 3;
}

static int sources_swiglu(const gg_fusion_t *f, struct ggml_tensor *a[1 + GG_PARTS])
{
  a[0] = f->gate->src[0], a[1] = f->up->src[0], a[2] = f->gate->src[1];
  return 3;
}

static int sources_shared(const gg_fusion_t *f, struct ggml_tensor *a[1 + GG_PARTS])
{
  a[0] = f->mul->src[1];
  for (int p = 0; p < f->nprod; p++)
    a[1 + p] = f->prod[p]->src[0];
  return 1 + f->nprod;
}

/* The kinds, in the order they are tried at a node: a norm group takes its ADD before a
 * MUL_MAT + ADD could (but find_mm_add leaves decode's residual ADD to the norm), products
 * joined by a SWIGLU or by their input before a product alone, a norm whose ADD a
 * MUL_MAT + ADD took, and a prompt's attention. */
const gg_kind_t gg_kinds[] = {
    /* find            sign            members         sources         compute  counted products moves */
    {find_norm_add, sign_norm_add, members_norm, sources_norm, gg_node_norm, 1, 0, 0},
    {find_swiglu, sign_swiglu, members_swiglu, sources_swiglu, gg_node_swiglu, 0, 1, 0},
    {find_shared, sign_shared, members_shared, sources_shared, gg_node_shared, 0, 1, 1},
    {find_mm_add, sign_mm_add, members_mm_add, sources_mm_add, gg_node_mm_add, 1, 0, 0},
    {find_one_mm, sign_mm, members_mm, sources_mm, gg_node_mul_mat, 0, 0, 0},
    {find_norm, sign_norm_only, members_norm, sources_norm, gg_node_norm, 1, 0, 0},
    {find_fa, sign_mm, members_mm, sources_fa, gg_node_fa, 0, 0, 0},
};
const int gg_nkinds = sizeof gg_kinds / sizeof *gg_kinds;
