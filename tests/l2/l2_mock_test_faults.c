/*
 * l2_mock_test_faults.c — fault injection through MOCK_CONTROL and the
 * config: a tier that is down and comes back, keys whose stores or loads
 * fail, and seeded failure rates that repeat exactly for the same seed.
 * Deterministic mode.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/l2/l2_mock_test.h"
#include "tests/support/fixture.h"

#define OBJ 256u

static void set_down(mk *h, int down) {
  mock_control c = {.set = MOCK_SET_DOWN, .down = (uint32_t)down};
  mk_control(h, &c);
}

/* A raw request of `type` over o: its result, bits left in o->bits. */
static int raw(mk *h, uint32_t type, objs *o) {
  memset(o->bits, 0, sizeof(o->bits));
  kva_l2_req r = {.keys = o->k, .n = o->n, .layout = &o->l, .bufs = o->b, .bits = o->bits};
  return mk_call(h, type, &r);
}

START_TEST(a_down_tier_fails_every_request_then_recovers) {
  mk h = mk_open(0, "");
  ck_assert_int_eq(mk_store_range(&h, 0, 2, OBJ, 1), KVA_OK);
  objs *k0 = objs_make(0, 1, OBJ, -1);
  ck_assert_uint_eq(mk_lookup(&h, k0), 1);
  set_down(&h, 1);
  objs *o = objs_make(0, 3, OBJ, 2);
  ck_assert_int_eq(raw(&h, KVA_L2_STORE, o), KVA_EIO);
  ck_assert_int_eq(raw(&h, KVA_L2_LOOKUP_AND_LOCK, o), KVA_EIO);
  ck_assert_uint_eq(objs_bits(o), 0);
  ck_assert_int_eq(raw(&h, KVA_L2_LOAD, o), KVA_EIO);
  ck_assert_uint_eq(objs_bits(o), 0);
  ck_assert(objs_hold(o, 0, 0, 2)); /* the buffers were not touched */
  mk_unlock(&h, k0);                /* UNLOCK and STATS still work */
  kva_l2_stats s = mk_stats(&h);
  ck_assert_uint_eq(s.keys_locked, 0);
  ck_assert_uint_eq(s.store_failures, 1);
  ck_assert_uint_eq(s.load_failures, 3);
  set_down(&h, 0);
  ck_assert_uint_eq(mk_present(&h, 0, 3), 3);
  ck_assert_uint_eq(mk_load_check(&h, 0, 2, OBJ, 1), 3);
  ck_assert_int_eq(mk_store(&h, o), KVA_OK);
  objs_free(o);
  objs_free(k0);
  mk_close(&h);
}
END_TEST

/* Sets the keys whose stores (or loads) fail; n = 0 clears the list. */
static void fail_keys(mk *h, int loads, const uint64_t *ids, uint32_t n) {
  mock_control c = {.set = loads ? MOCK_SET_FAIL_LOAD_KEYS : MOCK_SET_FAIL_STORE_KEYS};
  kva_key *k = loads ? c.fail_load : c.fail_store;
  for (uint32_t i = 0; i < n; i++) k[i] = fixture_key(ids[i]);
  if (loads)
    c.nfail_load = n;
  else
    c.nfail_store = n;
  mk_control(h, &c);
}

START_TEST(a_failing_key_fails_its_whole_store_task) {
  mk h = mk_open(0, "");
  const uint64_t bad[] = {3};
  fail_keys(&h, 0, bad, 1);
  ck_assert_int_eq(mk_store_range(&h, 2, 3, OBJ, 0), KVA_EIO);
  ck_assert_uint_eq(mk_present(&h, 2, 3), 0);
  ck_assert_int_eq(mk_store_range(&h, 2, 1, OBJ, 0), KVA_OK);
  fail_keys(&h, 0, NULL, 0);
  ck_assert_int_eq(mk_store_range(&h, 3, 1, OBJ, 0), KVA_OK);
  ck_assert_uint_eq(mk_present(&h, 2, 2), 3);
  ck_assert_uint_eq(mk_stats(&h).store_failures, 1);
  mk_close(&h);
}
END_TEST

START_TEST(a_failing_key_leaves_its_load_bit_clear) {
  mk h = mk_open(0, "");
  ck_assert_int_eq(mk_store_range(&h, 0, 4, OBJ, 3), KVA_OK);
  const uint64_t bad[] = {1, 3};
  fail_keys(&h, 1, bad, 2);
  objs *o = objs_make(0, 4, OBJ, -1);
  ck_assert_uint_eq(mk_load(&h, o), 0x5);
  for (size_t j = 0; j < OBJ; j++)
    ck_assert_uint_eq(((uint8_t *)o->b[1].ptr)[j] | ((uint8_t *)o->b[3].ptr)[j], 0);
  ck_assert_uint_eq(mk_present(&h, 0, 4), 0xf); /* lookups are not affected */
  fail_keys(&h, 1, NULL, 0);
  ck_assert_uint_eq(mk_load_check(&h, 0, 4, OBJ, 3), 0xf);
  ck_assert_uint_eq(mk_stats(&h).load_failures, 2);
  objs_free(o);
  mk_close(&h);
}
END_TEST

