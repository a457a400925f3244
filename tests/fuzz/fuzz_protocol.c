/*
 * fuzz_protocol.c — libFuzzer target for the decoders of multi-process
 * mode's frames (wire/protocol.h): whatever bytes a peer sends, the
 * header decoder, the request decoder (the daemon's) and the reply
 * decoder (the client's, expecting the reply to a request it names) never
 * read outside the frame, and what they accept is valid and encodes back
 * to the very same bytes; what they refuse says why.
 *
 * Input: [flags][expect][n: u32][pool_bytes: u64][frame: the rest]. The
 * frame's first 24 bytes are its header (zeros past the input's end);
 * flag 1 writes the bytes that follow into its len, so the fuzzer gets
 * past the length check. The payload is the first len of those bytes, in
 * a buffer of exactly that size (ASan sees any overread); a longer len is
 * a frame still arriving, not decoded. The reply decoder expects the reply
 * to request type expect (0: the frame's own), with n keys (modulo
 * PROTO_MAX_KEYS + 1; a TIER_NODES request's cap is n modulo
 * PROTO_MAX_NODES + 1), spans inside pool_bytes and, with flag 2, a READ
 * that asked for layouts (PROTO_READ_LAYOUTS). Checked:
 *  - each decoder answers PROTO_OK or one of its refusals, and the same
 *    with why NULL or 1 byte long (then terminated);
 *  - a request is accepted only with a request type, a reply only as the
 *    expected reply or P_REFUSED (also of another version);
 *  - an accepted request has valid keys (kva_key_valid), layouts where
 *    used, fields in range, terminated tier names; an accepted reply has
 *    n entries, spans inside the pool, a READ's layouts valid and each
 *    its span's size (or all zero and no span with bytes), at most 8
 *    tiers with terminated
 *    names, min(nodes, cap) nodes with terminated addresses, states
 *    KVA_L2_NODE_*, failed_s >= 0 and a map age >= 0 or -1, a text
 *    without NUL; both re-encode to the frame's bytes.
 *
 * Build: bazel build //tests/fuzz:fuzz_protocol; run: tests/fuzz/run_fuzz.sh.
 * Seeds: tests/fuzz/fuzz_seeds.c.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvact.h"
#include "tests/fuzz/fuzz.h"
#include "wire/protocol.h"

enum { FIX_LEN = 1, READ_LAYOUTS = 2 };

static kva_key keys[PROTO_MAX_KEYS];
static int32_t status[PROTO_MAX_KEYS];
static proto_span spans[PROTO_MAX_KEYS];
static kva_layout layouts[PROTO_MAX_KEYS];
static kva_l2_node_stats nodes[PROTO_MAX_NODES];

static uint32_t le32(const uint8_t *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* The same answer without a reason and with 1 byte for it. */
static void check_why(int rc, const char *why, int rc_null, int rc_tiny, const char *tiny) {
  FUZZ_CHECK(rc_null == rc && rc_tiny == rc);
  if (rc == PROTO_OK) return;
  FUZZ_CHECK(memchr(why, '\0', 256) != NULL && why[0] != '\0');
  FUZZ_CHECK(tiny[0] == '\0');
}

static int check_hdr(const uint8_t *b, proto_hdr *h) {
  char why[256], tiny[1] = {'x'};
  proto_hdr h2, h3;
  int rc = proto_hdr_get(b, h, why, sizeof why);
  FUZZ_CHECK(rc == PROTO_OK || rc == PROTO_EMAGIC || rc == PROTO_EVERSION || rc == PROTO_EFRAME);
  check_why(rc, why, proto_hdr_get(b, &h2, NULL, 0), proto_hdr_get(b, &h3, tiny, 1), tiny);
  return rc;
}

/* buf re-encoded from what was decoded: the same bytes, header and all
 * (the payload only after PROTO_EVERSION). */
static void check_encodes_to(const uint8_t *hdr, const uint8_t *p, uint32_t len, const proto_req *r,
                             const proto_rep *rep, bool version_ok) {
  size_t size = PROTO_HDR_BYTES + (size_t)len;
  uint8_t *again = malloc(size);
  FUZZ_CHECK(again != NULL);
  uint64_t id = le32(hdr + 16) | (uint64_t)le32(hdr + 20) << 32;
  size_t n = r ? proto_req_put(again, size, r, id) : proto_rep_put(again, size, rep, id);
  FUZZ_CHECK(n == size);
  FUZZ_CHECK(!version_ok || memcmp(again, hdr, PROTO_HDR_BYTES) == 0);
  FUZZ_CHECK(memcmp(again + PROTO_HDR_BYTES, p, len) == 0);
  free(again);
}

