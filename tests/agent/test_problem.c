/* SPDX-License-Identifier: MIT */
/* Problems: keys of each kind decoded into the kernel the generator builds, row-major calls
 * into their column-major transposes with the operands swapped, the keys no kernel serves
 * refused, and the bytes each operand spans for the overlap guard. */
#include "agent/problem.h"
#include "agent/hosts/blas_key.h"
#include "agent/hosts/ggml_key.h"

#include <criterion/criterion.h>
#include <string.h>

#define MAXD 512 /* an OPJIT_JIT_MAX_DIM (its default before generator 32) */

static ag_sig_t blas(uint8_t op, uint8_t dtype, uint8_t order, uint8_t ta, uint8_t tb,
                     uint8_t alpha, uint8_t beta, int m, int n, int k, int lda, int ldb, int ldc)
{
  return ag_sig_make(AG_HOST_ID_BLAS, op, dtype, AG_API_CBLAS, order, ta, tb,
                     (uint8_t)(alpha | beta << 4), m, n, k, lda, ldb, ldc);
}

Test(problem, a_column_major_gemm_is_itself)
{
  ag_sig_t k =
      blas(AG_OP_GEMM, AG_F64, AG_COL, AG_T, AG_N, AG_S_ONE, AG_S_OTHER, 30, 20, 10, 10, 12, 31);
  jt_gemm_t g;
  int swap = -1;
  cr_assert_eq(ag_problem_of(&k, MAXD, &g, &swap), 1);
  cr_assert_eq(swap, 0);
  cr_assert_eq(g.f64, 1);
  cr_assert_eq(g.ta, 1);
  cr_assert_eq(g.tb, 0);
  cr_assert_eq(g.m, 30);
  cr_assert_eq(g.n, 20);
  cr_assert_eq(g.k, 10);
  cr_assert_eq(g.lda, 10);
  cr_assert_eq(g.ldb, 12);
  cr_assert_eq(g.ldc, 31);
  cr_assert_eq(g.alpha_one, 1);
  cr_assert_eq(g.beta_class, 2);
  cr_assert_str_eq(ag_problem_family(&g), "gemm");
}

Test(problem, a_row_major_gemm_is_its_transpose_with_the_operands_swapped)
{
  /* row-major C (m x n) = A (m x k, NoTrans) B^T (B n x k): C^T = B A^T column-major */
  ag_sig_t k =
      blas(AG_OP_GEMM, AG_F32, AG_ROW, AG_N, AG_T, AG_S_OTHER, AG_S_ZERO, 8, 5, 3, 3, 3, 5);
  jt_gemm_t g;
  int swap;
  cr_assert_eq(ag_problem_of(&k, MAXD, &g, &swap), 1);
  cr_assert_eq(swap, 1);
  cr_assert_eq(g.m, 5);
  cr_assert_eq(g.n, 8);
  cr_assert_eq(g.k, 3);
  cr_assert_eq(g.ta, 1, "B's row-major storage is B^T column-major: op transposes it back");
  cr_assert_eq(g.tb, 0, "A's row-major storage is A^T column-major: as the product wants");
  cr_assert_eq(g.lda, 3);
  cr_assert_eq(g.ldb, 3);
  cr_assert_eq(g.ldc, 5);
  cr_assert_eq(g.alpha_one, 0);
  cr_assert_eq(g.beta_class, 0);
}

