/*
 * protocol_reply.c — the replies of multi-process mode (protocol.h), as
 * protocol.c does the requests: each reply's payload after its i32 result
 * is the list of its fields (rep_fields) that the sizer, the encoder and
 * the decoder all walk; a decoded reply is checked against the request it
 * answers (its type, its number of keys, whether a READ asked for
 * layouts) and the pool its spans point into.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "wire/wire_internal.h"

#define SPAN_BYTES 16u
#define TIER_HITS_BYTES (PROTO_TIER_BYTES + 8u)

#define RUN_BYTES (4u + PROTO_LAYOUT_BYTES) /* READ: a run of keys of one layout */

/* The largest replies fit the limit: RESERVE_WRITE (result, n, status and
 * span per key), READ with layouts (result, n, span per key, runs, a run
 * per key when no two consecutive keys share a layout). */
_Static_assert(8u + PROTO_MAX_KEYS * (4u + SPAN_BYTES) <= PROTO_MAX_REPLY_PAYLOAD,
               "PROTO_MAX_REPLY_PAYLOAD too small for a reply of PROTO_MAX_KEYS keys");
_Static_assert(12u + PROTO_MAX_KEYS * (SPAN_BYTES + RUN_BYTES) <= PROTO_MAX_REPLY_PAYLOAD,
               "PROTO_MAX_REPLY_PAYLOAD too small for a READ of PROTO_MAX_KEYS layouts");

_Static_assert(sizeof(((kva_tier_hits *)0)->tier) / sizeof(((kva_tier_hits *)0)->tier[0]) == 8 &&
                   sizeof(((kva_tier_hits *)0)->tier[0].name) == PROTO_TIER_BYTES,
               "LOOKUP replies carry up to 8 tiers of 32-byte names");

/* STATS and TIER_STATS send the u64 fields of kvact.h's structs in
 * declaration order: the first bytes of each struct, read as u64. The
 * asserts catch a field added there, which needs a new PROTO_VERSION. */
#define STATS_U64 20u
#define TIER_STATS_U64 4u
#define L2_STATS_U64 10u
#define MEMCHECK_U64 5u
#define TIER_PLAN_U64                                                                              \
  5u /* skipped_slow_keys, queued_bytes, bytes_per_s, latency_s, lookups_skipped */
#define TIER_KEYS_U64 11u
#define STATS_BYTES (STATS_U64 * 8u + 4u + 4u + 8u)
#define TIER_STATS_BYTES (TIER_STATS_U64 * 8u + 4u + L2_STATS_U64 * 8u + TIER_PLAN_U64 * 8u)
_Static_assert(offsetof(kva_storage_stats, l1_pinned) == STATS_U64 * 8 &&
                   offsetof(kva_storage_stats, l1_numa_node) == STATS_U64 * 8 + sizeof(int) &&
                   offsetof(kva_storage_stats, l2_skipped_slow_keys) ==
                       STATS_U64 * 8 + 2 * sizeof(int) &&
                   sizeof(kva_storage_stats) == STATS_U64 * 8 + 2 * sizeof(int) + 8,
               "kva_storage_stats is 20 u64, l1_pinned, l1_numa_node, l2_skipped_slow_keys "
               "(protocol.h STATS)");
_Static_assert(offsetof(kva_l2_tier_stats, bypassed) == TIER_STATS_U64 * 8 &&
                   sizeof(kva_l2_stats) == L2_STATS_U64 * 8 &&
                   offsetof(kva_l2_tier_stats, latency_s) ==
                       offsetof(kva_l2_tier_stats, skipped_slow_keys) + 3 * 8 &&
                   offsetof(kva_l2_tier_stats, lookups_skipped) ==
                       offsetof(kva_l2_tier_stats, skipped_slow_keys) + 4 * 8 &&
                   sizeof(kva_l2_tier_stats) ==
                       offsetof(kva_l2_tier_stats, skipped_slow_keys) + TIER_PLAN_U64 * 8 &&
                   sizeof(double) == 8,
               "kva_l2_tier_stats is 4 u64, bypassed, kva_l2_stats' 10 u64, then 2 u64, 2 "
               "doubles sent as their bits and a u64 (TIER_STATS)");
