/*
 * l2_random_test.c — seeded randomized runs of the whole store (an L1 of
 * 16 objects that evicts, two small mock tiers that evict FIFO, injected
 * store/load failures, tiers going down, freeze and bypass) against a
 * model of what was written: every byte served is a version written for
 * its key, and the latest one whenever nothing could have lost it.
 *
 * The driver is one thread and a PRNG seeded per run. Each step is one of:
 * write a run of keys (reserve ALL, fill with the next version, finish),
 * delete (rarely forced), submit a prefetch of a run of keys (at most two
 * outstanding), complete the oldest prefetch (wait, read the hit prefix,
 * check every byte, finish_read), kva_clear (rarely forced), kva_flush,
 * touch, lookup (sometimes pinning, then unpinning), change a fault
 * (failure rates with a seed, latency, a tier down or up, freeze, manual
 * bypass), or let virtual time pass (deterministic mode: eviction ticks,
 * probes of bypassed tiers, mock latency). Forced deletes and clears take
 * any lock: the store controller's, a prefetch's in flight, and the
 * driver's own of outstanding prefetches over the same keys, which must
 * still read their own bytes (l2_forced_delete_test.c and
 * l1_forced_rewrite_test.c pin down what they first broke). The tier runs
 * put a disk and a redis tier (a server of the test's own) in place of the
 * mocks, threaded, with freeze and bypass as their only faults.
 * Deterministic runs use runtime.workers=0 with runtime.seed = the run's
 * seed, so a failing seed replays exactly; the eviction policy and
 * prefetch_writeback vary with the seed.
 *
 * What a correct read is. Versions are numbered per key from 1 and the
 * bytes of version v of key id are (id, v) followed by a hash stream of
 * (id, v) (fill_version), so any object names its key and version. A
 * version "exists" once its kva_finish_write succeeded. For every key in
 * a prefetch's hit prefix:
 *
 *  (A) always: the bytes are exactly a version that exists for that key —
 *      never another key's bytes, never a mix of two versions, never
 *      garbage. An older version is allowed in general: L2 may hold a
 *      stale copy (the newest write's store failed, was skipped while
 *      frozen, bypassed or down, or was dropped at drain; a delete or an
 *      eviction removes only the L1 copy), and a prefetch loads whatever
 *      L2 holds once L1 lost its copy.
 *  (B) the latest version when L1 cannot have lost the object of the
 *      key's latest write: since that write finished, no delete of the key
 *      succeeded, no kva_clear ran, and the L1 eviction counters (evicted
 *      + evicted_on_demand, read before the finish and after the read)
 *      did not move. Those are the only ways an ordinary, finished object
 *      leaves L1, and while it is there nothing can replace it: a prefetch
 *      reserves with WRITE_NEW, so a key present in L1 is either served
 *      from L1 or not loaded at all. (B) is checked only when it applies,
 *      which is counted; a run that never applies it fails.
 *
 * At the end: every prefetch completed, faults off, a flush, no lock left
 * in any tier (l2_assert_unlocked), kva_memcheck clean, and shutdown
 * without a lock warning. Steps: KVA_RANDOM_STEPS (default 3000; threaded
 * runs take a third; all ten runs take seconds even under TSan, so the
 * sanitizer configs run as many); seeds: KVA_RANDOM_SEED runs one seed,
 * else five.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "l1/l1_manager.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"
#include "tests/support/redis_server.h"

#define NIDS 24u                /* keys 0..23 */
#define OBJ_BYTES (16u * 1024u) /* one 16 KiB object per key */
#define L1_OBJS 16u             /* L1 holds 16 objects */
#define MAXV (1u << 14)         /* versions per key the model can hold */
#define MAX_RUN 6u              /* keys per prefetch */
#define MAX_OUT 2u              /* prefetches outstanding at once */
#define WAIT_MS 60000           /* virtual in deterministic mode */

/* ---- the model ---------------------------------------------------------- */

