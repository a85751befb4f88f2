/* SPDX-License-Identifier: MIT */
/* bench_jit: the JIT's small GEMMs side by side with OpenBLAS and LIBXSMM, in one run.
 * Six configurations of the same program (bench_jit_worker, linked against libblas.so.3;
 * OPENBLAS_NUM_THREADS=1 in every one, or BENCH_BLAS_THREADS: the agent's long-call rule against
 * a library on several threads, agent/policy.h):
 *   D  OpenBLAS on the core it picks itself (no OPENBLAS_CORETYPE): Debian's default
 *   O  OpenBLAS on its best core for this CPU, chosen from the CPU's features (AVX-512:
 *      COOPERLAKE with BF16, else SKYLAKEX; AVX2: HASWELL on Intel, ZEN on AMD), the first
 *      candidate this OpenBLAS knows. OPENBLAS_CORETYPE is read when the library loads, so
 *      each core is a process of its own; OPENBLAS_VERBOSE=2 makes every worker name its core,
 *      which bench_jit checks. When D's core is O's, D and E are left out (they would repeat
 *      O and J); BENCH_DEFAULT_CORETYPE forces D's core (PRESCOTT: what Debian's OpenBLAS
 *      0.3.21 picks on a Xeon it does not recognise, such as family 6 model 207)
 *   X  LIBXSMM 1.17 preloaded (its BLAS wrapper: Fortran sgemm_/dgemm_ only; what it does not
 *      JIT -- TransA = T, and every CBLAS call -- goes to OpenBLAS on O's core)
 *   J  the agent preloaded over O's core (OPJIT_MODE=jit, OPJIT_SAMPLE_HZ=0,
 *      OPJIT_HOT_CALLS=8, OPJIT_HOT_PAYBACK=0, a scratch OPJIT_DB): the worker first makes
 *      every case hot and waits until the agent's database shows the variants compiled, so
 *      nothing is timed before its variant is published. Its calls are what a user gets: the
 *      variant where the agent keeps it, the original where it did not compile or demoted it
 *   E  the same agent over D's core (its variants are judged against that original)
 *   K  no agent: the JIT's kernel for each case compiled through libopjit-jit.so's
 *      opjit_jit_api and called directly (J - K is what the agent adds per call)
 * A session starts one worker per configuration and keeps them alive; per case, each worker
 * prepares it (a batch size of ~3 ms, 30 ms of warm-up calls), then each round asks every
 * worker in turn for one timed batch, the order reversing from one round to the next (ABBA):
 * the configurations' batches lie milliseconds apart and a drift within a round tilts them
 * alike, in turn either way. Several sessions (new processes, new variants) repeat it all.
 * The table holds per case the medians over all rounds of ns per call (and GF/s = 2 n^3 / ns)
 * and of the per-round ratios O/J, D/E and X/J (> 1: opjit faster), +- half their
 * interquartile range. The "jit" columns say, from every session's database (variants joined
 * to signatures), whether J's and E's variant reached 'ready' and served calls ("ready 99%":
 * its share of the calls), stayed on the original library ("orig": never compiled, e.g. n >
 * OPJIT_JIT_MAX_DIM, or a long call its library runs fast: agent/policy.h), or was demoted /
 * failed (in how many sessions); a variant that served
 * calls while measuring slower than its original here is marked SLOWER: its median per-round
 * ratio is below 1 by more than half its interquartile range (the ratio's upper quartile, about,
 * is below 1); a median below 1 within that spread is a tie, marked "tie".
 * Correctness, once per case (session 0): each configuration's C is checked against a
 * reference product within 2 (K+2) eps (sum |a||b| + |beta c0|) elementwise, and the
 * configurations' C must agree within 4 (K+2) eps (K + beta); a wrong case is flagged and
 * bench_jit exits 1.
 * Peaks: GF/s of independent FMA chains for every vector width the CPU has (128, 256, 512
 * bits; f32 and f64), measured by the agent's machine model (agent/machine.c).
 * Compile latency per kernel: median and p95 of variants.compile_ns over every session.
 * Goals (issue 13; printed met / MISSED, never an exit status): NN beta=1 n in 4..64,
 * geometric mean speedup >= 1.25 vs OpenBLAS (best and default cores) and vs LIBXSMM, float
 * and double; no variant that serves calls slower than its original; fp32 n=64 >= 85 % of the
 * widest vectors' measured peak, like with like: after each of J's n=64 batches its worker
 * measures the peak again (the fastest of 5 rounds of ~0.2 ms), and the goal holds the median
 * of those per-round shares (the median round against the fastest peak of the start, and
 * opjit's fastest round, are printed beside; so is, not a goal, what the short rounds and a
 * batch measure differently: the same loop run once for as long as a batch right after them,
 * opjit against it, and the core's clock right after J's batch and after that run, from
 * dependent multiplies; then the clock inside each, from short probes between calls, and
 * opjit's share at the loop's clock); n >= 256 never below 0.98 x OpenBLAS.
 * Cases: s and d; Fortran (sgemm_) and CBLAS row-major (cblas_sgemm); NN NT TN TT; beta 0, 1;
 * alpha 1; square n, tight leading dimensions.
 *   default  NN beta=1 for n in {4 8 16 32 64 96 128 256 512}; the other seven transpose/beta
 *            combinations for n in {8 32 64}
 *   all      every combination for every n
 *   nn       NN beta=1 only
 *   large    NN beta=1 for n in {128 256 512 1024}: the long-call rule's rows (agent/policy.h)
 *   nt tn tt that transposed layout only, beta 1 and 0, n in {4 8 16 32 64}
 *
 *   bench_jit [rounds [default|all|nn|large|nt|tn|tt [sessions]]]     (default 11 default 3)
 * BENCH_AGENT names another build's libopjit.so for J and E (its modules beside it: a change's
 * before, interleaved with this build's runs). LIBXSMM_PRELOAD names a prebuilt LIBXSMM preload library; unset, bench_jit builds one with
 * LIBXSMM_TOOL (default /work/shared/tools/libxsmm-preload.sh) in its scratch folder, and
 * without one it runs without configuration X, saying why. */
