/* SPDX-License-Identifier: MIT */
/* The handler's stack walker: .eh_frame_hdr lookup, a small CFI interpreter, a shared rule
 * cache. See unwind.h for the contract. */
#define _GNU_SOURCE
#include "unwind.h"
#include "dwarf.h"

#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- the snapshot of loaded objects --------------------------------------------------- */

#define UW_SEGS 6

typedef struct uw_obj_s {
  uint64_t lo, hi;            /* one executable segment */
  const uint8_t *fde;         /* JIT code (uw_add_code): its one FDE; else NULL */
  const uint8_t *hdr;         /* .eh_frame_hdr */
  const int32_t *table;       /* its search table: (start, fde) pairs relative to hdr */
  uint32_t count;             /* pairs; 0: no usable table */
  int nseg;                   /* the object's readable segments */
  uint64_t seg_lo[UW_SEGS], seg_hi[UW_SEGS];
} uw_obj_t;

typedef struct uw_snap_s {
  unsigned long long adds, subs; /* dl_iterate_phdr's counters when it was taken */
  unsigned long long code_gen;   /* and the JIT code's (uw_add_code, uw_remove_code) */
  int n;
  uw_obj_t obj[];                /* sorted by lo */
} uw_snap_t;

static uw_snap_t *_Atomic current;
static _Atomic int readers; /* walks inside a snapshot now */

/* ---- the rule cache ------------------------------------------------------------------- */

/* A rule, packed in 64 bits (0: none yet):
 *   bits 0-2 kind, 3-4 CFA base (CFA_*), 5-6 RBP (0 unchanged, 1 saved at CFA + bp_off,
 *   2 saved at RBP + bp_off, 3 unknown), 7 CFA is loaded from base + offset,
 *   8-15 RA offset from the CFA (int8), 16-31 bp_off (int16), 32-63 CFA offset (int32). */
enum { K_OK = 1, K_END, K_UNSUPPORTED, K_NOINFO };
enum { BP_SAME = 0, BP_CFA, BP_BP, BP_UNKNOWN };
/* The CFA's base register. R10 and R13 are gcc's DRAP registers: a realigned frame's CFA is
 * based on one of them from its prologue's first instructions until the CFA is saved, and
 * again in its epilogue. Those windows have no calls, so only an interrupted frame is ever
 * in one (its registers come with the signal's context); a caller's never is. */
enum { CFA_SP = 0, CFA_BP, CFA_R10, CFA_R13 };

#define UW_CACHE 1024 /* rules: 16 KB, a process's hot return addresses many times over */
#define UW_PROBES 16

static struct {
  _Atomic uint64_t pc, rule;
} cache[UW_CACHE];

static unsigned slot_of(uint64_t pc) { return (unsigned)((pc * 0x9E3779B97F4A7C15ull) >> 54); }

static uint64_t cache_get(uint64_t pc)
{
  for (unsigned i = 0, h = slot_of(pc); i < UW_PROBES; i++, h = (h + 1) & (UW_CACHE - 1)) {
    uint64_t k = atomic_load_explicit(&cache[h].pc, memory_order_acquire);
    if (k == pc)
      return atomic_load_explicit(&cache[h].rule, memory_order_acquire);
    if (!k)
      return 0;
  }
  return 0;
}

static void cache_put(uint64_t pc, uint64_t rule)
{
  if (pc < 4096 || (rule & 7) == K_NOINFO) /* no code there; or code of an object loaded after
                                              the snapshot, which the next one will have */
    return;
  for (unsigned i = 0, h = slot_of(pc); i < UW_PROBES; i++, h = (h + 1) & (UW_CACHE - 1)) {
    uint64_t k = 0;
    if (atomic_compare_exchange_strong(&cache[h].pc, &k, pc)) {
      atomic_store_explicit(&cache[h].rule, rule, memory_order_release);
      return;
    }
    if (k == pc)
      return;
  }
}

/* Interrupted PCs are new instructions nearly every sample: a per-PC entry for each would
 * fill the table above and miss anyway. Their rules are cached by the range of code a CFI row
 * covers, in a direct-mapped table by 64-byte line; each entry a seqlock (writers claim it by
 * making its count odd; a reader that sees it odd or changed has missed). */
#define UW_RANGES 256

static struct {
  _Atomic uint32_t seq;
  _Atomic uint64_t lo, hi, rule;
} ranges[UW_RANGES];

