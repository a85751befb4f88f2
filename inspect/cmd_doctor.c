/* SPDX-License-Identifier: MIT */
/* `opjit doctor`: what the agent would do here and now. The effective options (from the same
 * table and parser the agent uses), the database's health, where the agent is, whether its JIT
 * can load (libopjit-jit.so beside it and the LLVM it needs: read from the files, never
 * loaded), and what this machine offers (its vector ISAs and stored machine model, perf_event,
 * the system BLAS and whether its kernels run below this CPU). Unhealthy = the
 * database is unusable. */
#define _GNU_SOURCE
#include "agentlib.h"
#include "cmd.h"
#include "db.h"
#include "table.h"

#include "agent/machine.h"
#include "agent/opt.h"
#include "jit/jit.h"
#include "sampler/ladder.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <link.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static cJSON *option_warnings; /* lines from ag_opts_parse's report callback */

static void collect_warning(const char *line)
{
  cJSON_AddItemToArray(option_warnings, cJSON_CreateString(line));
}

static cJSON *check_options(void)
{
  ag_opts_t o;
  cJSON *list = cJSON_CreateArray();
  ag_opts_parse(&o, ins_getenv, collect_warning);
  ag_opts_unknown(environ, collect_warning);
  for (int id = 0; id < AG_OPT__COUNT; id++) {
    const ag_opt_desc_t *d = ag_opt_desc(id);
    char var[64], val[512];
    snprintf(var, sizeof var, "OPJIT_%s", d->name);
    ag_opts_format(&o, id, val, sizeof val);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", var);
    cJSON_AddStringToObject(j, "value", val);
    cJSON_AddStringToObject(j, "source", o.from_env[id] ? "env"
                                         : getenv(var)  ? "default (bad env value)"
                                                        : "default");
    cJSON_AddStringToObject(j, "help", d->help);
    cJSON_AddItemToArray(list, j);
  }
  ag_opts_free(&o);
  return list;
}

/* Adds mode (octal text) of path under key, and a warning when it is not want. */
static void add_mode(cJSON *o, cJSON *warnings, const char *key, const char *path, unsigned want)
{
  struct stat sb;
  if (stat(path, &sb) != 0) {
    cJSON_AddNullToObject(o, key);
    return;
  }
  char mode[8], line[4200];
  snprintf(mode, sizeof mode, "%04o", (unsigned)sb.st_mode & 07777);
  cJSON_AddStringToObject(o, key, mode);
  if (((unsigned)sb.st_mode & 0777) != want) {
    snprintf(line, sizeof line, "%s has mode %s, expected %04o (profiles reveal what you run): "
             "chmod %o %s", path, mode, want, want, path);
    cJSON_AddItemToArray(warnings, cJSON_CreateString(line));
  }
}

/* Runs a one-value query and adds its value under key; SQLite's message on error. */
static void add_query(cJSON *o, st_db_t *db, const char *key, enum st_query q)
{
  st_rows_t *r = NULL;
  if (st_query(db, q, &r) == ST_OK && st_rows_next(r) == 1) {
    if (st_rows_type(r, 0) == ST_COL_INT)
      cJSON_AddNumberToObject(o, key, (double)st_rows_int(r, 0));
    else
      cJSON_AddStringToObject(o, key, st_rows_text(r, 0));
  } else {
    cJSON_AddStringToObject(o, key, st_errmsg(db));
  }
  st_rows_close(r);
}

/* Whether the agent, running as this user, could record into path (in folder dir): st_open
 * writes an existing file and creates its -wal and -shm beside it unless both are there already;
 * it creates a missing file, and the missing folders on its way, as this user. Returns 1, or 0
 * with what stops it and what to do in why. */
static int agent_can_write(const char *path, const char *dir, int exists, char *why, size_t len)
{
  char at[4096], wal[4200], shm[4200];
  snprintf(wal, sizeof wal, "%s-wal", path);
  snprintf(shm, sizeof shm, "%s-shm", path);
  if (exists && access(path, W_OK) != 0) {
    snprintf(why, len, "the agent cannot write %s (%s) and records nothing: make it writable "
             "(chmod u+w %s) or point OPJIT_DB / --db at a file you can write", path,
             strerror(errno), path);
    return 0;
  }
  if (exists && access(dir, W_OK | X_OK) != 0) {
    int e = errno;
    const char *journal = access(wal, W_OK) ? wal : access(shm, W_OK) ? shm : NULL;
    if (journal) {
      snprintf(why, len, "the agent cannot create %s (%s: %s) and records nothing: make the "
               "folder writable (chmod u+wx %s) or point OPJIT_DB / --db at a folder you can "
               "write", journal, dir, strerror(e), dir);
      return 0;
    }
  }
  if (exists)
    return 1;
  struct stat sb;
  int found;
  snprintf(at, sizeof at, "%s", dir);
  while (!(found = stat(at, &sb) == 0) && errno == ENOENT && strcmp(at, ".") && strcmp(at, "/")) {
    char *slash = strrchr(at, '/'); /* up to the nearest folder that exists */
    if (!slash)
      snprintf(at, sizeof at, ".");
    else
      slash[slash == at] = 0;
  }
  const char *stop = !found                         ? strerror(errno)
                     : !S_ISDIR(sb.st_mode)         ? "not a folder"
                     : access(at, W_OK | X_OK) != 0 ? strerror(errno)
                                                    : NULL;
  if (stop)
    snprintf(why, len, "the agent cannot create %s (%s: %s) and records nothing: make that "
             "folder writable (chmod u+wx %s) or point OPJIT_DB / --db at a folder you can write",
             path, at, stop, at);
  return !stop;
}

