/*
 * l2_prefetch_locks_test.c — every lock a prefetch takes is given back,
 * and only those (LMCache test_prefetch_controller.py: L2 lock release,
 * extra_count, max_in_flight; seed 002 lock invariants): L2 lookup locks
 * after hits, trims and misses, on every tier, without touching another
 * holder's locks; 1 + extra_readers L1 read locks; the buffers of failed
 * loads and of reservations that lost a race; requests queued past
 * prefetch_max_in_flight; a shutdown with a prefetch in flight.
 */
#include <check.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "l1/l1_manager.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define MiB (1024u * 1024u)

static const int workers[] = {2, 0};

static kva_runtime *start(int nworkers, int ntiers, const char *more) {
  return l2_start(nworkers, 64 * MiB, ntiers, "", "prefetch_writeback=false", more, NULL);
}

static void done(kva_runtime *rt) {
  kva_storage *s = kva_storage_of(rt);
  l2_assert_unlocked(s);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}

static void release(kva_storage *s, uint64_t id, uint32_t extra) {
  kva_key k = fixture_key(id);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, extra), 1);
}

static void sleep_ms(long ms) {
  nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL);
}

/* UNLOCKs are fire and forget, so a lock count that is right now may still
 * drop: watch it for a while (threaded) or let the runtime settle. */
static void expect_locked_keys_stay(kva_runtime *rt, uint32_t tier, uint64_t want) {
  kva_storage *s = kva_storage_of(rt);
  for (int i = 0; i < 50; i++) {
    if (kva_runtime_run_until_idle(rt) == KVA_ENOTSUP) sleep_ms(2);
    ck_assert_uint_eq(l2_stats(s, tier).keys_locked, want);
  }
}

/* ---- L2 lookup locks (test_locks_released_after_*) ------------------------- */

START_TEST(l2_locks_released_after_full_hit) {
  kva_runtime *rt = start(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 3, &l);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 3);
  l2_assert_unlocked(s);
  l2_read_release_range(s, 0, 3, 0);
  done(rt);
}
END_TEST

/* Both the prefix {0, 1} and the trimmed {3, 4} are unlocked. */
START_TEST(l2_locks_released_after_prefix_trim) {
  kva_runtime *rt = start(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t held[] = {0, 1, 3, 4};
  l2_seed(s, 0, held, 4, &l, 0);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 5, &l), 2);
  l2_assert_unlocked(s);
  l2_read_release_range(s, 0, 2, 0);
  done(rt);
}
END_TEST

START_TEST(l2_locks_released_after_no_hits) {
  kva_runtime *rt = start(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 1, 2, &l); /* found, but not from key 0 on */
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 0);
  done(rt);
}
END_TEST

/* test_multi_adapter_locks_released: tier 1's lock on key 1, which the plan
 * gives to tier 0, is released too. */
START_TEST(every_tier_releases_its_locks_when_tiers_overlap) {
  kva_runtime *rt = start(workers[_i], 2, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 2, &l);
  l2_seed_range(s, 1, 1, 2, &l);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 3);
  l2_assert_unlocked(s);
  l2_read_release_range(s, 0, 3, 0);
  done(rt);
}
END_TEST

/* Lock counts stack: a key locked by someone else (here the test) stays
 * locked after a prefetch released its own lock on it, whether the prefetch
 * trimmed the key (past the gap) or planned it elsewhere (overlap). Each
 * key a prefetch locked is unlocked exactly once. */
START_TEST(another_holders_l2_lock_survives_a_prefix_trim) {
  kva_runtime *rt = start(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t held[] = {0, 1, 3, 4}, mine[] = {3};
  l2_seed(s, 0, held, 4, &l, 0);
  ck_assert_uint_eq(l2_lock(s, 0, mine, 1), 1);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 5, &l), 2);
  expect_locked_keys_stay(rt, 0, 1);
  l2_unlock(s, 0, mine, 1);
  l2_read_release_range(s, 0, 2, 0);
  done(rt);
}
END_TEST

START_TEST(another_holders_l2_lock_survives_an_overlap) {
  kva_runtime *rt = start(workers[_i], 2, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t mine[] = {1};
  l2_seed_range(s, 0, 0, 2, &l);
  l2_seed_range(s, 1, 1, 2, &l);
  ck_assert_uint_eq(l2_lock(s, 1, mine, 1), 1);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 3);
  expect_locked_keys_stay(rt, 1, 1);
  expect_locked_keys_stay(rt, 0, 0);
  l2_unlock(s, 1, mine, 1);
  l2_read_release_range(s, 0, 3, 0);
  done(rt);
}
END_TEST

