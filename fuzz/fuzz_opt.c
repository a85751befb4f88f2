/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the OPJIT_* option parser (agent/opt.h) on a hostile environment.
 * Input: lines NAME=value (the environment the parser reads through its getenv; NAME is the
 * whole variable, OPJIT_MODE, HOME, ...); fuzz/corpus/opt holds real option settings. Every
 * effective value must be within its option's bounds, and formatting and the database path
 * must stay within their buffers. */
#include "agent/opt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VARS 64

static char *names[MAX_VARS], *values[MAX_VARS];
static size_t nvars;

static const char *fuzz_getenv(const char *name)
{
  for (size_t i = nvars; i-- > 0;) /* the last setting wins, as in a real environment */
    if (strcmp(names[i], name) == 0)
      return values[i];
  return NULL;
}

static void ignore(const char *line)
{
  if (strlen(line) >= 512)
    __builtin_trap(); /* the parser promises one line of its own buffer */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = 0;
  nvars = 0;
  for (char *line = text, *next; line && nvars < MAX_VARS; line = next) {
    next = strchr(line, '\n');
    if (next)
      *next++ = 0;
    char *eq = strchr(line, '=');
    if (!eq)
      continue;
    *eq = 0;
    names[nvars] = line;
    values[nvars++] = eq + 1;
  }

  ag_opts_t o;
  ag_opts_parse(&o, fuzz_getenv, ignore);
  for (int id = 0; id < AG_OPT__COUNT; id++) {
    const ag_opt_desc_t *d = ag_opt_desc(id);
    if (d->kind == AG_OK_INT && (o.num[id] < d->min || o.num[id] > d->max))
      __builtin_trap();
    char buf[64];
    ag_opts_format(&o, id, buf, sizeof buf);
    if (!memchr(buf, 0, sizeof buf))
      __builtin_trap();
  }
  char path[256];
  if (ag_opts_db_path(&o, fuzz_getenv, path, sizeof path) == 0 && !memchr(path, 0, sizeof path))
    __builtin_trap();
  ag_opts_free(&o);
  free(text);
  return 0;
}
