/*
 * pool.c — the L1 host pool: the region (mmap, NUMA binding, huge pages,
 * pinning; a memfd other processes can map when shared) and a boundary-tag
 * allocator with segregated free lists.
 *
 * Metadata, all indexed by unit number and all outside the region:
 *   head[i]    at the first unit of a block: its size in units, | POOL_FREE
 *              when free; 0 at every unit that does not start a block. The
 *              "0 elsewhere" part lets pool_free tell a real block start from
 *              a stray pointer in O(1), so merging clears the absorbed tag.
 *   tail[i]    at the last unit of a block: the index of its first unit. Only
 *              read as tail[start - 1], to find the left neighbour.
 *   next/prev  free-list links of a free block, at its first unit (at a block
 *              planned for freeing, the extent of its planned run: see
 *              pool_plan.c, which also owns the one-bit-per-unit marks).
 * Free list c holds the free blocks of floor(log2(units)) == c; bit c of
 * `nonempty` is set iff list c is non-empty.
 *
 * Invariants (pool_memcheck checks them all): blocks tile [0, units); no two
 * free blocks touch; every free block is on exactly the list of its class;
 * used_units and live match the allocated blocks; no block is marked as
 * planned outside an open plan.
 */
#include "l1/pool.h"

#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "actors/log.h"
#include "kvact.h"
#include "l1/host_pin.h"
#include "l1/pool_internal.h"

#define POOL_SCAN 8 /* exact-class entries tried before splitting */
#define POOL_MIN_ALIGN 64
#define POOL_MAX_ALIGN (UINT64_C(1) << 40)
#define POOL_NODE_WORDS 16 /* nodemask words handed to mbind (1024 nodes) */
#define MIB (UINT64_C(1) << 20)

/* ---- small helpers ------------------------------------------------------ */

/* Writes a formatted message into a caller's buffer (which may be absent) and
 * passes `rc` through, so error paths read `return pool_err(...)`. */
