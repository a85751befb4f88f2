/* SPDX-License-Identifier: MIT */
/* bench_warm: the second run of a program against its first, side by side in one run.
 * bench_warm_worker (about 50 distinct small GEMM signatures, P passes of about 50-100 ms)
 * runs, every round, in three configurations:
 *   plain  no agent (OpenBLAS)
 *   cold   the agent on an empty database: it compiles what turns hot while the passes run,
 *          and after them finishes what they started, untimed (the worker's settle: its
 *          compile queue, and one more pass for the first calls that verify the kernels
 *          published last: a program's JIT may outlive its run by a few compiles)
 *   warm   the agent on the database the cold run left: its kernels are placed before the
 *          first call, without compiling and without loading LLVM
 *   other  another program (a copy of the worker) on that database: its profile is empty, and
 *          each signature takes the stored kernel when it gets hot, without compiling
 * "Steady state" is the warm run's median pass from the second on: every signature on its
 * kernel, caches warm. The table gives per configuration the median time of each pass, of the
 * whole run (the passes' sum), of the process (spawn to exit) and of its first call (the agent
 * activates in it), and per round the ratios of the first pass and of the whole run to that
 * round's steady state (P steady passes for the run; medians over rounds, +- half the
 * interquartile range). The goals are on the whole run, and on the warm run's first call
 * against the plain run's (per round; what the warm start costs the program before its first
 * call returns). From each warm run's database it reads how long after the first call its
 * stored kernels served (runs.warm_ns; the call itself does not wait for them by default:
 * OPJIT_WARM_WAIT_US) and how many kernels it placed and compiled. Options: OPJIT_HOT_PAYBACK=0 (every signature hot at OPJIT_HOT_CALLS=64
 * calls, so the cold run compiles all of them), defaults otherwise (sampling on). It fails
 * when a run's results differ from the plain run's (the workers' checksums, 1e-3 relative); a
 * warm run that did not start from every kernel its cold run stored (its warm start still
 * placing when the run ended, on a loaded machine) is reported, not failed.
 *   bench_warm [rounds [passes]]   (default 7 8) */
#define _GNU_SOURCE
#include "bench.h"

#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define GOAL_PCT 5.0 /* the warm run within this much of steady state */
#define GOAL_FIRST_US 500.0 /* the warm run's first call at most this much longer than plain's */
#define SUM_TOL 1e-3 /* checksums agree within this, relative (the kernels' rounding differs) */
#define MAXP 16
#define MAXR 64

enum { PLAIN, COLD, WARM, OTHER, NCFG };
static const char *const names[NCFG] = {"plain (no agent)", "cold (empty database)",
                                        "warm (second run)", "other (another program)"};
static char scratch[PATH_MAX], other[PATH_MAX + 16];

/* The worker copied to other (the same code, another program to the store). Returns 0 or -1. */
static int copy_worker(void)
{
  snprintf(other, sizeof other, "%s/other", scratch);
  FILE *in = fopen(OPJIT_WARM_WORKER_PATH, "rb"), *out = fopen(other, "wb");
  char buf[65536];
  size_t n;
  int ok = in && out;
  while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
    ok = fwrite(buf, 1, n, out) == n;
  ok = ok && !ferror(in);
  if (in)
    fclose(in);
  if (out && fclose(out))
    ok = 0;
  if (!ok || chmod(other, 0755)) {
    fprintf(stderr, "bench_warm: cannot copy %s to %s\n", OPJIT_WARM_WORKER_PATH, other);
    return -1;
  }
  return 0;
}

/* What one worker reported besides its passes. */
typedef struct report_s {
  double sum;      /* its checksum */
  double settle;   /* ms its settle took (cold: the waits and the untimed pass), else 0 */
  double first;    /* us its first call took (an agent activates in it) */
  double faults;   /* the calling thread's minor page faults in that call */
  double page_us;  /* what a fresh page's first write cost the worker (us) */
  int settled;     /* the queue was empty before the wait's end (or no wait) */
} report_t;

