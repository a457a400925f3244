/*
 * l2_prefetch_test.c — what a prefetch that reaches L2 returns and leaves
 * in L1, seen through the facade (LMCache test_prefetch_controller.py, OLD
 * design, plus the L1-then-L2 span): prefix-only hit counts, which keys end
 * up read-locked, which tier each key is loaded from, and how the L1
 * prefix, freeze, bypass and a missing layout bound the L2 part.
 *
 * LMCache's prefetched objects are temporary, so these runtimes start with
 * prefetch_writeback=false; l2_prefetch_writeback_test.c covers the default.
 */
#include <check.h>
#include <stdint.h>

#include "l1/l1_manager.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define TEMP_READ (1 | L1_TEMPORARY) /* a prefetched object, one read lock */

/* Loop tests run threaded (_i = 0) and deterministic (_i = 1); the table
 * test runs each case both ways (_i % 2). */
static const int workers[] = {2, 0};

/* ---- lifecycle (test_start_stop, test_start_stop_no_adapters) ----------- */

START_TEST(runtime_with_an_idle_tier_starts_and_stops) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  ck_assert_uint_eq(l2_stats(kva_storage_of(rt), 0).lookups, 0);
  l2_finish(rt);
}
END_TEST

/* test_no_adapters: no tier, so no prefetch controller; the answer is the
 * L1 prefix, at once. */
START_TEST(without_tiers_a_prefetch_gets_the_l1_prefix_only) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 0, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 0);
  const uint64_t k0[] = {0};
  l2_write(s, k0, 1, &l, 0);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 1);
  ck_assert_int_eq(l2_readers(s, 0), 1);
  ck_assert_int_eq(l2_readers(s, 1), -1);
  l2_read_release_range(s, 0, 1, 0);
  l2_finish(rt);
}
END_TEST

/* ---- the L2 prefix, one tier and two -------------------------------------- */

/* A prefetch of keys [0, n), none of them in L1, with held[t] in tier t
 * (bit i = key i). A key two tiers hold has other bytes in the higher one
 * (l2_seed_tiers), so reading version 0 proves it came from the lowest. */
typedef struct prefix_case {
  const char *name;
  uint32_t ntiers;
  size_t n;
  uint8_t held[2];
  size_t hits;
  uint64_t loads[2]; /* keys each tier loaded */
} prefix_case;

static const prefix_case prefix_cases[] = {
    {"full_prefix_hit_read_locks_every_key", 1, 5, {0x1f}, 5, {5}},
    /* test_prefix_with_gap: L2 holds 0, 1, 3, 4 */
    {"prefetch_stops_at_the_first_gap_in_l2", 1, 5, {0x1b}, 2, {2}},
    {"missing_first_key_loads_nothing", 1, 4, {0x0e}, 0, {0}},
    {"empty_l2_gives_no_hits", 1, 3, {0}, 0, {0}},
    {"disjoint_tiers_fill_one_prefix", 2, 4, {0x03, 0x0c}, 4, {2, 2}},
    /* test_overlap_first_wins: tier 0 holds {0, 1}, tier 1 holds {1, 2} */
    {"overlapping_tiers_load_each_key_from_the_lowest", 2, 3, {0x03, 0x06}, 3, {2, 1}},
};

/* The hit prefix is read-locked once; keys past it are never reserved nor
 * loaded; being temporary, the prefix is gone from L1 at its release. */
