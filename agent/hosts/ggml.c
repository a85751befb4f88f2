/* SPDX-License-Identifier: MIT */
/* The ggml host: profiles llama.cpp's graphs op by op.
 *
 * ggml's CPU backend runs every graph node on every worker thread through one
 * ggml_compute_forward_<op>(params, dst), called through libggml-cpu's PLT; the agent defines
 * those symbols, so each node's share of work on each thread passes through here. The agent is
 * never linked against ggml: the real function is found from the caller (dladdr of the return
 * address, that library opened RTLD_NOLOAD, dlsym) — the CPU backend is dlopen'ed RTLD_LOCAL,
 * where dlsym(RTLD_NEXT) sees nothing (DESIGN.md §3.2).
 *
 * Each call is one signature (sig.h: the op, its types and shape) counted and timed like a
 * BLAS call, and marked as the thread's current operator, so the sampler attributes the
 * thread's samples to it. Only a ggml the agent was built for is touched: on the first call the
 * host checks ggml_version() and the op-name table against the headers it was compiled with
 * (and OPJIT_HOSTS); on any mismatch every call passes through untouched, after one warning.
 * Only the forward functions whose signature is (params, dst) in those headers are defined.
 *
 * Fusion (jit mode): the agent also defines ggml_graph_compute, through which the CPU backend
 * runs each split of a graph. It finds node groups it can run as one LLVM-compiled kernel —
 * ADD + RMS_NORM + MUL, the residual add and the norm that follow each attention and FFN
 * block — under guards (types, contiguity, shapes, the norm's output used by the MUL alone and
 * not a graph output, no partial overlap between outputs and inputs). A group is a signature
 * (FUSED ADD+RMS_NORM+MUL and its row length) that gets hot after OPJIT_HOT_CALLS executions
 * (counted per thread) and goes through the tiers like a BLAS signature: compiled in the background,
 * published, stored and warm-loaded. A graph with published fusions is rebuilt once — the
 * host's nodes, each group replaced by one custom node (ggml_custom_4d) writing the ADD's and
 * the MUL's outputs, split across ggml's threads by rows — cached per graph, and computed in
 * place of the host's graph, which is never modified. The first OPJIT_VERIFY executions of a
 * fusion also run ggml's own ADD, RMS_NORM and MUL on scratch copies and compare (ggml's
 * fused RMS_NORM+MUL, which the host would run, has the same arithmetic); a mismatch
 * blacklists it and the host keeps ggml's results. The kernel is read from its signature inside
 * each node's call: one the tiers drop is replaced by ggml's own ops there and then.
 * MUL_MAT nodes (2-D, f32/f16 weights not repacked, f32 activations, N >= JT_MM_MIN_N or
 * decode's N = 1, M a multiple of JT_MM_MR) are records of the same cache: their signature is the node's own, the
 * tiers compile the JIT's cache-blocked kernel for it (self-tested before publication), and the
 * rebuilt graph computes the node as a custom node split by rows in whole micro-kernel blocks.
 * A thread without the kernel (dropped meanwhile) runs its rows in plain C: ggml's own MUL_MAT
 * synchronises every thread and cannot stand in. The FFN's gate and up MUL_MATs with the
 * SWIGLU after them are one record (signature FUSED MUL_MAT+MUL_MAT+SWIGLU) whose kernel is
 * their MUL_MAT signature's: each thread computes its rows of both, then their SwiGLU.
 * Products of one input (Q, K, V) are one record (FUSED SHARED-INPUT MUL_MATS) computed at the
 * first one's place when the later ones share no memory with the nodes they move past. A
 * MUL_MAT whose output only the next node, a residual ADD, reads is one record (FUSED
 * MUL_MAT+ADD) with a kernel of its own (the product's, whose last k block adds the residual
 * as it stores); it takes precedence over the norm group that would have taken the ADD, whose
 * RMS_NORM + MUL then run as one record (FUSED RMS_NORM+MUL), as does any RMS_NORM + MUL
 * without an ADD before it (a rebuilt graph carries no use counts, so ggml's own RMS_NORM+MUL
 * fusion would not fire in it). Never slower: a graph that runs fused records alternates with
 * the host's own in rounds, both warm, each record timed on each side (forward), and the
 * tiers' judge (compare.h) demotes a kernel that loses: its records run ggml's nodes again. */
#define _GNU_SOURCE
#include "../agent.h"
#include "../compare.h"
#include "../log.h"
#include "../opt.h"
#include "../tier.h"
#include "jit/jit.h"

#include "ggml-cpu.h"
#include "ggml.h"

_Static_assert((int)GGML_TYPE_F32 == (int)AG_GGML_TYPE_F32 &&
                   (int)GGML_TYPE_F16 == (int)AG_GGML_TYPE_F16 &&
                   (int)GGML_OP_MUL_MAT == (int)AG_GGML_OP_MUL_MAT,
               "sig.h's ggml numbers");

#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The forward functions of ggml-cpu's ops.h with the (params, dst) signature. */
/* clang-format off */
#define GG_OPS(X)                                                                            \
  X(abs) X(acc) X(add) X(add1) X(add_id) X(add_non_quantized) X(add_rel_pos) X(arange) \
  X(argmax) X(argsort) X(ceil) X(clamp) X(col2im_1d) X(concat) X(cont) X(conv_2d) \
  X(conv_2d_dw) X(conv_3d) X(conv_transpose_1d) X(conv_transpose_2d) X(cos) X(count_equal) \
  X(cpy) X(cross_entropy_loss) X(cross_entropy_loss_back) X(cumsum) X(custom) X(diag) \
  X(diag_mask_inf) X(diag_mask_zero) X(div) X(dsv4_hc_comb) X(dsv4_hc_post) X(dsv4_hc_pre) \
  X(dup) X(elu) X(exp) X(expm1) X(fill) X(flash_attn_ext) X(floor) X(fwht) \
  X(gated_delta_net) X(get_rel_pos) X(get_rows) X(get_rows_back) X(gla) X(glu) \
  X(group_norm) X(hardsigmoid) X(hardswish) X(im2col) X(im2col_3d) X(im2col_back_f32) \
  X(l2_norm) X(leaky_relu) X(lightning_indexer) X(log) X(map_custom1) X(map_custom2) \
  X(map_custom3) X(mean) X(mul) X(mul_mat) X(mul_mat_iqp) X(neg) X(norm) X(opt_step_adamw) \
  X(opt_step_sgd) X(out_prod) X(pad) X(pad_reflect_1d) X(pool_1d) X(pool_2d) \
  X(pool_2d_back) X(relu) X(repeat) X(repeat_back) X(rms_norm) X(rms_norm_back) X(roll) \
  X(rope) X(rope_back) X(round) X(rwkv_wkv6) X(rwkv_wkv7) X(scale) X(set) X(set_rows) \
  X(sgn) X(sigmoid) X(silu_back) X(sin) X(soft_max) X(soft_max_ext_back) X(softplus) \
  X(solve_tri) X(sqr) X(sqrt) X(ssm_conv) X(ssm_scan) X(step) X(sub) X(sum) X(sum_rows) \
  X(tanh) X(timestep_embedding) X(top_k) X(tri) X(trunc) X(unary) X(upscale) X(win_part) \
  X(win_unpart) X(xielu)
/* clang-format on */

enum { GG_UNCHECKED = 0, GG_PROFILE, GG_PASS };
static _Atomic int gg_state;
static pthread_once_t gg_once = PTHREAD_ONCE_INIT;

static const char *op_names[GGML_OP_COUNT], *type_names[GGML_TYPE_COUNT];
static const char *unary_names[GGML_UNARY_OP_COUNT], *glu_names[GGML_GLU_OP_COUNT];

/* Ops the checked table must name as the headers do (a renumbered table moves them). */
static const struct {
  int op;
  const char *name;
} anchors[] = {{GGML_OP_ADD, "ADD"},           {GGML_OP_MUL, "MUL"},
               {GGML_OP_RMS_NORM, "RMS_NORM"}, {GGML_OP_MUL_MAT, "MUL_MAT"},
               {GGML_OP_GET_ROWS, "GET_ROWS"}, {GGML_OP_SOFT_MAX, "SOFT_MAX"},
               {GGML_OP_ROPE, "ROPE"},         {GGML_OP_GLU, "GLU"},
               {GGML_OP_UNARY, "UNARY"},       {GGML_OP_COUNT - 1, NULL}};

typedef void (*forward_fn)(const void *params, struct ggml_tensor *dst);

/* What the host uses of ggml: libggml-base's names, version and graph API (check), and the
 * CPU backend's own ADD, RMS_NORM and MUL (fusion_setup). */
static struct {
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
  forward_fn add, rms_norm, mul;
  void (*swiglu)(int n, float *y, const float *x, const float *g); /* ggml_vec_swiglu_f32 */
  int ok;
} api;

