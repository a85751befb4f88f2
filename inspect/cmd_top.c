/* SPDX-License-Identifier: MIT */
/* `opjit top`: a run's signatures ranked by estimated operator time. The agent times one call in
 * OPJIT_TIME_EVERY, so a signature's time is estimated per run as calls × timed_ns / timed_calls;
 * --all sums those estimates over every run. A signature with a JIT variant has its calls split:
 * the original library's calls at the original's mean (the never-slower judge's where it has a
 * ratio), the variant's at the variant's (ST_Q_SIG_TOTALS). A STATE column shows the JIT state the
 * agent recorded for each signature (with the speedup while a kernel serves), --why the reason
 * under each row; both are the agent's own words, never worked out here. The reasons stay off the
 * default table: at 60 to 200 characters each they would double the ranking's height or push it
 * far past 100 columns (opjit variants, the detail view of few rows, always shows them). When the
 * run was sampled, each signature's samples and their share of all the run's samples (CPU%, the
 * program's own time included) stand beside the estimate. */
#include "cmd.h"
#include "db.h"
#include "table.h"
#include "variants.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define PROGRAM_WIDTH 60

/* What the footer compares the operators against. */
typedef struct scope_s {
  int64_t run;      /* 0: every run */
  int64_t runs;     /* runs covered */
  int64_t wall_ns;  /* their wall time (recorded so far) */
  int64_t overflow; /* calls beyond the signature table */
} scope_t;

/* Fills the scope's totals and its one-line description into title. */
static int read_scope(st_db_t *db, scope_t *sc, char *title, size_t len)
{
  st_rows_t *st = ins_query(db, ST_Q_SCOPE_TOTALS);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, sc->run);
  int rc = st_rows_next(st);
  if (rc == 1) {
    sc->runs = st_rows_int(st, 0);
    sc->wall_ns = st_rows_int(st, 1);
    sc->overflow = st_rows_int(st, 2);
    rc = st_rows_next(st);
  }
  if (ins_rows_finish(db, st, rc))
    return INS_EXIT_FAIL;
  if (sc->run)
    return ins_run_title(db, sc->run, PROGRAM_WIDTH, title, len, NULL);
  snprintf(title, len, "all %lld runs", (long long)sc->runs);
  return 0;
}

/* The JIT's part of a signature row as a JSON object (null when it has no variant). */
static cJSON *jit_json(st_rows_t *st, const ins_split_t *sp)
{
  if (st_rows_type(st, ST_SIG_STATUS) == ST_COL_NULL)
    return cJSON_CreateNull();
  cJSON *j = cJSON_CreateObject();
  double omean = ins_split_omean(sp), vmean = ins_split_vmean(sp), x = ins_split_speedup(sp);
  cJSON_AddStringToObject(j, "status", st_rows_text(st, ST_SIG_STATUS));
  cJSON_AddNumberToObject(j, "calls", (double)sp->vcalls);
  cJSON_AddNumberToObject(j, "calls_pct", ins_pct(sp->vcalls, sp->calls));
  cJSON_AddNumberToObject(j, "original_calls", (double)ins_sat_sub(sp->calls, sp->vcalls));
  cJSON_AddNumberToObject(j, "timed_calls", (double)sp->vtimed);
  cJSON_AddNumberToObject(j, "timed_ns", (double)sp->vtimed_ns);
  ins_json_add_or_null(j, "variant_mean_ns", vmean);
  ins_json_add_or_null(j, "original_mean_ns", omean);
  ins_json_add_or_null(j, "speedup", x);
  cJSON_AddNumberToObject(j, "saving_ns", st_rows_double(st, ST_SIG_SAVING));
  cJSON_AddNumberToObject(j, "runs", (double)st_rows_int(st, ST_SIG_NVARIANTS));
  return j;
}

/* The footer's line on sampling: what sampled and where the samples fell; for an unsampled
 * run with a summary, why it was not sampled. Prints nothing for runs without one. */
