/*
 * metrics_test.c — kvactd's Prometheus endpoint (server/metrics.h): a
 * scrape over HTTP (curl) answers what kva_storage_get_stats,
 * kva_l2_get_tier_stats, kva_l2_get_tier_keys and kva_l2_get_tier_nodes
 * say (no server families for mock tiers; a redis tier's one server, ok
 * then failed), in a well-formed page, with the clients and
 * the prefetch histogram of its source; bad addresses and taken ports are
 * refused with a message; only the given address is bound; other paths
 * are 404; connections that trickle a request are closed at the request
 * deadline, and one address cannot take them all.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "server/metrics.h"
#include "tests/server/scrape.h"
#include "tests/server/trickle.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"
#include "tests/support/redis_server.h"

#define MiB (1024u * 1024u)
#define OBJ (256u * 1024u) /* 16 of them fill L1 */
/* Two mock tiers; the second's name has a quote and a backslash, which
 * the page escapes as ODD_LABEL. */
#define TIERS "l2=[{\"type\":\"mock\"},{\"type\":\"mock\",\"name\":\"q\\\"t\\\\x\"}]"
#define ODD_TIER "q\"t\\x"
#define ODD_LABEL "q\\\"t\\\\x"

static char page[SCRAPE_MAX];

/* Limits no test of the page comes near. */
static const metrics_limits roomy = {.connections = 16, .per_ip = 0, .timeout_ms = 10000};

static kva_runtime *start_plain(void) {
  return fixture_storage(2, 4 * MiB, NULL);
}

static metrics *start_limited(const char *addr, const metrics_source *src,
                              const metrics_limits *lim) {
  char err[256] = "";
  metrics *m = metrics_start(addr, src, lim, err, sizeof(err));
  ck_assert_msg(m != NULL, "metrics_start(%s): %s", addr, err);
  ck_assert_int_gt(metrics_port(m), 0);
  return m;
}

static metrics *start_metrics(const char *addr, const metrics_source *src) {
  return start_limited(addr, src, &roomy);
}

/* ---- the storage's counters ------------------------------------------------ */

static void wait_watermark_round(kva_storage *s) {
  for (int i = 0; i < 500 && l2_storage_stats(s).evicted == 0; i++) l2_sleep_ms(10);
  ck_assert_uint_gt(l2_storage_stats(s).evicted, 0);
}

/* A key larger than L1: refused with KVA_OUT_OF_MEMORY. */
static void refuse_too_big(kva_storage *s) {
  kva_key k = fixture_key(900);
  kva_layout big = fixture_layout_bytes(8 * MiB);
  kva_buf b;
  int st = 0;
  ck_assert_int_eq(kva_reserve_write(s, &k, 1, &big, KVA_WRITE_NEW, &b, &st), 0);
  ck_assert_int_eq(st, KVA_OUT_OF_MEMORY);
}

/* Writes that cross the watermark, then overflow L1 (demand eviction),
 * a refused reservation, prefetches that hit L1, load from L2, and miss. */
static void make_traffic(kva_storage *s) {
  kva_layout l = fixture_layout_bytes(OBJ);
  l2_write_range(s, 0, 13, &l, 1); /* 13 of 16: past the 80% watermark */
  l2_flush(s);
  wait_watermark_round(s);
  l2_write_range(s, 100, 8, &l, 1); /* more than the round freed */
  l2_flush(s);
  refuse_too_big(s);
  ck_assert_uint_eq(l2_prefetch_range(s, 107, 1, &l), 1); /* L1 hit */
  l2_read_release_range(s, 107, 1, 1);
  kva_key k[2] = {fixture_key(0), fixture_key(1)};
  int st[2];
  kva_delete(s, k, 2, 0, st);                           /* from L1 (if still there) */
  ck_assert_uint_eq(l2_prefetch_range(s, 0, 2, &l), 2); /* so from L2 */
  l2_read_release_range(s, 0, 2, 1);
  ck_assert_uint_eq(l2_prefetch_range(s, 500, 1, &l), 0); /* nowhere */
}

typedef struct snapshot {
  kva_storage_stats st;
  kva_l2_tier_stats tier[2];
  kva_l2_tier_keys keys[2];
} snapshot;

