/*
 * l2_contract_test_data.c — what a LOAD serves: exactly the bytes stored
 * under that key with that layout (every byte checked, nothing written
 * past a buffer), a miss for a key not there, a layout or size that
 * differs, and the newest bytes of a key stored again; and the STATS
 * fields against what was stored, looked up and loaded.
 */
#include <string.h>

#include "tests/l2/l2_contract_test.h"
#include "tests/support/fixture.h"

START_TEST(a_load_returns_exactly_the_stored_bytes) {
  ct c = ct_open();
  ck_assert_int_eq(ct_store(&c, 0, 6, 3), KVA_OK); /* one task of 6 keys (7 fit every row) */
  ck_assert_int_eq(ct_store(&c, 20, 1, 4), KVA_OK);
  ck_assert_uint_eq(ct_read_back(&c, 0, 6, 3), 0x3f);
  ck_assert_uint_eq(ct_read_back(&c, 20, 1, 4), 1);
  ck_assert_uint_eq(ct_read_back(&c, 3, 2, 3), 3); /* a part, again */
  ct_close(&c);
}
END_TEST

START_TEST(a_load_reports_missing_keys_as_misses) {
  ct c = ct_open();
  ck_assert_uint_eq(ct_lock(&c, 0, 4), 0); /* an empty tier */
  ck_assert_uint_eq(ct_load(&c, 0, 4, 0), 0);
  ck_assert_int_eq(ct_store(&c, 0, 1, 0), KVA_OK);
  ck_assert_int_eq(ct_store(&c, 2, 1, 0), KVA_OK);
  ct_objs *o = ct_objs_new(0, 4, 0);
  ck_assert_uint_eq(ct_lock_objs(&c, o, NULL), 5);
  ck_assert_uint_eq(ct_load_objs(&c, o, 0), 5); /* keys 1 and 3: misses, result KVA_OK */
  ct_unlock_objs(&c, o);
  ct_objs_free(o);
  ct_close(&c);
}
END_TEST

START_TEST(a_store_of_a_present_key_replaces_it) {
  ct c = ct_open();
  ck_assert_int_eq(ct_store(&c, 5, 1, 0), KVA_OK);
  ck_assert_int_eq(ct_store(&c, 5, 1, 1), KVA_OK);
  ck_assert_uint_eq(ct_read_back(&c, 5, 1, 1), 1);
  ck_assert_int_eq(ct_store(&c, 4, 2, 2), KVA_OK); /* a task with a new and a present key */
  ck_assert_uint_eq(ct_read_back(&c, 4, 2, 2), 3);
  kva_l2_stats st = ct_stats(&c); /* replaced, not held twice (bytes: the stats cases) */
  ck_assert_uint_eq(st.objects, c.ad->caps.stats_held_now ? 2 : 4);
  ck_assert_uint_eq(st.evictions, 0);
  ct_close(&c);
}
END_TEST

/* A LOAD of key id into one buffer of len bytes with layout l: whether it
 * hit (a hit must be version v's bytes, nothing written past len). */
static uint64_t load_as(ct *c, uint64_t id, const kva_layout *l, size_t len, uint32_t v) {
  ct_objs *o = ct_objs_make(&id, 1, l, len, v);
  uint64_t m = ct_load_objs(c, o, v);
  ct_objs_free(o);
  return m;
}

START_TEST(a_load_with_another_layout_or_size_is_a_miss) {
  ct c = ct_open();
  kva_layout u8 = fixture_layout_bytes(CT_LEN), two = u8;
  kva_layout f16 = fixture_layout_bytes(CT_LEN / 2), longer = fixture_layout_bytes(CT_LEN + 1);
  f16.tensor[0].dtype = KVA_DT_F16; /* the same bytes, another layout */
  two.tensor[0].ndim = 2;           /* [CT_LEN, 1]: the same bytes, another shape */
  two.tensor[0].shape[1] = 1;
  ck_assert_uint_eq(kva_layout_bytes(&f16), CT_LEN);
  ck_assert_uint_eq(kva_layout_bytes(&two), CT_LEN);
  ck_assert_int_eq(ct_store(&c, 3, 1, 0), KVA_OK);
  ck_assert_uint_eq(ct_lock(&c, 3, 1), 1);
  ck_assert_uint_eq(load_as(&c, 3, &f16, CT_LEN, 0), 0);
  ck_assert_uint_eq(load_as(&c, 3, &two, CT_LEN, 0), 0);
  ck_assert_uint_eq(load_as(&c, 3, &longer, CT_LEN + 1, 0), 0);
  ck_assert_uint_eq(load_as(&c, 3, &u8, CT_LEN - 1, 0), 0); /* a buffer shorter than the object */
  ck_assert_uint_eq(load_as(&c, 3, &u8, CT_LEN + 1, 0), 0); /* a buffer longer than the object */
  ck_assert_uint_eq(load_as(&c, 3, &u8, 0, 0), 0);          /* an empty buffer */
  ck_assert_uint_eq(load_as(&c, 3, &u8, CT_LEN, 0), 1);     /* and the right one still loads */
  ct_unlock(&c, 3, 1);
  ct_close(&c);
}
END_TEST