static void set_rates(mk *h, double store_rate, double load_rate, uint64_t seed) {
  mock_control c = {.set = MOCK_SET_FAIL_STORE_RATE | MOCK_SET_FAIL_LOAD_RATE | MOCK_SET_SEED,
                    .fail_store_rate = store_rate,
                    .fail_load_rate = load_rate,
                    .seed = seed};
  mk_control(h, &c);
}

/* Which of 64 stored keys a load gets under the current rate. */
static uint64_t load_pattern(mk *h) {
  objs *o = objs_make(0, 64, OBJ, -1);
  uint64_t m = mk_load(h, o);
  objs_free(o);
  return m;
}

START_TEST(the_same_seed_gives_the_same_load_failures) {
  mk h = mk_open(0, "");
  ck_assert_int_eq(mk_store_range(&h, 0, 64, OBJ, 0), KVA_OK);
  set_rates(&h, 0, 0.5, 42);
  uint64_t a = load_pattern(&h);
  set_rates(&h, 0, 0.5, 42);
  uint64_t b = load_pattern(&h);
  set_rates(&h, 0, 0.5, 43);
  uint64_t c = load_pattern(&h);
  ck_assert_uint_eq(a, b);
  ck_assert_uint_ne(a, c);
  ck_assert(a != 0 && a != UINT64_MAX);
  ck_assert_uint_eq(mk_stats(&h).load_failures, 3 * 64 - (uint64_t)__builtin_popcountll(a) * 2 -
                                                    (uint64_t)__builtin_popcountll(c));
  set_rates(&h, 0, 1, 1);
  ck_assert_uint_eq(load_pattern(&h), 0);
  set_rates(&h, 0, 0, 1);
  ck_assert_uint_eq(load_pattern(&h), UINT64_MAX);
  mk_close(&h);
}
END_TEST

/* Which of 32 one-key store tasks succeed under the current rate. */
static uint64_t store_pattern(mk *h) {
  uint64_t m = 0;
  for (uint64_t i = 0; i < 32; i++) m |= (uint64_t)(mk_store_range(h, i, 1, OBJ, 0) == KVA_OK) << i;
  return m;
}

START_TEST(the_same_seed_gives_the_same_store_failures) {
  mk h = mk_open(0, "");
  set_rates(&h, 0.5, 0, 7);
  uint64_t a = store_pattern(&h);
  ck_assert_uint_eq(mk_present(&h, 0, 32), a); /* a failed task kept nothing */
  set_rates(&h, 0.5, 0, 7);
  ck_assert_uint_eq(store_pattern(&h), a);
  ck_assert(a != 0 && a != 0xffffffffu);
  kva_l2_stats s = mk_stats(&h);
  ck_assert_uint_eq(s.stores, 64);
  ck_assert_uint_eq(s.store_failures, 2 * (32 - (uint64_t)__builtin_popcountll(a)));
  mk_close(&h);
}
END_TEST

/* The config's seed and rates work like MOCK_CONTROL's. */
START_TEST(rates_from_the_config_follow_its_seed) {
  mk h = mk_open(0, "\"fail_load_rate\":0.5,\"seed\":42");
  mk g = mk_open(0, "");
  ck_assert_int_eq(mk_store_range(&h, 0, 64, OBJ, 0), KVA_OK);
  ck_assert_int_eq(mk_store_range(&g, 0, 64, OBJ, 0), KVA_OK);
  set_rates(&g, 0, 0.5, 42);
  ck_assert_uint_eq(load_pattern(&h), load_pattern(&g));
  mk_close(&h);
  mk_close(&g);
  h = mk_open(0, "\"fail_store_rate\":1.0");
  ck_assert_int_eq(mk_store_range(&h, 0, 1, OBJ, 0), KVA_EIO);
  mk_close(&h);
}
END_TEST

TCase *l2_mock_faults_tcase(void) {
  TCase *t = tcase_create("faults");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, a_down_tier_fails_every_request_then_recovers);
  tcase_add_test(t, a_failing_key_fails_its_whole_store_task);
  tcase_add_test(t, a_failing_key_leaves_its_load_bit_clear);
  tcase_add_test(t, the_same_seed_gives_the_same_load_failures);
  tcase_add_test(t, the_same_seed_gives_the_same_store_failures);
  tcase_add_test(t, rates_from_the_config_follow_its_seed);
  return t;
}
