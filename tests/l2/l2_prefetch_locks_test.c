/*
 * l2_prefetch_locks_test.c — every lock a prefetch takes is given back, and
 * only those (LMCache test_prefetch_controller.py: L2 lock release,
 * extra_count, max_in_flight; docs/invariants.md I-PC-2 to I-PC-4): L2
 * lookup locks after hits, trims and misses, on every tier, without
 * touching another holder's locks; 1 + extra_readers L1 read locks; the
 * buffers of failed loads and of reservations that lost a race; requests
 * queued past prefetch_max_in_flight; a shutdown with a prefetch in flight.
 */
#include <check.h>
#include <stdint.h>

#include "l1/l1_manager.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

/* Loop tests run threaded (_i = 0) and deterministic (_i = 1); the table
 * test runs each case both ways (_i % 2). */
static const int workers[] = {2, 0};

/* A plain release (extra 0) of each key of [first, first + n), one call
 * per key: each takes one read lock. */
static void release_each(kva_storage *s, uint64_t first, size_t n) {
  for (uint64_t id = first; id < first + n; id++) {
    kva_key k = fixture_key(id);
    ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
  }
}

/* UNLOCKs are fire and forget, so a lock count that is right now may still
 * drop: watch it for a while (threaded) or let the runtime settle. */
static void expect_locked_keys_stay(kva_runtime *rt, uint32_t tier, uint64_t want) {
  kva_storage *s = kva_storage_of(rt);
  for (int i = 0; i < 50; i++) {
    if (kva_runtime_run_until_idle(rt) == KVA_ENOTSUP) l2_sleep_ms(2);
    ck_assert_uint_eq(l2_stats(s, tier).keys_locked, want);
  }
}

/* ---- L2 lookup locks (test_locks_released_after_*) ------------------------- */

/* A prefetch of keys [0, n) with held[t] in tier t (bit i = key i). With
 * `mine` >= 0 the test itself holds a lock on that key in tier mine_tier:
 * lock counts stack, so it stays locked after the prefetch released its
 * own lock on the key, whether the prefetch trimmed the key (past the
 * gap) or planned it elsewhere (overlap). Each key a prefetch locked is
 * unlocked exactly once. */
typedef struct lock_case {
  const char *name;
  uint32_t ntiers;
  size_t n;
  uint8_t held[2];
  size_t hits;
  int mine;
  uint32_t mine_tier;
} lock_case;

static const lock_case lock_cases[] = {
    {"l2_locks_released_after_full_hit", 1, 3, {0x07}, 3, -1, 0},
    /* both the prefix {0, 1} and the trimmed {3, 4} are unlocked */
    {"l2_locks_released_after_prefix_trim", 1, 5, {0x1b}, 2, -1, 0},
    /* found, but not from key 0 on */
    {"l2_locks_released_after_no_hits", 1, 3, {0x06}, 0, -1, 0},
    /* test_multi_adapter_locks_released: tier 1's lock on key 1, which the
     * plan gives to tier 0, is released too */
    {"every_tier_releases_its_locks_when_tiers_overlap", 2, 3, {0x03, 0x06}, 3, -1, 0},
    {"another_holders_l2_lock_survives_a_prefix_trim", 1, 5, {0x1b}, 2, 3, 0},
    {"another_holders_l2_lock_survives_an_overlap", 2, 3, {0x03, 0x06}, 3, 1, 1},
};

