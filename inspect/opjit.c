/* SPDX-License-Identifier: MIT */
/* `opjit`: the command-line face of the profile database. main() reads the global options
 * (--help, --version, --man) and hands the rest of the line to one subcommand (cmd_*.c). The
 * help texts (here and each command's) are the one source of the man page (--man). */
#include "cmd.h"
#include "table.h"

#include "agent/opt.h"
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
    &ins_cmd_doctor, &ins_cmd_fleet,
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

/* The text `opjit --help` prints around the command list, and the man page's (opjit --man):
 * one source for both. */
static const char description[] =
    "Run programs under the opjit agent and read the profiles it records.\n";
static const char common[] =
    "Every command takes --db PATH (default: $OPJIT_DB, else $XDG_CACHE_HOME/opjit/profile.db,\n"
    "else ~/.cache/opjit/profile.db) and -h/--help; data commands take --json.\n"
    "opjit help COMMAND is opjit COMMAND --help.\n";
static const char exit_status[] =
    "exit status:\n"
    "  0    success\n"
    "  1    failure: unusable or missing database, no such run or signature, agent not found\n"
    "  2    usage error\n"
    "  run  the program's own status, 128+N when signal N ended it, 126 when it cannot be\n"
    "       executed, 127 when it is not found\n";

static void global_help(FILE *f)
{
  fprintf(f, "usage: opjit [--help | --version | --man] COMMAND [ARGS...]\n\n%s\ncommands:\n",
          description);
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(f, "  %-9s %s\n", commands[i]->name, commands[i]->summary);
  fprintf(f, "\n%s\n%s", common, exit_status);
}

/* ---- the man page: the help texts above and of every command, as roff ------------------- */

/* Writes s[0..n) as roff text: backslashes and hyphens escaped, a leading '.' or '\'' kept
 * from being read as a request. */
static void roff_text(FILE *f, const char *s, size_t n)
{
  if (n && (s[0] == '.' || s[0] == '\''))
    fputs("\\&", f);
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\\')
      fputs("\\e", f);
    else if (s[i] == '-')
      fputs("\\-", f);
    else
      fputc(s[i], f);
  }
}

/* Writes a help text as man paragraphs. The help texts' layout is the markup: a blank line
 * ends a paragraph; an unindented line ending in ':' that starts one heads a list; a line
 * "  ITEM  text" (two spaces in, two or more after ITEM) is a list's tagged paragraph, the
 * deeper lines after it continue its text; a line indented by four spaces or more elsewhere
 * is an example, kept as it is; the rest is prose, filled. */
static void roff_help(FILE *f, const char *text)
{
  enum { NONE, PROSE, LIST, EXAMPLE } in = NONE;
  for (const char *p = text; *p;) {
    size_t len = strcspn(p, "\n"), ind = strspn(p, " ");
    const char *line = p;
    p += len + (p[len] == '\n');
    const char *gap = ind == 2 ? strstr(line + 2, "  ") : NULL;
    if (gap && (gap >= line + len || gap == line + 2))
      gap = NULL;
    if (in == EXAMPLE && (ind < 4 || ind >= len || gap)) {
      fputs(".fi\n.RE\n", f);
      in = NONE;
    }
    if (ind >= len) { /* blank */
      in = NONE;
    } else if (in == NONE && ind == 0 && line[len - 1] == ':') {
      fputs(".PP\n.B ", f);
      roff_text(f, line, len);
      fputc('\n', f);
      in = LIST;
    } else if (gap || (in == LIST && ind == 2)) {
      size_t item = gap ? (size_t)(gap - line) - 2 : len - 2;
      fputs(".TP\n\\fB", f);
      roff_text(f, line + 2, item);
      fputs("\\fR\n", f);
      size_t rest = 2 + item + strspn(line + 2 + item, " ");
      if (rest < len) {
        roff_text(f, line + rest, len - rest);
        fputc('\n', f);
      }
      in = LIST;
    } else if (in == LIST && ind > 2) {
      roff_text(f, line + ind, len - ind);
      fputc('\n', f);
    } else if (ind >= 4) {
      if (in != EXAMPLE)
        fputs(".PP\n.RS 4\n.nf\n", f);
      in = EXAMPLE;
      roff_text(f, line + 4, len - 4);
      fputc('\n', f);
    } else {
      if (in != PROSE)
        fputs(".PP\n", f);
      in = PROSE;
      roff_text(f, line + ind, len - ind);
      fputc('\n', f);
    }
  }
  if (in == EXAMPLE)
    fputs(".fi\n.RE\n", f);
}

