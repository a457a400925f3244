/*
 * pool_internal.h — the pool's state, shared by the allocator (pool.c) and
 * the room planner of demand eviction (pool_plan.c). Nothing outside l1/pool*
 * includes it.
 */
#ifndef KVA_L1_POOL_INTERNAL_H
#define KVA_L1_POOL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "l1/pool.h"

#define POOL_FREE 0x80000000u      /* head[] flag: the block is free */
#define POOL_NONE UINT32_MAX       /* end of a free list */
#define POOL_MAX_UNITS 0x7fffffffu /* sizes must leave room for POOL_FREE */
#define POOL_CLASSES 32            /* floor(log2(units)) < 31 */

/* A room plan (pool_plan.c): the blocks planned for freeing, in the order
 * they were added, and what freeing them would give. Its arrays are kept
 * and grown between plans, never allocated per plan. */
typedef struct pool_plan {
  bool open;
  uint32_t units; /* units per block of the batch (its largest) */
  uint64_t want;  /* blocks of `units` the batch needs */
  uint64_t room;  /* blocks of `units` the free runs would hold once the
                     planned blocks are freed */
  uint32_t *at;   /* per planned block: its first unit */
  uint8_t *keep;  /* per planned block: 1 = must be freed */
  size_t n, cap;
} pool_plan;

struct pool {
  uint8_t *base;                /* first byte of the region, aligned to unit */
  uint64_t unit;                /* bytes per unit: max(align_bytes, 4096) */
  unsigned shift;               /* log2(unit) */
  uint32_t units;               /* capacity in units */
  uint32_t *head;               /* per unit: size | POOL_FREE at a block's first unit */
  uint32_t *tail;               /* per unit: start index at a block's last unit */
  uint32_t *next;               /* per unit: next free block of the same class; at a
                                   planned block: the start of its planned run, or
                                   while a plan finishes its index in the plan */
  uint32_t *prev;               /* per unit: previous free block of the same class; at
                                   a planned block: the end of its planned run */
  uint64_t *marks;              /* one bit per unit, set at a planned block's first unit */
  uint32_t lists[POOL_CLASSES]; /* first free block of each class */
  uint64_t nonempty;            /* bit c set iff lists[c] != POOL_NONE */
  uint64_t used_units;          /* units in allocated blocks */
  uint64_t live;                /* allocated blocks */
  int pinned;                   /* the region is cudaHostRegister'ed */
  int fd;                       /* a shared region's memfd, -1 for a private one */
  int node;                     /* NUMA node the region is bound to, or -1 */
  pool_plan plan;               /* the room plan of a demand eviction */
};

/* The size class of a block of n >= 1 units: floor(log2(n)). */
static inline unsigned pool_class(uint32_t n) {
  return 31u - (unsigned)__builtin_clz(n);
}

/* The size in units of the block that starts at unit i. */
static inline uint32_t pool_size(const pool *p, uint32_t i) {
  return p->head[i] & ~POOL_FREE;
}

static inline bool pool_is_free(const pool *p, uint32_t i) {
  return (p->head[i] & POOL_FREE) != 0;
}

/* The unit index of ptr when it is the start of a live block, else POOL_NONE. */
uint32_t pool_index_of(const pool *p, const void *ptr);

/* pool_plan.c: drops a plan's arrays (pool_destroy). */
void pool_plan_release(pool *p);
/* pool_plan.c: whether a planned mark is set outside an open plan (memcheck). */
bool pool_plan_stray_marks(const pool *p);

#endif
