/* SPDX-License-Identifier: MIT */
/* The handler's stack walker against libgcc's unwinder, on real frames: a CPU-time signal
 * interrupts a deep chain of this program's frames, gcc's realigned (DRAP) AVX frames and
 * glibc's qsort among them, and both walks must name the same return addresses to the
 * outermost frame. Then its limits: stack bounds it must not load outside of, code it has no
 * rule for, and an object unloaded under it. */
#define _GNU_SOURCE
#include "sampler/unwind.h"

#include <alloca.h>
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <immintrin.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>

static uint64_t stack_lo, stack_hi; /* the test thread's stack */
static uint64_t walked[64];
static int nwalked, why;
static void *traced[128];
static int ntraced;
static volatile sig_atomic_t fired;

static void on_prof(int sig, siginfo_t *si, void *ucv)
{
  (void)sig, (void)si;
  if (fired)
    return;
  const greg_t *g = ((ucontext_t *)ucv)->uc_mcontext.gregs;
  uw_regs_t r = {(uint64_t)g[REG_RIP], (uint64_t)g[REG_RSP], (uint64_t)g[REG_RBP]};
  nwalked = uw_walk(r, stack_lo, stack_hi, walked, 64, &why);
  ntraced = backtrace(traced, 128);
  fired = 1;
}

static void this_stack(void)
{
  pthread_attr_t a;
  void *base;
  size_t size;
  cr_assert_eq(pthread_getattr_np(pthread_self(), &a), 0);
  pthread_attr_getstack(&a, &base, &size);
  pthread_attr_destroy(&a);
  stack_lo = (uint64_t)(uintptr_t)base, stack_hi = stack_lo + size;
}

__attribute__((noinline)) void sink(void *p, int n)
{
  __asm__ volatile("" ::"r"(p), "r"(n) : "memory");
}

static int level(int n);

/* A frame gcc realigns through a DRAP register: CFA = *(RBP - k), RBP saved at RBP + 0. */
__attribute__((noinline, target("avx2"))) static int realigned(int n)
{
  __m256 v[4];
  char *buf = alloca((size_t)n + 16);
  for (int i = 0; i < 4; i++)
    v[i] = _mm256_set1_ps((float)(i + n));
  sink(v, 4);
  sink(buf, n);
  return level(n - 1) + (int)v[1][2];
}

static int qsort_depth;
static int cmp(const void *a, const void *b)
{
  if (qsort_depth > 0) {
    int d = qsort_depth;
    qsort_depth = 0;
    sink(NULL, level(d - 1));
  }
  return *(const int *)a - *(const int *)b;
}

/* Through glibc: qsort calls cmp, which goes on down. */
__attribute__((noinline)) static int via_qsort(int n)
{
  int v[2] = {2, 1};
  qsort_depth = n;
  qsort(v, 2, sizeof *v, cmp);
  return v[0];
}

__attribute__((noinline)) static int level(int n)
{
  if (n <= 0) {
    while (!fired) /* the signal lands here, deep in the chain */
      sink(NULL, n);
    return 0;
  }
  volatile int pad[8] = {n};
  int r = n % 3 == 0 ? realigned(n) : n % 7 == 0 ? via_qsort(n) : level(n - 1);
  return r + pad[0];
}

/* Interrupts level(30) with a CPU-time signal; the handler walks. */
static void interrupt_deep_chain(void)
{
  struct itimerval it = {{0, 1000}, {0, 1000}};
  fired = 0;
  setitimer(ITIMER_PROF, &it, NULL);
  level(30);
  setitimer(ITIMER_PROF, &(struct itimerval){0}, NULL);
}

