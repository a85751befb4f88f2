/* SPDX-License-Identifier: MIT */
/* top, op, runs, export and gc on crafted sampled runs: samples, CPU%, symbols, counters. */
#include "helpers.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* A (m=64): 30 samples in three symbols, B (m=32): 10, the program: 60, of 100 taken. */
static const fake_sig_t two[] = {
    {.m = 64, .sig = "aaaa000000000064", .calls = 1000, .timed_calls = 100, .timed_ns = 50000},
    {.m = 32, .sig = "bbbb000000000032", .calls = 300, .timed_calls = 30, .timed_ns = 30000},
};
static const fake_pc_t pcs[] = {
    {64, "/usr/lib/x86_64-linux-gnu/libopenblas.so.0", "sgemm_kernel", 20},
    {64, "/usr/lib/x86_64-linux-gnu/libopenblas.so.0", "sgemm_beta", 7},
    {64, "/usr/lib/x86_64-linux-gnu/libc.so.6", "memcpy", 3},
    {32, "/usr/lib/x86_64-linux-gnu/libopenblas.so.0", "sgemm_kernel", 10},
    {0, "/usr/bin/python3.11", "_PyEval_EvalFrameDefault", 45},
    {0, "/usr/bin/python3.11", "+0x1234", 15},
};
static const fake_counter_t counters[] = {
    {64, "instructions", 3000}, {64, "cache-misses", 50}, {32, "instructions", 600}};
static const fake_samples_t sampled = {
    .sampling = "{\"mode\":\"perf\",\"event\":\"task-clock\",\"hz\":499,\"stack_depth\":32,"
                "\"samples\":100,\"lost\":3,\"cost\":{\"delivery_ns\":3306,\"handler_ns\":15539},"
                "\"notes\":[\"cycles: not supported by this CPU/VM (ENOENT)\"]}",
    .pcs = pcs, .npcs = 6, .counters = counters, .ncounters = 3};

static double num(const cJSON *o, const char *key)
{
  const cJSON *j = cJSON_GetObjectItem(o, key);
  cr_assert(cJSON_IsNumber(j), "%s is not a number", key);
  return j->valuedouble;
}

static const cJSON *sig_named(const cJSON *doc, const char *sig)
{
  const cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItem(doc, "signatures"))
    if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s, "sig")), sig) == 0)
      return s;
  cr_assert_fail("no signature %s", sig);
  return NULL;
}

/* A database with one sampled run (returned) and, after it, one unsampled run (*plain). */
static int64_t craft(const char *db, int64_t *plain)
{
  int64_t run = craft_run(db, 0, 0, 1, two, 2);
  craft_samples(db, run, &sampled);
  *plain = craft_run(db, 0, 0, 1, two, 2);
  return run;
}

Test(top, sampled_run_has_samples_cpu_pct_and_a_sampling_summary)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db"), id[24];
  int64_t plain, run = craft(db, &plain);
  snprintf(id, sizeof id, "%lld", (long long)run);
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, id, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *a = sig_named(j, "aaaa000000000064"), *b = sig_named(j, "bbbb000000000032");
  cr_expect_eq(num(a, "samples"), 30);
  cr_expect_eq(num(b, "samples"), 10);
  cr_expect(fabs(num(a, "cpu_pct") - 30) < 1e-9);
  cr_expect(fabs(num(b, "cpu_pct") - 10) < 1e-9);
  const cJSON *s = cJSON_GetObjectItem(j, "sampling");
  cr_expect(fabs(num(s, "program_pct") - 60) < 1e-9);
  cr_expect(fabs(num(s, "inside_pct") - 40) < 1e-9);
  cr_expect_eq(num(s, "samples"), 100);
  cr_expect_eq(num(s, "lost"), 3);
  cr_expect_eq(num(s, "hz"), 499);
  cr_expect_eq(num(s, "attributed"), 100);
  cr_expect_eq(num(s, "outside_operators"), 60);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(s, "event")), "task-clock");
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(s, "notes")), 1);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"top", "--db", db, id, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "SAMPLES") && strstr(p.out, "CPU%"), "%s", p.out);
  cr_expect(strstr(p.out, "30.0%"), "%s", p.out);
  cr_expect(strstr(p.out, "sampled: perf task-clock at 499 Hz, 100 samples (3 lost); 40.0% of "
                          "samples inside operators, 60.0% in the program itself\n"),
            "%s", p.out);
  proc_free(&p);
}

