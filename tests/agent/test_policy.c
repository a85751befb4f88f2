/* SPDX-License-Identifier: MIT */
/* Promotion policy, driven by recorded figures: what a compile is charged, what saving is
 * expected of a size class and how verdicts move it, and the decisions they make together. */
#include "agent/agent.h"
#include "agent/policy.h"

#include <criterion/criterion.h>
#include <string.h>

uint64_t ag_hot_calls = 64; /* OPJIT_HOT_CALLS's default (agent.c's, not linked here) */

/* The calls n <= up at which a thread's call of e takes the hot test (agent.h), into at. */
static int hot_tests(ag_entry_t *e, uint64_t up, uint64_t *at, int max)
{
  int k = 0;
  for (uint64_t n = 1; n <= up; n++)
    if (ag_hot_test_due(n) && ag_hot_test_long(e, n) && n >= ag_hot_calls) {
      cr_assert_lt(k, max);
      at[k++] = n;
    }
  return k;
}

Test(policy, size_classes_follow_the_cube_root_of_the_work)
{
  cr_assert_eq(ag_policy_class(8, 8, 8), 0);
  cr_assert_eq(ag_policy_class(9, 8, 8), 1);
  cr_assert_eq(ag_policy_class(16, 16, 16), 1);
  cr_assert_eq(ag_policy_class(64, 16, 32), 2, "32768 = 32^3");
  cr_assert_eq(ag_policy_class(64, 64, 64), 3);
  cr_assert_eq(ag_policy_class(128, 128, 128), 4);
  cr_assert_eq(ag_policy_class(512, 512, 512), AG_POLICY_CLASSES - 1);
  cr_assert_eq(ag_policy_class(4096, 0, 0), 1, "a vector of 4096 = 16^3");
}

Test(policy, a_compile_on_an_idle_core_is_charged_a_tenth_and_beside_a_pool_every_cpu)
{
  cr_assert_float_eq(ag_policy_charge(10e6, 1, 2, 0), 10e6 * AG_POLICY_IDLE_SHARE, 1e-6);
  cr_assert_float_eq(ag_policy_charge(10e6, 2, 2, 0), 10e6, 1e-6, "every core calls operators");
  cr_assert_float_eq(ag_policy_charge(10e6, 8, 2, 0), 10e6, 1e-6);
  /* A library's pool on every CPU waits as a whole for the one the compile holds. */
  cr_assert_float_eq(ag_policy_charge(10e6, 2, 2, 1), 20e6, 1e-6);
  cr_assert_float_eq(ag_policy_charge(10e6, 2, 8, 1), 80e6, 1e-6);
}

Test(policy, verdicts_move_their_class_only)
{
  ag_policy_t p = {0};
  cr_assert_float_eq(ag_policy_gain(&p, 3), AG_POLICY_PRIOR_GAIN, 1e-12);
  /* Three 64^3 kernels lost (ratios 1.4, 1.5, 1.3): their class now expects 0.3 / 4. */
  ag_policy_learn(&p, 3, 1.4), ag_policy_learn(&p, 3, 1.5), ag_policy_learn(&p, 3, 1.3);
  cr_assert_float_eq(ag_policy_gain(&p, 3), AG_POLICY_PRIOR_GAIN / 4, 1e-12);
  cr_assert_float_eq(ag_policy_gain(&p, 0), AG_POLICY_PRIOR_GAIN, 1e-12, "8^3 kernels unaffected");
  /* One 8^3 kernel won at 0.25 of the original (a saving of 0.75). */
  ag_policy_learn(&p, 0, 0.25);
  cr_assert_float_eq(ag_policy_gain(&p, 0), (AG_POLICY_PRIOR_GAIN + 0.75) / 2, 1e-12);
  /* A saving is capped at 0.9 (one freak round cannot promise everything). */
  ag_policy_learn(&p, 1, 0.01);
  cr_assert_float_eq(ag_policy_gain(&p, 1), (AG_POLICY_PRIOR_GAIN + 0.9) / 2, 1e-12);
}

/* The held-out program of issue #13: 14 small shapes, each called 20,000 times at 0.1-3 us,
 * one host thread on 2 CPUs, compiles measured at 10 ms. */
