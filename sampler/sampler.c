/* SPDX-License-Identifier: MIT */
/* The sampler: per-thread events, the recording signal handler, the rings, and draining.
 *
 * Slots: one per sampled thread, in a fixed array that is never freed, so the handler can
 * always touch the slot (and its ring) it finds. A slot's state moves
 *     FREE ──claim──▶ SETUP ──armed──▶ ARMED ──release──▶ FREE
 * under sp_mu (never taken by the handler). The handler writes only into an ARMED slot's ring,
 * and only the slot's own thread runs it (the signal is directed at that thread), so each ring
 * has one producer; sp_drain is the one consumer. Rings stay allocated when a slot is freed:
 * a late signal can never write into freed memory. The handler stays installed for the life of
 * the process: a real-time signal's default action would kill it. */
#define _GNU_SOURCE
#include "ladder.h"
#include "sampler.h"
#include "sys.h"
#include "unwind.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#include <x86intrin.h>

#define SP_RING 256 /* samples per thread between drains (~1.3 s at 199 Hz) */

enum { SLOT_FREE = 0, SLOT_SETUP, SLOT_ARMED };

typedef struct sp_ring_s {
  _Atomic uint32_t head; /* written by the handler (producer) */
  _Atomic uint32_t tail; /* written by sp_drain (consumer) */
  sp_sample_t buf[SP_RING];
} sp_ring_t;

typedef struct sp_slot_s {
  _Atomic int state;
  _Atomic pid_t tid;            /* (atomic: every thread's handler reads every slot's tid and */
  _Atomic int fd;               /* fd, while sp_mu's holder changes them) perf event, or -1 */
  int member_fds[SP_MAX_COUNTERS];
  timer_t timer;
  int has_timer;
  uint64_t last[SP_MAX_COUNTERS]; /* counter values at the previous sample (handler only) */
  int strikes;                  /* rescans in a row that found the signal blocked and pending */
  uint32_t taken;               /* samples the handler took since the slot was armed */
  uint32_t weight;              /* threads each sample stands for (short-lived regime) */
  _Atomic uint64_t stack_lo, stack_hi; /* the main thread's stack, for uw_walk (hi 0: not
                                   known yet; other threads' are in their TLS, or unknown) */
  _Atomic uint64_t last_sp;     /* a stack pointer of the main thread's the handler saw below
                                   those bounds: the next drain reads [stack] again */
  sp_ring_t *ring;
} sp_slot_t;

static sp_slot_t slots[SP_MAX_THREADS];
static _Atomic int hiwater; /* slots [0, hiwater) have been used */
static pthread_mutex_t sp_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int active;
static sp_config_t cfg;
static sp_status_t status;
static _Atomic uint64_t lost, drained;
static _Atomic uint64_t walked, unwound; /* drained samples whose stack uw_walk, libunwind took */
static _Atomic uint64_t stitched;        /* ... of the walked, resumed from an entry frame */
static _Atomic int stacks_wanted; /* a handler saw the main thread off its known stack */
static pid_t pid;                 /* this process's (sp_start; the handler compares, never asks) */
static _Atomic int expected;      /* sp_expect: threads record their stack's top */
/* This thread's stack, when the thread began through sp_thread_begin (pthread_getattr_np's:
 * mapped throughout). Initial-exec: the handler reads it. */
static __thread __attribute__((tls_model("initial-exec"))) uint64_t tl_stack_lo, tl_stack_hi;
/* This thread's id and the slot its last sample found (the handler's; a fork child's thread
 * forgets them): no gettid system call and no scan of the slots per sample. */
static __thread __attribute__((tls_model("initial-exec"))) pid_t tl_tid;
static __thread __attribute__((tls_model("initial-exec"))) sp_slot_t *tl_slot;
/* The cost of a sample and the budget (sp_adapt). The handler reads stride alone. */
static _Atomic uint32_t stride = 1;          /* periods per sample */
static _Atomic int lockstep = 1;             /* sp_lockstep */
static _Atomic int calibrating;              /* sp_start times the delivery: the handler returns */
static uint32_t delivery_cycles;             /* measured at sp_start (sp_mu) */
static double handler_ns, consumer;          /* measured by sp_adapt (sp_mu) */
static uint64_t tsc0, ns0;                   /* a TSC reading and the time at sp_start */
#define SP_COSTS 512
static uint32_t costs[SP_COSTS];             /* handler cycles of the samples drained since the
                                                last sp_adapt (sp_drain's: one consumer) */
static size_t ncosts;
static unsigned adapts; /* sp_adapt calls that had samples, since sp_start */
#define SP_ADAPT_MIN 8     /* samples a cost needs to be measured from */
#define SP_WARMUP_ADAPTS 2 /* the first ones measure the walker filling its caches, the rings'
                              first pages: their cost is left out */
__thread __attribute__((tls_model("initial-exec"))) uintptr_t sp_tl_entry_frame;

/* The bounds of slot t's thread's stack (the calling thread's), into *lo and *hi: 1 when
 * known and sp is on it (not on an alternate signal stack, a coroutine's, ...). The slot's
 * pair is read between two reads of hi, which find_stacks clears while it changes them. */
static int stack_of(sp_slot_t *t, uint64_t sp, uint64_t *lo, uint64_t *hi)
{
  if (tl_stack_hi) {
    *lo = tl_stack_lo, *hi = tl_stack_hi;
  } else {
    uint64_t h = atomic_load_explicit(&t->stack_hi, memory_order_acquire);
    *lo = atomic_load_explicit(&t->stack_lo, memory_order_acquire);
    *hi = atomic_load_explicit(&t->stack_hi, memory_order_acquire);
    if (!h || h != *hi)
      return 0;
  }
  return sp >= *lo && sp < *hi;
}
static _Atomic uint64_t unsampled; /* threads left unsampled: table or descriptor budget full,
                                      or the thread blocks the signal */
static int max_armed;              /* threads armed at once: a quarter of RLIMIT_NOFILE's fds */
static pid_t banned[256];          /* threads disarmed for keeping the signal blocked: never
                                      armed again while they live (sp_mu) */
static int nbanned;

static int is_banned(pid_t tid)
{
  for (int i = 0; i < nbanned; i++)
    if (banned[i] == tid)
      return 1;
  return 0;
}

