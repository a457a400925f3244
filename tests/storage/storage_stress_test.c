/*
 * storage_stress_test.c — engine threads hammer the storage facade with
 * mixed writes, prefetches, reads, deletes, touches and clears over
 * overlapping keys in an L1 small enough to evict all the time; every
 * object read must hold exactly one complete write of its own key.
 * The forced runs add forced deletes and kva_clear(force) of keys other
 * threads hold, with no L2, a mock and a disk tier, or a redis tier: a
 * holder still reads its own bytes, a writer whose key went is told
 * KVA_KEY_NOT_EXIST, and no lock is left behind.
 *
 * Each writer fills an object with a pattern naming the key and a
 * generation unique to that write. A read verifies the whole object: a torn
 * write, another key's bytes, or a block handed out twice all show up as a
 * mismatch. Ops per thread: KVA_STRESS_OPS in the environment, else 100k
 * (scaled down under the sanitizers).
 */
#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/redis_server.h"

#define MiB (1024ull * 1024ull)
#define L1_BYTES (32 * MiB)
#define OBJ_BYTES (64u * 1024u) /* 512 objects fit */
#define NKEYS 1024u             /* twice what fits */
#define WINDOW 512u             /* keys one of several threads uses; neighbours overlap */
#define MAX_BATCH 8u
#define NTHREADS 4
#define CLEAR_EVERY 5000u /* about one clear(0) per this many ops */
#define FORCED_THREADS 8
#define FORCE_EVERY 40u        /* forced runs: about one forced delete per this many ops */
#define FORCE_CLEAR_EVERY 800u /* and one kva_clear(force) per this many */

#if defined(KVA_TSAN) || defined(__SANITIZE_THREAD__)
#define OPS_DIVISOR 5
#elif defined(KVA_SANITIZER) || defined(__SANITIZE_ADDRESS__)
#define OPS_DIVISOR 2
#else
#define OPS_DIVISOR 1
#endif

static long ops_per_thread(long dflt) {
  const char *e = getenv("KVA_STRESS_OPS");
  long n = e ? strtol(e, NULL, 10) : 0;
  return n > 0 ? n : dflt / OPS_DIVISOR;
}

/* ---- the pattern ------------------------------------------------------- */

#define MAGIC 0x6b76616374000000ull /* "kvact" */

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* word 0 names the key, word 1 the write, the rest follow from both */
static void pattern_fill(void *p, uint64_t key, uint64_t gen) {
  uint64_t *w = p, base = mix64(key * 0x9e3779b97f4a7c15ull ^ gen);
  w[0] = MAGIC ^ key;
  w[1] = gen;
  for (size_t j = 2; j < OBJ_BYTES / 8; j++) w[j] = base + j * 0xd1342543de82ef95ull;
}

/* 0 when p holds one complete write of key; else the first bad word + 1. */
static size_t pattern_check(const void *p, uint64_t key) {
  const uint64_t *w = p;
  if (w[0] != (MAGIC ^ key)) return 1;
  uint64_t gen = w[1], base = mix64(key * 0x9e3779b97f4a7c15ull ^ gen);
  if (gen == 0) return 2;
  for (size_t j = 2; j < OBJ_BYTES / 8; j++)
    if (w[j] != base + j * 0xd1342543de82ef95ull) return j + 1;
  return 0;
}

/* ---- one engine thread ------------------------------------------------- */

typedef struct engine {
  kva_storage *s;
  kva_runtime *det;       /* deterministic mode: the runtime to drive, else NULL */
  uint64_t first, window; /* the key ids it uses: [first, first + window) mod NKEYS */
  int id;
  uint64_t rng;
  long ops;
  uint64_t gen; /* writes issued */
  int force;    /* forced deletes and clears too */
  /* outcome counters */
  uint64_t written, reads_verified, prefetched_keys, oom, deleted, clears, forced, lost_writes;
  char failure[512]; /* first failure, empty if none */
} engine;

static int stop_all; /* atomic: a thread failed */

static uint64_t rnd(engine *e) {
  e->rng += 0x9e3779b97f4a7c15ull;
  return mix64(e->rng);
}

static void engine_fail(engine *e, const char *fmt, ...) {
  if (e->failure[0]) return;
  va_list ap;
  va_start(ap, fmt);
  int o = snprintf(e->failure, sizeof(e->failure), "thread %d op %ld: ", e->id, e->ops);
  vsnprintf(e->failure + o, sizeof(e->failure) - (size_t)o, fmt, ap);
  va_end(ap);
  __atomic_store_n(&stop_all, 1, __ATOMIC_RELEASE);
}

