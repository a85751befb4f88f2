/* SPDX-License-Identifier: MIT */
/* `opjit export --pprof`: the file decoded with protobuf-c (exact structure on crafted stacks;
 * totals equal to `opjit flame`'s on a real sampled numpy run) and read by the real pprof,
 * `go tool pprof` (Debian's golang-go; skipped with a reason when go is not installed). */
#define _GNU_SOURCE
#include "helpers.h"
#include "profile.pb-c.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

typedef Perftools__Profiles__Profile profile_t;

/* The profile in the gzip'ed file at path, decoded; fails the test when it does not decode. */
static profile_t *decode(const char *path)
{
  gzFile f = gzopen(path, "rb");
  cr_assert(f, "cannot open %s", path);
  size_t len = 0, cap = 1 << 16;
  unsigned char *buf = malloc(cap);
  for (int got; (got = gzread(f, buf + len, (unsigned)(cap - len))) > 0;)
    if ((len += (size_t)got) == cap)
      buf = realloc(buf, cap *= 2);
  int err;
  gzerror(f, &err);
  cr_assert_eq(err, Z_OK, "%s is not gzip", path);
  gzclose(f);
  profile_t *p = perftools__profiles__profile__unpack(NULL, len, buf);
  free(buf);
  cr_assert(p, "%s is not a profile.proto Profile", path);
  return p;
}

static const char *s_(const profile_t *p, int64_t i)
{
  cr_assert(i >= 0 && (size_t)i < p->n_string_table, "string index %lld", (long long)i);
  return p->string_table[i];
}

static const Perftools__Profiles__Location *loc_(const profile_t *p, uint64_t id)
{
  for (size_t i = 0; i < p->n_location; i++)
    if (p->location[i]->id == id)
      return p->location[i];
  cr_assert_fail("no location %llu", (unsigned long long)id);
  return NULL;
}

static const Perftools__Profiles__Mapping *map_(const profile_t *p, uint64_t id)
{
  for (size_t i = 0; i < p->n_mapping; i++)
    if (p->mapping[i]->id == id)
      return p->mapping[i];
  cr_assert_fail("no mapping %llu", (unsigned long long)id);
  return NULL;
}

/* The name of location id's function. */
static const char *func_(const profile_t *p, uint64_t id)
{
  const Perftools__Profiles__Location *l = loc_(p, id);
  cr_assert_eq(l->n_line, 1);
  for (size_t i = 0; i < p->n_function; i++)
    if (p->function[i]->id == l->line[0]->function_id)
      return s_(p, p->function[i]->name);
  cr_assert_fail("no function %llu", (unsigned long long)l->line[0]->function_id);
  return NULL;
}

/* The value of sample s's label key ("" when it has none). */
static const char *label_(const profile_t *p, const Perftools__Profiles__Sample *s, const char *key)
{
  for (size_t i = 0; i < s->n_label; i++)
    if (strcmp(s_(p, s->label[i]->key), key) == 0)
      return s_(p, s->label[i]->str);
  return "";
}

/* What every profile promises: the sample and period types, "" first, ids that resolve. */
static void expect_well_formed(const profile_t *p, int64_t period_ns)
{
  cr_assert_eq(p->n_sample_type, 2);
  cr_expect_str_eq(s_(p, p->sample_type[0]->type), "samples");
  cr_expect_str_eq(s_(p, p->sample_type[0]->unit), "count");
  cr_expect_str_eq(s_(p, p->sample_type[1]->type), "cpu");
  cr_expect_str_eq(s_(p, p->sample_type[1]->unit), "nanoseconds");
  cr_assert(p->period_type);
  cr_expect_str_eq(s_(p, p->period_type->type), "cpu");
  cr_expect_str_eq(s_(p, p->period_type->unit), "nanoseconds");
  cr_expect_eq(p->period, period_ns);
  cr_expect_str_eq(s_(p, 0), "");
  for (size_t i = 0; i < p->n_sample; i++) {
    const Perftools__Profiles__Sample *s = p->sample[i];
    cr_assert_eq(s->n_value, 2);
    cr_expect_eq(s->value[1], s->value[0] * period_ns);
    for (size_t k = 0; k < s->n_location_id; k++) {
      const Perftools__Profiles__Location *l = loc_(p, s->location_id[k]);
      if (l->mapping_id)
        cr_expect(map_(p, l->mapping_id)->has_functions);
      cr_expect_neq(strlen(func_(p, l->id)), 0);
    }
  }
}

/* Sums column col of p's samples. */
static int64_t total(const profile_t *p, size_t col)
{
  int64_t t = 0;
  for (size_t i = 0; i < p->n_sample; i++)
    t += p->sample[i]->value[col];
  return t;
}

/* The sample whose leaf function is leaf (fails the test when none). */
static const Perftools__Profiles__Sample *by_leaf(const profile_t *p, const char *leaf)
{
  for (size_t i = 0; i < p->n_sample; i++)
    if (p->sample[i]->n_location_id && strcmp(func_(p, p->sample[i]->location_id[0]), leaf) == 0)
      return p->sample[i];
  cr_assert_fail("no sample ends in %s", leaf);
  return NULL;
}

