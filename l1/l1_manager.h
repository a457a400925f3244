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

#include "common/msg_ids.h"
#include "kvact.h"

typedef struct l1_manager l1_manager;

enum {
  /* requests: payload = l1_req * */
  L1_RESERVE_WRITE = MSG_L1_BASE,   /* keys, n, layout, mode, temporary -> bufs, status */
  L1_FINISH_WRITE,                  /* keys, n -> status */
  L1_RESERVE_READ,                  /* keys, n, readers, layout (optional: objects of
                                       another are not locked) -> status, bufs (optional) */
  L1_FINISH_READ,                   /* keys, n, readers -> status */
  L1_FINISH_WRITE_AND_RESERVE_READ, /* keys, n, readers -> status */
  L1_DELETE,                        /* keys, n, force -> status */
  L1_TOUCH,                         /* keys, n */
  L1_CLEAR,                         /* force -> result = objects removed */
  L1_PREFETCH,                      /* keys, n, readers -> hits (contiguous prefix, read-locked) */
  L1_READ,                          /* keys, n -> bufs, layouts (optional); result KVA_OK or
                                       the first key's problem */
  L1_MEMCHECK,                      /* report, report_len, callers_only -> result,
                                       memcheck (optional) */
  L1_STATS,                         /* stats */
  L1_LOOKUP,                        /* keys, n, pin -> hits (contiguous prefix present and
                                       readable; pin: each gets one pin) */
  L1_UNPIN,                         /* keys, n -> result = keys unpinned */
  L1_INSPECT,                       /* keys, n -> status: L1_ABSENT, or readers | L1_WRITE_LOCKED |
                                       L1_TEMPORARY (tests and tools; changes nothing) */
  L1_ABORT_WRITE,                   /* keys, n -> status: write-locked objects removed unseen
                                       (a failed load's buffers; never stored to L2) */
  /* from the eviction controller: payload = l1_evict (+ ids) */
  L1_EVICT,
  L1_CANDIDATES,
  L1_REPLY = MSG_L1_END - 1,
};
MSG_RANGE_CHECK(L1_RESERVE_WRITE, L1_CANDIDATES, MSG_L1_BASE, MSG_EC_BASE,
                "the L1 manager's request");

enum { L1_ABSENT = -1, L1_WRITE_LOCKED = 1 << 24, L1_TEMPORARY = 1 << 25, L1_PINNED = 1 << 26 };

typedef struct l1_req {
  const kva_key *keys;
  size_t n;
  const kva_layout *layout; /* RESERVE_WRITE; RESERVE_READ (optional) */
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
  kva_memcheck_report *memcheck; /* MEMCHECK, optional: the locks counted by holder */
  int callers_only;              /* MEMCHECK: the store-behind's read locks do not fail it */
  kva_storage_stats *stats;      /* STATS */
  /* Object ids (generation << 32 | slot), per key. Out of RESERVE_WRITE,
   * RESERVE_READ; when set on FINISH_READ, FINISH_WRITE*, ABORT_WRITE the
   * objects are named by id instead of by key, so a holder releases the
   * very object it locked even if it was force-deleted (and the key
   * written again) meanwhile. Optional everywhere. */
  uint64_t *ids;
  /* RESERVE_READ, FINISH_READ with ids: the read locks are the sender's
   * own, released by id only (the store controller's). Every other read
   * lock is an engine's, released by key (or, for it, by a controller by
   * id): a force-deleted object with such a lock keeps its key (l1_admin.c).
   * A write lock is the sender's own when RESERVE_WRITE had ids. */
  int own;
  const uint8_t *del; /* FINISH_READ: del[i] = remove the object if it is
                         then unlocked (atomically with the release) */
  int pin;            /* LOOKUP */
  /* READ, optional: held[i] = 0 when the sender holds no read lock of
   * keys[i] (a kvactd session: another client's lock is not its own), so
   * keys[i] is not readable to it and none of its locks is released */
  const uint8_t *held;
  /* READ, optional: out, layouts[i] = the layout keys[i]'s object was
   * written with (zeroed, as bufs, on a problem) */
  kva_layout *layouts;
  int l2; /* PREFETCH: hand a partial hit to the prefetch controller */
  /* PREFETCH: the caller planned this load (kva_plan_load): the prefetch
   * policy's load plan does not trim it again (KVA_PREFETCH_AS_PLANNED) */
  int as_planned;
} l1_req;

/* Notifications the L1 manager sends to the controllers. */
enum {
  /* L1 -> store controller, after a request that finished writes of
   * ordinary (not temporary, not prefetched) objects: l1_written, then
   * kva_layout[nlayouts], then l1_written_entry[n]; no reply */
  L1_WRITTEN = MSG_L1_NOTICE_BASE,
  /* L1 -> prefetch controller: a PREFETCH with the l2 flag whose L1 prefix
   * (r->hits, read-locked) is shorter than r->n; payload l1_handoff. The
   * prefetch controller replies L1_REPLY to reply_to with tag when the
   * request is complete (r->hits then counts L1 and L2 hits). */
  L1_HANDOFF,
};
MSG_RANGE_CHECK(L1_WRITTEN, L1_HANDOFF, MSG_L1_NOTICE_BASE, L1_REPLY, "the L1 manager's notice");
typedef struct l1_written {
  uint32_t n, nlayouts;
} l1_written;
typedef struct l1_written_entry {
  kva_key key;
  uint32_t layout; /* index into the message's layouts */
} l1_written_entry;
typedef struct l1_handoff {
  l1_req *r;
  kva_actor *reply_to;
  uint64_t tag;
} l1_handoff;

/* Spawned by the storage facade. Returns NULL with err set on failure. */
typedef struct l1_manager_opts {
  uint64_t size_bytes, reserve_bytes, align_bytes;
  int numa_node, pinned, hugepages, prefault;
  int shared; /* the pool is a memfd kvactd's clients map (l1/pool.h) */
} l1_manager_opts;
l1_manager *l1_manager_spawn(kva_runtime *rt, const l1_manager_opts *o, char *err, size_t errlen);
kva_actor *l1_manager_actor(l1_manager *m);
/* The manager's pool, for what only reads its constants (pool_fd,
 * pool_base, pool_capacity, pool_offset_of): kvactd's sessions. */
typedef struct pool pool;
const pool *l1_manager_pool(const l1_manager *m);
/* The eviction controller the manager notifies: set once, before the first
 * message is sent to the manager (the send publishes it). */
void l1_manager_set_evictor(l1_manager *m, kva_actor *evictor);
/* The store controller (told about finished writes of ordinary objects)
 * and the prefetch controller (continues a PREFETCH whose l2 flag is set
 * past its L1 prefix): set once, before the first message, like the
 * evictor. */
void l1_manager_set_store(l1_manager *m, kva_actor *store);
void l1_manager_set_prefetcher(l1_manager *m, kva_actor *prefetcher);

#endif
