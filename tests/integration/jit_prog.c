/* SPDX-License-Identifier: MIT */
/* A host program for the JIT tests: GEMM calls through whatever sgemm_/dgemm_/cblas_* the
 * process resolves (the agent, when preloaded), each result checked against Debian's reference
 * BLAS (libblas3's netlib library, loaded explicitly so the agent never sees those calls).
 *   sweep S P SEED   S random signatures (Fortran and CBLAS row/column-major, all transposes,
 *                    alpha/beta in {0, 1, -1, general}, padded leading dimensions, float and
 *                    double, M, N, K in 1..160), each called P times in passes separated by
 *                    short pauses (so compiled variants serve the later passes)
 *   large S P SEED   the same with M, N and K in 161..400
 *   square N P       four N^3 products (sgemm_ NN, dgemm_ TN, cblas_sgemm row-major NT,
 *                    cblas_dgemm column-major NT; padded leading dimensions, alpha and beta of
 *                    every class), P passes as sweep makes them, each product followed by 40
 *                    calls of an 8x8x8 sgemm_ (more than a fixed chain of 32 timed picks
 *                    after a long call; once compiled, the agent's fast path between long
 *                    calls)
 *   threads T N      T threads calling a shared set of signatures N times each
 *   alias            after a signature has a variant (200 calls, then the JIT settles), calls it
 *                    with C overlapping B: the result must be the original library's, bit for bit
 *   inf              an 8x8x8 sgemm whose A holds an infinity on its first 3 calls (then the JIT
 *                    settles), then finite
 *   many N           that 8x8x8 sgemm N times, finite, the JIT settled every 4096 calls
 *   crowd T [N]      T threads call that 8x8x8 sgemm at once (operands of their own) until
 *                    each has made 8,000 calls and the JIT has settled: its one signature gets
 *                    hot while all T run; with N, each makes N calls, the JIT left to itself
 *   mixed N          "many N" (after its first 1000 calls, the JIT settles: the hot sgemm's
 *                    compile and duel are over), then a 24x24x24 sgemm 3 times and a 40x40x40
 *                    dgemm N/1000 + 100 times: a hot signature, a cold one and a larger one
 *   badorder         cblas_sgemm with an order that is neither row- nor column-major, 20 times:
 *                    C must stay untouched (the library rejects the call)
 *   forkhot          fork first (the parent never calls BLAS); the child's signatures get hot
 *                    (the child settles after its first call)
 *   warmfork S A B   sweep S signatures of seed A once, then fork: the child sweeps S of seed B
 *                    20 times (new signatures, which it must compile itself)
 *   vec S P SEED     like sweep, for ?dot_/?axpy_/cblas_?dot/cblas_?axpy (unit and strided)
 *   gemv S P SEED    like sweep, for sgemv_/dgemv_/cblas_?gemv (row and column major, both
 *                    transposes, unit and non-unit strides)
 *   biggemv P        four GEMVs whose A spans 1 MB (sgemv_ N 1024x256, cblas_dgemv row-major
 *                    N 512x256, cblas_sgemv column-major T 256x1024, dgemv_ T 256x512; padded
 *                    leading dimensions, beta 0 and not), one whose A spans 9 MB (cblas_sgemv
 *                    column-major N 2048x1152: too large for the check on scratch operands)
 *                    and two GEMMs that are GEMVs (sgemm_ NN 1024x1x256, cblas_dgemm
 *                    row-major NN 1x512x256), P passes as sweep makes them
 *   few N [END]      that 8x8x8 sgemm N times, and nothing waits for the JIT; END "_exit" ends
 *                    the program with _exit, "exec" by executing /bin/true (after the line)
 *   exitcalls        registers an exit handler of its own, then calls the 8x8x8 sgemm 10 times;
 *                    the handler (it runs once the agent's exit began) calls a 16x16x16 sgemm
 *                    200 times, checked: status 3 on a mismatch (main has printed by then)
 *   exitcheck [late] registers an exit handler of its own, then calls the 8x8x8 sgemm until
 *                    the agent's first check waits for the exit (OPJIT_TEST_FAULT=hold-check,
 *                    or hold-check-slow, 500 ms past it: /tmp/opjit-held-PID; 60,000 calls at
 *                    most), then exits at once, the check
 *                    still to run: the handler exits with status 3 unless the check is over
 *                    by then (/tmp/opjit-held-PID.done); late (hold-check-late: the check
 *                    outlasts the exit's wait): unless it ends within 5 s without calling the
 *                    library (.late: it did)
 * Prints "calls N checked N mismatches M" and exits 1 when M > 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define REFBLAS "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"

typedef void (*sgemm_t)(const char *, const char *, const int *, const int *, const int *,
                        const float *, const float *, const int *, const float *, const int *,
                        const float *, float *, const int *);
typedef void (*sgemv_t)(const char *, const int *, const int *, const float *, const float *,
                        const int *, const float *, const int *, const float *, float *,
                        const int *);
typedef void (*dgemv_t)(const char *, const int *, const int *, const double *, const double *,
                        const int *, const double *, const int *, const double *, double *,
                        const int *);
void sgemv_(const char *, const int *, const int *, const float *, const float *, const int *,
            const float *, const int *, const float *, float *, const int *);
void dgemv_(const char *, const int *, const int *, const double *, const double *, const int *,
            const double *, const int *, const double *, double *, const int *);
float sdot_(const int *, const float *, const int *, const float *, const int *);
double ddot_(const int *, const double *, const int *, const double *, const int *);
void saxpy_(const int *, const float *, const float *, const int *, float *, const int *);
void daxpy_(const int *, const double *, const double *, const int *, double *, const int *);
float cblas_sdot(int, const float *, int, const float *, int);
double cblas_ddot(int, const double *, int, const double *, int);
void cblas_saxpy(int, float, const float *, int, float *, int);
void cblas_daxpy(int, double, const double *, int, double *, int);
void cblas_sgemv(int, int, int, int, float, const float *, int, const float *, int, float,
                 float *, int);
void cblas_dgemv(int, int, int, int, double, const double *, int, const double *, int, double,
                 double *, int);
typedef void (*dgemm_t)(const char *, const char *, const int *, const int *, const int *,
                        const double *, const double *, const int *, const double *,
                        const int *, const double *, double *, const int *);
void sgemm_(const char *, const char *, const int *, const int *, const int *, const float *,
            const float *, const int *, const float *, const int *, const float *, float *,
            const int *);
void dgemm_(const char *, const char *, const int *, const int *, const int *, const double *,
            const double *, const int *, const double *, const int *, const double *, double *,
            const int *);
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int,
                 float, float *, int);
void cblas_dgemm(int, int, int, int, int, int, double, const double *, int, const double *, int,
                 double, double *, int);

static sgemm_t ref_s;
static dgemm_t ref_d;
static sgemv_t ref_sv;
static dgemv_t ref_dv;
static long calls, mismatches;
static pthread_mutex_t count_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct gemm_sig_s {
  int f64, api, row;      /* api: 0 Fortran, 1 CBLAS; row: CBLAS row-major */
  char ta, tb;
  int m, n, k, lda, ldb, ldc;
  double alpha, beta;
} gemm_sig_t;