/* `go tool pprof -raw` on path: the sums of the two sample columns into tot[2]; skips the test
 * when go is not installed. */
static void go_pprof_raw(const char *path, int64_t tot[2])
{
  if (access("/usr/bin/go", X_OK) != 0)
    cr_skip_test("go is not installed (Debian's golang-go): the real pprof is not run");
  char *cmd;
  cr_assert(asprintf(&cmd, "/usr/bin/go tool pprof -raw -symbolize=none %s 2>&1", path) > 0);
  FILE *f = popen(cmd, "r");
  cr_assert(f);
  char line[4096];
  int in_samples = 0, header = 0;
  tot[0] = tot[1] = 0;
  while (fgets(line, sizeof line, f)) {
    long long a, b;
    if (strncmp(line, "Samples:", 8) == 0)
      in_samples = 1;
    else if (in_samples && strstr(line, "samples/count cpu/nanoseconds"))
      header = 1;
    else if (in_samples && sscanf(line, " %lld %lld:", &a, &b) == 2) {
      tot[0] += a;
      tot[1] += b;
    } else if (in_samples && strncmp(line, "Locations", 9) == 0)
      in_samples = 0;
  }
  cr_expect_eq(pclose(f), 0, "%s failed", cmd);
  cr_expect(header, "no sample types in pprof's output");
  free(cmd);
}

/* ---- crafted stacks: the exact structure ---- */

static const fake_sig_t one[] = {{.m = 64, .sig = "aaaa000000000064", .calls = 10}};
static const fake_stack_t stacks[] = {
    {64, "fake`main;libopjit.so`cblas_sgemm;libopenblas.so.0`sgemm_kernel", 20},
    {64, "fake`main;libopjit.so`cblas_sgemm;libopenblas.so.0`+0x1f00", 10},
    {0, "fake`main;;fake`+0x1f00", 5},
    {0, "fake`main;fake`busy", 60},
};
static const fake_samples_t sampled = {
    .sampling = "{\"mode\":\"perf\",\"event\":\"task-clock\",\"hz\":100,\"samples\":95,\"lost\":0}",
    .stacks = stacks,
    .nstacks = 4};

Test(pprof, crafted_stacks_map_to_samples_locations_functions_and_mappings)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db"), *out = path_in(dir, "p.pb.gz");
  int64_t run = craft_run(db, 0, 0, 1, one, 1);
  craft_samples(db, run, &sampled);
  sql_exec(db, "UPDATE programs SET build_id = '0123456789abcdef'");
  proc_t p = opjit(NULL, (const char *[]){"export", "--pprof", "--db", db, "-o", out, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.err, "wrote run 1's 95 samples (4 stacks)"), "%s", p.err);
  proc_free(&p);

  profile_t *prof = decode(out);
  expect_well_formed(prof, 10000000);
  cr_expect_eq(prof->n_sample, 4);
  cr_expect_eq(total(prof, 0), 95);
  cr_expect_eq(total(prof, 1), 950000000);
  cr_expect_eq(prof->n_mapping, 3, "fake, libopjit.so, libopenblas.so.0");
  cr_expect_eq(prof->n_function, 7);
  cr_expect_eq(prof->n_location, 7);
  cr_expect_str_eq(s_(prof, prof->default_sample_type), "cpu");
  cr_assert_eq(prof->n_comment, 1);
  cr_expect(strstr(s_(prof, prof->comment[0]), "opjit run 1: fake --size 42"), "%s",
            s_(prof, prof->comment[0]));
  cr_expect_gt(prof->time_nanos, 0);
  cr_expect_gt(prof->duration_nanos, 0);

  const Perftools__Profiles__Sample *s = by_leaf(prof, "sgemm_kernel");
  cr_assert_eq(s->n_location_id, 3, "leaf first");
  cr_expect_str_eq(func_(prof, s->location_id[1]), "cblas_sgemm");
  cr_expect_str_eq(func_(prof, s->location_id[2]), "main");
  cr_expect_eq(s->value[0], 20);
  cr_expect_str_eq(label_(prof, s, "signature"), "aaaa000000000064");
  cr_expect_str_eq(label_(prof, s, "operator"), "cblas_sgemm row NN 64x64x64 β=0");
  const Perftools__Profiles__Mapping *m = map_(prof, loc_(prof, s->location_id[0])->mapping_id);
  cr_expect_str_eq(s_(prof, m->filename), "libopenblas.so.0");
  cr_expect_str_eq(s_(prof, m->build_id), "", "the store has no build-id for libraries");
  m = map_(prof, loc_(prof, s->location_id[2])->mapping_id);
  cr_expect_str_eq(s_(prof, m->filename), "fake");
  cr_expect_str_eq(s_(prof, m->build_id), "0123456789abcdef", "the program's build-id");

  s = by_leaf(prof, "libopenblas.so.0`+0x1f00");
  cr_expect_eq(s->value[0], 10);
  cr_expect_str_eq(label_(prof, s, "signature"), "aaaa000000000064");
  s = by_leaf(prof, "fake`+0x1f00"); /* the same offset in another module: its own function */
  cr_assert_eq(s->n_location_id, 3);
  cr_expect_str_eq(func_(prof, s->location_id[1]), "[unknown]");
  cr_expect_eq(loc_(prof, s->location_id[1])->mapping_id, 0, "a frame without a module");
  cr_expect_eq(s->n_label, 0, "outside operators: no labels");
  s = by_leaf(prof, "busy");
  cr_expect_eq(s->value[0], 60);
  cr_expect_eq(s->n_label, 0);
  perftools__profiles__profile__free_unpacked(prof, NULL);

  int64_t tot[2];
  go_pprof_raw(out, tot);
  cr_expect_eq(tot[0], 95);
  cr_expect_eq(tot[1], 950000000);
}

