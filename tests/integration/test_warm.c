/* SPDX-License-Identifier: MIT */
/* Profiles across runs, in a real host (jit_prog, every result checked against the reference
 * BLAS) and a real database: run 2 places run 1's kernels without compiling or loading LLVM,
 * and each signature's first call runs its kernel; damaged, foreign and outdated objects are
 * invalidated with their reason and recompiled; a profile whose shapes changed lets the old
 * kernels decay; two processes of one program at once both land in its profile. */
#include "harness.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(warm, .init = h_setup_jit, .fini = h_teardown, .timeout = 600);

/* Every signature is hot from its first call (and in the profile), and the first call waits
 * for the whole warm start, so the runs are deterministic; OPJIT_LOG=info tells whether LLVM
 * was loaded ("JIT ready"). The sweep's calls are rare: the judge times them in cold pairs,
 * and the fault seam has every kernel win them (a loser would be dropped: test_pooled). */
static const char *const env[] = {"OPJIT_MODE=jit", "OPJIT_HOT_PAYBACK=0", "OPJIT_DUEL=0", "OPJIT_HOT_CALLS=1",
                                  "OPJIT_SAMPLE_HZ=0", "OPJIT_LOG=info", "OPJIT_TEST_FAULT=fast",
                                  "OPJIT_WARM_WAIT_US=60000000", NULL};

/* prog (jit_prog, or a copy) sweeping, under env e; its results checked. */
static void sweep_prog(const char *prog, const char *tag, const char *const *e, const char *sigs,
                       const char *passes, const char *seed)
{
  int st = h_run(tag, 1, e, (const char *[]){prog, "sweep", sigs, passes, seed, NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d\n%s\n%s", tag, st,
            h_output(tag, "out"), h_output(tag, "err"));
  cr_assert(strstr(h_output(tag, "out"), "mismatches 0"), "%s", h_output(tag, "out"));
}

static void sweep(const char *tag, const char *const *e, const char *sigs, const char *passes,
                  const char *seed)
{
  sweep_prog(H_JIT_PROG, tag, e, sigs, passes, seed);
}

/* The runs below start from a run 1 that compiled every signature: under a sanitizer, whose
 * JIT compiles several times slower, it rarely does (h_sanitized). */
static void skip_if_sanitized(void)
{
  if (h_sanitized())
    cr_skip_test("run 1 compiles only part of its signatures under a sanitizer: the plain suite "
                 "checks this");
}

static int64_t objects(void) { return h_query(NULL, "SELECT count(*) FROM objects"); }

static int64_t events(int run, const char *kind)
{
  return h_query(NULL, "SELECT count(*) FROM events WHERE run_id=%d AND kind='%s'", run, kind);
}

Test(warm, run_two_places_every_kernel_and_compiles_nothing)
{
  skip_if_sanitized();
  sweep("run1", env, "40", "30", "99");
  int64_t compiled = events(1, "published");
  cr_assert_gt(compiled, 20, "run 1 compiled %lld kernels", (long long)compiled);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects"), compiled, "every kernel stored");
  cr_assert(strstr(h_output("run1", "err"), "JIT ready"), "%s", h_output("run1", "err"));
  cr_assert_eq(h_query(NULL, "SELECT sum(n) FROM machine_compiles WHERE family='llvm-load'"), 1,
               "LLVM's load measured once, what the payback test charges a first compile");

  /* Run 2 calls each signature once: that call is its first. */
  sweep("run2", env, "40", "1", "99");
  cr_assert_eq(events(2, "queued"), 0);
  cr_assert_eq(events(2, "published"), 0, "nothing compiled");
  cr_assert_eq(events(2, "loaded"), compiled, "every object placed");
  cr_assert_null(strstr(h_output("run2", "err"), "JIT ready"), "LLVM was loaded: %s",
                 h_output("run2", "err"));
  cr_assert(strstr(h_output("run2", "err"), "warm start from 1 runs"), "%s",
            h_output("run2", "err"));
  /* Each hot signature's one call ran its kernel: the variant served it, and it was in place
   * before any call. */
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM variants WHERE run_id=2 AND origin='loaded'"
                             " AND status='ready' AND calls=1 AND pre_calls=0"), compiled);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM variants WHERE run_id=2"), compiled);
  cr_assert_gt(h_query(NULL, "SELECT warm_ns FROM runs WHERE id=2"), 0);
}

