/* SPDX-License-Identifier: MIT */
/* bench_passthrough: what the agent adds to one BLAS call, side by side with the bare library,
 * in one process. A is the symbol as the program resolves it (sgemm_ → the agent's wrapper →
 * OpenBLAS), B is libblas.so.3's own definition (dlsym on the loaded library). Each round
 * times a batch of A and a batch of B (order alternating), ~3 ms each; the table holds the
 * medians over rounds. Run without the agent preloaded, it re-runs itself under
 * LD_PRELOAD=libopjit.so with OPENBLAS_NUM_THREADS=1, OPJIT_MODE=profile and a scratch OPJIT_DB.
 *
 *   bench_passthrough [rounds]      (default 31) */
#define _GNU_SOURCE
#include "bench.h"

#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

/* The BLAS interfaces under test, as Debian's libblas.so.3 defines them (LP64). */
void sgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k,
            const float *alpha, const float *a, const int *lda, const float *b, const int *ldb,
            const float *beta, float *c, const int *ldc);
float sdot_(const int *n, const float *x, const int *incx, const float *y, const int *incy);
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);
float cblas_sdot(int n, const float *x, int incx, const float *y, int incy);

typedef void sgemm_fn(const char *, const char *, const int *, const int *, const int *,
                      const float *, const float *, const int *, const float *, const int *,
                      const float *, float *, const int *);
typedef float sdot_fn(const int *, const float *, const int *, const float *, const int *);
typedef void cblas_sgemm_fn(int, int, int, int, int, int, float, const float *, int,
                            const float *, int, float, float *, int);
typedef float cblas_sdot_fn(int, const float *, int, const float *, int);

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111 };
enum { MAX_N = 64 };                /* largest operand dimension of any case */
enum { WARMUP_ROUNDS = 3 };         /* untimed rounds before the measured ones */
#define BATCH_TARGET_NS 3000000.0   /* a batch of calls lasts about this long */
#define GOAL_NS 20.0                /* what the agent may add per call */

/* Operands, shared by all cases: a and b are inputs, c the gemm output, dot_out the last dot. */
static float a[MAX_N * MAX_N], b[MAX_N * MAX_N], c[MAX_N * MAX_N];
static volatile float dot_out;

/* Calls fn iters times on the case's operands. */
typedef void loop_fn(void *fn, int n, long iters);

