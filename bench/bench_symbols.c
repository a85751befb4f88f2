/* SPDX-License-Identifier: MIT */
/* bench_symbols: what naming a short program's sampled PCs costs the writer, which does it in
 * the final write, at the program's exit (a short program's samples are drained then). Each
 * round names one batch of samples in a fresh aggregation (sampler/aggregate.h: its symbol
 * tables found and read again, as in a new process) once per way of searching the tables,
 * in an order that alternates:
 *   dwfl     every object's table read through libdw's dwfl and sorted at once (the way before
 *            tables were searched in place)
 *   sorted   the table libelf maps, sorted at an object's first lookup
 *   inplace  that table searched where it is mapped, one pass per lookup, never sorted
 *   auto     the agent's way: searched in place for an object's first lookups, then sorted
 * A batch holds K distinct functions' PCs in each of OpenBLAS, libc and this program, with
 * stacks through them (OpenBLAS, libblas, the program, libc, as a BLAS call's samples show);
 * the table gives the medians over rounds and the median of the rounds' ratios to dwfl. The
 * first round of each way loads libelf or libdw and is not counted.
 *
 *   bench_symbols [rounds]   (default 41) */
#define _GNU_SOURCE
#include "bench.h"
#include "sampler/aggregate.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXOBJ = 4, MAXK = 256, NWAYS = 4 };

typedef struct code_s {
  const char *name; /* what the path contains */
  uint64_t lo, hi;  /* its largest executable segment */
} code_t;

static code_t objs[MAXOBJ] = {
    {"openblas", 0, 0}, {"libblas", 0, 0}, {"libc.so", 0, 0}, {"", 0, 0}}; /* "": this program */

static int find_code(struct dl_phdr_info *info, size_t size, void *arg)
{
  (void)size, (void)arg;
  for (int k = 0; k < MAXOBJ; k++) {
    int self = !objs[k].name[0];
    if (self ? info->dlpi_name[0] != 0 : !strstr(info->dlpi_name, objs[k].name))
      continue;
    for (int i = 0; i < info->dlpi_phnum; i++) {
      const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
      if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && ph->p_memsz > objs[k].hi - objs[k].lo)
        objs[k].lo = info->dlpi_addr + ph->p_vaddr, objs[k].hi = objs[k].lo + ph->p_memsz;
    }
    break;
  }
  return 0;
}

/* The j-th of k PCs spread over object o's code (odd offsets: mid-function). */
static uint64_t pc_of(int o, int j, int k)
{
  return objs[o].lo + (objs[o].hi - objs[o].lo) / (uint64_t)k * (uint64_t)j + 37;
}

/* One sample per PC in OpenBLAS, libc and this program (k of each), each with a stack: the
 * OpenBLAS ones through libblas, this program and libc, the others through libc. */
static size_t make_batch(sp_sample_t *s, int k)
{
  size_t n = 0;
  for (int j = 0; j < k; j++) {
    uint64_t blas = pc_of(0, j, k), wrap = pc_of(1, j % 4, 4), self = pc_of(3, j, k),
             libc = pc_of(2, j, k);
    s[n++] = (sp_sample_t){.pc = blas,
                           .nframes = 5,
                           .weight = 1,
                           .frames = {blas, pc_of(0, (j + 1) % k, k), wrap, self, libc}};
    s[n++] = (sp_sample_t){.pc = libc, .nframes = 3, .weight = 1, .frames = {libc, self, libc}};
    s[n++] = (sp_sample_t){.pc = self, .nframes = 2, .weight = 1, .frames = {self, libc}};
  }
  return n;
}

