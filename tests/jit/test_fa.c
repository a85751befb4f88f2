/* SPDX-License-Identifier: MIT */
/* The FLASH_ATTN_EXT kernel kind (jit/fa.c through its row in jit/kind.c): one head's attention
 * over query rows [i0, i1), f32 queries, f16 keys, values and mask, against a double-precision
 * softmax within the bound of its float steps; rows outside [i0, i1) and the padding of each
 * output row left bit for bit as they were (NaN sentinels). The f16 kernel (fa 2, ggml's
 * few-row steps) bit for bit against the agent's C reference of those steps. */
#include "helpers.h"

#include "agent/hosts/ggml_verify.h"
#include "jit/fa.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const jt_api_t *jit;
static uint64_t rng = 4242;

static void setup(void) { jit = jt_test_module(); }

TestSuite(fa, .init = setup, .timeout = 600);

static double rnd(void) { return (double)jt_test_rnd(&rng, 2001) / 1000.0 - 1.0; }

static uint16_t to_half(double x)
{
  _Float16 h = (_Float16)x;
  uint16_t u;
  memcpy(&u, &h, sizeof u);
  return u;
}

static double from_half(uint16_t u)
{
  _Float16 h;
  memcpy(&h, &u, sizeof h);
  return (double)h;
}

/* Compiles the kernel for dk, dv (on isa, 0: the host's), runs rows [i0, i1) of n query rows
 * against n_kv keys under a causal mask (row i sees keys up to i + n_kv - n) with holes, a
 * small bias and one row masked whole, and checks every output; returns the worst error over
 * its bound (<= 1 passes). */
static double run(int isa, int dk, int dv, int n, int n_kv, int i0, int i1)
{
  jt_gemm_t g = jt_fa_spec(1, dk, dv, n, isa);
  cr_assert(jt_gemm_supported(&g), "dk %d dv %d", dk, dv);
  char err[512] = "";
  jt_gemm_fn fn;
  size_t size, obj_len;
  void *obj;
  cr_assert_eq(jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err), 0, "%s", err);
  cr_assert_gt(size, 0);
  cr_assert_not_null(obj, "an object to store");
  free(obj);
  int qs = dk + 3, ks = dk + 6, vs = dv + 2, ms = n_kv + 5, os = dv + 4; /* strided, as ggml's */
  float *q = malloc(sizeof *q * (size_t)n * qs), *out = malloc(sizeof *out * (size_t)n * os);
  uint16_t *k = malloc(2 * (size_t)n_kv * ks), *v = malloc(2 * (size_t)n_kv * vs);
  uint16_t *mask = malloc(2 * (size_t)n * ms);
  float *scratch = aligned_alloc(64, (JT_FA_SCRATCH_FLOATS(dk, dv, n_kv) * 4 + 63) / 64 * 64);
  for (size_t i = 0; i < (size_t)n * qs; i++)
    q[i] = (float)(2 * rnd());
  for (size_t i = 0; i < (size_t)n_kv * ks; i++)
    k[i] = to_half(2 * rnd());
  for (size_t i = 0; i < (size_t)n_kv * vs; i++)
    v[i] = to_half(rnd());
  for (int i = 0; i < n; i++)
    for (int j = 0; j < ms; j++) {
      int seen = j <= i + n_kv - n && j < n_kv && jt_test_rnd(&rng, 11) != 0 && i != n / 2;
      mask[(size_t)i * ms + j] = to_half(seen ? 0.25 * rnd() : -INFINITY);
    }
  for (size_t i = 0; i < (size_t)n * os; i++)
    out[i] = NAN;
  float scale = 1.0f / sqrtf((float)dk);
  jt_fa_args_t a = {q, k, v, mask, out, qs, ks, vs, ms, os, n_kv, i0, i1, scale};
  ((jt_fa_fn)(void (*)(void))fn)(&a, scratch);
  double worst = 0, eps = FLT_EPSILON;
  double *s = malloc(sizeof *s * (size_t)n_kv);
  for (int i = 0; i < n; i++) {
    const float *o = out + (size_t)i * os;
    if (i < i0 || i >= i1) {
      for (int d = 0; d < os; d++)
        cr_assert(isnan(o[d]), "row %d outside [%d, %d) written", i, i0, i1);
      continue;
    }
    for (int d = dv; d < os; d++)
      cr_assert(isnan(o[d]), "row %d's padding written", i);
    double mx = -INFINITY, sum = 0, qk = 0, vmax = 0;
    for (int j = 0; j < n_kv; j++) {
      double m = from_half(mask[(size_t)i * ms + j]), dot = 0, mag = 0;
      for (int d = 0; d < dk; d++) {
        double t = q[(size_t)i * qs + d] * from_half(k[(size_t)j * ks + d]);
        dot += t, mag += fabs(t);
      }
      s[j] = m == -INFINITY ? -INFINITY : dot * scale + m;
      if (s[j] != -INFINITY) {
        qk = mag > qk ? mag : qk;
        for (int d = 0; d < dv; d++)
          vmax = fmax(vmax, fabs(from_half(v[(size_t)j * vs + d])));
      }
      mx = s[j] > mx ? s[j] : mx;
    }
    for (int j = 0; j < n_kv; j++)
      sum += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
    /* each score's float sum of dk products and the rounding of e^x shift its weight by a
     * relative (dk scale qk + 8) eps; the sums over n_kv keys add (n_kv + 4) eps */
    double bound = (2 * (dk * scale * qk + 8) + n_kv + 4) * eps * vmax + FLT_MIN;
    for (int d = 0; d < dv; d++) {
      double exact = 0;
      for (int j = 0; j < n_kv && sum > 0; j++)
        if (s[j] != -INFINITY)
          exact += exp(s[j] - mx) * from_half(v[(size_t)j * vs + d]);
      exact = sum > 0 ? exact / sum : 0;
      double e = fabs(o[d] - exact) / bound;
      cr_assert(isfinite(e), "row %d, %d: %g, exact %g", i, d, o[d], exact);
      worst = e > worst ? e : worst;
    }
  }
  free(s), free(q), free(out), free(k), free(v), free(mask), free(scratch);
  cr_assert_eq(jit->release(fn, err, sizeof err), 0, "%s", err);
  return worst;
}