static void loop_sgemm(void *fn, int n, long iters)
{
  static const float one = 1, zero = 0;
  sgemm_fn *f = (sgemm_fn *)fn;
  for (long i = 0; i < iters; i++)
    f("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n);
}

static void loop_sdot(void *fn, int n, long iters)
{
  static const int inc = 1;
  sdot_fn *f = (sdot_fn *)fn;
  float s = 0;
  for (long i = 0; i < iters; i++)
    s = f(&n, a, &inc, b, &inc);
  dot_out = s;
}

static void loop_cblas_sgemm(void *fn, int n, long iters)
{
  cblas_sgemm_fn *f = (cblas_sgemm_fn *)fn;
  for (long i = 0; i < iters; i++)
    f(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, n, n, n, 1, a, n, b, n, 0, c, n);
}

static void loop_cblas_sdot(void *fn, int n, long iters)
{
  cblas_sdot_fn *f = (cblas_sdot_fn *)fn;
  float s = 0;
  for (long i = 0; i < iters; i++)
    s = f(n, a, 1, b, 1);
  dot_out = s;
}

typedef struct case_s {
  const char *label;  /* row of the table */
  const char *symbol; /* name looked up in libblas.so.3 for B */
  void *interposed;   /* the symbol as this program resolves it: A */
  loop_fn *loop;
  int n;              /* operand dimension */
  int is_dot;         /* output is dot_out, else c[n*n] */
} case_t;

static const case_t cases[] = {
    {"sgemm NN n=4", "sgemm_", (void *)sgemm_, loop_sgemm, 4, 0},
    {"sgemm NN n=64", "sgemm_", (void *)sgemm_, loop_sgemm, 64, 0},
    {"sdot n=16", "sdot_", (void *)sdot_, loop_sdot, 16, 1},
    {"cblas_sgemm row n=4", "cblas_sgemm", (void *)cblas_sgemm, loop_cblas_sgemm, 4, 0},
    {"cblas_sdot n=16", "cblas_sdot", (void *)cblas_sdot, loop_cblas_sdot, 16, 1},
};
enum { NCASES = sizeof cases / sizeof *cases };

/* Runs one call of fn and copies its output (after poisoning it with NaN) into out;
 * returns the number of floats written. */
static size_t one_output(const case_t *k, void *fn, float *out)
{
  size_t len = (size_t)k->n * (size_t)k->n;
  if (k->is_dot) {
    dot_out = NAN;
    k->loop(fn, k->n, 1);
    out[0] = dot_out;
    return 1;
  }
  for (size_t i = 0; i < len; i++)
    c[i] = NAN;
  k->loop(fn, k->n, 1);
  memcpy(out, c, len * sizeof *out);
  return len;
}

/* Checks that A and B write the same bits and no NaN. Returns 0, or -1 with a message. */
static int check_same(const case_t *k, void *fa, void *fb)
{
  static float outa[MAX_N * MAX_N], outb[MAX_N * MAX_N];
  size_t len = one_output(k, fa, outa);
  one_output(k, fb, outb);
  for (size_t i = 0; i < len; i++)
    if (isnan(outa[i]) || memcmp(&outa[i], &outb[i], sizeof outa[i]) != 0) {
      fprintf(stderr, "bench_passthrough: %s: agent and library disagree at output %zu "
                      "(%g vs %g)\n", k->label, i, outa[i], outb[i]);
      return -1;
    }
  return 0;
}

/* ns per call of a batch of iters calls. */
static double batch_ns(const case_t *k, void *fn, long iters)
{
  uint64_t t0 = bn_now_ns();
  k->loop(fn, k->n, iters);
  return (double)(bn_now_ns() - t0) / (double)iters;
}

/* Batch size for which one batch of fn lasts about BATCH_TARGET_NS (this also warms up).
 * Each size is timed three times and the fastest counts, so one preemption cannot stop the
 * doubling early. */
static long calibrate(const case_t *k, void *fn)
{
  long iters = 1;
  double ns;
  for (;;) {
    ns = batch_ns(k, fn, iters);
    for (int i = 0; i < 2; i++)
      ns = fmin(ns, batch_ns(k, fn, iters));
    if (ns * (double)iters >= BATCH_TARGET_NS / 4)
      break;
    iters *= 2;
  }
  long sized = (long)(BATCH_TARGET_NS / ns);
  return sized > 0 ? sized : 1;
}

/* Measures one case and prints its row. Returns 0, or -1 when the agent is not in front or
 * the outputs differ. */
static int run_case(const case_t *k, void *lib, int rounds)
{
  void *fa = k->interposed, *fb = dlsym(lib, k->symbol);
  if (!fb) {
    fprintf(stderr, "bench_passthrough: libblas.so.3 has no %s\n", k->symbol);
    return -1;
  }
  if (fa == fb) {
    fprintf(stderr, "bench_passthrough: %s resolves to libblas.so.3 itself: the agent is not "
                    "in front (is %s loadable?)\n", k->symbol, OPJIT_AGENT_PATH);
    return -1;
  }
  if (check_same(k, fa, fb))
    return -1;
  long iters = calibrate(k, fb);
  double *ta = calloc((size_t)rounds, sizeof *ta), *tb = calloc((size_t)rounds, sizeof *tb);
  double *diff = calloc((size_t)rounds, sizeof *diff), *ratio = calloc((size_t)rounds, sizeof *ratio);
  if (!ta || !tb || !diff || !ratio) {
    fprintf(stderr, "bench_passthrough: out of memory\n");
    free(ta), free(tb), free(diff), free(ratio);
    return -1;
  }
  for (int r = -WARMUP_ROUNDS; r < rounds; r++) {
    double x, y;
    if (r & 1) {
      y = batch_ns(k, fb, iters);
      x = batch_ns(k, fa, iters);
    } else {
      x = batch_ns(k, fa, iters);
      y = batch_ns(k, fb, iters);
    }
    if (r < 0)
      continue;
    ta[r] = x, tb[r] = y, diff[r] = x - y, ratio[r] = x / y;
  }
  size_t n = (size_t)rounds;
  double d = bn_median(diff, n);
  printf("%-22s %10.1f %10.1f %10.1f %7.1f %8.3f %8ld  %s\n", k->label, bn_median(ta, n),
         bn_median(tb, n), d, bn_half_iqr(diff, n), bn_median(ratio, n), iters,
         d <= GOAL_NS ? "ok" : "over");
  free(ta), free(tb), free(diff), free(ratio);
  return 0;
}

/* The measuring process: the agent is preloaded. */
static int measure(int rounds)
{
  void *lib = dlopen("libblas.so.3", RTLD_NOLOAD | RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "bench_passthrough: libblas.so.3 is not loaded: %s\n", dlerror());
    return 1;
  }
  Dl_info di;
  char real[PATH_MAX] = "?";
  if (dladdr(dlsym(lib, "sgemm_"), &di) && di.dli_fname && !realpath(di.dli_fname, real))
    snprintf(real, sizeof real, "%s", di.dli_fname);
  const char *threads = getenv("OPENBLAS_NUM_THREADS");
  printf("pass-through per call: A = through the agent, B = %s directly\n", real);
  printf("OPENBLAS_NUM_THREADS=%s, %d rounds of one ~%.0f ms batch each, medians over rounds\n\n",
         threads ? threads : "(unset)", rounds, BATCH_TARGET_NS / 1e6);
  printf("%-22s %10s %10s %10s %7s %8s %8s\n", "case", "A ns", "B ns", "A-B ns", "+-", "A/B",
         "batch");
  srand(1);
  for (int i = 0; i < MAX_N * MAX_N; i++) {
    a[i] = (float)rand() / RAND_MAX * 2 - 1;
    b[i] = (float)rand() / RAND_MAX * 2 - 1;
  }
  for (int i = 0; i < NCASES; i++)
    if (run_case(&cases[i], lib, rounds))
      return 1;
  printf("A-B: median of per-round differences, +- half their interquartile range\n");
  printf("goal: <= %.0f ns added per call\n", GOAL_NS);
  fflush(stdout);
  return 0;
}

