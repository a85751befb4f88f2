/* SPDX-License-Identifier: MIT */
/* The fleet store (fleet.h): the PostgreSQL schema and its upgrades, the push of a local file's
 * finished runs, models and objects, the fetch of a program's fleet profile and kernels, the
 * objects' HMAC-SHA256 tags, and the readers' queries. Entry points: st_fleet_open,
 * st_fleet_push, st_fleet_kernels, st_fleet_query.
 *
 * Fleet schema history (opjit.meta 'schema'):
 *   1  machines, programs, signatures, runs (UNIQUE machine + local id), run_sigs (with
 *      samples), variants, events, machine_models, objects (one per signature, CPU key,
 *      generator and LLVM, with the tag)
 *   2  sig_days: run_sigs rolled up per signature, machine, CPU and day (UTC), added to in
 *      the transaction that inserts the run, so top --fleet reads one row per machine and
 *      signature a day instead of one per run
 *
 * Everything lives in the schema "opjit" of the database the connection names, so a fleet can
 * share a database with other applications. The server's ids are its own: a run is found by
 * (machine, local id), a signature by its key, a program by (exe, build id, script). */
#include "fleet.h"

#include "internal.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct st_fleet_s {
  PGconn *pg;
  char version[32];
  char err[256];
  /* A push's map of local signature ids to the server's: each signature is sent once. */
  struct {
    int64_t local, server;
  } * sigs;
  size_t nsigs, capsigs;
};

static const char *const fleet_migrations[] = {
    /* 1 */
    "CREATE TABLE opjit.machines(id bigserial PRIMARY KEY, uuid text NOT NULL UNIQUE,"
    "  hostname text NOT NULL, first_ns bigint NOT NULL, push_ns bigint NOT NULL);"
    "CREATE TABLE opjit.programs(id bigserial PRIMARY KEY, exe text NOT NULL,"
    "  build_id text NOT NULL, script text NOT NULL, UNIQUE(exe, build_id, script));"
    "CREATE TABLE opjit.signatures(id bigserial PRIMARY KEY, key bytea NOT NULL UNIQUE,"
    "  sig text NOT NULL, op text NOT NULL, name text NOT NULL, params text NOT NULL);"
    "CREATE TABLE opjit.runs(id bigserial PRIMARY KEY,"
    "  machine_id bigint NOT NULL REFERENCES opjit.machines(id), local_id bigint NOT NULL,"
    "  program_id bigint NOT NULL REFERENCES opjit.programs(id), cpu_model text NOT NULL,"
    "  cpu_flags text NOT NULL, ncpu int NOT NULL, argv text NOT NULL, options text NOT NULL,"
    "  agent_version text NOT NULL, start_ns bigint NOT NULL, end_ns bigint,"
    "  status text NOT NULL, warm_ns bigint, sampling text, pushed_ns bigint NOT NULL,"
    "  UNIQUE(machine_id, local_id));"
    "CREATE INDEX runs_program ON opjit.runs(program_id, start_ns DESC);"
    "CREATE INDEX runs_start ON opjit.runs(start_ns DESC);"
    "CREATE TABLE opjit.run_sigs(run_id bigint NOT NULL REFERENCES opjit.runs(id)"
    "  ON DELETE CASCADE, sig_id bigint NOT NULL REFERENCES opjit.signatures(id),"
    "  calls bigint NOT NULL, timed_calls bigint NOT NULL, timed_ns bigint NOT NULL,"
    "  samples bigint NOT NULL, PRIMARY KEY(run_id, sig_id));"
    "CREATE INDEX run_sigs_sig ON opjit.run_sigs(sig_id);"
    "CREATE TABLE opjit.variants(run_id bigint NOT NULL REFERENCES opjit.runs(id)"
    "  ON DELETE CASCADE, sig_id bigint NOT NULL REFERENCES opjit.signatures(id),"
    "  status text NOT NULL, generator int NOT NULL, llvm text NOT NULL, cpu text NOT NULL,"
    "  compile_ns bigint NOT NULL, calls bigint NOT NULL, timed_calls bigint NOT NULL,"
    "  timed_ns bigint NOT NULL, origin text NOT NULL, pre_calls bigint NOT NULL,"
    "  PRIMARY KEY(run_id, sig_id));"
    "CREATE TABLE opjit.events(id bigserial PRIMARY KEY, run_id bigint NOT NULL"
    "  REFERENCES opjit.runs(id) ON DELETE CASCADE, sig_id bigint NOT NULL"
    "  REFERENCES opjit.signatures(id), time_ns bigint NOT NULL, kind text NOT NULL,"
    "  detail text NOT NULL);"
    "CREATE INDEX events_run ON opjit.events(run_id);"
    "CREATE TABLE opjit.machine_models(cpu text PRIMARY KEY, isa text NOT NULL,"
    "  vregs int NOT NULL, f32_128 float8, f32_256 float8, f32_512 float8, f64_128 float8,"
    "  f64_256 float8, f64_512 float8, timer_ns float8 NOT NULL, method int NOT NULL,"
    "  measured_ns bigint NOT NULL);"
    "CREATE TABLE opjit.objects(id bigserial PRIMARY KEY,"
    "  sig_id bigint NOT NULL REFERENCES opjit.signatures(id), cpu text NOT NULL,"
    "  llvm text NOT NULL, generator int NOT NULL, symbol text NOT NULL,"
    "  checksum bigint NOT NULL, code bytea NOT NULL, tag bytea,"
    "  machine_id bigint REFERENCES opjit.machines(id), created_ns bigint NOT NULL,"
    "  UNIQUE(sig_id, cpu, generator, llvm));"
    "CREATE INDEX objects_checksum ON opjit.objects(checksum);",
    /* 2 */
    "CREATE TABLE opjit.sig_days(sig_id bigint NOT NULL REFERENCES opjit.signatures(id),"
    "  machine_id bigint NOT NULL REFERENCES opjit.machines(id), cpu_model text NOT NULL,"
    "  day int NOT NULL, runs bigint NOT NULL, calls bigint NOT NULL,"
    "  timed_calls bigint NOT NULL, timed_ns bigint NOT NULL, samples bigint NOT NULL,"
    "  PRIMARY KEY(sig_id, machine_id, cpu_model, day));"
    "CREATE INDEX sig_days_day ON opjit.sig_days(day);"
    "INSERT INTO opjit.sig_days SELECT rs.sig_id, r.machine_id, r.cpu_model,"
    "  (r.start_ns / 86400000000000)::int, count(*), sum(rs.calls), sum(rs.timed_calls),"
    "  sum(rs.timed_ns), sum(rs.samples) FROM opjit.run_sigs rs"
    "  JOIN opjit.runs r ON r.id = rs.run_id GROUP BY 1, 2, 3, 4;",
};
_Static_assert(sizeof fleet_migrations / sizeof *fleet_migrations == ST_FLEET_SCHEMA,
               "one migration per fleet schema version");

