/* SPDX-License-Identifier: MIT */
/* What the readers show of the JIT: variants, events, top's JIT column and split estimate,
 * runs, export, report and doctor, on crafted databases with exact means; and one real numpy
 * program whose hot sgemm gets compiled. */
#define _GNU_SOURCE
#include "helpers.h"
#include "inspect/variants.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A: 1000 calls, the original 300 ns per timed call, the variant 100 ns over 900 calls (3×).
 * B: 400 calls, the original 250 ns, a demoted variant 500 ns over 100 calls (0.5×).
 * C: 50 calls, untimed, its compile failed. D: 10 calls, no variant. */
static const fake_sig_t sigs[] = {
    {.m = 64, .calls = 1000, .timed_calls = 10, .timed_ns = 10 * 300},
    {.m = 32, .calls = 400, .timed_calls = 20, .timed_ns = 20 * 250},
    {.m = 8, .calls = 50},
    {.m = 4, .calls = 10, .timed_calls = 1, .timed_ns = 40},
};
static const fake_variant_t variants[] = {
    {.m = 64, .status = "ready", .compile_ns = 12300000, .calls = 900, .timed_calls = 50,
     .timed_ns = 50 * 100},
    {.m = 32, .status = "demoted", .compile_ns = 9000000, .calls = 100, .timed_calls = 10,
     .timed_ns = 10 * 500},
    {.m = 8, .status = "failed"},
};
/* Written out of order: the readers sort by time. */
static const fake_event_t events[] = {
    {64, 2500000, "published", "compiled in 12.3 ms"},
    {64, 1500000, "queued", "hot after 64 calls"},
    {32, 1000000, "queued", "hot after 64 calls"},
    {64, 2600000, "verified", "matches the original within 0.002"},
    {32, 12000000, "demoted", "variant 500 ns per call, original 250 ns"},
    {8, 3000000, "failed", "injected compile failure"},
};

static double num(const cJSON *o, const char *key)
{
  const cJSON *j = cJSON_GetObjectItem(o, key);
  cr_assert(cJSON_IsNumber(j), "%s is not a number", key);
  return j->valuedouble;
}

static const char *text(const cJSON *o, const char *key)
{
  const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, key));
  cr_assert(s, "%s is not a string", key);
  return s;
}

/* The element of array whose params (or, lacking them, name) says m. */
static const cJSON *by_m(const cJSON *array, int m)
{
  const cJSON *s;
  char want[64];
  snprintf(want, sizeof want, "cblas_sgemm row NN %dx%dx%d β=0", m, m, m);
  cJSON_ArrayForEach(s, array)
    if (strcmp(text(s, "name"), want) == 0)
      return s;
  cr_assert_fail("no signature with m=%d", m);
  return NULL;
}

/* runs: 1 with variants (A only, ready), 2 the full set (returned), 3 without any. */
static int64_t craft(const char *db)
{
  int64_t r1 = craft_run(db, 0, 0, 1, sigs, 1);
  craft_variants(db, r1, variants, 1, events, 2);
  int64_t r2 = craft_run(db, 0, 0, 1, sigs, 4);
  craft_variants(db, r2, variants, 3, events, 6);
  craft_run(db, 0, 0, 1, sigs + 3, 1);
  return r2;
}

static char *id_text(int64_t id)
{
  char *s;
  cr_assert(asprintf(&s, "%lld", (long long)id) > 0);
  return s;
}

Test(variants, json_speedups_shares_and_default_run)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  proc_t p = opjit(NULL, (const char *[]){"variants", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect_eq(num(j, "run"), run, "the newest run with variants, not the newest run");
  cr_expect_str_eq(text(j, "llvm"), "19.1.7");
  cr_expect_str_eq(text(j, "cpu"), "znver4");
  const cJSON *list = cJSON_GetObjectItem(j, "variants");
  cr_assert_eq(cJSON_GetArraySize(list), 3);
  cr_expect_eq(num(cJSON_GetArrayItem(list, 0), "calls"), 900, "most calls served first");
  const cJSON *a = by_m(list, 64), *b = by_m(list, 32), *c = by_m(list, 8);
  cr_expect_str_eq(text(a, "status"), "ready");
  cr_expect_eq(num(a, "variant_mean_ns"), 100);
  cr_expect_eq(num(a, "original_mean_ns"), 300);
  cr_expect(fabs(num(a, "speedup") - 3.0) < 1e-12, "%g", num(a, "speedup"));
  cr_expect(fabs(num(a, "calls_pct") - 90.0) < 1e-12);
  cr_expect_eq(num(a, "signature_calls"), 1000);
  cr_expect_eq(num(a, "compile_ns"), 12300000);
  cr_expect_str_eq(text(b, "status"), "demoted");
  cr_expect(fabs(num(b, "speedup") - 0.5) < 1e-12);
  cr_expect(fabs(num(b, "calls_pct") - 25.0) < 1e-12);
  cr_expect_str_eq(text(c, "status"), "failed");
  cr_expect_eq(num(c, "calls"), 0);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(c, "speedup")), "nothing timed: no speedup");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(c, "variant_mean_ns")));
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"variants", "--db", db, "--all", "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  j = proc_json(&p);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "run")));
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "variants")), 4);
  cJSON_Delete(j);
  proc_free(&p);
}

