/* SPDX-License-Identifier: MIT */
/* The agent under Debian's /usr/bin/python3 with python3-numpy (OpenBLAS): results
 * bit-identical with and without it, and each numpy product recorded as the CBLAS call it is. */
#define _GNU_SOURCE
#include "harness.h"

#include <criterion/criterion.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(numpy, .init = h_setup, .fini = h_teardown, .timeout = 120);

#define SCRIPT OPJIT_SOURCE_DIR "/tests/integration/numpy_ops.py"

Test(numpy, products_identical_and_counted_exactly)
{
  if (access("/usr/bin/python3", X_OK) != 0)
    cr_skip_test("Debian's /usr/bin/python3 is not installed");
  char plain[160], agent[160];
  snprintf(plain, sizeof plain, "%s/plain.sha", h_dir);
  snprintf(agent, sizeof agent, "%s/agent.sha", h_dir);
  int st = h_run("plain", 0, NULL, (const char *[]){"/usr/bin/python3", SCRIPT, plain, NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", h_output("plain", "err"));
  st = h_run("agent", 1, NULL, (const char *[]){"/usr/bin/python3", SCRIPT, agent, NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", h_output("agent", "err"));
  cr_assert(h_same_file(plain, agent), "numpy results differ with the agent");
  cr_assert_str_empty(h_output("agent", "err"));
  static const char *const sigs[] = {
      "cblas_sgemm row NN 40x33x24 β=0", "cblas_sgemv row N 40x24 β=0", "cblas_sdot n=1000",
      "cblas_sgemm row TN 24x7x40 β=0 ldb=24", "cblas_dgemm row NN 40x33x24 β=0",
      "cblas_dgemv row N 40x24 β=0", "cblas_ddot n=1000", "cblas_dgemm row TN 24x7x40 β=0 ldb=24"};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
    cr_assert_eq(h_query(NULL, "SELECT calls FROM run_sigs JOIN signatures ON id=sig_id"
                               " WHERE name='%s'", sigs[i]), 25, "%s", sigs[i]);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs r JOIN programs p ON p.id=program_id"
                             " WHERE p.exe LIKE '/usr/bin/python3%%' AND argv LIKE '%%numpy_ops.py%%'"
                             " AND status='exited'"), 1);
}

/* A large GEMV (numpy's a @ v on a Fortran-ordered float 1024^2 A) on OpenBLAS's two threads:
 * its compile is charged in full (once per CPU), not as on an idle core (the library's second
 * thread needs that core: tier.c, pays_back), its kernel splits M in two (agent/par.h,
 * OPJIT_KERNEL_THREADS=2), and
 * the loop's results stay within float rounding of a double-precision reference. */
Test(numpy, a_large_gemv_on_a_threaded_library_is_split_and_charged_in_full)
{
  if (access("/usr/bin/python3", X_OK) != 0)
    cr_skip_test("Debian's /usr/bin/python3 is not installed");
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0 || CPU_COUNT(&cpus) < 2)
    cr_skip_test("one CPU: the library runs no threads to split against");
  const char *prog =
      "import ctypes\n"
      "import numpy as np\n"
      "rng = np.random.default_rng(5)\n"
      "a = np.asfortranarray(rng.standard_normal((1024, 1024)).astype(np.float32))\n"
      "v = rng.standard_normal(1024).astype(np.float32)\n"
      "ref = a.astype(np.float64) @ v.astype(np.float64)\n"
      "settle = ctypes.CDLL(None).opjit_settle\n"
      "worst = 0.0\n"
      "for r in range(30):\n" /* hot by its sampled time at some point: its compile awaited */
      "    worst = max([worst] + [float(np.max(np.abs(a @ v - ref))) for i in range(300)])\n"
      "    settle(ctypes.c_long(60000))\n"
      "print('worst %g' % worst)\n"
      "assert worst < 1e-3, worst\n";
  /* sampled: hot by its CPU time; two parts whatever the CPUs; published untimed (a duel lost
   * on a loaded machine is no publication) */
  const char *env[] = {"OPJIT_MODE=jit", "OPENBLAS_NUM_THREADS=2", "OPJIT_KERNEL_THREADS=2",
                       "OPJIT_DUEL=0", NULL};
  int st = h_run("gemv", 1, env, (const char *[]){"/usr/bin/python3", "-c", prog, NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d\n%s%s", st,
            h_output("gemv", "out"), h_output("gemv", "err"));
  const char *sig = "cblas_sgemv row T 1024x1024 β=0";
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                             " WHERE s.name='%s' AND e.kind='queued' AND e.detail LIKE"
                             " '%%compile charge%%' AND e.detail NOT LIKE '%%idle core%%'", sig),
               1, "queued once, its compile charged in full: %s", h_output("gemv", "err"));
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                             " WHERE s.name='%s' AND e.kind='published' AND e.detail LIKE"
                             " '%%M in 2 parts on as many cores%%'", sig), 1);
}

Test(numpy, a_program_that_exits_during_a_duel_exits_cleanly)
{
  /* 100 products: Python's exit often comes while the compile thread duels the 64x64 kernel
   * against OpenBLAS, whose destructors then run; the duel must be over by then (1 run in 4
   * died of SIGSEGV in cblas_sgemm before the exit waited for it). */
  if (access("/usr/bin/python3", X_OK) != 0)
    cr_skip_test("Debian's /usr/bin/python3 is not installed");
  const char *prog = "import numpy as np; a = np.ones((64, 64), dtype=np.float32)\n"
                     "for i in range(100): a @ a\n";
  for (int i = 0; i < 40; i++) { /* each run on an empty database: each compiles and duels */
    char tag[16], db[200];
    snprintf(tag, sizeof tag, "exit%d", i);
    snprintf(db, sizeof db, "OPJIT_DB=%s/exit%d.db", h_dir, i);
    const char *env[] = {"OPJIT_MODE=jit", "OPJIT_SAMPLE_HZ=0", db, NULL};
    int st = h_run(tag, 1, env, (const char *[]){"/usr/bin/python3", "-c", prog, NULL});
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "run %d: status %d\n%s", i, st,
              h_output(tag, "err"));
  }
}
