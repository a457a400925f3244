/*
 * policy_list.c — lru, mru and fifo: one intrusive doubly linked list.
 *
 * Nodes live in a growable array indexed by the slot index (low 32 bits of
 * the id) and link to each other by slot index, so locating, touching and
 * removing an object are O(1) and never allocate; only on_created may grow
 * the array. The list runs from the oldest event (head) to the newest
 * (tail):
 *   lru  — creations and touches append at the tail; candidates walk
 *          head → tail.
 *   mru  — the same list; candidates walk tail → head.
 *   fifo — creations append at the tail, touches change nothing;
 *          candidates walk head → tail.
 *
 * Invariants: a node is on the list iff it is live; count is the number of
 * live nodes; a live node at index i holds an id whose low 32 bits are i.
 *
 * Memory grows with the highest slot index seen and never shrinks. When the
 * array cannot grow (malloc failure), or for slot index 0xffffffff (reserved
 * as the list terminator; an array that large could not exist anyway),
 * on_created leaves the object untracked: it is never a candidate and its
 * later touches and removal are ignored, as for any unknown id.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "l1/policy.h"

#define LIST_NIL UINT32_MAX /* "no node": ends of the list */

/* Which end candidates start from and whether touches reorder. */
typedef enum { LIST_LRU, LIST_MRU, LIST_FIFO } list_kind;

typedef struct list_node {
  uint64_t id;    /* full id (generation and slot) of the live object */
  uint64_t bytes; /* its size, reported with candidates */
  uint32_t prev;  /* slot index toward the head, LIST_NIL at the head */
  uint32_t next;  /* slot index toward the tail, LIST_NIL at the tail */
  bool live;      /* tracked, and therefore on the list */
} list_node;

typedef struct list_policy {
  list_kind kind;   /* lru, mru or fifo */
  list_node *nodes; /* indexed by slot index; entries >= cap do not exist */
  size_t cap;       /* allocated entries of nodes */
  size_t count;     /* live nodes */
  uint32_t head;    /* oldest event, LIST_NIL when empty */
  uint32_t tail;    /* newest event, LIST_NIL when empty */
} list_policy;

/* The live node of exactly this id (same generation), or NULL: unknown and
 * stale ids are ignored by every caller. */
static list_node *list_find(const list_policy *lp, uint64_t id) {
  uint32_t slot = (uint32_t)id;
  if (slot >= lp->cap) return NULL;
  list_node *n = &lp->nodes[slot];
  return n->live && n->id == id ? n : NULL;
}

/* Makes room for index `slot`, doubling so that growing to n entries costs
 * O(n) in total; new entries are zeroed (not live). false when out of
 * memory, leaving the array as it was. */
static bool list_reserve(list_policy *lp, uint32_t slot) {
  list_node *nodes = policy_reserve_slot(lp->nodes, &lp->cap, slot, sizeof(*nodes));
  if (!nodes) return false;
  lp->nodes = nodes;
  return true;
}

/* Appends the node at `slot` at the tail (the newest event). */
static void list_push_tail(list_policy *lp, uint32_t slot) {
  list_node *n = &lp->nodes[slot];
  n->prev = lp->tail;
  n->next = LIST_NIL;
  if (lp->tail != LIST_NIL)
    lp->nodes[lp->tail].next = slot;
  else
    lp->head = slot;
  lp->tail = slot;
}

/* Takes the node at `slot` off the list, leaving its neighbours joined. */
static void list_unlink(list_policy *lp, uint32_t slot) {
  list_node *n = &lp->nodes[slot];
  if (n->prev != LIST_NIL)
    lp->nodes[n->prev].next = n->next;
  else
    lp->head = n->next;
  if (n->next != LIST_NIL)
    lp->nodes[n->next].prev = n->prev;
  else
    lp->tail = n->prev;
}

/* Allocates an empty policy of the given kind; NULL when out of memory. */
static policy *list_create(list_kind kind) {
  list_policy *lp = calloc(1, sizeof(*lp));
  if (!lp) return NULL;
  lp->kind = kind;
  lp->head = lp->tail = LIST_NIL;
  return (policy *)lp;
}

