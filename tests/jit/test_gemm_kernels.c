/* SPDX-License-Identifier: MIT */
/* The GEMM generator's kernels against Debian's reference BLAS (libblas3's netlib library,
 * loaded explicitly): random shapes, transposes, leading dimensions, alpha/beta classes, float
 * and double, each result within a bound derived from K and the type's epsilon. Every
 * generator test runs once per ISA (its name ends _avx2 or _avx512), the narrower forced on a
 * wider CPU, the wider skipped where the CPU lacks it; then random blockings, tune(), and the
 * forced ISA's code checked instruction by instruction (objdump). */
#define _GNU_SOURCE
#include "helpers.h"

#include <criterion/criterion.h>
#include <malloc.h>
#include <pthread.h>
#include <dlfcn.h>
#include <fenv.h>
#include <stdarg.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REFBLAS "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"

typedef void (*sgemm_t)(const char *, const char *, const int *, const int *, const int *,
                        const float *, const float *, const int *, const float *, const int *,
                        const float *, float *, const int *);
typedef void (*dgemm_t)(const char *, const char *, const int *, const int *, const int *,
                        const double *, const double *, const int *, const double *,
                        const int *, const double *, double *, const int *);

static const jt_api_t *jit;
static int isa; /* the ISA the test generates for (JT_ISA_AUTO: the host's) */
static sgemm_t ref_s;
static dgemm_t ref_d;
static uint64_t rng = 12345;

static uint32_t rnd(uint32_t n) { return jt_test_rnd(&rng, n); }

static void setup(void)
{
  jit = jt_test_module();
  void *r = dlopen(REFBLAS, RTLD_NOW | RTLD_LOCAL);
  if (!r)
    cr_skip_test("reference BLAS %s is not installed (package libblas3)", REFBLAS);
  ref_s = (sgemm_t)dlsym(r, "sgemm_");
  ref_d = (dgemm_t)dlsym(r, "dgemm_");
}

TestSuite(gemm_kernels, .init = setup, .timeout = 600);

/* Where check() places the kernel's A: -1 wherever malloc puts it, else this many elements past
 * a 64-byte boundary. */
static int a_shift = -1;

/* Runs one kernel call and the reference on the same inputs; checks every element of C (and
 * that padding rows between m and ldc are untouched). Returns the worst error / bound. */
static double check(const jt_gemm_t *g, jt_gemm_fn fn, double alpha, double beta, int nan_c)
{
  int ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
  int br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
  size_t esz = g->f64 ? 8 : 4;
  size_t na = (size_t)g->lda * ac, nb = (size_t)g->ldb * bc, nc = (size_t)g->ldc * g->n;
  double *A = malloc(na * 8), *B = malloc(nb * 8), *C = malloc(nc * 8);
  for (size_t i = 0; i < na; i++)
    A[i] = (double)((int)rnd(2001) - 1000) / 1000;
  for (size_t i = 0; i < nb; i++)
    B[i] = (double)((int)rnd(2001) - 1000) / 1000;
  for (size_t i = 0; i < nc; i++)
    C[i] = nan_c ? NAN : (double)((int)rnd(2001) - 1000) / 1000;
  (void)ar, (void)br;
  /* Typed copies: a, b, c (kernel), r (reference), mag (the bound's magnitudes). */
  void *a_mem = malloc(na * esz + 64 + 16 * esz), *b = malloc(nb * esz), *c = malloc(nc * esz);
  void *a = a_shift < 0 ? a_mem
                        : (char *)a_mem + (64 - (uintptr_t)a_mem % 64) + (size_t)a_shift * esz;
  void *r = malloc(nc * esz);
  void *aa = malloc(na * esz), *ab = malloc(nb * esz), *mag = malloc(nc * esz);
#define FILL(T)                                                                              \
  for (size_t i = 0; i < na; i++)                                                            \
    ((T *)a)[i] = (T)A[i], ((T *)aa)[i] = (T)fabs(A[i]);                                     \
  for (size_t i = 0; i < nb; i++)                                                            \
    ((T *)b)[i] = (T)B[i], ((T *)ab)[i] = (T)fabs(B[i]);                                     \
  for (size_t i = 0; i < nc; i++)                                                            \
    ((T *)c)[i] = ((T *)r)[i] = (T)C[i], ((T *)mag)[i] = nan_c ? 0 : (T)fabs(C[i]);
  if (g->f64) {
    FILL(double)
  } else {
    FILL(float)
  }
  fn(a, b, c, alpha, beta);
  char ta = g->ta ? 'T' : 'N', tb = g->tb ? 'T' : 'N';
  double aal = fabs(alpha), abe = fabs(beta);
  if (g->f64) {
    ref_d(&ta, &tb, &g->m, &g->n, &g->k, &alpha, a, &g->lda, b, &g->ldb, &beta, r, &g->ldc);
    ref_d(&ta, &tb, &g->m, &g->n, &g->k, &aal, aa, &g->lda, ab, &g->ldb, &abe, mag, &g->ldc);
  } else {
    float fa = (float)alpha, fb = (float)beta, faa = (float)aal, fab = (float)abe;
    ref_s(&ta, &tb, &g->m, &g->n, &g->k, &fa, a, &g->lda, b, &g->ldb, &fb, r, &g->ldc);
    ref_s(&ta, &tb, &g->m, &g->n, &g->k, &faa, aa, &g->lda, ab, &g->ldb, &fab, mag, &g->ldc);
  }
  double eps = g->f64 ? DBL_EPSILON : FLT_EPSILON, worst = 0;
  for (int j = 0; j < g->n; j++)
    for (int i = 0; i < g->ldc; i++) {
      size_t ix = (size_t)j * g->ldc + i;
      double got = g->f64 ? ((double *)c)[ix] : ((float *)c)[ix];
      double want = g->f64 ? ((double *)r)[ix] : ((float *)r)[ix];
      double m = g->f64 ? ((double *)mag)[ix] : ((float *)mag)[ix];
      if (i >= g->m) { /* padding: untouched, bit for bit (NaN stays NaN) */
        cr_assert(got == want || (isnan(got) && isnan(want)), "padding changed at %d,%d", i, j);
        continue;
      }
      double bound = 2.0 * (g->k + 2) * eps * m + 4 * DBL_MIN;
      cr_assert(!isnan(got), "NaN at %d,%d (beta class %d)", i, j, g->beta_class);
      double e = fabs(got - want) / bound;
      cr_assert(e <= 1.0, "%cgemm %c%c %dx%dx%d lda %d ldb %d ldc %d alpha %g beta %g: "
                "C[%d,%d] = %.9g, reference %.9g, bound %.3g", g->f64 ? 'd' : 's', ta, tb,
                g->m, g->n, g->k, g->lda, g->ldb, g->ldc, alpha, beta, i, j, got, want, bound);
      if (e > worst)
        worst = e;
    }
  free(A), free(B), free(C), free(a_mem), free(b), free(c), free(r), free(aa), free(ab), free(mag);
  return worst;
}

static const double alphas[] = {1, -1, 0.75, 2.5}, betas[] = {0, 1, -1, 0.5};

/* Compiles g for the ISA under test (unless g names one). */
static jt_gemm_fn compile(const jt_gemm_t *gin)
{
  jt_gemm_t g1 = *gin, *g = &g1;
  g->isa = g->isa ? g->isa : isa;
  jt_gemm_fn fn = NULL;
  size_t size = 0, obj_len = 0;
  void *obj = NULL;
  char err[512] = "";
  cr_assert_eq(jit->gemm(g, &fn, &size, &obj, &obj_len, err, sizeof err), 0, "%s", err);
  free(obj);
  cr_assert_not_null(fn);
  cr_assert(size > 16 && size < 65536, "kernel size %zu", size);
  return fn;
}

