/* SPDX-License-Identifier: MIT */
/* bench_split: long GEMMs and large GEMVs on a library that runs threads of its own (OpenBLAS,
 * OPENBLAS_NUM_THREADS = the CPUs this process may use), plain and under the agent with its
 * default options, its kernels split between the cores (agent/par.h) or on one core
 * (OPJIT_KERNEL_THREADS=1: the agent before the split), as a user runs a program: each case is
 * a program of its own (bench_split_worker: one product in a loop, about 0.3-0.5 s plain on
 * OpenBLAS's own Zen core on two threads; longer on slower cores).
 * On OpenBLAS's best core for this CPU and on the core it picks itself (one of them when they
 * are the same; BENCH_DEFAULT_CORETYPE forces the second, as bench_jit describes), per case and
 * round, for k = 1, 2, 3: plain, the split agent's run k, the one-core agent's run k (runs 1-3 on
 * one database each, empty before run 1): every agent run has a plain run beside it, and a
 * drift within the round weighs on both. Per cell: the median over the rounds of plain / run
 * (> 1: opjit faster) +- half the interquartile range; the plain column is the median of its
 * loop's wall time.
 *   bench_split [rounds]     (default 5) */
#define _GNU_SOURCE
#include "bench.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 32

typedef struct case_s {
  const char *op, *dt;
  int n;
  long iters;
} case_t;

static const case_t cases[] = {{"gemm", "s", 1024, 40},
                               {"gemv", "s", 1024, 4000},
                               {"gemv", "s", 2048, 1000},
                               {"gemv", "d", 1024, 3000}};
enum { NCASE = sizeof cases / sizeof *cases };
enum { BEST, DEFAULT, NCORE };
enum { SPLIT, ONE, NAGENT };
static const char *const agent_opt[NAGENT] = {"OPJIT_KERNEL_THREADS=0", "OPJIT_KERNEL_THREADS=1"};

static char scratch[PATH_MAX];
static char coretype[NCORE][BN_CORE_LEN], core[NCORE][BN_CORE_LEN], note[256], threads[48];
static int ncore = NCORE;
/* [core][case][round][k]: plain, split, one-core loop ms of run k */
static double plain_ms[NCORE][NCASE][MAXR][3], agent_ms[NCORE][NCASE][MAXR][3][NAGENT];

/* Runs case cs once on core c: plain (db NULL) or under the agent on db with opt; its loop's
 * wall time into *ms. Returns 0 or -1 with a message. */
static int run_once(int c, const case_t *cs, const char *db, const char *opt, double *ms)
{
  char n[16], it[32], ct[64], dbenv[PATH_MAX + 48];
  snprintf(n, sizeof n, "%d", cs->n);
  snprintf(it, sizeof it, "%ld", cs->iters);
  snprintf(ct, sizeof ct, "OPENBLAS_CORETYPE=%s", coretype[c]);
  snprintf(dbenv, sizeof dbenv, "OPJIT_DB=%s", db ? db : "");
  const char *add[6];
  int na = 0;
  add[na++] = threads;
  if (db) {
    add[na++] = "LD_PRELOAD=" OPJIT_AGENT_PATH;
    add[na++] = dbenv;
    add[na++] = opt;
  }
  if (coretype[c][0])
    add[na++] = ct;
  add[na] = NULL;
  char *argv[] = {OPJIT_SPLIT_WORKER_PATH, (char *)cs->op, (char *)cs->dt, n, it, NULL};
  int st = bn_run_loop_ms(scratch, argv, add, "bench_split",
                          db ? "the program under the agent" : "the program", ms);
  if (st) {
    fprintf(stderr, "bench_split: %s %s %d failed (status %d)\n", cs->op, cs->dt, cs->n, st);
    return -1;
  }
  return 0;
}

