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

/* A read-only reader of an older schema sees what the newest one has: before 4, empty
 * variants and events tables; before 5, the runs' and variants' newer columns (NULL, or their
 * defaults) and an empty objects table. TEMP tables and views are looked up before the file's
 * own, shadow nothing in it and vanish with the connection, so every query reads alike.
 * Returns 0, or -1 after printing SQLite's message. */
static int compat_tables(st_db_t *db)
{
  static const char before4[] =
      "CREATE TEMP TABLE variants(run_id INTEGER, sig_id INTEGER, status TEXT, generator INTEGER,"
      " llvm TEXT, cpu TEXT, compile_ns INTEGER, calls INTEGER, timed_calls INTEGER,"
      " timed_ns INTEGER, origin TEXT, pre_calls INTEGER);"
      "CREATE TEMP TABLE events(id INTEGER PRIMARY KEY, run_id INTEGER, sig_id INTEGER,"
      " time_ns INTEGER, kind TEXT, detail TEXT);";
  static const char before5[] =
      "CREATE TEMP VIEW runs AS SELECT *, NULL AS warm_ns FROM main.runs;"
      "CREATE TEMP TABLE objects(id INTEGER PRIMARY KEY, sig_id INTEGER, cpu TEXT, llvm TEXT,"
      " generator INTEGER, symbol TEXT, checksum INTEGER, code BLOB, run_id INTEGER,"
      " created_ns INTEGER);";
  static const char variants4[] =
      "CREATE TEMP VIEW variants AS SELECT *, 'compiled' AS origin, 0 AS pre_calls"
      " FROM main.variants;";
  int version = 0;
  if (st_schema_version(db, &version) || version >= 5)
    return 0;
  sqlite3 *h = st_sqlite(db);
  if (sqlite3_exec(h, before5, NULL, NULL, NULL) == SQLITE_OK &&
      sqlite3_exec(h, version >= 4 ? variants4 : before4, NULL, NULL, NULL) == SQLITE_OK)
    return 0;
  fprintf(stderr, "opjit: cannot read the database: %s\n", sqlite3_errmsg(h));
  return -1;
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
  if (compat_tables(*db)) {
    st_close(*db);
    *db = NULL;
    return 1;
  }
  return 0;
}

sqlite3_stmt *ins_db_prepare(st_db_t *db, const char *sql)
{
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(st_sqlite(db), sql, -1, &st, NULL) != SQLITE_OK) {
    fprintf(stderr, "opjit: cannot query the database: %s\n", sqlite3_errmsg(st_sqlite(db)));
    return NULL;
  }
  return st;
}

int ins_db_finish(st_db_t *db, sqlite3_stmt *st, int last_rc)
{
  sqlite3_finalize(st);
  if (last_rc == SQLITE_DONE)
    return 0;
  fprintf(stderr, "opjit: cannot read the database: %s\n", sqlite3_errmsg(st_sqlite(db)));
  return 1;
}

const char *ins_col_text(sqlite3_stmt *st, int i)
{
  const unsigned char *s = sqlite3_column_text(st, i);
  return s ? (const char *)s : "";
}

void ins_json_add_col_int(cJSON *o, const char *key, sqlite3_stmt *st, int i)
{
  if (sqlite3_column_type(st, i) == SQLITE_NULL)
    cJSON_AddNullToObject(o, key);
  else
    cJSON_AddNumberToObject(o, key, (double)sqlite3_column_int64(st, i));
}

