/*
 * protocol.c — the frames of multi-process mode (protocol.h): the header,
 * the requests (protocol_reply.c: the replies) and the decoders' refusals.
 * The encoders refuse only what cannot be framed (the callers validated
 * the rest); the decoders trust nothing but the header's len, which
 * proto_hdr_get bounded, and check every field.
 *
 * Each payload is described once, as the list of its fields in wire order
 * (req_fields), which the sizer, the encoder and the decoder all walk, so
 * they cannot disagree on the layout.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "wire/wire_internal.h"

#define PROTO_MAX_READERS 128u /* 1 + kva_submit_prefetch's extra_readers (<= 127) */

/* The largest request (PREFETCH: 12 bytes, a layout, keys) fits the limit. */
_Static_assert(12u + PROTO_LAYOUT_BYTES + PROTO_MAX_KEYS * PROTO_KEY_BYTES <= PROTO_MAX_PAYLOAD,
               "PROTO_MAX_PAYLOAD too small for PROTO_MAX_KEYS keys");
_Static_assert(PROTO_KEY_BYTES ==
                   sizeof(((kva_key *)0)->model) + 4 + 4 + 1 + sizeof(((kva_key *)0)->hash),
               "a key is model, kv_rank, group, hash_len, hash");
_Static_assert(PROTO_LAYOUT_BYTES == 4 + 4 * (4 + 4 + 6 * 8), "a layout is ntensors, 4 tensors");

/* ---- refusals -------------------------------------------------------- */

static const char *const type_names[P_TYPE_END] = {
    [P_HELLO] = "HELLO",
    [P_RESERVE_WRITE] = "RESERVE_WRITE",
    [P_FINISH_WRITE] = "FINISH_WRITE",
    [P_ABORT_WRITE] = "ABORT_WRITE",
    [P_DELETE] = "DELETE",
    [P_TOUCH] = "TOUCH",
    [P_CLEAR] = "CLEAR",
    [P_PREFETCH] = "PREFETCH",
    [P_READ] = "READ",
    [P_FINISH_READ] = "FINISH_READ",
    [P_LOOKUP] = "LOOKUP",
    [P_UNPIN] = "UNPIN",
    [P_MEMCHECK] = "MEMCHECK",
    [P_STATS] = "STATS",
    [P_FLUSH] = "FLUSH",
    [P_FREEZE] = "FREEZE",
    [P_SET_BYPASS] = "SET_BYPASS",
    [P_BYPASSED] = "BYPASSED",
    [P_L2_CONTAINS] = "L2_CONTAINS",
    [P_TIER_STATS] = "TIER_STATS",
    [P_BYE] = "BYE",
    [P_TIER_KEYS] = "TIER_KEYS",
    [P_TIER_NODES] = "TIER_NODES",
};

const char *wire_type_name(uint16_t type) {
  return type == P_REFUSED ? "REFUSED" : wire_is_request(type) ? type_names[type] : "?";
}

/* The reason of a refusal into why, after prefix (always terminated when
 * whylen > 0; why may be NULL). */
static void vexplain(char *why, size_t whylen, const char *prefix, const char *fmt, va_list ap) {
  if (!why || !whylen) return;
  int o = snprintf(why, whylen, "%s", prefix);
  if (o >= 0 && (size_t)o < whylen) vsnprintf(why + o, whylen - (size_t)o, fmt, ap);
}

int wire_refuse(int code, char *why, size_t whylen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vexplain(why, whylen, "", fmt, ap);
  va_end(ap);
  return code;
}

int wire_dec_refuse(const wire_dec *d, const char *fmt, ...) {
  char prefix[48];
  snprintf(prefix, sizeof prefix, "%s %s: ", wire_type_name(d->type), d->kind);
  va_list ap;
  va_start(ap, fmt);
  vexplain(d->why, d->whylen, prefix, fmt, ap);
  va_end(ap);
  return PROTO_EFRAME;
}

/* ---- header ---------------------------------------------------------- */

void proto_hdr_put(uint8_t *b, uint16_t type, uint32_t len, uint64_t id) {
  wire_put_u32(b, PROTO_MAGIC);
  wire_put_u16(b + 4, PROTO_VERSION);
  wire_put_u16(b + 6, type);
  wire_put_u32(b + 8, len);
  wire_put_u32(b + 12, 0); /* flags */
  wire_put_u64(b + 16, id);
}

