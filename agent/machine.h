/* SPDX-License-Identifier: MIT */
/* The machine model: what the CPU opjit runs on can do, measured once per CPU and stored.
 * Which vector ISAs the CPU and its OS support (CPUID, XGETBV), the FMA peak per vector width
 * and dtype, the cost of the agent's clock, and LLVM's compile latency per kernel family (in
 * CPU time: the compile threads note every compile and LLVM's load, and where a payback test
 * fails before this CPU measured either, a thread of the tiers' measures them on a CPU no
 * other thread wants: tier.c, calibrate).
 *
 * Two halves. machine.c holds pure functions any program may use (the agent, `opjit doctor`,
 * tests): detection, measurement, the ISA choice, conversion to and from the store's record.
 * machine_run.c holds the agent's model for this process: started by the writer thread when
 * the agent activates in JIT mode, it takes the model stored for this CPU key from the writer
 * (read on its connection) or, when there is none, measures it on a thread of its own
 * (~5-20 ms); a model not settled is measured again 0.1, 0.3, 1 and 3 s later, each
 * measurement merged (ag_machine_merge), until each peak has agreed with the model. The writer
 * saves what is new (ag_machine_save). A process that never calls an operator never gets here.
 *
 *   model:  none ──ag_machine_start──▶ loading ──stored, settled─────────────────────▶ final
 *                                            ├─stored, not settled──────────────────▶ ready
 *                                            └─none/old/unreadable──▶ measuring ──▶ ready, unsaved
 *           ready (ag_machine() != NULL) ──measured again, merged──▶ ready | final (settled,
 *           or the schedule's last); what this process measured ──ag_machine_save──▶ saved
 * Every getter is safe from any thread and never blocks on I/O; before the model is ready they
 * return 0 (peaks, timer) or the documented fallback (compile cost). */
#ifndef OPJIT_AGENT_MACHINE_H
#define OPJIT_AGENT_MACHINE_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/* The vector ISA levels the JIT can target (OPJIT_ISA: auto|sse2|avx2|avx512). */
enum ag_isa {
  AG_ISA_SSE2 = 0, /* 128-bit, no FMA: every x86-64 */
  AG_ISA_AVX2,     /* 256-bit, AVX2 + FMA, 16 registers */
  AG_ISA_AVX512,   /* 512-bit, AVX-512F, 32 registers */
  AG_ISA__COUNT
};

/* The extensions detected: X(ID, "name" as the store and doctor list it). */
#define AG_ISA_EXTS(X)                                                                       \
  X(SSE2, "sse2")                                                                            \
  X(AVX, "avx")                                                                              \
  X(FMA, "fma")                                                                              \
  X(AVX2, "avx2")                                                                            \
  X(AVX512F, "avx512f")                                                                      \
  X(AVX512DQ, "avx512dq")                                                                    \
  X(AVX512BW, "avx512bw")                                                                    \
  X(AVX512VL, "avx512vl")                                                                    \
  X(AVX512VNNI, "avx512vnni")                                                                \
  X(AVX512BF16, "avx512bf16")                                                                \
  X(AVX512FP16, "avx512fp16")
enum {
#define AG_X_ENUM_(id, name) AG_X_##id##_BIT,
  AG_ISA_EXTS(AG_X_ENUM_)
#undef AG_X_ENUM_
};
#define AG_X(id) (1u << AG_X_##id##_BIT) /* the bit of extension id: AG_X(AVX2) */

#define AG_MACHINE_METHOD 3 /* the measurement's version: a model stored by an older one is
                               measured again (1: timer_ns was CLOCK_MONOTONIC's read; 2: a
                               measurement had to agree on every peak at once to settle it) */
#define AG_MACHINE_COMPILE_GUESS_NS 10000000ull /* a compile's cost before any was measured on
                                                   this CPU, LLVM's load's too (kernels took
                                                   4-35 ms, median 7-9, on this project's
                                                   machines) */
#define AG_MACHINE_LLVM_LOAD "llvm-load" /* the compile notes' "family" for the JIT module's
                                            load before a process's first compile (12-20 ms of
                                            CPU on a Zen 5; with the first compile's set-up
                                            where tier.c measured it, 22-30); not a kernel
                                            family's stand-in */

