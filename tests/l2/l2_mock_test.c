/*
 * l2_mock_test.c — the mock L2 adapter actor through its message protocol
 * (one suite, five files): every scenario of LMCache's
 * test_mock_l2_adapter.py (l2_mock_test_lmcache.c), then our own
 * semantics: storage (locks, FIFO eviction, all-or-nothing stores,
 * replacement, strict loads), faults and seeded rates, time emulation on
 * virtual time, counters and bad input. This file: the shared harness and
 * the suite. Every scenario ends with no lookup lock held (mk_close).
 */
#include "tests/l2/l2_mock_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "tests/support/fixture.h"

/* ---- harness: a runtime, the mock, and a port to talk to it ------------- */

/* A runtime with `workers` and one mock configured with the JSON members
 * in `opts` ("" = schema defaults). */
mk mk_open(int workers, const char *opts) {
  mk h = {.rt = fixture_runtime(workers, NULL), .wait_ms = workers ? WAIT_MS : -1};
  char json[512], err[256] = "";
  snprintf(json, sizeof(json), "[{\"type\":\"mock\"%s%s}]", *opts ? "," : "", opts);
  kva_config *c = kva_config_default();
  ck_assert_int_eq(kva_config_set(c, "l2", json), KVA_OK);
  h.a = mock_adapter_spawn(h.rt, config_l2_node(c, 0), err, sizeof(err));
  ck_assert_msg(h.a != NULL, "spawn: %s", err);
  kva_config_free(c);
  h.port = kva_port_open(h.rt, "l2_mock_test");
  ck_assert_ptr_nonnull(h.port);
  return h;
}

void mk_shutdown(mk *h) {
  kva_port_close(h->port);
  kva_runtime_shutdown(h->rt);
  kva_log_set(NULL, NULL, KVA_LOG_WARN); /* mk_count_warnings may have taken it */
}

uint64_t mk_send(mk *h, uint32_t type, kva_l2_req *r) {
  uint64_t tag = ++h->tag;
  ck_assert_int_eq(kva_send(h->a, type, &r, sizeof(r), kva_port_actor(h->port), tag), KVA_OK);
  return tag;
}

/* One KVA_L2_DONE within timeout_ms: its tag, and its pointer in *r. */
int mk_try_reply(mk *h, int timeout_ms, uint64_t *tag, kva_l2_req **r) {
  kva_msg m;
  kva_l2_req *p = NULL;
  int rc = kva_port_recv(h->port, &m, &p, sizeof(p), timeout_ms);
  if (rc != KVA_OK) return rc;
  ck_assert_uint_eq(m.type, KVA_L2_DONE);
  ck_assert_uint_eq(m.len, sizeof(p));
  ck_assert_ptr_eq(m.from, h->a);
  *tag = m.tag;
  *r = p;
  return KVA_OK;
}

kva_l2_req *mk_next_reply(mk *h, int timeout_ms, uint64_t *tag) {
  kva_l2_req *p;
  ck_assert_int_eq(mk_try_reply(h, timeout_ms, tag, &p), KVA_OK);
  return p;
}

void mk_expect_reply_within(mk *h, int timeout_ms, uint64_t tag, const kva_l2_req *r) {
  uint64_t got;
  ck_assert_ptr_eq(mk_next_reply(h, timeout_ms, &got), r);
  ck_assert_uint_eq(got, tag);
}

void mk_expect_reply(mk *h, uint64_t tag, const kva_l2_req *r) {
  mk_expect_reply_within(h, h->wait_ms, tag, r);
}

void mk_expect_silence(mk *h, int timeout_ms) {
  uint64_t tag;
  kva_l2_req *p;
  ck_assert_int_eq(mk_try_reply(h, timeout_ms, &tag, &p), KVA_ETIMEDOUT);
}

int mk_call(mk *h, uint32_t type, kva_l2_req *r) {
  mk_expect_reply(h, mk_send(h, type, r), r);
  return r->result;
}

/* ---- objects: keys with a byte pattern per (key, generation) ------------ */

uint8_t objs_pattern(uint64_t key, size_t off, uint8_t gen) {
  return (uint8_t)(key * 37u + off * 11u + gen * 101u + 1u);
}

/* Keys [first, first + n), `bytes` each; filled with generation `gen`, or
 * zeroed (a load target) when gen < 0. */
objs *objs_make(uint64_t first, size_t n, uint64_t bytes, int gen) {
  objs *o = calloc(1, sizeof(*o));
  ck_assert(o && n <= MAXN);
  o->n = n;
  o->l = fixture_layout_bytes(bytes);
  for (size_t i = 0; i < n; i++) {
    o->k[i] = fixture_key(first + i);
    o->b[i] = (kva_buf){calloc(1, bytes), bytes};
    ck_assert_ptr_nonnull(o->b[i].ptr);
    for (size_t j = 0; gen >= 0 && j < bytes; j++)
      ((uint8_t *)o->b[i].ptr)[j] = objs_pattern(first + i, j, (uint8_t)gen);
  }
  return o;
}

void objs_free(objs *o) {
  for (size_t i = 0; i < o->n; i++) free(o->b[i].ptr);
  free(o);
}

