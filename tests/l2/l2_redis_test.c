/*
 * l2_redis_test.c — the redis tier against a real redis-server: round
 * trips through the whole stack, lookup bitmaps and locks, 32 MiB values,
 * values changed behind kvact's back, namespaces, AUTH (password and ACL
 * user) and a wrong password, a server that is down at start.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "l2/adapters/object_header.h"
#include "tests/l2/l2_redis_test.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

/* n keys written through L1, flushed to the server, cleared from L1,
 * prefetched back and compared byte by byte. */
static void round_trip(int workers, const char *extra, size_t n) {
  rs_server srv;
  kva_storage *s = rt_open(&srv, workers, extra);
  kva_layout l = dt_layout();
  dt_write_flush_clear(s, 0, n, &l, 3);
  ck_assert_uint_eq(dt_read_back(s, 0, n, &l, 3), n);
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.objects, n);
  ck_assert_uint_eq(st.bytes, n * DT_LEN);
  ck_assert_uint_eq(st.loads, n);
  ck_assert_uint_eq(st.load_failures + st.store_failures, 0);
  ck_assert_int_eq(rs_dbsize(srv.port), (long long)n);
  rt_close(s, &srv);
}

START_TEST(many_keys_round_trip_byte_exact) {
  round_trip(2, "", 200);
}
END_TEST

START_TEST(many_keys_round_trip_in_deterministic_mode) {
  round_trip(0, "", 100);
}
END_TEST

/* A seed given by name ("localhost") is resolved once at start and served
 * like an address. */
START_TEST(a_seed_given_by_name_is_resolved) {
  rs_server srv;
  rs_start(&srv, NULL);
  char tiers[256];
  snprintf(tiers, sizeof tiers, "[{\"type\":\"redis\",\"addrs\":[\"localhost:%d\"]}]", srv.port);
  kva_storage *s = kva_storage_of(rt_start(2, tiers));
  kva_layout l = dt_layout();
  dt_write_flush_clear(s, 0, 20, &l, 5);
  ck_assert_uint_eq(dt_read_back(s, 0, 20, &l, 5), 20);
  ck_assert_int_eq(rs_dbsize(srv.port), 20);
  rt_close(s, &srv);
}
END_TEST

/* A pipeline of 3: most commands wait in the queue, in order. */
START_TEST(a_short_pipeline_queues_the_rest) {
  round_trip(2, "\"pipeline\":3", 150);
}
END_TEST

/* EXISTS per key: the bitmap has its holes where the keys are missing;
 * each lookup takes one more lock (counted here, not in Redis), and a
 * locked key is never replaced by a STORE of this tier. */
