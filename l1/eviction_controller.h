/*
 * eviction_controller.h — messages of the eviction controller actor
 * (eviction_controller.c) and the eviction payloads it exchanges with the
 * L1 manager.
 */
#ifndef KVA_L1_EVICTION_CONTROLLER_H
#define KVA_L1_EVICTION_CONTROLLER_H

#include <stdint.h>

#include "common/msg_ids.h"
#include "kvact.h"

enum {
  EC_NOTE = MSG_EC_BASE, /* L1 -> EC: evict_note + evict_note_entry[n] */
  EC_DEMAND,             /* L1 -> EC: evict_demand; reply L1_CANDIDATES */
  EC_EVICT_DONE,         /* L1 -> EC: evict_done, the answer to an L1_EVICT */
  EC_START,              /* facade -> EC: start the periodic tick (no payload) */
};
MSG_RANGE_CHECK(EC_NOTE, EC_START, MSG_EC_BASE, MSG_L1_NOTICE_BASE, "the eviction controller's");

enum { NOTE_CREATED = 1, NOTE_TOUCHED = 2, NOTE_REMOVED = 3, NOTE_WRITE_FINISHED = 4 };

typedef struct evict_note_entry {
  uint64_t id;
  uint64_t bytes; /* NOTE_CREATED: bytes the object takes in the pool */
  uint32_t op;    /* NOTE_* */
  uint32_t pad;
} evict_note_entry;

/* One per L1 request that changed anything: the changes in order, and the
 * pool's usage after them. */
typedef struct evict_note {
  uint64_t used, capacity;
  uint32_t n, pad;
  evict_note_entry e[];
} evict_note;

/* L1 needs room: at least `deficit` bytes must go (contiguous room may
 * take more; the manager decides, candidate by candidate). Send candidates
 * in policy order, after the id `after` (0 = from the start). */
typedef struct evict_demand {
  uint64_t deficit;
  uint64_t after;
} evict_demand;

/* L1_EVICT (EC -> L1, evict unlocked ones in order until `target` bytes
 * are freed) and L1_CANDIDATES (EC -> L1, the answer to EC_DEMAND). */
typedef struct evict_list {
  uint64_t target;
  uint32_t n;
  uint32_t end; /* 1 = the policy has no candidates after these */
  uint64_t ids[];
} evict_list;

typedef struct evict_done {
  uint64_t freed;
  uint64_t after;     /* last id examined */
  uint32_t exhausted; /* 1 = the list ran out before the target */
  uint32_t pad;
} evict_done;

#define EVICT_PAGE 256u /* candidates per message */

typedef struct eviction_opts {
  const char *policy; /* registered name */
  double watermark;   /* start evicting above this fraction of L1 */
  double ratio;       /* one round frees this fraction of L1 */
  uint64_t interval_ns;
} eviction_opts;

/* NULL with err set for an unknown policy or ENOMEM. */
kva_actor *eviction_controller_spawn(kva_runtime *rt, kva_actor *l1, const eviction_opts *o,
                                     char *err, size_t errlen);

#endif
