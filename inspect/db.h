/* SPDX-License-Identifier: MIT */
/* Database access shared by the subcommands: the agent's path rule, opening with the store's
 * checks and a user-facing error, statements, and what a run row means (its status, its
 * program, its wall time). Functions that print do so to stderr as "opjit: ...". */
#ifndef OPJIT_INSPECT_DB_H
#define OPJIT_INSPECT_DB_H

#include "store/store.h"

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#define INS_READ_BUSY_MS 1000  /* readers wait this long for a writer */
#define INS_WRITE_BUSY_MS 5000 /* gc waits this long for the agents' writes */

/* getenv with the signature the agent's option parser wants (ag_getenv_fn). */
const char *ins_getenv(const char *name);

/* The database path: opt (--db) when given, else the agent's rule (OPJIT_DB, XDG_CACHE_HOME,
 * HOME). Returns 0, or -1 (with a message) when no path can be formed. */
int ins_db_path(const char *opt, char *buf, size_t len);

/* Opens the database named by opt (see ins_db_path) with st_open flags. Returns 0, or
 * INS_EXIT_FAIL after printing st_open's message. */
int ins_db_open(const char *opt, int flags, int busy_ms, st_db_t **db);

/* A prepared statement on db, or NULL after printing SQLite's message. */
sqlite3_stmt *ins_db_prepare(st_db_t *db, const char *sql);
/* Steps st after a loop over its rows: returns 0 when the last step was SQLITE_DONE, else
 * prints SQLite's message and returns INS_EXIT_FAIL. Finalizes st either way. */
int ins_db_finish(st_db_t *db, sqlite3_stmt *st, int last_rc);
/* Column i as text, "" when NULL. */
const char *ins_col_text(sqlite3_stmt *st, int i);

/* Whether run id exists; prints "opjit: no run ID in PATH" when it does not. Returns 1, 0,
 * or -1 on an SQLite error (printed). */
int ins_run_exists(st_db_t *db, int64_t id);

/* The status to show for a run row: "lost" for a run still marked running whose process is
 * gone (or whose pid now belongs to a process started after the run), else status itself. */
const char *ins_run_status(const char *status, int64_t pid, int64_t start_ns);
/* A run's wall time as recorded: end, else last flush, minus start (0 stands for NULL);
 * -1 when neither is known. */
int64_t ins_run_wall_ns(int64_t start_ns, int64_t flush_ns, int64_t end_ns);
/* "python3.11 -c import numpy…": exe's basename and argv[1..] (a JSON array), abbreviated
 * with "…" to at most width characters. */
void ins_program_label(const char *exe, const char *argv_json, int width, char *buf, size_t len);

#endif
