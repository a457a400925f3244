/*
 * mock_store.c — the mock adapter's storage (see mock_store.h).
 *
 * Invariants:
 *  - used <= capacity (when bounded), and locked_bytes <= used: an entry's
 *    bytes are in locked_bytes exactly while its lock count is > 0;
 *  - every entry is in exactly one bucket chain and in the FIFO list, whose
 *    order is insertion order (a replaced key counts as newly inserted),
 *    except that an insertion moves the entries before it in its chain to
 *    the newest end after it (mock_store.h);
 *  - a locked entry is never evicted or replaced;
 *  - a store task is checked before anything changes, and the check
 *    (bytes of the task <= capacity - locked_bytes) guarantees that
 *    evicting unlocked entries oldest-first, skipping those the task
 *    itself inserted, makes room for every object of the task.
 */
#include "l2/adapters/mock/mock_store.h"

#include <stdlib.h>
#include <string.h>

#define MOCK_BUCKETS_MIN 1024u
#define MOCK_SPARE_MAX 4096u         /* entry records kept for reuse */
#define MOCK_POOL_CAP (256ull << 20) /* bytes the buffer free lists may hold */

/* ---- buffer free lists ------------------------------------------------ */

static mock_pool_class *pool_class_of(mock_store *s, uint64_t bytes, bool claim) {
  mock_pool_class *empty = NULL;
  for (uint32_t i = 0; i < MOCK_POOL_CLASSES; i++) {
    mock_pool_class *c = &s->pool[i];
    if (c->bytes == bytes && (c->count || !claim)) return c;
    if (!c->count && !empty) empty = c;
  }
  if (!claim || !empty) return NULL;
  empty->bytes = bytes;
  return empty;
}

/* A buffer of exactly `bytes`: a recycled one when a free list has it. */
static void *buf_get(mock_store *s, uint64_t bytes) {
  mock_pool_class *c = pool_class_of(s, bytes, false);
  if (!c || !c->count) return malloc(bytes);
  void *p = c->head;
  memcpy(&c->head, p, sizeof(void *));
  c->count--;
  s->pooled -= bytes;
  return p;
}

/* Keeps the buffer for a later object of the same size, within bounds
 * (bytes pooled, sizes, buffers per size); frees it otherwise. */
static void buf_put(mock_store *s, void *p, uint64_t bytes) {
  mock_pool_class *c = NULL;
  if (bytes >= sizeof(void *) && s->pooled + bytes <= s->pool_limit)
    c = pool_class_of(s, bytes, true);
  if (!c || c->count >= MOCK_POOL_PER_CLASS) {
    free(p);
    return;
  }
  memcpy(p, &c->head, sizeof(void *));
  c->head = p;
  c->count++;
  s->pooled += bytes;
}

static void pool_drain(mock_store *s) {
  for (uint32_t i = 0; i < MOCK_POOL_CLASSES; i++) {
    mock_pool_class *c = &s->pool[i];
    while (c->count) {
      void *p = c->head;
      memcpy(&c->head, p, sizeof(void *));
      free(p);
      c->count--;
    }
  }
  s->pooled = 0;
}

/* ---- table -------------------------------------------------------------- */

int mock_store_init(mock_store *s, uint64_t capacity) {
  memset(s, 0, sizeof(*s));
  s->capacity = capacity;
  /* bounded by the tier itself for small tiers: pooled memory never
   * exceeds what the tier could hold */
  s->pool_limit = capacity && capacity < MOCK_POOL_CAP ? capacity : MOCK_POOL_CAP;
  s->nbuckets = MOCK_BUCKETS_MIN;
  s->bucket = calloc(s->nbuckets, sizeof(*s->bucket));
  s->hint = calloc(MOCK_HINTS, sizeof(*s->hint));
  return s->bucket && s->hint ? KVA_OK : KVA_ENOMEM;
}

void mock_store_destroy(mock_store *s) {
  for (mock_entry *e = s->oldest, *next; e; e = next) {
    next = e->newer;
    free(e->data);
    free(e);
  }
  while (s->spare) {
    mock_entry *e = s->spare;
    s->spare = e->chain;
    free(e);
  }
  pool_drain(s);
  free(s->bucket);
  free(s->hint);
  memset(s, 0, sizeof(*s));
}

