/*
 * protocol_test.c — wire/protocol.h's header and requests: every request
 * type comes back from encode + decode field for field, the bytes lie
 * where protocol.h says, and every malformed header or request is refused
 * with a reason (magic, version, flags, length (a reply's limit of its
 * own), type, each truncation,
 * trailing bytes, key counts, keys, layouts, ranges, tier names); decoding
 * allocates nothing. Replies: protocol_reply_test.c; random frames:
 * protocol_random_test.c.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "tests/wire/frame_check.h"
#include "tools/kvbench/malloc_count.h"

/* Offsets in a RESERVE_WRITE payload: n, mode, layout, keys. */
#define RW_LAYOUT 8u
#define RW_KEYS (RW_LAYOUT + PROTO_LAYOUT_BYTES)

static size_t put_sample(uint16_t t, uint32_t n) {
  frame_fill_keys(n);
  proto_req r = sample_req(t, frame_keys, n);
  return frame_put_req(&r);
}

/* ---- header ------------------------------------------------------------- */

START_TEST(header_bytes_are_as_specified) {
  static const uint8_t want[PROTO_HDR_BYTES] = {
      'K', 'V', 'A', 'D', 4,    0,    0x02, 0x01, 0x06, 0x05, 0x04, 0x03,
      0,   0,   0,   0,   0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
  };
  uint8_t b[PROTO_HDR_BYTES];
  proto_hdr_put(b, 0x0102, 0x03040506, FRAME_ID);
  ck_assert_mem_eq(b, want, sizeof want);
}
END_TEST

START_TEST(header_of_every_type_decodes) {
  uint16_t types[] = {P_HELLO,      P_TIER_STATS,           P_WELCOME, P_TIER_STATS | P_REPLY,
                      P_TIER_NODES, P_TIER_NODES | P_REPLY, P_REFUSED};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    uint8_t b[PROTO_HDR_BYTES];
    proto_hdr h;
    proto_hdr_put(b, types[i], PROTO_MAX_PAYLOAD, FRAME_ID + i);
    ck_assert_int_eq(proto_hdr_get(b, &h, NULL, 0), PROTO_OK);
    ck_assert_uint_eq(h.version, PROTO_VERSION);
    ck_assert_uint_eq(h.type, types[i]);
    ck_assert_uint_eq(h.len, PROTO_MAX_PAYLOAD);
    ck_assert_uint_eq(h.id, FRAME_ID + i);
  }
}
END_TEST

static int hdr_get(const uint8_t *b, proto_hdr *h) {
  frame_why[0] = '\0';
  int rc = proto_hdr_get(b, h, frame_why, sizeof frame_why);
  ck_assert(rc == PROTO_OK || frame_why[0] != '\0');
  return rc;
}

START_TEST(header_of_another_protocol_is_refused) {
  uint8_t b[PROTO_HDR_BYTES];
  proto_hdr h = {.type = 77};
  proto_hdr_put(b, P_HELLO, 8, 1);
  memcpy(b, "GET ", 4);
  ck_assert_int_eq(hdr_get(b, &h), PROTO_EMAGIC);
  ck_assert_uint_eq(h.type, 77); /* untouched */
}
END_TEST

START_TEST(header_of_another_version_is_read_and_refused) {
  uint8_t b[PROTO_HDR_BYTES];
  proto_hdr h;
  proto_hdr_put(b, P_HELLO, 8, FRAME_ID);
  b[4] = PROTO_VERSION + 1;
  ck_assert_int_eq(hdr_get(b, &h), PROTO_EVERSION);
  ck_assert_uint_eq(h.version, PROTO_VERSION + 1);
  ck_assert_uint_eq(h.type, P_HELLO);
  ck_assert_uint_eq(h.len, 8);
  ck_assert_uint_eq(h.id, FRAME_ID);
}
END_TEST