/* Decides, once, whether this process's ggml is one to profile. */
static void check(void)
{
  ag_init();
  int on = (ag_opts.num[AG_OPT_HOSTS] & AG_HOST_GGML) && atomic_load(&ag_state) != AG_PASS;
  if (!on) {
    atomic_store(&gg_state, GG_PASS);
    return;
  }
  void *base = dlopen("libggml-base.so", RTLD_NOLOAD | RTLD_LAZY);
#define SYM(f, name) *(void **)&api.f = base ? dlsym(base, name) : NULL
  SYM(version, "ggml_version");
  SYM(op_name, "ggml_op_name");
  SYM(type_name, "ggml_type_name");
  SYM(unary_name, "ggml_unary_op_name");
  SYM(glu_name, "ggml_glu_op_name");
  SYM(n_nodes, "ggml_graph_n_nodes");
  SYM(node, "ggml_graph_node");
  SYM(init, "ggml_init");
  SYM(free, "ggml_free");
  SYM(new_graph, "ggml_new_graph_custom");
  SYM(add_node, "ggml_graph_add_node");
  SYM(graph_overhead, "ggml_graph_overhead_custom");
  SYM(tensor_overhead, "ggml_tensor_overhead");
  SYM(contiguous, "ggml_is_contiguous");
  SYM(custom, "ggml_custom_4d");
  SYM(nbytes, "ggml_nbytes");
#undef SYM
  if (base)
    dlclose(base); /* libggml-base stays: the backend needs it */
  /* A test may pretend the agent was built for another ggml. */
  const char *want =
      getenv("OPJIT_TEST_GGML_VERSION") ? getenv("OPJIT_TEST_GGML_VERSION") : OPJIT_GGML_VERSION;
  const char *have = api.version ? api.version() : NULL;
  int ok = have && api.op_name && api.type_name && api.unary_name && api.glu_name &&
           strcmp(have, want) == 0;
  for (size_t i = 0; ok && i < sizeof anchors / sizeof *anchors; i++) {
    const char *n = api.op_name(anchors[i].op);
    ok = n && (!anchors[i].name || strcmp(n, anchors[i].name) == 0);
  }
  if (!ok) {
    ag_log(AG_LOG_WARN,
           "ggml %s is not the ggml this agent was built for (%s, its op table): "
           "its graphs run untouched and unprofiled",
           have ? have : "(unknown)", want);
    atomic_store(&gg_state, GG_PASS);
    return;
  }
  for (int i = 0; i < GGML_OP_COUNT; i++)
    op_names[i] = api.op_name(i);
  for (int i = 0; i < GGML_TYPE_COUNT; i++)
    type_names[i] = api.type_name(i);
  for (int i = 0; i < GGML_UNARY_OP_COUNT; i++)
    unary_names[i] = api.unary_name(i);
  for (int i = 0; i < GGML_GLU_OP_COUNT; i++)
    glu_names[i] = api.glu_name(i);
  ag_sig_set_ggml_names(&(ag_ggml_names_t){
      op_names, type_names, unary_names, glu_names, GGML_OP_COUNT, GGML_TYPE_COUNT,
      GGML_UNARY_OP_COUNT, GGML_GLU_OP_COUNT, GGML_OP_UNARY, GGML_OP_GLU, GGML_OP_MUL_MAT});
  ag_log(AG_LOG_INFO, "ggml %s: profiling its graphs by op", have);
  atomic_store(&gg_state, GG_PROFILE);
}

static void *_Atomic cpu_lib; /* the CPU backend's handle, once a caller has shown it */

/* Finds a loaded CPU backend (libggml-cpu*.so) when no caller has shown one yet. */
static int find_cpu_lib(struct dl_phdr_info *info, size_t size, void *arg)
{
  (void)size;
  const char *base = strrchr(info->dlpi_name, '/');
  if (strncmp(base ? base + 1 : info->dlpi_name, "libggml-cpu", 11) != 0)
    return 0;
  *(void **)arg = dlopen(info->dlpi_name, RTLD_NOLOAD | RTLD_LAZY);
  return *(void **)arg != NULL;
}

/* The definition the caller (ret) would have reached without the agent: in the caller's own
 * object, which is the CPU backend — unless the call was a tail call from inside another
 * forward function (ggml_compute_forward_add jumps to ..._add_non_quantized), whose return
 * address is then the agent's: the backend found before stands in. */
