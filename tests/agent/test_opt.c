/* SPDX-License-Identifier: MIT */
/* Options: every option parsed from the environment, bad values rejected with the default
 * kept and one line naming variable, value and default. */
#include "agent/opt.h"
#include "agent/host.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* A fake environment: NAME=value pairs. */
static const char *env_vals[48][2];
static int env_n;
static char lines[32][512];
static int nlines;

static const char *fake_get(const char *name)
{
  for (int i = 0; i < env_n; i++)
    if (strcmp(env_vals[i][0], name) == 0)
      return env_vals[i][1];
  return NULL;
}

static void capture(const char *line)
{
  if (nlines < 32)
    snprintf(lines[nlines++], sizeof lines[0], "%s", line);
}

static void setenv_fake(const char *name, const char *value)
{
  env_vals[env_n][0] = name;
  env_vals[env_n++][1] = value;
}

static void reset(void) { env_n = 0, nlines = 0; }

TestSuite(opt, .init = reset);

Test(opt, defaults_parse_and_match_the_table)
{
  ag_opts_t o;
  cr_assert_eq(ag_opts_parse(&o, fake_get, capture), 0);
  cr_assert_eq(nlines, 0);
  cr_assert_eq(o.num[AG_OPT_DISABLE], 0);
  cr_assert_eq(o.num[AG_OPT_MODE], AG_MODE_JIT);
  cr_assert_eq(o.num[AG_OPT_TIME_EVERY], 16);
  cr_assert_eq(o.num[AG_OPT_FLUSH_MS], 1000);
  cr_assert(o.num[AG_OPT_HOSTS] & AG_HOST_BIT(blas));
  for (int id = 0; id < AG_OPT__COUNT; id++)
    cr_assert_eq(o.from_env[id], 0);
  ag_opts_free(&o);
}