START_TEST(prefetch_loads_the_l2_prefix_from_the_lowest_tier) {
  const prefix_case *c = &prefix_cases[_i / 2];
  kva_runtime *rt = l2_start_no_writeback(workers[_i % 2], (int)c->ntiers, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_tiers(s, c->ntiers, c->held, &l);
  size_t hits = l2_prefetch_range(s, 0, c->n, &l);
  ck_assert_msg(hits == c->hits, "%s: %zu hits, want %zu", c->name, hits, c->hits);
  l2_expect_states(s, 0, c->hits, TEMP_READ);
  l2_expect_states(s, c->hits, c->n - c->hits, L1_ABSENT);
  for (uint32_t t = 0; t < c->ntiers; t++) {
    kva_l2_stats st = l2_stats(s, t);
    ck_assert_msg(st.lookups == c->n, "%s: tier %u looked up %lu keys, want %zu", c->name, t,
                  (unsigned long)st.lookups, c->n);
    ck_assert_msg(st.loads == c->loads[t], "%s: tier %u loaded %lu keys, want %lu", c->name, t,
                  (unsigned long)st.loads, (unsigned long)c->loads[t]);
  }
  if (c->hits) l2_read_release_range(s, 0, c->hits, 0);
  l2_expect_states(s, 0, c->n, L1_ABSENT);
  l2_finish(rt);
}
END_TEST

START_TEST(sequential_requests_each_get_their_prefix) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 3, &l);
  l2_seed_range(s, 0, 10, 4, &l);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 3);
  ck_assert_uint_eq(l2_prefetch_range(s, 10, 4, &l), 4);
  l2_read_release_range(s, 0, 3, 0);
  l2_read_release_range(s, 10, 4, 0);
  l2_finish(rt);
}
END_TEST

/* ---- results (test_query_returns_int_then_none, ..._before_completion) --- */

START_TEST(result_is_readable_exactly_once) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1};
  l2_seed(s, 0, ids, 2, &l, 0);
  kva_prefetch *h = l2_submit(s, ids, 2, &l, 0);
  ck_assert_uint_eq(l2_wait(s, h), 2);
  size_t hits = 99;
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 0, &hits), KVA_EINVAL);
  l2_read_release(s, ids, 2, 0, 0);
  l2_finish(rt);
}
END_TEST

/* While the tier is slow the result is not there yet (EAGAIN, handle kept);
 * a handle nobody was given is refused. */
START_TEST(result_is_pending_while_the_tier_works) {
  kva_runtime *rt = l2_start_no_writeback(2, 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1};
  l2_seed(s, 0, ids, 2, &l, 0);
  l2_set_latency(s, 0, 200000);
  kva_prefetch *h = l2_submit(s, ids, 2, &l, 0);
  size_t hits = 99;
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EAGAIN);
  ck_assert_int_eq(kva_query_prefetch(s, (kva_prefetch *)(uintptr_t)0x7777000000003ull, &hits),
                   KVA_EINVAL);
  ck_assert_uint_eq(l2_wait(s, h), 2);
  l2_read_release(s, ids, 2, 0, 0);
  l2_finish(rt);
}
END_TEST

/* "Not done yet" from a wait is KVA_ETIMEDOUT whatever the timeout, 0
 * included (a query's is KVA_EAGAIN), and the handle stays usable.
 * Deterministic mode: the tier's latency runs on virtual time, so the load
 * is still pending until the wait is allowed to move the clock. */
START_TEST(wait_0_while_the_tier_works_times_out_and_keeps_the_handle) {
  kva_runtime *rt = l2_start_no_writeback(0, 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1};
  l2_seed(s, 0, ids, 2, &l, 0);
  l2_set_latency(s, 0, 1000000);
  kva_prefetch *h = l2_submit(s, ids, 2, &l, 0);
  size_t hits = 99;
  ck_assert_int_eq(kva_wait_prefetch(s, h, 0, &hits), KVA_ETIMEDOUT);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 1, &hits), KVA_ETIMEDOUT);
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EAGAIN);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 0, &hits), KVA_ETIMEDOUT);
  ck_assert_uint_eq(hits, 99);
  ck_assert_int_ge(kva_prefetch_eventfd(h), 0);
  ck_assert_uint_eq(l2_wait(s, h), 2);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 0, &hits), KVA_EINVAL);
  l2_read_release(s, ids, 2, 0, 0);
  l2_finish(rt);
}
END_TEST

