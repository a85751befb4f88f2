/* SPDX-License-Identifier: MIT */
/* The aggregator: turns drained samples into what the store keeps per operator: samples, a
 * histogram of the symbols the PCs fell in, folded stacks and counter totals. Symbols (module
 * path + the symbol holding the PC) come from the object's .symtab, .dynsym or separate debug
 * file (libelf and libdw, when installed: else dladdr's dynamic symbols), each table searched
 * in place for an object's first functions, then sorted once and searched by address; names
 * are cached per PC and per symbol extent. Runs on the writer thread
 * only (an aggregation is used by one thread at a time).
 * Operators are opaque numbers here (the agent's entry index + 1; 0 = outside any operator). */
#ifndef OPJIT_SAMPLER_AGGREGATE_H
#define OPJIT_SAMPLER_AGGREGATE_H

#include "sampler.h"

typedef struct sp_agg_s sp_agg_t;

/* A new, empty aggregation; NULL when out of memory. */
sp_agg_t *sp_agg_new(void);
void sp_agg_free(sp_agg_t *a);

/* Declares the module holding addr (an original operator's code) as an operator module. A
 * sample attributed through the in-flight operators (SP_F_POOL) whose PC is outside every
 * operator module is the program's own time, not the operator's. Modules whose file name
 * contains "blas", "lapack", "blis" or "mkl" are operator modules too. */
void sp_agg_operator_module(sp_agg_t *a, const void *addr);

/* Names PCs in code no module holds (JIT kernels): lookup returns 1 with the code's extent and
 * name. Such PCs are attributed to module "[jit]" and count as operator code. generation (or
 * NULL) returns a number that changes whenever code is added to or removed from what lookup
 * knows: sp_agg_add then forgets the names it cached for PCs outside every module, so a kernel
 * placed where a freed one was is named as itself, not as the freed one. */
typedef int (*sp_code_lookup_fn)(uint64_t pc, uint64_t *lo, uint64_t *hi, const char **name);
typedef uint64_t (*sp_code_gen_fn)(void);
void sp_agg_code_lookup(sp_agg_t *a, sp_code_lookup_fn lookup, sp_code_gen_fn generation);

/* How the symbol tables are searched. Every way names a PC alike (tests compare them); they
 * differ in what the first lookups cost. */
enum sp_agg_tables {
  SP_TABLES_AUTO,     /* in place (libelf) for an object's first lookups, then sorted (default) */
  SP_TABLES_SORTED,   /* sorted at an object's first lookup */
  SP_TABLES_IN_PLACE, /* in place, never sorted (where libelf reads the table as dwfl would) */
  SP_TABLES_DWFL,     /* every table read through libdw's dwfl and sorted at once */
};
void sp_agg_tables(sp_agg_t *a, enum sp_agg_tables how);

/* Merges n samples; ncounters counter values per sample are summed. */
void sp_agg_add(sp_agg_t *a, const sp_sample_t *s, size_t n, int ncounters);

/* Everything merged so far, by callback (strings valid until sp_agg_free). */
typedef struct sp_agg_visit_s {
  void *ctx;
  void (*op)(void *ctx, uint32_t op, uint64_t samples);
  void (*pc)(void *ctx, uint32_t op, const char *module, const char *symbol, uint64_t samples);
  void (*stack)(void *ctx, uint32_t op, const char *folded, uint64_t samples);
  void (*counter)(void *ctx, uint32_t op, int counter, uint64_t value);
} sp_agg_visit_t;
void sp_agg_visit(sp_agg_t *a, const sp_agg_visit_t *v);

/* The folded frame name of a module path and symbol: "basename`symbol", with ';', spaces and
 * newlines replaced by '_' (folded-stack readers split on them). */
void sp_frame_name(const char *module, const char *symbol, char *out, size_t len);

#endif