_Static_assert(sizeof(kva_l2_tier_keys) == TIER_KEYS_U64 * 8,
               "kva_l2_tier_keys is 11 u64 (protocol.h TIER_KEYS)");
_Static_assert(sizeof(kva_memcheck_report) == MEMCHECK_U64 * 8,
               "kva_memcheck_report is 5 u64 (protocol.h MEMCHECK)");
_Static_assert(SIZE_MAX >= UINT64_MAX, "LOOKUP's u64 counts are size_t in kva_tier_hits");

/* TIER_NODES: nodes, count, map_age_s; then per node its address, state,
 * slots, failed_s and 3 u64 counters. */
#define NODES_HEAD_BYTES 16u
#define NODE_BYTES (PROTO_NODE_ADDR_BYTES + 4u + 4u + 8u + 3u * 8u)
_Static_assert(sizeof(((kva_l2_node_stats *)0)->addr) == PROTO_NODE_ADDR_BYTES,
               "a node's address is char[PROTO_NODE_ADDR_BYTES] (protocol.h TIER_NODES)");
_Static_assert(8u + NODES_HEAD_BYTES + PROTO_MAX_NODES * NODE_BYTES <= PROTO_MAX_REPLY_PAYLOAD,
               "PROTO_MAX_REPLY_PAYLOAD too small for a reply of PROTO_MAX_NODES nodes");

/* The n u64 at the start of a struct. */
static void wr_u64s(wire_wr *w, const void *fields, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t v;
    memcpy(&v, (const uint8_t *)fields + 8 * i, 8);
    wire_wr_u64(w, v);
  }
}

static void rd_u64s(wire_rd *in, void *fields, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t v = wire_rd_u64(in);
    memcpy((uint8_t *)fields + 8 * i, &v, 8);
  }
}

/* A double travels as its bits. */
static void wr_f64(wire_wr *w, double d) {
  uint64_t v;
  memcpy(&v, &d, 8);
  wire_wr_u64(w, v);
}

static double rd_f64(wire_rd *in) {
  uint64_t v = wire_rd_u64(in);
  double d;
  memcpy(&d, &v, 8);
  return d;
}

/* The fields of reply payloads after the i32 result. */
enum {
  RP_END,
  RP_N,          /* u32, as many as the request's keys */
  RP_STATUS,     /* i32[n] */
  RP_SPANS,      /* span[n] */
  RP_LAYOUTS,    /* READ, when asked: u32 runs, runs x (u32 count, layout) */
  RP_HITS,       /* u64 */
  RP_WELCOME,    /* u64 pool_bytes, u32 pid, u32 max_keys */
  RP_LOOKUP,     /* u64 total, u32 ntiers, ntiers x (name, u64 hits) */
  RP_STATS,      /* STATS_BYTES */
  RP_TIER_STATS, /* TIER_STATS_BYTES */
  RP_TIER_KEYS,  /* TIER_KEYS_U64 u64 */
  RP_NODES,      /* NODES_HEAD_BYTES, count x NODE_BYTES */
  RP_TEXT,       /* u32 len, bytes; sent whatever the result */
  RP_MEMCHECK,   /* MEMCHECK_U64 u64; sent whatever the result */
};

static const uint8_t rep_fields[P_TYPE_END][4] = {
    [P_HELLO] = {RP_WELCOME},
    [P_RESERVE_WRITE] = {RP_N, RP_STATUS, RP_SPANS},
    [P_FINISH_WRITE] = {RP_N, RP_STATUS},
    [P_ABORT_WRITE] = {RP_N, RP_STATUS},
    [P_DELETE] = {RP_N, RP_STATUS},
    [P_PREFETCH] = {RP_HITS},
    [P_READ] = {RP_N, RP_SPANS, RP_LAYOUTS},
    [P_LOOKUP] = {RP_LOOKUP},
    [P_MEMCHECK] = {RP_MEMCHECK, RP_TEXT},
    [P_STATS] = {RP_STATS},
    [P_TIER_STATS] = {RP_TIER_STATS},
    [P_TIER_KEYS] = {RP_TIER_KEYS},
    [P_TIER_NODES] = {RP_NODES},
};
static const uint8_t refused_fields[] = {RP_TEXT, RP_END};