__attribute__((format(printf, 4, 5))) static int pool_err(int rc, char *err, size_t errlen,
                                                          const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* Writes both boundary tags of the block [i, i + n). */
static inline void pool_tag(pool *p, uint32_t i, uint32_t n, int free) {
  p->head[i] = n | (free ? POOL_FREE : 0);
  p->tail[i + n - 1] = i;
}

/* Units needed for `bytes`, or 0 when bytes is 0 or more than the pool has. */
static uint32_t pool_units_for(const pool *p, uint64_t bytes) {
  uint64_t n = (bytes >> p->shift) + ((bytes & (p->unit - 1)) != 0);
  return n <= p->units ? (uint32_t)n : 0;
}

/* ---- free lists ---------------------------------------------------------- */

/* Pushes the free block at i on the front of its class list (LIFO keeps a
 * recently freed, cache-warm block first in line). */
static void pool_list_push(pool *p, uint32_t i) {
  unsigned c = pool_class(pool_size(p, i));
  uint32_t first = p->lists[c];
  p->next[i] = first;
  p->prev[i] = POOL_NONE;
  if (first != POOL_NONE) p->prev[first] = i;
  p->lists[c] = i;
  p->nonempty |= UINT64_C(1) << c;
}

/* Unlinks the free block at i from its class list in O(1). */
static void pool_list_remove(pool *p, uint32_t i) {
  unsigned c = pool_class(pool_size(p, i));
  uint32_t nx = p->next[i], pv = p->prev[i];
  if (pv != POOL_NONE)
    p->next[pv] = nx;
  else
    p->lists[c] = nx;
  if (nx != POOL_NONE) p->prev[nx] = pv;
  if (p->lists[c] == POOL_NONE) p->nonempty &= ~(UINT64_C(1) << c);
}

/* Walks at most `limit` entries of a list from `i` for a block of >= n units.
 * Returns it, or POOL_NONE with *stop at the first entry not looked at. */
static uint32_t pool_scan(const pool *p, uint32_t i, uint32_t n, uint32_t limit, uint32_t *stop) {
  for (; i != POOL_NONE && limit > 0; i = p->next[i], limit--)
    if (pool_size(p, i) >= n) return i;
  *stop = i;
  return POOL_NONE;
}

/* Finds a free block of >= n units without changing anything. First a few
 * entries of n's own class (a perfect fit for equal-sized chunks), then the
 * head of the smallest non-empty larger class (every block there is big
 * enough), and only then the rest of the own class, so the search never
 * misses a fitting block. */
static uint32_t pool_find(const pool *p, uint32_t n) {
  unsigned c = pool_class(n);
  uint32_t rest = POOL_NONE;
  uint32_t i = pool_scan(p, p->lists[c], n, POOL_SCAN, &rest);
  if (i != POOL_NONE) return i;
  uint64_t larger = p->nonempty & ~((UINT64_C(2) << c) - 1);
  if (larger) return p->lists[__builtin_ctzll(larger)];
  return pool_scan(p, rest, n, UINT32_MAX, &rest);
}

/* ---- allocate and free ---------------------------------------------------- */

/* Allocates the first n units of the free block at i; a remainder becomes a
 * free block of its own (its right neighbour is allocated or the end, since
 * free blocks never touch). */
static void pool_take(pool *p, uint32_t i, uint32_t n) {
  uint32_t m = pool_size(p, i);
  pool_list_remove(p, i);
  pool_tag(p, i, n, 0);
  if (m > n) {
    pool_tag(p, i + n, m - n, 1);
    pool_list_push(p, i + n);
  }
  p->used_units += n;
  p->live++;
}

/* Frees the allocated block at i and merges it with free neighbours on both
 * sides, clearing the head tags of the blocks it absorbs. */
static void pool_release(pool *p, uint32_t i) {
  uint32_t n = pool_size(p, i);
  p->used_units -= n;
  p->live--;
  uint32_t r = i + n;
  if (r < p->units && (p->head[r] & POOL_FREE)) {
    pool_list_remove(p, r);
    n += pool_size(p, r);
    p->head[r] = 0;
  }
  if (i > 0) {
    uint32_t l = p->tail[i - 1];
    if (p->head[l] & POOL_FREE) {
      pool_list_remove(p, l);
      n += pool_size(p, l);
      p->head[i] = 0;
      i = l;
    }
  }
  pool_tag(p, i, n, 1);
  pool_list_push(p, i);
}

/* O(1) thanks to head[] being 0 everywhere but at block starts. */
uint32_t pool_index_of(const pool *p, const void *ptr) {
  uintptr_t a = (uintptr_t)ptr, b = (uintptr_t)p->base;
  if (a < b || a - b >= pool_capacity(p) || ((a - b) & (p->unit - 1))) return POOL_NONE;
  uint32_t i = (uint32_t)((a - b) >> p->shift);
  uint32_t h = p->head[i];
  return (h == 0 || (h & POOL_FREE)) ? POOL_NONE : i;
}

void *pool_alloc(pool *p, uint64_t bytes) {
  uint32_t n = p ? pool_units_for(p, bytes) : 0;
  if (n == 0) return NULL;
  uint32_t i = pool_find(p, n);
  if (i == POOL_NONE) return NULL;
  pool_take(p, i, n);
  return p->base + ((uint64_t)i << p->shift);
}

/* All or nothing: on the first failure frees what this call took (in reverse,
 * so the merges restore the earlier free space) and NULLs out[]. */
int pool_alloc_batch(pool *p, const uint64_t *bytes, size_t n, void **out) {
  if (!p || (n && (!bytes || !out))) return KVA_EINVAL;
  for (size_t k = 0; k < n; k++) {
    out[k] = pool_alloc(p, bytes[k]);
    if (out[k]) continue;
    int rc = bytes[k] == 0 ? KVA_EINVAL : KVA_ENOMEM;
    while (k > 0) pool_free(p, out[--k]);
    memset(out, 0, n * sizeof(*out));
    return rc;
  }
  return 0;
}

/* Frees a block. A pointer that is not the start of a live block (inside a
 * block, already freed, outside the region) is a caller bug; it is ignored
 * with a warning so that it cannot corrupt the pool. NULL is a no-op. */
void pool_free(pool *p, void *ptr) {
  if (!p || !ptr) return;
  uint32_t i = pool_index_of(p, ptr);
  if (i == POOL_NONE) {
    LOG_WARN("l1 pool: ignoring free of %p: not the start of a live block", ptr);
    return;
  }
  pool_release(p, i);
}

/* ---- accounting -------------------------------------------------------- */

/* Rounds up to whole units; saturates instead of wrapping for huge requests. */
uint64_t pool_block_bytes(const pool *p, uint64_t bytes) {
  uint64_t n = (bytes >> p->shift) + ((bytes & (p->unit - 1)) != 0);
  return n > (UINT64_MAX >> p->shift) ? UINT64_MAX : n << p->shift;
}

/* Same search as pool_alloc, with nothing taken. */
int pool_fits(const pool *p, uint64_t bytes) {
  uint32_t n = pool_units_for(p, bytes);
  return n != 0 && pool_find(p, n) != POOL_NONE;
}

uint64_t pool_capacity(const pool *p) {
  return (uint64_t)p->units << p->shift;
}
uint64_t pool_used(const pool *p) {
  return p->used_units << p->shift;
}
uint64_t pool_free_bytes(const pool *p) {
  return pool_capacity(p) - pool_used(p);
}
int pool_is_pinned(const pool *p) {
  return p->pinned;
}
int pool_numa_node(const pool *p) {
  return p->node;
}
void *pool_base(const pool *p) {
  return p->base;
}
uint64_t pool_live_blocks(const pool *p) {
  return p->live;
}

/* ---- memcheck ----------------------------------------------------------- */

/* What the block walk counted, compared with the lists and counters after. */
typedef struct pool_tally {
  uint64_t used_units, free_units, live, free_blocks;
} pool_tally;

/* Checks one block at i: sane size, matching tail tag, no tags inside, and
 * (when free) no free left neighbour. */
static int pool_check_block(const pool *p, uint32_t i, int prev_free, char *r, size_t len) {
  uint32_t n = pool_size(p, i);
  if (p->head[i] == 0 || n == 0) return pool_err(KVA_EIO, r, len, "unit %u: no block tag", i);
  if ((uint64_t)i + n > p->units)
    return pool_err(KVA_EIO, r, len, "unit %u: block of %u units runs past the end", i, n);
  if (p->tail[i + n - 1] != i)
    return pool_err(KVA_EIO, r, len, "unit %u: tail tag says %u", i, p->tail[i + n - 1]);
  for (uint32_t k = i + 1; k < i + n; k++)
    if (p->head[k] != 0)
      return pool_err(KVA_EIO, r, len, "unit %u: stray tag inside block %u", k, i);
  if (prev_free && (p->head[i] & POOL_FREE))
    return pool_err(KVA_EIO, r, len, "unit %u: two free blocks touch", i);
  return 0;
}

/* Walks the blocks from unit 0 to the end, tallying them. */
static int pool_check_blocks(const pool *p, pool_tally *t, char *r, size_t len) {
  int prev_free = 0;
  for (uint32_t i = 0; i < p->units; i += pool_size(p, i)) {
    int rc = pool_check_block(p, i, prev_free, r, len);
    if (rc) return rc;
    prev_free = (p->head[i] & POOL_FREE) != 0;
    if (prev_free) {
      t->free_units += pool_size(p, i);
      t->free_blocks++;
    } else {
      t->used_units += pool_size(p, i);
      t->live++;
    }
  }
  return 0;
}

/* Walks list c: every entry a free block of class c with a consistent back
 * link; stops (as corrupt) after more entries than there are free blocks. */
static int pool_check_list(const pool *p, unsigned c, uint64_t *seen, uint64_t max, char *r,
                           size_t len) {
  uint32_t pv = POOL_NONE;
  for (uint32_t i = p->lists[c]; i != POOL_NONE; pv = i, i = p->next[i]) {
    if (++*seen > max)
      return pool_err(KVA_EIO, r, len, "list %u: more entries than free blocks", c);
    if (i >= p->units || !(p->head[i] & POOL_FREE))
      return pool_err(KVA_EIO, r, len, "list %u: unit %u is not a free block", c, i);
    if (pool_class(pool_size(p, i)) != c)
      return pool_err(KVA_EIO, r, len, "list %u: block %u has class %u", c, i,
                      pool_class(pool_size(p, i)));
    if (p->prev[i] != pv) return pool_err(KVA_EIO, r, len, "list %u: bad back link at %u", c, i);
  }
  int bit = (p->nonempty >> c) & 1;
  if (bit != (p->lists[c] != POOL_NONE))
    return pool_err(KVA_EIO, r, len, "list %u: bitmap bit %d disagrees", c, bit);
  return 0;
}

int pool_memcheck(const pool *p, char *report, size_t len) {
  pool_tally t = {0};
  uint64_t seen = 0;
  int rc = pool_check_blocks(p, &t, report, len);
  for (unsigned c = 0; rc == 0 && c < POOL_CLASSES; c++)
    rc = pool_check_list(p, c, &seen, t.free_blocks, report, len);
  if (rc) return rc;
  if (p->nonempty >> POOL_CLASSES) return pool_err(KVA_EIO, report, len, "bitmap: stray bits");
  if (seen != t.free_blocks)
    return pool_err(KVA_EIO, report, len, "%llu free blocks but %llu on the lists",
                    (unsigned long long)t.free_blocks, (unsigned long long)seen);
  if (t.used_units != p->used_units || t.used_units + t.free_units != p->units)
    return pool_err(KVA_EIO, report, len, "used %llu + free %llu units vs counter %llu, cap %u",
                    (unsigned long long)t.used_units, (unsigned long long)t.free_units,
                    (unsigned long long)p->used_units, p->units);
  if (t.live != p->live)
    return pool_err(KVA_EIO, report, len, "%llu allocated blocks but live counter %llu",
                    (unsigned long long)t.live, (unsigned long long)p->live);
  if (pool_plan_stray_marks(p))
    return pool_err(KVA_EIO, report, len, "planned marks left without an open plan");
  return pool_err(0, report, len, "ok");
}

/* ---- create and destroy ----------------------------------------------- */

/* Checks the options that need no system state. */
static int pool_check_opts(const pool_opts *o, char *err, size_t errlen) {
  uint64_t a = o->align_bytes;
  if (a < POOL_MIN_ALIGN || a > POOL_MAX_ALIGN || (a & (a - 1)))
    return pool_err(KVA_EINVAL, err, errlen,
                    "l1.align_bytes: %llu is not a power of two between 64 and 2^40",
                    (unsigned long long)a);
  if (o->pinned < -1 || o->pinned > 1)
    return pool_err(KVA_EINVAL, err, errlen, "l1.pinned: %d is not -1, 0 or 1", o->pinned);
  if (o->pinned == 1 && !host_pin_available())
    return pool_err(KVA_ENOTSUP, err, errlen,
                    "l1.pinned: 1 but no CUDA device was found (libcudart missing or no "
                    "device), so the pool cannot be page-locked");
  return 0;
}

/* MemAvailable from /proc/meminfo in bytes, or UINT64_MAX when unreadable
 * (then only size_bytes limits the pool). */
static uint64_t pool_mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[128];
  unsigned long long kb;
  uint64_t bytes = UINT64_MAX;
  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) bytes = (uint64_t)kb << 10;
  if (f) fclose(f);
  return bytes;
}