static int64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Copies the connection's last error (one line) into f->err and err; returns ST_EIO. */
static int pg_fail(st_fleet_t *f, char *err, size_t len, const char *what)
{
  const char *m = f->pg ? PQerrorMessage(f->pg) : "no connection";
  snprintf(f->err, sizeof f->err, "%s: %.*s", what, (int)strcspn(m, "\n"), m);
  if (err && len)
    snprintf(err, len, "%s", f->err);
  return ST_EIO;
}

/* Runs sql with n text parameters (a NULL value is SQL NULL; lens/binary, when given, mark
 * binary ones). Returns the result when it succeeded (the caller PQclear()s it), else NULL. */
/* The push's st_fleet_push_t.local_lock on the thread pushing (NULL: none): released over each
 * round trip below, held over the rest of the push. */
static __thread void (*push_lock)(int hold);

static PGresult *pq(st_fleet_t *f, const char *sql, int n, const char *const *vals, const int *lens,
                    const int *binary)
{
  if (push_lock)
    push_lock(0);
  PGresult *r = PQexecParams(f->pg, sql, n, NULL, vals, lens, binary, 0);
  if (push_lock)
    push_lock(1);
  ExecStatusType s = PQresultStatus(r);
  if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK)
    return r;
  PQclear(r);
  return NULL;
}

/* Runs sql (one or more statements, no parameters); 0 or -1. */
static int pexec(st_fleet_t *f, const char *sql)
{
  if (push_lock)
    push_lock(0);
  PGresult *r = PQexec(f->pg, sql);
  if (push_lock)
    push_lock(1);
  ExecStatusType s = PQresultStatus(r);
  PQclear(r);
  return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK ? 0 : -1;
}

/* The schema, created or upgraded under an advisory lock (machines starting at once). */
static int migrate(st_fleet_t *f, char *err, size_t len)
{
  if (pexec(f, "BEGIN") || pexec(f, "SELECT pg_advisory_xact_lock(7306943061520818291)") ||
      pexec(f, "CREATE SCHEMA IF NOT EXISTS opjit") ||
      pexec(f, "CREATE TABLE IF NOT EXISTS opjit.meta(key text PRIMARY KEY, value text NOT NULL)"))
    goto fail;
  PGresult *r =
      pq(f, "SELECT value::int FROM opjit.meta WHERE key = 'schema'", 0, NULL, NULL, NULL);
  if (!r)
    goto fail;
  int version = PQntuples(r) ? atoi(PQgetvalue(r, 0, 0)) : 0;
  PQclear(r);
  if (version > ST_FLEET_SCHEMA) {
    pexec(f, "ROLLBACK");
    snprintf(f->err, sizeof f->err,
             "the fleet's schema (version %d) is newer than this opjit's (%d)", version,
             ST_FLEET_SCHEMA);
    snprintf(err, len, "%s", f->err);
    return ST_ENEWER;
  }
  for (; version < ST_FLEET_SCHEMA; version++)
    if (pexec(f, fleet_migrations[version]))
      goto fail;
  char v[16];
  snprintf(v, sizeof v, "%d", version);
  const char *vals[] = {v};
  r = pq(f,
         "INSERT INTO opjit.meta VALUES('schema', $1) ON CONFLICT (key) DO UPDATE SET"
         " value = EXCLUDED.value",
         1, vals, NULL, NULL);
  PQclear(r);
  if (!r || pexec(f, "COMMIT"))
    goto fail;
  return ST_OK;
fail:
  pg_fail(f, err, len, "cannot set up the fleet schema");
  pexec(f, "ROLLBACK");
  return ST_EIO;
}

int st_fleet_open(const char *conninfo, int timeout_ms, st_fleet_t **out, char *err, size_t errlen)
{
  *out = NULL;
  st_fleet_t *f = calloc(1, sizeof *f);
  if (!f)
    return ST_ENOMEM;
  char secs[16];
  snprintf(secs, sizeof secs, "%d", timeout_ms < 2000 ? 2 : (timeout_ms + 999) / 1000);
  /* Ours first: what the connection string says wins (expand_dbname). */
  const char *keys[] = {"connect_timeout", "application_name", "dbname", NULL};
  const char *vals[] = {secs, "opjit", conninfo, NULL};
  f->pg = PQconnectdbParams(keys, vals, 1);
  if (!f->pg || PQstatus(f->pg) != CONNECTION_OK) {
    int rc = f->pg ? pg_fail(f, err, errlen, "cannot reach the fleet") : ST_ENOMEM;
    st_fleet_close(f);
    return rc;
  }
  char set[64];
  snprintf(set, sizeof set, "SET statement_timeout = %d", timeout_ms > 0 ? timeout_ms : 1);
  if (pexec(f, set) || pexec(f, "SET client_min_messages = warning")) {
    int rc = pg_fail(f, err, errlen, "cannot set up the fleet connection");
    st_fleet_close(f);
    return rc;
  }
  int v = PQserverVersion(f->pg);
  snprintf(f->version, sizeof f->version, "%d.%d", v / 10000, v % 10000);
  int rc = migrate(f, err, errlen);
  if (rc) {
    st_fleet_close(f);
    return rc;
  }
  *out = f;
  return ST_OK;
}

void st_fleet_close(st_fleet_t *f)
{
  if (!f)
    return;
  PQfinish(f->pg);
  free(f->sigs);
  free(f);
}

const char *st_fleet_server_version(st_fleet_t *f) { return f->version; }

static const char *fleet_errmsg(st_fleet_t *f) { return f->err; }

/* ---- the local side ---------------------------------------------------------------------- */

