/* SPDX-License-Identifier: MIT */
/* Files the readers must refuse: a newer schema, someone else's SQLite file, garbage, nothing. */
#define _GNU_SOURCE
#include "helpers.h"

#include "tests/common/fixture.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

static const fake_sig_t one[] = {{.m = 16, .calls = 5, .timed_calls = 1, .timed_ns = 100}};

/* Every reader refuses db with exit 1 and an "opjit: " message holding needle. */
static void refused_by_all(const char *db, const char *needle)
{
  static const char *const cmds[][3] = {{"runs", NULL}, {"top", NULL}, {"op", "ab"},
                                        {"export", "--json"}, {"gc", NULL}};
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
    proc_t p = opjit(NULL, (const char *[]){cmds[i][0], "--db", db, cmds[i][1], NULL});
    cr_expect_eq(p.status, 1, "%s: status %d", cmds[i][0], p.status);
    cr_expect(strncmp(p.err, "opjit: ", 7) == 0 && strstr(p.err, needle),
              "%s: stderr lacks '%s': %s", cmds[i][0], needle, p.err);
    proc_free(&p);
  }
}

/* Damage where the open reads (meta) refuses the file as damaged, not as someone else's;
 * damage in a table a command reads says so too, with what to do. */
Test(open, a_damaged_profile_is_named_damaged_with_what_to_do)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, 0, 1, one, 1);
  fx_damage_root(db, "meta");
  refused_by_all(db, "is damaged");
  refused_by_all(db, ".recover");
  /* doctor, which the message points at, still says where the damage lies */
  proc_t d = opjit(NULL, (const char *[]){"doctor", "--db", db, "--json", NULL});
  cr_expect_eq(d.status, 1, "%s", d.err);
  cJSON *j = proc_json(&d), *dbj = cJSON_GetObjectItem(j, "database");
  const char *qc = cJSON_GetStringValue(cJSON_GetObjectItem(dbj, "quick_check"));
  cr_expect(qc && *qc && strcmp(qc, "ok") != 0, "quick_check: %s", qc ? qc : "none");
  cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(dbj, "usable")));
  cJSON_Delete(j);
  proc_free(&d);
  char *db2 = path_in(dir, "q.db");
  craft_run(db2, 0, 0, 1, one, 1);
  fx_damage_root(db2, "runs");
  proc_t p = opjit(NULL, (const char *[]){"runs", "--db", db2, NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "is damaged") && strstr(p.err, "opjit doctor"), "%s", p.err);
  proc_free(&p);
}

Test(open, newer_schema_is_refused)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, 0, 1, one, 1);
  sql_exec(db, "PRAGMA user_version=99");
  refused_by_all(db, "newer");
}

Test(open, negative_schema_version_is_refused_and_kept)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db");
  craft_run(db, 0, 0, 1, one, 1);
  sql_exec(db, "PRAGMA user_version=-1");
  refused_by_all(db, "schema version -1, which no opjit writes");
  proc_t p = opjit(NULL, (const char *[]){"doctor", "--db", db, "--json", NULL});
  cr_expect(strstr(p.out, "which no opjit writes"), "doctor: %s", p.out);
  proc_free(&p);
  sqlite3 *raw;
  sqlite3_stmt *st;
  cr_assert_eq(sqlite3_open_v2(db, &raw, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  cr_assert_eq(sqlite3_prepare_v2(raw, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  cr_expect_eq(sqlite3_column_int(st, 0), -1, "the refusals left the version as it was");
  sqlite3_finalize(st);
  sqlite3_close(raw);
}

/* A run whose programs row is gone (damage, or a hand-made DELETE): every reader still shows
 * it, labelled as such, and report writes its page. */
Test(open, a_run_without_its_program_row_reads_everywhere)
{
  char *dir = scratch_dir(), *db = path_in(dir, "p.db"), *out = path_in(dir, "r.html");
  craft_run(db, 0, 0, 1, one, 1);
  sql_exec(db, "DELETE FROM programs");
  proc_t p = opjit(NULL, (const char *[]){"report", "--db", db, "-o", out, "1", NULL});
  cr_expect_eq(p.status, 0, "report: status %d: %s", p.status, p.err);
  proc_free(&p);
  FILE *f = fopen(out, "r");
  cr_assert(f, "no page written");
  char page[8192] = "";
  page[fread(page, 1, sizeof page - 1, f)] = 0;
  fclose(f);
  cr_expect(strstr(page, "(program not recorded)"), "the page names no program");
  static const char *const cmds[][3] = {{"runs", NULL}, {"top", "1"}};
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
    p = opjit(NULL, (const char *[]){cmds[i][0], "--db", db, cmds[i][1], NULL});
    cr_expect_eq(p.status, 0, "%s: status %d: %s", cmds[i][0], p.status, p.err);
    cr_expect(strstr(p.out, "(program not recorded)"), "%s: %s", cmds[i][0], p.out);
    proc_free(&p);
  }
  p = opjit(NULL, (const char *[]){"export", "--db", db, "--json", NULL});
  cJSON *j = proc_json(&p);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "runs")), 1, "export keeps the run");
  cJSON_Delete(j);
  proc_free(&p);
}

