/* SPDX-License-Identifier: MIT */
/* bench_passthrough: what the agent adds to one BLAS call, side by side with what it calls, in
 * one process. Three sets of rows, each measured in a process of its own:
 *   pass    A is the symbol as the program resolves it (sgemm_ → the agent's wrapper →
 *           OpenBLAS) in OPJIT_MODE=profile, B libblas.so.3's own definition (dlsym on the
 *           loaded library): the agent's cost on a call it only counts.
 *   served  A is the symbol again, now in OPJIT_MODE=jit with a published variant serving the
 *           call (OPJIT_DUEL=0: published whether or not it beats the library, whose speed is
 *           not what is measured; OPJIT_HOT_CALLS=8), B the agent's own kernel for the
 *           signature called directly (found by name in /tmp/perf-PID.map, OPJIT_PERF_MAP=1):
 *           the agent's cost on a call its kernel serves (bench_jit's J - K, in one process).
 *           After the process exits, its database says which share of each row's calls the
 *           variant served (a variant the in-run judge demoted serves none: its row measures
 *           the original).
 *   threads no agent: the library's own call in a process with one thread (A) and with a
 *           second one that only waits (B). glibc's mutexes take a plain store while a process
 *           has one thread and a locked instruction once it has had two (never going back), and
 *           OpenBLAS locks one twice a call where its small-matrix kernels do not take the
 *           shape (its buffer's blas_memory_alloc and _free). The agent's writer is such a
 *           thread: a single-threaded program pays B - A from its first call under the agent on
 *           every call the library runs, which the pass rows (the agent's threads behind both
 *           sides) leave out. Per round two fork children of a one-thread process time one
 *           batch each (order alternating).
 * Each round times a batch of A and a batch of B (order alternating), ~3 ms each; the table
 * holds the medians over rounds. Run without the agent preloaded, it re-runs itself under
 * LD_PRELOAD=libopjit.so with OPENBLAS_NUM_THREADS=1 and a scratch OPJIT_DB, once per set
 * (BENCH_AGENT names another build's libopjit.so, its modules beside it: a change's before);
 * the threads set without the agent, with OPENBLAS_NUM_THREADS=1 (no pool of its own).
 *
 *   bench_passthrough [rounds [all|pass|served|threads]]     (default 31 all)
 *   bench_passthrough count CASE CALLS
 *   bench_passthrough count-pass CASE CALLS
 * count: the served row whose label starts with CASE, CALLS calls of A (in loop_agent_*) then of
 * B (in loop_kernel_*) untimed, for an instruction count per call (docs/benchmarks.md: run under
 * callgrind with --trace-children=yes and OPJIT_ISA=avx2, valgrind hiding AVX-512); count-pass:
 * the same for the pass row whose label starts with CASE (B: the library's own definition). */
#define _GNU_SOURCE
#include "bench.h"

#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The BLAS interfaces under test, as Debian's libblas.so.3 defines them (LP64). */
void sgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k,
            const float *alpha, const float *a, const int *lda, const float *b, const int *ldb,
            const float *beta, float *c, const int *ldc);
void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k,
            const double *alpha, const double *a, const int *lda, const double *b,
            const int *ldb, const double *beta, double *c, const int *ldc);
float sdot_(const int *n, const float *x, const int *incx, const float *y, const int *incy);
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);
void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a,
                 int lda, const double *b, int ldb, double beta, double *c, int ldc);
float cblas_sdot(int n, const float *x, int incx, const float *y, int incy);

typedef void sgemm_fn(const char *, const char *, const int *, const int *, const int *,
                      const float *, const float *, const int *, const float *, const int *,
                      const float *, float *, const int *);
typedef void dgemm_fn(const char *, const char *, const int *, const int *, const int *,
                      const double *, const double *, const int *, const double *,
                      const int *, const double *, double *, const int *);
typedef float sdot_fn(const int *, const float *, const int *, const float *, const int *);
typedef void cblas_sgemm_fn(int, int, int, int, int, int, float, const float *, int,
                            const float *, int, float, float *, int);
typedef void cblas_dgemm_fn(int, int, int, int, int, int, double, const double *, int,
                            const double *, int, double, double *, int);