Test(variants, table_has_speedup_and_compiler_once)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft(db);
  proc_t p = opjit(NULL, (const char *[]){"variants", "--db", db, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "compiled with LLVM 19.1.7 for znver4 (generator 1)"), "%s", p.out);
  cr_expect(strstr(p.out, "3.0×") && strstr(p.out, "0.5×") && strstr(p.out, "90.0%"), "%s",
            p.out);
  cr_expect(strstr(p.out, "12.3 ms"), "compile time: %s", p.out);
  cr_expect(!strstr(p.out, "LLVM  "), "no LLVM column when all agree: %s", p.out);
  proc_free(&p);

  /* A run whose variants were compiled differently shows the compiler per row. */
  int64_t run = craft_run(db, 0, 0, 1, sigs, 2);
  const fake_variant_t mixed[] = {
      {.m = 64, .status = "ready", .llvm = "19.1.7", .cpu = "skylake", .calls = 1},
      {.m = 32, .status = "ready", .llvm = "19.1.5", .cpu = "znver3", .calls = 1}};
  craft_variants(db, run, mixed, 2, NULL, 0);
  p = opjit(NULL, (const char *[]){"variants", "--db", db, NULL});
  cr_expect(strstr(p.out, "LLVM") && strstr(p.out, "skylake") && strstr(p.out, "19.1.5"), "%s",
            p.out);
  cr_expect(!strstr(p.out, "compiled with"), "%s", p.out);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"variants", "--db", db, "--json", NULL});
  cJSON *j = proc_json(&p);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "llvm")));
  cJSON_Delete(j);
  proc_free(&p);
}

Test(variants, none_yet_is_a_clear_failure_an_empty_run_is_not)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft_run(db, 0, 0, 1, sigs, 4);
  proc_t p = opjit(NULL, (const char *[]){"variants", "--db", db, NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "opjit: no JIT variants yet") && strstr(p.err, "OPJIT_HOT_CALLS"),
            "%s", p.err);
  cr_expect_str_eq(p.out, "");
  proc_free(&p);

  char *id = id_text(run);
  p = opjit(NULL, (const char *[]){"variants", "--db", db, id, "--json", NULL});
  cr_expect_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "variants")), 0);
  cJSON_Delete(j);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"variants", "--db", db, id, NULL});
  cr_expect_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "no JIT variants in this run"), "%s", p.out);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"variants", "--db", db, "99", NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "no run 99"), "%s", p.err);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"variants", "--db", db, id, "--all", NULL});
  cr_expect_eq(p.status, 2);
  proc_free(&p);
}

Test(events, ordered_relative_and_filtered)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  proc_t p = opjit(NULL, (const char *[]){"events", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect_eq(num(j, "run"), run);
  const cJSON *list = cJSON_GetObjectItem(j, "events");
  cr_assert_eq(cJSON_GetArraySize(list), 6);
  static const char *const order[] = {"queued", "queued", "published", "verified", "failed",
                                      "demoted"};
  static const double ms[] = {1.0, 1.5, 2.5, 2.6, 3.0, 12.0};
  for (int i = 0; i < 6; i++) {
    const cJSON *e = cJSON_GetArrayItem(list, i);
    cr_expect_str_eq(text(e, "kind"), order[i], "event %d", i);
    cr_expect(fabs(num(e, "time_ms") - ms[i]) < 1e-9, "event %d at %g ms", i, num(e, "time_ms"));
  }
  cr_expect_str_eq(text(cJSON_GetArrayItem(list, 0), "name"), "cblas_sgemm row NN 32x32x32 β=0");
  cr_expect_str_eq(text(cJSON_GetArrayItem(list, 2), "detail"), "compiled in 12.3 ms");
  const char *sig64 = text(cJSON_GetArrayItem(list, 1), "sig");
  char prefix[9];
  snprintf(prefix, sizeof prefix, "%.8s", sig64);
  cJSON *keep = cJSON_Duplicate(j, 1);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"events", "--db", db, "--kind", "queued", "--json", NULL});
  j = proc_json(&p);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "events")), 2);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"events", "--db", db, "--sig", prefix, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  j = proc_json(&p);
  const cJSON *e;
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "events")), 3);
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "events"))
    cr_expect_str_eq(text(e, "name"), "cblas_sgemm row NN 64x64x64 β=0");
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"events", "--db", db, "--sig", prefix, "--kind", "verified",
                                   NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "2.6 ms") && strstr(p.out, "verified"), "%s", p.out);
  cr_expect(!strstr(p.out, "queued"), "%s", p.out);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"events", "--db", db, "--all", "--json", NULL});
  j = proc_json(&p);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "events")), 8);
  cr_expect(num(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "events"), 0), "run") < run,
            "oldest run first");
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"events", "--db", db, "--kind", "exploded", NULL});
  cr_expect_eq(p.status, 2);
  cr_expect(strstr(p.err, "exploded"), "%s", p.err);
  cr_expect(strstr(p.err, "evicted, deferred, loaded, invalidated, refused, crashed)"),
            "every kind the agent records: %s", p.err);
  proc_free(&p);
  /* Kinds the agent records that this run has none of: no match, not an error. */
  for (const char *const *k = (const char *const[]){"evicted", "deferred", NULL}; *k; k++) {
    p = opjit(NULL, (const char *[]){"events", "--db", db, "--kind", *k, NULL});
    cr_expect_eq(p.status, 0, "--kind %s: %s", *k, p.err);
    cr_expect(strstr(p.out, "no matching events"), "--kind %s: %s", *k, p.out);
    proc_free(&p);
  }
  cJSON_Delete(keep);
}

