/* SPDX-License-Identifier: MIT */
/* The two drawings of `opjit report` (report.h): the flame graph of the sampled stacks, every
 * frame a <g class="f"> that report.js zooms, searches and explains, and the run's timeline:
 * its series over time (samples per interval stacked by operator, the JIT's share of calls)
 * above the JIT's events, on one time axis. Both are complete static SVG (layout computed here, a <title>
 * per element) so the page reads without its script. */
#include "report.h"
#include "table.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FLAME_WIDTH 1200 /* px */
#define FLAME_ROW 18     /* px per frame */
#define CHAR_PX 7.0      /* width of one label character at the 12 px monospace font */

#define TL_WIDTH 1200 /* px, the whole timeline */
#define TL_LABEL 290  /* px at the left for the lanes' names */
#define TL_RIGHT 16   /* px right of the time axis's end */
#define TL_STEP 44    /* px, the row of kernels in service */
#define TL_LANE 22    /* px per signature lane */
#define TL_AXIS 26    /* px under the lanes for the time axis */
#define TL_LANES 16   /* signatures given a lane */
#define TL_AREA 150   /* px, the chart of samples per interval */
#define TL_LAYERS 8   /* operators given a layer of their own in it; the rest are "other" */

/* ---- flame graph ----------------------------------------------------------------------- */

/* Draws fr and what it holds, total being the whole graph's samples. */
static void draw_frame(FILE *f, const ins_frame_t *fr, double px_per_sample, int64_t total)
{
  static const char *const kind[] = {[INS_FRAME_ROOT] = "root",
                                     [INS_FRAME_PROGRAM] = "program",
                                     [INS_FRAME_AGENT] = "agent",
                                     [INS_FRAME_LIBRARY] = "library",
                                     [INS_FRAME_JIT] = "jit"};
  double x = (double)fr->offset * px_per_sample, w = (double)fr->samples * px_per_sample;
  int y = fr->depth * FLAME_ROW;
  fputs("<g class=\"f\" data-n=\"", f);
  ins_html_esc(f, fr->name);
  fprintf(f, "\" data-o=\"%" PRId64 "\" data-s=\"%" PRId64 "\" data-d=\"%d\"><title>", fr->offset,
          fr->samples, fr->depth);
  ins_html_esc(f, fr->name);
  fprintf(f, " (%" PRId64 " samples, %.2f%%)</title>", fr->samples, ins_pct(fr->samples, total));
  fprintf(f, "<rect class=\"fr k-%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\"/>",
          kind[fr->kind], x, y, w, FLAME_ROW - 1);
  int chars = (int)((w - 6) / CHAR_PX);
  if (chars >= 3) {
    fprintf(f, "<text x=\"%.2f\" y=\"%d\">", x + 3, y + FLAME_ROW - 5);
    ins_html_esc_clip(f, fr->name, chars);
    fputs("</text>", f);
  }
  fputs("</g>\n", f);
  for (const ins_frame_t *c = fr->child; c; c = c->next)
    draw_frame(f, c, px_per_sample, total);
}

