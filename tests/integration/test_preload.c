/* SPDX-License-Identifier: MIT */
/* The agent preloaded into real programs: outputs bit-identical with and without it, exact
 * call counts in the database, fork and exec as runs of their own, no trace in processes that
 * call no operator, what survives a SIGKILL, and the agent's threads' CPUs. */
#define _GNU_SOURCE
#include "harness.h"

#include <criterion/criterion.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(preload, .init = h_setup, .fini = h_teardown, .timeout = 120);

static void assert_exited_ok(int status, const char *tag)
{
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: status %d, stderr: %s", tag,
            status, h_output(tag, "err"));
}

Test(preload, every_function_identical_outputs_and_exact_counts)
{
  char plain[160], agent[160];
  snprintf(plain, sizeof plain, "%s/plain", h_dir);
  snprintf(agent, sizeof agent, "%s/agent", h_dir);
  assert_exited_ok(h_run("plain", 0, NULL, (const char *[]){H_BLAS_PROG, plain, "11", "4000", NULL}), "plain");
  assert_exited_ok(h_run("agent", 1, NULL, (const char *[]){H_BLAS_PROG, agent, "11", "4000", NULL}), "agent");
  char a[200], b[200];
  snprintf(a, sizeof a, "%s.bin", plain);
  snprintf(b, sizeof b, "%s.bin", agent);
  cr_assert(h_same_file(a, b), "outputs differ with the agent");
  cr_assert_str_empty(h_output("agent", "err"), "the agent printed: %s", h_output("agent", "err"));

  /* The program's own count of each function equals the database's. */
  snprintf(a, sizeof a, "%s.counts", agent);
  FILE *f = fopen(a, "r");
  cr_assert_not_null(f);
  char name[64];
  long calls, total = 0;
  int functions = 0;
  while (fscanf(f, "%63s %ld", name, &calls) == 2) {
    int64_t got = h_query(NULL, "SELECT coalesce(sum(calls), 0) FROM run_sigs JOIN signatures"
                                " ON id=sig_id WHERE op='%s'", name);
    cr_assert_eq(got, calls, "%s: database %lld, program %ld", name, (long long)got, calls);
    cr_assert_gt(calls, 0, "%s was never called", name);
    total += calls, functions++;
  }
  fclose(f);
  cr_assert_eq(functions, 16);
  cr_assert_eq(h_query(NULL, "SELECT sum(calls) FROM run_sigs"), total);
  cr_assert_eq(h_query(NULL, "SELECT calls FROM run_sigs JOIN signatures ON id=sig_id"
                             " WHERE name='sgemm NN 64x64x64 β=0'"), 17);
  /* Timing: a sampled subset, never more than the calls, and every signature timed once. */
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE timed_calls < 1"
                             " OR timed_calls > calls OR timed_ns <= 0"), 0);
  cr_assert_lt(h_query(NULL, "SELECT sum(timed_calls) FROM run_sigs"), total);
  /* The run: one, ended normally, knows its program, arguments and machine. */
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs r JOIN programs p ON p.id=program_id"
                             " JOIN machines m ON m.id=machine_id WHERE status='exited'"
                             " AND end_ns >= start_ns AND p.exe='%s' AND length(p.build_id)=40"
                             " AND argv LIKE '%%\"11\",\"4000\"]' AND m.ncpu > 0"
                             " AND length(m.cpu_model) > 0", h_artefact(H_BLAS_PROG)), 1);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs WHERE json_extract(options, '$.MODE')"
                             "='profile'"), 1);
}