typedef float cblas_sdot_fn(int, const float *, int, const float *, int);
/* A JIT kernel as the agent calls it (agent/tier.h): A, B, C, alpha, beta. */
typedef void kernel_fn(const void *, const void *, void *, double, double);

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111 };
enum { MAX_N = 64 };                /* largest operand dimension of any case */
enum { WARMUP_ROUNDS = 3 };         /* untimed rounds before the measured ones */
enum { HOT_CALLS = 64 };            /* calls that make a served row's signature hot (8 needed) */
#define BATCH_TARGET_NS 3000000.0   /* a batch of calls lasts about this long */
#define GOAL_NS 20.0                /* what the agent may add per call */
#define SETTLE_MS 120000            /* longest wait for a served row's kernel */

/* Operands, shared by all cases: a and b are inputs, c the gemm output, dot_out the last dot;
 * the d* arrays the same in double. */
static float a[MAX_N * MAX_N], b[MAX_N * MAX_N], c[MAX_N * MAX_N];
static double da[MAX_N * MAX_N], db_[MAX_N * MAX_N], dc[MAX_N * MAX_N];
static volatile float dot_out;

/* Calls fn iters times on the case's operands. */
typedef void loop_fn(void *fn, int n, long iters);

/* ... sgemm_ and dgemm_ with the transpositions ta, tb. */
static void sgemm_calls(void *fn, const char *ta, const char *tb, int n, long iters)
{
  static const float one = 1, zero = 0;
  sgemm_fn *f = (sgemm_fn *)fn;
  for (long i = 0; i < iters; i++)
    f(ta, tb, &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n);
}

static void dgemm_calls(void *fn, const char *ta, const char *tb, int n, long iters)
{
  static const double one = 1, zero = 0;
  dgemm_fn *f = (dgemm_fn *)fn;
  for (long i = 0; i < iters; i++)
    f(ta, tb, &n, &n, &n, &one, da, &n, db_, &n, &zero, dc, &n);
}

static void loop_sgemm(void *fn, int n, long iters) { sgemm_calls(fn, "N", "N", n, iters); }
static void loop_dgemm(void *fn, int n, long iters) { dgemm_calls(fn, "N", "N", n, iters); }
static void loop_sgemm_nt(void *fn, int n, long iters) { sgemm_calls(fn, "N", "T", n, iters); }
static void loop_dgemm_tn(void *fn, int n, long iters) { dgemm_calls(fn, "T", "N", n, iters); }

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

static void loop_cblas_dgemm(void *fn, int n, long iters)
{
  cblas_dgemm_fn *f = (cblas_dgemm_fn *)fn;
  for (long i = 0; i < iters; i++)
    f(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, n, n, n, 1, da, n, db_, n, 0, dc, n);
}

static void loop_cblas_sdot(void *fn, int n, long iters)
{
  cblas_sdot_fn *f = (cblas_sdot_fn *)fn;
  float s = 0;
  for (long i = 0; i < iters; i++)
    s = f(n, a, 1, b, 1);
  dot_out = s;
}

/* The agent's kernels called as the agent calls them: a row-major GEMM's kernel takes B before
 * A (C^T = B^T A^T), a dot product's writes its result through C. */
static void loop_kernel_s(void *fn, int n, long iters)
{
  kernel_fn *f = (kernel_fn *)fn;
  (void)n;
  for (long i = 0; i < iters; i++)
    f(a, b, c, 1.0, 0.0);
}

static void loop_kernel_d(void *fn, int n, long iters)
{
  kernel_fn *f = (kernel_fn *)fn;
  (void)n;
  for (long i = 0; i < iters; i++)
    f(da, db_, dc, 1.0, 0.0);
}

static void loop_kernel_s_swapped(void *fn, int n, long iters)
{
  kernel_fn *f = (kernel_fn *)fn;
  (void)n;
  for (long i = 0; i < iters; i++)
    f(b, a, c, 1.0, 0.0);
}

static void loop_kernel_d_swapped(void *fn, int n, long iters)
{
  kernel_fn *f = (kernel_fn *)fn;
  (void)n;
  for (long i = 0; i < iters; i++)
    f(db_, da, dc, 1.0, 0.0);
}

static void loop_kernel_sdot(void *fn, int n, long iters)
{
  kernel_fn *f = (kernel_fn *)fn;
  float s = 0;
  (void)n;
  for (long i = 0; i < iters; i++)
    f(a, b, &s, 0.0, 0.0);
  dot_out = s;
}

enum out_kind { OUT_S, OUT_D, OUT_DOT }; /* the output: c, dc (n x n), dot_out */

