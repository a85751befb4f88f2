/* SPDX-License-Identifier: MIT */
/* Signatures: stable hashes, human forms and JSON parameters of keys. */
#include "agent/sig.h"
#include "agent/host.h"
#include "agent/opt.h"
#include "agent/hosts/blas_key.h"
#include "agent/hosts/ggml_key.h"

#include <criterion/criterion.h>
#include <string.h>

static ag_sig_t gemm(int m, int n, int k)
{
  ag_sig_t s = {.host = AG_HOST_ID_BLAS, .op = AG_OP_GEMM, .dtype = AG_F32, .api = AG_API_F77,
                .ab = AG_S_ONE | AG_S_ZERO << 4, .m = m, .n = n, .k = k,
                .lda = m, .ldb = k, .ldc = m};
  return s;
}

Test(sig, equal_keys_hash_equal)
{
  ag_sig_t a = gemm(64, 64, 64), b = gemm(64, 64, 64);
  cr_assert_eq(ag_sig_hash(&a), ag_sig_hash(&b));
}

Test(sig, every_field_changes_the_hash)
{
  ag_sig_t base = gemm(64, 32, 16);
  uint64_t h = ag_sig_hash(&base);
  for (size_t byte = 0; byte < sizeof base; byte++) {
    ag_sig_t s = base;
    ((unsigned char *)&s)[byte] ^= 1;
    cr_assert_neq(ag_sig_hash(&s), h, "flipping byte %zu did not change the hash", byte);
  }
}

Test(sig, hash_is_the_persisted_id)
{
  /* The hash names a signature in every database: it must never change between builds. */
  ag_sig_t s = gemm(64, 64, 64);
  cr_assert_eq(ag_sig_hash(&s), 0xc70ff435602efc89ull, "hash changed: %016llx",
               (unsigned long long)ag_sig_hash(&s));
}

Test(sig, human_form)
{
  char buf[256];
  ag_sig_t s = gemm(64, 64, 64);
  ag_sig_format(&s, buf, sizeof buf);
  cr_assert_str_eq(buf, "sgemm NN 64x64x64 β=0");
  s.api = AG_API_CBLAS, s.order = AG_ROW, s.ta = AG_T, s.ab = AG_S_MINUS_ONE | AG_S_OTHER << 4;
  s.dtype = AG_F64, s.m = 10, s.n = 20, s.k = 30, s.lda = 10, s.ldb = 20, s.ldc = 25;
  ag_sig_format(&s, buf, sizeof buf);
  cr_assert_str_eq(buf, "cblas_dgemm row TN 10x20x30 α=-1 β=* ldc=25");
  ag_sig_t d = {.host = AG_HOST_ID_BLAS, .op = AG_OP_DOT, .dtype = AG_F32, .api = AG_API_F77,
                .m = 16, .lda = 1, .ldb = 2};
  ag_sig_format(&d, buf, sizeof buf);
  cr_assert_str_eq(buf, "sdot n=16 incy=2");
  ag_sig_t v = {.host = AG_HOST_ID_BLAS, .op = AG_OP_GEMV, .dtype = AG_F64, .api = AG_API_CBLAS,
                .order = AG_COL, .ta = AG_T, .ab = AG_S_OTHER, .m = 256, .n = 128, .lda = 300,
                .ldb = 1, .ldc = 1};
  ag_sig_format(&v, buf, sizeof buf);
  cr_assert_str_eq(buf, "cblas_dgemv col T 256x128 α=* β=1 lda=300");
}

Test(sig, params_json)
{
  char buf[512];
  ag_sig_t s = gemm(4, 5, 6);
  ag_sig_params_json(&s, buf, sizeof buf);
  cr_assert_str_eq(buf, "{\"op\":\"gemm\",\"dtype\":\"f32\",\"api\":\"fortran\",\"order\":\"col\","
                        "\"transa\":\"N\",\"transb\":\"N\",\"m\":4,\"n\":5,\"k\":6,\"lda\":4,"
                        "\"ldb\":6,\"ldc\":4,\"alpha\":\"1\",\"beta\":\"0\"}");
}