Test(events, none_yet_is_a_clear_failure)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, 0, 1, sigs, 1);
  proc_t p = opjit(NULL, (const char *[]){"events", "--db", db, NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "no JIT events yet"), "%s", p.err);
  proc_free(&p);
}

Test(top, jit_column_split_estimate_and_saving)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  char *id = id_text(run);
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, id, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *list = cJSON_GetObjectItem(j, "signatures");
  const cJSON *a = by_m(list, 64), *b = by_m(list, 32), *c = by_m(list, 8), *d = by_m(list, 4);
  /* A: 100 original calls × 300 + 900 variant calls × 100; B: 300 × 250 + 100 × 500. */
  cr_expect_eq(num(a, "est_ns"), 100 * 300 + 900 * 100);
  cr_expect_eq(num(b, "est_ns"), 300 * 250 + 100 * 500);
  cr_expect_eq(num(c, "est_ns"), 0);
  cr_expect_eq(num(d, "est_ns"), 400);
  cr_expect_eq(num(j, "est_ns"), 120000 + 125000 + 400);
  cr_expect_eq(num(a, "mean_ns"), 120);
  const cJSON *ja = cJSON_GetObjectItem(a, "jit");
  cr_expect_str_eq(text(ja, "status"), "ready");
  cr_expect(fabs(num(ja, "speedup") - 3.0) < 1e-12);
  cr_expect_eq(num(ja, "calls"), 900);
  cr_expect_eq(num(ja, "original_calls"), 100);
  cr_expect_eq(num(ja, "saving_ns"), 900 * 200);
  cr_expect_eq(num(cJSON_GetObjectItem(b, "jit"), "saving_ns"), -100 * 250);
  cr_expect_str_eq(text(cJSON_GetObjectItem(c, "jit"), "status"), "failed");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(d, "jit")), "no variant: jit is null");
  const cJSON *total = cJSON_GetObjectItem(j, "jit");
  cr_expect_eq(num(total, "signatures"), 2, "A and B ran JIT code, C never did");
  cr_expect_eq(num(total, "calls"), 1000);
  cr_expect(fabs(num(total, "calls_pct") - 100.0 * 1000 / 1460) < 1e-9);
  cr_expect_eq(num(total, "saving_ns"), 180000 - 25000);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"top", "--db", db, id, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "JIT"), "%s", p.out);
  cr_expect(strstr(p.out, "jit 3.0×") && strstr(p.out, "jit (demoted)") &&
            strstr(p.out, "failed"), "%s", p.out);
  cr_expect(strstr(p.out, "2 signatures run JIT code: 68.5% of calls, estimated saving "
                          "0.155 ms"), "%s", p.out);
  proc_free(&p);
}

/* A pool of the judge's rounds on A's variant (the run's crafted means say 3×): ratios as the
 * agent stores them (little-endian float32, oldest first), the first n of these. */
static void craft_judge(const char *db, int n, const char *extra)
{
  static const float r[] = {0.5f, 0.4f, 0.6f, 0.45f, 0.55f, 0.5f, 0.52f, 0.48f, 0.7f};
  char hex[2 * 4 * 9 + 1] = "", sql[1024];
  for (int k = 0; k < n; k++) {
    uint32_t bits;
    memcpy(&bits, &r[k], 4);
    for (int b = 0; b < 4; b++)
      snprintf(hex + 8 * k + 2 * b, 3, "%02x", (bits >> (8 * b)) & 0xff);
  }
  snprintf(sql, sizeof sql,
           "INSERT INTO judge_pools SELECT id, 'cpu', 1, 'sym', 2, %d, 0, %d, 1, %d, 0, 0, 0, 0,"
           " X'%s%s', 1 FROM signatures WHERE name LIKE '%% 64x64x64 %%'", n, n, n, hex,
           extra);
  sql_exec(db, sql);
}

