/* SPDX-License-Identifier: MIT */
/* The sampler in this very process: real signals from real perf events (or timers), threads
 * armed before and after the start, stacks stitched at an operator's entry frame through code
 * without CFI, static functions named from .symtab, PCs named from each object's symbol table
 * (no dladdr, which scans all of an object's symbols), searched in place or sorted alike, a host's own SIGPROF left alone, the
 * fallbacks when perf_event_open is refused (through the syscall seam), and the counter-group
 * parser. */
#define _GNU_SOURCE
#include "sampler/aggregate.h"
#include "sampler/sampler.h"
#include "sampler/sys.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static __thread volatile uint32_t my_op; /* what own() reports (read by the signal handler) */
static uint32_t own(void) { return my_op; }

static void burn_ms(int ms)
{
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  volatile double x = 0;
  do {
    for (int i = 0; i < 100000; i++)
      x += i * 0.5;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  } while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
}

static sp_sample_t samples[8192];

/* Drains everything; counts samples per op (ops < 8), each by its weight (the periods it
 * stands for). Returns the weights' sum. */
static size_t drain_ops(uint64_t per_op[8])
{
  size_t total = 0, n;
  memset(per_op, 0, 8 * sizeof *per_op);
  while ((n = sp_drain(samples, 8192)) > 0) {
    for (size_t i = 0; i < n; i++) {
      cr_assert_neq(samples[i].pc, 0);
      cr_assert_geq(samples[i].nframes, 1);
      cr_assert_eq(samples[i].frames[0], samples[i].pc);
      cr_assert_geq(samples[i].weight, 1);
      if (samples[i].op < 8)
        per_op[samples[i].op] += samples[i].weight;
      total += samples[i].weight;
    }
  }
  return total;
}

/* Arms this thread, burns ms of CPU as operator op and returns the periods sampled in it. */
static uint64_t sampled_periods(uint32_t op, int ms)
{
  sp_thread_begin();
  my_op = op;
  burn_ms(ms);
  my_op = 0;
  uint64_t per_op[8];
  drain_ops(per_op);
  return per_op[op];
}

struct worker {
  uint32_t op;
  int ms, arm_self;
  pthread_barrier_t *go;
  atomic_int started; /* the thread runs (a thread not yet started blocks every signal) */
};

static void *worker_main(void *p)
{
  struct worker *w = p;
  atomic_store(&w->started, 1);
  my_op = w->op;
  if (w->arm_self)
    sp_thread_begin();
  pthread_barrier_wait(w->go);
  burn_ms(w->ms);
  return NULL;
}

static void fini(void)
{
  sp_stop();
  sp_sys = sp_sys_real;
}

TestSuite(sampler, .fini = fini, .timeout = 60);

Test(sampler, threads_armed_before_and_after_the_start_are_both_sampled)
{
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, 3);
  struct worker before = {1, 400, 0, &go, 0}, after = {2, 400, 1, &go, 0};
  pthread_t t1, t2;
  pthread_create(&t1, NULL, worker_main, &before); /* exists when sampling starts */
  while (!atomic_load(&before.started))
    usleep(1000);
  sp_config_t cfg = {.hz = 1000, .events = "auto", .stack_depth = 16, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  pthread_create(&t2, NULL, worker_main, &after); /* arms itself, as the agent's wrapper does */
  pthread_barrier_wait(&go);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  uint64_t per_op[8];
  size_t total = drain_ops(per_op);
  sp_status_t st;
  sp_status(&st);
  cr_assert_neq(st.mode, SP_OFF);
  /* 400 ms of CPU at 1 kHz: at least a quarter of the expected 400 samples each (a loaded VM
   * delivers fewer; perf delivers 95-99 % when idle). */
  cr_assert_gt(per_op[1], 100, "pre-existing thread: %llu samples (%s)", (unsigned long long)per_op[1], st.event);
  cr_assert_gt(per_op[2], 100, "new thread: %llu samples", (unsigned long long)per_op[2]);
  cr_assert_eq(st.samples, total);
  pthread_barrier_destroy(&go);
}

struct stack_count {
  uint64_t with, all;
};

static void count_stack(void *ctx, uint32_t op, const char *folded, uint64_t k)
{
  struct stack_count *x = ctx;
  if (op != 3)
    return;
  x->all += k;
  if (strstr(folded, "test_sampler`"))
    x->with += k;
}