Test(problem, gemv_axpy_and_dot_keys)
{
  jt_gemm_t g;
  int swap;
  /* column-major y = A x, A 40 x 30: a GEMM of one column */
  ag_sig_t gv = blas(AG_OP_GEMV, AG_F32, AG_COL, AG_N, 0, AG_S_ONE, AG_S_ONE, 40, 30, 0, 40, 1, 1);
  cr_assert_eq(ag_problem_of(&gv, MAXD, &g, &swap), 1);
  cr_assert_eq(swap, 0);
  cr_assert(g.m == 40 && g.n == 1 && g.k == 30 && g.ta == 0 && g.ldb == 30 && g.ldc == 40);
  /* the same call row-major: the stored matrix is A^T column-major */
  gv.order = AG_ROW;
  gv.lda = 30;
  cr_assert_eq(ag_problem_of(&gv, MAXD, &g, &swap), 1);
  cr_assert(g.m == 40 && g.k == 30 && g.ta == 1, "m %d k %d ta %d", g.m, g.k, g.ta);
  gv.ldb = 2; /* a strided x */
  cr_assert_eq(ag_problem_of(&gv, MAXD, &g, &swap), 0);
  ag_sig_t ax = blas(AG_OP_AXPY, AG_F64, AG_COL, 0, 0, AG_S_OTHER, AG_S_NONE, 500, 0, 0, 1, 1, 0);
  cr_assert_eq(ag_problem_of(&ax, MAXD, &g, &swap), 1);
  cr_assert(g.f64 && g.m == 500 && g.n == 1 && g.k == 1 && g.beta_class == 1 && !g.alpha_one);
  ag_sig_t dot = blas(AG_OP_DOT, AG_F32, AG_COL, 0, 0, AG_S_NONE, AG_S_NONE, 777, 0, 0, 1, 1, 0);
  cr_assert_eq(ag_problem_of(&dot, MAXD, &g, &swap), 1);
  cr_assert(g.dot && g.k == 777);
  cr_assert_str_eq(ag_problem_family(&g), "dot");
  dot.lda = 2;
  cr_assert_eq(ag_problem_of(&dot, MAXD, &g, &swap), 0, "unit strides only");
  dot.lda = 1, dot.m = MAXD * MAXD + 1;
  cr_assert_eq(ag_problem_of(&dot, MAXD, &g, &swap), 0, "a vector up to max_dim^2");
}

Test(problem, keys_no_kernel_serves_are_refused)
{
  jt_gemm_t g;
  int swap;
  ag_sig_t k = blas(AG_OP_GEMM, AG_F32, AG_COL, AG_N, AG_N, AG_S_ZERO, AG_S_ONE, 8, 8, 8, 8, 8, 8);
  cr_assert_eq(ag_problem_of(&k, MAXD, &g, &swap), 0, "alpha = 0: C = beta C, no product");
  k = blas(AG_OP_GEMM, AG_F32, AG_COL, AG_TRANS_BAD, AG_N, AG_S_ONE, AG_S_ONE, 8, 8, 8, 8, 8, 8);
  cr_assert_eq(ag_problem_of(&k, MAXD, &g, &swap), 0, "an invalid transpose");
  k = blas(AG_OP_GEMM, AG_F32, AG_COL, AG_N, AG_N, AG_S_ONE, AG_S_ONE, 65, 8, 8, 65, 8, 65);
  cr_assert_eq(ag_problem_of(&k, 64, &g, &swap), 0, "above OPJIT_JIT_MAX_DIM");
  cr_assert_eq(ag_problem_of(&k, 128, &g, &swap), 1, "within a larger one");
  k.m = k.lda = k.ldc = JT_GEMM_MAX_DIM + 1;
  cr_assert_eq(ag_problem_of(&k, 4 * JT_GEMM_MAX_DIM, &g, &swap), 0, "above the generator's own");
  k = blas(AG_OP_GEMM, AG_F32, AG_COL, AG_N, AG_N, AG_S_ONE, AG_S_ONE, 8, 8, 8, 4, 8, 8);
  cr_assert_eq(ag_problem_of(&k, MAXD, &g, &swap), 0, "lda < m");
  k = ag_sig_make(AG_HOST_ID_GGML, 7, 0, 0, 0, 0, 0, 0, 64, 64, 64, 1, 1, 0);
  cr_assert_eq(ag_problem_of(&k, MAXD, &g, &swap), 0, "another ggml node: profiled only");
}

