/* SPDX-License-Identifier: MIT */
/* Agent logging: one line per message, "opjit[pid]: ...", to stderr or OPJIT_LOG_FILE.
 * Safe from any thread; never allocates; a message longer than 512 bytes is truncated. */
#ifndef OPJIT_AGENT_LOG_H
#define OPJIT_AGENT_LOG_H

#include <stdatomic.h>
#include <stddef.h>

enum ag_log_level {
  AG_LOG_ERROR = 0, /* the agent lost a capability (store, a host) */
  AG_LOG_WARN,      /* bad input handled with a fallback */
  AG_LOG_INFO,      /* lifecycle: run started, store opened */
  AG_LOG_DEBUG,     /* everything else */
};

/* Where messages go: path (NULL or "" for stderr) is opened for appending at the first message,
 * so a process with nothing to say creates no file; if it cannot be opened, stderr is used and
 * the first line says why. */
void ag_log_setup(int level, const char *path);

/* Formats and writes one line if level is enabled. */
void ag_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* From a signal handler (async-signal-safe): writes "opjit[pid]: " msg "\n" with one write(2) if
 * level is enabled, the line at most 384 bytes (msg truncated). */
void ag_log_signal(int level, const char *msg, size_t len);

/* Logs once per call site (per process): for conditions that would otherwise repeat. */
#define ag_log_once(level, ...)                                                              \
  do {                                                                                       \
    static atomic_flag once_ = ATOMIC_FLAG_INIT;                                             \
    if (!atomic_flag_test_and_set_explicit(&once_, memory_order_relaxed))                    \
      ag_log(level, __VA_ARGS__);                                                            \
  } while (0)

#endif