static snapshot snap(kva_storage *s) {
  snapshot x;
  memset(&x, 0, sizeof(x));
  x.st = l2_storage_stats(s);
  ck_assert_int_eq(kva_l2_get_tier_stats(s, "mock0", &x.tier[0]), KVA_OK);
  ck_assert_int_eq(kva_l2_get_tier_stats(s, ODD_TIER, &x.tier[1]), KVA_OK);
  ck_assert_int_eq(kva_l2_get_tier_keys(s, "mock0", &x.keys[0]), KVA_OK);
  ck_assert_int_eq(kva_l2_get_tier_keys(s, ODD_TIER, &x.keys[1]), KVA_OK);
  return x;
}

static int same_tier(const kva_l2_tier_stats *a, const kva_l2_tier_stats *b) {
  return a->stored_keys == b->stored_keys && a->stored_bytes == b->stored_bytes &&
         a->loaded_keys == b->loaded_keys && a->loaded_bytes == b->loaded_bytes &&
         a->bypassed == b->bypassed && !memcmp(&a->adapter, &b->adapter, sizeof(a->adapter));
}

/* kva_storage_stats and kva_l2_tier_keys have no padding: memcmp
 * compares every counter. */
static int same(const snapshot *a, const snapshot *b) {
  return !memcmp(&a->st, &b->st, sizeof(a->st)) && same_tier(&a->tier[0], &b->tier[0]) &&
         same_tier(&a->tier[1], &b->tier[1]) && !memcmp(a->keys, b->keys, sizeof(a->keys));
}

/* A scrape between two equal snapshots (background eviction may still be
 * running at first): the page into `page`, the snapshot returned. */
static snapshot scrape_quiet(kva_storage *s, int port) {
  for (int i = 0; i < 100; i++) {
    snapshot before = snap(s);
    scrape_metrics(port, page, sizeof(page));
    snapshot after = snap(s);
    if (same(&before, &after)) return after;
    l2_sleep_ms(50);
  }
  ck_abort_msg("the storage's counters never stood still for a scrape");
  return snap(s);
}

static void expect_storage(const kva_storage_stats *st) {
  ck_assert_uint_eq(scrape_u64(page, "kvact_l1_capacity_bytes"), st->l1_capacity_bytes);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l1_used_bytes"), st->l1_used_bytes);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l1_objects"), st->l1_objects);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l1_write_locked_objects"), st->l1_write_locked);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l1_read_locked_objects"), st->l1_read_locked);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l1_hits_total"), st->hits);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l1_misses_total"), st->misses);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l1_evictions_total{reason=\"watermark\"}"),
                    st->evicted);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l1_evictions_total{reason=\"demand\"}"),
                    st->evicted_on_demand);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l1_out_of_memory_total"), st->out_of_memory);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l2_store_tasks_total"), st->l2_store_tasks);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l2_stored_keys_total"), st->l2_stored_keys);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l2_store_failures_total"), st->l2_store_failures);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l2_store_skipped_keys_total"), st->l2_store_skipped);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l2_prefetches_total"), st->l2_prefetches);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l2_loaded_keys_total"), st->l2_loaded_keys);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l2_load_failures_total"), st->l2_load_failures);
}

static uint64_t tier_value(const char *family, const char *label) {
  char sample[160];
  snprintf(sample, sizeof(sample), "kvact_l2_tier_%s{tier=\"%s\"}", family, label);
  return scrape_u64(page, sample);
}

static void expect_tier(const char *label, const kva_l2_tier_stats *t) {
  ck_assert_uint_eq(tier_value("stored_keys_total", label), t->stored_keys);
  ck_assert_uint_eq(tier_value("stored_bytes_total", label), t->stored_bytes);
  ck_assert_uint_eq(tier_value("loaded_keys_total", label), t->loaded_keys);
  ck_assert_uint_eq(tier_value("loaded_bytes_total", label), t->loaded_bytes);
  ck_assert_uint_eq(tier_value("bypassed", label), (uint64_t)t->bypassed);
  ck_assert_uint_eq(tier_value("objects", label), t->adapter.objects);
  ck_assert_uint_eq(tier_value("bytes", label), t->adapter.bytes);
  ck_assert_uint_eq(tier_value("keys_locked", label), t->adapter.keys_locked);
  ck_assert_uint_eq(tier_value("store_failures_total", label), t->adapter.store_failures);
  ck_assert_uint_eq(tier_value("load_failures_total", label), t->adapter.load_failures);
}