Test(sig, scalar_classes)
{
  cr_assert_eq(ag_scalar_class(1.0), AG_S_ONE);
  cr_assert_eq(ag_scalar_class(0.0), AG_S_ZERO);
  cr_assert_eq(ag_scalar_class(-0.0), AG_S_ZERO);
  cr_assert_eq(ag_scalar_class(-1.0), AG_S_MINUS_ONE);
  cr_assert_eq(ag_scalar_class(0.5), AG_S_OTHER);
  cr_assert_eq(ag_trans_char('t'), AG_T);
  cr_assert_eq(ag_trans_char('C'), AG_C);
  cr_assert_eq(ag_trans_char('x'), AG_TRANS_BAD);
}

/* The key's bytes depend on the classes: a float's, from its own bits, must be its double's
 * (DAZ off, as a thread starts). */
Test(sig, float_classes_are_their_doubles)
{
  static const uint32_t special[] = {0x3f800000u, 0xbf800000u, 0x00000000u, 0x80000000u,
                                     0x3f800001u, 0x3f7fffffu, 0xbf800001u, 0x00000001u,
                                     0x80000001u, 0x7fc00000u, 0xffc00000u, 0x7f800000u,
                                     0xff800000u, 0x7f800001u, 0x40000000u, 0x3f000000u};
  uint32_t r = 2463534242u;
  for (int i = 0; i < 1000000; i++) {
    uint32_t bits = i < (int)(sizeof special / sizeof *special) ? special[i] : r;
    r ^= r << 13, r ^= r >> 17, r ^= r << 5;
    float f;
    memcpy(&f, &bits, sizeof f);
    double d = f;
    uint8_t want = ag_scalar_class(d);
    cr_assert_eq(ag_scalar_class_f(f), want, "float bits %08x", bits);
    cr_assert_eq(ag_scalar_class_at_f(&f), want, "float bits %08x", bits);
    cr_assert_eq(ag_scalar_class_at_d(&d), want, "float bits %08x as double", bits);
  }
  for (int i = 0; i < 4; i++) {
    double d = (double[]){1.0, -1.0, -0.0, 1.0 + 1e-16 * 3}[i];
    cr_assert_eq(ag_scalar_class_at_d(&d), ag_scalar_class(d));
  }
}

Test(sig, make_writes_the_same_bytes_as_the_fields)
{
  ag_sig_t f;
  memset(&f, 0, sizeof f);
  f.host = AG_HOST_ID_BLAS, f.op = AG_OP_GEMV, f.dtype = AG_F64, f.api = AG_API_CBLAS;
  f.order = AG_ROW, f.ta = AG_T, f.tb = AG_C, f.ab = AG_S_OTHER | AG_S_ZERO << 4;
  f.m = -3, f.n = 70000, f.k = 5, f.lda = 6, f.ldb = -7, f.ldc = 2147483647;
  ag_sig_t m = ag_sig_make(AG_HOST_ID_BLAS, AG_OP_GEMV, AG_F64, AG_API_CBLAS, AG_ROW, AG_T, AG_C,
                           AG_S_OTHER | AG_S_ZERO << 4, -3, 70000, 5, 6, -7, 2147483647);
  cr_assert_eq(memcmp(&f, &m, sizeof f), 0);
}

Test(sig, every_key_is_named_by_its_hosts_row)
{
  for (size_t i = 0; i < ag_nhosts; i++) {
    cr_assert_eq(ag_host_of(ag_hosts[i]->id), ag_hosts[i]);
    cr_assert(ag_hosts[i]->opname && ag_hosts[i]->format && ag_hosts[i]->params_json);
  }
  cr_assert_str_eq(ag_host_of(AG_HOST_ID_BLAS)->name, "blas");
  cr_assert_str_eq(ag_host_of(AG_HOST_ID_GGML)->name, "ggml");
  cr_assert(ag_host_of(AG_HOST_ID_BLAS)->traits & AG_HOST_DUELS);
  cr_assert_not(ag_host_of(AG_HOST_ID_GGML)->traits & AG_HOST_DUELS, "ggml nodes run in graphs");
  /* A key of no host is named as such, never as another host's. */
  ag_sig_t k = {.host = 9, .op = AG_OP_GEMM, .dtype = AG_F32, .m = 4, .n = 4, .k = 4};
  char buf[128];
  cr_assert_null(ag_host_of(9));
  ag_sig_format(&k, buf, sizeof buf);
  cr_assert_str_eq(buf, "host#9 op#1");
  ag_sig_params_json(&k, buf, sizeof buf);
  cr_assert_str_eq(buf, "{\"host\":9,\"op\":1}");
  /* Truncation stops at the buffer's end. */
  k.host = AG_HOST_ID_BLAS;
  char small[8];
  ag_sig_format(&k, small, sizeof small);
  cr_assert_str_eq(small, "sgemm N");
}

