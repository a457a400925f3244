/*
 * l2_contract_test.c — one L2 adapter contract, run against every adapter
 * (one Check suite over five files, one test target per adapter: the
 * target's argument names the row of the table below). The contract is
 * kvact.h's "L2 adapters: the message protocol" and the README's "Writing
 * your own L2 adapter": every STORE, LOOKUP_AND_LOCK, LOAD and STATS is
 * answered exactly once with KVA_L2_DONE to the sender, same tag, same
 * pointer (l2_contract_test_replies.c); LOAD serves exactly the bytes
 * stored under that key with that layout, or a miss
 * (l2_contract_test_data.c); locks keep a key until as many UNLOCKs came,
 * through replacement and eviction (l2_contract_test_locks.c); malformed
 * requests are refused and change nothing (l2_contract_test_malformed.c).
 * This file: the adapters' table, the harness and the suite.
 *
 * Only kvact.h's public protocol is used to talk to the adapter; the test
 * helpers (fixture, l2_client) find its actor and make the bytes.
 */
#include "tests/l2/l2_contract_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"
#include "tests/support/plugin_adapter.h"
#include "tests/support/redis_server.h"

#define CT_GUARD 64u     /* bytes after each buffer that a LOAD must not touch */
#define CT_L1 (8u << 20) /* L1 of the runtime (the suite never writes L1) */
#define CT_QUIET_MS 50   /* how long nothing may arrive after a fence */

/* ---- the adapters --------------------------------------------------------- */

static const ct_adapter adapters[] = {
    {.name = "mock",
     .l2_json = "[{\"type\":\"mock\",\"capacity_bytes\":80000}]",
     .caps = {.capacity = 8, .evicts = true, .stats_held_now = true}},
    /* no path: a temporary file; 139264 bytes = superblock, one index block
     * and 8 slots of 16384 (a header block and 3 blocks: CT_LEN fits) */
    {.name = "disk",
     .l2_json = "[{\"type\":\"disk\",\"capacity_bytes\":139264,\"slot_bytes\":16384}]",
     .caps = {.capacity = 8, .evicts = true, .stats_held_now = true}},
    {.name = "redis",
     .l2_json = "[{\"type\":\"redis\",\"addrs\":[\"127.0.0.1:%d\"],\"timeout_ms\":10000}]",
     .redis = true,
     .caps = {.capacity = 0,
              .evicts = false,
              .capacity_note = "l2/adapters/redis/redis.h: capacity_bytes is not enforced "
                               "(the server's maxmemory governs)",
              .stats_held_now = false,
              .stats_note = "l2/adapters/redis/redis.h: objects and bytes count the SETs that "
                            "succeeded since start (the server may hold more or fewer)"}},
    {.name = "plugin",
     .l2_json = "[{\"type\":\"tiny\"}]",
     .registers = plugin_tiny_register,
     .caps = {.capacity = PLUGIN_TINY_MAX,
              .evicts = false,
              .capacity_note = "tests/support/plugin_adapter.h: a table that never evicts (a "
                               "STORE into a full table fails with KVA_ENOMEM)",
              .stats_held_now = true}},
};

const ct_adapter *ct_adapter_of_arg(void) {
  const char *name = fixture_arg(1);
  for (size_t i = 0; name && i < sizeof(adapters) / sizeof(adapters[0]); i++)
    if (strcmp(adapters[i].name, name) == 0) return &adapters[i];
  return NULL;
}

void ct_print_differences(const ct_adapter *ad) {
  const ct_caps *caps = &ad->caps;
  if (caps->capacity_note)
    printf("l2_contract[%s]: capacity %u objects, %s: %s\n", ad->name, caps->capacity,
           caps->evicts ? "evicts" : "never evicts", caps->capacity_note);
  if (!caps->capacity) printf("l2_contract[%s]: the capacity cases do not apply\n", ad->name);
  if (caps->stats_note) printf("l2_contract[%s]: stats: %s\n", ad->name, caps->stats_note);
}

/* ---- the runtime ---------------------------------------------------------- */

static rs_server server; /* the redis row's, one per test (each test is a process) */

