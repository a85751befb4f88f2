/* SPDX-License-Identifier: MIT */
/* The aggregator: interned strings, a PC -> symbol cache, and one counting map keyed by
 * (operator, kind, interned string or number). Open addressing, doubled when half full.
 * Symbols: the object holding a PC from dl_iterate_phdr, then that object's symbol table
 * (.symtab, else .dynsym, or its separate debug file) read once through libdw's dwfl, which is
 * loaded on first need (the agent links libc only), and searched by address; dladdr's dynamic
 * symbols only where no table can be read (the vDSO, no libdw). Both dladdr and
 * dwfl_module_addrinfo scan every symbol of the object for each PC: ~2 ms a PC in
 * libtorch_cpu's 35,000, which kept the writer thread busy for 20-30 % of a CPU in a sampled
 * PyTorch program. */
#define _GNU_SOURCE
#include "aggregate.h"

#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

enum { K_OP, K_PC, K_STACK, K_COUNTER }; /* what a count is of */

typedef struct agg_key_s {
  uint32_t op, kind;
  const char *s; /* interned (K_PC: the symbol; K_STACK: the folded stack) */
  const char *module; /* K_PC: interned module path */
  uint64_t n;    /* K_COUNTER: counter index */
} agg_key_t;

typedef struct count_s {
  agg_key_t key;
  uint64_t value;
  int used;
} count_t;

typedef struct str_s {
  char *s;
  uint64_t hash;
} str_t;

typedef struct pcsym_s {
  uint64_t pc;
  const char *module, *symbol, *frame; /* interned; frame = folded frame name */
  int opmod;                           /* the PC is in an operator module */
  int anon;                            /* in no module (JIT code, or unknown): its name holds
                                          until the code there changes */
} pcsym_t;

typedef struct range_s { /* [lo, hi) belongs to one symbol (or one 256-byte bucket) */
  uint64_t lo, hi;
  pcsym_t sym;
} range_t;

/* libdw's dwfl, from libdw.so.1 (NULL functions: not installed; dynamic symbols only). */
static struct {
  Dwfl *(*begin)(const Dwfl_Callbacks *);
  void (*end)(Dwfl *);
  void (*report_begin_add)(Dwfl *);
  Dwfl_Module *(*report_elf)(Dwfl *, const char *, const char *, int, GElf_Addr, bool);
  int (*report_end)(Dwfl *, int (*)(Dwfl_Module *, void *, const char *, Dwarf_Addr, void *),
                    void *);
  int (*getsymtab)(Dwfl_Module *);
  const char *(*getsym_info)(Dwfl_Module *, int, GElf_Sym *, GElf_Addr *, GElf_Word *, Elf **,
                             Dwarf_Addr *);
  int (*build_id)(Dwfl_Module *, const unsigned char **, GElf_Addr *);
  Elf_Scn *(*getscn)(Elf *, size_t); /* libelf's, which libdw links */
  GElf_Shdr *(*getshdr)(Elf_Scn *, GElf_Shdr *);
  Dwfl_Callbacks cb;
} dw;
static pthread_once_t dw_once = PTHREAD_ONCE_INIT;

/* An object's separate debug file, where Debian's -dbgsym packages put it (by build-id): the
 * fd and its malloc'd path in *out, or -1. Not libdw's standard search, which would ask
 * debuginfod servers (DEBUGINFOD_URLS) over the network from inside the host. */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
                          Dwarf_Addr base, const char *file_name, const char *debuglink,
                          GElf_Word crc, char **out)
{
  (void)userdata, (void)modname, (void)base, (void)file_name, (void)debuglink, (void)crc;
  const unsigned char *id;
  GElf_Addr at;
  int n = dw.build_id(mod, &id, &at);
  if (n < 2 || n > 64)
    return -1;
  char path[192];
  int k = snprintf(path, sizeof path, "/usr/lib/debug/.build-id/%02x/", id[0]);
  for (int i = 1; i < n; i++)
    k += snprintf(path + k, sizeof path - (size_t)k, "%02x", id[i]);
  snprintf(path + k, sizeof path - (size_t)k, ".debug");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && !(*out = strdup(path))) {
    close(fd);
    return -1;
  }
  return fd;
}

