/*
 * common/registry.c — named values, one rule for every kind (registry.h).
 *
 * Invariants: entries [0, n) have distinct names of 1..REGISTRY_NAME_MAX
 * bytes; an entry, once counted in n, is never written again, which is
 * why registry_find may hand out a pointer to it after unlocking (the
 * lock's release at the add and acquire at the find order its bytes).
 */
#include "common/registry.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kvact.h"

static bool name_ok(const char *name) {
  size_t len = name ? strnlen(name, REGISTRY_NAME_MAX + 1) : 0;
  return len > 0 && len <= REGISTRY_NAME_MAX;
}

/* Index of name, or -1. Caller holds the lock. */
static long index_of(const registry *r, const char *name) {
  for (size_t i = 0; i < r->n; i++)
    if (strcmp(r->names[i], name) == 0) return (long)i;
  return -1;
}

static unsigned char *value_at(const registry *r, size_t i) {
  return r->values + i * r->value_size;
}

/* Copies value into entry n, its name pointer aimed at the stored name.
 * Caller holds the lock. */
static void store(registry *r, const char *name, const void *value) {
  unsigned char *v = value_at(r, r->n);
  snprintf(r->names[r->n], sizeof r->names[r->n], "%s", name);
  memcpy(v, value, r->value_size);
  if (r->name_offset != REGISTRY_NO_NAME) {
    const char *stored = r->names[r->n];
    memcpy(v + r->name_offset, &stored, sizeof stored);
  }
  r->n++;
}

int registry_put(registry *r, const char *name, const void *value) {
  if (!name_ok(name) || !value) return KVA_EINVAL;
  pthread_mutex_lock(&r->lock);
  int rc = KVA_OK;
  if (index_of(r, name) >= 0)
    rc = KVA_EINVAL; /* taken: never replaced */
  else if (r->n == REGISTRY_CAP)
    rc = KVA_ENOMEM;
  else
    store(r, name, value);
  pthread_mutex_unlock(&r->lock);
  return rc;
}

int registry_add(registry *r, const char *name, const void *value) {
  pthread_once(&r->once, r->builtins);
  return registry_put(r, name, value);
}

const void *registry_find(registry *r, const char *name) {
  if (!name) return NULL;
  pthread_once(&r->once, r->builtins);
  pthread_mutex_lock(&r->lock);
  long i = index_of(r, name);
  const void *v = i >= 0 ? value_at(r, (size_t)i) : NULL;
  pthread_mutex_unlock(&r->lock);
  return v;
}

size_t registry_names(registry *r, const char *sep, char *out, size_t len) {
  pthread_once(&r->once, r->builtins);
  pthread_mutex_lock(&r->lock);
  size_t need = 0;
  if (len) out[0] = '\0';
  for (size_t i = 0; i < r->n; i++) {
    const char *s = i ? sep : "";
    int w = snprintf(need < len ? out + need : NULL, need < len ? len - need : 0, "%s%s", s,
                     r->names[i]);
    need += w > 0 ? (size_t)w : 0;
  }
  pthread_mutex_unlock(&r->lock);
  return need;
}
