/* SPDX-License-Identifier: MIT */
/* The read side of the profile store: every question the `opjit` command asks the database,
 * named, with its parameters and the columns of its rows as a contract. The SQL and the schema
 * it reads live in store/ only (query.c); a schema change keeps these contracts and touches no
 * reader. A read-only connection to an older schema reads like the newest (st_open's read-side
 * views), so every query works on every schema st_open accepts.
 * Functions return ST_OK (0) or a negative ST_E* code; st_errmsg says what SQLite reported. */
#ifndef OPJIT_STORE_QUERY_H
#define OPJIT_STORE_QUERY_H

#include "store.h"

#include <stdint.h>

/* The queries. Parameters ?N are bound with st_rows_bind_*; an unbound one is NULL. "run (0:
 * every run)" reads one run, or all of them when bound to 0. An exe column is NULL when the
 * run's programs row is gone. */
enum st_query {
  /* The newest run with a row of a kind: columns run (NULL: none). */
  ST_Q_NEWEST_CALL_RUN,    /* an operator call (run_sigs) */
  ST_Q_NEWEST_STACK_RUN,   /* a sampled stack */
  ST_Q_NEWEST_VARIANT_RUN, /* a JIT variant */
  ST_Q_NEWEST_EVENT_RUN,   /* a JIT event */
  /* ?1 prefix, ?2 limit: the signatures whose id starts with ?1, by id, at most ?2: sig,
   * name, the number of all matches. */
  ST_Q_SIG_PREFIX,
  /* ?1 run (0: every run): signatures ranked by estimated time (enum st_sig_col). */
  ST_Q_SIG_TOTALS,
  /* ?1 run: 1 when it exists, else 0. */
  ST_Q_RUN_EXISTS,
  /* ?1 run: the run (enum st_run_col). */
  ST_Q_RUN,
  /* ?1 run (0: every run): sampling (the runs' JSON summaries, not NULL), by run. */
  ST_Q_RUN_SAMPLINGS,
  /* ?1 run (0: every run): samples attributed by PC, of which outside operators. */
  ST_Q_SAMPLE_TOTALS,
  /* ?1 run (0: every run): runs, their wall time as recorded so far (ns), overflow calls. */
  ST_Q_SCOPE_TOTALS,
  /* ?1 limit (-1: all): the newest runs, newest first (enum st_list_col). */
  ST_Q_RUN_LIST,
  /* ?1 limit (-1: all): 1 when one of the newest ?1 runs has a ready variant, else 0. */
  ST_Q_RUN_LIST_HAS_READY,
  /* ?1 start_ns, ?2 pid: a launched program's runs (its own and its children's since ?1,
   * and their forks), by id (enum st_tree_col). */
  ST_Q_RUN_TREE,
  /* ?1 sig: name, op, params. */
  ST_Q_SIG_INFO,
  /* ?1 sig, ?2 run (0: every run): the runs that called it, newest first (enum
   * st_sigrun_col). */
  ST_Q_SIG_RUNS,
  /* ?1 sig, ?2 run (0: every run): the symbols its samples fell in, most first: module,
   * symbol, samples, all its samples. */
  ST_Q_SIG_SYMBOLS,
  /* ?1 sig, ?2 run (0: every run): its hardware counters by event: event, value, the calls
   * of the runs that counted it. */
  ST_Q_SIG_COUNTERS,
  /* ?1 run (0: every run): variants, newest run first, then most calls first (enum
   * st_var_col). */
  ST_Q_VARIANTS,
  /* ?1 run (0: every run), ?2 sig ('': any), ?3 kind (NULL: any): events by run, then in
   * order (enum st_event_col). */
  ST_Q_EVENTS,
  /* ?1 run: its series over time, the signatures' by sig, then the rest, then the samples
   * outside operators (enum st_series_col); no row for a run without one (an agent older
   * than schema 8's). */
  ST_Q_SERIES,
  /* ?1 run (0: every run), ?2 sig (NULL: any): folded stacks summed over the scope, the
   * operators' by name, then the program's own (sig_id 0): sig_id, name, stack, samples. */
  ST_Q_STACKS,
  /* ?1 run (0: every run): runs as recorded, by id (enum st_export_col). */
  ST_Q_EXPORT_RUNS,
  /* ?1 run, each: its rows for opjit export; sig is NULL for what fell outside operators. */
  ST_Q_EXPORT_SIGS,     /* sig, op, name, params, calls, timed_calls, timed_ns, state, reason
                           (NULL: not recorded) */
  ST_Q_EXPORT_PCS,      /* sig, module, symbol, samples */
  ST_Q_EXPORT_STACKS,   /* sig, stack, samples, name */
  ST_Q_EXPORT_COUNTERS, /* sig, event, value */
  ST_Q_EXPORT_VARIANTS, /* sig, status, generator, llvm, cpu, compile_ns, calls, timed_calls,
                           timed_ns */
  ST_Q_EXPORT_EVENTS,   /* sig, time_ns, kind, detail */
  /* The file's health, one row each. */
  ST_Q_QUICK_CHECK,  /* "ok", or the damage found */
  ST_Q_RUN_COUNT,    /* runs */
  ST_Q_JOURNAL_MODE, /* the journal mode */
  /* ?1 cpu (an object key, agent/machine.h): the kernels stored for it, by any program's run,
   * and the programs whose runs stored them: kernels, programs (a run since deleted counts
   * none) */
  ST_Q_KERNELS,
  ST_Q__N
};

