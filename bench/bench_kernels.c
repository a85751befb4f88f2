/* SPDX-License-Identifier: MIT */
/* bench_kernels: the JIT's kernels alone, by vector width, on this CPU. For square sgemm and
 * dgemm (NN, alpha 1, beta 1) at n = 16 .. 512 and ggml MUL_MATs (prefill and decode,
 * f32 and f16 weights) it compiles the kernel for AVX2 (256-bit, 16 registers, forced: no EVEX
 * code), for AVX-512 with 256-bit vectors (32 registers), for AVX-512 with 512-bit vectors
 * (the default) and the one tune() picks; for GEMMs with tails, masked against pieced tails.
 * It times them interleaved in this process (rounds of ~1 ms batches, each after one untimed
 * call, the columns' order rotating each round) and prints median GF/s, the median of the per-round ratios, and the FMA
 * peak of each width on this core (independent FMA chains, the best of 9 runs). Each round
 * also runs that peak's loop at the widest width for as long as a batch, per type: a row's
 * "of loop" is the median of its best column's per-round share of it, the kernel against the
 * FMA rate the core sustained in the same round (a short run's best catches a clock that a
 * batch does not keep: on a Zen 5 VM at load 7 the loop run as a batch measured 0.92 of it).
 *
 *   bench_kernels [ROUNDS]     (default 21) */
#define _GNU_SOURCE
#include "bench.h"
#include "agent/machine.h"

#include "jit/jit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- kernels ------------------------------------------------------------------------------- */

#define NCONF 4
typedef struct row_s {
  const char *table;         /* which table the row belongs to */
  jt_gemm_t g;               /* the problem */
  jt_gemm_t conf[NCONF];     /* generation fields per column (isa < 0: no such column) */
  jt_gemm_fn fn[NCONF];
  char name[NCONF][128];
  void *a, *b, *c, *scratch; /* operands */
  long calls;                /* per sample */
  double *ns[NCONF];         /* per round */
  double tune_ms;            /* the tuned column: tune()'s own time */
} row_t;

static void *operand(size_t count, int esz)
{
  void *p = aligned_alloc(64, (count * (size_t)esz + 63) / 64 * 64);
  for (size_t i = 0; i < count; i++) {
    double v = (double)((int)(i % 13) - 6) / 8;
    if (esz == 8)
      ((double *)p)[i] = v;
    else if (esz == 4)
      ((float *)p)[i] = (float)v;
    else
      ((_Float16 *)p)[i] = (_Float16)v;
  }
  return p;
}

static void call(const row_t *r, jt_gemm_fn fn)
{
  if (r->g.mm)
    ((jt_mm_fn)(void (*)(void))fn)(r->a, r->b, r->c, 0, r->g.m, r->scratch);
  else
    fn(r->a, r->b, r->c, 1, 1);
}

static double flops(const jt_gemm_t *g) { return 2.0 * g->m * g->n * g->k; }

#define MAXROWS 48
static row_t rows[MAXROWS];
static int nrows;
static const jt_api_t *jit;
static double loop_gf[2][64]; /* per type (f64) and round: the widest FMA loop run as a batch */

/* Adds a row: the problem and its columns' generation fields (isa -1: the column is empty,
 * isa -2: tune() with the problem's own fields). */
static void add_row(const char *table, jt_gemm_t g, const jt_gemm_t conf[NCONF])
{
  row_t *r = &rows[nrows++];
  memset(r, 0, sizeof *r);
  r->table = table, r->g = g;
  for (int c = 0; c < NCONF; c++)
    r->conf[c] = conf[c];
}

static jt_gemm_t with(jt_gemm_t g, int isa, int vbits, int tails, int nr)
{
  g.isa = isa, g.vbits = vbits, g.tails = tails, g.nr = nr;
  return g;
}

