/* SPDX-License-Identifier: MIT */
/* `opjit events`: the life of a run's JIT variants in order: queued, published, verified,
 * verify-failed, demoted, failed; each at its time since the run started. Default: the newest
 * run that has an event. */
#include "cmd.h"
#include "db.h"
#include "table.h"
#include "variants.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define PROGRAM_WIDTH 60

static int cmd_events(int argc, char **argv)
{
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"sig", required_argument, NULL, 's'},
                                           {"kind", required_argument, NULL, 'k'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"all", no_argument, NULL, 'a'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL, *kind = NULL;
  char prefix[17] = "", sig[17] = "";
  int json = 0, all = 0, rc;
  long run = 0;
  for (int c; (c = getopt_long(argc, argv, "d:s:k:jah", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
    case 's':
      if ((rc = ins_parse_sig(&ins_cmd_events, optarg, prefix)))
        return rc;
      break;
    case 'k': kind = optarg; break;
    case 'j': json = 1; break;
    case 'a': all = 1; break;
    case 'h': return ins_help(&ins_cmd_events);
    default: return ins_bad_option(&ins_cmd_events, argv);
    }
  }
  if ((rc = ins_parse_run(&ins_cmd_events, argc, argv, all, &run)))
    return rc;
  if (kind) {
    size_t i = 0;
    while (ins_event_kinds[i] && strcmp(ins_event_kinds[i], kind) != 0)
      i++;
    if (!ins_event_kinds[i]) {
      char known[256] = "";
      for (i = 0; ins_event_kinds[i]; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                 ins_event_kinds[i]);
      return ins_usage_error(&ins_cmd_events, "no event kind '%s' (%s)", kind, known);
    }
  }

  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  int64_t scope = run;
  char title[1024] = "all runs";
  st_rows_t *st = NULL;
  cJSON *doc = NULL;
  ins_table_t *t = NULL;
  rc = INS_EXIT_FAIL;
  if (ins_pick_run(db, run, all, INS_HAS_EVENTS, &scope) ||
      (*prefix && ins_sig_resolve(db, prefix, sig)) ||
      (scope && ins_run_title(db, scope, PROGRAM_WIDTH, title, sizeof title, NULL)))
    goto out;
  st = ins_query(db, ST_Q_EVENTS);
  if (!st)
    goto out;
  st_rows_bind_int(st, 1, scope);
  st_rows_bind_text(st, 2, sig);
  if (kind)
    st_rows_bind_text(st, 3, kind);
  doc = ins_json_doc(db, scope);
  cJSON *list = cJSON_AddArrayToObject(doc, "events");
  static const char *const head[] = {"RUN", "TIME", "KIND", "SIG", "NAME", "DETAIL"};
  t = ins_table_new_shown("rrllll", head, all ? UINT32_MAX : ~1u); /* RUN only with --all */
  int step, n = 0;
  while ((step = st_rows_next(st)) == 1) {
    int64_t id = st_rows_int(st, ST_EVENT_RUN), rel = st_rows_int(st, ST_EVENT_OFFSET_NS);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "run", (double)id);
    cJSON_AddNumberToObject(j, "time_ns", (double)st_rows_int(st, ST_EVENT_TIME_NS));
    cJSON_AddNumberToObject(j, "time_ms", (double)rel / 1e6);
    cJSON_AddStringToObject(j, "kind", st_rows_text(st, ST_EVENT_KIND));
    cJSON_AddStringToObject(j, "sig", st_rows_text(st, ST_EVENT_SIG));
    cJSON_AddStringToObject(j, "name", st_rows_text(st, ST_EVENT_NAME));
    cJSON_AddStringToObject(j, "detail", st_rows_text(st, ST_EVENT_DETAIL));
    cJSON_AddItemToArray(list, j);
    char c0[24], c1[32];
    snprintf(c0, sizeof c0, "%lld", (long long)id);
    snprintf(c1, sizeof c1, "%.1f ms", (double)rel / 1e6);
    const char *row[] = {c0,
                         c1,
                         st_rows_text(st, ST_EVENT_KIND),
                         st_rows_text(st, ST_EVENT_SIG),
                         st_rows_text(st, ST_EVENT_NAME),
                         st_rows_text(st, ST_EVENT_DETAIL)};
    ins_table_row(t, row);
    n++;
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
  printf("%s\n\n", title);
  if (n)
    ins_table_print(t, stdout);
  else if (*sig || kind)
    printf("no matching events\n");
  else
    printf("no JIT events: " INS_NO_JIT_YET "\n");
out:
  ins_table_free(t);
  cJSON_Delete(doc);
  st_rows_close(st);
  st_close(db);
  return rc;
}

const ins_cmd_t ins_cmd_events = {
    .name = "events",
    .main = cmd_events,
    .synopsis = "[--db PATH] [RUN | --all] [--sig SIG] [--kind KIND] [--json]",
    .summary = "show the JIT's events of a run in order (queued, published, verified, ...)",
    .help = "RUN defaults to the newest run that has an event. TIME is since the run started\n"
            "(its first operator call). KIND is queued (the signature got hot), published (its\n"
            "variant serves calls; DETAIL gives the compile time), verified, verify-failed (a\n"
            "result differed from the original library's: the variant is dropped), demoted\n"
            "(measured slower than the original), failed (LLVM could not compile it), evicted\n"
            "(its code made room in a full code cache: OPJIT_CODE_CACHE_MB) or deferred (no\n"
            "room in the code cache yet: it stays on the original for now).\n\n"
            "options:\n"
            "  --db PATH    the profile database\n"
            "  --all        every run's events, oldest run first\n"
            "  --sig SIG    only this signature (id or unique prefix, as opjit top shows it)\n"
            "  --kind KIND  only events of this kind\n"
            "  --json       one JSON document\n"
            "  -h, --help   this help\n",
};
