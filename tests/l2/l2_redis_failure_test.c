/*
 * l2_redis_failure_test.c — the redis tier when its server fails: killed
 * with a pipeline in flight (the requests fail, the tier is bypassed, and
 * once the server is back the prober clears the bypass and the tier
 * serves again), a server that stops answering (timeouts), a refused
 * connection (fails fast). Nothing hangs, no wrong bytes, no lock left.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/l2/l2_redis_test.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define BIG (1u << 20)

/* A STORE of n BIG objects sent from a port; the caller waits for it. */
typedef struct pending_store {
  kva_port *port;
  kva_key *keys;
  kva_buf *bufs;
  kva_layout layout;
  kva_l2_req req;
} pending_store;

static void store_send(kva_storage *s, pending_store *p, uint64_t first, size_t n) {
  p->port = kva_port_open(kva_actor_runtime(l2_tier_actor(s, 0)), "test");
  p->keys = calloc(n, sizeof(kva_key));
  p->bufs = calloc(n, sizeof(kva_buf));
  p->layout = fixture_layout_bytes(BIG);
  for (size_t i = 0; i < n; i++) {
    p->keys[i] = fixture_key(first + i);
    p->bufs[i] = (kva_buf){malloc(BIG), BIG};
    l2_fill(p->bufs[i].ptr, BIG, first + i, 1);
  }
  p->req = (kva_l2_req){.keys = p->keys, .n = n, .layout = &p->layout, .bufs = p->bufs};
  kva_l2_req *r = &p->req;
  ck_assert_int_eq(
      kva_send(l2_tier_actor(s, 0), KVA_L2_STORE, &r, sizeof(r), kva_port_actor(p->port), 1),
      KVA_OK);
}

static void store_free(pending_store *p) {
  for (size_t i = 0; i < p->req.n; i++) free(p->bufs[i].ptr);
  free(p->bufs);
  free(p->keys);
}

static int store_wait(pending_store *p) {
  char buf[64];
  kva_msg m = fixture_recv(p->port, buf, sizeof(buf), 30000);
  ck_assert_uint_eq(m.type, KVA_L2_DONE);
  store_free(p);
  kva_port_close(p->port);
  return p->req.result;
}

/* The server sleeps `seconds` on a connection of its own (DEBUG SLEEP):
 * every command sent meanwhile waits in flight. */
static redisContext *server_sleep(int port, int seconds) {
  redisContext *c = redisConnect("127.0.0.1", port);
  ck_assert_ptr_nonnull(c);
  redisAppendCommand(c, "DEBUG SLEEP %d", seconds);
  int done = 0;
  redisBufferWrite(c, &done);
  l2_sleep_ms(50);
  return c;
}

static int lookup_result(kva_storage *s, uint64_t id) {
  kva_key k = fixture_key(id);
  uint8_t bits = 0;
  kva_l2_req r = {.keys = &k, .n = 1, .bits = &bits};
  int rc = l2_ask(s, 0, KVA_L2_LOOKUP_AND_LOCK, &r);
  if (bits) l2_unlock(s, 0, &id, 1);
  return rc;
}

START_TEST(server_killed_mid_pipeline_then_restarted) {
  rs_server srv;
  rs_start(&srv, "--enable-debug-command", "yes", NULL);
  kva_runtime *rt = rt_start_one(2, srv.port, "\"pipeline\":8,\"timeout_ms\":5000");
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = dt_layout();
  dt_write_flush_clear(s, 1000, 10, &l, 1); /* stored before the crash */
  /* the server sleeps: our pipeline is stuck in flight when it dies */
  redisContext *c = server_sleep(srv.port, 3);
  pending_store p;
  store_send(s, &p, 0, 32);
  l2_sleep_ms(100);
  rs_kill(&srv);
  redisFree(c);
  ck_assert_int_lt(store_wait(&p), 0);
  /* failures in a row (health counts the facade's lookups) bypass the tier */
  kva_key k = fixture_key(1);
  for (int i = 0; i < 3; i++) ck_assert_int_lt(kva_l2_contains(s, "redis0", &k), 0);
  ck_assert(rt_wait_bypass(s, 1, 5000));
  ck_assert_uint_eq(l2_prefetch_range(s, 1000, 10, &l), 0); /* bypassed: L2 not asked */
  rs_restart(&srv);                                         /* empty: no persistence */
  ck_assert_msg(rt_wait_bypass(s, 0, 10000), "the prober did not clear the bypass");
  dt_write_flush_clear(s, 2000, 10, &l, 4);
  ck_assert_uint_eq(dt_read_back(s, 2000, 10, &l, 4), 10);
  ck_assert_uint_eq(l2_stats(s, 0).keys_locked, 0);
  l2_finish(rt);
  rs_stop(&srv);
}
END_TEST