static forward_fn real_of(void *_Atomic *cache, const char *name, const void *ret)
{
  void *fn = atomic_load_explicit(cache, memory_order_acquire);
  if (ag_likely(fn != NULL))
    return (forward_fn)fn;
  Dl_info di, self;
  void *h = NULL;
  if (dladdr(ret, &di) && di.dli_fname && dladdr((void *)real_of, &self) &&
      di.dli_fbase != self.dli_fbase) {
    h = dlopen(di.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
    void *none = NULL;
    if (h)
      atomic_compare_exchange_strong(&cpu_lib, &none, h);
  } else if (!(h = atomic_load(&cpu_lib))) {
    dl_iterate_phdr(find_cpu_lib, &h);
  }
  fn = h ? dlsym(h, name) : NULL; /* the backend's own definition, never the agent's */
  if (!fn)
    fn = dlsym(RTLD_NEXT, name);
  if (!fn) { /* nothing to forward to: the graph cannot run correctly */
    ag_log(AG_LOG_ERROR, "no definition of %s besides the agent's: cannot continue", name);
    abort();
  }
  atomic_store_explicit(cache, fn, memory_order_release);
  return (forward_fn)fn;
}

/* The signature of one node's work (sig.h, ggml keys). */
static ag_sig_t key_of(const struct ggml_tensor *dst)
{
  const struct ggml_tensor *s0 = dst->src[0], *s1 = dst->src[1];
  int sub = dst->op == GGML_OP_UNARY || dst->op == GGML_OP_GLU ? dst->op_params[0] : 0;
  return ag_sig_make(AG_HOST_ID_GGML, (uint8_t)dst->op, (uint8_t)(s0 ? s0->type : dst->type),
                     (uint8_t)dst->type, (uint8_t)(s1 ? s1->type + 1 : 0), (uint8_t)sub, 0, 0,
                     (int32_t)dst->ne[0], (int32_t)dst->ne[1], (int32_t)(s0 ? s0->ne[0] : 0),
                     (int32_t)dst->ne[2], (int32_t)dst->ne[3], 0);
}

/* One node group of a graph the agent runs as one custom node: ADD + RMS_NORM + MUL (or
 * RMS_NORM + MUL alone), a single MUL_MAT, a MUL_MAT with the residual ADD of its output, the
 * FFN's gate and up MUL_MATs with the SWIGLU that joins them, or products of one input. */
enum { FU_ADD_RMS_MUL, FU_MUL_MAT, FU_SWIGLU, FU_SHARED_INPUT, FU_MM_ADD, FU_RMS_MUL };
#define SHARED_MAX 3 /* products of one input computed as one node (Q, K and V) */
typedef struct fusion_s {
  int kind;
  struct ggml_tensor *first; /* the group's first node in the graph */
  int span;                  /* its nodes (consecutive) */
  /* The host's nodes (never modified); mul is the one whose output the custom node writes:
   * ADD + RMS_NORM + MUL: add, rms, mul (RMS_NORM + MUL: add NULL); MUL_MAT: mul; SWIGLU: gate,
   * up (MUL_MATs), mul (GLU); MUL_MAT + ADD: prod[0] (the MUL_MAT), add and mul (the ADD). */
  struct ggml_tensor *add, *rms, *mul, *gate, *up;
  /* SHARED_INPUT: the products (mul the first), each with its own kernel's signature */
  struct ggml_tensor *prod[SHARED_MAX];
  ag_entry_t *pke[SHARED_MAX];
  void *pvariant[SHARED_MAX]; /* the kernels the cached graph was built with (MUL_MAT + ADD:
                                 the product's, then its own) */
  int nprod;
  struct ggml_tensor *node; /* the custom node standing for them, when fused */
  ag_entry_t *e;            /* the group's signature (its calls and time) */
  ag_entry_t *ke;           /* the signature whose variant is its kernel: its own, or
                                          (SWIGLU) its MUL_MATs' */
  void *variant;            /* the kernel the cached graph was built with */
  int verifying;            /* this execution checks the kernel against ggml */
  int asked;                /* MUL_MAT + ADD: its compile was asked for */
  _Atomic int untimed;      /* its ggml nodes cannot be timed as one (rounds) */
  _Atomic uint64_t tns;     /* the timed execution's spans of it, on all threads */
  _Atomic uint32_t tn;      /* ... and its calls among them (one per thread) */
  uint32_t bn;              /* round_book's: this execution's calls and time */
  uint64_t bns;
  double tsum[2]; /* per-call means booked so far, each side's, summed */
  uint32_t tk[2]; /* ... and their count */
  int64_t n, rows;
  float eps;
} fusion_t;

static void fused_add_rms_mul(struct ggml_tensor *dst, int ith, int nth, void *ud);
static void mul_mat_node(struct ggml_tensor *dst, int ith, int nth, void *ud);
static void swiglu_node(struct ggml_tensor *dst, int ith, int nth, void *ud);
static void shared_node(struct ggml_tensor *dst, int ith, int nth, void *ud);

/* The fusion record of one of the agent's custom nodes, or NULL. */
static const fusion_t *our_custom(const struct ggml_tensor *dst)
{
  if (dst->op != GGML_OP_CUSTOM)
    return NULL;
  struct {
    ggml_custom_op_t fun;
    int n_tasks;
    void *userdata;
  } p; /* ggml's struct ggml_custom_op_params */
  memcpy(&p, dst->op_params, sizeof p);
  return p.fun == fused_add_rms_mul || p.fun == mul_mat_node || p.fun == swiglu_node ||
                 p.fun == shared_node
             ? p.userdata
             : NULL;
}

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

/* A member node of a timed graph's record: where the host's execution times it. */
typedef struct member_s {
  const struct ggml_tensor *node;
  fusion_t *f;
  const struct ggml_tensor *next; /* the node the thread computes after it, the group's
                                     other members aside (NULL: none; the record is untimed) */
} member_t;

static struct gcache_s *_Atomic timed; /* the cache entry whose execution is timed, or NULL */
static _Atomic uint32_t timed_gen;     /* timed executions started (a thread's span is of one) */

/* This thread's record in progress in a timed execution: its member (host side) or custom
 * node (rebuilt side), start, execution. */
static AG_TLS struct {
  fusion_t *f;
  const member_t *m; /* NULL on the rebuilt side */
  uint64_t t0;
  uint32_t gen;
  int first; /* the span starts a call of the record (its first node) */
} tl_span;

static void span(struct gcache_s *tc, const struct ggml_tensor *dst, const fusion_t *fu);

static void forward(void *_Atomic *cache, const char *name, const void *ret, const void *params,
                    struct ggml_tensor *dst)
{
  forward_fn fn = real_of(cache, name, ret);
  if (ag_unlikely(atomic_load_explicit(&gg_state, memory_order_acquire) != GG_PROFILE)) {
    pthread_once(&gg_once, check);
    if (atomic_load(&gg_state) != GG_PROFILE) {
      fn(params, dst);
      return;
    }
  }
  const fusion_t *fu = our_custom(dst);
  struct gcache_s *tc = atomic_load_explicit(&timed, memory_order_acquire);
  if (ag_unlikely(tc != NULL || tl_span.f != NULL) && !ag_tl.depth) /* not a tail call's */
    span(tc, dst, fu);
  /* a MUL_MAT + ADD without its kernel runs its product's: booked there */
  ag_sig_t k = !fu                                         ? key_of(dst)
               : fu->kind == FU_MM_ADD && !fu->pvariant[1] ? fu->pke[0]->key
                                                           : fu->e->key;
  ag_call_t c;
  if (!ag_call_begin_host(&c, &k, 1)) {
    fn(params, dst);
  } else {
    /* The rounds alone time the custom nodes for the judge. */
    if (fu)
      c.t0 = 0;
    c.variant = fu != NULL; /* the fused kernel serves this group */
    fn(params, dst);
    ag_call_end(&c);
  }
}

/* ---- fusion --------------------------------------------------------------------------- */

/* ggml-cpu's compute parameters (ggml-cpu-impl.h of the checked version): what a forward
 * function is called with. */
typedef struct gg_params_s {
  int ith, nth;
  size_t wsize;
  void *wdata;
  void *threadpool;
  bool use_ref;
} gg_params_t;

/* A graph the CPU backend computed: its fusable groups and, when any is published, the graph
 * that runs in its place. */
typedef struct gcache_s {
  const struct ggml_cgraph *orig;
  int n_nodes;
  uint64_t hash;             /* of the host's node pointers and ops */
  struct ggml_context *ctx;  /* holds the rebuilt graph and the custom nodes */
  struct ggml_cgraph *graph; /* NULL: no group is fused, the host's graph runs */
  int busy;                  /* computations running c->graph (its memory and records stay) */
  fusion_t *f;
  int nf;
  uint64_t execs;    /* executions while it has a rebuilt graph, rounds included */
  uint32_t rounds;   /* rounds started */
  member_t *map;     /* the fused records' member nodes, by node (open addressing) */
  unsigned map_mask; /* its slots - 1 */
  int side;          /* the running execution: 0 the host's graph, 1 the rebuilt */
  int timing;        /* the running execution is timed */
} gcache_t;

#define GCACHE_MAX 32
static gcache_t gcache[GCACHE_MAX];
static int gcache_next; /* the slot a new graph takes (round robin) */
static pthread_mutex_t gcache_mu = PTHREAD_MUTEX_INITIALIZER;

static int fusion_on; /* graphs are fused (jit mode, OPJIT_TEST_FUSION not "off") */

/* The test seam: behaviour a test asks for with OPJIT_TEST_FUSION, NULL in production (no
 * branch of the host tests a mode). poison: every kernel's rows come out as zeros, unverified
 * (the model must notice); wrong: 1.5 times too large (verification must catch it); slow: the
 * norm groups', MUL_MAT + ADD groups' and single MUL_MATs' kernels spend 3 ms more per call,
 * and rounds follow each other without a gap (the never-slower judge must demote them). */
typedef struct gg_test_s {
  int unverified;       /* kernels are not verified */
  uint64_t round_every; /* executions from a round to the next (0: the host's periods) */
  /* After a kernel of record f wrote y[j * ld + i], j < cols, i0 <= i < i1. */
  void (*wrote)(const struct fusion_s *f, float *y, int64_t ld, int64_t cols, int64_t i0,
                int64_t i1);
} gg_test_t;
static const gg_test_t *test;

static void test_hook(const struct fusion_s *f, float *y, int64_t ld, int64_t cols, int64_t i0,
                      int64_t i1);
static const gg_test_t test_poison = {1, 0, test_hook}, test_wrong = {0, 0, test_hook},
                       test_slow = {0, 4, test_hook};

/* The kernel's rows as the test asks: zeros, 1.5 times too large, or 3 ms late (more than a
 * loaded machine adds to the original's barriers; not for groups of products, whose kernels
 * are their products'). */
static void test_hook(const struct fusion_s *f, float *y, int64_t ld, int64_t cols, int64_t i0,
                      int64_t i1)
{
  for (int64_t j = 0; test != &test_slow && j < cols; j++)
    for (int64_t i = i0; i < i1; i++)
      y[j * ld + i] = test == &test_poison ? 0.0f : y[j * ld + i] * 1.5f;
  if (test == &test_slow && f->kind != FU_SWIGLU && f->kind != FU_SHARED_INPUT)
    for (uint64_t until = ag_now_ns() + 3000000; ag_now_ns() < until;)
      ;
}

/* A kernel of f wrote y[j * ld + i], j < cols, i0 <= i < i1: the test seam's turn. */
static inline void wrote(const struct fusion_s *f, float *y, int64_t ld, int64_t cols, int64_t i0,
                         int64_t i1)
{
  if (ag_unlikely(test != NULL))
    test->wrote(f, y, ld, cols, i0, i1);
}

/* Decides the fusion mode and resolves the backend's own ops, once (after check() accepted
 * this ggml). */
static void fusion_setup(void)
{
  const char *t = getenv("OPJIT_TEST_FUSION");
  fusion_on = ag_hot_calls && !(t && strcmp(t, "off") == 0);
  test = !t                         ? NULL
         : strcmp(t, "poison") == 0 ? &test_poison
         : strcmp(t, "wrong") == 0  ? &test_wrong
         : strcmp(t, "slow") == 0   ? &test_slow
                                    : NULL;
  void *cpu = atomic_load(&cpu_lib);
  if (!cpu) {
    fusion_on = 0;
    return;
  }
  *(void **)&api.add = dlsym(cpu, "ggml_compute_forward_add");
  *(void **)&api.rms_norm = dlsym(cpu, "ggml_compute_forward_rms_norm");
  *(void **)&api.mul = dlsym(cpu, "ggml_compute_forward_mul");
  *(void **)&api.swiglu = dlsym(cpu, "ggml_vec_swiglu_f32"); /* without it: no SWIGLU fusion */
  api.ok = api.n_nodes && api.node && api.init && api.free && api.new_graph && api.add_node &&
           api.graph_overhead && api.tensor_overhead && api.contiguous && api.custom &&
           api.nbytes && api.add && api.rms_norm && api.mul;
  if (!api.ok)
    fusion_on = 0;
}

static int same_shape(const struct ggml_tensor *x, const struct ggml_tensor *y)
{
  return x->ne[0] == y->ne[0] && x->ne[1] == y->ne[1] && x->ne[2] == y->ne[2] &&
         x->ne[3] == y->ne[3];
}

/* 1 when two tensors' bytes are the same range or do not overlap at all. */
static int clean_alias(const struct ggml_tensor *x, const struct ggml_tensor *y, size_t bytes)
{
  uintptr_t a = (uintptr_t)x->data, b = (uintptr_t)y->data;
  return a == b || a + bytes <= b || b + bytes <= a;
}

/* 1 when node t's output is a source of no node of g but user's. */
static int feeds_only(struct ggml_cgraph *g, int n, const struct ggml_tensor *t,
                      const struct ggml_tensor *user)
{
  for (int j = 0; j < n; j++) {
    const struct ggml_tensor *u = api.node(g, j);
    for (int k = 0; k < GGML_MAX_SRC; k++)
      if (u->src[k] == t && u != user)
        return 0;
  }
  return !(t->flags & GGML_TENSOR_FLAG_OUTPUT);
}

/* The ADD + RMS_NORM + MUL group at nodes i..i+2 of g (with_add), or RMS_NORM + MUL at i, i+1,
 * under every guard; 0 when there is none. */
static int find_group(struct ggml_cgraph *g, int n, int i, fusion_t *f, int with_add)
{
  int at = i + with_add;
  if (at + 1 >= n)
    return 0;
  struct ggml_tensor *add = with_add ? api.node(g, i) : NULL;
  struct ggml_tensor *rms = api.node(g, at), *mul = api.node(g, at + 1);
  if ((add && add->op != GGML_OP_ADD) || rms->op != GGML_OP_RMS_NORM || mul->op != GGML_OP_MUL ||
      (add && rms->src[0] != add) || mul->src[0] != rms)
    return 0;
  /* the row's inputs: the ADD's two, or the norm's one */
  const struct ggml_tensor *a = add ? add->src[0] : rms->src[0], *b = add ? add->src[1] : a;
  const struct ggml_tensor *w = mul->src[1], *x = add ? add : a;
  if (!a || !b || !w || x->type != GGML_TYPE_F32 || a->type != GGML_TYPE_F32 ||
      b->type != GGML_TYPE_F32 || rms->type != GGML_TYPE_F32 || mul->type != GGML_TYPE_F32 ||
      w->type != GGML_TYPE_F32)
    return 0;
  if (!same_shape(a, x) || !same_shape(b, x) || !same_shape(rms, x) || !same_shape(mul, x) ||
      w->ne[0] != x->ne[0] || w->ne[1] != 1 || w->ne[2] != 1 || w->ne[3] != 1)
    return 0;
  if ((add && add->view_src) || rms->view_src || mul->view_src || !api.contiguous(a) ||
      !api.contiguous(b) || !api.contiguous(w) || !api.contiguous(x) || !api.contiguous(mul))
    return 0;
  if (!a->data || !b->data || !w->data || !x->data || !rms->data || !mul->data ||
      !api.contiguous(rms) || x->ne[0] > (1 << 20))
    return 0;
  /* Nodes ggml would skip (not selected for computing) are not the agent's to compute. */
  if ((add && !(add->flags & GGML_TENSOR_FLAG_COMPUTE)) ||
      !(rms->flags & GGML_TENSOR_FLAG_COMPUTE) || !(mul->flags & GGML_TENSOR_FLAG_COMPUTE))
    return 0;
  size_t bytes = (size_t)(x->ne[0] * x->ne[1] * x->ne[2] * x->ne[3]) * sizeof(float);
  size_t wbytes = (size_t)w->ne[0] * sizeof(float);
  const struct ggml_tensor *outs[3] = {rms, mul, add}, *ins[2] = {a, b};
  /* Exact aliasing is fine: ggml's allocator gives a node a dead tensor's memory, and each
   * element is read before it is written; partial overlaps are not. */
  for (int o = 0; o < 2 + with_add; o++) {
    for (int k = 0; k < 2; k++)
      if (!clean_alias(outs[o], ins[k], bytes))
        return 0;
    for (int k = 0; k < o; k++)
      if (!clean_alias(outs[o], outs[k], bytes))
        return 0;
    uintptr_t od = (uintptr_t)outs[o]->data, wd = (uintptr_t)w->data;
    if (!(od + bytes <= wd || wd + wbytes <= od)) /* the weight is read by every row */
      return 0;
  }
  if (!feeds_only(g, n, rms, mul)) /* the norm's output feeds the MUL alone */
    return 0;
  *f = (fusion_t){.kind = add ? FU_ADD_RMS_MUL : FU_RMS_MUL,
                  .first = add ? add : rms,
                  .span = 2 + with_add,
                  .add = add,
                  .rms = rms,
                  .mul = mul,
                  .n = x->ne[0],
                  .rows = x->ne[1] * x->ne[2] * x->ne[3]};
  memcpy(&f->eps, rms->op_params, sizeof f->eps);
  return 1;
}

/* The MUL_MAT at node i of g, when the generator's kernel can compute it: 2-D, f32 or f16
 * weights in plain memory (not repacked by an extra buffer type: extra unset), f32
 * activations and output, all contiguous, the output apart from both inputs. Weights of an
 * extra buffer type stay ggml's even when their bytes are plain: on a CPU with AMX ggml keeps
 * f16 weights in its AMX buffer and multiplies them with f32 activations, where the kernel
 * rounds them to f16 as ggml's own MUL_MAT does (the results would move beyond tolerance). */
static int find_mm(struct ggml_cgraph *g, int i, fusion_t *f)
{
  struct ggml_tensor *t = api.node(g, i);
  const struct ggml_tensor *w = t->src[0], *x = t->src[1];
  if (t->op != GGML_OP_MUL_MAT || !w || !x || t->type != GGML_TYPE_F32 ||
      (w->type != GGML_TYPE_F32 && w->type != GGML_TYPE_F16) || x->type != GGML_TYPE_F32)
    return 0;
  if (w->extra || t->view_src || !(t->flags & GGML_TENSOR_FLAG_COMPUTE) || !w->data || !x->data ||
      !t->data || !api.contiguous(w) || !api.contiguous(x) || !api.contiguous(t))
    return 0;
  for (int d = 2; d < GGML_MAX_DIMS; d++)
    if (t->ne[d] != 1 || w->ne[d] != 1 || x->ne[d] != 1)
      return 0;
  if (t->ne[0] != w->ne[1] || t->ne[1] != x->ne[1] || w->ne[0] != x->ne[0])
    return 0;
  jt_gemm_t s = {.mm = 1,
                 .w16 = w->type == GGML_TYPE_F16,
                 .m = (int)t->ne[0],
                 .n = (int)t->ne[1],
                 .k = (int)w->ne[0]};
  if (t->ne[0] > INT32_MAX || t->ne[1] > INT32_MAX || w->ne[0] > INT32_MAX ||
      !jt_gemm_supported(&s))
    return 0;
  uintptr_t y0 = (uintptr_t)t->data, y1 = y0 + (size_t)(t->ne[0] * t->ne[1]) * sizeof(float);
  const struct ggml_tensor *ins[2] = {w, x};
  for (int k = 0; k < 2; k++) {
    uintptr_t a0 = (uintptr_t)ins[k]->data, a1 = a0 + (size_t)ins[k]->nb[1] * (size_t)ins[k]->ne[1];
    if (!(y1 <= a0 || a1 <= y0))
      return 0;
  }
  *f = (fusion_t){
      .kind = FU_MUL_MAT, .first = t, .span = 1, .mul = t, .n = t->ne[0], .rows = t->ne[1]};
  return 1;
}

/* The FFN's gate and up MUL_MATs (either order) at nodes i, i+1 of g and the SWIGLU at i+2
 * that joins them (split form, not swapped): both products under find_mm's guards with the
 * same input, weight type and shape; the GLU's f32 output contiguous, of their shape, and
 * either the very memory of a product's output or apart from it. */
static int find_swiglu(struct ggml_cgraph *g, int n, int i, fusion_t *f)
{
  fusion_t a, b;
  if (!api.swiglu || i + 2 >= n || !find_mm(g, i, &a) || !find_mm(g, i + 1, &b))
    return 0;
  struct ggml_tensor *glu = api.node(g, i + 2), *x = a.mul->src[1];
  if (glu->op != GGML_OP_GLU || glu->op_params[0] != GGML_GLU_OP_SWIGLU ||
      glu->op_params[1] != 0 /* swapped */ || !glu->src[0] || !glu->src[1] ||
      glu->type != GGML_TYPE_F32 || glu->view_src || !api.contiguous(glu) || !glu->data ||
      !(glu->flags & GGML_TENSOR_FLAG_COMPUTE) || !same_shape(glu, a.mul))
    return 0;
  struct ggml_tensor *gate = glu->src[0], *up = glu->src[1];
  if (!((gate == a.mul && up == b.mul) || (gate == b.mul && up == a.mul)) || b.mul->src[1] != x ||
      a.mul->src[0]->type != b.mul->src[0]->type || !same_shape(a.mul, b.mul) ||
      a.mul->src[0]->ne[0] != b.mul->src[0]->ne[0])
    return 0;
  size_t bytes = (size_t)(glu->ne[0] * glu->ne[1]) * sizeof(float);
  if (!clean_alias(glu, gate, bytes) || !clean_alias(glu, up, bytes) ||
      !clean_alias(gate, up, bytes) || gate->data == up->data)
    return 0;
  /* Every output apart from every input: one thread may write a product while another still
   * reads the other's weight (ggml's allocator may place a node on a dead input's memory). */
  const struct ggml_tensor *outs[3] = {glu, gate, up}, *ins[3] = {x, gate->src[0], up->src[0]};
  for (int o = 0; o < 3; o++)
    for (int k = 0; k < 3; k++) {
      uintptr_t o0 = (uintptr_t)outs[o]->data, a0 = (uintptr_t)ins[k]->data;
      if (!(o0 + bytes <= a0 || a0 + (size_t)ins[k]->nb[1] * (size_t)ins[k]->ne[1] <= o0))
        return 0;
    }
  *f = (fusion_t){.kind = FU_SWIGLU,
                  .first = api.node(g, i),
                  .span = 3,
                  .gate = gate,
                  .up = up,
                  .mul = glu,
                  .n = glu->ne[0],
                  .rows = glu->ne[1]};
  return 1;
}

/* 1 when tensors a and b (those with memory) have no byte in common. */
static int apart(const struct ggml_tensor *a, const struct ggml_tensor *b)
{
  if (!a || !b || !a->data || !b->data)
    return 1;
  uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
  return a0 + api.nbytes(a) <= b0 || b0 + api.nbytes(b) <= a0;
}

/* The residual ADD's other source, of a MUL_MAT + ADD record. */
static const struct ggml_tensor *residual_of(const fusion_t *f)
{
  return f->add->src[0] == f->prod[0] ? f->add->src[1] : f->add->src[0];
}

/* A MUL_MAT at node i of g under find_mm's guards whose output only the ADD at i + 1 reads,
 * adding a residual of its shape (f32, contiguous). The product is computed in the MUL_MAT's own
 * memory (whole at the end: a reader in another split, which the graph does not show, sees
 * it), which must therefore share nothing with the residual; the ADD's output may be the
 * very memory of either, else apart from both, and apart from the product's inputs (one thread
 * writes its rows while another still reads them). */
static int find_mm_add(struct ggml_cgraph *g, int n, int i, fusion_t *f)
{
  fusion_t p, norm;
  if (i + 1 >= n || !find_mm(g, i, &p))
    return 0;
  /* Decode's (N = 1) residual ADD goes to the norm after it (ADD + RMS_NORM + MUL): as many
   * nodes either way, and that kernel also saves the norm's own pass over the row. */
  if (p.rows == 1 && find_group(g, n, i + 1, &norm, 1))
    return 0;
  struct ggml_tensor *mm = p.mul, *add = api.node(g, i + 1);
  if (add->op != GGML_OP_ADD || add->type != GGML_TYPE_F32 || add->view_src || !add->data ||
      !api.contiguous(add) || !(add->flags & GGML_TENSOR_FLAG_COMPUTE) || !same_shape(add, mm))
    return 0;
  const struct ggml_tensor *res = add->src[0] == mm   ? add->src[1]
                                  : add->src[1] == mm ? add->src[0]
                                                      : NULL;
  if (!res || res == mm || res->type != GGML_TYPE_F32 || !res->data || !api.contiguous(res) ||
      !same_shape(res, add) || !feeds_only(g, n, mm, add))
    return 0;
  size_t bytes = (size_t)(add->ne[0] * add->ne[1]) * sizeof(float);
  const struct ggml_tensor *w = mm->src[0], *x = mm->src[1];
  if (!apart(mm, res) || !clean_alias(add, mm, bytes) || !clean_alias(add, res, bytes) ||
      !apart(add, w) || !apart(add, x))
    return 0;
  *f = (fusion_t){.kind = FU_MM_ADD,
                  .first = mm,
                  .span = 2,
                  .add = add,
                  .mul = add,
                  .n = mm->ne[0],
                  .rows = mm->ne[1],
                  .nprod = 1};
  f->prod[0] = mm;
  return 1;
}

/* Products of one input (Q, K and V of an attention: 2 or 3 MUL_MATs under find_mm's guards
 * with the same input, weight type, K and N, within 16 nodes from node i) computed together at
 * the first one's place. The later ones move earlier past the nodes in between, so those
 * nodes, their sources included, must share no memory with the moved products' outputs or
 * weights: ggml's allocator may have placed a moved product on memory that is alive until it
 * (the first product's output, say, dead once its ROPE has read it). */
static int find_shared(struct ggml_cgraph *g, int n, int i, fusion_t *f)
{
  fusion_t a, b;
  if (!find_mm(g, i, &a))
    return 0;
  *f = (fusion_t){.kind = FU_SHARED_INPUT,
                  .first = a.mul,
                  .span = 1,
                  .mul = a.mul,
                  .n = a.mul->ne[0],
                  .rows = a.mul->ne[1],
                  .nprod = 1};
  f->prod[0] = a.mul;
  const struct ggml_tensor *x = a.mul->src[1];
  int at[SHARED_MAX] = {i};
  for (int j = i + 1; j < n && j <= i + 16 && f->nprod < SHARED_MAX; j++) {
    if (!find_mm(g, j, &b) || b.mul->src[1] != x || b.mul->src[0]->type != a.mul->src[0]->type ||
        b.mul->ne[1] != a.mul->ne[1])
      continue;
    at[f->nprod] = j;
    f->prod[f->nprod++] = b.mul;
  }
  if (f->nprod < 2)
    return 0;
  for (int p = 1; p < f->nprod; p++) /* the nodes product p moves before */
    for (int j = i + 1; j < at[p]; j++) {
      struct ggml_tensor *t = api.node(g, j);
      int member = 0;
      for (int q = 1; q < f->nprod; q++)
        member |= t == f->prod[q];
      if (member)
        continue;
      if (!apart(f->prod[p], t) || !apart(f->prod[p]->src[0], t))
        return 0;
      for (int k = 0; k < GGML_MAX_SRC; k++)
        if (!apart(f->prod[p], t->src[k]))
          return 0;
    }
  for (int p = 0; p < f->nprod; p++) /* and each product apart from the others' */
    for (int q = 0; q < f->nprod; q++)
      if (p != q && (!apart(f->prod[p], f->prod[q]) || !apart(f->prod[p], f->prod[q]->src[0])))
        return 0;
  return 1;
}

/* A copy of contiguous tensor t seen as rows [r0, r0 + cnt) of its rows (2-D), at base's
 * rows (base: the tensor's own memory, or a stand-in of the same size). */
static struct ggml_tensor rows_of(const struct ggml_tensor *t, int64_t r0, int64_t cnt, void *base)
{
  struct ggml_tensor c = *t;
  int64_t n = t->ne[0];
  c.ne[1] = cnt, c.ne[2] = c.ne[3] = 1;
  c.nb[1] = c.nb[0] * (size_t)n, c.nb[2] = c.nb[3] = c.nb[1] * (size_t)cnt;
  c.data = (float *)base + r0 * n;
  return c;
}

/* ggml's own ADD (unless the group has none), RMS_NORM and MUL for rows [r0, r1) of the
 * group, single-threaded, writing x, s and y (the nodes' own memory, or scratch of the same
 * sizes): the original, for the verification and for a group whose kernel is gone. */
static void ggml_rows(const fusion_t *f, int64_t r0, int64_t r1, float *x, float *s, float *y)
{
  gg_params_t p = {0, 1, 0, NULL, NULL, false};
  int64_t cnt = r1 - r0;
  const struct ggml_tensor *ta = f->add ? f->add->src[0] : f->rms->src[0];
  struct ggml_tensor a = rows_of(ta, r0, cnt, ta->data);
  struct ggml_tensor b = f->add ? rows_of(f->add->src[1], r0, cnt, f->add->src[1]->data) : a;
  struct ggml_tensor add = f->add ? rows_of(f->add, r0, cnt, x) : a;
  struct ggml_tensor rms = rows_of(f->rms, r0, cnt, s), mul = rows_of(f->mul, r0, cnt, y);
  add.src[0] = &a, add.src[1] = &b;
  rms.src[0] = f->add ? &add : &a;
  mul.src[0] = &rms;
  if (f->add)
    api.add(&p, &add);
  api.rms_norm(&p, &rms);
  api.mul(&p, &mul);
}

/* The group's row inputs: the ADD's sources a and b and its output x; or (RMS_NORM + MUL) the
 * norm's input a, no b, no x. */
static void group_rows(const fusion_t *f, const float **a, const float **b, float **x)
{
  *a = f->add ? f->add->src[0]->data : f->rms->src[0]->data;
  *b = f->add ? f->add->src[1]->data : NULL;
  *x = f->add ? f->add->data : NULL;
}

/* Verification, on thread 0 alone: ggml's result into scratch first (a and b may share memory
 * with the outputs), then the kernel's into the nodes; a mismatch leaves ggml's. */
static void verify(fusion_t *f, jt_add_rms_mul_fn k)
{
  const float *a, *b, *w = f->mul->src[1]->data;
  float *x, *s = f->rms->data, *y = f->mul->data;
  group_rows(f, &a, &b, &x);
  size_t cnt = (size_t)(f->n * f->rows);
  float *scratch = malloc(3 * cnt * sizeof *scratch);
  if (!scratch) { /* cannot compare now: ggml computes, a later execution checks */
    atomic_fetch_add(&f->ke->verify, 1);
    ggml_rows(f, 0, f->rows, x, s, y);
    return;
  }
  float *rx = scratch, *rs = scratch + cnt, *ry = scratch + 2 * cnt;
  ggml_rows(f, 0, f->rows, rx, rs, ry);
  k(a, b, w, x, s, y, f->rows, f->eps);
  wrote(f, y, 0, 1, 0, (int64_t)cnt);
  /* x and s are compared when they end as themselves (an output reusing another's memory
   * ends as the later one); all must match within a few ulps of ggml's. */
  double worst = 0, bound = 1;
  for (size_t i = 0; i < cnt; i++) {
    double want[3] = {rx[i], rs[i], ry[i]}, got[3] = {x ? x[i] : 0, s[i], y[i]};
    int keep[3] = {x && x != s && x != y, s != y, 1};
    for (int o = 0; o < 3; o++) {
      double d = fabs(got[o] - want[o]),
             lim = o == 0 ? 0 : 4 * FLT_EPSILON * fabs(want[o]) + FLT_MIN;
      if (keep[o] && !(d <= lim)) {
        worst = isnan(d) ? INFINITY : d, bound = lim;
        i = cnt;
        break;
      }
    }
  }
  if (worst > bound) { /* the host keeps ggml's results */
    if (x)
      memcpy(x, rx, cnt * sizeof *x);
    memcpy(s, rs, cnt * sizeof *s);
    memcpy(y, ry, cnt * sizeof *y);
  }
  free(scratch);
  ag_tier_verify_result(f->ke, worst, bound);
}

/* The custom node's work on thread ith of nth: its share of the rows (all of them on thread 0
 * when verifying). The kernel is read from the signature here, inside the forward call, so a
 * kernel the tiers drop (evicted, or blacklisted by a verification a moment ago) is never run
 * after the grace period they wait for: without one, ggml's own ops compute the rows. */
static void fused_add_rms_mul(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
  fusion_t *f = ud;
  jt_add_rms_mul_fn k =
      (jt_add_rms_mul_fn)atomic_load_explicit(&f->ke->variant, memory_order_acquire);
  if (f->verifying) {
    if (ith == 0) {
      if (k)
        verify(f, k);
      else
        ggml_rows(f, 0, f->rows, f->add ? f->add->data : NULL, f->rms->data, dst->data);
    }
    return;
  }
  int64_t n = f->n, per = (f->rows + nth - 1) / nth, r0 = per * ith;
  int64_t r1 = r0 + per < f->rows ? r0 + per : f->rows;
  if (r0 >= r1)
    return;
  const float *a, *b, *w = f->mul->src[1]->data;
  float *x, *s = f->rms->data, *y = dst->data;
  group_rows(f, &a, &b, &x);
  if (!k) {
    ggml_rows(f, r0, r1, x, s, y);
    return;
  }
  k(a + r0 * n, b ? b + r0 * n : NULL, w, x ? x + r0 * n : NULL, s + r0 * n, y + r0 * n, r1 - r0,
    f->eps);
  wrote(f, y, 0, 1, r0 * n, r1 * n);
}

/* ---- MUL_MAT -------------------------------------------------------------------------- */

/* Rows [r0, r1) of MUL_MAT node mm in plain C: the original for a node whose kernel the tiers
 * dropped (ggml's own MUL_MAT cannot stand in: it synchronises every thread of the graph). */
static void mm_rows(const struct ggml_tensor *mm, int64_t r0, int64_t r1)
{
  const struct ggml_tensor *w = mm->src[0];
  int64_t m = mm->ne[0], n = mm->ne[1], k = w->ne[0];
  float *y = mm->data;
  double mag;
  for (int64_t j = 0; j < n; j++) /* exact, then one rounding: within ggml's own error of it */
    for (int64_t i = r0; i < r1; i++)
      y[j * m + i] =
          (float)ag_mm_exact(w->data, w->type == GGML_TYPE_F16, mm->src[1]->data, k, i, j, &mag);
}

/* out = y + res over rows [r0, r1) of every column, element by element (out may be the very
 * memory of y or of res); res's element (i, j) at res[j * ld + i - row0]: the residual itself
 * (ld m, row0 0), or a copy of those rows (ld r1 - r0, row0 r0). */
static void add_rows(const struct ggml_tensor *mm, int64_t r0, int64_t r1, const float *res,
                     int64_t ld, int64_t row0, float *out)
{
  int64_t m = mm->ne[0];
  const float *y = mm->data;
  for (int64_t j = 0; j < mm->ne[1]; j++)
    for (int64_t i = r0; i < r1; i++)
      out[j * m + i] = y[j * m + i] + res[j * ld + i - row0];
}

/* Verification of rows [r0, r1) of mm by the thread that computed them with ke's kernel: 64 of
 * their elements — the range's first and last rows, the first and last columns, the rest at
 * random — against the exact dot product (in double) within the bound of a float sum of k
 * products (elements with infinite or NaN products have none: skipped); with a residual (res,
 * a copy of its rows [r0, r1), column by column), the sums in out against the exact product
 * plus it. A mismatch blacklists the kernel, and these rows are computed again by mm_rows (and
 * add_rows). Each thread's check is a verdict of its own. */
static void mm_verify(ag_entry_t *ke, const struct ggml_tensor *mm, int64_t r0, int64_t r1, int ith,
                      const float *res, float *out)
{
  const struct ggml_tensor *w = mm->src[0];
  int64_t m = mm->ne[0], n = mm->ne[1], k = w->ne[0];
  const float *y = res ? out : mm->data;
  uint64_t rnd = (uint64_t)(uintptr_t)y ^ ((uint64_t)ith << 32) ^ 0x9e3779b97f4a7c15ull;
  ag_mm_check_t c = {0};
  for (int t = 0; t < 64; t++) {
    rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
    int64_t i = t == 0 ? r0 : t == 1 ? r1 - 1 : r0 + (int64_t)((rnd >> 33) % (uint64_t)(r1 - r0));
    int64_t j = t < 2 ? 0 : t < 4 ? n - 1 : (int64_t)((rnd >> 17) % (uint64_t)n);
    double mag,
        exact = ag_mm_exact(w->data, w->type == GGML_TYPE_F16, mm->src[1]->data, k, i, j, &mag);
    double r = res ? res[j * (r1 - r0) + i - r0] : 0; /* one more rounding: eps |r| */
    ag_mm_tally(&c, y[j * m + i], exact + r, mag + fabs(r) / (4.0 * (double)(k + 2)), k);
  }
  if (c.worst > c.bound) {
    mm_rows(mm, r0, r1);
    if (res)
      add_rows(mm, r0, r1, res, r1 - r0, r0, out);
  }
  if (c.checked)
    ag_tier_verify_result(ke, c.worst, c.bound);
}

/* Thread ith of nth's share of m rows, in whole micro-kernel blocks; 0 when it has none. */
static int mm_share(int64_t m, int ith, int nth, int64_t *r0, int64_t *r1)
{
  int64_t per = ((m + nth - 1) / nth + JT_MM_MR - 1) / JT_MM_MR * JT_MM_MR;
  *r0 = per * ith, *r1 = *r0 + per < m ? *r0 + per : m;
  return *r0 < *r1;
}

/* The calling thread's kernel scratch of JT_MM_SCRATCH_FLOATS(k) floats (64-byte aligned):
 * kept for the thread's life (freed when it ends), grown on demand; NULL without memory. A
 * node's call used to allocate and free its own. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_keyed;
static AG_TLS float *tl_scratch;
static AG_TLS size_t tl_scratch_n;

static void scratch_key_make(void) { scratch_keyed = pthread_key_create(&scratch_key, free) == 0; }

static float *scratch_get(int64_t k)
{
  size_t need = JT_MM_SCRATCH_FLOATS(k);
  if (tl_scratch_n >= need)
    return tl_scratch;
  pthread_once(&scratch_once, scratch_key_make);
  float *p = scratch_keyed ? aligned_alloc(64, (need * sizeof(float) + 63) / 64 * 64) : NULL;
  if (!p || pthread_setspecific(scratch_key, p)) {
    free(p);
    return NULL;
  }
  free(tl_scratch);
  tl_scratch = p, tl_scratch_n = need;
  return p;
}

/* Rows [r0, r1) of MUL_MAT node mm by ke's kernel, read here, inside the forward call (as for
 * the fusions): without one (dropped meanwhile), or without memory for its scratch, in plain
 * C. Checked when f verifies. Returns 1 when the kernel computed them. */
static int mm_compute(const fusion_t *f, ag_entry_t *ke, const struct ggml_tensor *mm, int64_t r0,
                      int64_t r1, int ith)
{
  jt_mm_fn k = (jt_mm_fn)atomic_load_explicit(&ke->variant, memory_order_acquire);
  float *scratch = k ? scratch_get(mm->src[0]->ne[0]) : NULL;
  if (!scratch) {
    mm_rows(mm, r0, r1);
    return 0;
  }
  k(mm->src[0]->data, mm->src[1]->data, mm->data, r0, r1, scratch);
  wrote(f, mm->data, mm->ne[0], mm->ne[1], r0, r1);
  if (f->verifying)
    mm_verify(ke, mm, r0, r1, ith, NULL, NULL);
  return 1;
}

/* Rows [r0, r1) of a MUL_MAT + ADD record: its kernel's sums into the ADD's output (the
 * product in its own memory), read here as mm_compute reads its kernel; without
 * one (not compiled yet, or dropped), the product by its own MUL_MAT kernel (mm_compute: that,
 * or plain C) and then ggml's ADD's sums. A verifying execution keeps a copy of the residual's
 * rows first: the output may be its very memory. Returns 1 when the group's kernel computed
 * them. */
static int mm_add_compute(const fusion_t *f, int64_t r0, int64_t r1, int ith)
{
  const struct ggml_tensor *mm = f->prod[0];
  const float *res = residual_of(f)->data;
  float *out = f->add->data;
  int64_t m = mm->ne[0], n = mm->ne[1], cnt = r1 - r0;
  jt_mm_add_fn k = (jt_mm_add_fn)atomic_load_explicit(&f->ke->variant, memory_order_acquire);
  float *scratch = k ? scratch_get(mm->src[0]->ne[0]) : NULL;
  float *keep = scratch && f->verifying ? malloc((size_t)(n * cnt) * sizeof *keep) : NULL;
  if (!scratch) {
    mm_compute(f, f->pke[0], mm, r0, r1, ith); /* forward() books the node under its key */
    add_rows(mm, r0, r1, res, m, 0, out);
    return 0;
  }
  for (int64_t j = 0; keep && j < n; j++)
    memcpy(keep + j * cnt, res + j * m + r0, (size_t)cnt * sizeof *keep);
  k(mm->src[0]->data, mm->src[1]->data, mm->data, res, out, r0, r1, scratch);
  wrote(f, out, m, n, r0, r1);
  if (keep)
    mm_verify(f->ke, mm, r0, r1, ith, keep, out);
  else if (f->verifying) /* no memory to compare now: a later execution checks */
    atomic_fetch_add(&f->ke->verify, 1);
  free(keep);
  return 1;
}

/* The custom node of a MUL_MAT, or of a MUL_MAT + ADD, on thread ith of nth: its share of
 * the rows. */
static void mul_mat_node(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
  fusion_t *f = ud;
  int64_t r0, r1;
  if (!mm_share(dst->ne[0], ith, nth, &r0, &r1))
    return;
  if (f->kind == FU_MM_ADD)
    mm_add_compute(f, r0, r1, ith);
  else
    mm_compute(f, f->ke, f->mul, r0, r1, ith);
}

/* The SWIGLU group's custom node on thread ith of nth: its share of the rows of both products
 * (their kernel is one: they have one shape) into the products' own outputs, then of the GLU's
 * output, silu(gate) * up, by ggml's own ggml_vec_swiglu_f32 (its vectorised e^x: the same
 * bits as the host's GLU). Each thread reads only the rows it wrote: no thread waits for
 * another within the group. */
static void swiglu_node(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
  fusion_t *f = ud;
  int64_t m = dst->ne[0], n = dst->ne[1], r0, r1;
  if (!mm_share(m, ith, nth, &r0, &r1))
    return;
  int served = mm_compute(f, f->ke, f->gate, r0, r1, ith);
  served += mm_compute(f, f->ke, f->up, r0, r1, ith);
  /* The products' own signature keeps its calls: they are what keeps its kernel hot in later
   * runs' profiles and in the code cache (forward() books the group's under its own). */
  atomic_fetch_add_explicit(&f->ke->calls, 2, memory_order_relaxed);
  atomic_fetch_add_explicit(&f->ke->vcalls, (uint64_t)served, memory_order_relaxed);
  const float *g = f->gate->data, *u = f->up->data;
  float *y = dst->data;
  for (int64_t j = 0; j < n; j++) /* r0 is a multiple of 16, as a row's start: ggml's chunks */
    api.swiglu((int)(r1 - r0), y + j * m + r0, g + j * m + r0, u + j * m + r0);
}

/* The custom node of products of one input on thread ith of nth: its share of each product's
 * rows with that product's kernel. Each product's own signature keeps its calls (forward()
 * books the node's under the group's). */
static void shared_node(struct ggml_tensor *dst, int ith, int nth, void *ud)
{
  (void)dst;
  fusion_t *f = ud;
  for (int p = 0; p < f->nprod; p++) {
    int64_t r0, r1;
    if (!mm_share(f->prod[p]->ne[0], ith, nth, &r0, &r1))
      continue;
    int served = mm_compute(f, f->pke[p], f->prod[p], r0, r1, ith);
    atomic_fetch_add_explicit(&f->pke[p]->calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&f->pke[p]->vcalls, (uint64_t)served, memory_order_relaxed);
  }
}

static uint64_t graph_hash(struct ggml_cgraph *g, int n)
{
  uint64_t h = 1469598103934665603ull;
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
  for (int i = 0; i < n; i++) {
    const struct ggml_tensor *t = api.node(g, i);
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

static void gcache_clear(gcache_t *c)
{
  if (c->ctx)
    api.free(c->ctx);
  free(c->f);
  free(c->map);
  memset(c, 0, sizeof *c);
}

/* The host's nodes a fused record stands for (at most 3), in m; returns how many. */
static int members_of(const fusion_t *f, struct ggml_tensor *m[3])
{
  switch (f->kind) {
  case FU_ADD_RMS_MUL:
    m[0] = f->add, m[1] = f->rms, m[2] = f->mul;
    return 3;
  case FU_RMS_MUL:
    m[0] = f->rms, m[1] = f->mul;
    return 2;
  case FU_MM_ADD:
    m[0] = f->prod[0], m[1] = f->add;
    return 2;
  case FU_SWIGLU:
    m[0] = f->gate, m[1] = f->up, m[2] = f->mul;
    return 3;
  case FU_SHARED_INPUT:
    for (int p = 0; p < f->nprod; p++)
      m[p] = f->prod[p];
    return f->nprod;
  default:
    m[0] = f->mul;
    return 1;
  }
}

/* Node t's slot in c's member map, or NULL when t is no member of a fused record. */
/* t's slot in c's member map (open addressing), or the empty slot where t would go; the map
 * exists. */
static member_t *member_slot(const gcache_t *c, const struct ggml_tensor *t)
{
  unsigned h = (unsigned)(((uintptr_t)t >> 4) * 0x9E3779B1u) & c->map_mask;
  while (c->map[h].node && c->map[h].node != t)
    h = (h + 1) & c->map_mask;
  return &c->map[h];
}

static member_t *member_at(const gcache_t *c, const struct ggml_tensor *t)
{
  member_t *s = c->map ? member_slot(c, t) : NULL;
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
 * timed. Without memory nothing is mapped (and nothing timed). gcache_mu held. */
static void map_members(gcache_t *c, struct ggml_cgraph *g)
{
  free(c->map);
  c->map = NULL;
  struct ggml_tensor *m[3];
  unsigned count = 0, size = 16;
  for (int i = 0; i < c->nf; i++)
    count += c->f[i].node ? (unsigned)members_of(&c->f[i], m) : 0;
  while (size < 2 * count)
    size *= 2;
  if (!count || !(c->map = calloc(size, sizeof *c->map)))
    return;
  c->map_mask = size - 1;
  for (int i = 0; i < c->nf; i++)
    for (int k = 0, nm = c->f[i].node ? members_of(&c->f[i], m) : 0; k < nm; k++) {
      member_t *slot = member_slot(c, m[k]);
      if (!slot->node) /* a node in two records: the first one's, as lookups always found */
        *slot = (member_t){m[k], &c->f[i], NULL};
    }
  for (int i = 0; i < c->n_nodes; i++) {
    member_t *mb = member_at(c, api.node(g, i));
    for (int j = i + 1; mb && j < c->n_nodes && !mb->next; j++) {
      struct ggml_tensor *t = api.node(g, j);
      const member_t *o = member_at(c, t);
      if (computed(t) && !(o && o->f == mb->f))
        mb->next = t;
    }
    if (mb && !mb->next)
      atomic_store(&mb->f->untimed, 1);
  }
}

/* In a timed execution of tc (NULL: none is running), at the start of node dst (our custom
 * node fu, or NULL) on this thread: ends the thread's span, booking it to its record when it
 * ended where it should (else the record is never timed again), and starts dst's. */
static void span(gcache_t *tc, const struct ggml_tensor *dst, const fusion_t *fu)
{
  uint64_t now = ag_now_ns();
  uint32_t gen = atomic_load_explicit(&timed_gen, memory_order_relaxed);
  const member_t *m = tc && !tc->side ? member_at(tc, dst) : NULL;
  fusion_t *f = tl_span.f;
  if (f && tc && tl_span.gen == gen) {
    if (tl_span.m && dst != tl_span.m->next && !(m && m->f == f)) {
      atomic_store_explicit(&f->untimed, 1, memory_order_relaxed); /* ggml ran other nodes */
    } else {
      atomic_fetch_add_explicit(&f->tns, now - tl_span.t0, memory_order_relaxed);
      atomic_fetch_add_explicit(&f->tn, (uint32_t)tl_span.first, memory_order_relaxed);
    }
  }
  tl_span.f = NULL;
  if (!tc)
    return;
  fusion_t *next = m                                                ? m->f
                   : tc->side && fu >= tc->f && fu < tc->f + tc->nf ? (fusion_t *)fu
                                                                    : NULL;
  if (next && !atomic_load_explicit(&next->untimed, memory_order_relaxed))
    tl_span.f = next, tl_span.m = m, tl_span.t0 = now, tl_span.gen = gen,
    tl_span.first = tc->side || dst == next->first;
}

/* 1 when t is a later product of one of c's shared-input records. */
static int taken(const gcache_t *c, const struct ggml_tensor *t)
{
  for (int i = 0; i < c->nf; i++)
    for (int p = 1; c->f[i].kind == FU_SHARED_INPUT && p < c->f[i].nprod; p++)
      if (c->f[i].prod[p] == t)
        return 1;
  return 0;
}

/* The kernel a record runs (NULL: none yet); a shared-input record's products' kernels are
 * noted in pvariant, and it has one only when each product has. */
static void *record_variant(fusion_t *f)
{
  if (f->kind == FU_MM_ADD) { /* its own kernel, else its product's (then ggml's ADD) */
    f->pvariant[0] = atomic_load_explicit(&f->pke[0]->variant, memory_order_acquire);
    f->pvariant[1] = atomic_load_explicit(&f->ke->variant, memory_order_acquire);
    return f->pvariant[1] ? f->pvariant[1] : f->pvariant[0];
  }
  if (f->kind != FU_SHARED_INPUT)
    return atomic_load_explicit(&f->ke->variant, memory_order_acquire);
  void *all = f; /* any non-NULL token while every product has its kernel */
  for (int p = 0; p < f->nprod; p++)
    if (!(f->pvariant[p] = atomic_load_explicit(&f->pke[p]->variant, memory_order_acquire)))
      all = NULL;
  return all ? f->pvariant[0] : NULL;
}

/* 1 when a record's kernels are no longer those its cached graph was built with. */
static int record_stale(const fusion_t *f)
{
  if (f->kind == FU_MM_ADD)
    return atomic_load_explicit(&f->pke[0]->variant, memory_order_acquire) != f->pvariant[0] ||
           atomic_load_explicit(&f->ke->variant, memory_order_acquire) != f->pvariant[1];
  if (f->kind != FU_SHARED_INPUT)
    return atomic_load_explicit(&f->ke->variant, memory_order_acquire) != f->variant;
  for (int p = 0; p < f->nprod; p++)
    if (atomic_load_explicit(&f->pke[p]->variant, memory_order_acquire) != f->pvariant[p])
      return 1;
  return 0;
}

/* 1 when t is a later product of a shared-input record that runs as one node. */
static int moved(const gcache_t *c, const struct ggml_tensor *t)
{
  for (int i = 0; i < c->nf; i++)
    for (int p = 1; c->f[i].kind == FU_SHARED_INPUT && c->f[i].variant && p < c->f[i].nprod; p++)
      if (c->f[i].prod[p] == t)
        return 1;
  return 0;
}

/* The cache entry of g, found or made (its groups found). gcache_mu held. */
static gcache_t *gcache_of(struct ggml_cgraph *g)
{
  int n = api.n_nodes(g);
  uint64_t h = graph_hash(g, n);
  for (int i = 0; i < GCACHE_MAX; i++)
    if (gcache[i].orig == g && gcache[i].n_nodes == n && gcache[i].hash == h)
      return &gcache[i];
  gcache_t *c = NULL; /* the next slot no computation is using */
  for (int k = 0; k < GCACHE_MAX && !c; k++) {
    gcache_t *s = &gcache[(gcache_next + k) % GCACHE_MAX];
    c = s->busy ? NULL : s;
  }
  if (!c)
    return NULL;
  gcache_next = (int)(c - gcache + 1) % GCACHE_MAX;
  gcache_clear(c);
  *c = (gcache_t){.orig = g, .n_nodes = n, .hash = h};
  for (int i = 0; i < n; i++) {
    fusion_t f;
    ag_sig_t k;
    ag_sig_t kk = {0};
    if (taken(c, api.node(g, i))) /* a later product of a shared-input record */
      continue;
    if (find_group(g, n, i, &f, 1)) /* one signature per row length: the kernel takes the rows */
      k = ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_FUSED, GGML_TYPE_F32, GGML_TYPE_F32, 0,
                      AG_FUSE_ADD_RMS_MUL, 0, 0, (int32_t)f.n, 0, 0, 0, 0, 0);
    else if (find_swiglu(g, n, i, &f)) { /* its own signature; its products' kernel */
      kk = key_of(f.gate);
      k = ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_FUSED, (uint8_t)f.gate->src[0]->type,
                      GGML_TYPE_F32, GGML_TYPE_F32 + 1, AG_FUSE_MM_SWIGLU, 0, 0, kk.m, kk.n, kk.k,
                      1, 1, 0);
    } else if (find_shared(g, n, i, &f)) { /* its own signature; each product's kernel */
      int32_t rows = 0;
      for (int p = 0; p < f.nprod; p++) {
        ag_sig_t pk = key_of(f.prod[p]);
        rows += pk.m;
        if (!(f.pke[p] = ag_table_get(ag_table, &pk)))
          break;
      }
      kk = key_of(f.mul);
      k = ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_FUSED, (uint8_t)f.mul->src[0]->type,
                      GGML_TYPE_F32, GGML_TYPE_F32 + 1, AG_FUSE_SHARED_INPUT, (uint8_t)f.nprod, 0,
                      rows, kk.n, kk.k, 1, 1, 0);
    } else if (find_mm_add(g, n, i, &f)) { /* its own signature and kernel */
      kk = key_of(f.prod[0]);
      k = ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_FUSED, (uint8_t)f.prod[0]->src[0]->type,
                      GGML_TYPE_F32, GGML_TYPE_F32 + 1, AG_FUSE_MM_ADD, 0, 0, kk.m, kk.n, kk.k, 1,
                      1, 0);
      kk = ag_sig_mm_add_product(&k); /* the product's signature: whether it is hot */
      if (!(f.pke[0] = ag_table_get(ag_table, &kk)))
        break;
    } else if (find_mm(g, i, &f)) /* the node's own signature: its profile is the original's */
      k = key_of(f.mul);
    else if (find_group(g, n, i, &f, 0)) /* a norm whose ADD a MUL_MAT + ADD took */
      k = ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_FUSED, GGML_TYPE_F32, GGML_TYPE_F32, 0,
                      AG_FUSE_RMS_MUL, 0, 0, (int32_t)f.n, 0, 0, 0, 0, 0);
    else
      continue;
    int full = f.kind == FU_SHARED_INPUT && !f.pke[f.nprod - 1];
    if (full || !(f.e = ag_table_get(ag_table, &k)) ||
        !(f.ke = f.kind == FU_SWIGLU         ? ag_table_get(ag_table, &kk)
                 : f.kind == FU_SHARED_INPUT ? f.pke[0]
                                             : f.e))
      break; /* the table is full */
    fusion_t *grown = realloc(c->f, (size_t)(c->nf + 1) * sizeof *grown);
    if (!grown)
      break;
    c->f = grown;
    c->f[c->nf++] = f;
    i += f.span - 1;
  }
  return c;
}

