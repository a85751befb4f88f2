/* SPDX-License-Identifier: MIT */
/* Signature naming: each key is named by its host's row (host.h). */
#include "sig.h"
#include "host.h"

#include <stdio.h>

const char *ag_sig_opname(const ag_sig_t *s, char *buf, size_t len)
{
  const ag_host_t *h = ag_host_of(s->host);
  if (h)
    return h->opname(s, buf, len);
  snprintf(buf, len, "host#%u", s->host);
  return buf;
}

void ag_sig_format(const ag_sig_t *s, char *buf, size_t len)
{
  const ag_host_t *h = ag_host_of(s->host);
  if (h)
    h->format(s, buf, len);
  else
    snprintf(buf, len, "host#%u op#%u", s->host, s->op);
}

void ag_sig_params_json(const ag_sig_t *s, char *buf, size_t len)
{
  const ag_host_t *h = ag_host_of(s->host);
  if (h)
    h->params_json(s, buf, len);
  else
    snprintf(buf, len, "{\"host\":%u,\"op\":%u}", s->host, s->op);
}
