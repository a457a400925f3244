/*
 * l2_lookup_test.c — reading across tiers (LMCache v1 StorageManager;
 * docs/invariants.md I-FA-2, I-PC-1): kva_lookup's per-tier prefix walk and
 * its pins, kva_l2_contains, kva_l2_get_tier_stats, kva_memcheck of L2
 * locks, and prefetches that continue in L2 where L1 stops, tier after
 * tier, cut at the first failed load.
 */
#include <check.h>
#include <string.h>

#include "l1/l1_manager.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define MiB (1024u * 1024u)

static void seed_one(kva_storage *s, uint32_t tier, uint64_t id, const kva_layout *l) {
  l2_seed(s, tier, &id, 1, l, 0);
}

/* ---- kva_lookup (get_block_mapping / batched_contains) ------------------ */

START_TEST(lookup_maps_the_prefix_tier_by_tier) {
  kva_runtime *rt = l2_start(0, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  uint64_t l1[2] = {0, 1}, m0[2] = {2, 3};
  l2_write(s, l1, 2, &l, 0);
  l2_flush(s); /* now in both tiers as well */
  l2_seed(s, 0, m0, 2, &l, 0);
  seed_one(s, 1, 4, &l);
  uint64_t asked0 = l2_stats(s, 0).lookups, asked1 = l2_stats(s, 1).lookups;
  kva_tier_hits h = l2_lookup_range(s, 0, 5, 0);
  ck_assert_uint_eq(h.ntiers, 3);
  ck_assert_str_eq(h.tier[0].name, "L1");
  ck_assert_str_eq(h.tier[1].name, "mock0");
  ck_assert_str_eq(h.tier[2].name, "mock1");
  ck_assert_uint_eq(h.tier[0].hits, 2);
  ck_assert_uint_eq(h.tier[1].hits, 2);
  ck_assert_uint_eq(h.tier[2].hits, 1);
  ck_assert_uint_eq(h.total, 5);
  /* each tier was asked only for the keys after the tiers before it */
  ck_assert_uint_eq(l2_stats(s, 0).lookups - asked0, 3);
  ck_assert_uint_eq(l2_stats(s, 1).lookups - asked1, 1);
  ck_assert_int_eq(l2_l1_state(s, 2), L1_ABSENT); /* a lookup loads nothing */
  l2_finish(rt);
}
END_TEST

/* A tier with no hit on the remaining keys is skipped; the walk goes on to
 * the next tier with the same keys, and never comes back. */
START_TEST(lookup_skips_a_tier_without_a_hit) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  seed_one(s, 0, 2, &l);
  seed_one(s, 0, 4, &l);
  uint64_t m1[2] = {1, 2};
  l2_seed(s, 1, m1, 2, &l, 0);
  l2_reserve(s, 0, &l);
  kva_tier_hits h = l2_lookup_range(s, 0, 5, 0); /* key 0 is write-locked: not a hit */
  ck_assert_uint_eq(h.tier[0].hits, 0);
  ck_assert_uint_eq(h.total, 0);
  ck_assert_int_eq(l2_delete_one(s, 0, 1), KVA_OK);
  ck_assert_int_eq(l2_finish_one(s, 0), KVA_KEY_NOT_EXIST); /* the writer lets go */
  /* now: mock0 {2,4}, mock1 {0,1,2} */
  l2_seed(s, 1, &(uint64_t){0}, 1, &l, 0);
  h = l2_lookup_range(s, 0, 5, 0);
  ck_assert_uint_eq(h.tier[0].hits, 0);
  ck_assert_uint_eq(h.tier[1].hits, 0);
  ck_assert_uint_eq(h.tier[2].hits, 3);
  ck_assert_uint_eq(h.total, 3);
  l2_finish(rt);
}
END_TEST

START_TEST(lookup_counts_a_failing_tier_as_empty) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", "l2_bypass_failures=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 2, &l);
  l2_seed_range(s, 1, 0, 3, &l);
  l2_set_down(s, 0, true);
  kva_tier_hits h = l2_lookup_range(s, 0, 4, 0);
  ck_assert_uint_eq(h.tier[1].hits, 0);
  ck_assert_uint_eq(h.tier[2].hits, 3);
  ck_assert_uint_eq(h.total, 3);
  l2_set_down(s, 0, false);
  h = l2_lookup_range(s, 0, 4, 0);
  ck_assert_uint_eq(h.tier[1].hits, 2);
  ck_assert_uint_eq(h.tier[2].hits, 1);
  l2_finish(rt);
}
END_TEST

