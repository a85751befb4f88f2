/* SPDX-License-Identifier: MIT */
/* Output helpers of the `opjit` command: aligned text tables, human units and JSON documents.
 * Tables measure cells in characters (UTF-8 aware), right-align numeric columns and use no
 * colour unless stdout is a terminal. Allocation failures end the command (exit 1): the
 * command is short-lived and has nothing to degrade to. */
#ifndef OPJIT_INSPECT_TABLE_H
#define OPJIT_INSPECT_TABLE_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>

typedef struct ins_table_s ins_table_t;

/* malloc/strdup that end the command with "opjit: out of memory" (exit 1) instead of NULL. */
void *ins_xmalloc(size_t n);
char *ins_xstrdup(const char *s);
/* Array a of n elements of size bytes, grown (doubled, from 64) to hold one more when n has
 * reached *cap; out of memory exits as ins_xmalloc does. */
void *ins_grow(void *a, size_t n, size_t *cap, size_t size);

/* A table with ncols columns; spec holds one letter per column, 'l' (left) or 'r' (right). */
ins_table_t *ins_table_new(const char *spec, const char *const *headers);
/* A table of only the columns of spec (at most 32) whose bit is set in shown (bit c: column
 * c); headers and rows are still given whole, one cell per column of spec. */
ins_table_t *ins_table_new_shown(const char *spec, const char *const *headers, uint32_t shown);
/* Appends a row of ncols cells (copied; hidden columns' cells dropped); a NULL cell prints
 * empty. */
void ins_table_row(ins_table_t *t, const char *const *cells);
/* Attaches a note to the last row (copied; a second one replaces the first): printed under it,
 * indented, wrapped at word boundaries to fit INS_NOTE_WIDTH columns. */
#define INS_NOTE_WIDTH 100
void ins_table_note(ins_table_t *t, const char *note);
/* Prints the header and the rows to f, columns separated by two spaces; the last column is
 * not padded. */
void ins_table_print(const ins_table_t *t, FILE *f);
void ins_table_free(ins_table_t *t);

/* ---- human units: each writes into buf and returns it ---- */
/* 412 ns, 8.22 µs, 1.44 ms, 2.31 s; "-" when ns < 0. */
const char *ins_fmt_ns(double ns, char *buf, size_t len);
/* A wall-clock duration: 0.42 s, 12.3 s, 3m12s, 2h05m, 3d04h; "-" when ns < 0. */
const char *ins_fmt_duration(int64_t ns, char *buf, size_t len);
/* Local time of a CLOCK_REALTIME instant: 2025-11-29 14:03:12. */
const char *ins_fmt_time(int64_t ns, char *buf, size_t len);

/* ---- JSON ---- */
/* Routes cJSON's allocations through ins_xmalloc, so no cJSON call returns NULL for lack of
 * memory. Called once by main. */
void ins_json_init(void);
/* The JSON text s parsed, or a JSON string holding s when it does not parse. */
cJSON *ins_json_parse_or_string(const char *s);
/* Adds x to object o under key, or null when x < 0 (not measured). */
void ins_json_add_or_null(cJSON *o, const char *key, double x);
/* Prints doc (formatted) and a newline to stdout, then frees it. Returns 0, or 1 when the
 * document cannot be printed. */
int ins_json_emit(cJSON *doc);

#endif
