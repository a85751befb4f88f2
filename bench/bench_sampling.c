/* SPDX-License-Identifier: MIT */
/* bench_sampling: what the sampler costs a BLAS-bound process, side by side in one run.
 * Four configurations of the same child (bench_workload):
 *   D  no agent
 *   A  the agent with OPJIT_SAMPLE_HZ=0 (counting only)
 *   B  the agent at the default rate (OPJIT_SAMPLE_HZ unset: 199 Hz)
 *   C  the agent with OPJIT_SAMPLE_HZ=1000
 * Each round spawns the child once per configuration, the order rotating from round to round,
 * and takes its wall time (posix_spawn to wait4) and its CPU time (wait4's user + system).
 * The table holds per configuration the medians over rounds and the medians of the per-round
 * ratios to A and to D, as overhead % +- half their interquartile range. Two workloads:
 *   single  cblas_sgemm 96^3 on one thread (OPENBLAS_NUM_THREADS=1)
 *   pool    cblas_sgemm 384^3 split over OpenBLAS's pool (OPENBLAS_NUM_THREADS=2)
 * each child sized to ~0.4 s by a calibration run without the agent.
 * Every agent child writes its own OPJIT_DB in a scratch folder; afterwards the benchmark
 * reads runs.sampling from each: B and C must have recorded samples at their rate, A none.
 * It also prints the samples delivered per second of the child's CPU time.
 * OPJIT_STACK_DEPTH and OPJIT_EVENTS, when set in the benchmark's environment, are passed on
 * to the agent children (to separate the cost of the stacks from that of the signals).
 *
 *   bench_sampling [rounds [single|pool|all [seconds]]]   (default 21 all 0.4: seconds per
 *   child; longer children separate the per-process costs from the per-sample ones) */
#define _GNU_SOURCE
#include "bench.h"

#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define GOAL_PCT 2.0          /* what sampling at the default rate may add, vs counting only */
#define TARGET_S 0.4          /* each child runs about this long (wall), by default */
#define DEFAULT_HZ 199        /* the agent's default OPJIT_SAMPLE_HZ */
enum { WARMUP_ROUNDS = 1 };   /* untimed rounds of all configurations */

enum { CFG_D, CFG_A, CFG_B, CFG_C, NCFG };
static const struct {
  const char *name, *label;
  int agent;
  const char *hz_env; /* OPJIT_SAMPLE_HZ=..., or NULL (unset: the default) */
  int hz;             /* the rate the run must record */
} cfgs[NCFG] = {
    {"D", "no agent", 0, NULL, 0},
    {"A", "agent, SAMPLE_HZ=0", 1, "OPJIT_SAMPLE_HZ=0", 0},
    {"B", "agent, default rate", 1, NULL, DEFAULT_HZ},
    {"C", "agent, SAMPLE_HZ=1000", 1, "OPJIT_SAMPLE_HZ=1000", 1000},
};

typedef struct workload_s {
  const char *mode;    /* bench_workload's first argument */
  const char *threads; /* OPENBLAS_NUM_THREADS=... */
  const char *label;
  long calib_calls;    /* calls of the calibration run */
} workload_t;

static const workload_t workloads[] = {
    {"single", "OPENBLAS_NUM_THREADS=1", "cblas_sgemm 96^3 on one thread", 5000},
    {"pool", "OPENBLAS_NUM_THREADS=2", "cblas_sgemm 384^3 over OpenBLAS's pool", 100},
};
enum { NWORKLOADS = sizeof workloads / sizeof *workloads };

static char scratch[PATH_MAX];
static double target_s = TARGET_S;
static const char *pass_env[3]; /* OPJIT_STACK_DEPTH / OPJIT_EVENTS from our environment */

/* The database of one child: <scratch>/<mode>-<config>-<round>.db */
static void db_path(char *out, size_t len, const workload_t *w, int cfg, int round)
{
  snprintf(out, len, "%s/%s-%s-%d.db", scratch, w->mode, cfgs[cfg].name, round);
}

/* Runs the workload once in configuration cfg; stores its wall and CPU seconds. The child must
 * exit 0 and write nothing on stderr (the agent warns there when sampling fails). Returns 0
 * or -1 with a message. */