/* A server that accepts but does not answer: the commands time out, the
 * connection is dropped, and once it answers again the tier does too. */
START_TEST(silent_server_times_out_then_recovers) {
  rs_server srv;
  rs_start(&srv, "--enable-debug-command", "yes", NULL);
  kva_runtime *rt = rt_start_one(1, srv.port, "\"timeout_ms\":300");
  kva_storage *s = kva_storage_of(rt);
  const uint64_t ids[] = {3};
  ck_assert_int_eq(dt_store(s, ids, 1, 1, true), KVA_OK);
  redisContext *c = server_sleep(srv.port, 1);
  uint64_t t0 = fixture_now_ns();
  uint8_t bits[1];
  ck_assert_int_eq(dt_load(s, ids, 1, 1, true, DT_LEN, bits), KVA_ETIMEDOUT);
  ck_assert_uint_eq(bits[0], 0);
  ck_assert_uint_lt(fixture_now_ns() - t0, 3000000000ull); /* 300 ms + a tick, or so */
  redisFree(c);
  l2_sleep_ms(1000); /* the sleep is over; the back-off too, soon */
  int rc = KVA_EIO;
  for (int i = 0; i < 100 && rc != KVA_OK; i++, l2_sleep_ms(50))
    rc = dt_load(s, ids, 1, 1, true, DT_LEN, bits);
  ck_assert_int_eq(rc, KVA_OK);
  ck_assert_uint_eq(bits[0], 1);
  l2_finish(rt);
  rs_stop(&srv);
}
END_TEST

/* Refused connections fail at once, well before timeout_ms. */
START_TEST(refused_connection_fails_fast) {
  rs_server srv;
  rs_start(&srv, NULL);
  kva_runtime *rt = rt_start_one(1, srv.port, "\"timeout_ms\":5000");
  kva_storage *s = kva_storage_of(rt);
  ck_assert_int_eq(lookup_result(s, 1), KVA_OK);
  rs_kill(&srv);
  uint64_t t0 = fixture_now_ns();
  for (int i = 0; i < 5; i++) ck_assert_int_lt(lookup_result(s, 1), 0);
  ck_assert_uint_lt(fixture_now_ns() - t0, 1000000000ull);
  l2_finish(rt);
}
END_TEST

/* The runtime shuts down while a STORE waits on a sleeping server: the
 * adapter frees its contexts (failing the commands) instead of waiting,
 * and nothing leaks. */
START_TEST(shutdown_with_commands_in_flight_does_not_wait) {
  rs_server srv;
  rs_start(&srv, "--enable-debug-command", "yes", NULL);
  kva_runtime *rt = rt_start_one(2, srv.port, "");
  redisContext *c = server_sleep(srv.port, 3);
  pending_store p;
  store_send(kva_storage_of(rt), &p, 0, 8);
  l2_sleep_ms(100);
  uint64_t t0 = fixture_now_ns();
  kva_runtime_shutdown(rt); /* the port goes with it */
  ck_assert_uint_lt(fixture_now_ns() - t0, 2000000000ull);
  store_free(&p);
  redisFree(c);
  rs_stop(&srv);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l2_redis_failure");
  TCase *tc = tcase_create("failure");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, server_killed_mid_pipeline_then_restarted);
  tcase_add_test(tc, silent_server_times_out_then_recovers);
  tcase_add_test(tc, refused_connection_fails_fast);
  tcase_add_test(tc, shutdown_with_commands_in_flight_does_not_wait);
  suite_add_tcase(s, tc);
  return s;
}
