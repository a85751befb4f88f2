/* SPDX-License-Identifier: MIT */
/* The aggregator: interned strings, a PC -> symbol cache, and one counting map keyed by
 * (operator, kind, interned string or number). Open addressing, doubled when half full.
 * Symbols: the object holding a PC from dl_iterate_phdr, then that object's symbol table
 * (.symtab, else .dynsym, or its separate debug file), searched by address; dladdr's dynamic
 * symbols only where no table can be read (the vDSO, no libelf). Both dladdr and
 * dwfl_module_addrinfo scan every symbol of the object for each PC: ~2 ms a PC in
 * libtorch_cpu's 35,000, which kept the writer thread busy for 20-30 % of a CPU in a sampled
 * PyTorch program.
 *
 * Why an object's first lookups scan its table, and only later ones sort it: a short program's
 * samples are all drained by the final write, at exit, so whatever naming its PCs costs is
 * added to the program's exit. Reading and sorting a whole table (through libdw's dwfl, each
 * symbol copied out) took 2.6-5 ms for libopenblas's 15,000 symbols and 1.2 ms for libc's
 * 3,000 on a loaded 2-vCPU VM, mostly first touches of fresh memory, for the handful of
 * functions a short run hits. So libelf maps the file and the table is searched in place, one
 * pass per function (the range cache names every other PC in it): ~15-60 us for libopenblas.
 * After SP_AGG_SCANS passes an object's table is sorted once (a long run, many functions), as
 * it always was. Both searches apply one rule (object_symbol's), and a test compares them PC by
 * PC. Tables libelf's loop cannot read as dwfl would (a debug file without a .symtab or linked
 * elsewhere, MiniDebugInfo, extended section indices, no section headers) are read through
 * dwfl, sorted at once. libelf and libdw are loaded on first need (the agent links libc
 * only). */
#define _GNU_SOURCE
#include "aggregate.h"

#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
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
  Dwfl_Callbacks cb;
} dw;
static pthread_once_t dw_once = PTHREAD_ONCE_INIT;

/* libelf, from libelf.so.1 (NULL functions: not installed). libdw links the same library. */
static struct {
  unsigned (*version)(unsigned);
  Elf *(*begin)(int, Elf_Cmd, Elf *);
  int (*cntl)(Elf *, Elf_Cmd);
  int (*end)(Elf *);
  char *(*getident)(Elf *, size_t *);
  int (*getshdrstrndx)(Elf *, size_t *);
  Elf_Scn *(*nextscn)(Elf *, Elf_Scn *);
  Elf_Scn *(*getscn)(Elf *, size_t);
  GElf_Shdr *(*getshdr)(Elf_Scn *, GElf_Shdr *);
  Elf_Data *(*getdata)(Elf_Scn *, Elf_Data *);
  char *(*strptr)(Elf *, size_t, size_t);
  size_t (*getnote)(Elf_Data *, size_t, GElf_Nhdr *, size_t *, size_t *);
  int (*getphdrnum)(Elf *, size_t *);
  GElf_Phdr *(*getphdr)(Elf *, int, GElf_Phdr *);
} el;
static pthread_once_t el_once = PTHREAD_ONCE_INIT;

static void el_load(void)
{
  static const char *const names[] = {"elf_version", "elf_begin",   "elf_cntl",
                                      "elf_end",     "elf_getident", "elf_getshdrstrndx",
                                      "elf_nextscn", "elf_getscn",  "gelf_getshdr",
                                      "elf_getdata", "elf_strptr",  "gelf_getnote",
                                      "elf_getphdrnum", "gelf_getphdr"};
  enum { N = sizeof names / sizeof *names };
  void *h = dlopen("libelf.so.1", RTLD_NOW | RTLD_LOCAL), *f[N];
  for (int i = 0; i < N; i++)
    if (!h || !(f[i] = dlsym(h, names[i])))
      return;
  *(void **)&el.version = f[0], *(void **)&el.begin = f[1], *(void **)&el.cntl = f[2];
  *(void **)&el.end = f[3], *(void **)&el.getident = f[4], *(void **)&el.getshdrstrndx = f[5];
  *(void **)&el.nextscn = f[6], *(void **)&el.getscn = f[7], *(void **)&el.getshdr = f[8];
  *(void **)&el.getdata = f[9], *(void **)&el.strptr = f[10], *(void **)&el.getnote = f[11];
  *(void **)&el.getphdrnum = f[12], *(void **)&el.getphdr = f[13];
  if (el.version(EV_CURRENT) == EV_NONE)
    el.begin = NULL;
}

