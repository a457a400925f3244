/*
 * storage_client.c — helpers of the facade suites: key arrays, stats
 * snapshots, untouched-status checks, prefetch round trips (see
 * storage_client.h).
 */
#include "tests/support/storage_client.h"

#include <check.h>
#include <string.h>

#include "tests/support/fixture.h"

kva_runtime *start_store(void) {
  return fixture_storage(2, 64 * MiB, NULL);
}

/* keys[i] = fixture_key(ids[i]) */
void keys_of(kva_key *k, const uint64_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(ids[i]);
}

void key_range(kva_key *k, uint64_t first, size_t n) {
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(first + i);
}

kva_storage_stats stats_of(kva_storage *s) {
  kva_storage_stats st;
  memset(&st, 0, sizeof(st));
  ck_assert_int_eq(kva_storage_get_stats(s, &st), KVA_OK);
  return st;
}

/* Every field of the two snapshots agrees: the calls in between changed
 * neither the objects, nor their locks, nor a counter. */
void assert_same_stats(const kva_storage_stats *a, const kva_storage_stats *b) {
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

void fill_status(int *st, size_t n) {
  for (size_t i = 0; i < n; i++) st[i] = SENTINEL;
}

void assert_status_untouched(const int *st, size_t n) {
  for (size_t i = 0; i < n; i++) ck_assert_int_eq(st[i], SENTINEL);
}

/* submit + wait with the objects' layout; returns the hit count. */
size_t prefetch_l(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l, uint32_t extra) {
  kva_prefetch *h = NULL;
  ck_assert_int_eq(kva_submit_prefetch(s, k, n, l, extra, &h), KVA_OK);
  size_t hits = 12345;
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_le(hits, n);
  return hits;
}

/* The same for objects of the basic layout. */
size_t prefetch(kva_storage *s, const kva_key *k, size_t n, uint32_t extra) {
  kva_layout l = fixture_layout_basic();
  return prefetch_l(s, k, n, &l, extra);
}

/* LMCache's check "update-mode reserve_write returns k entries": reserves
 * with KVA_WRITE_UPDATE, finishes what it got (releasing the write locks it
 * took), returns how many keys it got. */
int update_count(kva_storage *s, const kva_key *k, size_t n) {
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

/* Is key i in L1? (a prefetch of it alone, released at once) */
int present(kva_storage *s, uint64_t i) {
  kva_key k = fixture_key(i);
  size_t hits = prefetch_l(s, &k, 1, NULL, 0);
  if (hits) ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
  return hits == 1;
}

/* One batch reserve of keys [first, first+n) of `bytes` each; returns how
 * many succeeded and finishes them. */
int write_batch(kva_storage *s, uint64_t first, size_t n, uint64_t bytes, int *st) {
  kva_layout l = fixture_layout_bytes(bytes);
  kva_key k[64];
  kva_buf b[64];
  ck_assert_uint_le(n, 64);
  key_range(k, first, n);
  int ok = kva_reserve_write(s, k, n, &l, KVA_WRITE_NEW, b, st);
  kva_key done[64];
  size_t nd = 0;
  for (size_t i = 0; i < n; i++)
    if (st[i] == KVA_OK) done[nd++] = k[i];
  int fst[64];
  if (nd) ck_assert_int_eq(kva_finish_write(s, done, nd, fst), (int)nd);
  return ok;
}

/* Holds one read lock on key i (a prefetch that hit). */
void lock_key(kva_storage *s, uint64_t i) {
  kva_key k = fixture_key(i);
  ck_assert_uint_eq(prefetch_l(s, &k, 1, NULL, 0), 1);
}

void unlock_key(kva_storage *s, uint64_t i) {
  kva_key k = fixture_key(i);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
}
