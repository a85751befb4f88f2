/* SPDX-License-Identifier: MIT */
/* The exit summary: one pass over the signature table after the writer's final step, the same
 * counters the writer stored (ag_tcount_sum, ag_entry_orig_timed, the variant timings, the
 * tiers' status and origin), then a few lines on stderr. Entry point: ag_summary_print. */
#define _GNU_SOURCE
#include "summary.h"
#include "agent.h"
#include "tcount.h"
#include "tier.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ns with three significant digits and a unit, as `opjit top` prints durations. */
static const char *fmt_ns(double ns, char *buf, size_t len)
{
  static const char *const unit[] = {"ns", "µs", "ms", "s"};
  const char *sign = ns < 0 ? "-" : "";
  int u = 0;
  ns = ns < 0 ? -ns : ns;
  while (u < 3 && ns >= 999.5)
    ns /= 1000, u++;
  snprintf(buf, len,
           u == 0       ? "%s%.0f %s"
           : ns < 9.995 ? "%s%.2f %s"
           : ns < 99.95 ? "%s%.1f %s"
                        : "%s%.0f %s",
           sign, ns, unit[u]);
  return buf;
}

static double pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0; }

/* Keeps s->top the AG_SUMMARY_TOP costliest signatures, costliest first (ties: more calls). */
static void rank(ag_summary_t *s, const ag_entry_t *e, uint64_t calls, double est, double x,
                 const ag_reason_t *r)
{
  int at = s->ntop;
  while (at > 0 && (est > s->top[at - 1].est_ns ||
                    (est == s->top[at - 1].est_ns && calls > s->top[at - 1].calls)))
    at--;
  if (at >= AG_SUMMARY_TOP)
    return;
  int last = s->ntop < AG_SUMMARY_TOP ? s->ntop : AG_SUMMARY_TOP - 1;
  memmove(&s->top[at + 1], &s->top[at], (size_t)(last - at) * sizeof s->top[0]);
  struct ag_summary_sig_s *t = &s->top[at];
  ag_sig_format(&e->key, t->name, sizeof t->name);
  t->calls = calls, t->est_ns = est, t->speedup = x;
  snprintf(t->state, sizeof t->state, "%s", ag_state_name(r->state));
  size_t n = strlen(r->text), k = sizeof t->why - sizeof "…";
  if (n < sizeof t->why) {
    memcpy(t->why, r->text, n + 1);
  } else { /* cut at a space, marked */
    while (k && r->text[k] != ' ')
      k--;
    memcpy(t->why, r->text, k);
    memcpy(t->why + k, "…", sizeof "…");
  }
  if (s->ntop < AG_SUMMARY_TOP)
    s->ntop++;
}

/* Counts entry i's variant under its status and origin, as the writer records them. */
static void count_variant(ag_summary_t *s, uint32_t i, const ag_entry_t *e, uint32_t tier)
{
  if (tier == AG_TIER_COLD || tier == AG_TIER_NONE) {
    tier == AG_TIER_COLD ? s->cold++ : s->none++;
    return;
  }
  ag_persist_t p;
  int any = ag_tier_persist(i, &p);
  ag_tier_persisted(i, &p, 0); /* only the origin was wanted: the object stays pending */
  if (any && strcmp(p.origin, "loaded") == 0)
    s->placed++;
  else if (e->compile_ns > 0)
    s->compiled++;
  const char *st = ag_tier_status(i);
  if (!st)
    return;
  if (strcmp(st, "demoted") == 0)
    s->demoted++;
  else if (strcmp(st, "tied") == 0)
    s->tied++;
  else if (strcmp(st, "guarded") == 0)
    s->guarded++;
  else if (strcmp(st, "failed") == 0)
    s->failed++;
  else if (strcmp(st, "queued") == 0)
    s->queued++;
}