typedef struct case_s {
  const char *label;  /* row of the table */
  const char *symbol; /* pass: name looked up in libblas.so.3 for B */
  void *interposed;   /* the symbol as this program resolves it: A */
  loop_fn *loop;      /* calls A (pass: and B) */
  loop_fn *kloop;     /* served: calls B, the agent's kernel */
  int n;              /* operand dimension */
  int out;            /* enum out_kind */
  /* served: the signature's params as the database spells them (op, api) */
  const char *op, *api;
} case_t;

static const case_t pass_cases[] = {
    {"sgemm NN n=4", "sgemm_", (void *)sgemm_, loop_sgemm, NULL, 4, OUT_S},
    {"sgemm NN n=64", "sgemm_", (void *)sgemm_, loop_sgemm, NULL, 64, OUT_S},
    {"dgemm NN n=4", "dgemm_", (void *)dgemm_, loop_dgemm, NULL, 4, OUT_D},
    {"sdot n=16", "sdot_", (void *)sdot_, loop_sdot, NULL, 16, OUT_DOT},
    {"cblas_sgemm row n=4", "cblas_sgemm", (void *)cblas_sgemm, loop_cblas_sgemm, NULL, 4, OUT_S},
    {"cblas_dgemm row n=4", "cblas_dgemm", (void *)cblas_dgemm, loop_cblas_dgemm, NULL, 4, OUT_D},
    {"cblas_sdot n=16", "cblas_sdot", (void *)cblas_sdot, loop_cblas_sdot, NULL, 16, OUT_DOT},
};

static const case_t thread_cases[] = {
    {"sgemm NN n=4", "sgemm_", NULL, loop_sgemm, NULL, 4, OUT_S},
    {"sgemm NT n=8", "sgemm_", NULL, loop_sgemm_nt, NULL, 8, OUT_S},
    {"dgemm NN n=16", "dgemm_", NULL, loop_dgemm, NULL, 16, OUT_D},
    {"dgemm TN n=16", "dgemm_", NULL, loop_dgemm_tn, NULL, 16, OUT_D},
    {"sgemm NN n=64", "sgemm_", NULL, loop_sgemm, NULL, 64, OUT_S},
};

#define SERVED(label, fn, loop, kloop, n, out, op, api) \
  {label, NULL, (void *)fn, loop, kloop, n, out, op, api}
static const case_t served_cases[] = {
    SERVED("sgemm NN n=4", sgemm_, loop_sgemm, loop_kernel_s, 4, OUT_S, "gemm", "fortran"),
    SERVED("sgemm NN n=16", sgemm_, loop_sgemm, loop_kernel_s, 16, OUT_S, "gemm", "fortran"),
    SERVED("dgemm NN n=4", dgemm_, loop_dgemm, loop_kernel_d, 4, OUT_D, "gemm", "fortran"),
    SERVED("dgemm NN n=16", dgemm_, loop_dgemm, loop_kernel_d, 16, OUT_D, "gemm", "fortran"),
    SERVED("cblas_sgemm row n=4", cblas_sgemm, loop_cblas_sgemm, loop_kernel_s_swapped, 4, OUT_S,
           "gemm", "cblas"),
    SERVED("cblas_sgemm row n=16", cblas_sgemm, loop_cblas_sgemm, loop_kernel_s_swapped, 16, OUT_S,
           "gemm", "cblas"),
    SERVED("cblas_dgemm row n=4", cblas_dgemm, loop_cblas_dgemm, loop_kernel_d_swapped, 4, OUT_D,
           "gemm", "cblas"),
    SERVED("cblas_dgemm row n=16", cblas_dgemm, loop_cblas_dgemm, loop_kernel_d_swapped, 16,
           OUT_D, "gemm", "cblas"),
    SERVED("sdot n=16", sdot_, loop_sdot, loop_kernel_sdot, 16, OUT_DOT, "dot", "fortran"),
    SERVED("cblas_sdot n=16", cblas_sdot, loop_cblas_sdot, loop_kernel_sdot, 16, OUT_DOT, "dot",
           "cblas"),
};
#define COUNT_OF(x) (int)(sizeof(x) / sizeof *(x))

static int is_f64(const case_t *k) { return k->out == OUT_D; }

/* Runs one call of loop(fn) and copies its output (after poisoning it with NaN) into out, as
 * doubles; returns the number of values written. */
