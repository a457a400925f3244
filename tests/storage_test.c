/*
 * storage_test.c — the storage facade: write, prefetch, read, delete, the
 * LMCache storage-manager scenarios (L1 parts), bad input, the prefetch
 * handle API and kva_chunk_keys.
 */
#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "kvact.h"
#include "tests/support/fixture.h"

#define MiB (1024ull * 1024ull)
#define SENTINEL 0x5a5a

/* ---- helpers ------------------------------------------------------------ */

static kva_runtime *start(void) {
  return fixture_storage(2, 64 * MiB, NULL);
}

/* keys[i] = fixture_key(ids[i]) */
static void keys_of(kva_key *k, const uint64_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(ids[i]);
}

static void key_range(kva_key *k, uint64_t first, size_t n) {
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(first + i);
}

static kva_storage_stats stats_of(kva_storage *s) {
  kva_storage_stats st;
  memset(&st, 0, sizeof(st));
  ck_assert_int_eq(kva_storage_get_stats(s, &st), KVA_OK);
  return st;
}

/* Every field of the two snapshots agrees: the calls in between changed
 * neither the objects, nor their locks, nor a counter. */
static void assert_same_stats(const kva_storage_stats *a, const kva_storage_stats *b) {
  ck_assert_uint_eq(a->l1_capacity_bytes, b->l1_capacity_bytes);
  ck_assert_uint_eq(a->l1_used_bytes, b->l1_used_bytes);
  ck_assert_uint_eq(a->l1_objects, b->l1_objects);
  ck_assert_uint_eq(a->l1_write_locked, b->l1_write_locked);
  ck_assert_uint_eq(a->l1_read_locked, b->l1_read_locked);
  ck_assert_uint_eq(a->l1_temporary, b->l1_temporary);
  ck_assert_uint_eq(a->reserved, b->reserved);
  ck_assert_uint_eq(a->finished, b->finished);
  ck_assert_uint_eq(a->hits, b->hits);
  ck_assert_uint_eq(a->misses, b->misses);
  ck_assert_uint_eq(a->evicted, b->evicted);
  ck_assert_uint_eq(a->evicted_on_demand, b->evicted_on_demand);
  ck_assert_uint_eq(a->out_of_memory, b->out_of_memory);
}

static void fill_status(int *st, size_t n) {
  for (size_t i = 0; i < n; i++) st[i] = SENTINEL;
}

static void assert_status_untouched(const int *st, size_t n) {
  for (size_t i = 0; i < n; i++) ck_assert_int_eq(st[i], SENTINEL);
}

/* submit + wait with the objects' layout; returns the hit count. */
static size_t prefetch_l(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l,
                         uint32_t extra) {
  kva_prefetch *h = NULL;
  ck_assert_int_eq(kva_submit_prefetch(s, k, n, l, extra, &h), KVA_OK);
  size_t hits = 12345;
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_le(hits, n);
  return hits;
}

/* The same for objects of the basic layout. */
static size_t prefetch(kva_storage *s, const kva_key *k, size_t n, uint32_t extra) {
  kva_layout l = fixture_layout_basic();
  return prefetch_l(s, k, n, &l, extra);
}

/* LMCache's check "update-mode reserve_write returns k entries": reserves
 * with KVA_WRITE_UPDATE, finishes what it got (releasing the write locks it
 * took), returns how many keys it got. */
static int update_count(kva_storage *s, const kva_key *k, size_t n) {
  kva_layout l = fixture_layout_basic();
  kva_buf b[16];
  int st[16];
  kva_key got[16];
  ck_assert_uint_le(n, 16);
  int rc = kva_reserve_write(s, k, n, &l, KVA_WRITE_UPDATE, b, st);
  ck_assert_int_ge(rc, 0);
  size_t ngot = 0;
  for (size_t i = 0; i < n; i++) {
    if (st[i] != KVA_OK) {
      ck_assert_int_eq(st[i], KVA_KEY_NOT_WRITABLE);
      ck_assert_ptr_null(b[i].ptr);
      continue;
    }
    ck_assert_ptr_nonnull(b[i].ptr);
    got[ngot++] = k[i];
  }
  ck_assert_int_eq(rc, (int)ngot);
  if (ngot) ck_assert_int_eq(kva_finish_write(s, got, ngot, st), (int)ngot);
  return rc;
}

/* ---- LMCache test_distributed_storage_manager.py, L1 scenarios --------- */

/* test_basic_reserve_write */
START_TEST(reserve_write_one_key_gives_a_buffer) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k = fixture_key(12345);
  kva_buf b = {0};
  int st = SENTINEL;
  ck_assert_int_eq(kva_reserve_write(s, &k, 1, &l, KVA_WRITE_NEW, &b, &st), 1);
  ck_assert_int_eq(st, KVA_OK);
  ck_assert_ptr_nonnull(b.ptr);
  ck_assert_uint_eq(b.len, 204800);
  memset(b.ptr, 7, b.len);
  ck_assert_int_eq(kva_finish_write(s, &k, 1, &st), 1);
  ck_assert_int_eq(st, KVA_OK);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.l1_objects, 1);
  ck_assert_uint_eq(x.reserved, 1);
  ck_assert_uint_eq(x.finished, 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* test_reserve_write_multiple_keys */
START_TEST(reserve_write_many_keys_gives_a_buffer_each) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  kva_buf b[5];
  int st[5];
  key_range(k, 0, 5);
  ck_assert_int_eq(kva_reserve_write(s, k, 5, &l, KVA_WRITE_NEW, b, st), 5);
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(st[i], KVA_OK);
    ck_assert_ptr_nonnull(b[i].ptr);
    ck_assert_uint_eq(b[i].len, 204800);
    for (int j = 0; j < i; j++) /* distinct, non-overlapping blocks */
      ck_assert((char *)b[j].ptr + b[j].len <= (char *)b[i].ptr ||
                (char *)b[i].ptr + b[i].len <= (char *)b[j].ptr);
  }
  ck_assert_int_eq(kva_finish_write(s, k, 5, st), 5);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* Reserves n large (8 MiB) keys at once in a 64 MiB pool holding nothing:
 * all or nothing, and with nothing resident demand eviction cannot help. */
static void reserve_large_batch_is_refused(size_t n) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_large();
  kva_key *k = calloc(n, sizeof(*k));
  kva_buf *b = calloc(n, sizeof(*b));
  int *st = calloc(n, sizeof(*st));
  ck_assert(k && b && st);
  key_range(k, 0, n);
  ck_assert_int_eq(kva_reserve_write(s, k, n, &l, KVA_WRITE_NEW, b, st), 0);
  for (size_t i = 0; i < n; i++) {
    ck_assert_int_eq(st[i], KVA_OUT_OF_MEMORY);
    ck_assert_ptr_null(b[i].ptr);
    ck_assert_uint_eq(b[i].len, 0);
  }
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.l1_objects, 0);
  ck_assert_uint_eq(x.l1_used_bytes, 0);
  ck_assert_uint_eq(x.out_of_memory, n);
  ck_assert_uint_eq(x.evicted_on_demand, 0);
  fixture_memcheck_clean(s);
  /* nothing leaked: as many as the pool holds still fit afterwards */
  size_t fit = x.l1_capacity_bytes / (8 * MiB);
  ck_assert_uint_ge(fit, 1);
  ck_assert_uint_lt(fit, n);
  ck_assert_int_eq(kva_reserve_write(s, k, fit, &l, KVA_WRITE_NEW, b, st), (int)fit);
  ck_assert_int_eq(kva_finish_write(s, k, fit, st), (int)fit);
  fixture_memcheck_clean(s);
  free(k);
  free(b);
  free(st);
  kva_runtime_shutdown(rt);
}

/* test_reserve_write_oom (kvact is all-or-nothing: no entry at all) */
START_TEST(reserve_write_of_twenty_large_keys_is_all_out_of_memory) {
  reserve_large_batch_is_refused(20);
}
END_TEST

START_TEST(reserve_write_of_ten_large_keys_is_all_out_of_memory) {
  reserve_large_batch_is_refused(10);
}
END_TEST

