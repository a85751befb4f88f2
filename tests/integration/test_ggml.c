/* SPDX-License-Identifier: MIT */
/* The ggml host inside llama.cpp's shipped libraries (llama_prog on a random llama model, f32
 * and f16, and the same model under node with node-llama-cpp): the tokens and logits are the
 * same with and without the agent; the database holds the run's profile by ggml op, with the
 * sampler's samples attributed to the ops; a ggml the agent was not built for, or OPJIT_HOSTS
 * without ggml, leaves the graphs untouched. */
#include "harness.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define H_LLAMA_PROG OPJIT_BUILD_DIR "/llama_prog"
#define FUSION1 "s.name LIKE 'FUSED ADD+RMS_NORM+MUL%%'" /* the first fusion's signatures */
#define FUSION2 "s.name LIKE 'FUSED MUL_MAT+ADD %%'"      /* the second's */
#define RMS_MUL "s.name LIKE 'FUSED RMS_NORM+MUL %%'"     /* a norm whose ADD is not its own */

static char model32[600], model16[600];
/* ggml keeps f16 weights in its AMX buffer on this CPU (llama_prog bufts) and multiplies them
 * with f32 activations there, not rounded to f16 as its generic MUL_MAT does: the prompt's
 * products get kernels that keep them in f32 ("MUL_MAT f16 AMX ..."), decode's stay ggml's
 * (hosts/ggml_match.c, find_mm). */
static int amx_f16;

static void setup(void)
{
  struct stat st;
  if (stat(H_LLAMA_PROG, &st) != 0)
    cr_skip_test("llama.cpp's libraries are not installed (scripts/deps.sh)");
  h_setup();
  snprintf(model32, sizeof model32, "%s/m32.gguf", h_dir);
  snprintf(model16, sizeof model16, "%s/m16.gguf", h_dir);
  const char *w32[] = {H_LLAMA_PROG, "write", model32, "256", "2", "768", "1000", "f32", "7", NULL};
  const char *w16[] = {H_LLAMA_PROG, "write", model16, "256", "2", "768", "1000", "f16", "7", NULL};
  cr_assert_eq(h_run("w32", 0, NULL, w32), 0, "%s", h_output("w32", "err"));
  cr_assert_eq(h_run("w16", 0, NULL, w16), 0, "%s", h_output("w16", "err"));
  const char *bufts[] = {H_LLAMA_PROG, "bufts", NULL};
  cr_assert_eq(h_run("bufts", 0, NULL, bufts), 0, "%s", h_output("bufts", "err"));
  const char *b = h_output("bufts", "out");
  amx_f16 = strncmp(b, "AMX\n", 4) == 0 || strstr(b, "\nAMX\n") != NULL;
}

TestSuite(ggml, .init = setup, .fini = h_teardown, .timeout = 600);

/* Runs the model; returns its "tokens ..." and "logits ..." lines (static per tag). */
static const char *run(const char *tag, int agent, const char *const *env, const char *model,
                       const char *prompt)
{
  const char *argv[] = {H_LLAMA_PROG, "run", model, prompt, "8", "2", NULL};
  int st = h_run(tag, agent, env, argv);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d\n%s", tag, st,
            h_output(tag, "err"));
  static char keep[8][512];
  static int next;
  char *out = keep[next++ % 8];
  const char *o = h_output(tag, "out");
  const char *speed = strstr(o, "prefill");
  snprintf(out, sizeof keep[0], "%.*s", speed ? (int)(speed - o) : (int)strlen(o), o);
  cr_assert(strstr(out, "tokens ") && strstr(out, "logits sum"), "%s", o);
  return out;
}

/* Logits sums' relative tolerance by model, f32 then f16 weights. Kernels and ggml sum in
 * other orders, a float's rounding apart; with f16 weights each product's input is rounded to
 * f16 (2^-11 apart), so a float's difference now and then lands an activation one f16 step
 * away and the logits drift further: run 1's mix of ggml's nodes and kernels (as compiles land)
 * read 1.07e-5 once in a full CTest run. A kernel off by a factor moves them by 1e-3 or more
 * (a_poisoned_fused_kernel_changes_the_output). */
static const double rel_of[2] = {1e-5, 5e-5};

/* The same tokens, and logits sums within rel relative. */
static void close_output(const char *got, const char *want, const char *what, double rel)
{
  cr_assert_eq(strcspn(got, "\n"), strcspn(want, "\n"), "%s: tokens\n%s\n%s", what, got, want);
  cr_assert(strncmp(got, want, strcspn(want, "\n")) == 0, "%s: tokens\n%s\n%s", what, got, want);
  double gs, ga, ws, wa;
  cr_assert(sscanf(strstr(got, "logits"), "logits sum %lf abs %lf", &gs, &ga) == 2);
  cr_assert(sscanf(strstr(want, "logits"), "logits sum %lf abs %lf", &ws, &wa) == 2);
  cr_assert(fabs(gs - ws) <= rel * wa && fabs(ga - wa) <= rel * wa,
            "%s: logits sum %.9g abs %.9g, plain %.9g %.9g (%g relative)", what, gs, ga, ws, wa,
            rel);
}

/* The same tokens, and logits sums within f32 weights' tolerance. */
static void same_output(const char *got, const char *want, const char *what)
{
  close_output(got, want, what, rel_of[0]);
}


Test(ggml, same_tokens_and_logits_with_and_without_the_agent)
{
  const char *profile[] = {"OPJIT_MODE=profile", NULL}, *jit[] = {"OPJIT_MODE=jit", NULL};
  const char *models[] = {model32, model16};
  for (int i = 0; i < 2; i++) {
    const char *plain = run("plain", 0, NULL, models[i], "32");
    cr_assert_str_eq(run("profile", 1, profile, models[i], "32"), plain, "profile mode changed "
                     "the output");
    close_output(run("jit", 1, jit, models[i], "32"), plain, "jit mode", rel_of[i]);
  }
}

/* Fusions from the first call: every ADD + RMS_NORM + MUL hot at once, 64 decode steps. */
/* Calls alone decide what is hot: this model's groups are too small to repay a compile by
 * time. The first graph waits for the whole warm start (the writer thread places the stored
 * kernels; by default the first call does not wait for it, and a group the first graph finds
 * unfused is hot and queued for a compile before its stored kernel is placed). */
