/*
 * storage_test.c — the storage facade: write, prefetch, read, delete, and
 * the LMCache storage-manager scenarios (L1 parts).
 */
#include <check.h>
#include <string.h>

#include "kvact.h"
#include "tests/support/fixture.h"

#define MiB (1024ull * 1024ull)

START_TEST(write_then_prefetch_reads_the_same_bytes) {
  kva_runtime *rt = fixture_storage(2, 64 * MiB, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  kva_buf b[5];
  int st[5];
  for (int i = 0; i < 5; i++) k[i] = fixture_key(i);
  ck_assert_int_eq(kva_reserve_write(s, k, 5, &l, KVA_WRITE_NEW, b, st), 5);
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(b[i].len, 204800);
    memset(b[i].ptr, 'a' + i, b[i].len);
  }
  ck_assert_int_eq(kva_finish_write(s, k, 5, st), 5);
  kva_prefetch *h;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 5, &l, 0, &h), KVA_OK);
  size_t hits = 99;
  ck_assert_int_eq(kva_wait_prefetch(s, h, 1000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 5);
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EINVAL);
  kva_buf rb[5];
  ck_assert_int_eq(kva_read_prefetched(s, k, 5, rb), KVA_OK);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(((char *)rb[i].ptr)[100], 'a' + i);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 5, 0), 5);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("storage");
  TCase *tc = tcase_create("facade");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, write_then_prefetch_reads_the_same_bytes);
  suite_add_tcase(s, tc);
  return s;
}
