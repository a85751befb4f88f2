/* SPDX-License-Identifier: MIT */
/* `opjit fleet status` (this database's standing in the fleet: machine id, last push, backlog,
 * the server) and the fleet's side of `opjit top|runs|variants --fleet` (every machine's runs,
 * with machine and CPU columns). The fleet is OPJIT_FLEET, or --fleet=CONNINFO; what is read
 * is store/fleet.h's queries. */
#include "cmd.h"
#include "db.h"
#include "table.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef OPJIT_HAVE_FLEET
#include "store/fleet.h"

/* The fleet's connection string: given, else OPJIT_FLEET; NULL (with the usage error) when
 * there is none. */
static const char *conninfo(const ins_cmd_t *cmd, const char *given, int *rc)
{
  const char *c = given && *given ? given : getenv("OPJIT_FLEET");
  if (c && *c)
    return c;
  *rc = ins_usage_error(cmd, "no fleet: set OPJIT_FLEET or give --fleet=CONNINFO");
  return NULL;
}

static st_fleet_t *fleet_connect(const char *c)
{
  st_fleet_t *f;
  char err[512];
  if (st_fleet_open(c, 5000, &f, err, sizeof err)) {
    fprintf(stderr, "opjit: %s\n", err);
    return NULL;
  }
  return f;
}

/* A column as text, "-" for NULL. */
static const char *cell(const char *s) { return s ? s : "-"; }

typedef struct rows_s {
  int query;
  ins_table_t *t;
} rows_t;

static int add_row(void *ctx, int n, const char *const *c)
{
  rows_t *r = ctx;
  char a[32], b[32], d[32];
  (void)n;
  switch (r->query) {
  case ST_FLEET_Q_RUNS: {
    const char *row[] = {c[0],
                         cell(c[1]),
                         c[2] ? (snprintf(d, sizeof d, "%.8s", c[2]), d) : "-",
                         cell(c[3]),
                         ins_fmt_time(strtoll(c[4], NULL, 10), a, sizeof a),
                         c[5] ? ins_fmt_duration(strtoll(c[5], NULL, 10), b, sizeof b) : "-",
                         cell(c[6]),
                         cell(c[7]),
                         c[8],
                         c[9],
                         c[10]};
    ins_table_row(r->t, row);
    break;
  }
  case ST_FLEET_Q_TOP: {
    const char *row[] = {c[0],
                         c[1],
                         c[2],
                         c[3],
                         c[4],
                         c[5],
                         c[6] ? ins_fmt_ns(strtod(c[6], NULL), a, sizeof a) : "-",
                         c[7]};
    ins_table_row(r->t, row);
    break;
  }
  default: {
    double v = c[9] ? strtod(c[9], NULL) : 0, o = c[10] ? strtod(c[10], NULL) : 0;
    char x[32] = "-";
    if (v > 0 && o > 0)
      snprintf(x, sizeof x, "%.2fx", o / v);
    const char *row[] = {c[0],
                         c[1],
                         cell(c[2]),
                         cell(c[3]),
                         c[4],
                         c[5],
                         c[8],
                         c[9] ? ins_fmt_ns(v, a, sizeof a) : "-",
                         c[10] ? ins_fmt_ns(o, b, sizeof b) : "-",
                         x};
    ins_table_row(r->t, row);
    break;
  }
  }
  return 0;
}

