/* SPDX-License-Identifier: MIT */
/* The sampler: one CPU-time event per thread of the process, delivering a signal to that
 * thread; the handler only records (PC, the thread's operator, a short stack, counter values)
 * into that thread's preallocated ring; sp_drain() empties the rings on another thread.
 *
 *   event choice:  hardware cycles + counter group ──(refused)──▶ per-thread CPU-time timers
 *                  ──(refused)──▶ perf task-clock (user only) ──(refused)──▶ off
 * when the rate fits the scheduler's tick (a timer expires on the tick that interrupts the
 * thread anyway; a task-clock sample is an interrupt of its own, which a virtual machine makes
 * costly: bench_lockstep), with task-clock before the timers above it. Each step down is one
 * note in the status, and a fallback (one warning) unless it is auto's from hardware cycles
 * the machine lacks (refused other than by permission: EACCES, EPERM). A timer fires at most once per
 * scheduler tick (CONFIG_HZ): its samples carry the periods they stand for (weight), so that
 * counts keep meaning samples at the asked rate. Threads are armed when sampling
 * starts (every thread in /proc/self/task), when they are created (sp_thread_begin from the
 * agent's pthread_create wrapper) and by sp_rescan(), which also releases the events of
 * threads that exited. The signal is a real-time one the process does not use.
 * The sampler measures what a sample costs its thread (the handler's own cycles, and the
 * signal's delivery, timed once at the start) and keeps that cost under a budget: a share of
 * the sampled threads' CPU time, counted once per thread that waits for a sampled one
 * (sp_lockstep). The drainer's cost per sample is recorded beside it, not budgeted: it runs on
 * a thread of its own, and its first drains name every new PC (symbol tables loaded once). Over budget, each sample stands for several periods (the stride: the period
 * is that many times longer, each sample weighs that many), so counts keep meaning samples at
 * the asked rate.
 * Every function returns 0 or -1; none may be called from the signal handler. */
#ifndef OPJIT_SAMPLER_H
#define OPJIT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#define SP_MAX_FRAMES 32   /* stack depth ceiling (OPJIT_STACK_DEPTH) */
#define SP_MAX_COUNTERS 4  /* hardware counters read with each sample */
#define SP_MAX_THREADS 1024 /* threads sampled at once; more are left unsampled, counted */

enum sp_mode { SP_OFF = 0, SP_PERF_HW, SP_PERF_SW, SP_TIMER };
enum sp_flags {
  SP_F_POOL = 1,     /* attributed through the in-flight operators: the thread had none itself */
  SP_F_WALKED = 2,   /* its stack came from the sampler's own walker (unwind.h) */
  SP_F_UNWOUND = 4,  /* ... from libunwind */
  SP_F_STITCHED = 8, /* walked, and resumed from the operator's entry frame (sp_tl_entry_frame) */
};

/* The frame of the interposed function the thread is inside, as the agent records it on entry
 * (__builtin_frame_address(0), a frame-pointer frame: the caller's RBP saved there, the return
 * address into the caller above it), read by the handler only while the thread's own operator
 * (sp_attrib_t.own) is set. A walk inside the operator that stops short (code without CFI:
 * OpenBLAS's assembly kernels, the vDSO; frames the walker cannot read) goes on from there, so
 * the stack shows the library's frames as far as they were walked, then the caller's chain.
 * Initial-exec: the handler reads it without __tls_get_addr. */
extern __thread __attribute__((tls_model("initial-exec"))) uintptr_t sp_tl_entry_frame;

/* How a sample is attributed: both are called in the signal handler and must be
 * async-signal-safe. own() is the interrupted thread's operator (entry index + 1, 0 = none);
 * inflight() any operator in flight on another thread (0 = none). */
typedef struct sp_attrib_s {
  uint32_t (*own)(void);
  uint32_t (*inflight)(void);
} sp_attrib_t;

typedef struct sp_config_s {
  int hz;              /* samples per second of CPU time per thread */
  const char *events;  /* "auto", "cycles", "task-clock", "cpu-clock" or "timer" */
  int stack_depth;     /* frames per sample, 0..SP_MAX_FRAMES */
  double budget;       /* the share of a sampled thread's CPU time its samples may cost,
                          counted for every thread in lock-step with it; 0: no limit */
  sp_attrib_t attrib;
} sp_config_t;

typedef struct sp_sample_s {
  uint64_t pc;
  uint32_t op;         /* entry index + 1, 0 = outside any operator */
  uint16_t flags;      /* enum sp_flags */
  uint16_t nframes;
  uint32_t weight;     /* sampling periods the sample stands for: 1, more for a timer that
                          expired several times between two ticks, for a thinned thread's
                          samples and under a stride (the budget) */
  uint32_t cycles;     /* the handler's own time for this sample, in TSC cycles */
  uint64_t counters[SP_MAX_COUNTERS]; /* deltas since the thread's previous sample */
  uint64_t frames[SP_MAX_FRAMES];     /* return addresses, innermost first; frames[0] = pc */
} sp_sample_t;

