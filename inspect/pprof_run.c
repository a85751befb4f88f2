/* SPDX-License-Identifier: MIT */
/* A run's sampled stacks as a pprof profile (ins_pprof_export): read with the queries
 * `opjit export` reads (the run, its stacks, each signature's name), turned into
 * ins_pprof_profile_t and encoded by pprof.c.
 *
 * The store keeps a stack as "module`symbol;..." text, outermost first, without addresses or
 * source lines, and one build-id per run: the executable's. So a frame's location carries
 * its module and function only, and the mapping whose name is the executable's basename
 * carries the program's build-id; the other modules' mappings have none. */
#include "cmd.h"
#include "db.h"
#include "fold.h"
#include "pprof.h"
#include "table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One stack row as read: its copied text, split in place into frames. */
typedef struct row_s {
  char *stack;
  /* A copy of stack split into whole frames: "module`+0x1f00" (code outside any symbol, an
   * offset in module) names a function, one per module and offset. */
  char *whole;
  char *sig, *name; /* NULL: outside any operator */
  int64_t count;
  ins_pprof_frame_t *frames;
  size_t nframes;
} row_t;

/* Splits r->stack ("module`symbol;...", outermost first) into r->frames, leaf first; the
 * module named exe gets build_id. Returns the number of frames. */
static size_t split_frames(row_t *r, const char *exe, const char *build_id)
{
  size_t n = 1;
  for (const char *p = r->stack; *p; p++)
    n += *p == ';';
  r->frames = ins_xmalloc(n * sizeof *r->frames);
  char *p = r->stack;
  for (size_t i = n; i-- > 0;) {
    char *end = p + strcspn(p, ";"), *tick;
    *end = 0;
    r->whole[end - r->stack] = 0;
    ins_pprof_frame_t *f = &r->frames[i];
    *f = (ins_pprof_frame_t){.module = "", .build_id = "", .function = p, .file = ""};
    if ((tick = strchr(p, '`'))) {
      *tick = 0;
      f->module = p;
      f->function = tick + 1;
      if (*exe && strcmp(p, exe) == 0)
        f->build_id = build_id;
    }
    if (!*f->function)
      f->function = INS_FOLD_UNKNOWN;
    else if (tick && strncmp(f->function, "+0x", 3) == 0)
      f->function = r->whole + (p - r->stack);
    p = end + 1;
  }
  return n;
}

/* What was read of a run. */
typedef struct reading_s {
  row_t *rows;
  size_t nrows, cap;
  char *exe, *build_id; /* the executable's basename and build-id */
  int64_t start_ns, wall_ns;
  int64_t hz; /* the run's sampling rate, 0 when it was not sampled */
  char comment[512];
} reading_t;

static void reading_free(reading_t *r)
{
  for (size_t i = 0; i < r->nrows; i++) {
    free(r->rows[i].stack);
    free(r->rows[i].whole);
    free(r->rows[i].sig);
    free(r->rows[i].name);
    free(r->rows[i].frames);
  }
  free(r->rows);
  free(r->exe);
  free(r->build_id);
}

/* Reads run's program, times and label into r. Returns 0, or INS_EXIT_FAIL (printed). */
static int read_run(st_db_t *db, int64_t run, reading_t *r)
{
  st_rows_t *st = ins_query(db, ST_Q_EXPORT_RUNS);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, run);
  int rc = st_rows_next(st);
  if (rc == 1) {
    const char *exe = st_rows_text(st, ST_EXPORT_EXE), *slash = strrchr(exe, '/');
    char label[256];
    r->exe = ins_xstrdup(slash ? slash + 1 : exe);
    r->build_id = ins_xstrdup(st_rows_text(st, ST_EXPORT_BUILD_ID));
    r->start_ns = st_rows_int(st, ST_EXPORT_START_NS);
    r->wall_ns = ins_run_wall_ns(r->start_ns, st_rows_int(st, ST_EXPORT_FLUSH_NS),
                                 st_rows_int(st, ST_EXPORT_END_NS));
    ins_program_label(exe, st_rows_text(st, ST_EXPORT_ARGV), 200, label, sizeof label);
    snprintf(r->comment, sizeof r->comment, "opjit run %lld: %s", (long long)run, label);
    ins_sampling_t sampling = {0};
    ins_sampling_add(&sampling, st_rows_text(st, ST_EXPORT_SAMPLING));
    r->hz = sampling.hz;
      rc = st_rows_next(st);
  }
  return ins_rows_finish(db, st, rc);
}

