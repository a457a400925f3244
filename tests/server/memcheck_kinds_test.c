/*
 * memcheck_kinds_test.c — through kvactd, kva_memcheck_with tells the
 * daemon's store-behind read locks from the callers' locks, leaves them
 * out with callers_only, and waits for them (issue 26, "Also" (b)): the
 * option travels to the daemon, the counts come back. The daemon runs in
 * this process over "gate", an L2 adapter of the test's own that holds
 * every STORE until the test opens it, so a store stays in flight for as
 * long as the test needs, with no timing involved.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kvact.h"
#include "tests/server/mp_support.h"
#include "tests/support/fixture.h"

/* ---- the gate adapter --------------------------------------------------------- */

enum { GATE_OPEN = KVA_L2_ADAPTER_MSG };
#define GATE_HELD 64

typedef struct held {
  kva_actor *to;
  uint64_t tag;
  kva_l2_req *r;
} held;

typedef struct gate {
  bool open;
  held q[GATE_HELD];
  size_t n;
} gate;

static kva_actor *gate_actor;

static void answer(const held *h, int result) {
  h->r->result = result;
  kva_send(h->to, KVA_L2_DONE, &h->r, sizeof(h->r), NULL, h->tag);
}

static void gate_receive(kva_actor *self, void *state, const kva_msg *m) {
  gate *g = state;
  if (m->type == GATE_OPEN) {
    g->open = true;
    for (size_t i = 0; i < g->n; i++) answer(&g->q[i], KVA_OK);
    g->n = 0;
    return;
  }
  kva_l2_req *r = kva_l2_req_of(m);
  if (!r || !m->from || m->type == KVA_L2_UNLOCK) return;
  held h = {m->from, m->tag, r};
  if (m->type == KVA_L2_STATS) memset(r->stats, 0, sizeof(*r->stats));
  if (m->type == KVA_L2_STORE && !g->open && g->n < GATE_HELD) {
    g->q[g->n++] = h; /* in flight until the gate opens */
    return;
  }
  answer(&h, KVA_OK); /* stored (and forgotten); lookups and loads find nothing */
}

static void gate_stop(kva_actor *self, void *state) {
  gate *g = state;
  for (size_t i = 0; i < g->n; i++) answer(&g->q[i], KVA_ESHUTDOWN);
}

static gate the_gate;

static kva_actor *gate_factory(kva_runtime *rt, const kva_config_node *cfg, char *err,
                               size_t errlen) {
  static const kva_behavior b = {"gate", gate_receive, gate_stop};
  memset(&the_gate, 0, sizeof(the_gate));
  gate_actor = kva_spawn(rt, &b, &the_gate, NULL);
  if (!gate_actor) snprintf(err, errlen, "gate: cannot spawn");
  return gate_actor;
}

/* ---- the test ------------------------------------------------------------------- */

static kva_runtime *client_with_timeout(int timeout_ms) {
  kva_runtime *rt = client_start_with(timeout_ms, 1);
  client_wait_up(kva_storage_of(rt));
  return rt;
}

START_TEST(a_client_tells_the_daemons_store_behind_from_its_own_locks) {
  kva_l2_register("gate", gate_factory); /* KVA_EINVAL when registered already */
  char sock_kv[160];
  snprintf(sock_kv, sizeof(sock_kv), "server.socket=%s", sock_path);
  kva_runtime *drt = fixture_storage(2, 16u << 20, sock_kv, "l2=[{\"type\":\"gate\"}]", NULL);
  kva_runtime *crt = client_with_timeout(20000);
  kva_storage *s = kva_storage_of(crt);
  write_keys(s, 0, 1, 4096); /* its store is held in flight by the gate */
  char report[512] = "";
  kva_memcheck_report c;
  for (int i = 0; i < 1000; i++) { /* until the store has locked it (clean before) */
    int rc = kva_memcheck_with(s, NULL, &c, report, sizeof(report));
    ck_assert_msg(rc == KVA_OK || rc == KVA_EIO, "memcheck %d: %s", rc, report);
    if (c.store_read_locked) break;
    sleep_ms(10);
  }
  ck_assert_uint_eq(c.store_read_locked, 1);
  ck_assert_uint_eq(c.caller_read_locked + c.caller_write_locked + c.caller_pinned, 0);
  ck_assert_msg(strstr(report, "1 read-locked by kvact's store-behind"), "%s", report);
  kva_key k = fixture_key(0);
  kva_prefetch *h;
  size_t hits = 0;
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, NULL, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 1);
  kva_memcheck_opts callers = {.callers_only = 1};
  c = fixture_memcheck_counts(s, &callers, KVA_EIO, report,
                              sizeof(report)); /* the client's own lock counts */
  ck_assert_uint_eq(c.caller_read_locked, 1);
  ck_assert_uint_eq(c.store_read_locked, 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
  c = fixture_memcheck_counts(s, &callers, KVA_OK, report,
                              sizeof(report)); /* only the store-behind's left */
  ck_assert_uint_eq(c.store_read_locked, 1);
  kva_memcheck_opts short_wait = {.wait_stores_ms = 20};
  c = fixture_memcheck_counts(s, &short_wait, KVA_EIO, report,
                              sizeof(report)); /* the gate is shut */
  ck_assert_uint_eq(c.store_read_locked, 1);
  ck_assert_int_eq(kva_send(gate_actor, GATE_OPEN, NULL, 0, NULL, 0), KVA_OK);
  kva_memcheck_opts wait = {.wait_stores_ms = -1};
  c = fixture_memcheck_counts(s, &wait, KVA_OK, report, sizeof(report));
  ck_assert_uint_eq(c.store_read_locked, 0);
  kva_runtime_shutdown(crt);
  memcheck_soon(kva_storage_of(drt));
  kva_runtime_shutdown(drt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("memcheck_kinds");
  TCase *tc = tcase_create("memcheck_kinds");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, a_client_tells_the_daemons_store_behind_from_its_own_locks);
  suite_add_tcase(s, tc);
  return s;
}