/* Whether /proc/cpuinfo's flags line lists word. */
static int cpuinfo_has(const char *word)
{
  char line[8192];
  FILE *f = fopen("/proc/cpuinfo", "r");
  int has = 0;
  size_t n = strlen(word);
  while (f && !has && fgets(line, sizeof line, f))
    if (strncmp(line, "flags", 5) == 0)
      for (const char *p = line; !has && (p = strstr(p, word)) != NULL; p += n)
        has = p[-1] == ' ' && (p[n] == ' ' || p[n] == '\n');
  if (f)
    fclose(f);
  return has;
}

/* valgrind runs its programs on a CPU of its own, without AVX-512 (its CPUID says so), while
 * /proc/cpuinfo still lists it: a program run under it must not place the AVX-512 kernels the
 * machine's other runs stored (they would end it with SIGILL), but compile its own, which
 * native runs never place either. */
Test(warm, a_run_under_valgrind_places_no_kernel_wider_than_its_cpu_runs)
{
  skip_if_sanitized();
  if (!cpuinfo_has("avx512f"))
    cr_skip_test("needs a CPU with AVX-512, which valgrind hides from its programs");
  if (access("/usr/bin/valgrind", X_OK) != 0)
    cr_skip_test("needs /usr/bin/valgrind (scripts/deps.sh installs it)");
  sweep("run1", env, "4", "30", "99");
  int64_t compiled = events(1, "published");
  cr_assert_gt(compiled, 0);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects WHERE symbol LIKE '%%avx512%%'"),
               compiled, "run 1 stored AVX-512 kernels");

  /* Its tool "none" runs the program on valgrind's CPU and checks nothing else. */
  int st = h_run("vg", 1, env, (const char *[]){"/usr/bin/valgrind", "-q", "--tool=none",
                                                H_JIT_PROG, "sweep", "4", "3", "99", NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d\n%s", st, h_output("vg", "err"));
  cr_assert(strstr(h_output("vg", "out"), "mismatches 0"), "%s", h_output("vg", "out"));
  cr_assert_eq(events(2, "loaded"), 0, "placed a kernel it cannot run");
  cr_assert_eq(events(2, "crashed"), 0);
  cr_assert_eq(events(2, "published"), compiled, "compiled its own");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects WHERE cpu LIKE '%% isa=avx2'"
                             " AND symbol LIKE '%%avx2%%'"), compiled, "and stored them apart");

  sweep("run3", env, "4", "1", "99");
  cr_assert_eq(events(3, "loaded"), compiled, "native runs keep placing their own");
  cr_assert_eq(events(3, "published"), 0);
}

/* A fleet server that takes connections and never answers: libpq waits its connect_timeout
 * (2 s at least) for it. Returns the listening socket; fleet gets OPJIT_FLEET naming it. */
static int silent_fleet(char *fleet, size_t len)
{
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s/.s.PGSQL.5432", h_dir);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0);
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "%s", a.sun_path);
  cr_assert_eq(listen(fd, 64), 0);
  snprintf(fleet, len, "OPJIT_FLEET=host=%s port=5432 dbname=opjit", h_dir);
  return fd;
}

/* A writer that gets no CPU (a SCHED_FIFO host thread with every other CPU taken; the seam
 * OPJIT_TEST_FAULT=writer_stall holds it until the warm start is done, 60 s at most) does not
 * leave the run on the original to its end: 20 ms after the first call a host thread runs the
 * warm start itself, once. With a fleet named, that host thread places what the local database
 * has and leaves the fleet's fetch (a server that never answers: 2 s) to the writer, which tries
 * it when it runs. */
