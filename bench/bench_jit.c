/* SPDX-License-Identifier: MIT */
/* bench_jit: the JIT's small GEMMs side by side with OpenBLAS and LIBXSMM, in one run.
 * Four configurations of the same program (bench_jit_worker, linked against libblas.so.3):
 *   O  OpenBLAS alone (OPENBLAS_NUM_THREADS=1 in every configuration)
 *   X  LIBXSMM 1.17 preloaded (its BLAS wrapper: Fortran sgemm_/dgemm_ only; what it does not
 *      JIT -- TransA = T, and every CBLAS call -- goes to OpenBLAS)
 *   J  the agent preloaded (OPJIT_MODE=jit, OPJIT_SAMPLE_HZ=0, OPJIT_HOT_CALLS=8,
 *      OPJIT_HOT_PAYBACK=0, a scratch OPJIT_DB): the worker first makes every case hot and
 *      waits until the agent's database shows the variants compiled, so nothing is timed
 *      before its variant is published. This measures the variants in their steady state;
 *      when the default payback rule would compile them is another question (a 4 ns saving
 *      per call pays a ~10 ms compile back only after millions of calls)
 *   K  no agent: the JIT's kernel for each case compiled through libopjit-jit.so's
 *      opjit_jit_api and called directly (J - K is what the agent adds per call)
 * A session starts one worker per configuration and keeps them alive; per case, each worker
 * prepares it (a batch size of ~3 ms, 30 ms of warm-up calls), then each round asks every
 * worker in turn for one timed batch, the order rotating from round to round: the
 * configurations' batches lie milliseconds apart, so a noisy neighbour on this shared VM
 * slows them alike. Several sessions (new processes, new variants) repeat it all.
 * The table holds per case the medians over all rounds of ns per call (and GF/s = 2 n^3 / ns)
 * and of the per-round speedups O/J and X/J (> 1: opjit faster), +- half their interquartile
 * range. The "jit" column says, from every session's database (variants joined to
 * signatures), whether the variant reached 'ready' and served calls ("ready 99%": its share
 * of the calls), stayed on the original library ("orig": never compiled, e.g. n >
 * OPJIT_JIT_MAX_DIM), or was demoted / failed (in how many sessions).
 * Correctness, once per case (session 0): each configuration's C is checked against a
 * reference product within 2 (K+2) eps (sum |a||b| + |beta c0|) elementwise, and the
 * configurations' C must agree within 4 (K+2) eps (K + beta); a wrong case is flagged and
 * bench_jit exits 1.
 * Compile latency per kernel: median and p95 of variants.compile_ns over every session.
 * Goals (printed met / MISSED, never an exit status): NN beta=1 n in 4..64, geometric mean
 * speedup >= 2 vs OpenBLAS and >= 1.25 vs LIBXSMM, float and double; fp32 n=64 >= 85 % of
 * the peak (DESIGN.md's 95 GF/s, and the ymm FMA peak measured here); n >= 256 never below
 * 0.98 x OpenBLAS.
 * Cases: s and d; Fortran (sgemm_) and CBLAS row-major (cblas_sgemm); NN NT TN TT; beta 0, 1;
 * alpha 1; square n, tight leading dimensions.
 *   default  NN beta=1 for n in {4 8 16 32 64 96 128 256 512}; the other seven transpose/beta
 *            combinations for n in {8 32 64}
 *   all      every combination for every n
 *   nn       NN beta=1 only
 *
 *   bench_jit [rounds [default|all|nn [sessions]]]     (default 11 default 3)
 * LIBXSMM_PRELOAD names a prebuilt LIBXSMM preload library; unset, bench_jit builds one with
 * LIBXSMM_TOOL (default /work/shared/tools/libxsmm-preload.sh) in its scratch folder, and
 * without one it runs without configuration X. */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <immintrin.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GOAL_VS_OPENBLAS 2.0   /* geometric mean speedup over n in 4..64, NN, beta 1 */
#define GOAL_VS_LIBXSMM 1.25
#define GOAL_PEAK_FRAC 0.85    /* fp32 n=64 against the peak */
#define NOMINAL_PEAK_S 95.0    /* DESIGN.md's fp32 peak per core (Zen 3, AVX2) */
#define GOAL_LARGE 0.98        /* n >= 256: never below this fraction of OpenBLAS */
#define HOT_CALLS "8"
#define DEFAULT_TOOL "/work/shared/tools/libxsmm-preload.sh"
#ifndef OPJIT_JIT_MODULE_PATH
#define OPJIT_JIT_MODULE_PATH NULL
#endif

enum { CFG_O, CFG_X, CFG_J, CFG_K, NCFG };
static const char *const cfg_name[NCFG] = {"OpenBLAS", "LIBXSMM", "opjit", "kernel"};
static const char cfg_letter[NCFG] = {'O', 'X', 'J', 'K'};
static int cfg_on[NCFG] = {1, 1, 1, 1};

static const int all_n[] = {4, 8, 16, 32, 64, 96, 128, 256, 512};
static const int sub_n[] = {8, 32, 64};
enum { NN_ALL = sizeof all_n / sizeof *all_n, MAX_CASES = 2 * 2 * 4 * 2 * NN_ALL };

