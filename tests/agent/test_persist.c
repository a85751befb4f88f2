/* SPDX-License-Identifier: MIT */
/* Object persistence: a compiled object reaches the writer only once verified and published,
 * exactly once, and comes back when the write fails; a loaded one is never stored again; a drop
 * frees what is pending and asks the writer to delete, until a stored object replaces it; a
 * fork child keeps no object. The book is driven as the tiers and the writer drive it. */
#include "agent/persist.h"
#include "jit/objload.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#define VERIFY 4 /* verifications an object needs before it is stored */

static ag_persist_book_t book = AG_PERSIST_BOOK_INIT;

static void setup(void) { cr_assert_eq(ag_persist_init(&book, 16), 0); }
TestSuite(persist, .init = setup);

/* A malloc'ed object of n bytes of fill (the book frees it). */
static void *object(size_t n, int fill)
{
  void *p = malloc(n);
  memset(p, fill, n);
  return p;
}

Test(persist, a_compiled_object_is_stored_once_verified_and_published)
{
  ag_persist_t w;
  cr_assert_eq(ag_persist_take(&book, 0, 1, VERIFY, &w), 0, "never had a variant");
  cr_assert_null(w.object);
  void *obj = object(100, 7);
  uint64_t sum = jt_obj_checksum(obj, 100);
  ag_persist_set(&book, 0, obj, 100, "k_gemm_f32", 0, 1234);
  cr_assert_eq(ag_persist_take(&book, 0, 1, VERIFY, &w), 1);
  cr_assert_null(w.object, "not verified yet");
  cr_assert_str_eq(w.origin, "compiled");
  cr_assert_eq(w.pre_calls, 1234);
  ag_persist_pass(&book, 0, VERIFY - 1);
  cr_assert_eq(ag_persist_take(&book, 0, 1, VERIFY, &w), 1);
  cr_assert_null(w.object, "one verification short");
  ag_persist_pass(&book, 0, 1);
  cr_assert_eq(ag_persist_take(&book, 0, 0, VERIFY, &w), 1);
  cr_assert_null(w.object, "its variant is not published (demoted, failed or evicted)");
  cr_assert_eq(ag_persist_take(&book, 0, 1, VERIFY, &w), 1);
  cr_assert_eq(w.object, obj, "the writer owns it now");
  cr_assert_eq(w.object_len, 100);
  cr_assert_eq(w.checksum, sum);
  cr_assert_str_eq(w.symbol, "k_gemm_f32");
  cr_assert_eq(w.drop, 0);
  ag_persist_t again;
  ag_persist_take(&book, 0, 1, VERIFY, &again);
  cr_assert_null(again.object, "handed over once");
  ag_persist_done(&book, 0, &w, 1);
  cr_assert_null(w.object, "freed after the write");
  ag_persist_take(&book, 0, 1, VERIFY, &again);
  cr_assert_null(again.object, "stored");
  cr_assert_eq(ag_persist_drop(&book, 0), 1, "the store has it: the writer deletes it");
}

Test(persist, a_failed_write_gives_the_object_back_for_the_next)
{
  void *obj = object(64, 1);
  ag_persist_set(&book, 1, obj, 64, "k", 0, 0);
  ag_persist_pass(&book, 1, VERIFY);
  ag_persist_t w;
  ag_persist_take(&book, 1, 1, VERIFY, &w);
  cr_assert_eq(w.object, obj);
  cr_assert_eq(ag_persist_drop(&book, 2), 0, "another entry: nothing stored");
  ag_persist_done(&book, 1, &w, 0);
  cr_assert_null(w.object, "taken back");
  ag_persist_take(&book, 1, 1, VERIFY, &w);
  cr_assert_eq(w.object, obj, "pending again, the same bytes");
  ag_persist_done(&book, 1, &w, 1);
}

Test(persist, a_loaded_object_is_never_stored_again)
{
  ag_persist_set(&book, 3, NULL, 0, "k_loaded", 1, 0);
  ag_persist_pass(&book, 3, VERIFY);
  ag_persist_t w;
  cr_assert_eq(ag_persist_take(&book, 3, 1, VERIFY, &w), 1);
  cr_assert_str_eq(w.origin, "loaded");
  cr_assert_null(w.object);
  cr_assert_eq(ag_persist_drop(&book, 3), 1, "the store has it");
}