START_TEST(lookup_bitmap_has_holes_and_locks_count) {
  rs_server srv;
  kva_storage *s = rt_open(&srv, 1, "");
  const uint64_t held[] = {1, 4, 5, 9, 11}, asked[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  ck_assert_int_eq(dt_store(s, held, 5, 0, true), KVA_OK);
  uint8_t bits[2];
  for (uint64_t round = 1; round <= 2; round++) {
    ck_assert_uint_eq(dt_lock(s, asked, 12, bits), 5);
    ck_assert_uint_eq(bits[0] | bits[1] << 8, 1u << 1 | 1u << 4 | 1u << 5 | 1u << 9 | 1u << 11);
    kva_l2_stats st = l2_stats(s, 0);
    ck_assert_uint_eq(st.keys_locked, 5 * round);
    ck_assert_uint_eq(st.lookups, 12 * round);
  }
  ck_assert_int_eq(dt_store(s, held + 2, 1, 1, true), KVA_EAGAIN);
  ck_assert_int_eq(dt_load(s, asked, 12, 0, false, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0] | bits[1] << 8, 1u << 1 | 1u << 4 | 1u << 5 | 1u << 9 | 1u << 11);
  l2_unlock(s, 0, held, 5);
  ck_assert_uint_eq(l2_stats(s, 0).keys_locked, 5);
  ck_assert_int_eq(dt_store(s, held + 2, 1, 1, true), KVA_EAGAIN); /* still locked once */
  l2_unlock(s, 0, asked, 12); /* the last locks; the others are ignored */
  ck_assert_int_eq(dt_store(s, held + 2, 1, 1, true), KVA_OK);
  rt_close(s, &srv);
}
END_TEST

/* A LOAD into a buffer of another size, or with another layout, is a miss. */
START_TEST(wrong_size_or_layout_is_a_miss) {
  rs_server srv;
  kva_storage *s = rt_open(&srv, 1, "");
  const uint64_t ids[] = {1, 2};
  ck_assert_int_eq(dt_store(s, ids, 2, 4, true), KVA_OK);
  uint8_t bits[1];
  ck_assert_int_eq(dt_load(s, ids, 2, 4, true, DT_LEN - 1, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0);
  ck_assert_int_eq(dt_load(s, ids, 2, 4, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 3);
  rt_close(s, &srv);
}
END_TEST

/* Larger than any socket or pipeline buffer: many partial reads/writes. */
START_TEST(values_of_32_mib_round_trip) {
  rs_server srv;
  kva_storage *s = rt_open(&srv, 2, "\"pipeline\":2,\"timeout_ms\":20000");
  kva_layout l = fixture_layout_bytes(32u << 20);
  dt_write_flush_clear(s, 0, 3, &l, 7);
  ck_assert_uint_eq(dt_read_back(s, 0, 3, &l, 7), 3);
  ck_assert_uint_eq(l2_stats(s, 0).store_failures, 0);
  rt_close(s, &srv);
}
END_TEST

/* Bytes changed behind kvact's back: garbage, a flipped payload byte, a
 * valid value of another key. Each is a miss, never served. */
START_TEST(value_changed_behind_our_back_is_a_miss) {
  rs_server srv;
  kva_storage *s = rt_open(&srv, 1, "");
  const uint64_t ids[] = {0, 1, 2, 3};
  ck_assert_int_eq(dt_store(s, ids, 4, 5, true), KVA_OK);
  char k0[256], k1[256], k2[256], k3[256];
  rs_ok(srv.port, "SET %s garbage", rt_key("kvact", 0, k0, sizeof(k0)));
  redisReply *v = rs_cmd(srv.port, "GET %s", rt_key("kvact", 1, k1, sizeof(k1)));
  ck_assert_uint_eq(v->len, sizeof(object_header) + DT_LEN);
  v->str[sizeof(object_header) + 100] ^= 1; /* one payload bit */
  rs_ok(srv.port, "SET %b %b", k1, strlen(k1), v->str, v->len);
  rs_ok(srv.port, "COPY %s %s REPLACE", k1, rt_key("kvact", 2, k2, sizeof(k2))); /* foreign */
  rs_ok(srv.port, "DEL %s", rt_key("kvact", 3, k3, sizeof(k3)));
  rs_ok(srv.port, "LPUSH %s x", k3); /* another type */
  freeReplyObject(v);
  uint8_t bits[1];
  ck_assert_int_eq(dt_load(s, ids, 4, 5, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0);
  ck_assert_uint_eq(l2_stats(s, 0).load_failures, 4);
  rt_close(s, &srv);
}
END_TEST

/* Two tiers on one server, namespaces a and b: same keys, no crossover. */
START_TEST(namespaces_do_not_cross) {
  rs_server srv;
  rs_start(&srv, NULL);
  char tiers[2048], a[512];
  snprintf(a, sizeof(a), "%s", rt_members(srv.port, "\"name\":\"ra\",\"namespace\":\"a\""));
  snprintf(tiers, sizeof(tiers), "[{%s},{%s}]", a,
           rt_members(srv.port, "\"name\":\"rb\",\"namespace\":\"b\""));
  kva_runtime *rt = rt_start(1, tiers);
  kva_storage *s = kva_storage_of(rt);
  const uint64_t ids[] = {0, 1, 2};
  ck_assert_int_eq(dt_store(s, ids, 3, 1, true), KVA_OK); /* tier 0 = namespace a */
  ck_assert_int_eq(l2_lock(s, 1, ids, 3), 0);
  kva_key k = fixture_key(1);
  ck_assert_int_eq(kva_l2_contains(s, "ra", &k), 1);
  ck_assert_int_eq(kva_l2_contains(s, "rb", &k), 0);
  char key[256];
  redisReply *r = rs_cmd(srv.port, "EXISTS %s", rt_key("a", 1, key, sizeof(key)));
  ck_assert_int_eq(r->integer, 1);
  freeReplyObject(r);
  ck_assert_int_eq(rs_dbsize(srv.port), 3);
  rt_close(s, &srv);
}
END_TEST

START_TEST(wrong_password_fails_start_with_a_clear_error) {
  rs_server srv;
  rs_start(&srv, "--requirepass", "secret", NULL);
  char want[128];
  snprintf(want, sizeof(want), "redis 127.0.0.1:%d: WRONGPASS", srv.port);
  l2_log_start(KVA_LOG_WARN);
  ck_assert_int_eq(rt_try(srv.port, "\"password\":\"wrong\""), KVA_ECONFIG);
  ck_assert_msg(l2_log_count(want) == 1, "log: %s", l2_log_text());
  snprintf(want, sizeof(want), "redis 127.0.0.1:%d: NOAUTH", srv.port);
  ck_assert_int_eq(rt_try(srv.port, ""), KVA_ECONFIG);
  ck_assert_msg(l2_log_count(want) == 1, "log: %s", l2_log_text());
  l2_log_stop();
  kva_storage *s = kva_storage_of(rt_start_one(1, srv.port, "\"password\":\"secret\""));
  const uint64_t ids[] = {5};
  ck_assert_int_eq(dt_store(s, ids, 1, 1, true), KVA_OK);
  ck_assert(dt_has(s, 5));
  rt_close(s, &srv);
}
END_TEST

START_TEST(acl_user_with_password_works) {
  rs_server srv;
  rs_start(&srv, NULL);
  rs_ok(srv.port, "ACL SETUSER alice on >wonder ~kvact:* +@all");
  rs_ok(srv.port, "ACL SETUSER default off");
  ck_assert_int_eq(rt_try(srv.port, "\"username\":\"alice\",\"password\":\"nope\""), KVA_ECONFIG);
  const char *alice = "\"username\":\"alice\",\"password\":\"wonder\"";
  kva_storage *s = kva_storage_of(rt_start_one(1, srv.port, alice));
  kva_layout l = dt_layout();
  dt_write_flush_clear(s, 0, 20, &l, 2);
  ck_assert_uint_eq(dt_read_back(s, 0, 20, &l, 2), 20);
  rt_close(s, &srv);
}
END_TEST

/* Nobody listens: the runtime starts (with a warning), the tier fails fast
 * and is bypassed; nothing hangs; once the server is there it serves. */
START_TEST(unreachable_server_at_start_starts_failing) {
  rs_server srv;
  rs_start(&srv, NULL);
  int port = srv.port;
  rs_stop(&srv);
  l2_log_start(KVA_LOG_WARN);
  kva_storage *s = kva_storage_of(rt_start_one(1, port, ""));
  ck_assert_uint_ge(l2_log_count("unreachable at start"), 1);
  l2_log_stop();
  kva_key k = fixture_key(1);
  uint64_t t0 = fixture_now_ns();
  for (int i = 0; i < 3; i++) ck_assert_int_lt(kva_l2_contains(s, "redis0", &k), 0);
  ck_assert_uint_lt(fixture_now_ns() - t0, 900000000ull);
  ck_assert(rt_wait_bypass(s, 1, 1000));
  kva_l2_node_stats node;
  size_t n = 0;
  double age = 0;
  ck_assert_int_eq(kva_l2_get_tier_nodes(s, "redis0", &node, 1, &n, &age), KVA_OK);
  ck_assert_uint_eq(n, 1); /* one server: it is the tier */
  ck_assert_int_eq(node.state, KVA_L2_NODE_FAILED);
  ck_assert(age == -1); /* no slot map */
  rs_restart(&srv);     /* the server comes: the prober clears the bypass */
  ck_assert_msg(rt_wait_bypass(s, 0, 10000), "the tier did not recover");
  const uint64_t ids[] = {1};
  ck_assert_int_eq(dt_store(s, ids, 1, 1, true), KVA_OK);
  ck_assert_int_eq(kva_l2_contains(s, "redis0", &k), 1);
  ck_assert_int_eq(kva_l2_get_tier_nodes(s, "redis0", &node, 1, &n, NULL), KVA_OK);
  ck_assert_int_eq(node.state, KVA_L2_NODE_OK);
  rt_close(s, &srv);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l2_redis");
  TCase *tc = tcase_create("redis");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, many_keys_round_trip_byte_exact);
  tcase_add_test(tc, many_keys_round_trip_in_deterministic_mode);
  tcase_add_test(tc, a_short_pipeline_queues_the_rest);
  tcase_add_test(tc, a_seed_given_by_name_is_resolved);
  tcase_add_test(tc, lookup_bitmap_has_holes_and_locks_count);
  tcase_add_test(tc, wrong_size_or_layout_is_a_miss);
  tcase_add_test(tc, values_of_32_mib_round_trip);
  tcase_add_test(tc, value_changed_behind_our_back_is_a_miss);
  tcase_add_test(tc, namespaces_do_not_cross);
  tcase_add_test(tc, wrong_password_fails_start_with_a_clear_error);
  tcase_add_test(tc, acl_user_with_password_works);
  tcase_add_test(tc, unreachable_server_at_start_starts_failing);
  suite_add_tcase(s, tc);
  return s;
}
