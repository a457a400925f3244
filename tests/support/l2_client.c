/*
 * l2_client.c — helpers of the L2 suites (see l2_client.h). Requests to a
 * tier go from a port of the test's own, as the controllers would send
 * them; L1 state is read with L1_INSPECT, which changes nothing.
 */
#include "tests/support/l2_client.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "l1/l1_manager.h"
#include "storage_internal.h"
#include "tests/support/fixture.h"

kva_runtime *l2_start(int workers, uint64_t l1_bytes, int ntiers, const char *mock_json, ...) {
  char tiers[2048] = "l2=[", *p = tiers + strlen(tiers);
  for (int i = 0; i < ntiers; i++)
    p += snprintf(p, sizeof(tiers) - (size_t)(p - tiers), "%s{\"type\":\"mock\"%s%s}",
                  i ? "," : "", mock_json && *mock_json ? "," : "", mock_json ? mock_json : "");
  snprintf(p, sizeof(tiers) - (size_t)(p - tiers), "]");
  const char *kv[16];
  size_t n = 0;
  va_list ap;
  va_start(ap, mock_json);
  for (const char *s; n < 15 && (s = va_arg(ap, const char *)) != NULL;) kv[n++] = s;
  va_end(ap);
  while (n < 15) kv[n++] = NULL;
  return fixture_storage(workers, l1_bytes, tiers, kv[0], kv[1], kv[2], kv[3], kv[4], kv[5],
                         kv[6], kv[7], kv[8], kv[9], kv[10], kv[11], kv[12], kv[13], NULL);
}

kva_actor *l2_tier_actor(kva_storage *s, uint32_t tier) {
  ck_assert_uint_lt(tier, s->tiers.n);
  return s->tiers.t[tier].actor;
}

void l2_fill(void *p, size_t len, uint64_t id, uint32_t v) {
  uint8_t *b = p;
  for (size_t o = 0; o < len; o++) b[o] = l2_pattern(id, v, o);
}

bool l2_matches(const void *p, size_t len, uint64_t id, uint32_t v) {
  const uint8_t *b = p;
  for (size_t o = 0; o < len; o++)
    if (b[o] != l2_pattern(id, v, o)) return false;
  return true;
}

void l2_write(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l, uint32_t v) {
  kva_key *k = calloc(n, sizeof(*k));
  kva_buf *b = calloc(n, sizeof(*b));
  int *st = calloc(n, sizeof(*st));
  ck_assert(k && b && st);
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(ids[i]);
  ck_assert_int_eq(kva_reserve_write(s, k, n, l, KVA_WRITE_NEW, b, st), (int)n);
  for (size_t i = 0; i < n; i++) l2_fill(b[i].ptr, b[i].len, ids[i], v);
  ck_assert_int_eq(kva_finish_write(s, k, n, st), (int)n);
  free(k);
  free(b);
  free(st);
}

/* Sends one request pointer to a tier and waits for its reply. */
static void ask(kva_storage *s, uint32_t tier, uint32_t type, kva_l2_req *r) {
  kva_port *port = kva_port_open(s->rt, "l2_client");
  ck_assert_ptr_nonnull(port);
  ck_assert_int_eq(kva_send(l2_tier_actor(s, tier), type, &r, sizeof(r), kva_port_actor(port), 7), 0);
  kva_msg m = fixture_recv(port, NULL, 0, 10000);
  ck_assert_uint_eq(m.type, KVA_L2_DONE);
  ck_assert_uint_eq(m.tag, 7);
  kva_port_close(port);
}

void l2_seed(kva_storage *s, uint32_t tier, const uint64_t *ids, size_t n, const kva_layout *l,
             uint32_t v) {
  size_t bytes = kva_layout_bytes(l);
  kva_key *k = calloc(n, sizeof(*k));
  kva_buf *b = calloc(n, sizeof(*b));
  ck_assert(k && b);
  for (size_t i = 0; i < n; i++) {
    k[i] = fixture_key(ids[i]);
    b[i] = (kva_buf){malloc(bytes), bytes};
    ck_assert_ptr_nonnull(b[i].ptr);
    l2_fill(b[i].ptr, bytes, ids[i], v);
  }
  kva_l2_req r = {.keys = k, .n = n, .layout = l, .bufs = b};
  ask(s, tier, KVA_L2_STORE, &r);
  ck_assert_int_eq(r.result, KVA_OK);
  for (size_t i = 0; i < n; i++) free(b[i].ptr);
  free(k);
  free(b);
}

