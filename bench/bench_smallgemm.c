/* SPDX-License-Identifier: MIT */
/* bench_smallgemm: a held-out program of 14 small GEMM shapes (bench_smallgemm_worker: sgemm
 * and dgemm mixed, 4..64, some not square, NN and a few transposed, beta 0 and 1) run plain
 * and under the agent with its default options, as a user would run it. Its iterations are
 * set once (about 0.5 s of BLAS in a plain run on OpenBLAS's own core) unless given.
 * Every round, for OpenBLAS on its best core for this CPU and on the core it picks itself
 * (one of them when they are the same; bench_jit describes the choice, and
 * BENCH_DEFAULT_CORETYPE forces the second as there), in turn first:
 *   plain, opjit's 1st run on an empty database, its 2nd and its 3rd (warm) on the same
 *   database, plain again
 * so the two plain runs bracket the agent's and a drift within the round tilts both sides
 * alike; the plain time of a round is the mean of its two. Per run: the program's own time of
 * its loop (every BLAS call it makes) and the process's (spawn to exit); from the database,
 * the run's variants (compiled in the run, placed from the store, serving calls, demoted) and
 * the share of calls they served; from `opjit top --json`, the saving opjit reports for the
 * run (jit.saving_ns). Honesty: the run's loop time plus that saving should be the plain
 * run's loop time; the gap is printed in % of the plain time.
 * Medians over the rounds, +- half the interquartile range, and the per-round ratios.
 * Goals (issue 13; printed met / MISSED, never an exit status): the 1st run compiles its hot
 * shapes and finishes faster than plain; the 3rd is not slower than plain on OpenBLAS's best
 * core; run + saving within 15 % of plain. OpenBLAS runs on one thread
 * (OPENBLAS_NUM_THREADS=1), or on BENCH_BLAS_THREADS (its pool, as a program that does not set
 * it gets one thread per CPU: the agent's threads then share the CPUs with the pool's).
 *   bench_smallgemm [rounds [iterations]]     (default 7, and calibrated) */
#define _GNU_SOURCE
#include "bench.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define GOAL_HONEST_PCT 15.0 /* |run + saving - plain| within this % of plain */
#define TARGET_MS 500.0      /* BLAS time of a plain run */
#define NSHAPES 14           /* bench_smallgemm_worker's shapes */
#define MAXR 32

enum { PLAIN, COLD, SECOND, WARM, NRUN };
static const char *const run_name[NRUN] = {"plain", "opjit 1st (empty db)", "opjit 2nd",
                                           "opjit 3rd (warm)"};
enum { BEST, DEFAULT, NCORE };

typedef struct meas_s {
  double loop_ms, wall_ms; /* the program's BLAS loop; spawn to exit */
  double cpu_ms;           /* the loop thread's CPU time during the loop */
  double proc_cpu_ms;      /* the process's CPU time, every thread (the agent's too) */
  double saving_ms;        /* opjit top --json: jit.saving_ns of the run */
  int compiled, placed, serving, demoted; /* the run's variants */
  double vshare;           /* share of the run's calls its variants served */
} meas_t;

static char scratch[PATH_MAX];
static char coretype[NCORE][BN_CORE_LEN], core[NCORE][BN_CORE_LEN], note[256];
static int ncore = NCORE;
static meas_t meas[NCORE][NRUN][MAXR]; /* PLAIN: the mean of the round's two plain runs */
static long iters[NCORE], calls[NCORE]; /* per run, per core */
static const char *blas_threads; /* bn_blas_threads */

/* One integer (or real) from the newest run of db. */
static double query(sqlite3 *h, const char *sql, sqlite3_int64 run)
{
  sqlite3_stmt *st;
  double v = -1;
  if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, run);
    if (sqlite3_step(st) == SQLITE_ROW)
      v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
  }
  return v;
}

/* Fills m's variant figures from the newest run in db and its saving from `opjit top --json`.
 * Returns 0 or -1 with a message. */