/* ---- the L1 prefix and the L2 remainder ----------------------------------- */

/* Keys 0, 1 in L1, 2, 3 only in L2: one prefix of 4; only the remainder is
 * looked up and loaded. */
START_TEST(l1_prefix_continues_in_l2) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t in_l1[] = {0, 1}, in_l2[] = {2, 3};
  l2_write_l1_only(s, in_l1, 2, &l, 1);
  l2_seed(s, 0, in_l2, 2, &l, 0);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 4, &l), 4);
  l2_expect_states(s, 0, 2, 1);
  l2_expect_states(s, 2, 2, TEMP_READ);
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.lookups, 2);
  ck_assert_uint_eq(st.loads, 2);
  l2_read_release(s, in_l1, 2, 1, 0);
  l2_read_release(s, in_l2, 2, 0, 0);
  l2_finish(rt);
}
END_TEST

/* Key 1 is missing in L1 but in L2; keys 2, 3 are in L1 past that gap (and
 * in L2 too, as write-back leaves them). The L1 lock stops at the gap, the
 * L2 part loads key 1, and keys 2, 3 are obtained again from L1: 4 hits,
 * each read-locked once, with L1's own bytes. */
START_TEST(l1_hits_past_a_gap_are_obtained_again) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t in_l1[] = {0, 2, 3}, in_l2[] = {1, 2, 3}, k0[] = {0}, k1[] = {1};
  l2_write_l1_only(s, in_l1, 3, &l, 1);
  l2_seed(s, 0, in_l2, 3, &l, 0);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 4, &l), 4);
  l2_expect_states(s, 0, 1, 1);
  l2_expect_states(s, 1, 1, TEMP_READ);
  l2_expect_states(s, 2, 2, 1);
  ck_assert_uint_eq(l2_stats(s, 0).loads, 1);
  l2_read_release(s, k0, 1, 1, 0);
  l2_read_release(s, k1, 1, 0, 0);
  l2_read_release(s, in_l1 + 1, 2, 1, 0);
  l2_expect_states(s, 2, 2, 0); /* L1's own objects stay, unlocked */
  l2_finish(rt);
}
END_TEST

/* Held keys take 1 + extra_readers locks like loaded ones. Key 1's load
 * fails, so the prefix is key 0: key 2, held in L1 past that gap, gets its
 * locks back and stays; key 3, loaded past it, is removed. */
START_TEST(l1_hits_held_past_a_failed_load_are_released) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t in_l1[] = {2}, in_l2[] = {0, 1, 2, 3}, bad[] = {1};
  l2_write_l1_only(s, in_l1, 1, &l, 1);
  l2_seed(s, 0, in_l2, 4, &l, 0);
  l2_fail_loads(s, 0, bad, 1);
  ck_assert_uint_eq(l2_prefetch(s, in_l2, 4, &l, 2), 1);
  l2_expect_states(s, 0, 1, 3 | L1_TEMPORARY);
  l2_expect_states(s, 1, 1, L1_ABSENT);
  l2_expect_states(s, 2, 1, 0);
  l2_expect_states(s, 3, 1, L1_ABSENT);
  l2_read_release(s, in_l2, 1, 0, 2);
  l2_fail_loads(s, 0, NULL, 0);
  ck_assert_uint_eq(l2_prefetch(s, in_l2, 4, &l, 2), 4); /* now all of it */
  l2_expect_states(s, 2, 1, 3);
  l2_read_release(s, in_l2, 2, 0, 2);
  l2_read_release(s, in_l1, 1, 1, 2);
  l2_read_release(s, in_l2 + 3, 1, 0, 2);
  l2_finish(rt);
}
END_TEST

/* Key 1 is being written in L1 (write-locked), key 2 is in L1: neither can
 * be loaded; key 1 cannot be held either, so the prefix is key 0, and key 2,
 * held past that gap, is released again; key 3's buffer is dropped. */