Test(warm, a_host_thread_runs_the_warm_start_the_writer_has_not_begun)
{
  skip_if_sanitized();
  sweep("run1", env, "12", "30", "99");
  int64_t compiled = events(1, "published");
  cr_assert_gt(compiled, 5, "run 1 compiled %lld kernels", (long long)compiled);
  const char *late[] = {"OPJIT_MODE=jit", "OPJIT_HOT_PAYBACK=0", "OPJIT_DUEL=0",
                        "OPJIT_HOT_CALLS=1", "OPJIT_SAMPLE_HZ=0", "OPJIT_LOG=info",
                        "OPJIT_TEST_FAULT=writer_stall", "OPJIT_WARM_WAIT_US=0", NULL};
  sweep("run2", late, "12", "4", "99");
  cr_assert(strstr(h_output("run2", "err"), "a host thread runs it"), "%s",
            h_output("run2", "err"));
  cr_assert_eq(events(2, "loaded"), compiled, "every object placed, once");
  cr_assert_eq(events(2, "published"), 0, "nothing compiled");
  cr_assert_null(strstr(h_output("run2", "err"), "JIT ready"), "LLVM was loaded: %s",
                 h_output("run2", "err"));

  /* The exit waits for the writer (its fetch, then its final write): its warning is in. */
  char fleet[200];
  int fd = silent_fleet(fleet, sizeof fleet);
  const char *net[] = {"OPJIT_MODE=jit", "OPJIT_HOT_PAYBACK=0", "OPJIT_DUEL=0",
                       "OPJIT_HOT_CALLS=1", "OPJIT_SAMPLE_HZ=0", "OPJIT_LOG=info",
                       "OPJIT_TEST_FAULT=writer_stall", "OPJIT_WARM_WAIT_US=0",
                       "OPJIT_EXIT_WAIT_MS=60000", fleet, NULL};
  sweep("run3", net, "12", "4", "99");
  close(fd);
  const char *err = h_output("run3", "err");
  cr_assert(strstr(err, "a host thread runs it"), "%s", err);
  cr_assert(strstr(err, "the fleet's part of the warm start is left to the writer"), "%s", err);
  cr_assert_eq(events(3, "loaded"), compiled, "every object placed, once, by the host thread");
  struct stat st;
  if (stat(OPJIT_BUILD_DIR "/libopjit-fleet.so", &st) == 0) /* built with the fleet store */
    cr_assert_eq(h_count_lines(err, "the run starts from the local profile alone"), 1,
                 "the writer's fetch, once: %s", err);
}

/* A short program whose warm start the writer begins only after the program began to end (the
 * seam holds the writer until then) does not wait for the placing at its end, whether it ends by
 * exit, _exit or exec: no kernel is placed, nothing is compiled (an exec, which may fail, leaves
 * the queue alone), LLVM is not loaded, and the stored kernel is kept for the next run, which
 * places it. (Without it, the exec's and _exit's wait for the writer ran out: no run recorded.) */
