/* SPDX-License-Identifier: MIT */
/* Helpers shared by the benchmarks (see bench.h). */
#define _GNU_SOURCE
#include "bench.h"
#include "jit/jit.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

uint64_t bn_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bn_median(double *v, size_t n)
{
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bn_half_iqr(double *v, size_t n)
{
  qsort(v, n, sizeof *v, cmp_double);
  return (v[(3 * (n - 1) + 2) / 4] - v[(n - 1 + 2) / 4]) / 2;
}

const jt_api_t *bn_load_jit(const char *path, const char *who)
{
  char err[512] = "";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const jt_api_t *jit = h ? dlsym(h, JT_API_SYMBOL) : NULL;
  if (!jit || jit->abi != JT_API_ABI || jit->init(err, sizeof err)) {
    fprintf(stderr, "%s: cannot use %s: %s\n", who, path,
            jit ? (err[0] ? err : "wrong ABI") : dlerror());
    return NULL;
  }
  return jit;
}

void bn_stat(const double *v, size_t n, double *med, double *spread)
{
  double *a = malloc(2 * n * sizeof *a);
  if (!a) { /* a few rounds' figures: never in practice; printed as nan, not made up */
    *med = *spread = NAN;
    return;
  }
  memcpy(a, v, n * sizeof *a);
  memcpy(a + n, v, n * sizeof *a);
  *med = bn_median(a, n);
  *spread = bn_half_iqr(a + n, n);
  free(a);
}

/* Whether the "NAME=value" string e is one the benchmarks control themselves. */
static int controlled(const char *e)
{
  return strncmp(e, "LD_PRELOAD=", 11) == 0 || strncmp(e, "OPJIT_", 6) == 0 ||
         strncmp(e, "OPENBLAS_NUM_THREADS=", 21) == 0;
}

const char *bn_blas_threads(void)
{
  static char s[40];
  const char *bt = getenv("BENCH_BLAS_THREADS");
  snprintf(s, sizeof s, "OPENBLAS_NUM_THREADS=%d", bt && atoi(bt) > 0 ? atoi(bt) : 1);
  return s;
}

char **bn_env(const char *const *add)
{
  size_t n = 0, nadd = 0;
  while (environ[n])
    n++;
  while (add && add[nadd])
    nadd++;
  char **env = calloc(n + nadd + 1, sizeof *env);
  if (!env) {
    fprintf(stderr, "bench: out of memory for a child environment\n");
    return NULL;
  }
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (!controlled(environ[i]))
      env[m++] = environ[i];
  for (size_t i = 0; i < nadd; i++)
    env[m++] = (char *)add[i];
  return env;
}

void bn_env_free(char **env) { free(env); }

/* Spawns path with stdout and stderr to files (NULL: inherited) and waits (wait4 into ru). */
static int spawn_wait(const char *path, char *const argv[], char *const env[],
                      const char *stdout_path, const char *stderr_path, struct rusage *ru)
{
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (stdout_path)
    posix_spawn_file_actions_addopen(&fa, 1, stdout_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (stderr_path)
    posix_spawn_file_actions_addopen(&fa, 2, stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid;
  int rc = posix_spawn(&pid, path, &fa, NULL, argv, env);
  posix_spawn_file_actions_destroy(&fa);
  if (rc) {
    fprintf(stderr, "bench: cannot spawn %s: %s\n", path, strerror(rc));
    return -1;
  }
  int status;
  struct rusage ignored;
  while (wait4(pid, &status, 0, ru ? ru : &ignored) < 0)
    if (errno != EINTR) {
      fprintf(stderr, "bench: waitpid for %s: %s\n", path, strerror(errno));
      return -1;
    }
  return status;
}

int bn_spawn_wait(const char *path, char *const argv[], char *const env[],
                  const char *stderr_path)
{
  return spawn_wait(path, argv, env, NULL, stderr_path, NULL);
}

int bn_spawn_wait_out(const char *path, char *const argv[], char *const env[],
                      const char *stdout_path, const char *stderr_path)
{
  return spawn_wait(path, argv, env, stdout_path, stderr_path, NULL);
}

int bn_spawn_wait4(const char *path, char *const argv[], char *const env[],
                   const char *stderr_path, struct rusage *ru)
{
  return spawn_wait(path, argv, env, NULL, stderr_path, ru);
}

int bn_spawn_wait4_out(const char *path, char *const argv[], char *const env[],
                       const char *stdout_path, const char *stderr_path, struct rusage *ru)
{
  return spawn_wait(path, argv, env, stdout_path, stderr_path, ru);
}

int bn_run_loop_ms(const char *scratch, char *const argv[], const char *const *add,
                   const char *prog, const char *what, double *ms)
{
  char out[PATH_MAX + 8], err[PATH_MAX + 8];
  snprintf(out, sizeof out, "%s/out", scratch);
  snprintf(err, sizeof err, "%s/err", scratch);
  char **env = bn_env(add);
  int st = env ? bn_spawn_wait_out(argv[0], argv, env, out, err) : -1;
  bn_env_free(env);
  bn_stderr_quiet(err, prog, what);
  *ms = -1;
  FILE *f = fopen(out, "r");
  char line[128];
  while (f && fgets(line, sizeof line, f))
    sscanf(line, "loop_ms %lf", ms);
  if (f)
    fclose(f);
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || *ms < 0) {
    *ms = -1;
    return st > 0 ? st : -1;
  }
  return 0;
}

int bn_stderr_quiet(const char *errpath, const char *prog, const char *what)
{
  struct stat sb;
  int quiet = stat(errpath, &sb) == 0 && sb.st_size == 0;
  if (!quiet) {
    FILE *f = fopen(errpath, "r");
    char line[512];
    fprintf(stderr, "%s: %s wrote to stderr:\n", prog, what);
    while (f && fgets(line, sizeof line, f))
      fputs(line, stderr);
    if (f)
      fclose(f);
  }
  unlink(errpath);
  return quiet;
}

int bn_openblas_core_named(const char *errpath, char *out, size_t len)
{
  FILE *f = fopen(errpath, "r");
  char line[512];
  int unknown = 0;
  out[0] = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, "Core not found", 14) == 0)
      unknown = 1;
    else if (strncmp(line, "Core: ", 6) == 0)
      snprintf(out, len, "%.*s", (int)strcspn(line + 6, "\r\n"), line + 6);
  }
  if (f)
    fclose(f);
  return unknown;
}