/* Records the failure and ends the op. */
#define FAIL(e, ...)                                                                               \
  do {                                                                                             \
    engine_fail(e, __VA_ARGS__);                                                                   \
    return;                                                                                        \
  } while (0)

/* A batch of n contiguous key ids inside the thread's window. */
static size_t pick(engine *e, uint64_t *ids, kva_key *k, size_t maxn) {
  size_t n = 1 + rnd(e) % maxn;
  uint64_t start = e->first + rnd(e) % e->window;
  for (size_t i = 0; i < n; i++) {
    ids[i] = (start + i) % NKEYS;
    k[i] = fixture_key(ids[i]);
  }
  return n;
}

static void op_write(engine *e) {
  uint64_t ids[MAX_BATCH];
  kva_key k[MAX_BATCH], done[MAX_BATCH];
  kva_buf b[MAX_BATCH];
  int st[MAX_BATCH];
  size_t n = pick(e, ids, k, MAX_BATCH), ndone = 0;
  kva_layout l = fixture_layout_bytes(OBJ_BYTES);
  kva_write_mode mode = rnd(e) % 2 ? KVA_WRITE_NEW : KVA_WRITE_ALL;
  int rc = kva_reserve_write(e->s, k, n, &l, mode, b, st);
  if (rc < 0) FAIL(e, "reserve_write: %s", kva_strerror(rc));
  uint64_t gens[MAX_BATCH];
  for (size_t i = 0; i < n; i++) {
    if (st[i] == KVA_OUT_OF_MEMORY) e->oom++;
    if (st[i] != KVA_OK) {
      if (st[i] != KVA_KEY_NOT_WRITABLE && st[i] != KVA_KEY_LOCKED && st[i] != KVA_OUT_OF_MEMORY)
        FAIL(e, "reserve_write key %lu: %s", (unsigned long)ids[i], kva_strerror(st[i]));
      continue;
    }
    if (!b[i].ptr || b[i].len != OBJ_BYTES)
      FAIL(e, "reserve_write key %lu: buffer %p/%zu", (unsigned long)ids[i], b[i].ptr, b[i].len);
    gens[ndone] = ((uint64_t)(e->id + 1) << 48) | ++e->gen;
    pattern_fill(b[i].ptr, ids[i], gens[ndone]);
    done[ndone] = k[i];
    b[ndone] = b[i];
    ids[ndone++] = ids[i];
  }
  if ((size_t)rc != ndone) FAIL(e, "reserve_write returned %d for %zu keys", rc, ndone);
  /* still ours before we publish it: nobody else wrote into the blocks */
  for (size_t i = 0; i < ndone; i++)
    if (pattern_check(b[i].ptr, ids[i]) || ((uint64_t *)b[i].ptr)[1] != gens[i])
      FAIL(e, "write-locked key %lu changed under its writer", (unsigned long)ids[i]);
  if (ndone == 0) return;
  rc = kva_finish_write(e->s, done, ndone, st);
  size_t ok = 0;
  for (size_t i = 0; i < ndone; i++) {
    ok += st[i] == KVA_OK;
    if (st[i] != KVA_OK && !(e->force && st[i] == KVA_KEY_NOT_EXIST))
      FAIL(e, "finish_write key %lu: %s", (unsigned long)ids[i], kva_strerror(st[i]));
  }
  if (rc != (int)ok) FAIL(e, "finish_write returned %d for %zu keys", rc, ok);
  e->written += ok;
  e->lost_writes += ndone - ok; /* force-deleted under their writer */
}

/* Waits for a prefetch in one of the three ways an engine may. */
static int await_prefetch(engine *e, kva_prefetch *h, size_t *hits) {
  int how = (int)(rnd(e) % 4), rc;
  if (how == 1) {
    while ((rc = kva_query_prefetch(e->s, h, hits)) == KVA_EAGAIN) sched_yield();
    return rc;
  }
  if (how == 2) {
    struct pollfd p = {.fd = kva_prefetch_eventfd(h), .events = POLLIN};
    if (p.fd < 0) return p.fd;
    if (e->det) { /* nothing runs until driven; then the result is there */
      kva_runtime_run_until_idle(e->det);
      if (poll(&p, 1, 0) != 1) return KVA_EIO;
    }
    poll(&p, 1, 10000);
    while ((rc = kva_query_prefetch(e->s, h, hits)) == KVA_EAGAIN) sched_yield();
    return rc;
  }
  while ((rc = kva_wait_prefetch(e->s, h, how == 3 ? 1 : -1, hits)) == KVA_ETIMEDOUT) {
  }
  return rc;
}

