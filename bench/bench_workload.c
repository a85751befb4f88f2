/* SPDX-License-Identifier: MIT */
/* bench_workload: a BLAS-bound child for bench_sampling (linked against the system BLAS, so
 * the agent can be preloaded in front of it). Two modes:
 *   single N   N cblas_sgemm 96^3: one thread does all the work (run it with
 *              OPENBLAS_NUM_THREADS=1)
 *   pool N     N cblas_sgemm 384^3: OpenBLAS splits each call over its thread pool (run it
 *              with OPENBLAS_NUM_THREADS=2)
 * A third argument "threads" prints, before exiting, each thread's name and CPU time so far
 * (/proc/self/task/TID/schedstat, ns), e.g. to tell the agent's writer from the workload;
 * "clock" prints "clock MAIN FIRST LAST": CLOCK_MONOTONIC in ns on entering main, when the first
 * call returned and on leaving main (bench_startup: what the agent adds before and after).
 * Otherwise it prints nothing; it exits 1 when the product is wrong (every element is k/2). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111 };
enum { MAX_D = 384 };

static float a[MAX_D * MAX_D], b[MAX_D * MAX_D], c[MAX_D * MAX_D];

/* One line per thread: "name cpu_ns". */
static void print_threads(void)
{
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.')
      continue;
    char path[300], name[64] = "?";
    unsigned long long ns = 0;
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f && fgets(name, sizeof name, f))
      name[strcspn(name, "\n")] = 0;
    if (f)
      fclose(f);
    snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
    if ((f = fopen(path, "r")) && fscanf(f, "%llu", &ns) != 1)
      ns = 0;
    if (f)
      fclose(f);
    printf("%s %llu\n", name, ns);
  }
  if (d)
    closedir(d);
}

static unsigned long long now_ns(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

int main(int argc, char **argv)
{
  unsigned long long t_main = now_ns(), t_first = 0;
  int threads = argc == 4 && strcmp(argv[3], "threads") == 0;
  int clocked = argc == 4 && strcmp(argv[3], "clock") == 0;
  int d = argc == 3 + (threads || clocked) && strcmp(argv[1], "single") == 0 ? 96
          : argc == 3 + (threads || clocked) && strcmp(argv[1], "pool") == 0 ? 384
                                                                             : 0;
  long n = d ? atol(argv[2]) : 0;
  if (n < 1) {
    fprintf(stderr, "usage: %s single|pool N [threads|clock]\n", argv[0]);
    return 2;
  }
  for (int i = 0; i < d * d; i++)
    a[i] = 1.0f, b[i] = 0.5f;
  for (long i = 0; i < n; i++) {
    cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, d, d, d, 1.0f, a, d, b, d,
                0.0f, c, d);
    if (!i)
      t_first = now_ns();
  }
  for (int i = 0; i < d * d; i++)
    if (c[i] != 0.5f * (float)d) {
      fprintf(stderr, "bench_workload: c[%d] = %g, expected %g\n", i, c[i], 0.5 * d);
      return 1;
    }
  if (threads)
    print_threads();
  if (clocked)
    printf("clock %llu %llu %llu\n", t_main, t_first, now_ns());
  return 0;
}