Test(unwind, walks_as_libgcc_does_to_the_outermost_frame)
{
  cr_assert_eq(uw_refresh(), 0);
  backtrace(traced, 1); /* loads libgcc before the handler needs it */
  this_stack();
  struct sigaction sa = {0};
  sa.sa_sigaction = on_prof;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGPROF, &sa, NULL);
  uint64_t first[64];
  int nfirst = 0;
  for (int round = 0; round < 2; round++) { /* the second walk runs on cached rules */
    interrupt_deep_chain();
    cr_assert_eq(why, UW_END, "stopped with %d after %d frames", why, nwalked);
    int at = -1;
    for (int i = 0; i < ntraced && at < 0; i++)
      if ((uint64_t)traced[i] == walked[0])
        at = i;
    cr_assert_geq(at, 0, "libgcc's trace does not hold the interrupted PC");
    cr_assert_eq(ntraced - at, nwalked, "libgcc: %d frames, the walker: %d", ntraced - at, nwalked);
    for (int i = 0; i < nwalked; i++)
      cr_assert_eq((uint64_t)traced[at + i], walked[i], "round %d: frame %d differs", round, i);
    cr_assert_geq(nwalked, 30, "only %d frames", nwalked);
    if (round == 0) {
      memcpy(first, walked, sizeof first);
      nfirst = nwalked;
    }
  }
  /* The signal lands in level(0)'s loop or in the sink() it calls: the walks may differ by that
   * innermost frame, and name the same callers from the outermost inwards. */
  cr_assert_leq(abs(nwalked - nfirst), 1, "walks of %d and %d frames", nfirst, nwalked);
  int same = (nwalked < nfirst ? nwalked : nfirst) - 1;
  for (int i = 1; i <= same; i++)
    cr_assert_eq(walked[nwalked - i], first[nfirst - i], "cached walk: frame %d differs",
                 nwalked - i);
}

Test(unwind, stops_at_max_frames)
{
  cr_assert_eq(uw_refresh(), 0);
  this_stack();
  uint64_t out[4];
  int stop;
  ucontext_t uc;
  getcontext(&uc);
  const greg_t *g = uc.uc_mcontext.gregs;
  int n = uw_walk((uw_regs_t){(uint64_t)g[REG_RIP], (uint64_t)g[REG_RSP], (uint64_t)g[REG_RBP]},
                  stack_lo, stack_hi, out, 4, &stop);
  cr_assert_eq(n, 4);
  cr_assert_eq(stop, UW_MAX);
  cr_assert_eq(out[0], (uint64_t)g[REG_RIP]);
}

Test(unwind, never_loads_outside_the_stack_bounds)
{
  cr_assert_eq(uw_refresh(), 0);
  /* At a function's first instruction the return address is at RSP: a stack of 8 bytes
   * below RSP's slot holds nothing the walker may read. */
  uint64_t frame[4] = {0x1234, 0, 0, 0};
  uint64_t sp = (uint64_t)(uintptr_t)frame, out[8];
  int stop;
  int n = uw_walk((uw_regs_t){(uint64_t)(uintptr_t)&level, sp, 8}, sp + 8, sp + 32, out, 8, &stop);
  cr_assert_eq(n, 1);
  cr_assert_eq(stop, UW_BOUNDS);
  /* Inside the bounds, the return address read is garbage: code in no object. */
  n = uw_walk((uw_regs_t){(uint64_t)(uintptr_t)&level, sp, 8}, sp, sp + 32, out, 8, &stop);
  cr_assert_eq(n, 2);
  cr_assert_eq(out[1], 0x1234);
  cr_assert_eq(stop, UW_NOINFO);
  /* A frame that does not move outwards ends the walk: RSP far above the bounds. */
  n = uw_walk((uw_regs_t){(uint64_t)(uintptr_t)&level, UINT64_MAX - 64, 8}, sp, sp + 32, out, 8, &stop);
  cr_assert_eq(stop, UW_BOUNDS);
}

Test(unwind, has_no_rule_for_code_outside_every_object)
{
  cr_assert_eq(uw_refresh(), 0);
  void *heap = malloc(64);
  uint64_t out[4];
  int stop;
  int n = uw_walk((uw_regs_t){(uint64_t)(uintptr_t)heap, 0, 0}, 0, 0, out, 4, &stop);
  cr_assert_eq(n, 1);
  cr_assert_eq(stop, UW_NOINFO);
  free(heap);
}

Test(unwind, forgets_an_unloaded_object)
{
  cr_assert_eq(uw_refresh(), 0);
  void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(h);
  void *fn = dlsym(h, "_ULx86_64_step");
  cr_assert_not_null(fn);
  cr_assert_eq(uw_refresh(), 0);
  uint64_t frame[4] = {0, 0, 0, 0}, sp = (uint64_t)(uintptr_t)frame, out[4];
  int stop;
  /* Loaded: its entry has a rule (the return address, 0 here, ends the walk). */
  int n = uw_walk((uw_regs_t){(uint64_t)(uintptr_t)fn, sp, 0}, sp, sp + 32, out, 4, &stop);
  cr_assert_eq(stop, UW_END, "stop %d after %d", stop, n);
  uw_unload_begin();
  n = uw_walk((uw_regs_t){(uint64_t)(uintptr_t)fn, sp, 0}, sp, sp + 32, out, 4, &stop);
  cr_assert_eq(stop, UW_OFF);
  cr_assert_eq(n, 1);
  dlclose(h);
  uw_unload_end();
  if (dladdr(fn, &(Dl_info){0})) /* still mapped: another user holds it */
    return;
  n = uw_walk((uw_regs_t){(uint64_t)(uintptr_t)fn, sp, 0}, sp, sp + 32, out, 4, &stop);
  cr_assert_eq(stop, UW_NOINFO, "the unloaded object's cached rule was used");
}