static unsigned range_slot(uint64_t pc) { return (unsigned)((pc >> 6) * 0x9E3779B1u) >> 24; }

static uint64_t range_get(uint64_t pc)
{
  unsigned h = range_slot(pc);
  uint32_t s = atomic_load_explicit(&ranges[h].seq, memory_order_acquire);
  if (s & 1)
    return 0;
  uint64_t lo = atomic_load_explicit(&ranges[h].lo, memory_order_relaxed);
  uint64_t hi = atomic_load_explicit(&ranges[h].hi, memory_order_relaxed);
  uint64_t rule = atomic_load_explicit(&ranges[h].rule, memory_order_relaxed);
  atomic_thread_fence(memory_order_acquire);
  if (atomic_load_explicit(&ranges[h].seq, memory_order_relaxed) != s || pc < lo || pc >= hi)
    return 0;
  return rule;
}

static void range_put(uint64_t pc, uint64_t lo, uint64_t hi, uint64_t rule)
{
  unsigned h = range_slot(pc);
  uint32_t s = atomic_load_explicit(&ranges[h].seq, memory_order_relaxed);
  if ((s & 1) || lo >= hi || !atomic_compare_exchange_strong(&ranges[h].seq, &s, s + 1))
    return;
  atomic_store_explicit(&ranges[h].lo, lo, memory_order_relaxed);
  atomic_store_explicit(&ranges[h].hi, hi, memory_order_relaxed);
  atomic_store_explicit(&ranges[h].rule, rule, memory_order_relaxed);
  atomic_store_explicit(&ranges[h].seq, s + 2, memory_order_release);
}

static void cache_clear(void)
{
  for (unsigned i = 0; i < UW_CACHE; i++) {
    atomic_store(&cache[i].rule, 0);
    atomic_store(&cache[i].pc, 0);
  }
  for (unsigned i = 0; i < UW_RANGES; i++) /* no walk runs meanwhile */
    atomic_store(&ranges[i].lo, 0), atomic_store(&ranges[i].hi, 0);
}

/* ---- reading CFI ---------------------------------------------------------------------- */

/* A pointer in DWARF EH encoding enc (absptr, udata/sdata 2/4/8, uleb/sleb; pc-relative or
 * absolute). Anything else (datarel, funcrel, indirect) sets bad. */
static uint64_t pointer(rd_t *r, uint8_t enc)
{
  if (enc == 0xff) /* DW_EH_PE_omit */
    return 0;
  uint64_t at = (uint64_t)(uintptr_t)r->p, v;
  switch (enc & 0x0f) {
  case 0x00: v = fixed(r, 8); break;
  case 0x01: v = uleb(r); break;
  case 0x02: v = fixed(r, 2); break;
  case 0x03: v = fixed(r, 4); break;
  case 0x04: v = fixed(r, 8); break;
  case 0x09: v = (uint64_t)sleb(r); break;
  case 0x0a: v = (uint64_t)(int64_t)(int16_t)fixed(r, 2); break;
  case 0x0b: v = (uint64_t)(int64_t)(int32_t)fixed(r, 4); break;
  case 0x0c: v = fixed(r, 8); break;
  default: r->bad = 1; return 0;
  }
  switch (enc & 0x70) {
  case 0x00: return v;
  case 0x10: return at + v;
  default: r->bad = 1; return 0;
  }
}

static int readable(const uw_obj_t *o, const uint8_t *p, uint64_t len)
{
  uint64_t a = (uint64_t)(uintptr_t)p;
  for (int i = 0; i < o->nseg; i++)
    if (a >= o->seg_lo[i] && a <= o->seg_hi[i] && len <= o->seg_hi[i] - a)
      return 1;
  return 0;
}

/* The interpreter's state for the registers a walk needs. */
typedef struct frame_rule_s {
  int cfa_ok, cfa_reg, cfa_deref; /* cfa_reg: CFA_* */
  int64_t cfa_off;
  int ra;          /* 0 undefined, 1 at CFA + ra_off, 2 unknown */
  int64_t ra_off;
  int bp;          /* BP_* */
  int64_t bp_off;
  int plt;         /* > 0: the CFA is a lazy PLT entry's, RSP + 8, + 8 from the entry's byte
                      plt on (plt_expr) */
} frame_rule_t;

enum { R_BP = 6, R_SP = 7, R_R10 = 10, R_R13 = 13, R_RA = 16 };

