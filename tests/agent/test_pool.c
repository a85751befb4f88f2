/* SPDX-License-Identifier: MIT */
/* The never-slower judge pooled across runs: each short run reads the judge's rounds on its
 * stored kernel from a real SQLite file (store.h, judge_pools), adds its own cold pairs
 * (compare.h, ag_cmp_pair) from recorded timings, judges them by the same rule after every
 * round, and writes the pool back with the run's variant row, as the agent's warm start, watch
 * and writer do. A kernel that loses by 10 % is demoted in the run whose pooled rounds first
 * make the sign test significant, a winning one is kept, and a tie is not kept for ever. */
#include "agent/compare.h"
#include "store/store.h"
#include "tests/common/fixture.h"

#include <criterion/criterion.h>
#include <string.h>

TestSuite(pool, .init = fx_setup, .fini = fx_teardown);

#define ROUNDS_A_RUN 4 /* pairs one short run of a rarely called signature closes */
#define ORIG_NS 2000   /* the original's recorded cold timing */

static const char cmdline[] = "prog";
static const char key[32] = "sgemm 20x35x11 rarely called";
static const char code[] = "\x7f"
                           "ELF pretend object bytes";
static const st_run_info_t prog = {
    .exe = "/bin/prog", .build_id = "b", .cpu_model = "Test CPU", .cpu_flags = "avx2 fma"};

/* What one run did with the signature's kernel. */
typedef struct run_s {
  int placed;              /* its stored kernel was placed (the pool did not already lose) */
  enum ag_verdict verdict; /* the judge's first verdict in the run (UNDECIDED: none) */
  char event[256];         /* the demotion's words, as the agent's event gives them */
  ag_cmp_t cmp;            /* the comparison at the run's end */
} run_t;

/* Run number r (from 1) of the program: the pooled rounds in, ratio[(r-1) * ROUNDS_A_RUN ...]
 * as this run's pairs (the original's timing ORIG_NS, the variant's that times the ratio),
 * the pool out with the run's variant row; run 1 compiles and stores the kernel. */
static run_t one_run(int r, const double *ratio)
{
  run_t out = {0};
  st_db_t *db = fx_open(fx_db, ST_OPEN_CREATE);
  st_run_info_t in = prog;
  in.cmdline = cmdline, in.cmdline_len = sizeof cmdline, in.options = "", in.options_len = 1;
  in.ncpu = 2, in.pid = 100 + r, in.ppid = 1, in.start_ns = r, in.agent_version = "test";
  int64_t run;
  cr_assert_eq(st_run_begin(db, &in, &run), ST_OK);
  st_sig_rec_t sig = {.key = key,
                      .key_len = sizeof key,
                      .sig = "k",
                      .op = "sgemm",
                      .name = "sgemm",
                      .params = "{}",
                      .calls = 2 * ROUNDS_A_RUN};
  cr_assert_eq(st_run_flush(db, run, &sig, 1, 0, r), ST_OK);

  /* The warm start: the stored kernel and the rounds pooled on it. */
  st_profile_t p;
  cr_assert_eq(st_profile(db, &prog, "cpuA", 4.0, 64, &p), ST_OK);
  cr_assert_eq(p.n, 1);
  const st_hot_t *h = &p.sigs[0];
  int stored = h->object_id != 0 && h->demoted_gen != 1;
  cr_assert(r == 1 || stored || h->demoted_gen == 1, "run %d: the kernel is stored or lost", r);
  if (h->has_judge) {
    ag_cmp_resume(&out.cmp, &h->judge, 0, 0);
    double med;
    enum ag_verdict v = ag_cmp_judge(&out.cmp, &med);
    out.placed = v != AG_CMP_SLOWER && v != AG_CMP_TIE;
    if (!out.placed)
      out.verdict = v;
  } else {
    ag_cmp_start(&out.cmp, 0, 0);
    out.placed = r == 1 || stored;
  }
  st_profile_free(&p);

  /* The run's pairs, judged after every round (the watch looks often in a short run). */
  for (int k = 0; out.placed && !out.verdict && k < ROUNDS_A_RUN; k++) {
    uint64_t v = (uint64_t)(ratio[(r - 1) * ROUNDS_A_RUN + k] * ORIG_NS);
    /* o v, then v o: both orders */
    cr_assert_eq(
        ag_cmp_pair(&out.cmp, k % 2 ? AG_CMP_PAIR_VARIANT : AG_CMP_PAIR_ORIG, k % 2 ? v : ORIG_NS),
        0);
    cr_assert_eq(
        ag_cmp_pair(&out.cmp, k % 2 ? AG_CMP_PAIR_ORIG : AG_CMP_PAIR_VARIANT, k % 2 ? ORIG_NS : v),
        1, "the pair closes a round");
    double med;
    enum ag_verdict verdict = ag_cmp_judge(&out.cmp, &med);
    if (verdict == AG_CMP_SLOWER || verdict == AG_CMP_TIE)
      ag_cmp_describe(&out.cmp, med, "cold pairs, interleaved", out.event, sizeof out.event);
    if (verdict != AG_CMP_UNDECIDED)
      out.verdict = verdict;
  }

  /* The writer: the variant's row, run 1's object, and the pool; or the loser's drop. */
  int lost = out.verdict == AG_CMP_SLOWER || out.verdict == AG_CMP_TIE;
  st_judge_pool_t j;
  ag_cmp_save(&out.cmp, &j);
  st_variant_rec_t vr = {.key = key,
                         .key_len = sizeof key,
                         .status = lost ? "demoted" : "ready",
                         .generator = 1,
                         .llvm = "19",
                         .cpu = "cpuA",
                         .origin = r == 1 ? "compiled" : "loaded",
                         .machine_cpu = "cpuA",
                         .symbol = "opjit_k",
                         .checksum = 7,
                         .drop_object = lost,
                         .judge = lost ? NULL : &j};
  if (r == 1)
    vr.object = code, vr.object_len = sizeof code;
  if (out.placed)
    cr_assert_eq(st_run_variants(db, run, &vr, 1, NULL, 0), ST_OK);
  cr_assert_eq(st_run_end(db, run, 1000 + r, "exited"), ST_OK);
  st_close(db);
  return out;
}

