/* SPDX-License-Identifier: MIT */
/* bench_lockstep: what a sample costs a program whose threads wait for each other, by
 * sampling mechanism, side by side in one process.
 *
 * The workload is shaped like llama.cpp's decode: two threads stream through a buffer larger
 * than the caches (the weights), a node's share each, and meet at a spinning barrier after
 * every node, so anything that stops one thread stops both. The sampler (sampler/, linked in)
 * is started and stopped around phases of ~150 ms: off, and each mechanism at each rate. The
 * phases rotate within every round (forwards, then backwards), so drift cancels in pairs; the
 * table holds per configuration the median over rounds of the phase's nodes per second
 * against the round's unsampled phase, the samples delivered per thread and second, and what a
 * sample cost in wall time (the loss divided by the samples) beside what the sampler measures
 * of it (the signal's delivery, timed at its start, and its handler's own cycles per sample:
 * what the budget, OPJIT_SAMPLE_BUDGET, adds up). The difference is what the budget does not
 * see: the interrupt that precedes the signal and what it does to the thread's caches.
 *
 *   bench_lockstep [rounds [MiB]]   (default 30 rounds, 256 MiB; under chrt -f, the timing
 *   thread takes a priority above the workers') */
#define _GNU_SOURCE
#include "bench.h"
#include "sampler/sampler.h"

#include <immintrin.h>
#include <x86intrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NT 2         /* threads in lock-step */
#define NODES 512    /* nodes per pass over the buffer */
#define PHASE_MS 150 /* a configuration's timed phase */
#define SETTLE_MS 30 /* untimed, after each start or stop */
#define MAXR 200

static const struct {
  const char *events;
  int hz;
} cfgs[] = {{NULL, 0}, {"timer", 199}, {"task-clock", 199}, {"timer", 997}, {"task-clock", 997}};
enum { NCFG = sizeof cfgs / sizeof *cfgs };

static float *buf;
static size_t nfloats;
static _Atomic int arrived, generation, quit, stop;
static _Atomic long nodes;
static volatile float sink[NT];

/* Seconds on the benchmarks' monotonic clock. */
static double now_s(void) { return (double)bn_now_ns() * 1e-9; }

/* TSC cycles per ns, from the run so far (the handler's cost is in TSC cycles). */
static double tsc_ghz(void)
{
  static uint64_t c0;
  static double t0;
  if (!c0) {
    c0 = __rdtsc(), t0 = now_s();
    return 0;
  }
  return (double)(__rdtsc() - c0) / ((now_s() - t0) * 1e9);
}

/* Waits for every thread; returns whether the run ends here. The last to arrive reads quit
 * for all: each reads it back before the next barrier can change it. */
static int barrier(void)
{
  int g = atomic_load(&generation);
  if (atomic_fetch_add(&arrived, 1) == NT - 1) {
    atomic_store(&arrived, 0);
    atomic_store(&stop, atomic_load(&quit));
    atomic_fetch_add(&generation, 1);
  } else {
    while (atomic_load(&generation) == g)
      _mm_pause();
  }
  return atomic_load(&stop);
}

static uint32_t own(void) { return 1; }

/* A node: this thread's half of the node's slice, summed (a memory-bound pass, as decode's
 * matrix-vector products are). Thread 0 counts the node; every thread ends the run after the
 * same barrier, so none is left waiting at the next. */
static void *worker(void *arg)
{
  int id = (int)(long)arg;
  size_t slice = nfloats / NODES, part = slice / NT;
  for (long n = 0;; n++) {
    const float *p = buf + (size_t)(n % NODES) * slice + (size_t)id * part;
    __m128 s0 = _mm_setzero_ps(), s1 = _mm_setzero_ps(), s2 = s0, s3 = s0;
    for (size_t i = 0; i + 16 <= part; i += 16) {
      s0 = _mm_add_ps(s0, _mm_load_ps(p + i));
      s1 = _mm_add_ps(s1, _mm_load_ps(p + i + 4));
      s2 = _mm_add_ps(s2, _mm_load_ps(p + i + 8));
      s3 = _mm_add_ps(s3, _mm_load_ps(p + i + 12));
    }
    float v[4];
    _mm_storeu_ps(v, _mm_add_ps(_mm_add_ps(s0, s1), _mm_add_ps(s2, s3)));
    sink[id] += v[0] + v[3];
    if (id == 0)
      atomic_fetch_add(&nodes, 1);
    if (barrier())
      break;
  }
  return NULL;
}