#define _GNU_SOURCE
#include "bench.h"

#include "agent/machine.h"
#include "agent/opt.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define GOAL_VS 1.25           /* geometric mean speedup over n in 4..64, NN, beta 1 */
#define GOAL_PEAK_FRAC 0.85    /* fp32 n=64 against the widest vectors' measured peak */
#define GOAL_LARGE 0.98        /* n >= 256: never below this fraction of OpenBLAS */
#define HOT_CALLS "8"
#define DEFAULT_TOOL "/work/shared/tools/libxsmm-preload.sh"
#ifndef OPJIT_JIT_MODULE_PATH
#define OPJIT_JIT_MODULE_PATH NULL
#endif

enum { CFG_D, CFG_O, CFG_X, CFG_J, CFG_E, CFG_K, NCFG };
static const char *const cfg_name[NCFG] = {"OpenBLAS default", "OpenBLAS best", "LIBXSMM",
                                           "opjit", "opjit over default", "kernel"};
static const char cfg_letter[NCFG] = {'D', 'O', 'X', 'J', 'E', 'K'};
static int cfg_on[NCFG] = {1, 1, 1, 1, 1, 1};

/* The agent J and E preload: BENCH_AGENT, else this build's. */
static const char *agent_path(void)
{
  const char *a = getenv("BENCH_AGENT");
  return a && *a ? a : OPJIT_AGENT_PATH;
}

/* The ratios the table prints: num's time over den's (> 1: den, opjit, faster). */
enum { R_OJ, R_DE, R_XJ, NRATIO };
static const int ratio_num[NRATIO] = {CFG_O, CFG_D, CFG_X}, ratio_den[NRATIO] = {CFG_J, CFG_E, CFG_J};

/* The agent's configurations and their databases' findings: [0] J, [1] E. */
enum { NAGENT = 2 };
static const int agent_cfg[NAGENT] = {CFG_J, CFG_E};

static const int all_n[] = {4, 8, 16, 32, 64, 96, 128, 256, 512};
static const int sub_n[] = {8, 32, 64};
static const int large_n[] = {128, 256, 512, 1024}; /* "large": the long-call rule's rows */
enum { NN_ALL = sizeof all_n / sizeof *all_n, MAX_CASES = 2 * 2 * 4 * 2 * NN_ALL };

typedef struct bcase_s {
  char spec[24]; /* bench_jit_worker's case: sFNN1:64 */
  int f64, cblas, ta, tb, beta, n;
} bcase_t;

typedef struct jitdb_s {       /* what one agent configuration's databases say per case */
  char status[8][16];          /* the first sessions' variant status */
  int ready, seen, demoted, failed;
  double share;                /* variant calls / calls, summed over sessions */
} jitdb_t;

static bcase_t cases[MAX_CASES];
static int ncases, rounds;
static double *ns[NCFG]; /* [case * rounds * sessions + session * rounds + round]; 0: none */
static double *peak_now; /* the same index: J's worker's f32 peak measured right after its
                            batch, for the fp32 n=64 cases (0: not measured) */
static double *loop_now; /* ... then the peak's loop timed as a batch is (one ~3 ms run) */
static double *ghz_j, *ghz_loop; /* ... the clock right after J's batch, and after that run */
static double *ghz_lin, *ghz_jin; /* ... the clock inside the loop run as a batch and inside J's
                                     batch (probes between calls, the last two thirds) */
static double err_ref[NCFG][MAX_CASES];
static jitdb_t jdb[NAGENT][MAX_CASES];
static double *compile_ms;                 /* every agent worker's compile latencies */
static size_t ncompile, compile_cap, ncompile_zero;
static double *kcompile_ms;                /* K: compiled in the child, no agent */
static size_t nkcompile;
static char scratch[PATH_MAX], xsmm[PATH_MAX + 32], xsmm_why[160];
static int jit_max_dim; /* OPJIT_JIT_MAX_DIM: the workers' environment, else the agent's default */
static const char *blas_threads; /* bn_blas_threads */
/* OpenBLAS's cores: as OPENBLAS_CORETYPE names them ("" = its own choice) and as it reports
 * them at load ("Core: SkylakeX"). */
static char coretype[NCFG][32], core[NCFG][32], best_note[256];