Test(problem, a_refusal_names_the_limit_the_key_passes)
{
  jt_gemm_t g;
  int swap;
  char why[200];
  struct {
    ag_sig_t k;
    long maxd;
    const char *why;
  } cases[] = {
      {blas(AG_OP_GEMM, AG_F32, AG_COL, AG_N, AG_N, AG_S_ZERO, AG_S_ONE, 8, 8, 8, 8, 8, 8), MAXD,
       "alpha = 0: C = beta C, no product to compute"},
      {blas(AG_OP_GEMM, AG_F32, AG_COL, AG_TRANS_BAD, AG_N, AG_S_ONE, AG_S_ONE, 8, 8, 8, 8, 8, 8),
       MAXD, "an invalid transpose argument: the library's own error path"},
      {blas(AG_OP_GEMM, AG_F32, AG_ROW, AG_N, AG_N, AG_S_ONE, AG_S_ONE, 8, 65, 8, 65, 65, 65), 64,
       "N=65 is above OPJIT_JIT_MAX_DIM=64"},
      {blas(AG_OP_GEMM, AG_F32, AG_COL, AG_N, AG_N, AG_S_ONE, AG_S_ONE, 8, 8, 8, 4, 8, 8), MAXD,
       "a leading dimension smaller than its matrix's rows: a layout the generator does not take"},
      {blas(AG_OP_DOT, AG_F64, AG_COL, AG_N, AG_N, AG_S_NONE, AG_S_NONE, 100, 0, 0, 2, 1, 0),
       MAXD, "strided vectors (incx=2, incy=1): kernels take unit strides only"},
      {ag_sig_make(AG_HOST_ID_GGML, 7, 0, 0, 0, 0, 0, 0, 64, 64, 64, 1, 1, 0), MAXD,
       "this ggml operator is profiled, not compiled: no kernel family for it"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    cr_assert_eq(ag_problem_check(&cases[i].k, cases[i].maxd, &g, &swap, why, sizeof why), 0);
    cr_expect_str_eq(why, cases[i].why);
    cr_expect_eq(ag_problem_of(&cases[i].k, cases[i].maxd, &g, &swap), 0, "the same decision");
  }
  cases[2].k.n = 64;
  cr_assert_eq(ag_problem_check(&cases[2].k, 64, &g, &swap, why, sizeof why), 1);
}

Test(problem, ggml_mul_mat_and_norm_keys)
{
  jt_gemm_t g;
  int swap;
  ag_sig_t mm = ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_MUL_MAT, AG_GGML_TYPE_F16, AG_GGML_TYPE_F32,
                            AG_GGML_TYPE_F32 + 1, 0, 0, 0, 256, 32, 128, 1, 1, 0);
  cr_assert_eq(ag_problem_of(&mm, MAXD, &g, &swap), 1);
  cr_assert(g.mm && g.w16 && !g.mm_add && g.m == 256 && g.n == 32 && g.k == 128);
  cr_assert_str_eq(ag_problem_family(&g), "mm");
  ag_sig_t add = ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_FUSED, AG_GGML_TYPE_F32, AG_GGML_TYPE_F32,
                             AG_GGML_TYPE_F32 + 1, AG_FUSE_MM_ADD, 0, 0, 256, 32, 128, 1, 1, 0);
  cr_assert_eq(ag_problem_of(&add, MAXD, &g, &swap), 1);
  cr_assert(g.mm && g.mm_add && !g.w16);
  /* f16 weights in ggml's AMX buffer (ab 1): the activations stay f32; f32 weights never so */
  mm.ab = 1;
  cr_assert_eq(ag_problem_of(&mm, MAXD, &g, &swap), 1);
  cr_assert(g.mm && g.w16 == 2);
  add.ab = 1, add.dtype = AG_GGML_TYPE_F16;
  cr_assert_eq(ag_problem_of(&add, MAXD, &g, &swap), 1);
  cr_assert(g.mm && g.mm_add && g.w16 == 2);
  add.dtype = AG_GGML_TYPE_F32;
  cr_assert_eq(ag_problem_of(&add, MAXD, &g, &swap), 0);
  mm.ab = 0;
  mm.lda = 2; /* a 3-D product */
  cr_assert_eq(ag_problem_of(&mm, MAXD, &g, &swap), 0);
  mm.lda = 1, mm.m = 100; /* not a whole number of row panels */
  cr_assert_eq(ag_problem_of(&mm, MAXD, &g, &swap), 0);
  ag_sig_t rms = ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_FUSED, 0, 0, 0, AG_FUSE_RMS_MUL, 0, 0,
                             4096, 0, 0, 0, 0, 0);
  cr_assert_eq(ag_problem_of(&rms, MAXD, &g, &swap), 1);
  cr_assert(g.add_rms_mul == 2 && g.k == 4096);
  cr_assert_str_eq(ag_problem_family(&g), "add_rms_mul");
}