static void dw_load(void)
{
  static const char *const names[] = {"dwfl_begin",         "dwfl_end",
                                      "dwfl_report_begin_add", "dwfl_report_elf",
                                      "dwfl_report_end",    "dwfl_module_getsymtab",
                                      "dwfl_module_getsym_info", "dwfl_module_build_id",
                                      "elf_getscn",         "gelf_getshdr"};
  void *h = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL), *f[10];
  for (int i = 0; i < 10; i++)
    if (!h || !(f[i] = dlsym(h, names[i])))
      return;
  *(void **)&dw.begin = f[0], *(void **)&dw.end = f[1], *(void **)&dw.report_begin_add = f[2];
  *(void **)&dw.report_elf = f[3], *(void **)&dw.report_end = f[4];
  *(void **)&dw.getsymtab = f[5], *(void **)&dw.getsym_info = f[6], *(void **)&dw.build_id = f[7];
  *(void **)&dw.getscn = f[8], *(void **)&dw.getshdr = f[9];
  dw.cb.find_debuginfo = find_debuginfo; /* report_elf opens the objects: no find_elf */
}

#define SP_AGG_MODS 256 /* objects whose symbol tables an aggregation opens */

/* One symbol of an object's table, as dwfl reads it (.symtab, else .dynsym; or the separate
 * debug file's), at its address in this process. */
typedef struct modsym_s {
  uint64_t lo, size;
  uint64_t maxend;  /* the furthest end of this and every earlier symbol of the table */
  uint64_t scn_end; /* a symbol without a size: the end of its section */
  const char *name; /* dwfl's: valid while the aggregation's dwfl lives */
  uint32_t ndx;     /* its place in the table */
  int rank;         /* of aliases, the higher names the address: GLOBAL, WEAK, LOCAL, then
                       default visibility (the names dladdr gives come first) */
} modsym_t;

struct sp_agg_s {
  range_t *ranges; /* sorted by lo: most PCs are found here, without a symbol search */
  size_t nranges, capranges;
  count_t *counts;
  size_t ncounts, capcounts;
  str_t *strs;
  size_t nstrs, capstrs;
  pcsym_t *pcs;
  size_t npcs, cappcs;
  const void *opmods[16]; /* base addresses of declared operator modules */
  int nopmods;
  sp_code_lookup_fn code_lookup;
  sp_code_gen_fn code_gen;
  uint64_t seen_gen;      /* code_gen's value when the names of anonymous PCs were cached */
  const void *main_base;  /* the executable's load address: dladdr names it after argv[0], */
  char exe[512];          /* which a program may change; /proc/self/exe is its real path */
  Dwfl *dwfl;             /* the objects' .symtab and debug files, or NULL */
  struct {
    const void *base;     /* load address (dladdr's dli_fbase) */
    modsym_t *syms;       /* its symbol table sorted by address; NULL: not readable */
    size_t nsyms;
  } mods[SP_AGG_MODS];
  int nmods;
};

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t mix(uint64_t h)
{
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

/* Grows an open-addressing array to twice its size (or 64) and reinserts with rehash. */
#define GROW(arr, n, cap, type, HASH, EMPTY)                                                 \
  do {                                                                                       \
    size_t ncap_ = (cap) ? 2 * (cap) : 64;                                                   \
    type *na_ = calloc(ncap_, sizeof *na_);                                                  \
    if (!na_)                                                                                \
      return NULL;                                                                           \
    for (size_t i_ = 0; i_ < (cap); i_++) {                                                  \
      if (EMPTY((arr)[i_]))                                                                  \
        continue;                                                                            \
      size_t j_ = HASH((arr)[i_]) & (ncap_ - 1);                                             \
      while (!EMPTY(na_[j_]))                                                                \
        j_ = (j_ + 1) & (ncap_ - 1);                                                         \
      na_[j_] = (arr)[i_];                                                                   \
    }                                                                                        \
    free(arr);                                                                               \
    (arr) = na_;                                                                             \
    (cap) = ncap_;                                                                           \
  } while (0)

#define STR_EMPTY(x) (!(x).s)
#define STR_HASH(x) ((x).hash)
#define PC_EMPTY(x) (!(x).module)
#define PC_HASH(x) (mix((x).pc))
#define COUNT_EMPTY(x) (!(x).used)
#define COUNT_HASH(x) (key_hash(&(x).key))

static uint64_t key_hash(const agg_key_t *k)
{
  return mix(((uint64_t)k->op << 32 | k->kind) ^ (uint64_t)(uintptr_t)k->s * 31 ^
             (uint64_t)(uintptr_t)k->module * 17 ^ k->n * 0x9e3779b97f4a7c15ull);
}

/* The interned copy of s (NULL when out of memory). */
static const char *intern(sp_agg_t *a, const char *s)
{
  if (2 * (a->nstrs + 1) > a->capstrs)
    GROW(a->strs, a->nstrs, a->capstrs, str_t, STR_HASH, STR_EMPTY);
  uint64_t h = hash_bytes(s, strlen(s), 0xcbf29ce484222325ull);
  size_t i = h & (a->capstrs - 1);
  for (; a->strs[i].s; i = (i + 1) & (a->capstrs - 1))
    if (a->strs[i].hash == h && strcmp(a->strs[i].s, s) == 0)
      return a->strs[i].s;
  if (!(a->strs[i].s = strdup(s)))
    return NULL;
  a->strs[i].hash = h;
  a->nstrs++;
  return a->strs[i].s;
}

static int is_opmod_name(const char *path)
{
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  return strstr(base, "blas") || strstr(base, "lapack") || strstr(base, "blis") ||
         strstr(base, "mkl");
}

void sp_frame_name(const char *module, const char *symbol, char *out, size_t len)
{
  const char *base = strrchr(module, '/');
  snprintf(out, len, "%s`%s", base ? base + 1 : module, symbol);
  for (char *p = out; *p; p++)
    if (*p == ';' || *p == ' ' || *p == '\n' || *p == '\t')
      *p = '_';
}

/* The cached range holding pc, or NULL. */
static const range_t *find_range(const sp_agg_t *a, uint64_t pc)
{
  size_t lo = 0, hi = a->nranges;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (a->ranges[mid].hi <= pc)
      lo = mid + 1;
    else if (a->ranges[mid].lo > pc)
      hi = mid;
    else
      return &a->ranges[mid];
  }
  return NULL;
}

