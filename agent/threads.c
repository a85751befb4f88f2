/* SPDX-License-Identifier: MIT */
/* The calls the sampler needs to see.
 *
 * pthread_create, so that a thread the host creates while sampling is on is armed from its
 * first instruction, and to note whether the host starts any (ag_host_threaded). It must work
 * before the agent's constructor has run (a library may start its pool from its own
 * constructor, earlier): it resolves the original lazily and, with sampling
 * off for good, is a plain pass-through. A thread created before sampling starts notes its
 * stack here all the same (the sampler's stack walker needs it) and is armed by the sampler's
 * start; threads missed here are armed by its rescan.
 *
 * dlclose, so that the sampler's stack walker is never inside an object while it is unmapped
 * (sp_unload_begin/end). glibc's own unloads (NSS, iconv modules) bypass this; the walker's
 * next refresh notices them. */
#define _GNU_SOURCE
#include "agent.h"
#include "sampler/sampler.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
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
  uint64_t token = sp_thread_begin();
  void *rv = t.start(t.arg);
  sp_thread_end(token); /* a thread that returns frees its descriptor now (pthread_exit: at
                           the sampler's next rescan) */
  return rv;
}

static _Atomic int host_threaded; /* the host has started a thread */

int ag_host_threaded(void) { return atomic_load_explicit(&host_threaded, memory_order_relaxed); }

AG_EXPORT int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*start)(void *),
                             void *arg)
{
  static create_fn real;
  if (!real && !(real = (create_fn)dlsym(RTLD_NEXT, "pthread_create")))
    return EAGAIN;
  if (!ag_host_threaded() && !ag_tl_starting) /* not one of the agent's (ag_agent_thread_create) */
    atomic_store_explicit(&host_threaded, 1, memory_order_relaxed);
  trampoline_t *t = sp_active() || sp_expected() ? malloc(sizeof *t) : NULL;
  if (!t)
    return real(th, attr, start, arg);
  t->start = start;
  t->arg = arg;
  int rc = real(th, attr, trampoline, t);
  if (rc)
    free(t);
  return rc;
}

AG_EXPORT int dlclose(void *handle)
{
  static int (*real)(void *);
  if (!real && !(real = (int (*)(void *))dlsym(RTLD_NEXT, "dlclose")))
    return -1;
  int began = sp_unload_begin();
  int rc = real(handle);
  sp_unload_end(began);
  return rc;
}