int st_fleet_machine(st_db_t *local, char id[33])
{
  sqlite3 *db = st_sqlite(local);
  sqlite3_stmt *st;
  id[0] = 0;
  int rc =
      sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'fleet_machine'", -1, &st, NULL);
  if (rc != SQLITE_OK)
    return _st_code(rc);
  if (sqlite3_step(st) == SQLITE_ROW)
    snprintf(id, 33, "%s", (const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  if (strlen(id) == 32)
    return ST_OK;
  unsigned char rnd[16];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  ssize_t got = fd >= 0 ? read(fd, rnd, sizeof rnd) : -1;
  if (fd >= 0)
    close(fd);
  if (got != (ssize_t)sizeof rnd)
    return ST_EIO;
  for (int i = 0; i < 16; i++)
    snprintf(id + 2 * i, 3, "%02x", rnd[i]);
  char sql[128];
  /* Another process may have made one meanwhile: the first stays, and is read back. */
  snprintf(sql, sizeof sql, "INSERT OR IGNORE INTO meta VALUES('fleet_machine', '%s')", id);
  if ((rc = _st_exec(db, sql)))
    return rc;
  rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'fleet_machine'", -1, &st, NULL);
  if (rc != SQLITE_OK)
    return _st_code(rc);
  if (sqlite3_step(st) == SQLITE_ROW)
    snprintf(id, 33, "%s", (const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return ST_OK;
}

/* A growable list of int64. */
typedef struct ids_s {
  int64_t *v;
  size_t n, cap;
} ids_t;

static int ids_add(ids_t *l, int64_t x)
{
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    int64_t *v = realloc(l->v, cap * sizeof *v);
    if (!v)
      return -1;
    l->v = v, l->cap = cap;
  }
  l->v[l->n++] = x;
  return 0;
}

/* "{1,2,3}": a PostgreSQL array literal of l (malloc'ed), NULL when out of memory. */
static char *ids_array(const ids_t *l)
{
  size_t cap = 3 + l->n * 21;
  char *s = malloc(cap), *p = s;
  if (!s)
    return NULL;
  *p++ = '{';
  for (size_t i = 0; i < l->n; i++)
    p += snprintf(p, cap - (size_t)(p - s), "%s%" PRId64, i ? "," : "", l->v[i]);
  snprintf(p, cap - (size_t)(p - s), "}");
  return s;
}

/* Runs a local query (arg bound to its parameter, if it has one) collecting its first column. */
static int local_ids(st_db_t *local, const char *sql, int64_t arg, ids_t *out)
{
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(st_sqlite(local), sql, -1, &st, NULL);
  if (rc != SQLITE_OK)
    return _st_code(rc);
  if (sqlite3_bind_parameter_count(st))
    sqlite3_bind_int64(st, 1, arg);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    if (ids_add(out, sqlite3_column_int64(st, 0))) {
      rc = SQLITE_NOMEM;
      break;
    }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? ST_OK : _st_code(rc);
}

/* A column as text for a parameter ("" stays "", NULL stays NULL). */
static const char *col(sqlite3_stmt *st, int i)
{
  return sqlite3_column_type(st, i) == SQLITE_NULL ? NULL
                                                   : (const char *)sqlite3_column_text(st, i);
}

/* ---- push -------------------------------------------------------------------------------- */

/* The server's id of the local signature local_id, sent (upserted) the first time a push
 * needs it; 0 on failure. */
static int64_t server_sig(st_fleet_t *f, st_db_t *local, int64_t local_id)
{
  for (size_t i = 0; i < f->nsigs; i++)
    if (f->sigs[i].local == local_id)
      return f->sigs[i].server;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(st_sqlite(local),
                         "SELECT key, sig, op, name, params FROM signatures"
                         " WHERE id = ?",
                         -1, &st, NULL) != SQLITE_OK)
    return 0;
  sqlite3_bind_int64(st, 1, local_id);
  int64_t id = 0;
  if (sqlite3_step(st) == SQLITE_ROW) {
    const char *vals[] = {sqlite3_column_blob(st, 0), col(st, 1), col(st, 2), col(st, 3),
                          col(st, 4)};
    int lens[] = {sqlite3_column_bytes(st, 0), 0, 0, 0, 0}, bin[] = {1, 0, 0, 0, 0};
    PGresult *r = pq(f,
                     "WITH s AS (INSERT INTO opjit.signatures(key, sig, op, name, params)"
                     " VALUES($1, $2, $3, $4, $5) ON CONFLICT (key) DO NOTHING RETURNING id)"
                     " SELECT id FROM s UNION ALL SELECT id FROM opjit.signatures WHERE key = $1",
                     5, vals, lens, bin);
    if (r && PQntuples(r))
      id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
  }
  sqlite3_finalize(st);
  if (!id)
    return 0;
  if (f->nsigs == f->capsigs) {
    size_t cap = f->capsigs ? 2 * f->capsigs : 64;
    void *v = realloc(f->sigs, cap * sizeof *f->sigs);
    if (!v)
      return id;
    f->sigs = v, f->capsigs = cap;
  }
  f->sigs[f->nsigs].local = local_id, f->sigs[f->nsigs++].server = id;
  return id;
}

/* The machine's row on the server (made on its first push); 0 on failure. */
static int64_t server_machine(st_fleet_t *f, const char *uuid, const char *hostname)
{
  char now[24];
  snprintf(now, sizeof now, "%" PRId64, now_ns());
  const char *vals[] = {uuid, hostname ? hostname : "", now};
  PGresult *r = pq(f,
                   "INSERT INTO opjit.machines(uuid, hostname, first_ns, push_ns)"
                   " VALUES($1, $2, $3, $3) ON CONFLICT (uuid) DO UPDATE SET"
                   " hostname = EXCLUDED.hostname, push_ns = EXCLUDED.push_ns RETURNING id",
                   3, vals, NULL, NULL);
  int64_t id = r && PQntuples(r) ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
  PQclear(r);
  return id;
}

/* The local machine models, newer measurements replacing older ones. */
static int push_models(st_fleet_t *f, st_db_t *local)
{
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(st_sqlite(local),
                         "SELECT cpu, isa, vregs, f32_128, f32_256, f32_512, f64_128, f64_256,"
                         " f64_512, timer_ns, method, measured_ns FROM machine_models",
                         -1, &st, NULL) != SQLITE_OK)
    return 0; /* an older local schema: no models */
  int rc = 0;
  while (!rc && sqlite3_step(st) == SQLITE_ROW) {
    const char *vals[12];
    for (int i = 0; i < 12; i++)
      vals[i] = col(st, i);
    PGresult *r = pq(f,
                     "INSERT INTO opjit.machine_models VALUES($1, $2, $3, $4, $5, $6, $7,"
                     " $8, $9, $10, $11, $12) ON CONFLICT (cpu) DO UPDATE SET isa = EXCLUDED.isa,"
                     " vregs = EXCLUDED.vregs, f32_128 = EXCLUDED.f32_128,"
                     " f32_256 = EXCLUDED.f32_256, f32_512 = EXCLUDED.f32_512,"
                     " f64_128 = EXCLUDED.f64_128, f64_256 = EXCLUDED.f64_256,"
                     " f64_512 = EXCLUDED.f64_512, timer_ns = EXCLUDED.timer_ns,"
                     " method = EXCLUDED.method, measured_ns = EXCLUDED.measured_ns"
                     " WHERE opjit.machine_models.measured_ns < EXCLUDED.measured_ns",
                     12, vals, NULL, NULL);
    rc = r ? 0 : -1;
    PQclear(r);
  }
  sqlite3_finalize(st);
  return rc;
}

/* The local objects the server lacks (by checksum; an untagged one is sent again once there is
 * a key), each tagged under the push's key. */
static int push_objects(st_fleet_t *f, st_db_t *local, int64_t machine, st_fleet_push_t *p)
{
  ids_t sums = {0};
  int rc = local_ids(local, "SELECT checksum FROM objects", 0, &sums);
  if (rc || !sums.n) {
    free(sums.v);
    return rc ? -1 : 0;
  }
  char *arr = ids_array(&sums);
  const char *vals[] = {arr, p->key ? "1" : "0"};
  PGresult *r = arr ? pq(f,
                         "SELECT checksum FROM opjit.objects WHERE checksum = ANY($1::bigint[])"
                         " AND (tag IS NOT NULL OR $2 = '0')",
                         2, vals, NULL, NULL)
                    : NULL;
  free(arr);
  if (!r) {
    free(sums.v);
    return -1;
  }
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(st_sqlite(local),
                         "SELECT o.sig_id, s.key, o.cpu, o.llvm, o.generator, o.symbol, o.checksum,"
                         " o.code, o.created_ns FROM objects o JOIN signatures s ON s.id = o.sig_id"
                         " WHERE o.checksum = ?",
                         -1, &st, NULL) != SQLITE_OK) {
    PQclear(r);
    free(sums.v);
    return -1;
  }
  for (size_t i = 0; !rc && i < sums.n; i++) {
    int have = 0;
    char sum[24];
    snprintf(sum, sizeof sum, "%" PRId64, sums.v[i]);
    for (int j = 0; !have && j < PQntuples(r); j++)
      have = strcmp(PQgetvalue(r, j, 0), sum) == 0;
    if (have)
      continue;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, sums.v[i]);
    if (sqlite3_step(st) != SQLITE_ROW)
      continue;
    int64_t sig = server_sig(f, local, sqlite3_column_int64(st, 0));
    if (!sig) {
      rc = -1;
      break;
    }
    unsigned char tag[ST_FLEET_TAG_LEN];
    const void *code = sqlite3_column_blob(st, 7);
    int code_len = sqlite3_column_bytes(st, 7);
    if (p->key)
      st_fleet_tag(p->key, p->key_len, sqlite3_column_blob(st, 1),
                   (size_t)sqlite3_column_bytes(st, 1), col(st, 2), sqlite3_column_int(st, 4),
                   col(st, 3), col(st, 5), code, (size_t)code_len, tag);
    char sigs[24], mach[24];
    snprintf(sigs, sizeof sigs, "%" PRId64, sig);
    snprintf(mach, sizeof mach, "%" PRId64, machine);
    const char *v[] = {sigs,       col(st, 2), col(st, 3), col(st, 4),
                       col(st, 5), col(st, 6), code,       p->key ? (const char *)tag : NULL,
                       mach,       col(st, 8)};
    int lens[] = {0, 0, 0, 0, 0, 0, code_len, ST_FLEET_TAG_LEN, 0, 0};
    int bin[] = {0, 0, 0, 0, 0, 0, 1, 1, 0, 0};
    PGresult *w = pq(f,
                     "INSERT INTO opjit.objects(sig_id, cpu, llvm, generator, symbol, checksum,"
                     " code, tag, machine_id, created_ns) VALUES($1, $2, $3, $4, $5, $6, $7, $8,"
                     " $9, $10) ON CONFLICT (sig_id, cpu, generator, llvm) DO UPDATE SET"
                     " symbol = EXCLUDED.symbol, checksum = EXCLUDED.checksum,"
                     " code = EXCLUDED.code, tag = EXCLUDED.tag, machine_id = EXCLUDED.machine_id,"
                     " created_ns = EXCLUDED.created_ns WHERE EXCLUDED.tag IS NOT NULL AND"
                     " (opjit.objects.tag IS NULL OR opjit.objects.created_ns <"
                     " EXCLUDED.created_ns)",
                     10, v, lens, bin);
    rc = w ? 0 : -1;
    p->objects += w && strcmp(PQcmdTuples(w), "1") == 0;
    PQclear(w);
  }
  sqlite3_finalize(st);
  PQclear(r);
  free(sums.v);
  return rc;
}