#define WARM_WAIT "OPJIT_WARM_WAIT_US=60000000"
static const char *const fuse_env[] = {"OPJIT_MODE=jit", "OPJIT_HOT_CALLS=1", "OPJIT_HOT_PAYBACK=0",
                                       WARM_WAIT, NULL};

/* Runs argv, which must succeed, and returns its output (kept: the last four). */
static const char *run_argv(const char *tag, int agent, const char *const *env,
                            const char *const *argv)
{
  int st = h_run(tag, agent, env, argv);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s", tag, h_output(tag, "err"));
  static char keep[4][4096];
  static int next;
  char *out = keep[next++ % 4];
  snprintf(out, sizeof keep[0], "%s", h_output(tag, "out"));
  return out;
}

/* Runs the model (32-token prompt, 64 decode steps; rounds prompts, the JIT settled between
 * them: a run whose kernels must all be compiled and stored before it ends takes 2) and returns
 * its output. */
static const char *run_rounds(const char *tag, int agent, const char *const *env,
                              const char *model, const char *rounds)
{
  const char *argv[] = {H_LLAMA_PROG, "run", model, "32", "64", "2", rounds, NULL};
  return run_argv(tag, agent, env, argv);
}

/* The test hook that makes every kernel's results 1.5 times too large. */
static const char *const wrong_env[] = {"OPJIT_MODE=jit", "OPJIT_HOT_CALLS=1",
                                        "OPJIT_HOT_PAYBACK=0", "OPJIT_TEST_FUSION=wrong", NULL};

static const char *run_long(const char *tag, int agent, const char *const *env, const char *model)
{
  return run_rounds(tag, agent, env, model, "1");
}

/* A database of its own for a test's model m: its path in db, "OPJIT_DB=path" in dbenv. */
static void own_db(const char *name, int m, char db[700], char dbenv[720])
{
  snprintf(db, 700, "%s/%s%d.db", h_dir, name, m);
  snprintf(dbenv, 720, "OPJIT_DB=%s", db);
}

Test(ggml, fused_groups_keep_the_output_are_stored_and_start_warm)
{
  const char *models[] = {model32, model16};
  for (int m = 0; m < 2; m++) {
    char db[700], dbenv[720];
    own_db("fuse", m, db, dbenv);
    const char *env[] = {fuse_env[0], fuse_env[1], fuse_env[2], fuse_env[3], dbenv, NULL};
    const char *plain = run_long("plain", 0, NULL, models[m]);
    /* (two prompts, the JIT settled between them: the compile ends within run 1) */
    close_output(run_rounds("fuse1", 1, env, models[m], "2"), plain, "run 1 (compiles)", rel_of[m]);
    /* Run 1 compiled the group's kernel, verified it against ggml's ops and stored it. */
    cr_assert_eq(h_query(db, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                               " WHERE e.run_id=1 AND " FUSION1 " AND e.kind='published'"), 1);
    cr_assert_geq(h_query(db, "SELECT count(*) FROM events WHERE run_id=1 AND kind='verified'"), 1);
    cr_assert_eq(h_query(db, "SELECT count(*) FROM events WHERE kind='verify-failed'"), 0);
    cr_assert_eq(h_query(db, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                               " WHERE " FUSION1), 1);
    /* Run 2 places it before the first graph: every group execution is fused, prefill included. */
    close_output(run_long("fuse2", 1, env, models[m]), plain, "run 2 (warm)", rel_of[m]);
    cr_assert_eq(h_query(db, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                               " WHERE e.run_id=2 AND " FUSION1 " AND e.kind='loaded'"), 1);
    cr_assert_eq(h_query(db, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                               " WHERE e.run_id=2 AND " FUSION1 " AND e.kind='published'"), 0);
    int64_t calls = h_query(db, "SELECT rs.calls FROM run_sigs rs JOIN signatures s ON"
                                  " s.id=rs.sig_id WHERE rs.run_id=2 AND " FUSION1);
    /* Each decode step has 4 groups (each layer's FFN norm after its attention's residual ADD,
     * the second layer's attention norm and the output norm after an FFN's residual ADD; the
     * first layer's attention norm has no ADD before it). The prefill has 2: its first layer's
     * residual ADDs belong to MUL_MAT + ADD groups (the second layer's attention output goes
     * through GET_ROWS first, its FFN runs on one token). 64 decode steps, each on 2 threads.
     * The never-slower rounds run the host's own graph in 2 of every 16 executions of the
     * decode graph (its 14th and 15th, 30th and 31st, ...: 8 of 64, no verdict coming before
     * the 8th round), and those groups' calls are ggml's, not the kernel's. */
    cr_assert_eq(calls, (64 * 4 + 2) * 2);
    cr_assert_eq(h_query(db, "SELECT v.calls FROM variants v JOIN signatures s ON s.id=v.sig_id"
                               " WHERE v.run_id=2 AND " FUSION1), calls - 8 * 4 * 2,
                 "all fused but the rounds' host executions");
    /* The norms left without their ADD: the first layer's attention norm in every graph, and
     * in the prefill the norms after the two MUL_MAT + ADD groups. */
    int64_t norms = h_query(db, "SELECT rs.calls FROM run_sigs rs JOIN signatures s ON"
                                  " s.id=rs.sig_id WHERE rs.run_id=2 AND " RMS_MUL);
    int64_t fused = h_query(db, "SELECT v.calls FROM variants v JOIN signatures s ON s.id=v.sig_id"
                                  " WHERE v.run_id=2 AND " RMS_MUL);
    cr_assert_eq(norms, (65 + 2) * 2);
    /* all fused but in the rounds' 8 host executions of the decode graph (which executions
     * those are depends on the graph alone, not on other computations or the clock) */
    cr_assert_eq(fused, norms - 8 * 1 * 2, "%lld of %lld fused", (long long)fused,
                 (long long)norms);
  }
}

Test(ggml, every_verification_of_a_fused_kernel_runs_it)
{
  /* A kernel is stored once OPJIT_VERIFY of its executions have matched ggml's. 100 for the
   * norm groups' kernel (the four records of each decode graph share it, four a graph
   * execution) reach past the decode graph's executions on the host's own graph (its 14th and
   * 15th of every 16, the rounds'), where no custom node runs: an execution there that took
   * verifications (as it did) leaves the kernel short of its count, and never stored. */
  char db[700], dbenv[720];
  own_db("verify", 0, db, dbenv);
  const char *env[] = {fuse_env[0], fuse_env[1], fuse_env[2], fuse_env[3],
                       dbenv,       "OPJIT_VERIFY=100", NULL};
  run_rounds("verify", 1, env, model32, "2");
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events WHERE kind='verify-failed'"), 0);
  cr_assert_eq(h_query(db, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                             " WHERE " FUSION1), 1, "stored after its 100 verifications");
}

