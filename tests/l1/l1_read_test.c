/*
 * l1_read_test.c — the L1 manager's read locks: reserve_read, L1_READ
 * (LMCache's unsafe_read) and finish_read, ported from LMCache's
 * test_l1_manager.py scenarios 1-25 (numbers in comments; mapping in
 * tests/support/l1_client.h).
 */
#include <check.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/l1_client.h"

/* ---- reserve_read (1-7) -------------------------------------------------- */

START_TEST(reserve_read_of_absent_key_is_not_exist) { /* 1 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  ck_assert_int_eq(reserve_read1(s, 12345, 1, &b), KVA_KEY_NOT_EXIST);
  expect_no_buf(b);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_read_of_write_locked_key_is_not_readable) { /* 2 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  put_write_locked(s, 12345);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, &b), KVA_KEY_NOT_READABLE);
  expect_no_buf(b);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_read_of_ready_key_returns_its_buffer) { /* 3 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b;
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, &b), KVA_OK);
  expect_buf(b);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_read_gives_each_key_its_own_status) { /* 4 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {1, 2, 3};
  kva_buf b[3];
  int st[3];
  put_ready(s, 1, 0);
  put_write_locked(s, 3);
  ck_assert_int_eq(req_reserve_read(s, ids, 3, 1, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  expect_buf(b[0]);
  ck_assert_int_eq(st[1], KVA_KEY_NOT_EXIST);
  expect_no_buf(b[1]);
  ck_assert_int_eq(st[2], KVA_KEY_NOT_READABLE);
  expect_no_buf(b[2]);
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  ck_assert_int_eq(finish_write1(s, 3), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_read_stacks_and_key_stays_readable) { /* 5 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert(is_readable(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 3), KVA_OK);
  ck_assert(!is_read_locked(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_read_with_extra_readers_needs_as_many_releases) { /* 6 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b;
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 3, &b), KVA_OK);
  expect_buf(b);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(is_read_locked(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(is_read_locked(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_read_locked(s, 12345));
  ck_assert(is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_read_takes_one_lock_by_default) { /* 7 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_read_locked(s, 12345));
  stop_storage(rt);
}
END_TEST

/* ---- L1_READ, LMCache's unsafe_read (8-15) ------------------------------- */

START_TEST(read_of_absent_key_is_not_exist) { /* 8 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  ck_assert_int_eq(read1(s, 12345, &b), KVA_KEY_NOT_EXIST);
  expect_no_buf(b);
  stop_storage(rt);
}
END_TEST

START_TEST(read_of_unlocked_ready_key_is_not_readable) { /* 9 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  put_ready(s, 12345, 0);
  ck_assert_int_eq(read1(s, 12345, &b), KVA_KEY_NOT_READABLE);
  expect_no_buf(b);
  stop_storage(rt);
}
END_TEST

START_TEST(read_of_write_locked_key_is_not_readable) { /* 10 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  put_write_locked(s, 12345);
  ck_assert_int_eq(read1(s, 12345, &b), KVA_KEY_NOT_READABLE);
  expect_no_buf(b);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(read_of_read_locked_key_returns_its_buffer) { /* 11 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b;
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(read1(s, 12345, &b), KVA_OK);
  expect_buf(b);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(read_returns_the_buffer_reserve_read_returned) { /* 12 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf a, b;
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, &a), KVA_OK);
  ck_assert_int_eq(read1(s, 12345, &b), KVA_OK);
  ck_assert_ptr_eq(a.ptr, b.ptr);
  ck_assert_uint_eq(a.len, b.len);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_reads_take_no_lock_so_one_release_frees_a_temporary) { /* 13 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(read1(s, 12345, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_present(s, 12345));
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

/* LMCache returns a per-key result; kvact's L1_READ is all or nothing and,
 * on a problem, releases one read lock of each good key (here key 1). */
START_TEST(read_of_a_batch_fails_on_first_problem_and_releases_good_keys) { /* 14 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {1, 2, 3};
  kva_buf b[3];
  put_ready(s, 1, 0);
  put_ready(s, 3, 0);
  ck_assert_int_eq(reserve_read1(s, 1, 1, NULL), KVA_OK);
  ck_assert_int_eq(read1(s, 1, &b[0]), KVA_OK); /* one key at a time: */
  expect_buf(b[0]);
  ck_assert_int_eq(read1(s, 2, NULL), KVA_KEY_NOT_EXIST);
  ck_assert_int_eq(read1(s, 3, NULL), KVA_KEY_NOT_READABLE);
  ck_assert_int_eq(req_read(s, ids, 3, b), KVA_KEY_NOT_EXIST); /* the batch */
  for (int i = 0; i < 3; i++) expect_no_buf(b[i]);
  ck_assert(!is_read_locked(s, 1));
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_KEY_WRONG_STATE);
  ck_assert(is_evictable(s, 3));
  stop_storage(rt);
}
END_TEST

START_TEST(read_works_only_between_reserve_and_finish) { /* 15 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b;
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(read1(s, 12345, &b), KVA_OK);
  expect_buf(b);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert_int_eq(read1(s, 12345, NULL), KVA_KEY_NOT_READABLE);
  stop_storage(rt);
}
END_TEST

/* ---- finish_read (16-25) ------------------------------------------------- */

START_TEST(finish_read_of_absent_key_is_not_exist) { /* 16 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_KEY_NOT_EXIST);
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_after_reserve_read_succeeds) { /* 17 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_without_read_lock_is_wrong_state) { /* 18 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_KEY_WRONG_STATE);
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_of_write_locked_key_is_wrong_state) { /* 19 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 12345);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_frees_a_temporary_at_its_last_reader) { /* 20 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert(is_present(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_counts_down_stacked_reads_of_a_temporary) { /* 21 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(is_present(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_with_extra_readers_releases_them_all) { /* 22 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 3, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 3), KVA_OK);
  ck_assert(!is_read_locked(s, 12345));
  ck_assert(is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_with_fewer_readers_keeps_the_rest) { /* 23 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 3, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 2), KVA_OK);
  ck_assert(is_read_locked(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_read_locked(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_with_extra_readers_frees_a_temporary) { /* 24 */
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

START_TEST(temporary_survives_a_partial_release) { /* 25 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  ck_assert_int_eq(reserve_read1(s, 12345, 4, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 2), KVA_OK);
  ck_assert(is_present(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 2), KVA_OK);
  ck_assert(!is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l1_read_test");
  TCase *tc_lmcache_port = tcase_create("lmcache_port");
  tcase_set_timeout(tc_lmcache_port, 60);
  tcase_add_test(tc_lmcache_port, reserve_read_of_absent_key_is_not_exist);
  tcase_add_test(tc_lmcache_port, reserve_read_of_write_locked_key_is_not_readable);
  tcase_add_test(tc_lmcache_port, reserve_read_of_ready_key_returns_its_buffer);
  tcase_add_test(tc_lmcache_port, reserve_read_gives_each_key_its_own_status);
  tcase_add_test(tc_lmcache_port, reserve_read_stacks_and_key_stays_readable);
  tcase_add_test(tc_lmcache_port, reserve_read_with_extra_readers_needs_as_many_releases);
  tcase_add_test(tc_lmcache_port, reserve_read_takes_one_lock_by_default);
  tcase_add_test(tc_lmcache_port, read_of_absent_key_is_not_exist);
  tcase_add_test(tc_lmcache_port, read_of_unlocked_ready_key_is_not_readable);
  tcase_add_test(tc_lmcache_port, read_of_write_locked_key_is_not_readable);
  tcase_add_test(tc_lmcache_port, read_of_read_locked_key_returns_its_buffer);
  tcase_add_test(tc_lmcache_port, read_returns_the_buffer_reserve_read_returned);
  tcase_add_test(tc_lmcache_port, repeated_reads_take_no_lock_so_one_release_frees_a_temporary);
  tcase_add_test(tc_lmcache_port, read_of_a_batch_fails_on_first_problem_and_releases_good_keys);
  tcase_add_test(tc_lmcache_port, read_works_only_between_reserve_and_finish);
  tcase_add_test(tc_lmcache_port, finish_read_of_absent_key_is_not_exist);
  tcase_add_test(tc_lmcache_port, finish_read_after_reserve_read_succeeds);
  tcase_add_test(tc_lmcache_port, finish_read_without_read_lock_is_wrong_state);
  tcase_add_test(tc_lmcache_port, finish_read_of_write_locked_key_is_wrong_state);
  tcase_add_test(tc_lmcache_port, finish_read_frees_a_temporary_at_its_last_reader);
  tcase_add_test(tc_lmcache_port, finish_read_counts_down_stacked_reads_of_a_temporary);
  tcase_add_test(tc_lmcache_port, finish_read_with_extra_readers_releases_them_all);
  tcase_add_test(tc_lmcache_port, finish_read_with_fewer_readers_keeps_the_rest);
  tcase_add_test(tc_lmcache_port, finish_read_with_extra_readers_frees_a_temporary);
  tcase_add_test(tc_lmcache_port, temporary_survives_a_partial_release);
  suite_add_tcase(s, tc_lmcache_port);
  return s;
}
