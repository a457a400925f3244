/*
 * registry.c — adapter types and L2 policies by name (registry.h), with
 * the built-in entries: the adapters l2/adapters/builtin.c names, the
 * "default" and "skip_l1" store policies and the "default" prefetch policy.
 */
#include "l2/registry.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define MAX_ENTRIES 32

typedef struct named {
  char name[REGISTRY_NAME_MAX + 1];
} named;

/* One registry: names and values (copies), filled in order, never removed.
 * Every access holds `lock`. */
typedef union value {
  kva_l2_factory factory;
  kva_store_policy store;
  kva_prefetch_policy prefetch;
} value;
typedef struct registry {
  named names[MAX_ENTRIES];
  value values[MAX_ENTRIES];
  size_t n;
} registry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static registry adapters, stores, prefetches;

static void builtins_register(void);

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

static bool name_ok(const char *name) {
  size_t len = name ? strnlen(name, REGISTRY_NAME_MAX + 1) : 0;
  return len > 0 && len <= REGISTRY_NAME_MAX;
}

/* Index of `name` in r, or -1. Caller holds the lock. */
static int find(const registry *r, const char *name) {
  for (size_t i = 0; name && i < r->n; i++)
    if (strcmp(r->names[i].name, name) == 0) return (int)i;
  return -1;
}

/* Adds a copy of v under name: KVA_EINVAL for a taken name or a full
 * registry. */
static int add(registry *r, const char *name, const value *v) {
  pthread_mutex_lock(&lock);
  int rc = KVA_EINVAL;
  if (r->n < MAX_ENTRIES && find(r, name) < 0) {
    snprintf(r->names[r->n].name, sizeof(named), "%s", name);
    r->values[r->n++] = *v;
    rc = KVA_OK;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

/* Copies the value registered as name into *out; its name (for policies)
 * is the registry's copy. */
static int lookup(registry *r, const char *name, value *out, const char **stored_name) {
  pthread_once(&once, builtins_register);
  pthread_mutex_lock(&lock);
  int i = find(r, name);
  if (i >= 0) {
    *out = r->values[i];
    *stored_name = r->names[i].name;
  }
  pthread_mutex_unlock(&lock);
  return i >= 0 ? KVA_OK : KVA_EINVAL;
}

static int add_adapter(const char *type, kva_l2_factory f) {
  if (!name_ok(type) || !f) return KVA_EINVAL;
  return add(&adapters, type, &(value){.factory = f});
}

static int add_store(const kva_store_policy *p) {
  if (!p || !name_ok(p->name) || !p->select_targets || !p->select_l1_deletions) return KVA_EINVAL;
  return add(&stores, p->name, &(value){.store = *p});
}

static int add_prefetch(const kva_prefetch_policy *p) {
  if (!p || !name_ok(p->name) || !p->select_load_plan) return KVA_EINVAL;
  return add(&prefetches, p->name, &(value){.prefetch = *p});
}

static void builtins_register(void) {
  l2_builtin_adapters(add_adapter);
  add_store(&(kva_store_policy){"default", all_targets, keep_all, NULL});
  add_store(&(kva_store_policy){"skip_l1", all_targets, delete_all, NULL});
  add_prefetch(&(kva_prefetch_policy){"default", lowest_tier, NULL});
}

int kva_l2_register(const char *type, kva_l2_factory f) {
  pthread_once(&once, builtins_register);
  return add_adapter(type, f);
}
int kva_store_policy_register(const kva_store_policy *p) {
  pthread_once(&once, builtins_register);
  return add_store(p);
}
int kva_prefetch_policy_register(const kva_prefetch_policy *p) {
  pthread_once(&once, builtins_register);
  return add_prefetch(p);
}

kva_l2_factory l2_factory_find(const char *type) {
  value v;
  const char *name;
  return lookup(&adapters, type, &v, &name) == KVA_OK ? v.factory : NULL;
}

int store_policy_find(const char *name, kva_store_policy *out) {
  value v;
  if (lookup(&stores, name, &v, &name) != KVA_OK) return KVA_EINVAL;
  *out = v.store;
  out->name = name;
  return KVA_OK;
}

int prefetch_policy_find(const char *name, kva_prefetch_policy *out) {
  value v;
  if (lookup(&prefetches, name, &v, &name) != KVA_OK) return KVA_EINVAL;
  *out = v.prefetch;
  out->name = name;
  return KVA_OK;
}

static void names(const registry *r, char *out, size_t len) {
  pthread_once(&once, builtins_register);
  pthread_mutex_lock(&lock);
  size_t o = 0;
  if (len) out[0] = 0;
  for (size_t i = 0; i < r->n && o < len; i++) {
    int w = snprintf(out + o, len - o, "%s%s", i ? " " : "", r->names[i].name);
    if (w < 0) break;
    o += (size_t)w;
  }
  pthread_mutex_unlock(&lock);
}

void store_policy_names(char *out, size_t len) {
  names(&stores, out, len);
}

void prefetch_policy_names(char *out, size_t len) {
  names(&prefetches, out, len);
}
