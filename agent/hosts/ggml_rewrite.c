/* SPDX-License-Identifier: MIT */
/* The ggml host's record cache and rebuilt graphs. Each graph the CPU backend computes has an
 * entry (by its node pointers and ops): the records gg_kinds finds in it and, once any record
 * has an implementation whose kernels are all published, a rebuilt graph — the host's nodes,
 * each such record's replaced by one custom node (ggml_custom_4d) writing the record's output
 * — computed in place of the host's graph, which is never modified. A graph build chooses each
 * record's implementation, the first of its list whose kernels are all there; a kernel
 * published or dropped after it makes the record stale, and the next execution rebuilds. */
#include "ggml_host.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define GCACHE_MAX 32
static gg_cache_t gcache[GCACHE_MAX];
/* Each entry's readers (ggml_host.h, pins), counted on PIN_STRIPES lines: a thread counts on
 * its own stripe, so the threads of a computation, which pin at each node at about the same
 * moment, do not pass one cache line between them (a host's 8 or 16 threads would); the owner
 * reads them all. */
#define PIN_STRIPES 8
static struct {
  _Alignas(64) _Atomic int n;
} gcache_pins[GCACHE_MAX][PIN_STRIPES];
static _Atomic unsigned pin_stripes_given;
static AG_TLS int tl_stripe = -1;
static int gcache_next; /* the slot a new graph takes (round robin) */
pthread_mutex_t gg_cache_mu = PTHREAD_MUTEX_INITIALIZER;

/* This thread's pin count of c (the thread's stripe, given round robin on its first pin). */
static _Atomic int *pins_of(const gg_cache_t *c)
{
  if (ag_unlikely(tl_stripe < 0))
    tl_stripe =
        (int)(atomic_fetch_add_explicit(&pin_stripes_given, 1, memory_order_relaxed) % PIN_STRIPES);
  return &gcache_pins[c - gcache][tl_stripe].n;
}

/* Sequentially consistent, as the owner's clear of *pub and its read of the pins: a reader
 * either sees the clear or is seen by gg_unpinned. */
gg_cache_t *gg_pin_slow(gg_cache_t *_Atomic *pub, gg_cache_t *c)
{
  _Atomic int *pins = pins_of(c);
  atomic_fetch_add(pins, 1);
  if (atomic_load(pub) == c) {
    if (ag_unlikely(gg_test != NULL) && gg_test->pinned)
      gg_test->pinned();
    return c;
  }
  atomic_fetch_sub(pins, 1);
  return NULL;
}

void gg_unpin(gg_cache_t *c)
{
  if (c)
    atomic_fetch_sub_explicit(pins_of(c), 1, memory_order_release);
}

void gg_unpinned(const gg_cache_t *c)
{
  for (int k = 0; k < PIN_STRIPES; k++)
    while (atomic_load(&gcache_pins[c - gcache][k].n) != 0)
      sched_yield(); /* a reader between its pin and its unpin: a lookup, unless preempted */
}

const gg_fusion_t *gg_custom_record(const struct ggml_tensor *dst)
{
  gg_custom_params_t p;
  memcpy(&p, dst->op_params, sizeof p);
  for (int k = 0; k < gg_nkinds; k++)
    if (p.fun == gg_kinds[k].compute)
      return p.userdata;
  return NULL;
}

static uint64_t graph_hash(struct ggml_cgraph *g, int n)
{
  uint64_t h = 1469598103934665603ull;
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
  for (int i = 0; i < n; i++) {
    const struct ggml_tensor *t = gg_api.node(g, i);
    MIX((uintptr_t)t), MIX(t->op), MIX(t->type), MIX(t->flags), MIX((uintptr_t)t->data);
    MIX((uint32_t)t->op_params[0]), MIX((uint32_t)t->op_params[1]);
    for (int d = 0; d < GGML_MAX_DIMS; d++)
      MIX(t->ne[d]), MIX(t->nb[d]);
    for (int k = 0; k < GGML_MAX_SRC; k++)
      if (t->src[k])
        MIX((uintptr_t)t->src[k]), MIX((uintptr_t)t->src[k]->data);
  }
#undef MIX
  return h;
}

