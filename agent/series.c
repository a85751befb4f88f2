/* SPDX-License-Identifier: MIT */
/* The run's series over time (series.h): differences of running totals binned in at most
 * AG_SERIES_MAX intervals. Entry point: ag_series_tick().
 *
 * Coalescing: interval k covers [k * iv, (k + 1) * iv). When a tick falls at or past
 * AG_SERIES_MAX * iv, intervals 2k and 2k + 1 merge into k and iv doubles, until it fits:
 * every interval keeps covering whole ticks, and the totals over the run never change. */
#include "series.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct ag_series_s {
  uint64_t interval_ns;
  uint32_t count; /* intervals holding data */
  uint32_t nrows, caprows, nsigs;
  ag_series_row_t **rows; /* per entry, NULL until it has a call (or when it shares rest) */
  ag_series_row_t *rest;  /* the signatures called after AG_SERIES_SIGS others had a row */
  uint64_t (*last)[3];    /* per entry: calls, vcalls, samples at the last tick */
  ag_series_row_t outside;
  uint64_t last_outside;
};

ag_series_t *ag_series_new(uint64_t interval_ns)
{
  ag_series_t *s = calloc(1, sizeof *s);
  if (s)
    s->interval_ns = interval_ns ? interval_ns : 1;
  return s;
}

void ag_series_free(ag_series_t *s)
{
  if (!s)
    return;
  for (uint32_t i = 0; i < s->nrows; i++)
    free(s->rows[i]);
  free(s->rows);
  free(s->last);
  free(s->rest);
  free(s);
}

/* Merges the intervals of one array in pairs. */
static void halve(uint64_t *v)
{
  for (uint32_t k = 0; k < AG_SERIES_MAX / 2; k++)
    v[k] = v[2 * k] + v[2 * k + 1];
  memset(v + AG_SERIES_MAX / 2, 0, AG_SERIES_MAX / 2 * sizeof *v);
}

static void coalesce(ag_series_t *s)
{
  for (uint32_t i = 0; i < s->nrows; i++)
    if (s->rows[i])
      halve(s->rows[i]->calls), halve(s->rows[i]->vcalls), halve(s->rows[i]->samples);
  if (s->rest)
    halve(s->rest->calls), halve(s->rest->vcalls), halve(s->rest->samples);
  halve(s->outside.calls), halve(s->outside.vcalls), halve(s->outside.samples);
  s->interval_ns *= 2;
  s->count = (s->count + 1) / 2;
}

/* Makes room for entries [0, n); -ENOMEM when it cannot. */
static int grow(ag_series_t *s, uint32_t n)
{
  if (n <= s->caprows)
    return 0;
  uint32_t cap = s->caprows ? s->caprows : 64;
  while (cap < n)
    cap *= 2;
  ag_series_row_t **rows = realloc(s->rows, cap * sizeof *rows);
  if (!rows)
    return -ENOMEM;
  s->rows = rows;
  uint64_t(*last)[3] = realloc(s->last, cap * sizeof *last);
  if (!last)
    return -ENOMEM;
  s->last = last;
  memset(rows + s->caprows, 0, (cap - s->caprows) * sizeof *rows);
  memset(last + s->caprows, 0, (cap - s->caprows) * sizeof *last);
  s->caprows = cap;
  return 0;
}

/* What total grew by since *last (all of it when it shrank), and *last = total. */
static uint64_t delta(uint64_t *last, uint64_t total)
{
  uint64_t d = total >= *last ? total - *last : total;
  *last = total;
  return d;
}

int ag_series_tick(ag_series_t *s, uint64_t t_ns, uint32_t n, const uint64_t *calls,
                   const uint64_t *vcalls, const uint64_t *samples, uint64_t outside)
{
  int rc = grow(s, n);
  if (rc)
    n = s->caprows;
  if (n > s->nrows)
    s->nrows = n;
  while (t_ns / s->interval_ns >= AG_SERIES_MAX)
    coalesce(s);
  uint32_t k = (uint32_t)(t_ns / s->interval_ns);
  if (k + 1 > s->count)
    s->count = k + 1;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t dc = delta(&s->last[i][0], calls[i]);
    uint64_t dv = delta(&s->last[i][1], vcalls ? vcalls[i] : 0);
    uint64_t ds = delta(&s->last[i][2], samples ? samples[i] : 0);
    if (!s->rows[i] && !dc && !ds)
      continue;
    ag_series_row_t *r = s->rows[i];
    if (!r && s->nsigs < AG_SERIES_SIGS && (r = s->rows[i] = calloc(1, sizeof *r)))
      s->nsigs++;
    else if (!r && !(r = s->rest ? s->rest : (s->rest = calloc(1, sizeof *r)))) {
      rc = -ENOMEM;
      continue;
    }
    r->calls[k] += dc;
    r->vcalls[k] += dv;
    r->samples[k] += ds;
  }
  s->outside.samples[k] += delta(&s->last_outside, outside);
  return rc;
}

uint64_t ag_series_interval(const ag_series_t *s) { return s->interval_ns; }

uint32_t ag_series_count(const ag_series_t *s) { return s->count; }

const ag_series_row_t *ag_series_row(const ag_series_t *s, uint32_t index)
{
  return index < s->nrows ? s->rows[index] : NULL;
}

const ag_series_row_t *ag_series_rest(const ag_series_t *s) { return s->rest; }

const ag_series_row_t *ag_series_outside(const ag_series_t *s) { return &s->outside; }

uint32_t ag_series_rows(const ag_series_t *s) { return s->nrows; }
