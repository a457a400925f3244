/*
 * l1_pool_test.c — the L1 host pool: sizing, options, the allocator's
 * fitting and merging, and a seeded mixed-size stress run. Every test that
 * ends with a pool checks it with pool_memcheck.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvact.h"
#include "l1/host_pin.h"
#include "l1/pool.h"
#include "tests/support/fixture.h"

#define MIB (UINT64_C(1) << 20)
#define UNIT UINT64_C(4096)
/* For hot loops: Check's ck_assert records a mark point (a write) on every
 * pass, this only acts on failure. */
#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                        \
  } while (0)

/* Options for a small plain pool: no pinning, the caller's NUMA node. */
static pool_opts small_opts(uint64_t size, uint64_t align) {
  return (pool_opts){.size_bytes = size, .align_bytes = align, .numa_node = -1, .pinned = 0};
}

/* Creates a pool from o, failing the test (with the reason) otherwise. */
static pool *must_create(pool_opts o) {
  pool *p = NULL;
  char err[256] = "";
  int rc = pool_create(&o, &p, err, sizeof(err));
  ck_assert_msg(rc == 0 && p, "pool_create: %d %s", rc, err);
  return p;
}

/* Fails the test with memcheck's report unless the pool is consistent. */
static void assert_consistent(const pool *p) {
  char report[256] = "";
  ck_assert_msg(pool_memcheck(p, report, sizeof(report)) == 0, "memcheck: %s", report);
}

/* Runs pool_create expecting failure; returns the code, asserts *out NULL. */
static int create_fails(pool_opts o, char *err, size_t errlen) {
  pool *p = (pool *)&o; /* poison: pool_create must reset it */
  int rc = pool_create(&o, &p, err, errlen);
  ck_assert_ptr_null(p);
  ck_assert_int_lt(rc, 0);
  ck_assert_msg(err[0] != '\0', "no error text");
  return rc;
}

/* MemAvailable from /proc/meminfo, in bytes. */
static uint64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[128];
  unsigned long long kb = 0;
  ck_assert_ptr_nonnull(f);
  while (fgets(line, sizeof(line), f) && sscanf(line, "MemAvailable: %llu kB", &kb) != 1) {
  }
  fclose(f);
  return (uint64_t)kb << 10;
}

/* Log capture: counts lines per level and keeps the last one. */
static int log_count[4];
static char log_last[512];

static void log_capture(int level, const char *msg, void *arg) {
  log_count[level & 3]++;
  snprintf(log_last, sizeof(log_last), "%s", msg);
}

/* Starts capturing every line up to max_level. */
static void log_start(int max_level) {
  memset(log_count, 0, sizeof(log_count));
  log_last[0] = '\0';
  kva_log_set(log_capture, NULL, max_level);
}

/* Back to the default logger. */
static void log_stop(void) {
  kva_log_set(NULL, NULL, KVA_LOG_WARN);
}

START_TEST(create_gives_a_plain_pool_of_the_asked_size) {
  pool *p = must_create(small_opts(64 * MIB, 64));
  ck_assert_uint_eq(pool_capacity(p), 64 * MIB);
  ck_assert_uint_eq(pool_used(p), 0);
  ck_assert_uint_eq(pool_free_bytes(p), 64 * MIB);
  ck_assert_uint_eq(pool_live_blocks(p), 0);
  ck_assert_int_eq(pool_is_pinned(p), 0);
  ck_assert_int_ge(pool_numa_node(p), -1);
  ck_assert_uint_eq((uintptr_t)pool_base(p) % UNIT, 0);
  ck_assert_uint_eq(pool_block_bytes(p, 1), UNIT);
  ck_assert_uint_eq(pool_block_bytes(p, UNIT + 1), 2 * UNIT);
  ck_assert(pool_fits(p, 64 * MIB));
  ck_assert(!pool_fits(p, 64 * MIB + 1));
  assert_consistent(p);
  pool_destroy(p);
  pool_destroy(NULL);
}
END_TEST