Test(problem, operand_extents_for_the_overlap_guard)
{
  ag_vrun_t r;
  jt_gemm_t g = {.m = 3, .n = 2, .k = 4, .lda = 5, .ldb = 6, .ldc = 7};
  ag_problem_extents(&g, 1, &r);
  cr_assert_eq(r.ext_a, (5 * 3 + 3) * 4, "k columns of lda, the last m long");
  cr_assert_eq(r.ext_b, (6 * 1 + 4) * 4);
  cr_assert_eq(r.ext_c, (7 * 1 + 3) * 4);
  cr_assert_eq(r.swapped, 1);
  g.ta = 1, g.tb = 1, g.f64 = 1; /* A stored k x m, B n x k */
  ag_problem_extents(&g, 0, &r);
  cr_assert_eq(r.ext_a, (5 * 2 + 4) * 8);
  cr_assert_eq(r.ext_b, (6 * 3 + 2) * 8);
  jt_gemm_t d = {.dot = 1, .k = 100};
  ag_problem_extents(&d, 0, &r);
  cr_assert(r.ext_a == 0 && r.ext_b == 0 && r.ext_c == 0, "its host checks overlaps");
}

/* ---- Typed problems: each family's key is the bytes every database has stored ---- */

/* The key's bytes and its hash (the persisted signature id), both as before the typed
 * problems: the layout written out field by field, and the hash pinned. */
static void same_key(ag_sig_t typed, ag_sig_t legacy, uint64_t hash)
{
  cr_assert_eq(memcmp(&typed, &legacy, sizeof typed), 0, "the typed encoder moved a field");
  cr_assert_eq(ag_sig_hash(&typed), hash, "hash %016llx", (unsigned long long)ag_sig_hash(&typed));
}

