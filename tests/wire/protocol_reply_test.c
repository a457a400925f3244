/*
 * protocol_reply_test.c — wire/protocol.h's replies: every reply type,
 * with a result >= 0 and a negative one, comes back from encode + decode
 * field for field (what its type and result do not send left untouched),
 * the bytes lie where protocol.h says, and every malformed reply is
 * refused with a reason: each truncation, trailing bytes, another number
 * of entries than keys asked, a reply to another request, spans outside
 * the pool, texts and tier names out of bounds, a tier's nodes more or
 * fewer than asked or out of range, a refusal that is no error; a READ's
 * layouts (runs of keys, each layout valid and its keys' spans its size,
 * sent only when asked for), a layout per key fitting a reply. The
 * header and requests: protocol_test.c.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/wire/frame_check.h"

static sample_rep want, got;

/* The reply types: every request type's, and P_REFUSED. */
static uint16_t reply_type(int i) {
  return i == P_TYPE_END - P_HELLO ? (uint16_t)P_REFUSED : (uint16_t)(P_HELLO + i);
}
#define NREPLY_TYPES (P_TYPE_END - P_HELLO + 1)

/* The request a reply of type t answers in these tests. */
static uint16_t asked(uint16_t t) {
  return t == P_REFUSED ? (uint16_t)P_HELLO : t;
}

static size_t put_sample(uint16_t t, uint32_t n, int32_t result, uint32_t text_len) {
  sample_rep_fill(&want, t, n, result, text_len);
  return frame_put_rep(&want.r);
}

/* ---- round trips ----------------------------------------------------------- */

START_TEST(every_reply_type_round_trips) {
  int32_t results[] = {0, 5, KVA_EIO};
  uint32_t ns[] = {0, 3, SAMPLE_MAX_N};
  uint32_t texts[] = {0, 17, PROTO_MAX_TEXT};
  for (int i = 0; i < NREPLY_TYPES; i++)
    for (int r = 0; r < 3; r++)
      for (int n = 0; n < 3; n++)
        for (int x = 0; x < 3; x++) {
          uint16_t t = reply_type(i);
          if (t == P_REFUSED && results[r] >= 0) continue;
          sample_rep_fill(&want, t, ns[n], results[r], texts[x]);
          frame_assert_rep_round_trips(&want, asked(t));
        }
}
END_TEST

START_TEST(memcheck_report_travels_with_a_negative_result) {
  put_sample(P_MEMCHECK, 0, KVA_EIO, 40);
  frame_assert_rep_round_trips(&want, P_MEMCHECK);
}
END_TEST

START_TEST(a_refusal_answers_any_request) {
  for (uint16_t t = P_HELLO; t < P_TYPE_END; t++) {
    sample_rep_fill(&want, P_REFUSED, 2, KVA_ECONFIG, 11);
    memcpy(want.text, "old version", 11);
    frame_assert_rep_round_trips(&want, t); /* its r->type becomes P_REFUSED */
  }
}
END_TEST

START_TEST(a_refusal_of_another_version_still_decodes) {
  size_t size = put_sample(P_REFUSED, 0, KVA_EINVAL, 9);
  proto_hdr h;
  frame_buf[4] = PROTO_VERSION + 1;
  ck_assert_int_eq(proto_hdr_get(frame_buf, &h, NULL, 0), PROTO_EVERSION);
  ck_assert_uint_eq(h.len, size - PROTO_HDR_BYTES);
  sample_rep_expect(&got, P_HELLO, 0);
  ck_assert_int_eq(proto_rep_get(&h, frame_payload(frame_buf), 0, &got.r, NULL, 0), PROTO_OK);
  ck_assert_uint_eq(got.r.type, P_REFUSED);
  ck_assert_int_eq(got.r.result, KVA_EINVAL);
  ck_assert_str_eq(got.text, "abcdefghi");
}
END_TEST

START_TEST(text_is_cut_to_the_callers_room) {
  size_t size = put_sample(P_MEMCHECK, 0, KVA_EIO, 100);
  sample_rep_expect(&got, P_MEMCHECK, 0);
  got.r.text_cap = 5;
  ck_assert_int_eq(frame_decode_rep(frame_buf, size, &got), PROTO_OK);
  ck_assert_str_eq(got.text, "abcd");
  ck_assert_uint_eq(got.r.text_len, 100);
  sample_rep_expect(&got, P_MEMCHECK, 0);
  got.r.text_cap = 0;
  ck_assert_int_eq(frame_decode_rep(frame_buf, size, &got), PROTO_OK);
  ck_assert_uint_eq((uint8_t)got.text[0], 0xee);
  got.r.text = NULL;
  got.r.text_cap = 64;
  ck_assert_int_eq(frame_decode_rep(frame_buf, size, &got), PROTO_OK);
  ck_assert_uint_eq(got.r.text_len, 100);
}
END_TEST

/* ---- bytes --------------------------------------------------------------- */

