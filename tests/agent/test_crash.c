/* SPDX-License-Identifier: MIT */
/* The crash hook (agent/crash.h) in a forked child: a fault inside a registered kernel (a page
 * of ud2) kills the child with SIGILL and leaves a marker naming the kernel, its signature and
 * the run; the reader claims it once, and drops what is not a record. The parser refuses
 * every malformed record. */
#define _GNU_SOURCE
#include "agent/codemap.h"
#include "agent/crash.h"
#include "tests/common/fixture.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(crash, .init = fx_setup, .fini = fx_teardown);

static int files(void)
{
  DIR *d = opendir(fx_dir);
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d));)
    n += de->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Forks a child that arms the hook for run 7, registers a page of ud2 as kernel "k_trap" of
 * key, and calls it. Returns the child's wait status. */
static int crash_child(const ag_sig_t *key)
{
  pid_t pid = fork();
  if (pid == 0) {
    unsigned char *code =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < 4096; i += 2)
      code[i] = 0x0f, code[i + 1] = 0x0b;
    mprotect(code, 4096, PROT_READ | PROT_EXEC);
    ag_code_add(code, 4096, "k_trap", NULL, key);
    ag_crash_arm(fx_db, 7);
    ag_crash_install();
    ((void (*)(void))(code + 64))();
    _exit(0);
  }
  int st;
  waitpid(pid, &st, 0);
  return st;
}

Test(crash, a_fault_in_a_kernel_kills_with_its_signal_and_leaves_one_marker)
{
  ag_sig_t key = ag_sig_make(1, 2, 3, 4, 5, 6, 7, 8, 16, 16, 16, 16, 16, 16);
  int st = crash_child(&key);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGILL, "status %d", st);
  cr_assert_eq(files(), 1);
  ag_crash_rec_t r[4];
  cr_assert_eq(ag_crash_collect(fx_db, r, 4), 1);
  cr_assert_eq(r[0].signo, SIGILL);
  cr_assert_eq(r[0].in_jit, AG_CRASH_KERNEL);
  cr_assert_eq(r[0].run_id, 7);
  cr_assert_eq(r[0].pc - r[0].lo, 64);
  cr_assert_eq(r[0].hi - r[0].lo, 4096);
  cr_assert_str_eq(r[0].name, "k_trap");
  cr_assert_eq(memcmp(&r[0].key, &key, sizeof key), 0);
  cr_assert_eq(files(), 0, "the marker is deleted once read");
  cr_assert_eq(ag_crash_collect(fx_db, r, 4), 0, "and read once");
}

Test(crash, the_reader_drops_what_is_not_a_record_and_leaves_what_is_not_its_own)
{
  char path[192], target[192];
  snprintf(path, sizeof path, "%s-crash-123", fx_db);
  int fd = open(path, O_WRONLY | O_CREAT, 0600);
  cr_assert_eq(write(fd, "not a record", 12), 12);
  close(fd);
  snprintf(target, sizeof target, "%s/elsewhere", fx_dir);
  fd = open(target, O_WRONLY | O_CREAT, 0600);
  close(fd);
  snprintf(path, sizeof path, "%s-crash-456", fx_db);
  cr_assert_eq(symlink(target, path), 0);
  snprintf(path, sizeof path, "%s-crash-789.42", fx_db); /* claimed by process 42 */
  fd = open(path, O_WRONLY | O_CREAT, 0600);
  close(fd);
  ag_crash_rec_t r[4];
  cr_assert_eq(ag_crash_collect(fx_db, r, 4), 0);
  cr_assert_eq(files(), 3, "the garbage is gone; the symlink and the claimed marker stay");
}

static void valid(ag_crash_rec_t *r)
{
  memset(r, 0, sizeof *r);
  memcpy(r->magic, AG_CRASH_MAGIC, sizeof r->magic);
  r->size = sizeof *r;
  r->signo = SIGSEGV, r->pid = 1234, r->run_id = 3, r->in_jit = AG_CRASH_KERNEL;
  strcpy(r->name, "k");
}

Test(crash, the_parser_refuses_every_malformed_record)
{
  ag_crash_rec_t r, out;
  valid(&r);
  cr_assert_eq(ag_crash_parse(&r, sizeof r, &out), 0);
  cr_assert_eq(ag_crash_parse(&r, sizeof r - 1, &out), -1, "short");
  valid(&r), r.magic[0] = 'X';
  cr_assert_eq(ag_crash_parse(&r, sizeof r, &out), -1, "magic");
  valid(&r), r.size = 12;
  cr_assert_eq(ag_crash_parse(&r, sizeof r, &out), -1, "size");
  valid(&r), r.signo = SIGKILL;
  cr_assert_eq(ag_crash_parse(&r, sizeof r, &out), -1, "signal");
  valid(&r), r.pid = 0;
  cr_assert_eq(ag_crash_parse(&r, sizeof r, &out), -1, "pid");
  valid(&r), r.run_id = -1;
  cr_assert_eq(ag_crash_parse(&r, sizeof r, &out), -1, "run");
  valid(&r), r.in_jit = 3;
  cr_assert_eq(ag_crash_parse(&r, sizeof r, &out), -1, "where");
  valid(&r), memset(r.name, 'a', sizeof r.name);
  cr_assert_eq(ag_crash_parse(&r, sizeof r, &out), -1, "unterminated name");
}