ct ct_open(void) {
  ct c = {.ad = ct_adapter_of_arg()};
  char l2[1024], json[768];
  ck_assert_ptr_nonnull(c.ad);
  if (c.ad->registers) {
    int rc = c.ad->registers();
    ck_assert(rc == KVA_OK || rc == KVA_EINVAL); /* EINVAL: registered already */
  }
  if (c.ad->redis) {
    rs_start(&server, NULL);
    snprintf(json, sizeof(json), c.ad->l2_json, server.port);
  } else {
    snprintf(json, sizeof(json), "%s", c.ad->l2_json);
  }
  snprintf(l2, sizeof(l2), "l2=%s", json);
  c.rt = fixture_storage(2, CT_L1, l2, NULL);
  c.s = kva_storage_of(c.rt);
  c.a = l2_tier_actor(c.s, 0);
  c.port = kva_port_open(c.rt, "l2_contract");
  ck_assert_ptr_nonnull(c.port);
  return c;
}

void ct_close(ct *c) {
  ct_expect_quiet(c, c->port);
  kva_l2_stats st = ct_stats(c);
  ck_assert_msg(st.keys_locked == 0, "%lu lookup locks held at the end",
                (unsigned long)st.keys_locked);
  kva_port_close(c->port);
  kva_runtime_shutdown(c->rt);
  if (c->ad->redis) rs_stop(&server);
}

/* ---- messages ------------------------------------------------------------- */

void ct_send_from(ct *c, kva_port *port, uint32_t type, kva_l2_req *r, uint64_t tag) {
  ck_assert_int_eq(kva_send(c->a, type, &r, sizeof(r), kva_port_actor(port), tag), KVA_OK);
}

/* Tags with high bits set, so a reply that truncates or remakes its tag
 * does not match by chance. */
uint64_t ct_send(ct *c, uint32_t type, kva_l2_req *r) {
  uint64_t tag = 0xc0de000000000000ull | ++c->tag;
  ct_send_from(c, c->port, type, r, tag);
  return tag;
}

kva_l2_req *ct_reply_on(kva_port *port, uint64_t *tag) {
  kva_msg m;
  kva_l2_req *p = NULL;
  int rc = kva_port_recv(port, &m, &p, sizeof(p), CT_WAIT_MS);
  ck_assert_msg(rc == KVA_OK, "no reply within %d ms: %s", CT_WAIT_MS, kva_strerror(rc));
  ck_assert_msg(m.type == KVA_L2_DONE, "a reply of type %u, not KVA_L2_DONE", m.type);
  ck_assert_msg(m.len == sizeof(p), "a KVA_L2_DONE of %u bytes, not one pointer", m.len);
  *tag = m.tag;
  return p;
}

int ct_call(ct *c, uint32_t type, kva_l2_req *r) {
  uint64_t tag = ct_send(c, type, r), got;
  kva_l2_req *p = ct_reply_on(c->port, &got);
  ck_assert_msg(got == tag, "reply tag %#llx, sent %#llx", (unsigned long long)got,
                (unsigned long long)tag);
  ck_assert_msg(p == r, "reply pointer %p, sent %p", (void *)p, (void *)r);
  return r->result;
}

void ct_expect_quiet(ct *c, kva_port *port) {
  kva_l2_stats st;
  kva_l2_req r = {.stats = &st};
  const uint64_t fence = 0xfe1cefe1cefe1ceull;
  ct_send_from(c, port, KVA_L2_STATS, &r, fence);
  uint64_t tag;
  kva_l2_req *p = ct_reply_on(port, &tag);
  ck_assert_msg(tag == fence && p == &r, "an unexpected reply (tag %#llx, pointer %p)",
                (unsigned long long)tag, (void *)p);
  kva_msg m;
  uint8_t buf[64];
  int rc = kva_port_recv(port, &m, buf, sizeof(buf), CT_QUIET_MS);
  ck_assert_msg(rc == KVA_ETIMEDOUT, "a message after the fence: type %u, tag %#llx", m.type,
                (unsigned long long)m.tag);
}

/* ---- objects -------------------------------------------------------------- */

ct_objs *ct_objs_make(const uint64_t *ids, size_t n, const kva_layout *l, size_t len, uint32_t v) {
  ct_objs *o = calloc(1, sizeof(*o));
  ck_assert_ptr_nonnull(o);
  *o = (ct_objs){.n = n, .len = len, .v = v, .layout = *l};
  o->keys = calloc(n ? n : 1, sizeof(*o->keys));
  o->bufs = calloc(n ? n : 1, sizeof(*o->bufs));
  o->ids = calloc(n ? n : 1, sizeof(*o->ids));
  o->bits = calloc((n + 7) / 8 ? (n + 7) / 8 : 1, 1);
  o->keys_copy = calloc(n ? n : 1, sizeof(*o->keys_copy));
  o->bufs_copy = calloc(n ? n : 1, sizeof(*o->bufs_copy));
  ck_assert(o->keys && o->bufs && o->ids && o->bits && o->keys_copy && o->bufs_copy);
  for (size_t i = 0; i < n; i++) {
    o->ids[i] = ids[i];
    o->keys[i] = o->keys_copy[i] = fixture_key(ids[i]);
    o->bufs[i] = (kva_buf){malloc(len + CT_GUARD), len};
    ck_assert_ptr_nonnull(o->bufs[i].ptr);
    l2_fill(o->bufs[i].ptr, len, ids[i], v);
    memset((uint8_t *)o->bufs[i].ptr + len, 0xa5, CT_GUARD);
    o->bufs_copy[i] = o->bufs[i];
  }
  return o;
}

