/*
 * l2_smoke_test.c — the L2 round trip end to end: written objects reach a
 * mock tier, come back through a prefetch after L1 lost them, byte exact.
 */
#include <check.h>

#include "l1/l1_manager.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define MiB (1024u * 1024u)

/* Threaded with one tier, then deterministic with two. */
static const struct {
  int workers, ntiers;
  uint64_t first;
  size_t n;
  uint32_t v;
} trips[] = {{2, 1, 0, 4, 1}, {0, 2, 5, 3, 2}};

START_TEST(written_objects_come_back_from_l2) {
  kva_runtime *rt = l2_start(trips[_i].workers, 64 * MiB, trips[_i].ntiers, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  uint64_t first = trips[_i].first;
  size_t n = trips[_i].n;
  l2_write_range(s, first, n, &l, trips[_i].v);
  l2_flush(s);
  for (int t = 0; t < trips[_i].ntiers; t++) ck_assert_uint_eq(l2_stats(s, (uint32_t)t).objects, n);
  ck_assert_int_eq(kva_clear(s, 0), (int)n);
  ck_assert_int_eq(l2_l1_state(s, first), L1_ABSENT);
  ck_assert_uint_eq(l2_prefetch_range(s, first, n, &l), n);
  ck_assert_int_eq(l2_l1_state(s, first), 1);
  l2_read_release_range(s, first, n, trips[_i].v);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_smoke");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_loop_test(tc, written_objects_come_back_from_l2, 0,
                      (int)(sizeof(trips) / sizeof(trips[0])));
  suite_add_tcase(su, tc);
  return su;
}
