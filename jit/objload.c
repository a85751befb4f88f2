/* SPDX-License-Identifier: MIT */
/* The persisted-kernel loader (objload.h). The ELF structures are glibc's <elf.h>; every
 * offset, size and index read from the file is checked against the file before use. */
#define _GNU_SOURCE
#include "objload.h"
#include "sampler/dwarf.h"

#include <elf.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_SECTIONS 256

static int fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t len, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return -1;
}

/* Whether [off, off + size) lies inside a file of len bytes. */
static int inside(uint64_t off, uint64_t size, size_t len)
{
  return off <= len && size <= len - off;
}

/* Whether section s is placed: allocated code or data, .eh_frame excepted. */
static int placed(const Elf64_Shdr *s, const char *name)
{
  return (s->sh_flags & SHF_ALLOC) && (s->sh_type == SHT_PROGBITS || s->sh_type == SHT_NOBITS) &&
         strcmp(name, ".eh_frame") != 0;
}

/* The object's header, section table and section names, checked against its length. */
static const Elf64_Ehdr *header(const void *obj, size_t len, const Elf64_Shdr **sh,
                                const Elf64_Shdr **names, char *err, size_t errlen)
{
  const unsigned char *f = obj;
  const Elf64_Ehdr *eh = obj;
  if (len < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
    return fail(err, errlen, "not an ELF object"), NULL;
  if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB ||
      eh->e_machine != EM_X86_64 || eh->e_type != ET_REL)
    return fail(err, errlen, "not an x86-64 relocatable object"), NULL;
  if (eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shnum == 0 || eh->e_shnum > MAX_SECTIONS ||
      !inside(eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr), len) ||
      eh->e_shoff % 8 || eh->e_shstrndx >= eh->e_shnum)
    return fail(err, errlen, "bad section header table"), NULL;
  *sh = (const Elf64_Shdr *)(f + eh->e_shoff);
  *names = &(*sh)[eh->e_shstrndx];
  if (!inside((*names)->sh_offset, (*names)->sh_size, len) || (*names)->sh_size == 0 ||
      f[(*names)->sh_offset + (*names)->sh_size - 1] != 0)
    return fail(err, errlen, "bad section name table"), NULL;
  for (unsigned i = 0; i < eh->e_shnum; i++)
    if ((*sh)[i].sh_name >= (*names)->sh_size)
      return fail(err, errlen, "bad section name"), NULL;
  return eh;
}

/* The symbol table (its symbols, count and names), checked against the object's length. */
static const Elf64_Sym *symbols(const unsigned char *f, size_t len, const Elf64_Ehdr *eh,
                                const Elf64_Shdr *sh, const Elf64_Shdr *symtab, size_t *nsyms,
                                const char **names, size_t *names_len, char *err, size_t errlen)
{
  if (!symtab || symtab->sh_entsize != sizeof(Elf64_Sym) || symtab->sh_link >= eh->e_shnum ||
      !inside(symtab->sh_offset, symtab->sh_size, len) || symtab->sh_offset % 8)
    return fail(err, errlen, "no usable symbol table"), NULL;
  const Elf64_Shdr *strs = &sh[symtab->sh_link];
  if (!inside(strs->sh_offset, strs->sh_size, len) || strs->sh_size == 0 ||
      f[strs->sh_offset + strs->sh_size - 1] != 0)
    return fail(err, errlen, "bad symbol name table"), NULL;
  *nsyms = symtab->sh_size / sizeof(Elf64_Sym);
  *names = (const char *)f + strs->sh_offset;
  *names_len = strs->sh_size;
  return (const Elf64_Sym *)(f + symtab->sh_offset);
}

/* The index of function sym's symbol, or 0. */
static size_t function(const Elf64_Sym *syms, size_t nsyms, const char *names, size_t names_len,
                       const char *sym)
{
  for (size_t j = 1; j < nsyms; j++)
    if (syms[j].st_name < names_len && ELF64_ST_TYPE(syms[j].st_info) == STT_FUNC &&
        strcmp(names + syms[j].st_name, sym) == 0)
      return j; /* the module's FILE symbol has the kernel's name too */
  return 0;
}

