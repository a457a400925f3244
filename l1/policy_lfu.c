/*
 * policy_lfu.c — lfu: fewest accesses first, in O(1) per notification.
 *
 * Frequency buckets: a list of buckets in increasing access count, each
 * holding the ids with exactly that count, in the order they reached it
 * (oldest arrival at the head). Creation counts as one access. A touch moves
 * an item from its bucket (count c) to the tail of the bucket c+1, creating
 * that bucket right after the old one when it is missing and freeing the old
 * one when it empties. Candidates walk buckets low → high and, within one,
 * head → tail, so ties go to the object that reached its count first (which
 * is also the least recently accessed of them, as policy.h says).
 *
 * Items live in a growable array indexed by slot index (low 32 bits of the
 * id); buckets live in a second array with a free list, and both link by
 * index. on_created keeps at least count + 2 bucket entries allocated; since
 * only non-empty buckets exist, a touch (which needs one extra bucket for a
 * moment) and a creation never run out of them, so only on_created
 * allocates.
 *
 * Invariants: no bucket is empty; bucket counts strictly increase along the
 * list; a live item is in exactly the bucket whose index it stores.
 *
 * Memory grows with the highest slot index seen and never shrinks. When an
 * array cannot grow (malloc failure), or for slot index 0xffffffff (reserved
 * as the terminator), on_created leaves the object untracked: it is never a
 * candidate and its later touches and removal are ignored.
 */
#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "l1/policy.h"

#define LFU_NIL UINT32_MAX /* "none": ends of lists, empty free list */

typedef struct lfu_item {
  uint64_t id;     /* full id (generation and slot) of the live object */
  uint64_t bytes;  /* its size, reported with candidates */
  uint32_t prev;   /* earlier arrival in the same bucket, or LFU_NIL */
  uint32_t next;   /* later arrival in the same bucket, or LFU_NIL */
  uint32_t bucket; /* index of its bucket while live */
  bool live;       /* tracked, and therefore in a bucket */
} lfu_item;

typedef struct lfu_bucket {
  uint64_t count; /* accesses of every item in it (saturates) */
  uint32_t head;  /* oldest arrival */
  uint32_t tail;  /* newest arrival */
  uint32_t prev;  /* bucket with the next lower count, or LFU_NIL */
  uint32_t next;  /* next higher count, or LFU_NIL; the free list when free */
} lfu_bucket;

typedef struct lfu_policy {
  lfu_item *items;     /* indexed by slot index */
  size_t item_cap;     /* allocated entries of items */
  lfu_bucket *buckets; /* in use or on the free list */
  size_t bucket_cap;   /* allocated entries of buckets */
  uint32_t first;      /* bucket with the lowest count, LFU_NIL when empty */
  uint32_t free;       /* free list of buckets, linked through next */
  size_t count;        /* live items */
} lfu_policy;

/* The live item of exactly this id (same generation), or NULL. */
static lfu_item *lfu_find(const lfu_policy *lp, uint64_t id) {
  uint32_t slot = (uint32_t)id;
  if (slot >= lp->item_cap) return NULL;
  lfu_item *it = &lp->items[slot];
  return it->live && it->id == id ? it : NULL;
}

/* Makes room for item index `slot`; new items are zeroed (not live). */
static bool lfu_reserve_items(lfu_policy *lp, uint32_t slot) {
  lfu_item *items = policy_reserve_slot(lp->items, &lp->item_cap, slot, sizeof(*items));
  if (!items) return false;
  lp->items = items;
  return true;
}

/* Makes room for `need` buckets; the new ones go on the free list. */
static bool lfu_reserve_buckets(lfu_policy *lp, size_t need) {
  if (need <= lp->bucket_cap) return true;
  size_t cap = array_next_cap(lp->bucket_cap, need, sizeof(lfu_bucket));
  if (cap == 0 || cap > LFU_NIL) return false; /* indexes must fit below LFU_NIL */
  if (!ARRAY_RESIZE(lp->buckets, cap)) return false;
  lfu_bucket *b = lp->buckets;
  for (size_t i = lp->bucket_cap; i < cap; i++) {
    b[i].next = lp->free;
    lp->free = (uint32_t)i;
  }
  lp->bucket_cap = cap;
  return true;
}

/* Takes a free bucket for `count` and links it right after `prev` (at the
 * front when prev is LFU_NIL). The reservation in on_created guarantees one. */
static uint32_t lfu_bucket_new(lfu_policy *lp, uint64_t count, uint32_t prev) {
  uint32_t b = lp->free;
  assert(b != LFU_NIL);
  lfu_bucket *bk = &lp->buckets[b];
  lp->free = bk->next;
  bk->count = count;
  bk->head = bk->tail = LFU_NIL;
  bk->prev = prev;
  bk->next = prev == LFU_NIL ? lp->first : lp->buckets[prev].next;
  if (bk->next != LFU_NIL) lp->buckets[bk->next].prev = b;
  if (prev == LFU_NIL)
    lp->first = b;
  else
    lp->buckets[prev].next = b;
  return b;
}

/* Unlinks an empty bucket from the list and returns it to the free list. */
static void lfu_bucket_free(lfu_policy *lp, uint32_t b) {
  lfu_bucket *bk = &lp->buckets[b];
  if (bk->prev != LFU_NIL)
    lp->buckets[bk->prev].next = bk->next;
  else
    lp->first = bk->next;
  if (bk->next != LFU_NIL) lp->buckets[bk->next].prev = bk->prev;
  bk->next = lp->free;
  lp->free = b;
}

