/* SPDX-License-Identifier: MIT */
/* Problems (problem.h): a signature's key decoded, by its host's row, into the kernel the
 * generator would build; what a call through it needs, by the kernel's kind. */
#include "problem.h"
#include "host.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *ag_problem_family(const jt_gemm_t *g) { return jt_kind(g)->name; }

int ag_problem_no(char *why, size_t len, const char *fmt, ...)
{
  if (why && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
  }
  return 0;
}

int ag_problem_takes(const jt_gemm_t *g, const char *op, int m, int n, int k, char *why,
                     size_t len)
{
  if (jt_gemm_supported(g))
    return 1;
  if (g->mm)
    return g->m < JT_MM_MR || g->m % JT_MM_MR
               ? ag_problem_no(why, len, "%d rows: %s kernels take multiples of %d", g->m, op,
                               JT_MM_MR)
           : g->n != 1 && g->n < JT_MM_MIN_N
               ? ag_problem_no(why, len, "%d columns: %s kernels take 1 or at least %d", g->n, op,
                               JT_MM_MIN_N)
               : ag_problem_no(why, len, "a dimension above the %s generator's limits (%dx%dx%d)",
                               op, g->m, g->n, g->k);
  if (g->fa)
    return ag_problem_no(why, len, "DK %d, DV %d: %s kernels take an even DK and a DV in "
                         "multiples of 16, both at most %d", g->k, g->m, op, JT_FA_MAX_D);
  if (g->add_rms_mul || g->dot)
    return ag_problem_no(why, len, "length %d: the generator takes 1 to %d", g->k, 1 << 20);
  int kmax = g->ta && !jt_gemm_dots(g) ? JT_GEMM_MAX_K_PACKED : JT_GEMM_MAX_K;
  if (m < 1 || n < 1 || k < 1)
    return ag_problem_no(why, len, "an empty product (M=%d N=%d K=%d)", m, n, k);
  if (g->m > JT_GEMM_MAX_DIM || g->n > JT_GEMM_MAX_DIM)
    return ag_problem_no(why, len, "%c=%d is above the generator's limit of %d",
                         m > JT_GEMM_MAX_DIM ? 'M' : 'N', m > JT_GEMM_MAX_DIM ? m : n,
                         JT_GEMM_MAX_DIM);
  if (g->k > kmax)
    return ag_problem_no(why, len, "K=%d is above the generator's limit of %d%s", k, kmax,
                         kmax == JT_GEMM_MAX_K_PACKED ? " for a transposed A" : "");
  return ag_problem_no(why, len,
                       "a leading dimension smaller than its matrix's rows: a layout the "
                       "generator does not take");
}

int ag_problem_of(const ag_sig_t *k, long maxd, jt_gemm_t *g, int *swap)
{
  return ag_problem_check(k, maxd, g, swap, NULL, 0);
}

int ag_problem_check(const ag_sig_t *k, long maxd, jt_gemm_t *g, int *swap, char *why, size_t len)
{
  const ag_host_t *h = ag_host_of(k->host);
  if (!h || !h->kernel)
    return ag_problem_no(why, len, "no host compiles keys of host #%u: profiled, not compiled",
                         k->host);
  return h->kernel(k, maxd, g, swap, why, len);
}

void ag_problem_extents(const jt_gemm_t *g, int swapped, ag_vrun_t *r)
{
  size_t esz = g->f64 ? 8 : 4;
  int flat = !jt_kind(g)->guards; /* no overlap guard: their hosts check it */
  r->ext_a =
      flat
          ? 0
          : ((size_t)g->lda * (size_t)((g->ta ? g->m : g->k) - 1) + (size_t)(g->ta ? g->k : g->m)) *
                esz;
  r->ext_b =
      flat
          ? 0
          : ((size_t)g->ldb * (size_t)((g->tb ? g->k : g->n) - 1) + (size_t)(g->tb ? g->n : g->k)) *
                esz;
  r->ext_c = flat ? 0 : ((size_t)g->ldc * (size_t)(g->n - 1) + (size_t)g->m) * esz;
  r->swapped = (uint8_t)swapped;
}

/* A GEMM of a kind that takes a plain call (no SYRK, dot product, graph node): 1 with N > 1, 2 a
 * GEMV (n = 1, K > 1: an AXPY is the GEMM of K = 1), else 0. */
static int gemm_shape(const jt_gemm_t *g)
{
  if (g->dot || g->add_rms_mul || g->mm || g->syrk || g->fa)
    return 0;
  return g->n > 1 ? 1 : g->k > 1 ? 2 : 0;
}

int ag_problem_split(const jt_gemm_t *g, int parts, ag_vrun_t *r)
{
  r->parts = 1, r->a_step = r->b_step = r->c_step = 0;
  if (parts <= 1)
    return 1;
  size_t esz = g->f64 ? 8 : 4;
  int shape = gemm_shape(g);
  if (shape == 1 && 2.0 * g->m * g->n * g->k >= AG_PROBLEM_SPLIT_FLOPS && g->n % parts == 0 &&
      g->n / parts >= AG_PROBLEM_SPLIT_COLS) {
    size_t cols = (size_t)(g->n / parts);
    r->parts = (uint8_t)parts;
    r->b_step = cols * (g->tb ? 1 : (size_t)g->ldb) * esz; /* op(B)'s columns: B's rows if T */
    r->c_step = cols * (size_t)g->ldc * esz;
  } else if (shape == 2 && (double)g->m * g->k * esz >= AG_PROBLEM_SPLIT_BYTES &&
             g->m % (parts * AG_PROBLEM_SPLIT_ROWS) == 0) {
    size_t rows = (size_t)(g->m / parts);
    r->parts = (uint8_t)parts;
    r->a_step = rows * (g->ta ? (size_t)g->lda : 1) * esz; /* op(A)'s rows: A's columns if T */
    r->c_step = rows * esz;
  }
  return r->parts;
}

jt_gemm_t ag_problem_part(const jt_gemm_t *g, const ag_vrun_t *r)
{
  jt_gemm_t part = *g;
  if (r->parts > 1)
    *(ag_problem_split_dim(g) == 'M' ? &part.m : &part.n) /= r->parts;
  return part;
}

int ag_problem_symbol_fits(const jt_gemm_t *part, const char *symbol)
{
  if (strncmp(symbol, "opjit_sgemm_", 12) != 0 && strncmp(symbol, "opjit_dgemm_", 12) != 0)
    return 1; /* a kernel of a kind never split */
  char dims[48];
  snprintf(dims, sizeof dims, "_%dx%dx%d_l", part->m, part->n, part->k);
  return strstr(symbol, dims) != NULL;
}
