/* SPDX-License-Identifier: MIT */
/* The ggml host's test seam: what OPJIT_TEST_FUSION asks of the fused kernels, through hooks
 * the host calls only while a test has set them (gg_test is NULL in production).
 *   poison  every kernel's rows come out as zeros, unverified: the model must notice;
 *   wrong   1.5 times too large: verification must catch them;
 *   slow    the kernels of norm groups, MUL_MAT + ADD groups and single MUL_MATs spend 3 ms
 *           more per call (more than a loaded machine adds to the original's barriers), and
 *           rounds follow each other without a gap: the never-slower judge must demote them;
 *   slow-single  single MUL_MATs' kernels spend 3 ms more per call and ggml's nodes of
 *           products of one input as much on the host's side of the rounds (the rounds back to
 *           back): a kernel that serves both kinds ties on their pool, and the graph's judge of
 *           the single products must send them back to ggml's nodes alone;
 *   churn   the kernels as they are, the rounds back to back, the record cache held to 3
 *           entries (the graphs of two models computing at once evict each other's), and a
 *           thread that pinned a published entry yields before it reads it: a reader of another
 *           computation's entry is most likely preempted where a race would bite. */
#include "ggml_host.h"

#include <sched.h>
#include <string.h>

const gg_test_t *gg_test;

static void poison(const gg_fusion_t *f, float *y, int64_t ld, int64_t cols, int64_t i0, int64_t i1)
{
  (void)f;
  for (int64_t j = 0; j < cols; j++)
    memset(y + j * ld + i0, 0, (size_t)(i1 - i0) * sizeof *y);
}

static void wrong(const gg_fusion_t *f, float *y, int64_t ld, int64_t cols, int64_t i0, int64_t i1)
{
  (void)f;
  for (int64_t j = 0; j < cols; j++)
    for (int64_t i = i0; i < i1; i++)
      y[j * ld + i] *= 1.5f;
}

/* Not for groups of products, whose kernels are their products'. */
static void slow(const gg_fusion_t *f, float *y, int64_t ld, int64_t cols, int64_t i0, int64_t i1)
{
  (void)y, (void)ld, (void)cols, (void)i0, (void)i1;
  for (uint64_t until = ag_now_ns() + 3000000; !f->kind->products && ag_now_ns() < until;)
    ;
}

static void spin_3ms(void)
{
  for (uint64_t until = ag_now_ns() + 3000000; ag_now_ns() < until;)
    ;
}

static void slow_single(const gg_fusion_t *f, float *y, int64_t ld, int64_t cols, int64_t i0,
                        int64_t i1)
{
  (void)y, (void)ld, (void)cols, (void)i0, (void)i1;
  if (f->kind->compute == gg_node_mul_mat)
    spin_3ms();
}

static void slow_shared_host(const gg_fusion_t *f)
{
  if (f->kind->moves)
    spin_3ms();
}

static void nothing(const gg_fusion_t *f) { (void)f; }

static void as_written(const gg_fusion_t *f, float *y, int64_t ld, int64_t cols, int64_t i0,
                       int64_t i1)
{
  (void)f, (void)y, (void)ld, (void)cols, (void)i0, (void)i1;
}

static void yield(void) { sched_yield(); }

static const gg_test_t poison_seam = {1, 0, poison, nothing}, wrong_seam = {0, 0, wrong, nothing},
                       slow_seam = {0, 4, slow, nothing},
                       slow_single_seam = {0, 4, slow_single, slow_shared_host},
                       churn_seam = {0, 4, as_written, nothing, 3, yield};

const gg_test_t *gg_test_of(const char *t)
{
  return strcmp(t, "poison") == 0        ? &poison_seam
         : strcmp(t, "wrong") == 0       ? &wrong_seam
         : strcmp(t, "slow") == 0        ? &slow_seam
         : strcmp(t, "slow-single") == 0 ? &slow_single_seam
         : strcmp(t, "churn") == 0       ? &churn_seam
                                         : NULL;
}
