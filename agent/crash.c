/* SPDX-License-Identifier: MIT */
/* The crash hook (crash.h): the chaining handler and its marker, and the next run's reader. */
#define _GNU_SOURCE
#include "crash.h"
#include "codemap.h"
#include "jit/jit.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static const int hooked[] = {SIGSEGV, SIGILL, SIGBUS, SIGFPE};
#define NHOOKED (sizeof hooked / sizeof *hooked)

static struct sigaction prev[NHOOKED]; /* the program's actions, as found at install */
static _Atomic int installed;
static _Atomic int written; /* one marker per process: a fault that repeats is the same crash */

/* Where the marker goes: two buffers, the writer fills the one the hook is not reading. */
typedef struct arm_s {
  char prefix[PATH_MAX + 16]; /* "<db>-crash-" */
  int64_t run_id;
} arm_t;
static arm_t arms[2];
static arm_t *_Atomic armed;
/* The key whose kernel this thread (a compile thread) compiles or tries now (ag_crash_trial). */
static __thread __attribute__((tls_model("initial-exec"))) const ag_sig_t *trial;

void ag_crash_trial(const ag_sig_t *key) { trial = key; }

const char *ag_crash_signame(int signo)
{
  return signo == SIGSEGV  ? "SIGSEGV"
         : signo == SIGILL ? "SIGILL"
         : signo == SIGBUS ? "SIGBUS"
         : signo == SIGFPE ? "SIGFPE"
                           : "signal";
}

void ag_crash_arm(const char *dbpath, int64_t run_id)
{
  static int next;
  arm_t *a = &arms[next];
  next ^= 1;
  int n = snprintf(a->prefix, sizeof a->prefix, "%s-crash-", dbpath);
  a->run_id = run_id;
  atomic_store_explicit(&armed, n > 0 && (size_t)n < sizeof a->prefix - 12 ? a : NULL,
                        memory_order_release);
}

/* Whether action a is a function (not SIG_DFL or SIG_IGN). */
static int is_handler(const struct sigaction *a)
{
  return a->sa_flags & SA_SIGINFO ? a->sa_sigaction != NULL
                                  : a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN;
}

/* ---- the line a fatal fault leaves in the log (async-signal-safe: no stdio, no malloc; small
 * frames, as the handler may run on a program's small alternate stack) ---------------------- */

typedef struct line_s {
  char b[320];
  size_t n;
} line_t;

static void put(line_t *l, const char *s)
{
  while (s && *s && l->n < sizeof l->b)
    l->b[l->n++] = *s++;
}

static void put_hex(line_t *l, uint64_t v)
{
  char d[16];
  int k = 0;
  do
    d[k++] = "0123456789abcdef"[v & 15];
  while ((v >>= 4));
  put(l, "0x");
  while (k && l->n < sizeof l->b)
    l->b[l->n++] = d[--k];
}

static uint64_t hex_field(const char **p)
{
  uint64_t v = 0;
  for (;; (*p)++) {
    char c = **p;
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0)
      return v;
    v = v << 4 | (uint64_t)d;
  }
}

/* One line of /proc/self/maps, "lo-hi perms offset dev inode path": its range and file offset,
 * and its path (NULL for an anonymous mapping), " (deleted)" cut off. */
typedef struct map_s {
  uint64_t lo, hi, off;
  int readable;
  char *path;
} map_t;

static int map_parse(char *s, map_t *m)
{
  *m = (map_t){0};
  m->lo = hex_field((const char **)&s);
  if (*s++ != '-')
    return -1;
  m->hi = hex_field((const char **)&s);
  for (int field = 0; field < 4 && *s; field++) { /* perms, offset, dev, inode */
    while (*s == ' ')
      s++;
    if (field == 0)
      m->readable = *s == 'r';
    if (field == 1)
      m->off = hex_field((const char **)&s);
    while (*s && *s != ' ')
      s++;
  }
  while (*s == ' ')
    s++;
  m->path = *s == '/' ? s : NULL;
  size_t n = strlen(s);
  if (m->path && n > 10 && !strcmp(s + n - 10, " (deleted)"))
    s[n - 10] = 0;
  return 0;
}

