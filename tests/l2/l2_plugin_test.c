/*
 * l2_plugin_test.c — a user's own L2 adapter ("tiny",
 * tests/support/plugin_adapter.c, written only against kvact.h),
 * registered with kva_l2_register and driven through the whole stack (the
 * README's "Writing your own L2 adapter" points here), and the adapter
 * kit it is built on: the calls of kvact.h the built-in adapters are
 * built on too. Nothing here includes kvact's internal headers.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/plugin_adapter.h"

#define MiB (1024u * 1024u)

static void register_tiny(void) {
  int rc = plugin_tiny_register();
  ck_assert(rc == KVA_OK || rc == KVA_EINVAL); /* EINVAL: registered by an earlier test */
}

/* ---- tests -------------------------------------------------------------- */

START_TEST(register_refuses_bad_arguments) {
  register_tiny();
  ck_assert_int_eq(kva_l2_register(NULL, plugin_tiny_factory), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_register("", plugin_tiny_factory), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_register("x", NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_register("mock", plugin_tiny_factory), KVA_EINVAL); /* taken */
  ck_assert_int_eq(kva_l2_register("tiny", plugin_tiny_factory), KVA_EINVAL);
  ck_assert_int_eq(kva_l2_register("a-name-that-is-longer-than-31-bytes", plugin_tiny_factory),
                   KVA_EINVAL);
}
END_TEST

/* Writes n keys with bytes derived from their index, finishes them. */
static void write_keys(kva_storage *s, kva_key *k, size_t n, const kva_layout *l) {
  kva_buf b[8];
  int st[8];
  ck_assert_int_eq(kva_reserve_write(s, k, n, l, KVA_WRITE_NEW, b, st), (int)n);
  for (size_t i = 0; i < n; i++) memset(b[i].ptr, (int)(0x40 + i), b[i].len);
  ck_assert_int_eq(kva_finish_write(s, k, n, st), (int)n);
}

/* The offset of b's first byte that is not v, or b->len: one assertion
 * per object, not one per byte (Check's per-assertion cost). */
static size_t first_not(const kva_buf *b, uint8_t v) {
  const uint8_t *p = b->ptr;
  size_t o = 0;
  while (o < b->len && p[o] == v) o++;
  return o;
}

static void check_tier(kva_runtime *rt, const char *tier, int workers) {
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[4];
  for (int i = 0; i < 4; i++) k[i] = fixture_key(100 + (uint64_t)i);
  write_keys(s, k, 4, &l);
  ck_assert_int_eq(kva_flush(s, 10000), KVA_OK);
  ck_assert_int_eq(kva_l2_contains(s, tier, &k[3]), 1);
  ck_assert_int_eq(kva_clear(s, 0), 4);
  kva_tier_hits th;
  ck_assert_int_eq(kva_lookup(s, k, 4, 0, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 4);
  ck_assert_uint_eq(th.ntiers, 2);
  ck_assert_str_eq(th.tier[1].name, tier);
  ck_assert_uint_eq(th.tier[1].hits, 4);
  kva_prefetch *h;
  size_t hits = 0;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 4, &l, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 10000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 4);
  kva_buf b[4];
  ck_assert_int_eq(kva_read_prefetched(s, k, 4, b), KVA_OK);
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(first_not(&b[i], (uint8_t)(0x40 + i)), b[i].len);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 4, 0), 4);
  fixture_memcheck_clean(s);
  (void)workers;
}

/* _i = 1: idle workers sleep at once, so that the engine's calls find the
 * storage actors idle and serve themselves (kvact.h): the adapter's turns
 * still run on the runtime's threads, with SIGPIPE blocked. */
START_TEST(a_registered_adapter_serves_the_whole_stack) {
  register_tiny();
  unsigned before = plugin_tiny_unguarded_turns();
  kva_runtime *rt = fixture_storage(2, 16 * MiB, "l2=[{\"type\":\"tiny\",\"name\":\"fast\"}]",
                                    _i ? "runtime.spin_us=0" : NULL, NULL);
  check_tier(rt, "fast", 2);
  kva_runtime_shutdown(rt);
  ck_assert_uint_eq(plugin_tiny_unguarded_turns(), before);
}
END_TEST

