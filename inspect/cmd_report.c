/* SPDX-License-Identifier: MIT */
/* `opjit report`: one self-contained HTML page for a run: header, bar charts of the hottest
 * signatures, the run's timeline (its series over time and the JIT's events), the `top`
 * table, the JIT's variants and an icicle flame graph of the sampled stacks (report_graph.c
 * draws the timeline and the flame graph). Inline CSS, SVG and one inline script that only
 * adds interaction (no network, no font files); every layout is computed here and every text
 * from the database is HTML-escaped. Entry point: cmd_report(). */
#include "cmd.h"
#include "report.h"
#include "table.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHART_ROWS 12   /* signatures per bar chart */
#define TABLE_ROWS 100  /* signatures in the table */
#define CHART_WIDTH 560 /* px, each chart */
#define CHART_LABEL 300 /* px of a chart row given to its label */
#define CHART_ROW 20    /* px per chart row */
#define CHAR_PX 7.0     /* width of one label character at the 12 px monospace font */

void ins_html_esc_n(FILE *f, const char *s, size_t n)
{
  for (size_t i = 0; i < n && s[i]; i++) {
    switch (s[i]) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&#39;", f); break;
    default: fputc(s[i], f);
    }
  }
}

void ins_html_esc(FILE *f, const char *s) { ins_html_esc_n(f, s, strlen(s)); }

void ins_html_esc_clip(FILE *f, const char *s, int max)
{
  size_t cut = 0, chars = 0;
  for (size_t i = 0; s[i]; i++)
    if (((unsigned char)s[i] & 0xc0) != 0x80 && ++chars == (size_t)max)
      cut = i; /* where character max begins: "…" takes its place if more follow */
  if (chars <= (size_t)max) {
    ins_html_esc(f, s);
    return;
  }
  ins_html_esc_n(f, s, cut);
  fputs("…", f);
}

/* Reads run's row into rep (exe INS_NO_PROGRAM when its program row is gone). Returns 0 or
 * INS_EXIT_FAIL (printed), also when the run is gone. */
static int read_run(st_db_t *db, ins_report_t *rep)
{
  st_rows_t *st = ins_query(db, ST_Q_RUN);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, rep->run);
  int rc = st_rows_next(st);
  if (rc == 0) { /* deleted since ins_pick_run found it: says so */
    st_rows_close(st);
    ins_run_exists(db, rep->run);
    return INS_EXIT_FAIL;
  }
  if (rc == 1) {
    const char *exe = st_rows_text(st, ST_RUN_EXE);
    rep->exe = ins_xstrdup(*exe ? exe : INS_NO_PROGRAM);
    rep->argv = ins_xstrdup(st_rows_text(st, ST_RUN_ARGV));
    rep->pid = st_rows_int(st, ST_RUN_PID);
    rep->start_ns = st_rows_int(st, ST_RUN_START_NS);
    rep->end_ns = st_rows_int(st, ST_RUN_END_NS);
    rep->wall_ns = ins_run_wall_ns(rep->start_ns, st_rows_int(st, ST_RUN_FLUSH_NS), rep->end_ns);
    rep->status =
        ins_xstrdup(ins_run_status(st_rows_text(st, ST_RUN_STATUS), rep->pid, rep->start_ns));
    rc = st_rows_next(st);
  }
  return ins_rows_finish(db, st, rc);
}

/* The text of column col of the current row, copied; NULL when it is NULL. */
static char *text_or_null(st_rows_t *st, int col)
{
  return st_rows_type(st, col) == ST_COL_NULL ? NULL : ins_xstrdup(st_rows_text(st, col));
}

/* Reads the run's signatures, ranked as `top` ranks them, into rep. Returns 0 or
 * INS_EXIT_FAIL (printed). */
