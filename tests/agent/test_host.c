/* SPDX-License-Identifier: MIT */
/* The host table's boundary: no host is named in the agent's core (the .c and .h files of
 * agent/): the names of the host libraries, their functions and their types live in
 * agent/hosts/<host>* only; the core reaches a host through its row (host.h), and the rows
 * through the list the build generates (host_rows.h). Read from the sources the build compiles. */
#include "agent/host.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>

/* A host's name: its library, or a BLAS routine's name (precision letter + operator), in any
 * case. Operator families ("gemm", "dot") are the kernels' words and stay allowed. */
#define HOST_NAME "ggml|blas|llama|(^|[^a-z0-9_])[sdcz](gemm|gemv|axpy|dot|syrk)([^a-z0-9_]|$)"

/* The lines of dir's files ending in one of the suffixes that name a host, as "file:line: text"
 * into out (len bytes, cut); returns how many. */
static int named_lines(const char *dir, const char *const *suffixes, char *out, size_t len)
{
  regex_t re;
  cr_assert_eq(regcomp(&re, HOST_NAME, REG_EXTENDED | REG_ICASE | REG_NOSUB), 0);
  DIR *d = opendir(dir);
  cr_assert(d, "%s", dir);
  int found = 0;
  size_t used = 0;
  out[0] = 0;
  for (struct dirent *de; (de = readdir(d));) {
    size_t n = strlen(de->d_name);
    int wanted = 0;
    for (const char *const *s = suffixes; *s; s++)
      wanted |= n >= strlen(*s) && strcmp(de->d_name + n - strlen(*s), *s) == 0;
    if (!wanted)
      continue;
    char path[4096], line[4096];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    for (int no = 1; fgets(line, sizeof line, f); no++) {
      if (regexec(&re, line, 0, NULL, 0) != 0)
        continue;
      found++;
      if (used < len) {
        int w = snprintf(out + used, len - used, "%s:%d: %s", de->d_name, no, line);
        used += w > 0 ? (size_t)w : 0;
      }
    }
    fclose(f);
  }
  closedir(d);
  regfree(&re);
  return found;
}

Test(host, no_host_is_named_in_the_agent_core)
{
  static const char *const sources[] = {".c", ".h", NULL};
  char lines[8192];
  int n = named_lines(OPJIT_SOURCE_DIR "/agent", sources, lines, sizeof lines);
  cr_assert_eq(n, 0, "%d lines of agent/ name a host (its place is agent/hosts/):\n%s", n, lines);
}

Test(host, the_check_finds_every_hosts_own_name_in_its_files)
{
  /* The check above can fail: the same pattern finds each host in its own row's file. */
  for (size_t i = 0; i < ag_nhosts; i++) {
    char suffix[64], lines[256];
    snprintf(suffix, sizeof suffix, "%s_sig.c", ag_hosts[i]->name);
    const char *const sources[] = {suffix, NULL};
    cr_assert_gt(named_lines(OPJIT_SOURCE_DIR "/agent/hosts", sources, lines, sizeof lines), 0,
                 "%s", suffix);
  }
}

Test(host, rows_are_listed_in_the_order_of_the_OPJIT_HOSTS_words)
{
  const char *w = AG_HOST_WORDS;
  for (size_t i = 0; i < ag_nhosts; i++) {
    size_t n = strcspn(w, "|");
    cr_assert(strlen(ag_hosts[i]->name) == n && strncmp(w, ag_hosts[i]->name, n) == 0,
              "row %zu is %s, word %zu is %.*s", i, ag_hosts[i]->name, i, (int)n, w);
    cr_assert_eq(ag_hosts[i]->opt_bit, 1u << i, "%s", ag_hosts[i]->name);
    w += n + (w[n] == '|');
  }
  cr_assert_eq(*w, 0, "OPJIT_HOSTS has words beyond the rows: %s", w);
}
