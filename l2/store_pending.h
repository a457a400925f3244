/*
 * store_pending.h — the store controller's index of the keys it has a
 * store of, per tier: queued (its task has not started, so it holds
 * nothing yet) or in flight (read-locked in L1 until the tier answers).
 * A key has at most one store queued or in flight per tier, plus at most
 * one more to run after the one in flight (docs/invariants.md I-SC-7):
 *
 *  - a write of a key whose store is queued joins it: the task read-locks
 *    the key's object when it starts, which is then the newest version;
 *  - a write of a key whose store is in flight (holding an older version,
 *    or about to lock one) marks it `again`: once that store is over the
 *    key is queued once more, whatever the number of writes meanwhile.
 *
 * Keys are matched by value, never by L1 object id: a rewrite in mode
 * ALL or UPDATE keeps the object (and its id), a forced delete and a new
 * write give the key another object, and either way the newest object of
 * the key is the one to store.
 *
 * Open addressing on kva_key_hash and the tier, backward-shift deletion:
 * no tombstones, no allocation but growth (and an `again` layout of its
 * own, rare). Owned by the store controller actor; not thread-safe.
 */
#ifndef KVA_L2_STORE_PENDING_H
#define KVA_L2_STORE_PENDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

typedef struct store_pending {
  kva_key key;
  uint32_t tier;
  bool used;
  bool queued;        /* its task has not started */
  bool again;         /* written again since its store started: queue it after */
  uint64_t layout_fp; /* the layout its queued or in-flight task stores */
  uint64_t again_seq; /* the first write marked again: a flush after it waits */
  /* the newest write's layout when it is not layout_fp's; NULL: the same */
  kva_layout *again_layout;
} store_pending;

typedef struct pending_index {
  store_pending *e;
  size_t cap, n; /* slots (a power of two), entries in use */
} pending_index;

void pending_free(pending_index *x);
/* The entry of (k, tier), or NULL. */
store_pending *pending_find(pending_index *x, const kva_key *k, uint32_t tier);
/* A new entry for (k, tier), which must not have one: queued, not again;
 * NULL when out of memory. */
store_pending *pending_add(pending_index *x, const kva_key *k, uint32_t tier, uint64_t layout_fp);
/* Removes an entry (and its again layout). Other entry pointers are
 * invalid afterwards. */
void pending_drop(pending_index *x, store_pending *e);

#endif