static int read_run(const char *db, meas_t *m)
{
  sqlite3 *h = NULL;
  if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
    fprintf(stderr, "bench_smallgemm: cannot open %s: %s\n", db, h ? sqlite3_errmsg(h) : "?");
    sqlite3_close(h);
    return -1;
  }
  sqlite3_busy_timeout(h, 2000);
  sqlite3_int64 run = (sqlite3_int64)query(h, "SELECT max(id) FROM runs WHERE ?1 = ?1", 0);
  m->compiled = (int)query(h, "SELECT count(*) FROM variants WHERE run_id = ?1 AND origin = "
                              "'compiled' AND status IN ('ready', 'demoted')", run);
  m->placed = (int)query(h, "SELECT count(*) FROM variants WHERE run_id = ?1 AND origin <> "
                            "'compiled'", run); /* placed from the store */
  m->serving = (int)query(h, "SELECT count(*) FROM variants WHERE run_id = ?1 AND status = "
                             "'ready' AND calls > 0", run);
  m->demoted = (int)query(h, "SELECT count(*) FROM variants WHERE run_id = ?1 AND status = "
                             "'demoted'", run);
  double vcalls = query(h, "SELECT coalesce(sum(calls), 0) FROM variants WHERE run_id = ?1", run);
  double calls = query(h, "SELECT coalesce(sum(calls), 0) FROM run_sigs WHERE run_id = ?1", run);
  m->vshare = calls > 0 ? vcalls / calls : 0;
  sqlite3_close(h);

  char out[PATH_MAX + 32], err[PATH_MAX + 32], runs[32];
  snprintf(out, sizeof out, "%s/top.json", scratch);
  snprintf(err, sizeof err, "%s/top.err", scratch);
  snprintf(runs, sizeof runs, "%lld", (long long)run);
  char *argv[] = {OPJIT_CLI_PATH, "top", "--db", (char *)db, "--json", runs, NULL};
  char **env = bn_env(NULL);
  int st = env ? bn_spawn_wait_out(argv[0], argv, env, out, err) : -1;
  bn_env_free(env);
  bn_stderr_quiet(err, "bench_smallgemm", "opjit top");
  FILE *f = fopen(out, "r");
  char *text = NULL;
  size_t len = 0;
  if (f) {
    fseek(f, 0, SEEK_END);
    len = (size_t)ftell(f);
    rewind(f);
    text = calloc(len + 1, 1);
    if (text && fread(text, 1, len, f) != len)
      text[0] = 0;
    fclose(f);
  }
  cJSON *doc = text ? cJSON_Parse(text) : NULL;
  free(text);
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || !doc) {
    fprintf(stderr, "bench_smallgemm: opjit top --json failed on %s (status %d)\n", db, st);
    cJSON_Delete(doc);
    return -1;
  }
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "jit"),
                                                    "saving_ns");
  m->saving_ms = cJSON_IsNumber(s) ? s->valuedouble / 1e6 : 0; /* no "jit": no variant */
  cJSON_Delete(doc);
  return 0;
}

/* Runs the program once: plain (db NULL) or under the agent on db, on core c. Fills m.
 * Returns 0 or -1 with a message. */
