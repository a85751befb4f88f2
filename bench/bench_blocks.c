/* SPDX-License-Identifier: MIT */
/* bench_blocks: the JIT's kernel for one large square product (NN, alpha 1, beta 1, tight
 * leading dimensions) under cache blockings named on the command line, against each other and
 * against the system BLAS (Debian's OpenBLAS: OPENBLAS_CORETYPE picks its core, and it is told to
 * run on one thread), interleaved in one process. Each round calls every column once untimed and once timed, the
 * columns' order reversing from one round to the next; the table gives each column's median
 * ns per call and GF/s, and the median of its per-round time over the first column's (below 1:
 * faster than the first) with the interquartile range's ends. A blocking is
 * mr_vecs,nr,kc,nc,mc (jt_gemm_t; 0: the generator's choice, "0" alone its default), its
 * kernel's name says what it resolved to. The large-product tables in docs/jit.md come from it.
 *   bench_blocks n s|d [rounds [blocking ...]]   (default 7 rounds; blockings "0") */
#define _GNU_SOURCE
#include "bench.h"
#include "blas.h"

#include "jit/jit.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXCOL 9 /* blockings, at most; the library is one column more */

int main(int argc, char **argv)
{
  int n = argc > 1 ? atoi(argv[1]) : 0, f64 = argc > 2 && argv[2][0] == 'd';
  int rounds = argc > 3 ? atoi(argv[3]) : 7, nb = argc > 4 ? argc - 4 : 1;
  if (n < 1 || n > JT_GEMM_MAX_DIM || argc < 3 || (argv[2][0] != 's' && !f64) || rounds < 1 ||
      nb > MAXCOL) {
    fprintf(stderr, "usage: bench_blocks n s|d [rounds [mr_vecs,nr,kc,nc,mc ...]] (n <= %d, at "
            "most %d blockings)\n", JT_GEMM_MAX_DIM, MAXCOL);
    return 2;
  }
  /* one thread for the library too: OpenBLAS reads OPENBLAS_NUM_THREADS as it loads, before
   * main, so it is told here (another BLAS runs as it is configured, and the title says so) */
  void (*set_threads)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
  if (set_threads)
    set_threads(1);
  const jt_api_t *jit = bn_load_jit(OPJIT_JIT_MODULE_PATH, "bench_blocks");
  if (!jit)
    return 1;
  size_t esz = f64 ? 8 : 4, count = (size_t)n * (size_t)n;
  char *a = aligned_alloc(64, count * esz), *b = aligned_alloc(64, count * esz),
       *c = aligned_alloc(64, count * esz);
  double *ns = malloc(sizeof *ns * (size_t)(nb + 1) * (size_t)rounds);
  if (!a || !b || !c || !ns) {
    fprintf(stderr, "bench_blocks: out of memory for %d^3\n", n);
    return 1;
  }
  for (size_t i = 0; i < count; i++) { /* values in [-3/4, 3/4]: no overflow over any rounds */
    double v = (double)((int)(i % 13) - 6) / 8;
    if (f64)
      ((double *)a)[i] = ((double *)b)[i] = v, ((double *)c)[i] = 0;
    else
      ((float *)a)[i] = ((float *)b)[i] = (float)v, ((float *)c)[i] = 0;
  }
  jt_gemm_fn fn[MAXCOL];
  char name[MAXCOL][160];
  for (int i = 0; i < nb; i++) {
    jt_gemm_t g = {.f64 = f64, .m = n, .n = n, .k = n, .lda = n, .ldb = n, .ldc = n,
                   .alpha_one = 1, .beta_class = 1};
    const char *spec = argc > 4 ? argv[4 + i] : "0";
    sscanf(spec, "%d,%d,%d,%d,%d", &g.mr_vecs, &g.nr, &g.kc, &g.nc, &g.mc);
    size_t size, obj_len;
    void *obj;
    char err[256];
    if (jit->gemm(&g, &fn[i], &size, &obj, &obj_len, err, sizeof err)) {
      fprintf(stderr, "bench_blocks: %s does not compile: %s\n", spec, err);
      return 1;
    }
    free(obj);
    jit->gemm_name(&g, name[i], sizeof name[i]);
  }
  float one_f = 1;
  double one_d = 1;
  const void *one = f64 ? (const void *)&one_d : (const void *)&one_f;
  for (int r = 0; r < rounds; r++)
    for (int j = 0; j <= nb; j++) {
      int col = r % 2 ? nb - j : j; /* the library is column nb */
      for (int timed = 0; timed < 2; timed++) {
        uint64_t t0 = bn_now_ns();
        if (col < nb)
          fn[col](a, b, c, 1, 1);
        else if (f64)
          dgemm_("N", "N", &n, &n, &n, one, (double *)a, &n, (double *)b, &n, one, (double *)c,
                 &n);
        else
          sgemm_("N", "N", &n, &n, &n, one, (float *)a, &n, (float *)b, &n, one, (float *)c, &n);
        ns[col * rounds + r] = (double)(bn_now_ns() - t0);
      }
    }
  char cpu[128];
  bn_cpu_name(cpu, sizeof cpu);
  printf("%cgemm %d^3 NN beta 1, %d rounds, %s; the kernels on one thread, the system BLAS on "
         "%s\n", f64 ? 'd' : 's', n, rounds, cpu,
         set_threads ? "one (openblas_set_num_threads)" : "the threads it is configured for");
  printf("%-90s %10s %7s %23s\n", "column", "ns", "GF/s", "time / first's (q1-q3)");
  double ratio[rounds];
  for (int col = 0; col <= nb; col++) {
    for (int r = 0; r < rounds; r++)
      ratio[r] = ns[col * rounds + r] / ns[r];
    double med, spread;
    bn_stat(&ns[col * rounds], (size_t)rounds, &med, &spread); /* ns left as it was */
    double rm = bn_median(ratio, (size_t)rounds);               /* ratio sorted */
    printf("%-90s %10.0f %7.1f %9.3f (%.3f-%.3f)\n", col < nb ? name[col] : "system BLAS", med,
           2.0 * n * n * n / med, rm, ratio[rounds / 4], ratio[(3 * rounds) / 4]);
  }
  free(a), free(b), free(c), free(ns);
  return 0;
}