void ins_report_flame(const ins_report_t *rep)
{
  FILE *f = rep->f;
  fputs("<h2 id=\"flame-graph\">Where the samples fell</h2>\n", f);
  if (!rep->stacks || !rep->flame->samples) {
    fprintf(f, "<p class=\"note\">%s: no flame graph.</p>\n",
            rep->samp.sampled ? "The sampler recorded no stacks for this run"
                              : "This run was not sampled");
    return;
  }
  int depth = 0;
  int64_t nodes = ins_frame_layout(rep->flame, &depth);
  fputs("<p>Each box is a frame, as wide as its samples; its callers are above it. The first row "
        "under the run is the operator (by signature) or [program] for the program's own time. "
        "Click a frame to zoom on it, click it again (or the run) to zoom out.</p>\n"
        "<p class=\"legend\"><span class=\"key k-root\"></span>run, operator, [program]"
        "<span class=\"key k-program\"></span>program<span class=\"key k-agent\"></span>"
        "opjit interposer<span class=\"key k-library\"></span>operator's library"
        "<span class=\"key k-jit\"></span>JIT code<span class=\"key k-hit\"></span>"
        "search match</p>\n"
        "<div class=\"flame-tools\"><input id=\"flame-search\" type=\"search\" "
        "placeholder=\"search frames by name\" aria-label=\"search frames by name\">"
        "<button id=\"flame-reset\" type=\"button\">reset zoom</button>"
        "<span id=\"flame-status\" aria-live=\"polite\"></span></div>\n",
        f);
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"flame\" width=\"%d\" height=\"%d\" "
          "role=\"img\" data-frames=\"%" PRId64 "\">\n",
          FLAME_WIDTH, (depth + 1) * FLAME_ROW, nodes);
  draw_frame(f, rep->flame, (double)FLAME_WIDTH / (double)rep->flame->samples, rep->flame->samples);
  fputs("</svg>\n", f);
}

/* ---- timeline ---------------------------------------------------------------------------- */

/* The class (and legend entry) of each event kind; a kind not listed draws as "failed". */
static const struct {
  const char *kind, *cls, *legend;
  int live; /* +1: a kernel starts serving, -1: it stops, 0: no change */
} ev_kinds[] = {
    {"queued", "queued", "queued for compile", 0},
    {"published", "published", "compiled and placed", +1},
    {"verified", "verified", "verified", 0},
    {"loaded", "loaded", "placed from the database", +1},
    {"demoted", "demoted", "demoted", -1},
    {"invalidated", "invalidated", "invalidated", -1},
    {"evicted", "evicted", "evicted", -1},
    {"deferred", "deferred", "deferred", 0},
    {"failed", "failed", "failed", 0},
    {"verify-failed", "failed", NULL, 0},
};
#define N_EV_KINDS (sizeof ev_kinds / sizeof *ev_kinds)

static size_t ev_kind(const char *kind)
{
  for (size_t i = 0; i < N_EV_KINDS; i++)
    if (strcmp(kind, ev_kinds[i].kind) == 0)
      return i;
  return ev_kind("failed");
}

/* One lane: a signature and its rank in `top` (nsigs: not ranked). */
typedef struct lane_s {
  const char *sig, *name;
  size_t rank;
  int live; /* while the events are read in order: its kernel serves */
} lane_t;

/* The timeline's geometry and what every event does to the kernels in service. */
typedef struct timeline_s {
  const ins_report_t *rep;
  double x0, pw, span; /* the axis's left end and width in px; the time it spans, ns */
  int *delta;          /* per event: +1 a kernel starts serving, -1 one stops, else 0 */
} timeline_t;

/* Orders lanes by rank, then signature (qsort). */
static int by_rank(const void *a, const void *b)
{
  const lane_t *x = a, *y = b;
  if (x->rank != y->rank)
    return x->rank < y->rank ? -1 : 1;
  return strcmp(x->sig, y->sig);
}

/* The time axis's tick step: 1, 2 or 5 times a power of ten, about 8 ticks over span_ns. */
static double tick_step(double span_ns)
{
  double raw = span_ns / 8, p = pow(10, floor(log10(raw)));
  return raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
}

/* A time on the axis, in s or ms by the step's size. */
static const char *axis_label(double ns, double step, char *buf, size_t len)
{
  if (step >= 1e8)
    snprintf(buf, len, "%.*f s", step >= 1e9 ? 0 : 1, ns / 1e9);
  else
    snprintf(buf, len, "%.*f ms", step >= 1e6 ? 0 : 1, ns / 1e6);
  return buf;
}

/* Whether e published a kernel that won its duel against the original (agent/tier.c says so
 * in the detail). */