START_TEST(entries_lie_where_specified) {
  size_t size = put_sample(P_RESERVE_WRITE, 3, 2, 0);
  const uint8_t *p = frame_payload(frame_buf);
  ck_assert_uint_eq(frame_le32(frame_buf + 4) >> 16, P_RESERVE_WRITE | P_REPLY);
  ck_assert_uint_eq(size, PROTO_HDR_BYTES + 8 + 3 * (4 + 16));
  ck_assert_uint_eq(frame_le32(p), 2);
  ck_assert_uint_eq(frame_le32(p + 4), 3);
  for (uint32_t i = 0; i < 3; i++) {
    ck_assert_uint_eq(frame_le32(p + 8 + 4 * i), (uint32_t)want.status[i]);
    ck_assert_uint_eq(frame_le64(p + 20 + 16 * i), want.spans[i].off);
    ck_assert_uint_eq(frame_le64(p + 28 + 16 * i), want.spans[i].len);
  }
  ck_assert_uint_eq(put_sample(P_READ, 3, 0, 0), PROTO_HDR_BYTES + 8 + 3 * 16);
  ck_assert_uint_eq(put_sample(P_DELETE, 3, 0, 0), PROTO_HDR_BYTES + 8 + 3 * 4);
  ck_assert_uint_eq(put_sample(P_PREFETCH, 3, 0, 0), PROTO_HDR_BYTES + 12);
  ck_assert_uint_eq(frame_le64(frame_payload(frame_buf) + 4), want.r.hits);
}
END_TEST

START_TEST(stats_lie_in_declaration_order) {
  uint64_t *f[SAMPLE_STATS_U64], *g[SAMPLE_TIER_STATS_U64];
  ck_assert_uint_eq(put_sample(P_STATS, 0, 0, 0), PROTO_HDR_BYTES + 4 + 20 * 8 + 8 + 8);
  const uint8_t *p = frame_payload(frame_buf);
  sample_stats_fields(&want.stats, f);
  for (uint32_t i = 0; i < SAMPLE_STATS_U64; i++)
    ck_assert_uint_eq(frame_le64(p + 4 + 8 * i), *f[i]);
  ck_assert_uint_eq(frame_le32(p + 164), 1);          /* l1_pinned */
  ck_assert_uint_eq(frame_le32(p + 168), UINT32_MAX); /* l1_numa_node -1 */
  ck_assert_uint_eq(frame_le64(p + 172), want.stats.l2_skipped_slow_keys);
  ck_assert_uint_eq(put_sample(P_TIER_STATS, 0, 0, 0),
                    PROTO_HDR_BYTES + 4 + 4 * 8 + 4 + 10 * 8 + 5 * 8);
  sample_tier_stats_fields(&want.tier_stats, g);
  for (uint32_t i = 0; i < 4; i++) ck_assert_uint_eq(frame_le64(p + 4 + 8 * i), *g[i]);
  ck_assert_uint_eq(frame_le32(p + 36), 1);                /* bypassed */
  for (uint32_t i = 4; i < SAMPLE_TIER_STATS_U64 - 1; i++) /* up to queued_bytes */
    ck_assert_uint_eq(frame_le64(p + 40 + 8 * (i - 4)), *g[i]);
  ck_assert_uint_eq(frame_le64(p + 40 + 14 * 8),
                    *g[SAMPLE_TIER_STATS_U64 - 1]); /* after the doubles */
  double rate;
  memcpy(&rate, p + 40 + 12 * 8, sizeof rate); /* after skipped_slow_keys, queued_bytes */
  ck_assert(rate == want.tier_stats.bytes_per_s);
}
END_TEST

/* TIER_KEYS: kva_l2_tier_keys' 11 u64 in declaration order. */
START_TEST(tier_keys_lie_in_declaration_order) {
  uint64_t *k[SAMPLE_TIER_KEYS_U64];
  ck_assert_uint_eq(put_sample(P_TIER_KEYS, 0, 0, 0), PROTO_HDR_BYTES + 4 + 11 * 8);
  const uint8_t *p = frame_payload(frame_buf);
  sample_tier_keys_fields(&want.tier_keys, k);
  for (uint32_t i = 0; i < SAMPLE_TIER_KEYS_U64; i++)
    ck_assert_uint_eq(frame_le64(p + 4 + 8 * i), *k[i]);
}
END_TEST

/* Offsets in a TIER_NODES payload: result, nodes, count, map_age_s, then
 * entries of NODE bytes. */
#define NODES_AT 20u
#define NODE (272u + 4 + 4 + 8 + 3 * 8)

START_TEST(tier_nodes_lie_where_specified) {
  size_t size = put_sample(P_TIER_NODES, 0, 0, 0); /* 5 nodes, 4 asked for */
  const uint8_t *p = frame_payload(frame_buf);
  ck_assert_uint_eq(size, PROTO_HDR_BYTES + NODES_AT + SAMPLE_NODES_CAP * NODE);
  ck_assert_uint_eq(frame_le32(p + 4), SAMPLE_NODES_CAP + 1);
  ck_assert_uint_eq(frame_le32(p + 8), SAMPLE_NODES_CAP);
  double age;
  memcpy(&age, p + 12, 8);
  ck_assert(age == 0.125);
  for (uint32_t i = 0; i < SAMPLE_NODES_CAP; i++) {
    const uint8_t *e = p + NODES_AT + NODE * i;
    const kva_l2_node_stats *n = &want.nodes[i];
    ck_assert_mem_eq(e, n->addr, 272); /* junk past its NUL too */
    ck_assert_uint_eq(frame_le32(e + 272), (uint32_t)n->state);
    ck_assert_uint_eq(frame_le32(e + 276), n->slots);
    memcpy(&age, e + 280, 8);
    ck_assert(age == n->failed_s);
    ck_assert_uint_eq(frame_le64(e + 288), n->outages);
    ck_assert_uint_eq(frame_le64(e + 296), n->failures);
    ck_assert_uint_eq(frame_le64(e + 304), n->failed_cmds);
  }
  want.r.nodes_n = 2; /* fewer than asked: all of them */
  ck_assert_uint_eq(frame_put_rep(&want.r), PROTO_HDR_BYTES + NODES_AT + 2 * NODE);
  frame_assert_rep_round_trips(&want, P_TIER_NODES);
  want.r.nodes_n = 0;
  want.r.map_age_s = -1; /* no map */
  ck_assert_uint_eq(frame_put_rep(&want.r), PROTO_HDR_BYTES + NODES_AT);
  frame_assert_rep_round_trips(&want, P_TIER_NODES);
}
END_TEST

