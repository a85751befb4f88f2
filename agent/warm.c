/* SPDX-License-Identifier: MIT */
/* The warm start (warm.h). */
#include "warm.h"
#include "agent.h"
#include "fleet.h"
#include "host.h"
#include "log.h"
#include "machine.h"
#include "opt.h"
#include "tier.h"
#include "jit/jit.h"
#include "jit/objload.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef OPJIT_LLVM_VERSION
#define OPJIT_LLVM_VERSION "none" /* built without the JIT: no object is ever usable */
#endif

const char *ag_warm_unusable(const char *cpu, int generator, const char *llvm,
                             const void *code, size_t code_len, uint64_t checksum,
                             const char *key, char *why, size_t len)
{
  if (strcmp(cpu, key) != 0)
    snprintf(why, len, "cpu: built for %s, this machine is %s", cpu, key);
  else if (generator != JT_GENERATOR_VERSION)
    snprintf(why, len, "generator: built by generator version %d, this agent's is %d",
             generator, JT_GENERATOR_VERSION);
  else if (strcmp(llvm, OPJIT_LLVM_VERSION) != 0)
    snprintf(why, len, "llvm: built with LLVM %s, this agent's JIT uses %s", llvm,
             OPJIT_LLVM_VERSION);
  else if (jt_obj_checksum(code, code_len) != checksum)
    snprintf(why, len, "checksum: the stored object (%zu bytes) is damaged", code_len);
  else
    return NULL;
  return why;
}

/* Why h's object cannot be placed here, or NULL when it can. */
static const char *unusable(const st_hot_t *h, const char *key, char *why, size_t len)
{
  return ag_warm_unusable(h->cpu, h->generator, h->llvm, h->code, h->code_len, h->checksum, key,
                          why, len);
}

/* A key whose calls run as another's until its kernel is there (host.h, stands_in) is hot when
 * either profile says so. */
static int hot_through_stand_in(const st_profile_t *p, const ag_sig_t *k)
{
  const ag_host_t *host = ag_host_of(k->host);
  ag_entry_t probe;
  if (!host || !host->stands_in || !host->stands_in(k, &probe.key))
    return 0;
  for (size_t i = 0; i < p->n; i++)
    if (p->sigs[i].key_len == sizeof probe.key && !memcmp(p->sigs[i].key, &probe.key, sizeof probe.key))
      return ag_tier_profile_hot(&probe, p->sigs[i].score, p->sigs[i].mean_ns);
  return 0;
}

/* Whether the profile's signature h is hot: compiling it would pay back. */
static int hot(const st_profile_t *p, const st_hot_t *h)
{
  ag_entry_t probe;
  memcpy(&probe.key, h->key, sizeof probe.key);
  return ag_tier_profile_hot(&probe, h->score, h->mean_ns) || hot_through_stand_in(p, &probe.key);
}

/* h's signature (entry e) gets no stored kernel: a hot one takes the fleet's, or is queued. */
static void compile(const st_hot_t *h, ag_entry_t *e, ag_warm_t *w)
{
  if (ag_fleet_place(e)) { /* another machine compiled it */
    w->loaded++;
    return;
  }
  char why[96];
  snprintf(why, sizeof why, "warm: the profile weighs its calls at %.0f", h->score);
  ag_tier_queue(e, why);
  w->queued += atomic_load(&e->tier) == AG_TIER_QUEUED;
}

/* h's stored object could not be placed for entry e, for the reason in why: invalidated
 * (still COLD: neither full nor demoted) and compiled again when hot. */
static void unplaced(const st_profile_t *p, const st_hot_t *h, ag_entry_t *e, const char *why,
                     ag_warm_t *w)
{
  if (atomic_load(&e->tier) != AG_TIER_COLD)
    return; /* not compilable with these options */
  ag_tier_invalidate(e, "%s", why);
  w->invalidated++;
  if (hot(p, h))
    compile(h, e, w);
}

/* The stored objects the profile may place: a batch sized for all of them, or NULL (one by
 * one then). */