/* The launching process: re-runs this program under the agent with a scratch database,
 * then reports whether the agent recorded the run and removes the scratch folder. */
static int relaunch(char **argv)
{
  char dir[PATH_MAX], db[PATH_MAX + 32], preload[PATH_MAX + 32];
  if (bn_scratch_new(dir, sizeof dir))
    return 1;
  snprintf(db, sizeof db, "OPJIT_DB=%s/passthrough.db", dir);
  snprintf(preload, sizeof preload, "LD_PRELOAD=%s", OPJIT_AGENT_PATH);
  /* Profile mode: the cost of interception alone (bench_jit measures the JIT's kernels). */
  const char *add[] = {preload, db, "OPENBLAS_NUM_THREADS=1", "OPJIT_MODE=profile", NULL};
  char **env = bn_env(add);
  int status = env ? bn_spawn_wait("/proc/self/exe", argv, env, NULL) : -1;
  bn_env_free(env);
  int rc = 1;
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    struct stat st;
    int recorded = stat(db + strlen("OPJIT_DB="), &st) == 0;
    printf("the agent recorded the run in its database: %s\n", recorded ? "yes" : "NO");
    rc = !recorded;
  } else if (status != -1 && WIFSIGNALED(status)) {
    fprintf(stderr, "bench_passthrough: the measuring process died of signal %d\n",
            WTERMSIG(status));
  }
  bn_scratch_free(dir);
  return rc;
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 31;
  if (rounds < 1) {
    fprintf(stderr, "usage: %s [rounds]   (rounds >= 1, default 31)\n", argv[0]);
    return 2;
  }
  const char *pre = getenv("LD_PRELOAD");
  if (pre && strstr(pre, "libopjit.so"))
    return measure(rounds);
  return relaunch(argv);
}
