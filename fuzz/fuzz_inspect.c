/* SPDX-License-Identifier: MIT */
/* libFuzzer target: `opjit`'s readers on a hostile database. Input: the database file's bytes
 * (fuzz/corpus/inspect holds real opjit profiles, vacuumed to small pages); each input is
 * read by runs, top, variants, events and report, in text and JSON, as `opjit CMD --db FILE`
 * would (inspect/opjit.c's dispatcher), their output thrown away. A command may refuse the
 * file with a message and exit status 1; it must not crash, leak, read out of bounds or
 * overflow. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ins_opjit_main(int argc, char **argv);

static char dir[64], path[96];
static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/opjit-fuzz-inspect.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir))
    abort();
  snprintf(path, sizeof path, "%s/p.db", dir);
  devnull = fopen("/dev/null", "w");
  if (!devnull)
    abort();
  return 0;
}

static void remove_files(void)
{
  static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
  char p[128];
  for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
    snprintf(p, sizeof p, "%s%s", path, suffix[i]);
    unlink(p);
  }
}

/* `opjit CMD --db path ARGS...` with stdout and stderr (the streams: sanitizer reports go to
 * file descriptor 2 and still show) thrown away. */
static void run(const char *cmd, const char *a1, const char *a2)
{
  char *argv[] = {"opjit", (char *)cmd, "--db", path, (char *)a1, (char *)a2, NULL};
  int argc = 4 + (a1 != NULL) + (a2 != NULL);
  FILE *out = stdout, *err = stderr;
  stdout = stderr = devnull;
  int rc = ins_opjit_main(argc, argv);
  stdout = out, stderr = err;
  if (rc != 0 && rc != 1)
    __builtin_trap(); /* a usage error: the harness's lines are wrong */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
    abort();
  run("runs", NULL, NULL);
  run("runs", "--json", NULL);
  run("top", NULL, NULL);
  run("top", "--all", "--json");
  run("variants", "--all", NULL);
  run("variants", "--json", NULL);
  run("events", "--all", NULL);
  run("events", "--json", NULL);
  run("report", "-o", "-");
  remove_files();
  return 0;
}