/* The CFA_* base of DWARF register reg, or -1 for one the walker does not track. */
static int cfa_base(uint64_t reg)
{
  return reg == R_SP ? CFA_SP : reg == R_BP ? CFA_BP : reg == R_R10 ? CFA_R10
         : reg == R_R13 ? CFA_R13 : -1;
}

/* A DWARF expression block: the forms compilers use for realigned frames, "breg6/7 k" and
 * "breg6/7 k; deref". Returns 1 with base (1: RBP) and k, and *deref, or 0. */
static int simple_expr(rd_t *r, uint64_t len, int *bp, int64_t *k, int *deref)
{
  if ((uint64_t)(r->end - r->p) < len) {
    r->bad = 1;
    return 0;
  }
  rd_t e = {r->p, r->p + len, 0};
  r->p += len;
  uint8_t op = u8(&e);
  if (op != 0x70 + R_BP && op != 0x70 + R_SP) /* DW_OP_breg6, DW_OP_breg7 */
    return 0;
  *bp = op == 0x70 + R_BP;
  *k = sleb(&e);
  *deref = 0;
  if (e.p < e.end && u8(&e) == 0x06) /* DW_OP_deref */
    *deref = 1;
  return !e.bad && e.p == e.end;
}

/* The expression linkers give a lazy PLT's entries (16 bytes: jmp *GOT, push index, jmp to
 * the resolver), "breg7 8; breg16 0; lit15; and; litK; ge; lit3; shl; plus": the CFA is
 * RSP + 8, + 8 once the push ran (from byte K of the entry on). Returns K, or 0 for another
 * expression. */
static int plt_expr(const uint8_t *e, uint64_t len)
{
  static const uint8_t head[] = {0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a};
  static const uint8_t tail[] = {0x2a, 0x33, 0x24, 0x22};
  if (len != sizeof head + 1 + sizeof tail || memcmp(e, head, sizeof head) ||
      memcmp(e + sizeof head + 1, tail, sizeof tail))
    return 0;
  int k = e[sizeof head] - 0x30; /* DW_OP_litK */
  return k > 0 && k < 16 ? k : 0;
}

/* Runs CFA instructions from r until the location passes pc. init is the CIE's state (for
 * DW_CFA_restore). Returns 0, or -1 on an instruction it does not know. */