/* ---- L1 read locks: 1 + extra_readers (test_extra_count_*) ----------------- */

/* extra_readers 0, 1, 3 -> 1, 2, 4 read locks, released with the same
 * extra in one call. */
START_TEST(each_loaded_key_gets_one_plus_extra_read_locks) {
  static const uint32_t extra[] = {0, 1, 3, 0, 1, 3};
  kva_runtime *rt = start(workers[_i / 3], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2};
  l2_seed(s, 0, ids, 3, &l, 0);
  ck_assert_uint_eq(l2_prefetch(s, ids, 3, &l, extra[_i]), 3);
  for (uint64_t i = 0; i < 3; i++) ck_assert_int_eq(l2_readers(s, i), (int)(1 + extra[_i]));
  l2_read_release(s, ids, 3, 0, extra[_i]);
  for (uint64_t i = 0; i < 3; i++) ck_assert_int_eq(l2_readers(s, i), -1);
  done(rt);
}
END_TEST

/* test_extra_count_three_requires_four_finish_reads: each plain release
 * takes one lock; the object goes at the fourth. */
START_TEST(read_locks_come_off_one_release_at_a_time) {
  kva_runtime *rt = start(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1};
  l2_seed(s, 0, ids, 2, &l, 0);
  ck_assert_uint_eq(l2_prefetch(s, ids, 2, &l, 3), 2);
  for (int left = 4; left > 0; left--) {
    for (uint64_t i = 0; i < 2; i++) ck_assert_int_eq(l2_readers(s, i), left);
    release(s, 0, 0);
    release(s, 1, 0);
  }
  ck_assert_int_eq(l2_readers(s, 0), -1);
  ck_assert_int_eq(l2_readers(s, 1), -1);
  done(rt);
}
END_TEST

START_TEST(extra_readers_with_a_prefix_trim) {
  kva_runtime *rt = start(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t held[] = {0, 1, 3, 4}, all[] = {0, 1, 2, 3, 4};
  l2_seed(s, 0, held, 4, &l, 0);
  ck_assert_uint_eq(l2_prefetch(s, all, 5, &l, 1), 2);
  ck_assert_int_eq(l2_readers(s, 0), 2);
  ck_assert_int_eq(l2_readers(s, 1), 2);
  release(s, 0, 0);
  release(s, 1, 0);
  ck_assert_int_eq(l2_readers(s, 0), 1);
  release(s, 0, 0);
  release(s, 1, 0);
  for (uint64_t i = 0; i < 5; i++) ck_assert_int_eq(l2_readers(s, i), -1);
  done(rt);
}
END_TEST

/* test_extra_count_non_prefix_loaded_keys_fully_released (OLD): key 1 is
 * write-locked in L1 by a writer, so its reservation fails; the prefix is
 * re-trimmed to key 0 and key 2's buffer, reserved but past the gap, is
 * removed unseen. */
START_TEST(reservation_lost_to_a_writer_trims_the_prefix) {
  kva_runtime *rt = start(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2};
  l2_seed(s, 0, ids, 3, &l, 0);
  kva_key k1 = fixture_key(1);
  kva_buf b;
  int st;
  ck_assert_int_eq(kva_reserve_write(s, &k1, 1, &l, KVA_WRITE_NEW, &b, &st), 1);
  ck_assert_uint_eq(l2_prefetch(s, ids, 3, &l, 1), 1);
  ck_assert_int_eq(l2_readers(s, 0), 2);
  ck_assert_int_eq(l2_l1_state(s, 1), L1_WRITE_LOCKED);
  ck_assert_int_eq(l2_readers(s, 2), -1);
  ck_assert_uint_eq(l2_stats(s, 0).loads, 1);
  l2_assert_unlocked(s);
  release(s, 0, 0);
  release(s, 0, 0);
  ck_assert_int_eq(kva_finish_write(s, &k1, 1, &st), 1);
  ck_assert_int_eq(kva_flush(s, 10000), KVA_OK); /* the store's read lock is gone */
  ck_assert_int_eq(kva_delete(s, &k1, 1, 0, &st), 1);
  done(rt);
}
END_TEST

/* ---- failed loads ----------------------------------------------------------- */

/* The load of key 1 fails: the prefix is key 0; key 2, loaded past the gap,
 * loses its L1 buffer and its L2 lock like key 1. */
START_TEST(failed_load_ends_the_prefix_and_frees_what_follows) {
  kva_runtime *rt = start(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2}, bad[] = {1};
  l2_seed(s, 0, ids, 3, &l, 0);
  l2_fail_loads(s, 0, bad, 1);
  ck_assert_uint_eq(l2_prefetch(s, ids, 3, &l, 0), 1);
  ck_assert_int_eq(l2_readers(s, 0), 1);
  ck_assert_int_eq(l2_l1_state(s, 1), L1_ABSENT);
  ck_assert_int_eq(l2_l1_state(s, 2), L1_ABSENT);
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.loads, 3);
  ck_assert_uint_eq(st.load_failures, 1);
  l2_assert_unlocked(s);
  kva_storage_stats ss = l2_storage_stats(s);
  ck_assert_uint_eq(ss.l2_loaded_keys, 2);
  ck_assert_uint_eq(ss.l2_load_failures, 1);
  l2_read_release(s, ids, 1, 0, 0);
  done(rt);
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
  kva_runtime *rt = start(2, 1, "prefetch_max_in_flight=2");
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
  sleep_ms(50);
  ck_assert_uint_eq(l2_stats(s, 0).lookups, 4); /* requests 3, 4 wait */
  ck_assert_int_eq(kva_query_prefetch(s, h[3], &hits), KVA_EAGAIN);
  size_t got[4];
  for (int i = 0; i < 4; i++) got[i] = l2_wait(s, h[i]);
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(got[i], 2);
  ck_assert_uint_eq(l2_stats(s, 0).lookups, 8);
  l2_read_release(s, ids, 8, 0, 0);
  done(rt);
}
END_TEST

