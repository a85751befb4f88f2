/* SPDX-License-Identifier: MIT */
/* What the benchmarks share: a monotonic clock, medians, child environments with or without
 * the agent, spawning a child and waiting for it, and a scratch folder for OPJIT_DB.
 * Functions that can fail print one line on stderr naming what failed and return -1 (or
 * NULL); the benchmarks then stop, since a half-measured table is worse than none.
 * bench/CMakeLists.txt defines OPJIT_AGENT_PATH: the libopjit.so this build produced. */
#ifndef OPJIT_BENCH_BENCH_H
#define OPJIT_BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bn_now_ns(void);

/* The median of v[0..n), n > 0; sorts v in place. */
double bn_median(double *v, size_t n);
/* Half the interquartile range of v[0..n), n > 0 (nearest rank): the spread printed beside a
 * median. Sorts v in place. */
double bn_half_iqr(double *v, size_t n);
/* The median of v[0..n), n > 0, and half its interquartile range, v left as it was. */
void bn_stat(const double *v, size_t n, double *med, double *spread);

struct jt_api_s;
/* The JIT module at path (libopjit-jit.so), loaded and initialised: its API, or NULL after one
 * line on stderr, who naming the benchmark. */
const struct jt_api_s *bn_load_jit(const char *path, const char *who);

/* A copy of the environment without LD_PRELOAD, OPJIT_* and OPENBLAS_NUM_THREADS, plus the
 * "NAME=value" strings of add (NULL-terminated; may be NULL). Free with bn_env_free. */
char **bn_env(const char *const *add);
void bn_env_free(char **env);
/* "OPENBLAS_NUM_THREADS=N" for a benchmark's runs: N from BENCH_BLAS_THREADS when it is set
 * above 0 (OpenBLAS's pool, as a program that sets nothing gets one thread per CPU), else 1. A
 * static string. */
const char *bn_blas_threads(void);

/* Spawns path with argv and env (stderr to stderr_path unless that is NULL) and waits.
 * Returns the wait status, or -1 when the spawn failed. */
int bn_spawn_wait(const char *path, char *const argv[], char *const env[],
                  const char *stderr_path);
/* Like bn_spawn_wait, with the child's stdout to stdout_path too. */
int bn_spawn_wait_out(const char *path, char *const argv[], char *const env[],
                      const char *stdout_path, const char *stderr_path);
struct rusage;
/* Like bn_spawn_wait, and fills *ru (when not NULL) with the child's resource usage
 * (wait4): its CPU time is ru_utime + ru_stime. */
int bn_spawn_wait4(const char *path, char *const argv[], char *const env[],
                   const char *stderr_path, struct rusage *ru);

/* Like bn_spawn_wait4, with the child's stdout to stdout_path too. */
int bn_spawn_wait4_out(const char *path, char *const argv[], char *const env[],
                       const char *stdout_path, const char *stderr_path, struct rusage *ru);

/* Removes errpath, a child's captured stderr, after copying it to ours under the heading
 * "<prog>: <what> wrote to stderr:" when it is not empty. Returns 1 when it was empty. */
int bn_stderr_quiet(const char *errpath, const char *prog, const char *what);
/* Runs a worker that prints "loop_ms MS": argv with the environment plus add (bn_env), its
 * stdout and stderr in scratch (a stderr that is not empty is copied to ours under "<prog>:
 * <what> wrote to stderr:"), its loop's milliseconds into *ms. Returns 0; else *ms is -1 and it
 * returns the worker's wait status when that is not a clean exit, or -1 (not started, or no
 * "loop_ms" printed). */
int bn_run_loop_ms(const char *scratch, char *const argv[], const char *const *add,
                   const char *prog, const char *what, double *ms);
/* Reads the "pass P MS" lines a warm worker (bench_warm_worker) wrote to path into pass[P]
 * (0 <= P < passes); returns how many it read (0 when the file cannot be read). */
int bn_read_passes(const char *path, double *pass, int passes);

/* OpenBLAS's cores. OPENBLAS_CORETYPE is read when the library loads, so a core is a process
 * of its own; OPENBLAS_VERBOSE=2 makes the library name its core on stderr ("Core: SkylakeX").
 * Reads the core named in errpath, a captured stderr, into out ("" when none). Returns 1 when
 * it also says "Core not found" (OpenBLAS did not know the OPENBLAS_CORETYPE asked for). */
int bn_openblas_core_named(const char *errpath, char *out, size_t len);
/* Runs argv (a program linked against the system BLAS that exits at once) with
 * OPENBLAS_CORETYPE=type ("": unset) and reads the core OpenBLAS picked into out. Returns 1
 * when OpenBLAS knew type, 0 when it did not (it picked a core itself), -1 when the program
 * failed or named no core (the system BLAS is not OpenBLAS). scratch holds its stderr. */
int bn_openblas_core(const char *scratch, char *const argv[], const char *type, char *out,
                     size_t len);
/* OpenBLAS's best core for this CPU, from its features: with AVX-512 COOPERLAKE (BF16) then
 * SKYLAKEX, with AVX2 HASWELL (Intel) or ZEN (AMD); the first candidate this OpenBLAS knows
 * goes to type (its OPENBLAS_CORETYPE) and core (its name), candidates it did not know to
 * note. Returns 0, or -1 when it knew none (type is then "" and core its own choice, or ""
 * when the system BLAS is not OpenBLAS). */
int bn_openblas_best(const char *scratch, char *const argv[], char *type, size_t tlen,
                     char *core, size_t clen, char *note, size_t nlen);
/* The two OpenBLAS cores a benchmark of whole programs compares: its best for this CPU
 * (bn_openblas_best: OPENBLAS_CORETYPE into type[0], the core's name into core[0], candidates it
 * did not know into note) and the one it picks itself, or BENCH_DEFAULT_CORETYPE's (type[1],
 * core[1]). probe runs as for bn_openblas_core. Returns 2, or 1 when both are the same core (or
 * the system BLAS names none: not OpenBLAS, core[0] then says so and type[0] is ""). */
#define BN_CORE_LEN 32
int bn_openblas_cores(const char *scratch, char *const probe[], char type[2][BN_CORE_LEN],
                      char core[2][BN_CORE_LEN], char *note, size_t nlen);
/* The CPU's model name (/proc/cpuinfo) into buf, "?" when unknown. */
void bn_cpu_name(char *buf, size_t len);
/* The core's clock right now, in GHz, estimated from 64000 dependent 64-bit multiplies (3
 * cycles each on the x86-64 cores since Sandy Bridge and Zen: ~65 us at 3 GHz): what a kernel
 * left the clock at, read right after it. */
double bn_clock_ghz(void);
/* The same read short enough to take between a batch's calls: 1024 dependent multiplies (~0.9
 * us at 3.5 GHz; one every 32 calls of a 3 us kernel costs its batch 1 %). Its two clock reads
 * weigh more in it than in bn_clock_ghz: compare probes with probes. */
double bn_clock_probe_ghz(void);

/* Creates a private scratch folder under $TMPDIR (else /tmp) into dir. Returns 0 or -1. */
int bn_scratch_new(char *dir, size_t len);
/* Number of entries in the scratch folder; -1 when it cannot be read. */
int bn_scratch_count(const char *dir);
/* Removes the scratch folder and the files in it. */
void bn_scratch_free(const char *dir);

#endif
