/* SPDX-License-Identifier: MIT */
/* The profile store: one SQLite file shared by every run of every program, WAL, busy timeout,
 * schema versioned with PRAGMA user_version and ordered migrations.
 * Every function returns ST_OK (0) or a negative ST_E* code; where an err buffer is given it
 * receives one sentence a user can act on. A db handle is used by one thread at a time. */
#ifndef OPJIT_STORE_H
#define OPJIT_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "judge.h"

#define ST_SCHEMA_VERSION 11 /* the newest schema this build writes and reads */

#define ST_ERRORS(E)                                                                         \
  E(BUSY, "the database is locked by another process")                                       \
  E(READONLY, "the database is read-only")                                                   \
  E(CORRUPT, "the file is damaged or not an SQLite database")                                \
  E(FULL, "the disk is full")                                                                \
  E(NEWER, "the database was written by a newer opjit")                                      \
  E(NOTOURS, "the file is an SQLite database but not an opjit profile")                      \
  E(NOENT, "no such database or run")                                                        \
  E(NOMEM, "out of memory")                                                                  \
  E(IO, "input/output error")

enum st_err_index {
#define ST_ERR_IDX_(name, text) ST_IDX_##name,
  ST_ERRORS(ST_ERR_IDX_)
#undef ST_ERR_IDX_
      ST__NERR
};
/* ST_OK, then one negative code per ST_ERRORS entry: ST_EBUSY = -1, ST_EREADONLY = -2, ... */
enum st_err {
  ST_OK = 0,
#define ST_ERR_ENUM_(name, text) ST_E##name = -1 - ST_IDX_##name,
  ST_ERRORS(ST_ERR_ENUM_)
#undef ST_ERR_ENUM_
};

/* What to do with a damaged profile, said wherever damage is found (the open, a write, a read):
 * opjit never changes or deletes it. */
#define ST_DAMAGED_ADVICE                                                                    \
  "move it aside and the next run starts a new one, or salvage what SQLite can read: "       \
  "sqlite3 OLD .recover | sqlite3 NEW"

enum st_open_flags {
  ST_OPEN_CREATE = 1,     /* create the file (0600) and its folder (0700) when missing */
  ST_OPEN_READONLY = 2,   /* never write (inspect's readers) */
  ST_OPEN_NO_MIGRATE = 4, /* leave the schema as found (tests drive st_migrate_to) */
};

typedef struct st_db_s st_db_t;
typedef struct sqlite3 sqlite3;

/* Static text for a code. */
const char *st_errstr(int code);

/* Opens path. Refuses what it must not touch, never writing to it: a newer schema
 * (ST_ENEWER), someone else's SQLite file (ST_ENOTOURS), damage or a negative schema version
 * (ST_ECORRUPT). Migrates an older opjit schema to ST_SCHEMA_VERSION unless
 * ST_OPEN_NO_MIGRATE or READONLY; a READONLY connection to an older schema reads it as the
 * newest (query.h). */
int st_open(const char *path, int flags, int busy_ms, st_db_t **out, char *err, size_t errlen);
void st_close(st_db_t *db);

/* Applies migrations up to version (<= ST_SCHEMA_VERSION), each in its own transaction;
 * ST_ECORRUPT, changing nothing, when the file's version (or version) is negative. */
int st_migrate_to(st_db_t *db, int version);
/* The schema version found in the file. */
int st_schema_version(st_db_t *db, int *version);
/* The underlying connection, for the store's read side (query.h) and tests. */
sqlite3 *st_sqlite(st_db_t *db);

/* What a run records about itself when it starts. */
typedef struct st_run_info_s {
  const char *exe;           /* executable path */
  const char *build_id;      /* hex GNU build-id of the executable, "" if none */
  const char *script;        /* an interpreter's program (python3's script), "" if none: with
                                exe and build_id it names the program whose profile this is */
  const char *cmdline;       /* argv as NUL-separated strings (as /proc/self/cmdline) */
  size_t cmdline_len;
  const char *options;       /* effective options as NUL-separated NAME=value strings */
  size_t options_len;
  const char *cpu_model;     /* /proc/cpuinfo "model name" */
  const char *cpu_flags;     /* /proc/cpuinfo "flags" */
  int ncpu;
  int pid, ppid;
  int64_t parent_start_ns;   /* start of the run this process forked from, 0 if none: with
                                ppid it links the two runs whichever is recorded first */
  int64_t start_ns;          /* CLOCK_REALTIME */
  const char *agent_version;
  int64_t warm_ns;           /* how long after the host's first call the warm start was done
                                (its stored kernels serving), 0 if none */
} st_run_info_t;

