/* SPDX-License-Identifier: MIT */
/* `opjit doctor`: the option table, the database report, the health verdict, the stored
 * machine model and the system BLAS's core against this CPU. */
#include "helpers.h"
#include "agent/machine.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const fake_sig_t one[] = {{.m = 16, .calls = 5, .timed_calls = 1, .timed_ns = 100}};

Test(doctor, json_has_options_bad_values_and_the_database)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, 0, 1, one, 1);
  craft_run(db, 0, 0, 1, one, 1);
  proc_t p = opjit((const char *[]){"OPJIT_TIME_EVERY=lots", "OPJIT_LOG=debug", NULL},
                   (const char *[]){"doctor", "--db", db, "--json", NULL});
  cr_assert_eq(p.status, 0, "%s\n%s", p.out, p.err);
  cJSON *j = proc_json(&p), *o;
  int seen = 0;
  cJSON_ArrayForEach(o, cJSON_GetObjectItem(j, "options"))
  {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(o, "name"));
    const char *value = cJSON_GetStringValue(cJSON_GetObjectItem(o, "value"));
    const char *source = cJSON_GetStringValue(cJSON_GetObjectItem(o, "source"));
    cr_assert(name && value && source && cJSON_GetObjectItem(o, "help"));
    if (strcmp(name, "OPJIT_LOG") == 0) {
      seen++;
      cr_expect(strcmp(value, "debug") == 0 && strcmp(source, "env") == 0);
    }
    if (strcmp(name, "OPJIT_TIME_EVERY") == 0) {
      seen++;
      cr_expect(strcmp(value, "16") == 0 && strstr(source, "bad"), "%s %s", value, source);
    }
  }
  cr_expect_eq(seen, 2);
  const cJSON *w = cJSON_GetObjectItem(j, "option_warnings");
  cr_expect_eq(cJSON_GetArraySize(w), 1);
  cr_expect(strstr(cJSON_GetStringValue(cJSON_GetArrayItem(w, 0)), "OPJIT_TIME_EVERY='lots'"));
  const cJSON *d = cJSON_GetObjectItem(j, "database");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(d, "path")), db);
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(d, "exists")));
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(d, "runs")), 2);
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(d, "schema_version")), ST_SCHEMA_VERSION);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(d, "quick_check")), "ok");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(d, "journal_mode")), "wal");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(d, "mode")), "0600");
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(j, "healthy")));
  const cJSON *a = cJSON_GetObjectItem(j, "agent");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(a, "path")),
                   OPJIT_BUILD_DIR "/libopjit.so");
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(a, "store_module_found")));
  const cJSON *m = cJSON_GetObjectItem(j, "machine");
  cr_expect(cJSON_IsBool(cJSON_GetObjectItem(m, "avx2")));
  cr_expect(cJSON_IsBool(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "perf_task_clock"), "ok")));
  struct timespec res; /* the scheduler's tick, as the sampler reads it (Linux: 100-1000 Hz) */
  cr_assert_eq(clock_getres(CLOCK_MONOTONIC_COARSE, &res), 0);
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(m, "tick_hz")),
               (double)(1000000000L / res.tv_nsec));
  cJSON_Delete(j);
  proc_free(&p);
}

/* doctor --json's machine object under the environment env. */
static cJSON *doctor_machine(const char **env, cJSON **doc, proc_t *p)
{
  /* a missing folder in one anyone can write: doctor finds it usable as any user */
  *p = opjit(env, (const char *[]){"doctor", "--db", "/tmp/opjit-nonexistent/p.db", "--json",
                                   NULL});
  cr_assert_eq(p->status, 0, "%s", p->err);
  *doc = proc_json(p);
  return cJSON_GetObjectItem(*doc, "machine");
}

static const char *picks(const cJSON *m)
{
  return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "sampling"), "picks"));
}

static int probe_ok(const cJSON *m, const char *key)
{
  return cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(m, key), "ok"));
}

/* The sampling line follows OPJIT_EVENTS and OPJIT_SAMPLE_HZ through the sampler's ladder, with
 * what this machine's perf events did when probed. */