/* The effective size in units: min(size_bytes, MemAvailable - reserve_bytes)
 * rounded down to whole units, at most POOL_MAX_UNITS; 0 with err written
 * when that is less than one unit. */
static uint32_t pool_usable_units(const pool_opts *o, unsigned shift, char *err, size_t errlen) {
  uint64_t avail = pool_mem_available();
  uint64_t usable = avail > o->reserve_bytes ? avail - o->reserve_bytes : 0;
  if (o->size_bytes < usable) usable = o->size_bytes;
  uint64_t units = usable >> shift;
  if (units > POOL_MAX_UNITS) units = POOL_MAX_UNITS;
  if (units == 0)
    pool_err(0, err, errlen,
             "l1.size_bytes: %llu usable bytes, less than one %llu-byte unit (size_bytes %llu, "
             "MemAvailable %llu MiB, reserve_bytes %llu MiB)",
             (unsigned long long)usable, 1ull << shift, (unsigned long long)o->size_bytes,
             avail == UINT64_MAX ? 0ull : (unsigned long long)(avail / MIB),
             (unsigned long long)(o->reserve_bytes / MIB));
  return (uint32_t)units;
}

/* Finds the node to bind to: -1 means the calling CPU's node. Without NUMA
 * support the machine has node 0 only and nothing is bound (*node = -1). */