START_TEST(header_with_flags_is_refused) {
  uint8_t b[PROTO_HDR_BYTES];
  proto_hdr h;
  for (int byte = 12; byte < 16; byte++) {
    proto_hdr_put(b, P_STATS, 0, 1);
    b[byte] = 0x80;
    ck_assert_int_eq(hdr_get(b, &h), PROTO_EFRAME);
  }
}
END_TEST

START_TEST(header_over_the_payload_limit_is_refused) {
  uint8_t b[PROTO_HDR_BYTES];
  proto_hdr h;
  proto_hdr_put(b, P_TOUCH, PROTO_MAX_PAYLOAD + 1, 1);
  ck_assert_int_eq(hdr_get(b, &h), PROTO_EFRAME);
  proto_hdr_put(b, P_TOUCH, UINT32_MAX, 1);
  ck_assert_int_eq(hdr_get(b, &h), PROTO_EFRAME);
  proto_hdr_put(b, P_REFUSED, PROTO_MAX_PAYLOAD + 1, 1);
  ck_assert_int_eq(hdr_get(b, &h), PROTO_EFRAME);
}
END_TEST

/* A reply may be longer than a request (a READ with a layout per key),
 * up to PROTO_MAX_REPLY_PAYLOAD; a request may not. */
START_TEST(replies_have_a_limit_of_their_own) {
  uint8_t b[PROTO_HDR_BYTES];
  proto_hdr h;
  ck_assert_uint_gt(PROTO_MAX_REPLY_PAYLOAD, PROTO_MAX_PAYLOAD);
  proto_hdr_put(b, P_READ | P_REPLY, PROTO_MAX_REPLY_PAYLOAD, 1);
  ck_assert_int_eq(hdr_get(b, &h), PROTO_OK);
  ck_assert_uint_eq(h.len, PROTO_MAX_REPLY_PAYLOAD);
  proto_hdr_put(b, P_READ | P_REPLY, PROTO_MAX_REPLY_PAYLOAD + 1, 1);
  ck_assert_int_eq(hdr_get(b, &h), PROTO_EFRAME);
  proto_hdr_put(b, P_READ, PROTO_MAX_PAYLOAD + 1, 1);
  ck_assert_int_eq(hdr_get(b, &h), PROTO_EFRAME);
}
END_TEST

START_TEST(header_of_an_unknown_type_is_refused) {
  uint16_t types[] = {
      0,      P_TYPE_END, P_REPLY, P_TYPE_END | P_REPLY, P_REFUSED - 1, P_REFUSED | P_REPLY,
      0x4001, 0xffff};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    uint8_t b[PROTO_HDR_BYTES];
    proto_hdr h;
    proto_hdr_put(b, types[i], 0, 1);
    ck_assert_msg(hdr_get(b, &h) == PROTO_EFRAME, "type 0x%x", types[i]);
  }
}
END_TEST

START_TEST(reasons_are_cut_to_the_room_given) {
  uint8_t b[PROTO_HDR_BYTES];
  proto_hdr h;
  char tiny[4] = "xyz", none[1] = {'x'};
  proto_hdr_put(b, P_STATS, 0, 1);
  b[12] = 1;
  ck_assert_int_eq(proto_hdr_get(b, &h, tiny, sizeof tiny), PROTO_EFRAME);
  ck_assert_uint_eq(strlen(tiny), 3);
  ck_assert_int_eq(proto_hdr_get(b, &h, none, sizeof none), PROTO_EFRAME);
  ck_assert_int_eq(none[0], '\0');
  ck_assert_int_eq(proto_hdr_get(b, &h, NULL, 99), PROTO_EFRAME);
  ck_assert_int_eq(proto_hdr_get(b, &h, none, 0), PROTO_EFRAME);
}
END_TEST

/* ---- requests: round trips ------------------------------------------------ */

