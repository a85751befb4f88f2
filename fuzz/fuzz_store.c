/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the store's open and migration (store/store.h) on a hostile file, then
 * the reads the agent makes of it at start-up: its program's profile with the stored kernels,
 * the machine model. Input: the database file's bytes (fuzz/corpus/store holds real opjit
 * profiles of every schema version, vacuumed to small pages). The program and CPU asked for
 * are the first ones the file names, so a profile is actually read. */
#include "store/query.h"
#include "store/store.h"

#include <sqlite3.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], path[96];

static void remove_dir(void) { rmdir(dir); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/opjit-fuzz-store.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir))
    abort();
  snprintf(path, sizeof path, "%s/p.db", dir);
  atexit(remove_dir);
  return 0;
}

static void remove_files(void)
{
  static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
  char p[128];
  for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
    snprintf(p, sizeof p, "%s%s", path, suffix[i]);
    unlink(p);
  }
}

/* Column c of the first row of sql into buf ("" when there is none). */
static void first(st_db_t *db, const char *sql, int c, char *buf, size_t len)
{
  sqlite3_stmt *st;
  buf[0] = 0;
  if (sqlite3_prepare_v2(st_sqlite(db), sql, -1, &st, NULL) != SQLITE_OK)
    return;
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, c))
    snprintf(buf, len, "%s", (const char *)sqlite3_column_text(st, c));
  sqlite3_finalize(st);
}

/* Every row of query q (its ?1 bound to 0: every run, or no limit), every column read. */
static void read_all(st_db_t *db, enum st_query q, int64_t p1)
{
  st_rows_t *r;
  if (st_query(db, q, &r) != ST_OK)
    return;
  st_rows_bind_int(r, 1, p1);
  for (int n = 0; n < 10000 && st_rows_next(r) == 1; n++)
    for (int c = 0; c < 24; c++) {
      const char *t = st_rows_text(r, c);
      if (t)
        (void)strlen(t);
      (void)st_rows_int(r, c);
      (void)st_rows_double(r, c);
    }
  st_rows_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
    abort();
  st_db_t *db;
  char err[256];
  if (st_open(path, 0, 0, &db, err, sizeof err) == ST_OK) {
    int version;
    if (st_schema_version(db, &version) == ST_OK && version != ST_SCHEMA_VERSION)
      __builtin_trap(); /* opened for writing: migrated to the newest schema */
    char exe[256], build_id[128], script[256], model[256], flags[1024], cpu[320];
    first(db, "SELECT exe, build_id, script FROM programs ORDER BY id", 0, exe, sizeof exe);
    first(db, "SELECT exe, build_id, script FROM programs ORDER BY id", 1, build_id,
          sizeof build_id);
    first(db, "SELECT exe, build_id, script FROM programs ORDER BY id", 2, script, sizeof script);
    first(db, "SELECT cpu_model, cpu_flags FROM machines ORDER BY id", 0, model, sizeof model);
    first(db, "SELECT cpu_model, cpu_flags FROM machines ORDER BY id", 1, flags, sizeof flags);
    first(db, "SELECT cpu FROM objects ORDER BY id", 0, cpu, sizeof cpu);
    st_run_info_t program = {
        .exe = exe, .build_id = build_id, .script = script, .cpu_model = model, .cpu_flags = flags};
    st_profile_t p;
    if (st_profile(db, &program, cpu, 4, 64, &p) == ST_OK) {
      for (size_t i = 0; i < p.n; i++)
        if ((p.sigs[i].code_len && !p.sigs[i].code) || (p.sigs[i].key_len && !p.sigs[i].key))
          __builtin_trap();
      st_profile_free(&p);
    }
    st_machine_t m;
    (void)st_machine_load(db, cpu, &m);
    read_all(db, ST_Q_RUN_LIST, -1);
    read_all(db, ST_Q_SIG_TOTALS, 0);
    st_close(db);
  }
  remove_files();
  return 0;
}
