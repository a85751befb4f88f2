/* SPDX-License-Identifier: MIT */
/* The never-slower judge (compare.h): rounds of paired warm timings, a sign test. */
#include "compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ag_cmp_start(ag_cmp_t *c, uint64_t v_total_n, uint64_t v_total_ns)
{
  memset(c, 0, sizeof *c);
  c->v_base_n = v_total_n;
  c->v_base_ns = v_total_ns;
}

int ag_cmp_burst_due(int32_t *to_burst, int32_t len, int32_t gap, int awaiting)
{
  int32_t weight = awaiting == AG_CMP_AWAITING_LONG ? AG_CMP_BURST_EVERY / AG_CMP_BURST_EVERY_LONG
                   : awaiting == AG_CMP_AWAITING    ? AG_CMP_BURST_EVERY / AG_CMP_BURST_EVERY_NEW
                                                    : 1;
  *to_burst -= gap * weight;
  if (*to_burst > 0)
    return 0;
  *to_burst = len * AG_CMP_BURST_EVERY;
  return 1;
}

int ag_cmp_settle_add(ag_cmp_settle_t *s, uint64_t dt)
{
  if (s->state == AG_CMP_DONE)
    return 1;
  s->ns += dt;
  if (++s->n < AG_CMP_BLOCK)
    return 0;
  if (s->state == AG_CMP_FRESH) { /* the block after the settled pair: the round's */
    s->state = AG_CMP_DONE;
    return 1;
  }
  if (s->blocks < UINT8_MAX)
    s->blocks++;
  if (s->blocks > 1 && (double)s->ns >= (1 - AG_CMP_SETTLE) * (double)s->prev_ns) {
    if (!s->fell) { /* the first pair: both blocks are the round's */
      s->state = AG_CMP_DONE;
      return 1;
    }
    s->state = AG_CMP_FRESH;
  } else if (s->blocks > 1) {
    s->fell = 1;
  }
  s->prev_ns = s->ns;
  s->n = 0;
  s->ns = 0;
  return 0;
}

void ag_cmp_settle_take(const ag_cmp_settle_t *s, uint64_t *n, uint64_t *ns)
{
  if (ag_cmp_settle_falling(s)) {
    *n = *ns = 0;
    return;
  }
  /* the block before the current one counts when the first two settled, or, still warming
   * (fewer than two blocks), when it was filled; never a fresh block's settled pair */
  int prev = s->state == AG_CMP_WARMING ? s->blocks > 0 : s->state == AG_CMP_DONE && !s->fell;
  *n = s->n + (prev ? AG_CMP_BLOCK : 0);
  *ns = s->ns + (prev ? s->prev_ns : 0);
}

