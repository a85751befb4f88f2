/* SPDX-License-Identifier: MIT */
/* A llama.cpp host for the ggml tests and benchmarks, on the shipped libraries
 * (@node-llama-cpp/linux-x64: libllama, libggml, the CPU backends loaded from their folder).
 *   write PATH EMBD LAYERS FF VOCAB f32|f16 SEED [HEAD KV_HEADS]
 *        writes a llama-architecture GGUF with random weights through the gguf API (head
 *        size HEAD, 64 by default, EMBD / HEAD heads on KV_HEADS K/V heads, by default as many:
 *        fewer group the heads as Llama 3's GQA does; llama.cpp's "test" vocabulary: token i is
 *        i in hex)
 *   run PATH PROMPT GEN THREADS [ROUNDS [SETTLE]]
 *        prefill PROMPT tokens (deterministic ids) in one batch, then GEN greedy decode steps;
 *        ROUNDS > 1 repeats both (the JIT settled as below, so that every compile a round asked
 *        for has ended, then the context emptied, after a pause of 3 s: a program serving its
 *        second prompt). SETTLE > 0: after the first round's decode step SETTLE, waits
 *        (opjit_settle, agent/opjit.h, when the agent is loaded) until the JIT has compiled
 *        what it queued, so the steps after it run whatever it published. Prints each round's
 *        generated tokens, then, of the last round, a checksum of every logit it computed and
 *        its tokens/s:
 *          tokens 17 3 99 ...
 *          logits sum S abs A
 *          probabilities sum P    (over the steps, each token id times its softmax probability:
 *                                  what tests/integration/llama_node.mjs prints)
 *          prefill T tok/s decode T tok/s
 *   pair PATH0 PATH1 PROMPT GEN THREADS REPEATS
 *        both models at once, each by its own context on a thread of its own (two llama
 *        contexts in one process, as node-llama-cpp's), each REPEATS times a PROMPT-token
 *        prefill and GEN greedy decode steps, the JIT settled after the first (as SETTLE);
 *        prints, of each model's last repeat, "model I", its tokens line and logits line
 *   bufts
 *        names the extra buffer types of the CPU backend ggml loads on this CPU, one a line:
 *        llama.cpp places there the weights they take ("AMX", on a CPU with AMX, takes f16
 *        weights, whose MUL_MATs ggml then computes with f32 activations, not rounded to f16)
 * Exits 1 on any failure, with a message. */
#include "ggml.h"
#include "ggml-backend.h"
#include "gguf.h"
#include "llama.h"

#include <dlfcn.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng;

static float gauss(void)
{
  double u = 0;
  for (int i = 0; i < 4; i++) { /* sum of uniforms: close enough to normal for weights */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    u += (double)(rng >> 11) / 9007199254740992.0;
  }
  return (float)(u - 2.0);
}

static void fill(struct ggml_tensor *t, float scale, int ones)
{
  int64_t n = ggml_nelements(t);
  for (int64_t i = 0; i < n; i++) {
    float v = ones ? 1.0f : gauss() * scale;
    if (t->type == GGML_TYPE_F16)
      ((ggml_fp16_t *)t->data)[i] = ggml_fp32_to_fp16(v);
    else
      ((float *)t->data)[i] = v;
  }
}