/* The schema allows eight L2 tiers; the walk reaches the last one, whose
 * hits count in total (the per-tier report holds L1 and 7 tiers). */
START_TEST(lookup_reaches_the_eighth_tier) {
  kva_runtime *rt = l2_start(0, 64 * MiB, 8, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  seed_one(s, 7, 0, &l);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 1, &l), 1); /* the prefetch finds it */
  l2_read_release_range(s, 0, 1, 0);
  ck_assert_int_eq(kva_clear(s, 0), 1);
  kva_tier_hits h = l2_lookup_range(s, 0, 1, 0);
  ck_assert_uint_eq(h.total, 1);
  ck_assert_uint_eq(h.ntiers, 8);
  ck_assert_str_eq(h.tier[7].name, "mock6");
  l2_finish(rt);
}
END_TEST

START_TEST(lookup_refuses_bad_arguments) {
  kva_runtime *rt = l2_start(0, 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_key k = fixture_key(0), bad = k;
  bad.hash_len = 0;
  kva_tier_hits h;
  ck_assert_int_eq(kva_lookup(s, &k, 0, 0, &h), KVA_EINVAL);
  ck_assert_int_eq(kva_lookup(s, &k, 1, 0, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_lookup(s, &bad, 1, 0, &h), KVA_EINVAL);
  ck_assert_int_eq(kva_lookup(NULL, &k, 1, 0, &h), KVA_EINVAL);
  ck_assert_int_eq(kva_unpin(s, &bad, 1), KVA_EINVAL);
  l2_finish(rt);
}
END_TEST

/* ---- pins --------------------------------------------------------------- */

/* L1 holds exactly four objects; a pinned one is never evicted, so four
 * new ones cannot fit until it is unpinned. */
START_TEST(pinned_object_survives_eviction) {
  kva_runtime *rt = l2_start(2, 1 * MiB, 0, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(256 * 1024);
  fixture_write(s, 0, 4, &l);
  kva_tier_hits h = l2_lookup_range(s, 0, 1, 1);
  ck_assert_uint_eq(h.ntiers, 1);
  ck_assert_uint_eq(h.total, 1);
  ck_assert_int_eq(l2_l1_state(s, 0), L1_PINNED); /* pinned, not read-locked */
  kva_key k[4];
  kva_buf b[4];
  int st[4];
  for (int i = 0; i < 4; i++) k[i] = fixture_key(10 + (uint64_t)i);
  ck_assert_int_eq(kva_reserve_write(s, k, 4, &l, KVA_WRITE_NEW, b, st), 0);
  ck_assert_int_eq(st[0], KVA_OUT_OF_MEMORY);
  fixture_write(s, 10, 3, &l); /* evicts 1, 2 and 3 */
  ck_assert_int_eq(l2_l1_state(s, 0), L1_PINNED);
  ck_assert_int_eq(l2_l1_state(s, 1), L1_ABSENT);
  ck_assert_int_eq(l2_delete_one(s, 0, 0), KVA_KEY_LOCKED);
  kva_key k0 = fixture_key(0);
  ck_assert_int_eq(kva_unpin(s, &k0, 1), 1);
  fixture_write(s, 20, 4, &l); /* now key 0 can go */
  ck_assert_int_eq(l2_l1_state(s, 0), L1_ABSENT);
  l2_finish(rt);
}
END_TEST

START_TEST(pins_stack_and_unpin_counts_what_it_released) {
  kva_runtime *rt = l2_start(0, 64 * MiB, 0, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  fixture_write(s, 0, 2, &l);
  kva_key k[3] = {fixture_key(0), fixture_key(1), fixture_key(2)};
  ck_assert_int_eq(kva_unpin(s, k, 1), 0);     /* never pinned */
  ck_assert_int_eq(kva_unpin(s, k + 2, 1), 0); /* absent */
  l2_lookup_range(s, 0, 1, 1);
  l2_lookup_range(s, 0, 2, 1);
  ck_assert_int_eq(kva_unpin(s, k, 3), 2); /* 0 and 1 once each; 2 absent */
  ck_assert_int_eq(l2_l1_state(s, 0), L1_PINNED);
  ck_assert_int_eq(l2_l1_state(s, 1), 0);
  ck_assert_int_eq(kva_unpin(s, k, 2), 1);
  ck_assert_int_eq(l2_l1_state(s, 0), 0);
  ck_assert_int_eq(kva_unpin(s, k, 1), 0);
  l2_finish(rt);
}
END_TEST

/* kvact.h: memcheck passes only when no L1 read, write or pin lock is held. */
START_TEST(memcheck_reports_a_pin) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 0, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  fixture_write(s, 0, 1, &l);
  l2_lookup_range(s, 0, 1, 1);
  char report[256] = "";
  ck_assert_int_eq(kva_memcheck(s, report, sizeof(report)), KVA_EIO);
  ck_assert_msg(strstr(report, "1 pins") != NULL, "report: %s", report);
  kva_key k0 = fixture_key(0);
  ck_assert_int_eq(kva_unpin(s, &k0, 1), 1);
  l2_finish(rt);
}
END_TEST

/* Pins are L1's: a lookup with pin gives its L2 locks back like any other. */
START_TEST(pin_holds_no_l2_lock) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_write_range(s, 0, 1, &l, 0);
  l2_flush(s);
  l2_seed_range(s, 0, 1, 2, &l);
  kva_tier_hits h = l2_lookup_range(s, 0, 3, 1);
  ck_assert_uint_eq(h.tier[0].hits, 1);
  ck_assert_uint_eq(h.tier[1].hits, 2);
  ck_assert_int_eq(l2_l1_state(s, 0), L1_PINNED);
  ck_assert_int_eq(l2_l1_state(s, 1), L1_ABSENT);
  l2_assert_unlocked(s);
  kva_key k = fixture_key(0);
  ck_assert_int_eq(kva_unpin(s, &k, 1), 1);
  l2_finish(rt);
}
END_TEST

/* ---- kva_l2_contains and kva_memcheck ----------------------------------- */

START_TEST(l2_contains_answers_per_tier) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", "l2_bypass_failures=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  seed_one(s, 0, 0, &l);
  kva_key k0 = fixture_key(0), k1 = fixture_key(1), bad = k0;
  bad.model[0] = 0;
  ck_assert_int_eq(kva_l2_contains(s, "mock0", &k0), 1);
  ck_assert_int_eq(kva_l2_contains(s, "mock0", &k1), 0);
  ck_assert_int_eq(kva_l2_contains(s, "mock1", &k0), 0);
  ck_assert_int_eq(kva_l2_contains(s, "nope", &k0), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_contains(s, "L1", &k0), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_contains(s, NULL, &k0), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_contains(s, "mock0", NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_contains(s, "mock0", &bad), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_contains(NULL, "mock0", &k0), KVA_EINVAL);
  l2_assert_unlocked(s); /* contains gives its lookup lock back */
  l2_set_down(s, 0, true);
  ck_assert_int_eq(kva_l2_contains(s, "mock0", &k0), KVA_EIO);
  l2_set_down(s, 0, false);
  ck_assert_int_eq(kva_l2_contains(s, "mock0", &k0), 1);
  l2_finish(rt);
}
END_TEST

START_TEST(memcheck_names_the_tier_holding_a_lock) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  uint64_t ids[2] = {0, 1};
  l2_seed(s, 1, ids, 2, &l, 0);
  fixture_memcheck_clean(s);
  ck_assert_uint_eq(l2_lock(s, 1, ids, 2), 2);
  char report[256] = "";
  ck_assert_int_eq(kva_memcheck(s, report, sizeof(report)), KVA_EIO);
  ck_assert_msg(strstr(report, "mock1") && strstr(report, "2 keys locked"), "report: %s", report);
  l2_unlock(s, 1, ids, 2);
  l2_finish(rt); /* waits for the unlock, then memcheck passes */
}
END_TEST

/* ---- prefetch across tiers (LMCache v1 prefetch_all_done_callback) ------ */

typedef struct tiered_case {
  uint32_t ntiers;
  size_t n;
  uint8_t tier_of[8]; /* the tier holding key i */
  int fail;           /* the key whose load fails, or -1 */
  size_t hits;
} tiered_case;

static const tiered_case tiered[] = {
    {2, 5, {0, 0, 0, 1, 1}, -1, 5},      /* test_all_chunks_retrieved_successfully */
    {3, 7, {0, 0, 0, 1, 1, 2, 2}, 4, 4}, /* test_middle_tier_partial_retrieval */
    {3, 7, {0, 0, 0, 1, 1, 2, 2}, 2, 2}, /* test_first_tier_partial_retrieval */
    {1, 5, {0, 0, 0, 0, 0}, 3, 3},       /* test_single_tier_partial_retrieval */
};

/* Keys past the first failed load are loaded (every tier loads at once)
 * but never published: gone from L1, not a read lock left anywhere. */
START_TEST(prefetch_is_cut_at_the_first_failed_load) {
  const tiered_case *c = &tiered[_i];
  kva_runtime *rt = l2_start(2, 64 * MiB, (int)c->ntiers, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  for (size_t i = 0; i < c->n; i++) seed_one(s, c->tier_of[i], i, &l);
  if (c->fail >= 0) l2_fail_loads(s, c->tier_of[c->fail], &(uint64_t){(uint64_t)c->fail}, 1);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, c->n, &l), c->hits);
  l2_expect_states(s, 0, c->hits, 1);
  l2_expect_states(s, c->hits, c->n - c->hits, L1_ABSENT);
  kva_storage_stats st = l2_storage_stats(s);
  ck_assert_uint_eq(st.l2_prefetches, 1);
  ck_assert_uint_eq(st.l2_load_failures, c->fail >= 0);
  ck_assert_uint_eq(st.l2_loaded_keys, c->n - (c->fail >= 0));
  l2_read_release_range(s, 0, c->hits, 0);
  l2_finish(rt);
}
END_TEST

