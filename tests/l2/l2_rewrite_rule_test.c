/*
 * l2_rewrite_rule_test.c — a key whose newest version did not reach a
 * tier is never read back from that tier's older copy (issue 35, item 4;
 * l2/absent.h): rewrites dropped because the tier was bypassed, because
 * its store failed, or because the tier was frozen miss there until a
 * store of the key succeeds; the keys stored meanwhile are served; every
 * write is accounted for (l2_finish).
 */
#include <check.h>
#include <stdlib.h>

#include "l1/l1_manager.h"
#include "storage/storage_internal.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define MiB (1024u * 1024u)

/* Keys 0..3 stored as version 1, then rewritten as version 2 while `drop`
 * keeps version 2 of key 1 and 2 from the tier; L1 is emptied. A prefetch
 * of all four finds 0 only (3 is not contiguous after the miss of 1): key
 * 1's version 1, still in the tier, is not served. */
static kva_runtime *rewrite_dropped(void (*drop)(kva_storage *s, bool on)) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", "l2_bypass_failures=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t all[] = {0, 1, 2, 3}, mid[] = {1, 2}, ends[] = {0, 3};
  l2_write(s, all, 4, &l, 1);
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 4);
  drop(s, true);
  l2_rewrite(s, mid, 2, &l, 2);
  l2_flush(s);
  drop(s, false);
  l2_rewrite(s, ends, 2, &l, 2);
  l2_flush(s);
  ck_assert_int_ge(kva_clear(s, 0), 4);
  ck_assert_uint_eq(l2_prefetch(s, all, 4, &l, 0), 1);
  l2_read_release(s, all, 1, 2, 0); /* key 0, version 2: stored after the drop */
  /* key 3 alone is served, in its newest version */
  ck_assert_uint_eq(l2_prefetch(s, &all[3], 1, &l, 0), 1);
  l2_read_release(s, &all[3], 1, 2, 0);
  /* keys 1 and 2 miss in the tier, although it holds version 1 of each */
  ck_assert_uint_eq(l2_prefetch(s, mid, 2, &l, 0), 0);
  ck_assert_uint_eq(l2_lookup_range(s, 1, 2, 0).total, 0);
  kva_l2_tier_keys k;
  ck_assert_int_eq(kva_l2_get_tier_keys(s, "mock0", &k), KVA_OK);
  ck_assert_uint_eq(k.absent_now, 2);
  return rt;
}

static void bypass(kva_storage *s, bool on) {
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", on), KVA_OK);
}

static void fail_stores(kva_storage *s, bool on) {
  const uint64_t mid[] = {1, 2};
  l2_fail_stores(s, 0, mid, on ? 2 : 0);
}

static void freeze(kva_storage *s, bool on) {
  ck_assert_int_eq(kva_set_freeze(s, on), KVA_OK);
}

/* The tier's keys accounting of rt. */
static kva_l2_tier_keys tier_keys(kva_runtime *rt) {
  kva_l2_tier_keys k;
  ck_assert_int_eq(kva_l2_get_tier_keys(kva_storage_of(rt), "mock0", &k), KVA_OK);
  return k;
}

START_TEST(a_rewrite_not_sent_to_a_bypassed_tier_is_not_read_in_its_older_version) {
  kva_runtime *rt = rewrite_dropped(bypass);
  ck_assert_uint_eq(tier_keys(rt).bypassed, 2);
  l2_finish(rt);
}
END_TEST

START_TEST(a_rewrite_whose_store_failed_is_not_read_in_its_older_version) {
  kva_runtime *rt = rewrite_dropped(fail_stores);
  ck_assert_uint_eq(tier_keys(rt).failed, 2);
  l2_finish(rt);
}
END_TEST

START_TEST(a_rewrite_written_while_frozen_is_not_read_in_its_older_version) {
  kva_runtime *rt = rewrite_dropped(freeze);
  ck_assert_uint_eq(tier_keys(rt).frozen, 2);
  l2_finish(rt);
}
END_TEST

