/*
 * request.c — the check of an incoming L2 request (kvact.h's adapter kit:
 * kva_l2_req_of, kva_l2_req_problem), so that every adapter, built-in or
 * plug-in, refuses a malformed one for the same reasons.
 */
#include <string.h>

#include "common/key.h"
#include "kvact.h"

#define L2_MAX_KEYS (1u << 24) /* keys per request; more is malformed */

kva_l2_req *kva_l2_req_of(const kva_msg *m) {
  kva_l2_req *r = NULL;
  if (m && m->data && m->len == sizeof(r)) memcpy(&r, m->data, sizeof(r));
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

const char *kva_l2_req_problem(uint32_t type, const kva_l2_req *r) {
  if (!r) return "not a request pointer";
  if (type == KVA_L2_STATS) return r->stats ? NULL : "no stats to fill";
  if (type == KVA_L2_NODES) return r->nodes || !r->nodes_cap ? NULL : "no nodes to fill";
  if (type != KVA_L2_STORE && type != KVA_L2_LOOKUP_AND_LOCK && type != KVA_L2_LOAD)
    return "not a request type";
  if (!r->keys || r->n == 0) return "no keys";
  if (r->n > L2_MAX_KEYS) return "too many keys";
  if (type != KVA_L2_STORE && !r->bits) return "no bits";
  if (type == KVA_L2_LOOKUP_AND_LOCK) return bufs_problem(type, r);
  if (!r->bufs) return "no buffers";
  if (!r->layout || layout_bytes(r->layout) == 0) return "no valid layout";
  return bufs_problem(type, r);
}
