/* SPDX-License-Identifier: MIT */
/* The ggml host's private contract between its files (never included outside agent/hosts/):
 *   ggml.c          the interposed entry points, the check of ggml, the graph to compute;
 *   ggml_match.c    finding fusion records in a graph, and the table of their kinds;
 *   ggml_rewrite.c  the record cache, the choice of implementation, the rebuilt graph;
 *   ggml_kernels.c  the custom nodes' work: kernels, their verification, stand-ins;
 *   ggml_rounds.c   the never-slower rounds: which side runs, timing, booking to the judge;
 *   ggml_test.c     the test seam (OPJIT_TEST_FUSION).
 * Compiled against the ggml headers of the version the agent was built for (ggml.c checks
 * the process's). Functions run with the host's state checked (gg_state is GG_PROFILE) and
 * fusion set up; "gg_cache_mu held" says a function needs the record cache's lock. */
#ifndef OPJIT_HOSTS_GGML_HOST_H
#define OPJIT_HOSTS_GGML_HOST_H

#include "ggml_key.h"
#include "ggml_verify.h"
#include "../agent.h"
#include "../compare.h"
#include "../table.h"

#include "ggml-cpu.h"
#include "ggml.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- what the host uses of ggml --------------------------------------------------------- */

typedef void (*gg_forward_fn)(const void *params, struct ggml_tensor *dst);

/* libggml-base's names, version and graph API (ggml.c's check), and the CPU backend's own
 * ADD, RMS_NORM, MUL and SwiGLU (its fusion set-up). */
typedef struct gg_api_s {
  const char *(*version)(void);
  const char *(*op_name)(int), *(*type_name)(int), *(*unary_name)(int), *(*glu_name)(int);
  int (*n_nodes)(struct ggml_cgraph *);
  struct ggml_tensor *(*node)(struct ggml_cgraph *, int);
  struct ggml_context *(*init)(struct ggml_init_params);
  void (*free)(struct ggml_context *);
  struct ggml_cgraph *(*new_graph)(struct ggml_context *, size_t, bool);
  void (*add_node)(struct ggml_cgraph *, struct ggml_tensor *);
  size_t (*graph_overhead)(size_t, bool);
  size_t (*tensor_overhead)(void);
  bool (*contiguous)(const struct ggml_tensor *);
  size_t (*nbytes)(const struct ggml_tensor *);
  struct ggml_tensor *(*custom)(struct ggml_context *, enum ggml_type, int64_t, int64_t, int64_t,
                                int64_t, struct ggml_tensor **, int, ggml_custom_op_t, int, void *);
  gg_forward_fn add, rms_norm, mul;
  void (*swiglu)(int n, float *y, const float *x, const float *g); /* ggml_vec_swiglu_f32 */
  void *(*buffer_type)(void *buffer);                              /* a tensor's buffer's type */
  const char *(*buft_name)(void *buft);
} gg_api_t;
extern gg_api_t gg_api;

/* Mirrors of two structs of ggml's internal headers (src/ggml-cpu/ggml-cpu-impl.h and
 * src/ggml-impl.h of the checked version; neither is installed, and both pull in the CPU
 * backend's internals). Every other ggml type comes from its public headers: ggml.h and
 * ggml-cpu.h (struct ggml_cplan). */
/* struct ggml_compute_params: what a forward function is called with */
typedef struct gg_params_s {
  int ith, nth;
  size_t wsize;
  void *wdata;
  void *threadpool;
  bool use_ref;
} gg_params_t;
/* struct ggml_custom_op_params: a custom node's op_params */
typedef struct gg_custom_params_s {
  ggml_custom_op_t fun;
  int n_tasks;
  void *userdata;
} gg_custom_params_t;

/* The signature of one node's work (sig.h, ggml keys). */
ag_sig_t gg_key_of(const struct ggml_tensor *dst);

/* How ggml multiplies weights w with f32 activations, as jt_gemm_t.w16 says: 0 f32 weights;
 * 1 f16 weights in plain memory, activations rounded to f16 (its own MUL_MAT); 2 f16 weights
 * in its AMX buffer, which keeps their bytes as they are and multiplies them with the f32
 * activations; -1 weights an extra buffer type holds otherwise (repacked, or another type). */
int gg_w16(const struct ggml_tensor *w);

/* ---- fusion records --------------------------------------------------------------------- */

#define GG_PARTS 3   /* kernels one implementation runs at most: products of one input (Q K V) */
#define GG_IMPLS 2   /* implementations of a record before ggml's own nodes */
#define GG_MEMBERS 3 /* host nodes one record stands for, at most */

