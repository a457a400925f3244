/*
 * storage_test.c — the storage facade doing its job: the L1 scenarios of
 * LMCache's test_distributed_storage_manager.py (write, prefetch up to the
 * first gap, read, extra readers, modes, delete and clear), and reads that
 * give each object's layout back.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/storage_client.h"

/* ---- LMCache test_distributed_storage_manager.py, L1 scenarios --------- */

/* test_basic_reserve_write */
START_TEST(reserve_write_one_key_gives_a_buffer) {
  kva_runtime *rt = start_store();
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

/* LMCache's test_abort_write.py: a reservation given back unwritten is
 * gone at once (memory free, never readable), the key reservable as new
 * again; a key not write-locked, or missing, is refused per key. */
START_TEST(abort_write_gives_the_reservation_back) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[4];
  kva_buf b[4];
  int st[4];
  key_range(k, 0, 4);
  ck_assert_int_eq(kva_reserve_write(s, k, 3, &l, KVA_WRITE_NEW, b, st), 3);
  ck_assert_int_eq(kva_abort_write(s, k, 4, st), 3);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[2], KVA_OK);
  ck_assert_int_eq(st[3], KVA_KEY_NOT_EXIST);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.l1_objects, 0);
  ck_assert_uint_eq(x.l1_used_bytes, 0);
  ck_assert_uint_eq(x.l1_write_locked, 0);
  kva_prefetch *h = NULL;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 3, &l, 0, &h), KVA_OK);
  size_t hits = 9;
  ck_assert_int_eq(kva_wait_prefetch(s, h, 10000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 0); /* never readable */
  ck_assert_int_eq(kva_reserve_write(s, k, 3, &l, KVA_WRITE_NEW, b, st), 3);
  ck_assert_int_eq(kva_finish_write(s, k, 3, st), 3);
  ck_assert_int_eq(kva_abort_write(s, k, 1, st), 0); /* ready, not write-locked */
  ck_assert_int_eq(st[0], KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(kva_abort_write(s, k, 1, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_abort_write(NULL, k, 1, st), KVA_EINVAL);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* test_reserve_write_multiple_keys */
START_TEST(reserve_write_many_keys_gives_a_buffer_each) {
  kva_runtime *rt = start_store();
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
  kva_runtime *rt = start_store();
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
  kva_runtime *rt = start_store();
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
  kva_runtime *rt = start_store();
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
  kva_runtime *rt = start_store();
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
  kva_runtime *rt = start_store();
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

/* LMCache's read results carry the shape and dtype they were written
 * with: each object's layout comes back with its bytes, several layouts in
 * one read. */
START_TEST(read_prefetched_layouts_gives_each_object_its_layout) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout two = fixture_layout_two(), basic = fixture_layout_basic();
  kva_key k[3];
  kva_buf rb[3];
  kva_layout got[3];
  key_range(k, 0, 3);
  fixture_write(s, 0, 2, &two);
  fixture_write(s, 2, 1, &basic);
  ck_assert_uint_eq(prefetch_l(s, k, 3, NULL, 0), 3);
  ck_assert_int_eq(kva_read_prefetched_layouts(s, k, 3, rb, got), KVA_OK);
  const kva_layout *want[3] = {&two, &two, &basic};
  for (int i = 0; i < 3; i++) {
    fixture_assert_layout_eq(&got[i], want[i]);
    ck_assert_uint_eq(rb[i].len, kva_layout_bytes(want[i]));
  }
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 3); /* as kva_read_prefetched: kept */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 3, 0), 3);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* A key not read-locked: the first key's problem, bufs and layouts zeroed,
 * the other keys' locks released, as kva_read_prefetched. */
START_TEST(read_prefetched_layouts_of_an_unlocked_key_zeroes_both) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout two = fixture_layout_two();
  kva_key k[3];
  kva_buf rb[3];
  kva_layout got[3];
  key_range(k, 0, 3);
  fixture_write(s, 0, 3, &two);
  ck_assert_uint_eq(prefetch_l(s, k, 2, NULL, 0), 2);
  memset(rb, 0x11, sizeof(rb));
  memset(got, 0x11, sizeof(got));
  ck_assert_int_eq(kva_read_prefetched_layouts(s, k, 3, rb, got), KVA_KEY_NOT_READABLE);
  static const kva_layout zero;
  for (int i = 0; i < 3; i++) {
    ck_assert_ptr_null(rb[i].ptr);
    ck_assert_mem_eq(&got[i], &zero, sizeof(zero));
  }
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 0);
  key_range(k, 7, 1); /* a key L1 does not have */
  ck_assert_int_eq(kva_read_prefetched_layouts(s, k, 1, rb, got), KVA_KEY_NOT_EXIST);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* test_prefetch_with_extra_count */
