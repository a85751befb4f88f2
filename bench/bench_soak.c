/* SPDX-License-Identifier: MIT */
/* bench_soak: a long-running BLAS program under the agent with a small code cache, watched for
 * memory growth. bench_soak_worker walks a pool of distinct small GEMM shapes (sgemm and
 * dgemm through CBLAS and Fortran, Debian's OpenBLAS) in laps, so the signature table stops
 * growing after the first lap while compiles, publications and evictions never stop: the pool's
 * kernels do not fit the cache, and an evicted shape is compiled again on its next visit. The
 * agent runs with OPJIT_MODE=jit, OPJIT_CODE_CACHE_MB=MB, OPJIT_HOT_PAYBACK=0,
 * OPJIT_HOT_CALLS=16 and OPJIT_FLUSH_MS=200 (events written before the agent's bounded log
 * drops some), defaults otherwise (sampling and the duel on).
 *
 * Every EVERY seconds (every second until the cache first fills) it samples the worker's
 * memory (/proc/PID/status VmRSS and RssAnon; /proc/PID/maps: the mappings and the bytes of
 * anonymous executable ones, which is where JIT code lives) and the run's events from its database (published, evicted, distinct signatures
 * published), and prints them as a table. At the end, the verdict: RSS growth per 1000 kernels
 * published after the warm-up (a least-squares slope over the samples from the first on which
 * the cache has evicted, a fifth of the run is over and 95 % of the signatures the run compiled
 * have been compiled once), and whether RSS stayed under the bound
 *   plain + fixed + live x per-kernel + POOL x 3 kB + 4 MB
 * plain: the worker's RSS without the agent; fixed: the RSS the agent added by its first
 * kernel (libopjit, the store module and SQLite, LLVM and its session, the signature table);
 * live: the most kernels live at once (published less evicted: the code cache's capacity in
 * kernels); per-kernel: the RSS each kernel added before the cache first filled (its code
 * pages, LLVM's and the agent's records of it, its object file); 3 kB: the object file the
 * agent keeps for each compiled signature, evicted or not, until it is stored; 4 MB: malloc's
 * arenas. Constant after the warm-up: a non-leaking agent stays under it for ever.
 *   bench_soak [SECONDS [MB [EVERY [POOL]]]]   (default 180 1 10 800; README run: 600 1 10)
 * Options the agent reads can be overridden in bench_soak's environment only through these
 * arguments: its children get a clean environment (bench.h). */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CALLS_PER_VISIT 4096 /* the agent asks a cold signature again every 4096 calls */
#define MAXS 4096
#define OBJ_KB 3            /* the object file the agent keeps per compiled signature, at most */
#define SLACK_KB (4 * 1024) /* malloc's arenas and fragmentation */

typedef struct sample_s {
  double t;                        /* seconds since the spawn */
  double rss_kb, anon_kb, code_kb; /* VmRSS, RssAnon, anonymous r-x mappings */
  long maps;                       /* mappings */
  long published, evicted, deferred, demoted;
  long sigs; /* distinct signatures published at least once */
} sample_t;

static sample_t samples[MAXS];
static char scratch[PATH_MAX];

/* The "Name:  N kB" field of /proc/PID/status, in kB; -1 when absent. */
static double status_kb(pid_t pid, const char *name)
{
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  double v = -1;
  size_t len = strlen(name);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, name, len) == 0 && line[len] == ':')
      v = strtod(line + len + 1, NULL);
  if (f)
    fclose(f);
  return v;
}

/* The number of mappings and the kB of anonymous executable ones. Returns 0 or -1. */
static int maps_of(pid_t pid, long *maps, double *code_kb)
{
  char path[64], line[PATH_MAX + 128];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return -1;
  *maps = 0, *code_kb = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi, off;
    char perm[8], dev[16];
    unsigned long inode;
    int pathpos = 0;
    if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %n", &lo, &hi, perm, &off, dev, &inode, &pathpos) <
        6)
      continue;
    (*maps)++;
    if (perm[2] == 'x' && inode == 0 && line[pathpos] != '[')
      *code_kb += (double)(hi - lo) / 1024;
  }
  fclose(f);
  return 0;
}

