/* SPDX-License-Identifier: MIT */
/* The never-slower judge (compare.h): rounds of paired warm timings, a sign test. */
#include "compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ag_cmp_start(ag_cmp_t *c, uint64_t v_total_n, uint64_t v_total_ns)
{
  memset(c, 0, sizeof *c);
  c->v_base_n = v_total_n;
  c->v_base_ns = v_total_ns;
}

int ag_cmp_burst(ag_cmp_t *c, uint64_t n, uint64_t ns, uint64_t v_total_n, uint64_t v_total_ns)
{
  if (v_total_n < c->v_base_n || v_total_ns < c->v_base_ns) /* the counters were reset */
    c->v_base_n = v_total_n, c->v_base_ns = v_total_ns;
  c->po_n += n;
  c->po_ns += ns;
  if (!c->po_n || v_total_n < c->v_base_n + AG_CMP_MIN_VCALLS)
    return 0;
  uint64_t vn = v_total_n - c->v_base_n, vns = v_total_ns - c->v_base_ns;
  double om = (double)c->po_ns / (double)c->po_n, vm = (double)vns / (double)vn;
  if (om <= 0) /* a timer too coarse to see the call: no round */
    return 0;
  c->ratio[c->rounds % AG_CMP_ROUNDS] = (float)(vm / om);
  c->rounds++;
  c->o_n += c->po_n, c->o_ns += c->po_ns;
  c->v_n += vn, c->v_ns += vns;
  c->po_n = c->po_ns = 0;
  c->v_base_n = v_total_n, c->v_base_ns = v_total_ns;
  return 1;
}

int ag_cmp_sign_threshold(int n)
{
  /* P(X >= k) for X ~ Bin(n, 1/2), summed from the top: C(n, j) / 2^n. */
  double tail = 0, term = pow(0.5, n); /* C(n, n) / 2^n */
  for (int k = n; k >= 0; k--) {
    tail += term;
    if (tail > 0.01)
      return k + 1;
    term = term * k / (n - k + 1); /* C(n, k-1) = C(n, k) k / (n - k + 1) */
  }
  return n + 1;
}

static int cmp_float(const void *a, const void *b)
{
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* The median of the last n rounds (sorted copy). */
static double median_of(const ag_cmp_t *c, int n, float *sorted)
{
  memcpy(sorted, c->ratio, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_float);
  return n % 2 ? sorted[n / 2] : 0.5 * ((double)sorted[n / 2 - 1] + sorted[n / 2]);
}

enum ag_verdict ag_cmp_judge(ag_cmp_t *c, double *median)
{
  int n = c->rounds < AG_CMP_ROUNDS ? (int)c->rounds : AG_CMP_ROUNDS;
  float r[AG_CMP_ROUNDS];
  double med = n ? median_of(c, n, r) : 0;
  if (median)
    *median = med;
  if (n < AG_CMP_MIN_ROUNDS)
    return AG_CMP_UNDECIDED;
  /* A verdict for the variant is looked at again only on a window of new rounds. */
  if (c->kept && c->rounds < c->judged + AG_CMP_ROUNDS)
    return AG_CMP_UNDECIDED;
  int slower = 0, faster = 0;
  for (int i = 0; i < n; i++)
    slower += r[i] > 1.0f, faster += r[i] < 1.0f;
  int k = ag_cmp_sign_threshold(n);
  if (slower >= k && med > 1.0 + AG_CMP_MARGIN)
    return AG_CMP_SLOWER;
  if (c->kept) { /* confirmed, or at least not overturned, by this window */
    c->judged = c->rounds;
    return AG_CMP_UNDECIDED;
  }
  if ((faster >= k && med < 1.0 - AG_CMP_MARGIN) ||
      (c->rounds >= AG_CMP_ROUNDS && med <= 1.0)) {
    c->kept = 1, c->judged = c->rounds;
    return AG_CMP_FASTER;
  }
  return c->rounds >= AG_CMP_ROUNDS ? AG_CMP_TIE : AG_CMP_UNDECIDED;
}

double ag_cmp_orig_ns(const ag_cmp_t *c)
{
  uint64_t n = c->o_n + c->po_n, ns = c->o_ns + c->po_ns;
  return n ? (double)ns / (double)n : 0;
}

double ag_cmp_variant_ns(const ag_cmp_t *c) { return c->v_n ? (double)c->v_ns / (double)c->v_n : 0; }
