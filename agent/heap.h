/* SPDX-License-Identifier: MIT */
/* The warm start's heap, and a compile thread's, made present in bulk before they allocate from it.
 *
 * A warm start (warm.h) allocates ~1 MB on its thread: SQLite's page cache as it reads the
 * profile, the stored objects' copies, the loader's maps. Each fresh page costs a fault at its
 * first write; on a Firecracker guest ~12 us, where one madvise(MADV_POPULATE_WRITE) over many
 * pages costs ~1 us a page and its first write ~6 more (the host's own fault). So before the
 * warm start the thread allocates blocks under glibc's 128 KB mmap threshold (they come from its
 * heap, one after the other), makes each block's pages present, and frees all but the last,
 * which stays allocated until the warm start ends so the freed space is not trimmed away: the
 * warm start's allocations reuse those pages. With another allocator the blocks may lie
 * anywhere: each is populated within its own bounds only, and at worst the populate is wasted. */
#ifndef OPJIT_AGENT_HEAP_H
#define OPJIT_AGENT_HEAP_H

#include <stddef.h>

#define AG_HEAP_BLOCK (120u << 10) /* under glibc's mmap threshold: from the thread's heap */
#define AG_HEAP_MAX (1080u << 10)  /* 9 blocks: the sweet spot for 50 stored kernels (Zen 5 guest:
                                      1 MB served 2-3 ms sooner, 2 MB ~1 ms) */

/* What a warm start from the database at dbpath allocates, about: twice its bytes on disk (the
 * file and its WAL: the pages SQLite may read, and the objects' copies), 0 when unknown. */
size_t ag_heap_warm_size(const char *dbpath);

/* Makes about bytes (at most AG_HEAP_MAX) of this thread's heap present and free for its next
 * allocations; returns the block to pass to ag_heap_warm_end once they are done (NULL when
 * nothing was allocated: bytes 0, or out of memory). */
void *ag_heap_warm_begin(size_t bytes);

/* Frees what ag_heap_warm_begin kept (NULL: nothing). */
void ag_heap_warm_end(void *kept);

/* A compile thread's heap. Loading LLVM (its session) and the first compile take ~750 fresh
 * pages of the thread's heap, and each later compile 30-200 again where glibc trimmed the freed
 * ones: on the Zen 5 guest 757 of the first kernel's faults were there, 162 with 2.9 MB of the
 * heap made present first. The compile thread makes AG_HEAP_JIT present once as it starts, and
 * keeps its last block for its life (compile threads never end), so the space stays its own:
 * held where LeakSanitizer looks (a global), as the thread-local pointer it once was is not. */
#define AG_HEAP_JIT (25 * AG_HEAP_BLOCK)

/* Scratch operands (a check's or a duel's): bytes of fresh memory, freed by ag_heap_scratch_free
 * with the same bytes. Each fresh 4 KB page costs a fault at its first write (~10 us on these
 * guests: a check of a double GEMV 1024^2 on scratch operands took 27-41 ms of CPU, its two kernels
 * 0.3), so from AG_HEAP_SCRATCH_HUGE on the mapping is aligned to 2 MB and asks for transparent
 * huge pages (madvise mode: granted where the kernel can; 9 MB first written in 2.7 ms against
 * 21 on the Zen 5 guest), in whole 2 MB pages; smaller ones come from malloc, as every one
 * does under AddressSanitizer (its guards catch a write past the operands). NULL when out of
 * memory. */
#define AG_HEAP_SCRATCH_HUGE (2u << 20)
void *ag_heap_scratch(size_t bytes);
void ag_heap_scratch_free(void *p, size_t bytes);

/* ag_heap_warm_begin without its AG_HEAP_MAX: about bytes of this thread's heap made present
 * and free; returns the block that keeps them (NULL: none). */
void *ag_heap_present(size_t bytes);

#endif