static const char *hosts_word;

static const char *hosts_only(const char *name)
{
  return strcmp(name, "OPJIT_HOSTS") == 0 ? hosts_word : NULL;
}

Test(sig, every_hosts_row_has_the_OPJIT_HOSTS_bit_of_its_name)
{
  for (size_t i = 0; i < ag_nhosts; i++) {
    ag_opts_t o;
    hosts_word = ag_hosts[i]->name;
    cr_assert_eq(ag_opts_parse(&o, hosts_only, NULL), 0, "%s", hosts_word);
    cr_assert_eq(o.num[AG_OPT_HOSTS], (long)ag_hosts[i]->opt_bit, "%s", hosts_word);
    ag_opts_free(&o);
  }
}

Test(sig, the_core_asks_the_hosts_rows)
{
  const ag_host_t *blas = ag_host_of(AG_HOST_ID_BLAS), *ggml = ag_host_of(AG_HOST_ID_GGML);
  /* Only BLAS's symbols are interposed whenever the agent is loaded (agent.h's states). */
  cr_assert(blas->traits & AG_HOST_SYMBOLS);
  cr_assert_not(ggml->traits & AG_HOST_SYMBOLS);
  /* A MUL_MAT + ADD group runs as its product until its kernel is there: the product's
   * profile speaks for it (warm.c); no other key has a stand-in. */
  ag_ggml_group_t g = {.pattern = AG_FUSE_MM_ADD, .wtype = AG_GGML_TYPE_F16, .m = 256, .n = 8,
                       .k = 128, .amx = 1};
  ag_sig_t group = ag_ggml_group_key(&g), as;
  cr_assert_eq(ggml->stands_in(&group, &as), 1);
  ag_ggml_node_t p = {.op = AG_GGML_OP_MUL_MAT, .src0_type = AG_GGML_TYPE_F16,
                      .type = AG_GGML_TYPE_F32, .has_src1 = 1, .src1_type = AG_GGML_TYPE_F32,
                      .ne = {256, 8, 1, 1}, .src0_ne0 = 128, .amx = 1};
  ag_sig_t product = ag_ggml_node_key(&p);
  cr_assert_eq(memcmp(&as, &product, sizeof as), 0);
  cr_assert_eq(ggml->stands_in(&product, &as), 0);
  g.pattern = AG_FUSE_MM_SWIGLU;
  group = ag_ggml_group_key(&g);
  cr_assert_eq(ggml->stands_in(&group, &as), 0);
  cr_assert_null(blas->stands_in);
  /* OPJIT_HOT_PAYBACK leaves the groups (timed over rounds) to their calls, not the nodes. */
  cr_assert(ggml->no_payback(&group));
  cr_assert_not(ggml->no_payback(&product));
  cr_assert_null(blas->no_payback);
  /* The MUL_MAT kernels are self-tested before publication, the norm groups' are not. */
  cr_assert_eq(ggml->selftest(&(jt_gemm_t){.add_rms_mul = 1, .k = 64}, NULL, NULL, NULL), -1);
  cr_assert_null(blas->selftest);
  /* The BLAS originals' system libraries; ggml's originals never duel. */
  cr_assert_str_eq(blas->libs[0], "libblas.so.3");
  cr_assert_null(ggml->libs);
  cr_assert_null(ggml->duel);
}
