/* SPDX-License-Identifier: MIT */
/* `opjit diff RUN_A RUN_B`: two runs' signatures side by side. Each run is read as `opjit top
 * RUN` reads it (ST_Q_SIG_TOTALS: calls split between the original library and the JIT
 * variant, each part estimated at its own mean), so a signature's calls, mean and share here
 * are those `top` shows for each run. Rows are matched by signature id and ranked by the
 * larger of the two estimated times; a signature called in one run only is new or gone. */
#include "cmd.h"
#include "db.h"
#include "table.h"
#include "variants.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROGRAM_WIDTH 60
#define SAME_BAND 0.005 /* a mean ratio within 1 ± this reads "same" */

/* One run's view of a signature. */
typedef struct side_s {
  int present;
  ins_split_t sp;
  double est, mean, share; /* mean -1 when nothing was timed */
  double saving;           /* the JIT's estimated saving */
  char *status;            /* the newest variant's status; NULL: none */
  char *state, *reason;    /* the JIT state the agent recorded, and why; NULL: none */
} side_t;

typedef struct row_s {
  char sig[17];
  char *name, *op, *params;
  side_t s[2]; /* run A, run B */
} row_t;

/* One run: what its header says and its totals. */
typedef struct run_s {
  int64_t id;
  char label[512], status[32];
  char *exe, *argv;
  int64_t start_ns, wall_ns;
  double est, saving;
  int64_t calls, nsigs;
} run_t;

typedef struct rows_s {
  row_t *v;
  size_t n, cap;
} rows_t;

static row_t *rows_add(rows_t *r)
{
  r->v = ins_grow(r->v, r->n, &r->cap, sizeof *r->v);
  row_t *row = &r->v[r->n++];
  memset(row, 0, sizeof *row);
  return row;
}

static void rows_free(rows_t *r)
{
  for (size_t i = 0; i < r->n; i++) {
    free(r->v[i].name);
    free(r->v[i].op);
    free(r->v[i].params);
    for (int k = 0; k < 2; k++) {
      free(r->v[i].s[k].status);
      free(r->v[i].s[k].state);
      free(r->v[i].s[k].reason);
    }
  }
  free(r->v);
}

static int by_sig(const void *a, const void *b)
{
  return strcmp(((const row_t *)a)->sig, ((const row_t *)b)->sig);
}

static double larger_est(const row_t *r)
{
  return r->s[0].est > r->s[1].est ? r->s[0].est : r->s[1].est;
}

/* Larger estimated time first, then by id. */
static int by_est(const void *a, const void *b)
{
  double x = larger_est(a), y = larger_est(b);
  if (x != y)
    return x < y ? 1 : -1;
  return by_sig(a, b);
}

/* Reads run's header fields into *run. Returns 0, or INS_EXIT_FAIL (printed). */
static int read_run(st_db_t *db, run_t *run)
{
  st_rows_t *st = ins_query(db, ST_Q_RUN);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, run->id);
  int rc = st_rows_next(st);
  if (rc == 1) {
    run->start_ns = st_rows_int(st, ST_RUN_START_NS);
    run->wall_ns = ins_run_wall_ns(run->start_ns, st_rows_int(st, ST_RUN_FLUSH_NS),
                                   st_rows_int(st, ST_RUN_END_NS));
    ins_program_label(st_rows_text(st, ST_RUN_EXE), st_rows_text(st, ST_RUN_ARGV), PROGRAM_WIDTH,
                      run->label, sizeof run->label);
    snprintf(run->status, sizeof run->status, "%s",
             ins_run_status(st_rows_text(st, ST_RUN_STATUS), st_rows_int(st, ST_RUN_PID),
                            run->start_ns));
    run->exe = st_rows_type(st, ST_RUN_EXE) == ST_COL_NULL
                   ? NULL
                   : ins_xstrdup(st_rows_text(st, ST_RUN_EXE));
    run->argv = ins_xstrdup(st_rows_text(st, ST_RUN_ARGV));
    rc = st_rows_next(st);
  }
  return ins_rows_finish(db, st, rc);
}

