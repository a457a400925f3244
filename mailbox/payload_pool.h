/*
 * payload_pool.h — recycled blocks for message payloads too big to travel
 * inline in a mailbox slot.
 *
 * Blocks come in a few size classes, each a free list behind a tiny lock
 * (see payload_pool.c for why not a lock-free stack). A sender takes a block, the
 * receiver returns it after receive: in steady state no malloc at all.
 * Payloads above the largest class are malloc'd and freed each time.
 */
#ifndef KVA_PAYLOAD_POOL_H
#define KVA_PAYLOAD_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct payload_pool payload_pool;

payload_pool *payload_pool_create(void);
void payload_pool_destroy(payload_pool *p);
/* A block of at least len bytes, or NULL when out of memory. */
void *payload_pool_get(payload_pool *p, size_t len);
void payload_pool_put(payload_pool *p, void *block);

#endif
