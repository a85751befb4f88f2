/* SPDX-License-Identifier: MIT */
/* bench_fa: a prompt's attention, ggml's own FLASH_ATTN_EXT node against the JIT's fa kernel,
 * interleaved in one process on one thread. ggml's CPU backend (the variant ggml loads for this
 * CPU, from llama.cpp's shipped libraries) computes a graph of one FLASH_ATTN_EXT node, f32 Q,
 * f16 K, V and causal mask, as llama's prefill has it (DK = DV = 64, 12 heads); the kernel
 * (libopjit-jit.so, compiled here) computes the same heads from the same tensors, head by head
 * as the agent's custom node does. Each round times both, in an order that reverses every
 * round; the table gives the medians of each side's ms and of the per-round ratios ggml/opjit
 * (+- half their interquartile range), and the largest difference between their outputs.
 * Then decode's: one query row against 256 and 768 keys, ggml's node against the f16 kernel
 * (fa 2) over every head in one call, for heads of 64 (12), of 128 (32, on 32 or on 8 K/V
 * heads: Llama 3's GQA) and of 256 (16 on 8: Gemma 2's), under AVX-512 and AVX2 (ggml's
 * haswell variant against the kernel forced to AVX2, as OPJIT_ISA=avx2 has it), with ggml's
 * overhead of a graph compute beside.
 *   bench_fa [rounds [prompt ...]]   (default 15 rounds; prompts 128 512 1024) */
#define _GNU_SOURCE
#include "bench.h"

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "jit/fa.h"
#include "jit/jit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 64
#define DK 64
#define HEADS 12


/* Medians of ggml's ms, the kernel's and their ratios, printed with the outputs' largest
 * difference. */
static void report(int n, const double *tg, const double *tk, const double *ratio, int rounds,
                   const float *mine, const float *theirs, size_t onum, const char *label,
                   const char *name)
{
  double diff = 0, mag = 0;
  for (size_t i = 0; i < onum; i++) {
    double d = fabs((double)mine[i] - theirs[i]);
    diff = isnan(d) ? INFINITY : fmax(diff, d);
    mag = fmax(mag, fabs((double)theirs[i]));
  }
  double mg, sg, mk, sk, mr, sr;
  bn_stat(tg, (size_t)rounds, &mg, &sg);
  bn_stat(tk, (size_t)rounds, &mk, &sk);
  bn_stat(ratio, (size_t)rounds, &mr, &sr);
  printf("%s%6d %10.3f ms %10.3f ms %8.2f +- %.2f   %.3g (of %.3g)   %s\n", label, n, mg, mk, mr,
         sr, diff, mag, name);
}

/* The operands from one fixed random sequence: q[0..nq) in [-2, 2), k[0..nkv) in [-2, 2) and
 * v[0..nkv) in [-0.5, 0.5) (nq <= nkv), the same for every run and both timed sides. */
static void fill(float *q, size_t nq, ggml_fp16_t *k, ggml_fp16_t *v, size_t nkv)
{
  uint64_t rng = 99;
  for (size_t i = 0; i < nkv; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    if (i < nq)
      q[i] = (float)((double)(rng >> 40) / (1 << 24) - 0.5) * 4;
    k[i] = ggml_fp32_to_fp16((float)((double)((rng >> 20) & 0xfffff) / (1 << 20) - 0.5) * 4);
    v[i] = ggml_fp32_to_fp16((float)((double)(rng & 0xfffff) / (1 << 20) - 0.5));
  }
}

/* The kernel of g compiled into *kern; 0 or -1. */
static int compile(const jt_api_t *jit, jt_gemm_t *g, jt_fa_fn *kern, jt_gemm_fn *fn, char *name,
                   size_t len)
{
  size_t size, obj_len;
  void *obj;
  char err[512] = "";
  if (jit->gemm(g, fn, &size, &obj, &obj_len, err, sizeof err)) {
    fprintf(stderr, "bench_fa: cannot compile the kernel: %s\n", err);
    return -1;
  }
  free(obj);
  jit->gemm_name(g, name, len);
  jt_gemm_fn f = *fn;
  *kern = (jt_fa_fn)(void (*)(void))f;
  return 0;
}

/* A decode row of the table: DK = DV, query heads on K/V heads, the ISA of both sides. */
typedef struct dcfg_s {
  int dk, heads, kv_heads, isa; /* JT_ISA_AVX512 or JT_ISA_AVX2 */
} dcfg_t;

