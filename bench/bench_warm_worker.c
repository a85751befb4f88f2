/* SPDX-License-Identifier: MIT */
/* bench_warm_worker: the workload bench_warm runs cold, warm and without the agent. About 50
 * distinct small GEMM signatures (sgemm_ and dgemm_, n from 4 to 64, NN/NT/TN, beta 0 and 1),
 * each called about a millisecond's worth per pass, for P passes; writes each pass's wall time
 * (ms), the time of the process's first call (us: an agent activates in it) and the thread's
 * minor page faults in it, what a fresh page's first write costs this machine (us, the fastest
 * of 5 rounds of 64 pages, after the passes) and a checksum of the results to OUT. With
 * "settle", it then lets the agent, when loaded, finish what its passes started: waits until it
 * has compiled what they queued (opjit_settle, agent/opjit.h, 10 s at most), runs one more pass
 * untimed (a kernel published during the last pass has its first calls verified, and only a
 * verified kernel is stored) and waits again; writes "settle MS RC" (what that took, and the
 * last wait's result) to OUT.
 *   bench_warm_worker PASSES OUT [settle] */
#define _GNU_SOURCE
#include "bench.h"
#include "blas.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define NSIGS 50

typedef struct sig_s {
  int f64, n, calls;
  char ta, tb;
  double beta;
  void *a, *b, *c;
} sig_t;

/* Signature s's call. */
static void call(const sig_t *s)
{
  const float fa = 1, fb = (float)s->beta;
  const double da = 1, db = s->beta;
  if (s->f64)
    dgemm_(&s->ta, &s->tb, &s->n, &s->n, &s->n, &da, s->a, &s->n, s->b, &s->n, &db, s->c, &s->n);
  else
    sgemm_(&s->ta, &s->tb, &s->n, &s->n, &s->n, &fa, s->a, &s->n, s->b, &s->n, &fb, s->c, &s->n);
}

/* This thread's minor page faults so far. */
static long minor_faults(void)
{
  struct rusage ru;
  return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_minflt : 0;
}

/* What the first write to a fresh anonymous page costs here (us): the fastest of 5 rounds of
 * 64 pages (a guest whose host backs its memory at first touch pays far more than bare metal). */
static double fresh_page_us(void)
{
  double best = 0;
  long page = sysconf(_SC_PAGESIZE);
  for (int r = 0; r < 5; r++) {
    char *m = mmap(NULL, 64 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED)
      return 0;
    uint64_t t0 = bn_now_ns();
    for (int i = 0; i < 64; i++)
      ((volatile char *)m)[(size_t)i * (size_t)page] = 1;
    double us = (double)(bn_now_ns() - t0) / 1e3 / 64;
    munmap(m, 64 * (size_t)page);
    if (best == 0 || us < best)
      best = us;
  }
  return best;
}

/* One pass: each signature's calls in turn; with first, the pass's first call's time (us) and
 * this thread's minor faults in it. */
static void one_pass(const sig_t *sigs, double *first, long *faults)
{
  for (int i = 0; i < NSIGS; i++) {
    int k = 0;
    if (first && i == 0) {
      long f0 = minor_faults();
      uint64_t t0 = bn_now_ns();
      call(&sigs[0]);
      *first = (double)(bn_now_ns() - t0) / 1e3;
      *faults = minor_faults() - f0;
      k = 1;
    }
    for (; k < sigs[i].calls; k++)
      call(&sigs[i]);
  }
}

int main(int argc, char **argv)
{
  if (argc != 3 && !(argc == 4 && strcmp(argv[3], "settle") == 0)) {
    fprintf(stderr, "usage: bench_warm_worker PASSES OUT [settle]\n");
    return 2;
  }
  int passes = atoi(argv[1]);
  static const int sizes[] = {4, 6, 8, 12, 16, 20, 24, 32, 48, 64};
  static const char trans[][2] = {{'N', 'N'}, {'N', 'T'}, {'T', 'N'}};
  sig_t sigs[NSIGS];
  for (int i = 0; i < NSIGS; i++) {
    sig_t *s = &sigs[i];
    s->n = sizes[i % 10];
    s->f64 = (i / 10) % 2;
    s->ta = trans[(i / 20) % 3][0], s->tb = trans[(i / 20) % 3][1];
    s->beta = i % 3 == 2 ? 0.0 : 1.0;
    /* About 1-2 ms of OpenBLAS time per pass (measured: 9-25 GF/s over these sizes). */
    double flops = 2.0 * s->n * s->n * s->n;
    s->calls = (int)(2e7 / flops) + 20;
    size_t esz = s->f64 ? 8 : 4, nn = (size_t)s->n * (size_t)s->n;
    s->a = calloc(nn, esz), s->b = calloc(nn, esz), s->c = calloc(nn, esz);
    for (size_t k = 0; k < nn; k++) {
      if (s->f64)
        ((double *)s->a)[k] = (double)(k % 7) / 7, ((double *)s->b)[k] = (double)(k % 5) / 5;
      else
        ((float *)s->a)[k] = (float)(k % 7) / 7, ((float *)s->b)[k] = (float)(k % 5) / 5;
    }
  }
  FILE *out = fopen(argv[2], "w");
  if (!out) {
    perror(argv[2]);
    return 1;
  }
  double sum = 0, first = 0;
  long faults = 0;
  for (int p = 0; p < passes; p++) {
    uint64_t t0 = bn_now_ns();
    one_pass(sigs, p == 0 ? &first : NULL, &faults);
    fprintf(out, "pass %d %.3f\n", p, (double)(bn_now_ns() - t0) / 1e6);
  }
  fprintf(out, "first %.1f\n", first);
  fprintf(out, "first_faults %ld\n", faults);
  fprintf(out, "fresh_page_us %.2f\n", fresh_page_us());
  for (int i = 0; i < NSIGS; i++) /* every element of every C, so a wrong one shows */
    for (size_t k = 0; k < (size_t)sigs[i].n * (size_t)sigs[i].n; k++)
      sum += sigs[i].f64 ? ((double *)sigs[i].c)[k] : ((float *)sigs[i].c)[k];
  fprintf(out, "checksum %.6g\n", sum);
  int (*settle)(long) = argc == 4 ? (int (*)(long))dlsym(RTLD_DEFAULT, "opjit_settle") : NULL;
  if (settle) {
    uint64_t t0 = bn_now_ns();
    settle(10000);
    one_pass(sigs, NULL, NULL);
    int rc = settle(10000);
    fprintf(out, "settle %.3f %d\n", (double)(bn_now_ns() - t0) / 1e6, rc);
  }
  fclose(out);
  return 0;
}
