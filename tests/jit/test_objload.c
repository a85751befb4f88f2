/* SPDX-License-Identifier: MIT */
/* The persisted-kernel loader: the objects LLJIT linked, placed again without LLVM, compute
 * bit for bit what the LLJIT-linked kernels compute; the mapping is never writable and
 * executable; damaged objects and objects with outside references are refused; the kernels'
 * call-frame rules (jt_obj_cfi) let the sampler's walker step out of them at every
 * instruction. */
#define _GNU_SOURCE
#include "helpers.h"
#include "jit/objload.h"
#include "sampler/unwind.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <ucontext.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* Kinds of GEMM kernel random shapes up to 70 rarely give: K in blocks with A's slice copied
 * and with B's sliver copied (B's columns 4 KB apart), a matrix-vector product computed as dot
 * products, masked tails. */
static const jt_gemm_t kinds[] = {
    {.m = 100, .n = 30, .k = 900, .lda = 100, .ldb = 900, .ldc = 100, .beta_class = 2},
    {.f64 = 1, .m = 70, .n = 30, .k = 500, .lda = 70, .ldb = 512, .ldc = 70, .beta_class = 0},
    {.ta = 1, .m = 99, .n = 1, .k = 900, .lda = 901, .ldb = 900, .ldc = 99, .alpha_one = 1},
    {.m = 37, .n = 9, .k = 20, .lda = 37, .ldb = 20, .ldc = 40, .beta_class = 1, .tails = 1},
};
enum { NKINDS = sizeof kinds / sizeof *kinds };