/* Empties the rings; returns the samples, their handler's TSC cycles added to *cycles. */
static size_t drain(uint64_t *cycles)
{
  static sp_sample_t s[4096];
  size_t n = 0, got;
  while ((got = sp_drain(s, sizeof s / sizeof *s)) > 0)
    for (size_t i = 0; i < got; i++, n++)
      *cycles += s[i].cycles;
  return n;
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 30;
  long mib = argc > 2 ? atol(argv[2]) : 256;
  if (rounds < 2 || rounds > MAXR || mib < 16) {
    fprintf(stderr, "usage: bench_lockstep [rounds (2-%d) [MiB (16-)]]\n", MAXR);
    return 2;
  }
  nfloats = (size_t)mib << 18;
  if (!(buf = aligned_alloc(64, nfloats * sizeof *buf)))
    return 1;
  for (size_t i = 0; i < nfloats; i++)
    buf[i] = 1.0f;
  char cpu[256];
  bn_cpu_name(cpu, sizeof cpu);
  struct timespec res;
  clock_getres(CLOCK_MONOTONIC_COARSE, &res);
  printf("bench_lockstep: %d threads in lock-step (a barrier after each of %d nodes per %ld MiB "
         "pass), %d rounds of %d ms phases; %s; scheduler tick %ld Hz\n\n",
         NT, NODES, mib, rounds, PHASE_MS, cpu, res.tv_nsec > 0 ? 1000000000L / res.tv_nsec : 0L);
  pthread_t t[NT];
  for (int i = 0; i < NT; i++)
    pthread_create(&t[i], NULL, worker, (void *)(long)i);
  /* Run as real-time (chrt -f) to keep other load off, the workers spin at their priority:
   * the timing thread must be above them to run at all. */
  struct sched_param sp;
  int policy;
  if (pthread_getschedparam(pthread_self(), &policy, &sp) == 0 &&
      (policy == SCHED_FIFO || policy == SCHED_RR)) {
    sp.sched_priority++;
    pthread_setschedparam(pthread_self(), policy, &sp);
  }
  static double rate[NCFG][MAXR], sps[NCFG][MAXR], seen_ns[NCFG][MAXR];
  tsc_ghz();
  usleep(200000);
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < NCFG; k++) {
      int c = r % 2 ? NCFG - 1 - k : k;
      if (cfgs[c].hz) {
        sp_config_t cfg = {
            .hz = cfgs[c].hz, .events = cfgs[c].events, .stack_depth = 8, .attrib = {own, NULL}};
        sp_status_t st;
        int rc = sp_start(&cfg);
        sp_status(&st);
        /* A refused task-clock falls back to timers: its row would time the wrong mechanism. */
        if (rc || strcmp(st.event, cfgs[c].events) != 0) {
          fprintf(stderr, "bench_lockstep: cannot sample with %s: %s\n", cfgs[c].events, st.notes);
          return 1;
        }
      }
      usleep(SETTLE_MS * 1000);
      uint64_t cycles = 0;
      drain(&cycles);
      cycles = 0;
      long n0 = atomic_load(&nodes);
      double t0 = now_s();
      usleep(PHASE_MS * 1000);
      long n1 = atomic_load(&nodes);
      double t1 = now_s();
      size_t samples = cfgs[c].hz ? drain(&cycles) : 0;
      sp_status_t st;
      sp_status(&st);
      if (cfgs[c].hz)
        sp_stop();
      rate[c][r] = (double)(n1 - n0) / (t1 - t0);
      sps[c][r] = (double)samples / (t1 - t0) / NT;
      seen_ns[c][r] = st.delivery_ns + (samples ? (double)cycles / (double)samples / tsc_ghz() : 0);
    }
  }
  atomic_store(&quit, 1);
  for (int i = 0; i < NT; i++)
    pthread_join(t[i], NULL);
  printf("%-22s %12s %16s %14s %18s %16s\n", "sampling", "nodes/s", "vs off", "samples/s",
         "wall cost/sample", "sampler's own");
  for (int c = 0; c < NCFG; c++) {
    double ratio[MAXR], a[MAXR], b[MAXR], s[MAXR], o[MAXR];
    for (int r = 0; r < rounds; r++)
      ratio[r] = rate[c][r] / rate[0][r], a[r] = rate[c][r], s[r] = sps[c][r], o[r] = seen_ns[c][r];
    memcpy(b, ratio, sizeof(double) * (size_t)rounds);
    double med = bn_median(ratio, (size_t)rounds), spread = bn_half_iqr(b, (size_t)rounds);
    double per_s = bn_median(s, (size_t)rounds);
    char label[64];
    snprintf(label, sizeof label, "%s%s%d Hz", cfgs[c].hz ? cfgs[c].events : "off",
             cfgs[c].hz ? " at " : "", cfgs[c].hz);
    if (!cfgs[c].hz) {
      printf("%-22s %12.0f %16s\n", "off", bn_median(a, (size_t)rounds), "1");
      continue;
    }
    /* Each sample stops every thread: the phase lost (1 - med) of its wall time to
     * per_s * NT samples a second. A phase that ran faster than the unsampled one measured
     * no loss within the noise: "-" rather than a negative cost. */
    char cost[32] = "-";
    if (per_s > 0 && med < 1)
      snprintf(cost, sizeof cost, "%.1f us", (1 - med) / (per_s * NT) * 1e6);
    printf("%-22s %12.0f %9.3f +-%.3f %14.0f %18s %13.1f us\n", label, bn_median(a, (size_t)rounds),
           med, spread, per_s, cost, bn_median(o, (size_t)rounds) / 1000);
  }
  free(buf);
  return 0;
}