Test(warm, a_program_that_ends_before_the_warm_start_places_nothing_and_keeps_its_kernels)
{
  skip_if_sanitized();
  int st = h_run("run1", 1, env, (const char *[]){H_JIT_PROG, "many", "5000", NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", h_output("run1", "err"));
  cr_assert_eq(objects(), 1, "run 1 stored its kernel");
  const char *late[] = {"OPJIT_MODE=jit", "OPJIT_HOT_PAYBACK=0", "OPJIT_DUEL=0",
                        "OPJIT_HOT_CALLS=1", "OPJIT_SAMPLE_HZ=0", "OPJIT_LOG=info",
                        "OPJIT_TEST_FAULT=writer_late", "OPJIT_WARM_WAIT_US=0", NULL};
  const char *ends[] = {"exit", "_exit", "exec"}, *status[] = {"exited", "exited", "exec"};
  for (int i = 0; i < 3; i++) {
    const char *argv[] = {H_JIT_PROG, "few", "10", i ? ends[i] : NULL, NULL};
    st = h_run(ends[i], 1, late, argv);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", h_output(ends[i], "err"));
    cr_assert(strstr(h_output(ends[i], "out"), "mismatches 0"), "%s", h_output(ends[i], "out"));
    const char *err = h_output(ends[i], "err");
    cr_assert(strstr(err, "the program ended before the warm start: no stored kernel placed"),
              "%s: %s", ends[i], err);
    cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs WHERE id=%d AND status='%s'"
                               " AND warm_ns IS NULL", i + 2, status[i]), 1, "%s", ends[i]);
    cr_assert_eq(events(i + 2, "loaded"), 0, "a kernel placed at the %s", ends[i]);
    if (i < 2) {
      cr_assert_eq(events(i + 2, "queued"), 0, "a compile queued at the %s", ends[i]);
      cr_assert_null(strstr(err, "JIT ready"), "LLVM loaded at the %s: %s", ends[i], err);
    }
  }
  cr_assert_eq(objects(), 1, "the stored kernel kept");
  st = h_run("last", 1, env, (const char *[]){H_JIT_PROG, "many", "10", NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", h_output("last", "err"));
  cr_assert_eq(events(5, "loaded"), 1, "the next run places it");
}

Test(warm, damaged_foreign_and_outdated_objects_are_invalidated_and_recompiled)
{
  skip_if_sanitized();
  sweep("run1", env, "40", "30", "5");
  int64_t n = h_query(NULL, "SELECT count(*) FROM objects");
  cr_assert_gt(n, 10);
  /* Three objects, each made unusable in its own way. */
  h_exec("UPDATE objects SET code = zeroblob(length(code)) WHERE id ="
          " (SELECT id FROM objects ORDER BY id LIMIT 1 OFFSET 0)");
  h_exec("UPDATE objects SET generator = generator + 1 WHERE id ="
          " (SELECT id FROM objects ORDER BY id LIMIT 1 OFFSET 1)");
  h_exec("UPDATE objects SET cpu = 'Another CPU [flags 0]' WHERE id ="
          " (SELECT id FROM objects ORDER BY id LIMIT 1 OFFSET 2)");
  h_exec("UPDATE objects SET llvm = '18.1.0' WHERE id ="
          " (SELECT id FROM objects ORDER BY id LIMIT 1 OFFSET 3)");
  /* Intact bytes (the checksum holds) that the loader refuses: no such entry symbol. */
  h_exec("UPDATE objects SET symbol = 'opjit_no_such_kernel' WHERE id ="
          " (SELECT id FROM objects ORDER BY id LIMIT 1 OFFSET 4)");
  sweep("run2", env, "40", "30", "5");
  const char *reasons[] = {"checksum", "generator", "cpu", "llvm", "unloadable"};
  for (int i = 0; i < 5; i++)
    cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE run_id=2 AND"
                               " kind='invalidated' AND detail LIKE '%s:%%'", reasons[i]), 1,
                 "one %s invalidation", reasons[i]);
  cr_assert_eq(events(2, "loaded"), n - 5);
  cr_assert_eq(events(2, "published"), 5, "the five were recompiled");
  cr_assert(strstr(h_output("run2", "err"), "JIT ready"), "LLVM loaded for the recompiles");
  /* This CPU has a good object for every signature again; the other CPU's stays. */
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects WHERE cpu <> 'Another CPU [flags 0]'"),
               n);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects WHERE cpu = 'Another CPU [flags 0]'"), 1);
  sweep("run3", env, "40", "1", "5");
  cr_assert_eq(events(3, "loaded"), n, "run 3 loads every object");
  cr_assert_eq(events(3, "invalidated"), 0, "this CPU's objects come first");
}

/* Each signature called once, then the JIT settles: every kernel is compiled and published
 * after its signature's only call, so no call verifies it; its check on scratch operands
 * against the library before publication does (docs/jit.md), and the writer stores it. Run 2
 * places every one at its signature's first call, compiling nothing. For the GEMM, GEMV, AXPY
 * and DOT families (jit_prog's sweep, gemv and vec; strided vectors get no kernel). */
