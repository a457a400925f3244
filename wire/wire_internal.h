/*
 * wire_internal.h — what the two halves of the codec (protocol.c: the
 * header and requests; protocol_reply.c: replies) share: little-endian
 * integers written byte by byte (the wire's byte order on any host, and
 * optimizing compilers merge the bytes into plain loads and stores), the
 * cursors payloads are written and read with, and the decoders' refusals.
 */
#ifndef KVA_WIRE_INTERNAL_H
#define KVA_WIRE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "wire/protocol.h"

/* ---- bytes ----------------------------------------------------------- */

static inline void wire_put_u16(uint8_t *b, uint16_t v) {
  b[0] = (uint8_t)v;
  b[1] = (uint8_t)(v >> 8);
}

static inline void wire_put_u32(uint8_t *b, uint32_t v) {
  wire_put_u16(b, (uint16_t)v);
  wire_put_u16(b + 2, (uint16_t)(v >> 16));
}

static inline void wire_put_u64(uint8_t *b, uint64_t v) {
  wire_put_u32(b, (uint32_t)v);
  wire_put_u32(b + 4, (uint32_t)(v >> 32));
}

static inline uint16_t wire_get_u16(const uint8_t *b) {
  return (uint16_t)(b[0] | b[1] << 8);
}

static inline uint32_t wire_get_u32(const uint8_t *b) {
  return wire_get_u16(b) | (uint32_t)wire_get_u16(b + 2) << 16;
}

static inline uint64_t wire_get_u64(const uint8_t *b) {
  return wire_get_u32(b) | (uint64_t)wire_get_u32(b + 4) << 32;
}

/* A cursor writing a frame whose size was computed first. */
typedef struct wire_wr {
  uint8_t *p;
} wire_wr;

static inline void wire_wr_u32(wire_wr *w, uint32_t v) {
  wire_put_u32(w->p, v);
  w->p += 4;
}

static inline void wire_wr_u64(wire_wr *w, uint64_t v) {
  wire_put_u64(w->p, v);
  w->p += 8;
}

static inline void wire_wr_bytes(wire_wr *w, const void *src, size_t n) {
  if (n) memcpy(w->p, src, n);
  w->p += n;
}

/* A cursor reading a payload: a read past its end takes nothing, yields
 * zeros and marks the cursor short, which the caller checks after each
 * field (a truncated frame). */
typedef struct wire_rd {
  const uint8_t *p;
  size_t left;
  bool short_read;
} wire_rd;

static inline const uint8_t *wire_rd_take(wire_rd *in, size_t n) {
  if (in->left < n) {
    in->short_read = true;
    return NULL;
  }
  const uint8_t *b = in->p;
  in->p += n;
  in->left -= n;
  return b;
}

static inline uint32_t wire_rd_u32(wire_rd *in) {
  const uint8_t *b = wire_rd_take(in, 4);
  return b ? wire_get_u32(b) : 0;
}

static inline uint64_t wire_rd_u64(wire_rd *in) {
  const uint8_t *b = wire_rd_take(in, 8);
  return b ? wire_get_u64(b) : 0;
}

static inline void wire_rd_bytes(wire_rd *in, void *dst, size_t n) {
  const uint8_t *b = wire_rd_take(in, n);
  if (b)
    memcpy(dst, b, n);
  else
    memset(dst, 0, n);
}

/* A layout on the wire (PROTO_LAYOUT_BYTES): every field, the unused
 * dims and tensors included, so a decoded layout encodes back to the same
 * bytes. */
void wire_wr_layout(wire_wr *w, const kva_layout *l);
void wire_rd_layout(wire_rd *in, kva_layout *l);

static inline bool wire_is_request(uint16_t type) {
  return type >= P_HELLO && type < P_TYPE_END;
}

/* "HELLO" .. "TIER_NODES", "REFUSED", or "?" (for the reasons in why). */
const char *wire_type_name(uint16_t type);

/* The header decoder's refusals: code, with the reason in why (may be
 * NULL; always terminated when whylen > 0). */
__attribute__((format(printf, 4, 5))) int wire_refuse(int code, char *why, size_t whylen,
                                                      const char *fmt, ...);

/* A payload being decoded: the cursor, what the payload is (a request or
 * reply of type), and where its refusal is explained. */
typedef struct wire_dec {
  wire_rd in;
  uint16_t type;
  const char *kind; /* "request" or "reply" */
  char *why;
  size_t whylen;
} wire_dec;

/* A payload's refusal: PROTO_EFRAME, with "<TYPE> <kind>: <reason>" in
 * why. */
__attribute__((format(printf, 2, 3))) int wire_dec_refuse(const wire_dec *d, const char *fmt, ...);

#endif
