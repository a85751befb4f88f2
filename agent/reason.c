/* SPDX-License-Identifier: MIT */
/* The book of reasons (reason.h): a mutex-guarded array of fixed-size slots, each holding its
 * reason as text or as figures and the function that words them. */
#include "reason.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ag_reason_slot_s {
  ag_reason_t r;            /* state, generation; the text when words is NULL */
  ag_reason_words_fn words; /* non-NULL: the reason is figs, worded when read */
  unsigned char figs[AG_REASON_FIGS];
};

int ag_reasons_init(ag_reasons_t *b, uint32_t capacity)
{
  if (atomic_load_explicit(&b->cap, memory_order_acquire))
    return 0;
  pthread_mutex_lock(&b->mu);
  if (!b->slots && capacity && (b->slots = calloc(capacity, sizeof *b->slots)))
    atomic_store_explicit(&b->cap, capacity, memory_order_release);
  int rc = b->slots ? 0 : -1;
  pthread_mutex_unlock(&b->mu);
  return rc;
}

void ag_reason_vset(ag_reasons_t *b, uint32_t i, enum ag_state st, const char *fmt, va_list ap)
{
  char text[AG_REASON_LEN];
  vsnprintf(text, sizeof text, fmt, ap); /* outside the lock */
  pthread_mutex_lock(&b->mu);
  if (i < b->cap) {
    struct ag_reason_slot_s *s = &b->slots[i];
    s->r.state = (uint8_t)st;
    memcpy(s->r.text, text, sizeof text);
    s->words = NULL;
    s->r.gen++;
  }
  pthread_mutex_unlock(&b->mu);
}

void ag_reason_set_figs(ag_reasons_t *b, uint32_t i, enum ag_state st, ag_reason_words_fn words,
                        const void *figs, size_t size)
{
  if (size > AG_REASON_FIGS)
    size = AG_REASON_FIGS;
  pthread_mutex_lock(&b->mu);
  if (i < b->cap) {
    struct ag_reason_slot_s *s = &b->slots[i];
    s->r.state = (uint8_t)st;
    s->words = words;
    memcpy(s->figs, figs, size);
    s->r.gen++;
  }
  pthread_mutex_unlock(&b->mu);
}

void ag_reason_set(ag_reasons_t *b, uint32_t i, enum ag_state st, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  ag_reason_vset(b, i, st, fmt, ap);
  va_end(ap);
}

void ag_reason_state(ag_reasons_t *b, uint32_t i, enum ag_state st)
{
  pthread_mutex_lock(&b->mu);
  if (i < b->cap && b->slots[i].r.state != st) {
    b->slots[i].r.state = (uint8_t)st;
    b->slots[i].r.gen++;
  }
  pthread_mutex_unlock(&b->mu);
}

uint32_t ag_reason_gen(ag_reasons_t *b, uint32_t i)
{
  pthread_mutex_lock(&b->mu);
  uint32_t gen = i < b->cap ? b->slots[i].r.gen : 0;
  pthread_mutex_unlock(&b->mu);
  return gen;
}

uint32_t ag_reason_get(ag_reasons_t *b, uint32_t i, ag_reason_t *out)
{
  ag_reason_words_fn words = NULL;
  unsigned char figs[AG_REASON_FIGS];
  pthread_mutex_lock(&b->mu);
  if (i < b->cap) {
    const struct ag_reason_slot_s *s = &b->slots[i];
    *out = s->r;
    if ((words = s->words))
      memcpy(figs, s->figs, sizeof figs);
  } else {
    memset(out, 0, sizeof *out);
  }
  pthread_mutex_unlock(&b->mu);
  if (words)
    words(figs, out->text, sizeof out->text);
  return out->gen;
}

const char *ag_state_name(enum ag_state st)
{
#define AG_STATE_NAME_(id, name, what) [AG_STATE_##id] = name,
  static const char *const names[] = {[AG_STATE_UNDECIDED] = "", ST_JIT_STATES(AG_STATE_NAME_)};
#undef AG_STATE_NAME_
  return (unsigned)st < sizeof names / sizeof *names ? names[st] : "";
}

void ag_reasons_after_fork_child(ag_reasons_t *b) { pthread_mutex_init(&b->mu, NULL); }
