/* SPDX-License-Identifier: MIT */
/* The exit summary (OPJIT_SUMMARY): a few lines on stderr when the program exits, as `perf
 * stat` prints — the run's wall time, the operators' share of it, the kernels compiled, placed
 * from the store and demoted, the measured saving and the three costliest signatures (with the
 * JIT state of each that no kernel serves, and why). Every
 * figure comes from the counters, timings and tier states the writer has just stored for the
 * run, combined as `opjit top` combines them (time = calls at the measured mean of whoever
 * served them; saving = variant calls x (original mean - variant mean)). */
#ifndef OPJIT_AGENT_SUMMARY_H
#define OPJIT_AGENT_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#define AG_SUMMARY_TOP 3 /* signatures the summary names */

/* What the summary says, gathered from the signature table. */
typedef struct ag_summary_s {
  int64_t run_id;   /* the run's id in the database, 0 when it was not recorded */
  int64_t wall_ns;  /* from the run's start (its first counted call) to now */
  int jit;          /* OPJIT_MODE=jit */
  uint32_t sigs;    /* signatures called */
  uint64_t calls;   /* their calls */
  int threads_own;  /* the program started threads of its own (agent.h, ag_host_threaded) */
  double est_ns;    /* estimated operator time: each call at its server's measured mean */
  uint64_t vcalls;  /* calls JIT code served */
  double saving_ns; /* variant calls x (original mean - variant mean), where both measured */
  uint32_t compiled, placed; /* kernels compiled this run / placed from the store */
  uint32_t demoted, tied, guarded, failed, queued; /* variants by status (tier.h) */
  uint32_t cold, none; /* called signatures without a variant: not hot yet / not compilable */
  struct ag_summary_sig_s {
    char name[128]; /* as the database names it (ag_sig_format) */
    uint64_t calls;
    double est_ns;
    double speedup; /* original mean / variant mean; 0 when either is not measured */
    char state[16]; /* its JIT state and why (tier.h, ag_tier_reason), cut to fit; "" when */
    char why[120];  /* none was decided (JIT off) */
  } top[AG_SUMMARY_TOP];
  int ntop;
} ag_summary_t;

/* Fills *s from the signature table of this process (ag_table; nothing when there is none):
 * run_id and start_ns (CLOCK_REALTIME) are the run's, as the writer recorded them. */
void ag_summary_collect(ag_summary_t *s, int64_t run_id, int64_t start_ns);

/* Writes the summary's lines, each starting "opjit: ", into buf (NUL-terminated, truncated to
 * len); returns the length written. */
size_t ag_summary_format(const ag_summary_t *s, char *buf, size_t len);

/* At exit, after the writer's final step: when OPJIT_SUMMARY is on, collects and writes the
 * summary to stderr in one write. */
void ag_summary_print(int64_t run_id, int64_t start_ns);

#endif