/* The database: returns its report; *usable = 0 when the agent or the readers cannot use it. */
static cJSON *check_database(const char *dbopt, int *usable)
{
  cJSON *o = cJSON_CreateObject(), *warnings = cJSON_CreateArray();
  char path[4096], dir[4096], err[16384]; /* agent_can_write's sentence names 3 paths */
  *usable = 0;
  if (ins_db_path(dbopt, path, sizeof path)) {
    cJSON_AddNullToObject(o, "path");
    cJSON_AddStringToObject(o, "error", "no database path (set OPJIT_DB, XDG_CACHE_HOME or HOME)");
    goto out;
  }
  cJSON_AddStringToObject(o, "path", path);
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else
    slash[slash == dir] = 0; /* "/x.db" lives in "/" */
  struct stat sb;
  int exists = stat(path, &sb) == 0;
  cJSON_AddBoolToObject(o, "exists", exists);
  cJSON_AddNumberToObject(o, "supported_schema_version", ST_SCHEMA_VERSION);
  add_mode(o, warnings, "mode", path, 0600);
  add_mode(o, warnings, "folder_mode", dir, 0700);
  if (!exists) {
    *usable = agent_can_write(path, dir, 0, err, sizeof err);
    cJSON_AddStringToObject(o, *usable ? "note" : "error",
                            *usable ? "not created yet: the first recorded run creates it" : err);
    goto out;
  }
  st_db_t *db;
  int rc = st_open(path, ST_OPEN_READONLY, INS_READ_BUSY_MS, &db, err, sizeof err);
  if (rc) {
    /* A file that is not a usable profile says so; else, where the agent cannot write either
     * (no WAL files in a read-only folder: SQLite's reader cannot create them), that is the
     * cause to fix. */
    static char why[sizeof err];
    int own = rc == ST_ECORRUPT || rc == ST_ENEWER || rc == ST_ENOTOURS;
    cJSON_AddStringToObject(o, "error",
                            own || agent_can_write(path, dir, 1, why, sizeof why) ? err : why);
    if (rc == ST_ECORRUPT) { /* where the damage lies, as far as SQLite can still tell */
      char qc[1024];
      st_quick_check(path, qc, sizeof qc);
      cJSON_AddStringToObject(o, "quick_check", qc);
    }
    goto out;
  }
  int version = 0;
  st_schema_version(db, &version);
  cJSON_AddNumberToObject(o, "schema_version", version);
  add_query(o, db, "quick_check", ST_Q_QUICK_CHECK);
  add_query(o, db, "runs", ST_Q_RUN_COUNT);
  add_query(o, db, "journal_mode", ST_Q_JOURNAL_MODE);
  st_close(db);
  const char *qc = cJSON_GetStringValue(cJSON_GetObjectItem(o, "quick_check"));
  *usable = qc && strcmp(qc, "ok") == 0;
  if (!*usable)
    cJSON_AddStringToObject(o, "error", "PRAGMA quick_check found damage: " ST_DAMAGED_ADVICE);
  else if (!(*usable = agent_can_write(path, dir, 1, err, sizeof err)))
    cJSON_AddStringToObject(o, "error", err);
  if (version < ST_SCHEMA_VERSION)
    cJSON_AddItemToArray(warnings, cJSON_CreateString("older schema: the next recorded run or "
                                                      "opjit gc migrates it"));
out:
  cJSON_AddBoolToObject(o, "usable", *usable);
  cJSON_AddItemToObject(o, "warnings", warnings);
  return o;
}

#define LLVM_DEFAULT "/usr/lib/llvm-19/lib/libLLVM.so.19.1" /* what the JIT is built against */

/* The file offset of virtual address vaddr in the ELF image at base (size len), or 0. */
static uint64_t elf_offset(const unsigned char *base, size_t len, uint64_t vaddr)
{
  const Elf64_Ehdr *eh = (const void *)base;
  for (int i = 0; i < eh->e_phnum; i++) {
    const Elf64_Phdr *ph = (const void *)(base + eh->e_phoff + (size_t)i * eh->e_phentsize);
    if (ph->p_type == PT_LOAD && vaddr >= ph->p_vaddr && vaddr < ph->p_vaddr + ph->p_filesz &&
        vaddr - ph->p_vaddr + ph->p_offset < len)
      return vaddr - ph->p_vaddr + ph->p_offset;
  }
  return 0;
}

/* Reads a 64-bit ELF object's first DT_NEEDED entry that starts with want, and its
 * DT_RUNPATH (else DT_RPATH), from the file: the linker is not involved. Returns 0, or -1
 * when path is unreadable or not such an object. */
static int elf_needed(const char *path, const char *want, char *needed, size_t nlen,
                      char *runpath, size_t rlen)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC), rc = -1;
  struct stat sb;
  needed[0] = runpath[0] = 0;
  if (fd < 0)
    return -1;
  if (fstat(fd, &sb) != 0 || sb.st_size < (off_t)sizeof(Elf64_Ehdr)) {
    close(fd);
    return -1;
  }
  size_t len = (size_t)sb.st_size;
  const unsigned char *base = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED)
    return -1;
  const Elf64_Ehdr *eh = (const void *)base;
  const Elf64_Dyn *dyn = NULL;
  size_t ndyn = 0;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_phentsize < sizeof(Elf64_Phdr) ||
      eh->e_phoff + (uint64_t)eh->e_phnum * eh->e_phentsize > len)
    goto out;
  for (int i = 0; i < eh->e_phnum; i++) {
    const Elf64_Phdr *ph = (const void *)(base + eh->e_phoff + (size_t)i * eh->e_phentsize);
    if (ph->p_type == PT_DYNAMIC && ph->p_offset + ph->p_filesz <= len) {
      dyn = (const void *)(base + ph->p_offset);
      ndyn = ph->p_filesz / sizeof *dyn;
    }
  }
  uint64_t strtab = 0, strsz = 0;
  for (size_t i = 0; i < ndyn && dyn[i].d_tag != DT_NULL; i++) {
    if (dyn[i].d_tag == DT_STRTAB)
      strtab = elf_offset(base, len, dyn[i].d_un.d_ptr);
    if (dyn[i].d_tag == DT_STRSZ)
      strsz = dyn[i].d_un.d_val;
  }
  if (!strtab || !strsz || strtab + strsz > len)
    goto out;
  const char *strs = (const char *)base + strtab;
  for (size_t i = 0; i < ndyn && dyn[i].d_tag != DT_NULL; i++) {
    uint64_t at = dyn[i].d_un.d_val;
    if (at >= strsz || !memchr(strs + at, 0, strsz - at))
      continue;
    if (dyn[i].d_tag == DT_NEEDED && !needed[0] && strncmp(strs + at, want, strlen(want)) == 0)
      snprintf(needed, nlen, "%s", strs + at);
    else if (dyn[i].d_tag == DT_RUNPATH || (dyn[i].d_tag == DT_RPATH && !runpath[0]))
      snprintf(runpath, rlen, "%s", strs + at);
  }
  rc = 0;
