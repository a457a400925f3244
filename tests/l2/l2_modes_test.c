/*
 * l2_modes_test.c — the v1 modes that turn L2 tiers off (docs/invariants.md
 * I-L2-7; LMCache v1 StorageManager set_freeze / set_backend_bypass):
 * freeze stops stores and keeps lookups and prefetches in L1; a bypassed
 * tier is skipped by store, lookup and load; a tier that fails
 * l2_bypass_failures times in a row is bypassed until it answers a probe,
 * and a manual bypass stays.
 */
#include <check.h>

#include "l1/l1_manager.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define MiB (1024u * 1024u)
#define MS 1000000ull /* virtual nanoseconds */

/* Writes keys [first, first + n) and waits for their stores. */
static void write_range(kva_storage *s, uint64_t first, size_t n, const kva_layout *l) {
  l2_write_range(s, first, n, l, 0);
  l2_flush(s);
}

/* ---- freeze ------------------------------------------------------------- */

START_TEST(freeze_stores_nothing) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  ck_assert_int_eq(kva_set_freeze(NULL, 1), KVA_EINVAL);
  ck_assert_int_eq(kva_set_freeze(s, 1), KVA_OK);
  write_range(s, 0, 3, &l);
  for (uint32_t t = 0; t < 2; t++) ck_assert_uint_eq(l2_stats(s, t).stores, 0);
  kva_storage_stats st = l2_storage_stats(s);
  ck_assert_uint_eq(st.l2_store_skipped, 6); /* 3 keys, each sent to 2 tiers */
  for (uint32_t t = 0; t < 2; t++) {
    kva_l2_tier_keys k;
    ck_assert_int_eq(kva_l2_get_tier_keys(s, t ? "mock1" : "mock0", &k), KVA_OK);
    ck_assert_uint_eq(k.written, 3);
    ck_assert_uint_eq(k.frozen, 3);
    ck_assert_uint_eq(k.stored, 0);
  }
  ck_assert_uint_eq(st.l2_store_tasks, 0);
  ck_assert_uint_eq(st.l1_read_locked, 0);
  ck_assert_int_eq(kva_set_freeze(s, 0), KVA_OK);
  write_range(s, 3, 1, &l);
  for (uint32_t t = 0; t < 2; t++) ck_assert_uint_eq(l2_stats(s, t).objects, 1);
  ck_assert_uint_eq(l2_storage_stats(s).l2_store_skipped, 6);
  l2_finish(rt);
}
END_TEST

START_TEST(freeze_keeps_lookup_and_prefetch_in_l1) {
  kva_runtime *rt = l2_start(0, 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 3, &l);
  write_range(s, 10, 1, &l);
  ck_assert_int_eq(kva_set_freeze(s, 1), KVA_OK);
  uint64_t asked = l2_stats(s, 0).lookups;
  kva_tier_hits h = l2_lookup_range(s, 0, 3, 0);
  ck_assert_uint_eq(h.ntiers, 2);
  ck_assert_uint_eq(h.tier[1].hits, 0);
  ck_assert_uint_eq(h.total, 0);
  ck_assert_uint_eq(l2_lookup_range(s, 10, 1, 0).total, 1); /* L1 still answers */
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 0);
  ck_assert_uint_eq(l2_stats(s, 0).lookups, asked);
  ck_assert_uint_eq(l2_storage_stats(s).l2_prefetches, 0);
  ck_assert_int_eq(l2_l1_state(s, 0), L1_ABSENT);
  ck_assert_int_eq(kva_set_freeze(s, 0), KVA_OK);
  ck_assert_uint_eq(l2_lookup_range(s, 0, 3, 0).total, 3);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 3);
  l2_read_release_range(s, 0, 3, 0);
  l2_finish(rt);
}
END_TEST

/* ---- manual bypass ------------------------------------------------------ */

