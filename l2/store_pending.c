/*
 * store_pending.c — the store controller's index of keys with a store
 * queued or in flight (store_pending.h).
 */
#include "l2/store_pending.h"

#include <stdlib.h>

#include "common/key.h"

static size_t home(const pending_index *x, const kva_key *k, uint32_t tier) {
  uint64_t h = key_hash(k) ^ ((uint64_t)tier * 0x9e3779b97f4a7c15ull);
  return (size_t)h & (x->cap - 1);
}

void pending_free(pending_index *x) {
  for (size_t i = 0; i < x->cap; i++)
    if (x->e[i].used) free(x->e[i].again_layout);
  free(x->e);
  *x = (pending_index){0};
}

store_pending *pending_find(pending_index *x, const kva_key *k, uint32_t tier) {
  if (!x->cap) return NULL;
  for (size_t i = home(x, k, tier);; i = (i + 1) & (x->cap - 1)) {
    store_pending *e = &x->e[i];
    if (!e->used) return NULL;
    if (e->tier == tier && key_equal(&e->key, k)) return e;
  }
}

static bool grow(pending_index *x) {
  size_t cap = x->cap ? x->cap * 2 : 64;
  store_pending *e = calloc(cap, sizeof(*e));
  if (!e) return false;
  pending_index old = *x;
  x->e = e;
  x->cap = cap;
  for (size_t i = 0; i < old.cap; i++) {
    if (!old.e[i].used) continue;
    size_t j = home(x, &old.e[i].key, old.e[i].tier);
    while (e[j].used) j = (j + 1) & (cap - 1);
    e[j] = old.e[i];
  }
  free(old.e);
  return true;
}

store_pending *pending_add(pending_index *x, const kva_key *k, uint32_t tier, uint64_t layout_fp) {
  if ((x->n + 1) * 4 > x->cap * 3 && !grow(x)) return NULL; /* load <= 3/4 */
  size_t i = home(x, k, tier);
  while (x->e[i].used) i = (i + 1) & (x->cap - 1);
  x->e[i] = (store_pending){
      .key = *k, .tier = tier, .used = true, .queued = true, .layout_fp = layout_fp};
  x->n++;
  return &x->e[i];
}

/* Backward-shift deletion: later entries of the probe run move up. */
void pending_drop(pending_index *x, store_pending *e) {
  size_t hole = (size_t)(e - x->e), mask = x->cap - 1;
  free(e->again_layout);
  x->e[hole] = (store_pending){0};
  x->n--;
  for (size_t i = (hole + 1) & mask; x->e[i].used; i = (i + 1) & mask) {
    size_t h = home(x, &x->e[i].key, x->e[i].tier);
    /* the entry at i may fill the hole if its home is not in (hole, i] */
    if (((i - h) & mask) >= ((i - hole) & mask)) {
      x->e[hole] = x->e[i];
      x->e[i] = (store_pending){0};
      hole = i;
    }
  }
}