Test(opt, every_option_parsed)
{
  setenv_fake("OPJIT_DISABLE", "yes");
  setenv_fake("OPJIT_MODE", "off");
  setenv_fake("OPJIT_DB", "/tmp/x.db");
  setenv_fake("OPJIT_HOSTS", "none");
  setenv_fake("OPJIT_TIME_EVERY", "100");
  setenv_fake("OPJIT_HOT_CALLS", "1");
  setenv_fake("OPJIT_HOT_PAYBACK", "0");
  setenv_fake("OPJIT_DUEL", "off");
  setenv_fake("OPJIT_JIT_MAX_DIM", "64");
  setenv_fake("OPJIT_KERNEL_THREADS", "3");
  setenv_fake("OPJIT_VERIFY", "0");
  setenv_fake("OPJIT_PERF_MAP", "1");
  setenv_fake("OPJIT_CODE_CACHE_MB", "8");
  setenv_fake("OPJIT_WARM", "off");
  setenv_fake("OPJIT_WARM_WAIT_US", "2K");
  setenv_fake("OPJIT_DECAY", "3");
  setenv_fake("OPJIT_ISA", "AVX2");
  setenv_fake("OPJIT_JIT_THREADS", "2");
  setenv_fake("OPJIT_FLUSH_MS", "2K");
  setenv_fake("OPJIT_EXIT_WAIT_MS", "0");
  setenv_fake("OPJIT_BUSY_MS", "50");
  setenv_fake("OPJIT_MAX_SIGS", "1M");
  setenv_fake("OPJIT_SAMPLE_HZ", "997");
  setenv_fake("OPJIT_EVENTS", "timer");
  setenv_fake("OPJIT_STACK_DEPTH", "0");
  setenv_fake("OPJIT_SAMPLE_BUDGET", "20");
  setenv_fake("OPJIT_LOG", "DEBUG");
  setenv_fake("OPJIT_LOG_FILE", "/tmp/opjit.log");
  setenv_fake("OPJIT_SUMMARY", "yes");
  setenv_fake("OPJIT_FLEET", "postgresql:///fleet");
  setenv_fake("OPJIT_FLEET_KEY", "/tmp/fleet.key");
  setenv_fake("OPJIT_FLEET_KERNELS", "off");
  setenv_fake("OPJIT_FLEET_REDACT", "no");
  setenv_fake("OPJIT_FLEET_WAIT_MS", "500");
  setenv_fake("OPJIT_FLEET_PUSH_MS", "1K");
  setenv_fake("OPJIT_FLEET_BACKLOG", "20");
  cr_assert_eq(env_n, AG_OPT__COUNT, "a new option needs a line in this test");
  ag_opts_t o;
  cr_assert_eq(ag_opts_parse(&o, fake_get, capture), 0, "%s", nlines ? lines[0] : "");
  cr_assert_eq(o.num[AG_OPT_DISABLE], 1);
  cr_assert_eq(o.num[AG_OPT_MODE], AG_MODE_OFF);
  cr_assert_str_eq(o.str[AG_OPT_DB], "/tmp/x.db");
  cr_assert_eq(o.num[AG_OPT_HOSTS], 0);
  cr_assert_eq(o.num[AG_OPT_DUEL], 0);
  cr_assert_eq(o.num[AG_OPT_SUMMARY], 1);
  cr_assert_eq(o.num[AG_OPT_TIME_EVERY], 128, "rounded up to a power of two");
  cr_assert_eq(o.num[AG_OPT_HOT_CALLS], 1);
  cr_assert_eq(o.num[AG_OPT_HOT_PAYBACK], 0);
  cr_assert_eq(o.num[AG_OPT_JIT_MAX_DIM], 64);
  cr_assert_eq(o.num[AG_OPT_KERNEL_THREADS], 3);
  cr_assert_eq(o.num[AG_OPT_VERIFY], 0);
  cr_assert_eq(o.num[AG_OPT_PERF_MAP], 1);
  cr_assert_str_eq(o.str[AG_OPT_FLEET], "postgresql:///fleet");
  cr_assert_str_eq(o.str[AG_OPT_FLEET_KEY], "/tmp/fleet.key");
  cr_assert_eq(o.num[AG_OPT_FLEET_KERNELS], 0);
  cr_assert_eq(o.num[AG_OPT_FLEET_REDACT], 0);
  cr_assert_eq(o.num[AG_OPT_FLEET_WAIT_MS], 500);
  cr_assert_eq(o.num[AG_OPT_FLEET_PUSH_MS], 1024);
  cr_assert_eq(o.num[AG_OPT_FLEET_BACKLOG], 20);
  cr_assert_eq(o.num[AG_OPT_CODE_CACHE_MB], 8);
  cr_assert_eq(o.num[AG_OPT_WARM], 0);
  cr_assert_eq(o.num[AG_OPT_WARM_WAIT_US], 2048);
  cr_assert_eq(o.num[AG_OPT_DECAY], 3);
  cr_assert_eq(o.num[AG_OPT_ISA], 2, "avx2, the third choice");
  cr_assert_eq(o.num[AG_OPT_JIT_THREADS], 2);
  cr_assert_eq(o.num[AG_OPT_FLUSH_MS], 2048);
  cr_assert_eq(o.num[AG_OPT_EXIT_WAIT_MS], 0);
  cr_assert_eq(o.num[AG_OPT_BUSY_MS], 50);
  cr_assert_eq(o.num[AG_OPT_MAX_SIGS], 1 << 20);
  cr_assert_eq(o.num[AG_OPT_SAMPLE_HZ], 997);
  cr_assert_eq(o.num[AG_OPT_EVENTS], 4);
  cr_assert_eq(o.num[AG_OPT_STACK_DEPTH], 0);
  cr_assert_eq(o.num[AG_OPT_SAMPLE_BUDGET], 20);
  cr_assert_eq(o.num[AG_OPT_LOG], 3);
  cr_assert_str_eq(o.str[AG_OPT_LOG_FILE], "/tmp/opjit.log");
  for (int id = 0; id < AG_OPT__COUNT; id++)
    cr_assert_eq(o.from_env[id], 1, "OPJIT_%s not marked as set", ag_opt_desc(id)->name);
  ag_opts_free(&o);
}

