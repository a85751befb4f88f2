/* SPDX-License-Identifier: MIT */
/* The calls that end a process image without exit(): the exec family and _exit/_Exit
 * (what fork children of Python's multiprocessing, for one, end with). Each gives the run its
 * final write first, as exit()'s atexit handler does. glibc's exec functions call __execve
 * internally (not through the PLT), so each public entry point is wrapped; the l-variants
 * collect their arguments and call the v-variants. exit() reaches the kernel through an
 * internal alias, so it never comes through _exit here. Nothing happens unless this process has
 * an active run. */
#define _GNU_SOURCE
#include "agent.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <unistd.h>

#define REAL(name, type)                                                                     \
  static type real_##name;                                                                   \
  if (!real_##name)                                                                          \
    real_##name = (type)dlsym(RTLD_NEXT, #name);

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execv_fn)(const char *, char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef void (*exit_fn)(int);
typedef int (*cxa_atexit_fn)(void (*)(void *), void *, void *);

AG_TLS int ag_tl_keep_statics;

/* C++ static destructors register here. Those of the compile thread (LLVM's, registered while it
 * loads and first uses LLVM; or the calibration's thread, tier.c) are dropped: the process exits
 * with LLVM intact, whatever the compile thread is doing at that moment. Everyone else's pass
 * through. */
AG_EXPORT int __cxa_atexit(void (*fn)(void *), void *arg, void *dso)
{
  REAL(__cxa_atexit, cxa_atexit_fn);
  if (ag_tl_keep_statics)
    return 0;
  return real___cxa_atexit ? real___cxa_atexit(fn, arg, dso) : -1;
}

/* Runs one exec call between the agent's before/after hooks. */
#define AROUND_EXEC(call)                                                                    \
  do {                                                                                       \
    ag_before_exec();                                                                        \
    int rc_ = (call);                                                                        \
    ag_after_failed_exec();                                                                  \
    return rc_;                                                                              \
  } while (0)

AG_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
  REAL(execve, execve_fn);
  AROUND_EXEC(real_execve(path, argv, envp));
}

AG_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
  REAL(execvpe, execve_fn);
  AROUND_EXEC(real_execvpe(file, argv, envp));
}

AG_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
  REAL(fexecve, fexecve_fn);
  AROUND_EXEC(real_fexecve(fd, argv, envp));
}

AG_EXPORT int execv(const char *path, char *const argv[])
{
  REAL(execv, execv_fn);
  AROUND_EXEC(real_execv(path, argv));
}

AG_EXPORT int execvp(const char *file, char *const argv[])
{
  REAL(execvp, execv_fn);
  AROUND_EXEC(real_execvp(file, argv));
}

/* Collects the NULL-terminated variadic arguments after arg0 into argv (a VLA sized by a
 * first pass); envp_out receives the pointer after the NULL when want_env is set. */
#define COLLECT_ARGS(arg0, want_env)                                                         \
  va_list ap;                                                                                \
  size_t n = 1;                                                                              \
  va_start(ap, arg0);                                                                        \
  while (va_arg(ap, const char *))                                                           \
    n++;                                                                                     \
  va_end(ap);                                                                                \
  char *argv[n + 1];                                                                         \
  char *const *envp = NULL;                                                                  \
  argv[0] = (char *)arg0;                                                                    \
  va_start(ap, arg0);                                                                        \
  for (size_t i = 1; i <= n; i++)                                                            \
    argv[i] = i < n ? va_arg(ap, char *) : NULL;                                             \
  if (want_env) {                                                                            \
    (void)va_arg(ap, char *);                                                                \
    envp = va_arg(ap, char *const *);                                                        \
  }                                                                                          \
  va_end(ap);

AG_EXPORT int execl(const char *path, const char *arg0, ...)
{
  COLLECT_ARGS(arg0, 0);
  (void)envp;
  return execv(path, argv);
}

AG_EXPORT int execlp(const char *file, const char *arg0, ...)
{
  COLLECT_ARGS(arg0, 0);
  (void)envp;
  return execvp(file, argv);
}

AG_EXPORT int execle(const char *path, const char *arg0, ...)
{
  COLLECT_ARGS(arg0, 1);
  return execve(path, argv, envp);
}

AG_EXPORT void _exit(int status)
{
  REAL(_exit, exit_fn);
  ag_before_exit();
  real__exit(status);
  __builtin_unreachable();
}

AG_EXPORT void _Exit(int status)
{
  REAL(_Exit, exit_fn);
  ag_before_exit();
  real__Exit(status);
  __builtin_unreachable();
}