START_TEST(l1_key_held_past_a_busy_key_is_released) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t in_l1[] = {2}, in_l2[] = {0, 1, 2, 3};
  l2_write_l1_only(s, in_l1, 1, &l, 1);
  l2_seed(s, 0, in_l2, 4, &l, 0);
  l2_reserve(s, 1, &l);
  ck_assert_uint_eq(l2_prefetch(s, in_l2, 4, &l, 0), 1);
  l2_expect_states(s, 0, 1, TEMP_READ);
  l2_expect_states(s, 1, 1, L1_WRITE_LOCKED);
  l2_expect_states(s, 2, 1, 0);
  l2_expect_states(s, 3, 1, L1_ABSENT);
  ck_assert_uint_eq(l2_stats(s, 0).loads, 1);
  l2_read_release(s, in_l2, 1, 0, 0);
  ck_assert_int_eq(l2_delete_one(s, 1, 1), KVA_OK);
  ck_assert_int_eq(l2_finish_one(s, 1), KVA_KEY_NOT_EXIST); /* the writer lets go */
  l2_finish(rt);
}
END_TEST

/* ---- what keeps L2 out ------------------------------------------------------ */

START_TEST(prefetch_without_layout_never_consults_l2) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2};
  l2_seed(s, 0, ids + 1, 2, &l, 0);
  l2_write_l1_only(s, ids, 1, &l, 0);
  kva_prefetch *h = l2_submit(s, ids, 3, NULL, 0);
  ck_assert_uint_eq(l2_wait(s, h), 1);
  ck_assert_uint_eq(l2_stats(s, 0).lookups, 0);
  l2_expect_states(s, 1, 2, L1_ABSENT);
  l2_read_release(s, ids, 1, 0, 0);
  l2_finish(rt);
}
END_TEST

START_TEST(frozen_storage_does_not_consult_l2) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 3, &l);
  ck_assert_int_eq(kva_set_freeze(s, 1), KVA_OK);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 0);
  ck_assert_uint_eq(l2_stats(s, 0).lookups, 0);
  l2_expect_states(s, 0, 3, L1_ABSENT);
  ck_assert_int_eq(kva_set_freeze(s, 0), KVA_OK);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 3);
  l2_read_release_range(s, 0, 3, 0);
  l2_finish(rt);
}
END_TEST

/* Both tiers hold the keys; with tier 0 bypassed they come from tier 1 and
 * tier 0 is not even asked. */
START_TEST(bypassed_tier_is_skipped) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 2, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 3, &l);
  l2_seed_range(s, 1, 0, 3, &l);
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 1), KVA_OK);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 3);
  ck_assert_uint_eq(l2_stats(s, 0).lookups, 0);
  ck_assert_uint_eq(l2_stats(s, 1).loads, 3);
  l2_read_release_range(s, 0, 3, 0);
  ck_assert_int_eq(kva_set_tier_bypass(s, "mock0", 0), KVA_OK);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 3);
  ck_assert_uint_eq(l2_stats(s, 0).loads, 3);
  l2_read_release_range(s, 0, 3, 0);
  l2_finish(rt);
}
END_TEST

/* A tier that is down answers its lookup with an error and no keys: the
 * keys come from the next tier. */
START_TEST(down_tier_counts_as_holding_nothing) {
  kva_runtime *rt = l2_start_no_writeback(workers[_i], 2, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 3, &l);
  l2_seed_range(s, 1, 0, 3, &l);
  l2_set_down(s, 0, true);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 3);
  ck_assert_uint_eq(l2_stats(s, 0).loads, 0);
  ck_assert_uint_eq(l2_stats(s, 1).loads, 3);
  l2_read_release_range(s, 0, 3, 0);
  l2_set_down(s, 0, false);
  l2_finish(rt);
}
END_TEST

/* A warm prefetch (kva_prefetch_opts.warm): keys 0..2 in L1 and 3..5 only in L2 are all found and
 * counted, those from L2 stay in L1 (write-back), and no read lock is left
 * once the result is read (by a wait, or a query); a later prefetch finds
 * everything in L1. A bad flag is refused. */
