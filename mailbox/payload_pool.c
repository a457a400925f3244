/*
 * payload_pool.c — size-classed free lists of payload blocks (see header).
 *
 * Each class is a singly linked list behind the overflow queue's kind of
 * lock (mailbox.c): a spinlock taken with backoff_wait, so a preempted
 * holder still gets the CPU; its lock and unlock carry the ordering. Not a
 * lock-free Treiber stack (ck_stack): that stack's pop reads the `next`
 * field of a node another thread may be pushing again — harmless with the
 * generation counter, but a data race in the C11 model, which
 * ThreadSanitizer rightly flags. The critical sections are two pointer
 * moves, so the lock is held for nanoseconds.
 */
#include "mailbox/payload_pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "mailbox/backoff.h"

#define POOL_CLASSES 4
static const size_t class_bytes[POOL_CLASSES] = {256, 4096, 65536, 1u << 20};

/* Each block starts with this header; the payload follows, 16-aligned. */
typedef struct pool_block {
  struct pool_block *next; /* free-list link while the block is free */
  uint32_t cls;            /* size class, or POOL_CLASSES for a malloc'd one */
  uint32_t pad;
} __attribute__((aligned(16))) pool_block;

struct free_list {
  pthread_spinlock_t lock;
  pool_block *head;             /* under lock */
} __attribute__((aligned(64))); /* one cache line per class */

struct payload_pool {
  struct free_list free[POOL_CLASSES];
};

payload_pool *payload_pool_create(void) {
  payload_pool *p = aligned_alloc(64, sizeof(*p));
  if (!p) return NULL;
  for (int i = 0; i < POOL_CLASSES; i++) {
    pthread_spin_init(&p->free[i].lock, PTHREAD_PROCESS_PRIVATE);
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
    pthread_spin_destroy(&p->free[i].lock);
  }
  free(p);
}

/* Taking the lock acquires: the list as the previous holder left it is
 * visible to us. */
static void list_lock(struct free_list *l) {
  for (unsigned i = 0; pthread_spin_trylock(&l->lock) != 0; i++) backoff_wait(i, 0);
}

/* Releases: our list updates (and the block contents written by the last
 * user, before it returned the block) happen before the next holder. */
static void list_unlock(struct free_list *l) {
  pthread_spin_unlock(&l->lock);
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