Test(preload, fork_and_exec_are_runs_of_their_own)
{
  h_skip_threaded_fork_under_asan(); /* (a child hung 60 s in the ASan lane at load 18) */
  assert_exited_ok(h_run("fe", 1, NULL, (const char *[]){H_HOST_PROG, "forkexec", NULL}), "fe");
  /* Three runs: the parent before exec, its BLAS-calling child, the exec'd image. The child
   * that called no operator left no run. */
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs"), 3);
  int64_t parent = h_query(NULL, "SELECT id FROM runs WHERE status='exec'");
  cr_assert_gt(parent, 0);
  cr_assert_eq(h_query(NULL, "SELECT calls FROM run_sigs JOIN signatures ON id=sig_id"
                             " WHERE run_id=%lld AND name='cblas_sdot n=100'", (long long)parent), 5);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=%lld", (long long)parent), 1,
               "the child's calls leaked into the parent's run");
  int64_t child = h_query(NULL, "SELECT id FROM runs WHERE parent_run=%lld", (long long)parent);
  cr_assert_gt(child, 0, "the fork child's run does not name its parent");
  cr_assert_eq(h_query(NULL, "SELECT calls FROM run_sigs JOIN signatures ON id=sig_id"
                             " WHERE run_id=%lld AND name='cblas_ddot n=50'", (long long)child), 5);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=%lld", (long long)child), 1,
               "the child inherited the parent's counts");
  int64_t exec = h_query(NULL, "SELECT id FROM runs WHERE argv LIKE '%%stage2%%'");
  cr_assert_gt(exec, 0);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs WHERE id=%lld AND status='exited' AND pid="
                             "(SELECT pid FROM runs WHERE id=%lld)", (long long)exec, (long long)parent), 1);
  cr_assert_eq(h_query(NULL, "SELECT calls FROM run_sigs WHERE run_id=%lld", (long long)exec), 7);
}

Test(preload, eight_host_threads_lose_no_count)
{
  assert_exited_ok(h_run("mt", 1, NULL, (const char *[]){H_HOST_PROG, "threads", "8", "30000", NULL}), "mt");
  for (int t = 0; t < 8; t++)
    cr_assert_eq(h_query(NULL, "SELECT calls FROM run_sigs JOIN signatures ON id=sig_id WHERE"
                               " name='cblas_sdot n=%d'", t + 1), 30000, "thread %d", t);
}

/* The timings a host thread holds (agent/tcount.h: booked a few at a time, so that threads timing
 * one signature do not take its entry's line from each other at every timing) all reach the
 * database: a thread's at its exit, and those of threads still alive when the process exits.
 * Every call timed (OPJIT_TIME_EVERY=1), one signature: the main thread's 41 calls take its
 * timings past AG_HELD_AFTER, then 3 threads make 7 calls each, all held, and end (joined) or
 * stay blocked while the process exits. A few calls go untimed (the activating one, each
 * thread's first; at load, an outlier): 58 of the 62 were booked here either way, 39-40 with
 * either booking left out. */
Test(preload, timings_held_on_host_threads_all_reach_the_database)
{
  const char *env[] = {"OPJIT_TIME_EVERY=1", NULL};
  const char *sig = "SELECT %s FROM run_sigs JOIN signatures ON id=sig_id WHERE name='cblas_sdot "
                    "n=64' AND run_id=(SELECT max(id) FROM runs)";
  for (int alive = 0; alive < 2; alive++) {
    const char *argv[] = {H_HOST_PROG, "shared", "4", "7", alive ? "alive" : NULL, NULL};
    assert_exited_ok(h_run("held", 1, env, argv), "held");
    cr_assert_eq(h_query(NULL, sig, "calls"), 62);
    int64_t timed = h_query(NULL, sig, "timed_calls");
    cr_assert_geq(timed, 50, "%lld of the 62 calls' timings booked, threads %s", (long long)timed,
                  alive ? "alive at exit" : "joined");
  }
}

Test(preload, a_process_that_calls_no_operator_leaves_no_trace)
{
  const char *env[] = {NULL, NULL};
  char db[200];
  snprintf(db, sizeof db, "OPJIT_DB=%s/never/profile.db", h_dir);
  env[0] = db;
  assert_exited_ok(h_run("plain", 0, env, (const char *[]){H_HOST_PROG, "noop", NULL}), "plain");
  assert_exited_ok(h_run("agent", 1, env, (const char *[]){H_HOST_PROG, "noop", NULL}), "agent");
  char plain[128];
  snprintf(plain, sizeof plain, "%s", h_output("plain", "out"));
  const char *agent = h_output("agent", "out");
  cr_assert(strstr(plain, "agent=0"), "%s", plain);
  cr_assert(strstr(agent, "agent=1"), "the agent was not loaded: %s", agent);
  cr_assert(strstr(agent, "sqlite=0"), "SQLite was loaded: %s", agent);
  /* Same thread count as without the agent (OpenBLAS's own pool aside, none of ours). */
  cr_assert(!strncmp(plain, agent, strcspn(plain, " ")), "threads differ: '%s' vs '%s'", plain, agent);
  char dir[160];
  snprintf(dir, sizeof dir, "%s/never", h_dir);
  struct stat st;
  cr_assert_neq(stat(dir, &st), 0, "the agent created %s", dir);
  cr_assert_str_empty(h_output("agent", "err"));
}

