/* SPDX-License-Identifier: MIT */
/* The store's read side (store/query.h): every query on every schema version a reader may
 * meet, read-only, and runs whose program row is gone. Real SQLite files in a temporary
 * folder. */
#include "store/query.h"
#include "store/store.h"
#include "tests/common/fixture.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(query, .init = fx_setup, .fini = fx_teardown);

/* A database at schema version (1 to the newest) holding run 7 of /bin/old with one signature
 * (10 calls, 2 timed in 200 ns), written with the columns version 1 already had. */
static void make_db(int version)
{
  st_db_t *db = fx_open(fx_db, ST_OPEN_CREATE | ST_OPEN_NO_MIGRATE);
  cr_assert_eq(st_migrate_to(db, version), ST_OK);
  cr_assert_eq(sqlite3_exec(st_sqlite(db),
                            "INSERT INTO programs(id, exe, build_id) VALUES(1, '/bin/old', '');"
                            "INSERT INTO machines VALUES(1, 'cpu', 'f', 1);"
                            "INSERT INTO runs(id, program_id, machine_id, pid, ppid, argv, options,"
                            " agent_version, start_ns, end_ns, status) VALUES(7, 1, 1, 5, 1,"
                            " '[\"old\", \"-x\"]', '{}', 'v1', 1000, 5000, 'exited');"
                            "INSERT INTO signatures VALUES(3, x'01', '00000000000000ab', 'sgemm',"
                            " 'sgemm 4x4x4', '{}');"
                            "INSERT INTO run_sigs(run_id, sig_id, calls, timed_calls, timed_ns)"
                            " VALUES(7, 3, 10, 2, 200);",
                            NULL, NULL, NULL),
               SQLITE_OK, "%s", sqlite3_errmsg(st_sqlite(db)));
  st_close(db);
}

static st_db_t *open_ro(void)
{
  st_db_t *db = fx_open(fx_db, ST_OPEN_READONLY);
  return db;
}

/* Runs q with its parameters bound to v (0: every run; -1: no limit) and counts its rows;
 * fails the test on any error. */
static int rows_of(st_db_t *db, enum st_query q, int64_t v)
{
  st_rows_t *r;
  cr_assert_eq(st_query(db, q, &r), ST_OK, "query %d: %s", q, st_errmsg(db));
  for (int i = 1; i <= 3; i++)
    st_rows_bind_int(r, i, v);
  int n = 0, rc;
  while ((rc = st_rows_next(r)) == 1)
    n++;
  cr_assert_eq(rc, 0, "query %d: %s", q, st_errmsg(db));
  st_rows_close(r);
  return n;
}

Test(query, every_query_reads_every_schema_version_read_only)
{
  for (int v = 1; v <= ST_SCHEMA_VERSION; v++) {
    make_db(v);
    st_db_t *db = open_ro();
    for (int q = 0; q < ST_Q__N; q++)
      rows_of(db, (enum st_query)q, 0);
    cr_expect_eq(rows_of(db, ST_Q_RUN_LIST, -1), 1, "version %d", v);
    cr_expect_eq(rows_of(db, ST_Q_SERIES, 7), 0, "version %d: no series", v);
    st_rows_t *r;
    cr_assert_eq(st_query(db, ST_Q_SIG_TOTALS, &r), ST_OK);
    st_rows_bind_int(r, 1, 7);
    cr_assert_eq(st_rows_next(r), 1, "version %d: %s", v, st_errmsg(db));
    cr_expect_eq(st_rows_int(r, ST_SIG_CALLS), 10);
    cr_expect_str_eq(st_rows_text(r, ST_SIG_SIG), "00000000000000ab");
    cr_expect_float_eq(st_rows_double(r, ST_SIG_EST), 1000.0, 1e-9, "10 calls at 100 ns");
    cr_expect_eq(st_rows_type(r, ST_SIG_STATUS), ST_COL_NULL, "no variant");
    cr_expect_eq(st_rows_type(r, ST_SIG_STATE), ST_COL_NULL, "version %d: no state recorded", v);
    cr_expect_eq(st_rows_type(r, ST_SIG_REASON), ST_COL_NULL, "version %d: no reason", v);
    st_rows_close(r);
    int version;
    st_schema_version(db, &version);
    cr_expect_eq(version, v, "a reader never migrates");
    st_close(db);
    cr_assert_eq(remove(fx_db), 0);
  }
}