Test(opt, bad_values_keep_the_default_with_one_line_each)
{
  static const char *const bad[][2] = {
      {"OPJIT_DISABLE", "maybe"},    {"OPJIT_MODE", "turbo"},       {"OPJIT_HOSTS", "blas,cuda"},
      {"OPJIT_TIME_EVERY", "0"},     {"OPJIT_FLUSH_MS", "abc"},   {"OPJIT_EXIT_WAIT_MS", "-5"},
      {"OPJIT_BUSY_MS", "12x"},      {"OPJIT_MAX_SIGS", "99999999999999999999"},
      {"OPJIT_SAMPLE_HZ", "fast"},   {"OPJIT_EVENTS", "instructions"}, {"OPJIT_STACK_DEPTH", "64"},
      {"OPJIT_ISA", "avx1024"},      {"OPJIT_LOG", ""},
  };
  size_t n = sizeof bad / sizeof *bad;
  for (size_t i = 0; i < n; i++)
    setenv_fake(bad[i][0], bad[i][1]);
  ag_opts_t o, def;
  cr_assert_eq(ag_opts_parse(&o, fake_get, capture), (int)n);
  cr_assert_eq(nlines, (int)n);
  reset();
  ag_opts_parse(&def, fake_get, NULL);
  for (int id = 0; id < AG_OPT__COUNT; id++)
    if (ag_opt_desc(id)->kind != AG_OK_STR)
      cr_assert_eq(o.num[id], def.num[id], "OPJIT_%s lost its default", ag_opt_desc(id)->name);
  for (size_t i = 0; i < n; i++) {
    char value[128];
    snprintf(value, sizeof value, "'%s'", bad[i][1]);
    cr_assert(strstr(lines[i], bad[i][0]) && strstr(lines[i], value) &&
                  strstr(lines[i], "using the default"),
              "line %zu does not name variable, value and default: %s", i, lines[i]);
  }
  cr_assert(strstr(lines[1], "'jit'"), "%s", lines[1]);
  ag_opts_free(&o);
  ag_opts_free(&def);
}

Test(opt, int_suffix_overflow_and_bounds)
{
  setenv_fake("OPJIT_MAX_SIGS", "2G");      /* above max */
  setenv_fake("OPJIT_FLUSH_MS", "9");       /* below min */
  ag_opts_t o;
  cr_assert_eq(ag_opts_parse(&o, fake_get, capture), 2);
  cr_assert_eq(o.num[AG_OPT_MAX_SIGS], 4096);
  cr_assert_eq(o.num[AG_OPT_FLUSH_MS], 1000);
  ag_opts_free(&o);
}