START_TEST(welcome_and_lookup_lie_where_specified) {
  ck_assert_uint_eq(put_sample(P_HELLO, 0, 0, 0), PROTO_HDR_BYTES + 20);
  const uint8_t *p = frame_payload(frame_buf);
  ck_assert_uint_eq(frame_le32(frame_buf + 4) >> 16, P_WELCOME);
  ck_assert_uint_eq(frame_le64(p + 4), SAMPLE_POOL_BYTES);
  ck_assert_uint_eq(frame_le32(p + 12), 999);
  ck_assert_uint_eq(frame_le32(p + 16), PROTO_MAX_KEYS);
  ck_assert_uint_eq(put_sample(P_LOOKUP, 0, 0, 0), PROTO_HDR_BYTES + 16 + 8 * 40);
  ck_assert_uint_eq(frame_le64(p + 4), want.lookup.total);
  ck_assert_uint_eq(frame_le32(p + 12), 8);
  for (uint32_t i = 0; i < 8; i++) {
    ck_assert_mem_eq(p + 16 + 40 * i, want.lookup.tier[i].name, 32);
    ck_assert_uint_eq(frame_le64(p + 48 + 40 * i), want.lookup.tier[i].hits);
  }
}
END_TEST

START_TEST(texts_lie_after_their_length) {
  uint16_t types[] = {P_MEMCHECK, P_REFUSED};
  for (int i = 0; i < 2; i++) {
    size_t counts = types[i] == P_MEMCHECK ? 40 : 0; /* MEMCHECK's 5 u64 come first */
    ck_assert_uint_eq(put_sample(types[i], 0, KVA_EIO, 5), PROTO_HDR_BYTES + 8 + counts + 5);
    const uint8_t *p = frame_payload(frame_buf);
    ck_assert_uint_eq(frame_le32(frame_buf + 4) >> 16,
                      types[i] == P_REFUSED ? P_REFUSED : P_MEMCHECK | P_REPLY);
    ck_assert_uint_eq(frame_le32(p), (uint32_t)KVA_EIO);
    ck_assert_uint_eq(frame_le32(p + 4 + counts), 5);
    ck_assert_mem_eq(p + 8 + counts, "abcde", 5);
  }
}
END_TEST

/* MEMCHECK's counts: kva_memcheck_report's u64 in declaration order,
 * whatever the result; a sender without counts sends zeros, a receiver
 * without room skips them. */
START_TEST(memcheck_counts_follow_the_result_in_declaration_order) {
  put_sample(P_MEMCHECK, 0, KVA_EIO, 0);
  const uint8_t *p = frame_payload(frame_buf);
  ck_assert_uint_eq(frame_le64(p + 4), want.memcheck.caller_write_locked);
  ck_assert_uint_eq(frame_le64(p + 12), want.memcheck.caller_read_locked);
  ck_assert_uint_eq(frame_le64(p + 20), want.memcheck.caller_pinned);
  ck_assert_uint_eq(frame_le64(p + 28), want.memcheck.store_read_locked);
  ck_assert_uint_eq(frame_le64(p + 36), want.memcheck.l2_keys_locked);
  want.r.memcheck = NULL;
  size_t size = frame_put_rep(&want.r);
  for (size_t i = 0; i < 40; i++) ck_assert_uint_eq(frame_payload(frame_buf)[4 + i], 0);
  sample_rep_expect(&got, P_MEMCHECK, 0);
  got.r.memcheck = NULL;
  ck_assert_int_eq(frame_decode_rep(frame_buf, size, &got), PROTO_OK);
  ck_assert_int_eq(got.r.result, KVA_EIO);
}
END_TEST

START_TEST(a_negative_result_ends_the_payload) {
  for (uint16_t t = P_HELLO; t < P_TYPE_END; t++) {
    if (t == P_MEMCHECK) continue;
    ck_assert_uint_eq(put_sample(t, 3, KVA_ESHUTDOWN, 9), PROTO_HDR_BYTES + 4);
    ck_assert_uint_eq(frame_le32(frame_payload(frame_buf)), (uint32_t)KVA_ESHUTDOWN);
    frame_assert_rep_round_trips(&want, t); /* and every output untouched */
  }
}
END_TEST