static int pool_resolve_node(int want, int *node, char *err, size_t errlen) {
  *node = -1;
  if (want < -1) return pool_err(KVA_EINVAL, err, errlen, "l1.numa_node: %d is invalid", want);
  if (numa_available() < 0) {
    if (want > 0)
      return pool_err(KVA_EINVAL, err, errlen,
                      "l1.numa_node: node %d does not exist (NUMA not available: node 0 only)",
                      want);
    return 0;
  }
  if (want == -1) {
    int cpu = sched_getcpu();
    want = cpu >= 0 ? numa_node_of_cpu(cpu) : -1;
    if (want < 0) return 0;
  }
  if (want >= POOL_NODE_WORDS * 64 || want > numa_max_node() ||
      !numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)want))
    return pool_err(KVA_EINVAL, err, errlen,
                    "l1.numa_node: node %d does not exist or has no memory for this process "
                    "(nodes 0..%d)",
                    want, numa_max_node());
  *node = want;
  return 0;
}

/* Binds the region to p->node; a failure leaves it unbound (node -1) with a
 * warning, because an unbound pool still works. */
static void pool_bind(pool *p, uint64_t bytes) {
  unsigned long mask[POOL_NODE_WORDS] = {0};
  if (p->node < 0) return;
  mask[p->node / 64] = 1ul << (p->node % 64);
  /* maxnode counts one past the last bit the kernel reads. */
  if (mbind(p->base, bytes, MPOL_BIND, mask, POOL_NODE_WORDS * 64 + 1, 0) == 0) return;
  LOG_WARN("l1 pool: binding to NUMA node %d failed (%s); memory is not bound", p->node,
           strerror(errno));
  p->node = -1;
}