/* The columns of ST_Q_SIG_TOTALS: per run, a signature's calls are split between the original
 * library (run_sigs' timed calls are the original's only) and its JIT variant (its calls,
 * clamped to the signature's), each part estimated with its own mean (a part without timed
 * calls borrows the other's; the original's is the judge's where it has a ratio), then summed
 * over the runs; ranked by the estimate, most first. */
enum st_sig_col {
  ST_SIG_SIG, /* 16 hex digits */
  ST_SIG_NAME,
  ST_SIG_OP,
  ST_SIG_PARAMS,    /* JSON object */
  ST_SIG_CALLS,     /* all calls */
  ST_SIG_TIMED,     /* the original library's timed calls */
  ST_SIG_TIMED_NS,  /* and their time */
  ST_SIG_EST,       /* original calls × original mean + variant calls × variant mean (real);
                       the original's mean is the judge's where it has a ratio (ST_SIG_RATIO) */
  ST_SIG_SAMPLES,   /* samples attributed to it by PC */
  ST_SIG_VCALLS,    /* calls its JIT variant served */
  ST_SIG_VTIMED,    /* the variant's timed calls */
  ST_SIG_VTIMED_NS, /* and their time */
  ST_SIG_SAVING,    /* variant calls × (original mean − variant mean) where each side has
                       ST_COMPARE_MIN_TIMED timed calls; by the judge's ratio where it has one
                       (ST_SIG_RATIO) */
  ST_SIG_STATUS,    /* the newest variant's status; NULL: none */
  ST_SIG_NVARIANTS, /* runs with a variant */
  ST_SIG_STATE,     /* the JIT state in the newest run (ST_JIT_STATES); NULL: not recorded
                       (a run of an agent older than schema 7) */
  ST_SIG_REASON,    /* why, in the words of the decision that set it; NULL likewise */
  ST_SIG_RATIO,     /* the never-slower judge's ratio variant / original: in each run where a
                       variant ran, the median over its window that the run recorded (schema
                       11, whatever the verdict: a variant demoted as slower shows > 1), else
                       over its newest pool (store/judge.h), where the judge had
                       ST_JUDGE_MIN_RATIOS rounds; over the runs in scope, the variant's time against
                       the original's that those ratios imply; NULL where none has one. Where
                       a run has one, its part of ST_SIG_SAVING is variant calls x variant
                       mean x (1 / ratio - 1): the original's cost as the judge's warm,
                       interleaved rounds measure it against the variant's, not the mean of
                       its rare (colder) calls in a run the variant serves */
};

/* The columns of ST_Q_RUN. */
enum st_run_col {
  ST_RUN_EXE,    /* the program's executable; NULL when its programs row is gone */
  ST_RUN_ARGV,   /* JSON array */
  ST_RUN_STATUS, /* running, exited, exec */
  ST_RUN_PID,
  ST_RUN_START_NS, /* CLOCK_REALTIME */
  ST_RUN_FLUSH_NS, /* the last flush; 0: none */
  ST_RUN_END_NS,   /* 0: not recorded */
};