/* test_basic_prefetch */
START_TEST(prefetch_counts_every_written_key) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  key_range(k, 0, 5);
  fixture_write(s, 0, 5, &l);
  ck_assert_uint_eq(prefetch(s, k, 5, 0), 5);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.l1_read_locked, 5);
  ck_assert_uint_eq(x.hits, 5);
  ck_assert_uint_eq(x.misses, 0);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 5, 0), 5);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* test_prefetch_partial_prefix_hits */
START_TEST(prefetch_stops_at_first_gap_and_leaves_the_rest_unlocked) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  key_range(k, 0, 5);
  fixture_write(s, 0, 2, &l);
  fixture_write(s, 3, 2, &l);
  ck_assert_uint_eq(prefetch(s, k, 5, 0), 2);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.l1_read_locked, 2);
  ck_assert_uint_eq(x.hits, 2);
  ck_assert_uint_eq(x.misses, 3);
  ck_assert_int_eq(update_count(s, k + 3, 2), 2); /* keys 3, 4 are free */
  ck_assert_int_eq(update_count(s, k, 2), 0);     /* keys 0, 1 are not */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* test_read_prefetched_basic */
START_TEST(read_prefetched_returns_buffers_and_finish_releases_them) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  kva_buf b[3], rb[3];
  int st[3];
  key_range(k, 0, 3);
  ck_assert_int_eq(kva_reserve_write(s, k, 3, &l, KVA_WRITE_NEW, b, st), 3);
  for (int i = 0; i < 3; i++) memset(b[i].ptr, 'x' + i, b[i].len);
  ck_assert_int_eq(kva_finish_write(s, k, 3, st), 3);
  ck_assert_uint_eq(prefetch(s, k, 3, 0), 3);
  ck_assert_int_eq(kva_read_prefetched(s, k, 3, rb), KVA_OK);
  for (int i = 0; i < 3; i++) {
    ck_assert_ptr_eq(rb[i].ptr, b[i].ptr);
    ck_assert_uint_eq(rb[i].len, 204800);
    ck_assert_int_eq(((char *)rb[i].ptr)[rb[i].len - 1], 'x' + i);
  }
  /* reading does not release: the keys stay locked until finish */
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 3);
  ck_assert_int_eq(update_count(s, k, 3), 0);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 3, 0), 3);
  ck_assert_int_eq(update_count(s, k, 3), 3);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* test_read_prefetched_not_found */
START_TEST(read_prefetched_of_an_unlocked_key_fails_and_releases_the_others) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  kva_buf rb[5];
  key_range(k, 0, 5);
  fixture_write(s, 0, 5, &l);
  ck_assert_uint_eq(prefetch(s, k + 1, 4, 0), 4);
  memset(rb, 0x11, sizeof(rb));
  ck_assert_int_eq(kva_read_prefetched(s, k, 5, rb), KVA_KEY_NOT_READABLE);
  for (int i = 0; i < 5; i++) ck_assert_ptr_null(rb[i].ptr);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 0);
  ck_assert_int_eq(update_count(s, k + 1, 4), 4);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* test_prefetch_with_extra_count */
START_TEST(prefetch_extra_readers_released_with_the_same_extra) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  key_range(k, 0, 3);
  fixture_write(s, 0, 3, &l);
  ck_assert_uint_eq(prefetch(s, k, 3, 2), 3);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 3, 2), 3);
  ck_assert_int_eq(update_count(s, k, 3), 3);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* test_finish_read_prefetched_partial_extra_count */
START_TEST(finish_read_with_smaller_extra_leaves_keys_locked) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[2];
  key_range(k, 0, 2);
  fixture_write(s, 0, 2, &l);
  ck_assert_uint_eq(prefetch(s, k, 2, 3), 2); /* 4 locks each */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 1), 2);
  ck_assert_int_eq(update_count(s, k, 2), 0);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 2);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 1), 2);
  ck_assert_int_eq(update_count(s, k, 2), 2);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* test_prefetch_skipped_keys_released_with_extra */
START_TEST(prefetch_with_extra_never_locks_keys_after_the_gap) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  key_range(k, 0, 5);
  fixture_write(s, 0, 2, &l);
  fixture_write(s, 3, 2, &l);
  ck_assert_uint_eq(prefetch(s, k, 5, 1), 2);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 2);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 1), 2);
  ck_assert_int_eq(update_count(s, k + 3, 2), 2);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* test_extra_count_default_is_zero */
START_TEST(extra_readers_zero_needs_one_release) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  key_range(k, 0, 3);
  fixture_write(s, 0, 3, &l);
  ck_assert_uint_eq(prefetch(s, k, 3, 0), 3);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 3, 0), 3);
  ck_assert_int_eq(update_count(s, k, 3), 3);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* NEW refuses existing keys, UPDATE missing ones, ALL takes both; an
 * existing object is reused in place and write-locked again when unlocked
 * and of the same layout. Every refusal is KVA_KEY_NOT_WRITABLE. */
START_TEST(write_modes_follow_the_contract) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[2];
  kva_buf b[2], first;
  int st[2];
  k[0] = fixture_key(0);
  ck_assert_int_eq(kva_reserve_write(s, k, 1, &l, KVA_WRITE_NEW, &first, st), 1);
  ck_assert_int_eq(kva_finish_write(s, k, 1, st), 1);
  /* NEW: existing refused, new accepted */
  k[1] = fixture_key(1);
  ck_assert_int_eq(kva_reserve_write(s, k, 2, &l, KVA_WRITE_NEW, b, st), 1);
  ck_assert_int_eq(st[0], KVA_KEY_NOT_WRITABLE);
  ck_assert_int_eq(st[1], KVA_OK);
  ck_assert_ptr_null(b[0].ptr);
  ck_assert_int_eq(kva_finish_write(s, k + 1, 1, st), 1);
  /* ALL: existing reused in place, new created */
  k[1] = fixture_key(2);
  ck_assert_int_eq(kva_reserve_write(s, k, 2, &l, KVA_WRITE_ALL, b, st), 2);
  ck_assert_ptr_eq(b[0].ptr, first.ptr);
  ck_assert_ptr_nonnull(b[1].ptr);
  ck_assert_uint_eq(stats_of(s).l1_write_locked, 2);
  /* a write-locked object cannot be reserved, read, or finished twice */
  ck_assert_int_eq(kva_reserve_write(s, k, 1, &l, KVA_WRITE_ALL, b, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_NOT_WRITABLE);
  ck_assert_uint_eq(prefetch(s, k, 2, 0), 0);
  ck_assert_int_eq(kva_finish_write(s, k, 2, st), 2);
  ck_assert_int_eq(kva_finish_write(s, k, 2, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  /* a read-locked object cannot be reserved either */
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1);
  ck_assert_int_eq(kva_reserve_write(s, k, 1, &l, KVA_WRITE_UPDATE, b, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_NOT_WRITABLE);
  ck_assert_int_eq(kva_finish_write(s, k, 1, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 1, 0), 1);
  /* finishing a key nobody wrote */
  k[1] = fixture_key(9);
  ck_assert_int_eq(kva_finish_write(s, k + 1, 1, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_NOT_EXIST);
  /* UPDATE: existing reused in place, missing refused */
  ck_assert_int_eq(kva_reserve_write(s, k, 2, &l, KVA_WRITE_UPDATE, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_NOT_WRITABLE);
  ck_assert_ptr_eq(b[0].ptr, first.ptr);
  ck_assert_ptr_null(b[1].ptr);
  ck_assert_int_eq(kva_finish_write(s, k, 1, st), 1);
  /* an existing object is reused only with the same layout */
  kva_layout other = fixture_layout_bytes(4096);
  for (kva_write_mode m = KVA_WRITE_UPDATE; m <= KVA_WRITE_ALL; m++) {
    ck_assert_int_eq(kva_reserve_write(s, k, 1, &other, m, b, st), 0);
    ck_assert_int_eq(st[0], KVA_KEY_NOT_WRITABLE);
  }
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.l1_objects, 3);
  ck_assert_uint_eq(x.l1_write_locked, 0);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* delete refuses locked objects unless forced; clear(0) keeps locked ones,
 * clear(1) removes everything. */
START_TEST(delete_and_clear_respect_locks_unless_forced) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[4];
  kva_buf b;
  int st[4];
  key_range(k, 0, 4);
  fixture_write(s, 0, 3, &l);
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1); /* 0 read-locked */
  ck_assert_int_eq(kva_reserve_write(s, k + 3, 1, &l, KVA_WRITE_NEW, &b, st), 1);
  ck_assert_int_eq(kva_delete(s, k, 4, 0, st), 2);
  ck_assert_int_eq(st[0], KVA_KEY_LOCKED);
  ck_assert_int_eq(st[1], KVA_OK);
  ck_assert_int_eq(st[2], KVA_OK);
  ck_assert_int_eq(st[3], KVA_KEY_LOCKED);
  ck_assert_int_eq(kva_delete(s, k + 1, 1, 0, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_NOT_EXIST);
  fixture_write(s, 1, 2, &l);
  ck_assert_int_eq(kva_clear(s, 0), 2); /* keys 1, 2 */
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.l1_objects, 2);
  ck_assert_uint_eq(x.l1_read_locked, 1);
  ck_assert_uint_eq(x.l1_write_locked, 1);
  ck_assert_int_eq(kva_delete(s, k, 1, 1, st), 1); /* forced */
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 1, 0), 0);
  ck_assert_int_eq(kva_clear(s, 1), 1); /* the write-locked key 3 */
  x = stats_of(s);
  ck_assert_uint_eq(x.l1_objects, 0);
  ck_assert_uint_eq(x.l1_used_bytes, 0);
  fixture_memcheck_clean(s);
  ck_assert_int_eq(kva_finish_write(s, k + 3, 1, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_NOT_EXIST);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(write_then_prefetch_reads_the_same_bytes) {
  kva_runtime *rt = fixture_storage(2, 64 * MiB, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  kva_buf b[5];
  int st[5];
  for (int i = 0; i < 5; i++) k[i] = fixture_key(i);
  ck_assert_int_eq(kva_reserve_write(s, k, 5, &l, KVA_WRITE_NEW, b, st), 5);
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(b[i].len, 204800);
    memset(b[i].ptr, 'a' + i, b[i].len);
  }
  ck_assert_int_eq(kva_finish_write(s, k, 5, st), 5);
  kva_prefetch *h;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 5, &l, 0, &h), KVA_OK);
  size_t hits = 99;
  ck_assert_int_eq(kva_wait_prefetch(s, h, 1000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 5);
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EINVAL);
  kva_buf rb[5];
  ck_assert_int_eq(kva_read_prefetched(s, k, 5, rb), KVA_OK);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(((char *)rb[i].ptr)[100], 'a' + i);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 5, 0), 5);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- bad input ---------------------------------------------------------- */

