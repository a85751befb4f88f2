/* SPDX-License-Identifier: MIT */
/* libFuzzer target: `opjit`'s readers on a database whose values are hostile but whose file is
 * sound, where byte mutations of the file (fuzz_inspect) rarely reach: rows deleted or
 * duplicated, any column of any row set to NULL, an extreme integer, a real, text or a blob.
 * The base is fuzz/corpus/inspect/four-runs.sqlite (four real runs) with every table rebuilt
 * without its constraints (a hostile writer keeps none), built once; each input is a list of
 * edits applied to a copy of it, then read by runs, top, variants, events and report
 * (inspect_run.h).
 * An edit: op (update one row, update every row, delete one row, duplicate one row), table (by
 * name order), column, row (by rowid order), and for an update the value: NULL, 0, -1, 1,
 * INT64_MIN, INT64_MAX, eight bytes as an integer, eight bytes as a double, a length byte and
 * that much text, or a blob. */
#include "inspect_run.h"

#include <sqlite3.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TABLES 32
#define MAX_EDITS 32

static const char *path;
static void *base;
static sqlite3_int64 base_len;
static char tables[MAX_TABLES][64], columns[MAX_TABLES][32][64];
static int ntables, ncolumns[MAX_TABLES];

static void must(int rc, sqlite3 *db, const char *what)
{
  if (rc != SQLITE_OK) {
    fprintf(stderr, "fuzz_inspect_edit: %s: %s\n", what, sqlite3_errmsg(db));
    abort();
  }
}

/* The base: the seed's tables copied without constraints or indexes, its user_version kept. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  path = fz_db_path("inspect-edit");
  sqlite3 *db;
  must(sqlite3_open(":memory:", &db), db, "open");
  must(sqlite3_exec(db, "ATTACH '" OPJIT_FUZZ_BASE "' AS s", NULL, NULL, NULL), db, "attach");
  sqlite3_stmt *st;
  must(sqlite3_prepare_v2(db, "SELECT name FROM s.sqlite_master WHERE type='table' ORDER BY name",
                          -1, &st, NULL),
       db, "tables");
  while (sqlite3_step(st) == SQLITE_ROW && ntables < MAX_TABLES)
    snprintf(tables[ntables++], sizeof tables[0], "%s", sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  for (int t = 0; t < ntables; t++) {
    char sql[256];
    snprintf(sql, sizeof sql, "CREATE TABLE main.\"%s\" AS SELECT * FROM s.\"%s\"", tables[t],
             tables[t]);
    must(sqlite3_exec(db, sql, NULL, NULL, NULL), db, sql);
    snprintf(sql, sizeof sql, "SELECT name FROM pragma_table_info('%s')", tables[t]);
    must(sqlite3_prepare_v2(db, sql, -1, &st, NULL), db, sql);
    while (sqlite3_step(st) == SQLITE_ROW && ncolumns[t] < 32)
      snprintf(columns[t][ncolumns[t]++], sizeof columns[0][0], "%s", sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
  must(sqlite3_prepare_v2(db, "PRAGMA s.user_version", -1, &st, NULL), db, "user_version");
  int version = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
  sqlite3_finalize(st);
  char sql[64];
  snprintf(sql, sizeof sql, "PRAGMA main.user_version=%d", version);
  must(sqlite3_exec(db, sql, NULL, NULL, NULL), db, sql);
  must(sqlite3_exec(db, "DETACH s", NULL, NULL, NULL), db, "detach");
  base = sqlite3_serialize(db, "main", &base_len, 0);
  if (!base)
    abort();
  sqlite3_close(db);
  return 0;
}

typedef struct {
  const uint8_t *p, *end;
} in_t;

static unsigned byte(in_t *in) { return in->p < in->end ? *in->p++ : 0; }

/* Binds the value the input describes to parameter 1 of st. */
static void bind_value(sqlite3_stmt *st, in_t *in)
{
  unsigned kind = byte(in) % 10;
  uint64_t u = 0;
  if (kind == 6 || kind == 7)
    for (int i = 0; i < 8; i++)
      u = u << 8 | byte(in);
  size_t n = kind >= 8 ? byte(in) : 0;
  if (n > (size_t)(in->end - in->p))
    n = (size_t)(in->end - in->p);
  double d;
  memcpy(&d, &u, 8);
  switch (kind) {
  case 0:
    sqlite3_bind_null(st, 1);
    break;
  case 1:
    sqlite3_bind_int64(st, 1, 0);
    break;
  case 2:
    sqlite3_bind_int64(st, 1, -1);
    break;
  case 3:
    sqlite3_bind_int64(st, 1, 1);
    break;
  case 4:
    sqlite3_bind_int64(st, 1, INT64_MIN);
    break;
  case 5:
    sqlite3_bind_int64(st, 1, INT64_MAX);
    break;
  case 6:
    sqlite3_bind_int64(st, 1, (int64_t)u);
    break;
  case 7:
    sqlite3_bind_double(st, 1, d);
    break;
  case 8:
    sqlite3_bind_text(st, 1, (const char *)in->p, (int)n, SQLITE_TRANSIENT);
    break;
  default:
    sqlite3_bind_blob(st, 1, in->p, (int)n, SQLITE_TRANSIENT);
    break;
  }
  in->p += n;
}

/* Applies the input's edits to db (each that SQLite refuses is skipped). */
static void edit(sqlite3 *db, in_t *in)
{
  for (int e = 0; e < MAX_EDITS && in->p < in->end; e++) {
    unsigned op = byte(in) % 4, t = byte(in) % (unsigned)ntables;
    unsigned c = byte(in) % (unsigned)ncolumns[t], row = byte(in);
    char sql[512], one[128];
    snprintf(one, sizeof one, "rowid=(SELECT rowid FROM \"%s\" ORDER BY rowid LIMIT 1 OFFSET %u)",
             tables[t], row);
    switch (op) {
    case 0:
    case 1:
      snprintf(sql, sizeof sql, "UPDATE \"%s\" SET \"%s\"=?1%s%s", tables[t], columns[t][c],
               op == 0 ? " WHERE " : "", op == 0 ? one : "");
      break;
    case 2:
      snprintf(sql, sizeof sql, "DELETE FROM \"%s\" WHERE %s", tables[t], one);
      break;
    default:
      snprintf(sql, sizeof sql, "INSERT INTO \"%s\" SELECT * FROM \"%s\" WHERE %s", tables[t],
               tables[t], one);
      break;
    }
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
      continue;
    if (op <= 1)
      bind_value(st, in);
    sqlite3_step(st);
    sqlite3_finalize(st);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(base, 1, (size_t)base_len, f) != (size_t)base_len || fclose(f) != 0)
    abort();
  sqlite3 *db;
  if (sqlite3_open(path, &db) != SQLITE_OK)
    abort();
  in_t in = {data, data + size};
  sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
  edit(db, &in);
  sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
  sqlite3_close(db);
  fz_read_and_remove(path);
  return 0;
}
