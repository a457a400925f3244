/*
 * l2_mock_test_input.c — the counters of KVA_L2_STATS, spawning from the
 * config (or none), and bad input: malformed requests are refused with
 * KVA_EINVAL and a warning, never a crash, and leave no trace; a payload
 * that is not a request gets a NULL pointer back; bad UNLOCKs and controls
 * change nothing. Deterministic mode.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/l2/l2_mock_test.h"
#include "tests/support/fixture.h"

/* A mock with schema defaults, its warnings counted from here on. */
static mk open_counting(void) {
  mk h = mk_open(0, "");
  mk_count_warnings();
  return h;
}

/* Stores key 0 (64 bytes); returns an object of key 0 to look it up with. */
static objs *store_key0(mk *h) {
  ck_assert_int_eq(mk_store_range(h, 0, 1, 64, 0), KVA_OK);
  return objs_make(0, 1, 64, -1);
}

START_TEST(stats_count_every_request) {
  mk h = mk_open(0, "\"capacity_bytes\":2048");
  ck_assert_int_eq(mk_store_range(&h, 0, 2, 1024, 0), KVA_OK);
  ck_assert_int_eq(mk_store_range(&h, 2, 1, 1024, 0), KVA_OK); /* evicts key 1: chain 0, 1's end */
  ck_assert_int_eq(mk_store_range(&h, 9, 1, 5000, 0), KVA_ENOMEM); /* too big */
  objs *o = objs_make(0, 3, 1024, -1);
  ck_assert_uint_eq(mk_lookup(&h, o), 5);
  ck_assert_uint_eq(mk_stats(&h).keys_locked, 2);
  ck_assert_uint_eq(mk_load(&h, o), 5);
  mk_unlock(&h, o);
  kva_l2_stats s = mk_stats(&h);
  ck_assert_uint_eq(s.objects, 2);
  ck_assert_uint_eq(s.bytes, 2048);
  ck_assert_uint_eq(s.capacity_bytes, 2048);
  ck_assert_uint_eq(s.keys_locked, 0);
  ck_assert_uint_eq(s.stores, 3);
  ck_assert_uint_eq(s.store_failures, 1);
  ck_assert_uint_eq(s.lookups, 3);
  ck_assert_uint_eq(s.loads, 3);
  ck_assert_uint_eq(s.load_failures, 1);
  ck_assert_uint_eq(s.evictions, 1);
  objs_free(o);
  mk_close(&h);
}
END_TEST

START_TEST(the_tier_is_named_by_the_config) {
  mk h = mk_open(0, "");
  ck_assert_str_eq(kva_actor_name(h.a), "mock0");
  ck_assert_uint_eq(mk_stats(&h).capacity_bytes, 1ull << 30);
  mk_close(&h);
  h = mk_open(0, "\"name\":\"fast\"");
  ck_assert_str_eq(kva_actor_name(h.a), "fast");
  mk_close(&h);
}
END_TEST

START_TEST(spawn_without_a_config_uses_the_schema_defaults) {
  char err[128] = "";
  mk h = {.rt = fixture_runtime(0, NULL), .wait_ms = -1};
  h.a = mock_adapter_spawn(h.rt, NULL, err, sizeof(err));
  ck_assert_msg(h.a != NULL, "spawn: %s", err);
  h.port = kva_port_open(h.rt, "l2_mock_test");
  ck_assert_str_eq(kva_actor_name(h.a), "mock");
  ck_assert_uint_eq(mk_stats(&h).capacity_bytes, 1ull << 30);
  ck_assert_int_eq(mk_store_range(&h, 0, 1, 64, 0), KVA_OK);
  ck_assert_uint_eq(kva_runtime_now_ns(h.rt), 0); /* no latency */
  mk_close(&h);
  ck_assert_ptr_null(mock_adapter_spawn(NULL, NULL, err, sizeof(err)));
}
END_TEST

static void expect_einval(mk *h, uint32_t type, kva_l2_req r) {
  ck_assert_int_eq(mk_call(h, type, &r), KVA_EINVAL);
}