static uint64_t next(uint64_t *s)
{
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static int large; /* "large": random_sig's M, N and K in 161..400 */

static void random_sig(gemm_sig_t *g, uint64_t *s)
{
  static const double sc[] = {0, 1, -1, 0.5, -2.25};
  g->f64 = (int)(next(s) % 2);
  g->api = (int)(next(s) % 2);
  g->row = g->api && next(s) % 2;
  g->ta = "NTC"[next(s) % 3];
  g->tb = "NTC"[next(s) % 3];
  int big = next(s) % 8 == 0;
  int lo = large ? 161 : 1, span = large ? 240 : big ? 160 : 48;
  g->m = lo + (int)(next(s) % (unsigned)span);
  g->n = lo + (int)(next(s) % (unsigned)span);
  g->k = lo + (int)(next(s) % (unsigned)span);
  g->alpha = sc[next(s) % 5];
  g->beta = sc[next(s) % 5];
  /* Leading dimensions: rows of each operand as stored (row-major stores rows as columns). */
  int an = g->ta == 'N', bn = g->tb == 'N';
  int arows = an != g->row ? g->m : g->k, brows = bn != g->row ? g->k : g->n;
  g->lda = arows + (int)(next(s) % 3);
  g->ldb = brows + (int)(next(s) % 3);
  g->ldc = (g->row ? g->n : g->m) + (int)(next(s) % 3);
}

/* Elements an operand with rows x cols (as stored) and leading dimension ld spans. */
static size_t extent(int rows, int cols, int ld) { return (size_t)ld * (size_t)(cols - 1) + (size_t)rows; }

/* An operand of bytes between two PROT_NONE pages, ending where the page after it begins (or,
 * with front, beginning where the page before it ends): a kernel that reads or writes past its
 * operand's extent faults at once, where a heap block would hide it (or crash one run in a
 * hundred, where the block was mapped and ended on its page). */
static void *guarded(size_t bytes, int front)
{
  size_t pg = (size_t)sysconf(_SC_PAGESIZE), span = (bytes + pg - 1) / pg * pg;
  char *m = mmap(NULL, span + 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED || mprotect(m, pg, PROT_NONE) || mprotect(m + pg + span, pg, PROT_NONE)) {
    perror("jit_prog: guarded operand");
    exit(2);
  }
  return front ? m + pg : m + pg + span - bytes;
}

/* Which end the next call's operands are guarded at: each in turn. */
static int next_front(void)
{
  static _Atomic unsigned turn;
  return atomic_fetch_add(&turn, 1) % 2;
}

static void unguard(void *p, size_t bytes, int front)
{
  size_t pg = (size_t)sysconf(_SC_PAGESIZE), span = (bytes + pg - 1) / pg * pg;
  munmap(front ? (char *)p - pg : (char *)p + bytes - span - pg, span + 2 * pg);
}

/* Calls g through the process's BLAS, then the reference on copies; counts a mismatch when an
 * element differs by more than the bound (NaN where the reference has none included). The
 * operands are guarded, every other call at their front. */
static void call_and_check(const gemm_sig_t *g, uint64_t *s, int nan_c)
{
  int an = g->ta == 'N', bn = g->tb == 'N';
  /* Stored shapes (rows x cols in the storage order). */
  int ar = an != g->row ? g->m : g->k, ac = an != g->row ? g->k : g->m;
  int br = bn != g->row ? g->k : g->n, bc = bn != g->row ? g->n : g->k;
  int cr = g->row ? g->n : g->m, cc = g->row ? g->m : g->n;
  size_t na = extent(ar, ac, g->lda), nb = extent(br, bc, g->ldb), nc = extent(cr, cc, g->ldc);
  size_t es = g->f64 ? 8 : 4;
  int front = next_front();
  char *a = guarded(na * es, front), *b = guarded(nb * es, front), *c = guarded(nc * es, front);
  char *r = malloc(nc * es);
  char *aa = malloc(na * es), *ab = malloc(nb * es), *mag = malloc(nc * es);
  for (size_t i = 0; i < na + nb + nc; i++) {
    double v = ((double)(next(s) % 2001) - 1000) / 1000;
    char *p = i < na ? a + i * es : i < na + nb ? b + (i - na) * es : c + (i - na - nb) * es;
    if (i >= na + nb && nan_c)
      v = NAN;
    if (g->f64)
      *(double *)p = v;
    else
      *(float *)p = (float)v;
  }
  memcpy(r, c, nc * es);
  for (size_t i = 0; i < na; i++)
    g->f64 ? (((double *)aa)[i] = fabs(((double *)a)[i])) : (((float *)aa)[i] = fabsf(((float *)a)[i]));
  for (size_t i = 0; i < nb; i++)
    g->f64 ? (((double *)ab)[i] = fabs(((double *)b)[i])) : (((float *)ab)[i] = fabsf(((float *)b)[i]));
  for (size_t i = 0; i < nc; i++) {
    double v = g->f64 ? ((double *)c)[i] : ((float *)c)[i];
    v = isnan(v) ? 0 : fabs(v);
    g->f64 ? (((double *)mag)[i] = v) : (((float *)mag)[i] = (float)v);
  }
  int cta = g->ta == 'N' ? 111 : g->ta == 'T' ? 112 : 113;
  int ctb = g->tb == 'N' ? 111 : g->tb == 'T' ? 112 : 113;
  float fa = (float)g->alpha, fb = (float)g->beta;
  if (g->api == 0 && g->f64)
    dgemm_(&g->ta, &g->tb, &g->m, &g->n, &g->k, &g->alpha, (double *)a, &g->lda, (double *)b,
           &g->ldb, &g->beta, (double *)c, &g->ldc);
  else if (g->api == 0)
    sgemm_(&g->ta, &g->tb, &g->m, &g->n, &g->k, &fa, (float *)a, &g->lda, (float *)b, &g->ldb,
           &fb, (float *)c, &g->ldc);
  else if (g->f64)
    cblas_dgemm(g->row ? 101 : 102, cta, ctb, g->m, g->n, g->k, g->alpha, (double *)a, g->lda,
                (double *)b, g->ldb, g->beta, (double *)c, g->ldc);
  else
    cblas_sgemm(g->row ? 101 : 102, cta, ctb, g->m, g->n, g->k, fa, (float *)a, g->lda,
                (float *)b, g->ldb, fb, (float *)c, g->ldc);
  /* The reference in column-major terms: a row-major C is C^T = op(B)^T op(A)^T. */
  const char *p1 = g->row ? b : a, *p2 = g->row ? a : b, *q1 = g->row ? ab : aa, *q2 = g->row ? aa : ab;
  char t1 = g->row ? g->tb : g->ta, t2 = g->row ? g->ta : g->tb;
  int m = g->row ? g->n : g->m, n = g->row ? g->m : g->n, l1 = g->row ? g->ldb : g->lda,
      l2 = g->row ? g->lda : g->ldb;
  double aal = fabs(g->alpha), abe = fabs(g->beta);
  if (g->f64) {
    ref_d(&t1, &t2, &m, &n, &g->k, &g->alpha, (const double *)p1, &l1, (const double *)p2, &l2,
          &g->beta, (double *)r, &g->ldc);
    ref_d(&t1, &t2, &m, &n, &g->k, &aal, (const double *)q1, &l1, (const double *)q2, &l2, &abe,
          (double *)mag, &g->ldc);
  } else {
    float faa = (float)aal, fab = (float)abe;
    ref_s(&t1, &t2, &m, &n, &g->k, &fa, (const float *)p1, &l1, (const float *)p2, &l2, &fb,
          (float *)r, &g->ldc);
    ref_s(&t1, &t2, &m, &n, &g->k, &faa, (const float *)q1, &l1, (const float *)q2, &l2, &fab,
          (float *)mag, &g->ldc);
  }
  double eps = g->f64 ? DBL_EPSILON : FLT_EPSILON;
  long bad = 0;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      size_t ix = (size_t)j * g->ldc + i;
      double x = g->f64 ? ((double *)c)[ix] : ((float *)c)[ix];
      double y = g->f64 ? ((double *)r)[ix] : ((float *)r)[ix];
      double bound = 2.0 * (g->k + 2) * eps * (g->f64 ? ((double *)mag)[ix] : ((float *)mag)[ix]) + 4 * DBL_MIN;
      if (isnan(x) != isnan(y) || fabs(x - y) > bound)
        bad++;
    }
  if (bad)
    fprintf(stderr, "mismatch: %s %cgemm %s %c%c %dx%dx%d ld %d %d %d alpha %g beta %g: %ld elements\n",
            g->api ? "cblas" : "f77", g->f64 ? 'd' : 's', g->row ? "row" : "col", g->ta, g->tb,
            g->m, g->n, g->k, g->lda, g->ldb, g->ldc, g->alpha, g->beta, bad);
  pthread_mutex_lock(&count_mu);
  calls++;
  mismatches += bad != 0;
  pthread_mutex_unlock(&count_mu);
  unguard(a, na * es, front), unguard(b, nb * es, front), unguard(c, nc * es, front);
  free(r), free(aa), free(ab), free(mag);
}