/* The run's argv (a JSON array) as it may leave the machine: the program, then how many
 * arguments it had. Returns a malloc'ed copy. */
static char *redact_argv(const char *argv)
{
  cJSON *a = cJSON_Parse(argv ? argv : "[]");
  int n = cJSON_GetArraySize(a);
  if (!cJSON_IsArray(a) || n <= 1) {
    cJSON_Delete(a);
    return strdup(argv ? argv : "[]");
  }
  cJSON *out = cJSON_CreateArray();
  char note[64];
  snprintf(note, sizeof note, "(%d argument%s redacted)", n - 1, n == 2 ? "" : "s");
  cJSON_AddItemToArray(out, cJSON_Duplicate(cJSON_GetArrayItem(a, 0), 1));
  cJSON_AddItemToArray(out, cJSON_CreateString(note));
  char *s = cJSON_PrintUnformatted(out);
  cJSON_Delete(a);
  cJSON_Delete(out);
  return s;
}

/* The run's options (a JSON object) without the fleet's connection string, which may hold a
 * password. */
static char *redact_options(const char *options)
{
  cJSON *o = cJSON_Parse(options ? options : "{}");
  if (cJSON_IsObject(o) && cJSON_GetObjectItemCaseSensitive(o, "FLEET"))
    cJSON_ReplaceItemInObjectCaseSensitive(o, "FLEET", cJSON_CreateString("(set)"));
  char *s = o ? cJSON_PrintUnformatted(o) : strdup(options ? options : "{}");
  cJSON_Delete(o);
  return s;
}