START_TEST(size_is_rounded_down_to_whole_units) {
  pool *p = must_create(small_opts(10 * UNIT + 123, 64));
  ck_assert_uint_eq(pool_capacity(p), 10 * UNIT);
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(alloc_of_zero_bytes_returns_null) {
  pool *p = must_create(small_opts(MIB, 64));
  ck_assert_ptr_null(pool_alloc(p, 0));
  ck_assert(!pool_fits(p, 0));
  ck_assert_ptr_null(pool_alloc(p, MIB + 1));
  ck_assert_ptr_null(pool_alloc(p, UINT64_MAX));
  ck_assert_uint_eq(pool_live_blocks(p), 0);
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(eight_8mib_blocks_fill_a_64mib_pool_and_the_rest_fail) {
  pool *p = must_create(small_opts(64 * MIB, 64));
  void *b[10];
  for (int i = 0; i < 10; i++) {
    b[i] = pool_alloc(p, 8 * MIB);
    if (i < 8)
      ck_assert_ptr_nonnull(b[i]);
    else
      ck_assert_ptr_null(b[i]);
  }
  ck_assert_uint_eq(pool_used(p), 64 * MIB);
  ck_assert_uint_eq(pool_free_bytes(p), 0);
  ck_assert_uint_eq(pool_live_blocks(p), 8);
  assert_consistent(p);
  for (int i = 0; i < 8; i++) pool_free(p, b[i]);
  ck_assert_uint_eq(pool_used(p), 0);
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(batch_that_does_not_fit_leaves_nothing_allocated) {
  pool *p = must_create(small_opts(64 * MIB, 64));
  uint64_t sizes[10];
  void *out[10];
  for (int i = 0; i < 10; i++) sizes[i] = 8 * MIB;
  ck_assert_int_eq(pool_alloc_batch(p, sizes, 10, out), KVA_ENOMEM);
  for (int i = 0; i < 10; i++) ck_assert_ptr_null(out[i]);
  ck_assert_uint_eq(pool_used(p), 0);
  ck_assert_uint_eq(pool_live_blocks(p), 0);
  assert_consistent(p);
  sizes[3] = 0; /* a zero size fails the whole batch too */
  ck_assert_int_eq(pool_alloc_batch(p, sizes, 5, out), KVA_EINVAL);
  ck_assert_uint_eq(pool_used(p), 0);
  sizes[3] = 8 * MIB;
  ck_assert_int_eq(pool_alloc_batch(p, sizes, 8, out), 0);
  ck_assert_uint_eq(pool_used(p), 64 * MIB);
  for (int i = 0; i < 8; i++) pool_free(p, out[i]);
  ck_assert(pool_fits(p, 64 * MIB));
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(free_coalesces_with_both_neighbours) {
  pool *p = must_create(small_opts(64 * MIB, 64));
  uint64_t q = pool_capacity(p) / 4;
  void *b[4];
  for (int i = 0; i < 4; i++) ck_assert_ptr_nonnull(b[i] = pool_alloc(p, q));
  ck_assert(!pool_fits(p, 1));
  pool_free(p, b[1]);
  pool_free(p, b[2]);
  ck_assert_uint_eq(pool_live_blocks(p), 2);
  assert_consistent(p);
  ck_assert(!pool_fits(p, 2 * q + 1));
  void *mid = pool_alloc(p, 2 * q);
  ck_assert_ptr_eq(mid, b[1]);
  pool_free(p, mid);
  pool_free(p, b[0]); /* merges right */
  pool_free(p, b[3]); /* merges left */
  ck_assert_uint_eq(pool_live_blocks(p), 0);
  assert_consistent(p);
  void *all = pool_alloc(p, pool_capacity(p));
  ck_assert_ptr_eq(all, pool_base(p));
  pool_free(p, all);
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(equal_sized_chunks_reuse_freed_blocks) {
  pool *p = must_create(small_opts(16 * MIB, 64));
  size_t n = pool_capacity(p) / (16 * 1024);
  void **b = calloc(n, sizeof(*b));
  for (size_t i = 0; i < n; i++) ck_assert_ptr_nonnull(b[i] = pool_alloc(p, 16 * 1024));
  ck_assert_ptr_null(pool_alloc(p, 16 * 1024));
  for (size_t i = 0; i < n; i += 2) pool_free(p, b[i]);
  assert_consistent(p);
  ck_assert(!pool_fits(p, 16 * 1024 + 1)); /* holes do not merge */
  for (size_t i = 0; i < n; i += 2) ck_assert_ptr_nonnull(b[i] = pool_alloc(p, 16 * 1024));
  ck_assert_uint_eq(pool_free_bytes(p), 0);
  ck_assert_uint_eq(pool_live_blocks(p), n);
  assert_consistent(p);
  for (size_t i = 0; i < n; i++) pool_free(p, b[i]);
  ck_assert(pool_fits(p, pool_capacity(p)));
  assert_consistent(p);
  free(b);
  pool_destroy(p);
}
END_TEST

START_TEST(align_2mib_is_honoured) {
  pool *p = must_create(small_opts(64 * MIB, 2 * MIB));
  uint64_t sizes[] = {1, 4096, 2 * MIB, 2 * MIB + 1, 3 * MIB, 7};
  void *b[6];
  ck_assert_uint_eq((uintptr_t)pool_base(p) % (2 * MIB), 0);
  ck_assert_uint_eq(pool_block_bytes(p, 1), 2 * MIB);
  for (int i = 0; i < 6; i++) {
    ck_assert_ptr_nonnull(b[i] = pool_alloc(p, sizes[i]));
    ck_assert_uint_eq((uintptr_t)b[i] % (2 * MIB), 0);
    memset(b[i], 0xab, sizes[i]);
  }
  ck_assert_uint_eq(pool_used(p), (1 + 1 + 1 + 2 + 2 + 1) * 2 * MIB);
  assert_consistent(p);
  for (int i = 0; i < 6; i++) pool_free(p, b[i]);
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(size_is_capped_by_mem_available) {
  pool_opts o = small_opts(UINT64_C(1) << 50, 64);
  o.reserve_bytes = 512 * MIB;
  pool *p = must_create(o);
  ck_assert_uint_gt(pool_capacity(p), 0);
  ck_assert_uint_le(pool_capacity(p), mem_available());
  ck_assert_uint_eq(pool_capacity(p) % UNIT, 0);
  void *all = pool_alloc(p, pool_capacity(p)); /* address space only: not touched */
  ck_assert_ptr_eq(all, pool_base(p));
  pool_free(p, all);
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(reserve_above_mem_available_is_a_clear_error) {
  pool_opts o = small_opts(64 * MIB, 64);
  char err[256] = "";
  o.reserve_bytes = UINT64_C(1) << 60;
  ck_assert_int_eq(create_fails(o, err, sizeof(err)), KVA_ENOMEM);
  ck_assert_ptr_nonnull(strstr(err, "l1.size_bytes"));
  ck_assert_ptr_nonnull(strstr(err, "MemAvailable"));
  ck_assert_ptr_nonnull(strstr(err, "reserve_bytes"));
}
END_TEST

START_TEST(bad_align_is_einval) {
  uint64_t bad[] = {0, 1, 32, 100, 4095, 3 * MIB, UINT64_C(1) << 63};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char err[256] = "";
    ck_assert_int_eq(create_fails(small_opts(64 * MIB, bad[i]), err, sizeof(err)), KVA_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "l1.align_bytes"));
  }
  pool *p = must_create(small_opts(64 * MIB, 64)); /* 64 itself is fine */
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(size_below_one_unit_is_einval) {
  char err[256] = "";
  ck_assert_int_eq(create_fails(small_opts(100, 64), err, sizeof(err)), KVA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "l1.size_bytes"));
}
END_TEST

START_TEST(pinned_without_cuda_device_is_enotsup) {
  pool_opts o = small_opts(64 * MIB, 64);
  char err[256] = "";
  o.pinned = 1;
  if (host_pin_available()) { /* a machine with a GPU: pinning must work */
    pool *p = must_create(o);
    ck_assert_int_eq(pool_is_pinned(p), 1);
    assert_consistent(p);
    pool_destroy(p);
    return;
  }
  ck_assert_int_eq(create_fails(o, err, sizeof(err)), KVA_ENOTSUP);
  ck_assert_ptr_nonnull(strstr(err, "CUDA"));
}
END_TEST

START_TEST(auto_pinning_without_cuda_logs_one_info_line) {
  pool_opts o = small_opts(64 * MIB, 64);
  o.pinned = -1;
  log_start(KVA_LOG_DEBUG);
  pool *p = must_create(o);
  log_stop();
  ck_assert_int_eq(pool_is_pinned(p), host_pin_available());
  if (!host_pin_available()) {
    ck_assert_int_eq(log_count[KVA_LOG_INFO], 1);
    ck_assert_ptr_nonnull(strstr(log_last, "not page-locked"));
  }
  ck_assert_int_eq(log_count[KVA_LOG_WARN] + log_count[KVA_LOG_ERROR], 0);
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(freeing_a_bogus_pointer_is_ignored_with_a_warning) {
  pool *p = must_create(small_opts(MIB, 64));
  uint8_t *a = pool_alloc(p, 3 * UNIT), *b = pool_alloc(p, UNIT);
  int local;
  log_start(KVA_LOG_WARN);
  pool_free(p, a + 64);               /* inside a block, unaligned */
  pool_free(p, a + UNIT);             /* inside a block, on a unit */
  pool_free(p, &local);               /* outside the region */
  pool_free(p, a + pool_capacity(p)); /* just past it */
  pool_free(p, b + UNIT);             /* start of the free remainder */
  pool_free(p, NULL);                 /* no-op, no warning */
  ck_assert_int_eq(log_count[KVA_LOG_WARN], 5);
  pool_free(p, b);
  pool_free(p, b); /* double free */
  ck_assert_int_eq(log_count[KVA_LOG_WARN], 6);
  pool_free(p, a);
  pool_free(p, a + 3 * UNIT); /* where b's tag was before it merged */
  log_stop();
  ck_assert_int_eq(log_count[KVA_LOG_WARN], 7);
  ck_assert_uint_eq(pool_live_blocks(p), 0);
  ck_assert(pool_fits(p, pool_capacity(p)));
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(numa_node_that_does_not_exist_is_rejected) {
  pool_opts o = small_opts(64 * MIB, 64);
  char err[256] = "";
  o.numa_node = 1000;
  ck_assert_int_eq(create_fails(o, err, sizeof(err)), KVA_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "l1.numa_node"));
  o.numa_node = 0; /* node 0 always exists */
  pool *p = must_create(o);
  ck_assert_int_le(pool_numa_node(p), 0);
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

START_TEST(hugepages_option_gives_a_working_pool) {
  pool_opts o = small_opts(64 * MIB, 2 * MIB);
  o.hugepages = 1;
  pool *p = must_create(o);
  void *b = pool_alloc(p, 4 * MIB);
  ck_assert_ptr_nonnull(b);
  memset(b, 1, 4 * MIB);
  pool_free(p, b);
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

/* Pages of [base, base + bytes) resident in memory (mincore). */
static size_t resident_pages(void *base, uint64_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (size_t)(bytes / page), in = 0;
  unsigned char *vec = malloc(n);
  ck_assert_ptr_nonnull(vec);
  ck_assert_int_eq(mincore(base, bytes, vec), 0);
  for (size_t i = 0; i < n; i++) in += vec[i] & 1;
  free(vec);
  return in;
}

START_TEST(prefault_makes_every_page_resident) {
  pool_opts o = small_opts(16 * MIB, 4096);
  o.hugepages = 0;
  pool *plain = must_create(o);
  size_t page = (size_t)sysconf(_SC_PAGESIZE), all = 16 * MIB / page;
  ck_assert_uint_lt(resident_pages(pool_base(plain), pool_capacity(plain)), all);
  pool_destroy(plain);
  o.prefault = 1;
  pool *p = must_create(o);
  ck_assert_uint_eq(resident_pages(pool_base(p), pool_capacity(p)), all);
  assert_consistent(p);
  pool_destroy(p);
}
END_TEST

/* ---- shared pools (multi-process mode) ------------------------------------ */

START_TEST(a_shared_pool_is_a_memfd_another_mapping_sees) {
  pool_opts o = small_opts(16 * MIB, 4096);
  pool *priv = must_create(o);
  ck_assert_int_eq(pool_fd(priv), -1);
  pool_destroy(priv);
  o.shared = 1;
  o.prefault = 1;
  pool *p = must_create(o);
  int fd = pool_fd(p);
  ck_assert_int_ge(fd, 0);
  uint8_t *b = pool_alloc(p, 3 * MIB);
  ck_assert_ptr_nonnull(b);
  uint64_t off = pool_offset_of(p, b);
  ck_assert_uint_lt(off, pool_capacity(p));
  ck_assert_uint_eq(pool_offset_of(p, (uint8_t *)pool_base(p) + pool_capacity(p)), UINT64_MAX);
  ck_assert_uint_eq(pool_offset_of(p, (uint8_t *)pool_base(p) - 1), UINT64_MAX);
  int keep = dup(fd);
  size_t cap = pool_capacity(p);
  uint8_t *other = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED, keep, 0);
  ck_assert_ptr_ne(other, MAP_FAILED);
  memset(b, 0x5a, 3 * MIB);
  for (uint64_t i = 0; i < 3 * MIB; i += 4096) ck_assert_uint_eq(other[off + i], 0x5a);
  other[off + 7] = 0xa5; /* and back: one region, two mappings */
  ck_assert_uint_eq(b[7], 0xa5);
  ck_assert_int_ne(ftruncate(keep, 0), 0); /* sealed: nobody shrinks it under a mapping */
  assert_consistent(p);
  pool_destroy(p);
  ck_assert_uint_eq(other[off + 7], 0xa5); /* a mapping outlives the pool */
  munmap(other, cap);
  close(keep);
}
END_TEST

/* ---- stress --------------------------------------------------------------- */

/* splitmix64: a seeded, reproducible PRNG. */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* A live block in the shadow: where, how big, and the byte it was filled with. */
typedef struct shadow_block {
  uint8_t *ptr;
  uint64_t bytes;
  uint8_t fill;
} shadow_block;

/* The shadow of the pool: live blocks plus a per-unit owner map. */
typedef struct shadow {
  pool *p;
  shadow_block live[4096];
  size_t n;
  uint8_t *owned; /* 1 per unit of the pool that some live block covers */
  uint64_t used;
} shadow;

/* Writes (or checks) the fill byte at both ends of a block: enough to catch
 * two blocks sharing memory without touching all of it. */
static void shadow_pattern(const shadow_block *b, int check) {
  uint64_t k = b->bytes < 64 ? b->bytes : 64;
  uint8_t *ends[2] = {b->ptr, b->ptr + b->bytes - k};
  for (int e = 0; e < 2; e++)
    for (uint64_t i = 0; i < k; i++) {
      if (check)
        EXPECT(ends[e][i] == b->fill, "block %p: byte %llu overwritten", (void *)b->ptr,
               (unsigned long long)i);
      else
        ends[e][i] = b->fill;
    }
}

/* Marks (or clears) the units a block covers, asserting none was taken. */
static void shadow_own(shadow *s, const shadow_block *b, uint8_t v) {
  uint64_t first = (uint64_t)(b->ptr - (uint8_t *)pool_base(s->p)) / UNIT;
  uint64_t n = pool_block_bytes(s->p, b->bytes) / UNIT;
  for (uint64_t u = first; u < first + n; u++) {
    EXPECT(s->owned[u] != v, "unit %llu overlaps", (unsigned long long)u);
    s->owned[u] = v;
  }
}

/* The longest run of free units in the owner map. */
static uint64_t shadow_longest_free(const shadow *s) {
  uint64_t best = 0, run = 0, units = pool_capacity(s->p) / UNIT;
  for (uint64_t u = 0; u < units; u++) {
    run = s->owned[u] ? 0 : run + 1;
    if (run > best) best = run;
  }
  return best;
}

/* One allocation: checks alignment and bounds, or on failure (now and then)
 * that no free run in the shadow could have held it. */
static void shadow_alloc(shadow *s, uint64_t bytes, uint64_t *fails) {
  uint8_t *ptr = pool_alloc(s->p, bytes), *base = pool_base(s->p);
  if (!ptr) {
    EXPECT(!pool_fits(s->p, bytes), "alloc failed but pool_fits says yes");
    if (++*fails % 16 == 0)
      EXPECT(shadow_longest_free(s) * UNIT < pool_block_bytes(s->p, bytes),
             "alloc of %llu failed with a free run large enough", (unsigned long long)bytes);
    return;
  }
  EXPECT((uintptr_t)ptr % UNIT == 0, "block %p not aligned", (void *)ptr);
  EXPECT(ptr >= base && ptr + bytes <= base + pool_capacity(s->p), "block %p outside", (void *)ptr);
  shadow_block *b = &s->live[s->n++];
  *b = (shadow_block){ptr, bytes, (uint8_t)(s->n * 131 + bytes)};
  shadow_own(s, b, 1);
  shadow_pattern(b, 0);
  s->used += pool_block_bytes(s->p, bytes);
}

/* Frees live block k after checking its fill bytes survived. */
static void shadow_free(shadow *s, size_t k) {
  shadow_block *b = &s->live[k];
  shadow_pattern(b, 1);
  shadow_own(s, b, 0);
  s->used -= pool_block_bytes(s->p, b->bytes);
  pool_free(s->p, b->ptr);
  *b = s->live[--s->n];
}

/* Compares the pool's counters with the shadow and runs memcheck. */
static void shadow_verify(const shadow *s) {
  EXPECT(pool_used(s->p) == s->used, "used %llu, shadow %llu", (unsigned long long)pool_used(s->p),
         (unsigned long long)s->used);
  EXPECT(pool_live_blocks(s->p) == s->n, "live %llu, shadow %zu",
         (unsigned long long)pool_live_blocks(s->p), s->n);
  assert_consistent(s->p);
}

START_TEST(mixed_sizes_never_overlap_and_keep_the_pool_consistent) {
  shadow *s = calloc(1, sizeof(*s));
  uint64_t seed = 0x5eed1234, fails = 0;
  s->p = must_create(small_opts(64 * MIB, 64));
  s->owned = calloc(pool_capacity(s->p) / UNIT, 1);
  for (int op = 0; op < 100000; op++) {
    uint64_t r = rng_next(&seed);
    if (s->n > 0 && (s->n == 4096 || r % 2)) {
      shadow_free(s, (size_t)((r >> 8) % s->n));
    } else {
      uint64_t bits = (r >> 8) % 23; /* log-uniform sizes: 1 B .. 4 MiB */
      shadow_alloc(s, 1 + (r >> 16) % (UINT64_C(1) << bits), &fails);
    }
    if (op % 1000 == 0) shadow_verify(s);
  }
  ck_assert_uint_gt(fails, 0);
  while (s->n > 0) shadow_free(s, s->n - 1);
  shadow_verify(s);
  ck_assert(pool_fits(s->p, pool_capacity(s->p)));
  pool_destroy(s->p);
  free(s->owned);
  free(s);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l1_pool");
  TCase *t = tcase_create("pool");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, create_gives_a_plain_pool_of_the_asked_size);
  tcase_add_test(t, size_is_rounded_down_to_whole_units);
  tcase_add_test(t, alloc_of_zero_bytes_returns_null);
  tcase_add_test(t, eight_8mib_blocks_fill_a_64mib_pool_and_the_rest_fail);
  tcase_add_test(t, batch_that_does_not_fit_leaves_nothing_allocated);
  tcase_add_test(t, free_coalesces_with_both_neighbours);
  tcase_add_test(t, equal_sized_chunks_reuse_freed_blocks);
  tcase_add_test(t, align_2mib_is_honoured);
  tcase_add_test(t, size_is_capped_by_mem_available);
  tcase_add_test(t, reserve_above_mem_available_is_a_clear_error);
  tcase_add_test(t, bad_align_is_einval);
  tcase_add_test(t, size_below_one_unit_is_einval);
  tcase_add_test(t, pinned_without_cuda_device_is_enotsup);
  tcase_add_test(t, auto_pinning_without_cuda_logs_one_info_line);
  tcase_add_test(t, freeing_a_bogus_pointer_is_ignored_with_a_warning);
  tcase_add_test(t, numa_node_that_does_not_exist_is_rejected);
  tcase_add_test(t, hugepages_option_gives_a_working_pool);
  tcase_add_test(t, prefault_makes_every_page_resident);
  tcase_add_test(t, a_shared_pool_is_a_memfd_another_mapping_sees);
  tcase_add_test(t, mixed_sizes_never_overlap_and_keep_the_pool_consistent);
  suite_add_tcase(s, t);
  return s;
}
