/*
 * l2_store_test.c — the store controller through the facade: finished
 * writes reach the L2 tiers their store policy names (LMCache
 * test_store_controller.py; docs/invariants.md I-SC-1 to I-SC-6, and
 * I-SC-7 in l2_store_coalesce_test.c), grouped by layout, read-locked
 * exactly while a store is in flight, never for temporary or prefetched
 * objects; failures release everything; kva_flush waits.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "l1/l1_manager.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define MiB (1024u * 1024u)
#define FLUSH_MS 10000

static void write_range(kva_storage *s, uint64_t first, size_t n, const kva_layout *l) {
  l2_write_range(s, first, n, l, 0);
}

/* Every key of [first, first + n) is in L1 and holds no lock at all. */
static void assert_l1_idle(kva_storage *s, uint64_t first, size_t n) {
  l2_expect_states(s, first, n, 0);
}

/* ---- the default policy ------------------------------------------------- */

/* test_l1_write_triggers_l2_store, test_multiple_keys_stored_to_l2,
 * test_stores_to_all_adapters, test_read_lock_released_after_all_adapters_complete */
START_TEST(finished_writes_reach_every_tier) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  write_range(s, 0, 5, &l);
  l2_flush(s); /* no polling: the flush answers once both tiers answered */
  for (uint32_t t = 0; t < 2; t++) {
    ck_assert_uint_eq(l2_stats(s, t).objects, 5);
    ck_assert_uint_eq(l2_stats(s, t).stores, 1);
  }
  kva_key k = fixture_key(4);
  ck_assert_int_eq(kva_l2_contains(s, "mock0", &k), 1);
  ck_assert_int_eq(kva_l2_contains(s, "mock1", &k), 1);
  kva_storage_stats st = l2_storage_stats(s);
  ck_assert_uint_eq(st.l2_store_tasks, 2);
  ck_assert_uint_eq(st.l2_stored_keys, 10);
  ck_assert_uint_eq(st.l2_store_failures, 0);
  ck_assert_uint_eq(st.l2_store_skipped, 0);
  ck_assert_uint_eq(st.l1_read_locked, 0);
  assert_l1_idle(s, 0, 5); /* both tiers' read locks are gone */
  l2_finish(rt);
}
END_TEST

START_TEST(flush_times_out_while_a_store_is_slow) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_set_latency(s, 0, 400000);
  write_range(s, 0, 1, &l);
  ck_assert_int_eq(kva_flush(s, 10), KVA_ETIMEDOUT);
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 1);
  assert_l1_idle(s, 0, 1);
  l2_finish(rt);
}
END_TEST

/* One finish_write of keys of two layouts: one store task per layout and
 * tier (LMCache does not group; kvact must, a task has one layout). */
