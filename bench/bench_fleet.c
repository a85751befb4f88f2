/* SPDX-License-Identifier: MIT */
/* bench_fleet: what the fleet store (docs/fleet.md) costs the host, side by side in one run,
 * against a throwaway PostgreSQL server on a Unix socket (tests/fleet/pg.sh).
 * bench_warm_worker (about 50 small GEMM signatures, P passes) runs, every round, as:
 *   local  the agent on its own database, no fleet (from round 2 on it starts warm: its
 *          kernels placed from the local database)
 *   fleet  the same with OPJIT_FLEET, pushing every 100 ms (300 times the default rate) and
 *          fetching the fleet's kernels at start
 *   join   the agent with the fleet on an empty database (a machine joining the fleet): its
 *          kernels come from the fleet, placed before the first call
 * local and fleet alternate which goes first. The sync's cost is the fleet run's loop time
 * (passes 2 to P: the first waits for the warm start) over the local run's, per round from the second (both warm), median of the
 * ratios; the warm starts are compared on what they cost the first call: every run's first
 * call waits for the whole warm start (OPJIT_WARM_WAIT_US=1 s), whose duration the run records
 * (runs.warm_ns), and on the first pass. A seed run with the fleet fills it first.
 *   bench_fleet [rounds [passes]]   (default 7 6) */
#define _GNU_SOURCE
#include "bench.h"

#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define MAXP 16
#define MAXR 64

enum { LOCAL, FLEET, JOIN, NCFG };
static const char *const names[NCFG] = {"local (no fleet)", "fleet (sync on)",
                                        "join (empty db, fleet)"};
static char scratch[PATH_MAX], pgdir[64], fleet_env[400], key_env[PATH_MAX + 32];

/* Starts or stops the server; returns pg.sh's exit status. */
static int pg(const char *verb)
{
  char cmd[PATH_MAX + 128];
  snprintf(cmd, sizeof cmd, "%s/tests/fleet/pg.sh %s %s", OPJIT_SOURCE_DIR, verb, pgdir);
  FILE *p = popen(cmd, "r");
  if (!p)
    return -1;
  char line[300] = "";
  if (fgets(line, sizeof line, p) && !strcmp(verb, "start"))
    snprintf(fleet_env, sizeof fleet_env, "OPJIT_FLEET=%.*s", (int)strcspn(line, "\n"), line);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void db_path(int cfg, int round, char *buf, size_t len)
{
  if (cfg == JOIN)
    snprintf(buf, len, "%s/join%d.db", scratch, round);
  else
    snprintf(buf, len, "%s/%s.db", scratch, cfg == LOCAL ? "local" : "fleet");
}

/* Runs the worker; fills pass[0..passes) (ms). Returns 0 or -1. */
static int run(int cfg, int round, int passes, double *pass)
{
  char db[PATH_MAX + 32], dbenv[PATH_MAX + 48], out[PATH_MAX + 32], err[PATH_MAX + 32], np[16];
  db_path(cfg, round, db, sizeof db);
  snprintf(dbenv, sizeof dbenv, "OPJIT_DB=%s", db);
  snprintf(out, sizeof out, "%s/out", scratch);
  snprintf(err, sizeof err, "%s/err", scratch);
  snprintf(np, sizeof np, "%d", passes);
  const char *env_add[] = {"LD_PRELOAD=" OPJIT_AGENT_PATH,
                           dbenv,
                           "OPJIT_HOT_PAYBACK=0",
                           "OPENBLAS_NUM_THREADS=1",
                           "OPJIT_WARM_WAIT_US=1000000",
                           "OPJIT_FLEET_PUSH_MS=100",
                           key_env,
                           cfg == LOCAL ? NULL : fleet_env,
                           NULL};
  char **env = bn_env(env_add);
  char *argv[] = {(char *)OPJIT_WARM_WORKER_PATH, np, out, NULL};
  int st = bn_spawn_wait(argv[0], argv, env, err);
  bn_env_free(env);
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "bench_fleet: the %s worker failed (status %d)\n", names[cfg], st);
    return -1;
  }
  if (!bn_stderr_quiet(err, "bench_fleet", names[cfg]))
    return -1;
  int got = bn_read_passes(out, pass, passes);
  if (got != passes) {
    fprintf(stderr, "bench_fleet: the %s worker reported %d of %d passes\n", names[cfg], got,
            passes);
    return -1;
  }
  return 0;
}

/* One integer from a run's database (its newest run). */
static int64_t query(int cfg, int round, const char *sql)
{
  char db[PATH_MAX + 32];
  db_path(cfg, round, db, sizeof db);
  sqlite3 *h;
  sqlite3_stmt *st;
  int64_t v = -1;
  if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW)
      v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(h);
  return v;
}