Test(policy, a_short_program_with_a_few_hot_shapes_compiles_in_its_first_run)
{
  ag_policy_t p = {0};
  double charge = ag_policy_charge(10e6, 1, 2, 0);
  /* After 4096 calls of 160 ns (an 8^3 sgemm): 655 us spent, x 0.3 = 197 us < 1 ms. */
  cr_assert_not(ag_policy_pays_back(&p, 0, 4096 * 160.0, charge, 1, 0));
  /* After 4096 calls of 1 us (a 32^3 dgemm): 4.1 ms x 0.3 = 1.2 ms >= 1 ms. */
  cr_assert(ag_policy_pays_back(&p, 2, 4096 * 1000.0, charge, 1, 0));
  /* Every core busy: the whole 10 ms is charged, and the same 32^3 must wait. */
  cr_assert_not(ag_policy_pays_back(&p, 2, 4096 * 1000.0, ag_policy_charge(10e6, 2, 2, 0), 1, 0));
  /* OPJIT_HOT_PAYBACK=0: always. */
  cr_assert(ag_policy_pays_back(&p, 0, 0, charge, 0, 0));
  /* The 8^3 kernels measured 3x faster (expected saving (0.3 + 0.667) / 2 = 0.48): 16384 calls
   * of 160 ns, 2.6 ms, now pay back; with the prior alone they did not. */
  cr_assert_not(ag_policy_pays_back(&p, 0, 16384 * 160.0, charge, 1, 0));
  ag_policy_learn(&p, 0, 1.0 / 3);
  cr_assert(ag_policy_pays_back(&p, 0, 16384 * 160.0, charge, 1, 0));
}

Test(policy, each_class_is_tried_once_when_a_core_is_idle)
{
  ag_policy_t p = {0};
  /* 64 calls of 60 ns come nowhere near a 1 ms charge, but class 0 has no verdict yet. */
  cr_assert_eq(ag_policy_pays_back(&p, 0, 64 * 60.0, 1e6, 1, 0), 0, "no idle core: no trial");
  cr_assert_eq(ag_policy_pays_back(&p, 0, 64 * 60.0, 1e6, 1, 1), 2, "the class's trial");
  cr_assert_eq(ag_policy_pays_back(&p, 0, 64 * 60.0, 1e6, 1, 1), 2, "asking takes nothing");
  cr_assert(ag_policy_take_trial(&p, 0));
  cr_assert_not(ag_policy_take_trial(&p, 0), "one trial per class");
  cr_assert_eq(ag_policy_pays_back(&p, 0, 64 * 60.0, 1e6, 1, 1), 0, "the trial is taken");
  cr_assert_eq(ag_policy_pays_back(&p, 1, 64 * 60.0, 1e6, 1, 1), 2, "another class has its own");
  ag_policy_learn(&p, 2, 1.5);
  cr_assert_eq(ag_policy_pays_back(&p, 2, 64 * 60.0, 1e6, 1, 1), 0, "a class with a verdict");
}

Test(policy, a_decision_says_its_figures_and_which_way_they_went)
{
  ag_policy_t p = {0};
  char why[256];
  /* 4096 calls of 160 ns: 0.655 ms x 30 % = 0.197 ms against 1 x 1 ms. */
  cr_assert_eq(ag_policy_decide(&p, 0, 4096 * 160.0, 1e6, 1, 0, why, sizeof why), 0);
  cr_expect_str_eq(why, "not worth a compile yet: 0.655 ms spent x 30% expected saving = "
                        "0.197 ms < OPJIT_HOT_PAYBACK=1 x 1 ms compile charge");
  cr_assert_eq(ag_policy_decide(&p, 0, 4096 * 1000.0, 1e6, 1, 0, why, sizeof why), 1);
  cr_expect_str_eq(why, "pays back: 4.1 ms spent x 30% expected saving = 1.23 ms >= "
                        "OPJIT_HOT_PAYBACK=1 x 1 ms compile charge");
  cr_assert_eq(ag_policy_decide(&p, 0, 64 * 60.0, 1e6, 1, 1, why, sizeof why), 2);
  cr_expect(!strncmp(why, "its size's first trial: ", 24) && strstr(why, "(idle core)"), "%s",
            why);
  cr_assert_eq(ag_policy_decide(&p, 0, 0, 1e6, 0, 0, why, sizeof why), 1);
  cr_expect(strstr(why, "OPJIT_HOT_PAYBACK=0"), "%s", why);
}

