/* SPDX-License-Identifier: MIT */
/* `opjit export`: every run (or one) with its program, machine, options, argv, signatures,
 * what the sampler recorded (summary, PC histogram, folded stacks, counters) and what the JIT
 * did (variants, events), as one JSON document on stdout. */
#include "cmd.h"
#include "db.h"
#include "table.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

/* Appends run's signatures to array out; returns the final step code. */
static int add_signatures(sqlite3_stmt *st, int64_t run, cJSON *out)
{
  sqlite3_reset(st);
  sqlite3_bind_int64(st, 1, run);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "sig", ins_col_text(st, 0));
    cJSON_AddStringToObject(s, "op", ins_col_text(st, 1));
    cJSON_AddStringToObject(s, "name", ins_col_text(st, 2));
    cJSON_AddItemToObject(s, "params", ins_json_parse_or_string(ins_col_text(st, 3)));
    cJSON_AddNumberToObject(s, "calls", (double)sqlite3_column_int64(st, 4));
    cJSON_AddNumberToObject(s, "timed_calls", (double)sqlite3_column_int64(st, 5));
    cJSON_AddNumberToObject(s, "timed_ns", (double)sqlite3_column_int64(st, 6));
    cJSON_AddItemToArray(out, s);
  }
  return rc;
}

/* Appends run's rows of st (bound to the run as ?1) to array out as objects whose members are
 * named by keys, one per column: text, integer or null as stored. Returns the final step
 * code. */
static int add_rows(sqlite3_stmt *st, int64_t run, const char *const *keys, cJSON *out)
{
  sqlite3_reset(st);
  sqlite3_bind_int64(st, 1, run);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; keys[i]; i++) {
      if (sqlite3_column_type(st, i) == SQLITE_INTEGER)
        cJSON_AddNumberToObject(o, keys[i], (double)sqlite3_column_int64(st, i));
      else if (sqlite3_column_type(st, i) == SQLITE_NULL)
        cJSON_AddNullToObject(o, keys[i]);
      else
        cJSON_AddStringToObject(o, keys[i], ins_col_text(st, i));
    }
    cJSON_AddItemToArray(out, o);
  }
  return rc;
}

