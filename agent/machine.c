/* SPDX-License-Identifier: MIT */
/* What this CPU can do: vector ISAs from CPUID and XGETBV, FMA peaks measured with tight loops
 * of independent FMA chains (one function per width and dtype, compiled for its ISA and run
 * only where the CPU has it), the clock's cost, and the ISA choice behind OPJIT_ISA. Pure:
 * no global state; the agent's, the command's and the tests'. */
#include "machine.h"
#include "jit/objload.h"

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const ext_names[] = {
#define AG_X_NAME_(id, name) name,
    AG_ISA_EXTS(AG_X_NAME_)
#undef AG_X_NAME_
};

static const char *const isa_names[AG_ISA__COUNT] = {"sse2", "avx2", "avx512"};

const char *ag_isa_name(int isa) { return isa >= 0 && isa < AG_ISA__COUNT ? isa_names[isa] : "?"; }

int ag_isa_bits(int isa) { return 128 << isa; }

/* XCR0: the register state the OS saves, hence what it lets programs use. */
static uint64_t xgetbv0(void)
{
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t)hi << 32 | lo;
}

void ag_machine_detect(ag_machine_t *m)
{
  unsigned a, b, c, d, x = AG_X(SSE2); /* x86-64's baseline */
  memset(m, 0, sizeof *m);
  unsigned max = __get_cpuid_max(0, NULL);
  if (max >= 1 && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE)) {
    uint64_t xcr0 = xgetbv0();
    int ymm = (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0; /* SSE+AVX; opmask+ZMM */
    if (ymm && (c & bit_AVX))
      x |= AG_X(AVX);
    if (ymm && (c & bit_FMA))
      x |= AG_X(FMA);
    if (max >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      if ((x & AG_X(AVX)) && (b & bit_AVX2))
        x |= AG_X(AVX2);
      if (zmm && (b & bit_AVX512F)) {
        x |= AG_X(AVX512F);
        x |= (b & bit_AVX512DQ ? AG_X(AVX512DQ) : 0) | (b & bit_AVX512BW ? AG_X(AVX512BW) : 0) |
             (b & bit_AVX512VL ? AG_X(AVX512VL) : 0) |
             (c & bit_AVX512VNNI ? AG_X(AVX512VNNI) : 0) |
             (d & bit_AVX512FP16 ? AG_X(AVX512FP16) : 0);
        if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & bit_AVX512BF16))
          x |= AG_X(AVX512BF16);
      }
    }
  }
  char why[8];
  m->exts = x;
  m->widest = ag_machine_isa_choose(0, x, why, sizeof why);
  m->vregs = m->widest == AG_ISA_AVX512 ? 32 : 16;
}

int ag_machine_isa_choose(long want, unsigned exts, char *why, size_t len)
{
  unsigned v2 = AG_X(AVX2) | AG_X(FMA);
  int avx2 = (exts & v2) == v2;
  int widest = avx2 && (exts & AG_X(AVX512F)) ? AG_ISA_AVX512 : avx2 ? AG_ISA_AVX2 : AG_ISA_SSE2;
  why[0] = 0;
  if (want <= 0 || want > AG_ISA__COUNT)
    return widest;
  int isa = (int)want - 1;
  if (isa <= widest)
    return isa;
  snprintf(why, len, "OPJIT_ISA='%s': this CPU (or its OS) lacks %s; using '%s', the widest it "
           "has", isa_names[isa], isa == AG_ISA_AVX512 ? "AVX-512F" : "AVX2 and FMA",
           isa_names[widest]);
  return widest;
}

void ag_machine_exts_format(unsigned exts, char *buf, size_t len)
{
  size_t n = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof ext_names / sizeof *ext_names; i++)
    if (exts & 1u << i) {
      int w = snprintf(buf + n, len - n, "%s%s", n ? " " : "", ext_names[i]);
      if (w < 0 || (size_t)w >= len - n)
        return;
      n += (size_t)w;
    }
}

/* Whether flags (space-separated) lists name. */
static int has_flag(const char *flags, const char *name)
{
  size_t n = strlen(name);
  for (const char *p = flags; (p = strstr(p, name)) != NULL; p += n)
    if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || p[n] == 0))
      return 1;
  return 0;
}