START_TEST(every_request_type_round_trips) {
  for (uint16_t t = P_HELLO; t < P_TYPE_END; t++) {
    for (uint32_t n = 1; n <= SAMPLE_MAX_N; n += SAMPLE_MAX_N - 1) {
      frame_fill_keys(n);
      proto_req r = sample_req(t, frame_keys, n), got;
      size_t size = frame_put_req(&r);
      ck_assert_uint_eq(frame_le32(frame_buf + 8), size - PROTO_HDR_BYTES);
      ck_assert_uint_eq(frame_le32(frame_buf + 4) >> 16, t);
      ck_assert_uint_eq(frame_le64(frame_buf + 16), FRAME_ID);
      int rc = frame_decode_req(frame_buf, size, PROTO_MAX_KEYS, &got);
      ck_assert_msg(rc == PROTO_OK, "type %u: %s", t, frame_why);
      frame_assert_req_eq(&r, &got);
    }
  }
}
END_TEST

START_TEST(request_fields_lie_where_specified) {
  frame_fill_keys(2);
  proto_req r = sample_req(P_RESERVE_WRITE, frame_keys, 2);
  size_t size = frame_put_req(&r);
  const uint8_t *p = frame_payload(frame_buf);
  ck_assert_uint_eq(size, PROTO_HDR_BYTES + RW_KEYS + 2 * PROTO_KEY_BYTES);
  ck_assert_uint_eq(frame_le32(p), 2);
  ck_assert_uint_eq(frame_le32(p + 4), KVA_WRITE_ALL);
  ck_assert_uint_eq(frame_le32(p + RW_LAYOUT), 2); /* ntensors */
  const uint8_t *t1 = p + RW_LAYOUT + 4 + 56;      /* tensor 1: ndim, dtype, shape */
  ck_assert_uint_eq(frame_le32(t1), 1);
  ck_assert_uint_eq(frame_le32(t1 + 4), KVA_DT_F32);
  ck_assert_uint_eq(frame_le64(t1 + 8), 3);
  const uint8_t *k1 = p + RW_KEYS + PROTO_KEY_BYTES;
  ck_assert_mem_eq(k1, frame_keys[1].model, 64);
  ck_assert_uint_eq(frame_le32(k1 + 64), frame_keys[1].kv_rank);
  ck_assert_uint_eq(frame_le32(k1 + 68), frame_keys[1].group);
  ck_assert_uint_eq(k1[72], frame_keys[1].hash_len);
  ck_assert_mem_eq(k1 + 73, frame_keys[1].hash, 32);
}
END_TEST

START_TEST(small_requests_lie_where_specified) {
  put_sample(P_FLUSH, 1);
  ck_assert_uint_eq(frame_le32(frame_buf + 8), 4);
  ck_assert_uint_eq(frame_le32(frame_payload(frame_buf)), (uint32_t)-12345);
  put_sample(P_HELLO, 1);
  ck_assert_uint_eq(frame_le32(frame_payload(frame_buf)), 4242);
  ck_assert_uint_eq(frame_le32(frame_payload(frame_buf) + 4), 0);
  ck_assert_uint_eq(put_sample(P_STATS, 1), PROTO_HDR_BYTES);
  ck_assert_uint_eq(put_sample(P_SET_BYPASS, 1), PROTO_HDR_BYTES + PROTO_TIER_BYTES + 4);
  ck_assert_str_eq((const char *)frame_payload(frame_buf), "disk-0");
  ck_assert_uint_eq(frame_le32(frame_payload(frame_buf) + PROTO_TIER_BYTES), 1);
  size_t size = put_sample(P_L2_CONTAINS, 1);
  ck_assert_uint_eq(size, PROTO_HDR_BYTES + PROTO_TIER_BYTES + PROTO_KEY_BYTES);
  ck_assert_mem_eq(frame_payload(frame_buf) + PROTO_TIER_BYTES, frame_keys[0].model, 64);
  size = put_sample(P_PREFETCH, 3);
  ck_assert_uint_eq(size, PROTO_HDR_BYTES + 12 + PROTO_LAYOUT_BYTES + 3 * PROTO_KEY_BYTES);
  ck_assert_uint_eq(frame_le32(frame_payload(frame_buf) + 4), 128); /* readers */
  ck_assert_uint_eq(frame_le32(frame_payload(frame_buf) + 8), 1);   /* has_layout */
  size = put_sample(P_READ, 3);                                     /* n, flags, keys */
  ck_assert_uint_eq(size, PROTO_HDR_BYTES + 8 + 3 * PROTO_KEY_BYTES);
  ck_assert_uint_eq(frame_le32(frame_payload(frame_buf)), 3);
  ck_assert_uint_eq(frame_le32(frame_payload(frame_buf) + 4), PROTO_READ_LAYOUTS);
  ck_assert_mem_eq(frame_payload(frame_buf) + 8, frame_keys[0].model, 64);
  ck_assert_uint_eq(put_sample(P_TIER_KEYS, 1), PROTO_HDR_BYTES + PROTO_TIER_BYTES);
  ck_assert_str_eq((const char *)frame_payload(frame_buf), "disk-0");
  ck_assert_uint_eq(put_sample(P_TIER_NODES, 1), PROTO_HDR_BYTES + PROTO_TIER_BYTES + 4);
  ck_assert_str_eq((const char *)frame_payload(frame_buf), "disk-0");
  ck_assert_uint_eq(frame_le32(frame_payload(frame_buf) + PROTO_TIER_BYTES), SAMPLE_NODES_CAP);
}
END_TEST

