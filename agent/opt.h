/* SPDX-License-Identifier: MIT */
/* The OPJIT_* option table: one X-macro list generates the ids, the parser and the help.
 * Parsed once at start-up (the agent) or on demand (`opjit doctor`). A bad value gets one
 * line naming the variable, the value and the default used; the default is kept. */
#ifndef OPJIT_AGENT_OPT_H
#define OPJIT_AGENT_OPT_H

#include <host_rows.h> /* AG_HOST_WORDS: OPJIT_HOSTS's words, the hosts' names (host.h) */
#include <stddef.h>

/* OPT(NAME, kind, default, min, max, choices, help)
 * kinds: BOOL (1/0/on/off/yes/no/true/false), INT (decimal, K/M/G suffixes = 2^10/20/30),
 * ENUM (one of the '|'-separated choices; the value is its index), FLAGS (comma list of
 * choices, or all/none; the value is a bit mask), STR (any text). */
#define AG_OPTIONS(OPT)                                                                      \
  OPT(DISABLE, BOOL, "0", 0, 1, NULL, "1 makes the agent a pure pass-through")               \
  OPT(MODE, ENUM, "jit", 0, 0, "off|profile|jit",                                            \
      "off: forward calls untouched; profile: count, time and record every call; jit: "      \
      "also run LLVM-compiled kernels for hot signatures")                                   \
  OPT(DB, STR, "", 0, 0, NULL,                                                               \
      "profile database (default $XDG_CACHE_HOME/opjit/profile.db, else ~/.cache/opjit/)")   \
  OPT(HOSTS, FLAGS, "all", 0, 0, AG_HOST_WORDS, "hosts whose operators are intercepted")     \
  OPT(TIME_EVERY, INT, "16", 1, 128,                                                         \
      NULL, "time one call in N, at random (rounded up to a power of two)")                  \
  OPT(FLUSH_MS, INT, "1000", 10, 3600000, NULL, "period of the background database writes")   \
  OPT(EXIT_WAIT_MS, INT, "2000", 0, 60000, NULL,                                             \
      "longest wait at exit for the final database write")                                   \
  OPT(BUSY_MS, INT, "200", 0, 60000, NULL, "how long a write waits for a locked database")    \
  OPT(MAX_SIGS, INT, "4096", 16, 1 << 20, NULL,                                              \
      "distinct signatures tracked per process; calls beyond are counted as overflow")       \
  OPT(SAMPLE_HZ, INT, "199", 0, 20000, NULL,                                                 \
      "CPU-time samples per second per thread; 0 turns sampling off")                        \
  OPT(EVENTS, ENUM, "auto", 0, 0, "auto|cycles|task-clock|cpu-clock|timer",                 \
      "sampling event: auto = hardware cycles and counters where the CPU exposes them, "     \
      "else a CPU-time timer when the rate fits the scheduler's tick, else task-clock")      \
  OPT(STACK_DEPTH, INT, "24", 0, 32, NULL, "frames recorded per sample (0: the PC only)")     \
  OPT(SAMPLE_BUDGET, INT, "5", 0, 1000, NULL,                                               \
      "what sampling may cost a thread, in thousandths of its CPU time (measured per sample, "\
      "counted for each thread in lock-step with it; over it samples get rarer and weigh "   \
      "more); 0: no limit")                                                                  \
  OPT(HOT_CALLS, INT, "64", 1, 1 << 30, NULL,                                                \
      "calls of one signature (on one thread) after which it is compiled (sampled CPU time " \
      "can promote it sooner)")                                                              \
  OPT(HOT_PAYBACK, INT, "1", 0, 1000, NULL,                                                  \
      "compile when the time a variant would have saved so far is this many times its "      \
      "compile cost (0: on OPJIT_HOT_CALLS alone)")                                          \
  OPT(DUEL, BOOL, "1", 0, 1, NULL,                                                           \
      "time a new kernel against the original on scratch operands before it serves a call "  \
      "(hosts whose original calls can run alone), and keep the original when the kernel is " \
      "slower (0: publish untimed)")                                                         \
  OPT(JIT_THREADS, INT, "1", 1, 8, NULL,                                                     \
      "compile threads (each with its own LLVM session), started as the queue needs them")   \
  OPT(KERNEL_THREADS, INT, "0", 0, 8, NULL,                                                  \
      "cores a long GEMM's (a large GEMV's) kernel runs on, N (M) split between them (0: the "\
      "CPUs the process may use, where the program's library runs threads of its own; 1: one)")\
  OPT(JIT_MAX_DIM, INT, "2048", 1, 4096, NULL,                                               \
      "largest M, N or K compiled (the generator's own limit is 2048; a call too long "      \
      "for the duel is compiled only where the library's fastest call runs below 3/4 "       \
      "of one core's peak)")                                                                 \
  OPT(VERIFY, INT, "2", 0, 1000, NULL,                                                       \
      "calls of a new variant also run on the original and compared")                        \
  OPT(WARM, BOOL, "1", 0, 1, NULL,                                                           \
      "start from the program's profile: load the kernels earlier runs stored and compile "  \
      "what the profile says is hot, on the writer thread; a signature that gets hot later " \
      "takes the kernel any program stored for it (0: every kernel compiled anew)")          \
  OPT(WARM_WAIT_US, INT, "0", 0, 60000000, NULL,                                             \
      "how long the first call waits for the warm start (microseconds, from the call); "     \
      "kernels not placed by then are placed while the program runs")                        \
  OPT(DECAY, INT, "4", 1, 1000, NULL,                                                        \
      "a run's weight in the profile halves every this many later runs of the program")      \
  OPT(CODE_CACHE_MB, INT, "64", 1, 65536, NULL,                                              \
      "compiled code kept at most; the variants that served fewest calls are evicted "     \
      "first")                                                                                \
  OPT(ISA, ENUM, "auto", 0, 0, "auto|sse2|avx2|avx512",                                     \
      "widest vector ISA the JIT uses: auto = the widest this CPU and OS support; one this "  \
      "CPU lacks falls back to the widest it has, with a warning")                           \
  OPT(FLEET, STR, "", 0, 0, NULL,                                                            \
      "the fleet store: a libpq connection string or postgresql:// URI (libpq's PG* "        \
      "environment and TLS apply); finished runs, models and kernels are pushed there, and " \
      "kernels other machines compiled are fetched (empty: no fleet)")                       \
  OPT(FLEET_KEY, STR, "", 0, 0, NULL,                                                        \
      "file holding the fleet's HMAC-SHA256 key: kernels pushed are tagged with it, kernels " \
      "fetched are placed only with a valid tag (empty: none is fetched nor tagged)")        \
  OPT(FLEET_KERNELS, BOOL, "1", 0, 1, NULL,                                                  \
      "0: never place a kernel fetched from the fleet (compile locally)")                    \
  OPT(FLEET_REDACT, BOOL, "1", 0, 1, NULL,                                                   \
      "command lines reach the fleet as the program and a count of its arguments")           \
  OPT(FLEET_WAIT_MS, INT, "2000", 100, 600000, NULL,                                         \
      "longest wait for the fleet: the warm start's fetch, each push, the push at exit")      \
  OPT(FLEET_PUSH_MS, INT, "30000", 100, 86400000, NULL,                                      \
      "period of the pushes while the program runs (and a push at exit)")                    \
  OPT(FLEET_BACKLOG, INT, "1000", 1, 1000000, NULL,                                          \
      "the newest finished local runs a push considers: older ones are never pushed")        \
  OPT(PERF_MAP, BOOL, "0", 0, 1, NULL,                                                       \
      "1 writes /tmp/perf-PID.map lines for JIT kernels, so perf report names them")         \
  OPT(SUMMARY, BOOL, "0", 0, 1, NULL,                                                        \
      "1 prints a few lines on stderr at exit: wall time, operators' share, kernels, saving, " \
      "top signatures (opjit run sets it to 1 unless it is set)")                             \
  OPT(LOG, ENUM, "warn", 0, 0, "error|warn|info|debug", "agent message level")               \
  OPT(LOG_FILE, STR, "", 0, 0, NULL, "append agent messages to this file instead of stderr")