START_TEST(a_registered_adapter_in_deterministic_mode) {
  register_tiny();
  kva_runtime *rt = fixture_storage(0, 16 * MiB, "l2=[{\"type\":\"tiny\"}]", NULL);
  check_tier(rt, "tiny0", 0);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(unknown_type_and_failing_factory_stop_the_start) {
  register_tiny();
  kva_config *c = kva_config_default();
  ck_assert_int_eq(kva_config_set(c, "l2", "[{\"type\":\"nosuch\"}]"), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "l1.size_bytes", "16777216"), KVA_OK);
  kva_runtime *rt = NULL;
  ck_assert_int_eq(kva_runtime_start(c, &rt), KVA_ECONFIG);
  ck_assert_ptr_null(rt);
  ck_assert_int_eq(kva_config_set(c, "l2", "[{\"type\":\"tiny\",\"refuse\":1}]"), KVA_OK);
  ck_assert_int_eq(kva_runtime_start(c, &rt), KVA_ECONFIG);
  ck_assert_ptr_null(rt);
  kva_config_free(c);
}
END_TEST

/* ---- the adapter kit ------------------------------------------------------ */

/* The kva_log sink of the tests below: what it got, one message a line. */
static char logged[4096];

static void log_to_buffer(int level, const char *msg, void *arg) {
  size_t n = strlen(logged);
  snprintf(logged + n, sizeof(logged) - n, "%d %s\n", level, msg);
  (void)arg;
}

/* Sends r to a from a port and returns the result of its reply. */
static int call(kva_runtime *rt, kva_actor *a, uint32_t type, kva_l2_req *r) {
  kva_port *p = kva_port_open(rt, "l2_plugin_test");
  kva_l2_req *sent = r, *back = NULL;
  ck_assert_int_eq(kva_send(a, type, &sent, sizeof(sent), kva_port_actor(p), 7), KVA_OK);
  kva_msg m = fixture_recv(p, &back, sizeof(back), 10000);
  kva_port_close(p);
  ck_assert_uint_eq(m.type, KVA_L2_DONE);
  ck_assert_uint_eq(m.tag, 7);
  ck_assert_ptr_eq(back, r);
  return r->result;
}

/* kva_l2_req_problem refuses what the built-ins refuse, and kva_log
 * reaches the sink of kva_log_set, filtered by its level. */
START_TEST(a_malformed_request_is_refused_and_logged_through_the_sink) {
  char err[64] = "";
  kva_runtime *rt = fixture_runtime(1, NULL);
  kva_actor *a = plugin_tiny_factory(rt, NULL, err, sizeof(err));
  ck_assert_msg(a != NULL, "spawn: %s", err);
  kva_key k = fixture_key(1), bad = k;
  bad.hash_len = 0;
  uint8_t bits[1] = {0};
  logged[0] = '\0';
  kva_log_set(log_to_buffer, NULL, KVA_LOG_WARN);
  kva_l2_req r = {.keys = &k, .n = 0, .bits = bits};
  ck_assert_int_eq(call(rt, a, KVA_L2_LOOKUP_AND_LOCK, &r), KVA_EINVAL);
  r = (kva_l2_req){.keys = &bad, .n = 1, .bits = bits};
  ck_assert_int_eq(call(rt, a, KVA_L2_LOOKUP_AND_LOCK, &r), KVA_EINVAL);
  r = (kva_l2_req){.keys = &k, .n = 1, .bits = bits};
  ck_assert_int_eq(call(rt, a, KVA_L2_LOOKUP_AND_LOCK, &r), KVA_OK);
  kva_log(KVA_LOG_INFO, "not shown: %d", 1);
  kva_log(KVA_LOG_ERROR, "shown: %d", 2);
  kva_log_set(NULL, NULL, KVA_LOG_WARN);
  ck_assert_str_eq(logged, "1 tiny: request 257 refused: no keys\n"
                           "1 tiny: request 257 refused: an invalid key\n"
                           "0 shown: 2\n");
  kva_runtime_shutdown(rt);
}
END_TEST

/* Answers each message with kva_thread_sigpipe_blocked on its thread. */
static void probe_receive(kva_actor *self, void *state, const kva_msg *m) {
  int blocked = kva_thread_sigpipe_blocked();
  kva_send(m->from, KVA_MSG_USER, &blocked, sizeof(blocked), self, m->tag);
  (void)state;
}