/* One way to compute a record: the kernels of some signatures, each needed. */
typedef struct gg_impl_s {
  ag_entry_t *k[GG_PARTS]; /* the signatures whose kernels it runs */
  void *v[GG_PARTS];       /* their kernels when the cached graph was built */
  int n;
  ag_entry_t *book; /* the signature forward() books the custom node's calls under */
} gg_impl_t;

struct gg_kind_s;

/* A node group of a graph the agent can run as one custom node. Its implementations, best
 * first — its own kernel, its products' kernels — then ggml's own nodes: each graph build
 * takes the first whose kernels are all published (use), and the custom node runs it. */
typedef struct gg_fusion_s {
  const struct gg_kind_s *kind;
  struct ggml_tensor *first; /* the group's first node in the graph */
  int span;                  /* its nodes (consecutive) */
  /* The host's nodes (never modified); mul is the one whose output the custom node writes:
   * ADD + RMS_NORM + MUL: add, rms, mul (RMS_NORM + MUL: add NULL); MUL_MAT: mul; SWIGLU: gate,
   * up (MUL_MATs), mul (GLU); MUL_MAT + ADD: prod[0] (the MUL_MAT), add and mul (the ADD);
   * products of one input: prod (mul the first); FLASH_ATTN_EXT: mul. */
  struct ggml_tensor *add, *rms, *mul, *gate, *up;
  struct ggml_tensor *prod[GG_PARTS];
  int nprod;
  ag_entry_t *e;            /* the group's signature (its calls and time) */
  gg_impl_t impl[GG_IMPLS]; /* its implementations, best first */
  int nimpl;
  int use;                  /* the one the cached graph runs (nimpl: ggml's nodes) */
  struct ggml_tensor *node; /* the custom node standing for the group, when fused */
  int verifying;            /* this execution checks the kernel against ggml */
  int asked;                /* its own kernel's compile was asked for */
  _Atomic int untimed;      /* its ggml nodes cannot be timed as one (rounds) */
  _Atomic uint64_t tns;     /* the timed execution's spans of it, on all threads */
  _Atomic uint32_t tn;      /* ... and its calls among them (one per thread) */
  uint32_t bn;              /* gg_round_book's: this execution's calls and time */
  uint64_t bns;
  double tsum[2]; /* per-call means booked so far, each side's, summed */
  uint32_t tk[2]; /* ... and their count */
  int64_t n, rows;
  float eps;
} gg_fusion_t;

/* A kind of record: a row of gg_kinds, in the order the matcher tries them at each node. */
typedef struct gg_kind_s {
  /* The record at node i of g's n nodes under every guard, in f; 0 when there is none. */
  int (*find)(struct ggml_cgraph *g, int n, int i, gg_fusion_t *f);
  /* Fills f->e and f's implementations from the signature table; 0 when it is full. */
  int (*sign)(gg_fusion_t *f);
  /* The host's nodes f stands for, in m; returns how many. */
  int (*members)(const gg_fusion_t *f, struct ggml_tensor *m[GG_MEMBERS]);
  /* The custom node's sources (what its kernels read, for ggml's dependency order), in args;
   * returns how many. */
  int (*sources)(const gg_fusion_t *f, struct ggml_tensor *args[1 + GG_PARTS]);
  ggml_custom_op_t compute; /* the custom node's work on one thread */
  int counted;  /* it has a kernel of its own under a signature no ggml node has: the host
                   counts the record's calls, which make that kernel hot */
  int products; /* it runs its products' kernels (it has none of its own) */
  int moves;    /* its products after the first move to the first one's place */
} gg_kind_t;

extern const gg_kind_t gg_kinds[];
extern const int gg_nkinds;

/* The residual ADD's other source, of a MUL_MAT + ADD record. */
static inline const struct ggml_tensor *gg_residual_of(const gg_fusion_t *f)
{
  return f->add->src[0] == f->prod[0] ? f->add->src[1] : f->add->src[0];
}

/* The implementation f's cached graph runs; f has a custom node. */
static inline const gg_impl_t *gg_used(const gg_fusion_t *f) { return &f->impl[f->use]; }

/* ---- the custom nodes' work (ggml_kernels.c) -------------------------------------------- */

/* Each on thread ith of nth, with its record as userdata: its share of the rows. A kernel is
 * read from its signature inside the call, so one the tiers drop is never run after their
 * grace period: the next implementation, or a stand-in (ggml's ops, plain C) runs instead. */
