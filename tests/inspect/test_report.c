/* SPDX-License-Identifier: MIT */
/* report on crafted runs: one self-contained page, escaped text, one rectangle per frame. */
#define _GNU_SOURCE
#include "helpers.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const fake_sig_t two[] = {
    {.m = 64, .sig = "aaaa000000000064", .calls = 10, .timed_calls = 1, .timed_ns = 500},
    {.m = 32, .sig = "bbbb000000000032", .calls = 10, .timed_calls = 1, .timed_ns = 100},
};
/* 14 frames: the run, then 5 under A, 3 under B, 5 under [program]. */
static const fake_stack_t stacks[] = {
    {64, "python3`main;libopjit.so`cblas_sgemm;libopenblas.so.0`sgemm_kernel", 20},
    {64, "python3`main;libopjit.so`cblas_sgemm;libopenblas.so.0`sgemm_beta", 10},
    {32, "python3`main;libopenblas.so.0`sgemm_kernel", 10},
    {0, "python3`main;python3`busy", 60},
    {0, "python3`main;;python3`x", 5},
};
static const fake_pc_t pcs[] = {{64, "/lib/libopenblas.so.0", "sgemm_kernel", 30},
                                {32, "/lib/libopenblas.so.0", "sgemm_kernel", 10},
                                {0, "/usr/bin/python3", "busy", 65}};
static const fake_samples_t sampled = {
    .sampling = "{\"mode\":\"perf\",\"event\":\"task-clock\",\"hz\":99,\"samples\":105,\"lost\":0,"
                "\"notes\":[\"cycles: <none> & more\"]}",
    .pcs = pcs, .npcs = 3, .stacks = stacks, .nstacks = 5};

static size_t count(const char *hay, const char *needle)
{
  size_t n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

static char *slurp(const char *path)
{
  FILE *f = fopen(path, "r");
  cr_assert(f, "no %s", path);
  char *buf = calloc(1, 1 << 20);
  size_t n = fread(buf, 1, (1 << 20) - 1, f);
  fclose(f);
  cr_assert(n > 0 && n < (1 << 20) - 1);
  return buf;
}

/* The sampled run, with a program path, argv and signature name that need escaping. */
static int64_t craft(const char *db)
{
  int64_t run = craft_run(db, 0, 0, 1, two, 2);
  craft_samples(db, run, &sampled);
  sql_exec(db, "UPDATE programs SET exe = '/opt/a<b&c/fake';"
               "UPDATE runs SET argv = '[\"fake\",\"<script>alert(1)</script>\",\"x&y\"]';"
               "UPDATE signatures SET name = 'op<T>&\"q\"' WHERE sig = 'bbbb000000000032'");
  return run;
}

/* Every "http" in html is the SVG namespace, nothing loads a resource, and the one script is
 * inline. */
static void expect_self_contained(const char *html)
{
  for (const char *p = html; (p = strstr(p, "http")); p += 4)
    cr_expect(strncmp(p, "http://www.w3.org/2000/svg\"", 27) == 0, "external: %.60s", p);
  cr_expect(!strstr(html, "<link") && !strstr(html, "@import") && !strstr(html, "url(") &&
            !strstr(html, "src=") && !strstr(html, "fetch(") && !strstr(html, "XMLHttpRequest"));
  cr_expect_eq(count(html, "<script"), 1);
  cr_expect(strstr(html, "<script>\n"), "inline, no attributes");
}

Test(report, sampled_run_page_is_escaped_self_contained_with_one_rect_per_frame)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db"), *out = path_in(dir, "r.html");
  craft(db);
  proc_t p = opjit(NULL, (const char *[]){"report", "--db", db, "-o", out, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  char *html = slurp(out);
  cr_expect(!strncmp(html, "<!DOCTYPE html>", 15));
  cr_expect(strstr(html, "</html>\n"));
  cr_expect(count(html, "<svg") == 3, "two bar charts and the flame graph");
  expect_self_contained(html);
  cr_expect(strstr(html, "/opt/a&lt;b&amp;c/fake"));
  cr_expect(strstr(html, "&lt;script&gt;alert(1)&lt;/script&gt;"));
  cr_expect(strstr(html, "op&lt;T&gt;&amp;&quot;q&quot;"));
  cr_expect(strstr(html, "cycles: &lt;none&gt; &amp; more"));
  cr_expect(!strstr(html, "op<T>") && !strstr(html, "a<b"));
  cr_expect(strstr(html, "perf task-clock at 99 Hz, 105 samples (0 lost)"));
  cr_expect_eq(count(html, "<rect class=\"fr "), 14, "one rectangle per distinct frame");
  cr_expect(strstr(html, "data-frames=\"14\""));
  cr_expect_eq(count(html, "fr k-agent"), 1);
  cr_expect_eq(count(html, "fr k-library"), 3, "below the interposer, or the leaf's module");
  cr_expect_eq(count(html, "fr k-root"), 4, "the run, two operators, [program]");
  cr_expect(strstr(html, "<td>op&lt;T&gt;&amp;&quot;q&quot;</td>"), "the table row");
  free(html);
  proc_free(&p);
}

Test(report, unsampled_run_has_a_note_instead_of_a_flame_graph_and_stdout_works)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft(db);
  craft_run(db, 0, 0, 1, two, 2);
  proc_t p = opjit(NULL, (const char *[]){"report", "--db", db, "-o", "-", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(!strncmp(p.out, "<!DOCTYPE html>", 15));
  cr_expect(strstr(p.out, "This run was not sampled: no flame graph."));
  cr_expect_eq(count(p.out, "<rect class=\"fr "), 0);
  cr_expect_eq(count(p.out, "<svg"), 1, "the time chart only");
  expect_self_contained(p.out);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"report", "--db", db, NULL});
  cr_expect_eq(p.status, 2, "-o is required");
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"report", "--db", db, "-o", "/nonexistent/dir/r.html", NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "cannot write /nonexistent/dir/r.html"), "%s", p.err);
  proc_free(&p);
}