/* A store with some state to lose: keys 0..3 written, 0 and 1 read-locked,
 * key 4 write-locked (reserved, not finished). */
static kva_runtime *busy_store(kva_storage **out) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  kva_buf b;
  int st;
  key_range(k, 0, 5);
  fixture_write(s, 0, 4, &l);
  ck_assert_uint_eq(prefetch(s, k, 2, 0), 2);
  ck_assert_int_eq(kva_reserve_write(s, &k[4], 1, &l, KVA_WRITE_NEW, &b, &st), 1);
  *out = s;
  return rt;
}

static void busy_store_release(kva_storage *s) {
  kva_key k[5];
  int st;
  key_range(k, 0, 5);
  ck_assert_int_eq(kva_finish_write(s, &k[4], 1, &st), 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  fixture_memcheck_clean(s);
}

START_TEST(null_pointers_are_refused_and_change_nothing) {
  kva_storage *s;
  kva_runtime *rt = busy_store(&s);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  kva_buf b[5];
  int st[5];
  key_range(k, 0, 5);
  kva_storage_stats before = stats_of(s);
  fill_status(st, 5);
  memset(b, 0x11, sizeof(b));
  kva_write_mode mode = KVA_WRITE_ALL;
  ck_assert_int_eq(kva_reserve_write(NULL, k, 5, &l, mode, b, st), KVA_EINVAL);
  ck_assert_int_eq(kva_reserve_write(s, NULL, 5, &l, mode, b, st), KVA_EINVAL);
  ck_assert_int_eq(kva_reserve_write(s, k, 5, NULL, mode, b, st), KVA_EINVAL);
  ck_assert_int_eq(kva_reserve_write(s, k, 5, &l, mode, NULL, st), KVA_EINVAL);
  ck_assert_int_eq(kva_reserve_write(s, k, 5, &l, mode, b, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_write(NULL, k, 5, st), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_write(s, NULL, 5, st), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_write(s, k, 5, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_delete(NULL, k, 5, 1, st), KVA_EINVAL);
  ck_assert_int_eq(kva_delete(s, NULL, 5, 1, st), KVA_EINVAL);
  ck_assert_int_eq(kva_delete(s, k, 5, 1, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_touch(NULL, k, 5), KVA_EINVAL);
  ck_assert_int_eq(kva_touch(s, NULL, 5), KVA_EINVAL);
  ck_assert_int_eq(kva_read_prefetched(NULL, k, 2, b), KVA_EINVAL);
  ck_assert_int_eq(kva_read_prefetched(s, NULL, 2, b), KVA_EINVAL);
  ck_assert_int_eq(kva_read_prefetched(s, k, 2, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_read_prefetched(NULL, k, 2, 0), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_read_prefetched(s, NULL, 2, 0), KVA_EINVAL);
  kva_prefetch *h = (kva_prefetch *)&h;
  ck_assert_int_eq(kva_submit_prefetch(NULL, k, 4, &l, 0, &h), KVA_EINVAL);
  ck_assert_int_eq(kva_submit_prefetch(s, NULL, 4, &l, 0, &h), KVA_EINVAL);
  ck_assert_int_eq(kva_submit_prefetch(s, k, 4, &l, 0, NULL), KVA_EINVAL);
  ck_assert_ptr_eq(h, (kva_prefetch *)&h);
  size_t hits = 77;
  ck_assert_int_eq(kva_query_prefetch(s, NULL, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_wait_prefetch(s, NULL, 10, &hits), KVA_EINVAL);
  ck_assert_uint_eq(hits, 77);
  ck_assert_int_eq(kva_prefetch_eventfd(NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_clear(NULL, 1), KVA_EINVAL);
  char report[64];
  ck_assert_int_eq(kva_memcheck(NULL, report, sizeof(report)), KVA_EINVAL);
  ck_assert_int_eq(kva_memcheck(s, NULL, sizeof(report)), KVA_EINVAL);
  kva_storage_stats x;
  ck_assert_int_eq(kva_storage_get_stats(NULL, &x), KVA_EINVAL);
  ck_assert_int_eq(kva_storage_get_stats(s, NULL), KVA_EINVAL);
  assert_status_untouched(st, 5);
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  busy_store_release(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(empty_batch_is_refused) {
  kva_storage *s;
  kva_runtime *rt = busy_store(&s);
  kva_layout l = fixture_layout_basic();
  kva_key k[1] = {fixture_key(0)};
  kva_buf b[1];
  int st[1];
  kva_storage_stats before = stats_of(s);
  fill_status(st, 1);
  kva_prefetch *h = NULL;
  ck_assert_int_eq(kva_reserve_write(s, k, 0, &l, KVA_WRITE_ALL, b, st), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_write(s, k, 0, st), KVA_EINVAL);
  ck_assert_int_eq(kva_delete(s, k, 0, 1, st), KVA_EINVAL);
  ck_assert_int_eq(kva_touch(s, k, 0), KVA_EINVAL);
  ck_assert_int_eq(kva_submit_prefetch(s, k, 0, &l, 0, &h), KVA_EINVAL);
  ck_assert_ptr_null(h);
  ck_assert_int_eq(kva_read_prefetched(s, k, 0, b), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 0, 0), KVA_EINVAL);
  assert_status_untouched(st, 1);
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  busy_store_release(s);
  kva_runtime_shutdown(rt);
}
END_TEST

enum { BAD_AT, BAD_NO_NUL, BAD_EMPTY, BAD_HASH0, BAD_HASH33, NBAD };

static kva_key bad_key(int which) {
  kva_key k = fixture_key(2);
  switch (which) {
  case BAD_AT:
    strcpy(k.model, "test@model");
    break;
  case BAD_NO_NUL:
    memset(k.model, 'm', sizeof(k.model));
    break;
  case BAD_EMPTY:
    k.model[0] = '\0';
    break;
  case BAD_HASH0:
    k.hash_len = 0;
    break;
  case BAD_HASH33:
    k.hash_len = 33;
    break;
  }
  return k;
}

/* One invalid key in the middle of a batch of valid ones refuses the whole
 * call: force-delete would otherwise have removed the rest. */
START_TEST(invalid_key_anywhere_refuses_the_whole_batch) {
  kva_storage *s;
  kva_runtime *rt = busy_store(&s);
  kva_layout l = fixture_layout_basic();
  kva_storage_stats before = stats_of(s);
  for (int which = 0; which < NBAD; which++) {
    kva_key k[5];
    kva_buf b[5];
    int st[5];
    key_range(k, 0, 5);
    k[2] = bad_key(which);
    fill_status(st, 5);
    kva_prefetch *h = NULL;
    ck_assert_int_eq(kva_reserve_write(s, k, 5, &l, KVA_WRITE_ALL, b, st), KVA_EINVAL);
    ck_assert_int_eq(kva_finish_write(s, k, 5, st), KVA_EINVAL);
    ck_assert_int_eq(kva_delete(s, k, 5, 1, st), KVA_EINVAL);
    ck_assert_int_eq(kva_touch(s, k, 5), KVA_EINVAL);
    ck_assert_int_eq(kva_submit_prefetch(s, k, 5, &l, 0, &h), KVA_EINVAL);
    ck_assert_ptr_null(h);
    ck_assert_int_eq(kva_read_prefetched(s, k, 5, b), KVA_EINVAL);
    ck_assert_int_eq(kva_finish_read_prefetched(s, k, 5, 0), KVA_EINVAL);
    assert_status_untouched(st, 5);
  }
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  busy_store_release(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* A valid key with a 63-byte model and a 32-byte hash is accepted. */
START_TEST(longest_model_and_hash_are_accepted) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(4096);
  kva_key k = fixture_key(0);
  memset(k.model, 'm', 63);
  k.model[63] = '\0';
  k.hash_len = 32;
  memset(k.hash, 0xab, 32);
  kva_buf b;
  int st;
  ck_assert_int_eq(kva_reserve_write(s, &k, 1, &l, KVA_WRITE_NEW, &b, &st), 1);
  ck_assert_int_eq(kva_finish_write(s, &k, 1, &st), 1);
  ck_assert_uint_eq(prefetch_l(s, &k, 1, &l, 0), 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

enum {
  LAY_NT0,
  LAY_NT5,
  LAY_NDIM7,
  LAY_SHAPE0,
  LAY_DTYPE,
  LAY_OVERFLOW,
  LAY_SECOND_BAD,
  LAY_SUM_OVERFLOW,
  NLAY
};

static kva_layout bad_layout(int which) {
  kva_layout l = fixture_layout_basic();
  switch (which) {
  case LAY_NT0:
    l.ntensors = 0;
    break;
  case LAY_NT5:
    l.ntensors = 5;
    break;
  case LAY_NDIM7:
    l.tensor[0].ndim = 7;
    break;
  case LAY_SHAPE0:
    l.tensor[0].shape[1] = 0;
    break;
  case LAY_DTYPE:
    l.tensor[0].dtype = (kva_dtype)(KVA_DT_FP8_E5M2 + 1);
    break;
  case LAY_OVERFLOW:
    l.tensor[0].ndim = 2;
    l.tensor[0].shape[0] = 1ull << 40;
    l.tensor[0].shape[1] = 1ull << 40;
    l.tensor[0].dtype = KVA_DT_U8;
    break;
  case LAY_SECOND_BAD: /* first tensor fine, second with an unknown dtype */
    l.ntensors = 2;
    l.tensor[1] = l.tensor[0];
    l.tensor[1].dtype = (kva_dtype)99;
    break;
  case LAY_SUM_OVERFLOW: /* each tensor 2^62 bytes: valid alone, not summed */
    l.ntensors = 4;
    for (int t = 0; t < 4; t++) {
      l.tensor[t].ndim = 2;
      l.tensor[t].shape[0] = 1ull << 31;
      l.tensor[t].shape[1] = 1ull << 31;
      l.tensor[t].dtype = KVA_DT_U8;
    }
    break;
  }
  return l;
}

START_TEST(invalid_layouts_are_refused) {
  kva_storage *s;
  kva_runtime *rt = busy_store(&s);
  kva_storage_stats before = stats_of(s);
  ck_assert_uint_eq(kva_layout_bytes(NULL), 0);
  for (int which = 0; which < NLAY; which++) {
    kva_layout l = bad_layout(which);
    ck_assert_msg(kva_layout_bytes(&l) == 0, "layout %d has %zu bytes", which,
                  kva_layout_bytes(&l));
    kva_key k[5];
    kva_buf b[5];
    int st[5];
    key_range(k, 5, 5); /* new keys: a valid layout would create them */
    fill_status(st, 5);
    for (kva_write_mode m = KVA_WRITE_NEW; m <= KVA_WRITE_ALL; m++)
      ck_assert_int_eq(kva_reserve_write(s, k, 5, &l, m, b, st), KVA_EINVAL);
    kva_prefetch *h = NULL;
    ck_assert_int_eq(kva_submit_prefetch(s, k, 5, &l, 0, &h), KVA_EINVAL);
    ck_assert_ptr_null(h);
    assert_status_untouched(st, 5);
  }
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  busy_store_release(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* Sizes of valid layouts: a scalar is one element, each tensor starts on a
 * 64-byte boundary. */
START_TEST(layout_bytes_counts_tensors_on_64_byte_boundaries) {
  kva_layout l;
  memset(&l, 0, sizeof(l));
  l.ntensors = 1;
  l.tensor[0].ndim = 0;
  l.tensor[0].dtype = KVA_DT_F32;
  ck_assert_uint_eq(kva_layout_bytes(&l), 4);
  l.ntensors = 2;
  l.tensor[0].ndim = 1;
  l.tensor[0].shape[0] = 10;
  l.tensor[0].dtype = KVA_DT_U8;
  l.tensor[1].ndim = 1;
  l.tensor[1].shape[0] = 3;
  l.tensor[1].dtype = KVA_DT_F32;
  ck_assert_uint_eq(kva_layout_bytes(&l), 64 + 12);
  l.ntensors = 1;
  l.tensor[0].ndim = 6;
  for (int d = 0; d < 6; d++) l.tensor[0].shape[d] = 2;
  l.tensor[0].dtype = KVA_DT_BF16;
  ck_assert_uint_eq(kva_layout_bytes(&l), 128);
  kva_layout basic = fixture_layout_basic(), large = fixture_layout_large();
  ck_assert_uint_eq(kva_layout_bytes(&basic), 204800);
  ck_assert_uint_eq(kva_layout_bytes(&large), 8 * MiB);
  /* and the store hands out buffers of exactly that length */
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  memset(&l, 0, sizeof(l));
  l.ntensors = 2;
  l.tensor[0].ndim = 1;
  l.tensor[0].shape[0] = 10;
  l.tensor[0].dtype = KVA_DT_U8;
  l.tensor[1].ndim = 0;
  l.tensor[1].dtype = KVA_DT_F16;
  kva_key k = fixture_key(1);
  kva_buf b;
  int st;
  ck_assert_int_eq(kva_reserve_write(s, &k, 1, &l, KVA_WRITE_NEW, &b, &st), 1);
  ck_assert_uint_eq(b.len, 66);
  ck_assert_int_eq(kva_finish_write(s, &k, 1, &st), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(invalid_write_mode_is_refused) {
  kva_storage *s;
  kva_runtime *rt = busy_store(&s);
  kva_layout l = fixture_layout_basic();
  kva_key k[6];
  kva_buf b[6];
  int st[6];
  key_range(k, 0, 6);
  fill_status(st, 6);
  kva_storage_stats before = stats_of(s);
  ck_assert_int_eq(kva_reserve_write(s, k, 6, &l, (kva_write_mode)3, b, st), KVA_EINVAL);
  ck_assert_int_eq(kva_reserve_write(s, k, 6, &l, (kva_write_mode)-1, b, st), KVA_EINVAL);
  assert_status_untouched(st, 6);
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  busy_store_release(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(extra_readers_above_127_is_refused) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[2];
  key_range(k, 0, 2);
  fixture_write(s, 0, 2, &l);
  kva_prefetch *h = NULL;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 2, &l, 128, &h), KVA_EINVAL);
  ck_assert_ptr_null(h);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 0);
  /* 127 is the largest: 128 locks, which a release of 128 undoes */
  ck_assert_uint_eq(prefetch(s, k, 2, 127), 2);
  kva_storage_stats before = stats_of(s);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 128), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, UINT32_MAX), KVA_EINVAL);
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 126), 2);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 2); /* one lock left each */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(repeated_key_in_reserve_write_gets_wrong_state) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  kva_buf b[3];
  int st[3];
  const uint64_t ids[] = {0, 1, 0};
  keys_of(k, ids, 3);
  ck_assert_int_eq(kva_reserve_write(s, k, 3, &l, KVA_WRITE_NEW, b, st), 2);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_OK);
  ck_assert_int_eq(st[2], KVA_KEY_WRONG_STATE);
  ck_assert_ptr_nonnull(b[0].ptr);
  ck_assert_ptr_null(b[2].ptr);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.l1_objects, 2);
  ck_assert_uint_eq(x.l1_write_locked, 2);
  ck_assert_uint_eq(x.reserved, 2);
  ck_assert_int_eq(kva_finish_write(s, k, 2, st), 2);
  /* an existing key twice in mode ALL: reused once */
  const uint64_t again[] = {1, 1};
  keys_of(k, again, 2);
  ck_assert_int_eq(kva_reserve_write(s, k, 2, &l, KVA_WRITE_ALL, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  ck_assert_uint_eq(stats_of(s).l1_write_locked, 1);
  ck_assert_int_eq(kva_finish_write(s, k, 1, st), 1);
  /* mode NEW on an existing key twice: refused once, then wrong state */
  ck_assert_int_eq(kva_reserve_write(s, k, 2, &l, KVA_WRITE_NEW, b, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_NOT_WRITABLE);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(repeated_key_in_finish_write_gets_wrong_state) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  kva_buf b[3];
  int st[3];
  const uint64_t ids[] = {0, 1, 0};
  keys_of(k, ids, 3);
  ck_assert_int_eq(kva_reserve_write(s, k, 2, &l, KVA_WRITE_NEW, b, st), 2);
  ck_assert_int_eq(kva_finish_write(s, k, 3, st), 2);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_OK);
  ck_assert_int_eq(st[2], KVA_KEY_WRONG_STATE);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.l1_write_locked, 0);
  ck_assert_uint_eq(x.finished, 2);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(repeated_key_in_delete_gets_wrong_state) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  int st[3];
  fixture_write(s, 0, 3, &l);
  /* a locked key twice: LOCKED, then WRONG_STATE */
  const uint64_t locked[] = {2, 2};
  keys_of(k, locked, 2);
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1);
  ck_assert_int_eq(kva_delete(s, k, 2, 0, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_LOCKED);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 1, 0), 1);
  /* a deletable key twice: deleted once; kvact.h says the later occurrence
   * gets KVA_KEY_WRONG_STATE */
  const uint64_t ids[] = {0, 1, 0};
  keys_of(k, ids, 3);
  ck_assert_int_eq(kva_delete(s, k, 3, 0, st), 2);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_OK);
  ck_assert_int_eq(st[2], KVA_KEY_WRONG_STATE);
  ck_assert_uint_eq(stats_of(s).l1_objects, 1);
  /* a missing key twice: NOT_EXIST, then WRONG_STATE */
  ck_assert_int_eq(kva_delete(s, k, 3, 1, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_NOT_EXIST);
  ck_assert_int_eq(st[1], KVA_KEY_NOT_EXIST);
  ck_assert_int_eq(st[2], KVA_KEY_WRONG_STATE);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* A prefetch naming a key twice is refused by the L1 manager; the refusal
 * (KVA_EINVAL) arrives through the handle, with no hit and no lock taken. */
START_TEST(repeated_key_in_prefetch_fails_through_the_handle) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  const uint64_t ids[] = {0, 1, 0};
  keys_of(k, ids, 3);
  fixture_write(s, 0, 2, &l);
  kva_storage_stats before = stats_of(s);
  kva_prefetch *h = NULL;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 3, &l, 1, &h), KVA_OK);
  size_t hits = 99;
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_EINVAL);
  ck_assert_uint_eq(hits, 0);
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EINVAL); /* consumed */
  /* also when the repeated key is missing, after the first gap */
  const uint64_t missing[] = {0, 1, 9, 9};
  kva_key m[4];
  keys_of(m, missing, 4);
  ck_assert_int_eq(kva_submit_prefetch(s, m, 4, &l, 0, &h), KVA_OK);
  hits = 99;
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_EINVAL);
  ck_assert_uint_eq(hits, 0);
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* read_prefetched naming a key twice is refused as a whole: nothing is
 * returned and, unlike a per-key failure, no lock is released. */