static int run_once(int c, const char *db, long n, meas_t *m)
{
  char out[PATH_MAX + 32], err[PATH_MAX + 32], it[32], ct[64], dbenv[PATH_MAX + 48];
  snprintf(out, sizeof out, "%s/out", scratch);
  snprintf(err, sizeof err, "%s/err", scratch);
  snprintf(it, sizeof it, "%ld", n);
  snprintf(ct, sizeof ct, "OPENBLAS_CORETYPE=%s", coretype[c]);
  snprintf(dbenv, sizeof dbenv, "OPJIT_DB=%s", db ? db : "");
  const char *add[5];
  int na = 0;
  add[na++] = blas_threads;
  if (db) {
    add[na++] = "LD_PRELOAD=" OPJIT_AGENT_PATH;
    add[na++] = dbenv;
  }
  if (coretype[c][0])
    add[na++] = ct;
  add[na] = NULL;
  char *argv[] = {OPJIT_SMALLGEMM_WORKER_PATH, it, NULL};
  char **env = bn_env(add);
  struct rusage ru = {0};
  uint64_t t0 = bn_now_ns();
  int st = env ? bn_spawn_wait4_out(argv[0], argv, env, out, err, &ru) : -1;
  *m = (meas_t){.wall_ms = (double)(bn_now_ns() - t0) / 1e6, .loop_ms = -1,
                .proc_cpu_ms = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                               (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3};
  bn_env_free(env);
  bn_stderr_quiet(err, "bench_smallgemm", db ? "the program under the agent" : "the program");
  FILE *f = fopen(out, "r");
  char line[128];
  while (f && fgets(line, sizeof line, f)) {
    sscanf(line, "loop_ms %lf", &m->loop_ms);
    sscanf(line, "loop_cpu_ms %lf", &m->cpu_ms);
    sscanf(line, "calls %ld", &calls[c]);
  }
  if (f)
    fclose(f);
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || m->loop_ms < 0) {
    fprintf(stderr, "bench_smallgemm: the program failed (status %d)\n", st);
    return -1;
  }
  return db ? read_run(db, m) : 0;
}


/* The loop's wall time of m, or its thread's CPU time when cpu. */
static double loop_of(const meas_t *m, int cpu) { return cpu ? m->cpu_ms : m->loop_ms; }

/* Per round: plain / run for run kind k on core c (> 1: opjit faster), by the loop's wall
 * time or its CPU time. */
static void speedups(int c, int k, int rounds, int cpu, double *out)
{
  for (int r = 0; r < rounds; r++)
    out[r] = loop_of(&meas[c][PLAIN][r], cpu) / loop_of(&meas[c][k][r], cpu);
}

/* Per round: (run + saving - plain) / plain in %. */
static void gaps(int c, int k, int rounds, int cpu, double *out)
{
  for (int r = 0; r < rounds; r++)
    out[r] = 100 * (loop_of(&meas[c][k][r], cpu) + meas[c][k][r].saving_ms -
                    loop_of(&meas[c][PLAIN][r], cpu)) / loop_of(&meas[c][PLAIN][r], cpu);
}

/* Sets the cores: OpenBLAS's best for this CPU and its own choice (or
 * BENCH_DEFAULT_CORETYPE's, as bench_jit). */
static void pick_cores(void)
{
  char *probe[] = {OPJIT_SMALLGEMM_WORKER_PATH, "0", NULL};
  ncore = bn_openblas_cores(scratch, probe, coretype, core, note, sizeof note);
}