/* Decode's attention: one query row against n_kv keys in llama's cache layout (a key's K/V
 * heads side by side), ggml's node (one thread: one chunk of keys) against the f16 kernel over
 * every head in one call as the agent's node makes it (the K/V heads grouped, normalised as ggml
 * normalises). be is ggml's CPU backend for c's ISA. ggml's side is a graph compute, which
 * costs more than its node: a third side times the same graph with a one-float node in its
 * place, and its median is printed as ggml's overhead; 0 or -1. */
static int decode(const jt_api_t *jit, ggml_backend_t be, dcfg_t c, int n, int rounds)
{
  int dk = c.dk, nh = c.heads, nkvh = c.kv_heads;
  struct ggml_init_params ip = {ggml_tensor_overhead() * 12 + 2 * ggml_graph_overhead() + 4096,
                                NULL, true};
  struct ggml_context *ctx = ggml_init(ip);
  struct ggml_tensor *q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, dk, 1, nh);
  struct ggml_tensor *kc = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, dk * nkvh, n);
  struct ggml_tensor *vc = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, dk * nkvh, n);
  struct ggml_tensor *k = ggml_view_3d(ctx, kc, dk, n, nkvh, kc->nb[1], dk * 2, 0);
  struct ggml_tensor *v = ggml_view_3d(ctx, vc, dk, n, nkvh, vc->nb[1], dk * 2, 0);
  struct ggml_tensor *mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n, 1);
  struct ggml_tensor *one = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1);
  float scale = 1.0f / sqrtf((float)dk);
  struct ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0.0f, 0.0f);
  struct ggml_cgraph *gf = ggml_new_graph(ctx), *empty = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);
  ggml_build_forward_expand(empty, ggml_scale(ctx, one, 1.0f));
  ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, be);
  if (!buf) {
    fprintf(stderr, "bench_fa: cannot allocate the tensors\n");
    return -1;
  }
  size_t nq = (size_t)dk * nh, nkv = (size_t)dk * nkvh * n;
  float *qf = malloc(nq * sizeof *qf), zero = 0;
  ggml_fp16_t *kh = malloc(nkv * sizeof *kh), *vh = malloc(nkv * sizeof *vh);
  ggml_fp16_t *mh = malloc((size_t)n * sizeof *mh);
  fill(qf, nq, kh, vh, nkv);
  for (int j = 0; j < n; j++) /* the cache's last 32 cells empty, as llama's padding leaves them */
    mh[j] = ggml_fp32_to_fp16(j < n - 32 ? 0.0f : -INFINITY);
  ggml_backend_tensor_set(q, qf, 0, nq * sizeof *qf);
  ggml_backend_tensor_set(kc, kh, 0, nkv * sizeof *kh);
  ggml_backend_tensor_set(vc, vh, 0, nkv * sizeof *vh);
  ggml_backend_tensor_set(mask, mh, 0, (size_t)n * sizeof *mh);
  ggml_backend_tensor_set(one, &zero, 0, sizeof zero);
  free(qf), free(kh), free(vh), free(mh);

  jt_gemm_t g = jt_fa_spec(2, dk, dk, 1, c.isa);
  jt_fa_fn kern;
  jt_gemm_fn fn;
  char name[128], err[512];
  if (compile(jit, &g, &kern, &fn, name, sizeof name))
    return -1;
  float *mine = malloc(nq * sizeof *mine), *theirs = malloc(nq * sizeof *theirs);
  float *ms = malloc(2 * (size_t)nh * sizeof *ms);
  double tg[MAXR], tk[MAXR], te[MAXR], ratio[MAXR];
  for (int r = 0; r < rounds; r++) {
    for (int side = 0; side < 3; side++) {
      int which = (side + r) % 3;
      uint64_t t0 = bn_now_ns();
      if (which == 0) {
        jt_fa_args_t a = {.q = q->data,
                          .k = kc->data,
                          .v = vc->data,
                          .mask = mask->data,
                          .out = mine,
                          .q_stride = dk * nh,
                          .k_stride = dk * nkvh,
                          .v_stride = dk * nkvh,
                          .mask_stride = n,
                          .out_stride = dk * nh,
                          .n_kv = n,
                          .i1 = 1,
                          .scale = scale,
                          .c1 = n,
                          .heads = nh,
                          .q_head = dk,
                          .k_head = dk,
                          .v_head = dk,
                          .out_head = dk,
                          .ms = ms,
                          .group = nh / nkvh};
        kern(&a, NULL);
        for (int h = 0; h < nh; h++) {
          float inv = ms[2 * h + 1] == 0 ? 0 : 1 / ms[2 * h + 1];
          for (int d = 0; d < dk; d++)
            mine[h * dk + d] *= inv;
        }
        tk[r] = (double)(bn_now_ns() - t0) / 1e6;
      } else if (which == 1) {
        ggml_backend_graph_compute(be, gf);
        tg[r] = (double)(bn_now_ns() - t0) / 1e6;
      } else {
        ggml_backend_graph_compute(be, empty);
        te[r] = (double)(bn_now_ns() - t0) / 1e6;
      }
    }
    ratio[r] = tg[r] / tk[r];
  }
  ggml_backend_tensor_get(out, theirs, 0, nq * sizeof *theirs);
  char label[64];
  double me, se;
  bn_stat(te, (size_t)rounds, &me, &se);
  snprintf(label, sizeof label, "%3d/%-2d %4d %s  %.4f ms", nh, nkvh, dk,
           c.isa == JT_ISA_AVX2 ? "avx2  " : "avx512", me);
  report(n, tg, tk, ratio, rounds, mine, theirs, nq, label, name);
  free(mine), free(theirs), free(ms);
  jit->release(fn, err, sizeof err);
  ggml_backend_buffer_free(buf);
  ggml_free(ctx);
  return 0;
}

