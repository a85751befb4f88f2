/* SPDX-License-Identifier: MIT */
/* The SQLite profile store: open-with-checks, ordered migrations, the writes of a run, gc.
 *
 * Schema history (PRAGMA user_version):
 *   1  meta, programs, machines, runs, signatures, run_sigs
 *   2  runs.parent_run + parent_start_ns (fork lineage), runs.overflow_calls,
 *      indexes run_sigs(sig_id), runs(pid)
 *   3  sampling: runs.sampling (JSON), symbols, run_pcs (PC histogram by symbol), run_stacks
 *      (folded stacks), run_counters (hardware counter totals); sig_id 0 = outside operators
 *   4  the JIT: variants (per run and signature) and events (a signature's life)
 *   5  profiles across runs: programs.script (an interpreter's program is its script),
 *      objects (compiled kernels, one per signature and CPU, loaded by later runs),
 *      runs.warm_ns (the warm start's cost), variants.origin + pre_calls
 *   6  the machine model per CPU key: machine_models (ISA, FMA peaks per width and dtype,
 *      timer cost), machine_compiles (compile latency per kernel family, over runs); opjit gc
 *      keeps both: a CPU's model outlives its runs
 *   7  run_sigs.state + reason: each signature's JIT state (ST_JIT_STATES) and why, as the
 *      agent's last decision in the run put it (NULL: an older agent's run)
 *   8  run_series: the run over time, per signature (sig_id 0 = outside operators, -1 = the
 *      signatures beyond the agent's rows) and per interval, calls, variant calls and samples
 *      as blobs of varints (st_run_series)
 *   9  judge_pools: the never-slower judge's rounds on a stored variant, per signature and
 *      object key, pooled over the runs that placed it (st_judge_pool_t: counters, the window's
 *      ratios as little-endian float32, oldest first)
 *  10  machine_models.settled: whether a second measurement agreed with the stored peaks (0:
 *      the next run measures them again and keeps the faster); since the agent's method 3 a
 *      bit per peak that has agreed
 *  11  variants.ratio: the judge's median ratio variant / original over its window when the run
 *      wrote the row, whatever its verdict (NULL: fewer rounds than a verdict needs), so that a
 *      variant demoted as slower keeps its fair figures after its pool is dropped
 * A file whose user_version is newer than ST_SCHEMA_VERSION is refused, never downgraded; one
 * whose user_version is negative (no opjit writes one) is refused as damaged, never rewritten.
 * A read-only connection to an older file sees the newest schema through TEMP views. */
#include "store.h"

#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

/* The statements the writer runs again and again (every flush, every row), prepared once per
 * connection: keyed by their SQL text's address (literals), checked against the text. */
#define ST_STMT_CACHE 24
struct st_db_s {
  sqlite3 *db;
  struct {
    const char *sql;
    sqlite3_stmt *st;
  } stmts[ST_STMT_CACHE];
  int nstmts;
};

static const char *const migrations[] = {
    /* 1 */
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "INSERT INTO meta VALUES('application', 'opjit');"
    "CREATE TABLE programs(id INTEGER PRIMARY KEY, exe TEXT NOT NULL,"
    "  build_id TEXT NOT NULL DEFAULT '', UNIQUE(exe, build_id));"
    "CREATE TABLE machines(id INTEGER PRIMARY KEY, cpu_model TEXT NOT NULL,"
    "  cpu_flags TEXT NOT NULL, ncpu INTEGER NOT NULL, UNIQUE(cpu_model, cpu_flags, ncpu));"
    "CREATE TABLE runs(id INTEGER PRIMARY KEY,"
    "  program_id INTEGER NOT NULL REFERENCES programs(id),"
    "  machine_id INTEGER NOT NULL REFERENCES machines(id),"
    "  pid INTEGER NOT NULL, ppid INTEGER NOT NULL, argv TEXT NOT NULL, options TEXT NOT NULL,"
    "  agent_version TEXT NOT NULL, start_ns INTEGER NOT NULL, flush_ns INTEGER,"
    "  end_ns INTEGER, status TEXT NOT NULL DEFAULT 'running');"
    "CREATE TABLE signatures(id INTEGER PRIMARY KEY, key BLOB NOT NULL UNIQUE,"
    "  sig TEXT NOT NULL, op TEXT NOT NULL, name TEXT NOT NULL, params TEXT NOT NULL);"
    "CREATE INDEX signatures_sig ON signatures(sig);"
    "CREATE TABLE run_sigs(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  sig_id INTEGER NOT NULL REFERENCES signatures(id), calls INTEGER NOT NULL,"
    "  timed_calls INTEGER NOT NULL, timed_ns INTEGER NOT NULL,"
    "  PRIMARY KEY(run_id, sig_id)) WITHOUT ROWID;",
    /* 2 */
    "ALTER TABLE runs ADD COLUMN parent_run INTEGER REFERENCES runs(id) ON DELETE SET NULL;"
    "ALTER TABLE runs ADD COLUMN parent_start_ns INTEGER;"
    "ALTER TABLE runs ADD COLUMN overflow_calls INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX run_sigs_sig ON run_sigs(sig_id);"
    "CREATE INDEX runs_pid ON runs(pid);",
    /* 3 */
    "ALTER TABLE runs ADD COLUMN sampling TEXT;"
    "CREATE TABLE symbols(id INTEGER PRIMARY KEY, module TEXT NOT NULL, name TEXT NOT NULL,"
    "  UNIQUE(module, name));"
    "CREATE TABLE run_pcs(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  sig_id INTEGER NOT NULL, symbol_id INTEGER NOT NULL REFERENCES symbols(id),"
    "  samples INTEGER NOT NULL, PRIMARY KEY(run_id, sig_id, symbol_id)) WITHOUT ROWID;"
    "CREATE TABLE run_stacks(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  sig_id INTEGER NOT NULL, stack TEXT NOT NULL, samples INTEGER NOT NULL,"
    "  PRIMARY KEY(run_id, sig_id, stack)) WITHOUT ROWID;"
    "CREATE TABLE run_counters(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  sig_id INTEGER NOT NULL, event TEXT NOT NULL, value INTEGER NOT NULL,"
    "  PRIMARY KEY(run_id, sig_id, event)) WITHOUT ROWID;"
    "CREATE INDEX run_pcs_sig ON run_pcs(sig_id);"
    "CREATE INDEX run_stacks_sig ON run_stacks(sig_id);",
    /* 4 */
    "CREATE TABLE variants(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  sig_id INTEGER NOT NULL REFERENCES signatures(id), status TEXT NOT NULL,"
    "  generator INTEGER NOT NULL, llvm TEXT NOT NULL, cpu TEXT NOT NULL,"
    "  compile_ns INTEGER NOT NULL, calls INTEGER NOT NULL, timed_calls INTEGER NOT NULL,"
    "  timed_ns INTEGER NOT NULL, PRIMARY KEY(run_id, sig_id)) WITHOUT ROWID;"
    "CREATE TABLE events(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id)"
    "  ON DELETE CASCADE, sig_id INTEGER NOT NULL REFERENCES signatures(id),"
    "  time_ns INTEGER NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL);"
    "CREATE INDEX events_run ON events(run_id);"
    "CREATE INDEX variants_sig ON variants(sig_id);",
    /* 5 */
    "CREATE TABLE programs5(id INTEGER PRIMARY KEY, exe TEXT NOT NULL,"
    "  build_id TEXT NOT NULL DEFAULT '', script TEXT NOT NULL DEFAULT '',"
    "  UNIQUE(exe, build_id, script));"
    "INSERT INTO programs5(id, exe, build_id) SELECT id, exe, build_id FROM programs;"
    "DROP TABLE programs;"
    "ALTER TABLE programs5 RENAME TO programs;"
    "CREATE TABLE objects(id INTEGER PRIMARY KEY,"
    "  sig_id INTEGER NOT NULL REFERENCES signatures(id), cpu TEXT NOT NULL,"
    "  llvm TEXT NOT NULL, generator INTEGER NOT NULL, symbol TEXT NOT NULL,"
    "  checksum INTEGER NOT NULL, code BLOB NOT NULL,"
    "  run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL, created_ns INTEGER NOT NULL,"
    "  UNIQUE(sig_id, cpu));"
    "ALTER TABLE runs ADD COLUMN warm_ns INTEGER;"
    "ALTER TABLE variants ADD COLUMN origin TEXT NOT NULL DEFAULT 'compiled';"
    "ALTER TABLE variants ADD COLUMN pre_calls INTEGER NOT NULL DEFAULT 0;",
    /* 6 */
    "CREATE TABLE machine_models(cpu TEXT PRIMARY KEY, isa TEXT NOT NULL,"
    "  vregs INTEGER NOT NULL, f32_128 REAL, f32_256 REAL, f32_512 REAL, f64_128 REAL,"
    "  f64_256 REAL, f64_512 REAL, timer_ns REAL NOT NULL, method INTEGER NOT NULL,"
    "  measured_ns INTEGER NOT NULL);"
    "CREATE TABLE machine_compiles(cpu TEXT NOT NULL, family TEXT NOT NULL,"
    "  n INTEGER NOT NULL, mean_ns REAL NOT NULL, median_ns INTEGER NOT NULL,"
    "  recent TEXT NOT NULL, updated_ns INTEGER NOT NULL,"
    "  PRIMARY KEY(cpu, family)) WITHOUT ROWID;",
    /* 7 */
    "ALTER TABLE run_sigs ADD COLUMN state TEXT;"
    "ALTER TABLE run_sigs ADD COLUMN reason TEXT;",
    /* 8 */
    "CREATE TABLE run_series(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  sig_id INTEGER NOT NULL, interval_ns INTEGER NOT NULL, start_ns INTEGER NOT NULL,"
    "  calls BLOB NOT NULL, vcalls BLOB NOT NULL, samples BLOB NOT NULL,"
    "  PRIMARY KEY(run_id, sig_id)) WITHOUT ROWID;",
    /* 9 */
    "CREATE TABLE judge_pools(sig_id INTEGER NOT NULL REFERENCES signatures(id),"
    "  cpu TEXT NOT NULL, generator INTEGER NOT NULL, symbol TEXT NOT NULL,"
    "  runs INTEGER NOT NULL, rounds INTEGER NOT NULL, slower INTEGER NOT NULL,"
    "  faster INTEGER NOT NULL, kept INTEGER NOT NULL, judged INTEGER NOT NULL,"
    "  orig_calls INTEGER NOT NULL, orig_ns INTEGER NOT NULL, var_calls INTEGER NOT NULL,"
    "  var_ns INTEGER NOT NULL, ratios BLOB NOT NULL, updated_ns INTEGER NOT NULL,"
    "  PRIMARY KEY(sig_id, cpu)) WITHOUT ROWID;",
    /* 10 */
    "ALTER TABLE machine_models ADD COLUMN settled INTEGER NOT NULL DEFAULT 0;",
    /* 11 */
    "ALTER TABLE variants ADD COLUMN ratio REAL;",
};
_Static_assert(sizeof migrations / sizeof *migrations == ST_SCHEMA_VERSION,
               "one migration per schema version");

