/* SPDX-License-Identifier: MIT */
/* `opjit doctor`: the option table, the database report and the health verdict. */
#include "helpers.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

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
  cJSON_Delete(j);
  proc_free(&p);
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