static void op_read(engine *e, int read_bytes) {
  uint64_t ids[MAX_BATCH];
  kva_key k[MAX_BATCH];
  kva_buf b[MAX_BATCH];
  size_t n = pick(e, ids, k, MAX_BATCH), hits = 0;
  uint32_t extra = (uint32_t)(rnd(e) % 3);
  kva_prefetch *h = NULL;
  kva_layout l = fixture_layout_bytes(OBJ_BYTES);
  int rc = kva_submit_prefetch(e->s, k, n, &l, extra, &h);
  if (rc != KVA_OK) FAIL(e, "submit_prefetch: %s", kva_strerror(rc));
  rc = await_prefetch(e, h, &hits);
  if (rc != KVA_OK || hits > n) FAIL(e, "prefetch: %s, %zu hits of %zu", kva_strerror(rc), hits, n);
  if (hits == 0) return;
  e->prefetched_keys += hits;
  if (read_bytes) {
    rc = kva_read_prefetched(e->s, k, hits, b);
    if (rc != KVA_OK) FAIL(e, "read_prefetched of held keys: %s", kva_strerror(rc));
    for (size_t i = 0; i < hits; i++) {
      size_t bad = b[i].len == OBJ_BYTES ? pattern_check(b[i].ptr, ids[i]) : 1;
      if (bad)
        FAIL(e, "key %lu read back torn or foreign (word %zu: %016lx, gen %016lx)",
             (unsigned long)ids[i], bad - 1, (unsigned long)((uint64_t *)b[i].ptr)[bad - 1],
             (unsigned long)((uint64_t *)b[i].ptr)[1]);
    }
    e->reads_verified += hits;
  }
  rc = kva_finish_read_prefetched(e->s, k, hits, extra);
  if (rc != (int)hits) FAIL(e, "finish_read_prefetched %d of %zu", rc, hits);
}

static void op_delete(engine *e) {
  uint64_t ids[MAX_BATCH];
  kva_key k[MAX_BATCH];
  int st[MAX_BATCH];
  size_t n = pick(e, ids, k, 4);
  int rc = kva_delete(e->s, k, n, 0, st);
  if (rc < 0) FAIL(e, "delete: %s", kva_strerror(rc));
  for (size_t i = 0; i < n; i++)
    if (st[i] != KVA_OK && st[i] != KVA_KEY_NOT_EXIST && st[i] != KVA_KEY_LOCKED)
      FAIL(e, "delete key %lu: %s", (unsigned long)ids[i], kva_strerror(st[i]));
  e->deleted += (uint64_t)rc;
}

static void op_touch(engine *e) {
  uint64_t ids[MAX_BATCH];
  kva_key k[MAX_BATCH];
  size_t n = pick(e, ids, k, MAX_BATCH);
  int rc = kva_touch(e->s, k, n);
  if (rc < 0 || rc > (int)n) engine_fail(e, "touch: %d", rc);
}

static void op_clear(engine *e, int force) {
  int rc = kva_clear(e->s, force);
  if (rc < 0) FAIL(e, "clear: %s", kva_strerror(rc));
  e->clears++;
}

/* A forced delete of keys that other threads may hold, read or write. */
static void op_force_delete(engine *e) {
  uint64_t ids[MAX_BATCH];
  kva_key k[MAX_BATCH];
  int st[MAX_BATCH];
  size_t n = pick(e, ids, k, 4);
  int rc = kva_delete(e->s, k, n, 1, st);
  if (rc < 0) FAIL(e, "forced delete: %s", kva_strerror(rc));
  for (size_t i = 0; i < n; i++)
    if (st[i] != KVA_OK && st[i] != KVA_KEY_NOT_EXIST)
      FAIL(e, "forced delete key %lu: %s", (unsigned long)ids[i], kva_strerror(st[i]));
  e->forced += (uint64_t)rc;
}

static void engine_step(engine *e) {
  uint64_t r = rnd(e) % 100;
  if (e->force && rnd(e) % FORCE_EVERY == 0)
    op_force_delete(e);
  else if (e->force && rnd(e) % FORCE_CLEAR_EVERY == 0)
    op_clear(e, 1);
  else if (rnd(e) % CLEAR_EVERY == 0)
    op_clear(e, 0);
  else if (r < 35)
    op_write(e);
  else if (r < 70)
    op_read(e, 1);
  else if (r < 78)
    op_read(e, 0);
  else if (r < 88)
    op_delete(e);
  else
    op_touch(e);
}