out:
  munmap((void *)base, len);
  return rc;
}

/* Where the dynamic linker would find soname for an object in folder origin: the
 * LD_LIBRARY_PATH folders, the object's run path ($ORIGIN expanded), LLVM 19's folder, then
 * the system folders (ld.so.cache aside). The real path into out; returns 0, or -1. */
static int find_library(const char *soname, const char *runpath, const char *origin, char *out,
                        size_t len)
{
  const char *ldpath = getenv("LD_LIBRARY_PATH");
  char dirs[8192];
  snprintf(dirs, sizeof dirs, "%s:%s:/usr/lib/llvm-19/lib:/lib/x86_64-linux-gnu:"
           "/usr/lib/x86_64-linux-gnu:/lib64:/usr/lib64:/lib:/usr/lib", ldpath ? ldpath : "",
           runpath);
  for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    char cand[PATH_MAX + 256];
    if (strncmp(d, "$ORIGIN", 7) == 0)
      snprintf(cand, sizeof cand, "%s%s/%s", origin, d + 7, soname);
    else
      snprintf(cand, sizeof cand, "%s/%s", d, soname);
    char *real = realpath(cand, NULL);
    int ok = real && access(real, R_OK) == 0 && strlen(real) < len;
    if (ok)
      snprintf(out, len, "%s", real);
    free(real);
    if (ok)
      return 0;
  }
  return -1;
}

/* Whether the JIT can load beside the agent in folder dir (NULL: the agent was not found):
 * adds jit_module, jit_module_found, llvm_needed, llvm_linked_in, llvm_path, llvm_found and
 * jit_ready. A module that names no libLLVM among its needs has LLVM linked in (the build's
 * default: CMakeLists.txt): llvm_needed is null and llvm_path the module. */
static void check_jit(cJSON *o, const char *dir)
{
  char module[PATH_MAX + 64], needed[256] = "", runpath[4096] = "", llvm[PATH_MAX + 64];
  int have_module = 0, have_llvm = 0;
  if (dir) {
    snprintf(module, sizeof module, "%s/%s", dir, JT_MODULE_NAME);
    have_module = access(module, R_OK) == 0;
    cJSON_AddStringToObject(o, "jit_module", module);
  } else {
    cJSON_AddNullToObject(o, "jit_module");
  }
  cJSON_AddBoolToObject(o, "jit_module_found", have_module);
  int read = have_module && elf_needed(module, "libLLVM", needed, sizeof needed, runpath,
                                       sizeof runpath) == 0;
  int linked_in = read && !needed[0];
  if (read && needed[0]) {
    have_llvm = find_library(needed, runpath, dir, llvm, sizeof llvm) == 0;
  } else if (linked_in) {
    have_llvm = 1;
    snprintf(llvm, sizeof llvm, "%s", module);
  } else { /* no module to read: what the JIT is built against */
    snprintf(needed, sizeof needed, "%s", strrchr(LLVM_DEFAULT, '/') + 1);
    have_llvm = access(LLVM_DEFAULT, R_OK) == 0;
    char *real = have_llvm ? realpath(LLVM_DEFAULT, NULL) : NULL;
    snprintf(llvm, sizeof llvm, "%s", real ? real : LLVM_DEFAULT);
    free(real);
  }
  if (linked_in)
    cJSON_AddNullToObject(o, "llvm_needed");
  else
    cJSON_AddStringToObject(o, "llvm_needed", needed);
  cJSON_AddBoolToObject(o, "llvm_linked_in", linked_in);
  if (have_llvm)
    cJSON_AddStringToObject(o, "llvm_path", llvm);
  else
    cJSON_AddNullToObject(o, "llvm_path");
  cJSON_AddBoolToObject(o, "llvm_found", have_llvm);
  cJSON_AddBoolToObject(o, "jit_ready", have_module && have_llvm);
}

static cJSON *check_agent(void)
{
  cJSON *o = cJSON_CreateObject();
  char path[PATH_MAX], searched[2 * PATH_MAX], store[PATH_MAX + 64];
  if (ins_agent_find(path, sizeof path, searched, sizeof searched)) {
    cJSON_AddNullToObject(o, "path");
    cJSON_AddStringToObject(o, "searched", searched);
    check_jit(o, NULL);
    return o;
  }
  cJSON_AddStringToObject(o, "path", path);
  snprintf(store, sizeof store, "%.*s/%s", (int)(strrchr(path, '/') - path), path,
           ST_MODULE_NAME);
  cJSON_AddStringToObject(o, "store_module", store);
  cJSON_AddBoolToObject(o, "store_module_found", access(store, R_OK) == 0);
  *strrchr(path, '/') = 0;
  check_jit(o, path);
  return o;
}

/* Reads a small file into buf (NUL-terminated); returns its length or -1. */
static ssize_t slurp(const char *path, char *buf, size_t len)
{
  FILE *f = fopen(path, "re");
  if (!f)
    return -1;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = 0;
  return (ssize_t)n;
}