START_TEST(repeated_key_in_read_prefetched_is_refused) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  kva_buf b[3];
  const uint64_t ids[] = {0, 1, 0};
  keys_of(k, ids, 3);
  fixture_write(s, 0, 2, &l);
  ck_assert_uint_eq(prefetch(s, k, 2, 0), 2);
  kva_storage_stats before = stats_of(s);
  ck_assert_int_eq(kva_read_prefetched(s, k, 3, b), KVA_EINVAL);
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  ck_assert_int_eq(kva_read_prefetched(s, k, 2, b), KVA_OK);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* finish_read_prefetched releases a repeated key once. */
START_TEST(repeated_key_in_finish_read_releases_once) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[2];
  const uint64_t ids[] = {0, 0};
  keys_of(k, ids, 2);
  fixture_write(s, 0, 1, &l);
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1);
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1); /* two locks */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 1);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 1, 0), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(consumed_prefetch_handle_is_refused) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[2];
  key_range(k, 0, 2);
  fixture_write(s, 0, 2, &l);
  /* consumed by wait */
  kva_prefetch *h;
  size_t hits;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 2, &l, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 2);
  hits = 42;
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 0, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 100, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_prefetch_eventfd(h), KVA_EINVAL);
  ck_assert_uint_eq(hits, 42);
  /* consumed by query */
  ck_assert_int_eq(kva_submit_prefetch(s, k, 2, &l, 0, &h), KVA_OK);
  int rc;
  while ((rc = kva_query_prefetch(s, h, &hits)) == KVA_EAGAIN) {
  }
  ck_assert_int_eq(rc, KVA_OK);
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_wait_prefetch(s, h, -1, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_prefetch_eventfd(h), KVA_EINVAL);
  /* two prefetches, two lock each */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* A handle is its session's address; see storage_read.c. */
