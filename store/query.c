/* SPDX-License-Identifier: MIT */
/* The read side of the profile store: the SQL of every query opjit's readers ask (query.h),
 * prepared on demand and read row by row, and the maintenance gc needs around st_gc. */
#include "query.h"

#include "internal.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

struct st_rows_s {
  st_db_t *db;
  sqlite3_stmt *st;
  int last; /* the last step's SQLite code */
};

/* The judge's median ratio variant / original for the signature whose id is the SQL
 * expression sig (NULL: none with ST_JUDGE_MIN_RATIOS rounds): its newest pool that has them
 * (store/judge.h; a pool is per machine, and the newest is this machine's in a profile that
 * one machine writes). Its rounds time both sides warm and interleaved, as a plain run would
 * call the original, so the readers' speedups and savings come from it where it exists: the
 * timings of the original's rare calls in a run that a variant serves are colder than a plain
 * run's, and one late warm-up of the library (its first call in the run, say) moves their mean
 * but not a median. */
#define JUDGE_RATIO(sig)                                                                       \
  "(SELECT judge_median(j.ratios) FROM judge_pools j WHERE j.sig_id = " sig                   \
  " AND judge_median(j.ratios) IS NOT NULL ORDER BY j.updated_ns DESC LIMIT 1)"
/* A variant row's ratio for the readers: the one its run recorded (schema 11: the judge's window
 * when the row was written, whatever the verdict, so a variant demoted as slower shows as
 * slower), else, for a row without one, JUDGE_RATIO. */
#define RUN_RATIO(v, sig) "coalesce(" v ".ratio, " JUDGE_RATIO(sig) ")"

/* The run_sigs rows that match the condition where (over rs, a run_sigs row), each split
 * between the original's calls and its variant's (the variant's calls, timings and the judge's
 * ratio, where it ran): the CTEs split, means and fair, the last with each side's mean and the
 * original's fair one (ofair: at the judge's warm mean where it has a ratio, ST_SIG_RATIO). */
#define FAIR(where)                                                                            \
  "split AS (SELECT rs.run_id, rs.sig_id, rs.calls, rs.timed_calls AS otimed,"                 \
  "  rs.timed_ns AS otimed_ns, min(coalesce(v.calls, 0), rs.calls) AS vcalls,"                 \
  "  coalesce(v.timed_calls, 0) AS vtimed, coalesce(v.timed_ns, 0) AS vtimed_ns,"              \
  "  v.status AS status, CASE WHEN v.status IS NOT NULL THEN " RUN_RATIO("v", "rs.sig_id")    \
  "  END AS ratio"                                                                             \
  "  FROM run_sigs rs LEFT JOIN variants v ON v.run_id = rs.run_id AND v.sig_id = rs.sig_id"   \
  "  WHERE " where "),"                                                                        \
  " means AS (SELECT *, calls - vcalls AS ocalls,"                                             \
  "  CASE WHEN otimed > 0 THEN CAST(otimed_ns AS REAL) / otimed END AS omean,"                 \
  "  CASE WHEN vtimed > 0 THEN CAST(vtimed_ns AS REAL) / vtimed END AS vmean FROM split),"      \
  " fair AS (SELECT *, CASE WHEN ratio > 0 AND vtimed >= " ST_STR(ST_COMPARE_MIN_TIMED)         \
  "  THEN vmean / ratio ELSE omean END AS ofair FROM means)"
/* A FAIR row m's estimated time: the original's calls at its fair mean, the variant's at its
 * own (either side borrowing the other's mean where it has none) */
#define FAIR_EST(m)                                                                            \
  m ".ocalls * coalesce(" m ".ofair, " m ".vmean, 0) + " m ".vcalls * coalesce(" m ".vmean, " m \
  ".omean, 0)"

/* One text per query; the comments of query.h say what each returns. A run whose programs (or
 * machines) row is gone still shows, with NULL there: readers must not lose runs to damage. */
