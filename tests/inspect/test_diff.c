/* SPDX-License-Identifier: MIT */
/* `opjit diff` on two real numpy runs whose shapes and call counts differ: a signature in both
 * carries each run's figures as `opjit top` reads them, one only in B is new, one only in A
 * gone; JIT states on a crafted database with exact means; bad runs and usage. */
#define _GNU_SOURCE
#include "helpers.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* A: 200 calls of a 32x32 sgemm, 50 of a 16x16; B: 300 of the 32x32, 80 of a 48x48. */
#define NUMPY_RUN(n, sz, calls)                                                                    \
  "import numpy as np\n"                                                                           \
  "a = np.ones((32, 32), dtype=np.float32); b = np.ones((" #sz ", " #sz "), dtype=np.float32)\n"   \
  "for i in range(" #n "): a @ a\n"                                                                \
  "for i in range(" #calls "): b @ b\n"

static double num(const cJSON *o, const char *key)
{
  const cJSON *j = cJSON_GetObjectItem(o, key);
  cr_assert(cJSON_IsNumber(j), "%s is not a number", key);
  return j->valuedouble;
}

/* The element of array named "cblas_sgemm row NN MxMxM β=0", or NULL. */
static const cJSON *by_m(const cJSON *array, int m)
{
  const cJSON *s;
  char want[64];
  snprintf(want, sizeof want, "cblas_sgemm row NN %dx%dx%d β=0", m, m, m);
  cJSON_ArrayForEach(s, array) if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s, "name")),
                                          want) == 0) return s;
  return NULL;
}

/* The line of text holding needle, copied into buf ("" when none). */
static const char *line_with(const char *text, const char *needle, char *buf, size_t len)
{
  const char *p = strstr(text, needle);
  buf[0] = 0;
  if (!p)
    return buf;
  while (p > text && p[-1] != '\n')
    p--;
  size_t n = strcspn(p, "\n");
  snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), p);
  return buf;
}

/* Records the two numpy runs into db (runs 1 and 2). */
static void two_runs(const char *db)
{
  static const char *const progs[] = {NUMPY_RUN(200, 16, 50), NUMPY_RUN(300, 48, 80)};
  for (int i = 0; i < 2; i++) {
    proc_t p =
        opjit((const char *[]){"OPJIT_MODE=profile", NULL},
              (const char *[]){"run", "--quiet", "--db", db, "--", PYTHON, "-c", progs[i], NULL});
    cr_assert_eq(p.status, 0, "%s", p.err);
    proc_free(&p);
  }
}

/* `opjit top --json RUN`'s object for the m×m×m sgemm: calls and mean_ns into out. */
static void top_of(const char *db, const char *run, int m, double out[2])
{
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, "--json", run, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *s = by_m(cJSON_GetObjectItem(j, "signatures"), m);
  cr_assert(s, "top %s has no m=%d: %s", run, m, p.out);
  out[0] = num(s, "calls");
  out[1] = num(s, "mean_ns");
  cJSON_Delete(j);
  proc_free(&p);
}

Test(diff, real_runs_match_top_and_mark_new_and_gone)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  two_runs(db);
  double ta[2], tb[2];
  top_of(db, "1", 32, ta);
  top_of(db, "2", 32, tb);
  cr_expect_eq(ta[0], 200);
  cr_expect_eq(tb[0], 300);

  proc_t p = opjit(NULL, (const char *[]){"diff", "--db", db, "--json", "1", "2", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect_eq(num(cJSON_GetObjectItem(j, "a"), "run"), 1);
  cr_expect_eq(num(cJSON_GetObjectItem(j, "b"), "run"), 2);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "a"), "status")),
                   "exited");
  const cJSON *sigs = cJSON_GetObjectItem(j, "signatures");
  const cJSON *both = by_m(sigs, 32), *gone = by_m(sigs, 16), *fresh = by_m(sigs, 48);
  cr_assert(both && gone && fresh, "%s", p.out);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(both, "change")), "both");
  const cJSON *a = cJSON_GetObjectItem(both, "a"), *b = cJSON_GetObjectItem(both, "b");
  cr_expect_eq(num(a, "calls"), ta[0]);
  cr_expect_eq(num(b, "calls"), tb[0]);
  cr_expect_eq(num(a, "mean_ns"), ta[1], "%g vs top's %g", num(a, "mean_ns"), ta[1]);
  cr_expect_eq(num(b, "mean_ns"), tb[1], "%g vs top's %g", num(b, "mean_ns"), tb[1]);
  cr_expect(fabs(num(both, "mean_ratio") - tb[1] / ta[1]) < 1e-9 * tb[1] / ta[1]);

  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(gone, "change")), "gone");
  cr_expect_eq(num(cJSON_GetObjectItem(gone, "a"), "calls"), 50);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(gone, "b")));
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(fresh, "change")), "new");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(fresh, "a")));
  cr_expect_eq(num(cJSON_GetObjectItem(fresh, "b"), "calls"), 80);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"diff", "--db", db, "1", "2", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  char line[512];
  cr_expect(strstr(p.out, "A: run 1: python3") && strstr(p.out, "B: run 2: python3"), "%s", p.out);
  line_with(p.out, "32x32x32", line, sizeof line);
  cr_expect(strstr(line, "200 → 300") &&
                (strstr(line, "× faster") || strstr(line, "× slower") || strstr(line, "same")),
            "%s", line);
  line_with(p.out, "16x16x16", line, sizeof line);
  cr_expect(strstr(line, "50 → -") && strstr(line, "gone"), "%s", line);
  line_with(p.out, "48x48x48", line, sizeof line);
  cr_expect(strstr(line, "- → 80") && strstr(line, "new"), "%s", line);
  cr_expect(strstr(p.out, "(1 new, 1 gone)"), "%s", p.out);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"diff", "--db", db, "--json", "--limit", "1", "1", "2", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  j = proc_json(&p);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "signatures")), 1, "%s", p.out);
  cr_expect_geq(num(j, "total_signatures"), 3, "%s", p.out);
  cJSON_Delete(j);
  proc_free(&p);
}