Test(sampler, stacks_reach_the_callers)
{
  sp_config_t cfg = {.hz = 1000, .events = "task-clock", .stack_depth = 16, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  sp_thread_begin();
  my_op = 3;
  burn_ms(300);
  my_op = 0;
  sp_stop();
  size_t n = sp_drain(samples, 8192);
  cr_assert_gt(n, 50);
  sp_status_t st;
  sp_status(&st);
  cr_assert_geq(st.walked * 10, n * 9, "the sampler's walker took %llu of %zu stacks (libunwind %llu)",
                (unsigned long long)st.walked, n, (unsigned long long)st.unwound);
  sp_agg_t *a = sp_agg_new();
  sp_agg_add(a, samples, n, 0);
  /* Every stack of op 3 must pass through this test program's own code. */
  struct stack_count c = {0, 0};
  sp_agg_visit(a, &(sp_agg_visit_t){&c, NULL, NULL, count_stack, NULL});
  sp_agg_free(a);
  cr_assert_gt(c.all, 50);
  cr_assert_geq(c.with * 10, c.all * 9, "only %llu of %llu stacks reach the test program",
                (unsigned long long)c.with, (unsigned long long)c.all);
}

/* Threads younger than their 16th sample take their stacks from libunwind's step-by-step walk,
 * not from unw_backtrace, whose first use in a thread maps and fills a 256 KB cache (64 pages
 * touched): those stacks reach the callers too, and a short thread costs no such pages. */
static void *young_main(void *p)
{
  (void)p;
  sp_thread_begin();
  my_op = 3;
  burn_ms(8);
  return NULL;
}

/* Runs 40 short threads one after the other; returns the minor page faults they cost. */
static long young_threads(void)
{
  struct rusage a, b;
  getrusage(RUSAGE_SELF, &a);
  for (int i = 0; i < 40; i++) { /* ~8 samples each at 1 kHz, all of them young */
    pthread_t t;
    pthread_create(&t, NULL, young_main, NULL);
    pthread_join(t, NULL);
  }
  getrusage(RUSAGE_SELF, &b);
  return b.ru_minflt - a.ru_minflt;
}

Test(sampler, young_threads_stacks_reach_the_callers)
{
  long unsampled = young_threads();
  sp_config_t cfg = {.hz = 1000, .events = "task-clock", .stack_depth = 16, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  young_threads(); /* the first slots' rings are allocated here */
  sp_drain(samples, 8192);
  long sampled = young_threads();
  sp_stop();
  size_t n = sp_drain(samples, 8192);
  cr_assert_gt(n, 50);
  /* a cache per thread would be 40 x 64 pages; ASan's shadow of each thread's handler frames
   * faults too (~24 pages a thread) */
#if defined(__SANITIZE_ADDRESS__)
  const long bound = 40 * 48;
#else
  const long bound = 40 * 16;
#endif
  cr_assert_lt(sampled - unsampled, bound, "%ld page faults more than without sampling: a "
               "cache per young thread?", sampled - unsampled);
  size_t deep = 0;
  for (size_t i = 0; i < n; i++)
    deep += samples[i].nframes >= 3;
  cr_assert_geq(deep * 10, n * 9, "only %zu of %zu samples have a stack", deep, n);
  sp_agg_t *a = sp_agg_new();
  sp_agg_add(a, samples, n, 0);
  struct stack_count c = {0, 0};
  sp_agg_visit(a, &(sp_agg_visit_t){&c, NULL, NULL, count_stack, NULL});
  sp_agg_free(a);
  cr_assert_geq(c.with * 10, c.all * 9, "only %llu of %llu stacks reach the test program",
                (unsigned long long)c.with, (unsigned long long)c.all);
}

/* Code without CFI, in no object (as a hand-written kernel is to the walker): a frame of its
 * own with a garbage RBP, so that no frame-pointer guess finds the way out; spins n times. */
static const uint8_t spin_code[] = {
    0x55,                                                       /* push %rbp */
    0x48, 0x89, 0xf9,                                           /* mov %rdi,%rcx */
    0x48, 0xbd, 0xef, 0xbe, 0xad, 0xde, 0xef, 0xbe, 0xad, 0xde, /* movabs $0xdeadbeef..,%rbp */
    0x48, 0xff, 0xc9,                                           /* 1: dec %rcx */
    0x75, 0xfb,                                                 /* jnz 1b */
    0x5d,                                                       /* pop %rbp */
    0xc3,                                                       /* ret */
};
static uint64_t entry_return; /* where operator_entry returns to in its caller */

/* What the agent's interposed function does (agent.h): records its frame, marks the thread
 * inside operator 5, runs the operator's code (spin, n rounds of 100000) and leaves. */
__attribute__((noinline)) static void operator_entry(void (*spin)(long), long n)
{
  entry_return = (uint64_t)(uintptr_t)__builtin_return_address(0);
  sp_tl_entry_frame = (uintptr_t)__builtin_frame_address(0);
  my_op = 5;
  for (long i = 0; i < n; i++)
    spin(100000);
  my_op = 0;
}

/* A thread's first access to libunwind's thread-local storage (dlopen'ed: dynamic TLS)
 * allocates its block with malloc inside __tls_get_addr, which a signal handler must never
 * reach: a thread begun through sp_thread_begin has the block before any sample needs it. */
static void *tls_main(void *unw)
{
  sp_thread_begin();
  void *block = NULL;
  cr_assert_eq(dlinfo(unw, RTLD_DI_TLS_DATA, &block), 0, "%s", dlerror());
  return block;
}

Test(sampler, libunwind_tls_is_allocated_before_the_first_sample)
{
  sp_config_t cfg = {.hz = 1000, .events = "task-clock", .stack_depth = 16, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  void *unw = dlopen("libunwind.so.8", RTLD_NOW | RTLD_NOLOAD);
  if (!unw)
    cr_skip_test("libunwind.so.8 is not installed: stacks come from the walker alone");
  size_t mod = 0;
  cr_assert_eq(dlinfo(unw, RTLD_DI_TLS_MODID, &mod), 0);
  if (!mod)
    cr_skip_test("this libunwind has no thread-local storage");
  pthread_t t;
  void *block = NULL;
  cr_assert_eq(pthread_create(&t, NULL, tls_main, unw), 0);
  pthread_join(t, &block);
  sp_stop();
  dlclose(unw);
  cr_assert_not_null(block, "the thread's libunwind TLS block is left to the signal handler");
}

Test(sampler, stacks_in_code_without_cfi_go_on_from_the_entry_frame)
{
  uint8_t *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(code, MAP_FAILED);
  memcpy(code, spin_code, sizeof spin_code);
  cr_assert_eq(mprotect(code, 4096, PROT_READ | PROT_EXEC), 0);
  void (*spin)(long);
  *(void **)&spin = code;
  sp_config_t cfg = {.hz = 1000, .events = "task-clock", .stack_depth = 16, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  sp_thread_begin();
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  do {
    operator_entry(spin, 200);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  } while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < 300);
  sp_stop();
  size_t n = sp_drain(samples, 8192), inside = 0, stitched = 0;
  for (size_t i = 0; i < n; i++) {
    const sp_sample_t *s = &samples[i];
    if (s->op != 5 || s->pc < (uint64_t)(uintptr_t)code ||
        s->pc >= (uint64_t)(uintptr_t)code + sizeof spin_code)
      continue;
    inside++;
    /* the spin's PC, then the entry's caller and on outwards: the entry's own frame (the
     * agent's wrapper) is what the stitch steps over */
    if (s->nframes > 2 && s->frames[1] == entry_return && (s->flags & SP_F_STITCHED))
      stitched++;
  }
  munmap(code, 4096);
  cr_assert_gt(inside, 50, "%zu of %zu samples inside the code without CFI", inside, n);
  cr_assert_eq(stitched, inside, "%zu of %zu stacks went on from the entry frame", stitched,
               inside);
  sp_status_t st;
  sp_status(&st);
  cr_assert_geq(st.stitched, stitched);
}

/* Not exported (test programs have no -rdynamic): in .symtab only. */
__attribute__((noinline)) static int symtab_only(int x)
{
  return x * 3 + 1;
}

static char pc_symbol[128];
static void pc_named(void *ctx, uint32_t op, const char *module, const char *symbol,
                     uint64_t samples_)
{
  (void)ctx, (void)op, (void)module, (void)samples_;
  snprintf(pc_symbol, sizeof pc_symbol, "%s", symbol);
}

Test(sampler, a_static_function_is_named_from_symtab)
{
  cr_assert_eq(symtab_only(1), 4);
  uint64_t pc = (uint64_t)(uintptr_t)&symtab_only + 1;
  Dl_info d;
  cr_assert(dladdr((void *)(uintptr_t)pc, &d));
  cr_assert(!d.dli_sname || strcmp(d.dli_sname, "symtab_only"),
            "dladdr names it: the test would prove nothing");
  sp_sample_t s = {.pc = pc, .nframes = 1, .weight = 1, .frames = {pc}};
  sp_agg_t *a = sp_agg_new();
  sp_agg_add(a, &s, 1, 0);
  sp_agg_visit(a, &(sp_agg_visit_t){NULL, NULL, pc_named, NULL, NULL});
  sp_agg_free(a);
  cr_assert_str_eq(pc_symbol, "symtab_only");
}

/* dladdr1, counted: the aggregator, linked into this program, calls this one. */
static atomic_int dladdr1_calls;
int dladdr1(const void *addr, Dl_info *info, void **extra, int flags)
{
  static int (*real)(const void *, Dl_info *, void **, int);
  if (!real)
    *(void **)&real = dlsym(RTLD_NEXT, "dladdr1");
  atomic_fetch_add(&dladdr1_calls, 1);
  return real(addr, info, extra, flags);
}

static uint64_t code_lo, code_hi; /* libc's largest executable segment */
static int find_libc_code(struct dl_phdr_info *info, size_t size, void *arg)
{
  (void)size, (void)arg;
  if (!strstr(info->dlpi_name, "/libc.so.6"))
    return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && ph->p_memsz > code_hi - code_lo)
      code_lo = info->dlpi_addr + ph->p_vaddr, code_hi = code_lo + ph->p_memsz;
  }
  return 1;
}

#define LIBC_PCS 512
static char libc_names[LIBC_PCS][128];
static void pc_of_op(void *ctx, uint32_t op, const char *module, const char *symbol,
                     uint64_t samples_)
{
  (void)ctx, (void)module, (void)samples_;
  if (op >= 1 && op <= LIBC_PCS)
    snprintf(libc_names[op - 1], sizeof libc_names[0], "%s", symbol);
}

/* A PC costs a binary search in its object's symbol table, read once: dladdr's symbol search
 * walks all of the object's dynamic symbols for each PC (~2 ms in libtorch_cpu's 35,000). The
 * names are still those of the dynamic symbols holding the PCs, or of their aliases. */
Test(sampler, pcs_are_named_from_sorted_symbol_tables_not_dladdr)
{
  cr_assert(dl_iterate_phdr(find_libc_code, NULL) && code_hi > code_lo);
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  cr_assert(libc);
  static sp_sample_t s[LIBC_PCS];
  for (int i = 0; i < LIBC_PCS; i++) {
    uint64_t pc = code_lo + (code_hi - code_lo) / LIBC_PCS * (uint64_t)i + 7;
    s[i] = (sp_sample_t){.pc = pc, .op = (uint32_t)i + 1, .nframes = 1, .weight = 1,
                         .frames = {pc}};
  }
  sp_agg_t *a = sp_agg_new();
  atomic_store(&dladdr1_calls, 0);
  sp_agg_add(a, s, LIBC_PCS, 0);
  int calls = atomic_load(&dladdr1_calls);
  sp_agg_visit(a, &(sp_agg_visit_t){NULL, NULL, pc_of_op, NULL, NULL});
  sp_agg_free(a);
  cr_assert_eq(calls, 0, "%d dladdr1 calls for %d PCs", calls, LIBC_PCS);
  int held = 0, same = 0;
  for (int i = 0; i < LIBC_PCS; i++) {
    Dl_info d;
    const ElfW(Sym) *es = NULL;
    if (!dladdr1((void *)(uintptr_t)s[i].pc, &d, (void **)&es, RTLD_DL_SYMENT) ||
        !d.dli_sname || !es || !es->st_size ||
        s[i].pc - (uint64_t)(uintptr_t)d.dli_saddr >= es->st_size)
      continue;
    held++;
    void *mine = dlsym(libc, libc_names[i]); /* an alias: the same code (an IFUNC's choice) */
    same += strcmp(libc_names[i], d.dli_sname) == 0 || mine == d.dli_saddr ||
            (mine && mine == dlsym(libc, d.dli_sname));
  }
  dlclose(libc);
  cr_assert_gt(held, LIBC_PCS / 8, "dynamic symbols held %d of %d PCs", held, LIBC_PCS);
  cr_assert_eq(same, held, "%d of the %d PCs a dynamic symbol holds got its name or an alias's",
               same, held);
}

/* dlopen, counted by library: the aggregator, linked into this program, calls this one. */
static atomic_int libdw_loads;
void *dlopen(const char *file, int mode)
{
  static void *(*real)(const char *, int);
  if (!real)
    *(void **)&real = dlsym(RTLD_NEXT, "dlopen");
  if (file && strstr(file, "libdw.so"))
    atomic_fetch_add(&libdw_loads, 1);
  return real(file, mode);
}

#define SPREAD_PCS 8192

/* Code whose symbols take every branch of the naming rule: a sized function, a label without a
 * size inside it that runs past its end (named by nothing past that end: the function reached
 * past the label), two labels after it (the later in the table names up to the next symbol), a
 * sized alias pair (the weak one names it). */
__asm__(".text\n"
        ".type rule_sized, @function\n"
        "rule_sized: .fill 16, 1, 0x90\n"
        "rule_label_inside: .fill 32, 1, 0x90\n"
        ".size rule_sized, 32\n"
        "rule_label_after:\n"
        "rule_label_twin: .fill 16, 1, 0x90\n"
        ".weak rule_weak\n"
        ".type rule_weak, @function\n"
        ".type rule_local, @function\n"
        "rule_weak:\n"
        "rule_local: .fill 16, 1, 0x90\n"
        ".size rule_weak, 16\n"
        ".size rule_local, 8\n"
        "rule_end: ret\n");
extern const char rule_sized[], rule_end[];
static struct {
  uint64_t lo, hi;
} code_segs[64];
static int ncode_segs;
static int find_code(struct dl_phdr_info *info, size_t size, void *arg)
{
  (void)size, (void)arg;
  for (int i = 0; i < info->dlpi_phnum && ncode_segs < 64; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      code_segs[ncode_segs].lo = info->dlpi_addr + ph->p_vaddr;
      code_segs[ncode_segs++].hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
    }
  }
  return 0;
}

