/* SPDX-License-Identifier: MIT */
/* The agent's machine model for this process (machine.h draws its states). ag_machine_start,
 * from the writer thread, takes the model stored for this CPU key (the writer read it on its
 * connection; without one, a thread reads it through a read-only connection of its own), and
 * publishes it when it is settled; else a thread measures it, then, until a
 * measurement agrees with the ones before it (ag_machine_merge), measures again at REFINE_MS;
 * the writer stores what is new (ag_machine_save) with its own connection, so every write stays
 * on the writer. Compile threads note compile times here; the tiers read the medians. */
#define _GNU_SOURCE
#include "machine.h"
#include "agent.h"
#include "log.h"
#include "background.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The model as measured so far: each measurement that changes it fills the next snapshot and
 * publishes it, so a reader's pointer stays valid and unchanged. */
static const long REFINE_MS[] = {100, 200, 700, 2000}; /* sleeps before the next measurements */
#define NREFINE (sizeof REFINE_MS / sizeof *REFINE_MS)
static ag_machine_t snaps[1 + NREFINE];
static size_t nsnaps;                      /* the machine thread's (or ag_machine_start's,
                                              which then starts none) */
static _Atomic(const ag_machine_t *) cur;  /* NULL until the model is ready */
static _Atomic int is_final;                 /* cur's peaks are this run's last */
static _Atomic int measuring;              /* a measurement is under way (ag_machine_save) */
static _Atomic int calibrating; /* a compile's cost is being measured (the same) */
static _Atomic int unsaved;    /* model was measured here and is not stored yet */
static int save_dead;          /* a save failed for good: no more tries (writer thread) */
static char cpu[320];          /* the CPU key (writer thread, then read-only) */
static pid_t started_pid;      /* the process whose machine thread loads or measures */
/* The database the machine thread has open while it reads the stored model. A fork child whose
 * parent's thread had it open keeps it in abandoned: not the child's to close (the thread died
 * mid-call, its state is unknown), and reachable, so a leak checker does not count it. */
static st_db_t *reading, *abandoned;

/* Compile statistics per family: what was stored plus this process's compiles, and the notes
 * the writer has not stored yet. mu is never held across I/O. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static st_compile_stat_t fams[ST_MACHINE_FAMILIES];
static size_t nfams;
static struct {
  uint8_t fam;
  uint64_t ns;
} notes[256];
static size_t nnotes;

static const char *env_get(const char *name) { return getenv(name); }

/* ---- compile statistics (mu held) ---------------------------------------------------------- */


static int cmp_u64(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The index of family's statistics, added when new; -1 when the table is full. */
static int fam_index(const char *family)
{
  for (size_t i = 0; i < nfams; i++)
    if (strcmp(fams[i].family, family) == 0)
      return (int)i;
  if (nfams == ST_MACHINE_FAMILIES)
    return -1;
  memset(&fams[nfams], 0, sizeof fams[nfams]);
  snprintf(fams[nfams].family, sizeof fams[nfams].family, "%s", family);
  return (int)nfams++;
}

/* Puts the stored statistics s before this process's compiles of the same family (those are
 * newer: they go last in the window). */
static void stat_merge_stored(const st_compile_stat_t *s)
{
  int i = fam_index(s->family);
  if (i < 0)
    return;
  st_compile_stat_t mine = fams[i];
  fams[i] = *s;
  for (uint32_t k = 0; k < mine.nrecent; k++)
    st_compile_add(&fams[i], mine.recent[k]);
  fams[i].n = s->n + mine.n; /* mine may count compiles that left its window */
  fams[i].mean_ns = fams[i].n ? (s->mean_ns * (double)s->n + mine.mean_ns * (double)mine.n) /
                                    (double)fams[i].n
                              : 0;
}

void ag_machine_note_compile(const char *family, uint64_t ns)
{
  pthread_mutex_lock(&mu);
  int i = fam_index(family);
  if (i >= 0) {
    st_compile_add(&fams[i], ns);
    if (nnotes < sizeof notes / sizeof *notes) /* beyond: counted here, not stored */
      notes[nnotes].fam = (uint8_t)i, notes[nnotes++].ns = ns;
  }
  pthread_mutex_unlock(&mu);
}

uint64_t ag_machine_compile_ns(const char *family)
{
  uint64_t med[ST_MACHINE_FAMILIES], out = AG_MACHINE_COMPILE_GUESS_NS;
  size_t n = 0;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nfams; i++) {
    if (!fams[i].nrecent)
      continue;
    if (strcmp(fams[i].family, family) == 0) {
      n = 0;
      out = st_compile_median(&fams[i]);
      break;
    }
    if (strcmp(fams[i].family, AG_MACHINE_LLVM_LOAD) != 0)
      med[n++] = st_compile_median(&fams[i]);
  }
  pthread_mutex_unlock(&mu);
  if (n) {
    qsort(med, n, sizeof *med, cmp_u64);
    out = med[(n - 1) / 2];
  }
  return out;
}