START_TEST(prefetch_extra_readers_released_with_the_same_extra) {
  kva_runtime *rt = start_store();
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
  kva_runtime *rt = start_store();
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
  kva_runtime *rt = start_store();
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
  kva_runtime *rt = start_store();
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
  kva_runtime *rt = start_store();
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
  kva_runtime *rt = start_store();
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
  /* gone for everyone else, but the reader's memory stays until it lets go */
  x = stats_of(s);
  ck_assert_uint_eq(x.l1_objects, 1);
  ck_assert_uint_eq(x.l1_read_locked, 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 1, 0), 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 1, 0), 0); /* released once */
  ck_assert_int_eq(kva_clear(s, 1), 1);                        /* the write-locked key 3 */
  x = stats_of(s);
  ck_assert_uint_eq(x.l1_objects, 0);
  ck_assert_uint_eq(x.l1_write_locked, 1); /* its writer still holds its buffer */
  ck_assert_int_eq(kva_finish_write(s, k + 3, 1, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_NOT_EXIST); /* deleted: never readable; the buffer is freed */
  x = stats_of(s);
  ck_assert_uint_eq(x.l1_used_bytes, 0);
  fixture_memcheck_clean(s);
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

Suite *kva_test_suite(void) {
  Suite *s = suite_create("storage_test");
  TCase *tc = tcase_create("lmcache");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, reserve_write_one_key_gives_a_buffer);
  tcase_add_test(tc, reserve_write_many_keys_gives_a_buffer_each);
  tcase_add_test(tc, abort_write_gives_the_reservation_back);
  tcase_add_test(tc, reserve_write_of_twenty_large_keys_is_all_out_of_memory);
  tcase_add_test(tc, reserve_write_of_ten_large_keys_is_all_out_of_memory);
  tcase_add_test(tc, prefetch_counts_every_written_key);
  tcase_add_test(tc, prefetch_stops_at_first_gap_and_leaves_the_rest_unlocked);
  tcase_add_test(tc, read_prefetched_returns_buffers_and_finish_releases_them);
  tcase_add_test(tc, read_prefetched_of_an_unlocked_key_fails_and_releases_the_others);
  tcase_add_test(tc, read_prefetched_layouts_gives_each_object_its_layout);
  tcase_add_test(tc, read_prefetched_layouts_of_an_unlocked_key_zeroes_both);
  tcase_add_test(tc, prefetch_extra_readers_released_with_the_same_extra);
  tcase_add_test(tc, finish_read_with_smaller_extra_leaves_keys_locked);
  tcase_add_test(tc, prefetch_with_extra_never_locks_keys_after_the_gap);
  tcase_add_test(tc, extra_readers_zero_needs_one_release);
  tcase_add_test(tc, write_modes_follow_the_contract);
  tcase_add_test(tc, delete_and_clear_respect_locks_unless_forced);
  tcase_add_test(tc, write_then_prefetch_reads_the_same_bytes);
  suite_add_tcase(s, tc);
  return s;
}
