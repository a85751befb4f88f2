/* SPDX-License-Identifier: MIT */
/* The option parser: one pass over AG_OPTIONS, each variable read and validated once. */
#include "opt.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const ag_opt_desc_t opt_descs[AG_OPT__COUNT] = {
#define AG_OPT_DESC_(name, kind, def, min, max, choices, help)                                \
  [AG_OPT_##name] = {#name, "OPJIT_" #name, AG_OK_##kind, def, min, max, choices, help},
    AG_OPTIONS(AG_OPT_DESC_)
#undef AG_OPT_DESC_
};

const ag_opt_desc_t *ag_opt_desc(int id)
{
  return id >= 0 && id < AG_OPT__COUNT ? &opt_descs[id] : NULL;
}

/* Index of word [s, s+n) among '|'-separated choices, or -1. */
static int choice_index(const char *choices, const char *s, size_t n)
{
  int i = 0;
  for (const char *c = choices; *c; i++) {
    size_t len = strcspn(c, "|");
    if (len == n && strncasecmp(c, s, n) == 0)
      return i;
    c += len;
    if (*c == '|')
      c++;
  }
  return -1;
}

static int parse_bool(const char *s, long *out)
{
  static const char *const yes[] = {"1", "on", "yes", "true"}, *const no[] = {"0", "off", "no", "false"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(s, yes[i]) == 0)
      return *out = 1, 0;
    if (strcasecmp(s, no[i]) == 0)
      return *out = 0, 0;
  }
  return -1;
}

static int parse_int(const char *s, long min, long max, long *out)
{
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || errno)
    return -1;
  int shift = 0;
  switch (toupper((unsigned char)*end)) {
  case 'K': shift = 10, end++; break;
  case 'M': shift = 20, end++; break;
  case 'G': shift = 30, end++; break;
  }
  if (*end || (v < 0 && shift) || v > (LONG_MAX >> shift))
    return -1;
  if (shift) /* v >= 0: a negative value with a suffix was refused */
    v <<= shift;
  if (v < min || v > max)
    return -1;
  *out = v;
  return 0;
}

static int parse_flags(const char *s, const char *choices, long *out)
{
  if (strcasecmp(s, "all") == 0)
    return *out = LONG_MAX, 0;
  if (!*s) /* as an empty OPJIT_MODE: not a silent "none" that turns interception off */
    return -1;
  if (strcasecmp(s, "none") == 0)
    return *out = 0, 0;
  long mask = 0;
  while (*s) {
    size_t n = strcspn(s, ",");
    int i = choice_index(choices, s, n);
    if (i < 0)
      return -1;
    mask |= 1L << i;
    s += n;
    if (*s == ',')
      s++;
  }
  *out = mask;
  return 0;
}

/* Parses text for option d into o; returns 0 or -1 when it is not a valid value. */
static int parse_value(ag_opts_t *o, int id, const char *s)
{
  const ag_opt_desc_t *d = &opt_descs[id];
  switch (d->kind) {
  case AG_OK_BOOL: return parse_bool(s, &o->num[id]);
  case AG_OK_INT: return parse_int(s, d->min, d->max, &o->num[id]);
  case AG_OK_FLAGS: return parse_flags(s, d->choices, &o->num[id]);
  case AG_OK_ENUM: {
    int i = choice_index(d->choices, s, strlen(s));
    return i < 0 ? -1 : (o->num[id] = i, 0);
  }
  default:
    free(o->str[id]);
    o->str[id] = strdup(s);
    return o->str[id] ? 0 : -1;
  }
}

static void describe_valid(const ag_opt_desc_t *d, char *buf, size_t len)
{
  switch (d->kind) {
  case AG_OK_BOOL: snprintf(buf, len, "expected 1/0/on/off/yes/no/true/false"); break;
  case AG_OK_INT: snprintf(buf, len, "expected an integer in [%ld, %ld]", d->min, d->max); break;
  case AG_OK_ENUM: snprintf(buf, len, "expected one of %s", d->choices); break;
  case AG_OK_FLAGS: snprintf(buf, len, "expected all, none or a comma list of %s", d->choices); break;
  default: snprintf(buf, len, "expected text"); break;
  }
}

int ag_opts_parse(ag_opts_t *o, ag_getenv_fn get, void (*report)(const char *line))
{
  int bad = 0;
  memset(o, 0, sizeof *o);
  for (int id = 0; id < AG_OPT__COUNT; id++) {
    const ag_opt_desc_t *d = &opt_descs[id];
    if (parse_value(o, id, d->def) != 0)
      abort(); /* a default that does not parse is a build defect, caught by the tests */
    const char *var = d->var, *s = get ? get(var) : NULL;
    if (!s)
      continue;
    if (parse_value(o, id, s) == 0) {
      o->from_env[id] = 1;
      continue;
    }
    parse_value(o, id, d->def);
    bad++;
    if (report) {
      char why[160], line[512];
      describe_valid(d, why, sizeof why);
      snprintf(line, sizeof line, "%s='%.200s' is not valid (%s); using the default '%s'", var, s,
               why, d->def);
      report(line);
    }
  }
  if (o->num[AG_OPT_TIME_EVERY] > 0) { /* round up to a power of two */
    long v = 1;
    while (v < o->num[AG_OPT_TIME_EVERY])
      v <<= 1;
    o->num[AG_OPT_TIME_EVERY] = v;
  }
  return bad;
}

