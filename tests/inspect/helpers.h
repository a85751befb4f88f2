/* SPDX-License-Identifier: MIT */
/* What the inspect tests share: running the built `opjit` as a subprocess, scratch folders,
 * and databases crafted through the store API with exact counts. */
#ifndef OPJIT_TESTS_INSPECT_HELPERS_H
#define OPJIT_TESTS_INSPECT_HELPERS_H

#include "store/store.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define OPJIT_EXE OPJIT_BUILD_DIR "/opjit"
#define PYTHON "/usr/bin/python3" /* Debian's, with numpy */

/* One finished subprocess: exit status (128+N when signal N ended it), stdout, stderr. */
typedef struct proc_s {
  int status;
  char *out, *err;
} proc_t;

/* A fresh folder /tmp/opjit-inspect-XXXXXX (mode 0700), removed with its content when the
 * test process exits; one per test. Aborts the test on failure. */
char *scratch_dir(void);
/* dir/name, malloc'ed. */
char *path_in(const char *dir, const char *name);

/* Runs opjit with args (NULL-terminated) and the extra environment entries env ("NAME=value",
 * NULL-terminated, may be NULL) added to this process's and to OPJIT_EXIT_WAIT_MS=60000;
 * waits and captures. */
proc_t opjit(const char *const *env, const char *const *args);
/* The user opjit_unprivileged runs opjit as: this process's, or nobody (65534:65534) when this
 * process is root, whom permission bits do not stop. */
uid_t unprivileged_uid(void);
/* opjit() as unprivileged_uid(); status 254 and why in err when root could not become nobody,
 * or nobody cannot run the build's opjit. */
proc_t opjit_unprivileged(const char *const *env, const char *const *args);
/* Same, started without waiting: returns the pid; stdout/stderr go to /dev/null. */
int opjit_spawn(const char *const *env, const char *const *args);
/* Waits for pid; returns its status as opjit() does. */
int wait_status(int pid);
void proc_free(proc_t *p);
/* Parses p->out as JSON; fails the test when it is not. */
cJSON *proc_json(const proc_t *p);

/* One crafted signature: a gemm key of size m (distinct m, distinct key), and its counts.
 * sig overrides the id text (NULL: the key's real hash). */
typedef struct fake_sig_s {
  int m;
  const char *sig;
  uint64_t calls, timed_calls, timed_ns;
} fake_sig_t;

/* Records a run into the database at path (created if needed) with these signatures, started
 * at start_ns (0: now) by process pid (0: this one); ends it ("exited") when ended. Returns the
 * run id; fails the test on any store error. */
int64_t craft_run(const char *path, int pid, int64_t start_ns, int ended, const fake_sig_t *sigs,
                  size_t n);
/* Stores an object for run's signature of size m (a fake_sig_t the run flushed) under the
 * machine's object key cpu; fails the test on any store error. */
void craft_object(const char *path, int64_t run, int m, const char *cpu);
/* What a crafted run's sampler recorded. Rows name their signature by the m of a fake_sig_t
 * already flushed in the run; m 0 stands for outside any operator. */
typedef struct fake_pc_s {
  int m;
  const char *module, *symbol;
  uint64_t samples;
} fake_pc_t;
typedef struct fake_stack_s {
  int m;
  const char *stack;
  uint64_t samples;
} fake_stack_t;
typedef struct fake_counter_s {
  int m;
  const char *event;
  uint64_t value;
} fake_counter_t;
typedef struct fake_samples_s {
  const char *sampling; /* runs.sampling JSON */
  const fake_pc_t *pcs;
  size_t npcs;
  const fake_stack_t *stacks;
  size_t nstacks;
  const fake_counter_t *counters;
  size_t ncounters;
} fake_samples_t;

/* Records s for run in the database at path through st_run_samples; fails the test on any
 * store error. */
void craft_samples(const char *path, int64_t run, const fake_samples_t *s);
/* What a crafted run's JIT recorded. Rows name their signature by the m of a fake_sig_t
 * already flushed in the run; an event's time is offset_ns after the run's start. */
typedef struct fake_variant_s {
  int m;
  const char *status;    /* queued, ready, failed, demoted */
  const char *llvm, *cpu; /* NULL: "19.1.7", "znver4" */
  uint64_t compile_ns, calls, timed_calls, timed_ns;
} fake_variant_t;
typedef struct fake_event_s {
  int m;
  int64_t offset_ns;
  const char *kind, *detail;
} fake_event_t;

/* Records variants and events for run in the database at path through st_run_variants;
 * fails the test on any store error. */
void craft_variants(const char *path, int64_t run, const fake_variant_t *v, size_t nv,
                    const fake_event_t *ev, size_t nev);
/* Executes sql on the database at path with plain SQLite; fails the test on error. */
void sql_exec(const char *path, const char *sql);
/* The pid of a process that has exited and been reaped (so is not alive). */
int dead_pid(void);
int64_t now_ns(void);

#endif