static const char *forced_note(void)
{
  return coretype[DEFAULT][0] ? " (forced: BENCH_DEFAULT_CORETYPE)" : "";
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 7;
  long given = argc > 2 ? atol(argv[2]) : 0;
  if (rounds < 1 || rounds > MAXR || given < 0) {
    fprintf(stderr, "usage: bench_smallgemm [rounds (1-%d) [iterations]]\n", MAXR);
    return 2;
  }
  unsetenv("OPENBLAS_CORETYPE"); /* each run sets its own */
  if (bn_scratch_new(scratch, sizeof scratch))
    return 1;
  int rc = 1;
  blas_threads = bn_blas_threads();
  pick_cores();
  for (int c = 0; c < ncore; c++) { /* ~TARGET_MS of BLAS plain: the fastest of two tries */
    meas_t m;
    double best = INFINITY;
    for (int i = 0; i < 2 && !given; i++) {
      if (run_once(c, NULL, 2000, &m))
        goto out;
      best = fmin(best, m.loop_ms);
    }
    iters[c] = given ? given : (long)(2000 * TARGET_MS / best);
  }
  char cpu[256];
  bn_cpu_name(cpu, sizeof cpu);
  printf("bench_smallgemm: %d small GEMM shapes (sgemm/dgemm mixed, 4..64, NN and transposed, "
         "beta 0/1); %d rounds, one calling thread, %s, on %s\n", NSHAPES, rounds, blas_threads,
         cpu);
  printf("OpenBLAS best core: %s (%s%s%s%s); its own choice: %s%s%s\n", core[BEST],
         coretype[BEST][0] ? "OPENBLAS_CORETYPE=" : "no candidate known: its own choice",
         coretype[BEST], note[0] ? "; " : "", note, core[DEFAULT],
         forced_note(), ncore == 1 ? " (the same: one set of runs)" : "");
  printf("agent: default options (sampling on, OPJIT_HOT_PAYBACK as shipped), a scratch "
         "database per round and core; run order per core: plain, 1st, 2nd, 3rd, plain\n");
  fflush(stdout);

  for (int r = 0; r < rounds; r++) {
    for (int j = 0; j < ncore; j++) {
      int c = (j + r) % ncore;
      char db[PATH_MAX + 32];
      snprintf(db, sizeof db, "%s/c%d-r%d.db", scratch, c, r);
      meas_t before, after;
      if (run_once(c, NULL, iters[c], &before))
        goto out;
      for (int k = COLD; k <= WARM; k++)
        if (run_once(c, db, iters[c], &meas[c][k][r]))
          goto out;
      if (run_once(c, NULL, iters[c], &after))
        goto out;
      meas[c][PLAIN][r] = before;
      meas[c][PLAIN][r].loop_ms = (before.loop_ms + after.loop_ms) / 2;
      meas[c][PLAIN][r].wall_ms = (before.wall_ms + after.wall_ms) / 2;
      meas[c][PLAIN][r].cpu_ms = (before.cpu_ms + after.cpu_ms) / 2;
      meas[c][PLAIN][r].proc_cpu_ms = (before.proc_cpu_ms + after.proc_cpu_ms) / 2;
    }
    fprintf(stderr, "bench_smallgemm: round %d of %d done\n", r + 1, rounds);
  }

  printf("\n");
  for (int c = 0; c < ncore; c++)
    printf("%s: %ld iterations, %ld calls per run\n", core[c], iters[c], calls[c]);
  printf("loop ms: the program's own (wall) time of its BLAS loop; CPU ms: its thread's CPU time "
         "meanwhile (without what other processes took from it, and without the agent's "
         "threads); process CPU ms: every thread's, from spawn to exit; plain/run: median of "
         "per-round ratios (> 1: opjit faster) by wall, and by CPU; run+saving: (loop + the "
         "saving opjit reports - plain loop) / plain loop, by wall, and by CPU\n\n");
  printf("%-10s %-22s %8s %8s %9s %12s %7s %8s %6s %7s %7s %6s %9s %12s %7s\n", "core", "run",
         "loop ms", "CPU ms", "proc CPU", "plain/run", "(CPU)", "compiled", "placed", "serving",
         "demoted", "JIT %", "saving ms", "run+saving", "(CPU)");
  double v[MAXR], med, spr;
  for (int c = 0; c < ncore; c++)
    for (int k = PLAIN; k < NRUN; k++) {
      double col[8][MAXR];
      for (int r = 0; r < rounds; r++) {
        const meas_t *m = &meas[c][k][r];
        double row[8] = {m->loop_ms, m->cpu_ms,    m->proc_cpu_ms, m->compiled,
                         m->placed,  m->serving,   m->demoted,     100 * m->vshare};
        for (int i = 0; i < 8; i++)
          col[i][r] = row[i];
      }
      printf("%-10s %-22s %8.1f %8.1f %9.1f", core[c], run_name[k], bn_median(col[0], (size_t)rounds),
             bn_median(col[1], (size_t)rounds), bn_median(col[2], (size_t)rounds));
      if (k == PLAIN) {
        printf("\n");
        continue;
      }
      speedups(c, k, rounds, 0, v);
      bn_stat(v, (size_t)rounds, &med, &spr);
      printf(" %6.3f±%.3f", med, spr);
      speedups(c, k, rounds, 1, v);
      printf(" %7.3f", bn_median(v, (size_t)rounds));
      printf(" %8.0f %6.0f %7.0f %7.0f %6.1f", bn_median(col[3], (size_t)rounds),
             bn_median(col[4], (size_t)rounds), bn_median(col[5], (size_t)rounds),
             bn_median(col[6], (size_t)rounds), bn_median(col[7], (size_t)rounds));
      for (int r = 0; r < rounds; r++)
        v[r] = meas[c][k][r].saving_ms;
      printf(" %9.1f", bn_median(v, (size_t)rounds));
      gaps(c, k, rounds, 0, v);
      bn_stat(v, (size_t)rounds, &med, &spr);
      printf(" %+6.1f%%±%.1f", med, spr);
      gaps(c, k, rounds, 1, v);
      printf(" %+6.1f%%\n", bn_median(v, (size_t)rounds));
    }
  printf("\nper round (in run order):\n");
  for (int c = 0; c < ncore; c++)
    for (int k = PLAIN; k < NRUN; k++) {
      printf("  %-10s %-22s loop ms", core[c], run_name[k]);
      for (int r = 0; r < rounds; r++)
        printf(" %.1f", meas[c][k][r].loop_ms);
      printf("   CPU ms");
      for (int r = 0; r < rounds; r++)
        printf(" %.1f", meas[c][k][r].cpu_ms);
      if (k != PLAIN) {
        speedups(c, k, rounds, 0, v);
        printf("   plain/run");
        for (int r = 0; r < rounds; r++)
          printf(" %.3f", v[r]);
        printf("   saving ms");
        for (int r = 0; r < rounds; r++)
          printf(" %.1f", meas[c][k][r].saving_ms);
        gaps(c, k, rounds, 0, v);
        printf("   run+saving");
        for (int r = 0; r < rounds; r++)
          printf(" %+.1f%%", v[r]);
      }
      printf("\n");
    }

  printf("\ngoals (issue 13; by the loop's wall time, its CPU time in parentheses)\n");
  for (int c = 0; c < ncore; c++) {
    double cm[MAXR], medc;
    for (int r = 0; r < rounds; r++)
      cm[r] = meas[c][COLD][r].compiled;
    double compiled = bn_median(cm, (size_t)rounds);
    speedups(c, COLD, rounds, 1, v);
    medc = bn_median(v, (size_t)rounds);
    speedups(c, COLD, rounds, 0, v);
    med = bn_median(v, (size_t)rounds);
    printf("  %s: 1st run on an empty database compiled %.0f of its %d shapes, plain/run %.3f "
           "(%.3f): %s\n", core[c], compiled, NSHAPES, med, medc,
           compiled > 0 && med > 1 ? "met" : "MISSED");
    if (c == BEST) {
      speedups(c, WARM, rounds, 1, v);
      medc = bn_median(v, (size_t)rounds);
      speedups(c, WARM, rounds, 0, v);
      med = bn_median(v, (size_t)rounds);
      printf("  %s (OpenBLAS's best core): 3rd run (warm) not slower than plain: plain/run %.3f "
             "(%.3f): %s\n", core[c], med, medc, med >= 1 ? "met" : "MISSED");
    }
    for (int k = COLD; k < NRUN; k++) {
      gaps(c, k, rounds, 1, v);
      medc = bn_median(v, (size_t)rounds);
      gaps(c, k, rounds, 0, v);
      med = bn_median(v, (size_t)rounds);
      printf("  %s %s: run + reported saving vs plain %+.1f%% (%+.1f%%)  goal within %.0f%%: %s\n",
             core[c], run_name[k], med, medc, GOAL_HONEST_PCT,
             fabs(med) <= GOAL_HONEST_PCT ? "met" : "MISSED");
    }
  }
  rc = 0;
out:
  bn_scratch_free(scratch);
  return rc;
}
