/* SPDX-License-Identifier: MIT */
/* The BLAS host: interposes the Fortran (sgemm_ ...) and CBLAS (cblas_sgemm ...) symbols,
 * reduces each call to a signature and forwards it, arguments untouched, to the next
 * definition in the process. Integers are LP64 BLAS ints (int32), as Debian's libblas.so.3. */
#include "blas.h"
#include "blas_key.h"
#include "../agent.h"
#include "../heap.h"
#include "../opt.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int blasint;

enum { CBLAS_ROW_MAJOR = 101, CBLAS_COL_MAJOR = 102 };
enum { CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112, CBLAS_CONJ_TRANS = 113 };
enum { CBLAS_UPPER = 121, CBLAS_LOWER = 122 };

static uint8_t cblas_trans(int t)
{
  return t == CBLAS_NO_TRANS ? AG_N : t == CBLAS_TRANS ? AG_T : t == CBLAS_CONJ_TRANS ? AG_C : AG_TRANS_BAD;
}

static uint8_t cblas_uplo(int u)
{
  return u == CBLAS_UPPER ? AG_UPPER : u == CBLAS_LOWER ? AG_LOWER : AG_UPLO_BAD;
}

/* Notes where a call's operands lie in e (ag_entry_t.offsets, for its kernel's duel; e NULL: a
 * call the full table counts as overflow), when they moved (a program passes the same buffers
 * call after call) and while the signature may yet get a kernel: in jit mode, cold or queued.
 * Not once one serves, nor in profile mode: two threads whose operands lie differently wrote it
 * in turn at every call through the full path, taking the entry's line from each other
 * (tcount.h says what that cost). */
static inline void note_offsets(ag_entry_t *e, const void *a, const void *b, const void *c)
{
  uint32_t t = e ? atomic_load_explicit(&e->tier, memory_order_relaxed) : AG_TIER_NONE;
  if ((t != AG_TIER_COLD && t != AG_TIER_QUEUED) || ag_opts.num[AG_OPT_MODE] != AG_MODE_JIT)
    return;
  uint32_t off = (uint32_t)((uintptr_t)a & 63) | (uint32_t)((uintptr_t)b & 63) << 6 |
                 (uint32_t)((uintptr_t)c & 63) << 12;
  if (atomic_load_explicit(&e->offsets, memory_order_relaxed) != off)
    atomic_store_explicit(&e->offsets, off, memory_order_relaxed);
}

/* Each interposed symbol resolves its original once and accounts for the call around it; KEY
 * is an expression building the call's ag_sig_t from the arguments (its family's typed problem
 * through its encoder, blas_key.h). When the signature has a published JIT variant, the variant
 * runs in front of the original. The exported symbol takes the fast path (agent.h) when it can
 * and otherwise calls name_full, the full path, with the same arguments: out of line, so that
 * the fast path's arguments stay in registers.
 *
 * A GEMM, GEMV, AXPY or SYRK (A, B, C, alpha, beta name the operands and scalars: for a GEMV B
 * is x and C is y; an AXPY is y += alpha x [1], B being that 1; a SYRK's B is its A). */
