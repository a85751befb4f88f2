/* SPDX-License-Identifier: MIT */
/* The ggml host's never-slower rounds: which side an execution of a rebuilt graph computes,
 * the records' spans in a timed execution (gg_span, from forward()), and their times handed to
 * the tiers' judge (compare.h) as the original's and the variant's. */
#include "ggml_host.h"

#include "../compare.h"
#include "../tier.h"

#include <stdlib.h>

/* Never slower: rounds of warm, interleaved executions (compare.h judges them).
 *
 * A cached graph that runs fused groups is executed in rounds, one in every ROUND_EVERY
 * executions for its first AG_CMP_ROUNDS rounds (the judge's window: its verdicts come within
 * it), then one in ROUND_EVERY_DECIDED (later windows confirm or overturn them), the first at
 * its 14th to 17th executions:
 *
 *   execution (count mod period):  every-2   every-1         0          1                2 ...
 *   computes:                      host's    host's, timed   rebuilt    rebuilt, timed   rebuilt
 *
 * The first of each pair warms the code and data the timed one runs (ggml's ops, or the
 * agent's kernels), so each side is timed warm, a few milliseconds from the other. In a timed
 * execution forward() times, on each thread, each record from its first node's start to the
 * start of the next node the thread computes: ggml's nodes of the group with the barriers
 * between them and the one after, or the custom node with the barrier after it; the same
 * barriers count on both sides. A record whose ggml nodes would not end where the timing
 * expects (ggml's own RMS_NORM+MUL fusion, not interposed, runs nodes that are no member of
 * it) is never timed. After the host's timed execution each record's time goes to the judge
 * as the original's (ag_tier_burst) under the signature whose kernel it runs; after the
 * rebuilt one, as the variant's (its timed calls), which closes the round. The tiers demote a
 * kernel the judge finds slower (with events, its stored object dropped), and the graph is
 * rebuilt without it: its groups run ggml's own nodes from then on. */
#define ROUND_EVERY 16          /* executions from a round to the next, in the first window */
#define ROUND_EVERY_DECIDED 128 /* ... after it */

gg_cache_t *_Atomic gg_timed;
gg_cache_t *_Atomic gg_hosted;
static uint32_t timed_gen; /* timed executions started (gg_cache_mu): a span is of one */

AG_TLS gg_span_t gg_tl_span;

/* gg_span: ends the thread's span, booking it to its record when it ended where it should
 * (else the record is never timed again), and starts dst's. tc is pinned: a span of its
 * running timed execution (same entry, same tgen) is booked, and its record is tc's, alive; a
 * span of an execution that ended is dropped unread. */
void gg_span(gg_cache_t *tc, const struct ggml_tensor *dst, const gg_fusion_t *fu)
{
  uint64_t now = ag_now_ns();
  const gg_member_t *m = tc && !tc->side ? gg_member_at(tc, dst) : NULL;
  gg_fusion_t *f = gg_tl_span.f;
  if (f && tc && gg_tl_span.c == tc && gg_tl_span.gen == tc->tgen) {
    if (gg_tl_span.m && dst != gg_tl_span.m->next && !(m && m->f == f)) {
      atomic_store_explicit(&f->untimed, 1, memory_order_relaxed); /* ggml ran other nodes */
    } else {
      atomic_fetch_add_explicit(&f->tns, now - gg_tl_span.t0, memory_order_relaxed);
      atomic_fetch_add_explicit(&f->tn, (uint32_t)gg_tl_span.first, memory_order_relaxed);
    }
  }
  gg_tl_span.f = NULL;
  if (!tc)
    return;
  gg_fusion_t *next = m                                                ? m->f
                      : tc->side && fu >= tc->f && fu < tc->f + tc->nf ? (gg_fusion_t *)fu
                                                                       : NULL;
  if (next && !atomic_load_explicit(&next->untimed, memory_order_relaxed))
    gg_tl_span.c = tc, gg_tl_span.f = next, gg_tl_span.m = m, gg_tl_span.t0 = now,
    gg_tl_span.gen = tc->tgen, gg_tl_span.first = tc->side || dst == next->first;
}

/* The signature whose kernel a fused record runs: the one the rounds judge it under; NULL
 * when its implementation's kernels are not one signature's (it is not judged). */
static ag_entry_t *judged(const gg_fusion_t *f)
{
  const gg_impl_t *im = gg_used(f);
  for (int p = 1; p < im->n; p++)
    if (im->k[p] != im->k[0])
      return NULL;
  return im->k[0];
}