/* The checksum and settle lines of a worker's output. Returns 0, or -1 without a checksum. */
static int read_report(const char *path, report_t *rep)
{
  FILE *f = fopen(path, "r");
  char line[128];
  int got = 0, rc;
  *rep = (report_t){.settled = 1};
  while (f && fgets(line, sizeof line, f)) {
    if (sscanf(line, "checksum %lf", &rep->sum) == 1)
      got = 1;
    else if (sscanf(line, "settle %lf %d", &rep->settle, &rc) == 2)
      rep->settled = rc == 0;
    else if (sscanf(line, "first_faults %lf", &rep->faults) != 1 &&
             sscanf(line, "fresh_page_us %lf", &rep->page_us) != 1)
      sscanf(line, "first %lf", &rep->first);
  }
  if (f)
    fclose(f);
  return got ? 0 : -1;
}

/* Runs the worker; fills pass[0..passes) (ms), *wall (ms, less a cold run's wait for its queue)
 * and *rep. Returns 0 or -1. */
static int run(int cfg, int round, int passes, double *pass, double *wall, report_t *rep)
{
  char db[PATH_MAX + 32], dbenv[PATH_MAX + 48], out[PATH_MAX + 32], err[PATH_MAX + 32], np[16];
  snprintf(db, sizeof db, "%s/r%d.db", scratch, round);
  snprintf(dbenv, sizeof dbenv, "OPJIT_DB=%s", db);
  snprintf(out, sizeof out, "%s/out", scratch);
  snprintf(err, sizeof err, "%s/err", scratch);
  snprintf(np, sizeof np, "%d", passes);
  const char *agent[] = {"LD_PRELOAD=" OPJIT_AGENT_PATH, dbenv, "OPJIT_HOT_PAYBACK=0",
                         "OPENBLAS_NUM_THREADS=1", NULL};
  const char *plain[] = {"OPENBLAS_NUM_THREADS=1", NULL};
  char **env = bn_env(cfg == PLAIN ? plain : agent);
  char *argv[] = {cfg == OTHER ? other : (char *)OPJIT_WARM_WORKER_PATH, np, out,
                  cfg == COLD ? "settle" : NULL, NULL};
  uint64_t t0 = bn_now_ns();
  int st = bn_spawn_wait(argv[0], argv, env, err);
  *wall = (double)(bn_now_ns() - t0) / 1e6;
  bn_env_free(env);
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "bench_warm: the %s worker failed (status %d)\n", names[cfg], st);
    return -1;
  }
  if (!bn_stderr_quiet(err, "bench_warm", names[cfg]))
    return -1;
  int got = bn_read_passes(out, pass, passes);
  if (got != passes || read_report(out, rep)) {
    fprintf(stderr, "bench_warm: the %s worker reported %d of %d passes%s\n", names[cfg], got,
            passes, got == passes ? " and no checksum" : "");
    return -1;
  }
  *wall -= rep->settle;
  return 0;
}