Test(preload, disabled_agent_is_a_pure_pass_through)
{
  char plain[160], agent[160], a[200], b[200];
  snprintf(plain, sizeof plain, "%s/plain", h_dir);
  snprintf(agent, sizeof agent, "%s/agent", h_dir);
  const char *env[] = {"OPJIT_DISABLE=1", NULL};
  assert_exited_ok(h_run("plain", 0, NULL, (const char *[]){H_BLAS_PROG, plain, "5", "500", NULL}), "plain");
  assert_exited_ok(h_run("agent", 1, env, (const char *[]){H_BLAS_PROG, agent, "5", "500", NULL}), "agent");
  snprintf(a, sizeof a, "%s.bin", plain);
  snprintf(b, sizeof b, "%s.bin", agent);
  cr_assert(h_same_file(a, b));
  struct stat st;
  cr_assert_neq(stat(h_db, &st), 0, "a disabled agent wrote a database");
}

Test(preload, sigkill_keeps_what_was_flushed)
{
  const char *env[] = {"OPJIT_FLUSH_MS=50", NULL};
  pid_t pid = h_spawn("loop", 1, env, (const char *[]){H_HOST_PROG, "loop", NULL});
  int64_t calls = -1;
  for (int i = 0; i < 2400 && calls <= 0; i++) { /* 60 s: a sanitized writer on a loaded machine */
    usleep(25000);
    if (h_db_has("run_sigs"))
      calls = h_query(NULL, "SELECT coalesce(sum(calls), 0) FROM run_sigs");
  }
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  cr_assert(WIFSIGNALED(status));
  cr_assert_gt(calls, 0, "nothing was flushed in 60 s");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM pragma_quick_check WHERE quick_check='ok'"), 1);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs WHERE status='running' AND end_ns IS NULL"), 1);
  cr_assert_geq(h_query(NULL, "SELECT sum(calls) FROM run_sigs"), calls);
}

Test(preload, secure_execution_gets_no_agent)
{
  /* A set-user-ID copy of the host (owner nobody) runs with AT_SECURE. glibc drops LD_PRELOAD
   * there, so the program loads the agent itself; the agent must still stay inert. */
  char copy[128], cmd[640];
  snprintf(copy, sizeof copy, "%s/suid_host", h_dir);
  snprintf(cmd, sizeof cmd, "cp %s %s && chown 65534 %s && chmod 4755 %s && chmod 777 %s",
           h_artefact(H_HOST_PROG), copy, copy, copy, h_dir);
  if (!h_nobody_can_use_build() || system(cmd) != 0)
    cr_skip_test("needs root and a build folder user nobody can read, for a set-user-ID host");
  /* (LeakSanitizer stops the world through ptrace, which a set-user-ID process refuses.) */
  int status = h_run("suid", 0, (const char *[]){"ASAN_OPTIONS=detect_leaks=0", NULL},
                     (const char *[]){copy, "dlopen", h_artefact(H_AGENT), NULL});
  assert_exited_ok(status, "suid");
  cr_assert(strstr(h_output("suid", "out"), "sdot=40"));
  struct stat st;
  usleep(100000);
  cr_assert_neq(stat(h_db, &st), 0, "the agent recorded a secure-execution process");
  /* Control: the same program without set-user-ID records its run. */
  status = h_run("plain", 0, NULL, (const char *[]){H_HOST_PROG, "dlopen", h_artefact(H_AGENT), NULL});
  assert_exited_ok(status, "plain");
  cr_assert_eq(h_query(NULL, "SELECT sum(calls) FROM run_sigs"), 4);
}

