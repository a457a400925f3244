/*
 * redis_value.c — checking a value read back from Redis (redis_value.h).
 *
 * The length is compared without adding to it (len is the caller's, any
 * uint64_t), and the header is copied out before it is read: a reply's
 * bytes need not be aligned for a object_header.
 */
#include "l2/adapters/redis/redis_value.h"

#include <string.h>

const void *redis_value_check(const void *value, size_t value_len, const kva_key *k, uint64_t fp,
                              uint64_t len, const char **why) {
  const char *bad = NULL;
  object_header h;
  const char *payload = (const char *)value + REDIS_VALUE_HDR;
  if (value_len < REDIS_VALUE_HDR || value_len - REDIS_VALUE_HDR != len) {
    bad = "wrong length";
  } else {
    memcpy(&h, value, REDIS_VALUE_HDR);
    if (!object_header_matches(&h, k, fp, payload, len)) bad = "header or checksum mismatch";
  }
  if (why) *why = bad;
  return bad ? NULL : payload;
}
