/* SPDX-License-Identifier: MIT */
/* `opjit op`: one signature, found by its id or a unique prefix, the runs that called it (with
 * its JIT state in each and the agent's reason) and, when they were sampled, the symbols its
 * samples fell in and its hardware counters. */
#include "cmd.h"
#include "db.h"
#include "table.h"
#include "variants.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define PROGRAM_WIDTH 48
#define TOP_SYMBOLS 15 /* symbols in the text output (--json lists them all) */

/* Prints a flat JSON object as "key=value key=value". */
static void print_params(const cJSON *params)
{
  const cJSON *p;
  int first = 1;
  cJSON_ArrayForEach(p, params)
  {
    char *v = cJSON_IsString(p) ? NULL : cJSON_PrintUnformatted(p);
    printf("%s%s=%s", first ? "" : " ", p->string ? p->string : "?",
           v ? v : cJSON_GetStringValue(p));
    cJSON_free(v);
    first = 0;
  }
  if (first) /* not an object: show the text as stored */
    printf("%s", cJSON_IsString(params) ? cJSON_GetStringValue(params) : "{}");
  printf("\n");
}

/* Query q, whose ?1 is a signature id and ?2 a run (0: every run), bound; NULL when it could
 * not be prepared (printed). */
static st_rows_t *query_sig_run(st_db_t *db, enum st_query q, const char *sig, int64_t run)
{
  st_rows_t *st = ins_query(db, q);
  if (st) {
    st_rows_bind_text(st, 1, sig);
    st_rows_bind_int(st, 2, run);
  }
  return st;
}

/* The symbols sig's samples fell in (run 0: every run), most samples first, into doc's
 * "samples" and "symbols" and, for text, the top TOP_SYMBOLS into table *t. Returns 0, or
 * INS_EXIT_FAIL (printed). */
static int read_symbols(st_db_t *db, const char *sig, int64_t run, cJSON *doc, ins_table_t **t)
{
  st_rows_t *st = query_sig_run(db, ST_Q_SIG_SYMBOLS, sig, run);
  if (!st)
    return INS_EXIT_FAIL;
  static const char *const head[] = {"SAMPLES", "SHARE", "SYMBOL"};
  *t = ins_table_new("rrl", head);
  cJSON *syms = cJSON_AddArrayToObject(doc, "symbols");
  int64_t total = 0, rest = 0, n = 0;
  int rc;
  while ((rc = st_rows_next(st)) == 1) {
    const char *module = st_rows_text(st, 0), *slash = strrchr(module, '/');
    int64_t samples = st_rows_int(st, 2);
    total = st_rows_int(st, 3);
    double pct = ins_pct(samples, total);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "module", module);
    cJSON_AddStringToObject(j, "symbol", st_rows_text(st, 1));
    cJSON_AddNumberToObject(j, "samples", (double)samples);
    cJSON_AddNumberToObject(j, "pct", pct);
    cJSON_AddItemToArray(syms, j);
    if (n++ >= TOP_SYMBOLS) {
      rest += samples;
      continue;
    }
    char c0[24], c1[16], c2[1024];
    snprintf(c0, sizeof c0, "%lld", (long long)samples);
    snprintf(c1, sizeof c1, "%.1f%%", pct);
    snprintf(c2, sizeof c2, "%s`%s", slash ? slash + 1 : module, st_rows_text(st, 1));
    ins_table_row(*t, (const char *const[]){c0, c1, c2});
  }
  if (n > TOP_SYMBOLS) {
    char c0[24], c1[16], c2[64];
    snprintf(c0, sizeof c0, "%lld", (long long)rest);
    snprintf(c1, sizeof c1, "%.1f%%", ins_pct(rest, total));
    snprintf(c2, sizeof c2, "(%lld more symbols)", (long long)(n - TOP_SYMBOLS));
    ins_table_row(*t, (const char *const[]){c0, c1, c2});
  }
  cJSON_AddNumberToObject(doc, "samples", (double)total);
  return ins_rows_finish(db, st, rc);
}

/* sig's hardware counter totals (run 0: every run) into doc's "counters" and table *t; per
 * call divides by the calls of the runs that counted the event. Returns 0 or INS_EXIT_FAIL. */