/* ---- the storage manager over L1 and L2 (LMCache 4.3, 6.4) -------------- */

/* Two workers, one tier, and keys ids[] written (version v) and stored: in
 * L1 and in the tier, with no store lock left. */
static kva_runtime *start_stored(const uint64_t *ids, size_t n, uint32_t v) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", NULL);
  kva_layout l = fixture_layout_basic();
  l2_write(kva_storage_of(rt), ids, n, &l, v);
  l2_flush(kva_storage_of(rt));
  return rt;
}

/* test_prefetch_from_l2: after a flush the store holds no lock, so a clear
 * empties L1 completely; all five come back from L2. */
START_TEST(prefetch_loads_what_l1_lost) {
  uint64_t ids[5] = {0, 1, 2, 3, 4};
  kva_runtime *rt = start_stored(ids, 5, 3);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  ck_assert_int_eq(kva_clear(s, 0), 5);
  ck_assert_uint_eq(l2_storage_stats(s).l1_used_bytes, 0);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 5, &l), 5);
  l2_read_release(s, ids, 5, 3, 0);
  ck_assert_uint_eq(l2_storage_stats(s).l2_loaded_keys, 5);
  ck_assert_uint_eq(l2_prefetch_range(s, 7, 3, &l), 0); /* test_prefetch_nothing_in_l2 */
  l2_finish(rt);
}
END_TEST

