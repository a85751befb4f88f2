/* SPDX-License-Identifier: MIT */
/* The fleet store against a real PostgreSQL server (tests/fleet/pg.sh starts one per test on a
 * Unix socket) and real hosts (jit_prog: every result checked against the reference BLAS):
 * machines, each its own local database, share kernels through the fleet; a fleet stopped in
 * the middle of a run costs one warning and loses nothing; a tampered object, a missing or a
 * wrong tag is refused with an event and compiled locally; a push holds the agent's fork lock
 * over its local SQLite work and never over a round trip to the server. */
#include "../integration/harness.h"
#include "store/fleet.h"

#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PG_SH OPJIT_SOURCE_DIR "/tests/fleet/pg.sh"

static char pg_dir[64];     /* the server's folder (its socket and data) */
static char conninfo[256];  /* libpq's connection string for it */
static char fleet_var[300]; /* OPJIT_FLEET=conninfo */
static char key_var[160];   /* OPJIT_FLEET_KEY=h_dir/fleet.key */

static int pg(const char *verb)
{
  char cmd[256];
  snprintf(cmd, sizeof cmd, "%s %s %s 2>%s/pg.err", PG_SH, verb, pg_dir, h_dir);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  char line[256] = "";
  if (fgets(line, sizeof line, p) && !strcmp(verb, "start"))
    snprintf(conninfo, sizeof conninfo, "%.*s", (int)strcspn(line, "\n"), line);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A key file for the fleet's tags. */
static void write_key(const char *name, const char *text)
{
  char path[160];
  snprintf(path, sizeof path, "%s/%s", h_dir, name);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
  chmod(path, 0600);
}

static void setup(void)
{
  h_setup_jit();
  snprintf(pg_dir, sizeof pg_dir, "/tmp/opjit-pg-XXXXXX");
  cr_assert_not_null(mkdtemp(pg_dir));
  int rc = pg("start");
  if (rc == 77)
    cr_skip_test("no PostgreSQL server binaries (scripts/deps.sh installs postgresql)");
  cr_assert_eq(rc, 0, "pg.sh start: %s", h_output("pg", "err"));
  snprintf(fleet_var, sizeof fleet_var, "OPJIT_FLEET=%s", conninfo);
  snprintf(key_var, sizeof key_var, "OPJIT_FLEET_KEY=%s/fleet.key", h_dir);
  write_key("fleet.key", "a fleet's shared secret, 32 bytes or more\n");
}

static void teardown(void)
{
  if (pg_dir[0]) {
    pg("stop");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", pg_dir);
    cr_assert_eq(system(cmd), 0);
  }
  h_teardown();
}

TestSuite(fleet, .init = setup, .fini = teardown, .timeout = 900);

/* One integer from the fleet (-1 when there is no row). */
static long long fleet_int(const char *sql)
{
  PGconn *c = PQconnectdb(conninfo);
  cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
  PGresult *r = PQexec(c, sql);
  cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
  long long v = PQntuples(r) ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : -1;
  PQclear(r);
  PQfinish(c);
  return v;
}

/* A statement that changes the fleet (a test tampering with it): it must change one row. */
static void fleet_exec(const char *sql)
{
  PGconn *c = PQconnectdb(conninfo);
  cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
  PGresult *r = PQexec(c, sql);
  cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s: %s", sql, PQerrorMessage(c));
  cr_assert_str_eq(PQcmdTuples(r), "1", "%s", sql);
  PQclear(r);
  PQfinish(c);
}

/* Runs a shell command, its output into out. */
static void read_cmd(const char *cmd, char *out, size_t len)
{
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t n = fread(out, 1, len - 1, p);
  out[n] = 0;
  cr_assert_eq(pclose(p), 0, "%s: %s", cmd, out);
}

static char dbs[8][200]; /* machine m's local database */

static const char *db_of(char m)
{
  char *p = dbs[(m - 'A') & 7];
  snprintf(p, sizeof dbs[0], "%s/%c.db", h_dir, m);
  return p;
}

/* Runs jit_prog's sweep on machine m (its own database), fleet and key as given; every
 * signature hot from its first call, the first call waiting for the whole warm start (the
 * fleet's fetch included), every kernel winning the judge's cold pairs (the fault seam: the
 * sweep's rare calls are judged in pairs, docs/never-slower.md). Checks the results; returns
 * the run's stderr. */
static const char *sweep(const char *tag, char m, const char *extra, const char *passes,
                         const char *seed)
{
  char db[300];
  snprintf(db, sizeof db, "OPJIT_DB=%.200s", db_of(m));
  const char *env[] = {db,
                       fleet_var,
                       extra ? extra : key_var,
                       "OPJIT_MODE=jit",
                       "OPJIT_HOT_PAYBACK=0",
                       "OPJIT_DUEL=0",
                       "OPJIT_HOT_CALLS=1",
                       "OPJIT_SAMPLE_HZ=0",
                       "OPJIT_LOG=info",
                       "OPJIT_WARM_WAIT_US=60000000",
                       "OPJIT_FLEET_PUSH_MS=200",
                       "OPJIT_FLEET_WAIT_MS=30000", /* a final push of a backlog, loaded machine */
                       "OPJIT_TEST_FAULT=fast",
                       NULL};
  int st = h_run(tag, 1, env, (const char *[]){H_JIT_PROG, "sweep", "24", passes, seed, NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d\n%s\n%s", tag, st,
            h_output(tag, "out"), h_output(tag, "err"));
  cr_assert(strstr(h_output(tag, "out"), "mismatches 0"), "%s: %s", tag, h_output(tag, "out"));
  return h_output(tag, "err");
}

static long long local_int(char m, const char *sql) { return h_query(db_of(m), "%s", sql); }

/* Machine A runs the program until a run compiles nothing (every hot signature has its stored
 * kernel: a loaded machine may not compile all of them in one run); returns its objects. */
static long long machine_a(const char *seed)
{
  for (int run = 1; run <= 5; run++) {
    char tag[16];
    snprintf(tag, sizeof tag, "a%d", run);
    const char *err = sweep(tag, 'A', NULL, "20", seed);
    if (run > 1 && !strstr(err, "JIT ready"))
      return local_int('A', "SELECT count(*) FROM objects");
  }
  cr_assert_fail("machine A still compiled in its fifth run");
  return 0;
}

Test(fleet, machine_b_places_the_kernels_machine_a_compiled)
{
  long long n = machine_a("31");
  cr_assert_gt(n, 8, "A stored %lld kernels", n);
  cr_assert_eq(fleet_int("SELECT count(*) FROM opjit.objects WHERE tag IS NOT NULL"), n,
               "every kernel of A's is in the fleet, tagged");
  long long a_runs = local_int('A', "SELECT count(*) FROM runs");
  cr_assert_eq(fleet_int("SELECT count(*) FROM opjit.runs"), a_runs);

  /* B's first run: nothing local, everything from the fleet, LLVM never loaded. */
  const char *err = sweep("b1", 'B', NULL, "2", "31");
  cr_assert_null(strstr(err, "JIT ready"), "B loaded LLVM: %s", err);
  cr_assert_eq(local_int('B', "SELECT count(*) FROM events WHERE kind='loaded'"), n, "%s", err);
  cr_assert_eq(local_int('B', "SELECT count(*) FROM events WHERE kind IN ('published','refused')"),
               0);
  cr_assert_eq(local_int('B', "SELECT count(*) FROM variants WHERE origin='loaded'"
                              " AND status='ready' AND pre_calls=0"),
               n, "each kernel was in place before its signature's first call");

  /* C turns fleet kernels off: it compiles its own. */
  err = sweep("c1", 'C', "OPJIT_FLEET_KERNELS=0", "2", "31");
  cr_assert(strstr(err, "JIT ready"), "%s", err);
  cr_assert_eq(local_int('C', "SELECT count(*) FROM events WHERE kind='loaded'"), 0);

  /* D has no key: it cannot check the fleet's kernels, so it compiles too. */
  err = sweep("d1", 'D', "OPJIT_FLEET_KEY=", "2", "31");
  cr_assert(strstr(err, "JIT ready"), "%s", err);
  cr_assert_eq(local_int('D', "SELECT count(*) FROM events WHERE kind='loaded'"), 0);

  /* Four machines, each run once in the fleet, the command lines redacted. */
  cr_assert_eq(fleet_int("SELECT count(*) FROM opjit.machines"), 4);
  cr_assert_eq(fleet_int("SELECT count(*) FROM opjit.runs"), a_runs + 3);
  cr_assert_eq(fleet_int("SELECT count(*) FROM (SELECT DISTINCT machine_id, local_id"
                         " FROM opjit.runs) x"),
               a_runs + 3);
  cr_assert_eq(fleet_int("SELECT count(*) FROM opjit.runs WHERE argv NOT LIKE"
                         " '%(4 arguments redacted)%' OR argv LIKE '%sweep%'"),
               0);
  cr_assert_eq(fleet_int("SELECT count(*) FROM opjit.runs WHERE options LIKE '%host=%'"), 0,
               "the connection string stays home");
  cr_assert_gt(fleet_int("SELECT count(*) FROM opjit.run_sigs rs JOIN opjit.runs r"
                         " ON r.id = rs.run_id JOIN opjit.machines m ON m.id = r.machine_id"),
               0);
  cr_assert_gt(fleet_int("SELECT count(*) FROM opjit.machine_models"), 0);

  /* The readers: this machine's standing, and the fleet's runs with their machines. */
  char cmd[2048], out[8192];
  snprintf(cmd, sizeof cmd, "OPJIT_FLEET='%s' %s/opjit fleet status --db %s 2>&1", conninfo,
           OPJIT_BUILD_DIR, db_of('B'));
  read_cmd(cmd, out, sizeof out);
  char id[33] = "";
  cr_assert(strstr(out, "backlog:   0 finished runs"), "%s", out);
  cr_assert(strstr(out, "4 machines"), "%s", out);
  cr_assert(strstr(out, "server:    PostgreSQL"), "%s", out);
  snprintf(id, sizeof id, "%s", strstr(out, "machine:   ") ? strstr(out, "machine:   ") + 11 : "");
  cr_assert_eq(strspn(id, "0123456789abcdef"), 32, "%s", out);
  snprintf(cmd, sizeof cmd, "%s/opjit runs --fleet='%s' --limit 100 2>&1", OPJIT_BUILD_DIR,
           conninfo);
  read_cmd(cmd, out, sizeof out);
  cr_assert(strstr(out, "MACHINE") && strstr(out, "CPU"), "%s", out);
  char shortid[9];
  snprintf(shortid, sizeof shortid, "%s", id);
  cr_assert(strstr(out, shortid), "B's run is listed under its machine: %s", out);
  cr_assert_eq(h_count_lines(out, "jit_prog"), a_runs + 3, "%s", out);
  snprintf(cmd, sizeof cmd, "%s/opjit top --fleet='%s' --limit 3 2>&1", OPJIT_BUILD_DIR, conninfo);
  read_cmd(cmd, out, sizeof out);
  cr_assert(strstr(out, "MACHINES"), "%s", out);
  cr_assert_eq(h_count_lines(out, "  4  "), 3, "each signature ran on the four machines: %s", out);
}

Test(fleet, a_fleet_stopped_mid_run_costs_one_warning_and_loses_nothing)
{
  sweep("a1", 'A', NULL, "2", "5");
  cr_assert_eq(fleet_int("SELECT count(*) FROM opjit.runs"), 1);
  /* The same run without the fleet, for its output. */
  char db[300];
  snprintf(db, sizeof db, "OPJIT_DB=%s/ref.db", h_dir);
  const char *ref_env[] = {db, "OPJIT_MODE=jit", "OPJIT_SAMPLE_HZ=0", NULL};
  const char *argv[] = {H_JIT_PROG, "sweep", "24", "400", "6", NULL};
  int st = h_run("ref", 1, ref_env, argv);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  char *ref_out = strdup(h_output("ref", "out"));

  /* Run 2 starts with the fleet up (its first push is done), which stops under it. */
  snprintf(db, sizeof db, "OPJIT_DB=%.200s", db_of('A'));
  const char *env[] = {db,
                       fleet_var,
                       key_var,
                       "OPJIT_MODE=jit",
                       "OPJIT_SAMPLE_HZ=0",
                       "OPJIT_FLEET_PUSH_MS=100",
                       "OPJIT_FLEET_WAIT_MS=500",
                       NULL};
  pid_t pid = h_spawn("a2", 1, env, argv);
  for (int i = 0;
       i < 3000 && fleet_int("SELECT count(*) FROM opjit.machines m WHERE"
                             " m.push_ns > (SELECT max(pushed_ns) FROM opjit.runs)") == 0;
       i++)
    usleep(10000);
  /* Held still while the server stops, so the stop falls inside the run. */
  cr_assert_eq(kill(pid, SIGSTOP), 0);
  cr_assert_eq(waitpid(pid, &st, WUNTRACED), pid);
  cr_assert(WIFSTOPPED(st), "run 2 ended before the fleet stopped: %s", h_output("a2", "err"));
  cr_assert_eq(pg("stop"), 0);
  cr_assert_eq(kill(pid, SIGCONT), 0);
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", h_output("a2", "err"));
  const char *err = h_output("a2", "err");
  cr_assert_eq(h_count_lines(err, "opjit"), 1, "one warning: %s", err);
  cr_assert_eq(h_count_lines(err, "pushed when the fleet is back"), 1, "%s", err);
  cr_assert_str_eq(h_output("a2", "out"), ref_out, "the host's output");
  free(ref_out);
  cr_assert_eq(local_int('A', "SELECT count(*) FROM runs WHERE status='exited'"), 2);

  /* Back: run 3 pushes run 2 and itself; run 4 only itself; no run twice. */
  cr_assert_eq(pg("start"), 0);
  sweep("a3", 'A', NULL, "2", "5");
  cr_assert_eq(fleet_int("SELECT count(*) FROM opjit.runs"), 3);
  sweep("a4", 'A', NULL, "2", "5");
  cr_assert_eq(fleet_int("SELECT count(*) FROM opjit.runs"), 4);
  cr_assert_eq(fleet_int("SELECT count(DISTINCT local_id) FROM opjit.runs"), 4);
  cr_assert_eq(fleet_int("SELECT count(*) FROM opjit.runs r WHERE local_id = 2 AND"
                         " (SELECT count(*) FROM opjit.run_sigs s WHERE s.run_id = r.id) > 0"),
               1, "run 2's profile arrived with it");
}

Test(fleet, tampered_untagged_and_foreign_kernels_are_refused_and_compiled_locally)
{
  long long n = machine_a("77");
  cr_assert_gt(n, 8);
  /* One object altered, one untagged, one tagged under another key. */
  fleet_exec("UPDATE opjit.objects SET code = overlay(code placing '\\xcc'::bytea from 40 for 1)"
             " WHERE id = (SELECT id FROM opjit.objects ORDER BY id LIMIT 1 OFFSET 0)");
  fleet_exec("UPDATE opjit.objects SET tag = NULL"
             " WHERE id = (SELECT id FROM opjit.objects ORDER BY id LIMIT 1 OFFSET 1)");
  fleet_exec("UPDATE opjit.objects SET tag = sha256(tag)"
             " WHERE id = (SELECT id FROM opjit.objects ORDER BY id LIMIT 1 OFFSET 2)");
  const char *err = sweep("b1", 'B', NULL, "2", "77");
  cr_assert_eq(local_int('B', "SELECT count(*) FROM events WHERE kind='refused'"
                              " AND detail LIKE 'tag:%'"),
               3, "%s", err);
  cr_assert_eq(local_int('B', "SELECT count(*) FROM events WHERE kind='loaded'"), n - 3);
  cr_assert_eq(local_int('B', "SELECT count(*) FROM events WHERE kind='published'"), 3,
               "the three compiled locally");
  cr_assert(strstr(err, "JIT ready"), "%s", err);

  /* A machine with another key refuses every kernel. */
  write_key("other.key", "not the fleet's key");
  char other[200];
  snprintf(other, sizeof other, "OPJIT_FLEET_KEY=%s/other.key", h_dir);
  sweep("c1", 'C', other, "2", "77");
  cr_assert_eq(local_int('C', "SELECT count(*) FROM events WHERE kind='refused'"), n);
  cr_assert_eq(local_int('C', "SELECT count(*) FROM events WHERE kind='loaded'"), 0);
}

/* The push's lock as a hook sees it, and the local statements SQLite ran meanwhile. */
static int held, releases, statements, unheld;

static void lock_hook(int hold)
{
  cr_assert_neq(hold, held, "taken twice or released twice");
  releases += !hold;
  held = hold;
}

static int on_statement(unsigned type, void *ctx, void *stmt, void *sql)
{
  (void)type, (void)ctx, (void)stmt, (void)sql;
  statements++;
  unheld += !held;
  return 0;
}

Test(fleet, a_push_holds_its_lock_over_local_sqlite_work_and_not_over_round_trips)
{
  /* Two finished local runs with kernels (no OPJIT_FLEET: this test pushes them itself). */
  char db[300];
  snprintf(db, sizeof db, "OPJIT_DB=%.200s", db_of('A'));
  const char *env[] = {db, "OPJIT_MODE=jit", "OPJIT_HOT_PAYBACK=0", "OPJIT_DUEL=0",
                       "OPJIT_HOT_CALLS=1", "OPJIT_SAMPLE_HZ=0", NULL};
  for (int i = 0; i < 2; i++) {
    int st = h_run("local", 1, env, (const char *[]){H_JIT_PROG, "sweep", "8", "20", "5", NULL});
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", h_output("local", "err"));
  }
  st_db_t *local;
  st_fleet_t *f;
  char err[512];
  cr_assert_eq(st_open(db_of('A'), 0, 1000, &local, err, sizeof err), 0, "%s", err);
  sqlite3_trace_v2(st_sqlite(local), SQLITE_TRACE_STMT, on_statement, NULL);
  cr_assert_eq(st_fleet_open(conninfo, 5000, &f, err, sizeof err), 0, "%s", err);
  st_fleet_push_t p = {.hostname = "a", .max_runs = 16, .batch = 1, .local_lock = lock_hook};
  cr_assert_eq(st_fleet_push(f, local, &p, err, sizeof err), 0, "%s", err);
  cr_assert_eq(p.runs, 2);
  cr_assert_gt(statements, 10);
  cr_assert_eq(unheld, 0, "%d of %d local statements ran without the lock", unheld, statements);
  cr_assert_gt(releases, 2 * p.runs, "released over each round trip (%d times)", releases);
  cr_assert_eq(held, 0, "released when the push returns");
  st_fleet_close(f);
  st_close(local);
}
