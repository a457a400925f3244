/*
 * frame_check.c — the protocol suites' shared helpers (frame_check.h).
 */
#include "tests/wire/frame_check.h"

#include <stdlib.h>
#include <string.h>

uint8_t frame_buf[FRAME_CAP];
kva_key frame_keys[SAMPLE_MAX_N];
char frame_why[256];
static kva_key got_keys[PROTO_MAX_KEYS + 1];

void frame_fill_keys(uint32_t n) {
  for (uint32_t i = 0; i < n; i++) frame_keys[i] = sample_key(i);
}

uint32_t frame_le32(const uint8_t *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

uint64_t frame_le64(const uint8_t *b) {
  return frame_le32(b) | (uint64_t)frame_le32(b + 4) << 32;
}

void frame_set_le32(uint8_t *b, uint32_t v) {
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}

void frame_set_le64(uint8_t *b, uint64_t v) {
  frame_set_le32(b, (uint32_t)v);
  frame_set_le32(b + 4, (uint32_t)(v >> 32));
}

uint8_t *frame_payload(uint8_t *buf) {
  return buf + PROTO_HDR_BYTES;
}

size_t frame_set_len(uint8_t *buf, uint32_t len) {
  frame_set_le32(buf + 8, len);
  return PROTO_HDR_BYTES + len;
}

size_t frame_put_req(const proto_req *r) {
  size_t size = proto_req_put(frame_buf, sizeof frame_buf, r, FRAME_ID);
  ck_assert_uint_ge(size, PROTO_HDR_BYTES);
  ck_assert_uint_eq(size, proto_req_size(r));
  return size;
}

size_t frame_put_rep(const proto_rep *r) {
  size_t size = proto_rep_put(frame_buf, sizeof frame_buf, r, FRAME_ID);
  ck_assert_uint_ge(size, PROTO_HDR_BYTES + 4);
  ck_assert_uint_eq(size, proto_rep_size(r));
  return size;
}

static uint8_t *exact_copy(const uint8_t *p, size_t len) {
  uint8_t *c = malloc(len ? len : 1);
  ck_assert_ptr_nonnull(c);
  if (len) memcpy(c, p, len);
  return c;
}

/* The header of buf (asserted to announce size - PROTO_HDR_BYTES bytes),
 * or proto_hdr_get's refusal. */
static int decode_hdr(const uint8_t *buf, size_t size, proto_hdr *h) {
  frame_why[0] = '\0';
  int rc = proto_hdr_get(buf, h, frame_why, sizeof frame_why);
  if (rc == PROTO_OK) ck_assert_uint_eq(h->len, size - PROTO_HDR_BYTES);
  return rc;
}

int frame_decode_req(const uint8_t *buf, size_t size, size_t keys_cap, proto_req *out) {
  proto_hdr h;
  int rc = decode_hdr(buf, size, &h);
  if (rc != PROTO_OK) return rc;
  ck_assert_uint_le(keys_cap, PROTO_MAX_KEYS + 1);
  uint8_t *p = exact_copy(buf + PROTO_HDR_BYTES, h.len);
  rc = proto_req_get(&h, p, got_keys, keys_cap, out, frame_why, sizeof frame_why);
  free(p);
  return rc;
}

int frame_decode_rep(const uint8_t *buf, size_t size, sample_rep *s) {
  proto_hdr h;
  int rc = decode_hdr(buf, size, &h);
  if (rc != PROTO_OK) return rc;
  uint8_t *p = exact_copy(buf + PROTO_HDR_BYTES, h.len);
  rc = proto_rep_get(&h, p, SAMPLE_POOL_BYTES, &s->r, frame_why, sizeof frame_why);
  free(p);
  return rc;
}

void frame_assert_req_refused(const uint8_t *buf, size_t size, size_t keys_cap, int code,
                              const char *what) {
  proto_req r;
  int rc = frame_decode_req(buf, size, keys_cap, &r);
  ck_assert_msg(rc == code, "%s: %d, not %d (%s)", what, rc, code, frame_why);
  ck_assert_msg(frame_why[0] != '\0', "%s: refused without a reason", what);
}

static void assert_rep_refused(const uint8_t *buf, size_t size, uint16_t type, uint32_t n,
                               bool layouts, const char *what) {
  static sample_rep got;
  sample_rep_expect(&got, type, n);
  got.r.layouts_asked = layouts;
  int rc = frame_decode_rep(buf, size, &got);
  ck_assert_msg(rc == PROTO_EFRAME, "%s: %d, not PROTO_EFRAME", what, rc);
  ck_assert_msg(frame_why[0] != '\0', "%s: refused without a reason", what);
  ck_assert_uint_eq(got.r.type, type);
}

void frame_assert_rep_refused(const uint8_t *buf, size_t size, uint16_t type, uint32_t n,
                              const char *what) {
  assert_rep_refused(buf, size, type, n, false, what);
}

void frame_assert_read_refused(const uint8_t *buf, size_t size, uint32_t n, const char *what) {
  assert_rep_refused(buf, size, P_READ, n, true, what);
}

void frame_assert_key_eq(const kva_key *a, const kva_key *b) {
  ck_assert_mem_eq(a->model, b->model, sizeof a->model);
  ck_assert_uint_eq(a->kv_rank, b->kv_rank);
  ck_assert_uint_eq(a->group, b->group);
  ck_assert_uint_eq(a->hash_len, b->hash_len);
  ck_assert_mem_eq(a->hash, b->hash, sizeof a->hash);
}

static void assert_layout_eq(const kva_layout *a, const kva_layout *b) {
  ck_assert_uint_eq(a->ntensors, b->ntensors);
  for (int t = 0; t < 4; t++) {
    ck_assert_uint_eq(a->tensor[t].ndim, b->tensor[t].ndim);
    ck_assert_uint_eq(a->tensor[t].dtype, b->tensor[t].dtype);
    for (int d = 0; d < 6; d++) ck_assert_uint_eq(a->tensor[t].shape[d], b->tensor[t].shape[d]);
  }
}

void frame_assert_req_eq(const proto_req *want, const proto_req *got) {
  uint32_t n = want->type == P_L2_CONTAINS ? 1 : want->n;
  ck_assert_uint_eq(got->type, want->type);
  ck_assert_uint_eq(got->n, n);
  ck_assert_uint_eq(got->mode, want->mode);
  ck_assert_uint_eq(got->flag, want->flag);
  ck_assert_uint_eq(got->readers, want->readers);
  ck_assert_uint_eq(got->pid, want->pid);
  ck_assert_uint_eq(got->report_len, want->report_len);
  ck_assert_int_eq(got->timeout_ms, want->timeout_ms);
  ck_assert_uint_eq(got->cap, want->cap);
  assert_layout_eq(&got->layout, &want->layout);
  ck_assert_mem_eq(got->tier, want->tier, sizeof want->tier);
  ck_assert(!want->keys == !got->keys);
  for (uint32_t i = 0; want->keys && i < n; i++) frame_assert_key_eq(&got->keys[i], &want->keys[i]);
}

static bool all_ee(const void *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (((const uint8_t *)p)[i] != 0xee) return false;
  return true;
}

static void assert_lookup_eq(const kva_tier_hits *a, const kva_tier_hits *b) {
  ck_assert_uint_eq(a->total, b->total);
  ck_assert_uint_eq(a->ntiers, b->ntiers);
  for (uint32_t i = 0; i < 8; i++) { /* zeros past ntiers in both */
    ck_assert_mem_eq(a->tier[i].name, b->tier[i].name, sizeof a->tier[i].name);
    ck_assert_uint_eq(a->tier[i].hits, b->tier[i].hits);
  }
}

static void assert_stats_eq(kva_storage_stats *a, kva_storage_stats *b) {
  uint64_t *fa[SAMPLE_STATS_U64], *fb[SAMPLE_STATS_U64];
  sample_stats_fields(a, fa);
  sample_stats_fields(b, fb);
  for (uint32_t i = 0; i < SAMPLE_STATS_U64; i++) ck_assert_uint_eq(*fa[i], *fb[i]);
  ck_assert_int_eq(a->l1_pinned, b->l1_pinned);
  ck_assert_int_eq(a->l1_numa_node, b->l1_numa_node);
  ck_assert_uint_eq(a->l2_skipped_slow_keys, b->l2_skipped_slow_keys);
}

static void assert_tier_stats_eq(kva_l2_tier_stats *a, kva_l2_tier_stats *b) {
  uint64_t *fa[SAMPLE_TIER_STATS_U64], *fb[SAMPLE_TIER_STATS_U64];
  sample_tier_stats_fields(a, fa);
  sample_tier_stats_fields(b, fb);
  for (uint32_t i = 0; i < SAMPLE_TIER_STATS_U64; i++) ck_assert_uint_eq(*fa[i], *fb[i]);
  ck_assert_int_eq(a->bypassed, b->bypassed);
  ck_assert_mem_eq(&a->bytes_per_s, &b->bytes_per_s, sizeof a->bytes_per_s);
  ck_assert_mem_eq(&a->latency_s, &b->latency_s, sizeof a->latency_s);
}

static void assert_tier_keys_eq(kva_l2_tier_keys *a, kva_l2_tier_keys *b) {
  uint64_t *fa[SAMPLE_TIER_KEYS_U64], *fb[SAMPLE_TIER_KEYS_U64];
  sample_tier_keys_fields(a, fa);
  sample_tier_keys_fields(b, fb);
  for (uint32_t i = 0; i < SAMPLE_TIER_KEYS_U64; i++) ck_assert_uint_eq(*fa[i], *fb[i]);
}

/* The nodes a request of SAMPLE_NODES_CAP got, byte for byte (junk past
 * the addresses' NULs included: it travels); the rest untouched. */
static void assert_nodes_eq(const sample_rep *want, const sample_rep *got) {
  uint32_t count = want->r.nodes_n < SAMPLE_NODES_CAP ? want->r.nodes_n : SAMPLE_NODES_CAP;
  ck_assert_uint_eq(got->r.nodes_n, want->r.nodes_n);
  ck_assert_mem_eq(&got->r.map_age_s, &want->r.map_age_s, sizeof want->r.map_age_s);
  if (count) ck_assert_mem_eq(got->nodes, want->nodes, count * sizeof want->nodes[0]);
  ck_assert(all_ee(got->nodes + count, (SAMPLE_NODES_CAP - count) * sizeof got->nodes[0]));
}

static bool has_status(uint16_t t) {
  return t == P_RESERVE_WRITE || t == P_FINISH_WRITE || t == P_ABORT_WRITE || t == P_DELETE;
}

static bool has_spans(uint16_t t) {
  return t == P_RESERVE_WRITE || t == P_READ;
}

/* A READ's layouts: want's, or zeros when no span has bytes (a read that
 * failed sends none); untouched past n. */
static void assert_layouts_eq(sample_rep *want, sample_rep *got) {
  uint32_t n = want->r.n;
  bool sent = false;
  for (uint32_t i = 0; i < n; i++) sent = sent || want->spans[i].len;
  static const kva_layout zero;
  for (uint32_t i = 0; i < n; i++) {
    if (sent)
      assert_layout_eq(&got->layouts[i], &want->layouts[i]);
    else
      ck_assert_mem_eq(&got->layouts[i], &zero, sizeof zero);
  }
  ck_assert(all_ee(got->layouts + n, (SAMPLE_MAX_N - n) * sizeof got->layouts[0]));
}

static void assert_arrays_eq(sample_rep *want, sample_rep *got, bool ok) {
  uint16_t t = want->r.type;
  for (uint32_t i = 0; i < want->r.n; i++) {
    if (ok && has_status(t)) ck_assert_int_eq(got->status[i], want->status[i]);
    if (ok && has_spans(t)) {
      ck_assert_uint_eq(got->spans[i].off, want->spans[i].off);
      ck_assert_uint_eq(got->spans[i].len, want->spans[i].len);
    }
  }
  if (!(ok && has_status(t))) ck_assert(all_ee(got->status, sizeof got->status));
  if (!(ok && has_spans(t))) ck_assert(all_ee(got->spans, sizeof got->spans));
  if (ok && t == P_READ && want->r.layouts_asked)
    assert_layouts_eq(want, got);
  else
    ck_assert(all_ee(got->layouts, sizeof got->layouts));
}

static void assert_scalars_eq(const proto_rep *w, const proto_rep *g, bool ok) {
  if (ok && w->type == P_PREFETCH)
    ck_assert_uint_eq(g->hits, w->hits);
  else
    ck_assert(all_ee(&g->hits, sizeof g->hits));
  if (ok && w->type == P_HELLO) {
    ck_assert_uint_eq(g->pool_bytes, w->pool_bytes);
    ck_assert_uint_eq(g->pid, w->pid);
    ck_assert_uint_eq(g->max_keys, w->max_keys);
  } else {
    ck_assert(all_ee(&g->pool_bytes, 8) && all_ee(&g->pid, 4) && all_ee(&g->max_keys, 4));
  }
}

static void assert_structs_eq(sample_rep *want, sample_rep *got, bool ok) {
  uint16_t t = want->r.type;
  if (ok && t == P_LOOKUP)
    assert_lookup_eq(&got->lookup, &want->lookup);
  else
    ck_assert(all_ee(&got->lookup, sizeof got->lookup));
  if (ok && t == P_STATS)
    assert_stats_eq(&got->stats, &want->stats);
  else
    ck_assert(all_ee(&got->stats, sizeof got->stats));
  if (ok && t == P_TIER_STATS)
    assert_tier_stats_eq(&got->tier_stats, &want->tier_stats);
  else
    ck_assert(all_ee(&got->tier_stats, sizeof got->tier_stats));
  if (ok && t == P_TIER_KEYS)
    assert_tier_keys_eq(&got->tier_keys, &want->tier_keys);
  else
    ck_assert(all_ee(&got->tier_keys, sizeof got->tier_keys));
  if (ok && t == P_TIER_NODES) {
    assert_nodes_eq(want, got);
  } else {
    ck_assert(all_ee(got->nodes, sizeof got->nodes));
    ck_assert(all_ee(&got->r.nodes_n, 4) && all_ee(&got->r.map_age_s, 8));
  }
  if (t == P_MEMCHECK) /* sent whatever the result, as the text */
    ck_assert_mem_eq(&got->memcheck, &want->memcheck, sizeof got->memcheck);
  else
    ck_assert(all_ee(&got->memcheck, sizeof got->memcheck));
}

static void assert_text_eq(sample_rep *want, sample_rep *got) {
  uint16_t t = want->r.type;
  if (t == P_MEMCHECK || t == P_REFUSED) {
    ck_assert_uint_eq(got->r.text_len, want->r.text_len);
    ck_assert_mem_eq(got->text, want->text, want->r.text_len);
    ck_assert_int_eq(got->text[want->r.text_len], '\0');
  } else {
    ck_assert(all_ee(got->text, sizeof got->text) && all_ee(&got->r.text_len, 4));
  }
}

void frame_assert_rep_eq(sample_rep *want, sample_rep *got) {
  bool ok = want->r.result >= 0;
  ck_assert_uint_eq(got->r.type, want->r.type);
  ck_assert_int_eq(got->r.result, want->r.result);
  assert_arrays_eq(want, got, ok);
  assert_scalars_eq(&want->r, &got->r, ok);
  assert_structs_eq(want, got, ok);
  assert_text_eq(want, got);
}

void frame_assert_rep_round_trips(sample_rep *want, uint16_t type) {
  static sample_rep got;
  size_t size = frame_put_rep(&want->r);
  sample_rep_expect(&got, type, want->r.n);
  got.r.layouts_asked = want->r.layouts_asked;
  int rc = frame_decode_rep(frame_buf, size, &got);
  ck_assert_msg(rc == PROTO_OK, "type %u result %d: %s", want->r.type, want->r.result, frame_why);
  frame_assert_rep_eq(want, &got);
}
