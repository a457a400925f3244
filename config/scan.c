/*
 * config/scan.c — checks msgpack framing before msgpack-c sees the bytes.
 *
 * Why: msgpack-c allocates an array's or map's element storage from the
 * count in its header, so six hostile bytes (an array32 claiming 2^32
 * elements) would ask for 96 GiB. The scan walks the buffer without
 * allocating and rejects any container that claims more elements than
 * bytes remain (each element needs at least one), any length past the end,
 * the never-used byte 0xc1, and nesting deeper than the caller allows. It
 * also gives exact byte offsets for the error messages, which msgpack-c
 * does not. After a successful scan msgpack-c's allocations are bounded by
 * a small multiple of the input size.
 */
#include <stdint.h>

#include "config/config_internal.h"

#define SCAN_MAX_DEPTH 64

enum { BODY, ARRAY, MAP };

/* The shape of one msgpack item, from its first byte. */
typedef struct form {
  uint8_t lenw;   /* bytes of the big-endian length field after the type byte */
  uint8_t ext;    /* 1 for ext8/16/32: a type byte follows the length */
  uint8_t what;   /* BODY: n payload bytes; ARRAY: n items; MAP: n pairs */
  uint32_t fixed; /* n when lenw is 0 */
} form;

static int fixed_form(uint8_t t, form *f) {
  /* {type byte, length field bytes, ext type byte, what, fixed payload};
   * fixext payloads count their type byte. */
  static const struct {
    uint8_t t, lenw, ext, what;
    uint32_t fixed;
  } table[] = {
      {0xc0, 0, 0, BODY, 0},  {0xc2, 0, 0, BODY, 0}, {0xc3, 0, 0, BODY, 0}, {0xc4, 1, 0, BODY, 0},
      {0xc5, 2, 0, BODY, 0},  {0xc6, 4, 0, BODY, 0}, {0xc7, 1, 1, BODY, 0}, {0xc8, 2, 1, BODY, 0},
      {0xc9, 4, 1, BODY, 0},  {0xca, 0, 0, BODY, 4}, {0xcb, 0, 0, BODY, 8}, {0xcc, 0, 0, BODY, 1},
      {0xcd, 0, 0, BODY, 2},  {0xce, 0, 0, BODY, 4}, {0xcf, 0, 0, BODY, 8}, {0xd0, 0, 0, BODY, 1},
      {0xd1, 0, 0, BODY, 2},  {0xd2, 0, 0, BODY, 4}, {0xd3, 0, 0, BODY, 8}, {0xd4, 0, 0, BODY, 2},
      {0xd5, 0, 0, BODY, 3},  {0xd6, 0, 0, BODY, 5}, {0xd7, 0, 0, BODY, 9}, {0xd8, 0, 0, BODY, 17},
      {0xd9, 1, 0, BODY, 0},  {0xda, 2, 0, BODY, 0}, {0xdb, 4, 0, BODY, 0}, {0xdc, 2, 0, ARRAY, 0},
      {0xdd, 4, 0, ARRAY, 0}, {0xde, 2, 0, MAP, 0},  {0xdf, 4, 0, MAP, 0},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (table[i].t != t) continue;
    f->lenw = table[i].lenw;
    f->ext = table[i].ext;
    f->what = table[i].what;
    f->fixed = table[i].fixed;
    return 0;
  }
  return -1; /* 0xc1: never used */
}

static int classify(uint8_t t, form *f) {
  f->lenw = 0;
  f->ext = 0;
  f->what = BODY;
  f->fixed = 0;
  if (t <= 0x7f || t >= 0xe0) return 0; /* positive / negative fixint */
  if (t <= 0x8f)
    f->what = MAP, f->fixed = t & 0x0f;
  else if (t <= 0x9f)
    f->what = ARRAY, f->fixed = t & 0x0f;
  else if (t <= 0xbf)
    f->fixed = t & 0x1f; /* fixstr */
  else
    return fixed_form(t, f);
  return 0;
}

static uint64_t big_endian(const uint8_t *p, int w) {
  uint64_t v = 0;
  for (int i = 0; i < w; i++) v = v << 8 | p[i];
  return v;
}

static int truncated(char *err, size_t errlen, size_t len) {
  return config_fail_at(err, errlen, "<input>", "truncated msgpack data (%zu bytes)", len);
}

int config_msgpack_scan(const void *buf, size_t len, int max_depth, size_t *end, char *err,
                        size_t errlen) {
  const uint8_t *b = buf;
  uint64_t pending[SCAN_MAX_DEPTH + 1]; /* items still to read per open container */
  int top = 0;
  size_t p = 0;
  if (max_depth > SCAN_MAX_DEPTH) max_depth = SCAN_MAX_DEPTH;
  pending[0] = 1;
  while (top >= 0) {
    if (pending[top] == 0) {
      top--;
      continue;
    }
    pending[top]--;
    form f;
    if (p >= len) return truncated(err, errlen, len);
    if (classify(b[p], &f))
      return config_fail_at(err, errlen, "<input>", "invalid msgpack data at byte %zu", p);
    size_t head = 1u + f.lenw + f.ext, avail = len - p;
    if (head > avail) return truncated(err, errlen, len);
    uint64_t n = f.lenw ? big_endian(b + p + 1, f.lenw) : f.fixed;
    avail -= head;
    if (f.what == BODY) {
      if (n > avail) return truncated(err, errlen, len);
      p += head + (size_t)n;
      continue;
    }
    if (top + 1 > max_depth)
      return config_fail_at(err, errlen, "<input>", "nesting deeper than %d levels at byte %zu",
                            max_depth, p);
    uint64_t items = f.what == MAP ? 2 * n : n;
    if (items > avail) return truncated(err, errlen, len); /* each item is >= 1 byte */
    p += head;
    pending[++top] = items;
  }
  *end = p;
  return KVA_OK;
}