START_TEST(reply_encoder_refuses_what_it_cannot_encode) {
  sample_rep_fill(&want, P_READ, 2, 0, 0);
  size_t size = proto_rep_size(&want.r);
  ck_assert_uint_eq(proto_rep_put(frame_buf, size - 1, &want.r, 1), 0);
  ck_assert_uint_eq(proto_rep_put(frame_buf, size, &want.r, 1), size);
  proto_rep r = want.r;
  r.spans = NULL;
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  r.result = -1; /* sends no spans */
  ck_assert_uint_gt(proto_rep_size(&r), 0);
  r = want.r;
  r.n = PROTO_MAX_KEYS + 1;
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  r = want.r;
  r.type = P_FINISH_WRITE;
  r.status = NULL;
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  r.n = 0;
  ck_assert_uint_gt(proto_rep_size(&r), 0);
  r = want.r;
  r.type = P_LOOKUP;
  r.lookup = NULL;
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  r.lookup = &want.lookup;
  want.lookup.ntiers = 9;
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  r = want.r;
  r.type = P_STATS;
  r.stats = NULL;
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  r.type = P_TIER_STATS;
  r.tier_stats = NULL;
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  r.type = P_TIER_KEYS;
  r.tier_keys = NULL;
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  r = want.r;
  r.type = P_TIER_NODES;
  r.nodes = NULL; /* entries to send */
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  r.nodes_cap = 0; /* none asked for */
  ck_assert_uint_gt(proto_rep_size(&r), 0);
  r.nodes = want.nodes;
  r.nodes_cap = PROTO_MAX_NODES + 1;
  r.nodes_n = 1;
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  r = want.r;
  r.type = P_MEMCHECK;
  r.text_len = PROTO_MAX_TEXT + 1;
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  r.text_len = 1;
  r.text = NULL;
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  r = want.r;
  r.type = P_REFUSED; /* with result 0: no error */
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  uint16_t types[] = {0, P_TYPE_END, P_WELCOME, P_READ | P_REPLY};
  for (int i = 0; i < 4; i++) {
    r.type = types[i];
    ck_assert_uint_eq(proto_rep_put(frame_buf, sizeof frame_buf, &r, 1), 0);
  }
}
END_TEST

/* ---- refusals ------------------------------------------------------------ */

START_TEST(every_truncated_reply_is_refused) {
  int32_t results[] = {0, KVA_EIO};
  for (int i = 0; i < NREPLY_TYPES; i++)
    for (int r = 0; r < 2; r++) {
      uint16_t t = reply_type(i);
      if (t == P_REFUSED && results[r] >= 0) continue;
      size_t size = put_sample(t, 3, results[r], 6);
      for (uint32_t len = 0; len < size - PROTO_HDR_BYTES; len++)
        frame_assert_rep_refused(frame_buf, frame_set_len(frame_buf, len), asked(t), 3,
                                 "truncated");
    }
}
END_TEST

START_TEST(replies_with_trailing_bytes_are_refused) {
  for (int i = 0; i < NREPLY_TYPES; i++) {
    uint16_t t = reply_type(i);
    size_t size = put_sample(t, 3, t == P_REFUSED ? KVA_EIO : 0, 6);
    frame_buf[size] = 'x';
    uint32_t len = (uint32_t)(size - PROTO_HDR_BYTES);
    frame_assert_rep_refused(frame_buf, frame_set_len(frame_buf, len + 1), asked(t), 3,
                             "one byte more");
    if (t == P_REFUSED || t == P_MEMCHECK || size == PROTO_HDR_BYTES + 4) continue;
    frame_set_le32(frame_payload(frame_buf), (uint32_t)KVA_EIO); /* and its per-type part */
    frame_assert_rep_refused(frame_buf, frame_set_len(frame_buf, len), t, 3,
                             "a negative result and more");
  }
}
END_TEST

START_TEST(entries_must_match_the_keys_asked) {
  uint16_t types[] = {P_RESERVE_WRITE, P_FINISH_WRITE, P_ABORT_WRITE, P_DELETE, P_READ};
  for (int i = 0; i < 5; i++) {
    size_t size = put_sample(types[i], 3, 0, 0);
    frame_assert_rep_refused(frame_buf, size, types[i], 2, "3 entries, 2 keys");
    frame_assert_rep_refused(frame_buf, size, types[i], 4, "3 entries, 4 keys");
    frame_set_le32(frame_payload(frame_buf) + 4, 4);
    frame_assert_rep_refused(frame_buf, size, types[i], 4, "4 entries, room for 3");
    size = put_sample(types[i], 4, 0, 0);
    frame_set_le32(frame_payload(frame_buf) + 4, 3);
    frame_assert_rep_refused(frame_buf, size, types[i], 4, "3 entries, 4 keys, bytes for 4");
  }
}
END_TEST

START_TEST(a_reply_must_answer_the_request) {
  size_t size = put_sample(P_FINISH_WRITE, 2, 0, 0);
  frame_assert_rep_refused(frame_buf, size, P_ABORT_WRITE, 2, "another request's reply");
  uint16_t invalid[] = {0, P_TYPE_END, P_REFUSED, P_FINISH_WRITE | P_REPLY};
  for (int i = 0; i < 4; i++)
    frame_assert_rep_refused(frame_buf, size, invalid[i], 2, "no request expected");
  frame_fill_keys(2);
  proto_req r = sample_req(P_FINISH_WRITE, frame_keys, 2);
  size = frame_put_req(&r);
  frame_assert_rep_refused(frame_buf, size, P_FINISH_WRITE, 2, "a request");
}
END_TEST

/* A READ reply of one span (off, len): accepted or refused as ok says. */
static void check_span(uint64_t off, uint64_t len, bool ok) {
  sample_rep_fill(&want, P_READ, 1, 0, 0);
  want.spans[0] = (proto_span){off, len};
  size_t size = frame_put_rep(&want.r);
  if (ok) {
    frame_assert_rep_round_trips(&want, P_READ);
  } else {
    frame_assert_rep_refused(frame_buf, size, P_READ, 1, "span outside the pool");
  }
}