void ag_summary_collect(ag_summary_t *s, int64_t run_id, int64_t start_ns)
{
  memset(s, 0, sizeof *s);
  s->run_id = run_id;
  s->wall_ns = ag_realtime_ns() - start_ns;
  s->jit = ag_opts.num[AG_OPT_MODE] == AG_MODE_JIT;
  s->threads_own = ag_host_threaded();
  uint32_t n = ag_table ? ag_table_count(ag_table) : 0;
  uint64_t *calls = calloc(n ? n : 1, sizeof *calls), *vcalls = calloc(n ? n : 1, sizeof *vcalls);
  if (!calls || !vcalls)
    goto out;
  ag_tcount_sum(calls, vcalls, n);
  for (uint32_t i = 0; i < n; i++) {
    if (!calls[i])
      continue;
    ag_entry_t *e = ag_table_entry(ag_table, i);
    uint32_t tier = atomic_load(&e->tier);
    int variant = tier != AG_TIER_COLD && tier != AG_TIER_NONE;
    uint64_t vc = variant ? (vcalls[i] < calls[i] ? vcalls[i] : calls[i]) : 0, oc = calls[i] - vc;
    uint64_t ot, ons, vt = atomic_load(&e->vtimed), vns = atomic_load(&e->vtimed_ns);
    ag_entry_orig_timed(e, &ot, &ons);
    double omean = ot ? (double)ons / (double)ot : 0, vmean = vt ? (double)vns / (double)vt : 0;
    int compared = ot >= ST_COMPARE_MIN_TIMED && vt >= ST_COMPARE_MIN_TIMED; /* store.h */
    double x = compared && vmean > 0 ? omean / vmean : 0;
    /* Where the judge has a ratio, the original's mean, speedup and saving come from it, as
     * the readers' do (store/query.h, ST_SIG_RATIO, ST_SIG_EST): a run its variant serves
     * times the original's calls rarely, colder than a plain run's */
    double ratio = variant ? ag_tier_judge_ratio(i) : 0;
    int by_ratio = ratio > 0 && vt >= ST_COMPARE_MIN_TIMED;
    if (by_ratio)
      x = 1 / ratio, omean = vmean / ratio;
    /* Each side's calls at its own mean, else at the other's (as opjit top estimates). */
    double est = (double)oc * (ot || by_ratio ? omean : vmean) + (double)vc * (vt ? vmean : omean);
    s->sigs++;
    s->calls += calls[i];
    s->vcalls += vc;
    s->est_ns += est;
    if (by_ratio)
      s->saving_ns += (double)vc * vmean * (1 / ratio - 1);
    else if (compared)
      s->saving_ns += (double)vc * (omean - vmean);
    count_variant(s, i, e, tier);
    ag_reason_t r;
    ag_tier_reason(i, calls[i], &r);
    rank(s, e, calls[i], est, x, &r);
  }
out:
  free(calls), free(vcalls);
}

/* Appends to buf at *used, never past len. */
static void put(char *buf, size_t len, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *used, const char *fmt, ...)
{
  if (*used >= len)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *used, len - *used, fmt, ap);
  va_end(ap);
  if (n > 0)
    *used = *used + (size_t)n < len ? *used + (size_t)n : len - 1;
}

/* ", N word" when N > 0. */
static void put_count(char *buf, size_t len, size_t *used, uint32_t n, const char *word)
{
  if (n)
    put(buf, len, used, ", %u %s", n, word);
}

size_t ag_summary_format(const ag_summary_t *s, char *buf, size_t len)
{
  size_t used = 0;
  char a[32], b[32];
  if (!len)
    return 0;
  buf[0] = 0;
  if (s->run_id)
    put(buf, len, &used, "opjit: run %lld (%s): ", (long long)s->run_id,
        program_invocation_short_name);
  else
    put(buf, len, &used, "opjit: %s (not recorded): ", program_invocation_short_name);
  put(buf, len, &used,
      "%s wall since its first operator call, %s (%.1f%%) in operators: %llu "
      "calls in %u signature%s%s\n",
      fmt_ns((double)s->wall_ns, a, sizeof a), fmt_ns(s->est_ns, b, sizeof b),
      pct(s->est_ns, (double)s->wall_ns), (unsigned long long)s->calls, s->sigs,
      s->sigs == 1 ? "" : "s", s->threads_own ? " (the program started threads of its own)" : "");
  if (!s->jit)
    put(buf, len, &used, "opjit: JIT off (OPJIT_MODE is not jit): nothing compiled\n");
  else if (!s->compiled && !s->placed && !s->queued && !s->failed && !s->demoted && !s->tied &&
           !s->guarded)
    put(buf, len, &used,
        "opjit: JIT: nothing compiled: %u signature%s not hot enough yet (later "
        "runs start from this profile), %u not compilable\n",
        s->cold, s->cold == 1 ? "" : "s", s->none);
  else {
    put(buf, len, &used, "opjit: JIT: %u kernel%s compiled, %u placed from the store, %u demoted",
        s->compiled, s->compiled == 1 ? "" : "s", s->placed, s->demoted);
    put_count(buf, len, &used, s->tied, "tied");
    put_count(buf, len, &used, s->guarded, "guarded");
    put_count(buf, len, &used, s->failed, "failed");
    put_count(buf, len, &used, s->queued, "still queued");
    put(buf, len, &used, "; JIT code served %.1f%% of calls, measured saving %s\n",
        pct((double)s->vcalls, (double)s->calls), fmt_ns(s->saving_ns, a, sizeof a));
  }
  for (int i = 0; i < s->ntop; i++) {
    const struct ag_summary_sig_s *t = &s->top[i];
    put(buf, len, &used, "opjit: top %d: %.1f%% %s, %llu calls", i + 1, pct(t->est_ns, s->est_ns),
        t->name, (unsigned long long)t->calls);
    if (t->speedup > 0)
      put(buf, len, &used, ", jit %.2f×", t->speedup);
    else if (*t->state && strcmp(t->state, "off") != 0) /* what no kernel serves: why */
      put(buf, len, &used, ", %s: %s", t->state, t->why);
    put(buf, len, &used, "\n");
  }
  return used;
}

void ag_summary_print(int64_t run_id, int64_t start_ns)
{
  if (!ag_opts.num[AG_OPT_SUMMARY])
    return;
  ag_summary_t s;
  ag_summary_collect(&s, run_id, start_ns);
  char buf[2048];
  size_t n = ag_summary_format(&s, buf, sizeof buf);
  for (size_t off = 0; off < n;) {
    ssize_t w = write(STDERR_FILENO, buf + off, n - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return;
    off += (size_t)w;
  }
}