/* An object's placed sections laid out one after the other, as read from it and checked. */
typedef struct layout_s {
  const Elf64_Ehdr *eh;
  const Elf64_Shdr *sh, *symtab;
  const Elf64_Sym *syms;
  size_t nsyms, symnames_len;
  const char *symnames;
  uint64_t base[MAX_SECTIONS]; /* each section's offset in the placement, UINT64_MAX: not placed */
  size_t map_len;              /* the placement's bytes, whole pages */
} layout_t;

/* Reads obj's structure and lays its placed sections out at their alignments. 0, or -1 with a
 * sentence in err. */
static int layout(const void *obj, size_t len, layout_t *L, char *err, size_t errlen)
{
  const unsigned char *f = obj;
  const Elf64_Shdr *names;
  const Elf64_Ehdr *eh = header(obj, len, &L->sh, &names, err, errlen);
  if (!eh)
    return -1;
  L->eh = eh;
  const Elf64_Shdr *sh = L->sh;
  const char *shnames = (const char *)f + names->sh_offset;
  uint64_t total = 0;
  L->symtab = NULL;
  for (unsigned i = 0; i < eh->e_shnum; i++) {
    const Elf64_Shdr *s = &sh[i];
    L->base[i] = UINT64_MAX;
    if (s->sh_type == SHT_SYMTAB) {
      if (L->symtab)
        return fail(err, errlen, "two symbol tables");
      L->symtab = s;
    }
    if (!placed(s, shnames + s->sh_name))
      continue;
    uint64_t align = s->sh_addralign ? s->sh_addralign : 1;
    if (align > 4096 || (align & (align - 1)) || s->sh_size > (64u << 20) ||
        (s->sh_type != SHT_NOBITS && !inside(s->sh_offset, s->sh_size, len)))
      return fail(err, errlen, "bad section %s", shnames + s->sh_name);
    total = (total + align - 1) & ~(align - 1);
    L->base[i] = total;
    total += s->sh_size;
  }
  L->syms = symbols(f, len, eh, sh, L->symtab, &L->nsyms, &L->symnames, &L->symnames_len, err,
                    errlen);
  if (!L->syms)
    return -1;
  if (total == 0 || total > (64u << 20))
    return fail(err, errlen, "the object holds no code, or more than 64 MB");
  L->map_len = (total + 4095) & ~(uint64_t)4095;
  return 0;
}

/* Copies obj's placed sections to m (L->map_len writable bytes, zero), applies their
 * relocations and finds function sym: 0 with its entry symbol in *entry, or -1 with a sentence
 * in err. */