START_TEST(spans_must_lie_inside_the_pool) {
  check_span(0, 0, true);
  check_span(0, SAMPLE_POOL_BYTES, true);
  check_span(SAMPLE_POOL_BYTES - 1, 1, true);
  check_span(SAMPLE_POOL_BYTES - 100, 101, false);
  check_span(SAMPLE_POOL_BYTES, 1, false);
  check_span(SAMPLE_POOL_BYTES + 1, 0, false);
  check_span(64, 0, false);             /* no bytes: offset 0 */
  check_span(UINT64_MAX - 1, 4, false); /* off + len wraps */
  check_span(8, UINT64_MAX, false);
  check_span(UINT64_MAX, UINT64_MAX, false);
}
END_TEST

START_TEST(texts_are_checked) {
  uint16_t types[] = {P_MEMCHECK, P_REFUSED};
  for (int i = 0; i < 2; i++) {
    uint16_t t = types[i];
    size_t size = put_sample(t, 0, KVA_EIO, PROTO_MAX_TEXT);
    uint8_t *p = frame_payload(frame_buf);
    p[8 + 100] = '\0';
    frame_assert_rep_refused(frame_buf, size, asked(t), 0, "NUL in the text");
    put_sample(t, 0, KVA_EIO, PROTO_MAX_TEXT);
    frame_buf[size] = 'y';
    frame_set_le32(p + 4, PROTO_MAX_TEXT + 1);
    frame_assert_rep_refused(frame_buf, frame_set_len(frame_buf, 8 + PROTO_MAX_TEXT + 1), asked(t),
                             0, "text over PROTO_MAX_TEXT");
    frame_set_le32(p + 4, 101);
    frame_assert_rep_refused(frame_buf, frame_set_len(frame_buf, 8 + 100), asked(t), 0,
                             "text longer than the payload");
  }
}
END_TEST

START_TEST(lookup_tiers_are_checked) {
  size_t size = put_sample(P_LOOKUP, 0, 0, 0);
  uint8_t *p = frame_payload(frame_buf);
  memset(p + 16 + 40 * 3, 'z', 32);
  frame_assert_rep_refused(frame_buf, size, P_LOOKUP, 0, "tier name without NUL");
  put_sample(P_LOOKUP, 0, 0, 0);
  memcpy(frame_buf + size, p + 16, 40); /* a ninth tier */
  frame_set_le32(p + 12, 9);
  frame_assert_rep_refused(frame_buf, frame_set_len(frame_buf, 16 + 9 * 40), P_LOOKUP, 0,
                           "9 tiers");
  frame_set_le32(p + 12, 7);
  frame_assert_rep_refused(frame_buf, frame_set_len(frame_buf, 16 + 8 * 40), P_LOOKUP, 0,
                           "7 tiers and one more");
}
END_TEST

/* A TIER_NODES reply whose field at payload offset off is set to the u32
 * v (or, with bits, the double d's bits): refused. */
static void refuse_nodes(size_t off, uint32_t v, const char *what) {
  size_t size = put_sample(P_TIER_NODES, 0, 0, 0);
  frame_set_le32(frame_payload(frame_buf) + off, v);
  frame_assert_rep_refused(frame_buf, size, P_TIER_NODES, 0, what);
}

static void refuse_nodes_f64(size_t off, double d, const char *what) {
  size_t size = put_sample(P_TIER_NODES, 0, 0, 0);
  memcpy(frame_payload(frame_buf) + off, &d, 8);
  frame_assert_rep_refused(frame_buf, size, P_TIER_NODES, 0, what);
}

START_TEST(tier_nodes_are_checked) {
  refuse_nodes(4, 3, "3 nodes, 4 entries");
  refuse_nodes(8, 3, "3 entries of 5 nodes, 4 asked for");
  refuse_nodes(8, 5, "5 entries, 4 asked for");
  refuse_nodes(8, UINT32_MAX, "2^32 - 1 entries");
  refuse_nodes(NODES_AT + 272, 3, "state 3");
  refuse_nodes(NODES_AT + NODE + 272, UINT32_MAX, "state -1");
  refuse_nodes_f64(12, -2, "map age -2");
  refuse_nodes_f64(12, NAN, "map age NaN");
  refuse_nodes_f64(12, INFINITY, "map age infinite");
  refuse_nodes_f64(NODES_AT + 280, -0.5, "failed_s < 0");
  refuse_nodes_f64(NODES_AT + 2 * NODE + 280, NAN, "failed_s NaN");
  size_t size = put_sample(P_TIER_NODES, 0, 0, 0);
  memset(frame_payload(frame_buf) + NODES_AT + 3 * NODE, 'z', 272);
  frame_assert_rep_refused(frame_buf, size, P_TIER_NODES, 0, "address without NUL");
  /* the same reply to a request of another cap: another count is due */
  put_sample(P_TIER_NODES, 0, 0, 0);
  sample_rep_expect(&got, P_TIER_NODES, 0);
  got.r.nodes_cap = SAMPLE_NODES_CAP - 1;
  ck_assert_int_eq(frame_decode_rep(frame_buf, size, &got), PROTO_EFRAME);
  got.r.nodes_cap = SAMPLE_NODES_CAP + 1;
  ck_assert_int_eq(frame_decode_rep(frame_buf, size, &got), PROTO_EFRAME);
}
END_TEST