static int won_duel(const ins_report_event_t *e)
{
  return strcmp(e->kind, "published") == 0 && strstr(e->detail, "won its duel");
}

/* One event's marker on a lane whose centre is at cy, with its tooltip. */
static void draw_event(FILE *f, const ins_report_event_t *e, double x, double cy)
{
  char t[32];
  fprintf(f, "<circle class=\"ev ev-%s%s\" cx=\"%.2f\" cy=\"%.1f\" r=\"%.1f\" data-kind=\"",
          ev_kinds[ev_kind(e->kind)].cls, won_duel(e) ? " won" : "", x, cy,
          ev_kinds[ev_kind(e->kind)].live ? 5.5 : 4.0);
  ins_html_esc(f, e->kind);
  ins_fmt_ns((double)e->offset_ns, t, sizeof t);
  fprintf(f, "\" data-ns=\"%" PRId64 "\" data-t=\"%s\"><title>%s: ", e->offset_ns, t, t);
  ins_html_esc(f, e->kind);
  fputs(" ", f);
  ins_html_esc(f, e->name);
  if (*e->detail) {
    fputs(": ", f);
    ins_html_esc(f, e->detail);
  }
  fputs("</title></circle>\n", f);
}

/* The run's variant of signature sig, or NULL. */
static const ins_report_jit_t *jit_of(const ins_report_t *rep, const char *sig)
{
  for (size_t i = 0; i < rep->njit; i++)
    if (strcmp(rep->jit[i].sig, sig) == 0)
      return &rep->jit[i];
  return NULL;
}

/* Writes, right-aligned at x in the lane at y, the variant's and the original's mean per call
 * when both were timed and the text fits in room px. */
static void draw_means(FILE *f, const ins_report_jit_t *j, double x, int y, double room)
{
  double v = ins_split_vmean(&j->split), o = ins_split_omean(&j->split);
  char vb[32], ob[32], xb[32], text[128];
  if (v <= 0 || o <= 0)
    return;
  int n = snprintf(text, sizeof text, "%s per call, original %s (%s)", ins_fmt_ns(v, vb, sizeof vb),
                   ins_fmt_ns(o, ob, sizeof ob),
                   ins_fmt_speedup(ins_split_speedup(&j->split), xb, sizeof xb));
  if (n * CHAR_PX + 12 <= room)
    fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"end\">%s</text>\n", x - 6, y + TL_LANE - 7,
            text);
}

/* One signature's lane at y: the original library's time grey, its kernel's time green (with
 * both means per call in the last stretch when it lasts to the end and there is room), its
 * events on top. */