typedef struct ag_machine_s {
  unsigned exts;         /* AG_X() bits the CPU supports and the OS enables (XCR0) */
  int widest;            /* enum ag_isa: the widest level exts allow */
  int vregs;             /* vector registers at that level: 16, or 32 with AVX-512 */
  double gflops[2][3];   /* FMA peak, GFLOP/s (= FLOP/ns): [f32, f64][128, 256, 512 bits], best
                            of the rounds; 0 where the width is not supported */
  double timer_ns;       /* one read of the calls' clock (agent.h, ag_tick: the TSC after an
                            lfence where it is invariant, else CLOCK_MONOTONIC) */
  int64_t measured_ns;   /* when it was last measured (CLOCK_REALTIME) */
  unsigned agreed;       /* the peaks a later measurement agreed with (ag_machine_merge), bit
                            3 * f64 + width */
  int settled;           /* every peak measured has agreed: no run measures them again */
  int stored;            /* loaded from the database rather than measured by this process */
} ag_machine_t;

/* ---- pure functions (machine.c) ---------------------------------------------------------- */

/* Whether CPUID says the TSC is invariant (leaf 0x80000007, EDX bit 8: a constant rate in every
 * C- and P-state): then it is the calls' clock (agent.h, ag_tick). */
int ag_machine_tsc_invariant(void);
/* Fills exts, widest and vregs from CPUID and XGETBV; clears the rest. Never fails. */
void ag_machine_detect(ag_machine_t *m);
/* Measures the FMA peaks of every width and dtype m->exts supports, then the calls' clock, on the
 * calling thread: for each, 5 rounds of ~0.2 ms, the fastest kept. Fast rather than median:
 * what disturbs a round (another vCPU's load, preemption, a frequency or AVX-512 licence
 * ramp) only ever slows it, so the fastest round is the closest to what the pipes do.
 * Takes under 20 ms. Sets measured_ns. */
void ag_machine_measure(ag_machine_t *m);
/* How close a measurement's peaks must come to the model's to settle it (ag_machine_merge). */
#define AG_MACHINE_AGREE 0.05
/* Merges measurement x of m's CPU into m: every peak the faster of the two, the clock read the
 * cheaper, measured_ns x's; m's extensions stay. A disturbed round only ever slows a
 * measurement, and what disturbs one can last: on the Zen 3 guest a TSan host's first 0.1-0.2 s
 * halved the machine thread's FMA rate (and doubled its clock read) in every 0.2 ms round, so
 * the fastest round of one measurement is not enough. A peak x measures within
 * AG_MACHINE_AGREE of m's has agreed (two measurements made apart in time saw the same pipe);
 * one x measures faster than that takes back the peak's agreement. m->settled once every peak
 * it has measured has agreed, each in whichever measurement: on a busy machine one measurement
 * in several catches all six undisturbed (the Zen 5 guest, idle: a peak 6-14 % slow in 4 of 12
 * measurements; the suite running beside it: no agreement in 8 runs). Returns m->settled. */
int ag_machine_merge(ag_machine_t *m, const ag_machine_t *x);
/* For the benchmarks: m detected, then measured times times, the fastest per width and dtype
 * kept (a benchmark can spend the time to get the peak out of a noisy machine). */
void ag_machine_measure_best(ag_machine_t *m, int times);
/* For the benchmarks: one run of the FMA loop of a width (enum ag_isa) and dtype that m
 * detected, lasting about ns, on the calling thread, in GFLOP/s (0 when m lacks the width):
 * the peak's loop timed as a benchmark times a kernel, in one batch as long as the kernel's. */
double ag_machine_fma_gflops(const ag_machine_t *m, int isa, int f64, uint64_t ns);
/* For the benchmarks: the same loop run as a batch runs a kernel's calls, pieces runs of about
 * piece_ns each (a call's length), after(arg) called after every every-th (a probe read
 * between calls; its time is not the loop's). Returns the loop's GFLOP/s over the pieces alone
 * (0 when m lacks the width). */
double ag_machine_fma_pieces(const ag_machine_t *m, int isa, int f64, uint64_t piece_ns,
                             long pieces, long every, void (*after)(void *arg), void *arg);
/* The level for OPJIT_ISA's value want (0 auto, then 1 + enum ag_isa) on a CPU with exts. When
 * the CPU lacks the level asked for, writes one line naming the variable, the value and the
 * level used instead into why (else why[0] = 0) and returns the widest level it has. */
int ag_machine_isa_choose(long want, unsigned exts, char *why, size_t len);
/* The level's name ("sse2", "avx2", "avx512") and vector width in bits. */
const char *ag_isa_name(int isa);
int ag_isa_bits(int isa);
/* exts as a space-separated list of names. */
void ag_machine_exts_format(unsigned exts, char *buf, size_t len);
/* The CPU key stored objects and models use: "model name [flags <hash of the flags>]". */
void ag_machine_cpu_key(const char *model, const char *flags, char *buf, size_t len);
/* Between the model and the store's record (cpu is the key). */
void ag_machine_to_store(const ag_machine_t *m, const char *cpu, st_machine_t *out);
void ag_machine_from_store(const st_machine_t *in, ag_machine_t *out);