Test(warm, kernels_published_after_their_only_call_are_stored_and_placed_by_run_two)
{
  skip_if_sanitized();
  static const char *const modes[][3] = {{"sweep", "40", "99"}, {"gemv", "30", "7"},
                                         {"vec", "30", "5"}};
  for (size_t t = 0; t < sizeof modes / sizeof *modes; t++) {
    const char *const *m = modes[t];
    int st = h_run("once1", 1, env, (const char *[]){H_JIT_PROG, m[0], m[1], "1", m[2], NULL});
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s", m[0], h_output("once1", "err"));
    int64_t compiled = events(1, "published");
    cr_assert_gt(compiled, 5, "%s: run 1 compiled %lld kernels", m[0], (long long)compiled);
    cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE run_id=1 AND kind='verified'"
                               " AND detail LIKE 'on scratch operands: matches%%'"),
                 compiled, "%s: each checked on scratch operands before publication", m[0]);
    cr_assert_eq(objects(), compiled, "%s: every kernel stored", m[0]);

    st = h_run("once2", 1, env, (const char *[]){H_JIT_PROG, m[0], m[1], "1", m[2], NULL});
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s", m[0], h_output("once2", "err"));
    cr_assert(strstr(h_output("once2", "out"), "mismatches 0"), "%s", h_output("once2", "out"));
    cr_assert_eq(events(2, "queued"), 0, "%s", m[0]);
    cr_assert_eq(events(2, "published"), 0, "%s: nothing compiled", m[0]);
    cr_assert_eq(events(2, "loaded"), compiled, "%s: every object placed", m[0]);
    cr_assert_null(strstr(h_output("once2", "err"), "JIT ready"), "%s: LLVM was loaded: %s", m[0],
                   h_output("once2", "err"));
    cr_assert_eq(h_query(NULL, "SELECT count(*) FROM variants WHERE run_id=2 AND origin='loaded'"
                               " AND calls=1 AND pre_calls=0"),
                 compiled, "%s: each placed kernel served its signature's one call", m[0]);
    h_teardown();
    h_setup();
  }
}

/* jit_prog copied to h_dir/tag (the same code, another program to the store) sweeping as run1
 * did, under env e. */
static void sweep_as_another(const char *tag, const char *const *e)
{
  char prog[4200], cmd[8600];
  snprintf(prog, sizeof prog, "%s/%s", h_dir, tag);
  snprintf(cmd, sizeof cmd, "cp %s %s", H_JIT_PROG, prog);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  sweep_prog(prog, tag, e, "40", "30", "99");
}

/* The store keeps kernels per signature and machine, not per program: a program whose profile
 * has none of them (another executable) gets each stored kernel placed when its signature gets
 * hot, without loading LLVM, and judged as a compiled one would be. */
Test(warm, another_programs_stored_kernels_are_placed_when_their_signatures_get_hot)
{
  skip_if_sanitized();
  sweep("run1", env, "40", "30", "99");
  int64_t compiled = events(1, "published");
  cr_assert_gt(compiled, 20, "run 1 compiled %lld kernels", (long long)compiled);
  cr_assert_eq(objects(), compiled, "every kernel stored");

  /* The first call does not wait for the warm start here: signatures hot meanwhile wait for
   * the shelf and the run's record, not for LLVM. */
  static const char *const now[] = {"OPJIT_MODE=jit", "OPJIT_HOT_PAYBACK=0", "OPJIT_DUEL=0",
                                    "OPJIT_HOT_CALLS=1", "OPJIT_SAMPLE_HZ=0", "OPJIT_LOG=info",
                                    "OPJIT_TEST_FAULT=fast", NULL};
  sweep_as_another("other", now);
  cr_assert_eq(h_query(NULL, "SELECT count(DISTINCT program_id) FROM runs"), 2);
  cr_assert_null(strstr(h_output("other", "err"), "warm start from"), "no profile to start from");
  cr_assert_eq(events(2, "queued"), compiled, "each signature queued once hot");
  cr_assert_eq(events(2, "published"), 0, "nothing compiled");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE run_id=2 AND kind='loaded' AND"
                             " detail LIKE '%%no compile (the store had it when the signature"
                             " got hot)'"),
               compiled, "every stored kernel placed once hot");
  cr_assert_null(strstr(h_output("other", "err"), "JIT ready"), "LLVM was loaded: %s",
                 h_output("other", "err"));
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM variants WHERE run_id=2 AND origin='loaded'"
                             " AND calls > 0"),
               compiled, "each placed kernel served calls");
  cr_assert_eq(objects(), compiled, "the objects are the same ones, none stored twice");

  /* With the payback test on, a stored kernel is charged its placing, not a compile: most of
   * the sweep's signatures (calls of microseconds) do not pay back even that after 8 calls, and
   * say so; the longest do, and are placed. None is weighed against a compile. */
  static const char *const payback[] = {"OPJIT_MODE=jit", "OPJIT_HOT_CALLS=8", "OPJIT_DUEL=0",
                                        "OPJIT_SAMPLE_HZ=0", NULL};
  sweep_as_another("third", payback);
  int64_t waiting = h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=3 AND reason LIKE"
                                  " 'after 8 calls, not worth placing yet: %%ms placing charge"
                                  " (%%the database stores its kernel)'");
  int64_t placed = h_query(NULL, "SELECT count(*) FROM events WHERE run_id=3 AND kind='loaded'"
                                 " AND detail LIKE '%%(the store had it when the signature got"
                                 " hot)'");
  cr_assert_gt(waiting, 0);
  cr_assert_eq(waiting + placed, compiled, "each stored signature weighed against its placing: "
               "%lld waiting, %lld placed", (long long)waiting, (long long)placed);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=3 AND reason LIKE"
                             " '%%compile charge%%'"), 0);
  cr_assert_eq(events(3, "published"), 0, "nothing compiled");

  /* OPJIT_WARM=0: no stored kernel is placed, at the start or later (README, security). */
  const char *cold[sizeof env / sizeof *env + 1] = {"OPJIT_WARM=0"};
  memcpy(cold + 1, env, sizeof env);
  sweep_as_another("fourth", cold);
  cr_assert_eq(events(4, "loaded"), 0);
  cr_assert_eq(events(4, "published"), compiled, "every kernel compiled anew");

  /* Nor from a database others can write (the warm start's rule: its kernels are code). */
  cr_assert_eq(chmod(h_db, 0666), 0);
  sweep_as_another("fifth", env);
  cr_assert_eq(chmod(h_db, 0600), 0);
  cr_assert_eq(events(5, "loaded"), 0);
  cr_assert_eq(events(5, "published"), compiled);

  /* Objects of another generator are no kernels to place: charged a compile, as none were. */
  h_exec("UPDATE objects SET generator = generator + 1");
  sweep_as_another("sixth", payback);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=6 AND reason LIKE"
                             " '%%placing charge%%'"), 0);
  cr_assert_gt(h_query(NULL, "SELECT count(*) FROM run_sigs WHERE run_id=6 AND reason LIKE"
                             " 'after 8 calls, not worth a compile yet: %%'"), 0);
  cr_assert_eq(events(6, "loaded"), 0);
}