static const char *const err_text[ST__NERR] = {
#define ST_ERR_TEXT_(name, text) [ST_IDX_##name] = text,
    ST_ERRORS(ST_ERR_TEXT_)
#undef ST_ERR_TEXT_
};

const char *st_errstr(int code)
{
  if (code == ST_OK)
    return "ok";
  int i = -1 - code;
  return i >= 0 && i < ST__NERR ? err_text[i] : "unknown error";
}

/* Maps an SQLite result code onto ours (internal.h). */
int _st_code(int rc)
{
  switch (rc & 0xff) {
  case SQLITE_OK:
  case SQLITE_DONE:
  case SQLITE_ROW: return ST_OK;
  case SQLITE_BUSY:
  case SQLITE_LOCKED: return ST_EBUSY;
  case SQLITE_READONLY:
  case SQLITE_PERM:
  case SQLITE_AUTH: return ST_EREADONLY;
  case SQLITE_CORRUPT:
  case SQLITE_NOTADB: return ST_ECORRUPT;
  case SQLITE_FULL: return ST_EFULL;
  case SQLITE_NOMEM: return ST_ENOMEM;
  case SQLITE_CANTOPEN: return ST_ENOENT;
  default: return ST_EIO;
  }
}

/* Refines an SQLite failure with the errno behind it: a full disk or a read-only file often
 * surfaces as a generic I/O or can't-open error. */
static int db_code(sqlite3 *db, int rc, const char *path)
{
  int code = _st_code(rc), e = db ? sqlite3_system_errno(db) : 0;
  if (e == ENOSPC || e == EDQUOT)
    return ST_EFULL;
  if (e == EROFS || e == EACCES || e == EPERM)
    return ST_EREADONLY;
  if (code == ST_ENOENT && path && access(path, F_OK) == 0)
    return access(path, W_OK) == 0 ? ST_EIO : ST_EREADONLY;
  return code;
}

static int fail(char *err, size_t len, int code, const char *fmt, ...)
{
  if (err && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
  }
  return code;
}

static int64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int _st_exec(sqlite3 *db, const char *sql)
{
  return db_code(db, sqlite3_exec(db, sql, NULL, NULL, NULL), NULL);
}

/* Runs a query returning one integer; *out untouched when there is no row. */
static int query_int(sqlite3 *db, const char *sql, int64_t *out)
{
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK)
    return db_code(db, rc, NULL);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    *out = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return db_code(db, rc, NULL);
}

/* The schema's version and how many objects it has, read by one statement, so on one snapshot:
 * a schema another process commits meanwhile is seen whole or not at all (read one after the
 * other, a new version 0 and the other's new tables made a profile being created look like
 * someone else's file). */
static int schema_state(sqlite3 *db, int *version, int64_t *nobjects)
{
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, "SELECT (SELECT user_version FROM pragma_user_version),"
                                  " (SELECT count(*) FROM sqlite_master)", -1, &st, NULL);
  if (rc != SQLITE_OK)
    return db_code(db, rc, NULL);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *version = (int)sqlite3_column_int64(st, 0);
    *nobjects = sqlite3_column_int64(st, 1);
  }
  sqlite3_finalize(st);
  return db_code(db, rc, NULL);
}

int st_schema_version(st_db_t *db, int *version)
{
  int64_t v = 0;
  int rc = query_int(db->db, "PRAGMA user_version", &v);
  *version = (int)v;
  return rc;
}

sqlite3 *st_sqlite(st_db_t *db) { return db->db; }

int st_migrate_to(st_db_t *db, int version)
{
  if (version > ST_SCHEMA_VERSION)
    return ST_ENEWER;
  if (version < 0)
    return ST_ECORRUPT;
  for (;;) {
    int rc = _st_exec(db->db, "BEGIN IMMEDIATE");
    if (rc)
      return rc;
    int cur;
    rc = st_schema_version(db, &cur); /* re-read inside the lock: another process may migrate */
    if (rc || cur >= version || cur < 0) { /* migrations[] has no entry before 0 */
      _st_exec(db->db, rc ? "ROLLBACK" : "COMMIT");
      return rc ? rc : cur < 0 ? ST_ECORRUPT : cur > ST_SCHEMA_VERSION ? ST_ENEWER : ST_OK;
    }
    char bump[64];
    snprintf(bump, sizeof bump, "PRAGMA user_version = %d", cur + 1);
    if ((rc = _st_exec(db->db, migrations[cur])) || (rc = _st_exec(db->db, bump)) ||
        (rc = _st_exec(db->db, "COMMIT"))) {
      _st_exec(db->db, "ROLLBACK");
      return rc;
    }
  }
}

/* A read-only connection to an older schema reads what the newest one has: the runs' and the
 * run_sigs' newer columns (NULL, or their defaults) through views, and empty tables for what
 * came later (the sampler's before 3, the JIT's before 4, objects before 5; with variants' newer
 * columns at 4, the series before 8, the judge's pools before 9, the models' settled column
 * before 10, the variants' ratio before 11). query.h reads no programs.script, so 5's programs need nothing. TEMP tables and
 * views are looked up before the file's own, shadow nothing in it and vanish with the
 * connection: every query reads every schema alike, and the file is never written. */
static int read_views(sqlite3 *db, int version)
{
  static const char before3[] =
      "CREATE TEMP TABLE symbols(id INTEGER PRIMARY KEY, module TEXT, name TEXT);"
      "CREATE TEMP TABLE run_pcs(run_id INTEGER, sig_id INTEGER, symbol_id INTEGER,"
      " samples INTEGER);"
      "CREATE TEMP TABLE run_stacks(run_id INTEGER, sig_id INTEGER, stack TEXT, samples INTEGER);"
      "CREATE TEMP TABLE run_counters(run_id INTEGER, sig_id INTEGER, event TEXT, value INTEGER);";
  static const char before4[] =
      "CREATE TEMP TABLE variants(run_id INTEGER, sig_id INTEGER, status TEXT, generator INTEGER,"
      " llvm TEXT, cpu TEXT, compile_ns INTEGER, calls INTEGER, timed_calls INTEGER,"
      " timed_ns INTEGER, origin TEXT, pre_calls INTEGER, ratio REAL);"
      "CREATE TEMP TABLE events(id INTEGER PRIMARY KEY, run_id INTEGER, sig_id INTEGER,"
      " time_ns INTEGER, kind TEXT, detail TEXT);";
  static const char variants4[] =
      "CREATE TEMP VIEW variants AS SELECT *, 'compiled' AS origin, 0 AS pre_calls,"
      " NULL AS ratio FROM main.variants;";
  static const char before5[] =
      "CREATE TEMP TABLE objects(id INTEGER PRIMARY KEY, sig_id INTEGER, cpu TEXT, llvm TEXT,"
      " generator INTEGER, symbol TEXT, checksum INTEGER, code BLOB, run_id INTEGER,"
      " created_ns INTEGER);";
  if (version >= 11)
    return ST_OK;
  int rc = ST_OK;
  /* 5 to 10: no variant row has its run's judge ratio */
  if (version >= 5 && (rc = _st_exec(db, "CREATE TEMP VIEW variants AS SELECT *, NULL AS ratio"
                                         " FROM main.variants;")))
    return rc;
  if (version >= 10)
    return ST_OK;
  /* 6 to 9: no model was confirmed by a second measurement */
  if (version >= 6 && (rc = _st_exec(db, "CREATE TEMP VIEW machine_models AS SELECT *,"
                                         " 0 AS settled FROM main.machine_models;")))
    return rc;
  if (version >= 9)
    return ST_OK;
  /* before 9: no judge's rounds were kept */
  rc = _st_exec(db, "CREATE TEMP TABLE judge_pools(sig_id INTEGER, cpu TEXT, generator INTEGER,"
                        " symbol TEXT, runs INTEGER, rounds INTEGER, slower INTEGER,"
                        " faster INTEGER, kept INTEGER, judged INTEGER, orig_calls INTEGER,"
                        " orig_ns INTEGER, var_calls INTEGER, var_ns INTEGER, ratios BLOB,"
                        " updated_ns INTEGER);");
  if (rc || version >= 8)
    return rc;
  /* before 8: no run has a series over time */
  rc = _st_exec(db, "CREATE TEMP TABLE run_series(run_id INTEGER, sig_id INTEGER,"
                    " interval_ns INTEGER, start_ns INTEGER, calls BLOB, vcalls BLOB,"
                    " samples BLOB);");
  if (rc || version >= 7)
    return rc;
  /* before 7: no signature has a JIT state or a reason */
  rc = _st_exec(db, "CREATE TEMP VIEW run_sigs AS SELECT *, NULL AS state, NULL AS reason"
                    " FROM main.run_sigs;");
  if (rc || version >= 5)
    return rc;
  char runs[256];
  snprintf(runs, sizeof runs,
           "CREATE TEMP VIEW runs AS SELECT *%s%s, NULL AS warm_ns FROM main.runs;",
           version < 2 ? ", NULL AS parent_run, NULL AS parent_start_ns, 0 AS overflow_calls" : "",
           version < 3 ? ", NULL AS sampling" : "");
  rc = _st_exec(db, runs);
  if (!rc && version < 3)
    rc = _st_exec(db, before3);
  if (!rc)
    rc = _st_exec(db, version < 4 ? before4 : variants4);
  if (!rc)
    rc = _st_exec(db, before5);
  return rc;
}

