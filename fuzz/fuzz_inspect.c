/* SPDX-License-Identifier: MIT */
/* libFuzzer target: `opjit`'s readers on a hostile database file. Input: the file's bytes
 * (fuzz/corpus/inspect holds real opjit profiles, vacuumed to small pages), read by runs, top,
 * variants, events and report (inspect_run.h). A command may refuse the file with a message
 * and exit status 1; it must not crash, leak, read out of bounds or overflow. */
#include "inspect_run.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static const char *path;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  path = fz_db_path("inspect");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
    abort();
  fz_read_and_remove(path);
  return 0;
}