Test(query, a_run_whose_program_row_is_gone_still_reads)
{
  make_db(ST_SCHEMA_VERSION);
  sqlite3 *raw;
  cr_assert_eq(sqlite3_open(fx_db, &raw), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(raw, "DELETE FROM programs", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(raw);
  st_db_t *db = open_ro();
  static const struct {
    enum st_query q;
    int exe;
  } per_run[] = {{ST_Q_RUN, ST_RUN_EXE}, {ST_Q_EXPORT_RUNS, ST_EXPORT_EXE}};
  for (size_t i = 0; i < sizeof per_run / sizeof *per_run; i++) {
    st_rows_t *r;
    cr_assert_eq(st_query(db, per_run[i].q, &r), ST_OK);
    st_rows_bind_int(r, 1, 7);
    cr_assert_eq(st_rows_next(r), 1, "query %d lost the run", per_run[i].q);
    cr_expect_eq(st_rows_type(r, per_run[i].exe), ST_COL_NULL);
    st_rows_close(r);
  }
  cr_expect_eq(rows_of(db, ST_Q_RUN_LIST, -1), 1);
  st_rows_t *r;
  cr_assert_eq(st_query(db, ST_Q_SCOPE_TOTALS, &r), ST_OK);
  st_rows_bind_int(r, 1, 0);
  cr_assert_eq(st_rows_next(r), 1);
  cr_expect_eq(st_rows_int(r, 0), 1, "the run counts");
  cr_expect_eq(st_rows_int(r, 1), 4000, "with its wall time");
  st_rows_close(r);
  st_close(db);
}

Test(query, compact_and_copy_keep_the_rows)
{
  make_db(ST_SCHEMA_VERSION);
  st_db_t *db = fx_open(fx_db, 0);
  char err[512] = "";
  cr_assert_eq(st_compact(db), ST_OK, "%s", st_errmsg(db));
  cr_expect(strstr(st_path(db), "/p.db"), "%s", st_path(db));
  st_db_t *mem;
  cr_assert_eq(st_copy_to_memory(db, &mem, err, sizeof err), ST_OK, "%s", err);
  cr_expect_eq(rows_of(mem, ST_Q_RUN_LIST, -1), 1);
  cr_expect_str_eq(st_path(mem), "");
  st_close(mem);
  st_close(db);
}

/* The values of column col of r's current row, decoded into out (at most max). */
static size_t series_of(st_rows_t *r, int col, uint64_t *out, size_t max)
{
  size_t len;
  const void *b = st_rows_blob(r, col, &len);
  return st_series_decode(b, len, out, max);
}

Test(query, a_series_reads_back_as_written_and_a_write_replaces_it)
{
  make_db(ST_SCHEMA_VERSION);
  st_db_t *db = fx_open(fx_db, 0);
  /* 300 intervals of values from 0 to beyond 2^35: every varint length up to 6 bytes. */
  enum { N = 300 };
  static uint64_t calls[N], vcalls[N], samples[N], outside[N], got[N + 1];
  for (int k = 0; k < N; k++)
    calls[k] = (uint64_t)k << (k % 36), vcalls[k] = k / 2, samples[k] = k % 5,
    outside[k] = 1000u * k;
  st_series_rec_t rows[4] = {{"\x01", 1, 0, calls, vcalls, samples},
                             {"\x09", 1, 0, calls, calls, calls}, /* never flushed: skipped */
                             {NULL, 0, 0, NULL, NULL, outside},
                             {NULL, 0, 1, vcalls, NULL, NULL}};
  cr_assert_eq(st_run_series(db, 7, 5000, 1000, 4, rows, 3), ST_OK);
  cr_assert_eq(st_run_series(db, 7, 250, 1100, N, rows, 4), ST_OK, "replaces the first");
  st_rows_t *r;
  cr_assert_eq(st_query(db, ST_Q_SERIES, &r), ST_OK);
  st_rows_bind_int(r, 1, 7);
  cr_assert_eq(st_rows_next(r), 1, "%s", st_errmsg(db));
  cr_expect_str_eq(st_rows_text(r, ST_SERIES_SIG), "00000000000000ab");
  cr_expect_str_eq(st_rows_text(r, ST_SERIES_NAME), "sgemm 4x4x4");
  cr_expect_eq(st_rows_int(r, ST_SERIES_INTERVAL_NS), 250);
  cr_expect_eq(st_rows_int(r, ST_SERIES_OFFSET_NS), 100, "since the run's start (1000)");
  cr_assert_eq(series_of(r, ST_SERIES_CALLS, got, N + 1), N);
  cr_expect_arr_eq(got, calls, sizeof calls);
  cr_assert_eq(series_of(r, ST_SERIES_VCALLS, got, N + 1), N);
  cr_expect_arr_eq(got, vcalls, sizeof vcalls);
  cr_assert_eq(series_of(r, ST_SERIES_SAMPLES, got, N + 1), N);
  cr_expect_arr_eq(got, samples, sizeof samples);
  cr_expect_str_eq(st_rows_text(r, ST_SERIES_ROW), "sig");
  cr_assert_eq(st_rows_next(r), 1, "then the rest");
  cr_expect_str_eq(st_rows_text(r, ST_SERIES_ROW), "rest");
  cr_expect_eq(st_rows_type(r, ST_SERIES_SIG), ST_COL_NULL);
  cr_assert_eq(series_of(r, ST_SERIES_CALLS, got, N + 1), N);
  cr_expect_arr_eq(got, vcalls, sizeof vcalls);
  cr_assert_eq(st_rows_next(r), 1, "then the samples outside operators");
  cr_expect_str_eq(st_rows_text(r, ST_SERIES_ROW), "outside");
  cr_expect_eq(st_rows_type(r, ST_SERIES_SIG), ST_COL_NULL);
  cr_assert_eq(series_of(r, ST_SERIES_CALLS, got, N + 1), N, "NULL arrays are zeros");
  cr_expect_eq(got[0] | got[N - 1], 0);
  cr_assert_eq(series_of(r, ST_SERIES_SAMPLES, got, N + 1), N);
  cr_expect_arr_eq(got, outside, sizeof outside);
  cr_expect_eq(st_rows_next(r), 0, "the unknown signature has no row");
  st_rows_close(r);
  st_close(db);
}