Test(ggml, a_poisoned_fused_kernel_changes_the_output)
{
  const char *plain = run_long("plain", 0, NULL, model32);
  /* compiles and stores the kernels: the fusion's and the products' (calls alone decide; two
   * prompts, the JIT settled between them, so that the compiles end within the run) */
  run_rounds("store", 1, fuse_env, model32, "2");
  const char *poison[] = {"OPJIT_MODE=jit", "OPJIT_HOT_CALLS=1", "OPJIT_HOT_PAYBACK=0", WARM_WAIT,
                          "OPJIT_TEST_FUSION=poison", NULL};
  const char *out = run_long("poison", 1, poison, model32);
  double ps, pa, ws, wa;
  cr_assert(sscanf(strstr(out, "logits"), "logits sum %lf abs %lf", &ps, &pa) == 2);
  cr_assert(sscanf(strstr(plain, "logits"), "logits sum %lf abs %lf", &ws, &wa) == 2);
  cr_assert(fabs(pa - wa) > 1e-3 * wa, "zeros from the fused nodes left the logits as they were "
            "(%.9g vs %.9g): the model would not be reading them", pa, wa);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                             " WHERE e.run_id=2 AND " FUSION1 " AND e.kind='loaded'"), 1);
}

/* The prefill's products (N = the 32-token prompt) as the agent's MUL_MAT kernels: run 1
 * compiles them (each checked by its self-test before it is published) and stores them; run 2
 * places them before its first graph, so its prefill runs them. */
static void mul_mat_kernels_serve_the_prefill(int m)
{
  const char *models[] = {model32, model16};
  char db[700], dbenv[720];
  own_db("mm", m, db, dbenv);
  /* Calls alone decide (this model's small products would not repay a compile by time). */
  const char *env[] = {fuse_env[0], fuse_env[1], fuse_env[2], fuse_env[3], dbenv, NULL};
  const char *plain = run_long("plain", 0, NULL, models[m]);
  close_output(run_rounds("mm1", 1, env, models[m], "2"), plain, "run 1", rel_of[m]);
  /* 2 layers: Q K V O (256 x 256), gate and up (768 x 256) and down (256 x 768) in the first,
   * the attention's in the second: three shapes with the prompt's 32 columns (the output's
   * 1000 rows are no multiple of 16). */
  const char *mm = "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id WHERE"
                   " s.op='MUL_MAT' AND s.name LIKE '%%%% N=32' AND e.run_id=%d AND e.kind='%s'";
  char q[400];
  snprintf(q, sizeof q, mm, 1, "verified");
  strcat(q, " AND e.detail LIKE 'self-test%%'"); /* run 1's second prompt checks them too */
  cr_assert_eq(h_query(db, q), 3, "self-tests passed in run 1");
  cr_assert_eq(h_query(db, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                             " WHERE s.op='MUL_MAT' AND s.name LIKE '%% N=32'"), 3);
  /* Decode's matrix-vector products (N=1) have kernels of their own, self-tested too: Q, K,
   * V and O (256 x 256), gate and up (768 x 256), down (256 x 768); none where ggml's AMX
   * buffer holds the weights. */
  int decode = m == 1 && amx_f16 ? 0 : 3;
  cr_assert_eq(h_query(db, "SELECT count(DISTINCT e.sig_id) FROM events e JOIN signatures s"
                             " ON s.id=e.sig_id WHERE s.op='MUL_MAT' AND s.name LIKE '%% N=1'"
                             " AND e.kind='verified' AND e.detail LIKE 'self-test%%'"), decode);
  cr_assert_eq(h_query(db, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                             " WHERE s.op='MUL_MAT' AND s.name LIKE '%% N=1'"), decode);
  close_output(run_long("mm2", 1, env, models[m]), plain, "run 2", rel_of[m]);
  snprintf(q, sizeof q, mm, 2, "loaded");
  cr_assert_eq(h_query(db, q), 3);
  /* Each node's calls on both threads ran the kernel: both layers' Q, the second layer's
   * attention output (the first's is a MUL_MAT + ADD; the second layer's FFN runs on the
   * output token only, N=1), K and V in their shared-input groups and the first layer's gate
   * and up in their SWIGLU group (the groups credit their products' signatures). */
  cr_assert_eq(h_query(db, "SELECT sum(v.calls) FROM variants v JOIN signatures s ON"
                             " s.id=v.sig_id WHERE v.run_id=2 AND s.op='MUL_MAT' AND"
                             " s.name LIKE '%% N=32'"),
               3 * 2 + 2 * 2 * 2 + 2 * 2);
  /* The first layer's attention output and down products with their residual ADDs: kernels
   * of their own (compiled once their products were hot), loaded, each run on both threads. */
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                             " WHERE e.run_id=2 AND " FUSION2 " AND e.kind='loaded'"), 2);
  cr_assert_eq(h_query(db, "SELECT sum(v.calls) FROM variants v JOIN signatures s ON"
                             " s.id=v.sig_id WHERE v.run_id=2 AND " FUSION2), 2 * 2);
  cr_assert_eq(h_query(db, "SELECT rs.calls FROM run_sigs rs JOIN signatures s ON"
                             " s.id=rs.sig_id WHERE rs.run_id=2 AND"
                             " s.name LIKE 'FUSED MUL_MAT+MUL_MAT+SWIGLU %% N=32'"), 2);
  /* V and K as one node in each layer (Q cannot join them: V may take the memory Q's output
   * had, which Q's ROPE reads in between) */
  cr_assert_eq(h_query(db, "SELECT rs.calls FROM run_sigs rs JOIN signatures s ON"
                             " s.id=rs.sig_id WHERE rs.run_id=2 AND"
                             " s.name LIKE 'FUSED SHARED-INPUT MUL_MATS %% M=512 N=32'"), 2 * 2);
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events WHERE kind='verify-failed'"), 0);
}

Test(ggml, mul_mat_kernels_serve_the_prefill_from_the_second_run)
{
  mul_mat_kernels_serve_the_prefill(0);
}