static size_t one_output(const case_t *k, loop_fn *loop, void *fn, double *out)
{
  size_t len = (size_t)k->n * (size_t)k->n;
  switch (k->out) {
  case OUT_DOT:
    dot_out = NAN;
    loop(fn, k->n, 1);
    out[0] = dot_out;
    return 1;
  case OUT_S:
    for (size_t i = 0; i < len; i++)
      c[i] = NAN;
    loop(fn, k->n, 1);
    for (size_t i = 0; i < len; i++)
      out[i] = c[i];
    return len;
  default:
    for (size_t i = 0; i < len; i++)
      dc[i] = NAN;
    loop(fn, k->n, 1);
    memcpy(out, dc, len * sizeof *out);
    return len;
  }
}

/* Checks that A and B write the same values and no NaN: the same bits when tol is 0, else
 * within tol relative to 1 + |B|. Returns 0, or -1 with a message. */
static int check_same(const case_t *k, void *fa, loop_fn *la, void *fb, loop_fn *lb, double tol)
{
  static double outa[MAX_N * MAX_N], outb[MAX_N * MAX_N];
  size_t len = one_output(k, la, fa, outa);
  one_output(k, lb, fb, outb);
  for (size_t i = 0; i < len; i++)
    if (isnan(outa[i]) ||
        (tol == 0 ? memcmp(&outa[i], &outb[i], sizeof outa[i]) != 0
                  : !(fabs(outa[i] - outb[i]) <= tol * (1 + fabs(outb[i]))))) {
      fprintf(stderr, "bench_passthrough: %s: A and B disagree at output %zu (%g vs %g)\n",
              k->label, i, outa[i], outb[i]);
      return -1;
    }
  return 0;
}

/* ns per call of a batch of iters calls. */
static double batch_ns(loop_fn *loop, void *fn, int n, long iters)
{
  uint64_t t0 = bn_now_ns();
  loop(fn, n, iters);
  return (double)(bn_now_ns() - t0) / (double)iters;
}

/* Batch size for which one batch of fn lasts about BATCH_TARGET_NS (this also warms up).
 * Each size is timed three times and the fastest counts, so one preemption cannot stop the
 * doubling early. */
static long calibrate(loop_fn *loop, void *fn, int n)
{
  long iters = 1;
  double ns;
  for (;;) {
    ns = batch_ns(loop, fn, n, iters);
    for (int i = 0; i < 2; i++)
      ns = fmin(ns, batch_ns(loop, fn, n, iters));
    if (ns * (double)iters >= BATCH_TARGET_NS / 4)
      break;
    iters *= 2;
  }
  long sized = (long)(BATCH_TARGET_NS / ns);
  return sized > 0 ? sized : 1;
}

/* Times A against B, interleaved, and prints the row. Returns 0, or -1 when out of memory. */
static int time_pair(const case_t *k, void *fa, loop_fn *la, void *fb, loop_fn *lb, int rounds)
{
  long iters = calibrate(lb, fb, k->n);
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
      y = batch_ns(lb, fb, k->n, iters);
      x = batch_ns(la, fa, k->n, iters);
    } else {
      x = batch_ns(la, fa, k->n, iters);
      y = batch_ns(lb, fb, k->n, iters);
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
  fflush(stdout);
  free(ta), free(tb), free(diff), free(ratio);
  return 0;
}

/* A pass-through row. Returns 0, or -1 when the agent is not in front or the outputs differ. */
static int run_pass(const case_t *k, void *lib, int rounds)
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
  if (check_same(k, fa, k->loop, fb, k->loop, 0))
    return -1;
  return time_pair(k, fa, k->loop, fb, k->loop, rounds);
}

/* The start of the name the JIT gives k's kernel (jit/gemm.c, jt_gemm_name): its problem, before
 * the generation choices. */
static void kernel_prefix(const case_t *k, char *buf, size_t len)
{
  char t = is_f64(k) ? 'd' : 's';
  if (k->out == OUT_DOT)
    snprintf(buf, len, "opjit_%cdot_n%d_", t, k->n);
  else
    snprintf(buf, len, "opjit_%cgemm_NN_%dx%dx%d_l%d_%d_%d_a1_b0_", t, k->n, k->n, k->n, k->n,
             k->n, k->n);
}

/* The last kernel the agent registered in this process's perf map whose name starts with
 * prefix, or NULL. */
static void *perf_map_find(const char *prefix)
{
  char path[64], line[512];
  snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
  FILE *f = fopen(path, "re");
  if (!f)
    return NULL;
  void *found = NULL;
  while (fgets(line, sizeof line, f)) {
    unsigned long long lo;
    char name[256];
    if (sscanf(line, "%llx %*x %255s", &lo, name) == 2 &&
        strncmp(name, prefix, strlen(prefix)) == 0)
      found = (void *)(uintptr_t)lo;
  }
  fclose(f);
  return found;
}