Test(top, unsampled_run_has_no_sample_fields)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t plain;
  craft(db, &plain);
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect_eq(num(j, "run"), plain, "the newest run");
  cr_expect(!cJSON_GetObjectItem(j, "sampling"));
  const cJSON *a = sig_named(j, "aaaa000000000064");
  cr_expect(!cJSON_GetObjectItem(a, "samples") && !cJSON_GetObjectItem(a, "cpu_pct"));
  cJSON_Delete(j);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"top", "--db", db, NULL});
  cr_expect(!strstr(p.out, "SAMPLES") && !strstr(p.out, "sampled"), "%s", p.out);
  proc_free(&p);
}

Test(top, all_aggregates_samples_over_runs)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t plain;
  craft(db, &plain);
  craft_samples(db, plain,
                &(fake_samples_t){.sampling = "{\"mode\":\"perf\",\"event\":\"task-clock\","
                                              "\"hz\":499,\"samples\":20,\"lost\":0}",
                                  .pcs = (fake_pc_t[]){{64, "/lib/libopenblas.so", "k", 10},
                                                       {0, "/usr/bin/python3", "main", 10}},
                                  .npcs = 2});
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, "--all", "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *a = sig_named(j, "aaaa000000000064");
  cr_expect_eq(num(a, "samples"), 40);
  cr_expect(fabs(num(a, "cpu_pct") - 100.0 * 40 / 120) < 1e-9);
  const cJSON *s = cJSON_GetObjectItem(j, "sampling");
  cr_expect_eq(num(s, "samples"), 120);
  cr_expect_eq(num(s, "sampled_runs"), 2);
  cr_expect(fabs(num(s, "program_pct") - 100.0 * 70 / 120) < 1e-9);
  cJSON_Delete(j);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"top", "--db", db, "--all", NULL});
  cr_expect(strstr(p.out, "sampled: 2 of 2 runs, perf task-clock at 499 Hz, 120 samples (3 lost)"),
            "%s", p.out);
  proc_free(&p);
}

Test(top, run_sampling_off_says_why)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft_run(db, 0, 0, 1, two, 2);
  craft_samples(db, run, &(fake_samples_t){.sampling = "{\"mode\":\"off\",\"notes\":["
                                                       "\"perf_event_paranoid is 4\"]}"});
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, NULL});
  cr_expect(strstr(p.out, "not sampled: perf_event_paranoid is 4\n"), "%s", p.out);
  cr_expect(!strstr(p.out, "SAMPLES"), "%s", p.out);
  proc_free(&p);
}

Test(op, symbols_in_order_with_exact_shares_and_counters_per_call)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t plain;
  craft(db, &plain);
  proc_t p = opjit(NULL, (const char *[]){"op", "--db", db, "--json", "aaaa", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect_eq(num(j, "samples"), 30);
  const cJSON *syms = cJSON_GetObjectItem(j, "symbols");
  cr_assert_eq(cJSON_GetArraySize(syms), 3);
  static const char *const want[] = {"sgemm_kernel", "sgemm_beta", "memcpy"};
  static const double share[] = {200.0 / 3, 70.0 / 3, 10};
  for (int i = 0; i < 3; i++) {
    const cJSON *s = cJSON_GetArrayItem(syms, i);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(s, "symbol")), want[i]);
    cr_expect(fabs(num(s, "pct") - share[i]) < 1e-9, "%s: %g", want[i], num(s, "pct"));
  }
  const cJSON *c = cJSON_GetObjectItem(j, "counters");
  cr_assert_eq(cJSON_GetArraySize(c), 2);
  const cJSON *misses = cJSON_GetArrayItem(c, 0), *ins = cJSON_GetArrayItem(c, 1);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(misses, "event")), "cache-misses");
  cr_expect(fabs(num(misses, "per_call") - 0.05) < 1e-12);
  cr_expect_eq(num(ins, "value"), 3000);
  cr_expect(fabs(num(ins, "per_call") - 3) < 1e-12, "only the sampled run's 1000 calls count");
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"op", "--db", db, "aaaa", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  const char *k = strstr(p.out, "where the samples fell (30 samples):\n");
  cr_assert(k, "%s", p.out);
  const char *l1 = strstr(k, "20  66.7%  libopenblas.so.0`sgemm_kernel\n");
  const char *l2 = strstr(k, " 7  23.3%  libopenblas.so.0`sgemm_beta\n");
  const char *l3 = strstr(k, " 3  10.0%  libc.so.6`memcpy\n");
  cr_expect(l1 && l2 && l3 && l1 < l2 && l2 < l3, "%s", p.out);
  cr_expect(strstr(p.out, "cache-misses     50      0.05\n") &&
                strstr(p.out, "instructions   3000      3.00\n"), "%s", p.out);
  proc_free(&p);

  char id[24];
  snprintf(id, sizeof id, "%lld", (long long)plain);
  p = opjit(NULL, (const char *[]){"op", "--db", db, "--run", id, "--json", "aaaa", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  j = proc_json(&p);
  cr_expect_eq(num(j, "samples"), 0, "--run restricts to the unsampled run");
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "runs")), 1);
  cJSON_Delete(j);
  proc_free(&p);
}