int ag_machine_flags_widest(const char *flags)
{
  if (has_flag(flags, "avx2") && has_flag(flags, "fma"))
    return has_flag(flags, "avx512f") ? AG_ISA_AVX512 : AG_ISA_AVX2;
  return AG_ISA_SSE2;
}

void ag_machine_cpu_key(const char *model, const char *flags, char *buf, size_t len)
{
  snprintf(buf, len, "%s [flags %016llx]", model,
           (unsigned long long)jt_obj_checksum(flags, strlen(flags)));
}

/* The bits (ag_machine_t.agreed) of the peaks gflops holds. */
static unsigned peaks_mask(const double gflops[2][AG_ISA__COUNT])
{
  unsigned mask = 0;
  for (int d = 0; d < 2; d++)
    for (int w = 0; w < AG_ISA__COUNT; w++)
      mask |= gflops[d][w] > 0 ? 1u << (AG_ISA__COUNT * d + w) : 0;
  return mask;
}

/* Whether every peak m holds has agreed (ag_machine_t.settled). */
static int all_agreed(const ag_machine_t *m)
{
  unsigned peaks = peaks_mask(m->gflops);
  return peaks && (m->agreed & peaks) == peaks;
}

void ag_machine_to_store(const ag_machine_t *m, const char *cpu, st_machine_t *out)
{
  memset(out, 0, sizeof *out);
  snprintf(out->cpu, sizeof out->cpu, "%s", cpu);
  ag_machine_exts_format(m->exts, out->isa, sizeof out->isa);
  out->vregs = m->vregs;
  memcpy(out->gflops, m->gflops, sizeof out->gflops);
  out->timer_ns = m->timer_ns;
  out->method = AG_MACHINE_METHOD;
  out->measured_ns = m->measured_ns;
  out->settled = (int)(m->agreed | (m->settled ? peaks_mask(m->gflops) : 0));
}

void ag_machine_from_store(const st_machine_t *in, ag_machine_t *out)
{
  memset(out, 0, sizeof *out);
  for (const char *p = in->isa; *p;) {
    size_t n = strcspn(p, " ");
    for (size_t i = 0; i < sizeof ext_names / sizeof *ext_names; i++)
      if (strlen(ext_names[i]) == n && strncmp(ext_names[i], p, n) == 0)
        out->exts |= 1u << i;
    p += n + (p[n] == ' ');
  }
  char why[8];
  out->widest = ag_machine_isa_choose(0, out->exts, why, sizeof why);
  out->vregs = in->vregs;
  memcpy(out->gflops, in->gflops, sizeof out->gflops);
  out->timer_ns = in->timer_ns;
  out->measured_ns = in->measured_ns;
  out->agreed = (unsigned)in->settled;
  out->settled = all_agreed(out);
  out->stored = 1;
}

/* ---- measurement -------------------------------------------------------------------------- */

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One kernel per width and dtype: CHAINS independent accumulators, acc = acc * b + c (b just
 * under 1, so every chain converges to c / (1 - b) = 1: no overflow, no denormals), iters
 * times. Chains: FMA latency (4-5 cycles) times pipes (2) needs 8-10 in flight; 12 fit in 16
 * registers with b and c, 24 in AVX-512's 32. Returns a lane so nothing is dead. Never
 * instrumented: a sanitizer's stack checks keep acc in memory, a load and a store per FMA (an
 * ASan build measured 7 GF/s of a 104 GF/s Zen 3, and its long-call rule then refused every
 * large GEMM whose library beat three quarters of that). */
#define FMA_KERNEL(fn, isa, vec, set1, op, first, chains)                                    \
  __attribute__((target(isa), noinline, no_sanitize("address", "undefined", "thread")))       \
  static double fn(uint64_t iters)                                                          \
  {                                                                                          \
    vec b = set1(0.999999), c = set1(1e-6), acc[chains];                                     \
    _Pragma("GCC unroll 32") for (int j = 0; j < chains; j++) acc[j] = set1(j);             \
    for (uint64_t i = 0; i < iters; i++) {                                                   \
      _Pragma("GCC unroll 32") for (int j = 0; j < chains; j++) acc[j] = op(acc[j], b, c);  \
    }                                                                                        \
    double s = 0;                                                                            \
    _Pragma("GCC unroll 32") for (int j = 0; j < chains; j++) s += (double)first(acc[j]);   \
    return s;                                                                                \
  }