/* A caller with nowhere to put the nodes (a client's late reply): checked
 * all the same, the count and map age given. */
START_TEST(tier_nodes_without_room_are_checked_and_skipped) {
  size_t size = put_sample(P_TIER_NODES, 0, 0, 0);
  sample_rep_expect(&got, P_TIER_NODES, 0);
  got.r.nodes = NULL;
  ck_assert_int_eq(frame_decode_rep(frame_buf, size, &got), PROTO_OK);
  ck_assert_uint_eq(got.r.nodes_n, SAMPLE_NODES_CAP + 1);
  ck_assert(got.r.map_age_s == 0.125);
  frame_set_le32(frame_payload(frame_buf) + NODES_AT + 272, 7);
  sample_rep_expect(&got, P_TIER_NODES, 0);
  got.r.nodes = NULL;
  ck_assert_int_eq(frame_decode_rep(frame_buf, size, &got), PROTO_EFRAME);
}
END_TEST

/* PROTO_MAX_NODES entries fit a frame and come back; a caller asking for
 * more gets no more. */
START_TEST(at_most_max_nodes_travel) {
  static kva_l2_node_stats many[PROTO_MAX_NODES], back[PROTO_MAX_NODES];
  for (uint32_t i = 0; i < PROTO_MAX_NODES; i++) {
    memset(&many[i], 0, sizeof many[i]);
    snprintf(many[i].addr, sizeof many[i].addr, "10.0.%u.%u:6379", i / 256, i % 256);
    many[i].slots = i;
  }
  proto_rep r = {.type = P_TIER_NODES,
                 .nodes = many,
                 .nodes_n = 5000,
                 .nodes_cap = PROTO_MAX_NODES,
                 .map_age_s = 3};
  size_t size = proto_rep_size(&r);
  ck_assert_uint_eq(size, PROTO_HDR_BYTES + NODES_AT + (size_t)PROTO_MAX_NODES * NODE);
  uint8_t *buf = malloc(size);
  ck_assert_ptr_nonnull(buf);
  ck_assert_uint_eq(proto_rep_put(buf, size, &r, 1), size);
  proto_hdr h;
  ck_assert_int_eq(proto_hdr_get(buf, &h, NULL, 0), PROTO_OK);
  proto_rep g = {.type = P_TIER_NODES, .nodes = back, .nodes_cap = PROTO_MAX_NODES + 7};
  ck_assert_int_eq(proto_rep_get(&h, buf + PROTO_HDR_BYTES, 0, &g, frame_why, sizeof frame_why),
                   PROTO_OK);
  ck_assert_uint_eq(g.nodes_n, 5000);
  ck_assert_mem_eq(back, many, sizeof many);
  free(buf);
}
END_TEST

/* ---- READ's layouts --------------------------------------------------------- */

/* Offsets in the payload of a READ reply of n keys: result, n, spans, runs,
 * then runs of RUN bytes (count, layout). */
#define RUNS_AT(n) (8u + 16u * (n))
#define RUN (4u + PROTO_LAYOUT_BYTES)

static size_t put_read_layouts(uint32_t n, int32_t result) {
  sample_rep_read_layouts(&want, n, result);
  return frame_put_rep(&want.r);
}

START_TEST(read_layouts_round_trip) {
  int32_t results[] = {0, 5, KVA_EIO};
  uint32_t ns[] = {0, 1, 3, SAMPLE_MAX_N};
  for (int r = 0; r < 3; r++)
    for (int n = 0; n < 4; n++) {
      sample_rep_read_layouts(&want, ns[n], results[r]);
      frame_assert_rep_round_trips(&want, P_READ);
    }
  sample_rep_read_layouts(&want, 3, KVA_KEY_NOT_READABLE); /* a read that failed */
  memset(want.spans, 0, sizeof want.spans);
  frame_assert_rep_round_trips(&want, P_READ); /* no layout travels: zeros */
}
END_TEST

/* Keys 0..4 have layouts 0, 0, 1, 1, 2: three runs. */
START_TEST(read_layouts_lie_where_specified) {
  size_t size = put_read_layouts(5, 0);
  const uint8_t *p = frame_payload(frame_buf);
  ck_assert_uint_eq(size, PROTO_HDR_BYTES + RUNS_AT(5) + 4 + 3 * RUN);
  ck_assert_uint_eq(frame_le32(p + RUNS_AT(5)), 3);
  uint32_t counts[] = {2, 2, 1}, first[] = {0, 2, 4};
  for (uint32_t j = 0; j < 3; j++) {
    const uint8_t *run = p + RUNS_AT(5) + 4 + RUN * j;
    const kva_layout *l = &want.layouts[first[j]];
    ck_assert_uint_eq(frame_le32(run), counts[j]);
    ck_assert_uint_eq(frame_le32(run + 4), l->ntensors);
    ck_assert_uint_eq(frame_le32(run + 8), l->tensor[0].ndim);
    ck_assert_uint_eq(frame_le32(run + 12), (uint32_t)l->tensor[0].dtype);
    ck_assert_uint_eq(frame_le64(run + 16), l->tensor[0].shape[0]);
  }
  for (uint32_t i = 0; i < 5; i++)
    ck_assert_uint_eq(frame_le64(p + 16 + 16 * i), kva_layout_bytes(&want.layouts[i]));
  put_read_layouts(3, KVA_KEY_NOT_EXIST); /* failed: no span has bytes, no run */
  memset(want.spans, 0, sizeof want.spans);
  ck_assert_uint_eq(frame_put_rep(&want.r), PROTO_HDR_BYTES + RUNS_AT(3) + 4);
  ck_assert_uint_eq(frame_le32(p + RUNS_AT(3)), 0);
}
END_TEST