int bn_openblas_core(const char *scratch, char *const argv[], const char *type, char *out,
                     size_t len)
{
  char ct[64], errp[4096];
  snprintf(ct, sizeof ct, "OPENBLAS_CORETYPE=%s", type);
  snprintf(errp, sizeof errp, "%s/openblas-core.stderr", scratch);
  const char *add[] = {"OPENBLAS_NUM_THREADS=1", "OPENBLAS_VERBOSE=2", type[0] ? ct : NULL, NULL};
  char **env = bn_env(add);
  int st = env ? spawn_wait(argv[0], argv, env, "/dev/null", errp, NULL) : -1;
  bn_env_free(env);
  int unknown = bn_openblas_core_named(errp, out, len);
  unlink(errp);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || !out[0])
    return -1;
  return !unknown;
}

int bn_openblas_best(const char *scratch, char *const argv[], char *type, size_t tlen,
                     char *core, size_t clen, char *note, size_t nlen)
{
  const char *cand[3];
  int nc = 0;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq")) {
    if (__builtin_cpu_supports("avx512bf16"))
      cand[nc++] = "COOPERLAKE";
    cand[nc++] = "SKYLAKEX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    cand[nc++] = __builtin_cpu_is("amd") ? "ZEN" : "HASWELL";
  size_t used = 0;
  note[0] = 0;
  for (int i = 0; i < nc; i++) {
    if (bn_openblas_core(scratch, argv, cand[i], core, clen) == 1) {
      snprintf(type, tlen, "%s", cand[i]);
      return 0;
    }
    if (used < nlen)
      used += (size_t)snprintf(note + used, nlen - used, "%s%s unknown to this OpenBLAS",
                               used ? "; " : "", cand[i]);
  }
  type[0] = 0;
  if (bn_openblas_core(scratch, argv, "", core, clen) < 0)
    core[0] = 0;
  return -1;
}

int bn_openblas_cores(const char *scratch, char *const probe[], char type[2][BN_CORE_LEN],
                      char core[2][BN_CORE_LEN], char *note, size_t nlen)
{
  const char *forced = getenv("BENCH_DEFAULT_CORETYPE");
  snprintf(type[1], BN_CORE_LEN, "%s", forced ? forced : "");
  note[0] = 0;
  if (bn_openblas_core(scratch, probe, type[1], core[1], BN_CORE_LEN) < 0) {
    type[0][0] = 0;
    snprintf(core[0], BN_CORE_LEN, "(not OpenBLAS)");
    snprintf(core[1], BN_CORE_LEN, "(not OpenBLAS)");
    return 1;
  }
  bn_openblas_best(scratch, probe, type[0], BN_CORE_LEN, core[0], BN_CORE_LEN, note, nlen);
  return strcmp(core[0], core[1]) == 0 ? 1 : 2;
}

void bn_cpu_name(char *buf, size_t len)
{
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  snprintf(buf, len, "?");
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
      const char *v = strchr(line, ':') + 1;
      v += *v == ' ';
      snprintf(buf, len, "%.*s", (int)strcspn(v, "\n"), v);
      break;
    }
  if (f)
    fclose(f);
}

static volatile uint64_t clock_seed = 3, clock_sink;

/* The clock from n iterations of 16 dependent multiplies, 3 cycles each. */
static double clock_ghz(uint64_t n)
{
  uint64_t x = clock_seed, t0 = bn_now_ns();
  for (uint64_t i = 0; i < n; i++)
    for (int j = 0; j < 16; j++)
      x *= x;
  uint64_t dt = bn_now_ns() - t0;
  clock_sink = x;
  return dt ? 3.0 * 16 * (double)n / (double)dt : 0;
}

double bn_clock_ghz(void) { return clock_ghz(4000); }

double bn_clock_probe_ghz(void) { return clock_ghz(64); }

int bn_scratch_new(char *dir, size_t len)
{
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, len, "%s/opjit-bench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "bench: cannot create a scratch folder %s: %s\n", dir, strerror(errno));
    return -1;
  }
  return 0;
}

int bn_scratch_count(const char *dir)
{
  DIR *d = opendir(dir);
  if (!d)
    return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

void bn_scratch_free(const char *dir)
{
  DIR *d = opendir(dir);
  if (d) {
    for (struct dirent *e; (e = readdir(d));)
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
        unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
  }
  rmdir(dir);
}

int bn_read_passes(const char *path, double *pass, int passes)
{
  FILE *f = fopen(path, "r");
  int got = 0;
  char line[128];
  while (f && fgets(line, sizeof line, f)) {
    int p;
    double ms;
    if (sscanf(line, "pass %d %lf", &p, &ms) == 2 && p >= 0 && p < passes)
      pass[p] = ms, got++;
  }
  if (f)
    fclose(f);
  return got;
}