START_TEST(malformed_requests_are_refused_with_einval) {
  mk h = open_counting();
  objs *o = objs_make(0, 2, 64, 1);
  const kva_l2_req good = {.keys = o->k, .n = 2, .layout = &o->l, .bufs = o->b, .bits = o->bits};
  kva_layout no_layout = {0};
  kva_l2_req r;
  const uint32_t all[] = {KVA_L2_STORE, KVA_L2_LOOKUP_AND_LOCK, KVA_L2_LOAD};
  for (int t = 0; t < 3; t++) {
    r = good, r.n = 0, expect_einval(&h, all[t], r);
    r = good, r.keys = NULL, expect_einval(&h, all[t], r);
    r = good, r.n = (1u << 24) + 1, expect_einval(&h, all[t], r);
  }
  r = good, r.bufs = NULL, expect_einval(&h, KVA_L2_STORE, r);
  r = good, r.layout = NULL, expect_einval(&h, KVA_L2_STORE, r);
  r = good, r.layout = &no_layout, expect_einval(&h, KVA_L2_LOAD, r);
  r = good, r.bits = NULL, expect_einval(&h, KVA_L2_LOOKUP_AND_LOCK, r);
  r = good, r.bits = NULL, expect_einval(&h, KVA_L2_LOAD, r);
  r = good, r.bufs = NULL, expect_einval(&h, KVA_L2_LOAD, r);
  r = good, expect_einval(&h, KVA_L2_STATS, r); /* no stats pointer */
  o->k[1].hash_len = 0;                         /* an invalid key */
  expect_einval(&h, KVA_L2_LOOKUP_AND_LOCK, good);
  o->k[1] = fixture_key(1);
  void *p = o->b[1].ptr;
  o->b[1].ptr = NULL;
  expect_einval(&h, KVA_L2_STORE, good);
  o->b[1].ptr = p;
  ck_assert_int_ge(mk_warnings(), 18);
  kva_l2_stats s = mk_stats(&h); /* refused: no trace */
  ck_assert_uint_eq(s.stores + s.lookups + s.loads + s.objects + s.keys_locked, 0);
  ck_assert_int_eq(mk_store(&h, o), KVA_OK);
  ck_assert_uint_eq(mk_load_check(&h, 0, 2, 64, 1), 3);
  objs_free(o);
  mk_close(&h);
}
END_TEST

/* The reply for tag `tag` carries a NULL pointer. */
static void expect_null_reply(mk *h, uint64_t tag) {
  mk_expect_reply_within(h, 0, tag, NULL);
}

START_TEST(a_payload_that_is_not_a_request_gets_a_null_reply) {
  mk h = open_counting();
  kva_actor *me = kva_port_actor(h.port);
  kva_l2_req *none = NULL;
  ck_assert_int_eq(kva_send(h.a, KVA_L2_LOAD, &none, sizeof(none), me, 5), KVA_OK);
  expect_null_reply(&h, 5);
  ck_assert_int_eq(kva_send(h.a, KVA_L2_STORE, "abc", 3, me, 6), KVA_OK);
  expect_null_reply(&h, 6);
  ck_assert_int_eq(kva_send(h.a, KVA_L2_STATS, NULL, 0, me, 7), KVA_OK);
  expect_null_reply(&h, 7);
  ck_assert_int_ge(mk_warnings(), 3);
  mk_close(&h);
}
END_TEST

START_TEST(requests_without_a_sender_are_dropped) {
  mk h = open_counting();
  objs *o = store_key0(&h);
  kva_l2_req r = {.keys = o->k, .n = 1, .bits = o->bits}, *p = &r;
  ck_assert_int_eq(kva_send(h.a, KVA_L2_LOOKUP_AND_LOCK, &p, sizeof(p), NULL, 1), KVA_OK);
  mk_expect_silence(&h, 0);
  ck_assert_uint_eq(mk_stats(&h).keys_locked, 0); /* nobody could unlock it */
  ck_assert_int_ge(mk_warnings(), 1);
  objs_free(o);
  mk_close(&h);
}
END_TEST