static int run_cfi(rd_t *r, uint64_t loc, uint64_t pc, uint64_t code_align, int64_t data_align,
                   uint8_t fde_enc, frame_rule_t *st, const frame_rule_t *init, uint64_t row[2])
{
  row[0] = loc, row[1] = UINT64_MAX; /* the row holding pc: [start, end) */
  frame_rule_t stack[8];
  int depth = 0;
  while (r->p < r->end && !r->bad) {
    uint8_t op = u8(r), low = op & 0x3f;
    uint64_t reg, delta = 0;
    int64_t off;
    int bp, deref;
    switch (op >> 6) {
    case 1: delta = low * code_align; goto advance;
    case 2:
      off = (int64_t)uleb(r) * data_align;
      if (low == R_BP)
        st->bp = BP_CFA, st->bp_off = off;
      else if (low == R_RA)
        st->ra = 1, st->ra_off = off;
      continue;
    case 3:
      if (low == R_BP)
        st->bp = init->bp, st->bp_off = init->bp_off;
      else if (low == R_RA)
        st->ra = init->ra, st->ra_off = init->ra_off;
      continue;
    }
    switch (op) {
    case 0x00: continue;                                     /* nop */
    case 0x01: /* set_loc */
      loc = pointer(r, fde_enc);
      if (loc > pc) {
        row[1] = loc;
        return 0;
      }
      row[0] = loc;
      continue;
    case 0x02: delta = fixed(r, 1) * code_align; goto advance;
    case 0x03: delta = fixed(r, 2) * code_align; goto advance;
    case 0x04: delta = fixed(r, 4) * code_align; goto advance;
    case 0x05: case 0x11: case 0x2f: /* offset_extended, _sf, GNU_negative_offset_extended */
      reg = uleb(r);
      off = op == 0x05 ? (int64_t)uleb(r) * data_align
            : op == 0x11 ? sleb(r) * data_align : -(int64_t)uleb(r) * data_align;
      if (reg == R_BP)
        st->bp = BP_CFA, st->bp_off = off;
      else if (reg == R_RA)
        st->ra = 1, st->ra_off = off;
      continue;
    case 0x06: /* restore_extended */
      reg = uleb(r);
      if (reg == R_BP)
        st->bp = init->bp, st->bp_off = init->bp_off;
      else if (reg == R_RA)
        st->ra = init->ra, st->ra_off = init->ra_off;
      continue;
    case 0x07: case 0x08: /* undefined, same_value */
      reg = uleb(r);
      if (reg == R_BP)
        st->bp = op == 0x08 ? BP_SAME : BP_UNKNOWN;
      else if (reg == R_RA)
        st->ra = op == 0x08 ? 2 : 0;
      continue;
    case 0x09: /* register: reg's value is in another register */
      reg = uleb(r);
      uleb(r);
      if (reg == R_BP)
        st->bp = BP_UNKNOWN;
      else if (reg == R_RA)
        st->ra = 2;
      else if (reg == R_SP)
        st->cfa_ok = 0;
      continue;
    case 0x0a: if (depth == 8) return -1; stack[depth++] = *st; continue;
    case 0x0b: if (depth == 0) return -1; *st = stack[--depth]; continue;
    case 0x0c: case 0x12: /* def_cfa, def_cfa_sf */
      reg = uleb(r);
      off = op == 0x0c ? (int64_t)uleb(r) : sleb(r) * data_align;
      st->cfa_ok = cfa_base(reg) >= 0;
      st->cfa_reg = cfa_base(reg), st->cfa_deref = 0, st->cfa_off = off, st->plt = 0;
      continue;
    case 0x0d: /* def_cfa_register (after an expression: not a register rule to change) */
      reg = uleb(r);
      st->cfa_ok = cfa_base(reg) >= 0 && !st->cfa_deref && !st->plt;
      st->cfa_reg = cfa_base(reg);
      continue;
    case 0x0e: case 0x13: /* def_cfa_offset, _sf */
      st->cfa_off = op == 0x0e ? (int64_t)uleb(r) : sleb(r) * data_align;
      st->cfa_ok = st->cfa_ok && !st->cfa_deref && !st->plt;
      continue;
    case 0x0f: /* def_cfa_expression */
      reg = uleb(r);
      if (reg <= (uint64_t)(r->end - r->p) && (st->plt = plt_expr(r->p, reg))) {
        r->p += reg;
        st->cfa_ok = 1, st->cfa_reg = CFA_SP, st->cfa_deref = 0;
        st->cfa_off = (int64_t)(pc & 15) >= st->plt ? 16 : 8;
        continue;
      }
      st->cfa_ok = simple_expr(r, reg, &bp, &off, &deref) && deref;
      st->cfa_reg = bp ? CFA_BP : CFA_SP, st->cfa_deref = 1, st->cfa_off = off;
      continue;
    case 0x10: /* expression: the register is saved at the address the block computes */
      reg = uleb(r);
      if (simple_expr(r, uleb(r), &bp, &off, &deref) && !deref && bp && reg == R_BP) {
        st->bp = BP_BP, st->bp_off = off;
      } else if (reg == R_BP) {
        st->bp = BP_UNKNOWN;
      } else if (reg == R_RA) {
        st->ra = 2;
      }
      continue;
    case 0x14: case 0x15: /* val_offset, _sf: a value, not a save slot */
      reg = uleb(r);
      op == 0x14 ? (void)uleb(r) : (void)sleb(r);
      if (reg == R_BP)
        st->bp = BP_UNKNOWN;
      else if (reg == R_RA)
        st->ra = 2;
      continue;
    case 0x16: /* val_expression */
      reg = uleb(r);
      r->p += uleb(r);
      if (r->p > r->end)
        return -1;
      if (reg == R_BP)
        st->bp = BP_UNKNOWN;
      else if (reg == R_RA)
        st->ra = 2;
      continue;
    case 0x2e: uleb(r); continue; /* GNU_args_size */
    default: return -1;
    }
  advance:
    loc += delta;
    if (loc > pc) {
      row[1] = loc;
      return 0;
    }
    row[0] = loc;
  }
  return r->bad ? -1 : 0;
}

/* The rule for code address pc: from the object's FDE, through the CIE's initial state; range
 * gets the code it holds for (the CFI row's), or stays empty. */