/* The separate debug file of the object whose build-id is id[0..n), where Debian's -dbgsym
 * packages put it, into path; -1 when the id cannot be one. */
static int debug_path(const unsigned char *id, size_t n, char *path, size_t len)
{
  if (n < 2 || n > 64)
    return -1;
  int k = snprintf(path, len, "/usr/lib/debug/.build-id/%02x/", id[0]);
  for (size_t i = 1; i < n; i++)
    k += snprintf(path + k, len - (size_t)k, "%02x", id[i]);
  snprintf(path + k, len - (size_t)k, ".debug");
  return 0;
}

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
  char path[192];
  if (n < 0 || debug_path(id, (size_t)n, path, sizeof path))
    return -1;
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
                                      "dwfl_module_getsym_info", "dwfl_module_build_id"};
  pthread_once(&el_once, el_load); /* its section headers */
  void *h = el.begin ? dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL) : NULL, *f[8];
  for (int i = 0; i < 8; i++)
    if (!h || !(f[i] = dlsym(h, names[i])))
      return;
  *(void **)&dw.begin = f[0], *(void **)&dw.end = f[1], *(void **)&dw.report_begin_add = f[2];
  *(void **)&dw.report_elf = f[3], *(void **)&dw.report_end = f[4];
  *(void **)&dw.getsymtab = f[5], *(void **)&dw.getsym_info = f[6], *(void **)&dw.build_id = f[7];
  dw.cb.find_debuginfo = find_debuginfo; /* report_elf opens the objects: no find_elf */
}

#define SP_AGG_MODS 256 /* objects whose symbol tables an aggregation opens */
#define SP_AGG_SCANS 16 /* an object's table is searched in place this many times, then sorted */

/* One symbol of an object's table (.symtab, else .dynsym; or the separate debug file's), at its
 * address in this process. A sorted table holds them by address, then by place in the table. */
typedef struct modsym_s {
  uint64_t lo, size;
  uint64_t maxend;  /* the furthest end of this and every earlier symbol of the table */
  uint64_t scn_end; /* a symbol without a size: the end of its section */
  const char *name; /* dwfl's or libelf's: valid while the aggregation lives */
  int rank;         /* of aliases, the higher names the address: GLOBAL, WEAK, LOCAL, then
                       default visibility (the names dladdr gives come first) */
} modsym_t;

/* An object whose symbols an aggregation looked up. */
typedef struct mod_s {
  const void *base;     /* load address (dladdr's dli_fbase) */
  modsym_t *syms;       /* its symbol table sorted by address; NULL: not (yet) sorted */
  size_t nsyms;
  Elf *elf;             /* its file, mapped, whose table raw is; or NULL */
  const Elf64_Sym *raw; /* that file's table (.symtab, else .dynsym), nraw entries */
  size_t nraw;
  const char *str;      /* the table's names, nstr bytes */
  size_t nstr;
  uint64_t bias;        /* load bias: a symbol's address is its value + bias */
  unsigned scans;       /* in-place searches done */
} mod_t;

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
  Dwfl *dwfl;             /* the objects' tables libelf's loop does not read, or NULL */
  int tables;             /* enum sp_agg_tables */
  mod_t mods[SP_AGG_MODS];
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

/* Of aliases, the rank of the one that names an address: GLOBAL, WEAK, LOCAL, then default
 * visibility (modsym_t.rank). */
static int sym_rank(unsigned char info, unsigned char other)
{
  int bind = GELF_ST_BIND(info);
  int rank = bind == STB_GLOBAL ? 3 : bind == STB_WEAK ? 2 : bind == STB_LOCAL;
  return rank << 1 | (GELF_ST_VISIBILITY(other) == STV_DEFAULT);
}

