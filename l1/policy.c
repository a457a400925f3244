/*
 * policy.c — the registry of eviction policies, by name: a registry of
 * common/registry.h (its one rule: a taken name is refused, the built-ins
 * go in first, values are copies kept for the process's life), and the
 * slot-array helper the implementations share.
 *
 * The built-ins (lru, mru, fifo from policy_list.c; lfu from policy_lfu.c)
 * are registered on first use, so racing first lookups all see them.
 */
#include <stddef.h>
#include <string.h>

#include "common/array.h"
#include "common/registry.h"
#include "kvact.h"
#include "l1/policy.h"

/* The built-ins, defined next to their implementations. */
extern const policy_ops policy_lru_ops;
extern const policy_ops policy_mru_ops;
extern const policy_ops policy_fifo_ops;
extern const policy_ops policy_lfu_ops;

static void policy_builtins(void);
REGISTRY_DEFINE(policies, policy_ops, policy_builtins, offsetof(policy_ops, name));

/* Whether ops can be used: every function present (the registry checks
 * the name). */
static int policy_ops_valid(const policy_ops *ops) {
  return ops && ops->create && ops->destroy && ops->on_created && ops->on_touched &&
         ops->on_removed && ops->candidates && ops->count;
}

static void policy_builtins(void) {
  const policy_ops *builtin[] = {&policy_lru_ops, &policy_mru_ops, &policy_fifo_ops,
                                 &policy_lfu_ops};
  for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
    registry_put(&policies, builtin[i]->name, builtin[i]);
}

/* The policy registered as `name`, or NULL (also for a NULL name). */
const policy_ops *policy_find(const char *name) {
  return registry_find(&policies, name);
}

size_t policy_names(const char *sep, char *out, size_t len) {
  return registry_names(&policies, sep, out, len);
}

/* A copy, kept for the process's life (its name too). */
int kva_eviction_policy_register(const kva_eviction_policy *p) {
  if (!policy_ops_valid(p)) return KVA_EINVAL;
  return registry_add(&policies, p->name, p);
}

void *policy_reserve_slot(void *arr, size_t *cap, uint32_t slot, size_t size) {
  size_t old = *cap;
  if (!array_grow(&arr, cap, (size_t)slot + 1, size)) return NULL;
  memset((unsigned char *)arr + old * size, 0, (*cap - old) * size);
  return arr;
}