/* mkdir -p of path's folder; folders it creates get mode 0700. */
static int make_parent(const char *path)
{
  char dir[4096];
  if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
    return -ENAMETOOLONG;
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir)
    return 0;
  *slash = 0;
  for (char *p = dir + 1;; p++) {
    if (*p != '/' && *p)
      continue;
    char c = *p;
    *p = 0;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
      return -errno;
    if (!(*p = c))
      return 0;
  }
}

/* Decodes a judge pool's ratios (little-endian float32, ST_JUDGE_RATIOS at most) into out;
 * returns how many. */
static uint32_t judge_ratios(const uint8_t *blob, int bytes, float *out)
{
  uint32_t n = blob && bytes > 0 ? (uint32_t)bytes / 4 : 0;
  n = n < ST_JUDGE_RATIOS ? n : ST_JUDGE_RATIOS;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t bits = 0;
    for (int b = 0; b < 4; b++)
      bits |= (uint32_t)blob[4 * k + b] << (8 * b);
    memcpy(&out[k], &bits, 4);
  }
  return n;
}

/* SQL judge_median(ratios): the median of a judge pool's ratios (st_judge_median), NULL when it
 * holds fewer than ST_JUDGE_MIN_RATIOS (fewer than any verdict rests on), or any is not a
 * positive finite number (a damaged file: no figure rather than a wrong one). The readers' fair speedups and
 * savings (query.h). */
static void sql_judge_median(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
  (void)argc;
  float r[ST_JUDGE_RATIOS];
  uint32_t n = sqlite3_value_type(argv[0]) == SQLITE_BLOB
                   ? judge_ratios(sqlite3_value_blob(argv[0]), sqlite3_value_bytes(argv[0]), r)
                   : 0;
  for (uint32_t k = 0; k < n; k++)
    if (!(r[k] > 0 && r[k] < INFINITY))
      n = 0;
  if (n < ST_JUDGE_MIN_RATIOS)
    sqlite3_result_null(ctx);
  else
    sqlite3_result_double(ctx, st_judge_median(r, n));
}

/* "file:PATH?immutable=1" with PATH percent-encoded where a URI needs it; 0 when it does not
 * fit in len. */
static int immutable_uri(const char *path, char *uri, size_t len)
{
  size_t n = (size_t)snprintf(uri, len, "file:");
  const unsigned char *p = (const unsigned char *)path;
  for (; *p && n + 4 < len; p++)
    if (*p == '?' || *p == '#' || *p == '%' || *p < 0x20 || *p >= 0x7f)
      n += (size_t)snprintf(uri + n, len - n, "%%%02X", *p);
    else
      uri[n++] = (char)*p;
  if (*p || n + sizeof "?immutable=1" > len)
    return 0;
  memcpy(uri + n, "?immutable=1", sizeof "?immutable=1");
  return 1;
}

int st_open(const char *path, int flags, int busy_ms, st_db_t **out, char *err, size_t errlen)
{
  *out = NULL;
  int ro = flags & ST_OPEN_READONLY;
  /* Only a regular file, or nothing yet: a symbolic link to nothing would have the database
   * created wherever it points (as root: anywhere), and a device (/dev/full) would get SQLite's
   * journal created beside it. */
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (S_ISLNK(st.st_mode) && stat(path, &st) != 0)
      return fail(err, errlen, ST_EIO, "%s is a symbolic link to nothing: not followed (remove "
                  "it, or point OPJIT_DB / --db at a file)", path);
    if (!S_ISREG(st.st_mode))
      return fail(err, errlen, ST_EIO, "%s is not a regular file: not a database (point "
                  "OPJIT_DB / --db at a file)", path);
  }
  if (!ro && (flags & ST_OPEN_CREATE)) {
    int e = make_parent(path);
    if (e)
      return fail(err, errlen, e == -EROFS || e == -EACCES ? ST_EREADONLY : ST_EIO,
                  "cannot create the folder of %s: %s", path, strerror(-e));
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600); /* SQLite would use 0644 */
    int why = errno;
    if (fd >= 0)
      close(fd);
    else if ((why == EROFS || why == EACCES) && access(path, F_OK) != 0) /* a new file */
      return fail(err, errlen, ST_EREADONLY, "cannot create %s: %s", path, strerror(why));
  }
  st_db_t *db = calloc(1, sizeof *db);
  if (!db)
    return fail(err, errlen, ST_ENOMEM, "out of memory");
  int oflags = ro ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
  /* A reader of a profile on read-only media (a mounted image, a read-only share): SQLite could
   * create neither a WAL index nor locks there, so the file is read as immutable. */
  char uri[3 * PATH_MAX + 32];
  struct statvfs vfs;
  const char *name = path;
  if (ro && statvfs(path, &vfs) == 0 && (vfs.f_flag & ST_RDONLY) &&
      immutable_uri(path, uri, sizeof uri)) {
    name = uri;
    oflags |= SQLITE_OPEN_URI;
  }
  int rc = sqlite3_open_v2(name, &db->db, oflags | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    int code = db_code(db->db, rc, path);
    fail(err, errlen, code, "cannot open %s: %s", path,
         code == ST_ENOENT ? "no such file (no run has recorded into it yet)" : st_errstr(code));
    st_close(db);
    return code;
  }
  sqlite3_busy_timeout(db->db, busy_ms);
  sqlite3_create_function(db->db, "judge_median", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                          sql_judge_median, NULL, NULL);
  int version = 0;
  int64_t ntables = 0, ours = 0;
  if ((rc = schema_state(db->db, &version, &ntables)))
    goto out_fail;
  if (version > ST_SCHEMA_VERSION) {
    fail(err, errlen, ST_ENEWER,
         "%s has schema version %d, newer than this opjit's %d: upgrade opjit or use another "
         "database (OPJIT_DB / --db)", path, version, ST_SCHEMA_VERSION);
    st_close(db);
    return ST_ENEWER;
  }
  if (version < 0) { /* no opjit writes one: damage, never a schema to migrate from */
    fail(err, errlen, ST_ECORRUPT,
         "%s has schema version %d, which no opjit writes: refusing to touch it (move it "
         "aside or use another database: OPJIT_DB / --db)",
         path, version);
    st_close(db);
    return ST_ECORRUPT;
  }
  if (version > 0 || ntables > 0) {
    rc = query_int(db->db, "SELECT count(*) FROM meta WHERE key='application' AND value='opjit'",
                   &ours);
    if (rc == ST_ECORRUPT && version > 0) /* an opjit schema whose meta table is damaged */
      goto out_fail;
    if (rc == ST_EIO || version == 0 || !ours) { /* no meta table, or not ours */
      fail(err, errlen, ST_ENOTOURS,
           "%s is an SQLite database but not an opjit profile: refusing to touch it", path);
      st_close(db);
      return ST_ENOTOURS;
    }
    if (rc)
      goto out_fail;
  }
  if (ro) {
    if (version == 0) {
      fail(err, errlen, ST_ENOENT, "%s holds no opjit profile yet", path);
      st_close(db);
      return ST_ENOENT;
    }
    if ((rc = read_views(db->db, version)))
      goto out_fail;
  } else {
    if (sqlite3_db_readonly(db->db, "main") == 1) {
      fail(err, errlen, ST_EREADONLY, "cannot write %s: the database is read-only", path);
      st_close(db);
      return ST_EREADONLY;
    }
    /* A new file holds nothing to lose: its creation (the switch to WAL, then every table) is
     * not synced. Synced, it took six fdatasyncs: 10-25 ms on an idle disk, and up to seconds
     * behind another process's writeback, while a cold run's first kernels waited for its run
     * to be recorded. Power lost meanwhile leaves at worst an empty schema, created again by
     * the next open, or a damaged new file. Every later transaction syncs as NORMAL says. */
    int fresh = version == 0 && ntables == 0;
    if ((fresh && (rc = _st_exec(db->db, "PRAGMA synchronous=OFF"))) ||
        (rc = _st_exec(db->db, "PRAGMA journal_mode=WAL")) ||
        (!fresh && (rc = _st_exec(db->db, "PRAGMA synchronous=NORMAL"))))
      goto out_fail;
    /* Migrating takes the write lock: only when the file is older than this build. */
    if (!(flags & ST_OPEN_NO_MIGRATE) && version < ST_SCHEMA_VERSION &&
        (rc = st_migrate_to(db, ST_SCHEMA_VERSION)))
      goto out_fail;
    if (fresh && (rc = _st_exec(db->db, "PRAGMA synchronous=NORMAL")))
      goto out_fail;
  }
  _st_exec(db->db, "PRAGMA foreign_keys=ON");
  *out = db;
  return ST_OK;