static void add_case(int f64, int cblas, int ta, int tb, int beta, int n)
{
  bcase_t *k = &cases[ncases++];
  *k = (bcase_t){.f64 = f64, .cblas = cblas, .ta = ta, .tb = tb, .beta = beta, .n = n};
  snprintf(k->spec, sizeof k->spec, "%c%c%c%c%d:%d", f64 ? 'd' : 's', cblas ? 'C' : 'F',
           ta ? 'T' : 'N', tb ? 'T' : 'N', beta, n);
}

/* The case list, grouped for the table: dtype, API, transposes, beta, then n. */
/* The transposes a set of one layout names (2 * ta + tb: "nt" 1, "tn" 2, "tt" 3), else -1. */
static int set_t(const char *set)
{
  return strcmp(set, "nt") == 0 ? 1 : strcmp(set, "tn") == 0 ? 2 : strcmp(set, "tt") == 0 ? 3 : -1;
}

static void make_cases(const char *set)
{
  for (int f64 = 0; f64 < 2; f64++)
    for (int cblas = 0; cblas < 2; cblas++)
      for (int t = 0; t < 4; t++)
        for (int beta = 1; beta >= 0; beta--) {
          int nn1 = t == 0 && beta == 1;
          if (!nn1 && (strcmp(set, "nn") == 0 || strcmp(set, "large") == 0))
            continue;
          if (set_t(set) >= 0) { /* one transposed layout, beta 1 and 0, n <= 64 */
            for (int i = 0; t == set_t(set) && i < NN_ALL && all_n[i] <= 64; i++)
              add_case(f64, cblas, t >> 1, t & 1, beta, all_n[i]);
            continue;
          }
          int full = nn1 || strcmp(set, "all") == 0, large = strcmp(set, "large") == 0;
          const int *ns_ = large ? large_n : full ? all_n : sub_n;
          int cnt = large ? (int)(sizeof large_n / sizeof *large_n)
                  : full  ? NN_ALL
                          : (int)(sizeof sub_n / sizeof *sub_n);
          for (int i = 0; i < cnt; i++)
            add_case(f64, cblas, t >> 1, t & 1, beta, ns_[i]);
        }
}

static double gflops(int n, double nsv) { return nsv > 0 ? 2.0 * n * n * n / nsv : 0; }

/* ---- peaks ------------------------------------------------------------------------------ */

/* The agent's machine model (agent/machine.c): the FMA peak of every vector width the CPU
 * has, f32 and f64, measured with the code the agent itself uses, five times over (each
 * ~20 ms of short rounds), every peak the fastest seen (ag_machine_measure_best). */
static ag_machine_t machine;

/* ---- workers --------------------------------------------------------------------------- */

typedef struct worker_s {
  pid_t pid;
  FILE *to, *from; /* its stdin, its stdout */
  char errpath[PATH_MAX + 32];
} worker_t;

static worker_t workers[NCFG];

/* Prints what worker c wrote on stderr (the agent warns there), if anything, apart from the
 * lines OPENBLAS_VERBOSE=2 asked for. */
static void worker_stderr(int c)
{
  FILE *f = fopen(workers[c].errpath, "r");
  char line[512];
  int said = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, "Core: ", 6) == 0 || strncmp(line, "Core not found", 14) == 0)
      continue;
    if (!said++)
      fprintf(stderr, "bench_jit: the %s worker wrote to stderr:\n", cfg_name[c]);
    fputs(line, stderr);
  }
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
      const char *x = strrchr(xsmm, '/') ? strrchr(xsmm, '/') + 1 : xsmm;
      const char *want = c == CFG_J || c == CFG_E                     ? "libopjit.so"
                         : c == CFG_X && strcmp(spec, "sgemm_") == 0 ? x
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

/* Sets the OpenBLAS cores of every configuration: D's own choice (or
 * BENCH_DEFAULT_CORETYPE), O's best for this CPU's features. Returns 0, or -1 when the system
 * BLAS names no core (it is not OpenBLAS: the benchmark then compares with it alone, as O). */
static int pick_cores(void)
{
  char *probe[] = {OPJIT_JIT_WORKER_PATH, "-i", "sFNN1:4", NULL};
  const char *forced = getenv("BENCH_DEFAULT_CORETYPE");
  snprintf(coretype[CFG_D], sizeof coretype[CFG_D], "%s", forced ? forced : "");
  if (bn_openblas_core(scratch, probe, coretype[CFG_D], core[CFG_D], sizeof core[CFG_D]) < 0) {
    core[CFG_D][0] = 0;
    return -1;
  }
  /* Without a candidate this OpenBLAS knows, O runs its own choice: the best known here. */
  bn_openblas_best(scratch, probe, coretype[CFG_O], sizeof coretype[CFG_O], core[CFG_O],
                   sizeof core[CFG_O], best_note, sizeof best_note);
  for (int c = CFG_X; c < NCFG; c++)
    if (c != CFG_E)
      memcpy(coretype[c], coretype[CFG_O], sizeof coretype[c]), memcpy(core[c], core[CFG_O], sizeof core[c]);
  memcpy(coretype[CFG_E], coretype[CFG_D], sizeof coretype[CFG_E]);
  memcpy(core[CFG_E], core[CFG_D], sizeof core[CFG_E]);
  return 0;
}

/* Starts the worker of configuration cfg for session s and waits for its "ready" (under the
 * agent: every variant compiled); checks that OpenBLAS runs the core the configuration says.
 * Returns 0 or -1 with a message. */