typedef struct bcase_s {
  char spec[16]; /* bench_jit_worker's case: sFNN1:64 */
  int f64, cblas, ta, tb, beta, n;
} bcase_t;

static bcase_t cases[MAX_CASES];
static int ncases, rounds;
static double *ns[NCFG]; /* [case * rounds * sessions + session * rounds + round]; 0: none */
static double err_ref[NCFG][MAX_CASES];
static char jit_status[MAX_CASES][8][16]; /* per case, the first sessions' variant status */
static int jit_ready[MAX_CASES], jit_seen[MAX_CASES], jit_demoted[MAX_CASES], jit_failed[MAX_CASES];
static double jit_share[MAX_CASES];        /* variant calls / calls, summed over sessions */
static double *compile_ms;                 /* every J worker's compile latencies */
static size_t ncompile, compile_cap, ncompile_zero;
static double *kcompile_ms;                /* K: compiled in the child, no agent */
static size_t nkcompile;
static char scratch[PATH_MAX], xsmm[PATH_MAX + 32];
static int jit_max_dim = 160;

static void add_case(int f64, int cblas, int ta, int tb, int beta, int n)
{
  bcase_t *k = &cases[ncases++];
  *k = (bcase_t){.f64 = f64, .cblas = cblas, .ta = ta, .tb = tb, .beta = beta, .n = n};
  snprintf(k->spec, sizeof k->spec, "%c%c%c%c%d:%d", f64 ? 'd' : 's', cblas ? 'C' : 'F',
           ta ? 'T' : 'N', tb ? 'T' : 'N', beta, n);
}

/* The case list, grouped for the table: dtype, API, transposes, beta, then n. */
static void make_cases(const char *set)
{
  for (int f64 = 0; f64 < 2; f64++)
    for (int cblas = 0; cblas < 2; cblas++)
      for (int t = 0; t < 4; t++)
        for (int beta = 1; beta >= 0; beta--) {
          int nn1 = t == 0 && beta == 1;
          if (!nn1 && strcmp(set, "nn") == 0)
            continue;
          int full = nn1 || strcmp(set, "all") == 0;
          const int *ns_ = full ? all_n : sub_n;
          int cnt = full ? NN_ALL : (int)(sizeof sub_n / sizeof *sub_n);
          for (int i = 0; i < cnt; i++)
            add_case(f64, cblas, t >> 1, t & 1, beta, ns_[i]);
        }
}

static double gflops(int n, double nsv) { return nsv > 0 ? 2.0 * n * n * n / nsv : 0; }

/* ---- peak ------------------------------------------------------------------------------- */

/* GF/s of 12 independent chains of 256-bit FMAs (the generator's vector width): the peak the
 * kernels can reach on this machine, measured rather than assumed. */
#define PEAK_LOOP(name, V, SET1, FMA, lanes)                                                 \
  __attribute__((target("avx2,fma"), noinline)) static double name(long iters)               \
  {                                                                                          \
    V a0 = SET1(1), a1 = SET1(2), a2 = SET1(3), a3 = SET1(4), a4 = SET1(5), a5 = SET1(6);   \
    V a6 = SET1(7), a7 = SET1(8), a8 = SET1(9), a9 = SET1(10), a10 = SET1(11), a11 = SET1(12); \
    V x = SET1(0.999999), y = SET1(1e-7);                                                     \
    uint64_t t0 = bn_now_ns();                                                               \
    for (long it = 0; it < iters; it++) {                                                    \
      a0 = FMA(a0, x, y), a1 = FMA(a1, x, y), a2 = FMA(a2, x, y), a3 = FMA(a3, x, y);         \
      a4 = FMA(a4, x, y), a5 = FMA(a5, x, y), a6 = FMA(a6, x, y), a7 = FMA(a7, x, y);         \
      a8 = FMA(a8, x, y), a9 = FMA(a9, x, y), a10 = FMA(a10, x, y), a11 = FMA(a11, x, y);     \
      __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));     \
      __asm__ volatile("" : "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));   \
    }                                                                                        \
    double dt = (double)(bn_now_ns() - t0);                                                  \
    V s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;                        \
    peak_sink = (double)s[0];                                                                \
    return 2.0 * lanes * 12 * (double)iters / dt;                                            \
  }
static volatile double peak_sink;
PEAK_LOOP(peak_s, __m256, _mm256_set1_ps, _mm256_fmadd_ps, 8)
PEAK_LOOP(peak_d, __m256d, _mm256_set1_pd, _mm256_fmadd_pd, 4)

static double measure_peak(int f64)
{
  double best = 0, v[9];
  for (int i = 0; i < 9; i++) {
    v[i] = f64 ? peak_d(2000000) : peak_s(2000000);
    best = fmax(best, v[i]);
  }
  return best; /* the fastest of 9 ~10 ms runs: a peak is what nothing slowed down */
}

/* ---- workers --------------------------------------------------------------------------- */

typedef struct worker_s {
  pid_t pid;
  FILE *to, *from; /* its stdin, its stdout */
  char errpath[PATH_MAX + 32];
} worker_t;

static worker_t workers[NCFG];

/* Prints what worker c wrote on stderr (the agent warns there), if anything. */
static void worker_stderr(int c)
{
  struct stat sb;
  if (stat(workers[c].errpath, &sb) != 0 || sb.st_size == 0)
    return;
  FILE *f = fopen(workers[c].errpath, "r");
  char line[512];
  fprintf(stderr, "bench_jit: the %s worker wrote to stderr:\n", cfg_name[c]);
  while (f && fgets(line, sizeof line, f))
    fputs(line, stderr);
  if (f)
    fclose(f);
}

/* Ends worker c: "q", then waits; kills it when kill_it. Returns 0 when it exited 0. */
static int worker_end(int c, int kill_it)
{
  worker_t *w = &workers[c];
  if (!w->pid)
    return 0;
  if (w->to) {
    if (!kill_it)
      fputs("q\n", w->to);
    fclose(w->to);
  }
  if (kill_it)
    kill(w->pid, SIGKILL);
  int st = -1;
  while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR)
    ;
  if (w->from)
    fclose(w->from);
  worker_stderr(c);
  unlink(w->errpath);
  w->pid = 0, w->to = w->from = NULL;
  if (!kill_it && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
    fprintf(stderr, "bench_jit: the %s worker failed (wait status %d)\n", cfg_name[c], st);
    return -1;
  }
  return 0;
}

