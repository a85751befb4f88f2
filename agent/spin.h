/* SPDX-License-Identifier: MIT */
/* A library's pool spinning, as the judge's bursts see it.
 *
 * A threaded library's pool threads spin for a while after each call before they sleep (one
 * took a whole CPU for 128 ms after its last call: docs/never-slower.md). The judge's bursts
 * (compare.h) run the original every few milliseconds while a variant awaits its verdict, so
 * the pool never sleeps, and a kernel split over the process's cores (par.h) has its other part
 * wait for the CPU a spinning thread holds: a split GEMV 1024^2, 27-29 us a call alone against
 * its library's 37-40, measured 45-51 us between the bursts and was demoted at 1.72x in one run
 * of two. A run with the variant alone leaves the pool asleep: the variant's timings taken in a
 * spin the judge started are not what the program gets.
 *
 * So while a split variant is live in a host with threads of its own, the judge holds after
 * every burst, and after a split variant's publication (the program's last calls of the library
 * and the duel's leave it spinning): no split variant's call is booked (but for its first; a
 * cold pair's sides are, compare.h) and no burst begins (agent.c) until a look finds the
 * process's other threads quiet over a window that began after the hold: those neither the
 * agent's (agent.h, ag_agent_tid) nor registered as calling operators (tcount.h), taking less
 * than half a CPU. The looks are the judge's (the compile thread's, every 20 ms while a split
 * variant is live; a window shorter than 10 ms waits for the next). Other threads busy for
 * AG_SPIN_BUSY_MAX_NS on end are the program's own work, not a spin a burst started: the holds
 * stop until a look finds them quiet again, and the judge times as it did without them (rounds
 * are then as disturbed as the program's calls are). */
#ifndef OPJIT_AGENT_SPIN_H
#define OPJIT_AGENT_SPIN_H

#include <stdatomic.h>
#include <stdint.h>

#define AG_SPIN_BUSY_MAX_NS 500000000ull /* other threads busy this long: their own work */
#define AG_SPIN_BUSY_SHARE 0.5           /* of a CPU, over a look's window: busy */

/* When the judge's hold began (ag_now_ns), 0 when it does not hold: read where a call's timing
 * is booked or a burst is due. */
extern _Atomic uint64_t ag_spin_hold;

/* A burst ended (its thread): the hold begins when holds are armed (a split variant is live, the
 * other threads not busy on their own). */
void ag_spin_burst_end(void);
/* The hold begins, armed or not (a split variant's publication in a threaded host). */
void ag_spin_begin_hold(void);
/* Whether holds are armed. */
int ag_spin_armed(void);

/* The judge's look (a compile thread, code_mu held): split_live, whether a split variant is live
 * now. Measures the other threads' CPU time since the last look and updates the hold and the
 * arming. */
void ag_spin_look(int split_live);

/* The CPU time (ns) the process's other threads (above) took since the previous call, and the
 * wall time between the calls into *window_ns: 0 and 0 at the first call, or when the threads
 * cannot be read. Not thread-safe (the looks: code_mu). */
uint64_t ag_spin_others_ns(uint64_t *window_ns);

/* The hold's rule, on one look's figures: busy_ns of the other threads' CPU over window_ns of
 * wall time ending at now_ns; *busy_since_ns, the time they became busy (0: quiet at the last
 * look), is kept between looks. Returns 1 when holds stay armed (they are quiet, or busy for
 * less than AG_SPIN_BUSY_MAX_NS so far), and sets *quiet when they took less than
 * AG_SPIN_BUSY_SHARE of a CPU. Pure arithmetic. */
int ag_spin_rule(uint64_t busy_ns, uint64_t window_ns, uint64_t now_ns, uint64_t *busy_since_ns,
                 int *quiet);

/* A fork child: no hold, no look taken yet (the parent's threads are not the child's). */
void ag_spin_after_fork_child(void);

#endif
