/* SPDX-License-Identifier: MIT */
/* Text tables, human units and JSON output for the `opjit` command. */
#include "table.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct ins_table_s {
  int ncols;      /* shown */
  int full;       /* cells given per row: the shown and the hidden */
  uint32_t shown; /* bit c: cell c of a given row is shown */
  char *align;    /* 'l' or 'r' per shown column */
  char **cells;   /* rows * ncols, row 0 the header */
  char **notes;   /* per row: its note, or NULL */
  size_t rows, cap;
};

void *ins_xmalloc(size_t n)
{
  void *p = malloc(n ? n : 1);
  if (!p) {
    fputs("opjit: out of memory\n", stderr);
    exit(1);
  }
  return p;
}

char *ins_xstrdup(const char *s)
{
  size_t n = strlen(s) + 1;
  return memcpy(ins_xmalloc(n), s, n);
}

static void *xrealloc(void *p, size_t n)
{
  void *q = realloc(p, n);
  if (!q) {
    fputs("opjit: out of memory\n", stderr);
    exit(1);
  }
  return q;
}

void *ins_grow(void *a, size_t n, size_t *cap, size_t size)
{
  if (n < *cap)
    return a;
  *cap = *cap ? 2 * *cap : 64;
  return xrealloc(a, *cap * size);
}

ins_table_t *ins_table_new(const char *spec, const char *const *headers)
{
  return ins_table_new_shown(spec, headers, UINT32_MAX);
}

ins_table_t *ins_table_new_shown(const char *spec, const char *const *headers, uint32_t shown)
{
  ins_table_t *t = ins_xmalloc(sizeof *t);
  *t = (ins_table_t){.full = (int)strlen(spec), .shown = shown, .align = ins_xstrdup(spec)};
  for (int c = 0; c < t->full; c++)
    if (shown >> c & 1)
      t->align[t->ncols++] = spec[c];
  t->align[t->ncols] = 0;
  ins_table_row(t, headers);
  return t;
}

void ins_table_row(ins_table_t *t, const char *const *cells)
{
  if (t->rows == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 16;
    t->cells = xrealloc(t->cells, t->cap * (size_t)t->ncols * sizeof *t->cells);
    t->notes = xrealloc(t->notes, t->cap * sizeof *t->notes);
  }
  t->notes[t->rows] = NULL;
  char **row = t->cells + t->rows * (size_t)t->ncols;
  for (int c = 0; c < t->full; c++)
    if (t->shown >> c & 1)
      *row++ = ins_xstrdup(cells[c] ? cells[c] : "");
  t->rows++;
}

void ins_table_note(ins_table_t *t, const char *note)
{
  free(t->notes[t->rows - 1]);
  t->notes[t->rows - 1] = ins_xstrdup(note);
}

/* Characters in the first n bytes of a UTF-8 string: bytes that do not continue a sequence. */
static size_t width_n(const char *s, size_t n)
{
  size_t w = 0;
  for (size_t i = 0; i < n && s[i]; i++)
    w += ((unsigned char)s[i] & 0xc0) != 0x80;
  return w;
}

static size_t width(const char *s) { return width_n(s, strlen(s)); }

/* A note under its row: lines of at most INS_NOTE_WIDTH columns, indented, broken at spaces (a
 * word longer than a line is left whole). */
static void print_note(FILE *f, const char *s)
{
  static const char indent[] = "    ";
  const size_t room = INS_NOTE_WIDTH - (sizeof indent - 1);
  while (*s) {
    size_t end = 0, brk = 0;
    for (; s[end] && width_n(s, end + 1) <= room; end++)
      if (s[end] == ' ')
        brk = end;
    if (s[end] && brk)
      end = brk; /* the line ends at the last space that fits */
    else if (s[end])
      end += strcspn(s + end, " ");
    fprintf(f, "%s%.*s\n", indent, (int)end, s);
    s += end;
    s += strspn(s, " ");
  }
}