static uint64_t compute(const uw_snap_t *s, uint64_t pc, uint64_t range[2])
{
  range[0] = range[1] = 0;
  int lo = 0, hi = s->n;
  while (lo < hi) { /* the last object starting at or below pc */
    int mid = (lo + hi) / 2;
    if (s->obj[mid].lo <= pc)
      lo = mid + 1;
    else
      hi = mid;
  }
  const uw_obj_t *o = lo ? &s->obj[lo - 1] : NULL;
  if (!o || pc >= o->hi)
    return (uint64_t)K_NOINFO;
  const uint8_t *fde = o->fde;
  if (!fde) {
    if (!o->count)
      return (uint64_t)K_UNSUPPORTED;
    uint32_t a = 0, b = o->count; /* the last table entry starting at or below pc */
    while (a < b) {
      uint32_t mid = (a + b) / 2;
      if ((uint64_t)(uintptr_t)(o->hdr + o->table[2 * mid]) <= pc)
        a = mid + 1;
      else
        b = mid;
    }
    if (!a)
      return (uint64_t)K_NOINFO;
    fde = o->hdr + o->table[2 * (a - 1) + 1];
  }
  if (!readable(o, fde, 8))
    return (uint64_t)K_UNSUPPORTED;
  uint32_t flen, cie_off;
  memcpy(&flen, fde, 4);
  memcpy(&cie_off, fde + 4, 4);
  if (flen == 0xffffffffu || flen < 4 || !readable(o, fde, 4ull + flen))
    return (uint64_t)K_UNSUPPORTED;
  const uint8_t *cie = fde + 4 - cie_off;
  uint32_t clen, cid;
  if (!readable(o, cie, 8))
    return (uint64_t)K_UNSUPPORTED;
  memcpy(&clen, cie, 4);
  memcpy(&cid, cie + 4, 4);
  if (clen == 0xffffffffu || clen < 8 || cid != 0 || !readable(o, cie, 4ull + clen))
    return (uint64_t)K_UNSUPPORTED;

  /* The CIE: version, augmentation, alignments, the return address column, the FDE
   * pointer encoding, its initial instructions. */
  rd_t c = {cie + 8, cie + 4 + clen, 0};
  uint8_t version = u8(&c), fde_enc = 0;
  const char *aug = (const char *)c.p;
  size_t auglen = strnlen(aug, (size_t)(c.end - c.p));
  c.p += auglen + 1;
  if (c.p > c.end || (version != 1 && version != 3) || (auglen && aug[0] != 'z'))
    return (uint64_t)K_UNSUPPORTED;
  uint64_t code_align = uleb(&c);
  int64_t data_align = sleb(&c);
  uint64_t ra_col = version == 1 ? u8(&c) : uleb(&c);
  if (ra_col != R_RA)
    return (uint64_t)K_UNSUPPORTED;
  if (auglen) {
    uint64_t alen = uleb(&c);
    const uint8_t *aend = c.p + alen;
    for (size_t i = 1; i < auglen && !c.bad; i++) {
      if (aug[i] == 'R')
        fde_enc = u8(&c);
      else if (aug[i] == 'L')
        u8(&c); /* the LSDA's encoding: nothing a walk needs */
      else if (aug[i] == 'P')
        pointer(&c, u8(&c));
      else if (aug[i] != 'S' && aug[i] != 'B')
        break; /* the length says where the data ends */
    }
    if (aend > c.end)
      return (uint64_t)K_UNSUPPORTED;
    c.p = aend;
  }
  frame_rule_t init = {0}, st;
  uint64_t row[2];
  if (run_cfi(&c, 0, UINT64_MAX, code_align, data_align, fde_enc, &init, &init, row) || c.bad)
    return (uint64_t)K_UNSUPPORTED;

  /* The FDE: its range, then its instructions up to pc. */
  rd_t f = {fde + 8, fde + 4 + flen, 0};
  uint64_t start = pointer(&f, fde_enc);
  uint64_t range_ = pointer(&f, fde_enc & 0x0f);
  if (f.bad)
    return (uint64_t)K_UNSUPPORTED;
  if (pc < start || pc - start >= range_)
    return (uint64_t)K_NOINFO;
  if (auglen)
    f.p += uleb(&f);
  st = init;
  if (f.p > f.end || run_cfi(&f, start, pc, code_align, data_align, fde_enc, &st, &init, row) ||
      f.bad)
    return (uint64_t)K_UNSUPPORTED;
  range[0] = row[0] > start ? row[0] : start;
  range[1] = row[1] < start + range_ ? row[1] : start + range_;
  if (range[1] > o->hi) /* never past the code it was found for (JIT kernels lie close) */
    range[1] = o->hi;
  if (st.plt) { /* the rule holds for pc's side of its entry's byte plt */
    uint64_t entry = pc & ~(uint64_t)15, lo = entry + ((pc & 15) >= (uint64_t)st.plt ? st.plt : 0);
    uint64_t hi = (pc & 15) >= (uint64_t)st.plt ? entry + 16 : entry + st.plt;
    range[0] = range[0] > lo ? range[0] : lo;
    range[1] = range[1] < hi ? range[1] : hi;
  }

  if (st.ra == 0)
    return (uint64_t)K_END;
  if (!st.cfa_ok || st.ra != 1 || st.bp == BP_UNKNOWN || st.cfa_off != (int32_t)st.cfa_off ||
      st.ra_off != (int8_t)st.ra_off || st.bp_off != (int16_t)st.bp_off)
    return (uint64_t)K_UNSUPPORTED;
  return (uint64_t)K_OK | (uint64_t)st.cfa_reg << 3 | (uint64_t)(st.bp & 3) << 5 |
         (uint64_t)st.cfa_deref << 7 | (uint64_t)(uint8_t)(int8_t)st.ra_off << 8 |
         (uint64_t)(uint16_t)(int16_t)st.bp_off << 16 |
         (uint64_t)(uint32_t)(int32_t)st.cfa_off << 32;
}