/* The OPJIT_* variables the agent reads (agent/opt.h's table), as a list. */
static void roff_options(FILE *f)
{
  for (int id = 0; id < AG_OPT__COUNT; id++) {
    const ag_opt_desc_t *d = ag_opt_desc(id);
    fputs(".TP\n.B ", f);
    roff_text(f, d->var, strlen(d->var));
    fputc('\n', f);
    roff_text(f, d->help, strlen(d->help));
    if (*d->def) {
      fputs(" (default: ", f);
      roff_text(f, d->def, strlen(d->def));
      fputs(d->choices ? "; " : ")", f);
    } else if (d->choices) {
      fputs(" (", f);
    }
    if (d->choices) {
      fputs(d->kind == AG_OK_FLAGS ? "a comma list of " : "one of ", f);
      roff_text(f, d->choices, strlen(d->choices));
      fputc(')', f);
    }
    fputc('\n', f);
  }
}

/* Writes the man page opjit(1): the global help, every command's help, the options. */
static void man_page(FILE *f)
{
  fprintf(f, ".\\\" Generated by opjit --man from the help texts: edit those, not this file.\n"
             ".TH OPJIT 1 \"\" \"opjit %s\" \"User Commands\"\n"
             ".SH NAME\nopjit \\- run programs under the opjit JIT agent and read their profiles\n"
             ".SH SYNOPSIS\n.nf\n\\fBopjit\\fR [\\-\\-help | \\-\\-version | \\-\\-man]\n",
          OPJIT_VERSION);
  for (size_t i = 0; i < NCOMMANDS; i++) {
    fprintf(f, "\\fBopjit %s\\fR ", commands[i]->name);
    roff_text(f, commands[i]->synopsis, strlen(commands[i]->synopsis));
    fputc('\n', f);
  }
  fputs(".fi\n.SH DESCRIPTION\n", f);
  roff_help(f, description);
  roff_help(f, common);
  fputs(".SH COMMANDS\n", f);
  for (size_t i = 0; i < NCOMMANDS; i++) {
    fprintf(f, ".SS \"opjit %s\"\n.B opjit %s\n", commands[i]->name, commands[i]->name);
    roff_text(f, commands[i]->synopsis, strlen(commands[i]->synopsis));
    fputs("\n.PP\n", f);
    roff_text(f, commands[i]->summary, strlen(commands[i]->summary));
    fputs(".\n", f);
    roff_help(f, commands[i]->help);
  }
  fputs(".SH ENVIRONMENT\nThe agent reads these variables in the program it is preloaded into "
        "(opjit doctor shows their effective values):\n", f);
  roff_options(f);
  fputs(".SH EXIT STATUS\n", f);
  roff_help(f, exit_status + strlen("exit status:\n"));
  fputs(".SH FILES\n.TP\n.I ~/.cache/opjit/profile.db\nthe profile database (SQLite), unless "
        "\\-\\-db, OPJIT_DB or XDG_CACHE_HOME say otherwise\n", f);
}

/* Says word is no command, then the general usage; returns INS_EXIT_USAGE. */
static int unknown_command(const char *word)
{
  fprintf(stderr, "opjit: unknown command '%s'\n\n", word);
  global_help(stderr);
  return INS_EXIT_USAGE;
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
    if (argc == 2) {
      global_help(stdout);
      return INS_EXIT_OK;
    }
    word = argv[2]; /* `opjit help CMD`: an unknown CMD is the same usage error as `opjit CMD` */
    for (size_t i = 0; i < NCOMMANDS; i++)
      if (strcmp(word, commands[i]->name) == 0)
        return ins_help(commands[i]);
    return unknown_command(word);
  }
  if (strcmp(word, "--man") == 0) {
    man_page(stdout);
    return fflush(stdout) ? INS_EXIT_FAIL : INS_EXIT_OK;
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
  return unknown_command(word);
}