/* Where the judge pooled a verdict's worth of rounds on a variant, its median ratio gives the
 * speedup, the original's mean (the variant's / the ratio) and the saving: the means of the
 * original's rare calls in a run the variant serves are colder than a plain run's calls. */
Test(top, the_judges_median_ratio_gives_speedup_original_and_saving)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  char *id = id_text(run);
  /* 8 ratios: sorted 0.4 0.45 0.48 0.5 0.5 0.52 0.55 0.6, median 0.5 */
  craft_judge(db, 8, "");
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, id, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *ja = cJSON_GetObjectItem(by_m(cJSON_GetObjectItem(j, "signatures"), 64), "jit");
  cr_expect(fabs(num(ja, "speedup") - 2.0) < 1e-6, "%g", num(ja, "speedup"));
  cr_expect(fabs(num(ja, "original_mean_ns") - 200) < 1e-3, "%g", num(ja, "original_mean_ns"));
  cr_expect(fabs(num(ja, "saving_ns") - 900 * 100 * (2.0 - 1)) < 1e-3, "%g",
            num(ja, "saving_ns"));
  /* its 100 original calls at that mean, not at the rare timed calls' 300 */
  const cJSON *a = by_m(cJSON_GetObjectItem(j, "signatures"), 64);
  cr_expect(fabs(num(a, "est_ns") - (100 * 200 + 900 * 100)) < 1e-3, "%g", num(a, "est_ns"));
  cr_expect(fabs(num(cJSON_GetObjectItem(j, "jit"), "saving_ns") - (90000 - 25000)) < 1e-3,
            "B, without a pool, keeps its means");
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"variants", "--db", db, id, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  j = proc_json(&p);
  const cJSON *v;
  a = NULL;
  cJSON_ArrayForEach(v, cJSON_GetObjectItem(j, "variants"))
    if (strstr(text(v, "name"), " 64x64x64 "))
      a = v;
  cr_assert(a, "%s", p.out);
  cr_expect(fabs(num(a, "speedup") - 2.0) < 1e-6, "%g", num(a, "speedup"));
  cJSON_Delete(j);
  proc_free(&p);

  /* Fewer than the earliest verdict's rounds, or a damaged ratio (NaN): the means, as before. */
  for (int damaged = 0; damaged < 2; damaged++) {
    sql_exec(db, "DELETE FROM judge_pools");
    craft_judge(db, damaged ? 8 : ST_JUDGE_MIN_RATIOS - 1, damaged ? "0000c07f" : "");
    p = opjit(NULL, (const char *[]){"top", "--db", db, id, "--json", NULL});
    cr_assert_eq(p.status, 0, "%s", p.err);
    j = proc_json(&p);
    ja = cJSON_GetObjectItem(by_m(cJSON_GetObjectItem(j, "signatures"), 64), "jit");
    cr_expect(fabs(num(ja, "speedup") - 3.0) < 1e-12, "damaged %d: %g", damaged,
              num(ja, "speedup"));
    cr_expect_eq(num(ja, "saving_ns"), 900 * 200);
    cr_expect_eq(num(by_m(cJSON_GetObjectItem(j, "signatures"), 64), "est_ns"),
                 100 * 300 + 900 * 100);
    cJSON_Delete(j);
    proc_free(&p);
  }
}

/* A variant row's own ratio (the judge's window when its run wrote the row, whatever the
 * verdict) gives that run's figures, ahead of the signature's pool: a variant demoted as slower
 * shows as slower, its saving negative, though the means of the original's rare colder calls
 * would say otherwise; over several runs, the variant's time against the original's that each
 * run's ratio implies. */
