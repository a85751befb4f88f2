/* SPDX-License-Identifier: MIT */
/* The `opjit` subcommands and what they share to read their arguments. A command is a main()
 * whose argv[0] is its own name; it returns the process's exit status (enum ins_exit) and
 * writes its errors to stderr as "opjit: ..." or, for usage errors, "opjit NAME: ...".
 * A new command is cmd_NAME.c defining ins_cmd_NAME (declared below, listed in opjit.c's
 * commands[], built by inspect/CMakeLists.txt); what it reads from the database is a query of
 * store/query.h, never SQL of its own. */
#ifndef OPJIT_INSPECT_CMD_H
#define OPJIT_INSPECT_CMD_H

enum ins_exit {
  INS_EXIT_OK = 0,
  INS_EXIT_FAIL = 1,        /* no such run/signature, unusable database, agent not found */
  INS_EXIT_USAGE = 2,       /* bad command line */
  INS_EXIT_NOEXEC = 126,    /* run: the command exists but cannot be executed */
  INS_EXIT_NOTFOUND = 127,  /* run: no such command */
};

typedef struct ins_cmd_s {
  const char *name;
  int (*main)(int argc, char **argv);
  const char *synopsis; /* the arguments after "opjit NAME" */
  const char *summary;  /* one line for `opjit --help` */
  const char *help;     /* description and options for `opjit NAME --help` */
} ins_cmd_t;

extern const ins_cmd_t ins_cmd_run, ins_cmd_runs, ins_cmd_top, ins_cmd_op, ins_cmd_variants,
    ins_cmd_diff, ins_cmd_events, ins_cmd_flame, ins_cmd_report, ins_cmd_export, ins_cmd_gc, ins_cmd_doctor,
    ins_cmd_fleet;

/* 1 when argv asks for the fleet's side of a reader (--fleet or --fleet=CONNINFO). */
int ins_fleet_wanted(int argc, char **argv);
/* `opjit top|runs|variants --fleet` (cmd is one of those): the command's view across every
 * machine of the fleet (cmd_fleet.c). */
int ins_fleet_read(const ins_cmd_t *cmd, int argc, char **argv);

/* Prints "opjit NAME: message", the synopsis and a --help hint to stderr; returns
 * INS_EXIT_USAGE. */
int ins_usage_error(const ins_cmd_t *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The usage error for the option getopt_long just refused (argv as given to getopt_long). */
int ins_bad_option(const ins_cmd_t *cmd, char **argv);
/* Prints the command's full help to stdout; returns INS_EXIT_OK. */
int ins_help(const ins_cmd_t *cmd);
/* Reads text as a decimal integer in [min, max] for option name into *out; returns 0, or
 * the usage error. */
int ins_parse_long(const ins_cmd_t *cmd, const char *name, const char *text, long min, long max,
                   long *out);
/* The usage error for an operand left at argv[optind] (after getopt_long), else 0. */
int ins_no_operands(const ins_cmd_t *cmd, int argc, char **argv);
/* Reads the optional RUN operand at argv[optind] into *run (left as is when absent), refuses
 * any operand after it and, when all (--all was given), a RUN beside it; returns 0, or the
 * usage error. */
int ins_parse_run(const ins_cmd_t *cmd, int argc, char **argv, int all, long *run);
/* Reads text as a signature id or prefix (1 to 16 hex digits) into prefix[17], lower-cased;
 * returns 0, or the usage error. */
int ins_parse_sig(const ins_cmd_t *cmd, const char *text, char *prefix);

#endif