/* The same in deterministic mode, without latency: one slot, four requests,
 * every result right. */
START_TEST(one_slot_serves_every_request_in_deterministic_mode) {
  kva_runtime *rt = start(0, 1, "prefetch_max_in_flight=1");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2, 3, 4, 5, 6, 7};
  l2_seed(s, 0, ids, 7, &l, 0); /* key 7 missing: the last request gets 1 */
  kva_prefetch *h[4];
  for (int i = 0; i < 4; i++) h[i] = l2_submit(s, ids + 2 * i, 2, &l, 0);
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(l2_wait(s, h[i]), i < 3 ? 2 : 1);
  l2_read_release(s, ids, 7, 0, 0);
  done(rt);
}
END_TEST

/* ---- shutdown (test_start_stop with work in flight; seed 002 invariant 9) -- */

static int complaints;

static void count_complaints(int level, const char *msg, void *arg) {
  (void)msg, (void)arg;
  if (level <= KVA_LOG_WARN) __atomic_add_fetch(&complaints, 1, __ATOMIC_RELAXED);
}

/* A prefetch still loading and one whose result nobody read: shutdown
 * finishes the first, releases both, and has nothing to complain about
 * (no "locks stay"), with no leak for ASan to find. */
START_TEST(shutdown_with_prefetches_in_flight_releases_everything) {
  kva_runtime *rt = start(2, 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2, 3};
  l2_seed(s, 0, ids, 4, &l, 0);
  (void)l2_submit(s, ids, 2, &l, 0); /* nobody reads its result */
  l2_set_latency(s, 0, 100000);
  (void)l2_submit(s, ids + 2, 2, &l, 1); /* still loading at shutdown */
  kva_log_set(count_complaints, NULL, KVA_LOG_WARN);
  kva_runtime_shutdown(rt);
  kva_log_set(NULL, NULL, KVA_LOG_WARN);
  ck_assert_int_eq(__atomic_load_n(&complaints, __ATOMIC_RELAXED), 0);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_prefetch_locks");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, l2_locks_released_after_full_hit, 0, 2);
  tcase_add_loop_test(tc, l2_locks_released_after_prefix_trim, 0, 2);
  tcase_add_loop_test(tc, l2_locks_released_after_no_hits, 0, 2);
  tcase_add_loop_test(tc, every_tier_releases_its_locks_when_tiers_overlap, 0, 2);
  tcase_add_loop_test(tc, another_holders_l2_lock_survives_a_prefix_trim, 0, 2);
  tcase_add_loop_test(tc, another_holders_l2_lock_survives_an_overlap, 0, 2);
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