/* test_prefetch_mixed_l1_l2, test_prefetch_l1_prefix_plus_l2_continuation */
START_TEST(prefetch_continues_in_l2_after_the_l1_prefix) {
  uint64_t ids[5] = {0, 1, 2, 3, 4};
  kva_runtime *rt = start_stored(ids, 5, 1);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3] = {fixture_key(2), fixture_key(3), fixture_key(4)};
  int st[3];
  ck_assert_int_eq(kva_delete(s, k, 3, 0, st), 3); /* the store's locks are gone */
  ck_assert_uint_eq(l2_prefetch(s, ids, 5, &l, 2), 5);
  l2_expect_states(s, 0, 5, 3);
  l2_read_release(s, ids, 5, 1, 2);
  ck_assert_uint_eq(l2_storage_stats(s).l2_loaded_keys, 3);
  l2_finish(rt);
}
END_TEST

/* test_prefetch_l2_partial_prefix, and read_prefetched's all-or-nothing:
 * a read of more than the hits releases the locks it found. */
START_TEST(prefetch_from_l2_stops_at_its_gap) {
  uint64_t ids[4] = {0, 1, 3, 4};
  kva_runtime *rt = start_stored(ids, 4, 0);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  ck_assert_int_eq(kva_clear(s, 0), 4);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 5, &l), 2);
  ck_assert_int_eq(l2_l1_state(s, 3), L1_ABSENT);
  kva_key k[5];
  kva_buf b[5];
  for (int i = 0; i < 5; i++) k[i] = fixture_key((uint64_t)i);
  ck_assert_int_eq(kva_read_prefetched(s, k, 5, b), KVA_KEY_NOT_EXIST);
  l2_expect_states(s, 0, 2, 0);
  l2_finish(rt);
}
END_TEST

/* LMCache test_prefetch_skipped_keys_released_with_extra over L2 (6.4):
 * the L1 prefix is locked with 1 + extra, the L1 hit past the gap (key 3,
 * kept out of L2 by a freeze) is released, L2 continues from the gap and
 * stops at its own (key 3); key 4, in L2 past that gap, is not loaded. */