Test(fa, causal_prefill_rows_against_the_reference)
{
  static const int shapes[][6] = {/* dk dv n n_kv i0 i1 */
                                  {64, 64, 100, 100, 0, 100}, {64, 64, 130, 130, 7, 121},
                                  {64, 64, 40, 77, 3, 40},    {128, 128, 70, 70, 0, 70},
                                  {80, 48, 33, 200, 1, 32},   {64, 64, 16, 16, 0, 16}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const int *p = shapes[i];
    double w = run(0, p[0], p[1], p[2], p[3], p[4], p[5]);
    cr_assert_leq(w, 1.0, "dk %d dv %d n %d n_kv %d rows [%d, %d): off by %.3g bounds", p[0], p[1],
                  p[2], p[3], p[4], p[5], w);
  }
}

Test(fa, narrower_isa_kernels_are_correct_too)
{
  JT_TEST_NEEDS(JT_ISA_AVX2);
  cr_assert_leq(run(JT_ISA_AVX2, 64, 64, 90, 90, 2, 90), 1.0);
  cr_assert_leq(run(JT_ISA_AVX2, 80, 48, 20, 37, 0, 20), 1.0);
}

Test(fa, the_kind_row_names_and_limits_it)
{
  jt_gemm_t g = jt_fa_spec(1, 64, 64, 512, 0);
  cr_assert_eq(jt_kind_of(&g), JT_KIND_FA);
  cr_assert_str_eq(jt_kind(&g)->name, "fa");
  cr_assert_eq(jt_kind(&g)->abi, JT_ABI_FA);
  char name[128];
  jit->gemm_name(&g, name, sizeof name);
  static const char want[] = "opjit_flash_attn_dk64_dv64_n512_";
  cr_assert(strncmp(name, want, sizeof want - 1) == 0, "%s", name);
  jt_gemm_t bad = g;
  bad.k = 63; /* the keys are gathered two halves at a time */
  cr_assert_not(jt_gemm_supported(&bad));
  bad = g, bad.m = 40; /* not whole 512-bit vectors */
  cr_assert_not(jt_gemm_supported(&bad));
  bad = g, bad.k = JT_FA_MAX_D + 2;
  cr_assert_not(jt_gemm_supported(&bad));
}