/* ms to name the batch in a fresh aggregation searching its tables as how says. */
static double name_batch(const sp_sample_t *s, size_t n, enum sp_agg_tables how)
{
  uint64_t t0 = bn_now_ns();
  sp_agg_t *a = sp_agg_new();
  if (!a)
    return -1;
  sp_agg_tables(a, how);
  sp_agg_add(a, s, n, 0);
  sp_agg_free(a);
  return (double)(bn_now_ns() - t0) / 1e6;
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 41;
  if (rounds < 1) {
    fprintf(stderr, "usage: %s [rounds]   (rounds >= 1, default 41)\n", argv[0]);
    return 2;
  }
  setenv("OPENBLAS_NUM_THREADS", "1", 1); /* its code is named, its pool is not needed */
  if (!dlopen("libblas.so.3", RTLD_NOW | RTLD_GLOBAL)) {
    fprintf(stderr, "bench_symbols: cannot load libblas.so.3: %s\n", dlerror());
    return 1;
  }
  dl_iterate_phdr(find_code, NULL);
  for (int o = 0; o < MAXOBJ; o++)
    if (objs[o].hi <= objs[o].lo) {
      fprintf(stderr, "bench_symbols: no code of %s found\n",
              o == 3 ? "this program" : objs[o].name);
      return 1;
    }
  static const enum sp_agg_tables ways[NWAYS] = {SP_TABLES_DWFL, SP_TABLES_SORTED,
                                                 SP_TABLES_IN_PLACE, SP_TABLES_AUTO};
  static const char *const names[NWAYS] = {"dwfl", "sorted", "inplace", "auto"};
  static const int ks[] = {4, 16, 64, 256};
  static sp_sample_t batch[3 * MAXK];
  double *t[NWAYS], *ratio = calloc((size_t)rounds, sizeof *ratio);
  for (int w = 0; w < NWAYS; w++)
    if (!(t[w] = calloc((size_t)rounds, sizeof *t[w])) || !ratio) {
      fprintf(stderr, "bench_symbols: out of memory\n");
      return 1;
    }
  char cpu[128];
  bn_cpu_name(cpu, sizeof cpu);
  printf("naming a batch of sampled PCs in a fresh aggregation (the final write of a short "
         "program), %s\n",
         cpu);
  printf("K distinct functions' PCs in each of OpenBLAS, libc and this program, with stacks; "
         "ms, medians over %d rounds\n\n",
         rounds);
  printf("%5s %8s", "K", "samples");
  for (int w = 0; w < NWAYS; w++)
    printf(" %9s", names[w]);
  for (int w = 1; w < NWAYS; w++)
    printf(" %8s/dwfl", names[w]);
  printf("\n");
  for (size_t c = 0; c < sizeof ks / sizeof *ks; c++) {
    size_t n = make_batch(batch, ks[c]);
    for (int w = 0; w < NWAYS; w++)
      name_batch(batch, n, ways[w]); /* loads libelf and libdw, warms the page cache */
    for (int r = 0; r < rounds; r++)
      for (int j = 0; j < NWAYS; j++) {
        int w = (r & 1) ? NWAYS - 1 - j : j;
        if ((t[w][r] = name_batch(batch, n, ways[w])) < 0) {
          fprintf(stderr, "bench_symbols: out of memory\n");
          return 1;
        }
      }
    double med[NWAYS], spread, rmed[NWAYS];
    for (int w = 0; w < NWAYS; w++) {
      for (int r = 0; r < rounds; r++)
        ratio[r] = t[w][r] / t[0][r];
      bn_stat(ratio, (size_t)rounds, &rmed[w], &spread);
      bn_stat(t[w], (size_t)rounds, &med[w], &spread);
    }
    printf("%5d %8zu", ks[c], n);
    for (int w = 0; w < NWAYS; w++)
      printf(" %9.3f", med[w]);
    for (int w = 1; w < NWAYS; w++)
      printf(" %13.3f", rmed[w]);
    printf("\n");
  }
  printf("auto searches each object's table in place for its first 16 lookups (a lookup per "
         "function: the others hit its range), then sorts it\n");
  for (int w = 0; w < NWAYS; w++)
    free(t[w]);
  free(ratio);
  return 0;
}