static char spread_names[SPREAD_PCS][192];
static void spread_named(void *ctx, uint32_t op, const char *module, const char *symbol,
                         uint64_t samples_)
{
  (void)ctx, (void)samples_;
  if (op >= 1 && op <= SPREAD_PCS)
    snprintf(spread_names[op - 1], sizeof spread_names[0], "%s`%s", module, symbol);
}

/* Names n samples' PCs (op i + 1 for the i-th) searching symbol tables the way how says. */
static void name_spread(const sp_sample_t *s, size_t n, enum sp_agg_tables how)
{
  memset(spread_names, 0, sizeof spread_names);
  sp_agg_t *a = sp_agg_new();
  cr_assert(a);
  sp_agg_tables(a, how);
  sp_agg_add(a, s, n, 0);
  sp_agg_visit(a, &(sp_agg_visit_t){NULL, NULL, spread_named, NULL, NULL});
  sp_agg_free(a);
}

/* A short program's samples are named at its exit: an object's first lookups search its table
 * where libelf mapped it, without reading it through dwfl (whose copy and sort of libopenblas's
 * 15,000 symbols took 2.6-5 ms) and without loading libdw. Every way of searching gives every
 * PC the name dwfl's sorted table gives it: PCs spread over the code of every object loaded
 * here (this program's .symtab, libc's .dynsym, Criterion's) and of OpenBLAS (whose assembly
 * kernels are labels without a size), at odd offsets. */