/* Sends the rows of a local query, one INSERT each; the query's first column is the local
 * signature id, replaced by the server's; the INSERT's $1 is the server's run id. */
static int push_rows(st_fleet_t *f, st_db_t *local, int64_t local_run, const char *run,
                     const char *select, const char *insert)
{
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(st_sqlite(local), select, -1, &st, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_int64(st, 1, local_run);
  int rc = 0, n = sqlite3_column_count(st);
  while (!rc && sqlite3_step(st) == SQLITE_ROW) {
    int64_t sig = server_sig(f, local, sqlite3_column_int64(st, 0));
    char sigs[24];
    snprintf(sigs, sizeof sigs, "%" PRId64, sig);
    const char *vals[16] = {run, sigs};
    for (int i = 1; i < n && i < 15; i++)
      vals[i + 1] = col(st, i);
    PGresult *r = sig ? pq(f, insert, n + 1, vals, NULL, NULL) : NULL;
    rc = r ? 0 : -1;
    PQclear(r);
  }
  sqlite3_finalize(st);
  return rc;
}

/* Adds the server's run's run_sigs rows to sig_days; 0 or -1. */
static int roll_up(st_fleet_t *f, const char *run)
{
  const char *vals[] = {run};
  PGresult *r = pq(f,
                   "INSERT INTO opjit.sig_days SELECT rs.sig_id, r.machine_id, r.cpu_model,"
                   " (r.start_ns / 86400000000000)::int, 1, rs.calls, rs.timed_calls,"
                   " rs.timed_ns, rs.samples FROM opjit.run_sigs rs JOIN opjit.runs r"
                   " ON r.id = rs.run_id WHERE rs.run_id = $1"
                   " ON CONFLICT (sig_id, machine_id, cpu_model, day) DO UPDATE SET"
                   " runs = opjit.sig_days.runs + 1,"
                   " calls = opjit.sig_days.calls + EXCLUDED.calls,"
                   " timed_calls = opjit.sig_days.timed_calls + EXCLUDED.timed_calls,"
                   " timed_ns = opjit.sig_days.timed_ns + EXCLUDED.timed_ns,"
                   " samples = opjit.sig_days.samples + EXCLUDED.samples",
                   1, vals, NULL, NULL);
  PQclear(r);
  return r ? 0 : -1;
}

/* One finished local run and what hangs off it, inside the caller's transaction: nothing when
 * the server has it already. Returns 1 when sent, 0 when it was there, -1 on failure. */
static int push_run(st_fleet_t *f, st_db_t *local, int64_t machine, int64_t local_run,
                    const st_fleet_push_t *p)
{
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(st_sqlite(local),
                         "SELECT p.exe, p.build_id, p.script, m.cpu_model, m.cpu_flags, m.ncpu,"
                         " r.argv, r.options, r.agent_version, r.start_ns, r.end_ns, r.status,"
                         " r.warm_ns, r.sampling FROM runs r JOIN programs p ON p.id = r.program_id"
                         " JOIN machines m ON m.id = r.machine_id WHERE r.id = ?",
                         -1, &st, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_int64(st, 1, local_run);
  if (sqlite3_step(st) != SQLITE_ROW) {
    sqlite3_finalize(st);
    return 0; /* collected by opjit gc meanwhile */
  }
  int64_t prog = 0;
  const char *pv[] = {col(st, 0), col(st, 1), col(st, 2)};
  PGresult *r = pq(f,
                   "WITH s AS (INSERT INTO opjit.programs(exe, build_id, script)"
                   " VALUES($1, $2, $3) ON CONFLICT (exe, build_id, script) DO NOTHING"
                   " RETURNING id) SELECT id FROM s UNION ALL SELECT id FROM opjit.programs"
                   " WHERE exe = $1 AND build_id = $2 AND script = $3",
                   3, pv, NULL, NULL);
  if (r && PQntuples(r))
    prog = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  char *argv = p->redact ? redact_argv(col(st, 6)) : strdup(col(st, 6) ? col(st, 6) : "[]");
  char *opts = redact_options(col(st, 7));
  char mach[24], progs[24], lrun[24], now[24];
  snprintf(mach, sizeof mach, "%" PRId64, machine);
  snprintf(progs, sizeof progs, "%" PRId64, prog);
  snprintf(lrun, sizeof lrun, "%" PRId64, local_run);
  snprintf(now, sizeof now, "%" PRId64, now_ns());
  const char *rv[] = {mach,        lrun,        progs,       col(st, 3),  col(st, 4),
                      col(st, 5),  argv,        opts,        col(st, 8),  col(st, 9),
                      col(st, 10), col(st, 11), col(st, 12), col(st, 13), now};
  r = prog && argv && opts
          ? pq(f,
               "INSERT INTO opjit.runs(machine_id, local_id, program_id, cpu_model, cpu_flags,"
               " ncpu, argv, options, agent_version, start_ns, end_ns, status, warm_ns,"
               " sampling, pushed_ns) VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,"
               " $13, $14, $15) ON CONFLICT (machine_id, local_id) DO NOTHING RETURNING id",
               15, rv, NULL, NULL)
          : NULL;
  sqlite3_finalize(st);
  free(argv), free(opts);
  if (!r)
    return -1;
  if (!PQntuples(r)) {
    PQclear(r);
    return 0; /* another process of this machine pushed it first */
  }
  char run[24];
  snprintf(run, sizeof run, "%s", PQgetvalue(r, 0, 0));
  PQclear(r);
  if (push_rows(f, local, local_run, run,
                "SELECT rs.sig_id, rs.calls, rs.timed_calls, rs.timed_ns, coalesce((SELECT"
                " sum(samples) FROM run_pcs c WHERE c.run_id = rs.run_id AND"
                " c.sig_id = rs.sig_id), 0) FROM run_sigs rs WHERE rs.run_id = ?",
                "INSERT INTO opjit.run_sigs VALUES($1, $2, $3, $4, $5, $6)") ||
      roll_up(f, run) ||
      push_rows(f, local, local_run, run,
                "SELECT sig_id, status, generator, llvm, cpu, compile_ns, calls, timed_calls,"
                " timed_ns, origin, pre_calls FROM variants WHERE run_id = ?",
                "INSERT INTO opjit.variants VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,"
                " $12)") ||
      push_rows(f, local, local_run, run,
                "SELECT sig_id, time_ns, kind, detail FROM events WHERE run_id = ? ORDER BY id",
                "INSERT INTO opjit.events(run_id, sig_id, time_ns, kind, detail)"
                " VALUES($1, $2, $3, $4, $5)"))
    return -1;
  return 1;
}

/* The finished runs among local's newest max_runs the server lacks, oldest first. */
static int missing_runs(st_fleet_t *f, st_db_t *local, const char *uuid, int max_runs, ids_t *out)
{
  ids_t done = {0};
  int rc = local_ids(local,
                     "SELECT id FROM runs WHERE status <> 'running' ORDER BY id DESC"
                     " LIMIT ?",
                     max_runs, &done);
  if (rc || !done.n) {
    free(done.v);
    return rc ? -1 : 0;
  }
  char *arr = ids_array(&done);
  const char *vals[] = {uuid, arr};
  PGresult *r = arr ? pq(f,
                         "SELECT r.local_id FROM opjit.runs r JOIN opjit.machines m ON"
                         " m.id = r.machine_id WHERE m.uuid = $1 AND"
                         " r.local_id = ANY($2::bigint[])",
                         2, vals, NULL, NULL)
                    : NULL;
  free(arr);
  rc = r ? 0 : -1;
  for (size_t i = done.n; r && i-- > 0;) {
    int have = 0;
    for (int j = 0; !have && j < PQntuples(r); j++)
      have = strtoll(PQgetvalue(r, j, 0), NULL, 10) == done.v[i];
    if (!have && ids_add(out, done.v[i]))
      rc = -1;
  }
  PQclear(r);
  free(done.v);
  return rc;
}

/* Reads meta key into buf ("" when absent). */
static void meta(st_db_t *local, const char *key, char *buf, size_t len)
{
  sqlite3_stmt *st;
  buf[0] = 0;
  if (sqlite3_prepare_v2(st_sqlite(local), "SELECT value FROM meta WHERE key = ?", -1, &st, NULL) !=
      SQLITE_OK)
    return;
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW)
    snprintf(buf, len, "%s", (const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
}

void st_fleet_local(st_db_t *local, char id[33], int64_t *push_ns)
{
  char t[32];
  meta(local, "fleet_machine", id, 33);
  meta(local, "fleet_push_ns", t, sizeof t);
  *push_ns = strtoll(t, NULL, 10);
}

int st_fleet_backlog(st_fleet_t *f, st_db_t *local, int max_runs, int64_t *backlog)
{
  char uuid[33];
  int64_t push_ns;
  ids_t miss = {0};
  int rc = ST_OK;
  st_fleet_local(local, uuid, &push_ns);
  if (missing_runs(f, local, uuid, max_runs, &miss))
    rc = pg_fail(f, NULL, 0, "cannot read the fleet's runs");
  *backlog = (int64_t)miss.n;
  free(miss.v);
  return rc;
}

/* st_fleet_push with its lock held (push_lock). */
static int push_held(st_fleet_t *f, st_db_t *local, st_fleet_push_t *p, char *err, size_t errlen)
{
  char uuid[33];
  p->runs = p->objects = p->backlog = 0;
  f->nsigs = 0; /* a failed push's signatures may have been rolled back */
  int rc = st_fleet_machine(local, uuid);
  if (rc) {
    snprintf(err, errlen, "cannot read this machine's fleet id: %s", st_errstr(rc));
    return rc;
  }
  ids_t miss = {0};
  if (pexec(f, "BEGIN"))
    return pg_fail(f, err, errlen, "cannot push to the fleet");
  int64_t machine = server_machine(f, uuid, p->hostname);
  if (!machine || push_models(f, local) || push_objects(f, local, machine, p) ||
      pexec(f, "COMMIT")) {
    rc = pg_fail(f, err, errlen, "cannot push to the fleet");
    pexec(f, "ROLLBACK");
    f->nsigs = 0;
    return rc;
  }
  if (missing_runs(f, local, uuid, p->max_runs > 0 ? p->max_runs : 1, &miss))
    return pg_fail(f, err, errlen, "cannot read the fleet's runs");
  int batch = p->batch > 0 ? p->batch : 1;
  for (size_t i = 0; i < miss.n && !rc; i += (size_t)batch) {
    int sent = 0;
    rc = pexec(f, "BEGIN") ? ST_EIO : ST_OK;
    for (size_t j = i; !rc && j < miss.n && j < i + (size_t)batch; j++) {
      int one = push_run(f, local, machine, miss.v[j], p);
      if (one < 0)
        rc = ST_EIO;
      sent += one > 0;
    }
    if (!rc && pexec(f, "COMMIT"))
      rc = ST_EIO;
    if (rc) {
      pg_fail(f, err, errlen, "cannot push a run to the fleet");
      pexec(f, "ROLLBACK");
      f->nsigs = 0;
      break;
    }
    p->runs += sent;
  }
  p->backlog = (int64_t)miss.n - p->runs;
  free(miss.v);
  if (!rc) {
    char sql[96];
    snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO meta VALUES('fleet_push_ns', '%" PRId64 "')",
             now_ns());
    _st_exec(st_sqlite(local), sql); /* a locked file keeps the older time: harmless */
  }
  return rc;
}

int st_fleet_push(st_fleet_t *f, st_db_t *local, st_fleet_push_t *p, char *err, size_t errlen)
{
  push_lock = p->local_lock;
  if (push_lock)
    push_lock(1);
  int rc = push_held(f, local, p, err, errlen);
  if (push_lock)
    push_lock(0);
  push_lock = NULL;
  return rc;
}

/* ---- kernels ----------------------------------------------------------------------------- */

static void *unhex(const char *text, size_t *len)
{
  size_t n = 0;
  unsigned char *u = PQunescapeBytea((const unsigned char *)text, &n);
  void *copy = u ? malloc(n ? n : 1) : NULL;
  if (copy)
    memcpy(copy, u, n);
  PQfreemem(u);
  *len = copy ? n : 0;
  return copy;
}

int st_fleet_kernels(st_fleet_t *f, const st_run_info_t *program, const char *cpu,
                     double decay_runs, int max_runs, st_fleet_kernels_t *out)
{
  memset(out, 0, sizeof *out);
  char decay[32], limit[16];
  snprintf(decay, sizeof decay, "%.17g", decay_runs > 0 ? decay_runs : 1);
  snprintf(limit, sizeof limit, "%d", max_runs > 0 ? max_runs : 1);
  const char *vals[] = {program->exe,
                        program->build_id ? program->build_id : "",
                        program->script ? program->script : "",
                        decay,
                        limit,
                        cpu};
  PGresult *r =
      pq(f,
         "WITH r AS (SELECT ru.id, row_number() OVER (ORDER BY ru.start_ns DESC, ru.id DESC)"
         "   - 1 AS age FROM opjit.runs ru JOIN opjit.programs p ON p.id = ru.program_id"
         "   WHERE p.exe = $1 AND p.build_id = $2 AND p.script = $3"
         "   ORDER BY ru.start_ns DESC, ru.id DESC LIMIT $5::int),"
         " s AS (SELECT rs.sig_id, sum(rs.calls * power(0.5, r.age / $4::float8)) AS score,"
         "   sum(rs.timed_ns)::float8 / nullif(sum(rs.timed_calls), 0) AS mean_ns"
         "   FROM opjit.run_sigs rs JOIN r ON r.id = rs.run_id GROUP BY rs.sig_id)"
         " SELECT sg.key, s.score, coalesce(s.mean_ns, 0), o.cpu, o.llvm, o.generator,"
         "  o.symbol, o.checksum, o.code, o.tag, (SELECT count(*) FROM r),"
         "  (SELECT CASE WHEN v.status = 'demoted' THEN v.generator ELSE 0 END"
         "   FROM opjit.variants v JOIN opjit.runs ru ON ru.id = v.run_id"
         "   WHERE v.sig_id = s.sig_id AND v.run_id IN (SELECT id FROM r)"
         "   ORDER BY ru.start_ns DESC LIMIT 1)"
         " FROM s JOIN opjit.signatures sg ON sg.id = s.sig_id"
         " LEFT JOIN LATERAL (SELECT * FROM opjit.objects ob WHERE ob.sig_id = s.sig_id"
         "  AND ob.cpu = $6 ORDER BY ob.created_ns DESC LIMIT 1) o ON true"
         " ORDER BY s.score DESC",
         6, vals, NULL, NULL);
  if (!r)
    return pg_fail(f, NULL, 0, "cannot read the fleet's kernels");
  int n = PQntuples(r);
  out->k = calloc(n ? (size_t)n : 1, sizeof *out->k);
  if (!out->k) {
    PQclear(r);
    return ST_ENOMEM;
  }
  for (int i = 0; i < n; i++) {
    st_fleet_kernel_t *k = &out->k[out->n];
    k->key = unhex(PQgetvalue(r, i, 0), &k->key_len);
    if (!k->key)
      continue;
    out->n++;
    k->score = strtod(PQgetvalue(r, i, 1), NULL);
    k->mean_ns = strtod(PQgetvalue(r, i, 2), NULL);
    out->runs = strtoll(PQgetvalue(r, i, 10), NULL, 10);
    k->demoted_gen = PQgetisnull(r, i, 11) ? 0 : atoi(PQgetvalue(r, i, 11));
    if (PQgetisnull(r, i, 8))
      continue;
    snprintf(k->cpu, sizeof k->cpu, "%s", PQgetvalue(r, i, 3));
    snprintf(k->llvm, sizeof k->llvm, "%s", PQgetvalue(r, i, 4));
    k->generator = atoi(PQgetvalue(r, i, 5));
    snprintf(k->symbol, sizeof k->symbol, "%s", PQgetvalue(r, i, 6));
    k->checksum = (uint64_t)strtoll(PQgetvalue(r, i, 7), NULL, 10);
    k->code = unhex(PQgetvalue(r, i, 8), &k->code_len);
    if (!PQgetisnull(r, i, 9)) {
      size_t tl = 0;
      void *t = unhex(PQgetvalue(r, i, 9), &tl);
      if (t && tl == ST_FLEET_TAG_LEN) {
        memcpy(k->tag, t, ST_FLEET_TAG_LEN);
        k->tagged = 1;
      }
      free(t);
    }
  }
  PQclear(r);
  return ST_OK;
}

void st_fleet_kernels_free(st_fleet_kernels_t *k)
{
  for (size_t i = 0; i < k->n; i++)
    free(k->k[i].key), free(k->k[i].code);
  free(k->k);
  memset(k, 0, sizeof *k);
}

/* ---- tags -------------------------------------------------------------------------------- */

/* Feeds a length-prefixed field: no two field lists give the same bytes. */
static void mac_field(EVP_MAC_CTX *c, const void *p, size_t n)
{
  unsigned char len[8];
  for (int i = 0; i < 8; i++)
    len[i] = (unsigned char)((uint64_t)n >> (8 * i));
  EVP_MAC_update(c, len, sizeof len);
  if (n)
    EVP_MAC_update(c, p, n);
}

void st_fleet_tag(const void *key, size_t key_len, const void *sig, size_t sig_len, const char *cpu,
                  int generator, const char *llvm, const char *symbol, const void *code,
                  size_t code_len, unsigned char tag[ST_FLEET_TAG_LEN])
{
  memset(tag, 0, ST_FLEET_TAG_LEN);
  EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  EVP_MAC_CTX *c = mac ? EVP_MAC_CTX_new(mac) : NULL;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0),
                         OSSL_PARAM_construct_end()};
  size_t out = 0;
  char gen[16];
  snprintf(gen, sizeof gen, "%d", generator);
  if (c && EVP_MAC_init(c, key, key_len, params)) {
    mac_field(c, "opjit-fleet-object-1", 20);
    mac_field(c, sig, sig_len);
    mac_field(c, cpu, strlen(cpu));
    mac_field(c, gen, strlen(gen));
    mac_field(c, llvm, strlen(llvm));
    mac_field(c, symbol, strlen(symbol));
    mac_field(c, code, code_len);
    EVP_MAC_final(c, tag, &out, ST_FLEET_TAG_LEN);
  }
  EVP_MAC_CTX_free(c);
  EVP_MAC_free(mac);
}

