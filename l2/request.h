/*
 * request.h — checks every L2 adapter makes on an incoming request
 * (request.c), so each adapter answers a malformed one the same way.
 */
#ifndef KVA_L2_REQUEST_H
#define KVA_L2_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#define L2_MAX_KEYS (1u << 24) /* keys per request; more is malformed */

/* The request pointer of an L2 message; NULL when the payload is not one. */
kva_l2_req *l2_req_of(const kva_msg *msg);
/* Why a STORE / LOOKUP_AND_LOCK / LOAD / STATS request cannot be served
 * (no keys, too many, no bits, no buffers, no valid layout, an invalid
 * key, an empty buffer), or NULL when it is well formed. */
const char *l2_req_problem(uint32_t type, const kva_l2_req *r);

#endif