out_fail:
  if ((sqlite3_errcode(db->db) & 0xff) == SQLITE_CORRUPT)
    fail(err, errlen, rc, "%s is damaged (SQLite: %s): refusing to touch it (opjit doctor "
         "--db %s checks it; " ST_DAMAGED_ADVICE ")", path, sqlite3_errmsg(db->db), path);
  else
    fail(err, errlen, rc, "cannot use %s: %s (%s)", path, st_errstr(rc), sqlite3_errmsg(db->db));
  st_close(db);
  return rc;
}

void st_close(st_db_t *db)
{
  if (!db)
    return;
  for (int i = 0; i < db->nstmts; i++)
    sqlite3_finalize(db->stmts[i].st);
  sqlite3_close_v2(db->db);
  free(db);
}

/* The prepared statement of sql: the connection's cached one (*cached = 1: reset it after
 * use), else a new one (cached while there is room; *cached = 0: finalize it after use). */
static int prepared(st_db_t *db, const char *sql, sqlite3_stmt **st, int *cached)
{
  for (int i = 0; i < db->nstmts; i++)
    if (db->stmts[i].sql == sql && !strcmp(sqlite3_sql(db->stmts[i].st), sql)) {
      *st = db->stmts[i].st;
      *cached = 1;
      return SQLITE_OK;
    }
  *cached = db->nstmts < ST_STMT_CACHE;
  int rc = sqlite3_prepare_v3(db->db, sql, -1, *cached ? SQLITE_PREPARE_PERSISTENT : 0, st, NULL);
  if (rc != SQLITE_OK)
    *cached = 0;
  else if (*cached)
    db->stmts[db->nstmts].sql = sql, db->stmts[db->nstmts++].st = *st;
  return rc;
}

/* Prepares sql (once per connection), binds the arguments per fmt ('i' int64, 't' text, 'b'
 * blob + size_t length, 'r' double, a NaN bound as null, 'n' null, which takes no argument) and steps it once. If out is
 * non-NULL and a row comes back, *out = column 0. */
static int vrun1(st_db_t *db, int64_t *out, const char *sql, const char *fmt, va_list ap)
{
  sqlite3_stmt *st;
  int cached;
  int rc = prepared(db, sql, &st, &cached);
  if (rc != SQLITE_OK)
    return db_code(db->db, rc, NULL);
  for (int i = 1; *fmt; fmt++, i++) {
    switch (*fmt) {
    case 'i': sqlite3_bind_int64(st, i, va_arg(ap, int64_t)); break;
    case 'r': {
      double d = va_arg(ap, double);
      if (isnan(d))
        sqlite3_bind_null(st, i);
      else
        sqlite3_bind_double(st, i, d);
      break;
    }
    case 't': sqlite3_bind_text(st, i, va_arg(ap, const char *), -1, SQLITE_STATIC); break;
    case 'b': {
      const void *p = va_arg(ap, const void *);
      sqlite3_bind_blob(st, i, p, (int)va_arg(ap, size_t), SQLITE_STATIC);
      break;
    }
    default: sqlite3_bind_null(st, i); break;
    }
  }
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW && out)
    *out = sqlite3_column_int64(st, 0);
  if (cached) {
    sqlite3_reset(st); /* ends the statement; its error, if any, is rc's */
    sqlite3_clear_bindings(st);
  } else {
    sqlite3_finalize(st);
  }
  return db_code(db->db, rc, NULL);
}

static int run1(st_db_t *db, int64_t *out, const char *sql, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int rc = vrun1(db, out, sql, fmt, ap);
  va_end(ap);
  return rc;
}

/* The id of the row whose unique columns are the arguments, inserted if missing. */
static int upsert_id(st_db_t *db, int64_t *id, const char *insert, const char *select,
                     const char *fmt, ...)
{
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  int rc = vrun1(db, NULL, insert, fmt, ap);
  if (!rc)
    rc = vrun1(db, id, select, fmt, again);
  va_end(again);
  va_end(ap);
  return rc;
}

/* NUL-separated strings as a JSON array (kv=0) or as an object of NAME=value (kv=1). */
static char *nul_list_json(const char *s, size_t len, int kv)
{
  cJSON *j = kv ? cJSON_CreateObject() : cJSON_CreateArray();
  for (size_t i = 0; j && s && i < len;) {
    size_t n = strnlen(s + i, len - i);
    char *item = strndup(s + i, n);
    if (!item)
      break;
    char *eq = kv ? strchr(item, '=') : NULL;
    if (eq) {
      *eq = 0;
      cJSON_AddStringToObject(j, item, eq + 1);
    } else if (!kv) {
      cJSON_AddItemToArray(j, cJSON_CreateString(item));
    }
    free(item);
    i += n + 1;
  }
  char *out = j ? cJSON_PrintUnformatted(j) : NULL;
  cJSON_Delete(j);
  return out;
}

int st_run_begin(st_db_t *db, const st_run_info_t *in, int64_t *run_id)
{
  char *argv = nul_list_json(in->cmdline, in->cmdline_len, 0);
  char *opts = nul_list_json(in->options, in->options_len, 1);
  int64_t prog = 0, mach = 0;
  int rc = !argv || !opts ? ST_ENOMEM : _st_exec(db->db, "BEGIN IMMEDIATE");
  if (rc)
    goto out;
  if (!(rc = upsert_id(db, &prog,
                       "INSERT OR IGNORE INTO programs(exe, build_id, script) VALUES(?,?,?)",
                       "SELECT id FROM programs WHERE exe=? AND build_id=? AND script=?", "ttt",
                       in->exe, in->build_id, in->script ? in->script : "")) &&
      !(rc = upsert_id(db, &mach,
                       "INSERT OR IGNORE INTO machines(cpu_model, cpu_flags, ncpu) VALUES(?,?,?)",
                       "SELECT id FROM machines WHERE cpu_model=? AND cpu_flags=? AND ncpu=?",
                       "tti", in->cpu_model, in->cpu_flags, (int64_t)in->ncpu)))
    rc = run1(db, run_id,
              "INSERT INTO runs(program_id, machine_id, pid, ppid, argv, options, agent_version,"
              " start_ns, flush_ns, parent_start_ns, parent_run, warm_ns) VALUES(?,?,?,?,?,?,?,"
              "?,?8,nullif(?,0),(SELECT id FROM runs WHERE pid=?4 AND start_ns=?9),nullif(?,0))"
              " RETURNING id",
              "iiiitttiii", prog, mach, (int64_t)in->pid, (int64_t)in->ppid, argv, opts, in->agent_version,
              in->start_ns, in->parent_start_ns, in->warm_ns);
  /* Children that forked from this run and were recorded before it now find their parent. */
  if (!rc)
    rc = run1(db, NULL,
              "UPDATE runs SET parent_run=? WHERE parent_run IS NULL AND ppid=? AND"
              " parent_start_ns=?",
              "iii", *run_id, (int64_t)in->pid, in->start_ns);
  _st_exec(db->db, rc ? "ROLLBACK" : "COMMIT");
out:
  cJSON_free(argv);
  cJSON_free(opts);
  return rc;
}

int st_run_flush(st_db_t *db, int64_t run_id, const st_sig_rec_t *recs, size_t n,
                 uint64_t overflow_calls, int64_t now_ns)
{
  int rc = _st_exec(db->db, "BEGIN IMMEDIATE");
  if (rc)
    return rc;
  for (size_t i = 0; i < n && !rc; i++) {
    const st_sig_rec_t *r = &recs[i];
    int64_t sig_id = 0;
    rc = run1(db, NULL,
              "INSERT OR IGNORE INTO signatures(key, sig, op, name, params) VALUES(?,?,?,?,?)",
              "btttt", r->key, r->key_len, r->sig, r->op, r->name, r->params);
    if (!rc)
      rc = run1(db, &sig_id, "SELECT id FROM signatures WHERE key=?", "b", r->key, r->key_len);
    if (!rc)
      rc = run1(db, NULL,
                "INSERT INTO run_sigs(run_id, sig_id, calls, timed_calls, timed_ns, state, reason)"
                " VALUES(?,?,?,?,?,?,?) ON CONFLICT(run_id, sig_id) DO UPDATE SET"
                " calls=excluded.calls, timed_calls=excluded.timed_calls,"
                " timed_ns=excluded.timed_ns, state=excluded.state, reason=excluded.reason",
                "iiiiitt", run_id, sig_id, (int64_t)r->calls,
                (int64_t)r->timed_calls, (int64_t)r->timed_ns, r->state, r->reason);
  }
  if (!rc)
    rc = run1(db, NULL, "UPDATE runs SET flush_ns=?, overflow_calls=? WHERE id=?", "iii",
              now_ns, (int64_t)overflow_calls, run_id);
  _st_exec(db->db, rc ? "ROLLBACK" : "COMMIT");
  return rc;
}

