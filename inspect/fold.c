/* SPDX-License-Identifier: MIT */
/* Folded stacks: reading run_stacks with the operator as the root frame, sanitising frame
 * names, and the frame tree (a trie of frames weighted by samples) the report lays out.
 *
 * Colouring by kind is a heuristic on each stack read innermost-first. In an operator's
 * stack, the frames below opjit's interposer (the last libopjit* frame) are the operator's
 * library, as is any module named like a BLAS/LAPACK (the sampler's own rule); when the
 * unwinder lost the interposer, the innermost run of frames in the leaf's module stands for
 * it. Everything above is the program calling the operator. */
#include "fold.h"

#include "cmd.h"
#include "table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends frame s[0..n) to out at *at, sanitised: ';' becomes ':', control characters and
 * spaces collapse into single inner spaces, an empty frame becomes INS_FOLD_UNKNOWN. */
static void put_frame(char *out, size_t *at, const char *s, size_t n)
{
  size_t start = *at;
  int space = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c <= ' ' || c == 0x7f) {
      space = 1;
      continue;
    }
    if (space && *at > start)
      out[(*at)++] = ' ';
    space = 0;
    out[(*at)++] = c == ';' ? ':' : (char)c;
  }
  if (*at == start) {
    memcpy(out + *at, INS_FOLD_UNKNOWN, sizeof INS_FOLD_UNKNOWN - 1);
    *at += sizeof INS_FOLD_UNKNOWN - 1;
  }
  out[*at] = 0;
}

/* "root;frame;..." sanitised, malloc'ed: root is one frame, stack holds ';'-separated ones. */
static char *fold_line(const char *root, const char *stack)
{
  size_t frames = 2;
  for (const char *p = stack; *p; p++)
    frames += *p == ';';
  char *out = ins_xmalloc(strlen(root) + strlen(stack) + frames * sizeof INS_FOLD_UNKNOWN + 1);
  size_t at = 0;
  put_frame(out, &at, root, strlen(root));
  for (const char *p = stack;; p++) {
    size_t n = strcspn(p, ";");
    out[at++] = ';';
    put_frame(out, &at, p, n);
    if (!p[n])
      break;
    p += n;
  }
  return out;
}

int ins_fold_each(st_db_t *db, int64_t run, const char *sig, ins_fold_fn *fn, void *ctx,
                  int64_t *n)
{
  st_rows_t *st = ins_query(db, ST_Q_STACKS);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, run);
  if (sig)
    st_rows_bind_text(st, 2, sig);
  int rc;
  for (*n = 0; (rc = st_rows_next(st)) == 1; ++*n) {
    int host = st_rows_int(st, 0) == 0;
    char *line = fold_line(host ? INS_FOLD_PROGRAM : st_rows_text(st, 1), st_rows_text(st, 2));
    fn(ctx, line, st_rows_int(st, 3));
    free(line);
  }
  return ins_rows_finish(db, st, rc);
}

/* ---- the frame tree ---- */

/* The module part of a frame "module`symbol" ("" when it has none), as its length. */
static size_t module_len(const char *frame, size_t n)
{
  const char *tick = memchr(frame, '`', n);
  return tick ? (size_t)(tick - frame) : 0;
}

/* Whether module m[0..n) holds generated code: a JIT's pseudo-module, a perf map or jitdump
 * image, or anonymous executable memory. */
static int jit_module(const char *m, size_t n)
{
  char buf[256];
  snprintf(buf, sizeof buf, "%.*s", (int)n, m);
  size_t len = strlen(buf);
  return (buf[0] == '[' && (strstr(buf, "jit") || strncmp(buf, "[anon", 5) == 0)) ||
         (strncmp(buf, "perf-", 5) == 0 && len > 4 && strcmp(buf + len - 4, ".map") == 0) ||
         strncmp(buf, "jitted-", 7) == 0 || strcmp(buf, "//anon") == 0;
}

/* Whether module m[0..n) is named like an operator library (as sampler/aggregate.c judges). */
static int op_module(const char *m, size_t n)
{
  char buf[256];
  snprintf(buf, sizeof buf, "%.*s", (int)n, m);
  return strstr(buf, "blas") || strstr(buf, "lapack") || strstr(buf, "blis") || strstr(buf, "mkl");
}