/* Timed calls each side needs in a run before its mean is compared with the other's (a speedup,
 * a saving): one call, often the library's first (its warm-up, a thread pool's start), is no
 * mean. The store's saving, the readers' speedups and the agent's exit summary all apply it. */
#define ST_COMPARE_MIN_TIMED 2
#define ST_STR_(x) #x
#define ST_STR(x) ST_STR_(x)

/* One signature's cumulative totals in a run: flushes overwrite, so repeating one is harmless. */
typedef struct st_sig_rec_s {
  const void *key;      /* the raw key bytes (agent/sig.h) */
  size_t key_len;
  const char *sig;      /* stable id: 16 hex digits of the key's hash */
  const char *op;       /* "sgemm", "cblas_ddot", ... */
  const char *name;     /* human form */
  const char *params;   /* JSON object */
  uint64_t calls, timed_calls, timed_ns;
  const char *state;    /* its JIT state (one of ST_JIT_STATES) and why, as the agent's last */
  const char *reason;   /* decision put it; NULL: none recorded (stored as NULL) */
} st_sig_rec_t;

/* The JIT states a signature can be in, as run_sigs.state holds them: X(ID, "name", "what it
 * means"). The agent's tiers decide them, each with a reason; opjit top and variants show both. */
#define ST_JIT_STATES(X)                                                                     \
  X(OFF, "off", "the JIT is off (OPJIT_MODE=profile): counted and timed only")                \
  X(WAITING, "waiting", "not hot yet, or waiting for its turn: the reason says for what")     \
  X(QUEUED, "queued", "hot: waiting for a compile thread")                                    \
  X(COMPILING, "compiling", "a compile thread is building its kernel")                        \
  X(DEFERRED, "deferred", "the code cache is full: compiled once evicted code is freed")      \
  X(UNSUPPORTED, "unsupported", "no kernel can replace it: the reason names the limit")      \
  X(SERVING, "serving", "its kernel, compiled in this run, serves the calls")                 \
  X(PLACED, "placed", "a kernel stored by an earlier run serves the calls (no compile)")     \
  X(LOST, "lost", "its kernel measured slower than the original before serving a call")      \
  X(TIED, "tied", "its kernel measured no faster than the original: the original serves")    \
  X(DEMOTED, "demoted", "its kernel served calls, then measured slower or failed its guards") \
  X(FAILED, "failed", "compile error, a result that did not match, or no JIT: the original")  \
  X(INVALIDATED, "invalidated", "its stored kernel was dropped: the reason names the rule")   \
  X(REFUSED, "refused", "its stored kernel was not placed in this run: the reason says why")    \
  X(CRASHED, "crashed", "its kernel crashed the program in this or an earlier run: the original")

int st_run_begin(st_db_t *db, const st_run_info_t *info, int64_t *run_id);
int st_run_flush(st_db_t *db, int64_t run_id, const st_sig_rec_t *recs, size_t n,
                 uint64_t overflow_calls, int64_t now_ns);
/* Sets how long after the first call the warm start was done, for a run begun before. */
int st_run_warm(st_db_t *db, int64_t run_id, int64_t warm_ns);
/* status: "exited" (normal exit) or "exec" (the process image was replaced). */
int st_run_end(st_db_t *db, int64_t run_id, int64_t end_ns, const char *status);

/* What the sampler learnt, as cumulative totals per run (flushes overwrite). A NULL key means
 * "outside any operator" (the host's own time, stored as sig_id 0); a key must belong to a
 * signature this run already flushed. */
