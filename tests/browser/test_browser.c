/* SPDX-License-Identifier: MIT */
/* `opjit report` in a real browser: the numpy demo (scripts/demo_workload.py) runs under the
 * agent into a fresh database, its report is opened in Debian's headless Chromium, driven by
 * playwright-core (probe_report.cjs) as a reader would use it, and what the page did is judged
 * here. The page and a screenshot stay in the build folder (report-browser.html/.png). */
#define _GNU_SOURCE
#include "helpers.h"

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHROMIUM "/usr/bin/chromium"
#define PLAYWRIGHT OPJIT_SOURCE_DIR "/third_party/playwright/node_modules/playwright-core"
#define PROBE OPJIT_SOURCE_DIR "/tests/browser/probe_report.cjs"
#define DEMO OPJIT_SOURCE_DIR "/scripts/demo_workload.py"
#define PAGE OPJIT_BUILD_DIR "/report-browser.html"
#define SHOT OPJIT_BUILD_DIR "/report-browser.png"

/* The first node on PATH, or NULL. */
static char *find_node(void)
{
  FILE *p = popen("command -v node", "r");
  char buf[4096] = "";
  if (!p)
    return NULL;
  char *got = fgets(buf, sizeof buf, p);
  pclose(p);
  if (!got || buf[0] != '/')
    return NULL;
  buf[strcspn(buf, "\n")] = 0;
  return strdup(buf);
}

/* Runs the probe on PAGE; returns its JSON (the test fails when it fails). */
static cJSON *probe(const char *node)
{
  char *cmd;
  cr_assert(asprintf(&cmd, "'%s' '%s' '%s' '%s' '%s' '%s'", node, PROBE, PLAYWRIGHT, CHROMIUM, PAGE,
                     SHOT) > 0);
  FILE *p = popen(cmd, "r");
  cr_assert(p, "popen");
  size_t cap = 1 << 20, n = 0;
  char *out = malloc(cap);
  for (size_t got; (got = fread(out + n, 1, cap - 1 - n, p)) > 0;)
    n += got;
  out[n] = 0;
  int st = pclose(p);
  cr_assert_eq(st, 0, "the probe failed (status %d): %s", st, out);
  cJSON *j = cJSON_Parse(out);
  cr_assert(j, "the probe printed no JSON: %s", out);
  free(out);
  free(cmd);
  return j;
}

static double num(const cJSON *o, const char *key)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  cr_assert(cJSON_IsNumber(v), "no number %s", key);
  return v->valuedouble;
}

static const char *str(const cJSON *o, const char *key)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  cr_assert(cJSON_IsString(v), "no string %s", key);
  return v->valuestring;
}

static const cJSON *item(const cJSON *o, const char *key)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  cr_assert(v, "no %s", key);
  return v;
}

