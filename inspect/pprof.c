/* SPDX-License-Identifier: MIT */
/* The pprof encoder: an in-memory profile to profile.proto through protobuf-c (the message
 * types generated from inspect/proto/profile.proto), gzip'ed with zlib.
 *
 * Everything is sized up front from the profile (each frame adds at most one mapping, one
 * function, one location and four strings), so the tables never grow: one open-addressing
 * table interns strings, mappings, functions and locations alike, by their bytes with a
 * leading kind byte, and hands out each kind's ids in order of first use. */
#include "pprof.h"

#include "profile.pb-c.h"
#include "table.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum kind { K_STRING, K_MAPPING, K_FUNCTION, K_LOCATION, K__N };

typedef struct slot_s {
  unsigned char *key; /* the kind byte, the key's bytes, a NUL; NULL: an empty slot */
  size_t len;         /* with the kind byte */
  uint64_t id;
} slot_t;

typedef struct enc_s {
  slot_t *slot;
  size_t mask;
  uint64_t n[K__N]; /* ids handed out per kind */
  char **strings;   /* the string table: the keys of K_STRING */
  Perftools__Profiles__Mapping *maps, **mapp;
  Perftools__Profiles__Function *funcs, **funcp;
  Perftools__Profiles__Location *locs, **locp;
  Perftools__Profiles__Line *lines, **linep; /* one per location */
} enc_t;

/* FNV-1a of the kind byte k, then p[0..n). */
static uint64_t hash(enum kind k, const unsigned char *p, size_t n)
{
  uint64_t h = (1469598103934665603ull ^ (unsigned char)k) * 1099511628211ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* The slot of key[0..n) of kind k: the one it was given, or a new one holding a copy of it
 * and the next id of its kind (*added set). */
static slot_t *intern(enc_t *e, enum kind k, const void *key, size_t n, int *added)
{
  for (size_t i = hash(k, key, n) & e->mask;; i = (i + 1) & e->mask) {
    slot_t *s = &e->slot[i];
    if (!s->key) {
      s->key = ins_xmalloc(n + 2);
      s->key[0] = (unsigned char)k;
      memcpy(s->key + 1, key, n);
      s->key[n + 1] = 0;
      s->len = n + 1;
      s->id = e->n[k]++;
      *added = 1;
      return s;
    }
    if (s->key[0] == k && s->len == n + 1 && memcmp(s->key + 1, key, n) == 0) {
      *added = 0;
      return s;
    }
  }
}

/* The string table index of s (0: ""). */
static int64_t str(enc_t *e, const char *s)
{
  int added;
  slot_t *slot = intern(e, K_STRING, s, strlen(s), &added);
  if (added)
    e->strings[slot->id] = (char *)slot->key + 1;
  return (int64_t)slot->id;
}

/* The mapping id (from 1) of module with build-id. */
static uint64_t mapping(enc_t *e, const char *module, const char *build_id)
{
  int64_t key[2] = {str(e, module), str(e, build_id)};
  int added;
  uint64_t i = intern(e, K_MAPPING, key, sizeof key, &added)->id;
  if (added) {
    Perftools__Profiles__Mapping *m = &e->maps[i];
    perftools__profiles__mapping__init(m);
    m->id = i + 1;
    m->filename = key[0];
    m->build_id = key[1];
    m->has_functions = 1;
    e->mapp[i] = m;
  }
  return i + 1;
}

/* The function id (from 1) of name in file. */
static uint64_t function(enc_t *e, const char *name, const char *file)
{
  int64_t key[2] = {str(e, name), str(e, file)};
  int added;
  uint64_t i = intern(e, K_FUNCTION, key, sizeof key, &added)->id;
  if (added) {
    Perftools__Profiles__Function *f = &e->funcs[i];
    perftools__profiles__function__init(f);
    f->id = i + 1;
    f->name = f->system_name = key[0];
    f->filename = key[1];
    e->funcp[i] = f;
  }
  return i + 1;
}

/* The location id (from 1) of frame f. */
static uint64_t location(enc_t *e, const ins_pprof_frame_t *f)
{
  uint64_t key[4] = {*f->module ? mapping(e, f->module, f->build_id) : 0,
                     function(e, f->function, f->file), f->address, (uint64_t)f->line};
  int added;
  uint64_t i = intern(e, K_LOCATION, key, sizeof key, &added)->id;
  if (added) {
    Perftools__Profiles__Location *l = &e->locs[i];
    Perftools__Profiles__Line *line = &e->lines[i];
    perftools__profiles__location__init(l);
    perftools__profiles__line__init(line);
    line->function_id = key[1];
    line->line = f->line;
    e->linep[i] = line;
    l->id = i + 1;
    l->mapping_id = key[0];
    l->address = f->address;
    l->n_line = 1;
    l->line = &e->linep[i];
    e->locp[i] = l;
  }
  return i + 1;
}

/* Gzips in[0..n) into *out (malloc'ed, *len bytes). Returns 0, or -1 when zlib fails. */
static int gzip(const unsigned char *in, size_t n, unsigned char **out, size_t *len)
{
  z_stream z = {0};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return -1;
  size_t cap = deflateBound(&z, (uLong)n);
  *out = ins_xmalloc(cap);
  z.next_in = (unsigned char *)in;
  z.avail_in = (uInt)n;
  z.next_out = *out;
  z.avail_out = (uInt)cap;
  int rc = deflate(&z, Z_FINISH);
  *len = cap - z.avail_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) {
    free(*out);
    *out = NULL;
    return -1;
  }
  return 0;
}