static int worker_start(int cfg, int s)
{
  worker_t *w = &workers[cfg];
  char chk[PATH_MAX + 32], db[PATH_MAX + 32], preload[sizeof xsmm + 16], dbenv[PATH_MAX + 48];
  char expect[32], maxdim[48], ct[64];
  snprintf(chk, sizeof chk, "%s/%c.chk", scratch, cfg_letter[cfg]);
  snprintf(db, sizeof db, "%s/%c%d.db", scratch, cfg_letter[cfg], s);
  snprintf(w->errpath, sizeof w->errpath, "%s/%c.stderr", scratch, cfg_letter[cfg]);
  snprintf(ct, sizeof ct, "OPENBLAS_CORETYPE=%s", coretype[cfg]);
  const char *add[16];
  char *argv[16 + MAX_CASES];
  int na = 0, nv = 0;
  add[na++] = blas_threads;
  add[na++] = "OPENBLAS_VERBOSE=2";
  if (coretype[cfg][0])
    add[na++] = ct;
  argv[nv++] = OPJIT_JIT_WORKER_PATH;
  if (cfg == CFG_X) {
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", xsmm);
    add[na++] = preload;
    add[na++] = "OMP_NUM_THREADS=1";
  } else if (cfg == CFG_J || cfg == CFG_E) {
    int e = 0;
    for (int i = 0; i < ncases; i++)
      e += cases[i].n <= jit_max_dim;
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", agent_path());
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
  char line[512], got[32];
  if (!w->to || !w->from || !worker_line(cfg, "ready", line, sizeof line)) {
    fprintf(stderr, "bench_jit: the %s worker did not start\n", cfg_name[cfg]);
    return -1;
  }
  bn_openblas_core_named(w->errpath, got, sizeof got);
  if (cfg != CFG_K && core[cfg][0] && strcmp(got, core[cfg]) != 0) {
    fprintf(stderr, "bench_jit: the %s worker runs OpenBLAS's %s core, not %s\n", cfg_name[cfg],
            got[0] ? got : "(unnamed)", core[cfg]);
    return -1;
  }
  return 0;
}

/* One session: a worker per configuration; per case, "rounds" rounds of one batch per
 * configuration, the order reversing every round. Session 0 also checks every case. Returns 0
 * or -1. */
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
        int c = order[((r % 2 ? nord - 1 - j : j) + i) % nord];
        if (iters[c] <= 0) /* K: no kernel for this case */
          continue;
        if (ask(c, "t", "ns", &v))
          return -1;
        int at = i * total + s * rounds + r;
        ns[c][at] = v;
        if (c == CFG_J && !cases[i].f64 && cases[i].n == 64 &&
            (ask(c, "g", "ghz", &ghz_j[at]) || ask(c, "f", "gf", &peak_now[at]) ||
             ask(c, "F", "gf", &loop_now[at]) || ask(c, "g", "ghz", &ghz_loop[at]) ||
             ask(c, "L", "ghz", &ghz_lin[at]) || ask(c, "T", "ghz", &ghz_jin[at])))
          return -1;
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

/* Reads the database of agent configuration a (J or E) in session r: per case its variant's
 * status and share of calls, and every compile latency. Returns 0 or -1. */
static int read_jit_db(int a, int r)
{
  char db[PATH_MAX + 32];
  snprintf(db, sizeof db, "%s/%c%d.db", scratch, cfg_letter[agent_cfg[a]], r);
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
    jitdb_t *d = &jdb[a][i];
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
        d->ready++;
        d->share += calls > 0 ? vcalls / calls : 0;
      }
      d->demoted += strcmp(status, "demoted") == 0;
      d->failed += strcmp(status, "failed") == 0;
    }
    if (d->seen < 8)
      snprintf(d->status[d->seen], sizeof d->status[d->seen], "%s", status);
    d->seen++;
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
  double med[NCFG];                    /* median ns per configuration (0: not measured) */
  double best[NCFG];                   /* its fastest round's ns (0: not measured) */
  double ratio[NRATIO], ratio_iqr[NRATIO]; /* medians of per-round ratios, +- half IQR */
  double add_ns;                       /* median of per-round J - K */
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
    for (int r = 0; r < m; r++)
      if (s.best[c] == 0 || t[r] < s.best[c])
        s.best[c] = t[r];
  }
  for (int p = 0; p < NRATIO; p++) {
    const double *x = &ns[ratio_num[p]][i * rounds], *y = &ns[ratio_den[p]][i * rounds];
    int m = 0;
    for (int r = 0; r < rounds && cfg_on[ratio_num[p]] && cfg_on[ratio_den[p]]; r++)
      if (x[r] > 0 && y[r] > 0)
        t[m++] = x[r] / y[r];
    if (m)
      s.ratio[p] = bn_median(t, (size_t)m), s.ratio_iqr[p] = bn_half_iqr(t, (size_t)m);
  }
  int m = 0;
  for (int r = 0; r < rounds && cfg_on[CFG_K] && cfg_on[CFG_J]; r++)
    if (ns[CFG_K][i * rounds + r] > 0 && ns[CFG_J][i * rounds + r] > 0)
      t[m++] = ns[CFG_J][i * rounds + r] - ns[CFG_K][i * rounds + r];
  s.add_ns = m ? bn_median(t, (size_t)m) : 0;
  free(t);
  return s;
}