#define INTERPOSE_JIT(name, params, args, KEY, A, B, C, ALPHA, BETA)                          \
  typedef void (*name##_fn) params;                                                          \
  static void *_Atomic name##_real;                                                          \
  static __attribute__((noinline)) void name##_full params                                   \
  {                                                                                          \
    name##_fn fn = (name##_fn)ag_resolve(&name##_real, #name);                               \
    ag_sig_t k = KEY;                                                                        \
    ag_call_t c;                                                                             \
    if (!ag_call_begin(&c, &k)) {                                                            \
      if (fn)                                                                                \
        fn args;                                                                             \
      return;                                                                                \
    }                                                                                        \
    note_offsets(c.e, A, B, C);                                                              \
    void *v = ag_call_variant(&c);                                                           \
    ag_verify_t vf;                                                                          \
    int how = v ? ag_tier_gemm(c.e, v, A, B, C, ALPHA, BETA, &vf) : AG_RUN_ORIGINAL;         \
    if (how == AG_RUN_DONE)                                                                  \
      c.variant = 1;                                                                         \
    else if (fn)                                                                             \
      fn args;                                                                               \
    if (how == AG_RUN_VERIFY) {                                                              \
      c.t0 = 0; /* ran both: a timing of neither */                                          \
      ag_tier_verify_end(&vf);                                                               \
    }                                                                                        \
    ag_call_end(&c);                                                                         \
  }                                                                                          \
  AG_EXPORT void name params                                                                 \
  {                                                                                          \
    ag_fast_t ag_f;                                                                          \
    if (ag_fast_ready(&ag_f)) {                                                              \
      ag_sig_t ag_k = KEY;                                                                   \
      if (ag_likely(ag_fast_lookup(&ag_f, &ag_k))) {                                         \
        if (ag_f.v) { /* a kernel of a part of N (M) takes the full path (agent/par.h) */    \
          const void *ka = A, *kb = B;                                                       \
          if (ag_likely(ag_vrun[ag_f.e->index].parts <= 1 &&                                 \
                        ag_tier_gemm_guard(ag_f.e, &ka, &kb, C))) {                          \
            ag_fast_enter(&ag_f);                                                            \
            ((void (*)(const void *, const void *, void *, double, double))ag_f.v)(          \
                ka, kb, C, ALPHA, BETA);                                                     \
            ag_fast_leave(&ag_f, 1);                                                         \
            return;                                                                          \
          }                                                                                  \
        } else {                                                                             \
          name##_fn fn = (name##_fn)atomic_load_explicit(&name##_real, memory_order_acquire); \
          if (ag_likely(fn != NULL)) {                                                       \
            ag_fast_enter(&ag_f);                                                            \
            fn args;                                                                         \
            ag_fast_leave(&ag_f, 0);                                                         \
            return;                                                                          \
          }                                                                                  \
        }                                                                                    \
      }                                                                                      \
    }                                                                                        \
    name##_full args;                                                                        \
    AG_NO_SIBCALL();                                                                         \
  }
/* A dot product (X and Y name the vectors). */
#define INTERPOSE_DOT(T, name, params, args, KEY, X, Y)                                       \
  typedef T (*name##_fn) params;                                                             \
  static void *_Atomic name##_real;                                                          \
  static __attribute__((noinline)) T name##_full params                                      \
  {                                                                                          \
    name##_fn fn = (name##_fn)ag_resolve(&name##_real, #name);                               \
    ag_sig_t k = KEY;                                                                        \
    ag_call_t c;                                                                             \
    if (!ag_call_begin(&c, &k))                                                              \
      return fn ? fn args : (T)0;                                                            \
    note_offsets(c.e, X, Y, NULL);                                                           \
    void *v = ag_call_variant(&c);                                                           \
    double r = 0;                                                                            \
    int how = v ? ag_tier_dot(c.e, v, sizeof(T) == 8, X, Y, &r) : AG_RUN_ORIGINAL;           \
    T out = (T)r;                                                                            \
    if (how == AG_RUN_DONE) {                                                                \
      c.variant = 1;                                                                         \
    } else {                                                                                 \
      out = fn ? fn args : (T)0;                                                             \
      if (how == AG_RUN_VERIFY) {                                                            \
        c.t0 = 0;                                                                            \
        ag_tier_dot_verify_end(c.e, r, out, X, Y);                                           \
      }                                                                                      \
    }                                                                                        \
    ag_call_end(&c);                                                                         \
    return out;                                                                              \
  }                                                                                          \
  AG_EXPORT T name params                                                                    \
  {                                                                                          \
    ag_fast_t ag_f;                                                                          \
    if (ag_fast_ready(&ag_f)) {                                                              \
      ag_sig_t ag_k = KEY;                                                                   \
      if (ag_likely(ag_fast_lookup(&ag_f, &ag_k))) {                                         \
        T out = 0;                                                                           \
        if (ag_f.v) { /* as ag_tier_dot, its verifications over (ag_fast_lookup) */          \
          ag_fast_enter(&ag_f);                                                              \
          ((void (*)(const void *, const void *, void *, double, double))ag_f.v)(X, Y, &out, \
                                                                                 0, 0);      \
          ag_fast_leave(&ag_f, 1);                                                           \
          return out;                                                                        \
        }                                                                                    \
        name##_fn fn = (name##_fn)atomic_load_explicit(&name##_real, memory_order_acquire);  \
        if (ag_likely(fn != NULL)) {                                                         \
          ag_fast_enter(&ag_f);                                                              \
          out = fn args;                                                                     \
          ag_fast_leave(&ag_f, 0);                                                           \
          return out;                                                                        \
        }                                                                                    \
      }                                                                                      \
    }                                                                                        \
    return name##_full args;                                                                 \
  }

#define GEMM_KEY(...) ag_blas_gemm_key(&(ag_blas_gemm_t){__VA_ARGS__})
#define GEMV_KEY(...) ag_blas_gemv_key(&(ag_blas_gemv_t){__VA_ARGS__})
#define VEC_KEY(...) ag_blas_vec_key(&(ag_blas_vec_t){__VA_ARGS__})
#define SYRK_KEY(...) ag_blas_syrk_key(&(ag_blas_syrk_t){__VA_ARGS__})
/* A scalar's class (blas_key.h): a float by its own bits, a Fortran argument where it lies. */
#define CLASS(x) _Generic((x), float: ag_scalar_class_f, default: ag_scalar_class)(x)
#define CLASS_AT(p) _Generic((p), const float *: ag_scalar_class_at_f, default: ag_scalar_class_at_d)(p)

/* ---- Fortran ----------------------------------------------------------------------------- */

#define F77_GEMM(name, T, DT)                                                                \
  INTERPOSE_JIT(name,                                                                       \
            (const char *ta, const char *tb, const blasint *m, const blasint *n,             \
             const blasint *k_, const T *alpha, const T *a, const blasint *lda, const T *b,  \
             const blasint *ldb, const T *beta, T *c_, const blasint *ldc),                  \
            (ta, tb, m, n, k_, alpha, a, lda, b, ldb, beta, c_, ldc),                        \
            GEMM_KEY(DT, AG_API_F77, AG_COL, ag_trans_char(*ta), ag_trans_char(*tb),         \
                     CLASS_AT(alpha), CLASS_AT(beta), *m, *n, *k_, *lda, *ldb, *ldc),            \
            a, b, c_, *alpha, *beta)

#define F77_GEMV(name, T, DT)                                                                \
  INTERPOSE_JIT(name,                                                                        \
            (const char *tr, const blasint *m, const blasint *n, const T *alpha, const T *a, \
             const blasint *lda, const T *x, const blasint *incx, const T *beta, T *y,       \
             const blasint *incy),                                                           \
            (tr, m, n, alpha, a, lda, x, incx, beta, y, incy),                               \
            GEMV_KEY(DT, AG_API_F77, AG_COL, ag_trans_char(*tr), CLASS_AT(alpha),           \
                     CLASS_AT(beta), *m, *n, *lda, *incx, *incy),                              \
            a, x, y, *alpha, *beta)

/* An AXPY runs as a one-column GEMM: y += alpha x [1] (B is that 1). */
#define F77_AXPY(name, T, DT)                                                                \
  INTERPOSE_JIT(name,                                                                        \
            (const blasint *n, const T *alpha, const T *x, const blasint *incx, T *y,        \
             const blasint *incy),                                                           \
            (n, alpha, x, incx, y, incy),                                                    \
            VEC_KEY(AG_OP_AXPY, DT, AG_API_F77, CLASS_AT(alpha), AG_S_ONE, *n, *incx, *incy),  \
            x, (const T[]){1}, y, *alpha, 1.0)

#define F77_DOT(name, T, DT)                                                                 \
  INTERPOSE_DOT(T, name,                                                                     \
            (const blasint *n, const T *x, const blasint *incx, const T *y,                  \
             const blasint *incy),                                                           \
            (n, x, incx, y, incy),                                                           \
            VEC_KEY(AG_OP_DOT, DT, AG_API_F77, AG_S_NONE, AG_S_NONE, *n, *incx, *incy),      \
            x, y)

#define F77_SYRK(name, T, DT)                                                                \
  INTERPOSE_JIT(name,                                                                        \
            (const char *uplo, const char *tr, const blasint *n, const blasint *k_,          \
             const T *alpha, const T *a, const blasint *lda, const T *beta, T *c_,           \
             const blasint *ldc),                                                            \
            (uplo, tr, n, k_, alpha, a, lda, beta, c_, ldc),                                 \
            SYRK_KEY(DT, AG_API_F77, AG_COL, ag_uplo_char(*uplo), ag_trans_char(*tr),        \
                     CLASS_AT(alpha), CLASS_AT(beta), *n, *k_, *lda, *ldc),                      \
            a, a, c_, *alpha, *beta)

F77_GEMM(sgemm_, float, AG_F32)
F77_GEMM(dgemm_, double, AG_F64)
F77_GEMV(sgemv_, float, AG_F32)
F77_GEMV(dgemv_, double, AG_F64)
F77_AXPY(saxpy_, float, AG_F32)
F77_AXPY(daxpy_, double, AG_F64)
F77_DOT(sdot_, float, AG_F32)
F77_DOT(ddot_, double, AG_F64)
F77_SYRK(ssyrk_, float, AG_F32)
F77_SYRK(dsyrk_, double, AG_F64)

/* ---- CBLAS ------------------------------------------------------------------------------- */

/* An order that is neither is kept apart (AG_ORDER_BAD): such calls are never compiled, and the
 * original library reports them as BLAS does. */
#define ORDER(o) ((o) == CBLAS_ROW_MAJOR ? AG_ROW : (o) == CBLAS_COL_MAJOR ? AG_COL : AG_ORDER_BAD)

#define CBLAS_GEMM(name, T, DT)                                                              \
  INTERPOSE_JIT(name,                                                                       \
            (int order, int ta, int tb, blasint m, blasint n, blasint k_, T alpha,           \
             const T *a, blasint lda, const T *b, blasint ldb, T beta, T *c_, blasint ldc),  \
            (order, ta, tb, m, n, k_, alpha, a, lda, b, ldb, beta, c_, ldc),                 \
            GEMM_KEY(DT, AG_API_CBLAS, ORDER(order), cblas_trans(ta), cblas_trans(tb),       \
                     CLASS(alpha), CLASS(beta), m, n, k_, lda, ldb, ldc),                    \
            a, b, c_, alpha, beta)

#define CBLAS_GEMV(name, T, DT)                                                              \
  INTERPOSE_JIT(name,                                                                        \
            (int order, int tr, blasint m, blasint n, T alpha, const T *a, blasint lda,      \
             const T *x, blasint incx, T beta, T *y, blasint incy),                          \
            (order, tr, m, n, alpha, a, lda, x, incx, beta, y, incy),                        \
            GEMV_KEY(DT, AG_API_CBLAS, ORDER(order), cblas_trans(tr), CLASS(alpha),          \
                     CLASS(beta), m, n, lda, incx, incy),                                    \
            a, x, y, alpha, beta)

#define CBLAS_AXPY(name, T, DT)                                                              \
  INTERPOSE_JIT(name, (blasint n, T alpha, const T *x, blasint incx, T *y, blasint incy),    \
            (n, alpha, x, incx, y, incy),                                                    \
            VEC_KEY(AG_OP_AXPY, DT, AG_API_CBLAS, CLASS(alpha), AG_S_ONE, n, incx, incy),    \
            x, (const T[]){1}, y, alpha, 1.0)

#define CBLAS_DOT(name, T, DT)                                                               \
  INTERPOSE_DOT(T, name, (blasint n, const T *x, blasint incx, const T *y, blasint incy),    \
            (n, x, incx, y, incy),                                                           \
            VEC_KEY(AG_OP_DOT, DT, AG_API_CBLAS, AG_S_NONE, AG_S_NONE, n, incx, incy),       \
            x, y)

#define CBLAS_SYRK(name, T, DT)                                                              \
  INTERPOSE_JIT(name,                                                                        \
            (int order, int uplo, int tr, blasint n, blasint k_, T alpha, const T *a,        \
             blasint lda, T beta, T *c_, blasint ldc),                                       \
            (order, uplo, tr, n, k_, alpha, a, lda, beta, c_, ldc),                          \
            SYRK_KEY(DT, AG_API_CBLAS, ORDER(order), cblas_uplo(uplo), cblas_trans(tr),      \
                     CLASS(alpha), CLASS(beta), n, k_, lda, ldc),                            \
            a, a, c_, alpha, beta)

CBLAS_GEMM(cblas_sgemm, float, AG_F32)
CBLAS_GEMM(cblas_dgemm, double, AG_F64)
CBLAS_GEMV(cblas_sgemv, float, AG_F32)
CBLAS_GEMV(cblas_dgemv, double, AG_F64)
CBLAS_AXPY(cblas_saxpy, float, AG_F32)
CBLAS_AXPY(cblas_daxpy, double, AG_F64)
CBLAS_DOT(cblas_sdot, float, AG_F32)
CBLAS_DOT(cblas_ddot, double, AG_F64)
CBLAS_SYRK(cblas_ssyrk, float, AG_F32)
CBLAS_SYRK(cblas_dsyrk, double, AG_F64)

/* ---- The duel (blas.h) ------------------------------------------------------------------- */

/* Scratch operands of one signature's shape (random values in [-1, 1], scalars of its
 * classes), as the call sites hand them to a variant (A, B, C, alpha, beta; a dot product's x
 * and y as A and B), and the original operator called on them. */
typedef struct duel_ops_s {
  ag_sig_t key;
  const void *a, *b;
  void *c;
  double alpha, beta;
  void *fn;      /* the original operator */
  void *variant; /* the kernel */
  const ag_vrun_t *run; /* how the kernel is called: its operand order, its parts */
  int reps;      /* runs of the variant per call (blas.h) */
  void *mem;     /* the scratch (ag_heap_scratch), of bytes */
  size_t bytes;
} duel_ops_t;

/* A signature needing more scratch gets no duel, nor a check: room for the generator's largest
 * dgemm (A, B and C, and the original's C beside the kernel's: 4 x 32 MB at 2048^2) */
#define DUEL_SCRATCH_MAX ((size_t)4 * JT_GEMM_MAX_DIM * JT_GEMM_MAX_DIM * 8 + (1u << 20))

static double scalar_of(unsigned cls)
{
  return cls == AG_S_ONE ? 1.0 : cls == AG_S_ZERO ? 0.0 : cls == AG_S_MINUS_ONE ? -1.0 : 0.5;
}

/* Elements a vector of n with stride inc spans. */
static size_t span(int64_t n, int64_t inc)
{
  return n > 0 ? (size_t)((n - 1) * llabs(inc) + 1) : 0;
}

static double original_once(const duel_ops_t *o);

/* The original's side of a duel: once per call, or -reps times under the tests' fault seam that
 * makes the original look slower (ag_blas_duel). */
static void duel_original(void *self)
{
  const duel_ops_t *o = self;
  for (int i = 0; i < (o->reps < 0 ? -o->reps : 1); i++)
    original_once(o);
}

static int exiting(void) { return atomic_load_explicit(&ag_exiting, memory_order_relaxed); }

static _Atomic unsigned late_calls; /* the library called once the exit had begun (the seam's) */

/* One call of the original on o's operands; returns a dot product's result (else 0). None once
 * the exit has begun: past the exit's wait (agent.c, exit_begins) the library may be finalised,
 * and a check's scratch (8 MB an operand at most, filled at random), a sanitizer's pace or a
 * thread without a CPU can outlast that wait. The duel and the check then end with "exiting"
 * (original_end). */
static double original_once(const duel_ops_t *o)
{
  if (exiting())
    return 0;
  const ag_sig_t *k = &o->key;
  void *a = (void *)o->a, *b = (void *)o->b, *c = o->c, *fn = o->fn;
  int f64 = k->dtype == AG_F64;
  double al = o->alpha, be = o->beta;
  float alf = (float)al, bef = (float)be;
  void *pa = f64 ? (void *)&al : (void *)&alf, *pb = f64 ? (void *)&be : (void *)&bef;
  blasint m = k->m, n = k->n, kk = k->k, lda = k->lda, ldb = k->ldb, ldc = k->ldc;
  if (exiting()) /* it began since: counted, for the tests' seam (ag_blas_check) */
    atomic_fetch_add(&late_calls, 1);
  const char tc[] = "NTC";
  if (k->api == AG_API_F77) {
    char ta = tc[k->ta], tb = tc[k->tb];
    switch (k->op) {
    case AG_OP_GEMM:
      ((void (*)(const char *, const char *, const blasint *, const blasint *, const blasint *,
                 const void *, const void *, const blasint *, const void *, const blasint *,
                 const void *, void *, const blasint *))fn)(&ta, &tb, &m, &n, &kk, pa, a, &lda, b,
                                                            &ldb, pb, c, &ldc);
      break;
    case AG_OP_GEMV:
      ((void (*)(const char *, const blasint *, const blasint *, const void *, const void *,
                 const blasint *, const void *, const blasint *, const void *, void *,
                 const blasint *))fn)(&ta, &m, &n, pa, a, &lda, b, &ldb, pb, c, &ldc);
      break;
    case AG_OP_AXPY:
      ((void (*)(const blasint *, const void *, const void *, const blasint *, void *,
                 const blasint *))fn)(&m, pa, a, &lda, c, &ldb);
      break;
    case AG_OP_DOT:
      return f64 ? ((double (*)(const blasint *, const void *, const blasint *, const void *,
                                const blasint *))fn)(&m, a, &lda, b, &ldb)
                 : ((float (*)(const blasint *, const void *, const blasint *, const void *,
                               const blasint *))fn)(&m, a, &lda, b, &ldb);
    case AG_OP_SYRK: {
      char uplo = "UL"[k->tb];
      ((void (*)(const char *, const char *, const blasint *, const blasint *, const void *,
                 const void *, const blasint *, const void *, void *, const blasint *))fn)(
          &uplo, &ta, &n, &kk, pa, a, &lda, pb, c, &ldc);
      break;
    }
    }
    return 0;
  }
  int order = k->order == AG_ROW ? CBLAS_ROW_MAJOR : CBLAS_COL_MAJOR;
  int ta = CBLAS_NO_TRANS + k->ta, tb = CBLAS_NO_TRANS + k->tb;
  switch (k->op) {
  case AG_OP_GEMM:
    if (f64)
      ((void (*)(int, int, int, blasint, blasint, blasint, double, const void *, blasint,
                 const void *, blasint, double, void *, blasint))fn)(order, ta, tb, m, n, kk, al, a,
                                                                     lda, b, ldb, be, c, ldc);
    else
      ((void (*)(int, int, int, blasint, blasint, blasint, float, const void *, blasint,
                 const void *, blasint, float, void *, blasint))fn)(order, ta, tb, m, n, kk, alf, a,
                                                                    lda, b, ldb, bef, c, ldc);
    break;
  case AG_OP_GEMV:
    if (f64)
      ((void (*)(int, int, blasint, blasint, double, const void *, blasint, const void *, blasint,
                 double, void *, blasint))fn)(order, ta, m, n, al, a, lda, b, ldb, be, c, ldc);
    else
      ((void (*)(int, int, blasint, blasint, float, const void *, blasint, const void *, blasint,
                 float, void *, blasint))fn)(order, ta, m, n, alf, a, lda, b, ldb, bef, c, ldc);
    break;
  case AG_OP_AXPY:
    if (f64)
      ((void (*)(blasint, double, const void *, blasint, void *, blasint))fn)(m, al, a, lda, c,
                                                                              ldb);
    else
      ((void (*)(blasint, float, const void *, blasint, void *, blasint))fn)(m, alf, a, lda, c,
                                                                             ldb);
    break;
  case AG_OP_DOT:
    return f64 ? ((double (*)(blasint, const void *, blasint, const void *, blasint))fn)(m, a, lda,
                                                                                        b, ldb)
               : ((float (*)(blasint, const void *, blasint, const void *, blasint))fn)(m, a, lda,
                                                                                       b, ldb);
  case AG_OP_SYRK:
    if (f64)
      ((void (*)(int, int, int, blasint, blasint, double, const void *, blasint, double, void *,
                 blasint))fn)(order, CBLAS_UPPER + k->tb, ta, n, kk, al, a, lda, be, c, ldc);
    else
      ((void (*)(int, int, int, blasint, blasint, float, const void *, blasint, float, void *,
                 blasint))fn)(order, CBLAS_UPPER + k->tb, ta, n, kk, alf, a, lda, bef, c, ldc);
    break;
  }
  return 0;
}

static void duel_variant(void *self)
{
  const duel_ops_t *o = self;
  const void *a = o->run->swapped ? o->b : o->a, *b = o->run->swapped ? o->a : o->b;
  double r[1];
  for (int i = 0; i < (o->reps > 0 ? o->reps : 1); i++)
    ag_par_gemm(o->run, (jt_gemm_fn)o->variant, a, b, o->key.op == AG_OP_DOT ? (void *)r : o->c,
                o->alpha, o->beta);
}

/* The original operator of a BLAS key, resolved once as the call sites do; NULL for a key no
 * call site makes (or no original). */
static void *original_of(const ag_sig_t *k)
{
  static void *_Atomic real[2][5][2]; /* [api][op][dtype]: resolved once, as the call sites do */
  static const char *const names[2][5][2] = {
      {{"sgemm_", "dgemm_"},
       {"sgemv_", "dgemv_"},
       {"saxpy_", "daxpy_"},
       {"sdot_", "ddot_"},
       {"ssyrk_", "dsyrk_"}},
      {{"cblas_sgemm", "cblas_dgemm"},
       {"cblas_sgemv", "cblas_dgemv"},
       {"cblas_saxpy", "cblas_daxpy"},
       {"cblas_sdot", "cblas_ddot"},
       {"cblas_ssyrk", "cblas_dsyrk"}}};
  if (k->host != AG_HOST_ID_BLAS || k->op < AG_OP_GEMM || k->op > AG_OP_SYRK ||
      k->dtype < AG_F32 || k->dtype > AG_F64 || k->api < AG_API_F77 || k->api > AG_API_CBLAS ||
      k->order > AG_ROW || k->ta > AG_C || k->tb > AG_C || k->m < 0 || k->n < 0 || k->k < 0 ||
      (k->op <= AG_OP_GEMV &&
       (k->lda < 0 || (k->op == AG_OP_GEMM && (k->ldb < 0 || k->ldc < 0)))) ||
      (k->op == AG_OP_SYRK && (k->tb > AG_LOWER || k->lda < 0 || k->ldc < 0)))
    return NULL;
  return ag_resolve(&real[k->api - 1][k->op - 1][k->dtype - 1],
                    names[k->api - 1][k->op - 1][k->dtype - 1]);
}

/* A key's seed for its scratch operands' values: the same shape, the same operands. */
static uint32_t seed_of(const ag_sig_t *k)
{
  return 2463534242u ^
         ((uint32_t)k->m * 73856093u ^ (uint32_t)k->n * 19349663u ^ (uint32_t)k->k * 83492791u);
}

/* The next operand of n elements of esz bytes at *at: from the next 64-byte line on, off bytes
 * into it (rounded down to a whole element); *at moves past it. */
static char *place(char **at, uint32_t off, size_t n, size_t esz)
{
  char *p = (char *)(((uintptr_t)*at + 63) & ~(uintptr_t)63) + (off & 63 & ~(uint32_t)(esz - 1));
  *at = p + n * esz;
  return p;
}

/* The operands for key into *o, each as far into a line as offsets says (ag_entry_t.offsets):
 * 0, or -1 when the signature cannot be duelled. */
static int duel_operands(const ag_sig_t *key, uint32_t offsets, duel_ops_t *o)
{
  const ag_sig_t *k = key;
  void *fn = original_of(k);
  if (!fn)
    return -1;
  int row = k->order == AG_ROW;
  /* Elements each operand spans, as the call site hands them over: A, B (x), C (y). */
  size_t na = 0, nb = 0, nc = 0;
  switch (k->op) {
  case AG_OP_GEMM: { /* op(A) m x k, op(B) k x n, C m x n; row-major lines are rows */
    int64_t lines_a = row ? (k->ta ? k->k : k->m) : (k->ta ? k->m : k->k);
    int64_t lines_b = row ? (k->tb ? k->n : k->k) : (k->tb ? k->k : k->n);
    na = (size_t)(lines_a * k->lda), nb = (size_t)(lines_b * k->ldb);
    nc = (size_t)((row ? k->m : k->n) * (int64_t)k->ldc);
    break;
  }
  case AG_OP_GEMV: { /* A m x n; x of n (m transposed), y of m (n) */
    int64_t lines = row ? k->m : k->n;
    na = (size_t)(lines * k->lda);
    nb = span(k->ta ? k->m : k->n, k->ldb);
    nc = span(k->ta ? k->n : k->m, k->ldc);
    break;
  }
  case AG_OP_AXPY: /* x and y of n: A is x, C is y */
    na = span(k->m, k->lda), nc = span(k->m, k->ldb);
    break;
  case AG_OP_DOT:
    na = span(k->m, k->lda), nb = span(k->m, k->ldb);
    break;
  case AG_OP_SYRK: /* op(A) n x k (B is A), C n x n */
    na = (size_t)((row != (k->ta != AG_N) ? k->m : k->k) * (int64_t)k->lda);
    nc = (size_t)(k->m * (int64_t)k->ldc);
    break;
  }
  size_t esz = k->dtype == AG_F64 ? 8 : 4, lim = DUEL_SCRATCH_MAX / 8;
  if (na > lim || nb > lim || nc > lim)
    return -1;
  size_t total = (na + nb + nc + 8) * esz + 3 * 128; /* each operand a line and its offset on */
  if (total > DUEL_SCRATCH_MAX)
    return -1;
  char *mem = ag_heap_scratch(total);
  if (!mem)
    return -1;
  uint32_t r = seed_of(k);
  for (size_t i = 0; i < total / esz; i++) {
    r ^= r << 13, r ^= r >> 17, r ^= r << 5;
    double v = (double)r / 2147483648.0 - 1.0;
    if (esz == 8)
      ((double *)(void *)mem)[i] = v;
    else
      ((float *)(void *)mem)[i] = (float)v;
  }
  static const double one[1] = {1};
  static const float onef[1] = {1};
  *o = (duel_ops_t){.key = *k, .fn = fn, .mem = mem, .bytes = total};
  char *at = mem;
  o->a = place(&at, offsets, na, esz);
  const void *b = place(&at, offsets >> 6, nb, esz);
  o->b = k->op == AG_OP_AXPY   ? (esz == 8 ? (const void *)one : (const void *)onef)
         : k->op == AG_OP_SYRK ? o->a
                               : b;
  o->c = place(&at, offsets >> 12, nc, esz);
  o->alpha = scalar_of(k->ab & 15u);
  o->beta = k->op == AG_OP_AXPY ? 1.0 : scalar_of(k->ab >> 4);
  return 0;
}

/* A compile thread is about to call an original (a duel, a check): counted in ag_duels, so that
 * the host's timings meanwhile are not booked and the exit waits for it. Returns 0, or -1 when
 * the process is exiting (nothing counted). */
static int original_begin(void)
{
  atomic_fetch_add(&ag_duels, 1); /* before the check: the exit sees it, or it sees exiting */
  if (atomic_load(&ag_exiting)) {
    atomic_fetch_sub(&ag_duels, 1);
    return -1;
  }
  ag_tl.depth++; /* the original's own inner calls (a CBLAS wrapper's) are not counted */
  return 0;
}

/* ... and is done with it: 0, or -2 when the process began exiting meanwhile. */
static int original_end(void)
{
  ag_tl.depth--;
  atomic_fetch_sub(&ag_duels, 1);
  return atomic_load(&ag_exiting) ? -2 : 0;
}

int ag_blas_duel(const ag_sig_t *key, void *variant, const ag_vrun_t *run, uint32_t offsets,
                 int reps, uint64_t budget_ns, ag_duel_result_t *out)
{
  duel_ops_t o;
  if (duel_operands(key, offsets, &o))
    return -1;
  o.variant = variant;
  o.run = run;
  o.reps = reps;
  ag_duel_t d = {duel_original, duel_variant, &o, ag_now_ns, budget_ns, exiting, ag_thread_cpu_ns};
  int rc = original_begin();
  if (rc == 0) {
    ag_duel_run(&d, out);
    rc = original_end();
  }
  ag_heap_scratch_free(o.mem, o.bytes);
  return rc ? -2 : 0;
}

/* ---- The check on scratch operands (blas.h) ---------------------------------------------- */

/* The original's side of a check (verify.h, ag_verify_orig_fn): a and b as the kernel takes
 * them, handed to the library in the key's own order; a dot product's result stored at c. */
static void check_original(void *self, const void *a, const void *b, void *c, double alpha,
                           double beta)
{
  duel_ops_t *o = self;
  o->a = o->run->swapped ? b : a, o->b = o->run->swapped ? a : b, o->c = c;
  o->alpha = alpha, o->beta = beta;
  double r = original_once(o);
  if (o->key.op == AG_OP_DOT && o->key.dtype == AG_F64)
    *(double *)c = r;
  else if (o->key.op == AG_OP_DOT)
    *(float *)c = (float)r;
}

/* A scalar of class cls for a check, as a call of the key's type passes it: "other" is neither
 * a power of two nor the duel's 0.5, so that a kernel scaling by the wrong one rounds apart. */
static double check_scalar(unsigned cls, double other, int f64)
{
  double v = cls == AG_S_ONE ? 1.0 : cls == AG_S_ZERO ? 0.0 : cls == AG_S_MINUS_ONE ? -1.0 : other;
  return f64 ? v : (double)(float)v;
}

/* Creates the empty file /tmp/opjit-held-PID followed by suffix (the seam below). */
static void held_mark(const char *suffix)
{
  char path[80];
  snprintf(path, sizeof path, "/tmp/opjit-held-%d%s", (int)getpid(), suffix);
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0)
    close(fd);
}

/* The tests' seam (OPJIT_TEST_FAULT=hold-check): the process's first check, counted, waits
 * for the exit to begin (30 s at most), then goes on as a check the exit interrupts would;
 * hold-check-late: 1 s past the exit's wait (AG_EXIT_DUEL_WAIT_MS; a check on large scratch
 * under a sanitizer); hold-check-slow: 500 ms past the exit's beginning, within its wait (a
 * compile thread without a CPU on a loaded machine). /tmp/opjit-held-PID tells the program it
 * waits; /tmp/opjit-held-PID.done that it is over, or .late that it called the library after
 * the exit began (ag_blas_check). Returns whether it held this check. */
static int hold_until_exit(void)
{
  static _Atomic int held;
  const char *fault = getenv("OPJIT_TEST_FAULT");
  int late = fault && !strcmp(fault, "hold-check-late");
  int slow = fault && !strcmp(fault, "hold-check-slow");
  if (!(late || slow || (fault && !strcmp(fault, "hold-check"))) || atomic_exchange(&held, 1))
    return 0;
  held_mark("");
  for (int ms = 0; !exiting() && ms < 30000; ms++)
    usleep(1000);
  if (late || slow)
    usleep(late ? (AG_EXIT_DUEL_WAIT_MS + 1000) * 1000 : 500 * 1000);
  return 1;
}

int ag_blas_check(const ag_sig_t *key, const jt_gemm_t *g, void *variant, const ag_vrun_t *run,
                  ag_scratch_t *out)
{
  static const double one[1] = {1};
  static const float onef[1] = {1};
  void *fn = original_of(key);
  if (!fn)
    return -1;
  int f64 = key->dtype == AG_F64;
  duel_ops_t o = {.key = *key, .fn = fn, .run = run};
  double alpha = check_scalar(key->ab & 15u, 0.7, f64);
  double beta = key->op == AG_OP_AXPY ? 1.0 : check_scalar(key->ab >> 4, 0.3, f64);
  const void *b_fixed = key->op != AG_OP_AXPY ? NULL : f64 ? (const void *)one : (const void *)onef;
  if (original_begin())
    return -2;
  int held = hold_until_exit();
  int rc = ag_verify_scratch(g, run, (jt_gemm_fn)variant, check_original, &o, alpha, beta, b_fixed,
                             seed_of(key), DUEL_SCRATCH_MAX, out);
  if (held)
    held_mark(atomic_load(&late_calls) ? ".late" : ".done");
  return original_end() ? -2 : rc;
}