/* The run's events of each kind so far (the database holds one run). Returns 0 or -1. */
static int events_of(sqlite3 *db, sample_t *s)
{
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "SELECT kind, count(*) FROM events GROUP BY kind", -1, &st, NULL))
    return -1; /* not created yet: the agent writes its first flush a second in */
  s->published = s->evicted = s->deferred = s->demoted = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char *k = (const char *)sqlite3_column_text(st, 0);
    long n = (long)sqlite3_column_int64(st, 1);
    if (!k)
      continue;
    if (!strcmp(k, "published"))
      s->published = n;
    else if (!strcmp(k, "evicted"))
      s->evicted = n;
    else if (!strcmp(k, "deferred"))
      s->deferred = n;
    else if (!strcmp(k, "demoted"))
      s->demoted = n;
  }
  sqlite3_finalize(st);
  if (sqlite3_prepare_v2(db, "SELECT count(DISTINCT sig_id) FROM events WHERE kind = 'published'",
                         -1, &st, NULL))
    return -1;
  s->sigs = sqlite3_step(st) == SQLITE_ROW ? (long)sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  return 0;
}

static pid_t spawn(char *const argv[], char *const env[], const char *out, const char *err)
{
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, env);
  posix_spawn_file_actions_destroy(&fa);
  if (rc) {
    fprintf(stderr, "bench_soak: cannot spawn %s: %s\n", argv[0], strerror(rc));
    return -1;
  }
  return pid;
}

/* Waits for pid; returns 1 when it exited with status 0, 0 when it did otherwise, -1 on a
 * wait error. With nohang, returns 2 while it still runs. */
static int reap(pid_t pid, int nohang)
{
  int status;
  pid_t r;
  while ((r = waitpid(pid, &status, nohang ? WNOHANG : 0)) < 0)
    if (errno != EINTR) {
      fprintf(stderr, "bench_soak: waitpid: %s\n", strerror(errno));
      return -1;
    }
  if (r == 0)
    return 2;
  if (!WIFEXITED(status) || WEXITSTATUS(status)) {
    fprintf(stderr, "bench_soak: the worker failed (status %d)\n", status);
    return 0;
  }
  return 1;
}

/* The plain worker's RSS (kB) a second into a two-second run: the program without the agent. */
static double plain_rss(const char *pool)
{
  char out[PATH_MAX + 16], err[PATH_MAX + 16];
  snprintf(out, sizeof out, "%s/plain.out", scratch);
  snprintf(err, sizeof err, "%s/plain.err", scratch);
  const char *add[] = {"OPENBLAS_NUM_THREADS=1", NULL};
  char **env = bn_env(add);
  char *argv[] = {(char *)OPJIT_SOAK_WORKER_PATH, "2", (char *)pool, "4096", NULL};
  pid_t pid = env ? spawn(argv, env, out, err) : -1;
  bn_env_free(env);
  if (pid < 0)
    return -1;
  usleep(1000000);
  double kb = status_kb(pid, "VmRSS");
  if (reap(pid, 0) != 1 || !bn_stderr_quiet(err, "bench_soak", "the plain worker"))
    return -1;
  return kb;
}

/* Least-squares slope of y over x for samples [from, n). */
static double slope(size_t from, size_t n, double (*x)(const sample_t *),
                    double (*y)(const sample_t *))
{
  double sx = 0, sy = 0, sxx = 0, sxy = 0, m = (double)(n - from);
  for (size_t i = from; i < n; i++) {
    double a = x(&samples[i]), b = y(&samples[i]);
    sx += a, sy += b, sxx += a * a, sxy += a * b;
  }
  double d = m * sxx - sx * sx;
  return m < 2 || d == 0 ? 0 : (m * sxy - sx * sy) / d;
}
static double x_kernels(const sample_t *s) { return (double)s->published; }
static double x_time(const sample_t *s) { return s->t; }
static double y_rss(const sample_t *s) { return s->rss_kb; }