int st_run_warm(st_db_t *db, int64_t run_id, int64_t warm_ns)
{
  return run1(db, NULL, "UPDATE runs SET warm_ns=? WHERE id=?", "ii", warm_ns, run_id);
}

int st_run_end(st_db_t *db, int64_t run_id, int64_t end_ns, const char *status)
{
  return run1(db, NULL, "UPDATE runs SET end_ns=?, flush_ns=?1, status=? WHERE id=?", "iti",
              end_ns, status, run_id);
}

/* The signature id of a key (0 for NULL: outside operators); ST_ENOENT if never flushed. */
static int sig_id_of(st_db_t *db, const void *key, size_t len, int64_t *id)
{
  *id = 0;
  if (!key)
    return ST_OK;
  int rc = run1(db, id, "SELECT id FROM signatures WHERE key=?", "b", key, len);
  return rc ? rc : *id ? ST_OK : ST_ENOENT;
}

int st_crash(st_db_t *db, const st_crash_t *c, st_crash_result_t *res)
{
  memset(res, 0, sizeof *res);
  int rc = _st_exec(db->db, "BEGIN IMMEDIATE");
  if (rc)
    return rc;
  int64_t run = 0, sig = 0;
  rc = run1(db, &run, "SELECT id FROM runs WHERE id=? AND pid=?", "ii", c->run_id,
            (int64_t)c->pid);
  if (!rc && run) {
    rc = run1(db, NULL, "UPDATE runs SET status='crashed', end_ns=? WHERE id=? AND"
                        " status='running'", "ii", c->time_ns, run);
    res->run_marked = !rc && sqlite3_changes(db->db) > 0;
  }
  if (!rc && c->key && (rc = sig_id_of(db, c->key, c->key_len, &sig)) == ST_ENOENT)
    rc = ST_OK, sig = 0; /* never flushed: the next run records it as its own */
  if (!rc && sig) {
    rc = run1(db, NULL, "DELETE FROM objects WHERE sig_id=? AND cpu=?", "it", sig, c->cpu);
    res->objects = rc ? 0 : sqlite3_changes(db->db);
  }
  if (!rc && sig && run) {
    rc = run1(db, NULL,
              "INSERT INTO run_sigs(run_id, sig_id, calls, timed_calls, timed_ns, state, reason)"
              " VALUES(?,?,0,0,0,'crashed',?) ON CONFLICT DO UPDATE SET state='crashed',"
              " reason=excluded.reason", "iit", run, sig, c->detail);
    if (!rc)
      rc = run1(db, NULL,
                "INSERT INTO variants(run_id, sig_id, status, generator, llvm, cpu, compile_ns,"
                " calls, timed_calls, timed_ns) VALUES(?,?,'crashed',?,?,?,0,0,0,0) ON CONFLICT"
                " DO UPDATE SET status='crashed', generator=excluded.generator,"
                " llvm=excluded.llvm, cpu=excluded.cpu", "iiitt", run, sig,
                (int64_t)c->generator, c->llvm, c->cpu);
    if (!rc)
      rc = run1(db, NULL, "INSERT INTO events(run_id, sig_id, time_ns, kind, detail)"
                          " VALUES(?,?,?,'crashed',?)", "iiit", run, sig, c->time_ns, c->detail);
    res->recorded = !rc;
  }
  _st_exec(db->db, rc ? "ROLLBACK" : "COMMIT");
  if (rc)
    memset(res, 0, sizeof *res);
  return rc;
}

int st_crashed(st_db_t *db, const void *key, size_t key_len, const char *cpu, int generator,
               int64_t *run_id)
{
  *run_id = 0;
  return run1(db, run_id,
              "SELECT max(v.run_id) FROM variants v JOIN signatures s ON s.id=v.sig_id"
              " WHERE s.key=? AND v.status='crashed' AND v.generator=? AND v.cpu=?",
              "bit", key, key_len, (int64_t)generator, cpu);
}

int st_run_samples(st_db_t *db, int64_t run_id, const st_samples_t *s)
{
  int rc = _st_exec(db->db, "BEGIN IMMEDIATE");
  if (rc)
    return rc;
  int64_t sig, sym;
  for (size_t i = 0; i < s->npcs && !rc; i++) {
    const st_pc_rec_t *r = &s->pcs[i];
    if (!(rc = sig_id_of(db, r->key, r->key_len, &sig)) &&
        !(rc = upsert_id(db, &sym, "INSERT OR IGNORE INTO symbols(module, name) VALUES(?,?)",
                         "SELECT id FROM symbols WHERE module=? AND name=?", "tt", r->module,
                         r->symbol)))
      rc = run1(db, NULL,
                "INSERT INTO run_pcs VALUES(?,?,?,?) ON CONFLICT DO UPDATE SET"
                " samples=excluded.samples", "iiii", run_id, sig, sym, (int64_t)r->samples);
  }
  for (size_t i = 0; i < s->nstacks && !rc; i++) {
    const st_stack_rec_t *r = &s->stacks[i];
    if (!(rc = sig_id_of(db, r->key, r->key_len, &sig)))
      rc = run1(db, NULL,
                "INSERT INTO run_stacks VALUES(?,?,?,?) ON CONFLICT DO UPDATE SET"
                " samples=excluded.samples", "iiti", run_id, sig, r->stack, (int64_t)r->samples);
  }
  for (size_t i = 0; i < s->ncounters && !rc; i++) {
    const st_counter_rec_t *r = &s->counters[i];
    if (!(rc = sig_id_of(db, r->key, r->key_len, &sig)))
      rc = run1(db, NULL,
                "INSERT INTO run_counters VALUES(?,?,?,?) ON CONFLICT DO UPDATE SET"
                " value=excluded.value", "iiti", run_id, sig, r->event, (int64_t)r->value);
  }
  if (!rc && s->sampling)
    rc = run1(db, NULL, "UPDATE runs SET sampling=? WHERE id=?", "ti", s->sampling, run_id);
  _st_exec(db->db, rc ? "ROLLBACK" : "COMMIT");
  return rc;
}

/* Replaces signature sig's judge pool for r's machine_cpu with r->judge. */
static int judge_write(st_db_t *db, int64_t sig, const st_variant_rec_t *r)
{
  const st_judge_pool_t *j = r->judge;
  uint32_t n = j->n < ST_JUDGE_RATIOS ? j->n : ST_JUDGE_RATIOS;
  uint8_t blob[4 * ST_JUDGE_RATIOS];
  int64_t slower = 0, faster = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t bits;
    memcpy(&bits, &j->ratio[k], 4);
    for (int b = 0; b < 4; b++)
      blob[4 * k + b] = (uint8_t)(bits >> (8 * b));
    slower += j->ratio[k] > 1.0f, faster += j->ratio[k] < 1.0f;
  }
  return run1(db, NULL,
              "INSERT INTO judge_pools VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT"
              " DO UPDATE SET generator=excluded.generator, symbol=excluded.symbol,"
              " runs=excluded.runs, rounds=excluded.rounds, slower=excluded.slower,"
              " faster=excluded.faster, kept=excluded.kept, judged=excluded.judged,"
              " orig_calls=excluded.orig_calls, orig_ns=excluded.orig_ns,"
              " var_calls=excluded.var_calls, var_ns=excluded.var_ns, ratios=excluded.ratios,"
              " updated_ns=excluded.updated_ns",
              "ititiiiiiiiiiibi", sig, r->machine_cpu, (int64_t)r->generator, r->symbol,
              (int64_t)j->runs, (int64_t)j->rounds, slower, faster, (int64_t)(j->kept != 0),
              (int64_t)j->judged, (int64_t)j->o_n, (int64_t)j->o_ns, (int64_t)j->v_n,
              (int64_t)j->v_ns, blob, (size_t)(4 * n), now_ns());
}

/* Reads the judge pool in st's columns from col on (runs, rounds, kept, judged, orig_calls,
 * orig_ns, var_calls, var_ns, ratios) into h; a NULL runs column means none. */
static void judge_read(sqlite3_stmt *st, int col, st_hot_t *h)
{
  if (sqlite3_column_type(st, col) == SQLITE_NULL)
    return;
  st_judge_pool_t *j = &h->judge;
  j->runs = (uint32_t)sqlite3_column_int64(st, col);
  j->rounds = (uint32_t)sqlite3_column_int64(st, col + 1);
  j->kept = sqlite3_column_int(st, col + 2) != 0;
  j->judged = (uint32_t)sqlite3_column_int64(st, col + 3);
  j->o_n = (uint64_t)sqlite3_column_int64(st, col + 4);
  j->o_ns = (uint64_t)sqlite3_column_int64(st, col + 5);
  j->v_n = (uint64_t)sqlite3_column_int64(st, col + 6);
  j->v_ns = (uint64_t)sqlite3_column_int64(st, col + 7);
  j->n = judge_ratios(sqlite3_column_blob(st, col + 8), sqlite3_column_bytes(st, col + 8), j->ratio);
  h->has_judge = 1;
}

