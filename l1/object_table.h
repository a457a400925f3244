/*
 * object_table.h — the L1 manager's objects: a slab of object records
 * addressed by a dense slot index, and a hash index from key to slot.
 *
 * Owned by the L1 manager actor; not thread-safe. An object's id is
 * (generation << 32 | slot): the eviction controller and notifications name
 * objects by id, and a stale id (the slot was freed and reused since) is
 * recognised by its generation.
 */
#ifndef KVA_L1_OBJECT_TABLE_H
#define KVA_L1_OBJECT_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "kvact.h"

#define L1_MAX_READERS 128u /* read locks one request may take or release per key */

typedef struct l1_obj {
  kva_key key;
  uint64_t hash;        /* key_hash(&key) */
  void *ptr;            /* block in the pool */
  uint64_t bytes;       /* logical size (layout_bytes) */
  uint64_t fingerprint; /* layout_fingerprint of its layout */
  kva_layout layout;
  uint64_t stamp;      /* last request that named it (duplicate detection) */
  uint32_t gen;        /* generation of this slot; 0 = slot free */
  uint32_t readers;    /* read locks held */
  uint32_t pins;       /* kva_lookup pins: not evictable while > 0 */
  uint32_t id_readers; /* of readers: locks taken with an object id (the
                          controllers'), released by id; the rest by key */
  bool write_locked;   /* being written; not readable */
  bool write_by_id;    /* the write lock was taken with an id: released by id */
  bool temporary;      /* freed at its last read release (L2 loads) */
  bool zombie;         /* force-deleted while locked: block kept until its
                          holders let go (l1_admin.c says who finds it) */
  bool indexed;        /* in the key index (object_table_find finds it) */
} l1_obj;

typedef struct object_table {
  l1_obj *objs; /* slab, objs[slot] */
  uint32_t nslots, cap_slots;
  uint32_t *free_slots; /* stack of freed slot indexes */
  uint32_t nfree;
  uint32_t gen_next;
  /* index: open addressing, linear probing, backward-shift deletion */
  struct index_entry {
    uint64_t hash;
    uint32_t slot; /* UINT32_MAX = empty */
  } * index;
  uint64_t index_mask;
  uint64_t count;   /* records in the key index */
  uint64_t records; /* records in use, in the index or not */
} object_table;

int object_table_init(object_table *t);
void object_table_destroy(object_table *t);
/* slot of the indexed record with this key, or UINT32_MAX; a key has at
 * most one indexed record */
uint32_t object_table_find(const object_table *t, const kva_key *k, uint64_t hash);
/* a new, zeroed record for key k (not yet locked); UINT32_MAX on ENOMEM */
uint32_t object_table_insert(object_table *t, const kva_key *k, uint64_t hash);
void object_table_remove(object_table *t, uint32_t slot);
/* Takes the record out of the key index only (found by id from then on,
 * never by key); object_table_remove frees its slot later. */
void object_table_unlink(object_table *t, uint32_t slot);
static inline l1_obj *object_at(object_table *t, uint32_t slot) {
  return &t->objs[slot];
}
static inline uint64_t object_id(const object_table *t, uint32_t slot) {
  return ((uint64_t)t->objs[slot].gen << 32) | slot;
}
/* slot of a live object with this id, or UINT32_MAX */
uint32_t object_table_by_id(const object_table *t, uint64_t id);

#endif