Test(problem, typed_blas_keys_keep_their_bytes_and_hashes)
{
  ag_blas_gemm_t gm = {AG_F32, AG_API_CBLAS, AG_ROW, AG_N, AG_T, AG_S_ONE, AG_S_ZERO,
                       40, 33, 24, 24, 24, 33};
  same_key(ag_blas_gemm_key(&gm),
           ag_sig_make(AG_HOST_ID_BLAS, AG_OP_GEMM, AG_F32, AG_API_CBLAS, AG_ROW, AG_N, AG_T,
                       AG_S_ONE | AG_S_ZERO << 4, 40, 33, 24, 24, 24, 33),
           0x2c66176627e1872full);
  ag_blas_gemv_t gv = {AG_F64, AG_API_F77, AG_COL, AG_T, AG_S_OTHER, AG_S_ONE, 100, 50, 128, 1, 1};
  same_key(ag_blas_gemv_key(&gv),
           ag_sig_make(AG_HOST_ID_BLAS, AG_OP_GEMV, AG_F64, AG_API_F77, AG_COL, AG_T, 0,
                       AG_S_OTHER | AG_S_ONE << 4, 100, 50, 0, 128, 1, 1),
           0xf0616f1989e545b3ull);
  ag_blas_vec_t ax = {AG_OP_AXPY, AG_F32, AG_API_F77, AG_S_MINUS_ONE, AG_S_ONE, 1000, 1, 2};
  same_key(ag_blas_vec_key(&ax),
           ag_sig_make(AG_HOST_ID_BLAS, AG_OP_AXPY, AG_F32, AG_API_F77, AG_COL, 0, 0,
                       AG_S_MINUS_ONE | AG_S_ONE << 4, 1000, 0, 0, 1, 2, 0),
           0x8b3d53062c9cb222ull);
  ag_blas_vec_t dt = {AG_OP_DOT, AG_F64, AG_API_CBLAS, AG_S_NONE, AG_S_NONE, 1000, 1, 1};
  same_key(ag_blas_vec_key(&dt),
           ag_sig_make(AG_HOST_ID_BLAS, AG_OP_DOT, AG_F64, AG_API_CBLAS, AG_COL, 0, 0,
                       AG_S_NONE | AG_S_NONE << 4, 1000, 0, 0, 1, 1, 0),
           0x3a4f56237e95f4aaull);
  /* and each decodes back to its problem: the same key again */
  ag_sig_t k = ag_blas_gemm_key(&gm);
  ag_blas_gemm_t gm2 = ag_blas_gemm_of(&k);
  same_key(ag_blas_gemm_key(&gm2), k, ag_sig_hash(&k));
  cr_assert(gm2.tb == AG_T && gm2.beta == AG_S_ZERO && gm2.ldc == 33);
  k = ag_blas_gemv_key(&gv);
  ag_blas_gemv_t gv2 = ag_blas_gemv_of(&k);
  same_key(ag_blas_gemv_key(&gv2), k, ag_sig_hash(&k));
  cr_assert(gv2.trans == AG_T && gv2.incx == 1 && gv2.lda == 128);
  k = ag_blas_vec_key(&ax);
  ag_blas_vec_t ax2 = ag_blas_vec_of(&k);
  same_key(ag_blas_vec_key(&ax2), k, ag_sig_hash(&k));
  cr_assert(ax2.op == AG_OP_AXPY && ax2.alpha == AG_S_MINUS_ONE && ax2.incy == 2);
}

Test(problem, typed_ggml_keys_keep_their_bytes_and_hashes)
{
  ag_ggml_node_t mm = {.op = AG_GGML_OP_MUL_MAT, .src0_type = AG_GGML_TYPE_F16,
                       .type = AG_GGML_TYPE_F32, .has_src1 = 1, .src1_type = AG_GGML_TYPE_F32,
                       .ne = {768, 8, 1, 1}, .src0_ne0 = 256};
  same_key(ag_ggml_node_key(&mm),
           ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_MUL_MAT, AG_GGML_TYPE_F16, AG_GGML_TYPE_F32,
                       AG_GGML_TYPE_F32 + 1, 0, 0, 0, 768, 8, 256, 1, 1, 0),
           0x083674d29dc02b22ull);
  ag_ggml_node_t unary = {.op = 77, .src0_type = 0, .type = 0, .subop = 3, .ne = {64, 8, 2, 1},
                          .src0_ne0 = 64};
  same_key(ag_ggml_node_key(&unary),
           ag_sig_make(AG_HOST_ID_GGML, 77, 0, 0, 0, 3, 0, 0, 64, 8, 64, 2, 1, 0),
           0x66cdc5e2fa0cbae3ull);
  ag_ggml_group_t norm = {.pattern = AG_FUSE_ADD_RMS_MUL, .wtype = AG_GGML_TYPE_F32, .m = 256};
  same_key(ag_ggml_group_key(&norm),
           ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_FUSED, AG_GGML_TYPE_F32, AG_GGML_TYPE_F32, 0,
                       AG_FUSE_ADD_RMS_MUL, 0, 0, 256, 0, 0, 0, 0, 0),
           0x655512060edd4ae3ull);
  ag_ggml_group_t shared = {.pattern = AG_FUSE_SHARED_INPUT, .wtype = AG_GGML_TYPE_F16,
                            .count = 3, .m = 1024, .n = 8, .k = 256};
  same_key(ag_ggml_group_key(&shared),
           ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_FUSED, AG_GGML_TYPE_F16, AG_GGML_TYPE_F32,
                       AG_GGML_TYPE_F32 + 1, AG_FUSE_SHARED_INPUT, 3, 0, 1024, 8, 256, 1, 1, 0),
           0xf564c72b5e7a5a11ull);
  ag_sig_t k = ag_ggml_node_key(&mm);
  ag_ggml_node_t mm2 = ag_ggml_node_of(&k);
  same_key(ag_ggml_node_key(&mm2), k, ag_sig_hash(&k));
  cr_assert(mm2.has_src1 && mm2.src1_type == AG_GGML_TYPE_F32 && mm2.src0_ne0 == 256);
  k = ag_ggml_group_key(&shared);
  ag_ggml_group_t shared2 = ag_ggml_group_of(&k);
  same_key(ag_ggml_group_key(&shared2), k, ag_sig_hash(&k));
  cr_assert(shared2.count == 3 && shared2.m == 1024);
  mm.amx = 1, shared.amx = 1; /* f16 weights in ggml's AMX buffer: ab 1, read back */
  k = ag_ggml_node_key(&mm);
  cr_assert(k.ab == 1 && ag_ggml_node_of(&k).amx == 1);
  k = ag_ggml_group_key(&shared);
  cr_assert(k.ab == 1 && ag_ggml_group_of(&k).amx == 1);
}

