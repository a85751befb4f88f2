/* SPDX-License-Identifier: MIT */
/* What the unit tests on real files share: a fresh folder under /tmp for each test (a Criterion
 * suite's .init and .fini), the store opened in it, and integers read from it. Every function
 * fails the test through Criterion's assertions rather than return an error. */
#ifndef OPJIT_TESTS_COMMON_FIXTURE_H
#define OPJIT_TESTS_COMMON_FIXTURE_H

#include "store/store.h"

extern char fx_dir[64]; /* this test's folder, /tmp/opjit-test-XXXXXX */
extern char fx_db[128]; /* fx_dir/p.db: a store file (not created until opened) */

/* Makes fx_dir and names fx_db: TestSuite(name, .init = fx_setup, .fini = fx_teardown). */
void fx_setup(void);
/* Removes fx_dir with everything in it. */
void fx_teardown(void);

/* Opens the store file at path with flags (store.h, ST_OPEN_*; 1 s busy timeout); fails the test
 * with the store's sentence unless it opened. */
st_db_t *fx_open(const char *path, int flags);
/* The first column of sql's first row on db as an integer, -1 when it has no row; fails the test
 * when sql does not prepare. */
int64_t fx_query(st_db_t *db, const char *sql);
/* Damages the root page of table in the SQLite file at path (its WAL checkpointed into it first):
 * a b-tree page header SQLite refuses ("database disk image is malformed"). */
void fx_damage_root(const char *path, const char *table);

#endif