int proto_hdr_get(const uint8_t *b, proto_hdr *h, char *why, size_t whylen) {
  uint32_t magic = wire_get_u32(b);
  if (magic != PROTO_MAGIC)
    return wire_refuse(PROTO_EMAGIC, why, whylen, "not a kvact frame (magic 0x%08x)", magic);
  h->version = wire_get_u16(b + 4);
  h->type = wire_get_u16(b + 6);
  h->len = wire_get_u32(b + 8);
  h->id = wire_get_u64(b + 16);
  if (h->version != PROTO_VERSION)
    return wire_refuse(PROTO_EVERSION, why, whylen, "protocol version %u, not %u", h->version,
                       PROTO_VERSION);
  uint32_t flags = wire_get_u32(b + 12);
  if (flags) return wire_refuse(PROTO_EFRAME, why, whylen, "header flags 0x%x", flags);
  uint16_t t = h->type;
  bool reply = !wire_is_request(t) && wire_is_request(t & (uint16_t)~P_REPLY);
  if (!wire_is_request(t) && !reply && t != P_REFUSED)
    return wire_refuse(PROTO_EFRAME, why, whylen, "unknown frame type 0x%04x", t);
  uint32_t max = reply ? PROTO_MAX_REPLY_PAYLOAD : PROTO_MAX_PAYLOAD;
  if (h->len > max)
    return wire_refuse(PROTO_EFRAME, why, whylen, "payload of %u bytes (at most %u)", h->len, max);
  return PROTO_OK;
}

/* ---- keys and layouts ------------------------------------------------ */

static void wr_key(wire_wr *w, const kva_key *k) {
  wire_wr_bytes(w, k->model, sizeof k->model);
  wire_wr_u32(w, k->kv_rank);
  wire_wr_u32(w, k->group);
  wire_wr_bytes(w, &k->hash_len, 1);
  wire_wr_bytes(w, k->hash, sizeof k->hash);
}

static void rd_key(wire_rd *in, kva_key *k) {
  wire_rd_bytes(in, k->model, sizeof k->model);
  k->kv_rank = wire_rd_u32(in);
  k->group = wire_rd_u32(in);
  wire_rd_bytes(in, &k->hash_len, 1);
  wire_rd_bytes(in, k->hash, sizeof k->hash);
}

void wire_wr_layout(wire_wr *w, const kva_layout *l) {
  wire_wr_u32(w, l->ntensors);
  for (int t = 0; t < 4; t++) {
    wire_wr_u32(w, l->tensor[t].ndim);
    wire_wr_u32(w, (uint32_t)l->tensor[t].dtype);
    for (int d = 0; d < 6; d++) wire_wr_u64(w, l->tensor[t].shape[d]);
  }
}

void wire_rd_layout(wire_rd *in, kva_layout *l) {
  l->ntensors = wire_rd_u32(in);
  for (int t = 0; t < 4; t++) {
    l->tensor[t].ndim = wire_rd_u32(in);
    l->tensor[t].dtype = (kva_dtype)wire_rd_u32(in);
    for (int d = 0; d < 6; d++) l->tensor[t].shape[d] = wire_rd_u64(in);
  }
}

/* ---- requests -------------------------------------------------------- */

/* The fields of request payloads, each a u32 unless said otherwise. */
enum {
  RF_END,
  RF_N,
  RF_MODE,
  RF_FLAG,
  RF_READERS,
  RF_PID,
  RF_RESERVED,
  RF_REPORT_LEN,
  RF_TIMEOUT, /* i32 */
  RF_CAP,     /* TIER_NODES: 0..PROTO_MAX_NODES */
  RF_LAYOUT,  /* PROTO_LAYOUT_BYTES */
  RF_TIER,    /* PROTO_TIER_BYTES */
  RF_KEYS,    /* n keys, always last */
  RF_KEY,     /* one key (L2_CONTAINS) */
};

static const uint8_t req_fields[P_TYPE_END][6] = {
    [P_HELLO] = {RF_PID, RF_RESERVED},
    [P_RESERVE_WRITE] = {RF_N, RF_MODE, RF_LAYOUT, RF_KEYS},
    [P_FINISH_WRITE] = {RF_N, RF_KEYS},
    [P_ABORT_WRITE] = {RF_N, RF_KEYS},
    [P_DELETE] = {RF_N, RF_FLAG, RF_KEYS},
    [P_TOUCH] = {RF_N, RF_KEYS},
    [P_CLEAR] = {RF_FLAG},
    [P_PREFETCH] = {RF_N, RF_READERS, RF_FLAG, RF_LAYOUT, RF_KEYS},
    [P_READ] = {RF_N, RF_FLAG, RF_KEYS},
    [P_FINISH_READ] = {RF_N, RF_READERS, RF_KEYS},
    [P_LOOKUP] = {RF_N, RF_FLAG, RF_KEYS},
    [P_UNPIN] = {RF_N, RF_KEYS},
    [P_MEMCHECK] = {RF_REPORT_LEN, RF_FLAG},
    [P_STATS] = {RF_END},
    [P_FLUSH] = {RF_TIMEOUT},
    [P_FREEZE] = {RF_FLAG},
    [P_SET_BYPASS] = {RF_TIER, RF_FLAG},
    [P_BYPASSED] = {RF_TIER},
    [P_L2_CONTAINS] = {RF_TIER, RF_KEY},
    [P_TIER_STATS] = {RF_TIER},
    [P_BYE] = {RF_END},
    [P_TIER_KEYS] = {RF_TIER},
    [P_TIER_NODES] = {RF_TIER, RF_CAP},
};