int ag_machine_compile_measured(const char *family)
{
  int yes = 0;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nfams && !yes; i++)
    yes = fams[i].nrecent &&
          (family ? strcmp(fams[i].family, family) == 0
                  : strcmp(fams[i].family, AG_MACHINE_LLVM_LOAD) != 0);
  pthread_mutex_unlock(&mu);
  return yes;
}

void ag_machine_calibrating(int on) { atomic_store(&calibrating, on); }

int ag_machine_calibration_running(void) { return atomic_load(&calibrating); }

/* ---- the model ------------------------------------------------------------------------------ */

/* Reads cpu's stored model into *rec: 0, or -1 when there is none or it cannot be read (no
 * database yet, an older schema the writer has not migrated yet, damage: the writer reports
 * those). */
static int load_stored(st_machine_t *rec)
{
  char path[PATH_MAX + 32], dbpath[PATH_MAX], err[512];
  snprintf(path, sizeof path, "%s/%s", ag_self_dir(), ST_MODULE_NAME);
  if (ag_opts_db_path(&ag_opts, env_get, dbpath, sizeof dbpath) || access(dbpath, F_OK) != 0)
    return -1;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* kept: the writer loads it too */
  const st_api_t *store = h ? dlsym(h, ST_API_SYMBOL) : NULL;
  int rc = -1;
  ag_sqlite_lock(); /* a fork meanwhile waits: SQLite's locks are never the child's */
  if (store && store->abi == ST_API_ABI &&
      store->open(dbpath, ST_OPEN_READONLY, (int)ag_opts.num[AG_OPT_BUSY_MS], &reading, err,
                  sizeof err) == ST_OK) {
    rc = store->machine_load(reading, cpu, rec);
    store->close(reading);
    reading = NULL;
  }
  ag_sqlite_unlock();
  return rc == ST_OK ? 0 : -1;
}

/* Publishes m as the model (the next snapshot). The machine thread, or ag_machine_start for a
 * settled stored model (no thread then). */
static void publish(const ag_machine_t *m, int last)
{
  ag_machine_t *s = &snaps[nsnaps++];
  *s = *m;
  atomic_store_explicit(&cur, s, memory_order_release);
  if (last)
    atomic_store_explicit(&is_final, 1, memory_order_release);
}

/* Measures m's CPU again at REFINE_MS until each peak has agreed with the model (settled) or
 * the schedule ends; each is merged (ag_machine_merge) and published. A stored model was
 * measured at another time already: its first measurement here comes at once (a short program
 * still makes it). Machine thread. */
static void refine(ag_machine_t m)
{
  for (size_t i = nsnaps - 1; !m.settled && i < NREFINE; i++) {
    if (!m.stored)
      nanosleep(&(struct timespec){REFINE_MS[i] / 1000, REFINE_MS[i] % 1000 * 1000000}, NULL);
    atomic_store(&measuring, 1);
    ag_machine_t x;
    uint64_t t0 = ag_now_ns();
    ag_machine_detect(&x);
    ag_agent_keep_off_host(); /* the host's thread may have moved since */
    ag_bg_begin();
    ag_machine_measure(&x);
    ag_bg_end();
    double was = m.gflops[0][m.widest];
    ag_machine_merge(&m, &x);
    m.stored = 0;
    ag_log(AG_LOG_INFO, "machine model measured again in %.1f ms: f32 FMA peak %.1f GF/s "
                        "(%d bits), %.1f before; %s",
           (double)(ag_now_ns() - t0) / 1e6, x.gflops[0][m.widest], ag_isa_bits(m.widest), was,
           m.settled ? "settled" : "measured again later");
    publish(&m, m.settled || i + 1 == NREFINE);
    atomic_store(&unsaved, 1); /* after the model it stands for (ag_machine_save) */
    atomic_store(&measuring, 0);
  }
  atomic_store_explicit(&is_final, 1, memory_order_release);
}