static void draw_lane(const timeline_t *tl, const lane_t *l, int y)
{
  const ins_report_t *rep = tl->rep;
  FILE *f = rep->f;
  double x0 = tl->x0, pw = tl->pw, span = tl->span;
  const ins_report_jit_t *j = jit_of(rep, l->sig);
  double cy = y + TL_LANE / 2.0;
  const ins_report_sig_t *sig = l->rank < rep->nsigs ? &rep->sigs[l->rank] : NULL;
  const char *state = sig ? sig->state : "-", *why = sig && sig->reason ? sig->reason : "";
  fputs("<g class=\"lane\" data-name=\"", f);
  ins_html_esc(f, l->name);
  fprintf(f, "\" data-sig=\"%s\" data-state=\"", l->sig);
  ins_html_esc(f, state);
  fputs("\" data-why=\"", f);
  ins_html_esc(f, why);
  fputs("\"><title>", f);
  ins_html_esc(f, l->name);
  fprintf(f, " (%s): ", l->sig);
  ins_html_esc(f, state);
  if (*why) {
    fputs(": ", f);
    ins_html_esc(f, why);
  }
  fprintf(f, "</title><text x=\"0\" y=\"%d\">", y + TL_LANE - 7);
  ins_html_esc_clip(f, l->name, (int)((TL_LABEL - 70) / CHAR_PX));
  fputs("</text>", f);
  if (j && j->split.calls > 0)
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.0f%% JIT</text>", TL_LABEL - 8,
            y + TL_LANE - 7, ins_pct(j->split.vcalls, j->split.calls));
  fprintf(f, "<rect class=\"tl-orig\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\"/>\n", x0,
          y + 3, pw, TL_LANE - 6);
  double from = -1;
  for (size_t i = 0; i <= rep->nevents; i++) {
    const ins_report_event_t *e = i < rep->nevents ? &rep->events[i] : NULL;
    if (e && strcmp(e->sig, l->sig) != 0)
      continue;
    int live = e ? tl->delta[e - rep->events] : -1;
    double t = e ? (double)e->offset_ns : span;
    if (live > 0 && from < 0)
      from = t;
    else if (live < 0 && from >= 0) {
      fprintf(f, "<rect class=\"tl-jit\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\"/>\n",
              x0 + pw * from / span, y + 3, fmax(pw * (t - from) / span, 1), TL_LANE - 6);
      if (!e && j)
        draw_means(f, j, x0 + pw, y, pw * (t - from) / span);
      from = -1;
    }
  }
  for (size_t i = 0; i < rep->nevents; i++)
    if (strcmp(rep->events[i].sig, l->sig) == 0)
      draw_event(f, &rep->events[i], x0 + pw * (double)rep->events[i].offset_ns / span, cy);
  fputs("</g>\n", f);
}

/* The top row: how many JIT kernels served at each moment, as a step line. */
static void draw_live(const timeline_t *tl)
{
  const ins_report_t *rep = tl->rep;
  FILE *f = rep->f;
  double x0 = tl->x0, pw = tl->pw, span = tl->span;
  int live = 0, most = 0;
  for (size_t i = 0; i < rep->nevents; i++) {
    live += tl->delta[i];
    most = live > most ? live : most;
  }
  double h = TL_STEP - 14, unit = most ? h / most : 0, base = TL_STEP - 4;
  fprintf(f, "<text x=\"0\" y=\"%d\">kernels in service</text>", TL_STEP / 2 + 4);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">max %d</text>\n", TL_LABEL - 8,
          TL_STEP / 2 + 4, most);
  fprintf(f, "<polyline class=\"tl-step\" points=\"%.2f,%.1f", x0, base);
  live = 0;
  for (size_t i = 0; i < rep->nevents; i++) {
    int d = tl->delta[i];
    if (!d)
      continue;
    double x = x0 + pw * (double)rep->events[i].offset_ns / span;
    fprintf(f, " %.2f,%.1f", x, base - unit * live);
    live += d;
    fprintf(f, " %.2f,%.1f", x, base - unit * live);
  }
  fprintf(f, " %.2f,%.1f\"/>\n", x0 + pw, base - unit * live);
}

/* ---- the run over time: samples per interval by operator ------------------------------- */

/* One layer of the chart of samples: an operator, the rest of them, or the program's own. */
typedef struct layer_s {
  const char *name, *cls;
  const uint64_t *v; /* samples per interval */
  uint64_t total;
} layer_t;

/* The chart's layers, bottom up, into out (TL_LAYERS + 2 at most): the TL_LAYERS operators with
 * the most samples, then the other operators (the agent's rest row among them) summed into
 * other (rep->nint values), then the samples outside operators. Returns how many. */
