/*
 * request.c — validation of incoming L2 requests (request.h).
 */
#include "l2/request.h"

#include <string.h>

#include "common/key.h"

kva_l2_req *l2_req_of(const kva_msg *msg) {
  kva_l2_req *r = NULL;
  if (msg->len == sizeof(r)) memcpy(&r, msg->data, sizeof(r));
  return r;
}

static const char *bufs_problem(uint32_t type, const kva_l2_req *r) {
  for (size_t i = 0; i < r->n; i++) {
    if (!key_valid(&r->keys[i])) return "an invalid key";
    if (type == KVA_L2_STORE && (!r->bufs[i].ptr || !r->bufs[i].len)) return "an empty buffer";
    if (type == KVA_L2_LOAD && !r->bufs[i].ptr && r->bufs[i].len) return "a NULL buffer";
  }
  return NULL;
}

const char *l2_req_problem(uint32_t type, const kva_l2_req *r) {
  if (type == KVA_L2_STATS) return r->stats ? NULL : "no stats to fill";
  if (!r->keys || r->n == 0) return "no keys";
  if (r->n > L2_MAX_KEYS) return "too many keys";
  if (type != KVA_L2_STORE && !r->bits) return "no bits";
  if (type == KVA_L2_LOOKUP_AND_LOCK) return bufs_problem(type, r);
  if (!r->bufs) return "no buffers";
  if (!r->layout || layout_bytes(r->layout) == 0) return "no valid layout";
  return bufs_problem(type, r);
}
