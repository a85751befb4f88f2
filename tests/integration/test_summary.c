/* SPDX-License-Identifier: MIT */
/* The exit summary (OPJIT_SUMMARY) in real programs: printed under `opjit run` and with
 * OPJIT_SUMMARY=1, absent under a bare LD_PRELOAD or when the user turns it off; its figures
 * are the ones `opjit top --json` reads from the database for the same run (calls, signatures,
 * operator time, saving, the top three) and its kernel counts the run's events; a bad value
 * warns once and keeps the default. */
#include "harness.h"

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define H_OPJIT OPJIT_BUILD_DIR "/opjit"

TestSuite(summary, .fini = h_teardown, .timeout = 600);

/* Runs argv under `opjit run` (tag.err holds the program's and the launcher's stderr). */
static void opjit_run(const char *tag, const char *const *env, const char *const *argv)
{
  const char *args[16] = {H_OPJIT, "run", "--"};
  size_t n = 3;
  for (; *argv && n < 15; argv++)
    args[n++] = *argv;
  args[n] = NULL;
  int st = h_run(tag, 0, env, args);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d\n%s", tag, st,
            h_output(tag, "err"));
}

static int has_summary(const char *tag)
{
  return strstr(h_output(tag, "err"), "opjit: run ") != NULL;
}

/* A duration as the summary prints it ("253 ms", "1.32 s", "86 ns"), in ns. */
static double parse_ns(const char *s)
{
  double v;
  char unit[8];
  cr_assert_eq(sscanf(s, "%lf %7s", &v, unit), 2, "not a duration: %.40s", s);
  double scale = !strncmp(unit, "ns", 2)              ? 1
                 : !strncmp(unit, "µs", strlen("µs")) ? 1e3
                 : !strncmp(unit, "ms", 2)            ? 1e6
                                                      : 1e9;
  return v * scale;
}

/* What a summary says, read back from its text. */
typedef struct said_s {
  long long run, calls;
  unsigned sigs, compiled, placed, demoted;
  double est_ns, saving_ns;
  int ntop;
  struct {
    char name[128];
    long long calls;
    double pct;
  } top[3];
} said_t;

static void parse_summary(const char *err, said_t *s)
{
  memset(s, 0, sizeof *s);
  const char *p = strstr(err, "opjit: run ");
  cr_assert_not_null(p, "no summary in:\n%s", err);
  cr_assert_eq(sscanf(p, "opjit: run %lld", &s->run), 1);
  const char *q = strstr(p, " wall since its first operator call, ");
  cr_assert_not_null(q, "%s", p);
  s->est_ns = parse_ns(q + strlen(" wall since its first operator call, "));
  q = strstr(q, " in operators: ");
  cr_assert_not_null(q, "%s", p);
  cr_assert_eq(sscanf(q, " in operators: %lld calls in %u signature", &s->calls, &s->sigs), 2);
  if ((q = strstr(p, "opjit: JIT: "))) {
    if (sscanf(q, "opjit: JIT: %u kernel%*[s] compiled, %u placed from the store, %u demoted",
               &s->compiled, &s->placed, &s->demoted) != 3)
      cr_assert_eq(sscanf(q,
                          "opjit: JIT: %u kernel compiled, %u placed from the store, %u "
                          "demoted",
                          &s->compiled, &s->placed, &s->demoted),
                   3, "%s", q);
    const char *sv = strstr(q, "measured saving ");
    cr_assert_not_null(sv, "%s", q);
    s->saving_ns = parse_ns(sv + strlen("measured saving "));
  }
  for (q = strstr(p, "opjit: top "); q && s->ntop < 3; q = strstr(q + 1, "opjit: top ")) {
    int i, off = 0;
    cr_assert_eq(sscanf(q, "opjit: top %d: %lf%% %n", &i, &s->top[s->ntop].pct, &off), 2, "%s", q);
    const char *name = q + off, *end = strchr(name, '\n'), *calls = strstr(name, " calls");
    cr_assert(calls && end && calls < end, "%s", q);
    const char *comma = calls;
    while (comma > name && strncmp(comma, ", ", 2))
      comma--;
    snprintf(s->top[s->ntop].name, sizeof s->top[0].name, "%.*s", (int)(comma - name), name);
    s->top[s->ntop].calls = atoll(comma + 2);
    s->ntop++;
  }
}