/* Remembers that [lo, hi) is symbol p (ignored when out of memory or overlapping). */
static void add_range(sp_agg_t *a, uint64_t lo, uint64_t hi, const pcsym_t *p)
{
  if (a->nranges == a->capranges) {
    size_t cap = a->capranges ? 2 * a->capranges : 256;
    range_t *r = realloc(a->ranges, cap * sizeof *r);
    if (!r)
      return;
    a->ranges = r, a->capranges = cap;
  }
  size_t at = 0;
  while (at < a->nranges && a->ranges[at].lo < lo)
    at++;
  if ((at > 0 && a->ranges[at - 1].hi > lo) || (at < a->nranges && a->ranges[at].lo < hi))
    return;
  memmove(a->ranges + at + 1, a->ranges + at, (a->nranges - at) * sizeof *a->ranges);
  a->ranges[at] = (range_t){lo, hi, *p};
  a->nranges++;
}

/* The object holding a PC (dl_iterate_phdr: no symbol lookup, unlike dladdr, whose symbol
 * search walks the whole dynamic symbol table: ~2 ms a PC in libtorch_cpu's 35,000). */
typedef struct object_s {
  uint64_t pc;
  uint64_t base;    /* where it is mapped from (dladdr's dli_fbase) */
  uint64_t bias;    /* its load bias (l_addr) */
  char path[512];
} object_t;

static int object_of_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
  (void)size;
  object_t *o = arg;
  uint64_t first = UINT64_MAX;
  int hit = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD)
      continue;
    uint64_t lo = info->dlpi_addr + ph->p_vaddr;
    first = ph->p_vaddr < first ? ph->p_vaddr : first;
    hit |= o->pc >= lo && o->pc - lo < ph->p_memsz;
  }
  if (!hit)
    return 0;
  o->base = info->dlpi_addr + (first & ~(uint64_t)(getauxval(AT_PAGESZ) - 1));
  o->bias = info->dlpi_addr;
  snprintf(o->path, sizeof o->path, "%s", info->dlpi_name ? info->dlpi_name : "");
  return 1;
}

static int by_address(const void *x, const void *y)
{
  const modsym_t *p = x, *q = y;
  return p->lo != q->lo ? (p->lo < q->lo ? -1 : 1) : (p->ndx < q->ndx ? -1 : p->ndx > q->ndx);
}

/* Reads the symbol table of the object o (its file: path) once, through dwfl, sorted by
 * address. Symbols that hold no code (undefined, absolute such as version names, sections,
 * files, TLS) are left out. Returns its slot, or -1 (no libdw, too many objects). */