/* One prompt of n tokens: builds the node, compiles the kernel, times rounds; 0 or -1. */
static int prompt(const jt_api_t *jit, ggml_backend_t be, int n, int rounds)
{
  struct ggml_init_params ip = {ggml_tensor_overhead() * 8 + ggml_graph_overhead() + 4096, NULL,
                                true};
  struct ggml_context *ctx = ggml_init(ip);
  struct ggml_tensor *q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, DK, n, HEADS);
  struct ggml_tensor *k = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, DK, n, HEADS);
  struct ggml_tensor *v = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, DK, n, HEADS);
  struct ggml_tensor *mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n, n);
  float scale = 1.0f / sqrtf((float)DK);
  struct ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0.0f, 0.0f);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);
  ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, be);
  if (!buf) {
    fprintf(stderr, "bench_fa: cannot allocate the tensors\n");
    return -1;
  }
  size_t nq = (size_t)DK * n * HEADS;
  float *qf = malloc(nq * sizeof *qf);
  ggml_fp16_t *kh = malloc(nq * sizeof *kh), *vh = malloc(nq * sizeof *vh);
  ggml_fp16_t *mh = malloc((size_t)n * n * sizeof *mh);
  fill(qf, nq, kh, vh, nq);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      mh[(size_t)i * n + j] = ggml_fp32_to_fp16(j <= i ? 0.0f : -INFINITY);
  ggml_backend_tensor_set(q, qf, 0, nq * sizeof *qf);
  ggml_backend_tensor_set(k, kh, 0, nq * sizeof *kh);
  ggml_backend_tensor_set(v, vh, 0, nq * sizeof *vh);
  ggml_backend_tensor_set(mask, mh, 0, (size_t)n * n * sizeof *mh);
  free(qf), free(kh), free(vh), free(mh);

  jt_gemm_t g = jt_fa_spec(1, DK, DK, n, 0);
  jt_fa_fn kern;
  jt_gemm_fn fn;
  char name[128], err[512];
  if (compile(jit, &g, &kern, &fn, name, sizeof name))
    return -1;
  float *scratch = aligned_alloc(64, (JT_FA_SCRATCH_FLOATS(DK, DK, n) * 4 + 63) / 64 * 64);
  size_t onum = (size_t)DK * HEADS * n;
  float *mine = malloc(onum * sizeof *mine), *theirs = malloc(onum * sizeof *theirs);
  double tg[MAXR], tk[MAXR], ratio[MAXR];
  for (int r = 0; r < rounds; r++) {
    for (int side = 0; side < 2; side++) {
      int kernel = (side + r) % 2;
      uint64_t t0 = bn_now_ns();
      if (kernel) {
        for (int h = 0; h < HEADS; h++) {
          jt_fa_args_t a = {(const float *)q->data + (size_t)h * DK * n,
                            (const uint16_t *)k->data + (size_t)h * DK * n,
                            (const uint16_t *)v->data + (size_t)h * DK * n,
                            (const uint16_t *)mask->data,
                            mine + (size_t)h * DK,
                            DK,
                            DK,
                            DK,
                            n,
                            (int64_t)DK * HEADS,
                            n,
                            0,
                            n,
                            scale};
          kern(&a, scratch);
        }
        tk[r] = (double)(bn_now_ns() - t0) / 1e6;
      } else {
        ggml_backend_graph_compute(be, gf);
        tg[r] = (double)(bn_now_ns() - t0) / 1e6;
      }
    }
    ratio[r] = tg[r] / tk[r];
  }
  ggml_backend_tensor_get(out, theirs, 0, onum * sizeof *theirs);
  report(n, tg, tk, ratio, rounds, mine, theirs, onum, "", name);
  free(mine), free(theirs), free(scratch);
  jit->release(fn, err, sizeof err);
  ggml_backend_buffer_free(buf);
  ggml_free(ctx);
  return 0;
}

