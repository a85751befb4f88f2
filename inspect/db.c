/* SPDX-License-Identifier: MIT */
/* Opening the profile database for the `opjit` command, and the meaning of a run row. */
#include "db.h"

#include "agent/opt.h"
#include "cmd.h"
#include "table.h"
#include "variants.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *ins_getenv(const char *name) { return getenv(name); }

int ins_db_path(const char *opt, char *buf, size_t len)
{
  if (opt && !*opt) { /* named no file: "opjit:  holds no opjit profile yet" */
    fputs("opjit: --db wants a path (leave it out for the default database)\n", stderr);
    return -1;
  }
  if (opt) {
    if (snprintf(buf, len, "%s", opt) < (int)len)
      return 0;
    fprintf(stderr, "opjit: database path too long: %s\n", opt);
    return -1;
  }
  ag_opts_t o;
  ag_opts_parse(&o, ins_getenv, NULL); /* bad values are doctor's business */
  int rc = ag_opts_db_path(&o, ins_getenv, buf, len);
  ag_opts_free(&o);
  if (rc)
    fputs("opjit: no database path: set OPJIT_DB, XDG_CACHE_HOME or HOME, or pass --db\n",
          stderr);
  return rc;
}

int ins_db_open(const char *opt, int flags, int busy_ms, st_db_t **db)
{
  char path[4096], err[1024];
  if (ins_db_path(opt, path, sizeof path))
    return 1;
  if (st_open(path, flags, busy_ms, db, err, sizeof err) != ST_OK) {
    fprintf(stderr, "opjit: %s\n", err);
    return 1;
  }
  return 0;
}

st_rows_t *ins_query(st_db_t *db, enum st_query q)
{
  st_rows_t *r;
  if (st_query(db, q, &r) != ST_OK) {
    ins_db_failed(db, "query");
    return NULL;
  }
  return r;
}

void ins_db_failed(st_db_t *db, const char *verb)
{
  fprintf(stderr, "opjit: cannot %s the database: %s\n", verb, st_errmsg(db));
  if (st_damaged(db))
    fprintf(stderr, "opjit: %s is damaged: opjit doctor checks it; " ST_DAMAGED_ADVICE "\n",
            st_path(db));
}

int ins_rows_finish(st_db_t *db, st_rows_t *r, int last)
{
  st_rows_close(r);
  if (last == 0)
    return 0;
  ins_db_failed(db, "read");
  return 1;
}

void ins_json_add_int(cJSON *o, const char *key, int64_t v)
{
  if (v > -(INT64_C(1) << 53) && v < INT64_C(1) << 53) {
    cJSON_AddNumberToObject(o, key, (double)v);
    return;
  }
  char digits[24];
  snprintf(digits, sizeof digits, "%lld", (long long)v);
  cJSON_AddRawToObject(o, key, digits);
}

void ins_json_add_col_int(cJSON *o, const char *key, const st_rows_t *r, int i)
{
  if (st_rows_type(r, i) == ST_COL_NULL)
    cJSON_AddNullToObject(o, key);
  else
    ins_json_add_int(o, key, st_rows_int(r, i));
}

int ins_newest_run(st_db_t *db, enum ins_has what, int64_t *run)
{
  /* The table a run's rows are in, and the message around the database's path. */
  static const struct {
    enum st_query query;
    const char *before, *after;
  } has[] = {
      [INS_HAS_CALLS] = {ST_Q_NEWEST_CALL_RUN, "no run in ", " has recorded an operator call yet"},
      [INS_HAS_STACKS] = {ST_Q_NEWEST_STACK_RUN, "no run in ", " has sampled stacks yet"},
      [INS_HAS_VARIANTS] = {ST_Q_NEWEST_VARIANT_RUN, "no JIT variants yet in ",
                            ": " INS_NO_JIT_YET},
      [INS_HAS_EVENTS] = {ST_Q_NEWEST_EVENT_RUN, "no JIT events yet in ", ": " INS_NO_JIT_YET},
  };
  st_rows_t *st = ins_query(db, has[what].query);
  if (!st)
    return INS_EXIT_FAIL;
  int rc = st_rows_next(st);
  *run = rc == 1 ? st_rows_int(st, 0) : 0;
  if (rc == 1)
    rc = st_rows_next(st);
  if (ins_rows_finish(db, st, rc))
    return INS_EXIT_FAIL;
  if (!*run)
    fprintf(stderr, "opjit: %s%s%s\n", has[what].before, st_path(db), has[what].after);
  return *run ? 0 : INS_EXIT_FAIL;
}