/* Rows of the judge pool in the database (0 once the loser's object is dropped). */
static int pool_rows(void)
{
  st_db_t *db = fx_open(fx_db, 0);
  int n = (int)fx_query(db, "SELECT count(*) FROM judge_pools");
  st_close(db);
  return n;
}

Test(pool, a_kernel_losing_by_ten_percent_is_demoted_in_the_run_its_pool_decides)
{
  /* 1.10 every round but the 7th (a round the variant won: 0.98). Four rounds a run: run 2
   * ends at 8 rounds, 7 slower (the sign test wants all 8 at p <= 0.01); the 11th round, in
   * run 3, has 10 of 11 slower (P(X >= 10) = 12/2048 = 0.006). */
  double ratio[5 * ROUNDS_A_RUN];
  for (int i = 0; i < 5 * ROUNDS_A_RUN; i++)
    ratio[i] = i == 6 ? 0.98 : 1.10;
  run_t runs[5];
  for (int r = 1; r <= 5; r++)
    runs[r - 1] = one_run(r, ratio);
  for (int r = 1; r <= 2; r++) {
    cr_assert(runs[r - 1].placed, "run %d places it", r);
    cr_assert_eq(runs[r - 1].verdict, AG_CMP_UNDECIDED, "run %d alone decides nothing", r);
  }
  cr_assert(runs[2].placed);
  cr_assert_eq(runs[2].verdict, AG_CMP_SLOWER, "run 3: pooled rounds find it slower");
  cr_assert_eq(runs[2].cmp.rounds, 11);
  cr_assert_eq(ag_cmp_sign_threshold(11), 10);
  /* The event names both sides' figures, and how many rounds came from earlier runs. */
  cr_assert_str_eq(runs[2].event, "variant 2178 ns per call, original 2000 ns (cold pairs, "
                                  "interleaved; median ratio 1.10 over 11 rounds, 8 of them "
                                  "from 2 earlier runs)");
  /* Demoted for good: its object and pool are dropped, and the profile remembers the loss
   * for this generator (the warm start keeps the original until the generator changes). */
  cr_assert_eq(pool_rows(), 0);
  for (int r = 4; r <= 5; r++)
    cr_assert(!runs[r - 1].placed, "run %d does not place it", r);
}

