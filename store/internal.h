/* SPDX-License-Identifier: MIT */
/* What the store's files share and its API does not offer (mimalloc's _mi_ tier). */
#ifndef OPJIT_STORE_INTERNAL_H
#define OPJIT_STORE_INTERNAL_H

#include <sqlite3.h>

/* The ST_* code (store.h) for an SQLite result code: ST_OK for OK, ROW and DONE. */
int _st_code(int sqlite_rc);

/* Runs sql; the ST_* code, a full disk or quota as ST_EFULL. */
int _st_exec(sqlite3 *db, const char *sql);

#endif