static void print_sampling(const scope_t *sc, const ins_sampling_t *samp)
{
  char how[256];
  const cJSON *note;
  if (samp->sampled) {
    printf("sampled: ");
    if (!sc->run)
      printf("%lld of %lld runs, ", (long long)samp->sampled, (long long)sc->runs);
    printf("%s; %.1f%% of samples inside operators, %.1f%% in the program itself\n",
           ins_sampling_describe(samp, how, sizeof how),
           ins_pct(samp->total - samp->host, samp->total), ins_pct(samp->host, samp->total));
    return;
  }
  if (!samp->runs)
    return;
  printf("not sampled");
  int first = 1;
  cJSON_ArrayForEach(note, samp->notes)
  {
    printf("%s%s", first ? ": " : "; ", note->valuestring);
    first = 0;
  }
  printf("\n");
}

static int cmd_top(int argc, char **argv)
{
  if (ins_fleet_wanted(argc, argv)) /* every machine's runs (cmd_fleet.c) */
    return ins_fleet_read(&ins_cmd_top, argc, argv);
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"limit", required_argument, NULL, 'n'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"all", no_argument, NULL, 'a'},
                                           {"why", no_argument, NULL, 'w'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL;
  int json = 0, all = 0, why = 0, rc;
  long limit = 20, run = 0;
  for (int c; (c = getopt_long(argc, argv, "d:n:jawh", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
    case 'n':
      if ((rc = ins_parse_long(&ins_cmd_top, "--limit", optarg, 0, 1L << 40, &limit)))
        return rc;
      break;
    case 'j': json = 1; break;
    case 'a': all = 1; break;
    case 'w': why = 1; break;
    case 'h': return ins_help(&ins_cmd_top);
    default: return ins_bad_option(&ins_cmd_top, argv);
    }
  }
  if ((rc = ins_parse_run(&ins_cmd_top, argc, argv, all, &run)))
    return rc;

  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  scope_t sc = {.run = run};
  ins_sampling_t samp = {0};
  char title[1024];
  st_rows_t *st = NULL;
  cJSON *doc = NULL;
  ins_table_t *t = NULL;
  rc = INS_EXIT_FAIL;
  if (ins_pick_run(db, run, all, INS_HAS_CALLS, &sc.run) ||
      read_scope(db, &sc, title, sizeof title) || ins_sampling_read(db, sc.run, &samp))
    goto out;
  st = ins_query(db, ST_Q_SIG_TOTALS);
  if (!st)
    goto out;
  st_rows_bind_int(st, 1, sc.run);

  /* Totals come first (shares need them): one pass to sum, then a second to print. */
  double est_total = 0, saving_total = 0;
  int64_t calls_total = 0, nsigs = 0, vcalls_total = 0, jit_sigs = 0, variants = 0, states = 0;
  int step;
  while ((step = st_rows_next(st)) == 1) {
    est_total += st_rows_double(st, ST_SIG_EST);
    calls_total = ins_sat_add(calls_total, st_rows_int(st, ST_SIG_CALLS));
    vcalls_total = ins_sat_add(vcalls_total, st_rows_int(st, ST_SIG_VCALLS));
    jit_sigs += st_rows_int(st, ST_SIG_VCALLS) > 0;
    saving_total += st_rows_double(st, ST_SIG_SAVING);
    variants += st_rows_int(st, ST_SIG_NVARIANTS);
    /* a profile-mode run's "off" everywhere says nothing a column would add */
    states += st_rows_type(st, ST_SIG_STATE) != ST_COL_NULL &&
              strcmp(st_rows_text(st, ST_SIG_STATE), "off") != 0;
    nsigs++;
  }
  if (step != 0 || st_rows_rewind(st) != ST_OK) {
    ins_db_failed(db, "read");
    goto out;
  }

  doc = cJSON_CreateObject();
  cJSON *sigs = cJSON_CreateArray();
  /* Columns: SAMPLES and CPU% only for a sampled scope, STATE only when the agent recorded
   * states other than off, or variants (a run before schema 7 has variants only). */
  static const char *const head[] = {"SHARE", "EST.TIME", "CALLS", "MEAN", "STATE",
                                     "SAMPLES", "CPU%", "SIG", "NAME"};
  uint32_t shown = UINT32_MAX;
  if (!variants && !states)
    shown &= ~(1u << 4);
  if (!samp.sampled)
    shown &= ~(1u << 5 | 1u << 6);
  t = ins_table_new_shown("rrrrlrrll", head, shown);
  for (int64_t shown = 0; (step = st_rows_next(st)) == 1 && (!limit || shown < limit); shown++) {
    ins_split_t sp = ins_split_sig_row(st);
    int64_t calls = sp.calls, timed = ins_sat_add(sp.otimed, sp.vtimed);
    double est = st_rows_double(st, ST_SIG_EST);
    double share = est_total > 0 ? 100.0 * est / est_total : 0;
    double mean = ins_call_mean(est, calls, timed);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "sig", st_rows_text(st, ST_SIG_SIG));
    cJSON_AddStringToObject(j, "name", st_rows_text(st, ST_SIG_NAME));
    cJSON_AddStringToObject(j, "op", st_rows_text(st, ST_SIG_OP));
    cJSON_AddItemToObject(j, "params", ins_json_parse_or_string(st_rows_text(st, ST_SIG_PARAMS)));
    cJSON_AddNumberToObject(j, "calls", (double)calls);
    cJSON_AddNumberToObject(j, "timed_calls", (double)sp.otimed);
    cJSON_AddNumberToObject(j, "timed_ns", (double)sp.otimed_ns);
    cJSON_AddNumberToObject(j, "est_ns", est);
    cJSON_AddNumberToObject(j, "share_pct", share);
    ins_json_add_or_null(j, "mean_ns", mean);
    int64_t samples = st_rows_int(st, ST_SIG_SAMPLES);
    if (samp.sampled) {
      cJSON_AddNumberToObject(j, "samples", (double)samples);
      cJSON_AddNumberToObject(j, "cpu_pct", ins_pct(samples, samp.total));
    }
    const char *state = st_rows_type(st, ST_SIG_STATE) == ST_COL_NULL
                            ? NULL : st_rows_text(st, ST_SIG_STATE);
    const char *reason = st_rows_type(st, ST_SIG_REASON) == ST_COL_NULL
                             ? NULL : st_rows_text(st, ST_SIG_REASON);
    ins_json_add_state(j, state, reason);
    cJSON_AddItemToObject(j, "jit", jit_json(st, &sp));
    cJSON_AddItemToArray(sigs, j);
    char c0[16], c1[32], c2[24], c3[32], c4[24], c5[16], jit[48];
    snprintf(c0, sizeof c0, "%.1f%%", share);
    snprintf(c2, sizeof c2, "%lld", (long long)calls);
    snprintf(c4, sizeof c4, "%lld", (long long)samples);
    snprintf(c5, sizeof c5, "%.1f%%", ins_pct(samples, samp.total));
    ins_fmt_ns(timed ? est : -1, c1, sizeof c1);
    ins_fmt_ns(mean, c3, sizeof c3);
    const char *status =
        st_rows_type(st, ST_SIG_STATUS) == ST_COL_NULL ? NULL : st_rows_text(st, ST_SIG_STATUS);
    ins_state_label(state, status, ins_split_speedup(&sp), jit, sizeof jit);
    const char *row[] = {
        c0, c1, c2, c3, jit, c4, c5, st_rows_text(st, ST_SIG_SIG), st_rows_text(st, ST_SIG_NAME)};
    ins_table_row(t, row);
    if (why)
      ins_table_note(t, ins_reason_text(reason));
  }
  if (step != 0 && step != 1) {
    ins_db_failed(db, "read");
    cJSON_Delete(sigs);
    goto out;
  }
  rc = INS_EXIT_OK;
  if (json) {
    if (sc.run)
      cJSON_AddNumberToObject(doc, "run", (double)sc.run);
    else
      cJSON_AddNullToObject(doc, "run");
    cJSON_AddNumberToObject(doc, "runs", (double)sc.runs);
    cJSON_AddStringToObject(doc, "database", st_path(db));
    cJSON_AddNumberToObject(doc, "wall_ns", (double)sc.wall_ns);
    cJSON_AddNumberToObject(doc, "total_calls", (double)calls_total);
    cJSON_AddNumberToObject(doc, "est_ns", est_total);
    cJSON_AddNumberToObject(doc, "overflow_calls", (double)sc.overflow);
    cJSON_AddNumberToObject(doc, "total_signatures", (double)nsigs);
    if (samp.runs)
      cJSON_AddItemToObject(doc, "sampling", ins_sampling_json(&samp));
    if (variants) {
      cJSON *jit = cJSON_AddObjectToObject(doc, "jit");
      cJSON_AddNumberToObject(jit, "signatures", (double)jit_sigs);
      cJSON_AddNumberToObject(jit, "calls", (double)vcalls_total);
      cJSON_AddNumberToObject(jit, "calls_pct", ins_pct(vcalls_total, calls_total));
      cJSON_AddNumberToObject(jit, "saving_ns", saving_total);
    }
    cJSON_AddItemToObject(doc, "signatures", sigs);
    rc = ins_json_emit(doc);
    doc = NULL;
    goto out;
  }
  cJSON_Delete(sigs);
  printf("%s\n\n", title);
  if (nsigs)
    ins_table_print(t, stdout);
  else
    printf("no operator calls recorded\n");
  char est_s[32], wall_s[32];
  printf("\n%lld calls in %lld signatures; estimated operator time %s of %s wall",
         (long long)calls_total, (long long)nsigs, ins_fmt_ns(est_total, est_s, sizeof est_s),
         ins_fmt_duration(sc.wall_ns, wall_s, sizeof wall_s));
  if (sc.wall_ns > 0)
    printf(" (%.1f%%)", 100.0 * est_total / (double)sc.wall_ns);
  printf("\n");
  if (limit && nsigs > limit)
    printf("showing the top %ld of %lld signatures (--limit 0 for all)\n", limit, (long long)nsigs);
  if (sc.overflow > 0)
    printf("%lld calls overflowed the signature table (OPJIT_MAX_SIGS) and are not shown\n",
           (long long)sc.overflow);
  if (variants)
    printf("%lld signature%s run%s JIT code: %.1f%% of calls, estimated saving %.3f ms\n",
           (long long)jit_sigs, jit_sigs == 1 ? "" : "s", jit_sigs == 1 ? "s" : "",
           ins_pct(vcalls_total, calls_total), saving_total / 1e6);
  print_sampling(&sc, &samp);
  if (nsigs && (states || variants) && !why)
    printf("STATE is each signature's JIT state; --why shows the reason under each row\n");
out:
  ins_sampling_free(&samp);
  ins_table_free(t);
  cJSON_Delete(doc);
  st_rows_close(st);
  st_close(db);
  return rc;
}