static int read_counters(st_db_t *db, const char *sig, int64_t run, cJSON *doc, ins_table_t **t)
{
  st_rows_t *st = query_sig_run(db, ST_Q_SIG_COUNTERS, sig, run);
  if (!st)
    return INS_EXIT_FAIL;
  static const char *const head[] = {"EVENT", "TOTAL", "PER CALL"};
  *t = ins_table_new("lrr", head);
  cJSON *counters = cJSON_AddArrayToObject(doc, "counters");
  int rc;
  while ((rc = st_rows_next(st)) == 1) {
    int64_t value = st_rows_int(st, 1), calls = st_rows_int(st, 2);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "event", st_rows_text(st, 0));
    cJSON_AddNumberToObject(j, "value", (double)value);
    cJSON_AddNumberToObject(j, "calls", (double)calls);
    double per = calls ? (double)value / (double)calls : -1;
    ins_json_add_or_null(j, "per_call", per);
    cJSON_AddItemToArray(counters, j);
    char c1[24], c2[32] = "-";
    snprintf(c1, sizeof c1, "%lld", (long long)value);
    if (per >= 0)
      snprintf(c2, sizeof c2, per < 1000 ? "%.2f" : "%.0f", per);
    ins_table_row(*t, (const char *const[]){st_rows_text(st, 0), c1, c2});
  }
  return ins_rows_finish(db, st, rc);
}

