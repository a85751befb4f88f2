/* SPDX-License-Identifier: MIT */
/* The ggml host's MUL_MAT checks (ggml_verify.h). */
#include "ggml_verify.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>

double ag_mm_exact(const void *w, int w16, const float *x, int64_t k, int64_t i, int64_t j,
                   double *mag)
{
  double exact = 0, sum = 0;
  for (int64_t kk = 0; kk < k; kk++) {
    double wv = w16 ? (double)((const _Float16 *)w)[i * k + kk] : ((const float *)w)[i * k + kk];
    double p = wv * (w16 == 1 ? (double)(_Float16)x[j * k + kk] : x[j * k + kk]);
    exact += p, sum += fabs(p);
  }
  *mag = sum;
  return exact;
}

void ag_mm_tally(ag_mm_check_t *c, double got, double exact, double mag, int64_t k)
{
  if (!isfinite(mag))
    return;
  c->checked++;
  double d = isnan(got) ? INFINITY : fabs(got - exact);
  double lim = 4.0 * (double)(k + 2) * FLT_EPSILON * mag + FLT_MIN;
  if (d > lim && d - lim > c->worst - c->bound)
    c->worst = d, c->bound = lim;
  else if (c->worst <= c->bound && lim > c->bound)
    c->bound = lim;
}

/* A prefill computes its graph once per process: checked only on its first executions, a
 * kernel would be verified after the graph that needed it, and never stored. Hence a check on
 * random inputs before the kernel is published. */
int ag_ggml_mm_selftest(const jt_gemm_t *g, void (*fn)(void), double *worst, double *bound)
{
  /* rows [i0, i0 + rows): from row 16 when there are enough, as a thread's share starts */
  int64_t m = g->m, n = g->n, k = g->k, i0 = m >= 96 ? 16 : 0, rows = m - i0 < 80 ? m - i0 : 80;
  size_t wbytes = (size_t)((i0 + rows) * k) * (g->w16 ? 2 : 4), xbytes = (size_t)(n * k) * 4;
  size_t ybytes = (size_t)((n - 1) * m + i0 + rows) * 4; /* only those rows of y are written */
  if (g->mm_add) /* then a residual and the sum's own destination, of y's extent */
    ybytes *= 3;
  size_t sbytes = JT_MM_SCRATCH_FLOATS(k) * sizeof(float);
  size_t all = wbytes + xbytes + ybytes + sbytes + 64;
  char *mem =
      mmap(NULL, all, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED)
    return -1;
  float *x = (float *)(void *)(mem + wbytes), *y = (float *)(void *)(mem + wbytes + xbytes);
  uintptr_t at = (uintptr_t)(mem + wbytes + xbytes + ybytes);
  float *scratch = (float *)(void *)((at + 63) & ~(uintptr_t)63);
  uint64_t rnd = 0x2545f4914f6cdd1dull;
#define RND()                                                                                      \
  (rnd = rnd * 6364136223846793005ull + 1442695040888963407ull,                                    \
   (float)((double)(rnd >> 40) / (double)(1 << 24) - 0.5))
  for (int64_t i = 0; i < (i0 + rows) * k; i++) {
    if (g->w16)
      ((_Float16 *)(void *)mem)[i] = (_Float16)RND();
    else
      ((float *)(void *)mem)[i] = RND();
  }
  for (int64_t i = 0; i < n * k; i++)
    x[i] = RND();
  int64_t ylen = (n - 1) * m + i0 + rows;
  float *r = g->mm_add ? y + ylen : NULL, *out = g->mm_add ? y + 2 * ylen : y;
  for (int64_t i = 0; r && i < ylen; i++)
    r[i] = 4 * RND();
  if (g->mm_add)
    ((jt_mm_add_fn)fn)(mem, x, y, r, out, i0, i0 + rows, scratch);
  else
    ((jt_mm_fn)fn)(mem, x, y, i0, i0 + rows, scratch);
  ag_mm_check_t c = {0};
  for (int t = 0; t < 32 && t < n; t++) {
    if (t >= 12)
      rnd = rnd * 6364136223846793005ull + 1;
    int64_t j = t < 6 ? t : t < 12 ? n - 12 + t : (int64_t)(rnd >> 33) % n;
    j = j < 0 ? 0 : j;
    for (int64_t i = i0; i < i0 + rows; i++) {
      double mag, exact = ag_mm_exact(mem, g->w16, x, k, i, j, &mag);
      double res = r ? r[j * m + i] : 0; /* the residual: one more rounding, eps |res| */
      ag_mm_tally(&c, out[j * m + i], exact + res, mag + fabs(res) / (4.0 * (double)(k + 2)), k);
    }
  }
#undef RND
  munmap(mem, all);
  *worst = c.worst, *bound = c.bound;
  return c.worst <= c.bound;
}

