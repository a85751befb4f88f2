/* SPDX-License-Identifier: MIT */
/* bench_jit_worker: the measuring child of bench_jit. Linked against the system BLAS, it calls
 * sgemm_/dgemm_/cblas_sgemm/cblas_dgemm through its PLT, so whatever bench_jit preloads
 * (nothing, LIBXSMM, the agent) is in front. bench_jit keeps one worker per configuration
 * alive and hands out the batches one at a time, so that the configurations' batches of a case
 * are interleaved milliseconds apart and a noisy neighbour slows all of them alike.
 *
 *   bench_jit_worker [-i] [-d DB -e EXPECT] [-k JIT_SO] [-c CHECK_FILE] [-w WARM_MS]
 *                    [-b BATCH_MS] SPEC...
 * SPEC is DT API TA TB BETA ':' N, e.g. sFNN1:64 (sgemm_, 'N', 'N', alpha 1, beta 1, square 64,
 * tight leading dimensions; API F = Fortran, C = CBLAS row-major). Options:
 *   -d DB      the agent is preloaded and records into DB: first call every case enough to
 *              make it hot (2 x OPJIT_HOT_CALLS), then poll DB until EXPECT variants are no
 *              longer 'queued' (compiled, or failed), at most 60 s, before timing anything
 *   -k JIT_SO  no agent: dlopen JIT_SO (libopjit-jit.so), compile every case with
 *              opjit_jit_api (printing "compile SPEC MS") and call the kernels directly
 *   -c FILE    where the "c" command appends each checked case's C
 *   -i         print the "sym" lines and exit (bench_jit reads which core OpenBLAS picked
 *              from what OPENBLAS_VERBOSE=2 makes it print on stderr at load)
 * On start-up it prints "sym NAME PATH" (the object defining each BLAS symbol here), then
 * "ready", and answers one line per command read from stdin:
 *   p I    prepare case I: operands, a batch size of ~BATCH_MS (default 3), WARM_MS
 *          (default 30) of calls              -> "ok ITERS" (0: no kernel for it, with -k)
 *   t      one untimed short batch, then one timed batch   -> "ns NS_PER_CALL"
 *   f      the widest vectors' f32 FMA peak, measured now in this process (agent/machine.c:
 *          the fastest of 5 rounds of ~0.2 ms), for a share of peak taken in the same moments
 *          as the batch before it                          -> "gf GFLOPS"
 *   F      the same loop timed as a batch is: one run as long as a batch (BATCH_MS)
 *                                                          -> "gf GFLOPS"
 *   g      the core's clock read right after the last t or F (bn_clock_ghz): what that
 *          batch or run left it at                         -> "ghz GHZ"
 *   L      the clock while the peak's loop runs as a batch runs the case: pieces as long as
 *          one of its calls, as many as a batch has calls, a probe (bn_clock_probe_ghz)
 *          after every 32nd; the median probe of the last two thirds   -> "ghz GHZ"
 *   T      the same inside one untimed batch of the case            -> "ghz GHZ"
 *   c      the case from C0 (8 times under the agent, which runs the original on 1 call in
 *          256), against a reference: the worst |C - ref| over the elementwise bound
 *          2 (K+2) eps (sum_k |a||b| + |beta c0|) (above 1: wrong); appends C to FILE
 *                                                          -> "err WORST"
 *   q      exit */
#define _GNU_SOURCE
#include "bench.h"
#include "blas.h"

#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/machine.h"
#include "jit/jit.h"

typedef struct wcase_s {
  char spec[24];
  int f64, cblas, ta, tb, beta, n;
  void *a, *b, *c;      /* operands: n x n, tight leading dimensions */
  jt_gemm_fn kernel;    /* -k: the compiled kernel */
} wcase_t;

static FILE *out;

/* The clock read inside a batch (L, T): a probe after every PROBE_EVERY calls. */
#define PROBE_EVERY 32
#define PROBES_MAX 4096
typedef struct probes_s {
  double ghz[PROBES_MAX];
  long n;
} probes_t;

static void probe(void *arg)
{
  probes_t *p = arg;
  if (p->n < PROBES_MAX)
    p->ghz[p->n++] = bn_clock_probe_ghz();
}