static size_t series_layers(const ins_report_t *rep, layer_t *out, uint64_t *other)
{
  static const char *const cls[TL_LAYERS] = {"sa0", "sa1", "sa2", "sa3",
                                              "sa4", "sa5", "sa6", "sa7"};
  size_t n = 0;
  uint64_t rest = 0;
  const ins_report_series_t *outside = NULL;
  int *used = ins_xmalloc((rep->nseries + 1) * sizeof *used);
  memset(used, 0, (rep->nseries + 1) * sizeof *used);
  for (size_t i = 0; i < rep->nseries; i++) {
    if (rep->series[i].outside)
      outside = &rep->series[i], used[i] = 1;
    else if (rep->series[i].rest) /* never a layer of its own: in "other operators" */
      used[i] = 2;
  }
  while (n < TL_LAYERS) { /* the next most sampled operator (ties: by signature, as read) */
    size_t best = rep->nseries;
    for (size_t i = 0; i < rep->nseries; i++)
      if (!used[i] && rep->series[i].total > 0 &&
          (best == rep->nseries || rep->series[i].total > rep->series[best].total))
        best = i;
    if (best == rep->nseries)
      break;
    used[best] = 1;
    out[n] = (layer_t){rep->series[best].name, cls[n], rep->series[best].samples,
                       rep->series[best].total};
    n++;
  }
  memset(other, 0, rep->nint * sizeof *other);
  for (size_t i = 0; i < rep->nseries; i++)
    for (uint32_t k = 0; used[i] != 1 && k < rep->nint; k++)
      other[k] += rep->series[i].samples[k], rest += rep->series[i].samples[k];
  if (rest)
    out[n++] = (layer_t){"other operators", "sa-other", other, rest};
  if (outside && outside->total)
    out[n++] = (layer_t){"the program itself (outside operators)", "sa-out", outside->samples,
                         outside->total};
  free(used);
  return n;
}

/* Whether some interval has a call a JIT kernel served. */
static int series_has_jit(const ins_report_t *rep)
{
  for (size_t i = 0; i < rep->nseries; i++)
    for (uint32_t k = 0; k < rep->nint; k++)
      if (rep->series[i].vcalls[k])
        return 1;
  return 0;
}

/* Interval k's extent on the axis, clipped to the span: 0 when it starts past it. */
static int interval_px(const timeline_t *tl, uint32_t k, double *xa, double *xb)
{
  const ins_report_t *rep = tl->rep;
  double a = (double)rep->series_offset_ns + (double)k * (double)rep->interval_ns;
  double b = fmin(a + (double)rep->interval_ns, tl->span);
  if (a >= tl->span)
    return 0;
  *xa = tl->x0 + tl->pw * fmax(a, 0) / tl->span;
  *xb = tl->x0 + tl->pw * b / tl->span;
  return 1;
}

/* The chart's legend: a swatch per layer and the line of the JIT's share. */
static void series_legend(FILE *f, const layer_t *layers, size_t n, int jit)
{
  fputs("<p class=\"legend\" id=\"series-legend\">", f);
  for (size_t i = 0; i < n; i++) {
    fprintf(f, "<span class=\"key %s\"></span>", layers[i].cls);
    ins_html_esc_clip(f, layers[i].name, 48);
  }
  if (jit)
    fputs("<span class=\"key k-share\"></span>share of calls JIT kernels served", f);
  fputs("</p>\n", f);
}

/* The chart of samples per interval, stacked by layer, from y top to top + TL_AREA, with the
 * share of calls JIT kernels served as a line (0 at the bottom, 100 % at the top). The values,
 * and the operators' calls per interval, are also in data-* attributes for report.js's
 * tooltip. */
