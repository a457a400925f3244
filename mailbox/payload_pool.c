/*
 * payload_pool.c — size-classed free lists of payload blocks (see header).
 *
 * Each class is a singly linked list behind a tiny test-and-set lock built
 * on C11 atomics, not a lock-free Treiber stack (ck_stack): that stack's
 * pop reads the `next` field of a node another thread may be pushing
 * again — harmless with the generation counter, but a data race in the C11
 * model, which ThreadSanitizer rightly flags. The critical sections are
 * two pointer moves, so the lock is held for nanoseconds.
 */
#include "mailbox/payload_pool.h"

#include <sched.h>
#include <stdlib.h>

#define POOL_CLASSES 4
static const size_t class_bytes[POOL_CLASSES] = {256, 4096, 65536, 1u << 20};

/* Each block starts with this header; the payload follows, 16-aligned. */
typedef struct pool_block {
  struct pool_block *next; /* free-list link while the block is free */
  uint32_t cls;            /* size class, or POOL_CLASSES for a malloc'd one */
  uint32_t pad;
} __attribute__((aligned(16))) pool_block;

struct free_list {
  uint32_t locked; /* atomic test-and-set lock */
  pool_block *head;
} __attribute__((aligned(64))); /* one cache line per class */

struct payload_pool {
  struct free_list free[POOL_CLASSES];
};

payload_pool *payload_pool_create(void) {
  payload_pool *p = aligned_alloc(64, sizeof(*p));
  if (!p) return NULL;
  for (int i = 0; i < POOL_CLASSES; i++) {
    p->free[i].locked = 0;
    p->free[i].head = NULL;
  }
  return p;
}

void payload_pool_destroy(payload_pool *p) {
  if (!p) return;
  for (int i = 0; i < POOL_CLASSES; i++) {
    for (pool_block *b = p->free[i].head, *next; b; b = next) {
      next = b->next;
      free(b);
    }
  }
  free(p);
}

static void list_lock(struct free_list *l) {
  /* acquire: the list as the previous holder left it is visible to us */
  for (unsigned i = 0; __atomic_exchange_n(&l->locked, 1, __ATOMIC_ACQUIRE); i++) {
    while (__atomic_load_n(&l->locked, __ATOMIC_RELAXED)) {
      if (++i % 64 == 0) sched_yield(); /* the holder may be preempted */
      __builtin_ia32_pause();
    }
  }
}

static void list_unlock(struct free_list *l) {
  /* release: our list updates (and the block contents written by the last
   * user, before it returned the block) happen before the next holder */
  __atomic_store_n(&l->locked, 0, __ATOMIC_RELEASE);
}

static uint32_t class_of(size_t len) {
  for (uint32_t i = 0; i < POOL_CLASSES; i++)
    if (len <= class_bytes[i]) return i;
  return POOL_CLASSES;
}

void *payload_pool_get(payload_pool *p, size_t len) {
  uint32_t cls = class_of(len);
  pool_block *b = NULL;
  if (cls < POOL_CLASSES) {
    struct free_list *l = &p->free[cls];
    list_lock(l);
    b = l->head;
    if (b) l->head = b->next;
    list_unlock(l);
  }
  if (!b) {
    size_t bytes = cls < POOL_CLASSES ? class_bytes[cls] : len;
    b = malloc(sizeof(pool_block) + bytes);
    if (!b) return NULL;
    b->cls = cls;
  }
  return b + 1;
}

void payload_pool_put(payload_pool *p, void *block) {
  if (!block) return;
  pool_block *b = (pool_block *)block - 1;
  if (b->cls >= POOL_CLASSES) {
    free(b);
    return;
  }
  struct free_list *l = &p->free[b->cls];
  list_lock(l);
  b->next = l->head;
  l->head = b;
  list_unlock(l);
}