static const char *const sql[ST_Q__N] = {
    [ST_Q_NEWEST_CALL_RUN] = "SELECT max(run_id) FROM run_sigs",
    [ST_Q_NEWEST_STACK_RUN] = "SELECT max(run_id) FROM run_stacks",
    [ST_Q_NEWEST_VARIANT_RUN] = "SELECT max(run_id) FROM variants",
    [ST_Q_NEWEST_EVENT_RUN] = "SELECT max(run_id) FROM events",
    [ST_Q_SIG_PREFIX] =
        "SELECT sig, min(name), count(*) OVER () FROM signatures WHERE sig GLOB ?1 || '*'"
        " GROUP BY sig ORDER BY sig LIMIT ?2",
    [ST_Q_SIG_TOTALS] =
        "WITH " FAIR("?1 = 0 OR rs.run_id = ?1")
        " SELECT s.sig, s.name, s.op, s.params, sum(m.calls), sum(m.otimed), sum(m.otimed_ns),"
        " sum(" FAIR_EST("m") ") AS est,"
        " (SELECT coalesce(sum(p.samples), 0) FROM run_pcs p"
        "  WHERE p.sig_id = s.id AND (?1 = 0 OR p.run_id = ?1)),"
        " sum(m.vcalls), sum(m.vtimed), sum(m.vtimed_ns),"
        " sum(CASE WHEN m.ratio > 0 AND m.vtimed >= " ST_STR(ST_COMPARE_MIN_TIMED)
        "  THEN m.vcalls * m.vmean * (1 / m.ratio - 1)"
        "  WHEN m.otimed >= " ST_STR(ST_COMPARE_MIN_TIMED) " AND m.vtimed >= "
        ST_STR(ST_COMPARE_MIN_TIMED) " THEN m.vcalls * (m.omean - m.vmean) ELSE 0 END),"
        " (SELECT v.status FROM variants v WHERE v.sig_id = s.id AND (?1 = 0 OR v.run_id = ?1)"
        "  ORDER BY v.run_id DESC LIMIT 1),"
        " count(m.status),"
        " (SELECT r.state FROM run_sigs r WHERE r.sig_id = s.id AND (?1 = 0 OR r.run_id = ?1)"
        "  ORDER BY r.run_id DESC LIMIT 1),"
        " (SELECT r.reason FROM run_sigs r WHERE r.sig_id = s.id AND (?1 = 0 OR r.run_id = ?1)"
        "  ORDER BY r.run_id DESC LIMIT 1),"
        " sum(CASE WHEN m.ratio > 0 AND m.vtimed >= " ST_STR(ST_COMPARE_MIN_TIMED)
        "  THEN m.vcalls * m.vmean END) / sum(CASE WHEN m.ratio > 0 AND m.vtimed >= "
        ST_STR(ST_COMPARE_MIN_TIMED) " THEN m.vcalls * m.vmean / m.ratio END)"
        " FROM fair m JOIN signatures s ON s.id = m.sig_id"
        " GROUP BY s.id ORDER BY est DESC, sum(m.calls) DESC, s.sig",
    [ST_Q_RUN_EXISTS] = "SELECT count(*) FROM runs WHERE id = ?",
    [ST_Q_RUN] = "SELECT p.exe, r.argv, r.status, r.pid, r.start_ns, coalesce(r.flush_ns, 0),"
                 " coalesce(r.end_ns, 0) FROM runs r LEFT JOIN programs p ON p.id = r.program_id"
                 " WHERE r.id = ?",
    [ST_Q_RUN_SAMPLINGS] =
        "SELECT sampling FROM runs WHERE sampling IS NOT NULL AND (?1 = 0 OR id = ?1)"
        " ORDER BY id",
    [ST_Q_SAMPLE_TOTALS] = "SELECT coalesce(sum(samples), 0),"
                           " coalesce(sum(CASE WHEN sig_id = 0 THEN samples END), 0)"
                           " FROM run_pcs WHERE ?1 = 0 OR run_id = ?1",
    [ST_Q_SCOPE_TOTALS] =
        "SELECT count(*),"
        " coalesce(sum(coalesce(r.end_ns, r.flush_ns, r.start_ns) - r.start_ns), 0),"
        " coalesce(sum(r.overflow_calls), 0) FROM runs r WHERE ?1 = 0 OR r.id = ?1",
    [ST_Q_RUN_LIST] =
        "SELECT r.id, r.start_ns, coalesce(r.flush_ns, 0), coalesce(r.end_ns, 0), r.status,"
        " r.pid, r.ppid, p.exe, r.argv, r.parent_run, count(rs.sig_id),"
        " coalesce(sum(rs.calls), 0), r.overflow_calls, r.sampling,"
        " (SELECT count(*) FROM variants v WHERE v.run_id = r.id AND v.status = 'ready'),"
        " (SELECT count(*) FROM events e WHERE e.run_id = r.id AND e.kind = 'loaded'),"
        " (SELECT count(DISTINCT e.sig_id) FROM events e WHERE e.run_id = r.id AND"
        "  (e.kind = 'published' OR"
        "   (e.kind = 'demoted' AND e.detail LIKE '% before publication:%'))),"
        " (SELECT count(*) FROM events e WHERE e.run_id = r.id AND e.kind = 'invalidated'),"
        " coalesce(r.warm_ns, 0),"
        " (SELECT s.name || ': ' || e.detail FROM events e JOIN signatures s ON s.id = e.sig_id"
        "  WHERE e.run_id = r.id AND e.kind = 'crashed' ORDER BY e.id LIMIT 1)"
        " FROM runs r LEFT JOIN programs p ON p.id = r.program_id"
        " LEFT JOIN run_sigs rs ON rs.run_id = r.id"
        " GROUP BY r.id ORDER BY r.id DESC LIMIT ?",
    [ST_Q_RUN_LIST_HAS_READY] =
        "SELECT EXISTS(SELECT 1 FROM variants WHERE status = 'ready' AND run_id IN"
        " (SELECT id FROM runs ORDER BY id DESC LIMIT ?))",
    [ST_Q_RUN_TREE] =
        "WITH RECURSIVE tree(id) AS ("
        "  SELECT id FROM runs WHERE start_ns >= ?1 AND (pid = ?2 OR ppid = ?2)"
        "  UNION SELECT r.id FROM runs r JOIN tree t ON r.parent_run = t.id)"
        " SELECT r.id, r.status, r.pid, r.start_ns, count(rs.sig_id), coalesce(sum(rs.calls), 0)"
        " FROM runs r JOIN tree USING(id) LEFT JOIN run_sigs rs ON rs.run_id = r.id"
        " GROUP BY r.id ORDER BY r.id",
    [ST_Q_SIG_INFO] = "SELECT name, op, params FROM signatures WHERE sig = ? ORDER BY id LIMIT 1",
    [ST_Q_SIG_RUNS] =
        "WITH " FAIR("rs.sig_id IN (SELECT id FROM signatures WHERE sig = ?1)"
                     " AND (?2 = 0 OR rs.run_id = ?2)")
        " SELECT m.run_id, p.exe, r.argv, r.start_ns, r.status, r.pid,"
        " m.calls, m.otimed, m.otimed_ns, rs.state, rs.reason, " FAIR_EST("m")
        " FROM fair m JOIN run_sigs rs ON rs.run_id = m.run_id AND rs.sig_id = m.sig_id"
        " JOIN runs r ON r.id = m.run_id LEFT JOIN programs p ON p.id = r.program_id"
        " ORDER BY m.run_id DESC",
    [ST_Q_SIG_SYMBOLS] = "SELECT y.module, y.name, sum(p.samples) AS n, sum(sum(p.samples)) OVER ()"
                         " FROM run_pcs p JOIN signatures s ON s.id = p.sig_id"
                         " JOIN symbols y ON y.id = p.symbol_id"
                         " WHERE s.sig = ?1 AND (?2 = 0 OR p.run_id = ?2)"
                         " GROUP BY y.id ORDER BY n DESC, y.module, y.name",
    [ST_Q_SIG_COUNTERS] =
        "SELECT c.event, sum(c.value), sum(rs.calls) FROM run_counters c"
        " JOIN signatures s ON s.id = c.sig_id"
        " JOIN run_sigs rs ON rs.run_id = c.run_id AND rs.sig_id = c.sig_id"
        " WHERE s.sig = ?1 AND (?2 = 0 OR c.run_id = ?2) GROUP BY c.event ORDER BY c.event",
    [ST_Q_VARIANTS] =
        "SELECT v.run_id, s.sig, s.name, v.status, v.generator, v.llvm, v.cpu, v.compile_ns,"
        " v.calls, v.timed_calls, v.timed_ns, coalesce(rs.calls, 0),"
        " coalesce(rs.timed_calls, 0), coalesce(rs.timed_ns, 0),"
        " (SELECT count(DISTINCT w.llvm || '/' || w.cpu || '/' || w.generator) FROM variants w"
        "  WHERE ?1 = 0 OR w.run_id = ?1), v.origin, rs.state, rs.reason, " RUN_RATIO("v", "v.sig_id")
        " FROM variants v JOIN signatures s ON s.id = v.sig_id"
        " LEFT JOIN run_sigs rs ON rs.run_id = v.run_id AND rs.sig_id = v.sig_id"
        " WHERE ?1 = 0 OR v.run_id = ?1 ORDER BY v.run_id DESC, v.calls DESC, s.sig",
    [ST_Q_EVENTS] =
        "SELECT e.run_id, e.time_ns, e.time_ns - r.start_ns, e.kind, s.sig, s.name, e.detail"
        " FROM events e JOIN runs r ON r.id = e.run_id JOIN signatures s ON s.id = e.sig_id"
        " WHERE (?1 = 0 OR e.run_id = ?1) AND (?2 = '' OR s.sig = ?2)"
        " AND (?3 IS NULL OR e.kind = ?3) ORDER BY e.run_id, e.time_ns, e.id",
    [ST_Q_SERIES] =
        "SELECT s.sig, s.name, x.interval_ns, x.start_ns - r.start_ns, x.calls, x.vcalls,"
        " x.samples, CASE x.sig_id WHEN 0 THEN 'outside' WHEN -1 THEN 'rest' ELSE 'sig' END"
        " FROM run_series x JOIN runs r ON r.id = x.run_id"
        " LEFT JOIN signatures s ON s.id = x.sig_id AND x.sig_id > 0"
        " WHERE x.run_id = ?1 ORDER BY x.sig_id <= 0, x.sig_id = 0, s.sig",
    [ST_Q_STACKS] = "SELECT k.sig_id, s.name, k.stack, sum(k.samples) AS n"
                    " FROM run_stacks k LEFT JOIN signatures s ON s.id = k.sig_id"
                    " WHERE (?1 = 0 OR k.run_id = ?1) AND (?2 IS NULL OR s.sig = ?2)"
                    " GROUP BY k.sig_id, k.stack HAVING n > 0"
                    " ORDER BY k.sig_id = 0, s.name, k.sig_id, k.stack",
    [ST_Q_EXPORT_RUNS] =
        "SELECT r.id, r.pid, r.ppid, r.parent_run, r.status, r.start_ns, r.flush_ns,"
        " r.end_ns, r.overflow_calls, r.agent_version, r.argv, r.options,"
        " p.exe, p.build_id, m.cpu_model, m.cpu_flags, m.ncpu, r.sampling"
        " FROM runs r LEFT JOIN programs p ON p.id = r.program_id"
        " LEFT JOIN machines m ON m.id = r.machine_id"
        " WHERE ?1 = 0 OR r.id = ?1 ORDER BY r.id",
    [ST_Q_EXPORT_SIGS] =
        "SELECT s.sig, s.op, s.name, s.params, rs.calls, rs.timed_calls, rs.timed_ns, rs.state,"
        " rs.reason FROM run_sigs rs JOIN signatures s ON s.id = rs.sig_id WHERE rs.run_id = ?"
        " ORDER BY rs.calls DESC, s.sig",
    [ST_Q_EXPORT_PCS] =
        "SELECT s.sig, y.module, y.name, p.samples FROM run_pcs p"
        " JOIN symbols y ON y.id = p.symbol_id LEFT JOIN signatures s ON s.id = p.sig_id"
        " WHERE p.run_id = ? ORDER BY p.sig_id, p.samples DESC, y.module, y.name",
    [ST_Q_EXPORT_STACKS] = "SELECT s.sig, k.stack, k.samples, s.name FROM run_stacks k"
                           " LEFT JOIN signatures s ON s.id = k.sig_id WHERE k.run_id = ?"
                           " ORDER BY k.sig_id, k.samples DESC, k.stack",
    [ST_Q_EXPORT_COUNTERS] = "SELECT s.sig, c.event, c.value FROM run_counters c"
                             " LEFT JOIN signatures s ON s.id = c.sig_id WHERE c.run_id = ?"
                             " ORDER BY c.sig_id, c.event",
    [ST_Q_EXPORT_VARIANTS] =
        "SELECT s.sig, v.status, v.generator, v.llvm, v.cpu, v.compile_ns, v.calls,"
        " v.timed_calls, v.timed_ns FROM variants v JOIN signatures s ON s.id = v.sig_id"
        " WHERE v.run_id = ? ORDER BY v.calls DESC, s.sig",
    [ST_Q_EXPORT_EVENTS] = "SELECT s.sig, e.time_ns, e.kind, e.detail FROM events e"
                           " JOIN signatures s ON s.id = e.sig_id WHERE e.run_id = ?"
                           " ORDER BY e.time_ns, e.id",
    [ST_Q_QUICK_CHECK] = "PRAGMA quick_check",
    [ST_Q_RUN_COUNT] = "SELECT count(*) FROM runs",
    [ST_Q_JOURNAL_MODE] = "PRAGMA journal_mode",
    [ST_Q_KERNELS] = "SELECT count(*), count(DISTINCT r.program_id) FROM objects o"
                     " LEFT JOIN runs r ON r.id = o.run_id WHERE o.cpu = ?1",
};