int ins_pprof_encode(const ins_pprof_profile_t *p, unsigned char **out, size_t *len)
{
  size_t frames = 0, labels = 0;
  for (size_t i = 0; i < p->nsamples; i++) {
    frames += p->samples[i].nframes;
    labels += (p->samples[i].signature != NULL) + (p->samples[i].operator!= NULL);
  }
  size_t nstr = 8 + 4 * frames + labels, cap = 16;
  while (cap < 2 * (nstr + 3 * frames))
    cap *= 2;
  enc_t e = {.slot = ins_xmalloc(cap * sizeof *e.slot), .mask = cap - 1};
  memset(e.slot, 0, cap * sizeof *e.slot);
  e.strings = ins_xmalloc(nstr * sizeof *e.strings);
  e.maps = ins_xmalloc(frames * sizeof *e.maps);
  e.mapp = ins_xmalloc(frames * sizeof *e.mapp);
  e.funcs = ins_xmalloc(frames * sizeof *e.funcs);
  e.funcp = ins_xmalloc(frames * sizeof *e.funcp);
  e.locs = ins_xmalloc(frames * sizeof *e.locs);
  e.locp = ins_xmalloc(frames * sizeof *e.locp);
  e.lines = ins_xmalloc(frames * sizeof *e.lines);
  e.linep = ins_xmalloc(frames * sizeof *e.linep);

  Perftools__Profiles__Profile prof = PERFTOOLS__PROFILES__PROFILE__INIT;
  str(&e, ""); /* the table's first string must be "" */
  Perftools__Profiles__ValueType types[2] = {PERFTOOLS__PROFILES__VALUE_TYPE__INIT,
                                             PERFTOOLS__PROFILES__VALUE_TYPE__INIT},
                                 period = PERFTOOLS__PROFILES__VALUE_TYPE__INIT;
  Perftools__Profiles__ValueType *typep[2] = {&types[0], &types[1]};
  types[0].type = str(&e, "samples");
  types[0].unit = str(&e, "count");
  types[1].type = period.type = str(&e, "cpu");
  types[1].unit = period.unit = str(&e, "nanoseconds");
  int64_t sig_key = str(&e, "signature"), op_key = str(&e, "operator");
  int64_t comment = p->comment ? str(&e, p->comment) : 0;

  Perftools__Profiles__Sample *samples = ins_xmalloc(p->nsamples * sizeof *samples);
  Perftools__Profiles__Sample **samplep = ins_xmalloc(p->nsamples * sizeof *samplep);
  Perftools__Profiles__Label *label = ins_xmalloc(labels * sizeof *label);
  Perftools__Profiles__Label **labelp = ins_xmalloc(labels * sizeof *labelp);
  uint64_t *locids = ins_xmalloc(frames * sizeof *locids);
  int64_t *values = ins_xmalloc(2 * p->nsamples * sizeof *values);
  size_t at = 0, lab = 0;
  for (size_t i = 0; i < p->nsamples; i++) {
    const ins_pprof_sample_t *s = &p->samples[i];
    Perftools__Profiles__Sample *o = &samples[i];
    perftools__profiles__sample__init(o);
    o->location_id = &locids[at];
    for (size_t f = 0; f < s->nframes; f++)
      locids[at++] = location(&e, &s->frames[f]);
    o->n_location_id = s->nframes;
    o->value = &values[2 * i];
    o->n_value = 2;
    o->value[0] = s->count;
    o->value[1] = s->count * p->period_ns;
    o->label = &labelp[lab];
    const char *text[2] = {s->signature, s->operator};
    int64_t key[2] = {sig_key, op_key};
    for (int k = 0; k < 2; k++) {
      if (!text[k])
        continue;
      perftools__profiles__label__init(&label[lab]);
      label[lab].key = key[k];
      label[lab].str = str(&e, text[k]);
      labelp[lab] = &label[lab];
      lab++;
      o->n_label++;
    }
    samplep[i] = o;
  }
  prof.n_sample_type = 2;
  prof.sample_type = typep;
  prof.default_sample_type = types[1].type;
  prof.n_sample = p->nsamples;
  prof.sample = samplep;
  prof.n_mapping = e.n[K_MAPPING];
  prof.mapping = e.mapp;
  prof.n_location = e.n[K_LOCATION];
  prof.location = e.locp;
  prof.n_function = e.n[K_FUNCTION];
  prof.function = e.funcp;
  prof.n_string_table = e.n[K_STRING];
  prof.string_table = e.strings;
  prof.time_nanos = p->time_ns;
  prof.duration_nanos = p->duration_ns;
  prof.period_type = &period;
  prof.period = p->period_ns;
  prof.n_comment = p->comment != NULL;
  prof.comment = &comment;

  size_t n = perftools__profiles__profile__get_packed_size(&prof);
  unsigned char *packed = ins_xmalloc(n);
  perftools__profiles__profile__pack(&prof, packed);
  int rc = gzip(packed, n, out, len);

  free(packed);
  free(values);
  free(locids);
  free(labelp);
  free(label);
  free(samplep);
  free(samples);
  for (size_t i = 0; i < cap; i++)
    free(e.slot[i].key);
  free(e.slot);
  free(e.strings);
  free(e.maps);
  free(e.mapp);
  free(e.funcs);
  free(e.funcp);
  free(e.locs);
  free(e.locp);
  free(e.lines);
  free(e.linep);
  return rc;
}
