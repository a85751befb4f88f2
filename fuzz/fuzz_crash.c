/* SPDX-License-Identifier: MIT */
/* libFuzzer target: a crash marker (agent/crash.h) as the next run reads it: the parser, then,
 * for a record it accepts, what the writer does with it: the detail it formats and st_crash on
 * a real database holding one run (pid 1234) of one signature (key bytes 1..32).
 * Input: the marker file's bytes (fuzz/corpus/crash holds a crash in a kernel, one while a
 * kernel was tried, and one outside JIT code). */
#include "agent/crash.h"
#include "store/store.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], path[96];
static st_db_t *db;

static void cleanup(void)
{
  static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
  char p[128];
  st_close(db);
  for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
    snprintf(p, sizeof p, "%s%s", path, suffix[i]);
    unlink(p);
  }
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/opjit-fuzz-crash.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir))
    abort();
  snprintf(path, sizeof path, "%s/p.db", dir);
  char err[256];
  if (st_open(path, ST_OPEN_CREATE, 1000, &db, err, sizeof err))
    abort();
  atexit(cleanup);
  static const char cmdline[] = "prog\0";
  st_run_info_t in = {.exe = "/bin/prog",
                      .build_id = "",
                      .script = "",
                      .cmdline = cmdline,
                      .cmdline_len = sizeof cmdline - 1,
                      .options = "",
                      .cpu_model = "cpu",
                      .cpu_flags = "",
                      .ncpu = 1,
                      .pid = 1234,
                      .start_ns = 1,
                      .agent_version = "fuzz"};
  int64_t run;
  uint8_t key[32];
  for (int i = 0; i < 32; i++)
    key[i] = (uint8_t)(i + 1);
  st_sig_rec_t sig = {.key = key,
                      .key_len = sizeof key,
                      .sig = "0102030405060708",
                      .op = "op",
                      .name = "op 8x8x8",
                      .params = "{}",
                      .calls = 1};
  if (st_run_begin(db, &in, &run) || st_run_flush(db, run, &sig, 1, 0, 2))
    abort();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  ag_crash_rec_t r;
  if (ag_crash_parse(data, size, &r))
    return 0;
  char detail[512];
  snprintf(detail, sizeof detail, "crashed in %s (%s at +0x%llx of its %llu bytes, run %lld)",
           r.name, ag_crash_signame(r.signo), (unsigned long long)(r.pc - r.lo),
           (unsigned long long)(r.hi - r.lo), (long long)r.run_id);
  st_crash_t c = {r.run_id, r.pid, r.time_ns, r.in_jit ? &r.key : NULL, sizeof r.key, r.generator,
                  "19",     "cpu", detail};
  st_crash_result_t res;
  st_crash(db, &c, &res);
  return 0;
}