/* Makes k's signature hot, waits until the JIT is idle and finds its kernel. Returns it, or NULL
 * with a message (the JIT compiled nothing for it: no LLVM, a CPU without AVX2). */
static void *served_kernel(const case_t *k)
{
  static int (*settle)(long);
  if (!settle)
    settle = (int (*)(long))dlsym(RTLD_DEFAULT, "opjit_settle");
  k->loop(k->interposed, k->n, HOT_CALLS);
  int rc = settle ? settle(SETTLE_MS) : -1;
  k->loop(k->interposed, k->n, HOT_CALLS); /* past the variant's verified calls */
  char prefix[128];
  kernel_prefix(k, prefix, sizeof prefix);
  void *fn = perf_map_find(prefix);
  if (!fn)
    fprintf(stderr, "bench_passthrough: %s: no kernel %s* in the perf map (opjit_settle: %d)\n",
            k->label, prefix, rc);
  return fn;
}

static const case_t *served_case(const char *label)
{
  for (int i = 0; i < COUNT_OF(served_cases); i++)
    if (strncmp(served_cases[i].label, label, strlen(label)) == 0)
      return &served_cases[i];
  return NULL;
}

/* The row's two sides as separate functions, so an instruction count tells them apart. */
static __attribute__((noinline)) void loop_agent_calls(const case_t *k, long calls)
{
  k->loop(k->interposed, k->n, calls);
}
static __attribute__((noinline)) void loop_kernel_calls(const case_t *k, void *fn, long calls)
{
  k->kloop(fn, k->n, calls);
}
/* ... a pass row's B, the library's own definition, named as the served rows' B is. */
static void loop_library_calls(const case_t *k, void *fn, long calls)
{
  const case_t lib = {.loop = k->loop, .kloop = k->loop, .n = k->n};
  loop_kernel_calls(&lib, fn, calls);
}

static void fill_operands(void)
{
  srand(1);
  for (int i = 0; i < MAX_N * MAX_N; i++) {
    a[i] = (float)rand() / RAND_MAX * 2 - 1;
    b[i] = (float)rand() / RAND_MAX * 2 - 1;
    da[i] = a[i], db_[i] = b[i];
  }
}

static const case_t *pass_case(const char *label)
{
  for (int i = 0; i < COUNT_OF(pass_cases); i++)
    if (strncmp(pass_cases[i].label, label, strlen(label)) == 0)
      return &pass_cases[i];
  return NULL;
}

/* The measuring process of the pass rows: the agent is preloaded (count: CALLS calls of one
 * row, untimed). */
static int measure_pass(int rounds, const char *count_case, long count_calls)
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
  if (count_case) {
    const case_t *k = pass_case(count_case);
    void *fb = k ? dlsym(lib, k->symbol) : NULL;
    if (!fb) {
      fprintf(stderr, "bench_passthrough: no pass row starts with '%s' (or libblas.so.3 lacks "
                      "its symbol)\n", count_case);
      return 1;
    }
    k->loop(k->interposed, k->n, HOT_CALLS); /* the signature's first calls: activation */
    loop_agent_calls(k, count_calls);
    loop_library_calls(k, fb, count_calls);
    printf("%s: %ld calls through the agent (loop_agent_calls), %ld of the library "
           "(loop_kernel_calls)\n", k->label, count_calls, count_calls);
    return 0;
  }
  const char *threads = getenv("OPENBLAS_NUM_THREADS");
  printf("pass-through per call (OPJIT_MODE=profile): A = through the agent, B = %s directly\n",
         real);
  printf("OPENBLAS_NUM_THREADS=%s, %d rounds of one ~%.0f ms batch each, medians over rounds\n\n",
         threads ? threads : "(unset)", rounds, BATCH_TARGET_NS / 1e6);
  printf("%-22s %10s %10s %10s %7s %8s %8s\n", "case", "A ns", "B ns", "A-B ns", "+-", "A/B",
         "batch");
  for (int i = 0; i < COUNT_OF(pass_cases); i++)
    if (run_pass(&pass_cases[i], lib, rounds))
      return 1;
  printf("A-B: median of per-round differences, +- half their interquartile range\n");
  printf("goal: <= %.0f ns added per call\n", GOAL_NS);
  fflush(stdout);
  return 0;
}