typedef struct st_pc_rec_s {  /* samples whose PC fell in one symbol */
  const void *key;
  size_t key_len;
  const char *module, *symbol; /* module path; symbol name, or "+0x1234" when none */
  uint64_t samples;
} st_pc_rec_t;
typedef struct st_stack_rec_s { /* samples of one call stack */
  const void *key;
  size_t key_len;
  const char *stack; /* folded, outermost frame first: "mod`sym;mod`sym"; frames never
                        contain ';', spaces or newlines (sp_frame_name) */
  uint64_t samples;
} st_stack_rec_t;
typedef struct st_counter_rec_s { /* a hardware counter's total over the samples */
  const void *key;
  size_t key_len;
  const char *event;
  uint64_t value;
} st_counter_rec_t;
typedef struct st_samples_s {
  const char *sampling; /* JSON object: mode, event, hz, notes, samples (= the sum of the
                           pcs' samples once drained), lost */
  const st_pc_rec_t *pcs;
  size_t npcs;
  const st_stack_rec_t *stacks;
  size_t nstacks;
  const st_counter_rec_t *counters;
  size_t ncounters;
} st_samples_t;
int st_run_samples(st_db_t *db, int64_t run_id, const st_samples_t *s);


/* A JIT variant of a signature in a run (cumulative: flushes overwrite). */
typedef struct st_variant_rec_s {
  const void *key;
  size_t key_len;
  const char *status;            /* queued, ready, failed, demoted; NULL: no variant row, only
                                    the object's store or drop below */
  int generator;                 /* the generator's version */
  const char *llvm, *cpu;        /* what the code was compiled with and for */
  uint64_t compile_ns;
  uint64_t calls;                /* calls the variant served */
  uint64_t timed_calls, timed_ns; /* the variant's timed calls */
  const char *origin;            /* "compiled" in this run, or "loaded" from an object */
  uint64_t pre_calls;            /* the signature's calls before the variant was published */
  /* Its object, for later runs: stored (replacing the signature's object for machine_cpu)
   * when object is set; deleted when drop_object is (an invalidation, whose reason is an
   * event). */
  const char *machine_cpu;       /* the CPU the object is for (st_profile's cpu) */
  const void *object;
  size_t object_len;
  const char *symbol;
  uint64_t checksum;
  int drop_object;               /* also deletes the signature's judge pool for machine_cpu */
  /* The judge's pooled rounds on this variant (symbol, generator; a variant compiled anew
   * starts its own), replacing what the store had for the signature and machine_cpu; NULL:
   * left as they are. */
  const st_judge_pool_t *judge;
  /* The judge's median ratio variant / original over its window now (store/judge.h), whatever
   * its verdict, for the readers' figures of this run (query.h, ST_SIG_RATIO): a variant
   * demoted as slower keeps them after its pool is dropped; 0: fewer than ST_JUDGE_MIN_RATIOS
   * rounds (stored as NULL). */
  double ratio;
} st_variant_rec_t;
/* The kinds of event in a signature's life, as events.kind holds them: X(ID, "name"). The
 * agent's tiers record them; opjit events filters on them. */
#define ST_EVENT_KINDS(X)                                                                    \
  X(QUEUED, "queued")                                                                        \
  X(PUBLISHED, "published")                                                                  \
  X(VERIFIED, "verified")                                                                    \
  X(VERIFY_FAILED, "verify-failed")                                                          \
  X(DEMOTED, "demoted")                                                                      \
  X(FAILED, "failed")                                                                        \
  X(EVICTED, "evicted")                                                                      \
  X(DEFERRED, "deferred") /* no room in the code cache yet */                              \
  X(LOADED, "loaded")     /* a persisted object placed at start-up: no compile */            \
  X(INVALIDATED, "invalidated") /* a persisted object dropped; the detail starts with the    \
                                   reason: decayed, slower, guard, cpu, llvm, generator,     \
                                   checksum, unloadable */                                   \
  X(REFUSED, "refused") /* a fleet kernel not placed (store/fleet.h): the detail starts with  \
                           the reason: tag (missing or wrong HMAC), or one of the above */   \
  X(CRASHED, "crashed") /* the program died of a fault inside the signature's kernel (st_crash) */