START_TEST(l2_contains_sends_one_key_whatever_n) {
  frame_fill_keys(3);
  proto_req r = sample_req(P_L2_CONTAINS, frame_keys, 3), got;
  r.n = 3;
  size_t size = frame_put_req(&r);
  ck_assert_uint_eq(size, PROTO_HDR_BYTES + PROTO_TIER_BYTES + PROTO_KEY_BYTES);
  ck_assert_int_eq(frame_decode_req(frame_buf, size, 1, &got), PROTO_OK);
  ck_assert_uint_eq(got.n, 1);
  frame_assert_key_eq(&got.keys[0], &frame_keys[0]);
  ck_assert_int_eq(frame_decode_req(frame_buf, size, 0, &got), PROTO_EFRAME);
}
END_TEST

START_TEST(request_encoder_refuses_what_it_cannot_encode) {
  frame_fill_keys(1);
  proto_req r = sample_req(P_TOUCH, frame_keys, 1);
  size_t size = proto_req_size(&r);
  ck_assert_uint_eq(proto_req_put(frame_buf, size - 1, &r, 1), 0);
  ck_assert_uint_eq(proto_req_put(frame_buf, size, &r, 1), size);
  r.n = 0;
  ck_assert_uint_eq(proto_req_size(&r), 0);
  r.n = PROTO_MAX_KEYS + 1;
  ck_assert_uint_eq(proto_req_size(&r), 0);
  r.n = 1;
  r.keys = NULL;
  ck_assert_uint_eq(proto_req_size(&r), 0);
  r = sample_req(P_L2_CONTAINS, NULL, 0);
  ck_assert_uint_eq(proto_req_put(frame_buf, sizeof frame_buf, &r, 1), 0);
  uint16_t bad[] = {0, P_TYPE_END, P_REFUSED, P_WELCOME};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    r = (proto_req){.type = bad[i]};
    ck_assert_uint_eq(proto_req_size(&r), 0);
    ck_assert_uint_eq(proto_req_put(frame_buf, sizeof frame_buf, &r, 1), 0);
  }
}
END_TEST

/* ---- requests: refusals ---------------------------------------------------- */

START_TEST(every_truncated_request_is_refused) {
  for (uint16_t t = P_HELLO; t < P_TYPE_END; t++) {
    size_t size = put_sample(t, 3);
    for (uint32_t len = 0; len < size - PROTO_HDR_BYTES; len++) {
      frame_set_len(frame_buf, len);
      frame_assert_req_refused(frame_buf, PROTO_HDR_BYTES + len, PROTO_MAX_KEYS, PROTO_EFRAME,
                               "truncated");
    }
  }
}
END_TEST