/* The value of the first "key : value" line of cpuinfo, in out. */
static void cpuinfo_field(const char *cpuinfo, const char *key, char *out, size_t len)
{
  size_t klen = strlen(key);
  out[0] = 0;
  for (const char *l = cpuinfo; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
    if (strncmp(l, key, klen) == 0 && strchr(" \t:", l[klen])) {
      const char *v = strchr(l, ':');
      if (v)
        snprintf(out, len, "%.*s", (int)strcspn(v + 2, "\n"), v + 2);
      return;
    }
}

static int has_word(const char *list, const char *word)
{
  size_t n = strlen(word);
  for (const char *p = list; (p = strstr(p, word)); p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
      return 1;
  return 0;
}

/* Opens (then closes) a user-only counter on this thread; adds {ok, error}. */
static void check_perf(cJSON *o, const char *key, unsigned type, unsigned long long config,
                       int paranoid)
{
  struct perf_event_attr a = {.size = sizeof a, .type = type, .config = config, .disabled = 1,
                              .exclude_kernel = 1, .exclude_hv = 1};
  int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
  int e = errno;
  cJSON *j = cJSON_AddObjectToObject(o, key);
  cJSON_AddBoolToObject(j, "ok", fd >= 0);
  if (fd >= 0) {
    close(fd);
    return;
  }
  char why[256];
  switch (e) {
  case ENOENT:
  case EOPNOTSUPP:
  case ENODEV:
    snprintf(why, sizeof why, "%s: no such event here (no hardware PMU, as in most VMs)",
             strerror(e));
    break;
  case EACCES:
  case EPERM:
    snprintf(why, sizeof why, "%s: perf_event_paranoid is %d (user-only events need <= 2), or "
             "a seccomp filter (containers) blocks perf_event_open", strerror(e), paranoid);
    break;
  case ENOSYS: snprintf(why, sizeof why, "%s: the kernel has no perf events", strerror(e)); break;
  default: snprintf(why, sizeof why, "%s", strerror(e)); break;
  }
  cJSON_AddStringToObject(j, "error", why);
}

/* Whether this thread can have a CPU-time timer (the sampler's timer mechanism). */
static int timer_works(void)
{
  timer_t t;
  struct sigevent ev = {.sigev_notify = SIGEV_NONE};
  if (timer_create(CLOCK_THREAD_CPUTIME_ID, &ev, &t))
    return 0;
  timer_delete(t);
  return 1;
}

/* What the agent would sample with here: OPJIT_EVENTS's ladder at OPJIT_SAMPLE_HZ
 * (sampler/ladder.h) walked with the perf events probed above (o's perf_cycles and
 * perf_task_clock; cpu-clock is taken to behave as task-clock) and a timer probed now. Adds
 * sampling {events, hz, ladder, picks}; picks is "off" when the rate is 0 or nothing works. */
static void check_sampling(cJSON *o, const ag_opts_t *opts, int tick)
{
  char want[32];
  ag_opts_format(opts, AG_OPT_EVENTS, want, sizeof want);
  int hz = (int)opts->num[AG_OPT_SAMPLE_HZ], ladder[4];
  cJSON *s = cJSON_AddObjectToObject(o, "sampling");
  cJSON_AddStringToObject(s, "events", want);
  cJSON_AddNumberToObject(s, "hz", hz);
  sp_ladder(want, hz, tick, ladder);
  cJSON *steps = cJSON_AddArrayToObject(s, "ladder");
  const char *picks = "off";
  for (int i = 0; hz > 0 && ladder[i] != SP_OFF; i++) {
    const char *ev = sp_mode_event(ladder[i], want);
    cJSON_AddItemToArray(steps, cJSON_CreateString(ev));
    const char *probe = ladder[i] == SP_PERF_HW ? "perf_cycles"
                        : ladder[i] == SP_PERF_SW ? "perf_task_clock" : NULL;
    int ok = probe ? cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, probe), "ok"))
                   : timer_works();
    if (ok && strcmp(picks, "off") == 0)
      picks = ev;
  }
  cJSON_AddStringToObject(s, "picks", picks);
}

/* The vector ISA ranks the BLAS check compares: a core's kernels against the CPU. */
enum { RANK_SSE, RANK_AVX, RANK_AVX2, RANK_AVX512 };
static const char *const rank_names[] = {"SSE", "AVX", "AVX2", "AVX-512"};

/* The widest ISA the kernels of OpenBLAS core name use (its openblas_get_corename() names,
 * 0.3.x's DYNAMIC_ARCH list), or -1 for a name not in it. */
static int core_rank(const char *name)
{
  static const struct {
    const char *name;
    int rank;
  } cores[] = {{"katmai", RANK_SSE},     {"coppermine", RANK_SSE},   {"northwood", RANK_SSE},
               {"prescott", RANK_SSE},   {"banias", RANK_SSE},       {"atom", RANK_SSE},
               {"core2", RANK_SSE},      {"penryn", RANK_SSE},       {"dunnington", RANK_SSE},
               {"nehalem", RANK_SSE},    {"athlon", RANK_SSE},       {"opteron", RANK_SSE},
               {"opteron_sse3", RANK_SSE}, {"barcelona", RANK_SSE},  {"nano", RANK_SSE},
               {"bobcat", RANK_SSE},     {"sandybridge", RANK_AVX},  {"bulldozer", RANK_AVX},
               {"piledriver", RANK_AVX}, {"steamroller", RANK_AVX},  {"excavator", RANK_AVX},
               {"haswell", RANK_AVX2},   {"zen", RANK_AVX2},         {"skylakex", RANK_AVX512},
               {"cooperlake", RANK_AVX512}, {"sapphirerapids", RANK_AVX512}};
  for (size_t i = 0; i < sizeof cores / sizeof *cores; i++)
    if (strcasecmp(name, cores[i].name) == 0)
      return cores[i].rank;
  return -1;
}

/* The system BLAS as a host gets it: the file the dynamic linker picks for libblas.so.3
 * (through alternatives links), loaded (OPENBLAS_CORETYPE, if set, applies as it would in the
 * host), and for OpenBLAS the core its dispatch picked, compared with what this CPU runs. Adds
 * libblas and blas {library, openblas, config, core, core_isa, coretype_env, below_cpu, suggest,
 * warning}. */
