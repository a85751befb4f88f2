/* SPDX-License-Identifier: MIT */
/* What the JIT recorded, as the readers show it. Since schema 4 a signature's calls are split:
 * run_sigs counts every call but times only the original library's, variants counts and times
 * the calls its JIT variant served. Means are ns per timed call, -1 when nothing was timed. */
#ifndef OPJIT_INSPECT_VARIANTS_H
#define OPJIT_INSPECT_VARIANTS_H

#include "db.h"

#include <stddef.h>
#include <stdint.h>

/* A signature's calls and timings, original and variant (one run, or summed over runs). */
typedef struct ins_split_s {
  int64_t calls;             /* every call */
  int64_t vcalls;            /* served by the variant */
  int64_t otimed, otimed_ns; /* the original library's timed calls */
  int64_t vtimed, vtimed_ns; /* the variant's timed calls */
  double ratio;              /* the judge's median ratio variant / original (ST_SIG_RATIO),
                                0 when it has none */
} ins_split_t;

/* The split in the current row of a query with the signature columns (ST_SIG_*, as
 * ST_Q_SIG_TOTALS) or with the variant columns (ST_VAR_*, as the variants query). */
ins_split_t ins_split_sig_row(st_rows_t *st);
ins_split_t ins_split_var_row(st_rows_t *st);

/* A signature's mean per call, its estimated time est over its calls: -1 when none of its calls
 * (timed: original and variant timings) was timed. */
double ins_call_mean(double est, int64_t calls, int64_t timed);
/* The original's mean: where the judge has a ratio and the variant was timed, the variant's
 * mean / that ratio (what the original costs called warm, as in a plain run: query.h,
 * ST_SIG_RATIO), else the mean of its timed calls. */
double ins_split_omean(const ins_split_t *s);
double ins_split_vmean(const ins_split_t *s);
/* 1 / the judge's ratio where it has one (and the variant was timed ST_COMPARE_MIN_TIMED
 * times), else original mean / variant mean; -1 unless each side has ST_COMPARE_MIN_TIMED
 * timed calls. */
double ins_split_speedup(const ins_split_t *s);

/* The JIT column of `top`: "jit 2.4×" (ready; "jit" before it was timed), "jit (demoted)",
 * "failed", "queued"; "" for no status (NULL). Writes into buf and returns it. */
const char *ins_jit_label(const char *status, double speedup, char *buf, size_t len);
/* The STATE column of `top` and `variants`: the JIT state the agent recorded (ST_JIT_STATES),
 * with the speedup while a kernel serves ("serving 2.4×"); for a run recorded before states
 * (state NULL), the variant's status as ins_jit_label puts it, or "-" without one. Writes into
 * buf and returns it. */
const char *ins_state_label(const char *state, const char *status, double speedup, char *buf,
                            size_t len);
/* The reason the agent recorded with a state, or INS_REASON_UNKNOWN when it recorded none. */
const char *ins_reason_text(const char *reason);
#define INS_REASON_UNKNOWN "unknown (a run recorded before opjit kept reasons)"
/* Adds "state" and "reason" to a signature's JSON object o: the recorded text, or null. */
void ins_json_add_state(cJSON *o, const char *state, const char *reason);

/* "2.4×", or "-" when speedup < 0. */
const char *ins_fmt_speedup(double speedup, char *buf, size_t len);

/* The event kinds the agent records (NULL-terminated), for --kind. */
extern const char *const ins_event_kinds[];

/* What to say when no run has a JIT variant or event. */
#define INS_NO_JIT_YET                                                                        \
  "signatures are compiled once hot (OPJIT_HOT_CALLS, OPJIT_HOT_PAYBACK; OPJIT_MODE=jit)"

#endif
