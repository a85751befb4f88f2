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
 * fusion would not fire in it). A record lists its implementations, best first — its own
 * kernel, its products' kernels — before ggml's nodes; each graph build runs the first whose
 * kernels are all published (a MUL_MAT + ADD runs its product's kernel and ggml's ADD until
 * its own exists). Never slower: a graph that runs fused records alternates with the host's
 * own in rounds, both warm, each record timed on each side (forward), and the tiers' judge
 * (compare.h) demotes a kernel that loses: its records run ggml's nodes again.
 *
 * This file holds the entry points and the graph to compute; ggml_host.h maps the others
 * (matching, rewriting, kernels, rounds, the test seam). */
#define _GNU_SOURCE
#include "ggml_host.h"

#include "../host.h"
#include "../log.h"
#include "../opt.h"
#include "../tier.h"

_Static_assert((int)GGML_TYPE_F32 == (int)AG_GGML_TYPE_F32 &&
                   (int)GGML_TYPE_F16 == (int)AG_GGML_TYPE_F16 &&
                   (int)GGML_OP_MUL_MAT == (int)AG_GGML_OP_MUL_MAT,
               "sig.h's ggml numbers");

#include <dlfcn.h>
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

gg_api_t gg_api;

static int fusion_on; /* graphs are fused (jit mode, OPJIT_TEST_FUSION not "off") */