static int write_model(const char *path, int embd, int layers, int ff, int vocab, const char *type,
                       uint64_t seed, int head, int kv_heads)
{
  int heads = embd / head, kv = kv_heads * head; /* the K and V projections' rows */
  if (head < 1 || embd % head || kv_heads < 1 || heads % kv_heads) {
    fprintf(stderr, "llama_prog: %d heads of %d do not group on %d K/V heads\n", heads, head,
            kv_heads);
    return 1;
  }
  enum ggml_type wt = strcmp(type, "f16") == 0 ? GGML_TYPE_F16 : GGML_TYPE_F32;
  rng = seed;
  size_t esz = wt == GGML_TYPE_F16 ? 2 : 4;
  size_t weights =
      (size_t)2 * embd * vocab + (size_t)layers * (4 * (size_t)embd * embd + 3 * (size_t)embd * ff);
  size_t bytes = weights * esz + (size_t)(2 * layers + 1) * embd * 4 +
                 (size_t)(5 + 9 * layers + 4) * ggml_tensor_overhead();
  struct ggml_context *ctx = ggml_init((struct ggml_init_params){bytes + (1 << 20), NULL, false});
  struct gguf_context *g = gguf_init_empty();
  if (!ctx || !g) {
    fprintf(stderr, "llama_prog: out of memory for the model\n");
    return 1;
  }
  gguf_set_val_str(g, "general.architecture", "llama");
  gguf_set_val_str(g, "general.name", "opjit random test model");
  gguf_set_val_u32(g, "llama.context_length", 2048);
  gguf_set_val_u32(g, "llama.embedding_length", (uint32_t)embd);
  gguf_set_val_u32(g, "llama.block_count", (uint32_t)layers);
  gguf_set_val_u32(g, "llama.feed_forward_length", (uint32_t)ff);
  gguf_set_val_u32(g, "llama.attention.head_count", (uint32_t)heads);
  gguf_set_val_u32(g, "llama.attention.head_count_kv", (uint32_t)kv_heads);
  gguf_set_val_u32(g, "llama.rope.dimension_count", (uint32_t)head);
  gguf_set_val_f32(g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  /* llama.cpp's "test" vocabulary: token i is the text of i in hex; no merges, no specials. */
  gguf_set_val_str(g, "tokenizer.ggml.model", "test");
  char **tokens = malloc(sizeof *tokens * (size_t)vocab);
  float *scores = malloc(sizeof *scores * (size_t)vocab);
  int32_t *types = malloc(sizeof *types * (size_t)vocab);
  for (int i = 0; i < vocab; i++) {
    tokens[i] = malloc(16);
    snprintf(tokens[i], 16, "%x", i);
    scores[i] = 0, types[i] = 1; /* LLAMA_TOKEN_TYPE_NORMAL */
  }
  gguf_set_arr_str(g, "tokenizer.ggml.tokens", (const char **)tokens, (size_t)vocab);
  gguf_set_arr_data(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (size_t)vocab);
  gguf_set_arr_data(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (size_t)vocab);
  struct {
    const char *name;
    int64_t ne0, ne1;
    int norm;
  } top[] = {{"token_embd.weight", embd, vocab, 0},
             {"output_norm.weight", embd, 0, 1},
             {"output.weight", embd, vocab, 0}};
  for (size_t i = 0; i < sizeof top / sizeof *top; i++) {
    struct ggml_tensor *t = top[i].norm ? ggml_new_tensor_1d(ctx, GGML_TYPE_F32, top[i].ne0)
                                        : ggml_new_tensor_2d(ctx, wt, top[i].ne0, top[i].ne1);
    ggml_set_name(t, top[i].name);
    fill(t, 0.02f, top[i].norm);
    gguf_add_tensor(g, t);
  }
  for (int l = 0; l < layers; l++) {
    struct {
      const char *name;
      int64_t ne0, ne1;
    } blk[] = {{"attn_norm", embd, 0}, {"attn_q", embd, embd},      {"attn_k", embd, kv},
               {"attn_v", embd, kv},   {"attn_output", embd, embd}, {"ffn_norm", embd, 0},
               {"ffn_gate", embd, ff}, {"ffn_up", embd, ff},        {"ffn_down", ff, embd}};
    for (size_t i = 0; i < sizeof blk / sizeof *blk; i++) {
      int norm = blk[i].ne1 == 0;
      struct ggml_tensor *t = norm ? ggml_new_tensor_1d(ctx, GGML_TYPE_F32, blk[i].ne0)
                                   : ggml_new_tensor_2d(ctx, wt, blk[i].ne0, blk[i].ne1);
      char name[64];
      snprintf(name, sizeof name, "blk.%d.%s.weight", l, blk[i].name);
      ggml_set_name(t, name);
      fill(t, 1.0f / sqrtf((float)blk[i].ne0), norm);
      gguf_add_tensor(g, t);
    }
  }
  int ok = gguf_write_to_file(g, path, false);
  for (int i = 0; i < vocab; i++)
    free(tokens[i]);
  free(tokens), free(scores), free(types);
  gguf_free(g);
  ggml_free(ctx);
  if (!ok) {
    fprintf(stderr, "llama_prog: cannot write %s\n", path);
    return 1;
  }
  return 0;
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void quiet_log(enum ggml_log_level level, const char *text, void *ud)
{
  (void)ud;
  if (level >= GGML_LOG_LEVEL_ERROR)
    fputs(text, stderr);
}

static bool no_progress(float progress, void *ud)
{
  (void)progress, (void)ud;
  return true;
}

/* Waits until the agent, if loaded, has compiled what it queued: it returns then, however
 * long that took on a loaded machine (5 minutes at most: a hung compile fails the test). */
static void settle(void)
{
  int (*fn)(long) = (int (*)(long))dlsym(RTLD_DEFAULT, "opjit_settle");
  if (fn && fn(300000) == 1) {
    fprintf(stderr, "llama_prog: the JIT did not settle within 5 minutes\n");
    exit(1);
  }
}

/* The greedy token of a step's vocab logits (the first of the largest); adds the logits to
 * *sum and their magnitudes to *abs_sum. */
static int greedy(const float *logits, int vocab, double *sum, double *abs_sum)
{
  int best = 0;
  for (int v = 0; v < vocab; v++) {
    *sum += logits[v], *abs_sum += fabs(logits[v]);
    if (logits[v] > logits[best])
      best = v;
  }
  return best;
}

static int run_model(const char *path, int n_prompt, int n_gen, int threads, int rounds,
                     int settle_at)
{
  llama_log_set(quiet_log, NULL);
  ggml_backend_load_all_from_path(OPJIT_LLAMA_BINS);
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  mp.progress_callback = no_progress;
  struct llama_model *model = llama_model_load_from_file(path, mp);
  if (!model) {
    fprintf(stderr, "llama_prog: cannot load %s\n", path);
    return 1;
  }
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)(n_prompt + n_gen + 16);
  cp.n_batch = cp.n_ubatch = (uint32_t)(n_prompt > 0 ? n_prompt : 1);
  cp.n_threads = cp.n_threads_batch = threads;
  struct llama_context *lc = llama_init_from_model(model, cp);
  if (!lc) {
    fprintf(stderr, "llama_prog: cannot create a context\n");
    return 1;
  }
  int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_token *toks = malloc(sizeof *toks * (size_t)(n_prompt + n_gen));
  for (int i = 0; i < n_prompt; i++)
    toks[i] = (llama_token)((i * 7919 + 13) % vocab);
  double sum = 0, abs_sum = 0, prob_sum = 0, t0 = 0, t1 = 0;
  for (int r = 0; r < rounds; r++) {
    if (r) {
      settle();
      nanosleep(&(struct timespec){3, 0}, NULL);
      llama_memory_clear(llama_get_memory(lc), true);
      sum = abs_sum = prob_sum = 0;
      printf("\n");
    }
    t0 = now_s();
    if (llama_decode(lc, llama_batch_get_one(toks, n_prompt))) {
      fprintf(stderr, "llama_prog: prefill failed\n");
      return 1;
    }
    t1 = now_s();
    printf("tokens");
    for (int g = 0; g < n_gen; g++) {
      const float *logits = llama_get_logits_ith(lc, -1);
      int best = greedy(logits, vocab, &sum, &abs_sum);
      double z = 0; /* softmax, as node-llama-cpp reports it: sum of id times probability */
      for (int v = 0; v < vocab; v++)
        z += exp((double)logits[v] - logits[best]);
      for (int v = 0; v < vocab; v++)
        prob_sum += v * exp((double)logits[v] - logits[best]) / z;
      printf(" %d", best);
      toks[n_prompt + g] = best;
      if (llama_decode(lc, llama_batch_get_one(&toks[n_prompt + g], 1))) {
        fprintf(stderr, "llama_prog: decode step %d failed\n", g);
        return 1;
      }
      if (r == 0 && g + 1 == settle_at)
        settle();
    }
  }
  double t2 = now_s();
  printf("\nlogits sum %.9g abs %.9g\nprobabilities sum %.12g\n", sum, abs_sum, prob_sum);
  printf("prefill %.2f tok/s decode %.2f tok/s\n", n_prompt / (t1 - t0),
         n_gen > 0 ? n_gen / (t2 - t1) : 0.0);
  free(toks);
  llama_free(lc);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}

/* One model of `pair`, on a thread of its own: its output lines, printed after both ended. */
typedef struct pair_s {
  const char *path;
  int n_prompt, n_gen, threads, repeats;
  char out[4096];
  int rc;
} pair_t;

static void *pair_run(void *arg)
{
  pair_t *p = arg;
  p->rc = 1;
  struct llama_model_params mp = llama_model_default_params();
  mp.progress_callback = no_progress;
  struct llama_model *model = llama_model_load_from_file(p->path, mp);
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)(p->n_prompt + p->n_gen + 16);
  cp.n_batch = cp.n_ubatch = (uint32_t)p->n_prompt;
  cp.n_threads = cp.n_threads_batch = p->threads;
  struct llama_context *lc = model ? llama_init_from_model(model, cp) : NULL;
  if (!lc) {
    snprintf(p->out, sizeof p->out, "cannot load %s or make its context", p->path);
    return NULL;
  }
  int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_token toks[4096];
  for (int i = 0; i < p->n_prompt; i++)
    toks[i] = (llama_token)((i * 7919 + 13) % vocab);
  for (int r = 0; r < p->repeats; r++) {
    llama_memory_clear(llama_get_memory(lc), true);
    double sum = 0, abs_sum = 0;
    int len = snprintf(p->out, sizeof p->out, "tokens");
    if (llama_decode(lc, llama_batch_get_one(toks, p->n_prompt))) {
      snprintf(p->out, sizeof p->out, "prefill failed");
      return NULL;
    }
    for (int g = 0; g < p->n_gen; g++) {
      int best = greedy(llama_get_logits_ith(lc, -1), vocab, &sum, &abs_sum);
      len += snprintf(p->out + len, sizeof p->out - (size_t)len, " %d", best);
      toks[p->n_prompt + g] = best;
      if (llama_decode(lc, llama_batch_get_one(&toks[p->n_prompt + g], 1))) {
        snprintf(p->out, sizeof p->out, "decode step %d failed", g);
        return NULL;
      }
    }
    snprintf(p->out + len, sizeof p->out - (size_t)len, "\nlogits sum %.9g abs %.9g\n", sum,
             abs_sum);
    if (r == 0) /* the later repeats run what the JIT compiled, however loaded the machine */
      settle();
  }
  llama_free(lc);
  llama_model_free(model);
  p->rc = 0;
  return NULL;
}