Test(pprof, usage_errors_and_a_run_without_stacks)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db"), *out = path_in(dir, "p.pb.gz");
  craft_run(db, 0, 0, 1, one, 1);
  proc_t p = opjit(NULL, (const char *[]){"export", "--pprof", "--db", db, NULL});
  cr_expect_eq(p.status, 2, "-o is required");
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"export", "--json", "--pprof", "--db", db, "-o", out, NULL});
  cr_expect_eq(p.status, 2, "one format");
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"export", "--json", "--db", db, "-o", out, NULL});
  cr_expect_eq(p.status, 2, "--json writes to stdout");
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"export", "--pprof", "--db", db, "-o", out, "1", NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "run 1 has no sampled stacks"), "%s", p.err);
  cr_expect_neq(access(out, F_OK), 0, "no file written");
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"export", "--pprof", "--db", db, "-o", out, "7", NULL});
  cr_expect_eq(p.status, 1, "no run 7");
  proc_free(&p);
}

/* ---- a real sampled run: totals equal opjit flame's ---- */

/* 1.5 s of the process's CPU time (not of the clock: the samples count CPU time, which a
 * loaded machine gives out slowly). */
#define NUMPY_SGEMM_LOOP                                                                           \
  "import numpy as np, time\n"                                                                     \
  "a = np.ones((192, 192), dtype=np.float32); end = time.process_time() + 1.5\n"                   \
  "while time.process_time() < end: a @ a\n"

Test(pprof, real_run_has_flame_totals_labels_and_the_programs_build_id)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db"), *out = path_in(dir, "p.pb.gz");
  proc_t p = opjit((const char *[]){"OPJIT_SAMPLE_HZ=499", NULL},
                   (const char *[]){"run", "--db", db, "--", PYTHON, "-c", NUMPY_SGEMM_LOOP, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"flame", "--db", db, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  int64_t lines = 0, samples = 0, in_ops = 0;
  for (char *line = strtok(p.out, "\n"); line; line = strtok(NULL, "\n"), lines++) {
    int64_t n = strtoll(strrchr(line, ' ') + 1, NULL, 10);
    samples += n;
    in_ops += strncmp(line, "[program];", 10) != 0 ? n : 0;
  }
  proc_free(&p);
  cr_assert_gt(samples, 50, "a 1.5 s loop sampled at 499 Hz");
  cr_assert_gt(in_ops, 0, "samples in sgemm");

  p = opjit(NULL, (const char *[]){"export", "--json", "--db", db, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *doc = proc_json(&p), *r = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "runs"), 0);
  const char *build_id =
      cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "program"), "build_id"));
  cr_assert(build_id && *build_id, "Debian's python3 has a build-id");
  int64_t hz =
      (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "sampling"), "hz"));
  cr_assert_eq(hz, 499);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"export", "--pprof", "--db", db, "-o", out, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  proc_free(&p);
  profile_t *prof = decode(out);
  int64_t period = 1000000000 / hz;
  expect_well_formed(prof, period);
  cr_expect_eq((int64_t)prof->n_sample, lines, "one sample per folded line");
  cr_expect_eq(total(prof, 0), samples, "flame's total");
  cr_expect_eq(total(prof, 1), samples * period);
  int64_t labelled = 0;
  for (size_t i = 0; i < prof->n_sample; i++) {
    const char *sig = label_(prof, prof->sample[i], "signature");
    if (!*sig)
      continue;
    labelled += prof->sample[i]->value[0];
    cr_expect_eq(strlen(sig), 16, "a signature id: %s", sig);
    cr_expect(strstr(label_(prof, prof->sample[i], "operator"), "cblas_sgemm"));
  }
  cr_expect_eq(labelled, in_ops, "operator samples carry their signature");
  int python = 0;
  for (size_t i = 0; i < prof->n_mapping; i++)
    if (strncmp(s_(prof, prof->mapping[i]->filename), "python3", 7) == 0) {
      python = 1;
      cr_expect_str_eq(s_(prof, prof->mapping[i]->build_id), build_id);
    }
  cr_expect(python, "a python3 mapping");
  perftools__profiles__profile__free_unpacked(prof, NULL);
  cJSON_Delete(doc);

  int64_t tot[2];
  go_pprof_raw(out, tot);
  cr_expect_eq(tot[0], samples, "pprof reads flame's total");
  cr_expect_eq(tot[1], samples * period);
}
