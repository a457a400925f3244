/*
 * l2_redis_cluster_test.c — the redis tier against a real 3-master Redis
 * Cluster: keys spread over every master and come back byte-exact; a slot
 * migrated while the tier runs is followed through ASK (during the
 * migration) and MOVED (after it); a dead master costs only its keys; a
 * slots map naming a node no server can be is refused; a redirect to an
 * empty endpoint stays on the host that answered.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "l2/adapters/redis/redis_internal.h"
#include "storage/storage_internal.h"
#include "tests/l2/l2_redis_test.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

/* A fresh cluster and a runtime with one cluster tier seeded with two of
 * its masters; cluster_close finishes the runtime (no lock left, memcheck
 * clean) and stops the cluster. */
static kva_storage *cluster_open(rs_cluster *c) {
  char tiers[1024];
  rs_cluster_start(c);
  snprintf(tiers, sizeof(tiers),
           "[{\"type\":\"redis\",\"cluster\":true,\"timeout_ms\":10000,"
           "\"addrs\":[\"127.0.0.1:%d\",\"127.0.0.1:%d\"]}]",
           c->node[1].port, c->node[0].port);
  return kva_storage_of(rt_start(2, tiers));
}

static void cluster_close(kva_storage *s, rs_cluster *c) {
  l2_finish(s->rt);
  rs_cluster_stop(c);
}

static int keyslot(const rs_cluster *c, const char *key) {
  redisReply *r = rs_cmd(c->node[0].port, "CLUSTER KEYSLOT %s", key);
  ck_assert_ptr_nonnull(r);
  int slot = (int)r->integer;
  freeReplyObject(r);
  return slot;
}

START_TEST(keys_spread_over_all_masters) {
  rs_cluster c;
  kva_storage *s = cluster_open(&c);
  kva_layout l = dt_layout();
  dt_write_flush_clear(s, 0, 120, &l, 1);
  long long total = 0;
  for (int i = 0; i < 3; i++) {
    long long n = rs_dbsize(c.node[i].port);
    ck_assert_msg(n > 10, "master %d holds only %lld keys", i, n);
    total += n;
  }
  ck_assert_int_eq(total, 120);
  ck_assert_uint_eq(dt_read_back(s, 0, 120, &l, 1), 120);
  ck_assert_uint_eq(l2_stats(s, 0).store_failures, 0);
  cluster_close(s, &c);
}
END_TEST

/* Key 7 moves from its master A to B: first only the key (the slot is
 * MIGRATING on A, IMPORTING on B: A answers ASK), then the slot itself
 * (A answers MOVED). The tier must find and load it both times. */