/* `pair`: two models, each computed by its own context on its own thread, at once. */
static int run_pair(const char *path0, const char *path1, int n_prompt, int n_gen, int threads,
                    int repeats)
{
  /* GEN <= 512: a tokens line of ids below a million fits pair_t.out */
  if (n_prompt < 1 || n_gen < 1 || n_gen > 512 || n_prompt + n_gen > 4096 || repeats < 1) {
    fprintf(stderr, "llama_prog: pair: PROMPT + GEN within 2..4096, GEN <= 512, REPEATS >= 1\n");
    return 1;
  }
  llama_log_set(quiet_log, NULL);
  ggml_backend_load_all_from_path(OPJIT_LLAMA_BINS);
  llama_backend_init();
  pair_t p[2] = {{path0, n_prompt, n_gen, threads, repeats, "", 1},
                 {path1, n_prompt, n_gen, threads, repeats, "", 1}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, pair_run, &p[i])) {
      fprintf(stderr, "llama_prog: pair: cannot start a thread\n");
      return 1;
    }
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  int rc = 0;
  for (int i = 0; i < 2; i++) {
    printf("model %d\n%s", i, p[i].out);
    if (p[i].rc)
      fprintf(stderr, "llama_prog: pair: model %d: %s\n", i, p[i].out), rc = 1;
  }
  llama_backend_free();
  return rc;
}