Test(policy, a_stored_kernel_is_weighed_against_its_placing)
{
  ag_policy_t p = {0};
  char why[256];
  ag_payback_t t;
  cr_assert_eq(ag_policy_test(&p, 0, 4096 * 160.0, AG_POLICY_PLACE_NS, 1, 0, &t), 0);
  t.placing = 1;
  ag_policy_words(&t, why, sizeof why);
  cr_expect_str_eq(why, "not worth placing yet: 0.655 ms spent x 30% expected saving = 0.197 ms "
                        "< OPJIT_HOT_PAYBACK=1 x 1.5 ms placing charge (the database stores its "
                        "kernel)");
  cr_assert_eq(ag_policy_test(&p, 0, 4096 * 160.0, AG_POLICY_PLACE_NS / 10, 1, 1, &t), 1);
  t.placing = 1;
  ag_policy_words(&t, why, sizeof why);
  cr_expect(strstr(why, "x 0.15 ms placing charge (idle core; the database stores its kernel)"),
            "%s", why);
  cr_assert_eq(ag_policy_test(&p, 0, 4096 * 1500.0, AG_POLICY_PLACE_NS, 1, 0, &t), 1,
               "6 ms spent pays a placing back, not a 10 ms compile");
  cr_assert_eq(ag_policy_test(&p, 0, 4096 * 1500.0, 10e6, 1, 0, NULL), 0);
}

Test(policy, a_tests_figures_are_worded_later_as_its_decision_was)
{
  ag_policy_t p = {0};
  char now[256], later[256];
  ag_payback_t t;
  cr_assert_eq(ag_policy_test(&p, 0, 4096 * 160.0, 1e6, 1, 0, &t), 0);
  ag_policy_decide(&p, 0, 4096 * 160.0, 1e6, 1, 0, now, sizeof now);
  ag_policy_learn(&p, 0, 0.5); /* what the class expects moves after the test */
  ag_policy_words(&t, later, sizeof later);
  cr_expect_str_eq(later, now);
}

Test(policy, a_library_at_three_quarters_of_one_core_s_peak_leaves_a_kernel_nothing)
{
  double flops = 2.0 * 512 * 512 * 512; /* 268 MFLOP */
  /* 1.05 ms: 256 GF/s, more than one core's 223 (a library on two threads) */
  cr_expect_eq(ag_policy_library_wins(flops, 1.05e6, 223), 1);
  /* 1.6 ms: 168 GF/s, just over 0.75 x 223 = 167 */
  cr_expect_eq(ag_policy_library_wins(flops, 1.6e6, 223), 1);
  /* 1.8 ms: 149 GF/s, 67 % of the peak (OpenBLAS SkylakeX on one thread): the judge decides */
  cr_expect_eq(ag_policy_library_wins(flops, 1.8e6, 223), 0);
  /* 6.8 ms: 39 GF/s (OpenBLAS on its SSE3 Prescott kernels) */
  cr_expect_eq(ag_policy_library_wins(flops, 6.8e6, 223), 0);
  /* unknown figures never keep the library */
  cr_expect_eq(ag_policy_library_wins(flops, 1.05e6, 0), 0);
  cr_expect_eq(ag_policy_library_wins(flops, 0, 223), 0);
}

/* The decisions taken on a long signature's timed calls one after another, the fastest so far
 * weighed (as tier.c does), into out[0..n). */
static void long_calls(const double *ns, int n, double flops, double peak, enum ag_long *out)
{
  double best = 0;
  for (int i = 0; i < n; i++) {
    best = best <= 0 || ns[i] < best ? ns[i] : best;
    out[i] = ag_policy_long_call(flops, best, (uint64_t)i + 1, peak);
  }
}

Test(policy, a_long_call_s_library_is_weighed_on_its_fastest_call)
{
  double flops = 2.0 * 512 * 512 * 512, peak = 223;
  enum ag_long d[6];
  /* OpenBLAS's two-thread 512^3 sgemm while the other core is busy, then once not: a mean of
   * 1.78 ms (151 GF/s, 68 % of the peak) took it for a kernel's; its 1.05 ms call keeps it */
  const double busy[] = {2.4e6, 1.9e6, 2.2e6, 1.05e6, 2.3e6, 1.8e6};
  long_calls(busy, 6, flops, peak, d);
  for (int i = 0; i < 3; i++)
    cr_expect_eq(d[i], AG_LONG_WAIT, "timing %d", i);
  for (int i = 3; i < 6; i++)
    cr_expect_eq(d[i], AG_LONG_LIBRARY, "timing %d", i);
  /* its fast call first: kept at once, whatever comes after */
  const double fast[] = {1.05e6, 2.4e6};
  long_calls(fast, 2, flops, peak, d);
  cr_expect_eq(d[0], AG_LONG_LIBRARY);
  cr_expect_eq(d[1], AG_LONG_LIBRARY);
  /* OpenBLAS on its SSE3 Prescott kernels (39 GF/s): the kernel's from the fourth timing on */
  const double prescott[] = {7.9e6, 6.9e6, 6.8e6, 6.8e6, 7.0e6};
  long_calls(prescott, 5, flops, peak, d);
  cr_expect_eq(d[2], AG_LONG_WAIT);
  cr_expect_eq(d[3], AG_LONG_KERNEL);
  cr_expect_eq(d[4], AG_LONG_KERNEL);
  /* OpenBLAS SkylakeX on one thread, 1.8 ms (67 %): the judge decides between it and a kernel */
  cr_expect_eq(ag_policy_long_call(flops, 1.8e6, AG_POLICY_LONG_TIMINGS, peak), AG_LONG_KERNEL);
  /* an unknown peak or timing never keeps the library */
  cr_expect_eq(ag_policy_long_call(flops, 1.05e6, AG_POLICY_LONG_TIMINGS, 0), AG_LONG_KERNEL);
  cr_expect_eq(ag_policy_long_call(flops, 0, AG_POLICY_LONG_TIMINGS, peak), AG_LONG_KERNEL);
  cr_expect_eq(ag_policy_long_call(flops, 0, 1, peak), AG_LONG_WAIT);
}