/* Whether agent configuration a's variant of case i served calls in every session. */
static int served(int a, int i) { return jdb[a][i].seen && jdb[a][i].ready == jdb[a][i].seen; }

static void jit_label(int a, int i, char *buf, size_t len)
{
  const jitdb_t *d = &jdb[a][i];
  if (served(a, i))
    snprintf(buf, len, "ready %.0f%%", 100 * d->share / d->ready);
  else if (d->demoted)
    snprintf(buf, len, "demoted %d/%d", d->demoted, d->seen);
  else if (d->failed)
    snprintf(buf, len, "failed %d/%d", d->failed, d->seen);
  else if (!d->ready)
    snprintf(buf, len, "%.15s", d->status[0][0] ? d->status[0] : "?");
  else
    snprintf(buf, len, "ready %d/%d", d->ready, d->seen);
}

/* Whether agent configuration a served case i with a variant that measured slower than its
 * original here: 2 slower (the median of per-round ratios below 1 by more than half their
 * interquartile range), 1 a tie (below 1 within it), 0 not below 1 or not served. */
static int served_slower(int a, int i, const stat_t *s)
{
  double r = s->ratio[a == 0 ? R_OJ : R_DE], iqr = s->ratio_iqr[a == 0 ? R_OJ : R_DE];
  if (!cfg_on[agent_cfg[a]] || !served(a, i) || r <= 0 || r >= 1)
    return 0;
  return r + iqr < 1 ? 2 : 1;
}

static void print_head(void)
{
  printf("\n%-6s %-2s %-5s %4s", "api", "t", "op", "n");
  if (cfg_on[CFG_D])
    printf(" %9s %6s", "D ns", "GF/s");
  printf(" %9s %6s", "O ns", "GF/s");
  if (cfg_on[CFG_X])
    printf(" %9s %6s", "X ns", "GF/s");
  printf(" %9s %6s", "J ns", "GF/s");
  if (cfg_on[CFG_E])
    printf(" %9s", "E ns");
  if (cfg_on[CFG_K])
    printf(" %9s %7s", "K ns", "J-K ns");
  printf(" %11s", "O/J");
  if (cfg_on[CFG_E])
    printf(" %11s", "D/E");
  if (cfg_on[CFG_X])
    printf(" %12s", "X/J");
  printf("  %-11s", "jit (J)");
  if (cfg_on[CFG_E])
    printf("  %-11s", "jit (E)");
  printf("\n");
}

static void print_row(int i, const int *bad)
{
  const bcase_t *k = &cases[i];
  stat_t s = stat_of(i);
  char jl[32];
  printf("%-6s %-2s %c%c b%d %4d", k->cblas ? "cblas" : "f77", k->f64 ? "d" : "s",
         k->ta ? 'T' : 'N', k->tb ? 'T' : 'N', k->beta, k->n);
  if (cfg_on[CFG_D])
    printf(" %9.1f %6.1f", s.med[CFG_D], gflops(k->n, s.med[CFG_D]));
  printf(" %9.1f %6.1f", s.med[CFG_O], gflops(k->n, s.med[CFG_O]));
  if (cfg_on[CFG_X])
    printf(" %9.1f %6.1f", s.med[CFG_X], gflops(k->n, s.med[CFG_X]));
  printf(" %9.1f %6.1f", s.med[CFG_J], gflops(k->n, s.med[CFG_J]));
  if (cfg_on[CFG_E])
    printf(" %9.1f", s.med[CFG_E]);
  if (cfg_on[CFG_K] && s.med[CFG_K] > 0)
    printf(" %9.1f %+7.1f", s.med[CFG_K], s.add_ns);
  else if (cfg_on[CFG_K])
    printf(" %9s %7s", "-", "-");
  printf(" %5.2f±%.2f", s.ratio[R_OJ], s.ratio_iqr[R_OJ]);
  if (cfg_on[CFG_E])
    printf(" %5.2f±%.2f", s.ratio[R_DE], s.ratio_iqr[R_DE]);
  if (cfg_on[CFG_X])
    printf(" %5.2f±%.2f%s", s.ratio[R_XJ], s.ratio_iqr[R_XJ], k->cblas || k->ta ? "°" : " ");
  for (int a = 0; a < NAGENT; a++) {
    if (!cfg_on[agent_cfg[a]])
      continue;
    jit_label(a, i, jl, sizeof jl);
    static const char *const below[] = {"", " tie", " SLOWER"};
    printf("  %-11s%s", jl, below[served_slower(a, i, &s)]);
  }
  printf("%s\n", bad[i] ? "  WRONG" : "");
}

static double percentile(double *v, size_t n, double p)
{
  if (!n)
    return 0;
  bn_median(v, n); /* sorts */
  size_t i = (size_t)ceil(p * (double)n) - 1;
  return v[i < n ? i : n - 1];
}

