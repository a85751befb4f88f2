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
 * Only the forward functions whose signature is (params, dst) in those headers are defined. */
#define _GNU_SOURCE
#include "../agent.h"
#include "../log.h"
#include "../opt.h"

#include "ggml.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The forward functions of ggml-cpu's ops.h with the (params, dst) signature. */
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
  const char *(*version)(void) = base ? (const char *(*)(void))dlsym(base, "ggml_version") : NULL;
  const char *(*op_name)(int) = base ? (const char *(*)(int))dlsym(base, "ggml_op_name") : NULL;
  const char *(*type_name)(int) = base ? (const char *(*)(int))dlsym(base, "ggml_type_name") : NULL;
  const char *(*unary_name)(int) = base ? (const char *(*)(int))dlsym(base, "ggml_unary_op_name") : NULL;
  const char *(*glu_name)(int) = base ? (const char *(*)(int))dlsym(base, "ggml_glu_op_name") : NULL;
  /* A test may pretend the agent was built for another ggml. */
  const char *want = getenv("OPJIT_TEST_GGML_VERSION") ? getenv("OPJIT_TEST_GGML_VERSION")
                                                       : OPJIT_GGML_VERSION;
  const char *have = version ? version() : NULL;
  int ok = have && op_name && type_name && unary_name && glu_name && strcmp(have, want) == 0;
  for (size_t i = 0; ok && i < sizeof anchors / sizeof *anchors; i++) {
    const char *n = op_name(anchors[i].op);
    ok = n && (!anchors[i].name || strcmp(n, anchors[i].name) == 0);
  }
  if (base)
    dlclose(base);
  if (!ok) {
    ag_log(AG_LOG_WARN, "ggml %s is not the ggml this agent was built for (%s, its op table): "
                        "its graphs run untouched and unprofiled", have ? have : "(unknown)",
           want);
    atomic_store(&gg_state, GG_PASS);
    return;
  }
  for (int i = 0; i < GGML_OP_COUNT; i++)
    op_names[i] = op_name(i);
  for (int i = 0; i < GGML_TYPE_COUNT; i++)
    type_names[i] = type_name(i);
  for (int i = 0; i < GGML_UNARY_OP_COUNT; i++)
    unary_names[i] = unary_name(i);
  for (int i = 0; i < GGML_GLU_OP_COUNT; i++)
    glu_names[i] = glu_name(i);
  ag_sig_set_ggml_names(&(ag_ggml_names_t){op_names, type_names, unary_names, glu_names,
                                           GGML_OP_COUNT, GGML_TYPE_COUNT, GGML_UNARY_OP_COUNT,
                                           GGML_GLU_OP_COUNT, GGML_OP_UNARY, GGML_OP_GLU,
                                           GGML_OP_MUL_MAT});
  ag_log(AG_LOG_INFO, "ggml %s: profiling its graphs by op", have);
  atomic_store(&gg_state, GG_PROFILE);
}

typedef void (*forward_fn)(const void *params, struct ggml_tensor *dst);

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
  ag_sig_t k = key_of(dst);
  ag_call_t c;
  if (!ag_call_begin_host(&c, &k, 1)) {
    fn(params, dst);
    return;
  }
  fn(params, dst);
  ag_call_end(&c);
}

#define GG_DEFINE(op)                                                                        \
  AG_EXPORT void ggml_compute_forward_##op(const void *params, struct ggml_tensor *dst)      \
  {                                                                                          \
    static void *_Atomic real;                                                               \
    forward(&real, "ggml_compute_forward_" #op, __builtin_return_address(0), params, dst);   \
  }
GG_OPS(GG_DEFINE)