/* ---- the walk ------------------------------------------------------------------------- */

static int load(uint64_t addr, uint64_t lo, uint64_t hi, uint64_t *v)
{
  if (hi < 8 || addr < lo || addr > hi - 8 || (addr & 7))
    return 0;
  *v = *(const uint64_t *)(uintptr_t)addr;
  return 1;
}

int uw_walk(uw_regs_t r, uint64_t lo, uint64_t hi, uint64_t *out, int max, int *stop)
{
  uw_regs_t at;
  return uw_walk_at(r, lo, hi, out, max, stop, &at);
}

int uw_walk_at(uw_regs_t r, uint64_t lo, uint64_t hi, uint64_t *out, int max, int *stop,
               uw_regs_t *at)
{
  int n = 0;
  *stop = UW_MAX;
  *at = r;
  if (max < 1)
    return 0;
  atomic_fetch_add(&readers, 1);
  const uw_snap_t *s = atomic_load(&current);
  if (!s || _r_debug.r_state != RT_CONSISTENT) { /* glibc's own dlclose (gconv, NSS) too */
    out[n++] = r.ip;
    *stop = UW_OFF;
    goto done;
  }
  for (;;) {
    out[n++] = r.ip;
    if (n == max)
      break;
    uint64_t pc = n == 1 ? r.ip : r.ip - 1; /* a return address may follow a noreturn call */
    /* a return address by itself (a program's are few); the interrupted PC by its code's range */
    uint64_t rule = n == 1 ? range_get(pc) : cache_get(pc), range[2];
    if (!rule) {
      rule = compute(s, pc, range);
      if (n == 1)
        range_put(pc, range[0], range[1], rule);
      else
        cache_put(pc, rule);
    }
    int kind = (int)(rule & 7);
    if (kind != K_OK) {
      *stop = kind == K_END ? UW_END : kind == K_NOINFO ? UW_NOINFO : UW_UNSUPPORTED;
      break;
    }
    int64_t cfa_off = (int32_t)(uint32_t)(rule >> 32), bp_off = (int16_t)(uint16_t)(rule >> 16);
    int64_t ra_off = (int8_t)(uint8_t)(rule >> 8);
    int base = (int)((rule >> 3) & 3);
    if (base >= CFA_R10 && n > 1) { /* a DRAP window at a return address: no such code */
      *stop = UW_UNSUPPORTED;
      break;
    }
    const uint64_t bases[4] = {r.sp, r.bp, r.r10, r.r13};
    uint64_t cfa = bases[base] + (uint64_t)cfa_off, ra, bp = r.bp;
    if (((rule >> 7) & 1) && !load(cfa, lo, hi, &cfa)) {
      *stop = UW_BOUNDS;
      break;
    }
    int bpk = (int)((rule >> 5) & 3);
    if (cfa <= r.sp || !load(cfa + (uint64_t)ra_off, lo, hi, &ra)) {
      *stop = UW_BOUNDS;
      break;
    }
    /* An RBP slot off the stack (gcc's epilogues keep "saved at RBP" after the restore, so
     * that RBP is the caller's own by then) leaves RBP unknown, 0: the return addresses need
     * it no further than a frame based on it, which then stops the walk (UW_BOUNDS). */
    if ((bpk == BP_CFA && !load(cfa + (uint64_t)bp_off, lo, hi, &bp)) ||
        (bpk == BP_BP && !load(r.bp + (uint64_t)bp_off, lo, hi, &bp)))
      bp = 0;
    if (!ra) {
      *stop = UW_END;
      break;
    }
    r.ip = ra, r.sp = cfa, r.bp = bp;
  }
done:
  atomic_fetch_sub(&readers, 1);
  *at = r;
  return n;
}