int st_fleet_verify(const st_fleet_kernel_t *k, const void *key, size_t key_len)
{
  if (!k->tagged || !k->code || !key || !key_len)
    return 0;
  unsigned char tag[ST_FLEET_TAG_LEN];
  st_fleet_tag(key, key_len, k->key, k->key_len, k->cpu, k->generator, k->llvm, k->symbol, k->code,
               k->code_len, tag);
  return CRYPTO_memcmp(tag, k->tag, ST_FLEET_TAG_LEN) == 0;
}

/* ---- readers ----------------------------------------------------------------------------- */

static const char *const reader_sql[] = {
    [ST_FLEET_Q_SUMMARY] =
        "SELECT (SELECT count(*) FROM opjit.machines), (SELECT count(*) FROM opjit.runs),"
        " (SELECT count(*) FROM opjit.programs), (SELECT count(*) FROM opjit.objects),"
        " (SELECT max(push_ns) FROM opjit.machines), $1::int",
    [ST_FLEET_Q_RUNS] =
        "SELECT r.local_id, m.hostname, m.uuid, r.cpu_model, r.start_ns, r.end_ns - r.start_ns,"
        " r.status, coalesce(nullif(p.script, ''), p.exe),"
        " (SELECT count(*) FROM opjit.run_sigs s WHERE s.run_id = r.id),"
        " (SELECT coalesce(sum(calls), 0) FROM opjit.run_sigs s WHERE s.run_id = r.id),"
        " (SELECT coalesce(sum(samples), 0) FROM opjit.run_sigs s WHERE s.run_id = r.id)"
        " FROM opjit.runs r JOIN opjit.machines m ON m.id = r.machine_id"
        " JOIN opjit.programs p ON p.id = r.program_id ORDER BY r.start_ns DESC LIMIT $1::int",
    [ST_FLEET_Q_TOP] =
        "SELECT s.sig, s.name, t.machines, t.cpus, t.runs, t.calls, t.mean_ns, t.samples"
        " FROM (SELECT sig_id, count(DISTINCT machine_id) AS machines,"
        "  string_agg(DISTINCT cpu_model, '; ') AS cpus, sum(runs) AS runs,"
        "  sum(calls) AS calls, sum(timed_ns)::float8 / nullif(sum(timed_calls), 0) AS mean_ns,"
        "  sum(samples) AS samples FROM opjit.sig_days GROUP BY sig_id) t"
        " JOIN opjit.signatures s ON s.id = t.sig_id"
        " ORDER BY t.calls * coalesce(t.mean_ns, 0) DESC, t.calls DESC LIMIT $1::int",
    [ST_FLEET_Q_VARIANTS] =
        "SELECT sig, name, hostname, cpu_model, status, origin, generator, llvm, calls, vmean,"
        " omean FROM (SELECT DISTINCT ON (r.machine_id, v.sig_id) s.sig, s.name, m.hostname,"
        "  r.cpu_model, v.status, v.origin, v.generator, v.llvm, v.calls,"
        "  v.timed_ns::float8 / nullif(v.timed_calls, 0) AS vmean,"
        "  rs.timed_ns::float8 / nullif(rs.timed_calls, 0) AS omean, r.start_ns"
        "  FROM opjit.variants v JOIN opjit.runs r ON r.id = v.run_id"
        "  JOIN opjit.machines m ON m.id = r.machine_id"
        "  JOIN opjit.signatures s ON s.id = v.sig_id"
        "  LEFT JOIN opjit.run_sigs rs ON rs.run_id = v.run_id AND rs.sig_id = v.sig_id"
        "  ORDER BY r.machine_id, v.sig_id, r.start_ns DESC) x"
        " ORDER BY calls DESC, sig, hostname LIMIT $1::int",
};