int ins_newest_run(st_db_t *db, enum ins_has what, int64_t *run)
{
  /* The table a run's rows are in, and the message around the database's path. */
  static const struct { const char *sql, *before, *after; } has[] = {
      [INS_HAS_CALLS] = {"SELECT max(run_id) FROM run_sigs", "no run in ",
                         " has recorded an operator call yet"},
      [INS_HAS_STACKS] = {"SELECT max(run_id) FROM run_stacks", "no run in ",
                          " has sampled stacks yet"},
      [INS_HAS_VARIANTS] = {"SELECT max(run_id) FROM variants", "no JIT variants yet in ",
                            ": " INS_NO_JIT_YET},
      [INS_HAS_EVENTS] = {"SELECT max(run_id) FROM events", "no JIT events yet in ",
                          ": " INS_NO_JIT_YET},
  };
  sqlite3_stmt *st = ins_db_prepare(db, has[what].sql);
  if (!st)
    return INS_EXIT_FAIL;
  int rc = sqlite3_step(st);
  *run = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  if (rc == SQLITE_ROW)
    rc = sqlite3_step(st);
  if (ins_db_finish(db, st, rc))
    return INS_EXIT_FAIL;
  if (!*run)
    fprintf(stderr, "opjit: %s%s%s\n", has[what].before,
            sqlite3_db_filename(st_sqlite(db), "main"), has[what].after);
  return *run ? 0 : INS_EXIT_FAIL;
}

int ins_sig_resolve(st_db_t *db, const char *prefix, char *sig)
{
  enum { MAX_CANDIDATES = 20 }; /* listed for an ambiguous prefix */
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

/* Per run, a signature's calls split between the original library (run_sigs' timed calls are
 * the original's only) and its JIT variant (variants.calls, clamped: the two rows are written
 * in separate transactions), each part estimated with its own mean; a part without timed calls
 * borrows the other's mean. */
const char ins_sql_sig_totals[] =
    "WITH split AS (SELECT rs.run_id, rs.sig_id, rs.calls, rs.timed_calls AS otimed,"
    "  rs.timed_ns AS otimed_ns, min(coalesce(v.calls, 0), rs.calls) AS vcalls,"
    "  coalesce(v.timed_calls, 0) AS vtimed, coalesce(v.timed_ns, 0) AS vtimed_ns,"
    "  v.status AS status"
    "  FROM run_sigs rs LEFT JOIN variants v ON v.run_id = rs.run_id AND v.sig_id = rs.sig_id"
    "  WHERE ?1 = 0 OR rs.run_id = ?1),"
    " means AS (SELECT *, calls - vcalls AS ocalls,"
    "  CASE WHEN otimed > 0 THEN CAST(otimed_ns AS REAL) / otimed END AS omean,"
    "  CASE WHEN vtimed > 0 THEN CAST(vtimed_ns AS REAL) / vtimed END AS vmean FROM split)"
    " SELECT s.sig, s.name, s.op, s.params, sum(m.calls), sum(m.otimed), sum(m.otimed_ns),"
    " sum(CASE WHEN m.otimed > 0 THEN CAST(m.ocalls AS REAL) * m.otimed_ns / m.otimed"
    "  ELSE m.ocalls * coalesce(m.vmean, 0) END"
    "  + CASE WHEN m.vtimed > 0 THEN CAST(m.vcalls AS REAL) * m.vtimed_ns / m.vtimed"
    "  ELSE m.vcalls * coalesce(m.omean, 0) END) AS est,"
    " (SELECT coalesce(sum(p.samples), 0) FROM run_pcs p"
    "  WHERE p.sig_id = s.id AND (?1 = 0 OR p.run_id = ?1)),"
    " sum(m.vcalls), sum(m.vtimed), sum(m.vtimed_ns),"
    " sum(CASE WHEN m.omean IS NOT NULL AND m.vmean IS NOT NULL"
    "  THEN m.vcalls * (m.omean - m.vmean) ELSE 0 END),"
    " (SELECT v.status FROM variants v WHERE v.sig_id = s.id AND (?1 = 0 OR v.run_id = ?1)"
    "  ORDER BY v.run_id DESC LIMIT 1),"
    " count(m.status)"
    " FROM means m JOIN signatures s ON s.id = m.sig_id"
    " GROUP BY s.id ORDER BY est DESC, sum(m.calls) DESC, s.sig";

cJSON *ins_json_doc(st_db_t *db, int64_t run)
{
  cJSON *doc = cJSON_CreateObject();
  if (run)
    cJSON_AddNumberToObject(doc, "run", (double)run);
  else
    cJSON_AddNullToObject(doc, "run");
  cJSON_AddStringToObject(doc, "database", sqlite3_db_filename(st_sqlite(db), "main"));
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
  sqlite3_stmt *st = ins_db_prepare(db, "SELECT count(*) FROM runs WHERE id = ?");
  if (!st)
    return -1;
  sqlite3_bind_int64(st, 1, id);
  int found = 0, rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    found = sqlite3_column_int(st, 0) > 0;
    rc = sqlite3_step(st);
  }
  if (ins_db_finish(db, st, rc))
    return -1;
  if (!found)
    fprintf(stderr, "opjit: no run %lld in %s (see opjit runs)\n", (long long)id,
            sqlite3_db_filename(st_sqlite(db), "main"));
  return found;
}