START_TEST(stores_are_grouped_by_layout) {
  kva_runtime *rt = l2_start(0, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout a = fixture_layout_basic(), b = fixture_layout_bytes(4096);
  kva_key k[4] = {fixture_key(0), fixture_key(1), fixture_key(2), fixture_key(3)};
  kva_buf buf[4];
  int st[4];
  ck_assert_int_eq(kva_reserve_write(s, k, 2, &a, KVA_WRITE_NEW, buf, st), 2);
  ck_assert_int_eq(kva_reserve_write(s, k + 2, 2, &b, KVA_WRITE_NEW, buf + 2, st + 2), 2);
  for (int i = 0; i < 4; i++) l2_fill(buf[i].ptr, buf[i].len, (uint64_t)i, 0);
  ck_assert_int_eq(kva_finish_write(s, k, 4, st), 4);
  l2_flush(s);
  ck_assert_uint_eq(l2_storage_stats(s).l2_store_tasks, 4);
  for (uint32_t t = 0; t < 2; t++) {
    ck_assert_uint_eq(l2_stats(s, t).stores, 2);
    ck_assert_uint_eq(l2_stats(s, t).objects, 4);
  }
  write_range(s, 10, 3, &b); /* one layout: one task per tier */
  l2_flush(s);
  ck_assert_uint_eq(l2_storage_stats(s).l2_store_tasks, 6);
  ck_assert_uint_eq(l2_stats(s, 0).stores, 3);
  assert_l1_idle(s, 0, 4);
  l2_finish(rt);
}
END_TEST

/* Many threads flush at once while a store is slow: every one of them
 * returns only once the store is done (the controller must not answer
 * early when its waiter list is long). */
#define FLUSHERS 96

typedef struct flusher {
  kva_storage *s;
  int rc;
  uint64_t tasks_seen; /* l2_store_tasks right after the flush returned */
} flusher;

static void *flush_once(void *arg) {
  flusher *f = arg;
  kva_storage_stats st;
  f->rc = kva_flush(f->s, FLUSH_MS);
  if (kva_storage_get_stats(f->s, &st) == KVA_OK) f->tasks_seen = st.l2_store_tasks;
  return NULL;
}

START_TEST(concurrent_flushes_all_wait_for_the_store) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_set_latency(s, 0, 300000);
  write_range(s, 0, 1, &l);
  static flusher f[FLUSHERS];
  pthread_t th[FLUSHERS];
  for (int i = 0; i < FLUSHERS; i++) {
    f[i] = (flusher){.s = s};
    ck_assert_int_eq(pthread_create(&th[i], NULL, flush_once, &f[i]), 0);
  }
  for (int i = 0; i < FLUSHERS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < FLUSHERS; i++) {
    ck_assert_int_eq(f[i].rc, KVA_OK);
    ck_assert_msg(f[i].tasks_seen == 1, "flush %d returned before the store was done", i);
  }
  l2_finish(rt);
}
END_TEST

/* More single-key batches than the controller has task slots: the rest
 * wait (unlocked) and all are stored; one flush covers them all. */
START_TEST(more_batches_than_task_slots_are_all_stored) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(4096);
  l2_set_latency(s, 0, 2000);
  l2_set_latency(s, 1, 2000);
  for (uint64_t i = 0; i < 100; i++) write_range(s, i, 1, &l);
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 100);
  ck_assert_uint_eq(l2_stats(s, 1).objects, 100);
  ck_assert_uint_eq(l2_storage_stats(s).l2_store_tasks, 200);
  ck_assert_uint_eq(l2_storage_stats(s).l1_read_locked, 0);
  l2_finish(rt);
}
END_TEST

/* ---- read locks --------------------------------------------------------- */

static bool l1_state_is(kva_storage *s, void *want) {
  return l2_l1_state(s, 0) == *(int *)want;
}

/* test_read_lock_released_after_store, with the lock seen while in flight:
 * one read lock per tier storing the key. */
START_TEST(read_locks_held_while_stores_are_in_flight) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_set_latency(s, 0, 1000000);
  l2_set_latency(s, 1, 1000000);
  write_range(s, 0, 1, &l);
  int two = 2;
  ck_assert(l2_wait_until(l1_state_is, s, &two, 5000));
  ck_assert_int_eq(l2_delete_one(s, 0, 0), KVA_KEY_LOCKED);
  l2_flush(s);
  assert_l1_idle(s, 0, 1);
  l2_rewrite(s, &(uint64_t){0}, 1, &l, 0); /* updatable again: no reader is left */
  l2_flush(s);
  l2_finish(rt);
}
END_TEST

START_TEST(read_lock_released_when_the_slow_tier_answers) {
  kva_runtime *rt = l2_start(0, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_set_latency(s, 0, 100000); /* 100 ms of virtual time; mock1 answers at once */
  write_range(s, 0, 1, &l);
  kva_runtime_run_until_idle(rt);
  ck_assert_int_eq(l2_l1_state(s, 0), 1);
  ck_assert_uint_eq(l2_storage_stats(s).l2_store_tasks, 1); /* mock1's answer only */
  kva_runtime_advance(rt, 100000000ull);
  ck_assert_int_eq(l2_l1_state(s, 0), 0);
  ck_assert_uint_eq(l2_storage_stats(s).l2_store_tasks, 2);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 1);
  l2_finish(rt);
}
END_TEST

/* test_multiple_concurrent_requests_same_adapter: two batches in flight,
 * both release; rewriting each key stores it again (replacing). */