static void check_blas(cJSON *o, const ag_machine_t *m, const char *vendor)
{
  cJSON *b = cJSON_AddObjectToObject(o, "blas");
  void *h = dlopen("libblas.so.3", RTLD_NOW | RTLD_LOCAL);
  struct link_map *lm = NULL;
  char *real = NULL;
  if (h && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
    real = realpath(lm->l_name, NULL);
  if (real) {
    cJSON_AddStringToObject(o, "libblas", real);
    cJSON_AddStringToObject(b, "library", real);
  } else {
    cJSON_AddNullToObject(o, "libblas");
    cJSON_AddNullToObject(b, "library");
  }
  free(real);
  /* dlsym on the handle searches libblas.so.3's dependencies too (Debian's is a shim over
   * libopenblas.so.0). */
  char *(*corename)(void) = h ? (char *(*)(void))dlsym(h, "openblas_get_corename") : NULL;
  char *(*config)(void) = h ? (char *(*)(void))dlsym(h, "openblas_get_config") : NULL;
  cJSON_AddBoolToObject(b, "openblas", corename != NULL);
  const char *env = getenv("OPENBLAS_CORETYPE");
  if (env)
    cJSON_AddStringToObject(b, "coretype_env", env);
  else
    cJSON_AddNullToObject(b, "coretype_env");
  if (!corename)
    goto out;
  const char *core = corename(), *conf = config ? config() : "";
  cJSON_AddStringToObject(b, "config", conf ? conf : "");
  cJSON_AddStringToObject(b, "core", core ? core : "");
  int have = core ? core_rank(core) : -1;
  int cpu = m->exts & AG_X(AVX512F) ? RANK_AVX512
            : (m->exts & (AG_X(AVX2) | AG_X(FMA))) == (AG_X(AVX2) | AG_X(FMA)) ? RANK_AVX2
            : m->exts & AG_X(AVX) ? RANK_AVX
                                   : RANK_SSE;
  if (have >= 0)
    cJSON_AddStringToObject(b, "core_isa", rank_names[have]);
  else
    cJSON_AddNullToObject(b, "core_isa");
  cJSON_AddStringToObject(b, "cpu_isa", rank_names[cpu]);
  cJSON_AddBoolToObject(b, "below_cpu", have >= 0 && have < cpu);
  if (have < 0 || have >= cpu)
    goto out;
  /* Names OpenBLAS 0.3.21 accepts in OPENBLAS_CORETYPE (its COOPERLAKE is not one: "Core not
   * found"); SKYLAKEX's kernels run on every AVX-512 CPU, Zen 4's included. */
  int amd = strcmp(vendor, "AuthenticAMD") == 0 || strcmp(vendor, "HygonGenuine") == 0;
  const char *suggest = cpu == RANK_AVX512 ? "SKYLAKEX"
                        : cpu == RANK_AVX2 ? (amd ? "ZEN" : "HASWELL")
                                           : "SANDYBRIDGE";
  char line[1024];
  int version = conf ? (int)strcspn(conf, " ") : 0; /* "OpenBLAS 0.3.21 DYNAMIC_ARCH ..." */
  version += conf && conf[version] ? 1 + (int)strcspn(conf + version + 1, " ") : 0;
  snprintf(line, sizeof line, "the system BLAS (%.*s) runs its %s kernels (%s) on this %s CPU%s%s"
           "%s: set OPENBLAS_CORETYPE=%s in the environment of the programs you run, for its %s "
           "kernels", version, conf ? conf : "OpenBLAS", core, rank_names[have], rank_names[cpu],
           env ? ", as OPENBLAS_CORETYPE=" : "", env ? env : "", env ? " asks" : "", suggest,
           rank_names[cpu]);
  cJSON_AddStringToObject(b, "suggest", suggest);
  cJSON_AddStringToObject(b, "warning", line);
out:
  if (h)
    dlclose(h);
}

/* The machine model stored for cpu_key in the database at path: {cpu_key, measured_ns,
 * settled, isa, vregs, gflops {f32, f64: {"128": .., "256": .., "512": ..}}, timer_ns, compile
 * [{family, n, median_ns, mean_ns}]}, or {cpu_key, measured: false, note} when there is none;
 * with, when the database opens, kernels {object_key, stored, programs}: the kernels stored for
 * this CPU (flags: its /proc/cpuinfo flags) and a JIT on isa, and the programs that stored them. */
static cJSON *check_model(const char *dbopt, const char *cpu_key, const char *flags, int isa)
{
  cJSON *o = cJSON_CreateObject();
  char path[4096], err[1024], okey[336];
  st_db_t *db = NULL;
  st_machine_t rec;
  cJSON_AddStringToObject(o, "cpu_key", cpu_key);
  int rc = ins_db_path(dbopt, path, sizeof path) ? ST_ENOENT
           : access(path, F_OK) != 0            ? ST_ENOENT
                                                 : st_open(path, ST_OPEN_READONLY,
                                                           INS_READ_BUSY_MS, &db, err, sizeof err);
  if (!rc) {
    /* the kernels stored under the object key an agent would use here (its JIT's ISA) */
    ag_machine_object_key_for(cpu_key, flags, isa, okey, sizeof okey);
    st_rows_t *r = NULL;
    if (st_query(db, ST_Q_KERNELS, &r) == ST_OK) {
      st_rows_bind_text(r, 1, okey);
      if (st_rows_next(r) == 1) {
        cJSON *k = cJSON_AddObjectToObject(o, "kernels");
        cJSON_AddStringToObject(k, "object_key", okey);
        cJSON_AddNumberToObject(k, "stored", (double)st_rows_int(r, 0));
        cJSON_AddNumberToObject(k, "programs", (double)st_rows_int(r, 1));
      }
    }
    st_rows_close(r);
    int version = 0;
    st_schema_version(db, &version);
    rc = version < 6 ? ST_ENOENT : st_machine_load(db, cpu_key, &rec);
    st_close(db);
  }
  cJSON_AddBoolToObject(o, "measured", !rc && rec.measured_ns);
  if (rc || !rec.measured_ns) {
    cJSON_AddStringToObject(o, "note", rc && rc != ST_ENOENT
                                           ? st_errstr(rc)
                                           : "not measured on this CPU yet: the agent measures "
                                             "it (~20 ms, on a thread of its own) the first time "
                                             "a program calls an operator under it in JIT mode, "
                                             "e.g. opjit run -- PROGRAM, and stores it here");
    if (rc)
      return o;
  } else {
    cJSON_AddNumberToObject(o, "measured_ns", (double)rec.measured_ns);
    ag_machine_t m;
    ag_machine_from_store(&rec, &m);
    cJSON_AddBoolToObject(o, "settled", m.settled && rec.method == AG_MACHINE_METHOD);
    cJSON_AddStringToObject(o, "isa", rec.isa);
    cJSON_AddNumberToObject(o, "vregs", rec.vregs);
    cJSON *g = cJSON_AddObjectToObject(o, "gflops");
    for (int d = 0; d < 2; d++) {
      cJSON *t = cJSON_AddObjectToObject(g, d ? "f64" : "f32");
      for (int w = 0; w < 3; w++) {
        char bits[8];
        snprintf(bits, sizeof bits, "%d", 128 << w);
        if (rec.gflops[d][w] > 0)
          cJSON_AddNumberToObject(t, bits, rec.gflops[d][w]);
        else
          cJSON_AddNullToObject(t, bits);
      }
    }
    cJSON_AddNumberToObject(o, "timer_ns", rec.timer_ns);
  }
  cJSON *c = cJSON_AddArrayToObject(o, "compile");
  for (size_t i = 0; i < rec.nfamilies; i++) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "family", rec.families[i].family);
    cJSON_AddNumberToObject(f, "n", (double)rec.families[i].n);
    cJSON_AddNumberToObject(f, "median_ns", (double)rec.families[i].median_ns);
    cJSON_AddNumberToObject(f, "mean_ns", rec.families[i].mean_ns);
    cJSON_AddItemToArray(c, f);
  }
  return o;
}

