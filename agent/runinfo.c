/* SPDX-License-Identifier: MIT */
/* Program and machine identity. The build-id comes from the main program's PT_NOTE segment as
 * it is mapped (dl_iterate_phdr): no file is reopened, so a replaced binary cannot lie. */
#define _GNU_SOURCE
#include "runinfo.h"
#include "jit/objload.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Finds NT_GNU_BUILD_ID in the first object (the executable) and hex-encodes it. */
static int build_id_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
  (void)size;
  char *out = arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE)
      continue;
    const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *nh = (const void *)p;
      const char *name = p + sizeof *nh;
      const unsigned char *desc = (const unsigned char *)name + ((nh->n_namesz + 3) & ~3u);
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0 &&
          nh->n_descsz <= 60) {
        for (unsigned j = 0; j < nh->n_descsz; j++)
          sprintf(out + 2 * j, "%02x", desc[j]);
        return 1;
      }
      p = (const char *)desc + ((nh->n_descsz + 3) & ~3u);
    }
  }
  return 1; /* only the first object is the executable */
}

/* Reads up to len - 1 bytes of a /proc file, NUL-terminated ("" when unreadable); returns the
 * count. */
static size_t read_file(const char *path, char *buf, size_t len)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  size_t n = 0;
  buf[0] = 0;
  if (fd < 0)
    return 0;
  for (ssize_t r; n < len - 1 && (r = read(fd, buf + n, len - 1 - n)) > 0;)
    n += (size_t)r;
  close(fd);
  buf[n] = 0;
  return n;
}

/* Copies the value of the first "key<spaces>: value" line of cpuinfo. */
static void cpuinfo_field(const char *cpuinfo, const char *key, char *out, size_t len)
{
  size_t klen = strlen(key);
  for (const char *l = cpuinfo; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
    if (strncmp(l, key, klen) != 0 || (l[klen] != ' ' && l[klen] != '\t' && l[klen] != ':'))
      continue;
    const char *v = strchr(l, ':');
    if (!v)
      return;
    v += 1 + (v[1] == ' ');
    size_t n = strcspn(v, "\n");
    snprintf(out, len, "%.*s", (int)n, v);
    return;
  }
}

/* Interpreters whose program is a script named on the command line. */
static int interpreter(const char *exe)
{
  static const char *const names[] = {"python", "node", "perl", "ruby", "Rscript", "octave"};
  const char *base = strrchr(exe, '/');
  base = base ? base + 1 : exe;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (strncmp(base, names[i], strlen(names[i])) == 0)
      return 1;
  return 0;
}

/* The script an interpreter runs: the first argument that is not an option (options that take
 * a value skip it), as a real path; python's "-m module" and "-c" name themselves. */
static void find_script(const char *argv, size_t len, char *out, size_t outlen)
{
  const char *a = argv + strnlen(argv, len) + 1, *end = argv + len; /* past argv[0] */
  for (; a < end; a += strnlen(a, (size_t)(end - a)) + 1) {
    const char *next = a + strnlen(a, (size_t)(end - a)) + 1;
    if (strcmp(a, "-m") == 0 && next < end) {
      snprintf(out, outlen, "-m %s", next);
      return;
    }
    if (strcmp(a, "-c") == 0 || strcmp(a, "-e") == 0) {
      snprintf(out, outlen, "%s", a);
      return;
    }
    if (strcmp(a, "-W") == 0 || strcmp(a, "-X") == 0 || strcmp(a, "-r") == 0) {
      a = next < end ? next : a; /* the option's value */
      continue;
    }
    if (a[0] == '-')
      continue;
    char *real = realpath(a, NULL);
    snprintf(out, outlen, "%s", real ? real : a);
    free(real);
    return;
  }
}

void ag_runinfo_read(ag_runinfo_t *ri)
{
  static char cpuinfo[1 << 16]; /* first CPU's block is enough; writer thread only */
  /* Each field is a string written up to its end, or emptied here: the struct is 78 KB, mostly
   * buffers a run fills a few hundred bytes of, and zeroing all of it faulted 20 pages in on the
   * warm start's path (~0.25 ms on a guest whose first write to a page costs ~12 us). */
  ri->build_id[0] = ri->script[0] = ri->cpu_model[0] = ri->cpu_flags[0] = 0;
  ssize_t n = readlink("/proc/self/exe", ri->exe, sizeof ri->exe - 1);
  ri->exe[n > 0 ? n : 0] = 0;
  dl_iterate_phdr(build_id_cb, ri->build_id);
  ri->cmdline_len = read_file("/proc/self/cmdline", ri->cmdline, sizeof ri->cmdline);
  if (ri->cmdline_len == sizeof ri->cmdline - 1) /* truncated: end at the last whole argument */
    while (ri->cmdline_len && ri->cmdline[ri->cmdline_len - 1])
      ri->cmdline_len--;
  read_file("/proc/cpuinfo", cpuinfo, sizeof cpuinfo);
  cpuinfo_field(cpuinfo, "model name", ri->cpu_model, sizeof ri->cpu_model);
  cpuinfo_field(cpuinfo, "flags", ri->cpu_flags, sizeof ri->cpu_flags);
  ri->ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (interpreter(ri->exe))
    find_script(ri->cmdline, ri->cmdline_len, ri->script, sizeof ri->script);
  uint64_t h = jt_obj_checksum(ri->cpu_flags, strlen(ri->cpu_flags));
  snprintf(ri->cpu_key, sizeof ri->cpu_key, "%s [flags %016llx]", ri->cpu_model,
           (unsigned long long)h);
}