/* What an actor's thread says, in either mode. */
static int probe(kva_runtime *rt) {
  static const kva_behavior b = {.name = "probe", .receive = probe_receive};
  kva_actor *a = kva_spawn(rt, &b, NULL, NULL);
  kva_port *p = kva_port_open(rt, "l2_plugin_test");
  int blocked = -1;
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq(kva_send(a, KVA_MSG_USER, NULL, 0, kva_port_actor(p), 1), KVA_OK);
  fixture_recv(p, &blocked, sizeof(blocked), 10000);
  kva_port_close(p);
  return blocked;
}

/* Workers block SIGPIPE; deterministic mode runs actors on the caller's
 * thread, which does not; kva_runtime_deterministic tells them apart. */
START_TEST(the_runtime_mode_and_the_threads_sigpipe_as_adapters_see_them) {
  kva_runtime *rt = fixture_runtime(1, NULL);
  ck_assert_int_eq(kva_runtime_deterministic(rt), 0);
  ck_assert_int_eq(probe(rt), 1);
  kva_runtime_shutdown(rt);
  rt = fixture_runtime(0, NULL);
  ck_assert_int_eq(kva_runtime_deterministic(rt), 1);
  ck_assert_int_eq(probe(rt), 0);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(kva_runtime_deterministic(NULL), 0);
  ck_assert_int_eq(kva_thread_sigpipe_blocked(), 0);
}
END_TEST

/* The request check itself, without an actor. */
START_TEST(the_request_check_names_the_problem) {
  kva_key k = fixture_key(1);
  kva_layout l = fixture_layout_bytes(64), none = {0};
  uint8_t bits[1], byte = 0;
  kva_buf b = {&byte, 1}, empty = {NULL, 0};
  kva_l2_stats st;
  const kva_l2_req good = {.keys = &k, .n = 1, .layout = &l, .bufs = &b, .bits = bits};
  kva_l2_req r = good;
  ck_assert_ptr_null(kva_l2_req_problem(KVA_L2_STORE, &r));
  ck_assert_ptr_null(kva_l2_req_problem(KVA_L2_LOAD, &r));
  ck_assert_str_eq(kva_l2_req_problem(KVA_L2_STORE, NULL), "not a request pointer");
  ck_assert_str_eq(kva_l2_req_problem(KVA_L2_UNLOCK, &r), "not a request type");
  ck_assert_str_eq(kva_l2_req_problem(KVA_L2_STATS, &r), "no stats to fill");
  r.stats = &st;
  ck_assert_ptr_null(kva_l2_req_problem(KVA_L2_STATS, &r));
  r = good, r.n = (1u << 24) + 1;
  ck_assert_str_eq(kva_l2_req_problem(KVA_L2_LOAD, &r), "too many keys");
  r = good, r.bits = NULL;
  ck_assert_ptr_null(kva_l2_req_problem(KVA_L2_STORE, &r));
  ck_assert_str_eq(kva_l2_req_problem(KVA_L2_LOAD, &r), "no bits");
  r = good, r.layout = &none;
  ck_assert_str_eq(kva_l2_req_problem(KVA_L2_STORE, &r), "no valid layout");
  ck_assert_ptr_null(kva_l2_req_problem(KVA_L2_LOOKUP_AND_LOCK, &r));
  r = good, r.bufs = &empty;
  ck_assert_str_eq(kva_l2_req_problem(KVA_L2_STORE, &r), "an empty buffer");
  ck_assert_ptr_null(kva_l2_req_problem(KVA_L2_LOAD, &r));
  kva_l2_req *p = &r;
  kva_msg m = {.type = KVA_L2_LOAD, .len = sizeof(p), .data = &p};
  ck_assert_ptr_eq(kva_l2_req_of(&m), &r);
  m.len = 4;
  ck_assert_ptr_null(kva_l2_req_of(&m));
}
END_TEST