ct_objs *ct_objs_new(uint64_t first, size_t n, uint32_t v) {
  uint64_t ids[CT_MAXN];
  ck_assert_uint_le(n, CT_MAXN);
  for (size_t i = 0; i < n; i++) ids[i] = first + i;
  kva_layout l = fixture_layout_bytes(CT_LEN);
  return ct_objs_make(ids, n, &l, CT_LEN, v);
}

void ct_objs_free(ct_objs *o) {
  for (size_t i = 0; i < o->n; i++) free(o->bufs_copy[i].ptr);
  free(o->keys);
  free(o->bufs);
  free(o->ids);
  free(o->bits);
  free(o->keys_copy);
  free(o->bufs_copy);
  free(o);
}

void ct_objs_blank(ct_objs *o) {
  for (size_t i = 0; i < o->n; i++) memset(o->bufs_copy[i].ptr, 0xee, o->len + CT_GUARD);
  memset(o->bits, 0, (o->n + 7) / 8);
}

uint64_t ct_bits_mask(const ct_objs *o) {
  uint64_t m = 0;
  for (size_t i = 0; i < o->n && i < 64; i++) m |= (uint64_t)kva_bit_get(o->bits, i) << i;
  return m;
}

/* No bit at or past n in the last byte of bits. */
static void expect_no_stray_bits(const ct_objs *o) {
  if (o->n % 8 == 0) return;
  uint8_t last = o->bits[(o->n - 1) / 8];
  ck_assert_msg((last >> (o->n % 8)) == 0, "bits past n = %zu are set (%#x)", o->n, last);
}

/* ---- checks --------------------------------------------------------------- */

void ct_check_store_intact(const ct_objs *o) {
  for (size_t i = 0; i < o->n; i++) {
    ck_assert_msg(memcmp(&o->keys[i], &o->keys_copy[i], sizeof(kva_key)) == 0,
                  "STORE wrote key %zu of its request", i);
    ck_assert_msg(o->bufs[i].ptr == o->bufs_copy[i].ptr && o->bufs[i].len == o->bufs_copy[i].len,
                  "STORE changed buffer %zu of its request", i);
    ck_assert_msg(l2_matches(o->bufs[i].ptr, o->len, o->ids[i], o->v),
                  "STORE wrote into the bytes of key %lu", (unsigned long)o->ids[i]);
  }
}

/* The guard bytes after buffer i: as ct_objs_blank (0xee) left them. */
static bool guard_intact(const ct_objs *o, size_t i) {
  const uint8_t *g = (const uint8_t *)o->bufs_copy[i].ptr + o->len;
  for (size_t j = 0; j < CT_GUARD; j++)
    if (g[j] != 0xee) return false;
  return true;
}

uint64_t ct_check_loaded(const ct_objs *o, uint32_t v) {
  expect_no_stray_bits(o);
  for (size_t i = 0; i < o->n; i++) {
    ck_assert_msg(guard_intact(o, i), "LOAD wrote past buffer %zu (%zu bytes, key %lu)", i, o->len,
                  (unsigned long)o->ids[i]);
    if (kva_bit_get(o->bits, i))
      ck_assert_msg(l2_matches(o->bufs[i].ptr, o->len, o->ids[i], v),
                    "LOAD set the bit of key %lu over bytes that are not its version %u",
                    (unsigned long)o->ids[i], v);
  }
  return ct_bits_mask(o);
}

/* ---- requests ------------------------------------------------------------- */

int ct_store_objs(ct *c, ct_objs *o) {
  kva_l2_req r = {.keys = o->keys, .n = o->n, .layout = &o->layout, .bufs = o->bufs};
  int rc = ct_call(c, KVA_L2_STORE, &r);
  ct_check_store_intact(o);
  return rc;
}