/* Defines a generator test's body once and a test of it per ISA, name_avx2 and name_avx512. */
#define ISA_TEST(name)                                                                       \
  static void name(void);                                                                    \
  Test(gemm_kernels, name##_avx2)                                                            \
  {                                                                                          \
    JT_TEST_NEEDS(JT_ISA_AVX2);                                                              \
    isa = JT_ISA_AVX2;                                                                       \
    name();                                                                                  \
  }                                                                                          \
  Test(gemm_kernels, name##_avx512)                                                          \
  {                                                                                          \
    JT_TEST_NEEDS(JT_ISA_AVX512);                                                            \
    isa = JT_ISA_AVX512;                                                                     \
    name();                                                                                  \
  }                                                                                          \
  static void name(void)

ISA_TEST(random_shapes_match_the_reference)
{
  int calls = 0;
  for (int t = 0; t < 300; t++) {
    jt_gemm_t g = {.f64 = (int)rnd(2), .ta = (int)rnd(2), .tb = (int)rnd(2)};
    int small = rnd(3) != 0; /* most shapes small, some up to 300 */
    g.m = 1 + (int)rnd(small ? 40 : 300), g.n = 1 + (int)rnd(small ? 40 : 300);
    g.k = 1 + (int)rnd(small ? 40 : g.ta ? JT_GEMM_MAX_K_PACKED : 300);
    g.lda = (g.ta ? g.k : g.m) + (int)rnd(3);
    g.ldb = (g.tb ? g.n : g.k) + (int)rnd(3);
    g.ldc = g.m + (int)rnd(3);
    double alpha = alphas[rnd(4)], beta = betas[rnd(4)];
    g.alpha_one = alpha == 1;
    g.beta_class = beta == 0 ? 0 : beta == 1 ? 1 : 2;
    jt_gemm_fn fn = compile(&g);
    for (int rep = 0; rep < 3; rep++, calls++) { /* other values of the same classes */
      double a2 = g.alpha_one ? 1 : alphas[2 + rnd(2)] * (rep + 1);
      double b2 = g.beta_class == 2 ? betas[2 + rnd(2)] * (rep + 1) : beta;
      check(&g, fn, a2, b2, 0);
    }
  }
  cr_assert_eq(calls, 900);
}

ISA_TEST(edges_zero_padding_one_and_nan_beta0)
{
  static const int dims[] = {1, 2, 7, 8, 9, 15, 16, 17, 23};
  for (int f64 = 0; f64 < 2; f64++)
    for (int t = 0; t < 4; t++)
      for (int d = 0; d < 9; d++) {
        jt_gemm_t g = {.f64 = f64, .ta = t & 1, .tb = t >> 1, .m = dims[d], .n = dims[8 - d],
                       .k = dims[(d + 3) % 9], .alpha_one = 1, .beta_class = 0};
        g.lda = (g.ta ? g.k : g.m) + 1, g.ldb = g.tb ? g.n : g.k, g.ldc = g.m + 3;
        check(&g, compile(&g), 1, 0, 1); /* beta = 0 over a C full of NaN: no NaN may leak */
      }
}

/* Blocks of one vector of rows go over pairs of k's (jit/gemm.c, pairs): M within a vector or
 * in several one-vector blocks, K below the pairs' minimum, even, odd (the last k alone), in
 * straight code and in a loop, partial vectors, padded leading dimensions, every alpha and beta
 * class, both tails, columns in blocks with a narrower last one. */
ISA_TEST(one_vector_blocks_over_pairs_of_k_match_the_reference)
{
  static const int ms[] = {1, 3, 4, 7, 8, 16}, ks[] = {2, 4, 5, 6, 7, 9, 16, 17, 33, 64, 65};
  static const int ns[] = {2, 3, 9, 17, 31};
  int v32 = (isa == JT_ISA_AVX512 ? 512 : 256) / 32;
  for (int f64 = 0; f64 < 2; f64++)
    for (int mi = 0; mi < 6; mi++)
      for (int ki = 0; ki < 11; ki++) {
        int t = mi * 11 + ki;
        jt_gemm_t g = {.f64 = f64, .m = ms[mi], .n = ns[t % 5], .k = ks[ki],
                       .mr_vecs = t % 3 == 0 ? 1 : 0, .tails = 1 + t % 2,
                       .vbits = isa == JT_ISA_AVX512 && t % 4 ? 512 : 0};
        if (g.m > (f64 ? v32 / 2 : v32))
          g.mr_vecs = 1; /* several one-vector blocks of rows */
        g.lda = g.m + t % 3, g.ldb = g.k + t % 2, g.ldc = g.m + 1;
        double alpha = alphas[t % 4], beta = betas[(t / 4) % 4];
        g.alpha_one = alpha == 1;
        g.beta_class = beta == 0 ? 0 : beta == 1 ? 1 : 2;
        check(&g, compile(&g), alpha, beta, beta == 0);
      }
  /* the pairs' two accumulators a column leave room for 14 columns: 16 columns of a block of
   * one 512-bit vector are two blocks of 8 (a plain block takes 16); 256-bit vectors (AVX2's)
   * keep plain blocks, 8 columns where 6 would fit pairs */
  int m = isa == JT_ISA_AVX512 ? 8 : 4; /* one vector of doubles */
  jt_gemm_t g = {.f64 = 1, .m = m, .n = 16, .k = 16, .lda = m, .ldb = 16, .ldc = m,
                 .alpha_one = 1, .beta_class = 1, .isa = isa, .vbits = m * 64};
  char name[160];
  jit->gemm_name(&g, name, sizeof name);
  cr_assert(strstr(name, "_1x8_"), "%s", name);
}

Test(gemm_kernels, same_shape_twice_is_the_same_kernel)
{
  jt_gemm_t g = {.m = 32, .n = 32, .k = 32, .lda = 32, .ldb = 32, .ldc = 32, .alpha_one = 1};
  cr_assert_eq(compile(&g), compile(&g));
  cr_assert_str_neq(jit->llvm_version(), "");
  cr_assert_str_neq(jit->cpu(), "");
}

/* Two signatures sharing a kernel each hold a reference: the first release leaves the code
 * running for the other, the second frees it, a third finds nothing. */
Test(gemm_kernels, a_shared_kernel_is_freed_by_its_last_release)
{
  jt_gemm_t g = {.m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8, .alpha_one = 1,
                 .beta_class = 1};
  jt_gemm_fn fn = compile(&g);
  cr_assert_eq(compile(&g), fn);
  char err[256] = "";
  cr_assert_eq(jit->release(fn, err, sizeof err), 1, "%s", err);
  cr_assert_leq(check(&g, fn, 1.0, 1.0, 0), 1.0); /* still there, still right */
  cr_assert_eq(jit->release(fn, err, sizeof err), 0, "%s", err);
  cr_assert_eq(jit->release(fn, err, sizeof err), -1);
  cr_assert(strstr(err, "no such kernel"), "%s", err);
}

/* A thread that compiled, its kernels released, drops its sessions before it ends (the agent's
 * calibration thread does): their memory is freed (mallinfo2, where malloc counts: 482 KB for
 * one session on the Zen 5; nothing else allocates meanwhile), the kernel another thread
 * compiled still runs, and the dropped one's compiles again. */
typedef struct dropped_s {
  jt_gemm_t g;
  int released;
  int counted; /* malloc counts its bytes (not under a sanitizer's allocator) */
  size_t freed;
} dropped_t;

static void *compile_release_drop(void *arg)
{
  dropped_t *d = arg;
  jt_gemm_fn fn = compile(&d->g);
  char err[256] = "";
  d->released = jit->release(fn, err, sizeof err) == 0;
  struct mallinfo2 before = mallinfo2();
  jit->drop_sessions();
  struct mallinfo2 after = mallinfo2();
  d->counted = before.uordblks > 0;
  d->freed = before.uordblks > after.uordblks ? before.uordblks - after.uordblks : 0;
  return NULL;
}

Test(gemm_kernels, a_thread_drops_its_sessions_and_others_compile_on)
{
  jt_gemm_t mine = {.m = 12, .n = 12, .k = 12, .lda = 12, .ldb = 12, .ldc = 12, .alpha_one = 1,
                    .beta_class = 1};
  dropped_t d = {.g = mine};
  d.g.lda = d.g.ldb = d.g.ldc = 13;
  jt_gemm_fn fn = compile(&mine);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, compile_release_drop, &d), 0);
  cr_assert_eq(pthread_join(t, NULL), 0);
  cr_assert(d.released, "the thread's kernel was released");
  if (d.counted)
    cr_assert_gt(d.freed, 64 * 1024, "the dropped session freed %zu bytes", d.freed);
  cr_assert_leq(check(&mine, fn, 1.0, 1.0, 0), 1.0, "this thread's kernel still runs");
  jt_gemm_fn again = compile(&d.g); /* the dropped session's kernel, compiled anew here */
  cr_assert_leq(check(&d.g, again, 1.0, 1.0, 0), 1.0);
  char err[256] = "";
  cr_assert_eq(jit->release(again, err, sizeof err), 0, "%s", err);
  cr_assert_eq(jit->release(fn, err, sizeof err), 0, "%s", err);
}

/* A thread whose kernel another thread came to share (the same name: one kernel, two
 * references) releases its reference and drops its sessions: the session that holds the code
 * is kept, so the other thread's kernel still runs (else it would run freed code). */
typedef struct sharing_s {
  jt_gemm_t g;
  jt_gemm_fn fn;
  pthread_barrier_t compiled, shared;
} sharing_t;

static void *compile_share_drop(void *arg)
{
  sharing_t *s = arg;
  s->fn = compile(&s->g);
  pthread_barrier_wait(&s->compiled);
  pthread_barrier_wait(&s->shared); /* the main thread took its reference */
  char err[256] = "";
  jit->release(s->fn, err, sizeof err);
  jit->drop_sessions();
  return NULL;
}