/* Whether a symbol can hold code: not undefined, absolute (such as version names) or in a
 * reserved section, not a section, file or TLS symbol. Its name is checked apart. */
static int holds_code(unsigned char info, unsigned shndx)
{
  int type = GELF_ST_TYPE(info);
  return shndx != SHN_UNDEF && shndx < SHN_LORESERVE && type != STT_SECTION &&
         type != STT_FILE && type != STT_TLS;
}

/* Sorts *syms[0..m), in table order, by address (then place in the table: the radix sort is
 * stable) and notes each one's maxend. The sorted copy replaces *syms; returns -1 (nothing
 * changed) when out of memory. qsort took 1.5 ms for libopenblas's 15,000 symbols (glibc's
 * merge sort of 56-byte entries, ~200,000 calls of a comparison); this sorts 16-byte keys a
 * byte at a time, in one linear pass for each byte the addresses do not all share (3-4). */
static int sort_syms(modsym_t **syms, size_t m)
{
  typedef struct {
    uint64_t lo, i;
  } addr_key_t;
  addr_key_t *k = malloc((m ? m : 1) * sizeof *k), *tmp = malloc((m ? m : 1) * sizeof *tmp);
  modsym_t *out = malloc((m ? m : 1) * sizeof *out);
  if (!k || !tmp || !out) {
    free(k), free(tmp), free(out);
    return -1;
  }
  for (size_t i = 0; i < m; i++)
    k[i] = (addr_key_t){(*syms)[i].lo, i};
  for (int shift = 0; shift < 64; shift += 8) {
    size_t at[257] = {0};
    for (size_t i = 0; i < m; i++)
      at[(k[i].lo >> shift & 0xff) + 1]++;
    if (!m || at[(k[0].lo >> shift & 0xff) + 1] == m)
      continue;
    for (int b = 0; b < 256; b++)
      at[b + 1] += at[b];
    for (size_t i = 0; i < m; i++)
      tmp[at[k[i].lo >> shift & 0xff]++] = k[i];
    addr_key_t *t = k;
    k = tmp, tmp = t;
  }
  for (size_t i = 0; i < m; i++) {
    out[i] = (*syms)[k[i].i];
    uint64_t end = out[i].lo + out[i].size;
    out[i].maxend = i && out[i - 1].maxend > end ? out[i - 1].maxend : end;
  }
  free(k), free(tmp), free(*syms);
  *syms = out;
  return 0;
}

/* Reads the symbol table of path (loaded at bias) through dwfl into *syms, sorted by address:
 * how many it holds, or -1 when there is no table (or no memory). */
static long dwfl_table(sp_agg_t *a, const char *path, uint64_t bias, modsym_t **syms)
{
  pthread_once(&dw_once, dw_load);
  if (!dw.begin || (!a->dwfl && !(a->dwfl = dw.begin(&dw.cb))))
    return -1;
  dw.report_begin_add(a->dwfl);
  Dwfl_Module *mod = dw.report_elf(a->dwfl, path, path, -1, bias, false);
  dw.report_end(a->dwfl, NULL, NULL);
  int n = mod ? dw.getsymtab(mod) : -1;
  if (n <= 0 || !(*syms = malloc((size_t)n * sizeof **syms)))
    return -1;
  size_t m = 0;
  for (int i = 1; i < n; i++) {
    GElf_Sym sym;
    GElf_Addr addr;
    GElf_Word shndx;
    Elf *elf;
    const char *name = dw.getsym_info(mod, i, &sym, &addr, &shndx, &elf, NULL);
    if (!name || !name[0] || !holds_code(sym.st_info, shndx))
      continue;
    GElf_Shdr sh;
    Elf_Scn *scn = sym.st_size ? NULL : el.getscn(elf, shndx);
    uint64_t scn_end = scn && el.getshdr(scn, &sh) ? sh.sh_addr + sh.sh_size + (addr - sym.st_value)
                                                   : addr;
    (*syms)[m++] = (modsym_t){addr, sym.st_size, 0, scn_end, name,
                              sym_rank(sym.st_info, sym.st_other)};
  }
  if (sort_syms(syms, m)) {
    free(*syms);
    return -1;
  }
  return (long)m;
}