int ins_run_title(st_db_t *db, int64_t run, int width, char *buf, size_t len, int64_t *start_ns)
{
  sqlite3_stmt *st = ins_db_prepare(db, "SELECT p.exe, r.argv, r.status, r.pid, r.start_ns"
                                        " FROM runs r JOIN programs p ON p.id = r.program_id"
                                        " WHERE r.id = ?");
  if (!st)
    return INS_EXIT_FAIL;
  sqlite3_bind_int64(st, 1, run);
  snprintf(buf, len, "run %lld", (long long)run);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    char prog[512], when[32];
    int64_t start = sqlite3_column_int64(st, 4);
    ins_program_label(ins_col_text(st, 0), ins_col_text(st, 1), width, prog, sizeof prog);
    snprintf(buf, len, "run %lld: %s (%s, started %s)", (long long)run, prog,
             ins_run_status(ins_col_text(st, 2), sqlite3_column_int64(st, 3), start),
             ins_fmt_time(start, when, sizeof when));
    if (start_ns)
      *start_ns = start;
    rc = sqlite3_step(st);
  }
  return ins_db_finish(db, st, rc);
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
  return started > start_ns + 2000000000 ? "lost" : status;
}

int64_t ins_run_wall_ns(int64_t start_ns, int64_t flush_ns, int64_t end_ns)
{
  int64_t last = end_ns ? end_ns : flush_ns;
  return last ? last - start_ns : -1;
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

double ins_pct(int64_t part, int64_t whole)
{
  return whole > 0 ? 100.0 * (double)part / (double)whole : 0;
}

void ins_sampling_add(ins_sampling_t *s, const char *text)
{
  cJSON *j = cJSON_Parse(text), *note;
  const char *mode = cJSON_GetStringValue(cJSON_GetObjectItem(j, "mode"));
  const char *event = cJSON_GetStringValue(cJSON_GetObjectItem(j, "event"));
  int64_t hz = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "hz"));
  if (!cJSON_IsObject(j)) { /* NULL or not a summary: nothing to add */
    cJSON_Delete(j);
    return;
  }
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
    s->samples += (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "samples"));
    s->lost += (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "lost"));
  }
  cJSON_Delete(j);
}

int ins_sampling_read(st_db_t *db, int64_t run, ins_sampling_t *s)
{
  *s = (ins_sampling_t){.mode = "off", .notes = cJSON_CreateArray()};
  sqlite3_stmt *st = ins_db_prepare(
      db, "SELECT sampling FROM runs WHERE sampling IS NOT NULL AND (?1 = 0 OR id = ?1)"
          " ORDER BY id");
  if (!st)
    return INS_EXIT_FAIL;
  sqlite3_bind_int64(st, 1, run);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    ins_sampling_add(s, ins_col_text(st, 0));
  if (ins_db_finish(db, st, rc) ||
      !(st = ins_db_prepare(db, "SELECT coalesce(sum(samples), 0),"
                                " coalesce(sum(CASE WHEN sig_id = 0 THEN samples END), 0)"
                                " FROM run_pcs WHERE ?1 = 0 OR run_id = ?1")))
    return INS_EXIT_FAIL;
  sqlite3_bind_int64(st, 1, run);
  if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    s->total = sqlite3_column_int64(st, 0);
    s->host = sqlite3_column_int64(st, 1);
    rc = sqlite3_step(st);
  }
  return ins_db_finish(db, st, rc);
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
  snprintf(buf, len, "%s %s%s, %lld samples (%lld lost)", s->mode, s->event, rate,
           (long long)s->samples, (long long)s->lost);
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