/* A memfd of `bytes` for a shared region (sealed against shrinking, so a
 * process that maps it can never fault past its end). */
static int pool_memfd(uint64_t bytes, char *err, size_t errlen) {
  int fd = memfd_create("kvact-l1", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return pool_err(KVA_ENOMEM, err, errlen, "l1 pool: memfd_create failed: %s", strerror(errno));
  if (ftruncate(fd, (off_t)bytes) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    int rc = pool_err(KVA_ENOMEM, err, errlen, "l1 pool: sizing the shared region failed: %s",
                      strerror(errno));
    close(fd);
    return rc;
  }
  return fd;
}

/* Maps `bytes` aligned to p->unit: reserves one unit more than needed when
 * the unit is larger than a page, maps the region (anonymous, or the memfd
 * with MAP_FIXED) at the aligned address inside, and trims both ends. */
static int pool_map(pool *p, uint64_t bytes, int shared, char *err, size_t errlen) {
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t extra = p->unit > page ? p->unit : 0;
  uint8_t *m = mmap(NULL, bytes + extra, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED)
    return pool_err(KVA_ENOMEM, err, errlen, "l1.size_bytes: mmap of %llu MiB failed: %s",
                    (unsigned long long)(bytes / MIB), strerror(errno));
  uint8_t *base = m;
  if (extra) base = (uint8_t *)(((uintptr_t)m + p->unit - 1) & ~(uintptr_t)(p->unit - 1));
  size_t before = (size_t)(base - m), after = (size_t)(extra - before);
  if (before) munmap(m, before);
  if (after) munmap(base + bytes, after);
  p->base = base;
  if (!shared) return 0;
  int fd = pool_memfd(bytes, err, errlen);
  if (fd < 0) return fd;
  p->fd = fd;
  if (mmap(base, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
    return pool_err(KVA_ENOMEM, err, errlen, "l1 pool: mmap of the shared region failed: %s",
                    strerror(errno));
  return 0;
}

/* Page-locks the region as asked: pinned = 1 must succeed, -1 falls back to
 * plain memory (one info line when there is no device), 0 never pins. */
static int pool_pin(pool *p, int pinned, uint64_t bytes, char *err, size_t errlen) {
  if (pinned == 0) return 0;
  if (pinned == -1 && !host_pin_available()) {
    LOG_INFO("l1 pool: %llu MiB not page-locked: no CUDA device found",
             (unsigned long long)(bytes / MIB));
    return 0;
  }
  if (host_pin(p->base, bytes) == 0) {
    p->pinned = 1;
    return 0;
  }
  if (pinned == 1)
    return pool_err(KVA_EIO, err, errlen, "l1.pinned: cudaHostRegister of %llu MiB failed",
                    (unsigned long long)(bytes / MIB));
  LOG_WARN("l1 pool: cudaHostRegister of %llu MiB failed; using plain host memory",
           (unsigned long long)(bytes / MIB));
  return 0;
}

/* Allocates the four side arrays (one calloc) and the planned marks, and
 * makes the whole region one free block. */
static int pool_meta_init(pool *p, char *err, size_t errlen) {
  size_t n = p->units;
  p->head = calloc(4 * n, sizeof(uint32_t));
  p->marks = calloc(n / 64 + 1, sizeof(uint64_t));
  if (!p->head || !p->marks)
    return pool_err(KVA_ENOMEM, err, errlen, "l1 pool: no memory for %zu MiB of metadata",
                    4 * n * sizeof(uint32_t) / MIB);
  p->tail = p->head + n;
  p->next = p->tail + n;
  p->prev = p->next + n;
  for (unsigned c = 0; c < POOL_CLASSES; c++) p->lists[c] = POOL_NONE;
  pool_tag(p, 0, p->units, 1);
  pool_list_push(p, 0);
  return 0;
}

/* Faults every page in: one madvise where the kernel has
 * MADV_POPULATE_WRITE (5.14), else a write to each page. Without it the
 * first write into each page of the pool pays a page fault and the
 * kernel's zeroing — on these VMs several times the cost of the copy. */
static void pool_prefault(pool *p, uint64_t bytes) {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
  if (madvise(p->base, bytes, MADV_POPULATE_WRITE) == 0) return;
  long page = sysconf(_SC_PAGESIZE);
  for (uint64_t o = 0; o < bytes; o += (uint64_t)page) ((volatile char *)p->base)[o] = 0;
}

/* Sets up a pool whose unit and size are known: metadata, mapping, huge
 * pages, NUMA binding, prefaulting, pinning (in that order, so pages are
 * faulted in on the right node). */
static int pool_setup(pool *p, const pool_opts *o, char *err, size_t errlen) {
  uint64_t bytes = pool_capacity(p);
  int rc = pool_meta_init(p, err, errlen);
  if (rc == 0) rc = pool_map(p, bytes, o->shared, err, errlen);
  if (rc) return rc;
  if (o->hugepages && madvise(p->base, bytes, MADV_HUGEPAGE) != 0)
    LOG_WARN("l1 pool: madvise(MADV_HUGEPAGE) failed (%s); using normal pages", strerror(errno));
  pool_bind(p, bytes);
  if (o->prefault) pool_prefault(p, bytes);
  return pool_pin(p, o->pinned, bytes, err, errlen);
}

int pool_create(const pool_opts *o, pool **out, char *err, size_t errlen) {
  if (out) *out = NULL;
  if (!o || !out) return pool_err(KVA_EINVAL, err, errlen, "l1 pool: no options or no out");
  int node, rc = pool_check_opts(o, err, errlen);
  if (rc == 0) rc = pool_resolve_node(o->numa_node, &node, err, errlen);
  if (rc) return rc;
  unsigned shift = (unsigned)__builtin_ctzll(o->align_bytes > 4096 ? o->align_bytes : 4096);
  uint32_t units = pool_usable_units(o, shift, err, errlen);
  if (units == 0) return o->size_bytes >> shift ? KVA_ENOMEM : KVA_EINVAL;
  pool *p = calloc(1, sizeof(*p));
  if (!p) return pool_err(KVA_ENOMEM, err, errlen, "l1 pool: out of memory");
  *p = (pool){.unit = UINT64_C(1) << shift, .shift = shift, .units = units, .node = node, .fd = -1};
  rc = pool_setup(p, o, err, errlen);
  if (rc) {
    pool_destroy(p);
    return rc;
  }
  *out = p;
  return 0;
}

/* Unpins, unmaps and frees the metadata; safe on a half-built pool. */
void pool_destroy(pool *p) {
  if (!p) return;
  if (p->pinned) host_unpin(p->base);
  if (p->base) munmap(p->base, pool_capacity(p));
  if (p->fd >= 0) close(p->fd);
  free(p->head);
  free(p->marks);
  pool_plan_release(p);
  free(p);
}

int pool_fd(const pool *p) {
  return p->fd;
}

uint64_t pool_offset_of(const pool *p, const void *ptr) {
  uintptr_t a = (uintptr_t)ptr, b = (uintptr_t)p->base;
  return a >= b && a - b < pool_capacity(p) ? (uint64_t)(a - b) : UINT64_MAX;
}
