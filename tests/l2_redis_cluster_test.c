/*
 * l2_redis_cluster_test.c — the redis tier against a real 3-master Redis
 * Cluster: keys spread over every master and come back byte-exact; a slot
 * migrated while the tier runs is followed through ASK (during the
 * migration) and MOVED (after it); a dead master costs only its keys.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "storage_internal.h"
#include "tests/l2_redis_test.h"
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

/* A master dies: its keys fail (the LOAD says KVA_EIO), every other key
 * is still served from the masters alive, and nothing hangs. */
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
  ck_assert_int_eq(dt_load(s, ids, 30, 6, true, DT_LEN, bits), KVA_EIO);
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

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l2_redis_cluster");
  TCase *tc = tcase_create("cluster");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, keys_spread_over_all_masters);
  tcase_add_test(tc, slot_migration_is_followed_through_ask_and_moved);
  tcase_add_test(tc, a_dead_master_costs_only_its_keys);
  tcase_add_test(tc, cluster_mode_against_a_plain_server_fails_start);
  suite_add_tcase(s, tc);
  return s;
}