int st_run_variants(st_db_t *db, int64_t run_id, const st_variant_rec_t *v, size_t nv,
                    const st_event_rec_t *ev, size_t nev)
{
  int rc = _st_exec(db->db, "BEGIN IMMEDIATE");
  if (rc)
    return rc;
  int64_t sig;
  for (size_t i = 0; i < nv && !rc; i++) {
    const st_variant_rec_t *r = &v[i];
    if ((rc = sig_id_of(db, r->key, r->key_len, &sig)) == ST_ENOENT) {
      rc = ST_OK; /* collected by opjit gc since (a signature this run has not called) */
      continue;
    }
    if (rc)
      break;
    if (r->status)
      rc = run1(db, NULL,
                "INSERT INTO variants VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO UPDATE SET"
                " status=excluded.status, generator=excluded.generator, llvm=excluded.llvm,"
                " cpu=excluded.cpu, compile_ns=excluded.compile_ns, calls=excluded.calls,"
                " timed_calls=excluded.timed_calls, timed_ns=excluded.timed_ns,"
                " origin=excluded.origin, pre_calls=excluded.pre_calls, ratio=excluded.ratio",
                "iitittiiiitir", run_id, sig, r->status, (int64_t)r->generator, r->llvm, r->cpu,
                (int64_t)r->compile_ns, (int64_t)r->calls, (int64_t)r->timed_calls,
                (int64_t)r->timed_ns, r->origin ? r->origin : "compiled", (int64_t)r->pre_calls,
                r->ratio > 0 ? r->ratio : NAN);
    if (!rc && r->object)
      rc = run1(db, NULL,
                "INSERT INTO objects(sig_id, cpu, llvm, generator, symbol, checksum, code, run_id,"
                " created_ns) VALUES(?,?,?,?,?,?,?,?,?) ON CONFLICT(sig_id, cpu) DO UPDATE SET"
                " llvm=excluded.llvm, generator=excluded.generator, symbol=excluded.symbol,"
                " checksum=excluded.checksum, code=excluded.code, run_id=excluded.run_id,"
                " created_ns=excluded.created_ns",
                "ittitibii", sig, r->machine_cpu, r->llvm, (int64_t)r->generator, r->symbol,
                (int64_t)r->checksum, r->object, r->object_len, run_id, now_ns());
    else if (!rc && r->drop_object)
      rc = run1(db, NULL, "DELETE FROM objects WHERE sig_id=? AND cpu=?", "it", sig,
                r->machine_cpu);
    if (!rc && r->drop_object)
      rc = run1(db, NULL, "DELETE FROM judge_pools WHERE sig_id=? AND cpu=?", "it", sig,
                r->machine_cpu);
    else if (!rc && r->judge && r->symbol && *r->symbol)
      rc = judge_write(db, sig, r);
  }
  for (size_t i = 0; i < nev && !rc; i++)
    if (!(rc = sig_id_of(db, ev[i].key, ev[i].key_len, &sig)))
      rc = run1(db, NULL,
                "INSERT INTO events(run_id, sig_id, time_ns, kind, detail) VALUES(?,?,?,?,?)",
                "iiitt", run_id, sig, ev[i].time_ns, ev[i].kind, ev[i].detail);
    else if (rc == ST_ENOENT)
      rc = ST_OK; /* as above */
  _st_exec(db->db, rc ? "ROLLBACK" : "COMMIT");
  return rc;
}

/* Appends v[0, count) (zeros when v is NULL) to out as unsigned LEB128 varints: 7 bits a byte,
 * low first, the high bit set on every byte but a value's last (query.c's st_series_decode
 * reads them). out has room for 10 bytes a value. Returns the bytes written. */
static size_t varints(uint8_t *out, const uint64_t *v, uint32_t count)
{
  size_t n = 0;
  for (uint32_t k = 0; k < count; k++) {
    uint64_t x = v ? v[k] : 0;
    for (; x >= 0x80; x >>= 7)
      out[n++] = (uint8_t)(x | 0x80);
    out[n++] = (uint8_t)x;
  }
  return n;
}

int st_run_series(st_db_t *db, int64_t run_id, int64_t interval_ns, int64_t start_ns,
                  uint32_t count, const st_series_rec_t *rows, size_t n)
{
  uint8_t *buf = malloc(3 * 10 * (size_t)(count ? count : 1));
  if (!buf)
    return ST_ENOMEM;
  int rc = _st_exec(db->db, "BEGIN IMMEDIATE");
  if (!rc)
    rc = run1(db, NULL, "DELETE FROM run_series WHERE run_id=?", "i", run_id);
  int64_t sig;
  for (size_t i = 0; i < n && !rc; i++) {
    if (rows[i].rest)
      sig = -1;
    else if ((rc = sig_id_of(db, rows[i].key, rows[i].key_len, &sig)) == ST_ENOENT) {
      rc = ST_OK; /* not flushed yet, or collected by opjit gc */
      continue;
    }
    size_t nc = varints(buf, rows[i].calls, count);
    size_t nv = varints(buf + nc, rows[i].vcalls, count);
    size_t ns = varints(buf + nc + nv, rows[i].samples, count);
    if (!rc)
      rc = run1(db, NULL, "INSERT INTO run_series VALUES(?,?,?,?,?,?,?)", "iiiibbb", run_id, sig,
                interval_ns, start_ns, buf, nc, buf + nc, nv, buf + nc + nv, ns);
  }
  _st_exec(db->db, rc ? "ROLLBACK" : "COMMIT");
  free(buf);
  return rc;
}

/* One signature's totals while a profile is read. */
typedef struct prof_acc_s {
  int64_t sig_id;
  double calls;      /* weighted */
  uint64_t timed, timed_ns;
  int verdict_seen;  /* the newest run with a variant row for the signature was read */
  int demoted_gen;   /* ... its variant was demoted: the generator version it had, else 0 */
  int crashed;       /* ... by a crash */
} prof_acc_t;

/* bsearch's order on prof_acc_t by sig_id, the key an int64_t. */
static int by_sig_id(const void *key, const void *elem)
{
  int64_t x = *(const int64_t *)key, y = ((const prof_acc_t *)elem)->sig_id;
  return x < y ? -1 : x > y;
}

