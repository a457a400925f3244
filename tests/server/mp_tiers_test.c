/*
 * mp_tiers_test.c — a tier's accounting through kvactd (protocol 4): a
 * client's kva_l2_get_tier_keys and kva_l2_get_tier_stats answer what the
 * daemon's storage says in-process, after writes, a frozen write and a
 * flush; kva_l2_get_tier_nodes is KVA_ENOTSUP for a mock tier and gives a
 * redis tier's one server as the daemon sees it, cut to the client's
 * room; bad arguments are KVA_EINVAL alike. A client whose daemon speaks
 * an older protocol version (a fake one here) is refused at its hello and
 * its calls answer KVA_ENOTSUP, until a daemon of its own version is
 * there. The daemons run in this process.
 */
#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvact.h"
#include "tests/server/mp_support.h"
#include "tests/support/fixture.h"
#include "tests/support/redis_server.h"
#include "wire/protocol.h"
#include "wire/sock.h"

#define L1_BYTES (16u << 20)
#define OBJ_BYTES 4096u

/* A daemon in this process on sock_path with the l2 setting l2. */
static kva_runtime *daemon_here(const char *l2) {
  char sock_kv[160];
  snprintf(sock_kv, sizeof(sock_kv), "server.socket=%s", sock_path);
  return fixture_storage(2, L1_BYTES, sock_kv, l2, NULL);
}

static void assert_keys_eq(const kva_l2_tier_keys *a, const kva_l2_tier_keys *b) {
  ck_assert_uint_eq(a->written, b->written);
  ck_assert_uint_eq(a->stored, b->stored);
  ck_assert_uint_eq(a->coalesced, b->coalesced);
  ck_assert_uint_eq(a->bypassed, b->bypassed);
  ck_assert_uint_eq(a->frozen, b->frozen);
  ck_assert_uint_eq(a->gone, b->gone);
  ck_assert_uint_eq(a->unavailable, b->unavailable);
  ck_assert_uint_eq(a->failed, b->failed);
  ck_assert_uint_eq(a->dropped, b->dropped);
  ck_assert_uint_eq(a->absent_now, b->absent_now);
  ck_assert_uint_eq(a->absent_overflowed, b->absent_overflowed);
}