/* Reads the signatures of run into rows as side `side` (0: A, 1: B); B's are matched against
 * A's (rows sorted by id before B is read) and appended when A has none. Returns 0, or
 * INS_EXIT_FAIL (printed). */
static int read_sigs(st_db_t *db, run_t *run, int side, rows_t *rows)
{
  st_rows_t *st = ins_query(db, ST_Q_SIG_TOTALS);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, run->id);
  size_t na = rows->n; /* A's rows, sorted: the ones B's are looked up in */
  int step;
  while ((step = st_rows_next(st)) == 1) {
    row_t key, *row = NULL;
    snprintf(key.sig, sizeof key.sig, "%s", st_rows_text(st, ST_SIG_SIG));
    if (side)
      row = bsearch(&key, rows->v, na, sizeof *rows->v, by_sig);
    if (!row) {
      row = rows_add(rows);
      memcpy(row->sig, key.sig, sizeof row->sig);
      row->name = ins_xstrdup(st_rows_text(st, ST_SIG_NAME));
      row->op = ins_xstrdup(st_rows_text(st, ST_SIG_OP));
      row->params = ins_xstrdup(st_rows_text(st, ST_SIG_PARAMS));
    }
    side_t *s = &row->s[side];
    s->present = 1;
    s->sp = ins_split_sig_row(st);
    s->est = st_rows_double(st, ST_SIG_EST);
    int64_t timed = ins_sat_add(s->sp.otimed, s->sp.vtimed);
    s->mean = ins_call_mean(s->est, s->sp.calls, timed);
    s->saving = st_rows_double(st, ST_SIG_SAVING);
    if (st_rows_type(st, ST_SIG_STATUS) != ST_COL_NULL)
      s->status = ins_xstrdup(st_rows_text(st, ST_SIG_STATUS));
    if (st_rows_type(st, ST_SIG_STATE) != ST_COL_NULL)
      s->state = ins_xstrdup(st_rows_text(st, ST_SIG_STATE));
    if (st_rows_type(st, ST_SIG_REASON) != ST_COL_NULL)
      s->reason = ins_xstrdup(st_rows_text(st, ST_SIG_REASON));
    run->est += s->est;
    run->saving += s->saving;
    run->calls = ins_sat_add(run->calls, s->sp.calls);
    run->nsigs++;
  }
  if (ins_rows_finish(db, st, step))
    return INS_EXIT_FAIL;
  for (size_t i = 0; i < rows->n; i++)
    if (rows->v[i].s[side].present)
      rows->v[i].s[side].share = run->est > 0 ? 100.0 * rows->v[i].s[side].est / run->est : 0;
  return 0;
}

/* B's mean over A's, -1 unless both were timed. */
static double mean_ratio(const row_t *r)
{
  if (!r->s[0].present || !r->s[1].present || r->s[0].mean <= 0 || r->s[1].mean < 0)
    return -1;
  return r->s[1].mean / r->s[0].mean;
}

/* "new", "gone", "1.60× faster", "1.25× slower", "same" or "-" (not timed in both). */
static const char *fmt_change(const row_t *r, char *buf, size_t len)
{
  double x = mean_ratio(r);
  if (!r->s[0].present)
    snprintf(buf, len, "new");
  else if (!r->s[1].present)
    snprintf(buf, len, "gone");
  else if (x < 0)
    snprintf(buf, len, "-");
  else if (x > 1 - SAME_BAND && x < 1 + SAME_BAND)
    snprintf(buf, len, "same");
  else if (x < 1)
    snprintf(buf, len, "%.2f× faster", x > 0 ? 1 / x : 0);
  else
    snprintf(buf, len, "%.2f× slower", x);
  return buf;
}

/* "a → b" into buf. */
static const char *pair(const char *a, const char *b, char *buf, size_t len)
{
  snprintf(buf, len, "%s → %s", a, b);
  return buf;
}

