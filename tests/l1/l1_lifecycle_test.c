/*
 * l1_lifecycle_test.c — an L1 object's whole life: delete (forced or not),
 * its observable state, shutdown, full cycles, evictability (LMCache's
 * test_l1_manager.py scenarios 43-64 and 69-77), and kvact's own rules:
 * locks never expire, clear, and every transition in deterministic mode
 * checked against stats and memcheck.
 */
#include <check.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/l1_client.h"

/* ---- delete (43-50) ------------------------------------------------------ */

START_TEST(delete_of_absent_key_is_not_exist) { /* 43 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert_int_eq(delete1(s, 12345, 0), KVA_KEY_NOT_EXIST);
  stop_storage(rt);
}
END_TEST

START_TEST(delete_removes_a_ready_key) { /* 44 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(delete1(s, 12345, 0), KVA_OK);
  ck_assert(!is_present(s, 12345));
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

START_TEST(delete_of_write_locked_key_is_locked) { /* 45 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 12345);
  ck_assert_int_eq(delete1(s, 12345, 0), KVA_KEY_LOCKED);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(delete_of_read_locked_key_is_locked) { /* 46 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(delete1(s, 12345, 0), KVA_KEY_LOCKED);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(delete_gives_each_key_its_own_status) { /* 47 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {1, 2, 3};
  int st[3];
  put_ready(s, 1, 0);
  put_write_locked(s, 3);
  ck_assert_int_eq(req_delete(s, ids, 3, 0, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_NOT_EXIST);
  ck_assert_int_eq(st[2], KVA_KEY_LOCKED);
  ck_assert_int_eq(finish_write1(s, 3), KVA_OK);
  stop_storage(rt);
}
END_TEST

/* After a forced delete of locked objects: `objects` are findable, and
 * the deleted ones still hold their locks (and memory) for their holders. */
static void expect_deleted_but_held(kva_storage *s, uint64_t objects, uint64_t wl, uint64_t rl) {
  kva_storage_stats st;
  ck_assert_int_eq(kva_storage_get_stats(s, &st), KVA_OK);
  ck_assert_uint_eq(st.l1_objects, objects);
  ck_assert_uint_eq(st.l1_write_locked, wl);
  ck_assert_uint_eq(st.l1_read_locked, rl);
  ck_assert_uint_gt(st.l1_used_bytes, 0);
}

START_TEST(forced_delete_removes_a_write_locked_key) { /* 48 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 1);
  ck_assert_int_eq(delete1(s, 1, 0), KVA_KEY_LOCKED);
  ck_assert_int_eq(delete1(s, 1, 1), KVA_OK);
  ck_assert(!is_present(s, 1));
  /* kvact: the writer keeps its buffer until it lets go (never readable) */
  expect_deleted_but_held(s, 0, 1, 0);
  ck_assert_int_eq(finish_write1(s, 1), KVA_KEY_NOT_EXIST);
  expect_stats(s, 0, 0, 0, 0);
  fixture_memcheck_clean(s);
  stop_storage(rt);
}
END_TEST

START_TEST(forced_delete_removes_a_read_locked_key) { /* 49 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  ck_assert_int_eq(reserve_read1(s, 1, 1, NULL), KVA_OK);
  ck_assert_int_eq(delete1(s, 1, 0), KVA_KEY_LOCKED);
  ck_assert_int_eq(delete1(s, 1, 1), KVA_OK);
  ck_assert(!is_present(s, 1));
  /* kvact: the reader's memory stays valid until it releases its lock */
  expect_deleted_but_held(s, 0, 0, 1);
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  expect_stats(s, 0, 0, 0, 0);
  fixture_memcheck_clean(s);
  stop_storage(rt);
}
END_TEST

START_TEST(forced_delete_of_absent_key_is_not_exist) { /* 50 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert_int_eq(delete1(s, 999, 1), KVA_KEY_NOT_EXIST);
  stop_storage(rt);
}
END_TEST

/* ---- object state (51-54) ------------------------------------------------ */

START_TEST(absent_key_has_no_state) { /* 51 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert(!is_present(s, 12345));
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

START_TEST(ready_key_is_readable_and_writable) { /* 52 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert(is_present(s, 12345));
  ck_assert(is_readable(s, 12345));
  ck_assert(is_writable(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(write_locked_key_is_neither_readable_nor_writable) { /* 53 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 12345);
  ck_assert(is_present(s, 12345));
  ck_assert(!is_readable(s, 12345));
  ck_assert(!is_writable(s, 12345));
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(read_locked_key_is_readable_but_not_writable) { /* 54 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert(is_readable(s, 12345));
  ck_assert(!is_writable(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

/* ---- close = runtime shutdown (55-57) ------------------------------------ */

START_TEST(shutdown_of_an_empty_manager) { /* 55 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  stop_storage(rt);
}
END_TEST

/* The one test that shuts down with locks held: that is its point (the
 * manager frees them; ASan would see a leak). */
START_TEST(shutdown_frees_write_locked_objects) { /* 56 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {0, 1, 2, 3, 4};
  kva_layout l = fixture_layout_basic();
  kva_buf b[5];
  int st[5];
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_ALL, 0, b, st), 5);
  expect_memcheck_locked(s, "5 write-locked and 0 read-locked");
  kva_runtime_shutdown(rt);
}
END_TEST

/* LMCache queries the manager after close(); kvact's storage goes with its
 * runtime, so: objects do not outlive it, and a new runtime starts empty. */
START_TEST(objects_do_not_outlive_their_runtime) { /* 57 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert(is_present(s, 12345));
  stop_storage(rt);
  rt = start_storage(&s);
  ck_assert(!is_present(s, 12345));
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

/* ---- lifecycles (58-64) -------------------------------------------------- */

START_TEST(full_write_read_cycle) { /* 58 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert(!is_present(s, 12345));
  put_write_locked(s, 12345);
  ck_assert(!is_readable(s, 12345));
  ck_assert(!is_writable(s, 12345));
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  ck_assert(is_readable(s, 12345));
  ck_assert(is_writable(s, 12345));
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert(is_readable(s, 12345));
  ck_assert(!is_writable(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(is_readable(s, 12345));
  ck_assert(is_writable(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(full_cycle_with_reads_keeps_the_object) { /* 59 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(read1(s, 12345, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(ready_object_can_be_deleted) { /* 60 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(delete1(s, 12345, 0), KVA_OK);
  ck_assert(!is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(temporary_object_lives_until_its_read_is_finished) { /* 61 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  expect_stats(s, 1, 0, 0, 1);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_present(s, 12345));
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

START_TEST(temporary_object_survives_reads_until_released) { /* 62 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(read1(s, 12345, NULL), KVA_OK);
  ck_assert(is_present(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(multi_reader_cycle_leaves_the_object_writable) { /* 63 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 4, NULL), KVA_OK);
  ck_assert_int_eq(read1(s, 12345, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 4), KVA_OK);
  ck_assert(is_writable(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(multi_reader_temporary_goes_with_its_last_reader) { /* 64 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  ck_assert_int_eq(reserve_read1(s, 12345, 3, NULL), KVA_OK);
  ck_assert(is_present(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 3), KVA_OK);
  ck_assert(!is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

/* ---- is_key_evictable (69-77) -------------------------------------------- */

START_TEST(ready_key_is_evictable) { /* 69 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  ck_assert(is_evictable(s, 1));
  ck_assert_int_eq(delete1(s, 1, 0), KVA_OK); /* what evictable promises */
  stop_storage(rt);
}
END_TEST

START_TEST(write_locked_key_is_not_evictable) { /* 70 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 1);
  ck_assert(!is_evictable(s, 1));
  ck_assert_int_eq(finish_write1(s, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(read_locked_key_is_not_evictable) { /* 71 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  ck_assert_int_eq(reserve_read1(s, 1, 1, NULL), KVA_OK);
  ck_assert(!is_evictable(s, 1));
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(absent_key_is_not_evictable) { /* 72 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert(!is_evictable(s, 999));
  stop_storage(rt);
}
END_TEST

START_TEST(key_is_evictable_again_after_finish_read) { /* 73 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  ck_assert_int_eq(reserve_read1(s, 1, 1, NULL), KVA_OK);
  ck_assert(!is_evictable(s, 1));
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  ck_assert(is_evictable(s, 1));
  stop_storage(rt);
}
END_TEST

START_TEST(key_becomes_evictable_at_finish_write) { /* 74 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 1);
  ck_assert(!is_evictable(s, 1));
  ck_assert_int_eq(finish_write1(s, 1), KVA_OK);
  ck_assert(is_evictable(s, 1));
  stop_storage(rt);
}
END_TEST

START_TEST(evictability_is_per_key) { /* 75 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  put_write_locked(s, 2);
  put_ready(s, 3, 0);
  ck_assert_int_eq(reserve_read1(s, 3, 1, NULL), KVA_OK);
  ck_assert(is_evictable(s, 1));
  ck_assert(!is_evictable(s, 2));
  ck_assert(!is_evictable(s, 3));
  ck_assert_int_eq(finish_write1(s, 2), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 3, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(deleted_key_is_not_evictable) { /* 76 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  ck_assert_int_eq(delete1(s, 1, 0), KVA_OK);
  ck_assert(!is_evictable(s, 1));
  stop_storage(rt);
}
END_TEST

START_TEST(key_is_evictable_only_when_every_reader_left) { /* 77 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  ck_assert_int_eq(reserve_read1(s, 1, 3, NULL), KVA_OK);
  ck_assert(!is_evictable(s, 1));
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  ck_assert(!is_evictable(s, 1));
  ck_assert_int_eq(finish_read1(s, 1, 2), KVA_OK);
  ck_assert(is_evictable(s, 1));
  stop_storage(rt);
}
END_TEST

/* ---- kvact: no TTL, clear, every transition ------------------------------ */

/* Replaces LMCache's TTL behaviour: 700 s of virtual time (past both
 * default TTLs) change nothing. */
START_TEST(locks_never_expire_in_virtual_time) {
  kva_runtime *rt = fixture_storage(0, 128 * MiB, NULL);
  kva_storage *s = kva_storage_of(rt);
  put_write_locked(s, 1);
  put_ready(s, 2, 0);
  ck_assert_int_eq(reserve_read1(s, 2, 1, NULL), KVA_OK);
  ck_assert_int_ge(kva_runtime_advance(rt, 700ull * 1000000000ull), 0);
  ck_assert(!is_readable(s, 1));
  ck_assert(is_read_locked(s, 2));
  ck_assert_int_eq(delete1(s, 1, 0), KVA_KEY_LOCKED);
  ck_assert_int_eq(delete1(s, 2, 0), KVA_KEY_LOCKED);
  expect_stats(s, 2, 1, 1, 0);
  ck_assert_int_eq(finish_write1(s, 1), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 2, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(clear_keeps_locked_objects_unless_forced) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  put_write_locked(s, 2);
  put_ready(s, 3, 0);
  ck_assert_int_eq(reserve_read1(s, 3, 1, NULL), KVA_OK);
  put_ready(s, 4, 1);
  ck_assert_int_eq(req_clear(s, 0), 2);
  ck_assert(!is_present(s, 1));
  ck_assert(is_present(s, 2));
  ck_assert(is_present(s, 3));
  ck_assert(!is_present(s, 4));
  expect_stats(s, 2, 1, 1, 0);
  ck_assert_int_eq(req_clear(s, 1), 2);
  expect_deleted_but_held(s, 0, 1, 1); /* their holders keep the memory until they let go */
  ck_assert_int_eq(finish_write1(s, 2), KVA_KEY_NOT_EXIST);
  ck_assert_int_eq(finish_read1(s, 3, 1), KVA_OK);
  expect_stats(s, 0, 0, 0, 0);
  fixture_memcheck_clean(s);
  stop_storage(rt);
}
END_TEST

static void expect_clean(kva_storage *s, uint64_t objects, uint64_t temp) {
  expect_stats(s, objects, 0, 0, temp);
  fixture_memcheck_clean(s);
}

START_TEST(every_state_transition_in_deterministic_mode) {
  kva_runtime *rt = fixture_storage(0, 128 * MiB, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_buf w, r;
  /* absent -> write-locked -> ready -> read-locked(3) -> ready -> deleted */
  ck_assert(!is_present(s, 1));
  expect_clean(s, 0, 0);
  ck_assert_int_eq(reserve_write1(s, 1, KVA_WRITE_NEW, 0, &w), KVA_OK);
  expect_stats(s, 1, 1, 0, 0);
  expect_memcheck_locked(s, "1 write-locked and 0 read-locked");
  ck_assert_int_eq(finish_write1(s, 1), KVA_OK);
  expect_clean(s, 1, 0);
  ck_assert_int_eq(reserve_read1(s, 1, 2, &r), KVA_OK);
  ck_assert_ptr_eq(r.ptr, w.ptr);
  ck_assert_int_eq(reserve_read1(s, 1, 1, NULL), KVA_OK);
  expect_stats(s, 1, 0, 1, 0);
  expect_memcheck_locked(s, "0 write-locked and 1 read-locked");
  ck_assert_int_eq(finish_read1(s, 1, 2), KVA_OK);
  expect_stats(s, 1, 0, 1, 0);
  expect_memcheck_locked(s, "0 write-locked and 1 read-locked");
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  expect_clean(s, 1, 0);
  ck_assert_int_eq(delete1(s, 1, 0), KVA_OK);
  expect_clean(s, 0, 0);
  /* temporary: write-locked -> ready -> read-locked -> gone */
  ck_assert_int_eq(reserve_write1(s, 2, KVA_WRITE_NEW, 1, NULL), KVA_OK);
  expect_stats(s, 1, 1, 0, 1);
  expect_memcheck_locked(s, "1 write-locked and 0 read-locked");
  ck_assert_int_eq(finish_write1(s, 2), KVA_OK);
  expect_clean(s, 1, 1);
  ck_assert_int_eq(reserve_read1(s, 2, 1, NULL), KVA_OK);
  expect_stats(s, 1, 0, 1, 1);
  expect_memcheck_locked(s, "0 write-locked and 1 read-locked");
  ck_assert_int_eq(finish_read1(s, 2, 1), KVA_OK);
  ck_assert(!is_present(s, 2));
  expect_clean(s, 0, 0);
  /* write-locked -> read-locked(2) in one step -> ready */
  ck_assert_int_eq(reserve_write1(s, 3, KVA_WRITE_NEW, 0, &w), KVA_OK);
  expect_stats(s, 1, 1, 0, 0);
  ck_assert_int_eq(fwarr1(s, 3, 2, &r), KVA_OK);
  ck_assert_ptr_eq(r.ptr, w.ptr);
  expect_stats(s, 1, 0, 1, 0);
  expect_memcheck_locked(s, "0 write-locked and 1 read-locked");
  ck_assert_int_eq(finish_read1(s, 3, 2), KVA_OK);
  expect_clean(s, 1, 0);
  /* a temporary the same way (an L2 load): gone at its last reader */
  ck_assert_int_eq(reserve_write1(s, 4, KVA_WRITE_NEW, 1, NULL), KVA_OK);
  expect_stats(s, 2, 1, 0, 1);
  ck_assert_int_eq(fwarr1(s, 4, 1, NULL), KVA_OK);
  expect_stats(s, 2, 0, 1, 1);
  expect_memcheck_locked(s, "0 write-locked and 1 read-locked");
  ck_assert_int_eq(finish_read1(s, 4, 1), KVA_OK);
  expect_clean(s, 1, 0);
  ck_assert_int_eq(delete1(s, 3, 0), KVA_OK);
  expect_clean(s, 0, 0);
  stop_storage(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l1_lifecycle_test");
  TCase *tc_lmcache_port = tcase_create("lmcache_port");
  tcase_set_timeout(tc_lmcache_port, 60);
  tcase_add_test(tc_lmcache_port, delete_of_absent_key_is_not_exist);
  tcase_add_test(tc_lmcache_port, delete_removes_a_ready_key);
  tcase_add_test(tc_lmcache_port, delete_of_write_locked_key_is_locked);
  tcase_add_test(tc_lmcache_port, delete_of_read_locked_key_is_locked);
  tcase_add_test(tc_lmcache_port, delete_gives_each_key_its_own_status);
  tcase_add_test(tc_lmcache_port, forced_delete_removes_a_write_locked_key);
  tcase_add_test(tc_lmcache_port, forced_delete_removes_a_read_locked_key);
  tcase_add_test(tc_lmcache_port, forced_delete_of_absent_key_is_not_exist);
  tcase_add_test(tc_lmcache_port, absent_key_has_no_state);
  tcase_add_test(tc_lmcache_port, ready_key_is_readable_and_writable);
  tcase_add_test(tc_lmcache_port, write_locked_key_is_neither_readable_nor_writable);
  tcase_add_test(tc_lmcache_port, read_locked_key_is_readable_but_not_writable);
  tcase_add_test(tc_lmcache_port, shutdown_of_an_empty_manager);
  tcase_add_test(tc_lmcache_port, shutdown_frees_write_locked_objects);
  tcase_add_test(tc_lmcache_port, objects_do_not_outlive_their_runtime);
  tcase_add_test(tc_lmcache_port, full_write_read_cycle);
  tcase_add_test(tc_lmcache_port, full_cycle_with_reads_keeps_the_object);
  tcase_add_test(tc_lmcache_port, ready_object_can_be_deleted);
  tcase_add_test(tc_lmcache_port, temporary_object_lives_until_its_read_is_finished);
  tcase_add_test(tc_lmcache_port, temporary_object_survives_reads_until_released);
  tcase_add_test(tc_lmcache_port, multi_reader_cycle_leaves_the_object_writable);
  tcase_add_test(tc_lmcache_port, multi_reader_temporary_goes_with_its_last_reader);
  tcase_add_test(tc_lmcache_port, ready_key_is_evictable);
  tcase_add_test(tc_lmcache_port, write_locked_key_is_not_evictable);
  tcase_add_test(tc_lmcache_port, read_locked_key_is_not_evictable);
  tcase_add_test(tc_lmcache_port, absent_key_is_not_evictable);
  tcase_add_test(tc_lmcache_port, key_is_evictable_again_after_finish_read);
  tcase_add_test(tc_lmcache_port, key_becomes_evictable_at_finish_write);
  tcase_add_test(tc_lmcache_port, evictability_is_per_key);
  tcase_add_test(tc_lmcache_port, deleted_key_is_not_evictable);
  tcase_add_test(tc_lmcache_port, key_is_evictable_only_when_every_reader_left);
  suite_add_tcase(s, tc_lmcache_port);
  TCase *tc_kvact_rules = tcase_create("kvact_rules");
  tcase_set_timeout(tc_kvact_rules, 60);
  tcase_add_test(tc_kvact_rules, locks_never_expire_in_virtual_time);
  tcase_add_test(tc_kvact_rules, clear_keeps_locked_objects_unless_forced);
  tcase_add_test(tc_kvact_rules, every_state_transition_in_deterministic_mode);
  suite_add_tcase(s, tc_kvact_rules);
  return s;
}