START_TEST(requests_with_trailing_bytes_are_refused) {
  for (uint16_t t = P_HELLO; t < P_TYPE_END; t++) {
    size_t size = put_sample(t, 3);
    uint32_t len = (uint32_t)(size - PROTO_HDR_BYTES);
    frame_buf[size] = 0;
    frame_assert_req_refused(frame_buf, frame_set_len(frame_buf, len + 1), PROTO_MAX_KEYS,
                             PROTO_EFRAME, "one byte more");
    memcpy(frame_buf + size, &frame_keys[0], PROTO_KEY_BYTES); /* a key's worth more */
    frame_assert_req_refused(frame_buf, frame_set_len(frame_buf, len + PROTO_KEY_BYTES),
                             PROTO_MAX_KEYS, PROTO_EFRAME, "a key more than n");
  }
}
END_TEST

START_TEST(request_decoder_refuses_replies) {
  sample_rep s;
  sample_rep_fill(&s, P_TOUCH, 0, 0, 0);
  size_t size = frame_put_rep(&s.r);
  frame_assert_req_refused(frame_buf, size, PROTO_MAX_KEYS, PROTO_EFRAME, "a reply");
  sample_rep_fill(&s, P_REFUSED, 0, KVA_EINVAL, 3);
  size = frame_put_rep(&s.r);
  frame_assert_req_refused(frame_buf, size, PROTO_MAX_KEYS, PROTO_EFRAME, "a refusal");
}
END_TEST

START_TEST(key_counts_are_checked) {
  proto_req got;
  size_t size = put_sample(P_READ, 5);
  frame_assert_req_refused(frame_buf, size, 4, PROTO_EFRAME, "n > keys_cap");
  ck_assert_int_eq(frame_decode_req(frame_buf, size, 5, &got), PROTO_OK);
  frame_set_le32(frame_payload(frame_buf), 0);
  frame_assert_req_refused(frame_buf, size, PROTO_MAX_KEYS, PROTO_EFRAME, "n = 0, keys sent");
  frame_assert_req_refused(frame_buf, frame_set_len(frame_buf, 4), PROTO_MAX_KEYS, PROTO_EFRAME,
                           "n = 0");
  put_sample(P_READ, 5);
  frame_set_le32(frame_payload(frame_buf), 4);
  frame_assert_req_refused(frame_buf, size, PROTO_MAX_KEYS, PROTO_EFRAME, "n < keys sent");
  frame_set_le32(frame_payload(frame_buf), 6);
  frame_assert_req_refused(frame_buf, size, PROTO_MAX_KEYS, PROTO_EFRAME, "n > keys sent");
  frame_set_le32(frame_payload(frame_buf), UINT32_MAX);
  frame_assert_req_refused(frame_buf, size, PROTO_MAX_KEYS, PROTO_EFRAME, "n = 2^32 - 1");
}
END_TEST

/* A TOUCH of n keys in a buffer of its own (freed by the caller). */
static uint8_t *big_touch(uint32_t n, size_t *size) {
  static kva_key many[PROTO_MAX_KEYS + 1];
  for (uint32_t i = 0; i < n; i++) many[i] = sample_key(i);
  proto_req r = sample_req(P_TOUCH, many, n > PROTO_MAX_KEYS ? PROTO_MAX_KEYS : n);
  *size = PROTO_HDR_BYTES + 4 + (size_t)n * PROTO_KEY_BYTES;
  uint8_t *buf = malloc(*size);
  ck_assert_ptr_nonnull(buf);
  size_t put = proto_req_put(buf, *size, &r, 1);
  ck_assert_uint_eq(put, PROTO_HDR_BYTES + 4 + (size_t)r.n * PROTO_KEY_BYTES);
  if (n > r.n) { /* the encoder refuses that many: one key more by hand */
    memcpy(buf + put, buf + put - PROTO_KEY_BYTES, PROTO_KEY_BYTES);
    frame_set_le32(frame_payload(buf), n);
    frame_set_len(buf, (uint32_t)(*size - PROTO_HDR_BYTES));
  }
  return buf;
}