static int run_child(const workload_t *w, long calls, int cfg, int round, double *wall,
                     double *cpu)
{
  char preload[PATH_MAX + 16], db[PATH_MAX + 64], dbenv[PATH_MAX + 80], errpath[PATH_MAX + 16];
  char ncalls[32];
  const char *add[12];
  int k = 0;
  add[k++] = w->threads;
  if (cfgs[cfg].agent) {
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", OPJIT_AGENT_PATH);
    db_path(db, sizeof db, w, cfg, round);
    snprintf(dbenv, sizeof dbenv, "OPJIT_DB=%s", db);
    add[k++] = preload;
    add[k++] = dbenv;
    add[k++] = "OPJIT_MODE=profile"; /* sampling's cost alone: the JIT's is bench_jit's */
    if (cfgs[cfg].hz_env)
      add[k++] = cfgs[cfg].hz_env;
    for (int i = 0; pass_env[i]; i++)
      add[k++] = pass_env[i];
  }
  add[k] = NULL;
  char **env = bn_env(add);
  if (!env)
    return -1;
  snprintf(ncalls, sizeof ncalls, "%ld", calls);
  snprintf(errpath, sizeof errpath, "%s/stderr", scratch);
  char *argv[] = {OPJIT_WORKLOAD_PATH, (char *)w->mode, ncalls, NULL};
  struct rusage ru;
  uint64_t t0 = bn_now_ns();
  int st = bn_spawn_wait4(argv[0], argv, env, errpath, &ru);
  uint64_t t1 = bn_now_ns();
  bn_env_free(env);
  char what[256];
  snprintf(what, sizeof what, "%s %s in configuration %s", w->mode, ncalls, cfgs[cfg].name);
  int quiet = bn_stderr_quiet(errpath, "bench_sampling", what);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || !quiet) {
    fprintf(stderr, "bench_sampling: %s %s in configuration %s failed (wait status %d)\n",
            w->mode, ncalls, cfgs[cfg].name, st);
    return -1;
  }
  *wall = (double)(t1 - t0) / 1e9;
  *cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  return 0;
}

/* Calls per child for ~TARGET_S of wall time, from the faster of two runs without the agent. */
static long calibrate(const workload_t *w)
{
  double best = 0, wall, cpu;
  for (int i = 0; i < 2; i++) {
    if (run_child(w, w->calib_calls, CFG_D, -1, &wall, &cpu))
      return -1;
    if (i == 0 || wall < best)
      best = wall;
  }
  long calls = (long)((double)w->calib_calls * target_s / best);
  return calls > 0 ? calls : 1;
}

/* What one child's database says about sampling. */
typedef struct dbcheck_s {
  int runs;          /* rows in runs */
  int has_sampling;  /* runs.sampling is not NULL */
  long long samples, lost, hz;
  char event[32];
} dbcheck_t;

/* Reads runs.sampling of one database. Returns 0 or -1 with a message. */
static int read_db(const char *path, dbcheck_t *out)
{
  memset(out, 0, sizeof *out);
  sqlite3 *db = NULL;
  sqlite3_stmt *q = NULL;
  int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_prepare_v2(db,
                            "SELECT sampling IS NOT NULL,"
                            " coalesce(json_extract(sampling, '$.samples'), 0),"
                            " coalesce(json_extract(sampling, '$.lost'), 0),"
                            " coalesce(json_extract(sampling, '$.hz'), 0),"
                            " coalesce(json_extract(sampling, '$.event'), '')"
                            " FROM runs",
                            -1, &q, NULL);
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    if ((rc = sqlite3_step(q)) != SQLITE_ROW)
      break;
    out->runs++;
    out->has_sampling = sqlite3_column_int(q, 0);
    out->samples = sqlite3_column_int64(q, 1);
    out->lost = sqlite3_column_int64(q, 2);
    out->hz = sqlite3_column_int64(q, 3);
    snprintf(out->event, sizeof out->event, "%s", (const char *)sqlite3_column_text(q, 4));
  }
  if (rc != SQLITE_DONE)
    fprintf(stderr, "bench_sampling: cannot read runs.sampling from %s: %s\n", path,
            db ? sqlite3_errmsg(db) : "out of memory");
  sqlite3_finalize(q);
  sqlite3_close(db);
  return rc == SQLITE_DONE ? 0 : -1;
}

