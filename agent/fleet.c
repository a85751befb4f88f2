/* SPDX-License-Identifier: MIT */
/* The agent's side of the fleet (fleet.h): the module, the warm start's fetch and placement,
 * and the push thread. Entry points: ag_fleet_fetch, ag_fleet_place, ag_fleet_warm,
 * ag_fleet_start, ag_fleet_final. */
#define _GNU_SOURCE
#include "fleet.h"
#include "agent.h"
#include "log.h"
#include "machine.h"
#include "opt.h"
#include "tier.h"
#include "jit/jit.h"
#include "../store/fleet.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const st_fleet_api_t *api; /* the module, once loaded */
static int api_tried;
static pthread_mutex_t api_mu = PTHREAD_MUTEX_INITIALIZER;

/* The HMAC key, read once. */
static unsigned char hkey[4096];
static size_t hkey_len;
static int hkey_read;

/* The warm start's fetch (writer thread only). */
static st_fleet_kernels_t fetched;
static char fetched_cpu[336];
static st_fleet_t *spare; /* the fetch's connection, handed to the push thread */

/* The push thread. mu guards the rest. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond; /* CLOCK_MONOTONIC */
static pthread_t thread;
static pid_t started_pid; /* the process that started the thread (a fork child did not) */
static int final_asked, final_done;

static const char *fleet_conninfo(void)
{
  const char *c = ag_opts.str[AG_OPT_FLEET];
  return c && *c ? c : NULL;
}

/* The module; NULL (with one message) when it cannot be loaded. */
static const st_fleet_api_t *load(void)
{
  pthread_mutex_lock(&api_mu);
  if (!api_tried) {
    api_tried = 1;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", ag_self_dir(), ST_FLEET_MODULE_NAME);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const st_fleet_api_t *a = h ? dlsym(h, ST_FLEET_API_SYMBOL) : NULL;
    if (a && a->abi == ST_FLEET_API_ABI)
      api = a;
    else if (!h && access(path, F_OK) != 0)
      ag_log(AG_LOG_WARN, "OPJIT_FLEET is set but this opjit was built without the fleet store "
                          "(libpq and libcrypto, scripts/deps.sh): runs stay local");
    else
      ag_log(AG_LOG_WARN, "cannot load the fleet store %s (%s): runs stay local", path,
             h ? "wrong ABI" : dlerror());
  }
  pthread_mutex_unlock(&api_mu);
  return api;
}

/* The key OPJIT_FLEET_KEY names (trailing white space dropped); 0 when there is none. */
static size_t key(void)
{
  pthread_mutex_lock(&api_mu);
  const char *path = ag_opts.str[AG_OPT_FLEET_KEY];
  if (!hkey_read && path && *path) {
    FILE *f = fopen(path, "re");
    size_t n = f ? fread(hkey, 1, sizeof hkey, f) : 0;
    if (f)
      fclose(f);
    while (n && (hkey[n - 1] == '\n' || hkey[n - 1] == '\r' || hkey[n - 1] == ' '))
      n--;
    hkey_len = n;
    if (!n)
      ag_log(AG_LOG_WARN,
             "OPJIT_FLEET_KEY: %s %s: fleet kernels are neither tagged nor "
             "placed",
             path, f ? "is empty" : "cannot be read");
  }
  hkey_read = 1;
  pthread_mutex_unlock(&api_mu);
  return hkey_len;
}