START_TEST(prefetch_releases_its_l2_locks_and_only_those) {
  const lock_case *c = &lock_cases[_i / 2];
  kva_runtime *rt = l2_start_no_writeback(workers[_i % 2], (int)c->ntiers, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t mine = (uint64_t)c->mine;
  l2_seed_tiers(s, c->ntiers, c->held, &l);
  if (c->mine >= 0) ck_assert_uint_eq(l2_lock(s, c->mine_tier, &mine, 1), 1);
  size_t hits = l2_prefetch_range(s, 0, c->n, &l);
  ck_assert_msg(hits == c->hits, "%s: %zu hits, want %zu", c->name, hits, c->hits);
  if (c->mine < 0) {
    l2_assert_unlocked(s);
  } else {
    for (uint32_t t = 0; t < c->ntiers; t++) expect_locked_keys_stay(rt, t, t == c->mine_tier);
    l2_unlock(s, c->mine_tier, &mine, 1);
  }
  if (c->hits) l2_read_release_range(s, 0, c->hits, 0);
  l2_finish(rt);
}
END_TEST

/* ---- L1 read locks: 1 + extra_readers (test_extra_count_*) ----------------- */

/* extra_readers 0, 1, 3 -> 1, 2, 4 read locks, released with the same
 * extra in one call. */
START_TEST(each_loaded_key_gets_one_plus_extra_read_locks) {
  static const uint32_t extra[] = {0, 1, 3, 0, 1, 3};
  kva_runtime *rt = l2_start_no_writeback(workers[_i / 3], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2};
  l2_seed(s, 0, ids, 3, &l, 0);
  ck_assert_uint_eq(l2_prefetch(s, ids, 3, &l, extra[_i]), 3);
  for (uint64_t i = 0; i < 3; i++) ck_assert_int_eq(l2_readers(s, i), (int)(1 + extra[_i]));
  l2_read_release(s, ids, 3, 0, extra[_i]);
  l2_expect_states(s, 0, 3, L1_ABSENT);
  l2_finish(rt);
}
END_TEST

/* test_extra_count_three_requires_four_finish_reads: each plain release
 * takes one lock; the object goes at the fourth. */
START_TEST(read_locks_come_off_one_release_at_a_time) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1};
  l2_seed(s, 0, ids, 2, &l, 0);
  ck_assert_uint_eq(l2_prefetch(s, ids, 2, &l, 3), 2);
  for (int left = 4; left > 0; left--) {
    for (uint64_t i = 0; i < 2; i++) ck_assert_int_eq(l2_readers(s, i), left);
    release_each(s, 0, 2);
  }
  l2_expect_states(s, 0, 2, L1_ABSENT);
  l2_finish(rt);
}
END_TEST

START_TEST(extra_readers_with_a_prefix_trim) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t held[] = {0, 1, 3, 4}, all[] = {0, 1, 2, 3, 4};
  l2_seed(s, 0, held, 4, &l, 0);
  ck_assert_uint_eq(l2_prefetch(s, all, 5, &l, 1), 2);
  ck_assert_int_eq(l2_readers(s, 0), 2);
  ck_assert_int_eq(l2_readers(s, 1), 2);
  release_each(s, 0, 2);
  ck_assert_int_eq(l2_readers(s, 0), 1);
  release_each(s, 0, 2);
  l2_expect_states(s, 0, 5, L1_ABSENT);
  l2_finish(rt);
}
END_TEST

/* test_extra_count_non_prefix_loaded_keys_fully_released (OLD): key 1 is
 * write-locked in L1 by a writer, so its reservation fails; the prefix is
 * re-trimmed to key 0 and key 2's buffer, reserved but past the gap, is
 * removed unseen. */
START_TEST(reservation_lost_to_a_writer_trims_the_prefix) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2};
  l2_seed(s, 0, ids, 3, &l, 0);
  l2_reserve(s, 1, &l);
  ck_assert_uint_eq(l2_prefetch(s, ids, 3, &l, 1), 1);
  ck_assert_int_eq(l2_readers(s, 0), 2);
  ck_assert_int_eq(l2_l1_state(s, 1), L1_WRITE_LOCKED);
  ck_assert_int_eq(l2_readers(s, 2), -1);
  ck_assert_uint_eq(l2_stats(s, 0).loads, 1);
  l2_assert_unlocked(s);
  release_each(s, 0, 1);
  release_each(s, 0, 1);
  ck_assert_int_eq(l2_finish_one(s, 1), KVA_OK);
  l2_flush(s); /* the store's read lock is gone */
  ck_assert_int_eq(l2_delete_one(s, 1, 0), KVA_OK);
  l2_finish(rt);
}
END_TEST

/* ---- failed loads ----------------------------------------------------------- */

/* The load of key 1 fails: the prefix is key 0; key 2, loaded past the gap,
 * loses its L1 buffer and its L2 lock like key 1. */
START_TEST(failed_load_ends_the_prefix_and_frees_what_follows) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2}, bad[] = {1};
  l2_seed(s, 0, ids, 3, &l, 0);
  l2_fail_loads(s, 0, bad, 1);
  ck_assert_uint_eq(l2_prefetch(s, ids, 3, &l, 0), 1);
  ck_assert_int_eq(l2_readers(s, 0), 1);
  l2_expect_states(s, 1, 2, L1_ABSENT);
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.loads, 3);
  ck_assert_uint_eq(st.load_failures, 1);
  l2_assert_unlocked(s);
  kva_storage_stats ss = l2_storage_stats(s);
  ck_assert_uint_eq(ss.l2_loaded_keys, 2);
  ck_assert_uint_eq(ss.l2_load_failures, 1);
  l2_read_release(s, ids, 1, 0, 0);
  l2_finish(rt);
}
END_TEST

