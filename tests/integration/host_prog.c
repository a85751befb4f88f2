/* SPDX-License-Identifier: MIT */
/* A host program with one mode per integration scenario (linked against -lblas):
 *   noop                 calls no operator; prints "threads=N sqlite=S agent=A" after 200 ms
 *   forkexec             cblas_sdot x3, fork (child: cblas_ddot x5), a fork child with no
 *                        BLAS, cblas_sdot x2, then execv itself as "stage2"
 *   stage2               cblas_daxpy x7
 *   loop                 cblas_sdot n=64 forever (killed by the test)
 *   threads T N          T threads, thread t calls cblas_sdot n=1+t, N times each
 *   shared T N [alive]   one cblas_sdot n=64, 200 ms of rest (the agent's start is over), the
 *                        same call 40 times, then T - 1 threads make it N times each,
 *                        concurrently, thread t on vectors 4 t floats into their arrays (its
 *                        operands at other offsets into a line than the others'); they end
 *                        and are joined, or with "alive" stay blocked while the process exits
 *   dlopen AGENT         calls cblas_sdot x4 through dlopen(AGENT)'s symbol (AT_SECURE test)
 *   ratio N [settled [again]]  N rounds of 3 cblas_sgemm 96^3 (lda 96) and 1 with lda 97: two
 *                        signatures whose CPU cost is 3:1; prints a checksum of C; settled:
 *                        then waits for the agent to settle; again: then runs the N rounds
 *                        once more
 *   big N [settled]      N cblas_sgemm 384^3 (OpenBLAS splits them over its thread pool where
 *                        the test's OPENBLAS_NUM_THREADS gives it one); settled: then waits
 *                        for the agent to settle (opjit_settle)
 *   long N               N cblas_sgemm 512^3, the agent settled after the first (its machine
 *                        model is final then)
 *   forkratio N          "ratio N", then a fork child runs "ratio 6N" while the parent waits,
 *                        then the parent runs "ratio N" again
 *   sigprof N            installs its own SIGPROF handler and ITIMER_PROF, runs "ratio N",
 *                        prints how many SIGPROFs it received
 *   clocked N            N cblas_sgemm 96^3, each timed on CLOCK_MONOTONIC; prints the median
 *                        call's nanoseconds
 *   strided N            N cblas_sdot n=16 with incx 2 (a strided vector: no JIT variant), the
 *                        agent settled (opjit_settle: its machine model ready) after the first
 *                        100
 *   pinned [pool]        pins its thread to the first of the process's CPUs, calls cblas_sdot
 *                        for 0.3 s or until the writer's CPUs moved (10 s at most); prints
 *                        "process cpus LIST" and "thread NAME cpus LIST" per thread; with
 *                        pool, starts an idle thread first ("host_pool": a library's pool
 *                        between calls it splits) */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

float cblas_sdot(int, const float *, int, const float *, int);

/* Built with ASan (scripts/sanitize.sh), a set-user-ID run is not leak-checked: LeakSanitizer
 * stops the world through ptrace, which such a process refuses, and it cannot read its
 * ASAN_OPTIONS (/proc/self/environ is not its own then). LeakSanitizer asks this hook. */
int __lsan_is_turned_off(void) { return getauxval(AT_SECURE) != 0; }
double cblas_ddot(int, const double *, int, const double *, int);
void cblas_daxpy(int, double, const double *, int, double *, int);

static float fx[4096], fy[4096];
static double dx[4096], dy[4096];
static long calls_per_thread;

static int count_threads(void)
{
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    n += e->d_name[0] != '.';
  if (d)
    closedir(d);
  return n;
}

/* The value of field (with its colon) in a /proc status file, into out. */
static void status_field(const char *path, const char *field, char *out, size_t len)
{
  FILE *f = fopen(path, "r");
  char line[512];
  size_t n = strlen(field);
  snprintf(out, len, "?");
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, field, n)) {
      line[strcspn(line, "\n")] = 0;
      snprintf(out, len, "%s", line + n + strspn(line + n, " \t"));
      break;
    }
  if (f)
    fclose(f);
}

/* The CPUs (Cpus_allowed_list) of this process's thread named name into out, "" when there is
 * none; with name NULL, prints "thread NAME cpus LIST" for each thread instead. */