uint32_t ag_cmp_gap_scale(double timing_ns, uint64_t dt, uint32_t every)
{
  if (!(timing_ns > 0) || !dt || !every)
    return 1;
  double scale = ceil(AG_CMP_TIMING_SHARE * timing_ns / ((double)dt * (double)every));
  return scale <= 1 ? 1 : scale >= AG_CMP_GAP_SCALE_MAX ? AG_CMP_GAP_SCALE_MAX : (uint32_t)scale;
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

/* Closes a round of one warm-or-cold pair of timings (o and v ns, one call each). */
static void close_pair(ag_cmp_t *c, uint64_t o, uint64_t v)
{
  c->ratio[c->rounds % AG_CMP_ROUNDS] = (float)((double)v / (double)o);
  c->rounds++;
  c->o_n++, c->o_ns += o;
  c->v_n++, c->v_ns += v;
}

int ag_cmp_pair(ag_cmp_t *c, int side, uint64_t ns)
{
  if (!ns) /* a timer too coarse to see the call */
    return 0;
  if (!c->pair_side || c->pair_side == side) { /* the first of a pair, or one replacing it */
    c->pair_side = side, c->pair_ns = ns;
    return 0;
  }
  uint64_t o = side == AG_CMP_PAIR_ORIG ? ns : c->pair_ns;
  uint64_t v = side == AG_CMP_PAIR_ORIG ? c->pair_ns : ns;
  c->pair_side = 0;
  /* a side 8x its mean so far (from 8 rounds on) is a preemption or a page fault: the pair is
   * dropped, as the bursts' and the variant's outliers are (agent.h, ag_timing_outlier) */
  if (c->rounds >= 8 && (o * c->o_n > 8 * c->o_ns || v * c->v_n > 8 * c->v_ns))
    return 0;
  close_pair(c, o, v);
  c->paired++;
  return 1;
}

void ag_cmp_save(const ag_cmp_t *c, st_judge_pool_t *out)
{
  memset(out, 0, sizeof *out);
  out->rounds = c->rounds, out->judged = c->judged, out->kept = c->kept;
  out->runs = c->pooled_runs + (c->rounds > c->pooled_rounds);
  out->o_n = c->o_n, out->o_ns = c->o_ns, out->v_n = c->v_n, out->v_ns = c->v_ns;
  out->n = c->rounds < AG_CMP_ROUNDS ? c->rounds : AG_CMP_ROUNDS;
  for (uint32_t k = 0; k < out->n; k++) /* oldest first */
    out->ratio[k] = c->ratio[(c->rounds - out->n + k) % AG_CMP_ROUNDS];
}

void ag_cmp_resume(ag_cmp_t *c, const st_judge_pool_t *p, uint64_t v_total_n, uint64_t v_total_ns)
{
  ag_cmp_start(c, v_total_n, v_total_ns);
  uint32_t n = p->n < AG_CMP_ROUNDS ? p->n : AG_CMP_ROUNDS;
  if (n > p->rounds) /* damaged: more ratios than rounds */
    n = p->rounds;
  c->rounds = p->rounds;
  /* the held ratios are the last n rounds, at their places in the ring */
  for (uint32_t k = 0; k < n; k++)
    c->ratio[(p->rounds - n + k) % AG_CMP_ROUNDS] = p->ratio[p->n - n + k];
  c->kept = p->kept != 0;
  c->judged = p->judged <= p->rounds ? p->judged : p->rounds;
  c->o_n = p->o_n, c->o_ns = p->o_ns, c->v_n = p->v_n, c->v_ns = p->v_ns;
  c->pooled_rounds = p->rounds, c->pooled_runs = p->runs;
}

const char *ag_cmp_describe(const ag_cmp_t *c, double median, const char *how, char *buf,
                            size_t len)
{
  char pooled[64] = "";
  uint32_t n = c->rounds < AG_CMP_ROUNDS ? c->rounds : AG_CMP_ROUNDS;
  /* the window's rounds that came from earlier runs: the oldest of it */
  uint32_t earlier = c->pooled_rounds + n > c->rounds ? c->pooled_rounds + n - c->rounds : 0;
  if (earlier)
    snprintf(pooled, sizeof pooled, ", %u of them from %u earlier run%s", earlier,
             c->pooled_runs, c->pooled_runs == 1 ? "" : "s");
  snprintf(buf, len, "variant %.0f ns per call, original %.0f ns (%s; median ratio %.2f over %u "
           "rounds%s)", ag_cmp_variant_ns(c), ag_cmp_orig_ns(c), how, median, n, pooled);
  return buf;
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

enum ag_verdict ag_cmp_judge(ag_cmp_t *c, double *median)
{
  int n = c->rounds < AG_CMP_ROUNDS ? (int)c->rounds : AG_CMP_ROUNDS;
  const float *r = c->ratio; /* the window: the ring holds the last n rounds */
  double med = st_judge_median(r, (uint32_t)n);
  if (median)
    *median = med;
  if (n < AG_CMP_MIN_ROUNDS) { /* an early verdict, or none */
    int below = 0, above = 0;
    for (int i = 0; i < n; i++)
      below += r[i] < 0.5f, above += r[i] > AG_CMP_EARLY_SLOWER;
    if (n < AG_CMP_EARLY_ROUNDS || c->kept || (below < n && above < n))
      return AG_CMP_UNDECIDED;
    if (above == n)
      return AG_CMP_SLOWER;
    c->kept = 1, c->judged = c->rounds;
    return AG_CMP_FASTER;
  }
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

const char *ag_cmp_sanitizer(void)
{
#if defined(__SANITIZE_THREAD__)
  return "ThreadSanitizer";
#elif defined(__SANITIZE_ADDRESS__)
  return "AddressSanitizer";
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return "ThreadSanitizer";
#elif __has_feature(address_sanitizer)
  return "AddressSanitizer";
#else
  return NULL;
#endif
#else
  return NULL;
#endif
}