static void end_all(void)
{
  for (int c = 0; c < NCFG; c++)
    worker_end(c, 1);
}

/* The next line of worker c that starts with prefix (earlier lines are the worker's chatter:
 * "compile", "jit-wait"); NULL when the worker is gone. */
static char *worker_line(int c, const char *prefix, char *buf, size_t len)
{
  while (fgets(buf, (int)len, workers[c].from)) {
    if (strncmp(buf, prefix, strlen(prefix)) == 0)
      return buf;
    double ms;
    char spec[32], path[PATH_MAX];
    if (sscanf(buf, "compile %31s %lf", spec, &ms) == 2 && ms >= 0.01 && nkcompile < MAX_CASES * 8)
      kcompile_ms[nkcompile++] = ms;
    else if (sscanf(buf, "sym %31s %4095s", spec, path) == 2) {
      /* Who defines the BLAS symbols in the worker: the configuration must be what it says. */
      const char *want = c == CFG_J                                  ? "libopjit.so"
                         : c == CFG_X && strcmp(spec, "sgemm_") == 0 ? (strrchr(xsmm, '/') ? strrchr(xsmm, '/') + 1 : xsmm)
                                                                      : "libblas.so";
      if (!strstr(path, want)) {
        fprintf(stderr, "bench_jit: in the %s worker %s resolves to %s, not %s\n", cfg_name[c],
                spec, path, want);
        return NULL;
      }
    }
  }
  fprintf(stderr, "bench_jit: the %s worker stopped answering (wanted \"%s\")\n", cfg_name[c],
          prefix);
  return NULL;
}

/* Sends a command to worker c and returns the number of its answer ("PREFIX value"). */
static int ask(int c, const char *cmd, const char *prefix, double *value)
{
  char line[512];
  if (fprintf(workers[c].to, "%s\n", cmd) < 0 || fflush(workers[c].to) != 0 ||
      !worker_line(c, prefix, line, sizeof line) ||
      sscanf(line + strlen(prefix), "%lf", value) != 1) {
    fprintf(stderr, "bench_jit: the %s worker did not answer \"%s\"\n", cfg_name[c], cmd);
    return -1;
  }
  return 0;
}

/* Starts the worker of configuration cfg for session s and waits for its "ready" (under the
 * agent: every variant compiled). Returns 0 or -1 with a message. */