Test(preload, a_full_signature_table_counts_overflow_and_changes_nothing)
{
  char plain[160], agent[160], a[200], b[200];
  snprintf(plain, sizeof plain, "%s/plain", h_dir);
  snprintf(agent, sizeof agent, "%s/agent", h_dir);
  const char *env[] = {"OPJIT_MAX_SIGS=16", "OPJIT_MODE=jit", "OPJIT_HOT_CALLS=1",
                       "OPJIT_HOT_PAYBACK=0", "OPJIT_DUEL=0", NULL};
  assert_exited_ok(h_run("plain", 0, NULL, (const char *[]){H_BLAS_PROG, plain, "9", "2000", NULL}), "plain");
  assert_exited_ok(h_run("agent", 1, env, (const char *[]){H_BLAS_PROG, agent, "9", "2000", NULL}), "agent");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs"), 16);
  int64_t counted = h_query(NULL, "SELECT sum(calls) FROM run_sigs");
  int64_t overflow = h_query(NULL, "SELECT overflow_calls FROM runs");
  cr_assert_gt(overflow, 1000);
  cr_assert_eq(counted + overflow, 2000 + 17, "every call counted or overflowed");
  snprintf(a, sizeof a, "%s.counts", plain);
  snprintf(b, sizeof b, "%s.counts", agent);
  cr_assert(h_same_file(a, b));
}

/* Sixteen processes of one program on one database at once (the writers contend for SQLite's
 * lock): every run is recorded, each with every call it made. */
Test(preload, sixteen_processes_on_one_database_lose_no_run_and_no_count)
{
  enum { P = 16, N = 3000 };
  const char *env[] = {"OPJIT_FLUSH_MS=20", NULL};
  pid_t pid[P];
  char tags[P][8], n[16];
  snprintf(n, sizeof n, "%d", N);
  for (int p = 0; p < P; p++) {
    snprintf(tags[p], sizeof tags[p], "p%d", p);
    pid[p] = h_spawn(tags[p], 1, env, (const char *[]){H_HOST_PROG, "threads", "2", n, NULL});
  }
  for (int p = 0; p < P; p++) {
    int status;
    cr_assert_eq(waitpid(pid[p], &status, 0), pid[p]);
    assert_exited_ok(status, tags[p]);
    /* A writer that waited longer than OPJIT_BUSY_MS says so once and retries; nothing else. */
    const char *err = h_output(tags[p], "err");
    int locked = h_count_lines(err, "is locked by another process");
    cr_assert(locked <= 1 && h_count_lines(err, "") == locked,
              "%s: %s", tags[p], err);
  }
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM pragma_quick_check WHERE quick_check='ok'"), 1);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs WHERE status='exited'"), P);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM (SELECT run_id FROM run_sigs GROUP BY run_id"
                             " HAVING sum(calls)=%d)", 2 * N), P, "a run lost calls");
}

/* Programs that call no operator, as a user's shell starts them with the agent preloaded
 * everywhere: the same output and exit status, nothing on stderr, no database. */
Test(preload, ordinary_programs_run_unchanged_and_leave_no_database)
{
  static const char *const progs[][5] = {
      {"/bin/ls", "/etc", NULL},
      {"/bin/sh", "-c", "echo from sh; exit 3", NULL},
      {"/usr/bin/sort", "-r", "/etc/passwd", NULL},
      {"/usr/bin/python3", "-c", "import sys; print(sys.argv, 2**100); sys.exit(5)", NULL},
      {"/usr/bin/node", "-e", "console.log([1, 2, 3].map(x => x * 2)); process.exitCode = 4", NULL},
      {"/usr/bin/git", "--version", NULL},
      {"/usr/bin/perl", "-e", "print join(',', map { $_ * $_ } 1 .. 10), \"\\n\"", NULL},
      {"/usr/bin/md5sum", "/etc/services", NULL},
  };
  if (h_sanitized())
    cr_skip_test("a sanitizer's runtime preloaded before the agent would be in these programs "
                 "too, and theirs is not the agent's behaviour: the plain suite's check");
  char db[200], dir[160];
  snprintf(dir, sizeof dir, "%s/never", h_dir);
  snprintf(db, sizeof db, "OPJIT_DB=%s/profile.db", dir);
  const char *env[] = {db, NULL};
  static char out[1 << 16];
  int ran = 0;
  for (size_t i = 0; i < sizeof progs / sizeof *progs; i++) {
    if (access(progs[i][0], X_OK) != 0) {
      cr_log_warn("%s is not installed: not run", progs[i][0]);
      continue;
    }
    int plain = h_run("plain", 0, env, (const char *const *)progs[i]);
    int agent = h_run("agent", 1, env, (const char *const *)progs[i]);
    cr_assert(WIFEXITED(plain) && WIFEXITED(agent), "%s", progs[i][0]);
    cr_assert_eq(WEXITSTATUS(agent), WEXITSTATUS(plain), "%s's exit status", progs[i][0]);
    snprintf(out, sizeof out, "%s", h_output("plain", "out"));
    const char *got = h_output("agent", "out");
    cr_assert_str_eq(got, out, "%s's output", progs[i][0]);
    cr_assert_str_empty(h_output("agent", "err"), "%s", progs[i][0]);
    ran++;
  }
  cr_assert_geq(ran, 5, "only %d of the programs are installed", ran);
  struct stat st;
  cr_assert_neq(stat(dir, &st), 0, "the agent created %s", dir);
}

