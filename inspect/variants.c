/* SPDX-License-Identifier: MIT */
/* The original/variant split of a signature's calls, its speedup and its one-word label. */
#include "variants.h"

#include <stdio.h>
#include <string.h>

#define INS_EV_NAME_(id, name) name,
const char *const ins_event_kinds[] = {ST_EVENT_KINDS(INS_EV_NAME_) NULL};
#undef INS_EV_NAME_

ins_split_t ins_split_sig_row(st_rows_t *st)
{
  return (ins_split_t){.calls = st_rows_int(st, ST_SIG_CALLS),
                       .vcalls = st_rows_int(st, ST_SIG_VCALLS),
                       .otimed = st_rows_int(st, ST_SIG_TIMED),
                       .otimed_ns = st_rows_int(st, ST_SIG_TIMED_NS),
                       .vtimed = st_rows_int(st, ST_SIG_VTIMED),
                       .vtimed_ns = st_rows_int(st, ST_SIG_VTIMED_NS),
                       .ratio = st_rows_double(st, ST_SIG_RATIO)};
}

ins_split_t ins_split_var_row(st_rows_t *st)
{
  return (ins_split_t){.calls = st_rows_int(st, ST_VAR_SIG_CALLS),
                       .vcalls = st_rows_int(st, ST_VAR_CALLS),
                       .otimed = st_rows_int(st, ST_VAR_SIG_TIMED),
                       .otimed_ns = st_rows_int(st, ST_VAR_SIG_TIMED_NS),
                       .vtimed = st_rows_int(st, ST_VAR_TIMED),
                       .vtimed_ns = st_rows_int(st, ST_VAR_TIMED_NS),
                       .ratio = st_rows_double(st, ST_VAR_RATIO)};
}

double ins_call_mean(double est, int64_t calls, int64_t timed)
{
  return timed > 0 && calls > 0 ? est / (double)calls : -1;
}

/* Whether the judge's ratio gives s's figures. */
static int by_ratio(const ins_split_t *s)
{
  return s->ratio > 0 && s->vtimed >= ST_COMPARE_MIN_TIMED;
}

double ins_split_omean(const ins_split_t *s)
{
  if (by_ratio(s))
    return (double)s->vtimed_ns / (double)s->vtimed / s->ratio;
  return s->otimed > 0 ? (double)s->otimed_ns / (double)s->otimed : -1;
}

double ins_split_vmean(const ins_split_t *s)
{
  return s->vtimed > 0 ? (double)s->vtimed_ns / (double)s->vtimed : -1;
}

double ins_split_speedup(const ins_split_t *s)
{
  if (by_ratio(s))
    return 1 / s->ratio;
  double o = ins_split_omean(s), v = ins_split_vmean(s);
  return s->otimed >= ST_COMPARE_MIN_TIMED && s->vtimed >= ST_COMPARE_MIN_TIMED && v > 0 ? o / v
                                                                                         : -1;
}

const char *ins_fmt_speedup(double speedup, char *buf, size_t len)
{
  if (speedup < 0)
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, speedup < 99.95 ? "%.1f×" : "%.0f×", speedup);
  return buf;
}

const char *ins_jit_label(const char *status, double speedup, char *buf, size_t len)
{
  char x[32];
  if (!status)
    snprintf(buf, len, "%s", "");
  else if (strcmp(status, "ready") == 0)
    snprintf(buf, len, speedup < 0 ? "jit" : "jit %s", ins_fmt_speedup(speedup, x, sizeof x));
  else if (strcmp(status, "demoted") == 0)
    snprintf(buf, len, "jit (demoted)");
  else
    snprintf(buf, len, "%s", status);
  return buf;
}

const char *ins_state_label(const char *state, const char *status, double speedup, char *buf,
                            size_t len)
{
  char x[32];
  if (!state && status)
    return ins_jit_label(status, speedup, buf, len);
  if (!state)
    snprintf(buf, len, "-");
  else if ((!strcmp(state, "serving") || !strcmp(state, "placed")) && speedup >= 0)
    snprintf(buf, len, "%s %s", state, ins_fmt_speedup(speedup, x, sizeof x));
  else
    snprintf(buf, len, "%s", state);
  return buf;
}

const char *ins_reason_text(const char *reason) { return reason ? reason : INS_REASON_UNKNOWN; }

void ins_json_add_state(cJSON *o, const char *state, const char *reason)
{
  if (state)
    cJSON_AddStringToObject(o, "state", state);
  else
    cJSON_AddNullToObject(o, "state");
  if (reason)
    cJSON_AddStringToObject(o, "reason", reason);
  else
    cJSON_AddNullToObject(o, "reason");
}