/* The calls of its judged signature a record of f's kind makes in one execution on one thread:
 * the products it computes with that signature's kernel (a SWIGLU group's gate and up, products
 * of one input), else 1. A round books each record's time as that many calls, on both sides,
 * so that the judge's means, and the signature's figures, are per product (ggml's node's),
 * whichever records of the signature were timed. */
static uint32_t products(const gg_fusion_t *f)
{
  return f->gate ? 2 : f->nprod > 1 ? (uint32_t)f->nprod : 1;
}

/* gg_round_start: on the rebuilt side a kernel with verifications left verifies (takes one).
 * The timed one of each side is timed unless another execution is (one at a time) or a kernel
 * verifies in it (c->timing). The host's execution counts each fused record of a counted kind
 * as nth calls of its signature, ggml's. c's side and tgen change once no reader of its last
 * publication holds a pin, and are set before c is published again. */
int gg_round_start(gg_cache_t *c, int nth)
{
  gg_unpinned(c);
  uint64_t every = gg_test && gg_test->round_every ? gg_test->round_every
                   : c->rounds < AG_CMP_ROUNDS     ? ROUND_EVERY
                                                   : ROUND_EVERY_DECIDED;
  uint64_t k = ++c->execs % every; /* a graph's first executions are all fused */
  c->rounds += k == every - 2;
  c->side = k < every - 2;
  c->timing = k == every - 1 || (k == 1 && c->execs > every);
  for (int i = 0; i < c->nf; i++) {
    gg_fusion_t *f = &c->f[i];
    /* a kernel verifies in an execution that runs it: its implementation's first */
    ag_entry_t *ve = f->node ? gg_used(f)->k[0] : NULL;
    f->verifying = c->side && ve && !(gg_test && gg_test->unverified) &&
                   atomic_load(&ve->verify) > 0 && atomic_fetch_sub(&ve->verify, 1) > 0;
    c->timing &= !f->verifying;
    if (!c->side && f->node && f->kind->counted)
      atomic_fetch_add_explicit(&f->e->calls, (uint64_t)nth, memory_order_relaxed);
  }
  gg_cache_t *none = NULL;
  if (!c->side && c->map && atomic_compare_exchange_strong(&gg_hosted, &none, c))
    c->hosting = 1;
  none = NULL;
  c->tgen = ++timed_gen; /* before the publication: a pinned reader sees it */
  for (int i = 0; c->timing && i < c->nf; i++)
    atomic_store_explicit(&c->f[i].tn, 0, memory_order_relaxed),
        atomic_store_explicit(&c->f[i].tns, 0, memory_order_relaxed);
  if (!c->timing || !c->map || !atomic_compare_exchange_strong(&gg_timed, &none, c))
    c->timing = 0;
  return !c->side;
}

/* Judges of like records.
 *
 * The tiers judge a kernel on every record that runs it, pooled: in llama's decode the 768 x 768
 * kernel serves the attention's Q and output products (single MUL_MATs) and its K and V
 * (products of one input, one custom node, one barrier less than ggml's two nodes). A kernel
 * slower than ggml's node on a single product (bench_mv: the f32 one-column kernel, 3-5 %) then
 * keeps winning on the pool. So each graph also judges, under the same rule (compare.h) and on
 * the same rounds, each kind of its records apart, for a signature that records of another
 * kind run too (alone, a kind's rounds are the tiers' own), and the pool of them all as the
 * tiers do: a kind found slower, or tied (the rule gives a tie to the original), while the pool
 * is not found slower (then the tiers demote the kernel itself), runs ggml's nodes from the
 * graph's next build on, with an event under its records' signature; the kernel keeps serving
 * the other kinds. */

/* The index of c's judge of kind's records of signature je (kind NULL: the pool), -1 when c has
 * none. */
static int judge_find(const gg_cache_t *c, const gg_kind_t *kind, const ag_entry_t *je)
{
  for (int k = 0; k < c->nj; k++)
    if (c->judge[k].kind == kind && c->judge[k].e == je)
      return k;
  return -1;
}

/* judge_find's judge, made with rec as the records' signature when there is none; -1 without
 * memory. */
static int judge_at(gg_cache_t *c, const gg_kind_t *kind, ag_entry_t *je, ag_entry_t *rec)
{
  int k = judge_find(c, kind, je);
  if (k >= 0)
    return k;
  gg_judge_t *grown = realloc(c->judge, (size_t)(c->nj + 1) * sizeof *grown);
  if (!grown)
    return -1;
  c->judge = grown;
  c->judge[c->nj] = (gg_judge_t){.kind = kind, .e = je, .rec = rec};
  return c->nj++;
}

int gg_judged_out(const gg_cache_t *c, const gg_fusion_t *f)
{
  const ag_entry_t *je = f->use < f->nimpl ? judged(f) : NULL;
  int k = je ? judge_find(c, f->kind, je) : -1;
  return k >= 0 && c->judge[k].lost;
}

