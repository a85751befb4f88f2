/* SPDX-License-Identifier: MIT */
/* The ggml host's custom nodes: each fusion record's work on one of ggml's threads (its share
 * of the rows) with the kernels of the implementation its graph was built with, read from
 * their signatures inside the call; the verification of a kernel's first executions against
 * ggml's own ops (norm groups), exact dot products (products) or exact softmaxes (attention);
 * the stand-ins that compute a record whose kernel is gone: ggml's own ADD, RMS_NORM and MUL, or
 * plain C for a product or an attention (ggml's own MUL_MAT and FLASH_ATTN_EXT synchronise every
 * thread and cannot stand in). */
#include "ggml_host.h"

#include "../tier.h"
#include "jit/jit.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A copy of contiguous tensor t seen as rows [r0, r0 + cnt) of its rows (2-D), at base's
 * rows (base: the tensor's own memory, or a stand-in of the same size). */
static struct ggml_tensor rows_of(const struct ggml_tensor *t, int64_t r0, int64_t cnt, void *base)
{
  struct ggml_tensor c = *t;
  int64_t n = t->ne[0];
  c.ne[1] = cnt, c.ne[2] = c.ne[3] = 1;
  c.nb[1] = c.nb[0] * (size_t)n, c.nb[2] = c.nb[3] = c.nb[1] * (size_t)cnt;
  c.data = (float *)base + r0 * n;
  return c;
}

/* ggml's own ADD (unless the group has none), RMS_NORM and MUL for rows [r0, r1) of the
 * group, single-threaded, writing x, s and y (the nodes' own memory, or scratch of the same
 * sizes): the original, for the verification and for a group whose kernel is gone. */
static void ggml_rows(const gg_fusion_t *f, int64_t r0, int64_t r1, float *x, float *s, float *y)
{
  gg_params_t p = {0, 1, 0, NULL, NULL, false};
  int64_t cnt = r1 - r0;
  const struct ggml_tensor *ta = f->add ? f->add->src[0] : f->rms->src[0];
  struct ggml_tensor a = rows_of(ta, r0, cnt, ta->data);
  struct ggml_tensor b = f->add ? rows_of(f->add->src[1], r0, cnt, f->add->src[1]->data) : a;
  struct ggml_tensor add = f->add ? rows_of(f->add, r0, cnt, x) : a;
  struct ggml_tensor rms = rows_of(f->rms, r0, cnt, s), mul = rows_of(f->mul, r0, cnt, y);
  add.src[0] = &a, add.src[1] = &b;
  rms.src[0] = f->add ? &add : &a;
  mul.src[0] = &rms;
  if (f->add)
    gg_api.add(&p, &add);
  gg_api.rms_norm(&p, &rms);
  gg_api.mul(&p, &mul);
}

/* The group's row inputs: the ADD's sources a and b and its output x; or (RMS_NORM + MUL) the
 * norm's input a, no b, no x. */
static void group_rows(const gg_fusion_t *f, const float **a, const float **b, float **x)
{
  *a = f->add ? f->add->src[0]->data : f->rms->src[0]->data;
  *b = f->add ? f->add->src[1]->data : NULL;
  *x = f->add ? f->add->data : NULL;
}

/* Verification, on thread 0 alone: ggml's result into scratch first (a and b may share memory
 * with the outputs), then the kernel's into the nodes; a mismatch leaves ggml's. */
static void verify(gg_fusion_t *f, jt_add_rms_mul_fn k)
{
  const float *a, *b, *w = f->mul->src[1]->data;
  float *x, *s = f->rms->data, *y = f->mul->data;
  group_rows(f, &a, &b, &x);
  size_t cnt = (size_t)(f->n * f->rows);
  float *scratch = malloc(3 * cnt * sizeof *scratch);
  if (!scratch) { /* cannot compare now: ggml computes, a later execution checks */
    atomic_fetch_add(&f->impl[0].k[0]->verify, 1);
    ggml_rows(f, 0, f->rows, x, s, y);
    return;
  }
  float *rx = scratch, *rs = scratch + cnt, *ry = scratch + 2 * cnt;
  ggml_rows(f, 0, f->rows, rx, rs, ry);
  k(a, b, w, x, s, y, f->rows, f->eps);
  gg_wrote(f, y, 0, 1, 0, (int64_t)cnt);
  /* x and s are compared when they end as themselves (an output reusing another's memory
   * ends as the later one); all must match within a few ulps of ggml's. */
  double worst = 0, bound = 1;
  for (size_t i = 0; i < cnt; i++) {
    double want[3] = {rx[i], rs[i], ry[i]}, got[3] = {x ? x[i] : 0, s[i], y[i]};
    int keep[3] = {x && x != s && x != y, s != y, 1};
    for (int o = 0; o < 3; o++) {
      double d = fabs(got[o] - want[o]),
             lim = o == 0 ? 0 : 4 * FLT_EPSILON * fabs(want[o]) + FLT_MIN;
      if (keep[o] && !(d <= lim)) {
        worst = isnan(d) ? INFINITY : d, bound = lim;
        i = cnt;
        break;
      }
    }
  }
  if (worst > bound) { /* the host keeps ggml's results */
    if (x)
      memcpy(x, rx, cnt * sizeof *x);
    memcpy(s, rs, cnt * sizeof *s);
    memcpy(y, ry, cnt * sizeof *y);
  }
  free(scratch);
  ag_tier_verify_result(f->impl[0].k[0], worst, bound);
}

/* A norm group's custom node on thread ith of nth: its share of the rows (all of them on thread
 * 0 when verifying). The kernel is read from the signature here, inside the forward call, so a
 * kernel the tiers drop (evicted, or blacklisted by a verification a moment ago) is never run
 * after the grace period they wait for: without one, ggml's own ops compute the rows. */
void gg_node_norm(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
  gg_fusion_t *f = ud;
  jt_add_rms_mul_fn k =
      (jt_add_rms_mul_fn)atomic_load_explicit(&f->impl[0].k[0]->variant, memory_order_acquire);
  if (f->verifying) {
    if (ith == 0) {
      if (k)
        verify(f, k);
      else
        ggml_rows(f, 0, f->rows, f->add ? f->add->data : NULL, f->rms->data, dst->data);
    }
    return;
  }
  int64_t n = f->n, per = (f->rows + nth - 1) / nth, r0 = per * ith;
  int64_t r1 = r0 + per < f->rows ? r0 + per : f->rows;
  if (r0 >= r1)
    return;
  const float *a, *b, *w = f->mul->src[1]->data;
  float *x, *s = f->rms->data, *y = dst->data;
  group_rows(f, &a, &b, &x);
  if (!k) {
    ggml_rows(f, r0, r1, x, s, y);
    return;
  }
  k(a + r0 * n, b ? b + r0 * n : NULL, w, x ? x + r0 * n : NULL, s + r0 * n, y + r0 * n, r1 - r0,
    f->eps);
  gg_wrote(f, y, 0, 1, r0 * n, r1 * n);
}

/* ---- MUL_MAT ---------------------------------------------------------------------------- */

/* Rows [r0, r1) of MUL_MAT node mm in plain C: the original for a node whose kernel the tiers
 * dropped (ggml's own MUL_MAT cannot stand in: it synchronises every thread of the graph). */
static void mm_rows(const struct ggml_tensor *mm, int64_t r0, int64_t r1)
{
  const struct ggml_tensor *w = mm->src[0];
  int64_t m = mm->ne[0], n = mm->ne[1], k = w->ne[0];
  float *y = mm->data;
  double mag;
  for (int64_t j = 0; j < n; j++) /* exact, then one rounding: within ggml's own error of it */
    for (int64_t i = r0; i < r1; i++)
      y[j * m + i] =
          (float)ag_mm_exact(w->data, gg_w16(w), mm->src[1]->data, k, i, j, &mag);
}

/* out = y + res over rows [r0, r1) of every column, element by element (out may be the very
 * memory of y or of res); res's element (i, j) at res[j * ld + i - row0]: the residual itself
 * (ld m, row0 0), or a copy of those rows (ld r1 - r0, row0 r0). */
static void add_rows(const struct ggml_tensor *mm, int64_t r0, int64_t r1, const float *res,
                     int64_t ld, int64_t row0, float *out)
{
  int64_t m = mm->ne[0];
  const float *y = mm->data;
  for (int64_t j = 0; j < mm->ne[1]; j++)
    for (int64_t i = r0; i < r1; i++)
      out[j * m + i] = y[j * m + i] + res[j * ld + i - row0];
}

/* Verification of rows [r0, r1) of mm by the thread that computed them with ke's kernel: 64 of
 * their elements — the range's first and last rows, the first and last columns, the rest at
 * random — against the exact dot product (in double) within the bound of a float sum of k
 * products (elements with infinite or NaN products have none: skipped); with a residual (res,
 * a copy of its rows [r0, r1), column by column), the sums in out against the exact product
 * plus it. A mismatch blacklists the kernel, and these rows are computed again by mm_rows (and
 * add_rows). Each thread's check is a verdict of its own. */
static void mm_verify(ag_entry_t *ke, const struct ggml_tensor *mm, int64_t r0, int64_t r1, int ith,
                      const float *res, float *out)
{
  const struct ggml_tensor *w = mm->src[0];
  int64_t m = mm->ne[0], n = mm->ne[1], k = w->ne[0];
  const float *y = res ? out : mm->data;
  uint64_t rnd = (uint64_t)(uintptr_t)y ^ ((uint64_t)ith << 32) ^ 0x9e3779b97f4a7c15ull;
  ag_mm_check_t c = {0};
  for (int t = 0; t < 64; t++) {
    rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
    int64_t i = t == 0 ? r0 : t == 1 ? r1 - 1 : r0 + (int64_t)((rnd >> 33) % (uint64_t)(r1 - r0));
    int64_t j = t < 2 ? 0 : t < 4 ? n - 1 : (int64_t)((rnd >> 17) % (uint64_t)n);
    double mag,
        exact = ag_mm_exact(w->data, gg_w16(w), mm->src[1]->data, k, i, j, &mag);
    double r = res ? res[j * (r1 - r0) + i - r0] : 0; /* one more rounding: eps |r| */
    ag_mm_tally(&c, y[j * m + i], exact + r, mag + fabs(r) / (4.0 * (double)(k + 2)), k);
  }
  if (c.worst > c.bound) {
    mm_rows(mm, r0, r1);
    if (res)
      add_rows(mm, r0, r1, res, r1 - r0, r0, out);
  }
  if (c.checked)
    ag_tier_verify_result(ke, c.worst, c.bound);
}

/* Thread ith of nth's share of m rows, in whole micro-kernel blocks; 0 when it has none. */
static int mm_share(int64_t m, int ith, int nth, int64_t *r0, int64_t *r1)
{
  int64_t per = ((m + nth - 1) / nth + JT_MM_MR - 1) / JT_MM_MR * JT_MM_MR;
  *r0 = per * ith, *r1 = *r0 + per < m ? *r0 + per : m;
  return *r0 < *r1;
}

/* The calling thread's kernel scratch of need floats (64-byte aligned): kept for the thread's
 * life (freed when it ends), grown on demand; NULL without memory. A node's call used to
 * allocate and free its own. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_keyed;
static AG_TLS float *tl_scratch;
static AG_TLS size_t tl_scratch_n;

static void scratch_key_make(void) { scratch_keyed = pthread_key_create(&scratch_key, free) == 0; }

static float *scratch_get(size_t need)
{
  if (tl_scratch_n >= need)
    return tl_scratch;
  pthread_once(&scratch_once, scratch_key_make);
  float *p = scratch_keyed ? aligned_alloc(64, (need * sizeof(float) + 63) / 64 * 64) : NULL;
  if (!p || pthread_setspecific(scratch_key, p)) {
    free(p);
    return NULL;
  }
  free(tl_scratch);
  tl_scratch = p, tl_scratch_n = need;
  return p;
}

/* Rows [r0, r1) of MUL_MAT node mm by ke's kernel, read here, inside the forward call (as for
 * the fusions): without one (dropped meanwhile), or without memory for its scratch, in plain
 * C. Checked when f verifies. Returns 1 when the kernel computed them. */
static int mm_compute(const gg_fusion_t *f, ag_entry_t *ke, const struct ggml_tensor *mm,
                      int64_t r0, int64_t r1, int ith)
{
  jt_mm_fn k = (jt_mm_fn)atomic_load_explicit(&ke->variant, memory_order_acquire);
  float *scratch = k ? scratch_get(JT_MM_SCRATCH_FLOATS(mm->src[0]->ne[0])) : NULL;
  if (!scratch) {
    mm_rows(mm, r0, r1);
    return 0;
  }
  k(mm->src[0]->data, mm->src[1]->data, mm->data, r0, r1, scratch);
  gg_wrote(f, mm->data, mm->ne[0], mm->ne[1], r0, r1);
  if (f->verifying)
    mm_verify(ke, mm, r0, r1, ith, NULL, NULL);
  return 1;
}

/* Rows [r0, r1) of a MUL_MAT + ADD record: with its first implementation, its own kernel's
 * sums into the ADD's output (the product in its own memory), read here as mm_compute reads
 * its kernel; with its second, or without that kernel (dropped meanwhile), the product by its
 * own MUL_MAT kernel (mm_compute: that, or plain C) and then ggml's ADD's sums. A verifying
 * execution keeps a copy of the residual's rows first: the output may be its very memory.
 * Returns 1 when the group's kernel computed them. */
static int mm_add_compute(const gg_fusion_t *f, int64_t r0, int64_t r1, int ith)
{
  const struct ggml_tensor *mm = f->prod[0];
  const float *res = gg_residual_of(f)->data;
  float *out = f->add->data;
  int64_t m = mm->ne[0], n = mm->ne[1], cnt = r1 - r0;
  ag_entry_t *own = f->impl[0].k[0];
  jt_mm_add_fn k =
      f->use == 0 ? (jt_mm_add_fn)atomic_load_explicit(&own->variant, memory_order_acquire) : NULL;
  float *scratch = k ? scratch_get(JT_MM_SCRATCH_FLOATS(mm->src[0]->ne[0])) : NULL;
  float *keep = scratch && f->verifying ? malloc((size_t)(n * cnt) * sizeof *keep) : NULL;
  if (!scratch) {
    mm_compute(f, f->impl[1].k[0], mm, r0, r1, ith);
    add_rows(mm, r0, r1, res, m, 0, out);
    return 0;
  }
  for (int64_t j = 0; keep && j < n; j++)
    memcpy(keep + j * cnt, res + j * m + r0, (size_t)cnt * sizeof *keep);
  k(mm->src[0]->data, mm->src[1]->data, mm->data, res, out, r0, r1, scratch);
  gg_wrote(f, out, m, n, r0, r1);
  if (keep)
    mm_verify(own, mm, r0, r1, ith, keep, out);
  else if (f->verifying) /* no memory to compare now: a later execution checks */
    atomic_fetch_add(&own->verify, 1);
  free(keep);
  return 1;
}

/* The custom node of a MUL_MAT on thread ith of nth: its share of the rows. */
void gg_node_mul_mat(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
  gg_fusion_t *f = ud;
  int64_t r0, r1;
  if (mm_share(dst->ne[0], ith, nth, &r0, &r1))
    mm_compute(f, f->impl[0].k[0], f->mul, r0, r1, ith);
}

/* The custom node of a MUL_MAT + ADD on thread ith of nth: its share of the rows. */
void gg_node_mm_add(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
  int64_t r0, r1;
  if (mm_share(dst->ne[0], ith, nth, &r0, &r1))
    mm_add_compute(ud, r0, r1, ith);
}

/* The SWIGLU group's custom node on thread ith of nth: its share of the rows of both products
 * (their kernel is one: they have one shape) into the products' own outputs, then of the GLU's
 * output, silu(gate) * up, by ggml's own ggml_vec_swiglu_f32 (its vectorised e^x: the same
 * bits as the host's GLU). Each thread reads only the rows it wrote: no thread waits for
 * another within the group. */
void gg_node_swiglu(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
  gg_fusion_t *f = ud;
  ag_entry_t *ke = f->impl[0].k[0];
  int64_t m = dst->ne[0], n = dst->ne[1], r0, r1;
  if (!mm_share(m, ith, nth, &r0, &r1))
    return;
  int served = mm_compute(f, ke, f->gate, r0, r1, ith);
  served += mm_compute(f, ke, f->up, r0, r1, ith);
  /* The products' own signature keeps its calls: they are what keeps its kernel hot in later
   * runs' profiles and in the code cache (forward() books the group's under its own). */
  atomic_fetch_add_explicit(&ke->calls, 2, memory_order_relaxed);
  atomic_fetch_add_explicit(&ke->vcalls, (uint64_t)served, memory_order_relaxed);
  const float *g = f->gate->data, *u = f->up->data;
  float *y = dst->data;
  for (int64_t j = 0; j < n; j++) /* r0 is a multiple of 16, as a row's start: ggml's chunks */
    gg_api.swiglu((int)(r1 - r0), y + j * m + r0, g + j * m + r0, u + j * m + r0);
}

/* The custom node of products of one input on thread ith of nth: its share of each product's
 * rows with that product's kernel. Each product's own signature keeps its calls (forward()
 * books the node's under the group's). */
void gg_node_shared(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
  (void)dst;
  gg_fusion_t *f = ud;
  for (int p = 0; p < f->nprod; p++) {
    int64_t r0, r1;
    if (!mm_share(f->prod[p]->ne[0], ith, nth, &r0, &r1))
      continue;
    ag_entry_t *ke = f->impl[0].k[p];
    int served = mm_compute(f, ke, f->prod[p], r0, r1, ith);
    atomic_fetch_add_explicit(&ke->calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ke->vcalls, (uint64_t)served, memory_order_relaxed);
  }
}

/* ---- FLASH_ATTN_EXT ---------------------------------------------------------------------- */

/* The kernel's arguments for query rows [i0, i1) of head h of attention node fa (find_fa's
 * guards: a head's K and V are those of its group, the mask's head is h modulo its heads). */
static jt_fa_args_t fa_args(const struct ggml_tensor *fa, int64_t h, int64_t i0, int64_t i1)
{
  const struct ggml_tensor *q = fa->src[0], *k = fa->src[1], *v = fa->src[2], *mask = fa->src[3];
  float scale;
  memcpy(&scale, fa->op_params, sizeof scale);
  return (jt_fa_args_t){
      .q = (const float *)(const void *)((const char *)q->data + h * (int64_t)q->nb[2]),
      .k = (const uint16_t *)(const void *)((const char *)k->data +
                                            h / (q->ne[2] / k->ne[2]) * (int64_t)k->nb[2]),
      .v = (const uint16_t *)(const void *)((const char *)v->data +
                                            h / (q->ne[2] / v->ne[2]) * (int64_t)v->nb[2]),
      .mask = (const uint16_t *)(const void *)((const char *)mask->data +
                                               h % mask->ne[2] * (int64_t)mask->nb[2]),
      .out = (float *)fa->data + h * fa->ne[0], /* row (i, h) of ggml's permuted output */
      .q_stride = (int64_t)q->nb[1] / 4,
      .k_stride = (int64_t)k->nb[1] / 2,
      .v_stride = (int64_t)v->nb[1] / 2,
      .mask_stride = (int64_t)mask->nb[1] / 2,
      .out_stride = fa->ne[0] * fa->ne[1],
      .n_kv = k->ne[1],
      .i0 = i0,
      .i1 = i1,
      .scale = scale};
}

/* Rows [a->i0, a->i1) in plain C from their exact softmax: the original for a record whose
 * kernel the tiers dropped (ggml's own FLASH_ATTN_EXT cannot stand in: it synchronises every
 * thread of the graph), and for rows a kernel got wrong. */
static void fa_rows(const jt_fa_args_t *a, int dk, int dv)
{
  double exact[JT_FA_MAX_D], bound;
  for (int64_t i = a->i0; i < a->i1; i++) {
    ag_fa_exact(a, dk, dv, i, exact, &bound);
    for (int d = 0; d < dv; d++)
      a->out[i * a->out_stride + d] = (float)exact[d];
  }
}

/* Verification of rows [a->i0, a->i1) by the thread that computed them: the first, the last and
 * two at random against their exact softmax (ag_fa_exact's bound), tallied in c; rows of a
 * range that does not match are computed again by fa_rows. */
static void fa_verify(ag_mm_check_t *c, const jt_fa_args_t *a, int dk, int dv, int ith)
{
  double exact[JT_FA_MAX_D], bound;
  uint64_t rnd = (uint64_t)(uintptr_t)a->out ^ ((uint64_t)ith << 32) ^ 0x9e3779b97f4a7c15ull;
  int64_t cnt = a->i1 - a->i0;
  ag_mm_check_t mine = {0};
  for (int t = 0; t < 4; t++) {
    rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
    int64_t i = t == 0   ? a->i0
                : t == 1 ? a->i1 - 1
                         : a->i0 + (int64_t)((rnd >> 33) % (uint64_t)cnt);
    ag_fa_exact(a, dk, dv, i, exact, &bound);
    ag_fa_tally(&mine, a->out + i * a->out_stride, exact, dv, bound);
  }
  if (mine.worst > mine.bound)
    fa_rows(a, dk, dv);
  if (mine.worst > mine.bound ? mine.worst - mine.bound > c->worst - c->bound
                              : c->worst <= c->bound && mine.bound > c->bound)
    c->worst = mine.worst, c->bound = mine.bound;
  c->checked += mine.checked;
}

/* ---- FLASH_ATTN_EXT in ggml's f16 steps (fewer than AG_GGML_FA_MIN_ROWS query rows) -------- */

/* ggml (ggml-cpu/ops.cpp, ggml_compute_forward_flash_attn_ext_f16) splits one query row against
 * at least this many keys in chunks of keys, one per thread, each over every head, and combines
 * each head's chunks (ggml_flash_attn_ext_reduce_partials); anything else is one chunk. */
#define FA16_SPLIT_KV 512

/* The lanes of ggml's dot products on this CPU: its AVX-512 variants' vectors where it loads
 * one (they need F, CD, VL, DQ and BW: ggml-cpu/arch/x86/cpu-feats.cpp), else AVX2's. */
static int fa16_lanes(void)
{
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512bw")
             ? 16
             : 8;
}

/* Keys [c0, c1) of heads [h0, h1) of f's attention, query rows [i0, i1), by kernel k
 * (ag_fa16_ref without one): accumulators into out (row i of head h at out + (i - i0) (h1 - h0) dv +
 * (h - h0) dv), maxima and sums into out + (i1 - i0) (h1 - h0) dv (2 floats a row and head, in
 * the same order). With chk (room for as many floats again) they are checked against
 * ag_fa16_ref, tallied in c, and replaced by its results when they do not match. */
static void fa16_part(const gg_fusion_t *f, jt_fa_fn k, int64_t h0, int64_t h1, int64_t i0,
                      int64_t i1, int64_t c0, int64_t c1, float *out, float *chk, ag_mm_check_t *c)
{
  const struct ggml_tensor *fa = f->mul, *q = fa->src[0];
  int dk = (int)q->ne[0], dv = (int)fa->ne[0];
  int64_t n = (i1 - i0) * (h1 - h0);
  jt_fa_args_t a = fa_args(fa, h0, 0, i1 - i0); /* from row i0 on */
  a.q += i0 * a.q_stride, a.mask += i0 * a.mask_stride;
  a.out = out, a.out_stride = (h1 - h0) * dv, a.out_head = dv;
  a.ms = out + n * dv, a.c0 = c0, a.c1 = c1, a.heads = h1 - h0;
  a.q_head = (int64_t)q->nb[2] / 4, a.k_head = (int64_t)fa->src[1]->nb[2] / 2;
  a.v_head = (int64_t)fa->src[2]->nb[2] / 2;
  a.group = q->ne[2] / fa->src[1]->ne[2], a.head0 = h0 % a.group; /* fa_args: h0's K/V head */
  if (!k) {
    ag_fa16_ref(&a, dk, dv, fa16_lanes());
    return;
  }
  k(&a, NULL);
  gg_wrote(f, out, dv, n, 0, dv);
  if (!chk)
    return;
  jt_fa_args_t r = a;
  r.out = chk, r.ms = chk + n * dv;
  ag_fa16_ref(&r, dk, dv, fa16_lanes());
  ag_mm_check_t mine = {0};
  double exact[JT_FA_MAX_D];
  for (int64_t u = 0; u < n; u++) {
    for (int d = 0; d < dv; d++)
      exact[d] = chk[u * dv + d];
    ag_fa_tally(&mine, out + u * dv, exact, dv, ag_fa16_bound(chk + u * dv, dv));
    exact[0] = r.ms[2 * u + 1]; /* the sum, to a few ulps */
    ag_fa_tally(&mine, a.ms + 2 * u + 1, exact, 1, 8 * FLT_EPSILON * exact[0]);
  }
  if (mine.worst > mine.bound)
    memcpy(out, chk, (size_t)(n * (dv + 2)) * sizeof(float));
  if (mine.worst > mine.bound ? mine.worst - mine.bound > c->worst - c->bound
                              : c->worst <= c->bound && mine.bound > c->bound)
    c->worst = mine.worst, c->bound = mine.bound;
  c->checked += mine.checked;
}

/* Heads [h0, h1) and rows [i0, i1) of fa into its output, over the chunks of keys ggml takes
 * with nth threads, each folded into the output as ggml combines them, then normalised:
 * buf holds (i1 - i0) (h1 - h0) (dv + 4) floats, twice that with chk (fa16_part's). */
static void fa16_heads(const gg_fusion_t *f, jt_fa_fn k, int nth, int64_t h0, int64_t h1,
                       int64_t i0, int64_t i1, float *buf, int chk, ag_mm_check_t *c)
{
  const struct ggml_tensor *fa = f->mul;
  int64_t dv = fa->ne[0], heads = fa->ne[1], nkv = fa->src[1]->ne[1], nh = h1 - h0;
  int64_t n = (i1 - i0) * nh, chunks = fa->ne[2] == 1 && nkv >= FA16_SPLIT_KV ? nth : 1;
  int64_t cs = (nkv + chunks - 1) / chunks;
  float *part = buf, *pms = buf + n * dv, *run = buf + n * (dv + 2); /* the folds' M and S */
  for (int64_t u = 0; u < n; u++)
    run[2 * u] = -INFINITY, run[2 * u + 1] = 0;
  for (int64_t ch = 0; ch < chunks && ch * cs < nkv; ch++) {
    fa16_part(f, k, h0, h1, i0, i1, ch * cs, ch * cs + cs < nkv ? ch * cs + cs : nkv, part,
              chk ? buf + n * (dv + 4) : NULL, c);
    for (int64_t u = 0; u < n; u++) {
      float *o = (float *)fa->data + ((i0 + u / nh) * heads + h0 + u % nh) * dv;
      float m = run[2 * u], cm = pms[2 * u], cs_ = pms[2 * u + 1];
      if (cs_ == 0.0f)
        continue;
      float mn = fmaxf(m, cm), so = expf(m - mn), sn = expf(cm - mn);
      /* as GCC fused ggml's: o so + (acc sn); o is ggml's zeros until a chunk is folded (the
       * first chunks may have no live key: o is then the graph's old data, maybe NaN) */
      for (int64_t d = 0; d < dv; d++)
        o[d] = fmaf(m == -INFINITY ? 0.0f : o[d], so, part[u * dv + d] * sn);
      run[2 * u] = mn, run[2 * u + 1] = fmaf(run[2 * u + 1], so, cs_ * sn);
    }
  }
  for (int64_t u = 0; u < n; u++) {
    float *o = (float *)fa->data + ((i0 + u / nh) * heads + h0 + u % nh) * dv, s = run[2 * u + 1];
    for (int64_t d = 0; d < dv; d++)
      o[d] = s == 0.0f ? 0.0f : o[d] * (1.0f / s);
  }
}

/* The f16 path of gg_node_fa: thread ith of nth takes its share of the heads, every query row
 * and every chunk of keys ggml takes (as many as ggml's threads, which are these); without
 * memory for them all at once, a head and a row at a time. */
static void fa16_node(gg_fusion_t *f, jt_fa_fn k, int ith, int nth, ag_mm_check_t *c)
{
  const struct ggml_tensor *fa = f->mul;
  int64_t dv = fa->ne[0], heads = fa->ne[1], rows = fa->ne[2];
  int64_t h0 = heads * ith / nth, h1 = heads * (ith + 1) / nth;
  if (h0 >= h1)
    return;
  int chk = f->verifying;
  float *buf = scratch_get((size_t)(rows * (h1 - h0) * (dv + 4) * (chk ? 2 : 1)));
  if (buf) {
    fa16_heads(f, k, nth, h0, h1, 0, rows, buf, chk, c);
  } else {
    float one[JT_FA_MAX_D + 4];
    for (int64_t h = h0; h < h1; h++)
      for (int64_t i = 0; i < rows; i++)
        fa16_heads(f, k, nth, h, h + 1, i, i + 1, one, 0, c);
  }
}

/* The custom node of a FLASH_ATTN_EXT on thread ith of nth: its share of the heads (each head's
 * rows split in parts when there are fewer heads than threads), each by the record's kernel,
 * read here as mm_compute reads its kernel: without it, or without memory for its scratch (a
 * head's keys and values in f32), in plain C. When the record verifies, each head's rows are
 * checked, and the thread's worst goes to the tiers: a mismatch blacklists the kernel. Fewer
 * rows than AG_GGML_FA_MIN_ROWS take ggml's f16 steps (fa16_node). */
void gg_node_fa(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
  (void)dst;
  gg_fusion_t *f = ud;
  const struct ggml_tensor *fa = f->mul;
  ag_entry_t *ke = f->impl[0].k[0];
  if (fa->ne[2] < AG_GGML_FA_MIN_ROWS) {
    ag_mm_check_t c = {0};
    jt_fa_fn k = (jt_fa_fn)atomic_load_explicit(&ke->variant, memory_order_acquire);
    fa16_node(f, k, ith, nth, &c);
    if (c.checked)
      ag_tier_verify_result(ke, c.worst, c.bound);
    return;
  }
  int dk = (int)fa->src[0]->ne[0], dv = (int)fa->ne[0];
  int64_t heads = fa->ne[1], rows = fa->ne[2], parts = (nth + heads - 1) / heads;
  jt_fa_fn k = (jt_fa_fn)atomic_load_explicit(&ke->variant, memory_order_acquire);
  float *scratch = k ? scratch_get(JT_FA_SCRATCH_FLOATS(dk, dv, fa->src[1]->ne[1])) : NULL;
  ag_mm_check_t c = {0};
  for (int64_t u = ith; u < heads * parts; u += nth) {
    int64_t h = u / parts, part = u % parts;
    jt_fa_args_t a = fa_args(fa, h, rows * part / parts, rows * (part + 1) / parts);
    if (a.i0 >= a.i1)
      continue;
    if (!scratch) {
      fa_rows(&a, dk, dv);
      continue;
    }
    k(&a, scratch);
    gg_wrote(f, a.out + a.i0 * a.out_stride, a.out_stride, a.i1 - a.i0, 0, dv);
    if (f->verifying)
      fa_verify(&c, &a, dk, dv, ith);
  }
  if (c.checked) /* each thread's check is a verdict of its own */
    ag_tier_verify_result(ke, c.worst, c.bound);
}