/* Decides, once, whether this process's ggml is one to profile. */
static void check(void)
{
  ag_init();
  int on = (ag_opts.num[AG_OPT_HOSTS] & AG_HOST_BIT(ggml)) && atomic_load(&ag_state) != AG_PASS;
  if (!on) {
    atomic_store(&gg_state, GG_PASS);
    return;
  }
  void *base = dlopen("libggml-base.so", RTLD_NOLOAD | RTLD_LAZY);
#define SYM(f, name) *(void **)&gg_api.f = base ? dlsym(base, name) : NULL
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
  SYM(buffer_type, "ggml_backend_buffer_get_type");
  SYM(buft_name, "ggml_backend_buft_name");
#undef SYM
  if (base)
    dlclose(base); /* libggml-base stays: the backend needs it */
  /* A test may pretend the agent was built for another ggml. */
  const char *want =
      getenv("OPJIT_TEST_GGML_VERSION") ? getenv("OPJIT_TEST_GGML_VERSION") : OPJIT_GGML_VERSION;
  const char *have = gg_api.version ? gg_api.version() : NULL;
  int ok = have && gg_api.op_name && gg_api.type_name && gg_api.unary_name && gg_api.glu_name &&
           strcmp(have, want) == 0;
  for (size_t i = 0; ok && i < sizeof anchors / sizeof *anchors; i++) {
    const char *n = gg_api.op_name(anchors[i].op);
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
    op_names[i] = gg_api.op_name(i);
  for (int i = 0; i < GGML_TYPE_COUNT; i++)
    type_names[i] = gg_api.type_name(i);
  for (int i = 0; i < GGML_UNARY_OP_COUNT; i++)
    unary_names[i] = gg_api.unary_name(i);
  for (int i = 0; i < GGML_GLU_OP_COUNT; i++)
    glu_names[i] = gg_api.glu_name(i);
  ag_ggml_set_names(&(ag_ggml_names_t){
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
static gg_forward_fn real_of(void *_Atomic *cache, const char *name, const void *ret)
{
  void *fn = atomic_load_explicit(cache, memory_order_acquire);
  if (ag_likely(fn != NULL))
    return (gg_forward_fn)fn;
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
  return (gg_forward_fn)fn;
}

int gg_w16(const struct ggml_tensor *w)
{
  if (!w->extra)
    return w->type == GGML_TYPE_F16 ? 1 : w->type == GGML_TYPE_F32 ? 0 : -1;
  if (w->type != GGML_TYPE_F16 || !w->buffer || !gg_api.buffer_type || !gg_api.buft_name)
    return -1;
  void *t = gg_api.buffer_type(w->buffer);
  const char *name = t ? gg_api.buft_name(t) : NULL;
  return name && strcmp(name, "AMX") == 0 ? 2 : -1; /* its F16 weights are copied as they are */
}

ag_sig_t gg_key_of(const struct ggml_tensor *dst)
{
  const struct ggml_tensor *s0 = dst->src[0], *s1 = dst->src[1];
  int sub = dst->op == GGML_OP_UNARY || dst->op == GGML_OP_GLU ? dst->op_params[0] : 0;
  int64_t rows = dst->ne[2]; /* decode's attention: one signature for any rows (ggml_key.h) */
  if (dst->op == GGML_OP_FLASH_ATTN_EXT && rows < AG_GGML_FA_MIN_ROWS)
    rows = 1;
  return ag_ggml_node_key(&(ag_ggml_node_t){
      .op = (uint8_t)dst->op,
      .src0_type = (uint8_t)(s0 ? s0->type : dst->type),
      .type = (uint8_t)dst->type,
      .has_src1 = s1 != NULL,
      .src1_type = (uint8_t)(s1 ? s1->type : 0),
      .subop = (uint8_t)sub,
      .ne = {(int32_t)dst->ne[0], (int32_t)dst->ne[1], (int32_t)rows, (int32_t)dst->ne[3]},
      .src0_ne0 = (int32_t)(s0 ? s0->ne[0] : 0),
      .amx = dst->op == GGML_OP_MUL_MAT && s0 && s0->extra && gg_w16(s0) == 2});
}

typedef bool (*gg_extra_fn)(const void *params, struct ggml_tensor *dst);

/* Runs node dst's work: ggml's forward function fn, or (xfn set) the extra buffer types' own
 * computation, whose answer (whether it computed dst) is returned. */
static bool run_real(gg_forward_fn fn, gg_extra_fn xfn, const void *params, struct ggml_tensor *dst)
{
  if (xfn)
    return xfn(params, dst);
  fn(params, dst);
  return true;
}

/* Node dst's share of work on this thread: ggml's own forward function fn (or extra buffer
 * computation xfn), counted and timed under the node's signature, or under its record's when
 * dst is one of the agent's custom nodes (whose function then runs the record's kernels). */
static bool forward_with(gg_forward_fn fn, gg_extra_fn xfn, const void *params,
                         struct ggml_tensor *dst)
{
  if (ag_unlikely(atomic_load_explicit(&gg_state, memory_order_acquire) != GG_PROFILE)) {
    pthread_once(&gg_once, check);
    if (atomic_load(&gg_state) != GG_PROFILE)
      return run_real(fn, xfn, params, dst);
  }
  const gg_fusion_t *fu = gg_our_custom(dst);
  /* The timed and the hosted entries may be another computation's, which can end and be
   * rebuilt meanwhile: they are read pinned (ggml_host.h), with one pin when they are one
   * entry (the host's timed execution): each side of a round pins once a node. */
  gg_cache_t *tc = NULL;
  if (ag_unlikely(atomic_load_explicit(&gg_timed, memory_order_relaxed) != NULL ||
                  gg_span_open()) &&
      !ag_tl.depth) { /* not a tail call's */
    tc = gg_pin(&gg_timed);
    gg_span(tc, dst, fu);
  }
  /* The rounds alone time the custom nodes for the judge, and the host's nodes of their
   * records in a round (spans, barriers included, as the custom nodes' are). The pins end
   * here, before the call's booking (a pin lasts a lookup or a span's booking: owners spin on
   * it holding gg_cache_mu). */
  gg_cache_t *hc = tc && atomic_load(&gg_hosted) == tc ? tc : gg_pin(&gg_hosted);
  int hosted = hc && gg_member_at(hc, dst);
  if (hc != tc)
    gg_unpin(hc);
  gg_unpin(tc);
  /* a custom node is booked under its implementation's signature */
  ag_sig_t k = fu ? gg_used(fu)->book->key : gg_key_of(dst);
  ag_call_t c;
  if (!ag_call_begin_host(&c, &k, 1))
    return run_real(fn, xfn, params, dst);
  if (fu || hosted)
    c.t0 = 0;
  c.variant = fu != NULL; /* the fused kernel serves this group */
  bool done = run_real(fn, xfn, params, dst);
  if (ag_unlikely(gg_test != NULL) && hosted) { /* pinned again for the test's hook */
    hc = gg_pin(&gg_hosted);
    const gg_member_t *hm = hc ? gg_member_at(hc, dst) : NULL;
    if (hm)
      gg_test->hosted(hm->f);
    gg_unpin(hc);
  }
  ag_call_end(&c);
  return done;
}

static void forward(void *_Atomic *cache, const char *name, const void *ret, const void *params,
                    struct ggml_tensor *dst)
{
  forward_with(real_of(cache, name, ret), NULL, params, dst);
}

/* ggml's CPU backend offers every node to its extra buffer types first, here: the AMX buffer
 * computes the MUL_MATs of the f16 weights it holds (gg_w16 2) and no forward function is
 * called for them. Those nodes are counted, timed, sampled and spanned by the rounds as
 * forward() does any node (their records' products get hot by their measured cost, and ggml's
 * side of their records is timed for the judge); every other node passes straight through (a
 * product the buffer declines, never seen here, would then be counted twice: once here, once
 * in its forward function). */
AG_EXPORT bool ggml_cpu_extra_compute_forward(const void *params, struct ggml_tensor *dst)
{
  static void *_Atomic real;
  gg_extra_fn fn = (gg_extra_fn)(void *)real_of(&real, "ggml_cpu_extra_compute_forward",
                                                __builtin_return_address(0));
  const struct ggml_tensor *w = dst->src[0];
  if (dst->op != GGML_OP_MUL_MAT || !w || !w->extra ||
      atomic_load_explicit(&gg_state, memory_order_acquire) != GG_PROFILE || gg_w16(w) != 2)
    return fn(params, dst);
  return forward_with(NULL, fn, params, dst);
}

/* Decides the fusion mode and resolves the backend's own ops, once (after check() accepted
 * this ggml). */
static void fusion_setup(void)
{
  const char *t = getenv("OPJIT_TEST_FUSION");
  fusion_on = ag_hot_calls && !(t && strcmp(t, "off") == 0);
  gg_test = t ? gg_test_of(t) : NULL;
  void *cpu = atomic_load(&cpu_lib);
  if (!cpu) {
    fusion_on = 0;
    return;
  }
  *(void **)&gg_api.add = dlsym(cpu, "ggml_compute_forward_add");
  *(void **)&gg_api.rms_norm = dlsym(cpu, "ggml_compute_forward_rms_norm");
  *(void **)&gg_api.mul = dlsym(cpu, "ggml_compute_forward_mul");
  *(void **)&gg_api.swiglu = dlsym(cpu, "ggml_vec_swiglu_f32"); /* without it: no SWIGLU fusion */
  int ok = gg_api.n_nodes && gg_api.node && gg_api.init && gg_api.free && gg_api.new_graph &&
           gg_api.add_node && gg_api.graph_overhead && gg_api.tensor_overhead &&
           gg_api.contiguous && gg_api.custom && gg_api.nbytes && gg_api.add && gg_api.rms_norm &&
           gg_api.mul;
  if (!ok)
    fusion_on = 0;
}

#define FIRST_GRAPH_WARM_WAIT_MS 100 /* the first graph's wait for the warm start, at most */

/* The graph to compute in place of g: its cached rebuild with the published fusions, or g.
 * An unfused record of a counted kind counts as nth calls of its signature (one per thread, as a fused one is
 * counted), so the profile of later runs knows it. *slot is the cache entry the computation
 * uses (busy until fused_done), or NULL; *round is 1 when the computation has its place in the
 * entry's rounds (gg_round_start): the first of the computations running it at once, whose
 * rounds' state (side, timing, spans) the others would overwrite. */
static struct ggml_cgraph *fused_graph(struct ggml_cgraph *g, int nth, gg_cache_t **slot,
                                       int *round)
{
  *slot = NULL, *round = 0;
  /* The first graph activates the agent (and its warm start) before it runs, so that stored
   * fusions apply from the first graph on. */
  if (!ag_is_active() && ag_activate())
    return g;
  if (!ag_table)
    return g;
  /* ... and waits for the warm start to place them (a first call does not wait for it by
   * default; it took 2-10 ms here): the first graph is usually a prompt's prefill, tens to hundreds of
   * milliseconds that would otherwise run without the stored kernels. */
  static _Atomic int warm_waited;
  if (!atomic_load_explicit(&warm_waited, memory_order_relaxed) &&
      !atomic_exchange(&warm_waited, 1))
    ag_warm_wait(FIRST_GRAPH_WARM_WAIT_MS);
  pthread_mutex_lock(&gg_cache_mu);
  gg_cache_t *c = gg_cache_of(g);
  if (!c) { /* every slot is in use by other computations */
    pthread_mutex_unlock(&gg_cache_mu);
    return g;
  }
  int stale = c->lost;
  for (int i = 0; i < c->nf; i++) {
    gg_fusion_t *f = &c->f[i];
    stale |= gg_stale(f);
    if (!f->kind->counted || atomic_load_explicit(&f->impl[0].k[0]->variant, memory_order_acquire))
      continue; /* fused, or a kind whose kernels ggml's own nodes count */
    /* Without its own kernel, a record runs its products' (a MUL_MAT + ADD's product, as
     * ggml's MUL_MAT or its own kernel), timed under their signature: when that is hot, so is
     * the record (fused, its own calls are timed). */
    for (int l = 1; l < f->nimpl && !f->asked; l++) {
      uint32_t pt = atomic_load(&f->impl[l].k[0]->tier);
      if ((pt == AG_TIER_QUEUED || pt == AG_TIER_READY) &&
          atomic_load(&f->e->tier) == AG_TIER_COLD) { /* once: a failure or deferral stands */
        f->asked = 1;
        ag_tier_queue(f->e, "its products' kernel is hot");
      }
    }
    if (f->node) /* runs its products' kernels: forward() books it */
      continue;
    uint64_t n = atomic_fetch_add_explicit(&f->e->calls, (uint64_t)nth, memory_order_relaxed) +
                 (uint64_t)nth;
    ag_tier_hot(f->e, n); /* cheap unless cold and hot: compiled, and again after an eviction */
  }
  if (stale && c->busy) { /* another thread computes the old rebuild: not now */
    pthread_mutex_unlock(&gg_cache_mu);
    return g;
  }
  if (stale && gg_rebuild(c, g))
    ag_log_once(AG_LOG_WARN, "cannot build a fused ggml graph: graphs run unfused");
  struct ggml_cgraph *use = c->graph ? c->graph : g;
  if (c->graph)
    c->busy++, *slot = c;
  for (int i = 0; use != g && i < c->nf; i++) /* outputs move when ggml reallocates */
    if (c->f[i].node)
      c->f[i].node->data = c->f[i].mul->data;
  *round = c->graph && c->busy == 1;
  if (*round && gg_round_start(c, nth))
    use = g;
  pthread_mutex_unlock(&gg_cache_mu);
  return use;
}

/* The computation that used slot ended (round: it had its place in the rounds). The clears
 * are sequentially consistent: a reader pinning slot after them sees them (gg_pin_slow). */
static void fused_done(gg_cache_t *slot, int round)
{
  if (!slot)
    return;
  pthread_mutex_lock(&gg_cache_mu);
  slot->busy--;
  if (round && slot->hosting) {
    atomic_store(&gg_hosted, NULL);
    slot->hosting = 0;
  }
  if (round && slot->timing) {
    atomic_store(&gg_timed, NULL);
    slot->timing = 0;
    gg_round_book(slot);
  }
  pthread_mutex_unlock(&gg_cache_mu);
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
  /* The graph's threads wait for each other after every node: a sample stops them all. */
  sp_lockstep(cplan->n_threads);
  static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
  pthread_once(&setup_once, fusion_setup);
  if (!fusion_on || cplan->use_ref) /* reference implementations asked for: the host's graph */
    return fn(g, cplan);
  gg_cache_t *slot;
  int round;
  enum ggml_status rc =
      fn(fused_graph(g, cplan->n_threads > 0 ? cplan->n_threads : 1, &slot, &round), cplan);
  fused_done(slot, round);
  return rc;
}

#define GG_DEFINE(op)                                                                              \
  AG_EXPORT void ggml_compute_forward_##op(const void *params, struct ggml_tensor *dst)            \
  {                                                                                                \
    static void *_Atomic real;                                                                     \
    forward(&real, "ggml_compute_forward_" #op, __builtin_return_address(0), params, dst);         \
  }
GG_OPS(GG_DEFINE)