static bool sends_keys(uint16_t t) {
  return (t >= P_RESERVE_WRITE && t <= P_TOUCH) || (t >= P_PREFETCH && t <= P_UNPIN);
}

static void check_req_valid(const proto_req *r) {
  uint32_t n = r->type == P_L2_CONTAINS ? 1 : r->n;
  FUZZ_CHECK(sends_keys(r->type) ? n >= 1 && n <= PROTO_MAX_KEYS : n == (r->type == P_L2_CONTAINS));
  for (uint32_t i = 0; i < n; i++) FUZZ_CHECK(kva_key_valid(&r->keys[i]));
  /* PREFETCH's flag: bit 0 has_layout, bit 1 PROTO_PREFETCH_AS_PLANNED */
  if (r->type == P_RESERVE_WRITE || (r->type == P_PREFETCH && (r->flag & 1)))
    FUZZ_CHECK(kva_layout_bytes(&r->layout) > 0);
  FUZZ_CHECK(r->flag <= (r->type == P_PREFETCH ? 3u : 1u));
  FUZZ_CHECK(r->mode <= KVA_WRITE_ALL && r->readers <= 128);
  FUZZ_CHECK(r->readers >= 1 || (r->type != P_PREFETCH && r->type != P_FINISH_READ));
  FUZZ_CHECK(r->report_len <= PROTO_MAX_TEXT);
  FUZZ_CHECK(r->type == P_TIER_NODES ? r->cap <= PROTO_MAX_NODES : r->cap == 0);
  FUZZ_CHECK(memchr(r->tier, '\0', sizeof r->tier) != NULL);
}

static void check_req(const proto_hdr *h, const uint8_t *hdr, const uint8_t *p) {
  char why[256], tiny[1] = {'x'};
  proto_req r, r2, r3;
  int rc = proto_req_get(h, p, keys, PROTO_MAX_KEYS, &r, why, sizeof why);
  FUZZ_CHECK(rc == PROTO_OK || rc == PROTO_EFRAME);
  check_why(rc, why, proto_req_get(h, p, keys, PROTO_MAX_KEYS, &r2, NULL, 0),
            proto_req_get(h, p, keys, PROTO_MAX_KEYS, &r3, tiny, 1), tiny);
  if (rc != PROTO_OK) return;
  FUZZ_CHECK(h->type >= P_HELLO && h->type < P_TYPE_END);
  check_req_valid(&r);
  check_encodes_to(hdr, p, h->len, &r, NULL, true);
}

/* What decoding the reply goes into, pointers set as a client sets them. */
typedef struct rep_out {
  proto_rep r;
  kva_tier_hits lookup;
  kva_storage_stats stats;
  kva_l2_tier_stats tier_stats;
  kva_l2_tier_keys tier_keys;
  kva_memcheck_report memcheck;
  char text[PROTO_MAX_TEXT + 1];
} rep_out;

static void rep_expect(rep_out *o, uint16_t type, uint32_t n, bool with_layouts) {
  o->r = (proto_rep){.type = type,
                     .n = n,
                     .status = status,
                     .spans = spans,
                     .layouts_asked = with_layouts,
                     .layouts = layouts};
  o->r.lookup = &o->lookup;
  o->r.stats = &o->stats;
  o->r.tier_stats = &o->tier_stats;
  o->r.tier_keys = &o->tier_keys;
  o->r.nodes = nodes;
  o->r.nodes_cap = n % (PROTO_MAX_NODES + 1);
  o->r.memcheck = &o->memcheck;
  o->r.text = o->text;
  o->r.text_cap = sizeof o->text;
}