static int cmd_op(int argc, char **argv)
{
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"run", required_argument, NULL, 'r'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL;
  int json = 0, rc;
  long run = 0;
  for (int c; (c = getopt_long(argc, argv, "d:r:jh", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
    case 'r':
      if ((rc = ins_parse_long(&ins_cmd_op, "--run", optarg, 1, INT64_MAX, &run)))
        return rc;
      break;
    case 'j': json = 1; break;
    case 'h': return ins_help(&ins_cmd_op);
    default: return ins_bad_option(&ins_cmd_op, argv);
    }
  }
  if (optind >= argc)
    return ins_usage_error(&ins_cmd_op, "which signature? give its id or a prefix (see opjit top)");
  if (optind + 1 < argc)
    return ins_usage_error(&ins_cmd_op, "unexpected argument '%s'", argv[optind + 1]);
  char prefix[17], sig[17];
  if ((rc = ins_parse_sig(&ins_cmd_op, argv[optind], prefix)))
    return rc;

  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  rc = ins_sig_resolve(db, prefix, sig);
  if (!rc && run && ins_run_exists(db, run) != 1)
    rc = INS_EXIT_FAIL;
  st_rows_t *st = NULL;
  cJSON *doc = NULL;
  ins_table_t *t = NULL, *syms = NULL, *counters = NULL;
  if (rc || !(st = ins_query(db, ST_Q_SIG_INFO)))
    goto out;
  rc = INS_EXIT_FAIL;
  st_rows_bind_text(st, 1, sig);
  if (st_rows_next(st) != 1) {
    ins_rows_finish(db, st, ST_EIO);
    st = NULL;
    goto out;
  }
  doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "sig", sig);
  cJSON_AddStringToObject(doc, "name", st_rows_text(st, 0));
  cJSON_AddStringToObject(doc, "op", st_rows_text(st, 1));
  cJSON_AddItemToObject(doc, "params", ins_json_parse_or_string(st_rows_text(st, 2)));
  st_rows_close(st);
  st = query_sig_run(db, ST_Q_SIG_RUNS, sig, run);
  if (!st)
    goto out;
  cJSON *runs = cJSON_AddArrayToObject(doc, "runs");
  static const char *const head[] = {"RUN", "STARTED", "STATUS", "CALLS", "TIMED", "MEAN",
                                     "STATE", "PROGRAM"};
  t = ins_table_new("rllrrrll", head);
  int64_t total_calls = 0, total_timed = 0;
  double total_est = 0;
  int step;
  while ((step = st_rows_next(st)) == 1) {
    int64_t run = st_rows_int(st, ST_SIGRUN_RUN), start = st_rows_int(st, ST_SIGRUN_START_NS);
    int64_t calls = st_rows_int(st, ST_SIGRUN_CALLS), timed = st_rows_int(st, ST_SIGRUN_TIMED);
    int64_t timed_ns = st_rows_int(st, ST_SIGRUN_TIMED_NS);
    /* the calls a kernel served at its mean, the rest at the original's: as top counts them */
    double est = st_rows_double(st, ST_SIGRUN_EST);
    double mean = est > 0 && calls > 0 ? est / (double)calls : -1;
    const char *status =
        ins_run_status(st_rows_text(st, ST_SIGRUN_STATUS), st_rows_int(st, ST_SIGRUN_PID), start);
    total_calls += calls, total_timed += timed;
    total_est += est;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "run", (double)run);
    cJSON_AddStringToObject(j, "status", status);
    cJSON_AddStringToObject(j, "exe", st_rows_text(st, ST_SIGRUN_EXE));
    cJSON_AddItemToObject(j, "argv", ins_json_parse_or_string(st_rows_text(st, ST_SIGRUN_ARGV)));
    cJSON_AddNumberToObject(j, "calls", (double)calls);
    cJSON_AddNumberToObject(j, "timed_calls", (double)timed);
    cJSON_AddNumberToObject(j, "timed_ns", (double)timed_ns);
    cJSON_AddNumberToObject(j, "est_ns", est);
    if (mean >= 0)
      cJSON_AddNumberToObject(j, "mean_ns", mean);
    else
      cJSON_AddNullToObject(j, "mean_ns");
    const char *state = st_rows_type(st, ST_SIGRUN_STATE) == ST_COL_NULL
                            ? NULL : st_rows_text(st, ST_SIGRUN_STATE);
    const char *reason = st_rows_type(st, ST_SIGRUN_REASON) == ST_COL_NULL
                             ? NULL : st_rows_text(st, ST_SIGRUN_REASON);
    ins_json_add_state(j, state, reason);
    cJSON_AddItemToArray(runs, j);
    char c0[24], c1[32], c3[24], c4[24], c5[32], prog[256];
    snprintf(c0, sizeof c0, "%lld", (long long)run);
    snprintf(c3, sizeof c3, "%lld", (long long)calls);
    snprintf(c4, sizeof c4, "%lld", (long long)timed);
    ins_program_label(st_rows_text(st, ST_SIGRUN_EXE), st_rows_text(st, ST_SIGRUN_ARGV),
                      PROGRAM_WIDTH, prog, sizeof prog);
    const char *row[] = {c0, ins_fmt_time(start, c1, sizeof c1), status, c3, c4,
                         ins_fmt_ns(mean, c5, sizeof c5), state ? state : "-", prog};
    ins_table_row(t, row);
    if (reason)
      ins_table_note(t, reason);
  }
  rc = ins_rows_finish(db, st, step);
  st = NULL;
  if (rc)
    goto out;
  cJSON_AddNumberToObject(doc, "total_calls", (double)total_calls);
  cJSON_AddNumberToObject(doc, "total_timed_calls", (double)total_timed);
  cJSON_AddNumberToObject(doc, "est_ns", total_est);
  if ((rc = read_symbols(db, sig, run, doc, &syms)) ||
      (rc = read_counters(db, sig, run, doc, &counters)))
    goto out;
  if (json) {
    rc = ins_json_emit(doc);
    doc = NULL;
    goto out;
  }
  char est_s[32], mean_s[32];
  printf("sig     %s\nname    %s\nop      %s\nparams  ", sig,
         cJSON_GetStringValue(cJSON_GetObjectItem(doc, "name")),
         cJSON_GetStringValue(cJSON_GetObjectItem(doc, "op")));
  print_params(cJSON_GetObjectItem(doc, "params"));
  printf("\n");
  ins_table_print(t, stdout);
  printf("\n%lld calls in %d runs; estimated time %s, mean %s per call\n", (long long)total_calls,
         cJSON_GetArraySize(runs), ins_fmt_ns(total_est, est_s, sizeof est_s),
         ins_fmt_ns(total_calls && total_est > 0 ? total_est / (double)total_calls : -1, mean_s,
                    sizeof mean_s));
  int64_t samples = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "samples"));
  if (samples) {
    printf("\nwhere the samples fell (%lld samples):\n", (long long)samples);
    ins_table_print(syms, stdout);
  }
  if (cJSON_GetArraySize(cJSON_GetObjectItem(doc, "counters"))) {
    printf("\nhardware counters:\n");
    ins_table_print(counters, stdout);
  }
out:
  ins_table_free(counters);
  ins_table_free(syms);
  ins_table_free(t);
  cJSON_Delete(doc);
  st_rows_close(st);
  st_close(db);
  return rc;
}

const ins_cmd_t ins_cmd_op = {
    .name = "op",
    .main = cmd_op,
    .synopsis = "[--db PATH] [--run RUN] [--json] SIG",
    .summary = "show one signature, the runs that called it and where its samples fell",
    .help = "SIG is a signature id (16 hex digits, as opjit top prints it) or any prefix that\n"
            "only one signature has; an ambiguous prefix lists the candidates. Each run that\n"
            "called it shows its JIT state there (as opjit top's STATE) and, under it, the\n"
            "reason the agent recorded (\"-\": a run before reasons were kept). For sampled runs,\n"
            "the symbols (module`symbol) the signature's samples fell in, with their share of\n"
            "its samples (the top 15; --json lists all), and the hardware counters the sampler\n"
            "read, in total and per call. Both are summed over the runs, or only RUN's.\n\n"
            "options:\n"
            "  --db PATH    the profile database\n"
            "  --run RUN    only this run\n"
            "  --json       one JSON document\n"
            "  -h, --help   this help\n",
};
