/* SPDX-License-Identifier: MIT */
/* Finding libopjit.so from /proc/self/exe: the build tree puts both in one folder, the install
 * tree puts the agent under <prefix>/<libdir>/opjit and the command under <prefix>/<bindir>. */
#include "agentlib.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef INS_AGENT_RELDIR
#error "INS_AGENT_RELDIR (bindir -> agent folder, relative) comes from inspect/CMakeLists.txt"
#endif

int ins_agent_find(char *path, size_t len, char *searched, size_t slen)
{
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    snprintf(searched, slen, "nowhere (/proc/self/exe is unreadable)");
    return -1;
  }
  exe[n] = 0;
  *strrchr(exe, '/') = 0; /* the kernel's path is absolute */
  const char *const dirs[] = {"", "/" INS_AGENT_RELDIR};
  size_t used = 0;
  searched[0] = 0;
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    char cand[PATH_MAX + 64];
    snprintf(cand, sizeof cand, "%s%s/%s", exe, dirs[i], INS_AGENT_NAME);
    char *real = realpath(cand, NULL);
    int ok = real && access(real, R_OK) == 0 && strlen(real) < len;
    if (ok)
      snprintf(path, len, "%s", real);
    free(real);
    if (ok)
      return 0;
    int w = snprintf(searched + used, slen - used, "%s%s", used ? ", " : "", cand);
    used += w > 0 && (size_t)w < slen - used ? (size_t)w : 0;
  }
  return -1;
}