Test(gemm_kernels, a_session_whose_kernel_another_thread_shares_is_kept)
{
  sharing_t s = {.g = {.m = 20, .n = 20, .k = 20, .lda = 21, .ldb = 21, .ldc = 21,
                       .alpha_one = 1, .beta_class = 1}};
  pthread_barrier_init(&s.compiled, NULL, 2);
  pthread_barrier_init(&s.shared, NULL, 2);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, compile_share_drop, &s), 0);
  pthread_barrier_wait(&s.compiled);
  jt_gemm_fn mine = compile(&s.g);
  pthread_barrier_wait(&s.shared);
  cr_assert_eq(pthread_join(t, NULL), 0);
  cr_assert_eq(mine, s.fn, "one kernel, shared by name");
  cr_assert_leq(check(&s.g, mine, 1.0, 1.0, 0), 1.0, "its code is still there");
  char err[256] = "";
  cr_assert_eq(jit->release(mine, err, sizeof err), 0, "%s", err);
  pthread_barrier_destroy(&s.compiled);
  pthread_barrier_destroy(&s.shared);
}

Test(gemm_kernels, transposed_a_limits_its_stack_panel)
{
  jt_gemm_t g = {.ta = 1, .m = 16, .n = 16, .k = JT_GEMM_MAX_K_PACKED + 1, .lda = JT_GEMM_MAX_K_PACKED + 1,
                 .ldb = JT_GEMM_MAX_K_PACKED + 1, .ldc = 16, .alpha_one = 1};
  cr_assert_not(jt_gemm_supported(&g), "a K past the panel limit must stay on the library");
  g.k = g.lda = g.ldb = JT_GEMM_MAX_K_PACKED;
  cr_assert(jt_gemm_supported(&g));
  check(&g, compile(&g), 1, 0, 0);
}

/* Leaves signalling-NaN bit patterns on the stack below the caller's frame. */
__attribute__((noinline)) static uint32_t dirty_stack(void)
{
  volatile uint32_t junk[8192];
  for (int i = 0; i < 8192; i++)
    junk[i] = 0x7fa00000u; /* a signalling NaN as a float */
  return junk[8191];
}

ISA_TEST(transposed_a_tails_raise_no_floating_point_flags)
{
  jt_gemm_t g = {.ta = 1, .m = 3, .n = 6, .k = 32, .lda = 32, .ldb = 32, .ldc = 3, .alpha_one = 1};
  jt_gemm_fn fn = compile(&g);
  static float a[3 * 32], b[32 * 6], c[3 * 6];
  for (int i = 0; i < 3 * 32; i++)
    a[i] = 0.5f;
  for (int i = 0; i < 32 * 6; i++)
    b[i] = 0.25f;
  for (int rep = 0; rep < 20; rep++) {
    cr_assert_eq(dirty_stack(), 0x7fa00000u);
    feclearexcept(FE_ALL_EXCEPT);
    fn(a, b, c, 1, 0);
    cr_assert_not(fetestexcept(FE_INVALID), "the kernel raised FE_INVALID (stale panel lanes)");
  }
  cr_assert_float_eq(c[0], 32 * 0.125f, 1e-5);
}

ISA_TEST(dot_products_match_the_reference)
{
  void *r = dlopen(REFBLAS, RTLD_NOW | RTLD_LOCAL);
  float (*sdot)(const int *, const float *, const int *, const float *, const int *) = dlsym(r, "sdot_");
  double (*ddot)(const int *, const double *, const int *, const double *, const int *) = dlsym(r, "ddot_");
  static const int ns[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 100, 255, 256, 257, 1000, 4099};
  /* x and y at these byte offsets of a 64-byte line: both aligned, both 16, 32 or 48 bytes off
   * (the kernel peels up to the vector boundary, jt_dot_emit), one of them off, both off but
   * apart, neither on a vector boundary */
  static const int offs[][2] = {{0, 0}, {16, 16}, {32, 32}, {48, 48}, {16, 0}, {16, 48}, {8, 40}};
  /* the default chains for n (2, 4 or 8), and 2 chains (a tune() candidate) */
  static const int blocks[][2] = {{0, 0}, {2, 1}};
  for (int f64 = 0; f64 < 2; f64++)
    for (size_t t = 0; t < sizeof ns / sizeof *ns; t++)
      for (int bl = 0; bl < 2; bl++) {
        int n = ns[t], one = 1;
        jt_gemm_t g = {.dot = 1, .f64 = f64, .k = n, .mr_vecs = blocks[bl][0], .nr = blocks[bl][1]};
        jt_gemm_fn fn = compile(&g);
        double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), mag = 0, want, got;
        float *xf = malloc(n * sizeof *xf), *yf = malloc(n * sizeof *yf), outf;
        size_t bytes = ((size_t)n * 8 + 64) / 64 * 64 + 64; /* a multiple of 64 (C11) */
        char *bx = aligned_alloc(64, bytes), *by = aligned_alloc(64, bytes);
        for (int i = 0; i < n; i++) {
          x[i] = (double)((int)rnd(2001) - 1000) / 1000, y[i] = (double)((int)rnd(2001) - 1000) / 1000;
          xf[i] = (float)x[i], yf[i] = (float)y[i], mag += fabs(x[i] * y[i]);
        }
        want = f64 ? ddot(&n, x, &one, y, &one) : sdot(&n, xf, &one, yf, &one);
        double bound = 2.0 * (n + 2) * (f64 ? DBL_EPSILON : FLT_EPSILON) * mag + 4 * DBL_MIN;
        for (size_t o = 0; o < sizeof offs / sizeof *offs; o++) {
          void *px = bx + offs[o][0], *py = by + offs[o][1];
          memcpy(px, f64 ? (void *)x : (void *)xf, (size_t)n * (f64 ? 8 : 4));
          memcpy(py, f64 ? (void *)y : (void *)yf, (size_t)n * (f64 ? 8 : 4));
          if (f64) {
            fn(px, py, &got, 0, 0);
          } else {
            fn(px, py, &outf, 0, 0);
            got = outf;
          }
          cr_assert(fabs(got - want) <= bound, "%cdot n=%d, %d x %d chains, x and y %d and %d "
                    "bytes into a line: %.9g vs %.9g", f64 ? 'd' : 's', n, blocks[bl][0],
                    blocks[bl][1], offs[o][0], offs[o][1], got, want);
        }
        free(x), free(y), free(xf), free(yf), free(bx), free(by);
      }
}

/* ggml's ADD + RMS_NORM + MUL, as ggml computes it (ops.cpp): the reference of the fused
 * kernel. */
static void ref_add_rms_mul(const float *a, const float *b, const float *w, float *x, float *y,
                            int n, int rows, float eps)
{
  for (int r = 0; r < rows; r++) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
      float v = a[r * n + i] + b[r * n + i];
      x[r * n + i] = v;
      sum += (double)(v * v);
    }
    const float mean = (float)(sum / n), scale = 1.0f / sqrtf(mean + eps);
    for (int i = 0; i < n; i++)
      y[r * n + i] = (x[r * n + i] * scale) * w[i];
  }
}

/* ADD + RMS_NORM + MUL, and RMS_NORM + MUL alone (of x = a: ggml's arithmetic with b = 0,
 * which adds nothing; b and x are never touched). */
ISA_TEST(fused_add_rms_norm_mul_matches_ggml_arithmetic)
{
  static const int sizes[] = {1, 7, 8, 9, 64, 255, 768, 1000, 4096};
  for (size_t si = 0; si < 2 * sizeof sizes / sizeof *sizes; si++) {
    int n = sizes[si / 2], rows = 5, with_add = si % 2 == 0;
    jt_gemm_t g = {.add_rms_mul = with_add ? 1 : 2, .k = n};
    jt_gemm_fn fn = compile(&g);
    size_t cnt = (size_t)n * rows;
    float *a = malloc(cnt * 4), *b = malloc(cnt * 4), *w = malloc((size_t)n * 4);
    float *x = malloc(cnt * 4), *y = malloc(cnt * 4), *rx = malloc(cnt * 4), *ry = malloc(cnt * 4);
    float *sn = malloc(cnt * 4);
    for (size_t i = 0; i < cnt; i++)
      a[i] = (float)((int)rnd(2001) - 1000) / 300, b[i] = (float)((int)rnd(2001) - 1000) / 700;
    for (int i = 0; i < n; i++)
      w[i] = (float)((int)rnd(2001) - 1000) / 500;
    if (!with_add)
      memset(b, 0, cnt * 4);
    ref_add_rms_mul(a, b, w, rx, ry, n, rows, 1e-5f);
    ((jt_add_rms_mul_fn)(void (*)(void))fn)(a, with_add ? b : NULL, w, with_add ? x : NULL, sn, y,
                                            rows, 1e-5f);
    for (size_t i = 0; i < cnt; i++) {
      if (with_add)
        cr_assert_eq(x[i], rx[i], "n=%d: x[%zu] = %.9g, ggml %.9g", n, i, x[i], rx[i]);
      cr_assert_eq(sn[i] * w[i % n], y[i], "n=%d: the norm's output times w is y", n);
      cr_assert(fabsf(y[i] - ry[i]) <= 2 * FLT_EPSILON * fabsf(ry[i]) + FLT_MIN,
                "n=%d: y[%zu] = %.9g, ggml %.9g", n, i, y[i], ry[i]);
    }
    /* rows = 0 touches nothing */
    x[0] = y[0] = 42;
    ((jt_add_rms_mul_fn)(void (*)(void))fn)(a, with_add ? b : NULL, w, x, sn, y, 0, 1e-5f);
    cr_assert(x[0] == 42 && y[0] == 42);
    free(a), free(b), free(w), free(x), free(y), free(rx), free(ry), free(sn);
  }
}

