/* SPDX-License-Identifier: MIT */
/* The persisted-kernel loader (objload.h). The ELF structures are glibc's <elf.h>; every
 * offset, size and index read from the file is checked against the file before use. */
#define _GNU_SOURCE
#include "objload.h"

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

int jt_obj_load(const void *obj, size_t len, const char *sym, jt_loaded_t *out, char *err,
                size_t errlen)
{
  const unsigned char *f = obj;
  memset(out, 0, sizeof *out);
  const Elf64_Ehdr *eh = obj;
  if (len < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
    return fail(err, errlen, "not an ELF object");
  if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB ||
      eh->e_machine != EM_X86_64 || eh->e_type != ET_REL)
    return fail(err, errlen, "not an x86-64 relocatable object");
  if (eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shnum == 0 || eh->e_shnum > MAX_SECTIONS ||
      !inside(eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr), len) ||
      eh->e_shoff % 8 || eh->e_shstrndx >= eh->e_shnum)
    return fail(err, errlen, "bad section header table");
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(f + eh->e_shoff);
  const Elf64_Shdr *names = &sh[eh->e_shstrndx];
  if (!inside(names->sh_offset, names->sh_size, len) || names->sh_size == 0 ||
      f[names->sh_offset + names->sh_size - 1] != 0)
    return fail(err, errlen, "bad section name table");
  const char *shnames = (const char *)f + names->sh_offset;

  /* Layout: every placed section at its alignment, one after the other. */
  uint64_t base[MAX_SECTIONS], total = 0;
  const Elf64_Shdr *symtab = NULL;
  for (unsigned i = 0; i < eh->e_shnum; i++) {
    const Elf64_Shdr *s = &sh[i];
    base[i] = UINT64_MAX;
    if (s->sh_name >= names->sh_size)
      return fail(err, errlen, "bad section name");
    if (s->sh_type == SHT_SYMTAB) {
      if (symtab)
        return fail(err, errlen, "two symbol tables");
      symtab = s;
    }
    if (!placed(s, shnames + s->sh_name))
      continue;
    uint64_t align = s->sh_addralign ? s->sh_addralign : 1;
    if (align > 4096 || (align & (align - 1)) || s->sh_size > (64u << 20) ||
        (s->sh_type != SHT_NOBITS && !inside(s->sh_offset, s->sh_size, len)))
      return fail(err, errlen, "bad section %s", shnames + s->sh_name);
    total = (total + align - 1) & ~(align - 1);
    base[i] = total;
    total += s->sh_size;
  }
  if (!symtab || symtab->sh_entsize != sizeof(Elf64_Sym) || symtab->sh_link >= eh->e_shnum ||
      !inside(symtab->sh_offset, symtab->sh_size, len) || symtab->sh_offset % 8)
    return fail(err, errlen, "no usable symbol table");
  const Elf64_Shdr *strs = &sh[symtab->sh_link];
  if (!inside(strs->sh_offset, strs->sh_size, len) || strs->sh_size == 0 ||
      f[strs->sh_offset + strs->sh_size - 1] != 0)
    return fail(err, errlen, "bad symbol name table");
  const Elf64_Sym *syms = (const Elf64_Sym *)(f + symtab->sh_offset);
  size_t nsyms = symtab->sh_size / sizeof(Elf64_Sym);
  const char *symnames = (const char *)f + strs->sh_offset;
  if (total == 0 || total > (64u << 20))
    return fail(err, errlen, "the object holds no code, or more than 64 MB");

  size_t map_len = (total + 4095) & ~(uint64_t)4095;
  unsigned char *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return fail(err, errlen, "cannot map %zu bytes", map_len);
  for (unsigned i = 0; i < eh->e_shnum; i++)
    if (base[i] != UINT64_MAX && sh[i].sh_type != SHT_NOBITS)
      memcpy(m + base[i], f + sh[i].sh_offset, sh[i].sh_size);

  /* Relocations of placed sections; those of .eh_frame (not placed) are skipped. */
  for (unsigned i = 0; i < eh->e_shnum; i++) {
    const Elf64_Shdr *r = &sh[i];
    if (r->sh_type == SHT_REL)
      goto bad_rel_kind;
    if (r->sh_type != SHT_RELA || r->sh_info >= eh->e_shnum || base[r->sh_info] == UINT64_MAX)
      continue;
    if (r->sh_entsize != sizeof(Elf64_Rela) || !inside(r->sh_offset, r->sh_size, len) ||
        r->sh_offset % 8 || &sh[r->sh_link] != symtab) {
      fail(err, errlen, "bad relocation section");
      goto fail;
    }
    const Elf64_Shdr *target = &sh[r->sh_info];
    const Elf64_Rela *rel = (const Elf64_Rela *)(f + r->sh_offset);
    for (size_t j = 0; j < r->sh_size / sizeof *rel; j++) {
      uint32_t type = ELF64_R_TYPE(rel[j].r_info), si = ELF64_R_SYM(rel[j].r_info);
      if (si == 0 || si >= nsyms) {
        fail(err, errlen, "relocation against a bad symbol");
        goto fail;
      }
      const Elf64_Sym *s = &syms[si];
      unsigned width = type == R_X86_64_PC32 || type == R_X86_64_PLT32 ? 4 : 8;
      if (rel[j].r_offset > target->sh_size || target->sh_size - rel[j].r_offset < width) {
        fail(err, errlen, "relocation outside its section");
        goto fail;
      }
      unsigned char *at = m + base[r->sh_info] + rel[j].r_offset;
      int64_t P = (int64_t)(uintptr_t)at, GOT = (int64_t)(uintptr_t)m, v;
      if (type == R_X86_64_GOTPC64 && s->st_shndx == SHN_UNDEF && s->st_name < strs->sh_size &&
          strcmp(symnames + s->st_name, "_GLOBAL_OFFSET_TABLE_") == 0) {
        v = GOT + rel[j].r_addend - P; /* the large code model's base register; no entry of */
        memcpy(at, &v, 8);             /* the table is ever read, so it is the mapping's start */
        continue;
      }
      if (s->st_shndx == SHN_UNDEF || s->st_shndx >= eh->e_shnum ||
          base[s->st_shndx] == UINT64_MAX || s->st_value > sh[s->st_shndx].sh_size) {
        fail(err, errlen, "the code refers to %s, outside the object",
             s->st_name < strs->sh_size ? symnames + s->st_name : "a bad symbol");
        goto fail;
      }
      uint64_t S = (uint64_t)(uintptr_t)m + base[s->st_shndx] + s->st_value;
      v = (int64_t)(S + (uint64_t)rel[j].r_addend);
      switch (type) {
      case R_X86_64_64: memcpy(at, &v, 8); break;
      case R_X86_64_PC64: v -= P; memcpy(at, &v, 8); break;
      case R_X86_64_GOTOFF64: v -= GOT; memcpy(at, &v, 8); break;
      case R_X86_64_PC32:
      case R_X86_64_PLT32: { /* to a symbol defined here: the PLT is the symbol itself */
        v -= P;
        int32_t v32 = (int32_t)v;
        if (v32 != v) {
          fail(err, errlen, "PC-relative relocation out of range");
          goto fail;
        }
        memcpy(at, &v32, 4);
        break;
      }
      default:
        fail(err, errlen, "unsupported relocation type %u", type);
        goto fail;
      }
    }
  }

  /* The entry symbol: a function defined in a placed section. */
  for (size_t j = 1; j < nsyms; j++) {
    const Elf64_Sym *s = &syms[j];
    if (s->st_name >= strs->sh_size || ELF64_ST_TYPE(s->st_info) != STT_FUNC ||
        strcmp(symnames + s->st_name, sym) != 0)
      continue; /* the module's FILE symbol has the kernel's name too */
    if (s->st_shndx >= eh->e_shnum ||
        base[s->st_shndx] == UINT64_MAX || s->st_size == 0 ||
        s->st_value > sh[s->st_shndx].sh_size || sh[s->st_shndx].sh_size - s->st_value < s->st_size)
      break;
    if (mprotect(m, map_len, PROT_READ | PROT_EXEC) != 0) {
      fail(err, errlen, "cannot make the code executable");
      goto fail;
    }
    __builtin___clear_cache((char *)m, (char *)m + map_len);
    *out = (jt_loaded_t){m + base[s->st_shndx] + s->st_value, s->st_size, m, map_len};
    return 0;
  }
  fail(err, errlen, "no function %s in the object", sym);
  goto fail;
bad_rel_kind:
  fail(err, errlen, "REL relocations are not x86-64's");
fail:
  munmap(m, map_len);
  return -1;
}

void jt_obj_unload(jt_loaded_t *l)
{
  if (l->map)
    munmap(l->map, l->map_len);
  memset(l, 0, sizeof *l);
}