/* The fields of the reply to type (P_REFUSED: the refusal), or NULL. */
static const uint8_t *rep_fields_of(uint16_t type) {
  return type == P_REFUSED ? refused_fields : wire_is_request(type) ? rep_fields[type] : NULL;
}

/* A negative result ends the payload, but for MEMCHECK's counts and text. */
static bool rep_field_sent(uint8_t f, int32_t result) {
  return result >= 0 || f == RP_TEXT || f == RP_MEMCHECK;
}

/* TIER_NODES: the entries a reply to a request of cap sends. */
static uint32_t nodes_count(uint32_t nodes, uint32_t cap) {
  return nodes < cap ? nodes : cap;
}

/* ---- READ's layouts ---------------------------------------------------- */

/* Whether two layouts are alike on the wire: every field sent, the unused
 * dims and tensors too (a field-wise compare: a struct's padding is not
 * sent). */
static bool layout_alike(const kva_layout *a, const kva_layout *b) {
  if (a->ntensors != b->ntensors) return false;
  for (int t = 0; t < 4; t++) {
    if (a->tensor[t].ndim != b->tensor[t].ndim || a->tensor[t].dtype != b->tensor[t].dtype)
      return false;
    for (int d = 0; d < 6; d++)
      if (a->tensor[t].shape[d] != b->tensor[t].shape[d]) return false;
  }
  return true;
}

/* Whether a READ reply sends runs of layouts: asked for, and some span
 * has bytes (a read that failed has none: no layout to send). */
static bool layouts_sent(const proto_rep *r) {
  if (!r->layouts_asked || !r->spans) return false;
  for (uint32_t i = 0; i < r->n; i++)
    if (r->spans[i].len) return true;
  return false;
}

/* Keys from i on that share keys[i]'s layout (1 at least). */
static uint32_t run_length(const proto_rep *r, uint32_t i) {
  uint32_t count = 1;
  while (i + count < r->n && layout_alike(&r->layouts[i], &r->layouts[i + count])) count++;
  return count;
}

static uint32_t layout_runs(const proto_rep *r) {
  uint32_t runs = 0;
  if (layouts_sent(r))
    for (uint32_t i = 0; i < r->n; i += run_length(r, i)) runs++;
  return runs;
}

static bool layouts_size(const proto_rep *r, size_t *len) {
  *len = 0;
  if (!r->layouts_asked) return true;
  if (layouts_sent(r) && !r->layouts) return false;
  *len = 4 + (size_t)layout_runs(r) * RUN_BYTES;
  return true;
}

static void wr_layouts(wire_wr *w, const proto_rep *r) {
  if (!r->layouts_asked) return;
  wire_wr_u32(w, layout_runs(r));
  if (!layouts_sent(r)) return;
  for (uint32_t i = 0, count; i < r->n; i += count) {
    count = run_length(r, i);
    wire_wr_u32(w, count);
    wire_wr_layout(w, &r->layouts[i]);
  }
}

/* ---- replies ------------------------------------------------------------- */

/* Bytes of field f of r into *len; false when r cannot be encoded. */
static bool rep_field_size(uint8_t f, const proto_rep *r, size_t *len) {
  switch (f) {
  case RP_N:
    *len = 4;
    return r->n <= PROTO_MAX_KEYS;
  case RP_STATUS:
    *len = (size_t)r->n * 4;
    return r->status || !r->n;
  case RP_SPANS:
    *len = (size_t)r->n * SPAN_BYTES;
    return r->spans || !r->n;
  case RP_LAYOUTS:
    return layouts_size(r, len);
  case RP_HITS:
    *len = 8;
    return true;
  case RP_WELCOME:
    *len = 16;
    return true;
  case RP_LOOKUP:
    if (!r->lookup || r->lookup->ntiers > 8) return false;
    *len = 12 + (size_t)r->lookup->ntiers * TIER_HITS_BYTES;
    return true;
  case RP_STATS:
    *len = STATS_BYTES;
    return r->stats != NULL;
  case RP_TIER_STATS:
    *len = TIER_STATS_BYTES;
    return r->tier_stats != NULL;
  case RP_TIER_KEYS:
    *len = TIER_KEYS_U64 * 8;
    return r->tier_keys != NULL;
  case RP_NODES: {
    uint32_t count = nodes_count(r->nodes_n, r->nodes_cap);
    *len = NODES_HEAD_BYTES + (size_t)count * NODE_BYTES;
    return r->nodes_cap <= PROTO_MAX_NODES && (r->nodes || !count);
  }
  case RP_TEXT:
    *len = 4 + (size_t)r->text_len;
    return r->text_len <= PROTO_MAX_TEXT && (r->text || !r->text_len);
  case RP_MEMCHECK:
    *len = MEMCHECK_U64 * 8;
    return true;
  }
  return false;
}