static int worker_start(int cfg, int s)
{
  worker_t *w = &workers[cfg];
  char chk[PATH_MAX + 32], db[PATH_MAX + 32], preload[sizeof xsmm + 16], dbenv[PATH_MAX + 48];
  char expect[32], maxdim[48];
  snprintf(chk, sizeof chk, "%s/%c.chk", scratch, cfg_letter[cfg]);
  snprintf(db, sizeof db, "%s/J%d.db", scratch, s);
  snprintf(w->errpath, sizeof w->errpath, "%s/%c.stderr", scratch, cfg_letter[cfg]);
  const char *add[12];
  char *argv[16 + MAX_CASES];
  int na = 0, nv = 0;
  add[na++] = "OPENBLAS_NUM_THREADS=1";
  argv[nv++] = OPJIT_JIT_WORKER_PATH;
  if (cfg == CFG_X) {
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", xsmm);
    add[na++] = preload;
    add[na++] = "OMP_NUM_THREADS=1";
  } else if (cfg == CFG_J) {
    int e = 0;
    for (int i = 0; i < ncases; i++)
      e += cases[i].n <= jit_max_dim;
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", OPJIT_AGENT_PATH);
    snprintf(dbenv, sizeof dbenv, "OPJIT_DB=%s", db);
    snprintf(expect, sizeof expect, "%d", e);
    snprintf(maxdim, sizeof maxdim, "OPJIT_JIT_MAX_DIM=%d", jit_max_dim);
    add[na++] = preload;
    add[na++] = dbenv;
    add[na++] = "OPJIT_MODE=jit";
    add[na++] = "OPJIT_SAMPLE_HZ=0";
    add[na++] = "OPJIT_HOT_CALLS=" HOT_CALLS;
    add[na++] = "OPJIT_HOT_PAYBACK=0"; /* compile on OPJIT_HOT_CALLS alone: see the header */
    add[na++] = "OPJIT_FLUSH_MS=100"; /* the worker polls the database for its variants */
    add[na++] = maxdim;
    argv[nv++] = "-d";
    argv[nv++] = db;
    argv[nv++] = "-e";
    argv[nv++] = expect;
  } else if (cfg == CFG_K) {
    argv[nv++] = "-k";
    argv[nv++] = OPJIT_JIT_MODULE_PATH;
  }
  add[na] = NULL;
  if (s == 0) {
    argv[nv++] = "-c";
    argv[nv++] = chk;
  }
  for (int i = 0; i < ncases; i++)
    argv[nv++] = cases[i].spec;
  argv[nv] = NULL;
  int in[2], outp[2];
  if (pipe2(in, O_CLOEXEC) || pipe2(outp, O_CLOEXEC)) {
    fprintf(stderr, "bench_jit: pipe: %s\n", strerror(errno));
    return -1;
  }
  char **env = bn_env(add);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, w->errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int rc = env ? posix_spawn(&w->pid, argv[0], &fa, NULL, argv, env) : ENOMEM;
  posix_spawn_file_actions_destroy(&fa);
  bn_env_free(env);
  close(in[0]), close(outp[1]);
  if (rc) {
    fprintf(stderr, "bench_jit: cannot spawn %s: %s\n", argv[0], strerror(rc));
    close(in[1]), close(outp[0]);
    w->pid = 0;
    return -1;
  }
  w->to = fdopen(in[1], "w");
  w->from = fdopen(outp[0], "r");
  char line[512];
  if (!w->to || !w->from || !worker_line(cfg, "ready", line, sizeof line)) {
    fprintf(stderr, "bench_jit: the %s worker did not start\n", cfg_name[cfg]);
    return -1;
  }
  return 0;
}

/* One session: a worker per configuration; per case, "rounds" rounds of one batch per
 * configuration, the order rotating. Session 0 also checks every case. Returns 0 or -1. */
static int session(int s, int sessions)
{
  int order[NCFG], nord = 0, total = rounds * sessions;
  for (int c = 0; c < NCFG; c++)
    if (cfg_on[c]) {
      order[nord++] = c;
      if (worker_start(c, s))
        return -1;
    }
  for (int i = 0; i < ncases; i++) {
    char cmd[32];
    double iters[NCFG] = {0}, v;
    snprintf(cmd, sizeof cmd, "p %d", i);
    for (int j = 0; j < nord; j++)
      if (ask(order[j], cmd, "ok", &iters[order[j]]))
        return -1;
    for (int r = 0; r < rounds; r++)
      for (int j = 0; j < nord; j++) {
        int c = order[(j + r + i) % nord];
        if (iters[c] <= 0) /* K: no kernel for this case */
          continue;
        if (ask(c, "t", "ns", &v))
          return -1;
        ns[c][i * total + s * rounds + r] = v;
      }
    for (int j = 0; j < nord && s == 0; j++)
      if (iters[order[j]] > 0 && ask(order[j], "c", "err", &err_ref[order[j]][i]))
        return -1;
  }
  for (int j = 0; j < nord; j++)
    if (worker_end(order[j], 0))
      return -1;
  return 0;
}

/* Reads the agent's database of session r: per case its variant's status and share of calls,
 * and every compile latency. Returns 0 or -1. */