static int by_score(const void *a, const void *b)
{
  double x = ((const st_hot_t *)a)->score, y = ((const st_hot_t *)b)->score;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The runs a profile reads (?1-?5: the program's exe, build_id, script, cpu_model, cpu_flags;
 * ?6: at most that many), age 0 the newest; the run asking, begun before its warm start, has
 * no run_sigs rows yet and is not aged. */
#define PROFILE_RUNS                                                                           \
  "WITH w AS (SELECT r.id, row_number() OVER (ORDER BY r.id DESC) - 1 AS age FROM runs r"     \
  "  JOIN programs p ON p.id = r.program_id JOIN machines m ON m.id = r.machine_id"           \
  "  WHERE p.exe=?1 AND p.build_id=?2 AND p.script=?3 AND m.cpu_model=?4 AND m.cpu_flags=?5"  \
  "  AND EXISTS (SELECT 1 FROM run_sigs x WHERE x.run_id = r.id)"                             \
  "  ORDER BY r.id DESC LIMIT ?6)"

/* The columns profile_sig reads, after the signature's id and key and before the judge pool's:
 * the object's (o), then whether it is the program's own */
#define OBJECT_COLS "o.id, o.cpu, o.llvm, o.generator, o.symbol, o.checksum, o.code"
/* ... and the judge pool's (j), last */
#define JUDGE_COLS                                                                             \
  "j.runs, j.rounds, j.kept, j.judged, j.orig_calls, j.orig_ns, j.var_calls, j.var_ns, j.ratios"
/* The judge pool of the object o of signature id: joined as j */
#define JUDGE_JOIN(id)                                                                         \
  " LEFT JOIN judge_pools j ON j.sig_id = " id " AND j.cpu = o.cpu"                            \
  "  AND j.generator = o.generator AND j.symbol = o.symbol"

/* Fills h's key, object (the one for the cpu first, else the newest) and that object's judge
 * pool from a row of st_profile's second statement (or st_object's). Returns ST_OK or
 * ST_ENOMEM. */
static int profile_sig(sqlite3_stmt *st, st_hot_t *h)
{
  h->key_len = (size_t)sqlite3_column_bytes(st, 1);
  if (!(h->key = malloc(h->key_len ? h->key_len : 1)))
    return ST_ENOMEM;
  if (h->key_len) /* an empty blob reads as NULL */
    memcpy(h->key, sqlite3_column_blob(st, 1), h->key_len);
  if (sqlite3_column_type(st, 2) == SQLITE_NULL)
    return ST_OK; /* no object */
  h->object_id = sqlite3_column_int64(st, 2);
  snprintf(h->cpu, sizeof h->cpu, "%s", (const char *)sqlite3_column_text(st, 3));
  snprintf(h->llvm, sizeof h->llvm, "%s", (const char *)sqlite3_column_text(st, 4));
  h->generator = sqlite3_column_int(st, 5);
  snprintf(h->symbol, sizeof h->symbol, "%s", (const char *)sqlite3_column_text(st, 6));
  h->checksum = (uint64_t)sqlite3_column_int64(st, 7);
  h->mine = sqlite3_column_int(st, 9);
  h->code_len = (size_t)sqlite3_column_bytes(st, 8);
  if (!(h->code = malloc(h->code_len ? h->code_len : 1)))
    h->object_id = 0;
  else if (h->code_len)
    memcpy(h->code, sqlite3_column_blob(st, 8), h->code_len);
  judge_read(st, 10, h);
  return ST_OK;
}

/* Binds the program (?1-?5) and max_runs (?6) of PROFILE_RUNS to st. */
static void bind_program(sqlite3_stmt *st, const st_run_info_t *in, int max_runs)
{
  sqlite3_bind_text(st, 1, in->exe, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, in->build_id, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, in->script ? in->script : "", -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 4, in->cpu_model, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 5, in->cpu_flags, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 6, max_runs);
}

/* Two statements whatever the number of signatures: the runs' calls, timings and verdicts
 * per signature and run, then each signature's key, object and judge pool. */
int st_profile(st_db_t *db, const st_run_info_t *in, const char *cpu, double decay_runs,
               int max_runs, st_profile_t *out)
{
  memset(out, 0, sizeof *out);
  /* One read transaction: a consistent snapshot even while other processes write. */
  int rc = _st_exec(db->db, "BEGIN");
  if (rc)
    return rc;
  sqlite3_stmt *st;
  rc = sqlite3_prepare_v2(db->db,
                          PROFILE_RUNS
                          " SELECT w.age, s.sig_id, s.calls, s.timed_calls, s.timed_ns,"
                          "  v.status, v.generator"
                          " FROM w JOIN run_sigs s ON s.run_id = w.id"
                          " LEFT JOIN variants v ON v.run_id = w.id AND v.sig_id = s.sig_id"
                          " ORDER BY s.sig_id, w.age",
                          -1, &st, NULL);
  if (rc != SQLITE_OK) {
    rc = db_code(db->db, rc, NULL);
    goto out;
  }
  bind_program(st, in, max_runs);
  prof_acc_t *acc = NULL;
  size_t n = 0, cap = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t sig = sqlite3_column_int64(st, 1);
    /* Every run read has a row (PROFILE_RUNS): the oldest's age + 1 is their number. */
    if (sqlite3_column_int64(st, 0) + 1 > out->runs)
      out->runs = sqlite3_column_int64(st, 0) + 1;
    if (!n || acc[n - 1].sig_id != sig) {
      if (n == cap) {
        void *p = realloc(acc, (cap = cap ? 2 * cap : 64) * sizeof *acc);
        if (!p) {
          rc = SQLITE_NOMEM;
          break;
        }
        acc = p;
      }
      acc[n++] = (prof_acc_t){sig, 0, 0, 0, 0, 0, 0};
    }
    prof_acc_t *a = &acc[n - 1];
    if (!a->verdict_seen && sqlite3_column_type(st, 5) != SQLITE_NULL) {
      a->verdict_seen = 1;
      const char *status = (const char *)sqlite3_column_text(st, 5);
      a->crashed = strcmp(status, "crashed") == 0;
      if (a->crashed || strcmp(status, "demoted") == 0)
        a->demoted_gen = sqlite3_column_int(st, 6);
    }
    a->calls += (double)sqlite3_column_int64(st, 2) *
                exp2(-(double)sqlite3_column_int64(st, 0) / decay_runs);
    a->timed += (uint64_t)sqlite3_column_int64(st, 3);
    a->timed_ns += (uint64_t)sqlite3_column_int64(st, 4);
  }
  sqlite3_finalize(st);
  rc = rc == SQLITE_DONE ? ST_OK : db_code(db->db, rc, NULL);
  if (!rc && n && !(out->sigs = calloc(n, sizeof *out->sigs)))
    rc = ST_ENOMEM;
  st = NULL;
  if (!rc && n &&
      (rc = sqlite3_prepare_v2(
           db->db,
           PROFILE_RUNS ", s AS (SELECT DISTINCT s.sig_id AS id FROM w JOIN run_sigs s"
                        " ON s.run_id = w.id)"
                        " SELECT s.id, g.key, " OBJECT_COLS ", r.id IS NULL OR"
                        "  r.program_id = (SELECT id FROM programs WHERE exe=?1 AND"
                        "  build_id=?2 AND script=?3), " JUDGE_COLS
                        " FROM s JOIN signatures g ON g.id = s.id"
                        " LEFT JOIN objects o ON o.id = (SELECT x.id FROM objects x"
                        "  WHERE x.sig_id = s.id ORDER BY x.cpu=?7 DESC, x.id DESC LIMIT 1)"
                        " LEFT JOIN runs r ON r.id = o.run_id" JUDGE_JOIN("s.id"),
           -1, &st, NULL)) != SQLITE_OK)
    rc = db_code(db->db, rc, NULL);
  if (st) {
    bind_program(st, in, max_runs);
    sqlite3_bind_text(st, 7, cpu, -1, SQLITE_STATIC);
  }
  /* Both statements read one snapshot; this one's rows come in no particular order (sorting
   * them by id put every object's code through a sorter: a third of the read's page faults
   * and twice its time on a repeated read), each found in acc, which the first statement
   * listed by id. A signature without a row here was collected meanwhile and is left out. */
  while (st && !rc && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t sig = sqlite3_column_int64(st, 0);
    const prof_acc_t *a = bsearch(&sig, acc, n, sizeof *acc, by_sig_id);
    if (!a) {
      rc = ST_OK;
      continue;
    }
    size_t i = (size_t)(a - acc);
    st_hot_t *h = &out->sigs[out->n];
    h->score = acc[i].calls;
    h->mean_ns = acc[i].timed ? (double)acc[i].timed_ns / (double)acc[i].timed : 0;
    h->demoted_gen = acc[i].demoted_gen;
    h->crashed = acc[i].crashed;
    if (!(rc = profile_sig(st, h)))
      out->n++;
    else
      free(h->key), free(h->code), h->key = h->code = NULL;
  }
  if (rc == SQLITE_DONE)
    rc = ST_OK;
  else if (rc > 0)
    rc = db_code(db->db, rc, NULL);
  sqlite3_finalize(st);
  free(acc);
  if (!rc && out->n)
    qsort(out->sigs, out->n, sizeof *out->sigs, by_score);
out:
  _st_exec(db->db, "COMMIT");
  if (rc)
    st_profile_free(out);
  return rc;
}

int st_object(st_db_t *db, const void *key, size_t key_len, const char *cpu, st_hot_t *out)
{
  memset(out, 0, sizeof *out);
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(
      db->db,
      "SELECT g.id, g.key, " OBJECT_COLS ", 0, " JUDGE_COLS
      " FROM signatures g JOIN objects o ON o.sig_id = g.id AND o.cpu = ?2" JUDGE_JOIN("g.id")
      " WHERE g.key = ?1",
      -1, &st, NULL);
  if (rc != SQLITE_OK)
    return db_code(db->db, rc, NULL);
  sqlite3_bind_blob(st, 1, key, (int)key_len, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, cpu, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    rc = profile_sig(st, out);
  else
    rc = rc == SQLITE_DONE ? ST_OK : db_code(db->db, rc, NULL);
  sqlite3_finalize(st);
  if (rc)
    st_hot_free(out);
  return rc;
}

int st_shelf(st_db_t *db, const char *cpu, int generator, const char *llvm, size_t key_len,
             void **keys, size_t *n)
{
  *keys = NULL, *n = 0;
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db->db,
                              "SELECT g.key FROM objects o JOIN signatures g ON g.id = o.sig_id"
                              " WHERE o.cpu = ?1 AND o.generator = ?2 AND o.llvm = ?3"
                              " AND length(g.key) = ?4 ORDER BY g.key",
                              -1, &st, NULL);
  if (rc != SQLITE_OK)
    return db_code(db->db, rc, NULL);
  sqlite3_bind_text(st, 1, cpu, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 2, generator);
  sqlite3_bind_text(st, 3, llvm, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 4, (sqlite3_int64)key_len);
  size_t cap = 0;
  unsigned char *k = NULL;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (*n == cap) {
      void *p = realloc(k, (cap = cap ? 2 * cap : 64) * key_len);
      if (!p) {
        rc = SQLITE_NOMEM;
        break;
      }
      k = p;
    }
    memcpy(k + *n * key_len, sqlite3_column_blob(st, 0), key_len);
    ++*n;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    free(k);
    *n = 0;
    return rc == SQLITE_NOMEM ? ST_ENOMEM : db_code(db->db, rc, NULL);
  }
  *keys = k;
  return ST_OK;
}

void st_hot_free(st_hot_t *h)
{
  free(h->key), free(h->code);
  memset(h, 0, sizeof *h);
}

void st_profile_free(st_profile_t *p)
{
  for (size_t i = 0; p->sigs && i < p->n; i++)
    free(p->sigs[i].key), free(p->sigs[i].code);
  free(p->sigs);
  memset(p, 0, sizeof *p);
}

static void sql_pid_alive(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
  (void)argc;
  pid_t pid = (pid_t)sqlite3_value_int64(argv[0]);
  sqlite3_result_int(ctx, pid > 0 && (kill(pid, 0) == 0 || errno == EPERM));
}

