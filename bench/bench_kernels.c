/* SPDX-License-Identifier: MIT */
/* bench_kernels: the JIT's GEMM kernels alone, by vector width, on this CPU. For square sgemm
 * and dgemm (NN, alpha 1, beta 1) at n = 16, 32, 64, 128 it compiles the kernel for AVX2
 * (256-bit, 16 registers, forced: no EVEX code), for AVX-512 with 256-bit vectors (32
 * registers), for AVX-512 with 512-bit vectors (the default) and the one tune() picks, then
 * times them interleaved in this process (rounds of ~1 ms batches, the order rotating each
 * round) and prints median GF/s, the median of the per-round ratios 512-bit / AVX2, and the
 * FMA peak of each width on this core (independent FMA chains, the best of 9 runs).
 *
 *   bench_kernels [ROUNDS]     (default 21) */
#define _GNU_SOURCE
#include "bench.h"

#include "jit/jit.h"

#include <dlfcn.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCONF 4
static const char *const conf_name[NCONF] = {"avx2 ymm", "avx512 ymm", "avx512 zmm", "tuned"};
static const int ns[] = {16, 32, 64, 128};

/* ---- FMA peak per width --------------------------------------------------------------------
 * 16 independent chains (12 for 16-register AVX2): enough to cover two pipes of 4-cycle FMAs. */
#define PEAK(name, isa, V, SET1, FMA, lanes, chains)                                            \
  __attribute__((target(isa), noinline)) static double name(long iters)                       \
  {                                                                                           \
    V a[chains], x = SET1(0.999999), y = SET1(1e-7);                                          \
    for (int i = 0; i < chains; i++)                                                          \
      a[i] = SET1(i + 1);                                                                     \
    uint64_t t0 = bn_now_ns();                                                                \
    for (long it = 0; it < iters; it++)                                                       \
      _Pragma("GCC unroll 16") for (int i = 0; i < chains; i++) a[i] = FMA(a[i], x, y);       \
    double ns_ = (double)(bn_now_ns() - t0);                                                  \
    V s = a[0];                                                                               \
    for (int i = 1; i < chains; i++)                                                          \
      s = s + a[i];                                                                           \
    sink += (double)s[0];                                                                     \
    return 2.0 * lanes * chains * (double)iters / ns_;                                        \
  }
static volatile double sink;
PEAK(peak128s, "fma", __m128, _mm_set1_ps, _mm_fmadd_ps, 4, 12)
PEAK(peak128d, "fma", __m128d, _mm_set1_pd, _mm_fmadd_pd, 2, 12)
PEAK(peak256s, "fma,avx2", __m256, _mm256_set1_ps, _mm256_fmadd_ps, 8, 12)
PEAK(peak256d, "fma,avx2", __m256d, _mm256_set1_pd, _mm256_fmadd_pd, 4, 12)
PEAK(peak512s, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps, 16, 16)
PEAK(peak512d, "avx512f", __m512d, _mm512_set1_pd, _mm512_fmadd_pd, 8, 16)

static double best_of(double (*f)(long))
{
  double best = 0;
  for (int i = 0; i < 9; i++) {
    double v = f(1000000);
    best = v > best ? v : best;
  }
  return best;
}

/* ---- kernels ------------------------------------------------------------------------------- */

typedef struct kcase_s {
  int f64, n;
  jt_gemm_fn fn[NCONF];
  char name[NCONF][128];
  void *a, *b, *c;
  long calls;                /* per sample */
  double *ns[NCONF];         /* per round */
  double tune_ms, compile_ms;
} kcase_t;