static void *engine_main(void *arg) {
  engine *e = arg;
  long total = e->ops;
  for (e->ops = 0; e->ops < total && !__atomic_load_n(&stop_all, __ATOMIC_ACQUIRE); e->ops++)
    engine_step(e);
  return NULL;
}

/* ---- checks after the run --------------------------------------------- */

/* Every resident object, read alone, holds one complete write of its key. */
static uint64_t verify_resident(kva_storage *s) {
  kva_layout l = fixture_layout_bytes(OBJ_BYTES);
  uint64_t found = 0;
  for (uint64_t id = 0; id < NKEYS; id++) {
    kva_key k = fixture_key(id);
    kva_prefetch *h;
    size_t hits = 0;
    ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, &l, 0, &h), KVA_OK);
    ck_assert_int_eq(kva_wait_prefetch(s, h, -1, &hits), KVA_OK);
    if (!hits) continue;
    kva_buf b;
    ck_assert_int_eq(kva_read_prefetched(s, &k, 1, &b), KVA_OK);
    ck_assert_msg(pattern_check(b.ptr, id) == 0, "resident key %lu is torn", (unsigned long)id);
    ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
    found++;
  }
  return found;
}

/* One stress run: threads (0 = one engine in deterministic mode), ops
 * per thread, forced deletes and clears or not, and whether L2 tiers are
 * configured (then the final check freezes them first, so it reads L1). */
typedef struct stress_opts {
  int nthreads, threaded, force, l2;
  long ops;
} stress_opts;

/* Every engine released what it held, the counters add up, and every
 * resident object holds one complete write of its key. */
static void check_after(kva_storage *s, const stress_opts *o, uint64_t written, uint64_t verified) {
  if (o->l2) {
    ck_assert_int_eq(kva_flush(s, 30000), KVA_OK); /* the store tasks' locks go */
    ck_assert_int_eq(kva_set_freeze(s, 1), KVA_OK);
  }
  kva_storage_stats x;
  ck_assert_int_eq(kva_storage_get_stats(s, &x), KVA_OK);
  ck_assert_uint_eq(x.l1_write_locked, 0);
  ck_assert_uint_eq(x.l1_read_locked, 0);
  fixture_memcheck_clean(s);
  ck_assert_uint_gt(written, 0);
  ck_assert_uint_gt(verified, 0);
  ck_assert_uint_gt(x.evicted + x.evicted_on_demand, 0);
  if (!o->force) {
    ck_assert_uint_gt(x.evicted, 0);
    ck_assert_uint_gt(x.evicted_on_demand, 0);
  }
  ck_assert_uint_le(x.l1_used_bytes, x.l1_capacity_bytes);
  ck_assert_uint_eq(verify_resident(s), x.l1_objects);
  fixture_memcheck_clean(s);
  if (o->l2) ck_assert_int_eq(kva_set_freeze(s, 0), KVA_OK);
}

static void run_engines(kva_runtime *rt, const stress_opts *o) {
  kva_storage *s = kva_storage_of(rt);
  int nthreads = o->nthreads, threaded = o->threaded;
  engine *e = calloc((size_t)nthreads, sizeof(*e));
  pthread_t *t = calloc((size_t)nthreads, sizeof(*t));
  ck_assert(e && t);
  __atomic_store_n(&stop_all, 0, __ATOMIC_RELAXED);
  uint64_t t0 = fixture_now_ns();
  for (int i = 0; i < nthreads; i++) {
    e[i] = (engine){.s = s,
                    .det = threaded ? NULL : rt,
                    .id = i,
                    .first = (uint64_t)i * (NKEYS / (uint64_t)nthreads),
                    .window = nthreads > 1 ? WINDOW : NKEYS,
                    .rng = 0x1234567ull * (uint64_t)(i + 1),
                    .ops = o->ops,
                    .force = o->force};
    if (threaded) ck_assert_int_eq(pthread_create(&t[i], NULL, engine_main, &e[i]), 0);
  }
  if (!threaded) engine_main(&e[0]);
  uint64_t written = 0, verified = 0, oom = 0, clears = 0, forced = 0, lost = 0;
  for (int i = 0; i < nthreads; i++) {
    if (threaded) pthread_join(t[i], NULL);
    written += e[i].written;
    verified += e[i].reads_verified;
    oom += e[i].oom;
    clears += e[i].clears;
    forced += e[i].forced;
    lost += e[i].lost_writes;
  }
  for (int i = 0; i < nthreads; i++) ck_assert_msg(!e[i].failure[0], "%s", e[i].failure);
  kva_storage_stats x;
  ck_assert_int_eq(kva_storage_get_stats(s, &x), KVA_OK);
  fprintf(stderr,
          "%s: %d x %ld ops in %.1f s: %lu written, %lu verified reads, %lu clears, %lu oom, "
          "%lu forced deletes, %lu writes lost to them; stats: evicted %lu, on demand %lu, "
          "oom %lu, hits %lu, misses %lu, l2 stored %lu, loaded %lu\n",
          threaded ? "threaded" : "deterministic", nthreads, o->ops,
          (double)(fixture_now_ns() - t0) / 1e9, (unsigned long)written, (unsigned long)verified,
          (unsigned long)clears, (unsigned long)oom, (unsigned long)forced, (unsigned long)lost,
          (unsigned long)x.evicted, (unsigned long)x.evicted_on_demand,
          (unsigned long)x.out_of_memory, (unsigned long)x.hits, (unsigned long)x.misses,
          (unsigned long)x.l2_stored_keys, (unsigned long)x.l2_loaded_keys);
  if (o->force) ck_assert_uint_gt(forced, 0);
  check_after(s, o, written, verified);
  free(e);
  free(t);
}