Test(unwind, learns_an_object_loaded_after_its_snapshot)
{
  cr_assert_eq(uw_refresh(), 0);
  void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(h);
  void *fn = dlsym(h, "_ULx86_64_step");
  uint64_t frame[4] = {0, 0, 0, 0}, sp = (uint64_t)(uintptr_t)frame, out[4];
  int stop;
  /* Loaded already (criterion or an earlier test may hold it) or not: a snapshot taken now
   * knows it, whatever an earlier walk found. */
  uw_walk((uw_regs_t){(uint64_t)(uintptr_t)fn, sp, 0}, sp, sp + 32, out, 4, &stop);
  cr_assert_eq(uw_refresh(), 0);
  uw_walk((uw_regs_t){(uint64_t)(uintptr_t)fn, sp, 0}, sp, sp + 32, out, 4, &stop);
  cr_assert_eq(stop, UW_END, "stop %d: a rule from before the object was known stuck", stop);
  dlclose(h);
}

/* ---- wherever a signal lands ---------------------------------------------------------- */

static volatile sig_atomic_t compared, differed, unsupported;

/* Compares the walker with libgcc from the interrupted context ucv. */
static void compare_walks(void *ucv)
{
  const greg_t *g = ((ucontext_t *)ucv)->uc_mcontext.gregs;
  uint64_t out[64];
  int stop, n = uw_walk((uw_regs_t){(uint64_t)g[REG_RIP], (uint64_t)g[REG_RSP], (uint64_t)g[REG_RBP],
                                    (uint64_t)g[REG_R10], (uint64_t)g[REG_R13]},
                        (uint64_t)g[REG_RSP], stack_hi, out, 64, &stop);
  if (stop != UW_END) {
    unsupported++;
    return;
  }
  void *bt[128];
  int nb = backtrace(bt, 128), at = -1;
  for (int i = 0; i < nb && at < 0; i++)
    if ((uint64_t)bt[i] == out[0])
      at = i;
  if (at < 0)
    return; /* libgcc lost the interrupted frame: nothing to compare */
  compared++;
  int same = nb - at == n;
  for (int i = 0; same && i < n; i++)
    same = (uint64_t)bt[at + i] == out[i];
  differed += !same;
}

/* On every signal: the interrupted PC may be anywhere in the functions below. */
static void on_prof_compare(int sig, siginfo_t *si, void *ucv)
{
  (void)sig, (void)si;
  compare_walks(ucv);
}

static volatile sig_atomic_t stepping;

/* On every instruction (the trap flag): prologues, epilogues and DRAP windows included. */
static void on_trap(int sig, siginfo_t *si, void *ucv)
{
  (void)sig, (void)si;
  if (!stepping) {
    ((ucontext_t *)ucv)->uc_mcontext.gregs[REG_EFL] &= ~0x100; /* stop stepping */
    return;
  }
  compare_walks(ucv);
}

__attribute__((noinline)) static double leaf(double x, int n)
{
  for (int i = 0; i < n; i++)
    x = x * 1.0000001 + 1e-9;
  return x;
}

static double churn(int depth);

/* Short frames entered and left all the time, so that signals land in prologues, epilogues
 * and realigned frames' DRAP windows as well as in bodies. */
__attribute__((noinline, target("avx2"))) static double churn_aligned(int depth)
{
  __m256 v[2];
  char *buf = alloca((size_t)depth + 16);
  v[0] = _mm256_set1_ps((float)depth), v[1] = v[0];
  sink(v, 2);
  sink(buf, depth);
  return churn(depth - 1) + (double)v[1][3];
}

__attribute__((noinline)) static double churn(int depth)
{
  if (depth <= 0)
    return leaf(1.0, 50);
  volatile double pad[4] = {depth};
  double r = depth % 2 ? churn_aligned(depth) : churn(depth - 1) + leaf(pad[0], 5);
  return r + pad[1];
}

