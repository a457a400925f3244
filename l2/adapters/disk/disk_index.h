/*
 * disk_index.h — the disk tier's in-memory index: which key lives in which
 * slot, each slot's state, lookup locks, the LRU order for eviction and
 * the stack of free slots. Plain data, owned by the adapter actor.
 *
 * Slot states:
 *   FREE     on the free stack
 *   WRITING  taken by a store in flight: in no list, invisible to lookups
 *   VALID    in the hash table; in the LRU list exactly while it has no
 *            lock and no load in flight (so eviction never has to skip)
 *   DROPPED  failed verification while locked: invisible to lookups, kept
 *            in the hash table only so the holders' UNLOCKs find it; freed
 *            at its last unlock
 *
 * Chains. A chunk is only useful while every chunk before it can be loaded
 * (prefix-only loading), so eviction takes the end of a chain before its
 * prefix. A slot records the key it continues (disk_slot.parent: the low
 * 32 bits of that key's hash, persisted in its header). Chunk keys are
 * prefix hashes, so the relation cannot be derived from the keys; it comes
 * from the requests: a STORE's keys are a chain in order, and its first
 * key continues the key a LOOKUP_AND_LOCK saw right before it (a hint,
 * disk_index_follows; a lookup also links a stored slot that has no link
 * yet, in memory only until it is stored again). Whenever a slot becomes
 * the most recently used (stored, unlocked, loaded), the slots before it
 * in its chain become more recent still, in order: every idle slot is
 * older in the LRU list than the idle slots its chain continues from, the
 * LRU head is the end of the least recently used chain, and recency order
 * across chains is kept. The links are hints: a wrong one only reorders
 * eviction.
 */
#ifndef KVA_L2_DISK_INDEX_H
#define KVA_L2_DISK_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "kvact.h"

#define DISK_NONE UINT32_MAX

enum { SLOT_FREE = 0, SLOT_WRITING = 1, SLOT_VALID = 2, SLOT_DROPPED = 3 };

typedef struct disk_slot {
  kva_key key; /* VALID, DROPPED: the stored key (insignificant bytes zeroed) */
  uint64_t key_hash;
  uint64_t seq;         /* of the header on disk */
  uint64_t fingerprint; /* kva_layout_fingerprint of the stored object */
  uint64_t length;      /* payload bytes */
  uint64_t payload_sum;
  uint32_t state;
  uint32_t locks;      /* LOOKUP_AND_LOCK minus UNLOCK */
  uint32_t reads;      /* loads in flight */
  uint32_t prev, next; /* LRU links (oldest = head) */
  uint32_t hnext;      /* hash chain */
  uint32_t parent;     /* low 32 bits of kva_key_hash of the key it continues, 0 = none known */
  uint32_t walk;       /* the last touch walk that reached it (cycle guard) */
} disk_slot;

/* What a finished store or the recovery tells about a slot. */
typedef struct disk_slot_meta {
  const kva_key *key;
  uint64_t key_hash, seq, fingerprint, length, payload_sum;
  uint32_t parent; /* as disk_slot.parent */
} disk_slot_meta;

/* A missing key seen right after another one in a lookup: the key it
 * continues, for when it is stored as the first key of a STORE. */
typedef struct disk_chain_hint {
  uint64_t key_hash;
  uint32_t parent;
} disk_chain_hint;

typedef struct disk_index {
  disk_slot *slots;
  uint32_t nslots;
  uint32_t *buckets; /* hash heads, power-of-two count */
  uint32_t mask;
  uint32_t *free; /* stack of free slot ids */
  uint32_t nfree;
  uint32_t lru_head, lru_tail, nlru;
  uint64_t nvalid, bytes, locks; /* gauges for STATS */
  uint64_t evictions;
  uint32_t walks;        /* touch walks so far */
  disk_chain_hint *hint; /* direct-mapped on kva_key_hash, DISK_HINTS entries */
} disk_index;

#define DISK_HINTS 4096u /* chain hints kept: a turn's lookup precedes its stores */

/* The chain id of a key: the low 32 bits of its key_hash. */
static inline uint32_t disk_chain_id(uint64_t key_hash) {
  return (uint32_t)key_hash;
}

/* A copy of a valid key with the bytes that do not count (past the
 * model's NUL, past hash_len) zeroed: what headers and the index hold. */
void disk_key_normal(const kva_key *in, kva_key *out);

/* Every slot free (slot 0 taken first). KVA_OK or KVA_ENOMEM. */
int disk_index_init(disk_index *ix, uint32_t nslots);
void disk_index_destroy(disk_index *ix);

/* The VALID slot of key, or DISK_NONE. */
uint32_t disk_index_find(const disk_index *ix, const kva_key *k, uint64_t hash);
/* The VALID or DROPPED slot of key (for UNLOCK), or DISK_NONE. */
uint32_t disk_index_find_any(const disk_index *ix, const kva_key *k, uint64_t hash);
/* Whether a VALID slot may be rewritten or evicted now. */
static inline bool disk_slot_idle(const disk_slot *s) {
  return s->locks == 0 && s->reads == 0;
}

/* A FREE slot, now WRITING, or DISK_NONE. */
uint32_t disk_index_take_free(disk_index *ix);
/* The least recently used idle VALID slot, now WRITING (counted as an
 * eviction), or DISK_NONE. */
uint32_t disk_index_evict(disk_index *ix);
/* An idle VALID slot becomes WRITING (its key is rewritten in place). */
void disk_index_begin_rewrite(disk_index *ix, uint32_t id);
/* A WRITING slot whose header is on disk becomes VALID (most recently
 * used). Should the key have become VALID elsewhere meanwhile, the newer
 * sequence number wins when the other slot is idle, else this slot is
 * freed; either way the key is stored. */
void disk_index_commit(disk_index *ix, uint32_t id, const disk_slot_meta *m);
/* Any slot back to FREE (a DROPPED or locked VALID one: see drop). */
void disk_index_release(disk_index *ix, uint32_t id);
/* A VALID slot whose bytes failed verification: freed now when idle, else
 * DROPPED until its last lock and read are gone. */
void disk_index_drop(disk_index *ix, uint32_t id);

void disk_index_lock(disk_index *ix, uint32_t id);
void disk_index_unlock(disk_index *ix, uint32_t id);
void disk_index_read_begin(disk_index *ix, uint32_t id);
void disk_index_read_end(disk_index *ix, uint32_t id);

/* A lookup saw the key of hash key_hash (slot id, or DISK_NONE when the
 * tier lacks it) right after the key of hash prev: remembers that it
 * continues prev (a hint for its store, or its slot's parent when that is
 * not known yet). */
void disk_index_follows(disk_index *ix, uint32_t id, uint64_t key_hash, uint64_t prev);
/* The chain id a lookup said the key continues, or 0. */
uint32_t disk_index_hinted(const disk_index *ix, uint64_t key_hash);

/* Recovery: begin, restore each slot found on disk (false when the slot
 * is taken or a newer copy of the key is already there: the older copy is
 * dropped), end (every other slot is free). */
void disk_index_recover_begin(disk_index *ix);
bool disk_index_restore(disk_index *ix, uint32_t id, const disk_slot_meta *m);
/* Every other slot is free; the LRU order is rebuilt by sequence number
 * (oldest store first), chains ordered as after their stores. */
void disk_index_recover_end(disk_index *ix);

#endif
