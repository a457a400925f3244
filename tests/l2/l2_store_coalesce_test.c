/*
 * l2_store_coalesce_test.c — rewrites of one key while its tier is slow
 * (issue 26, "Also"): the store controller keeps at most one store of a key
 * queued and one in flight per tier (docs/invariants.md I-SC-7), so the
 * key carries at most one read lock of kvact's own however often it is
 * rewritten, the tier stores it far fewer times, ends with its newest
 * bytes, and a flush after the rewrites completes. Deterministic runtimes
 * with mock tiers in virtual time: no timing thresholds.
 */
#include <check.h>
#include <string.h>

#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define LATENCY_US 100000u /* per STORE, on the mock's one channel */
#define STEP_NS (LATENCY_US * 1000ull)
#define SLOTS 64u /* the controller's stores in flight at most (MAX_INFLIGHT) */
#define REWRITES 30u
#define K 0u

/* Advances virtual time one store at a time until every store queued has
 * answered; the most read locks key `id` had meanwhile. */
static int max_readers_until_flushed(kva_runtime *rt, kva_storage *s, uint64_t id) {
  int most = l2_readers(s, id);
  for (int i = 0; i < 1000 && kva_flush(s, 0) == KVA_ETIMEDOUT; i++) {
    kva_runtime_advance(rt, STEP_NS);
    int r = l2_readers(s, id);
    if (r > most) most = r;
  }
  ck_assert_int_eq(kva_flush(s, 0), KVA_OK);
  return most;
}

/* Key id's bytes in the tier are version v: L1 cleared, prefetched back. */
static void expect_tier_version(kva_storage *s, uint64_t id, const kva_layout *l, uint32_t v) {
  ck_assert_int_ge(kva_clear(s, 0), 1);
  ck_assert_uint_eq(l2_prefetch(s, &id, 1, l, 0), 1);
  l2_read_release(s, &id, 1, v, 0);
}

/* Every slot busy with a slow store of another key, then K written and
 * rewritten 30 times: its 31 stores wait, unlocked (K stays rewritable).
 * Before coalescing each of them read-locked K when a slot freed, and the
 * tier stored K 31 times. */
START_TEST(rewrites_queued_behind_busy_slots_coalesce_into_one_store) {
  kva_runtime *rt = l2_start_slow_tier(LATENCY_US);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(4096);
  for (uint64_t i = 0; i < SLOTS; i++) l2_write_range(s, 100 + i, 1, &l, 0);
  kva_runtime_run_until_idle(rt);
  ck_assert_int_eq(l2_readers(s, 100), 1); /* in flight, locked */
  uint64_t k = K;
  l2_write(s, &k, 1, &l, 0);
  for (uint32_t v = 1; v <= REWRITES; v++) l2_rewrite(s, &k, 1, &l, v);
  kva_runtime_run_until_idle(rt);
  ck_assert_int_eq(l2_readers(s, K), 0); /* queued stores hold nothing */
  int most = max_readers_until_flushed(rt, s, K);
  ck_assert_msg(most <= 1, "key %u had %d read locks of queued stores at once", K, most);
  ck_assert_uint_eq(l2_stats(s, 0).stores, SLOTS + 1);
  ck_assert_int_eq(l2_readers(s, K), 0);
  expect_tier_version(s, K, &l, REWRITES);
  l2_finish(rt);
}
END_TEST

/* With free slots, each rewrite's store starts at once and holds K until
 * the slow tier answers, so K is not rewritable meanwhile; a writer that
 * retries rewrites it between stores. Never more than one of kvact's read
 * locks on K, and the tier ends with the last version. */