Test(warm, shapes_that_stop_being_called_decay_and_new_ones_become_hot)
{
  /* Each run's weight halves every run; a signature is hot at 16 decayed calls, and a stored
   * kernel is placed as long as its signature's decayed calls weigh one call or more. A kernel
   * compiled too late in a run to be verified is not stored: the next run compiles it again. */
  const char *e[] = {"OPJIT_MODE=jit", "OPJIT_HOT_PAYBACK=0", "OPJIT_DUEL=0", "OPJIT_HOT_CALLS=16",
                     "OPJIT_DECAY=1", "OPJIT_SAMPLE_HZ=0", "OPJIT_WARM_WAIT_US=60000000",
                     "OPJIT_TEST_FAULT=fast", NULL};
  sweep("a1", e, "12", "20", "1"); /* run 1: shapes A, 20 calls each */
  int64_t stored1 = objects();
  sweep("a2", e, "12", "20", "1"); /* run 2: A, warm */
  cr_assert_eq(events(2, "loaded"), stored1);
  int64_t a = objects();
  cr_assert_gt(a, 5);
  /* run 3: shapes B, 60 calls each (time for their kernels to be compiled and verified within
   * the run, on a loaded machine too); A weighs 20 + 20/2 = 30 */
  sweep("b3", e, "12", "60", "2");
  cr_assert_eq(events(3, "invalidated"), 0);
  cr_assert_eq(events(3, "loaded"), a, "A is placed: its signatures are still called");
  int64_t b = objects() - a;
  cr_assert_gt(b, 5);
  /* Runs 4 to 7: A weighs 15, 7.5, 3.75, 1.875 calls: far from hot, still placed. */
  for (int run = 4; run <= 7; run++) {
    char tag[8];
    snprintf(tag, sizeof tag, "b%d", run);
    sweep(tag, e, "12", "20", "2");
    cr_assert_eq(events(run, "invalidated"), 0, "run %d", run);
    cr_assert_geq(events(run, "loaded"), a + b, "run %d places A's and B's kernels", run);
  }
  /* Run 8: A weighs 20/32 + 20/64 = 0.94 calls, under one: not called any more. */
  int64_t before = objects();
  sweep("b8", e, "12", "20", "2");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE run_id=8 AND kind='invalidated'"
                             " AND detail LIKE 'decayed:%%'"), a);
  cr_assert_eq(events(8, "invalidated"), a);
  cr_assert_eq(events(8, "loaded"), before - a, "B's kernels are the warm ones now");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM objects o WHERE o.sig_id NOT IN"
                             " (SELECT sig_id FROM run_sigs WHERE run_id=8)"), 0,
               "A's objects are gone");
  cr_assert_geq(objects(), before - a);
}

