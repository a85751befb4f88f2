/* SPDX-License-Identifier: MIT */
/* bench_mv: decode's matrix-vector products, ggml's own MUL_MAT nodes against the JIT's
 * one-column kernel (jt_gemm_t mm, n = 1) run as the agent runs it: a custom node that gives
 * each of ggml's threads its share of the rows in whole blocks of JT_MM_MR (ggml_kernels.c's
 * mm_share). Both sides are graphs of L nodes, each with weights of its own (as many bytes as
 * decode streams: more than the caches hold), computed by ggml's CPU backend (the variant it
 * loads for this CPU) with the same threads and the same barrier after every node; only the
 * nodes' work differs. Each round computes both graphs in an order that reverses every round;
 * the table gives the medians of each side's time per node and of the per-round ratios
 * ggml/opjit (+- half their interquartile range), per thread count, and the largest
 * difference between the outputs. The shapes are the products of bench_ggml's model (768 wide,
 * FFN 2048, vocabulary 16000) in f32 and f16; the first line names the CPU variant ggml loaded.
 *   bench_mv [rounds [threads ...]]   (default 15 rounds; threads 1 2) */
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
#define STREAM_BYTES (512u << 20) /* the weights of one graph: more than the caches hold */


typedef struct {
  jt_mm_fn k;
  struct ggml_tensor *w, *x;
  float *scratch[64]; /* one per thread */
} mv_node_t;

/* The custom node's work on thread ith of nth: the agent's split (ggml_kernels.c, mm_share). */
static void mv_compute(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
  mv_node_t *n = ud;
  int64_t m = dst->ne[0];
  int64_t per = ((m + nth - 1) / nth + JT_MM_MR - 1) / JT_MM_MR * JT_MM_MR;
  int64_t r0 = per * ith, r1 = r0 + per < m ? r0 + per : m;
  if (r0 < r1)
    n->k(n->w->data, n->x->data, dst->data, r0, r1, n->scratch[ith]);
}