/* The calls' timings are nanoseconds whichever clock the agent reads (agent.h, ag_tick: the TSC
 * and its measured scale, or CLOCK_MONOTONIC): timing every call, the database's mean agrees
 * with the program's own clock's median call. Not a speed: two clocks' measures of the same
 * calls, within a margin for the outliers the agent keeps (below 8x its mean) and its wrapper
 * (the program's mean would be its preemptions': at load 9 on 2 vCPUs, 5x its median); a TSC's
 * ticks taken for nanoseconds (2.1 GHz on a Zen 5 VM), or a scale off by half, are outside it. */
Test(preload, the_calls_timings_are_nanoseconds_of_the_programs_clock)
{
  const char *env[] = {"OPJIT_TIME_EVERY=1", NULL};
  int st = h_run("clocked", 1, env, (const char *[]){H_HOST_PROG, "clocked", "3000", NULL});
  assert_exited_ok(st, "clocked");
  long prog = 0;
  cr_assert_eq(sscanf(h_output("clocked", "out"), "median_ns %ld", &prog), 1);
  int64_t timed = h_query(NULL, "SELECT sum(timed_calls) FROM run_sigs");
  cr_assert_gt(timed, 1500, "%lld of 3000 calls timed", (long long)timed); /* outliers left out */
  double agent = (double)h_query(NULL, "SELECT sum(timed_ns) FROM run_sigs") / (double)timed;
  cr_assert(agent > 0.6 * (double)prog && agent < 1.6 * (double)prog,
            "the agent's mean call %.0f ns, the program's %ld ns", agent, prog);
}

/* The timings' budget (agent/compare.h, ag_cmp_gap_scale) covers the calls of a signature that
 * gets no variant in the run (a strided dot product: unsupported), as it covers a judged
 * variant's: no decision waits for their timings, so calls that are short against what a timing
 * costs are timed up to 8x less often than OPJIT_TIME_EVERY's 1 in 16. Not a speed: the stored
 * machine model's clock figure is set to 100 us, against which every call is short (scale 8:
 * ~1 call in 128 timed); in profile mode the same calls keep the plain rate (~1 in 16). */
Test(preload, a_signature_without_a_variant_is_timed_within_the_budget)
{
  const char *jit[] = {"OPJIT_MODE=jit", "OPJIT_HOT_CALLS=64", NULL};
  assert_exited_ok(h_run("model", 1, jit, (const char *[]){H_HOST_PROG, "strided", "100", NULL}),
                   "model");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM machine_models"), 1, "the model is stored");
  /* not measured again: every peak agreed (agent/machine.h, a bit each) */
  h_exec("UPDATE machine_models SET timer_ns = 100000, settled = 63");
  enum { CALLS = 64000 };
  assert_exited_ok(h_run("budgeted", 1, jit, (const char *[]){H_HOST_PROG, "strided", "64000",
                                                             NULL}), "budgeted");
  const char *last = "SELECT %s FROM run_sigs WHERE run_id = (SELECT max(id) FROM runs)";
  cr_assert_eq(h_query(NULL, last, "calls"), CALLS);
  int64_t budgeted = h_query(NULL, last, "timed_calls");
  cr_expect_lt(budgeted, CALLS / 48, "%lld of %d calls timed", (long long)budgeted, CALLS);
  assert_exited_ok(h_run("plain", 1, NULL, (const char *[]){H_HOST_PROG, "strided", "64000",
                                                           NULL}), "plain");
  int64_t plain = h_query(NULL, last, "timed_calls");
  cr_expect_gt(plain, CALLS / 24, "profile mode: %lld of %d calls timed", (long long)plain, CALLS);
}