Test(sampler, symbol_tables_searched_in_place_or_sorted_name_pcs_alike)
{
  static sp_sample_t s[SPREAD_PCS];
  static char want[SPREAD_PCS][192];
  cr_assert_eq(symtab_only(2), 7);
  uint64_t own = (uint64_t)(uintptr_t)&symtab_only + 1;
  s[0] = (sp_sample_t){.pc = own, .op = 1, .nframes = 1, .weight = 1, .frames = {own}};
  atomic_store(&libdw_loads, 0);
  name_spread(s, 1, SP_TABLES_AUTO);
  cr_assert_eq(atomic_load(&libdw_loads), 0, "this program's .symtab needed libdw");
  cr_assert(strstr(spread_names[0], "`symtab_only"), "named %s", spread_names[0]);

  setenv("OPENBLAS_NUM_THREADS", "1", 1); /* no pool: only its code is read */
  void *blas = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  cr_assert(blas, "OpenBLAS (scripts/deps.sh installs it): %s", dlerror());
  dl_iterate_phdr(find_code, NULL);
  cr_assert_gt(ncode_segs, 3);
  size_t n = 0;
  for (const char *p = rule_sized; p <= rule_end; p++, n++)
    s[n] = (sp_sample_t){.pc = (uint64_t)(uintptr_t)p, .op = (uint32_t)n + 1, .nframes = 1,
                         .weight = 1, .frames = {(uint64_t)(uintptr_t)p}};
  size_t per = (SPREAD_PCS - n) / (size_t)ncode_segs;
  for (int k = 0; k < ncode_segs; k++)
    for (size_t i = 0; i < per; i++, n++) {
      uint64_t pc = code_segs[k].lo + (code_segs[k].hi - code_segs[k].lo) / per * i + i % 13;
      s[n] = (sp_sample_t){.pc = pc, .op = (uint32_t)n + 1, .nframes = 1, .weight = 1,
                           .frames = {pc}};
    }
  name_spread(s, n, SP_TABLES_DWFL);
  memcpy(want, spread_names, sizeof want);
  int named = 0;
  for (size_t i = 0; i < n; i++)
    named += want[i][0] && !strstr(want[i], "`+0x") && !strstr(want[i], "`0x");
  cr_assert_gt(named, (int)n / 2, "dwfl named %d of %zu PCs", named, n);
  static const enum sp_agg_tables ways[] = {SP_TABLES_IN_PLACE, SP_TABLES_SORTED, SP_TABLES_AUTO};
  static const char *const way_names[] = {"in place", "sorted", "auto"};
  for (int w = 0; w < 3; w++) {
    name_spread(s, n, ways[w]);
    int differ = 0, first = -1;
    for (size_t i = 0; i < n; i++)
      if (strcmp(want[i], spread_names[i]) && differ++ == 0)
        first = (int)i;
    cr_expect_eq(differ, 0, "%s: %d of %zu PCs named otherwise, first 0x%llx: %s, not %s",
                 way_names[w], differ, n, first < 0 ? 0ull : (unsigned long long)s[first].pc,
                 first < 0 ? "" : spread_names[first], first < 0 ? "" : want[first]);
  }
  dlclose(blas);
}