START_TEST(slot_migration_is_followed_through_ask_and_moved) {
  rs_cluster c;
  kva_storage *s = cluster_open(&c);
  const uint64_t ids[] = {7, 8, 9};
  ck_assert_int_eq(dt_store(s, ids, 3, 2, true), KVA_OK);
  char key[256];
  int slot = keyslot(&c, rt_key("kvact", 7, key, sizeof(key)));
  int a = rs_cluster_owner(&c, slot), b = (a + 1) % 3;
  rs_ok(c.node[b].port, "CLUSTER SETSLOT %d IMPORTING %s", slot, c.id[a]);
  rs_ok(c.node[a].port, "CLUSTER SETSLOT %d MIGRATING %s", slot, c.id[b]);
  rs_ok(c.node[a].port, "MIGRATE 127.0.0.1 %d %s 0 5000 KEYS %s", c.node[b].port, "", key);
  uint8_t bits[1];
  ck_assert_uint_eq(dt_lock(s, ids, 1, bits), 1); /* EXISTS -> ASK -> B */
  l2_unlock(s, 0, ids, 1);
  ck_assert_int_eq(dt_load(s, ids, 3, 2, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 7);
  for (int i = 0; i < 3; i++) rs_ok(c.node[i].port, "CLUSTER SETSLOT %d NODE %s", slot, c.id[b]);
  rs_cluster_wait_owner(&c, slot, b);
  ck_assert_int_eq(dt_load(s, ids, 3, 2, true, DT_LEN, bits), KVA_OK); /* MOVED -> B */
  ck_assert_uint_eq(bits[0], 7);
  ck_assert_int_eq(dt_store(s, ids, 1, 3, true), KVA_OK); /* the map now says B */
  ck_assert_int_eq(dt_load(s, ids, 1, 3, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 1);
  redisReply *r = rs_cmd(c.node[b].port, "EXISTS %s", key);
  ck_assert_int_eq(r->integer, 1);
  freeReplyObject(r);
  ck_assert_uint_eq(l2_stats(s, 0).load_failures, 0);
  cluster_close(s, &c);
}
END_TEST

/* A master dies: its keys fail (the LOAD says KVA_EUNAVAIL: part of the
 * tier is down), every other key is still served from the masters alive,
 * and nothing hangs. */
START_TEST(a_dead_master_costs_only_its_keys) {
  rs_cluster c;
  kva_storage *s = cluster_open(&c);
  uint64_t ids[30];
  bool on_dead[30];
  size_t alive = 0;
  for (uint64_t i = 0; i < 30; i++) {
    char key[256];
    ids[i] = i;
    on_dead[i] = rs_cluster_owner(&c, keyslot(&c, rt_key("kvact", i, key, sizeof(key)))) == 2;
    alive += !on_dead[i];
  }
  ck_assert_uint_gt(alive, 0);
  ck_assert_uint_lt(alive, 30);
  ck_assert_int_eq(dt_store(s, ids, 30, 6, true), KVA_OK);
  rs_kill(&c.node[2]);
  uint8_t bits[4];
  ck_assert_int_eq(dt_load(s, ids, 30, 6, true, DT_LEN, bits), KVA_EUNAVAIL);
  for (size_t i = 0; i < 30; i++) ck_assert_int_eq(kva_bit_get(bits, i), !on_dead[i]);
  cluster_close(s, &c);
}
END_TEST

/* cluster: true against a server without cluster support is a config
 * error at start. */
START_TEST(cluster_mode_against_a_plain_server_fails_start) {
  rs_server srv;
  rs_start(&srv, NULL);
  l2_log_start(KVA_LOG_WARN);
  ck_assert_int_eq(rt_try(srv.port, "\"cluster\":true"), KVA_ECONFIG);
  ck_assert_uint_ge(l2_log_count("CLUSTER SLOTS"), 1);
  l2_log_stop();
  rs_stop(&srv);
}
END_TEST

/* The slots of the CLUSTER SLOTS reply `resp` (len RESP bytes, as a
 * server sends them, from 10.1.2.3:7000) applied to a fresh map:
 * redis_slots_apply's result, and the node slot 0 maps to into *port and
 * host (-1 and "" when unmapped). */
static int apply_slots(const char *resp, size_t len, int *port, char *host) {
  static const redis_addr from = {"10.1.2.3", 7000};
  redisReader *rd = redisReaderCreate();
  void *reply = NULL;
  ck_assert_int_eq(redisReaderFeed(rd, resp, len), REDIS_OK);
  ck_assert_int_eq(redisReaderGetReply(rd, &reply), REDIS_OK);
  ck_assert_ptr_nonnull(reply);
  redis *r = calloc(1, sizeof(*r));
  ck_assert_ptr_nonnull(r);
  r->cfg.cluster = true;
  memset(r->slots, 0xff, sizeof(r->slots)); /* REDIS_NO_NODE */
  int rc = redis_slots_apply(r, reply, &from);
  const redis_node *n = r->slots[0] == REDIS_NO_NODE ? NULL : r->nodes[r->slots[0]];
  *port = n ? n->addr.port : -1;
  strcpy(host, n ? n->addr.host : "");
  redis_nodes_free(r);
  free(r);
  freeReplyObject(reply);
  redisReaderFree(rd);
  return rc;
}

/* A map naming a node no server can be (a port of 0, negative, above
 * 65535, or 6379 + 2^32, which an int cast turns into 6379; a host with a
 * NUL byte, or longer than any host) is not understood, as any other
 * malformed map: no slot goes to such a node. An empty host is the node
 * asked. Found by fuzz_redis_reply (tests/fuzz/fuzz_corpus/redis_reply/
 * regress-*). */
START_TEST(a_slots_map_naming_an_impossible_node_is_refused) {
#define NODE(s)                                                                                    \
  { s, sizeof(s) - 1 }
  static const struct {
    const char *resp; /* the [host, port] entry */
    size_t len;
  } nodes[] = {NODE("$9\r\n127.0.0.1\r\n:0"),
               NODE("$9\r\n127.0.0.1\r\n:-1"),
               NODE("$9\r\n127.0.0.1\r\n:65536"),
               NODE("$9\r\n127.0.0.1\r\n:4294973675"),
               NODE("$9\r\n\0"
                    "27.0.0.1\r\n:6379"),
               NODE("$10\r\n127.0\0.0.1\r\n:6379")};
#undef NODE
  static const char head[] = "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n";
  char resp[512], host[REDIS_HOST_MAX], longest[REDIS_HOST_MAX + 1];
  int port;
  for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
    memcpy(resp, head, sizeof(head) - 1);
    memcpy(resp + sizeof(head) - 1, nodes[i].resp, nodes[i].len);
    memcpy(resp + sizeof(head) - 1 + nodes[i].len, "\r\n", 2);
    ck_assert_msg(apply_slots(resp, sizeof(head) + 1 + nodes[i].len, &port, host) == KVA_EIO,
                  "node %zu: applied", i);
    ck_assert_int_eq(port, -1);
  }
  memset(longest, 'h', REDIS_HOST_MAX);
  longest[REDIS_HOST_MAX] = '\0';
  snprintf(resp, sizeof(resp), "%s$%u\r\n%s\r\n:6379\r\n", head, REDIS_HOST_MAX, longest);
  ck_assert_int_eq(apply_slots(resp, strlen(resp), &port, host), KVA_EIO);
  ck_assert_int_eq(port, -1);
  snprintf(resp, sizeof(resp), "%s$0\r\n\r\n:65535\r\n", head);
  ck_assert_int_eq(apply_slots(resp, strlen(resp), &port, host), KVA_OK);
  ck_assert_int_eq(port, 65535);
  ck_assert_str_eq(host, "10.1.2.3"); /* "" is the node asked */
}
END_TEST

/* A redirect to an empty endpoint ("MOVED 3999 :6381", Redis 7's
 * cluster-preferred-endpoint-type unknown-endpoint) goes to the host of
 * the node that answered, on the port given. */
START_TEST(a_redirect_to_an_empty_endpoint_keeps_the_host_that_answered) {
  static const redis_addr from = {"10.1.2.3", 7000};
  static const char moved[] = "MOVED 3999 :6381", ask[] = "ASK 12 10.0.0.9:7001";
  bool is_ask;
  uint16_t slot;
  redis_addr to;
  ck_assert(redis_redirect_parse(moved, sizeof(moved) - 1, &from, &is_ask, &slot, &to));
  ck_assert(!is_ask);
  ck_assert_uint_eq(slot, 3999);
  ck_assert_str_eq(to.host, "10.1.2.3");
  ck_assert_int_eq(to.port, 6381);
  ck_assert(redis_redirect_parse(ask, sizeof(ask) - 1, &from, &is_ask, &slot, &to));
  ck_assert(is_ask);
  ck_assert_uint_eq(slot, 12);
  ck_assert_str_eq(to.host, "10.0.0.9");
  ck_assert_int_eq(to.port, 7001);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l2_redis_cluster");
  TCase *tc = tcase_create("cluster");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, keys_spread_over_all_masters);
  tcase_add_test(tc, slot_migration_is_followed_through_ask_and_moved);
  tcase_add_test(tc, a_dead_master_costs_only_its_keys);
  tcase_add_test(tc, cluster_mode_against_a_plain_server_fails_start);
  tcase_add_test(tc, a_slots_map_naming_an_impossible_node_is_refused);
  tcase_add_test(tc, a_redirect_to_an_empty_endpoint_keeps_the_host_that_answered);
  suite_add_tcase(s, tc);
  return s;
}