static int place(const void *obj, size_t len, const layout_t *L, unsigned char *m,
                 const char *sym, const Elf64_Sym **entry, char *err, size_t errlen)
{
  const unsigned char *f = obj;
  const Elf64_Ehdr *eh = L->eh;
  const Elf64_Shdr *sh = L->sh;
  const Elf64_Sym *syms = L->syms;
  size_t nsyms = L->nsyms, symnames_len = L->symnames_len;
  const char *symnames = L->symnames;
  for (unsigned i = 0; i < eh->e_shnum; i++)
    if (L->base[i] != UINT64_MAX && sh[i].sh_type != SHT_NOBITS)
      memcpy(m + L->base[i], f + sh[i].sh_offset, sh[i].sh_size);

  /* Relocations of placed sections; those of .eh_frame (not placed) are skipped. */
  for (unsigned i = 0; i < eh->e_shnum; i++) {
    const Elf64_Shdr *r = &sh[i];
    if (r->sh_type == SHT_REL)
      return fail(err, errlen, "REL relocations are not x86-64's");
    if (r->sh_type != SHT_RELA || r->sh_info >= eh->e_shnum || L->base[r->sh_info] == UINT64_MAX)
      continue;
    if (r->sh_entsize != sizeof(Elf64_Rela) || !inside(r->sh_offset, r->sh_size, len) ||
        r->sh_offset % 8 || &sh[r->sh_link] != L->symtab)
      return fail(err, errlen, "bad relocation section");
    const Elf64_Shdr *target = &sh[r->sh_info];
    const Elf64_Rela *rel = (const Elf64_Rela *)(f + r->sh_offset);
    for (size_t j = 0; j < r->sh_size / sizeof *rel; j++) {
      uint32_t type = ELF64_R_TYPE(rel[j].r_info), si = ELF64_R_SYM(rel[j].r_info);
      if (si == 0 || si >= nsyms)
        return fail(err, errlen, "relocation against a bad symbol");
      const Elf64_Sym *s = &syms[si];
      unsigned width = type == R_X86_64_PC32 || type == R_X86_64_PLT32 ? 4 : 8;
      if (rel[j].r_offset > target->sh_size || target->sh_size - rel[j].r_offset < width)
        return fail(err, errlen, "relocation outside its section");
      /* Addresses and addends are added modulo 2^64, as the processor adds them: an addend of
       * any size is arithmetic, never an overflow. */
      unsigned char *at = m + L->base[r->sh_info] + rel[j].r_offset;
      uint64_t P = (uintptr_t)at, GOT = (uintptr_t)m, A = (uint64_t)rel[j].r_addend, v;
      if (type == R_X86_64_GOTPC64 && s->st_shndx == SHN_UNDEF && s->st_name < symnames_len &&
          strcmp(symnames + s->st_name, "_GLOBAL_OFFSET_TABLE_") == 0) {
        v = GOT + A - P;   /* the large code model's base register; no entry of the table is */
        memcpy(at, &v, 8); /* ever read, so it is the placement's start */
        continue;
      }
      if (s->st_shndx == SHN_UNDEF || s->st_shndx >= eh->e_shnum ||
          L->base[s->st_shndx] == UINT64_MAX || s->st_value > sh[s->st_shndx].sh_size)
        return fail(err, errlen, "the code refers to %s, outside the object",
                    s->st_name < symnames_len ? symnames + s->st_name : "a bad symbol");
      uint64_t S = (uint64_t)(uintptr_t)m + L->base[s->st_shndx] + s->st_value;
      v = S + A;
      switch (type) {
      case R_X86_64_64: memcpy(at, &v, 8); break;
      case R_X86_64_PC64: v -= P; memcpy(at, &v, 8); break;
      case R_X86_64_GOTOFF64: v -= GOT; memcpy(at, &v, 8); break;
      case R_X86_64_PC32:
      case R_X86_64_PLT32: { /* to a symbol defined here: the PLT is the symbol itself */
        int64_t d = (int64_t)(v - P);
        int32_t v32 = (int32_t)d;
        if (v32 != d)
          return fail(err, errlen, "PC-relative relocation out of range");
        memcpy(at, &v32, 4);
        break;
      }
      default:
        return fail(err, errlen, "unsupported relocation type %u", type);
      }
    }
  }

  /* The entry symbol: a function defined in a placed section. */
  const Elf64_Sym *s = &syms[function(syms, nsyms, symnames, symnames_len, sym)];
  if (s == syms || s->st_shndx >= eh->e_shnum || L->base[s->st_shndx] == UINT64_MAX ||
      s->st_size == 0 || s->st_value > sh[s->st_shndx].sh_size ||
      sh[s->st_shndx].sh_size - s->st_value < s->st_size)
    return fail(err, errlen, "no function %s in the object", sym);
  *entry = s;
  return 0;
}