/* The session a handle names: its low 32 bits (storage_read.c). */
static uintptr_t handle_session(const kva_prefetch *h) {
  return (uintptr_t)h & 0xffffffffu;
}

/* A stale handle stays refused while its session serves other prefetches,
 * and it never returns the new prefetch's result. */
START_TEST(stale_handle_is_refused_after_its_session_is_reused) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  key_range(k, 0, 3);
  fixture_write(s, 0, 3, &l);
  kva_prefetch *old;
  size_t hits;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 1, &l, 0, &old), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, old, 5000, &hits), KVA_OK);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 1, 0), 1);
  int reused = 0;
  for (int i = 0; i < 64; i++) {
    kva_prefetch *h;
    ck_assert_int_eq(kva_submit_prefetch(s, k, 3, &l, 0, &h), KVA_OK);
    ck_assert_ptr_ne(h, old);
    reused += handle_session(h) == handle_session(old);
    hits = 42;
    ck_assert_int_eq(kva_query_prefetch(s, old, &hits), KVA_EINVAL);
    ck_assert_int_eq(kva_wait_prefetch(s, old, 10, &hits), KVA_EINVAL);
    ck_assert_int_eq(kva_prefetch_eventfd(old), KVA_EINVAL);
    ck_assert_uint_eq(hits, 42);
    ck_assert_int_ge(kva_prefetch_eventfd(h), 0);
    ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK); /* still its result */
    ck_assert_uint_eq(hits, 3);
    ck_assert_int_eq(kva_finish_read_prefetched(s, k, 3, 0), 3);
  }
  ck_assert_int_gt(reused, 0);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(made_up_or_foreign_handle_is_refused) {
  kva_runtime *rt = start(), *rt2 = start();
  kva_storage *s = kva_storage_of(rt), *s2 = kva_storage_of(rt2);
  kva_layout l = fixture_layout_basic();
  kva_key k = fixture_key(0);
  fixture_write(s, 0, 1, &l);
  size_t hits = 42;
  /* made-up values, aligned or not, are looked up and refused, never read */
  const uintptr_t made_up[] = {0x1234, 0x1240, 0x7fff00001000, 1, 0xffffffffffffffff};
  for (size_t i = 0; i < sizeof(made_up) / sizeof(made_up[0]); i++) {
    kva_prefetch *bogus = (kva_prefetch *)made_up[i];
    ck_assert_int_eq(kva_query_prefetch(s, bogus, &hits), KVA_EINVAL);
    ck_assert_int_eq(kva_wait_prefetch(s, bogus, 10, &hits), KVA_EINVAL);
    ck_assert_int_eq(kva_prefetch_eventfd(bogus), KVA_EINVAL);
  }
  ck_assert_uint_eq(hits, 42);
  /* a live handle of another storage, or with no storage, is refused and
   * stays usable with its own */
  kva_prefetch *h;
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, &l, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s2, h, 10, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_query_prefetch(s2, h, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_wait_prefetch(NULL, h, 10, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_query_prefetch(NULL, h, &hits), KVA_EINVAL);
  ck_assert_uint_eq(hits, 42);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
  fixture_memcheck_clean(s);
  fixture_memcheck_clean(s2);
  kva_runtime_shutdown(rt2);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(runtime_without_l1_has_no_storage) {
  kva_runtime *rt = fixture_runtime(2, NULL); /* l1.size_bytes = 0 */
  ck_assert_ptr_null(kva_storage_of(rt));
  ck_assert_ptr_null(kva_storage_of(NULL));
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k = fixture_key(0);
  kva_buf b;
  int st = SENTINEL;
  kva_prefetch *h = NULL;
  ck_assert_int_eq(kva_reserve_write(s, &k, 1, &l, KVA_WRITE_NEW, &b, &st), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_write(s, &k, 1, &st), KVA_EINVAL);
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, &l, 0, &h), KVA_EINVAL);
  ck_assert_int_eq(kva_clear(s, 0), KVA_EINVAL);
  ck_assert_int_eq(st, SENTINEL);
  ck_assert_ptr_null(h);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- the prefetch handle API -------------------------------------------- */

START_TEST(prefetch_eventfd_is_readable_when_done) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  key_range(k, 0, 5);
  fixture_write(s, 0, 5, &l);
  kva_prefetch *h;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 5, &l, 0, &h), KVA_OK);
  int fd = kva_prefetch_eventfd(h);
  ck_assert_int_ge(fd, 0);
  struct pollfd p = {.fd = fd, .events = POLLIN};
  ck_assert_int_eq(poll(&p, 1, 5000), 1);
  ck_assert(p.revents & POLLIN);
  size_t hits = 0;
  int rc;
  while ((rc = kva_query_prefetch(s, h, &hits)) == KVA_EAGAIN) {
  }
  ck_assert_int_eq(rc, KVA_OK);
  ck_assert_uint_eq(hits, 5);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 5, 0), 5);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* In deterministic mode nothing runs until the caller drives it: the
 * eventfd turns readable once the scheduler has run. */
