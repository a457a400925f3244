/*
 * pool.h — the L1 host pool: one mmap'd region and its allocator.
 *
 * The region is carved into blocks of whole units (unit = max(align_bytes,
 * 4096)). Metadata lives outside the region (the region is for DMA and KV
 * bytes only): per unit a boundary tag, so a freed block coalesces with its
 * free neighbours in O(1), and segregated free lists (one per power-of-two
 * size class, with a bitmap of non-empty classes) so that finding a block is
 * O(1) for the common case of many equal-sized chunks and correct for mixed
 * sizes. pool_alloc_batch is all-or-nothing. A room plan (pool_plan_*)
 * says which allocated blocks to free so that a batch would fit, for the
 * L1 manager's demand eviction.
 *
 * Not thread-safe: the pool belongs to the L1 manager actor. Only
 * pool_create/pool_destroy touch the OS (mmap, mbind, madvise, the optional
 * cudaHostRegister); alloc/free never make a syscall.
 */
#ifndef KVA_L1_POOL_H
#define KVA_L1_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pool pool;

typedef struct pool_opts {
  uint64_t size_bytes;    /* wanted size; capped by MemAvailable - reserve_bytes */
  uint64_t reserve_bytes; /* memory left to the rest of the system */
  uint64_t align_bytes;   /* power of two; every block starts on this boundary */
  int numa_node;          /* -1 = the node of the calling CPU */
  int hugepages;          /* 1 = madvise(MADV_HUGEPAGE) */
  int prefault;           /* 1 = fault every page in at creation */
  int pinned;             /* 1 = must pin, 0 = never, -1 = auto (when CUDA is present) */
  int shared;             /* 1 = the region is a memfd other processes can map (pool_fd) */
} pool_opts;

/* Creates the pool; *out = NULL and a negative KVA_E* on failure with the
 * reason in err. The effective size (rounded down to whole units) may be
 * smaller than asked (MemAvailable); it is at least one unit. Errors:
 * KVA_EINVAL for a bad align_bytes (not a power of two >= 64), pinned or
 * numa_node (a node that does not exist), or a size_bytes under one unit;
 * KVA_ENOMEM when MemAvailable - reserve_bytes leaves under one unit or mmap
 * fails; KVA_ENOTSUP for pinned = 1 without a CUDA device; KVA_EIO when
 * cudaHostRegister fails with pinned = 1. With pinned = -1 and no device the
 * pool is plain memory and one LOG_INFO line says so. Without NUMA support
 * (numa_available() < 0) nothing is bound and pool_numa_node reports -1. */
int pool_create(const pool_opts *o, pool **out, char *err, size_t errlen);
void pool_destroy(pool *p);

/* One block of at least `bytes` bytes, starting on an align_bytes boundary;
 * NULL when bytes is 0 or no free block is large enough. */
void *pool_alloc(pool *p, uint64_t bytes);
/* n blocks at once, out[k] of at least bytes[k] bytes: all or nothing. 0 on
 * success; KVA_ENOMEM when they do not all fit (KVA_EINVAL when a size is 0),
 * and then nothing stays allocated and out[] is all NULL. */
int pool_alloc_batch(pool *p, const uint64_t *bytes, size_t n, void **out);
/* Frees a block from pool_alloc/pool_alloc_batch; NULL is a no-op. A pointer
 * that is not the start of a live block (double free, inside a block, outside
 * the region) is ignored with a LOG_WARN and leaves the pool intact. */
void pool_free(pool *p, void *ptr);
/* Bytes a block of `bytes` really takes (rounded up to whole units). */
uint64_t pool_block_bytes(const pool *p, uint64_t bytes);
/* Whether one block of `bytes` could be allocated right now. */
int pool_fits(const pool *p, uint64_t bytes);

/* Room planning, for demand eviction (pool_plan.c): which allocated blocks
 * to free so that a batch would fit, found without freeing anything. The
 * free space counts as runs: maximal stretches of free blocks and blocks
 * planned for freeing. The batch's room is the number of its blocks these
 * runs hold (sum of run / block size): a batch of equal-sized blocks fits
 * exactly when that is at least its count, whichever runs pool_alloc_batch
 * picks (each block it takes lowers the sum by exactly one). A batch of
 * mixed sizes is planned as blocks of its largest size, which is enough.
 * One plan at a time; the pool must not change while a plan is open.
 *
 * pool_plan_start opens a plan for the batch bytes[0..n): 0, or 1 when it
 * fits as it is (no plan opened), KVA_ENOMEM when it cannot fit even in an
 * empty pool, KVA_EINVAL for a size 0 or no sizes (no plan opened either). */
int pool_plan_start(pool *p, const uint64_t *bytes, size_t n);
/* Plans the allocated block at ptr for freeing, in O(1); callers add
 * blocks in the order they would rather free them. 1 when freeing the
 * blocks planned so far would make room for the batch, 0 when not yet,
 * KVA_EINVAL when ptr is not a live block or is planned already, KVA_ENOMEM
 * (nothing planned). */
int pool_plan_add(pool *p, const void *ptr);
/* Closes a plan that makes room and keeps only blocks it needs: the
 * latest planned first, each one is dropped when the room stays enough
 * without it, so every block kept is needed (freeing all but any one of
 * them would not make room). Returns how many are kept;
 * pool_plan_needed(p, k) then says whether the k-th block added is one of
 * them (until the next plan). O(k) plus the length of the runs. */
size_t pool_plan_finish(pool *p);
bool pool_plan_needed(const pool *p, size_t k);
/* Closes a plan that frees nothing. No-op without an open plan. */
void pool_plan_cancel(pool *p);

uint64_t pool_capacity(const pool *p); /* effective bytes */
uint64_t pool_used(const pool *p);     /* bytes in allocated blocks */
uint64_t pool_free_bytes(const pool *p);
int pool_is_pinned(const pool *p);
int pool_numa_node(const pool *p); /* node the region is bound to, -1 if none */
/* A shared pool's memfd (mmap it MAP_SHARED, length pool_capacity, offset
 * 0, to see the same bytes at the same offsets from pool_base), or -1 for
 * a private pool. The pool owns it: dup it to keep it past pool_destroy. */
int pool_fd(const pool *p);
/* Offset of ptr in the region, or UINT64_MAX when it lies outside. */
uint64_t pool_offset_of(const pool *p, const void *ptr);
void *pool_base(const pool *p);

/* Walks every block and list and checks the accounting: boundary tags agree,
 * no two free blocks touch, every free block is on the list of its class,
 * used + free = capacity, the number of live blocks matches. 0 when
 * consistent (report then reads "ok"), else KVA_EIO with the first problem
 * written into report. O(capacity in units); for tests and debugging. */
int pool_memcheck(const pool *p, char *report, size_t len);
uint64_t pool_live_blocks(const pool *p); /* allocated blocks */

#endif