/* Once a store of the key succeeds, the tier serves it again, in that
 * version; the mark is gone. */
START_TEST(a_later_store_serves_the_key_again) {
  kva_runtime *rt = rewrite_dropped(bypass);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t mid[] = {1, 2};
  l2_write(s, mid, 2, &l, 3); /* L1 was cleared: written as new */
  l2_flush(s);
  ck_assert_int_ge(kva_clear(s, 0), 2);
  ck_assert_uint_eq(l2_prefetch(s, mid, 2, &l, 0), 2);
  l2_read_release(s, mid, 2, 3, 0);
  ck_assert_uint_eq(tier_keys(rt).absent_now, 0);
  size_t n = 9;
  ck_assert_int_eq(kva_l2_get_tier_nodes(s, "mock0", NULL, 0, &n, NULL),
                   KVA_ENOTSUP); /* no servers */
  ck_assert_int_eq(kva_l2_get_tier_nodes(s, "nope", NULL, 0, &n, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_get_tier_nodes(s, "mock0", NULL, 0, NULL, NULL), KVA_EINVAL);
  l2_finish(rt);
}
END_TEST

/* Randomized (fixed seeds): 32 keys written again and again while the
 * tier is bypassed, frozen or failing some keys' stores at random, L1
 * emptied now and then; every read must be a key's newest version. */
static uint32_t next(uint64_t *x) {
  *x = *x * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*x >> 33);
}

START_TEST(random_drops_never_serve_an_older_version) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", "l2_bypass_failures=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  enum { KEYS = 32, STEPS = 400 };
  uint32_t ver[KEYS] = {0};
  uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(_i + 1);
  size_t served = 0;
  for (int step = 0; step < STEPS; step++) {
    uint32_t r = next(&x) % 100;
    if (r < 8) {
      bypass(s, next(&x) % 2);
    } else if (r < 12) {
      freeze(s, next(&x) % 4 == 0);
    } else if (r < 20) {
      uint64_t bad[4];
      size_t nbad = next(&x) % 5;
      for (size_t i = 0; i < nbad; i++) bad[i] = next(&x) % KEYS;
      l2_fail_stores(s, 0, bad, nbad);
    } else if (r < 30) {
      l2_flush(s);
      ck_assert_int_ge(kva_clear(s, 0), 0);
    } else if (r < 70) {
      uint64_t id = next(&x) % KEYS;
      uint32_t v = ++ver[id];
      l2_flush(s); /* no store holds it read-locked: a rewrite may take it */
      int st = l2_l1_state(s, id);
      if (st != L1_ABSENT && (st & L1_TEMPORARY)) { /* a prefetched copy: written anew */
        l2_delete_one(s, id, 1);
        st = L1_ABSENT;
      }
      if (st == L1_ABSENT)
        l2_write(s, &id, 1, &l, v);
      else
        l2_rewrite(s, &id, 1, &l, v);
    } else {
      l2_flush(s);
      uint64_t id = next(&x) % KEYS;
      if (!ver[id] || l2_prefetch(s, &id, 1, &l, 0) == 0) continue;
      l2_read_release(s, &id, 1, ver[id], 0); /* asserts the newest version's bytes */
      served++;
    }
  }
  bypass(s, false);
  freeze(s, false);
  ck_assert_uint_gt(served, 0);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_rewrite_rule");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, a_rewrite_not_sent_to_a_bypassed_tier_is_not_read_in_its_older_version);
  tcase_add_test(tc, a_rewrite_whose_store_failed_is_not_read_in_its_older_version);
  tcase_add_test(tc, a_rewrite_written_while_frozen_is_not_read_in_its_older_version);
  tcase_add_test(tc, a_later_store_serves_the_key_again);
  tcase_add_loop_test(tc, random_drops_never_serve_an_older_version, 0, 8);
  suite_add_tcase(su, tc);
  return su;
}
