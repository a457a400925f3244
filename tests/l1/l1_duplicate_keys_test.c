/*
 * l1_duplicate_keys_test.c — a key repeated in one batch: the first
 * occurrence counts, later ones get KVA_KEY_WRONG_STATE and change nothing;
 * the requests without per-key status (prefetch, read) refuse the batch.
 */
#include <check.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/l1_client.h"

/* ---- kvact: a key repeated in one batch ---------------------------------- */

START_TEST(repeated_key_in_reserve_write_is_wrong_state) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  kva_layout l = fixture_layout_basic();
  kva_buf b[2];
  int st[2];
  ck_assert_int_eq(req_reserve_write(s, ids, 2, &l, KVA_WRITE_NEW, 0, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  expect_buf(b[0]);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  expect_no_buf(b[1]);
  expect_stats(s, 1, 1, 0, 0); /* one block, not two */
  ck_assert_int_eq(finish_write1(s, 5), KVA_OK);
  ck_assert_int_eq(req_reserve_write(s, ids, 2, &l, KVA_WRITE_ALL, 0, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(finish_write1(s, 5), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_key_in_finish_write_and_fwarr_is_wrong_state) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  kva_buf b[2];
  int st[2];
  put_write_locked(s, 5);
  ck_assert_int_eq(req_finish_write(s, ids, 2, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(reserve_write1(s, 5, KVA_WRITE_UPDATE, 0, NULL), KVA_OK);
  ck_assert_int_eq(req_fwarr(s, ids, 2, 1, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  expect_no_buf(b[1]);
  expect_stats(s, 1, 0, 1, 0);
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK); /* one lock was taken, not two */
  ck_assert(!is_read_locked(s, 5));
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_key_in_reserve_and_finish_read_is_wrong_state) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  kva_buf b[2];
  int st[2];
  put_ready(s, 5, 0);
  ck_assert_int_eq(req_reserve_read(s, ids, 2, 1, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  expect_no_buf(b[1]);
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK);
  ck_assert(!is_read_locked(s, 5));
  ck_assert_int_eq(reserve_read1(s, 5, 2, NULL), KVA_OK);
  ck_assert_int_eq(req_finish_read(s, ids, 2, 1, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  ck_assert(is_read_locked(s, 5)); /* one release, one lock left */
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_locked_key_in_delete_is_wrong_state) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  int st[2];
  put_write_locked(s, 5);
  ck_assert_int_eq(req_delete(s, ids, 2, 0, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_LOCKED);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(finish_write1(s, 5), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_key_in_delete_is_wrong_state_after_removal) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  int st[2];
  put_ready(s, 5, 0);
  ck_assert_int_eq(req_delete(s, ids, 2, 0, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  stop_storage(rt);
}
END_TEST

/* The first occurrence frees the temporary; the second is still a repeat. */
START_TEST(repeated_key_in_finish_read_is_wrong_state_after_temporary_freed) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  int st[2];
  put_ready(s, 5, 1);
  ck_assert_int_eq(reserve_read1(s, 5, 1, NULL), KVA_OK);
  ck_assert_int_eq(req_finish_read(s, ids, 2, 1, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_key_makes_prefetch_and_read_invalid) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 6, 5}, absent[] = {5, 9, 9};
  kva_buf b[3];
  size_t hits = 99;
  put_ready(s, 5, 0);
  put_ready(s, 6, 0);
  ck_assert_int_eq(req_prefetch(s, ids, 3, 1, &hits), KVA_EINVAL);
  ck_assert_int_eq(req_prefetch(s, absent, 3, 1, &hits), KVA_EINVAL);
  expect_stats(s, 2, 0, 0, 0); /* nothing locked */
  ck_assert_int_eq(reserve_read1(s, 5, 1, NULL), KVA_OK);
  ck_assert_int_eq(reserve_read1(s, 6, 1, NULL), KVA_OK);
  ck_assert_int_eq(req_read(s, ids, 3, b), KVA_EINVAL);
  ck_assert_int_eq(req_read(s, absent, 3, b), KVA_EINVAL);
  ck_assert(is_read_locked(s, 5)); /* nothing released */
  ck_assert(is_read_locked(s, 6));
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 6, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l1_duplicate_keys_test");
  TCase *tc_kvact_rules = tcase_create("kvact_rules");
  tcase_set_timeout(tc_kvact_rules, 60);
  tcase_add_test(tc_kvact_rules, repeated_key_in_reserve_write_is_wrong_state);
  tcase_add_test(tc_kvact_rules, repeated_key_in_finish_write_and_fwarr_is_wrong_state);
  tcase_add_test(tc_kvact_rules, repeated_key_in_reserve_and_finish_read_is_wrong_state);
  tcase_add_test(tc_kvact_rules, repeated_locked_key_in_delete_is_wrong_state);
  tcase_add_test(tc_kvact_rules, repeated_key_in_delete_is_wrong_state_after_removal);
  tcase_add_test(tc_kvact_rules, repeated_key_in_finish_read_is_wrong_state_after_temporary_freed);
  tcase_add_test(tc_kvact_rules, repeated_key_makes_prefetch_and_read_invalid);
  suite_add_tcase(s, tc_kvact_rules);
  return s;
}