typedef struct key_model {
  uint32_t latest; /* newest version that exists, 0 = none */
  bool removed;    /* a delete succeeded or a clear ran since then */
  uint64_t ev;     /* eviction counter read before the latest finish */
  uint8_t *exists; /* bit v: version v exists */
} key_model;

typedef struct pending {
  kva_prefetch *h;
  uint64_t first;
  size_t n;
  uint32_t extra;
} pending;

typedef struct run {
  uint64_t seed, rng;
  int workers;
  int redis_port; /* > 0: tiers disk0 and redis1 instead of two mocks */
  uint32_t step;
  kva_runtime *rt;
  kva_storage *s;
  kva_layout l;
  key_model k[NIDS];
  pending out[MAX_OUT];
  uint32_t nout;
  bool down[2], bypass[2], frozen;
  /* what the run exercised */
  uint64_t reads, latest_checked, stale_reads, writes_refused;
} run;

/* KVA_RANDOM_TRACE=1: every step and its outcome on stderr, to follow a
 * failing seed (deterministic runs replay exactly). */
static bool tracing;
#define TRACE(r, ...)                                                                              \
  do {                                                                                             \
    if (tracing) {                                                                                 \
      fprintf(stderr, "[%lu:%u] ", (unsigned long)(r)->seed, (r)->step);                           \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

/* splitmix64's finalizer: the PRNG's output and the bytes' hash stream. */
static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t rnd(run *r) {
  return mix(r->rng += 0x9e3779b97f4a7c15ull);
}

static uint32_t below(run *r, uint32_t n) {
  return (uint32_t)(rnd(r) % n);
}

static bool version_exists(const key_model *m, uint32_t v) {
  return v > 0 && v <= m->latest && (m->exists[v >> 3] >> (v & 7) & 1);
}

static uint64_t evictions(run *r) {
  kva_storage_stats st = l2_storage_stats(r->s);
  return st.evicted + st.evicted_on_demand;
}

static void keys_of(kva_key *k, uint64_t first, size_t n) {
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(first + i);
}

/* A run of keys [first, first + n), n >= 1, inside [0, NIDS), into k[]
 * (room for max). */
static size_t pick_run(run *r, kva_key *k, uint64_t *first, uint32_t max) {
  *first = below(r, NIDS);
  size_t n = 1 + below(r, max);
  if (n > NIDS - *first) n = NIDS - *first;
  keys_of(k, *first, n);
  return n;
}

/* ---- the checks --------------------------------------------------------- */

/* The bytes of version v of key id: word 0 is (id, v) itself, every other
 * 64-bit word a hash of (id, v, index). Unlike l2_pattern, no two versions
 * of a key share their bytes however many there are. */
static uint64_t word_of(uint64_t id, uint32_t v, size_t i) {
  if (i == 0) return id << 32 | v;
  return mix(id * 0x9e3779b97f4a7c15ull ^ (uint64_t)v * 0xc2b2ae3d27d4eb4full ^ i);
}

static void fill_version(void *p, size_t len, uint64_t id, uint32_t v) {
  for (size_t i = 0; i < len / 8; i++) {
    uint64_t w = word_of(id, v, i);
    memcpy((uint8_t *)p + 8 * i, &w, 8);
  }
}

/* Which existing version of key id these bytes are, or 0 (another key's
 * bytes, a version never finished, a mix, garbage). */
static uint32_t version_of(const key_model *m, uint64_t id, const uint8_t *b, size_t len) {
  uint64_t w;
  memcpy(&w, b, 8);
  uint32_t v = (uint32_t)w;
  if (w >> 32 != id || !version_exists(m, v)) return 0;
  for (size_t i = 1; i < len / 8; i++) {
    memcpy(&w, b + 8 * i, 8);
    if (w != word_of(id, v, i)) return 0;
  }
  return v;
}

/* Rules (A) and (B) of the header for one key of a hit prefix. */
static void check_read(run *r, uint64_t id, const kva_buf *b, uint64_t ev_now) {
  key_model *m = &r->k[id];
  ck_assert_msg(b->ptr && b->len == OBJ_BYTES, "seed %lu step %u key %lu: buffer %p/%zu",
                (unsigned long)r->seed, r->step, (unsigned long)id, b->ptr, b->len);
  uint32_t v = version_of(m, id, b->ptr, b->len);
  ck_assert_msg(v != 0, "seed %lu step %u key %lu: bytes are no version written (latest %u)",
                (unsigned long)r->seed, r->step, (unsigned long)id, m->latest);
  r->reads++;
  if (v != m->latest) r->stale_reads++;
  if (m->removed || ev_now != m->ev) return;
  r->latest_checked++;
  ck_assert_msg(v == m->latest,
                "seed %lu step %u key %lu: version %u served, but L1 cannot have lost the "
                "latest version %u",
                (unsigned long)r->seed, r->step, (unsigned long)id, v, m->latest);
}

/* ---- the steps ---------------------------------------------------------- */

static void do_write(run *r) {
  uint64_t first;
  kva_key k[4];
  size_t n = pick_run(r, k, &first, 4);
  kva_buf b[4];
  int st[4];
  int rc = kva_reserve_write(r->s, k, n, &r->l, KVA_WRITE_ALL, b, st);
  ck_assert_int_ge(rc, 0);
  TRACE(r, "write [%lu, +%zu): %d ok (st %d %d %d %d)", (unsigned long)first, n, rc, st[0],
        n > 1 ? st[1] : 0, n > 2 ? st[2] : 0, n > 3 ? st[3] : 0);
  if (rc == 0) {
    r->writes_refused++;
    return;
  }
  kva_key done[4];
  size_t nd = 0;
  uint32_t ver[4];
  for (size_t i = 0; i < n; i++) {
    if (st[i] != KVA_OK) continue;
    key_model *m = &r->k[first + i];
    ck_assert_uint_lt(m->latest + 1, MAXV);
    ver[nd] = m->latest + 1;
    fill_version(b[i].ptr, b[i].len, first + i, ver[nd]);
    done[nd++] = k[i];
  }
  ck_assert_int_eq((size_t)rc, nd);
  uint64_t ev = evictions(r); /* before the finish: the objects are write-locked */
  int fst[4];
  ck_assert_int_eq(kva_finish_write(r->s, done, nd, fst), (int)nd);
  for (size_t i = 0, j = 0; i < n; i++) {
    if (st[i] != KVA_OK) continue;
    key_model *m = &r->k[first + i];
    m->latest = ver[j++];
    m->exists[m->latest >> 3] |= (uint8_t)(1u << (m->latest & 7));
    m->removed = false;
    m->ev = ev;
  }
}

static void do_delete(run *r) {
  uint64_t first;
  kva_key k[3];
  size_t n = pick_run(r, k, &first, 3);
  int force = below(r, 4) == 0;
  int st[3];
  int rc = kva_delete(r->s, k, n, force, st);
  ck_assert_int_ge(rc, 0);
  TRACE(r, "delete%s [%lu, +%zu): %d ok", force ? " (force)" : "", (unsigned long)first, n, rc);
  for (size_t i = 0; i < n; i++)
    if (st[i] == KVA_OK) r->k[first + i].removed = true;
}

static void do_clear(run *r) {
  int force = below(r, 2) == 0;
  int rc = kva_clear(r->s, force);
  ck_assert_int_ge(rc, 0);
  TRACE(r, "clear%s: %d removed", force ? " (force)" : "", rc);
  for (uint32_t i = 0; i < NIDS; i++) r->k[i].removed = true;
}

/* Waits for the oldest prefetch, reads and checks its hit prefix. */
static void complete_oldest(run *r) {
  pending p = r->out[0];
  memmove(&r->out[0], &r->out[1], (--r->nout) * sizeof(r->out[0]));
  size_t hits = 0;
  int rc = kva_wait_prefetch(r->s, p.h, WAIT_MS, &hits);
  ck_assert_msg(rc == KVA_OK, "seed %lu step %u: wait_prefetch %s", (unsigned long)r->seed, r->step,
                kva_strerror(rc));
  ck_assert_uint_le(hits, p.n);
  TRACE(r, "complete [%lu, +%zu) extra %u: %zu hits", (unsigned long)p.first, p.n, p.extra, hits);
  if (hits == 0) return;
  kva_key k[MAX_RUN];
  kva_buf b[MAX_RUN];
  keys_of(k, p.first, hits);
  rc = kva_read_prefetched(r->s, k, hits, b);
  ck_assert_msg(rc == KVA_OK, "seed %lu step %u: read_prefetched %s", (unsigned long)r->seed,
                r->step, kva_strerror(rc));
  uint64_t ev_now = evictions(r);
  for (size_t i = 0; i < hits; i++) check_read(r, p.first + i, &b[i], ev_now);
  ck_assert_int_eq(kva_finish_read_prefetched(r->s, k, hits, p.extra), (int)hits);
}

static void do_submit(run *r) {
  if (r->nout == MAX_OUT) complete_oldest(r);
  pending *p = &r->out[r->nout++];
  kva_key k[MAX_RUN];
  p->n = pick_run(r, k, &p->first, MAX_RUN);
  p->extra = below(r, 4) == 0 ? 1 : 0;
  ck_assert_int_eq(kva_submit_prefetch(r->s, k, p->n, &r->l, p->extra, &p->h), KVA_OK);
  TRACE(r, "submit [%lu, +%zu) extra %u", (unsigned long)p->first, p->n, p->extra);
}

static void do_lookup(run *r) {
  uint64_t first;
  kva_key k[MAX_RUN];
  size_t n = pick_run(r, k, &first, MAX_RUN);
  int pin = below(r, 2);
  kva_tier_hits th;
  ck_assert_int_eq(kva_lookup(r->s, k, n, pin, &th), KVA_OK);
  ck_assert_uint_le(th.total, n);
  TRACE(r, "lookup%s [%lu, +%zu): L1 %zu, total %zu", pin ? " (pin)" : "", (unsigned long)first, n,
        th.tier[0].hits, th.total);
  if (pin && th.tier[0].hits)
    ck_assert_int_eq(kva_unpin(r->s, k, th.tier[0].hits), (int)th.tier[0].hits);
}

static void do_touch(run *r) {
  uint64_t first;
  kva_key k[MAX_RUN];
  size_t n = pick_run(r, k, &first, MAX_RUN);
  ck_assert_int_ge(kva_touch(r->s, k, n), 0);
  TRACE(r, "touch [%lu, +%zu)", (unsigned long)first, n);
}

static const char *tier_name(const run *r, uint32_t t) {
  if (r->redis_port) return t ? "redis1" : "disk0";
  return t ? "mock1" : "mock0";
}

static void do_fault(run *r) {
  uint32_t t = below(r, 2);
  TRACE(r, "fault on tier %u", t);
  static const double rates[] = {0, 0, 0.1, 0.3};
  static const uint64_t lat[] = {0, 0, 50, 500, 5000};
  mock_control c;
  memset(&c, 0, sizeof(c));
  uint32_t what = below(r, 6);
  if (r->redis_port && what < 4) what = 4 + below(r, 2); /* no mock to steer */
  switch (what) {
  case 0:
  case 1:
    c.set = MOCK_SET_FAIL_STORE_RATE | MOCK_SET_FAIL_LOAD_RATE | MOCK_SET_SEED;
    c.fail_store_rate = rates[below(r, 4)];
    c.fail_load_rate = rates[below(r, 4)];
    c.seed = rnd(r);
    l2_control(r->s, t, &c);
    break;
  case 2:
    c.set = MOCK_SET_LATENCY;
    c.latency_us = lat[below(r, 5)];
    l2_control(r->s, t, &c);
    break;
  case 3:
    r->down[t] = !r->down[t];
    l2_set_down(r->s, t, r->down[t]);
    break;
  case 4:
    r->frozen = !r->frozen;
    ck_assert_int_eq(kva_set_freeze(r->s, r->frozen), KVA_OK);
    break;
  default:
    r->bypass[t] = !r->bypass[t];
    ck_assert_int_eq(kva_set_tier_bypass(r->s, tier_name(r, t), r->bypass[t]), KVA_OK);
    break;
  }
}

static void do_time(run *r) {
  TRACE(r, "time");
  if (r->workers == 0)
    kva_runtime_advance(r->rt, (1 + below(r, 1500)) * 1000000ull);
  else
    nanosleep(&(struct timespec){0, 1000000}, NULL);
}

static void do_step(run *r) {
  uint32_t x = below(r, 100);
  if (x < 28)
    do_write(r);
  else if (x < 35)
    do_delete(r);
  else if (x < 58)
    do_submit(r);
  else if (x < 78) {
    if (r->nout) complete_oldest(r);
  } else if (x < 80)
    do_clear(r);
  else if (x < 84) {
    ck_assert_int_eq(kva_flush(r->s, WAIT_MS), KVA_OK);
    TRACE(r, "flush");
  } else if (x < 87)
    do_touch(r);
  else if (x < 90)
    do_lookup(r);
  else if (x < 97)
    do_fault(r);
  else
    do_time(r);
}

/* ---- a whole run -------------------------------------------------------- */

static uint32_t steps_wanted(uint32_t dflt) {
  const char *e = getenv("KVA_RANDOM_STEPS");
  if (e && *e) return (uint32_t)strtoul(e, NULL, 10);
  return dflt;
}

static void start(run *r) {
  static const char *policies[] = {"lru", "fifo", "lfu", "mru"};
  char seed[64], policy[64], writeback[64], tiers[256];
  snprintf(seed, sizeof(seed), "runtime.seed=%lu", (unsigned long)r->seed);
  snprintf(policy, sizeof(policy), "eviction.policy=%s", policies[r->seed % 4]);
  snprintf(writeback, sizeof(writeback), "prefetch_writeback=%s",
           (r->seed / 4) % 2 ? "false" : "true");
  /* tier 0 holds 12 objects, tier 1 holds 20: both evict, FIFO */
  if (r->redis_port)
    snprintf(tiers, sizeof(tiers),
             "l2=[{\"type\":\"disk\",\"capacity_bytes\":%u,\"persist\":false},"
             "{\"type\":\"redis\",\"addrs\":[\"127.0.0.1:%d\"],\"namespace\":\"run%lu\"}]",
             64u * OBJ_BYTES, r->redis_port, (unsigned long)r->seed); /* a run's own keys */
  else
    snprintf(tiers, sizeof(tiers),
             "l2=[{\"type\":\"mock\",\"capacity_bytes\":%u},"
             "{\"type\":\"mock\",\"capacity_bytes\":%u}]",
             12u * OBJ_BYTES, 20u * OBJ_BYTES);
  r->rt = fixture_storage(r->workers, (uint64_t)L1_OBJS * OBJ_BYTES, tiers, seed, policy, writeback,
                          "prefetch_max_in_flight=2", "l2_probe_interval_ms=50", NULL);
  r->s = kva_storage_of(r->rt);
  r->l = fixture_layout_bytes(OBJ_BYTES);
  for (uint32_t i = 0; i < NIDS; i++) {
    r->k[i].exists = calloc(MAXV / 8, 1);
    ck_assert_ptr_nonnull(r->k[i].exists);
  }
}

/* Every prefetch completed, faults off, then nothing may stay locked. */
static void finish(run *r) {
  while (r->nout) complete_oldest(r);
  mock_control c;
  memset(&c, 0, sizeof(c));
  c.set = MOCK_SET_FAIL_STORE_RATE | MOCK_SET_FAIL_LOAD_RATE | MOCK_SET_DOWN | MOCK_SET_LATENCY;
  for (uint32_t t = 0; t < 2; t++) {
    if (!r->redis_port) l2_control(r->s, t, &c);
    ck_assert_int_eq(kva_set_tier_bypass(r->s, tier_name(r, t), 0), KVA_OK);
  }
  ck_assert_int_eq(kva_set_freeze(r->s, 0), KVA_OK);
  ck_assert_int_eq(kva_flush(r->s, WAIT_MS), KVA_OK);
  l2_assert_unlocked(r->s);
  fixture_memcheck_clean(r->s);
  kva_storage_stats st = l2_storage_stats(r->s);
  ck_assert_uint_eq(st.l1_write_locked, 0);
  ck_assert_uint_eq(st.l1_read_locked, 0);
  fprintf(stderr,
          "seed %lu (%s): %u steps, %lu keys read (%lu stale, %lu checked latest), "
          "%lu writes refused, evictions %lu+%lu, l2 stored %lu loaded %lu load failures %lu\n",
          (unsigned long)r->seed, r->workers ? "threaded" : "deterministic", r->step,
          (unsigned long)r->reads, (unsigned long)r->stale_reads, (unsigned long)r->latest_checked,
          (unsigned long)r->writes_refused, (unsigned long)st.evicted,
          (unsigned long)st.evicted_on_demand, (unsigned long)st.l2_stored_keys,
          (unsigned long)st.l2_loaded_keys, (unsigned long)st.l2_load_failures);
  kva_runtime_shutdown(r->rt);
  for (uint32_t i = 0; i < NIDS; i++) free(r->k[i].exists);
}

static void one_run(int workers, int redis_port, uint64_t seed, uint32_t steps) {
  run *r = calloc(1, sizeof(*r));
  ck_assert_ptr_nonnull(r);
  r->redis_port = redis_port;
  r->seed = seed;
  r->rng = seed * 0x2545f4914f6cdd1dull + 1;
  r->workers = workers;
  tracing = getenv("KVA_RANDOM_TRACE") && *getenv("KVA_RANDOM_TRACE") == '1';
  l2_log_start(KVA_LOG_WARN);
  start(r);
  for (r->step = 0; r->step < steps; r->step++) do_step(r);
  finish(r);
  l2_log_stop();
  ck_assert_msg(l2_log_lock_warnings() == 0, "seed %lu: locks left at shutdown:\n%s",
                (unsigned long)seed, l2_log_text());
  ck_assert_msg(r->reads > 0 && r->latest_checked > 0,
                "seed %lu: the run read %lu keys, %lu checked against the latest version",
                (unsigned long)seed, (unsigned long)r->reads, (unsigned long)r->latest_checked);
  free(r);
}

/* KVA_RANDOM_SEED=<n> replays one seed; otherwise seeds first..first+4. */
static void runs(int workers, int redis_port, uint64_t first, uint32_t steps) {
  const char *e = getenv("KVA_RANDOM_SEED");
  if (e && *e) {
    one_run(workers, redis_port, strtoull(e, NULL, 10), steps);
    return;
  }
  for (uint64_t seed = first; seed < first + 5; seed++) one_run(workers, redis_port, seed, steps);
}

START_TEST(deterministic_random_runs_serve_only_written_versions) {
  runs(0, 0, 1, steps_wanted(3000));
}
END_TEST

START_TEST(threaded_random_runs_serve_only_written_versions) {
  runs(2, 0, 101, steps_wanted(3000) / 3);
}
END_TEST

START_TEST(disk_and_redis_random_runs_serve_only_written_versions) {
  rs_server srv = {0};
  rs_start(&srv, NULL);
  runs(2, srv.port, 201, steps_wanted(3000) / 3);
  rs_stop(&srv);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_random");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, deterministic_random_runs_serve_only_written_versions);
  tcase_add_test(tc, threaded_random_runs_serve_only_written_versions);
  tcase_add_test(tc, disk_and_redis_random_runs_serve_only_written_versions);
  suite_add_tcase(su, tc);
  return su;
}
