/* SPDX-License-Identifier: MIT */
/* Opening the profile database for the `opjit` command, and the meaning of a run row. */
#include "db.h"

#include "agent/opt.h"

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