/* ggml's backend be on one thread. */
static void one_thread(ggml_backend_t be)
{
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(ggml_backend_get_device(be));
  ggml_backend_set_n_threads_t threads =
      (ggml_backend_set_n_threads_t)ggml_backend_reg_get_proc_address(reg,
                                                                      "ggml_backend_set_n_threads");
  if (threads)
    threads(be, 1);
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 15;
  if (rounds < 1 || rounds > MAXR) {
    fprintf(stderr, "usage: bench_fa [rounds (1-%d) [prompt ...]]\n", MAXR);
    return 2;
  }
  const jt_api_t *jit = bn_load_jit(OPJIT_JIT_MODULE_PATH, "bench_fa");
  if (!jit)
    return 1;
  ggml_backend_load_all_from_path(OPJIT_LLAMA_BINS);
  ggml_backend_t be = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
  if (!be) {
    fprintf(stderr, "bench_fa: no CPU backend in %s\n", OPJIT_LLAMA_BINS);
    return 1;
  }
  one_thread(be);
  printf("bench_fa: FLASH_ATTN_EXT, %d heads of %d, f32 Q, f16 K V and causal mask, one "
         "thread; %d rounds, medians\n\n",
         HEADS, DK, rounds);
  printf("%6s %13s %13s %19s   %s\n", "prompt", "ggml", "opjit", "ggml/opjit", "max |diff|");
  int rc = 0;
  static const int def[] = {128, 512, 1024};
  int np = argc > 2 ? argc - 2 : 3;
  for (int i = 0; i < np && !rc; i++)
    rc = prompt(jit, be, argc > 2 ? atoi(argv[2 + i]) : def[i], rounds);
  /* ggml's AVX2 variant (its haswell build) for the AVX2 rows, as OPJIT_ISA=avx2 has the agent */
  ggml_backend_reg_t hreg = ggml_backend_load(OPJIT_LLAMA_BINS "/libggml-cpu-haswell.so");
  ggml_backend_t avx2 = hreg && ggml_backend_reg_dev_count(hreg)
                            ? ggml_backend_dev_init(ggml_backend_reg_dev_get(hreg, 0), NULL)
                            : NULL;
  if (avx2)
    one_thread(avx2);
  printf("\ndecode: one query row, the keys in llama's cache layout (the last 32 masked), the f16 "
         "kernel;\nempty: ggml's graph compute of a one-float node, in ggml's time (the other "
         "sides interleaved)\n%-6s %-4s %-6s %9s %6s %13s %13s %19s   %s\n",
         "heads", "DK", "ISA", "empty", "n_kv", "ggml", "opjit", "ggml/opjit", "max |diff|");
  static const dcfg_t cfg[] = {{64, 12, 12, JT_ISA_AVX512}, {128, 32, 32, JT_ISA_AVX512},
                               {128, 32, 8, JT_ISA_AVX512}, {256, 16, 8, JT_ISA_AVX512},
                               {64, 12, 12, JT_ISA_AVX2},   {128, 32, 32, JT_ISA_AVX2},
                               {128, 32, 8, JT_ISA_AVX2}};
  static const int kv[] = {256, 768};
  for (size_t c = 0; c < sizeof cfg / sizeof *cfg && !rc; c++) {
    ggml_backend_t b = cfg[c].isa == JT_ISA_AVX2 ? avx2 : be;
    if (!b || cfg[c].isa > jit->host_isa()) {
      printf("%3d/%-2d %4d %s: %s\n", cfg[c].heads, cfg[c].kv_heads, cfg[c].dk,
             cfg[c].isa == JT_ISA_AVX2 ? "avx2  " : "avx512",
             b ? "this CPU cannot run it" : "no libggml-cpu-haswell.so");
      continue;
    }
    for (int i = 0; i < 2 && !rc; i++)
      rc = decode(jit, b, cfg[c], kv[i], rounds);
  }
  if (avx2)
    ggml_backend_free(avx2);
  ggml_backend_free(be);
  return rc ? 1 : 0;
}