static cJSON *check_machine(const char *dbopt)
{
  static char cpuinfo[1 << 16];
  char model[256], flags[4096], vendor[64], buf[64], key[320], exts[256], why[256];
  cJSON *o = cJSON_CreateObject();
  slurp("/proc/cpuinfo", cpuinfo, sizeof cpuinfo);
  cpuinfo_field(cpuinfo, "model name", model, sizeof model);
  cpuinfo_field(cpuinfo, "flags", flags, sizeof flags);
  cpuinfo_field(cpuinfo, "vendor_id", vendor, sizeof vendor);
  cJSON_AddStringToObject(o, "cpu_model", model);
  cJSON_AddNumberToObject(o, "ncpu", (double)sysconf(_SC_NPROCESSORS_ONLN));
  cJSON_AddBoolToObject(o, "avx2", has_word(flags, "avx2"));
  cJSON_AddBoolToObject(o, "fma", has_word(flags, "fma"));
  cJSON_AddBoolToObject(o, "avx512f", has_word(flags, "avx512f"));
  ag_machine_t m;
  ag_opts_t opts;
  ag_machine_detect(&m);
  ag_machine_exts_format(m.exts, exts, sizeof exts);
  cJSON_AddStringToObject(o, "isa", exts);
  cJSON_AddStringToObject(o, "widest_isa", ag_isa_name(m.widest));
  ag_opts_parse(&opts, ins_getenv, NULL);
  int jit_isa = ag_machine_isa_choose(opts.num[AG_OPT_ISA], m.exts, why, sizeof why);
  cJSON_AddStringToObject(o, "jit_isa", ag_isa_name(jit_isa));
  if (why[0])
    cJSON_AddStringToObject(o, "jit_isa_warning", why);
  ag_machine_cpu_key(model, flags, key, sizeof key);
  cJSON_AddItemToObject(o, "model", check_model(dbopt, key, flags, jit_isa));
  int paranoid = slurp("/proc/sys/kernel/perf_event_paranoid", buf, sizeof buf) > 0 ? atoi(buf) : 99;
  if (paranoid != 99)
    cJSON_AddNumberToObject(o, "perf_event_paranoid", paranoid);
  else
    cJSON_AddNullToObject(o, "perf_event_paranoid");
  check_perf(o, "perf_cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, paranoid);
  check_perf(o, "perf_task_clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, paranoid);
  int tick = sp_tick_hz(); /* the scheduler's tick: the timers' ceiling (sampler/ladder.h) */
  if (tick > 0)
    cJSON_AddNumberToObject(o, "tick_hz", tick);
  else
    cJSON_AddNullToObject(o, "tick_hz");
  check_sampling(o, &opts, tick);
  ag_opts_free(&opts);
  check_blas(o, &m, vendor);
  return o;
}

/* ---- human output ------------------------------------------------------------------------ */

static const char *str(const cJSON *o, const char *key)
{
  const cJSON *j = cJSON_GetObjectItem(o, key);
  static char num[32];
  if (cJSON_IsString(j))
    return j->valuestring;
  if (cJSON_IsNumber(j)) {
    snprintf(num, sizeof num, "%.0f", j->valuedouble);
    return num;
  }
  return cJSON_IsBool(j) ? (cJSON_IsTrue(j) ? "yes" : "no") : "-";
}

static void print_perf(const cJSON *m, const char *key, const char *label)
{
  const cJSON *p = cJSON_GetObjectItem(m, key);
  printf("  %-20s %s%s\n", label, cJSON_IsTrue(cJSON_GetObjectItem(p, "ok")) ? "works" : "fails: ",
         cJSON_IsTrue(cJSON_GetObjectItem(p, "ok")) ? "" : str(p, "error"));
}

/* The sampling line: what OPJIT_EVENTS picks here at OPJIT_SAMPLE_HZ, the ladder it walks, and
 * the tick that decides whether timers come before task-clock. */
static void print_sampling(const cJSON *m)
{
  const cJSON *s = cJSON_GetObjectItem(m, "sampling"), *step;
  char ladder[128] = "";
  size_t at = 0;
  cJSON_ArrayForEach(step, cJSON_GetObjectItem(s, "ladder"))
  {
    int w = snprintf(ladder + at, sizeof ladder - at, "%s%s", at ? " > " : "",
                     cJSON_GetStringValue(step));
    if (w < 0 || (size_t)w >= sizeof ladder - at)
      break;
    at += (size_t)w;
  }
  int hz = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(s, "hz"));
  if (strcmp(str(s, "picks"), "off") == 0)
    printf("  %-20s off (OPJIT_SAMPLE_HZ=%d, OPJIT_EVENTS=%s)\n", "sampling", hz,
           str(s, "events"));
  else if (strcmp(str(s, "events"), "auto") == 0 || strcmp(str(s, "events"), "cycles") == 0)
    printf("  %-20s %s at %d Hz (OPJIT_EVENTS=%s tries %s; without a PMU CPU-time timers come "
           "before task-clock up to the scheduler's tick, %s Hz)\n",
           "sampling", str(s, "picks"), hz, str(s, "events"), ladder, str(m, "tick_hz"));
  else
    printf("  %-20s %s at %d Hz (OPJIT_EVENTS=%s tries %s)\n", "sampling", str(s, "picks"), hz,
           str(s, "events"), ladder);
}

/* Three widths' figures of one dtype ("-" where not measured). */
static void print_peaks(const cJSON *t, const char *label)
{
  char v[3][16];
  static const char *const bits[] = {"128", "256", "512"};
  for (int w = 0; w < 3; w++) {
    const cJSON *x = cJSON_GetObjectItem(t, bits[w]);
    snprintf(v[w], sizeof v[w], cJSON_IsNumber(x) ? "%.1f" : "-", cJSON_GetNumberValue(x));
  }
  printf("  %-20s %s / %s / %s GF/s (128 / 256 / 512-bit vectors)\n", label, v[0], v[1], v[2]);
}

static void print_model(const cJSON *mo)
{
  const cJSON *c = cJSON_GetObjectItem(mo, "compile"), *f,
              *k = cJSON_GetObjectItem(mo, "kernels");
  printf("  %-20s %s\n", "cpu key", str(mo, "cpu_key"));
  double progs = cJSON_GetNumberValue(cJSON_GetObjectItem(k, "programs"));
  if (k)
    printf("  %-20s %.0f for this CPU, stored by runs of %.0f program%s: each is placed, not "
           "compiled, when its signature gets hot in any program\n", "stored kernels",
           cJSON_GetNumberValue(cJSON_GetObjectItem(k, "stored")), progs, progs == 1 ? "" : "s");
  if (!cJSON_IsTrue(cJSON_GetObjectItem(mo, "measured"))) {
    printf("  %-20s %s\n", "machine model", str(mo, "note"));
  } else {
    time_t t = (time_t)(cJSON_GetNumberValue(cJSON_GetObjectItem(mo, "measured_ns")) / 1e9);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&t));
    printf("  %-20s measured %s, stored, %s; %s vector registers\n", "machine model", when,
           cJSON_IsTrue(cJSON_GetObjectItem(mo, "settled"))
               ? "settled (each peak measured again agreed)"
               : "not settled (the next run measures it again)",
           str(mo, "vregs"));
    print_peaks(cJSON_GetObjectItem(cJSON_GetObjectItem(mo, "gflops"), "f32"), "fma peak f32");
    print_peaks(cJSON_GetObjectItem(cJSON_GetObjectItem(mo, "gflops"), "f64"), "fma peak f64");
    printf("  %-20s %.1f ns\n", "clock read",
           cJSON_GetNumberValue(cJSON_GetObjectItem(mo, "timer_ns")));
  }
  if (!cJSON_GetArraySize(c)) {
    printf("  %-20s none measured yet (the tiers assume %.0f ms)\n", "compile",
           AG_MACHINE_COMPILE_GUESS_NS / 1e6);
    return;
  }
  cJSON_ArrayForEach(f, c) /* (AG_MACHINE_LLVM_LOAD: the JIT module's loads, not compiles) */
    printf("  %-20s %s: %.1f ms median, %.1f ms mean over %s %s (CPU time)\n",
           f == c->child ? "compile" : "", str(f, "family"),
           cJSON_GetNumberValue(cJSON_GetObjectItem(f, "median_ns")) / 1e6,
           cJSON_GetNumberValue(cJSON_GetObjectItem(f, "mean_ns")) / 1e6, str(f, "n"),
           strcmp(str(f, "family"), AG_MACHINE_LLVM_LOAD) ? "compiles" : "loads");
}