/* What became of the keys written toward the tier of label. */
static void expect_keys(const char *label, const kva_l2_tier_keys *k) {
  static const char *const outcome[] = {"stored", "coalesced",   "bypassed", "frozen",
                                        "gone",   "unavailable", "failed",   "dropped"};
  const uint64_t want[] = {k->stored, k->coalesced,   k->bypassed, k->frozen,
                           k->gone,   k->unavailable, k->failed,   k->dropped};
  char sample[200];
  for (int i = 0; i < 8; i++) {
    snprintf(sample, sizeof(sample), "kvact_l2_tier_keys_total{tier=\"%s\",outcome=\"%s\"}", label,
             outcome[i]);
    ck_assert_uint_eq(scrape_u64(page, sample), want[i]);
  }
  ck_assert_uint_eq(tier_value("keys_written_total", label), k->written);
  ck_assert_uint_eq(tier_value("absent_keys", label), k->absent_now);
  ck_assert_uint_eq(tier_value("absent_overflowed_total", label), k->absent_overflowed);
}

/* Mock tiers have no servers: no sample of a server's families. */
static void expect_no_nodes(void) {
  static const char *const families[] = {"kvact_l2_node_state",
                                         "kvact_l2_node_failed_seconds",
                                         "kvact_l2_node_slots",
                                         "kvact_l2_node_outages_total",
                                         "kvact_l2_node_failed_commands_total",
                                         "kvact_l2_tier_map_age_seconds"};
  for (int i = 0; i < 6; i++) ck_assert_uint_eq(scrape_count(page, families[i]), 0);
}

/* The traffic moved every counter the check below relies on. */
static void expect_traffic(const snapshot *x) {
  ck_assert_uint_gt(x->st.hits, 0);
  ck_assert_uint_gt(x->st.misses, 0);
  ck_assert_uint_gt(x->st.evicted, 0);
  ck_assert_uint_gt(x->st.evicted_on_demand, 0);
  ck_assert_uint_gt(x->st.out_of_memory, 0);
  ck_assert_uint_gt(x->st.l2_stored_keys, 0);
  ck_assert_uint_gt(x->st.l2_loaded_keys, 0);
  ck_assert_uint_gt(x->tier[0].stored_bytes, 0);
  ck_assert_uint_gt(x->tier[0].adapter.objects, 0);
  ck_assert_uint_gt(x->keys[0].stored, 0);
  ck_assert_uint_gt(x->keys[0].frozen, 0);
  const kva_l2_tier_keys *k = &x->keys[0]; /* flushed: every key written accounted for */
  ck_assert_uint_eq(k->written, k->stored + k->coalesced + k->bypassed + k->frozen + k->gone +
                                    k->unavailable + k->failed + k->dropped);
}

/* Keys written while frozen: never sent to the tiers. */
static void write_frozen(kva_storage *s) {
  kva_layout l = fixture_layout_bytes(OBJ);
  ck_assert_int_eq(kva_set_freeze(s, 1), KVA_OK);
  l2_write_range(s, 700, 2, &l, 1);
  l2_flush(s);
  ck_assert_int_eq(kva_set_freeze(s, 0), KVA_OK);
}

START_TEST(a_scrape_answers_the_storage_stats) {
  kva_runtime *rt = fixture_storage(2, 4 * MiB, TIERS, NULL);
  kva_storage *s = kva_storage_of(rt);
  make_traffic(s);
  write_frozen(s);
  metrics *m = start_metrics("127.0.0.1:0", &(metrics_source){.s = s});
  snapshot x = scrape_quiet(s, metrics_port(m));
  /* 18 storage samples, 26 per tier (10 counts, the load plan's 5, 8
   * outcomes of the keys written, written, absent, absent overflowed),
   * clients_connected */
  ck_assert_uint_eq(scrape_check_format(page), 18 + 2 * 26 + 1);
  expect_traffic(&x);
  expect_storage(&x.st);
  expect_tier("mock0", &x.tier[0]);
  expect_tier(ODD_LABEL, &x.tier[1]);
  expect_keys("mock0", &x.keys[0]);
  expect_keys(ODD_LABEL, &x.keys[1]);
  expect_no_nodes();
  ck_assert_uint_eq(scrape_u64(page, "kvact_clients_connected"), 0);
  ck_assert_uint_eq(scrape_count(page, "kvact_client_requests_total"), 0);
  ck_assert_uint_eq(scrape_count(page, "kvact_prefetch_latency_seconds_count"), 0);
  metrics_stop(m);
  l2_finish(rt);
}
END_TEST