Test(ggml, f16_mul_mat_kernels_serve_the_prefill_from_the_second_run)
{
  mul_mat_kernels_serve_the_prefill(1);
}

/* The prompt's attention (FLASH_ATTN_EXT, 64 query rows of 4 heads over f16 keys and values:
 * from 64 rows ggml computes it in f32 by tiles, as the agent's kernel does) as the agent's
 * kernel: run 1 compiles it, self-tested before it is published, and stores it; run 2 places it
 * before its first graph, its first execution checks it on each thread, and both layers'
 * attention runs it on both threads. A kernel whose results are 1.5 times too large is caught
 * by its first execution's check (the second prompt's), its rows computed again, and never
 * stored. */
Test(ggml, the_prompt_s_attention_runs_its_kernel_from_the_second_run)
{
  char db[700], dbenv[720];
  own_db("fa", 0, db, dbenv);
  const char *env[] = {fuse_env[0], fuse_env[1], fuse_env[2], fuse_env[3], dbenv, NULL};
  const char *argv1[] = {H_LLAMA_PROG, "run", model32, "64", "16", "2", "2", NULL};
  const char *argv[] = {H_LLAMA_PROG, "run", model32, "64", "16", "2", NULL};
  const char *plain = run_argv("plain", 0, NULL, argv);
  same_output(run_argv("fa1", 1, env, argv1), plain, "run 1");
#define FA "s.name = 'FLASH_ATTN_EXT f32 64x4x64'"
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                           " WHERE e.run_id=1 AND " FA " AND e.kind='verified' AND"
                           " e.detail LIKE 'self-test%%'"), 1);
  cr_assert_eq(h_query(db, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                           " WHERE " FA), 1);
  same_output(run_argv("fa2", 1, env, argv), plain, "run 2");
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                           " WHERE e.run_id=2 AND " FA " AND e.kind='loaded'"), 1);
  cr_assert_eq(h_query(db, "SELECT v.calls FROM variants v JOIN signatures s ON s.id=v.sig_id"
                           " WHERE v.run_id=2 AND " FA), 2 * 2);
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events WHERE kind='verify-failed'"), 0);
  const char *got = run_argv("fa_wrong", 1, wrong_env, argv1);
  same_output(strchr(got, '\n') + 1, plain, "a wrong kernel's second prompt");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                             " WHERE " FA " AND e.kind='verify-failed'"), 1);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                             " WHERE " FA), 0);
#undef FA
}

/* Decode's attention (FLASH_ATTN_EXT, one query row of 4 heads: ggml rounds it to f16 and sums
 * the values in f16, in the steps of the f16 kernel) as the agent's f16 kernel, over 500-516
 * keys (from 512 ggml splits them between its two threads: the kernel's node takes the same
 * chunks and combines them as ggml does; the other tests' decode, over fewer keys, runs it in
 * one chunk): run 1 (two prompts, the JIT settled between them) compiles it, self-tested, and stores it; run 2
 * places it and runs it on every decode step; the tokens and logits are the plain run's. A
 * kernel 1.5 times too large is caught by its first execution's check, its heads computed
 * again, and never stored: the second prompt's output is the plain run's. */
Test(ggml, decode_s_attention_runs_the_f16_kernel)
{
  char db[700], dbenv[720];
  own_db("fa16_", 0, db, dbenv);
  const char *env[] = {fuse_env[0], fuse_env[1], fuse_env[2], fuse_env[3], dbenv, NULL};
  const char *argv1[] = {H_LLAMA_PROG, "run", model32, "500", "16", "2", "2", NULL};
  const char *argv[] = {H_LLAMA_PROG, "run", model32, "500", "16", "2", NULL};
  const char *plain = run_argv("plain", 0, NULL, argv);
  same_output(run_argv("fa16_1", 1, env, argv1), plain, "run 1");
#define FA "s.name = 'FLASH_ATTN_EXT f32 64x4'"
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                           " WHERE e.run_id=1 AND " FA " AND e.kind='verified' AND"
                           " e.detail LIKE 'self-test%%'"), 1);
  same_output(run_argv("fa16_2", 1, env, argv), plain, "run 2");
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                           " WHERE e.run_id=2 AND " FA " AND e.kind='loaded'"), 1);
  cr_assert_geq(h_query(db, "SELECT v.calls FROM variants v JOIN signatures s ON s.id=v.sig_id"
                            " WHERE v.run_id=2 AND " FA), 2 * 2 * 12);
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events WHERE kind='verify-failed'"), 0);
  own_db("fa16_wrong", 0, db, dbenv);
  const char *w[] = {wrong_env[0], wrong_env[1], wrong_env[2], wrong_env[3], dbenv, NULL};
  const char *got = run_argv("fa16_wrong", 1, w, argv1);
  same_output(strchr(got, '\n') + 1, plain, "a wrong kernel's second prompt");
  cr_assert_geq(h_query(db, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                            " WHERE " FA " AND e.kind='verify-failed'"), 1);
  cr_assert_eq(h_query(db, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                           " WHERE " FA), 0);
#undef FA
}

/* Decode's attention in a model with grouped K/V heads (GQA, as Llama 3's) and heads of 128:
 * 4 query heads on one K/V head, over 300-316 keys. The matcher takes the node (its signature
 * says the kernel does: one predicate), the f16 kernel runs it from run 2 on every decode step,
 * each thread's heads from the first of theirs in the group (the second thread's from the
 * third), checked on its first executions: the tokens and logits are the plain run's. A prompt
 * of 20 tokens (20 query rows: ggml's f16 steps too) runs under decode's signature and kernel,
 * its output the plain run's: one signature for every row count below 64. */