int jt_obj_load(const void *obj, size_t len, const char *sym, jt_loaded_t *out, char *err,
                size_t errlen)
{
  memset(out, 0, sizeof *out);
  layout_t L;
  const Elf64_Sym *s;
  if (layout(obj, len, &L, err, errlen))
    return -1;
  unsigned char *m = mmap(NULL, L.map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                          -1, 0);
  if (m == MAP_FAILED)
    return fail(err, errlen, "cannot map %zu bytes", L.map_len);
  if (place(obj, len, &L, m, sym, &s, err, errlen))
    goto fail;
  if (mprotect(m, L.map_len, PROT_READ | PROT_EXEC) != 0) {
    fail(err, errlen, "cannot make the code executable");
    goto fail;
  }
  __builtin___clear_cache((char *)m, (char *)m + L.map_len);
  *out = (jt_loaded_t){m + L.base[s->st_shndx] + s->st_value, s->st_size, m, L.map_len};
  return 0;
fail:
  munmap(m, L.map_len);
  return -1;
}

long jt_obj_size(const void *obj, size_t len, char *err, size_t errlen)
{
  layout_t L;
  return layout(obj, len, &L, err, errlen) ? -1 : (long)L.map_len;
}

int jt_obj_batch_begin(jt_obj_batch_t *b, size_t cap, char *err, size_t errlen)
{
  memset(b, 0, sizeof *b);
  cap = (cap + 4095) & ~(size_t)4095;
  if (cap == 0)
    return fail(err, errlen, "an empty batch");
  /* Populated at once: the objects' copies write every page, and mapping them in one call costs
   * less than a fault per page (a Firecracker guest: ~1 us a page, then ~6 at the first write,
   * against ~12 for a fault; a warm start placing 50 kernels, 1.9 -> 1.5 ms). */
  void *m = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (m == MAP_FAILED)
    return fail(err, errlen, "cannot map %zu bytes", cap);
  b->map = m, b->cap = cap;
  return 0;
}

int jt_obj_place(jt_obj_batch_t *b, const void *obj, size_t len, const char *sym,
                 jt_loaded_t *out, char *err, size_t errlen)
{
  memset(out, 0, sizeof *out);
  layout_t L;
  const Elf64_Sym *s;
  if (!b->map || b->committed)
    return fail(err, errlen, "the batch is not open");
  if (layout(obj, len, &L, err, errlen))
    return -1;
  if (L.map_len > b->cap - b->used)
    return fail(err, errlen, "the batch has %zu bytes left, the object takes %zu",
                b->cap - b->used, L.map_len);
  unsigned char *m = b->map + b->used;
  if (place(obj, len, &L, m, sym, &s, err, errlen)) {
    memset(m, 0, L.map_len); /* the next object's pages start as a fresh mapping's */
    return -1;
  }
  b->used += L.map_len;
  *out = (jt_loaded_t){m + L.base[s->st_shndx] + s->st_value, s->st_size, m, L.map_len};
  return 0;
}

int jt_obj_batch_commit(jt_obj_batch_t *b, char *err, size_t errlen)
{
  if (!b->map || b->committed)
    return fail(err, errlen, "the batch is not open");
  if (b->used < b->cap)
    munmap(b->map + b->used, b->cap - b->used);
  if (!b->used) {
    memset(b, 0, sizeof *b);
    return 0;
  }
  b->cap = b->used;
  if (mprotect(b->map, b->used, PROT_READ | PROT_EXEC) != 0) {
    munmap(b->map, b->used);
    memset(b, 0, sizeof *b);
    return fail(err, errlen, "cannot make the code executable");
  }
  __builtin___clear_cache((char *)b->map, (char *)b->map + b->used);
  b->committed = 1;
  return 0;
}

void jt_obj_batch_abort(jt_obj_batch_t *b)
{
  if (b->map && !b->committed)
    munmap(b->map, b->cap);
  memset(b, 0, sizeof *b);
}

void jt_obj_unload(jt_loaded_t *l)
{
  if (l->map)
    munmap(l->map, l->map_len);
  memset(l, 0, sizeof *l);
}

