/*
 * l2_mock_test_store.c — what the mock keeps: byte-exact round trips, lock
 * counts, FIFO eviction around locked keys, all-or-nothing stores,
 * replacement, and loads that never hand out bytes of another size or
 * layout. Deterministic mode; a 4 KiB tier holds four 1 KiB objects.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/l2/l2_mock_test.h"
#include "tests/support/fixture.h"

#define SMALL "\"capacity_bytes\":4096"
#define OBJ 1024u

/* Locks key i (a lookup that found it); returns the object to unlock. */
static objs *lock_key(mk *h, uint64_t i) {
  objs *o = objs_make(i, 1, 1, -1);
  ck_assert_uint_eq(mk_lookup(h, o), 1);
  return o;
}

/* A SMALL tier that is full: keys 0..3 of OBJ bytes, generation 0, one
 * STORE each (a STORE's keys are a chain, evicted from its end: these are
 * four chains, in FIFO order). */
static mk open_full(void) {
  mk h = mk_open(0, SMALL);
  for (uint64_t i = 0; i < 4; i++) ck_assert_int_eq(mk_store_range(&h, i, 1, OBJ, 0), KVA_OK);
  return h;
}

START_TEST(store_lookup_load_unlock_round_trip_is_byte_exact) {
  mk h = mk_open(0, "");
  objs *a = objs_make(0, 4, 1000, 5), *b = objs_make(10, 2, 3000, 6);
  ck_assert_int_eq(mk_store(&h, a), KVA_OK);
  ck_assert_int_eq(mk_store(&h, b), KVA_OK);
  ck_assert_uint_eq(mk_lookup(&h, a), 0xf);
  ck_assert_uint_eq(mk_lookup(&h, b), 0x3);
  ck_assert_uint_eq(mk_stats(&h).keys_locked, 6);
  ck_assert_uint_eq(mk_load_check(&h, 0, 4, 1000, 5), 0xf);
  ck_assert_uint_eq(mk_load_check(&h, 10, 2, 3000, 6), 0x3);
  mk_unlock(&h, a);
  mk_unlock(&h, b);
  kva_l2_stats s = mk_stats(&h);
  ck_assert_uint_eq(s.objects, 6);
  ck_assert_uint_eq(s.bytes, 4 * 1000 + 2 * 3000);
  objs_free(a);
  objs_free(b);
  mk_close(&h);
}
END_TEST

START_TEST(a_key_locked_twice_needs_two_unlocks) {
  mk h = open_full();
  objs *k0 = lock_key(&h, 0);
  ck_assert_uint_eq(mk_lookup(&h, k0), 1);
  ck_assert_uint_eq(mk_stats(&h).keys_locked, 2);
  mk_unlock(&h, k0);
  ck_assert_uint_eq(mk_stats(&h).keys_locked, 1);
  /* still locked: key 1, the next oldest, makes room instead */
  ck_assert_int_eq(mk_store_range(&h, 4, 1, OBJ, 0), KVA_OK);
  ck_assert_uint_eq(mk_present(&h, 0, 5), 0x1d);
  mk_unlock_free(&h, k0);
  ck_assert_uint_eq(mk_stats(&h).keys_locked, 0);
  /* unlocked now, and the oldest: the next store evicts it */
  ck_assert_int_eq(mk_store_range(&h, 5, 1, OBJ, 0), KVA_OK);
  ck_assert_uint_eq(mk_present(&h, 0, 6), 0x3c);
  mk_close(&h);
}
END_TEST

START_TEST(eviction_takes_the_oldest_stored_first) {
  mk h = mk_open(0, SMALL);
  for (uint64_t i = 0; i < 4; i++) ck_assert_int_eq(mk_store_range(&h, i, 1, OBJ, 0), KVA_OK);
  ck_assert_int_eq(mk_store_range(&h, 4, 1, OBJ, 0), KVA_OK);
  ck_assert_uint_eq(mk_present(&h, 0, 5), 0x1e);
  ck_assert_int_eq(mk_store_range(&h, 5, 2, OBJ, 0), KVA_OK);
  ck_assert_uint_eq(mk_present(&h, 0, 7), 0x78);
  kva_l2_stats s = mk_stats(&h);
  ck_assert_uint_eq(s.evictions, 3);
  ck_assert_uint_eq(s.bytes, 4096);
  ck_assert_uint_le(s.bytes, s.capacity_bytes);
  mk_close(&h);
}
END_TEST

START_TEST(eviction_skips_locked_keys) {
  mk h = open_full();
  objs *k0 = lock_key(&h, 0), *k2 = lock_key(&h, 2);
  ck_assert_int_eq(mk_store_range(&h, 4, 2, OBJ, 1), KVA_OK);
  ck_assert_uint_eq(mk_present(&h, 0, 6), 0x35);
  ck_assert_uint_eq(mk_load_check(&h, 0, 1, OBJ, 0), 1);
  ck_assert_uint_eq(mk_load_check(&h, 4, 2, OBJ, 1), 3);
  mk_unlock_free(&h, k0);
  mk_unlock_free(&h, k2);
  mk_close(&h);
}
END_TEST