/* x86-64 without FMA: a multiply and an add (two FLOPs, as an FMA counts). */
static inline __m128 mul_add_ps(__m128 a, __m128 b, __m128 c)
{
  return _mm_add_ps(_mm_mul_ps(a, b), c);
}
static inline __m128d mul_add_pd(__m128d a, __m128d b, __m128d c)
{
  return _mm_add_pd(_mm_mul_pd(a, b), c);
}

FMA_KERNEL(sse_f32, "sse2", __m128, _mm_set1_ps, mul_add_ps, _mm_cvtss_f32, 12)
FMA_KERNEL(sse_f64, "sse2", __m128d, _mm_set1_pd, mul_add_pd, _mm_cvtsd_f64, 12)
FMA_KERNEL(fma128_f32, "fma", __m128, _mm_set1_ps, _mm_fmadd_ps, _mm_cvtss_f32, 12)
FMA_KERNEL(fma128_f64, "fma", __m128d, _mm_set1_pd, _mm_fmadd_pd, _mm_cvtsd_f64, 12)
FMA_KERNEL(fma256_f32, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_cvtss_f32, 12)
FMA_KERNEL(fma256_f64, "avx2,fma", __m256d, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_cvtsd_f64, 12)
FMA_KERNEL(fma512_f32, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_cvtss_f32, 24)
FMA_KERNEL(fma512_f64, "avx512f", __m512d, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_cvtsd_f64, 24)

typedef double (*fma_fn)(uint64_t iters);

static volatile double sink; /* what the loops compute: kept, so it is computed */

#define ROUNDS 5
#define ROUND_NS 200000 /* a round's length: long enough for a clock read's error to vanish */

/* The loop of one width (enum ag_isa) and dtype: its function, chains and lanes. */
typedef struct fma_loop_s {
  fma_fn fn;
  int chains, lanes;
} fma_loop_t;

static fma_loop_t fma_loop(int isa, int f64, int fma)
{
  static const fma_loop_t loops[2][AG_ISA__COUNT] = {
      {{fma128_f32, 12, 4}, {fma256_f32, 12, 8}, {fma512_f32, 24, 16}},
      {{fma128_f64, 12, 2}, {fma256_f64, 12, 4}, {fma512_f64, 24, 8}}};
  if (isa == AG_ISA_SSE2 && !fma)
    return (fma_loop_t){f64 ? sse_f64 : sse_f32, 12, f64 ? 2 : 4};
  return loops[f64][isa];
}

/* Iterations of l for about ns, from one short call. */
static uint64_t fma_iters(fma_loop_t l, uint64_t ns)
{
  uint64_t iters = 1000, t0 = now_ns();
  sink = l.fn(iters);
  uint64_t dt = now_ns() - t0;
  iters = dt ? iters * ns / dt : iters * 100;
  return iters < 1000 ? 1000 : iters;
}

/* One run of l for iters iterations, in GFLOP/s (= FLOP/ns). */
static double fma_run(fma_loop_t l, uint64_t iters)
{
  uint64_t t0 = now_ns();
  sink = l.fn(iters);
  uint64_t dt = now_ns() - t0;
  return dt ? 2.0 * (double)iters * l.chains * l.lanes / (double)dt : 0;
}

/* The best of ROUNDS rounds of l. The first, short call sizes the rounds. */
static double best_gflops(fma_loop_t l)
{
  uint64_t iters = fma_iters(l, ROUND_NS);
  double best = 0;
  for (int r = 0; r < ROUNDS; r++) {
    double g = fma_run(l, iters);
    best = g > best ? g : best;
  }
  return best;
}

int ag_machine_tsc_invariant(void)
{
  unsigned a, b, c, d;
  return __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8));
}

/* A read of the calls' clock as agent.h's ag_tick makes it. */
static uint64_t tick_read(int tsc)
{
  if (tsc) {
    _mm_lfence();
    return __rdtsc();
  }
  return now_ns();
}

