/* SPDX-License-Identifier: MIT */
/* Where the agent library is: beside the `opjit` executable (build tree), else at the install
 * tree's library folder relative to it (INS_AGENT_RELDIR, fixed at configure time). */
#ifndef OPJIT_INSPECT_AGENTLIB_H
#define OPJIT_INSPECT_AGENTLIB_H

#include <stddef.h>

#define INS_AGENT_NAME "libopjit.so"

/* Writes the agent's absolute path into path and returns 0; or returns -1 and writes the
 * places searched, comma-separated, into searched. */
int ins_agent_find(char *path, size_t len, char *searched, size_t slen);

#endif