Test(ggml, decode_s_attention_with_grouped_heads_runs_the_f16_kernel)
{
  char model[620], db[700], dbenv[720];
  snprintf(model, sizeof model, "%s/gqa.gguf", h_dir);
  const char *w[] = {H_LLAMA_PROG, "write", model, "512", "2",   "768",
                     "1000",       "f32",   "7",   "128", "1", NULL};
  cr_assert_eq(h_run("wgqa", 0, NULL, w), 0, "%s", h_output("wgqa", "err"));
  own_db("gqa", 0, db, dbenv);
  const char *env[] = {fuse_env[0], fuse_env[1], fuse_env[2], fuse_env[3], dbenv, NULL};
  const char *argv1[] = {H_LLAMA_PROG, "run", model, "300", "16", "2", "2", NULL};
  const char *argv[] = {H_LLAMA_PROG, "run", model, "300", "16", "2", NULL};
  const char *plain = run_argv("plain", 0, NULL, argv);
  same_output(run_argv("gqa1", 1, env, argv1), plain, "run 1");
#define FA "s.name = 'FLASH_ATTN_EXT f32 128x4'"
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                           " WHERE e.run_id=1 AND " FA " AND e.kind='verified' AND"
                           " e.detail LIKE 'self-test%%'"), 1);
  same_output(run_argv("gqa2", 1, env, argv), plain, "run 2");
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                           " WHERE e.run_id=2 AND " FA " AND e.kind='loaded'"), 1);
  cr_assert_geq(h_query(db, "SELECT v.calls FROM variants v JOIN signatures s ON s.id=v.sig_id"
                            " WHERE v.run_id=2 AND " FA), 2 * 2 * 12);
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events WHERE kind='verify-failed'"), 0);
  const char *short_argv[] = {H_LLAMA_PROG, "run", model, "20", "16", "2", NULL};
  same_output(run_argv("gqa3", 1, env, short_argv), run_argv("plain20", 0, NULL, short_argv),
              "a prompt of 20 rows");
  cr_assert_eq(h_query(db, "SELECT count(*) FROM signatures s WHERE s.name LIKE "
                           "'FLASH_ATTN_EXT f32 128x4%%'"), 2, "decode's and the 300-row prompt's");
  cr_assert_eq(h_query(db, "SELECT count(*) FROM events WHERE kind='verify-failed'"), 0);
#undef FA
}

Test(ggml, a_mul_mat_kernel_failing_its_self_test_is_never_published)
{
  /* A test fault compiles each product for one k fewer: a real kernel, wrong. Two prompts, the
   * JIT settled between them: the prompt's compiles (and their self-tests) have ended by then,
   * however loaded the machine. */
  const char *plain = run_rounds("plain", 0, NULL, model32, "2");
  const char *env[] = {"OPJIT_MODE=jit", "OPJIT_HOT_CALLS=1", "OPJIT_TEST_FAULT=wrong", NULL};
  same_output(run_rounds("self", 1, env, model32, "2"), plain, "kernels failing their self-test");
  const char *failed = "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id WHERE"
                       " s.op='MUL_MAT' AND e.kind='verify-failed' AND e.detail LIKE"
                       " 'self-test%%%%' AND s.name LIKE '%%%% N=%d'";
  char q[400];
  snprintf(q, sizeof q, failed, 32);
  cr_assert_eq(h_query(NULL, q), 3, "the prompt's three shapes");
  /* decode's matrix-vector products (three shapes): those the payback rule found hot and
   * whose compile ended before the run did, each once */
  snprintf(q, sizeof q, failed, 1);
  int64_t failed1 = h_query(NULL, q);
  int64_t compiled1 = h_query(NULL, "SELECT count(DISTINCT e.sig_id) FROM events e JOIN signatures"
                                    " s ON s.id=e.sig_id WHERE s.op='MUL_MAT' AND s.name LIKE"
                                    " '%% N=1' AND e.kind IN ('verify-failed', 'published')");
  cr_assert(failed1 <= 3 && failed1 == compiled1, "%lld of %lld failed", (long long)failed1,
            (long long)compiled1);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                             " WHERE s.op='MUL_MAT' AND e.kind='published'"), 0);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                             " WHERE s.op='MUL_MAT'"), 0);
}

/* Threads with 240 KB of stack (RLIMIT_STACK, which glibc's threads take too): the kernels keep
 * their blocks in the caller's heap scratch, not on the stack, so they run there as well. Run 1
 * (a normal stack) compiles and stores them; run 2, short of stack, places them. */
Test(ggml, threads_with_little_stack_run_the_mul_mat_kernels)
{
  /* The options go in the command: a shell keeps one value per name (the last), where the
   * harness's defaults follow the test's entries. */
  char cmd[1600];
  const char *fmt = "ulimit -s %d && %s exec %s run %s 32 16 2 %d"; /* the store run: 2 prompts,
                                                     the JIT settled between them */
  const char *opts = "OPJIT_MODE=jit OPJIT_HOT_CALLS=1 OPJIT_HOT_PAYBACK=0 " WARM_WAIT;
  const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  snprintf(cmd, sizeof cmd, fmt, 240, "", H_LLAMA_PROG, model32, 1);
  cr_assert_eq(h_run("plain", 0, NULL, argv), 0, "%s", h_output("plain", "err"));
  char plain[2048];
  snprintf(plain, sizeof plain, "%s", h_output("plain", "out"));
  snprintf(cmd, sizeof cmd, fmt, 8192, opts, H_LLAMA_PROG, model32, 2);
  cr_assert_eq(h_run("store", 1, NULL, argv), 0, "%s", h_output("store", "err"));
  snprintf(cmd, sizeof cmd, fmt, 240, opts, H_LLAMA_PROG, model32, 1);
  cr_assert_eq(h_run("small", 1, NULL, argv), 0, "%s", h_output("small", "err"));
  same_output(h_output("small", "out"), plain, "240 KB stacks");
  cr_assert_eq(h_count_lines(h_output("small", "err"), "opjit"), 0, "%s", h_output("small", "err"));
  cr_assert_gt(h_query(NULL, "SELECT sum(v.calls) FROM variants v JOIN signatures s ON"
                             " s.id=v.sig_id WHERE v.run_id=2 AND s.op='MUL_MAT'"), 0,
               "run 2 ran them");
}