static void thread_cpus(const char *name, char *out, size_t len)
{
  DIR *d = opendir("/proc/self/task");
  if (name)
    out[0] = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.')
      continue;
    char path[300], n[64], cpus[256];
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    status_field(path, "Name:", n, sizeof n);
    if (name && strcmp(n, name))
      continue;
    status_field(path, "Cpus_allowed_list:", cpus, sizeof cpus);
    if (name)
      snprintf(out, len, "%s", cpus);
    else
      printf("thread %s cpus %s\n", n, cpus);
  }
  if (d)
    closedir(d);
}

static int mapped(const char *what)
{
  FILE *f = fopen("/proc/self/maps", "r");
  char line[4096];
  int found = 0;
  while (f && fgets(line, sizeof line, f))
    found |= strstr(line, what) != NULL;
  if (f)
    fclose(f);
  return found;
}

static void *thread_main(void *arg)
{
  int t = (int)(long)arg;
  float acc = 0;
  for (long i = 0; i < calls_per_thread; i++)
    acc += cblas_sdot(1 + t, fx, 1, fy, 1);
  return (void *)(long)(acc != acc); /* NaN never: keeps the loop honest */
}

void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int,
                 float, float *, int);

/* Runs fn on threads from .. n - 1 (at most 64), each given its index; the sum of what they
 * returned. */
static long run_threads(void *(*fn)(void *), int from, int n)
{
  pthread_t th[64];
  int made[64] = {0};
  long sum = 0;
  for (int t = from; t < n && t < 64; t++)
    made[t] = pthread_create(&th[t], NULL, fn, (void *)(long)t) == 0;
  for (int t = from; t < n && t < 64; t++) {
    void *rv = (void *)1; /* a thread that could not start fails the mode */
    if (made[t])
      pthread_join(th[t], &rv);
    sum += (long)rv;
  }
  return sum;
}

/* n calls of the shared mode's product on thread t's vectors; 1 when a result is wrong. */
static long shared_calls(int t, long n)
{
  float acc = 0;
  for (long i = 0; i < n; i++)
    acc += cblas_sdot(64, fx + 4 * t, 1, fy + 4 * t, 1);
  return acc != 64.0f * (float)n;
}

static atomic_int shared_done, shared_bad;
static int shared_stay; /* "alive": the threads stay, blocked, while the process exits */

static void *shared_thread(void *arg)
{
  long bad = shared_calls((int)(long)arg, calls_per_thread);
  atomic_fetch_add(&shared_bad, (int)bad);
  atomic_fetch_add(&shared_done, 1);
  while (shared_stay)
    pause();
  return (void *)bad;
}

/* "settled": the agent's compiles and checks are over (a minute at most), when it is loaded. */
static void settle_agent(void)
{
  int (*settle)(long) = (int (*)(long))dlsym(RTLD_DEFAULT, "opjit_settle");
  if (settle)
    settle(60000);
}

/* n cblas_sgemm d^3 (d at most 512), the agent settled after the first where settle_first is
 * set (the call starts it: its machine model is final then); prints C[0]. */
static void products(int d, long n, int settle_first)
{
  static float a[512 * 512], b[512 * 512], c[512 * 512];
  for (int i = 0; i < d * d; i++)
    a[i] = (float)(i % 5), b[i] = (float)(i % 3);
  for (long r = 0; r < n; r++) {
    cblas_sgemm(102, 111, 111, d, d, d, 1.0f, a, d, b, d, 0.0f, c, d);
    if (r == 0 && settle_first)
      settle_agent();
  }
  printf("c0 %g\n", c[0]);
}

/* The ratio workload; returns a checksum of the results. */
__attribute__((noinline)) static double ratio_work(long rounds)
{
  enum { D = 96, L = 97 };
  static float a[D * L], b[D * L], c[D * L];
  for (int i = 0; i < D * L; i++)
    a[i] = (float)(i % 13) / 13, b[i] = (float)(i % 7) / 7;
  double sum = 0;
  for (long r = 0; r < rounds; r++) {
    for (int k = 0; k < 3; k++)
      cblas_sgemm(102, 111, 111, D, D, D, 1.0f, a, D, b, D, 0.0f, c, D);
    sum += c[r % (D * D)];
    cblas_sgemm(102, 111, 111, D, D, D, 1.0f, a, L, b, L, 0.0f, c, L);
    sum += c[r % (D * D)];
  }
  return sum;
}