static void gcache_clear(gg_cache_t *c)
{
  gg_unpinned(c);
  if (c->ctx)
    gg_api.free(c->ctx);
  free(c->f);
  free(c->map);
  free(c->judge);
  memset(c, 0, sizeof *c);
}

/* t's slot in c's member map (open addressing), or the empty slot where t would go; the map
 * exists. */
static gg_member_t *member_slot(const gg_cache_t *c, const struct ggml_tensor *t)
{
  unsigned h = (unsigned)(((uintptr_t)t >> 4) * 0x9E3779B1u) & c->map_mask;
  while (c->map[h].node && c->map[h].node != t)
    h = (h + 1) & c->map_mask;
  return &c->map[h];
}

gg_member_t *gg_member_at(const gg_cache_t *c, const struct ggml_tensor *t)
{
  gg_member_t *s = c->map ? member_slot(c, t) : NULL;
  return s && s->node ? s : NULL;
}

/* 1 when ggml's CPU backend calls a forward function for node t (not an empty op, selected). */
static int computed(const struct ggml_tensor *t)
{
  return (t->flags & GGML_TENSOR_FLAG_COMPUTE) && t->op != GGML_OP_NONE &&
         t->op != GGML_OP_RESHAPE && t->op != GGML_OP_VIEW && t->op != GGML_OP_PERMUTE &&
         t->op != GGML_OP_TRANSPOSE;
}

/* Maps the member nodes of c's fused records, for the host's side of the rounds, each with the
 * node its timing must end at; a record with a member that has none (the graph ends) is not
 * timed. Without memory nothing is mapped (and nothing timed). gg_cache_mu held. */
static void map_members(gg_cache_t *c, struct ggml_cgraph *g)
{
  free(c->map);
  c->map = NULL;
  struct ggml_tensor *m[GG_MEMBERS];
  unsigned count = 0, size = 16;
  for (int i = 0; i < c->nf; i++)
    count += c->f[i].node ? (unsigned)c->f[i].kind->members(&c->f[i], m) : 0;
  while (size < 2 * count)
    size *= 2;
  if (!count || !(c->map = calloc(size, sizeof *c->map)))
    return;
  c->map_mask = size - 1;
  for (int i = 0; i < c->nf; i++)
    for (int k = 0, nm = c->f[i].node ? c->f[i].kind->members(&c->f[i], m) : 0; k < nm; k++) {
      gg_member_t *slot = member_slot(c, m[k]);
      if (!slot->node) /* a node in two records: the first one's, as lookups always found */
        *slot = (gg_member_t){m[k], &c->f[i], NULL};
    }
  for (int i = 0; i < c->n_nodes; i++) {
    gg_member_t *mb = gg_member_at(c, gg_api.node(g, i));
    for (int j = i + 1; mb && j < c->n_nodes && !mb->next; j++) {
      struct ggml_tensor *t = gg_api.node(g, j);
      const gg_member_t *o = gg_member_at(c, t);
      if (computed(t) && !(o && o->f == mb->f))
        mb->next = t;
    }
    if (mb && !mb->next)
      atomic_store(&mb->f->untimed, 1);
  }
}

/* 1 when t is a later product of one of c's records whose products move (fused or not, when
 * fused is 0; fused, when 1). */
static int moving(const gg_cache_t *c, const struct ggml_tensor *t, int fused)
{
  for (int i = 0; i < c->nf; i++) {
    const gg_fusion_t *f = &c->f[i];
    for (int p = 1; f->kind->moves && (!fused || f->use < f->nimpl) && p < f->nprod; p++)
      if (f->prod[p] == t)
        return 1;
  }
  return 0;
}

/* Notes the kernels of each of f's implementations and chooses the first that has them all,
 * unless f's kind lost its judge in c; returns 1 when there is one (f->use), 0 when ggml's nodes
 * compute the record. */
static int choose(const gg_cache_t *c, gg_fusion_t *f)
{
  f->use = f->nimpl;
  for (int l = f->nimpl - 1; l >= 0; l--) {
    gg_impl_t *im = &f->impl[l];
    int all = 1;
    for (int p = 0; p < im->n; p++)
      all &= (im->v[p] = atomic_load_explicit(&im->k[p]->variant, memory_order_acquire)) != NULL;
    if (all)
      f->use = l;
  }
  if (gg_judged_out(c, f))
    f->use = f->nimpl;
  return f->use < f->nimpl;
}