/* A high watermark with a small ratio leaves little headroom, so writes
 * often find the pool full and evict on demand, while the background
 * rounds keep evicting by watermark. */
/* _i = 1: idle workers sleep at once (runtime.spin_us = 0), so that the
 * engine threads serve most requests themselves (actors/sched.c, lending)
 * and hand over to woken workers in between. */
START_TEST(engines_never_read_torn_or_foreign_bytes) {
  kva_runtime *rt = fixture_storage(2, L1_BYTES, "eviction.trigger_watermark=1",
                                    "eviction.ratio=0.05", _i ? "runtime.spin_us=0" : NULL, NULL);
  stress_opts o = {.nthreads = NTHREADS, .threaded = 1, .ops = ops_per_thread(100000)};
  run_engines(rt, &o);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(deterministic_engine_never_reads_torn_or_foreign_bytes) {
  kva_runtime *rt = fixture_storage(0, L1_BYTES, "eviction.trigger_watermark=1",
                                    "eviction.ratio=0.05", "runtime.seed=7", NULL);
  stress_opts o = {.nthreads = 1, .ops = ops_per_thread(20000)};
  run_engines(rt, &o);
  kva_runtime_shutdown(rt);
}
END_TEST

/* Eight engines with forced deletes and clears of each other's keys; _i
 * picks the tiers: none, a mock and a disk tier, or a redis tier. */
START_TEST(forced_deletes_never_serve_foreign_bytes_or_leak_locks) {
  char tiers[512] = "";
  rs_server srv = {0};
  if (_i == 1) {
    snprintf(tiers, sizeof(tiers),
             "l2=[{\"type\":\"mock\",\"capacity_bytes\":%llu,\"latency_us\":200},"
             "{\"type\":\"disk\",\"capacity_bytes\":%llu,\"persist\":false}]",
             32 * MiB, 48 * MiB);
  } else if (_i == 2) {
    rs_start(&srv, NULL);
    snprintf(tiers, sizeof(tiers), "l2=[{\"type\":\"redis\",\"addrs\":[\"127.0.0.1:%d\"]}]",
             srv.port);
  }
  kva_runtime *rt = fixture_storage(2, L1_BYTES, "eviction.trigger_watermark=1",
                                    "eviction.ratio=0.05", _i ? tiers : NULL, NULL);
  stress_opts o = {.nthreads = FORCED_THREADS,
                   .threaded = 1,
                   .force = 1,
                   .l2 = _i != 0,
                   .ops = ops_per_thread(_i ? 6000 : 20000)};
  run_engines(rt, &o);
  kva_runtime_shutdown(rt);
  if (_i == 2) rs_stop(&srv);
}
END_TEST

START_TEST(deterministic_forced_deletes_never_serve_foreign_bytes) {
  kva_runtime *rt = fixture_storage(0, L1_BYTES, "eviction.trigger_watermark=1",
                                    "eviction.ratio=0.05", "runtime.seed=11", NULL);
  stress_opts o = {.nthreads = 1, .force = 1, .ops = ops_per_thread(20000)};
  run_engines(rt, &o);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("storage_stress");
  TCase *tc = tcase_create("stress");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, engines_never_read_torn_or_foreign_bytes, 0, 2);
  tcase_add_test(tc, deterministic_engine_never_reads_torn_or_foreign_bytes);
  tcase_add_loop_test(tc, forced_deletes_never_serve_foreign_bytes_or_leak_locks, 0, 3);
  tcase_add_test(tc, deterministic_forced_deletes_never_serve_foreign_bytes);
  suite_add_tcase(s, tc);
  return s;
}
