/*
 * policy.h — L1 eviction policies, registered by name.
 *
 * A policy orders the objects of L1 for eviction. It is a plain data
 * structure owned by the eviction controller actor and fed by the L1
 * manager's notifications (created, touched, removed); it never sees lock
 * state (the L1 manager skips locked candidates itself).
 *
 * Objects are named by a 64-bit id: the low 32 bits are a dense slot index
 * (< 2^32, reused after removal), the high 32 bits a generation. A slot
 * index is created at most once between two removals.
 *
 * Choosing candidates has no side effects: policy_candidates may be called
 * any number of times and returns the same answer until the next
 * notification.
 */
#ifndef KVA_L1_POLICY_H
#define KVA_L1_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

/* The public kva_eviction_policy of kvact.h, under its internal names. */
typedef kva_policy_state policy;
typedef kva_eviction_policy policy_ops;

/* Registry (kva_eviction_policy_register adds to it): lru, mru, fifo and
 * lfu are built in, and a taken name is refused (common/registry.h).
 * policy_find's answer stays valid for the process's life. */
const policy_ops *policy_find(const char *name);
/* The registered names, built-ins first, joined by sep; the length the
 * whole list needs, as registry_names. */
size_t policy_names(const char *sep, char *out, size_t len);

/* For implementations: an array of *cap entries of `size` bytes (indexed
 * by slot) that holds index `slot`: arr itself, or arr grown as
 * common/array.h grows arrays (new entries zeroed, *cap updated). NULL on
 * overflow or ENOMEM, arr and *cap unchanged. */
void *policy_reserve_slot(void *arr, size_t *cap, uint32_t slot, size_t size);

/*
 * Orders:
 *  lru  — least recently created/touched first.
 *  mru  — most recently created/touched first.
 *  fifo — creation order; touches do not reorder.
 *  lfu  — fewest accesses first (creation counts as one); ties by least
 *         recent access first.
 */

#endif
