/* SPDX-License-Identifier: MIT */
/* pthread_create, interposed so that a thread the host creates while sampling is on is armed
 * from its first instruction. It must work before the agent's constructor has run (OpenBLAS
 * starts its pool from its own constructor, earlier): it resolves the original lazily and,
 * with sampling off, is a plain pass-through. Threads missed here are armed by the sampler's
 * rescan. */
#define _GNU_SOURCE
#include "agent.h"
#include "sampler/sampler.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

typedef struct trampoline_s {
  void *(*start)(void *);
  void *arg;
} trampoline_t;

static void *trampoline(void *p)
{
  trampoline_t t = *(trampoline_t *)p;
  free(p);
  sp_arm_self();
  void *rv = t.start(t.arg);
  sp_disarm_self(); /* a thread that returns frees its descriptor now (pthread_exit: at the
                       sampler's next rescan) */
  return rv;
}

AG_EXPORT int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*start)(void *),
                             void *arg)
{
  static create_fn real;
  if (!real && !(real = (create_fn)dlsym(RTLD_NEXT, "pthread_create")))
    return EAGAIN;
  trampoline_t *t = sp_active() ? malloc(sizeof *t) : NULL;
  if (!t)
    return real(th, attr, start, arg);
  t->start = start;
  t->arg = arg;
  int rc = real(th, attr, trampoline, t);
  if (rc)
    free(t);
  return rc;
}