int main(int argc, char **argv)
{
  long seconds = argc > 1 ? atol(argv[1]) : 180, mb = argc > 2 ? atol(argv[2]) : 1;
  long every = argc > 3 ? atol(argv[3]) : 10, pool = argc > 4 ? atol(argv[4]) : 800;
  if (argc > 5 || seconds < 10 || mb < 1 || every < 1 || pool < 1 || pool > 4000 ||
      seconds >= MAXS) {
    fprintf(stderr, "usage: bench_soak [SECONDS>=10 [MB>=1 [EVERY>=1 [POOL 1..4000]]]]\n");
    return 2;
  }
  if (bn_scratch_new(scratch, sizeof scratch))
    return 1;
  int rc = 1;
  char spool[24], ssec[24], dbpath[PATH_MAX + 16], dbenv[PATH_MAX + 32], cache[48],
      out[PATH_MAX + 16], err[PATH_MAX + 16], cpu[128];
  snprintf(spool, sizeof spool, "%ld", pool);
  snprintf(ssec, sizeof ssec, "%ld", seconds);
  snprintf(dbpath, sizeof dbpath, "%s/soak.db", scratch);
  snprintf(dbenv, sizeof dbenv, "OPJIT_DB=%s", dbpath);
  snprintf(cache, sizeof cache, "OPJIT_CODE_CACHE_MB=%ld", mb);
  snprintf(out, sizeof out, "%s/soak.out", scratch);
  snprintf(err, sizeof err, "%s/soak.err", scratch);
  bn_cpu_name(cpu, sizeof cpu);
  printf("bench_soak: %ld s, pool of %ld shapes (M, N, K 1..32), %d calls per visit, "
         "OPJIT_CODE_CACHE_MB=%ld, a sample every %ld s\nCPU: %s\n",
         seconds, pool, CALLS_PER_VISIT, mb, every, cpu);
  double plain = plain_rss(spool);
  if (plain < 0)
    goto out;
  printf("plain worker (no agent): RSS %.1f MB\n\n", plain / 1024);

  const char *add[] = {"LD_PRELOAD=" OPJIT_AGENT_PATH,
                       dbenv,
                       "OPJIT_MODE=jit",
                       cache,
                       "OPJIT_HOT_PAYBACK=0",
                       "OPJIT_HOT_CALLS=16",
                       "OPJIT_FLUSH_MS=200",
                       "OPENBLAS_NUM_THREADS=1",
                       NULL};
  char **env = bn_env(add);
  char *wargv[] = {(char *)OPJIT_SOAK_WORKER_PATH, ssec, spool, "4096", NULL};
  pid_t pid = env ? spawn(wargv, env, out, err) : -1;
  bn_env_free(env);
  if (pid < 0)
    goto out;
  uint64_t t0 = bn_now_ns();
  sqlite3 *db = NULL;
  size_t n = 0;
  int alive;
  printf("%7s %7s %7s %9s %5s %9s %7s %5s %7s %8s %5s\n", "t (s)", "RSS MB", "anon MB", "JIT code",
         "maps", "published", "evicted", "live", "demoted", "deferred", "sigs");
  while ((alive = reap(pid, 1)) == 2) {
    /* every second until the cache first fills, so the RSS per kernel has samples to use */
    usleep((n && samples[n - 1].evicted ? (useconds_t)every : 1u) * 1000000u);
    sample_t s = {(double)(bn_now_ns() - t0) / 1e9, status_kb(pid, "VmRSS"),
                  status_kb(pid, "RssAnon")};
    if (s.rss_kb < 0 || maps_of(pid, &s.maps, &s.code_kb))
      continue; /* it exited meanwhile */
    if (!db && sqlite3_open_v2(dbpath, &db, SQLITE_OPEN_READONLY, NULL)) {
      sqlite3_close(db);
      db = NULL;
    }
    if (db)
      sqlite3_busy_timeout(db, 1000);
    if (!db || events_of(db, &s))
      continue;
    samples[n++] = s;
    printf("%7.0f %7.1f %7.1f %7.0f k %5ld %9ld %7ld %5ld %7ld %8ld %5ld\n", s.t, s.rss_kb / 1024,
           s.anon_kb / 1024, s.code_kb, s.maps, s.published, s.evicted, s.published - s.evicted,
           s.demoted, s.deferred, s.sigs);
    fflush(stdout);
  }
  sqlite3_close(db);
  bn_stderr_quiet(err, "bench_soak", "the worker under the agent"); /* the agent's warnings */
  if (alive != 1)
    goto out;
  if (n < 4) {
    fprintf(stderr, "bench_soak: %zu samples: too few for a verdict\n", n);
    goto out;
  }

  /* first: the first sample with a kernel; full: the first with an eviction (the cache full,
   * so full - 1 is the last with every kernel published still live);
   * warm: the first from which the signatures compiled at least once are 95 % of the run's
   * final count, the cache full and a fifth of the run over. */
  size_t first = 0, full = 0, warm = 0;
  while (first < n && !samples[first].published)
    first++;
  while (full < n && !samples[full].evicted)
    full++;
  long live = 0;
  double peak = 0;
  for (size_t i = 0; i < n; i++) {
    if (samples[i].published - samples[i].evicted > live)
      live = samples[i].published - samples[i].evicted;
    if (samples[i].rss_kb > peak)
      peak = samples[i].rss_kb;
  }
  while (warm < n && (warm < full || samples[warm].t < (double)seconds / 5 ||
                      samples[warm].sigs * 20 < samples[n - 1].sigs * 19))
    warm++;
  if (full >= n || full <= first + 1 || n - warm < 3) {
    fprintf(stderr, "bench_soak: %s: no verdict\n",
            full >= n           ? "the code cache never filled (a longer run or a smaller MB)"
            : full <= first + 1 ? "the cache filled within two samples (a smaller EVERY)"
                                : "too few samples after the warm-up (a longer run)");
    goto out;
  }
  double fixed = samples[first].rss_kb - plain;
  double per_kernel = (samples[full - 1].rss_kb - samples[first].rss_kb) /
                      (double)(samples[full - 1].published - samples[first].published);
  double bound = plain + fixed + (double)live * per_kernel + (double)pool * OBJ_KB + SLACK_KB;
  double per_k = slope(warm, n, x_kernels, y_rss) * 1000;
  double per_min = slope(warm, n, x_time, y_rss) * 60;
  printf("\nbefore the cache filled (t = %.0f .. %.0f s): %.1f kB of RSS per kernel published "
         "(its code pages, LLVM's and the agent's records, its object)\n",
         samples[first].t, samples[full - 1].t, per_kernel);
  printf("after the warm-up (t >= %.0f s, %ld signatures compiled): %ld kernels published, %ld "
         "evicted; RSS %.1f -> %.1f MB\n",
         samples[warm].t, samples[warm].sigs, samples[n - 1].published - samples[warm].published,
         samples[n - 1].evicted - samples[warm].evicted, samples[warm].rss_kb / 1024,
         samples[n - 1].rss_kb / 1024);
  printf("RSS growth after the warm-up: %+.1f kB per 1000 kernels published, %+.2f MB per "
         "minute (least squares)\n",
         per_k, per_min / 1024);
  printf("bound: plain %.1f MB + fixed %.1f MB (RSS at the first kernel less plain) + %ld live "
         "kernels at most x %.1f kB + %ld signatures x %d kB (an object each) + %d MB = %.1f "
         "MB\n",
         plain / 1024, fixed / 1024, live, per_kernel, pool, OBJ_KB, SLACK_KB / 1024, bound / 1024);
  printf("the live kernels' RSS: %.1f MB per MB of OPJIT_CODE_CACHE_MB (which counts their code "
         "bytes only)\n",
         (double)live * per_kernel / 1024 / (double)mb);
  printf("peak RSS %.1f MB: %s\n", peak / 1024, peak <= bound ? "within the bound" : "OVER");
  rc = 0;
out:
  bn_scratch_free(scratch);
  return rc;
}