Test(warm, two_processes_of_one_program_both_extend_its_profile)
{
  skip_if_sanitized();
  sweep("first", env, "20", "20", "3");
  const char *argv[] = {H_JIT_PROG, "sweep", "20", "20", "3", NULL};
  pid_t p1 = h_spawn("c1", 1, env, argv), p2 = h_spawn("c2", 1, env, argv);
  int s1, s2;
  cr_assert_eq(waitpid(p1, &s1, 0), p1);
  cr_assert_eq(waitpid(p2, &s2, 0), p2);
  h_assert_no_sanitizer_report("c1");
  h_assert_no_sanitizer_report("c2");
  cr_assert(WIFEXITED(s1) && WEXITSTATUS(s1) == 0 && WIFEXITED(s2) && WEXITSTATUS(s2) == 0,
            "%s\n%s", h_output("c1", "err"), h_output("c2", "err"));
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM runs WHERE status='exited'"), 3);
  cr_assert_eq(h_query(NULL, "SELECT count(DISTINCT run_id) FROM run_sigs"), 3,
               "both concurrent runs recorded their calls");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE run_id > 1 AND kind='published'"),
               0, "both started warm");
  sweep("last", env, "20", "1", "3");
  cr_assert(strstr(h_output("last", "err"), "warm start from 3 runs"), "%s",
            h_output("last", "err"));
}

/* jit_prog sweeping sigs signatures of seed a once, then its fork child those of seed b: the
 * parent's run and the child's (found whichever writer began its run first: the fork may come
 * before the parent's run is recorded). */
static void sweep_then_fork(const char *sigs, const char *a, const char *b, int *parent,
                            int *child)
{
  int st = h_run("fork", 1, env, (const char *[]){H_JIT_PROG, "warmfork", sigs, a, b, NULL});
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s\n%s", h_output("fork", "out"),
            h_output("fork", "err"));
  *parent = (int)h_query(NULL, "SELECT id FROM runs WHERE id > 1 AND parent_run IS NULL");
  *child = (int)h_query(NULL, "SELECT id FROM runs WHERE parent_run = %d", *parent);
  cr_assert(*parent > 1 && *child > 1, "runs: parent %d, child %d", *parent, *child);
}

Test(warm, a_fork_child_of_a_warm_process_compiles_its_own_signatures)
{
  h_skip_threaded_fork_under_asan();
  sweep("first", env, "10", "30", "21");
  int64_t stored = objects();
  cr_assert_gt(stored, 3);
  /* The warm parent and its child, whose new signatures need LLVM. */
  int parent, child;
  sweep_then_fork("10", "21", "22", &parent, &child);
  cr_assert_eq(events(parent, "loaded"), stored);
  cr_assert_gt(events(child, "published"), h_sanitized() ? 0 : 3, "the child compiled");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM variants WHERE run_id=%d AND status='failed'",
                       child), 0);
}

/* A fork child of a process that had loaded LLVM compiles nothing (LLVM's state in it is what
 * the parent's compile thread left), but the kernels the database stores for its hot signatures
 * (here another program's) are placed there as anywhere: placing needs no LLVM. */
Test(warm, a_fork_child_of_a_compiling_process_places_stored_kernels)
{
  skip_if_sanitized();
  sweep_as_another("other", env);
  int64_t stored = objects();
  cr_assert_gt(stored, 20);
  /* jit_prog's first run: the parent compiles its own signatures (seed 7; the sweep waits for
   * them), then its child sweeps the other program's (seed 99). */
  int parent, child;
  sweep_then_fork("40", "7", "99", &parent, &child);
  cr_assert_gt(events(parent, "published"), 20, "the parent compiled (LLVM loaded)");
  cr_assert_eq(events(child, "published"), 0, "the child compiled nothing");
  /* Those of the child's signatures the parent did not place itself (any it shares with seed 7) */
  int64_t placed = h_query(NULL, "SELECT count(*) FROM events WHERE run_id=%d AND kind='loaded'"
                                 " AND detail LIKE '%%(the store had it when the signature got"
                                 " hot)'", child);
  cr_assert_gt(placed, stored / 2, "%lld of %lld stored kernels placed in the child",
               (long long)placed, (long long)stored);
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM variants WHERE run_id=%d AND origin='loaded'"
                             " AND calls > 0", child),
               placed, "each served the child's calls");
}