/* Whether the raw table's symbol s has a name (dwfl leaves the nameless out). */
static int raw_named(const mod_t *m, const Elf64_Sym *s)
{
  return s->st_name && s->st_name < m->nstr && m->str[s->st_name];
}

/* Where a symbol without a size may reach at most: the end of its section (at its address
 * when the section cannot be read), as dwfl_table notes it. */
static uint64_t raw_scn_end(const mod_t *m, const Elf64_Sym *s)
{
  GElf_Shdr sh;
  Elf_Scn *scn = el.getscn(m->elf, s->st_shndx);
  return scn && el.getshdr(scn, &sh) ? sh.sh_addr + sh.sh_size + m->bias : s->st_value + m->bias;
}

/* path mapped whole by libelf (its descriptor closed), when it is a 64-bit little-endian ELF
 * file; else NULL. */
static Elf *map_elf(const char *path)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  Elf *e = el.begin(fd, ELF_C_READ_MMAP, NULL);
  if (e && el.cntl(e, ELF_C_FDDONE)) /* mapped whole, it needs the descriptor no more */
    el.end(e), e = NULL;
  close(fd);
  size_t nid;
  const char *id = e ? el.getident(e, &nid) : NULL;
  if (e && (!id || nid < EI_NIDENT || id[EI_CLASS] != ELFCLASS64 || id[EI_DATA] != ELFDATA2LSB))
    el.end(e), e = NULL;
  return e;
}

/* e's sections: its first .symtab and .dynsym (NULL when none) and its build-id (*nid bytes,
 * 0 when none). Returns -1 when it holds symbols dwfl reads unlike libelf's loop (extended
 * section indices, MiniDebugInfo in .gnu_debugdata) or its section names cannot be read. */
static int find_tables(Elf *e, Elf_Scn **symtab, Elf_Scn **dynsym, unsigned char id[64],
                       size_t *nid)
{
  size_t shstr;
  GElf_Shdr sh;
  *symtab = *dynsym = NULL, *nid = 0;
  if (el.getshdrstrndx(e, &shstr))
    return -1;
  for (Elf_Scn *scn = NULL; (scn = el.nextscn(e, scn)) && el.getshdr(scn, &sh);) {
    const char *name = el.strptr(e, shstr, sh.sh_name);
    if (sh.sh_type == SHT_SYMTAB && !*symtab)
      *symtab = scn;
    else if (sh.sh_type == SHT_DYNSYM && !*dynsym)
      *dynsym = scn;
    else if (sh.sh_type == SHT_SYMTAB_SHNDX || (name && !strcmp(name, ".gnu_debugdata")))
      return -1;
    Elf_Data *d = sh.sh_type == SHT_NOTE && !*nid ? el.getdata(scn, NULL) : NULL;
    GElf_Nhdr nh;
    size_t at = 0, name_at, desc_at;
    while (d && (at = el.getnote(d, at, &nh, &name_at, &desc_at)) > 0)
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
          !memcmp((const char *)d->d_buf + name_at, "GNU", 4) && nh.n_descsz <= 64) {
        memcpy(id, (const char *)d->d_buf + desc_at, nh.n_descsz);
        *nid = nh.n_descsz;
        break;
      }
  }
  return 0;
}

/* The address e's first loadable segment is linked at (UINT64_MAX when none): a debug file
 * whose symbols dwfl would move by another bias than its object's differs there. */
static uint64_t first_load(Elf *e)
{
  size_t n;
  GElf_Phdr ph;
  for (size_t i = 0; !el.getphdrnum(e, &n) && i < n; i++)
    if (el.getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD)
      return ph.p_vaddr;
  return UINT64_MAX;
}

/* Makes e's table scn m's raw table (m owns e from then on). Returns 0, or -1 when it cannot
 * be read in place. */
