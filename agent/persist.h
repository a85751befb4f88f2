/* SPDX-License-Identifier: MIT */
/* Object persistence: per signature, where its variant's object stands between the compile
 * thread that made it, the verifications and the judge that may invalidate it, and the writer
 * that stores it. A book the caller owns, one slot per signature, behind its own mutex; the
 * writer is the only thread that takes objects out.
 *
 *   NONE ──compiled (object)──▶ PENDING ──verified OPJIT_VERIFY times, ready, taken──▶ STORING
 *                                 ▲  └──discarded (its variant demoted by its guards)──▶ NONE
 *                                 └────────────────write failed────────────────────┘   │ committed
 *   placed from the store ───────────────────────────────────────────────────────▶ STORED
 *   any state ──dropped (verification failed, slower, decayed, unusable)──▶ NONE, and the
 *               stored object is deleted by the writer (drop), unless an object stored later
 *               replaces it
 * A compile's object is stored only once its variant passed the verifications needed
 * (OPJIT_VERIFY): its check before publication (on scratch operands against the original, or a
 * host's self-test) counts for all of them, else its first calls' do. An object in the database
 * was verified in the run that stored it, and is never verified again. */
#ifndef OPJIT_AGENT_PERSIST_H
#define OPJIT_AGENT_PERSIST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* What the writer records about an entry's variant and object. */
typedef struct ag_persist_s {
  const char *origin; /* "compiled" or "loaded" */
  uint64_t pre_calls; /* the signature's calls before the variant was published */
  void *object;       /* a verified variant's object to store, owned by the writer until
                         ag_persist_done; NULL when there is none to store */
  size_t object_len;
  uint64_t checksum;
  char symbol[128]; /* the variant's kernel, whether or not its object is handed over */
  int drop; /* the stored object is invalid: delete it */
} ag_persist_t;

/* One signature's slot. */
typedef struct ag_pslot_s {
  void *obj; /* PENDING: the object (malloc'ed, the book's) */
  size_t len;
  uint64_t checksum;
  char symbol[128];
  uint8_t state, loaded, had_variant;
  uint8_t drop;       /* the stored object is invalid: the writer deletes it */
  uint32_t passed;    /* verifications passed */
  uint64_t pre_calls; /* the signature's calls before its variant was published */
} ag_pslot_t;

typedef struct ag_persist_book_s {
  pthread_mutex_t mu;
  ag_pslot_t *_Atomic slots; /* NULL until ag_persist_init (the writer tests it unlocked) */
} ag_persist_book_t;
#define AG_PERSIST_BOOK_INIT                                                                       \
  {                                                                                                \
    .mu = PTHREAD_MUTEX_INITIALIZER                                                                \
  }

/* Makes the book's capacity slots, all NONE; 0, or -1 when out of memory. Once, before any
 * other call; the slots live as long as the process. */
int ag_persist_init(ag_persist_book_t *b, uint32_t capacity);

/* Entry i got a variant: obj (malloc'ed, the book's from now on; NULL when there is none) is
 * its object, symbol its kernel's name; loaded: it came from the store (STORED, obj ignored),
 * else it is PENDING with pre_calls, its verifications start from zero. A pending delete stays
 * pending: the new object replaces the old one when it is stored. */
void ag_persist_set(ag_persist_book_t *b, uint32_t i, void *obj, size_t len, const char *symbol,
                    int loaded, uint64_t pre_calls);

/* Entry i's variant passed n more verifications. */
void ag_persist_pass(ag_persist_book_t *b, uint32_t i, uint32_t n);

/* Entry i's stored object is invalid (or about to be): NONE, its pending object freed, and the
 * writer deletes the stored one. Returns 1 when the store has it (or is being given it). */
int ag_persist_drop(ag_persist_book_t *b, uint32_t i);

/* Entry i's object, if not stored yet, never will be (freed); a stored one stays. */
void ag_persist_discard(ag_persist_book_t *b, uint32_t i);

/* For the writer: fills *out for entry i (origin, pre_calls, drop), and hands it the object
 * when it is PENDING, ready (its variant is published) and has passed needed verifications
 * (STORING from then on). Returns 0 when the entry never had a variant nor a drop. */
int ag_persist_take(ag_persist_book_t *b, uint32_t i, int ready, uint32_t needed,
                    ag_persist_t *out);

/* After the writer's write of *done (ok: committed): STORED, or the object back to PENDING
 * when the write failed; a committed object replaces an invalid one (drop cleared). Frees
 * whatever *done still holds. */
void ag_persist_done(ag_persist_book_t *b, uint32_t i, ag_persist_t *done, int ok);

/* Fork child: entries [0, n) keep no object (the parent stores its own; the child never frees
 * the parent's buffers: fork may have come in the middle of an update), what was pending or
 * being stored counts as stored; the mutex starts unlocked. */
void ag_persist_after_fork_child(ag_persist_book_t *b, uint32_t n);

#endif
