/* SPDX-License-Identifier: MIT */
/* The crash hook (agent/crash.h) in real hosts and a real database. A kernel that faults
 * (OPJIT_TEST_FAULT=crash compiles each with a trap first; or a stored object whose code is
 * damaged behind a recomputed checksum) kills the process with the signal it would have died of,
 * and the next run records the crashed run, its event and the signature's state, drops the
 * object and keeps the signature on the original for good. The hook chains: a program's own
 * handler (installed before or after the agent, Python's faulthandler among them), SIG_IGN and
 * SIG_DFL behave as without it, and a fault in the program's own code blames no kernel. */
#include "harness.h"
#include "jit/objload.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <elf.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CRASH_PROG OPJIT_BUILD_DIR "/crash_prog"

/* Every signature hot from its first call; the first call waits for the whole warm start. */
static const char *const env[] = {"OPJIT_MODE=jit",
                                  "OPJIT_HOT_PAYBACK=0",
                                  "OPJIT_DUEL=0",
                                  "OPJIT_HOT_CALLS=1",
                                  "OPJIT_SAMPLE_HZ=0",
                                  "OPJIT_WARM_WAIT_US=60000000",
                                  NULL};
static const char *const faulty[] = {"OPJIT_MODE=jit",         "OPJIT_HOT_PAYBACK=0",
                                     "OPJIT_DUEL=0",           "OPJIT_HOT_CALLS=1",
                                     "OPJIT_SAMPLE_HZ=0",      "OPJIT_WARM_WAIT_US=60000000",
                                     "OPJIT_TEST_FAULT=crash", NULL};

/* The 8x8x8 sgemm that jit_prog's "mixed" mode calls first and settles on. */
#define SIG8 "(SELECT id FROM signatures WHERE name LIKE 'sgemm NN 8x8x8%%')"

static void run_ok(const char *tag, const char *const *e, const char *const *argv)
{
  int st = h_run(tag, 1, e, argv);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d\n%s\n%s", tag, st,
            h_output(tag, "out"), h_output(tag, "err"));
}

static void run_dies(const char *tag, const char *const *e, const char *const *argv, int sig)
{
  int st = h_run(tag, 1, e, argv);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == sig, "%s: status %d, not killed by signal %d\n%s",
            tag, st, sig, h_output(tag, "err"));
}

/* Marker files beside the database. */
static int markers(void)
{
  DIR *d = opendir(h_dir);
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d));)
    n += strncmp(de->d_name, "profile.db-crash-", 17) == 0;
  if (d)
    closedir(d);
  return n;
}

static const char *const mixed[] = {H_JIT_PROG, "mixed", "20000", NULL};

TestSuite(crash, .init = h_setup_jit, .fini = h_teardown, .timeout = 600);

Test(crash, a_kernel_that_faults_is_recorded_by_the_next_run_and_never_compiled_again)
{
  run_dies("c1", faulty, mixed, SIGILL);
  cr_assert_eq(markers(), 1, "the crashed process left its marker");
  const char *err = h_output("c1", "err");
  /* The check on scratch operands runs the new kernel first, on the compile thread. */
  cr_assert_eq(h_count_lines(err, "the program dies of SIGILL on thread 'opjit-"), 1,
               "the crash is said where it happened: %s", err);
  cr_assert_eq(h_count_lines(err, "while opjit compiled or tried a kernel"), 1, "%s", err);
  cr_assert_eq(h_count_lines(err, "dies of"), 1, "%s", err);
  run_ok("c2", env, mixed);
  cr_assert(strstr(h_output("c2", "out"), "mismatches 0"), "%s", h_output("c2", "out"));
  cr_assert_eq(h_count_lines(h_output("c2", "err"), "crashed while its kernel was compiled or "
                                                    "tried (SIGILL at 0x"),
               1, "%s", h_output("c2", "err"));
  cr_assert_eq(markers(), 0, "the marker was read and deleted");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs WHERE id=1 AND status='crashed'"), 1);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE kind='crashed' AND sig_id=" SIG8
                             " AND detail LIKE '%%SIGILL%%run 1%%'"),
               1);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=2 AND sig_id=" SIG8
                             " AND state='crashed'"),
               1);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE run_id=2 AND sig_id=" SIG8
                             " AND kind IN ('queued', 'published', 'loaded')"),
               0, "run 2 neither compiled nor placed it");
  /* Run 3 learns it from the profile alone. */
  run_ok("c3", env, mixed);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=3 AND sig_id=" SIG8
                             " AND state='crashed' AND reason LIKE '%%crashed the program in an"
                             " earlier run%%'"),
               1);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE run_id=3 AND sig_id=" SIG8), 0);
}

/* The store keeps kernels per signature and machine, and so does what it knows of their crashes:
 * another program (a copy of jit_prog) crashes in the 8x8x8 kernel and its next run records
 * that; jit_prog's first run, whose own profile knows nothing of it, neither compiles nor places
 * that kernel, and says whose run it crashed. */
