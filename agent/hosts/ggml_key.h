/* SPDX-License-Identifier: MIT */
/* The ggml host's typed problems: a graph node, and a group of nodes the agent runs as one,
 * each with its own fields, and where each field lives in the persisted 32-byte key (sig.h).
 * The encoders are the only code that lays a ggml key out, and the decoders give a key's
 * fields back by their names; the layouts are those every database has stored
 * (tests/agent/test_problem.c pins their bytes and hashes), so they never change.
 *
 *   key field  op       dtype        api  order       ta       tb     m    n    k     lda  ldb
 *   node       ggml op  src0's type  own  src1's + 1  sub-op   0      ne0  ne1  src0  ne2  ne3
 *                                                                               ne0
 *   group      FUSED    weights'     F32  F32 + 1     pattern  count  m    n    k     1    1
 * (host AG_HOST_ID_GGML; ldc 0, ab 0 but 1 for a MUL_MAT node, and a group of products, whose
 * f16 weights lie in ggml's AMX buffer (amx); a node without a second source has order 0; a norm
 * group's weights' type is F32, its order, lda and ldb 0, and m its row length.) ggml's types
 * and ops are ggml's own numbers (AG_GGML_* below). */
#ifndef OPJIT_AGENT_HOSTS_GGML_KEY_H
#define OPJIT_AGENT_HOSTS_GGML_KEY_H

#include "../sig.h"

/* The ggml host's id: its keys' first byte (persisted; host.h). */
enum { AG_HOST_ID_GGML = 2 };
/* A group's op: ta names its pattern; ADD+RMS_NORM+MUL and RMS_NORM+MUL: m the row length;
 * MUL_MAT+MUL_MAT+SWIGLU and MUL_MAT+ADD: the products' key (dtype their weights', m n k their
 * shape, ab theirs); SHARED-INPUT MUL_MATS: the same with m their rows together, tb how many. */
enum { AG_GGML_OP_FUSED = 0xF0 };
enum ag_fusion { AG_FUSE_ADD_RMS_MUL = 1, AG_FUSE_MM_SWIGLU, AG_FUSE_SHARED_INPUT, AG_FUSE_MM_ADD,
                 AG_FUSE_RMS_MUL };
/* ggml's numbers, checked against its headers in hosts/ggml.c (whose op table is checked
 * against the running ggml's): known to the host's naming and kernels before it has seen a
 * graph. */
enum { AG_GGML_TYPE_F32 = 0, AG_GGML_TYPE_F16 = 1 };
enum { AG_GGML_OP_MUL_MAT = 29, AG_GGML_OP_FLASH_ATTN_EXT = 74 };
/* A FLASH_ATTN_EXT gets the agent's f32 kernel from this many query rows (ggml's
 * GGML_FA_TILE_Q): there ggml's CPU backend computes it in f32 by tiles, whose float steps the
 * kernel's are; with fewer it rounds the queries to f16 and sums the values in f16, and so does
 * the f16 kernel (jit.h, fa 2), which takes the rows as an argument: such a node's key has 1 for
 * its rows (ne2) whatever they are, one signature for decode and batched decode. */
enum { AG_GGML_FA_MIN_ROWS = 64 };

/* The names of ggml's ops, types and sub-ops, as the running library spells them (ggml.c sets
 * them once it has checked the library; until then ggml keys are named by number). Kept by the
 * host's naming (hosts/ggml_sig.c). */
typedef struct ag_ggml_names_s {
  const char *const *ops, *const *types, *const *unary, *const *glu;
  int nops, ntypes, nunary, nglu;
  int op_unary, op_glu, op_mul_mat; /* the ops whose keys carry a sub-op, and MUL_MAT */
} ag_ggml_names_t;
void ag_ggml_set_names(const ag_ggml_names_t *names);

/* One node's work. */
typedef struct ag_ggml_node_s {
  uint8_t op, src0_type, type; /* src0_type: its own type when it has no source */
  uint8_t has_src1, src1_type;
  uint8_t subop;    /* UNARY's and GLU's op_params[0]; 0 for the others */
  int32_t ne[4];    /* its shape */
  int32_t src0_ne0; /* its first source's ne[0] (MUL_MAT's K), 0 without one */
  uint8_t amx;      /* MUL_MAT: f16 weights in ggml's AMX buffer, which multiplies them with f32
                       activations (its own MUL_MAT rounds them to f16); 0 for the others */
} ag_ggml_node_t;

/* A group of nodes run as one (sig.h, enum ag_fusion). */
typedef struct ag_ggml_group_s {
  uint8_t pattern; /* enum ag_fusion */
  uint8_t wtype;   /* the products' weights' type (F32 for the norms) */
  uint8_t count;   /* SHARED-INPUT: how many products; 0 for the others */
  int32_t m, n, k; /* the products' shape (SHARED-INPUT: m their rows together); norms: m the
                       row length, n = k = 0 */
  uint8_t amx;     /* the products' f16 weights lie in ggml's AMX buffer (as the node's) */
} ag_ggml_group_t;

static inline int ag_ggml_group_is_norm(uint8_t pattern)
{
  return pattern == AG_FUSE_ADD_RMS_MUL || pattern == AG_FUSE_RMS_MUL;
}

static inline ag_sig_t ag_ggml_node_key(const ag_ggml_node_t *p)
{
  return ag_sig_make(AG_HOST_ID_GGML, p->op, p->src0_type, p->type,
                     (uint8_t)(p->has_src1 ? p->src1_type + 1 : 0), p->subop, 0, p->amx, p->ne[0],
                     p->ne[1], p->src0_ne0, p->ne[2], p->ne[3], 0);
}

static inline ag_sig_t ag_ggml_group_key(const ag_ggml_group_t *p)
{
  int norm = ag_ggml_group_is_norm(p->pattern);
  return ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_FUSED, p->wtype, AG_GGML_TYPE_F32,
                     (uint8_t)(norm ? 0 : AG_GGML_TYPE_F32 + 1), p->pattern, p->count, p->amx, p->m,
                     p->n, p->k, !norm, !norm, 0);
}

/* The MUL_MAT node key of a MUL_MAT+ADD group's product. */
static inline ag_sig_t ag_ggml_mm_add_product(const ag_sig_t *s)
{
  return ag_sig_make(AG_HOST_ID_GGML, AG_GGML_OP_MUL_MAT, s->dtype, s->api, s->order, 0, 0, s->ab,
                     s->m, s->n, s->k, s->lda, s->ldb, 0);
}

static inline ag_ggml_node_t ag_ggml_node_of(const ag_sig_t *k)
{
  return (ag_ggml_node_t){.op = k->op,
                          .src0_type = k->dtype,
                          .type = k->api,
                          .has_src1 = k->order != 0,
                          .src1_type = (uint8_t)(k->order ? k->order - 1 : 0),
                          .subop = k->ta,
                          .ne = {k->m, k->n, k->lda, k->ldb},
                          .src0_ne0 = k->k,
                          .amx = k->ab};
}

static inline ag_ggml_group_t ag_ggml_group_of(const ag_sig_t *k)
{
  return (ag_ggml_group_t){
      .pattern = k->ta, .wtype = k->dtype, .count = k->tb, .m = k->m, .n = k->n, .k = k->k,
      .amx = k->ab};
}

#endif
