/* SPDX-License-Identifier: MIT */
/* bench_threads: small products called from several host threads at once (bench_threads_worker:
 * T threads, each its own operands at its own offset into a line, one shape, ~0.15 s plain;
 * OPENBLAS_NUM_THREADS=1, OpenBLAS on its best core for this CPU), plain and under the agent with
 * its default options, as a user runs such a program (an OpenMP loop, a pool of workers): one
 * thread, and as many as the process has CPUs. Per case and round: plain, then per agent (this
 * build's, and BENCH_AGENT's: another build's libopjit.so, its modules beside it, for a change's
 * before and after in one run) a run in profile mode (one database per case and agent across the
 * rounds) and runs 1-3 in jit mode on one database (empty before run 1), then plain again; the
 * round's plain time is the mean of its two. Per cell: the median over the rounds of plain / run
 * (> 1: opjit faster) +- half the interquartile range; after run 3, the share of its calls the
 * variants served and the variants demoted in it (medians).
 *   bench_threads [rounds]     (default 7) */
#define _GNU_SOURCE
#include "bench.h"

#include <limits.h>
#include <sched.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 32

typedef struct case_s {
  const char *dt;
  int n;
  long iters;
} case_t;

static const case_t shapes[] = {{"d", 16, 1200000}, {"s", 32, 400000}};
enum { NSHAPE = sizeof shapes / sizeof *shapes, NT = 2, NAG = 2 };
enum { PROFILE, RUN1, RUN2, RUN3, NRUN };
static const char *const run_name[NRUN] = {"profile", "run 1", "run 2", "run 3"};

static char scratch[PATH_MAX], coretype[BN_CORE_LEN], core[BN_CORE_LEN], note[256];
static const char *agents[NAG];
static int nag = 1, nthreads[NT];
/* [threads][shape][round]: plain loop ms (the mean of two), each agent's runs', and run 3's
 * variant share and demotions */
static double plain_ms[NT][NSHAPE][MAXR], agent_ms[NT][NSHAPE][MAXR][NAG][NRUN];
static double share[NT][NSHAPE][MAXR][NAG], demoted[NT][NSHAPE][MAXR][NAG];

/* Runs the worker once: plain (agent NULL) or under agent on db in mode; its loop's wall time
 * into *ms. Returns 0 or -1 with a message. */
static int run_once(int threads, const case_t *cs, const char *agent, const char *db,
                    const char *mode, double *ms)
{
  char t[16], n[16], it[32], ct[64], pre[PATH_MAX + 16], dbenv[PATH_MAX + 16];
  snprintf(t, sizeof t, "%d", threads);
  snprintf(n, sizeof n, "%d", cs->n);
  snprintf(it, sizeof it, "%ld", cs->iters);
  snprintf(ct, sizeof ct, "OPENBLAS_CORETYPE=%s", coretype);
  snprintf(pre, sizeof pre, "LD_PRELOAD=%s", agent ? agent : "");
  snprintf(dbenv, sizeof dbenv, "OPJIT_DB=%s", db ? db : "");
  const char *add[6];
  int na = 0;
  add[na++] = "OPENBLAS_NUM_THREADS=1";
  if (coretype[0])
    add[na++] = ct;
  if (agent)
    add[na++] = pre, add[na++] = dbenv, add[na++] = mode;
  add[na] = NULL;
  char *argv[] = {OPJIT_THREADS_WORKER_PATH, t, (char *)cs->dt, n, it, NULL};
  int st = bn_run_loop_ms(scratch, argv, add, "bench_threads",
                          agent ? "the program under the agent" : "the program", ms);
  if (st) {
    fprintf(stderr, "bench_threads: %d threads, %sgemm %d failed (status %d)\n", threads,
            cs->dt, cs->n, st);
    return -1;
  }
  return 0;
}

/* The newest run of db: the share of its calls the variants served, and its demoted variants. */
static void read_run(const char *db, double *vshare, double *ndemoted)
{
  sqlite3 *h = NULL;
  *vshare = *ndemoted = -1;
  if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
    sqlite3_close(h);
    return;
  }
  sqlite3_busy_timeout(h, 2000);
  sqlite3_stmt *st;
  const char *sql = "SELECT (SELECT coalesce(sum(calls), 0) FROM variants WHERE run_id = r.id),"
                    " (SELECT coalesce(sum(calls), 0) FROM run_sigs WHERE run_id = r.id),"
                    " (SELECT count(*) FROM variants WHERE run_id = r.id AND status = 'demoted')"
                    " FROM runs r ORDER BY r.id DESC LIMIT 1";
  if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_double(st, 1) > 0) {
      *vshare = sqlite3_column_double(st, 0) / sqlite3_column_double(st, 1);
      *ndemoted = sqlite3_column_double(st, 2);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(h);
}