mock_entry *mock_store_find(const mock_store *s, const kva_key *k, uint64_t hash) {
  for (mock_entry *e = s->bucket[hash & (s->nbuckets - 1)]; e; e = e->chain)
    if (e->hash == hash && kva_key_equal(&e->key, k)) return e;
  return NULL;
}

/* Doubles the bucket array at load factor 1; on ENOMEM the chains just
 * grow longer. */
static void table_grow(mock_store *s) {
  uint64_t n = s->nbuckets * 2;
  mock_entry **b = calloc(n, sizeof(*b));
  if (!b) return;
  for (uint64_t i = 0; i < s->nbuckets; i++) {
    for (mock_entry *e = s->bucket[i], *next; e; e = next) {
      next = e->chain;
      e->chain = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
    }
  }
  free(s->bucket);
  s->bucket = b;
  s->nbuckets = n;
}

static void fifo_append(mock_store *s, mock_entry *e) {
  e->older = s->newest;
  e->newer = NULL;
  if (s->newest)
    s->newest->newer = e;
  else
    s->oldest = e;
  s->newest = e;
}

static void fifo_unlink(mock_store *s, mock_entry *e) {
  if (e->older)
    e->older->newer = e->newer;
  else
    s->oldest = e->newer;
  if (e->newer)
    e->newer->older = e->older;
  else
    s->newest = e->older;
}

static void entry_link(mock_store *s, mock_entry *e) {
  mock_entry **head = &s->bucket[e->hash & (s->nbuckets - 1)];
  e->chain = *head;
  *head = e;
  fifo_append(s, e);
  s->count++;
  s->used += e->bytes;
  if (s->count > s->nbuckets) table_grow(s);
}

/* Unlinks and frees an unlocked entry; its buffer and record are kept for
 * reuse. */
static void entry_remove(mock_store *s, mock_entry *e) {
  mock_entry **pp = &s->bucket[e->hash & (s->nbuckets - 1)];
  while (*pp != e) pp = &(*pp)->chain;
  *pp = e->chain;
  fifo_unlink(s, e);
  s->count--;
  s->used -= e->bytes;
  buf_put(s, e->data, e->bytes);
  if (s->nspare < MOCK_SPARE_MAX) {
    e->chain = s->spare;
    s->spare = e;
    s->nspare++;
  } else {
    free(e);
  }
}

static mock_entry *entry_new(mock_store *s) {
  mock_entry *e = s->spare;
  if (!e) return malloc(sizeof(*e));
  s->spare = e->chain;
  s->nspare--;
  return e;
}

/* ---- chains ------------------------------------------------------------- */

/* The entry of hash `hash` (matched on the hash alone: a false match only
 * reorders eviction), or NULL. */
static mock_entry *find_hash(const mock_store *s, uint64_t hash) {
  if (hash == 0) return NULL;
  for (mock_entry *e = s->bucket[hash & (s->nbuckets - 1)]; e; e = e->chain)
    if (e->hash == hash) return e;
  return NULL;
}

/* Moves the entry of hash `from` and the entries before it in its chain to
 * the newest end, in order (the chain's start ends newest). The walk stops
 * at an entry it reached already, so a cycle of wrong links ends. */
static void chain_renew(mock_store *s, uint64_t from) {
  uint64_t walk = ++s->walks;
  for (mock_entry *e = find_hash(s, from); e && e->walk != walk; e = find_hash(s, e->parent)) {
    e->walk = walk;
    fifo_unlink(s, e);
    fifo_append(s, e);
  }
}

void mock_store_follows(mock_store *s, mock_entry *e, uint64_t hash, uint64_t prev) {
  if (prev == hash || prev == 0) return; /* a key repeated: no chain */
  if (e) {
    if (e->parent == 0) e->parent = prev;
    return;
  }
  s->hint[hash & (MOCK_HINTS - 1)] = (mock_hint){hash, prev};
}

/* The key key i of the task continues: the one before it, or for the
 * first the one a lookup saw before it; 0 for none. */