int ct_store(ct *c, uint64_t first, size_t n, uint32_t v) {
  ct_objs *o = ct_objs_new(first, n, v);
  int rc = ct_store_objs(c, o);
  ct_objs_free(o);
  return rc;
}

uint64_t ct_lock_objs(ct *c, ct_objs *o, const kva_key *prev) {
  memset(o->bits, 0, (o->n + 7) / 8);
  kva_l2_req r = {.keys = o->keys, .n = o->n, .bits = o->bits, .prev = prev};
  ck_assert_int_eq(ct_call(c, KVA_L2_LOOKUP_AND_LOCK, &r), KVA_OK);
  expect_no_stray_bits(o);
  return ct_bits_mask(o);
}

uint64_t ct_lock(ct *c, uint64_t first, size_t n) {
  ct_objs *o = ct_objs_new(first, n, 0);
  uint64_t m = ct_lock_objs(c, o, NULL);
  ct_objs_free(o);
  return m;
}

uint64_t ct_load_objs(ct *c, ct_objs *o, uint32_t v) {
  ct_objs_blank(o);
  kva_l2_req r = {
      .keys = o->keys, .n = o->n, .layout = &o->layout, .bufs = o->bufs, .bits = o->bits};
  ck_assert_int_eq(ct_call(c, KVA_L2_LOAD, &r), KVA_OK);
  return ct_check_loaded(o, v);
}

uint64_t ct_load(ct *c, uint64_t first, size_t n, uint32_t v) {
  ct_objs *o = ct_objs_new(first, n, v);
  uint64_t m = ct_load_objs(c, o, v);
  ct_objs_free(o);
  return m;
}

void ct_unlock_objs(ct *c, const ct_objs *o) {
  uint32_t len = (uint32_t)(o->n * sizeof(kva_key));
  ck_assert_int_eq(kva_send(c->a, KVA_L2_UNLOCK, o->keys, len, kva_port_actor(c->port), 0), KVA_OK);
}

void ct_unlock(ct *c, uint64_t first, size_t n) {
  ct_objs *o = ct_objs_new(first, n, 0);
  ct_unlock_objs(c, o);
  ct_objs_free(o);
}

uint64_t ct_read_back(ct *c, uint64_t first, size_t n, uint32_t v) {
  ct_objs *o = ct_objs_new(first, n, v);
  uint64_t locked = ct_lock_objs(c, o, NULL);
  uint64_t loaded = ct_load_objs(c, o, v);
  ck_assert_msg(loaded == locked, "keys locked %#llx, loaded %#llx", (unsigned long long)locked,
                (unsigned long long)loaded);
  ct_unlock_objs(c, o);
  ct_objs_free(o);
  return loaded;
}

kva_l2_stats ct_stats(ct *c) {
  kva_l2_stats st;
  memset(&st, 0xff, sizeof(st));
  kva_l2_req r = {.stats = &st};
  ck_assert_int_eq(ct_call(c, KVA_L2_STATS, &r), KVA_OK);
  return st;
}

void ct_expect_same_stats(const kva_l2_stats *a, const kva_l2_stats *b, const char *what) {
#define SAME(f)                                                                                    \
  ck_assert_msg(a->f == b->f, "%s: stats." #f " went from %lu to %lu", what, (unsigned long)a->f,  \
                (unsigned long)b->f)
  SAME(objects);
  SAME(bytes);
  SAME(capacity_bytes);
  SAME(keys_locked);
  SAME(stores);
  SAME(store_failures);
  SAME(loads);
  SAME(load_failures);
  SAME(lookups);
  SAME(evictions);
#undef SAME
}

/* ---- the suite ------------------------------------------------------------ */

Suite *kva_test_suite(void) {
  const ct_adapter *ad = ct_adapter_of_arg();
  if (!ad) {
    fprintf(stderr, "l2_contract: unknown adapter \"%s\" (mock, disk, redis or plugin)\n",
            fixture_arg(1) ? fixture_arg(1) : "(none)");
    exit(2);
  }
  char name[64];
  snprintf(name, sizeof(name), "l2_contract_%s", ad->name);
  Suite *su = suite_create(name);
  suite_add_tcase(su, l2_contract_replies_tcase());
  suite_add_tcase(su, l2_contract_data_tcase());
  suite_add_tcase(su, l2_contract_locks_tcase());
  ct_print_differences(ad);
  if (ad->caps.capacity) suite_add_tcase(su, l2_contract_capacity_tcase());
  suite_add_tcase(su, l2_contract_malformed_tcase());
  return su;
}