static void draw_series(const timeline_t *tl, const layer_t *layers, size_t n, int jit, int top)
{
  const ins_report_t *rep = tl->rep;
  FILE *f = rep->f;
  uint32_t nint = rep->nint;
  uint64_t *cum = ins_xmalloc((n + 1) * (nint + 1) * sizeof *cum), most = 0;
  for (uint32_t k = 0; k < nint; k++) {
    uint64_t c = 0;
    cum[k] = 0;
    for (size_t l = 0; l < n; l++)
      cum[(l + 1) * nint + k] = c += layers[l].v[k];
    most = c > most ? c : most;
  }
  double h = TL_AREA - 8, base = top + TL_AREA;
  char iv[32];
  ins_fmt_ns((double)rep->interval_ns, iv, sizeof iv);
  fprintf(f, "<g id=\"tl-series\" data-iv=\"%" PRId64 "\" data-off=\"%" PRId64 "\" data-n=\"%u\""
             " data-calls=\"",
          rep->interval_ns, rep->series_offset_ns, nint);
  for (uint32_t k = 0; k < nint; k++) { /* the operators' calls per interval: throughput */
    uint64_t c = 0;
    for (size_t i = 0; i < rep->nseries; i++)
      c += rep->series[i].calls[k];
    fprintf(f, "%s%" PRIu64, k ? " " : "", c);
  }
  fputs("\">\n", f);
  fprintf(f, "<text x=\"0\" y=\"%d\">%s per %s</text>", top + 14,
          n ? "CPU samples" : "JIT share of calls", iv);
  if (n)
    fprintf(f, "<text x=\"0\" y=\"%d\">max %" PRIu64 " samples</text>", top + 30, most);
  if (jit)
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">100%% JIT</text>"
               "<text x=\"%d\" y=\"%.0f\" text-anchor=\"end\">0%%</text>",
            TL_LABEL - 8, top + 16, TL_LABEL - 8, base);
  fprintf(f, "<line class=\"tl-axis\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\"/>\n", tl->x0,
          base, tl->x0 + tl->pw, base);
  for (size_t l = 0; l < n && most; l++) {
    const uint64_t *lo = cum + l * nint, *hi = cum + (l + 1) * nint;
    fprintf(f, "<polygon class=\"sa %s\" data-name=\"", layers[l].cls);
    ins_html_esc(f, layers[l].name);
    fputs("\" data-v=\"", f);
    for (uint32_t k = 0; k < nint; k++)
      fprintf(f, "%s%" PRIu64, k ? " " : "", layers[l].v[k]);
    fputs("\" points=\"", f);
    double xa, xb;
    for (uint32_t k = 0; k < nint && interval_px(tl, k, &xa, &xb); k++) {
      double y = base - h * (double)hi[k] / (double)most;
      fprintf(f, "%.2f,%.1f %.2f,%.1f ", xa, y, xb, y);
    }
    for (uint32_t k = nint; k-- > 0;)
      if (interval_px(tl, k, &xa, &xb)) {
        double y = base - h * (double)lo[k] / (double)most;
        fprintf(f, "%.2f,%.1f %.2f,%.1f ", xb, y, xa, y);
      }
    fputs("\"><title>", f);
    ins_html_esc(f, layers[l].name);
    uint64_t all = 0;
    for (size_t j = 0; j < n; j++)
      all += layers[j].total;
    fprintf(f, ": %" PRIu64 " samples (%.1f%%)</title></polygon>\n", layers[l].total,
            ins_pct((int64_t)layers[l].total, (int64_t)all));
  }
  if (jit) { /* per interval: the calls of every operator and those JIT kernels served */
    fputs("<path class=\"tl-share\" data-share=\"", f);
    for (uint32_t k = 0; k < nint; k++) {
      uint64_t c = 0, v = 0;
      for (size_t i = 0; i < rep->nseries; i++)
        c += rep->series[i].calls[k], v += rep->series[i].vcalls[k];
      if (c)
        fprintf(f, "%s%.4f", k ? " " : "", (double)(v < c ? v : c) / (double)c);
      else
        fprintf(f, "%s-", k ? " " : "");
    }
    fputs("\" d=\"", f);
    int drawing = 0;
    for (uint32_t k = 0; k < nint; k++) {
      uint64_t c = 0, v = 0;
      double xa, xb;
      for (size_t i = 0; i < rep->nseries; i++)
        c += rep->series[i].calls[k], v += rep->series[i].vcalls[k];
      if (!c || !interval_px(tl, k, &xa, &xb)) {
        drawing = 0;
        continue;
      }
      double y = base - h * (double)(v < c ? v : c) / (double)c;
      fprintf(f, "%c%.2f,%.1f H%.2f ", drawing ? 'L' : 'M', xa, y, xb);
      drawing = 1;
    }
    fputs("\"><title>share of calls JIT kernels served, per interval</title></path>\n", f);
  }
  fprintf(f, "<rect class=\"tl-hover\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\"/>\n",
          tl->x0, top, tl->pw, TL_AREA);
  fputs("</g>\n", f);
  free(cum);
}