/* Rebuilds c's graph with the groups whose kernel is published. Returns 0, or -1 (the host's
 * graph runs). gcache_mu held. */
static int rebuild(gcache_t *c, struct ggml_cgraph *g)
{
  if (c->ctx)
    api.free(c->ctx), c->ctx = NULL, c->graph = NULL;
  int fused = 0;
  for (int i = 0; i < c->nf; i++) {
    fusion_t *f = &c->f[i];
    f->variant = record_variant(f);
    f->node = NULL;
    fused += f->variant != NULL;
  }
  free(c->map);
  c->map = NULL;
  if (!fused)
    return 0;
  size_t size = (size_t)c->n_nodes;
  struct ggml_init_params ip = {
      api.graph_overhead(size, false) + (size_t)fused * api.tensor_overhead() + 4096, NULL, true};
  if (!(c->ctx = api.init(ip)) || !(c->graph = api.new_graph(c->ctx, size, false))) {
    if (c->ctx)
      api.free(c->ctx);
    c->ctx = NULL, c->graph = NULL;
    return -1;
  }
  int next = 0;
  for (int i = 0; i < c->n_nodes; i++) {
    struct ggml_tensor *t = api.node(g, i);
    fusion_t *f = next < c->nf && c->f[next].first == t ? &c->f[next] : NULL;
    if (!f && moved(c, t)) /* computed earlier, with the first product of its input */
      continue;
    if (!f) {
      api.add_node(c->graph, t);
      continue;
    }
    next++;
    if (!f->variant) {
      api.add_node(c->graph, t);
      continue;
    }
    /* the custom node's sources: what its kernel reads, for ggml's dependency order */
    struct ggml_tensor *args[1 + SHARED_MAX];
    ggml_custom_op_t fun;
    int nargs = 3;
    if (f->kind == FU_SHARED_INPUT) {
      args[0] = f->mul->src[1], nargs = 1 + f->nprod, fun = shared_node;
      for (int p = 0; p < f->nprod; p++)
        args[1 + p] = f->prod[p]->src[0];
    } else if (f->kind == FU_MUL_MAT)
      args[0] = f->mul->src[0], args[1] = f->mul->src[1], nargs = 2, fun = mul_mat_node;
    else if (f->kind == FU_MM_ADD)
      args[0] = f->prod[0]->src[0], args[1] = f->prod[0]->src[1],
      args[2] = (struct ggml_tensor *)residual_of(f), fun = mul_mat_node;
    else if (f->kind == FU_RMS_MUL)
      args[0] = f->rms->src[0], args[1] = f->mul->src[1], nargs = 2, fun = fused_add_rms_mul;
    else if (f->kind == FU_SWIGLU)
      args[0] = f->gate->src[0], args[1] = f->up->src[0], args[2] = f->gate->src[1],
      fun = swiglu_node;
    else
      args[0] = f->add->src[0], args[1] = f->add->src[1], args[2] = f->mul->src[1],
      fun = fused_add_rms_mul;
    struct ggml_tensor *node =
        api.custom(c->ctx, GGML_TYPE_F32, f->mul->ne[0], f->mul->ne[1], f->mul->ne[2],
                   f->mul->ne[3], args, nargs, fun, -1 /* GGML_N_TASKS_MAX */, f);
    node->flags |= GGML_TENSOR_FLAG_COMPUTE;
    node->buffer = f->mul->buffer;
    node->data = f->mul->data;
    f->node = node;
    api.add_node(c->graph, node);
    i += f->span - 1; /* the group's other nodes are in the custom node */
  }
  map_members(c, g);
  return 0;
}