static void *operand(size_t count, int f64)
{
  void *p = aligned_alloc(64, count * 8);
  for (size_t i = 0; i < count; i++)
    if (f64)
      ((double *)p)[i] = (double)((int)(i % 13) - 6) / 8;
    else
      ((float *)p)[i] = (float)((int)(i % 13) - 6) / 8;
  return p;
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 21;
  if (rounds < 3)
    rounds = 3;
  void *h = dlopen(OPJIT_JIT_MODULE_PATH, RTLD_NOW | RTLD_LOCAL);
  const jt_api_t *jit = h ? dlsym(h, JT_API_SYMBOL) : NULL;
  char err[512] = "";
  if (!jit || jit->abi != JT_API_ABI || jit->init(err, sizeof err)) {
    fprintf(stderr, "bench_kernels: the JIT is unavailable: %s\n", jit ? err : dlerror());
    return 1;
  }
  int wide = jit->host_isa() == JT_ISA_AVX512;
  char cpu[256] = "?";
  FILE *f = fopen("/proc/cpuinfo", "r");
  for (char line[512]; f && fgets(line, sizeof line, f);)
    if (strncmp(line, "model name", 10) == 0) {
      snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
      cpu[strcspn(cpu, "\n")] = 0;
      break;
    }
  if (f)
    fclose(f);
  printf("CPU: %s (LLVM %s, %s), widest ISA %s\n", cpu, jit->llvm_version(), jit->cpu(),
         jit->isa_name(jit->host_isa()));
  printf("FMA peak per core, GF/s (best of 9):  fp32 128-bit %.1f  256-bit %.1f", best_of(peak128s),
         best_of(peak256s));
  double p512s = wide ? best_of(peak512s) : 0, p512d = wide ? best_of(peak512d) : 0;
  if (wide)
    printf("  512-bit %.1f", p512s);
  printf("\n                                      fp64 128-bit %.1f  256-bit %.1f", best_of(peak128d),
         best_of(peak256d));
  if (wide)
    printf("  512-bit %.1f", p512d);
  printf("\n");

  enum { NC = 2 * sizeof ns / sizeof *ns };
  kcase_t cs[NC];
  for (int i = 0; i < NC; i++) {
    kcase_t *k = &cs[i];
    memset(k, 0, sizeof *k);
    k->f64 = i / (NC / 2), k->n = ns[i % (NC / 2)];
    int n = k->n;
    jt_gemm_t g = {.f64 = k->f64, .m = n, .n = n, .k = n, .lda = n, .ldb = n, .ldc = n,
                   .alpha_one = 1, .beta_class = 1};
    for (int c = 0; c < NCONF; c++) {
      jt_gemm_t gc = g;
      size_t size, obj_len;
      void *obj = NULL;
      int rc;
      if (c == 0)
        gc.isa = JT_ISA_AVX2;
      else if (c == 1)
        gc.isa = JT_ISA_AVX512, gc.vbits = 256;
      if (!wide && (c == 1 || c == 2))
        continue;
      uint64_t t0 = bn_now_ns();
      if (c == 3) {
        jt_tune_t rep;
        rc = jit->tune(&g, JT_TUNE_MAX, &gc, &k->fn[c], &size, &obj, &obj_len, &rep, err, sizeof err);
        k->compile_ms = (double)rep.compile_ns / 1e6 / rep.n;
        k->tune_ms = (double)(bn_now_ns() - t0) / 1e6;
      } else {
        rc = jit->gemm(&gc, &k->fn[c], &size, &obj, &obj_len, err, sizeof err);
      }
      free(obj);
      if (rc) {
        fprintf(stderr, "bench_kernels: %s n=%d: %s\n", conf_name[c], n, err);
        return 1;
      }
      jit->gemm_name(&gc, k->name[c], sizeof k->name[c]);
      k->ns[c] = calloc((size_t)rounds, sizeof(double));
    }
    k->a = operand((size_t)n * n, k->f64), k->b = operand((size_t)n * n, k->f64);
    k->c = operand((size_t)n * n, k->f64);
    uint64_t t0 = bn_now_ns();
    for (int r = 0; r < 10; r++)
      k->fn[0](k->a, k->b, k->c, 1, 1);
    double one = (double)(bn_now_ns() - t0) / 10 + 1;
    k->calls = (long)(1e6 / one) + 1; /* ~1 ms per sample */
  }
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < NC; i++)
      for (int t = 0; t < NCONF; t++) {
        int c = (t + r) % NCONF;
        kcase_t *k = &cs[i];
        if (!k->fn[c])
          continue;
        uint64_t t0 = bn_now_ns();
        for (long j = 0; j < k->calls; j++)
          k->fn[c](k->a, k->b, k->c, 1, 1);
        k->ns[c][r] = (double)(bn_now_ns() - t0) / (double)k->calls;
      }
  printf("\nkernel alone, GF/s (median of %d interleaved rounds), NN alpha=1 beta=1 square n:\n",
         rounds);
  printf("%-4s %4s %9s %11s %11s %9s %10s %8s  %s\n", "", "n", "avx2 ymm", "avx512 ymm",
         "avx512 zmm", "tuned", "zmm/avx2", "of peak", "tuned pick (tune ms; compile ms each)");
  for (int i = 0; i < NC; i++) {
    kcase_t *k = &cs[i];
    double flops = 2.0 * k->n * k->n * k->n, gf[NCONF] = {0}, ratio[rounds];
    for (int r = 0; r < rounds; r++)
      ratio[r] = k->fn[2] ? k->ns[0][r] / k->ns[2][r] : 0;
    for (int c = 0; c < NCONF; c++)
      if (k->fn[c])
        gf[c] = flops / bn_median(k->ns[c], (size_t)rounds);
    double peak = k->f64 ? p512d : p512s;
    printf("%-4s %4d %9.1f %11.1f %11.1f %9.1f %9.2fx %7.0f%%  %s (%.0f; %.1f)\n",
           k->f64 ? "d" : "s", k->n, gf[0], gf[1], gf[2], gf[3], bn_median(ratio, (size_t)rounds),
           peak > 0 ? 100 * (gf[2] > gf[3] ? gf[2] : gf[3]) / peak : 0,
           strstr(k->name[3], "_avx") ? strstr(k->name[3], "_avx") + 1 : k->name[3], k->tune_ms,
           k->compile_ms);
  }
  return 0;
}