int ins_sig_resolve(st_db_t *db, const char *prefix, char *sig)
{
  enum { MAX_CANDIDATES = 20 }; /* listed for an ambiguous prefix */
  st_rows_t *st = ins_query(db, ST_Q_SIG_PREFIX);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_text(st, 1, prefix);
  st_rows_bind_int(st, 2, MAX_CANDIDATES);
  int rc, n = 0;
  while ((rc = st_rows_next(st)) == 1) {
    int64_t total = st_rows_int(st, 2);
    if (n == 0 && total == 1)
      snprintf(sig, 17, "%s", st_rows_text(st, 0));
    else {
      if (n == 0)
        fprintf(stderr, "opjit: signature prefix '%s' is ambiguous: %lld signatures match\n",
                prefix, (long long)total);
      fprintf(stderr, "  %s  %s\n", st_rows_text(st, 0), st_rows_text(st, 1));
      if (n == MAX_CANDIDATES - 1 && total > MAX_CANDIDATES)
        fprintf(stderr, "  ... and %lld more\n", (long long)(total - MAX_CANDIDATES));
    }
    n++;
  }
  if (ins_rows_finish(db, st, rc))
    return INS_EXIT_FAIL;
  if (!n)
    fprintf(stderr, "opjit: no signature %s%s in %s (see opjit top)\n", prefix,
            strlen(prefix) < 16 ? "..." : "", st_path(db));
  return n == 1 ? INS_EXIT_OK : INS_EXIT_FAIL;
}

cJSON *ins_json_doc(st_db_t *db, int64_t run)
{
  cJSON *doc = cJSON_CreateObject();
  if (run)
    cJSON_AddNumberToObject(doc, "run", (double)run);
  else
    cJSON_AddNullToObject(doc, "run");
  cJSON_AddStringToObject(doc, "database", st_path(db));
  return doc;
}

int ins_pick_run(st_db_t *db, int64_t run, int all, enum ins_has what, int64_t *scope)
{
  *scope = run;
  if (run)
    return ins_run_exists(db, run) != 1;
  return !all && ins_newest_run(db, what, scope) != 0;
}

int ins_run_exists(st_db_t *db, int64_t id)
{
  st_rows_t *st = ins_query(db, ST_Q_RUN_EXISTS);
  if (!st)
    return -1;
  st_rows_bind_int(st, 1, id);
  int found = 0, rc = st_rows_next(st);
  if (rc == 1) {
    found = (int)st_rows_int(st, 0) > 0;
    rc = st_rows_next(st);
  }
  if (ins_rows_finish(db, st, rc))
    return -1;
  if (!found)
    fprintf(stderr, "opjit: no run %lld in %s (see opjit runs)\n", (long long)id, st_path(db));
  return found;
}

int ins_run_title(st_db_t *db, int64_t run, int width, char *buf, size_t len, int64_t *start_ns)
{
  st_rows_t *st = ins_query(db, ST_Q_RUN);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, run);
  snprintf(buf, len, "run %lld", (long long)run);
  int rc = st_rows_next(st);
  if (rc == 1) {
    char prog[512], when[32];
    int64_t start = st_rows_int(st, ST_RUN_START_NS);
    ins_program_label(st_rows_text(st, ST_RUN_EXE), st_rows_text(st, ST_RUN_ARGV), width, prog,
                      sizeof prog);
    snprintf(buf, len, "run %lld: %s (%s, started %s)", (long long)run, prog,
             ins_run_status(st_rows_text(st, ST_RUN_STATUS), st_rows_int(st, ST_RUN_PID), start),
             ins_fmt_time(start, when, sizeof when));
    if (start_ns)
      *start_ns = start;
    rc = st_rows_next(st);
  }
  return ins_rows_finish(db, st, rc);
}