Test(problem, a_syrk_is_one_triangle_of_a_gemm_whose_b_is_a)
{
  /* numpy's a @ a.T: row-major, upper, A (40 x 24) not transposed. In column-major terms the
   * same memory is the lower triangle of A^T's transpose product: the other triangle, the
   * other transpose. */
  ag_blas_syrk_t p = {AG_F32, AG_API_CBLAS, AG_ROW, AG_UPPER, AG_N, AG_S_ONE, AG_S_ZERO,
                      40,     24,           24,     40};
  ag_sig_t k = ag_blas_syrk_key(&p);
  char name[128];
  ag_sig_format(&k, name, sizeof name);
  cr_assert_str_eq(name, "cblas_ssyrk row U N 40x24 β=0");
  jt_gemm_t g;
  int swap = -1;
  cr_assert_eq(ag_problem_of(&k, MAXD, &g, &swap), 1);
  cr_assert_eq(swap, 0);
  cr_assert_eq(g.syrk, 2, "the lower triangle");
  cr_assert(g.ta == 1 && g.tb == 0 && g.m == 40 && g.n == 40 && g.k == 24);
  cr_assert(g.lda == 24 && g.ldb == 24 && g.ldc == 40 && g.alpha_one && g.beta_class == 0);
  cr_assert_str_eq(ag_problem_family(&g), "syrk");
  ag_vrun_t r;
  ag_problem_extents(&g, swap, &r);
  cr_assert_eq(r.ext_a, (size_t)(24 * 39 + 24) * 4, "A as the kernel reads it");
  cr_assert_eq(r.ext_b, r.ext_a, "B is A");
  cr_assert_eq(r.ext_c, (size_t)(40 * 39 + 40) * 4);
  /* Fortran, column-major: itself */
  p = (ag_blas_syrk_t){AG_F64, AG_API_F77, AG_COL, AG_UPPER, AG_T, AG_S_OTHER, AG_S_ONE,
                       30,     50,         52,     31};
  k = ag_blas_syrk_key(&p);
  cr_assert_eq(ag_problem_of(&k, MAXD, &g, &swap), 1);
  cr_assert(g.syrk == 1 && g.ta == 1 && g.tb == 0 && g.f64 && !g.alpha_one && g.beta_class == 1);
  ag_sig_format(&k, name, sizeof name);
  cr_assert_str_eq(name, "dsyrk U T 30x50 α=* β=1 lda=52 ldc=31");
  /* refused: alpha = 0, a bad uplo, above OPJIT_JIT_MAX_DIM */
  p.alpha = AG_S_ZERO, k = ag_blas_syrk_key(&p);
  cr_assert_eq(ag_problem_of(&k, MAXD, &g, &swap), 0);
  p.alpha = AG_S_ONE, p.uplo = AG_UPLO_BAD, k = ag_blas_syrk_key(&p);
  cr_assert_eq(ag_problem_of(&k, MAXD, &g, &swap), 0);
  p.uplo = AG_LOWER, k = ag_blas_syrk_key(&p);
  cr_assert_eq(ag_problem_of(&k, 40, &g, &swap), 0, "k = 50 above 40");
  /* its key's layout, pinned as the others' */
  same_key(k, ag_sig_make(AG_HOST_ID_BLAS, AG_OP_SYRK, AG_F64, AG_API_F77, AG_COL, AG_T, AG_LOWER,
                          AG_S_ONE | AG_S_ONE << 4, 30, 30, 50, 52, 0, 31),
           0x1667f83965044c7bull);
}