Test(ggml, the_database_holds_the_run_profile_by_op)
{
  /* A longer prompt, sampled at 4 kHz: enough samples to land in the ops. */
  const char *env[] = {"OPJIT_MODE=profile", "OPJIT_SAMPLE_HZ=4000", NULL};
  run("prof", 1, env, model32, "256");
  cr_assert_gt(h_query(NULL, "SELECT count(*) FROM signatures WHERE op='MUL_MAT' AND"
                             " json_extract(params, '$.host')='ggml'"), 3);
  /* The prefill's (N=256) products, each on both threads: 2 layers x 4 attention projections,
   * and the first layer's 3 FFN products (llama.cpp runs the last layer's FFN on the output
   * token only). */
  cr_assert_eq(h_query(NULL, "SELECT sum(rs.calls) FROM run_sigs rs JOIN signatures s ON"
                             " s.id=rs.sig_id WHERE s.op='MUL_MAT' AND s.name LIKE '%% N=256'"),
               (2 * 4 + 3) * 2);
  cr_assert_gt(h_query(NULL, "SELECT count(*) FROM signatures WHERE name LIKE 'GLU SWIGLU f32 %%'"), 0);
  cr_assert_gt(h_query(NULL, "SELECT count(*) FROM signatures WHERE op='FLASH_ATTN_EXT'"), 0);
  /* The sampler's samples inside ggml ops are attributed to them. */
  cr_assert_gt(h_query(NULL, "SELECT coalesce(sum(p.samples), 0) FROM run_pcs p JOIN signatures s"
                             " ON s.id=p.sig_id WHERE s.op='MUL_MAT'"), 0);
  /* Their stacks come from the sampler's own walker (through ggml's realigned AVX frames, on
   * threads ggml starts per graph), libunwind only where it stops, and reach the threads'
   * first frames: libc's start of main, or the agent's thread trampoline. */
  int64_t walked = h_query(NULL, "SELECT json_extract(sampling, '$.stacks.walked') FROM runs");
  int64_t unwound = h_query(NULL, "SELECT json_extract(sampling, '$.stacks.libunwind') FROM runs");
  cr_assert_gt(walked, 9 * unwound, "walked %lld, libunwind %lld", (long long)walked,
               (long long)unwound);
  /* Stored stacks list the outermost frame first: main's begin _start, __libc_start_main;
   * ggml's threads' clone3, start_thread, the agent's trampoline. */
  cr_assert_gt(h_query(NULL, "WITH a AS (SELECT samples, stack, substr(stack, instr(stack, ';') + 1)"
                             " r1 FROM run_stacks) SELECT coalesce(sum(samples), 0) FROM a WHERE"
                             " r1 LIKE 'libc.so.6`__libc_start_main;%%' OR (stack LIKE"
                             " 'libc.so.6`%%' AND substr(r1, instr(r1, ';') + 1) LIKE"
                             " 'libopjit.so`%%')"),
               h_query(NULL, "SELECT sum(samples) FROM run_stacks") * 9 / 10);
}

/* The products ggml computes in its AMX buffer (f16 weights on a CPU with AMX) call no forward
 * function: the agent sees them through ggml_cpu_extra_compute_forward, and books each as
 * any op, counted on each thread and timed (their calls once went uncounted in profile mode
 * and untimed in jit mode, so a prompt's products never repaid a compile). */
Test(ggml, the_amx_buffer_s_products_are_counted_and_timed_as_ops)
{
  if (!amx_f16)
    cr_skip_test("ggml has no AMX buffer on this CPU");
  const char *env[] = {"OPJIT_MODE=profile", NULL};
  run("amx", 1, env, model16, "256");
  /* as the_database_holds_the_run_profile_by_op counts them: 2 layers x 4 attention
   * projections and the first layer's 3 FFN products, each on both threads */
  cr_assert_eq(h_query(NULL, "SELECT sum(rs.calls) FROM run_sigs rs JOIN signatures s ON"
                             " s.id=rs.sig_id WHERE s.name LIKE 'MUL_MAT f16 AMX %% N=256'"),
               (2 * 4 + 3) * 2);
  cr_assert_gt(h_query(NULL, "SELECT sum(rs.timed_ns) FROM run_sigs rs JOIN signatures s ON"
                             " s.id=rs.sig_id WHERE s.name LIKE 'MUL_MAT f16 AMX %% N=256'"),
               0);
}

Test(ggml, another_ggml_version_passes_through_with_one_warning)
{
  const char *plain = run("plain", 0, NULL, model32, "32");
  const char *env[] = {"OPJIT_MODE=profile", "OPJIT_TEST_GGML_VERSION=0.0.0", NULL};
  cr_assert_str_eq(run("other", 1, env, model32, "32"), plain);
  const char *err = h_output("other", "err");
  cr_assert_eq(h_count_lines(err, "not the ggml this agent was built for"), 1, "%s", err);
  cr_assert_eq(h_count_lines(err, "opjit"), 1, "one message only: %s", err);
  struct stat st;
  cr_assert_neq(stat(h_db, &st), 0, "no operator was counted, so no database was created");
}

Test(ggml, hosts_without_ggml_leave_the_graphs_alone)
{
  const char *plain = run("plain", 0, NULL, model32, "32");
  const char *env[] = {"OPJIT_MODE=profile", "OPJIT_HOSTS=blas", NULL};
  cr_assert_str_eq(run("blasonly", 1, env, model32, "32"), plain);
  struct stat st;
  cr_assert_neq(stat(h_db, &st), 0, "no ggml op was counted");
  const char *genv[] = {"OPJIT_MODE=profile", "OPJIT_HOSTS=ggml", NULL};
  cr_assert_str_eq(run("ggmlonly", 1, genv, model32, "32"), plain);
  cr_assert_gt(h_query(NULL, "SELECT count(*) FROM signatures WHERE op='MUL_MAT'"), 0);
}

#ifdef OPJIT_NODE
/* The node host's output ("tokens ..." and "probabilities sum S"). With twice set it generates
 * twice, and the second time only once the first fusion's kernel is published (node cannot call
 * opjit_settle: the test watches the events the writer flushes), so that the kernel is verified
 * and stored before the process ends, whatever the load. */
static const char *run_node(const char *tag, int agent, const char *const *env, int twice,
                            char *tokens, size_t len, double *sum)
{
  char go[160];
  snprintf(go, sizeof go, "%s/%s.go", h_dir, tag);
  const char *argv[] = {OPJIT_NODE, OPJIT_SOURCE_DIR "/tests/integration/llama_node.mjs",
                        model32, "32", "8", "2", "1000", twice ? "2" : "1", go, NULL};
  pid_t pid = h_spawn(tag, agent, env, argv);
  int published = 0, status, ended = 0;
  for (int i = 0; twice && i < 6000 && !published && !ended; i++) { /* 10 minutes at most */
    usleep(100000);
    ended = waitpid(pid, &status, WNOHANG) == pid; /* it failed: no point waiting */
    if (h_db_has("events"))
      published = h_query(NULL, "SELECT count(*) FROM events e JOIN signatures s ON"
                                " s.id=e.sig_id WHERE e.kind='published' AND " FUSION1) > 0;
  }
  if (twice) {
    FILE *f = fopen(go, "w");
    cr_assert_not_null(f);
    fclose(f);
  }
  if (!ended)
    cr_assert_eq(waitpid(pid, &status, 0), pid);
  h_assert_no_sanitizer_report(tag);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: status %d\n%s", tag, status,
            h_output(tag, "err"));
  cr_assert(!twice || published, "%s: the fusion's kernel was not published in 10 minutes", tag);
  const char *o = h_output(tag, "out");
  const char *p = strstr(o, "probabilities sum ");
  cr_assert(p && sscanf(p, "probabilities sum %lf", sum) == 1, "%s", o);
  snprintf(tokens, len, "%.*s", (int)strcspn(o, "\n"), o);
  return tokens;
}