START_TEST(bypassed_tier_is_skipped_by_store_lookup_and_load) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 10, 3, &l);
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 1), KVA_OK);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 1);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock1"), 0);
  write_range(s, 0, 2, &l);
  ck_assert_uint_eq(l2_stats(s, 0).stores, 1); /* the seed only */
  ck_assert_uint_eq(l2_stats(s, 1).objects, 2);
  uint64_t asked = l2_stats(s, 0).lookups;
  kva_tier_hits h = l2_lookup_range(s, 10, 3, 0);
  ck_assert_uint_eq(h.tier[1].hits, 0);
  ck_assert_uint_eq(h.total, 0);
  ck_assert_uint_eq(l2_prefetch_range(s, 10, 3, &l), 0);
  ck_assert_uint_eq(l2_stats(s, 0).lookups, asked);
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 0), KVA_OK);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 0);
  ck_assert_uint_eq(l2_lookup_range(s, 10, 3, 0).tier[1].hits, 3);
  ck_assert_uint_eq(l2_prefetch_range(s, 10, 3, &l), 3);
  l2_read_release_range(s, 10, 3, 0);
  write_range(s, 2, 1, &l);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 4);
  l2_finish(rt);
}
END_TEST

/* While mock0 is bypassed, a key both tiers hold is loaded from mock1. */
START_TEST(bypassed_tier_is_not_loaded_from) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  uint64_t id = 5;
  l2_seed(s, 0, &id, 1, &l, 1);
  l2_seed(s, 1, &id, 1, &l, 2);
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 1), KVA_OK);
  ck_assert_uint_eq(l2_prefetch(s, &id, 1, &l, 0), 1);
  l2_read_release(s, &id, 1, 2, 0); /* mock1's bytes */
  ck_assert_uint_eq(l2_stats(s, 0).loads, 0);
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 0), KVA_OK);
  l2_finish(rt);
}
END_TEST

START_TEST(bypass_refuses_unknown_tiers) {
  kva_runtime *rt = l2_start(0, 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  ck_assert_int_eq(kva_set_tier_bypass(s, "nope", 1), KVA_EINVAL);
  ck_assert_int_eq(kva_set_tier_bypass(s, "L1", 1), KVA_EINVAL);
  ck_assert_int_eq(kva_set_tier_bypass(s, NULL, 1), KVA_EINVAL);
  ck_assert_int_eq(kva_set_tier_bypass(NULL, "mock0", 1), KVA_EINVAL);
  ck_assert_int_eq(kva_tier_bypassed(s, "L1"), KVA_EINVAL);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock1"), KVA_EINVAL);
  ck_assert_int_eq(kva_tier_bypassed(NULL, "mock0"), KVA_EINVAL);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 0);
  l2_finish(rt);
}
END_TEST

/* ---- automatic bypass and the probe ------------------------------------- */

static bool back_in_use(kva_storage *s, void *tier) {
  return kva_tier_bypassed(s, tier) == 0;
}

START_TEST(failing_tier_is_bypassed_then_probed_back) {
  kva_runtime *rt =
      l2_start(2, 64 * MiB, 2, "", "l2_bypass_failures=3", "l2_probe_interval_ms=20", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_set_down(s, 0, true);
  for (uint64_t i = 0; i < 3; i++) {
    ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 0);
    write_range(s, i, 1, &l); /* one failed store task each */
  }
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 1);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock1"), 0);
  write_range(s, 3, 1, &l);
  ck_assert_uint_eq(l2_stats(s, 0).stores, 3); /* the fourth never went there */
  ck_assert_uint_eq(l2_stats(s, 1).objects, 4);
  kva_storage_stats st = l2_storage_stats(s);
  ck_assert_uint_eq(st.l2_store_failures, 3);
  ck_assert_uint_eq(st.l2_store_tasks, 7);
  l2_set_down(s, 0, false);
  ck_assert(l2_wait_until(back_in_use, s, "mock0", 5000));
  write_range(s, 4, 1, &l);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 1);
  l2_finish(rt);
}
END_TEST