/* ggml's MUL_MAT kernels: random shapes around the blockings' edges (K across the JT_MM_KC-long
 * k blocks, M across the JT_MM_MC-row blocks and half panels, N across the column blocks, a
 * third of them with panels and column counts asked for rather than the default's; N = 1, decode's
 * matrix-vector kernel, with K's across its loop and tails), f32 and f16 weights,
 * row ranges that are a thread's share; each element within the bound of a float sum of K
 * products of the exact dot product (x rounded to f16 against f16 weights, as ggml does, but
 * for w16 = 2: as ggml's AMX buffer, x as it is), and nothing outside the rows written. */
ISA_TEST(mul_mat_kernels_match_exact_dot_products)
{
  static const int ks[] = {1, 7, 8, 255, 256, 257, 600, 768, 1030};
  /* and for n = 1: k's across its 4-vector loop, whole vectors left over, scalar tails, and
   * beyond JT_MM_SCRATCH (x rounded into a scratch of k floats) */
  static const int k1s[] = {1, 7, 8, 31, 32, 33, 56, 63, 64, 100, 768, 9216, 9217, 10007};
  enum { NK = sizeof ks / sizeof *ks, NK1 = sizeof k1s / sizeof *k1s };
  for (int t = 0; t < 24 + 2 * NK1; t++) {
    int w16 = t & 1 ? 1 + (t >> 1 & 1) : 0, k = ks[rnd(NK)];
    int m = 16 * (1 + (int)rnd(t < 12 ? 6 : 40)), n = JT_MM_MIN_N + (int)rnd(t < 12 ? 20 : 120);
    if (t >= 24) /* decode's matrix-vector products, every k1 with f32 and f16 weights */
      n = 1, k = k1s[(t - 24) / 2], m = k > 2000 ? 16 * (1 + (int)rnd(3)) : m;
    jt_gemm_t g = {.mm = 1, .w16 = w16, .m = m, .n = n, .k = k};
    if (n > 1 && t % 3 == 2) { /* a blocking asked for: panels of 16 or 32 rows, any columns */
      g.mr_vecs = isa == JT_ISA_AVX512 ? 1 + (int)rnd(2) : 0;
      int most = isa == JT_ISA_AVX512 ? (g.mr_vecs == 1 ? JT_MM_MAX_NR : 14) : 6;
      g.nr = 1 + (int)rnd((unsigned)most);
    }
    cr_assert(jt_gemm_supported(&g));
    jt_mm_fn fn = (jt_mm_fn)(void (*)(void))compile(&g);
    float *w = malloc((size_t)m * k * 4), *x = malloc((size_t)n * k * 4), *y = malloc((size_t)m * n * 4);
    _Float16 *wh = malloc((size_t)m * k * 2);
    for (long i = 0; i < (long)m * k; i++) {
      w[i] = (float)((int)rnd(2001) - 1000) / 700;
      wh[i] = (_Float16)w[i];
      if (w16)
        w[i] = (float)wh[i];
    }
    for (long i = 0; i < (long)n * k; i++)
      x[i] = (float)((int)rnd(2001) - 1000) / 300;
    for (long i = 0; i < (long)m * n; i++)
      y[i] = NAN; /* rows outside [i0, i1) must stay so */
    int64_t i0 = 16 * (int64_t)rnd((unsigned)(m / 16)), i1 = i0 + 16 * (1 + (int64_t)rnd((unsigned)((m - i0) / 16)));
    float *scratch = aligned_alloc(64, JT_MM_SCRATCH_FLOATS(k) * sizeof(float));
    fn(w16 ? (const void *)wh : (const void *)w, x, y, i0, i1, scratch);
    free(scratch);
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        float got = y[(long)j * m + i];
        if (i < i0 || i >= i1) {
          cr_assert(isnan(got), "%dx%dx%d: row %d outside [%lld, %lld) written", m, n, k, i,
                    (long long)i0, (long long)i1);
          continue;
        }
        double exact = 0, mag = 0;
        for (int kk = 0; kk < k; kk++) {
          double xv = w16 == 1 ? (double)(_Float16)x[(long)j * k + kk] : x[(long)j * k + kk];
          double p = (double)w[(long)i * k + kk] * xv;
          exact += p, mag += fabs(p);
        }
        cr_assert(fabs(got - exact) <= 4.0 * (k + 2) * FLT_EPSILON * mag + FLT_MIN,
                  "w16 %d %dx%dx%d (blocks %d x %d) rows [%lld, %lld): y[%d,%d] = %.9g, "
                  "exact %.9g", w16, m, n, k, g.mr_vecs, g.nr, (long long)i0, (long long)i1, i,
                  j, got, exact);
      }
    free(w), free(wh), free(x), free(y);
  }
}

/* MUL_MAT + ADD kernels: the sums are the MUL_MAT kernel's result plus the residual, bit for
 * bit (ggml's ADD of that result), whether the output is memory of its own, the residual's or
 * the product's; rows outside the range are not written. */
ISA_TEST(mul_mat_add_kernels_add_the_residual_to_the_product_bit_for_bit)
{
  static const int ks[] = {7, 128, 129, 200, 256, 257, 384, 768};
  for (int t = 0; t < 12 * (int)(sizeof ks / sizeof *ks); t++) { /* every k, place, type */
    int w16 = t & 1, where = t / 2 % 3, k = ks[t / 12]; /* where: 0 own, 1 r, 2 y */
    int m = 16 * (1 + (int)rnd(8)), n = t / 6 % 2 ? 1 : JT_MM_MIN_N + (int)rnd(30); /* and n = 1 */
    jt_gemm_t g = {.mm = 1, .w16 = w16, .m = m, .n = n, .k = k};
    jt_mm_fn mm = (jt_mm_fn)(void (*)(void))compile(&g);
    g.mm_add = 1;
    jt_mm_add_fn fn = (jt_mm_add_fn)(void (*)(void))compile(&g);
    size_t mn = (size_t)m * n;
    float *w = malloc((size_t)m * k * 4), *x = malloc((size_t)n * k * 4);
    float *want = malloc(mn * 4), *y = malloc(mn * 4), *r = malloc(mn * 4), *own = malloc(mn * 4);
    _Float16 *wh = malloc((size_t)m * k * 2);
    for (long i = 0; i < (long)m * k; i++)
      w[i] = (float)((int)rnd(2001) - 1000) / 700, wh[i] = (_Float16)w[i];
    for (long i = 0; i < (long)n * k; i++)
      x[i] = (float)((int)rnd(2001) - 1000) / 300;
    int64_t i0 = 16 * (int64_t)rnd((unsigned)(m / 16)), i1 = i0 + 16 * (1 + (int64_t)rnd((unsigned)((m - i0) / 16)));
    float *scratch = aligned_alloc(64, JT_MM_SCRATCH_FLOATS(k) * sizeof(float));
    const void *wp = w16 ? (const void *)wh : (const void *)w;
    mm(wp, x, want, i0, i1, scratch);
    float *prod = malloc(mn * 4); /* the product alone, which y must hold at the end */
    memcpy(prod, want, mn * 4);
    for (size_t i = 0; i < mn; i++) {
      r[i] = (float)((int)rnd(2001) - 1000) / 100;
      want[i] = (int64_t)(i % (size_t)m) >= i0 && (int64_t)(i % (size_t)m) < i1 ? want[i] + r[i] : NAN;
      own[i] = NAN;
      y[i] = NAN;
    }
    float *out = where == 0 ? own : where == 1 ? r : y;
    float *want2 = malloc(mn * 4); /* the residual as it was, outside the range */
    memcpy(want2, r, mn * 4);
    fn(wp, x, y, r, out, i0, i1, scratch);
    free(scratch);
    for (size_t i = 0; i < mn; i++) {
      int64_t row = (int64_t)(i % (size_t)m);
      if (row < i0 || row >= i1) {
        cr_assert(isnan(y[i]) && (where == 1 || isnan(out[i])) && (where != 1 || out[i] == want2[i]),
                  "%dx%dx%d: row %lld outside the range written", m, n, k, (long long)row);
        continue;
      }
      cr_assert(out[i] == want[i], "%s %dx%dx%d out=%s: [%zu] = %.9g, MUL_MAT then ADD %.9g",
                w16 ? "f16" : "f32", m, n, k, where == 0 ? "own" : where == 1 ? "r" : "y", i,
                out[i], want[i]);
      if (where != 2)
        cr_assert(y[i] == prod[i], "%dx%dx%d: y[%zu] = %.9g is not the product %.9g", m, n, k, i,
                  y[i], prod[i]);
    }
    free(w), free(wh), free(x), free(want), free(want2), free(prod), free(y), free(r), free(own);
  }
}