Test(open, foreign_sqlite_file_is_refused)
{
  char *dir = scratch_dir(), *db = path_in(dir, "other.db");
  sql_exec(db, "CREATE TABLE accounts(id INTEGER PRIMARY KEY, owner TEXT)");
  refused_by_all(db, "not an opjit profile");
}

Test(open, garbage_file_is_refused)
{
  char *dir = scratch_dir(), *db = path_in(dir, "junk.db");
  FILE *f = fopen(db, "w");
  cr_assert(f);
  for (int i = 0; i < 512; i++)
    fputs("this is not a database. ", f);
  fclose(f);
  refused_by_all(db, "not an SQLite database");
}

Test(open, missing_file_is_reported)
{
  char *dir = scratch_dir(), *db = path_in(dir, "nothing.db");
  proc_t p = opjit(NULL, (const char *[]){"runs", "--db", db, NULL});
  cr_expect_eq(p.status, 1);
  cr_expect(strstr(p.err, "no such file"), "%s", p.err);
  proc_free(&p);
}

Test(open, default_path_follows_opjit_db_then_xdg)
{
  char *dir = scratch_dir(), *db = path_in(dir, "opjit/profile.db");
  char *xdg, *env_db;
  cr_assert(asprintf(&xdg, "XDG_CACHE_HOME=%s", dir) > 0);
  craft_run(db, 0, 0, 1, one, 1);
  proc_t p = opjit((const char *[]){"OPJIT_DB=", xdg, NULL}, (const char *[]){"runs", "--json", NULL});
  cr_assert_eq(p.status, 0, "%s", p.err);
  cJSON *j = proc_json(&p);
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "database")), db);
  cJSON_Delete(j);
  proc_free(&p);
  cr_assert(asprintf(&env_db, "OPJIT_DB=%s/elsewhere.db", dir) > 0);
  p = opjit((const char *[]){env_db, xdg, NULL}, (const char *[]){"runs", NULL});
  cr_expect_eq(p.status, 1, "OPJIT_DB wins over XDG_CACHE_HOME");
  cr_expect(strstr(p.err, "elsewhere.db"), "%s", p.err);
  proc_free(&p);
}

Test(cli, version_help_and_unknown_command)
{
  proc_t p = opjit(NULL, (const char *[]){"--version", NULL});
  cr_expect_eq(p.status, 0);
  cr_expect(strncmp(p.out, "opjit ", 6) == 0, "%s", p.out);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"--help", NULL});
  cr_expect_eq(p.status, 0);
  cr_expect(strstr(p.out, "exit status") && strstr(p.out, "doctor"), "%s", p.out);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"top", "--help", NULL});
  cr_expect_eq(p.status, 0);
  cr_expect(strstr(p.out, "usage: opjit top"), "%s", p.out);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"frobnicate", NULL});
  cr_expect_eq(p.status, 2);
  cr_expect(strstr(p.err, "unknown command"), "%s", p.err);
  proc_free(&p);
  p = opjit(NULL, (const char *[]){"runs", "--bogus", NULL});
  cr_expect_eq(p.status, 2);
  cr_expect(strstr(p.err, "--bogus"), "%s", p.err);
  proc_free(&p);
}