Test(doctor, sampling_follows_the_events_the_rate_and_the_probes)
{
  cJSON *doc;
  proc_t p;
  const cJSON *m = doctor_machine((const char *[]){"OPJIT_SAMPLE_HZ=0", NULL}, &doc, &p);
  cr_expect_str_eq(picks(m), "off");
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "sampling"),
                                                      "ladder")), 0);
  cJSON_Delete(doc), proc_free(&p);

  m = doctor_machine((const char *[]){"OPJIT_EVENTS=timer", NULL}, &doc, &p);
  cr_expect_str_eq(picks(m), "timer");
  cJSON_Delete(doc), proc_free(&p);

  m = doctor_machine((const char *[]){"OPJIT_EVENTS=task-clock", "OPJIT_SAMPLE_HZ=1000", NULL},
                     &doc, &p);
  const cJSON *l = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "sampling"), "ladder");
  cr_expect_eq(cJSON_GetArraySize(l), 2);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetArrayItem(l, 0)), "task-clock");
  cr_expect_str_eq(picks(m), probe_ok(m, "perf_task_clock") ? "task-clock" : "timer");
  cJSON_Delete(doc), proc_free(&p);

  /* auto at a rate the tick keeps: a timer before task-clock unless the PMU answers (a kernel
   * that does not say its tick gets task-clock first) */
  m = doctor_machine((const char *[]){"OPJIT_EVENTS=auto", "OPJIT_SAMPLE_HZ=50", NULL}, &doc,
                     &p);
  l = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "sampling"), "ladder");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetArrayItem(l, 0)), "cycles");
  int timer_first = cJSON_GetNumberValue(cJSON_GetObjectItem(m, "tick_hz")) >= 50;
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetArrayItem(l, 1)),
                   timer_first ? "timer" : "task-clock");
  cr_expect_str_eq(picks(m), probe_ok(m, "perf_cycles")                       ? "cycles"
                             : timer_first || !probe_ok(m, "perf_task_clock") ? "timer"
                                                                              : "task-clock");
  cJSON_Delete(doc), proc_free(&p);
}

Test(doctor, unusable_database_is_unhealthy_missing_one_is_not)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, 0, 1, one, 1);
  sql_exec(db, "PRAGMA user_version=99");
  proc_t p = opjit(NULL, (const char *[]){"doctor", "--db", db, NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.out, "newer") && strstr(p.out, "unhealthy"), "%s", p.out);
  cr_expect(strstr(p.out, "OPJIT_MAX_SIGS"), "the option table is still shown: %s", p.out);
  proc_free(&p);

  char *none = path_in(dir, "none.db");
  p = opjit(NULL, (const char *[]){"doctor", "--db", none, "--json", NULL});
  cr_expect_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "database"), "exists")));
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(j, "healthy")));
  cJSON_Delete(j);
  proc_free(&p);
}

/* doctor as unprivileged_uid() on db: expects usable no, one error line saying what stops the
 * agent and how to fix it, exit 1; --json says the same. */
static void expect_unusable(const char *db, const char *stop)
{
  proc_t p = opjit_unprivileged(NULL, (const char *[]){"doctor", "--db", db, NULL});
  if (p.status == 254)
    cr_skip_test("%s", p.err);
  cr_expect_eq(p.status, 1, "%s: %s\n%s", db, p.out, p.err);
  const char *error = strstr(p.out, "\nerror: ");
  cr_expect(strstr(p.out, "usable               no") && error && strstr(error, stop) &&
            strstr(error, "chmod u+w") && strstr(p.out, "unhealthy"), "%s: %s", db, p.out);
  proc_free(&p);
  p = opjit_unprivileged(NULL, (const char *[]){"doctor", "--db", db, "--json", NULL});
  cr_expect_eq(p.status, 1, "%s: %s", db, p.err);
  cJSON *j = proc_json(&p), *d = cJSON_GetObjectItem(j, "database");
  cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(d, "usable")), "%s", db);
  cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(j, "healthy")), "%s", db);
  const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(d, "error"));
  cr_expect(why && strstr(why, stop), "%s: %s", db, why ? why : "no error");
  cJSON_Delete(j);
  proc_free(&p);
}