/* The measuring process of the served rows (count: CALLS calls of one row, untimed). */
static int measure_served(int rounds, const char *count_case, long count_calls)
{
  char path[64];
  snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
  int rc = 0;
  if (count_case) {
    const case_t *k = served_case(count_case);
    void *fn = k ? served_kernel(k) : NULL;
    if (!k)
      fprintf(stderr, "bench_passthrough: no served row starts with '%s'\n", count_case);
    if (fn) {
      loop_agent_calls(k, count_calls);
      loop_kernel_calls(k, fn, count_calls);
      printf("%s: %ld calls through the agent (loop_agent_calls), %ld of its kernel "
             "(loop_kernel_calls)\n", k->label, count_calls, count_calls);
    }
    rc = !fn;
  } else {
    printf("\nserved per call (OPJIT_MODE=jit, OPJIT_DUEL=0): A = through the agent, its "
           "variant serving, B = the agent's kernel called directly\n");
    printf("%d rounds of one ~%.0f ms batch each, medians over rounds\n\n", rounds,
           BATCH_TARGET_NS / 1e6);
    printf("%-22s %10s %10s %10s %7s %8s %8s\n", "case", "A ns", "B ns", "A-B ns", "+-", "A/B",
           "batch");
    for (int i = 0; i < COUNT_OF(served_cases) && !rc; i++) {
      const case_t *k = &served_cases[i];
      void *fn = served_kernel(k);
      if (!fn) {
        printf("%-22s  no kernel (see above)\n", k->label);
        continue;
      }
      /* Within floating-point tolerance: a burst's call runs the original (agent/compare.h). */
      rc = check_same(k, k->interposed, k->loop, fn, k->kloop, is_f64(k) ? 1e-12 : 1e-5) ||
           time_pair(k, k->interposed, k->loop, fn, k->kloop, rounds);
    }
    printf("A-B: median of per-round differences, +- half their interquartile range\n");
  }
  fflush(stdout);
  unlink(path);
  return rc;
}

/* Prints, from the served run's database, each served row's variant status and the share of its
 * signature's calls the variant served. Returns 0, or -1 when the database cannot be read. */
static int served_shares(const char *db)
{
  sqlite3 *h = NULL;
  sqlite3_stmt *q = NULL;
  int rc = sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_prepare_v2(
        h,
        "SELECT v.status, v.calls, (SELECT sum(calls) FROM run_sigs WHERE sig_id = s.id)"
        " FROM signatures s LEFT JOIN variants v ON v.sig_id = s.id"
        " WHERE json_extract(s.params, '$.op') = ?1 AND json_extract(s.params, '$.dtype') = ?2"
        " AND json_extract(s.params, '$.api') = ?3 AND json_extract(s.params, '$.n') = ?4",
        -1, &q, NULL);
  if (rc != SQLITE_OK) {
    fprintf(stderr, "bench_passthrough: cannot read the agent's database %s: %s\n", db,
            h ? sqlite3_errmsg(h) : "out of memory");
    sqlite3_close(h);
    return -1;
  }
  printf("variant calls served, from the run's database:");
  for (int i = 0; i < COUNT_OF(served_cases); i++) {
    const case_t *k = &served_cases[i];
    sqlite3_reset(q);
    sqlite3_bind_text(q, 1, k->op, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, is_f64(k) ? "f64" : "f32", -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, k->api, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 4, k->n);
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL) {
      double v = sqlite3_column_double(q, 1), all = sqlite3_column_double(q, 2);
      printf("%s %s: %s %.1f%%", i % 2 ? "," : "\n ", k->label,
             (const char *)sqlite3_column_text(q, 0), all > 0 ? 100 * v / all : 0);
    } else {
      printf("%s %s: no variant", i % 2 ? "," : "\n ", k->label);
    }
  }
  printf("\n");
  sqlite3_finalize(q);
  sqlite3_close(h);
  return 0;
}

/* ---- the threads set ---------------------------------------------------------------------- */

static void *waiting_thread(void *arg)
{
  (void)arg;
  for (;;)
    pause();
  return NULL;
}

/* The threads this process has (/proc/self/status), or -1. */
static int threads_now(void)
{
  FILE *f = fopen("/proc/self/status", "re");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "Threads: %d", &n) == 1)
      break;
  if (f)
    fclose(f);
  return n;
}