int gg_stale(const gg_fusion_t *f)
{
  for (int l = 0; l < f->nimpl; l++)
    for (int p = 0; p < f->impl[l].n; p++)
      if (atomic_load_explicit(&f->impl[l].k[p]->variant, memory_order_acquire) != f->impl[l].v[p])
        return 1;
  return 0;
}

gg_cache_t *gg_cache_of(struct ggml_cgraph *g)
{
  int n = gg_api.n_nodes(g);
  uint64_t h = graph_hash(g, n);
  for (int i = 0; i < GCACHE_MAX; i++)
    if (gcache[i].orig == g && gcache[i].n_nodes == n && gcache[i].hash == h)
      return &gcache[i];
  int slots = gg_test && gg_test->slots ? gg_test->slots : GCACHE_MAX;
  gg_cache_t *c = NULL; /* the next slot no computation is using */
  for (int k = 0; k < slots && !c; k++) {
    gg_cache_t *s = &gcache[(gcache_next + k) % slots];
    c = s->busy ? NULL : s;
  }
  if (!c)
    return NULL;
  gcache_next = (int)(c - gcache + 1) % slots;
  gcache_clear(c);
  *c = (gg_cache_t){.orig = g, .n_nodes = n, .hash = h};
  for (int i = 0; i < n; i++) {
    gg_fusion_t f;
    if (moving(c, gg_api.node(g, i), 0)) /* a later product of a record found before */
      continue;
    int k = 0;
    while (k < gg_nkinds && !gg_kinds[k].find(g, n, i, &f))
      k++;
    if (k == gg_nkinds)
      continue;
    f.kind = &gg_kinds[k];
    if (!f.kind->sign(&f))
      break; /* the table is full */
    gg_fusion_t *grown = realloc(c->f, (size_t)(c->nf + 1) * sizeof *grown);
    if (!grown)
      break;
    c->f = grown;
    c->f[c->nf++] = f;
    i += f.span - 1;
  }
  return c;
}

int gg_rebuild(gg_cache_t *c, struct ggml_cgraph *g)
{
  gg_unpinned(c);
  if (c->ctx)
    gg_api.free(c->ctx), c->ctx = NULL, c->graph = NULL;
  int fused = 0;
  c->lost = 0;
  for (int i = 0; i < c->nf; i++) {
    c->f[i].node = NULL;
    fused += choose(c, &c->f[i]);
  }
  free(c->map);
  c->map = NULL;
  if (!fused)
    return 0;
  size_t size = (size_t)c->n_nodes;
  struct ggml_init_params ip = {gg_api.graph_overhead(size, false) +
                                    (size_t)fused * gg_api.tensor_overhead() + 4096,
                                NULL, true};
  if (!(c->ctx = gg_api.init(ip)) || !(c->graph = gg_api.new_graph(c->ctx, size, false))) {
    if (c->ctx)
      gg_api.free(c->ctx);
    c->ctx = NULL, c->graph = NULL;
    return -1;
  }
  int next = 0;
  for (int i = 0; i < c->n_nodes; i++) {
    struct ggml_tensor *t = gg_api.node(g, i);
    gg_fusion_t *f = next < c->nf && c->f[next].first == t ? &c->f[next] : NULL;
    if (!f && moving(c, t, 1)) /* computed earlier, with the first product of its input */
      continue;
    if (!f) {
      gg_api.add_node(c->graph, t);
      continue;
    }
    next++;
    if (f->use == f->nimpl) {
      gg_api.add_node(c->graph, t);
      continue;
    }
    struct ggml_tensor *args[1 + GG_PARTS];
    int nargs = f->kind->sources(f, args);
    struct ggml_tensor *node =
        gg_api.custom(c->ctx, GGML_TYPE_F32, f->mul->ne[0], f->mul->ne[1], f->mul->ne[2],
                      f->mul->ne[3], args, nargs, f->kind->compute, -1 /* GGML_N_TASKS_MAX */, f);
    node->flags |= GGML_TENSOR_FLAG_COMPUTE;
    node->buffer = f->mul->buffer;
    node->data = f->mul->data;
    f->node = node;
    gg_api.add_node(c->graph, node);
    i += f->span - 1; /* the group's other nodes are in the custom node */
  }
  map_members(c, g);
  return 0;
}
