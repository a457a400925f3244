/*
 * l2_prefetch_stale_release_test.c — a prefetch's read locks belong to its
 * caller, whatever happened to an earlier object of the same key.
 *
 * A forced kva_delete / kva_clear of an object the store controller holds
 * read-locked used to let that store task, when it ended, release "key 0"
 * by key: the lock of a new object of the key, taken by a prefetch for its
 * caller. Holders now release the object they locked by id, and a forced
 * delete of a locked object keeps its memory until its holders let go.
 */
#include <check.h>
#include <stdint.h>

#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define MiB (1024u * 1024u)

static bool store_holds_key0(kva_storage *s, void *arg) {
  (void)arg;
  return l2_readers(s, 0) == 1;
}

START_TEST(late_store_release_leaves_a_rewritten_keys_prefetch_lock) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  const uint64_t k0[] = {0};
  l2_set_latency(s, 0, 300000); /* the store task holds key 0 for 300 ms */
  l2_write(s, k0, 1, &l, 1);
  ck_assert(l2_wait_until(store_holds_key0, s, NULL, 5000));
  ck_assert_int_eq(l2_delete_one(s, 0, 1), KVA_OK); /* forced: the store's lock goes too */
  ck_assert_int_eq(kva_set_freeze(s, 1), KVA_OK);   /* the rewrite is not stored */
  l2_write(s, k0, 1, &l, 2);
  ck_assert_uint_eq(l2_prefetch(s, k0, 1, &l, 0), 1); /* L1's new object, read-locked */
  ck_assert_int_eq(kva_set_freeze(s, 0), KVA_OK);
  l2_flush(s);                           /* the first store task ends */
  ck_assert_int_eq(l2_readers(s, 0), 1); /* today: 0, the lock was taken */
  l2_read_release(s, k0, 1, 2, 0);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_prefetch_stale_release");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, late_store_release_leaves_a_rewritten_keys_prefetch_lock);
  suite_add_tcase(su, tc);
  return su;
}
