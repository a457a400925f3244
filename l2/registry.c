/*
 * registry.c — adapter types and L2 policies by name (registry.h), three
 * registries of common/registry.h (its one rule: a taken name is refused,
 * the built-ins go in first) with their built-in entries: the adapters
 * l2/adapters/builtin.c names, the "default" and "skip_l1" store policies
 * and the "default" and "load_or_recompute" prefetch policies.
 */
#include "l2/registry.h"

#include <stddef.h>
#include <string.h>

#include "common/registry.h"

static void adapter_builtins(void);
static void store_builtins(void);
static void prefetch_builtins(void);

REGISTRY_DEFINE(adapters, kva_l2_factory, adapter_builtins, REGISTRY_NO_NAME);
REGISTRY_DEFINE(stores, kva_store_policy, store_builtins, offsetof(kva_store_policy, name));
REGISTRY_DEFINE(prefetches, kva_prefetch_policy, prefetch_builtins,
                offsetof(kva_prefetch_policy, name));

/* ---- built-in policies -------------------------------------------------- */

static void all_targets(void *arg, const kva_key *k, size_t n, uint32_t ntiers, uint8_t *t) {
  (void)arg, (void)k;
  uint8_t all = (uint8_t)((1u << ntiers) - 1u);
  for (size_t i = 0; i < n; i++) t[i] = all;
}
static void keep_all(void *arg, uint32_t tier, const kva_key *k, size_t n, uint8_t *del) {
  (void)arg, (void)tier, (void)k, (void)n, (void)del;
}
static void delete_all(void *arg, uint32_t tier, const kva_key *k, size_t n, uint8_t *del) {
  (void)arg, (void)tier, (void)k;
  memset(del, 1, n);
}
/* Each key goes to the lowest-index tier that has it. */
static void lowest_tier(void *arg, size_t n, uint32_t ntiers, const uint8_t *const *found,
                        int8_t *plan) {
  (void)arg;
  for (size_t i = 0; i < n; i++) {
    plan[i] = -1;
    for (uint32_t t = 0; t < ntiers && plan[i] < 0; t++)
      if (found[t] && kva_bit_get(found[t], i)) plan[i] = (int8_t)t;
  }
}

/* ---- the three registries ----------------------------------------------- */

static int put_adapter(const char *type, kva_l2_factory f) {
  return f ? registry_put(&adapters, type, &f) : KVA_EINVAL;
}

static void adapter_builtins(void) {
  l2_builtin_adapters(put_adapter);
}

static void store_builtins(void) {
  registry_put(&stores, "default", &(kva_store_policy){"default", all_targets, keep_all, NULL});
  registry_put(&stores, "skip_l1", &(kva_store_policy){"skip_l1", all_targets, delete_all, NULL});
}

static void prefetch_builtins(void) {
  registry_put(&prefetches, "default", &(kva_prefetch_policy){"default", lowest_tier, NULL});
  /* the same choice of tier; the controller then cuts the plan to the
   * prefix worth loading (prefetch_request.c, load_plan.h) */
  registry_put(&prefetches, PREFETCH_LOAD_OR_RECOMPUTE,
               &(kva_prefetch_policy){PREFETCH_LOAD_OR_RECOMPUTE, lowest_tier, NULL});
}

int kva_l2_register(const char *type, kva_l2_factory f) {
  return f ? registry_add(&adapters, type, &f) : KVA_EINVAL;
}

int kva_store_policy_register(const kva_store_policy *p) {
  if (!p || !p->select_targets || !p->select_l1_deletions) return KVA_EINVAL;
  return registry_add(&stores, p->name, p);
}

int kva_prefetch_policy_register(const kva_prefetch_policy *p) {
  if (!p || !p->select_load_plan) return KVA_EINVAL;
  return registry_add(&prefetches, p->name, p);
}

kva_l2_factory l2_factory_find(const char *type) {
  const kva_l2_factory *f = registry_find(&adapters, type);
  return f ? *f : NULL;
}

int store_policy_find(const char *name, kva_store_policy *out) {
  const kva_store_policy *p = registry_find(&stores, name);
  if (!p) return KVA_EINVAL;
  *out = *p;
  return KVA_OK;
}

int prefetch_policy_find(const char *name, kva_prefetch_policy *out) {
  const kva_prefetch_policy *p = registry_find(&prefetches, name);
  if (!p) return KVA_EINVAL;
  *out = *p;
  return KVA_OK;
}

size_t l2_adapter_names(const char *sep, char *out, size_t len) {
  return registry_names(&adapters, sep, out, len);
}

size_t store_policy_names(const char *sep, char *out, size_t len) {
  return registry_names(&stores, sep, out, len);
}

size_t prefetch_policy_names(const char *sep, char *out, size_t len) {
  return registry_names(&prefetches, sep, out, len);
}