/* Whether the name of g's kernel (for the ISA under test unless g names one), as the generator
 * resolves it, holds the piece fmt formats: "_c%d" copy_a, "_n%d" nc, "_w%d" gemv. */
static __attribute__((format(printf, 2, 3))) int named_with(const jt_gemm_t *g, const char *fmt,
                                                              ...)
{
  jt_gemm_t r = *g;
  r.isa = r.isa ? r.isa : isa;
  char name[200], want[32];
  jit->gemm_name(&r, name, sizeof name);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(want, sizeof want, fmt, ap);
  va_end(ap);
  return strstr(name, want) != NULL;
}

/* A kernel whose A is 32 KB or more copies A's panels into an aligned one, where A's columns
 * are not on a vector boundary (jit/gemm.c, realigns; copy_a 1) or always (copy_a 2): the
 * same results from A at every offset of a line, with M tails, leading dimensions that keep
 * or break the columns' alignment, and every beta class, either way. */
ISA_TEST(an_unaligned_a_gives_the_same_results)
{
  struct {
    int f64, m, n, k, lda;
  } shapes[] = {{0, 96, 40, 96, 96}, {0, 90, 33, 100, 91}, {1, 64, 64, 64, 64},
                {1, 70, 20, 60, 72}, {0, 128, 9, 64, 130}};
  for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++)
    for (int copy = 1; copy <= 2; copy++)
      for (int shift = 0; shift < 16; shift += shapes[t].f64 ? 1 : 2) {
        double beta = betas[(t + (size_t)shift) % 4];
        jt_gemm_t g = {.f64 = shapes[t].f64, .m = shapes[t].m, .n = shapes[t].n,
                       .k = shapes[t].k, .lda = shapes[t].lda, .ldb = shapes[t].k,
                       .ldc = shapes[t].m, .alpha_one = 1,
                       .beta_class = beta == 0 ? 0 : beta == 1 ? 1 : 2, .isa = isa,
                       .copy_a = copy};
        cr_assert(named_with(&g, "_c%d", copy), "shape %zu does not copy as asked (%d)", t, copy);
        a_shift = shift;
        cr_assert_leq(check(&g, compile(&g), 1, beta, beta == 0), 1.0);
      }
  a_shift = -1;
}

/* The kernel tune() picks for g among the 3 candidates the agent times; rep gets what it did. */
static jt_gemm_fn tuned(const jt_gemm_t *g, jt_tune_t *rep)
{
  jt_gemm_t best;
  jt_gemm_fn fn;
  size_t size, obj_len;
  void *obj = NULL;
  char err[512] = "";
  cr_assert_eq(jit->tune(g, 3, &best, &fn, &size, &obj, &obj_len, rep, err, sizeof err), 0,
               "%s", err);
  free(obj);
  return fn;
}

/* Where A's row block, read where it lies and again for every column block, would crowd one L1
 * set (more than 5 of its lines: lda a multiple of 512 bytes, or of 256 over enough K) A is
 * copied by default whatever its alignment; elsewhere only when unaligned; never where A is
 * under 32 KB, op(A) = A^T or K is blocked, nor in a GEMV that sweeps A (one of 32 KB or more:
 * jt_gemm_t.gemv). tune() offers the other choice. */
ISA_TEST(a_crowding_one_cache_set_is_copied_by_default)
{
  struct {
    int f64, ta, m, n, k, lda, want;
  } cases[] = {{1, 0, 64, 48, 64, 64, 2},    {0, 0, 128, 48, 128, 128, 2},
               {1, 0, 96, 48, 96, 96, 2},    {1, 0, 100, 48, 100, 100, 1},
               {0, 0, 112, 48, 112, 112, 1}, {1, 0, 72, 48, 72, 72, 1},
               {1, 0, 256, 1, 128, 256, 0},  {0, 0, 32, 48, 32, 32, 0},
               {1, 1, 64, 48, 64, 64, 0},    {1, 0, 64, 48, 512, 64, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    jt_gemm_t g = {.f64 = cases[i].f64, .ta = cases[i].ta, .m = cases[i].m, .n = cases[i].n,
                   .k = cases[i].k, .lda = cases[i].lda, .ldb = cases[i].k, .ldc = cases[i].m,
                   .alpha_one = 1, .beta_class = 1, .isa = isa, .vbits = 256};
    cr_assert(named_with(&g, "_c%d", cases[i].want), "case %zu: not _c%d", i, cases[i].want);
  }
  jt_gemm_t g = {.m = 128, .n = 32, .k = 128, .lda = 128, .ldb = 128, .ldc = 128, .alpha_one = 1,
                 .beta_class = 1, .isa = isa, .vbits = 256};
  jt_tune_t rep;
  jt_gemm_fn fn = tuned(&g, &rep);
  size_t size, obj_len;
  void *obj = NULL;
  char err[512] = "";
  int copies[3] = {0};
  for (int i = 0; i < rep.n; i++)
    copies[rep.cand[i].copy_a]++;
  cr_assert(rep.cand[0].copy_a == 2 && copies[1] == 1, "the default copies, and one candidate "
            "copies only when unaligned (%d of %d)", copies[1], rep.n);
  check(&g, fn, 1, 1, 0);
  cr_assert_eq(jit->release(fn, err, sizeof err), 0, "%s", err);
  g.copy_a = 3;
  cr_assert_eq(jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err), -1);
  cr_assert(strstr(err, "copy_a"), "%s", err);
}

/* Blockings the generator is asked for rather than its own: every width of the ISA, 1-4
 * vectors of rows, any column count that fits the registers, both kinds of tails, K blocks of
 * any length. */
ISA_TEST(random_blockings_match_the_reference)
{
  int regs = isa == JT_ISA_AVX512 ? 32 : 16, widest = isa == JT_ISA_AVX512 ? 512 : 256;
  for (int t = 0; t < 120; t++) {
    jt_gemm_t g = {.f64 = (int)rnd(2), .ta = (int)rnd(2), .tb = (int)rnd(2)};
    g.vbits = 128 << rnd(widest == 512 ? 3 : 2);
    g.mr_vecs = 1 + (int)rnd(JT_MAX_MR_VECS);
    /* op(A)'s vectors held, or with fewer columns than vectors op(B)'s broadcasts */
    int most = (regs - g.mr_vecs - 1) / g.mr_vecs, held_b = (regs - 1) / (g.mr_vecs + 1);
    held_b = held_b < g.mr_vecs ? held_b : g.mr_vecs - 1;
    most = most > held_b ? most : held_b;
    g.nr = 1 + (int)rnd((unsigned)(most < JT_MAX_NR ? most : JT_MAX_NR));
    g.tails = 1 + (int)rnd(2);
    g.m = 1 + (int)rnd(100), g.n = 1 + (int)rnd(70), g.k = 1 + (int)rnd(70);
    g.kc = g.ta || rnd(2) ? 0 : 1 + (int)rnd((unsigned)g.k); /* K blocks of any length */
    g.nc = rnd(3) ? 0 : 1 + (int)rnd((unsigned)g.n);          /* N blocks of any width */
    g.lda = (g.ta ? g.k : g.m) + (int)rnd(3);
    g.ldb = (g.tb ? g.n : g.k) + (int)rnd(3);
    g.ldc = g.m + (int)rnd(3);
    double alpha = alphas[rnd(4)], beta = betas[rnd(4)];
    g.alpha_one = alpha == 1;
    g.beta_class = beta == 0 ? 0 : beta == 1 ? 1 : 2;
    check(&g, compile(&g), alpha, beta, 0);
  }
  /* MUL_MAT panels of JT_MM_MR or (AVX-512) twice as many rows (48: a whole 32-row panel and
   * a half one), every column count the registers hold */
  for (int t = 0; t < 24; t++) {
    int mv = JT_MM_MR / (widest / 32) * (isa == JT_ISA_AVX512 ? 1 + (int)rnd(2) : 1);
    int mm_most = (regs - mv - 1) / mv;
    int nr = 1 + (int)rnd((unsigned)(mm_most < JT_MM_MAX_NR ? mm_most : JT_MM_MAX_NR));
    jt_gemm_t g = {.mm = 1, .w16 = t & 1, .m = 48, .n = 17 + (int)rnd(40), .k = 130, .nr = nr,
                   .mr_vecs = mv};
    jt_mm_fn fn = (jt_mm_fn)(void (*)(void))compile(&g);
    float *w = malloc((size_t)g.m * g.k * 4), *x = malloc((size_t)g.n * g.k * 4), *y = malloc((size_t)g.m * g.n * 4);
    _Float16 *wh = malloc((size_t)g.m * g.k * 2);
    for (int i = 0; i < g.m * g.k; i++)
      wh[i] = (_Float16)((float)((int)rnd(2001) - 1000) / 700), w[i] = g.w16 ? (float)wh[i] : (float)((int)rnd(2001) - 1000) / 700;
    for (int i = 0; i < g.n * g.k; i++)
      x[i] = (float)((int)rnd(2001) - 1000) / 300;
    float *scratch = aligned_alloc(64, JT_MM_SCRATCH_FLOATS(g.k) * sizeof(float));
    fn(g.w16 ? (const void *)wh : (const void *)w, x, y, 0, g.m, scratch);
    for (int j = 0; j < g.n; j++)
      for (int i = 0; i < g.m; i++) {
        double exact = 0, mag = 0;
        for (int kk = 0; kk < g.k; kk++) {
          double xv = g.w16 ? (double)(_Float16)x[j * g.k + kk] : x[j * g.k + kk];
          exact += w[i * g.k + kk] * xv, mag += fabs(w[i * g.k + kk] * xv);
        }
        cr_assert(fabs(y[j * g.m + i] - exact) <= 4.0 * (g.k + 2) * FLT_EPSILON * mag + FLT_MIN,
                  "MUL_MAT nr %d: y[%d,%d] = %.9g, exact %.9g", nr, i, j, y[j * g.m + i], exact);
      }
    free(w), free(wh), free(x), free(y), free(scratch);
  }
}