/* The compiles' figures (agent/machine.h) as the stored model holds them: LLVM's loads, and
 * a kernel family's compiles, each measured (a positive median). */
static int64_t compiles(const char *family)
{
  return h_query(NULL, "SELECT coalesce(sum(n), 0) FROM machine_compiles WHERE family = '%s' AND "
                       "median_ns > 0", family);
}

/* A run whose payback test fails before this CPU measured what a compile costs measures it
 * then, on a thread of its own (agent/tier.c, calibrate_unmeasured): LLVM's load and a compile,
 * so the tests after it, and the next run's, charge them rather than a guess. Here: products
 * OpenBLAS spreads over two threads (a pool: no size class's first trial, which would compile
 * whatever the test says), each test failing however slow a loaded machine makes their calls
 * (OPJIT_HOT_PAYBACK=1000: a test that passes compiles, and that compile measures itself); the
 * program then settles (opjit_settle waits for the measurement). The next run takes the stored
 * figures. */
Test(preload, a_failed_payback_test_measures_what_a_compile_costs_once_per_cpu)
{
  const char *jit[] = {"OPJIT_MODE=jit", "OPJIT_LOG=info", "OPJIT_HOT_PAYBACK=1000",
                       "OPENBLAS_NUM_THREADS=2", NULL};
  const char *argv[] = {H_HOST_PROG, "big", "300", "settled", NULL};
  assert_exited_ok(h_run("first", 1, jit, argv), "first");
  const char *err = h_output("first", "err");
  cr_assert(strstr(err, "a compile measured on this CPU"), "%s", err);
  cr_assert_geq(compiles("llvm-load"), 1, "LLVM's load measured: %s", err);
  cr_assert_geq(compiles("gemm"), 1, "a kernel's compile measured: %s", err);

  assert_exited_ok(h_run("second", 1, jit, argv), "second");
  err = h_output("second", "err");
  cr_assert_null(strstr(err, "a compile measured on this CPU"), "measured again: %s", err);
}

/* The calibration waits for a CPU no thread wants rather than run at SCHED_IDLE: a compile
 * thread waits for its load of LLVM (agent/tier.c, load_jit's lock), and threads that call
 * operators on every CPU left an idle-class thread no CPU until they stopped (2 threads of a
 * 16^3 dgemm on 2 CPUs, 0.6 s: the kernel published ~690 ms into the run, after their last
 * call, the run 0.87 of plain's speed; now at ~120 ms, 1.14x). Here a first run stores the
 * machine model and compiles nothing (no compile's cost measured); in the second, as many
 * threads as the machine has CPUs call an 8x8x8 sgemm 3,000,000 times in all, at once, every one
 * before any calls again (no core idle: no size class's first trial), all of the process on
 * one CPU (the agent's threads too), which leaves a thread at SCHED_IDLE nothing: its payback
 * test fails on the guesses (the calibration starts), then passes ~0.47 s into the run, and
 * its kernel must serve some of the threads' calls (published ~0.13 s later, the loop ~1.5 s;
 * with the calibration at SCHED_IDLE, none in 3 runs of 3). */
Test(preload, busy_threads_on_every_cpu_get_their_kernel_beside_the_calibration)
{
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu > 64)
    cr_skip_test("jit_prog's crowd starts 64 threads at most, and this machine has %ld CPUs",
                 ncpu);
  const char *jit[] = {"OPJIT_MODE=jit", "OPJIT_LOG=info", "OPJIT_SAMPLE_HZ=0", NULL};
  assert_exited_ok(h_run("model", 1, jit, (const char *[]){H_JIT_PROG, "many", "20", NULL}),
                   "model");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM machine_models"), 1, "the model stored: %s",
               h_output("model", "err"));
  cr_assert_eq(compiles("gemm") + compiles("llvm-load"), 0, "nothing compiled yet: %s",
               h_output("model", "err"));
  cpu_set_t cpus, one;
  cr_assert_eq(sched_getaffinity(0, sizeof cpus, &cpus), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE - 1 && !CPU_ISSET(cpu, &cpus))
    cpu++;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0); /* this test's process, its child */
  char t[24], n[24];
  snprintf(t, sizeof t, "%ld", ncpu);
  snprintf(n, sizeof n, "%ld", 3000000 / ncpu); /* 3,000,000 calls in all */
  int st = h_run("busy", 1, jit, (const char *[]){H_JIT_PROG, "crowd", t, n, NULL});
  sched_setaffinity(0, sizeof cpus, &cpus);
  assert_exited_ok(st, "busy");
  const char *err = h_output("busy", "err");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE kind = 'queued' AND detail LIKE "
                             "'hot after %% calls: pays back%%' AND CAST(substr(detail, 11) AS "
                             "INTEGER) > 64 AND run_id = (SELECT max(id) FROM runs)"),
               1, "queued by a payback test after one failed, not as a first trial: %s", err);
  cr_assert_gt(h_query(NULL, "SELECT coalesce(sum(calls), 0) FROM variants WHERE run_id = "
                             "(SELECT max(id) FROM runs)"),
               0, "the kernel served the threads' calls: %s", err);
}

