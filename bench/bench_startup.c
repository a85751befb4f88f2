/* SPDX-License-Identifier: MIT */
/* bench_startup: what the agent adds to the start-up of a process that calls no operator.
 * Each round spawns the command once without the agent and once under
 * LD_PRELOAD=libopjit.so (order alternating) and times each spawn from posix_spawn to
 * waitpid; the table holds the medians over rounds. Afterwards it checks that the agent left
 * no trace: its OPJIT_DB (in a scratch folder) must not exist.
 * Then what a short program that calls operators pays (bench_workload: SHORT_CALLS sgemm
 * 96x96x96 on one thread, ~50 ms): plain, and under the agent in profile and jit modes, on an
 * empty database (cold: deleted before each run) and on its own earlier runs' (warm); each
 * round runs every configuration once, in an order that alternates. Per configuration the
 * medians of the per-round differences to the plain run: the whole process, up to main (the
 * preload), from main to the first call's return (activation, the warm start's wait) and from
 * leaving main to waitpid (the exit: the final write, naming the samples' PCs). A second
 * agent (another build's libopjit.so, its store module beside it) gets the same rows in the
 * same rounds: a change's before and after side by side.
 *
 *   bench_startup [rounds [baseline-libopjit.so]]
 *       (default 201 for /bin/true; a fifth, at least 11, for python3; a tenth, at least 11,
 *        for the short program) */
#define _GNU_SOURCE
#include "bench.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define GOAL_US 1000.0         /* what the agent may add to a process's start-up */
enum { WARMUP_ROUNDS = 2 };    /* untimed rounds: they warm the page cache */
enum { SHORT_CALLS = 500 };    /* the short program's calls */
enum { WARM_RUNS = 3 };        /* runs that fill a warm configuration's database, untimed */

typedef struct cmd_s {
  const char *label;
  char *const *argv; /* argv[0] is the executable's path */
  int rounds;
} cmd_t;

/* µs from spawn to exit of one run; negative when the command failed. */
static double spawn_us(const cmd_t *c, char **env)
{
  uint64_t t0 = bn_now_ns();
  int st = bn_spawn_wait(c->argv[0], c->argv, env, NULL);
  uint64_t t1 = bn_now_ns();
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "bench_startup: %s failed (wait status %d)\n", c->label, st);
    return -1;
  }
  return (double)(t1 - t0) / 1e3;
}

/* Runs the command once under the agent with stderr captured: the run must succeed and print
 * nothing (ld.so reports an agent it cannot preload there). Returns 0 or -1. */
static int preflight(const cmd_t *c, char **agent_env, const char *dir)
{
  char errpath[PATH_MAX + 16];
  snprintf(errpath, sizeof errpath, "%s/stderr", dir);
  int st = bn_spawn_wait(c->argv[0], c->argv, agent_env, errpath);
  char what[256];
  snprintf(what, sizeof what, "%s under the agent", c->label);
  int quiet = bn_stderr_quiet(errpath, "bench_startup", what);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || !quiet) {
    fprintf(stderr, "bench_startup: %s does not run cleanly under %s\n", c->label,
            OPJIT_AGENT_PATH);
    return -1;
  }
  return 0;
}

/* Measures one command and prints its row and its no-trace check. Returns 0, or -1 when a
 * run failed or the agent left a file behind. */
static int run_cmd(const cmd_t *c, char **bare_env, char **agent_env, const char *dir)
{
  if (preflight(c, agent_env, dir))
    return -1;
  size_t n = (size_t)c->rounds;
  double *tb = calloc(n, sizeof *tb), *ta = calloc(n, sizeof *ta);
  double *diff = calloc(n, sizeof *diff), *ratio = calloc(n, sizeof *ratio);
  int rc = -1;
  if (!tb || !ta || !diff || !ratio) {
    fprintf(stderr, "bench_startup: out of memory\n");
    goto out;
  }
  for (int r = -WARMUP_ROUNDS; r < c->rounds; r++) {
    double x, y;
    if (r & 1) {
      y = spawn_us(c, agent_env);
      x = spawn_us(c, bare_env);
    } else {
      x = spawn_us(c, bare_env);
      y = spawn_us(c, agent_env);
    }
    if (x < 0 || y < 0)
      goto out;
    if (r < 0)
      continue;
    tb[r] = x, ta[r] = y, diff[r] = y - x, ratio[r] = y / x;
  }
  double d = bn_median(diff, n);
  printf("%-26s %10.1f %10.1f %10.1f %7.1f %8.3f %7d  %s\n", c->label, bn_median(tb, n),
         bn_median(ta, n), d, bn_half_iqr(diff, n), bn_median(ratio, n), c->rounds,
         d < GOAL_US ? "ok" : "over");
  int left = bn_scratch_count(dir);
  printf("%-26s no-trace check: %s (%d file(s) in the OPJIT_DB folder after %d agent runs)\n",
         "", left == 0 ? "ok" : "FAILED", left, c->rounds + WARMUP_ROUNDS + 1);
  rc = left == 0 ? 0 : -1;
out:
  free(tb), free(ta), free(diff), free(ratio);
  return rc;
}