Test(top, a_runs_own_ratio_gives_its_figures_a_demoted_variant_slower)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  char *id = id_text(run), sql[512];
  craft_judge(db, 8, ""); /* A's pool: median 0.5 */
  /* in the newest run A's window said 0.25, B's (demoted; the means say 2x slower) 1.25 */
  snprintf(sql, sizeof sql, "UPDATE variants SET ratio = CASE (SELECT name FROM signatures s"
           " WHERE s.id = variants.sig_id) WHEN 'cblas_sgemm row NN 64x64x64 β=0' THEN 0.25"
           " WHEN 'cblas_sgemm row NN 32x32x32 β=0' THEN 1.25 END WHERE run_id = %lld",
           (long long)run);
  sql_exec(db, sql);
  proc_t p = opjit(NULL, (const char *[]){"variants", "--db", db, id, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *list = cJSON_GetObjectItem(j, "variants");
  cr_expect(fabs(num(by_m(list, 64), "speedup") - 4.0) < 1e-6, "%s", p.out);
  cr_expect(fabs(num(by_m(list, 32), "speedup") - 0.8) < 1e-6, "%s", p.out);
  cr_expect(fabs(num(by_m(list, 32), "original_mean_ns") - 400) < 1e-3, "%s", p.out);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"top", "--db", db, id, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  j = proc_json(&p);
  const cJSON *sigs_ = cJSON_GetObjectItem(j, "signatures");
  const cJSON *jb = cJSON_GetObjectItem(by_m(sigs_, 32), "jit");
  cr_expect(fabs(num(jb, "speedup") - 0.8) < 1e-6, "%g", num(jb, "speedup"));
  cr_expect(fabs(num(jb, "saving_ns") - 100 * 500 * (0.8 - 1)) < 1e-3, "%g",
            num(jb, "saving_ns"));
  cr_expect(fabs(num(cJSON_GetObjectItem(j, "jit"), "saving_ns") -
                 (900 * 100 * 3.0 - 100 * 500 * 0.2)) < 1e-3, "A 4x, B 0.8x");
  /* the original's calls at the means the ratios imply: A's 100 at 400, B's 300 at 400 */
  cr_expect(fabs(num(by_m(sigs_, 64), "est_ns") - (100 * 400 + 900 * 100)) < 1e-3, "%s", p.out);
  cr_expect(fabs(num(by_m(sigs_, 32), "est_ns") - (300 * 400 + 100 * 500)) < 1e-3, "%s", p.out);
  cJSON_Delete(j);
  proc_free(&p);

  /* --all: run 1's A has no ratio of its own (its pool's 0.5), run 2's 0.25; each run's
   * variant calls (crafted alike) at the variant's mean: 2 x 90000 ns of variant time against
   * 90000 / 0.5 + 90000 / 0.25 of the original's, a ratio of 1/3 */
  p = opjit(NULL, (const char *[]){"top", "--db", db, "--all", "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  j = proc_json(&p);
  const cJSON *ja = cJSON_GetObjectItem(by_m(cJSON_GetObjectItem(j, "signatures"), 64), "jit");
  cr_expect(fabs(num(ja, "speedup") - 3.0) < 1e-6, "%g", num(ja, "speedup"));
  cr_expect(fabs(num(ja, "saving_ns") - (90000 * 1.0 + 90000 * 3.0)) < 1e-3, "%g",
            num(ja, "saving_ns"));
  cJSON_Delete(j);
  proc_free(&p);
}

Test(top, unjitted_run_is_unchanged)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft(db); /* the newest run has no variants */
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(!strstr(p.out, "JIT") && !strstr(p.out, "jit"), "%s", p.out);
  cr_expect(strstr(p.out, "  SIG"), "%s", p.out);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"top", "--db", db, "--json", NULL});
  cJSON *j = proc_json(&p);
  cr_expect(!cJSON_GetObjectItem(j, "jit"));
  const cJSON *d = by_m(cJSON_GetObjectItem(j, "signatures"), 4);
  cr_expect_eq(num(d, "est_ns"), 400);
  cr_expect_eq(num(d, "mean_ns"), 40);
  cJSON_Delete(j);
  proc_free(&p);
}

Test(runs, jit_column_counts_ready_variants)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  proc_t p = opjit(NULL, (const char *[]){"runs", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *r;
  cJSON_ArrayForEach(r, cJSON_GetObjectItem(j, "runs")) {
    int jit = num(r, "id") == run || num(r, "id") == run - 1;
    cr_expect_eq(num(r, "jit_ready"), jit, "run %g", num(r, "id"));
    cr_expect_eq(num(r, "jit_compiled"), jit, "one published event: run %g", num(r, "id"));
    cr_expect_eq(num(r, "jit_loaded"), 0);
    cr_expect_eq(num(r, "jit_invalidated"), 0);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(r, "warm_ns")), "no warm start");
  }
  cJSON_Delete(j);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"runs", "--db", db, NULL});
  cr_expect(strstr(p.out, "JIT  WARM  COMPILED  STALE\n"), "the last headers: %s", p.out);
  proc_free(&p);
}

Test(export, runs_carry_variants_and_events)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  char *id = id_text(run);
  proc_t p = opjit(NULL, (const char *[]){"export", "--json", "--db", db, id, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "runs"), 0);
  const cJSON *v = cJSON_GetObjectItem(r, "variants"), *e = cJSON_GetObjectItem(r, "events");
  cr_assert_eq(cJSON_GetArraySize(v), 3);
  cr_expect_str_eq(text(cJSON_GetArrayItem(v, 0), "status"), "ready");
  cr_expect_eq(num(cJSON_GetArrayItem(v, 0), "timed_ns"), 5000);
  cr_expect_str_eq(text(cJSON_GetArrayItem(v, 0), "llvm"), "19.1.7");
  cr_assert_eq(cJSON_GetArraySize(e), 6);
  cr_expect_str_eq(text(cJSON_GetArrayItem(e, 5), "kind"), "demoted");
  cr_expect_eq(strlen(text(cJSON_GetArrayItem(e, 5), "sig")), 16);
  cJSON_Delete(j);
  proc_free(&p);
}