/* "+1.23 +-0.45" for the median of per-round ratios x[r] / y[r], as overhead %. */
static void overhead(char *out, size_t len, const double *x, const double *y, int rounds,
                     double *median_pct)
{
  double *ratio = malloc((size_t)rounds * sizeof *ratio);
  if (!ratio) {
    snprintf(out, len, "?");
    return;
  }
  for (int r = 0; r < rounds; r++)
    ratio[r] = x[r] / y[r];
  double m = (bn_median(ratio, (size_t)rounds) - 1) * 100;
  double h = bn_half_iqr(ratio, (size_t)rounds) * 100;
  snprintf(out, len, "%+6.2f +-%4.2f", m, h);
  if (median_pct)
    *median_pct = m;
  free(ratio);
}

/* Checks the databases of the measured rounds and prints one line per agent configuration.
 * Returns 0 when B and C sampled at their rate in every run and A never did. */
static int check_sampling(const workload_t *w, int rounds, double cpu[NCFG][rounds])
{
  int ok_all = 1;
  double *rate = malloc((size_t)rounds * sizeof *rate), *sm = malloc((size_t)rounds * sizeof *sm);
  if (!rate || !sm) {
    fprintf(stderr, "bench_sampling: out of memory\n");
    free(rate), free(sm);
    return -1;
  }
  printf("sampling check (runs.sampling in each agent child's OPJIT_DB):\n");
  for (int c = CFG_A; c < NCFG; c++) {
    int good = 0, nrate = 0;
    long long lost = 0;
    char event[32] = "";
    for (int r = 0; r < rounds; r++) {
      char path[PATH_MAX + 64];
      dbcheck_t d;
      db_path(path, sizeof path, w, c, r);
      if (read_db(path, &d))
        continue;
      if (cfgs[c].hz == 0) {
        good += d.runs == 1 && (!d.has_sampling || d.samples == 0);
        continue;
      }
      if (d.runs == 1 && d.has_sampling && d.samples > 0 && d.hz == cfgs[c].hz) {
        good++;
        snprintf(event, sizeof event, "%s", d.event);
        lost += d.lost;
        sm[nrate] = (double)d.samples;
        rate[nrate++] = (double)d.samples / cpu[c][r];
      }
    }
    int ok = good == rounds;
    ok_all &= ok;
    if (cfgs[c].hz == 0) {
      printf("%s  %-22s %2d/%d runs recorded, none sampled  %s\n", cfgs[c].name,
             cfgs[c].label, good, rounds, ok ? "ok" : "FAILED");
    } else if (nrate) {
      double med_samples = bn_median(sm, (size_t)nrate);
      double r = bn_median(rate, (size_t)nrate);
      printf("%s  %-22s %2d/%d runs sampled (%s, %d Hz), median %.0f samples, %.1f per CPU "
             "s (%.1f %% of the rate), lost %lld  %s\n",
             cfgs[c].name, cfgs[c].label, good, rounds, event, cfgs[c].hz, med_samples, r,
             100 * r / cfgs[c].hz, lost, ok ? "ok" : "FAILED");
    } else {
      printf("%s  %-22s %2d/%d runs sampled at %d Hz  FAILED\n", cfgs[c].name,
             cfgs[c].label, good, rounds, cfgs[c].hz);
    }
  }
  free(rate), free(sm);
  return ok_all ? 0 : -1;
}

/* Measures one workload and prints its table and checks. Returns 0, or -1 when a child failed
 * or sampling did not happen as configured. *b_pct gets B's CPU overhead vs A. */
