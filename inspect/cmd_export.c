/* SPDX-License-Identifier: MIT */
/* `opjit export`: every run (or one) with its program, machine, options, argv, signatures,
 * what the sampler recorded (summary, PC histogram, folded stacks, counters), what the JIT
 * did (variants, events) and the run's series over time, as one JSON document on stdout. */
#include "cmd.h"
#include "db.h"
#include "pprof.h"
#include "table.h"
#include "variants.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends run's signatures to array out; returns the last st_rows_next (0: all read). */
static int add_signatures(st_rows_t *st, int64_t run, cJSON *out)
{
  st_rows_rewind(st);
  st_rows_bind_int(st, 1, run);
  int rc;
  while ((rc = st_rows_next(st)) == 1) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "sig", st_rows_text(st, 0));
    cJSON_AddStringToObject(s, "op", st_rows_text(st, 1));
    cJSON_AddStringToObject(s, "name", st_rows_text(st, 2));
    cJSON_AddItemToObject(s, "params", ins_json_parse_or_string(st_rows_text(st, 3)));
    cJSON_AddNumberToObject(s, "calls", (double)st_rows_int(st, 4));
    cJSON_AddNumberToObject(s, "timed_calls", (double)st_rows_int(st, 5));
    cJSON_AddNumberToObject(s, "timed_ns", (double)st_rows_int(st, 6));
    ins_json_add_state(s, st_rows_type(st, 7) == ST_COL_NULL ? NULL : st_rows_text(st, 7),
                       st_rows_type(st, 8) == ST_COL_NULL ? NULL : st_rows_text(st, 8));
    cJSON_AddItemToArray(out, s);
  }
  return rc;
}

/* Appends run's rows of st (bound to the run as ?1) to array out as objects whose members are
 * named by keys, one per column: text, integer or null as stored. Returns the last
 * st_rows_next (0: all read). */
static int add_rows(st_rows_t *st, int64_t run, const char *const *keys, cJSON *out)
{
  st_rows_rewind(st);
  st_rows_bind_int(st, 1, run);
  int rc;
  while ((rc = st_rows_next(st)) == 1) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; keys[i]; i++) {
      if (st_rows_type(st, i) == ST_COL_INT)
        cJSON_AddNumberToObject(o, keys[i], (double)st_rows_int(st, i));
      else if (st_rows_type(st, i) == ST_COL_NULL)
        cJSON_AddNullToObject(o, keys[i]);
      else
        cJSON_AddStringToObject(o, keys[i], st_rows_text(st, i));
    }
    cJSON_AddItemToArray(out, o);
  }
  return rc;
}

/* A series blob (column col of st's row) as an array of numbers. */
static cJSON *series_array(st_rows_t *st, int col)
{
  size_t len;
  const void *blob = st_rows_blob(st, col, &len);
  uint64_t *v = ins_xmalloc((len ? len : 1) * sizeof *v);
  size_t n = st_series_decode(blob, len, v, len);
  cJSON *a = cJSON_CreateArray();
  for (size_t k = 0; k < n; k++)
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[k]));
  free(v);
  return a;
}

/* Adds run's series over time to r as "series": its interval, its first interval's start
 * since the run's, and per row (a signature, the rest of them, or outside operators, as
 * ST_SERIES_ROW says) the calls, variant calls and samples of each interval; null for a run
 * without one. Returns the last st_rows_next. */
static int add_series(st_rows_t *st, int64_t run, cJSON *r)
{
  st_rows_rewind(st);
  st_rows_bind_int(st, 1, run);
  cJSON *series = NULL, *rows = NULL;
  int rc;
  while ((rc = st_rows_next(st)) == 1) {
    if (!series) {
      series = cJSON_AddObjectToObject(r, "series");
      cJSON_AddNumberToObject(series, "interval_ns",
                              (double)st_rows_int(st, ST_SERIES_INTERVAL_NS));
      cJSON_AddNumberToObject(series, "offset_ns", (double)st_rows_int(st, ST_SERIES_OFFSET_NS));
      rows = cJSON_AddArrayToObject(series, "rows");
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "row", st_rows_text(st, ST_SERIES_ROW));
    if (st_rows_type(st, ST_SERIES_SIG) == ST_COL_NULL)
      cJSON_AddNullToObject(o, "sig");
    else
      cJSON_AddStringToObject(o, "sig", st_rows_text(st, ST_SERIES_SIG));
    cJSON_AddItemToObject(o, "calls", series_array(st, ST_SERIES_CALLS));
    cJSON_AddItemToObject(o, "vcalls", series_array(st, ST_SERIES_VCALLS));
    cJSON_AddItemToObject(o, "samples", series_array(st, ST_SERIES_SAMPLES));
    cJSON_AddItemToArray(rows, o);
  }
  if (!series)
    cJSON_AddNullToObject(r, "series");
  return rc;
}

