/*
 * eviction_test.c — L1 eviction through the whole system: watermark rounds
 * by the eviction controller, each policy's order, the periodic tick, and
 * demand eviction inside reserve_write (the scenarios of LMCache PR #5290:
 * plan first, evict only what is needed, never a locked or requested
 * object; here "needed" means contiguous room, not bytes: see also
 * l1_fragmentation_test.c).
 *
 * Deterministic mode (workers = 0) makes the interleaving of the manager
 * and the controller reproducible; kva_runtime_run_until_idle lets a round
 * finish.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "kvact.h"
#include "l1/policy.h"
#include "tests/support/fixture.h"
#include "tests/support/storage_client.h"

#define PAGE 4096u

/* ---- watermark rounds ----------------------------------------------------- */

START_TEST(crossing_the_watermark_evicts_ratio_of_the_bytes_oldest_first) {
  kva_runtime *rt = fixture_storage(0, 10 * MiB, "eviction.ratio=0.2", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MiB);
  for (int i = 0; i < 7; i++) fixture_write(s, (uint64_t)i, 1, &l);
  kva_runtime_run_until_idle(rt);
  ck_assert_uint_eq(stats_of(s).evicted, 0); /* 70% < 80% */
  fixture_write(s, 7, 1, &l);                /* 80%: a round frees 0.2 * 8 MiB -> 2 objects */
  kva_runtime_run_until_idle(rt);
  ck_assert_uint_eq(stats_of(s).evicted, 2);
  ck_assert(!present(s, 0) && !present(s, 1));
  for (int i = 2; i < 8; i++) ck_assert(present(s, (uint64_t)i));
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(watermark_eviction_skips_locked_objects) {
  kva_runtime *rt = fixture_storage(0, 10 * MiB, "eviction.policy=fifo", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MiB);
  for (int i = 0; i < 7; i++) fixture_write(s, (uint64_t)i, 1, &l);
  lock_key(s, 0);
  lock_key(s, 1);
  fixture_write(s, 7, 1, &l);
  kva_runtime_run_until_idle(rt);
  ck_assert_uint_eq(stats_of(s).evicted, 2);
  ck_assert(!present(s, 2) && !present(s, 3)); /* fifo order, 0 and 1 locked */
  unlock_key(s, 0);
  unlock_key(s, 1);
  ck_assert(present(s, 0) && present(s, 1));
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(ratio_zero_turns_watermark_eviction_off) {
  kva_runtime *rt = fixture_storage(0, 10 * MiB, "eviction.ratio=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MiB);
  for (int i = 0; i < 10; i++) fixture_write(s, (uint64_t)i, 1, &l);
  kva_runtime_advance(rt, 5000000000ull);
  ck_assert_uint_eq(stats_of(s).evicted, 0);
  ck_assert_uint_eq(stats_of(s).l1_objects, 10);
  kva_runtime_shutdown(rt);
}
END_TEST

/* Locks held while usage crossed the watermark: the round finds nothing.
 * Releasing read locks sends no note, so only the tick notices. */
START_TEST(the_periodic_tick_evicts_once_locks_are_released) {
  kva_runtime *rt =
      fixture_storage(0, 10 * MiB, "eviction.policy=fifo", "eviction.interval_ms=100", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MiB);
  for (int i = 0; i < 7; i++) fixture_write(s, (uint64_t)i, 1, &l);
  for (int i = 0; i < 7; i++) lock_key(s, (uint64_t)i);
  fixture_write(s, 7, 1, &l);
  lock_key(s, 7);
  kva_runtime_run_until_idle(rt);
  ck_assert_uint_eq(stats_of(s).evicted, 0);
  for (int i = 0; i < 8; i++) unlock_key(s, (uint64_t)i);
  kva_runtime_run_until_idle(rt);
  ck_assert_uint_eq(stats_of(s).evicted, 0);
  kva_runtime_advance(rt, 150000000ull);
  ck_assert_uint_eq(stats_of(s).evicted, 2);
  ck_assert(!present(s, 0) && !present(s, 1));
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* 7 objects written one at a time, some touched, then an 8th crosses the
 * watermark and a round with ratio 0.1 evicts exactly one object. */
static uint64_t victim_of(const char *policy) {
  char p[64];
  snprintf(p, sizeof(p), "eviction.policy=%s", policy);
  kva_runtime *rt = fixture_storage(0, 10 * MiB, p, "eviction.ratio=0.1", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MiB);
  for (int i = 0; i < 7; i++) fixture_write(s, (uint64_t)i, 1, &l);
  kva_key k0 = fixture_key(0), k1 = fixture_key(1);
  kva_touch(s, &k0, 1);
  kva_touch(s, &k0, 1);
  kva_touch(s, &k1, 1);
  fixture_write(s, 7, 1, &l);
  kva_runtime_run_until_idle(rt);
  ck_assert_uint_eq(stats_of(s).evicted, 1);
  uint64_t victim = UINT64_MAX;
  for (uint64_t i = 0; i < 8; i++) {
    kva_key k = fixture_key(i);
    int st;
    /* a delete probe does not disturb the order of the others */
    if (kva_delete(s, &k, 1, 0, &st) == 0 && st == KVA_KEY_NOT_EXIST) victim = i;
  }
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  return victim;
}

START_TEST(each_policy_picks_its_victim) {
  ck_assert_uint_eq(victim_of("lru"), 2);  /* 0 and 1 were touched after 2 */
  ck_assert_uint_eq(victim_of("fifo"), 0); /* touches do not count */
  ck_assert_uint_eq(victim_of("mru"), 7);  /* the newest */
  ck_assert_uint_eq(victim_of("lfu"), 2);  /* counts 0:3 1:2, 2 reached 1 first */
}
END_TEST

/* A request's chunks: the suffix is evicted before its prefix. */
START_TEST(suffix_chunks_are_evicted_before_their_prefix) {
  kva_runtime *rt = fixture_storage(0, 10 * MiB, "eviction.ratio=0.1", NULL);
  kva_storage *s = kva_storage_of(rt);
  int st[8];
  ck_assert_int_eq(write_batch(s, 0, 8, MiB, st), 8); /* one request of 8 chunks */
  kva_runtime_run_until_idle(rt);
  ck_assert_uint_eq(stats_of(s).evicted, 1);
  ck_assert(!present(s, 7));
  for (int i = 0; i < 7; i++) ck_assert(present(s, (uint64_t)i));
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- demand eviction ------------------------------------------------------ */

START_TEST(demand_eviction_frees_only_the_deficit) {
  kva_runtime *rt = fixture_storage(0, 28 * PAGE, "eviction.ratio=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  int st[64];
  ck_assert_int_eq(write_batch(s, 0, 18, PAGE, st), 18);
  ck_assert_int_eq(write_batch(s, 100, 11, PAGE, st), 11);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.evicted_on_demand, 1);
  ck_assert_uint_eq(x.l1_used_bytes, 28 * PAGE);
  ck_assert(!present(s, 17)); /* the suffix of the resident batch */
  for (int i = 0; i < 17; i++) ck_assert(present(s, (uint64_t)i));
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(a_reservation_that_fits_evicts_nothing) {
  kva_runtime *rt = fixture_storage(0, 28 * PAGE, "eviction.ratio=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  int st[64];
  ck_assert_int_eq(write_batch(s, 0, 18, PAGE, st), 18);
  ck_assert_int_eq(write_batch(s, 100, 10, PAGE, st), 10);
  ck_assert_uint_eq(stats_of(s).evicted_on_demand, 0);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* 4 pages, 4 residents with `locked` of them read-locked; a request of
 * `want` pages cannot be covered: all OOM, nothing resident lost. */
static void uncoverable(int want, int locked) {
  kva_runtime *rt = fixture_storage(0, 4 * PAGE, "eviction.ratio=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  int st[64];
  ck_assert_int_eq(write_batch(s, 0, 4, PAGE, st), 4);
  for (int i = 0; i < locked; i++) lock_key(s, (uint64_t)i);
  ck_assert_int_eq(write_batch(s, 100, (size_t)want, PAGE, st), 0);
  for (int i = 0; i < want; i++) ck_assert_int_eq(st[i], KVA_OUT_OF_MEMORY);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.evicted_on_demand, 0);
  ck_assert_uint_eq(x.l1_objects, 4);
  for (int i = 0; i < locked; i++) unlock_key(s, (uint64_t)i);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}

START_TEST(nothing_is_evicted_when_the_deficit_cannot_be_covered) {
  uncoverable(5, 0);
  uncoverable(3, 2);
  uncoverable(1, 4);
}
END_TEST

START_TEST(demand_eviction_counts_whole_blocks) {
  kva_runtime *rt = fixture_storage(0, 4 * PAGE, "eviction.ratio=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  int st[64];
  ck_assert_int_eq(write_batch(s, 0, 3, 1, st), 3); /* 1 byte = 1 page each */
  lock_key(s, 0);
  ck_assert_int_eq(write_batch(s, 100, 1, PAGE + 1, st), 1);
  ck_assert(!present(s, 2));
  ck_assert(present(s, 1));
  unlock_key(s, 0);
  ck_assert(present(s, 0));
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* [free][1][free][3], a 2-page request: the free pages cover it in bytes
 * but not in one piece. Evicting 3, the least recent, joins it with the
 * free page beside it; 1 stays. */
START_TEST(evicting_a_neighbour_of_free_space_makes_contiguous_room) {
  kva_runtime *rt = fixture_storage(0, 4 * PAGE, "eviction.ratio=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  int st[64];
  ck_assert_int_eq(write_batch(s, 0, 4, PAGE, st), 4); /* order: 3 2 1 0 */
  kva_key k[2] = {fixture_key(0), fixture_key(2)};
  ck_assert_int_eq(kva_delete(s, k, 2, 0, st), 2);
  ck_assert_int_eq(write_batch(s, 100, 1, 2 * PAGE, st), 1);
  ck_assert_uint_eq(stats_of(s).evicted_on_demand, 1);
  ck_assert(!present(s, 3));
  ck_assert(present(s, 1));
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* [0][1][2 locked][3], a 2-page request. 3 is the least recent, but no
 * neighbour of it can join it (2 is locked, the pool ends): evicting it
 * would make no room, so it stays; 1 and 0, next in order and side by side,
 * go. */
START_TEST(a_victim_that_makes_no_room_is_spared) {
  kva_runtime *rt = fixture_storage(0, 4 * PAGE, "eviction.ratio=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  int st[64];
  ck_assert_int_eq(write_batch(s, 0, 4, PAGE, st), 4); /* order: 3 2 1 0 */
  lock_key(s, 2);
  ck_assert_int_eq(write_batch(s, 100, 1, 2 * PAGE, st), 1);
  ck_assert_uint_eq(stats_of(s).evicted_on_demand, 2);
  ck_assert(present(s, 3));
  ck_assert(!present(s, 1));
  ck_assert(!present(s, 0));
  unlock_key(s, 2);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* Mode ALL rewrites a resident key while adding new ones that need room:
 * the rewritten key is part of the request and is never the victim. */
START_TEST(keys_of_the_request_itself_are_never_evicted) {
  kva_runtime *rt = fixture_storage(0, 4 * PAGE, "eviction.ratio=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  int st[64];
  ck_assert_int_eq(write_batch(s, 0, 4, PAGE, st), 4); /* order: 3 2 1 0 */
  kva_layout l = fixture_layout_bytes(PAGE);
  kva_key k[2] = {fixture_key(3), fixture_key(100)};
  kva_buf b[2];
  ck_assert_int_eq(kva_reserve_write(s, k, 2, &l, KVA_WRITE_ALL, b, st), 2);
  ck_assert_int_eq(kva_finish_write(s, k, 2, st), 2);
  ck_assert(present(s, 3));
  ck_assert(!present(s, 2));
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* Other requests that arrive while a demand waits for candidates are held
 * back and served afterwards, in order (threaded, many writers). */
START_TEST(demand_eviction_under_concurrent_writers_stays_consistent) {
  kva_runtime *rt = fixture_storage(2, 64 * PAGE, "eviction.ratio=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  int st[64];
  for (uint64_t round = 0; round < 200; round++)
    ck_assert_int_eq(write_batch(s, round * 8, 8, PAGE, st), 8);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.l1_objects, 64);
  ck_assert_uint_ge(x.evicted_on_demand, 200 * 8 - 64);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* A policy registered through the public call is selected by name: a copy
 * of mru under another name evicts the newest objects first. */
START_TEST(a_registered_eviction_policy_is_selected_by_config) {
  kva_eviction_policy p = *policy_find("mru");
  p.name = "user_newest_first";
  int rc = kva_eviction_policy_register(&p);
  ck_assert(rc == KVA_OK || rc == KVA_EINVAL); /* EINVAL: a forked earlier test registered it */
  kva_runtime *rt =
      fixture_storage(0, 10 * MiB, "eviction.policy=user_newest_first", "eviction.ratio=0.2", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(MiB);
  for (int i = 0; i < 8; i++) fixture_write(s, (uint64_t)i, 1, &l);
  kva_runtime_run_until_idle(rt);
  ck_assert_uint_eq(stats_of(s).evicted, 2);
  ck_assert(!present(s, 7) && !present(s, 6));
  for (int i = 0; i < 6; i++) ck_assert(present(s, (uint64_t)i));
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(eviction_policy_registration_refuses_bad_input) {
  kva_eviction_policy p = *policy_find("lru");
  ck_assert_int_eq(kva_eviction_policy_register(NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_eviction_policy_register(&p), KVA_EINVAL); /* "lru" is taken */
  p.name = "";
  ck_assert_int_eq(kva_eviction_policy_register(&p), KVA_EINVAL);
  p.name = "incomplete";
  p.candidates = NULL;
  ck_assert_int_eq(kva_eviction_policy_register(&p), KVA_EINVAL);
}
END_TEST

START_TEST(an_unknown_eviction_policy_stops_the_start) {
  kva_config *c = kva_config_default();
  ck_assert_int_eq(kva_config_set(c, "eviction.policy", "lfru"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "l2", "[]"), KVA_OK);
  kva_runtime *rt = NULL;
  ck_assert_int_eq(kva_runtime_start(c, &rt), KVA_ECONFIG);
  ck_assert_ptr_null(rt);
  kva_config_free(c);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("eviction");
  TCase *w = tcase_create("watermark");
  tcase_set_timeout(w, 60);
  tcase_add_test(w, crossing_the_watermark_evicts_ratio_of_the_bytes_oldest_first);
  tcase_add_test(w, watermark_eviction_skips_locked_objects);
  tcase_add_test(w, ratio_zero_turns_watermark_eviction_off);
  tcase_add_test(w, the_periodic_tick_evicts_once_locks_are_released);
  tcase_add_test(w, each_policy_picks_its_victim);
  tcase_add_test(w, suffix_chunks_are_evicted_before_their_prefix);
  suite_add_tcase(s, w);
  TCase *d = tcase_create("demand");
  tcase_set_timeout(d, 60);
  tcase_add_test(d, demand_eviction_frees_only_the_deficit);
  tcase_add_test(d, a_reservation_that_fits_evicts_nothing);
  tcase_add_test(d, nothing_is_evicted_when_the_deficit_cannot_be_covered);
  tcase_add_test(d, demand_eviction_counts_whole_blocks);
  tcase_add_test(d, evicting_a_neighbour_of_free_space_makes_contiguous_room);
  tcase_add_test(d, a_victim_that_makes_no_room_is_spared);
  tcase_add_test(d, keys_of_the_request_itself_are_never_evicted);
  tcase_add_test(d, demand_eviction_under_concurrent_writers_stays_consistent);
  tcase_add_test(d, a_registered_eviction_policy_is_selected_by_config);
  tcase_add_test(d, eviction_policy_registration_refuses_bad_input);
  tcase_add_test(d, an_unknown_eviction_policy_stops_the_start);
  suite_add_tcase(s, d);
  return s;
}
