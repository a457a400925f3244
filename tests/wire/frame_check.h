/*
 * frame_check.h — what the protocol's suites (tests/wire/) share: a frame
 * buffer, decoding a frame as the daemon or the client would (the payload
 * in a buffer of exactly its size, so ASan sees any read past it), the
 * frames' bytes read with little-endian readers of their own, and the
 * asserts that a decoded frame equals the one encoded or was refused.
 */
#ifndef KVA_TESTS_WIRE_FRAME_CHECK_H
#define KVA_TESTS_WIRE_FRAME_CHECK_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/wire/protocol_samples.h"
#include "wire/protocol.h"

#define FRAME_CAP 16384u /* any sample frame */
#define FRAME_ID UINT64_C(0x1122334455667788)

extern uint8_t frame_buf[FRAME_CAP];
extern kva_key frame_keys[SAMPLE_MAX_N]; /* frame_fill_keys' sample keys */
extern char frame_why[256];              /* the last decode's reason */

void frame_fill_keys(uint32_t n);

uint32_t frame_le32(const uint8_t *b);
uint64_t frame_le64(const uint8_t *b);
void frame_set_le32(uint8_t *b, uint32_t v);
void frame_set_le64(uint8_t *b, uint64_t v);
/* The payload of the frame in buf. */
uint8_t *frame_payload(uint8_t *buf);
/* Sets the header's len: the frame's size, PROTO_HDR_BYTES + len. */
size_t frame_set_len(uint8_t *buf, uint32_t len);

/* r encoded with FRAME_ID into frame_buf (asserted: proto_*_size bytes). */
size_t frame_put_req(const proto_req *r);
size_t frame_put_rep(const proto_rep *r);

/* The frame buf[0..size) decoded as a request (keys into an array of
 * keys_cap, PROTO_MAX_KEYS + 1 at most) or as a reply into s (set up by
 * sample_rep_expect, spans checked against SAMPLE_POOL_BYTES):
 * proto_hdr_get's refusal, or the payload decoder's result. */
int frame_decode_req(const uint8_t *buf, size_t size, size_t keys_cap, proto_req *out);
int frame_decode_rep(const uint8_t *buf, size_t size, sample_rep *s);

/* The frame is refused with code and a reason; a refused reply leaves
 * r->type as it was. frame_assert_read_refused: as the reply to a READ of
 * n keys that asked for layouts. */
void frame_assert_req_refused(const uint8_t *buf, size_t size, size_t keys_cap, int code,
                              const char *what);
void frame_assert_rep_refused(const uint8_t *buf, size_t size, uint16_t type, uint32_t n,
                              const char *what);
void frame_assert_read_refused(const uint8_t *buf, size_t size, uint32_t n, const char *what);

void frame_assert_key_eq(const kva_key *a, const kva_key *b);
/* got is what decoding want's encoding gave: every field equal (those
 * want's type does not send are 0 in both). */
void frame_assert_req_eq(const proto_req *want, const proto_req *got);
/* got decoded want's encoding: what want's type and result send is
 * equal, the rest of got untouched (0xee). */
void frame_assert_rep_eq(sample_rep *want, sample_rep *got);
/* want encoded, then decoded as the reply to a request of type over
 * want->r.n keys (a READ asking for layouts as want's did), equal. */
void frame_assert_rep_round_trips(sample_rep *want, uint16_t type);

#endif
