/*
 * l2_contract_test_locks.c — LOOKUP_AND_LOCK locks exactly the keys
 * present (prev is a hint that changes no result), and a locked key stays
 * as it is, not replaced, until as many UNLOCKs as LOCKs came; UNLOCKs of
 * keys not locked are ignored (they are no credit for a later lock). The
 * capacity cases, for adapters that bound what they hold: a locked key
 * survives stores into a full tier (evicting adapters evict others, the
 * others refuse the store), and a tier full of locked keys refuses a
 * store and keeps every one of them.
 */
#include "tests/l2/l2_contract_test.h"
#include "tests/support/fixture.h"

START_TEST(a_lookup_locks_the_keys_present) {
  ct c = ct_open();
  ck_assert_int_eq(ct_store(&c, 0, 3, 0), KVA_OK);
  ct_objs *o = ct_objs_new(0, 5, 0);
  kva_key prev = fixture_key(99);
  ck_assert_uint_eq(ct_lock_objs(&c, o, &prev), 7);
  ck_assert_uint_eq(ct_stats(&c).keys_locked, 3);
  ck_assert_uint_eq(ct_lock_objs(&c, o, NULL), 7); /* no hint, the same answer */
  ck_assert_uint_eq(ct_stats(&c).keys_locked, 6);
  ct_unlock_objs(&c, o);
  ck_assert_uint_eq(ct_stats(&c).keys_locked, 3);
  ct_unlock_objs(&c, o);
  ck_assert_uint_eq(ct_stats(&c).keys_locked, 0);
  ct_objs_free(o);
  ct_close(&c);
}
END_TEST

START_TEST(a_locked_key_is_not_replaced) {
  ct c = ct_open();
  ck_assert_int_eq(ct_store(&c, 7, 1, 0), KVA_OK);
  ck_assert_uint_eq(ct_lock(&c, 7, 1), 1);
  ck_assert_int_lt(ct_store(&c, 7, 1, 1), 0);
  ck_assert_int_lt(ct_store(&c, 6, 2, 1), 0);      /* a task with the locked key fails as a whole */
  ck_assert_uint_eq(ct_load(&c, 7, 1, 0), 1);      /* still locked, still version 0 */
  ck_assert_uint_le(ct_read_back(&c, 6, 1, 1), 1); /* what it stored may stay, as itself */
  ct_unlock(&c, 7, 1);
  ck_assert_int_eq(ct_store(&c, 7, 1, 1), KVA_OK);
  ck_assert_uint_eq(ct_read_back(&c, 7, 1, 1), 1);
  ct_close(&c);
}
END_TEST

START_TEST(a_key_stays_locked_until_as_many_unlocks_as_locks) {
  ct c = ct_open();
  ck_assert_int_eq(ct_store(&c, 8, 1, 0), KVA_OK);
  ck_assert_uint_eq(ct_lock(&c, 8, 1), 1);
  ck_assert_uint_eq(ct_lock(&c, 8, 1), 1);
  ct_unlock(&c, 8, 1);
  ck_assert_uint_eq(ct_stats(&c).keys_locked, 1);
  ck_assert_int_lt(ct_store(&c, 8, 1, 1), 0); /* one lock left */
  ct_unlock(&c, 8, 1);
  ck_assert_uint_eq(ct_stats(&c).keys_locked, 0);
  ck_assert_int_eq(ct_store(&c, 8, 1, 1), KVA_OK);
  ck_assert_uint_eq(ct_read_back(&c, 8, 1, 1), 1);
  ct_close(&c);
}
END_TEST

START_TEST(unlocks_of_keys_not_locked_are_ignored) {
  ct c = ct_open();
  ck_assert_int_eq(ct_store(&c, 9, 1, 0), KVA_OK);
  ct_unlock(&c, 9, 1); /* present, not locked */
  ct_unlock(&c, 9, 1);
  ct_unlock(&c, 10, 1); /* not present */
  ck_assert_uint_eq(ct_stats(&c).keys_locked, 0);
  ck_assert_uint_eq(ct_lock(&c, 9, 1), 1);
  ck_assert_uint_eq(ct_stats(&c).keys_locked, 1);
  ck_assert_int_lt(ct_store(&c, 9, 1, 1), 0); /* the ignored unlocks were no credit */
  ct_unlock(&c, 9, 1);
  ck_assert_int_eq(ct_store(&c, 9, 1, 1), KVA_OK);
  ck_assert_uint_eq(ct_read_back(&c, 9, 1, 1), 1);
  ct_close(&c);
}
END_TEST