/* Sets the cores: OpenBLAS's best for this CPU and its own choice (or BENCH_DEFAULT_CORETYPE's). */
static void pick_cores(void)
{
  char *probe[] = {OPJIT_SPLIT_WORKER_PATH, "gemv", "s", "1", "0", NULL};
  ncore = bn_openblas_cores(scratch, probe, coretype, core, note, sizeof note);
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  if (argc > 2 || rounds < 1 || rounds > MAXR) {
    fprintf(stderr, "usage: bench_split [rounds (1-%d)]\n", MAXR);
    return 2;
  }
  cpu_set_t set;
  int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  if (cpus < 2) {
    printf("bench_split: one CPU: the library runs no threads and the agent splits nothing\n");
    return 0;
  }
  snprintf(threads, sizeof threads, "OPENBLAS_NUM_THREADS=%d", cpus);
  unsetenv("OPENBLAS_CORETYPE"); /* each run sets its own */
  if (bn_scratch_new(scratch, sizeof scratch))
    return 1;
  int rc = 1;
  pick_cores();
  char cpu[256];
  bn_cpu_name(cpu, sizeof cpu);
  printf("bench_split: long GEMMs and large GEMVs on the library's %d threads (%s), plain and "
         "under the agent (default options; split = OPJIT_KERNEL_THREADS=0, one core = 1), "
         "%d rounds, on %s\n", cpus, threads, rounds, cpu);
  printf("OpenBLAS best core: %s (%s%s%s%s)", core[BEST],
         coretype[BEST][0] ? "OPENBLAS_CORETYPE=" : "its own choice", coretype[BEST],
         note[0] ? "; " : "", note);
  if (ncore > 1)
    printf("; its own choice: %s%s", core[DEFAULT],
           coretype[DEFAULT][0] ? " (forced: BENCH_DEFAULT_CORETYPE)" : "");
  printf("\n");
  fflush(stdout);

  for (int r = 0; r < rounds; r++) {
    for (int c = 0; c < ncore; c++)
      for (int i = 0; i < NCASE; i++) {
        char db[NAGENT][PATH_MAX + 32]; /* a new one per core, case, round and agent */
        for (int a = 0; a < NAGENT; a++)
          snprintf(db[a], sizeof db[a], "%s/c%d-i%d-r%d-a%d.db", scratch, c, i, r, a);
        for (int k = 0; k < 3; k++) {
          if (run_once(c, &cases[i], NULL, NULL, &plain_ms[c][i][r][k]))
            goto out;
          for (int a = 0; a < NAGENT; a++)
            if (run_once(c, &cases[i], db[a], agent_opt[a], &agent_ms[c][i][r][k][a]))
              goto out;
        }
      }
    fprintf(stderr, "bench_split: round %d of %d done\n", r + 1, rounds);
  }

  printf("\nplain ms: the loop's wall time plain (median of every plain run); run k: plain / "
         "opjit's run k of one database, per round beside its plain run, median +- half IQR "
         "(> 1: opjit faster)\n\n");
  printf("%-10s %-14s %9s   %-12s %-12s   %-12s %-12s   %-12s %-12s\n", "core", "program",
         "plain ms", "run 1 split", "one core", "run 2 split", "one core", "run 3 split",
         "one core");
  for (int c = 0; c < ncore; c++)
    for (int i = 0; i < NCASE; i++) {
      double v[MAXR * 3], med, spr;
      size_t nv = 0;
      for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 3; k++)
          v[nv++] = plain_ms[c][i][r][k];
      char prog[32];
      snprintf(prog, sizeof prog, "%ld x %s%s %d", cases[i].iters, cases[i].dt, cases[i].op,
               cases[i].n);
      printf("%-10s %-14s %9.1f", core[c], prog, bn_median(v, nv));
      for (int k = 0; k < 3; k++) {
        printf("  ");
        for (int a = 0; a < NAGENT; a++) {
          for (int r = 0; r < rounds; r++)
            v[r] = plain_ms[c][i][r][k] / agent_ms[c][i][r][k][a];
          bn_stat(v, (size_t)rounds, &med, &spr);
          char cell[24];
          snprintf(cell, sizeof cell, "%.2f±%.2f", med, spr);
          printf(" %-12s", cell);
        }
      }
      printf("\n");
    }
  rc = 0;
out:
  bn_scratch_free(scratch);
  return rc;
}
