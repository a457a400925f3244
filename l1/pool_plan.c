/*
 * pool_plan.c — room planning for demand eviction: which allocated blocks
 * to free so that a batch fits, when the free bytes are there but not in
 * one piece (see pool.h for the contract).
 *
 * Why contiguity is planned here rather than avoided with size classes:
 * with objects of 1 to 32 chunks (kvbench's mixed-sizes workload) a slab
 * model of size classes (exact or power-of-two classes, slabs of 2 to
 * 32 MiB, victims in class order or global LRU order) kept the pool at
 * 0.09-0.78 utilization, while planning contiguous room in this
 * allocator keeps it at the figure in the README (Benchmarks) without
 * giving up the policy's order; for the common case of one chunk size
 * both are free of fragmentation (every freed block fits the next one).
 *
 * A plan is a set of planned blocks (allocated blocks it would free). A
 * run is a maximal stretch of free and planned blocks; the batch's room is
 * the sum over runs of run / units. Adding a block merges it with the runs
 * on either side, so the room changes by
 *     (left + block + right) / u - left / u - right / u
 * and only the runs' lengths are needed. Each run that holds planned
 * blocks keeps its extent [start, end) at its leftmost and rightmost
 * planned block (next[] = start, prev[] = end: the free-list links, unused
 * at an allocated block); the neighbour of a block being added is either
 * such an end block or a free block next to one, so an add is O(1). A bit
 * per unit (marks) tells planned blocks from other allocated ones.
 *
 * Finishing walks the planned blocks latest first: a block goes out of
 * the plan when the room without it (its run split in two, each side
 * measured by walking its free and still-kept neighbours) is still enough.
 * Room only grows with the planned set, so a block that was needed stays
 * needed as others go: every block kept is needed.
 */
#include <stdlib.h>

#include "common/array.h"
#include "kvact.h"
#include "l1/pool_internal.h"

static bool marked(const pool *p, uint32_t i) {
  return (p->marks[i >> 6] >> (i & 63)) & 1;
}

static void mark(pool *p, uint32_t i, bool on) {
  uint64_t bit = UINT64_C(1) << (i & 63);
  if (on)
    p->marks[i >> 6] |= bit;
  else
    p->marks[i >> 6] &= ~bit;
}

/* Grows the plan's arrays to hold `need` blocks; KVA_ENOMEM leaves them as
 * they were (each array that did grow is kept). */
static int plan_grow(pool_plan *pl, size_t need) {
  if (need <= pl->cap) return KVA_OK;
  size_t cap = array_next_cap(pl->cap, need, sizeof(*pl->at));
  bool at = cap && ARRAY_RESIZE(pl->at, cap);
  bool keep = cap && ARRAY_RESIZE(pl->keep, cap);
  if (!at || !keep) return KVA_ENOMEM;
  pl->cap = cap;
  return KVA_OK;
}

/* Room of the free blocks alone: those of u units or more, all in the
 * lists of u's class and above. Stops counting once it reaches want. */
static uint64_t free_room(const pool *p, uint32_t u, uint64_t want) {
  uint64_t room = 0;
  for (unsigned c = pool_class(u); c < POOL_CLASSES && room < want; c++)
    for (uint32_t i = p->lists[c]; i != POOL_NONE && room < want; i = p->next[i])
      room += pool_size(p, i) / u;
  return room;
}

int pool_plan_start(pool *p, const uint64_t *bytes, size_t n) {
  pool_plan *pl = &p->plan;
  pool_plan_cancel(p);
  if (n == 0 || !bytes) return KVA_EINVAL;
  uint64_t u = 0;
  for (size_t k = 0; k < n; k++) {
    if (bytes[k] == 0) return KVA_EINVAL;
    uint64_t b = (bytes[k] >> p->shift) + ((bytes[k] & (p->unit - 1)) != 0);
    if (b > u) u = b;
  }
  if (u > p->units || n > p->units / u) return KVA_ENOMEM;
  pl->units = (uint32_t)u;
  pl->want = n;
  pl->room = free_room(p, pl->units, n);
  pl->n = 0;
  if (pl->room >= pl->want) return 1;
  pl->open = true;
  return 0;
}

/* The run that ends at unit i (exclusive): sets *start and returns its
 * rightmost planned block, or POOL_NONE when it has none (then it is a free
 * block or empty). */
static uint32_t run_before(const pool *p, uint32_t i, uint32_t *start) {
  *start = i;
  if (i == 0) return POOL_NONE;
  uint32_t b = p->tail[i - 1];
  if (pool_is_free(p, b)) {
    *start = b;
    if (b == 0 || !marked(p, p->tail[b - 1])) return POOL_NONE;
    b = p->tail[b - 1];
  } else if (!marked(p, b)) {
    return POOL_NONE;
  }
  *start = p->next[b];
  return b;
}

/* The run that starts at unit i: sets *end (exclusive) and returns its
 * leftmost planned block, or POOL_NONE when it has none. */