/* What the writer read (ag_machine_start), for the thread: have -1 when it is to read it. */
static st_machine_t given;
static int given_have;

/* Whether rec is a model of the current measurement (not only compile times, not an older
 * method's). */
static int usable(const st_machine_t *rec)
{
  return rec->measured_ns && rec->method == AG_MACHINE_METHOD;
}

/* Takes the stored compile statistics in, once per process image: a fork child inherits its
 * parent's (merged again, the stored window would count twice). */
static void take_families(const st_machine_t *rec)
{
  static int taken;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; !taken && i < rec->nfamilies; i++)
    stat_merge_stored(&rec->families[i]);
  taken = 1;
  pthread_mutex_unlock(&mu);
}

static void *machine_main(void *arg)
{
  ag_agent_thread_begin("opjit-machine");
  ag_agent_keep_off_host();
  if (arg == &cur) { /* a fork child of a process still refining: the child's thread goes on */
    refine(*atomic_load(&cur));
    return NULL;
  }
  st_machine_t *rec = &given;
  ag_machine_t m;
  int have = given_have >= 0 ? given_have : load_stored(rec) == 0;
  if (have && usable(rec)) {
    ag_machine_from_store(rec, &m);
  } else {
    uint64_t t0 = ag_now_ns();
    ag_machine_detect(&m);
    ag_bg_begin();
    ag_machine_measure(&m);
    ag_bg_end();
    ag_log(AG_LOG_INFO, "machine model measured in %.1f ms: f32 FMA peak %.1f/%.1f/%.1f GF/s "
                        "(128/256/512 bits), clock read %.1f ns",
           (double)(ag_now_ns() - t0) / 1e6, m.gflops[0][0], m.gflops[0][1], m.gflops[0][2],
           m.timer_ns);
  }
  if (have)
    take_families(rec); /* once: ag_machine_start may have taken the writer's record in */
  atomic_store(&measuring, !m.settled && m.stored); /* at once, below */
  publish(&m, m.settled);
  if (!m.stored)
    atomic_store(&unsaved, 1);
  refine(m);
  return NULL;
}

/* Starts the machine thread (refining only: a fork child's). */
static void start_thread(int refining)
{
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (ag_agent_thread_create(&t, &attr, machine_main, refining ? &cur : NULL) != 0) {
    ag_log_once(AG_LOG_WARN, "cannot start the machine model's thread: compile costs stay "
                             "at their %.0f ms guess", AG_MACHINE_COMPILE_GUESS_NS / 1e6);
    if (refining)
      atomic_store(&is_final, 1); /* the peaks so far are the run's */
  }
  pthread_attr_destroy(&attr);
}

void ag_machine_start(const char *cpu_key, const st_machine_t *stored, int have)
{
  ag_machine_isa(); /* an OPJIT_ISA this CPU cannot honour is reported now */
  pid_t pid = getpid();
  if (started_pid == pid)
    return;
  if (started_pid) { /* a fork child: its parent stores the notes it inherited */
    if (reading)
      abandoned = reading, reading = NULL;
    atomic_store(&calibrating, 0); /* the parent's calibration thread is not the child's */
    pthread_mutex_lock(&mu);
    nnotes = 0;
    pthread_mutex_unlock(&mu);
    if (atomic_load(&cur)) {
      started_pid = pid;
      if (!atomic_load(&is_final))
        start_thread(1);
      return;
    }
  }
  started_pid = pid;
  snprintf(cpu, sizeof cpu, "%s", cpu_key);
  given_have = have;
  if (have > 0) {
    given = *stored;
    take_families(stored);
    ag_machine_t m;
    if (usable(stored) && (ag_machine_from_store(stored, &m), m.settled)) {
      publish(&m, 1); /* nothing to measure: no thread */
      return;
    }
  }
  start_thread(0);
}