static int read_sigs(st_db_t *db, ins_report_t *rep)
{
  st_rows_t *st = ins_query(db, ST_Q_SIG_TOTALS);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, rep->run);
  size_t cap = 0;
  int rc;
  while ((rc = st_rows_next(st)) == 1) {
    rep->sigs = ins_grow(rep->sigs, rep->nsigs, &cap, sizeof *rep->sigs);
    ins_report_sig_t *r = &rep->sigs[rep->nsigs++];
    snprintf(r->sig, sizeof r->sig, "%s", st_rows_text(st, ST_SIG_SIG));
    r->name = ins_xstrdup(st_rows_text(st, ST_SIG_NAME));
    r->calls = st_rows_int(st, ST_SIG_CALLS);
    r->timed = ins_sat_add(st_rows_int(st, ST_SIG_TIMED), st_rows_int(st, ST_SIG_VTIMED));
    r->est = st_rows_double(st, ST_SIG_EST);
    r->samples = st_rows_int(st, ST_SIG_SAMPLES);
    char *state = text_or_null(st, ST_SIG_STATE), *status = text_or_null(st, ST_SIG_STATUS);
    ins_split_t sp = ins_split_sig_row(st);
    char label[48];
    r->state = ins_xstrdup(
        ins_state_label(state, status, ins_split_speedup(&sp), label, sizeof label));
    r->reason = state ? text_or_null(st, ST_SIG_REASON) : NULL;
    rep->states |= state || status;
    free(state);
    free(status);
    rep->calls = ins_sat_add(rep->calls, r->calls);
    rep->est += r->est;
  }
  return ins_rows_finish(db, st, rc);
}

/* Reads the run's JIT variants, most calls served first, into rep. Returns 0 or INS_EXIT_FAIL
 * (printed). */
static int read_jit(st_db_t *db, ins_report_t *rep)
{
  st_rows_t *st = ins_query(db, ST_Q_VARIANTS);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, rep->run);
  size_t cap = 0;
  int rc;
  while ((rc = st_rows_next(st)) == 1) {
    rep->jit = ins_grow(rep->jit, rep->njit, &cap, sizeof *rep->jit);
    ins_report_jit_t *r = &rep->jit[rep->njit++];
    snprintf(r->sig, sizeof r->sig, "%s", st_rows_text(st, ST_VAR_SIG));
    r->name = ins_xstrdup(st_rows_text(st, ST_VAR_NAME));
    r->status = ins_xstrdup(st_rows_text(st, ST_VAR_STATUS));
    r->llvm = ins_xstrdup(st_rows_text(st, ST_VAR_LLVM));
    r->cpu = ins_xstrdup(st_rows_text(st, ST_VAR_CPU));
    r->compile_ns = st_rows_int(st, ST_VAR_COMPILE_NS);
    r->split = ins_split_var_row(st);
    char *state = text_or_null(st, ST_VAR_STATE), label[48];
    r->state = ins_xstrdup(ins_state_label(state, r->status, -1, label, sizeof label));
    free(state);
  }
  return ins_rows_finish(db, st, rc);
}

/* Reads the run's JIT events, in order, into rep. Returns 0 or INS_EXIT_FAIL (printed). */
static int read_events(st_db_t *db, ins_report_t *rep)
{
  st_rows_t *st = ins_query(db, ST_Q_EVENTS);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, rep->run);
  st_rows_bind_text(st, 2, "");
  size_t cap = 0;
  int rc;
  while ((rc = st_rows_next(st)) == 1) {
    rep->events = ins_grow(rep->events, rep->nevents, &cap, sizeof *rep->events);
    ins_report_event_t *e = &rep->events[rep->nevents++];
    e->offset_ns = st_rows_int(st, ST_EVENT_OFFSET_NS);
    snprintf(e->sig, sizeof e->sig, "%s", st_rows_text(st, ST_EVENT_SIG));
    e->kind = ins_xstrdup(st_rows_text(st, ST_EVENT_KIND));
    e->name = ins_xstrdup(st_rows_text(st, ST_EVENT_NAME));
    e->detail = ins_xstrdup(st_rows_text(st, ST_EVENT_DETAIL));
  }
  return ins_rows_finish(db, st, rc);
}

