/*
 * object_table.c — object slab and key index of the L1 manager.
 */
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/key.h"
#include "l1/object_table.h"

#define EMPTY UINT32_MAX

/* Fresh index of 2^k entries, all empty. */
static struct index_entry *index_alloc(uint64_t n) {
  struct index_entry *ix = malloc(n * sizeof(*ix));
  if (!ix) return NULL;
  for (uint64_t i = 0; i < n; i++) ix[i].slot = EMPTY;
  return ix;
}

int object_table_init(object_table *t) {
  memset(t, 0, sizeof(*t));
  t->index_mask = 1023;
  t->index = index_alloc(t->index_mask + 1);
  t->gen_next = 1;
  return t->index ? KVA_OK : KVA_ENOMEM;
}

void object_table_destroy(object_table *t) {
  free(t->objs);
  free(t->free_slots);
  free(t->index);
  memset(t, 0, sizeof(*t));
}

uint32_t object_table_find(const object_table *t, const kva_key *k, uint64_t hash) {
  for (uint64_t i = hash & t->index_mask;; i = (i + 1) & t->index_mask) {
    const struct index_entry *e = &t->index[i];
    if (e->slot == EMPTY) return EMPTY;
    if (e->hash == hash && key_equal(&t->objs[e->slot].key, k)) return e->slot;
  }
}

static void index_put(struct index_entry *ix, uint64_t mask, uint64_t hash, uint32_t slot) {
  uint64_t i = hash & mask;
  while (ix[i].slot != EMPTY) i = (i + 1) & mask;
  ix[i].hash = hash;
  ix[i].slot = slot;
}

/* Doubles the index when it would pass half full. */
static int index_grow(object_table *t) {
  if ((t->count + 1) * 2 <= t->index_mask + 1) return KVA_OK;
  uint64_t n = (t->index_mask + 1) * 2;
  struct index_entry *ix = index_alloc(n);
  if (!ix) return KVA_ENOMEM;
  for (uint64_t i = 0; i <= t->index_mask; i++)
    if (t->index[i].slot != EMPTY) index_put(ix, n - 1, t->index[i].hash, t->index[i].slot);
  free(t->index);
  t->index = ix;
  t->index_mask = n - 1;
  return KVA_OK;
}

/* A free slot: a reused one, or the next of the slab (grown by doubling). */
static uint32_t slot_take(object_table *t) {
  if (t->nfree) return t->free_slots[--t->nfree];
  if (t->nslots == t->cap_slots) {
    size_t cap = array_next_cap(t->cap_slots, (size_t)t->nslots + 1, sizeof(l1_obj));
    if (cap == 0 || cap >= EMPTY) return EMPTY; /* slot indexes stay below EMPTY */
    if (!ARRAY_RESIZE(t->objs, cap) || !ARRAY_RESIZE(t->free_slots, cap)) return EMPTY;
    t->cap_slots = (uint32_t)cap;
  }
  return t->nslots++;
}

uint32_t object_table_insert(object_table *t, const kva_key *k, uint64_t hash) {
  if (index_grow(t) != KVA_OK) return EMPTY;
  uint32_t slot = slot_take(t);
  if (slot == EMPTY) return EMPTY;
  l1_obj *o = &t->objs[slot];
  memset(o, 0, sizeof(*o));
  o->key = *k;
  o->hash = hash;
  o->gen = t->gen_next++;
  if (t->gen_next == 0) t->gen_next = 1; /* 0 marks a free slot */
  o->indexed = true;
  index_put(t->index, t->index_mask, hash, slot);
  t->count++;
  t->records++;
  return slot;
}

/* Backward-shift deletion: entries after the hole move back when their home
 * position allows it, so lookups never need tombstones. */
static void index_delete(object_table *t, uint64_t i) {
  uint64_t mask = t->index_mask;
  for (uint64_t j = (i + 1) & mask;; j = (j + 1) & mask) {
    if (t->index[j].slot == EMPTY) break;
    uint64_t home = t->index[j].hash & mask;
    /* may j's entry move to i? only if i lies cyclically in [home, j) */
    if (((j - home) & mask) >= ((j - i) & mask)) {
      t->index[i] = t->index[j];
      i = j;
    }
  }
  t->index[i].slot = EMPTY;
}

void object_table_unlink(object_table *t, uint32_t slot) {
  l1_obj *o = &t->objs[slot];
  if (!o->indexed) return;
  for (uint64_t i = o->hash & t->index_mask;; i = (i + 1) & t->index_mask) {
    if (t->index[i].slot == slot) {
      index_delete(t, i);
      break;
    }
  }
  o->indexed = false;
  t->count--;
}

void object_table_remove(object_table *t, uint32_t slot) {
  l1_obj *o = &t->objs[slot];
  object_table_unlink(t, slot);
  o->gen = 0;
  t->records--;
  t->free_slots[t->nfree++] = slot;
}

uint32_t object_table_by_id(const object_table *t, uint64_t id) {
  uint32_t slot = (uint32_t)id, gen = (uint32_t)(id >> 32);
  if (slot >= t->nslots || gen == 0 || t->objs[slot].gen != gen) return EMPTY;
  return slot;
}