/* ---- snapshots ------------------------------------------------------------------------ */

typedef struct build_s {
  uw_obj_t *obj;
  int n, cap, oom;
  unsigned long long adds, subs;
} build_t;

/* The next object of b (its array doubled when full), or NULL (b->oom set). */
static uw_obj_t *grow(build_t *b)
{
  if (b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 64;
    uw_obj_t *o = realloc(b->obj, (size_t)cap * sizeof *o);
    if (!o) {
      b->oom = 1;
      return NULL;
    }
    b->obj = o, b->cap = cap;
  }
  return &b->obj[b->n++];
}

static int add_object(struct dl_phdr_info *info, size_t size, void *arg)
{
  build_t *b = arg;
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs)
    b->adds = info->dlpi_adds, b->subs = info->dlpi_subs;
  uw_obj_t proto = {0};
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uint64_t a = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_GNU_EH_FRAME)
      proto.hdr = (const uint8_t *)(uintptr_t)a;
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_R) && proto.nseg < UW_SEGS)
      proto.seg_lo[proto.nseg] = a, proto.seg_hi[proto.nseg++] = a + ph->p_memsz;
  }
  /* The search table: version 1, FDE pointers and starts as 4-byte offsets from the header
   * (DW_EH_PE_datarel | sdata4), the count as a plain 4-byte number, which is what linkers
   * write. Another layout leaves the object without a table: its frames stop the walk. */
  if (proto.hdr && readable(&proto, proto.hdr, 16) && proto.hdr[0] == 1 && proto.hdr[3] == 0x3b &&
      (proto.hdr[2] == 0x03 || proto.hdr[2] == 0x0b)) {
    rd_t r = {proto.hdr + 4, proto.hdr + 12, 0}; /* the 4- or 8-byte .eh_frame pointer */
    pointer(&r, proto.hdr[1]);
    uint32_t count = 0;
    memcpy(&count, r.p, 4);
    const int32_t *table = (const int32_t *)(r.p + 4);
    if (!r.bad && readable(&proto, (const uint8_t *)table, 8ull * count))
      proto.table = table, proto.count = count;
  }
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
      continue;
    uw_obj_t *o = grow(b);
    if (!o)
      return 1;
    *o = proto;
    o->lo = info->dlpi_addr + ph->p_vaddr;
    o->hi = o->lo + ph->p_memsz;
  }
  return 0;
}