START_TEST(prefetch_releases_l1_hits_past_the_gap) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  uint64_t l1[2] = {0, 1}, more[2] = {2, 4};
  l2_write(s, l1, 2, &l, 0);
  l2_write_l1_only(s, &(uint64_t){3}, 1, &l, 0);
  l2_seed(s, 0, more, 2, &l, 0);
  uint64_t ids[5] = {0, 1, 2, 3, 4};
  ck_assert_uint_eq(l2_prefetch(s, ids, 5, &l, 1), 3);
  ck_assert_int_eq(l2_l1_state(s, 0), 2);
  ck_assert_int_eq(l2_l1_state(s, 2), 2);
  ck_assert_int_eq(l2_l1_state(s, 3), 0);
  ck_assert_int_eq(l2_l1_state(s, 4), L1_ABSENT);
  l2_read_release(s, ids, 3, 0, 1);
  l2_finish(rt);
}
END_TEST

/* Stores count on every tier they reach, loads on the tier that served
 * them; seeding an adapter directly moves nothing through the controllers. */
START_TEST(tier_stats_count_keys_and_bytes_per_tier) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  size_t kb = kva_layout_bytes(&l);
  l2_write_range(s, 0, 5, &l, 0);
  l2_flush(s);
  uint64_t seeded[3] = {10, 11, 12};
  l2_seed(s, 1, seeded, 3, &l, 0);
  ck_assert_uint_eq(l2_prefetch(s, seeded, 3, &l, 0), 3);
  l2_read_release(s, seeded, 3, 0, 0);
  kva_l2_tier_stats t0, t1;
  ck_assert_int_eq(kva_l2_get_tier_stats(s, "mock0", &t0), KVA_OK);
  ck_assert_int_eq(kva_l2_get_tier_stats(s, "mock1", &t1), KVA_OK);
  ck_assert_uint_eq(t0.stored_keys, 5);
  ck_assert_uint_eq(t0.stored_bytes, 5 * kb);
  ck_assert_uint_eq(t1.stored_keys, 5);
  ck_assert_uint_eq(t0.loaded_keys, 0);
  ck_assert_uint_eq(t0.loaded_bytes, 0);
  ck_assert_uint_eq(t1.loaded_keys, 3);
  ck_assert_uint_eq(t1.loaded_bytes, 3 * kb);
  ck_assert_uint_eq(t0.adapter.objects, 5);
  ck_assert_uint_eq(t1.adapter.objects, 8);
  ck_assert_uint_eq(t1.adapter.bytes, 8 * kb);
  ck_assert_int_eq(t0.bypassed, 0);
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 1), KVA_OK);
  ck_assert_int_eq(kva_l2_get_tier_stats(s, "mock0", &t0), KVA_OK);
  ck_assert_int_eq(t0.bypassed, 1);
  ck_assert_int_eq(kva_l2_get_tier_stats(s, "L1", &t0), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_get_tier_stats(s, "mock9", &t0), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_get_tier_stats(s, "mock0", NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 0), KVA_OK);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_lookup");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, lookup_maps_the_prefix_tier_by_tier);
  tcase_add_test(tc, lookup_skips_a_tier_without_a_hit);
  tcase_add_test(tc, lookup_counts_a_failing_tier_as_empty);
  tcase_add_test(tc, lookup_reaches_the_eighth_tier);
  tcase_add_test(tc, lookup_refuses_bad_arguments);
  tcase_add_test(tc, pinned_object_survives_eviction);
  tcase_add_test(tc, pins_stack_and_unpin_counts_what_it_released);
  tcase_add_test(tc, memcheck_reports_a_pin);
  tcase_add_test(tc, pin_holds_no_l2_lock);
  tcase_add_test(tc, l2_contains_answers_per_tier);
  tcase_add_test(tc, tier_stats_count_keys_and_bytes_per_tier);
  tcase_add_test(tc, memcheck_names_the_tier_holding_a_lock);
  tcase_add_loop_test(tc, prefetch_is_cut_at_the_first_failed_load, 0,
                      (int)(sizeof(tiered) / sizeof(tiered[0])));
  tcase_add_test(tc, prefetch_loads_what_l1_lost);
  tcase_add_test(tc, prefetch_continues_in_l2_after_the_l1_prefix);
  tcase_add_test(tc, prefetch_from_l2_stops_at_its_gap);
  tcase_add_test(tc, prefetch_releases_l1_hits_past_the_gap);
  suite_add_tcase(su, tc);
  return su;
}