/* ---- a tier of servers -------------------------------------------------------- */

/* The redis tier's one server as the page says it and as
 * kva_l2_get_tier_nodes does (asked after the scrape). */
static void expect_node(kva_storage *s, const char *node, int state) {
  kva_l2_node_stats n;
  size_t count = 0;
  ck_assert_int_eq(kva_l2_get_tier_nodes(s, "redis0", &n, 1, &count, NULL), KVA_OK);
  ck_assert_uint_eq(count, 1);
  ck_assert_str_eq(n.addr, node);
  ck_assert_int_eq(n.state, state);
  char sample[200];
  snprintf(sample, sizeof(sample), "kvact_l2_node_state{tier=\"redis0\",node=\"%s\"}", node);
  ck_assert_uint_eq(scrape_u64(page, sample), (uint64_t)state);
  snprintf(sample, sizeof(sample), "kvact_l2_node_slots{tier=\"redis0\",node=\"%s\"}", node);
  ck_assert_uint_eq(scrape_u64(page, sample), 0); /* no cluster */
  snprintf(sample, sizeof(sample), "kvact_l2_node_failed_seconds{tier=\"redis0\",node=\"%s\"}",
           node);
  ck_assert(scrape_f64(page, sample) == 0); /* kept for cluster nodes */
  snprintf(sample, sizeof(sample), "kvact_l2_node_outages_total{tier=\"redis0\",node=\"%s\"}",
           node);
  ck_assert_uint_le(scrape_u64(page, sample), n.outages);
  snprintf(sample, sizeof(sample),
           "kvact_l2_node_failed_commands_total{tier=\"redis0\",node=\"%s\"}", node);
  ck_assert_uint_le(scrape_u64(page, sample), n.failed_cmds);
  ck_assert_uint_eq(scrape_count(page, "kvact_l2_tier_map_age_seconds"), 0); /* no slot map */
}

/* Scrapes until the server's state on the page is state (5 s). */
static void scrape_until_state(int port, const char *node, int state) {
  char sample[200];
  snprintf(sample, sizeof(sample), "kvact_l2_node_state{tier=\"redis0\",node=\"%s\"}", node);
  for (int i = 0; i < 100; i++) {
    scrape_metrics(port, page, sizeof(page));
    if (scrape_has(page, sample) && scrape_u64(page, sample) == (uint64_t)state) return;
    l2_sleep_ms(50);
  }
  ck_abort_msg("%s never became %d", sample, state);
}

START_TEST(a_redis_tiers_server_appears_ok_then_failed) {
  rs_server srv;
  rs_start(&srv, NULL);
  char l2[256], node[64];
  snprintf(l2, sizeof(l2), "l2=[{\"type\":\"redis\",\"addrs\":[\"127.0.0.1:%d\"]}]", srv.port);
  snprintf(node, sizeof(node), "127.0.0.1:%d", srv.port);
  kva_runtime *rt = fixture_storage(2, 4 * MiB, l2, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ);
  l2_write_range(s, 0, 3, &l, 1);
  l2_flush(s);
  metrics *m = start_metrics("127.0.0.1:0", &(metrics_source){.s = s});
  scrape_metrics(metrics_port(m), page, sizeof(page));
  scrape_check_format(page);
  expect_node(s, node, KVA_L2_NODE_OK);
  ck_assert_uint_eq(tier_value("keys_written_total", "redis0"), 3);
  rs_kill(&srv);
  kva_key k = fixture_key(0);
  for (int i = 0; i < 3; i++) ck_assert_int_lt(kva_l2_contains(s, "redis0", &k), 0);
  scrape_until_state(metrics_port(m), node, KVA_L2_NODE_FAILED);
  scrape_check_format(page);
  expect_node(s, node, KVA_L2_NODE_FAILED);
  metrics_stop(m);
  kva_runtime_shutdown(rt);
  rs_stop(&srv);
}
END_TEST

/* ---- clients and the histogram ---------------------------------------------- */

static const metrics_client fake[] = {
    {.pid = 101, .uid = 1000, .requests = 7, .write_locks = 1, .read_locks = 2, .pins = 3},
    {.pid = 202, .uid = 0, .requests = 9, .write_locks = 0, .read_locks = 5, .pins = 0},
    {.pid = 303, .uid = 1, .requests = 1},
};