/* An event of a signature's life (appended). */
typedef struct st_event_rec_s {
  const void *key;
  size_t key_len;
  int64_t time_ns;
  const char *kind;   /* one of ST_EVENT_KINDS */
  const char *detail;
} st_event_rec_t;
/* Records (and events) of signatures the database no longer has (opjit gc collected them:
 * nothing referred to them) are skipped. */
int st_run_variants(st_db_t *db, int64_t run_id, const st_variant_rec_t *v, size_t nv,
                    const st_event_rec_t *ev, size_t nev);

/* A run's series over time (the agent's writer bins it, agent/series.h): one row per signature
 * that had calls, one for the signatures beyond those the agent gives a row (rest), and one
 * for the samples outside operators (NULL key); each array holds count intervals of
 * interval_ns from the run's start. The whole series is replaced at each write (its interval
 * doubles as the run grows). */
typedef struct st_series_rec_s {
  const void *key; /* NULL: outside operators (sig_id 0), or the rest */
  size_t key_len;
  int rest;        /* the signatures without a row of their own, summed (sig_id -1) */
  const uint64_t *calls, *vcalls, *samples; /* per interval; NULL reads as zeros */
} st_series_rec_t;
/* Replaces run's series: n rows of count intervals of interval_ns from start_ns (the run's
 * start, CLOCK_REALTIME). Rows of signatures the database does not have are skipped. */
int st_run_series(st_db_t *db, int64_t run_id, int64_t interval_ns, int64_t start_ns,
                  uint32_t count, const st_series_rec_t *rows, size_t n);

/* A program's profile on one machine (program's exe, build_id, script, cpu_model and
 * cpu_flags), as its recent runs left it: each run's calls weigh 0.5^(age / decay_runs), age 0
 * being the newest run that recorded a signature, over at most max_runs such runs. */
typedef struct st_hot_s {
  void *key;               /* the raw key bytes */
  size_t key_len;
  double score;            /* decayed calls: the sum over the runs of calls times weight */
  double mean_ns;          /* the original's mean timed duration over those runs (0: none) */
  int demoted_gen;         /* the newest of those runs that had a variant for it demoted it
                              (measured slower than the original, or it crashed the program):
                              that variant's generator version; 0 otherwise */
  int crashed;             /* ... and that variant crashed the program (status "crashed") */
  /* The signature's object: the one for the requested cpu if there is one, else the newest
   * for any (object_id 0: none). */
  int64_t object_id;
  int mine;                /* the object was stored by a run of this program (or its run is
                              gone): this program's profile may decide to delete it */
  char cpu[320], llvm[64], symbol[160];
  int generator;
  uint64_t checksum;
  void *code;
  size_t code_len;
  int has_judge;           /* judge holds the pooled rounds on that object's variant (its cpu,
                              generator and symbol) */
  st_judge_pool_t judge;
} st_hot_t;
typedef struct st_profile_s {
  int64_t runs;            /* the runs the profile was read from */
  size_t n;
  st_hot_t *sigs;          /* every signature those runs called, hottest first */
} st_profile_t;
int st_profile(st_db_t *db, const st_run_info_t *program, const char *cpu, double decay_runs,
               int max_runs, st_profile_t *out);
void st_profile_free(st_profile_t *p);

/* The object stored for the signature whose key is key, for cpu (an object key, machine.h), by
 * any program's run on this machine, and its judge pool: out filled as st_profile fills a
 * signature's key, object and judge fields (score, mean_ns, demoted_gen and mine 0); object_id
 * 0 when there is none. Free out with st_hot_free, whatever the return. */
int st_object(st_db_t *db, const void *key, size_t key_len, const char *cpu, st_hot_t *out);
void st_hot_free(st_hot_t *h);
/* The keys of key_len bytes of the signatures that have an object for cpu built by generator
 * with llvm, stored by any program's run: *n of them in one malloc'ed block at *keys (free()),
 * in memcmp order. */
int st_shelf(st_db_t *db, const char *cpu, int generator, const char *llvm, size_t key_len,
             void **keys, size_t *n);

/* Deletes runs beyond the newest keep_runs and runs that ended before older_than_ns (0: no
 * age limit), never a run still marked running unless its process is gone, then everything
 * no remaining run refers to: objects of signatures no remaining run called included. Counts
 * what it deleted. */