Test(report, timeline_marks_every_event_and_counts_only_kernels_that_served)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  static const fake_variant_t vars[] = {
      {.m = 64, .status = "demoted", .calls = 4, .timed_calls = 1, .timed_ns = 900},
      {.m = 32, .status = "demoted"}};
  /* A: compiled, verified, later demoted; B: lost its duel before publication (never served),
   * then placed from the database: one kernel at most in service at a time. */
  static const fake_event_t evs[] = {
      {64, 1000000, "queued", "hot after 64 calls"},
      {64, 5000000, "published", "compiled in 2 ms; won its duel <fast & sure>"},
      {64, 6000000, "verified", "matches"},
      {32, 7000000, "demoted", "slower before publication"},
      {64, 8000000, "demoted", "variant 900 ns per call"},
      {32, 9000000, "loaded", "placed"}};
  craft_variants(db, run, vars, 2, evs, 6);
  sql_exec(db, "UPDATE run_sigs SET state = 'demoted', reason = 'slower <by far> & more'"
               " WHERE sig_id = (SELECT id FROM signatures WHERE sig = 'aaaa000000000064')");
  proc_t p = opjit(NULL, (const char *[]){"report", "--db", db, "-o", "-", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  const char *html = p.out;
  cr_expect(strstr(html, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"timeline\""));
  cr_expect(strstr(html, "data-events=\"6\""));
  cr_expect_eq(count(html, "<circle class=\"ev "), 6, "one marker per event");
  cr_expect_eq(count(html, "<g class=\"lane\" "), 2);
  cr_expect_eq(count(html, "<rect class=\"tl-jit\""), 2, "A from 5 to 8 ms, B from 9 ms on");
  cr_expect(strstr(html, ">max 1</text>"), "B's demotion before publication takes none away");
  cr_expect(strstr(html, "won its duel &lt;fast &amp; sure&gt;</title>"));
  /* The agent's state and reason: in the table under the name, and on the signature's lane;
   * B, with no state recorded, shows its variant's status and no reason. */
  cr_expect(strstr(html, "<th>STATE</th>"));
  cr_expect(strstr(html, "<td class=\"nw\">demoted</td>"));
  cr_expect(strstr(html, "<br><span class=\"why\">slower &lt;by far&gt; &amp; more</span>"));
  cr_expect(strstr(html, "data-state=\"demoted\" data-why=\"slower &lt;by far&gt; &amp; more\""));
  cr_expect(strstr(html, "data-state=\"jit (demoted)\" data-why=\"\""), "B");
  cr_expect_eq(count(html, "<span class=\"why\">"), 1);
  cr_expect(strstr(html, "<span class=\"key ev ev-demoted\"></span>demoted (2)"));
  cr_expect_eq(count(html, "<circle class=\"ev ev-published won\""), 1);
  cr_expect(strstr(html, "</span>compiled and placed (1)<span class=\"key ev ev-published won\">"
                         "</span>of which won a duel (1)"));
  expect_self_contained(html);
  proc_free(&p);
}

Test(report, timeline_stacks_each_intervals_samples_by_operator_with_the_jit_share)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  /* 4 intervals of 500 us over the run's 2 ms: A's samples fall as its kernel takes its calls
   * (8 of 11 calls in the third interval, 10 of 11 in the last); every value is below 128, so
   * one byte of each blob per interval. */
  char *sql;
  cr_assert(asprintf(&sql,
                     "INSERT INTO run_series SELECT %1$lld, s.id, 500000, r.start_ns, x.c, x.v,"
                     " x.s FROM runs r, signatures s JOIN (SELECT 'aaaa000000000064' AS sig,"
                     " x'0a0a0a0a' AS c, x'0000080a' AS v, x'05050100' AS s UNION ALL SELECT"
                     " 'bbbb000000000032', x'01010101', x'00000000', x'02020202') x"
                     " ON x.sig = s.sig WHERE r.id = %1$lld;"
                     "INSERT INTO run_series SELECT id, 0, 500000, start_ns, x'00000000',"
                     " x'00000000', x'01010101' FROM runs WHERE id = %1$lld;"
                     "INSERT INTO run_series SELECT id, -1, 500000, start_ns, x'00000000',"
                     " x'00000000', x'01000000' FROM runs WHERE id = %1$lld;",
                     (long long)run) > 0);
  sql_exec(db, sql);
  free(sql);
  proc_t p = opjit(NULL, (const char *[]){"report", "--db", db, "-o", "-", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  const char *html = p.out;
  cr_expect(strstr(html, "<g id=\"tl-series\" data-iv=\"500000\" data-off=\"0\" data-n=\"4\""
                         " data-calls=\"11 11 11 11\">"));
  cr_expect_eq(count(html, "<polygon class=\"sa "), 4,
               "A, B, the agent's rest as other operators, and the program's own time");
  cr_expect(strstr(html, "<polygon class=\"sa sa-other\" data-name=\"other operators\""
                         " data-v=\"1 0 0 0\""));
  const char *a = strstr(html, "<polygon class=\"sa sa0\" data-name=\"");
  cr_assert(a);
  const char *v = strstr(a, "data-v=\"5 5 1 0\"");
  cr_expect(v && v < strchr(a, '>'), "the most sampled first: A");
  cr_expect(strstr(html, "<polygon class=\"sa sa1\" data-name=\"op&lt;T&gt;&amp;&quot;q&quot;\""
                         " data-v=\"2 2 2 2\""), "escaped");
  cr_expect(strstr(html, "<polygon class=\"sa sa-out\""));
  cr_expect(strstr(html, "data-share=\"0.0000 0.0000 0.7273 0.9091\""));
  cr_expect(strstr(html, ">max 9 samples</text>"), "5 + 2 + 1 + 1 in the first interval");
  cr_expect(strstr(html, "<span class=\"key k-share\"></span>share of calls JIT kernels served"));
  /* The first layer's top edge: interval 0 spans x0 to x0 + pw / 4 at the height of its 5
   * samples out of 9 (the axis spans the run's 2 ms). */
  double x0 = 290, pw = 1200 - 290 - 16, h = 150 - 8, y = 150 - h * 5 / 9;
  char edge[64];
  snprintf(edge, sizeof edge, "points=\"%.2f,%.1f %.2f,%.1f ", x0, y, x0 + pw / 4, y);
  cr_expect(strstr(html, edge), "%s", edge);
  cr_expect(!strstr(html, "no series over time"));
  expect_self_contained(html);
  proc_free(&p);

  /* opjit export carries the same series. */
  p = opjit(NULL, (const char *[]){"export", "--json", "--db", db, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  const cJSON *series = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "runs"), 0),
                                            "series");
  cr_assert(cJSON_IsObject(series), "%s", p.out);
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(series, "interval_ns")), 500000);
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(series, "offset_ns")), 0);
  const cJSON *rows = cJSON_GetObjectItem(series, "rows");
  cr_assert_eq(cJSON_GetArraySize(rows), 4);
  const cJSON *ra = cJSON_GetArrayItem(rows, 0), *out = cJSON_GetArrayItem(rows, 3);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 2), "row")),
                   "rest");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(ra, "sig")), "aaaa000000000064");
  static const double want[3][4] = {{10, 10, 10, 10}, {0, 0, 8, 10}, {5, 5, 1, 0}};
  static const char *const keys[] = {"calls", "vcalls", "samples"};
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 4; k++)
      cr_expect_eq(cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(ra, keys[i]), k)),
                   want[i][k], "%s[%d]", keys[i], k);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(out, "sig")), "outside operators");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(out, "row")), "outside");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(ra, "row")), "sig");
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(out, "samples")), 4);
  cJSON_Delete(j);
  proc_free(&p);
}

Test(report, a_run_without_a_series_keeps_the_events_and_says_why)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  static const fake_event_t evs[] = {{64, 1000000, "queued", "hot"}};
  craft_variants(db, run, NULL, 0, evs, 1);
  proc_t p = opjit(NULL, (const char *[]){"report", "--db", db, "-o", "-", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect_eq(count(p.out, "<circle class=\"ev "), 1);
  cr_expect(!strstr(p.out, "id=\"tl-series\""));
  cr_expect(strstr(p.out, "This run has no series over time: it was recorded by an opjit older "
                          "than schema 8"));
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"export", "--json", "--db", db, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "runs"), 0),
                                             "series")));
  cJSON_Delete(j);
  proc_free(&p);
}
