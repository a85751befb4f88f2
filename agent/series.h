/* SPDX-License-Identifier: MIT */
/* A run's series over time: per signature and per interval, its calls, the calls its JIT
 * variant served and the CPU samples attributed to it, plus the samples outside operators. The
 * writer thread feeds it the running totals it already reads at each tick; the series keeps the
 * differences. Bounded whatever the run's length: at most AG_SERIES_MAX intervals; when the
 * next tick falls past the last one, adjacent intervals merge in pairs and the interval
 * doubles. Only signatures that had a call get a row, the first AG_SERIES_SIGS of them; the
 * signatures called after those share one more row, the rest (so a series takes at most
 * (AG_SERIES_SIGS + 2) rows of 6 KB, whatever the signature table's size). One thread uses a
 * series at a time. */
#ifndef OPJIT_AGENT_SERIES_H
#define OPJIT_AGENT_SERIES_H

#include <stddef.h>
#include <stdint.h>

#define AG_SERIES_MAX 256  /* intervals kept; an even number (merged in pairs) */
#define AG_SERIES_SIGS 256 /* signatures given a row of their own */

typedef struct ag_series_s ag_series_t;

/* One row: a signature (index in the signature table), or the samples outside operators. */
typedef struct ag_series_row_s {
  uint64_t calls[AG_SERIES_MAX];   /* its calls in each interval */
  uint64_t vcalls[AG_SERIES_MAX];  /* of which its JIT variant served */
  uint64_t samples[AG_SERIES_MAX]; /* CPU samples attributed to it */
} ag_series_row_t;

/* A series whose first interval lasts interval_ns (> 0) from time 0; NULL when out of memory. */
ag_series_t *ag_series_new(uint64_t interval_ns);
void ag_series_free(ag_series_t *s);

/* Records the running totals at t_ns (since the series' time 0, not decreasing): for entries
 * [0, n), calls[i] and vcalls[i] (vcalls may be NULL: none) and samples[i] (NULL: none), and
 * outside, the samples outside operators. What each grew by since the last tick goes to the
 * interval holding t_ns. Totals that shrink (a fork child's reset) restart from them. Returns
 * 0, or -ENOMEM (a new signature's row could not be made: it is left out, totals stay right). */
int ag_series_tick(ag_series_t *s, uint64_t t_ns, uint32_t n, const uint64_t *calls,
                   const uint64_t *vcalls, const uint64_t *samples, uint64_t outside);

/* The interval's length now, and how many intervals hold data ([0, count) from time 0). */
uint64_t ag_series_interval(const ag_series_t *s);
uint32_t ag_series_count(const ag_series_t *s);
/* Entry index's row, or NULL when it has had no call or shares the rest; the rest (NULL while
 * every signature called has a row of its own); the outside-operators row (never NULL). */
const ag_series_row_t *ag_series_row(const ag_series_t *s, uint32_t index);
const ag_series_row_t *ag_series_rest(const ag_series_t *s);
const ag_series_row_t *ag_series_outside(const ag_series_t *s);
/* Entries [0, rows) may have a row. */
uint32_t ag_series_rows(const ag_series_t *s);

#endif
