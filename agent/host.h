/* SPDX-License-Identifier: MIT */
/* The hosts: one row per kind of program operator the agent interposes (agent/hosts/<name>*),
 * holding what the core asks of a host by the id every key carries (sig.h, ag_sig_t.host):
 * its name, its OPJIT_HOSTS bit, what it intercepts, how its keys are named for people, which
 * kernel each asks for, and the traits the tiers' policy needs. A new host is its files in
 * agent/hosts/, its row ag_host_<name> in agent/hosts/<name>_sig.c among them: the build lists
 * the rows (host_rows.h, generated), and the core never names a host. */
#ifndef OPJIT_AGENT_HOST_H
#define OPJIT_AGENT_HOST_H

#include "duel.h"
#include "sig.h"
#include "verify.h"
#include "jit/jit.h"
#include <host_rows.h> /* AG_HOST_ROWS: every host's name, in name order (generated) */
#include <stddef.h>

/* Each host's bit of OPJIT_HOSTS: the place of its name among the option's words (opt.h),
 * which are the names in AG_HOST_ROWS's order. AG_HOST_BIT(name) is host name's bit. */
enum ag_host_place {
#define AG_HOST_PLACE_(name) AG_HOST_PLACE_##name,
  AG_HOST_ROWS(AG_HOST_PLACE_)
#undef AG_HOST_PLACE_
};
#define AG_HOST_BIT(name) (1u << AG_HOST_PLACE_##name)

/* Traits: how the never-slower checks reach a host's originals. */
enum {
  AG_HOST_DUELS = 1 << 0, /* one original call can run alone on scratch operands: a new kernel
                             is duelled before publication (duel.h); a host without it judges
                             its kernels on its own calls only (a graph host: in its rounds) */
  AG_HOST_SYMBOLS = 1 << 1, /* its entry points are the agent's exported symbols, interposed
                               whenever the agent is loaded (ag_call_begin, agent.h): without its
                               OPJIT_HOSTS bit they pass through by ag_state; a host without it
                               hooks itself in when its bit is set, and its sites pass hooked */
};

typedef struct ag_host_s {
  unsigned id;            /* enum ag_host: the keys' first byte (persisted) */
  const char *name;       /* OPJIT_HOSTS's word for it; "host" in its keys' JSON */
  unsigned opt_bit;       /* its bit of OPJIT_HOSTS: AG_HOST_BIT(its name) */
  const char *interposes; /* what it intercepts, for people */
  /* The system libraries (sonames, NULL-terminated) its originals are looked up in when the
   * program resolved them by name without linking one (ag_resolve, agent.h); NULL: none. */
  const char *const *libs;
  unsigned traits;        /* AG_HOST_* above */
  /* Naming a key of this host (the contracts of sig.h's ag_sig_opname, ag_sig_format and
   * ag_sig_params_json). */
  const char *(*opname)(const ag_sig_t *s, char *buf, size_t len);
  void (*format)(const ag_sig_t *s, char *buf, size_t len);
  void (*params_json)(const ag_sig_t *s, char *buf, size_t len);
  /* The kernel a key of this host asks for (the contract of problem.h's ag_problem_check: the
   * key decoded into its family's typed problem, and that into the kernel, or why not); NULL:
   * the host's keys are profiled only. */
  int (*kernel)(const ag_sig_t *k, long max_dim, jt_gemm_t *g, int *swap, char *why,
                size_t len);
  /* A kernel's check before it is published, on operands of its own at g's exact shape (g: the
   * problem kernel gave, fn: the kernel compiled for it), for kernels whose first calls may be
   * their only ones: 1 passed, 0 failed (*worst and *bound say by how much), -1 not checked
   * (no check for this kernel's kind, or no memory). NULL: the host's kernels have none. */
  int (*selftest)(const jt_gemm_t *g, void (*fn)(void), double *worst, double *bound);
  /* The key whose profile also speaks for k's, when k's calls run as that key's until k has a
   * kernel (and are timed under it): into *as, returning 1; 0 when k has none. NULL: no key of
   * this host has one. */
  int (*stands_in)(const ag_sig_t *k, ag_sig_t *as);
  /* 1 when k's saving per call cannot be estimated from its original's timing (a timing that is
   * mostly something else's: barriers), so OPJIT_HOT_PAYBACK leaves k to its calls. NULL: every
   * key's can. */
  int (*no_payback)(const ag_sig_t *k);
  /* For a host with AG_HOST_DUELS: duels variant, a kernel compiled for key (called as run says:
   * problem.h, ag_vrun_t, its operand order and parts), against the host's original (duel.h),
   * both on scratch operands of the key's shape, each as far into a cache line as offsets says
   * the program's lie (table.h, ag_entry_t.offsets), on the calling thread, within budget_ns.
   * reps: runs of the variant per call (1; the
   * tests' fault seam: more make it slower, -N runs the original N times per call). Returns 0
   * with *out filled, -1 when key cannot be duelled, -2 when the process is exiting (no verdict:
   * the kernel is not published). The interposers' own (the agent links them): NULL where the
   * rows are linked alone (the command, the unit tests). */
  int (*duel)(const ag_sig_t *key, void *variant, const ag_vrun_t *run, uint32_t offsets,
              int reps, uint64_t budget_ns, ag_duel_result_t *out);
  /* For a host with AG_HOST_DUELS: checks variant, a kernel compiled for key whose problem is g
   * (called as run says), against the host's original on the same scratch operands
   * of g's shape (verify.h, ag_verify_scratch), on the calling thread, before it is published.
   * Returns 1 when it matched within the bound and wrote only its result, 0 when not (*out says
   * how), -1 when it was not checked, -2 when the process is exiting (no verdict: the kernel is
   * not published). The interposers' own: NULL where the rows are linked alone. */
  int (*check)(const ag_sig_t *key, const jt_gemm_t *g, void *variant, const ag_vrun_t *run,
               ag_scratch_t *out);
} ag_host_t;

/* The row of the host with this id, or NULL for an id no host has. */
const ag_host_t *ag_host_of(unsigned id);

/* printf into [*at, end), advancing *at, never past end (for the naming functions). */
void ag_appendf(char **at, char *end, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The rows, in name order (hosts/<name>_sig.c, as AG_HOST_ROWS lists them), and how many. */
extern const ag_host_t *const ag_hosts[];
extern const size_t ag_nhosts;

#endif