/* One round of case (ti, si): plain, every agent's runs, plain. Returns 0 or -1. */
static int round_of(int ti, int si, int r)
{
  const case_t *cs = &shapes[si];
  double before, after;
  if (run_once(nthreads[ti], cs, NULL, NULL, NULL, &before))
    return -1;
  for (int a = 0; a < nag; a++) {
    char prof[PATH_MAX + 48], jit[PATH_MAX + 48];
    snprintf(prof, sizeof prof, "%s/t%d-s%d-a%d-profile.db", scratch, ti, si, a);
    snprintf(jit, sizeof jit, "%s/t%d-s%d-a%d-r%d.db", scratch, ti, si, a, r);
    for (int k = 0; k < NRUN; k++)
      if (run_once(nthreads[ti], cs, agents[a], k == PROFILE ? prof : jit,
                   k == PROFILE ? "OPJIT_MODE=profile" : "OPJIT_MODE=jit",
                   &agent_ms[ti][si][r][a][k]))
        return -1;
    read_run(jit, &share[ti][si][r][a], &demoted[ti][si][r][a]);
  }
  if (run_once(nthreads[ti], cs, NULL, NULL, NULL, &after))
    return -1;
  plain_ms[ti][si][r] = (before + after) / 2;
  return 0;
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 7;
  if (argc > 2 || rounds < 1 || rounds > MAXR) {
    fprintf(stderr, "usage: bench_threads [rounds (1-%d)]\n", MAXR);
    return 2;
  }
  cpu_set_t set;
  int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  nthreads[0] = 1, nthreads[1] = cpus < 2 ? 2 : cpus > 64 ? 64 : cpus; /* the worker's most */
  agents[0] = OPJIT_AGENT_PATH;
  if (getenv("BENCH_AGENT") && *getenv("BENCH_AGENT"))
    agents[nag++] = getenv("BENCH_AGENT");
  unsetenv("OPENBLAS_CORETYPE"); /* each run sets its own */
  if (bn_scratch_new(scratch, sizeof scratch))
    return 1;
  char *probe[] = {OPJIT_THREADS_WORKER_PATH, "1", "s", "1", "0", NULL};
  bn_openblas_best(scratch, probe, coretype, sizeof coretype, core, sizeof core, note,
                   sizeof note);
  char cpu[256];
  bn_cpu_name(cpu, sizeof cpu);
  printf("bench_threads: 1 and %d host threads calling one small product each (own operands, "
         "16 (t mod 4) bytes into a line), plain and under the agent (default options), %d "
         "rounds, on %s (%d CPUs); OpenBLAS on %s (%s%s%s%s), OPENBLAS_NUM_THREADS=1\n",
         nthreads[1], rounds, cpu, cpus, core,
         coretype[0] ? "OPENBLAS_CORETYPE=" : "its own choice", coretype, note[0] ? "; " : "",
         note);
  for (int a = 0; a < nag; a++)
    printf("agent %c = %s\n", 'A' + a, agents[a]);
  fflush(stdout);
  int rc = 1;
  for (int r = 0; r < rounds; r++) {
    for (int ti = 0; ti < NT; ti++)
      for (int si = 0; si < NSHAPE; si++)
        if (round_of(ti, si, r))
          goto out;
    fprintf(stderr, "bench_threads: round %d of %d done\n", r + 1, rounds);
  }
  printf("\nplain ms: the loop's wall time plain (median); then plain / run per agent, median "
         "+- half IQR over the rounds (> 1: opjit faster); served: the share of run 3's calls "
         "its variants served, demoted: variants demoted in run 3 (medians)\n\n");
  printf("%-8s %-9s %9s", "threads", "product", "plain ms");
  for (int a = 0; a < nag; a++) {
    for (int k = 0; k < NRUN; k++) {
      char head[24];
      snprintf(head, sizeof head, "%c %s", 'A' + a, run_name[k]);
      printf("  %-11s", head);
    }
    printf("  %-7s %-7s", "served", "demoted");
  }
  printf("\n");
  for (int ti = 0; ti < NT; ti++)
    for (int si = 0; si < NSHAPE; si++) {
      double v[MAXR], med, spr;
      char prod[24];
      snprintf(prod, sizeof prod, "%sgemm %d", shapes[si].dt, shapes[si].n);
      memcpy(v, plain_ms[ti][si], sizeof v[0] * (size_t)rounds);
      printf("%-8d %-9s %9.1f", nthreads[ti], prod, bn_median(v, (size_t)rounds));
      for (int a = 0; a < nag; a++) {
        for (int k = 0; k < NRUN; k++) {
          for (int r = 0; r < rounds; r++)
            v[r] = plain_ms[ti][si][r] / agent_ms[ti][si][r][a][k];
          bn_stat(v, (size_t)rounds, &med, &spr);
          char cell[24];
          snprintf(cell, sizeof cell, "%.2f±%.2f", med, spr);
          printf("  %-11s", cell);
        }
        for (int r = 0; r < rounds; r++)
          v[r] = share[ti][si][r][a];
        double s = bn_median(v, (size_t)rounds);
        for (int r = 0; r < rounds; r++)
          v[r] = demoted[ti][si][r][a];
        printf("  %5.1f%%  %-7.0f", 100 * s, bn_median(v, (size_t)rounds));
      }
      printf("\n");
    }
  rc = 0;
out:
  bn_scratch_free(scratch);
  return rc;
}