/* One integer from the round's database. */
static int64_t query(int round, const char *sql)
{
  char db[PATH_MAX + 32];
  snprintf(db, sizeof db, "%s/r%d.db", scratch, round);
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


int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 7, passes = argc > 2 ? atoi(argv[2]) : 8;
  if (rounds < 1 || rounds > MAXR || passes < 2 || passes > MAXP) {
    fprintf(stderr, "usage: bench_warm [rounds (1-%d) [passes (2-%d)]]\n", MAXR, MAXP);
    return 2;
  }
  if (bn_scratch_new(scratch, sizeof scratch))
    return 1;
  if (copy_worker()) {
    bn_scratch_free(scratch);
    return 1;
  }
  static double pass[NCFG][MAXP][MAXR], wall[NCFG][MAXR], first_ratio[NCFG][MAXR];
  static double total[NCFG][MAXR], run_ratio[NCFG][MAXR];
  static double steady[MAXR], warm_ms[MAXR], loaded[MAXR], compiled[MAXR], cold_compiled[MAXR],
      cold_kept[MAXR];
  static double faults[2][MAXR], page_us[MAXR], first_unfaulted[MAXR];
  static double settle[MAXR], first[NCFG][MAXR], first_extra[MAXR], other_placed[MAXR],
      other_compiled[MAXR];
  int rc = 1, unsettled = 0, wrong = 0, short_start = 0;
  for (int r = 0; r < rounds; r++) {
    double p[MAXP];
    report_t rep[NCFG];
    /* The plain run moves around the pair (cold must precede warm). */
    for (int k = 0; k < 3; k++) {
      int cfg = (k + r) % 3 == 0 ? PLAIN : -1;
      if (cfg < 0)
        continue;
      if (run(PLAIN, r, passes, p, &wall[PLAIN][r], &rep[PLAIN]))
        goto out;
      for (int i = 0; i < passes; i++)
        pass[PLAIN][i][r] = p[i];
    }
    for (int cfg = COLD; cfg <= OTHER; cfg++) {
      if (run(cfg, r, passes, p, &wall[cfg][r], &rep[cfg]))
        goto out;
      for (int i = 0; i < passes; i++)
        pass[cfg][i][r] = p[i];
    }
    double rest[MAXP];
    for (int i = 1; i < passes; i++)
      rest[i - 1] = pass[WARM][i][r];
    steady[r] = bn_median(rest, (size_t)passes - 1);
    for (int cfg = 0; cfg < NCFG; cfg++) {
      first_ratio[cfg][r] = pass[cfg][0][r] / steady[r];
      total[cfg][r] = 0;
      for (int i = 0; i < passes; i++)
        total[cfg][r] += pass[cfg][i][r];
      run_ratio[cfg][r] = total[cfg][r] / (passes * steady[r]);
    }
    warm_ms[r] = (double)query(r, "SELECT warm_ns FROM runs WHERE id=2") / 1e6;
    loaded[r] = (double)query(r, "SELECT count(*) FROM events WHERE run_id=2 AND kind='loaded'");
    compiled[r] = (double)query(r, "SELECT count(*) FROM events WHERE run_id=2 AND kind='published'");
    cold_compiled[r] = (double)query(r, "SELECT count(*) FROM events WHERE run_id=1 AND kind='published'");
    /* what the cold run stored: its kernels but those its duels demoted after publication (one
     * demoted before publication was never published) */
    cold_kept[r] = (double)query(r, "SELECT count(*) FROM events p WHERE run_id=1 AND "
                                    "kind='published' AND NOT EXISTS (SELECT 1 FROM events d WHERE "
                                    "d.run_id=1 AND d.sig_id=p.sig_id AND d.id>p.id AND d.kind IN "
                                    "('demoted','verify-failed','crashed'))");
    other_placed[r] = (double)query(r, "SELECT count(*) FROM events WHERE run_id=3 AND "
                                       "kind='loaded'");
    other_compiled[r] = (double)query(r, "SELECT count(*) FROM events WHERE run_id=3 AND "
                                         "kind='published'");
    settle[r] = rep[COLD].settle;
    for (int cfg = 0; cfg < NCFG; cfg++)
      first[cfg][r] = rep[cfg].first;
    first_extra[r] = rep[WARM].first - rep[PLAIN].first;
    faults[0][r] = rep[PLAIN].faults, faults[1][r] = rep[WARM].faults;
    page_us[r] = (rep[PLAIN].page_us + rep[WARM].page_us) / 2;
    first_unfaulted[r] = first_extra[r] - (rep[WARM].faults - rep[PLAIN].faults) * page_us[r];
    unsettled += !rep[COLD].settled;
    short_start += compiled[r] > 0 || loaded[r] < cold_kept[r];
    for (int cfg = COLD; cfg <= OTHER; cfg++)
      if (fabs(rep[cfg].sum - rep[PLAIN].sum) > SUM_TOL * fabs(rep[PLAIN].sum)) {
        fprintf(stderr, "bench_warm: round %d: the %s run's checksum %.6g, the plain run's %.6g\n",
                r + 1, names[cfg], rep[cfg].sum, rep[PLAIN].sum);
        wrong++;
      }
  }
  printf("bench_warm: 50 small GEMM signatures, %d passes per process, %d rounds (medians)\n\n",
         passes, rounds);
  printf("%-24s", "configuration");
  for (int i = 0; i < passes; i++)
    printf("  pass %d ms", i + 1);
  printf("   run ms  process ms  1st call us  pass 1 / steady   run / steady\n");
  for (int cfg = 0; cfg < NCFG; cfg++) {
    printf("%-24s", names[cfg]);
    double m, s;
    for (int i = 0; i < passes; i++) {
      bn_stat(pass[cfg][i], (size_t)rounds, &m, &s);
      printf("  %9.1f", m);
    }
    bn_stat(total[cfg], (size_t)rounds, &m, &s);
    printf("  %7.1f", m);
    bn_stat(wall[cfg], (size_t)rounds, &m, &s);
    printf("  %10.1f", m);
    bn_stat(first[cfg], (size_t)rounds, &m, &s);
    printf("  %11.0f", m);
    bn_stat(first_ratio[cfg], (size_t)rounds, &m, &s);
    printf("  %6.3f +- %.3f", m, s);
    bn_stat(run_ratio[cfg], (size_t)rounds, &m, &s);
    printf("  %6.3f +- %.3f\n", m, s);
  }
  double sm, ss, wm, ws, fm, fs, lm, ls, cm, cs, km, ks;
  bn_stat(steady, (size_t)rounds, &sm, &ss);
  bn_stat(warm_ms, (size_t)rounds, &wm, &ws);
  bn_stat(run_ratio[WARM], (size_t)rounds, &fm, &fs);
  bn_stat(loaded, (size_t)rounds, &lm, &ls);
  bn_stat(compiled, (size_t)rounds, &cm, &cs);
  bn_stat(cold_compiled, (size_t)rounds, &km, &ks);
  double cold_extra[MAXR], speed[MAXR];
  for (int r = 0; r < rounds; r++) {
    cold_extra[r] = 0;
    for (int i = 0; i < passes; i++)
      cold_extra[r] += pass[COLD][i][r] - steady[r];
    speed[r] = pass[PLAIN][passes - 1][r] / steady[r];
  }
  double em, es, pm, ps, tm, ts;
  bn_stat(cold_extra, (size_t)rounds, &em, &es);
  bn_stat(settle, (size_t)rounds, &tm, &ts);
  bn_stat(speed, (size_t)rounds, &pm, &ps);
  printf("\nsteady state (warm run, passes 2..%d): %.1f ms per pass; OpenBLAS alone / steady: "
         "%.2fx +- %.2f\n", passes, sm, pm, ps);
  printf("warm run: %.0f kernels placed from the store, %.0f compiled; they served %.2f ms +- "
         "%.2f after the first call\n", lm, cm, wm, ws);
  printf("cold run: %.0f kernels compiled; its passes took %.1f ms +- %.1f more than %d steady "
         "passes; it settled in %.1f ms +- %.1f after them (%d of %d rounds "
         "in time)\n", km, em, es, passes, tm, ts, rounds - unsettled, rounds);
  double om, os, oc, oz, orm, ors, crm, crs;
  bn_stat(other_placed, (size_t)rounds, &om, &os);
  bn_stat(other_compiled, (size_t)rounds, &oc, &oz);
  bn_stat(run_ratio[OTHER], (size_t)rounds, &orm, &ors);
  bn_stat(run_ratio[COLD], (size_t)rounds, &crm, &crs);
  printf("another program on that database: %.0f kernels placed as their signatures got hot, "
         "%.0f compiled; run / steady %.3f +- %.3f (the cold run's %.3f +- %.3f)\n", om, oc, orm,
         ors, crm, crs);
  printf("goal: the warm run within %.0f%% of steady state: %+.1f%% -> %s\n", GOAL_PCT,
         (fm - 1) * 100, (fm - 1) * 100 <= GOAL_PCT ? "met" : "NOT met");
  double xm, xs;
  bn_stat(first_extra, (size_t)rounds, &xm, &xs);
  printf("goal: the warm start costs the first call at most %.1f ms more than plain's: %+.2f ms "
         "+- %.2f -> %s\n", GOAL_FIRST_US / 1e3, xm / 1e3, xs / 1e3,
         xm <= GOAL_FIRST_US ? "met" : "NOT met");
  double f0, f1, pu, um, us, dummy;
  bn_stat(faults[0], (size_t)rounds, &f0, &dummy);
  bn_stat(faults[1], (size_t)rounds, &f1, &dummy);
  bn_stat(page_us, (size_t)rounds, &pu, &dummy);
  bn_stat(first_unfaulted, (size_t)rounds, &um, &us);
  printf("  the first call's minor page faults (its thread): plain %.0f, warm %.0f; a fresh page's "
         "first write costs this machine %.1f us (the workers' own measure): the excess less the "
         "extra faults at that cost %+.2f ms +- %.2f\n", f0, f1, pu, um / 1e3, us / 1e3);
  if (short_start)
    fprintf(stderr, "bench_warm: %d of %d warm runs did not start from every kernel their cold "
            "run stored\n", short_start, rounds);
  rc = wrong ? 1 : 0;
out:
  bn_scratch_free(scratch);
  return rc;
}