/* What sampling is doing, for the run's record. */
typedef struct sp_status_s {
  int mode;                 /* enum sp_mode */
  const char *event;        /* "cycles", "task-clock", "cpu-clock", "timer" or "off" */
  int hz, stack_depth, signo;
  int ncounters;
  const char *counter_names[SP_MAX_COUNTERS];
  char notes[1024];         /* why better events were not used, '\n'-separated */
  int fallback;             /* 1: the mechanism is a step down from a refused better one */
  uint64_t samples, lost;   /* drained so far (their weights); dropped because a ring was full */
  uint64_t unsampled;       /* threads left unsampled: they kept the signal blocked, or the
                               thread table or the descriptor budget (RLIMIT_NOFILE / 4) was
                               full */
  int threads;              /* threads armed now */
  uint64_t thinned;         /* threads left unarmed while the host starts short-lived ones:
                               their armed siblings' samples weigh for them */
  uint64_t walked, unwound; /* stacks taken by the sampler's own walker (unwind.h), and by
                               libunwind where it could not (bounds unknown yet, frames it
                               does not interpret) */
  uint64_t stitched;        /* of the walked, those resumed from an operator's entry frame */
  double delivery_ns;       /* a signal's delivery and return to this thread (0: not measured) */
  double handler_ns;        /* the handler's time per sample: each sp_adapt's median, averaged */
  double consumer_ns;       /* the drainer's time per sample, as sp_adapt was told, averaged */
  uint32_t stride;          /* periods per sample now (1: the asked rate) */
  int lockstep;             /* threads that wait for a sampled one (sp_lockstep) */
} sp_status_t;

/* Starts sampling every thread of the process. Returns 0 (sampling, or off by choice: hz 0)
 * or -1 when no mechanism works (status says why; the caller warns once). */
int sp_start(const sp_config_t *cfg);
/* Sampling will start in this process: threads should begin through sp_thread_begin. */
void sp_expect(void);
int sp_expected(void);
/* A thread the host just created, on its first instruction: notes its stack (for the stack
 * walker, whenever sampling starts) and arms it when sampling is on; while the host starts
 * short-lived threads (one per task), one in four, whose samples then weigh four (sampler.c);
 * allocates the thread's block of libunwind's TLS, which the handler must not (sampler.c).
 * Returns a token for sp_thread_end. */
uint64_t sp_thread_begin(void);
/* The calling thread, begun with token, is about to return: releases its event and notes how
 * long it lived. */
void sp_thread_end(uint64_t token);
/* Discards the sampler's signals pending for the calling thread (before exec: the new image
 * would die of them). */
void sp_discard_pending(void);
/* Arms threads that appeared and releases those that exited. */
void sp_rescan(void);
/* Around a dlclose: no stack walk reads an object while it is unmapped. begin returns
 * whether it did anything; pass that to end. */
int sp_unload_begin(void);
void sp_unload_end(int began);
/* Moves up to max recorded samples into out; returns how many. */
size_t sp_drain(sp_sample_t *out, size_t max);
/* The host runs n threads that wait for each other (ggml: a graph's threads meet at a barrier
 * after every node), so a sample that stops one stops n: its cost counts n times against the
 * budget. In effect until declared again; 1 at the start. Cheap: a store when n changes. */
void sp_lockstep(int n);
/* After draining: measures the cost of a sample to its thread — the median handler time of the
 * samples drained since the last call (8 at least; the first two such calls are left out: the
 * walker's caches fill then), averaged over calls, plus the delivery — and sets the stride the
 * budget allows (sp_stride_for), changing every armed thread's period when it moves.
 * consumer_ns, what the caller spent on each drained sample (aggregating, naming), is averaged
 * and reported in the status. */
void sp_adapt(double consumer_ns);
/* The budget rule: the stride (periods per sample, 1..SP_MAX_STRIDE) that keeps hz / stride
 * samples a second, each costing sample_ns for each of lockstep threads, within budget (a share
 * of CPU time; 0: no limit, stride 1). It rises as soon as the cost needs it and falls only
 * when the lower stride stays within 3/4 of the budget, so that it does not swing between two
 * strides. current is the stride in effect. */
#define SP_MAX_STRIDE 64 /* samples never rarer than a 64th of the asked rate */
uint32_t sp_stride_for(double hz, double sample_ns, int lockstep, double budget, uint32_t current);
/* Stops every event (the signal handler stays, ignoring late signals). */
void sp_stop(void);
/* Current status (a copy). */
void sp_status(sp_status_t *out);
/* 1 while sampling is on. */
int sp_active(void);

/* In a fork child: the parent's events belong to the parent's threads; close them all and
 * forget the rings. The child starts its own sampling with sp_start. */
void sp_after_fork_child(void);

/* Parses a PERF_FORMAT_GROUP read (nr, then one value per event) into values; returns the
 * number of values or -1 when the buffer is short or malformed. For unit tests and the
 * handler. */
int sp_parse_group(const void *buf, size_t len, uint64_t *values, int max);

#endif
