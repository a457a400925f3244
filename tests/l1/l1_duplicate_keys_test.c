/*
 * l1_duplicate_keys_test.c — a key repeated in one request: the L1 manager
 * refuses the whole request with KVA_EINVAL and changes nothing (no lock
 * taken or released, no object made or removed, status and buffers
 * untouched), whatever the request (docs/invariants.md I-L1-11). The
 * facade and kvactd's sessions refuse such calls before they get here
 * (tests/storage/storage_input_test.c, tests/server/repeated_keys_test.c);
 * this is the last gate, for every other sender.
 */
#include <check.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/l1_client.h"

#define SENTINEL 77

static void expect_untouched(const int *st, const kva_buf *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    ck_assert_int_eq(st[i], SENTINEL);
    if (b) ck_assert_ptr_eq(b[i].ptr, (void *)&st[i]); /* never written */
  }
}

static void mark(int *st, kva_buf *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    st[i] = SENTINEL;
    if (b) b[i] = (kva_buf){.ptr = &st[i], .len = 1};
  }
}

/* ---- kvact: a key repeated in one request ---------------------------------- */

START_TEST(repeated_key_in_reserve_write_is_refused) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 6, 5};
  kva_layout l = fixture_layout_basic();
  kva_buf b[3];
  int st[3];
  mark(st, b, 3);
  ck_assert_int_eq(req_reserve_write(s, ids, 3, &l, KVA_WRITE_NEW, 0, b, st), KVA_EINVAL);
  expect_untouched(st, b, 3);
  expect_stats(s, 0, 0, 0, 0); /* no block, no record */
  put_ready(s, 5, 0);
  mark(st, b, 3);
  ck_assert_int_eq(req_reserve_write(s, ids, 3, &l, KVA_WRITE_ALL, 0, b, st), KVA_EINVAL);
  expect_untouched(st, b, 3);
  expect_stats(s, 1, 0, 0, 0); /* 5 not write-locked again, 6 not made */
  ck_assert(is_writable(s, 5));
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_key_in_finish_write_and_fwarr_is_refused) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  kva_buf b[2];
  int st[2];
  put_write_locked(s, 5);
  mark(st, NULL, 2);
  ck_assert_int_eq(req_finish_write(s, ids, 2, st), KVA_EINVAL);
  expect_untouched(st, NULL, 2);
  expect_stats(s, 1, 1, 0, 0); /* still write-locked */
  mark(st, b, 2);
  ck_assert_int_eq(req_fwarr(s, ids, 2, 1, b, st), KVA_EINVAL);
  expect_untouched(st, b, 2);
  expect_stats(s, 1, 1, 0, 0);
  ck_assert_int_eq(finish_write1(s, 5), KVA_OK); /* the lock was never given up */
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_key_in_reserve_and_finish_read_is_refused) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  kva_buf b[2];
  int st[2];
  put_ready(s, 5, 0);
  mark(st, b, 2);
  ck_assert_int_eq(req_reserve_read(s, ids, 2, 1, b, st), KVA_EINVAL);
  expect_untouched(st, b, 2);
  ck_assert(!is_read_locked(s, 5));
  ck_assert_int_eq(reserve_read1(s, 5, 2, NULL), KVA_OK); /* two locks */
  mark(st, NULL, 2);
  ck_assert_int_eq(req_finish_read(s, ids, 2, 1, st), KVA_EINVAL);
  expect_untouched(st, NULL, 2);
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK); /* both are still there */
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK);
  ck_assert(!is_read_locked(s, 5));
  stop_storage(rt);
}
END_TEST

/* A temporary object with its last lock: a refused release keeps it. */
START_TEST(repeated_key_in_finish_read_keeps_a_temporary_object) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  int st[2];
  put_ready(s, 5, 1);
  ck_assert_int_eq(reserve_read1(s, 5, 1, NULL), KVA_OK);
  ck_assert_int_eq(req_finish_read(s, ids, 2, 1, st), KVA_EINVAL);
  ck_assert(is_present(s, 5));
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK); /* its last lock: it goes */
  ck_assert(!is_present(s, 5));
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_key_in_delete_is_refused) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 6, 5};
  int st[3];
  put_ready(s, 5, 0);
  put_ready(s, 6, 0);
  mark(st, NULL, 3);
  ck_assert_int_eq(req_delete(s, ids, 3, 0, st), KVA_EINVAL);
  expect_untouched(st, NULL, 3);
  mark(st, NULL, 3);
  ck_assert_int_eq(req_delete(s, ids, 3, 1, st), KVA_EINVAL); /* forced: the same */
  expect_untouched(st, NULL, 3);
  ck_assert(is_present(s, 5));
  ck_assert(is_present(s, 6));
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_key_in_prefetch_read_and_touch_is_refused) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 6, 5}, absent[] = {5, 9, 9};
  kva_buf b[3];
  int st[3];
  size_t hits = 99;
  put_ready(s, 5, 0);
  put_ready(s, 6, 0);
  ck_assert_int_eq(req_prefetch(s, ids, 3, 1, &hits), KVA_EINVAL);
  ck_assert_int_eq(req_prefetch(s, absent, 3, 1, &hits), KVA_EINVAL);
  expect_stats(s, 2, 0, 0, 0); /* nothing locked */
  ck_assert_int_eq(req_touch(s, ids, 3), KVA_EINVAL);
  ck_assert_int_eq(reserve_read1(s, 5, 1, NULL), KVA_OK);
  ck_assert_int_eq(reserve_read1(s, 6, 1, NULL), KVA_OK);
  mark(st, b, 3);
  ck_assert_int_eq(req_read(s, ids, 3, b), KVA_EINVAL);
  ck_assert_int_eq(req_read(s, absent, 3, b), KVA_EINVAL);
  expect_untouched(st, b, 3);
  ck_assert(is_read_locked(s, 5)); /* nothing released */
  ck_assert(is_read_locked(s, 6));
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 6, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

/* A release naming more locks than the key holds releases none: the same
 * answer kvactd's ledger gives a client (docs/invariants.md I-MP-2). */
START_TEST(finish_read_of_more_locks_than_held_releases_none) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5};
  int st[1];
  put_ready(s, 5, 0);
  ck_assert_int_eq(reserve_read1(s, 5, 1, NULL), KVA_OK);
  ck_assert_int_eq(req_finish_read(s, ids, 1, 2, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_WRONG_STATE);
  ck_assert(is_read_locked(s, 5));
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l1_duplicate_keys_test");
  TCase *tc_kvact_rules = tcase_create("kvact_rules");
  tcase_set_timeout(tc_kvact_rules, 60);
  tcase_add_test(tc_kvact_rules, repeated_key_in_reserve_write_is_refused);
  tcase_add_test(tc_kvact_rules, repeated_key_in_finish_write_and_fwarr_is_refused);
  tcase_add_test(tc_kvact_rules, repeated_key_in_reserve_and_finish_read_is_refused);
  tcase_add_test(tc_kvact_rules, repeated_key_in_finish_read_keeps_a_temporary_object);
  tcase_add_test(tc_kvact_rules, repeated_key_in_delete_is_refused);
  tcase_add_test(tc_kvact_rules, repeated_key_in_prefetch_read_and_touch_is_refused);
  tcase_add_test(tc_kvact_rules, finish_read_of_more_locks_than_held_releases_none);
  suite_add_tcase(s, tc_kvact_rules);
  return s;
}