int ins_fleet_read(const ins_cmd_t *cmd, int argc, char **argv)
{
  int query = cmd == &ins_cmd_runs  ? ST_FLEET_Q_RUNS
              : cmd == &ins_cmd_top ? ST_FLEET_Q_TOP
                                    : ST_FLEET_Q_VARIANTS;
  static const struct option longopts[] = {{"fleet", optional_argument, NULL, 'f'},
                                           {"limit", required_argument, NULL, 'n'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *given = NULL;
  long limit = 20;
  int rc = 0;
  optind = 1;
  for (int c; (c = getopt_long(argc, argv, "n:h", longopts, NULL)) != -1;) {
    switch (c) {
    case 'f':
      given = optarg;
      break;
    case 'n':
      if ((rc = ins_parse_long(cmd, "--limit", optarg, 0, 1L << 30, &limit)))
        return rc;
      break;
    case 'h':
      return ins_help(cmd);
    default:
      return ins_usage_error(cmd, "with --fleet, only --limit N is understood");
    }
  }
  if ((rc = ins_no_operands(cmd, argc, argv)))
    return rc;
  const char *c = conninfo(cmd, given, &rc);
  if (!c)
    return rc;
  st_fleet_t *f = fleet_connect(c);
  if (!f)
    return INS_EXIT_FAIL;
  static const char *const runs_h[] = {"RUN",    "MACHINE", "ID",   "CPU",   "STARTED", "DURATION",
                                       "STATUS", "PROGRAM", "SIGS", "CALLS", "SAMPLES"};
  static const char *const top_h[] = {"SIG",  "NAME",  "MACHINES", "CPU",
                                      "RUNS", "CALLS", "MEAN",     "SAMPLES"};
  static const char *const var_h[] = {"SIG",    "NAME",  "MACHINE", "CPU",      "STATUS",
                                      "ORIGIN", "CALLS", "MEAN",    "ORIGINAL", "SPEEDUP"};
  rows_t r = {query, query == ST_FLEET_Q_RUNS  ? ins_table_new("rllllrllrrr", runs_h)
                     : query == ST_FLEET_Q_TOP ? ins_table_new("llrlrrrr", top_h)
                                               : ins_table_new("llllllrrrr", var_h)};
  char err[512];
  rc = st_fleet_query(f, query, (int)limit, add_row, &r, err, sizeof err);
  if (rc)
    fprintf(stderr, "opjit: %s\n", err);
  else
    ins_table_print(r.t, stdout);
  ins_table_free(r.t);
  st_fleet_close(f);
  return rc ? INS_EXIT_FAIL : INS_EXIT_OK;
}

static int summary(void *ctx, int n, const char *const *c)
{
  (void)n;
  char t[32];
  int64_t last = c[4] ? strtoll(c[4], NULL, 10) : 0;
  printf("fleet:     %s machines, %s runs of %s programs, %s kernels; last push %s\n", c[0], c[1],
         c[2], c[3], last ? ins_fmt_time(last, t, sizeof t) : "never");
  *(int *)ctx = 1;
  return 0;
}

static int cmd_fleet(int argc, char **argv)
{
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"fleet", required_argument, NULL, 'f'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL, *given = NULL;
  int rc = 0;
  for (int c; (c = getopt_long(argc, argv, "d:f:h", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd':
      dbopt = optarg;
      break;
    case 'f':
      given = optarg;
      break;
    case 'h':
      return ins_help(&ins_cmd_fleet);
    default:
      return ins_bad_option(&ins_cmd_fleet, argv);
    }
  }
  if (optind >= argc || strcmp(argv[optind], "status") != 0)
    return ins_usage_error(&ins_cmd_fleet, "the only subcommand is: status");
  optind++;
  if ((rc = ins_no_operands(&ins_cmd_fleet, argc, argv)))
    return rc;
  const char *c = conninfo(&ins_cmd_fleet, given, &rc);
  if (!c)
    return rc;
  st_db_t *db;
  if (ins_db_open(dbopt, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  char id[33], t[32];
  int64_t push_ns;
  st_fleet_local(db, id, &push_ns);
  printf("machine:   %s\n", id[0] ? id : "(no push yet)");
  printf("last push: %s\n", push_ns ? ins_fmt_time(push_ns, t, sizeof t) : "never");
  st_fleet_t *f = fleet_connect(c);
  if (!f) {
    st_close(db);
    return INS_EXIT_FAIL;
  }
  long max = 1000;
  const char *m = getenv("OPJIT_FLEET_BACKLOG");
  if (m && atol(m) > 0)
    max = atol(m);
  int64_t backlog = 0;
  char err[512] = "";
  if (!(rc = st_fleet_backlog(f, db, (int)max, &backlog)))
    printf("backlog:   %lld finished runs not in the fleet yet\n", (long long)backlog);
  printf("server:    PostgreSQL %s\n", st_fleet_server_version(f));
  int shown = 0;
  if (!rc)
    rc = st_fleet_query(f, ST_FLEET_Q_SUMMARY, 1, summary, &shown, err, sizeof err);
  if (rc)
    fprintf(stderr, "opjit: cannot read the fleet%s%s\n", err[0] ? ": " : "", err);
  st_fleet_close(f);
  st_close(db);
  return rc ? INS_EXIT_FAIL : INS_EXIT_OK;
}

#else

int ins_fleet_read(const ins_cmd_t *cmd, int argc, char **argv)
{
  (void)cmd, (void)argc, (void)argv;
  fprintf(stderr, "opjit: this opjit was built without the fleet store (libpq-dev, libssl-dev)\n");
  return INS_EXIT_FAIL;
}

static int cmd_fleet(int argc, char **argv) { return ins_fleet_read(&ins_cmd_fleet, argc, argv); }

#endif

int ins_fleet_wanted(int argc, char **argv)
{
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--fleet") || !strncmp(argv[i], "--fleet=", 8))
      return 1;
  return 0;
}

const ins_cmd_t ins_cmd_fleet = {
    .name = "fleet",
    .main = cmd_fleet,
    .synopsis = "status [--db PATH] [--fleet CONNINFO]",
    .summary = "this database's standing in the fleet store: machine, last push, backlog, server",
    .help = "The fleet is the PostgreSQL database OPJIT_FLEET names (a libpq connection string\n"
            "or postgresql:// URI), or --fleet. Shows this database's machine id, its last\n"
            "successful push, the finished runs the fleet does not have yet (the backlog the\n"
            "agent pushes next), the server's version and the fleet's size.\n"
            "\n"
            "Across the fleet: opjit top --fleet, opjit runs --fleet, opjit variants --fleet\n"
            "(--fleet[=CONNINFO] [--limit N]) read every machine's runs, with machine and CPU\n"
            "columns. See docs/fleet.md.\n\n"
            "options:\n"
            "  --db PATH          the profile database\n"
            "  --fleet CONNINFO   the fleet (default OPJIT_FLEET)\n"
            "  -h, --help         this help\n",
};