/* Compiles a row's kernels and its operands; returns 0 or -1. */
static int prepare(row_t *r)
{
  char err[512] = "";
  jt_gemm_t *g = &r->g;
  for (int c = 0; c < NCONF; c++) {
    jt_gemm_t gc = r->conf[c];
    size_t size, obj_len;
    void *obj = NULL;
    int rc;
    if (gc.isa == -1 || (gc.isa == JT_ISA_AVX512 && jit->host_isa() != JT_ISA_AVX512))
      continue;
    if (gc.isa == -2) {
      uint64_t t0 = bn_now_ns();
      rc = jit->tune(g, JT_TUNE_MAX, &gc, &r->fn[c], &size, &obj, &obj_len, NULL, err, sizeof err);
      r->tune_ms = (double)(bn_now_ns() - t0) / 1e6;
    } else {
      rc = jit->gemm(&gc, &r->fn[c], &size, &obj, &obj_len, err, sizeof err);
    }
    free(obj);
    if (rc) {
      fprintf(stderr, "bench_kernels: column %d of %dx%dx%d: %s\n", c, g->m, g->n, g->k, err);
      return -1;
    }
    jit->gemm_name(&gc, r->name[c], sizeof r->name[c]);
    r->ns[c] = calloc(64, sizeof(double));
  }
  if (g->mm) {
    r->a = operand((size_t)g->m * g->k, g->w16 ? 2 : 4);
    r->b = operand((size_t)g->n * g->k, 4);
    r->c = operand((size_t)g->m * g->n, 4);
    r->scratch = operand(JT_MM_SCRATCH_FLOATS(g->k), 4);
  } else {
    int esz = g->f64 ? 8 : 4;
    r->a = operand((size_t)g->lda * (g->ta ? g->m : g->k), esz);
    r->b = operand((size_t)g->ldb * g->n, esz);
    r->c = operand((size_t)g->ldc * g->n, esz);
  }
  int first = 0;
  while (!r->fn[first])
    first++;
  uint64_t t0 = bn_now_ns();
  for (int i = 0; i < 5; i++)
    call(r, r->fn[first]);
  double one = (double)(bn_now_ns() - t0) / 5 + 1;
  r->calls = (long)(1e6 / one) + 1; /* ~1 ms per sample */
  return 0;
}

/* The median of n <= 64 values, left in their rounds' order (bn_median sorts in place). */
static double median_of(const double *v, int n)
{
  double tmp[64];
  memcpy(tmp, v, (size_t)n * sizeof *v);
  return bn_median(tmp, (size_t)n);
}

static const char *how(const char *name)
{
  const char *p = strstr(name, "_avx");
  return p ? p + 1 : name;
}

/* Prints the rows of one table: median GF/s per column, the median of the per-round ratios of
 * column num over column den, and what the tuned column picked. */
static void print_table(const char *table, const char *const head[NCONF], int num, int den,
                        int rounds, double peak_s, double peak_d)
{
  printf("\n%s\n%-10s %-16s", table, "", "m x n x k");
  for (int c = 0; c < NCONF; c++)
    printf(" %12s", head[c]);
  printf(" %8s %8s %8s  %s\n", "ratio", "of peak", "of loop", "tuned pick (tune ms)");
  for (int i = 0; i < nrows; i++) {
    row_t *r = &rows[i];
    if (strcmp(r->table, table) != 0)
      continue;
    char shape[32], kind[16];
    snprintf(shape, sizeof shape, "%dx%dx%d", r->g.m, r->g.n, r->g.k);
    snprintf(kind, sizeof kind, "%s%s", r->g.mm ? (r->g.w16 ? "mm f16" : "mm f32") : r->g.f64 ? "dgemm" : "sgemm",
             r->g.ta ? " TN" : "");
    printf("%-10s %-16s", kind, shape);
    double best = 0, ratio[64], share[64];
    int bc = 0, f64 = r->g.f64 && !r->g.mm;
    for (int c = 0; c < NCONF; c++) {
      double gf = r->fn[c] ? flops(&r->g) / median_of(r->ns[c], rounds) : 0;
      bc = gf > best ? c : bc;
      best = gf > best ? gf : best;
      printf(" %12.1f", gf);
    }
    for (int k = 0; k < rounds; k++) {
      ratio[k] = r->fn[num] && r->fn[den] ? r->ns[den][k] / r->ns[num][k] : 0;
      share[k] = loop_gf[f64][k] > 0 ? flops(&r->g) / r->ns[bc][k] / loop_gf[f64][k] : 0;
    }
    double peak = f64 ? peak_d : peak_s;
    printf(" %7.2fx %7.0f%% %7.0f%%  %s (%.0f)\n", bn_median(ratio, (size_t)rounds),
           peak > 0 ? 100 * best / peak : 0, 100 * bn_median(share, (size_t)rounds),
           r->fn[3] ? how(r->name[3]) : "-", r->tune_ms);
  }
}