/* name (up to its '=' or end) folded for a near match: upper case, underscores left out. */
static void fold_name(const char *name, char *out, size_t len)
{
  size_t n = 0;
  for (; *name && *name != '=' && n + 1 < len; name++)
    if (*name != '_')
      out[n++] = (char)toupper((unsigned char)*name);
  out[n] = 0;
}

int ag_opts_unknown(char *const *env, void (*report)(const char *line))
{
  int unknown = 0;
  for (; env && *env; env++) {
    const char *e = *env;
    size_t len = strcspn(e, "=");
    /* the tests' seams and scripts/fuzz.sh's folder (docs/fuzzing.md) are no options */
    if (strncasecmp(e, "OPJIT_", 6) != 0 || strncmp(e, "OPJIT_TEST_", 11) == 0 ||
        strncmp(e, "OPJIT_FUZZ_", 11) == 0)
      continue;
    int known = 0;
    char want[96], have[96], near[64] = "";
    fold_name(e, want, sizeof want);
    for (int id = 0; id < AG_OPT__COUNT && !known; id++) {
      const char *var = opt_descs[id].var;
      known = strlen(var) == len && strncmp(e, var, len) == 0;
      fold_name(var, have, sizeof have);
      if (!known && !near[0] && strcmp(want, have) == 0)
        snprintf(near, sizeof near, "%s", var);
    }
    if (known)
      continue;
    unknown++;
    if (report) {
      char line[256];
      snprintf(line, sizeof line, "%.*s is not an opjit option%s%s%s; ignored",
               (int)(len < 64 ? len : 64), e, near[0] ? " (did you mean " : "", near,
               near[0] ? "?)" : "");
      report(line);
    }
  }
  return unknown;
}

void ag_opts_free(ag_opts_t *o)
{
  for (int id = 0; id < AG_OPT__COUNT; id++) {
    free(o->str[id]);
    o->str[id] = NULL;
  }
}

/* Appends n bytes of s to buf (len bytes, room kept for the NUL), as many as fit. */
static void put(char *buf, size_t len, size_t *used, const char *s, size_t n)
{
  while (n-- && *used + 1 < len)
    buf[(*used)++] = *s++;
}

/* Copies conninfo (a libpq key=value string or URI) into buf (len > 0 bytes, cut to fit) with
 * its passwords as "***": a password= value (quoted or not, in either form) and a URI's
 * user:password@. A password is skipped before anything is written for it: a cut copy never
 * holds part of one. */
static void redact_conninfo(const char *c, char *buf, size_t len)
{
  size_t used = 0;
  const char *uri = strstr(c, "://");
  const char *at = uri ? strpbrk(uri + 3, "@/?") : NULL;
  const char *colon = at && *at == '@' ? memchr(uri + 3, ':', (size_t)(at - uri - 3)) : NULL;
  for (const char *p = c; *p && used + 1 < len;) {
    int key = (p == c || p[-1] == ' ' || p[-1] == '?' || p[-1] == '&') &&
              strncasecmp(p, "password=", 9) == 0;
    if (p == colon || key) {
      size_t n = key ? 9 : 1;
      put(buf, len, &used, p, n);
      p += n;
      if (key && *p == '\'')
        for (p++; *p && *p != '\''; p += p[0] == '\\' && p[1] ? 2 : 1)
          ;
      else
        p += key ? strcspn(p, " &") : (size_t)(at - p);
      p += key && *p == '\'';
      put(buf, len, &used, "***", 3);
      continue;
    }
    put(buf, len, &used, p++, 1);
  }
  buf[used] = 0;
}

void ag_opts_format(const ag_opts_t *o, int id, char *buf, size_t len)
{
  const ag_opt_desc_t *d = ag_opt_desc(id);
  if (!d || !len)
    return;
  long v = o->num[id];
  switch (d->kind) {
  case AG_OK_STR:
    if (id == AG_OPT_FLEET && o->str[id]) /* never a password in a run's record or doctor */
      redact_conninfo(o->str[id], buf, len);
    else
      snprintf(buf, len, "%s", o->str[id] ? o->str[id] : "");
    return;
  case AG_OK_BOOL:
  case AG_OK_INT: snprintf(buf, len, "%ld", v); return;
  default: break;
  }
  buf[0] = 0;
  size_t used = 0;
  int i = 0;
  for (const char *c = d->choices; *c; i++) {
    size_t n = strcspn(c, "|");
    int on = d->kind == AG_OK_ENUM ? v == i : (v >> i) & 1;
    if (on && used + n + 2 < len) {
      if (used)
        buf[used++] = ',';
      memcpy(buf + used, c, n);
      buf[used += n] = 0;
    }
    c += n;
    if (*c == '|')
      c++;
  }
  if (d->kind == AG_OK_FLAGS && !used)
    snprintf(buf, len, "none");
}

int ag_opts_db_path(const ag_opts_t *o, ag_getenv_fn get, char *buf, size_t len)
{
  const char *db = o->str[AG_OPT_DB];
  int n;
  if (db && *db)
    n = snprintf(buf, len, "%s", db);
  else {
    const char *xdg = get ? get("XDG_CACHE_HOME") : NULL, *home = get ? get("HOME") : NULL;
    if (xdg && xdg[0] == '/')
      n = snprintf(buf, len, "%s/opjit/profile.db", xdg);
    else if (home && *home)
      n = snprintf(buf, len, "%s/.cache/opjit/profile.db", home);
    else
      return -1;
  }
  return n < 0 || (size_t)n >= len ? -1 : 0;
}