/* Decodes column col of the current row into a new array of rep->nint values (missing ones 0). */
static uint64_t *series_values(st_rows_t *st, int col, const ins_report_t *rep)
{
  size_t len;
  const void *blob = st_rows_blob(st, col, &len);
  uint64_t *v = ins_xmalloc((rep->nint ? rep->nint : 1) * sizeof *v);
  memset(v, 0, (rep->nint ? rep->nint : 1) * sizeof *v);
  st_series_decode(blob, len, v, rep->nint);
  return v;
}

/* Reads the run's series over time into rep (none for a run without one). Returns 0 or
 * INS_EXIT_FAIL (printed). */
static int read_series(st_db_t *db, ins_report_t *rep)
{
  st_rows_t *st = ins_query(db, ST_Q_SERIES);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, rep->run);
  size_t cap = 0;
  int rc;
  while ((rc = st_rows_next(st)) == 1) {
    if (!rep->nseries) { /* every row has as many intervals: the calls blob's count */
      size_t len;
      const void *blob = st_rows_blob(st, ST_SERIES_CALLS, &len);
      uint64_t *tmp = ins_xmalloc((len ? len : 1) * sizeof *tmp);
      rep->nint = (uint32_t)st_series_decode(blob, len, tmp, len);
      free(tmp);
      rep->interval_ns = st_rows_int(st, ST_SERIES_INTERVAL_NS);
      rep->series_offset_ns = st_rows_int(st, ST_SERIES_OFFSET_NS);
    }
    rep->series = ins_grow(rep->series, rep->nseries, &cap, sizeof *rep->series);
    ins_report_series_t *r = &rep->series[rep->nseries++];
    snprintf(r->sig, sizeof r->sig, "%s", st_rows_text(st, ST_SERIES_SIG));
    r->rest = strcmp(st_rows_text(st, ST_SERIES_ROW), "rest") == 0;
    r->outside = strcmp(st_rows_text(st, ST_SERIES_ROW), "outside") == 0;
    r->name = ins_xstrdup(r->rest      ? "other operators"
                          : r->outside ? INS_FOLD_PROGRAM
                                       : st_rows_text(st, ST_SERIES_NAME));
    r->calls = series_values(st, ST_SERIES_CALLS, rep);
    r->vcalls = series_values(st, ST_SERIES_VCALLS, rep);
    r->samples = series_values(st, ST_SERIES_SAMPLES, rep);
    r->total = 0;
    for (uint32_t k = 0; k < rep->nint; k++)
      r->total += r->samples[k];
  }
  return ins_rows_finish(db, st, rc);
}

/* Adds one folded stack to the report's frame tree (ins_fold_fn). */
static void add_stack(void *ctx, const char *line, int64_t samples)
{
  ins_frame_add(((ins_report_t *)ctx)->flame, line, samples);
}