Test(crash, a_kernel_that_crashed_another_program_is_never_compiled_here)
{
  char prog[4200], cmd[8600];
  snprintf(prog, sizeof prog, "%s/other", h_dir);
  snprintf(cmd, sizeof cmd, "cp %s %s", H_JIT_PROG, prog);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  run_dies("c1", faulty, (const char *[]){prog, "mixed", "20000", NULL}, SIGILL);
  run_ok("c2", env, (const char *[]){prog, "mixed", "20000", NULL});
  cr_assert_eq(markers(), 0, "the copy's second run recorded the crash");
  run_ok("c3", env, mixed);
  cr_assert(strstr(h_output("c3", "out"), "mismatches 0"), "%s", h_output("c3", "out"));
  cr_assert_eq(h_query(NULL, "SELECT count(DISTINCT program_id) FROM runs"), 2);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=3 AND sig_id=" SIG8
                             " AND state='crashed' AND reason LIKE '%%crashed a program on"
                             " this machine (recorded in run 2)%%'"),
               1, "%s", h_output("c3", "err"));
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE run_id=3 AND sig_id=" SIG8
                             " AND kind IN ('published', 'loaded')"),
               0, "run 3 neither compiled nor placed it");
}

/* Fills the code sections (.text, .ltext) of the ELF object o with ud2 (0f 0b): every function
 * entry (16-byte aligned) is a trap. Returns how many bytes it changed. */
static size_t damage(unsigned char *o, size_t len)
{
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)o;
  cr_assert(len > sizeof *eh && !memcmp(eh->e_ident, ELFMAG, SELFMAG));
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(o + eh->e_shoff);
  size_t changed = 0;
  for (int i = 0; i < eh->e_shnum; i++) {
    if (!(sh[i].sh_flags & SHF_EXECINSTR) || sh[i].sh_type != SHT_PROGBITS)
      continue;
    for (size_t j = 0; j + 1 < sh[i].sh_size; j += 2)
      o[sh[i].sh_offset + j] = 0x0f, o[sh[i].sh_offset + j + 1] = 0x0b;
    changed += sh[i].sh_size;
  }
  return changed;
}

/* Damages the 8x8x8 sgemm's stored object and recomputes its checksum, as the hostile probe
 * did: the warm start's checks all pass. */
static void damage_object(void)
{
  sqlite3 *db;
  sqlite3_stmt *st;
  cr_assert_eq(sqlite3_open(h_db, &db), SQLITE_OK);
  cr_assert_eq(
      sqlite3_prepare_v2(db, "SELECT id, code FROM objects WHERE sig_id=" SIG8, -1, &st, NULL),
      SQLITE_OK);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "run 1 stored the kernel");
  int64_t id = sqlite3_column_int64(st, 0);
  size_t len = (size_t)sqlite3_column_bytes(st, 1);
  unsigned char *o = malloc(len);
  memcpy(o, sqlite3_column_blob(st, 1), len);
  sqlite3_finalize(st);
  cr_assert_gt(damage(o, len), 0, "the object has code");
  cr_assert_eq(
      sqlite3_prepare_v2(db, "UPDATE objects SET code=?, checksum=? WHERE id=?", -1, &st, NULL),
      SQLITE_OK);
  sqlite3_bind_blob(st, 1, o, (int)len, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)jt_obj_checksum(o, len));
  sqlite3_bind_int64(st, 3, id);
  cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
  sqlite3_finalize(st);
  sqlite3_close(db);
  free(o);
}

Test(crash, a_damaged_stored_kernel_crashes_one_run_and_is_never_placed_again)
{
  run_ok("d1", env, mixed);
  damage_object();
  run_dies("d2", env, mixed, SIGILL); /* placed, called on the program's thread */
  cr_assert_eq(h_count_lines(h_output("d2", "err"), "the program dies of SIGILL on thread "
                                                    "'jit_prog' at opjit's kernel "),
               1, "%s", h_output("d2", "err"));
  cr_assert_eq(h_count_lines(h_output("d2", "err"), "the next run on this database drops it"), 1);
  run_ok("d3", env, mixed);
  cr_assert(strstr(h_output("d3", "out"), "mismatches 0"), "%s", h_output("d3", "out"));
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs WHERE id=2 AND status='crashed'"), 1);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE run_id=2 AND kind='crashed' AND"
                             " sig_id=" SIG8 " AND detail LIKE 'crashed in %% (SIGILL at +0x%%'"),
               1, "the crashed run holds the event");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM variants WHERE run_id=2 AND sig_id=" SIG8
                             " AND status='crashed'"),
               1);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects WHERE sig_id=" SIG8), 0,
               "the object is dropped");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE run_id=3 AND sig_id=" SIG8
                             " AND kind IN ('queued', 'published', 'loaded')"),
               0);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=3 AND sig_id=" SIG8
                             " AND state='crashed'"),
               1);
}