START_TEST(a_bad_unlock_changes_nothing) {
  mk h = open_counting();
  objs *o = store_key0(&h);
  ck_assert_uint_eq(mk_lookup(&h, o), 1);
  kva_key two[2] = {o->k[0], o->k[0]}, junk;
  memset(&junk, 0xff, sizeof(junk));
  kva_actor *me = kva_port_actor(h.port);
  ck_assert_int_eq(kva_send(h.a, KVA_L2_UNLOCK, two, sizeof(kva_key) + 3, me, 0), KVA_OK);
  ck_assert_int_eq(kva_send(h.a, KVA_L2_UNLOCK, &junk, sizeof(junk), me, 0), KVA_OK);
  ck_assert_int_eq(kva_send(h.a, KVA_L2_UNLOCK, NULL, 0, me, 0), KVA_OK);
  ck_assert_uint_eq(mk_stats(&h).keys_locked, 1);
  ck_assert_int_ge(mk_warnings(), 1);
  /* a key unlocked more often than locked: the extra UNLOCK is ignored */
  ck_assert_int_eq(kva_send(h.a, KVA_L2_UNLOCK, two, sizeof(two), me, 0), KVA_OK);
  ck_assert_uint_eq(mk_stats(&h).keys_locked, 0);
  ck_assert_uint_eq(mk_lookup(&h, o), 1);
  mk_unlock(&h, o);
  objs_free(o);
  mk_close(&h);
}
END_TEST

START_TEST(a_bad_control_changes_nothing_and_is_answered) {
  mk h = open_counting();
  mock_control c = {.set = MOCK_SET_DOWN | MOCK_SET_FAIL_STORE_RATE, .down = 1};
  c.fail_store_rate = 2.0;
  mk_control(&h, &c);
  c.fail_store_rate = NAN;
  mk_control(&h, &c);
  c = (mock_control){.set = MOCK_SET_DOWN | MOCK_SET_FAIL_LOAD_KEYS, .down = 1, .nfail_load = 9};
  mk_control(&h, &c);
  c = (mock_control){.set = MOCK_SET_DOWN | MOCK_SET_LATENCY, .down = 1, .latency_us = 61000000};
  mk_control(&h, &c);
  kva_actor *me = kva_port_actor(h.port);
  ck_assert_int_eq(kva_send(h.a, MOCK_CONTROL, "x", 1, me, 9), KVA_OK);
  kva_msg m;
  ck_assert_int_eq(kva_port_recv(h.port, &m, NULL, 0, 0), KVA_OK);
  ck_assert(m.type == KVA_L2_DONE && m.tag == 9 && m.len == 0);
  ck_assert_int_ge(mk_warnings(), 5);
  ck_assert_int_eq(mk_store_range(&h, 0, 1, 64, 0), KVA_OK); /* not down */
  /* without a sender a control still applies, unanswered */
  c = (mock_control){.set = MOCK_SET_DOWN, .down = 1};
  ck_assert_int_eq(kva_send(h.a, MOCK_CONTROL, &c, sizeof(c), NULL, 0), KVA_OK);
  ck_assert_int_eq(mk_store_range(&h, 0, 1, 64, 0), KVA_EIO);
  mk_close(&h);
}
END_TEST

START_TEST(unknown_messages_are_ignored) {
  mk h = open_counting();
  ck_assert_int_eq(kva_send(h.a, 300, "x", 1, kva_port_actor(h.port), 1), KVA_OK);
  mk_expect_silence(&h, 0);
  ck_assert_int_ge(mk_warnings(), 1);
  ck_assert_int_eq(mk_store_range(&h, 0, 1, 64, 0), KVA_OK);
  mk_close(&h);
}
END_TEST

START_TEST(stopping_with_locks_held_warns) {
  mk h = mk_open(0, "");
  objs *o = store_key0(&h);
  ck_assert_uint_eq(mk_lookup(&h, o), 1);
  mk_count_warnings();
  kva_actor_stop(h.a);
  kva_runtime_run_until_idle(h.rt);
  ck_assert_int_eq(mk_warnings(), 1);
  objs_free(o);
  mk_shutdown(&h);
}
END_TEST

TCase *l2_mock_input_tcase(void) {
  TCase *t = tcase_create("input");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, stats_count_every_request);
  tcase_add_test(t, the_tier_is_named_by_the_config);
  tcase_add_test(t, spawn_without_a_config_uses_the_schema_defaults);
  tcase_add_test(t, malformed_requests_are_refused_with_einval);
  tcase_add_test(t, a_payload_that_is_not_a_request_gets_a_null_reply);
  tcase_add_test(t, requests_without_a_sender_are_dropped);
  tcase_add_test(t, a_bad_unlock_changes_nothing);
  tcase_add_test(t, a_bad_control_changes_nothing_and_is_answered);
  tcase_add_test(t, unknown_messages_are_ignored);
  tcase_add_test(t, stopping_with_locks_held_warns);
  return t;
}