/* The page's head and the run's header. */
static void write_header(const ins_report_t *rep)
{
  FILE *f = rep->f;
  char prog[1024], buf[256];
  ins_program_label(rep->exe, rep->argv, 0, prog, sizeof prog);
  fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>opjit run ", f);
  fprintf(f, "%lld: ", (long long)rep->run);
  ins_html_esc_clip(f, prog, 80);
  fprintf(f, "</title>\n<style>\n%s</style></head>\n<body>\n<h1>opjit run %lld: ",
          ins_report_css, (long long)rep->run);
  ins_html_esc_clip(f, prog, 100);
  fputs("</h1>\n<dl>\n<dt>executable</dt><dd class=\"m\">", f);
  ins_html_esc(f, rep->exe);
  fputs("</dd>\n<dt>argv</dt><dd class=\"m\">", f);
  ins_html_esc(f, rep->argv);
  fprintf(f, "</dd>\n<dt>run</dt><dd>%lld (pid %lld, ", (long long)rep->run, (long long)rep->pid);
  ins_html_esc(f, rep->status);
  fprintf(f, ")</dd>\n<dt>started</dt><dd>%s</dd>\n",
          ins_fmt_time(rep->start_ns, buf, sizeof buf));
  fprintf(f, "<dt>ended</dt><dd>%s</dd>\n",
          rep->end_ns ? ins_fmt_time(rep->end_ns, buf, sizeof buf) : "not recorded");
  fprintf(f, "<dt>wall time</dt><dd>%s</dd>\n", ins_fmt_duration(rep->wall_ns, buf, sizeof buf));
  fputs("<dt>sampling</dt><dd>", f);
  ins_html_esc(f, rep->samp.runs ? ins_sampling_describe(&rep->samp, buf, sizeof buf) : "not sampled");
  const cJSON *note;
  cJSON_ArrayForEach(note, rep->samp.notes)
  {
    fputs("<br><span class=\"note\">", f);
    ins_html_esc(f, note->valuestring);
    fputs("</span>", f);
  }
  fputs("</dd>\n<dt>database</dt><dd class=\"m\">", f);
  ins_html_esc(f, rep->database);
  fputs("</dd>\n</dl>\n", f);
}

/* One horizontal bar chart: n labels with their percentage; cls[i] is each bar's class. */
static void bar_chart(FILE *f, const char *title, const char *const *labels, const double *pct,
                      const char *const *cls, int n)
{
  double span = CHART_WIDTH - CHART_LABEL - 60;
  fprintf(f, "<figure style=\"margin:0\"><figcaption>%s</figcaption>\n", title);
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" role=\"img\">\n",
          CHART_WIDTH, n * CHART_ROW + 4);
  for (int i = 0; i < n; i++) {
    int y = i * CHART_ROW + 2;
    fprintf(f, "<g><title>");
    ins_html_esc(f, labels[i]);
    fprintf(f, ": %.1f%%</title><text x=\"0\" y=\"%d\">", pct[i], y + 13);
    ins_html_esc_clip(f, labels[i], (int)((CHART_LABEL - 8) / CHAR_PX));
    fprintf(f, "</text><rect class=\"%s\" x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\"/>",
            cls[i], CHART_LABEL, y, span * pct[i] / 100.0, CHART_ROW - 4);
    fprintf(f, "<text x=\"%.2f\" y=\"%d\">%.1f%%</text></g>\n",
            CHART_LABEL + span * pct[i] / 100.0 + 4, y + 13, pct[i]);
  }
  fputs("</svg></figure>\n", f);
}

/* Orders signature rows by samples, most first (qsort). */
static int by_samples(const void *a, const void *b)
{
  const ins_report_sig_t *x = *(ins_report_sig_t *const *)a, *y = *(ins_report_sig_t *const *)b;
  return (y->samples > x->samples) - (y->samples < x->samples);
}

/* The two bar charts: estimated time share, and share of samples (the program included). */
static void write_charts(const ins_report_t *rep)
{
  FILE *f = rep->f;
  const char *labels[CHART_ROWS + 1], *cls[CHART_ROWS + 1];
  double pct[CHART_ROWS + 1];
  int n = 0;
  fputs("<h2>Hottest signatures</h2>\n<div class=\"charts\">\n", f);
  for (; n < CHART_ROWS && (size_t)n < rep->nsigs; n++) {
    labels[n] = rep->sigs[n].name;
    pct[n] = rep->est > 0 ? 100.0 * rep->sigs[n].est / rep->est : 0;
    cls[n] = "bar-est";
  }
  bar_chart(f, "share of estimated operator time", labels, pct, cls, n);
  if (rep->samp.sampled) {
    const ins_report_sig_t **order = ins_xmalloc((rep->nsigs + 1) * sizeof *order);
    for (size_t i = 0; i < rep->nsigs; i++)
      order[i] = &rep->sigs[i];
    qsort(order, rep->nsigs, sizeof *order, by_samples);
    labels[0] = INS_FOLD_PROGRAM;
    pct[0] = ins_pct(rep->samp.host, rep->samp.total);
    cls[0] = "bar-prog";
    for (n = 1; n <= CHART_ROWS && (size_t)n <= rep->nsigs; n++) {
      labels[n] = order[n - 1]->name;
      pct[n] = ins_pct(order[n - 1]->samples, rep->samp.total);
      cls[n] = "bar-cpu";
    }
    free(order);
    bar_chart(f, "share of CPU samples (CPU%), the program's own time included", labels, pct, cls,
              n);
  }
  fputs("</div>\n", f);
}