void gg_node_norm(struct ggml_tensor *dst, int ith, int nth, void *ud);
void gg_node_mul_mat(struct ggml_tensor *dst, int ith, int nth, void *ud);
void gg_node_mm_add(struct ggml_tensor *dst, int ith, int nth, void *ud);
void gg_node_swiglu(struct ggml_tensor *dst, int ith, int nth, void *ud);
void gg_node_shared(struct ggml_tensor *dst, int ith, int nth, void *ud);
void gg_node_fa(struct ggml_tensor *dst, int ith, int nth, void *ud);

/* ---- the record cache and rebuilt graphs (ggml_rewrite.c) ------------------------------- */

/* A member node of a timed graph's record: where the host's execution times it. */
typedef struct gg_member_s {
  const struct ggml_tensor *node;
  gg_fusion_t *f;
  const struct ggml_tensor *next; /* the node the thread computes after it, the group's
                                     other members aside (NULL: none; the record is untimed) */
} gg_member_t;

/* The rounds of a graph's records of one kind whose kernel is one signature's, judged apart
 * from the signature's other records, or of all of them (ggml_rounds.c). */
typedef struct gg_judge_s {
  const struct gg_kind_s *kind; /* NULL: every kind's records of the signature, pooled */
  ag_entry_t *e;   /* the signature whose kernel they run */
  ag_entry_t *rec; /* their own signature (the first one's): its events */
  ag_cmp_t cmp;    /* their rounds, under the tiers' rule (compare.h) */
  uint64_t vn, vns; /* their variant side's timed calls and nanoseconds so far */
  int closed;       /* the last round booked closed one of cmp's */
  int lost;         /* judged slower (or tied): they run ggml's nodes */
} gg_judge_t;

/* A graph the CPU backend computed: its records and, when any is fused, the graph that runs in
 * its place. */
typedef struct gg_cache_s {
  const struct ggml_cgraph *orig;
  int n_nodes;
  uint64_t hash;             /* of the host's node pointers and ops */
  struct ggml_context *ctx;  /* holds the rebuilt graph and the custom nodes */
  struct ggml_cgraph *graph; /* NULL: no group is fused, the host's graph runs */
  int busy;                  /* computations running c->graph (its memory and records stay) */
  gg_fusion_t *f;
  int nf;
  uint64_t execs;    /* executions while it has a rebuilt graph, rounds included */
  uint32_t rounds;   /* rounds started */
  gg_member_t *map;  /* the fused records' member nodes, by node (open addressing) */
  unsigned map_mask; /* its slots - 1 */
  int side;          /* the running execution: 0 the host's graph, 1 the rebuilt */
  int timing;        /* the running execution is timed */
  int hosting;       /* the running execution is the host's side of a round (gg_hosted) */
  uint32_t tgen;     /* the timed execution's number, while it is gg_timed (its threads' spans) */
  gg_judge_t *judge; /* the judges of its records' kinds */
  int nj;
  int lost; /* a judge lost since the graph was built: it is built again */
} gg_cache_t;

extern pthread_mutex_t gg_cache_mu;

/* The cache entry of g, found or made (its records found); NULL when every entry is busy.
 * gg_cache_mu held. */
gg_cache_t *gg_cache_of(struct ggml_cgraph *g);
/* 1 when a record's kernels are no longer those c's graph was built with. */
int gg_stale(const gg_fusion_t *f);
/* Rebuilds c's graph with the records that have an implementation. Returns 0, or -1 (the
 * host's graph runs). gg_cache_mu held. */
int gg_rebuild(gg_cache_t *c, struct ggml_cgraph *g);
/* The record of a custom node if it is one of the agent's, else NULL (out of line). */
const gg_fusion_t *gg_custom_record(const struct ggml_tensor *dst);
/* The record of one of the agent's custom nodes, or NULL: inline, as every node asks. */
static inline const gg_fusion_t *gg_our_custom(const struct ggml_tensor *dst)
{
  return dst->op == GGML_OP_CUSTOM ? gg_custom_record(dst) : NULL;
}
/* Node t's member of c's records, or NULL. */
gg_member_t *gg_member_at(const gg_cache_t *c, const struct ggml_tensor *t);

/* Pins: the entries gg_timed and gg_hosted publish are read, without the lock, by the threads
 * of every graph computation, the owner's and any other's (two llama contexts computing at
 * once): a thread reads an entry only pinned, and the lock's holders change or free what such a
 * reader uses (the member map, the records, side and tgen) only once no pin is held:
 *
 *   reader (any thread)                      owner (gg_cache_mu held)
 *   c = *pub; pins[c]++;                      publish c ... clear *pub (fused_done)
 *   *pub == c ? read c : (pins[c]--, NULL)    ... gg_unpinned(c): waits for pins[c] == 0
 *   pins[c]--                                 then rebuilds, reuses or restarts c
 *
 * A reader that pinned after the clear sees *pub != c and reads nothing; one that pinned before
 * holds the owner off until its unpin (a pin lasts a member lookup, or a span's booking). The
 * pins live beside the cache, not in its entries, which are wiped whole. */
