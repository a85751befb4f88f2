/* SPDX-License-Identifier: MIT */
/* `opjit op`: one signature, found by its id or a unique prefix, and the runs that called it. */
#include "cmd.h"
#include "db.h"
#include "table.h"

#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define PROGRAM_WIDTH 48
#define MAX_CANDIDATES 20 /* listed for an ambiguous prefix */

/* Resolves prefix to one full signature id in sig[17]; prints the reason and returns
 * INS_EXIT_FAIL when none or several match. */
static int resolve(st_db_t *db, const char *prefix, char *sig)
{
  sqlite3_stmt *st = ins_db_prepare(
      db, "SELECT sig, min(name), count(*) OVER () FROM signatures WHERE sig GLOB ?1 || '*'"
          " GROUP BY sig ORDER BY sig LIMIT ?2");
  if (!st)
    return INS_EXIT_FAIL;
  sqlite3_bind_text(st, 1, prefix, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 2, MAX_CANDIDATES);
  int rc, n = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t total = sqlite3_column_int64(st, 2);
    if (n == 0 && total == 1)
      snprintf(sig, 17, "%s", ins_col_text(st, 0));
    else {
      if (n == 0)
        fprintf(stderr, "opjit: signature prefix '%s' is ambiguous: %lld signatures match\n",
                prefix, (long long)total);
      fprintf(stderr, "  %s  %s\n", ins_col_text(st, 0), ins_col_text(st, 1));
      if (n == MAX_CANDIDATES - 1 && total > MAX_CANDIDATES)
        fprintf(stderr, "  ... and %lld more\n", (long long)(total - MAX_CANDIDATES));
    }
    n++;
  }
  if (ins_db_finish(db, st, rc))
    return INS_EXIT_FAIL;
  if (!n)
    fprintf(stderr, "opjit: no signature %s%s in %s (see opjit top)\n", prefix,
            strlen(prefix) < 16 ? "..." : "", sqlite3_db_filename(st_sqlite(db), "main"));
  return n == 1 ? INS_EXIT_OK : INS_EXIT_FAIL;
}

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

static int cmd_op(int argc, char **argv)
{
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL;
  int json = 0;
  for (int c; (c = getopt_long(argc, argv, "d:jh", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
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
  const char *arg = argv[optind];
  size_t len = strlen(arg);
  if (len == 0 || len > 16 || strspn(arg, "0123456789abcdefABCDEF") != len)
    return ins_usage_error(&ins_cmd_op, "'%s' is not a signature id (1 to 16 hex digits)", arg);
  for (size_t i = 0; i <= len; i++)
    prefix[i] = (char)tolower((unsigned char)arg[i]);

  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  int rc = resolve(db, prefix, sig);
  sqlite3_stmt *st = NULL;
  cJSON *doc = NULL;
  ins_table_t *t = NULL;
  if (rc || !(st = ins_db_prepare(db, "SELECT name, op, params FROM signatures WHERE sig = ?"
                                      " ORDER BY id LIMIT 1")))
    goto out;
  rc = INS_EXIT_FAIL;
  sqlite3_bind_text(st, 1, sig, -1, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_ROW) {
    ins_db_finish(db, st, SQLITE_ERROR);
    st = NULL;
    goto out;
  }
  doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "sig", sig);
  cJSON_AddStringToObject(doc, "name", ins_col_text(st, 0));
  cJSON_AddStringToObject(doc, "op", ins_col_text(st, 1));
  cJSON_AddItemToObject(doc, "params", ins_json_parse_or_string(ins_col_text(st, 2)));
  sqlite3_finalize(st);
  st = ins_db_prepare(db, "SELECT rs.run_id, p.exe, r.argv, r.start_ns, r.status, r.pid,"
                          " rs.calls, rs.timed_calls, rs.timed_ns"
                          " FROM signatures s JOIN run_sigs rs ON rs.sig_id = s.id"
                          " JOIN runs r ON r.id = rs.run_id JOIN programs p ON p.id = r.program_id"
                          " WHERE s.sig = ? ORDER BY rs.run_id DESC");
  if (!st)
    goto out;
  sqlite3_bind_text(st, 1, sig, -1, SQLITE_STATIC);
  cJSON *runs = cJSON_AddArrayToObject(doc, "runs");
  static const char *const head[] = {"RUN", "STARTED", "STATUS", "CALLS", "TIMED", "MEAN",
                                     "PROGRAM"};
  t = ins_table_new("rllrrrl", head);
  int64_t total_calls = 0, total_timed = 0;
  double total_est = 0;
  int step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t run = sqlite3_column_int64(st, 0), start = sqlite3_column_int64(st, 3);
    int64_t calls = sqlite3_column_int64(st, 6), timed = sqlite3_column_int64(st, 7);
    int64_t timed_ns = sqlite3_column_int64(st, 8);
    double mean = timed ? (double)timed_ns / (double)timed : -1;
    const char *status = ins_run_status(ins_col_text(st, 4), sqlite3_column_int64(st, 5), start);
    total_calls += calls, total_timed += timed;
    total_est += timed ? mean * (double)calls : 0;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "run", (double)run);
    cJSON_AddStringToObject(j, "status", status);
    cJSON_AddStringToObject(j, "exe", ins_col_text(st, 1));
    cJSON_AddItemToObject(j, "argv", ins_json_parse_or_string(ins_col_text(st, 2)));
    cJSON_AddNumberToObject(j, "calls", (double)calls);
    cJSON_AddNumberToObject(j, "timed_calls", (double)timed);
    cJSON_AddNumberToObject(j, "timed_ns", (double)timed_ns);
    if (timed)
      cJSON_AddNumberToObject(j, "mean_ns", mean);
    else
      cJSON_AddNullToObject(j, "mean_ns");
    cJSON_AddItemToArray(runs, j);
    char c0[24], c1[32], c3[24], c4[24], c5[32], prog[256];
    snprintf(c0, sizeof c0, "%lld", (long long)run);
    snprintf(c3, sizeof c3, "%lld", (long long)calls);
    snprintf(c4, sizeof c4, "%lld", (long long)timed);
    ins_program_label(ins_col_text(st, 1), ins_col_text(st, 2), PROGRAM_WIDTH, prog, sizeof prog);
    const char *row[] = {c0, ins_fmt_time(start, c1, sizeof c1), status, c3, c4,
                         ins_fmt_ns(mean, c5, sizeof c5), prog};
    ins_table_row(t, row);
  }
  rc = ins_db_finish(db, st, step);
  st = NULL;
  if (rc)
    goto out;
  cJSON_AddNumberToObject(doc, "total_calls", (double)total_calls);
  cJSON_AddNumberToObject(doc, "total_timed_calls", (double)total_timed);
  cJSON_AddNumberToObject(doc, "est_ns", total_est);
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
         ins_fmt_ns(total_calls && total_timed ? total_est / (double)total_calls : -1, mean_s,
                    sizeof mean_s));
out:
  ins_table_free(t);
  cJSON_Delete(doc);
  sqlite3_finalize(st);
  st_close(db);
  return rc;
}

const ins_cmd_t ins_cmd_op = {
    .name = "op",
    .main = cmd_op,
    .synopsis = "[--db PATH] [--json] SIG",
    .summary = "show one signature and the runs that called it",
    .help = "SIG is a signature id (16 hex digits, as opjit top prints it) or any prefix that\n"
            "only one signature has; an ambiguous prefix lists the candidates.\n\n"
            "options:\n"
            "  --db PATH    the profile database\n"
            "  --json       one JSON document\n"
            "  -h, --help   this help\n",
};