START_TEST(at_most_max_keys_are_accepted) {
  size_t size;
  proto_req got;
  uint8_t *buf = big_touch(PROTO_MAX_KEYS, &size);
  ck_assert_int_eq(frame_decode_req(buf, size, PROTO_MAX_KEYS, &got), PROTO_OK);
  ck_assert_uint_eq(got.n, PROTO_MAX_KEYS);
  kva_key last = sample_key(PROTO_MAX_KEYS - 1);
  frame_assert_key_eq(&got.keys[PROTO_MAX_KEYS - 1], &last);
  free(buf);
  buf = big_touch(PROTO_MAX_KEYS + 1, &size);
  ck_assert_uint_le(size - PROTO_HDR_BYTES, PROTO_MAX_PAYLOAD);
  frame_assert_req_refused(buf, size, PROTO_MAX_KEYS + 1, PROTO_EFRAME, "n > PROTO_MAX_KEYS");
  free(buf);
}
END_TEST

/* Keys kva_key_valid refuses. */
static kva_key invalid_key(int i) {
  kva_key k = sample_key(7);
  switch (i) {
  case 0:
    memset(k.model, 'a', sizeof k.model);
    break; /* no NUL */
  case 1:
    strcpy(k.model, "llama@3");
    break;
  case 2:
    k.model[0] = '\0';
    break;
  case 3:
    k.hash_len = 0;
    break;
  case 4:
    k.hash_len = 33;
    break;
  case 5:
    k.hash_len = 255;
    break;
  }
  return k;
}

START_TEST(invalid_keys_are_refused) {
  uint16_t types[] = {P_RESERVE_WRITE, P_READ, P_PREFETCH, P_L2_CONTAINS};
  for (int bad = 0; bad < 6; bad++) {
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
      for (uint32_t at = 0; at < 3; at += 2) {
        frame_fill_keys(3);
        frame_keys[at] = invalid_key(bad);
        proto_req r = sample_req(types[t], frame_keys + (types[t] == P_L2_CONTAINS ? at : 0), 3);
        size_t size = frame_put_req(&r);
        frame_assert_req_refused(frame_buf, size, PROTO_MAX_KEYS, PROTO_EFRAME, "invalid key");
      }
    }
  }
}
END_TEST

/* Layouts kva_layout_bytes refuses. */
static kva_layout invalid_layout(int i) {
  kva_layout l = sample_layout();
  switch (i) {
  case 0:
    l.ntensors = 0;
    break;
  case 1:
    l.ntensors = 5;
    break;
  case 2:
    l.tensor[1].ndim = 7;
    break;
  case 3:
    l.tensor[1].dtype = (kva_dtype)99;
    break;
  case 4:
    l.tensor[0].shape[2] = 0;
    break;
  case 5:
    l.tensor[0].shape[0] = UINT64_MAX;
    break; /* overflows */
  }
  return l;
}

START_TEST(invalid_layouts_are_refused_where_used) {
  proto_req got;
  frame_fill_keys(2);
  for (int bad = 0; bad < 6; bad++) {
    proto_req r = sample_req(P_RESERVE_WRITE, frame_keys, 2);
    r.layout = invalid_layout(bad);
    frame_assert_req_refused(frame_buf, frame_put_req(&r), PROTO_MAX_KEYS, PROTO_EFRAME,
                             "RESERVE_WRITE");
    r = sample_req(P_PREFETCH, frame_keys, 2);
    r.layout = invalid_layout(bad);
    frame_assert_req_refused(frame_buf, frame_put_req(&r), PROTO_MAX_KEYS, PROTO_EFRAME,
                             "PREFETCH with a layout");
    r.flag = 0; /* no layout: its bytes are not looked at */
    ck_assert_int_eq(frame_decode_req(frame_buf, frame_put_req(&r), PROTO_MAX_KEYS, &got),
                     PROTO_OK);
    frame_assert_req_eq(&r, &got);
  }
}
END_TEST