static ins_frame_t *frame_new(const char *name, size_t n, enum ins_frame_kind kind, int depth)
{
  ins_frame_t *f = ins_xmalloc(sizeof *f);
  *f = (ins_frame_t){.name = ins_xmalloc(n + 1), .kind = kind, .depth = depth};
  memcpy(f->name, name, n);
  f->name[n] = 0;
  return f;
}

ins_frame_t *ins_frame_tree(const char *name)
{
  return frame_new(name, strlen(name), INS_FRAME_ROOT, 0);
}

void ins_frame_add(ins_frame_t *root, const char *line, int64_t samples)
{
  enum { MAX_DEPTH = 256 };
  const char *frame[MAX_DEPTH];
  size_t len[MAX_DEPTH];
  int n = 0;
  for (const char *p = line; n < MAX_DEPTH; p += len[n++] + 1) {
    frame[n] = p;
    len[n] = strcspn(p, ";");
    if (!p[len[n]]) {
      n++;
      break;
    }
  }
  /* The library starts below the last interposer frame, else at the leaf's module. */
  int lib = n, op = n > 0 && strncmp(line, INS_FOLD_PROGRAM ";", sizeof INS_FOLD_PROGRAM) != 0;
  for (int i = n - 1; op && i > 0 && lib == n; i--)
    if (strncmp(frame[i], "libopjit", 8) == 0)
      lib = i + 1;
  if (op && lib == n && n > 1) {
    size_t ml = module_len(frame[n - 1], len[n - 1]);
    for (lib = n - 1; lib > 1 && module_len(frame[lib - 1], len[lib - 1]) == ml &&
                      memcmp(frame[lib - 1], frame[n - 1], ml) == 0;)
      lib--;
  }
  root->samples += samples;
  ins_frame_t *at = root;
  for (int i = 0; i < n; i++) {
    ins_frame_t **slot = &at->child;
    while (*slot && (strlen((*slot)->name) != len[i] || memcmp((*slot)->name, frame[i], len[i])))
      slot = &(*slot)->next;
    if (!*slot) {
      size_t ml = module_len(frame[i], len[i]);
      enum ins_frame_kind kind = INS_FRAME_PROGRAM;
      if (i == 0)
        kind = INS_FRAME_ROOT;
      else if (jit_module(frame[i], ml))
        kind = INS_FRAME_JIT;
      else if (strncmp(frame[i], "libopjit", 8) == 0)
        kind = INS_FRAME_AGENT;
      else if (op && (i >= lib || op_module(frame[i], ml)))
        kind = INS_FRAME_LIBRARY;
      *slot = frame_new(frame[i], len[i], kind, at->depth + 1);
    }
    at = *slot;
    at->samples += samples;
  }
}

/* Sorts the list at *head by samples, most first, then by name (insertion sort: siblings are
 * few). */
static void sort_siblings(ins_frame_t **head)
{
  ins_frame_t *sorted = NULL, *f = *head;
  while (f) {
    ins_frame_t *next = f->next, **slot = &sorted;
    while (*slot && ((*slot)->samples > f->samples ||
                     ((*slot)->samples == f->samples && strcmp((*slot)->name, f->name) <= 0)))
      slot = &(*slot)->next;
    f->next = *slot;
    *slot = f;
    f = next;
  }
  *head = sorted;
}

int64_t ins_frame_layout(ins_frame_t *root, int *depth)
{
  int64_t nodes = 1, x = root->offset;
  if (root->depth > *depth)
    *depth = root->depth;
  sort_siblings(&root->child);
  for (ins_frame_t *c = root->child; c; c = c->next) {
    c->offset = x;
    x += c->samples;
    nodes += ins_frame_layout(c, depth);
  }
  return nodes;
}

void ins_frame_free(ins_frame_t *root)
{
  while (root) {
    ins_frame_t *next = root->next;
    ins_frame_free(root->child);
    free(root->name);
    free(root);
    root = next;
  }
}