static int cmd_export(int argc, char **argv)
{
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"pprof", no_argument, NULL, 'p'},
                                           {"output", required_argument, NULL, 'o'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL, *output = NULL;
  int json = 0, pprof = 0, rc;
  long run = 0;
  for (int c; (c = getopt_long(argc, argv, "d:jo:h", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
    case 'j': json = 1; break;
    case 'p': pprof = 1; break;
    case 'o': output = optarg; break;
    case 'h': return ins_help(&ins_cmd_export);
    default: return ins_bad_option(&ins_cmd_export, argv);
    }
  }
  if (json == pprof)
    return ins_usage_error(&ins_cmd_export, "choose the format: --json or --pprof");
  if (pprof != (output != NULL))
    return ins_usage_error(&ins_cmd_export, "--pprof writes to -o FILE (and --json to stdout)");
  if ((rc = ins_parse_run(&ins_cmd_export, argc, argv, 0, &run)))
    return rc;
  if (pprof)
    return ins_pprof_export(dbopt, run, output);

  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  int version = 0;
  st_rows_t *runs_st = NULL, *sigs_st = NULL, *pcs_st = NULL, *stacks_st = NULL,
            *counters_st = NULL, *variants_st = NULL, *events_st = NULL, *series_st = NULL;
  /* sig is null for what fell outside any operator (the program's own time). */
  static const char *const pc_keys[] = {"sig", "module", "symbol", "samples", NULL};
  static const char *const stack_keys[] = {"sig", "stack", "samples", NULL};
  static const char *const counter_keys[] = {"sig", "event", "value", NULL};
  static const char *const variant_keys[] = {"sig", "status", "generator", "llvm", "cpu",
                                             "compile_ns", "calls", "timed_calls", "timed_ns",
                                             NULL};
  static const char *const event_keys[] = {"sig", "time_ns", "kind", "detail", NULL};
  cJSON *doc = NULL;
  rc = INS_EXIT_FAIL;
  if ((run && ins_run_exists(db, run) != 1) || st_schema_version(db, &version) ||
      !(runs_st = ins_query(db, ST_Q_EXPORT_RUNS)) ||
      !(sigs_st = ins_query(db, ST_Q_EXPORT_SIGS)) || !(pcs_st = ins_query(db, ST_Q_EXPORT_PCS)) ||
      !(stacks_st = ins_query(db, ST_Q_EXPORT_STACKS)) ||
      !(counters_st = ins_query(db, ST_Q_EXPORT_COUNTERS)) ||
      !(variants_st = ins_query(db, ST_Q_EXPORT_VARIANTS)) ||
      !(events_st = ins_query(db, ST_Q_EXPORT_EVENTS)) ||
      !(series_st = ins_query(db, ST_Q_SERIES)))
    goto out;
  doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "opjit_version", OPJIT_VERSION);
  cJSON_AddNumberToObject(doc, "schema_version", version);
  cJSON_AddStringToObject(doc, "database", st_path(db));
  cJSON *runs = cJSON_AddArrayToObject(doc, "runs");
  st_rows_bind_int(runs_st, 1, run);
  int step = 0;
  while ((step = st_rows_next(runs_st)) == 1) {
    int64_t id = st_rows_int(runs_st, ST_EXPORT_ID);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddItemToArray(runs, r);
    cJSON_AddNumberToObject(r, "id", (double)id);
    cJSON_AddNumberToObject(r, "pid", (double)st_rows_int(runs_st, ST_EXPORT_PID));
    cJSON_AddNumberToObject(r, "ppid", (double)st_rows_int(runs_st, ST_EXPORT_PPID));
    ins_json_add_col_int(r, "parent_run", runs_st, ST_EXPORT_PARENT_RUN);
    const char *status = st_rows_text(runs_st, ST_EXPORT_STATUS);
    cJSON_AddStringToObject(r, "status", status);
    const char *now = ins_run_status(status, st_rows_int(runs_st, ST_EXPORT_PID),
                                     st_rows_int(runs_st, ST_EXPORT_START_NS));
    cJSON_AddBoolToObject(r, "lost", strcmp(now, "lost") == 0);
    ins_json_add_col_int(r, "start_ns", runs_st, ST_EXPORT_START_NS);
    ins_json_add_col_int(r, "flush_ns", runs_st, ST_EXPORT_FLUSH_NS);
    ins_json_add_col_int(r, "end_ns", runs_st, ST_EXPORT_END_NS);
    cJSON_AddNumberToObject(r, "overflow_calls", (double)st_rows_int(runs_st, ST_EXPORT_OVERFLOW));
    cJSON_AddStringToObject(r, "agent_version", st_rows_text(runs_st, ST_EXPORT_AGENT_VERSION));
    cJSON_AddItemToObject(r, "argv",
                          ins_json_parse_or_string(st_rows_text(runs_st, ST_EXPORT_ARGV)));
    cJSON_AddItemToObject(r, "options",
                          ins_json_parse_or_string(st_rows_text(runs_st, ST_EXPORT_OPTIONS)));
    cJSON *p = cJSON_AddObjectToObject(r, "program");
    cJSON_AddStringToObject(p, "exe", st_rows_text(runs_st, ST_EXPORT_EXE));
    cJSON_AddStringToObject(p, "build_id", st_rows_text(runs_st, ST_EXPORT_BUILD_ID));
    cJSON *m = cJSON_AddObjectToObject(r, "machine");
    cJSON_AddStringToObject(m, "cpu_model", st_rows_text(runs_st, ST_EXPORT_CPU_MODEL));
    cJSON_AddStringToObject(m, "cpu_flags", st_rows_text(runs_st, ST_EXPORT_CPU_FLAGS));
    cJSON_AddNumberToObject(m, "ncpu", (double)st_rows_int(runs_st, ST_EXPORT_NCPU));
    if (st_rows_type(runs_st, ST_EXPORT_SAMPLING) == ST_COL_NULL)
      cJSON_AddNullToObject(r, "sampling");
    else
      cJSON_AddItemToObject(r, "sampling",
                            ins_json_parse_or_string(st_rows_text(runs_st, ST_EXPORT_SAMPLING)));
    int srk = add_signatures(sigs_st, id, cJSON_AddArrayToObject(r, "signatures"));
    if (srk == 0)
      srk = add_rows(pcs_st, id, pc_keys, cJSON_AddArrayToObject(r, "pcs"));
    if (srk == 0)
      srk = add_rows(stacks_st, id, stack_keys, cJSON_AddArrayToObject(r, "stacks"));
    if (srk == 0)
      srk = add_rows(counters_st, id, counter_keys, cJSON_AddArrayToObject(r, "counters"));
    if (srk == 0)
      srk = add_rows(variants_st, id, variant_keys, cJSON_AddArrayToObject(r, "variants"));
    if (srk == 0)
      srk = add_rows(events_st, id, event_keys, cJSON_AddArrayToObject(r, "events"));
    if (srk == 0)
      srk = add_series(series_st, id, r);
    if (srk != 0) {
      step = srk;
      break;
    }
  }
  if (step != 0) {
    ins_db_failed(db, "read");
    goto out;
  }
  rc = ins_json_emit(doc);
  doc = NULL;
out:
  cJSON_Delete(doc);
  st_rows_close(series_st);
  st_rows_close(events_st);
  st_rows_close(variants_st);
  st_rows_close(counters_st);
  st_rows_close(stacks_st);
  st_rows_close(pcs_st);
  st_rows_close(sigs_st);
  st_rows_close(runs_st);
  st_close(db);
  return rc;
}

