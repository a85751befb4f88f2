/* SPDX-License-Identifier: MIT */
/* Folded stacks for `opjit flame` and `opjit report`: a run's sampled stacks with the
 * operator's name (or INS_FOLD_PROGRAM) as the root frame, sanitised so that a line
 * "root;outer;...;inner COUNT" reads back unambiguously in flamegraph.pl and speedscope, and
 * the frame tree the report draws. Allocation failures end the command (table.h). */
#ifndef OPJIT_INSPECT_FOLD_H
#define OPJIT_INSPECT_FOLD_H

#include "db.h"

#include <stdint.h>

#define INS_FOLD_PROGRAM "[program]" /* root of the samples outside any operator */
#define INS_FOLD_UNKNOWN "[unknown]" /* a frame with no name */

/* Receives one sanitised stack: frames separated by ';', none empty, none holding ';', a
 * control character, a leading, trailing or doubled space. */
typedef void ins_fold_fn(void *ctx, const char *line, int64_t samples);

/* Calls fn for each stack of run (0: every run, identical stacks summed) whose signature id
 * is sig (NULL: every signature and the program's own stacks), operators first by name, then
 * the program, each by stack. *n receives the number of stacks. Returns 0, or INS_EXIT_FAIL
 * (printed). */
int ins_fold_each(st_db_t *db, int64_t run, const char *sig, ins_fold_fn *fn, void *ctx,
                  int64_t *n);

/* What code a frame of the tree is (the report colours by it). */
enum ins_frame_kind {
  INS_FRAME_ROOT,    /* the whole run, an operator or the program's own time */
  INS_FRAME_PROGRAM, /* the program and the libraries it calls the operator from */
  INS_FRAME_AGENT,   /* opjit's interposer (libopjit*) */
  INS_FRAME_LIBRARY, /* the operator's library: below the interposer */
  INS_FRAME_JIT,     /* generated code: [jit…], perf-PID.map, anonymous memory */
};

/* A node of the frame tree: one frame under one path of callers. */
typedef struct ins_frame_s {
  char *name;
  enum ins_frame_kind kind;
  int depth;                 /* 0: the tree's root */
  int64_t samples;           /* here and below */
  int64_t offset;            /* samples left of it in the layout: its x position */
  struct ins_frame_s *child; /* first child: most samples first after ins_frame_layout */
  struct ins_frame_s *next;  /* next sibling */
} ins_frame_t;

/* A tree holding only its root, named name. */
ins_frame_t *ins_frame_tree(const char *name);
/* Adds one sanitised stack (as ins_fold_fn gives it) with its samples under root. */
void ins_frame_add(ins_frame_t *root, const char *line, int64_t samples);
/* Orders every node's children by samples (then name) and sets their offsets; returns the
 * number of nodes, and raises *depth (start it at 0) to the depth of the deepest one. */
int64_t ins_frame_layout(ins_frame_t *root, int *depth);
void ins_frame_free(ins_frame_t *root);

#endif