static int read_jit_db(int r)
{
  char db[PATH_MAX + 32];
  snprintf(db, sizeof db, "%s/J%d.db", scratch, r);
  sqlite3 *h = NULL;
  sqlite3_stmt *q = NULL, *c = NULL;
  int rc = sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_prepare_v2(
        h,
        "SELECT v.status, v.calls, (SELECT sum(calls) FROM run_sigs WHERE sig_id = s.id)"
        " FROM signatures s LEFT JOIN variants v ON v.sig_id = s.id"
        " WHERE json_extract(s.params, '$.op') = 'gemm' AND json_extract(s.params, '$.dtype') = ?1"
        " AND json_extract(s.params, '$.api') = ?2 AND json_extract(s.params, '$.order') = ?3"
        " AND json_extract(s.params, '$.transa') = ?4 AND json_extract(s.params, '$.transb') = ?5"
        " AND json_extract(s.params, '$.m') = ?6 AND json_extract(s.params, '$.n') = ?6"
        " AND json_extract(s.params, '$.k') = ?6 AND json_extract(s.params, '$.alpha') = '1'"
        " AND json_extract(s.params, '$.beta') = ?7",
        -1, &q, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_prepare_v2(h, "SELECT compile_ns FROM variants WHERE status IN ('ready',"
                               " 'demoted')", -1, &c, NULL);
  if (rc != SQLITE_OK) {
    fprintf(stderr, "bench_jit: cannot read the agent's database %s: %s\n", db,
            h ? sqlite3_errmsg(h) : "out of memory");
    sqlite3_finalize(q), sqlite3_finalize(c), sqlite3_close(h);
    return -1;
  }
  for (int i = 0; i < ncases; i++) {
    const bcase_t *k = &cases[i];
    sqlite3_reset(q);
    sqlite3_bind_text(q, 1, k->f64 ? "f64" : "f32", -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, k->cblas ? "cblas" : "fortran", -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, k->cblas ? "row" : "col", -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, k->ta ? "T" : "N", -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 5, k->tb ? "T" : "N", -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 6, k->n);
    sqlite3_bind_text(q, 7, k->beta ? "1" : "0", -1, SQLITE_STATIC);
    const char *status = "missing"; /* the signature itself is not in the database */
    if (sqlite3_step(q) == SQLITE_ROW) {
      const unsigned char *s = sqlite3_column_text(q, 0);
      status = s ? (const char *)s : "orig";
      double vcalls = (double)sqlite3_column_int64(q, 1), calls = (double)sqlite3_column_int64(q, 2);
      if (strcmp(status, "ready") == 0 && vcalls > 0) {
        jit_ready[i]++;
        jit_share[i] += calls > 0 ? vcalls / calls : 0;
      }
      jit_demoted[i] += strcmp(status, "demoted") == 0;
      jit_failed[i] += strcmp(status, "failed") == 0;
    }
    jit_seen[i]++;
    if (r < 8)
      snprintf(jit_status[i][r], sizeof jit_status[i][r], "%s", status);
  }
  while (sqlite3_step(c) == SQLITE_ROW) {
    double ms = (double)sqlite3_column_int64(c, 0) / 1e6;
    if (ms < 0.01) { /* the JIT's own cache: a row-major case mapped onto a column-major one */
      ncompile_zero++;
      continue;
    }
    if (ncompile == compile_cap) {
      size_t cap = compile_cap ? 2 * compile_cap : 256;
      double *p = realloc(compile_ms, cap * sizeof *p);
      if (!p)
        break;
      compile_ms = p, compile_cap = cap;
    }
    compile_ms[ncompile++] = ms;
  }
  sqlite3_finalize(q), sqlite3_finalize(c), sqlite3_close(h);
  unlink(db);
  return 0;
}

/* Compares the round-0 outputs of every pair of configurations within 4 (K+2) eps (K + beta)
 * (operands are in [-1, 1]). Marks wrong cases in bad[]. Returns the number of wrong cases. */
static int compare_outputs(int *bad)
{
  FILE *f[NCFG] = {0};
  int nbad = 0;
  for (int c = 0; c < NCFG; c++) {
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/%c.chk", scratch, cfg_letter[c]);
    f[c] = cfg_on[c] ? fopen(p, "r") : NULL;
  }
  for (int i = 0; i < ncases; i++) {
    const bcase_t *k = &cases[i];
    size_t len = (size_t)k->n * (size_t)k->n, es = k->f64 ? 8 : 4;
    double *v[NCFG] = {0};
    for (int c = 0; c < NCFG; c++) {
      if (!f[c] || (c == CFG_K && ns[CFG_K][i * rounds] <= 0)) /* K: no kernel for it */
        continue;
      void *raw = malloc(len * es);
      v[c] = malloc(len * sizeof *v[c]);
      if (!raw || !v[c] || fread(raw, es, len, f[c]) != len) {
        fprintf(stderr, "bench_jit: the %s output of %s is short\n", cfg_name[c], k->spec);
        free(v[c]), v[c] = NULL;
        bad[i] = 1;
      } else {
        for (size_t j = 0; j < len; j++)
          v[c][j] = k->f64 ? ((double *)raw)[j] : ((float *)raw)[j];
      }
      free(raw);
    }
    double eps = k->f64 ? DBL_EPSILON : FLT_EPSILON;
    double bound = 4.0 * (k->n + 2) * eps * (k->n + k->beta);
    for (int c = 0; c < NCFG; c++) {
      if (err_ref[c][i] > 1 && cfg_on[c] && !(c == CFG_K && ns[CFG_K][i * rounds] <= 0)) {
        fprintf(stderr, "bench_jit: %s: %s is off the reference by %.2f times the bound\n",
                k->spec, cfg_name[c], err_ref[c][i]);
        bad[i] = 1;
      }
      for (int d = c + 1; d < NCFG && v[c]; d++)
        for (size_t j = 0; v[d] && j < len; j++)
          if (!(fabs(v[c][j] - v[d][j]) <= bound)) {
            fprintf(stderr, "bench_jit: %s: %s and %s disagree at %zu (%g vs %g, bound %g)\n",
                    k->spec, cfg_name[c], cfg_name[d], j, v[c][j], v[d][j], bound);
            bad[i] = 1;
            break;
          }
    }
    nbad += bad[i];
    for (int c = 0; c < NCFG; c++)
      free(v[c]);
  }
  for (int c = 0; c < NCFG; c++)
    if (f[c])
      fclose(f[c]);
  return nbad;
}

/* ---- the table -------------------------------------------------------------------------- */

typedef struct stat_s {
  double med[NCFG];        /* median ns per configuration (0: not measured) */
  double vs_o, vs_o_iqr;   /* median of per-round O/J, +- half IQR */
  double vs_x, vs_x_iqr;   /* X/J */
  double add_ns;           /* median of per-round J - K */
} stat_t;

static stat_t stat_of(int i)
{
  stat_t s = {0};
  double *t = calloc((size_t)rounds, sizeof *t);
  if (!t)
    return s;
  for (int c = 0; c < NCFG; c++) {
    int m = 0;
    for (int r = 0; r < rounds && cfg_on[c]; r++)
      if (ns[c][i * rounds + r] > 0)
        t[m++] = ns[c][i * rounds + r];
    s.med[c] = m ? bn_median(t, (size_t)m) : 0;
  }
  const double *j = &ns[CFG_J][i * rounds];
  for (int pass = 0; pass < 3; pass++) {
    int c = pass == 0 ? CFG_O : pass == 1 ? CFG_X : CFG_K, m = 0;
    if (!cfg_on[c])
      continue;
    for (int r = 0; r < rounds; r++) {
      double o = ns[c][i * rounds + r];
      if (o > 0 && j[r] > 0)
        t[m++] = pass == 2 ? j[r] - o : o / j[r];
    }
    if (!m)
      continue;
    double med = bn_median(t, (size_t)m), iqr = bn_half_iqr(t, (size_t)m);
    if (pass == 0)
      s.vs_o = med, s.vs_o_iqr = iqr;
    else if (pass == 1)
      s.vs_x = med, s.vs_x_iqr = iqr;
    else
      s.add_ns = med;
  }
  free(t);
  return s;
}

static void jit_label(int i, char *buf, size_t len)
{
  if (jit_ready[i] == jit_seen[i] && jit_seen[i])
    snprintf(buf, len, "ready %.0f%%", 100 * jit_share[i] / jit_ready[i]);
  else if (jit_demoted[i])
    snprintf(buf, len, "demoted %d/%d", jit_demoted[i], jit_seen[i]);
  else if (jit_failed[i])
    snprintf(buf, len, "failed %d/%d", jit_failed[i], jit_seen[i]);
  else if (!jit_ready[i])
    snprintf(buf, len, "%.15s", jit_status[i][0][0] ? jit_status[i][0] : "?");
  else
    snprintf(buf, len, "ready %d/%d", jit_ready[i], jit_seen[i]);
}

static void print_row(int i, const int *bad)
{
  const bcase_t *k = &cases[i];
  stat_t s = stat_of(i);
  char jl[32], xs[16] = "-", xr[24] = "-", ks[16] = "-", add[16] = "-";
  jit_label(i, jl, sizeof jl);
  if (cfg_on[CFG_X]) {
    snprintf(xs, sizeof xs, "%.1f", s.med[CFG_X]);
    snprintf(xr, sizeof xr, "%5.2f±%.2f%s", s.vs_x, s.vs_x_iqr, k->cblas || k->ta ? "°" : " ");
  }
  if (cfg_on[CFG_K] && s.med[CFG_K] > 0) {
    snprintf(ks, sizeof ks, "%.1f", s.med[CFG_K]);
    snprintf(add, sizeof add, "%+.1f", s.add_ns);
  }
  printf("%-6s %-2s %c%c b%d %4d %10.1f %6.1f %10s %6.1f %10.1f %6.1f %10s %8s %5.2f±%.2f %12s  "
         "%s%s\n",
         k->cblas ? "cblas" : "f77", k->f64 ? "d" : "s", k->ta ? 'T' : 'N', k->tb ? 'T' : 'N',
         k->beta, k->n, s.med[CFG_O], gflops(k->n, s.med[CFG_O]), xs,
         gflops(k->n, s.med[CFG_X]), s.med[CFG_J], gflops(k->n, s.med[CFG_J]), ks, add, s.vs_o,
         s.vs_o_iqr, xr, jl, bad[i] ? "  WRONG" : "");
}

static double percentile(double *v, size_t n, double p)
{
  if (!n)
    return 0;
  bn_median(v, n); /* sorts */
  size_t i = (size_t)ceil(p * (double)n) - 1;
  return v[i < n ? i : n - 1];
}

/* Geometric mean of a statistic over NN beta=1 cases of dtype f64, API cblas, n in [lo, hi]. */
static double geomean(int f64, int cblas, int lo, int hi, int vs_x, int *count)
{
  double s = 0;
  int m = 0;
  for (int i = 0; i < ncases; i++) {
    const bcase_t *k = &cases[i];
    if (k->f64 != f64 || k->cblas != cblas || k->ta || k->tb || !k->beta || k->n < lo || k->n > hi)
      continue;
    stat_t st = stat_of(i);
    double v = vs_x ? st.vs_x : st.vs_o;
    if (v > 0)
      s += log(v), m++;
  }
  *count = m;
  return m ? exp(s / m) : 0;
}

static int find_case(const char *spec)
{
  for (int i = 0; i < ncases; i++)
    if (strcmp(cases[i].spec, spec) == 0)
      return i;
  return -1;
}

static void print_goals(double peak_s, double peak_d)
{
  printf("\ngoals\n");
  for (int f64 = 0; f64 < 2; f64++)
    for (int cblas = 0; cblas < 2; cblas++) {
      int m;
      double g = geomean(f64, cblas, 4, 64, 0, &m);
      printf("  %c %-5s NN b1 n=4..64 geomean speedup vs OpenBLAS %5.2f (%d sizes)  goal >= %.2f: "
             "%s\n", f64 ? 'd' : 's', cblas ? "cblas" : "f77", g, m, GOAL_VS_OPENBLAS,
             g >= GOAL_VS_OPENBLAS ? "met" : "MISSED");
      if (cfg_on[CFG_X] && !cblas) {
        g = geomean(f64, cblas, 4, 64, 1, &m);
        printf("  %c %-5s NN b1 n=4..64 geomean speedup vs LIBXSMM  %5.2f (%d sizes)  goal >= %.2f: "
               "%s\n", f64 ? 'd' : 's', "f77", g, m, GOAL_VS_LIBXSMM,
               g >= GOAL_VS_LIBXSMM ? "met" : "MISSED");
      }
    }
  for (int cblas = 0; cblas < 2; cblas++) {
    int i = find_case(cblas ? "sCNN1:64" : "sFNN1:64");
    if (i < 0)
      continue;
    stat_t st = stat_of(i);
    double gf = gflops(64, st.med[CFG_J]), kgf = gflops(64, st.med[CFG_K]);
    printf("  s %-5s NN b1 n=64: opjit %.1f GF/s (kernel alone %.1f) = %.0f %% of the nominal %.0f "
           "GF/s, %.0f %% of the measured ymm FMA peak %.1f GF/s  goal >= %.0f %%: %s (nominal), "
           "%s (measured)\n", cblas ? "cblas" : "f77", gf, kgf, 100 * gf / NOMINAL_PEAK_S,
           NOMINAL_PEAK_S, 100 * gf / peak_s, peak_s, 100 * GOAL_PEAK_FRAC,
           gf >= GOAL_PEAK_FRAC * NOMINAL_PEAK_S ? "met" : "MISSED",
           gf >= GOAL_PEAK_FRAC * peak_s ? "met" : "MISSED");
  }
  double worst = INFINITY;
  const char *worst_spec = "-";
  for (int i = 0; i < ncases; i++)
    if (cases[i].n >= 256) {
      stat_t st = stat_of(i);
      if (st.vs_o < worst)
        worst = st.vs_o, worst_spec = cases[i].spec;
    }
  if (isfinite(worst))
    printf("  n >= 256: worst speedup vs OpenBLAS %.3f (%s)  goal >= %.2f: %s\n", worst, worst_spec,
           GOAL_LARGE, worst >= GOAL_LARGE ? "met" : "MISSED");
  printf("  measured ymm FMA peak: fp32 %.1f GF/s, fp64 %.1f GF/s\n", peak_s, peak_d);
}

/* ---- main ------------------------------------------------------------------------------- */

/* LIBXSMM_PRELOAD, or a library built with LIBXSMM_TOOL into the scratch folder; "" when
 * neither works (configuration X is then left out). */
static void find_xsmm(void)
{
  const char *pre = getenv("LIBXSMM_PRELOAD");
  if (pre && *pre) {
    snprintf(xsmm, sizeof xsmm, "%s", pre);
    return;
  }
  const char *tool = getenv("LIBXSMM_TOOL");
  tool = tool && *tool ? tool : DEFAULT_TOOL;
  snprintf(xsmm, sizeof xsmm, "%s/libxsmm-preload.so", scratch);
  /* The tool prints the library's path on stdout: into the log with its stderr. */
  char *argv[] = {"/bin/sh", "-c", "exec \"$0\" \"$1\" >&2", (char *)tool, xsmm, NULL};
  char **env = bn_env(NULL);
  char errp[PATH_MAX + 32];
  snprintf(errp, sizeof errp, "%s/xsmm-build.log", scratch);
  int st = access(tool, X_OK) == 0 && env ? bn_spawn_wait(argv[0], argv, env, errp) : -1;
  bn_env_free(env);
  unlink(errp);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || access(xsmm, R_OK) != 0) {
    fprintf(stderr, "bench_jit: no LIBXSMM preload library (set LIBXSMM_PRELOAD, or LIBXSMM_TOOL "
                    "to libxsmm-preload.sh): running without it\n");
    xsmm[0] = 0;
  }
}

