/*
 * l2_smoke_test.c — the L2 round trip end to end: written objects reach a
 * mock tier, come back through a prefetch after L1 lost them, byte exact.
 */
#include <check.h>

#include "l1/l1_manager.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define MiB (1024u * 1024u)

START_TEST(written_objects_come_back_from_l2) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  uint64_t ids[4] = {0, 1, 2, 3};
  l2_write(s, ids, 4, &l, 1);
  ck_assert_int_eq(kva_flush(s, 10000), KVA_OK);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 4);
  ck_assert_int_eq(kva_clear(s, 0), 4);
  ck_assert_int_eq(l2_l1_state(s, 0), L1_ABSENT);
  ck_assert_uint_eq(l2_prefetch(s, ids, 4, &l, 0), 4);
  ck_assert_int_eq(l2_l1_state(s, 0), 1);
  l2_read_release(s, ids, 4, 1, 0);
  l2_assert_unlocked(s);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(deterministic_round_trip) {
  kva_runtime *rt = l2_start(0, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  uint64_t ids[3] = {5, 6, 7};
  l2_write(s, ids, 3, &l, 2);
  ck_assert_int_eq(kva_flush(s, 10000), KVA_OK);
  ck_assert_int_eq(kva_clear(s, 0), 3);
  ck_assert_uint_eq(l2_prefetch(s, ids, 3, &l, 0), 3);
  l2_read_release(s, ids, 3, 2, 0);
  l2_assert_unlocked(s);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_smoke");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, written_objects_come_back_from_l2);
  tcase_add_test(tc, deterministic_round_trip);
  suite_add_tcase(su, tc);
  return su;
}