/* ---- call-frame rules ----------------------------------------------------------------- */

/* Appends n bytes to out, within cap (*at counts them all: past cap, nothing is written). */
static void put(uint8_t *out, size_t cap, size_t *at, const void *p, size_t n)
{
  if (*at <= cap && n <= cap - *at)
    memcpy(out + *at, p, n);
  *at += n;
}

long jt_obj_cfi(const void *obj, size_t len, const char *sym, uint64_t code, uint8_t *out,
                size_t cap, char *err, size_t errlen)
{
  const unsigned char *f = obj;
  const Elf64_Shdr *sh, *names;
  const Elf64_Ehdr *eh = header(obj, len, &sh, &names, err, errlen);
  if (!eh)
    return -1;
  const char *shnames = (const char *)f + names->sh_offset;
  const Elf64_Shdr *symtab = NULL, *ehf = NULL, *rela = NULL;
  unsigned ehi = 0;
  for (unsigned i = 0; i < eh->e_shnum; i++)
    if (sh[i].sh_type == SHT_SYMTAB)
      symtab = &sh[i];
    else if (strcmp(shnames + sh[i].sh_name, ".eh_frame") == 0)
      ehf = &sh[i], ehi = i;
  for (unsigned i = 0; ehf && i < eh->e_shnum; i++)
    if (sh[i].sh_type == SHT_RELA && sh[i].sh_info == ehi)
      rela = &sh[i];
  if (!ehf || !rela || !inside(ehf->sh_offset, ehf->sh_size, len) ||
      rela->sh_entsize != sizeof(Elf64_Rela) || !inside(rela->sh_offset, rela->sh_size, len) ||
      rela->sh_offset % 8)
    return fail(err, errlen, "no usable .eh_frame");
  size_t nsyms, symnames_len;
  const char *symnames;
  const Elf64_Sym *syms = symbols(f, len, eh, sh, symtab, &nsyms, &symnames, &symnames_len, err, errlen);
  if (!syms)
    return -1;
  size_t fn = function(syms, nsyms, symnames, symnames_len, sym);
  if (!fn)
    return fail(err, errlen, "no function %s in the object", sym);
  const unsigned char *ef = f + ehf->sh_offset;
  const Elf64_Rela *rel = (const Elf64_Rela *)(f + rela->sh_offset);
  size_t nrel = rela->sh_size / sizeof *rel;

  /* The FDE whose start the relocations place at the function: its pc_begin field (8 bytes
   * into it) is relocated against the function's section at the function's offset. */
  for (uint64_t off = 0; off + 8 <= ehf->sh_size;) {
    uint32_t rlen, id;
    memcpy(&rlen, ef + off, 4);
    memcpy(&id, ef + off + 4, 4);
    if (rlen < 4 || rlen == 0xffffffffu || rlen > ehf->sh_size - off - 4)
      break;
    uint64_t next = off + 4 + rlen;
    const Elf64_Rela *r = NULL;
    for (size_t j = 0; id && j < nrel && !r; j++)
      if (rel[j].r_offset == off + 8)
        r = &rel[j];
    uint32_t si = r ? (uint32_t)ELF64_R_SYM(r->r_info) : 0;
    if (!r || si == 0 || si >= nsyms || syms[si].st_shndx != syms[fn].st_shndx ||
        syms[si].st_value + (uint64_t)r->r_addend != syms[fn].st_value ||
        id > off + 4) {
      off = next;
      continue;
    }
    /* The CIE: version 1 or 3, augmentation "zR" (the FDE pointer encoding alone), PC-relative
     * 4- or 8-byte pointers, which is what LLVM writes. */
    uint64_t coff = off + 4 - id;
    uint32_t clen, cid;
    if (coff + 8 > ehf->sh_size)
      return fail(err, errlen, "bad CIE");
    memcpy(&clen, ef + coff, 4);
    memcpy(&cid, ef + coff + 4, 4);
    if (clen == 0xffffffffu || clen < 4 || clen > ehf->sh_size - coff - 4 || cid)
      return fail(err, errlen, "bad CIE");
    rd_t c = {ef + coff + 8, ef + coff + 4 + clen, 0};
    uint64_t version = u8(&c);
    const unsigned char *aug = c.p;
    if ((version != 1 && version != 3) || c.end - c.p < 3 || memcmp(aug, "zR", 3) != 0)
      return fail(err, errlen, "a CIE form this does not rewrite");
    c.p += 3;
    const unsigned char *align = c.p; /* code and data alignment: copied as they are */
    uleb(&c);
    uleb(&c); /* (the data alignment is signed; its bytes are copied, not its value) */
    const unsigned char *align_end = c.p;
    uint64_t ra = version == 1 ? u8(&c) : uleb(&c);
    uint64_t alen = uleb(&c), enc = u8(&c);
    unsigned width = (enc & 0x0f) == 0x0b ? 4 : (enc & 0x0f) == 0x0c ? 8 : 0;
    if (c.bad || alen != 1 || (enc & 0x70) != 0x10 || !width || ra > 127)
      return fail(err, errlen, "a CIE form this does not rewrite");
    const unsigned char *cinit = c.p, *cinit_end = c.end;
    /* The FDE: pc_begin (relocated: the function), its range, no augmentation data beyond
     * its length, the instructions. */
    if (rlen < 4 + 2 * width + 1)
      return fail(err, errlen, "bad FDE");
    rd_t d = {ef + off + 8, ef + next, 0};
    fixed(&d, (int)width);
    uint64_t range = fixed(&d, (int)width);
    uint64_t dalen = uleb(&d);
    if (d.bad || dalen > (uint64_t)(d.end - d.p) || range == 0 || range > syms[fn].st_size)
      return fail(err, errlen, "bad FDE");
    d.p += dalen;

    /* CIE: length, id 0, version 1, "zR", the alignments, RA column, one byte of augmentation
     * data: absptr; the initial instructions. FDE: length, CIE pointer, 8-byte start and
     * range, no augmentation data, the instructions. Both padded to 8 bytes with DW_CFA_nop. */
    size_t at = 0, flen_at; /* the CIE at 0 */
    uint32_t zero = 0;
    static const uint8_t zr[] = {1, 'z', 'R', 0};
    put(out, cap, &at, &zero, 4);
    put(out, cap, &at, &zero, 4);
    put(out, cap, &at, zr, sizeof zr);
    put(out, cap, &at, align, (size_t)(align_end - align));
    uint8_t ra8 = (uint8_t)ra, one = 1, absptr = 0;
    put(out, cap, &at, &ra8, 1);
    put(out, cap, &at, &one, 1);
    put(out, cap, &at, &absptr, 1);
    put(out, cap, &at, cinit, (size_t)(cinit_end - cinit));
    while (at % 8)
      put(out, cap, &at, &zero, 1);
    uint32_t cl = (uint32_t)(at - 4);
    flen_at = at;
    put(out, cap, &at, &zero, 4);
    uint32_t cie_ptr = (uint32_t)at; /* from this field back to the CIE */
    put(out, cap, &at, &cie_ptr, 4);
    put(out, cap, &at, &code, 8);
    put(out, cap, &at, &range, 8);
    put(out, cap, &at, &zero, 1); /* augmentation data: none */
    put(out, cap, &at, d.p, (size_t)(d.end - d.p));
    while (at % 8)
      put(out, cap, &at, &zero, 1);
    uint32_t fl = (uint32_t)(at - flen_at - 4);
    if (at > cap)
      return fail(err, errlen, "the rules take %zu bytes, more than %zu", at, cap);
    memcpy(out, &cl, 4);
    memcpy(out + flen_at, &fl, 4);
    return (long)at;
  }
  return fail(err, errlen, "no .eh_frame entry for %s", sym);
}
