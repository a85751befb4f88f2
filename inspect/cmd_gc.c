/* SPDX-License-Identifier: MIT */
/* `opjit gc`: deletes old runs through st_gc(), then gives the space back (st_compact: WAL
 * checkpoint and VACUUM). --dry-run runs the same st_gc() on an in-memory copy of the database
 * (st_copy_to_memory), so what it reports is exactly what a real run would delete now. */
#include "cmd.h"
#include "db.h"
#include "table.h"

#include <getopt.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

#define DEFAULT_KEEP 100

static int64_t file_size(const char *path)
{
  struct stat sb;
  return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

/* The size of the database and its WAL. */
static int64_t db_bytes(const char *path)
{
  char wal[4200];
  snprintf(wal, sizeof wal, "%s-wal", path);
  int64_t main = file_size(path), w = file_size(wal);
  return (main > 0 ? main : 0) + (w > 0 ? w : 0);
}

/* st_gc on an in-memory copy of db. Returns 0 or INS_EXIT_FAIL (printed). */
static int gc_copy(st_db_t *db, int64_t keep, int64_t older_than_ns, st_gc_result_t *res)
{
  st_db_t *mem;
  char err[512];
  if (st_copy_to_memory(db, &mem, err, sizeof err)) {
    fprintf(stderr, "opjit: cannot copy the database for --dry-run: %s\n", err);
    return INS_EXIT_FAIL;
  }
  int rc = st_gc(mem, keep, older_than_ns, res);
  if (rc)
    fprintf(stderr, "opjit: gc failed on the copy: %s\n", st_errstr(rc));
  st_close(mem);
  return rc ? INS_EXIT_FAIL : 0;
}

static int cmd_gc(int argc, char **argv)
{
  static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                           {"keep", required_argument, NULL, 'k'},
                                           {"older-than", required_argument, NULL, 'o'},
                                           {"dry-run", no_argument, NULL, 'n'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"help", no_argument, NULL, 'h'},
                                           {0}};
  const char *dbopt = NULL;
  int json = 0, dry = 0, rc;
  long keep = DEFAULT_KEEP, days = 0;
  for (int c; (c = getopt_long(argc, argv, "d:k:o:njh", longopts, NULL)) != -1;) {
    switch (c) {
    case 'd': dbopt = optarg; break;
    case 'k':
      if ((rc = ins_parse_long(&ins_cmd_gc, "--keep", optarg, 0, INT64_MAX, &keep)))
        return rc;
      break;
    case 'o':
      if ((rc = ins_parse_long(&ins_cmd_gc, "--older-than", optarg, 1, 1000000, &days)))
        return rc;
      break;
    case 'n': dry = 1; break;
    case 'j': json = 1; break;
    case 'h': return ins_help(&ins_cmd_gc);
    default: return ins_bad_option(&ins_cmd_gc, argv);
    }
  }
  if ((rc = ins_no_operands(&ins_cmd_gc, argc, argv)))
    return rc;

  char path[4096];
  st_db_t *db;
  if (ins_db_path(dbopt, path, sizeof path))
    return INS_EXIT_FAIL;
  int64_t before = db_bytes(path), after = before; /* before the open, which may migrate */
  if (ins_db_open(path, dry ? ST_OPEN_READONLY : 0, INS_WRITE_BUSY_MS, &db))
    return INS_EXIT_FAIL;
  int64_t older_than_ns = 0;
  if (days) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    older_than_ns = ((int64_t)now.tv_sec - (int64_t)days * 86400) * 1000000000;
  }
  st_gc_result_t res;
  int compact_rc = ST_OK;
  if (dry)
    rc = gc_copy(db, keep, older_than_ns, &res);
  else if ((rc = st_gc(db, keep, older_than_ns, &res)) == ST_ECORRUPT)
    ins_db_failed(db, "clean up");
  else if (rc)
    fprintf(stderr, "opjit: gc failed: %s\n", st_errstr(rc));
  int deleted =
      !rc && (res.runs || res.signatures || res.programs || res.machines || res.symbols ||
              res.objects);
  if (deleted && !dry)
    compact_rc = st_compact(db);
  if (compact_rc) /* the deletion is committed; only the space stays claimed */
    fprintf(stderr, "opjit: warning: could not compact the database: %s\n", st_errmsg(db));
  st_close(db);
  if (deleted && !dry) /* once closed: the last connection's close checkpoints and drops the WAL */
    after = db_bytes(path);
  if (rc)
    return INS_EXIT_FAIL;
  if (json) {
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "database", path);
    cJSON_AddBoolToObject(doc, "dry_run", dry);
    cJSON_AddNumberToObject(doc, "keep", (double)keep);
    ins_json_add_or_null(doc, "older_than_days", days ? (double)days : -1);
    cJSON *d = cJSON_AddObjectToObject(doc, dry ? "would_delete" : "deleted");
    cJSON_AddNumberToObject(d, "runs", (double)res.runs);
    cJSON_AddNumberToObject(d, "signatures", (double)res.signatures);
    cJSON_AddNumberToObject(d, "programs", (double)res.programs);
    cJSON_AddNumberToObject(d, "machines", (double)res.machines);
    cJSON_AddNumberToObject(d, "symbols", (double)res.symbols);
    cJSON_AddNumberToObject(d, "objects", (double)res.objects);
    cJSON_AddNumberToObject(doc, "bytes_before", (double)before);
    cJSON_AddNumberToObject(doc, "bytes_after", (double)after);
    return ins_json_emit(doc);
  }
  if (!deleted) {
    printf("nothing to delete (keeping the newest %ld runs%s)\n", keep,
           days ? " and runs younger than the age limit" : "");
    return INS_EXIT_OK;
  }
  printf("%s %lld runs, %lld signatures, %lld programs, %lld machines, %lld symbols, %lld "
         "kernel objects\n", dry ? "would delete" : "deleted", (long long)res.runs,
         (long long)res.signatures, (long long)res.programs, (long long)res.machines,
         (long long)res.symbols, (long long)res.objects);
  if (!dry)
    printf("database: %lld bytes -> %lld bytes\n", (long long)before, (long long)after);
  return INS_EXIT_OK;
}

const ins_cmd_t ins_cmd_gc = {
    .name = "gc",
    .main = cmd_gc,
    .synopsis = "[--db PATH] [--keep N] [--older-than DAYS] [--dry-run] [--json]",
    .summary = "delete old runs and compact the database",
    .help = "Deletes the runs beyond the newest N and those that ended more than DAYS days ago,\n"
            "then what no remaining run refers to. A run still marked running is kept while its\n"
            "process lives. When something was deleted, checkpoints the WAL and VACUUMs.\n\n"
            "options:\n"
            "  --db PATH          the profile database\n"
            "  --keep N           keep the newest N runs (default 100)\n"
            "  --older-than DAYS  also delete runs that ended more than DAYS days ago\n"
            "  --dry-run          report what would be deleted; change nothing\n"
            "  --json             one JSON document\n"
            "  -h, --help         this help\n",
};