size_t proto_rep_size(const proto_rep *r) {
  const uint8_t *fields = rep_fields_of(r->type);
  if (!fields || (r->type == P_REFUSED && r->result >= 0)) return 0;
  size_t len = 4;
  for (const uint8_t *f = fields; *f != RP_END; f++) {
    size_t b;
    if (!rep_field_sent(*f, r->result)) continue;
    if (!rep_field_size(*f, r, &b)) return 0;
    len += b;
  }
  return PROTO_HDR_BYTES + len;
}

static void wr_lookup(wire_wr *w, const kva_tier_hits *t) {
  wire_wr_u64(w, t->total);
  wire_wr_u32(w, t->ntiers);
  for (uint32_t i = 0; i < t->ntiers; i++) {
    wire_wr_bytes(w, t->tier[i].name, PROTO_TIER_BYTES);
    wire_wr_u64(w, t->tier[i].hits);
  }
}

static void wr_stats(wire_wr *w, const kva_storage_stats *s) {
  wr_u64s(w, s, STATS_U64);
  wire_wr_u32(w, (uint32_t)s->l1_pinned);
  wire_wr_u32(w, (uint32_t)s->l1_numa_node);
  wire_wr_u64(w, s->l2_skipped_slow_keys);
}

static void wr_tier_stats(wire_wr *w, const kva_l2_tier_stats *s) {
  wr_u64s(w, s, TIER_STATS_U64);
  wire_wr_u32(w, (uint32_t)s->bypassed);
  wr_u64s(w, &s->adapter, L2_STATS_U64);
  wr_u64s(w, &s->skipped_slow_keys, TIER_PLAN_U64);
}

static void wr_nodes(wire_wr *w, const proto_rep *r) {
  uint32_t count = nodes_count(r->nodes_n, r->nodes_cap);
  wire_wr_u32(w, r->nodes_n);
  wire_wr_u32(w, count);
  wr_f64(w, r->map_age_s);
  for (uint32_t i = 0; i < count; i++) {
    const kva_l2_node_stats *n = &r->nodes[i];
    wire_wr_bytes(w, n->addr, PROTO_NODE_ADDR_BYTES);
    wire_wr_u32(w, (uint32_t)n->state);
    wire_wr_u32(w, n->slots);
    wr_f64(w, n->failed_s);
    wire_wr_u64(w, n->outages);
    wire_wr_u64(w, n->failures);
    wire_wr_u64(w, n->failed_cmds);
  }
}

static void rep_field_put(wire_wr *w, uint8_t f, const proto_rep *r) {
  switch (f) {
  case RP_N:
    wire_wr_u32(w, r->n);
    break;
  case RP_STATUS:
    for (uint32_t i = 0; i < r->n; i++) wire_wr_u32(w, (uint32_t)r->status[i]);
    break;
  case RP_SPANS:
    for (uint32_t i = 0; i < r->n; i++) {
      wire_wr_u64(w, r->spans[i].off);
      wire_wr_u64(w, r->spans[i].len);
    }
    break;
  case RP_LAYOUTS:
    wr_layouts(w, r);
    break;
  case RP_HITS:
    wire_wr_u64(w, r->hits);
    break;
  case RP_WELCOME:
    wire_wr_u64(w, r->pool_bytes);
    wire_wr_u32(w, r->pid);
    wire_wr_u32(w, r->max_keys);
    break;
  case RP_LOOKUP:
    wr_lookup(w, r->lookup);
    break;
  case RP_STATS:
    wr_stats(w, r->stats);
    break;
  case RP_TIER_STATS:
    wr_tier_stats(w, r->tier_stats);
    break;
  case RP_TIER_KEYS:
    wr_u64s(w, r->tier_keys, TIER_KEYS_U64);
    break;
  case RP_NODES:
    wr_nodes(w, r);
    break;
  case RP_TEXT:
    wire_wr_u32(w, r->text_len);
    wire_wr_bytes(w, r->text, r->text_len);
    break;
  case RP_MEMCHECK: {
    kva_memcheck_report none = {0};
    wr_u64s(w, r->memcheck ? r->memcheck : &none, MEMCHECK_U64);
    break;
  }
  }
}