/* The columns of ST_Q_RUN_LIST. */
enum st_list_col {
  ST_LIST_ID,
  ST_LIST_START_NS,
  ST_LIST_FLUSH_NS, /* 0: none */
  ST_LIST_END_NS,   /* 0: none */
  ST_LIST_STATUS,
  ST_LIST_PID,
  ST_LIST_PPID,
  ST_LIST_EXE,         /* NULL when its programs row is gone */
  ST_LIST_ARGV,        /* JSON array */
  ST_LIST_PARENT_RUN,  /* the run it forked from; NULL: none */
  ST_LIST_SIGS,        /* signatures called */
  ST_LIST_CALLS,       /* their calls */
  ST_LIST_OVERFLOW,    /* calls beyond the signature table */
  ST_LIST_SAMPLING,    /* the sampler's JSON summary; NULL: none */
  ST_LIST_READY,       /* variants ready */
  ST_LIST_LOADED,      /* "loaded" events: stored kernels placed at start-up */
  ST_LIST_PUBLISHED,   /* signatures compiled in the run: "published", or "demoted" before */
  ST_LIST_INVALIDATED, /* "invalidated" events: stored kernels dropped */
  ST_LIST_WARM_NS,     /* what the warm start cost; 0: none */
  ST_LIST_CRASH,       /* its first "crashed" event: "NAME: DETAIL"; NULL: none */
};

/* The columns of ST_Q_RUN_TREE. */
enum st_tree_col {
  ST_TREE_ID,
  ST_TREE_STATUS,
  ST_TREE_PID,
  ST_TREE_START_NS,
  ST_TREE_SIGS,
  ST_TREE_CALLS
};

/* The columns of ST_Q_SIG_RUNS: a run and the signature's counts in it. */
enum st_sigrun_col {
  ST_SIGRUN_RUN,
  ST_SIGRUN_EXE, /* NULL when its programs row is gone */
  ST_SIGRUN_ARGV,
  ST_SIGRUN_START_NS,
  ST_SIGRUN_STATUS,
  ST_SIGRUN_PID,
  ST_SIGRUN_CALLS,
  ST_SIGRUN_TIMED,
  ST_SIGRUN_TIMED_NS,
  ST_SIGRUN_STATE,  /* its JIT state in the run (ST_JIT_STATES); NULL: not recorded */
  ST_SIGRUN_REASON, /* and why */
  ST_SIGRUN_EST,    /* its estimated time in the run (real), as ST_SIG_EST counts it */
};

/* The columns of ST_Q_VARIANTS: a variant, and its signature's own counts in the run (the
 * original library's timed calls; 0 when the run has no row for it). */
enum st_var_col {
  ST_VAR_RUN,
  ST_VAR_SIG,
  ST_VAR_NAME,
  ST_VAR_STATUS, /* queued, ready, failed, demoted */
  ST_VAR_GENERATOR,
  ST_VAR_LLVM,
  ST_VAR_CPU,
  ST_VAR_COMPILE_NS,
  ST_VAR_CALLS, /* calls the variant served */
  ST_VAR_TIMED, /* its timed calls */
  ST_VAR_TIMED_NS,
  ST_VAR_SIG_CALLS, /* all the signature's calls */
  ST_VAR_SIG_TIMED, /* the original's timed calls */
  ST_VAR_SIG_TIMED_NS,
  ST_VAR_COMPILERS, /* distinct llvm/cpu/generator in the scope (the same on every row) */
  ST_VAR_ORIGIN,    /* compiled, loaded */
  ST_VAR_STATE,     /* the signature's JIT state in the run, as ST_SIG_STATE; NULL likewise */
  ST_VAR_REASON,    /* and why */
  ST_VAR_RATIO,     /* the judge's median ratio in the row's run, as ST_SIG_RATIO's per run */
};

/* The columns of ST_Q_EVENTS. */
enum st_event_col {
  ST_EVENT_RUN,
  ST_EVENT_TIME_NS,   /* CLOCK_REALTIME */
  ST_EVENT_OFFSET_NS, /* since the run's start */
  ST_EVENT_KIND,      /* one of ST_EVENT_KINDS */
  ST_EVENT_SIG,
  ST_EVENT_NAME,
  ST_EVENT_DETAIL,
};

/* The columns of ST_Q_SERIES: one row of the run's series; the three blobs hold the same
 * number of intervals (st_series_decode reads them). */
enum st_series_col {
  ST_SERIES_SIG,         /* 16 hex digits; NULL: a row of no one signature (ST_SERIES_ROW) */
  ST_SERIES_NAME,        /* NULL likewise */
  ST_SERIES_INTERVAL_NS, /* each interval's length */
  ST_SERIES_OFFSET_NS,   /* the first interval's start, since the run's start */
  ST_SERIES_CALLS,       /* blob: calls per interval */
  ST_SERIES_VCALLS,      /* blob: calls its JIT variant served */
  ST_SERIES_SAMPLES,     /* blob: CPU samples attributed to it */
  ST_SERIES_ROW,         /* "sig"; "rest": the signatures the agent gave no row of their own
                            (beyond the first it kept), summed; "outside": outside operators */
};

