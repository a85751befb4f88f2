/* SPDX-License-Identifier: MIT */
/* ?syrk through the agent's tables alone (its key, its kernel kind, its verification): random
 * Fortran and CBLAS calls of a C host checked against the reference BLAS, and numpy's a @ a.T
 * (Debian's python3-numpy calls cblas_?syrk for it) within tolerance of a product computed
 * without BLAS, each with compiled variants serving the calls. */
#include "harness.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(syrk, .init = h_setup_jit, .fini = h_teardown, .timeout = 600);

#define SCRIPT OPJIT_SOURCE_DIR "/tests/integration/numpy_syrk.py"

/* Every signature compiled at its first call and published at once (the duel is a speed
 * question: these tests ask for correctness). */
static const char *const env[] = {"OPJIT_MODE=jit",    "OPJIT_HOT_PAYBACK=0", "OPJIT_DUEL=0",
                                  "OPJIT_HOT_CALLS=1", "OPJIT_SAMPLE_HZ=0",   NULL};

Test(syrk, random_calls_match_the_reference_and_leave_the_other_triangle)
{
  int st = h_run("sweep", 1, env, (const char *[]){H_SYRK_PROG, "sweep", "40", "12", "99", NULL});
  if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
    cr_skip_test("%s", h_output("sweep", "err"));
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d\n%s\n%s", st,
            h_output("sweep", "out"), h_output("sweep", "err"));
  cr_assert(strstr(h_output("sweep", "out"), "calls 480 mismatches 0"), "%s",
            h_output("sweep", "out"));
  int64_t sigs = h_query(NULL, "SELECT count(*) FROM run_sigs r JOIN signatures s ON s.id=r.sig_id"
                               " WHERE s.name LIKE '%%syrk%%'");
  int64_t ready = h_query(NULL, "SELECT count(*) FROM variants WHERE status='ready'");
  cr_assert_eq(sigs, 40, "each call recorded under its SYRK signature");
  /* how many compile within the program's life depends on the compile threads' speed (a
   * loaded machine): a quarter at least */
  cr_assert_geq(ready, sigs / 4, "%lld of %lld signatures have a ready variant", (long long)ready,
                (long long)sigs);
  cr_assert_gt(h_query(NULL, "SELECT sum(calls) FROM variants"), 50, "variants served calls");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE kind IN ('failed',"
                             " 'verify-failed')"),
               0);
  cr_assert_gt(h_query(NULL, "SELECT count(*) FROM events WHERE kind='verified'"), 0,
               "variants were checked against the library's results");
}

Test(syrk, numpy_a_at_a_transposed_is_served_by_the_variant_within_tolerance)
{
  if (access("/usr/bin/python3", X_OK) != 0)
    cr_skip_test("Debian's /usr/bin/python3 is not installed");
  int st = h_run("numpy", 1, env, (const char *[]){"/usr/bin/python3", SCRIPT, "3", NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d\n%s\n%s", st,
            h_output("numpy", "out"), h_output("numpy", "err"));
  cr_assert(strstr(h_output("numpy", "out"), " bad 0"), "%s", h_output("numpy", "out"));
  cr_assert_str_empty(h_output("numpy", "err"), "no warning (numpy warns of FE_INVALID raised in "
                                                "a product)");
  static const char *const sigs[] = {"cblas_ssyrk row U N 40x24 β=0",
                                     "cblas_dsyrk row U N 64x64 β=0"};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
    cr_assert_geq(h_query(NULL,
                          "SELECT calls FROM run_sigs JOIN signatures ON id=sig_id"
                          " WHERE name='%s'",
                          sigs[i]),
                  40, "%s", sigs[i]);
    cr_assert_gt(h_query(NULL,
                         "SELECT coalesce(sum(v.calls), 0) FROM variants v JOIN"
                         " signatures s ON s.id=v.sig_id WHERE s.name='%s'",
                         sigs[i]),
                 0, "%s: its variant served calls", sigs[i]);
  }
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE kind IN ('failed',"
                             " 'verify-failed')"),
               0);
  cr_assert_gt(h_query(NULL, "SELECT count(*) FROM events e JOIN signatures s ON s.id=e.sig_id"
                             " WHERE e.kind='verified' AND s.name LIKE 'cblas_%%syrk%%'"),
               0);
}
