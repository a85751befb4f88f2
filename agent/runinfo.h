/* SPDX-License-Identifier: MIT */
/* What a run records about its process and machine: executable, build-id, argv, CPU.
 * Called on the writer thread only (it reads /proc). */
#ifndef OPJIT_AGENT_RUNINFO_H
#define OPJIT_AGENT_RUNINFO_H

#include <stddef.h>

typedef struct ag_runinfo_s {
  char exe[4096];
  char build_id[128];    /* hex, "" when the executable has none */
  char cmdline[65536];   /* NUL-separated argv, truncated at a whole argument */
  size_t cmdline_len;
  char cpu_model[256];
  char cpu_flags[4096];
  int ncpu;
} ag_runinfo_t;

/* Fills *ri; fields that cannot be read are left empty. */
void ag_runinfo_read(ag_runinfo_t *ri);

#endif