/* ---- the agent's model for this process (machine_run.c) ---------------------------------- */

/* From the writer thread when it starts (JIT mode: nothing else weighs the model), once per
 * process (a fork child whose parent was still at it starts again): cpu_key's model from
 * stored, the record the writer read on its own connection (have 1), or with none stored
 * (have 0); have -1 (the writer had no connection) reads it on the model's thread through a
 * read-only connection of its own. A stored model that is settled is published here, with no
 * thread; otherwise a thread measures it (again). */
void ag_machine_start(const char *cpu_key, const st_machine_t *stored, int have);
/* The model, or NULL until it is loaded or measured. Its peaks only ever rise while it is not
 * final; the pointer and what it points to stay valid for the process's life. */
const ag_machine_t *ag_machine(void);
/* 1 once the model's peaks are this run's last (settled, or the schedule has ended): a
 * decision a higher peak would turn (the long-call rule, tier.c) waits for it. */
int ag_machine_final(void);
/* Waits until the model is final, ms milliseconds at most (it never is where its thread was not
 * started: a fork child forked in the writer's loader work, see agent.c); returns 1 once it
 * is, else 0. */
int ag_machine_wait(long ms);
/* The ISA level the JIT should use: the widest the CPU supports unless OPJIT_ISA asks for
 * less (or for more than it has: one warning, then the widest). Resolved at the first call. */
int ag_machine_isa(void);
/* The widest ISA level a /proc/cpuinfo "flags" line claims (avx512f; avx2 and fma; else sse2). */
int ag_machine_flags_widest(const char *flags);
/* What stored kernels are keyed by on this machine: cpu_key (its model and /proc/cpuinfo
 * flags) itself when the JIT uses the widest ISA those flags claim, else cpu_key with
 * " isa=<name>": runs with a narrower OPJIT_ISA keep kernels of their own beside the default
 * ones, and so does a process whose CPUID offers less than the kernel's flags say (valgrind
 * hides AVX-512 from the programs it runs; /proc/cpuinfo still lists it), which must never
 * place the wider kernels the CPU's other processes stored. */
void ag_machine_object_key(const char *cpu_key, const char *flags, char *buf, size_t len);
/* The same for a process whose JIT uses isa (enum ag_isa): pure (machine.c), for `opjit
 * doctor`. */
void ag_machine_object_key_for(const char *cpu_key, const char *flags, int isa, char *buf,
                               size_t len);
/* The measured FMA peak for a vector width (128, 256, 512) and dtype, in GFLOP/s; 0 when the
 * width is not supported or the model is not ready. */
double ag_machine_peak_gflops(int width_bits, int f64);
/* One read of the calls' clock (ag_tick), in ns; 0 until the model is ready. */
double ag_machine_timer_ns(void);
/* Notes one compile of a kernel family ("gemm", "dot", "mm", "add_rms_mul", ...) that took ns:
 * from the compile threads. At most 16 families; the writer stores the notes. */
void ag_machine_note_compile(const char *family, uint64_t ns);
/* What a compile of family costs on this CPU: the median of its latest compiles (this run's
 * and the stored ones); for a family never compiled here, the median over the kernel families
 * that were; with none, AG_MACHINE_COMPILE_GUESS_NS. AG_MACHINE_LLVM_LOAD: LLVM's load. */
uint64_t ag_machine_compile_ns(const char *family);
/* Whether a compile of family (NULL: of any kernel family; AG_MACHINE_LLVM_LOAD: LLVM's load)
 * was measured on this CPU, in this run or stored. */
int ag_machine_compile_measured(const char *family);
/* From the tiers: a measurement of what a compile costs on this CPU is under way (1: tier.c,
 * calibrate) or has ended (0). The final save waits for it as for a measurement of the peaks. */
void ag_machine_calibrating(int on);
/* Whether one is under way (opjit_settle waits for it). */
int ag_machine_calibration_running(void);
/* From the writer thread, with its store and connection: saves a model this process measured
 * and the compile notes not saved yet. The final call (at exit) first waits for a measurement
 * in flight (~5-20 ms; a compile's, ~40, while neither of its figures is measured; at most 250
 * on a loaded machine), so a short first run on a CPU still stores its model, and a short
 * later run the measurement that settles it. Returns 0 or the store's code (what was not saved
 * stays for the next call on a transient error; damage, ST_ECORRUPT, is the caller's to say). */
int ag_machine_save(const st_api_t *store, st_db_t *db, int final);

#endif