Test(opt, fleet_passwords_never_formatted)
{
  static const char *const cases[][2] = {
      {"host=/tmp/pg port=5432 user=postgres", "host=/tmp/pg port=5432 user=postgres"},
      {"host=db password=s3cret user=me", "host=db password=*** user=me"},
      {"host=db password='a b\\' c' dbname=x", "host=db password=*** dbname=x"},
      {"postgresql://me:s3cret@db.example/opjit?sslmode=require",
       "postgresql://me:***@db.example/opjit?sslmode=require"},
      {"postgresql://me@db:5432/opjit?password=s3cret&sslmode=require",
       "postgresql://me@db:5432/opjit?password=***&sslmode=require"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    setenv_fake("OPJIT_FLEET", cases[i][0]);
    ag_opts_t o;
    cr_assert_eq(ag_opts_parse(&o, fake_get, capture), 0);
    char buf[256];
    ag_opts_format(&o, AG_OPT_FLEET, buf, sizeof buf);
    cr_expect_str_eq(buf, cases[i][1]);
    cr_expect_str_eq(o.str[AG_OPT_FLEET], cases[i][0], "the agent itself keeps the password");
    ag_opts_free(&o);
    reset();
  }
}

/* A buffer too short for the whole string: the copy is cut inside it (the bytes after it keep
 * their sentinel), and what it holds of a password is never more than "***". Found by fuzz_opt
 * (fuzz/crashes/opt/fleet-password-at-the-buffer-end): a password= key near the end was written
 * past the buffer. */
Test(opt, fleet_redaction_cut_to_a_short_buffer)
{
  setenv_fake("OPJIT_FLEET", "host=db password=s3cret user=me password=again sslmode=require");
  ag_opts_t o;
  cr_assert_eq(ag_opts_parse(&o, fake_get, capture), 0);
  for (size_t len = 1; len <= 64; len++) {
    char mem[96];
    memset(mem, '#', sizeof mem);
    ag_opts_format(&o, AG_OPT_FLEET, mem, len);
    cr_assert_eq(strlen(mem), len - 1 < 57 ? len - 1 : 57, "cut at %zu", len);
    for (size_t i = len; i < sizeof mem; i++)
      cr_assert_eq(mem[i], '#', "byte %zu written past a %zu-byte buffer", i, len);
    cr_assert_null(strstr(mem, "s3c"), "%s", mem);
    cr_assert_null(strstr(mem, "aga"), "%s", mem);
  }
  ag_opts_free(&o);
}

Test(opt, format_spells_out_enums_and_flags)
{
  setenv_fake("OPJIT_HOSTS", "blas");
  setenv_fake("OPJIT_LOG", "info");
  ag_opts_t o;
  ag_opts_parse(&o, fake_get, capture);
  char buf[128];
  ag_opts_format(&o, AG_OPT_HOSTS, buf, sizeof buf);
  cr_assert_str_eq(buf, "blas");
  ag_opts_format(&o, AG_OPT_LOG, buf, sizeof buf);
  cr_assert_str_eq(buf, "info");
  ag_opts_format(&o, AG_OPT_MODE, buf, sizeof buf);
  cr_assert_str_eq(buf, "jit");
  ag_opts_free(&o);
}

Test(opt, database_path)
{
  ag_opts_t o;
  char buf[PATH_MAX];
  setenv_fake("HOME", "/home/u");
  ag_opts_parse(&o, fake_get, capture);
  cr_assert_eq(ag_opts_db_path(&o, fake_get, buf, sizeof buf), 0);
  cr_assert_str_eq(buf, "/home/u/.cache/opjit/profile.db");
  setenv_fake("XDG_CACHE_HOME", "/xdg");
  cr_assert_eq(ag_opts_db_path(&o, fake_get, buf, sizeof buf), 0);
  cr_assert_str_eq(buf, "/xdg/opjit/profile.db");
  ag_opts_free(&o);
  setenv_fake("OPJIT_DB", "/d/p.db");
  ag_opts_parse(&o, fake_get, capture);
  cr_assert_eq(ag_opts_db_path(&o, fake_get, buf, sizeof buf), 0);
  cr_assert_str_eq(buf, "/d/p.db");
  ag_opts_free(&o);
  reset();
  ag_opts_parse(&o, fake_get, capture);
  cr_assert_eq(ag_opts_db_path(&o, fake_get, buf, sizeof buf), -1, "no HOME, no XDG, no DB");
  ag_opts_free(&o);
}

/* An OPJIT_* name that is no option gets one line, with the option it misspells (case and
 * underscores aside); the options, and the tests' seams (OPJIT_TEST_*), get none. */
static char unknown_lines[4][256];
static int nunknown;
static void note_unknown(const char *line)
{
  if (nunknown < 4)
    snprintf(unknown_lines[nunknown], sizeof unknown_lines[0], "%s", line);
  nunknown++;
}

Test(opt, unknown_names_are_reported_with_the_option_they_misspell)
{
  char *env[] = {"OPJIT_SAMPLEHZ=0", "OPJIT_MODE=jit", "OPJIT_TEST_FAULT=fast", "PATH=/bin",
                 "OPJIT_FROBNICATE=1", "OPJIT_hot_calls=8", NULL};
  nunknown = 0;
  cr_assert_eq(ag_opts_unknown(env, note_unknown), 3);
  cr_assert_eq(nunknown, 3);
  cr_expect_str_eq(unknown_lines[0], "OPJIT_SAMPLEHZ is not an opjit option (did you mean "
                                     "OPJIT_SAMPLE_HZ?); ignored");
  cr_expect_str_eq(unknown_lines[1], "OPJIT_FROBNICATE is not an opjit option; ignored");
  cr_expect_str_eq(unknown_lines[2], "OPJIT_hot_calls is not an opjit option (did you mean "
                                     "OPJIT_HOT_CALLS?); ignored");
}

/* An empty OPJIT_HOSTS is a bad value, as an empty OPJIT_MODE is: it read as none, and turned
 * interception off without a word. */
Test(opt, an_empty_hosts_value_keeps_the_default)
{
  reset();
  setenv_fake("OPJIT_HOSTS", "");
  ag_opts_t o;
  cr_assert_eq(ag_opts_parse(&o, fake_get, capture), 1);
  cr_assert_eq(nlines, 1);
  cr_assert(strstr(lines[0], "OPJIT_HOSTS=''") && strstr(lines[0], "using the default 'all'"),
            "%s", lines[0]);
  cr_assert_eq(o.num[AG_OPT_HOSTS], LONG_MAX, "all hosts");
  ag_opts_free(&o);
  reset();
}

/* The prefix in any case is ours; the fuzzing script's folder variable is no misspelt option. */
Test(opt, unknown_names_in_lower_case_and_the_fuzz_folder)
{
  char *env[] = {"opjit_sample_hz=0", "OPJIT_FUZZ_TMP=/tmp/f", NULL};
  nunknown = 0;
  cr_assert_eq(ag_opts_unknown(env, note_unknown), 1);
  cr_expect_str_eq(unknown_lines[0], "opjit_sample_hz is not an opjit option (did you mean "
                                     "OPJIT_SAMPLE_HZ?); ignored");
}
