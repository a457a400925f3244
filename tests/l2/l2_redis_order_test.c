/*
 * l2_redis_order_test.c — the redis tier over several connections per
 * node: a key's operations keep their order when the keys of a batch
 * spread over the connections (STORE v1 then v2 of the same keys, sent
 * back to back with a LOAD and a LOOKUP behind them: the LOAD gives v2 and
 * the lookup finds every key), on one server and on a cluster, in both
 * runtime modes; the connections are really used; a bad `connections` is
 * a config error.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/storage_internal.h"
#include "tests/l2/l2_redis_test.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define NKEYS 61         /* not a multiple of the connections: a rotation would split a key */
#define VLEN (64u << 10) /* a few values per pipeline's byte budget */

/* One request of the burst: its keys, buffers and reply slot. */
typedef struct burst_req {
  kva_key keys[NKEYS];
  kva_buf bufs[NKEYS];
  uint8_t bits[(NKEYS + 7) / 8];
  kva_layout layout;
  kva_l2_req r;
} burst_req;

static void burst_init(burst_req *b, uint32_t v) {
  b->layout = fixture_layout_bytes(VLEN);
  for (size_t i = 0; i < NKEYS; i++) {
    b->keys[i] = fixture_key(i);
    b->bufs[i] = (kva_buf){malloc(VLEN), VLEN};
    ck_assert_ptr_nonnull(b->bufs[i].ptr);
    if (v) l2_fill(b->bufs[i].ptr, VLEN, i, v);
  }
  memset(b->bits, 0, sizeof(b->bits));
  b->r = (kva_l2_req){
      .keys = b->keys, .n = NKEYS, .layout = &b->layout, .bufs = b->bufs, .bits = b->bits};
}

static void burst_free(burst_req *b) {
  for (size_t i = 0; i < NKEYS; i++) free(b->bufs[i].ptr);
}

enum { STORE1, STORE2, LOAD, LOOKUP, NREQ };

/* STORE v1, STORE v2, LOAD, LOOKUP_AND_LOCK of the same keys sent at once
 * (none waits for the one before), then every reply collected. */
static void burst(kva_storage *s) {
  static const uint32_t type[NREQ] = {KVA_L2_STORE, KVA_L2_STORE, KVA_L2_LOAD,
                                      KVA_L2_LOOKUP_AND_LOCK};
  static burst_req b[NREQ];
  for (int i = 0; i < NREQ; i++) burst_init(&b[i], i == STORE1 ? 1 : i == STORE2 ? 2 : 0);
  b[LOOKUP].r.layout = NULL, b[LOOKUP].r.bufs = NULL;
  kva_port *port = kva_port_open(s->rt, "order");
  ck_assert_ptr_nonnull(port);
  for (int i = 0; i < NREQ; i++) {
    kva_l2_req *p = &b[i].r;
    ck_assert_int_eq(
        kva_send(l2_tier_actor(s, 0), type[i], &p, sizeof(p), kva_port_actor(port), (uint64_t)i),
        0);
  }
  for (int i = 0; i < NREQ; i++) {
    kva_msg m = fixture_recv(port, NULL, 0, 20000);
    ck_assert_uint_eq(m.type, KVA_L2_DONE);
  }
  kva_port_close(port);
  for (int i = 0; i < NREQ; i++) ck_assert_int_eq(b[i].r.result, KVA_OK);
  for (size_t i = 0; i < NKEYS; i++) {
    ck_assert_msg(kva_bit_get(b[LOAD].bits, i), "key %zu: not loaded", i);
    ck_assert_msg(l2_matches(b[LOAD].bufs[i].ptr, VLEN, i, 2), "key %zu: not the second store", i);
    ck_assert_msg(kva_bit_get(b[LOOKUP].bits, i), "key %zu: not found by the lookup", i);
  }
  for (int i = 0; i < NREQ; i++) burst_free(&b[i]);
}

static void unlock_all(kva_storage *s) {
  uint64_t ids[NKEYS];
  for (size_t i = 0; i < NKEYS; i++) ids[i] = i;
  l2_unlock(s, 0, ids, NKEYS);
}

/* Clients the server has besides the one asking: INFO clients. */
static long long clients(int port) {
  redisReply *r = rs_cmd(port, "INFO clients");
  ck_assert_ptr_nonnull(r);
  const char *p = strstr(r->str, "connected_clients:");
  ck_assert_ptr_nonnull(p);
  long long n = atoll(p + strlen("connected_clients:"));
  freeReplyObject(r);
  return n - 1;
}

static void order_on_one_server(int workers) {
  rs_server srv;
  kva_storage *s = rt_open(&srv, workers, "\"connections\":8,\"pipeline\":4");
  for (int round = 0; round < 5; round++) {
    burst(s);
    unlock_all(s);
  }
  ck_assert_int_eq(clients(srv.port), 8); /* the keys spread over every connection */
  rt_close(s, &srv);
}

START_TEST(a_keys_operations_keep_their_order_over_several_connections) {
  order_on_one_server(2);
}
END_TEST

START_TEST(the_order_holds_in_deterministic_mode) {
  order_on_one_server(0);
}
END_TEST

START_TEST(the_order_holds_on_a_cluster) {
  rs_cluster c;
  rs_cluster_start(&c);
  char tiers[1024];
  snprintf(tiers, sizeof tiers,
           "[{\"type\":\"redis\",\"cluster\":true,\"connections\":8,\"pipeline\":4,"
           "\"timeout_ms\":10000,\"addrs\":[\"127.0.0.1:%d\",\"127.0.0.1:%d\",\"127.0.0.1:%d\"]}]",
           c.node[0].port, c.node[1].port, c.node[2].port);
  kva_runtime *rt = rt_start(2, tiers);
  kva_storage *s = kva_storage_of(rt);
  for (int round = 0; round < 3; round++) {
    burst(s);
    unlock_all(s);
  }
  long long total = 0;
  for (int i = 0; i < 3; i++) total += rs_dbsize(c.node[i].port);
  ck_assert_int_eq(total, NKEYS);
  l2_finish(rt);
  rs_cluster_stop(&c);
}
END_TEST

/* kva_config_set's result for one redis tier with `extra` members. */
static int config_with(const char *extra) {
  kva_config *c = kva_config_default();
  ck_assert_ptr_nonnull(c);
  char tiers[2048];
  snprintf(tiers, sizeof(tiers), "[{%s}]", rt_members(1, extra));
  int rc = kva_config_set(c, "l2", tiers);
  kva_config_free(c);
  return rc;
}

START_TEST(a_bad_connections_value_is_a_config_error) {
  static const char *bad[] = {"\"connections\":0", "\"connections\":65", "\"connections\":-1",
                              "\"connections\":\"8\"", "\"connections\":2.5"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(config_with(bad[i]) == KVA_ECONFIG, "%s: not refused", bad[i]);
  ck_assert_int_eq(config_with("\"connections\":1"), KVA_OK);
  rs_server srv;
  rs_start(&srv, NULL);
  ck_assert_int_eq(rt_try(srv.port, "\"connections\":64"), KVA_OK);
  rs_stop(&srv);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l2_redis_order");
  TCase *tc = tcase_create("order");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, a_keys_operations_keep_their_order_over_several_connections);
  tcase_add_test(tc, the_order_holds_in_deterministic_mode);
  tcase_add_test(tc, the_order_holds_on_a_cluster);
  tcase_add_test(tc, a_bad_connections_value_is_a_config_error);
  suite_add_tcase(s, tc);
  return s;
}