/* `opjit top --json RUN`, parsed. */
static cJSON *top_json(long long run)
{
  char rs[24];
  snprintf(rs, sizeof rs, "%lld", run);
  int st =
      h_run("top", 0, NULL,
            (const char *[]){H_OPJIT, "top", "--db", h_db, "--json", "--limit", "3", rs, NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", h_output("top", "err"));
  cJSON *doc = cJSON_Parse(h_output("top", "out"));
  cr_assert_not_null(doc, "%s", h_output("top", "out"));
  return doc;
}

static double num(const cJSON *o, const char *k)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  cr_assert(cJSON_IsNumber(v), "no number %s", k);
  return v->valuedouble;
}

/* The summary's figures against the database's for its run. */
static void check_against_top(const said_t *s)
{
  cJSON *doc = top_json(s->run);
  cr_assert_eq(s->calls, (long long)num(doc, "total_calls"));
  cr_assert_eq(s->sigs, (unsigned)num(doc, "total_signatures"));
  double est = num(doc, "est_ns");
  cr_assert(fabs(s->est_ns - est) <= 0.01 * est, "operator time %.0f ns, top says %.0f", s->est_ns,
            est);
  const cJSON *jit = cJSON_GetObjectItemCaseSensitive(doc, "jit");
  if (jit) {
    double saving = num(jit, "saving_ns");
    cr_assert(fabs(s->saving_ns - saving) <= 0.01 * fabs(saving) + 1000,
              "saving %.0f ns, top says %.0f", s->saving_ns, saving);
  }
  const cJSON *sigs = cJSON_GetObjectItemCaseSensitive(doc, "signatures");
  cr_assert_eq(s->ntop, cJSON_GetArraySize(sigs) < 3 ? cJSON_GetArraySize(sigs) : 3);
  for (int i = 0; i < s->ntop; i++) {
    const cJSON *g = cJSON_GetArrayItem(sigs, i);
    cr_assert_str_eq(s->top[i].name, cJSON_GetObjectItemCaseSensitive(g, "name")->valuestring);
    cr_assert_eq(s->top[i].calls, (long long)num(g, "calls"));
    cr_assert(fabs(s->top[i].pct - num(g, "share_pct")) <= 0.06, "%s: %.1f%% vs %.2f%%",
              s->top[i].name, s->top[i].pct, num(g, "share_pct"));
  }
  cJSON_Delete(doc);
}

static int64_t events(long long run, const char *kind)
{
  return h_query(NULL, "SELECT count(*) FROM events WHERE run_id=%lld AND kind='%s'", run, kind);
}

Test(summary, opjit_run_prints_it_a_bare_preload_does_not_unless_asked, .init = h_setup)
{
  char out[160];
  snprintf(out, sizeof out, "%s/blas", h_dir);
  opjit_run("run", NULL, (const char *[]){H_BLAS_PROG, out, NULL});
  cr_assert(has_summary("run"), "%s", h_output("run", "err"));
  cr_assert(strstr(h_output("run", "err"), "JIT off"), "profile mode: %s", h_output("run", "err"));
  said_t s;
  parse_summary(h_output("run", "err"), &s);
  cr_assert_eq(s.run, 1);
  check_against_top(&s);

  opjit_run("off", (const char *[]){"OPJIT_SUMMARY=0", NULL},
            (const char *[]){H_BLAS_PROG, out, NULL});
  cr_assert_not(has_summary("off"), "the user's OPJIT_SUMMARY=0 wins: %s", h_output("off", "err"));

  cr_assert_eq(h_run("bare", 1, NULL, (const char *[]){H_BLAS_PROG, out, NULL}), 0);
  cr_assert_not(has_summary("bare"), "%s", h_output("bare", "err"));
  cr_assert_eq(h_run("asked", 1, (const char *[]){"OPJIT_SUMMARY=on", NULL},
                     (const char *[]){H_BLAS_PROG, out, NULL}),
               0);
  cr_assert(has_summary("asked"), "%s", h_output("asked", "err"));
  parse_summary(h_output("asked", "err"), &s);
  cr_assert_eq(s.run, 4);
  check_against_top(&s);
}

Test(summary, a_bad_value_warns_once_and_keeps_the_default, .init = h_setup)
{
  char out[160];
  snprintf(out, sizeof out, "%s/blas", h_dir);
  cr_assert_eq(h_run("bad", 1, (const char *[]){"OPJIT_SUMMARY=maybe", NULL},
                     (const char *[]){H_BLAS_PROG, out, NULL}),
               0);
  const char *err = h_output("bad", "err");
  cr_assert_eq(h_count_lines(err, "OPJIT_SUMMARY"), 1, "%s", err);
  cr_assert(strstr(err, "OPJIT_SUMMARY='maybe' is not valid"), "%s", err);
  cr_assert_not(has_summary("bad"), "the default is off: %s", err);
}

/* Every signature hot from its first call, the warm start awaited: run 1 compiles, run 2
 * places what run 1 stored. */
static const char *const jit_env[] = {
    "OPJIT_MODE=jit",    "OPJIT_HOT_PAYBACK=0",         "OPJIT_HOT_CALLS=1",
    "OPJIT_SAMPLE_HZ=0", "OPJIT_WARM_WAIT_US=60000000", NULL};

Test(summary, kernels_and_saving_are_the_runs_own, .init = h_setup_jit)
{
  said_t s;
  for (long long run = 1; run <= 2; run++) {
    const char *tag = run == 1 ? "run1" : "run2";
    opjit_run(tag, jit_env, (const char *[]){H_JIT_PROG, "sweep", "12", "30", "5", NULL});
    cr_assert(strstr(h_output(tag, "out"), "mismatches 0"), "%s", h_output(tag, "out"));
    parse_summary(h_output(tag, "err"), &s);
    cr_assert_eq(s.run, run);
    /* Compiled: published, or demoted by the duel before publication. */
    int64_t duel_lost = h_query(NULL,
                                "SELECT count(*) FROM events WHERE run_id=%lld AND kind="
                                "'demoted' AND detail LIKE '%%before publication%%'",
                                run);
    cr_assert_eq(s.compiled, events(run, "published") + duel_lost, "%s", h_output(tag, "err"));
    cr_assert_eq(s.placed, events(run, "loaded"), "%s", h_output(tag, "err"));
    cr_assert_eq(s.demoted, h_query(NULL,
                                    "SELECT count(*) FROM variants WHERE run_id=%lld AND "
                                    "status='demoted'",
                                    run));
    check_against_top(&s);
  }
  cr_assert_gt(events(1, "published"), 0, "run 1 compiled nothing: %s", h_output("run1", "err"));
  cr_assert_eq(s.compiled, 0, "run 2 compiled: %s", h_output("run2", "err"));
  cr_assert_gt(s.placed, 0, "run 2 placed nothing: %s", h_output("run2", "err"));
}