/* The CLOCK_REALTIME instant process pid started, in ns (to about a second), or -1. */
static int64_t proc_start_ns(int64_t pid)
{
  char path[64], buf[1024];
  unsigned long long start_ticks = 0, btime = 0;
  snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  for (int field = 2; p && field < 22; field++) /* starttime is field 22 */
    p = strchr(p + 1, ' ');
  if (!p || sscanf(p, " %llu", &start_ticks) != 1 || !(f = fopen("/proc/stat", "re")))
    return -1;
  while (fgets(buf, sizeof buf, f) && sscanf(buf, "btime %llu", &btime) != 1)
    ;
  fclose(f);
  long hz = sysconf(_SC_CLK_TCK);
  if (!btime || hz <= 0)
    return -1;
  return (int64_t)btime * 1000000000 + (int64_t)(start_ticks * 1000000000ull / (unsigned long)hz);
}

const char *ins_run_status(const char *status, int64_t pid, int64_t start_ns)
{
  if (strcmp(status, "running") != 0)
    return status;
  if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno != EPERM))
    return "lost";
  /* The pid is taken: by the run's process only if that process started before the run did
   * (the run starts at its first call). Boot time has whole-second precision: allow 2 s. */
  int64_t started = proc_start_ns(pid);
  return started > ins_sat_add(start_ns, 2000000000) ? "lost" : status;
}

int64_t ins_run_wall_ns(int64_t start_ns, int64_t flush_ns, int64_t end_ns)
{
  int64_t last = end_ns ? end_ns : flush_ns, wall;
  if (!last)
    return -1;
  return __builtin_sub_overflow(last, start_ns, &wall) ? -1 : wall; /* hostile times: unknown */
}

/* Appends s at *at, never past len - 1 bytes. */
static void append(char *buf, size_t len, size_t *at, const char *s)
{
  size_t n = strlen(s);
  if (*at + n >= len)
    n = len - 1 - *at;
  memcpy(buf + *at, s, n);
  buf[*at += n] = 0;
}

/* Byte offset of character n of UTF-8 string s (its length when s is shorter). */
static size_t char_offset(const char *s, size_t n)
{
  size_t i = 0;
  for (; s[i]; i++)
    if (((unsigned char)s[i] & 0xc0) != 0x80 && n-- == 0)
      break;
  return i;
}

void ins_program_label(const char *exe, const char *argv_json, int width, char *buf, size_t len)
{
  size_t at = 0;
  if (!exe || !*exe)
    exe = INS_NO_PROGRAM;
  const char *slash = strrchr(exe, '/');
  buf[0] = 0;
  append(buf, len, &at, slash ? slash + 1 : exe);
  cJSON *argv = cJSON_Parse(argv_json);
  for (int i = 1; i < cJSON_GetArraySize(argv); i++) {
    const char *arg = cJSON_GetStringValue(cJSON_GetArrayItem(argv, i));
    append(buf, len, &at, " ");
    append(buf, len, &at, arg ? arg : "?");
  }
  cJSON_Delete(argv);
  for (char *p = buf; *p; p++) /* one line: the newlines of a -c script become spaces */
    if (*p == '\n' || *p == '\t' || *p == '\r')
      *p = ' ';
  if (width <= 0)
    return;
  size_t cut = char_offset(buf, (size_t)width - 1);
  if (!buf[cut] || !buf[cut + char_offset(buf + cut, 1)])
    return; /* fits */
  if (cut + sizeof "…" <= len)
    memcpy(buf + cut, "…", sizeof "…");
  else
    buf[cut] = 0;
}

int64_t ins_sat_add(int64_t a, int64_t b)
{
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}

int64_t ins_sat_sub(int64_t a, int64_t b)
{
  int64_t r;
  return __builtin_sub_overflow(a, b, &r) ? (b < 0 ? INT64_MAX : INT64_MIN) : r;
}

double ins_pct(int64_t part, int64_t whole)
{
  return whole > 0 ? 100.0 * (double)part / (double)whole : 0;
}

/* Member k of o as a count: 0 unless a number in [0, 2^62] (a summary no agent wrote). */
static int64_t json_count(const cJSON *o, const char *k)
{
  const cJSON *v = cJSON_GetObjectItem(o, k);
  double d = cJSON_IsNumber(v) ? cJSON_GetNumberValue(v) : 0;
  return d >= 0 && d <= 4611686018427387904.0 ? (int64_t)d : 0;
}