static cJSON *run_json(const run_t *r)
{
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "run", (double)r->id);
  cJSON_AddStringToObject(j, "program", r->label);
  if (r->exe)
    cJSON_AddStringToObject(j, "exe", r->exe);
  else
    cJSON_AddNullToObject(j, "exe");
  cJSON_AddItemToObject(j, "argv", ins_json_parse_or_string(r->argv));
  cJSON_AddStringToObject(j, "status", r->status);
  ins_json_add_int(j, "start_ns", r->start_ns);
  ins_json_add_or_null(j, "wall_ns", (double)r->wall_ns);
  cJSON_AddNumberToObject(j, "total_calls", (double)r->calls);
  cJSON_AddNumberToObject(j, "est_ns", r->est);
  cJSON_AddNumberToObject(j, "total_signatures", (double)r->nsigs);
  cJSON_AddNumberToObject(j, "jit_saving_ns", r->saving);
  return j;
}

/* One side of a signature as JSON, null when the run did not call it. */
static cJSON *side_json(const side_t *s)
{
  if (!s->present)
    return cJSON_CreateNull();
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "calls", (double)s->sp.calls);
  cJSON_AddNumberToObject(j, "timed_calls", (double)s->sp.otimed);
  cJSON_AddNumberToObject(j, "timed_ns", (double)s->sp.otimed_ns);
  cJSON_AddNumberToObject(j, "est_ns", s->est);
  cJSON_AddNumberToObject(j, "share_pct", s->share);
  ins_json_add_or_null(j, "mean_ns", s->mean);
  ins_json_add_state(j, s->state, s->reason);
  if (!s->status) {
    cJSON_AddNullToObject(j, "jit");
    return j;
  }
  cJSON *v = cJSON_AddObjectToObject(j, "jit");
  cJSON_AddStringToObject(v, "status", s->status);
  cJSON_AddNumberToObject(v, "calls", (double)s->sp.vcalls);
  cJSON_AddNumberToObject(v, "calls_pct", ins_pct(s->sp.vcalls, s->sp.calls));
  cJSON_AddNumberToObject(v, "timed_calls", (double)s->sp.vtimed);
  cJSON_AddNumberToObject(v, "timed_ns", (double)s->sp.vtimed_ns);
  ins_json_add_or_null(v, "variant_mean_ns", ins_split_vmean(&s->sp));
  ins_json_add_or_null(v, "original_mean_ns", ins_split_omean(&s->sp));
  ins_json_add_or_null(v, "speedup", ins_split_speedup(&s->sp));
  cJSON_AddNumberToObject(v, "saving_ns", s->saving);
  return j;
}

static cJSON *row_json(const row_t *r)
{
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "sig", r->sig);
  cJSON_AddStringToObject(j, "name", r->name);
  cJSON_AddStringToObject(j, "op", r->op);
  cJSON_AddItemToObject(j, "params", ins_json_parse_or_string(r->params));
  cJSON_AddStringToObject(j, "change",
                          !r->s[0].present   ? "new"
                          : !r->s[1].present ? "gone"
                                             : "both");
  cJSON_AddItemToObject(j, "a", side_json(&r->s[0]));
  cJSON_AddItemToObject(j, "b", side_json(&r->s[1]));
  ins_json_add_or_null(j, "mean_ratio", mean_ratio(r));
  cJSON_AddNumberToObject(j, "est_change_ns", r->s[1].est - r->s[0].est);
  return j;
}

/* The text cells of one side: calls, mean, share, JIT ("-" for each when absent). */
static void side_cells(const side_t *s, char calls[24], char mean[32], char share[16], char jit[48])
{
  if (!s->present) {
    strcpy(calls, "-");
    strcpy(mean, "-");
    strcpy(share, "-");
    strcpy(jit, "-");
    return;
  }
  snprintf(calls, 24, "%lld", (long long)s->sp.calls);
  ins_fmt_ns(s->mean, mean, 32);
  snprintf(share, 16, "%.1f%%", s->share);
  ins_state_label(s->state, s->status, ins_split_speedup(&s->sp), jit, 48);
  if (!*jit)
    strcpy(jit, "-");
}