/* The calls' clock's cost: the best of ROUNDS rounds of 2048 reads, per read. */
static double timer_cost_ns(void)
{
  int tsc = ag_machine_tsc_invariant();
  double best = 0;
  for (int r = 0; r < ROUNDS; r++) {
    uint64_t t0 = now_ns(), s = 0;
    for (int i = 0; i < 2048; i++)
      s += tick_read(tsc);
    double per = (double)(now_ns() - t0) / 2049.0;
    sink = (double)s;
    best = r == 0 || per < best ? per : best;
  }
  return best;
}

void ag_machine_measure(ag_machine_t *m)
{
  int fma = (m->exts & AG_X(FMA)) != 0;
  for (int isa = 0; isa <= m->widest && isa < AG_ISA__COUNT; isa++)
    for (int f64 = 0; f64 < 2; f64++)
      m->gflops[f64][isa] = best_gflops(fma_loop(isa, f64, fma));
  m->timer_ns = timer_cost_ns();
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  m->measured_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int ag_machine_merge(ag_machine_t *m, const ag_machine_t *x)
{
  for (int d = 0; d < 2; d++)
    for (int w = 0; w < AG_ISA__COUNT; w++) {
      double a = m->gflops[d][w], b = x->gflops[d][w];
      unsigned bit = 1u << (AG_ISA__COUNT * d + w);
      if (a > 0 && b > 0 && fabs(a - b) <= AG_MACHINE_AGREE * fmax(a, b))
        m->agreed |= bit;
      else if (b > a)
        m->agreed &= ~bit;
      m->gflops[d][w] = fmax(a, b);
    }
  if (x->timer_ns > 0 && (m->timer_ns <= 0 || x->timer_ns < m->timer_ns))
    m->timer_ns = x->timer_ns;
  m->measured_ns = x->measured_ns;
  m->settled |= all_agreed(m);
  return m->settled;
}

double ag_machine_fma_gflops(const ag_machine_t *m, int isa, int f64, uint64_t ns)
{
  if (isa < 0 || isa > m->widest || isa >= AG_ISA__COUNT)
    return 0;
  fma_loop_t l = fma_loop(isa, f64, (m->exts & AG_X(FMA)) != 0);
  return fma_run(l, fma_iters(l, ns));
}

double ag_machine_fma_pieces(const ag_machine_t *m, int isa, int f64, uint64_t piece_ns,
                             long pieces, long every, void (*after)(void *arg), void *arg)
{
  if (isa < 0 || isa > m->widest || isa >= AG_ISA__COUNT || pieces < 1 || every < 1)
    return 0;
  fma_loop_t l = fma_loop(isa, f64, (m->exts & AG_X(FMA)) != 0);
  uint64_t iters = fma_iters(l, piece_ns), aside = 0, t0 = now_ns();
  for (long p = 1; p <= pieces; p++) {
    sink = l.fn(iters);
    if (p % every == 0) {
      uint64_t a = now_ns();
      after(arg);
      aside += now_ns() - a;
    }
  }
  uint64_t dt = now_ns() - t0 - aside;
  return dt ? 2.0 * (double)iters * (double)pieces * l.chains * l.lanes / (double)dt : 0;
}

void ag_machine_measure_best(ag_machine_t *m, int times)
{
  ag_machine_detect(m);
  for (int i = 0; i < times; i++) {
    ag_machine_t one = *m;
    ag_machine_measure(&one);
    for (int f64 = 0; f64 < 2; f64++)
      for (int w = 0; w < AG_ISA__COUNT; w++)
        m->gflops[f64][w] = one.gflops[f64][w] > m->gflops[f64][w] ? one.gflops[f64][w]
                                                                    : m->gflops[f64][w];
    m->measured_ns = one.measured_ns;
  }
}

void ag_machine_object_key_for(const char *cpu_key, const char *flags, int isa, char *buf,
                               size_t len)
{
  if (isa == ag_machine_flags_widest(flags))
    snprintf(buf, len, "%s", cpu_key);
  else
    snprintf(buf, len, "%s isa=%s", cpu_key, ag_isa_name(isa));
}
