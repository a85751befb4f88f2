/* SPDX-License-Identifier: MIT */
/* The unit tests' scratch folder and store file (fixture.h). */
#include "fixture.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

char fx_dir[64], fx_db[128];

/* The process that made fx_dir: a test that skips after fx_setup never reaches fx_teardown
 * (Criterion runs no .fini after cr_skip_test), so the folder goes at that process's exit. */
static pid_t fx_owner;

static void fx_remove_at_exit(void)
{
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf %s", fx_dir);
  if (fx_owner == getpid() && fx_dir[0] && system(cmd) != 0)
    fprintf(stderr, "fixture: could not remove %s\n", fx_dir);
}

void fx_setup(void)
{
  snprintf(fx_dir, sizeof fx_dir, "/tmp/opjit-test-XXXXXX");
  cr_assert_not_null(mkdtemp(fx_dir));
  snprintf(fx_db, sizeof fx_db, "%s/p.db", fx_dir);
  if (!fx_owner)
    atexit(fx_remove_at_exit);
  fx_owner = getpid();
}

void fx_teardown(void)
{
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf %s", fx_dir);
  cr_assert_eq(system(cmd), 0);
}

st_db_t *fx_open(const char *path, int flags)
{
  st_db_t *db = NULL;
  char err[512] = "";
  cr_assert_eq(st_open(path, flags, 1000, &db, err, sizeof err), ST_OK, "%s: %s", path, err);
  return db;
}

int64_t fx_query(st_db_t *db, const char *sql)
{
  sqlite3_stmt *st;
  cr_assert_eq(sqlite3_prepare_v2(st_sqlite(db), sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
               sqlite3_errmsg(st_sqlite(db)));
  int64_t v = -1;
  if (sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

void fx_damage_root(const char *path, const char *table)
{
  sqlite3 *db;
  sqlite3_stmt *st;
  char sql[160];
  int64_t v[2] = {0, 0};
  snprintf(sql, sizeof sql, "SELECT (SELECT page_size FROM pragma_page_size), (SELECT rootpage "
                            "FROM sqlite_master WHERE name='%s')", table);
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK, "%s", path);
  cr_assert_eq(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL), SQLITE_OK,
               "%s", sqlite3_errmsg(db));
  cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
  if (sqlite3_step(st) == SQLITE_ROW)
    v[0] = sqlite3_column_int64(st, 0), v[1] = sqlite3_column_int64(st, 1);
  sqlite3_finalize(st);
  sqlite3_close(db);
  cr_assert_gt(v[1], 1, "%s's root page in %s", table, path);
  FILE *f = fopen(path, "r+b");
  cr_assert_not_null(f, "%s", path);
  cr_assert_eq(fseek(f, (long)((v[1] - 1) * v[0]), SEEK_SET), 0);
  fwrite("\x0d\xff\xff\xff\xff\xff\xff\xff", 1, 8, f);
  fclose(f);
}
