/* SPDX-License-Identifier: MIT */
/* Reasons: per signature, the JIT state the tiers' last decision left it in (ST_JIT_STATES) and
 * why, in that decision's own words. The writer stores both with the run's counts (run_sigs.state
 * and reason); opjit top and variants show them as recorded, never re-deriving them. A book the
 * caller owns, one slot per signature, behind one mutex: decisions are rare (a signature's few
 * transitions, and a promotion test every 4096 calls, or at every doubling of a long one's:
 * agent.h, ag_hot_test_due). Each slot counts its changes, so the
 * writer rewrites only the signatures whose state moved. A decision taken on a program's call
 * (the promotion test) keeps its figures and a function that words them: the words are
 * formatted when read (by the writer), never on the program's thread. */
#ifndef OPJIT_AGENT_REASON_H
#define OPJIT_AGENT_REASON_H

#include "../store/store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

enum ag_state {
  AG_STATE_UNDECIDED = 0, /* no decision yet: the tiers' default applies (tier.h) */
#define AG_STATE_ENUM_(id, name, what) AG_STATE_##id,
  ST_JIT_STATES(AG_STATE_ENUM_)
#undef AG_STATE_ENUM_
};

#define AG_REASON_LEN 224 /* a reason's bytes, NUL included: longer ones are cut */
#define AG_REASON_FIGS 64 /* the most bytes of figures a reason kept unworded holds */

/* One signature's state and why, as a reader gets it. */
typedef struct ag_reason_s {
  uint32_t gen;  /* changes so far (0: never decided) */
  uint8_t state; /* enum ag_state */
  char text[AG_REASON_LEN];
} ag_reason_t;

/* Words figures (the layout of the function's own caller) into buf, len bytes. */
typedef void (*ag_reason_words_fn)(const void *figs, char *buf, size_t len);

typedef struct ag_reasons_s {
  pthread_mutex_t mu;
  struct ag_reason_slot_s *slots; /* NULL until ag_reasons_init */
  _Atomic uint32_t cap;           /* the slots' count, set once (0 before) */
} ag_reasons_t;
#define AG_REASONS_INIT                                                                            \
  {                                                                                                \
    .mu = PTHREAD_MUTEX_INITIALIZER                                                                \
  }

/* Makes the book's capacity slots, all undecided, unless it has them already (then without
 * taking the mutex); 0, or -1 when out of memory (then every set is dropped). The slots live
 * as long as the process. */
int ag_reasons_init(ag_reasons_t *b, uint32_t capacity);

/* Signature i is in state st, for the reason formatted from fmt. Any thread; never blocks on
 * anything but the book's mutex. */
void ag_reason_set(ag_reasons_t *b, uint32_t i, enum ag_state st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void ag_reason_vset(ag_reasons_t *b, uint32_t i, enum ag_state st, const char *fmt, va_list ap);
/* Signature i is in state st, for the reason words gives figs (size bytes, at most
 * AG_REASON_FIGS, copied) when the slot is read: nothing is formatted here. Any thread. */
void ag_reason_set_figs(ag_reasons_t *b, uint32_t i, enum ag_state st, ag_reason_words_fn words,
                        const void *figs, size_t size);
/* Signature i is in state st for the reason it already has (a compile starting on a queued
 * signature). */
void ag_reason_state(ag_reasons_t *b, uint32_t i, enum ag_state st);

/* Signature i's generation: 0 when never decided; it changes with every set. */
uint32_t ag_reason_gen(ag_reasons_t *b, uint32_t i);
/* Copies signature i's slot into *out (all zero when never decided), its reason in words (a
 * reason kept as figures is worded here, outside the mutex); returns its generation. */
uint32_t ag_reason_get(ag_reasons_t *b, uint32_t i, ag_reason_t *out);

/* The name of st as the database stores it ("" for AG_STATE_UNDECIDED). */
const char *ag_state_name(enum ag_state st);

/* Fork child: the mutex starts unlocked; the slots keep what the parent decided. */
void ag_reasons_after_fork_child(ag_reasons_t *b);

#endif
