/* SPDX-License-Identifier: MIT */
/* The agent under Debian's /usr/bin/python3 with python3-numpy (OpenBLAS): results
 * bit-identical with and without it, and each numpy product recorded as the CBLAS call it is. */
#include "harness.h"

#include <criterion/criterion.h>
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