/* Equality, hash and the printed form read the significant bytes only. */
START_TEST(key_helpers_read_the_significant_bytes) {
  kva_key a = fixture_key(5), b = a;
  memset(b.hash + b.hash_len, 0xee, sizeof(b.hash) - b.hash_len);
  b.model[strlen(b.model) + 1] = 'x'; /* past the model's NUL */
  ck_assert_int_eq(kva_key_equal(&a, &b), 1);
  ck_assert_uint_eq(kva_key_hash(&a), kva_key_hash(&b));
  b.group++;
  ck_assert_int_eq(kva_key_equal(&a, &b), 0);
  ck_assert_int_eq(kva_key_valid(&a), 1);
  b = a, snprintf(b.model, sizeof(b.model), "a@b");
  ck_assert_int_eq(kva_key_valid(&b), 0);
  b = a, b.hash_len = 33;
  ck_assert_int_eq(kva_key_valid(&b), 0);
  kva_key f = {.model = "m", .kv_rank = 10, .group = 3, .hash_len = 2, .hash = {0x0a, 0xff}};
  char text[KVA_KEY_TEXT_MAX];
  kva_key_format(&f, text, sizeof(text));
  ck_assert_str_eq(text, "m@a@3@0aff");
  memset(&f, 0xff, sizeof(f)); /* the longest key there is */
  memset(f.model, 'x', sizeof(f.model) - 1);
  f.model[sizeof(f.model) - 1] = '\0';
  f.hash_len = 32;
  kva_key_format(&f, text, sizeof(text));
  ck_assert_uint_eq(strlen(text), 63 + 1 + 8 + 1 + 10 + 1 + 64);
  kva_layout l = fixture_layout_basic(), same = l, other = l;
  same.tensor[0].shape[5] = 99; /* past ndim: not significant */
  other.tensor[0].shape[0]++;
  ck_assert_uint_eq(kva_layout_fingerprint(&l), kva_layout_fingerprint(&same));
  ck_assert_uint_ne(kva_layout_fingerprint(&l), kva_layout_fingerprint(&other));
}
END_TEST

/* A built-in type's default node is what an l2 entry of that type alone
 * becomes in a config; plug-in types have none. */
START_TEST(default_nodes_hold_the_schema_defaults) {
  const kva_config_node *m = kva_config_node_default("mock"), *r = kva_config_node_default("redis");
  const char *s;
  uint64_t u;
  int64_t want;
  int b;
  ck_assert_ptr_nonnull(m);
  ck_assert_ptr_eq(kva_config_node_default("mock"), m); /* made once */
  kva_config *c = kva_config_default();
  ck_assert_int_eq(kva_config_set(c, "l2", "[{\"type\":\"mock\"}]"), KVA_OK);
  ck_assert_int_eq(kva_config_get_i64(c, "l2[0].capacity_bytes", &want), KVA_OK);
  kva_config_free(c);
  ck_assert_int_eq(kva_config_node_u64(m, "capacity_bytes", &u), KVA_OK);
  ck_assert_uint_eq(u, (uint64_t)want);
  ck_assert_int_eq(kva_config_node_str(m, "name", &s), KVA_OK);
  ck_assert_str_eq(s, "mock");
  ck_assert_int_eq(kva_config_node_str_at(r, "addrs", 0, &s), KVA_OK);
  ck_assert_str_eq(s, "127.0.0.1:6379");
  ck_assert_int_eq(kva_config_node_str_at(r, "addrs", 1, &s), KVA_EINVAL);
  ck_assert_int_eq(kva_config_node_str_at(r, "namespace", 0, &s), KVA_EINVAL);
  ck_assert_int_eq(kva_config_node_bool(r, "cluster", &b), KVA_OK);
  ck_assert_int_eq(b, 0);
  ck_assert_int_eq(kva_config_node_bool(r, "pipeline", &b), KVA_EINVAL);
  ck_assert_int_eq(kva_config_node_bool(kva_config_node_default("disk"), "o_direct", &b), KVA_OK);
  ck_assert_int_eq(b, 1);
  ck_assert_ptr_null(kva_config_node_default("tiny"));
  ck_assert_ptr_null(kva_config_node_default("*"));
  ck_assert_ptr_null(kva_config_node_default(NULL));
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_plugin");
  TCase *tc = tcase_create("plugin");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, register_refuses_bad_arguments);
  tcase_add_loop_test(tc, a_registered_adapter_serves_the_whole_stack, 0, 2);
  tcase_add_test(tc, a_registered_adapter_in_deterministic_mode);
  tcase_add_test(tc, unknown_type_and_failing_factory_stop_the_start);
  tcase_add_test(tc, a_malformed_request_is_refused_and_logged_through_the_sink);
  tcase_add_test(tc, the_runtime_mode_and_the_threads_sigpipe_as_adapters_see_them);
  tcase_add_test(tc, the_request_check_names_the_problem);
  tcase_add_test(tc, key_helpers_read_the_significant_bytes);
  tcase_add_test(tc, default_nodes_hold_the_schema_defaults);
  suite_add_tcase(su, tc);
  return su;
}