const ins_cmd_t ins_cmd_export = {
    .name = "export",
    .main = cmd_export,
    .synopsis = "--json [--db PATH] [RUN] | --pprof [--db PATH] [RUN] -o FILE",
    .summary = "dump runs and their signatures as JSON, or a run's samples as pprof",
    .help = "Writes one JSON document to stdout: every run (or only RUN) with its program,\n"
            "machine, argv, options and signatures (parameters and counts). \"lost\" is true\n"
            "for a run marked running whose process is gone. A sampled run adds its sampling\n"
            "summary, its PC histogram by symbol (pcs), folded stacks and hardware counter\n"
            "totals, each row naming its signature (null: outside any operator). The JIT's\n"
            "variants (status, compiler, compile time, calls served and timed) and events\n"
            "(CLOCK_REALTIME time_ns, kind, detail) follow, by signature; then the run's\n"
            "series over time (null before schema 8): interval_ns, offset_ns (the first\n"
            "interval's start since the run's) and rows (row: sig, rest for the signatures\n"
            "past the agent's first 256, outside for outside operators) with the calls,\n"
            "vcalls (served by a JIT variant) and samples of each interval.\n\n"
            "--pprof writes RUN's sampled stacks (default: the newest run with some) to FILE in\n"
            "Go's pprof format (gzip'ed profile.proto): the samples opjit flame shows, as\n"
            "samples/count and cpu/nanoseconds, operator samples labelled with their signature\n"
            "and operator name:\n"
            "    opjit export --pprof -o run.pb.gz; go tool pprof -top run.pb.gz\n\n"
            "options:\n"
            "  --json       JSON on stdout\n"
            "  --pprof      pprof, to -o FILE\n"
            "  -o FILE      where --pprof writes (--output FILE)\n"
            "  --db PATH    the profile database\n"
            "  -h, --help   this help\n",
};
