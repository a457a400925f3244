/*
 * protocol_samples.c — frames of every type for the protocol's tests and
 * seeds (protocol_samples.h).
 */
#include "tests/wire/protocol_samples.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

kva_key sample_key(uint32_t i) {
  kva_key k;
  memset(&k, 0x5a, sizeof k); /* junk past the model's NUL and past hash_len */
  snprintf(k.model, sizeof k.model, "model-%u", i);
  k.kv_rank = 0x01020304u + i;
  k.group = 0xa0b0c0d0u ^ i;
  k.hash_len = (uint8_t)(1 + i % 32);
  for (uint32_t b = 0; b < k.hash_len; b++) k.hash[b] = (uint8_t)(i * 31 + b);
  return k;
}

kva_layout sample_layout(void) {
  kva_layout l;
  memset(&l, 0x77, sizeof l); /* junk in the dims and tensors not used */
  l.ntensors = 2;
  l.tensor[0].ndim = 3;
  l.tensor[0].dtype = KVA_DT_BF16;
  l.tensor[0].shape[0] = 4;
  l.tensor[0].shape[1] = 2;
  l.tensor[0].shape[2] = 16;
  l.tensor[1].ndim = 1;
  l.tensor[1].dtype = KVA_DT_F32;
  l.tensor[1].shape[0] = 3;
  return l;
}

bool sample_layout_alike(const kva_layout *a, const kva_layout *b) {
  if (a->ntensors != b->ntensors) return false;
  for (int t = 0; t < 4; t++) {
    if (a->tensor[t].ndim != b->tensor[t].ndim || a->tensor[t].dtype != b->tensor[t].dtype)
      return false;
    for (int d = 0; d < 6; d++)
      if (a->tensor[t].shape[d] != b->tensor[t].shape[d]) return false;
  }
  return true;
}

bool sample_sends_n(uint16_t t) {
  switch (t) {
  case P_RESERVE_WRITE:
  case P_FINISH_WRITE:
  case P_ABORT_WRITE:
  case P_DELETE:
  case P_TOUCH:
  case P_PREFETCH:
  case P_READ:
  case P_FINISH_READ:
  case P_LOOKUP:
  case P_UNPIN:
    return true;
  }
  return false;
}

/* The fields each request type sends (protocol.h), set to values that
 * differ from one another and from 0. */
proto_req sample_req(uint16_t t, const kva_key *keys, uint32_t n) {
  proto_req r = {.type = t};
  if (sample_sends_n(t)) {
    r.n = n;
    r.keys = keys;
  }
  switch (t) {
  case P_HELLO:
    r.pid = 4242;
    break;
  case P_RESERVE_WRITE:
    r.mode = KVA_WRITE_ALL;
    r.layout = sample_layout();
    break;
  case P_DELETE:
  case P_CLEAR:
  case P_LOOKUP:
  case P_FREEZE:
    r.flag = 1;
    break;
  case P_PREFETCH:
    r.readers = 128;
    r.flag = 1;
    r.layout = sample_layout();
    break;
  case P_FINISH_READ:
    r.readers = 3;
    break;
  case P_READ:
    r.flag = PROTO_READ_LAYOUTS;
    break;
  case P_MEMCHECK:
    r.report_len = PROTO_MAX_TEXT;
    r.flag = 1;
    break;
  case P_FLUSH:
    r.timeout_ms = -12345;
    break;
  case P_SET_BYPASS:
  case P_BYPASSED:
  case P_L2_CONTAINS:
  case P_TIER_STATS:
  case P_TIER_KEYS:
  case P_TIER_NODES:
    memset(r.tier, 'j', sizeof r.tier); /* junk past the NUL */
    memcpy(r.tier, "disk-0", 7);
    r.flag = t == P_SET_BYPASS;
    if (t == P_L2_CONTAINS) r.keys = keys;
    if (t == P_TIER_NODES) r.cap = SAMPLE_NODES_CAP;
    break;
  }
  return r;
}

