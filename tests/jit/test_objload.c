/* SPDX-License-Identifier: MIT */
/* The persisted-kernel loader: the objects LLJIT linked, placed again without LLVM, compute
 * bit for bit what the LLJIT-linked kernels compute; the mapping is never writable and
 * executable; damaged objects and objects with outside references are refused. */
#define _GNU_SOURCE
#include "helpers.h"
#include "jit/objload.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const jt_api_t *jit;
static uint64_t rng = 777;

static uint32_t rnd(uint32_t n) { return jt_test_rnd(&rng, n); }

static void setup(void)
{
  jit = jt_test_module();
}

TestSuite(objload, .init = setup, .timeout = 600);

typedef struct kern_s {
  jt_gemm_fn fn;
  void *obj;
  size_t obj_len;
  char name[128];
} kern_t;

static kern_t compile(const jt_gemm_t *g)
{
  kern_t k = {0};
  size_t size = 0;
  char err[512] = "";
  cr_assert_eq(jit->gemm(g, &k.fn, &size, &k.obj, &k.obj_len, err, sizeof err), 0, "%s", err);
  cr_assert_not_null(k.obj, "no object was captured");
  jit->gemm_name(g, k.name, sizeof k.name);
  return k;
}

/* Runs fn on a copy of c and returns the copy. */
static void *run(jt_gemm_fn fn, const void *a, const void *b, const void *c, size_t cbytes,
                 double alpha, double beta)
{
  void *out = malloc(cbytes);
  memcpy(out, c, cbytes);
  fn(a, b, out, alpha, beta);
  return out;
}

Test(objload, loaded_kernels_compute_what_lljit_kernels_compute)
{
  int loaded = 0;
  for (int t = 0; t < 120; t++) {
    jt_gemm_t g = {.f64 = (int)rnd(2), .ta = (int)rnd(2), .tb = (int)rnd(2),
                   .m = 1 + (int)rnd(70), .n = 1 + (int)rnd(70), .k = 1 + (int)rnd(70),
                   .alpha_one = (int)rnd(2), .beta_class = (int)rnd(3), .dot = t % 10 == 9};
    g.lda = (g.ta ? g.k : g.m) + (int)rnd(3);
    g.ldb = (g.tb ? g.n : g.k) + (int)rnd(3);
    g.ldc = g.m + (int)rnd(3);
    kern_t k = compile(&g);
    jt_loaded_t l;
    char err[256] = "";
    cr_assert_eq(jt_obj_load(k.obj, k.obj_len, k.name, &l, err, sizeof err), 0,
                 "%s: %s", k.name, err);
    cr_assert(l.size > 16, "%s: size %zu", k.name, l.size);
    size_t esz = g.f64 ? 8 : 4;
    size_t na = g.dot ? (size_t)g.k : (size_t)g.lda * (g.ta ? g.m : g.k);
    size_t nb = g.dot ? (size_t)g.k : (size_t)g.ldb * (g.tb ? g.k : g.n);
    size_t nc = g.dot ? 1 : (size_t)g.ldc * g.n;
    char *a = malloc(na * esz), *b = malloc(nb * esz), *c = malloc(nc * esz);
    for (size_t i = 0; i < na * esz; i += esz)
      g.f64 ? (void)(*(double *)(a + i) = rnd(2001) / 1000.0 - 1) : (void)(*(float *)(a + i) = rnd(2001) / 1000.0f - 1);
    for (size_t i = 0; i < nb * esz; i += esz)
      g.f64 ? (void)(*(double *)(b + i) = rnd(2001) / 1000.0 - 1) : (void)(*(float *)(b + i) = rnd(2001) / 1000.0f - 1);
    for (size_t i = 0; i < nc * esz; i += esz)
      g.f64 ? (void)(*(double *)(c + i) = rnd(2001) / 1000.0 - 1) : (void)(*(float *)(c + i) = rnd(2001) / 1000.0f - 1);
    double alpha = g.alpha_one ? 1 : 0.75, beta = g.beta_class == 0 ? 0 : g.beta_class == 1 ? 1 : -0.5;
    void *want = run(k.fn, a, b, c, nc * esz, alpha, beta);
    void *got = run((jt_gemm_fn)l.fn, a, b, c, nc * esz, alpha, beta);
    cr_assert(memcmp(want, got, nc * esz) == 0, "%s: the loaded kernel's result differs", k.name);
    free(want), free(got), free(a), free(b), free(c), free(k.obj);
    jt_obj_unload(&l);
    loaded++;
  }
  cr_assert_eq(loaded, 120);
}

