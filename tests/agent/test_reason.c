/* SPDX-License-Identifier: MIT */
/* Reasons: a signature's state and why, set and read back whole from several threads at once,
 * each change counted, a long reason cut, an index past the book ignored, a reason kept as
 * figures worded only when read, and the names the database stores. */
#include "agent/reason.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

Test(reason, a_decision_is_read_back_with_its_generation)
{
  static ag_reasons_t b = AG_REASONS_INIT;
  ag_reason_t r;
  cr_assert_eq(ag_reason_get(&b, 0, &r), 0, "no book yet: nothing decided");
  ag_reason_set(&b, 0, AG_STATE_WAITING, "dropped: no slots yet");
  cr_assert_eq(ag_reasons_init(&b, 4), 0);
  cr_assert_eq(ag_reasons_init(&b, 99), 0, "a second init keeps the book");
  cr_assert_eq(b.cap, 4);
  cr_assert_eq(ag_reason_get(&b, 2, &r), 0);
  cr_assert_eq(r.state, AG_STATE_UNDECIDED);
  ag_reason_set(&b, 2, AG_STATE_UNSUPPORTED, "M=%d is above OPJIT_JIT_MAX_DIM=%d", 200, 160);
  cr_assert_eq(ag_reason_get(&b, 2, &r), 1);
  cr_assert_eq(r.state, AG_STATE_UNSUPPORTED);
  cr_assert_str_eq(r.text, "M=200 is above OPJIT_JIT_MAX_DIM=160");
  cr_assert_str_eq(ag_state_name(r.state), "unsupported");
  /* A new state, the same words: a compile starting on a queued signature. */
  ag_reason_set(&b, 1, AG_STATE_QUEUED, "hot after 64 calls");
  ag_reason_state(&b, 1, AG_STATE_COMPILING);
  ag_reason_state(&b, 1, AG_STATE_COMPILING);
  cr_assert_eq(ag_reason_get(&b, 1, &r), 2, "an unchanged state is no change");
  cr_assert_eq(r.state, AG_STATE_COMPILING);
  cr_assert_str_eq(r.text, "hot after 64 calls");
  ag_reason_set(&b, 4, AG_STATE_FAILED, "past the book");
  cr_assert_eq(ag_reason_gen(&b, 4), 0, "an index past the book is ignored");
  char longer[2 * AG_REASON_LEN];
  memset(longer, 'x', sizeof longer - 1);
  longer[sizeof longer - 1] = 0;
  ag_reason_set(&b, 3, AG_STATE_WAITING, "%s", longer);
  ag_reason_get(&b, 3, &r);
  cr_assert_eq(strlen(r.text), AG_REASON_LEN - 1, "cut to fit");
}

typedef struct figs_s {
  int calls;
} figs_t;
static int worded; /* calls of words */

static void words(const void *figs, char *buf, size_t len)
{
  worded++;
  snprintf(buf, len, "after %d calls", ((const figs_t *)figs)->calls);
}

Test(reason, figures_are_worded_when_read_never_when_set)
{
  static ag_reasons_t b = AG_REASONS_INIT;
  ag_reason_t r;
  cr_assert_eq(ag_reasons_init(&b, 2), 0);
  figs_t f = {64};
  ag_reason_set_figs(&b, 1, AG_STATE_WAITING, words, &f, sizeof f);
  f.calls = 4160; /* the slot holds a copy */
  ag_reason_set_figs(&b, 1, AG_STATE_WAITING, words, &f, sizeof f);
  f.calls = 0;
  cr_assert_eq(worded, 0, "setting formats nothing");
  cr_assert_eq(ag_reason_get(&b, 1, &r), 2, "each set is a change");
  cr_assert_eq(worded, 1);
  cr_assert_eq(r.state, AG_STATE_WAITING);
  cr_assert_str_eq(r.text, "after 4160 calls");
  ag_reason_state(&b, 1, AG_STATE_QUEUED); /* a new state keeps the figures */
  ag_reason_get(&b, 1, &r);
  cr_assert_eq(r.state, AG_STATE_QUEUED);
  cr_assert_str_eq(r.text, "after 4160 calls");
  ag_reason_set(&b, 1, AG_STATE_QUEUED, "hot after %d calls", 8256); /* text replaces them */
  cr_assert_eq(ag_reason_get(&b, 1, &r), 4);
  cr_assert_str_eq(r.text, "hot after 8256 calls");
  cr_assert_eq(worded, 2, "text is not worded again");
  ag_reason_set_figs(&b, 2, AG_STATE_WAITING, words, &f, sizeof f);
  cr_assert_eq(ag_reason_gen(&b, 2), 0, "an index past the book is ignored");
}

Test(reason, every_state_has_the_name_the_database_stores)
{
#define NAME_(id, name, what) cr_expect_str_eq(ag_state_name(AG_STATE_##id), name);
  ST_JIT_STATES(NAME_)
#undef NAME_
  cr_expect_str_eq(ag_state_name(AG_STATE_UNDECIDED), "");
  cr_expect_str_eq(ag_state_name((enum ag_state)250), "");
}

static ag_reasons_t shared = AG_REASONS_INIT;

/* Writes its own two reasons, of different lengths, 20000 times over the same slot. */
static void *writer(void *arg)
{
  int t = (int)(long)arg;
  for (int i = 0; i < 20000; i++)
    ag_reason_set(&shared, 0, t ? AG_STATE_SERVING : AG_STATE_WAITING, "%s",
                  t ? "serving: a reason of some length, written by thread one" : "waiting");
  return NULL;
}

Test(reason, a_reader_never_sees_half_of_one_reason_and_half_of_another)
{
  cr_assert_eq(ag_reasons_init(&shared, 1), 0);
  pthread_t th[2];
  for (long t = 0; t < 2; t++)
    pthread_create(&th[t], NULL, writer, (void *)t);
  ag_reason_t r;
  for (int i = 0; i < 20000; i++) {
    ag_reason_get(&shared, 0, &r);
    if (r.state == AG_STATE_WAITING)
      cr_assert_str_eq(r.text, "waiting");
    else if (r.state == AG_STATE_SERVING)
      cr_assert_str_eq(r.text, "serving: a reason of some length, written by thread one");
  }
  for (int t = 0; t < 2; t++)
    pthread_join(th[t], NULL);
  cr_assert_eq(ag_reason_gen(&shared, 0), 40000);
}