START_TEST(a_store_larger_than_the_tier_fails_and_keeps_nothing) {
  mk h = mk_open(0, SMALL);
  ck_assert_int_eq(mk_store_range(&h, 0, 2, OBJ, 0), KVA_OK);
  ck_assert_int_eq(mk_store_range(&h, 9, 1, 5000, 0), KVA_ENOMEM);
  /* five objects of 1 KiB: each would fit, the task does not */
  ck_assert_int_eq(mk_store_range(&h, 10, 5, OBJ, 0), KVA_ENOMEM);
  ck_assert_uint_eq(mk_present(&h, 9, 6), 0);
  ck_assert_uint_eq(mk_present(&h, 0, 2), 3); /* nothing evicted for it */
  kva_l2_stats s = mk_stats(&h);
  ck_assert_uint_eq(s.objects, 2);
  ck_assert_uint_eq(s.evictions, 0);
  ck_assert_uint_eq(s.store_failures, 2);
  mk_close(&h);
}
END_TEST

START_TEST(a_store_that_fits_only_over_locked_keys_fails_and_keeps_nothing) {
  mk h = open_full();
  objs *all = objs_make(0, 4, 1, -1);
  ck_assert_uint_eq(mk_lookup(&h, all), 0xf);
  ck_assert_int_eq(mk_store_range(&h, 4, 1, OBJ, 0), KVA_ENOMEM);
  ck_assert_uint_eq(mk_present(&h, 4, 1), 0);
  /* one key unlocked: room for one object, not for two */
  objs *k0 = objs_make(0, 1, 1, -1);
  mk_unlock(&h, k0);
  ck_assert_int_eq(mk_store_range(&h, 5, 2, OBJ, 0), KVA_ENOMEM);
  ck_assert_uint_eq(mk_present(&h, 0, 7), 0xf);
  ck_assert_uint_eq(mk_stats(&h).evictions, 0);
  ck_assert_uint_eq(mk_lookup(&h, k0), 1);
  mk_unlock(&h, all);
  objs_free(all);
  objs_free(k0);
  mk_close(&h);
}
END_TEST

START_TEST(storing_an_existing_key_replaces_its_bytes) {
  mk h = mk_open(0, SMALL);
  ck_assert_int_eq(mk_store_range(&h, 0, 1, OBJ, 1), KVA_OK);
  ck_assert_int_eq(mk_store_range(&h, 0, 1, OBJ, 2), KVA_OK);
  ck_assert_uint_eq(mk_load_check(&h, 0, 1, OBJ, 2), 1);
  ck_assert_uint_eq(mk_stats(&h).objects, 1);
  ck_assert_int_eq(mk_store_range(&h, 0, 1, 2 * OBJ, 3), KVA_OK);
  ck_assert_uint_eq(mk_load_check(&h, 0, 1, OBJ, 3), 0);
  ck_assert_uint_eq(mk_load_check(&h, 0, 1, 2 * OBJ, 3), 1);
  kva_l2_stats s = mk_stats(&h);
  ck_assert_uint_eq(s.bytes, 2 * OBJ);
  ck_assert_uint_eq(s.evictions, 0);
  mk_close(&h);
}
END_TEST

START_TEST(a_replaced_key_counts_as_newly_stored) {
  mk h = open_full();
  ck_assert_int_eq(mk_store_range(&h, 0, 1, OBJ, 1), KVA_OK);
  ck_assert_int_eq(mk_store_range(&h, 4, 1, OBJ, 0), KVA_OK);
  ck_assert_uint_eq(mk_present(&h, 0, 5), 0x1d); /* key 1 went, not key 0 */
  mk_close(&h);
}
END_TEST

START_TEST(storing_over_a_locked_key_fails_and_keeps_the_old_bytes) {
  mk h = mk_open(0, SMALL);
  ck_assert_int_eq(mk_store_range(&h, 0, 1, OBJ, 1), KVA_OK);
  objs *k0 = lock_key(&h, 0);
  ck_assert_int_eq(mk_store_range(&h, 0, 2, OBJ, 2), KVA_EAGAIN);
  ck_assert_uint_eq(mk_present(&h, 1, 1), 0);
  ck_assert_uint_eq(mk_load_check(&h, 0, 1, OBJ, 1), 1);
  mk_unlock_free(&h, k0);
  ck_assert_int_eq(mk_store_range(&h, 0, 2, OBJ, 2), KVA_OK);
  ck_assert_uint_eq(mk_load_check(&h, 0, 2, OBJ, 2), 3);
  mk_close(&h);
}
END_TEST