Test(browser, report_of_a_real_run_zooms_searches_explains_and_marks_the_jit_events)
{
  char *node = find_node();
  if (access(CHROMIUM, X_OK) != 0)
    cr_skip_test("no " CHROMIUM ": scripts/deps.sh installs Debian's chromium");
  if (!node)
    cr_skip_test("no node on PATH: scripts/deps.sh installs nodejs");
  if (access(PLAYWRIGHT "/package.json", R_OK) != 0)
    cr_skip_test("no playwright-core in third_party/playwright: scripts/deps.sh installs it");

  /* The demo twice in one run, the JIT settled in between: its 16x16 sgemm, made hot by the
   * first pass, serves the second's calls however long its compile took (in one pass, at load
   * 10 the compile once ended after the demo did: no call served, no line of the JIT's share).
   * A settle that times out (5 minutes) fails the run. */
  static const char demo_twice[] =
      "import ctypes, runpy\n"
      "runpy.run_path('" DEMO "')\n"
      "settle = getattr(ctypes.CDLL(None), 'opjit_settle', None)\n"
      "assert settle and settle(300000) == 0, 'the JIT did not settle'\n"
      "runpy.run_path('" DEMO "')\n";
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  proc_t p = opjit(NULL, (const char *[]){"run", "--db", db, "--", PYTHON, "-c", demo_twice, NULL});
  cr_assert_eq(p.status, 0, "the demo under opjit: %s", p.err);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"events", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *events = proc_json(&p);
  int nevents = cJSON_GetArraySize(item(events, "events"));
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"report", "--db", db, "-o", PAGE, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  proc_free(&p);

  cJSON *seen = probe(node);
  const cJSON *failed = cJSON_GetObjectItemCaseSensitive(seen, "failed");
  cr_expect(!failed, "the probe stopped: %s", cJSON_IsString(failed) ? failed->valuestring : "?");
  const cJSON *e, *errors = item(seen, "errors"), *requests = item(seen, "requests");
  cJSON_ArrayForEach(e, errors) cr_expect_fail("console: %s", e->valuestring);
  cr_expect_eq(cJSON_GetArraySize(requests), 1, "the page loads nothing but itself");
  cr_expect(cJSON_IsTrue(item(seen, "js")), "the script ran");

  /* Zoom: the clicked frame spans the full width, others leave; reset restores it. */
  double width = num(seen, "width");
  const cJSON *picked = item(seen, "picked");
  cr_assert(num(seen, "frames") > 10 && cJSON_IsObject(picked),
            "the demo's samples give a flame graph with a frame to zoom on");
  cr_expect(fabs(num(seen, "zoomedWidth") - width) < 0.01, "zoomed: %.2f of %.0f px",
            num(seen, "zoomedWidth"), width);
  cr_expect_gt(num(seen, "hiddenAfterZoom"), 0, "frames outside the zoomed one are hidden");
  cr_expect(fabs(num(seen, "resetWidth") - num(picked, "width")) < 0.01, "reset");

  /* Tooltip on hover: the frame's symbol, module and samples. */
  const cJSON *tip = item(seen, "tip");
  const char *query = str(seen, "query"), *text = str(tip, "text");
  cr_expect(cJSON_IsTrue(item(tip, "shown")), "no tooltip on hover");
  cr_expect(strstr(text, query) && strstr(text, "module: ") && strstr(text, "samples: "),
            "tooltip: %s", text);

  /* Search: the matches, and only they, are highlighted, and their share is shown. */
  const cJSON *hits = item(seen, "hits");
  cr_expect_gt(cJSON_GetArraySize(hits), 0, "searching '%s' highlights nothing", query);
  cJSON_ArrayForEach(e, hits) cr_expect(strstr(e->valuestring, query), "%s", e->valuestring);
  cr_expect(strstr(str(seen, "status"), " match: ") && strstr(str(seen, "status"), "% of all"),
            "status: %s", str(seen, "status"));
  cr_expect_str_eq(str(seen, "hitFill"), "rgb(224, 64, 251)");

  /* The timeline: one marker per event of the run, each with its kind and time, and the
   * tooltip on hover says which event, when, on which signature, in which state now. */
  const cJSON *markers = item(seen, "markers");
  cr_expect_gt(nevents, 0, "the demo's hot 16x16 sgemm is queued at least");
  cr_expect_eq(cJSON_GetArraySize(markers), nevents);
  cr_expect_eq(num(seen, "events"), nevents);
  cJSON_ArrayForEach(e, markers) cr_expect(*str(e, "kind") && *str(e, "t"));
  const cJSON *mtip = item(seen, "markerTip");
  const char *mtext = str(mtip, "text");
  cr_expect(cJSON_IsTrue(item(mtip, "shown")), "no tooltip on a marker");
  cr_expect(strstr(mtext, str(seen, "markerKind")) && strstr(mtext, " into the run") &&
                strstr(mtext, "signature: ") && strstr(mtext, "state: "),
            "marker tooltip: %s", mtext);

  /* On the same axis: each marker at its time (x0 + pw * t / span), and the samples per
   * interval as layers with an area, within the axis, the program's own time among them, with
   * the share of calls the JIT served as a line (the demo's 16x16 sgemm gets a kernel); the
   * tooltip over the busiest interval tells its samples. */
  const cJSON *axis = item(seen, "axis");
  double x0 = num(axis, "x0"), pw = num(axis, "pw"), span = num(axis, "span");
  cr_expect_gt(pw, 0);
  cJSON_ArrayForEach(e, markers)
  {
    double want = x0 + pw * num(e, "ns") / span;
    cr_expect(fabs(num(e, "x") - want) < 0.01, "%s at %s: x %.2f, the axis puts it at %.2f",
              str(e, "kind"), str(e, "t"), num(e, "x"), want);
    cr_expect(num(e, "x") >= x0 - 0.01 && num(e, "x") <= x0 + pw + 0.01);
  }
  const cJSON *layers = item(seen, "layers");
  int program = 0;
  cr_expect_gt(cJSON_GetArraySize(layers), 0, "the demo is sampled: samples per interval");
  cJSON_ArrayForEach(e, layers)
  {
    cr_expect_gt(num(e, "samples"), 0, "%s", str(e, "name"));
    cr_expect(num(e, "width") > 0 && num(e, "height") > 0, "%s has no area", str(e, "name"));
    cr_expect(num(e, "x") >= x0 - 0.01 && num(e, "x") + num(e, "width") <= x0 + pw + 0.01,
              "%s spans %.2f+%.2f, outside the axis", str(e, "name"), num(e, "x"),
              num(e, "width"));
    program |= strstr(str(e, "name"), "outside operators") != NULL;
  }
  cr_expect(program, "the program's own time is a layer");
  const cJSON *share = item(seen, "share");
  cr_expect(cJSON_IsString(share) && share->valuestring[0] == 'M', "no line of the JIT's share");
  const cJSON *stip = item(seen, "seriesTip");
  cr_expect(cJSON_IsTrue(item(stip, "shown")), "no tooltip over the samples");
  cr_expect(strstr(str(stip, "text"), " into the run") && strstr(str(stip, "text"), "samples: ") &&
                strstr(str(stip, "text"), "operator calls: ") &&
                strstr(str(stip, "text"), "JIT served: "),
            "samples tooltip: %s", str(stip, "text"));

  /* Every legend swatch has a colour. */
  const cJSON *swatches = item(seen, "swatches");
  cr_expect_gt(cJSON_GetArraySize(swatches), 6);
  cJSON_ArrayForEach(e, swatches) cr_expect_str_neq(e->valuestring, "rgba(0, 0, 0, 0)");

  /* Without JavaScript: the same drawings, each frame and marker with its own title, and no
   * search box or button that would do nothing. */
  const cJSON *nojs = item(seen, "nojs");
  cr_expect_eq(num(nojs, "frames"), num(seen, "frames"));
  cr_expect_eq(num(nojs, "titled"), num(seen, "frames"));
  cr_expect_eq(num(nojs, "markers"), nevents);
  cr_expect_eq(num(nojs, "layers"), cJSON_GetArraySize(layers));
  cr_expect_str_eq(str(nojs, "tools"), "none");

  cr_expect_eq(access(SHOT, R_OK), 0, "no screenshot at " SHOT);
  cJSON_Delete(seen);
  cJSON_Delete(events);
  free(node);
}