/* Lets the compile thread work through its queue: opjit_settle (agent/opjit.h) waits for it
 * however loaded the machine is; without the agent in jit mode, a pause of guess_us. */
static void settle_or(useconds_t guess_us)
{
  int (*settle)(long) = (int (*)(long))dlsym(RTLD_DEFAULT, "opjit_settle");
  if (!settle || settle(60000) < 0)
    usleep(guess_us);
}

/* After pass p over nsigs signatures: after the first, the compiles it made hot (a guess of
 * 8 ms a kernel without the agent); after the others, 50 ms for the agent's background work. */
static void pause_after(int p, int nsigs)
{
  if (p > 0)
    usleep(50000);
  else
    settle_or(8000 * (useconds_t)nsigs);
}

static void sweep(int nsigs, int passes, uint64_t seed)
{
  gemm_sig_t *sigs = calloc((size_t)nsigs, sizeof *sigs);
  uint64_t s = seed;
  for (int i = 0; i < nsigs; i++)
    random_sig(&sigs[i], &s);
  for (int p = 0; p < passes; p++) {
    for (int i = 0; i < nsigs; i++)
      call_and_check(&sigs[i], &s, sigs[i].beta == 0 && next(&s) % 2);
    pause_after(p, nsigs);
  }
  free(sigs);
}