static int use_table(mod_t *m, Elf *e, Elf_Scn *scn, uint64_t bias)
{
  GElf_Shdr tab;
  Elf_Data *syms = el.getshdr(scn, &tab) && tab.sh_type != SHT_NOBITS ? el.getdata(scn, NULL)
                                                                      : NULL;
  Elf_Scn *strscn = syms ? el.getscn(e, tab.sh_link) : NULL;
  Elf_Data *str = strscn ? el.getdata(strscn, NULL) : NULL;
  if (!syms || !str || !syms->d_buf || !str->d_buf || tab.sh_entsize != sizeof(Elf64_Sym) ||
      !str->d_size || ((const char *)str->d_buf)[str->d_size - 1]) /* names end in the table */
    return -1;
  m->elf = e;
  m->raw = syms->d_buf, m->nraw = syms->d_size / sizeof(Elf64_Sym);
  m->str = str->d_buf, m->nstr = str->d_size;
  m->bias = bias;
  return 0;
}

/* Maps path (loaded at bias) and finds the table dwfl would read where libelf's loop reads it
 * alike: its .symtab, else its separate debug file's (Debian's -dbgsym and libc6-dbg, linked
 * at the same addresses), else its .dynsym. Returns 0 with m->raw set, or -1 (dwfl must read
 * it: a debug file without a .symtab or linked elsewhere, MiniDebugInfo, no section headers). */
static int raw_open(mod_t *m, const char *path, uint64_t bias)
{
  pthread_once(&el_once, el_load);
  Elf *e = el.begin ? map_elf(path) : NULL, *d = NULL;
  Elf_Scn *symtab, *dynsym, *dsymtab, *ddynsym;
  unsigned char id[64], did[64];
  size_t nid, ndid;
  char debug[192];
  if (!e || find_tables(e, &symtab, &dynsym, id, &nid))
    goto out_fail;
  if (symtab) {
    if (use_table(m, e, symtab, bias))
      goto out_fail;
    return 0;
  }
  if (nid && !debug_path(id, nid, debug, sizeof debug) && access(debug, F_OK) == 0) {
    if (!(d = map_elf(debug)) || find_tables(d, &dsymtab, &ddynsym, did, &ndid) || !dsymtab ||
        first_load(d) != first_load(e) || use_table(m, d, dsymtab, bias))
      goto out_fail;
    el.end(e);
    return 0;
  }
  if (dynsym && !use_table(m, e, dynsym, bias))
    return 0;
out_fail:
  if (d)
    el.end(d);
  if (e)
    el.end(e);
  return -1;
}

/* The raw table's symbols that can hold code, sorted by address into m->syms (kept unsorted
 * when out of memory). */
static void raw_sort(mod_t *m)
{
  modsym_t *syms = malloc((m->nraw ? m->nraw : 1) * sizeof *syms);
  if (!syms)
    return;
  size_t n = 0;
  for (size_t i = 1; i < m->nraw; i++) {
    const Elf64_Sym *s = &m->raw[i];
    if (!holds_code(s->st_info, s->st_shndx) || !raw_named(m, s))
      continue;
    uint64_t lo = s->st_value + m->bias;
    syms[n++] = (modsym_t){lo, s->st_size, 0, s->st_size ? lo : raw_scn_end(m, s),
                           m->str + s->st_name, sym_rank(s->st_info, s->st_other)};
  }
  if (sort_syms(&syms, n)) {
    free(syms);
    return;
  }
  m->syms = syms, m->nsyms = n;
}

/* The symbol table of the object o (its file: path), found once: searched in place (raw_open)
 * or read through dwfl and sorted. Returns its slot, or -1 (no libelf, too many objects). */
static int object_index(sp_agg_t *a, const object_t *o, const char *path)
{
  int k = 0;
  while (k < a->nmods && a->mods[k].base != (const void *)(uintptr_t)o->base)
    k++;
  if (k < a->nmods)
    return k;
  pthread_once(&el_once, el_load);
  if (k == SP_AGG_MODS || !el.begin)
    return -1;
  mod_t *m = &a->mods[k];
  memset(m, 0, sizeof *m);
  m->base = (const void *)(uintptr_t)o->base;
  a->nmods++;
  if (path[0] != '/') /* the vDSO, an object loaded from memory: no file to read */
    return k;
  modsym_t *syms;
  long n;
  if ((a->tables == SP_TABLES_DWFL || raw_open(m, path, o->bias)) &&
      (n = dwfl_table(a, path, o->bias, &syms)) >= 0)
    m->syms = syms, m->nsyms = (size_t)n;
  return k;
}