typedef struct st_gc_result_s {
  int64_t runs, signatures, programs, machines, symbols, objects;
} st_gc_result_t;
int st_gc(st_db_t *db, int64_t keep_runs, int64_t older_than_ns, st_gc_result_t *res);

/* The machine model of one CPU (agent/machine.h measures it): stored once per CPU key, read by
 * every later run on that CPU. Compile latencies accumulate over runs, per kernel family. */
#define ST_MACHINE_FAMILIES 16 /* kernel families kept per CPU */
#define ST_MACHINE_RECENT 32   /* latest compile times kept per family: the median's window */
typedef struct st_compile_stat_s {
  char family[32];                   /* "gemm", "dot", "mm", "add_rms_mul", ... */
  uint64_t n;                        /* compiles noted over every run */
  double mean_ns;                    /* their mean */
  uint64_t median_ns;                /* the median of recent */
  uint32_t nrecent;
  uint64_t recent[ST_MACHINE_RECENT]; /* the latest, oldest first */
} st_compile_stat_t;
/* Appends ns to f's totals and window (dropping the oldest when full): for the store and the
 * agent alike. */
static inline void st_compile_add(st_compile_stat_t *f, uint64_t ns)
{
  f->mean_ns = (f->mean_ns * (double)f->n + (double)ns) / (double)(f->n + 1);
  f->n++;
  if (f->nrecent == ST_MACHINE_RECENT)
    memmove(f->recent, f->recent + 1, --f->nrecent * sizeof *f->recent);
  f->recent[f->nrecent++] = ns;
}
/* The median of f's window (the lower middle of an even count), 0 when empty: for the store
 * and the agent alike (inline: the agent reaches the store's functions only through its
 * module). */
static inline uint64_t st_compile_median(const st_compile_stat_t *f)
{
  uint64_t v[ST_MACHINE_RECENT];
  uint32_t n = f->nrecent < ST_MACHINE_RECENT ? f->nrecent : ST_MACHINE_RECENT;
  for (uint32_t i = 0; i < n; i++) { /* insertion sort: 32 values at most */
    uint64_t x = f->recent[i];
    uint32_t j = i;
    for (; j > 0 && v[j - 1] > x; j--)
      v[j] = v[j - 1];
    v[j] = x;
  }
  return n ? v[(n - 1) / 2] : 0;
}
typedef struct st_machine_s {
  char cpu[320];            /* the CPU key (agent/runinfo.h cpu_key) */
  char isa[256];            /* the vector extensions CPU and OS support, space-separated */
  int vregs;                /* vector registers of the widest of them */
  double gflops[2][3];      /* FMA peak, GFLOP/s: [f32, f64][128, 256, 512 bits]; 0: not
                               measured (the width is not supported) */
  double timer_ns;          /* one read of the agent's clock */
  int settled;              /* the peaks a later measurement agreed with, a bit each
                               (agent/machine.h, ag_machine_t.agreed; by method 2: 1, all);
                               a run measures them again until every measured peak's is set */
  int method;               /* the measurement's version: a newer one measures again */
  int64_t measured_ns;      /* when (CLOCK_REALTIME); 0 in st_machine_save: no model, notes only */
  size_t nfamilies;
  st_compile_stat_t families[ST_MACHINE_FAMILIES];
} st_machine_t;
typedef struct st_compile_note_s { /* one compile, for st_machine_save */
  const char *family;
  uint64_t ns;
} st_compile_note_t;
/* Stores m's model for m->cpu (replacing an older one) unless m->measured_ns is 0, and adds the
 * compile times notes (of this process, not yet saved) to the families' totals and windows,
 * in one transaction: processes on the same CPU that save at once add up. */
int st_machine_save(st_db_t *db, const st_machine_t *m, const st_compile_note_t *notes,
                    size_t nnotes);
/* Reads cpu's model and compile statistics into *out: ST_ENOENT when neither exists
 * (out->measured_ns is 0 when only compile times do). */
int st_machine_load(st_db_t *db, const char *cpu, st_machine_t *out);