/* Puts where pc lies as addr2line takes it: "libfoo.so.1+0x1234", the offset from the object's
 * load base (its first mapping: what dladdr's dli_fbase gives) or, for an executable that is not
 * position-independent, pc itself; the bare address when no object holds pc. Reads
 * /proc/self/maps with open and read. */
static __attribute__((noinline)) void put_code_at(line_t *l, uint64_t pc)
{
  enum { HEAD = 96 }; /* a line's fields before its path fit (a longer path keeps its end) */
  char buf[512], line[320], base_path[256] = "";
  uint64_t base = 0;
  int header = 0; /* the object's ELF header is mapped readable at base */
  size_t ln = 0;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), found = 0;
  for (ssize_t got; !found && fd >= 0 && (got = read(fd, buf, sizeof buf)) > 0;)
    for (ssize_t i = 0; i < got && !found; i++) {
      if (buf[i] != '\n') {
        if (ln == sizeof line - 1 && buf[i] == '/')
          ln = HEAD; /* too long: the path goes on from its next component */
        if (ln < sizeof line - 1)
          line[ln++] = buf[i];
        continue;
      }
      line[ln] = 0;
      ln = 0;
      map_t m;
      if (map_parse(line, &m) || !m.path)
        continue;
      if (m.off == 0 || strcmp(m.path, base_path)) { /* an object's first mapping */
        base = m.lo - m.off;
        header = m.off == 0 && m.readable && m.hi - m.lo >= 64;
        size_t k = 0;
        for (; m.path[k] && k < sizeof base_path - 1; k++)
          base_path[k] = m.path[k];
        base_path[k] = 0;
      }
      if (pc < m.lo || pc >= m.hi)
        continue;
      const char *last = m.path;
      for (const char *c = m.path; *c; c++)
        if (*c == '/')
          last = c + 1;
      const unsigned char *elf = (const unsigned char *)(uintptr_t)base;
      put(l, last);
      put(l, "+");
      /* ET_EXEC (2) in the ELF header at the base: its addresses are absolute */
      put_hex(l, header && elf[16] == 2 && elf[17] == 0 ? pc : pc - base);
      found = 1;
    }
  if (fd >= 0)
    close(fd);
  if (!found)
    put_hex(l, pc);
}

/* Says on the log, at error level, that the process dies of sig and where: the thread, the code
 * (a JIT kernel by name, else the object and offset) and the address a SIGSEGV or SIGBUS
 * touched. What a user (or a test) needs to tell whether opjit's code was the cause. */
static __attribute__((noinline)) void say_fatal(int sig, const siginfo_t *si, uint64_t pc,
                                                int in_jit, const char *name, uint64_t lo,
                                                const char *where)
{
  line_t l = {.n = 0};
  char thread[17] = "";
  prctl(PR_GET_NAME, thread, 0, 0, 0);
  put(&l, "the program dies of ");
  put(&l, ag_crash_signame(sig));
  if (sig == SIGSEGV || sig == SIGBUS) {
    put(&l, " (address ");
    put_hex(&l, (uint64_t)(uintptr_t)si->si_addr);
    put(&l, ")");
  }
  put(&l, " on thread '");
  put(&l, thread);
  put(&l, "' at ");
  if (in_jit == AG_CRASH_KERNEL) {
    put(&l, "opjit's kernel ");
    put(&l, name);
    put(&l, "+");
    put_hex(&l, pc - lo);
    put(&l, ": the next run on this database drops it");
  } else {
    put(&l, where);
    put(&l, in_jit == AG_CRASH_TRIAL ? " while opjit compiled or tried a kernel: the next run on "
                                       "this database leaves its signature on the original"
                                     : " (not in opjit's kernels)");
  }
  ag_log_signal(AG_LOG_ERROR, l.b, l.n);
}