static void print_blas(const cJSON *m)
{
  const cJSON *b = cJSON_GetObjectItem(m, "blas");
  printf("  %-20s %s\n", "libblas.so.3", str(m, "libblas"));
  if (cJSON_IsTrue(cJSON_GetObjectItem(b, "openblas")))
    printf("  %-20s %s, core %s (%s kernels%s%s)\n", "blas core", str(b, "config"),
           str(b, "core"), str(b, "core_isa"),
           cJSON_IsString(cJSON_GetObjectItem(b, "coretype_env")) ? ", OPENBLAS_CORETYPE=" : "",
           cJSON_IsString(cJSON_GetObjectItem(b, "coretype_env")) ? str(b, "coretype_env") : "");
  else if (!cJSON_IsNull(cJSON_GetObjectItem(b, "library")))
    printf("  %-20s not OpenBLAS: no core to check\n", "blas core");
  if (cJSON_GetObjectItem(b, "warning"))
    printf("warning: %s\n", str(b, "warning"));
}

static void print_report(const cJSON *doc)
{
  const cJSON *opts = cJSON_GetObjectItem(doc, "options"), *o, *w;
  static const char *const head[] = {"OPTION", "VALUE", "SOURCE", "MEANING"};
  ins_table_t *t = ins_table_new("llll", head);
  cJSON_ArrayForEach(o, opts)
  {
    const char *row[] = {str(o, "name"), NULL, NULL, NULL};
    char value[512], source[64];
    snprintf(value, sizeof value, "%s", str(o, "value"));
    snprintf(source, sizeof source, "%s", str(o, "source"));
    row[1] = *value ? value : "\"\"", row[2] = source, row[3] = str(o, "help");
    ins_table_row(t, row);
  }
  printf("options\n");
  ins_table_print(t, stdout);
  ins_table_free(t);
  cJSON_ArrayForEach(w, cJSON_GetObjectItem(doc, "option_warnings"))
    printf("warning: %s\n", w->valuestring);

  const cJSON *d = cJSON_GetObjectItem(doc, "database");
  printf("\ndatabase\n  %-20s %s\n", "path", str(d, "path"));
  printf("  %-20s %s\n", "exists", str(d, "exists"));
  if (cJSON_GetObjectItem(d, "schema_version")) {
    printf("  %-20s %s", "schema", str(d, "schema_version"));
    printf(" (this opjit: %s)\n", str(d, "supported_schema_version"));
    printf("  %-20s %s\n", "quick_check", str(d, "quick_check"));
    printf("  %-20s %s\n", "runs", str(d, "runs"));
    printf("  %-20s %s\n", "journal mode", str(d, "journal_mode"));
  } else if (cJSON_GetObjectItem(d, "quick_check")) {
    printf("  %-20s %s\n", "quick_check", str(d, "quick_check"));
  }
  printf("  %-20s %s\n", "file mode", str(d, "mode"));
  printf("  %-20s %s\n", "folder mode", str(d, "folder_mode"));
  if (cJSON_GetObjectItem(d, "note"))
    printf("  %-20s %s\n", "note", str(d, "note"));
  printf("  %-20s %s\n", "usable", str(d, "usable"));
  if (cJSON_GetObjectItem(d, "error"))
    printf("error: %s\n", str(d, "error"));
  cJSON_ArrayForEach(w, cJSON_GetObjectItem(d, "warnings"))
    printf("warning: %s\n", w->valuestring);

  const cJSON *a = cJSON_GetObjectItem(doc, "agent");
  printf("\nagent\n");
  if (cJSON_IsNull(cJSON_GetObjectItem(a, "path"))) {
    printf("  %-20s not found (searched %s)\n", "library", str(a, "searched"));
  } else {
    printf("  %-20s %s\n", "library", str(a, "path"));
    printf("  %-20s %s (%s)\n", "store module", str(a, "store_module"),
           cJSON_IsTrue(cJSON_GetObjectItem(a, "store_module_found")) ? "found" : "MISSING");
    printf("  %-20s %s (%s)\n", "jit module", str(a, "jit_module"),
           cJSON_IsTrue(cJSON_GetObjectItem(a, "jit_module_found")) ? "found" : "MISSING");
  }
  if (cJSON_IsTrue(cJSON_GetObjectItem(a, "llvm_linked_in")))
    printf("  %-20s 19, linked into %s\n", "LLVM", str(a, "llvm_path"));
  else if (cJSON_IsTrue(cJSON_GetObjectItem(a, "llvm_found")))
    printf("  %-20s %s (%s)\n", "LLVM", str(a, "llvm_needed"), str(a, "llvm_path"));
  else
    printf("  %-20s %s not found (install LLVM 19: apt-get install libllvm19)\n", "LLVM",
           str(a, "llvm_needed"));
  printf("  %-20s %s\n", "jit", cJSON_IsTrue(cJSON_GetObjectItem(a, "jit_ready"))
                                  ? "can load (OPJIT_MODE=jit compiles hot signatures)"
                                  : "cannot load: OPJIT_MODE=jit runs as profile");

  const cJSON *m = cJSON_GetObjectItem(doc, "machine");
  printf("\nmachine\n  %-20s %s (%s CPUs)\n", "cpu", str(m, "cpu_model"), str(m, "ncpu"));
  printf("  %-20s %s\n", "isa", str(m, "isa"));
  printf("  %-20s %s (widest here: %s)\n", "jit isa", str(m, "jit_isa"), str(m, "widest_isa"));
  if (cJSON_GetObjectItem(m, "jit_isa_warning"))
    printf("warning: %s\n", str(m, "jit_isa_warning"));
  print_model(cJSON_GetObjectItem(m, "model"));
  printf("  %-20s %s\n", "perf_event_paranoid", str(m, "perf_event_paranoid"));
  print_perf(m, "perf_cycles", "hw cycles");
  print_perf(m, "perf_task_clock", "sw task-clock");
  print_sampling(m);
  print_blas(m);
  printf("\n%s\n", cJSON_IsTrue(cJSON_GetObjectItem(doc, "healthy")) ? "healthy"
                                                                     : "unhealthy: the database is unusable");
}