gg_cache_t *gg_pin_slow(gg_cache_t *_Atomic *pub, gg_cache_t *c);
void gg_unpin(gg_cache_t *c);
/* Waits until no thread holds a pin on c (it is published no more). gg_cache_mu held. */
void gg_unpinned(const gg_cache_t *c);
/* The entry *pub publishes, pinned (gg_unpin it), or NULL: inline, as every node asks. */
static inline gg_cache_t *gg_pin(gg_cache_t *_Atomic *pub)
{
  gg_cache_t *c = atomic_load_explicit(pub, memory_order_relaxed);
  return ag_unlikely(c != NULL) ? gg_pin_slow(pub, c) : NULL;
}

/* ---- the rounds (ggml_rounds.c) --------------------------------------------------------- */

extern gg_cache_t *_Atomic gg_timed; /* the cache entry whose execution is timed, or NULL */
/* The cache entry computing the host's graph in a round (timed or not), or NULL: its records'
 * nodes are timed by the rounds alone, as spans (forward() leaves them untimed), so that the
 * original's figures of a judged signature are the rounds' spans, as the variant's are. */
extern gg_cache_t *_Atomic gg_hosted;

/* Starts this execution of c (which has a rebuilt graph) as its place in the rounds asks:
 * returns 1 when it computes the host's graph. gg_cache_mu held. */
int gg_round_start(gg_cache_t *c, int nth);
/* After a timed execution of c: hands its records' times to the judge. gg_cache_mu held. */
void gg_round_book(gg_cache_t *c);
/* 1 when f's kind lost its judge in c under the signature f's chosen implementation runs (f->use;
 * a rebuild that chooses another is judged under that one's): f runs ggml's nodes. */
int gg_judged_out(const gg_cache_t *c, const gg_fusion_t *f);
/* At the start of node dst (our custom node fu, or NULL) on this thread, while an execution
 * (tc, or NULL) is timed or this thread's span is open: ends and starts spans. */
void gg_span(gg_cache_t *tc, const struct ggml_tensor *dst, const gg_fusion_t *fu);
/* This thread's record in progress in a timed execution: its member (host side) or custom
 * node (rebuilt side), start, execution (ggml_rounds.c). */
typedef struct gg_span_s {
  const gg_cache_t *c; /* the timed entry (compared, never read: pins are for the current one) */
  gg_fusion_t *f;
  const gg_member_t *m; /* NULL on the rebuilt side */
  uint64_t t0;
  uint32_t gen;
  int first; /* the span starts a call of the record (its first node) */
} gg_span_t;
extern AG_TLS gg_span_t gg_tl_span;
/* 1 when this thread has a span open: inline, as every node asks. */
static inline int gg_span_open(void) { return gg_tl_span.f != NULL; }

/* ---- the test seam (ggml_test.c) -------------------------------------------------------- */

/* Behaviour a test asks for with OPJIT_TEST_FUSION; NULL in production: no branch of the host
 * tests a mode, the host calls these hooks when the seam is set. */
typedef struct gg_test_s {
  int unverified;       /* kernels are not verified */
  uint64_t round_every; /* executions from a round to the next (0: the host's periods) */
  /* After a kernel of f wrote y[j * ld + i], j < cols, i0 <= i < i1. */
  void (*wrote)(const gg_fusion_t *f, float *y, int64_t ld, int64_t cols, int64_t i0, int64_t i1);
  /* After ggml's node of fused record f computed on this thread, on the host's side of a
   * round. */
  void (*hosted)(const gg_fusion_t *f);
  int slots;            /* the record cache's entries (0: all of them) */
  void (*pinned)(void); /* after a thread pinned a published entry (NULL: nothing) */
} gg_test_t;
extern const gg_test_t *gg_test;

/* The seam OPJIT_TEST_FUSION's value t names (poison, wrong or slow), or NULL. */
const gg_test_t *gg_test_of(const char *t);

/* A kernel of f wrote y[j * ld + i], j < cols, i0 <= i < i1: the seam's turn. */
static inline void gg_wrote(const gg_fusion_t *f, float *y, int64_t ld, int64_t cols, int64_t i0,
                            int64_t i1)
{
  if (ag_unlikely(gg_test != NULL))
    gg_test->wrote(f, y, ld, cols, i0, i1);
}

#endif