/* The request of type t with the u32 at payload offset off set to v:
 * accepted or refused as ok says. */
static void check_u32(uint16_t t, size_t off, uint32_t v, bool ok) {
  proto_req got;
  size_t size = put_sample(t, 2);
  frame_set_le32(frame_payload(frame_buf) + off, v);
  if (ok)
    ck_assert_msg(frame_decode_req(frame_buf, size, PROTO_MAX_KEYS, &got) == PROTO_OK,
                  "type %u, %u at %zu: %s", t, v, off, frame_why);
  else
    frame_assert_req_refused(frame_buf, size, PROTO_MAX_KEYS, PROTO_EFRAME, "out of range");
}

START_TEST(request_ranges_are_checked) {
  uint16_t readers[] = {P_PREFETCH, P_FINISH_READ};
  for (int i = 0; i < 2; i++) {
    check_u32(readers[i], 4, 0, false);
    check_u32(readers[i], 4, 129, false);
    check_u32(readers[i], 4, 1, true);
    check_u32(readers[i], 4, 128, true);
  }
  for (uint32_t mode = KVA_WRITE_NEW; mode <= KVA_WRITE_ALL; mode++)
    check_u32(P_RESERVE_WRITE, 4, mode, true);
  check_u32(P_RESERVE_WRITE, 4, KVA_WRITE_ALL + 1, false);
  check_u32(P_MEMCHECK, 0, PROTO_MAX_TEXT, true);
  check_u32(P_MEMCHECK, 0, PROTO_MAX_TEXT + 1, false);
  check_u32(P_HELLO, 4, 1, false); /* reserved */
  check_u32(P_HELLO, 0, UINT32_MAX, true);
  check_u32(P_FLUSH, 0, UINT32_MAX, true); /* -1: forever */
  check_u32(P_TIER_NODES, PROTO_TIER_BYTES, 0, true);
  check_u32(P_TIER_NODES, PROTO_TIER_BYTES, PROTO_MAX_NODES, true);
  check_u32(P_TIER_NODES, PROTO_TIER_BYTES, PROTO_MAX_NODES + 1, false);
  check_u32(P_TIER_NODES, PROTO_TIER_BYTES, UINT32_MAX, false);
}
END_TEST

/* Flags are 0 or 1 (READ's: PROTO_READ_LAYOUTS), except PREFETCH's two
 * bits (has_layout, PROTO_PREFETCH_AS_PLANNED): 0..3. */
START_TEST(flags_are_0_or_1) {
  struct {
    uint16_t type;
    size_t off;
    uint32_t max;
  } flags[] = {{P_DELETE, 4, 1},   {P_CLEAR, 0, 1},    {P_LOOKUP, 4, 1},
               {P_FREEZE, 0, 1},   {P_PREFETCH, 8, 3}, {P_SET_BYPASS, PROTO_TIER_BYTES, 1},
               {P_MEMCHECK, 4, 1}, {P_READ, 4, 1}};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    for (uint32_t v = 0; v <= flags[i].max; v++) check_u32(flags[i].type, flags[i].off, v, true);
    check_u32(flags[i].type, flags[i].off, flags[i].max + 1, false);
    check_u32(flags[i].type, flags[i].off, UINT32_MAX, false);
  }
}
END_TEST