/* The agent records as the user who runs it, so doctor judges the database as that user: a
 * read-only file, or a folder where the file (or a missing folder on its way) cannot be
 * created, is unusable. Root ignores permission bits: as root the checks run as nobody. */
Test(doctor, database_the_agent_cannot_write_is_unusable)
{
  char *dir = scratch_dir(), *mine = path_in(dir, "mine"), *locked = path_in(dir, "locked");
  char *ro = path_in(mine, "ro.db"), *fresh = path_in(mine, "new.db");
  uid_t uid = unprivileged_uid();
  cr_assert(mkdir(mine, 0700) == 0 && mkdir(locked, 0555) == 0);
  craft_run(ro, 0, 0, 1, one, 1);
  cr_assert(chmod(ro, 0400) == 0 && chmod(dir, 0711) == 0); /* nobody reaches mine and locked */
  cr_assert(chown(mine, uid, (gid_t)-1) == 0 && chown(ro, uid, (gid_t)-1) == 0 &&
            chown(locked, uid, (gid_t)-1) == 0);

  proc_t p = opjit_unprivileged(NULL, (const char *[]){"doctor", "--db", fresh, NULL});
  if (p.status == 254)
    cr_skip_test("%s", p.err);
  cr_expect_eq(p.status, 0, "the user's own folder: %s\n%s", p.out, p.err);
  cr_expect(strstr(p.out, "not created yet"), "%s", p.out);
  proc_free(&p);

  expect_unusable(ro, "cannot write");
  char *in_locked = path_in(locked, "new.db"), *below_locked = path_in(locked, "sub/new.db");
  expect_unusable(in_locked, "cannot create");
  expect_unusable(below_locked, "cannot create");
  /* A profile without its WAL files in a folder that became read-only: neither SQLite's
   * reader nor the agent can create them; the message names the folder, not a failed read. */
  char *shut = path_in(dir, "shut"), *kept = path_in(shut, "p.db");
  cr_assert(mkdir(shut, 0700) == 0);
  craft_run(kept, 0, 0, 1, one, 1);
  cr_assert(access(path_in(shut, "p.db-wal"), F_OK) != 0, "the crafted profile kept its WAL");
  cr_assert(chown(shut, uid, (gid_t)-1) == 0 && chown(kept, uid, (gid_t)-1) == 0 &&
            chmod(shut, 0555) == 0);
  expect_unusable(kept, "cannot create");
}

/* This machine's "flags" line and CPU key, as the agent computes it. */
static void this_cpu(char *flags, size_t flen, char *key, size_t klen)
{
  static char cpuinfo[1 << 16];
  char model[256] = "";
  FILE *f = fopen("/proc/cpuinfo", "r");
  cr_assert_not_null(f);
  cpuinfo[fread(cpuinfo, 1, sizeof cpuinfo - 1, f)] = 0;
  fclose(f);
  flags[0] = 0;
  for (const char *l = cpuinfo; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
    const char *v = strchr(l, ':');
    size_t n = v ? strcspn(v + 2, "\n") : 0;
    if (!model[0] && strncmp(l, "model name", 10) == 0 && v)
      snprintf(model, sizeof model, "%.*s", (int)n, v + 2);
    if (!flags[0] && strncmp(l, "flags", 5) == 0 && v)
      snprintf(flags, flen, "%.*s", (int)n, v + 2);
  }
  ag_machine_cpu_key(model, flags, key, klen);
}