/* One shape: K x M weights (f16 when w16), L nodes, timed at each thread count; 0 or -1. */
static int shape(const jt_api_t *jit, ggml_backend_t be, ggml_backend_set_n_threads_t threads,
                 int k, int m, int w16, const int *nths, int nn, int rounds)
{
  size_t wbytes = (size_t)k * m * (w16 ? 2 : 4);
  int L = (int)(STREAM_BYTES / wbytes);
  struct ggml_init_params ip = {ggml_tensor_overhead() * (size_t)(3 * L + 4) +
                                    2 * ggml_graph_overhead_custom((size_t)L * 2, false) + 4096,
                                NULL, true};
  struct ggml_context *ctx = ggml_init(ip);
  struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, 1);
  struct ggml_tensor **w = calloc((size_t)L, sizeof *w), **yg = calloc((size_t)L, sizeof *yg);
  struct ggml_tensor **yk = calloc((size_t)L, sizeof *yk);
  mv_node_t *nodes = calloc((size_t)L, sizeof *nodes);
  struct ggml_cgraph *gg = ggml_new_graph_custom(ctx, (size_t)L * 2, false);
  struct ggml_cgraph *gk = ggml_new_graph_custom(ctx, (size_t)L * 2, false);
  for (int l = 0; l < L; l++) {
    w[l] = ggml_new_tensor_2d(ctx, w16 ? GGML_TYPE_F16 : GGML_TYPE_F32, k, m);
    yg[l] = ggml_mul_mat(ctx, w[l], x);
    struct ggml_tensor *args[2] = {w[l], x};
    nodes[l].w = w[l], nodes[l].x = x;
    yk[l] = ggml_custom_4d(ctx, GGML_TYPE_F32, m, 1, 1, 1, args, 2, mv_compute, -1, &nodes[l]);
    ggml_build_forward_expand(gg, yg[l]);
    ggml_build_forward_expand(gk, yk[l]);
  }
  ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, be);
  if (!buf) {
    fprintf(stderr, "bench_mv: cannot allocate %d x %zu bytes\n", L, wbytes);
    return -1;
  }
  uint64_t rng = 7;
  size_t nw = (size_t)k * m;
  float *wf = malloc(nw * sizeof *wf), *xf = malloc((size_t)k * sizeof *xf);
  ggml_fp16_t *wh = malloc(nw * sizeof *wh);
  for (int i = 0; i < k; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    xf[i] = (float)((double)(rng >> 40) / (1 << 24) - 0.5) * 2;
  }
  ggml_backend_tensor_set(x, xf, 0, (size_t)k * sizeof *xf);
  for (int l = 0; l < L; l++) {
    for (size_t i = 0; i < nw; i++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      wf[i] = (float)((double)(rng >> 40) / (1 << 24) - 0.5) * 0.1f;
      if (w16)
        wh[i] = ggml_fp32_to_fp16(wf[i]);
    }
    ggml_backend_tensor_set(w[l], w16 ? (void *)wh : (void *)wf, 0, wbytes);
  }
  free(wf), free(wh), free(xf);

  jt_gemm_t g = {.mm = 1, .w16 = w16, .m = m, .n = 1, .k = k};
  jt_gemm_fn fn;
  size_t size, obj_len;
  void *obj;
  char name[128], err[512] = "";
  if (jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err)) {
    fprintf(stderr, "bench_mv: cannot compile the kernel: %s\n", err);
    return -1;
  }
  free(obj);
  jit->gemm_name(&g, name, sizeof name);
  float *scratch = aligned_alloc(64, (JT_MM_SCRATCH_FLOATS(k) * 4 + 63) / 64 * 64 * 64);
  for (int l = 0; l < L; l++) {
    nodes[l].k = (jt_mm_fn)(void (*)(void))fn;
    for (int t = 0; t < 64; t++)
      nodes[l].scratch[t] = scratch + (size_t)t * ((JT_MM_SCRATCH_FLOATS(k) + 15) / 16 * 16);
  }
  for (int t = 0; t < nn; t++) {
    threads(be, nths[t]);
    double tg[MAXR], tk[MAXR], ratio[MAXR];
    ggml_backend_graph_compute(be, gg); /* both warm: code, threads, page tables */
    ggml_backend_graph_compute(be, gk);
    for (int r = 0; r < rounds; r++) {
      for (int side = 0; side < 2; side++) {
        int kernel = (side + r) % 2;
        uint64_t t0 = bn_now_ns();
        ggml_backend_graph_compute(be, kernel ? gk : gg);
        double us = (double)(bn_now_ns() - t0) / 1e3 / L;
        (kernel ? tk : tg)[r] = us;
      }
      ratio[r] = tg[r] / tk[r];
    }
    double diff = 0, mag = 0;
    float *a = malloc((size_t)m * sizeof *a), *b = malloc((size_t)m * sizeof *b);
    for (int l = 0; l < L; l += L / 4 + 1) {
      ggml_backend_tensor_get(yg[l], a, 0, (size_t)m * sizeof *a);
      ggml_backend_tensor_get(yk[l], b, 0, (size_t)m * sizeof *b);
      for (int i = 0; i < m; i++) {
        double d = fabs((double)a[i] - b[i]);
        diff = isnan(d) ? INFINITY : fmax(diff, d);
        mag = fmax(mag, fabs((double)a[i]));
      }
    }
    free(a), free(b);
    double mg, sg, mk, sk, mr, sr;
    bn_stat(tg, (size_t)rounds, &mg, &sg);
    bn_stat(tk, (size_t)rounds, &mk, &sk);
    bn_stat(ratio, (size_t)rounds, &mr, &sr);
    printf("%s K=%-5d M=%-5d %7d %10.1f us %10.1f us %8.3f +- %.3f   %.3g (of %.3g)   %s\n",
           w16 ? "f16" : "f32", k, m, nths[t], mg, mk, mr, sr, diff, mag, name);
  }
  free(scratch);
  jit->release(fn, err, sizeof err);
  ggml_backend_buffer_free(buf);
  ggml_free(ctx);
  free(w), free(yg), free(yk), free(nodes);
  return 0;
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 15;
  if (rounds < 1 || rounds > MAXR) {
    fprintf(stderr, "usage: bench_mv [rounds (1-%d) [threads ...]]\n", MAXR);
    return 2;
  }
  int nths[8] = {1, 2}, nn = 2;
  if (argc > 2)
    for (nn = 0; nn < 8 && nn < argc - 2; nn++)
      nths[nn] = atoi(argv[2 + nn]) > 0 && atoi(argv[2 + nn]) <= 64 ? atoi(argv[2 + nn]) : 1;
  const jt_api_t *jit = bn_load_jit(OPJIT_JIT_MODULE_PATH, "bench_mv");
  if (!jit)
    return 1;
  ggml_backend_load_all_from_path(OPJIT_LLAMA_BINS);
  ggml_backend_t be = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
  if (!be) {
    fprintf(stderr, "bench_mv: no CPU backend in %s\n", OPJIT_LLAMA_BINS);
    return 1;
  }
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(ggml_backend_get_device(be));
  ggml_backend_set_n_threads_t threads =
      (ggml_backend_set_n_threads_t)ggml_backend_reg_get_proc_address(reg,
                                                                      "ggml_backend_set_n_threads");
  if (!threads) {
    fprintf(stderr, "bench_mv: the CPU backend sets no thread count\n");
    return 1;
  }
  Dl_info where = {0};
  dladdr((void *)threads, &where);
  printf("bench_mv: decode's MUL_MAT (N = 1), ggml's node against the one-column kernel as a "
         "custom node split by rows; %u MB of weights a graph; %d rounds, medians per node; "
         "ggml's CPU backend: %s\n\n",
         STREAM_BYTES >> 20, rounds,
         where.dli_fname && strrchr(where.dli_fname, '/') ? strrchr(where.dli_fname, '/') + 1 : "?");
  printf("%-24s %7s %13s %13s %19s   %s\n", "shape", "threads", "ggml", "opjit", "ggml/opjit",
         "max |diff|");
  static const int shapes[][3] = {{768, 768, 0},  {768, 2048, 0}, {2048, 768, 0},  {768, 768, 1},
                                  {768, 2048, 1}, {2048, 768, 1}, {768, 16000, 1}};
  int rc = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes && !rc; s++)
    rc = shape(jit, be, threads, shapes[s][0], shapes[s][1], shapes[s][2], nths, nn, rounds);
  ggml_backend_free(be);
  return rc ? 1 : 0;
}