const ag_machine_t *ag_machine(void)
{
  return atomic_load_explicit(&cur, memory_order_acquire);
}

int ag_machine_final(void)
{
  return atomic_load_explicit(&is_final, memory_order_acquire);
}

int ag_machine_wait(long ms)
{
  for (long i = 0; !ag_machine_final() && i < ms; i++)
    usleep(1000);
  return ag_machine_final();
}

static int isa_level;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void isa_resolve(void)
{
  ag_machine_t m;
  char why[256];
  ag_machine_detect(&m);
  isa_level = ag_machine_isa_choose(ag_opts.num[AG_OPT_ISA], m.exts, why, sizeof why);
  if (why[0])
    ag_log(AG_LOG_WARN, "%s", why);
}

int ag_machine_isa(void)
{
  pthread_once(&isa_once, isa_resolve);
  return isa_level;
}

void ag_machine_object_key(const char *cpu_key, const char *flags, char *buf, size_t len)
{
  pthread_once(&isa_once, isa_resolve);
  ag_machine_object_key_for(cpu_key, flags, isa_level, buf, len);
}

double ag_machine_peak_gflops(int width_bits, int f64)
{
  const ag_machine_t *m = ag_machine();
  int w = width_bits == 128 ? 0 : width_bits == 256 ? 1 : width_bits == 512 ? 2 : -1;
  return m && w >= 0 ? m->gflops[f64 != 0][w] : 0;
}

double ag_machine_timer_ns(void)
{
  const ag_machine_t *m = ag_machine();
  return m ? m->timer_ns : 0;
}

int ag_machine_save(const st_api_t *store, st_db_t *db, int final)
{
  for (int ms = 0; final && started_pid == getpid() &&
                  (!ag_machine() || atomic_load(&measuring) ||
                   (atomic_load(&calibrating) &&
                    !(ag_machine_compile_measured(NULL) &&
                      ag_machine_compile_measured(AG_MACHINE_LLVM_LOAD)))) &&
                  ms < 250;
       ms++)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  if (save_dead || !ag_machine())
    return ST_OK; /* notes wait for the stored ones to be merged first */
  static st_compile_note_t out[sizeof notes / sizeof *notes];
  static char names[sizeof notes / sizeof *notes][sizeof fams[0].family];
  pthread_mutex_lock(&mu);
  size_t n = nnotes;
  for (size_t i = 0; i < n; i++) {
    memcpy(names[i], fams[notes[i].fam].family, sizeof names[i]);
    out[i] = (st_compile_note_t){names[i], notes[i].ns};
  }
  pthread_mutex_unlock(&mu);
  /* taken before the model is read: a measurement published meanwhile sets it again */
  int measured = atomic_exchange(&unsaved, 0);
  if (!n && !measured)
    return ST_OK;
  st_machine_t rec;
  ag_machine_to_store(ag_machine(), cpu, &rec);
  if (!measured)
    rec.measured_ns = 0; /* the stored model stays */
  int rc = store->machine_save(db, &rec, out, n);
  if (rc == ST_EBUSY || rc == ST_EFULL) {
    if (measured)
      atomic_store(&unsaved, 1);
    return rc; /* the next writer step tries again */
  }
  if (rc) {
    save_dead = 1;
    if (rc != ST_ECORRUPT) /* damage: the writer says it, and writes no more */
      ag_log(AG_LOG_WARN, "cannot store the machine model: %s (it is measured again next run)",
             store->errstr(rc));
    return rc;
  }
  pthread_mutex_lock(&mu); /* notes noted meanwhile move to the front */
  memmove(notes, notes + n, (nnotes - n) * sizeof *notes);
  nnotes -= n;
  pthread_mutex_unlock(&mu);
  return ST_OK;
}
