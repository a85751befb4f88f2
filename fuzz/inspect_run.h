/* SPDX-License-Identifier: MIT */
/* What the inspect fuzzers share: a database file of their own and `opjit`'s readers run on
 * it. */
#ifndef OPJIT_FUZZ_INSPECT_RUN_H
#define OPJIT_FUZZ_INSPECT_RUN_H

/* Makes a folder of its own under $TMPDIR (else /tmp), removed at exit, and returns the
 * database path in it (static storage); aborts when it cannot. */
const char *fz_db_path(const char *name);

/* Reads the database at path with runs, top, variants, events and report, in text and JSON,
 * as `opjit CMD --db PATH` would (inspect/opjit.c's dispatcher), their output and messages
 * thrown away (sanitizer reports go to file descriptor 2 and still show). Traps when a command
 * returns anything but 0 or 1 (the lines given are the harness's: a usage error is its bug).
 * Then removes the file and its -wal, -shm and -journal. */
void fz_read_and_remove(const char *path);

#endif