/* Appends the item at `slot` as the newest arrival of bucket b. */
static void lfu_item_append(lfu_policy *lp, uint32_t slot, uint32_t b) {
  lfu_item *it = &lp->items[slot];
  lfu_bucket *bk = &lp->buckets[b];
  it->bucket = b;
  it->prev = bk->tail;
  it->next = LFU_NIL;
  if (bk->tail != LFU_NIL)
    lp->items[bk->tail].next = slot;
  else
    bk->head = slot;
  bk->tail = slot;
}

/* Takes the item at `slot` out of its bucket, freeing the bucket when it
 * becomes empty (no bucket is ever left empty). */
static void lfu_item_detach(lfu_policy *lp, uint32_t slot) {
  lfu_item *it = &lp->items[slot];
  lfu_bucket *bk = &lp->buckets[it->bucket];
  if (it->prev != LFU_NIL)
    lp->items[it->prev].next = it->next;
  else
    bk->head = it->next;
  if (it->next != LFU_NIL)
    lp->items[it->next].prev = it->prev;
  else
    bk->tail = it->prev;
  if (bk->head == LFU_NIL) lfu_bucket_free(lp, it->bucket);
}

/* Allocates an empty lfu policy; NULL when out of memory. */
static policy *lfu_create(void) {
  lfu_policy *lp = calloc(1, sizeof(*lp));
  if (!lp) return NULL;
  lp->first = lp->free = LFU_NIL;
  return (policy *)lp;
}

/* Frees the policy and both arrays (NULL is a no-op). */
static void lfu_destroy(policy *p) {
  lfu_policy *lp = (lfu_policy *)p;
  if (!lp) return;
  free(lp->items);
  free(lp->buckets);
  free(lp);
}

/* Forgets the object; unknown and stale ids are ignored. */
static void lfu_on_removed(policy *p, uint64_t id) {
  lfu_policy *lp = (lfu_policy *)p;
  lfu_item *it = lfu_find(lp, id);
  if (!it) return;
  lfu_item_detach(lp, (uint32_t)id);
  it->live = false;
  lp->count--;
}

/* Tracks a new object with one access, as the newest arrival of count 1. A
 * slot index still tracked (any generation, this one included) is first
 * forgotten, so a repeated creation restarts the object's count. */
static void lfu_on_created(policy *p, uint64_t id, uint64_t bytes) {
  lfu_policy *lp = (lfu_policy *)p;
  uint32_t slot = (uint32_t)id;
  if (slot == LFU_NIL || !lfu_reserve_items(lp, slot)) return; /* untracked */
  lfu_item *it = &lp->items[slot];
  if (it->live) lfu_on_removed(p, it->id);
  if (!lfu_reserve_buckets(lp, lp->count + 2)) return; /* untracked */
  uint32_t b = lp->first;
  if (b == LFU_NIL || lp->buckets[b].count != 1) b = lfu_bucket_new(lp, 1, LFU_NIL);
  it->id = id;
  it->bytes = bytes;
  it->live = true;
  lfu_item_append(lp, slot, b);
  lp->count++;
}

/* One more access: the item moves to the tail of the next count's bucket,
 * created after its own when missing. Unknown and stale ids are ignored; a
 * count at UINT64_MAX stays put. */
static void lfu_on_touched(policy *p, uint64_t id) {
  lfu_policy *lp = (lfu_policy *)p;
  lfu_item *it = lfu_find(lp, id);
  if (!it) return;
  uint32_t b = it->bucket;
  uint64_t c = lp->buckets[b].count;
  if (c == UINT64_MAX) return;
  uint32_t nb = lp->buckets[b].next;
  if (nb == LFU_NIL || lp->buckets[nb].count != c + 1) nb = lfu_bucket_new(lp, c + 1, b);
  lfu_item_detach(lp, (uint32_t)id); /* may free b; nb stays linked */
  lfu_item_append(lp, (uint32_t)id, nb);
}

/* The item after `slot` in eviction order: the next arrival in its bucket,
 * else the oldest arrival of the next higher bucket (never empty). */
static uint32_t lfu_next(const lfu_policy *lp, uint32_t slot) {
  const lfu_item *it = &lp->items[slot];
  if (it->next != LFU_NIL) return it->next;
  uint32_t b = lp->buckets[it->bucket].next;
  return b == LFU_NIL ? LFU_NIL : lp->buckets[b].head;
}

/* Up to max ids (and bytes, when `bytes` is not NULL) in eviction order,
 * after `after` when it is tracked, else from the first. Reads only:
 * O(1) to locate `after`, then one step per candidate. */
static size_t lfu_candidates(const policy *p, uint64_t after, uint64_t *ids, uint64_t *bytes,
                             size_t max) {
  const lfu_policy *lp = (const lfu_policy *)p;
  if (!ids) return 0;
  const lfu_item *from = after ? lfu_find(lp, after) : NULL;
  uint32_t cur;
  if (from)
    cur = lfu_next(lp, (uint32_t)after);
  else
    cur = lp->first == LFU_NIL ? LFU_NIL : lp->buckets[lp->first].head;
  size_t n = 0;
  for (; n < max && cur != LFU_NIL; n++) {
    ids[n] = lp->items[cur].id;
    if (bytes) bytes[n] = lp->items[cur].bytes;
    cur = lfu_next(lp, cur);
  }
  return n;
}

/* Number of tracked objects. */
static size_t lfu_count(const policy *p) {
  return ((const lfu_policy *)p)->count;
}

const policy_ops policy_lfu_ops = {
    .name = "lfu",
    .create = lfu_create,
    .destroy = lfu_destroy,
    .on_created = lfu_on_created,
    .on_touched = lfu_on_touched,
    .on_removed = lfu_on_removed,
    .candidates = lfu_candidates,
    .count = lfu_count,
};