/* Geometric mean of ratio p over NN beta=1 cases of dtype f64, API cblas, n in [lo, hi]. */
static double geomean(int f64, int cblas, int lo, int hi, int p, int *count)
{
  double s = 0;
  int m = 0;
  for (int i = 0; i < ncases; i++) {
    const bcase_t *k = &cases[i];
    if (k->f64 != f64 || k->cblas != cblas || k->ta || k->tb || !k->beta || k->n < lo || k->n > hi)
      continue;
    stat_t st = stat_of(i);
    if (st.ratio[p] > 0)
      s += log(st.ratio[p]), m++;
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

static void print_peaks(void)
{
  printf("measured FMA peak per vector width (one core, agent/machine.c):");
  for (int w = 0; w < AG_ISA__COUNT; w++)
    if (machine.gflops[0][w] > 0)
      printf("  %d-bit f32 %.1f f64 %.1f GF/s;", ag_isa_bits(w), machine.gflops[0][w],
             machine.gflops[1][w]);
    else
      printf("  %d-bit: not on this CPU;", ag_isa_bits(w));
  printf("\n");
}

static void print_goals(void)
{
  static const char *const vs[NRATIO] = {"OpenBLAS best", "OpenBLAS default", "LIBXSMM"};
  printf("\ngoals (issue 13)\n");
  for (int f64 = 0; f64 < 2; f64++)
    for (int cblas = 0; cblas < 2; cblas++)
      for (int p = 0; p < NRATIO; p++) {
        int m;
        if (!cfg_on[ratio_num[p]] || !cfg_on[ratio_den[p]] || (p == R_XJ && cblas))
          continue;
        double g = geomean(f64, cblas, 4, 64, p, &m);
        printf("  %c %-5s NN b1 n=4..64 geomean speedup vs %-16s %5.2f (%d sizes)  goal >= %.2f: "
               "%s\n", f64 ? 'd' : 's', cblas ? "cblas" : "f77", vs[p], g, m, GOAL_VS,
               g >= GOAL_VS ? "met" : "MISSED");
      }
  for (int a = 0; a < NAGENT; a++) {
    if (!cfg_on[agent_cfg[a]])
      continue;
    int nserved = 0, n[3] = {0};
    char list[3][256] = {"", "", ""};
    size_t used[3] = {0};
    for (int i = 0; i < ncases; i++) {
      stat_t st = stat_of(i);
      nserved += served(a, i);
      int b = served_slower(a, i, &st), r = a == 0 ? R_OJ : R_DE;
      n[b]++;
      if (b && used[b] < sizeof list[b] - 40)
        used[b] += (size_t)snprintf(list[b] + used[b], sizeof list[b] - used[b], " %s(%.2f±%.2f)",
                                    cases[i].spec, st.ratio[r], st.ratio_iqr[r]);
    }
    printf("  %s (over %s): %d of %d variants serving calls measured slower than the original"
           "%s%s  goal 0: %s", cfg_name[agent_cfg[a]], core[agent_cfg[a]], n[2], nserved,
           n[2] ? ":" : "", list[2], n[2] ? "MISSED" : "met");
    printf("%s%s\n", n[1] ? "; ties (below 1 within half the IQR):" : "", list[1]);
  }
  int w = machine.widest;
  double top = machine.gflops[0][w];
  for (int cblas = 0; cblas < 2; cblas++) {
    int i = find_case(cblas ? "sCNN1:64" : "sFNN1:64");
    if (i < 0)
      continue;
    stat_t st = stat_of(i);
    /* Like with like: each round's batch against the peak its own worker measured right after
     * it (same process, same moments: a neighbour's load slows both), the median of those
     * shares; beside it, the median round against the fastest peak of the start. */
    double *share = calloc((size_t)rounds, sizeof *share), *pk = calloc((size_t)rounds, sizeof *pk);
    double *lshare = calloc((size_t)rounds, sizeof *lshare);
    double *lpk = calloc((size_t)rounds, sizeof *lpk);
    double *gj = calloc((size_t)rounds, sizeof *gj), *gl = calloc((size_t)rounds, sizeof *gl);
    double *cin = calloc((size_t)rounds, sizeof *cin), *eq = calloc((size_t)rounds, sizeof *eq);
    double *jin = calloc((size_t)rounds, sizeof *jin), *lin = calloc((size_t)rounds, sizeof *lin);
    size_t m = 0, ml = 0, mc = 0;
    for (int r = 0; share && pk && lshare && lpk && gj && gl && cin && eq && jin && lin &&
                    r < rounds; r++) {
      double t = ns[CFG_J][i * rounds + r], p = peak_now[i * rounds + r];
      double l = loop_now[i * rounds + r];
      if (t > 0 && p > 0)
        share[m] = gflops(64, t) / p, pk[m++] = p;
      if (t > 0 && p > 0 && l > 0)
        lshare[ml] = gflops(64, t) / l, lpk[ml] = l / p, gj[ml] = ghz_j[i * rounds + r],
        gl[ml++] = ghz_loop[i * rounds + r];
      double cj = ghz_jin[i * rounds + r], cl = ghz_lin[i * rounds + r];
      if (t > 0 && p > 0 && cj > 0 && cl > 0)
        cin[mc] = cj / cl, eq[mc] = gflops(64, t) / p * cl / cj, jin[mc] = cj, lin[mc++] = cl;
    }
    double sh = m ? bn_median(share, m) : 0, pmed = m ? bn_median(pk, m) : 0;
    double lsh = ml ? bn_median(lshare, ml) : 0, lp = ml ? bn_median(lpk, ml) : 0;
    double gjm = ml ? bn_median(gj, ml) : 0, glm = ml ? bn_median(gl, ml) : 0;
    double cinm = mc ? bn_median(cin, mc) : 0, eqm = mc ? bn_median(eq, mc) : 0;
    double jinm = mc ? bn_median(jin, mc) : 0, linm = mc ? bn_median(lin, mc) : 0;
    free(share), free(pk), free(lshare), free(lpk), free(gj), free(gl);
    free(cin), free(eq), free(jin), free(lin);
    double gf = gflops(64, st.med[CFG_J]), kgf = gflops(64, st.med[CFG_K]);
    double bgf = gflops(64, st.best[CFG_J]);
    printf("  s %-5s NN b1 n=64: opjit %.1f GF/s (kernel alone %.1f) = %.0f %% of the %d-bit f32 "
           "peak its worker measured right after each batch (median of %zu per-round shares; "
           "that peak's median %.1f GF/s)  goal >= %.0f %%: %s\n", cblas ? "cblas" : "f77", gf,
           kgf, 100 * sh, ag_isa_bits(w), m, pmed, 100 * GOAL_PEAK_FRAC,
           m && sh >= GOAL_PEAK_FRAC ? "met" : "MISSED");
    printf("  %-13s against the fastest peak of the start, %.1f GF/s: median round %.0f %%, "
           "fastest round %.1f GF/s = %.0f %%\n", "", top, top > 0 ? 100 * gf / top : 0, bgf,
           top > 0 ? 100 * bgf / top : 0);
    /* Not the goal: what the peak's rounds and the batch measure differently. The same loop
     * run once for as long as a batch, right after the peak's short rounds; the clock read
     * right after J's batch and right after that run. */
    printf("  %-13s the peak's loop timed as a batch is (one ~3 ms run): median %.0f %% of the "
           "peak's fastest short round; opjit against it %.0f %% (median of %zu per-round shares); "
           "the clock right after opjit's batches %.2f GHz, after the loop's %.2f GHz\n", "",
           100 * lp, 100 * lsh, ml, gjm, glm);
    /* The evidence for what the batch loses: the clock while it runs. Probes between calls read
     * it lower inside opjit's batches than inside the loop's (the kernel's operand loads: the
     * loop loads nothing), while probes right after either read nearly the same. */
    printf("  %-13s the clock inside the batches (a probe every 32 calls, their last two thirds): "
           "opjit's %.2f GHz, the loop's run as long %.2f GHz: %.3f (median of %zu per-round "
           "ratios); opjit at the loop's clock would be %.0f %% of that peak\n", "", jinm, linm,
           cinm, mc, 100 * eqm);
  }
  double worst = INFINITY;
  const char *worst_spec = "-";
  for (int i = 0; i < ncases; i++)
    if (cases[i].n >= 256) {
      stat_t st = stat_of(i);
      if (st.ratio[R_OJ] < worst)
        worst = st.ratio[R_OJ], worst_spec = cases[i].spec;
    }
  if (isfinite(worst))
    printf("  n >= 256: worst speedup vs OpenBLAS best %.3f (%s)  goal >= %.2f: %s\n", worst,
           worst_spec, GOAL_LARGE, worst >= GOAL_LARGE ? "met" : "MISSED");
}

/* ---- main ------------------------------------------------------------------------------- */

/* LIBXSMM_PRELOAD, or a library built with LIBXSMM_TOOL into the scratch folder; "" when
 * neither works (configuration X is then left out, xsmm_why says why). */
static void find_xsmm(void)
{
  const char *pre = getenv("LIBXSMM_PRELOAD");
  if (pre && *pre) {
    snprintf(xsmm, sizeof xsmm, "%s", pre);
    if (access(xsmm, R_OK) != 0) {
      snprintf(xsmm_why, sizeof xsmm_why, "LIBXSMM_PRELOAD=%.100s cannot be read", pre);
      xsmm[0] = 0;
    }
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
    snprintf(xsmm_why, sizeof xsmm_why, "%.100s did not build it (set LIBXSMM_PRELOAD)", tool);
    xsmm[0] = 0;
  }
}

int main(int argc, char **argv)
{
  rounds = argc > 1 ? atoi(argv[1]) : 11;
  const char *set = argc > 2 ? argv[2] : "default";
  int sessions = argc > 3 ? atoi(argv[3]) : 3;
  if (rounds < 1 || sessions < 1 ||
      (strcmp(set, "default") && strcmp(set, "all") && strcmp(set, "nn") &&
       strcmp(set, "large") && set_t(set) < 0)) {
    fprintf(stderr,
            "usage: %s [rounds [default|all|nn|large|nt|tn|tt [sessions]]]   (default 11 default "
            "3)\n",
            argv[0]);
    return 2;
  }
  const char *md = getenv("OPJIT_JIT_MAX_DIM");
  jit_max_dim = atoi(md && atoi(md) > 0 ? md : ag_opt_desc(AG_OPT_JIT_MAX_DIM)->def);
  blas_threads = bn_blas_threads();
  unsetenv("OPENBLAS_CORETYPE"); /* each configuration sets its own */
  make_cases(set);
  if (bn_scratch_new(scratch, sizeof scratch))
    return 1;
  const char *why_d = NULL;
  if (pick_cores())
    why_d = "the system BLAS names no OpenBLAS core (OPENBLAS_VERBOSE=2): O is that library";
  else if (strcmp(core[CFG_D], core[CFG_O]) == 0)
    why_d = "it is O's core, so they would repeat O and J";
  if (why_d)
    cfg_on[CFG_D] = cfg_on[CFG_E] = 0;
  find_xsmm();
  cfg_on[CFG_X] = xsmm[0] != 0;
  cfg_on[CFG_K] = OPJIT_JIT_MODULE_PATH != NULL && access(OPJIT_JIT_MODULE_PATH, R_OK) == 0;
  for (int c = 0; c < NCFG; c++)
    if (!(ns[c] = calloc((size_t)ncases * (size_t)rounds * (size_t)sessions, sizeof *ns[c])))
      return 1;
  size_t per_round = (size_t)ncases * (size_t)rounds * (size_t)sessions;
  if (!(peak_now = calloc(per_round, sizeof *peak_now)) ||
      !(loop_now = calloc(per_round, sizeof *loop_now)) ||
      !(ghz_j = calloc(per_round, sizeof *ghz_j)) ||
      !(ghz_loop = calloc(per_round, sizeof *ghz_loop)) ||
      !(ghz_lin = calloc(per_round, sizeof *ghz_lin)) ||
      !(ghz_jin = calloc(per_round, sizeof *ghz_jin)))
    return 1;
  if (!(kcompile_ms = calloc((size_t)MAX_CASES * 8, sizeof *kcompile_ms)))
    return 1;
  ag_machine_measure_best(&machine, 5);

  char cpu[256];
  bn_cpu_name(cpu, sizeof cpu);
  printf("small GEMMs: ns per call and GF/s (2 n^3 / ns), %s on %s (widest vectors: %s)\n",
         blas_threads, cpu, ag_isa_name(machine.widest));
  print_peaks();
  printf("D = OpenBLAS on the core it picks itself: %s%s%s%s\n", core[CFG_D][0] ? core[CFG_D] : "?",
         coretype[CFG_D][0] ? " (forced: BENCH_DEFAULT_CORETYPE=" : "", coretype[CFG_D],
         coretype[CFG_D][0] ? ")" : "");
  if (why_d)
    printf("    D and E left out: %s\n", why_d);
  printf("O = OpenBLAS on its best core for this CPU: %s (%s%s%s%s)\n", core[CFG_O],
         coretype[CFG_O][0] ? "OPENBLAS_CORETYPE=" : "its own choice", coretype[CFG_O],
         best_note[0] ? "; " : "", best_note);
  if (cfg_on[CFG_X])
    printf("X = LIBXSMM preloaded (%s) over O's core\n", xsmm);
  else
    printf("X = LIBXSMM: left out, %s\n", xsmm_why);
  printf("J = opjit over O's core (LD_PRELOAD=%s, OPJIT_SAMPLE_HZ=0, OPJIT_HOT_CALLS=%s, "
         "OPJIT_HOT_PAYBACK=0; variants compiled before timing)\n", agent_path(), HOT_CALLS);
  if (cfg_on[CFG_E])
    printf("E = opjit over D's core (%s)\n", core[CFG_D]);
  printf("K = the JIT's kernel called directly (%s)\n",
         cfg_on[CFG_K] ? OPJIT_JIT_MODULE_PATH : "absent: built without LLVM");
  printf("%d cases (%s); %d sessions (a worker per configuration) x %d rounds per case (one "
         "~3 ms batch per configuration, the order reversing every round); medians over the "
         "rounds\n", ncases, set, sessions, rounds);
  fflush(stdout);

  signal(SIGPIPE, SIG_IGN); /* a worker that died is reported by its answer missing */
  uint64_t t0 = bn_now_ns();
  for (int si = 0; si < sessions; si++) {
    int failed = session(si, sessions);
    for (int a = 0; a < NAGENT && !failed; a++)
      failed = cfg_on[agent_cfg[a]] && read_jit_db(a, si);
    if (failed) {
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

  print_head();
  for (int i = 0; i < ncases; i++) {
    if (i && (cases[i].f64 != cases[i - 1].f64 || cases[i].cblas != cases[i - 1].cblas ||
              cases[i].ta != cases[i - 1].ta || cases[i].tb != cases[i - 1].tb ||
              cases[i].beta != cases[i - 1].beta))
      printf("\n");
    print_row(i, bad);
  }
  printf("\nO/J, D/E, X/J: medians of per-round speedups (> 1: opjit faster) +- half their IQR; "
         "° LIBXSMM passes this case to OpenBLAS (CBLAS, or TransA = T)\n");
  printf("J-K: median per-round difference between opjit through the agent and its kernel "
         "called directly\n");
  printf("jit (J), jit (E): the variant's state in every session's database, with the share of "
         "the calls it served; orig = stayed on the original library, never compiled (n > "
         "OPJIT_JIT_MAX_DIM=%d, or a call too long for a duel whose library runs at 3/4 of one "
         "core's peak or more: opjit top --why); SLOWER: it served calls and measured slower "
         "than its original here (the median ratio below 1 by more than half its IQR; tie: "
         "below 1 within it)\n", jit_max_dim);

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
  print_goals();
  print_peaks();
  printf("correctness: %s\n", nbad ? "WRONG results (see stderr)" : "every configuration within "
                                     "its bound of the reference and of each other");
  fflush(stdout);
  bn_scratch_free(scratch);
  return nbad ? 1 : 0;
}
