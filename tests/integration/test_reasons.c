/* SPDX-License-Identifier: MIT */
/* Reasons: every signature a real host (jit_prog) called carries the JIT state the agent's own
 * decision gave it and why, in `opjit top` and `opjit variants`, text and --json: not hot yet,
 * unsupported (a shape over OPJIT_JIT_MAX_DIM), serving after a won duel, placed from the store
 * in the next run, lost its duel (both medians) and kept on the original in the run after. The
 * duels are decided by the fault seam (OPJIT_TEST_FAULT: fast makes the original 16 times
 * slower in the duel, slow the kernel), so no verdict rests on this machine's timings. */
#include "harness.h"

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

TestSuite(reasons, .init = h_setup_jit, .fini = h_teardown, .timeout = 600);

#define OPJIT_EXE OPJIT_BUILD_DIR "/opjit"

/* Runs jit_prog with the agent; fails the test unless every result matched the reference. */
static void host(const char *tag, const char *fault, const char *mode, const char *n)
{
  char f[64];
  snprintf(f, sizeof f, "OPJIT_TEST_FAULT=%s", fault);
  const char *env[] = {"OPJIT_MODE=jit",
                       "OPJIT_HOT_CALLS=64",
                       "OPJIT_HOT_PAYBACK=0",
                       "OPJIT_SAMPLE_HZ=0",
                       "OPJIT_JIT_MAX_DIM=32",
                       "OPJIT_WARM_WAIT_US=60000000",
                       "OPJIT_SUMMARY=1",
                       f,
                       NULL};
  int st = h_run(tag, 1, env, (const char *[]){H_JIT_PROG, mode, n, NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d\n%s\n%s", tag, st,
            h_output(tag, "out"), h_output(tag, "err"));
  cr_assert(strstr(h_output(tag, "out"), "mismatches 0"), "%s", h_output(tag, "out"));
}

/* `opjit CMD --db h_db A1 A2 A3` (a NULL ends the arguments early); returns its stdout (the
 * harness's buffer, until the next output read); fails the test unless it exits 0. */
static const char *opjit(const char *tag, const char *cmd, const char *a1, const char *a2,
                         const char *a3)
{
  int st = h_run(tag, 0, NULL, (const char *[]){OPJIT_EXE, cmd, "--db", h_db, a1, a2, a3, NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "opjit %s: status %d\n%s", cmd, st,
            h_output(tag, "err"));
  return h_output(tag, "out");
}

/* The entry of a --json list whose "name" is name; fails the test when there is none. */
static const cJSON *named(const cJSON *list, const char *name)
{
  const cJSON *e;
  cJSON_ArrayForEach(e, list)
  {
    const cJSON *n = cJSON_GetObjectItem(e, "name");
    if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
      return e;
  }
  cr_assert_fail("no %s in the list", name);
  return NULL;
}

static const char *text(const cJSON *o, const char *key)
{
  const cJSON *v = cJSON_GetObjectItem(o, key);
  cr_assert(cJSON_IsString(v), "%s is not a string", key);
  return v->valuestring;
}

/* Checks the signature called name in top's --json of the newest run: state st, reason
 * starting with (or, prefix 0, containing) why. */
static void expect_state(const char *name, const char *st, const char *why, int prefix)
{
  cJSON *doc = cJSON_Parse(opjit("top_json", "top", "--json", "--limit", "0"));
  cr_assert_not_null(doc);
  const cJSON *s = named(cJSON_GetObjectItem(doc, "signatures"), name);
  cr_expect_str_eq(text(s, "state"), st, "%s: %s", name, text(s, "reason"));
  const char *r = text(s, "reason");
  cr_expect(prefix ? !strncmp(r, why, strlen(why)) : strstr(r, why) != NULL, "%s: reason \"%s\"",
            name, r);
  cJSON_Delete(doc);
}

#define HOT "sgemm NN 8x8x8 β=0"
#define COLD "sgemm NN 24x24x24 β=0"
#define BIG "dgemm NN 40x40x40 β=1"

Test(reasons, each_state_says_why_in_its_decision_s_own_words)
{
  host("run1", "fast", "mixed", "300000");
  /* The exit summary names why each of its top signatures that no kernel serves stays so. */
  cr_expect(strstr(h_output("run1", "err"), BIG ", 400 calls, unsupported: M=40 is above "
                                                "OPJIT_JIT_MAX_DIM=32\n"),
            "%s", h_output("run1", "err"));
  expect_state(HOT, "serving", "won its duel", 0);
  /* ... on scratch operands placed as the program's lie (jit_prog's 8x8x8: A, B and C 16, 32
   * and 48 bytes into a line), as its publication says */
  const char *ev = opjit("events_json", "events", "--json", NULL, NULL); /* the text cuts it */
  cr_expect(strstr(ev, "won its duel") &&
                strstr(ev, "; A, B, C 16, 32, 48 bytes into a line, as the program's"),
            "%s", ev);
  expect_state(COLD, "waiting", "not hot yet: 3 of the 64 calls (OPJIT_HOT_CALLS)", 1);
  expect_state(BIG, "unsupported", "M=40 is above OPJIT_JIT_MAX_DIM=32", 1);
  /* The text: STATE with the speedup, the reasons under the rows with --why only. */
  const char *out = opjit("top", "top", NULL, NULL, NULL);
  cr_expect(strstr(out, "STATE") && strstr(out, "serving ") && strstr(out, "unsupported") &&
                strstr(out, "waiting") && !strstr(out, "OPJIT_JIT_MAX_DIM=32"),
            "%s", out);
  out = opjit("top_why", "top", "--why", NULL, NULL);
  cr_expect(strstr(out, "    M=40 is above OPJIT_JIT_MAX_DIM=32") &&
                strstr(out, "    not hot yet: 3 of the 64 calls") && strstr(out, "won its duel"),
            "%s", out);
  /* variants: the one variant, its state and reason in text and JSON. */
  out = opjit("variants", "variants", NULL, NULL, NULL);
  cr_expect(strstr(out, "STATE") && strstr(out, "serving") && strstr(out, "    won its duel"), "%s",
            out);
  cJSON *doc = cJSON_Parse(opjit("variants_json", "variants", "--json", NULL, NULL));
  cr_assert_not_null(doc);
  const cJSON *v = named(cJSON_GetObjectItem(doc, "variants"), HOT);
  cr_expect_str_eq(text(v, "state"), "serving");
  cr_expect(strstr(text(v, "reason"), "won its duel (median ratio") ||
                strstr(text(v, "reason"), "; won its duel: variant"),
            "%s", text(v, "reason"));
  cJSON_Delete(doc);

  /* export carries them too, per run. */
  doc = cJSON_Parse(opjit("export", "export", "--json", NULL, NULL));
  cr_assert_not_null(doc);
  const cJSON *run = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "runs"), 0);
  const cJSON *big = named(cJSON_GetObjectItem(run, "signatures"), BIG);
  cr_expect_str_eq(text(big, "state"), "unsupported");
  cr_expect_str_eq(text(big, "reason"), "M=40 is above OPJIT_JIT_MAX_DIM=32");
  cJSON_Delete(doc);

  /* Run 2: the stored kernel is placed, not compiled; the others say the same as before. */
  host("run2", "fast", "mixed", "300000");
  expect_state(HOT, "placed", "placed from the store", 0);
  expect_state(COLD, "waiting", "not hot yet: 3 of the 64 calls", 1);
  expect_state(BIG, "unsupported", "M=40 is above OPJIT_JIT_MAX_DIM=32", 1);
  /* opjit op: the signature's state in each run that called it, newest first. */
  doc = cJSON_Parse(opjit("top_json", "top", "--json", NULL, NULL));
  cr_assert_not_null(doc);
  char sig[17];
  snprintf(sig, sizeof sig, "%s", text(named(cJSON_GetObjectItem(doc, "signatures"), HOT), "sig"));
  cJSON_Delete(doc);
  doc = cJSON_Parse(opjit("op", "op", "--json", sig, NULL));
  cr_assert_not_null(doc);
  const cJSON *runs = cJSON_GetObjectItem(doc, "runs");
  cr_assert_eq(cJSON_GetArraySize(runs), 2);
  cr_expect_str_eq(text(cJSON_GetArrayItem(runs, 0), "state"), "placed");
  cr_expect_str_eq(text(cJSON_GetArrayItem(runs, 1), "state"), "serving");
  cJSON_Delete(doc);
  out = opjit("op_text", "op", sig, NULL, NULL);
  cr_expect(strstr(out, "STATE") && strstr(out, "    placed from the store") &&
                strstr(out, "won its duel"),
            "%s", out);
}