/* Writes a signature's recorded reason under its name (nothing when none was recorded). */
static void write_reason(FILE *f, const char *reason)
{
  if (!reason)
    return;
  fputs("<br><span class=\"why\">", f);
  ins_html_esc(f, ins_reason_text(reason));
  fputs("</span>", f);
}

/* The `top` table and its footer; STATE and the reasons under the names as `top --why`. */
static void write_table(const ins_report_t *rep)
{
  FILE *f = rep->f;
  int sampled = rep->samp.sampled > 0;
  char a[32], b[32];
  fputs("<h2>Signatures</h2>\n<table>\n<tr><th class=\"r\">SHARE</th><th class=\"r\">EST.TIME</th>"
        "<th class=\"r\">CALLS</th><th class=\"r\">MEAN</th>", f);
  if (rep->states)
    fputs("<th>STATE</th>", f);
  if (sampled)
    fputs("<th class=\"r\">SAMPLES</th><th class=\"r\">CPU%</th>", f);
  fputs("<th>SIG</th><th>NAME</th></tr>\n", f);
  for (size_t i = 0; i < rep->nsigs && i < TABLE_ROWS; i++) {
    const ins_report_sig_t *r = &rep->sigs[i];
    double mean = ins_call_mean(r->est, r->calls, r->timed);
    fprintf(f, "<tr><td class=\"r\">%.1f%%</td><td class=\"r\">%s</td><td class=\"r\">%lld</td>"
               "<td class=\"r\">%s</td>",
            rep->est > 0 ? 100.0 * r->est / rep->est : 0, ins_fmt_ns(r->timed ? r->est : -1, a,
            sizeof a), (long long)r->calls, ins_fmt_ns(mean, b, sizeof b));
    if (rep->states) {
      fputs("<td class=\"nw\">", f);
      ins_html_esc(f, r->state);
      fputs("</td>", f);
    }
    if (sampled)
      fprintf(f, "<td class=\"r\">%lld</td><td class=\"r\">%.1f%%</td>", (long long)r->samples,
              ins_pct(r->samples, rep->samp.total));
    fputs("<td class=\"m\">", f);
    ins_html_esc(f, r->sig);
    fputs("</td><td>", f);
    ins_html_esc(f, r->name);
    write_reason(f, r->reason);
    fputs("</td></tr>\n", f);
  }
  fprintf(f, "</table>\n<p>%lld calls in %zu signatures; estimated operator time %s of %s wall",
          (long long)rep->calls, rep->nsigs, ins_fmt_ns(rep->est, a, sizeof a),
          ins_fmt_duration(rep->wall_ns, b, sizeof b));
  if (rep->wall_ns > 0)
    fprintf(f, " (%.1f%%)", 100.0 * rep->est / (double)rep->wall_ns);
  if (sampled)
    fprintf(f, "; %.1f%% of samples inside operators, %.1f%% in the program itself",
            ins_pct(rep->samp.total - rep->samp.host, rep->samp.total),
            ins_pct(rep->samp.host, rep->samp.total));
  fputs(".</p>\n", f);
  if (rep->nsigs > TABLE_ROWS)
    fprintf(f, "<p class=\"note\">The table shows the top %d of %zu signatures (opjit top "
               "--limit 0 %lld lists them all).</p>\n", TABLE_ROWS, rep->nsigs, (long long)rep->run);
}