/* A blocking that needs more registers than the ISA has, or a width it lacks, is refused with a
 * sentence; kernels of two ISAs or blockings have names of their own. */
Test(gemm_kernels, impossible_blockings_fail_and_names_tell_kernels_apart)
{
  JT_TEST_NEEDS(JT_ISA_AVX2);
  char err[512] = "", n1[160], n2[160];
  jt_gemm_fn fn;
  size_t size, obj_len;
  void *obj = NULL;
  jt_gemm_t g = {.m = 64, .n = 64, .k = 64, .lda = 64, .ldb = 64, .ldc = 64, .alpha_one = 1,
                 .isa = JT_ISA_AVX2, .mr_vecs = 2, .nr = 7}; /* 14 + 2 + 1 > 16 */
  cr_assert_eq(jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err), -1);
  cr_assert(strstr(err, "registers"), "%s", err);
  g.mr_vecs = 4, g.nr = 3; /* 12 accumulators + 3 broadcasts + 1 vector of A at a time */
  cr_assert_eq(jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err), 0, "%s", err);
  cr_assert_eq(jit->release(fn, err, sizeof err), 0, "%s", err);
  free(obj), obj = NULL;
  g.nr = 4; /* 16 + 4 + 1 > 16 */
  cr_assert_eq(jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err), -1);
  cr_assert(strstr(err, "registers"), "%s", err);
  g.mr_vecs = 2, g.nr = 6, g.vbits = 512;
  cr_assert_eq(jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err), -1);
  cr_assert(strstr(err, "512-bit"), "%s", err);
  g.vbits = 0;
  jit->gemm_name(&g, n1, sizeof n1);
  cr_assert(strstr(n1, "_avx2_v256_2x6_"), "%s", n1);
  if (!jt_test_cpu_has(JT_ISA_AVX512)) {
    g.isa = JT_ISA_AVX512;
    cr_assert_eq(jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot run avx512"), "%s", err);
    cr_assert_eq(jit->host_isa(), JT_ISA_AVX2);
    return;
  }
  cr_assert_eq(jit->host_isa(), JT_ISA_AVX512);
  g.isa = 0;
  jit->gemm_name(&g, n2, sizeof n2);
  cr_assert(strstr(n2, "_avx512_v512_"), "the default is the widest ISA: %s", n2);
  cr_assert_str_neq(n1, n2);
}

/* A GEMM whose M fits half of the ISA's widest vector gets half-width vectors by default (the
 * other half would be pieced or masked off in every load and store); a width asked for stays,
 * and a wider M gets the widest. */
ISA_TEST(an_m_that_fits_half_a_vector_gets_half_width_vectors)
{
  int wide = isa == JT_ISA_AVX512 ? 512 : 256;
  struct {
    int f64, ta, m, vbits, want;
  } cases[] = {
      {1, 0, wide / 128, 0, wide / 2}, {0, 1, wide / 64, 0, wide / 2},
      {0, 0, wide / 64 + 1, 0, wide},  {1, 1, wide / 128 + 1, 0, wide},
      {1, 0, 2, wide, wide},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    jt_gemm_t g = {.f64 = cases[i].f64, .ta = cases[i].ta, .m = cases[i].m, .n = 8, .k = 8,
                   .alpha_one = 1, .beta_class = 1, .isa = isa, .vbits = cases[i].vbits};
    g.lda = g.ta ? g.k : g.m, g.ldb = g.k, g.ldc = g.m;
    char name[160], want[32];
    jit->gemm_name(&g, name, sizeof name);
    snprintf(want, sizeof want, "_v%d_", cases[i].want);
    cr_assert(strstr(name, want), "%cgemm m = %d, vbits %d: %s, not %s", g.f64 ? 'd' : 's',
              g.m, g.vbits, name, want);
    check(&g, compile(&g), 1, 1, 0);
  }
}

/* tune() keeps one of the candidates it reports, the fastest it measured, whose kernel is the
 * one gemm() compiles for the parameters it returns and computes the product. */
ISA_TEST(tune_returns_the_fastest_candidate_and_it_computes)
{
  static const jt_gemm_t shapes[] = {
      {.m = 64, .n = 64, .k = 64, .lda = 64, .ldb = 64, .ldc = 64, .alpha_one = 1, .beta_class = 1},
      {.f64 = 1, .ta = 1, .m = 37, .n = 20, .k = 50, .lda = 50, .ldb = 50, .ldc = 40, .beta_class = 2},
      {.m = 7, .n = 90, .k = 33, .lda = 7, .ldb = 33, .ldc = 7, .alpha_one = 1},
  };
  for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
    jt_gemm_t g = shapes[t], best;
    g.isa = isa;
    jt_tune_t rep;
    jt_gemm_fn fn = NULL;
    size_t size = 0, obj_len = 0;
    void *obj = NULL;
    char err[512] = "", want[160], got[160];
    cr_assert_eq(jit->tune(&g, JT_TUNE_MAX, &best, &fn, &size, &obj, &obj_len, &rep, err,
                           sizeof err), 0, "%s", err);
    cr_assert_not_null(obj);
    free(obj);
    cr_assert(rep.n >= 2 && rep.n <= JT_TUNE_MAX, "%d candidates", rep.n);
    cr_assert(rep.best >= 0 && rep.best < rep.n);
    cr_assert_eq(memcmp(&best, &rep.cand[rep.best], sizeof best), 0, "best is not the pick");
    for (int i = 0; i < rep.n; i++) {
      cr_assert(rep.ns[i] > 0 && rep.ns[rep.best] <= rep.ns[i], "candidate %d: %.0f ns, pick %.0f",
                i, rep.ns[i], rep.ns[rep.best]);
      cr_assert_eq(rep.cand[i].isa, isa, "a candidate left the ISA asked for");
      cr_assert(rep.cand[i].vbits && rep.cand[i].mr_vecs && rep.cand[i].nr && rep.cand[i].tails);
    }
    cr_assert(rep.compile_ns > 0 && rep.time_ns > 0);
    /* the compiles' CPU time: some of it, never more than their wall time (the clocks' ticks) */
    cr_assert(rep.compile_cpu_ns > 0 && rep.compile_cpu_ns <= rep.compile_ns + 1000000u,
              "%llu ns of CPU in %llu ns", (unsigned long long)rep.compile_cpu_ns,
              (unsigned long long)rep.compile_ns);
    jit->gemm_name(&best, want, sizeof want);
    cr_assert(compile(&best) == fn, "the pick's kernel is not gemm()'s for its parameters");
    jit->gemm_name(&rep.cand[(rep.best + 1) % rep.n], got, sizeof got);
    cr_assert_str_neq(want, got);
    double alpha = g.alpha_one ? 1 : 0.75, beta = g.beta_class == 0 ? 0 : g.beta_class == 1 ? 1 : -0.5;
    check(&g, fn, alpha, beta, 0);
    char e2[256];
    cr_assert_eq(jit->release(fn, e2, sizeof e2), 1); /* compile() above took a second one */
    cr_assert_eq(jit->release(fn, e2, sizeof e2), 0, "%s", e2);
  }
  /* a MUL_MAT and a dot product have candidates too */
  jt_gemm_t mm = {.mm = 1, .w16 = 1, .m = 128, .n = 40, .k = 300, .isa = isa}, dot = {.dot = 1, .k = 1000, .isa = isa}, best;
  for (int i = 0; i < 2; i++) {
    jt_tune_t rep;
    jt_gemm_fn fn;
    size_t size, obj_len;
    void *obj = NULL;
    char err[512] = "";
    cr_assert_eq(jit->tune(i ? &dot : &mm, JT_TUNE_MAX, &best, &fn, &size, &obj, &obj_len, &rep,
                           err, sizeof err), 0, "%s", err);
    free(obj);
    cr_assert(rep.n >= 2, "%s: %d candidates", i ? "dot" : "MUL_MAT", rep.n);
    cr_assert_eq(memcmp(&best, &rep.cand[rep.best], sizeof best), 0);
  }
}