static atomic_int prof_signals;
static void on_sigprof(int s)
{
  (void)s;
  atomic_fetch_add(&prof_signals, 1);
}

/* An idle thread: blocks until the pipe whose read end *arg is reaches its end. */
static void *wait_for_eof(void *arg)
{
  char c;
  while (read(*(int *)arg, &c, 1) > 0)
    ;
  return NULL;
}

static int cmp_long(const void *x, const void *y)
{
  long a = *(const long *)x, b = *(const long *)y;
  return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
  for (int i = 0; i < 4096; i++)
    fx[i] = fy[i] = 1.0f, dx[i] = dy[i] = 0.5;
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "noop")) {
    usleep(200000);
    printf("threads=%d sqlite=%d agent=%d\n", count_threads(), mapped("libsqlite3"),
           mapped("libopjit.so"));
    return 0;
  }
  if (!strcmp(mode, "pinned")) {
    /* pins this thread to the first of the process's CPUs, then makes its first calls (the
     * agent starts its threads from here); prints the process's CPUs and each thread's */
    int idle[2] = {-1, -1};
    pthread_t pool;
    if (argc > 2 && !strcmp(argv[2], "pool") &&
        (pipe(idle) != 0 || pthread_create(&pool, NULL, wait_for_eof, &idle[0]) != 0 ||
         pthread_setname_np(pool, "host_pool") != 0))
      return 2;
    char all[256];
    status_field("/proc/self/status", "Cpus_allowed_list:", all, sizeof all);
    cpu_set_t cpus, one;
    if (sched_getaffinity(0, sizeof cpus, &cpus) != 0)
      return 2;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &cpus)) {
        CPU_SET(c, &one);
        break;
      }
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0)
      return 2;
    /* calls on, running, for 0.3 s at least: the writer starts, names itself and moves off
     * this thread's CPU (or 10 s pass) */
    long wrong = 0;
    char writer[256];
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
      for (int k = 0; k < 1000; k++)
        wrong += cblas_sdot(10, fx, 1, fy, 1) != 10;
      clock_gettime(CLOCK_MONOTONIC, &t);
      thread_cpus("opjit-writer", writer, sizeof writer);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 <
             (!writer[0] || !strcmp(writer, all) ? 10000 : 300));
    printf("process cpus %s\n", all);
    thread_cpus(NULL, NULL, 0);
    if (idle[1] >= 0) {
      close(idle[1]);
      pthread_join(pool, NULL);
    }
    return wrong ? 1 : 0;
  }
  if (!strcmp(mode, "forkexec")) {
    float s = 0;
    for (int i = 0; i < 3; i++)
      s += cblas_sdot(100, fx, 1, fy, 1);
    pid_t c = fork();
    if (c == 0) {
      double d = 0;
      for (int i = 0; i < 5; i++)
        d += cblas_ddot(50, dx, 1, dy, 1);
      _exit(d == 62.5 ? 0 : 1);
    }
    pid_t quiet = fork();
    if (quiet == 0)
      _exit(0);
    int st1, st2;
    waitpid(c, &st1, 0);
    waitpid(quiet, &st2, 0);
    for (int i = 0; i < 2; i++)
      s += cblas_sdot(100, fx, 1, fy, 1);
    if (s != 500 || !WIFEXITED(st1) || WEXITSTATUS(st1))
      return 1;
    char *args[] = {argv[0], "stage2", NULL};
    execv("/proc/self/exe", args);
    return 3;
  }
  if (!strcmp(mode, "stage2")) {
    for (int i = 0; i < 7; i++)
      cblas_daxpy(10, 2.0, dx, 1, dy, 1);
    return dy[0] == 7.5 ? 0 : 1;
  }
  if (!strcmp(mode, "loop")) {
    for (volatile float s = 0;;)
      s += cblas_sdot(64, fx, 1, fy, 1);
  }
  if (!strcmp(mode, "threads") && argc > 3) {
    calls_per_thread = atol(argv[3]);
    return run_threads(thread_main, 0, atoi(argv[2])) != 0;
  }
  if (!strcmp(mode, "shared") && argc > 3) {
    int n = atoi(argv[2]);
    calls_per_thread = atol(argv[3]);
    shared_stay = argc > 4 && !strcmp(argv[4], "alive");
    long bad = shared_calls(0, 1);
    usleep(200000);
    bad += shared_calls(0, 40);
    if (!shared_stay)
      return bad + run_threads(shared_thread, 1, n) != 0;
    for (int t = 1; t < n && t < 64; t++) {
      pthread_t th;
      if (pthread_create(&th, NULL, shared_thread, (void *)(long)t))
        return 1;
      pthread_detach(th);
    }
    while (atomic_load(&shared_done) < (n < 64 ? n : 64) - 1)
      usleep(1000);
    return bad + atomic_load(&shared_bad) != 0;
  }
  if (!strcmp(mode, "dlopen") && argc > 2) {
    void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    float (*sdot)(int, const float *, int, const float *, int) = h ? dlsym(h, "cblas_sdot") : NULL;
    if (!sdot)
      return 4;
    float s = 0;
    for (int i = 0; i < 4; i++)
      s += sdot(10, fx, 1, fy, 1);
    printf("sdot=%g\n", s);
    return s == 40 ? 0 : 1;
  }
  if (!strcmp(mode, "ratio") && argc > 2) {
    printf("checksum %.9g\n", ratio_work(atol(argv[2])));
    if (argc > 3 && !strcmp(argv[3], "settled"))
      settle_agent();
    if (argc > 4 && !strcmp(argv[4], "again")) /* on the kernels, however late they came */
      printf("checksum %.9g\n", ratio_work(atol(argv[2])));
    return 0;
  }
  if (!strcmp(mode, "forkratio") && argc > 2) {
    long n = atol(argv[2]);
    double sum = ratio_work(n);
    pid_t c = fork();
    if (c == 0)
      exit(ratio_work(6 * n) > 0 ? 0 : 1);
    int st;
    waitpid(c, &st, 0);
    sum += ratio_work(n);
    printf("checksum %.9g child %d\n", sum, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
  }
  if (!strcmp(mode, "big") && argc > 2) {
    products(384, atol(argv[2]), 0);
    if (argc > 3 && !strcmp(argv[3], "settled"))
      settle_agent();
    return 0;
  }
  if (!strcmp(mode, "long") && argc > 2) {
    products(512, atol(argv[2]), 1);
    return 0;
  }
  if (!strcmp(mode, "sigprof") && argc > 2) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigprof;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval it = {{0, 2000}, {0, 2000}};
    setitimer(ITIMER_PROF, &it, NULL);
    double sum = ratio_work(atol(argv[2]));
    printf("checksum %.9g sigprof %d\n", sum, atomic_load(&prof_signals) > 0);
    return 0;
  }
  if (!strcmp(mode, "clocked") && argc > 2) {
    enum { D = 96 };
    static float a[D * D], b[D * D], c[D * D];
    for (int i = 0; i < D * D; i++)
      a[i] = (float)(i % 5), b[i] = (float)(i % 3);
    long n = atol(argv[2]);
    long *ns = calloc(n > 0 ? (size_t)n : 1, sizeof *ns);
    if (!ns)
      return 1;
    for (long r = 0; r < n; r++) {
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      cblas_sgemm(102, 111, 111, D, D, D, 1.0f, a, D, b, D, 0.0f, c, D);
      clock_gettime(CLOCK_MONOTONIC, &t1);
      ns[r] = (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec);
    }
    qsort(ns, (size_t)n, sizeof *ns, cmp_long);
    printf("median_ns %ld\n", ns[n / 2]);
    free(ns);
    return 0;
  }
  if (!strcmp(mode, "strided") && argc > 2) {
    int (*settle)(long) = (int (*)(long))dlsym(RTLD_DEFAULT, "opjit_settle");
    float s = 0;
    for (long r = 0, n = atol(argv[2]); r < n; r++) {
      if (r == 100 && settle)
        settle(60000);
      s += cblas_sdot(16, fx, 2, fy, 1);
    }
    return s != s; /* NaN never: keeps the loop honest */
  }
  fprintf(stderr, "usage: %s noop|forkexec|loop|threads T N|dlopen AGENT|ratio N [settled [again]]|"
                  "big N [settled]|long N|sigprof N|clocked N|strided N\n",
          argv[0]);
  return 2;
}