TestSuite(chain, .init = h_setup, .fini = h_teardown, .timeout = 120);

/* jit mode (the hook is installed) with one call: nothing gets hot. */
static const char *const chain_env[] = {"OPJIT_MODE=jit", "OPJIT_SAMPLE_HZ=0", NULL};

/* A mode of crash_prog exits 0 and prints the same with and without the agent. */
static void same_as_without(const char *mode, const char *expect)
{
  const char *argv[] = {CRASH_PROG, mode, NULL};
  char with[64], without[64];
  snprintf(with, sizeof with, "%s_agent", mode);
  snprintf(without, sizeof without, "%s_plain", mode);
  int st = h_run(without, 0, chain_env, argv);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s without the agent: %d", mode, st);
  run_ok(with, chain_env, argv);
  cr_assert(strstr(h_output(with, "out"), expect), "%s: %s", mode, h_output(with, "out"));
  cr_assert_str_eq(h_output(with, "out"), h_output(without, "out"));
}

Test(chain, the_programs_own_handlers_and_sig_ign_behave_as_without_the_agent)
{
  same_as_without("handler", "handled signal 11, its mask held");
  same_as_without("plain", "handled signal 11\n");
  same_as_without("late", "handled signal 11, its mask held");
  same_as_without("ignore", "ignored");
  cr_assert_eq(markers(), 0, "a fault the program handles leaves no marker");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs WHERE status='exited'"), 4);
}

Test(chain, a_fault_in_the_program_kills_it_as_before_and_blames_no_kernel)
{
  if (h_sanitized())
    cr_skip_test("the sanitizer's runtime in the host reports the fault itself and exits 1: the "
                 "plain suite checks that it dies of SIGSEGV as without the agent");
  const char *argv[] = {CRASH_PROG, "default", NULL};
  int st = h_run("plain", 0, chain_env, argv);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "without the agent: %d", st);
  run_dies("agent", chain_env, argv, SIGSEGV);
  /* The line names the program's own code, found in /proc/self/maps. */
  const char *err = h_output("agent", "err");
  cr_assert_eq(h_count_lines(err, "the program dies of SIGSEGV (address 0x"), 1, "%s", err);
  cr_assert_eq(h_count_lines(err, "on thread 'crash_prog' at crash_prog+0x"), 1, "%s", err);
  cr_assert_eq(h_count_lines(err, "(not in opjit's kernels)"), 1, "%s", err);
  run_ok("next", chain_env, (const char *[]){CRASH_PROG, "handler", NULL});
  cr_assert_eq(h_count_lines(h_output("next", "err"), "an earlier process on this database died "
                                                      "of SIGSEGV at crash_prog+0x"),
               1, "the next run names where: %s", h_output("next", "err"));
  cr_assert_eq(h_count_lines(h_output("next", "err"), "outside JIT code: the program's own fault"),
               1);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs WHERE id=1 AND status='crashed'"), 1,
               "the run says crashed, not lost");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events"), 0, "no kernel is blamed");
  cr_assert_eq(markers(), 0);
}

Test(chain, pythons_faulthandler_reports_the_fault_and_the_process_dies_as_without_the_agent)
{
  if (access("/usr/bin/python3", X_OK) != 0)
    cr_skip_test("Debian's /usr/bin/python3 is not installed");
  if (h_sanitized())
    cr_skip_test("the sanitizer's runtime preloaded into python3 reports the fault after "
                 "faulthandler and exits 1: the plain suite checks this");
  const char *argv[] = {"/usr/bin/python3",
                        "-X",
                        "faulthandler",
                        "-c",
                        "import ctypes, numpy as np\n"
                        "a = np.ones((16, 16), np.float32)\n"
                        "print('sum', float((a @ a).sum()), flush=True)\n"
                        "settle = getattr(ctypes.CDLL(None), 'opjit_settle', None)\n"
                        "settle and settle(20000)\n" /* the agent's run is recorded */
                        "ctypes.string_at(0)\n",
                        NULL};
  int plain = h_run("plain", 0, chain_env, argv), agent = h_run("agent", 1, chain_env, argv);
  cr_assert(WIFSIGNALED(plain) && WTERMSIG(plain) == SIGSEGV, "without the agent: %d\n%s", plain,
            h_output("plain", "err"));
  cr_assert(WIFSIGNALED(agent) && WTERMSIG(agent) == SIGSEGV, "with the agent: %d\n%s", agent,
            h_output("agent", "err"));
  cr_assert_str_eq(h_output("agent", "out"), "sum 4096.0\n");
  cr_assert(strstr(h_output("agent", "err"), "Fatal Python error: Segmentation fault"), "%s",
            h_output("agent", "err"));
  cr_assert(strstr(h_output("agent", "err"), "in string_at"), "its traceback: %s",
            h_output("agent", "err"));
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs"), 1, "the agent was active");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events"), 0, "no kernel is blamed");
}
