/* SPDX-License-Identifier: MIT */
#include "inspect_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ins_opjit_main(int argc, char **argv);

static char dir[128];

static void remove_dir(void) { rmdir(dir); }

const char *fz_db_path(const char *name)
{
  static char path[160];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/opjit-fuzz-%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
  if (!mkdtemp(dir))
    abort();
  snprintf(path, sizeof path, "%s/p.db", dir);
  atexit(remove_dir);
  return path;
}

/* `opjit CMD --db path A1 A2` with its streams thrown away. */
static void run(FILE *devnull, const char *path, const char *cmd, const char *a1, const char *a2)
{
  char *argv[] = {"opjit", (char *)cmd, "--db", (char *)path, (char *)a1, (char *)a2, NULL};
  int argc = 4 + (a1 != NULL) + (a2 != NULL);
  FILE *out = stdout, *err = stderr;
  stdout = stderr = devnull;
  int rc = ins_opjit_main(argc, argv);
  stdout = out, stderr = err;
  if (rc != 0 && rc != 1)
    __builtin_trap();
}

void fz_read_and_remove(const char *path)
{
  static FILE *devnull;
  if (!devnull && !(devnull = fopen("/dev/null", "w")))
    abort();
  run(devnull, path, "runs", NULL, NULL);
  run(devnull, path, "runs", "--json", NULL);
  run(devnull, path, "top", NULL, NULL);
  run(devnull, path, "top", "--all", "--json");
  run(devnull, path, "variants", "--all", NULL);
  run(devnull, path, "variants", "--json", NULL);
  run(devnull, path, "events", "--all", NULL);
  run(devnull, path, "events", "--json", NULL);
  run(devnull, path, "report", "-o", "-");
  static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
  for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
    char p[200];
    snprintf(p, sizeof p, "%s%s", path, suffix[i]);
    unlink(p);
  }
}