size_t proto_rep_put(uint8_t *buf, size_t cap, const proto_rep *r, uint64_t id) {
  size_t size = proto_rep_size(r);
  if (!size || size > cap) return 0;
  uint16_t type = r->type == P_REFUSED ? P_REFUSED : (uint16_t)(r->type | P_REPLY);
  proto_hdr_put(buf, type, (uint32_t)(size - PROTO_HDR_BYTES), id);
  wire_wr w = {buf + PROTO_HDR_BYTES};
  wire_wr_u32(&w, (uint32_t)r->result);
  for (const uint8_t *f = rep_fields_of(r->type); *f != RP_END; f++)
    if (rep_field_sent(*f, r->result)) rep_field_put(&w, *f, r);
  return size;
}

/* A reply payload being decoded into r, checked against the request it
 * answers (r->n) and the pool its spans point into. */
typedef struct rep_dec {
  wire_dec d;
  proto_rep *r;
  uint64_t pool_bytes;
} rep_dec;

static int rep_n_get(rep_dec *q) {
  uint32_t n = wire_rd_u32(&q->d.in);
  if (q->d.in.short_read) return wire_dec_refuse(&q->d, "truncated");
  if (n != q->r->n) return wire_dec_refuse(&q->d, "%u entries for %u keys", n, q->r->n);
  return PROTO_OK;
}

static int rep_status_get(rep_dec *q) {
  const uint8_t *b = wire_rd_take(&q->d.in, (size_t)q->r->n * 4);
  if (q->d.in.short_read) return wire_dec_refuse(&q->d, "truncated");
  for (uint32_t i = 0; i < q->r->n; i++) q->r->status[i] = (int32_t)wire_get_u32(b + 4 * (size_t)i);
  return PROTO_OK;
}

/* Inside a pool of pool bytes, without overflow; no bytes at offset 0. */
static bool span_in_pool(uint64_t off, uint64_t len, uint64_t pool) {
  return len ? off <= pool && len <= pool - off : off == 0;
}

static int rep_spans_get(rep_dec *q) {
  const uint8_t *b = wire_rd_take(&q->d.in, (size_t)q->r->n * SPAN_BYTES);
  if (q->d.in.short_read) return wire_dec_refuse(&q->d, "truncated");
  for (uint32_t i = 0; i < q->r->n; i++, b += SPAN_BYTES) {
    uint64_t off = wire_get_u64(b), len = wire_get_u64(b + 8);
    if (!span_in_pool(off, len, q->pool_bytes))
      return wire_dec_refuse(
          &q->d, "span %u (offset %llu, %llu bytes) outside a pool of %llu bytes", i,
          (unsigned long long)off, (unsigned long long)len, (unsigned long long)q->pool_bytes);
    q->r->spans[i] = (proto_span){off, len};
  }
  return PROTO_OK;
}

/* READ without runs: no key has bytes; its layouts are zeroed. */
static int rep_no_layouts_get(rep_dec *q) {
  proto_rep *r = q->r;
  for (uint32_t i = 0; i < r->n; i++)
    if (r->spans[i].len) return wire_dec_refuse(&q->d, "span %u has bytes and no layout", i);
  if (r->layouts && r->n) memset(r->layouts, 0, (size_t)r->n * sizeof(*r->layouts));
  return PROTO_OK;
}

