/* SPDX-License-Identifier: MIT */
/* `opjit run`: launches a program with the agent preloaded, waits for it like a shell does,
 * exits with its status and names the run(s) it recorded.
 *
 * Signals: a terminal's ^C, ^\ or hang-up reaches the whole foreground process group, the
 * program included, so the launcher only survives them (as shells do while waiting). A signal
 * sent to the launcher alone (kill PID: si_code <= 0) is forwarded to the program. */
#define _GNU_SOURCE
#include "agentlib.h"
#include "cmd.h"
#include "db.h"
#include "table.h"

#include "agent/host.h"
#include "agent/log.h"
#include "agent/opt.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const int forwarded[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP};
#define NFORWARDED (sizeof forwarded / sizeof *forwarded)

static volatile sig_atomic_t child_pid;

static void forward(int sig, siginfo_t *si, void *uc)
{
  (void)uc;
  int saved = errno;
  if (si->si_code <= 0 && child_pid > 0) /* sent by a process, not by the terminal */
    kill((pid_t)child_pid, sig);
  errno = saved;
}

static int64_t realtime_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Execs argv in the child with the launcher's signal state undone; reports errno through fd. */
static void child_exec(char **argv, const struct sigaction *old_act, const sigset_t *old_mask,
                       int fd)
{
  for (size_t i = 0; i < NFORWARDED; i++)
    sigaction(forwarded[i], &old_act[i], NULL);
  sigprocmask(SIG_SETMASK, old_mask, NULL);
  execvp(argv[0], argv);
  int e = errno;
  ssize_t w = write(fd, &e, sizeof e);
  (void)w;
  _exit(INS_EXIT_NOTFOUND);
}

/* Says why pid recorded no run, as far as the launcher can tell: an option that keeps the agent
 * from recording, a database the agent cannot record into (unusable: no path, or one that did
 * not open here), a signal that ended the program, OPJIT_HOSTS leaving BLAS out; else the two
 * causes it cannot tell apart. */