/* Hosts that start a thread per task (ggml: one per graph, a few ms each) pay for arming each
 * (~20 us of system calls here, before the task starts) and for its samples, while every
 * other thread of the task waits at its barriers. Once the last SP_SHORT_RUN threads to end
 * lived under SP_SHORT_NS each, each new thread is armed with probability 1/SP_THREAD_EVERY
 * (a random draw: whatever role it has among a task's threads), its samples weighing that
 * many: the same expected counts, a quarter of the cost. A thread that lives longer ends the
 * regime, at its end or, skipped and still alive, at the rescan that finds it so (which arms
 * it and gives every armed thread its own weight again). */
#define SP_SHORT_NS 50000000ull
#define SP_SHORT_RUN 8
#define SP_THREAD_EVERY 4
static _Atomic int short_run;    /* threads in a row that ended short-lived */
static _Atomic uint64_t thinned; /* threads left unarmed by the regime */
static pid_t skipped[256];       /* those alive: the rescan leaves them unarmed too (sp_mu) */
static uint64_t skipped_at[256]; /* when each began */
static int nskipped;

static void unskip(pid_t tid) /* sp_mu held */
{
  for (int k = 0; k < nskipped;)
    if (skipped[k] == tid)
      skipped[k] = skipped[nskipped - 1], skipped_at[k] = skipped_at[nskipped - 1], nskipped--;
    else
      k++;
}

static int is_skipped(pid_t tid)
{
  for (int i = 0; i < nskipped; i++)
    if (skipped[i] == tid)
      return 1;
  return 0;
}
/* libunwind 1.x's x86-64 local-unwinding ABI (libunwind.so.8; its headers are not needed):
 * unw_backtrace, and the step-by-step walk from a signal's context. */
#define UNW_CURSOR_WORDS 127 /* UNW_TDEP_CURSOR_LEN */
#define UNW_INIT_SIGNAL_FRAME 1
#define UNW_REG_IP 16 /* UNW_X86_64_RIP */
/* unw_backtrace keeps its cache in thread-local storage of libunwind's (dlopen'ed: dynamic TLS).
 * A thread's first access to that allocates the thread's block with malloc, inside
 * __tls_get_addr: not async-signal-safe. So the handler takes unw_backtrace only on a thread
 * whose block sp_thread_begin allocated beforehand (tl_unw_tls; other threads take the
 * step-by-step walk, which touches no TLS: libunwind's caching policy is global). Under TSan
 * it never does: TSan finishes a thread before libunwind's thread-specific-data destructor of
 * that cache runs, which then locks a mutex through TSan's interceptors and crashes. */
#if defined(__SANITIZE_THREAD__)
#define SP_UNW_BACKTRACE 0
#else
#define SP_UNW_BACKTRACE 1
#endif
static _Atomic size_t unw_tls_mod; /* libunwind's TLS module id (0: none, or not loaded) */
static __thread __attribute__((tls_model("initial-exec"))) int tl_unw_tls;
static struct {
  int (*backtrace)(void **buf, int size);
  int (*init_local2)(void *cursor, void *uc, int flags);
  int (*step)(void *cursor);
  int (*get_reg)(void *cursor, int reg, uint64_t *value);
} unw;
static _Atomic int handler_installed; /* the signal, once installed (read by unloads on other threads) */

