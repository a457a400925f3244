/*
 * tiers.c — tier health: automatic bypass after failures in a row, and
 * recovery when a probe is answered. A tier of several servers answers
 * KVA_EUNAVAIL when one of them is down and keeps its health per server
 * (the redis adapter's nodes): that answer changes nothing here.
 */
#include "l2/tiers.h"

#include <string.h>

#include "actors/log.h"

void l2_health(l2_tiers *t, uint32_t i, int result) {
  l2_tier *tier = &t->t[i];
  if (result == KVA_OK || result == KVA_ENOMEM || result == KVA_EAGAIN || result == KVA_EUNAVAIL) {
    if (result == KVA_OK) __atomic_store_n(&tier->failures, 0, __ATOMIC_RELAXED);
    return;
  }
  uint32_t f = __atomic_add_fetch(&tier->failures, 1, __ATOMIC_RELAXED);
  if (t->bypass_after && f == t->bypass_after &&
      !__atomic_exchange_n(&tier->bypass_auto, 1, __ATOMIC_RELAXED))
    LOG_WARN("l2: tier %s failed %u times in a row (last: %s); bypassed until it answers a probe",
             tier->name, f, kva_strerror(result));
}

void l2_recovered(l2_tiers *t, uint32_t i) {
  l2_tier *tier = &t->t[i];
  __atomic_store_n(&tier->failures, 0, __ATOMIC_RELAXED);
  if (__atomic_exchange_n(&tier->bypass_auto, 0, __ATOMIC_RELAXED))
    LOG_INFO("l2: tier %s answered a probe; no longer bypassed", tier->name);
}

int l2_tier_index(const l2_tiers *t, const char *name) {
  if (!name) return -1;
  for (uint32_t i = 0; i < t->n; i++)
    if (strcmp(t->t[i].name, name) == 0) return (int)i;
  return -1;
}

void l2_plan_views(l2_tiers *t, uint64_t now, load_plan_tier *out) {
  for (uint32_t i = 0; i < t->n; i++) l2_meter_plan(&t->t[i].meter, now, &out[i]);
}
