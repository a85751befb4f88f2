/* SPDX-License-Identifier: MIT */
/* The fleet store: many machines' profiles and kernels in one PostgreSQL database (libpq),
 * beside each machine's own SQLite file, which stays the only database a host thread ever
 * waits on. A machine pushes what its local file holds (finished runs with their
 * per-signature profiles, variants and events; the machine models; the kernel objects, tagged
 * with an HMAC-SHA256) and fetches the kernels other machines compiled for its CPU.
 *
 * Every function returns ST_OK (0) or a negative ST_E* code (store.h): ST_EIO for anything the
 * server or the network refused, with one sentence in err; a fleet handle is used by one thread
 * at a time. A run is keyed on the server by (machine, local run id): pushing it again changes
 * nothing, so a push that failed half-way is simply repeated. The local sync state lives in
 * the local file's meta table (no schema change): the machine's id ('fleet_machine') and the
 * last successful push ('fleet_push_ns'); the backlog is whatever finished local run the
 * server does not have, asked of the server at each push. */
#ifndef OPJIT_STORE_FLEET_H
#define OPJIT_STORE_FLEET_H

#include "store.h"

#include <stddef.h>
#include <stdint.h>

#define ST_FLEET_SCHEMA 2   /* the fleet schema this build creates and reads */
#define ST_FLEET_TAG_LEN 32 /* an HMAC-SHA256 tag */

typedef struct st_fleet_s st_fleet_t;

/* Connects to the fleet named by conninfo (a libpq key=value string or postgresql:// URI;
 * libpq's PG* environment and TLS settings apply), waiting timeout_ms at most for the
 * connection (libpq counts whole seconds, 2 at least) and for each statement, and creates or
 * upgrades the fleet schema. Refuses a schema newer than ST_FLEET_SCHEMA. */
int st_fleet_open(const char *conninfo, int timeout_ms, st_fleet_t **out, char *err, size_t errlen);
void st_fleet_close(st_fleet_t *f);
/* The server's version ("15.18"). */
const char *st_fleet_server_version(st_fleet_t *f);

/* This local file's machine id (32 hex digits), made and kept in its meta table the first
 * time it is asked for. */
int st_fleet_machine(st_db_t *local, char id[33]);

/* What a push sends and how much. */
typedef struct st_fleet_push_s {
  const char *hostname; /* the machine's name, for the readers */
  const void *key;      /* the HMAC key objects are tagged with; NULL: untagged (no machine
                            loads them) */
  size_t key_len;
  int redact;   /* command lines leave as the program and a count of its arguments */
  int max_runs; /* the newest finished local runs considered (the bounded backlog) */
  int batch;    /* runs per server transaction */
  void (*local_lock)(int hold); /* NULL, or the caller's lock (hold 1: take, 0: release): held
                                   over the push's local SQLite work, released over every round
                                   trip to the server (the agent's fork lock, ag_sqlite_lock) */
  /* out */
  int64_t runs;    /* runs pushed now */
  int64_t objects; /* kernel objects pushed now */
  int64_t backlog; /* finished local runs (among max_runs) the server still lacks */
} st_fleet_push_t;
/* Pushes local's machine models, every object the server lacks, then the finished runs
 * (status not 'running') among the newest max_runs the server lacks, oldest first, batch runs
 * per transaction, and records the push time in local's meta. A failure leaves what earlier
 * transactions committed; the rest is pushed next time. */
int st_fleet_push(st_fleet_t *f, st_db_t *local, st_fleet_push_t *p, char *err, size_t errlen);

/* What local knows of its pushes, without writing: its machine id ("" before the first push)
 * and the last successful push (CLOCK_REALTIME ns, 0: none). */
void st_fleet_local(st_db_t *local, char id[33], int64_t *push_ns);

/* The backlog alone: finished runs among local's newest max_runs that the server lacks. */
int st_fleet_backlog(st_fleet_t *f, st_db_t *local, int max_runs, int64_t *backlog);