START_TEST(a_key_twice_in_one_store_keeps_the_later_bytes) {
  mk h = mk_open(0, SMALL);
  objs *o = objs_make(0, 2, OBJ, 4);
  o->k[1] = o->k[0]; /* buffer 1 holds key 1's pattern */
  ck_assert_int_eq(mk_store(&h, o), KVA_OK);
  objs *out = objs_make(0, 1, OBJ, -1);
  ck_assert_uint_eq(mk_load(&h, out), 1);
  ck_assert(objs_hold(out, 0, 1, 4));
  ck_assert_uint_eq(mk_stats(&h).objects, 1);
  objs_free(o);
  objs_free(out);
  mk_close(&h);
}
END_TEST

START_TEST(a_load_of_another_size_or_layout_leaves_the_bit_clear) {
  mk h = mk_open(0, "");
  ck_assert_int_eq(mk_store_range(&h, 0, 1, OBJ, 0), KVA_OK); /* u8 [1024] */
  objs *o = objs_make(0, 1, OBJ, -1);
  o->l.tensor[0].dtype = KVA_DT_F16; /* f16 [512]: same bytes, another layout */
  o->l.tensor[0].shape[0] = OBJ / 2;
  ck_assert_uint_eq(mk_load(&h, o), 0);
  for (size_t j = 0; j < OBJ; j++) ck_assert_uint_eq(((uint8_t *)o->b[0].ptr)[j], 0);
  ck_assert_uint_eq(mk_load_check(&h, 0, 1, OBJ / 2, 0), 0);
  ck_assert_uint_eq(mk_load_check(&h, 0, 1, 2 * OBJ, 0), 0);
  ck_assert_uint_eq(mk_load_check(&h, 0, 1, OBJ, 0), 1);
  ck_assert_uint_eq(mk_stats(&h).load_failures, 3);
  objs_free(o);
  mk_close(&h);
}
END_TEST

/* The protocol asks for locks; the mock does not insist on them. */
START_TEST(a_load_without_a_lock_is_served) {
  mk h = mk_open(0, "");
  ck_assert_int_eq(mk_store_range(&h, 0, 3, OBJ, 7), KVA_OK);
  ck_assert_uint_eq(mk_load_check(&h, 0, 4, OBJ, 7), 0x7);
  mk_close(&h);
}
END_TEST

START_TEST(an_unbounded_tier_never_evicts) {
  mk h = mk_open(0, "\"capacity_bytes\":0");
  for (uint64_t i = 0; i < 8; i++)
    ck_assert_int_eq(mk_store_range(&h, i * 16, 16, 64 << 10, 0), KVA_OK);
  kva_l2_stats s = mk_stats(&h);
  ck_assert_uint_eq(s.objects, 128);
  ck_assert_uint_eq(s.bytes, 128ull << 16);
  ck_assert_uint_eq(s.capacity_bytes, 0);
  ck_assert_uint_eq(s.evictions, 0);
  mk_close(&h);
}
END_TEST

/* Recycled buffers of several sizes, many times over: every load must
 * still see exactly its own generation. */
START_TEST(eviction_cycles_keep_every_byte_right) {
  mk h = mk_open(0, "\"capacity_bytes\":32768");
  const uint64_t sizes[] = {4096, 2048, 3000};
  for (int r = 0; r < 300; r++) {
    uint64_t bytes = sizes[r % 3], first = 2 * (uint64_t)r;
    ck_assert_int_eq(mk_store_range(&h, first, 2, bytes, r), KVA_OK);
    ck_assert_uint_eq(mk_load_check(&h, first, 2, bytes, r), 3);
  }
  ck_assert_uint_eq(mk_present(&h, 0, 2), 0);
  kva_l2_stats s = mk_stats(&h);
  ck_assert_uint_le(s.bytes, 32768);
  ck_assert_uint_gt(s.evictions, 500);
  mk_close(&h);
}
END_TEST

TCase *l2_mock_store_tcase(void) {
  TCase *t = tcase_create("store");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, store_lookup_load_unlock_round_trip_is_byte_exact);
  tcase_add_test(t, a_key_locked_twice_needs_two_unlocks);
  tcase_add_test(t, eviction_takes_the_oldest_stored_first);
  tcase_add_test(t, eviction_skips_locked_keys);
  tcase_add_test(t, a_store_larger_than_the_tier_fails_and_keeps_nothing);
  tcase_add_test(t, a_store_that_fits_only_over_locked_keys_fails_and_keeps_nothing);
  tcase_add_test(t, storing_an_existing_key_replaces_its_bytes);
  tcase_add_test(t, a_replaced_key_counts_as_newly_stored);
  tcase_add_test(t, storing_over_a_locked_key_fails_and_keeps_the_old_bytes);
  tcase_add_test(t, a_key_twice_in_one_store_keeps_the_later_bytes);
  tcase_add_test(t, a_load_of_another_size_or_layout_leaves_the_bit_clear);
  tcase_add_test(t, a_load_without_a_lock_is_served);
  tcase_add_test(t, an_unbounded_tier_never_evicts);
  tcase_add_test(t, eviction_cycles_keep_every_byte_right);
  return t;
}
