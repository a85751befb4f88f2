/* SPDX-License-Identifier: MIT */
/* Promotion policy (policy.h). */
#include "policy.h"

#include <stdio.h>

int ag_policy_class(uint32_t m, uint32_t n, uint32_t k)
{
  double v = (double)(m ? m : 1) * (n ? n : 1) * (k ? k : 1);
  int c = 0;
  for (double edge = 8; c < AG_POLICY_CLASSES - 1 && v > edge * edge * edge; edge *= 2)
    c++;
  return c;
}

void ag_policy_learn(ag_policy_t *p, int cls, double median_ratio)
{
  double g = 1.0 - median_ratio;
  g = g < 0 ? 0 : g > 0.9 ? 0.9 : g;
  /* One writer: a load and a store (no floating-point read-modify-write, which would need
   * libatomic). */
  atomic_store_explicit(&p->gain_sum[cls],
                        atomic_load_explicit(&p->gain_sum[cls], memory_order_relaxed) + g,
                        memory_order_relaxed);
  atomic_fetch_add_explicit(&p->gain_n[cls], 1, memory_order_relaxed);
}

double ag_policy_gain(const ag_policy_t *p, int cls)
{
  return (AG_POLICY_PRIOR_GAIN + p->gain_sum[cls]) / (1 + p->gain_n[cls]);
}

double ag_policy_charge(double compile_ns, long busy, long ncpu, int pool)
{
  return pool ? compile_ns * (double)ncpu
         : busy < ncpu ? compile_ns * AG_POLICY_IDLE_SHARE
                       : compile_ns;
}

int ag_policy_pays_back(const ag_policy_t *p, int cls, double spent_ns, double charge,
                        long payback, int idle)
{
  return ag_policy_test(p, cls, spent_ns, charge, payback, idle, NULL);
}

int ag_policy_test(const ag_policy_t *p, int cls, double spent_ns, double charge, long payback,
                   int idle, ag_payback_t *t)
{
  double gain = ag_policy_gain(p, cls), saved = spent_ns * gain, cost = (double)payback * charge;
  int pb = saved >= cost ? 1
           : idle && p->gain_n[cls] == 0 && atomic_load(&p->trials[cls]) == 0 ? 2
                                                                               : 0;
  if (t)
    *t = (ag_payback_t){spent_ns, gain, charge, payback, idle, pb};
  return pb;
}

void ag_policy_words(const ag_payback_t *t, char *why, size_t len)
{
  int pb = t->verdict;
  if (!t->payback) {
    snprintf(why, len, "hot (OPJIT_HOT_PAYBACK=0: no payback test)");
    return;
  }
  snprintf(why, len, "%s%.3g ms spent x %.0f%% expected saving = %.3g ms %s OPJIT_HOT_PAYBACK=%ld "
           "x %.3g ms %s charge%s",
           pb == 1 ? "pays back: " : pb == 2 ? "its size's first trial: "
           : t->placing ? "not worth placing yet: " : "not worth a compile yet: ",
           t->spent_ns / 1e6, 100 * t->gain, t->spent_ns * t->gain / 1e6, pb == 1 ? ">=" : "<",
           t->payback, t->charge / 1e6, t->placing ? "placing" : "compile",
           t->placing && t->idle ? " (idle core; the database stores its kernel)"
           : t->placing          ? " (the database stores its kernel)"
           : t->idle             ? " (idle core)"
                                 : "");
}

int ag_policy_decide(const ag_policy_t *p, int cls, double spent_ns, double charge, long payback,
                     int idle, char *why, size_t len)
{
  ag_payback_t t;
  int pb = ag_policy_test(p, cls, spent_ns, charge, payback, idle, &t);
  if (why && len)
    ag_policy_words(&t, why, len);
  return pb;
}

int ag_policy_take_trial(ag_policy_t *p, int cls)
{
  int none = 0;
  return atomic_compare_exchange_strong(&p->trials[cls], &none, 1);
}

int ag_policy_library_wins(double flops, double call_ns, double peak_gflops)
{
  return flops > 0 && call_ns > 0 && peak_gflops > 0 &&
         flops / call_ns >= AG_POLICY_LIB_SHARE * peak_gflops;
}

enum ag_long ag_policy_long_call(double flops, double best_ns, uint64_t timed,
                                 double peak_gflops)
{
  if (ag_policy_library_wins(flops, best_ns, peak_gflops))
    return AG_LONG_LIBRARY;
  return timed < AG_POLICY_LONG_TIMINGS ? AG_LONG_WAIT : AG_LONG_KERNEL;
}

int ag_policy_pick_before(const ag_pick_t *a, const ag_pick_t *b)
{
  int near_a = ag_policy_library_wins(a->flops, a->best_ns, a->peak_gflops);
  int near_b = ag_policy_library_wins(b->flops, b->best_ns, b->peak_gflops);
  if (near_a != near_b)
    return near_b;
  return a->calls > b->calls;
}