/* ns per call of one batch of k's iters calls of fn in a fork child of this one-thread process,
 * after starting a second thread when threaded (after a warm-up batch of a quarter: the child's
 * copies of the pages it writes); -1 when the child failed. */
static double child_batch(const case_t *k, void *fn, long iters, int threaded)
{
  int fd[2];
  if (pipe(fd))
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    double ns = -1;
    pthread_t t;
    if (!threaded || pthread_create(&t, NULL, waiting_thread, NULL) == 0) {
      k->loop(fn, k->n, iters / 4 + 1);
      ns = batch_ns(k->loop, fn, k->n, iters);
    }
    _exit(write(fd[1], &ns, sizeof ns) == sizeof ns ? 0 : 1);
  }
  close(fd[1]);
  double ns = -1;
  if (pid < 0 || read(fd[0], &ns, sizeof ns) != sizeof ns)
    ns = -1;
  close(fd[0]);
  if (pid > 0)
    waitpid(pid, NULL, 0);
  return ns;
}

/* The measuring process of the threads rows: no agent, OPENBLAS_NUM_THREADS=1. */
static int measure_threads(int rounds)
{
  void *lib = dlopen("libblas.so.3", RTLD_NOLOAD | RTLD_NOW);
  const char *core = getenv("OPENBLAS_CORETYPE");
  if (!lib || threads_now() != 1) {
    fprintf(stderr, "bench_passthrough: threads: %s\n",
            lib ? "the process has threads already (a BLAS pool?): no one-thread side"
                : "libblas.so.3 is not loaded");
    return 1;
  }
  printf("\na second thread in the process (no agent): A = the library's call with the process's "
         "one thread, B = the same call once a second thread waits beside it\n");
  printf("OpenBLAS core: %s; %d rounds of a ~%.0f ms batch in each of two fork children, "
         "medians over rounds\n\n", core && *core ? core : "its own choice", rounds,
         BATCH_TARGET_NS / 1e6);
  printf("%-22s %10s %10s %10s %7s %8s %8s\n", "case", "A ns", "B ns", "B-A ns", "+-", "B/A",
         "batch");
  size_t nr = (size_t)rounds;
  double *ta = calloc(nr, sizeof *ta), *tb = calloc(nr, sizeof *tb);
  double *diff = calloc(nr, sizeof *diff), *ratio = calloc(nr, sizeof *ratio);
  int rc = !ta || !tb || !diff || !ratio;
  for (int i = 0; !rc && i < COUNT_OF(thread_cases); i++) {
    const case_t *k = &thread_cases[i];
    void *fn = dlsym(lib, k->symbol);
    long iters = fn ? calibrate(k->loop, fn, k->n) : 0;
    for (int r = 0; fn && r < rounds; r++) {
      double x = r & 1 ? -1 : child_batch(k, fn, iters, 0), y = child_batch(k, fn, iters, 1);
      if (r & 1)
        x = child_batch(k, fn, iters, 0);
      if (x <= 0 || y <= 0) {
        fn = NULL;
        break;
      }
      ta[r] = x, tb[r] = y, diff[r] = y - x, ratio[r] = y / x;
    }
    if (!fn) {
      fprintf(stderr, "bench_passthrough: threads: %s: no timing (symbol or child failed)\n",
              k->label);
      rc = 1;
      break;
    }
    size_t n = (size_t)rounds;
    printf("%-22s %10.1f %10.1f %10.1f %7.1f %8.3f %8ld\n", k->label, bn_median(ta, n),
           bn_median(tb, n), bn_median(diff, n), bn_half_iqr(diff, n), bn_median(ratio, n),
           iters);
    fflush(stdout);
  }
  if (!rc)
    printf("B-A: median of per-round differences, +- half their interquartile range\n");
  free(ta), free(tb), free(diff), free(ratio);
  return rc;
}

/* The launching process: re-runs this program under the agent with a scratch database for one
 * set of rows (served: in jit mode), then checks that the agent recorded the run (served: and
 * prints what its variants served) and removes the scratch folder; the threads set without the
 * agent. */