static int by_lo(const void *a, const void *b)
{
  const uw_obj_t *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Swaps in snap (may be NULL) and returns the old one once no walk is inside it. */
static uw_snap_t *swap_snapshot(uw_snap_t *snap)
{
  uw_snap_t *old = atomic_exchange(&current, snap);
  while (atomic_load(&readers))
    sched_yield();
  return old;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* refreshes, unloads, JIT code */

/* JIT code (uw_add_code), and what uw_remove_code took out: freed once no snapshot can refer
 * to it (after the next swap, with no snapshot parked). mu held for all of it. */
typedef struct uw_code_s {
  struct uw_code_s *next;
  uint64_t lo, hi;
  size_t fde_at, len;
  uint8_t cfi[];
} uw_code_t;
static uw_code_t *codes, *code_retired;
static unsigned long long code_gen;
static int unloading; /* dlcloses in progress (they nest: a destructor may dlclose) */
static uw_snap_t *parked; /* the snapshot withdrawn while they run */

static int counters(struct dl_phdr_info *info, size_t size, void *arg)
{
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    ((unsigned long long *)arg)[0] = info->dlpi_adds;
    ((unsigned long long *)arg)[1] = info->dlpi_subs;
  }
  return 1;
}

/* Called with mu held. */
static int refresh_locked(int force)
{
  if (unloading)
    return 0;
  unsigned long long now[2] = {0, 0};
  uw_snap_t *cur = atomic_load(&current);
  dl_iterate_phdr(counters, now);
  if (!force && cur && cur->adds == now[0] && cur->subs == now[1] && cur->code_gen == code_gen)
    return 0;
  build_t b = {0};
  dl_iterate_phdr(add_object, &b);
  for (const uw_code_t *k = codes; k && !b.oom; k = k->next) {
    uw_obj_t *o = grow(&b);
    if (!o)
      break;
    *o = (uw_obj_t){.lo = k->lo, .hi = k->hi, .fde = k->cfi + k->fde_at, .nseg = 1};
    o->seg_lo[0] = (uint64_t)(uintptr_t)k->cfi, o->seg_hi[0] = o->seg_lo[0] + k->len;
  }
  uw_snap_t *s = b.oom ? NULL : malloc(sizeof *s + (size_t)b.n * sizeof *b.obj);
  if (!s) {
    free(b.obj);
    return -1;
  }
  s->adds = b.adds, s->subs = b.subs, s->code_gen = code_gen, s->n = b.n;
  if (b.n)
    memcpy(s->obj, b.obj, (size_t)b.n * sizeof *b.obj);
  free(b.obj);
  qsort(s->obj, (size_t)s->n, sizeof *s->obj, by_lo);
  /* Something was unloaded behind our back, or JIT code is going: the cached rules go while
   * no walk runs (none can cache a rule meanwhile), then the new snapshot comes in. */
  if ((cur && cur->subs != s->subs) || code_retired) {
    free(swap_snapshot(NULL));
    cache_clear();
  }
  free(swap_snapshot(s));
  while (code_retired) { /* no snapshot refers to it now */
    uw_code_t *k = code_retired;
    code_retired = k->next;
    free(k);
  }
  return 0;
}

int uw_refresh(void)
{
  pthread_mutex_lock(&mu);
  int rc = refresh_locked(0);
  pthread_mutex_unlock(&mu);
  return rc;
}

/* Takes the code at lo out of the registry (mu held). */
static void retire_code(uint64_t lo)
{
  for (uw_code_t **p = &codes; *p; p = &(*p)->next)
    if ((*p)->lo == lo) {
      uw_code_t *k = *p;
      *p = k->next;
      k->next = code_retired, code_retired = k;
      code_gen++;
      return;
    }
}

int uw_add_code(uint64_t lo, uint64_t hi, const uint8_t *cfi, size_t len)
{
  uint32_t clen;
  if (len < 8 || hi <= lo)
    return -1;
  memcpy(&clen, cfi, 4);
  if (clen > len - 4)
    return -1;
  uw_code_t *k = malloc(sizeof *k + len);
  if (!k)
    return -1;
  k->lo = lo, k->hi = hi, k->fde_at = 4 + (size_t)clen, k->len = len;
  memcpy(k->cfi, cfi, len);
  pthread_mutex_lock(&mu);
  retire_code(lo); /* the same code placed again (one kernel serving two signatures) */
  k->next = codes, codes = k;
  code_gen++;
  pthread_mutex_unlock(&mu);
  return 0;
}

void uw_remove_code(uint64_t lo)
{
  pthread_mutex_lock(&mu);
  retire_code(lo);
  if (code_retired && refresh_locked(0)) { /* no memory for a new snapshot (while unloading it
                                                 returns 0: uw_unload_end takes one) */
    free(swap_snapshot(NULL)); /* walks stop until the next refresh: the code is going */
    cache_clear();
  }
  pthread_mutex_unlock(&mu);
}

void uw_unload_begin(void)
{
  pthread_mutex_lock(&mu);
  if (!unloading++)
    parked = swap_snapshot(NULL);
  pthread_mutex_unlock(&mu);
}

/* A dlclose that only dropped a reference (no object unloaded: glibc's counters say so) gets
 * its snapshot and its rules back; otherwise the rules go (the addresses may hold other code
 * later) and a new snapshot is taken. */
void uw_unload_end(void)
{
  pthread_mutex_lock(&mu);
  if (unloading && !--unloading) {
    unsigned long long now[2] = {0, 0};
    dl_iterate_phdr(counters, now);
    if (parked && parked->subs == now[1] && parked->code_gen == code_gen) {
      free(swap_snapshot(parked));
    } else {
      free(parked);
      cache_clear();
      refresh_locked(1);
    }
    parked = NULL;
  }
  pthread_mutex_unlock(&mu);
}

void uw_after_fork_child(void)
{
  pthread_mutex_init(&mu, NULL);
  atomic_store(&readers, 0); /* walks of threads the child does not have */
  unloading = 0;
  if (parked) { /* a dlclose in another thread of the parent, half done: start afresh */
    free(parked);
    cache_clear();
  }
  parked = NULL;
}