static int cmd_doctor(int argc, char **argv)
{
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL;
  int json = 0, usable;
  for (int c; (c = getopt_long(argc, argv, "d:jh", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
    case 'j': json = 1; break;
    case 'h': return ins_help(&ins_cmd_doctor);
    default: return ins_bad_option(&ins_cmd_doctor, argv);
    }
  }
  int rc = ins_no_operands(&ins_cmd_doctor, argc, argv);
  if (rc)
    return rc;
  cJSON *doc = cJSON_CreateObject();
  option_warnings = cJSON_CreateArray();
  cJSON_AddItemToObject(doc, "options", check_options());
  cJSON_AddItemToObject(doc, "option_warnings", option_warnings);
  cJSON_AddItemToObject(doc, "database", check_database(dbopt, &usable));
  cJSON_AddItemToObject(doc, "agent", check_agent());
  cJSON_AddItemToObject(doc, "machine", check_machine(dbopt));
  cJSON_AddBoolToObject(doc, "healthy", usable);
  if (json) {
    if (ins_json_emit(doc))
      return INS_EXIT_FAIL;
  } else {
    print_report(doc);
    cJSON_Delete(doc);
  }
  return usable ? INS_EXIT_OK : INS_EXIT_FAIL;
}

const ins_cmd_t ins_cmd_doctor = {
    .name = "doctor",
    .main = cmd_doctor,
    .synopsis = "[--db PATH] [--json]",
    .summary = "check the options, the database, the agent and this machine",
    .help = "Shows the effective OPJIT_* options as the agent would parse them from this\n"
            "environment (bad values are reported), the database's path, schema, integrity,\n"
            "permissions and journal mode, where the agent library is, whether its JIT can\n"
            "load (libopjit-jit.so beside the agent and the LLVM 19 library it needs, read from\n"
            "the files, never loaded), and what this machine offers: its vector ISAs, the\n"
            "machine model the agent measured and stored for this CPU (FMA peaks, clock\n"
            "cost, compile times), the kernels stored for it (any program's runs), perf_event\n"
            "access, and the system BLAS: which library libblas.so.3 is, and for OpenBLAS\n"
            "the core it runs (OPENBLAS_CORETYPE applies),\n"
            "with a warning and the setting to use when its kernels are narrower than the CPU.\n"
            "Exits 1 when the database is unusable: damaged, from a newer opjit, or where the\n"
            "agent could not write it as this user (the file, or the folder it is created in).\n\n"
            "options:\n"
            "  --db PATH    the profile database\n"
            "  --json       one JSON document\n"
            "  -h, --help   this help\n",
};
