/* SPDX-License-Identifier: MIT */
/* Every input the fuzzers found a fault with (fuzz/crashes/<target>) and every seed
 * (fuzz/corpus/<target>), run once more through the same harness (fuzz/fuzz_<target>.c), in a
 * build whose ASan and UBSan abort on the first finding: a fixed fault that comes back fails
 * here. The option parser: OPJIT_TIME_EVERY=-1 shifted a negative value (opt.c). The object
 * loader: a relocation's addend near INT64_MIN overflowed its signed sums (objload.c). The
 * store: an empty file's profile was sorted with qsort(NULL, 0) (store.c), a negative
 * user_version read before migrations[]. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int fuzz_opt_one(const uint8_t *data, size_t size);
int fuzz_objload_one(const uint8_t *data, size_t size);
int fuzz_store_one(const uint8_t *data, size_t size);
int fuzz_store_init(int *argc, char ***argv);
int fuzz_crash_one(const uint8_t *data, size_t size);
int fuzz_crash_init(int *argc, char ***argv);

/* Runs one(file) for every file in OPJIT_SOURCE_DIR/fuzz/<kind>/<target>; returns how many. */
static int replay(const char *kind, const char *target, int (*one)(const uint8_t *, size_t))
{
  char dir[512];
  snprintf(dir, sizeof dir, "%s/fuzz/%s/%s", OPJIT_SOURCE_DIR, kind, target);
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.')
      continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    uint8_t *buf = malloc(1 << 20);
    size_t len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    cr_log_info("%s", path);
    one(buf, len);
    free(buf);
    n++;
  }
  closedir(d);
  return n;
}

Test(fuzz_inputs, option_parser)
{
  cr_assert_geq(replay("crashes", "opt", fuzz_opt_one), 1);
  cr_assert_geq(replay("corpus", "opt", fuzz_opt_one), 1);
}

Test(fuzz_inputs, object_loader)
{
  replay("crashes", "objload", fuzz_objload_one);
  cr_assert_geq(replay("corpus", "objload", fuzz_objload_one), 1, "the real kernels");
}

Test(fuzz_inputs, store)
{
  fuzz_store_init(NULL, NULL);
  cr_assert_geq(replay("crashes", "store", fuzz_store_one), 2);
  cr_assert_geq(replay("corpus", "store", fuzz_store_one), 1);
}

Test(fuzz_inputs, crash_marker)
{
  fuzz_crash_init(NULL, NULL);
  replay("crashes", "crash", fuzz_crash_one);
  cr_assert_geq(replay("corpus", "crash", fuzz_crash_one), 3);
}
