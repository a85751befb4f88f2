/* SPDX-License-Identifier: MIT */
/* bench_fa: a prompt's attention, ggml's own FLASH_ATTN_EXT node against the JIT's fa kernel,
 * interleaved in one process on one thread. ggml's CPU backend (the variant ggml loads for this
 * CPU, from llama.cpp's shipped libraries) computes a graph of one FLASH_ATTN_EXT node, f32 Q,
 * f16 K, V and causal mask, as llama's prefill has it (DK = DV = 64, 12 heads); the kernel
 * (libopjit-jit.so, compiled here) computes the same heads from the same tensors, head by head
 * as the agent's custom node does. Each round times both, in an order that reverses every
 * round; the table gives the medians of each side's ms and of the per-round ratios ggml/opjit
 * (+- half their interquartile range), and the largest difference between their outputs.
 * Then decode's: one query row against 256, 512 and 768 keys, ggml's node against the f16
 * kernel (fa 2).
 *   bench_fa [rounds [prompt ...]]   (default 15 rounds; prompts 128 512 1024) */
#define _GNU_SOURCE
#include "bench.h"

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "jit/jit.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 64
#define DK 64
#define HEADS 12

static const jt_api_t *load_jit(void)
{
  void *h = dlopen(OPJIT_JIT_MODULE_PATH, RTLD_NOW | RTLD_LOCAL);
  const jt_api_t *jit = h ? dlsym(h, JT_API_SYMBOL) : NULL;
  char err[512] = "";
  if (!jit || jit->abi != JT_API_ABI || jit->init(err, sizeof err)) {
    fprintf(stderr, "bench_fa: cannot load %s: %s\n", OPJIT_JIT_MODULE_PATH, h ? err : dlerror());
    return NULL;
  }
  return jit;
}

static void stat_of(const double *v, int n, double *med, double *spread)
{
  double a[MAXR], b[MAXR];
  memcpy(a, v, (size_t)n * sizeof *v);
  memcpy(b, v, (size_t)n * sizeof *v);
  *med = bn_median(a, (size_t)n);
  *spread = bn_half_iqr(b, (size_t)n);
}

/* Medians of ggml's ms, the kernel's and their ratios, printed with the outputs' largest
 * difference. */