/* Books record f's timing of this side to its kind's judge and its signature's pool in c. */
static void judge_book(gg_cache_t *c, gg_fusion_t *f, int side)
{
  ag_entry_t *je = judged(f);
  int at[2] = {judge_at(c, f->kind, je, f->e), judge_at(c, NULL, je, f->e)};
  for (int k = 0; k < 2; k++) {
    gg_judge_t *j = at[k] >= 0 ? &c->judge[at[k]] : NULL;
    if (j && side)
      j->vn += f->bn, j->vns += f->bns;
    else if (j)
      ag_cmp_burst(&j->cmp, f->bn, f->bns, j->vn, j->vns);
  }
}

/* After the rebuilt side of a round that closed a round of kind judge j: when j's kind loses
 * and its signature serves another kind in c, and their pool does not lose, demotes the kind
 * in c (with an event). */
static void judge_round(gg_cache_t *c, gg_judge_t *j)
{
  gg_judge_t *pool = NULL;
  int mixed = 0;
  for (int k = 0; k < c->nj; k++)
    if (c->judge[k].e == j->e && !c->judge[k].kind)
      pool = &c->judge[k];
    else if (c->judge[k].e == j->e)
      mixed |= c->judge[k].kind != j->kind;
  double median;
  enum ag_verdict v = ag_cmp_judge(&j->cmp, &median);
  if (!mixed || !pool || (v != AG_CMP_SLOWER && v != AG_CMP_TIE) ||
      atomic_load(&j->e->tier) != AG_TIER_READY || ag_cmp_judge(&pool->cmp, NULL) == AG_CMP_SLOWER)
    return;
  j->lost = 1, c->lost = 1;
  char fig[160];
  ag_tier_event(j->rec, AG_EV_DEMOTED,
                "back on ggml's nodes in this graph, its kernel kept for the others: %s",
                ag_cmp_describe(&j->cmp, median, "its rounds here", fig, sizeof fig));
}

/* gg_round_book: hands c's records' times to the judge, under the signature
 * each one's kernel is: the host's side as one burst of the original's warm calls, the rebuilt
 * side as the variant's timed calls, which closes the round of each signature whose original
 * has been timed since its last one. An execution in which a record took 8 times its side's
 * mean so far (a thread preempted at a barrier, on a loaded machine) is left out whole: its
 * records share signatures, whose rounds must weigh the same records on both sides.
 * gg_cache_mu held. */
void gg_round_book(gg_cache_t *c)
{
  int side = c->side, disturbed = 0;
  for (int i = 0; i < c->nf; i++) {
    gg_fusion_t *f = &c->f[i];
    f->bn = atomic_exchange_explicit(&f->tn, 0, memory_order_relaxed);
    f->bns = atomic_exchange_explicit(&f->tns, 0, memory_order_relaxed);
    if (!f->node || !judged(f) || atomic_load_explicit(&f->untimed, memory_order_relaxed))
      f->bn = 0;
    f->bn *= products(f);
    disturbed |=
        f->bn && f->tk[side] >= 2 && (double)f->bns > 8.0 * f->bn * (f->tsum[side] / f->tk[side]);
  }
  for (int i = 0; i < c->nf && !disturbed; i++) {
    gg_fusion_t *f = &c->f[i];
    ag_entry_t *je = judged(f);
    if (!f->bn)
      continue;
    f->tsum[side] += (double)f->bns / f->bn, f->tk[side]++;
    atomic_fetch_add_explicit(side ? &je->vtimed : &je->timed, f->bn, memory_order_relaxed);
    atomic_fetch_add_explicit(side ? &je->vtimed_ns : &je->timed_ns, f->bns, memory_order_relaxed);
    if (!side)
      ag_tier_burst(je, f->bn, f->bns);
  }
  for (int i = 0; i < c->nf && !disturbed && side; i++) /* every variant timing is in */
    if (c->f[i].bn)
      ag_tier_burst(judged(&c->f[i]), 0, 0);
  for (int i = 0; i < c->nf && !disturbed; i++) /* and c's judges */
    if (c->f[i].bn)
      judge_book(c, &c->f[i], side);
  for (int k = 0; k < c->nj && !disturbed && side; k++) {
    gg_judge_t *j = &c->judge[k];
    j->closed = ag_cmp_burst(&j->cmp, 0, 0, j->vn, j->vns);
  }
  for (int k = 0; k < c->nj && !disturbed && side; k++)
    if (c->judge[k].kind && c->judge[k].closed && !c->judge[k].lost)
      judge_round(c, &c->judge[k]);
}