/* Failed lookups count too; in virtual time, probes of a tier still down
 * change nothing, and the first probe after it is up clears the bypass. */
START_TEST(failing_tier_recovers_in_virtual_time) {
  kva_runtime *rt =
      l2_start(0, 64 * MiB, 1, "", "l2_bypass_failures=2", "l2_probe_interval_ms=50", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 1, &l);
  l2_set_down(s, 0, true);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 1, &l), 0);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 0);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 1, &l), 0);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 1);
  uint64_t asked = l2_stats(s, 0).lookups;
  kva_runtime_advance(rt, 500 * MS);
  ck_assert_uint_ge(l2_stats(s, 0).lookups, asked + 5); /* probed, still down */
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 1);
  l2_set_down(s, 0, false);
  kva_runtime_advance(rt, 50 * MS);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 0);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 1, &l), 1);
  l2_read_release_range(s, 0, 1, 0);
  l2_finish(rt);
}
END_TEST

/* "Full" (KVA_ENOMEM) and "busy" (KVA_EAGAIN: a locked key cannot be
 * replaced) are failed stores but no sign of ill health. */
START_TEST(full_or_busy_tier_is_not_bypassed) {
  kva_runtime *rt =
      l2_start(2, 64 * MiB, 1, "\"capacity_bytes\":300000", "l2_bypass_failures=1", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic(); /* 204,800 bytes: one fits */
  write_range(s, 0, 2, &l);
  ck_assert_uint_eq(l2_stats(s, 0).store_failures, 1);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 0);
  uint64_t id = 5;
  l2_seed(s, 0, &id, 1, &l, 0);
  ck_assert_uint_eq(l2_lock(s, 0, &id, 1), 1);
  write_range(s, 5, 1, &l);
  ck_assert_uint_eq(l2_stats(s, 0).store_failures, 2);
  ck_assert_uint_eq(l2_storage_stats(s).l2_store_failures, 2);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 0);
  l2_unlock(s, 0, &id, 1);
  l2_set_down(s, 0, true);
  write_range(s, 6, 1, &l); /* a real failure: bypassed at the first */
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 1);
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 0), KVA_OK);
  l2_finish(rt);
}
END_TEST

START_TEST(probe_never_clears_a_manual_bypass) {
  kva_runtime *rt =
      l2_start(0, 64 * MiB, 1, "", "l2_bypass_failures=1", "l2_probe_interval_ms=20", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 1), KVA_OK);
  kva_runtime_advance(rt, 1000 * MS);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 1);
  ck_assert_uint_eq(l2_stats(s, 0).lookups, 0); /* a healthy tier is not probed */
  /* now automatic as well: one failed store, then manual on again */
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 0), KVA_OK);
  l2_set_down(s, 0, true);
  write_range(s, 0, 1, &l);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 1);
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 1), KVA_OK);
  l2_set_down(s, 0, false);
  kva_runtime_advance(rt, 100 * MS);
  ck_assert_uint_gt(l2_stats(s, 0).lookups, 0); /* probed and answered */
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 1);
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 0), KVA_OK);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 0);
  write_range(s, 1, 1, &l);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 1);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_modes");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, freeze_stores_nothing);
  tcase_add_test(tc, freeze_keeps_lookup_and_prefetch_in_l1);
  tcase_add_test(tc, bypassed_tier_is_skipped_by_store_lookup_and_load);
  tcase_add_test(tc, bypassed_tier_is_not_loaded_from);
  tcase_add_test(tc, bypass_refuses_unknown_tiers);
  tcase_add_test(tc, failing_tier_is_bypassed_then_probed_back);
  tcase_add_test(tc, failing_tier_recovers_in_virtual_time);
  tcase_add_test(tc, full_or_busy_tier_is_not_bypassed);
  tcase_add_test(tc, probe_never_clears_a_manual_bypass);
  suite_add_tcase(su, tc);
  return su;
}
