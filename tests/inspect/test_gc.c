/* SPDX-License-Identifier: MIT */
/* gc on crafted databases: what it deletes, what --dry-run leaves alone. */
#include "helpers.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const fake_sig_t sig_a[] = {{.m = 16, .calls = 5, .timed_calls = 1, .timed_ns = 100}};
static const fake_sig_t sig_b[] = {{.m = 24, .calls = 9, .timed_calls = 1, .timed_ns = 100}};

static int run_count(const char *db)
{
  proc_t p = opjit(NULL, (const char *[]){"runs", "--db", db, "--json", "--limit", "0", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  int n = cJSON_GetArraySize(cJSON_GetObjectItem(j, "runs"));
  cJSON_Delete(j);
  proc_free(&p);
  return n;
}

static double deleted(const cJSON *doc, const char *group, const char *what)
{
  const cJSON *n = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, group), what);
  cr_assert(cJSON_IsNumber(n), "%s.%s missing", group, what);
  return n->valuedouble;
}

Test(gc, dry_run_counts_without_deleting_then_keep_1_deletes_the_rest)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  for (int i = 0; i < 3; i++)
    craft_run(db, 0, 0, 1, sig_a, 1);
  int64_t newest = craft_run(db, 0, 0, 1, sig_b, 1);
  cr_assert_eq(run_count(db), 4);

  proc_t p = opjit(NULL, (const char *[]){"gc", "--db", db, "--keep", "1", "--dry-run", "--json",
                                          NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect_eq(deleted(j, "would_delete", "runs"), 3);
  cr_expect_eq(deleted(j, "would_delete", "signatures"), 1, "sig_a is only in the old runs");
  cr_expect_eq(deleted(j, "would_delete", "programs"), 0);
  cJSON_Delete(j);
  proc_free(&p);
  cr_expect_eq(run_count(db), 4, "--dry-run changed the database");

  p = opjit(NULL, (const char *[]){"gc", "--db", db, "--keep", "1", "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  j = proc_json(&p);
  cr_expect_eq(deleted(j, "deleted", "runs"), 3);
  cr_expect_eq(deleted(j, "deleted", "signatures"), 1);
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"runs", "--db", db, "--json", NULL});
  j = proc_json(&p);
  const cJSON *runs = cJSON_GetObjectItem(j, "runs");
  cr_assert_eq(cJSON_GetArraySize(runs), 1);
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(runs, 0), "id")),
               newest, "the newest run is kept");
  cJSON_Delete(j);
  proc_free(&p);

  p = opjit(NULL, (const char *[]){"gc", "--db", db, "--keep", "1", NULL});
  cr_expect_eq(p.status, 0);
  cr_expect(strstr(p.out, "nothing to delete"), "%s", p.out);
  proc_free(&p);
}

Test(gc, human_output_and_default_keeps_100)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  for (int i = 0; i < 3; i++)
    craft_run(db, 0, 0, 1, sig_a, 1);
  proc_t p = opjit(NULL, (const char *[]){"gc", "--db", db, NULL});
  cr_expect_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "nothing to delete (keeping the newest 100 runs"), "%s", p.out);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"gc", "--db", db, "--keep", "0", NULL});
  cr_expect_eq(p.status, 0, "%s", p.err);
  cr_expect(strstr(p.out, "deleted 3 runs, 1 signatures, 1 programs, 1 machines"), "%s", p.out);
  proc_free(&p);
  cr_expect_eq(run_count(db), 0);
}

/* What gc counts as the database's size: the file and its WAL, as on disk now. */
static long long on_disk(const char *db)
{
  char wal[4200];
  struct stat sb;
  long long n = 0;
  snprintf(wal, sizeof wal, "%s-wal", db);
  if (stat(db, &sb) == 0)
    n += sb.st_size;
  if (stat(wal, &sb) == 0)
    n += sb.st_size;
  return n;
}

/* The sizes gc prints are the files' before it opened them and after it closed them: with a WAL
 * another connection keeps open (a running agent's), then with none. */
Test(gc, prints_the_sizes_on_disk_before_and_after)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db"), *wal = path_in(dir, "p.db-wal");
  char err[512];
  for (int i = 0; i < 3; i++)
    craft_run(db, 0, 0, 1, sig_a, 1);
  st_db_t *hold;
  cr_assert_eq(st_open(db, 0, 1000, &hold, err, sizeof err), ST_OK, "%s", err);
  craft_run(db, 0, 0, 1, sig_b, 1); /* stays in the WAL while hold is open */
  struct stat sb;
  cr_assert(stat(wal, &sb) == 0 && sb.st_size > 0, "no WAL to count");
  long long before = on_disk(db), was = -1, now = -1;
  proc_t p = opjit(NULL, (const char *[]){"gc", "--db", db, "--keep", "1", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  const char *line = strstr(p.out, "database: ");
  cr_assert(line && sscanf(line, "database: %lld bytes -> %lld bytes", &was, &now) == 2, "%s",
            p.out);
  cr_expect_eq(was, before, "printed %lld, on disk %lld", was, before);
  cr_expect_eq(now, on_disk(db), "printed %lld, on disk %lld", now, on_disk(db));
  cr_expect_lt(now, before, "the VACUUM's pages left in the WAL");
  proc_free(&p);
  st_close(hold);

  for (int i = 0; i < 2; i++)
    craft_run(db, 0, 0, 1, sig_a, 1);
  before = on_disk(db);
  p = opjit(NULL, (const char *[]){"gc", "--db", db, "--keep", "0", "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "bytes_before")), (double)before);
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "bytes_after")), (double)on_disk(db),
               "printed %.0f, on disk %lld",
               cJSON_GetNumberValue(cJSON_GetObjectItem(j, "bytes_after")), on_disk(db));
  cJSON_Delete(j);
  proc_free(&p);
}

Test(gc, missing_database_is_an_error_and_not_created)
{
  char *dir = scratch_dir(), *db = path_in(dir, "none.db");
  proc_t p = opjit(NULL, (const char *[]){"gc", "--db", db, NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "opjit: cannot open"), "%s", p.err);
  cr_expect(access(db, F_OK) != 0, "gc created the database");
  proc_free(&p);
}