/* A few-row attention's layout: H query heads grouped by group on their K/V heads, head 0 the
 * head0-th of its group (a thread's share), n query rows of which [i0, i1) are computed, keys
 * [c0, c1) of n_kv, queries up to qmag. */
typedef struct fa16_case_s {
  int H, group, head0, n, n_kv, i0, i1, c0, c1;
  double qmag;
} fa16_case_t;

/* The f16 kernel for dk, dv on isa (0: the host's) over case t (the heads side by side in
 * llama's cache layout, rows padded), under a mask with holes and one row masked whole: every
 * accumulator, maximum and sum bit for bit as ag_fa16_ref's in the kernel's lanes; the other
 * rows and the paddings left as they were (NaN). */
static void run16(int isa, int dk, int dv, fa16_case_t t)
{
  int H = t.H, n = t.n, n_kv = t.n_kv, i0 = t.i0, i1 = t.i1;
  int kvh = (t.head0 + H - 1) / t.group - t.head0 / t.group + 1; /* the K/V heads read */
  jt_gemm_t g = jt_fa_spec(2, dk, dv, n, isa);
  cr_assert(jt_gemm_supported(&g), "dk %d dv %d", dk, dv);
  char err[512] = "";
  jt_gemm_fn fn;
  size_t size, obj_len;
  void *obj;
  cr_assert_eq(jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err), 0, "%s", err);
  free(obj);
  int lanes = isa == JT_ISA_AVX2 || !jt_test_cpu_has(JT_ISA_AVX512) ? 8 : 16;
  int qs = H * dk + 5, ks = kvh * dk + 8, vs = kvh * dv + 16, ms = n_kv + 3, os = H * dv + 4;
  float *q = malloc(sizeof *q * (size_t)n * qs), *out = malloc(sizeof *out * (size_t)n * os * 2);
  float *st = malloc(sizeof *st * (size_t)n * H * 4);
  uint16_t *k = malloc(2 * (size_t)n_kv * ks), *v = malloc(2 * (size_t)n_kv * vs);
  uint16_t *mask = malloc(2 * (size_t)n * ms);
  for (size_t i = 0; i < (size_t)n * qs; i++)
    q[i] = (float)(t.qmag * rnd());
  for (size_t i = 0; i < (size_t)n_kv * ks; i++)
    k[i] = to_half(2 * rnd());
  for (size_t i = 0; i < (size_t)n_kv * vs; i++)
    v[i] = to_half(rnd());
  for (int i = 0; i < n; i++)
    for (int j = 0; j < ms; j++) {
      int seen = jt_test_rnd(&rng, 9) != 0 && i != (i0 + i1) / 2;
      mask[(size_t)i * ms + j] = to_half(seen ? 0.25 * rnd() : -INFINITY);
    }
  for (size_t i = 0; i < (size_t)n * os * 2; i++)
    out[i] = NAN;
  jt_fa_args_t a = {.q = q,
                    .k = k,
                    .v = v,
                    .mask = mask,
                    .out = out,
                    .q_stride = qs,
                    .k_stride = ks,
                    .v_stride = vs,
                    .mask_stride = ms,
                    .out_stride = os,
                    .n_kv = n_kv,
                    .i0 = i0,
                    .i1 = i1,
                    .scale = 1.0f / sqrtf((float)dk),
                    .c0 = t.c0,
                    .c1 = t.c1,
                    .heads = H,
                    .q_head = dk,
                    .k_head = dk,
                    .v_head = dv,
                    .out_head = dv,
                    .ms = st,
                    .group = t.group,
                    .head0 = t.head0};
  ((jt_fa_fn)(void (*)(void))fn)(&a, NULL);
  jt_fa_args_t r = a;
  r.out = out + (size_t)n * os, r.ms = st + (size_t)n * H * 2;
  ag_fa16_ref(&r, dk, dv, lanes);
  for (int i = 0; i < n; i++)
    for (int d = 0; d < os; d++) {
      float got = out[(size_t)i * os + d], want = r.out[(size_t)i * os + d];
      if (i < i0 || i >= i1 || d >= H * dv)
        cr_assert(isnan(got), "row %d, %d outside the rows and heads written", i, d);
      else
        cr_assert(memcmp(&got, &want, sizeof got) == 0, "row %d head %d, %d: %a, reference %a", i,
                  d / dv, d % dv, got, want);
    }
  for (int u = 0; u < (i1 - i0) * H * 2; u++)
    cr_assert(memcmp(st + u, r.ms + u, sizeof *st) == 0, "%s of row %d head %d: %a, reference %a",
              u % 2 ? "sum" : "maximum", i0 + u / (2 * H), u / 2 % H, st[u], r.ms[u]);
  free(q), free(out), free(st), free(k), free(v), free(mask);
  cr_assert_eq(jit->release(fn, err, sizeof err), 0, "%s", err);
}