Test(ggml, the_node_host_agrees_with_the_c_host_with_and_without_the_agent)
{
  char plain[512], with[512], c_tokens[512];
  double s_plain, s_with, s_c;
  run_node("nplain", 0, NULL, 0, plain, sizeof plain, &s_plain);
  /* The C host: the same greedy tokens, the same probabilities within 1e-5. */
  const char *c = run("c", 0, NULL, model32, "32");
  snprintf(c_tokens, sizeof c_tokens, "%.*s", (int)strcspn(c, "\n"), c);
  cr_assert_str_eq(plain, c_tokens);
  cr_assert(sscanf(strstr(h_output("c", "out"), "probabilities sum"), "probabilities sum %lf", &s_c) == 1);
  cr_assert(fabs(s_c - s_plain) <= 1e-5 * fabs(s_plain), "C %.12g, node %.12g", s_c, s_plain);
  /* node under the agent, fusing from its first graph on in the second run (the first compiles
   * and stores the kernels, calls alone deciding, and generates twice: under load one round
   * ended before the fusion's compile did): the same tokens and probabilities, with node's
   * threads computing the MUL_MAT kernels and the fusions. */
  for (int r = 1; r <= 2; r++) {
    run_node(r == 1 ? "nagent1" : "nagent2", 1, fuse_env, r == 1, with, sizeof with, &s_with);
    cr_assert_str_eq(with, plain, "run %d", r);
    cr_assert(fabs(s_with - s_plain) <= 1e-5 * fabs(s_plain), "run %d: probabilities %.12g vs %.12g",
              r, s_with, s_plain);
  }
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                             " WHERE e.run_id=2 AND e.kind='loaded' AND " FUSION1), 1);
  cr_assert_gt(h_query(NULL, "SELECT v.calls FROM variants v JOIN signatures s ON s.id=v.sig_id"
                             " WHERE v.run_id=2 AND " FUSION1), 0, "node's run 2 ran fused");
  cr_assert_gt(h_query(NULL, "SELECT sum(v.calls) FROM variants v JOIN signatures s ON"
                             " s.id=v.sig_id WHERE v.run_id=2 AND s.op='MUL_MAT'"), 0,
               "node's run 2 ran the MUL_MAT kernels");
  /* The node runs' graphs were profiled by op. */
  cr_assert_gt(h_query(NULL, "SELECT count(*) FROM run_sigs rs JOIN signatures s ON s.id=rs.sig_id"
                             " WHERE s.op='MUL_MAT'"), 0);
}
#endif

Test(ggml, fused_groups_slower_than_ggml_s_nodes_are_demoted)
{
  /* A test hook makes the norm groups' custom nodes, the MUL_MAT + ADD groups' and the single
   * MUL_MATs' spend 3 ms more per call and runs the never-slower rounds back to back (2
   * executions of the host's own graph, 2 of the rebuilt one): the judge sees each kernel
   * slower than ggml's nodes round after round and demotes it, and its stored object goes.
   * The output stays the plain run's, whichever computed it. One thread: quicker rounds. Two
   * prompts, the JIT settled between them: the second runs on the compiled kernels, whatever the
   * load. */
  const char *argv[] = {H_LLAMA_PROG, "run", model32, "32", "100", "1", "2", NULL};
  const char *plain = run_argv("plain", 0, NULL, argv);
  const char *slow[] = {"OPJIT_MODE=jit", "OPJIT_HOT_CALLS=1", "OPJIT_HOT_PAYBACK=0",
                        "OPJIT_TEST_FUSION=slow", NULL};
  same_output(run_argv("slow", 1, slow, argv), plain, "slower fused groups");
  const char *kinds = "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id WHERE"
                      " %s AND e.kind='%s'";
  /* decode's norm groups, and its attention's Q and output products (their 256 x 256 kernel
   * also serves K and V, not slowed: the products together still lose) */
  const char *sigs[] = {FUSION1, "s.name = 'MUL_MAT f32 K=256 M=256 N=1'"};
  for (int i = 0; i < 2; i++) {
    char q[400], qo[400];
    snprintf(q, sizeof q, kinds, sigs[i], "demoted");
    cr_assert_eq(h_query(NULL, q), 1, "%s", sigs[i]);
    snprintf(qo, sizeof qo, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                            " WHERE %s", sigs[i]);
    cr_assert_eq(h_query(NULL, qo), 0, "a slower kernel is not kept: %s", sigs[i]);
  }
}

Test(ggml, a_kind_of_records_slower_than_ggml_s_nodes_goes_back_to_them_alone)
{
  /* A test hook makes the single MUL_MATs' custom nodes spend 3 ms more per call, and ggml's
   * nodes of K and V (products of one input) as much on the host's side of the rounds: the
   * 256 x 256 kernel ties on the pool of its records (Q, K and V, the output), so the tiers
   * keep it, but the graph's judge of its single products (Q and the output) finds them
   * slower and sends them back to ggml's nodes, with an event; K and V keep the kernel. */
  const char *argv[] = {H_LLAMA_PROG, "run", model32, "32", "100", "1", "2", NULL};
  const char *plain = run_argv("plain", 0, NULL, argv);
  const char *env[] = {"OPJIT_MODE=jit", "OPJIT_HOT_CALLS=1", "OPJIT_HOT_PAYBACK=0",
                       "OPJIT_TEST_FUSION=slow-single", NULL};
  same_output(run_argv("slow-single", 1, env, argv), plain, "slower single products");
#define QO "s.name = 'MUL_MAT f32 K=256 M=256 N=1'"
  cr_assert_geq(h_query(NULL, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                              " WHERE " QO " AND e.kind='demoted' AND e.detail LIKE 'back on%%'"),
                1, "the single products' judge");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                             " WHERE " QO " AND e.kind='demoted' AND"
                             " e.detail NOT LIKE 'back on%%'"),
               0, "the kernel itself is not demoted");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                             " WHERE " QO), 1, "the kernel is kept for K and V");
