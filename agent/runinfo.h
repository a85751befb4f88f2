/* SPDX-License-Identifier: MIT */
/* What a run records about its process and machine: executable, build-id, argv, CPU, and
 * the program's identity for its profile across runs. Called on one thread at a time (it
 * reads /proc into static buffers). */
#ifndef OPJIT_AGENT_RUNINFO_H
#define OPJIT_AGENT_RUNINFO_H

#include <stddef.h>

typedef struct ag_runinfo_s {
  char exe[4096];
  char build_id[128];    /* hex, "" when the executable has none */
  char script[4096];     /* an interpreter's program: the script's real path ("-m module",
                            "-c" for python's forms), "" for other executables */
  char cpu_key[320];     /* the CPU compiled code is for: model name and a hash of its flags */
  char cmdline[65536];   /* NUL-separated argv, truncated at a whole argument */
  size_t cmdline_len;
  char cpu_model[256];
  char cpu_flags[4096];
  int ncpu;
} ag_runinfo_t;

/* Fills *ri; fields that cannot be read are left empty. */
void ag_runinfo_read(ag_runinfo_t *ri);

#endif