/* A long GEMM's N in parts (par.h): each part's kernel solves n / parts columns, B stepping by
 * a part's columns (its rows when op(B) = B^T), C by its columns; short products, N that does
 * not divide, too narrow parts, GEMVs and SYRKs stay whole. */
Test(problem, a_long_gemm_splits_n_into_parts_of_its_columns)
{
  jt_gemm_t g = {.f64 = 1, .m = 256, .n = 256, .k = 256, .lda = 300, .ldb = 310, .ldc = 320},
            part;
  ag_vrun_t r = {.swapped = 1};
  cr_assert_eq(ag_problem_split(&g, 2, &r), 2);
  part = ag_problem_part(&g, &r);
  cr_assert_eq(r.parts, 2);
  cr_assert_eq(part.n, 128);
  cr_assert_eq(part.m, 256);
  cr_assert_eq(part.ldb, 310);
  cr_assert_eq(r.b_step, (size_t)128 * 310 * 8);
  cr_assert_eq(r.c_step, (size_t)128 * 320 * 8);
  cr_assert_eq(r.swapped, 1, "the operand order stays");
  g.tb = 1, g.f64 = 0;
  cr_assert_eq(ag_problem_split(&g, 4, &r), 4);
  part = ag_problem_part(&g, &r);
  cr_assert_eq(part.n, 64);
  cr_assert_eq(r.b_step, (size_t)64 * 4, "op(B) = B^T: a part's columns are B's rows");
  cr_assert_eq(r.c_step, (size_t)64 * 320 * 4);
  /* each split its own steps: 2 parts of the same problem */
  jt_gemm_t h = g;
  cr_assert_eq(ag_problem_split(&h, 2, &r), 2);
  cr_assert_eq(ag_problem_part(&h, &r).n, 128);

  jt_gemm_t small = {.m = 128, .n = 128, .k = 128, .lda = 128, .ldb = 128, .ldc = 128};
  jt_gemm_t odd = g, narrow = g, axpy = g, syrk = g;
  odd.n = 255;
  narrow.n = 256, narrow.m = 2048; /* 2 x 2048 x 256 x 256 flops, but parts of 16 columns */
  axpy.n = 1, axpy.k = 1, axpy.m = 1 << 20; /* a GEMM of K = 1: y += alpha x */
  syrk.syrk = 1;
  const jt_gemm_t *whole[] = {&small, &odd, &syrk, &axpy};
  for (size_t i = 0; i < sizeof whole / sizeof *whole; i++) {
    r = (ag_vrun_t){0};
    cr_assert_eq(ag_problem_split(whole[i], 2, &r), 1, "case %zu", i);
    cr_assert_eq(ag_problem_part(whole[i], &r).n, whole[i]->n, "case %zu", i);
    cr_assert_eq(r.a_step + r.b_step + r.c_step, 0, "case %zu", i);
  }
  cr_assert_eq(ag_problem_split(&narrow, 16, &r), 1);
  cr_assert_eq(ag_problem_split(&narrow, 8, &r), 8);
  cr_assert_eq(ag_problem_split(&g, 1, &r), 1, "one core: whole");
}