/* A READ reply of 5 keys (runs of 2, 2, 1) with the u32 at payload
 * offset off set to v: refused. */
static void refuse_read_u32(size_t off, uint32_t v, const char *what) {
  size_t size = put_read_layouts(5, 0);
  frame_set_le32(frame_payload(frame_buf) + off, v);
  frame_assert_read_refused(frame_buf, size, 5, what);
}

START_TEST(read_layouts_are_checked) {
  size_t runs = RUNS_AT(5), run0 = runs + 4, run2 = run0 + 2 * RUN;
  refuse_read_u32(runs, 4, "4 runs sent as 3");
  refuse_read_u32(runs, 6, "6 runs for 5 keys");
  refuse_read_u32(runs, UINT32_MAX, "2^32 - 1 runs");
  refuse_read_u32(run0, 0, "a run of no key");
  refuse_read_u32(run0, 3, "counts over n");
  refuse_read_u32(run2, 2, "the last run past n");
  refuse_read_u32(run0, UINT32_MAX, "a run of 2^32 - 1 keys");
  refuse_read_u32(run0 + 4, 0, "a layout of no tensor");
  refuse_read_u32(run0 + 12, 99, "a dtype that is none");
  refuse_read_u32(runs, 0, "no run, spans with bytes");
  size_t size = put_read_layouts(5, 0); /* runs of 2 and 3 keys: the counts short of n */
  frame_set_le32(frame_payload(frame_buf) + runs, 2);
  frame_set_le32(frame_payload(frame_buf) + run0 + RUN, 2);
  frame_assert_read_refused(frame_buf, frame_set_len(frame_buf, (uint32_t)run2), 5,
                            "runs of 4 keys for 5");
  size = put_read_layouts(5, 0); /* runs 0 and 1 of one layout */
  memcpy(frame_payload(frame_buf) + run0 + RUN + 4, frame_payload(frame_buf) + run0 + 4,
         PROTO_LAYOUT_BYTES);
  frame_assert_read_refused(frame_buf, size, 5, "two runs alike");
  sample_rep_read_layouts(&want, 5, 0);
  want.spans[3].len++; /* not its layout's bytes */
  frame_assert_read_refused(frame_buf, frame_put_rep(&want.r), 5, "a span of another size");
  sample_rep_read_layouts(&want, 5, 0);
  want.spans[1] = (proto_span){0, 0}; /* one key without bytes among others */
  frame_assert_read_refused(frame_buf, frame_put_rep(&want.r), 5, "an empty span in a run");
}
END_TEST

/* The reply's shape is the request's: with layouts when it asked for
 * them, without when it did not. */
START_TEST(read_layouts_come_when_asked_only) {
  size_t size = put_read_layouts(3, 0);
  frame_assert_rep_refused(frame_buf, size, P_READ, 3, "layouts not asked for");
  size = put_sample(P_READ, 3, 0, 0);
  frame_assert_read_refused(frame_buf, size, 3, "no layouts, asked for");
  size = put_read_layouts(3, 0);
  for (uint32_t len = 0; len < size - PROTO_HDR_BYTES; len++)
    frame_assert_read_refused(frame_buf, frame_set_len(frame_buf, len), 3, "truncated");
  size = put_read_layouts(3, 0);
  frame_buf[size] = 'x';
  frame_assert_read_refused(frame_buf,
                            frame_set_len(frame_buf, (uint32_t)(size - PROTO_HDR_BYTES) + 1), 3,
                            "one byte more");
  ck_assert_uint_eq(put_read_layouts(3, KVA_EIO), PROTO_HDR_BYTES + 4); /* none: an error */
  frame_assert_rep_round_trips(&want, P_READ);
}
END_TEST

/* A caller with nowhere to put the layouts (a client's late reply):
 * checked all the same. */
START_TEST(read_layouts_without_room_are_checked_and_skipped) {
  size_t size = put_read_layouts(5, 0);
  sample_rep_expect(&got, P_READ, 5);
  got.r.layouts_asked = 1;
  got.r.layouts = NULL;
  ck_assert_int_eq(frame_decode_rep(frame_buf, size, &got), PROTO_OK);
  ck_assert_uint_eq(got.spans[4].len, want.spans[4].len);
  frame_set_le32(frame_payload(frame_buf) + RUNS_AT(5) + 4, 0);
  sample_rep_expect(&got, P_READ, 5);
  got.r.layouts_asked = 1;
  got.r.layouts = NULL;
  ck_assert_int_eq(frame_decode_rep(frame_buf, size, &got), PROTO_EFRAME);
}
END_TEST

START_TEST(read_layouts_encoder_needs_them_where_spans_have_bytes) {
  sample_rep_read_layouts(&want, 3, 0);
  proto_rep r = want.r;
  r.layouts = NULL;
  ck_assert_uint_eq(proto_rep_size(&r), 0);
  memset(want.spans, 0, sizeof want.spans); /* a read that failed: none to send */
  ck_assert_uint_eq(proto_rep_size(&r), PROTO_HDR_BYTES + RUNS_AT(3) + 4);
  r.layouts_asked = 0;
  ck_assert_uint_eq(proto_rep_size(&r), PROTO_HDR_BYTES + RUNS_AT(3));
}
END_TEST