Test(objload, loaded_kernels_compute_what_lljit_kernels_compute)
{
  int loaded = 0;
  for (int t = 0; t < 120 + NKINDS; t++) {
    jt_gemm_t g = {.f64 = (int)rnd(2), .ta = (int)rnd(2), .tb = (int)rnd(2),
                   .m = 1 + (int)rnd(70), .n = 1 + (int)rnd(70), .k = 1 + (int)rnd(70),
                   .alpha_one = (int)rnd(2), .beta_class = (int)rnd(3), .dot = t % 10 == 9};
    g.lda = (g.ta ? g.k : g.m) + (int)rnd(3);
    g.ldb = (g.tb ? g.n : g.k) + (int)rnd(3);
    g.ldc = g.m + (int)rnd(3);
    if (t >= 120)
      g = kinds[t - 120];
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
  cr_assert_eq(loaded, 120 + NKINDS);
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

/* Whether [p, p + len) is mapped (mincore fails with ENOMEM on an unmapped page). */
static int mapped(const void *p, size_t len)
{
  unsigned char v[16];
  return mincore((void *)((uintptr_t)p & ~(uintptr_t)4095), len, v) == 0;
}

/* Runs l's kernel and k's LLJIT-linked one on the same random operands of g: the same bits. */
static void same_results(const jt_gemm_t *g, const kern_t *k, const jt_loaded_t *l)
{
  size_t esz = g->f64 ? 8 : 4, na = (size_t)g->lda * g->k, nb = (size_t)g->ldb * g->n,
         nc = (size_t)g->ldc * g->n;
  char *a = malloc(na * esz), *b = malloc(nb * esz), *c = calloc(nc, esz);
  for (size_t i = 0; i < na * esz; i++)
    a[i] = (char)(rnd(64) + 32);
  for (size_t i = 0; i < nb * esz; i++)
    b[i] = (char)(rnd(64) + 32);
  void *want = run(k->fn, a, b, c, nc * esz, 1, 0), *got = run((jt_gemm_fn)l->fn, a, b, c, nc * esz, 1, 0);
  cr_assert(memcmp(want, got, nc * esz) == 0, "%s: the batch's kernel differs", k->name);
  free(want), free(got), free(a), free(b), free(c);
}

Test(objload, a_batch_is_one_mapping_made_executable_once_and_freed_kernel_by_kernel)
{
  enum { N = 6 };
  kern_t k[N];
  jt_gemm_t g[N];
  size_t bytes = 0;
  char err[256] = "", perms[5];
  for (int i = 0; i < N; i++) {
    int n = 4 + 4 * i;
    g[i] = (jt_gemm_t){.f64 = i % 2, .m = n, .n = n, .k = n, .lda = n, .ldb = n, .ldc = n};
    k[i] = compile(&g[i]);
    long size = jt_obj_size(k[i].obj, k[i].obj_len, err, sizeof err);
    cr_assert_gt(size, 0, "%s", err);
    cr_assert_eq(size % 4096, 0, "whole pages");
    bytes += (size_t)size;
  }
  jt_obj_batch_t b;
  jt_loaded_t l[N];
  cr_assert_eq(jt_obj_batch_begin(&b, bytes + 8192, err, sizeof err), 0, "%s", err);
  /* A refused object takes no room: the next one is placed where it would have been. */
  cr_assert_eq(jt_obj_place(&b, k[0].obj, k[0].obj_len, "no_such_kernel", &l[0], err, sizeof err),
               -1);
  cr_assert_eq(b.used, 0);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(jt_obj_place(&b, k[i].obj, k[i].obj_len, k[i].name, &l[i], err, sizeof err), 0,
                 "%s: %s", k[i].name, err);
    cr_assert_eq((long)l[i].map_len, jt_obj_size(k[i].obj, k[i].obj_len, err, sizeof err));
    cr_assert_eq(l[i].map, i ? (unsigned char *)l[i - 1].map + l[i - 1].map_len : b.map,
                 "the objects lie one after the other");
    perms_of(l[i].fn, perms);
    cr_assert_str_eq(perms, "rw-p", "not executable before the commit");
  }
  cr_assert_eq(jt_obj_batch_commit(&b, err, sizeof err), 0, "%s", err);
  cr_assert(!mapped(b.map + bytes, 4096), "the unused rest is unmapped");
  for (int i = 0; i < N; i++) {
    perms_of(l[i].fn, perms);
    cr_assert_str_eq(perms, "r-xp", "read+execute after the commit, never writable");
    same_results(&g[i], &k[i], &l[i]);
  }
  /* Freeing one kernel unmaps its own pages; its neighbours keep running. */
  void *freed = l[2].map;
  size_t freed_len = l[2].map_len;
  jt_obj_unload(&l[2]);
  cr_assert(!mapped(freed, freed_len), "its pages are gone");
  for (int i = 0; i < N; i++)
    if (i != 2)
      same_results(&g[i], &k[i], &l[i]);
  for (int i = 0; i < N; i++) {
    jt_obj_unload(&l[i]);
    free(k[i].obj);
  }
  cr_assert_eq(jt_obj_place(&b, k[0].obj, 0, "x", &l[0], err, sizeof err), -1,
               "a committed batch takes nothing more");
}

Test(objload, an_aborted_batch_leaves_nothing_mapped)
{
  jt_gemm_t g = {.m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8};
  kern_t k = compile(&g);
  char err[256] = "";
  jt_obj_batch_t b;
  jt_loaded_t l;
  long size = jt_obj_size(k.obj, k.obj_len, err, sizeof err);
  cr_assert_gt(size, 0, "%s", err);
  cr_assert_eq(jt_obj_batch_begin(&b, (size_t)size, err, sizeof err), 0, "%s", err);
  unsigned char *map = b.map;
  cr_assert_eq(jt_obj_place(&b, k.obj, k.obj_len, k.name, &l, err, sizeof err), 0, "%s", err);
  cr_assert_eq(jt_obj_place(&b, k.obj, k.obj_len, k.name, &l, err, sizeof err), -1,
               "no room past the bytes asked for");
  cr_assert(strstr(err, "left"), "%s", err);
  jt_obj_batch_abort(&b);
  cr_assert(!mapped(map, (size_t)size));
  cr_assert_null(b.map);
  /* An empty batch's commit returns its mapping too. */
  cr_assert_eq(jt_obj_batch_begin(&b, 4096, err, sizeof err), 0, "%s", err);
  map = b.map;
  cr_assert_eq(jt_obj_batch_commit(&b, err, sizeof err), 0, "%s", err);
  cr_assert(!mapped(map, 4096));
  free(k.obj);
}

/* A batch's pages are all written by the objects placed in it: they are mapped at once (the
 * warm start's placing, 50 kernels on a Zen 5 guest: 1.9 -> 1.5 ms), none faulted one by one. */
Test(objload, a_batch_is_mapped_with_its_pages_present)
{
  char err[256] = "";
  jt_obj_batch_t b;
  size_t len = 64 << 10;
  cr_assert_eq(jt_obj_batch_begin(&b, len, err, sizeof err), 0, "%s", err);
  unsigned char vec[16];
  cr_assert_eq(mincore(b.map, len, vec), 0);
  for (size_t i = 0; i < len / 4096; i++)
    cr_assert(vec[i] & 1, "page %zu of the batch is not present", i);
  jt_obj_batch_abort(&b);
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

/* Single-stepping (the trap flag) through a kernel: at every instruction inside [lo, hi) the
 * walk must step out to the call's return address, which [RSP] holds at the kernel's first
 * instruction, and on through the same frames as from there. */
static struct {
  uint64_t lo, hi, stack_hi, ra, tail[16];
  int ntail, inside, bad, noinfo;
  volatile sig_atomic_t on;
} st;

static void on_trap(int sig, siginfo_t *si, void *ucv)
{
  (void)sig, (void)si;
  greg_t *g = ((ucontext_t *)ucv)->uc_mcontext.gregs;
  if (!st.on) {
    g[REG_EFL] &= ~0x100;
    return;
  }
  uint64_t ip = (uint64_t)g[REG_RIP], sp = (uint64_t)g[REG_RSP], out[16];
  if (ip < st.lo || ip >= st.hi)
    return;
  int stop, n = uw_walk((uw_regs_t){ip, sp, (uint64_t)g[REG_RBP]}, sp, st.stack_hi, out, 16, &stop);
  if (ip == st.lo && !st.inside) { /* the first instruction: the frames to expect */
    st.ra = *(const uint64_t *)(uintptr_t)sp;
    st.ntail = n - 1;
    memcpy(st.tail, out + 1, (size_t)(n - 1) * sizeof *out);
  }
  st.inside++;
  st.noinfo += stop == UW_NOINFO && n == 1;
  st.bad += n - 1 != st.ntail || n < 3 || out[1] != st.ra ||
            memcmp(out + 1, st.tail, (size_t)(n - 1) * sizeof *out) != 0;
}

__attribute__((noinline)) static void step_through(jt_gemm_fn fn, const void *a, const void *b,
                                                   void *c)
{
  st.on = 1;
  __asm__ volatile("pushfq; orq $0x100, (%%rsp); popfq" ::: "memory", "cc");
  fn(a, b, c, 1.0, 1.0);
  st.on = 0;
  __asm__ volatile("nop");
}

Test(objload, the_walker_steps_out_of_a_kernel_at_every_instruction)
{
#if defined(__SANITIZE_ADDRESS__)
  /* Open: built with ASan, 2 of ~1000 walks out of the TN 16x8x20 kernel end wrong
   * (docs/sanitizers.md); the plain suite holds this test. */
  cr_skip_test("2 of ~1000 walks out of a kernel differ under ASan: open, see docs/sanitizers.md");
#endif
  pthread_attr_t at;
  void *base;
  size_t size;
  cr_assert_eq(pthread_getattr_np(pthread_self(), &at), 0);
  pthread_attr_getstack(&at, &base, &size);
  pthread_attr_destroy(&at);
  st.stack_hi = (uint64_t)(uintptr_t)base + size;
  struct sigaction sa = {0};
  sa.sa_sigaction = on_trap;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGTRAP, &sa, NULL);
  /* a leaf without a frame, one that saves registers, one with a panel on its stack */
  const jt_gemm_t shapes[] = {
      {.m = 4, .n = 4, .k = 4, .lda = 4, .ldb = 4, .ldc = 4, .alpha_one = 1, .beta_class = 1},
      {.m = 37, .n = 13, .k = 9, .lda = 40, .ldb = 9, .ldc = 37, .alpha_one = 1, .beta_class = 2},
      {.ta = 1, .m = 16, .n = 8, .k = 20, .lda = 20, .ldb = 20, .ldc = 16, .alpha_one = 1, .beta_class = 1},
  };
  static double a[64 * 64], b[64 * 64], c[64 * 64];
  for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++)
    for (int placed = 0; placed < 2; placed++) { /* as LLJIT linked it, then as the loader placed it */
      jt_gemm_t g = shapes[t];
      g.f64 = 1;
      kern_t k = compile(&g);
      jt_loaded_t l = {0};
      char err[256] = "";
      jt_gemm_fn fn = k.fn;
      size_t len = 0;
      if (placed) {
        cr_assert_eq(jt_obj_load(k.obj, k.obj_len, k.name, &l, err, sizeof err), 0, "%s", err);
        fn = (jt_gemm_fn)l.fn, len = l.size;
      }
      st.lo = (uint64_t)(uintptr_t)fn;
      uint8_t cfi[512];
      long n = jt_obj_cfi(k.obj, k.obj_len, k.name, st.lo, cfi, sizeof cfi, err, sizeof err);
      cr_assert_gt(n, 0, "%s", err);
      uint32_t clen;
      uint64_t range; /* the FDE's: after its length, CIE pointer and start */
      memcpy(&clen, cfi, 4);
      memcpy(&range, cfi + 4 + clen + 16, 8);
      cr_assert(!placed || range == len, "the FDE covers %llu bytes of a %zu-byte kernel",
                (unsigned long long)range, len);
      st.hi = st.lo + range;
      for (int registered = 0; registered < 2; registered++) {
        if (registered)
          cr_assert_eq(uw_add_code(st.lo, st.hi, cfi, (size_t)n), 0);
        cr_assert_eq(uw_refresh(), 0);
        st.inside = st.bad = st.noinfo = 0;
        step_through(fn, a, b, c);
        cr_assert_gt(st.inside, 20, "%s: %d instructions inside", k.name, st.inside);
        if (registered)
          cr_assert_eq(st.bad, 0, "%s (%s): %d of %d walks wrong", k.name,
                       placed ? "placed" : "LLJIT", st.bad, st.inside);
        else /* without its rules, no walk goes past it */
          cr_assert_eq(st.noinfo, st.inside, "%s", k.name);
      }
      uw_remove_code(st.lo);
      st.inside = st.noinfo = 0;
      step_through(fn, a, b, c);
      cr_assert_gt(st.inside, 20);
      cr_assert_eq(st.noinfo, st.inside, "%s: its rules outlived uw_remove_code", k.name);
      if (placed)
        jt_obj_unload(&l);
      free(k.obj);
    }
}

Test(objload, rules_of_a_function_the_object_lacks_are_refused)
{
  jt_gemm_t g = {.m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8, .alpha_one = 1};
  kern_t k = compile(&g);
  uint8_t cfi[512];
  char err[256] = "";
  cr_assert_eq(jt_obj_cfi(k.obj, k.obj_len, "no_such_kernel", 0, cfi, sizeof cfi, err, sizeof err), -1);
  cr_assert(strstr(err, "no function"), "%s", err);
  cr_assert_eq(jt_obj_cfi(k.obj, k.obj_len, k.name, 0, cfi, 16, err, sizeof err), -1, "16 bytes");
  cr_assert(strstr(err, "more than 16"), "%s", err);
  free(k.obj);
}