/* The median probe of the batch's last two thirds: the clock it settled at (0: none). */
static double settled(probes_t *p)
{
  long from = p->n / 3;
  return p->n > from ? bn_median(p->ghz + from, (size_t)(p->n - from)) : 0;
}
static const jt_api_t *jit; /* -k */

/* Parses SPEC into k. Returns 0 or -1. */
static int parse(const char *spec, wcase_t *k)
{
  memset(k, 0, sizeof *k);
  if (strlen(spec) >= sizeof k->spec || strlen(spec) < 7 || spec[5] != ':')
    return -1;
  snprintf(k->spec, sizeof k->spec, "%s", spec);
  k->f64 = spec[0] == 'd';
  k->cblas = spec[1] == 'C';
  k->ta = spec[2] == 'T';
  k->tb = spec[3] == 'T';
  k->beta = spec[4] - '0';
  k->n = atoi(spec + 6);
  if (!strchr("sd", spec[0]) || !strchr("FC", spec[1]) || !strchr("NT", spec[2]) ||
      !strchr("NT", spec[3]) || (k->beta != 0 && k->beta != 1) || k->n < 1 || k->n > 4096)
    return -1;
  return 0;
}

static size_t esz(const wcase_t *k) { return k->f64 ? 8 : 4; }

static double get(const wcase_t *k, const void *p, size_t i)
{
  return k->f64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

static void put(const wcase_t *k, void *p, size_t i, double v)
{
  if (k->f64)
    ((double *)p)[i] = v;
  else
    ((float *)p)[i] = (float)v;
}

/* Values in [-1, 1] from a fixed seed per operand, the same in every configuration. */
static void fill(const wcase_t *k, void *p, unsigned seed)
{
  size_t len = (size_t)k->n * (size_t)k->n;
  for (size_t i = 0; i < len; i++) {
    seed = seed * 1103515245u + 12345u;
    put(k, p, i, (double)(seed >> 8 & 0xffff) / 32767.5 - 1.0);
  }
}

static void fill_c0(const wcase_t *k) { fill(k, k->c, 3u + (unsigned)k->n); }

static int alloc_case(wcase_t *k)
{
  size_t bytes = (size_t)k->n * (size_t)k->n * esz(k);
  bytes = (bytes + 63) / 64 * 64;
  k->a = aligned_alloc(64, bytes);
  k->b = aligned_alloc(64, bytes);
  k->c = aligned_alloc(64, bytes);
  if (!k->a || !k->b || !k->c) {
    fprintf(stderr, "bench_jit_worker: out of memory for %s\n", k->spec);
    return -1;
  }
  fill(k, k->a, 1u + (unsigned)k->n);
  fill(k, k->b, 2u + (unsigned)k->n);
  fill_c0(k);
  return 0;
}

static void free_case(wcase_t *k)
{
  free(k->a), free(k->b), free(k->c);
  k->a = k->b = k->c = NULL;
}

/* The column-major problem of a case (row-major CBLAS: C^T = op(B)^T op(A)^T). */
static jt_gemm_t problem(const wcase_t *k)
{
  return (jt_gemm_t){.f64 = k->f64, .ta = k->cblas ? k->tb : k->ta, .tb = k->cblas ? k->ta : k->tb,
                     .m = k->n, .n = k->n, .k = k->n, .lda = k->n, .ldb = k->n, .ldc = k->n,
                     .alpha_one = 1, .beta_class = k->beta};
}

/* iters calls of the case. */
static void run(const wcase_t *k, long iters)
{
  const blasint n = k->n;
  const char ta = k->ta ? 'T' : 'N', tb = k->tb ? 'T' : 'N';
  const int cta = k->ta ? CBLAS_TRANS : CBLAS_NO_TRANS, ctb = k->tb ? CBLAS_TRANS : CBLAS_NO_TRANS;
  if (k->kernel) {
    const void *a = k->cblas ? k->b : k->a, *b = k->cblas ? k->a : k->b;
    for (long i = 0; i < iters; i++)
      k->kernel(a, b, k->c, 1.0, k->beta);
  } else if (k->f64) {
    const double one = 1, beta = k->beta;
    if (k->cblas)
      for (long i = 0; i < iters; i++)
        cblas_dgemm(CBLAS_ROW_MAJOR, cta, ctb, n, n, n, 1.0, k->a, n, k->b, n, beta, k->c, n);
    else
      for (long i = 0; i < iters; i++)
        dgemm_(&ta, &tb, &n, &n, &n, &one, k->a, &n, k->b, &n, &beta, k->c, &n);
  } else {
    const float one = 1, beta = (float)k->beta;
    if (k->cblas)
      for (long i = 0; i < iters; i++)
        cblas_sgemm(CBLAS_ROW_MAJOR, cta, ctb, n, n, n, 1.0f, k->a, n, k->b, n, beta, k->c, n);
    else
      for (long i = 0; i < iters; i++)
        sgemm_(&ta, &tb, &n, &n, &n, &one, k->a, &n, k->b, &n, &beta, k->c, &n);
  }
}

static double batch_ns(const wcase_t *k, long iters)
{
  uint64_t t0 = bn_now_ns();
  run(k, iters);
  return (double)(bn_now_ns() - t0) / (double)iters;
}

/* A batch size for which a batch lasts about batch_ms: the fastest of three timings per size,
 * doubling. */
static long calibrate(const wcase_t *k, double batch_ms)
{
  long iters = 1;
  double ns;
  for (;;) {
    ns = batch_ns(k, iters);
    for (int i = 0; i < 2; i++)
      ns = fmin(ns, batch_ns(k, iters));
    if (ns * (double)iters >= batch_ms * 1e6 / 4)
      break;
    iters *= 2;
  }
  iters = (long)(batch_ms * 1e6 / ns);
  return iters > 0 ? iters : 1;
}

/* op(A)[i, p] and C's element (i, j) of a case, as indices into the row- or column-major
 * arrays. */
static size_t ix_a(const wcase_t *k, int i, int p)
{
  size_t n = (size_t)k->n;
  int t = k->ta;
  return k->cblas ? (t ? (size_t)p * n + (size_t)i : (size_t)i * n + (size_t)p)
                  : (t ? (size_t)i * n + (size_t)p : (size_t)p * n + (size_t)i);
}
static size_t ix_b(const wcase_t *k, int p, int j)
{
  size_t n = (size_t)k->n;
  int t = k->tb;
  return k->cblas ? (t ? (size_t)j * n + (size_t)p : (size_t)p * n + (size_t)j)
                  : (t ? (size_t)p * n + (size_t)j : (size_t)j * n + (size_t)p);
}
static size_t ix_c(const wcase_t *k, int i, int j)
{
  size_t n = (size_t)k->n;
  return k->cblas ? (size_t)i * n + (size_t)j : (size_t)j * n + (size_t)i;
}

/* Runs the case once from C0 (tries times: the agent runs the original on 1 call in 256)
 * and returns the worst |C - reference| / bound; appends the last C to f when f is given.
 * Returns -1 (and prints why) when out of memory. */
static double check(wcase_t *k, FILE *f, int tries)
{
  size_t len = (size_t)k->n * (size_t)k->n;
  double *ref = malloc(len * sizeof *ref), *bound = malloc(len * sizeof *bound);
  if (!ref || !bound) {
    free(ref), free(bound);
    fprintf(stderr, "bench_jit_worker: out of memory for the check of %s\n", k->spec);
    return -1;
  }
  fill_c0(k);
  double eps = k->f64 ? DBL_EPSILON : FLT_EPSILON;
  for (int i = 0; i < k->n; i++)
    for (int j = 0; j < k->n; j++) {
      double s = 0, mag = 0;
      for (int p = 0; p < k->n; p++) {
        double x = get(k, k->a, ix_a(k, i, p)), y = get(k, k->b, ix_b(k, p, j));
        s += x * y;
        mag += fabs(x * y);
      }
      double c0 = k->beta ? get(k, k->c, ix_c(k, i, j)) : 0;
      ref[ix_c(k, i, j)] = s + c0;
      bound[ix_c(k, i, j)] = 2.0 * (k->n + 2) * eps * (mag + fabs(c0)) + 4 * DBL_MIN;
    }
  double worst = 0;
  for (int t = 0; t < tries; t++) {
    fill_c0(k);
    run(k, 1);
    for (size_t i = 0; i < len; i++) {
      double e = fabs(get(k, k->c, i) - ref[i]) / bound[i];
      if (!(e <= worst)) /* NaN counts as worst */
        worst = isnan(e) ? INFINITY : e;
    }
  }
  if (f)
    fwrite(k->c, esz(k), len, f);
  free(ref), free(bound);
  return worst;
}

/* -d: makes every case hot, then waits until the agent's database shows expect signatures
 * settled: a variant past 'queued', or none to come ('unsupported': a long call its library
 * runs fast, agent/policy.h) (the writer flushes every OPJIT_FLUSH_MS), calling every case once
 * a poll meanwhile. Returns 0, or -1 after a timeout. */
static int wait_for_jit(wcase_t *cs, int nc, const char *db, int expect)
{
  const char *hot_env = getenv("OPJIT_HOT_CALLS");
  long hot = hot_env ? atol(hot_env) : 64;
  for (int i = 0; i < nc; i++) {
    if (alloc_case(&cs[i]))
      return -1;
    run(&cs[i], 2 * hot);
    free_case(&cs[i]);
  }
  uint64_t t0 = bn_now_ns();
  int done = 0;
  while (bn_now_ns() - t0 < 60000000000ull) {
    sqlite3 *h = NULL;
    sqlite3_stmt *q = NULL;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
      sqlite3_busy_timeout(h, 1000);
      if (sqlite3_prepare_v2(h, "SELECT (SELECT count(*) FROM variants WHERE status <> 'queued')"
                             " + (SELECT count(*) FROM run_sigs WHERE state = 'unsupported')",
                             -1, &q, NULL) == SQLITE_OK &&
          sqlite3_step(q) == SQLITE_ROW)
        done = sqlite3_column_int(q, 0);
    }
    sqlite3_finalize(q);
    sqlite3_close(h);
    if (done >= expect) {
      fprintf(out, "jit-wait %d variants in %.0f ms\n", done, (double)(bn_now_ns() - t0) / 1e6);
      return 0;
    }
    /* A program goes on calling: a long call that waited for the machine model or for its
     * timings is asked again at its next call (agent/tier.h, ag_tier_long_timed). */
    for (int i = 0; i < nc; i++) {
      if (alloc_case(&cs[i]))
        return -1;
      run(&cs[i], 1);
      free_case(&cs[i]);
    }
    usleep(50000);
  }
  fprintf(stderr, "bench_jit_worker: only %d of %d signatures settled after 60 s\n", done, expect);
  return -1;
}