enum ag_opt_id {
#define AG_OPT_ENUM_(name, ...) AG_OPT_##name,
  AG_OPTIONS(AG_OPT_ENUM_)
#undef AG_OPT_ENUM_
      AG_OPT__COUNT
};

enum ag_opt_kind { AG_OK_BOOL, AG_OK_INT, AG_OK_ENUM, AG_OK_FLAGS, AG_OK_STR };

enum { AG_MODE_OFF = 0, AG_MODE_PROFILE = 1, AG_MODE_JIT = 2 }; /* values of OPJIT_MODE */

typedef struct ag_opt_desc_s {
  const char *name;    /* without the OPJIT_ prefix */
  const char *var;     /* the environment variable: OPJIT_<name> */
  int kind;            /* enum ag_opt_kind */
  const char *def;     /* default, as text */
  long min, max;       /* INT bounds */
  const char *choices; /* ENUM/FLAGS choices, '|'-separated */
  const char *help;
} ag_opt_desc_t;

typedef struct ag_opts_s {
  long num[AG_OPT__COUNT];  /* BOOL/INT/ENUM/FLAGS values */
  char *str[AG_OPT__COUNT]; /* STR values (malloc'ed), NULL otherwise */
  unsigned char from_env[AG_OPT__COUNT]; /* 1 when the environment set a valid value */
} ag_opts_t;

typedef const char *(*ag_getenv_fn)(const char *name);

/* Fills *o from the environment (through get, normally getenv). Every bad value is reported
 * through report (one line each) and replaced by the default. Returns the number of bad
 * values; never fails otherwise. */
int ag_opts_parse(ag_opts_t *o, ag_getenv_fn get, void (*report)(const char *line));
void ag_opts_free(ag_opts_t *o);
/* Reports through report, one line each, every OPJIT_* variable of env (an environ-style array,
 * the prefix in any case) that names no option (OPJIT_TEST_* and OPJIT_FUZZ_* aside), with the
 * option it is nearest to when it differs from one only in case and underscores: a misspelt
 * name was ignored without a word. Returns how many. */
int ag_opts_unknown(char *const *env, void (*report)(const char *line));

/* The description of option id, or NULL. */
const ag_opt_desc_t *ag_opt_desc(int id);

/* Writes the effective value of option id as text (enum and flag names spelt out; OPJIT_FLEET's
 * passwords as "***"). */
void ag_opts_format(const ag_opts_t *o, int id, char *buf, size_t len);

/* The database path: OPJIT_DB if set, else $XDG_CACHE_HOME/opjit/profile.db, else
 * $HOME/.cache/opjit/profile.db. Returns 0, or -1 when no path can be formed or it is too long. */
int ag_opts_db_path(const ag_opts_t *o, ag_getenv_fn get, char *buf, size_t len);

#endif