START_TEST(prefetch_eventfd_turns_readable_when_the_scheduler_runs) {
  kva_runtime *rt = fixture_storage(0, 64 * MiB, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  key_range(k, 0, 3);
  fixture_write(s, 0, 3, &l);
  kva_prefetch *h;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 3, &l, 0, &h), KVA_OK);
  struct pollfd p = {.fd = kva_prefetch_eventfd(h), .events = POLLIN};
  ck_assert_int_ge(p.fd, 0);
  ck_assert_int_eq(poll(&p, 1, 0), 0);
  ck_assert_int_gt(kva_runtime_run_until_idle(rt), 0);
  ck_assert_int_eq(poll(&p, 1, 0), 1);
  size_t hits = 0;
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 3);
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 3, 0), 3);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(query_polls_until_done_then_refuses) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[4];
  key_range(k, 0, 4);
  fixture_write(s, 0, 3, &l);
  kva_prefetch *h;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 4, &l, 0, &h), KVA_OK);
  size_t hits = 0;
  int rc;
  uint64_t deadline = fixture_now_ns() + 5000000000ull;
  while ((rc = kva_query_prefetch(s, h, &hits)) == KVA_EAGAIN) {
    ck_assert_uint_eq(hits, 0);
    ck_assert_uint_lt(fixture_now_ns(), deadline);
  }
  ck_assert_int_eq(rc, KVA_OK);
  ck_assert_uint_eq(hits, 3);
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 3, 0), 3);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(wait_with_timeout_returns_the_result) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[4];
  key_range(k, 0, 4);
  fixture_write(s, 0, 4, &l);
  const int timeouts[] = {-1, 1, 1000};
  for (int t = 0; t < 3; t++) {
    kva_prefetch *h;
    size_t hits = 0;
    ck_assert_int_eq(kva_submit_prefetch(s, k, 4, &l, 0, &h), KVA_OK);
    int rc;
    while ((rc = kva_wait_prefetch(s, h, timeouts[t], &hits)) == KVA_ETIMEDOUT) {
    }
    ck_assert_int_eq(rc, KVA_OK);
    ck_assert_uint_eq(hits, 4);
    ck_assert_int_eq(kva_wait_prefetch(s, h, timeouts[t], &hits), KVA_EINVAL);
    ck_assert_int_eq(kva_finish_read_prefetched(s, k, 4, 0), 4);
  }
  /* timeout 0 is a query */
  kva_prefetch *h;
  size_t hits = 0;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 4, &l, 0, &h), KVA_OK);
  int rc;
  while ((rc = kva_wait_prefetch(s, h, 0, &hits)) == KVA_EAGAIN) {
  }
  ck_assert_int_eq(rc, KVA_OK);
  ck_assert_uint_eq(hits, 4);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 4, 0), 4);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* Keeps the L1 manager busy with large UPDATE batches of missing keys
 * (each refused key by key, changing nothing) until told to stop. */
typedef struct busy_ctx {
  kva_storage *s;
  int stop;   /* atomic */
  int rounds; /* atomic: batches completed */
  int ready;  /* atomic: about to send the first batch */
} busy_ctx;

#define BUSY_KEYS 300000

static void *busy_main(void *arg) {
  busy_ctx *c = arg;
  kva_layout l = fixture_layout_basic();
  kva_key *k = malloc(BUSY_KEYS * sizeof(*k));
  kva_buf *b = malloc(BUSY_KEYS * sizeof(*b));
  int *st = malloc(BUSY_KEYS * sizeof(*st));
  if (!k || !b || !st) abort();
  key_range(k, 1000000, BUSY_KEYS);
  __atomic_store_n(&c->ready, 1, __ATOMIC_RELEASE);
  while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
    if (kva_reserve_write(c->s, k, BUSY_KEYS, &l, KVA_WRITE_UPDATE, b, st) != 0) abort();
    __atomic_add_fetch(&c->rounds, 1, __ATOMIC_RELAXED);
  }
  free(k);
  free(b);
  free(st);
  return NULL;
}

/* A wait that times out leaves the handle usable. The L1 manager is kept
 * busy so that the prefetch is still queued when the wait gives up. */
