/* SPDX-License-Identifier: MIT */
/* flame on crafted stacks: exact folded lines, sanitised frames, --sig, --all, no stacks. */
#include "helpers.h"

#include <criterion/criterion.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>

static const fake_sig_t two[] = {
    {.m = 64, .sig = "aaaa000000000064", .calls = 10},
    {.m = 32, .sig = "bbbb000000000032", .calls = 10},
};
static const fake_stack_t stacks[] = {
    {64, "python3`main;libopjit.so`cblas_sgemm;libopenblas.so.0`sgemm_kernel", 20},
    {64, "python3`main;libopjit.so`cblas_sgemm;libopenblas.so.0`sgemm_beta", 10},
    {32, "python3`main;libopenblas.so.0` odd  name\twith\nspace ", 10},
    {0, "python3`main;python3`busy", 60},
    {0, "python3`main;;python3`x", 5},
};
static const fake_samples_t sampled = {
    .sampling = "{\"mode\":\"perf\",\"event\":\"task-clock\",\"hz\":99,\"samples\":105,\"lost\":0}",
    .stacks = stacks, .nstacks = 5};

static const char expected[] =
    "cblas_sgemm row NN 64x64x64 β=0;python3`main;libopjit.so`cblas_sgemm;"
    "libopenblas.so.0`sgemm_beta 10\n"
    "cblas_sgemm row NN 64x64x64 β=0;python3`main;libopjit.so`cblas_sgemm;"
    "libopenblas.so.0`sgemm_kernel 20\n"
    "evil:name x;python3`main;libopenblas.so.0` odd name with space 10\n"
    "[program];python3`main;[unknown];python3`x 5\n"
    "[program];python3`main;python3`busy 60\n";

/* A database with the sampled run (returned), B renamed to hold ';' and doubled spaces. */
static int64_t craft(const char *db)
{
  int64_t run = craft_run(db, 0, 0, 1, two, 2);
  craft_samples(db, run, &sampled);
  sql_exec(db, "UPDATE signatures SET name = 'evil;name  x ' || char(10)"
               " WHERE sig = 'bbbb000000000032'");
  return run;
}

Test(flame, folded_lines_exact_sanitised_and_well_formed)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft(db);
  craft_run(db, 0, 0, 1, two, 2); /* newer, unsampled: the default skips it */
  proc_t p = opjit(NULL, (const char *[]){"flame", "--db", db, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect_str_eq(p.out, expected);
  regex_t re;
  cr_assert_eq(regcomp(&re, "^[^ ]+( [^ ]+)* [0-9]+$", REG_EXTENDED | REG_NOSUB), 0);
  for (char *line = strtok(p.out, "\n"); line; line = strtok(NULL, "\n"))
    cr_expect_eq(regexec(&re, line, 0, NULL, 0), 0, "malformed: '%s'", line);
  regfree(&re);
  proc_free(&p);
}

Test(flame, sig_filters_and_all_sums_runs)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  int64_t run = craft(db);
  int64_t again = craft_run(db, 0, 0, 1, two, 2);
  craft_samples(db, again, &(fake_samples_t){.stacks = stacks, .nstacks = 1});
  char id[24];
  snprintf(id, sizeof id, "%lld", (long long)run);
  proc_t p = opjit(NULL, (const char *[]){"flame", "--db", db, id, "--sig", "AAAA", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect_str_eq(p.out, "cblas_sgemm row NN 64x64x64 β=0;python3`main;libopjit.so`cblas_sgemm;"
                          "libopenblas.so.0`sgemm_beta 10\n"
                          "cblas_sgemm row NN 64x64x64 β=0;python3`main;libopjit.so`cblas_sgemm;"
                          "libopenblas.so.0`sgemm_kernel 20\n");
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"flame", "--db", db, "--all", "--sig", "aaaa", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "libopenblas.so.0`sgemm_kernel 40\n"), "summed over runs: %s", p.out);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"flame", "--db", db, NULL});
  cr_expect_str_eq(p.out, "cblas_sgemm row NN 64x64x64 β=0;python3`main;libopjit.so`cblas_sgemm;"
                          "libopenblas.so.0`sgemm_kernel 20\n", "the newest sampled run");
  proc_free(&p);
}

Test(flame, run_without_stacks_fails_clearly)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft(db);
  int64_t plain = craft_run(db, 0, 0, 1, two, 2);
  char id[24];
  snprintf(id, sizeof id, "%lld", (long long)plain);
  proc_t p = opjit(NULL, (const char *[]){"flame", "--db", db, id, NULL});
  cr_expect_eq(p.status, 1);
  cr_expect_str_eq(p.out, "");
  cr_expect(strstr(p.err, "has no sampled stacks"), "%s", p.err);
  proc_free(&p);

  char *empty = path_in(dir, "e.db");
  craft_run(empty, 0, 0, 1, two, 2);
  p = opjit(NULL, (const char *[]){"flame", "--db", empty, NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "no run in") && strstr(p.err, "sampled stacks"), "%s", p.err);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"flame", "--db", db, "--sig", "xyz", NULL});
  cr_expect_eq(p.status, 2, "not hex: a usage error");
  proc_free(&p);
}