static void square(int n, int passes)
{
  gemm_sig_t sigs[] = {{0, 0, 0, 'N', 'N', n, n, n, 0, 0, 0, 1, 0},
                       {1, 0, 0, 'T', 'N', n, n, n, 0, 0, 0, -2.25, 1},
                       {0, 1, 1, 'N', 'T', n, n, n, 0, 0, 0, 0.5, 0},
                       {1, 1, 0, 'N', 'T', n, n, n, 0, 0, 0, 1, -1}};
  int nsigs = (int)(sizeof sigs / sizeof *sigs);
  uint64_t s = 5;
  for (int i = 0; i < nsigs; i++) { /* every dimension n: rows as stored, plus 1 or 2 */
    sigs[i].lda = n + 1 + i % 2, sigs[i].ldb = n + 2 - i % 2, sigs[i].ldc = n + 1;
  }
  gemm_sig_t small = {0, 0, 0, 'N', 'N', 8, 8, 8, 8, 8, 8, 1, 0};
  for (int p = 0; p < passes; p++) {
    for (int i = 0; i < nsigs; i++) {
      call_and_check(&sigs[i], &s, 0);
      for (int r = 0; r < 40; r++)
        call_and_check(&small, &s, 0);
    }
    pause_after(p, nsigs + 1);
  }
}

typedef struct worker_s {
  int id, n;
  const gemm_sig_t *sigs;
  int nsigs;
} worker_t;

static void *worker(void *p)
{
  worker_t *w = p;
  uint64_t s = 99 + (uint64_t)w->id;
  for (int i = 0; i < w->n; i++)
    call_and_check(&w->sigs[(i + w->id) % w->nsigs], &s, 0);
  return NULL;
}

/* t threads of n calls over 12 signatures; shared: in pairs that one kernel serves (the same
 * column-major problem through the Fortran and the CBLAS symbol). */
static void threads(int t, int n, int shared)
{
  enum { NS = 12 };
  gemm_sig_t sigs[NS];
  uint64_t s = 7;
  for (int i = 0; i < NS; i++) {
    random_sig(&sigs[i], &s);
    sigs[i].m = sigs[i].m % 24 + 1, sigs[i].n = sigs[i].n % 24 + 1, sigs[i].k = sigs[i].k % 24 + 1;
    sigs[i].row = 0, sigs[i].ta = sigs[i].tb = 'N'; /* keep the dimensions consistent */
    sigs[i].lda = sigs[i].m, sigs[i].ldb = sigs[i].k, sigs[i].ldc = sigs[i].m;
    if (shared && i % 2)
      sigs[i] = sigs[i - 1], sigs[i].api = !sigs[i - 1].api;
  }
  for (int i = 0; i < NS; i++) /* every signature hot, and compiled before the threads run */
    for (int r = 0; r < 8; r++)
      call_and_check(&sigs[i], &s, 0);
  settle_or(1000000);
  pthread_t th[64];
  worker_t w[64];
  for (int i = 0; i < t && i < 64; i++) {
    w[i] = (worker_t){i, n, sigs, NS};
    pthread_create(&th[i], NULL, worker, &w[i]);
  }
  for (int i = 0; i < t && i < 64; i++)
    pthread_join(th[i], NULL);
}

/* C overlapping B: the agent's guard must send the call to the original library. */
static void alias(void)
{
  void *h = dlopen("libblas.so.3", RTLD_NOW | RTLD_NOLOAD);
  sgemm_t lib = h ? (sgemm_t)dlsym(h, "sgemm_") : NULL;
  if (!lib || lib == (sgemm_t)sgemm_) {
    fprintf(stderr, "alias: no separate system sgemm_ to compare with\n");
    mismatches++;
    return;
  }
  enum { D = 24 };
  static float a[D * D], buf1[2 * D * D], buf2[2 * D * D];
  int d = D;
  float one = 1, zero = 0;
  for (int i = 0; i < D * D; i++)
    a[i] = (float)(i % 11) / 11;
  for (int i = 0; i < 200; i++) { /* make the signature hot and let it compile */
    sgemm_("N", "N", &d, &d, &d, &one, a, &d, buf1, &d, &zero, buf1 + D * D, &d);
    usleep(2000);
  }
  settle_or(0); /* its variant is there however long the compile took */
  for (int i = 0; i < 2 * D * D; i++)
    buf1[i] = buf2[i] = (float)(i % 7) / 7;
  /* C = buf + 8 overlaps B = buf: same signature, aliased operands. */
  sgemm_("N", "N", &d, &d, &d, &one, a, &d, buf1, &d, &zero, buf1 + 8, &d);
  lib("N", "N", &d, &d, &d, &one, a, &d, buf2, &d, &zero, buf2 + 8, &d);
  calls++;
  if (memcmp(buf1, buf2, sizeof buf1) != 0) {
    fprintf(stderr, "alias: the aliased call did not run the original library\n");
    mismatches++;
  }
}

/* One random GEMV through the process's BLAS and the reference (in double, on the same
 * inputs); counts a mismatch beyond the K-epsilon bound. */