Test(policy, the_queue_compiles_a_library_near_the_peak_after_the_others)
{
  double peak64 = 109.3, peak32 = 218.5; /* the Zen 5's 512-bit FMA peaks, GF/s */
  /* bench_smallgemm's shapes, OpenBLAS SkylakeX's fastest calls: dgemm 64^3 (CBLAS) at 0.93 of
   * the peak (its kernel tied), sgemm 64^3 at 0.94, against dgemm 12x20x16 at 0.26 and sgemm
   * 48x24x64 at 0.53, called as often or half as often */
  ag_pick_t d64 = {20000, 2.0 * 64 * 64 * 64, 5147, peak64};
  ag_pick_t s64 = {20000, 2.0 * 64 * 64 * 64, 2562, peak32};
  ag_pick_t d12 = {10000, 2.0 * 12 * 20 * 16, 247, peak64};
  ag_pick_t s48 = {20000, 2.0 * 48 * 24 * 64, 1271, peak32};
  cr_expect_eq(ag_policy_pick_before(&d12, &d64), 1);
  cr_expect_eq(ag_policy_pick_before(&d64, &d12), 0);
  cr_expect_eq(ag_policy_pick_before(&s48, &s64), 1);
  cr_expect_eq(ag_policy_pick_before(&s64, &s48), 0);
  /* within each side of the share, the most calls first; equal: neither */
  cr_expect_eq(ag_policy_pick_before(&s48, &d12), 1);
  cr_expect_eq(ag_policy_pick_before(&d12, &s48), 0);
  cr_expect_eq(ag_policy_pick_before(&d64, &s64), 0);
  cr_expect_eq(ag_policy_pick_before(&s64, &d64), 0);
  ag_pick_t d64_more = d64;
  d64_more.calls *= 2;
  cr_expect_eq(ag_policy_pick_before(&d64_more, &s64), 1);
  /* unknown figures (no timed call, no machine model yet): calls alone, as before the model */
  ag_pick_t untimed = {30000, 2.0 * 64 * 64 * 64, 0, peak64}, nomodel = {30000, 1e6, 1000, 0};
  cr_expect_eq(ag_policy_pick_before(&untimed, &s48), 1);
  cr_expect_eq(ag_policy_pick_before(&nomodel, &s48), 1);
}

Test(policy, long_calls_are_tested_at_every_doubling_short_ones_at_64_and_every_4096th)
{
  ag_entry_t e;
  memset(&e, 0, sizeof e);
  uint64_t at[32];
  atomic_store(&e.best_ns, 20000); /* 20 us: short */
  cr_assert_eq(hot_tests(&e, 3 * 4096, at, 32), 4);
  cr_expect(at[0] == 64 && at[1] == 4096 && at[2] == 8192 && at[3] == 12288);
  atomic_store(&e.best_ns, AG_LONG_CALL_NS); /* long: 64, 128, ... 4096, then every 4096 */
  cr_assert_eq(hot_tests(&e, 3 * 4096, at, 32), 9);
  for (int i = 0; i < 7; i++)
    cr_expect_eq(at[i], 64u << i);
  cr_expect(at[7] == 8192 && at[8] == 12288);
  ag_hot_calls = 100; /* OPJIT_HOT_CALLS=100: that call, then the doublings past it */
  cr_assert_eq(hot_tests(&e, 4096, at, 32), 7);
  cr_expect(at[0] == 100 && at[1] == 128 && at[6] == 4096);
  ag_hot_calls = 64;
}