/* ---- a short program that calls operators ------------------------------------------ */

enum { T_WALL, T_MAIN, T_FIRST, T_EXIT, NT }; /* what one run measures, ms */
enum { MAXCFG = 9 };

typedef struct short_cfg_s {
  char label[64];
  char db[PATH_MAX + 32]; /* its OPJIT_DB ("" for the plain run) */
  int cold;               /* the database is deleted before each run */
  char **env;
  double *t[NT];          /* per round */
} short_cfg_t;

/* Runs the short program once under c: fills t[] (ms). Returns 0, or -1 on failure. */
static int short_run(const short_cfg_t *c, const char *out, double t[NT])
{
  static char calls[16];
  snprintf(calls, sizeof calls, "%d", SHORT_CALLS);
  char *const argv[] = {OPJIT_WORKLOAD_PATH, "single", calls, "clock", NULL};
  static const char *const files[] = {"", "-wal", "-shm"}; /* a database is all three */
  char path[PATH_MAX + 48];
  for (int i = 0; c->cold && i < 3; i++) {
    snprintf(path, sizeof path, "%s%s", c->db, files[i]);
    unlink(path);
  }
  uint64_t t0 = bn_now_ns();
  int st = bn_spawn_wait_out(argv[0], argv, c->env, out, NULL);
  uint64_t t1 = bn_now_ns();
  unsigned long long m = 0, f = 0, l = 0;
  FILE *fp = fopen(out, "r");
  int got = fp && fscanf(fp, "clock %llu %llu %llu", &m, &f, &l) == 3;
  if (fp)
    fclose(fp);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || !got || m < t0 || l > t1) {
    fprintf(stderr, "bench_startup: the short program failed under %s (wait status %d)\n",
            c->label, st);
    return -1;
  }
  t[T_WALL] = (double)(t1 - t0) / 1e6;
  t[T_MAIN] = (double)(m - t0) / 1e6;
  t[T_FIRST] = (double)(f - m) / 1e6;
  t[T_EXIT] = (double)(t1 - l) / 1e6;
  return 0;
}

/* The short program's table: plain, then each agent (agents[0..nagents)) in profile and jit
 * mode, cold and warm. Returns 0, or -1 when a run failed. */
static int short_program(const char *const *agents, int nagents, int rounds)
{
  char dir[PATH_MAX], out[PATH_MAX + 16];
  if (bn_scratch_new(dir, sizeof dir))
    return -1;
  snprintf(out, sizeof out, "%s/stdout", dir);
  static short_cfg_t cfg[MAXCFG];
  int n = 0, rc = -1;
  static const char *const modes[] = {"profile", "jit"};
  const char *plain_add[] = {"OPENBLAS_NUM_THREADS=1", NULL};
  snprintf(cfg[n].label, sizeof cfg[n].label, "plain");
  cfg[n++].env = bn_env(plain_add);
  for (int a = 0; a < nagents; a++)
    for (int m = 0; m < 2; m++)
      for (int cold = 1; cold >= 0; cold--) {
        short_cfg_t *c = &cfg[n++];
        char preload[PATH_MAX + 32], db[PATH_MAX + 48], mode[32];
        snprintf(c->label, sizeof c->label, "%s %s %s", a ? "baseline" : "agent", modes[m],
                 cold ? "cold" : "warm");
        snprintf(c->db, sizeof c->db, "%s/a%d-%s-%s.db", dir, a, modes[m], cold ? "cold" : "warm");
        c->cold = cold;
        snprintf(preload, sizeof preload, "LD_PRELOAD=%s", agents[a]);
        snprintf(db, sizeof db, "OPJIT_DB=%s", c->db);
        snprintf(mode, sizeof mode, "OPJIT_MODE=%s", modes[m]);
        const char *add[] = {preload, db, mode, "OPENBLAS_NUM_THREADS=1", NULL};
        c->env = bn_env(add);
      }
  double t[NT], *diff = calloc((size_t)rounds, sizeof *diff);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < NT; k++)
      if (!cfg[i].env || !(cfg[i].t[k] = calloc((size_t)rounds, sizeof(double))))
        goto out;
  if (!diff)
    goto out;
  for (int i = 0; i < n; i++) /* the warm databases' earlier runs; everything's page cache */
    for (int r = 0; r < (cfg[i].cold ? 1 : WARM_RUNS); r++)
      if (short_run(&cfg[i], out, t))
        goto out;
  for (int r = 0; r < rounds; r++)
    for (int j = 0; j < n; j++) {
      int i = (r & 1) ? n - 1 - j : j;
      if (short_run(&cfg[i], out, t))
        goto out;
      for (int k = 0; k < NT; k++)
        cfg[i].t[k][r] = t[k];
    }
  printf("\na short program: %s single %d (cblas_sgemm 96^3, one thread)\n", OPJIT_WORKLOAD_PATH,
         SHORT_CALLS);
  printf("ms; agent rows: medians of per-round differences to the plain run (+- half their IQR)\n");
  printf("%-24s %9s %8s %7s %9s %10s %9s\n", "configuration", "process", "added", "+-",
         "to main", "1st call", "exit");
  double med[NT], unused;
  for (int k = 0; k < NT; k++)
    bn_stat(cfg[0].t[k], (size_t)rounds, &med[k], &unused);
  printf("%-24s %9.2f %8s %7s %9.2f %10.2f %9.2f\n", cfg[0].label, med[T_WALL], "", "",
         med[T_MAIN], med[T_FIRST], med[T_EXIT]);
  for (int i = 1; i < n; i++) {
    double add[NT], spread = 0, wall;
    for (int k = 0; k < NT; k++) {
      for (int r = 0; r < rounds; r++)
        diff[r] = cfg[i].t[k][r] - cfg[0].t[k][r];
      bn_stat(diff, (size_t)rounds, &add[k], k == T_WALL ? &spread : &unused);
    }
    bn_stat(cfg[i].t[T_WALL], (size_t)rounds, &wall, &unused);
    printf("%-24s %9.2f %+8.2f %7.2f %+9.2f %+10.2f %+9.2f\n", cfg[i].label, wall,
           add[T_WALL], spread, add[T_MAIN], add[T_FIRST], add[T_EXIT]);
  }
  printf("to main: spawn to main; 1st call: main to the first call's return; exit: leaving main "
         "to waitpid\n");
  if (nagents > 1)
    printf("baseline: %s\n", agents[1]);
  rc = 0;
