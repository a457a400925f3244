/*
 * payload_pool.c — size-classed free lists of payload blocks (see header).
 */
#include "mailbox/payload_pool.h"
#include "mailbox/tsan.h"

#include <ck_pr.h>
#include <ck_stack.h>
#include <stdlib.h>

#define POOL_CLASSES 4
static const size_t class_bytes[POOL_CLASSES] = {256, 4096, 65536, 1u << 20};

/* Each block starts with this header; the payload follows, 16-aligned. */
typedef struct pool_block {
  ck_stack_entry_t link; /* free-list link while the block is free */
  uint32_t cls;          /* size class, or POOL_CLASSES for a malloc'd one */
  uint32_t pad;
} __attribute__((aligned(16))) pool_block;

struct payload_pool {
  /* 16-aligned: ck_stack_pop_mpmc swaps head and generation with cmpxchg16b */
  ck_stack_t free[POOL_CLASSES] __attribute__((aligned(16)));
};

payload_pool *payload_pool_create(void) {
  payload_pool *p = aligned_alloc(64, sizeof(*p) + (64 - sizeof(*p) % 64) % 64);
  if (!p) return NULL;
  for (int i = 0; i < POOL_CLASSES; i++) ck_stack_init(&p->free[i]);
  return p;
}

void payload_pool_destroy(payload_pool *p) {
  if (!p) return;
  for (int i = 0; i < POOL_CLASSES; i++) {
    ck_stack_entry_t *e;
    /* no concurrent users at destruction: the single-pop variant is enough */
    while ((e = ck_stack_pop_npsc(&p->free[i])) != NULL) free(e);
  }
  free(p);
}

static uint32_t class_of(size_t len) {
  for (uint32_t i = 0; i < POOL_CLASSES; i++)
    if (len <= class_bytes[i]) return i;
  return POOL_CLASSES;
}

void *payload_pool_get(payload_pool *p, size_t len) {
  uint32_t cls = class_of(len);
  pool_block *b = NULL;
  if (cls < POOL_CLASSES) b = (pool_block *)ck_stack_pop_mpmc(&p->free[cls]);
  if (b) TSAN_ACQUIRE(b);
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
  /* push_upmc is a CAS loop with release ordering: the payload writes of the
   * last user happen before the next popper sees the block */
  TSAN_RELEASE(b);
  ck_stack_push_upmc(&p->free[b->cls], &b->link);
}