void sample_stats_fields(kva_storage_stats *s, uint64_t *f[SAMPLE_STATS_U64]) {
  uint64_t *all[SAMPLE_STATS_U64] = {
      &s->l1_capacity_bytes,
      &s->l1_used_bytes,
      &s->l1_objects,
      &s->l1_write_locked,
      &s->l1_read_locked,
      &s->l1_temporary,
      &s->reserved,
      &s->finished,
      &s->hits,
      &s->misses,
      &s->evicted,
      &s->evicted_on_demand,
      &s->out_of_memory,
      &s->l2_store_tasks,
      &s->l2_stored_keys,
      &s->l2_store_failures,
      &s->l2_store_skipped,
      &s->l2_prefetches,
      &s->l2_loaded_keys,
      &s->l2_load_failures,
  };
  memcpy(f, all, sizeof all);
}

void sample_tier_stats_fields(kva_l2_tier_stats *s, uint64_t *f[SAMPLE_TIER_STATS_U64]) {
  kva_l2_stats *a = &s->adapter;
  uint64_t *all[SAMPLE_TIER_STATS_U64] = {
      &s->stored_keys,    &s->stored_bytes,    &s->loaded_keys,
      &s->loaded_bytes,   &a->objects,         &a->bytes,
      &a->capacity_bytes, &a->keys_locked,     &a->stores,
      &a->store_failures, &a->loads,           &a->load_failures,
      &a->lookups,        &a->evictions,       &s->skipped_slow_keys,
      &s->queued_bytes,   &s->lookups_skipped,
  };
  memcpy(f, all, sizeof all);
}

void sample_tier_keys_fields(kva_l2_tier_keys *k, uint64_t *f[SAMPLE_TIER_KEYS_U64]) {
  uint64_t *all[SAMPLE_TIER_KEYS_U64] = {
      &k->written, &k->stored,     &k->coalesced,         &k->bypassed,
      &k->frozen,  &k->gone,       &k->unavailable,       &k->failed,
      &k->dropped, &k->absent_now, &k->absent_overflowed,
  };
  memcpy(f, all, sizeof all);
}

/* Node i of a tier: "redis-<i>:700<i>" (junk past the NUL), each state in
 * turn, distinctive counts. */
static void sample_node(kva_l2_node_stats *n, uint32_t i) {
  memset(n->addr, 'a', sizeof n->addr);
  snprintf(n->addr, 32, "redis-%u:700%u", i, i);
  n->state = (int)(i % 3);
  n->slots = 5461u + i;
  n->failed_s = i ? 1.5 * i : 0;
  n->outages = UINT64_C(0x0100000000000000) + i;
  n->failures = i * 7u;
  n->failed_cmds = UINT64_C(0x00ff00ff00ff00ff) ^ i;
}

/* Spans: i * 4 KiB, one empty span (1), the last one ending at the pool's
 * end. */
static proto_span sample_span(uint32_t i, uint32_t n) {
  if (i == 1) return (proto_span){0, 0};
  if (i == n - 1 && n > 2) return (proto_span){SAMPLE_POOL_BYTES - 100, 100};
  return (proto_span){(uint64_t)i << 12, 4096 + i};
}

static void sample_lookup(kva_tier_hits *t) {
  memset(t, 0, sizeof *t);
  t->ntiers = 8;
  for (uint32_t i = 0; i < 8; i++) {
    memset(t->tier[i].name, 'n', sizeof t->tier[i].name); /* junk past the NUL */
    snprintf(t->tier[i].name, 16, i ? "tier-%u" : "L1", i);
    t->tier[i].hits = (size_t)1 << (i * 4);
    t->total += t->tier[i].hits;
  }
}

static void sample_stats(kva_storage_stats *s, kva_l2_tier_stats *ts) {
  uint64_t *f[SAMPLE_STATS_U64], *g[SAMPLE_TIER_STATS_U64];
  sample_stats_fields(s, f);
  for (uint32_t i = 0; i < SAMPLE_STATS_U64; i++) *f[i] = UINT64_C(0x0101010101010101) * (i + 1);
  s->l1_pinned = 1;
  s->l1_numa_node = -1;
  s->l2_skipped_slow_keys = UINT64_C(0x2020202020202020);
  sample_tier_stats_fields(ts, g);
  for (uint32_t i = 0; i < SAMPLE_TIER_STATS_U64; i++) *g[i] = UINT64_C(0x1000000000000001) + i;
  ts->bypassed = 1;
  ts->bytes_per_s = 1.5e9;
  ts->latency_s = 0.25e-3;
}

