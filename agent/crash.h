/* SPDX-License-Identifier: MIT */
/* The crash hook: a process that dies of a fault (SIGSEGV, SIGILL, SIGBUS, SIGFPE) with its PC
 * inside a JIT kernel leaves a marker file beside the database naming the kernel; the next run
 * of any program on that database reads it, records the crash and never places that kernel
 * again (agent.c, store.h st_crash).
 *
 * The hook chains: it keeps the action the program had when the agent activated (a handler,
 * SA_SIGINFO or not, SIG_DFL or SIG_IGN) and hands every signal on to it with the same mask
 * and flags, so the program behaves as it would without the agent: its own handler runs, an
 * ignored signal sent with kill() stays ignored, a fatal fault still kills the process with the
 * same signal. A program that installs its own handler later replaces the hook (its crashes
 * then leave no marker). The handler does only async-signal-safe work: a lock-free look-up in
 * the code map (codemap.h), then one open/write/close of a fixed-size record.
 *
 *   <db>-crash-<pid>      written by the crashing process (0600, O_NOFOLLOW)
 *   <db>-crash-<pid>.<reader pid>   renamed by the run that claims it, read, then deleted */
#ifndef OPJIT_AGENT_CRASH_H
#define OPJIT_AGENT_CRASH_H

#include "sig.h"

#include <stddef.h>
#include <stdint.h>

#define AG_CRASH_MAGIC "OPJITCR1" /* the record's first 8 bytes */
#define AG_CRASH_NAME 160         /* a kernel's name, NUL included, at most */

enum {
  AG_CRASH_OUTSIDE = 0, /* not in JIT code: the program's own fault (key unset) */
  AG_CRASH_KERNEL,      /* the PC was inside a JIT kernel (key, name, lo, hi set) */
  AG_CRASH_TRIAL
}; /* on a compile thread compiling, tuning or testing key's kernel,
                                outside any registered kernel (key set) */

/* One marker's record, as written (native byte order: the reader is on the same machine). */
typedef struct ag_crash_rec_s {
  char magic[8];            /* AG_CRASH_MAGIC, no NUL */
  uint32_t size;            /* sizeof(ag_crash_rec_t) */
  int32_t signo, code;      /* the signal and its si_code */
  int32_t pid;              /* the process that crashed */
  int32_t in_jit;           /* AG_CRASH_* below: where the fault was */
  int32_t generator;        /* the crashing agent's generator version (jit.h) */
  int64_t run_id;           /* its run (0: not recorded yet) */
  int64_t time_ns;          /* CLOCK_REALTIME */
  uint64_t pc, addr;        /* the faulting instruction and address (si_addr) */
  uint64_t lo, hi;          /* the kernel's code */
  ag_sig_t key;             /* the signature that registered the kernel */
  char name[AG_CRASH_NAME]; /* the kernel's name; outside a kernel, where the PC was by object
                               and offset ("libc.so.6+0x1234") or address; NUL-terminated */
} ag_crash_rec_t;

/* Installs the hook for the four fault signals, once per process (later calls do nothing).
 * Any thread; not from a signal handler. */
void ag_crash_install(void);

/* Unblocks the four fault signals on the calling thread (one of the agent's, whose creator
 * blocked every signal): blocked, a fault kills the process without the hook, unsaid. */
void ag_crash_unblock(void);

/* The calling thread (a compile thread) compiles, tunes and tries key's kernel until
 * ag_crash_trial(NULL): a fault on it meanwhile blames key (AG_CRASH_TRIAL). */
void ag_crash_trial(const ag_sig_t *key);

/* Where a marker goes from now on: dbpath's marker for this process, naming run run_id (0: not
 * recorded yet); before the first call, none is written. The writer calls it; the hook reads it
 * without a lock (two buffers, one published at a time). */
void ag_crash_arm(const char *dbpath, int64_t run_id);

/* Checks len bytes as a record into *out: 0, or -1 when they are not one (wrong size or magic,
 * an unterminated name, a signal that is not one of the four, a negative run or pid). Pure. */
int ag_crash_parse(const void *buf, size_t len, ag_crash_rec_t *out);

/* Claims the markers beside dbpath (any process's: each goes to the one run that renames it
 * first), reads up to max valid ones into out, deletes every one it claimed (the unreadable
 * too) and returns how many it read. Markers that are not regular files of this user are left
 * alone. Writer thread. */
int ag_crash_collect(const char *dbpath, ag_crash_rec_t *out, int max);

/* The signal's name ("SIGSEGV"), or "signal" for another. */
const char *ag_crash_signame(int signo);

#endif