static uint32_t run_after(const pool *p, uint32_t i, uint32_t *end) {
  *end = i;
  if (i == p->units) return POOL_NONE;
  uint32_t b = i;
  if (pool_is_free(p, b)) {
    *end = b + pool_size(p, b);
    if (*end == p->units || !marked(p, *end)) return POOL_NONE;
    b = *end;
  } else if (!marked(p, b)) {
    return POOL_NONE;
  }
  *end = p->prev[b];
  return b;
}

/* The leftmost planned block of a run that starts at `start` and has one. */
static uint32_t first_planned(const pool *p, uint32_t start) {
  return pool_is_free(p, start) ? start + pool_size(p, start) : start;
}

/* The rightmost planned block of a run that ends at `end` and has one. */
static uint32_t last_planned(const pool *p, uint32_t end) {
  uint32_t b = p->tail[end - 1];
  return pool_is_free(p, b) ? p->tail[b - 1] : b;
}

int pool_plan_add(pool *p, const void *ptr) {
  pool_plan *pl = &p->plan;
  uint32_t i = pool_index_of(p, ptr);
  if (!pl->open || i == POOL_NONE || marked(p, i)) return KVA_EINVAL;
  if (plan_grow(pl, pl->n + 1) != KVA_OK) return KVA_ENOMEM;
  uint32_t e = i + pool_size(p, i), start, end, u = pl->units;
  uint32_t left = run_before(p, i, &start), right = run_after(p, e, &end);
  pl->room += (end - start) / u - (i - start) / u - (end - e) / u;
  uint32_t first = left == POOL_NONE ? i : first_planned(p, start);
  uint32_t last = right == POOL_NONE ? i : last_planned(p, end);
  p->next[first] = p->next[last] = start;
  p->prev[first] = p->prev[last] = end;
  mark(p, i, true);
  pl->at[pl->n++] = i;
  return pl->room >= pl->want;
}

/* ---- finishing: keep only the blocks that are needed ---------------------- */

/* Whether the block at i is planned and still kept (while finishing,
 * next[] at a planned block holds its index in the plan). */
static bool kept(const pool *p, uint32_t i) {
  return marked(p, i) && p->plan.keep[p->next[i]];
}

/* Units of free and kept planned blocks that touch unit i on its left, up
 * to the first other block. */
static uint64_t kept_left(const pool *p, uint32_t i) {
  uint64_t len = 0;
  for (;;) {
    if (i > 0 && pool_is_free(p, p->tail[i - 1])) {
      len += i - p->tail[i - 1];
      i = p->tail[i - 1];
    }
    if (i == 0 || !kept(p, p->tail[i - 1])) return len;
    len += i - p->tail[i - 1];
    i = p->tail[i - 1];
  }
}

/* The same from unit i (the end of a block) to the right. */
static uint64_t kept_right(const pool *p, uint32_t i) {
  uint64_t len = 0;
  for (;;) {
    if (i < p->units && pool_is_free(p, i)) {
      len += pool_size(p, i);
      i += pool_size(p, i);
    }
    if (i == p->units || !kept(p, i)) return len;
    len += pool_size(p, i);
    i += pool_size(p, i);
  }
}

/* Clears the marks and closes the plan. */
static void plan_close(pool *p) {
  pool_plan *pl = &p->plan;
  for (size_t k = 0; k < pl->n; k++) mark(p, pl->at[k], false);
  pl->open = false;
}

size_t pool_plan_finish(pool *p) {
  pool_plan *pl = &p->plan;
  if (!pl->open) return 0;
  if (pl->room < pl->want) {
    pool_plan_cancel(p);
    return 0;
  }
  for (size_t k = 0; k < pl->n; k++) {
    p->next[pl->at[k]] = (uint32_t)k; /* the run records are not needed now */
    pl->keep[k] = 1;
  }
  size_t n_kept = pl->n;
  uint64_t u = pl->units;
  for (size_t k = pl->n; k-- > 0;) {
    uint32_t i = pl->at[k], e = i + pool_size(p, i);
    uint64_t a = kept_left(p, i), b = kept_right(p, e);
    uint64_t loss = (a + (e - i) + b) / u - a / u - b / u;
    if (pl->room - loss < pl->want) continue;
    pl->room -= loss;
    pl->keep[k] = 0;
    n_kept--;
  }
  plan_close(p);
  return n_kept;
}

bool pool_plan_needed(const pool *p, size_t k) {
  return k < p->plan.n && p->plan.keep[k];
}

void pool_plan_cancel(pool *p) {
  if (!p->plan.open) return;
  plan_close(p);
  for (size_t k = 0; k < p->plan.n; k++) p->plan.keep[k] = 0;
}

bool pool_plan_stray_marks(const pool *p) {
  if (p->plan.open) return false;
  for (uint32_t w = 0; w <= p->units / 64; w++)
    if (p->marks[w]) return true;
  return false;
}

void pool_plan_release(pool *p) {
  free(p->plan.at);
  free(p->plan.keep);
  p->plan = (pool_plan){0};
}