/* The pointers of s->r on s's storage. */
static void sample_point(sample_rep *s) {
  s->r.status = s->status;
  s->r.spans = s->spans;
  s->r.layouts = s->layouts;
  s->r.lookup = &s->lookup;
  s->r.stats = &s->stats;
  s->r.tier_stats = &s->tier_stats;
  s->r.tier_keys = &s->tier_keys;
  s->r.nodes = s->nodes;
  s->r.nodes_cap = SAMPLE_NODES_CAP;
  s->r.memcheck = &s->memcheck;
  s->r.text = s->text;
}

void sample_rep_fill(sample_rep *s, uint16_t type, uint32_t n, int32_t result, uint32_t text_len) {
  memset(s, 0, sizeof *s);
  s->r = (proto_rep){.type = type, .result = result, .n = n, .hits = 77, .text_len = text_len};
  sample_point(s);
  s->r.pool_bytes = SAMPLE_POOL_BYTES;
  s->r.pid = 999;
  s->r.max_keys = PROTO_MAX_KEYS;
  for (uint32_t i = 0; i < n && i < SAMPLE_MAX_N; i++) {
    s->status[i] = i == 2 ? KVA_EINVAL : (int32_t)(i % 7);
    s->spans[i] = sample_span(i, n);
  }
  sample_lookup(&s->lookup);
  sample_stats(&s->stats, &s->tier_stats);
  uint64_t *k[SAMPLE_TIER_KEYS_U64];
  sample_tier_keys_fields(&s->tier_keys, k);
  for (uint32_t i = 0; i < SAMPLE_TIER_KEYS_U64; i++) *k[i] = UINT64_C(0x3000000000000003) + i;
  for (uint32_t i = 0; i < SAMPLE_NODES_CAP; i++) sample_node(&s->nodes[i], i);
  s->r.nodes_n = SAMPLE_NODES_CAP + 1; /* one more than asked for */
  s->r.map_age_s = 0.125;
  s->memcheck = (kva_memcheck_report){1, 0x202, 0x30303, 0x4040404, UINT64_C(0x5050505050505050)};
  for (uint32_t i = 0; i < text_len && i < PROTO_MAX_TEXT; i++) s->text[i] = (char)('a' + i % 26);
}

/* Layout v of three: sample_layout, one of a single [7] u8 tensor (junk
 * past it), and sample_layout with another first dimension. */
static kva_layout sample_layout_variant(uint32_t v) {
  kva_layout l = sample_layout();
  if (v == 1) {
    l.ntensors = 1;
    l.tensor[0].ndim = 1;
    l.tensor[0].dtype = KVA_DT_U8;
    l.tensor[0].shape[0] = 7;
  } else if (v == 2) {
    l.tensor[0].shape[0] = 5;
  }
  return l;
}

void sample_rep_read_layouts(sample_rep *s, uint32_t n, int32_t result) {
  sample_rep_fill(s, P_READ, n, result, 0);
  s->r.layouts_asked = 1;
  for (uint32_t i = 0; i < n && i < SAMPLE_MAX_N; i++) {
    s->layouts[i] = sample_layout_variant((i / 2) % 3);
    s->spans[i] = (proto_span){(uint64_t)i << 12, kva_layout_bytes(&s->layouts[i])};
  }
}

void sample_rep_expect(sample_rep *s, uint16_t type, uint32_t n) {
  memset(s, 0xee, sizeof *s);
  s->r.type = type;
  s->r.n = n;
  s->r.layouts_asked = 0;
  s->r.text_cap = sizeof s->text;
  sample_point(s);
}

/* ---- random ------------------------------------------------------------ */