Test(report, jit_table_when_the_run_has_variants)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  char *id = id_text(run);
  proc_t p = opjit(NULL, (const char *[]){"report", "--db", db, id, "-o", "-", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "<h2>JIT</h2>") && strstr(p.out, "3.0×") &&
            strstr(p.out, "LLVM 19.1.7, znver4"), "%.2000s", p.out);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"report", "--db", db, "-o", "-", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(!strstr(p.out, "<h2>JIT</h2>"), "the newest run has no variants");
  proc_free(&p);
}

Test(open, schema_3_reads_as_no_jit)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, 0, 1, sigs, 4);
  sql_exec(db, "DROP TABLE events; DROP TABLE variants; PRAGMA user_version = 3");
  static const char *const cmds[][3] = {{"top", "--json"}, {"runs", "--json"},
                                        {"export", "--json"}, {"report", "-o"}};
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
    proc_t p = opjit(NULL, (const char *[]){cmds[i][0], "--db", db, cmds[i][1],
                                            i == 3 ? "-" : NULL, NULL});
    cr_expect_eq(p.status, 0, "%s: %s", cmds[i][0], p.err);
    proc_free(&p);
  }
  proc_t p = opjit(NULL, (const char *[]){"variants", "--db", db, NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "no JIT variants yet"), "%s", p.err);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"events", "--db", db, "--all", NULL});
  cr_expect_eq(p.status, 0, "%s", p.err);
  proc_free(&p);
  int version = -1;
  st_db_t *h;
  char err[256];
  cr_assert_eq(st_open(db, ST_OPEN_READONLY, 100, &h, err, sizeof err), ST_OK, "%s", err);
  st_schema_version(h, &version);
  st_close(h);
  cr_expect_eq(version, 3, "readers never migrate");
}

Test(open, schema_4_reads_without_warm_starts)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft(db);
  /* What a version-4 file lacks: the runs' warm start, the variants' origin, the objects. */
  sql_exec(db, "ALTER TABLE runs DROP COLUMN warm_ns; ALTER TABLE variants DROP COLUMN origin;"
               " ALTER TABLE variants DROP COLUMN pre_calls; DROP TABLE objects;"
               " PRAGMA user_version = 4");
  static const char *const cmds[][3] = {{"top", "--json"},      {"runs", "--json"},
                                        {"variants", "--json"}, {"events", "--json"},
                                        {"export", "--json"},   {"report", "-o"}};
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
    proc_t p = opjit(NULL, (const char *[]){cmds[i][0], "--db", db, cmds[i][1],
                                            i == 5 ? "-" : NULL, NULL});
    cr_expect_eq(p.status, 0, "%s: %s", cmds[i][0], p.err);
    proc_free(&p);
  }
  proc_t p = opjit(NULL, (const char *[]){"runs", "--db", db, "--json", NULL});
  cJSON *j = proc_json(&p);
  const cJSON *r;
  cJSON_ArrayForEach(r, cJSON_GetObjectItem(j, "runs"))
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(r, "warm_ns")));
  cJSON_Delete(j);
  proc_free(&p);
}

Test(open, schema_6_reads_with_no_state_or_reason)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  char *id = id_text(run);
  /* What a version-6 file lacks: each signature's JIT state and its reason. */
  sql_exec(db, "ALTER TABLE run_sigs DROP COLUMN state; ALTER TABLE run_sigs DROP COLUMN reason;"
               " PRAGMA user_version = 6");
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, id, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItem(j, "signatures"))
  {
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(s, "state")), "%s", p.out);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(s, "reason")), "%s", p.out);
  }
  cJSON_Delete(j);
  proc_free(&p);
  /* The text: the variants' status where there is one, "-" elsewhere, and the reason unknown. */
  p = opjit(NULL, (const char *[]){"top", "--db", db, id, "--why", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "jit 3.0×") && strstr(p.out, "jit (demoted)") &&
                strstr(p.out, "    " INS_REASON_UNKNOWN), "%s", p.out);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"variants", "--db", db, id, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  j = proc_json(&p);
  const cJSON *a = by_m(cJSON_GetObjectItem(j, "variants"), 64);
  cr_expect_str_eq(text(a, "status"), "ready");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(a, "state")) &&
            cJSON_IsNull(cJSON_GetObjectItem(a, "reason")), "%s", p.out);
  cJSON_Delete(j);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"variants", "--db", db, id, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "    " INS_REASON_UNKNOWN), "%s", p.out);
  proc_free(&p);
}