static int list_bufts(void)
{
  llama_log_set(quiet_log, NULL);
  ggml_backend_load_all_from_path(OPJIT_LLAMA_BINS);
  ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  ggml_backend_reg_t reg = cpu ? ggml_backend_dev_backend_reg(cpu) : NULL;
  ggml_backend_dev_get_extra_bufts_t get =
      reg ? (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(
                reg, "ggml_backend_dev_get_extra_bufts")
          : NULL;
  if (!get) {
    fprintf(stderr, "llama_prog: no CPU backend with extra buffer types\n");
    return 1;
  }
  for (ggml_backend_buffer_type_t *b = get(cpu); b && *b; b++)
    printf("%s\n", ggml_backend_buft_name(*b));
  return 0;
}

int main(int argc, char **argv)
{
  if ((argc == 9 || argc == 11) && strcmp(argv[1], "write") == 0) {
    int head = argc == 11 ? atoi(argv[9]) : 64;
    return write_model(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), argv[7],
                       strtoull(argv[8], NULL, 10), head,
                       argc == 11 ? atoi(argv[10]) : atoi(argv[3]) / (head > 0 ? head : 1));
  }
  if (argc >= 6 && argc <= 8 && strcmp(argv[1], "run") == 0)
    return run_model(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]),
                     argc >= 7 && atoi(argv[6]) > 1 ? atoi(argv[6]) : 1,
                     argc == 8 ? atoi(argv[7]) : 0);
  if (argc == 8 && strcmp(argv[1], "pair") == 0)
    return run_pair(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), atoi(argv[7]));
  if (argc == 2 && strcmp(argv[1], "bufts") == 0)
    return list_bufts();
  fprintf(stderr, "usage: llama_prog write PATH EMBD LAYERS FF VOCAB f32|f16 SEED "
                  "[HEAD KV_HEADS]\n"
                  "       llama_prog run PATH PROMPT GEN THREADS [ROUNDS [SETTLE]]\n"
                  "       llama_prog pair PATH0 PATH1 PROMPT GEN THREADS REPEATS\n"
                  "       llama_prog bufts\n");
  return 2;
}