START_TEST(a_store_under_another_layout_replaces_the_key) {
  ct c = ct_open();
  kva_layout u8 = fixture_layout_bytes(CT_LEN), f16 = fixture_layout_bytes(CT_LEN / 2);
  f16.tensor[0].dtype = KVA_DT_F16;
  uint64_t id = 4;
  ck_assert_int_eq(ct_store(&c, id, 1, 0), KVA_OK);
  ct_objs *o = ct_objs_make(&id, 1, &f16, CT_LEN, 1);
  ck_assert_int_eq(ct_store_objs(&c, o), KVA_OK);
  ct_objs_free(o);
  ck_assert_uint_eq(ct_lock(&c, id, 1), 1);
  ck_assert_uint_eq(load_as(&c, id, &u8, CT_LEN, 0), 0);
  ck_assert_uint_eq(load_as(&c, id, &f16, CT_LEN, 1), 1);
  ct_unlock(&c, id, 1);
  ct_close(&c);
}
END_TEST

/* ---- STATS ---------------------------------------------------------------- */

START_TEST(stats_of_a_fresh_tier_are_zero) {
  ct c = ct_open();
  kva_l2_stats st = ct_stats(&c), zero;
  memset(&zero, 0, sizeof(zero));
  zero.capacity_bytes = st.capacity_bytes; /* the adapter's own */
  ct_expect_same_stats(&zero, &st, "a fresh tier");
  ct_close(&c);
}
END_TEST

/* Expected counters since start; objects and bytes as the row counts. */
static void expect_counters(const kva_l2_stats *st, uint64_t stores, uint64_t store_failures,
                            uint64_t lookups, uint64_t loads, uint64_t load_failures) {
  ck_assert_uint_eq(st->stores, stores);
  ck_assert_uint_eq(st->store_failures, store_failures);
  ck_assert_uint_eq(st->lookups, lookups);
  ck_assert_uint_eq(st->loads, loads);
  ck_assert_uint_eq(st->load_failures, load_failures);
  ck_assert_uint_eq(st->evictions, 0);
  ck_assert_msg(st->capacity_bytes == 0 || st->capacity_bytes >= st->bytes,
                "capacity_bytes %lu below the bytes held (%lu)", (unsigned long)st->capacity_bytes,
                (unsigned long)st->bytes);
}

START_TEST(stats_follow_what_was_stored_looked_up_and_loaded) {
  ct c = ct_open();
  bool now = c.ad->caps.stats_held_now;
  ck_assert_int_eq(ct_store(&c, 0, 3, 0), KVA_OK); /* one task of 3 keys */
  ck_assert_int_eq(ct_store(&c, 1, 1, 0), KVA_OK); /* key 1 again */
  ck_assert_uint_eq(ct_lock(&c, 0, 4), 7);         /* 4 keys asked, 3 locked */
  ck_assert_uint_eq(ct_stats(&c).keys_locked, 3);
  ck_assert_uint_eq(ct_load(&c, 1, 3, 0), 3); /* 3 keys asked, key 3 a miss */
  ct_unlock(&c, 0, 4);
  kva_l2_stats st = ct_stats(&c);
  ck_assert_uint_eq(st.objects, now ? 3 : 4);
  ck_assert_uint_eq(st.bytes, (now ? 3 : 4) * CT_LEN);
  ck_assert_uint_eq(st.keys_locked, 0);
  expect_counters(&st, 2, 0, 4, 3, 1);
  ck_assert_uint_eq(ct_lock(&c, 2, 1), 1); /* a failed task counts too */
  ck_assert_int_lt(ct_store(&c, 2, 1, 1), 0);
  ct_unlock(&c, 2, 1);
  st = ct_stats(&c);
  ck_assert_uint_eq(st.objects, now ? 3 : 4);
  expect_counters(&st, 3, 1, 5, 3, 1);
  ct_close(&c);
}
END_TEST

TCase *l2_contract_data_tcase(void) {
  TCase *tc = tcase_create("data");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, a_load_returns_exactly_the_stored_bytes);
  tcase_add_test(tc, a_load_reports_missing_keys_as_misses);
  tcase_add_test(tc, a_store_of_a_present_key_replaces_it);
  tcase_add_test(tc, a_load_with_another_layout_or_size_is_a_miss);
  tcase_add_test(tc, a_store_under_another_layout_replaces_the_key);
  tcase_add_test(tc, stats_of_a_fresh_tier_are_zero);
  tcase_add_test(tc, stats_follow_what_was_stored_looked_up_and_loaded);
  return tc;
}
