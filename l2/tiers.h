/*
 * tiers.h — the L2 tiers of one storage manager, shared by the facade and
 * the two controllers: each tier's adapter actor and name, its bypass
 * flags and health, the freeze flag, and the L2 counters.
 *
 * Only flags, counters, each tier's meter (meter.h) and absent marks
 * (absent.h), each with its own mutex, live here; no lock invariant
 * depends on them (a store or prefetch that starts just before a bypass
 * or freeze is set finishes normally, holding and releasing its locks as
 * usual).
 */
#ifndef KVA_L2_TIERS_H
#define KVA_L2_TIERS_H

#include <stdbool.h>
#include <stdint.h>

#include "kvact.h"
#include "l2/absent.h"
#include "l2/meter.h"

#define L2_MAX_TIERS 8u

typedef struct l2_tier {
  char name[32];
  kva_actor *actor;
  uint32_t bypass_manual; /* atomic: kva_set_tier_bypass */
  uint32_t bypass_auto;   /* atomic: set after bypass_after failures in a row */
  uint32_t failures;      /* atomic: consecutive failed operations */
  /* counters (atomic): what the controllers moved through this tier */
  uint64_t stored_keys, stored_bytes, loaded_keys, loaded_bytes;
  uint64_t skipped_slow_keys; /* found, left to the engine to recompute (load_plan.h) */
  uint64_t lookups_skipped;   /* prefetches that did not ask it: the lookup could not pay */
  /* what became of each key written toward it (kva_l2_tier_keys): written
   * = stored_keys + the rest, once no store is in flight */
  uint64_t k_written, k_coalesced, k_bypassed, k_frozen, k_gone, k_unavailable, k_failed, k_dropped;
  l2_meter meter;   /* its queue, rate and round trip (meter.h) */
  l2_absent absent; /* keys whose newest version did not reach it (absent.h) */
  bool has_nodes;   /* a built-in adapter of servers (redis): asked KVA_L2_NODES */
} l2_tier;

typedef struct l2_tiers {
  uint32_t n;
  l2_tier t[L2_MAX_TIERS];
  uint32_t frozen;       /* atomic: kva_set_freeze */
  uint32_t bypass_after; /* failures in a row that bypass a tier; 0 = never */
  /* counters (atomic) */
  uint64_t store_tasks, stored_keys, store_failures, store_skipped;
  uint64_t prefetch_requests, loaded_keys, load_failures, skipped_slow_keys;
} l2_tiers;

static inline bool l2_frozen(const l2_tiers *t) {
  return __atomic_load_n(&t->frozen, __ATOMIC_RELAXED) != 0;
}
static inline bool l2_usable(const l2_tiers *t, uint32_t i) {
  return !__atomic_load_n(&t->t[i].bypass_manual, __ATOMIC_RELAXED) &&
         !__atomic_load_n(&t->t[i].bypass_auto, __ATOMIC_RELAXED);
}
static inline void l2_count(uint64_t *counter, uint64_t n) {
  __atomic_add_fetch(counter, n, __ATOMIC_RELAXED);
}
/* Records the outcome of one operation on tier i: a failure that is the
 * bypass_after-th in a row bypasses the tier (with a warning); a success
 * resets the count. Errors that say "full" or "busy" (KVA_ENOMEM,
 * KVA_EAGAIN) are not health failures, nor is KVA_EUNAVAIL (one server of
 * the tier is down: the adapter keeps that server's health). */
void l2_health(l2_tiers *t, uint32_t i, int result);
/* A probe of an automatically bypassed tier was answered: clears it. */
void l2_recovered(l2_tiers *t, uint32_t i);
/* Index of the tier called name, or -1. */
int l2_tier_index(const l2_tiers *t, const char *name);
/* Each tier's meter as a plan at now sees it (l2_meter_plan), into
 * out[0, t->n). */
void l2_plan_views(l2_tiers *t, uint64_t now, load_plan_tier *out);

#endif