static void print_symbol(const char *name)
{
  Dl_info di;
  void *p = dlsym(RTLD_DEFAULT, name);
  fprintf(out, "sym %s %s\n", name, p && dladdr(p, &di) && di.dli_fname ? di.dli_fname : "?");
}

int main(int argc, char **argv)
{
  const char *db = NULL, *jit_path = NULL, *check_path = NULL;
  double warm_ms = 30, batch_ms = 3, ghz = 0; /* ghz: the clock after the last t or F */
  int expect = 0, info = 0, opt;
  while ((opt = getopt(argc, argv, "id:e:k:c:w:b:")) != -1)
    switch (opt) {
    case 'i': info = 1; break;
    case 'd': db = optarg; break;
    case 'e': expect = atoi(optarg); break;
    case 'k': jit_path = optarg; break;
    case 'c': check_path = optarg; break;
    case 'w': warm_ms = atof(optarg); break;
    case 'b': batch_ms = atof(optarg); break;
    default: goto usage;
    }
  if (argc - optind < 1 || batch_ms <= 0)
    goto usage;
  out = stdout;
  int nc = argc - optind;
  wcase_t *cs = calloc((size_t)nc, sizeof *cs);
  if (!cs)
    return 1;
  for (int i = 0; i < nc; i++)
    if (parse(argv[optind + i], &cs[i])) {
      fprintf(stderr, "bench_jit_worker: bad case %s\n", argv[optind + i]);
      return 2;
    }
  print_symbol("sgemm_");
  print_symbol("cblas_sgemm");
  if (info)
    return 0;
  if (jit_path) {
    if (!(jit = bn_load_jit(jit_path, "bench_jit_worker")))
      return 1;
    for (int i = 0; i < nc; i++) {
      jt_gemm_t g = problem(&cs[i]);
      char err[512] = "";
      if (!jt_gemm_supported(&g))
        continue; /* no kernel: "p" answers "ok 0" */
      uint64_t t0 = bn_now_ns();
      size_t code_size = 0, obj_len = 0;
      void *obj = NULL;
      int rc = jit->gemm(&g, &cs[i].kernel, &code_size, &obj, &obj_len, err, sizeof err);
      free(obj);
      if (rc) {
        fprintf(stderr, "bench_jit_worker: %s does not compile: %s\n", cs[i].spec, err);
        return 1;
      }
      fprintf(out, "compile %s %.3f\n", cs[i].spec, (double)(bn_now_ns() - t0) / 1e6);
    }
  }
  if (db && wait_for_jit(cs, nc, db, expect))
    return 1;
  FILE *cf = check_path ? fopen(check_path, "w") : NULL;
  if (check_path && !cf) {
    perror(check_path);
    return 1;
  }
  fprintf(out, "ready\n");
  fflush(out);
  char line[64];
  wcase_t *k = NULL;
  long iters = 0;
  while (fgets(line, sizeof line, stdin)) {
    int i;
    if (sscanf(line, "p %d", &i) == 1 && i >= 0 && i < nc) {
      if (k)
        free_case(k);
      k = &cs[i];
      if (alloc_case(k))
        return 1;
      if (jit_path && !k->kernel) {
        iters = 0;
      } else {
        iters = calibrate(k, batch_ms);
        for (uint64_t t0 = bn_now_ns(); (double)(bn_now_ns() - t0) < warm_ms * 1e6;)
          run(k, iters);
      }
      fprintf(out, "ok %ld\n", iters);
    } else if (line[0] == 't' && k && iters) {
      run(k, iters / 8 + 1); /* back in the caches after the other configurations' batches */
      double t = batch_ns(k, iters);
      ghz = bn_clock_ghz();
      fprintf(out, "ns %.3f\n", t);
    } else if (line[0] == 'f') {
      ag_machine_t m;
      ag_machine_detect(&m);
      ag_machine_measure(&m);
      fprintf(out, "gf %.3f\n", m.gflops[0][m.widest]);
    } else if (line[0] == 'F') {
      ag_machine_t m;
      ag_machine_detect(&m);
      double gf = ag_machine_fma_gflops(&m, m.widest, 0, (uint64_t)(batch_ms * 1e6));
      ghz = bn_clock_ghz();
      fprintf(out, "gf %.3f\n", gf);
    } else if ((line[0] == 'L' || line[0] == 'T') && k && iters) {
      static probes_t p;
      p.n = 0;
      if (line[0] == 'L') {
        ag_machine_t m;
        ag_machine_detect(&m);
        ag_machine_fma_pieces(&m, m.widest, 0, (uint64_t)(batch_ms * 1e6 / (double)iters), iters,
                              PROBE_EVERY, probe, &p);
      } else {
        run(k, iters / 8 + 1);
        for (long i = PROBE_EVERY; i <= iters; i += PROBE_EVERY) {
          run(k, PROBE_EVERY);
          probe(&p);
        }
      }
      fprintf(out, "ghz %.4f\n", settled(&p));
    } else if (line[0] == 'g') {
      fprintf(out, "ghz %.4f\n", ghz);
    } else if (line[0] == 'c' && k && iters && cf) {
      double err = check(k, cf, db ? 8 : 1);
      fflush(cf);
      if (err < 0)
        return 1;
      fprintf(out, "err %.4f\n", err);
    } else if (line[0] == 'q') {
      break;
    } else {
      fprintf(stderr, "bench_jit_worker: unexpected command %s", line);
      return 2;
    }
    fflush(out);
  }
  if (k)
    free_case(k);
  if (cf)
    fclose(cf);
  fflush(NULL);
  _exit(0); /* LLVM's static destructors (-k) are no business of ours */
usage:
  fprintf(stderr, "usage: %s [-i] [-d DB -e EXPECT] [-k JIT_SO] [-c CHECK_FILE] [-w WARM_MS] "
                  "[-b BATCH_MS] SPEC...\n", argv[0]);
  return 2;
}
