/*
 * l2_prefetch_writeback_test.c — where a prefetch leaves what it loaded
 * (config prefetch_writeback; docs/api.md "submit_prefetch"; LMCache
 * test_default_deletes_keys_after_finish_read and "prefetched data is never
 * stored back"). With write-back (kvact's default) loaded objects become
 * ordinary L1 objects that outlive their readers; without it they are
 * temporary and go at their last release. Either way nothing loaded from
 * L2 is stored to L2 again.
 */
#include <check.h>
#include <stdint.h>

#include "l1/l1_manager.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define MiB (1024u * 1024u)

static const int workers[] = {2, 0};

/* Seeds keys 0..2 in tier 0 and prefetches them: each is in L1 as `read`
 * (with L1's count of temporary objects `temporary`) until its release,
 * then as `released`. */
static void prefetch_three_and_release(kva_storage *s, const kva_layout *l, int read,
                                       uint64_t temporary, int released) {
  l2_seed_range(s, 0, 0, 3, l);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, l), 3);
  l2_expect_states(s, 0, 3, read);
  ck_assert_uint_eq(l2_storage_stats(s).l1_temporary, temporary);
  l2_read_release_range(s, 0, 3, 0);
  l2_expect_states(s, 0, 3, released);
}

START_TEST(without_writeback_loaded_objects_go_at_their_last_release) {
  kva_runtime *rt = l2_start(workers[_i], 64 * MiB, 1, "", "prefetch_writeback=false", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  prefetch_three_and_release(s, &l, 1 | L1_TEMPORARY, 3, L1_ABSENT);
  ck_assert_uint_eq(l2_storage_stats(s).l1_objects, 0);
  l2_finish(rt);
}
END_TEST

/* The default: ordinary objects, still there (unlocked) after the release,
 * so the next prefetch is served by L1 alone. */
START_TEST(with_writeback_loaded_objects_stay_in_l1) {
  kva_runtime *rt = l2_start(workers[_i], 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  prefetch_three_and_release(s, &l, 1, 0, 0);
  uint64_t lookups = l2_stats(s, 0).lookups;
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 3);
  ck_assert_uint_eq(l2_stats(s, 0).lookups, lookups);
  l2_read_release_range(s, 0, 3, 0);
  ck_assert_int_eq(kva_clear(s, 0), 3); /* ordinary, unlocked: evictable */
  l2_finish(rt);
}
END_TEST

/* Written back into L1, but not stored back into L2: the tier sees no
 * STORE, and the store controller counts nothing. */
START_TEST(with_writeback_loaded_objects_are_not_stored_back) {
  kva_runtime *rt = l2_start(workers[_i], 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 4, &l);
  uint64_t stores0 = l2_stats(s, 0).stores, stores1 = l2_stats(s, 1).stores;
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 4, &l), 4);
  l2_read_release_range(s, 0, 4, 0);
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).stores, stores0);
  ck_assert_uint_eq(l2_stats(s, 1).stores, stores1);
  ck_assert_uint_eq(l2_stats(s, 1).objects, 0); /* not copied to the other tier */
  kva_storage_stats st = l2_storage_stats(s);
  ck_assert_uint_eq(st.l2_store_tasks, 0);
  ck_assert_uint_eq(st.l2_stored_keys, 0);
  l2_finish(rt);
}
END_TEST

START_TEST(with_writeback_extra_readers_come_off_and_the_object_stays) {
  kva_runtime *rt = l2_start(workers[_i], 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1};
  l2_seed(s, 0, ids, 2, &l, 0);
  ck_assert_uint_eq(l2_prefetch(s, ids, 2, &l, 2), 2);
  ck_assert_int_eq(l2_l1_state(s, 0), 3);
  l2_read_release(s, ids, 2, 0, 2);
  l2_expect_states(s, 0, 2, 0);
  l2_finish(rt);
}
END_TEST

/* Buffers of a failed load and of loads past it are removed, not kept as
 * ordinary objects (and so never stored back either). */
START_TEST(with_writeback_failed_loads_leave_nothing_behind) {
  kva_runtime *rt = l2_start(workers[_i], 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2}, bad[] = {1};
  l2_seed(s, 0, ids, 3, &l, 0);
  uint64_t stores = l2_stats(s, 0).stores;
  l2_fail_loads(s, 0, bad, 1);
  ck_assert_uint_eq(l2_prefetch(s, ids, 3, &l, 0), 1);
  l2_expect_states(s, 1, 2, L1_ABSENT);
  l2_read_release(s, ids, 1, 0, 0);
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).stores, stores);
  ck_assert_int_eq(l2_l1_state(s, 0), 0);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_prefetch_writeback");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, without_writeback_loaded_objects_go_at_their_last_release, 0, 2);
  tcase_add_loop_test(tc, with_writeback_loaded_objects_stay_in_l1, 0, 2);
  tcase_add_loop_test(tc, with_writeback_loaded_objects_are_not_stored_back, 0, 2);
  tcase_add_loop_test(tc, with_writeback_extra_readers_come_off_and_the_object_stays, 0, 2);
  tcase_add_loop_test(tc, with_writeback_failed_loads_leave_nothing_behind, 0, 2);
  suite_add_tcase(su, tc);
  return su;
}