static int run_workload(const workload_t *w, int rounds, double *b_cpu_pct, double *b_wall_pct)
{
  long calls = calibrate(w);
  if (calls < 0)
    return -1;
  double(*wall)[rounds] = calloc(NCFG, sizeof *wall), (*cpu)[rounds] = calloc(NCFG, sizeof *cpu);
  int rc = -1;
  if (!wall || !cpu) {
    fprintf(stderr, "bench_sampling: out of memory\n");
    goto out;
  }
  printf("== %s: %s, %s, %ld calls per child, %d rounds (+%d warm-up)\n", w->mode, w->label,
         w->threads, calls, rounds, WARMUP_ROUNDS);
  for (int r = -WARMUP_ROUNDS; r < rounds; r++)
    for (int i = 0; i < NCFG; i++) {
      int c = (r + WARMUP_ROUNDS + i) % NCFG; /* rotate the order: each config in each slot */
      double x, y;
      if (run_child(w, calls, c, r, &x, &y))
        goto out;
      if (r >= 0)
        wall[c][r] = x, cpu[c][r] = y;
    }
  printf("%-25s %8s %8s  %-15s %-15s %-15s %-15s\n", "configuration", "wall ms", "CPU ms",
         "wall vs A %", "CPU vs A %", "wall vs D %", "CPU vs D %");
  for (int c = 0; c < NCFG; c++) {
    double tmp[rounds];
    char wa[32] = "", ca[32] = "", wd[32] = "", cd[32] = "";
    memcpy(tmp, wall[c], sizeof tmp);
    double mw = bn_median(tmp, (size_t)rounds);
    memcpy(tmp, cpu[c], sizeof tmp);
    double mc = bn_median(tmp, (size_t)rounds);
    if (c != CFG_A && c != CFG_D) {
      overhead(wa, sizeof wa, wall[c], wall[CFG_A], rounds, c == CFG_B ? b_wall_pct : NULL);
      overhead(ca, sizeof ca, cpu[c], cpu[CFG_A], rounds, c == CFG_B ? b_cpu_pct : NULL);
    }
    if (c != CFG_D) {
      overhead(wd, sizeof wd, wall[c], wall[CFG_D], rounds, NULL);
      overhead(cd, sizeof cd, cpu[c], cpu[CFG_D], rounds, NULL);
    }
    printf("%s  %-22s %8.1f %8.1f  %-15s %-15s %-15s %-15s\n", cfgs[c].name, cfgs[c].label,
           mw * 1e3, mc * 1e3, wa, ca, wd, cd);
  }
  rc = check_sampling(w, rounds, cpu);
  printf("\n");
out:
  free(wall), free(cpu);
  return rc;
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 21;
  const char *which = argc > 2 ? argv[2] : "all";
  if (argc > 3)
    target_s = atof(argv[3]);
  if (rounds < 1 || (strcmp(which, "all") && strcmp(which, "single") && strcmp(which, "pool")) ||
      !(target_s > 0.01 && target_s < 600)) {
    fprintf(stderr, "usage: %s [rounds [single|pool|all [seconds]]]   (default 21 all %.1f)\n",
            argv[0], TARGET_S);
    return 2;
  }
  int k = 0;
  static char depth[64], events[64];
  const char *v;
  if ((v = getenv("OPJIT_STACK_DEPTH")))
    snprintf(depth, sizeof depth, "OPJIT_STACK_DEPTH=%s", v), pass_env[k++] = depth;
  if ((v = getenv("OPJIT_EVENTS")))
    snprintf(events, sizeof events, "OPJIT_EVENTS=%s", v), pass_env[k++] = events;
  if (bn_scratch_new(scratch, sizeof scratch))
    return 1;
  printf("sampling overhead: one child process per configuration and round, order rotating\n");
  printf("D = %s, A-C = LD_PRELOAD=%s with OPJIT_SAMPLE_HZ 0 / unset (%d) / 1000%s%s%s%s\n",
         OPJIT_WORKLOAD_PATH, OPJIT_AGENT_PATH, DEFAULT_HZ, k ? "; also " : "",
         k ? pass_env[0] : "", k > 1 ? " " : "", k > 1 ? pass_env[1] : "");
  printf("wall: posix_spawn to wait4; CPU: the child's user + system time (wait4)\n");
  printf("X vs A: median over rounds of X/A - 1 from the same round, +- half the IQR\n\n");
  int rc = 0;
  double b_cpu[NWORKLOADS], b_wall[NWORKLOADS];
  int done[NWORKLOADS] = {0};
  for (int i = 0; i < NWORKLOADS; i++) {
    if (strcmp(which, "all") && strcmp(which, workloads[i].mode))
      continue;
    if (run_workload(&workloads[i], rounds, &b_cpu[i], &b_wall[i])) {
      rc = 1;
      continue;
    }
    done[i] = 1;
  }
  printf("goal: <= %.0f %% at the default rate\n", GOAL_PCT);
  for (int i = 0; i < NWORKLOADS; i++)
    if (done[i])
      printf("  %-7s B vs A: CPU %+.2f %%, wall %+.2f %%  %s\n", workloads[i].mode, b_cpu[i],
             b_wall[i], b_cpu[i] <= GOAL_PCT && b_wall[i] <= GOAL_PCT ? "ok" : "over");
  bn_scratch_free(scratch);
  return rc;
}