/* Bytes of field f of r, or 0 when r cannot have it. */
static size_t req_field_size(uint8_t f, const proto_req *r) {
  switch (f) {
  case RF_LAYOUT:
    return PROTO_LAYOUT_BYTES;
  case RF_TIER:
    return PROTO_TIER_BYTES;
  case RF_KEYS:
    return r->keys && r->n >= 1 && r->n <= PROTO_MAX_KEYS ? (size_t)r->n * PROTO_KEY_BYTES : 0;
  case RF_KEY:
    return r->keys ? PROTO_KEY_BYTES : 0;
  default:
    return 4;
  }
}

size_t proto_req_size(const proto_req *r) {
  if (!wire_is_request(r->type)) return 0;
  size_t len = 0;
  for (const uint8_t *f = req_fields[r->type]; *f != RF_END; f++) {
    size_t b = req_field_size(*f, r);
    if (!b) return 0;
    len += b;
  }
  return PROTO_HDR_BYTES + len;
}

static void req_field_put(wire_wr *w, uint8_t f, const proto_req *r) {
  switch (f) {
  case RF_N:
    wire_wr_u32(w, r->n);
    break;
  case RF_MODE:
    wire_wr_u32(w, r->mode);
    break;
  case RF_FLAG:
    wire_wr_u32(w, r->flag);
    break;
  case RF_READERS:
    wire_wr_u32(w, r->readers);
    break;
  case RF_PID:
    wire_wr_u32(w, r->pid);
    break;
  case RF_RESERVED:
    wire_wr_u32(w, 0);
    break;
  case RF_REPORT_LEN:
    wire_wr_u32(w, r->report_len);
    break;
  case RF_TIMEOUT:
    wire_wr_u32(w, (uint32_t)r->timeout_ms);
    break;
  case RF_CAP:
    wire_wr_u32(w, r->cap);
    break;
  case RF_LAYOUT:
    wire_wr_layout(w, &r->layout);
    break;
  case RF_TIER:
    wire_wr_bytes(w, r->tier, PROTO_TIER_BYTES);
    break;
  case RF_KEYS:
    for (uint32_t i = 0; i < r->n; i++) wr_key(w, &r->keys[i]);
    break;
  case RF_KEY:
    wr_key(w, &r->keys[0]);
    break;
  }
}

size_t proto_req_put(uint8_t *buf, size_t cap, const proto_req *r, uint64_t id) {
  size_t size = proto_req_size(r);
  if (!size || size > cap) return 0;
  proto_hdr_put(buf, r->type, (uint32_t)(size - PROTO_HDR_BYTES), id);
  wire_wr w = {buf + PROTO_HDR_BYTES};
  for (const uint8_t *f = req_fields[r->type]; *f != RF_END; f++) req_field_put(&w, *f, r);
  return size;
}

/* A request payload being decoded into r, its keys into the caller's
 * array. */
typedef struct req_dec {
  wire_dec d;
  proto_req *r;
  kva_key *keys;
  size_t keys_cap;
} req_dec;

static int req_n_set(req_dec *q, uint32_t n) {
  size_t cap = q->keys_cap < PROTO_MAX_KEYS ? q->keys_cap : PROTO_MAX_KEYS;
  if (n == 0) return wire_dec_refuse(&q->d, "no keys");
  if (n > cap) return wire_dec_refuse(&q->d, "%u keys (room for %zu)", n, cap);
  q->r->n = n;
  return PROTO_OK;
}

static int req_in_range(req_dec *q, uint32_t v, uint32_t lo, uint32_t hi, uint32_t *out,
                        const char *what) {
  if (v < lo || v > hi) return wire_dec_refuse(&q->d, "%s %u (%u..%u)", what, v, lo, hi);
  *out = v;
  return PROTO_OK;
}