int st_query(st_db_t *db, enum st_query q, st_rows_t **out)
{
  *out = NULL;
  if ((unsigned)q >= ST_Q__N || !sql[q])
    return ST_EIO;
  st_rows_t *r = calloc(1, sizeof *r);
  if (!r)
    return ST_ENOMEM;
  r->db = db;
  int rc = sqlite3_prepare_v2(st_sqlite(db), sql[q], -1, &r->st, NULL);
  if (rc != SQLITE_OK) {
    free(r);
    return _st_code(rc);
  }
  *out = r;
  return ST_OK;
}

void st_rows_bind_int(st_rows_t *r, int param, int64_t v) { sqlite3_bind_int64(r->st, param, v); }

void st_rows_bind_text(st_rows_t *r, int param, const char *text)
{
  if (text)
    sqlite3_bind_text(r->st, param, text, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(r->st, param);
}

int st_rows_next(st_rows_t *r)
{
  r->last = sqlite3_step(r->st);
  if (r->last == SQLITE_ROW)
    return 1;
  if (r->last == SQLITE_DONE)
    return 0;
  return _st_code(r->last);
}

int st_rows_rewind(st_rows_t *r) { return _st_code(sqlite3_reset(r->st)); }

int64_t st_rows_int(const st_rows_t *r, int col) { return sqlite3_column_int64(r->st, col); }

double st_rows_double(const st_rows_t *r, int col) { return sqlite3_column_double(r->st, col); }

const char *st_rows_text(const st_rows_t *r, int col)
{
  const unsigned char *s = sqlite3_column_text(r->st, col);
  return s ? (const char *)s : "";
}

const void *st_rows_blob(const st_rows_t *r, int col, size_t *len)
{
  const void *p = sqlite3_column_blob(r->st, col);
  *len = p ? (size_t)sqlite3_column_bytes(r->st, col) : 0;
  return p;
}

size_t st_series_decode(const void *blob, size_t len, uint64_t *out, size_t max)
{
  const uint8_t *b = blob;
  size_t n = 0;
  for (size_t i = 0; i < len && n < max;) {
    uint64_t x = 0;
    for (int shift = 0; i < len && shift < 64; shift += 7) {
      uint8_t c = b[i++];
      x |= (uint64_t)(c & 0x7f) << shift;
      if (!(c & 0x80))
        break;
    }
    out[n++] = x;
  }
  return n;
}

enum st_col_type st_rows_type(const st_rows_t *r, int col)
{
  switch (sqlite3_column_type(r->st, col)) {
  case SQLITE_INTEGER:
    return ST_COL_INT;
  case SQLITE_FLOAT:
    return ST_COL_REAL;
  case SQLITE_TEXT:
    return ST_COL_TEXT;
  case SQLITE_BLOB:
    return ST_COL_BLOB;
  default:
    return ST_COL_NULL;
  }
}

void st_rows_close(st_rows_t *r)
{
  if (!r)
    return;
  sqlite3_finalize(r->st);
  free(r);
}

const char *st_errmsg(st_db_t *db) { return sqlite3_errmsg(st_sqlite(db)); }

int st_damaged(st_db_t *db) { return (sqlite3_errcode(st_sqlite(db)) & 0xff) == SQLITE_CORRUPT; }

int st_quick_check(const char *path, char *out, size_t len)
{
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_prepare_v2(db, sql[ST_Q_QUICK_CHECK], -1, &st, NULL);
  if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    snprintf(out, len, "%s", (const char *)sqlite3_column_text(st, 0));
    rc = SQLITE_OK;
  } else {
    snprintf(out, len, "%s", db ? sqlite3_errmsg(db) : "out of memory");
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rc == SQLITE_OK ? ST_OK : _st_code(rc);
}

const char *st_path(st_db_t *db)
{
  const char *p = sqlite3_db_filename(st_sqlite(db), "main");
  return p ? p : "";
}

int st_compact(st_db_t *db)
{
  /* VACUUM writes the whole compacted database into the WAL: the second checkpoint moves it
   * into the file and truncates the WAL, which another connection open on the file (a running
   * agent) would otherwise keep at that size. */
  int rc = _st_exec(st_sqlite(db), "PRAGMA wal_checkpoint(TRUNCATE)");
  rc = rc ? rc : _st_exec(st_sqlite(db), "VACUUM");
  return rc ? rc : _st_exec(st_sqlite(db), "PRAGMA wal_checkpoint(TRUNCATE)");
}

int st_copy_to_memory(st_db_t *db, st_db_t **out, char *err, size_t errlen)
{
  int rc = st_open(":memory:", 0, 0, out, err, errlen);
  if (rc)
    return rc;
  sqlite3_backup *b = sqlite3_backup_init(st_sqlite(*out), "main", st_sqlite(db), "main");
  int step = b ? sqlite3_backup_step(b, -1) : SQLITE_ERROR;
  if (b)
    sqlite3_backup_finish(b);
  if (step == SQLITE_DONE)
    return ST_OK;
  snprintf(err, errlen, "%s", sqlite3_errmsg(st_sqlite(*out)));
  st_close(*out);
  *out = NULL;
  return _st_code(step) ? _st_code(step) : ST_EIO;
}