void l2_seed_range(kva_storage *s, uint32_t tier, uint64_t first, size_t n, const kva_layout *l) {
  uint64_t ids[256];
  ck_assert_uint_le(n, 256);
  for (size_t i = 0; i < n; i++) ids[i] = first + i;
  l2_seed(s, tier, ids, n, l, 0);
}

kva_l2_stats l2_stats(kva_storage *s, uint32_t tier) {
  kva_l2_stats st;
  memset(&st, 0, sizeof(st));
  kva_l2_req r = {.stats = &st};
  ask(s, tier, KVA_L2_STATS, &r);
  ck_assert_int_eq(r.result, KVA_OK);
  return st;
}

void l2_control(kva_storage *s, uint32_t tier, const mock_control *c) {
  kva_port *port = kva_port_open(s->rt, "l2_client");
  ck_assert_ptr_nonnull(port);
  ck_assert_int_eq(
      kva_send(l2_tier_actor(s, tier), MOCK_CONTROL, c, sizeof(*c), kva_port_actor(port), 9), 0);
  kva_msg m = fixture_recv(port, NULL, 0, 10000);
  ck_assert_uint_eq(m.tag, 9);
  kva_port_close(port);
}

void l2_fail_loads(kva_storage *s, uint32_t tier, const uint64_t *ids, size_t n) {
  mock_control c;
  memset(&c, 0, sizeof(c));
  c.set = MOCK_SET_FAIL_LOAD_KEYS;
  c.nfail_load = (uint32_t)n;
  for (size_t i = 0; i < n; i++) c.fail_load[i] = fixture_key(ids[i]);
  l2_control(s, tier, &c);
}

void l2_set_down(kva_storage *s, uint32_t tier, bool down) {
  mock_control c;
  memset(&c, 0, sizeof(c));
  c.set = MOCK_SET_DOWN;
  c.down = down;
  l2_control(s, tier, &c);
}

/* Unlocks are fire and forget; a STATS request sent after them from a
 * port still may overtake the controllers' own UNLOCKs, so retry. */
void l2_assert_unlocked(kva_storage *s) {
  for (uint32_t t = 0; t < s->tiers.n; t++) {
    uint64_t deadline = fixture_now_ns() + 5000000000ull, locked;
    while ((locked = l2_stats(s, t).keys_locked) != 0 && fixture_now_ns() < deadline)
      if (kva_runtime_run_until_idle(s->rt) == KVA_ENOTSUP) nanosleep(&(struct timespec){0, 1000000}, NULL);
    ck_assert_msg(locked == 0, "tier %u holds %lu locks", t, (unsigned long)locked);
  }
}

size_t l2_prefetch(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l,
                   uint32_t extra) {
  kva_key *k = calloc(n, sizeof(*k));
  ck_assert_ptr_nonnull(k);
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(ids[i]);
  kva_prefetch *h = NULL;
  ck_assert_int_eq(kva_submit_prefetch(s, k, n, l, extra, &h), KVA_OK);
  size_t hits = 0;
  ck_assert_int_eq(kva_wait_prefetch(s, h, 10000, &hits), KVA_OK);
  free(k);
  return hits;
}

size_t l2_prefetch_range(kva_storage *s, uint64_t first, size_t n, const kva_layout *l) {
  uint64_t ids[256];
  ck_assert_uint_le(n, 256);
  for (size_t i = 0; i < n; i++) ids[i] = first + i;
  return l2_prefetch(s, ids, n, l, 0);
}

void l2_read_release(kva_storage *s, const uint64_t *ids, size_t n, uint32_t v, uint32_t extra) {
  kva_key *k = calloc(n, sizeof(*k));
  kva_buf *b = calloc(n, sizeof(*b));
  ck_assert(k && b);
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(ids[i]);
  ck_assert_int_eq(kva_read_prefetched(s, k, n, b), KVA_OK);
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(l2_matches(b[i].ptr, b[i].len, ids[i], v), "key %lu: wrong bytes",
                  (unsigned long)ids[i]);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, n, extra), (int)n);
  free(k);
  free(b);
}

void l2_read_release_range(kva_storage *s, uint64_t first, size_t n, uint32_t v) {
  uint64_t ids[256];
  ck_assert_uint_le(n, 256);
  for (size_t i = 0; i < n; i++) ids[i] = first + i;
  l2_read_release(s, ids, n, v, 0);
}

int l2_l1_state(kva_storage *s, uint64_t id) {
  kva_key k = fixture_key(id);
  int st = 0;
  l1_req r = {.keys = &k, .n = 1, .status = &st};
  ck_assert_int_eq(storage_call(s, L1_INSPECT, &r), KVA_OK);
  return st;
}