int main(int argc, char **argv)
{
  rounds = argc > 1 ? atoi(argv[1]) : 11;
  const char *set = argc > 2 ? argv[2] : "default";
  int sessions = argc > 3 ? atoi(argv[3]) : 3;
  if (rounds < 1 || sessions < 1 ||
      (strcmp(set, "default") && strcmp(set, "all") && strcmp(set, "nn"))) {
    fprintf(stderr, "usage: %s [rounds [default|all|nn [sessions]]]   (default 11 default 3)\n",
            argv[0]);
    return 2;
  }
  const char *md = getenv("OPJIT_JIT_MAX_DIM");
  if (md && atoi(md) > 0)
    jit_max_dim = atoi(md);
  make_cases(set);
  if (bn_scratch_new(scratch, sizeof scratch))
    return 1;
  find_xsmm();
  cfg_on[CFG_X] = xsmm[0] != 0;
  cfg_on[CFG_K] = OPJIT_JIT_MODULE_PATH != NULL && access(OPJIT_JIT_MODULE_PATH, R_OK) == 0;
  for (int c = 0; c < NCFG; c++)
    if (!(ns[c] = calloc((size_t)ncases * (size_t)rounds * (size_t)sessions, sizeof *ns[c])))
      return 1;
  if (!(kcompile_ms = calloc((size_t)MAX_CASES * 8, sizeof *kcompile_ms)))
    return 1;
  double peak_s = measure_peak(0), peak_d = measure_peak(1);

  printf("small GEMMs: ns per call and GF/s (2 n^3 / ns), one thread (OPENBLAS_NUM_THREADS=1)\n");
  printf("O = OpenBLAS (libblas.so.3)   X = LIBXSMM preloaded (%s)\n", cfg_on[CFG_X] ? xsmm : "absent");
  printf("J = opjit (LD_PRELOAD=%s, OPJIT_SAMPLE_HZ=0, OPJIT_HOT_CALLS=%s, OPJIT_HOT_PAYBACK=0; "
         "variants compiled before timing)\n", OPJIT_AGENT_PATH, HOT_CALLS);
  printf("K = the JIT's kernel called directly (%s)\n",
         cfg_on[CFG_K] ? OPJIT_JIT_MODULE_PATH : "absent: built without LLVM");
  printf("%d cases (%s); %d sessions (a worker per configuration) x %d rounds per case (one "
         "~3 ms batch per configuration, order rotating); medians over the rounds\n", ncases, set,
         sessions, rounds);
  fflush(stdout);

  signal(SIGPIPE, SIG_IGN); /* a worker that died is reported by its answer missing */
  uint64_t t0 = bn_now_ns();
  for (int si = 0; si < sessions; si++) {
    if (session(si, sessions) || (cfg_on[CFG_J] && read_jit_db(si))) {
      end_all();
      bn_scratch_free(scratch);
      return 1;
    }
    fprintf(stderr, "bench_jit: session %d of %d done after %.0f s\n", si + 1, sessions,
            (double)(bn_now_ns() - t0) / 1e9);
  }
  rounds *= sessions; /* the tables see every round of every session */
  int *bad = calloc((size_t)ncases, sizeof *bad);
  if (!bad)
    return 1;
  int nbad = compare_outputs(bad);

  printf("\n%-6s %-2s %-5s %4s %10s %6s %10s %6s %10s %6s %10s %8s %10s %12s  %s\n", "api", "t",
         "op", "n", "O ns", "GF/s", "X ns", "GF/s", "J ns", "GF/s", "K ns", "J-K ns", "O/J",
         "X/J", "jit");
  for (int i = 0; i < ncases; i++) {
    if (i && (cases[i].f64 != cases[i - 1].f64 || cases[i].cblas != cases[i - 1].cblas ||
              cases[i].ta != cases[i - 1].ta || cases[i].tb != cases[i - 1].tb ||
              cases[i].beta != cases[i - 1].beta))
      printf("\n");
    print_row(i, bad);
  }
  printf("\nO/J, X/J: medians of per-round speedups (> 1: opjit faster) +- half their IQR; "
         "° LIBXSMM passes this case to OpenBLAS (CBLAS, or TransA = T)\n");
  printf("J-K: median per-round difference between opjit through the agent and its kernel "
         "called directly\n");
  printf("jit: the variant's state in every session's database, with the share of the calls it "
         "served; orig = stayed on the original library (n > OPJIT_JIT_MAX_DIM=%d)\n",
         jit_max_dim);

  if (ncompile) {
    double med = percentile(compile_ms, ncompile, 0.5), p95 = percentile(compile_ms, ncompile, 0.95);
    printf("\ncompile latency per kernel (variants.compile_ns, %zu compiles in %d sessions): "
           "median %.2f ms, p95 %.2f ms, max %.2f ms (%zu more took 0 ms: a square CBLAS row-major "
           "case is the same column-major kernel as a Fortran one, from the JIT's cache)\n",
           ncompile, sessions, med, p95, compile_ms[ncompile - 1], ncompile_zero);
  }
  if (nkcompile) {
    printf("compile latency per kernel, called directly (K, no agent): median %.2f ms, p95 %.2f ms\n",
           percentile(kcompile_ms, nkcompile, 0.5), percentile(kcompile_ms, nkcompile, 0.95));
  }
  print_goals(peak_s, peak_d);
  printf("correctness: %s\n", nbad ? "WRONG results (see stderr)" : "every configuration within "
                                     "its bound of the reference and of each other");
  fflush(stdout);
  bn_scratch_free(scratch);
  return nbad ? 1 : 0;
}
