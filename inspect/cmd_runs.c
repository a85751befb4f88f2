/* SPDX-License-Identifier: MIT */
/* `opjit runs`: the recorded runs, newest first. */
#include "cmd.h"
#include "db.h"
#include "table.h"

#include <getopt.h>
#include <stdio.h>

#define PROGRAM_WIDTH 48 /* characters of "exe args" in the table */

static int cmd_runs(int argc, char **argv)
{
  if (ins_fleet_wanted(argc, argv)) /* every machine's runs (cmd_fleet.c) */
    return ins_fleet_read(&ins_cmd_runs, argc, argv);
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"limit", required_argument, NULL, 'n'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL;
  int json = 0, rc;
  long limit = 20;
  for (int c; (c = getopt_long(argc, argv, "d:n:jh", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
    case 'n':
      if ((rc = ins_parse_long(&ins_cmd_runs, "--limit", optarg, 0, 1L << 40, &limit)))
        return rc;
      break;
    case 'j': json = 1; break;
    case 'h': return ins_help(&ins_cmd_runs);
    default: return ins_bad_option(&ins_cmd_runs, argv);
    }
  }
  if ((rc = ins_no_operands(&ins_cmd_runs, argc, argv)))
    return rc;
  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  st_rows_t *st = NULL, *any = NULL;
  cJSON *doc = NULL;
  ins_table_t *t = NULL;
  char crashes[8][512]; /* the crashed runs' kernels, printed under the table */
  int ncrashes = 0;
  rc = INS_EXIT_FAIL;
  st = ins_query(db, ST_Q_RUN_LIST);
  if (!st)
    goto out;
  st_rows_bind_int(st, 1, limit ? limit : -1);
  /* The JIT column only when a listed run has a ready variant. */
  int jit_col = 0;
  any = ins_query(db, ST_Q_RUN_LIST_HAS_READY);
  if (!any)
    goto out;
  st_rows_bind_int(any, 1, limit ? limit : -1);
  int step = st_rows_next(any);
  if (step == 1) {
    jit_col = (int)st_rows_int(any, 0);
    step = st_rows_next(any);
  }
  int failed = ins_rows_finish(db, any, step);
  any = NULL;
  if (failed)
    goto out;
  doc = cJSON_CreateObject();
  cJSON *runs = cJSON_AddArrayToObject(doc, "runs");
  cJSON_AddStringToObject(doc, "database", st_path(db));
  static const char *const head[] = {"RUN", "STARTED", "DURATION", "STATUS", "PROGRAM",
                                     "PARENT", "SIGS", "CALLS", "SAMPLES", "JIT", "WARM",
                                     "COMPILED", "STALE"};
  t = json ? NULL
           : ins_table_new_shown("rllllrrrrrlrr", head,
                                 jit_col ? UINT32_MAX : ~(1u << 9 | 1u << 10 | 1u << 11 | 1u << 12));
  while ((step = st_rows_next(st)) == 1) {
    int64_t id = st_rows_int(st, ST_LIST_ID), start = st_rows_int(st, ST_LIST_START_NS);
    int64_t wall =
        ins_run_wall_ns(start, st_rows_int(st, ST_LIST_FLUSH_NS), st_rows_int(st, ST_LIST_END_NS));
    const char *status =
        ins_run_status(st_rows_text(st, ST_LIST_STATUS), st_rows_int(st, ST_LIST_PID), start);
    int has_parent = st_rows_type(st, ST_LIST_PARENT_RUN) != ST_COL_NULL;
    int64_t ready = st_rows_int(st, ST_LIST_READY), loaded = st_rows_int(st, ST_LIST_LOADED);
    int64_t compiled = st_rows_int(st, ST_LIST_PUBLISHED),
            stale = st_rows_int(st, ST_LIST_INVALIDATED);
    int64_t warm_ns = st_rows_int(st, ST_LIST_WARM_NS);
    ins_sampling_t samp = {0};
    ins_sampling_add(&samp, st_rows_text(st, ST_LIST_SAMPLING));
    if (json) {
      cJSON *r = cJSON_CreateObject();
      cJSON_AddNumberToObject(r, "id", (double)id);
      ins_json_add_int(r, "start_ns", start);
      cJSON_AddNumberToObject(r, "duration_ns", (double)wall);
      cJSON_AddStringToObject(r, "status", status);
      cJSON_AddNumberToObject(r, "pid", (double)st_rows_int(st, ST_LIST_PID));
      cJSON_AddNumberToObject(r, "ppid", (double)st_rows_int(st, ST_LIST_PPID));
      cJSON_AddStringToObject(r, "exe", st_rows_text(st, ST_LIST_EXE));
      cJSON_AddItemToObject(r, "argv", ins_json_parse_or_string(st_rows_text(st, ST_LIST_ARGV)));
      ins_json_add_col_int(r, "parent_run", st, ST_LIST_PARENT_RUN);
      cJSON_AddNumberToObject(r, "signatures", (double)st_rows_int(st, ST_LIST_SIGS));
      cJSON_AddNumberToObject(r, "calls", (double)st_rows_int(st, ST_LIST_CALLS));
      cJSON_AddNumberToObject(r, "overflow_calls", (double)st_rows_int(st, ST_LIST_OVERFLOW));
      if (samp.sampled)
        cJSON_AddNumberToObject(r, "samples", (double)samp.samples);
      else
        cJSON_AddNullToObject(r, "samples");
      /* the sampler's summary as the run stored it: mode, rate, stacks, its cost */
      cJSON *sj = st_rows_type(st, ST_LIST_SAMPLING) == ST_COL_NULL
                      ? NULL
                      : cJSON_Parse(st_rows_text(st, ST_LIST_SAMPLING));
      cJSON_AddItemToObject(r, "sampling", cJSON_IsObject(sj) ? sj : cJSON_CreateNull());
      if (sj && !cJSON_IsObject(sj))
        cJSON_Delete(sj);
      cJSON_AddNumberToObject(r, "jit_ready", (double)ready);
      cJSON_AddNumberToObject(r, "jit_loaded", (double)loaded);
      cJSON_AddNumberToObject(r, "jit_compiled", (double)compiled);
      cJSON_AddNumberToObject(r, "jit_invalidated", (double)stale);
      ins_json_add_or_null(r, "warm_ns", warm_ns ? (double)warm_ns : -1);
      if (st_rows_type(st, ST_LIST_CRASH) == ST_COL_NULL)
        cJSON_AddNullToObject(r, "crash");
      else
        cJSON_AddStringToObject(r, "crash", st_rows_text(st, ST_LIST_CRASH));
      cJSON_AddItemToArray(runs, r);
      continue;
    }
    char sid[24], started[32], dur[32], prog[256], parent[24] = "-", sigs[24], calls[24],
        samples[24] = "", jit[24] = "", warm[48] = "", comp[24] = "", stl[24] = "";
    snprintf(sid, sizeof sid, "%lld", (long long)id);
    ins_fmt_time(start, started, sizeof started);
    ins_fmt_duration(wall, dur, sizeof dur);
    ins_program_label(st_rows_text(st, ST_LIST_EXE), st_rows_text(st, ST_LIST_ARGV), PROGRAM_WIDTH,
                      prog, sizeof prog);
    if (has_parent)
      snprintf(parent, sizeof parent, "%lld", (long long)st_rows_int(st, ST_LIST_PARENT_RUN));
    snprintf(sigs, sizeof sigs, "%lld", (long long)st_rows_int(st, ST_LIST_SIGS));
    snprintf(calls, sizeof calls, "%lld", (long long)st_rows_int(st, ST_LIST_CALLS));
    if (samp.sampled)
      snprintf(samples, sizeof samples, "%lld", (long long)samp.samples);
    if (ready)
      snprintf(jit, sizeof jit, "%lld", (long long)ready);
    if (warm_ns)
      snprintf(warm, sizeof warm, "%lld in %.1f ms", (long long)loaded, (double)warm_ns / 1e6);
    if (compiled)
      snprintf(comp, sizeof comp, "%lld", (long long)compiled);
    if (stale)
      snprintf(stl, sizeof stl, "%lld", (long long)stale);
    const char *row[] = {sid,  started, dur,  status, prog, parent, sigs,
                         calls, samples, jit, warm,   comp, stl};
    ins_table_row(t, row);
    if (st_rows_type(st, ST_LIST_CRASH) != ST_COL_NULL && ncrashes < 8)
      snprintf(crashes[ncrashes++], sizeof *crashes, "run %lld: %s", (long long)id,
               st_rows_text(st, ST_LIST_CRASH));
  }
  rc = ins_rows_finish(db, st, step);
  st = NULL;
  if (rc)
    goto out;
  if (json) {
    rc = ins_json_emit(doc);
    doc = NULL;
    goto out;
  }
  ins_table_print(t, stdout);
  for (int i = 0; i < ncrashes; i++)
    printf("%s%s\n", i ? "" : "\n", crashes[i]);
out:
  ins_table_free(t);
  cJSON_Delete(doc);
  st_rows_close(any);
  st_rows_close(st);
  st_close(db);
  return rc;
}

const ins_cmd_t ins_cmd_runs = {
    .name = "runs",
    .main = cmd_runs,
    .synopsis = "[--db PATH] [--limit N] [--json]",
    .summary = "list the recorded runs, newest first",
    .help = "STATUS is exited, exec (the process image was replaced), running, lost: marked\n"
            "running but its process is gone (killed before its final write; the run keeps its\n"
            "last periodic flush), or crashed: it died of a fault (SIGSEGV, SIGILL, SIGBUS,\n"
            "SIGFPE), as the next run on the database learnt; a crash inside a JIT kernel is\n"
            "named under the table (opjit events --kind crashed). PARENT is the run of the process it was forked from. SAMPLES\n"
            "is what the sampling profiler took (blank when the run was not sampled). JIT\n"
            "counts the signatures whose JIT variant was serving calls at the run's last write\n"
            "(shown when a listed run has one; see opjit variants). WARM is how many kernels the\n"
            "run placed from earlier runs' stored objects, and how long after its first call\n"
            "they served; COMPILED how many it compiled itself (those that\n"
            "lost their duel before publication included: opjit events); STALE how\n"
            "many stored kernels it invalidated (opjit events --kind invalidated says why).\n\n"
            "options:\n"
            "  --db PATH    the profile database\n"
            "  --limit N    at most N runs (default 20; 0: all)\n"
            "  --json       one JSON document\n"
            "  --fleet[=CONNINFO]  every machine's runs from the fleet store (OPJIT_FLEET;\n"
            "               with --limit only): opjit fleet --help\n"
            "  -h, --help   this help\n",
};