/* A long call whose library already runs it as fast as a kernel could is decided at a failed
 * payback test too (agent/tier.c, not_yet: library_wins on the final machine model): not left
 * waiting on its size class's expected saving, a prior or other signatures' verdicts, where its
 * own library's speed is measured. Here 512^3 float products (0.8-1.6 ms: too long for a duel) on
 * OpenBLAS's two threads against the JIT's 256-bit peak (OPJIT_ISA=avx2): on its AVX-512 kernels
 * where the CPU has them (2-3 times that peak), else on its Haswell kernels (~1.7 times), room
 * for a loaded machine (the fastest call counts). Every payback test fails
 * (OPJIT_HOT_PAYBACK=1000); the program waits for the model to be final after its first call.
 * The second run is asserted: the first measured what a compile costs (its failed test's
 * calibration, beside the calls: 0.2 s of CPU under TSan), the second has the CPUs to itself. */
Test(preload, a_long_call_at_its_librarys_speed_is_decided_when_its_payback_test_fails)
{
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    cr_skip_test("OpenBLAS's Haswell kernels need AVX2 and FMA, which this CPU lacks");
  const char *jit[] = {"OPJIT_MODE=jit", "OPJIT_HOT_PAYBACK=1000", "OPJIT_ISA=avx2",
                       "OPJIT_SUMMARY=1", "OPENBLAS_NUM_THREADS=2",
                       __builtin_cpu_supports("avx512f") ? "OPENBLAS_CORETYPE=SKYLAKEX"
                                                         : "OPENBLAS_CORETYPE=Haswell",
                       NULL};
  const char *argv[] = {H_HOST_PROG, "long", "200", NULL};
  assert_exited_ok(h_run("long1", 1, jit, argv), "long1");
  assert_exited_ok(h_run("long2", 1, jit, argv), "long2");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id = (SELECT max(id) FROM "
                             "runs) AND state = 'unsupported' AND reason LIKE 'the library runs "
                             "it at %%'"),
               1, "%s", h_output("long2", "err"));
}

/* A compile that tunes measures what a compile costs too: each candidate's share of the
 * compiles' CPU time (not the candidates' timings). Here the one signature is first hot after
 * more calls than agent/tier.c's TUNE_MIN_CALLS (4096), on the one thread that calls, so its
 * kernel is tuned on the core the program leaves idle; a tuned compile noted nothing before,
 * and a later run's failed payback test measured again. */
Test(preload, a_tuned_compile_measures_what_a_compile_costs)
{
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
    cr_skip_test("one CPU: the program's thread leaves no core idle, where a kernel is tuned");
  const char *jit[] = {"OPJIT_MODE=jit", "OPJIT_HOT_CALLS=5000", "OPJIT_HOT_PAYBACK=0",
                       "OPJIT_SAMPLE_HZ=0", NULL};
  assert_exited_ok(h_run("tuned", 1, jit, (const char *[]){H_JIT_PROG, "many", "12000", NULL}),
                   "tuned");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE kind='published' AND detail "
                             "LIKE 'compiled in %% ms (the fastest of _ blockings)%%'"),
               1, "one kernel, tuned: %s", h_output("tuned", "err"));
  cr_assert_geq(compiles("gemm"), 1, "the tuned compile measured: %s", h_output("tuned", "err"));
}

/* A program whose threads call operators on every CPU leaves none idle for tuning: its kernel
 * is the machine model's pick, one compile's CPU time taken from it rather than three. */