/* Run j of READ's layouts, for the keys from *at on (at most to n, *at
 * moved past them), each span's len its layout's bytes; into r->layouts
 * (NULL: checked, not kept). l holds run j - 1's layout, then j's. */
static int rep_run_get(rep_dec *q, uint32_t j, uint32_t *at, kva_layout *l) {
  wire_rd *in = &q->d.in;
  proto_rep *r = q->r;
  uint32_t count = wire_rd_u32(in);
  kva_layout prev = *l;
  memset(l, 0, sizeof(*l)); /* padding included: a caller may compare bytes */
  wire_rd_layout(in, l);
  if (in->short_read) return wire_dec_refuse(&q->d, "truncated");
  if (count == 0 || count > r->n - *at)
    return wire_dec_refuse(&q->d, "run %u of %u keys (%u keys left)", j, count, r->n - *at);
  uint64_t bytes = kva_layout_bytes(l);
  if (!bytes) return wire_dec_refuse(&q->d, "run %u's layout is invalid", j);
  if (j && layout_alike(&prev, l))
    return wire_dec_refuse(&q->d, "runs %u and %u of one layout", j - 1, j);
  for (uint32_t i = *at; i < *at + count; i++) {
    if (r->spans[i].len != bytes)
      return wire_dec_refuse(&q->d, "span %u of %llu bytes, its layout's %llu", i,
                             (unsigned long long)r->spans[i].len, (unsigned long long)bytes);
    if (r->layouts) r->layouts[i] = *l;
  }
  *at += count;
  return PROTO_OK;
}

/* READ's layouts, when its request asked for them (after the spans). */
static int rep_layouts_get(rep_dec *q) {
  wire_rd *in = &q->d.in;
  proto_rep *r = q->r;
  if (!r->layouts_asked) return PROTO_OK;
  uint32_t runs = wire_rd_u32(in);
  if (in->short_read) return wire_dec_refuse(&q->d, "truncated");
  if (runs == 0) return rep_no_layouts_get(q);
  if (runs > r->n) return wire_dec_refuse(&q->d, "%u layout runs for %u keys", runs, r->n);
  if (in->left < (size_t)runs * RUN_BYTES) return wire_dec_refuse(&q->d, "truncated");
  kva_layout l;
  memset(&l, 0, sizeof(l));
  uint32_t at = 0;
  for (uint32_t j = 0; j < runs; j++)
    if (rep_run_get(q, j, &at, &l) != PROTO_OK) return PROTO_EFRAME;
  if (at != r->n) return wire_dec_refuse(&q->d, "layout runs of %u keys for %u", at, r->n);
  return PROTO_OK;
}

static int rep_welcome_get(rep_dec *q) {
  wire_rd *in = &q->d.in;
  uint64_t pool_bytes = wire_rd_u64(in);
  uint32_t pid = wire_rd_u32(in), max_keys = wire_rd_u32(in);
  if (in->short_read) return wire_dec_refuse(&q->d, "truncated");
  q->r->pool_bytes = pool_bytes;
  q->r->pid = pid;
  q->r->max_keys = max_keys;
  return PROTO_OK;
}

static int rep_lookup_get(rep_dec *q) {
  wire_rd *in = &q->d.in;
  kva_tier_hits t;
  memset(&t, 0, sizeof t);
  t.total = wire_rd_u64(in);
  t.ntiers = wire_rd_u32(in);
  if (in->short_read) return wire_dec_refuse(&q->d, "truncated");
  if (t.ntiers > 8) return wire_dec_refuse(&q->d, "%u tiers (at most 8)", t.ntiers);
  for (uint32_t i = 0; i < t.ntiers; i++) {
    wire_rd_bytes(in, t.tier[i].name, PROTO_TIER_BYTES);
    t.tier[i].hits = wire_rd_u64(in);
    if (in->short_read) return wire_dec_refuse(&q->d, "truncated");
    if (!memchr(t.tier[i].name, '\0', PROTO_TIER_BYTES))
      return wire_dec_refuse(&q->d, "tier %u's name not NUL-terminated", i);
  }
  *q->r->lookup = t;
  return PROTO_OK;
}