/* Row i's score against key j (-inf when masked), in double, and in *mag its products'
 * magnitude: recomputed per pass, nothing allocated. */
static double fa_score(const jt_fa_args_t *a, int dk, int64_t i, int64_t j, double *mag)
{
  const _Float16 *mk = (const _Float16 *)(const void *)a->mask;
  double m = (double)mk[i * a->mask_stride + j], dot = 0, sum = 0;
  if (m == -INFINITY) {
    *mag = 0;
    return -INFINITY;
  }
  const _Float16 *k = (const _Float16 *)(const void *)a->k + j * a->k_stride;
  const float *q = a->q + i * a->q_stride;
  for (int d = 0; d < dk; d++) {
    double t = (double)q[d] * (double)k[d];
    dot += t, sum += fabs(t);
  }
  *mag = sum;
  return dot * a->scale + m;
}

void ag_fa_exact(const jt_fa_args_t *a, int dk, int dv, int64_t i, double *exact, double *bound)
{
  const _Float16 *v = (const _Float16 *)(const void *)a->v;
  double mx = -INFINITY, big = 0, vmax = 0, sum = 0, mag;
  for (int64_t j = 0; j < a->n_kv; j++) {
    double s = fa_score(a, dk, i, j, &mag);
    mx = s > mx ? s : mx;
    big = mag > big ? mag : big;
    for (int d = 0; s != -INFINITY && d < dv; d++)
      vmax = fmax(vmax, fabs((double)v[j * a->v_stride + d]));
  }
  for (int d = 0; d < dv; d++)
    exact[d] = 0;
  for (int64_t j = 0; mx != -INFINITY && j < a->n_kv; j++) {
    double s = fa_score(a, dk, i, j, &mag);
    if (s == -INFINITY)
      continue;
    double p = exp(s - mx);
    sum += p;
    for (int d = 0; d < dv; d++)
      exact[d] += p * (double)v[j * a->v_stride + d];
  }
  for (int d = 0; sum > 0 && d < dv; d++)
    exact[d] /= sum;
  *bound = (2 * (dk * (double)a->scale * big + 8) + (double)a->n_kv + 4) * FLT_EPSILON * vmax +
           FLT_MIN;
}

void ag_fa_tally(ag_mm_check_t *c, const float *got, const double *exact, int dv, double bound)
{
  for (int d = 0; d < dv; d++) {
    c->checked++;
    double e = isnan(got[d]) ? INFINITY : fabs(got[d] - exact[d]);
    if (e > bound && e - bound > c->worst - c->bound)
      c->worst = e, c->bound = bound;
    else if (c->worst <= c->bound && bound > c->bound)
      c->bound = bound;
  }
}

/* x rounded to f16 and back (to nearest even, as ggml's conversions). */
static float r16(float x) { return (float)(_Float16)x; }

void ag_fa16_ref(const jt_fa_args_t *a, int dk, int dv, int lanes)
{
  const _Float16 *mk = (const _Float16 *)(const void *)a->mask;
  int64_t group = a->group > 1 ? a->group : 1;
  for (int64_t h = 0; h < a->heads; h++)
    for (int64_t i = a->i0; i < a->i1; i++) {
      const float *q = a->q + h * a->q_head + i * a->q_stride;
      int64_t kvh = (a->head0 + h) / group - a->head0 / group;
      float qh[JT_FA_MAX_D], acc[JT_FA_MAX_D], m = -INFINITY, sum = 0;
      for (int d = 0; d < dk; d++)
        qh[d] = r16(q[d]);
      for (int d = 0; d < dv; d++)
        acc[d] = 0;
      for (int64_t j = a->c0; j < a->c1; j++) {
        float mv = (float)mk[i * a->mask_stride + j];
        if (mv == -INFINITY)
          continue;
        const _Float16 *k =
            (const _Float16 *)(const void *)a->k + kvh * a->k_head + j * a->k_stride;
        const _Float16 *v =
            (const _Float16 *)(const void *)a->v + kvh * a->v_head + j * a->v_stride;
        float part[4][16] = {{0}}, t[16];
        for (int d = 0; d < dk; d++) /* a product of halves is exact: fma's first step */
          part[d / lanes % 4][d % lanes] =
              d < 4 * lanes ? (float)k[d] * qh[d]
                            : __builtin_fmaf((float)k[d], qh[d], part[d / lanes % 4][d % lanes]);
        for (int l = 0; l < lanes; l++)
          t[l] = (part[0][l] + part[2][l]) + (part[1][l] + part[3][l]);
        for (int w = lanes / 2; w >= (lanes == 8 ? 4 : 1); w /= 2)
          for (int l = 0; l < w; l++)
            t[l] += t[l + w];
        float s = lanes == 8 ? (t[0] + t[1]) + (t[2] + t[3]) : t[0];
        s = s * a->scale;
        s = s + mv;
        int grows = s > m;
        float e = expf(grows ? m - s : s - m), ms = grows ? e : 1, vs = grows ? 1 : e;
        for (int d = 0; grows && d < dv; d++)
          acc[d] = r16(acc[d] * e);
        for (int d = 0; d < dv; d++) /* fma's: the product exact in double, the sum of a half
                                          and it rounded once but where no float could tell */
          acc[d] = r16((float)((double)v[d] * vs + acc[d]));
        float sm = sum * ms;
        sum = sm + vs;
        m = grows ? s : m;
      }
      float *out = a->out + h * a->out_head + i * a->out_stride;
      for (int d = 0; d < dv; d++)
        out[d] = acc[d];
      a->ms[2 * ((i - a->i0) * a->heads + h)] = m;
      a->ms[2 * ((i - a->i0) * a->heads + h) + 1] = sum;
    }
}