static void pad(FILE *f, size_t n)
{
  while (n--)
    fputc(' ', f);
}

void ins_table_print(const ins_table_t *t, FILE *f)
{
  size_t *w = ins_xmalloc((size_t)t->ncols * sizeof *w);
  for (int c = 0; c < t->ncols; c++) {
    w[c] = 0;
    for (size_t r = 0; r < t->rows; r++) {
      size_t n = width(t->cells[r * (size_t)t->ncols + (size_t)c]);
      w[c] = n > w[c] ? n : w[c];
    }
  }
  int bold = f == stdout && isatty(STDOUT_FILENO) && !getenv("NO_COLOR");
  for (size_t r = 0; r < t->rows; r++) {
    if (r == 0 && bold)
      fputs("\033[1m", f);
    for (int c = 0; c < t->ncols; c++) {
      const char *s = t->cells[r * (size_t)t->ncols + (size_t)c];
      size_t gap = w[c] - width(s);
      int last = c == t->ncols - 1;
      if (c)
        fputs("  ", f);
      if (t->align[c] == 'r')
        pad(f, gap);
      fputs(s, f);
      if (t->align[c] != 'r' && !last)
        pad(f, gap);
    }
    if (r == 0 && bold)
      fputs("\033[0m", f);
    fputc('\n', f);
    if (t->notes[r])
      print_note(f, t->notes[r]);
  }
  free(w);
}

void ins_table_free(ins_table_t *t)
{
  if (!t)
    return;
  for (size_t i = 0; i < t->rows * (size_t)t->ncols; i++)
    free(t->cells[i]);
  for (size_t r = 0; r < t->rows; r++)
    free(t->notes[r]);
  free(t->cells);
  free(t->notes);
  free(t->align);
  free(t);
}

const char *ins_fmt_ns(double ns, char *buf, size_t len)
{
  static const char *const unit[] = {"ns", "µs", "ms", "s"};
  if (ns < 0) {
    snprintf(buf, len, "-");
    return buf;
  }
  int u = 0;
  while (u < 3 && ns >= 999.5)
    ns /= 1000, u++;
  snprintf(buf, len, u == 0 ? "%.0f %s" : ns < 9.995 ? "%.2f %s" : ns < 99.95 ? "%.1f %s" : "%.0f %s",
           ns, unit[u]);
  return buf;
}

const char *ins_fmt_duration(int64_t ns, char *buf, size_t len)
{
  if (ns < 0) {
    snprintf(buf, len, "-");
    return buf;
  }
  int64_t s = ns / 1000000000;
  if (s < 60)
    return ins_fmt_ns((double)ns, buf, len);
  if (s < 3600)
    snprintf(buf, len, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  else if (s < 86400)
    snprintf(buf, len, "%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
  else
    snprintf(buf, len, "%lldd%02lldh", (long long)(s / 86400), (long long)(s % 86400 / 3600));
  return buf;
}

const char *ins_fmt_time(int64_t ns, char *buf, size_t len)
{
  time_t t = (time_t)(ns / 1000000000);
  struct tm tm;
  if (!localtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
    snprintf(buf, len, "?");
  return buf;
}

void ins_json_init(void)
{
  cJSON_Hooks hooks = {.malloc_fn = ins_xmalloc, .free_fn = free};
  cJSON_InitHooks(&hooks);
}

cJSON *ins_json_parse_or_string(const char *s)
{
  cJSON *j = cJSON_Parse(s);
  return j ? j : cJSON_CreateString(s);
}

void ins_json_add_or_null(cJSON *o, const char *key, double x)
{
  if (x >= 0)
    cJSON_AddNumberToObject(o, key, x);
  else
    cJSON_AddNullToObject(o, key);
}

int ins_json_emit(cJSON *doc)
{
  char *text = cJSON_Print(doc);
  cJSON_Delete(doc);
  if (!text)
    return 1;
  puts(text);
  cJSON_free(text);
  return fflush(stdout) == 0 ? 0 : 1;
}