static int rep_stats_get(rep_dec *q) {
  wire_rd *in = &q->d.in;
  kva_storage_stats *s = q->r->stats;
  if (in->left < STATS_BYTES) return wire_dec_refuse(&q->d, "truncated");
  rd_u64s(in, s, STATS_U64);
  s->l1_pinned = (int32_t)wire_rd_u32(in);
  s->l1_numa_node = (int32_t)wire_rd_u32(in);
  s->l2_skipped_slow_keys = wire_rd_u64(in);
  return PROTO_OK;
}

static int rep_tier_stats_get(rep_dec *q) {
  wire_rd *in = &q->d.in;
  kva_l2_tier_stats *s = q->r->tier_stats;
  if (in->left < TIER_STATS_BYTES) return wire_dec_refuse(&q->d, "truncated");
  rd_u64s(in, s, TIER_STATS_U64);
  s->bypassed = (int32_t)wire_rd_u32(in);
  rd_u64s(in, &s->adapter, L2_STATS_U64);
  rd_u64s(in, &s->skipped_slow_keys, TIER_PLAN_U64);
  if (!isfinite(s->bytes_per_s) || !isfinite(s->latency_s) || s->bytes_per_s < 0 ||
      s->latency_s < 0)
    return wire_dec_refuse(&q->d, "a tier's rate or latency that is no number");
  return PROTO_OK;
}

static int rep_tier_keys_get(rep_dec *q) {
  wire_rd *in = &q->d.in;
  if (in->left < TIER_KEYS_U64 * 8) return wire_dec_refuse(&q->d, "truncated");
  rd_u64s(in, q->r->tier_keys, TIER_KEYS_U64);
  return PROTO_OK;
}

/* Node i of a TIER_NODES reply, checked; into out. */
static int rep_node_get(rep_dec *q, uint32_t i, kva_l2_node_stats *out) {
  wire_rd *in = &q->d.in;
  kva_l2_node_stats n;
  wire_rd_bytes(in, n.addr, PROTO_NODE_ADDR_BYTES);
  n.state = (int32_t)wire_rd_u32(in);
  n.slots = wire_rd_u32(in);
  n.failed_s = rd_f64(in);
  n.outages = wire_rd_u64(in);
  n.failures = wire_rd_u64(in);
  n.failed_cmds = wire_rd_u64(in);
  if (in->short_read) return wire_dec_refuse(&q->d, "truncated");
  if (!memchr(n.addr, '\0', PROTO_NODE_ADDR_BYTES))
    return wire_dec_refuse(&q->d, "node %u's address not NUL-terminated", i);
  if (n.state < KVA_L2_NODE_OK || n.state > KVA_L2_NODE_BYPASSED)
    return wire_dec_refuse(&q->d, "node %u's state %d", i, n.state);
  if (!isfinite(n.failed_s) || n.failed_s < 0)
    return wire_dec_refuse(&q->d, "node %u's failed_s that is no number", i);
  if (out) *out = n;
  return PROTO_OK;
}

/* The entries go to r->nodes (NULL: checked, not kept); their count must
 * be what a request of r->nodes_cap gets. */
static int rep_nodes_get(rep_dec *q) {
  wire_rd *in = &q->d.in;
  proto_rep *r = q->r;
  uint32_t nodes = wire_rd_u32(in), count = wire_rd_u32(in);
  double age = rd_f64(in);
  if (in->short_read) return wire_dec_refuse(&q->d, "truncated");
  uint32_t cap = nodes_count(r->nodes_cap, PROTO_MAX_NODES);
  if (count != nodes_count(nodes, cap))
    return wire_dec_refuse(&q->d, "%u entries for %u nodes and room for %u", count, nodes, cap);
  if (!isfinite(age) || (age < 0 && age != -1))
    return wire_dec_refuse(&q->d, "a map age that is no number");
  if (in->left < (size_t)count * NODE_BYTES) return wire_dec_refuse(&q->d, "truncated");
  for (uint32_t i = 0; i < count; i++)
    if (rep_node_get(q, i, r->nodes ? &r->nodes[i] : NULL) != PROTO_OK) return PROTO_EFRAME;
  r->nodes_n = nodes;
  r->map_age_s = age;
  return PROTO_OK;
}