/* One constructor per built-in, so that the ops tables differ only here. */
static policy *list_create_lru(void) {
  return list_create(LIST_LRU);
}
static policy *list_create_mru(void) {
  return list_create(LIST_MRU);
}
static policy *list_create_fifo(void) {
  return list_create(LIST_FIFO);
}

/* Frees the policy and its node array (NULL is a no-op). */
static void list_destroy(policy *p) {
  list_policy *lp = (list_policy *)p;
  if (!lp) return;
  free(lp->nodes);
  free(lp);
}

/* Forgets the object; unknown and stale ids are ignored. */
static void list_on_removed(policy *p, uint64_t id) {
  list_policy *lp = (list_policy *)p;
  list_node *n = list_find(lp, id);
  if (!n) return;
  list_unlink(lp, (uint32_t)id);
  n->live = false;
  lp->count--;
}

/* Tracks a new object as the newest event. A slot index still tracked
 * (under any generation, including this one) is first forgotten, so a
 * repeated creation never duplicates an entry and restarts its history. */
static void list_on_created(policy *p, uint64_t id, uint64_t bytes) {
  list_policy *lp = (list_policy *)p;
  uint32_t slot = (uint32_t)id;
  if (slot == LIST_NIL || !list_reserve(lp, slot)) return; /* untracked, see top */
  list_node *n = &lp->nodes[slot];
  if (n->live) list_on_removed(p, n->id);
  n->id = id;
  n->bytes = bytes;
  n->live = true;
  list_push_tail(lp, slot);
  lp->count++;
}

/* An access: lru and mru move the object to the newest end; fifo ignores
 * it. Unknown and stale ids are ignored. */
static void list_on_touched(policy *p, uint64_t id) {
  list_policy *lp = (list_policy *)p;
  if (lp->kind == LIST_FIFO || !list_find(lp, id)) return;
  uint32_t slot = (uint32_t)id;
  if (lp->tail == slot) return; /* already the newest */
  list_unlink(lp, slot);
  list_push_tail(lp, slot);
}

/* Up to max ids (and bytes, when `bytes` is not NULL) in eviction order,
 * after `after` when it is tracked, else from the first. Reads only:
 * O(1) to locate `after`, then one step per candidate. */
static size_t list_candidates(const policy *p, uint64_t after, uint64_t *ids, uint64_t *bytes,
                              size_t max) {
  const list_policy *lp = (const list_policy *)p;
  if (!ids) return 0;
  bool backward = lp->kind == LIST_MRU;
  const list_node *from = after ? list_find(lp, after) : NULL;
  uint32_t cur;
  if (from)
    cur = backward ? from->prev : from->next;
  else
    cur = backward ? lp->tail : lp->head;
  size_t n = 0;
  for (; n < max && cur != LIST_NIL; n++) {
    const list_node *node = &lp->nodes[cur];
    ids[n] = node->id;
    if (bytes) bytes[n] = node->bytes;
    cur = backward ? node->prev : node->next;
  }
  return n;
}

/* Number of tracked objects. */
static size_t list_count(const policy *p) {
  return ((const list_policy *)p)->count;
}

const policy_ops policy_lru_ops = {
    .name = "lru",
    .create = list_create_lru,
    .destroy = list_destroy,
    .on_created = list_on_created,
    .on_touched = list_on_touched,
    .on_removed = list_on_removed,
    .candidates = list_candidates,
    .count = list_count,
};

const policy_ops policy_mru_ops = {
    .name = "mru",
    .create = list_create_mru,
    .destroy = list_destroy,
    .on_created = list_on_created,
    .on_touched = list_on_touched,
    .on_removed = list_on_removed,
    .candidates = list_candidates,
    .count = list_count,
};

const policy_ops policy_fifo_ops = {
    .name = "fifo",
    .create = list_create_fifo,
    .destroy = list_destroy,
    .on_created = list_on_created,
    .on_touched = list_on_touched,
    .on_removed = list_on_removed,
    .candidates = list_candidates,
    .count = list_count,
};