START_TEST(every_batch_releases_its_locks) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  write_range(s, 0, 3, &l);
  write_range(s, 3, 3, &l);
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 6);
  for (uint64_t i = 0; i < 6; i++) l2_rewrite(s, &i, 1, &l, 1); /* a batch each */
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 6);
  ck_assert_uint_eq(l2_stats(s, 0).stores, 8);
  assert_l1_idle(s, 0, 6);
  ck_assert_int_eq(kva_clear(s, 0), 6);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 6, &l), 6);
  l2_read_release_range(s, 0, 6, 1); /* the rewritten bytes replaced the first */
  l2_finish(rt);
}
END_TEST

/* ---- failures ----------------------------------------------------------- */

START_TEST(failed_store_releases_locks_and_keeps_objects) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  uint64_t bad = 1;
  l2_fail_stores(s, 0, &bad, 1);
  write_range(s, 0, 3, &l);
  l2_flush(s);
  kva_l2_stats t0 = l2_stats(s, 0);
  ck_assert_uint_eq(t0.objects, 0); /* all or nothing */
  ck_assert_uint_eq(t0.store_failures, 1);
  ck_assert_uint_eq(l2_stats(s, 1).objects, 3);
  kva_storage_stats st = l2_storage_stats(s);
  ck_assert_uint_eq(st.l2_store_tasks, 2);
  ck_assert_uint_eq(st.l2_store_failures, 1);
  ck_assert_uint_eq(st.l2_stored_keys, 3);
  assert_l1_idle(s, 0, 3);
  l2_flush(s); /* no retry */
  ck_assert_uint_eq(l2_stats(s, 0).stores, 1);
  l2_finish(rt);
}
END_TEST

/* test_submit_failure_releases_l1_read_lock: a tier that refuses at once. */
START_TEST(down_tier_store_releases_locks) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", "l2_bypass_failures=0", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_set_down(s, 0, true);
  for (uint64_t i = 0; i < 4; i++) {
    write_range(s, i, 1, &l);
    l2_flush(s);
  }
  ck_assert_uint_eq(l2_storage_stats(s).l2_store_failures, 4);
  ck_assert_uint_eq(l2_stats(s, 0).store_failures, 4);
  ck_assert_int_eq(kva_tier_bypassed(s, "mock0"), 0); /* bypass disabled */
  assert_l1_idle(s, 0, 4);
  l2_set_down(s, 0, false);
  write_range(s, 4, 1, &l);
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 1);
  l2_finish(rt);
}
END_TEST

/* In deterministic mode the delete reaches L1 before the store controller
 * can ask for its read lock: the key is skipped, not stored. */
START_TEST(objects_gone_before_their_store_are_skipped) {
  char seed[32]; /* whatever order the scheduler picks */
  snprintf(seed, sizeof(seed), "runtime.seed=%d", _i);
  kva_runtime *rt = l2_start(0, 64 * MiB, 1, "", seed, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  write_range(s, 0, 1, &l);
  ck_assert_int_eq(l2_delete_one(s, 0, 0), KVA_OK);
  l2_flush(s);
  kva_storage_stats ss = l2_storage_stats(s);
  ck_assert_uint_eq(ss.l2_store_skipped, 1);
  ck_assert_uint_eq(ss.l2_store_tasks, 0);
  ck_assert_uint_eq(l2_stats(s, 0).stores, 0);
  l2_finish(rt);
}
END_TEST

/* ---- policies ----------------------------------------------------------- */

/* test_l1_cleaned_after_l2_store, test_buffer_only_multiple_keys; with two
 * tiers the second release is the one whose delete succeeds. */
START_TEST(skip_l1_empties_l1_after_the_store) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", "store_policy=skip_l1", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  write_range(s, 0, 5, &l);
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 5);
  ck_assert_uint_eq(l2_stats(s, 1).objects, 5);
  l2_expect_states(s, 0, 5, L1_ABSENT);
  ck_assert_uint_eq(l2_storage_stats(s).l1_objects, 0);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 5, &l), 5);
  l2_read_release_range(s, 0, 5, 0);
  l2_finish(rt);
}
END_TEST