/* Signature 64 is 3× faster under a ready variant in A and demoted (0.5×) in B. */
Test(diff, jit_state_and_speedup_of_each_run)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  static const fake_sig_t sa[] = {{.m = 64, .calls = 1000, .timed_calls = 10, .timed_ns = 3000}},
                          sb[] = {{.m = 64, .calls = 400, .timed_calls = 20, .timed_ns = 5000}};
  static const fake_variant_t va[] = {{.m = 64,
                                       .status = "ready",
                                       .compile_ns = 1000000,
                                       .calls = 900,
                                       .timed_calls = 9,
                                       .timed_ns = 900}},
                              vb[] = {{.m = 64,
                                       .status = "demoted",
                                       .compile_ns = 1000000,
                                       .calls = 100,
                                       .timed_calls = 10,
                                       .timed_ns = 5000}};
  int64_t ra = craft_run(db, 0, 0, 1, sa, 1), rb = craft_run(db, 0, 0, 1, sb, 1);
  craft_variants(db, ra, va, 1, NULL, 0);
  craft_variants(db, rb, vb, 1, NULL, 0);
  char ida[24], idb[24];
  snprintf(ida, sizeof ida, "%lld", (long long)ra);
  snprintf(idb, sizeof idb, "%lld", (long long)rb);

  proc_t p = opjit(NULL, (const char *[]){"diff", "--db", db, "--json", ida, idb, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *s = by_m(cJSON_GetObjectItem(j, "signatures"), 64);
  cr_assert(s, "%s", p.out);
  const cJSON *ja = cJSON_GetObjectItem(cJSON_GetObjectItem(s, "a"), "jit");
  const cJSON *jb = cJSON_GetObjectItem(cJSON_GetObjectItem(s, "b"), "jit");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(ja, "status")), "ready");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(jb, "status")), "demoted");
  cr_expect(fabs(num(ja, "speedup") - 3.0) < 1e-9, "%g", num(ja, "speedup"));
  cr_expect(fabs(num(jb, "speedup") - 0.5) < 1e-9, "%g", num(jb, "speedup"));
  /* A: 100 × 300 + 900 × 100 over 1000 calls = 120 ns; B: 300 × 250 + 100 × 500 over 400. */
  cr_expect(fabs(num(cJSON_GetObjectItem(s, "a"), "mean_ns") - 120) < 1e-9);
  cr_expect(fabs(num(cJSON_GetObjectItem(s, "b"), "mean_ns") - 312.5) < 1e-9);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"diff", "--db", db, ida, idb, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "jit 3.0× → jit (demoted)") && strstr(p.out, "2.60× slower"), "%s",
            p.out);
  proc_free(&p);
}

Test(diff, bad_runs_and_usage)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  static const fake_sig_t s[] = {{.m = 8, .calls = 10, .timed_calls = 1, .timed_ns = 100}};
  craft_run(db, 0, 0, 1, s, 1);
  proc_t p = opjit(NULL, (const char *[]){"diff", "--db", db, "1", "99", NULL});
  cr_expect_eq(p.status, 1, "%s", p.err);
  cr_expect(strstr(p.err, "no run 99") && strchr(p.err, '\n') == p.err + strlen(p.err) - 1,
            "one line: %s", p.err);
  cr_expect_str_eq(p.out, "");
  proc_free(&p);

  static const char *const bad[][6] = {{"diff", "--db", NULL, "1", NULL},
                                       {"diff", "--db", NULL, "1", "x", NULL},
                                       {"diff", "--db", NULL, "1", "1", "1"},
                                       {"diff", "--db", NULL, "--bogus", "1", "1"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    const char *args[7] = {0};
    for (int k = 0; k < 6; k++)
      args[k] = k == 2 ? db : bad[i][k];
    p = opjit(NULL, args);
    cr_expect_eq(p.status, 2, "case %zu: %s", i, p.err);
    cr_expect(strstr(p.err, "usage: opjit diff"), "case %zu: %s", i, p.err);
    proc_free(&p);
  }
}