Test(doctor, shows_the_stored_machine_model_or_how_to_get_it)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db"), flags[4096], key[320];
  this_cpu(flags, sizeof flags, key, sizeof key);
  static const fake_sig_t two[] = {{.m = 16, .calls = 5}, {.m = 24, .calls = 5}};
  int64_t run = craft_run(db, 0, 0, 1, two, 2);
  proc_t p = opjit(NULL, (const char *[]){"doctor", "--db", db, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "not measured on this CPU yet") && strstr(p.out, "opjit run"), "%s",
            p.out);
  cr_expect(strstr(p.out, "stored kernels" "       0 for this CPU"), "%s", p.out);
  proc_free(&p);

  /* The kernels stored under this machine's object key, by any program; another CPU's not. */
  char okey[336], why[256];
  ag_machine_t mach;
  ag_machine_detect(&mach);
  ag_machine_object_key_for(key, flags, ag_machine_isa_choose(0, mach.exts, why, sizeof why),
                            okey, sizeof okey); /* OPJIT_ISA=auto */
  craft_object(db, run, 16, okey);
  craft_object(db, run, 24, okey);
  craft_object(db, run, 16, "Another CPU [flags 0]");
  p = opjit(NULL, (const char *[]){"doctor", "--db", db, NULL});
  cr_expect(strstr(p.out, "stored kernels" "       2 for this CPU, stored by runs of 1 program:"),
            "%s", p.out);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"doctor", "--db", db, "--json", NULL});
  cJSON *jk = proc_json(&p);
  const cJSON *k = cJSON_GetObjectItem(
      cJSON_GetObjectItem(cJSON_GetObjectItem(jk, "machine"), "model"), "kernels");
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "stored")), 2);
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(k, "programs")), 1);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(k, "object_key")), okey);
  cJSON_Delete(jk);
  proc_free(&p);

  st_machine_t m = {.vregs = 32, .timer_ns = 17.25, .method = AG_MACHINE_METHOD,
                    .measured_ns = 1780000000000000000,
                    .settled = 0x13}; /* each peak it holds has agreed (bits 0, 1, 4) */
  snprintf(m.cpu, sizeof m.cpu, "%s", key);
  snprintf(m.isa, sizeof m.isa, "sse2 avx fma avx2");
  m.gflops[0][0] = 61.5, m.gflops[0][1] = 123.25, m.gflops[1][1] = 61.75;
  st_db_t *h;
  char err[256];
  cr_assert_eq(st_open(db, 0, 1000, &h, err, sizeof err), ST_OK, "%s", err);
  cr_assert_eq(st_machine_save(h, &m, (st_compile_note_t[]){{"gemm", 8000000}}, 1), ST_OK);
  st_close(h);
  p = opjit(NULL, (const char *[]){"doctor", "--db", db, NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "61.5 / 123.2 / - GF/s"), "f32 peaks, 512 not measured: %s", p.out);
  cr_expect(strstr(p.out, "- / 61.8 / - GF/s"), "f64 peaks: %s", p.out);
  cr_expect(strstr(p.out, "17.2 ns") || strstr(p.out, "17.3 ns"), "clock: %s", p.out);
  cr_expect(strstr(p.out, "gemm: 8.0 ms median"), "compile: %s", p.out);
  cr_expect(strstr(p.out, "compiles (CPU time)"), "compile: %s", p.out);
  cr_expect(strstr(p.out, "stored, settled"), "%s", p.out);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"doctor", "--db", db, "--json", NULL});
  cJSON *j = proc_json(&p);
  const cJSON *mo = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "machine"), "model");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(mo, "cpu_key")), key);
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(mo, "measured")));
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(mo, "settled")));
  const cJSON *f32 = cJSON_GetObjectItem(cJSON_GetObjectItem(mo, "gflops"), "f32");
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(f32, "256")), 123.25);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(f32, "512")));
  cJSON_Delete(j);
  proc_free(&p);

  m.settled = 0x03; /* f64 256-bit has not agreed yet */
  cr_assert_eq(st_open(db, 0, 1000, &h, err, sizeof err), ST_OK, "%s", err);
  cr_assert_eq(st_machine_save(h, &m, NULL, 0), ST_OK);
  st_close(h);
  p = opjit(NULL, (const char *[]){"doctor", "--db", db, NULL});
  cr_expect(strstr(p.out, "not settled (the next run measures it again)"), "%s", p.out);
  proc_free(&p);
}

/* doctor --json (database db) run with OPENBLAS_CORETYPE=coretype (NULL: unset); skips the
 * test when the system BLAS is not OpenBLAS. */