TCase *l2_contract_locks_tcase(void) {
  TCase *tc = tcase_create("locks");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, a_lookup_locks_the_keys_present);
  tcase_add_test(tc, a_locked_key_is_not_replaced);
  tcase_add_test(tc, a_key_stays_locked_until_as_many_unlocks_as_locks);
  tcase_add_test(tc, unlocks_of_keys_not_locked_are_ignored);
  return tc;
}

/* ---- capacity ------------------------------------------------------------- */

#define LOCKED_ID 1000u
#define EXTRA_ID 5000u

/* Stores keys [first, first + n) in tasks of up to 8 keys, each KVA_OK. */
static void store_many(ct *c, uint64_t first, size_t n) {
  for (size_t done = 0; done < n; done += 8)
    ck_assert_int_eq(ct_store(c, first + done, n - done < 8 ? n - done : 8, 0), KVA_OK);
}

/* One key locked, then `capacity` other keys stored one task each: an
 * evicting tier takes them all (one eviction: capacity + 1 objects came),
 * the others refuse the one that does not fit. */
START_TEST(a_locked_key_survives_stores_into_a_full_tier) {
  ct c = ct_open();
  const ct_caps *caps = &c.ad->caps;
  ck_assert_int_eq(ct_store(&c, LOCKED_ID, 1, 0), KVA_OK);
  ck_assert_uint_eq(ct_lock(&c, LOCKED_ID, 1), 1);
  for (uint32_t i = 0; i < caps->capacity; i++) {
    int rc = ct_store(&c, i, 1, 0);
    if (caps->evicts || i + 1 < caps->capacity)
      ck_assert_msg(rc == KVA_OK, "store %u of %u: %d", i + 1, caps->capacity, rc);
    else
      ck_assert_msg(rc < 0, "a store into a full tier that does not evict: %d", rc);
  }
  ck_assert_uint_eq(ct_load(&c, LOCKED_ID, 1, 0), 1);
  ct_unlock(&c, LOCKED_ID, 1);
  kva_l2_stats st = ct_stats(&c);
  ck_assert_uint_eq(st.objects, caps->capacity);
  ck_assert_uint_eq(st.evictions, caps->evicts ? 1 : 0);
  ck_assert_uint_eq(ct_read_back(&c, LOCKED_ID, 1, 0), 1);
  ct_close(&c);
}
END_TEST

START_TEST(a_tier_full_of_locked_keys_refuses_a_store_and_keeps_them) {
  ct c = ct_open();
  uint32_t cap = c.ad->caps.capacity;
  ck_assert_uint_le(cap, CT_MAXN);
  store_many(&c, 0, cap);
  ck_assert_uint_eq(ct_lock(&c, 0, cap), cap == 64 ? UINT64_MAX : (1ull << cap) - 1);
  ck_assert_int_lt(ct_store(&c, EXTRA_ID, 1, 0), 0);
  ck_assert_uint_eq(ct_lock(&c, EXTRA_ID, 1), 0);
  uint64_t all = ct_load(&c, 0, cap, 0);
  ck_assert_uint_eq(all, cap == 64 ? UINT64_MAX : (1ull << cap) - 1);
  ct_unlock(&c, 0, cap);
  kva_l2_stats st = ct_stats(&c);
  ck_assert_uint_eq(st.objects, cap);
  ck_assert_uint_eq(st.evictions, 0);
  ct_close(&c);
}
END_TEST

TCase *l2_contract_capacity_tcase(void) {
  TCase *tc = tcase_create("capacity");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, a_locked_key_survives_stores_into_a_full_tier);
  tcase_add_test(tc, a_tier_full_of_locked_keys_refuses_a_store_and_keeps_them);
  return tc;
}