static void report(int n, const double *tg, const double *tk, const double *ratio, int rounds,
                   const float *mine, const float *theirs, size_t onum, const char *name)
{
  double diff = 0, mag = 0;
  for (size_t i = 0; i < onum; i++) {
    double d = fabs((double)mine[i] - theirs[i]);
    diff = isnan(d) ? INFINITY : fmax(diff, d);
    mag = fmax(mag, fabs((double)theirs[i]));
  }
  double mg, sg, mk, sk, mr, sr;
  stat_of(tg, rounds, &mg, &sg);
  stat_of(tk, rounds, &mk, &sk);
  stat_of(ratio, rounds, &mr, &sr);
  printf("%6d %10.3f ms %10.3f ms %8.2f +- %.2f   %.3g (of %.3g)   %s\n", n, mg, mk, mr, sr, diff,
         mag, name);
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

/* Decode's attention: one query row against n_kv keys in llama's cache layout (a key's heads
 * side by side), ggml's node (one thread: one chunk of keys) against the f16 kernel head by
 * head, normalised as ggml normalises; 0 or -1. */
static int decode(const jt_api_t *jit, ggml_backend_t be, int n, int rounds)
{
  struct ggml_init_params ip = {ggml_tensor_overhead() * 10 + ggml_graph_overhead() + 4096, NULL,
                                true};
  struct ggml_context *ctx = ggml_init(ip);
  struct ggml_tensor *q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, DK, 1, HEADS);
  struct ggml_tensor *kc = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, DK * HEADS, n);
  struct ggml_tensor *vc = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, DK * HEADS, n);
  struct ggml_tensor *k = ggml_view_3d(ctx, kc, DK, n, HEADS, kc->nb[1], DK * 2, 0);
  struct ggml_tensor *v = ggml_view_3d(ctx, vc, DK, n, HEADS, vc->nb[1], DK * 2, 0);
  struct ggml_tensor *mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n, 1);
  float scale = 1.0f / sqrtf((float)DK);
  struct ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0.0f, 0.0f);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);
  ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, be);
  if (!buf) {
    fprintf(stderr, "bench_fa: cannot allocate the tensors\n");
    return -1;
  }
  size_t nkv = (size_t)DK * HEADS * n;
  float *qf = malloc((size_t)DK * HEADS * sizeof *qf);
  ggml_fp16_t *kh = malloc(nkv * sizeof *kh), *vh = malloc(nkv * sizeof *vh);
  ggml_fp16_t *mh = malloc((size_t)n * sizeof *mh);
  fill(qf, (size_t)DK * HEADS, kh, vh, nkv);
  for (int j = 0; j < n; j++) /* the cache's last 32 cells empty, as llama's padding leaves them */
    mh[j] = ggml_fp32_to_fp16(j < n - 32 ? 0.0f : -INFINITY);
  ggml_backend_tensor_set(q, qf, 0, (size_t)DK * HEADS * sizeof *qf);
  ggml_backend_tensor_set(kc, kh, 0, nkv * sizeof *kh);
  ggml_backend_tensor_set(vc, vh, 0, nkv * sizeof *vh);
  ggml_backend_tensor_set(mask, mh, 0, (size_t)n * sizeof *mh);
  free(qf), free(kh), free(vh), free(mh);

  jt_gemm_t g = {.fa = 2, .k = DK, .m = DK, .n = 1};
  jt_fa_fn kern;
  jt_gemm_fn fn;
  char name[128], err[512];
  if (compile(jit, &g, &kern, &fn, name, sizeof name))
    return -1;
  size_t onum = (size_t)DK * HEADS;
  float *mine = malloc(onum * sizeof *mine), *theirs = malloc(onum * sizeof *theirs), ms[2 * HEADS];
  double tg[MAXR], tk[MAXR], ratio[MAXR];
  for (int r = 0; r < rounds; r++) {
    for (int side = 0; side < 2; side++) {
      int kernel = (side + r) % 2;
      uint64_t t0 = bn_now_ns();
      if (kernel) {
        jt_fa_args_t a = {.q = q->data,
                          .k = kc->data,
                          .v = vc->data,
                          .mask = mask->data,
                          .out = mine,
                          .q_stride = DK * HEADS,
                          .k_stride = DK * HEADS,
                          .v_stride = DK * HEADS,
                          .mask_stride = n,
                          .out_stride = DK * HEADS,
                          .n_kv = n,
                          .i1 = 1,
                          .scale = scale,
                          .c1 = n,
                          .heads = HEADS,
                          .q_head = DK,
                          .k_head = DK,
                          .v_head = DK,
                          .out_head = DK,
                          .ms = ms};
        kern(&a, NULL);
        for (int h = 0; h < HEADS; h++) {
          float inv = ms[2 * h + 1] == 0 ? 0 : 1 / ms[2 * h + 1];
          for (int d = 0; d < DK; d++)
            mine[h * DK + d] *= inv;
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
  report(n, tg, tk, ratio, rounds, mine, theirs, onum, name);
  free(mine), free(theirs);
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

  jt_gemm_t g = {.fa = 1, .k = DK, .m = DK, .n = n};
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
  report(n, tg, tk, ratio, rounds, mine, theirs, onum, name);
  free(mine), free(theirs), free(scratch);
  jit->release(fn, err, sizeof err);
  ggml_backend_buffer_free(buf);
  ggml_free(ctx);
  return 0;
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 15;
  if (rounds < 1 || rounds > MAXR) {
    fprintf(stderr, "usage: bench_fa [rounds (1-%d) [prompt ...]]\n", MAXR);
    return 2;
  }
  const jt_api_t *jit = load_jit();
  if (!jit)
    return 1;
  ggml_backend_load_all_from_path(OPJIT_LLAMA_BINS);
  ggml_backend_t be = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
  if (!be) {
    fprintf(stderr, "bench_fa: no CPU backend in %s\n", OPJIT_LLAMA_BINS);
    return 1;
  }
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(ggml_backend_get_device(be));
  ggml_backend_set_n_threads_t threads =
      (ggml_backend_set_n_threads_t)ggml_backend_reg_get_proc_address(reg,
                                                                      "ggml_backend_set_n_threads");
  if (threads)
    threads(be, 1);
  printf("bench_fa: FLASH_ATTN_EXT, %d heads of %d, f32 Q, f16 K V and causal mask, one "
         "thread; %d rounds, medians\n\n",
         HEADS, DK, rounds);
  printf("%6s %13s %13s %19s   %s\n", "prompt", "ggml", "opjit", "ggml/opjit", "max |diff|");
  int rc = 0;
  static const int def[] = {128, 512, 1024};
  int np = argc > 2 ? argc - 2 : 3;
  for (int i = 0; i < np && !rc; i++)
    rc = prompt(jit, be, argc > 2 ? atoi(argv[2 + i]) : def[i], rounds);
  printf("\ndecode: one query row, the keys in llama's cache layout (the last 32 masked), the f16 "
         "kernel\n%6s %13s %13s %19s   %s\n",
         "n_kv", "ggml", "opjit", "ggml/opjit", "max |diff|");
  static const int kv[] = {256, 512, 768};
  for (int i = 0; i < 3 && !rc; i++)
    rc = decode(jit, be, kv[i], rounds);
  ggml_backend_free(be);
  return rc ? 1 : 0;
}