void ins_report_timeline(const ins_report_t *rep)
{
  FILE *f = rep->f;
  fputs("<h2 id=\"timeline-title\">The run over time</h2>\n", f);
  int series = rep->nseries && rep->nint && rep->interval_ns > 0;
  layer_t layers[TL_LAYERS + 2];
  uint64_t *other = ins_xmalloc((rep->nint ? rep->nint : 1) * sizeof *other);
  size_t nlayers = series ? series_layers(rep, layers, other) : 0;
  int jit = series && series_has_jit(rep), band = nlayers || jit;
  if (!rep->nevents && !band) {
    fputs("<p class=\"note\">The JIT recorded no event in this run: nothing was queued, "
          "compiled or placed.</p>\n",
          f);
    if (!series)
      fputs("<p class=\"note\">No series over time either: the run was recorded by an opjit "
            "older than schema 8, which kept only totals.</p>\n",
            f);
    free(other);
    return;
  }
  lane_t *lanes = ins_xmalloc((rep->nevents + 1) * sizeof *lanes);
  timeline_t tl = {.rep = rep, .delta = ins_xmalloc((rep->nevents + 1) * sizeof *tl.delta)};
  size_t nlanes = 0;
  int64_t last = 0;
  for (size_t i = 0; i < rep->nevents; i++) {
    const ins_report_event_t *e = &rep->events[i];
    last = e->offset_ns > last ? e->offset_ns : last;
    size_t j = 0;
    while (j < nlanes && strcmp(lanes[j].sig, e->sig) != 0)
      j++;
    if (j == nlanes) {
      size_t rank = 0;
      while (rank < rep->nsigs && strcmp(rep->sigs[rank].sig, e->sig) != 0)
        rank++;
      lanes[nlanes++] = (lane_t){.sig = e->sig, .name = e->name, .rank = rank};
    }
    /* A kernel demoted before publication never served: only a change of state counts. */
    int d = ev_kinds[ev_kind(e->kind)].live;
    tl.delta[i] = (d > 0 && !lanes[j].live) || (d < 0 && lanes[j].live) ? d : 0;
    lanes[j].live += tl.delta[i];
  }
  qsort(lanes, nlanes, sizeof *lanes, by_rank);
  size_t shown = nlanes < TL_LANES ? nlanes : TL_LANES;
  double span = (double)(rep->wall_ns > last ? rep->wall_ns : last), x0 = TL_LABEL;
  if (span <= 0 && series) /* no wall time recorded: as far as the series goes */
    span = (double)rep->series_offset_ns + (double)rep->nint * (double)rep->interval_ns;
  double pw = TL_WIDTH - TL_LABEL - TL_RIGHT;
  span = span > 0 ? span : 1;
  tl.x0 = x0, tl.pw = pw, tl.span = span;
  int band_h = band ? TL_AREA + 12 : 0, events_h = rep->nevents ? TL_STEP + 6 : 0;
  int axis_y = band_h + events_h + (int)shown * TL_LANE + 4;

  fputs("<p>The run on the time since the program started", f);
  if (nlayers)
    fputs(": at the top, the CPU samples of each interval by operator (the program's own time "
          "on top), so the program speeding up shows as the stack shrinking",
          f);
  else if (jit)
    fputs(": at the top, the share of the operators' calls JIT kernels served in each interval",
          f);
  if (nlayers && jit)
    fputs(", and the share of the operators' calls JIT kernels served as a line", f);
  if (rep->nevents)
    fputs("; then the JIT's events: the top row counts the compiled kernels serving calls; each "
          "signature below is grey while its calls go to the original library and green while "
          "its kernel serves them, with the share of its calls the kernel served at the left",
          f);
  fputs(". Hover the chart or a marker for details.</p>\n", f);
  if (band)
    series_legend(f, layers, nlayers, jit);
  if (rep->nevents) {
    fputs("<p class=\"legend\"><span class=\"key k-orig\"></span>original library"
          "<span class=\"key k-jit\"></span>JIT kernel serving",
          f);
    for (size_t k = 0; k < N_EV_KINDS; k++) {
      if (!ev_kinds[k].legend)
        continue;
      size_t n = 0;
      for (size_t i = 0; i < rep->nevents; i++)
        n += ev_kind(rep->events[i].kind) == k;
      if (n)
        fprintf(f, "<span class=\"key ev ev-%s\"></span>%s (%zu)", ev_kinds[k].cls,
                ev_kinds[k].legend, n);
      size_t won = 0; /* told after "published" */
      for (size_t i = 0; strcmp(ev_kinds[k].kind, "published") == 0 && i < rep->nevents; i++)
        won += won_duel(&rep->events[i]) != 0;
      if (won)
        fprintf(f, "<span class=\"key ev ev-published won\"></span>of which won a duel (%zu)",
                won);
    }
    fputs("</p>\n", f);
  }
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"timeline\" width=\"%d\" "
          "height=\"%d\" role=\"img\" data-events=\"%zu\" data-x0=\"%.2f\" data-pw=\"%.2f\" "
          "data-span=\"%.0f\">\n",
          TL_WIDTH, axis_y + TL_AXIS, rep->nevents, x0, pw, span);
  double step = tick_step(span);
  char buf[32];
  for (double t = 0; t <= span * 1.0001; t += step) {
    double x = x0 + pw * t / span;
    fprintf(f, "<line class=\"tl-grid\" x1=\"%.2f\" y1=\"0\" x2=\"%.2f\" y2=\"%d\"/>", x, x,
            axis_y);
    fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, axis_y + 18,
            axis_label(t, step, buf, sizeof buf));
  }
  fprintf(f, "<line class=\"tl-axis\" x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>\n", x0, axis_y,
          x0 + pw, axis_y);
  if (band)
    draw_series(&tl, layers, nlayers, jit, 0);
  if (rep->nevents) {
    fprintf(f, "<g transform=\"translate(0 %d)\">\n", band_h);
    draw_live(&tl);
    for (size_t i = 0; i < shown; i++)
      draw_lane(&tl, &lanes[i], TL_STEP + 6 + (int)i * TL_LANE);
    fputs("</g>\n", f);
  }
  fputs("</svg>\n", f);
  if (nlanes > shown)
    fprintf(f,
            "<p class=\"note\">The %zu hottest of the %zu signatures the JIT acted on have a "
            "lane (opjit events %" PRId64 " lists every event).</p>\n",
            shown, nlanes, rep->run);
  if (!rep->nevents)
    fputs("<p class=\"note\">The JIT recorded no event in this run: nothing was queued, "
          "compiled or placed.</p>\n",
          f);
  if (!series)
    fputs("<p class=\"note\">This run has no series over time: it was recorded by an opjit "
          "older than schema 8, which kept each run's samples and calls summed over the whole "
          "run, so the timeline shows when each kernel served rather than the samples over "
          "time.</p>\n",
          f);
  else if (!nlayers)
    fputs("<p class=\"note\">The run was not sampled (OPJIT_SAMPLE_HZ=0, or perf_event was "
          "refused): no CPU samples per interval.</p>\n",
          f);
  free(tl.delta);
  free(lanes);
  free(other);
}
