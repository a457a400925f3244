/*
 * registry.c — adapter types and L2 policies by name (registry.h), with
 * the built-in entries: the "mock" adapter, the "default" and "skip_l1"
 * store policies and the "default" prefetch policy.
 */
#include "l2/registry.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "l2/mock.h"

#define MAX_ENTRIES 32

typedef struct named {
  char name[REGISTRY_NAME_MAX + 1];
} named;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static struct {
  named id;
  kva_l2_factory f;
} adapters[MAX_ENTRIES];
static size_t nadapters;
static struct {
  named id;
  kva_store_policy p;
} stores[MAX_ENTRIES];
static size_t nstores;
static struct {
  named id;
  kva_prefetch_policy p;
} prefetches[MAX_ENTRIES];
static size_t nprefetches;

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

/* Index of the entry named `name` in an array of structs that start with
 * a `named`, or -1. */
static int find_name(const void *first, size_t stride, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(((const named *)((const char *)first + i * stride))->name, name) == 0) return (int)i;
  return -1;
}
#define FIND(arr, n, name) find_name(&(arr)[0].id, sizeof((arr)[0]), (n), (name))

static int add_adapter(const char *type, kva_l2_factory f) {
  if (!name_ok(type) || !f) return KVA_EINVAL;
  pthread_mutex_lock(&lock);
  int rc = KVA_EINVAL;
  if (nadapters < MAX_ENTRIES && FIND(adapters, nadapters, type) < 0) {
    snprintf(adapters[nadapters].id.name, sizeof(named), "%s", type);
    adapters[nadapters++].f = f;
    rc = KVA_OK;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static int add_store(const kva_store_policy *p) {
  if (!p || !name_ok(p->name) || !p->select_targets || !p->select_l1_deletions) return KVA_EINVAL;
  pthread_mutex_lock(&lock);
  int rc = KVA_EINVAL;
  if (nstores < MAX_ENTRIES && FIND(stores, nstores, p->name) < 0) {
    snprintf(stores[nstores].id.name, sizeof(named), "%s", p->name);
    stores[nstores].p = *p;
    stores[nstores].p.name = stores[nstores].id.name;
    nstores++;
    rc = KVA_OK;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static int add_prefetch(const kva_prefetch_policy *p) {
  if (!p || !name_ok(p->name) || !p->select_load_plan) return KVA_EINVAL;
  pthread_mutex_lock(&lock);
  int rc = KVA_EINVAL;
  if (nprefetches < MAX_ENTRIES && FIND(prefetches, nprefetches, p->name) < 0) {
    snprintf(prefetches[nprefetches].id.name, sizeof(named), "%s", p->name);
    prefetches[nprefetches].p = *p;
    prefetches[nprefetches].p.name = prefetches[nprefetches].id.name;
    nprefetches++;
    rc = KVA_OK;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static void builtins(void) {
  add_adapter("mock", mock_adapter_spawn);
  add_store(&(kva_store_policy){"default", all_targets, keep_all, NULL});
  add_store(&(kva_store_policy){"skip_l1", all_targets, delete_all, NULL});
  add_prefetch(&(kva_prefetch_policy){"default", lowest_tier, NULL});
}

int kva_l2_register(const char *type, kva_l2_factory f) {
  pthread_once(&once, builtins);
  return add_adapter(type, f);
}
int kva_store_policy_register(const kva_store_policy *p) {
  pthread_once(&once, builtins);
  return add_store(p);
}
int kva_prefetch_policy_register(const kva_prefetch_policy *p) {
  pthread_once(&once, builtins);
  return add_prefetch(p);
}

kva_l2_factory l2_factory_find(const char *type) {
  pthread_once(&once, builtins);
  pthread_mutex_lock(&lock);
  int i = type ? FIND(adapters, nadapters, type) : -1;
  kva_l2_factory f = i >= 0 ? adapters[i].f : NULL;
  pthread_mutex_unlock(&lock);
  return f;
}

int store_policy_find(const char *name, kva_store_policy *out) {
  pthread_once(&once, builtins);
  pthread_mutex_lock(&lock);
  int i = name ? FIND(stores, nstores, name) : -1;
  if (i >= 0) *out = stores[i].p;
  pthread_mutex_unlock(&lock);
  return i >= 0 ? KVA_OK : KVA_EINVAL;
}

int prefetch_policy_find(const char *name, kva_prefetch_policy *out) {
  pthread_once(&once, builtins);
  pthread_mutex_lock(&lock);
  int i = name ? FIND(prefetches, nprefetches, name) : -1;
  if (i >= 0) *out = prefetches[i].p;
  pthread_mutex_unlock(&lock);
  return i >= 0 ? KVA_OK : KVA_EINVAL;
}

static void names(char *out, size_t len, size_t n, const named *first, size_t stride) {
  size_t o = 0;
  if (len) out[0] = 0;
  for (size_t i = 0; i < n && o < len; i++) {
    const named *id = (const named *)((const char *)first + i * stride);
    int w = snprintf(out + o, len - o, "%s%s", i ? " " : "", id->name);
    if (w < 0) break;
    o += (size_t)w;
  }
}

void store_policy_names(char *out, size_t len) {
  pthread_once(&once, builtins);
  pthread_mutex_lock(&lock);
  names(out, len, nstores, &stores[0].id, sizeof(stores[0]));
  pthread_mutex_unlock(&lock);
}

void prefetch_policy_names(char *out, size_t len) {
  pthread_once(&once, builtins);
  pthread_mutex_lock(&lock);
  names(out, len, nprefetches, &prefetches[0].id, sizeof(prefetches[0]));
  pthread_mutex_unlock(&lock);
}
