/*
 * l2_redis_test_util.c — helpers of the redis tier suites (see
 * l2_redis_test.h).
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "common/key.h"
#include "storage/storage_internal.h"
#include "tests/l2/l2_redis_test.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

/* Unless a suite sets its own, commands get 10 s: the sanitizer runs of
 * three suites on two cores must not time out by accident. */
const char *rt_members(int port, const char *extra) {
  static char buf[1024];
  extra = extra ? extra : "";
  snprintf(buf, sizeof(buf), "\"type\":\"redis\",\"addrs\":[\"127.0.0.1:%d\"]%s%s%s", port,
           strstr(extra, "timeout_ms") ? "" : ",\"timeout_ms\":10000", *extra ? "," : "", extra);
  return buf;
}

kva_runtime *rt_start(int workers, const char *tiers) {
  char l2[4096];
  snprintf(l2, sizeof(l2), "l2=%s", tiers);
  return fixture_storage(workers, RT_L1, l2, NULL);
}

kva_runtime *rt_start_one(int workers, int port, const char *extra) {
  char tiers[2048];
  snprintf(tiers, sizeof(tiers), "[{%s}]", rt_members(port, extra));
  return rt_start(workers, tiers);
}

kva_storage *rt_open(rs_server *srv, int workers, const char *extra) {
  rs_start(srv, NULL);
  return kva_storage_of(rt_start_one(workers, srv->port, extra));
}

void rt_close(kva_storage *s, rs_server *srv) {
  l2_finish(s->rt);
  rs_stop(srv);
}

int rt_try(int port, const char *extra) {
  char tiers[2048];
  snprintf(tiers, sizeof(tiers), "[{%s}]", rt_members(port, extra));
  return l2_try_start("l2", tiers);
}

const char *rt_key(const char *ns, uint64_t id, char *buf, size_t cap) {
  char printed[256];
  kva_key k = fixture_key(id);
  key_format(&k, printed, sizeof(printed));
  snprintf(buf, cap, "%s:%s", ns, printed);
  return buf;
}

int rt_bypassed(kva_storage *s) {
  return (int)__atomic_load_n(&s->tiers.t[0].bypass_auto, __ATOMIC_RELAXED);
}

int rt_wait_bypass(kva_storage *s, int on, int timeout_ms) {
  for (int t = 0; t < timeout_ms; t += 5) {
    if (rt_bypassed(s) == on) return 1;
    l2_sleep_ms(5);
  }
  return rt_bypassed(s) == on;
}