/* The signature whose kernel a fused record runs: the one the rounds judge it under; NULL
 * when its products' kernels are not one (it is not judged). */
static ag_entry_t *judged(const fusion_t *f)
{
  if (f->kind == FU_MM_ADD)
    return f->pvariant[1] ? f->ke : f->pke[0];
  for (int p = 1; f->kind == FU_SHARED_INPUT && p < f->nprod; p++)
    if (f->pke[p] != f->pke[0])
      return NULL;
  return f->kind == FU_SHARED_INPUT ? f->pke[0] : f->ke;
}

/* Starts this execution of c (which has a rebuilt graph) as its place in the rounds asks:
 * returns 1 when it computes the host's graph. On the rebuilt side a kernel with verifications
 * left verifies (takes one). The timed one of each side is timed unless another execution is
 * (one at a time) or a kernel verifies in it (c->timing). The host's
 * execution counts each fused norm or MUL_MAT + ADD group as nth calls of its signature,
 * ggml's. gcache_mu held. */
static int round_start(gcache_t *c, int nth)
{
  uint64_t every = test && test->round_every   ? test->round_every
                   : c->rounds < AG_CMP_ROUNDS ? ROUND_EVERY
                                               : ROUND_EVERY_DECIDED;
  uint64_t k = ++c->execs % every; /* a graph's first executions are all fused */
  c->rounds += k == every - 2;
  c->side = k < every - 2;
  c->timing = k == every - 1 || (k == 1 && c->execs > every);
  for (int i = 0; i < c->nf; i++) {
    fusion_t *f = &c->f[i];
    /* a kernel verifies in an execution that runs it (a MUL_MAT + ADD without its kernel
     * checks its product's) */
    ag_entry_t *ve = f->kind == FU_MM_ADD && !f->pvariant[1] ? f->pke[0] : f->ke;
    f->verifying = c->side && f->node && !(test && test->unverified) &&
                   atomic_load(&ve->verify) > 0 && atomic_fetch_sub(&ve->verify, 1) > 0;
    c->timing &= !f->verifying;
    if (!c->side && f->node &&
        (f->kind == FU_ADD_RMS_MUL || f->kind == FU_RMS_MUL || f->kind == FU_MM_ADD))
      atomic_fetch_add_explicit(&f->e->calls, (uint64_t)nth, memory_order_relaxed);
  }
  gcache_t *none = NULL;
  if (c->timing && c->map && atomic_compare_exchange_strong(&timed, &none, c)) {
    for (int i = 0; i < c->nf; i++)
      atomic_store_explicit(&c->f[i].tn, 0, memory_order_relaxed),
          atomic_store_explicit(&c->f[i].tns, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&timed_gen, 1, memory_order_release);
  } else {
    c->timing = 0;
  }
  return !c->side;
}