/* The JIT's variants, when the run has any. */
static void write_jit(const ins_report_t *rep)
{
  FILE *f = rep->f;
  if (!rep->njit)
    return;
  fputs("<h2>JIT</h2>\n<table>\n<tr><th>STATE</th><th class=\"r\">CALLS</th>"
        "<th class=\"r\">%CALLS</th><th class=\"r\">VARIANT</th><th class=\"r\">ORIGINAL</th>"
        "<th class=\"r\">SPEEDUP</th><th class=\"r\">COMPILE</th><th>COMPILER</th>"
        "<th>SIG</th><th>NAME</th></tr>\n", f);
  for (size_t i = 0; i < rep->njit; i++) {
    const ins_report_jit_t *r = &rep->jit[i];
    char v[32], o[32], x[32], c[32];
    fputs("<tr><td class=\"nw\">", f);
    ins_html_esc(f, r->state);
    fprintf(f, "</td><td class=\"r\">%lld</td><td class=\"r\">%.1f%%</td><td class=\"r\">%s"
               "</td><td class=\"r\">%s</td><td class=\"r\">%s</td><td class=\"r\">%s</td>"
               "<td class=\"nw\">",
            (long long)r->split.vcalls, ins_pct(r->split.vcalls, r->split.calls),
            ins_fmt_ns(ins_split_vmean(&r->split), v, sizeof v),
            ins_fmt_ns(ins_split_omean(&r->split), o, sizeof o),
            ins_fmt_speedup(ins_split_speedup(&r->split), x, sizeof x),
            ins_fmt_ns(r->compile_ns > 0 ? (double)r->compile_ns : -1, c, sizeof c));
    fputs("LLVM ", f);
    ins_html_esc(f, *r->llvm ? r->llvm : "?");
    fputs(", ", f);
    ins_html_esc(f, *r->cpu ? r->cpu : "?");
    fputs("</td><td class=\"m\">", f);
    ins_html_esc(f, r->sig);
    fputs("</td><td>", f);
    ins_html_esc(f, r->name);
    fputs("</td></tr>\n", f);
  }
  fputs("</table>\n<p class=\"note\">VARIANT and ORIGINAL are mean times per timed call; the "
        "estimated times above count each part of a signature's calls at its own mean. Each "
        "signature's reason for its STATE is under its name in the table above.</p>\n", f);
}

/* Writes the whole page to rep->f. */
static void write_report(const ins_report_t *rep)
{
  write_header(rep);
  write_charts(rep);
  ins_report_timeline(rep);
  write_table(rep);
  write_jit(rep);
  ins_report_flame(rep);
  fprintf(rep->f, "<p class=\"note\">opjit %s</p>\n<div id=\"tip\" role=\"tooltip\"></div>\n"
                  "<script>\n%s</script>\n</body></html>\n",
          OPJIT_VERSION, ins_report_js);
}

static void report_free(ins_report_t *rep)
{
  for (size_t i = 0; i < rep->nsigs; i++) {
    free(rep->sigs[i].name);
    free(rep->sigs[i].state);
    free(rep->sigs[i].reason);
  }
  free(rep->sigs);
  for (size_t i = 0; i < rep->njit; i++) {
    free(rep->jit[i].name);
    free(rep->jit[i].status);
    free(rep->jit[i].llvm);
    free(rep->jit[i].cpu);
    free(rep->jit[i].state);
  }
  free(rep->jit);
  for (size_t i = 0; i < rep->nevents; i++) {
    free(rep->events[i].kind);
    free(rep->events[i].name);
    free(rep->events[i].detail);
  }
  free(rep->events);
  for (size_t i = 0; i < rep->nseries; i++) {
    free(rep->series[i].name);
    free(rep->series[i].calls);
    free(rep->series[i].vcalls);
    free(rep->series[i].samples);
  }
  free(rep->series);
  free(rep->exe);
  free(rep->argv);
  free(rep->status);
  free(rep->database);
  ins_sampling_free(&rep->samp);
  ins_frame_free(rep->flame);
}