static void gemv_call(uint64_t *s, int f64, int api, int row, int trans, int m, int n, int pad,
                      int inc, double alpha, double beta)
{
  int rows = row ? n : m, cols = row ? m : n; /* the stored matrix, column-major */
  int lda = rows + pad;
  int xl = trans ? m : n, yl = trans ? n : m;
  size_t es = f64 ? 8 : 4;
  int front = next_front();
  /* Elements each spans: a guard right after its last one */
  size_t ae = extent(rows, cols, lda), xe = (size_t)(xl - 1) * inc + 1;
  size_t ye = (size_t)(yl - 1) * inc + 1;
  size_t na = ae * es, nx = xe * es, ny = ye * es;
  char *a = guarded(na, front), *x = guarded(nx, front), *y = guarded(ny, front);
  char *r = malloc(ny);
  double *mag = malloc((size_t)yl * sizeof *mag);
  for (size_t i = 0; i < ae; i++) {
    double v = ((double)(next(s) % 2001) - 1000) / 1000;
    f64 ? (((double *)a)[i] = v) : (((float *)a)[i] = (float)v);
  }
  for (size_t i = 0; i < xe; i++) {
    double v = ((double)(next(s) % 2001) - 1000) / 1000;
    f64 ? (((double *)x)[i] = v) : (((float *)x)[i] = (float)v);
  }
  for (size_t i = 0; i < ye; i++) {
    double v = ((double)(next(s) % 2001) - 1000) / 1000;
    f64 ? (((double *)y)[i] = v) : (((float *)y)[i] = (float)v);
  }
  memcpy(r, y, ny);
  /* Column-major view: op = transpose when trans differs from row. */
  char t = (trans != 0) != (row != 0) ? 'T' : 'N';
  for (int i = 0; i < yl; i++) { /* the bound: |alpha| sum |a||x| + |beta||y| */
    double acc = 0;
    for (int j = 0; j < xl; j++) {
      size_t ix = t == 'N' ? (size_t)j * lda + i : (size_t)i * lda + j;
      double av = f64 ? ((double *)a)[ix] : ((float *)a)[ix];
      double xv = f64 ? ((double *)x)[(size_t)j * inc] : ((float *)x)[(size_t)j * inc];
      acc += fabs(av * xv);
    }
    double yv = f64 ? ((double *)y)[(size_t)i * inc] : ((float *)y)[(size_t)i * inc];
    mag[i] = fabs(alpha) * acc + fabs(beta) * fabs(yv);
  }
  int ct = trans ? 112 : 111;
  char tc = trans ? 'T' : 'N';
  float fa = (float)alpha, fb = (float)beta;
  if (api == 0 && f64)
    dgemv_(&tc, &m, &n, &alpha, (double *)a, &lda, (double *)x, &inc, &beta, (double *)y, &inc);
  else if (api == 0)
    sgemv_(&tc, &m, &n, &fa, (float *)a, &lda, (float *)x, &inc, &fb, (float *)y, &inc);
  else if (f64)
    cblas_dgemv(row ? 101 : 102, ct, m, n, alpha, (double *)a, lda, (double *)x, inc, beta,
                (double *)y, inc);
  else
    cblas_sgemv(row ? 101 : 102, ct, m, n, fa, (float *)a, lda, (float *)x, inc, fb, (float *)y,
                inc);
  if (f64)
    ref_dv(&t, &rows, &cols, &alpha, (double *)a, &lda, (double *)x, &inc, &beta, (double *)r, &inc);
  else
    ref_sv(&t, &rows, &cols, &fa, (float *)a, &lda, (float *)x, &inc, &fb, (float *)r, &inc);
  double eps = f64 ? DBL_EPSILON : FLT_EPSILON;
  int bad = 0;
  for (int i = 0; i < yl; i++) {
    double u = f64 ? ((double *)y)[(size_t)i * inc] : ((float *)y)[(size_t)i * inc];
    double v = f64 ? ((double *)r)[(size_t)i * inc] : ((float *)r)[(size_t)i * inc];
    bad |= fabs(u - v) > 2.0 * (xl + 2) * eps * mag[i] + 4 * DBL_MIN;
  }
  if (bad)
    fprintf(stderr, "mismatch: %s %cgemv %s %c %dx%d inc %d alpha %g beta %g\n",
            api ? "cblas" : "f77", f64 ? 'd' : 's', row ? "row" : "col", tc, m, n, inc, alpha, beta);
  calls++;
  mismatches += bad;
  unguard(a, na, front), unguard(x, nx, front), unguard(y, ny, front);
  free(r), free(mag);
}

/* One dot product or AXPY through the process's BLAS, checked in double precision. */
static void vec_call(uint64_t *s, int f64, int api, int axpy, int n, int inc, double alpha)
{
  size_t es = f64 ? 8 : 4, len = (size_t)(n - 1) * (size_t)inc + 1; /* the vectors' extent */
  int front = next_front();
  char *x = guarded(len * es, front), *y = guarded(len * es, front), *y0 = malloc(len * es);
  for (size_t i = 0; i < len; i++) {
    double a = ((double)(next(s) % 2001) - 1000) / 1000, b = ((double)(next(s) % 2001) - 1000) / 1000;
    if (f64)
      ((double *)x)[i] = a, ((double *)y)[i] = b;
    else
      ((float *)x)[i] = (float)a, ((float *)y)[i] = (float)b;
  }
  memcpy(y0, y, len * es);
#define X(i) (f64 ? ((double *)x)[(size_t)(i) * inc] : (double)((float *)x)[(size_t)(i) * inc])
#define Y0(i) (f64 ? ((double *)y0)[(size_t)(i) * inc] : (double)((float *)y0)[(size_t)(i) * inc])
#define Y(i) (f64 ? ((double *)y)[(size_t)(i) * inc] : (double)((float *)y)[(size_t)(i) * inc])
  double eps = f64 ? DBL_EPSILON : FLT_EPSILON;
  float fa = (float)alpha;
  int bad = 0;
  if (axpy) {
    if (api == 0 && f64)
      daxpy_(&n, &alpha, (double *)x, &inc, (double *)y, &inc);
    else if (api == 0)
      saxpy_(&n, &fa, (float *)x, &inc, (float *)y, &inc);
    else if (f64)
      cblas_daxpy(n, alpha, (double *)x, inc, (double *)y, inc);
    else
      cblas_saxpy(n, fa, (float *)x, inc, (float *)y, inc);
    for (int i = 0; i < n; i++) {
      double want = (f64 ? alpha : (double)fa) * X(i) + Y0(i);
      bad |= fabs(Y(i) - want) > 4 * eps * (fabs(alpha * X(i)) + fabs(Y0(i))) + 4 * DBL_MIN;
    }
  } else {
    double got = api == 0 ? (f64 ? ddot_(&n, (double *)x, &inc, (double *)y, &inc)
                                 : sdot_(&n, (float *)x, &inc, (float *)y, &inc))
                          : (f64 ? cblas_ddot(n, (double *)x, inc, (double *)y, inc)
                                 : cblas_sdot(n, (float *)x, inc, (float *)y, inc));
    double want = 0, mag = 0;
    for (int i = 0; i < n; i++)
      want += X(i) * Y(i), mag += fabs(X(i) * Y(i));
    bad = fabs(got - want) > 2.0 * (n + 2) * eps * mag + 4 * DBL_MIN;
  }
#undef X
#undef Y0
#undef Y
  if (bad)
    fprintf(stderr, "mismatch: %s %c%s n=%d inc %d alpha %g\n", api ? "cblas" : "f77",
            f64 ? 'd' : 's', axpy ? "axpy" : "dot", n, inc, alpha);
  calls++;
  mismatches += bad;
  unguard(x, len * es, front), unguard(y, len * es, front);
  free(y0);
}