int st_fleet_query(st_fleet_t *f, int query, int limit, st_fleet_row_fn fn, void *ctx, char *err,
                   size_t errlen)
{
  if (query < 0 || query > ST_FLEET_Q_VARIANTS)
    return ST_ENOENT;
  char lim[16];
  snprintf(lim, sizeof lim, "%d", limit > 0 ? limit : 1000000);
  const char *vals[] = {lim};
  PGresult *r = pq(f, reader_sql[query], 1, vals, NULL, NULL);
  if (!r)
    return pg_fail(f, err, errlen, "cannot read the fleet");
  int n = PQntuples(r), nc = PQnfields(r);
  const char *cols[16];
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < nc && j < 16; j++)
      cols[j] = PQgetisnull(r, i, j) ? NULL : PQgetvalue(r, i, j);
    if (fn(ctx, nc, cols))
      break;
  }
  PQclear(r);
  return ST_OK;
}

/* ---- the module -------------------------------------------------------------------------- */

/* libcrypto (loaded with this module, after the agent registered its exit handler) would
 * register its cleanup with atexit, which runs handlers newest first: before the agent's final
 * push, whose tags then crash in a torn-down library. Initialised here first, it registers
 * none. */
__attribute__((constructor)) static void fleet_module_init(void)
{
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
}

__attribute__((visibility("default"))) const st_fleet_api_t opjit_fleet_api = {
    .abi = ST_FLEET_API_ABI,
    .open = st_fleet_open,
    .close = st_fleet_close,
    .local_open = st_open,
    .local_close = st_close,
    .push = st_fleet_push,
    .kernels = st_fleet_kernels,
    .kernels_free = st_fleet_kernels_free,
    .verify = st_fleet_verify,
    .errmsg = fleet_errmsg,
};