static int cmd_report(int argc, char **argv)
{
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"output", required_argument, NULL, 'o'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL, *out = NULL;
  int rc;
  long run = 0;
  for (int c; (c = getopt_long(argc, argv, "d:o:h", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
    case 'o': out = optarg; break;
    case 'h': return ins_help(&ins_cmd_report);
    default: return ins_bad_option(&ins_cmd_report, argv);
    }
  }
  if ((rc = ins_parse_run(&ins_cmd_report, argc, argv, 0, &run)))
    return rc;
  if (!out)
    return ins_usage_error(&ins_cmd_report, "where to? give -o FILE.html (or -o - for stdout)");

  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  ins_report_t rep = {.run = run};
  rc = INS_EXIT_FAIL;
  if (ins_pick_run(db, run, 0, INS_HAS_CALLS, &rep.run))
    goto out;
  char title[32];
  snprintf(title, sizeof title, "run %lld", (long long)rep.run);
  rep.flame = ins_frame_tree(title);
  rep.database = ins_xstrdup(st_path(db));
  if (read_run(db, &rep) || read_sigs(db, &rep) || read_jit(db, &rep) || read_events(db, &rep) ||
      read_series(db, &rep) ||
      ins_sampling_read(db, rep.run, &rep.samp) ||
      ins_fold_each(db, rep.run, NULL, add_stack, &rep, &rep.stacks))
    goto out;
  int to_stdout = strcmp(out, "-") == 0;
  rep.f = to_stdout ? stdout : fopen(out, "w");
  if (!rep.f) {
    fprintf(stderr, "opjit: cannot write %s: %m\n", out);
    goto out;
  }
  write_report(&rep);
  if (ferror(rep.f) | (to_stdout ? fflush(rep.f) : fclose(rep.f))) {
    fprintf(stderr, "opjit: cannot write %s: %m\n", to_stdout ? "the report" : out);
    if (!to_stdout)
      unlink(out);
    goto out;
  }
  if (!to_stdout)
    fprintf(stderr, "opjit: wrote %s (run %lld)\n", out, (long long)rep.run);
  rc = INS_EXIT_OK;
out:
  report_free(&rep);
  st_close(db);
  return rc;
}

const ins_cmd_t ins_cmd_report = {
    .name = "report",
    .main = cmd_report,
    .synopsis = "[--db PATH] [RUN] -o FILE.html",
    .summary = "write a run's profile as one self-contained HTML page",
    .help = "One HTML file with everything inline (no fonts or network resources): the run's\n"
            "program, argv, dates, wall time and sampling; bar charts of the hottest\n"
            "signatures by estimated time and by CPU samples; a timeline of the run: CPU\n"
            "samples per interval stacked by operator with the share of calls JIT kernels\n"
            "served, under it the JIT's events (when each kernel was queued, compiled,\n"
            "verified, placed, demoted or invalidated, and how many served at each moment);\n"
            "the table opjit top prints; the JIT's variants; and, for a sampled run, a flame\n"
            "graph (icicle) of its stacks, each operator the root of its own, coloured by\n"
            "program, opjit interposer, operator's library and JIT code. In a browser with\n"
            "JavaScript the flame graph zooms on a click, searches frames by name and shows\n"
            "each frame's samples, share and module, and the timeline shows each interval's\n"
            "samples by operator on hover; without it every drawing still shows, with plain\n"
            "tooltips.\n"
            "RUN defaults to the newest run that recorded an operator call.\n\n"
            "options:\n"
            "  --db PATH        the profile database\n"
            "  -o, --output F   write the page to F (- for stdout)\n"
            "  -h, --help       this help\n",
};