/* Reads run's stacks with samples into r->rows, split into frames. Returns 0, or
 * INS_EXIT_FAIL (printed). */
static int read_stacks(st_db_t *db, int64_t run, reading_t *r)
{
  st_rows_t *st = ins_query(db, ST_Q_EXPORT_STACKS);
  if (!st)
    return INS_EXIT_FAIL;
  st_rows_bind_int(st, 1, run);
  int rc;
  while ((rc = st_rows_next(st)) == 1) {
    if (st_rows_int(st, 2) <= 0)
      continue;
    r->rows = ins_grow(r->rows, r->nrows, &r->cap, sizeof *r->rows);
    row_t *row = &r->rows[r->nrows++];
    const char *stack = st_rows_text(st, 1);
    *row = (row_t){
        .stack = ins_xstrdup(stack), .whole = ins_xstrdup(stack), .count = st_rows_int(st, 2)};
    row->nframes = split_frames(row, r->exe, r->build_id);
    if (st_rows_type(st, 0) == ST_COL_NULL)
      continue;
    row->sig = ins_xstrdup(st_rows_text(st, 0));
    row->name = ins_xstrdup(st_rows_text(st, 3));
  }
  return ins_rows_finish(db, st, rc);
}

/* Writes len bytes of buf to path. Returns 0, or INS_EXIT_FAIL (printed). */
static int write_file(const char *path, const unsigned char *buf, size_t len)
{
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "opjit: cannot write %s: %s\n", path, strerror(errno));
    if (f)
      fclose(f);
    return INS_EXIT_FAIL;
  }
  return 0;
}

/* Writes run's profile to path (nothing when it has no stacks); *n receives its stacks and
 * *total its samples. Returns 0, or INS_EXIT_FAIL (printed). */
static int write_run(st_db_t *db, int64_t run, const char *path, int64_t *n, int64_t *total)
{
  reading_t r = {0};
  ins_pprof_sample_t *samples = NULL;
  unsigned char *out = NULL;
  size_t len = 0;
  int rc = INS_EXIT_FAIL;
  *n = *total = 0;
  if (read_run(db, run, &r) || read_stacks(db, run, &r))
    goto out;
  if (!r.nrows) {
    fprintf(stderr, "opjit: run %lld has no sampled stacks (see opjit top %lld)\n", (long long)run,
            (long long)run);
    goto out;
  }
  if (r.hz <= 0) {
    fprintf(stderr, "opjit: run %lld has no sampling rate recorded\n", (long long)run);
    goto out;
  }
  samples = ins_xmalloc(r.nrows * sizeof *samples);
  for (size_t i = 0; i < r.nrows; i++) {
    samples[i] = (ins_pprof_sample_t){.frames = r.rows[i].frames,
                                      .nframes = r.rows[i].nframes,
                                      .count = r.rows[i].count,
                                      .signature = r.rows[i].sig,
                                      .operator= r.rows[i].name };
    *total += r.rows[i].count;
  }
  ins_pprof_profile_t prof = {.samples = samples,
                              .nsamples = r.nrows,
                              .period_ns = 1000000000 / r.hz,
                              .time_ns = r.start_ns,
                              .duration_ns = r.wall_ns > 0 ? r.wall_ns : 0,
                              .comment = r.comment};
  if (ins_pprof_encode(&prof, &out, &len)) {
    fprintf(stderr, "opjit: cannot compress the profile (zlib)\n");
    goto out;
  }
  if ((rc = write_file(path, out, len)) == 0)
    *n = (int64_t)r.nrows;
out:
  free(out);
  free(samples);
  reading_free(&r);
  return rc;
}

int ins_pprof_export(const char *dbopt, int64_t run, const char *path)
{
  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  int64_t scope = run, n = 0, total = 0;
  int rc = INS_EXIT_FAIL;
  if (ins_pick_run(db, run, 0, INS_HAS_STACKS, &scope) || write_run(db, scope, path, &n, &total))
    goto out;
  fprintf(stderr, "opjit: wrote run %lld's %lld samples (%lld stacks) to %s\n", (long long)scope,
          (long long)total, (long long)n, path);
  rc = INS_EXIT_OK;
out:
  st_close(db);
  return rc;
}