Test(runs, samples_column_blank_when_unsampled)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t plain, run = craft(db, &plain);
  proc_t p = opjit(NULL, (const char *[]){"runs", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *r;
  cJSON_ArrayForEach(r, cJSON_GetObjectItem(j, "runs"))
  {
    const cJSON *s = cJSON_GetObjectItem(r, "sampling");
    if (num(r, "id") == run) {
      cr_expect_eq(num(r, "samples"), 100);
      cr_expect_eq(num(cJSON_GetObjectItem(s, "cost"), "handler_ns"), 15539,
                   "the sampler's summary as stored, its cost with it");
      cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(s, "mode")), "perf");
    } else {
      cr_expect(cJSON_IsNull(cJSON_GetObjectItem(r, "samples")));
      cr_expect(cJSON_IsNull(s), "no summary: null");
    }
  }
  cJSON_Delete(j);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"runs", "--db", db, NULL});
  cr_expect(strstr(p.out, "SAMPLES") && strstr(p.out, "  100\n"), "%s", p.out);
  proc_free(&p);
}

Test(export, sampled_run_has_sampling_pcs_stacks_and_counters)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t plain, run = craft(db, &plain);
  craft_samples(db, run, &(fake_samples_t){.stacks = (fake_stack_t[]){{0, "a`main;a`f", 4}},
                                           .nstacks = 1});
  proc_t p = opjit(NULL, (const char *[]){"export", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "runs"), 0);
  cr_expect_eq(num(cJSON_GetObjectItem(r, "sampling"), "hz"), 499);
  const cJSON *pc = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "pcs"), 0);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(pc, "sig")), "host first, sig null");
  cr_expect_eq(num(pc, "samples"), 45);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r, "pcs")), 6);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r, "counters")), 3);
  const cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "stacks"), 0);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(st, "stack")), "a`main;a`f");
  const cJSON *r2 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "runs"), 1);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(r2, "sampling")));
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r2, "pcs")), 0);
  cJSON_Delete(j);
  proc_free(&p);
}

Test(gc, reports_the_symbols_only_old_runs_used)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t plain;
  craft(db, &plain); /* the sampled run is the older: its 5 distinct symbols go */
  proc_t p = opjit(NULL, (const char *[]){"gc", "--db", db, "--keep", "1", "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect_eq(num(cJSON_GetObjectItem(j, "deleted"), "symbols"), 5);
  cJSON_Delete(j);
  proc_free(&p);
}

/* Timers (auto's choice on a machine without a PMU): mode and event are one word, said once. */
Test(top, timer_sampling_is_named_once)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t plain;
  craft(db, &plain);
  craft_samples(db, plain,
                &(fake_samples_t){.sampling = "{\"mode\":\"timer\",\"event\":\"timer\","
                                              "\"hz\":199,\"samples\":20,\"lost\":0}",
                                  .pcs = (fake_pc_t[]){{64, "/lib/libopenblas.so", "k", 20}},
                                  .npcs = 1});
  proc_t p = opjit(NULL, (const char *[]){"top", "--db", db, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "sampled: timer at 199 Hz, 20 samples (0 lost)"), "%s", p.out);
  proc_free(&p);
}