static double med(const double *v, int n, double *spread)
{
  double a[MAXR], b[MAXR];
  memcpy(a, v, (size_t)n * sizeof *v);
  memcpy(b, v, (size_t)n * sizeof *v);
  *spread = bn_half_iqr(b, (size_t)n);
  return bn_median(a, (size_t)n);
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 7, passes = argc > 2 ? atoi(argv[2]) : 6;
  if (rounds < 2 || rounds > MAXR || passes < 2 || passes > MAXP) {
    fprintf(stderr, "usage: bench_fleet [rounds (2-%d) [passes (2-%d)]]\n", MAXR, MAXP);
    return 2;
  }
  if (bn_scratch_new(scratch, sizeof scratch))
    return 1;
  snprintf(pgdir, sizeof pgdir, "/tmp/opjit-bench-pg.XXXXXX");
  if (!mkdtemp(pgdir)) {
    perror("bench_fleet: mkdtemp");
    return 1;
  }
  snprintf(key_env, sizeof key_env, "OPJIT_FLEET_KEY=%s/fleet.key", scratch);
  FILE *kf = fopen(key_env + 16, "w");
  if (!kf || fputs("the fleet's secret for this benchmark\n", kf) < 0 || fclose(kf)) {
    perror("bench_fleet: the key file");
    return 1;
  }
  int rc = 1, st = pg("start");
  if (st) {
    fprintf(stderr, "bench_fleet: %s\n",
            st == 77 ? "no PostgreSQL server binaries: nothing measured"
                     : "cannot start PostgreSQL (tests/fleet/pg.sh)");
    goto out;
  }
  static double loop[NCFG][MAXR], first[NCFG][MAXR], warm_ms[NCFG][MAXR], ratio[MAXR];
  static double placed[MAXR], compiled[MAXR];
  double p[MAXP];
  /* The seed: a run that compiles and pushes, then one that compiles what the first had no
   * time for. */
  for (int s = 0; s < 2; s++)
    if (run(JOIN, MAXR - 1, passes, p))
      goto out;
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < 2; k++) {
      int cfg = (k + r) % 2 == 0 ? LOCAL : FLEET;
      if (run(cfg, r, passes, p))
        goto out;
      loop[cfg][r] = 0;
      for (int i = 1; i < passes; i++) /* the first pass waits for the warm start */
        loop[cfg][r] += p[i];
      first[cfg][r] = p[0];
      warm_ms[cfg][r] = (double)query(cfg, r, "SELECT warm_ns FROM runs ORDER BY id DESC") / 1e6;
    }
    ratio[r] = loop[FLEET][r] / loop[LOCAL][r];
    if (run(JOIN, r, passes, p))
      goto out;
    first[JOIN][r] = p[0];
    warm_ms[JOIN][r] = (double)query(JOIN, r, "SELECT warm_ns FROM runs") / 1e6;
    placed[r] = (double)query(JOIN, r, "SELECT count(*) FROM events WHERE kind='loaded'");
    compiled[r] = (double)query(JOIN, r, "SELECT count(*) FROM events WHERE kind='published'");
  }
  char cpu[256];
  bn_cpu_name(cpu, sizeof cpu);
  printf("bench_fleet: %s; %d rounds of %d passes (rounds 2-%d compared: both warm)\n", cpu, rounds,
         passes, rounds);
  int n = rounds - 1;
  double s1, s2, s3, s4;
  double l = med(loop[LOCAL] + 1, n, &s1), f = med(loop[FLEET] + 1, n, &s2);
  double x = med(ratio + 1, n, &s3);
  printf("\nhost cost of the fleet sync (pushes every 100 ms; passes 2-%d)\n", passes);
  printf("  %-24s  loop %8.1f ms +- %.1f\n", names[LOCAL], l, s1);
  printf("  %-24s  loop %8.1f ms +- %.1f\n", names[FLEET], f, s2);
  printf("  fleet / local loop time: %.3f +- %.3f (median of per-round ratios)\n", x, s3);
  printf("\nfirst call: the warm start it waits for, and the first pass\n");
  for (int cfg = LOCAL; cfg < NCFG; cfg++) {
    double w = med(warm_ms[cfg] + 1, n, &s1), fp = med(first[cfg] + 1, n, &s2);
    printf("  %-24s  warm start %7.2f ms +- %.2f   first pass %7.1f ms +- %.1f\n", names[cfg], w,
           s1, fp, s2);
  }
  double pl = med(placed + 1, n, &s3), co = med(compiled + 1, n, &s4);
  printf("  join runs placed %.0f kernels from the fleet and compiled %.0f (medians)\n", pl, co);
  rc = 0;
out:
  pg("stop");
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", pgdir);
  if (system(cmd) != 0)
    fprintf(stderr, "bench_fleet: cannot remove %s\n", pgdir);
  bn_scratch_free(scratch);
  return rc;
}