Test(unwind, walks_as_libgcc_does_wherever_the_signal_lands)
{
  cr_assert_eq(uw_refresh(), 0);
  backtrace((void *[1]){0}, 1);
  this_stack();
  struct sigaction sa = {0};
  sa.sa_sigaction = on_prof_compare;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGPROF, &sa, NULL);
  struct itimerval it = {{0, 997}, {0, 997}};
  setitimer(ITIMER_PROF, &it, NULL);
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  double sum = 0;
  do {
    for (int i = 0; i < 200; i++)
      sum += churn(12);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  } while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < 1000);
  setitimer(ITIMER_PROF, &(struct itimerval){0}, NULL);
  sink(&sum, 0);
  cr_assert_geq(compared, 100, "only %d walks compared (%d the walker left)", (int)compared,
                (int)unsupported);
  cr_assert_eq(differed, 0, "%d of %d walks differ from libgcc's", (int)differed, (int)compared);
  /* Where a timer signal lands is the CPU's business: an Intel Xeon (family 6 model 167) here
   * takes most of them on the instruction after a register-zeroing idiom (churn_aligned's
   * vxorps, inside its DRAP window, where the CFA is r10-based), AMD's where time goes (leaf).
   * The walker reads the DRAP register from the context, so the few it leaves are in the
   * realigned frames' last instructions after `leave` (gcc's CFI keeps RBP "saved at RBP"
   * there); the test below counts them instruction by instruction. */
  cr_assert_lt(unsupported * 20, compared, "the walker left %d of %d", (int)unsupported,
               (int)compared);
}

/* Single-steps the code that follows (the trap flag: a SIGTRAP after every instruction, where
 * on_trap compares the walks) until STEP_OFF. Macros, so that the stepped instructions are the
 * test's own, as written. */
#define STEP_ON()                                                                            \
  do {                                                                                       \
    struct sigaction sa_ = {0};                                                              \
    sa_.sa_sigaction = on_trap;                                                              \
    sa_.sa_flags = SA_SIGINFO;                                                               \
    sigaction(SIGTRAP, &sa_, NULL);                                                          \
    stepping = 1;                                                                            \
    __asm__ volatile("pushfq; orq $0x100, (%%rsp); popfq" ::: "memory", "cc");               \
  } while (0)
#define STEP_OFF()                                                                           \
  do {                                                                                       \
    stepping = 0;                                                                            \
    __asm__ volatile("nop");                                                                 \
  } while (0)

/* A call into libc goes through the program's PLT: its entries' CFA is a DWARF expression
 * (RSP + 8, + 8 once the entry pushed its index) the walker interprets for the entry's byte it
 * is at. Stepped instruction by instruction, every walk there and in libc agrees with libgcc. */
Test(unwind, walks_as_libgcc_does_through_a_plt_entry)
{
  cr_assert_eq(uw_refresh(), 0);
  backtrace((void *[1]){0}, 1);
  this_stack();
  pid_t pid = getpid(); /* its PLT slot bound, as a running program's are */
  STEP_ON();
  pid_t again = getpid();
  STEP_OFF();
  cr_assert_eq(again, pid);
  cr_assert_geq(compared, 3, "only %d walks compared (%d the walker left)", (int)compared,
                (int)unsupported);
  cr_assert_eq(differed, 0, "%d of %d walks differ from libgcc's", (int)differed, (int)compared);
  cr_assert_eq(unsupported, 0, "the walker left %d of %d", (int)unsupported, (int)compared);
}

Test(unwind, walks_as_libgcc_does_at_every_instruction)
{
  cr_assert_eq(uw_refresh(), 0);
  backtrace((void *[1]){0}, 1);
  this_stack();
  double warm = churn(4); /* rules cached, as a running program's are */
  STEP_ON();
  double r = churn(4);
  STEP_OFF();
  sink(&r, 0);
  cr_assert_eq(r, warm);
  /* ~470 instructions built with -O2 (RelWithDebInfo), ~375 with -O3 (Release): all but 3
   * compared (the DRAP windows included, where the CFA is r10-based: without r10 from the
   * context, 36 were left); the 3 are a realigned frame's last instructions after its `leave`,
   * where gcc's CFI says RBP is saved at RBP: the RBP it yields there is garbage for libgcc
   * too, and the walk stops at the frame that needs it */
  cr_assert_geq(compared, 300, "only %d walks compared (%d the walker left)", (int)compared,
                (int)unsupported);
  cr_assert_eq(differed, 0, "%d of %d walks differ from libgcc's", (int)differed, (int)compared);
#if !defined(__SANITIZE_ADDRESS__) /* ASan's code (churn's checks and its runtime's) leaves ~1 % */
  cr_assert_lt(unsupported * 100, compared, "the walker left %d of %d", (int)unsupported,
               (int)compared);
#endif
}