static ag_tier_batch_t *batch_for(const st_profile_t *p)
{
  size_t n = 0, bytes = 0;
  char err[128];
  for (size_t i = 0; i < p->n; i++) {
    const st_hot_t *h = &p->sigs[i];
    long size = h->object_id && h->code ? jt_obj_size(h->code, h->code_len, err, sizeof err) : -1;
    if (size > 0)
      n++, bytes += (size_t)size;
  }
  return n ? ag_tier_batch_new(n, bytes) : NULL;
}

/* The keys of the signatures the database had a kernel for on this machine (and this generator
 * and LLVM) at the warm start (st_shelf: memcmp order), set once: shelf_n before the pointer
 * (release). */
static const ag_sig_t *_Atomic shelf;
static size_t shelf_n;

static int key_cmp(const void *a, const void *b) { return memcmp(a, b, sizeof(ag_sig_t)); }

int ag_warm_shelved(const ag_sig_t *key)
{
  const ag_sig_t *s = atomic_load_explicit(&shelf, memory_order_acquire);
  return s && bsearch(key, s, shelf_n, sizeof *s, key_cmp) != NULL;
}

void ag_warm_read_shelf(const st_api_t *store, st_db_t *db, const ag_runinfo_t *ri)
{
  char key[336]; /* what this run's kernels are stored under (machine.h) */
  ag_machine_object_key(ri->cpu_key, ri->cpu_flags, key, sizeof key);
  void *keys;
  size_t n;
  if (atomic_load_explicit(&shelf, memory_order_acquire))
    return;
  int rc = store->shelf(db, key, JT_GENERATOR_VERSION, OPJIT_LLVM_VERSION, sizeof(ag_sig_t),
                        &keys, &n);
  if (rc) {
    ag_log(AG_LOG_DEBUG, "cannot list the stored kernels (%s): signatures are charged a compile",
           store->errstr(rc));
    return;
  }
  if (!keys)
    return;
  shelf_n = n;
  atomic_store_explicit(&shelf, (const ag_sig_t *)keys, memory_order_release); /* kept */
}

int ag_warm_stored(const st_api_t *store, st_db_t *db, const ag_runinfo_t *ri, ag_entry_t *e,
                   st_hot_t *h)
{
  char key[336], why[700];
  ag_machine_object_key(ri->cpu_key, ri->cpu_flags, key, sizeof key);
  int rc = store->object(db, &e->key, sizeof e->key, key, h);
  if (rc) {
    ag_log(AG_LOG_DEBUG, "cannot look up a stored kernel (%s): it is compiled",
           store->errstr(rc));
    return -1;
  }
  if (!h->object_id)
    return 0; /* gone since the shelf was read */
  if (unusable(h, key, why, sizeof why)) {
    ag_tier_refuse(e, "its stored kernel is not placed (%s): compiled", why);
    return 0;
  }
  return 1;
}

int ag_warm_place(ag_entry_t *e, const st_hot_t *h)
{
  char err[256] = "";
  int placed = ag_tier_load_queued(e, h->code, h->code_len, h->symbol,
                                   h->has_judge ? &h->judge : NULL, err, sizeof err);
  if (placed < 0)
    ag_tier_refuse(e, "its stored kernel is not placed (unloadable: %s): compiled", err);
  return placed;
}

