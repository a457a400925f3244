/*
 * l1_manager.h — messages of the L1 manager actor (l1_manager.c).
 *
 * Requests come from the facade (ports) and the controllers. A request's
 * payload is one pointer to an l1_req that lives with the sender until the
 * reply (L1_REPLY, same tag, no payload) arrives: the manager reads its
 * inputs and writes its outputs there, and the mailbox hand-off orders
 * those writes before the reply is seen. The sender must wait for the
 * reply before touching the l1_req again.
 */
#ifndef KVA_L1_L1_MANAGER_H
#define KVA_L1_L1_MANAGER_H

#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

typedef struct l1_manager l1_manager;
typedef struct policy_ops policy_ops;

enum {
  /* requests: payload = l1_req * */
  L1_RESERVE_WRITE = 64,            /* keys, n, layout, mode, temporary -> bufs, status */
  L1_FINISH_WRITE,                  /* keys, n -> status */
  L1_RESERVE_READ,                  /* keys, n, readers -> status, bufs (optional) */
  L1_FINISH_READ,                   /* keys, n, readers -> status */
  L1_FINISH_WRITE_AND_RESERVE_READ, /* keys, n, readers -> status */
  L1_DELETE,                        /* keys, n, force -> status */
  L1_TOUCH,                         /* keys, n */
  L1_CLEAR,                         /* force -> result = objects removed */
  L1_PREFETCH,                      /* keys, n, readers -> hits (contiguous prefix, read-locked) */
  L1_READ,                          /* keys, n -> bufs; result KVA_OK or the first key's problem */
  L1_MEMCHECK,                      /* report, report_len -> result */
  L1_STATS,                         /* stats */
  /* from the eviction controller: payload = l1_evict (+ ids) */
  L1_EVICT,
  L1_CANDIDATES,
  L1_REPLY = 127,
};

typedef struct l1_req {
  const kva_key *keys;
  size_t n;
  const kva_layout *layout; /* RESERVE_WRITE */
  int mode;                 /* kva_write_mode */
  int temporary;            /* RESERVE_WRITE: objects freed at their last read */
  int force;                /* DELETE, CLEAR */
  uint32_t readers;         /* locks to take or release per key (1 + extra) */
  kva_buf *bufs;            /* out, optional for RESERVE_READ */
  int *status;              /* out, per key */
  int result;               /* out: keys that succeeded, or a negative error */
  size_t hits;              /* out: PREFETCH */
  char *report;             /* MEMCHECK */
  size_t report_len;
  kva_storage_stats *stats; /* STATS */
} l1_req;

/* Spawned by the storage facade. Returns NULL with err set on failure. */
typedef struct l1_manager_opts {
  uint64_t size_bytes, reserve_bytes, align_bytes;
  int numa_node, pinned, hugepages;
} l1_manager_opts;
l1_manager *l1_manager_spawn(kva_runtime *rt, const l1_manager_opts *o, char *err, size_t errlen);
kva_actor *l1_manager_actor(l1_manager *m);
/* The eviction controller the manager notifies: set once, before the first
 * message is sent to the manager (the send publishes it). */
void l1_manager_set_evictor(l1_manager *m, kva_actor *evictor);
/* Effective pool figures, readable before the first message. */
uint64_t l1_manager_capacity(const l1_manager *m);

#endif