START_TEST(a_warm_prefetch_leaves_no_lock) {
  kva_runtime *rt = l2_start(workers[_i], 64u << 20, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t ids[] = {0, 1, 2, 3, 4, 5}, in_l2[] = {3, 4, 5};
  l2_write_l1_only(s, ids, 3, &l, 1);
  l2_seed(s, 0, in_l2, 3, &l, 0);
  kva_key k[6];
  for (int i = 0; i < 6; i++) k[i] = fixture_key(ids[i]);
  kva_prefetch_opts warm = {.extra_readers = 2, .warm = 1};
  for (int by_query = 0; by_query < 2; by_query++) {
    kva_prefetch *h = NULL;
    ck_assert_int_eq(kva_submit_prefetch_opts(s, k, 6, &l, &warm, &h), KVA_OK);
    size_t hits = 0;
    if (by_query) {
      int rc;
      while ((rc = kva_query_prefetch(s, h, &hits)) == KVA_EAGAIN)
        if (kva_runtime_run_until_idle(rt) == KVA_ENOTSUP) l2_sleep_ms(1);
      ck_assert_int_eq(rc, KVA_OK);
    } else {
      ck_assert_int_eq(kva_wait_prefetch(s, h, 10000, &hits), KVA_OK);
    }
    ck_assert_uint_eq(hits, 6);
    for (uint64_t i = 0; i < 6; i++) ck_assert_int_eq(l2_readers(s, i), 0); /* in L1, unlocked */
  }
  ck_assert_uint_eq(l2_stats(s, 0).loads, 3); /* the second found them in L1 */
  kva_prefetch_opts bad = {.warm = 2}, sparse = {.sparse = 1};
  kva_prefetch *h = NULL;
  ck_assert_int_eq(kva_submit_prefetch_opts(s, k, 6, &l, &bad, &h), KVA_EINVAL);
  ck_assert_int_eq(kva_submit_prefetch_opts(s, k, 6, &l, &sparse, &h), KVA_ENOTSUP);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_prefetch");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, runtime_with_an_idle_tier_starts_and_stops, 0, 2);
  tcase_add_loop_test(tc, without_tiers_a_prefetch_gets_the_l1_prefix_only, 0, 2);
  tcase_add_loop_test(tc, prefetch_loads_the_l2_prefix_from_the_lowest_tier, 0,
                      2 * (int)(sizeof(prefix_cases) / sizeof(prefix_cases[0])));
  tcase_add_loop_test(tc, sequential_requests_each_get_their_prefix, 0, 2);
  tcase_add_loop_test(tc, result_is_readable_exactly_once, 0, 2);
  tcase_add_test(tc, result_is_pending_while_the_tier_works);
  tcase_add_test(tc, wait_0_while_the_tier_works_times_out_and_keeps_the_handle);
  tcase_add_loop_test(tc, l1_prefix_continues_in_l2, 0, 2);
  tcase_add_loop_test(tc, l1_hits_past_a_gap_are_obtained_again, 0, 2);
  tcase_add_loop_test(tc, l1_hits_held_past_a_failed_load_are_released, 0, 2);
  tcase_add_loop_test(tc, l1_key_held_past_a_busy_key_is_released, 0, 2);
  tcase_add_loop_test(tc, prefetch_without_layout_never_consults_l2, 0, 2);
  tcase_add_loop_test(tc, frozen_storage_does_not_consult_l2, 0, 2);
  tcase_add_loop_test(tc, bypassed_tier_is_skipped, 0, 2);
  tcase_add_loop_test(tc, down_tier_counts_as_holding_nothing, 0, 2);
  tcase_add_loop_test(tc, a_warm_prefetch_leaves_no_lock, 0, 2);
  suite_add_tcase(su, tc);
  return su;
}
