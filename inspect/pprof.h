/* SPDX-License-Identifier: MIT */
/* pprof export: a sampled profile in Go's pprof format (profile.proto, gzip'ed), as `go tool
 * pprof`, Pyroscope and Parca read it. The encoder is a pure function from an in-memory
 * profile; ins_pprof_export fills one from a run's stored stacks (`opjit export --pprof`).
 * Allocation failures end the command (table.h). */
#ifndef OPJIT_INSPECT_PPROF_H
#define OPJIT_INSPECT_PPROF_H

#include <stddef.h>
#include <stdint.h>

/* One frame of a stack. Strings are never NULL ("" when not known). */
typedef struct ins_pprof_frame_s {
  const char *module;   /* the object's file name or path ("": no mapping) */
  const char *build_id; /* its GNU build-id in hex */
  uint64_t address;     /* the PC (0: not known) */
  const char *function;
  const char *file; /* source file */
  int64_t line;     /* source line (0: not known) */
} ins_pprof_frame_t;

/* One distinct stack with its sample count. */
typedef struct ins_pprof_sample_s {
  const ins_pprof_frame_t *frames; /* leaf first */
  size_t nframes;
  int64_t count;         /* samples (weighted as the sampler stores them) */
  const char *signature; /* the operator's signature id: label "signature" (NULL: none) */
  const char *operator;  /* its name: label "operator" (NULL: none) */
} ins_pprof_sample_t;

typedef struct ins_pprof_profile_s {
  const ins_pprof_sample_t *samples;
  size_t nsamples;
  int64_t period_ns;   /* CPU time one sample stands for (> 0) */
  int64_t time_ns;     /* when the profile began, CLOCK_REALTIME (0: not known) */
  int64_t duration_ns; /* its wall time (0: not known) */
  const char *comment; /* a line pprof shows with the profile (NULL: none) */
} ins_pprof_profile_t;

/* Encodes p as a gzip'ed perftools.profiles.Profile into *out (malloc'ed, *len bytes). Sample
 * types are samples/count and cpu/nanoseconds (count × period_ns), the latter the default;
 * the period type is cpu/nanoseconds. Identical modules (name and build-id) share a mapping,
 * identical functions (name and file) a function, identical frames a location; a mapping
 * claims has_functions. Returns 0, or -1 when zlib fails. */
int ins_pprof_encode(const ins_pprof_profile_t *p, unsigned char **out, size_t *len);

/* `opjit export --pprof`: writes run's sampled stacks (0: the newest run with some) from the
 * database named by dbopt (ins_db_path) to path, encoded by ins_pprof_encode: the samples
 * `opjit flame RUN` folds, a frame "module`symbol" split in two, operator samples labelled
 * with their signature and name, the executable's mapping carrying the program's build-id,
 * one sample standing for 1e9 / the run's sampling rate ns. Says what it wrote on stderr.
 * Returns 0, or INS_EXIT_FAIL (printed; also for a run without stacks). */
int ins_pprof_export(const char *dbopt, int64_t run, const char *path);

#endif
