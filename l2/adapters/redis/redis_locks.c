/*
 * redis_locks.c — client-side lookup lock counts of the redis adapter
 * (redis_internal.h). Redis itself knows nothing of them: a locked key is
 * only protected against this adapter's own STOREs, which is what the L2
 * protocol asks of a tier (and a value changed behind our back still fails
 * verification at load, so it is never served as the wrong bytes).
 *
 * A chained hash table keyed by key_hash; an entry lives while its count
 * is above zero, so the table holds only the keys locked right now.
 */
#include <stdlib.h>
#include <string.h>

#include "l2/adapters/redis/redis_internal.h"

static redis_lock_entry **find(const redis_locks *l, const kva_key *k, uint64_t h) {
  if (!l->nb) return NULL;
  redis_lock_entry **p = &l->b[h & (l->nb - 1)];
  for (; *p; p = &(*p)->next)
    if ((*p)->hash == h && kva_key_equal(&(*p)->key, k)) return p;
  return p; /* the empty link at the end of the chain */
}

/* Doubles the buckets when the chains would grow past one entry on
 * average; on ENOMEM the table just stays as it is (slower, still right). */
static void grow(redis_locks *l) {
  size_t nb = l->nb ? l->nb * 2 : 64;
  redis_lock_entry **b = calloc(nb, sizeof(*b));
  if (!b) return;
  for (size_t i = 0; i < l->nb; i++)
    for (redis_lock_entry *e = l->b[i], *next; e; e = next) {
      next = e->next;
      e->next = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
    }
  free(l->b);
  l->b = b;
  l->nb = nb;
}

bool redis_lock(redis_locks *l, const kva_key *k) {
  if (l->nkeys >= l->nb) grow(l);
  if (!l->nb) return false;
  uint64_t h = kva_key_hash(k);
  redis_lock_entry **p = find(l, k, h);
  if (!*p) {
    redis_lock_entry *e = calloc(1, sizeof(*e));
    if (!e) return false;
    e->key = *k;
    e->hash = h;
    *p = e;
    l->nkeys++;
  }
  (*p)->count++;
  l->total++;
  return true;
}

void redis_unlock(redis_locks *l, const kva_key *k) {
  redis_lock_entry **p = find(l, k, kva_key_hash(k));
  if (!p || !*p) return; /* not locked: ignored, as the protocol says */
  l->total--;
  if (--(*p)->count) return;
  redis_lock_entry *e = *p;
  *p = e->next;
  free(e);
  l->nkeys--;
}

bool redis_locked(const redis_locks *l, const kva_key *k) {
  redis_lock_entry **p = find(l, k, kva_key_hash(k));
  return p && *p;
}

void redis_locks_free(redis_locks *l) {
  for (size_t i = 0; i < l->nb; i++)
    for (redis_lock_entry *e = l->b[i], *next; e; e = next) {
      next = e->next;
      free(e);
    }
  free(l->b);
  memset(l, 0, sizeof(*l));
}