static int cmd_export(int argc, char **argv)
{
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL;
  int json = 0, rc;
  long run = 0;
  for (int c; (c = getopt_long(argc, argv, "d:jh", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
    case 'j': json = 1; break;
    case 'h': return ins_help(&ins_cmd_export);
    default: return ins_bad_option(&ins_cmd_export, argv);
    }
  }
  if (!json)
    return ins_usage_error(&ins_cmd_export, "choose the format: --json");
  if ((rc = ins_parse_run(&ins_cmd_export, argc, argv, 0, &run)))
    return rc;

  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  int version = 0;
  sqlite3_stmt *runs_st = NULL, *sigs_st = NULL, *pcs_st = NULL, *stacks_st = NULL,
               *counters_st = NULL, *variants_st = NULL, *events_st = NULL;
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
      !(runs_st = ins_db_prepare(
            db, "SELECT r.id, r.pid, r.ppid, r.parent_run, r.status, r.start_ns, r.flush_ns,"
                " r.end_ns, r.overflow_calls, r.agent_version, r.argv, r.options,"
                " p.exe, p.build_id, m.cpu_model, m.cpu_flags, m.ncpu, r.sampling"
                " FROM runs r JOIN programs p ON p.id = r.program_id"
                " JOIN machines m ON m.id = r.machine_id"
                " WHERE ?1 = 0 OR r.id = ?1 ORDER BY r.id")) ||
      !(sigs_st = ins_db_prepare(
            db, "SELECT s.sig, s.op, s.name, s.params, rs.calls, rs.timed_calls, rs.timed_ns"
                " FROM run_sigs rs JOIN signatures s ON s.id = rs.sig_id WHERE rs.run_id = ?"
                " ORDER BY rs.calls DESC, s.sig")) ||
      !(pcs_st = ins_db_prepare(
            db, "SELECT s.sig, y.module, y.name, p.samples FROM run_pcs p"
                " JOIN symbols y ON y.id = p.symbol_id LEFT JOIN signatures s ON s.id = p.sig_id"
                " WHERE p.run_id = ? ORDER BY p.sig_id, p.samples DESC, y.module, y.name")) ||
      !(stacks_st = ins_db_prepare(
            db, "SELECT s.sig, k.stack, k.samples FROM run_stacks k"
                " LEFT JOIN signatures s ON s.id = k.sig_id WHERE k.run_id = ?"
                " ORDER BY k.sig_id, k.samples DESC, k.stack")) ||
      !(counters_st = ins_db_prepare(
            db, "SELECT s.sig, c.event, c.value FROM run_counters c"
                " LEFT JOIN signatures s ON s.id = c.sig_id WHERE c.run_id = ?"
                " ORDER BY c.sig_id, c.event")) ||
      !(variants_st = ins_db_prepare(
            db, "SELECT s.sig, v.status, v.generator, v.llvm, v.cpu, v.compile_ns, v.calls,"
                " v.timed_calls, v.timed_ns FROM variants v JOIN signatures s ON s.id = v.sig_id"
                " WHERE v.run_id = ? ORDER BY v.calls DESC, s.sig")) ||
      !(events_st = ins_db_prepare(
            db, "SELECT s.sig, e.time_ns, e.kind, e.detail FROM events e"
                " JOIN signatures s ON s.id = e.sig_id WHERE e.run_id = ?"
                " ORDER BY e.time_ns, e.id")))
    goto out;
  doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "opjit_version", OPJIT_VERSION);
  cJSON_AddNumberToObject(doc, "schema_version", version);
  cJSON_AddStringToObject(doc, "database", sqlite3_db_filename(st_sqlite(db), "main"));
  cJSON *runs = cJSON_AddArrayToObject(doc, "runs");
  sqlite3_bind_int64(runs_st, 1, run);
  int step = SQLITE_DONE;
  while ((step = sqlite3_step(runs_st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(runs_st, 0);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddItemToArray(runs, r);
    cJSON_AddNumberToObject(r, "id", (double)id);
    cJSON_AddNumberToObject(r, "pid", (double)sqlite3_column_int64(runs_st, 1));
    cJSON_AddNumberToObject(r, "ppid", (double)sqlite3_column_int64(runs_st, 2));
    ins_json_add_col_int(r, "parent_run", runs_st, 3);
    const char *status = ins_col_text(runs_st, 4);
    cJSON_AddStringToObject(r, "status", status);
    cJSON_AddBoolToObject(r, "lost", strcmp(
                          ins_run_status(status, sqlite3_column_int64(runs_st, 1),
                                         sqlite3_column_int64(runs_st, 5)), "lost") == 0);
    ins_json_add_col_int(r, "start_ns", runs_st, 5);
    ins_json_add_col_int(r, "flush_ns", runs_st, 6);
    ins_json_add_col_int(r, "end_ns", runs_st, 7);
    cJSON_AddNumberToObject(r, "overflow_calls", (double)sqlite3_column_int64(runs_st, 8));
    cJSON_AddStringToObject(r, "agent_version", ins_col_text(runs_st, 9));
    cJSON_AddItemToObject(r, "argv", ins_json_parse_or_string(ins_col_text(runs_st, 10)));
    cJSON_AddItemToObject(r, "options", ins_json_parse_or_string(ins_col_text(runs_st, 11)));
    cJSON *p = cJSON_AddObjectToObject(r, "program");
    cJSON_AddStringToObject(p, "exe", ins_col_text(runs_st, 12));
    cJSON_AddStringToObject(p, "build_id", ins_col_text(runs_st, 13));
    cJSON *m = cJSON_AddObjectToObject(r, "machine");
    cJSON_AddStringToObject(m, "cpu_model", ins_col_text(runs_st, 14));
    cJSON_AddStringToObject(m, "cpu_flags", ins_col_text(runs_st, 15));
    cJSON_AddNumberToObject(m, "ncpu", (double)sqlite3_column_int64(runs_st, 16));
    if (sqlite3_column_type(runs_st, 17) == SQLITE_NULL)
      cJSON_AddNullToObject(r, "sampling");
    else
      cJSON_AddItemToObject(r, "sampling", ins_json_parse_or_string(ins_col_text(runs_st, 17)));
    int srk = add_signatures(sigs_st, id, cJSON_AddArrayToObject(r, "signatures"));
    if (srk == SQLITE_DONE)
      srk = add_rows(pcs_st, id, pc_keys, cJSON_AddArrayToObject(r, "pcs"));
    if (srk == SQLITE_DONE)
      srk = add_rows(stacks_st, id, stack_keys, cJSON_AddArrayToObject(r, "stacks"));
    if (srk == SQLITE_DONE)
      srk = add_rows(counters_st, id, counter_keys, cJSON_AddArrayToObject(r, "counters"));
    if (srk == SQLITE_DONE)
      srk = add_rows(variants_st, id, variant_keys, cJSON_AddArrayToObject(r, "variants"));
    if (srk == SQLITE_DONE)
      srk = add_rows(events_st, id, event_keys, cJSON_AddArrayToObject(r, "events"));
    if (srk != SQLITE_DONE) {
      step = srk;
      break;
    }
  }
  if (step != SQLITE_DONE) {
    fprintf(stderr, "opjit: cannot read the database: %s\n", sqlite3_errmsg(st_sqlite(db)));
    goto out;
  }
  rc = ins_json_emit(doc);
  doc = NULL;
out:
  cJSON_Delete(doc);
  sqlite3_finalize(events_st);
  sqlite3_finalize(variants_st);
  sqlite3_finalize(counters_st);
  sqlite3_finalize(stacks_st);
  sqlite3_finalize(pcs_st);
  sqlite3_finalize(sigs_st);
  sqlite3_finalize(runs_st);
  st_close(db);
  return rc;
}

const ins_cmd_t ins_cmd_export = {
    .name = "export",
    .main = cmd_export,
    .synopsis = "--json [--db PATH] [RUN]",
    .summary = "dump runs and their signatures as JSON",
    .help = "Writes one JSON document to stdout: every run (or only RUN) with its program,\n"
            "machine, argv, options and signatures (parameters and counts). \"lost\" is true\n"
            "for a run marked running whose process is gone. A sampled run adds its sampling\n"
            "summary, its PC histogram by symbol (pcs), folded stacks and hardware counter\n"
            "totals, each row naming its signature (null: outside any operator). The JIT's\n"
            "variants (status, compiler, compile time, calls served and timed) and events\n"
            "(CLOCK_REALTIME time_ns, kind, detail) follow, by signature.\n\n"
            "options:\n"
            "  --json       JSON (the only format; required so others can be added)\n"
            "  --db PATH    the profile database\n"
            "  -h, --help   this help\n",
};