Test(persist, a_drop_frees_what_is_pending_and_lasts_until_an_object_replaces_it)
{
  ag_persist_set(&book, 4, object(32, 2), 32, "k_old", 0, 0);
  cr_assert_eq(ag_persist_drop(&book, 4), 0, "not stored yet: nothing to delete in the store");
  ag_persist_t w;
  cr_assert_eq(ag_persist_take(&book, 4, 1, VERIFY, &w), 1, "a drop is news for the writer");
  cr_assert_eq(w.drop, 1);
  cr_assert_null(w.object);
  ag_persist_done(&book, 4, &w, 0);
  ag_persist_take(&book, 4, 1, VERIFY, &w);
  cr_assert_eq(w.drop, 1, "a failed write deletes nothing: still to do");
  /* a recompile's object: the drop stays pending until it is stored in the old one's place */
  void *obj = object(48, 3);
  ag_persist_set(&book, 4, obj, 48, "k_new", 0, 0);
  ag_persist_pass(&book, 4, VERIFY);
  ag_persist_take(&book, 4, 1, VERIFY, &w);
  cr_assert_eq(w.object, obj);
  cr_assert_eq(w.drop, 1, "the writer deletes the old one as it stores the new");
  ag_persist_done(&book, 4, &w, 1);
  ag_persist_take(&book, 4, 1, VERIFY, &w);
  cr_assert_eq(w.drop, 0, "replaced");
  cr_assert_null(w.object);
}

Test(persist, a_recompile_starts_its_verifications_afresh)
{
  ag_persist_set(&book, 5, object(16, 4), 16, "k", 0, 0);
  ag_persist_pass(&book, 5, VERIFY);
  void *obj = object(16, 5);
  ag_persist_set(&book, 5, obj, 16, "k2", 0, 0); /* frees the first */
  ag_persist_t w;
  ag_persist_take(&book, 5, 1, VERIFY, &w);
  cr_assert_null(w.object, "the new variant is not verified yet");
  ag_persist_pass(&book, 5, VERIFY);
  ag_persist_take(&book, 5, 1, VERIFY, &w);
  cr_assert_eq(w.object, obj);
  cr_assert_str_eq(w.symbol, "k2");
  ag_persist_done(&book, 5, &w, 1);
}

Test(persist, a_discarded_object_is_never_stored_and_a_stored_one_stays)
{
  ag_persist_set(&book, 6, object(16, 6), 16, "k", 0, 0);
  ag_persist_pass(&book, 6, VERIFY);
  ag_persist_discard(&book, 6);
  ag_persist_t w;
  cr_assert_eq(ag_persist_take(&book, 6, 1, VERIFY, &w), 1);
  cr_assert_null(w.object);
  cr_assert_eq(w.drop, 0, "discarding deletes nothing");
  ag_persist_set(&book, 7, NULL, 0, "k", 1, 0);
  ag_persist_discard(&book, 7);
  cr_assert_eq(ag_persist_drop(&book, 7), 1, "still stored");
}

Test(persist, a_fork_child_keeps_no_object_and_counts_the_pending_as_stored)
{
  void *pending = object(16, 8), *storing = object(16, 9);
  ag_persist_set(&book, 8, pending, 16, "k", 0, 0);
  ag_persist_set(&book, 9, storing, 16, "k", 0, 0);
  ag_persist_pass(&book, 9, VERIFY);
  ag_persist_t w;
  ag_persist_take(&book, 9, 1, VERIFY, &w);
  cr_assert_eq(w.object, storing);
  pthread_mutex_lock(&book.mu); /* a parent thread held it when the fork came */
  ag_persist_after_fork_child(&book, 16);
  ag_persist_pass(&book, 8, VERIFY);
  ag_persist_t c;
  ag_persist_take(&book, 8, 1, VERIFY, &c);
  cr_assert_null(c.object, "the parent stores its own");
  cr_assert_eq(ag_persist_drop(&book, 8), 1, "counted as stored");
  cr_assert_eq(ag_persist_drop(&book, 9), 1);
  free(pending), free(w.object); /* the parent's buffers, which the child never frees */
}

Test(persist, an_object_dropped_while_it_is_written_is_deleted_by_the_next_write)
{
  ag_persist_set(&book, 5, object(48, 5), 48, "k_demoted", 0, 0);
  ag_persist_pass(&book, 5, VERIFY);
  ag_persist_t w;
  cr_assert_eq(ag_persist_take(&book, 5, 1, VERIFY, &w), 1);
  cr_assert_not_null(w.object, "the writer took it");
  cr_assert_eq(ag_persist_drop(&book, 5), 1, "being stored: the writer must delete it");
  ag_persist_done(&book, 5, &w, 1);
  ag_persist_take(&book, 5, 1, VERIFY, &w);
  cr_assert_eq(w.drop, 1, "the stored object is the dropped one: the next write deletes it");
  cr_assert_null(w.object);
  ag_persist_done(&book, 5, &w, 1);
  ag_persist_take(&book, 5, 1, VERIFY, &w);
  cr_assert_eq(w.drop, 0, "deleted: nothing more to do");
}