static int rep_memcheck_get(rep_dec *q) {
  wire_rd *in = &q->d.in;
  kva_memcheck_report c;
  if (in->left < MEMCHECK_U64 * 8) return wire_dec_refuse(&q->d, "truncated");
  rd_u64s(in, &c, MEMCHECK_U64);
  if (q->r->memcheck) *q->r->memcheck = c;
  return PROTO_OK;
}

/* The text, cut to the caller's text_cap - 1 bytes and terminated;
 * text_len says how long it was. */
static int rep_text_get(rep_dec *q) {
  wire_rd *in = &q->d.in;
  proto_rep *r = q->r;
  uint32_t len = wire_rd_u32(in);
  if (in->short_read) return wire_dec_refuse(&q->d, "truncated");
  if (len > PROTO_MAX_TEXT)
    return wire_dec_refuse(&q->d, "text of %u bytes (at most %u)", len, PROTO_MAX_TEXT);
  const uint8_t *b = wire_rd_take(in, len);
  if (in->short_read) return wire_dec_refuse(&q->d, "truncated");
  if (len && memchr(b, '\0', len)) return wire_dec_refuse(&q->d, "NUL in the text");
  r->text_len = len;
  if (r->text && r->text_cap) {
    size_t k = len < r->text_cap - 1 ? len : r->text_cap - 1;
    if (k) memcpy(r->text, b, k);
    r->text[k] = '\0';
  }
  return PROTO_OK;
}

static int rep_field_get(rep_dec *q, uint8_t f) {
  switch (f) {
  case RP_N:
    return rep_n_get(q);
  case RP_STATUS:
    return rep_status_get(q);
  case RP_SPANS:
    return rep_spans_get(q);
  case RP_LAYOUTS:
    return rep_layouts_get(q);
  case RP_HITS:
    q->r->hits = wire_rd_u64(&q->d.in);
    return q->d.in.short_read ? wire_dec_refuse(&q->d, "truncated") : PROTO_OK;
  case RP_WELCOME:
    return rep_welcome_get(q);
  case RP_LOOKUP:
    return rep_lookup_get(q);
  case RP_STATS:
    return rep_stats_get(q);
  case RP_TIER_STATS:
    return rep_tier_stats_get(q);
  case RP_TIER_KEYS:
    return rep_tier_keys_get(q);
  case RP_NODES:
    return rep_nodes_get(q);
  case RP_TEXT:
    return rep_text_get(q);
  case RP_MEMCHECK:
    return rep_memcheck_get(q);
  }
  return wire_dec_refuse(&q->d, "field %u", f); /* not reached: rep_fields lists these */
}

int proto_rep_get(const proto_hdr *h, const uint8_t *p, uint64_t pool_bytes, proto_rep *r,
                  char *why, size_t whylen) {
  if (!wire_is_request(r->type))
    return wire_refuse(PROTO_EFRAME, why, whylen, "a reply to type 0x%04x, which is no request",
                       r->type);
  if (h->type != P_REFUSED && h->type != (r->type | P_REPLY))
    return wire_refuse(PROTO_EFRAME, why, whylen, "frame type 0x%04x is no reply to %s", h->type,
                       wire_type_name(r->type));
  uint16_t type = h->type == P_REFUSED ? P_REFUSED : r->type;
  rep_dec q = {{{p, h->len, false}, type, "reply", why, whylen}, r, pool_bytes};
  int32_t result = (int32_t)wire_rd_u32(&q.d.in);
  if (q.d.in.short_read) return wire_dec_refuse(&q.d, "truncated");
  if (type == P_REFUSED && result >= 0) return wire_dec_refuse(&q.d, "code %d is no error", result);
  for (const uint8_t *f = rep_fields_of(type); *f != RP_END; f++)
    if (rep_field_sent(*f, result) && rep_field_get(&q, *f) != PROTO_OK) return PROTO_EFRAME;
  if (q.d.in.left) return wire_dec_refuse(&q.d, "%zu trailing bytes", q.d.in.left);
  r->type = type;
  r->result = result;
  return PROTO_OK;
}