START_TEST(wait_timeout_keeps_the_handle) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[2];
  key_range(k, 0, 2);
  fixture_write(s, 0, 2, &l);
  busy_ctx c = {.s = s};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, busy_main, &c), 0);
  while (!__atomic_load_n(&c.ready, __ATOMIC_ACQUIRE)) sched_yield();
  int timed_out = 0, again = 0;
  uint64_t deadline = fixture_now_ns() + 20000000000ull;
  while (!timed_out && fixture_now_ns() < deadline) {
    kva_prefetch *h;
    size_t hits = 42;
    ck_assert_int_eq(kva_submit_prefetch(s, k, 2, &l, 0, &h), KVA_OK);
    int rc = kva_query_prefetch(s, h, &hits);
    if (rc == KVA_EAGAIN) {
      again++;
      ck_assert_uint_eq(hits, 42);
      rc = kva_wait_prefetch(s, h, 1, &hits);
      if (rc == KVA_ETIMEDOUT) {
        timed_out = 1;
        ck_assert_uint_eq(hits, 42);
        ck_assert_int_ge(kva_prefetch_eventfd(h), 0);
        rc = kva_wait_prefetch(s, h, -1, &hits);
      }
    }
    ck_assert_int_eq(rc, KVA_OK);
    ck_assert_uint_eq(hits, 2);
    ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  }
  __atomic_store_n(&c.stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  ck_assert_msg(timed_out, "no wait timed out (%d EAGAIN, %d busy rounds)", again, c.rounds);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* 1 + extra_readers locks per key: each finish with extra 0 drops one. */
START_TEST(extra_readers_hold_one_plus_extra_locks) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[2];
  key_range(k, 0, 2);
  fixture_write(s, 0, 2, &l);
  ck_assert_uint_eq(prefetch(s, k, 2, 2), 2);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
    ck_assert_uint_eq(stats_of(s).l1_read_locked, 2);
    ck_assert_int_eq(update_count(s, k, 2), 0);
  }
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 0);
  /* a release with nothing held: wrong state, nothing released */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 0);
  ck_assert_int_eq(update_count(s, k, 2), 2);
  /* prefetches stack their locks */
  ck_assert_uint_eq(prefetch(s, k, 2, 1), 2);
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 1), 2);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 1, 0), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* LMCache quirk kept: a failed read releases ONE lock of each good key,
 * whatever extra_readers the prefetch took. */
START_TEST(read_prefetched_failure_releases_one_lock_per_good_key) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  kva_buf b[5];
  key_range(k, 0, 5);
  fixture_write(s, 0, 5, &l);
  ck_assert_uint_eq(prefetch(s, k + 1, 4, 2), 4); /* 3 locks each */
  ck_assert_int_eq(kva_read_prefetched(s, k, 5, b), KVA_KEY_NOT_READABLE);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 4);
  ck_assert_int_eq(kva_read_prefetched(s, k, 5, b), KVA_KEY_NOT_READABLE);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 4);
  ck_assert_int_eq(kva_read_prefetched(s, k + 1, 4, b), KVA_OK); /* one lock left */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k + 1, 4, 0), 4);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 0);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* The error is the first problematic key's, and every good key still
 * loses one lock. */
START_TEST(read_prefetched_reports_the_first_problem) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  kva_buf b[3];
  fixture_write(s, 0, 2, &l);
  const uint64_t unlocked_first[] = {1, 0, 9}; /* 1 locked, 0 unlocked, 9 missing */
  keys_of(k, unlocked_first, 3);
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1);
  ck_assert_int_eq(kva_read_prefetched(s, k, 3, b), KVA_KEY_NOT_READABLE);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 0);
  const uint64_t missing_first[] = {1, 9, 0};
  keys_of(k, missing_first, 3);
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1);
  ck_assert_int_eq(kva_read_prefetched(s, k, 3, b), KVA_KEY_NOT_EXIST);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 0);
  /* a write-locked key is not readable, and keeps its write lock */
  kva_key w = fixture_key(5);
  kva_buf wb;
  int st;
  ck_assert_int_eq(kva_reserve_write(s, &w, 1, &l, KVA_WRITE_NEW, &wb, &st), 1);
  k[1] = w;
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1);
  ck_assert_int_eq(kva_read_prefetched(s, k, 2, b), KVA_KEY_NOT_READABLE);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.l1_read_locked, 0);
  ck_assert_uint_eq(x.l1_write_locked, 1);
  ck_assert_int_eq(kva_finish_write(s, &w, 1, &st), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- kva_chunk_keys ------------------------------------------------------- */

#define NTOK 1536 /* six chunks of 256 */
#define CHUNK 256

static void tokens_init(int32_t *t, size_t n) {
  for (size_t i = 0; i < n; i++) t[i] = (int32_t)(i * 7919 % 32000);
}

static int key_eq(const kva_key *a, const kva_key *b) {
  return memcmp(a, b, sizeof(*a)) == 0;
}

START_TEST(chunk_keys_are_deterministic) {
  int32_t t[NTOK];
  tokens_init(t, NTOK);
  kva_key a[8], b[8];
  memset(a, 0xee, sizeof(a));
  memset(b, 0x11, sizeof(b));
  ck_assert_uint_eq(kva_chunk_keys("llama", 3, NULL, t, NTOK, CHUNK, 0, a, 8), 6);
  ck_assert_uint_eq(kva_chunk_keys("llama", 3, NULL, t, NTOK, CHUNK, 0, b, 8), 6);
  for (int i = 0; i < 6; i++) {
    ck_assert(key_eq(&a[i], &b[i]));
    ck_assert_str_eq(a[i].model, "llama");
    ck_assert_uint_eq(a[i].kv_rank, 3);
    ck_assert_uint_eq(a[i].group, 0);
    ck_assert_uint_ge(a[i].hash_len, 1);
    ck_assert_uint_le(a[i].hash_len, 32);
    for (int j = 0; j < i; j++) ck_assert(!key_eq(&a[i], &a[j]));
  }
  /* another kv_rank: same chunks, other keys */
  ck_assert_uint_eq(kva_chunk_keys("llama", 4, NULL, t, NTOK, CHUNK, 0, b, 8), 6);
  for (int i = 0; i < 6; i++) ck_assert(!key_eq(&a[i], &b[i]));
}
END_TEST

START_TEST(chunk_key_depends_on_its_prefix_only) {
  int32_t t[NTOK];
  tokens_init(t, NTOK);
  kva_key a[6], b[6];
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, a, 6), 6);
  t[3 * CHUNK + 17] ^= 1; /* a token of chunk 3 */
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, b, 6), 6);
  for (int i = 0; i < 3; i++) ck_assert(key_eq(&a[i], &b[i]));
  for (int i = 3; i < 6; i++) ck_assert(!key_eq(&a[i], &b[i]));
  /* fewer tokens: the keys of the chunks still complete are the same */
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, 2 * CHUNK + 5, CHUNK, 0, b, 6), 2);
  for (int i = 0; i < 2; i++) ck_assert(key_eq(&a[i], &b[i]));
}
END_TEST

START_TEST(chunk_keys_salt_changes_every_key) {
  int32_t t[NTOK];
  tokens_init(t, NTOK);
  kva_key a[6], b[6], c[6];
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, a, 6), 6);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, "tenant-a", t, NTOK, CHUNK, 0, b, 6), 6);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, "tenant-b", t, NTOK, CHUNK, 0, c, 6), 6);
  for (int i = 0; i < 6; i++) {
    ck_assert(!key_eq(&a[i], &b[i]));
    ck_assert(!key_eq(&b[i], &c[i]));
    ck_assert(!key_eq(&a[i], &c[i]));
  }
}
END_TEST