static void vec_sweep(int nsigs, int passes, uint64_t seed)
{
  static const double sc[] = {0, 1, -1, 0.5, -2.25};
  typedef struct {
    int f64, api, axpy, n, inc;
    double alpha;
  } vs_t;
  vs_t *g = calloc((size_t)nsigs, sizeof *g);
  uint64_t s = seed;
  for (int i = 0; i < nsigs; i++) {
    g[i].f64 = (int)(next(&s) % 2), g[i].api = (int)(next(&s) % 2), g[i].axpy = (int)(next(&s) % 2);
    g[i].n = 1 + (int)(next(&s) % 300), g[i].inc = next(&s) % 8 == 0 ? 2 : 1;
    g[i].alpha = sc[next(&s) % 5];
  }
  for (int p = 0; p < passes; p++) {
    for (int i = 0; i < nsigs; i++)
      vec_call(&s, g[i].f64, g[i].api, g[i].axpy, g[i].n, g[i].inc, g[i].alpha);
    pause_after(p, nsigs);
  }
  free(g);
}

static void gemv_sweep(int nsigs, int passes, uint64_t seed)
{
  static const double sc[] = {0, 1, -1, 0.5, -2.25};
  typedef struct { int f64, api, row, trans, m, n, pad, inc; double alpha, beta; } gv_t;
  gv_t *g = calloc((size_t)nsigs, sizeof *g);
  uint64_t s = seed;
  for (int i = 0; i < nsigs; i++) {
    g[i].f64 = (int)(next(&s) % 2), g[i].api = (int)(next(&s) % 2);
    g[i].row = g[i].api && next(&s) % 2, g[i].trans = (int)(next(&s) % 2);
    g[i].m = 1 + (int)(next(&s) % 100), g[i].n = 1 + (int)(next(&s) % 100);
    g[i].pad = (int)(next(&s) % 3);
    g[i].inc = next(&s) % 8 == 0 ? 2 : 1, g[i].alpha = sc[next(&s) % 5], g[i].beta = sc[next(&s) % 5];
  }
  for (int p = 0; p < passes; p++) {
    for (int i = 0; i < nsigs; i++)
      gemv_call(&s, g[i].f64, g[i].api, g[i].row, g[i].trans, g[i].m, g[i].n, g[i].pad,
                g[i].inc, g[i].alpha, g[i].beta);
    pause_after(p, nsigs);
  }
  free(g);
}

static void big_gemvs(int passes)
{
  typedef struct { int f64, api, row, trans, m, n, pad; double alpha, beta; } gv_t;
  static const gv_t g[] = {{0, 0, 0, 0, 1024, 256, 1, 1, 0},
                           {1, 1, 1, 0, 512, 256, 2, -0.5, 1},
                           {0, 1, 0, 1, 256, 1024, 0, 2, 0.5},
                           {1, 0, 0, 1, 256, 512, 3, 1, 0},
                           {0, 1, 0, 0, 2048, 1152, 0, 1, 0}};
  gemm_sig_t mm[] = {{0, 0, 0, 'N', 'N', 1024, 1, 256, 1026, 256, 1024, -2, 0},
                     {1, 1, 1, 'N', 'N', 1, 512, 256, 256, 514, 512, -1, 0.5}};
  int nsigs = (int)(sizeof g / sizeof *g), nmm = (int)(sizeof mm / sizeof *mm);
  uint64_t s = 23;
  for (int p = 0; p < passes; p++) {
    for (int i = 0; i < nsigs; i++)
      gemv_call(&s, g[i].f64, g[i].api, g[i].row, g[i].trans, g[i].m, g[i].n, g[i].pad, 1,
                g[i].alpha, g[i].beta);
    for (int i = 0; i < nmm; i++)
      call_and_check(&mm[i], &s, 0);
    pause_after(p, nsigs + nmm);
  }
}

/* Calls an 8x8x8 sgemm n times, A holding +Inf at [0] for the first inf_calls_n calls, pausing
 * pause_us after each (so a variant can be compiled meanwhile). */
static void inf_calls(int n, int inf_calls_n, int pause_us)
{
  gemm_sig_t g = {.f64 = 0, .api = 0, .row = 0, .ta = 'N', .tb = 'N', .m = 8, .n = 8, .k = 8,
             .lda = 8, .ldb = 8, .ldc = 8, .alpha = 1, .beta = 0};
  /* A, B and C 16, 32 and 48 bytes into a 64-byte line (test_reasons: the duel places its
   * scratch operands as the program's lie) */
  static float mem[3][64 + 32] __attribute__((aligned(64))), r[64];
  float *a = mem[0] + 4, *b = mem[1] + 8, *c = mem[2] + 12;
  float one = 1, zero = 0;
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < 64; j++)
      a[j] = (float)(j % 5) - 2, b[j] = (float)(j % 3) - 1;
    if (i < inf_calls_n)
      a[0] = INFINITY;
    sgemm_("N", "N", &g.m, &g.n, &g.k, &one, a, &g.lda, b, &g.ldb, &zero, c, &g.ldc);
    ref_s("N", "N", &g.m, &g.n, &g.k, &one, a, &g.lda, b, &g.ldb, &zero, r, &g.ldc);
    calls++;
    for (int j = 0; j < 64; j++)
      if (!(c[j] == r[j] || (isnan(c[j]) && isnan(r[j])))) {
        mismatches++;
        break;
      }
    if (pause_us)
      usleep((useconds_t)pause_us);
  }
}