START_TEST(tier_names_must_be_terminated) {
  uint16_t types[] = {P_SET_BYPASS, P_BYPASSED,  P_L2_CONTAINS,
                      P_TIER_STATS, P_TIER_KEYS, P_TIER_NODES};
  proto_req got;
  frame_fill_keys(1);
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    proto_req r = sample_req(types[i], frame_keys, 1);
    memset(r.tier, 'x', sizeof r.tier);
    frame_assert_req_refused(frame_buf, frame_put_req(&r), PROTO_MAX_KEYS, PROTO_EFRAME,
                             "tier without NUL");
    r.tier[PROTO_TIER_BYTES - 1] = '\0'; /* 31 bytes and a NUL */
    ck_assert_int_eq(frame_decode_req(frame_buf, frame_put_req(&r), PROTO_MAX_KEYS, &got),
                     PROTO_OK);
    ck_assert_uint_eq(strlen(got.tier), PROTO_TIER_BYTES - 1);
  }
}
END_TEST

/* ---- cost ------------------------------------------------------------------ */

/* The daemon decodes every request on a worker: no malloc (counted by
 * interposing it; in sanitizer builds nothing is counted). */
START_TEST(decoding_64_keys_allocates_nothing) {
  proto_hdr h;
  proto_req r;
  static kva_key out[SAMPLE_MAX_N];
  size_t size = put_sample(P_PREFETCH, SAMPLE_MAX_N);
  ck_assert_int_eq(proto_hdr_get(frame_buf, &h, NULL, 0), PROTO_OK);
  ck_assert_uint_eq(h.len, size - PROTO_HDR_BYTES);
  int failed = 0;
  uint64_t before = malloc_count(); /* no ck_assert inside: Check's allocate */
  for (int i = 0; i < 1000; i++) {
    failed += proto_hdr_get(frame_buf, &h, NULL, 0) != PROTO_OK;
    failed +=
        proto_req_get(&h, frame_payload(frame_buf), out, SAMPLE_MAX_N, &r, NULL, 0) != PROTO_OK;
  }
  ck_assert_uint_eq(malloc_count(), before);
  ck_assert_int_eq(failed, 0);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("protocol");
  TCase *hdr = tcase_create("header");
  tcase_add_test(hdr, header_bytes_are_as_specified);
  tcase_add_test(hdr, header_of_every_type_decodes);
  tcase_add_test(hdr, header_of_another_protocol_is_refused);
  tcase_add_test(hdr, header_of_another_version_is_read_and_refused);
  tcase_add_test(hdr, header_with_flags_is_refused);
  tcase_add_test(hdr, header_over_the_payload_limit_is_refused);
  tcase_add_test(hdr, replies_have_a_limit_of_their_own);
  tcase_add_test(hdr, header_of_an_unknown_type_is_refused);
  tcase_add_test(hdr, reasons_are_cut_to_the_room_given);
  suite_add_tcase(s, hdr);
  TCase *req = tcase_create("requests");
  tcase_set_timeout(req, 30);
  tcase_add_test(req, every_request_type_round_trips);
  tcase_add_test(req, request_fields_lie_where_specified);
  tcase_add_test(req, small_requests_lie_where_specified);
  tcase_add_test(req, l2_contains_sends_one_key_whatever_n);
  tcase_add_test(req, request_encoder_refuses_what_it_cannot_encode);
  tcase_add_test(req, every_truncated_request_is_refused);
  tcase_add_test(req, requests_with_trailing_bytes_are_refused);
  tcase_add_test(req, request_decoder_refuses_replies);
  tcase_add_test(req, key_counts_are_checked);
  tcase_add_test(req, at_most_max_keys_are_accepted);
  tcase_add_test(req, invalid_keys_are_refused);
  tcase_add_test(req, invalid_layouts_are_refused_where_used);
  tcase_add_test(req, request_ranges_are_checked);
  tcase_add_test(req, flags_are_0_or_1);
  tcase_add_test(req, tier_names_must_be_terminated);
  tcase_add_test(req, decoding_64_keys_allocates_nothing);
  suite_add_tcase(s, req);
  return s;
}