Test(warm, a_full_code_cache_evicts_placed_kernels_and_places_the_deferred_later)
{
  skip_if_sanitized();
  sweep("first", env, "30", "30", "31");
  int64_t stored = objects();
  cr_assert_gt(stored, 12);
  /* Room for about 8 placed kernels (each maps at least a page): the others, hot from their
   * first call, evict placed ones; once the evicted mappings are freed (after a grace period)
   * the deferred ones are queued again and take their stored kernels then. Every result stays
   * right (sweep checks them). */
  const char *small[] = {"OPJIT_MODE=jit", "OPJIT_HOT_PAYBACK=0", "OPJIT_DUEL=0", "OPJIT_HOT_CALLS=1",
                         "OPJIT_SAMPLE_HZ=0", "OPJIT_TEST_CODE_CACHE_BYTES=36000",
                         "OPJIT_TEST_FAULT=fast", NULL};
  sweep("small", small, "30", "30", "31");
  int64_t at_start = h_query(NULL, "SELECT count(*) FROM events WHERE run_id=2 AND kind='loaded'"
                                   " AND detail NOT LIKE '%%when the signature got hot)'");
  cr_assert(at_start > 0 && at_start < stored, "%lld of %lld placed by the warm start",
            (long long)at_start, (long long)stored);
  cr_assert_gt(events(2, "evicted"), 0, "placed kernels were evicted");
  cr_assert_gt(events(2, "deferred"), 0);
  cr_assert_gt(h_query(NULL, "SELECT count(*) FROM events d WHERE run_id=2 AND kind='deferred'"
                             " AND EXISTS (SELECT 1 FROM events l WHERE l.run_id=2 AND"
                             " l.sig_id=d.sig_id AND l.id>d.id AND (l.kind='published' OR"
                             " l.detail LIKE '%%when the signature got hot)'))"),
               0, "deferred signatures got their kernels once room was freed");
  cr_assert_eq(h_query(NULL, "SELECT count(*) FROM events WHERE run_id=2 AND kind='invalidated'"),
               0, "a full cache is not an invalid object");
}

Test(warm, a_database_others_can_write_places_no_kernel)
{
  /* Stored kernels are code: a database, or a folder, that another user could change is not
   * trusted with them. Root owns everything here, so "others" is the mode's group and world. */
  sweep("run1", env, "12", "30", "5");
  int64_t stored = objects();
  cr_assert_gt(stored, 0, "run 1 stored kernels");
  cr_assert_eq(chmod(h_db, 0666), 0);
  sweep("run2", env, "12", "1", "5");
  cr_assert_eq(events(2, "loaded"), 0, "no kernel placed from a world-writable database");
  cr_assert_eq(h_count_lines(h_output("run2", "err"), "can be written by other users"), 1,
               "one warning: %s", h_output("run2", "err"));
  cr_assert(strstr(h_output("run2", "err"), h_db), "it names the file: %s",
            h_output("run2", "err"));
  cr_assert_eq(chmod(h_db, 0600), 0);
  cr_assert_eq(chmod(h_dir, 0777), 0);
  sweep("run3", env, "12", "1", "5");
  cr_assert_eq(events(3, "loaded"), 0, "nor from a world-writable folder");
  cr_assert(strstr(h_output("run3", "err"), "can be written by other users"), "%s",
            h_output("run3", "err"));
  cr_assert_eq(chmod(h_dir, 0700), 0);
  sweep("run4", env, "12", "1", "5");
  cr_assert_gt(events(4, "loaded"), 0, "private again: its kernels are placed");
  cr_assert_null(strstr(h_output("run4", "err"), "other users"), "%s", h_output("run4", "err"));
}