START_TEST(rewrites_between_slow_stores_hold_one_lock_at_a_time) {
  kva_runtime *rt = l2_start_slow_tier(LATENCY_US);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(4096);
  uint64_t k = K;
  l2_write(s, &k, 1, &l, 0);
  int most = 0;
  for (uint32_t v = 1; v <= REWRITES; v++) {
    kva_key key = fixture_key(K);
    kva_buf b;
    int st = 0;
    while (kva_reserve_write(s, &key, 1, &l, KVA_WRITE_ALL, &b, &st) != 1) {
      ck_assert_int_eq(st, KVA_KEY_NOT_WRITABLE); /* its store holds it */
      kva_runtime_advance(rt, STEP_NS);
    }
    l2_fill(b.ptr, b.len, K, v);
    ck_assert_int_eq(kva_finish_write(s, &key, 1, &st), 1);
    kva_runtime_run_until_idle(rt);
    int r = l2_readers(s, K);
    if (r > most) most = r;
  }
  ck_assert_int_le(most, 1);
  ck_assert_int_le(max_readers_until_flushed(rt, s, K), 1);
  expect_tier_version(s, K, &l, REWRITES);
  l2_finish(rt);
}
END_TEST

/* K's store in flight holds its old object (by id) when K is deleted with
 * force and written again: the new version's store waits for the old one
 * (one in flight per key), then runs, so the tier ends with the new bytes
 * and never had two stores of K racing. Before, the second store started
 * at once and read-locked the new object while the first was in flight. */
START_TEST(a_version_written_while_the_old_one_is_stored_is_stored_after_it) {
  kva_runtime *rt = l2_start_slow_tier(LATENCY_US);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(4096);
  uint64_t k = K;
  l2_write(s, &k, 1, &l, 0);
  kva_runtime_run_until_idle(rt);
  ck_assert_int_eq(l2_readers(s, K), 1); /* the store of version 0 */
  ck_assert_int_eq(l2_delete_one(s, K, 1), KVA_OK);
  l2_write(s, &k, 1, &l, 1); /* a new object of K */
  kva_runtime_run_until_idle(rt);
  ck_assert_int_eq(l2_readers(s, K), 0); /* its store waits, unlocked */
  ck_assert_int_le(max_readers_until_flushed(rt, s, K), 1);
  ck_assert_uint_eq(l2_stats(s, 0).stores, 2);
  expect_tier_version(s, K, &l, 1);
  l2_finish(rt);
}
END_TEST

/* A queued store of K, then K deleted with force and written again with
 * another layout: the new object is stored once, with its own layout.
 * Before, the queued store locked the new object and sent its 8192 bytes
 * as an object of the old 4096-byte layout, then the new write's own store
 * sent them again. */
START_TEST(a_key_rewritten_with_another_layout_is_stored_with_its_own) {
  kva_runtime *rt = l2_start_slow_tier(LATENCY_US);
  kva_storage *s = kva_storage_of(rt);
  kva_layout a = fixture_layout_bytes(4096), b = fixture_layout_bytes(8192);
  for (uint64_t i = 0; i < SLOTS; i++) l2_write_range(s, 100 + i, 1, &a, 0);
  uint64_t k = K;
  l2_write(s, &k, 1, &a, 0); /* queued behind the busy slots */
  ck_assert_int_eq(l2_delete_one(s, K, 1), KVA_OK);
  l2_write(s, &k, 1, &b, 1);
  max_readers_until_flushed(rt, s, K);
  ck_assert_uint_eq(l2_stats(s, 0).stores, SLOTS + 1);
  ck_assert_uint_eq(l2_stats(s, 0).store_failures, 0);
  expect_tier_version(s, K, &b, 1);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_store_coalesce");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, rewrites_queued_behind_busy_slots_coalesce_into_one_store);
  tcase_add_test(tc, rewrites_between_slow_stores_hold_one_lock_at_a_time);
  tcase_add_test(tc, a_version_written_while_the_old_one_is_stored_is_stored_after_it);
  tcase_add_test(tc, a_key_rewritten_with_another_layout_is_stored_with_its_own);
  suite_add_tcase(su, tc);
  return su;
}
