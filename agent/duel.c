/* SPDX-License-Identifier: MIT */
#include "duel.h"
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..n) (reordered), 0 when n is 0. */
static double median(double *v, uint32_t n)
{
  if (!n)
    return 0;
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One batch of one side: a call to warm it (the other side ran last), then n calls timed. */
static uint64_t batch_ns(void (*fn)(void *), void *ctx, uint32_t n, uint64_t (*now)(void))
{
  fn(ctx);
  uint64_t t0 = now();
  for (uint32_t i = 0; i < n; i++)
    fn(ctx);
  return now() - t0;
}

/* The batch a duel times calls of call_ns in (at least 2 calls, as the judge's rounds need). */
static uint64_t batch_of(uint64_t call_ns)
{
  call_ns += !call_ns;
  uint64_t batch = (AG_DUEL_BATCH_NS + call_ns - 1) / call_ns;
  return batch < 2 ? 2 : batch > AG_DUEL_BATCH_MAX ? AG_DUEL_BATCH_MAX : batch;
}

uint64_t ag_duel_need_ns(uint64_t call_ns)
{
  return 2 * (batch_of(call_ns) + 1) * (call_ns + !call_ns) * AG_CMP_MIN_ROUNDS;
}

void ag_duel_run(const ag_duel_t *d, ag_duel_result_t *out)
{
  memset(out, 0, sizeof *out);
  out->verdict = AG_CMP_UNDECIDED;
  uint64_t (*spent)(void) = d->spent ? d->spent : d->now;
  uint64_t start = spent();
  uint64_t one_o = batch_ns(d->original, d->ctx, 1, d->now);
  uint64_t one_v = batch_ns(d->variant, d->ctx, 1, d->now);
  uint64_t one = one_o > one_v ? one_o : one_v;
  uint64_t batch = batch_of(one);
  out->batch = (uint32_t)batch;
  /* Calls too long for the judge's fewest rounds within the budget: no duel at all. */
  if (ag_duel_need_ns(one) > d->budget_ns)
    return;
  ag_cmp_t c;
  ag_cmp_start(&c, 0, 0);
  uint64_t vn = 0, vns = 0;
  uint32_t nr = 0;
  double med = 0, o_call[AG_CMP_ROUNDS], v_call[AG_CMP_ROUNDS];
  for (uint32_t r = 0; r < AG_CMP_ROUNDS && spent() - start <= d->budget_ns; r++) {
    if (d->stop && d->stop())
      break; /* undecided, as the verdict still is */
    uint64_t o, v;
    if (r & 1) {
      v = batch_ns(d->variant, d->ctx, (uint32_t)batch, d->now);
      o = batch_ns(d->original, d->ctx, (uint32_t)batch, d->now);
    } else {
      o = batch_ns(d->original, d->ctx, (uint32_t)batch, d->now);
      v = batch_ns(d->variant, d->ctx, (uint32_t)batch, d->now);
    }
    vn += batch, vns += v;
    if (ag_cmp_burst(&c, batch, o, vn, vns))
      o_call[nr] = (double)o / (double)batch, v_call[nr++] = (double)v / (double)batch;
    out->verdict = ag_cmp_judge(&c, &med);
    if (out->verdict != AG_CMP_UNDECIDED)
      break;
  }
  /* A kernel not measurably faster than the library before its first call gains nothing the
   * in-run judge could confirm in a short run: a tie won is no win here. */
  if (out->verdict == AG_CMP_FASTER && med > 1.0 - AG_CMP_MARGIN)
    out->verdict = AG_CMP_TIE;
  out->median = med;
  out->rounds = c.rounds;
  out->orig_ns = median(o_call, nr);
  out->var_ns = median(v_call, nr);
}