START_TEST(chunk_keys_partial_chunk_only_when_asked) {
  int32_t t[NTOK];
  tokens_init(t, NTOK);
  kva_key full[6], a[6], b[6];
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, full, 6), 6);
  size_t n = 3 * CHUNK + 100;
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, n, CHUNK, 0, a, 6), 3);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, n, CHUNK, 1, b, 6), 4);
  for (int i = 0; i < 3; i++) {
    ck_assert(key_eq(&a[i], &full[i]));
    ck_assert(key_eq(&b[i], &full[i]));
  }
  ck_assert(!key_eq(&b[3], &full[3])); /* 100 tokens are not chunk 3's 256 */
  /* the partial key depends on the partial tokens */
  kva_key c[6];
  t[3 * CHUNK + 50] ^= 1;
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, n, CHUNK, 1, c, 6), 4);
  ck_assert(!key_eq(&b[3], &c[3]));
  ck_assert(key_eq(&b[2], &c[2]));
  /* no remainder: include_partial adds nothing */
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, 3 * CHUNK, CHUNK, 1, a, 6), 3);
  /* fewer tokens than a chunk */
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, 10, CHUNK, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, 10, CHUNK, 1, a, 6), 1);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, 0, CHUNK, 1, a, 6), 0);
}
END_TEST

START_TEST(chunk_keys_max_limits_the_count) {
  int32_t t[NTOK];
  tokens_init(t, NTOK);
  kva_key full[6], a[6];
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, full, 6), 6);
  memset(a, 0x33, sizeof(a));
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, a, 2), 2);
  ck_assert(key_eq(&a[0], &full[0]));
  ck_assert(key_eq(&a[1], &full[1]));
  for (size_t i = 0; i < sizeof(a[2]); i++) ck_assert_uint_eq(((uint8_t *)&a[2])[i], 0x33);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 1, a, 0), 0);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK - 7, CHUNK, 1, a, 6), 6);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK - 7, CHUNK, 1, a, 5), 5);
}
END_TEST

START_TEST(chunk_keys_bad_arguments_give_zero) {
  int32_t t[NTOK];
  tokens_init(t, NTOK);
  kva_key a[6];
  char m63[64], m64[65];
  memset(m63, 'm', 63);
  m63[63] = '\0';
  memset(m64, 'm', 64);
  m64[64] = '\0';
  ck_assert_uint_eq(kva_chunk_keys(NULL, 0, NULL, t, NTOK, CHUNK, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, 0, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys("m@x", 0, NULL, t, NTOK, CHUNK, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys("", 0, NULL, t, NTOK, CHUNK, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys(m64, 0, NULL, t, NTOK, CHUNK, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, t, NTOK, CHUNK, 0, NULL, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys("m", 0, NULL, NULL, NTOK, CHUNK, 0, a, 6), 0);
  ck_assert_uint_eq(kva_chunk_keys(m63, 0, NULL, t, NTOK, CHUNK, 0, a, 6), 6);
  ck_assert_str_eq(a[0].model, m63);
}
END_TEST

START_TEST(chunk_keys_are_valid_store_keys) {
  kva_runtime *rt = start();
  kva_storage *s = kva_storage_of(rt);
  int32_t t[NTOK + 10];
  tokens_init(t, NTOK + 10);
  kva_key k[7];
  size_t n = kva_chunk_keys("llama-3-8b", 1, "salt", t, NTOK + 10, CHUNK, 1, k, 7);
  ck_assert_uint_eq(n, 7);
  kva_layout l = fixture_layout_bytes(4096);
  kva_buf b[7];
  int st[7];
  ck_assert_int_eq(kva_reserve_write(s, k, n, &l, KVA_WRITE_NEW, b, st), 7);
  ck_assert_int_eq(kva_finish_write(s, k, n, st), 7);
  /* the keys of a shorter prompt find the shared prefix */
  kva_key p[7];
  t[4 * CHUNK] ^= 1;
  ck_assert_uint_eq(kva_chunk_keys("llama-3-8b", 1, "salt", t, NTOK, CHUNK, 0, p, 7), 6);
  ck_assert_uint_eq(prefetch_l(s, p, 6, &l, 0), 4);
  ck_assert_int_eq(kva_finish_read_prefetched(s, p, 4, 0), 4);
  ck_assert_uint_eq(prefetch_l(s, k, n, &l, 0), 7);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, n, 0), 7);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- suite ---------------------------------------------------------------- */

Suite *kva_test_suite(void) {
  Suite *s = suite_create("storage");
  TCase *tc = tcase_create("lmcache");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, write_then_prefetch_reads_the_same_bytes);
  tcase_add_test(tc, write_modes_follow_the_contract);
  tcase_add_test(tc, delete_and_clear_respect_locks_unless_forced);
  tcase_add_test(tc, reserve_write_one_key_gives_a_buffer);
  tcase_add_test(tc, reserve_write_many_keys_gives_a_buffer_each);
  tcase_add_test(tc, reserve_write_of_twenty_large_keys_is_all_out_of_memory);
  tcase_add_test(tc, reserve_write_of_ten_large_keys_is_all_out_of_memory);
  tcase_add_test(tc, prefetch_counts_every_written_key);
  tcase_add_test(tc, prefetch_stops_at_first_gap_and_leaves_the_rest_unlocked);
  tcase_add_test(tc, read_prefetched_returns_buffers_and_finish_releases_them);
  tcase_add_test(tc, read_prefetched_of_an_unlocked_key_fails_and_releases_the_others);
  tcase_add_test(tc, prefetch_extra_readers_released_with_the_same_extra);
  tcase_add_test(tc, finish_read_with_smaller_extra_leaves_keys_locked);
  tcase_add_test(tc, prefetch_with_extra_never_locks_keys_after_the_gap);
  tcase_add_test(tc, extra_readers_zero_needs_one_release);
  suite_add_tcase(s, tc);

  tc = tcase_create("bad_input");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, null_pointers_are_refused_and_change_nothing);
  tcase_add_test(tc, empty_batch_is_refused);
  tcase_add_test(tc, invalid_key_anywhere_refuses_the_whole_batch);
  tcase_add_test(tc, longest_model_and_hash_are_accepted);
  tcase_add_test(tc, invalid_layouts_are_refused);
  tcase_add_test(tc, layout_bytes_counts_tensors_on_64_byte_boundaries);
  tcase_add_test(tc, invalid_write_mode_is_refused);
  tcase_add_test(tc, extra_readers_above_127_is_refused);
  tcase_add_test(tc, repeated_key_in_reserve_write_gets_wrong_state);
  tcase_add_test(tc, repeated_key_in_finish_write_gets_wrong_state);
  tcase_add_test(tc, repeated_key_in_delete_gets_wrong_state);
  tcase_add_test(tc, repeated_key_in_prefetch_fails_through_the_handle);
  tcase_add_test(tc, repeated_key_in_read_prefetched_is_refused);
  tcase_add_test(tc, repeated_key_in_finish_read_releases_once);
  tcase_add_test(tc, consumed_prefetch_handle_is_refused);
  tcase_add_test(tc, stale_handle_is_refused_after_its_session_is_reused);
  tcase_add_test(tc, made_up_or_foreign_handle_is_refused);
  tcase_add_test(tc, runtime_without_l1_has_no_storage);
  suite_add_tcase(s, tc);

  tc = tcase_create("prefetch_api");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, prefetch_eventfd_is_readable_when_done);
  tcase_add_test(tc, prefetch_eventfd_turns_readable_when_the_scheduler_runs);
  tcase_add_test(tc, query_polls_until_done_then_refuses);
  tcase_add_test(tc, wait_with_timeout_returns_the_result);
  tcase_add_test(tc, wait_timeout_keeps_the_handle);
  tcase_add_test(tc, extra_readers_hold_one_plus_extra_locks);
  tcase_add_test(tc, read_prefetched_failure_releases_one_lock_per_good_key);
  tcase_add_test(tc, read_prefetched_reports_the_first_problem);
  suite_add_tcase(s, tc);

  tc = tcase_create("chunk_keys");
  tcase_add_test(tc, chunk_keys_are_deterministic);
  tcase_add_test(tc, chunk_key_depends_on_its_prefix_only);
  tcase_add_test(tc, chunk_keys_salt_changes_every_key);
  tcase_add_test(tc, chunk_keys_partial_chunk_only_when_asked);
  tcase_add_test(tc, chunk_keys_max_limits_the_count);
  tcase_add_test(tc, chunk_keys_bad_arguments_give_zero);
  tcase_add_test(tc, chunk_keys_are_valid_store_keys);
  suite_add_tcase(s, tc);
  return s;
}