/* crowd: each thread's calls and mismatches (its own: no shared counter while they run). */
typedef struct crowd_s {
  long calls, mismatches, n; /* n: the calls to make, or 0: until crowd_stop */
} crowd_t;
static _Atomic int crowd_ready, crowd_stop;
static pthread_barrier_t crowd_all; /* every thread has made its first call (and so registered
                                       with the agent) before any makes its second */

static void *crowd_worker(void *p)
{
  crowd_t *w = p;
  const int n = 8;
  float a[64], b[64], c[64], r[64], one = 1, zero = 0;
  for (int j = 0; j < 64; j++)
    a[j] = (float)(j % 5) - 2, b[j] = (float)(j % 3) - 1;
  while (w->n ? w->calls < w->n : !atomic_load(&crowd_stop)) {
    sgemm_("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n);
    ref_s("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, r, &n);
    w->mismatches += memcmp(c, r, sizeof c) != 0;
    if (++w->calls == 1)
      pthread_barrier_wait(&crowd_all);
    else if (w->calls == 8000)
      atomic_fetch_add(&crowd_ready, 1);
  }
  return NULL;
}

static void crowd(int t, long n)
{
  pthread_t th[64];
  crowd_t w[64] = {{0}};
  if (t < 1 || t > 64 || pthread_barrier_init(&crowd_all, NULL, (unsigned)t) != 0) {
    mismatches++;
    return;
  }
  for (int i = 0; i < t; i++) {
    w[i].n = n;
    if (pthread_create(&th[i], NULL, crowd_worker, &w[i]) != 0) {
      fprintf(stderr, "crowd: cannot start thread %d of %d\n", i + 1, t);
      _exit(2); /* the others wait at the barrier for it */
    }
  }
  if (!n) {
    while (atomic_load(&crowd_ready) < t)
      usleep(1000);
    settle_or(1000000);
    atomic_store(&crowd_stop, 1);
  }
  for (int i = 0; i < t; i++) {
    pthread_join(th[i], NULL);
    calls += w[i].calls, mismatches += w[i].mismatches;
  }
  pthread_barrier_destroy(&crowd_all);
}

/* n calls of that 8x8x8 sgemm, the JIT settled after every 4096: a compile and its duel, or a
 * failed compile and the back-off after it, end within the run however little CPU the compile
 * thread gets beside the calls (no count of calls bounds that on a loaded machine). */
static void many(int n)
{
  for (int done = 0; done < n; done += 4096) {
    inf_calls(n - done < 4096 ? n - done : 4096, 0, 0);
    settle_or(0);
  }
}

/* exitcalls' exit handler, registered before the first call: it runs after the exit handler
 * the agent registers at that call (exit_begins), before the agent's final write. */
static void exit_calls(void)
{
  gemm_sig_t g = {.ta = 'N', .tb = 'N', .m = 16, .n = 16, .k = 16, .lda = 16, .ldb = 16,
                  .ldc = 16, .alpha = 1, .beta = 0};
  uint64_t seed = 5;
  long before = mismatches;
  for (int i = 0; i < 200; i++)
    call_and_check(&g, &seed, 0);
  if (mismatches != before) {
    fprintf(stderr, "exitcalls: %ld mismatches in the exit handler\n", mismatches - before);
    fflush(stdout);
    _exit(3);
  }
}

static char held_path[64], done_path[80], late_path[80];
static int held_seen, held_late;

/* exitcheck's exit handler, registered before the first call (so it runs after the exit
 * handlers the agent registers at that call, and before the libraries' destructors). With
 * late, the check outlasts the exit's wait: the handler waits for its end (5 s at most). */
static void check_over(void)
{
  if (!held_seen)
    return;
  for (int ms = 0; held_late && ms < 5000 && access(done_path, F_OK) != 0 &&
                   access(late_path, F_OK) != 0;
       ms++)
    usleep(1000);
  const char *why = remove(late_path) == 0 ? "called the library after the exit began"
                    : remove(done_path) != 0 ? "still ran when the exit handlers did"
                                             : NULL;
  if (why) {
    fprintf(stderr, "exitcheck: the agent's check %s\n", why);
    fflush(stdout);
    _exit(3);
  }
}

/* exitcheck: returns when the agent's held check has said so. */
static void until_check_held(int late)
{
  held_late = late;
  snprintf(held_path, sizeof held_path, "/tmp/opjit-held-%d", (int)getpid());
  snprintf(done_path, sizeof done_path, "%s.done", held_path);
  snprintf(late_path, sizeof late_path, "%s.late", held_path);
  remove(held_path), remove(done_path), remove(late_path); /* an earlier process's, same pid */
  atexit(check_over);
  for (int i = 0; i < 60000 && access(held_path, F_OK) != 0; i++)
    inf_calls(1, 0, 1000);
  held_seen = remove(held_path) == 0;
  if (!held_seen) {
    fprintf(stderr, "exitcheck: no check waited for the exit (%s)\n", held_path);
    mismatches++;
  }
}

/* few's END: prints the line, then ends as end says (_exit or exec of /bin/true). */
static void few_end(const char *end)
{
  printf("calls %ld checked %ld mismatches %ld\n", calls, calls, mismatches);
  fflush(stdout);
  if (!strcmp(end, "_exit"))
    _exit(mismatches != 0);
  if (!strcmp(end, "exec"))
    execl("/bin/true", "true", (char *)NULL);
  fprintf(stderr, "few: no such end %s\n", end);
  exit(2);
}

/* A fork child's end: its own line, its status from its own checks. */
static void child_exit(void)
{
  printf("child calls %ld checked %ld mismatches %ld\n", calls, calls, mismatches);
  exit(mismatches != 0);
}

/* Waits for a fork child; a failed child counts as a mismatch. */
static void reap(pid_t child)
{
  int st;
  waitpid(child, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st))
    mismatches++;
}

int main(int argc, char **argv)
{
  void *r = dlopen(REFBLAS, RTLD_NOW | RTLD_LOCAL);
  ref_s = r ? (sgemm_t)dlsym(r, "sgemm_") : NULL;
  ref_d = r ? (dgemm_t)dlsym(r, "dgemm_") : NULL;
  ref_sv = r ? (sgemv_t)dlsym(r, "sgemv_") : NULL;
  ref_dv = r ? (dgemv_t)dlsym(r, "dgemv_") : NULL;
  if (!ref_s || !ref_d || !ref_sv || !ref_dv) {
    fprintf(stderr, "reference BLAS %s not found (package libblas3)\n", REFBLAS);
    return 77;
  }
  const char *mode = argc > 1 ? argv[1] : "";
  if ((!strcmp(mode, "sweep") || (large = !strcmp(mode, "large"))) && argc > 4)
    sweep(atoi(argv[2]), atoi(argv[3]), strtoull(argv[4], NULL, 10));
  else if (!strcmp(mode, "square") && argc > 3)
    square(atoi(argv[2]), atoi(argv[3]));
  else if (!strcmp(mode, "threads") && argc > 3)
    threads(atoi(argv[2]), atoi(argv[3]), 0);
  else if (!strcmp(mode, "shared") && argc > 3)
    threads(atoi(argv[2]), atoi(argv[3]), 1);
  else if (!strcmp(mode, "alias"))
    alias();
  else if (!strcmp(mode, "vec") && argc > 4)
    vec_sweep(atoi(argv[2]), atoi(argv[3]), strtoull(argv[4], NULL, 10));
  else if (!strcmp(mode, "gemv") && argc > 4)
    gemv_sweep(atoi(argv[2]), atoi(argv[3]), strtoull(argv[4], NULL, 10));
  else if (!strcmp(mode, "biggemv") && argc > 2)
    big_gemvs(atoi(argv[2]));
  else if (!strcmp(mode, "few") && argc > 2) {
    inf_calls(atoi(argv[2]), 0, 0);
    if (argc > 3)
      few_end(argv[3]);
  }  else if (!strcmp(mode, "exitcalls")) {
    atexit(exit_calls);
    inf_calls(10, 0, 0);
  } else if (!strcmp(mode, "exitcheck"))
    until_check_held(argc > 2 && !strcmp(argv[2], "late"));
  else if (!strcmp(mode, "inf")) {
    inf_calls(3, 3, 1000);
    settle_or(0); /* the variant compiled on the infinite calls serves the finite ones */
    inf_calls(297, 0, 1000);
  } else if (!strcmp(mode, "crowd") && argc > 2)
    crowd(atoi(argv[2]), argc > 3 ? atol(argv[3]) : 0);
  else if (!strcmp(mode, "many") && argc > 2)
    many(atoi(argv[2]));
  else if (!strcmp(mode, "mixed") && argc > 2) {
    int n = atoi(argv[2]);
    uint64_t seed = 17;
    gemm_sig_t cold = {.ta = 'N', .tb = 'N', .m = 24, .n = 24, .k = 24, .lda = 24, .ldb = 24,
                       .ldc = 24, .alpha = 1, .beta = 0};
    gemm_sig_t big = {.f64 = 1, .ta = 'N', .tb = 'N', .m = 40, .n = 40, .k = 40, .lda = 40,
                      .ldb = 40, .ldc = 40, .alpha = 1, .beta = 1};
    int first = n < 1000 ? n : 1000;
    inf_calls(first, 0, 0);
    settle_or(100000);
    inf_calls(n - first, 0, 0);
    for (int i = 0; i < 3; i++)
      call_and_check(&cold, &seed, 0);
    for (int i = 0; i < n / 1000 + 100; i++)
      call_and_check(&big, &seed, 0);
  }  else if (!strcmp(mode, "badorder")) {
    float a[16] = {1}, b[16] = {1}, c[16];
    for (int i = 0; i < 20; i++, calls++) {
      for (int j = 0; j < 16; j++)
        c[j] = 42;
      cblas_sgemm(999, 111, 111, 4, 4, 4, 1.0f, a, 4, b, 4, 0.0f, c, 4);
      for (int j = 0; j < 16; j++)
        if (c[j] != 42) {
          mismatches++;
          break;
        }
      usleep(2000);
    }
  } else if (!strcmp(mode, "forkhot")) {
    pid_t child = fork();
    if (child == 0) {
      inf_calls(1, 0, 1000);
      settle_or(0); /* the child's own compile, however long it took */
      inf_calls(299, 0, 1000);
      child_exit();
    }
    reap(child);
  } else if (!strcmp(mode, "warmfork") && argc == 5) {
    int n = atoi(argv[2]);
    sweep(n, 1, strtoull(argv[3], NULL, 10));
    pid_t child = fork();
    if (child == 0) {
      sweep(n, 20, strtoull(argv[4], NULL, 10));
      child_exit();
    }
    reap(child);
  } else {
    fprintf(stderr, "usage: %s sweep S P SEED | gemv S P SEED | biggemv P | vec S P SEED | threads T N | "
                    "shared T N | alias | inf | many N | mixed N | "
                    "badorder | forkhot | warmfork S A B | exitcheck\n",
            argv[0]);
    return 2;
  }
  printf("calls %ld checked %ld mismatches %ld\n", calls, calls, mismatches);
  return mismatches != 0;
}