/* The cases every f16 kernel runs: decode's and a few rows', K/V heads of one query head and
 * grouped (whole groups, a share from inside one, groups narrower than a block). */
static void run16_cases(int isa, int dk, int dv)
{
  static const fa16_case_t cases[] = {
      {6, 1, 0, 1, 700, 0, 1, 0, 700, 2},   /* decode, a thread's heads, one chunk */
      {6, 1, 0, 1, 700, 0, 1, 350, 700, 2}, /* its second chunk of two */
      {13, 1, 0, 1, 300, 0, 1, 0, 300, 2},  /* heads past a block */
      {3, 1, 0, 12, 300, 2, 11, 5, 290, 2}, /* a few rows */
      {8, 4, 0, 1, 300, 0, 1, 0, 300, 2},   /* GQA: 2 K/V heads of 4 (Llama 3, Mistral) */
      {7, 4, 2, 5, 200, 0, 5, 3, 190, 2},   /* from the third of a group, 5 rows */
      {14, 7, 0, 2, 150, 0, 2, 0, 150, 2},  /* groups of 7 (Qwen2.5 7B): a block left half */
      {6, 2, 1, 3, 120, 1, 3, 0, 120, 2},   /* groups of 2 (Gemma 2) from a group's second */
      {5, 5, 0, 1, 100, 0, 1, 0, 100, 40},  /* scores far apart: weights underflow to 0 */
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
    run16(isa, dk, dv, cases[c]);
}

Test(fa, f16_kernels_take_ggml_s_few_row_steps)
{
  run16_cases(0, 64, 64);
  run16_cases(0, 128, 128); /* Llama 3, Qwen, Mistral's heads */
  run16_cases(0, 128, 64);  /* a DK of two of ggml's steps */
  run16_cases(0, 64, 256);  /* a DV whose accumulators fill the registers */
}

Test(fa, narrower_isa_f16_kernels_take_ggml_s_steps_too)
{
  JT_TEST_NEEDS(JT_ISA_AVX2);
  run16_cases(JT_ISA_AVX2, 64, 64);
  run16_cases(JT_ISA_AVX2, 128, 128);
}

Test(fa, the_f16_kernel_has_a_name_and_limits_of_its_own)
{
  jt_gemm_t g = jt_fa_spec(2, 64, 64, 12, 0);
  cr_assert_eq(jt_kind_of(&g), JT_KIND_FA);
  char name[128];
  jit->gemm_name(&g, name, sizeof name);
  static const char want[] = "opjit_flash_attn16_dk64_dv64_"; /* one kernel for any rows */
  cr_assert(strncmp(name, want, sizeof want - 1) == 0, "%s", name);
  cr_assert(strstr(name, "_n") == NULL, "%s", name);
  jt_gemm_t bad = g;
  bad.k = 80; /* not whole steps of ggml's dot product (4 vectors of 16) */
  cr_assert_not(jt_gemm_supported(&bad));
  bad = g, bad.m = 40;
  cr_assert_not(jt_gemm_supported(&bad));
}