static atomic_int prof_hits;
static void on_sigprof(int s)
{
  (void)s;
  atomic_fetch_add(&prof_hits, 1);
}

Test(sampler, a_host_sigprof_handler_stays_intact)
{
  struct sigaction sa = {0}, now;
  sa.sa_handler = on_sigprof;
  sigaction(SIGPROF, &sa, NULL);
  struct itimerval it = {{0, 5000}, {0, 5000}};
  setitimer(ITIMER_PROF, &it, NULL);
  sp_config_t cfg = {.hz = 500, .events = "auto", .stack_depth = 4, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  sp_thread_begin();
  burn_ms(200);
  struct itimerval off = {0};
  setitimer(ITIMER_PROF, &off, NULL);
  sp_status_t st;
  sp_status(&st);
  cr_assert_neq(st.signo, SIGPROF);
  sigaction(SIGPROF, NULL, &now);
  cr_assert_eq(now.sa_handler, on_sigprof, "the host's SIGPROF handler was replaced");
  cr_assert_gt(atomic_load(&prof_hits), 10, "the host got %d SIGPROFs", atomic_load(&prof_hits));
  uint64_t per_op[8];
  cr_assert_gt(drain_ops(per_op), 30, "and the sampler sampled");
}

static int refuse_perf(struct perf_event_attr *a, pid_t t, int c, int g, unsigned long f)
{
  (void)a, (void)t, (void)c, (void)g, (void)f;
  errno = EACCES;
  return -1;
}

static int refuse_timer(clockid_t c, struct sigevent *e, timer_t *t)
{
  (void)c, (void)e, (void)t;
  errno = ENOSYS;
  return -1;
}

/* Cycles refused at a rate the scheduler's tick keeps: the thread's CPU-time timer comes next
 * (no perf clock is tried: each of its samples would be an interrupt of its own). */
Test(sampler, refused_perf_falls_back_to_timers)
{
  sp_sys.perf_event_open = refuse_perf;
  sp_config_t cfg = {.hz = 100, .events = "cycles", .stack_depth = 4, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  sp_status_t st;
  sp_status(&st);
  cr_assert_eq(st.mode, SP_TIMER);
  cr_assert_str_eq(st.event, "timer");
  cr_assert_eq(st.fallback, 1);
  cr_assert(strstr(st.notes, "cycles: not permitted"), "%s", st.notes);
  cr_assert_null(strstr(st.notes, "task-clock"), "%s", st.notes);
  uint64_t n = sampled_periods(4, 300);
  cr_assert_gt(n, 10, "timer sampling delivered %llu periods of ~30", (unsigned long long)n);
}

/* Above any scheduler tick (CONFIG_HZ is at most 1000) a timer could not keep the rate: the
 * perf clock comes before it, and the timer only when that is refused too. */
Test(sampler, above_the_tick_rate_the_perf_clock_comes_first)
{
  sp_sys.perf_event_open = refuse_perf;
  sp_config_t cfg = {.hz = 2000, .events = "auto", .stack_depth = 4, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  sp_status_t st;
  sp_status(&st);
  cr_assert_eq(st.mode, SP_TIMER);
  cr_assert_eq(st.fallback, 1, "task-clock was refused: a step down");
  const char *c = strstr(st.notes, "cycles: not permitted"), *t = strstr(st.notes, "task-clock: not permitted");
  cr_assert(c && t && c < t, "%s", st.notes);
}

static int no_pmu(struct perf_event_attr *a, pid_t t, int c, int g, unsigned long f)
{
  (void)t, (void)c, (void)g, (void)f;
  if (a->type == PERF_TYPE_HARDWARE) {
    errno = ENOENT;
    return -1;
  }
  return (int)syscall(SYS_perf_event_open, a, t, c, g, f);
}

/* Auto on a machine without a PMU, at the default rate: timers, and no fallback to warn of
 * (a missing PMU is the machine's, not a refusal); refused by permission, the same timers
 * with a fallback (the warning says hardware counters were denied). */
Test(sampler, auto_without_a_pmu_samples_with_timers)
{
  struct timespec res;
  cr_assert_eq(clock_getres(CLOCK_MONOTONIC_COARSE, &res), 0);
  if (res.tv_nsec > 1000000000L / 199)
    cr_skip_test("this kernel ticks at %ld Hz, under 199", 1000000000L / res.tv_nsec);
  sp_sys.perf_event_open = no_pmu;
  sp_config_t cfg = {.hz = 199, .events = "auto", .stack_depth = 4, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  sp_status_t st;
  sp_status(&st);
  cr_assert_eq(st.mode, SP_TIMER);
  cr_assert_eq(st.fallback, 0, "%s", st.notes);
  sp_stop();
  sp_sys.perf_event_open = refuse_perf;
  cr_assert_eq(sp_start(&cfg), 0);
  sp_status(&st);
  cr_assert_eq(st.mode, SP_TIMER);
  cr_assert_eq(st.fallback, 1, "%s", st.notes);
  cr_assert(strstr(st.notes, "cycles: not permitted"), "%s", st.notes);
}

/* Timers, asked for: no step down, and samples whose weights add up to the asked rate's count
 * of periods, whatever the scheduler tick. */
Test(sampler, timer_samples_carry_the_periods_they_stand_for)
{
  sp_config_t cfg = {.hz = 1000, .events = "timer", .stack_depth = 4, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  sp_status_t st;
  sp_status(&st);
  cr_assert_str_eq(st.event, "timer");
  cr_assert_eq(st.fallback, 0);
  uint64_t n = sampled_periods(5, 300); /* 300 ms of CPU */
  cr_assert_gt(n, 300 / 4, "%llu periods sampled of ~300", (unsigned long long)n);
  cr_assert_lt(n, 300 * 2, "%llu periods sampled of ~300", (unsigned long long)n);
}

/* Starts sampling ("auto", 200 Hz) while another thread exists, so that arming it tries the
 * mechanism; returns sp_start's result and the status once that thread has finished. */
static int start_with_a_thread(sp_status_t *st)
{
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, 2);
  struct worker w = {1, 50, 0, &go, 0};
  pthread_t t;
  pthread_create(&t, NULL, worker_main, &w);
  while (!atomic_load(&w.started))
    usleep(1000);
  sp_config_t cfg = {.hz = 200, .events = "auto", .stack_depth = 4, .attrib = {own, NULL}};
  int rc = sp_start(&cfg);
  pthread_barrier_wait(&go);
  pthread_join(t, NULL);
  pthread_barrier_destroy(&go);
  sp_status(st);
  return rc;
}

Test(sampler, refused_perf_and_timers_turn_sampling_off)
{
  sp_sys.perf_event_open = refuse_perf;
  sp_sys.timer_create = refuse_timer;
  sp_status_t st;
  cr_assert_eq(start_with_a_thread(&st), -1);
  cr_assert_eq(st.mode, SP_OFF);
  cr_assert_eq(sp_active(), 0);
  cr_assert(strstr(st.notes, "timer: perf_event_open is not available") ||
                strstr(st.notes, "timer: "), "%s", st.notes);
}

Test(sampler, hardware_counters_when_the_cpu_exposes_them)
{
  sp_config_t cfg = {.hz = 1000, .events = "cycles", .stack_depth = 2, .attrib = {own, NULL}};
  sp_start(&cfg);
  sp_status_t st;
  sp_status(&st);
  if (st.mode != SP_PERF_HW)
    cr_skip_test("no hardware PMU here (%s); the group parser is tested on recorded data",
                 st.notes);
  sp_thread_begin();
  burn_ms(200);
  size_t n = sp_drain(samples, 8192);
  uint64_t instr = 0;
  for (size_t i = 0; i < n; i++)
    instr += samples[i].counters[0];
  cr_assert_gt(instr, 1000000, "instructions counted over 200 ms of work");
}

Test(sampler, group_read_format_parses_recorded_data)
{
  /* A PERF_FORMAT_GROUP read of cycles + 3 members, as recorded from a machine with a PMU. */
  const uint64_t rec[] = {4, 918273645, 1203948576, 48213, 9921};
  uint64_t v[5];
  cr_assert_eq(sp_parse_group(rec, sizeof rec, v, 5), 4);
  cr_assert_eq(v[0], 918273645);
  cr_assert_eq(v[3], 9921);
  cr_assert_eq(sp_parse_group(rec, 3 * sizeof *rec, v, 5), -1, "short read");
  cr_assert_eq(sp_parse_group(rec, sizeof rec, v, 3), -1, "more values than room");
  const uint64_t none[] = {0};
  cr_assert_eq(sp_parse_group(none, sizeof none, v, 5), 0);
  cr_assert_eq(sp_parse_group(none, 4, v, 5), -1);
}

Test(sampler, folded_frame_names_are_sanitised)
{
  char out[128];
  sp_frame_name("/usr/lib/libx.so", "op;er ator\n", out, sizeof out);
  cr_assert_str_eq(out, "libx.so`op_er_ator_");
}

static void *short_life(void *p)
{
  (void)p;
  sp_thread_begin();
  burn_ms(5);
  return NULL;
}

Test(sampler, threads_that_exit_release_their_event)
{
  sp_config_t cfg = {.hz = 500, .events = "auto", .stack_depth = 2, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  sp_status_t st;
  sp_status(&st);
  int base = st.threads;
  for (int i = 0; i < 40; i++) {
    pthread_t t;
    pthread_create(&t, NULL, short_life, NULL);
    pthread_join(t, NULL);
  }
  sp_status(&st);
  cr_assert_geq(st.threads, base + 1, "the short-lived threads were armed");
  sp_rescan();
  sp_status(&st);
  cr_assert_eq(st.threads, base, "%d events still held after the threads exited", st.threads - base);
}

/* Burns CPU with every signal blocked until told to stop (state: 1 once running, 2: stop). */
static void *blocker(void *p)
{
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, NULL);
  atomic_store((atomic_int *)p, 1);
  while (atomic_load((atomic_int *)p) == 1)
    burn_ms(10);
  return NULL;
}

Test(sampler, a_thread_that_keeps_the_signal_blocked_is_disarmed)
{
  atomic_int state = 0;
  pthread_t t;
  pthread_create(&t, NULL, blocker, &state);
  while (!atomic_load(&state))
    usleep(1000);
  sp_config_t cfg = {.hz = 1000, .events = "auto", .stack_depth = 2, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  sp_status_t st;
  sp_status(&st);
  int armed = st.threads;
  /* Samples queue up, blocked, once the thread has run a period; two rescans in a row see it.
   * Rescans go on until they do (10 s at most): on a loaded machine the thread may not run for
   * the first 30 ms, and three rescans 30 ms apart were all the test allowed. */
  for (int i = 0; i < 3 || (st.unsampled == 0 && i < 330); i++) {
    usleep(30000);
    sp_rescan();
    sp_status(&st);
  }
  atomic_store(&state, 2);
  pthread_join(t, NULL);
  cr_assert_eq(st.unsampled, 1, "the blocking thread is still armed");
  cr_assert_eq(st.threads, armed - 1);
}

static void *short_task(void *p)
{
  uint64_t token = sp_thread_begin();
  my_op = 4;
  burn_ms(*(int *)p);
  my_op = 0;
  sp_thread_end(token);
  return NULL;
}

/* Starts short_task(ms) and waits for it: at real-time priority where this process may (root),
 * so that a task of a few ms of CPU also lives a few ms when other processes load the machine
 * (the regime counts a thread as short-lived by its life, under 50 ms: at load 18 under ASan
 * ordinary threads outlived it and ended the regime: 13 left unarmed). */
static void short_thread(int *ms)
{
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
  pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
  pthread_attr_setschedparam(&attr, &(struct sched_param){.sched_priority = 1});
  pthread_t t;
  if (pthread_create(&t, &attr, short_task, ms) != 0)
    cr_assert_eq(pthread_create(&t, NULL, short_task, ms), 0);
  pthread_attr_destroy(&attr);
  pthread_join(t, NULL);
}

/* A host that starts one short-lived thread per task (ggml's per-graph workers): after 8 of
 * them a new one is armed with probability 1/4 and its samples weigh four. The others are
 * left alone (none of their samples); the weighted count stays near the CPU time burnt. */
Test(sampler, short_lived_threads_are_armed_one_in_four_with_weight_four)
{
  sp_config_t cfg = {.hz = 1000, .events = "auto", .stack_depth = 4, .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  int ms = 4, threads = 48;
  uint64_t weighted = 0, by_weight[5] = {0};
  for (int i = 0; i < threads; i++) {
    short_thread(&ms);
    size_t n;
    while ((n = sp_drain(samples, 8192)) > 0)
      for (size_t k = 0; k < n; k++)
        if (samples[k].op == 4) {
          cr_assert(samples[k].weight == 1 || samples[k].weight == 4, "weight %u", samples[k].weight);
          weighted += samples[k].weight, by_weight[samples[k].weight]++;
        }
  }
  sp_status_t st;
  sp_status(&st);
  /* 8 threads to see the pattern, then 40, each left unarmed with probability 3/4: 30 +- 2.7
   * expected, within 19..40 but once in ~10^4 */
  cr_assert(st.thinned >= 19 && st.thinned <= 40, "thinned %llu", (unsigned long long)st.thinned);
  cr_assert_gt(by_weight[4], 0, "the armed quarter's samples weigh 4");
  cr_assert_gt(by_weight[1], 0, "the first 8 threads' weigh 1");
  /* 192 ms of CPU at 1 kHz: expected 192 weighted periods; a loaded VM delivers fewer */
  cr_assert(weighted > 192 / 3 && weighted < 192 * 2, "weighted periods %llu",
            (unsigned long long)weighted);
  /* a thread that lives long ends the regime: the next short ones are armed again */
  int long_ms = 60;
  pthread_t t;
  pthread_create(&t, NULL, short_task, &long_ms);
  pthread_join(t, NULL);
  sp_status(&st);
  uint64_t before = st.thinned;
  for (int i = 0; i < 4; i++)
    short_thread(&ms);
  sp_status(&st);
  cr_assert_eq(st.thinned, before);
}

/* The budget rule on recorded costs: the least stride within the budget, counted for every
 * thread in lock-step; raised at once, lowered only once within 3/4 of the budget. */
Test(sampler, the_budget_sets_the_stride_from_the_cost_of_a_sample)
{
  /* 199 Hz, 5 us a sample, 2 threads in lock-step: 0.2 % of CPU, within 0.5 % */
  cr_assert_eq(sp_stride_for(199, 5000, 2, 0.005, 1), 1);
  /* 20 us: 0.8 % at the asked rate, 0.4 % at half of it */
  cr_assert_eq(sp_stride_for(199, 20000, 2, 0.005, 1), 2);
  cr_assert_eq(sp_stride_for(199, 20000, 1, 0.005, 1), 1, "one thread: 0.4 %%");
  cr_assert_eq(sp_stride_for(199, 20000, 8, 0.005, 1), 7, "8 threads: 3.2 %%");
  /* 0.45 % at stride 1 would fit the budget but not 3/4 of it: stride 2 stays */
  cr_assert_eq(sp_stride_for(199, 11300, 2, 0.005, 2), 2);
  cr_assert_eq(sp_stride_for(199, 7000, 2, 0.005, 2), 1, "0.28 %%: back to the asked rate");
  cr_assert_eq(sp_stride_for(199, 60000, 2, 0.005, 2), 5, "raised at once: 4.8 %%");
  cr_assert_eq(sp_stride_for(1000, 1e6, 4, 0.005, 1), SP_MAX_STRIDE);
  cr_assert_eq(sp_stride_for(199, 1e6, 4, 0, 9), 1, "no budget, no stride");
  cr_assert_eq(sp_stride_for(199, 0, 4, 0.005, 3), 1, "nothing measured yet");
}

/* In this process: the handler's and the delivery's cost measured, a budget far under it, and
 * the samples that follow arrive at the longest period, each standing for that many. */
Test(sampler, over_budget_samples_get_rarer_and_weigh_what_they_stand_for)
{
  sp_config_t cfg = {.hz = 1000, .events = "task-clock", .stack_depth = 8, .budget = 1e-6,
                     .attrib = {own, NULL}};
  cr_assert_eq(sp_start(&cfg), 0);
  sp_status_t st;
  sp_status(&st);
  cr_assert_eq(st.stride, 1);
  for (int i = 0; i < 3; i++) { /* the first two measurements are the walker's warm-up */
    sampled_periods(3, 50);
    sp_adapt(0);
  }
  sp_status(&st);
  cr_assert_gt(st.delivery_ns, 0, "a signal's delivery is timed at the start");
  cr_assert_gt(st.handler_ns, 0);
  /* any cost over 64 ns a sample at 1 kHz is over 64 millionths */
  cr_assert_eq(st.stride, SP_MAX_STRIDE, "stride %u at %.0f ns a sample", st.stride,
               st.delivery_ns + st.handler_ns);
  sp_thread_begin();
  my_op = 6;
  burn_ms(1000);
  my_op = 0;
  size_t n, samples_, weighted = 0;
  for (samples_ = 0; (n = sp_drain(samples, 8192)) > 0;)
    for (size_t k = 0; k < n; k++)
      if (samples[k].op == 6) {
        cr_assert_eq(samples[k].weight, SP_MAX_STRIDE);
        samples_++, weighted += samples[k].weight;
      }
  /* 1000 ms of CPU, one sample per 64 ms: ~15, standing for ~1000 periods of 1 ms (a loaded
   * VM delivers fewer) */
  cr_assert(samples_ >= 4 && samples_ <= 20, "%zu samples", samples_);
  cr_assert(weighted > 1000 / 4 && weighted < 1000 * 2, "weighted periods %zu", weighted);
}

/* The JIT's code map as the aggregator sees it: one kernel at a fixed address outside every
 * module, renamed (freed, and another placed there) between two batches of samples. */
#define KERNEL_PC 0x10000ull /* below every mapping: no module holds it */
static const char *kernel_name;
static uint64_t kernel_gen;
static int kernel_at(uint64_t pc, uint64_t *lo, uint64_t *hi, const char **name)
{
  if (!kernel_name || pc < KERNEL_PC || pc >= KERNEL_PC + 64)
    return 0;
  *lo = KERNEL_PC, *hi = KERNEL_PC + 64, *name = kernel_name;
  return 1;
}
static uint64_t kernel_generation(void) { return kernel_gen; }

static char kernel_seen[4][64];
static uint64_t kernel_samples[4];
static int nkernel_seen;
static void kernel_named(void *ctx, uint32_t op, const char *module, const char *symbol,
                         uint64_t samples_)
{
  (void)ctx, (void)op;
  if (strcmp(module, "[jit]") == 0 && nkernel_seen < 4) {
    snprintf(kernel_seen[nkernel_seen], sizeof kernel_seen[0], "%s", symbol);
    kernel_samples[nkernel_seen++] = samples_;
  }
}

Test(sampler, a_kernel_placed_where_a_freed_one_was_is_named_as_itself)
{
  sp_sample_t s = {.pc = KERNEL_PC + 8, .nframes = 1, .weight = 1, .frames = {KERNEL_PC + 8}};
  sp_sample_t before = {.pc = KERNEL_PC + 16, .nframes = 1, .weight = 1, .frames = {KERNEL_PC + 16}};
  sp_agg_t *a = sp_agg_new();
  sp_agg_code_lookup(a, kernel_at, kernel_generation);
  sp_agg_add(a, &before, 1, 0); /* sampled before any kernel was there: unknown */
  kernel_name = "old_kernel", kernel_gen++;
  sp_agg_add(a, &s, 1, 0);
  sp_agg_add(a, &before, 1, 0);
  kernel_name = "new_kernel", kernel_gen++; /* the old one freed, the new one placed there */
  sp_agg_add(a, &s, 1, 0);
  sp_agg_add(a, &s, 1, 0);
  sp_agg_visit(a, &(sp_agg_visit_t){NULL, NULL, kernel_named, NULL, NULL});
  sp_agg_free(a);
  cr_assert_eq(nkernel_seen, 2, "%d kernel names", nkernel_seen);
  for (int i = 0; i < 2; i++)
    cr_assert(strcmp(kernel_seen[i], "old_kernel") == 0 ? kernel_samples[i] == 2
                                                        : strcmp(kernel_seen[i], "new_kernel") == 0 &&
                                                              kernel_samples[i] == 2,
              "%s: %llu samples", kernel_seen[i], (unsigned long long)kernel_samples[i]);
}