Test(preload, threads_on_every_cpu_get_the_model_s_pick_untuned)
{
  char t[16];
  snprintf(t, sizeof t, "%ld", sysconf(_SC_NPROCESSORS_ONLN));
  const char *jit[] = {"OPJIT_MODE=jit", "OPJIT_HOT_CALLS=5000", "OPJIT_HOT_PAYBACK=0",
                       "OPJIT_SAMPLE_HZ=0", NULL};
  assert_exited_ok(h_run("crowd", 1, jit, (const char *[]){H_JIT_PROG, "crowd", t, NULL}),
                   "crowd");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE kind='published' AND detail "
                             "LIKE 'compiled in %% ms;%%'"),
               1, "one kernel, untuned: %s", h_output("crowd", "err"));
}

/* The CPUs of a list as /proc's status files write it ("0-3,6"). */
static cpu_set_t cpu_list(const char *s)
{
  cpu_set_t set;
  CPU_ZERO(&set);
  for (char *end; *s;) {
    long a = strtol(s, &end, 10), b = a;
    if (end == s)
      break;
    if (*end == '-')
      b = strtol(end + 1, &end, 10);
    for (long c = a; c <= b && c < CPU_SETSIZE; c++)
      CPU_SET((int)c, &set);
    s = *end == ',' ? end + 1 : end;
  }
  return set;
}

/* Runs host_prog pinned (with argument arg, or none) as run name: its writer must run on every
 * CPU of the process but the calling thread's, and the exit summary say whether the program
 * started threads of its own (threads_own): the agent's threads, started through
 * ag_agent_thread_create, never count (under ASan, whose runtime intercepts the agent's
 * pthread_create too, every host once did). */
static void assert_writer_keeps_off(const char *name, const char *arg, int threads_own)
{
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0 || CPU_COUNT(&cpus) < 2)
    cr_skip_test("needs a process that may use at least 2 CPUs");
  assert_exited_ok(h_run(name, 1, (const char *[]){"OPJIT_SUMMARY=1", NULL},
                         (const char *[]){H_HOST_PROG, "pinned", arg, NULL}),
                   name);
  const char *err = h_output(name, "err");
  cr_assert(strstr(err, "opjit: run "), "no exit summary: %s", err);
  cr_assert_eq(strstr(err, "started threads of its own") != NULL, threads_own, "%s", err);
  const char *out = h_output(name, "out");
  char all[256], writer[256], host[256];
  const char *p = strstr(out, "process cpus "), *w = strstr(out, "thread opjit-writer cpus ");
  const char *h = strstr(out, "thread host_prog cpus ");
  cr_assert(p && w && h, "no process, writer or host thread line in: %s", out);
  cr_assert_eq(sscanf(p, "process cpus %255s", all), 1);
  cr_assert_eq(sscanf(w, "thread opjit-writer cpus %255s", writer), 1);
  cr_assert_eq(sscanf(h, "thread host_prog cpus %255s", host), 1);
  cr_assert_str_neq(host, all, "the host did not pin its thread: %s", out);
  cpu_set_t a = cpu_list(all), wr = cpu_list(writer), ho = cpu_list(host), both, either;
  CPU_AND(&both, &wr, &ho);
  CPU_OR(&either, &wr, &ho);
  cr_assert(CPU_COUNT(&both) == 0 && CPU_EQUAL(&either, &a),
            "the writer runs on %s, the host on %s, the process on %s: %s", writer, host, all,
            out);
}

Test(preload, the_agents_threads_run_on_the_process_cpus_not_on_a_pinned_host_threads)
{
  /* The host pins its thread to one CPU before its first call, which starts the writer: the
   * writer must not inherit that pinning (the process's other CPUs would idle beside it), and,
   * the host calling on one thread, keeps off that thread's CPU (agent.h,
   * ag_agent_keep_off_host): it runs on all the others. */
  assert_writer_keeps_off("pinned", NULL, 0);
}

Test(preload, the_agents_threads_keep_off_the_one_calling_thread_beside_an_idle_pool)
{
  /* The same with a thread of the host's own that calls nothing (a library's pool between the
   * calls it splits, as OpenBLAS's is beside numpy's small products): one thread still calls. */
  assert_writer_keeps_off("pinned_pool", "pool", 1);
}