static int object_index(sp_agg_t *a, const object_t *o, const char *path)
{
  int k = 0;
  while (k < a->nmods && a->mods[k].base != (const void *)(uintptr_t)o->base)
    k++;
  if (k < a->nmods)
    return k;
  pthread_once(&dw_once, dw_load);
  if (k == SP_AGG_MODS || !dw.begin || (!a->dwfl && !(a->dwfl = dw.begin(&dw.cb))))
    return -1;
  a->mods[k].base = (const void *)(uintptr_t)o->base;
  a->mods[k].syms = NULL;
  a->mods[k].nsyms = 0;
  a->nmods++;
  if (path[0] != '/') /* the vDSO, an object loaded from memory: no file to read */
    return k;
  dw.report_begin_add(a->dwfl);
  Dwfl_Module *mod = dw.report_elf(a->dwfl, path, path, -1, o->bias, false);
  dw.report_end(a->dwfl, NULL, NULL);
  int n = mod ? dw.getsymtab(mod) : -1;
  modsym_t *syms = n > 0 ? malloc((size_t)n * sizeof *syms) : NULL;
  if (!syms)
    return k;
  size_t m = 0;
  for (int i = 1; i < n; i++) {
    GElf_Sym sym;
    GElf_Addr addr;
    GElf_Word shndx;
    Elf *elf;
    const char *name = dw.getsym_info(mod, i, &sym, &addr, &shndx, &elf, NULL);
    int type = GELF_ST_TYPE(sym.st_info), bind = GELF_ST_BIND(sym.st_info);
    if (!name || !name[0] || shndx == SHN_UNDEF || shndx >= SHN_LORESERVE ||
        type == STT_SECTION || type == STT_FILE || type == STT_TLS)
      continue;
    GElf_Shdr sh;
    Elf_Scn *scn = sym.st_size ? NULL : dw.getscn(elf, shndx);
    uint64_t scn_end = scn && dw.getshdr(scn, &sh) ? sh.sh_addr + sh.sh_size + (addr - sym.st_value)
                                                   : addr;
    int rank = bind == STB_GLOBAL ? 3 : bind == STB_WEAK ? 2 : bind == STB_LOCAL;
    syms[m++] = (modsym_t){addr, sym.st_size, 0, scn_end, name, (uint32_t)i,
                           rank << 1 | (GELF_ST_VISIBILITY(sym.st_other) == STV_DEFAULT)};
  }
  qsort(syms, m, sizeof *syms, by_address);
  for (size_t i = 0; i < m; i++) {
    uint64_t end = syms[i].lo + syms[i].size;
    syms[i].maxend = i && syms[i - 1].maxend > end ? syms[i - 1].maxend : end;
  }
  a->mods[k].syms = syms;
  a->mods[k].nsyms = m;
  return k;
}

/* The symbol holding pc in o, from its sorted table: 1 with *name and its extent [*lo, *hi),
 * 0 when none holds it, -1 when the object's table could not be read. The closest symbol
 * whose size covers pc wins (of aliases, the better rank, the smaller size, the first in the
 * table); without one, an assembly label without a size names what follows it in its
 * section up to the next symbol, when no sized symbol reaches past it (dwfl_module_addrinfo's
 * rule). */
static int object_symbol(sp_agg_t *a, const object_t *o, const char *path, uint64_t pc,
                         const char **name, uint64_t *lo, uint64_t *hi)
{
  int k = object_index(a, o, path);
  if (k < 0 || !a->mods[k].syms)
    return -1;
  const modsym_t *s = a->mods[k].syms, *best = NULL;
  size_t l = 0, r = a->mods[k].nsyms; /* the first symbol above pc: r */
  while (l < r) {
    size_t mid = (l + r) / 2;
    if (s[mid].lo <= pc)
      l = mid + 1;
    else
      r = mid;
  }
  if (!r)
    return 0;
  for (size_t j = r; j-- > 0 && s[j].maxend > pc && (!best || s[j].lo == best->lo);)
    if (s[j].size && pc - s[j].lo < s[j].size &&
        (!best || s[j].rank > best->rank || (s[j].rank == best->rank && s[j].size <= best->size)))
      best = &s[j];
  if (best) {
    *name = best->name, *lo = best->lo, *hi = best->lo + best->size;
    return 1;
  }
  const modsym_t *label = &s[r - 1];
  uint64_t end = r < a->mods[k].nsyms && s[r].lo < label->scn_end ? s[r].lo : label->scn_end;
  if (label->size || label->maxend > label->lo || pc >= end)
    return 0;
  *name = label->name, *lo = label->lo, *hi = end;
  return 1;
}

/* The symbol of pc: from the range cache (a symbol's extent), else the PC cache, else the
 * sorted symbol table of the object holding it (dladdr's dynamic symbols when that table
 * cannot be read). PCs in no symbol are named by their module offset rounded to 256 bytes, so
 * one stripped function does not become a thousand names. NULL when out of memory. */
