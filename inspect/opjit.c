/* SPDX-License-Identifier: MIT */
/* `opjit`: the command-line face of the profile database. main() reads the global options
 * (--help, --version) and hands the rest of the line to one subcommand (cmd_*.c). */
#include "cmd.h"
#include "table.h"

#include "store/store.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ins_cmd_t *const commands[] = {
    &ins_cmd_run,    &ins_cmd_runs,   &ins_cmd_top, &ins_cmd_op,     &ins_cmd_variants,
    &ins_cmd_diff,   &ins_cmd_events, &ins_cmd_flame,  &ins_cmd_report, &ins_cmd_export, &ins_cmd_gc,
    &ins_cmd_doctor,
};
#define NCOMMANDS (sizeof commands / sizeof *commands)

int ins_usage_error(const ins_cmd_t *cmd, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "opjit %s: ", cmd->name);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nusage: opjit %s %s\n(opjit %s --help for more)\n", cmd->name, cmd->synopsis,
          cmd->name);
  return INS_EXIT_USAGE;
}

int ins_bad_option(const ins_cmd_t *cmd, char **argv)
{
  const char *arg = argv[optind - 1];
  if (optopt && strncmp(arg, "--", 2) != 0) /* a short option, maybe inside a cluster */
    return ins_usage_error(cmd, "bad option or missing value: -%c", optopt);
  return ins_usage_error(cmd, "bad option or missing value: %s", arg);
}

int ins_help(const ins_cmd_t *cmd)
{
  printf("usage: opjit %s %s\n\n%s\n\n%s", cmd->name, cmd->synopsis, cmd->summary, cmd->help);
  return INS_EXIT_OK;
}

int ins_parse_long(const ins_cmd_t *cmd, const char *name, const char *text, long min, long max,
                   long *out)
{
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (end == text || *end || errno || v < min || v > max)
    return ins_usage_error(cmd, "%s wants an integer in [%ld, %ld], not '%s'", name, min, max,
                           text);
  *out = v;
  return 0;
}

int ins_no_operands(const ins_cmd_t *cmd, int argc, char **argv)
{
  if (optind < argc)
    return ins_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
  return 0;
}

int ins_parse_run(const ins_cmd_t *cmd, int argc, char **argv, int all, long *run)
{
  int rc;
  if (optind < argc && (rc = ins_parse_long(cmd, "RUN", argv[optind++], 1, INT64_MAX, run)))
    return rc;
  if ((rc = ins_no_operands(cmd, argc, argv)))
    return rc;
  if (all && *run)
    return ins_usage_error(cmd, "give a RUN or --all, not both");
  return 0;
}

int ins_parse_sig(const ins_cmd_t *cmd, const char *text, char *prefix)
{
  size_t len = strlen(text);
  if (len == 0 || len > 16 || strspn(text, "0123456789abcdefABCDEF") != len)
    return ins_usage_error(cmd, "'%s' is not a signature id (1 to 16 hex digits)", text);
  for (size_t i = 0; i <= len; i++)
    prefix[i] = (char)tolower((unsigned char)text[i]);
  return 0;
}

static void global_help(FILE *f)
{
  fputs("usage: opjit [--help | --version] COMMAND [ARGS...]\n\n"
        "Run programs under the opjit agent and read the profiles it records.\n\n"
        "commands:\n", f);
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(f, "  %-9s %s\n", commands[i]->name, commands[i]->summary);
  fputs("\nEvery command takes --db PATH (default: $OPJIT_DB, else $XDG_CACHE_HOME/opjit/"
        "profile.db,\nelse ~/.cache/opjit/profile.db) and -h/--help; data commands take --json.\n"
        "\nexit status:\n"
        "  0    success\n"
        "  1    failure: unusable or missing database, no such run or signature, agent not found\n"
        "  2    usage error\n"
        "  run: the program's own status, 128+N when signal N ended it, 126 when it cannot be\n"
        "       executed, 127 when it is not found\n", f);
}

int main(int argc, char **argv)
{
  ins_json_init();
  if (argc < 2) {
    global_help(stderr);
    return INS_EXIT_USAGE;
  }
  const char *word = argv[1];
  if (strcmp(word, "-h") == 0 || strcmp(word, "--help") == 0 || strcmp(word, "help") == 0) {
    if (argc > 2) /* `opjit help CMD` */
      for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(argv[2], commands[i]->name) == 0)
          return ins_help(commands[i]);
    global_help(stdout);
    return INS_EXIT_OK;
  }
  if (strcmp(word, "--version") == 0 || strcmp(word, "-V") == 0) {
    printf("opjit %s (database schema %d)\n", OPJIT_VERSION, ST_SCHEMA_VERSION);
    return INS_EXIT_OK;
  }
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(word, commands[i]->name) == 0) {
      opterr = 0;
      optind = 0; /* GNU getopt: reinitialise for the subcommand's argv */
      return commands[i]->main(argc - 1, argv + 1);
    }
  fprintf(stderr, "opjit: unknown command '%s'\n\n", word);
  global_help(stderr);
  return INS_EXIT_USAGE;
}
