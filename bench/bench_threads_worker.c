/* SPDX-License-Identifier: MIT */
/* bench_threads_worker: the program bench_threads runs plain and under the agent. T threads it
 * starts make the same small product ITERATIONS times each, at once, through the Fortran symbol
 * of the system BLAS, as the threads of an OpenMP loop or a thread pool do:
 *   bench_threads_worker T s|d N ITERATIONS
 * C = alpha A B + C, N x N x N, NN, beta 1. Each thread has operands of its own, thread t's
 * 16 (t mod 4) bytes into a 64-byte line (so the threads' operands lie at different offsets into
 * a line, as separately allocated buffers do). The threads start together from a barrier that
 * the main thread passes too; it prints "loop_ms MS" (from the barrier to the last thread's end)
 * and "checksum X". */
#define _GNU_SOURCE
#include "bench.h"
#include "blas.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXT 64

static int f64, threads;
static blasint n;
static long iters;
static pthread_barrier_t start;
static double sums[MAXT];

static void *loop(void *arg)
{
  int t = (int)(long)arg;
  size_t es = f64 ? 8 : 4, nn = (size_t)n * (size_t)n, off = 16 * (size_t)(t % 4);
  size_t bytes = (3 * (nn * es + 64) + 64 + 63) / 64 * 64;
  char *mem = aligned_alloc(64, bytes);
  if (!mem) {
    pthread_barrier_wait(&start); /* the others, and the clock, start all the same */
    return (void *)1;
  }
  char *a = mem + off, *b = a + nn * es + 64, *c = b + nn * es + 64;
  for (size_t i = 0; i < nn; i++) { /* small values: C stays bounded over the iterations */
    double v = (double)((int)((i * 7 + (size_t)t) % 11) - 5) / 64;
    f64 ? (((double *)a)[i] = v, ((double *)b)[i] = -v, ((double *)c)[i] = 0)
        : (((float *)a)[i] = (float)v, ((float *)b)[i] = (float)-v, ((float *)c)[i] = 0);
  }
  double d1 = 1, dm = 1.0 / 1024;
  float f1 = 1, fm = 1.0f / 1024;
  pthread_barrier_wait(&start);
  for (long it = 0; it < iters; it++)
    if (f64)
      dgemm_("N", "N", &n, &n, &n, &dm, (double *)a, &n, (double *)b, &n, &d1, (double *)c, &n);
    else
      sgemm_("N", "N", &n, &n, &n, &fm, (float *)a, &n, (float *)b, &n, &f1, (float *)c, &n);
  sums[t] = f64 ? ((double *)c)[nn - 1] : ((float *)c)[nn - 1];
  free(mem);
  return NULL;
}

int main(int argc, char **argv)
{
  if (argc != 5 || (strcmp(argv[2], "s") && strcmp(argv[2], "d"))) {
    fprintf(stderr, "usage: %s THREADS s|d N ITERATIONS\n", argv[0]);
    return 2;
  }
  threads = atoi(argv[1]), f64 = !strcmp(argv[2], "d"), n = atoi(argv[3]);
  iters = atol(argv[4]);
  if (threads < 1 || threads > MAXT || n < 1 || n > 512 || iters < 0) {
    fprintf(stderr, "bench_threads_worker: 1 <= THREADS <= %d, 1 <= N <= 512, ITERATIONS >= 0\n",
            MAXT);
    return 2;
  }
  pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
  pthread_t th[MAXT];
  for (int t = 0; t < threads; t++)
    if (pthread_create(&th[t], NULL, loop, (void *)(long)t)) {
      fprintf(stderr, "bench_threads_worker: cannot start thread %d\n", t);
      return 1;
    }
  pthread_barrier_wait(&start);
  uint64_t t0 = bn_now_ns();
  int bad = 0;
  void *rv;
  for (int t = 0; t < threads; t++)
    bad |= pthread_join(th[t], &rv) || rv;
  double ms = (double)(bn_now_ns() - t0) / 1e6, checksum = 0;
  for (int t = 0; t < threads; t++)
    checksum += sums[t];
  printf("loop_ms %.3f\nchecksum %.9g\n", ms, checksum);
  return bad;
}