Test(doctor, reports_the_jit_module_and_llvm)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  proc_t p = opjit(NULL, (const char *[]){"doctor", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *a = cJSON_GetObjectItem(j, "agent");
  int module = access(OPJIT_BUILD_DIR "/libopjit-jit.so", R_OK) == 0;
  cr_expect_str_eq(text(a, "jit_module"), OPJIT_BUILD_DIR "/libopjit-jit.so");
  cr_expect_eq(cJSON_IsTrue(cJSON_GetObjectItem(a, "jit_module_found")), module);
  /* the build links LLVM into the module where llvm-19-dev's static libraries are
   * (OPJIT_LLVM_LINKED_IN, CMakeLists.txt), else the module needs libLLVM-19.so */
  cr_expect_eq(cJSON_IsTrue(cJSON_GetObjectItem(a, "llvm_linked_in")), module && OPJIT_LLVM_LINKED_IN);
  if (module && OPJIT_LLVM_LINKED_IN) {
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(a, "llvm_needed")), "read from DT_NEEDED");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(a, "llvm_found")));
    cr_expect_str_eq(text(a, "llvm_path"), OPJIT_BUILD_DIR "/libopjit-jit.so");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(a, "jit_ready")));
  } else {
    int llvm = access("/usr/lib/llvm-19/lib/libLLVM.so.19.1", R_OK) == 0;
    cr_expect_str_eq(text(a, "llvm_needed"), "libLLVM.so.19.1", "read from DT_NEEDED");
    cr_expect_eq(cJSON_IsTrue(cJSON_GetObjectItem(a, "llvm_found")), llvm);
    cr_expect_eq(cJSON_IsTrue(cJSON_GetObjectItem(a, "jit_ready")), module && llvm);
    if (llvm) {
      char *real = realpath("/usr/lib/llvm-19/lib/libLLVM.so.19.1", NULL);
      cr_expect_str_eq(text(a, "llvm_path"), real);
      free(real);
    }
  }
  cJSON_Delete(j);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"doctor", "--db", db, NULL});
  cr_expect(strstr(p.out, "jit module") &&
                strstr(p.out, module && OPJIT_LLVM_LINKED_IN ? "linked into" : "libLLVM.so.19.1"),
            "%s", p.out);
  proc_free(&p);
}

/* Numpy multiplies two 16x16 float32 matrices 3000 times, waits for the JIT (opjit_settle:
 * the compile, its verification and its duel are over, however loaded the machine: no span
 * of calls bounds that), then 3000 times more, which the variant serves. */
#define NUMPY_HOT_SGEMM                                                                       \
  "import ctypes, numpy as np\n"                                                             \
  "a = np.random.rand(16, 16).astype(np.float32); b = a.T.copy()\n"                          \
  "for i in range(3000): c = a @ b\n"                                                        \
  "settle = getattr(ctypes.CDLL(None), 'opjit_settle', None)\n"                              \
  "assert settle and settle(300000) == 0, 'the JIT did not settle'\n"                        \
  "for i in range(3000): c = a @ b\n"

Test(jit, real_numpy_sgemm_gets_a_ready_variant)
{
  if (access(OPJIT_BUILD_DIR "/libopjit-jit.so", R_OK) != 0)
    cr_skip_test("build/libopjit-jit.so was not built (no LLVM 19 at configure time)");
  if (!OPJIT_LLVM_LINKED_IN && access("/usr/lib/llvm-19/lib/libLLVM.so.19.1", R_OK) != 0)
    cr_skip_test("LLVM 19 (libLLVM.so.19.1) is not installed: the JIT cannot load");
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  proc_t p = opjit((const char *[]){"OPJIT_HOT_CALLS=8", "OPJIT_HOT_PAYBACK=0", "OPJIT_MODE=jit", NULL},
                   (const char *[]){"run", "--quiet", "--db", db, "--", PYTHON, "-c",
                                    NUMPY_HOT_SGEMM, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"variants", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *v = by_m(cJSON_GetObjectItem(j, "variants"), 16); /* clearly faster: stays ready */
  cr_expect_str_eq(text(v, "status"), "ready", "%s", p.out);
  cr_expect_gt(num(v, "calls"), 0, "%s", p.out);
  cr_expect_gt(num(v, "compile_ns"), 0);
  cr_expect(strncmp(text(v, "llvm"), "19.", 3) == 0, "%s", text(v, "llvm"));
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"events", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  j = proc_json(&p);
  int queued = 0, published = 0, verified = 0, scratch = 0;
  const cJSON *e;
  double last = -1;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "events"))
  {
    if (strcmp(text(e, "name"), "cblas_sgemm row NN 16x16x16 β=0") != 0)
      continue;
    const char *kind = text(e, "kind");
    queued += strcmp(kind, "queued") == 0;
    published += strcmp(kind, "published") == 0;
    /* checked on scratch operands before publication, then (perhaps) on numpy's first calls */
    int v = strcmp(kind, "verified") == 0;
    int on_scratch = v && strncmp(text(e, "detail"), "on scratch operands:", 20) == 0;
    scratch += on_scratch, verified += v && !on_scratch;
    cr_expect_geq(num(e, "time_ms"), last, "in order");
    last = num(e, "time_ms");
  }
  cr_expect_eq(queued, 1, "%s", p.out);
  cr_expect_eq(published, 1, "%s", p.out);
  cr_expect_eq(scratch, 1, "%s", p.out);
  cr_expect_leq(verified, 1, "%s", p.out);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"top", "--db", db, NULL});
  cr_expect(strstr(p.out, "serving") && strstr(p.out, "JIT code: "), "%s", p.out);
  proc_free(&p);
}

