/*
 * l2_memcheck_test.c — kva_memcheck tells the read locks of kvact's own
 * store-behind (the L1->L2 stores a finished write queues) from the locks
 * of callers, and kva_memcheck_with waits for the former or leaves them
 * out (issue 26, "Also" (b)). Deterministic runtime, mock tier in virtual
 * time: a store holds its lock until the test moves the clock.
 */
#include <check.h>
#include <string.h>

#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define LATENCY_US 100000u

static void expect_counts(const kva_memcheck_report *c, uint64_t w, uint64_t r, uint64_t p,
                          uint64_t store) {

  ck_assert_uint_eq(c->caller_write_locked, w);
  ck_assert_uint_eq(c->caller_read_locked, r);
  ck_assert_uint_eq(c->caller_pinned, p);
  ck_assert_uint_eq(c->store_read_locked, store);
  ck_assert_uint_eq(c->l2_keys_locked, 0);
}

/* A store in flight holds key 0: memcheck fails and its report says the
 * lock is the store-behind's, not a caller's. */
START_TEST(the_report_names_the_store_behinds_locks) {
  kva_runtime *rt = l2_start_slow_tier(LATENCY_US);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(4096);
  l2_write_range(s, 0, 1, &l, 0);
  kva_runtime_run_until_idle(rt);
  ck_assert_int_eq(l2_readers(s, 0), 1);
  char report[512];
  ck_assert_int_eq(kva_memcheck(s, report, sizeof(report)), KVA_EIO);
  ck_assert_msg(strstr(report, "1 read-locked by kvact's store-behind") &&
                    strstr(report, "0 by callers") && strstr(report, "1 of the store-behind"),
                "%s", report);
  l2_flush(s);
  l2_finish(rt);
}
END_TEST

/* Callers' locks (a reservation, a prefetch's read lock, a pin, and a
 * read lock on the very object a store holds) and the store-behind's,
 * counted apart; callers_only passes once only the store-behind's are
 * left, and a wait for the stores leaves nothing. */
START_TEST(memcheck_with_counts_each_kind_waits_for_stores_and_leaves_them_out) {
  kva_runtime *rt = l2_start_slow_tier(LATENCY_US);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(4096);
  l2_write_range(s, 0, 3, &l, 0); /* one store task holds keys 0, 1, 2 */
  kva_runtime_run_until_idle(rt);
  l2_reserve(s, 10, &l);                                          /* a caller's write lock */
  ck_assert_uint_eq(l2_prefetch(s, &(uint64_t){1}, 1, &l, 0), 1); /* and a read lock on 1 */
  kva_tier_hits th;
  kva_key k2 = fixture_key(2);
  ck_assert_int_eq(kva_lookup(s, &k2, 1, 1, &th), KVA_OK); /* and a pin on 2 */
  char report[512];
  kva_memcheck_report c = fixture_memcheck_counts(s, NULL, KVA_EIO, report, sizeof(report));
  expect_counts(&c, 1, 1, 1, 3);
  kva_memcheck_opts callers = {.callers_only = 1};
  c = fixture_memcheck_counts(s, &callers, KVA_EIO, report,
                              sizeof(report)); /* the callers' still count */
  expect_counts(&c, 1, 1, 1, 3);
  ck_assert_int_eq(l2_finish_one(s, 10), KVA_OK); /* queues a store of 10 too */
  kva_key k1 = fixture_key(1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k1, 1, 0), 1);
  ck_assert_int_eq(kva_unpin(s, &k2, 1), 1);
  kva_runtime_run_until_idle(rt);
  c = fixture_memcheck_counts(s, NULL, KVA_EIO, report,
                              sizeof(report)); /* only the store-behind's */
  expect_counts(&c, 0, 0, 0, 4);
  c = fixture_memcheck_counts(s, &callers, KVA_OK, report, sizeof(report));
  expect_counts(&c, 0, 0, 0, 4);
  ck_assert_msg(strstr(report, "ok: ") && strstr(report, "store-behind, not counted"), "%s",
                report);
  ck_assert_int_eq(l2_readers(s, 0), 1); /* nothing was waited for */
  kva_memcheck_opts wait = {.wait_stores_ms = -1};
  c = fixture_memcheck_counts(s, &wait, KVA_OK, report, sizeof(report));
  expect_counts(&c, 0, 0, 0, 0);
  ck_assert_int_eq(l2_readers(s, 0), 0);
  l2_finish(rt);
}
END_TEST

/* A wait that times out is no error: the check then reports what the
 * store-behind still holds. */
START_TEST(a_wait_for_stores_that_times_out_reports_what_is_left) {
  kva_runtime *rt = l2_start_slow_tier(LATENCY_US);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(4096);
  l2_write_range(s, 0, 1, &l, 0);
  char report[512];
  kva_memcheck_opts wait = {.wait_stores_ms = 10}; /* virtual: the store needs 100 */
  kva_memcheck_report c = fixture_memcheck_counts(s, &wait, KVA_EIO, report, sizeof(report));
  expect_counts(&c, 0, 0, 0, 1);
  ck_assert_int_eq(kva_memcheck_with(s, NULL, NULL, NULL, 0), KVA_EIO); /* no report, no counts */
  ck_assert_int_eq(kva_memcheck_with(NULL, NULL, NULL, NULL, 0), KVA_EINVAL);
  ck_assert_int_eq(kva_memcheck_with(s, NULL, NULL, NULL, 8), KVA_EINVAL);
  l2_flush(s);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_memcheck");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, the_report_names_the_store_behinds_locks);
  tcase_add_test(tc, memcheck_with_counts_each_kind_waits_for_stores_and_leaves_them_out);
  tcase_add_test(tc, a_wait_for_stores_that_times_out_reports_what_is_left);
  suite_add_tcase(su, tc);
  return su;
}
