/*
 * policy.c — the registry of eviction policies, by name.
 *
 * A small static table of policy_ops pointers (the caller keeps each ops
 * struct alive). The built-ins (lru, mru, fifo from policy_list.c; lfu from
 * policy_lfu.c) are registered on first use through pthread_once, so the
 * first policy_find may race with another first policy_find safely. A mutex
 * also serialises register and find, which is more than policy.h promises
 * but costs nothing at configuration time.
 *
 * Invariants: entries [0, policy_table_len) are valid ops with distinct
 * names; an entry is never removed, only replaced by one with the same name.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "kvact.h"
#include "l1/policy.h"

/* Most policies the table holds, built-ins included. */
#define POLICY_TABLE_MAX 64

/* The built-ins, defined next to their implementations. */
extern const policy_ops policy_lru_ops;
extern const policy_ops policy_mru_ops;
extern const policy_ops policy_fifo_ops;
extern const policy_ops policy_lfu_ops;

static const policy_ops *policy_table[POLICY_TABLE_MAX]; /* registered, by insertion */
static size_t policy_table_len;                          /* used entries of policy_table */
static pthread_mutex_t policy_table_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t policy_builtins_once = PTHREAD_ONCE_INIT;

/* Whether ops can be used: a non-empty name and every function present. */
static int policy_ops_valid(const policy_ops *ops) {
  return ops && ops->name && ops->name[0] && ops->create && ops->destroy && ops->on_created &&
         ops->on_touched && ops->on_removed && ops->candidates && ops->count;
}

/* Index of the entry named `name`, or -1. Caller holds the lock. */
static int policy_table_index(const char *name) {
  for (size_t i = 0; i < policy_table_len; i++)
    if (strcmp(policy_table[i]->name, name) == 0) return (int)i;
  return -1;
}

/* Adds or replaces ops (already validated) under the lock. */
static int policy_table_put(const policy_ops *ops) {
  int rc = KVA_OK;
  pthread_mutex_lock(&policy_table_lock);
  int i = policy_table_index(ops->name);
  if (i >= 0)
    policy_table[i] = ops;
  else if (policy_table_len < POLICY_TABLE_MAX)
    policy_table[policy_table_len++] = ops;
  else
    rc = KVA_ENOMEM;
  pthread_mutex_unlock(&policy_table_lock);
  return rc;
}

/* Runs once per process, before any lookup or registration, so that a user
 * registration of a built-in name replaces the built-in rather than being
 * overwritten by it later. The table is empty here, so no put can fail. */
static void policy_builtins_register(void) {
  policy_table_put(&policy_lru_ops);
  policy_table_put(&policy_mru_ops);
  policy_table_put(&policy_fifo_ops);
  policy_table_put(&policy_lfu_ops);
}

/* Registers ops under ops->name, replacing a policy of the same name.
 * KVA_EINVAL for incomplete ops, KVA_ENOMEM when the table is full. */
int policy_register(const policy_ops *ops) {
  if (!policy_ops_valid(ops)) return KVA_EINVAL;
  pthread_once(&policy_builtins_once, policy_builtins_register);
  return policy_table_put(ops);
}

/* The policy registered as `name`, or NULL (also for a NULL name). */
const policy_ops *policy_find(const char *name) {
  if (!name) return NULL;
  pthread_once(&policy_builtins_once, policy_builtins_register);
  pthread_mutex_lock(&policy_table_lock);
  int i = policy_table_index(name);
  const policy_ops *ops = i >= 0 ? policy_table[i] : NULL;
  pthread_mutex_unlock(&policy_table_lock);
  return ops;
}

/* The public registration: a copy, kept for the process's life; names are
 * never replaced (built-ins included). */
int kva_eviction_policy_register(const kva_eviction_policy *p) {
  static kva_eviction_policy copies[POLICY_TABLE_MAX];
  static char names[POLICY_TABLE_MAX][32];
  static size_t ncopies;
  if (!policy_ops_valid(p) || strnlen(p->name, 32) > 31) return KVA_EINVAL;
  pthread_once(&policy_builtins_once, policy_builtins_register);
  pthread_mutex_lock(&policy_table_lock);
  int rc = KVA_EINVAL;
  if (policy_table_index(p->name) < 0 && ncopies < POLICY_TABLE_MAX &&
      policy_table_len < POLICY_TABLE_MAX) {
    kva_eviction_policy *c = &copies[ncopies];
    *c = *p;
    strcpy(names[ncopies], p->name);
    c->name = names[ncopies++];
    policy_table[policy_table_len++] = c;
    rc = KVA_OK;
  }
  pthread_mutex_unlock(&policy_table_lock);
  return rc;
}

void *policy_reserve_slot(void *arr, size_t *cap, uint32_t slot, size_t size) {
  size_t old = *cap;
  if (!array_grow(&arr, cap, (size_t)slot + 1, size)) return NULL;
  memset((unsigned char *)arr + old * size, 0, (*cap - old) * size);
  return arr;
}