/* A kernel another machine compiled, with the fleet's profile of the signature. */
typedef struct st_fleet_kernel_s {
  void *key; /* the raw signature key */
  size_t key_len;
  double score;    /* the fleet's decayed calls (store.h, st_profile's rule over the
                           program's runs on every machine) */
  double mean_ns;  /* the original's mean timed duration there (0: none) */
  int demoted_gen; /* the newest of those runs that had a variant for it demoted it: that
                      variant's generator version; 0 otherwise (st_hot_t's rule) */
  char cpu[320], llvm[64], symbol[160];
  int generator;
  uint64_t checksum;
  void *code; /* NULL: the fleet has no object of this signature for the cpu */
  size_t code_len;
  unsigned char tag[ST_FLEET_TAG_LEN];
  int tagged; /* the object carries a tag */
} st_fleet_kernel_t;
typedef struct st_fleet_kernels_s {
  int64_t runs; /* the fleet runs the profile was read from */
  size_t n;
  st_fleet_kernel_t *k; /* hottest first */
} st_fleet_kernels_t;
/* The fleet's profile of program (exe, build_id, script) over its newest max_runs runs on any
 * machine, each weighing 0.5^(age / decay_runs), with each signature's newest object for cpu
 * (the object key, machine.h). */
int st_fleet_kernels(st_fleet_t *f, const st_run_info_t *program, const char *cpu,
                     double decay_runs, int max_runs, st_fleet_kernels_t *out);
void st_fleet_kernels_free(st_fleet_kernels_t *k);

/* The HMAC-SHA256 tag of an object under key: over the signature key, cpu, generator, LLVM,
 * symbol and code, so a tag never vouches for other code or for another signature or CPU. */
void st_fleet_tag(const void *key, size_t key_len, const void *sig, size_t sig_len, const char *cpu,
                  int generator, const char *llvm, const char *symbol, const void *code,
                  size_t code_len, unsigned char tag[ST_FLEET_TAG_LEN]);
/* 1 when k's object carries a tag and it is k's under key (compared in constant time). */
int st_fleet_verify(const st_fleet_kernel_t *k, const void *key, size_t key_len);

/* The readers (opjit top|runs|variants --fleet): fn gets each row's columns as text (NULL for
 * SQL NULL), ncols of them, in the order of the query's contract below; it returns nonzero
 * to stop. */
typedef int (*st_fleet_row_fn)(void *ctx, int ncols, const char *const *cols);
enum st_fleet_query {
  /* summary: machines, runs, programs, kernel objects, last push of any machine (ns) */
  ST_FLEET_Q_SUMMARY,
  /* runs: id, machine (hostname), machine id, cpu, started (ns), duration (ns), status,
   * program, sigs, calls, samples; newest first */
  ST_FLEET_Q_RUNS,
  /* top: signature id, name, machines, cpus, runs, calls, mean ns (original), samples;
   * costliest first (calls x mean) */
  ST_FLEET_Q_TOP,
  /* variants: signature id, name, machine, cpu, status, origin, generator, llvm, calls,
   * mean ns (variant), original's mean ns; per machine and signature, newest run's */
  ST_FLEET_Q_VARIANTS,
};
int st_fleet_query(st_fleet_t *f, int query, int limit, st_fleet_row_fn fn, void *ctx, char *err,
                   size_t errlen);

/* The agent loads the fleet as its own shared object (libopjit-fleet.so, which links libpq,
 * libcrypto and its own copy of the store), from its threads, only when OPJIT_FLEET is set. */
typedef struct st_fleet_api_s {
  int abi; /* ST_FLEET_API_ABI */
  int (*open)(const char *conninfo, int timeout_ms, st_fleet_t **out, char *err, size_t len);
  void (*close)(st_fleet_t *f);
  int (*local_open)(const char *path, int flags, int busy_ms, st_db_t **out, char *err, size_t len);
  void (*local_close)(st_db_t *db);
  int (*push)(st_fleet_t *f, st_db_t *local, st_fleet_push_t *p, char *err, size_t len);
  int (*kernels)(st_fleet_t *f, const st_run_info_t *program, const char *cpu, double decay_runs,
                 int max_runs, st_fleet_kernels_t *out);
  void (*kernels_free)(st_fleet_kernels_t *k);
  int (*verify)(const st_fleet_kernel_t *k, const void *key, size_t key_len);
  const char *(*errmsg)(st_fleet_t *f); /* the connection's last error, one line */
} st_fleet_api_t;
#define ST_FLEET_API_ABI 2
#define ST_FLEET_API_SYMBOL "opjit_fleet_api"
#define ST_FLEET_MODULE_NAME "libopjit-fleet.so"

#endif