static int wait_ms(void)
{
  long ms = ag_opts.num[AG_OPT_FLEET_WAIT_MS];
  return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* 1 while the fleet is out of reach and that was said: one warning an outage, whichever of
 * the warm start's fetch and the pushes met it first (the fleet thread's pushes, the writer's
 * or a host thread's fetch). */
static atomic_int unreachable;

/* ---- the warm start ---------------------------------------------------------------------- */

int ag_fleet_fetch(const ag_runinfo_t *ri)
{
  if (!fleet_conninfo() || !load())
    return 0;
  char err[512];
  int rc = api->open(fleet_conninfo(), wait_ms(), &spare, err, sizeof err);
  if (rc) {
    if (!atomic_exchange(&unreachable, 1)) /* the pushes' warning too: one for the outage */
      ag_log(AG_LOG_WARN, "%s: the run starts from the local profile alone; its runs stay in "
                          "the local database and are pushed when the fleet is back", err);
    return 0;
  }
  if (!ag_opts.num[AG_OPT_FLEET_KERNELS])
    return 0;
  st_run_info_t prog = {.exe = ri->exe, .build_id = ri->build_id, .script = ri->script};
  long decay = ag_opts.num[AG_OPT_DECAY];
  int window = decay * 8 < 256 ? (int)decay * 8 : 256; /* as warm.c reads the local profile */
  ag_machine_object_key(ri->cpu_key, ri->cpu_flags, fetched_cpu, sizeof fetched_cpu);
  if (api->kernels(spare, &prog, fetched_cpu, (double)decay, window, &fetched))
    ag_log(AG_LOG_WARN,
           "cannot read the fleet's profile (%s): the run starts from the local "
           "profile alone",
           api->errmsg(spare));
  else if (fetched.n)
    ag_log(AG_LOG_INFO, "the fleet's profile of this program: %zu signatures from %lld runs",
           fetched.n, (long long)fetched.runs);
  return fetched.n > 0;
}

static const st_fleet_kernel_t *find(const ag_entry_t *e)
{
  for (size_t i = 0; i < fetched.n; i++)
    if (fetched.k[i].key_len == sizeof e->key && !memcmp(fetched.k[i].key, &e->key, sizeof e->key))
      return &fetched.k[i];
  return NULL;
}

int ag_fleet_place(ag_entry_t *e)
{
  const st_fleet_kernel_t *k = find(e);
  if (!k || !k->code || atomic_load(&e->tier) != AG_TIER_COLD)
    return 0;
  char why[700], err[256];
  if (!key()) {
    ag_log_once(AG_LOG_INFO, "the fleet has kernels for this CPU, but no OPJIT_FLEET_KEY to "
                             "check them with: they are compiled here");
    return 0;
  }
  if (!k->tagged || !api->verify(k, hkey, hkey_len)) {
    ag_tier_refuse(e, "tag: the fleet's kernel (%zu bytes) %s", k->code_len,
                   k->tagged ? "has a tag this key did not make (another key, or altered code)"
                             : "has no tag");
    return 0;
  }
  if (ag_warm_unusable(k->cpu, k->generator, k->llvm, k->code, k->code_len, k->checksum,
                       fetched_cpu, why, sizeof why)) {
    ag_tier_refuse(e, "%s", why);
    return 0;
  }
  int rc = ag_tier_load(e, k->code, k->code_len, k->symbol, NULL, err, sizeof err);
  if (rc < 0 && atomic_load(&e->tier) == AG_TIER_COLD)
    ag_tier_refuse(e, "unloadable: %s", err);
  return rc == 0;
}

void ag_fleet_warm(ag_warm_t *w)
{
  for (size_t i = 0; i < fetched.n; i++) {
    const st_fleet_kernel_t *k = &fetched.k[i];
    if (k->key_len != sizeof(ag_sig_t) || k->score < AG_WARM_DECAYED_BELOW)
      continue;
    ag_entry_t probe;
    memcpy(&probe.key, k->key, sizeof probe.key);
    /* A kernel of this generator measured slower than the original in the fleet's newest run
     * that had one: not compiled here either (a placed kernel is still judged in this run). */
    int hot =
        ag_tier_profile_hot(&probe, k->score, k->mean_ns) && k->demoted_gen != JT_GENERATOR_VERSION;
    if (!k->code && !hot)
      continue;
    ag_entry_t *e = ag_table_get(ag_table, &probe.key);
    if (!e)
      break; /* the table is full */
    if (atomic_load(&e->tier) != AG_TIER_COLD)
      continue; /* the local profile served it */
    if (ag_fleet_place(e)) {
      w->loaded++;
    } else if (hot) {
      ag_tier_queue(e, "warm: the fleet's profile makes it hot");
      w->queued += atomic_load(&e->tier) == AG_TIER_QUEUED;
    }
  }
  if (fetched.n && api)
    api->kernels_free(&fetched);
}

/* ---- pushes ------------------------------------------------------------------------------ */

/* The fork lock (agent.h) as the push takes it: over its local SQLite work, never over a round
 * trip to the server (st_fleet_push_t.local_lock). */
static void sqlite_hold(int hold)
{
  if (hold)
    ag_sqlite_lock();
  else
    ag_sqlite_unlock();
}

/* One push: connects (and opens the local file) when needed. Returns 0, or -1 after a failure
 * (warned about once per outage, unreachable). */
static int push(st_fleet_t **f, st_db_t **local, const char *dbpath)
{
  char err[512] = "";
  int rc = 0;
  if (!*local) {
    ag_sqlite_lock();
    rc = api->local_open(dbpath, 0, (int)ag_opts.num[AG_OPT_BUSY_MS], local, err, sizeof err);
    ag_sqlite_unlock();
  }
  if (rc == ST_ENOENT || rc == ST_ENOTOURS || rc == ST_EBUSY)
    return 0; /* the writer has not created it yet, or is creating it now (the writer warns
                 about a file that is not a profile) */
  if (!rc && !*f)
    rc = api->open(fleet_conninfo(), wait_ms(), f, err, sizeof err);
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  size_t klen = key();
  st_fleet_push_t p = {.hostname = host,
                       .key = klen ? hkey : NULL,
                       .key_len = klen,
                       .redact = (int)ag_opts.num[AG_OPT_FLEET_REDACT],
                       .max_runs = (int)ag_opts.num[AG_OPT_FLEET_BACKLOG],
                       .batch = 16,
                       .local_lock = sqlite_hold};
  if (!rc)
    rc = api->push(*f, *local, &p, err, sizeof err);
  if (!rc) {
    if (p.runs || p.objects)
      ag_log(AG_LOG_INFO, "pushed %lld runs and %lld kernels to the fleet", (long long)p.runs,
             (long long)p.objects);
    if (atomic_exchange(&unreachable, 0))
      ag_log(AG_LOG_INFO, "the fleet is back: the backlog was pushed");
    return 0;
  }
  if (!atomic_exchange(&unreachable, 1))
    ag_log(AG_LOG_WARN,
           "%s: runs stay in the local database and are pushed when the fleet is "
           "back",
           err);
  if (*f)
    api->close(*f); /* a broken connection is made again at the next push */
  *f = NULL;
  return -1;
}

static void *fleet_main(void *arg)
{
  (void)arg;
  ag_agent_thread_begin("opjit-fleet");
  char dbpath[PATH_MAX];
  st_fleet_t *f = spare;
  st_db_t *local = NULL;
  spare = NULL;
  int have_path = ag_opts_db_path(&ag_opts, (ag_getenv_fn)getenv, dbpath, sizeof dbpath) == 0;
  long period = ag_opts.num[AG_OPT_FLEET_PUSH_MS];
  pthread_mutex_lock(&mu);
  for (;;) {
    int final = final_asked;
    pthread_mutex_unlock(&mu);
    if (have_path)
      push(&f, &local, dbpath);
    pthread_mutex_lock(&mu);
    if (final) {
      final_done = 1;
      pthread_cond_broadcast(&cond);
      break;
    }
    struct timespec dl = ag_deadline_after(CLOCK_MONOTONIC, period);
    while (!final_asked && pthread_cond_timedwait(&cond, &mu, &dl) != ETIMEDOUT)
      ;
  }
  pthread_mutex_unlock(&mu);
  if (local) {
    ag_sqlite_lock();
    api->local_close(local);
    ag_sqlite_unlock();
  }
  if (f)
    api->close(f);
  return NULL;
}

void ag_fleet_start(void)
{
  if (!fleet_conninfo() || started_pid == getpid() || !load())
    return;
  if (started_pid) { /* a fork child: the parent's thread and connection are not ours */
    pthread_mutex_init(&mu, NULL);
    spare = NULL;
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&cond, &ca);
  pthread_condattr_destroy(&ca);
  final_asked = final_done = 0;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread never takes a host signal */
  if (ag_agent_thread_create(&thread, NULL, fleet_main, NULL) == 0)
    started_pid = getpid();
  else
    ag_log(AG_LOG_WARN, "cannot start the fleet thread: runs stay local");
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void ag_fleet_final(void)
{
  if (started_pid != getpid())
    return;
  long ms = ag_opts.num[AG_OPT_FLEET_WAIT_MS], exit_ms = ag_opts.num[AG_OPT_EXIT_WAIT_MS] / 2;
  long wait = ms < exit_ms ? ms : exit_ms;
  struct timespec dl = ag_deadline_after(CLOCK_MONOTONIC, wait);
  pthread_mutex_lock(&mu);
  final_asked = 1;
  pthread_cond_broadcast(&cond);
  while (!final_done && pthread_cond_timedwait(&cond, &mu, &dl) != ETIMEDOUT)
    ;
  int done = final_done;
  pthread_mutex_unlock(&mu);
  if (done) { /* an exec that fails starts the writer, and with it the thread, again */
    pthread_join(thread, NULL);
    started_pid = 0;
  } else {
    ag_log(AG_LOG_INFO, "the fleet's final push did not finish within %ld ms: what it did not "
           "send stays in the local database for a later run to push", wait);
  }
}
