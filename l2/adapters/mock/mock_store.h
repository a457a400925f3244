/*
 * mock_store.h — the mock adapter's storage (no actor in here): a chained
 * hash table of entries keyed by kva_key_hash, a FIFO list in insertion order
 * for eviction, lock counts, and per-size free lists of data buffers so
 * that steady-state stores of same-size objects neither malloc nor fault
 * pages in.
 *
 * Chains: a chunk is only useful while the chunks before it can be loaded,
 * so the FIFO evicts a chain from its end. Each entry records the key it
 * continues (a STORE's keys are a chain in order; its first key continues
 * the key a lookup saw right before it: mock_store_follows), and inserting
 * an entry moves the entries before it in its chain to the newest end
 * after it, in order: a chain is as new as its last insertion, and within
 * it the end is the oldest.
 */
#ifndef KVA_L2_MOCK_STORE_H
#define KVA_L2_MOCK_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "kvact.h"

typedef struct mock_entry {
  kva_key key;
  uint64_t hash;                    /* kva_key_hash(&key) */
  uint64_t fp;                      /* kva_layout_fingerprint of the stored layout */
  uint64_t bytes;                   /* size of data */
  void *data;                       /* malloc'd or recycled buffer */
  uint32_t locks;                   /* LOOKUP_AND_LOCKs not yet UNLOCKed */
  uint64_t epoch;                   /* store task that inserted it (rollback) */
  uint64_t parent;                  /* kva_key_hash of the key it continues, 0 = none known */
  uint64_t walk;                    /* the last chain walk that reached it (cycle guard) */
  struct mock_entry *chain;         /* next in the same bucket */
  struct mock_entry *older, *newer; /* FIFO neighbours (insertion order) */
} mock_entry;

#define MOCK_POOL_CLASSES 8u      /* distinct buffer sizes kept for reuse */
#define MOCK_POOL_PER_CLASS 1024u /* buffers kept per size */

typedef struct mock_pool_class {
  uint64_t bytes; /* the size this list holds; free to reclaim while count is 0 */
  uint32_t count;
  void *head; /* buffers linked through their first 8 bytes */
} mock_pool_class;

#define MOCK_HINTS 4096u /* chain hints kept (direct-mapped on kva_key_hash) */

/* A missing key a lookup saw right after another: the key it continues. */
typedef struct mock_hint {
  uint64_t hash, parent;
} mock_hint;

typedef struct mock_store {
  mock_entry **bucket;
  uint64_t nbuckets; /* power of two */
  uint64_t count;    /* entries held */
  mock_entry *oldest, *newest;
  uint64_t capacity;     /* 0 = unbounded */
  uint64_t used;         /* bytes of all entries */
  uint64_t locked_bytes; /* bytes of entries with locks > 0 */
  uint64_t locks;        /* sum of lock counts */
  uint64_t evictions;
  uint64_t epoch; /* bumped per store task */
  mock_entry *spare;
  uint32_t nspare;
  mock_pool_class pool[MOCK_POOL_CLASSES];
  uint64_t pooled, pool_limit; /* bytes sitting in the free lists, and their cap */
  mock_hint *hint;             /* MOCK_HINTS entries */
  uint64_t walks;              /* chain walks so far */
} mock_store;

int mock_store_init(mock_store *s, uint64_t capacity); /* KVA_OK or KVA_ENOMEM */
void mock_store_destroy(mock_store *s);                /* frees every buffer */
mock_entry *mock_store_find(const mock_store *s, const kva_key *k, uint64_t hash);
/* Whether the whole store task r (hashes[i] = kva_key_hash(keys[i])) can be
 * applied: KVA_OK, KVA_EAGAIN (a key is locked) or KVA_ENOMEM (it does not
 * fit even after evicting everything unlocked). Changes nothing. */
int mock_store_check(const mock_store *s, const kva_l2_req *r, const uint64_t *hashes);
/* Applies a task that passed mock_store_check: replaces existing keys,
 * evicts oldest-first (never an entry of the task), copies the bytes.
 * KVA_ENOMEM only if malloc fails, and then nothing of the task is kept.
 * *copied = bytes copied. */
int mock_store_apply(mock_store *s, const kva_l2_req *r, const uint64_t *hashes, uint64_t fp,
                     uint64_t *copied);
/* A lookup saw the key of hash `hash` (entry e, or NULL when the tier lacks
 * it) right after the key of hash prev: e continues prev when that is not
 * known yet, or a later store of the key does. */
void mock_store_follows(mock_store *s, mock_entry *e, uint64_t hash, uint64_t prev);
void mock_store_lock(mock_store *s, mock_entry *e);
void mock_store_unlock(mock_store *s, mock_entry *e);

#endif