/* One timed call of the original (a library's first, its warm-up: 6.4 ms against a 3.2 us
 * variant) is no mean to compare: no speedup, no saving; from two on, both. */
Test(variants, one_timed_original_call_gives_no_speedup_and_no_saving)
{
  char *dir = scratch_dir();
  for (int timed = 1; timed <= 2; timed++) {
    char *db = path_in(dir, timed == 1 ? "one.db" : "two.db");
    const fake_sig_t s[] = {{.m = 16, .calls = 2000, .timed_calls = (uint64_t)timed,
                             .timed_ns = (uint64_t)timed * 6378022}};
    const fake_variant_t v[] = {{.m = 16, .status = "ready", .compile_ns = 9000000,
                                 .calls = 1998, .timed_calls = 100, .timed_ns = 100 * 3165}};
    craft_variants(db, craft_run(db, 0, 0, 1, s, 1), v, 1, NULL, 0);
    proc_t p = opjit(NULL, (const char *[]){"variants", "--db", db, "--json", NULL});
    cr_assert_eq(p.status, 0, "%s", p.err);
    cJSON *j = proc_json(&p);
    const cJSON *a = by_m(cJSON_GetObjectItem(j, "variants"), 16);
    cr_expect_eq(num(a, "original_timed_calls"), timed);
    if (timed == 1)
      cr_expect(cJSON_IsNull(cJSON_GetObjectItem(a, "speedup")), "a speedup from one call");
    else
      cr_expect(fabs(num(a, "speedup") - 6378022 / 3165.0) < 1e-6, "%g", num(a, "speedup"));
    cJSON_Delete(j);
    proc_free(&p);
    p = opjit(NULL, (const char *[]){"top", "--db", db, "--json", NULL});
    cr_assert_eq(p.status, 0, "%s", p.err);
    j = proc_json(&p);
    const cJSON *sig = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "signatures"), 0);
    double saving = num(cJSON_GetObjectItem(sig, "jit"), "saving_ns");
    if (timed == 1)
      cr_expect_eq(saving, 0, "a saving from one call: %g ns", saving);
    else
      cr_expect(fabs(saving - 1998 * (6378022 - 3165.0)) < 1, "%g", saving);
    cJSON_Delete(j);
    proc_free(&p);
  }
}

/* `opjit op` counts a run's calls as top does: those a kernel served at the kernel's mean, the
 * rest at the original's (it took every call at the original's mean: 811 against top's 542 ns
 * for a signature whose kernel served most of its calls). */
Test(variants, op_counts_a_served_signature_as_top_does)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  const fake_sig_t s[] = {{.m = 16, .sig = "0160000000000016", .calls = 1000, .timed_calls = 10,
                           .timed_ns = 10 * 800}};
  const fake_variant_t v[] = {{.m = 16, .status = "ready", .compile_ns = 9000000, .calls = 900,
                               .timed_calls = 100, .timed_ns = 100 * 500}};
  craft_variants(db, craft_run(db, 0, 0, 1, s, 1), v, 1, NULL, 0);
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *sig = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "signatures"), 0);
  double est = num(sig, "est_ns"), mean = num(sig, "mean_ns");
  cJSON_Delete(j);
  proc_free(&p);
  cr_assert(est > 0 && fabs(mean - est / 1000) < 1e-9, "top: est %g, mean %g", est, mean);
  p = opjit(NULL, (const char *[]){"op", "--db", db, "--json", "0160", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  j = proc_json(&p);
  const cJSON *run = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "runs"), 0);
  cr_expect(fabs(num(run, "est_ns") - est) < 1e-6, "op %g, top %g", num(run, "est_ns"), est);
  cr_expect(fabs(num(run, "mean_ns") - mean) < 1e-9, "op %g, top %g", num(run, "mean_ns"), mean);
  cr_expect(fabs(num(j, "est_ns") - est) < 1e-6, "op's total %g, top %g", num(j, "est_ns"), est);
  cr_expect_eq(num(run, "timed_calls"), 10, "the original's timed calls");
  cJSON_Delete(j);
  proc_free(&p);
}

/* A run whose one variant is only queued names no CPU its kernels were compiled for (it said
 * "compiled with LLVM 19.1.7 for ? (generator 37)"). */
Test(variants, queued_only_names_no_compiler_line)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  const fake_sig_t s[] = {{.m = 16, .calls = 100}};
  const fake_variant_t v[] = {{.m = 16, .status = "queued"}};
  craft_variants(db, craft_run(db, 0, 0, 1, s, 1), v, 1, NULL, 0);
  sql_exec(db, "UPDATE variants SET cpu = ''");
  proc_t p = opjit(NULL, (const char *[]){"variants", "--db", db, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "queued") && !strstr(p.out, "compiled with"), "%s", p.out);
  proc_free(&p);
}