static cJSON *blas_report(const char *db, const char *coretype, proc_t *p)
{
  char env[64];
  snprintf(env, sizeof env, "OPENBLAS_CORETYPE=%s", coretype ? coretype : "");
  unsetenv("OPENBLAS_CORETYPE");
  *p = opjit(coretype ? (const char *[]){env, NULL} : NULL,
             (const char *[]){"doctor", "--db", db, "--json", NULL});
  cr_assert_eq(p->status, 0, "%s", p->err);
  cJSON *j = proc_json(p), *b = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "machine"), "blas");
  cr_assert_not_null(b);
  if (!cJSON_IsTrue(cJSON_GetObjectItem(b, "openblas")))
    cr_skip_test("the system libblas.so.3 (%s) is not OpenBLAS: no core to check",
                 cJSON_GetStringValue(cJSON_GetObjectItem(b, "library")));
  return j;
}

Test(doctor, names_the_blas_core_it_runs)
{
  char *db = path_in(scratch_dir(), "p.db");
  proc_t p;
  cJSON *j = blas_report(db, NULL, &p);
  const cJSON *b = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "machine"), "blas");
  const char *core = cJSON_GetStringValue(cJSON_GetObjectItem(b, "core"));
  cr_assert(core && *core, "the core OpenBLAS picked is named");
  cr_expect(cJSON_IsString(cJSON_GetObjectItem(b, "core_isa")), "a known core: %s", core);
  cr_expect(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(b, "config")), "OpenBLAS"));
  cr_expect(cJSON_IsBool(cJSON_GetObjectItem(b, "below_cpu")));
  char line[128];
  snprintf(line, sizeof line, "core %s (", core);
  cJSON_Delete(j);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"doctor", "--db", db, NULL});
  cr_expect(strstr(p.out, "blas core") && strstr(p.out, line), "%s", p.out);
  proc_free(&p);
}

Test(doctor, warns_when_openblas_runs_sse_kernels_on_an_avx2_cpu)
{
  char flags[4096], key[320];
  this_cpu(flags, sizeof flags, key, sizeof key);
  if (!strstr(flags, " avx2") || !strstr(flags, " fma"))
    cr_skip_test("this CPU has no AVX2 and FMA: OpenBLAS's SSE kernels are not below it");
  char *db = path_in(scratch_dir(), "p.db");
  proc_t p;
  cJSON *j = blas_report(db, "Prescott", &p);
  const cJSON *b = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "machine"), "blas");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(b, "core")), "Prescott");
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(b, "below_cpu")));
  const char *suggest = cJSON_GetStringValue(cJSON_GetObjectItem(b, "suggest"));
  const char *warning = cJSON_GetStringValue(cJSON_GetObjectItem(b, "warning"));
  cr_assert(suggest && warning, "a warning and a setting");
  char set[64];
  snprintf(set, sizeof set, "set OPENBLAS_CORETYPE=%s", suggest);
  cr_expect(strstr(warning, "Prescott") && strstr(warning, set), "%s", warning);
  char suggested[32];
  snprintf(suggested, sizeof suggested, "%s", suggest);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit((const char *[]){"OPENBLAS_CORETYPE=Prescott", NULL},
            (const char *[]){"doctor", "--db", db, NULL});
  cr_expect(strstr(p.out, "warning: the system BLAS") && strstr(p.out, set), "%s", p.out);
  proc_free(&p);

  /* The setting it suggests is one this OpenBLAS accepts, and it silences the warning. */
  j = blas_report(db, suggested, &p);
  b = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "machine"), "blas");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(b, "core_isa")),
                   cJSON_GetStringValue(cJSON_GetObjectItem(b, "cpu_isa")), "with %s: core %s",
                   suggested, cJSON_GetStringValue(cJSON_GetObjectItem(b, "core")));
  cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(b, "below_cpu")));
  cr_expect_null(cJSON_GetObjectItem(b, "warning"));
  cJSON_Delete(j);
  proc_free(&p);
}