START_TEST(skip_l1_keeps_objects_whose_store_failed) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", "store_policy=skip_l1", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  uint64_t bad = 0;
  l2_fail_stores(s, 0, &bad, 1);
  write_range(s, 0, 1, &l);
  write_range(s, 1, 1, &l);
  l2_flush(s);
  assert_l1_idle(s, 0, 1);
  l2_expect_states(s, 1, 1, L1_ABSENT);
  l2_finish(rt);
}
END_TEST

static uint64_t id_of(const kva_key *k) {
  uint64_t id;
  memcpy(&id, k->hash, sizeof(id));
  return id;
}

static uint32_t deletion_tiers; /* atomic: bit t = select_l1_deletions saw tier t */

static void to_tier1(void *arg, const kva_key *k, size_t n, uint32_t ntiers, uint8_t *t) {
  for (size_t i = 0; i < n; i++) t[i] = 1u << 1;
}
static void delete_even(void *arg, uint32_t tier, const kva_key *k, size_t n, uint8_t *del) {
  __atomic_or_fetch(&deletion_tiers, 1u << tier, __ATOMIC_RELAXED);
  for (size_t i = 0; i < n; i++) del[i] = id_of(&k[i]) % 2 == 0;
}
static void to_nowhere(void *arg, const kva_key *k, size_t n, uint32_t ntiers, uint8_t *t) {}
static void delete_none(void *arg, uint32_t tier, const kva_key *k, size_t n, uint8_t *del) {}

static pthread_once_t policies_once = PTHREAD_ONCE_INIT;
static void register_policies(void) {
  ck_assert_int_eq(kva_store_policy_register(
                       &(kva_store_policy){"test_tier1_even", to_tier1, delete_even, NULL}),
                   KVA_OK);
  ck_assert_int_eq(
      kva_store_policy_register(&(kva_store_policy){"test_nowhere", to_nowhere, delete_none, NULL}),
      KVA_OK);
}

/* test_policy_selects_subset_of_adapters + test_policy_that_deletes_from_l1,
 * narrowed: only tier 1, and only the even keys leave L1. */
START_TEST(custom_policy_picks_tiers_and_deletions) {
  pthread_once(&policies_once, register_policies);
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", "store_policy=test_tier1_even", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  write_range(s, 0, 4, &l);
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).stores, 0);
  ck_assert_uint_eq(l2_stats(s, 0).objects, 0);
  ck_assert_uint_eq(l2_stats(s, 1).objects, 4);
  ck_assert_uint_eq(__atomic_load_n(&deletion_tiers, __ATOMIC_RELAXED), 1u << 1);
  l2_expect_states(s, 0, 1, L1_ABSENT);
  assert_l1_idle(s, 1, 1);
  l2_expect_states(s, 2, 1, L1_ABSENT);
  assert_l1_idle(s, 3, 1);
  l2_finish(rt);
}
END_TEST

/* test_policy_that_skips_all_adapters */
START_TEST(policy_without_targets_stores_and_locks_nothing) {
  pthread_once(&policies_once, register_policies);
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", "store_policy=test_nowhere", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  write_range(s, 0, 1, &l);
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).stores + l2_stats(s, 1).stores, 0);
  ck_assert_uint_eq(l2_storage_stats(s).l2_store_tasks, 0);
  ck_assert_int_eq(l2_delete_one(s, 0, 0), KVA_OK);
  l2_finish(rt);
}
END_TEST

START_TEST(unknown_policy_refuses_to_start) {
  ck_assert_int_eq(l2_try_start("store_policy", "no_such_policy"), KVA_ECONFIG);
  ck_assert_int_eq(l2_try_start("prefetch_policy", "no_such_policy"), KVA_ECONFIG);
  ck_assert_int_eq(l2_try_start("store_policy", "skip_l1"), KVA_OK);
}
END_TEST

/* ---- what is never stored ----------------------------------------------- */

