/* SPDX-License-Identifier: MIT */
/* A host program for the crash hook's chaining tests: it makes one BLAS call (the agent
 * activates and, in jit mode, hooks the fault signals), and faults in its own code.
 *   handler   an SA_SIGINFO handler (SIGUSR1 in its mask) installed before the call: the fault
 *             reaches it, with its mask, and it jumps back; exits 0
 *   plain     the same with a handler installed by signal() (no SA_SIGINFO)
 *   late      the handler installed after the call (replacing the agent's hook)
 *   ignore    SIGSEGV ignored, then sent to itself: it stays ignored; exits 0
 *   default   no handler: the fault kills the process with SIGSEGV, once the database named by
 *             OPJIT_DB holds its run when the agent is loaded (it waits for the agent's writer,
 *             20 s at most)
 * Prints what happened on stdout. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void sgemm_(const char *, const char *, const int *, const int *, const int *, const float *,
            const float *, const int *, const float *, const int *, const float *, float *,
            const int *);

static sigjmp_buf back;
static volatile sig_atomic_t usr1_blocked, got;

static void on_fault_info(int sig, siginfo_t *si, void *ctx)
{
  (void)si, (void)ctx;
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, NULL, &now);
  usr1_blocked = sigismember(&now, SIGUSR1);
  got = sig;
  siglongjmp(back, 1);
}

static void on_fault(int sig)
{
  got = sig;
  siglongjmp(back, 1);
}

static void install(int info)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGUSR1);
  if (info) {
    sa.sa_sigaction = on_fault_info;
    sa.sa_flags = SA_SIGINFO;
  } else {
    sa.sa_handler = on_fault;
  }
  sigaction(SIGSEGV, &sa, NULL);
}

static void blas_call(void)
{
  float a[16], b[16], c[16], one = 1, zero = 0;
  int n = 4;
  for (int i = 0; i < 16; i++)
    a[i] = (float)i, b[i] = 1, c[i] = 0;
  sgemm_("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n);
  printf("sgemm c[0] %g\n", (double)c[0]);
}

/* Waits until the database holds this process's run, when the agent is loaded. */
static void wait_recorded(void)
{
  const char *path = dlsym(RTLD_DEFAULT, "opjit_settle") ? getenv("OPJIT_DB") : NULL;
  char sql[96];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE pid=%d", (int)getpid());
  for (int i = 0; path && i < 2000; i++, usleep(10000)) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int found = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
                sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
                sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    sqlite3_close(db);
    if (found)
      return;
  }
}

/* Reads a page it mapped without access (the program's own bug, and no undefined behaviour a
 * sanitizer would report before the fault). */
static int fault(void)
{
  volatile int *p = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return *p;
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "handler") || !strcmp(mode, "plain"))
    install(!strcmp(mode, "handler"));
  if (!strcmp(mode, "ignore"))
    signal(SIGSEGV, SIG_IGN);
  blas_call();
  if (!strcmp(mode, "late"))
    install(1);
  if (!strcmp(mode, "ignore")) {
    raise(SIGSEGV);
    printf("ignored\n");
    return 0;
  }
  if (!strcmp(mode, "default"))
    wait_recorded();
  fflush(stdout);
  if (sigsetjmp(back, 1) == 0) {
    fault();
    printf("no fault\n");
    return 1;
  }
  printf("handled signal %d%s\n", (int)got,
         !strcmp(mode, "plain") ? ""
         : usr1_blocked         ? ", its mask held"
                                : ", its mask lost");
  return 0;
}