/* The permissions of the mapping holding p, from /proc/self/maps ("r-xp"). */
static void perms_of(const void *p, char out[5])
{
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  out[0] = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[5];
    if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && (uintptr_t)p >= lo && (uintptr_t)p < hi)
      memcpy(out, perms, 5);
  }
  if (f)
    fclose(f);
}

Test(objload, code_is_mapped_read_execute_only)
{
  jt_gemm_t g = {.m = 16, .n = 16, .k = 16, .lda = 16, .ldb = 16, .ldc = 16, .beta_class = 2};
  kern_t k = compile(&g);
  jt_loaded_t l;
  char err[256] = "", perms[5];
  cr_assert_eq(jt_obj_load(k.obj, k.obj_len, k.name, &l, err, sizeof err), 0, "%s", err);
  perms_of(l.fn, perms);
  cr_assert_str_eq(perms, "r-xp");
  jt_obj_unload(&l);
  cr_assert_null(l.map);
  free(k.obj);
}

Test(objload, damaged_objects_are_refused_or_loaded_never_crash)
{
  jt_gemm_t g = {.m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8, .beta_class = 1};
  kern_t k = compile(&g);
  jt_loaded_t l;
  char err[256];
  /* Every truncation is refused: the section headers sit at the end of the file. */
  for (size_t n = 0; n < k.obj_len; n++)
    cr_assert_eq(jt_obj_load(k.obj, n, k.name, &l, err, sizeof err), -1, "truncated at %zu", n);
  /* Single-byte damage anywhere in the headers and tables: refused, or placed and unmapped
   * (the code's own bytes are the checksum's business, and are never run here). */
  unsigned char *copy = malloc(k.obj_len);
  int refused = 0;
  for (int t = 0; t < 4000; t++) {
    memcpy(copy, k.obj, k.obj_len);
    size_t at = rnd((uint32_t)k.obj_len);
    copy[at] ^= (unsigned char)(1u << rnd(8));
    if (jt_obj_load(copy, k.obj_len, k.name, &l, err, sizeof err) == 0)
      jt_obj_unload(&l);
    else
      refused++;
  }
  cr_assert(refused > 0, "no damaged object was refused");
  cr_assert_eq(jt_obj_load(k.obj, k.obj_len, "no_such_kernel", &l, err, sizeof err), -1);
  cr_assert(strstr(err, "no function"), "%s", err);
  cr_assert(jt_obj_checksum(k.obj, k.obj_len) != jt_obj_checksum(copy, k.obj_len));
  free(copy), free(k.obj);
}

Test(objload, outside_references_are_refused)
{
  /* A real object that calls the C library, built by the system compiler. */
  char src[] = "/tmp/opjit-objload-XXXXXX.c";
  int fd = mkstemps(src, 2);
  cr_assert(fd >= 0);
  const char *code = "#include <stdio.h>\nvoid k(void) { puts(\"hi\"); }\n";
  cr_assert_eq(write(fd, code, strlen(code)), (ssize_t)strlen(code));
  close(fd);
  char obj[sizeof src + 2], cmd[512];
  snprintf(obj, sizeof obj, "%.*s.o", (int)strlen(src) - 2, src);
  snprintf(cmd, sizeof cmd, "cc -O2 -fPIC -c -o %s %s", obj, src);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  FILE *f = fopen(obj, "rb");
  cr_assert_not_null(f);
  static unsigned char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  unlink(src), unlink(obj);
  jt_loaded_t l;
  char err[256] = "";
  cr_assert_eq(jt_obj_load(buf, n, "k", &l, err, sizeof err), -1);
  cr_assert(strstr(err, "puts"), "%s", err);
}