/* After a timed execution of c: hands its records' times to the judge, under the signature
 * each one's kernel is: the host's side as one burst of the original's warm calls, the rebuilt
 * side as the variant's timed calls, which closes the round of each signature whose original
 * has been timed since its last one. An execution in which a record took 8 times its side's
 * mean so far (a thread preempted at a barrier, on a loaded machine) is left out whole: its
 * records share signatures, whose rounds must weigh the same records on both sides.
 * gcache_mu held. */
static void round_book(gcache_t *c)
{
  int side = c->side, disturbed = 0;
  for (int i = 0; i < c->nf; i++) {
    fusion_t *f = &c->f[i];
    f->bn = atomic_exchange_explicit(&f->tn, 0, memory_order_relaxed);
    f->bns = atomic_exchange_explicit(&f->tns, 0, memory_order_relaxed);
    if (!f->node || !judged(f) || atomic_load_explicit(&f->untimed, memory_order_relaxed))
      f->bn = 0;
    disturbed |=
        f->bn && f->tk[side] >= 2 && (double)f->bns > 8.0 * f->bn * (f->tsum[side] / f->tk[side]);
  }
  for (int i = 0; i < c->nf && !disturbed; i++) {
    fusion_t *f = &c->f[i];
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
}

#define FIRST_GRAPH_WARM_WAIT_MS 100 /* the first graph's wait for the warm start, at most */

/* The graph to compute in place of g: its cached rebuild with the published fusions, or g.
 * An unfused group counts as nth calls of its signature (one per thread, as a fused one is
 * counted), so the profile of later runs knows it. *slot is the cache entry the computation
 * uses (busy until fused_done), or NULL. */
static struct ggml_cgraph *fused_graph(struct ggml_cgraph *g, int nth, gcache_t **slot)
{
  *slot = NULL;
  /* The first graph activates the agent (and its warm start) before it runs, so that stored
   * fusions apply from the first graph on. */
  if (!atomic_load_explicit(&ag_active, memory_order_acquire) && ag_activate())
    return g;
  if (!ag_table)
    return g;
  /* ... and waits for the warm start to place them (a first call waits 500 us at most; it
   * took 2-10 ms here): the first graph is usually a prompt's prefill, tens to hundreds of
   * milliseconds that would otherwise run without the stored kernels. */
  static _Atomic int warm_waited;
  if (!atomic_load_explicit(&warm_waited, memory_order_relaxed) &&
      !atomic_exchange(&warm_waited, 1))
    ag_warm_wait(FIRST_GRAPH_WARM_WAIT_MS);
  pthread_mutex_lock(&gcache_mu);
  gcache_t *c = gcache_of(g);
  if (!c) { /* every slot is in use by other computations */
    pthread_mutex_unlock(&gcache_mu);
    return g;
  }
  int stale = 0;
  for (int i = 0; i < c->nf; i++) {
    fusion_t *f = &c->f[i];
    stale |= record_stale(f);
    if ((f->kind != FU_ADD_RMS_MUL && f->kind != FU_RMS_MUL && f->kind != FU_MM_ADD) ||
        atomic_load_explicit(&f->ke->variant, memory_order_acquire))
      continue; /* fused, or groups of MUL_MATs whose kernel is theirs, counted as such */
    /* Without its kernel, a MUL_MAT + ADD's product runs as ggml's MUL_MAT or its own kernel,
     * timed under its own signature: when that is hot, so is the group (fused, its own calls
     * are timed). */
    uint32_t pt = f->kind == FU_MM_ADD ? atomic_load(&f->pke[0]->tier) : AG_TIER_COLD;
    if ((pt == AG_TIER_QUEUED || pt == AG_TIER_READY) && !f->asked &&
        atomic_load(&f->e->tier) == AG_TIER_COLD) { /* once: a failure or deferral stands */
      f->asked = 1;
      ag_tier_queue(f->e, "its MUL_MAT is hot");
    }
    if (f->node) /* runs as its product's kernel and the ADD: forward() books it */
      continue;
    uint64_t n = atomic_fetch_add_explicit(&f->e->calls, (uint64_t)nth, memory_order_relaxed) +
                 (uint64_t)nth;
    ag_tier_hot(f->e, n); /* cheap unless cold and hot: compiled, and again after an eviction */
  }
  if (stale && c->busy) { /* another thread computes the old rebuild: not now */
    pthread_mutex_unlock(&gcache_mu);
    return g;
  }
  if (stale && rebuild(c, g))
    ag_log_once(AG_LOG_WARN, "cannot build a fused ggml graph: graphs run unfused");
  struct ggml_cgraph *use = c->graph ? c->graph : g;
  if (c->graph)
    c->busy++, *slot = c;
  for (int i = 0; use != g && i < c->nf; i++) /* outputs move when ggml reallocates */
    if (c->f[i].node)
      c->f[i].node->data = c->f[i].mul->data;
  if (c->graph && round_start(c, nth))
    use = g;
  pthread_mutex_unlock(&gcache_mu);
  return use;
}

static void fused_done(gcache_t *slot)
{
  if (!slot)
    return;
  pthread_mutex_lock(&gcache_mu);
  slot->busy--;
  if (slot->timing) {
    atomic_store_explicit(&timed, NULL, memory_order_release);
    slot->timing = 0;
    round_book(slot);
  }
  pthread_mutex_unlock(&gcache_mu);
}

typedef enum ggml_status (*graph_compute_fn)(struct ggml_cgraph *, struct ggml_cplan *);

/* The CPU backend computes each graph split here (ggml-cpu.h). */
AG_EXPORT enum ggml_status ggml_graph_compute(struct ggml_cgraph *g, struct ggml_cplan *cplan)
{
  static void *_Atomic real;
  graph_compute_fn fn =
      (graph_compute_fn)(void *)real_of(&real, "ggml_graph_compute", __builtin_return_address(0));
  if (atomic_load_explicit(&gg_state, memory_order_acquire) != GG_PROFILE) {
    pthread_once(&gg_once, check);
    if (atomic_load(&gg_state) != GG_PROFILE)
      return fn(g, cplan);
  }
  static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
  pthread_once(&setup_once, fusion_setup);
  if (!fusion_on || cplan->use_ref) /* reference implementations asked for: the host's graph */
    return fn(g, cplan);
  gcache_t *slot;
  enum ggml_status rc =
      fn(fused_graph(g, cplan->n_threads > 0 ? cplan->n_threads : 1, &slot), cplan);
  fused_done(slot);
  return rc;
}

#define GG_DEFINE(op)                                                                              \
  AG_EXPORT void ggml_compute_forward_##op(const void *params, struct ggml_tensor *dst)            \
  {                                                                                                \
    static void *_Atomic real;                                                                     \
    forward(&real, "ggml_compute_forward_" #op, __builtin_return_address(0), params, dst);         \
  }
GG_OPS(GG_DEFINE)