/* A large GEMV's M in parts: each part's kernel computes m / parts rows of y, A stepping by as
 * many rows of op(A) (A's columns when op(A) = A^T), x whole; a GEMV whose A spans less than
 * AG_PROBLEM_SPLIT_BYTES, or whose M does not divide into parts of whole cache lines of y,
 * stays whole. */
Test(problem, a_large_gemv_splits_m_into_parts_of_its_rows)
{
  jt_gemm_t g = {.m = 1024, .n = 1, .k = 256, .lda = 1030, .ldb = 256, .ldc = 1024}, part;
  ag_vrun_t r = {0};
  cr_assert_eq(ag_problem_split(&g, 2, &r), 2, "1024 x 256 floats: 1 MB");
  part = ag_problem_part(&g, &r);
  cr_assert_eq(part.m, 512);
  cr_assert_eq(part.n, 1);
  cr_assert_eq(part.k, 256);
  cr_assert_eq(part.lda, 1030);
  cr_assert_eq(r.a_step, (size_t)512 * 4, "op(A) = A: a part's rows of A");
  cr_assert_eq(r.b_step, 0, "x whole");
  cr_assert_eq(r.c_step, (size_t)512 * 4);
  jt_gemm_t t = g;
  t.ta = 1, t.f64 = 1, t.m = 512, t.lda = 260;
  cr_assert_eq(ag_problem_split(&t, 4, &r), 4);
  cr_assert_eq(ag_problem_part(&t, &r).m, 128);
  cr_assert_eq(r.a_step, (size_t)128 * 260 * 8, "op(A) = A^T: a part's columns of A");
  cr_assert_eq(r.c_step, (size_t)128 * 8);

  jt_gemm_t small = g, uneven = g;
  small.m = 1023 & ~31, small.k = 255; /* 992 x 255 floats: under 1 MB */
  uneven.m = 1040, uneven.k = 512;     /* 1040 rows: halves of 520, not of whole lines of y */
  cr_assert_eq(ag_problem_split(&small, 2, &r), 1);
  cr_assert_eq(ag_problem_part(&small, &r).m, small.m);
  cr_assert_eq(ag_problem_split(&uneven, 2, &r), 1);
  cr_assert_eq(r.a_step + r.c_step, 0);
  cr_assert_eq(ag_problem_split(&uneven, 5, &r), 5, "1040 = 5 x 208 = 5 x 13 lines");
  cr_assert(ag_problem_symbol_fits(&(jt_gemm_t){.m = 512, .n = 1, .k = 256},
                                   "opjit_sgemm_NN_512x1x256_l1030_256_1024_a1_b0_avx2_v256"));
  cr_assert_not(ag_problem_symbol_fits(&(jt_gemm_t){.m = 1024, .n = 1, .k = 256},
                                       "opjit_sgemm_NN_512x1x256_l1030_256_1024_a1_b0_avx2_v256"));
}

/* A stored GEMM kernel is placed only for the split it was compiled for: its name's dimensions
 * are the part's (jt_gemm_name). */
Test(problem, a_stored_kernel_fits_only_the_split_it_was_compiled_for)
{
  jt_gemm_t part = {.m = 1024, .n = 512, .k = 1024};
  cr_assert(ag_problem_symbol_fits(
      &part, "opjit_sgemm_NN_1024x512x1024_l1024_1024_1024_a1_b0_avx2_v256_4x3_t2_k256_c0"));
  cr_assert(!ag_problem_symbol_fits(
      &part, "opjit_sgemm_NN_1024x1024x1024_l1024_1024_1024_a1_b0_avx2_v256_4x3_t2_k256_c0"));
  cr_assert(!ag_problem_symbol_fits(
      &part, "opjit_dgemm_TN_1024x256x1024_l1024_1024_1024_a1_b0_avx2_v256_2x6_t2_k128_c0"));
  cr_assert(ag_problem_symbol_fits(&part, "opjit_mul_mat_f32_64x1x4096_avx2_v256_4x1_t2_k0_c0"),
            "other kinds are never split");
  cr_assert(ag_problem_symbol_fits(&part, "opjit_"));
}