/* The columns of ST_Q_EXPORT_RUNS: a run, its program and its machine as recorded. */
enum st_export_col {
  ST_EXPORT_ID,
  ST_EXPORT_PID,
  ST_EXPORT_PPID,
  ST_EXPORT_PARENT_RUN, /* NULL: none */
  ST_EXPORT_STATUS,
  ST_EXPORT_START_NS,
  ST_EXPORT_FLUSH_NS, /* NULL: none */
  ST_EXPORT_END_NS,   /* NULL: none */
  ST_EXPORT_OVERFLOW,
  ST_EXPORT_AGENT_VERSION,
  ST_EXPORT_ARGV,    /* JSON array */
  ST_EXPORT_OPTIONS, /* JSON object */
  ST_EXPORT_EXE,     /* NULL when its programs row is gone, as the next one */
  ST_EXPORT_BUILD_ID,
  ST_EXPORT_CPU_MODEL, /* NULL when its machines row is gone, as the next two */
  ST_EXPORT_CPU_FLAGS,
  ST_EXPORT_NCPU,
  ST_EXPORT_SAMPLING, /* JSON object; NULL: none */
};

/* A query's rows, read one at a time. */
typedef struct st_rows_s st_rows_t;

/* What a column holds in the current row. */
enum st_col_type { ST_COL_NULL, ST_COL_INT, ST_COL_REAL, ST_COL_TEXT, ST_COL_BLOB };

/* Prepares query q on db into *out (before its first row). Returns ST_OK, or a code (*out
 * NULL; st_errmsg says why). */
int st_query(st_db_t *db, enum st_query q, st_rows_t **out);
/* Binds parameter ?param (from 1) to an integer, or to text (NULL: SQL NULL; copied). */
void st_rows_bind_int(st_rows_t *r, int param, int64_t v);
void st_rows_bind_text(st_rows_t *r, int param, const char *text);
/* Steps to the next row: 1 when there is one, 0 after the last, or a negative code. */
int st_rows_next(st_rows_t *r);
/* Goes back before the first row, bindings kept. Returns ST_OK or the code of the last
 * step's failure. */
int st_rows_rewind(st_rows_t *r);
/* Column col (from 0) of the current row: as an integer, a real, text ("" when NULL; valid
 * until the next step), and its type. */
int64_t st_rows_int(const st_rows_t *r, int col);
double st_rows_double(const st_rows_t *r, int col);
const char *st_rows_text(const st_rows_t *r, int col);
enum st_col_type st_rows_type(const st_rows_t *r, int col);
/* Column col's bytes as a blob (NULL, *len 0, when NULL or empty; valid until the next step). */
const void *st_rows_blob(const st_rows_t *r, int col, size_t *len);
/* The values of a series blob (ST_SERIES_CALLS ...), at most max of them, into out; returns
 * how many. */
size_t st_series_decode(const void *blob, size_t len, uint64_t *out, size_t max);
/* Frees r (NULL is fine). */
void st_rows_close(st_rows_t *r);

/* SQLite's message for db's last failure. */
const char *st_errmsg(st_db_t *db);
/* Whether db's last failure was damage SQLite met in the file (SQLITE_CORRUPT). */
int st_damaged(st_db_t *db);
/* SQLite's PRAGMA quick_check of the file at path, opened read-only by itself (for a file
 * st_open refused as damaged): its first row ("ok", or the damage found) or why it could not
 * run, in out. Returns ST_OK when it ran. */
int st_quick_check(const char *path, char *out, size_t len);
/* The database file's absolute path ("" for an in-memory database). */
const char *st_path(st_db_t *db);
/* Gives the space of deleted rows back: WAL checkpoint, VACUUM, checkpoint (the WAL truncated
 * to nothing unless a reader holds it). Returns ST_OK or a code (st_errmsg says why). */
int st_compact(st_db_t *db);
/* An in-memory copy of db (read in one transaction) into *out, opened as st_open would.
 * Returns ST_OK, or a code with a sentence in err. */
int st_copy_to_memory(st_db_t *db, st_db_t **out, char *err, size_t errlen);

#endif