static void check_rep_valid(const rep_out *o, uint16_t asked, uint32_t n, uint64_t pool) {
  const proto_rep *r = &o->r;
  FUZZ_CHECK(r->type == asked || (r->type == P_REFUSED && r->result < 0));
  FUZZ_CHECK(r->n == n);
  bool ok = r->result >= 0;
  if (ok && (r->type == P_READ || r->type == P_RESERVE_WRITE))
    for (uint32_t i = 0; i < n; i++) {
      FUZZ_CHECK(spans[i].len <= pool && spans[i].off <= pool - spans[i].len);
      FUZZ_CHECK(spans[i].len > 0 || spans[i].off == 0);
    }
  if (ok && r->type == P_READ && r->layouts_asked) {
    static const kva_layout zero;
    for (uint32_t i = 0; i < n; i++)
      FUZZ_CHECK(spans[i].len ? kva_layout_bytes(&layouts[i]) == spans[i].len
                              : memcmp(&layouts[i], &zero, sizeof zero) == 0);
  }
  if (ok && r->type == P_LOOKUP) {
    FUZZ_CHECK(o->lookup.ntiers <= 8);
    for (uint32_t i = 0; i < o->lookup.ntiers; i++)
      FUZZ_CHECK(memchr(o->lookup.tier[i].name, '\0', sizeof o->lookup.tier[i].name) != NULL);
  }
  if (ok && r->type == P_TIER_NODES) {
    uint32_t count = r->nodes_n < r->nodes_cap ? r->nodes_n : r->nodes_cap;
    FUZZ_CHECK(r->map_age_s >= 0 || r->map_age_s == -1);
    for (uint32_t i = 0; i < count; i++) {
      FUZZ_CHECK(memchr(nodes[i].addr, '\0', sizeof nodes[i].addr) != NULL);
      FUZZ_CHECK(nodes[i].state >= KVA_L2_NODE_OK && nodes[i].state <= KVA_L2_NODE_BYPASSED);
      FUZZ_CHECK(nodes[i].failed_s >= 0);
    }
  }
  if (r->type == P_MEMCHECK || r->type == P_REFUSED)
    FUZZ_CHECK(r->text_len <= PROTO_MAX_TEXT && strlen(o->text) == r->text_len);
}

static void check_rep(const proto_hdr *h, const uint8_t *hdr, const uint8_t *p, uint16_t asked,
                      uint32_t n, uint64_t pool, bool with_layouts, bool version_ok) {
  static rep_out o;
  char why[256], tiny[1] = {'x'};
  rep_expect(&o, asked, n, with_layouts);
  int rc = proto_rep_get(h, p, pool, &o.r, why, sizeof why);
  FUZZ_CHECK(rc == PROTO_OK || rc == PROTO_EFRAME);
  proto_rep r2 = o.r, r3 = o.r;
  r2.type = r3.type = asked;
  check_why(rc, why, proto_rep_get(h, p, pool, &r2, NULL, 0),
            proto_rep_get(h, p, pool, &r3, tiny, 1), tiny);
  if (rc != PROTO_OK) return;
  FUZZ_CHECK(h->type == (asked | P_REPLY) || h->type == P_REFUSED);
  check_rep_valid(&o, asked, n, pool);
  check_encodes_to(hdr, p, h->len, NULL, &o.r, version_ok);
}

/* The request type a reply of frame type t answers (P_HELLO for a
 * refusal; t itself, refused, for anything else). */
static uint16_t own_request(uint16_t t) {
  return t == P_REFUSED ? (uint16_t)P_HELLO : (uint16_t)(t & ~P_REPLY);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_in in = {data, size};
  uint8_t flags = fuzz_u8(&in), expect = fuzz_u8(&in);
  uint32_t n;
  fuzz_take(&in, &n, sizeof n);
  uint64_t pool = fuzz_u64(&in);
  uint8_t hdr[PROTO_HDR_BYTES];
  fuzz_take(&in, hdr, sizeof hdr);
  for (int i = 0; (flags & FIX_LEN) && i < 4; i++) hdr[8 + i] = (uint8_t)(in.n >> (8 * i));
  proto_hdr h;
  int rc = check_hdr(hdr, &h);
  bool refusal_of_another_version = rc == PROTO_EVERSION && h.type == P_REFUSED;
  if ((rc != PROTO_OK && !refusal_of_another_version) || h.len > in.n) return 0;
  uint8_t *p = malloc(h.len ? h.len : 1);
  FUZZ_CHECK(p != NULL);
  memcpy(p, in.p, h.len);
  uint16_t asked =
      expect ? (uint16_t)(P_HELLO + (expect - 1) % (P_TYPE_END - P_HELLO)) : own_request(h.type);
  n %= PROTO_MAX_KEYS + 1;
  if (rc == PROTO_OK) check_req(&h, hdr, p);
  check_rep(&h, hdr, p, asked, n, pool, (flags & READ_LAYOUTS) != 0, rc == PROTO_OK);
  free(p);
  return 0;
}