static void no_run(const ag_opts_t *o, pid_t pid, int wstatus, int unusable)
{
  /* A locked database's message is a warning, which OPJIT_LOG=error hides. */
  const char *unwritten = o->num[AG_OPT_LOG] == AG_LOG_ERROR
                              ? "or the agent could not write the database (OPJIT_LOG=warn "
                                "shows its message)"
                              : "or the agent could not write the database (its own message "
                                "says why)";
  char hosts[256];
  ag_opts_format(o, AG_OPT_HOSTS, hosts, sizeof hosts);
  fprintf(stderr, "opjit: no run recorded for pid %d: ", (int)pid);
  if (o->num[AG_OPT_DISABLE])
    fputs("OPJIT_DISABLE is set\n", stderr);
  else if (o->num[AG_OPT_MODE] == AG_MODE_OFF)
    fputs("OPJIT_MODE=off\n", stderr);
  else if (!o->num[AG_OPT_HOSTS])
    fputs("OPJIT_HOSTS=none\n", stderr);
  else if (unusable)
    fputs("the agent cannot record into the database (it names why at the program's first "
          "intercepted call)\n", stderr);
  else if (WIFSIGNALED(wstatus)) /* a killed program's agent writes nothing at its end */
    fprintf(stderr, "signal %d (%s) ended it before the agent wrote any call it made\n",
            WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
  else if (!(o->num[AG_OPT_HOSTS] & AG_HOST_BIT(blas)))
    fprintf(stderr, "OPJIT_HOSTS=%s leaves BLAS calls alone; it made no other call the agent "
            "intercepts, %s\n", hosts, unwritten);
  else
    fprintf(stderr, "it made no BLAS call the agent intercepts, %s\n", unwritten);
}

/* Prints one line naming the runs pid (or its children) recorded since launch_ns, or why there
 * are none; wstatus is pid's wait status.
 *
 * One message per problem: the agent opens the same database (the environment's OPJIT_DB, or
 * the same default) at the program's first intercepted call and names what is wrong with it
 * (no path, not a file, damaged, not opjit's, newer, unwritable, locked). So the launcher never
 * names that again: a database that does not open here for such a reason only makes "no run
 * recorded: the agent cannot record into the database". It speaks of the database itself only
 * for what its own read met (locked now, out of memory, a failed query), which the agent's
 * writes may not have. */
static void report_runs(const char *dbopt, pid_t pid, int64_t launch_ns, int wstatus)
{
  char path[4096], err[1024];
  st_db_t *db = NULL;
  ag_opts_t o;
  ag_opts_parse(&o, ins_getenv, NULL); /* the program's environment: --db is OPJIT_DB there */
  int nopath = ag_opts_db_path(&o, ins_getenv, path, sizeof path);
  int rc = nopath ? ST_ENOENT
                  : st_open(path, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db, err, sizeof err);
  if (rc == ST_EBUSY || rc == ST_ENOMEM) {
    fprintf(stderr, "opjit: cannot look up the runs of pid %d: %s\n", (int)pid, err);
    goto out;
  }
  if (rc) {
    no_run(&o, pid, wstatus, nopath || rc != ST_ENOENT);
    goto out;
  }
  /* The program's own runs (one per exec), its direct children's, and their fork lineage. */
  st_rows_t *st = NULL;
  rc = st_query(db, ST_Q_RUN_TREE, &st) == ST_OK ? 1 : -1;
  if (rc == 1) {
    st_rows_bind_int(st, 1, launch_ns);
    st_rows_bind_int(st, 2, pid);
  }
  char line[1024] = "";
  size_t used = 0;
  int n = 0;
  int64_t best = 0, best_calls = -1;
  while (rc == 1 && (rc = st_rows_next(st)) == 1) {
    int64_t id = st_rows_int(st, ST_TREE_ID), calls = st_rows_int(st, ST_TREE_CALLS);
    const char *status =
        ins_run_status(st_rows_text(st, ST_TREE_STATUS), st_rows_int(st, ST_TREE_PID),
                       st_rows_int(st, ST_TREE_START_NS));
    int w = snprintf(line + used, sizeof line - used, "%s%lld (%lld signatures, %lld calls%s%s)",
                     n ? ", " : "", (long long)id, (long long)st_rows_int(st, ST_TREE_SIGS),
                     (long long)calls, strcmp(status, "exited") ? ", " : "",
                     strcmp(status, "exited") ? status : "");
    used += w > 0 && (size_t)w < sizeof line - used ? (size_t)w : 0;
    if (calls > best_calls)
      best = id, best_calls = calls;
    n++;
  }
  st_rows_close(st);
  if (rc != 0) { /* the query or a row failed: damage is the agent's own line's to name */
    if (st_damaged(db))
      no_run(&o, pid, wstatus, 1);
    else
      ins_db_failed(db, "read");
    goto out;
  }
  if (!n)
    no_run(&o, pid, wstatus, 0);
  else
    fprintf(stderr, "opjit: recorded run%s %s in %s; see: opjit top%s%s %lld\n", n > 1 ? "s" : "",
            line, path, dbopt ? " --db " : "", dbopt ? dbopt : "", (long long)best);
out:
  st_close(db);
  ag_opts_free(&o);
}

static int cmd_run(int argc, char **argv)
{
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"quiet", no_argument, NULL, 'q'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL;
  int quiet = 0;
  for (int c; (c = getopt_long(argc, argv, "+d:qh", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
    case 'q': quiet = 1; break;
    case 'h': return ins_help(&ins_cmd_run);
    default: return ins_bad_option(&ins_cmd_run, argv);
    }
  }
  if (optind >= argc)
    return ins_usage_error(&ins_cmd_run, "no command to run");
  if (dbopt && !*dbopt) /* the agent would read an empty OPJIT_DB as the default database */
    return ins_usage_error(&ins_cmd_run, "--db wants a path (leave it out for the default "
                                         "database)");
  char **cmd = argv + optind;

  char agent[PATH_MAX], searched[2 * PATH_MAX];
  if (ins_agent_find(agent, sizeof agent, searched, sizeof searched)) {
    fprintf(stderr, "opjit: cannot find the agent %s (searched %s): reinstall opjit\n",
            INS_AGENT_NAME, searched);
    return INS_EXIT_FAIL;
  }
  const char *old = getenv("LD_PRELOAD");
  size_t plen = strlen(agent) + (old ? strlen(old) : 0) + 2;
  char *preload = ins_xmalloc(plen);
  snprintf(preload, plen, "%s%s%s", agent, old && *old ? ":" : "", old ? old : "");
  int bad = setenv("LD_PRELOAD", preload, 1) || (dbopt && setenv("OPJIT_DB", dbopt, 1)) ||
            setenv("OPJIT_SUMMARY", "1", 0); /* the exit summary, unless the user set it */
  free(preload);
  if (bad) {
    fprintf(stderr, "opjit: cannot set the environment: %s\n", strerror(errno));
    return INS_EXIT_FAIL;
  }

  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC)) {
    fprintf(stderr, "opjit: pipe: %s\n", strerror(errno));
    return INS_EXIT_FAIL;
  }
  sigset_t fwd, old_mask;
  struct sigaction act = {.sa_sigaction = forward, .sa_flags = SA_SIGINFO}, old_act[NFORWARDED];
  sigemptyset(&fwd);
  for (size_t i = 0; i < NFORWARDED; i++)
    sigaddset(&fwd, forwarded[i]);
  act.sa_mask = fwd;
  sigprocmask(SIG_BLOCK, &fwd, &old_mask); /* no forwarding until child_pid is known */
  for (size_t i = 0; i < NFORWARDED; i++)
    sigaction(forwarded[i], &act, &old_act[i]);
  int64_t launch_ns = realtime_ns();
  pid_t pid = fork();
  if (pid == 0) {
    close(pfd[0]);
    child_exec(cmd, old_act, &old_mask, pfd[1]);
  }
  int fork_errno = errno;
  close(pfd[1]);
  child_pid = pid;
  sigprocmask(SIG_SETMASK, &old_mask, NULL);
  if (pid < 0) {
    close(pfd[0]);
    fprintf(stderr, "opjit: cannot fork: %s\n", strerror(fork_errno));
    return INS_EXIT_FAIL;
  }

  int exec_errno = 0, status = 0;
  ssize_t r;
  while ((r = read(pfd[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR)
    ;
  close(pfd[0]);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (r == (ssize_t)sizeof exec_errno) {
    if (exec_errno == ENOENT) {
      fprintf(stderr, "opjit: %s: command not found\n", cmd[0]);
      return INS_EXIT_NOTFOUND;
    }
    fprintf(stderr, "opjit: cannot execute %s: %s\n", cmd[0], strerror(exec_errno));
    return INS_EXIT_NOEXEC;
  }
  if (!quiet)
    report_runs(dbopt, pid, launch_ns, status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

const ins_cmd_t ins_cmd_run = {
    .name = "run",
    .main = cmd_run,
    .synopsis = "[--db PATH] [--quiet] [--] CMD [ARGS...]",
    .summary = "run a program with the agent preloaded and record its profile",
    .help = "Prepends the agent to LD_PRELOAD (keeping what is there), runs CMD, waits for it\n"
            "and exits with its status (128+N when signal N ended it; 127: CMD not found;\n"
            "126: CMD cannot be executed). Then names the run(s) recorded on stderr.\n\n"
            "options:\n"
            "  --db PATH    record into PATH (sets OPJIT_DB for the program)\n"
            "  -q, --quiet  do not name the recorded runs afterwards\n"
            "  -h, --help   this help\n",
};