out:
  for (int i = 0; i < n; i++) {
    bn_env_free(cfg[i].env);
    for (int k = 0; k < NT; k++)
      free(cfg[i].t[k]);
  }
  free(diff);
  bn_scratch_free(dir);
  return rc;
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 201;
  if (rounds < 1 || argc > 3 || (argc == 3 && access(argv[2], R_OK) != 0)) {
    fprintf(stderr, "usage: %s [rounds [baseline-libopjit.so]]   (rounds >= 1, default 201)\n",
            argv[0]);
    return 2;
  }
  static char *const true_argv[] = {"/bin/true", NULL};
  static char *const python_argv[] = {"/usr/bin/python3", "-c", "pass", NULL};
  const cmd_t cmds[] = {
      {"/bin/true", true_argv, rounds},
      {"/usr/bin/python3 -c pass", python_argv, rounds / 5 > 11 ? rounds / 5 : 11},
  };
  char dir[PATH_MAX], db[PATH_MAX + 32], preload[PATH_MAX + 32];
  if (bn_scratch_new(dir, sizeof dir))
    return 1;
  snprintf(db, sizeof db, "OPJIT_DB=%s/startup.db", dir);
  snprintf(preload, sizeof preload, "LD_PRELOAD=%s", OPJIT_AGENT_PATH);
  const char *add[] = {preload, db, NULL};
  char **bare_env = bn_env(NULL), **agent_env = bn_env(add);
  int rc = 1;
  if (!bare_env || !agent_env)
    goto out;
  printf("start-up per process: bare = no LD_PRELOAD, agent = LD_PRELOAD=%s\n",
         OPJIT_AGENT_PATH);
  printf("wall time from posix_spawn to waitpid, medians over interleaved rounds\n\n");
  printf("%-26s %10s %10s %10s %7s %8s %7s\n", "command", "bare us", "agent us", "added us",
         "+-", "ratio", "rounds");
  rc = 0;
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
    if (access(cmds[i].argv[0], X_OK) != 0) {
      printf("%-26s skipped: %s is not executable\n", cmds[i].label, cmds[i].argv[0]);
      continue;
    }
    if (run_cmd(&cmds[i], bare_env, agent_env, dir))
      rc = 1;
  }
  printf("added us: median of per-round differences, +- half their interquartile range\n");
  printf("goal: agent start-up < %.0f ms\n", GOAL_US / 1e3);
  const char *agents[] = {OPJIT_AGENT_PATH, argc == 3 ? argv[2] : NULL};
  if (short_program(agents, argc == 3 ? 2 : 1, rounds / 10 > 11 ? rounds / 10 : 11))
    rc = 1;
out:
  bn_env_free(bare_env);
  bn_env_free(agent_env);
  bn_scratch_free(dir);
  return rc;
}