/* ---- prefetch_max_in_flight (test_queuing_beyond_max_in_flight) ------------ */

typedef struct lookups_at_least {
  uint64_t n;
} lookups_at_least;

static bool lookups_reached(kva_storage *s, void *arg) {
  return l2_stats(s, 0).lookups >= ((lookups_at_least *)arg)->n;
}

/* Four requests of two keys at once with room for two: the first two run
 * side by side (both looked up while the first is still loading), the
 * other two wait for a slot, and all four end with 2 hits, in order. */
START_TEST(requests_past_max_in_flight_wait_their_turn) {
  kva_runtime *rt = l2_start_no_writeback(2, 1, "prefetch_max_in_flight=2");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2, 3, 4, 5, 6, 7};
  l2_seed(s, 0, ids, 8, &l, 0);
  l2_set_latency(s, 0, 200000); /* a lookup + a load: at least 400 ms */
  kva_prefetch *h[4];
  for (int i = 0; i < 4; i++) h[i] = l2_submit(s, ids + 2 * i, 2, &l, 0);
  ck_assert(l2_wait_until(lookups_reached, s, &(lookups_at_least){4}, 5000));
  size_t hits;
  ck_assert_int_eq(kva_query_prefetch(s, h[0], &hits), KVA_EAGAIN);
  l2_sleep_ms(50);
  ck_assert_uint_eq(l2_stats(s, 0).lookups, 4); /* requests 3, 4 wait */
  ck_assert_int_eq(kva_query_prefetch(s, h[3], &hits), KVA_EAGAIN);
  size_t got[4];
  for (int i = 0; i < 4; i++) got[i] = l2_wait(s, h[i]);
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(got[i], 2);
  ck_assert_uint_eq(l2_stats(s, 0).lookups, 8);
  l2_read_release(s, ids, 8, 0, 0);
  l2_finish(rt);
}
END_TEST

/* The same in deterministic mode, without latency: one slot, four requests,
 * every result right. */
START_TEST(one_slot_serves_every_request_in_deterministic_mode) {
  kva_runtime *rt = l2_start_no_writeback(0, 1, "prefetch_max_in_flight=1");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2, 3, 4, 5, 6, 7};
  l2_seed(s, 0, ids, 7, &l, 0); /* key 7 missing: the last request gets 1 */
  kva_prefetch *h[4];
  for (int i = 0; i < 4; i++) h[i] = l2_submit(s, ids + 2 * i, 2, &l, 0);
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(l2_wait(s, h[i]), i < 3 ? 2 : 1);
  l2_read_release(s, ids, 7, 0, 0);
  l2_finish(rt);
}
END_TEST

/* ---- shutdown (test_start_stop with work in flight; docs/invariants.md I-SD-2) */

/* A prefetch still loading and one whose result nobody read: shutdown
 * finishes the first, releases both, and has nothing to complain about
 * (no "locks stay"), with no leak for ASan to find. */
START_TEST(shutdown_with_prefetches_in_flight_releases_everything) {
  kva_runtime *rt = l2_start_no_writeback(2, 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2, 3};
  l2_seed(s, 0, ids, 4, &l, 0);
  (void)l2_submit(s, ids, 2, &l, 0); /* nobody reads its result */
  l2_set_latency(s, 0, 100000);
  (void)l2_submit(s, ids + 2, 2, &l, 1); /* still loading at shutdown */
  l2_log_start(KVA_LOG_WARN);
  kva_runtime_shutdown(rt);
  l2_log_stop();
  ck_assert_msg(l2_log_count(NULL) == 0, "shutdown complained:\n%s", l2_log_text());
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_prefetch_locks");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, prefetch_releases_its_l2_locks_and_only_those, 0,
                      2 * (int)(sizeof(lock_cases) / sizeof(lock_cases[0])));
  tcase_add_loop_test(tc, each_loaded_key_gets_one_plus_extra_read_locks, 0, 6);
  tcase_add_loop_test(tc, read_locks_come_off_one_release_at_a_time, 0, 2);
  tcase_add_loop_test(tc, extra_readers_with_a_prefix_trim, 0, 2);
  tcase_add_loop_test(tc, reservation_lost_to_a_writer_trims_the_prefix, 0, 2);
  tcase_add_loop_test(tc, failed_load_ends_the_prefix_and_frees_what_follows, 0, 2);
  tcase_add_test(tc, requests_past_max_in_flight_wait_their_turn);
  tcase_add_test(tc, one_slot_serves_every_request_in_deterministic_mode);
  tcase_add_test(tc, shutdown_with_prefetches_in_flight_releases_everything);
  suite_add_tcase(su, tc);
  return su;
}