Test(pool, a_winning_kernel_is_kept_and_its_verdict_pooled)
{
  double ratio[5 * ROUNDS_A_RUN];
  for (int i = 0; i < 5 * ROUNDS_A_RUN; i++)
    ratio[i] = i == 2 ? 1.02 : 0.85;
  run_t runs[5];
  for (int r = 1; r <= 5; r++) {
    runs[r - 1] = one_run(r, ratio);
    cr_assert(runs[r - 1].placed, "run %d places it", r);
  }
  cr_assert_eq(runs[0].verdict, AG_CMP_UNDECIDED);
  cr_assert_eq(runs[1].verdict, AG_CMP_UNDECIDED, "8 rounds, 7 faster: not yet");
  cr_assert_eq(runs[2].verdict, AG_CMP_FASTER, "run 3's pooled rounds: faster");
  for (int r = 4; r <= 5; r++) {
    cr_assert_eq(runs[r - 1].verdict, AG_CMP_UNDECIDED, "run %d: the verdict stands", r);
    cr_assert(runs[r - 1].cmp.kept);
  }
  cr_assert_eq(runs[4].cmp.rounds, 5 * ROUNDS_A_RUN - 1,
               "every run's rounds pooled (run 3 "
               "stopped at its verdict)");
  cr_assert_eq(pool_rows(), 1);
}

Test(pool, a_tie_is_not_kept_for_ever)
{
  /* 0.99 and 1.04 in turn: a median above 1 that no sign test calls. The window fills in run
   * 8 (32 rounds): a tie, which goes to the original; run 9 does not place the kernel. */
  double ratio[9 * ROUNDS_A_RUN];
  for (int i = 0; i < 9 * ROUNDS_A_RUN; i++)
    ratio[i] = i % 2 ? 1.04 : 0.99;
  for (int r = 1; r <= 7; r++) {
    run_t run = one_run(r, ratio);
    cr_assert(run.placed);
    cr_assert_eq(run.verdict, AG_CMP_UNDECIDED, "run %d", r);
  }
  run_t eighth = one_run(8, ratio);
  cr_assert_eq(eighth.verdict, AG_CMP_TIE);
  cr_assert_eq(eighth.cmp.rounds, AG_CMP_ROUNDS);
  cr_assert(strstr(eighth.event, "median ratio 1.01 over 32 rounds, 28 of them from 7 earlier "
                                 "runs"),
            "%s", eighth.event);
  run_t ninth = one_run(9, ratio);
  cr_assert(!ninth.placed, "the tie keeps the original");
}

Test(pool, a_kept_tie_is_judged_again_on_new_windows_and_overturned_when_slower)
{
  /* 0.97 and 1.01 in turn for 32 rounds (8 runs): a tie at or below 1, kept; then every round
   * 1.10: the next window of 32 new rounds (8 more runs) overturns it. */
  double ratio[17 * ROUNDS_A_RUN];
  for (int i = 0; i < 17 * ROUNDS_A_RUN; i++)
    ratio[i] = i >= 32 ? 1.10 : i % 2 ? 1.01 : 0.97;
  int demoted_in = 0;
  for (int r = 1; r <= 17 && !demoted_in; r++) {
    run_t run = one_run(r, ratio);
    cr_assert(run.placed, "run %d", r);
    if (r == 8)
      cr_assert_eq(run.verdict, AG_CMP_FASTER, "a tie at or below 1 is kept");
    if (run.verdict == AG_CMP_SLOWER)
      demoted_in = r;
  }
  cr_assert_eq(demoted_in, 16, "the first full window of new rounds overturns it");
  cr_assert_eq(pool_rows(), 0);
}

Test(pool, the_store_keeps_the_window_oldest_first_and_a_new_kernel_starts_afresh)
{
  ag_cmp_t c;
  ag_cmp_start(&c, 0, 0);
  for (int k = 0; k < 40; k++) { /* more rounds than the window */
    ag_cmp_pair(&c, AG_CMP_PAIR_ORIG, 1000);
    ag_cmp_pair(&c, AG_CMP_PAIR_VARIANT, (uint64_t)(1000 + k));
  }
  st_judge_pool_t p;
  ag_cmp_save(&c, &p);
  cr_assert_eq(p.n, AG_CMP_ROUNDS);
  cr_assert_float_eq(p.ratio[0], 1.008f, 1e-6, "the oldest of the window: round 8");
  cr_assert_float_eq(p.ratio[AG_CMP_ROUNDS - 1], 1.039f, 1e-6);
  cr_assert_eq(p.runs, 1);
  ag_cmp_t back;
  ag_cmp_resume(&back, &p, 0, 0);
  cr_assert_eq(back.rounds, 40);
  cr_assert(memcmp(back.ratio, c.ratio, sizeof c.ratio) == 0, "the same ring");
  double m1, m2;
  cr_assert_eq(ag_cmp_judge(&c, &m1), ag_cmp_judge(&back, &m2));
  cr_assert_float_eq(m1, m2, 1e-12);
  ag_cmp_save(&back, &p);
  cr_assert_eq(p.runs, 1, "a run that added no round does not count");
}
