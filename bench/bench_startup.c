/* SPDX-License-Identifier: MIT */
/* bench_startup: what the agent adds to the start-up of a process that calls no operator.
 * Each round spawns the command once without the agent and once under
 * LD_PRELOAD=libopjit.so (order alternating) and times each spawn from posix_spawn to
 * waitpid; the table holds the medians over rounds. Afterwards it checks that the agent left
 * no trace: its OPJIT_DB (in a scratch folder) must not exist.
 *
 *   bench_startup [rounds]     (default 201 for /bin/true; a fifth, at least 11, for python3) */
#define _GNU_SOURCE
#include "bench.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define GOAL_US 1000.0         /* what the agent may add to a process's start-up */
enum { WARMUP_ROUNDS = 2 };    /* untimed rounds: they warm the page cache */

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

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 201;
  if (rounds < 1) {
    fprintf(stderr, "usage: %s [rounds]   (rounds >= 1, default 201)\n", argv[0]);
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
out:
  bn_env_free(bare_env);
  bn_env_free(agent_env);
  bn_scratch_free(dir);
  return rc;
}