void ins_sampling_add(ins_sampling_t *s, const char *text)
{
  cJSON *j = cJSON_Parse(text), *note;
  if (!cJSON_IsObject(j)) { /* NULL or not a summary: nothing to add */
    cJSON_Delete(j);
    return;
  }
  const char *mode = cJSON_GetStringValue(cJSON_GetObjectItem(j, "mode"));
  const char *event = cJSON_GetStringValue(cJSON_GetObjectItem(j, "event"));
  int64_t hz = json_count(j, "hz");
  s->runs++;
  cJSON_ArrayForEach(note, cJSON_GetObjectItem(j, "notes"))
  {
    const char *n = cJSON_GetStringValue(note), *seen = NULL;
    const cJSON *old;
    cJSON_ArrayForEach(old, s->notes)
      if (n && strcmp(n, old->valuestring) == 0)
        seen = n;
    if (n && !seen && s->notes)
      cJSON_AddItemToArray(s->notes, cJSON_CreateString(n));
  }
  if (mode && strcmp(mode, "off") != 0) {
    event = event ? event : "?";
    if (!s->sampled++) {
      snprintf(s->mode, sizeof s->mode, "%s", mode);
      snprintf(s->event, sizeof s->event, "%s", event);
      s->hz = hz;
    } else if (strcmp(s->mode, mode) || strcmp(s->event, event) || s->hz != hz) {
      snprintf(s->mode, sizeof s->mode, "mixed");
      snprintf(s->event, sizeof s->event, "mixed");
      s->hz = 0;
    }
    s->samples = ins_sat_add(s->samples, json_count(j, "samples"));
    s->lost = ins_sat_add(s->lost, json_count(j, "lost"));
  }
  cJSON_Delete(j);
}

int ins_sampling_read(st_db_t *db, int64_t run, ins_sampling_t *s)
{
  *s = (ins_sampling_t){.mode = "off", .notes = cJSON_CreateArray()};
  st_rows_t *st = ins_query(db, ST_Q_RUN_SAMPLINGS);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, run);
  int rc;
  while ((rc = st_rows_next(st)) == 1)
    ins_sampling_add(s, st_rows_text(st, 0));
  if (ins_rows_finish(db, st, rc) || !(st = ins_query(db, ST_Q_SAMPLE_TOTALS)))
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, run);
  if ((rc = st_rows_next(st)) == 1) {
    s->total = st_rows_int(st, 0);
    s->host = st_rows_int(st, 1);
    rc = st_rows_next(st);
  }
  return ins_rows_finish(db, st, rc);
}

void ins_sampling_free(ins_sampling_t *s)
{
  cJSON_Delete(s->notes);
  s->notes = NULL;
}

const char *ins_sampling_describe(const ins_sampling_t *s, char *buf, size_t len)
{
  char rate[32] = "";
  if (!s->sampled) {
    snprintf(buf, len, "off");
    return buf;
  }
  if (s->hz > 0)
    snprintf(rate, sizeof rate, " at %lld Hz", (long long)s->hz);
  int same = strcmp(s->mode, s->event) == 0; /* "timer": mode and event alike */
  snprintf(buf, len, "%s%s%s%s, %lld samples (%lld lost)", s->mode, same ? "" : " ",
           same ? "" : s->event, rate, (long long)s->samples, (long long)s->lost);
  return buf;
}

cJSON *ins_sampling_json(const ins_sampling_t *s)
{
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "runs", (double)s->runs);
  cJSON_AddNumberToObject(j, "sampled_runs", (double)s->sampled);
  cJSON_AddStringToObject(j, "mode", s->mode);
  cJSON_AddStringToObject(j, "event", s->event);
  cJSON_AddNumberToObject(j, "hz", (double)s->hz);
  cJSON_AddNumberToObject(j, "samples", (double)s->samples);
  cJSON_AddNumberToObject(j, "lost", (double)s->lost);
  cJSON_AddItemToObject(j, "notes", cJSON_Duplicate(s->notes, 1));
  cJSON_AddNumberToObject(j, "attributed", (double)s->total);
  cJSON_AddNumberToObject(j, "outside_operators", (double)s->host);
  cJSON_AddNumberToObject(j, "inside_pct", ins_pct(s->total - s->host, s->total));
  cJSON_AddNumberToObject(j, "program_pct", ins_pct(s->host, s->total));
  return j;
}