/* Whether buffer i holds generation gen of key `key`. */
int objs_hold(const objs *o, size_t i, uint64_t key, int gen) {
  for (size_t j = 0; j < o->b[i].len; j++)
    if (((const uint8_t *)o->b[i].ptr)[j] != objs_pattern(key, j, (uint8_t)gen)) return 0;
  return 1;
}

uint64_t objs_bits(const objs *o) {
  uint64_t m = 0;
  for (size_t i = 0; i < o->n; i++) m |= (uint64_t)kva_bit_get(o->bits, i) << i;
  return m;
}

int mk_store(mk *h, objs *o) {
  kva_l2_req r = {.keys = o->k, .n = o->n, .layout = &o->l, .bufs = o->b};
  return mk_call(h, KVA_L2_STORE, &r);
}

/* Bit mask of the keys found (and locked). */
uint64_t mk_lookup(mk *h, objs *o) {
  memset(o->bits, 0, sizeof(o->bits));
  kva_l2_req r = {.keys = o->k, .n = o->n, .bits = o->bits};
  ck_assert_int_eq(mk_call(h, KVA_L2_LOOKUP_AND_LOCK, &r), KVA_OK);
  return objs_bits(o);
}

/* Bit mask of the keys loaded into o's buffers. */
uint64_t mk_load(mk *h, objs *o) {
  memset(o->bits, 0, sizeof(o->bits));
  kva_l2_req r = {.keys = o->k, .n = o->n, .layout = &o->l, .bufs = o->b, .bits = o->bits};
  ck_assert_int_eq(mk_call(h, KVA_L2_LOAD, &r), KVA_OK);
  return objs_bits(o);
}

void mk_unlock(mk *h, const objs *o) {
  uint32_t len = (uint32_t)(o->n * sizeof(kva_key));
  ck_assert_int_eq(kva_send(h->a, KVA_L2_UNLOCK, o->k, len, kva_port_actor(h->port), 0), KVA_OK);
}

void mk_unlock_free(mk *h, objs *o) {
  mk_unlock(h, o);
  objs_free(o);
}

kva_l2_stats mk_stats(mk *h) {
  kva_l2_stats s;
  memset(&s, 0xff, sizeof(s));
  kva_l2_req r = {.stats = &s};
  ck_assert_int_eq(mk_call(h, KVA_L2_STATS, &r), KVA_OK);
  return s;
}

/* Every scenario ends here: no lookup lock may be left behind. */
void mk_close(mk *h) {
  ck_assert_uint_eq(mk_stats(h).keys_locked, 0);
  mk_shutdown(h);
}

void mk_control(mk *h, const mock_control *c) {
  uint64_t tag = ++h->tag;
  ck_assert_int_eq(kva_send(h->a, MOCK_CONTROL, c, sizeof(*c), kva_port_actor(h->port), tag),
                   KVA_OK);
  kva_msg m;
  ck_assert_int_eq(kva_port_recv(h->port, &m, NULL, 0, h->wait_ms), KVA_OK);
  ck_assert_uint_eq(m.type, KVA_L2_DONE);
  ck_assert_uint_eq(m.tag, tag);
  ck_assert_uint_eq(m.len, 0);
}

/* Stores keys [first, first + n) of `bytes`, generation gen; its result. */
int mk_store_range(mk *h, uint64_t first, size_t n, uint64_t bytes, int gen) {
  objs *o = objs_make(first, n, bytes, gen);
  int rc = mk_store(h, o);
  objs_free(o);
  return rc;
}

/* Bit mask of the keys [first, first + n) present; locks nothing for long
 * (the lookup's locks are released at once). */
uint64_t mk_present(mk *h, uint64_t first, size_t n) {
  objs *o = objs_make(first, n, 1, -1);
  uint64_t m = mk_lookup(h, o);
  mk_unlock_free(h, o);
  return m;
}

/* Loads keys [first, first + n) of `bytes` and checks generation gen of
 * every key loaded; returns the bit mask. */
uint64_t mk_load_check(mk *h, uint64_t first, size_t n, uint64_t bytes, int gen) {
  objs *o = objs_make(first, n, bytes, -1);
  uint64_t m = mk_load(h, o);
  for (size_t i = 0; i < n; i++)
    if (m >> i & 1) ck_assert_msg(objs_hold(o, i, first + i, gen), "key %zu bytes", first + i);
  objs_free(o);
  return m;
}

/* Log capture: warnings counted (the log function runs under the
 * logger's lock, on whichever thread logs). */
static int warnings;

static void count_warning(int level, const char *msg, void *arg) {
  if (level == KVA_LOG_WARN) __atomic_add_fetch(&warnings, 1, __ATOMIC_RELAXED);
}

void mk_count_warnings(void) {
  __atomic_store_n(&warnings, 0, __ATOMIC_RELAXED);
  kva_log_set(count_warning, NULL, KVA_LOG_WARN);
}

int mk_warnings(void) {
  return __atomic_load_n(&warnings, __ATOMIC_RELAXED);
}

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l2_mock");
  suite_add_tcase(s, l2_mock_lmcache_tcase());
  suite_add_tcase(s, l2_mock_store_tcase());
  suite_add_tcase(s, l2_mock_faults_tcase());
  suite_add_tcase(s, l2_mock_time_tcase());
  suite_add_tcase(s, l2_mock_input_tcase());
  return s;
}