static void print_text(const run_t *runs, const rows_t *rows, size_t shown, long limit)
{
  for (int i = 0; i < 2; i++) {
    char when[32], wall[32];
    printf("%c: run %lld: %s (%s, started %s, wall %s)\n", 'A' + i, (long long)runs[i].id,
           runs[i].label, runs[i].status, ins_fmt_time(runs[i].start_ns, when, sizeof when),
           ins_fmt_duration(runs[i].wall_ns, wall, sizeof wall));
  }
  printf("\n");
  if (!rows->n) {
    printf("no operator calls recorded in either run\n");
    return;
  }
  static const char *const head[] = {"CALLS A → B", "MEAN A → B", "CHANGE", "SHARE A → B",
                                     "JIT A → B",   "SIG",        "NAME"};
  int jit = 0;
  for (size_t i = 0; i < rows->n; i++)
    for (int k = 0; k < 2; k++)
      jit |= rows->v[i].s[k].status || rows->v[i].s[k].state;
  ins_table_t *t = ins_table_new_shown("rrrrlll", head, jit ? UINT32_MAX : ~(1u << 4));
  size_t nnew = 0, ngone = 0;
  for (size_t i = 0; i < rows->n; i++) {
    nnew += !rows->v[i].s[0].present;
    ngone += !rows->v[i].s[1].present;
  }
  for (size_t i = 0; i < shown; i++) {
    const row_t *r = &rows->v[i];
    char calls[2][24], mean[2][32], share[2][16], jl[2][48];
    char c0[64], c1[80], c2[32], c3[48], c4[112];
    for (int k = 0; k < 2; k++)
      side_cells(&r->s[k], calls[k], mean[k], share[k], jl[k]);
    const char *row[] = {pair(calls[0], calls[1], c0, sizeof c0),
                         pair(mean[0], mean[1], c1, sizeof c1),
                         fmt_change(r, c2, sizeof c2),
                         pair(share[0], share[1], c3, sizeof c3),
                         pair(jl[0], jl[1], c4, sizeof c4),
                         r->sig,
                         r->name};
    ins_table_row(t, row);
  }
  ins_table_print(t, stdout);
  ins_table_free(t);

  char ea[32], eb[32], d[32];
  double saving = runs[0].est - runs[1].est;
  printf("\noperator time %s → %s (%s %s); calls %lld → %lld; signatures %lld → %lld (%zu new, "
         "%zu gone)\n",
         ins_fmt_ns(runs[0].est, ea, sizeof ea), ins_fmt_ns(runs[1].est, eb, sizeof eb),
         saving >= 0 ? "saving" : "costing",
         ins_fmt_ns(saving >= 0 ? saving : -saving, d, sizeof d), (long long)runs[0].calls,
         (long long)runs[1].calls, (long long)runs[0].nsigs, (long long)runs[1].nsigs, nnew, ngone);
  if (jit)
    printf("JIT estimated saving %s → %s\n", ins_fmt_ns(runs[0].saving, ea, sizeof ea),
           ins_fmt_ns(runs[1].saving, eb, sizeof eb));
  if (shown < rows->n)
    printf("showing the top %ld of %zu signatures (--limit 0 for all)\n", limit, rows->n);
}