/* Hardware counter group: the sampling leader first, then the members. */
static const struct {
  const char *name;
  uint32_t type;
  uint64_t config;
} hw_events[] = {
    {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
    {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
    {"cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
    {"branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
    {"LLC-load-misses", PERF_TYPE_HW_CACHE,
     PERF_COUNT_HW_CACHE_LL | PERF_COUNT_HW_CACHE_OP_READ << 8 |
         PERF_COUNT_HW_CACHE_RESULT_MISS << 16},
};
_Static_assert(sizeof hw_events / sizeof *hw_events == SP_MAX_COUNTERS + 1,
               "the leader plus SP_MAX_COUNTERS members");
static int member_on[SP_MAX_COUNTERS]; /* which members opened on the probe thread */

int sp_parse_group(const void *buf, size_t len, uint64_t *values, int max)
{
  const uint64_t *w = buf;
  if (len < sizeof *w || w[0] > (uint64_t)max || len < (1 + w[0]) * sizeof *w)
    return -1;
  for (uint64_t i = 0; i < w[0]; i++)
    values[i] = w[1 + i];
  return (int)w[0];
}

/* ---- the signal handler ------------------------------------------------------------------ */

/* The slot whose event signalled this thread. The thread id is checked too: a signal queued
 * before a slot was re-armed for another thread must not write into that thread's ring. */
static sp_slot_t *slot_of(const siginfo_t *si)
{
  int n = atomic_load_explicit(&hiwater, memory_order_acquire);
  pid_t self = tl_tid ? tl_tid : (tl_tid = (pid_t)syscall(SYS_gettid));
  sp_slot_t *c = tl_slot;
  if (c && si->si_code != SI_TIMER &&
      atomic_load_explicit(&c->fd, memory_order_relaxed) == si->si_fd &&
      atomic_load_explicit(&c->tid, memory_order_relaxed) == self)
    return c;
  if (si->si_code == SI_TIMER) {
    int i = si->si_value.sival_int;
    return i >= 0 && i < n && atomic_load_explicit(&slots[i].tid, memory_order_relaxed) == self
               ? &slots[i]
               : NULL;
  }
  for (int i = 0; i < n; i++)
    if (atomic_load_explicit(&slots[i].fd, memory_order_relaxed) == si->si_fd &&
        atomic_load_explicit(&slots[i].tid, memory_order_relaxed) == self)
      return tl_slot = &slots[i];
  return NULL;
}

/* Stacks come from uw_walk once the thread's stack bounds are known (unwind.h). Where they
 * are not, or the walker cannot go on, libunwind takes them: a thread's first samples from its
 * step-by-step walk (~0.5 us a frame here), later ones from its unw_backtrace: ~5 ns a frame, but its first use in a thread
 * maps and fills a 256 KB cache, which the thread unmaps at exit, ~140 us in all. A host that
 * computes every task on fresh threads (ggml: one per graph, a few ms each) would pay that per
 * task; a thread sampled this often has run long enough (~80 ms of CPU at 199 Hz) to repay
 * it. (glibc's backtrace() is no option: libgcc's unwinder takes a mutex once frames are
 * registered, as LLVM's JIT does, and a thread interrupted inside it, throwing say, would
 * deadlock in its own handler.) */
#define SP_YOUNG_SAMPLES 16

/* A walk that stopped short at *at (n frames in s) inside the thread's own operator goes on
 * from the operator's entry frame (sampler.h), when that lies further out than where the walk
 * stopped and inside the stack [.., hi): a frame-pointer frame, RBP saved at it and the return
 * address above. Returns the frames in s then, with SP_F_STITCHED; else n. */
static int stitch(sp_sample_t *s, int n, const uw_regs_t *at, uint64_t hi)
{
  if (!s->op || (s->flags & SP_F_POOL) || n >= cfg.stack_depth)
    return n;
  atomic_signal_fence(memory_order_acquire); /* the agent stores the frame, then the op */
  uint64_t f = sp_tl_entry_frame;
  if (!f || (f & 7) || f < at->sp || hi < 16 || f > hi - 16)
    return n;
  const uint64_t *fp = (const uint64_t *)(uintptr_t)f;
  int stop;
  n += uw_walk((uw_regs_t){fp[1], f + 16, fp[0]}, f + 16, hi, s->frames + n,
               cfg.stack_depth - n, &stop);
  s->flags |= SP_F_STITCHED;
  return n;
}

/* The stack: the frames from the interrupted PC outwards (unw_backtrace's first ones are the
 * handler's own and the signal trampoline's: skipped). */
static int record_stack(sp_sample_t *s, sp_slot_t *t, void *uc)
{
  void *raw[SP_MAX_FRAMES + 8];
  const greg_t *g = ((ucontext_t *)uc)->uc_mcontext.gregs;
  s->frames[0] = s->pc;
  if (cfg.stack_depth <= 1)
    return 1;
  uint64_t sp = (uint64_t)g[REG_RSP], lo, hi;
  if (stack_of(t, sp, &lo, &hi)) { /* loads from sp up: all of it is the thread's stack */
    uw_regs_t at;
    int stop, n = uw_walk_at((uw_regs_t){s->pc, sp, (uint64_t)g[REG_RBP], (uint64_t)g[REG_R10],
                                          (uint64_t)g[REG_R13]},
                             sp, hi, s->frames, cfg.stack_depth, &stop, &at);
    if (stop == UW_OFF) /* an object is being unloaded: the PC alone */
      return 1;
    if (stop != UW_END && stop != UW_MAX) { /* short: inside an operator, stitched */
      int k = stitch(s, n, &at, hi);
      if (k > n) {
        s->flags |= SP_F_WALKED;
        return k;
      }
    }
    /* libunwind takes over only where the walker stopped short of what it can do itself
     * (signal frames, register-held return addresses) or found no rule at the very PC. */
    if (stop != UW_UNSUPPORTED && (n > 1 || stop == UW_END)) {
      s->flags |= SP_F_WALKED;
      return n;
    }
  } else if (!tl_stack_hi && t->tid == pid &&
             !atomic_load_explicit(&t->last_sp, memory_order_relaxed)) { /* its stack grew */
    atomic_store_explicit(&t->last_sp, sp, memory_order_relaxed);
    atomic_store_explicit(&stacks_wanted, 1, memory_order_release);
  }
  if (!unw.backtrace)
    return 1;
  s->flags |= SP_F_UNWOUND;
  if (t->taken <= SP_YOUNG_SAMPLES || !SP_UNW_BACKTRACE || !tl_unw_tls) {
    uint64_t cursor[UNW_CURSOR_WORDS]; /* unw_cursor_t */
    int k = 1;
    if (unw.init_local2(cursor, uc, UNW_INIT_SIGNAL_FRAME) == 0)
      for (uint64_t ip; k < cfg.stack_depth && unw.step(cursor) > 0 &&
                        unw.get_reg(cursor, UNW_REG_IP, &ip) == 0 && ip;)
        s->frames[k++] = ip;
    return k;
  }
  int n = unw.backtrace(raw, cfg.stack_depth + 8), at = -1;
  for (int i = 0; i < n && at < 0; i++)
    if ((uint64_t)raw[i] == s->pc)
      at = i;
  if (at < 0)
    return 1;
  int k = 1;
  for (int i = at + 1; i < n && k < cfg.stack_depth; i++)
    s->frames[k++] = (uint64_t)raw[i];
  return k;
}

static void handler(int signo, siginfo_t *si, void *ucv)
{
  (void)signo;
  uint64_t c0 = __rdtsc();
  if (si->si_code == SI_TKILL && atomic_load_explicit(&calibrating, memory_order_relaxed))
    return; /* sp_start timing the delivery */
  int saved = errno;
  sp_slot_t *t = atomic_load_explicit(&active, memory_order_relaxed) ? slot_of(si) : NULL;
  if (!t || atomic_load_explicit(&t->state, memory_order_acquire) != SLOT_ARMED)
    goto out;
  sp_ring_t *r = t->ring;
  uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  if (h - atomic_load_explicit(&r->tail, memory_order_acquire) >= SP_RING) {
    atomic_fetch_add_explicit(&lost, 1, memory_order_relaxed);
    goto out;
  }
  sp_sample_t *s = &r->buf[h % SP_RING];
  s->pc = (uint64_t)((ucontext_t *)ucv)->uc_mcontext.gregs[REG_RIP];
  s->weight = t->weight * atomic_load_explicit(&stride, memory_order_relaxed) *
              (1u + (si->si_code == SI_TIMER && si->si_overrun > 0 ? (uint32_t)si->si_overrun : 0u));
  s->op = cfg.attrib.own ? cfg.attrib.own() : 0;
  s->flags = 0;
  if (!s->op && cfg.attrib.inflight && (s->op = cfg.attrib.inflight()))
    s->flags = SP_F_POOL;
  t->taken++;
  s->nframes = (uint16_t)record_stack(s, t, ucv);
  memset(s->counters, 0, sizeof s->counters);
  if (status.mode == SP_PERF_HW) {
    uint64_t buf[2 + SP_MAX_COUNTERS + 1], v[SP_MAX_COUNTERS + 1];
    ssize_t n = sp_sys.read(t->fd, buf, sizeof buf);
    int m = n > 0 ? sp_parse_group(buf, (size_t)n, v, SP_MAX_COUNTERS + 1) : -1;
    for (int i = 1; i < m && i <= SP_MAX_COUNTERS; i++) { /* v[0] is the leader (cycles) */
      s->counters[i - 1] = v[i] - t->last[i - 1];
      t->last[i - 1] = v[i];
    }
  }
  uint64_t dc = __rdtsc() - c0;
  s->cycles = dc > UINT32_MAX ? UINT32_MAX : (uint32_t)dc;
  atomic_store_explicit(&r->head, h + 1, memory_order_release);
out:
  errno = saved;
}

/* ---- events ------------------------------------------------------------------------------ */

/* One line on why an event could not be opened, with the usual causes spelt out. */
static void explain(const char *what, int err)
{
  const char *why = err == ENOENT || err == EOPNOTSUPP ? "not supported by this CPU or VM"
                    : err == EACCES || err == EPERM
                        ? "not permitted (kernel.perf_event_paranoid, or a seccomp filter)"
                    : err == EMFILE || err == ENFILE ? "out of file descriptors"
                    : err == ENOSYS ? "perf_event_open is not available (seccomp or kernel)"
                                    : strerror(err);
  size_t used = strlen(status.notes);
  snprintf(status.notes + used, sizeof status.notes - used, "%s%s: %s (%s)", used ? "\n" : "",
           what, why, strerrorname_np(err) ? strerrorname_np(err) : "?");
}

/* The sampling period in nanoseconds of CPU time (clocks, timers) and the frequency (hardware
 * cycles) at the stride in effect. */
static uint64_t period_ns(void)
{
  return 1000000000ull / (uint64_t)cfg.hz * atomic_load(&stride);
}
static uint64_t freq_hz(void)
{
  uint64_t f = (uint64_t)cfg.hz / atomic_load(&stride);
  return f ? f : 1;
}

static int open_event(uint32_t type, uint64_t config, pid_t tid, int group, int sampling)
{
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.type = type;
  a.config = config;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  a.disabled = group < 0 && type != PERF_TYPE_SOFTWARE; /* a group starts when complete; a
                                                           clock counts from its opening */
  if (sampling) {
    if (type == PERF_TYPE_SOFTWARE) {
      a.sample_period = period_ns(); /* the clocks count nanoseconds */
    } else {
      a.freq = 1;
      a.sample_freq = freq_hz();
    }
    a.wakeup_events = 1;
    a.read_format = status.mode == SP_PERF_HW ? PERF_FORMAT_GROUP : 0;
  }
  return sp_sys.perf_event_open(&a, tid, -1, group, PERF_FLAG_FD_CLOEXEC);
}

/* Directs the event's overflow signal at thread tid and starts it (a counter group; a clock
 * counts already: an overflow before its signal is routed is one lost sample at most). */
static int route_and_enable(int fd, pid_t tid)
{
  struct f_owner_ex owner = {F_OWNER_TID, tid};
  if (sp_sys.fcntl(fd, F_SETFL, O_ASYNC | O_NONBLOCK) || sp_sys.fcntl(fd, F_SETSIG, status.signo) ||
      sp_sys.fcntl(fd, F_SETOWN_EX, (long)&owner) ||
      (status.mode == SP_PERF_HW && sp_sys.ioctl(fd, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP)))
    return -1;
  return 0;
}

/* The thread CPU-time clock of another thread (glibc's encoding of a per-thread CPU clock). */
static clockid_t thread_cpu_clock(pid_t tid) { return (clockid_t)((~(unsigned)tid << 3) | 6); }

/* Sets slot t's timer to the period in effect. */
static int set_timer(sp_slot_t *t)
{
  long ns = (long)period_ns();
  struct itimerspec its = {{ns / 1000000000L, ns % 1000000000L}, {ns / 1000000000L, ns % 1000000000L}};
  return sp_sys.timer_settime(t->timer, 0, &its, NULL);
}

/* Starts slot i's event for its thread. Called with sp_mu held. */
static int arm_slot(int i)
{
  sp_slot_t *t = &slots[i];
  t->fd = -1;
  t->has_timer = 0;
  memset(t->last, 0, sizeof t->last);
  for (int k = 0; k < SP_MAX_COUNTERS; k++)
    t->member_fds[k] = -1;
  if (status.mode == SP_PERF_HW || status.mode == SP_PERF_SW) {
    const int sw_config = strcmp(status.event, "cpu-clock") == 0 ? PERF_COUNT_SW_CPU_CLOCK
                                                                  : PERF_COUNT_SW_TASK_CLOCK;
    t->fd = status.mode == SP_PERF_HW
                ? open_event(hw_events[0].type, hw_events[0].config, t->tid, -1, 1)
                : open_event(PERF_TYPE_SOFTWARE, (uint64_t)sw_config, t->tid, -1, 1);
    if (t->fd < 0)
      return -1;
    for (int k = 0; status.mode == SP_PERF_HW && k < SP_MAX_COUNTERS; k++)
      if (member_on[k])
        t->member_fds[k] = open_event(hw_events[k + 1].type, hw_events[k + 1].config, t->tid, t->fd, 0);
    return route_and_enable(t->fd, t->tid);
  }
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = status.signo;
  ev.sigev_value.sival_int = i;
  ev._sigev_un._tid = t->tid;
  if (sp_sys.timer_create(thread_cpu_clock(t->tid), &ev, &t->timer))
    return -1;
  t->has_timer = 1;
  return set_timer(t);
}

/* Gives every armed thread's event the period in effect (the stride moved). sp_mu held. */
static void set_periods(void)
{
  int n = atomic_load(&hiwater);
  for (int i = 0; i < n; i++) {
    sp_slot_t *t = &slots[i];
    if (atomic_load(&t->state) != SLOT_ARMED)
      continue;
    if (t->has_timer) {
      set_timer(t);
    } else if (t->fd >= 0) {
      uint64_t p = status.mode == SP_PERF_HW ? freq_hz() : period_ns();
      sp_sys.ioctl(t->fd, PERF_EVENT_IOC_PERIOD, (unsigned long)&p);
    }
  }
}

/* Stops slot i's event. Called with sp_mu held. */
static void disarm_slot(int i)
{
  sp_slot_t *t = &slots[i];
  atomic_store_explicit(&t->state, SLOT_SETUP, memory_order_release);
  for (int k = 0; k < SP_MAX_COUNTERS; k++)
    if (t->member_fds[k] >= 0)
      sp_sys.close(t->member_fds[k]), t->member_fds[k] = -1;
  if (t->fd >= 0)
    sp_sys.close(t->fd);
  if (t->has_timer)
    sp_sys.timer_delete(t->timer);
  t->fd = -1;
  t->has_timer = 0;
  atomic_store_explicit(&t->state, SLOT_FREE, memory_order_release);
}

/* The slot sampling tid, or -1. Called with sp_mu held. */
static int find_tid(pid_t tid)
{
  int n = atomic_load(&hiwater);
  for (int i = 0; i < n; i++)
    if (atomic_load(&slots[i].state) == SLOT_ARMED && slots[i].tid == tid)
      return i;
  return -1;
}

/* 1 when thread tid blocks the sampler's signal and has one pending. A thread that keeps the
 * signal blocked would queue every sample as a pending real-time signal until the user's queue
 * overflows, and then the kernel sends SIGIO, which kills the process. Blocking for a moment is
 * normal (glibc blocks every signal while it creates a thread), so sp_rescan disarms a thread
 * only when two rescans in a row find it so. */
static int blocked_and_pending(pid_t tid)
{
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
  FILE *f = fopen(path, "re");
  int blk = 0, pnd = 0;
  while (f && fgets(line, sizeof line, f)) {
    int is_blk = !strncmp(line, "SigBlk:", 7), is_pnd = !strncmp(line, "SigPnd:", 7);
    if (is_blk || is_pnd) {
      int bit = (int)((strtoull(line + 7, NULL, 16) >> (status.signo - 1)) & 1);
      blk |= is_blk && bit, pnd |= is_pnd && bit;
    }
  }
  if (f)
    fclose(f);
  return blk && pnd;
}

/* Arms thread tid unless it is armed already. Called with sp_mu held. Returns 0, or -1 when
 * its event could not be made (errno kept). */
static int arm_tid(pid_t tid, uint32_t weight)
{
  if (find_tid(tid) >= 0)
    return 0;
  int n = atomic_load(&hiwater), i;
  for (i = 0; i < n && atomic_load(&slots[i].state) != SLOT_FREE; i++)
    ;
  if (is_banned(tid) || is_skipped(tid))
    return 0;
  if (i == SP_MAX_THREADS || status.threads >= max_armed) {
    atomic_fetch_add(&unsampled, 1);
    return 0; /* counted; the thread runs unsampled */
  }
  sp_slot_t *t = &slots[i];
  if (!t->ring && !(t->ring = calloc(1, sizeof *t->ring)))
    return -1;
  atomic_store(&t->state, SLOT_SETUP);
  t->tid = tid;
  t->strikes = 0;
  t->taken = 0;
  t->weight = weight;
  atomic_store(&t->last_sp, 0);
  atomic_store(&t->stack_hi, 0);
  atomic_store(&t->stack_lo, 0);
  if (i == n)
    atomic_store_explicit(&hiwater, n + 1, memory_order_release);
  if (arm_slot(i)) {
    int e = errno;
    disarm_slot(i);
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/self/task/%d", (int)tid);
    if (e == ESRCH || stat(path, &st) != 0)
      return 0; /* the thread exited meanwhile: nothing to sample */
    errno = e;
    return -1;
  }
  atomic_store_explicit(&t->state, SLOT_ARMED, memory_order_release);
  status.threads++;
  return 0;
}

/* ---- choosing the mechanism -------------------------------------------------------------- */

/* The first real-time signal nobody handles (SIGPROF and the host's own signals stay theirs). */
static int pick_signal(void)
{
  for (int sig = SIGRTMIN + 4; sig < SIGRTMAX - 2; sig++) {
    struct sigaction old;
    if (sigaction(sig, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
        old.sa_handler == SIG_DFL)
      return sig;
  }
  return -1;
}

/* Probes the perf mechanisms of the ladder from step *at down on the calling thread (a timer
 * is tried when threads are armed); sets status.mode/event and leaves *at on the mode chosen.
 * Every refused step is noted; one the user asked for (or, under auto, anything but the PMU a
 * machine may simply lack) makes the choice a fallback. */
static void choose_mode(pid_t self, const int ladder[4], int *at)
{
  const char *want = cfg.events ? cfg.events : "auto";
  for (;; ++*at) {
    status.mode = ladder[*at];
    status.event = sp_mode_event(status.mode, want);
    status.ncounters = 0;
    if (status.mode == SP_PERF_HW) {
      int fd = open_event(hw_events[0].type, hw_events[0].config, self, -1, 1);
      if (fd >= 0) {
        for (int k = 0; k < SP_MAX_COUNTERS; k++) {
          int m = open_event(hw_events[k + 1].type, hw_events[k + 1].config, self, fd, 0);
          if ((member_on[k] = m >= 0)) {
            status.counter_names[status.ncounters++] = hw_events[k + 1].name;
            sp_sys.close(m);
          } else {
            explain(hw_events[k + 1].name, errno);
          }
        }
        sp_sys.close(fd);
        return;
      }
    } else if (status.mode == SP_PERF_SW) {
      uint64_t sw = status.event[0] == 'c' ? PERF_COUNT_SW_CPU_CLOCK : PERF_COUNT_SW_TASK_CLOCK;
      int fd = open_event(PERF_TYPE_SOFTWARE, sw, self, -1, 1);
      if (fd >= 0) {
        sp_sys.close(fd);
        return;
      }
    } else {
      return; /* a timer (tried on every thread when arming), or off */
    }
    int err = errno;
    explain(status.event, err);
    /* Under auto, cycles refused for want of a PMU (ENOENT, EOPNOTSUPP, ...) is the machine's;
     * refused by permission (perf_event_paranoid, seccomp) it is a step down to warn of. */
    if (strcmp(want, "auto") != 0 || status.mode != SP_PERF_HW || err == EACCES || err == EPERM)
      status.fallback = 1;
  }
}

/* Gives the main thread its stack's bounds: [stack], the one mapping no one unmaps, which
 * grows (the handler asks again when it sees the stack pointer below it). Other threads have
 * theirs from sp_thread_begin, or none: a mapping that held a thread's stack pointer once may
 * be an alternate signal stack or a coroutine's, unmapped later, so their stacks stay
 * libunwind's. A slot's hi is cleared while its pair changes (stack_of). sp_mu held. */
static void find_stacks(void)
{
  int n = atomic_load(&hiwater), want = 0;
  for (int i = 0; i < n; i++)
    want += atomic_load(&slots[i].state) == SLOT_ARMED && slots[i].tid == pid &&
            (atomic_load(&slots[i].last_sp) || !atomic_load(&slots[i].stack_hi));
  FILE *f = want ? fopen("/proc/self/maps", "re") : NULL;
  char line[512];
  unsigned long long lo, hi;
  for (int whole = 1; f && fgets(line, sizeof line, f);) {
    int start = whole; /* a line longer than the buffer: its rest is no line of its own */
    whole = strchr(line, '\n') != NULL;
    if (!start || sscanf(line, "%llx-%llx", &lo, &hi) != 2)
      continue;
    int main_stack = strstr(line, "[stack]") != NULL;
    for (int i = 0; i < n; i++) {
      sp_slot_t *t = &slots[i];
      uint64_t sp = atomic_load(&t->last_sp);
      if (atomic_load(&t->state) != SLOT_ARMED || t->tid != pid || !main_stack ||
          (sp && !(sp >= lo && sp < hi)))
        continue;
      atomic_store_explicit(&t->stack_hi, 0, memory_order_release);
      atomic_store_explicit(&t->stack_lo, (uint64_t)lo, memory_order_release);
      atomic_store_explicit(&t->stack_hi, (uint64_t)hi, memory_order_release);
      atomic_store(&t->last_sp, 0);
    }
  }
  if (f)
    fclose(f);
}

static uint64_t now_ns(void);

static int cmp_u32(const void *a, const void *b)
{
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* TSC cycles per nanosecond, from sp_start's reading to now (0 while too early to tell). */
static double tsc_per_ns(void)
{
  uint64_t dt = now_ns() - ns0;
  return dt > 1000000 ? (double)(__rdtsc() - tsc0) / (double)dt : 0;
}

/* What a signal costs the thread it interrupts beyond the handler's own time, in TSC cycles:
 * the kernel's delivery, the signal frame and sigreturn. Timed on the calling thread (signals
 * to itself, unblocked meanwhile, which the handler returns from at once), median of 15. */
static uint32_t measure_delivery(void)
{
  sigset_t one, was;
  sigemptyset(&one);
  sigaddset(&one, status.signo);
  if (pthread_sigmask(SIG_UNBLOCK, &one, &was))
    return 0;
  uint32_t d[15];
  pid_t self = gettid();
  atomic_store(&calibrating, 1);
  for (int i = 0; i < 15; i++) {
    uint64_t a = __rdtsc();
    syscall(SYS_tgkill, pid, self, status.signo);
    uint64_t b = __rdtsc() - a;
    d[i] = b > UINT32_MAX ? UINT32_MAX : (uint32_t)b;
  }
  atomic_store(&calibrating, 0);
  pthread_sigmask(SIG_SETMASK, &was, NULL);
  qsort(d, 15, sizeof *d, cmp_u32);
  return d[7];
}

int sp_start(const sp_config_t *c)
{
  pthread_mutex_lock(&sp_mu);
  int rc = 0;
  cfg = *c;
  if (cfg.stack_depth > SP_MAX_FRAMES)
    cfg.stack_depth = SP_MAX_FRAMES;
  memset(&status, 0, sizeof status);
  status.event = "off";
  status.hz = cfg.hz;
  status.stack_depth = cfg.stack_depth;
  atomic_store(&stride, 1);
  ncosts = adapts = 0;
  handler_ns = consumer = 0;
  if (cfg.hz <= 0)
    goto out;
  if (!handler_installed) {
    if ((status.signo = pick_signal()) < 0) {
      explain("signal", EBUSY);
      rc = -1;
      goto out;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);
    sigaction(status.signo, &sa, NULL);
    handler_installed = status.signo;
  }
  status.signo = handler_installed;
  if (cfg.stack_depth > 1 && !unw.backtrace) {
    /* RTLD_LOCAL: linked, libunwind would take over the host's C++ exception unwinding. */
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    *(void **)&unw.init_local2 = h ? dlsym(h, "_ULx86_64_init_local2") : NULL;
    *(void **)&unw.step = h ? dlsym(h, "_ULx86_64_step") : NULL;
    *(void **)&unw.get_reg = h ? dlsym(h, "_ULx86_64_get_reg") : NULL;
    void *bt = h && unw.init_local2 && unw.step && unw.get_reg ? dlsym(h, "unw_backtrace") : NULL;
    if (bt) {
      /* Its shared caches fill here, not in the handler: a step-by-step walk of this stack
       * (unw_backtrace would give this thread a cache of its own it never uses). */
      ucontext_t here;
      uint64_t cursor[UNW_CURSOR_WORDS];
      if (getcontext(&here) == 0 && unw.init_local2(cursor, &here, 0) == 0)
        for (int k = 0; k < SP_MAX_FRAMES && unw.step(cursor) > 0; k++)
          ;
      size_t mod = 0;
      atomic_store(&unw_tls_mod, dlinfo(h, RTLD_DI_TLS_MODID, &mod) == 0 ? mod : 0);
      *(void **)&unw.backtrace = bt;
    } else {
      explain("stacks (libunwind.so.8)", ENOENT);
    }
  }
  struct rlimit rl;
  long fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 4096;
  pid_t self = gettid();
  pid = getpid();
  tsc0 = __rdtsc(), ns0 = now_ns();
  delivery_cycles = measure_delivery();
  uw_refresh();
  int ladder[4], at = 0;
  sp_ladder(cfg.events ? cfg.events : "auto", cfg.hz, sp_tick_hz(), ladder);
  choose_mode(self, ladder, &at);
  max_armed = (int)(fds / 4 / (status.mode == SP_PERF_HW ? 1 + status.ncounters : 1));
  atomic_store(&active, 1);
  /* Arm every thread; the mechanism that fails on one is dropped for all, one step down. */
  for (;;) {
    int failed = 0, err = 0;
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *e; d && (e = readdir(d));) {
      pid_t tid = (pid_t)atoi(e->d_name);
      if (tid > 0 && tid != self && arm_tid(tid, 1) && !failed)
        failed = 1, err = errno;
    }
    if (d)
      closedir(d);
    if (!failed) {
      find_stacks();
      break;
    }
    for (int i = 0; i < atomic_load(&hiwater); i++)
      if (atomic_load(&slots[i].state) == SLOT_ARMED)
        disarm_slot(i);
    status.threads = 0;
    explain(status.event, err);
    status.fallback = 1;
    at++;
    choose_mode(self, ladder, &at);
    if (status.mode == SP_OFF) {
      atomic_store(&active, 0);
      rc = -1;
      break;
    }
    max_armed = (int)(fds / 4 / (status.mode == SP_PERF_HW ? 1 + status.ncounters : 1));
  }
out:
  pthread_mutex_unlock(&sp_mu);
  return rc;
}

void sp_expect(void) { atomic_store(&expected, 1); }

int sp_expected(void) { return atomic_load_explicit(&expected, memory_order_relaxed); }

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Allocates this thread's block of libunwind's TLS (see SP_UNW_BACKTRACE), outside any
 * handler: glibc's __tls_get_addr for the module's first variable. */
extern void *__tls_get_addr(void *ti);
static void unw_tls_touch(void)
{
  struct {
    unsigned long module, offset;
  } ti = {atomic_load_explicit(&unw_tls_mod, memory_order_relaxed), 0};
  if (SP_UNW_BACKTRACE && ti.module && !tl_unw_tls)
    tl_unw_tls = __tls_get_addr(&ti) != NULL;
}

uint64_t sp_thread_begin(void)
{
  pthread_attr_t a;
  void *base = NULL;
  size_t size = 0;
  pid_t self = gettid(), main_tid = getpid();
  unw_tls_touch();
  /* ~0.4 us (for the main thread it reads /proc: that one's stack comes from find_stacks) */
  if (self != main_tid && pthread_getattr_np(pthread_self(), &a) == 0) {
    if (pthread_attr_getstack(&a, &base, &size) == 0 && base)
      tl_stack_lo = (uint64_t)(uintptr_t)base, tl_stack_hi = tl_stack_lo + size;
    pthread_attr_destroy(&a);
  }
  uint64_t start = now_ns();
  if (!atomic_load(&active))
    return start;
  uint32_t weight = 1;
  pthread_mutex_lock(&sp_mu);
  unskip(self); /* a tid reused before the rescan cleared an exited thread's entry */
  int at = find_tid(self); /* a rescan may have armed it already */
  if (atomic_load(&short_run) >= SP_SHORT_RUN && nskipped < (int)(sizeof skipped / sizeof *skipped)) {
    uint64_t r = start ^ (uint64_t)self * 0x9E3779B97F4A7C15ull; /* a draw per thread */
    r ^= r >> 29, r *= 0xBF58476D1CE4E5B9ull, r ^= r >> 32;
    if (r % SP_THREAD_EVERY) {
      if (at >= 0)
        disarm_slot(at), status.threads--;
      skipped_at[nskipped] = start, skipped[nskipped++] = self;
      atomic_fetch_add(&thinned, 1);
      pthread_mutex_unlock(&sp_mu);
      return start;
    }
    weight = SP_THREAD_EVERY;
  }
  if (at >= 0)
    slots[at].weight = weight;
  else if (atomic_load(&active) && arm_tid(self, weight) == 0 && self == main_tid)
    find_stacks(); /* [stack] */
  pthread_mutex_unlock(&sp_mu);
  return start;
}

void sp_thread_end(uint64_t start)
{
  if (now_ns() - start < SP_SHORT_NS) {
    if (atomic_load(&short_run) < SP_SHORT_RUN)
      atomic_fetch_add(&short_run, 1);
  } else {
    atomic_store(&short_run, 0);
  }
  pid_t self = gettid();
  pthread_mutex_lock(&sp_mu);
  int i = find_tid(self);
  if (i >= 0) {
    disarm_slot(i);
    status.threads--;
  }
  unskip(self);
  pthread_mutex_unlock(&sp_mu);
}

void sp_discard_pending(void)
{
  if (!handler_installed)
    return;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, handler_installed);
  struct timespec zero = {0, 0};
  while (sigtimedwait(&set, NULL, &zero) > 0)
    ;
}

void sp_rescan(void)
{
  if (!atomic_load(&active))
    return;
  uw_refresh();
  pthread_mutex_lock(&sp_mu);
  int n = atomic_load(&hiwater);
  char path[64];
  struct stat st;
  for (int i = 0; i < n; i++) { /* release the events of threads that exited */
    if (atomic_load(&slots[i].state) != SLOT_ARMED)
      continue;
    snprintf(path, sizeof path, "/proc/self/task/%d", (int)slots[i].tid);
    int gone = stat(path, &st) != 0;
    slots[i].strikes = !gone && blocked_and_pending(slots[i].tid) ? slots[i].strikes + 1 : 0;
    if (gone || slots[i].strikes >= 2) {
      if (!gone && nbanned < (int)(sizeof banned / sizeof *banned)) {
        banned[nbanned++] = slots[i].tid;
        atomic_fetch_add(&unsampled, 1);
      }
      disarm_slot(i);
      status.threads--;
    }
  }
  for (int b = 0; b < nbanned;) { /* a banned thread that exited frees its place */
    snprintf(path, sizeof path, "/proc/self/task/%d", (int)banned[b]);
    if (stat(path, &st) != 0)
      banned[b] = banned[--nbanned];
    else
      b++;
  }
  uint64_t now = now_ns();
  for (int b = 0; b < nskipped;) { /* so does a skipped one that left by pthread_exit */
    snprintf(path, sizeof path, "/proc/self/task/%d", (int)skipped[b]);
    int alive = stat(path, &st) == 0;
    if (alive && now - skipped_at[b] < SP_SHORT_NS) {
      b++;
      continue;
    }
    if (alive) { /* a long-lived thread was skipped: the regime was wrong */
      atomic_store(&short_run, 0);
      for (int i = 0; i < n; i++)
        slots[i].weight = 1;
    }
    pid_t gone = skipped[b];
    unskip(gone); /* still alive: armed below, with the rest */
  }
  DIR *d = opendir("/proc/self/task");
  pid_t self = gettid();
  for (struct dirent *e; d && (e = readdir(d));) {
    pid_t tid = (pid_t)atoi(e->d_name);
    if (tid > 0 && tid != self)
      arm_tid(tid, 1);
  }
  if (d)
    closedir(d);
  pthread_mutex_unlock(&sp_mu);
}

int sp_unload_begin(void)
{
  if (!handler_installed) /* no walk has ever run */
    return 0;
  uw_unload_begin();
  return 1;
}

void sp_unload_end(int began)
{
  if (began)
    uw_unload_end();
}

size_t sp_drain(sp_sample_t *out, size_t max)
{
  if (atomic_exchange(&stacks_wanted, 0)) {
    pthread_mutex_lock(&sp_mu);
    find_stacks();
    pthread_mutex_unlock(&sp_mu);
  }
  size_t got = 0;
  uint64_t weight = 0, by_walk = 0, by_unw = 0, by_stitch = 0; /* counted here, not in the
                                                   handler: no shared line written per sample */
  int n = atomic_load_explicit(&hiwater, memory_order_acquire);
  for (int i = 0; i < n && got < max; i++) {
    sp_ring_t *r = slots[i].ring;
    if (!r)
      continue;
    uint32_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint32_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    for (; tail != head && got < max; tail++) {
      out[got] = r->buf[tail % SP_RING];
      by_walk += (out[got].flags & SP_F_WALKED) != 0, by_unw += (out[got].flags & SP_F_UNWOUND) != 0;
      by_stitch += (out[got].flags & SP_F_STITCHED) != 0;
      if (ncosts < SP_COSTS)
        costs[ncosts++] = out[got].cycles;
      weight += out[got++].weight;
    }
    atomic_store_explicit(&r->tail, tail, memory_order_release);
  }
  atomic_fetch_add(&drained, weight);
  atomic_fetch_add(&walked, by_walk);
  atomic_fetch_add(&unwound, by_unw);
  atomic_fetch_add(&stitched, by_stitch);
  return got;
}

void sp_lockstep(int n)
{
  n = n < 1 ? 1 : n;
  if (atomic_load_explicit(&lockstep, memory_order_relaxed) != n)
    atomic_store_explicit(&lockstep, n, memory_order_relaxed);
}

/* The least stride, 1..SP_MAX_STRIDE, at which share / stride <= budget. */
static uint32_t stride_within(double share, double budget)
{
  for (uint32_t k = 1; k < SP_MAX_STRIDE; k++)
    if (share <= budget * k)
      return k;
  return SP_MAX_STRIDE;
}

uint32_t sp_stride_for(double hz, double sample_ns, int lockstep_n, double budget, uint32_t current)
{
  if (budget <= 0 || hz <= 0 || sample_ns <= 0)
    return 1;
  double share = hz * sample_ns * 1e-9 * (lockstep_n > 1 ? lockstep_n : 1); /* at stride 1 */
  uint32_t k = stride_within(share, budget);
  if (k >= current)
    return k;
  uint32_t low = stride_within(share, 0.75 * budget);
  return low < current ? low : current;
}

void sp_adapt(double consumer_ns)
{
  double per_ns = tsc_per_ns();
  if (ncosts < SP_ADAPT_MIN || per_ns <= 0 || !atomic_load(&active))
    return;
  if (++adapts <= SP_WARMUP_ADAPTS) { /* the walker's caches filling: not the steady cost */
    ncosts = 0;
    return;
  }
  qsort(costs, ncosts, sizeof *costs, cmp_u32);
  double h = costs[ncosts / 2] / per_ns; /* the median: a handler preempted midway is the
                                             machine's load, not the sample's cost */
  ncosts = 0;
  pthread_mutex_lock(&sp_mu);
  /* Averaged over ticks (a quarter each): a tick that named many new PCs, or whose samples
   * landed in cold code, moves the stride less than a lasting change. */
  double w = handler_ns > 0 ? 0.25 : 1;
  handler_ns += w * (h - handler_ns);
  consumer += w * ((consumer_ns > 0 ? consumer_ns : 0) - consumer);
  uint32_t was = atomic_load(&stride);
  uint32_t k = sp_stride_for(cfg.hz, delivery_cycles / per_ns + handler_ns, atomic_load(&lockstep),
                             cfg.budget, was);
  if (k != was) {
    atomic_store(&stride, k);
    set_periods();
  }
  pthread_mutex_unlock(&sp_mu);
}

void sp_stop(void)
{
  pthread_mutex_lock(&sp_mu);
  atomic_store(&active, 0);
  int n = atomic_load(&hiwater);
  for (int i = 0; i < n; i++)
    if (atomic_load(&slots[i].state) == SLOT_ARMED)
      disarm_slot(i);
  status.threads = 0;
  pthread_mutex_unlock(&sp_mu);
}

void sp_status(sp_status_t *out)
{
  pthread_mutex_lock(&sp_mu);
  *out = status;
  out->samples = atomic_load(&drained);
  out->lost = atomic_load(&lost);
  out->unsampled = atomic_load(&unsampled);
  out->walked = atomic_load(&walked);
  out->thinned = atomic_load(&thinned);
  out->unwound = atomic_load(&unwound);
  out->stitched = atomic_load(&stitched);
  double per_ns = tsc_per_ns();
  out->delivery_ns = per_ns > 0 ? delivery_cycles / per_ns : 0;
  out->handler_ns = handler_ns;
  out->consumer_ns = consumer;
  out->stride = atomic_load(&stride);
  out->lockstep = atomic_load(&lockstep);
  pthread_mutex_unlock(&sp_mu);
}

int sp_active(void) { return atomic_load(&active); }

void sp_after_fork_child(void)
{
  pthread_mutex_init(&sp_mu, NULL);
  tl_tid = 0; /* the parent's thread's */
  tl_slot = NULL;
  ncosts = adapts = 0;
  atomic_store(&active, 0);
  int n = atomic_load(&hiwater);
  for (int i = 0; i < n; i++) {
    sp_slot_t *t = &slots[i];
    if (atomic_load(&t->state) == SLOT_FREE)
      continue;
    t->has_timer = 0; /* timers are not inherited: nothing to delete */
    disarm_slot(i);   /* the parent's thread's events: not ours */
    if (t->ring)
      atomic_store(&t->ring->tail, atomic_load(&t->ring->head)); /* the parent's samples */
  }
  atomic_store(&lost, 0);
  atomic_store(&drained, 0);
  atomic_store(&walked, 0);
  atomic_store(&thinned, 0);
  atomic_store(&short_run, 0);
  nskipped = 0;
  atomic_store(&unwound, 0);
  atomic_store(&stitched, 0);
  uw_after_fork_child();
  nbanned = 0;
}