/* What tune() costs the compile thread per kernel, on shapes compiled nowhere else in this
 * process (padded leading dimensions): its candidates' compiles and their timing. */
static void tune_costs(void)
{
  const jt_gemm_t ps[] = {
      {.m = 24, .n = 24, .k = 24, .lda = 25, .ldb = 25, .ldc = 25, .alpha_one = 1},
      {.m = 64, .n = 64, .k = 64, .lda = 65, .ldb = 65, .ldc = 65, .alpha_one = 1, .beta_class = 1},
      {.f64 = 1, .m = 100, .n = 100, .k = 100, .lda = 101, .ldb = 101, .ldc = 101, .beta_class = 2},
      {.ta = 1, .m = 64, .n = 64, .k = 64, .lda = 65, .ldb = 65, .ldc = 65, .alpha_one = 1},
      {.ta = 1, .m = 160, .n = 1, .k = 160, .lda = 161, .ldb = 160, .ldc = 160, .alpha_one = 1},
      {.dot = 1, .k = 999},
      {.mm = 1, .m = 768, .n = 32, .k = 256},
      {.mm = 1, .w16 = 1, .m = 4096, .n = 512, .k = 4096},
      {.mm = 1, .w16 = 1, .m = 4096, .n = 1, .k = 4096},
  };
  printf("\ntune() with 3 candidates (the agent's), per kernel: compile and timing on the compile "
         "thread\n%-28s %5s %11s %10s  %s\n", "problem", "cands", "compile ms", "timing ms",
         "pick");
  for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
    jt_gemm_t best;
    jt_tune_t rep;
    jt_gemm_fn fn;
    size_t size, obj_len;
    void *obj = NULL;
    char err[512], name[160], what[40];
    if (jit->tune(&ps[i], 3, &best, &fn, &size, &obj, &obj_len, &rep, err, sizeof err)) {
      fprintf(stderr, "bench_kernels: tune: %s\n", err);
      continue;
    }
    free(obj);
    jit->gemm_name(&best, name, sizeof name);
    const jt_gemm_t *g = &ps[i];
    if (g->dot)
      snprintf(what, sizeof what, "sdot %d", g->k);
    else
      snprintf(what, sizeof what, "%s %dx%dx%d",
               g->mm ? (g->w16 ? "mm f16" : "mm f32")
                     : g->f64 ? (g->ta ? "dgemm TN" : "dgemm") : g->ta ? "sgemm TN" : "sgemm",
               g->m, g->n, g->k);
    printf("%-28s %5d %11.1f %10.1f  %s\n", what, rep.n, (double)rep.compile_ns / 1e6,
           (double)rep.time_ns / 1e6, how(name));
  }
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 21;
  rounds = rounds < 3 ? 3 : rounds > 64 ? 64 : rounds;
  if (!(jit = bn_load_jit(OPJIT_JIT_MODULE_PATH, "bench_kernels")))
    return 1;
  int wide = jit->host_isa() == JT_ISA_AVX512;
  char cpu[256];
  bn_cpu_name(cpu, sizeof cpu);
  printf("CPU: %s (LLVM %s, %s), widest ISA %s\n", cpu, jit->llvm_version(), jit->cpu(),
         jit->isa_name(jit->host_isa()));
  ag_machine_t machine; /* the agent's own measurement, the fastest of 5 */
  ag_machine_measure_best(&machine, 5);
  double p512s = machine.gflops[0][AG_ISA_AVX512], p512d = machine.gflops[1][AG_ISA_AVX512];
  double p256s = machine.gflops[0][AG_ISA_AVX2], p256d = machine.gflops[1][AG_ISA_AVX2];
  printf("FMA peak per core, GF/s (agent/machine.c):  fp32 128-bit %.1f  256-bit %.1f",
         machine.gflops[0][AG_ISA_SSE2], p256s);
  if (wide)
    printf("  512-bit %.1f", p512s);
  printf("\n                                      fp64 128-bit %.1f  256-bit %.1f",
         machine.gflops[1][AG_ISA_SSE2], p256d);
  if (wide)
    printf("  512-bit %.1f", p512d);
  printf("\n");

  const char *T1 = "GEMM, NN alpha=1 beta=1, square: by width (ratio: avx512 zmm / avx2)";
  const char *T2 = "GEMM tails (m, n, k not multiples of the vector), avx512 zmm: masked vs pieces "
                   "(ratio: masked / pieces)";
  const char *T5 = "GEMM, large K: K in blocks (A's slice packed) vs one block, host ISA "
                   "(ratio: blocked / one block)";
  const char *T4 = "GEMV (n = 1; TN: y = A^T x) and AXPY (k = 1) as the agent maps them: by width "
                   "(ratio: avx512 zmm / avx2)";
  const char *T3 = "ggml MUL_MAT (prefill n > 1, decode n = 1): by width (ratio: avx512 zmm / avx2)";
  static const int ns[] = {4, 8, 16, 32, 64, 128, 256, 512};
  const jt_gemm_t none = {.isa = -1}, tuned = {.isa = -2};
  for (int f64 = 0; f64 < 2; f64++)
    for (int i = 0; i < 8; i++) {
      int n = ns[i];
      jt_gemm_t g = {.f64 = f64, .m = n, .n = n, .k = n, .lda = n, .ldb = n, .ldc = n,
                     .alpha_one = 1, .beta_class = 1};
      add_row(T1, g, (jt_gemm_t[]){with(g, JT_ISA_AVX2, 0, 0, 0), with(g, JT_ISA_AVX512, 256, 0, 0),
                                   with(g, JT_ISA_AVX512, 512, 0, 0), tuned});
    }
  for (int f64 = 0; f64 < 2; f64++)
    for (int n = 256; n <= 512; n *= 2) {
      jt_gemm_t g = {.f64 = f64, .m = n, .n = n, .k = n, .lda = n, .ldb = n, .ldc = n,
                     .alpha_one = 1, .beta_class = 1};
      jt_gemm_t one = g;
      one.kc = -1;
      add_row(T5, g, (jt_gemm_t[]){g, one, none, tuned});
    }
  static const int odd[] = {20, 37, 71, 100};
  for (int f64 = 0; f64 < 2 && wide; f64++)
    for (int i = 0; i < 4; i++) {
      int n = odd[i];
      jt_gemm_t g = {.f64 = f64, .m = n, .n = n, .k = n, .lda = n, .ldb = n, .ldc = n,
                     .alpha_one = 1, .beta_class = 1};
      add_row(T2, g, (jt_gemm_t[]){with(g, JT_ISA_AVX512, 512, 1, 0), with(g, JT_ISA_AVX512, 512, 2, 0),
                                   none, none});
    }
  static const int mvs[][4] = {{64, 64, 0, 0}, {160, 160, 0, 0}, {160, 160, 1, 0}, {500, 1, 0, 0}, {160, 160, 0, 1}};
  for (size_t i = 0; i < sizeof mvs / sizeof *mvs; i++) {
    int m = mvs[i][0], k = mvs[i][1], ta = mvs[i][2];
    jt_gemm_t g = {.f64 = mvs[i][3], .ta = ta, .m = m, .n = 1, .k = k, .lda = ta ? k : m, .ldb = k,
                   .ldc = m, .alpha_one = 1, .beta_class = 1};
    add_row(T4, g, (jt_gemm_t[]){with(g, JT_ISA_AVX2, 0, 0, 0), with(g, JT_ISA_AVX512, 256, 0, 0),
                                 with(g, JT_ISA_AVX512, 512, 0, 0), tuned});
  }
  static const int mms[][3] = {{768, 32, 256}, {256, 32, 768}, {1024, 128, 1024}, {1024, 1, 1024}, {4096, 1, 1024}};
  for (int w16 = 0; w16 < 2; w16++)
    for (size_t i = 0; i < sizeof mms / sizeof *mms; i++) {
      jt_gemm_t g = {.mm = 1, .w16 = w16, .m = mms[i][0], .n = mms[i][1], .k = mms[i][2]};
      add_row(T3, g, (jt_gemm_t[]){with(g, JT_ISA_AVX2, 0, 0, 0), with(g, JT_ISA_AVX512, 256, 0, 0),
                                   with(g, JT_ISA_AVX512, 512, 0, 0), tuned});
    }
  for (int i = 0; i < nrows; i++)
    if (prepare(&rows[i]))
      return 1;
  int widest = wide ? AG_ISA_AVX512 : AG_ISA_AVX2;
  for (int r = 0; r < rounds; r++) {
    for (int f64 = 0; f64 < 2; f64++)
      loop_gf[f64][r] = ag_machine_fma_gflops(&machine, widest, f64, 1000000);
    for (int i = 0; i < nrows; i++)
      for (int t = 0; t < NCONF; t++) {
        int c = (t + r) % NCONF;
        row_t *row = &rows[i];
        if (!row->fn[c])
          continue;
        call(row, row->fn[c]); /* untimed: the previous column's kernel may have left the core
                                  in another state (the same MUL_MAT kernel measured 10-20 %
                                  faster in the column after its own than after a ymm one) */
        uint64_t t0 = bn_now_ns();
        for (long j = 0; j < row->calls; j++)
          call(row, row->fn[c]);
        row->ns[c][r] = (double)(bn_now_ns() - t0) / (double)row->calls;
      }
  }
  printf("\nkernels alone, GF/s: medians of %d rounds that interleave the columns (~1 ms each)\n"
         "of peak: the best column against the peak above; of loop: against the FMA loop run as "
         "a batch in the same round (median share; the loop's median %.1f GF/s fp32, %.1f fp64)\n",
         rounds, median_of(loop_gf[0], rounds), median_of(loop_gf[1], rounds));
  double ps = wide ? p512s : p256s, pd = wide ? p512d : p256d;
  print_table(T1, (const char *const[]){"avx2 ymm", "avx512 ymm", "avx512 zmm", "tuned"}, 2, 0,
              rounds, ps, pd);
  if (wide)
    print_table(T2, (const char *const[]){"masked", "pieces", "", ""}, 0, 1, rounds, ps, pd);
  print_table(T5, (const char *const[]){"K blocked", "one block", "", "tuned"}, 0, 1, rounds, ps, pd);
  print_table(T4, (const char *const[]){"avx2 ymm", "avx512 ymm", "avx512 zmm", "tuned"}, 2, 0,
              rounds, ps, pd);
  print_table(T3, (const char *const[]){"avx2 ymm", "avx512 ymm", "avx512 zmm", "tuned"}, 2, 0,
              rounds, ps, pd);
  tune_costs();
  return 0;
}