uint64_t sample_rand(sample_rng *g) {
  uint64_t z = (g->state += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

uint32_t sample_below(sample_rng *g, uint32_t n) {
  return (uint32_t)(sample_rand(g) % n);
}

static void rand_bytes(sample_rng *g, void *dst, size_t n) {
  for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)sample_rand(g);
}

/* len characters, none NUL or '@', then a NUL, then junk up to cap. */
static void rand_name(sample_rng *g, char *dst, size_t cap, size_t len) {
  static const char chars[] = "abcdefghijklmnopqrstuvwxyz0123456789._-/ ";
  rand_bytes(g, dst, cap);
  for (size_t i = 0; i < len; i++) dst[i] = chars[sample_below(g, sizeof chars - 1)];
  dst[len] = '\0';
}

kva_key sample_rand_key(sample_rng *g) {
  kva_key k;
  rand_bytes(g, &k, sizeof k);
  rand_name(g, k.model, sizeof k.model, 1 + sample_below(g, sizeof k.model - 1));
  k.hash_len = (uint8_t)(1 + sample_below(g, 32));
  return k;
}

kva_layout sample_rand_layout(sample_rng *g) {
  kva_layout l;
  rand_bytes(g, &l, sizeof l); /* junk past ntensors and past each ndim */
  l.ntensors = 1 + sample_below(g, 4);
  for (uint32_t t = 0; t < l.ntensors; t++) {
    l.tensor[t].ndim = sample_below(g, 7);
    l.tensor[t].dtype = (kva_dtype)sample_below(g, KVA_DT_FP8_E5M2 + 1);
    for (uint32_t d = 0; d < l.tensor[t].ndim; d++) l.tensor[t].shape[d] = 1 + sample_below(g, 64);
  }
  return l;
}

/* Random values in each field sample_req set (its valid range). */
proto_req sample_rand_req(sample_rng *g, kva_key *keys) {
  uint16_t t = (uint16_t)(P_HELLO + sample_below(g, P_TYPE_END - P_HELLO));
  uint32_t n = sample_below(g, 4) ? 1 + sample_below(g, SAMPLE_MAX_N) : 1;
  for (uint32_t i = 0; i < n; i++) keys[i] = sample_rand_key(g);
  proto_req r = sample_req(t, keys, n);
  if (r.mode) r.mode = sample_below(g, KVA_WRITE_ALL + 1);
  if (r.flag) r.flag = sample_below(g, 2);
  if (r.readers) r.readers = 1 + sample_below(g, 128);
  if (r.pid) r.pid = (uint32_t)sample_rand(g);
  if (r.report_len) r.report_len = sample_below(g, PROTO_MAX_TEXT + 1);
  if (r.timeout_ms) r.timeout_ms = (int32_t)sample_rand(g);
  if (r.cap) r.cap = sample_below(g, PROTO_MAX_NODES + 1);
  if (r.layout.ntensors) r.layout = sample_rand_layout(g);
  if (t == P_PREFETCH && !r.flag) rand_bytes(g, &r.layout, sizeof r.layout); /* not checked */
  if (r.tier[0]) rand_name(g, r.tier, sizeof r.tier, sample_below(g, sizeof r.tier));
  return r;
}

static void rand_lookup(sample_rng *g, kva_tier_hits *t) {
  memset(t, 0, sizeof *t);
  t->total = sample_rand(g);
  t->ntiers = sample_below(g, 9);
  for (uint32_t i = 0; i < t->ntiers; i++) {
    rand_name(g, t->tier[i].name, sizeof t->tier[i].name, sample_below(g, 32));
    t->tier[i].hits = sample_rand(g);
  }
}

/* 0 to 2 * SAMPLE_NODES_CAP nodes, those asked for valid (junk past their
 * NULs), a map age of -1 or a number >= 0. */
static void rand_nodes(sample_rng *g, sample_rep *s) {
  s->r.nodes_n = sample_below(g, 2 * SAMPLE_NODES_CAP + 1);
  s->r.map_age_s = sample_below(g, 4) ? (double)(sample_rand(g) >> 11) * 1e-9 : -1;
  for (uint32_t i = 0; i < SAMPLE_NODES_CAP; i++) {
    kva_l2_node_stats *n = &s->nodes[i];
    rand_bytes(g, n, sizeof *n);
    rand_name(g, n->addr, sizeof n->addr, sample_below(g, sizeof n->addr));
    n->state = (int)sample_below(g, 3);
    n->failed_s = (double)(sample_rand(g) >> 11) * 1e-6;
  }
}

/* A random valid layout of at most SAMPLE_POOL_BYTES, not alike prev
 * (NULL: any). */
static kva_layout rand_layout_in_pool(sample_rng *g, const kva_layout *prev) {
  for (;;) {
    kva_layout l = sample_rand_layout(g);
    uint64_t bytes = kva_layout_bytes(&l);
    if (bytes && bytes <= SAMPLE_POOL_BYTES && !(prev && sample_layout_alike(prev, &l))) return l;
  }
}

/* A READ that asked for layouts: one time in four a failed one (no span
 * has bytes: no layout travels), else runs of 1 to 4 keys of one random
 * layout each, every span that layout's bytes somewhere in the pool. */
static void rand_read_layouts(sample_rng *g, sample_rep *s) {
  s->r.layouts_asked = 1;
  if (sample_below(g, 4) == 0) {
    memset(s->spans, 0, sizeof s->spans);
    return;
  }
  for (uint32_t i = 0, run = 0; i < s->r.n; i++, run--) {
    if (run == 0) {
      s->layouts[i] = rand_layout_in_pool(g, i ? &s->layouts[i - 1] : NULL);
      run = 1 + sample_below(g, 4);
    } else {
      s->layouts[i] = s->layouts[i - 1];
    }
    uint64_t len = kva_layout_bytes(&s->layouts[i]);
    s->spans[i] = (proto_span){sample_rand(g) % (SAMPLE_POOL_BYTES - len + 1), len};
  }
}

static proto_span rand_span(sample_rng *g) {
  uint64_t len = sample_below(g, 4) ? sample_rand(g) % (SAMPLE_POOL_BYTES + 1) : 0;
  uint64_t off = len ? sample_rand(g) % (SAMPLE_POOL_BYTES - len + 1) : 0;
  return (proto_span){off, len};
}

void sample_rand_rep(sample_rng *g, sample_rep *s) {
  uint32_t kinds = P_TYPE_END - P_HELLO + 1; /* every request type, and P_REFUSED */
  uint32_t k = sample_below(g, kinds);
  uint16_t type = k == kinds - 1 ? (uint16_t)P_REFUSED : (uint16_t)(P_HELLO + k);
  int32_t result = (int32_t)(sample_rand(g) >> 33); /* >= 0 */
  if (type == P_REFUSED || sample_below(g, 4) == 0) result = -1 - result;
  uint32_t n = sample_below(g, SAMPLE_MAX_N + 1);
  uint32_t text_len =
      sample_below(g, 4) ? sample_below(g, 200) : sample_below(g, PROTO_MAX_TEXT + 1);
  sample_rep_fill(s, type, n, result, text_len);
  s->r.hits = sample_rand(g);
  s->r.pool_bytes = sample_rand(g);
  s->r.pid = (uint32_t)sample_rand(g);
  s->r.max_keys = (uint32_t)sample_rand(g);
  for (uint32_t i = 0; i < n; i++) {
    s->status[i] = (int32_t)sample_rand(g);
    s->spans[i] = rand_span(g);
  }
  if (type == P_READ && sample_below(g, 2)) rand_read_layouts(g, s);
  rand_lookup(g, &s->lookup);
  rand_nodes(g, s);
  rand_bytes(g, &s->tier_keys, sizeof s->tier_keys);
  rand_bytes(g, &s->stats, sizeof s->stats);
  rand_bytes(g, &s->tier_stats, sizeof s->tier_stats);
  /* the rates are numbers (a decoder refuses NaN, infinities, negatives) */
  s->tier_stats.bytes_per_s = (double)(sample_rand(g) >> 11);
  s->tier_stats.latency_s = (double)(sample_rand(g) >> 11) * 1e-15;
  rand_bytes(g, &s->memcheck, sizeof s->memcheck);
  for (uint32_t i = 0; i < text_len; i++) s->text[i] = (char)(1 + sample_below(g, 255));
}