/* test_temporary_l1_write_does_not_trigger_l2_store */
START_TEST(temporary_objects_are_never_stored) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  uint64_t id = 0;
  l2_write_temporary(s, &id, 1, &l);
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).stores, 0);
  ck_assert_int_eq(l2_l1_state(s, 0), L1_TEMPORARY);
  ck_assert_int_eq(l2_delete_one(s, 0, 0), KVA_OK); /* no read lock was taken */
  l2_finish(rt);
}
END_TEST

/* Loaded from mock0 with mock1 present: never written back to either,
 * whether the loaded objects stay in L1 (write-back) or are temporary. */
START_TEST(prefetched_objects_are_never_stored_back) {
  int writeback = _i;
  kva_runtime *rt = l2_start(
      2, 64 * MiB, 2, "", writeback ? "prefetch_writeback=true" : "prefetch_writeback=false", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 3, &l);
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 3, &l), 3);
  ck_assert_int_eq(l2_l1_state(s, 0), writeback ? 1 : 1 | L1_TEMPORARY);
  l2_read_release_range(s, 0, 3, 0);
  l2_flush(s);
  ck_assert_uint_eq(l2_stats(s, 0).stores, 1); /* the seed */
  ck_assert_uint_eq(l2_stats(s, 1).stores, 0);
  ck_assert_uint_eq(l2_stats(s, 1).objects, 0);
  ck_assert_uint_eq(l2_storage_stats(s).l2_store_tasks, 0);
  ck_assert_int_eq(l2_l1_state(s, 2), writeback ? 0 : L1_ABSENT);
  l2_finish(rt);
}
END_TEST

/* test_write_with_no_adapters_no_read_lock */
START_TEST(without_tiers_nothing_is_locked) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 0, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  write_range(s, 0, 1, &l);
  l2_flush(s);
  assert_l1_idle(s, 0, 1);
  l2_rewrite(s, &(uint64_t){0}, 1, &l, 0);
  l2_finish(rt);
}
END_TEST

/* ---- shutdown ----------------------------------------------------------- */

/* docs/invariants.md I-SD-2 (LMCache StoreController.stop): a store in
 * flight at shutdown still releases its read lock; nobody warns of a lock
 * left. */
START_TEST(shutdown_waits_for_stores_in_flight) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_set_latency(s, 0, 300000);
  write_range(s, 0, 1, &l);
  int one = 1;
  ck_assert(l2_wait_until(l1_state_is, s, &one, 5000));
  l2_log_start(KVA_LOG_WARN);
  kva_runtime_shutdown(rt);
  l2_log_stop();
  ck_assert_msg(l2_log_count("lock") == 0, "shutdown warned:\n%s", l2_log_text());
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_store");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, finished_writes_reach_every_tier);
  tcase_add_test(tc, flush_times_out_while_a_store_is_slow);
  tcase_add_test(tc, concurrent_flushes_all_wait_for_the_store);
  tcase_add_test(tc, more_batches_than_task_slots_are_all_stored);
  tcase_add_test(tc, stores_are_grouped_by_layout);
  tcase_add_test(tc, read_locks_held_while_stores_are_in_flight);
  tcase_add_test(tc, read_lock_released_when_the_slow_tier_answers);
  tcase_add_test(tc, every_batch_releases_its_locks);
  tcase_add_test(tc, failed_store_releases_locks_and_keeps_objects);
  tcase_add_test(tc, down_tier_store_releases_locks);
  tcase_add_loop_test(tc, objects_gone_before_their_store_are_skipped, 0, 8);
  tcase_add_test(tc, skip_l1_empties_l1_after_the_store);
  tcase_add_test(tc, skip_l1_keeps_objects_whose_store_failed);
  tcase_add_test(tc, custom_policy_picks_tiers_and_deletions);
  tcase_add_test(tc, policy_without_targets_stores_and_locks_nothing);
  tcase_add_test(tc, unknown_policy_refuses_to_start);
  tcase_add_test(tc, temporary_objects_are_never_stored);
  tcase_add_loop_test(tc, prefetched_objects_are_never_stored_back, 0, 2);
  tcase_add_test(tc, without_tiers_nothing_is_locked);
  tcase_add_test(tc, shutdown_waits_for_stores_in_flight);
  suite_add_tcase(su, tc);
  return su;
}