START_TEST(a_clients_tier_keys_are_the_daemons) {
  kva_runtime *drt = daemon_here("l2=[{\"type\":\"mock\"}]");
  kva_runtime *crt = client_up();
  kva_storage *d = kva_storage_of(drt), *c = kva_storage_of(crt);
  write_keys(c, 0, 20, OBJ_BYTES);
  ck_assert_int_eq(kva_flush(c, 10000), KVA_OK);
  ck_assert_int_eq(kva_set_freeze(c, 1), KVA_OK);
  write_keys(c, 100, 3, OBJ_BYTES); /* not sent: frozen */
  ck_assert_int_eq(kva_flush(c, 10000), KVA_OK);
  ck_assert_int_eq(kva_set_freeze(c, 0), KVA_OK);
  kva_l2_tier_keys in, out;
  memset(&out, 0xee, sizeof(out));
  ck_assert_int_eq(kva_l2_get_tier_keys(d, "mock0", &in), KVA_OK);
  ck_assert_int_eq(kva_l2_get_tier_keys(c, "mock0", &out), KVA_OK);
  assert_keys_eq(&out, &in);
  ck_assert_uint_eq(out.written, 23);
  ck_assert_uint_eq(out.stored, 20);
  ck_assert_uint_eq(out.frozen, 3);
  kva_l2_tier_stats ts_in, ts_out;
  ck_assert_int_eq(kva_l2_get_tier_stats(d, "mock0", &ts_in), KVA_OK);
  ck_assert_int_eq(kva_l2_get_tier_stats(c, "mock0", &ts_out), KVA_OK);
  ck_assert_uint_eq(ts_out.stored_keys, ts_in.stored_keys);
  ck_assert_uint_eq(ts_out.stored_bytes, ts_in.stored_bytes);
  ck_assert_uint_eq(ts_out.adapter.objects, ts_in.adapter.objects);
  /* refused alike */
  ck_assert_int_eq(kva_l2_get_tier_keys(c, "nope", &out), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_get_tier_keys(d, "nope", &out), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_get_tier_keys(c, "mock0", NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_get_tier_keys(c, NULL, &out), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_get_tier_keys(c, "a-tier-name-longer-than-31-bytes!", &out), KVA_EINVAL);
  kva_runtime_shutdown(crt);
  memcheck_soon(d);
  kva_runtime_shutdown(drt);
}
END_TEST

START_TEST(a_mock_tier_has_no_nodes_through_kvactd) {
  kva_runtime *drt = daemon_here("l2=[{\"type\":\"mock\"}]");
  kva_runtime *crt = client_up();
  kva_storage *d = kva_storage_of(drt), *c = kva_storage_of(crt);
  kva_l2_node_stats node;
  size_t n = 77;
  double age = 77;
  ck_assert_int_eq(kva_l2_get_tier_nodes(d, "mock0", &node, 1, &n, &age), KVA_ENOTSUP);
  ck_assert_int_eq(kva_l2_get_tier_nodes(c, "mock0", &node, 1, &n, &age), KVA_ENOTSUP);
  ck_assert_uint_eq(n, 77); /* untouched, as in-process */
  ck_assert(age == 77);
  ck_assert_int_eq(kva_l2_get_tier_nodes(c, "nope", &node, 1, &n, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_get_tier_nodes(c, "mock0", &node, 1, NULL, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_get_tier_nodes(c, "mock0", NULL, 1, &n, NULL), KVA_EINVAL);
  kva_runtime_shutdown(crt);
  kva_runtime_shutdown(drt);
}
END_TEST

START_TEST(a_redis_tiers_node_through_kvactd_is_the_daemons) {
  rs_server srv;
  rs_start(&srv, NULL);
  char l2[256], addr[64];
  snprintf(l2, sizeof(l2),
           "l2=[{\"type\":\"redis\",\"addrs\":[\"127.0.0.1:%d\"],\"timeout_ms\":10000}]", srv.port);
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", srv.port);
  kva_runtime *drt = daemon_here(l2);
  kva_runtime *crt = client_up();
  kva_storage *d = kva_storage_of(drt), *c = kva_storage_of(crt);
  write_keys(c, 0, 4, OBJ_BYTES);
  ck_assert_int_eq(kva_flush(c, 10000), KVA_OK);
  kva_l2_node_stats in[4], out[4];
  size_t n_in = 0, n_out = 0;
  double age_in = 0, age_out = 0;
  memset(out, 0xee, sizeof(out));
  ck_assert_int_eq(kva_l2_get_tier_nodes(d, "redis0", in, 4, &n_in, &age_in), KVA_OK);
  ck_assert_int_eq(kva_l2_get_tier_nodes(c, "redis0", out, 4, &n_out, &age_out), KVA_OK);
  ck_assert_uint_eq(n_in, 1); /* one server: it is the tier */
  ck_assert_uint_eq(n_out, 1);
  ck_assert(age_out == -1 && age_in == -1); /* no slot map */
  ck_assert_str_eq(out[0].addr, addr);
  ck_assert_int_eq(out[0].state, KVA_L2_NODE_OK);
  ck_assert_int_eq(out[0].state, in[0].state);
  ck_assert_uint_eq(out[0].slots, 0);
  ck_assert(out[0].failed_s == 0);
  ck_assert_uint_eq(out[0].outages, in[0].outages);
  ck_assert_uint_eq(out[0].failed_cmds, in[0].failed_cmds);
  ck_assert_uint_eq((uint8_t)out[1].addr[0], 0xee); /* past n: untouched */
  n_out = 0;
  ck_assert_int_eq(kva_l2_get_tier_nodes(c, "redis0", NULL, 0, &n_out, NULL), KVA_OK);
  ck_assert_uint_eq(n_out, 1); /* no room: counted all the same */
  kva_l2_tier_keys k;
  ck_assert_int_eq(kva_l2_get_tier_keys(c, "redis0", &k), KVA_OK);
  ck_assert_uint_eq(k.stored, 4);
  kva_runtime_shutdown(crt);
  memcheck_soon(d);
  kva_runtime_shutdown(drt);
  rs_stop(&srv);
}
END_TEST

/* ---- a daemon of an older protocol version -------------------------------- */

typedef struct old_daemon {
  int fd;
  int stop; /* atomic: the test tells the thread */
  pthread_t thread;
} old_daemon;

/* What a kvactd of version PROTO_VERSION - 1 answers a hello of this
 * version: its refusal, in its own header, then the end. */
static void refuse_as_older(int fd) {
  uint8_t hello[PROTO_HDR_BYTES + 8], out[PROTO_HDR_BYTES + 8 + 128];
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, 2000) == 1 && read(fd, hello, sizeof(hello)) > 0) {
    char msg[96];
    snprintf(msg, sizeof(msg), "protocol version %u, kvactd speaks version %u", PROTO_VERSION,
             PROTO_VERSION - 1);
    proto_rep r = {
        .type = P_REFUSED, .result = KVA_ENOTSUP, .text = msg, .text_len = (uint32_t)strlen(msg)};
    size_t size = proto_rep_put(out, sizeof(out), &r, 0);
    out[4] = PROTO_VERSION - 1; /* the header's version, little endian */
    if (size && write(fd, out, size) < 0) perror("old daemon: write");
  }
  close(fd);
}

static void *old_daemon_main(void *arg) {
  old_daemon *o = arg;
  while (!__atomic_load_n(&o->stop, __ATOMIC_RELAXED)) { /* relaxed: a flag, nothing with it */
    struct pollfd p = {o->fd, POLLIN, 0};
    if (poll(&p, 1, 20) != 1) continue;
    int fd = accept(o->fd, NULL, NULL);
    if (fd >= 0) refuse_as_older(fd);
  }
  return NULL;
}

static void old_daemon_start(old_daemon *o) {
  struct sockaddr_un a;
  ck_assert_int_eq(wire_unix_addr(sock_path, &a), KVA_OK);
  unlink(sock_path);
  o->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(o->fd, 0);
  ck_assert_int_eq(bind(o->fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(listen(o->fd, 16), 0);
  __atomic_store_n(&o->stop, 0, __ATOMIC_RELAXED); /* before the thread exists */
  ck_assert_int_eq(pthread_create(&o->thread, NULL, old_daemon_main, o), 0);
}

static void old_daemon_stop(old_daemon *o) {
  __atomic_store_n(&o->stop, 1, __ATOMIC_RELAXED); /* the join orders the rest */
  pthread_join(o->thread, NULL);
  close(o->fd);
  unlink(sock_path);
}

/* Polls the client's tier keys (10 s) until they answer want. */
static int tier_keys_soon(kva_storage *c, int want) {
  kva_l2_tier_keys k;
  int rc = 0;
  for (int i = 0; i < 1000 && (rc = kva_l2_get_tier_keys(c, "mock0", &k)) != want; i++)
    sleep_ms(10);
  return rc;
}

START_TEST(a_client_of_an_older_daemon_gets_enotsup) {
  old_daemon o;
  old_daemon_start(&o);
  kva_runtime *crt = client_start();
  kva_storage *c = kva_storage_of(crt);
  ck_assert_int_eq(tier_keys_soon(c, KVA_ENOTSUP), KVA_ENOTSUP);
  size_t n;
  ck_assert_int_eq(kva_l2_get_tier_nodes(c, "mock0", NULL, 0, &n, NULL), KVA_ENOTSUP);
  kva_storage_stats st;
  ck_assert_int_eq(kva_storage_get_stats(c, &st), KVA_ENOTSUP);
  old_daemon_stop(&o);
  kva_runtime *drt = daemon_here("l2=[{\"type\":\"mock\"}]"); /* one of its own version */
  ck_assert_int_eq(tier_keys_soon(c, KVA_OK), KVA_OK);
  kva_runtime_shutdown(crt);
  kva_runtime_shutdown(drt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("mp_tiers");
  TCase *tc = tcase_create("mp_tiers");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, a_clients_tier_keys_are_the_daemons);
  tcase_add_test(tc, a_mock_tier_has_no_nodes_through_kvactd);
  tcase_add_test(tc, a_redis_tiers_node_through_kvactd_is_the_daemons);
  tcase_add_test(tc, a_client_of_an_older_daemon_gets_enotsup);
  suite_add_tcase(s, tc);
  return s;
}