/* A u32 field read as v, checked and stored. */
static int req_u32_set(req_dec *q, uint8_t f, uint32_t v) {
  proto_req *r = q->r;
  switch (f) {
  case RF_N:
    return req_n_set(q, v);
  case RF_MODE:
    return req_in_range(q, v, KVA_WRITE_NEW, KVA_WRITE_ALL, &r->mode, "write mode");
  case RF_FLAG: /* PREFETCH: has_layout | PROTO_PREFETCH_AS_PLANNED; READ: PROTO_READ_LAYOUTS */
    return req_in_range(q, v, 0, r->type == P_PREFETCH ? 3 : 1, &r->flag, "flag");
  case RF_READERS:
    return req_in_range(q, v, 1, PROTO_MAX_READERS, &r->readers, "readers");
  case RF_REPORT_LEN:
    return req_in_range(q, v, 0, PROTO_MAX_TEXT, &r->report_len, "report_len");
  case RF_CAP:
    return req_in_range(q, v, 0, PROTO_MAX_NODES, &r->cap, "cap");
  case RF_RESERVED:
    return v == 0 ? PROTO_OK : wire_dec_refuse(&q->d, "reserved field 0x%x", v);
  case RF_PID:
    r->pid = v;
    return PROTO_OK;
  case RF_TIMEOUT:
    r->timeout_ms = (int32_t)v;
    return PROTO_OK;
  }
  return wire_dec_refuse(&q->d, "field %u is no u32", f); /* not reached: req_field_get's cases */
}

static int req_layout_get(req_dec *q) {
  proto_req *r = q->r;
  wire_rd_layout(&q->d.in, &r->layout);
  if (q->d.in.short_read) return wire_dec_refuse(&q->d, "truncated");
  bool used = r->type != P_PREFETCH || (r->flag & 1); /* PREFETCH's has_layout precedes it */
  if (used && kva_layout_bytes(&r->layout) == 0) return wire_dec_refuse(&q->d, "invalid layout");
  return PROTO_OK;
}

static int req_tier_get(req_dec *q) {
  wire_rd_bytes(&q->d.in, q->r->tier, PROTO_TIER_BYTES);
  if (q->d.in.short_read) return wire_dec_refuse(&q->d, "truncated");
  if (!memchr(q->r->tier, '\0', PROTO_TIER_BYTES))
    return wire_dec_refuse(&q->d, "tier name not NUL-terminated");
  return PROTO_OK;
}

/* n keys (r->n, set from the payload first) into the caller's array. */
static int req_keys_get(req_dec *q, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    rd_key(&q->d.in, &q->keys[i]);
    if (q->d.in.short_read) return wire_dec_refuse(&q->d, "truncated");
    if (!kva_key_valid(&q->keys[i])) return wire_dec_refuse(&q->d, "key %u is invalid", i);
  }
  q->r->keys = q->keys;
  return PROTO_OK;
}

static int req_field_get(req_dec *q, uint8_t f) {
  wire_rd *in = &q->d.in;
  switch (f) {
  case RF_LAYOUT:
    return req_layout_get(q);
  case RF_TIER:
    return req_tier_get(q);
  case RF_KEYS: /* the rest of the payload is exactly the n keys */
    if (in->left != (size_t)q->r->n * PROTO_KEY_BYTES)
      return wire_dec_refuse(&q->d, "%zu bytes for %u keys", in->left, q->r->n);
    return req_keys_get(q, q->r->n);
  case RF_KEY:
    if (q->keys_cap < 1) return wire_dec_refuse(&q->d, "no room for a key");
    q->r->n = 1;
    return req_keys_get(q, 1);
  }
  uint32_t v = wire_rd_u32(in);
  if (in->short_read) return wire_dec_refuse(&q->d, "truncated");
  return req_u32_set(q, f, v);
}

int proto_req_get(const proto_hdr *h, const uint8_t *p, kva_key *keys, size_t keys_cap,
                  proto_req *r, char *why, size_t whylen) {
  if (!wire_is_request(h->type))
    return wire_refuse(PROTO_EFRAME, why, whylen, "frame type 0x%04x is no request", h->type);
  *r = (proto_req){.type = h->type};
  req_dec q = {{{p, h->len, false}, h->type, "request", why, whylen}, r, keys, keys_cap};
  for (const uint8_t *f = req_fields[h->type]; *f != RF_END; f++)
    if (req_field_get(&q, *f) != PROTO_OK) return PROTO_EFRAME;
  if (q.d.in.left) return wire_dec_refuse(&q.d, "%zu trailing bytes", q.d.in.left);
  return PROTO_OK;
}
