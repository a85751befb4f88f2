/* SPDX-License-Identifier: MIT */
/* Kernels on several cores (agent/par.h): a split call runs every part once, each on its own
 * columns, on the pool's workers where it is free and one after the other where it is not
 * (another thread's call, no workers), with the same result (a part no worker has taken
 * once the caller is free is the caller's); a GEMV's parts step through A
 * and C; a forked child's pool starts its own workers; how many parts a process may take. The
 * "kernel" here is a C function that writes which part it computed (from its B's and A's tags)
 * into its columns of C and notes the thread that ran it. */
#define _GNU_SOURCE
#include "agent/par.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROWS 4
#define COLS 8 /* per part */

static _Atomic int calls;
static _Atomic pid_t tids[AG_PAR_MAX * 4];
static _Atomic int part_us = 2000; /* what a part takes */

/* A part: C's COLS columns (ld ROWS) get B's first element of the part (its tag) plus alpha,
 * plus 1000 times A's first element of the part less 42 (A's tag). */
static void kernel(const void *a, const void *b, void *c, double alpha, double beta)
{
  (void)beta;
  int n = atomic_fetch_add(&calls, 1);
  if (n < (int)(sizeof tids / sizeof *tids))
    tids[n] = gettid();
  usleep((useconds_t)atomic_load(&part_us)); /* the parts overlap; a caller that returned
                                                 early finds C unwritten */
  for (int j = 0; j < COLS; j++)
    for (int i = 0; i < ROWS; i++)
      ((double *)c)[j * ROWS + i] = *(const double *)b + alpha + 1000 * (*(const int *)a - 42);
}

/* Runs a call of parts parts and checks every part's columns: B and C step (a GEMM's N in
 * parts), or, rows, A and C (a GEMV's M: B whole). */
static void split_call_as(int parts, int rows)
{
  int a[AG_PAR_MAX] = {0};
  double b[AG_PAR_MAX] = {0}, c[AG_PAR_MAX * COLS * ROWS];
  for (int p = 0; p < parts; p++)
    b[p] = rows ? 7 : 100 * p, a[p] = 42 + p; /* a GEMM's parts all read a[0] */
  memset(c, 0, sizeof c);
  ag_vrun_t run = {.parts = (uint8_t)parts, .a_step = rows ? sizeof *a : 0,
                   .b_step = rows ? 0 : sizeof *b, .c_step = COLS * ROWS * sizeof *c};
  ag_par_gemm(&run, kernel, a, b, c, 0.5, 0);
  for (int p = 0; p < parts; p++)
    for (int x = 0; x < COLS * ROWS; x++)
      cr_assert_eq(c[p * COLS * ROWS + x], (rows ? 7 + 1000 * p : 100 * p) + 0.5,
                   "part %d of %d, element %d", p, parts, x);
}

static void split_call(int parts) { split_call_as(parts, 0); }

Test(par, every_part_runs_once_on_its_columns_spread_over_threads)
{
  /* the first split call starts the workers (3); jobs of fewer parts leave some idle, jobs of
   * more have the parts beyond them taken by whoever is free first */
  const int order[] = {4, 2, 1, 3, 8, 5, 6, 7, 4};
  for (size_t t = 0; t < sizeof order / sizeof *order; t++) {
    int parts = order[t];
    atomic_store(&calls, 0);
    split_call(parts);
    cr_assert_eq(atomic_load(&calls), parts);
  }
  /* two parts again: the caller runs one, a worker the other (one that wakes within the
   * caller's part: it takes the other part first) */
  uint64_t together0, serial0, together, serial;
  ag_par_counts(&together0, &serial0);
  atomic_store(&calls, 0);
  atomic_store(&part_us, 200000);
  split_call(2);
  atomic_store(&part_us, 2000);
  ag_par_counts(&together, &serial);
  cr_assert_eq(together, together0 + 1);
  cr_assert_eq(serial, serial0);
  cr_assert_neq(tids[0], tids[1], "both parts ran on the calling thread");
}

static void *other_caller(void *arg)
{
  (void)arg;
  for (int i = 0; i < 20; i++)
    split_call(3);
  return NULL;
}

Test(par, a_gemv_s_parts_step_through_a_and_c_with_b_whole)
{
  for (int parts = 2; parts <= AG_PAR_MAX; parts += 3) {
    atomic_store(&calls, 0);
    split_call_as(parts, 1);
    cr_assert_eq(atomic_load(&calls), parts);
  }
}

Test(par, calls_from_several_threads_all_complete_alike)
{
  pthread_t th[3];
  for (int t = 0; t < 3; t++)
    cr_assert_eq(pthread_create(&th[t], NULL, other_caller, NULL), 0);
  for (int i = 0; i < 20; i++)
    split_call(2);
  for (int t = 0; t < 3; t++)
    pthread_join(th[t], NULL);
  uint64_t together, serial;
  ag_par_counts(&together, &serial);
  cr_assert_eq(together + serial, 80, "every split call counted once: %llu + %llu",
               (unsigned long long)together, (unsigned long long)serial);
  cr_assert_gt(together, 0);
}

Test(par, a_forked_child_splits_with_workers_of_its_own)
{
  split_call(2); /* the parent's workers are up */
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    ag_par_after_fork_child(); /* what the agent's atfork handler does */
    uint64_t together0, serial0, together, serial;
    ag_par_counts(&together0, &serial0);
    atomic_store(&calls, 0);
    atomic_store(&part_us, 200000); /* its new worker takes the second part meanwhile */
    split_call(2);
    ag_par_counts(&together, &serial);
    _exit(atomic_load(&calls) == 2 && together == together0 + 1 && tids[0] != tids[1] ? 0 : 1);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's split call: status %d", st);
}

Test(par, parts_follow_the_option_else_the_cpus_of_a_threaded_host)
{
  cr_assert_eq(ag_par_parts(1, 1), 1);
  cr_assert_eq(ag_par_parts(3, 0), 3, "the option holds whatever the host does");
  cr_assert_eq(ag_par_parts(100, 1), AG_PAR_MAX);
  cr_assert_eq(ag_par_parts(0, 0), 1, "a host without threads of its own runs on one core");
  cpu_set_t set;
  cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
  int cpus = CPU_COUNT(&set);
  cr_assert_eq(ag_par_parts(0, 1), cpus < AG_PAR_MAX ? cpus : AG_PAR_MAX);
}