int st_gc(st_db_t *db, int64_t keep_runs, int64_t older_than_ns, st_gc_result_t *res)
{
  memset(res, 0, sizeof *res);
  sqlite3_create_function(db->db, "pid_alive", 1, SQLITE_UTF8, NULL, sql_pid_alive, NULL, NULL);
  int rc = _st_exec(db->db, "BEGIN IMMEDIATE");
  if (rc)
    return rc;
  /* A run still marked running whose process is alive is never collected. */
  rc = run1(db, NULL,
            "DELETE FROM runs WHERE NOT (status='running' AND pid_alive(pid)) AND ("
            " id NOT IN (SELECT id FROM runs ORDER BY id DESC LIMIT ?)"
            " OR (?2 > 0 AND coalesce(end_ns, flush_ns, start_ns) < ?2))",
            "ii", keep_runs < 0 ? (int64_t)INT64_MAX : keep_runs, older_than_ns);
  res->runs = sqlite3_changes(db->db);
  if (!rc) /* an object no remaining run called is one no decayed profile can want */
    rc = _st_exec(db->db, "DELETE FROM objects WHERE sig_id NOT IN (SELECT sig_id FROM run_sigs)");
  res->objects = sqlite3_changes(db->db);
  if (!rc) /* the judge's rounds on an object that is gone */
    rc = _st_exec(db->db, "DELETE FROM judge_pools WHERE NOT EXISTS (SELECT 1 FROM objects o"
                          " WHERE o.sig_id = judge_pools.sig_id AND o.cpu = judge_pools.cpu)");
  if (!rc)
    rc = _st_exec(db->db, "DELETE FROM signatures WHERE id NOT IN (SELECT sig_id FROM run_sigs"
                          " UNION SELECT sig_id FROM run_pcs UNION SELECT sig_id FROM run_stacks"
                          " UNION SELECT sig_id FROM run_counters UNION SELECT sig_id FROM"
                          " variants UNION SELECT sig_id FROM events UNION SELECT sig_id FROM"
                          " objects)");
  res->signatures = sqlite3_changes(db->db);
  if (!rc)
    rc = _st_exec(db->db, "DELETE FROM programs WHERE id NOT IN (SELECT program_id FROM runs)");
  res->programs = sqlite3_changes(db->db);
  if (!rc)
    rc = _st_exec(db->db, "DELETE FROM machines WHERE id NOT IN (SELECT machine_id FROM runs)");
  res->machines = sqlite3_changes(db->db);
  if (!rc)
    rc = _st_exec(db->db, "DELETE FROM symbols WHERE id NOT IN (SELECT symbol_id FROM run_pcs)");
  res->symbols = sqlite3_changes(db->db);
  _st_exec(db->db, rc ? "ROLLBACK" : "COMMIT");
  return rc;
}

/* ---- the machine model ------------------------------------------------------------------ */



/* Fills f's window from a JSON array of integers (what is not a number is skipped). */
static void window_parse(st_compile_stat_t *f, const char *text)
{
  cJSON *j = cJSON_Parse(text), *x;
  f->nrecent = 0;
  cJSON_ArrayForEach(x, j)
    if (cJSON_IsNumber(x) && x->valuedouble >= 0 && f->nrecent < ST_MACHINE_RECENT)
      f->recent[f->nrecent++] = (uint64_t)x->valuedouble;
  cJSON_Delete(j);
}

static char *window_json(const st_compile_stat_t *f)
{
  char *out = malloc(ST_MACHINE_RECENT * 21 + 3), *p = out;
  if (!out)
    return NULL;
  *p++ = '[';
  for (uint32_t i = 0; i < f->nrecent; i++)
    p += sprintf(p, "%s%llu", i ? "," : "", (unsigned long long)f->recent[i]);
  strcpy(p, "]");
  return out;
}

/* Reads cpu's family row (a fresh stat when there is none). */
static int compile_stat_read(st_db_t *db, const char *cpu, const char *family,
                             st_compile_stat_t *f)
{
  static const char sql[] =
      "SELECT n, mean_ns, recent FROM machine_compiles WHERE cpu=? AND family=?";
  sqlite3_stmt *st;
  memset(f, 0, sizeof *f);
  snprintf(f->family, sizeof f->family, "%s", family);
  int cached, rc = prepared(db, sql, &st, &cached);
  if (rc != SQLITE_OK)
    return db_code(db->db, rc, NULL);
  sqlite3_bind_text(st, 1, cpu, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, family, -1, SQLITE_STATIC);
  if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    f->n = (uint64_t)sqlite3_column_int64(st, 0);
    f->mean_ns = sqlite3_column_double(st, 1);
    window_parse(f, (const char *)sqlite3_column_text(st, 2));
  }
  rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? ST_OK : db_code(db->db, rc, NULL);
  if (cached)
    sqlite3_reset(st);
  else
    sqlite3_finalize(st);
  return rc;
}

/* A REAL column's value: the peak, or NULL for a width that was not measured. */
static void bind_peak(sqlite3_stmt *st, int i, double v)
{
  if (v > 0)
    sqlite3_bind_double(st, i, v);
  else
    sqlite3_bind_null(st, i);
}

static int model_write(st_db_t *db, const st_machine_t *m)
{
  static const char sql[] =
      "INSERT INTO machine_models VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(cpu) DO UPDATE"
      " SET isa=excluded.isa, vregs=excluded.vregs, f32_128=excluded.f32_128,"
      " f32_256=excluded.f32_256, f32_512=excluded.f32_512, f64_128=excluded.f64_128,"
      " f64_256=excluded.f64_256, f64_512=excluded.f64_512, timer_ns=excluded.timer_ns,"
      " method=excluded.method, measured_ns=excluded.measured_ns, settled=excluded.settled";
  sqlite3_stmt *st;
  int cached, rc = prepared(db, sql, &st, &cached);
  if (rc != SQLITE_OK)
    return db_code(db->db, rc, NULL);
  sqlite3_bind_text(st, 1, m->cpu, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, m->isa, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 3, m->vregs);
  for (int d = 0; d < 2; d++)
    for (int w = 0; w < 3; w++)
      bind_peak(st, 4 + 3 * d + w, m->gflops[d][w]);
  sqlite3_bind_double(st, 10, m->timer_ns);
  sqlite3_bind_int(st, 11, m->method);
  sqlite3_bind_int64(st, 12, m->measured_ns);
  sqlite3_bind_int(st, 13, m->settled);
  rc = db_code(db->db, sqlite3_step(st), NULL);
  if (cached)
    sqlite3_reset(st), sqlite3_clear_bindings(st);
  else
    sqlite3_finalize(st);
  return rc;
}

int st_machine_save(st_db_t *db, const st_machine_t *m, const st_compile_note_t *notes,
                    size_t nnotes)
{
  int rc = _st_exec(db->db, "BEGIN IMMEDIATE");
  if (rc)
    return rc;
  if (m->measured_ns)
    rc = model_write(db, m);
  for (size_t i = 0; i < nnotes && !rc; i++) {
    st_compile_stat_t f;
    if ((rc = compile_stat_read(db, m->cpu, notes[i].family, &f)))
      break;
    st_compile_add(&f, notes[i].ns);
    char *recent = window_json(&f);
    rc = recent ? run1(db, NULL,
                       "INSERT INTO machine_compiles VALUES(?,?,?,?,?,?,?) ON CONFLICT DO UPDATE"
                       " SET n=excluded.n, mean_ns=excluded.mean_ns, median_ns=excluded.median_ns,"
                       " recent=excluded.recent, updated_ns=excluded.updated_ns",
                       "ttiiiti", m->cpu, f.family, (int64_t)f.n, (int64_t)llround(f.mean_ns),
                       (int64_t)st_compile_median(&f), recent, now_ns())
                : ST_ENOMEM;
    free(recent);
  }
  _st_exec(db->db, rc ? "ROLLBACK" : "COMMIT");
  return rc;
}

int st_machine_load(st_db_t *db, const char *cpu, st_machine_t *out)
{
  memset(out, 0, sizeof *out);
  snprintf(out->cpu, sizeof out->cpu, "%s", cpu);
  int rc = _st_exec(db->db, "BEGIN"); /* one snapshot of both tables */
  if (rc)
    return rc;
  sqlite3_stmt *st = NULL;
  rc = sqlite3_prepare_v2(db->db,
                          "SELECT isa, vregs, f32_128, f32_256, f32_512, f64_128, f64_256,"
                          " f64_512, timer_ns, method, measured_ns, settled FROM machine_models"
                          " WHERE cpu=?", -1, &st, NULL);
  if (rc != SQLITE_OK)
    goto out;
  sqlite3_bind_text(st, 1, cpu, -1, SQLITE_STATIC);
  if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    snprintf(out->isa, sizeof out->isa, "%s", (const char *)sqlite3_column_text(st, 0));
    out->vregs = sqlite3_column_int(st, 1);
    for (int i = 0; i < 6; i++)
      out->gflops[i / 3][i % 3] = sqlite3_column_double(st, 2 + i); /* NULL reads as 0 */
    out->timer_ns = sqlite3_column_double(st, 8);
    out->method = sqlite3_column_int(st, 9);
    out->measured_ns = sqlite3_column_int64(st, 10);
    out->settled = sqlite3_column_int(st, 11);
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    goto out;
  sqlite3_finalize(st);
  rc = sqlite3_prepare_v2(db->db,
                          "SELECT family, n, mean_ns, recent FROM machine_compiles WHERE cpu=?"
                          " ORDER BY n DESC", -1, &st, NULL);
  if (rc != SQLITE_OK)
    goto out;
  sqlite3_bind_text(st, 1, cpu, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW && out->nfamilies < ST_MACHINE_FAMILIES) {
    st_compile_stat_t *f = &out->families[out->nfamilies++];
    snprintf(f->family, sizeof f->family, "%s", (const char *)sqlite3_column_text(st, 0));
    f->n = (uint64_t)sqlite3_column_int64(st, 1);
    f->mean_ns = sqlite3_column_double(st, 2);
    window_parse(f, (const char *)sqlite3_column_text(st, 3));
    f->median_ns = st_compile_median(f);
  }
out:
  rc = rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE ? ST_OK : db_code(db->db, rc, NULL);
  sqlite3_finalize(st);
  _st_exec(db->db, "COMMIT");
  if (!rc && !out->measured_ns && !out->nfamilies)
    rc = ST_ENOENT;
  return rc;
}