static int cmd_diff(int argc, char **argv)
{
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"limit", required_argument, NULL, 'n'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL;
  int json = 0, rc;
  long limit = 20, ids[2];
  for (int c; (c = getopt_long(argc, argv, "d:n:jh", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd':
      dbopt = optarg;
      break;
    case 'n':
      if ((rc = ins_parse_long(&ins_cmd_diff, "--limit", optarg, 0, 1L << 40, &limit)))
        return rc;
      break;
    case 'j':
      json = 1;
      break;
    case 'h':
      return ins_help(&ins_cmd_diff);
    default:
      return ins_bad_option(&ins_cmd_diff, argv);
    }
  }
  if (argc - optind < 2)
    return ins_usage_error(&ins_cmd_diff, "give two runs, RUN_A and RUN_B");
  for (int i = 0; i < 2; i++)
    if ((rc = ins_parse_long(&ins_cmd_diff, i ? "RUN_B" : "RUN_A", argv[optind++], 1, INT64_MAX,
                             &ids[i])))
      return rc;
  if ((rc = ins_no_operands(&ins_cmd_diff, argc, argv)))
    return rc;

  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  run_t runs[2] = {{.id = ids[0]}, {.id = ids[1]}};
  rows_t rows = {0};
  rc = INS_EXIT_FAIL;
  for (int i = 0; i < 2; i++) {
    int64_t scope;
    if (ins_pick_run(db, runs[i].id, 0, INS_HAS_CALLS, &scope) || read_run(db, &runs[i]))
      goto out;
  }
  if (read_sigs(db, &runs[0], 0, &rows))
    goto out;
  if (rows.n)
    qsort(rows.v, rows.n, sizeof *rows.v, by_sig);
  if (read_sigs(db, &runs[1], 1, &rows))
    goto out;
  if (rows.n)
    qsort(rows.v, rows.n, sizeof *rows.v, by_est);
  size_t shown = limit && (size_t)limit < rows.n ? (size_t)limit : rows.n;
  rc = INS_EXIT_OK;
  if (!json) {
    print_text(runs, &rows, shown, limit);
    goto out;
  }
  cJSON *doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "database", st_path(db));
  cJSON_AddItemToObject(doc, "a", run_json(&runs[0]));
  cJSON_AddItemToObject(doc, "b", run_json(&runs[1]));
  cJSON_AddNumberToObject(doc, "est_change_ns", runs[1].est - runs[0].est);
  cJSON_AddNumberToObject(doc, "total_signatures", (double)rows.n);
  cJSON *sigs = cJSON_AddArrayToObject(doc, "signatures");
  for (size_t i = 0; i < shown; i++)
    cJSON_AddItemToArray(sigs, row_json(&rows.v[i]));
  rc = ins_json_emit(doc);
out:
  rows_free(&rows);
  for (int i = 0; i < 2; i++) {
    free(runs[i].exe);
    free(runs[i].argv);
  }
  st_close(db);
  return rc;
}

const ins_cmd_t ins_cmd_diff = {
    .name = "diff",
    .main = cmd_diff,
    .synopsis = "[--db PATH] [--limit N] [--json] RUN_A RUN_B",
    .summary = "compare two runs signature by signature",
    .help =
        "Each run is read as opjit top reads it, and its signatures are matched by id,\n"
        "ranked by the larger of their two estimated times. A cell \"x → y\" holds run A's\n"
        "figure, then run B's; \"-\" where a run did not call the signature.\n"
        "  CALLS    the signature's calls in each run\n"
        "  MEAN     estimated time per call (as top's MEAN: the original library's and the\n"
        "           JIT variant's calls each at their own timed mean)\n"
        "  CHANGE   B's mean against A's: \"1.60× faster\", \"1.25× slower\", \"same\" (within\n"
        "           0.5%), \"-\" when one run timed no call; \"new\": only in B, \"gone\": only\n"
        "           in A\n"
        "  SHARE    its part of the run's estimated operator time\n"
        "  JIT      the signature's JIT state and speedup in each run, as top's STATE (shown\n"
        "           when either run recorded one); --json has each run's reason\n"
        "The footer gives both runs' estimated operator time and what B saves (or costs)\n"
        "against A, their calls and signatures, and the JIT's estimated saving in each.\n"
        "--json holds every figure unrounded: \"a\" and \"b\" (the runs), and per signature\n"
        "\"a\" and \"b\" (null where it was not called), \"change\" (both, new, gone) and\n"
        "\"mean_ratio\" (B's mean / A's).\n\n"
        "options:\n"
        "  --db PATH    the profile database\n"
        "  --limit N    at most N signatures (default 20; 0: all)\n"
        "  --json       one JSON document\n"
        "  -h, --help   this help\n",
};