static const pcsym_t *symbolise(sp_agg_t *a, uint64_t pc)
{
  const range_t *hit = find_range(a, pc);
  if (hit)
    return &hit->sym;
  if (2 * (a->npcs + 1) > a->cappcs)
    GROW(a->pcs, a->npcs, a->cappcs, pcsym_t, PC_HASH, PC_EMPTY);
  size_t i = mix(pc) & (a->cappcs - 1);
  for (; a->pcs[i].module; i = (i + 1) & (a->cappcs - 1))
    if (a->pcs[i].pc == pc)
      return &a->pcs[i];
  object_t o = {.pc = pc};
  char sym[64], frame[512], unversioned[512];
  const char *module = "[unknown]", *name = NULL;
  uint64_t lo = 0, hi = 0;
  int opmod = 0, anon = 0;
  if (dl_iterate_phdr(object_of_cb, &o)) {
    module = o.base == (uint64_t)(uintptr_t)a->main_base && a->exe[0] ? a->exe
             : o.path[0]                                            ? o.path
                                                                    : "[main]";
    int found = object_symbol(a, &o, module, pc, &name, &lo, &hi);
    const char *at = found == 1 ? strchr(name, '@') : NULL;
    if (at) { /* .symtab's "fclose@@GLIBC_2.2.5": the name, as dladdr gives it */
      snprintf(unversioned, sizeof unversioned, "%.*s", (int)(at - name), name);
      name = unversioned;
    }
    Dl_info di;
    const ElfW(Sym) *es = NULL;
    if (found < 0 && dladdr1((void *)pc, &di, (void **)&es, RTLD_DL_SYMENT) && di.dli_sname &&
        es && es->st_size && pc - (uint64_t)(uintptr_t)di.dli_saddr < es->st_size) {
      name = di.dli_sname;
      lo = (uint64_t)(uintptr_t)di.dli_saddr;
      hi = lo + es->st_size;
      found = 1;
    }
    if (found != 1) {
      uint64_t off = (pc - o.base) & ~(uint64_t)0xff;
      snprintf(sym, sizeof sym, "+0x%llx", (unsigned long long)off);
      name = sym;
      lo = o.base + off;
      hi = lo + 0x100;
    }
    opmod = is_opmod_name(module);
    for (int k = 0; k < a->nopmods && !opmod; k++)
      opmod = a->opmods[k] == (const void *)(uintptr_t)o.base;
  } else if (a->code_lookup && a->code_lookup(pc, &lo, &hi, &name)) {
    module = "[jit]";
    opmod = anon = 1;
  } else {
    snprintf(sym, sizeof sym, "0x%llx", (unsigned long long)pc);
    name = sym;
    anon = 1;
  }
  sp_frame_name(module, name, frame, sizeof frame);
  pcsym_t *p = &a->pcs[i];
  if (!(p->symbol = intern(a, name)) || !(p->frame = intern(a, frame)) ||
      !(p->module = intern(a, module)))
    return p->module = NULL, NULL;
  p->pc = pc;
  p->opmod = opmod;
  p->anon = anon;
  a->npcs++;
  if (hi > lo) {
    add_range(a, lo, hi, p);
    const range_t *r = find_range(a, pc);
    return r ? &r->sym : p;
  }
  return p;
}

static count_t *grow_counts(sp_agg_t *a)
{
  GROW(a->counts, a->ncounts, a->capcounts, count_t, COUNT_HASH, COUNT_EMPTY);
  return a->counts;
}

/* Adds v to the count of key k (dropped when out of memory). */
static void count(sp_agg_t *a, agg_key_t k, uint64_t v)
{
  if (2 * (a->ncounts + 1) > a->capcounts && !grow_counts(a))
    return;
  size_t i = key_hash(&k) & (a->capcounts - 1);
  for (; a->counts[i].used; i = (i + 1) & (a->capcounts - 1)) {
    agg_key_t *c = &a->counts[i].key;
    if (c->op == k.op && c->kind == k.kind && c->s == k.s && c->module == k.module && c->n == k.n) {
      a->counts[i].value += v;
      return;
    }
  }
  a->counts[i] = (count_t){k, v, 1};
  a->ncounts++;
}