double ag_fa16_bound(const float *ref, int dv)
{
  double big = 0;
  for (int d = 0; d < dv; d++)
    big = fmax(big, fabs((double)ref[d]));
  return 4 * 0x1p-10 * big + FLT_MIN;
}

/* The f16 kernel's check: 3 rows of 3 heads with a K/V head each, then of 6 heads grouped by 4
 * from the third of a group (a thread's share of a GQA model's: heads of two K/V heads), side by
 * side in memory as llama's cache keeps them, over keys [7, 290) of 300 with holes in the mask,
 * against ag_fa16_ref: exactly, in the order of 16 lanes or of 8 (g is the problem, whose ISA
 * the machine model picks). */
static int fa16_selftest(const jt_gemm_t *g, void (*fn)(void), double *worst, double *bound)
{
  enum { N = 3, H = 6, NKV = 300, C0 = 7, C1 = 290 };
  int64_t dk = g->k, dv = g->m;
  float *q = malloc((size_t)(N * H * dk) * sizeof *q), *out = malloc((size_t)(N * H * dv) * 12);
  float *ms = malloc((size_t)(N * H) * 6 * sizeof *ms);
  _Float16 *k = malloc((size_t)(NKV * H * dk) * 2), *v = malloc((size_t)(NKV * H * dv) * 2);
  _Float16 *mask = malloc((size_t)(N * NKV) * 2);
  int rc = -1;
  if (!q || !out || !ms || !k || !v || !mask)
    goto out_free;
  uint64_t rnd = 0x2545f4914f6cdd1dull;
#define RND()                                                                                      \
  (rnd = rnd * 6364136223846793005ull + 1442695040888963407ull,                                    \
   (float)((double)(rnd >> 40) / (double)(1 << 24) - 0.5))
  for (int64_t i = 0; i < N * H * dk; i++)
    q[i] = 4 * RND();
  for (int64_t i = 0; i < NKV * H * dk; i++)
    k[i] = (_Float16)(4 * RND());
  for (int64_t i = 0; i < NKV * H * dv; i++)
    v[i] = (_Float16)(2 * RND());
  for (int64_t i = 0; i < N * NKV; i++) /* a key in 8 left out */
    mask[i] = RND() > 0.375f ? (_Float16)-INFINITY : (_Float16)0;
#undef RND
  ag_mm_check_t c[2] = {{0}, {0}};
  for (int grouped = 0; grouped < 2; grouped++) {
    int64_t heads = grouped ? H : 3;
    jt_fa_args_t a = {.q = q,
                      .k = (const uint16_t *)k,
                      .v = (const uint16_t *)v,
                      .mask = (const uint16_t *)mask,
                      .out = out,
                      .q_stride = H * dk,
                      .k_stride = H * dk,
                      .v_stride = H * dv,
                      .mask_stride = NKV,
                      .out_stride = H * dv,
                      .n_kv = NKV,
                      .i1 = N,
                      .scale = 1.0f / sqrtf((float)dk),
                      .c0 = C0,
                      .c1 = C1,
                      .heads = heads,
                      .q_head = dk,
                      .k_head = dk,
                      .v_head = dv,
                      .out_head = dv,
                      .ms = ms,
                      .group = grouped ? 4 : 1,
                      .head0 = grouped ? 2 : 0};
    ((jt_fa_fn)fn)(&a, NULL);
    double exact[JT_FA_MAX_D];
    for (int o = 0; o < 2; o++) {
      a.out = out + (o + 1) * N * H * dv, a.ms = ms + (o + 1) * 2 * N * H;
      ag_fa16_ref(&a, (int)dk, (int)dv, o ? 8 : 16);
      for (int64_t r = 0; r < N; r++)
        for (int64_t h = 0; h < heads; h++) {
          int64_t u = r * heads + h, at = r * H * dv + h * dv;
          for (int d = 0; d < dv; d++)
            exact[d] = a.out[at + d];
          ag_fa_tally(&c[o], out + at, exact, (int)dv, 0);
          exact[0] = a.ms[2 * u], exact[1] = a.ms[2 * u + 1];
          ag_fa_tally(&c[o], ms + 2 * u, exact, 2, 0);
        }
    }
  }
  int o = c[1].worst < c[0].worst;
  *worst = c[o].worst, *bound = c[o].bound;
  rc = c[o].worst <= c[o].bound;
out_free:
  free(q), free(out), free(ms), free(k), free(v), free(mask);
  return rc;
}