/* Counting says 2; by the time the list is asked for, a third connected:
 * the page says 3 and lists the 2 it had room for. */
static size_t growing_clients(void *arg, metrics_client *out, size_t cap) {
  if (cap == 0) return 2;
  for (size_t i = 0; i < cap && i < 3; i++) out[i] = fake[i];
  return 3;
}

static void expect_client(const metrics_client *c) {
  char sample[160];
  snprintf(sample, sizeof(sample), "kvact_client_requests_total{pid=\"%u\",uid=\"%u\"}", c->pid,
           c->uid);
  ck_assert_uint_eq(scrape_u64(page, sample), c->requests);
  const char *kinds[] = {"write", "read", "pin"};
  const uint64_t held[] = {c->write_locks, c->read_locks, c->pins};
  for (int k = 0; k < 3; k++) {
    snprintf(sample, sizeof(sample), "kvact_client_locks{pid=\"%u\",uid=\"%u\",kind=\"%s\"}",
             c->pid, c->uid, kinds[k]);
    ck_assert_uint_eq(scrape_u64(page, sample), held[k]);
  }
}

/* 0 and 50us (a bound is in its own bucket), 50us + 1ns, 3ms, 2 s. */
static void observe_five(latency_hist *h) {
  const uint64_t ns[] = {0, 50000, 50001, 3000000, 2000000000};
  for (int i = 0; i < 5; i++) latency_observe(h, ns[i]);
}

static void expect_five(void) {
  static const struct {
    const char *le;
    uint64_t n;
  } want[] = {{"5e-05", 2}, {"0.0001", 3}, {"0.00025", 3}, {"0.0005", 3},
              {"0.001", 3}, {"0.0025", 3}, {"0.005", 4},   {"0.01", 4},
              {"0.025", 4}, {"0.05", 4},   {"0.1", 4},     {"+Inf", 5}};
  char sample[128];
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    snprintf(sample, sizeof(sample), "kvact_prefetch_latency_seconds_bucket{le=\"%s\"}",
             want[i].le);
    ck_assert_uint_eq(scrape_u64(page, sample), want[i].n);
  }
  ck_assert_uint_eq(scrape_count(page, "kvact_prefetch_latency_seconds_bucket"), 12);
  ck_assert_uint_eq(scrape_u64(page, "kvact_prefetch_latency_seconds_count"), 5);
  ck_assert_double_eq_tol(scrape_f64(page, "kvact_prefetch_latency_seconds_sum"), 2.003100001,
                          1e-9);
}

START_TEST(the_sources_clients_and_histogram_appear) {
  kva_runtime *rt = start_plain();
  latency_hist h = {0};
  observe_five(&h);
  metrics_source src = {.s = kva_storage_of(rt), .clients = growing_clients, .prefetch = &h};
  metrics *m = start_metrics("127.0.0.1:0", &src);
  scrape_metrics(metrics_port(m), page, sizeof(page));
  scrape_check_format(page);
  ck_assert_uint_eq(scrape_u64(page, "kvact_clients_connected"), 3);
  ck_assert_uint_eq(scrape_count(page, "kvact_client_requests_total"), 2);
  ck_assert_uint_eq(scrape_count(page, "kvact_client_locks"), 6);
  expect_client(&fake[0]);
  expect_client(&fake[1]);
  expect_five();
  metrics_stop(m);
  kva_runtime_shutdown(rt);
}
END_TEST

#define OBSERVERS 4
#define OBSERVATIONS 20000

static void *observe_many(void *arg) {
  for (uint64_t i = 0; i < OBSERVATIONS; i++) latency_observe(arg, i * 7919 % 200000000);
  return NULL;
}

START_TEST(concurrent_observations_are_each_counted_once) {
  latency_hist h = {0};
  pthread_t t[OBSERVERS];
  for (int i = 0; i < OBSERVERS; i++)
    ck_assert_int_eq(pthread_create(&t[i], NULL, observe_many, &h), 0);
  for (int i = 0; i < OBSERVERS; i++) pthread_join(t[i], NULL);
  uint64_t in_buckets = 0, sum = 0;
  for (unsigned i = 0; i < LATENCY_BUCKETS; i++) in_buckets += h.bucket[i];
  for (uint64_t i = 0; i < OBSERVATIONS; i++) sum += i * 7919 % 200000000;
  ck_assert_uint_eq(h.count, OBSERVERS * OBSERVATIONS);
  ck_assert_uint_eq(in_buckets, OBSERVERS * OBSERVATIONS);
  ck_assert_uint_eq(h.sum_ns, OBSERVERS * sum);
  ck_assert_uint_gt(h.bucket[LATENCY_BUCKETS - 1], 0); /* some above 100ms */
}
END_TEST