static uint64_t chain_parent(const mock_store *s, const uint64_t *hashes, size_t i) {
  const mock_hint *h = &s->hint[hashes[0] & (MOCK_HINTS - 1)];
  uint64_t p = i ? hashes[i - 1] : h->hash == hashes[0] ? h->parent : 0;
  return p == hashes[i] ? 0 : p;
}

/* ---- locks -------------------------------------------------------------- */

void mock_store_lock(mock_store *s, mock_entry *e) {
  if (e->locks++ == 0) s->locked_bytes += e->bytes;
  s->locks++;
}

void mock_store_unlock(mock_store *s, mock_entry *e) {
  if (!e->locks) return;
  if (--e->locks == 0) s->locked_bytes -= e->bytes;
  s->locks--;
}

/* ---- store tasks -------------------------------------------------------- */

int mock_store_check(const mock_store *s, const kva_l2_req *r, const uint64_t *hashes) {
  uint64_t need = 0;
  for (size_t i = 0; i < r->n; i++) {
    const mock_entry *e = mock_store_find(s, &r->keys[i], hashes[i]);
    if (e && e->locks) return KVA_EAGAIN;
    /* a key twice in one task is counted twice: conservative, never short */
    if (__builtin_add_overflow(need, (uint64_t)r->bufs[i].len, &need)) return KVA_ENOMEM;
  }
  /* everything unlocked may go (replaced keys are unlocked, see above) */
  if (s->capacity && need > s->capacity - s->locked_bytes) return KVA_ENOMEM;
  return KVA_OK;
}

/* Evicts unlocked entries, oldest first, until `bytes` more fit. The
 * task's own entries stay: they need not be the newest (an insertion
 * moves its chain's older entries after them). */
static bool evict_for(mock_store *s, uint64_t bytes) {
  mock_entry *e = s->oldest;
  while (s->capacity && s->used + bytes > s->capacity && e) {
    mock_entry *next = e->newer;
    if (!e->locks && e->epoch != s->epoch) {
      entry_remove(s, e);
      s->evictions++;
    }
    e = next;
  }
  return !s->capacity || s->used + bytes <= s->capacity;
}

/* Removes what the task inserted so far (apply failed half way). */
static void task_rollback(mock_store *s, const kva_l2_req *r, const uint64_t *hashes, size_t upto) {
  for (size_t i = 0; i < upto; i++) {
    mock_entry *e = mock_store_find(s, &r->keys[i], hashes[i]);
    if (e && e->epoch == s->epoch) entry_remove(s, e);
  }
}

/* Stores one object continuing the key of hash parent: replace, make
 * room (the chain it continues renewed first, so it is not what goes),
 * copy, and the chain renewed after it. */
static int store_one(mock_store *s, const kva_key *k, uint64_t hash, const kva_buf *b, uint64_t fp,
                     uint64_t parent) {
  mock_entry *old = mock_store_find(s, k, hash);
  if (old) entry_remove(s, old); /* unlocked: mock_store_check said so */
  chain_renew(s, parent);
  if (!evict_for(s, b->len)) {
    kva_log(KVA_LOG_ERROR, "mock: a checked store task does not fit (bug)");
    return KVA_ENOMEM;
  }
  mock_entry *e = entry_new(s);
  void *data = e ? buf_get(s, b->len) : NULL;
  if (!data) {
    free(e);
    return KVA_ENOMEM;
  }
  memcpy(data, b->ptr, b->len);
  *e = (mock_entry){.key = *k,
                    .hash = hash,
                    .fp = fp,
                    .bytes = b->len,
                    .data = data,
                    .epoch = s->epoch,
                    .parent = parent};
  entry_link(s, e);
  chain_renew(s, parent);
  return KVA_OK;
}

int mock_store_apply(mock_store *s, const kva_l2_req *r, const uint64_t *hashes, uint64_t fp,
                     uint64_t *copied) {
  s->epoch++;
  *copied = 0;
  for (size_t i = 0; i < r->n; i++) {
    int rc = store_one(s, &r->keys[i], hashes[i], &r->bufs[i], fp, chain_parent(s, hashes, i));
    if (rc != KVA_OK) {
      task_rollback(s, r, hashes, i);
      return rc;
    }
    *copied += r->bufs[i].len;
  }
  return KVA_OK;
}