static int relaunch(char **argv, const char *set)
{
  int served = strcmp(set, "served") == 0, alone = strcmp(set, "threads") == 0;
  char dir[PATH_MAX], db[PATH_MAX + 32], preload[PATH_MAX + 32];
  if (bn_scratch_new(dir, sizeof dir))
    return 1;
  snprintf(db, sizeof db, "OPJIT_DB=%s/passthrough.db", dir);
  const char *agent = getenv("BENCH_AGENT");
  snprintf(preload, sizeof preload, "LD_PRELOAD=%s", agent && *agent ? agent : OPJIT_AGENT_PATH);
  /* bn_env drops OPJIT_*: an OPJIT_ISA given (callgrind's avx2) is handed on, and so is an
   * OPJIT_TIME_EVERY (callgrind's counts compared at one rate: under valgrind a clock read costs
   * what it does there, and the timings' budget follows it, agent/compare.h) */
  char isa[64] = "", every[64] = "";
  if (getenv("OPJIT_ISA"))
    snprintf(isa, sizeof isa, "OPJIT_ISA=%s", getenv("OPJIT_ISA"));
  if (getenv("OPJIT_TIME_EVERY"))
    snprintf(every, sizeof every, "OPJIT_TIME_EVERY=%s", getenv("OPJIT_TIME_EVERY"));
  /* Profile mode: the cost of interception alone. Served: a variant serves each row's calls. */
  const char *pass[] = {preload, db, "OPENBLAS_NUM_THREADS=1", "OPJIT_MODE=profile",
                        "BENCH_PASSTHROUGH_SET=pass", every[0] ? every : NULL, NULL};
  const char *jit[] = {preload, db, "OPENBLAS_NUM_THREADS=1", "OPJIT_MODE=jit",
                       "OPJIT_DUEL=0", "OPJIT_HOT_CALLS=8", "OPJIT_HOT_PAYBACK=0",
                       "OPJIT_SAMPLE_HZ=0", "OPJIT_PERF_MAP=1", "BENCH_PASSTHROUGH_SET=served",
                       isa[0] ? isa : every[0] ? every : NULL, isa[0] && every[0] ? every : NULL, NULL};
  const char *threads[] = {"OPENBLAS_NUM_THREADS=1", "BENCH_PASSTHROUGH_SET=threads", NULL};
  char **env = bn_env(alone ? threads : served ? jit : pass);
  /* this program by its path, not /proc/self/exe: valgrind follows it (count) */
  char self[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  self[len > 0 ? len : 0] = 0;
  int status = env && len > 0 ? bn_spawn_wait(self, argv, env, NULL) : -1;
  bn_env_free(env);
  int rc = 1;
  if (alone && status != -1 && WIFEXITED(status)) {
    rc = WEXITSTATUS(status) != 0;
  } else if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    struct stat st;
    int recorded = stat(db + strlen("OPJIT_DB="), &st) == 0;
    if (recorded && served)
      recorded = served_shares(db + strlen("OPJIT_DB=")) == 0;
    printf("the agent recorded the run in its database: %s\n", recorded ? "yes" : "NO");
    fflush(stdout);
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
  int count_pass = argc > 1 && strcmp(argv[1], "count-pass") == 0;
  int count = count_pass || (argc > 1 && strcmp(argv[1], "count") == 0);
  int rounds = count ? 1 : argc > 1 ? atoi(argv[1]) : 31;
  const char *set = count_pass ? "pass" : count ? "served" : argc > 2 ? argv[2] : "all";
  long calls = count && argc > 3 ? atol(argv[3]) : 0;
  if (rounds < 1 ||
      (strcmp(set, "all") && strcmp(set, "pass") && strcmp(set, "served") &&
       strcmp(set, "threads")) ||
      (count && (argc != 4 || calls < 1))) {
    fprintf(stderr, "usage: %s [rounds [all|pass|served|threads]]   (rounds >= 1, default 31 "
                    "all)\n"
                    "       %s count|count-pass CASE CALLS\n", argv[0], argv[0]);
    return 2;
  }
  const char *pre = getenv("LD_PRELOAD"), *which = getenv("BENCH_PASSTHROUGH_SET");
  if (which && strcmp(which, "threads") == 0 && !(pre && strstr(pre, "libopjit.so"))) {
    fill_operands();
    return measure_threads(rounds);
  }
  if (pre && strstr(pre, "libopjit.so") && which) {
    fill_operands();
    return strcmp(which, "served") == 0 ? measure_served(rounds, count ? argv[2] : NULL, calls)
                                        : measure_pass(rounds, count ? argv[2] : NULL, calls);
  }
  int rc = 0;
  static const char *const sets[] = {"pass", "served", "threads"};
  for (int i = 0; i < 3 && !rc; i++)
    if (!strcmp(set, "all") || !strcmp(set, sets[i]))
      rc |= relaunch(argv, sets[i]);
  return rc;
}
