/* SPDX-License-Identifier: MIT */
/* Loads opjit's own persisted kernel objects without LLVM: a warm run places the relocatable
 * ELF objects an earlier run's LLJIT linked (jit.h, gemm's *obj), in microseconds, where
 * loading LLVM alone costs ~27 ms.
 *
 * What it accepts is exactly what the generator produces: an x86-64 ELF64 relocatable object
 * whose code refers to nothing outside itself. Allocated sections (.text, .rodata.cst*) are
 * copied into one private anonymous mapping, the relocations between them are applied
 * (PC-relative, absolute 64-bit, and the large code model's GOT-relative pair, whose table is
 * only a base address: no entry of it is ever read), and the mapping is turned read+execute: it is never writable and
 * executable at once. .eh_frame is not loaded (nothing throws through a kernel: it calls
 * nothing); the sampler's walker gets its rules from jt_obj_cfi. Anything else — another machine, an undefined symbol, a GOT or TLS
 * relocation, a section or symbol outside the file — is refused with a sentence, never
 * guessed at. Integrity is the caller's business (jt_obj_checksum): the loader checks the
 * object's structure, not that its code is the code that was stored. */
#ifndef OPJIT_JIT_OBJLOAD_H
#define OPJIT_JIT_OBJLOAD_H

#include <stddef.h>
#include <stdint.h>

typedef struct jt_loaded_s {
  void *fn;      /* the entry symbol's address */
  size_t size;   /* its size in bytes (ELF st_size) */
  void *map;     /* the mapping, for jt_obj_unload */
  size_t map_len;
} jt_loaded_t;

/* Places obj (len bytes, 8-byte aligned as malloc returns it: the ELF structures are read in
 * place) and finds the function symbol named sym. Returns 0, or -1 with a sentence in err
 * (nothing stays mapped). jt_obj_cfi wants obj aligned the same way. */
int jt_obj_load(const void *obj, size_t len, const char *sym, jt_loaded_t *out, char *err,
                size_t errlen);

/* The call-frame rules of function sym in obj (its .eh_frame entry), rewritten for a stack
 * walker that reads them in memory (sampler/unwind.h, uw_add_code): one CIE and one FDE, the
 * FDE's range starting at code (where the function was placed, by jt_obj_load or by LLJIT from
 * the same object) and absolute (DW_EH_PE_absptr), the instructions as they were. Writes at
 * most cap bytes to out and returns the length, or -1 with a sentence in err (no entry for
 * sym, or a form this does not rewrite). */
long jt_obj_cfi(const void *obj, size_t len, const char *sym, uint64_t code, uint8_t *out,
                size_t cap, char *err, size_t errlen);

/* Unmaps what jt_obj_load or jt_obj_place placed (a batch's object: its own pages of the
 * batch's mapping). The caller guarantees no thread runs its code. */
void jt_obj_unload(jt_loaded_t *l);

/* A batch: several objects placed into one mapping that turns read+execute once, in
 * jt_obj_batch_commit. Each object gets whole pages of its own (jt_obj_unload frees them alone),
 * so a batch of n objects costs one mprotect, and one TLB shootdown across the threads running,
 * where n jt_obj_load calls cost n. Until the commit nothing in it is executable; after it
 * nothing in it is writable. */
typedef struct jt_obj_batch_s {
  unsigned char *map;
  size_t cap, used; /* bytes mapped and placed, whole pages */
  int committed;
} jt_obj_batch_t;

/* The bytes (whole pages) obj takes in a batch, or -1 with a sentence in err (it would not
 * place: jt_obj_load's structural checks). */
long jt_obj_size(const void *obj, size_t len, char *err, size_t errlen);

/* Opens batch b with room for cap bytes (jt_obj_size's sum), mapped read+write with its pages
 * present (the objects' copies write them all). 0, or -1 with a sentence in err (b is then
 * empty). */
int jt_obj_batch_begin(jt_obj_batch_t *b, size_t cap, char *err, size_t errlen);

/* Places obj into open batch b as jt_obj_load would, but not executable until
 * jt_obj_batch_commit: out->map and map_len are its own pages. Returns 0, or -1 with a
 * sentence in err (the batch is as it was: no room, or the object is refused). */
int jt_obj_place(jt_obj_batch_t *b, const void *obj, size_t len, const char *sym,
                 jt_loaded_t *out, char *err, size_t errlen);

/* Makes every object placed in b read+execute (one mprotect) and returns the unused rest of
 * the mapping. 0, or -1 with a sentence in err: then nothing of b stays mapped and every
 * jt_loaded_t it gave is void (never to be called or unloaded). */
int jt_obj_batch_commit(jt_obj_batch_t *b, char *err, size_t errlen);

/* Unmaps an open batch and everything placed in it (never called), or nothing once committed. */
void jt_obj_batch_abort(jt_obj_batch_t *b);

/* The 64-bit FNV-1a hash of an object's bytes, stored beside it and checked before loading:
 * it catches a damaged or altered blob (it is an integrity check, not an authentication). */
static inline uint64_t jt_obj_checksum(const void *p, size_t len)
{
  const unsigned char *b = p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < len; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

#endif