/* PROTO_MAX_KEYS keys, no two of one layout: a layout per key fits a
 * reply frame and comes back. */
START_TEST(a_layout_per_key_fits_a_reply) {
  static kva_layout many[PROTO_MAX_KEYS], back[PROTO_MAX_KEYS];
  static proto_span spans[PROTO_MAX_KEYS], back_spans[PROTO_MAX_KEYS];
  for (uint32_t i = 0; i < PROTO_MAX_KEYS; i++) {
    memset(&many[i], 0, sizeof many[i]);
    many[i].ntensors = 1;
    many[i].tensor[0].ndim = 1;
    many[i].tensor[0].dtype = KVA_DT_U8;
    many[i].tensor[0].shape[0] = 1 + i;
    spans[i] = (proto_span){(uint64_t)i << 17, 1 + i};
  }
  proto_rep r = {
      .type = P_READ, .n = PROTO_MAX_KEYS, .spans = spans, .layouts_asked = 1, .layouts = many};
  size_t size = proto_rep_size(&r);
  ck_assert_uint_eq(size, PROTO_HDR_BYTES + RUNS_AT(PROTO_MAX_KEYS) + 4 + PROTO_MAX_KEYS * RUN);
  ck_assert_uint_le(size - PROTO_HDR_BYTES, PROTO_MAX_REPLY_PAYLOAD);
  uint8_t *buf = malloc(size);
  ck_assert_ptr_nonnull(buf);
  ck_assert_uint_eq(proto_rep_put(buf, size, &r, 1), size);
  proto_hdr h;
  ck_assert_int_eq(proto_hdr_get(buf, &h, NULL, 0), PROTO_OK);
  proto_rep g = {.type = P_READ,
                 .n = PROTO_MAX_KEYS,
                 .spans = back_spans,
                 .layouts_asked = 1,
                 .layouts = back};
  ck_assert_int_eq(
      proto_rep_get(&h, buf + PROTO_HDR_BYTES, UINT64_C(1) << 40, &g, frame_why, sizeof frame_why),
      PROTO_OK);
  ck_assert_mem_eq(back, many, sizeof many);
  free(buf);
}
END_TEST

START_TEST(a_refusal_must_carry_an_error) {
  int32_t codes[] = {0, 1, INT32_MAX};
  for (int i = 0; i < 3; i++) {
    size_t size = put_sample(P_REFUSED, 0, KVA_EINVAL, 4);
    frame_set_le32(frame_payload(frame_buf), (uint32_t)codes[i]);
    frame_assert_rep_refused(frame_buf, size, P_HELLO, 0, "refusal with no error");
  }
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("protocol_reply");
  TCase *rt = tcase_create("round_trips");
  tcase_set_timeout(rt, 30);
  tcase_add_test(rt, every_reply_type_round_trips);
  tcase_add_test(rt, memcheck_report_travels_with_a_negative_result);
  tcase_add_test(rt, a_refusal_answers_any_request);
  tcase_add_test(rt, a_refusal_of_another_version_still_decodes);
  tcase_add_test(rt, text_is_cut_to_the_callers_room);
  tcase_add_test(rt, entries_lie_where_specified);
  tcase_add_test(rt, stats_lie_in_declaration_order);
  tcase_add_test(rt, tier_keys_lie_in_declaration_order);
  tcase_add_test(rt, tier_nodes_lie_where_specified);
  tcase_add_test(rt, at_most_max_nodes_travel);
  tcase_add_test(rt, welcome_and_lookup_lie_where_specified);
  tcase_add_test(rt, texts_lie_after_their_length);
  tcase_add_test(rt, memcheck_counts_follow_the_result_in_declaration_order);
  tcase_add_test(rt, a_negative_result_ends_the_payload);
  tcase_add_test(rt, reply_encoder_refuses_what_it_cannot_encode);
  suite_add_tcase(s, rt);
  TCase *bad = tcase_create("refusals");
  tcase_set_timeout(bad, 30);
  tcase_add_test(bad, every_truncated_reply_is_refused);
  tcase_add_test(bad, replies_with_trailing_bytes_are_refused);
  tcase_add_test(bad, entries_must_match_the_keys_asked);
  tcase_add_test(bad, a_reply_must_answer_the_request);
  tcase_add_test(bad, spans_must_lie_inside_the_pool);
  tcase_add_test(bad, texts_are_checked);
  tcase_add_test(bad, lookup_tiers_are_checked);
  tcase_add_test(bad, tier_nodes_are_checked);
  tcase_add_test(bad, tier_nodes_without_room_are_checked_and_skipped);
  tcase_add_test(bad, a_refusal_must_carry_an_error);
  suite_add_tcase(s, bad);
  TCase *lay = tcase_create("read_layouts");
  tcase_set_timeout(lay, 30);
  tcase_add_test(lay, read_layouts_round_trip);
  tcase_add_test(lay, read_layouts_lie_where_specified);
  tcase_add_test(lay, read_layouts_are_checked);
  tcase_add_test(lay, read_layouts_come_when_asked_only);
  tcase_add_test(lay, read_layouts_without_room_are_checked_and_skipped);
  tcase_add_test(lay, read_layouts_encoder_needs_them_where_spans_have_bytes);
  tcase_add_test(lay, a_layout_per_key_fits_a_reply);
  suite_add_tcase(s, lay);
  return s;
}