const ins_cmd_t ins_cmd_top = {
    .name = "top",
    .main = cmd_top,
    .synopsis = "[--db PATH] [RUN | --all] [--limit N] [--why] [--json]",
    .summary = "rank a run's operator signatures by estimated time",
    .help = "RUN defaults to the newest run that recorded a call. The agent times one call in\n"
            "OPJIT_TIME_EVERY; a signature's time is estimated as calls × timed_ns / timed_calls\n"
            "(per run, summed with --all; a JIT variant's calls at its own mean, the original's\n"
            "at the judge's where it has a ratio, as JIT shows). SHARE is its part of all\n"
            "signatures' estimated time; the footer compares that total with the run's wall time.\n"
            "For a sampled run, SAMPLES counts the profiler's samples inside the signature and\n"
            "CPU% is their share of all the run's samples, the program's own time included.\n"
            "STATE is the JIT state the agent recorded for the signature (in the newest run of\n"
            "the scope), with the speedup while a kernel serves: \"serving 2.4×\" (compiled in\n"
            "this run), \"placed 2.1×\" (stored by an earlier run), waiting, queued, compiling,\n"
            "deferred, unsupported, lost, tied, demoted, failed, invalidated, refused, crashed\n"
            "(its kernel crashed the program: the original serves from then on) or off;\n"
            "--why prints under each row the reason the agent gave (\"not hot yet: 12 of the 64\n"
            "calls\", \"M=3000 is above OPJIT_JIT_MAX_DIM=2048\", both medians of a lost duel).\n"
            "A run recorded before reasons were kept shows its variant's status, or \"-\".\n"
            "A signature's calls served by its variant are estimated at the variant's mean and\n"
            "the rest at the original library's. The footer adds the share of calls JIT code\n"
            "served and the estimated saving: variant calls × (original mean − variant mean).\n"
            "See opjit variants.\n\n"
            "options:\n"
            "  --db PATH    the profile database\n"
            "  --all        aggregate every run\n"
            "  --limit N    at most N signatures (default 20; 0: all)\n"
            "  --why        the reason of each signature's state, under its row\n"
            "  --json       one JSON document\n"
            "  --fleet[=CONNINFO]  every machine's runs from the fleet store (OPJIT_FLEET;\n"
            "               with --limit only): opjit fleet --help\n"
            "  -h, --help   this help\n",
};