sp_agg_t *sp_agg_new(void)
{
  sp_agg_t *a = calloc(1, sizeof *a);
  Dl_info di;
  ssize_t n;
  if (a && dladdr((void *)getauxval(AT_PHDR), &di) &&
      (n = readlink("/proc/self/exe", a->exe, sizeof a->exe - 1)) > 0) {
    a->exe[n] = 0;
    a->main_base = di.dli_fbase;
  }
  return a;
}

void sp_agg_free(sp_agg_t *a)
{
  if (!a)
    return;
  for (size_t i = 0; i < a->capstrs; i++)
    free(a->strs[i].s);
  free(a->strs);
  free(a->ranges);
  free(a->pcs);
  free(a->counts);
  for (int k = 0; k < a->nmods; k++)
    free(a->mods[k].syms);
  if (a->dwfl)
    dw.end(a->dwfl);
  free(a);
}

void sp_agg_code_lookup(sp_agg_t *a, sp_code_lookup_fn lookup, sp_code_gen_fn generation)
{
  a->code_lookup = lookup;
  a->code_gen = generation;
  a->seen_gen = generation ? generation() : 0;
}

/* The code outside every module changed: forgets the names cached for it. Every cached PC is
 * forgotten (the PC cache is open-addressed); those in a module are found again in their
 * symbol's range, which stays. */
static void forget_anonymous(sp_agg_t *a)
{
  size_t keep = 0;
  for (size_t i = 0; i < a->nranges; i++)
    if (!a->ranges[i].sym.anon)
      a->ranges[keep++] = a->ranges[i];
  a->nranges = keep;
  if (a->pcs)
    memset(a->pcs, 0, a->cappcs * sizeof *a->pcs);
  a->npcs = 0;
}

void sp_agg_operator_module(sp_agg_t *a, const void *addr)
{
  Dl_info di;
  if (a->nopmods < (int)(sizeof a->opmods / sizeof *a->opmods) && dladdr(addr, &di))
    a->opmods[a->nopmods++] = di.dli_fbase;
}

void sp_agg_add(sp_agg_t *a, const sp_sample_t *s, size_t n, int ncounters)
{
  char folded[8192];
  uint64_t gen = a->code_gen ? a->code_gen() : 0;
  if (gen != a->seen_gen) {
    forget_anonymous(a);
    a->seen_gen = gen;
  }
  for (size_t i = 0; i < n; i++, s++) {
    const pcsym_t *found = symbolise(a, s->pc);
    if (!found)
      continue;
    const pcsym_t pc = *found; /* a copy: symbolising the frames may grow the cache */
    uint32_t op = (s->flags & SP_F_POOL) && !pc.opmod ? 0 : s->op;
    uint64_t w = s->weight ? s->weight : 1;
    count(a, (agg_key_t){op, K_OP, NULL, NULL, 0}, w);
    count(a, (agg_key_t){op, K_PC, pc.symbol, pc.module, 0}, w);
    size_t used = 0;
    folded[0] = 0;
    for (int f = s->nframes - 1; f >= 0; f--) { /* outermost first */
      /* Return addresses are symbolised one byte back: the call, not what follows it. */
      const pcsym_t *fp = f == 0 ? &pc : symbolise(a, s->frames[f] - 1);
      if (!fp)
        continue;
      int w = snprintf(folded + used, sizeof folded - used, "%s%s", used ? ";" : "", fp->frame);
      if (w < 0 || (size_t)w >= sizeof folded - used)
        break;
      used += (size_t)w;
    }
    const char *stack = intern(a, folded);
    if (stack)
      count(a, (agg_key_t){op, K_STACK, stack, NULL, 0}, w);
    for (int c = 0; c < ncounters && c < SP_MAX_COUNTERS; c++)
      count(a, (agg_key_t){op, K_COUNTER, NULL, NULL, (uint64_t)c}, s->counters[c]);
  }
}

void sp_agg_visit(sp_agg_t *a, const sp_agg_visit_t *v)
{
  for (size_t i = 0; i < a->capcounts; i++) {
    const count_t *c = &a->counts[i];
    if (!c->used)
      continue;
    switch (c->key.kind) {
    case K_OP:
      if (v->op)
        v->op(v->ctx, c->key.op, c->value);
      break;
    case K_PC:
      if (v->pc)
        v->pc(v->ctx, c->key.op, c->key.module, c->key.s, c->value);
      break;
    case K_STACK:
      if (v->stack)
        v->stack(v->ctx, c->key.op, c->key.s, c->value);
      break;
    default:
      if (v->counter)
        v->counter(v->ctx, c->key.op, (int)c->key.n, c->value);
      break;
    }
  }
}