#undef QO
}

Test(ggml, two_contexts_computing_at_once_keep_their_output)
{
  /* Two llama contexts on two threads at once (node-llama-cpp's contexts, a server's slots):
   * each computation's threads read the cache entry the other's rounds publish (its timed or
   * hosted graph) while the other ends it and a third graph takes its slot. The churn seam runs
   * the rounds back to back, holds the cache to 3 entries (the 4 graphs evict each other at
   * every prefill) and has a reader yield once it pinned an entry. The second to eighth
   * repeats run on the compiled kernels (llama_prog waits for the JIT after the first), so the
   * rounds run; the ASan lane catches a read of a freed entry. Each model's tokens and logits
   * stay the plain run's. */
  const char *argv[] = {H_LLAMA_PROG, "pair", model32, model16, "16", "32", "1", "8", NULL};
  const char *env[] = {"OPJIT_MODE=jit", "OPJIT_HOT_CALLS=1", "OPJIT_HOT_PAYBACK=0",
                       "OPJIT_TEST_FUSION=churn", NULL};
  const char *plain = run_argv("pair-plain", 0, NULL, argv);
  const char *got = run_argv("pair", 1, env, argv);
  for (int m = 0; m < 2; m++) {
    char head[16];
    snprintf(head, sizeof head, "model %d\n", m);
    cr_assert(strstr(got, head) && strstr(plain, head), "%s\n%s", got, plain);
    close_output(strstr(got, head) + strlen(head), strstr(plain, head) + strlen(head), head,
                 rel_of[m]);
  }
  /* Both sides of the rounds were timed: fused graphs ran, rounds with them. */
  cr_assert_gt(h_query(NULL, "SELECT count(*) FROM variants v JOIN run_sigs r ON"
                             " r.sig_id=v.sig_id AND r.run_id=v.run_id WHERE v.timed_calls > 0"
                             " AND r.timed_calls > 0"),
               0, "no signature was timed on both sides of the rounds");
}

Test(ggml, a_wrong_fused_kernel_is_caught_and_the_output_stays_ggml_s)
{
  /* A test hook makes the kernel's y 1.5 times too large: its first verification fails, the
   * host keeps ggml's results, and every later group runs ggml's own ops. */
  const char *plain = run_long("plain", 0, NULL, model32);
  /* After the first decode step the run waits for the JIT: both fused kernels are compiled
   * (their groups are hot at once), and the 63 steps after it verify them. */
  const char *argv[] = {H_LLAMA_PROG, "run", model32, "32", "64", "2", "1", "1", NULL};
  same_output(run_argv("wrong", 1, wrong_env, argv), plain, "a wrong kernel");
  /* (decode's matrix-vector kernels are wrong too: the next test's business) */
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                             " WHERE e.kind='verify-failed' AND (" FUSION1 " OR " RMS_MUL ")"), 2);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM variants v JOIN signatures s ON s.id=v.sig_id"
                             " WHERE (" FUSION1 " OR " RMS_MUL ") AND v.status='failed'"), 2);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                             " WHERE " FUSION1 " OR " RMS_MUL), 0, "a wrong kernel is never stored");
}

Test(ggml, wrong_mul_mat_results_are_caught_and_the_output_stays_ggml_s)
{
  /* Two prompts in one process (a second after 3 s): the first makes the products hot and
   * their kernels are compiled meanwhile; the hook makes their results 1.5 times too large.
   * The second prompt's first execution of each, checked on each thread, catches it: those
   * rows are computed again, the kernels are blacklisted and their objects dropped. */
  const char *argv[] = {H_LLAMA_PROG, "run", model32, "32", "16", "2", "2", NULL};
  const char *plain = run_argv("plain2", 0, NULL, argv);
  const char *got = run_argv("wrong2", 1, wrong_env, argv);
  size_t tok = strstr(plain, "logits") - plain;
  cr_assert(strncmp(got, plain, tok) == 0, "both rounds' tokens:\n%s\n%s", got, plain);
  same_output(strchr(got, '\n') + 1, strchr(plain, '\n') + 1, "the second prompt");
  /* The prompt's products' kernels that ran (the attention's shape and the gate and up's, in
   * their groups) and both MUL_MAT + ADD groups' kernels. The down product runs only inside
   * its MUL_MAT + ADD group, with the group's kernel — but when a thread's check has just
   * blacklisted that kernel, the other thread, finding none, computes its rows with the
   * product's own kernel, and checks that one too: caught and dropped as well, else stored. */
#define N32 " AND s.name LIKE '%% N=32'"
  int64_t down = h_query(NULL, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                               " WHERE s.op='MUL_MAT' AND s.name LIKE '%% K=768 M=256 N=32' AND"
                               " e.kind='verify-failed'") > 0;
  cr_assert_eq(h_query(NULL, "SELECT count(DISTINCT e.sig_id) FROM events e JOIN signatures s ON"
                             " s.id=e.sig_id WHERE s.op='MUL_MAT' AND e.kind='verify-failed'" N32),
               2 + down);
  cr_assert_eq(h_query(NULL, "SELECT count(DISTINCT e.sig_id) FROM events e JOIN signatures s ON"
                             " s.id=e.sig_id WHERE " FUSION2 " AND e.kind='verify-failed'"), 2);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM variants v JOIN signatures s ON s.id=v.sig_id"
                             " WHERE (s.op='MUL_MAT'" N32 " OR " FUSION2 ") AND"
                             " v.status='failed'"), 4 + down);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                             " WHERE s.op='MUL_MAT'" N32 " OR " FUSION2), 1 - down,
               "only the down product's kernel, if it never ran, is stored");
  /* Decode's matrix-vector kernels (N=1: the attention's, gate and up's, down's), caught the
   * same way, none stored. */
  cr_assert_eq(h_query(NULL, "SELECT count(DISTINCT e.sig_id) FROM events e JOIN signatures s ON"
                             " s.id=e.sig_id WHERE s.op='MUL_MAT' AND s.name LIKE '%% N=1' AND"
                             " e.kind='verify-failed'"), 3);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects o JOIN signatures s ON s.id=o.sig_id"
                             " WHERE s.op='MUL_MAT' AND s.name LIKE '%% N=1'"), 0);
#undef N32
}