/* ---- rendering into the caller's buffer ------------------------------------------ */

START_TEST(render_answers_the_length_it_needs) {
  kva_runtime *rt = start_plain();
  metrics_source src = {.s = kva_storage_of(rt)};
  size_t need = metrics_render(&src, NULL, 0);
  ck_assert_uint_gt(need, 100);
  static char buf[SCRAPE_MAX];
  memset(buf, 'x', sizeof(buf));
  ck_assert_uint_eq(metrics_render(&src, buf, 10), need);
  ck_assert_uint_eq(strlen(buf), 9); /* cut and terminated */
  ck_assert_uint_eq(metrics_render(&src, buf, need), need);
  ck_assert_uint_eq(strlen(buf), need - 1);
  ck_assert_uint_eq(metrics_render(&src, buf, need + 1), need);
  ck_assert_uint_eq(strlen(buf), need);
  scrape_check_format(buf);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- HTTP ------------------------------------------------------------------------ */

START_TEST(other_paths_and_methods_are_refused) {
  kva_runtime *rt = start_plain();
  metrics *m = start_metrics("127.0.0.1:0", &(metrics_source){.s = kva_storage_of(rt)});
  int port = metrics_port(m), status = 0;
  ck_assert_int_eq(scrape_url("GET", "127.0.0.1", port, "/other", page, sizeof(page), &status), 0);
  ck_assert_int_eq(status, 404);
  ck_assert_int_eq(scrape_url("GET", "127.0.0.1", port, "/", page, sizeof(page), &status), 0);
  ck_assert_int_eq(status, 404);
  ck_assert_int_eq(scrape_url("POST", "127.0.0.1", port, "/metrics", page, sizeof(page), &status),
                   0);
  ck_assert_int_eq(status, 405);
  scrape_metrics(port, page, sizeof(page)); /* still serving */
  metrics_stop(m);
  kva_runtime_shutdown(rt);
}
END_TEST

static const char *const bad_addrs[] = {
    "",
    "127.0.0.1",
    ":9464",
    "127.0.0.1:",
    "127.0.0.1:65536",
    "127.0.0.1:-1",
    "127.0.0.1:94x",
    "127.0.0.1: 80",
    "example.com:80",
    "[::1]:9464",
    "256.0.0.1:80",
    "10.255.255.254:0", /* not an address of this host */
};

START_TEST(bad_addresses_are_refused_with_a_message) {
  kva_runtime *rt = start_plain();
  metrics_source src = {.s = kva_storage_of(rt)};
  char err[256];
  for (size_t i = 0; i < sizeof(bad_addrs) / sizeof(bad_addrs[0]); i++) {
    err[0] = '\0';
    ck_assert_msg(metrics_start(bad_addrs[i], &src, &roomy, err, sizeof(err)) == NULL,
                  "%s accepted", bad_addrs[i]);
    ck_assert_msg(strstr(err, bad_addrs[i]) && strlen(err) > strlen(bad_addrs[i]) + 10,
                  "%s: message \"%s\"", bad_addrs[i], err);
  }
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(a_taken_port_is_refused_and_freed_at_stop) {
  kva_runtime *rt = start_plain();
  metrics_source src = {.s = kva_storage_of(rt)};
  metrics *a = start_metrics("127.0.0.1:0", &src);
  char addr[64], err[256] = "";
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", metrics_port(a));
  ck_assert_ptr_null(metrics_start(addr, &src, &roomy, err, sizeof(err)));
  ck_assert_msg(strstr(err, addr) && strstr(err, "in use"), "message \"%s\"", err);
  metrics_stop(a);
  metrics *b = start_metrics(addr, &src); /* the port was given back */
  scrape_metrics(metrics_port(b), page, sizeof(page));
  metrics_stop(b);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(only_the_given_address_is_bound) {
  kva_runtime *rt = start_plain();
  metrics_source src = {.s = kva_storage_of(rt)};
  metrics *m = start_metrics("127.0.0.2:0", &src);
  int port = metrics_port(m), status = 0;
  ck_assert_int_eq(scrape_url("GET", "127.0.0.2", port, "/metrics", page, sizeof(page), &status),
                   0);
  ck_assert_int_eq(status, 200);
  ck_assert_int_eq(scrape_url("GET", "127.0.0.1", port, "/metrics", page, sizeof(page), &status),
                   7); /* curl: could not connect */
  metrics_stop(m);
  m = start_metrics("localhost:0", &src);
  scrape_metrics(metrics_port(m), page, sizeof(page));
  metrics_stop(m);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- peers that hold connections ------------------------------------------------- */

/* Polls until the server has closed n of t's connections, 5 s at most. */
static void wait_closed(trickle *t, int n) {
  for (int i = 0; i < 500 && trickle_closed(t) < n; i++) l2_sleep_ms(10);
  ck_assert_msg(trickle_closed(t) >= n, "%d of %d trickling connections closed in 5 s",
                trickle_closed(t), n);
}

/* Three times as many tricklers as connections, each byte sooner than
 * the inactivity timeout (1 s): each batch is closed at the deadline of
 * 300 ms, the next accepted, then the scrape (curl gives up after 10 s). */
START_TEST(trickling_connections_are_closed_at_the_request_deadline) {
  kva_runtime *rt = start_plain();
  metrics_source src = {.s = kva_storage_of(rt)};
  const metrics_limits lim = {.connections = 4, .per_ip = 0, .timeout_ms = 300};
  metrics *m = start_limited("127.0.0.1:0", &src, &lim);
  trickle *t = trickle_start(NULL, metrics_port(m), 12, 50);
  l2_sleep_ms(100); /* accepted, and trickling ahead of the scrape */
  scrape_metrics(metrics_port(m), page, sizeof(page));
  wait_closed(t, 12);
  trickle_stop(t);
  scrape_metrics(metrics_port(m), page, sizeof(page)); /* a fresh scrape: at once */
  metrics_stop(m);
  kva_runtime_shutdown(rt);
}
END_TEST

/* One address (127.0.0.2) trickling on every connection it may have:
 * the rest are the scraper's, though the deadline (60 s) never comes. */
START_TEST(one_address_cannot_take_every_metrics_connection) {
  kva_runtime *rt = start_plain();
  metrics_source src = {.s = kva_storage_of(rt)};
  const metrics_limits lim = {.connections = 8, .per_ip = 4, .timeout_ms = 60000};
  metrics *m = start_limited("127.0.0.1:0", &src, &lim);
  trickle *t = trickle_start("127.0.0.2", metrics_port(m), 20, 50);
  wait_closed(t, 16); /* over its 4: closed at once */
  scrape_metrics(metrics_port(m), page, sizeof(page));
  ck_assert_uint_gt(scrape_check_format(page), 10);
  ck_assert_int_eq(trickle_closed(t), 16); /* its 4 still open */
  trickle_stop(t);
  metrics_stop(m);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(limits_of_zero_are_refused) {
  kva_runtime *rt = start_plain();
  metrics_source src = {.s = kva_storage_of(rt)};
  char err[256] = "";
  const metrics_limits none = {.connections = 0, .timeout_ms = 1000};
  ck_assert_ptr_null(metrics_start("127.0.0.1:0", &src, &none, err, sizeof(err)));
  ck_assert_ptr_null(metrics_start("127.0.0.1:0", &src, NULL, err, sizeof(err)));
  ck_assert_msg(strstr(err, "limit"), "message \"%s\"", err);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("metrics");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, a_scrape_answers_the_storage_stats);
  tcase_add_test(tc, a_redis_tiers_server_appears_ok_then_failed);
  tcase_add_test(tc, the_sources_clients_and_histogram_appear);
  tcase_add_test(tc, concurrent_observations_are_each_counted_once);
  tcase_add_test(tc, render_answers_the_length_it_needs);
  tcase_add_test(tc, other_paths_and_methods_are_refused);
  tcase_add_test(tc, bad_addresses_are_refused_with_a_message);
  tcase_add_test(tc, a_taken_port_is_refused_and_freed_at_stop);
  tcase_add_test(tc, only_the_given_address_is_bound);
  tcase_add_test(tc, trickling_connections_are_closed_at_the_request_deadline);
  tcase_add_test(tc, one_address_cannot_take_every_metrics_connection);
  tcase_add_test(tc, limits_of_zero_are_refused);
  suite_add_tcase(su, tc);
  return su;
}
