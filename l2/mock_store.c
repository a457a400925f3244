/*
 * mock_store.c — the mock adapter's storage (see mock_store.h).
 *
 * Invariants:
 *  - used <= capacity (when bounded), and locked_bytes <= used: an entry's
 *    bytes are in locked_bytes exactly while its lock count is > 0;
 *  - every entry is in exactly one bucket chain and in the FIFO list, whose
 *    order is insertion order (a replaced key counts as newly inserted);
 *  - a locked entry is never evicted or replaced;
 *  - a store task is checked before anything changes, and the check
 *    (bytes of the task <= capacity - locked_bytes) guarantees that
 *    evicting unlocked entries oldest-first makes room for every object of
 *    the task without touching what the task itself inserted: those are
 *    the newest entries, reached only after everything older is gone.
 */
#include "l2/mock_store.h"

#include <stdlib.h>
#include <string.h>

#include "actors/log.h"
#include "l1/key.h"

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
  return s->bucket ? KVA_OK : KVA_ENOMEM;
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
  memset(s, 0, sizeof(*s));
}

mock_entry *mock_store_find(const mock_store *s, const kva_key *k, uint64_t hash) {
  for (mock_entry *e = s->bucket[hash & (s->nbuckets - 1)]; e; e = e->chain)
    if (e->hash == hash && key_equal(&e->key, k)) return e;
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

static void entry_link(mock_store *s, mock_entry *e) {
  mock_entry **head = &s->bucket[e->hash & (s->nbuckets - 1)];
  e->chain = *head;
  *head = e;
  e->older = s->newest;
  e->newer = NULL;
  if (s->newest)
    s->newest->newer = e;
  else
    s->oldest = e;
  s->newest = e;
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
  if (e->older)
    e->older->newer = e->newer;
  else
    s->oldest = e->newer;
  if (e->newer)
    e->newer->older = e->older;
  else
    s->newest = e->older;
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

/* Evicts unlocked entries, oldest first, until `bytes` more fit. */
static bool evict_for(mock_store *s, uint64_t bytes) {
  mock_entry *e = s->oldest;
  while (s->capacity && s->used + bytes > s->capacity && e) {
    mock_entry *next = e->newer;
    if (!e->locks) {
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

/* Stores one object: replace, make room, copy. */
static int store_one(mock_store *s, const kva_key *k, uint64_t hash, const kva_buf *b,
                     uint64_t fp) {
  mock_entry *old = mock_store_find(s, k, hash);
  if (old) entry_remove(s, old); /* unlocked: mock_store_check said so */
  if (!evict_for(s, b->len)) {
    LOG_ERROR("mock: a checked store task does not fit (bug)");
    return KVA_ENOMEM;
  }
  mock_entry *e = entry_new(s);
  void *data = e ? buf_get(s, b->len) : NULL;
  if (!data) {
    free(e);
    return KVA_ENOMEM;
  }
  memcpy(data, b->ptr, b->len);
  *e = (mock_entry){
      .key = *k, .hash = hash, .fp = fp, .bytes = b->len, .data = data, .epoch = s->epoch};
  entry_link(s, e);
  return KVA_OK;
}

int mock_store_apply(mock_store *s, const kva_l2_req *r, const uint64_t *hashes, uint64_t fp,
                     uint64_t *copied) {
  s->epoch++;
  *copied = 0;
  for (size_t i = 0; i < r->n; i++) {
    int rc = store_one(s, &r->keys[i], hashes[i], &r->bufs[i], fp);
    if (rc != KVA_OK) {
      task_rollback(s, r, hashes, i);
      return rc;
    }
    *copied += r->bufs[i].len;
  }
  return KVA_OK;
}
