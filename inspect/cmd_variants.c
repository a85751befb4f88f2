/* SPDX-License-Identifier: MIT */
/* `opjit variants`: the JIT variants of a run (default: the newest run that has one), each
 * with its signature's JIT state and, under its row, the reason the agent recorded for it; the
 * calls it served, its mean against the original library's and the speedup, how long it took
 * to compile and what it was compiled with. */
#include "cmd.h"
#include "db.h"
#include "table.h"
#include "variants.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define PROGRAM_WIDTH 60

static int cmd_variants(int argc, char **argv)
{
  if (ins_fleet_wanted(argc, argv)) /* every machine's runs (cmd_fleet.c) */
    return ins_fleet_read(&ins_cmd_variants, argc, argv);
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"all", no_argument, NULL, 'a'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL;
  int json = 0, all = 0, rc;
  long run = 0;
  for (int c; (c = getopt_long(argc, argv, "d:jah", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
    case 'j': json = 1; break;
    case 'a': all = 1; break;
    case 'h': return ins_help(&ins_cmd_variants);
    default: return ins_bad_option(&ins_cmd_variants, argv);
    }
  }
  if ((rc = ins_parse_run(&ins_cmd_variants, argc, argv, all, &run)))
    return rc;

  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  int64_t scope = run;
  char title[1024] = "all runs";
  st_rows_t *st = NULL;
  cJSON *doc = NULL;
  ins_table_t *t = NULL;
  rc = INS_EXIT_FAIL;
  if (ins_pick_run(db, run, all, INS_HAS_VARIANTS, &scope) ||
      (scope && ins_run_title(db, scope, PROGRAM_WIDTH, title, sizeof title, NULL)))
    goto out;
  st = ins_query(db, ST_Q_VARIANTS);
  if (!st)
    goto out;
  st_rows_bind_int(st, 1, scope);
  doc = ins_json_doc(db, scope);
  cJSON *list = cJSON_CreateArray();
  static const char *const head[] = {"RUN", "STATE", "CALLS", "%CALLS", "VARIANT",
                                     "ORIGINAL", "SPEEDUP", "COMPILE", "LLVM", "CPU",
                                     "SIG", "NAME"};
  /* Columns shown: RUN only with --all, LLVM and CPU only when the rows differ (the count of
   * distinct compilers is the same on every row, so the first decides). */
  int uniform = 1, n = 0, step;
  char llvm[64] = "", cpu[64] = "";
  int generator = 0;
  while ((step = st_rows_next(st)) == 1) {
    ins_split_t sp = ins_split_var_row(st);
    double vmean = ins_split_vmean(&sp), omean = ins_split_omean(&sp);
    double speedup = ins_split_speedup(&sp), pct = ins_pct(sp.vcalls, sp.calls);
    int64_t compile_ns = st_rows_int(st, ST_VAR_COMPILE_NS);
    const char *status = st_rows_text(st, ST_VAR_STATUS);
    const char *state = st_rows_type(st, ST_VAR_STATE) == ST_COL_NULL
                            ? NULL : st_rows_text(st, ST_VAR_STATE);
    const char *reason = st_rows_type(st, ST_VAR_REASON) == ST_COL_NULL
                             ? NULL : st_rows_text(st, ST_VAR_REASON);
    if (!n++) {
      uniform = st_rows_int(st, ST_VAR_COMPILERS) <= 1;
      snprintf(llvm, sizeof llvm, "%s", st_rows_text(st, ST_VAR_LLVM));
      snprintf(cpu, sizeof cpu, "%s", st_rows_text(st, ST_VAR_CPU));
      generator = (int)st_rows_int(st, ST_VAR_GENERATOR);
      uint32_t shown = UINT32_MAX;
      if (!all)
        shown &= ~1u;
      if (uniform)
        shown &= ~(1u << 8 | 1u << 9);
      t = ins_table_new_shown("rlrrrrrrllll", head, shown);
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "run", (double)st_rows_int(st, ST_VAR_RUN));
    cJSON_AddStringToObject(j, "sig", st_rows_text(st, ST_VAR_SIG));
    cJSON_AddStringToObject(j, "name", st_rows_text(st, ST_VAR_NAME));
    cJSON_AddStringToObject(j, "status", status);
    ins_json_add_state(j, state, reason);
    cJSON_AddNumberToObject(j, "generator", (int)st_rows_int(st, ST_VAR_GENERATOR));
    cJSON_AddStringToObject(j, "llvm", st_rows_text(st, ST_VAR_LLVM));
    cJSON_AddStringToObject(j, "cpu", st_rows_text(st, ST_VAR_CPU));
    cJSON_AddNumberToObject(j, "compile_ns", (double)compile_ns);
    const char *origin = st_rows_text(st, ST_VAR_ORIGIN);
    cJSON_AddStringToObject(j, "origin", origin);
    cJSON_AddNumberToObject(j, "calls", (double)sp.vcalls);
    cJSON_AddNumberToObject(j, "calls_pct", pct);
    cJSON_AddNumberToObject(j, "signature_calls", (double)sp.calls);
    cJSON_AddNumberToObject(j, "timed_calls", (double)sp.vtimed);
    cJSON_AddNumberToObject(j, "timed_ns", (double)sp.vtimed_ns);
    ins_json_add_or_null(j, "variant_mean_ns", vmean);
    cJSON_AddNumberToObject(j, "original_timed_calls", (double)sp.otimed);
    ins_json_add_or_null(j, "original_mean_ns", omean);
    ins_json_add_or_null(j, "speedup", speedup);
    cJSON_AddItemToArray(list, j);
    char c0[24], c1[48], c2[24], c3[16], c4[32], c5[32], c6[32], c7[32];
    snprintf(c0, sizeof c0, "%lld", (long long)st_rows_int(st, ST_VAR_RUN));
    snprintf(c2, sizeof c2, "%lld", (long long)sp.vcalls);
    snprintf(c3, sizeof c3, "%.1f%%", pct);
    ins_fmt_ns(vmean, c4, sizeof c4);
    ins_fmt_ns(omean, c5, sizeof c5);
    ins_fmt_speedup(speedup, c6, sizeof c6);
    if (strcmp(origin, "loaded") == 0) /* placed from the store: no compile in this run */
      snprintf(c7, sizeof c7, "stored");
    else
      ins_fmt_ns(compile_ns > 0 ? (double)compile_ns : -1, c7, sizeof c7);
    ins_state_label(state, status, -1, c1, sizeof c1); /* SPEEDUP has its own column */
    const char *row[] = {c0,
                         c1,
                         c2,
                         c3,
                         c4,
                         c5,
                         c6,
                         c7,
                         st_rows_text(st, ST_VAR_LLVM),
                         st_rows_text(st, ST_VAR_CPU),
                         st_rows_text(st, ST_VAR_SIG),
                         st_rows_text(st, ST_VAR_NAME)};
    ins_table_row(t, row);
    ins_table_note(t, ins_reason_text(reason));
  }
  if ((rc = ins_rows_finish(db, st, step))) {
    st = NULL;
    cJSON_Delete(list);
    goto out;
  }
  st = NULL;
  if (n && uniform) {
    cJSON_AddStringToObject(doc, "llvm", llvm);
    cJSON_AddStringToObject(doc, "cpu", cpu);
    cJSON_AddNumberToObject(doc, "generator", generator);
  } else {
    cJSON_AddNullToObject(doc, "llvm");
    cJSON_AddNullToObject(doc, "cpu");
    cJSON_AddNullToObject(doc, "generator");
  }
  cJSON_AddItemToObject(doc, "variants", list);
  if (json) {
    rc = ins_json_emit(doc);
    doc = NULL;
    goto out;
  }
  printf("%s\n", title);
  if (n && uniform && *cpu) /* queued only: nothing was compiled for a CPU yet */
    printf("compiled with LLVM %s for %s (generator %d)\n", *llvm ? llvm : "?", cpu, generator);
  printf("\n");
  if (n)
    ins_table_print(t, stdout);
  else
    printf("no JIT variants in %s: " INS_NO_JIT_YET "\n", scope ? "this run" : "any run");
out:
  ins_table_free(t);
  cJSON_Delete(doc);
  st_rows_close(st);
  st_close(db);
  return rc;
}

const ins_cmd_t ins_cmd_variants = {
    .name = "variants",
    .main = cmd_variants,
    .synopsis = "[--db PATH] [RUN | --all] [--json]",
    .summary = "list the JIT variants of a run: state and why, calls served, speedup",
    .help = "RUN defaults to the newest run that has a JIT variant. A signature gets one\n"
            "(OPJIT_MODE=jit) when its calls (OPJIT_HOT_CALLS) or its sampled CPU time show\n"
            "that a variant repays its compile (OPJIT_HOT_PAYBACK). STATE is the signature's\n"
            "JIT state as the agent recorded it: serving (compiled in this run) or placed\n"
            "(stored by an earlier run), with the speedup; queued, compiling, deferred (code\n"
            "cache full), lost or tied (its duel before publication: slower, or no faster),\n"
            "demoted (slower on the program's calls, or most calls failed its guards), failed\n"
            "(compile error or a result that did not match the original's: blacklisted),\n"
            "invalidated or refused (a stored kernel dropped, or not placed), crashed (its\n"
            "kernel crashed the program, in this run or an earlier one). Under each row,\n"
            "the agent's reason: the figures its decision weighed (the duel's or the in-run\n"
            "judge's medians, the limit a shape passes). A run recorded before reasons were\n"
            "kept shows its variant's status (JSON: \"status\"; \"state\" and \"reason\" null).\n"
            "CALLS counts the calls the variant served and %CALLS their share of the\n"
            "signature's calls; VARIANT and ORIGINAL are the mean time per timed call of each,\n"
            "both warm (the original in short bursts of calls that run it, interleaved with\n"
            "the variant's), SPEEDUP their ratio. COMPILE\n"
            "is the compile time, or 'stored' for a kernel an earlier run stored and this one\n"
            "placed at start-up. LLVM and CPU are shown once above the table when every\n"
            "variant has the same.\n\n"
            "options:\n"
            "  --db PATH    the profile database\n"
            "  --all        every run's variants (newest run first)\n"
            "  --json       one JSON document\n"
            "  --fleet[=CONNINFO]  every machine's runs from the fleet store (OPJIT_FLEET;\n"
            "               with --limit only): opjit fleet --help\n"
            "  -h, --help   this help\n",
};