void ag_warm_start(const st_api_t *store, st_db_t *db, const ag_runinfo_t *ri, ag_warm_t *w)
{
  memset(w, 0, sizeof *w);
  st_run_info_t prog = {.exe = ri->exe, .build_id = ri->build_id, .script = ri->script,
                        .cpu_model = ri->cpu_model, .cpu_flags = ri->cpu_flags};
  long decay = ag_opts.num[AG_OPT_DECAY];
  /* Runs older than 8 half-lives weigh under 1/256: not worth reading. */
  int window = decay * 8 < 256 ? (int)decay * 8 : 256;
  st_profile_t p;
  char key[336]; /* what this run's kernels are stored under (machine.h) */
  ag_machine_object_key(ri->cpu_key, ri->cpu_flags, key, sizeof key);
  int rc = store->profile(db, &prog, key, (double)decay, window, &p);
  if (rc) {
    w->damaged = rc == ST_ECORRUPT;
    if (!w->damaged)
      ag_log(AG_LOG_WARN, "cannot read this program's profile (%s): the run starts cold",
             store->errstr(rc));
    return;
  }
  w->runs = p.runs;
  /* The stored kernels go into one mapping made executable once, and are published together
   * (hottest first: the profile's order) once all are placed. */
  size_t *batched = calloc(p.n ? p.n : 1, sizeof *batched); /* the batch's, by profile index */
  size_t nbatched = 0;
  int table_full = 0;
  ag_tier_batch_t *batch = batched ? batch_for(&p) : NULL;
  for (size_t i = 0; i < p.n; i++) {
    const st_hot_t *h = &p.sigs[i];
    if (h->key_len != sizeof(ag_sig_t))
      continue; /* another agent version's key */
    ag_entry_t probe;
    memcpy(&probe.key, h->key, sizeof probe.key);
    /* Placing a stored kernel costs microseconds, not a compile: any signature the profile
     * still calls gets its kernel back. Only one whose calls have decayed below a single
     * call's weight has stopped being called; compiling still takes the payback test. */
    int called = h->score >= AG_WARM_DECAYED_BELOW;
    /* Not called: only an object this program stored, for this CPU, is this profile's to drop
     * (another program may still want a shared kernel). */
    int ours = h->object_id && h->mine && strcmp(h->cpu, key) == 0;
    if (!called && !ours)
      continue;
    if (called && !h->object_id && h->demoted_gen != JT_GENERATOR_VERSION && !hot(&p, h))
      continue;
    ag_entry_t *e = ag_table_get(ag_table, &probe.key);
    if (!e) {
      table_full = 1;
      break;
    }
    if (called) /* what its library's calls cost, for its queue (tier.h) */
      ag_tier_profile_mean(e, h->mean_ns);
    char why[700], err[256];
    if (!called) {
      ag_tier_invalidate(e, "decayed: not called in this program's recent runs (its calls "
                            "weigh %.2f)", h->score);
      w->invalidated++;
      continue;
    }
    /* This generator's kernel lost to the original on this machine in the last run that had
     * one, or crashed the program: neither placed nor compiled again (a new generator gets its
     * own trial). */
    if (h->demoted_gen == JT_GENERATOR_VERSION) {
      if (h->crashed)
        ag_tier_crashed(e, 0, "its kernel by generator %d crashed the program in an earlier run "
                        "on this machine: the original serves until the generator changes",
                        JT_GENERATOR_VERSION);
      else
        ag_tier_keep_original(e);
      continue;
    }
    if (!h->object_id) {
      compile(h, e, w);
      continue;
    }
    if (unusable(h, key, why, sizeof why)) {
      unplaced(&p, h, e, why, w);
      continue;
    }
    const st_judge_pool_t *pl = h->has_judge ? &h->judge : NULL;
    int placed = batch ? ag_tier_batch_add(batch, e, h->code, h->code_len, h->symbol, pl, err,
                                           sizeof err)
                       : ag_tier_load(e, h->code, h->code_len, h->symbol, pl, err, sizeof err);
    if (placed == 0 && batch)
      batched[nbatched++] = i;
    else if (placed == 0)
      w->loaded++;
    else if (placed < 0) { /* > 0: the code cache is full, or demoted by its pool */
      snprintf(why, sizeof why, "unloadable: %s", err);
      unplaced(&p, h, e, why, w);
    }
  }
  if (batch) {
    char err[256], why[300];
    int n = ag_tier_batch_commit(batch, err, sizeof err);
    if (n >= 0)
      w->loaded += n;
    snprintf(why, sizeof why, "unloadable: %s", err);
    for (size_t k = 0; n < 0 && k < nbatched; k++) {
      const st_hot_t *h = &p.sigs[batched[k]];
      ag_entry_t probe;
      memcpy(&probe.key, h->key, sizeof probe.key);
      unplaced(&p, h, ag_table_get(ag_table, &probe.key), why, w);
    }
  }
  free(batched);
  store->profile_free(&p);
  w->complete = !table_full;
}