/* Writes the marker: a's path for this process, the record written under another name, then
 * renamed (a collector, each live process looks before it places or compiles a kernel, never
 * claims a marker half written). */
static __attribute__((noinline)) void write_marker(const arm_t *a, const ag_crash_rec_t *r)
{
  char path[sizeof a->prefix + 16], tmp[sizeof a->prefix + 16], digits[12];
  size_t n = 0, d = 0;
  while (a->prefix[n])
    path[n] = a->prefix[n], n++;
  for (uint32_t v = (uint32_t)r->pid; v || !d; v /= 10)
    digits[d++] = (char)('0' + v % 10);
  while (d)
    path[n++] = digits[--d];
  path[n] = 0;
  for (size_t i = 0; i <= n; i++)
    tmp[i] = path[i];
  tmp[n] = '.', tmp[n + 1] = 'w', tmp[n + 2] = 0;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ssize_t w = write(fd, r, sizeof *r);
    (void)w; /* nothing to do about a short write in a dying process: the reader drops it */
    close(fd);
    rename(tmp, path);
  }
}

/* Writes the marker for a fault at the PC in ctx: always when the PC is in a JIT kernel, and for
 * any other fault when fatal (the process dies of it: the run is then marked crashed, with no
 * kernel to blame); then says a fatal one on the log (say_fatal). Async-signal-safe. */
static void note(int sig, const siginfo_t *si, void *ctx, int fatal)
{
  const ucontext_t *uc = ctx;
  uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP], lo = 0, hi = 0;
  const char *name = NULL;
  const ag_sig_t *key = NULL;
  int in_jit = ag_code_at_signal(pc, &lo, &hi, &name, &key) ? AG_CRASH_KERNEL
               : (key = trial) != NULL                      ? AG_CRASH_TRIAL
                                                            : AG_CRASH_OUTSIDE;
  /* Outside a kernel, where the PC is ("libc.so.6+0x1234"): the record's name, and the line's */
  line_t where = {.n = 0};
  if (in_jit != AG_CRASH_KERNEL && (in_jit || fatal))
    put_code_at(&where, pc);
  where.b[where.n < sizeof where.b ? where.n : sizeof where.b - 1] = 0;
  if (in_jit != AG_CRASH_KERNEL)
    name = where.b;
  arm_t *a = atomic_load_explicit(&armed, memory_order_acquire);
  if ((in_jit || fatal) && a && !atomic_exchange(&written, 1)) {
    ag_crash_rec_t r;
    memset(&r, 0, sizeof r);
    memcpy(r.magic, AG_CRASH_MAGIC, sizeof r.magic);
    r.size = sizeof r;
    r.signo = sig, r.code = si->si_code, r.pid = (int32_t)getpid();
    r.in_jit = in_jit, r.generator = JT_GENERATOR_VERSION, r.run_id = a->run_id;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r.time_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    r.pc = pc, r.addr = (uint64_t)(uintptr_t)si->si_addr, r.lo = lo, r.hi = hi;
    if (key)
      memcpy(&r.key, key, sizeof r.key);
    for (size_t i = 0; name && name[i] && i < sizeof r.name - 1; i++)
      r.name[i] = name[i];
    write_marker(a, &r);
  }
  static _Atomic int said;
  if (fatal && !atomic_exchange(&said, 1))
    say_fatal(sig, si, pc, in_jit, name, lo, where.b);
}

/* The hook: notes a fault, then does what the program's own action would have done. The
 * kernel ran it with the program's mask and flags (ag_crash_install). */