/* The code of a forced ISA: AVX2 kernels hold no EVEX instruction (no zmm, no ymm16-31, no mask
 * register, masked tails as vmaskmov), AVX-512 kernels of 512-bit vectors use zmm registers
 * (the backend does not split them in two although the CPU prefers 256 bits) and k-masks for
 * tails asked to be masked. */
ISA_TEST(the_code_is_the_isa_asked_for)
{
  if (system("objdump --version >/dev/null 2>&1") != 0)
    cr_skip_test("objdump (binutils) is not installed");
  const jt_gemm_t shapes[] = {
      {.m = 37, .n = 20, .k = 17, .lda = 37, .ldb = 17, .ldc = 37, .beta_class = 2, .tails = 1},
      {.f64 = 1, .ta = 1, .tb = 1, .m = 21, .n = 9, .k = 30, .lda = 30, .ldb = 9, .ldc = 21, .tails = 1},
      {.m = 37, .n = 20, .k = 17, .lda = 37, .ldb = 17, .ldc = 37, .beta_class = 2, .tails = 2},
      {.mm = 1, .w16 = 1, .m = 64, .n = 40, .k = 200},
      {.mm = 1, .w16 = 1, .mm_add = 1, .m = 64, .n = 1, .k = 200},
      {.dot = 1, .k = 77},
      {.add_rms_mul = 1, .k = 100},
  };
  for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
    jt_gemm_t g = shapes[t];
    g.isa = isa;
    jt_gemm_fn fn;
    size_t size, obj_len;
    void *obj = NULL;
    char err[512] = "", path[] = "/tmp/opjit_isa_XXXXXX", cmd[256], line[512];
    cr_assert_eq(jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err), 0, "%s", err);
    cr_assert_not_null(obj);
    int fd = mkstemp(path);
    cr_assert(fd >= 0 && write(fd, obj, obj_len) == (ssize_t)obj_len);
    close(fd);
    free(obj);
    snprintf(cmd, sizeof cmd, "objdump -d --no-show-raw-insn %s", path);
    FILE *p = popen(cmd, "r");
    int zmm = 0, evex = 0, masked = 0, insns = 0;
    while (p && fgets(line, sizeof line, p)) {
      insns += strchr(line, '\t') != NULL;
      zmm += strstr(line, "%zmm") != NULL;
      masked += strstr(line, "{%k") != NULL;
      for (int r = 16; r < 32; r++) {
        char reg[16];
        snprintf(reg, sizeof reg, "mm%d", r);
        evex += strstr(line, reg) != NULL;
      }
    }
    pclose(p);
    unlink(path);
    cr_assert_gt(insns, 10, "objdump read no code");
    if (isa == JT_ISA_AVX2) {
      cr_assert(!zmm && !evex && !masked, "shape %zu: AVX2 code with %d zmm, %d EVEX registers, "
                "%d masked instructions", t, zmm, evex, masked);
    } else {
      cr_assert_gt(zmm, 0, "shape %zu: 512-bit vectors without zmm registers", t);
      if (t < 2)
        cr_assert_gt(masked, 0, "shape %zu: no masked tails", t);
    }
  }
}

/* Matrix-vector products as the agent maps GEMV (n = 1; op(A) = A^T, numpy's A @ x on a C-order
 * A, has a dot-product kernel of its own when x is contiguous) and AXPY (k = 1): M across the
 * 4-column steps and their tails, K across the 2-vector steps, whole vectors and partial ones,
 * x contiguous or strided (op(B) = B^T), every alpha/beta class, padded leading dimensions. */
ISA_TEST(matrix_vector_products_match_the_reference)
{
  static const int ms[] = {1, 3, 4, 5, 16, 17, 33, 100}, ks[] = {1, 7, 16, 31, 33, 64, 100, 300};
  for (int t = 0; t < 2 * 8 * 8; t++) {
    jt_gemm_t g = {.f64 = (int)rnd(2), .ta = t & 1, .tb = rnd(4) == 0, .m = ms[t / 2 % 8], .n = 1,
                   .k = ks[t / 16]};
    if (g.ta && g.tb && g.k > JT_GEMM_MAX_K_PACKED)
      g.tb = 0; /* x strided: the A^T panel's limit */
    g.lda = (g.ta ? g.k : g.m) + (int)rnd(3), g.ldb = g.tb ? 1 + (int)rnd(3) : g.k, g.ldc = g.m;
    double alpha = alphas[rnd(4)], beta = betas[rnd(4)];
    g.alpha_one = alpha == 1;
    g.beta_class = beta == 0 ? 0 : beta == 1 ? 1 : 2;
    check(&g, compile(&g), alpha, beta, g.beta_class == 0);
  }
  for (int m = 1; m < 200; m += 1 + (int)rnd(20)) { /* y = alpha x + y */
    jt_gemm_t g = {.f64 = m & 1, .m = m, .n = 1, .k = 1, .lda = m, .ldb = 1, .ldc = m, .beta_class = 1};
    check(&g, compile(&g), 0.75, 1, 0);
  }
}

/* Products whose B outgrows L2 come in N blocks (jt_gemm_t.nc), each with its K blocks, A's
 * panels and the test of A's alignment again (A aligned, and off a vector), B's sliver where
 * its columns pile up in one L1 set: the generator's own width, forced ones (a narrower last
 * block, one of a single column), every beta class (beta = 0 over a C of NaN), past the old
 * limit of 1024 on K. The width shows in the kernel's name. */
ISA_TEST(n_blocks_match_the_reference)
{
  for (int t = 0; t < 16; t++) {
    jt_gemm_t g = {.f64 = t & 1, .tb = (int)rnd(2), .m = 1 + (int)rnd(130),
                   .n = 300 + (int)rnd(900), .k = 200 + (int)rnd(1000), .beta_class = t / 2 % 3,
                   .alpha_one = (int)rnd(2)};
    g.nc = t % 4 == 0 ? 0 : t % 4 == 1 ? 1 + (int)rnd(300) : t % 4 == 2 ? g.n - 1 : 64;
    g.copy_a = t % 3 == 0 ? 0 : t % 3;
    g.lda = g.m + (int)rnd(3), g.ldb = (g.tb ? g.n : g.k) + (int)rnd(3), g.ldc = g.m + (int)rnd(3);
    if (t == 5) /* A^T's panel instead of K blocks */
      g.ta = 1, g.k = JT_GEMM_MAX_K_PACKED, g.lda = g.k + 1, g.copy_a = 0;
    if (t >= 12) /* B's columns 4 or 8 KB apart: its sliver copied */
      g.tb = 0, g.k = 700 + (int)rnd(300), g.ldb = 1024 * (1 + (t & 1)), g.copy_a = 0;
    a_shift = t % 2 ? 1 : 0; /* A aligned, or one element off */
    double beta = g.beta_class == 0 ? 0 : g.beta_class == 1 ? 1 : -0.5;
    check(&g, compile(&g), g.alpha_one ? 1 : 0.75, beta, g.beta_class == 0);
    a_shift = -1;
    if (g.nc) {
      cr_assert(named_with(&g, "_n%d", g.nc), "N blocks of %d", g.nc);
    }
  }
}

/* Where B's sliver is copied (its columns 4 or 8 KB apart) every column block passes over all
 * of M's row blocks, and M comes in blocks (jt_gemm_t.mc) whose part of A stays in L2: the
 * generator's own wherever M rows of a K block (1 KB of each) outgrow half this CPU's L2 (the
 * kernel's name says mc; AVX2 in blocks of 2 x 6, whose columns pile up), and not below;
 * forced ones of any height (a row block's tail inside every block, a last block of one row),
 * some inside N blocks; every beta class (beta = 0 over a C of NaN), both tails, A aligned and
 * off. */
