/* SPDX-License-Identifier: MIT */
/* Integration harness: runs real programs with or without the agent preloaded, in a fresh
 * temporary folder, and reads the profile database they leave. */
#ifndef OPJIT_TESTS_HARNESS_H
#define OPJIT_TESTS_HARNESS_H

#include <stdint.h>
#include <sys/types.h>

extern char h_dir[]; /* this test's temporary folder (made by h_setup, removed by h_teardown,
                        or at the test's exit when it skips after h_setup) */
extern char h_db[];  /* h_dir/profile.db */

void h_setup(void);
void h_teardown(void);

/* Runs argv (argv[0] a path) with the agent preloaded when agent is set, extra environment
 * entries "NAME=value" (NULL-terminated, may be NULL; they win over the defaults OPJIT_DB=h_db,
 * OPJIT_MODE=profile, OPENBLAS_NUM_THREADS=1 and OPJIT_EXIT_WAIT_MS=60000), stdout and stderr to
 * h_dir/<tag>.out / .err. Returns the raw wait status; fails the test when the program's
 * stderr holds a sanitizer's report (h_assert_no_sanitizer_report). In a sanitizer build the
 * sanitizer's runtime is preloaded before the agent (OPJIT_TEST_PRELOAD). */
int h_run(const char *tag, int agent, const char *const *env, const char *const *argv);
/* The same, started in the background: returns the pid (the caller waits for it). */
pid_t h_spawn(const char *tag, int agent, const char *const *env, const char *const *argv);

/* Fails the test when h_dir/<tag>.err holds a report of ASan, LSan, TSan or UBSan. */
void h_assert_no_sanitizer_report(const char *tag);

/* path itself, or, when $OPJIT_TEST_ARTEFACTS names another build folder and path lies in this
 * build's, the same file there (static buffer, four in rotation): the TSan lane runs these
 * tests' uninstrumented Criterion runners against an instrumented agent and hosts
 * (scripts/sanitize.sh). h_spawn maps the agent and argv[0] through it. */
const char *h_artefact(const char *path);

/* 1 when user nobody (65534) can read and run the build's agent and host programs: tests
 * that run a host as nobody skip otherwise (a build folder inside a private home, say). */
int h_nobody_can_use_build(void);

/* The contents of h_dir/<tag>.<ext>, NUL-terminated, in one of four static buffers used in
 * turn (one message may quote both of a run's outputs). */
const char *h_output(const char *tag, const char *ext);
/* Lines of text that contain needle. */
int h_count_lines(const char *text, const char *needle);
/* 1 when two files have identical bytes. */
int h_same_file(const char *a, const char *b);

/* 1 when h_db exists and has table (a test watching a running host's writer), else 0. */
int h_db_has(const char *table);

/* Runs one integer query on a database (h_db when path is NULL); -1 when there is no row. */
int64_t h_query(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Runs one statement that changes h_db (a test tampering with what the agent stored); fails
 * the test when it errs or changes nothing. */
void h_exec(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* 1 when the agent under test is built with a sanitizer (ASan's build, or the TSan lane's
 * artefacts): its JIT compiles several times slower there, so how many kernels compile within
 * a program's life, and what follows from that, is the plain suite's to check. */
int h_sanitized(void);

/* Skips the test in an ASan build: there a fork child of a threaded host (the agent's threads
 * running) can inherit gcc 12's ASan allocator quarantine lock as a parent thread held it (the
 * child's first free() spun on it for ever), or start a thread on a parent thread's reclaimed
 * stack with its scope poison kept (a false stack-use-after-scope report). The plain suite runs
 * these tests. */
void h_skip_threaded_fork_under_asan(void);

/* h_setup for the JIT's tests: skips the test when the JIT module was not built. */
void h_setup_jit(void);

#define H_AGENT OPJIT_BUILD_DIR "/libopjit.so"
#define H_JIT_PROG OPJIT_BUILD_DIR "/jit_prog"
#define H_SYRK_PROG OPJIT_BUILD_DIR "/syrk_prog"
#define H_BLAS_PROG OPJIT_BUILD_DIR "/blas_prog"
#define H_HOST_PROG OPJIT_BUILD_DIR "/host_prog"

#endif
