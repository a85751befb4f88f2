/* SPDX-License-Identifier: MIT */
/* Database access shared by the subcommands: the agent's path rule, opening with the store's
 * checks and a user-facing error, statements, and what a run row means (its status, its
 * program, its wall time). Functions that print do so to stderr as "opjit: ...". */
#ifndef OPJIT_INSPECT_DB_H
#define OPJIT_INSPECT_DB_H

#include "store/query.h"
#include "store/store.h"

#include <cjson/cJSON.h>

#include <stddef.h>
#include <stdint.h>

#define INS_READ_BUSY_MS 1000  /* readers wait this long for a writer */
#define INS_WRITE_BUSY_MS 5000 /* gc waits this long for the agents' writes */
#define INS_NO_PROGRAM "(program not recorded)" /* a run's label without its program */

/* getenv with the signature the agent's option parser wants (ag_getenv_fn). */
const char *ins_getenv(const char *name);

/* The database path: opt (--db) when given, else the agent's rule (OPJIT_DB, XDG_CACHE_HOME,
 * HOME). Returns 0, or -1 (with a message) when no path can be formed. */
int ins_db_path(const char *opt, char *buf, size_t len);

/* Opens the database named by opt (see ins_db_path) with st_open flags (a read-only reader of
 * an older schema reads it as the newest). Returns 0, or INS_EXIT_FAIL after printing
 * st_open's message. */
int ins_db_open(const char *opt, int flags, int busy_ms, st_db_t **db);

/* Query q on db (store/query.h), or NULL after printing why. */
st_rows_t *ins_query(st_db_t *db, enum st_query q);
/* Says on stderr that db cannot be read (verb: "read", "query"), and what to do when SQLite
 * met damage. */
void ins_db_failed(st_db_t *db, const char *verb);
/* Closes r after a loop over its rows: returns 0 when the last st_rows_next (last) said there
 * were no more rows, else prints SQLite's message and returns INS_EXIT_FAIL. */
int ins_rows_finish(st_db_t *db, st_rows_t *r, int last);
/* An integer as JSON: a number where a double holds it exactly, else its digits as they are
 * (an epoch's nanoseconds are above 2^53: cJSON printed 1.7965366162244851e+18). */
void ins_json_add_int(cJSON *o, const char *key, int64_t v);
/* Adds column i of r to object o under key as an integer (ins_json_add_int), or null when it
 * is NULL. */
void ins_json_add_col_int(cJSON *o, const char *key, const st_rows_t *r, int i);

/* What a run recorded, for ins_newest_run. */
enum ins_has { INS_HAS_CALLS, INS_HAS_STACKS, INS_HAS_VARIANTS, INS_HAS_EVENTS };
/* The newest run that recorded what (an operator call, a sampled stack, a JIT variant, a JIT
 * event) into *run; prints why and returns INS_EXIT_FAIL when there is none. */
int ins_newest_run(st_db_t *db, enum ins_has what, int64_t *run);
/* The run a command reads into *scope: run when given (it must exist), else 0 with all (every
 * run), else the newest run with what. Returns 0, or 1 when it printed why there is none. */
int ins_pick_run(st_db_t *db, int64_t run, int all, enum ins_has what, int64_t *scope);
/* Resolves a signature id prefix (lower-case hex) to one full id in sig[17]; prints the
 * candidates or the absence and returns INS_EXIT_FAIL when several or none match. */
int ins_sig_resolve(st_db_t *db, const char *prefix, char *sig);

/* A JSON document opening with "run" (run, or null for every run: 0) and "database" (db's
 * path). */
cJSON *ins_json_doc(st_db_t *db, int64_t run);

/* Whether run id exists; prints "opjit: no run ID in PATH" when it does not. Returns 1, 0,
 * or -1 on an SQLite error (printed). */
int ins_run_exists(st_db_t *db, int64_t id);

/* "run 12: python3 -c import numpy… (exited, started 2025-11-29 14:03:12)" for run into buf,
 * the program cut to width characters; its start (CLOCK_REALTIME ns) into *start_ns when
 * non-NULL. Returns 0, or INS_EXIT_FAIL (printed). */
int ins_run_title(st_db_t *db, int64_t run, int width, char *buf, size_t len, int64_t *start_ns);

/* The status to show for a run row: "lost" for a run still marked running whose process is
 * gone (or whose pid now belongs to a process started after the run), else status itself. */
const char *ins_run_status(const char *status, int64_t pid, int64_t start_ns);
/* A run's wall time as recorded: end, else last flush, minus start (0 stands for NULL);
 * -1 when neither is known. */
int64_t ins_run_wall_ns(int64_t start_ns, int64_t flush_ns, int64_t end_ns);
/* "python3.11 -c import numpy…": exe's basename and argv[1..] (a JSON array), abbreviated
 * with "…" to at most width characters; INS_NO_PROGRAM for exe when it is NULL or "" (the
 * run's program row is gone). */
void ins_program_label(const char *exe, const char *argv_json, int width, char *buf, size_t len);

/* What the sampler recorded over a scope: one run, or every run (run 0). */
typedef struct ins_sampling_s {
  int64_t runs;          /* runs with a sampling summary (runs.sampling not NULL) */
  int64_t sampled;       /* of which actually sampled (mode not "off") */
  int64_t samples, lost; /* the summaries' counts, summed */
  int64_t total, host;   /* samples attributed by PC (run_pcs), and those outside operators */
  char mode[16];         /* the sampled runs' mode, event and rate; "mixed"/"mixed"/0 when */
  char event[32];        /* they differ; "off"/""/0 when none was sampled */
  int64_t hz;
  cJSON *notes;          /* array of the distinct notes (why better events were not used) */
} ins_sampling_t;

/* Reads the sampling of run (0: every run) into *s (free with ins_sampling_free). Returns 0,
 * or INS_EXIT_FAIL (printed). */
int ins_sampling_read(st_db_t *db, int64_t run, ins_sampling_t *s);
/* Adds one run's summary text (a runs.sampling value; "" or malformed adds nothing) to s;
 * notes only when s->notes is an array. */
void ins_sampling_add(ins_sampling_t *s, const char *text);
void ins_sampling_free(ins_sampling_t *s);
/* "perf task-clock at 499 Hz, 1234 samples (12 lost)" ("timer at 199 Hz, ..." for timers, whose
 * mode is their event), or "off" when nothing was sampled. */
const char *ins_sampling_describe(const ins_sampling_t *s, char *buf, size_t len);
/* The summary as JSON: runs, mode, event, hz, samples, lost, notes, attributed, outside, and
 * inside_pct / program_pct (the shares of attributed samples in and outside operators). */
cJSON *ins_sampling_json(const ins_sampling_t *s);
/* a + b and a - b, held at INT64_MIN / INT64_MAX where they would overflow (the counts and
 * times a hostile database holds). */
int64_t ins_sat_add(int64_t a, int64_t b);
int64_t ins_sat_sub(int64_t a, int64_t b);
/* pct of part in whole, 0 when whole is 0. */
double ins_pct(int64_t part, int64_t whole);

#endif
