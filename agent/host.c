/* SPDX-License-Identifier: MIT */
/* The host table (host.h), collected from the rows the build lists (host_rows.h), and the
 * naming functions' shared append. */
#include "host.h"

#include <stdarg.h>
#include <stdio.h>

#define AG_HOST_DECLARE_(name) extern const ag_host_t ag_host_##name;
AG_HOST_ROWS(AG_HOST_DECLARE_)
#undef AG_HOST_DECLARE_

const ag_host_t *const ag_hosts[] = {
#define AG_HOST_ROW_(name) &ag_host_##name,
    AG_HOST_ROWS(AG_HOST_ROW_)
#undef AG_HOST_ROW_
};
const size_t ag_nhosts = sizeof ag_hosts / sizeof *ag_hosts;

const ag_host_t *ag_host_of(unsigned id)
{
  for (size_t i = 0; i < ag_nhosts; i++)
    if (ag_hosts[i]->id == id)
      return ag_hosts[i];
  return NULL;
}

void ag_appendf(char **at, char *end, const char *fmt, ...)
{
  if (*at >= end)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(*at, (size_t)(end - *at), fmt, ap);
  va_end(ap);
  *at += n < 0 ? 0 : n < end - *at ? n : end - *at;
}