/* As for MUL_MATs: a prefill's attention runs once per process, so its kernel is checked on
 * random inputs before it is published. */
int ag_ggml_fa_selftest(const jt_gemm_t *g, void (*fn)(void), double *worst, double *bound)
{
  if (g->fa == 2)
    return fa16_selftest(g, fn, worst, bound);
  int64_t dk = g->k, dv = g->m, n = g->n;
  size_t qbytes = (size_t)(n * dk) * 4, kbytes = (size_t)(n * dk) * 2, vbytes = (size_t)(n * dv) * 2;
  size_t mbytes = (size_t)(n * n) * 2, obytes = (size_t)(n * dv) * 4;
  size_t sbytes = JT_FA_SCRATCH_FLOATS(dk, dv, n) * sizeof(float);
  size_t all = qbytes + kbytes + vbytes + mbytes + obytes + sbytes + 64;
  char *mem =
      mmap(NULL, all, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  double *exact = malloc((size_t)dv * sizeof *exact);
  if (mem == MAP_FAILED || !exact) {
    if (mem != MAP_FAILED)
      munmap(mem, all);
    free(exact);
    return -1;
  }
  float *q = (float *)(void *)mem, *out = (float *)(void *)(mem + qbytes + kbytes + vbytes + mbytes);
  _Float16 *k = (_Float16 *)(void *)(mem + qbytes), *v = (_Float16 *)(void *)(mem + qbytes + kbytes);
  _Float16 *mask = (_Float16 *)(void *)(mem + qbytes + kbytes + vbytes);
  uintptr_t at = (uintptr_t)(mem + qbytes + kbytes + vbytes + mbytes + obytes);
  float *scratch = (float *)(void *)((at + 63) & ~(uintptr_t)63);
  uint64_t rnd = 0x9e3779b97f4a7c15ull;
#define RND()                                                                                      \
  (rnd = rnd * 6364136223846793005ull + 1442695040888963407ull,                                    \
   (float)((double)(rnd >> 40) / (double)(1 << 24) - 0.5))
  for (int64_t i = 0; i < n * dk; i++)
    q[i] = 4 * RND(), k[i] = (_Float16)(4 * RND());
  for (int64_t i = 0; i < n * dv; i++)
    v[i] = (_Float16)(2 * RND());
  for (int64_t i = 0; i < n; i++) /* causal, a key in 16 left out */
    for (int64_t j = 0; j < n; j++)
      mask[i * n + j] = j <= i && (RND() > -0.4375f || j == i) ? (_Float16)0 : (_Float16)-INFINITY;
#undef RND
  jt_fa_args_t a = {q, (const uint16_t *)k, (const uint16_t *)v, (const uint16_t *)mask, out, dk,
                    dk, dv, n, dv, n, 0, n < 24 ? n : 24, 1.0f / sqrtf((float)dk)};
  ((jt_fa_fn)fn)(&a, scratch);
  a.i0 = n > 40 ? n - 40 : 0, a.i1 = n;
  ((jt_fa_fn)fn)(&a, scratch);
  ag_mm_check_t c = {0};
  for (int64_t i = 0; i < n; i++) {
    if (i >= (n < 24 ? n : 24) && i < a.i0)
      continue;
    double b;
    ag_fa_exact(&a, (int)dk, (int)dv, i, exact, &b);
    ag_fa_tally(&c, out + i * dv, exact, (int)dv, b);
  }
  munmap(mem, all);
  free(exact);
  *worst = c.worst, *bound = c.bound;
  return c.worst <= c.bound;
}