static void handler(int sig, siginfo_t *si, void *ctx)
{
  size_t k = 0;
  while (k < NHOOKED - 1 && hooked[k] != sig)
    k++;
  const struct sigaction *p = &prev[k];
  int saved = errno, fault = si && si->si_code > 0; /* the kernel's, not kill()'s */
  if (fault)
    note(sig, si, ctx, !is_handler(p));
  errno = saved;
  if (is_handler(p)) {
    if (p->sa_flags & SA_SIGINFO)
      p->sa_sigaction(sig, si, ctx);
    else
      p->sa_handler(sig);
    return;
  }
  if (p->sa_handler == SIG_IGN && !fault)
    return; /* sent, and ignored as before */
  /* The default action (or SIG_IGN for a fault, which the kernel turns into the default):
   * the faulting instruction runs again and the process dies of it as it would have; a sent
   * signal is raised again, pending until this handler returns. */
  sigaction(sig, p, NULL);
  if (!fault)
    raise(sig);
  errno = saved;
}

void ag_crash_unblock(void)
{
  sigset_t faults;
  sigemptyset(&faults);
  for (size_t k = 0; k < NHOOKED; k++)
    sigaddset(&faults, hooked[k]);
  pthread_sigmask(SIG_UNBLOCK, &faults, NULL);
}

void ag_crash_install(void)
{
  if (atomic_exchange(&installed, 1))
    return;
  for (size_t k = 0; k < NHOOKED; k++) {
    struct sigaction old, sa;
    if (sigaction(hooked[k], NULL, &old) != 0)
      continue;
    prev[k] = old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    /* The program's handler runs inside ours with the mask and flags it asked for. */
    if (is_handler(&old)) {
      sa.sa_mask = old.sa_mask;
      sa.sa_flags =
          SA_SIGINFO | (old.sa_flags & (SA_ONSTACK | SA_NODEFER | SA_RESETHAND | SA_RESTART));
    } else {
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    }
    sigaction(hooked[k], &sa, NULL);
  }
}

int ag_crash_parse(const void *buf, size_t len, ag_crash_rec_t *out)
{
  if (len != sizeof *out)
    return -1;
  memcpy(out, buf, sizeof *out);
  int known = 0;
  for (size_t k = 0; k < NHOOKED; k++)
    known |= out->signo == hooked[k];
  if (memcmp(out->magic, AG_CRASH_MAGIC, sizeof out->magic) != 0 || out->size != sizeof *out ||
      !known || out->pid <= 0 || out->run_id < 0 || out->in_jit < AG_CRASH_OUTSIDE ||
      out->in_jit > AG_CRASH_TRIAL || !memchr(out->name, 0, sizeof out->name))
    return -1;
  return 0;
}

int ag_crash_collect(const char *dbpath, ag_crash_rec_t *out, int max)
{
  char dir[PATH_MAX], prefix[NAME_MAX + 1];
  const char *slash = strrchr(dbpath, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - dbpath) + (slash == dbpath) : 1,
           slash ? dbpath : ".");
  int plen = snprintf(prefix, sizeof prefix, "%s-crash-", slash ? slash + 1 : dbpath);
  if (plen <= 0 || (size_t)plen >= sizeof prefix)
    return 0;
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  int n = 0, dfd = dirfd(d);
  struct dirent *de;
  while ((de = readdir(d))) {
    const char *pid = de->d_name + plen;
    if (strncmp(de->d_name, prefix, (size_t)plen) != 0 || !*pid ||
        strspn(pid, "0123456789") != strlen(pid))
      continue; /* another file, or a marker another run has claimed */
    struct stat st;
    if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid())
      continue;
    char claimed[NAME_MAX + 16];
    if (snprintf(claimed, sizeof claimed, "%s.%d", de->d_name, (int)getpid()) >=
            (int)sizeof claimed ||
        renameat(dfd, de->d_name, dfd, claimed) != 0)
      continue; /* another run took it first */
    int fd = openat(dfd, claimed, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      char buf[sizeof *out + 1];
      ssize_t got = read(fd, buf, sizeof buf);
      if (got > 0 && n < max && ag_crash_parse(buf, (size_t)got, &out[n]) == 0)
        n++;
      close(fd);
    }
    unlinkat(dfd, claimed, 0);
  }
  closedir(d);
  return n;
}
