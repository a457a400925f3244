/*
 * l1_write_test.c — the L1 manager's write locks: reserve_write in its
 * three modes, finish_write and finish_write_and_reserve_read, ported from
 * LMCache's test_l1_manager.py scenarios 26-42 (numbers in comments).
 */
#include <check.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/l1_client.h"

/* ---- reserve_write (26-33) ----------------------------------------------- */

START_TEST(reserve_write_of_new_key_returns_a_buffer) { /* 26 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b;
  ck_assert_int_eq(reserve_write1(s, 12345, KVA_WRITE_ALL, 0, &b), KVA_OK);
  expect_buf(b);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_write_of_write_locked_key_is_not_writable) { /* 27 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  put_write_locked(s, 12345);
  ck_assert_int_eq(reserve_write1(s, 12345, KVA_WRITE_ALL, 0, &b), KVA_KEY_NOT_WRITABLE);
  expect_no_buf(b);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_write_of_read_locked_key_is_not_writable) { /* 28 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(reserve_write1(s, 12345, KVA_WRITE_ALL, 0, &b), KVA_KEY_NOT_WRITABLE);
  expect_no_buf(b);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_write_of_temporary_key_is_not_writable) { /* 29 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  ck_assert_int_eq(reserve_write1(s, 12345, KVA_WRITE_ALL, 0, NULL), KVA_KEY_NOT_WRITABLE);
  ck_assert_int_eq(delete1(s, 12345, 0), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_write_of_several_keys_gives_distinct_buffers) { /* 30 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {0, 1, 2, 3, 4};
  kva_layout l = fixture_layout_basic();
  kva_buf b[5];
  int st[5];
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_ALL, 0, b, st), 5);
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(st[i], KVA_OK);
    expect_buf(b[i]);
    for (int j = 0; j < i; j++) ck_assert_ptr_ne(b[i].ptr, b[j].ptr);
  }
  ck_assert_int_eq(req_finish_write(s, ids, 5, st), 5);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_write_that_does_not_fit_fails_every_new_key) { /* 31 */
  kva_runtime *rt = fixture_storage(L1_CLIENT_WORKERS, 64 * MiB, NULL);
  kva_storage *s = kva_storage_of(rt);
  uint64_t ids[10];
  kva_layout l = fixture_layout_large();
  kva_buf b[10];
  int st[10];
  for (int i = 0; i < 10; i++) ids[i] = (uint64_t)i;
  ck_assert_int_eq(req_reserve_write(s, ids, 10, &l, KVA_WRITE_ALL, 0, b, st), 0);
  for (int i = 0; i < 10; i++) {
    ck_assert_int_eq(st[i], KVA_OUT_OF_MEMORY);
    expect_no_buf(b[i]);
  }
  kva_storage_stats ss;
  ck_assert_int_eq(kva_storage_get_stats(s, &ss), KVA_OK);
  ck_assert_uint_eq(ss.l1_objects, 0);
  ck_assert_uint_eq(ss.l1_used_bytes, 0);
  ck_assert_uint_eq(ss.out_of_memory, 10);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_write_new_refuses_existing_keys) { /* 32 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {0, 1, 2, 3, 4};
  kva_layout l = fixture_layout_basic();
  kva_buf b[5];
  int st[5];
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_NEW, 0, b, st), 5);
  ck_assert_int_eq(req_finish_write(s, ids, 5, st), 5);
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_NEW, 0, b, st), 0);
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(st[i], KVA_KEY_NOT_WRITABLE);
    expect_no_buf(b[i]);
  }
  stop_storage(rt);
}
END_TEST

/* UPDATE of a missing key is KVA_KEY_NOT_WRITABLE, as in LMCache. */
START_TEST(reserve_write_update_needs_existing_keys_and_reuses_their_buffers) { /* 33 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {0, 1, 2, 3, 4};
  kva_layout l = fixture_layout_basic();
  kva_buf b[5], first[5];
  int st[5];
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_UPDATE, 0, b, st), 0);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(st[i], KVA_KEY_NOT_WRITABLE);
  for (int i = 0; i < 5; i++) expect_no_buf(b[i]);
  ck_assert_int_eq(req_finish_write(s, ids, 5, st), 0);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(st[i], KVA_KEY_NOT_EXIST);
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_NEW, 0, first, st), 5);
  ck_assert_int_eq(req_finish_write(s, ids, 5, st), 5);
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_UPDATE, 0, b, st), 5);
  for (int i = 0; i < 5; i++) ck_assert_ptr_eq(b[i].ptr, first[i].ptr);
  ck_assert_int_eq(req_finish_write(s, ids, 5, st), 5);
  stop_storage(rt);
}
END_TEST

/* kvact's rule: an existing object is reused only with the same layout. */
START_TEST(reserve_write_of_existing_key_with_another_layout_is_not_writable) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t id = 7;
  kva_layout other = fixture_layout_bytes(4096);
  kva_buf b;
  int st;
  put_ready(s, id, 0);
  ck_assert_int_eq(req_reserve_write(s, &id, 1, &other, KVA_WRITE_ALL, 0, &b, &st), 0);
  ck_assert_int_eq(st, KVA_KEY_NOT_WRITABLE);
  ck_assert(is_writable(s, id));
  stop_storage(rt);
}
END_TEST

/* ---- finish_write (34-36) ------------------------------------------------ */

START_TEST(finish_write_of_absent_key_is_not_exist) { /* 34 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_KEY_NOT_EXIST);
  stop_storage(rt);
}
END_TEST

START_TEST(finish_write_makes_the_key_readable_and_writable) { /* 35 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 12345);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  ck_assert(is_readable(s, 12345));
  ck_assert(is_writable(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(finish_write_twice_is_wrong_state) { /* 36 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_KEY_WRONG_STATE);
  stop_storage(rt);
}
END_TEST

/* ---- finish_write_and_reserve_read (37-42) ------------------------------- */

START_TEST(fwarr_turns_the_write_lock_into_a_read_lock) { /* 37 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b;
  put_write_locked(s, 12345);
  ck_assert_int_eq(fwarr1(s, 12345, 1, &b), KVA_OK);
  expect_buf(b);
  expect_stats(s, 1, 0, 1, 0);
  ck_assert(is_read_locked(s, 12345));
  ck_assert(is_readable(s, 12345));
  ck_assert(!is_writable(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(fwarr_of_absent_key_is_not_exist) { /* 38 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  ck_assert_int_eq(fwarr1(s, 12345, 1, &b), KVA_KEY_NOT_EXIST);
  expect_no_buf(b);
  stop_storage(rt);
}
END_TEST

START_TEST(fwarr_of_ready_key_is_wrong_state) { /* 39 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  put_ready(s, 12345, 0);
  ck_assert_int_eq(fwarr1(s, 12345, 1, &b), KVA_KEY_WRONG_STATE);
  expect_no_buf(b);
  ck_assert(!is_read_locked(s, 12345));
  stop_storage(rt);
}
END_TEST

/* LMCache #40 forces a read lock onto a write-locked object; kvact's
 * invariant (write-locked xor read-locked) makes that state unreachable.
 * Checked instead: no request reaches it, and fwarr of an object already
 * read-locked (reached legally) is KVA_KEY_WRONG_STATE. */
START_TEST(no_request_makes_an_object_write_and_read_locked) { /* 40 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t id = 12345;
  size_t hits = 99;
  put_write_locked(s, id);
  ck_assert_int_eq(reserve_read1(s, id, 1, NULL), KVA_KEY_NOT_READABLE);
  ck_assert_int_eq(req_prefetch(s, &id, 1, 1, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 0);
  expect_stats(s, 1, 1, 0, 0);
  expect_memcheck_locked(s, "1 write-locked and 0 read-locked");
  ck_assert_int_eq(fwarr1(s, id, 1, NULL), KVA_OK);
  ck_assert_int_eq(fwarr1(s, id, 1, NULL), KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(reserve_write1(s, id, KVA_WRITE_ALL, 0, NULL), KVA_KEY_NOT_WRITABLE);
  ck_assert_int_eq(finish_write1(s, id), KVA_KEY_WRONG_STATE);
  expect_stats(s, 1, 0, 1, 0);
  expect_memcheck_locked(s, "0 write-locked and 1 read-locked");
  ck_assert_int_eq(finish_read1(s, id, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(fwarr_gives_each_key_its_own_status) { /* 41 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {1, 2, 3};
  kva_buf b[3];
  int st[3];
  put_write_locked(s, 1);
  put_ready(s, 3, 0);
  ck_assert_int_eq(req_fwarr(s, ids, 3, 1, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  expect_buf(b[0]);
  ck_assert_int_eq(st[1], KVA_KEY_NOT_EXIST);
  expect_no_buf(b[1]);
  ck_assert_int_eq(st[2], KVA_KEY_WRONG_STATE);
  expect_no_buf(b[2]);
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(read_works_after_fwarr) { /* 42 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf a, b;
  put_write_locked(s, 12345);
  ck_assert_int_eq(fwarr1(s, 12345, 1, &a), KVA_OK);
  ck_assert_int_eq(read1(s, 12345, &b), KVA_OK);
  expect_buf(b);
  ck_assert_ptr_eq(a.ptr, b.ptr);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l1_write_test");
  TCase *tc_lmcache_port = tcase_create("lmcache_port");
  tcase_set_timeout(tc_lmcache_port, 60);
  tcase_add_test(tc_lmcache_port, reserve_write_of_new_key_returns_a_buffer);
  tcase_add_test(tc_lmcache_port, reserve_write_of_write_locked_key_is_not_writable);
  tcase_add_test(tc_lmcache_port, reserve_write_of_read_locked_key_is_not_writable);
  tcase_add_test(tc_lmcache_port, reserve_write_of_temporary_key_is_not_writable);
  tcase_add_test(tc_lmcache_port, reserve_write_of_several_keys_gives_distinct_buffers);
  tcase_add_test(tc_lmcache_port, reserve_write_that_does_not_fit_fails_every_new_key);
  tcase_add_test(tc_lmcache_port, reserve_write_new_refuses_existing_keys);
  tcase_add_test(tc_lmcache_port,
                 reserve_write_update_needs_existing_keys_and_reuses_their_buffers);
  tcase_add_test(tc_lmcache_port,
                 reserve_write_of_existing_key_with_another_layout_is_not_writable);
  tcase_add_test(tc_lmcache_port, finish_write_of_absent_key_is_not_exist);
  tcase_add_test(tc_lmcache_port, finish_write_makes_the_key_readable_and_writable);
  tcase_add_test(tc_lmcache_port, finish_write_twice_is_wrong_state);
  tcase_add_test(tc_lmcache_port, fwarr_turns_the_write_lock_into_a_read_lock);
  tcase_add_test(tc_lmcache_port, fwarr_of_absent_key_is_not_exist);
  tcase_add_test(tc_lmcache_port, fwarr_of_ready_key_is_wrong_state);
  tcase_add_test(tc_lmcache_port, no_request_makes_an_object_write_and_read_locked);
  tcase_add_test(tc_lmcache_port, fwarr_gives_each_key_its_own_status);
  tcase_add_test(tc_lmcache_port, read_works_after_fwarr);
  suite_add_tcase(s, tc_lmcache_port);
  return s;
}