ISA_TEST(m_blocks_match_the_reference)
{
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  l2 = l2 > 0 ? l2 : 256 * 1024;
  int edge = (int)(l2 / 2 / 1024); /* the most rows whose K block of A fits half of L2 */
  for (int t = 0; t < 10; t++) {
    int m = t == 1 ? 1 + (int)rnd((unsigned)edge) : edge + 1 + (int)rnd(200);
    jt_gemm_t g = {.f64 = t & 1, .m = m < JT_GEMM_MAX_DIM ? m : JT_GEMM_MAX_DIM,
                   .n = 20 + (int)rnd(80), .k = 600 + (int)rnd(300), .beta_class = t / 2 % 3,
                   .alpha_one = (int)rnd(2), .tails = 1 + (int)rnd(2)};
    g.mc = t < 2 ? 0 : t == 2 ? g.m - 1 : 1 + (int)rnd((unsigned)g.m - 1);
    g.nc = t >= 6 ? 14 + (int)rnd(40) : 0; /* N in blocks around them */
    if (isa == JT_ISA_AVX2) /* its default for such an M, 4 x 3, piles up no B columns */
      g.mr_vecs = 2, g.nr = 6;
    g.lda = g.m + (int)rnd(3), g.ldb = 1024 * (1 + (int)rnd(2)), g.ldc = g.m + (int)rnd(3);
    a_shift = t % 3 == 1 ? 1 : 0;
    double beta = g.beta_class == 0 ? 0 : g.beta_class == 1 ? 1 : -0.5;
    check(&g, compile(&g), g.alpha_one ? 1 : 0.75, beta, g.beta_class == 0);
    a_shift = -1;
    if (g.mc)
      cr_assert(named_with(&g, "_m%d", g.mc), "M blocks of %d", g.mc);
    else
      cr_assert(named_with(&g, "_m") == (g.m > edge),
                "M in blocks exactly where its K block of A outgrows half of L2 (%ld bytes)", l2);
    if (g.nc && g.nc < g.n)
      cr_assert(named_with(&g, "_n%d", g.nc), "N blocks of %d", g.nc);
  }
}

/* GEMVs (n = 1, op(A) = A) whose A fills an L1 or more sweep A's columns 8 at a time (jt_gemm_t.gemv
 * 1), smaller ones run blocks of rows (2): both, forced either way, for M and K from 1 to past
 * a sweep's 4 KB chunk and 8-column steps (a partial last chunk, vector and step), x
 * contiguous or ldb apart (op(B) = B^T), every alpha and beta class (beta = 0 over a C of NaN),
 * both tails; the default by A's size, and tune() times the other. */
ISA_TEST(gemvs_sweep_or_block_and_match_the_reference)
{
  static const int dims[] = {1, 3, 8, 9, 31, 64, 100, 255, 1024, 1031, 2048};
  for (int t = 0; t < 60; t++) {
    jt_gemm_t g = {.f64 = t & 1, .tb = (int)rnd(2), .n = 1, .m = dims[rnd(11)],
                   .k = dims[rnd(11)], .beta_class = (int)rnd(3), .alpha_one = (int)rnd(2),
                   .tails = 1 + (int)rnd(2), .gemv = t % 3};
    g.lda = g.m + (int)rnd(3), g.ldb = g.tb ? 1 + (int)rnd(3) : g.k + (int)rnd(3);
    g.ldc = g.m + (int)rnd(3);
    double beta = g.beta_class == 0 ? 0 : g.beta_class == 1 ? 1 : -0.5;
    check(&g, compile(&g), g.alpha_one ? 1 : 0.75, beta, g.beta_class == 0);
    int want = g.gemv ? g.gemv : (long)g.m * g.k * (g.f64 ? 8 : 4) >= 32768 ? 1 : 2;
    cr_assert(named_with(&g, "_w%d", want), "%dx%d: gemv %d", g.m, g.k, want);
  }
  jt_gemm_t g = {.m = 512, .n = 1, .k = 512, .lda = 512, .ldb = 512, .ldc = 512, .alpha_one = 1,
                 .beta_class = 1, .isa = isa};
  jt_tune_t rep;
  jt_gemm_fn fn = tuned(&g, &rep);
  size_t size, obj_len;
  void *obj = NULL;
  char err[512] = "";
  cr_assert(rep.n >= 2 && rep.cand[0].gemv == 1 && rep.cand[1].gemv == 2,
            "the sweep first, then blocks of rows (%d candidates)", rep.n);
  check(&g, fn, 1, 1, 0);
  cr_assert_eq(jit->release(fn, err, sizeof err), 0, "%s", err);
  g.gemv = 3;
  cr_assert_eq(jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err), -1);
  cr_assert(strstr(err, "gemv"), "%s", err);
  g.gemv = 1, g.mr_vecs = 3; /* a blocking asked for: the sweep refuses it, by default blocks */
  cr_assert_eq(jit->gemm(&g, &fn, &size, &obj, &obj_len, err, sizeof err), -1);
  cr_assert(strstr(err, "blocking"), "%s", err);
  g.gemv = 0;
  cr_assert(named_with(&g, "_%dx1", 3) && named_with(&g, "_w%d", 2), "a blocking asked for");
}

/* GEMVs start A's columns at a vector boundary where they lie off one (jit/gemm.c, emit_sweep
 * and emit_dots: the elements before it a partial vector; the code picked, or the dots' head
 * and tails found, at run time): op(A) = A swept and op(A) = A^T dotted, A at every element's
 * offset from a 64-byte line (the realigned offsets, and the others, read where they lie), lda
 * a multiple of 64 bytes (every column as far off as the first) or one element more (never
 * realigned), the realigned dimension (the sweep's M, the dots' K) from two vectors to past a
 * 4 KB chunk with a partial vector after the head or none, 256- and 512-bit vectors, both
 * tails, every beta class. */
ISA_TEST(a_gemv_matches_the_reference_wherever_a_lies)
{
  static const int dims[] = {32, 45, 100, 128, 1024, 1100, 2047};
  for (int ta = 0; ta < 2; ta++)
    for (int f64 = 0; f64 < 2; f64++)
      for (int shift = 0; shift < 64 / (f64 ? 8 : 4); shift++) {
        int along = dims[rnd(7)], across = 1 + (int)rnd(40); /* down A's columns, and across */
        jt_gemm_t g = {.f64 = f64, .ta = ta, .n = 1, .m = ta ? across : along,
                       .k = ta ? along : across, .gemv = ta ? 0 : 1, .tails = 1 + (int)rnd(2),
                       .beta_class = (int)rnd(3), .alpha_one = (int)rnd(2),
                       .vbits = isa == JT_ISA_AVX512 && rnd(2) ? 256 : 0};
        g.lda = (along + 15) / 16 * 16 + (rnd(4) == 0), g.ldb = g.k, g.ldc = g.m;
        double beta = g.beta_class == 0 ? 0 : g.beta_class == 1 ? 1 : -0.5;
        a_shift = shift;
        check(&g, compile(&g), g.alpha_one ? 1 : 0.75, beta, g.beta_class == 0);
        a_shift = -1;
        cr_assert(ta || named_with(&g, "_w%d", 1), "%dx%d: the sweep", g.m, g.k);
      }
}

/* K in blocks (1 KB of each B column: 256 floats, 128 doubles, where K spans more than two):
 * the first block applies beta, the others add to C; under beta = 0 a C full of NaN never
 * leaks into the result. K across the block edges, M and N with tails, A's slice copied or
 * (B's columns piling up in one L1 set) B's sliver. */
ISA_TEST(k_blocks_apply_beta_once)
{
  static const int ks[] = {127, 128, 129, 255, 256, 257, 600, 1024};
  for (int t = 0; t < 2 * 8 * 3; t++) {
    jt_gemm_t g = {.f64 = t & 1, .tb = (int)rnd(2), .m = 1 + (int)rnd(70), .n = 1 + (int)rnd(30),
                   .k = ks[t / 2 % 8], .beta_class = t / 16};
    g.lda = g.m + (int)rnd(3), g.ldb = (g.tb ? g.n : g.k) + (int)rnd(3), g.ldc = g.m + (int)rnd(3);
    if (t % 4 == 0) /* B's columns 8 KB apart, all in one L1 set: its sliver is copied */
      g.tb = 0, g.n = 8 + (int)rnd(20), g.ldb = 1024;
    double beta = g.beta_class == 0 ? 0 : g.beta_class == 1 ? 1 : -0.5;
    g.alpha_one = (int)rnd(2);
    check(&g, compile(&g), g.alpha_one ? 1 : 0.75, beta, g.beta_class == 0);
  }
}
