/* SPDX-License-Identifier: MIT */
/* The machine model: detection agrees with what the kernel reports, the measurement fills the
 * widths this CPU has and only those (and runs the benchmarks' loop in pieces), OPJIT_ISA's
 * parsing and fallback, the store round trip (a real SQLite file), and the agent storing the
 * model once per CPU and reusing it. No timing is asserted: only structure (a width measured or
 * not, a figure positive and finite). */
#define _GNU_SOURCE
#include "agent/background.h"
#include "agent/machine.h"
#include "agent/opt.h"
#include "tests/common/fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char cpuinfo[1 << 16];

/* The value of cpuinfo's first "key : value" line. */
static const char *cpuinfo_field(const char *key, char *out, size_t len)
{
  FILE *f = fopen("/proc/cpuinfo", "r");
  cr_assert_not_null(f);
  size_t n = fread(cpuinfo, 1, sizeof cpuinfo - 1, f);
  fclose(f);
  cpuinfo[n] = 0;
  out[0] = 0;
  for (const char *l = cpuinfo; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
    if (strncmp(l, key, strlen(key)) == 0 && strchr(" \t:", l[strlen(key)])) {
      const char *v = strchr(l, ':') + 2;
      snprintf(out, len, "%.*s", (int)strcspn(v, "\n"), v);
      break;
    }
  return out;
}

static int has_flag(const char *flags, const char *word)
{
  size_t n = strlen(word);
  for (const char *p = flags; (p = strstr(p, word)); p += n)
    if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
      return 1;
  return 0;
}

Test(machine, detection_agrees_with_the_kernels_cpu_flags)
{
  static const struct {
    unsigned bit;
    const char *flag;
  } map[] = {{AG_X(SSE2), "sse2"},         {AG_X(AVX), "avx"},
             {AG_X(FMA), "fma"},           {AG_X(AVX2), "avx2"},
             {AG_X(AVX512F), "avx512f"},   {AG_X(AVX512BW), "avx512bw"},
             {AG_X(AVX512VL), "avx512vl"}, {AG_X(AVX512DQ), "avx512dq"},
             {AG_X(AVX512VNNI), "avx512_vnni"}, {AG_X(AVX512BF16), "avx512_bf16"},
             {AG_X(AVX512FP16), "avx512_fp16"}};
  char flags[4096];
  cpuinfo_field("flags", flags, sizeof flags);
  ag_machine_t m;
  ag_machine_detect(&m);
  for (size_t i = 0; i < sizeof map / sizeof *map; i++)
    cr_expect_eq(!!(m.exts & map[i].bit), has_flag(flags, map[i].flag), "%s: detected %d",
                 map[i].flag, !!(m.exts & map[i].bit));
  int want = has_flag(flags, "avx512f") ? AG_ISA_AVX512
             : has_flag(flags, "avx2") && has_flag(flags, "fma") ? AG_ISA_AVX2
                                                                 : AG_ISA_SSE2;
  cr_expect_eq(m.widest, want, "widest %s", ag_isa_name(m.widest));
  cr_expect_eq(m.vregs, want == AG_ISA_AVX512 ? 32 : 16);
}

Test(machine, measures_the_supported_widths_and_only_those)
{
  ag_machine_t m;
  ag_machine_detect(&m);
  ag_machine_measure(&m);
  for (int w = 0; w < 3; w++)
    for (int d = 0; d < 2; d++) {
      double g = m.gflops[d][w];
      if (w <= m.widest)
        cr_expect(g > 0 && isfinite(g), "%d-bit %s: %g GF/s", 128 << w, d ? "f64" : "f32", g);
      else
        cr_expect_eq(g, 0, "%d-bit is not supported here, yet measured %g", 128 << w, g);
    }
  cr_expect(m.timer_ns > 0 && isfinite(m.timer_ns), "clock read %g ns", m.timer_ns);
  cr_expect_gt(m.measured_ns, 0);
  cr_expect_eq(m.stored, 0);
}

static int pieces_seen;
static void count_piece(void *arg) { pieces_seen += *(int *)arg; }

Test(machine, the_loop_in_pieces_calls_back_after_every_every_th_and_only_on_its_widths)
{
  ag_machine_t m;
  ag_machine_detect(&m);
  int one = 1;
  pieces_seen = 0;
  double g = ag_machine_fma_pieces(&m, m.widest, 0, 3000, 100, 32, count_piece, &one);
  cr_expect(g > 0 && isfinite(g), "%g GF/s", g);
  cr_expect_eq(pieces_seen, 3, "called back %d times for 100 pieces, every 32nd", pieces_seen);
  pieces_seen = 0;
  cr_expect_eq(ag_machine_fma_pieces(&m, m.widest + 1, 0, 3000, 100, 32, count_piece, &one), 0);
  cr_expect_eq(ag_machine_fma_pieces(&m, m.widest, 1, 3000, 0, 32, count_piece, &one), 0);
  cr_expect_eq(pieces_seen, 0, "a width this CPU lacks, or no pieces, runs nothing");
}

static const char *fake_env;
static const char *isa_env(const char *name) { return strcmp(name, "OPJIT_ISA") ? NULL : fake_env; }
static char reported[512];
static void report(const char *line) { snprintf(reported, sizeof reported, "%s", line); }

/* OPJIT_ISA's value as the option parser leaves it; reported holds its warning, if any. */
static long parse_isa(const char *value)
{
  ag_opts_t o;
  fake_env = value;
  reported[0] = 0;
  ag_opts_parse(&o, isa_env, report);
  long v = o.num[AG_OPT_ISA];
  ag_opts_free(&o);
  return v;
}

Test(machine, opjit_isa_parses_and_falls_back_with_one_clear_line)
{
  cr_expect_eq(parse_isa(NULL), 0, "auto by default");
  cr_expect_eq(parse_isa("AVX2"), 1 + AG_ISA_AVX2);
  cr_expect_eq(parse_isa("avx512"), 1 + AG_ISA_AVX512);
  cr_expect_eq(parse_isa("sse2"), 1 + AG_ISA_SSE2);
  cr_expect_str_empty(reported);
  cr_expect_eq(parse_isa("avx1024"), 0, "a bad value keeps auto");
  cr_expect(strstr(reported, "OPJIT_ISA='avx1024'") && strstr(reported, "auto"), "%s", reported);

  char why[256];
  unsigned sse = AG_X(SSE2), avx2 = sse | AG_X(AVX) | AG_X(FMA) | AG_X(AVX2);
  unsigned avx512 = avx2 | AG_X(AVX512F);
  cr_expect_eq(ag_machine_isa_choose(0, avx512, why, sizeof why), AG_ISA_AVX512);
  cr_expect_eq(ag_machine_isa_choose(0, avx2, why, sizeof why), AG_ISA_AVX2);
  cr_expect_eq(ag_machine_isa_choose(0, sse, why, sizeof why), AG_ISA_SSE2);
  cr_expect_eq(ag_machine_isa_choose(0, sse | AG_X(AVX2), why, sizeof why), AG_ISA_SSE2,
               "AVX2 without FMA is not the avx2 level");
  cr_expect_eq(ag_machine_isa_choose(1 + AG_ISA_AVX2, avx512, why, sizeof why), AG_ISA_AVX2,
               "narrower than the CPU: honoured");
  cr_expect_str_empty(why);
  cr_expect_eq(ag_machine_isa_choose(1 + AG_ISA_SSE2, avx512, why, sizeof why), AG_ISA_SSE2);
  cr_expect_str_empty(why);
  cr_expect_eq(ag_machine_isa_choose(1 + AG_ISA_AVX512, avx2, why, sizeof why), AG_ISA_AVX2,
               "wider than the CPU: its widest");
  cr_expect(strstr(why, "OPJIT_ISA='avx512'") && strstr(why, "AVX-512F") &&
                strstr(why, "using 'avx2'"), "%s", why);
  cr_expect_eq(ag_machine_isa_choose(1 + AG_ISA_AVX2, sse, why, sizeof why), AG_ISA_SSE2);
  cr_expect(strstr(why, "OPJIT_ISA='avx2'") && strstr(why, "using 'sse2'"), "%s", why);
}

/* Stored kernels are keyed by the CPU's model and /proc/cpuinfo flags, and by the ISA level
 * too where the process uses another than the flags claim: OPJIT_ISA, or a CPUID that offers
 * less (valgrind hides AVX-512 from its programs), so that no process places a kernel wider
 * than it can run. */
Test(machine, kernels_are_keyed_by_the_isa_a_process_runs_where_the_flags_claim_another)
{
  cr_expect_eq(ag_machine_flags_widest("fpu sse2 avx"), AG_ISA_SSE2);
  cr_expect_eq(ag_machine_flags_widest("sse2 avx avx2"), AG_ISA_SSE2, "AVX2 without FMA");
  cr_expect_eq(ag_machine_flags_widest("sse2 fma avx avx2 bmi2"), AG_ISA_AVX2);
  cr_expect_eq(ag_machine_flags_widest("sse2 fma avx2 avx512_fp16 avx512bw"), AG_ISA_AVX2,
               "no avx512f: other AVX-512 words do not count");
  cr_expect_eq(ag_machine_flags_widest("avx512f fma avx2"), AG_ISA_AVX512);
  cr_expect_eq(ag_machine_flags_widest("sse2 xavx2 fma"), AG_ISA_SSE2, "whole words only");

  static const char *const claims[] = {"sse2", "sse2 avx fma avx2", "sse2 avx fma avx2 avx512f"};
  int isa = ag_machine_isa(), bare = 0;
  char want[64];
  snprintf(want, sizeof want, "cpu [flags 1] isa=%s", ag_isa_name(isa));
  for (int i = 0; i < 3; i++) {
    char key[128];
    ag_machine_object_key("cpu [flags 1]", claims[i], key, sizeof key);
    if (ag_machine_flags_widest(claims[i]) == isa) {
      bare++;
      cr_expect_str_eq(key, "cpu [flags 1]", "%s", claims[i]);
    } else {
      cr_expect_str_eq(key, want, "%s", claims[i]);
    }
  }
  cr_expect_eq(bare, 1, "exactly one claim is this process's level, %s", ag_isa_name(isa));
}

Test(machine, round_trips_through_the_store, .init = fx_setup, .fini = fx_teardown)
{
  ag_machine_t m, back;
  ag_machine_detect(&m);
  ag_machine_measure(&m);
  m.settled = 1;
  st_machine_t rec, got;
  ag_machine_to_store(&m, "Test CPU [flags 1]", &rec);
  st_db_t *db = fx_open(fx_db, ST_OPEN_CREATE);
  cr_assert_eq(st_machine_save(db, &rec, NULL, 0), ST_OK);
  cr_assert_eq(st_machine_load(db, "Test CPU [flags 1]", &got), ST_OK);
  st_close(db);
  ag_machine_from_store(&got, &back);
  cr_expect_eq(back.exts, m.exts, "ISA list %s", got.isa);
  cr_expect_eq(back.widest, m.widest);
  cr_expect_eq(back.vregs, m.vregs);
  cr_expect_eq(memcmp(back.gflops, m.gflops, sizeof m.gflops), 0);
  cr_expect_eq(back.timer_ns, m.timer_ns);
  cr_expect_eq(back.measured_ns, m.measured_ns);
  cr_expect_eq(back.settled, 1);
  cr_expect_eq(got.method, AG_MACHINE_METHOD);
  cr_expect_eq(back.stored, 1);
}

Test(machine, a_merge_keeps_the_faster_peaks_and_settles_only_on_agreement)
{
  ag_machine_t m = {.widest = AG_ISA_AVX512, .timer_ns = 20, .measured_ns = 1};
  m.gflops[0][0] = 50, m.gflops[0][1] = 60, m.gflops[1][1] = 50; /* 256-bit f32 disturbed */
  ag_machine_t x = {.timer_ns = 25, .measured_ns = 2};
  x.gflops[0][0] = 51, x.gflops[0][1] = 103, x.gflops[1][1] = 49, x.gflops[1][2] = 90;
  cr_expect_eq(ag_machine_merge(&m, &x), 0, "60 and 103 GF/s disagree");
  cr_expect_eq(m.settled, 0);
  cr_expect_eq(m.gflops[0][0], 51);
  cr_expect_eq(m.gflops[0][1], 103, "the faster kept");
  cr_expect_eq(m.gflops[1][1], 50);
  cr_expect_eq(m.gflops[1][2], 90, "a width only the new one has is taken");
  cr_expect_eq(m.timer_ns, 20, "the cheaper clock read kept");
  cr_expect_eq(m.measured_ns, 2);
  cr_expect_eq(m.widest, AG_ISA_AVX512, "the model's extensions stay");
  /* within 5 % on the peaks that had not agreed */
  ag_machine_t y = {.timer_ns = 19, .measured_ns = 3};
  y.gflops[0][0] = 49, y.gflops[0][1] = 99, y.gflops[1][1] = 51, y.gflops[1][2] = 88;
  cr_expect_eq(ag_machine_merge(&m, &y), 1);
  cr_expect_eq(m.settled, 1);
  cr_expect_eq(m.gflops[0][1], 103);
  cr_expect_eq(m.gflops[1][1], 51);
  cr_expect_eq(m.timer_ns, 19);
  ag_machine_t z = {.measured_ns = 4};
  z.gflops[0][0] = 20, z.gflops[0][1] = 40;
  cr_expect_eq(ag_machine_merge(&m, &z), 1, "a disturbed measurement unsettles nothing");
  cr_expect_eq(m.gflops[0][1], 103);
}

Test(machine, each_peak_settles_in_whichever_measurement_agrees_with_it)
{
  ag_machine_t m = {.widest = AG_ISA_AVX2, .measured_ns = 1};
  m.gflops[0][0] = 60, m.gflops[0][1] = 120, m.gflops[1][0] = 30, m.gflops[1][1] = 60;
  ag_machine_t x = {.measured_ns = 2}; /* all but f64 256-bit agree */
  x.gflops[0][0] = 59, x.gflops[0][1] = 119, x.gflops[1][0] = 30, x.gflops[1][1] = 52;
  cr_expect_eq(ag_machine_merge(&m, &x), 0);
  cr_expect_eq(m.agreed, 0x1 | 0x2 | 0x8, "f32 128 and 256, f64 128");
  ag_machine_t y = {.measured_ns = 3}; /* f64 256-bit agrees, f32 128-bit disturbed */
  y.gflops[0][0] = 41, y.gflops[0][1] = 118, y.gflops[1][0] = 29.5, y.gflops[1][1] = 59;
  cr_expect_eq(ag_machine_merge(&m, &y), 1, "every peak has agreed once");
  cr_expect_eq(m.gflops[0][0], 60);

  /* A peak measured faster than the model's takes its agreement back. */
  ag_machine_t a = {.widest = AG_ISA_AVX2, .measured_ns = 1};
  a.gflops[0][0] = 40, a.gflops[0][1] = 120;
  ag_machine_t b = {.measured_ns = 2};
  b.gflops[0][0] = 41, b.gflops[0][1] = 100;
  cr_expect_eq(ag_machine_merge(&a, &b), 0);
  ag_machine_t c = {.measured_ns = 3};
  c.gflops[0][0] = 60, c.gflops[0][1] = 119;
  cr_expect_eq(ag_machine_merge(&a, &c), 0, "40 and 41 agreed, but 60 was the pipe's rate");
  cr_expect_eq(a.agreed, 0x2);
  cr_expect_eq(a.gflops[0][0], 60);
  cr_expect_eq(ag_machine_merge(&a, &c), 1);

  /* The store keeps what has agreed: a model half agreed is measured again, and settles there. */
  st_machine_t rec;
  ag_machine_t back;
  ag_machine_to_store(&a, "cpu", &rec);
  ag_machine_from_store(&rec, &back);
  cr_expect_eq(back.settled, 1);
  ag_machine_to_store(&m, "cpu", &rec);
  rec.settled = 0x8;
  ag_machine_from_store(&rec, &back);
  cr_expect_eq(back.settled, 0);
  cr_expect_eq(ag_machine_merge(&back, &y), 0, "f32 256-bit agrees, 128-bit still disturbed");
  cr_expect_eq(ag_machine_merge(&back, &x), 1);
}

/* Runs blas_prog under the agent with the database db and extra environment (NULL-ended);
 * returns its exit status, stderr in err. */
static int run_blas_prog(const char *db, const char *const *env, char *err, size_t errlen)
{
  char errpath[128], out[128];
  snprintf(errpath, sizeof errpath, "%s/stderr", fx_dir);
  snprintf(out, sizeof out, "%s/out", fx_dir);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    /* a sanitizer's runtime first, as the integration harness does */
    setenv("LD_PRELOAD", *OPJIT_TEST_PRELOAD ? OPJIT_TEST_PRELOAD ":" OPJIT_BUILD_DIR "/libopjit.so"
                                             : OPJIT_BUILD_DIR "/libopjit.so", 1);
    setenv("OPJIT_DB", db, 1);
    setenv("OPJIT_MODE", "jit", 1); /* the mode that weighs the model (profile mode starts none) */
    setenv("OPJIT_HOT_CALLS", "1073741824", 1); /* nothing compiled: the run weighs the model */
    setenv("OPJIT_LOG", "info", 1);
    for (; env && *env; env++)
      putenv((char *)*env);
    if (!freopen(errpath, "w", stderr))
      _exit(126);
    execl(OPJIT_BUILD_DIR "/blas_prog", "blas_prog", out, "1", "200", (char *)NULL);
    _exit(127);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  FILE *f = fopen(errpath, "r");
  size_t n = f ? fread(err, 1, errlen - 1, f) : 0;
  err[n] = 0;
  if (f)
    fclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* One integer from the database at path. */
static int64_t query(const char *path, const char *sql, const char *arg)
{
  sqlite3 *db;
  sqlite3_stmt *st;
  cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
  sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
  int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

/* Whether the model stored for key in the database at path has settled. */
static int stored_settled(const char *path, const char *key)
{
  st_machine_t rec;
  ag_machine_t m;
  st_db_t *db = fx_open(path, ST_OPEN_READONLY);
  int rc = st_machine_load(db, key, &rec);
  st_close(db);
  cr_assert_eq(rc, ST_OK, "the model of %s is stored", key);
  ag_machine_from_store(&rec, &m);
  return m.settled;
}

Test(machine, the_agent_measures_once_per_cpu_and_reuses_the_stored_model, .init = fx_setup,
     .fini = fx_teardown)
{
  const char *db = fx_db;
  char err[8192], model[256], flags[4096], key[320], method[16];
  snprintf(method, sizeof method, "%d", AG_MACHINE_METHOD);
  cpuinfo_field("flags", flags, sizeof flags);
  ag_machine_cpu_key(cpuinfo_field("model name", model, sizeof model), flags, key, sizeof key);
  cr_assert_eq(run_blas_prog(db, NULL, err, sizeof err), 0, "%s", err);
  cr_expect(strstr(err, "machine model measured in"), "the first run measures: %s", err);
  int64_t at = query(db, "SELECT measured_ns FROM machine_models WHERE cpu=?", key);
  cr_assert_gt(at, 0, "the model of this CPU (%s) is stored", key);
  cr_expect_eq(query(db, "SELECT count(*) FROM machine_models WHERE f32_128 > 0 AND"
                         " timer_ns > 0 AND method=?", method), 1);

  /* A run shorter than the 0.1 s before the second measurement leaves the model unsettled; the
   * next run measures it again at once, until each peak has agreed (idle, the second run; a
   * loaded machine can take a few). */
  int runs = 1;
  for (; runs < 8 && !stored_settled(db, key); runs++) {
    cr_assert_eq(run_blas_prog(db, NULL, err, sizeof err), 0, "%s", err);
    cr_expect(strstr(err, "machine model measured again"), "a model not settled: %s", err);
  }
  cr_assert(stored_settled(db, key), "not settled after %d runs", runs);
  at = query(db, "SELECT measured_ns FROM machine_models WHERE cpu=?", key);
  cr_assert_eq(run_blas_prog(db, NULL, err, sizeof err), 0, "%s", err);
  cr_expect_null(strstr(err, "machine model measured"), "a settled model is reused: %s", err);
  cr_expect_eq(query(db, "SELECT measured_ns FROM machine_models WHERE cpu=?", key), at);

  /* A model from an older measurement method is measured again. */
  sqlite3 *raw;
  cr_assert_eq(sqlite3_open(db, &raw), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(raw, "UPDATE machine_models SET method=0", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(raw);
  cr_assert_eq(run_blas_prog(db, NULL, err, sizeof err), 0, "%s", err);
  cr_expect(strstr(err, "machine model measured"), "%s", err);
  cr_expect_gt(query(db, "SELECT measured_ns FROM machine_models WHERE cpu=?", key), at);
}

Test(machine, profile_mode_neither_measures_nor_reads_a_model, .init = fx_setup,
     .fini = fx_teardown)
{
  char err[8192];
  cr_assert_eq(run_blas_prog(fx_db, (const char *[]){"OPJIT_MODE=profile", NULL}, err,
                             sizeof err), 0, "%s", err);
  cr_expect_null(strstr(err, "machine model"), "%s", err);
  cr_expect_gt(query(fx_db, "SELECT count(*) FROM runs WHERE status='exited'", NULL), 0,
               "the run is recorded");
  cr_expect_eq(query(fx_db, "SELECT count(*) FROM machine_models", NULL), 0,
               "no model: nothing in profile mode weighs one");
}

Test(machine, a_bad_opjit_isa_warns_once_and_the_program_runs, .init = fx_setup,
     .fini = fx_teardown)
{
  const char *db = fx_db;
  char err[8192];
  cr_assert_eq(run_blas_prog(db, (const char *[]){"OPJIT_ISA=avx9000", NULL}, err, sizeof err), 0,
               "%s", err);
  const char *line = strstr(err, "OPJIT_ISA='avx9000'");
  cr_expect(line && strstr(line, "auto"), "%s", err);
  cr_expect(line && !strstr(line + 1, "OPJIT_ISA='avx9000'"), "one line only: %s", err);
}

/* ---- the agent's model for a process (machine_run.c, compiled into this test) ------------- */

/* What machine_run.c takes from the agent: its options, its folder (the store module), its
 * SQLite lock, and its threads' keeping off the host's (tcount.c; no host here). */
ag_opts_t ag_opts;
void ag_agent_keep_off_host(void) {}
const char *ag_self_dir(void) { return OPJIT_BUILD_DIR; }
static pthread_mutex_t sqlite_mu = PTHREAD_MUTEX_INITIALIZER;
void ag_sqlite_lock(void) { pthread_mutex_lock(&sqlite_mu); }
void ag_sqlite_unlock(void) { pthread_mutex_unlock(&sqlite_mu); }

static const st_api_t store_api = {.abi = ST_API_ABI, .errstr = st_errstr,
                                   .machine_save = st_machine_save,
                                   .machine_load = st_machine_load};

/* Points OPJIT_DB at fx_db for machine_run.c. */
static char *use_db(void)
{
  setenv("OPJIT_DB", fx_db, 1);
  ag_opts_parse(&ag_opts, (ag_getenv_fn)getenv, NULL);
  return fx_db;
}

/* Waits (bounded: the thread measures in ~20 ms) until the process's model is ready. */
static const ag_machine_t *wait_model(void)
{
  for (int i = 0; i < 5000 && !ag_machine(); i++)
    usleep(1000);
  cr_assert_not_null(ag_machine(), "the model never became ready");
  return ag_machine();
}

Test(machine_run, compile_cost_is_the_familys_median_else_the_others_else_the_guess)
{
  cr_expect_eq(ag_machine_compile_ns("gemm"), AG_MACHINE_COMPILE_GUESS_NS, "nothing measured");
  ag_machine_note_compile("gemm", 9000000);
  ag_machine_note_compile("gemm", 5000000);
  ag_machine_note_compile("gemm", 7000000);
  cr_expect_eq(ag_machine_compile_ns("gemm"), 7000000);
  ag_machine_note_compile("dot", 1000000);
  ag_machine_note_compile("mm", 3000000);
  cr_expect_eq(ag_machine_compile_ns("add_rms_mul"), 3000000,
               "a family never compiled: the median of the others' medians (1, 3, 7 ms)");
  for (int i = 0; i < 40; i++)
    ag_machine_note_compile("dot", 2000000);
  cr_expect_eq(ag_machine_compile_ns("dot"), 2000000, "the window holds the latest compiles");
}

/* A database (opened) that stores cpu's settled model, this CPU's detection with a 128-bit f32
 * peak of 11 GF/s, a clock read of 3 ns, measured at 777, and the compile notes given; *m the
 * model. */
static st_db_t *settled_db(const char *cpu, const st_compile_note_t *notes, size_t n,
                               ag_machine_t *m)
{
  ag_machine_detect(m);
  m->gflops[0][0] = 11, m->timer_ns = 3, m->measured_ns = 777, m->settled = 1;
  st_machine_t rec;
  ag_machine_to_store(m, cpu, &rec);
  st_db_t *db = fx_open(use_db(), ST_OPEN_CREATE);
  cr_assert_eq(st_machine_save(db, &rec, notes, n), ST_OK);
  return db;
}

Test(machine_run, loads_the_stored_model_merges_compile_times_and_saves_only_what_is_new,
     .init = fx_setup, .fini = fx_teardown)
{
  ag_machine_t m;
  st_machine_t got;
  st_db_t *db = settled_db("Stored CPU", (st_compile_note_t[]){{"gemm", 4000000},
                                                                  {"gemm", 6000000}}, 2, &m);
  ag_machine_note_compile("gemm", 20000000); /* before the stored times are read */
  uint32_t quiet = ag_bg_mark();
  st_machine_t read; /* as the writer reads it on its connection */
  cr_assert_eq(st_machine_load(db, "Stored CPU", &read), ST_OK);
  ag_machine_start("Stored CPU", &read, 1);
  cr_assert_not_null(ag_machine(), "a settled model is published by the start: no thread");
  const ag_machine_t *live = ag_machine();
  cr_expect_eq(ag_machine_final(), 1, "a settled model is final as loaded");
  cr_expect(ag_bg_quiet_since(quiet), "loading is no background work the bursts avoid");
  cr_expect_eq(live->stored, 1, "loaded, not measured");
  cr_expect_eq(live->gflops[0][0], 11);
  cr_expect_eq(ag_machine_peak_gflops(128, 0), 11);
  cr_expect_eq(ag_machine_peak_gflops(512, 1), m.gflops[1][2]);
  cr_expect_eq(ag_machine_peak_gflops(96, 0), 0, "no such width");
  cr_expect_eq(ag_machine_timer_ns(), 3);
  cr_expect_eq(ag_machine_compile_ns("gemm"), 6000000, "median of 4, 6 (stored) and 20 ms");
  cr_expect(ag_machine_compile_measured("gemm"));
  cr_expect(ag_machine_compile_measured(NULL), "a kernel family was measured");
  cr_expect_not(ag_machine_compile_measured(AG_MACHINE_LLVM_LOAD), "LLVM's load never was");
  cr_expect_not(ag_machine_compile_measured("dot"));

  cr_assert_eq(ag_machine_save(&store_api, db, 0), ST_OK);
  cr_assert_eq(st_machine_load(db, "Stored CPU", &got), ST_OK);
  cr_expect_eq(got.measured_ns, 777, "the stored model is not written again");
  cr_expect_eq(got.families[0].n, 3, "this process's one compile was added");
  cr_assert_eq(ag_machine_save(&store_api, db, 0), ST_OK);
  cr_assert_eq(st_machine_load(db, "Stored CPU", &got), ST_OK);
  cr_expect_eq(got.families[0].n, 3, "and only once");
  st_close(db);
}

Test(machine_run, a_stored_model_not_settled_is_measured_again_and_keeps_the_faster_peaks,
     .init = fx_setup, .fini = fx_teardown)
{
  ag_machine_t m;
  ag_machine_detect(&m);
  ag_machine_measure(&m);
  double real = m.gflops[0][0];
  m.gflops[0][0] = real / 4, m.timer_ns = 3; /* as a disturbed measurement left it */
  st_machine_t rec, got;
  ag_machine_to_store(&m, "Unsettled CPU", &rec);
  st_db_t *db = fx_open(use_db(), ST_OPEN_CREATE);
  cr_assert_eq(st_machine_save(db, &rec, NULL, 0), ST_OK);
  ag_machine_start("Unsettled CPU", NULL, -1); /* no writer's connection: its thread reads it */
  cr_assert(ag_machine_wait(10000), "final within the 3 s schedule");
  const ag_machine_t *live = ag_machine();
  /* The first measurement here finds 4x the stored 128-bit peak: no agreement; the ones after
   * agree with it (idle) or the schedule ends (a loaded machine): either way the faster kept. */
  cr_expect_gt(live->gflops[0][0], real / 2, "%g GF/s, stored %g", live->gflops[0][0], real / 4);
  cr_expect_eq(live->timer_ns, 3, "the cheaper clock read kept");
  cr_expect_eq(live->stored, 0);
  cr_assert_eq(ag_machine_save(&store_api, db, 1), ST_OK);
  cr_assert_eq(st_machine_load(db, "Unsettled CPU", &got), ST_OK);
  cr_expect_eq(got.gflops[0][0], live->gflops[0][0], "the merged model is stored");
  ag_machine_t back;
  ag_machine_from_store(&got, &back);
  cr_expect_eq(back.settled, live->settled);
  if (!live->settled)
    cr_expect_eq(back.agreed, live->agreed, "the peaks that agreed are stored");
  cr_expect_gt(got.measured_ns, rec.measured_ns);
  st_close(db);
}

Test(machine_run, measures_a_cpu_with_nothing_stored_and_the_final_save_stores_it,
     .init = fx_setup, .fini = fx_teardown)
{
  st_db_t *db = fx_open(use_db(), ST_OPEN_CREATE);
  uint32_t quiet = ag_bg_mark();
  ag_machine_start("New CPU", NULL, 0); /* the writer found none stored */
  cr_assert_eq(ag_machine_save(&store_api, db, 1), ST_OK);
  cr_expect_not(ag_bg_quiet_since(quiet), "a measurement is background work: bursts skip it");
  st_machine_t got;
  cr_assert_eq(st_machine_load(db, "New CPU", &got), ST_OK, "the final save waits for it");
  const ag_machine_t *live = wait_model();
  cr_expect_eq(live->stored, 0);
  cr_expect_eq(got.measured_ns, live->measured_ns);
  cr_expect_eq(got.gflops[0][0], live->gflops[0][0]);
  st_close(db);
}

Test(machine_run, llvms_load_alone_is_no_kernel_familys_compile, .init = fx_setup,
     .fini = fx_teardown)
{
  ag_machine_t m;
  st_machine_t read;
  st_db_t *db =
      settled_db("Known CPU", (st_compile_note_t[]){{AG_MACHINE_LLVM_LOAD, 12000000}}, 1, &m);
  cr_assert_eq(st_machine_load(db, "Known CPU", &read), ST_OK);
  ag_machine_start("Known CPU", &read, 1);
  cr_assert_not_null(ag_machine(), "settled: published at once");
  cr_expect(ag_machine_compile_measured(AG_MACHINE_LLVM_LOAD));
  cr_expect_not(ag_machine_compile_measured(NULL), "no kernel's compile measured");
  cr_expect_eq(ag_machine_compile_ns("gemm"), AG_MACHINE_COMPILE_GUESS_NS,
               "LLVM's load stands for no kernel");
  ag_machine_note_compile("mm", 6000000);
  cr_expect(ag_machine_compile_measured(NULL));
  cr_expect_eq(ag_machine_compile_ns("gemm"), 6000000, "the measured family stands for it");
  st_close(db);
}