Test(reasons, a_lost_duel_gives_both_medians_and_the_next_run_says_why_it_stays_original)
{
  host("slow1", "slow", "mixed", "300000");
  expect_state(HOT, "lost", "slower before publication: variant ", 1);
  cJSON *doc = cJSON_Parse(opjit("variants_json", "variants", "--json", NULL, NULL));
  cr_assert_not_null(doc);
  const char *r = text(named(cJSON_GetObjectItem(doc, "variants"), HOT), "reason");
  long vns = 0, ons = 0;
  cr_expect_eq(
      sscanf(r, "slower before publication: variant %ld ns per call, original %ld ns", &vns, &ons),
      2, "%s", r);
  cr_expect_gt(vns, ons, "the kernel, run 16 times per call, is the slower: %s", r);
  cJSON_Delete(doc);
  host("slow2", "slow", "mixed", "300000");
  expect_state(HOT, "lost", "lost or tied against the original on this machine in an earlier run",
               0);
}

Test(reasons, profile_mode_says_off_in_json_and_adds_no_column)
{
  const char *env[] = {"OPJIT_MODE=profile", "OPJIT_SAMPLE_HZ=0", NULL};
  int st = h_run("profile", 1, env, (const char *[]){H_JIT_PROG, "many", "1000", NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", h_output("profile", "err"));
  expect_state(HOT, "off", "the JIT is off (OPJIT_MODE=profile)", 1);
  const char *out = opjit("top", "top", NULL, NULL, NULL);
  cr_expect(!strstr(out, "STATE") && !strstr(out, "off"), "%s", out);
}

Test(reasons, a_shape_over_the_limit_is_unsupported_whichever_way_its_payback_test_went)
{
  const char *env[] = {"OPJIT_MODE=jit", "OPJIT_SAMPLE_HZ=0", "OPJIT_JIT_MAX_DIM=32", NULL};
  int st = h_run("payback", 1, env, (const char *[]){H_JIT_PROG, "mixed", "20000", NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", h_output("payback", "err"));
  expect_state(BIG, "unsupported", "M=40 is above OPJIT_JIT_MAX_DIM=32", 1);
  expect_state(COLD, "waiting",
               "not hot yet: 3 of the 64 calls (OPJIT_HOT_CALLS) before the "
               "payback test",
               1);
}

/* A signature that gets hot once the program's exit has begun (in an exit handler of its own)
 * is not queued: a kernel compiled then serves no call, and the exit would wait for LLVM's load
 * (the loader's lock, _dl_fini). Its reason says so. */
Test(reasons, a_signature_hot_at_the_exit_waits_for_a_later_run)
{
  const char *env[] = {"OPJIT_MODE=jit", "OPJIT_HOT_PAYBACK=0", "OPJIT_SAMPLE_HZ=0",
                       "OPJIT_LOG=info", NULL};
  int st = h_run("exitcalls", 1, env, (const char *[]){H_JIT_PROG, "exitcalls", NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d\n%s", st,
            h_output("exitcalls", "err"));
  cr_assert(strstr(h_output("exitcalls", "out"), "mismatches 0"), "%s",
            h_output("exitcalls", "out"));
  expect_state("sgemm NN 16x16x16 β=0", "waiting",
               "hot as the program exited (hot after 64 calls): compiled when hot in a later run",
               1);
  cr_expect_eq(h_query(NULL, "SELECT count(*) FROM events WHERE kind='queued'"), 0);
  cr_expect_null(strstr(h_output("exitcalls", "err"), "JIT ready"), "LLVM loaded at the exit: %s",
                 h_output("exitcalls", "err"));
}
