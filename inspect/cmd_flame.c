/* SPDX-License-Identifier: MIT */
/* `opjit flame`: a run's sampled stacks in the folded format flamegraph.pl, speedscope and
 * inferno read: "root;outer;...;inner COUNT" per line, the root being the operator's name or
 * [program] for the samples outside any operator. */
#include "cmd.h"
#include "db.h"
#include "fold.h"

#include <getopt.h>
#include <stdio.h>

/* Prints one folded line to stdout (ins_fold_fn). */
static void print_line(void *ctx, const char *line, int64_t samples)
{
  (void)ctx;
  printf("%s %lld\n", line, (long long)samples);
}

static int cmd_flame(int argc, char **argv)
{
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"sig", required_argument, NULL, 's'},
                                           {"all", no_argument, NULL, 'a'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL;
  char prefix[17], sig[17];
  int all = 0, by_sig = 0, rc;
  long run = 0;
  for (int c; (c = getopt_long(argc, argv, "d:s:ah", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
    case 's':
      if ((rc = ins_parse_sig(&ins_cmd_flame, optarg, prefix)))
        return rc;
      by_sig = 1;
      break;
    case 'a': all = 1; break;
    case 'h': return ins_help(&ins_cmd_flame);
    default: return ins_bad_option(&ins_cmd_flame, argv);
    }
  }
  if ((rc = ins_parse_run(&ins_cmd_flame, argc, argv, all, &run)))
    return rc;

  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  int64_t scope = run, n = 0;
  rc = INS_EXIT_FAIL;
  if ((by_sig && ins_sig_resolve(db, prefix, sig)) ||
      ins_pick_run(db, run, all, INS_HAS_STACKS, &scope) ||
      ins_fold_each(db, scope, by_sig ? sig : NULL, print_line, NULL, &n))
    goto out;
  if (fflush(stdout) != 0) {
    perror("opjit: cannot write the stacks");
    goto out;
  }
  if (!n && all)
    fprintf(stderr, "opjit: no run has sampled stacks%s%s\n", by_sig ? " for signature " : "",
            by_sig ? sig : "");
  else if (!n)
    fprintf(stderr, "opjit: run %lld has no sampled stacks%s%s (see opjit top %lld)\n",
            (long long)scope, by_sig ? " for signature " : "", by_sig ? sig : "",
            (long long)scope);
  else
    rc = INS_EXIT_OK;
out:
  st_close(db);
  return rc;
}

const ins_cmd_t ins_cmd_flame = {
    .name = "flame",
    .main = cmd_flame,
    .synopsis = "[--db PATH] [RUN | --all] [--sig SIG]",
    .summary = "print a run's sampled stacks, folded, for flame graph tools",
    .help = "One line per distinct stack: \"root;outer;...;inner COUNT\", the root frame being the\n"
            "operator's signature name, or [program] for samples outside any operator; the other\n"
            "frames are module`symbol. Frame names are sanitised (';' becomes ':', spaces and\n"
            "control characters collapse to one space) so the lines read back unambiguously:\n"
            "    opjit flame > run.folded; flamegraph.pl run.folded > run.svg\n"
            "or open run.folded in speedscope. RUN defaults to the newest run with sampled\n"
            "stacks; exits 1 when the run has none.\n\n"
            "options:\n"
            "  --db PATH    the profile database\n"
            "  --all        every run, identical stacks summed\n"
            "  --sig SIG    only this signature (id or unique prefix)\n"
            "  -h, --help   this help\n",
};