/* A process that died of a fatal signal, as the next run learns it (agent/crash.h). */
typedef struct st_crash_s {
  int64_t run_id;        /* its run (0: it crashed before its run was recorded) */
  int pid;               /* its process: the run is marked only when its pid is this one */
  int64_t time_ns;       /* when (CLOCK_REALTIME) */
  const void *key;       /* the signature whose JIT kernel held the faulting PC; NULL: the fault */
  size_t key_len;        /* was not in JIT code (the program's own) */
  int generator;         /* the kernel's generator version */
  const char *llvm, *cpu; /* what the agent compiles with, and this machine's object key */
  const char *detail;    /* one sentence: the event's detail and the signature's reason */
} st_crash_t;
typedef struct st_crash_result_s {
  int run_marked;        /* the run was marked "crashed" (it was still "running") */
  int recorded;          /* the crashed run holds the signature's state, variant and event */
  int64_t objects;       /* stored objects of the signature deleted */
} st_crash_result_t;
/* Records crash c in one transaction: its run, when still "running" and of c->pid, becomes
 * "crashed" (ended at c->time_ns); with a key, the signature's stored object for c->cpu is
 * deleted and, when the run and the signature are both in the database, the run's row for it
 * says "crashed" (state, reason and variant status: later profiles leave it on the original
 * until the generator changes, st_hot_t.crashed) with a "crashed" event. */
int st_crash(st_db_t *db, const st_crash_t *c, st_crash_result_t *res);
/* The newest run, of any program, that recorded a crash of the kernel by generator for cpu (an
 * object key, machine.h) for the signature whose key is key (a "crashed" variant: the crashed
 * run's, st_crash, or a later run's that kept the signature on the original for it): *run_id,
 * 0 when none. */
int st_crashed(st_db_t *db, const void *key, size_t key_len, const char *cpu, int generator,
               int64_t *run_id);

/* The agent loads the store as its own shared object (libopjit-store.so, which links SQLite)
 * from its writer thread, so a process that records nothing never loads SQLite. */
typedef struct st_api_s {
  int abi; /* ST_API_ABI */
  const char *(*errstr)(int code);
  int (*open)(const char *path, int flags, int busy_ms, st_db_t **out, char *err, size_t len);
  void (*close)(st_db_t *db);
  int (*run_begin)(st_db_t *db, const st_run_info_t *info, int64_t *run_id);
  int (*run_flush)(st_db_t *db, int64_t run_id, const st_sig_rec_t *recs, size_t n,
                   uint64_t overflow_calls, int64_t now_ns);
  int (*run_end)(st_db_t *db, int64_t run_id, int64_t end_ns, const char *status);
  int (*run_samples)(st_db_t *db, int64_t run_id, const st_samples_t *s);
  int (*run_variants)(st_db_t *db, int64_t run_id, const st_variant_rec_t *v, size_t nv,
                      const st_event_rec_t *ev, size_t nev);
  int (*profile)(st_db_t *db, const st_run_info_t *program, const char *cpu, double decay_runs,
                 int max_runs, st_profile_t *out);
  void (*profile_free)(st_profile_t *p);
  int (*machine_save)(st_db_t *db, const st_machine_t *m, const st_compile_note_t *notes,
                      size_t nnotes);
  int (*machine_load)(st_db_t *db, const char *cpu, st_machine_t *out);
  int (*run_series)(st_db_t *db, int64_t run_id, int64_t interval_ns, int64_t start_ns,
                    uint32_t count, const st_series_rec_t *rows, size_t n);
  int (*crash)(st_db_t *db, const st_crash_t *c, st_crash_result_t *res);
  int (*run_warm)(st_db_t *db, int64_t run_id, int64_t warm_ns);
  int (*object)(st_db_t *db, const void *key, size_t key_len, const char *cpu, st_hot_t *out);
  void (*hot_free)(st_hot_t *h);
  int (*shelf)(st_db_t *db, const char *cpu, int generator, const char *llvm, size_t key_len,
               void **keys, size_t *n);
  int (*crashed)(st_db_t *db, const void *key, size_t key_len, const char *cpu, int generator,
                 int64_t *run_id);
} st_api_t;
#define ST_API_ABI 10
#define ST_API_SYMBOL "opjit_store_api"
#define ST_MODULE_NAME "libopjit-store.so"

#endif