/* The symbol holding pc, by one pass over an object's raw table: what the sorted search in
 * object_symbol finds, as object_symbol returns it. Each candidate's name is checked only when
 * it would change the answer, so the pass reads the table and not its names. */
static int raw_symbol(const mod_t *m, uint64_t pc, const char **name, uint64_t *lo,
                      uint64_t *hi)
{
  const Elf64_Sym *best = NULL, *label = NULL;
  uint64_t best_lo = 0, label_lo = 0, next = UINT64_MAX, maxend = 0;
  for (size_t i = 1; i < m->nraw; i++) {
    const Elf64_Sym *s = &m->raw[i];
    uint64_t at = s->st_value + m->bias, end = at + s->st_size;
    /* Whether it may change the answer, computed without a branch: a .dynsym lists addresses
     * in hash order, so a branch on which side of pc each lies would be mispredicted half the
     * time (3x the pass's time); this one is rarely taken. */
    int above = at > pc;
    if (!((above & (at < next)) |
          ((above ^ 1) & ((end > maxend) | (at >= label_lo) | (pc - at < s->st_size)))) ||
        !holds_code(s->st_info, s->st_shndx))
      continue;
    if (above) { /* the first symbol above pc ends a label's extent */
      if (at < next && raw_named(m, s))
        next = at;
      continue;
    }
    if (end > maxend && raw_named(m, s))
      maxend = end;
    if ((!label || at >= label_lo) && raw_named(m, s)) /* the last in address order */
      label = s, label_lo = at;
    if (s->st_size && pc - at < s->st_size &&
        (!best || at > best_lo ||
         (at == best_lo && (sym_rank(s->st_info, s->st_other) >
                                sym_rank(best->st_info, best->st_other) ||
                            (sym_rank(s->st_info, s->st_other) ==
                                 sym_rank(best->st_info, best->st_other) &&
                             s->st_size < best->st_size)))) &&
        raw_named(m, s))
      best = s, best_lo = at;
  }
  if (best) {
    *name = m->str + best->st_name, *lo = best_lo, *hi = best_lo + best->st_size;
    return 1;
  }
  if (!label)
    return 0;
  uint64_t scn_end = raw_scn_end(m, label), end = next < scn_end ? next : scn_end;
  if (label->st_size || maxend > label_lo || pc >= end)
    return 0;
  *name = m->str + label->st_name, *lo = label_lo, *hi = end;
  return 1;
}

/* The symbol holding pc in o: 1 with *name and its extent [*lo, *hi), 0 when none holds it,
 * -1 when the object's table could not be read. The closest symbol whose size covers pc wins
 * (of aliases, the better rank, the smaller size, the first in the table); without one, an
 * assembly label without a size names what follows it in its section up to the next symbol,
 * when no sized symbol reaches past it (dwfl_module_addrinfo's rule). An object's first
 * SP_AGG_SCANS lookups search its table in place (raw_symbol), later ones its sorted table. */
static int object_symbol(sp_agg_t *a, const object_t *o, const char *path, uint64_t pc,
                         const char **name, uint64_t *lo, uint64_t *hi)
{
  int k = object_index(a, o, path);
  if (k < 0)
    return -1;
  mod_t *m = &a->mods[k];
  if (!m->syms && m->raw && a->tables != SP_TABLES_IN_PLACE &&
      (a->tables == SP_TABLES_SORTED || m->scans++ >= SP_AGG_SCANS))
    raw_sort(m);
  if (!m->syms)
    return m->raw ? raw_symbol(m, pc, name, lo, hi) : -1;
  const modsym_t *s = m->syms, *best = NULL;
  size_t l = 0, r = m->nsyms; /* the first symbol above pc: r */
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
  uint64_t end = r < m->nsyms && s[r].lo < label->scn_end ? s[r].lo : label->scn_end;
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
  for (int k = 0; k < a->nmods; k++) {
    free(a->mods[k].syms);
    if (a->mods[k].elf)
      el.end(a->mods[k].elf);
  }
  if (a->dwfl)
    dw.end(a->dwfl);
  free(a);
}

void sp_agg_tables(sp_agg_t *a, enum sp_agg_tables how) { a->tables = how; }

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
