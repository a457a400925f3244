/*
 * redis_failover.c — the redis suite's failover pass (suite_redis.h): what
 * kvact's redis cluster tier serves, second by second, while a master dies
 * and its replica takes over.
 *
 *  - the cluster: RB_MASTERS masters with one replica each on loopback,
 *    cluster-node-timeout 2000 ms (the replica is promoted a few seconds
 *    after its master dies), no persistence (redis_servers.h);
 *  - kvact: an embedded runtime (tier_side.h) whose one L2 tier is the
 *    cluster, seeded with the masters, timeout_ms 500, L1 256 MiB;
 *  - the workload, --redis-failover-s seconds (12): a writer thread writes a
 *    new 64 KiB object every ~1 ms, its bytes derived from its key's index,
 *    stored behind to the tier; a reader thread takes the newest key written
 *    at least 1 s ago, deletes it from L1, prefetches it back from L2 and
 *    checks every byte. The delete is forced: a store still in flight keeps
 *    its bytes, so a key whose store has not landed reads as a miss, never
 *    as an L1 hit;
 *  - at 3 s master 0 gets SIGKILL; from then on a surviving master's
 *    CLUSTER INFO and the replica's role are polled every 100 ms.
 *
 * Printed, not judged (no timing target), every second:
 *
 *   measure=failover t=S l2_hit_ratio=H stores=N store_failures=F bypassed=B wrong=W
 *
 * over the second that ends at S: H = keys read back from L2 / keys asked
 * for (n/a when none was), N = keys the tier stored (kva_l2_get_tier_stats
 * stored_keys), F = failed store tasks (kva_storage_stats
 * l2_store_failures), B = 1 when any of the second's polls found the tier
 * bypassed, W = wrong bytes read. measure=failover-event lines mark the
 * kill, the bypass turning on and off, the cluster failing and being ok
 * again, and the replica's promotion; measure=failover-summary counts the
 * seconds after the kill with no hit or no store (lost_seconds), gives the
 * hit ratio of those seconds together, and the totals. A wrong byte alone
 * is a failure (wrong_ok=no, exit 1): kvact may lose reads while a master
 * is gone, never serve wrong bytes.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/kvbench/suites/suite_redis.h"
#include "tools/kvbench/suites/tier_side.h"

#define MiB (1024ull * 1024ull)
#define SEC_NS 1000000000ull
#define OBJECT_BYTES (64 * 1024)
#define WRITE_EVERY_NS 1000000ull /* a new key each ms */
#define READ_AGE_NS SEC_NS        /* keys this old are read back */
#define KILL_AT_S 3
#define POLL_NS (100 * 1000000ull)
#define NODE_TIMEOUT_MS 2000
#define TIER_TIMEOUT_MS 500
#define L1_BYTES (256 * MiB) /* ~4 s of writes: keys passed over are evicted */

/* The pass's shared state: the threads' counters are atomics that the
 * sampler reads each second; a second's figures are deltas, so a count
 * landing on either side of the boundary moves to the next second, never
 * gets lost. */
typedef struct failover {
  tier_side k;          /* runtime, storage, keys, layout */
  rb_server *node;      /* RB_MAX_NODES: masters, then their replicas */
  uint64_t t0;          /* the workload's start (bench_now_ns) */
  uint64_t *written_at; /* key i finished writing then, or 0: its write failed */
  unsigned written;     /* keys the writer is done with (release / acquire) */
  int stop;             /* set once by the sampler (relaxed) */
  /* keys read back (hits, high 32 bits) and asked for (lookups, low 32):
   * one counter, so that a second's pair is read in one load and its
   * ratio never counts a hit whose lookup fell in the second before */
  uint64_t reads;
  uint64_t wrong, read_errors, write_failures; /* relaxed counters */
} failover;

/* One reading of every counter a second's line is made of. */
typedef struct sample {
  uint64_t hits, lookups, wrong, stored, store_failures;
} sample;

/* The seconds after the kill, for the summary. */
typedef struct after_kill {
  int lost; /* no key read back or none stored */
  uint64_t hits, lookups;
} after_kill;

/* What the watchers have seen: each 1 once it happened, but bypassed,
 * the tier's state at the last poll. */
typedef struct watch {
  int killed, bypassed, cluster_failed, cluster_ok, promoted;
} watch;

static void count(uint64_t *c, uint64_t by) {
  __atomic_fetch_add(c, by, __ATOMIC_RELAXED); /* a tally: no ordering with anything */
}

static uint64_t counted(uint64_t *c) {
  return __atomic_load_n(c, __ATOMIC_RELAXED); /* a tally: no ordering with anything */
}

static void sleep_until(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / SEC_NS), .tv_nsec = (long)(ns % SEC_NS)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
  }
}

static double since(const failover *f) {
  return (double)(bench_now_ns() - f->t0) / 1e9;
}

/* Word w of key i's object: splitmix64 of both, so another key's object, a
 * shifted copy or a stale one differs in nearly every byte. */
static uint64_t pattern(uint64_t i, uint64_t w) {
  uint64_t x = (i << 32 | w) + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static void fill(unsigned char *p, uint64_t i) {
  for (uint64_t w = 0; w < OBJECT_BYTES / 8; w++) {
    uint64_t v = pattern(i, w);
    memcpy(p + 8 * w, &v, 8);
  }
}

/* Bytes of b that differ from key i's object; a byte missing or extra
 * counts as one. */
static uint64_t wrong_bytes(const kva_buf *b, uint64_t i) {
  size_t len = b->len < OBJECT_BYTES ? b->len : OBJECT_BYTES;
  uint64_t bad = b->len > OBJECT_BYTES ? b->len - OBJECT_BYTES : OBJECT_BYTES - len;
  const unsigned char *p = b->ptr;
  for (size_t at = 0; at < len; at += 8) {
    unsigned char want[8];
    uint64_t v = pattern(i, at / 8);
    size_t m = len - at < 8 ? len - at : 8;
    memcpy(want, &v, 8);
    if (memcmp(p + at, want, m) == 0) continue;
    for (size_t j = 0; j < m; j++) bad += p[at + j] != want[j];
  }
  return bad;
}

static int write_one(failover *f, unsigned i) {
  kva_buf buf;
  int st;
  const kva_key *key = &f->k.keys[i];
  if (kva_reserve_write(f->k.s, key, 1, &f->k.layout, KVA_WRITE_NEW, &buf, &st) != 1) return -1;
  fill(buf.ptr, i);
  return kva_finish_write(f->k.s, key, 1, &st) == 1 ? 0 : -1;
}

/* A key every WRITE_EVERY_NS; behind schedule it writes at once but does
 * not catch up in a burst. */
static void *writer_main(void *arg) {
  failover *f = arg;
  uint64_t next = f->t0;
  for (unsigned i = 0; i < f->k.n && !__atomic_load_n(&f->stop, __ATOMIC_RELAXED); i++) {
    sleep_until(next);
    if (write_one(f, i) == 0)
      f->written_at[i] = bench_now_ns();
    else
      count(&f->write_failures, 1);
    /* release: the reader that sees i + 1 sees written_at[i] */
    __atomic_store_n(&f->written, i + 1, __ATOMIC_RELEASE);
    uint64_t now = bench_now_ns();
    next = next + WRITE_EVERY_NS > now ? next + WRITE_EVERY_NS : now;
  }
  return NULL;
}

/* The newest key written READ_AGE_NS ago or earlier and not read yet, or
 * -1. The keys before it are passed over: a reader that falls behind keeps
 * reading keys of that age rather than older ones. */
static long newest_old_enough(failover *f, unsigned *next) {
  /* acquire: pairs with the writer's release, so written_at[0, w) is set */
  unsigned w = __atomic_load_n(&f->written, __ATOMIC_ACQUIRE);
  uint64_t cutoff = bench_now_ns() - READ_AGE_NS;
  long pick = -1;
  for (unsigned j = *next; j < w; j++) {
    if (!f->written_at[j]) continue;
    if (f->written_at[j] > cutoff) break;
    pick = j;
  }
  if (pick >= 0) *next = (unsigned)pick + 1;
  return pick;
}

/* Key i out of L1, then back from L2 and checked: a lookup, and a hit when
 * the tier served it. */
static void read_one(failover *f, unsigned i) {
  kva_storage *s = f->k.s;
  const kva_key *key = &f->k.keys[i];
  kva_prefetch *h;
  kva_buf buf;
  size_t hits = 0;
  int st;
  kva_delete(s, key, 1, 1, &st); /* KVA_KEY_NOT_EXIST when L1 evicted it: as good */
  if (kva_submit_prefetch(s, key, 1, &f->k.layout, 0, &h) != KVA_OK ||
      kva_wait_prefetch(s, h, TIER_SIDE_WAIT_MS, &hits) != KVA_OK) {
    count(&f->read_errors, 1);
    count(&f->reads, 1);
    return;
  }
  if (hits == 1 && kva_read_prefetched(s, key, 1, &buf) != KVA_OK) {
    count(&f->read_errors, 1);
    hits = 0;
  }
  if (hits == 1) {
    count(&f->wrong, wrong_bytes(&buf, i));
    kva_finish_read_prefetched(s, key, 1, 0);
  }
  count(&f->reads, (uint64_t)(hits == 1) << 32 | 1);
}

static void *reader_main(void *arg) {
  failover *f = arg;
  unsigned next = 0;
  while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED)) {
    long i = newest_old_enough(f, &next);
    if (i >= 0)
      read_one(f, (unsigned)i);
    else
      sleep_until(bench_now_ns() + WRITE_EVERY_NS / 4);
  }
  return NULL;
}

static void take(failover *f, sample *s) {
  kva_l2_tier_stats ts = {0};
  kva_storage_stats st = {0};
  uint64_t reads = counted(&f->reads);
  s->hits = reads >> 32;
  s->lookups = reads & 0xffffffffu;
  s->wrong = counted(&f->wrong);
  kva_l2_get_tier_stats(f->k.s, REDIS_TIER, &ts); /* KVA_EIO still fills stored_keys */
  kva_storage_get_stats(f->k.s, &st);
  s->stored = ts.stored_keys;
  s->store_failures = st.l2_store_failures;
}

static void event(const failover *f, const char *what, const rb_server *sv) {
  printf("measure=failover-event t=%.2f event=%s port=%d\n", since(f), what, sv->port);
  fflush(stdout);
}

static void kill_master(failover *f, watch *w) {
  rb_server_kill(&f->node[0]);
  w->killed = 1;
  printf("measure=failover-event t=%.2f event=kill-master port=%d replica=%d\n", since(f),
         f->node[0].port, f->node[RB_MASTERS].port);
  fflush(stdout);
}

/* After the kill, until the cluster is ok again with the replica promoted:
 * a surviving master's view of the cluster, and the replica's role. */
static void watch_cluster(failover *f, watch *w) {
  const rb_server *survivor = &f->node[1], *replica = &f->node[RB_MASTERS];
  if (!w->killed || (w->cluster_ok && w->promoted)) return;
  int ok = rb_cluster_state_ok(survivor);
  if (ok == 0 && !w->cluster_failed) w->cluster_failed = 1, event(f, "cluster-fail", survivor);
  if (!w->promoted && rb_is_master(replica) == 1)
    w->promoted = 1, event(f, "replica-promoted", replica);
  /* ok before any fail was seen is the state from before the kill */
  if (ok == 1 && !w->cluster_ok && (w->cluster_failed || w->promoted))
    w->cluster_ok = 1, event(f, "cluster-ok", survivor);
}

/* The tier's bypass turning on or off; 1 while it is on. */
static int watch_bypass(failover *f, watch *w) {
  int on = kva_tier_bypassed(f->k.s, REDIS_TIER) == 1;
  if (on != w->bypassed) {
    printf("measure=failover-event t=%.2f event=%s\n", since(f),
           on ? "tier-bypassed" : "tier-unbypassed");
    fflush(stdout);
  }
  return w->bypassed = on;
}

/* One second's line, and its share of the summary when it comes after the
 * kill. */
static void print_second(unsigned t, const sample *a, const sample *b, int bypassed,
                         after_kill *after) {
  uint64_t hits = b->hits - a->hits, lookups = b->lookups - a->lookups;
  uint64_t stores = b->stored - a->stored;
  printf("measure=failover t=%u", t);
  if (lookups)
    printf(" l2_hit_ratio=%.3f", (double)hits / (double)lookups);
  else
    printf(" l2_hit_ratio=n/a");
  printf(" stores=%llu store_failures=%llu bypassed=%d wrong=%llu", (unsigned long long)stores,
         (unsigned long long)(b->store_failures - a->store_failures), bypassed,
         (unsigned long long)(b->wrong - a->wrong));
  bench_no_target();
  printf("\n");
  fflush(stdout);
  if (t <= KILL_AT_S) return;
  after->lost += hits == 0 || stores == 0;
  after->hits += hits, after->lookups += lookups;
}

/* Every POLL_NS: the watchers, each second's line, and the kill at
 * KILL_AT_S (after that second's line: the kill opens the next second). */
static void sample_loop(failover *f, unsigned seconds, after_kill *after) {
  const unsigned per_s = (unsigned)(SEC_NS / POLL_NS);
  sample prev, cur;
  watch w = {0};
  int bypassed = 0;
  take(f, &prev);
  for (unsigned k = 1;; k++) {
    sleep_until(f->t0 + k * POLL_NS);
    watch_cluster(f, &w);
    bypassed |= watch_bypass(f, &w);
    if (k % per_s == 0) {
      take(f, &cur);
      print_second(k / per_s, &prev, &cur, bypassed, after);
      prev = cur, bypassed = w.bypassed;
      if (k / per_s >= seconds) return;
    }
    if (!w.killed && k >= KILL_AT_S * per_s) kill_master(f, &w);
  }
}

/* The totals of the whole workload, and the hit ratio of the seconds after
 * the kill together (n/a when nothing was asked for then). */
static void summary(failover *f, const after_kill *after, const sample *s) {
  printf("measure=failover-summary lost_seconds=%d", after->lost);
  if (after->lookups)
    printf(" l2_hit_ratio_after_kill=%.3f", (double)after->hits / (double)after->lookups);
  else
    printf(" l2_hit_ratio_after_kill=n/a");
  printf(" wrong=%llu hits=%llu lookups=%llu stores=%llu", (unsigned long long)s->wrong,
         (unsigned long long)s->hits, (unsigned long long)s->lookups,
         (unsigned long long)s->stored);
  bench_target("failover", "wrong", (double)s->wrong, "<=", 0);
  printf("\n");
  if (counted(&f->read_errors) || counted(&f->write_failures))
    printf("# failover: %llu prefetches or reads failed outright, %llu writes failed\n",
           (unsigned long long)counted(&f->read_errors),
           (unsigned long long)counted(&f->write_failures));
  fflush(stdout);
}

/* The workload on a started runtime: the threads, the seconds, then the
 * totals in *total. 0, or -1 when a thread did not start. */
static int run(failover *f, unsigned seconds, sample *total, after_kill *after) {
  pthread_t wr, rd;
  f->t0 = bench_now_ns();
  if (pthread_create(&wr, NULL, writer_main, f) != 0) return -1;
  int rc = -1;
  if (pthread_create(&rd, NULL, reader_main, f) == 0) {
    sample_loop(f, seconds, after);
    rc = 0;
    __atomic_store_n(&f->stop, 1, __ATOMIC_RELAXED); /* a flag polled between operations */
    pthread_join(rd, NULL);
  }
  __atomic_store_n(&f->stop, 1, __ATOMIC_RELAXED); /* as above */
  pthread_join(wr, NULL);
  take(f, total);
  return rc;
}

static void header(const bench_opts *o, const rb_server *node, unsigned seconds) {
  char version[128];
  redis_version(version, sizeof version);
  printf("suite=redis-failover workers=%d server=%s:%d (started by kvbench) masters=%d "
         "replicas=%d node_timeout_ms=%d timeout_ms=%d object=%dKiB write_every_ms=%llu "
         "read_age_s=%llu seconds=%u kill_at_s=%d version=\"%s\"\n",
         o->workers, node[0].host, node[0].port, RB_MASTERS, RB_MASTERS, NODE_TIMEOUT_MS,
         TIER_TIMEOUT_MS, OBJECT_BYTES / 1024, WRITE_EVERY_NS / 1000000ull, READ_AGE_NS / SEC_NS,
         seconds, KILL_AT_S, version);
  if (seconds <= KILL_AT_S)
    printf("# failover: no master killed (the workload ends before %d s)\n", KILL_AT_S);
  fflush(stdout);
}

/* The runtime, the workload, the summary; 0, or 1 when the pass could not
 * run or read a wrong byte. */
static int run_kvact(const bench_opts *o, failover *f, unsigned seconds) {
  char tier[2048];
  unsigned n = seconds * (unsigned)(SEC_NS / WRITE_EVERY_NS) + 100;
  redis_tier_json(o, f->node, RB_MASTERS, 1, TIER_TIMEOUT_MS, tier, sizeof tier);
  tier_side_start_l1(&f->k, o->workers, "kvbench-redis-failover", n, OBJECT_BYTES, REDIS_TIER, tier,
                     L1_BYTES);
  f->written_at = calloc(n, sizeof(*f->written_at));
  int rc = 1, ran = -1;
  sample total;
  after_kill after = {0};
  if (f->k.ok && f->written_at && (ran = run(f, seconds, &total, &after)) == 0) {
    summary(f, &after, &total);
    rc = total.wrong ? 1 : 0;
  }
  if (!f->k.ok) printf("# kvact side unavailable: %s\n", f->k.why);
  if (ran != 0) bench_missed("failover");
  tier_side_stop(&f->k);
  free(f->written_at);
  return rc;
}

int redis_failover(const bench_opts *o) {
  rb_server node[RB_MAX_NODES] = {0};
  rb_cluster_opts co = {.replicas = 1, .node_timeout_ms = NODE_TIMEOUT_MS};
  /* an hour of keys is 3.6 M of them; more would be a typo */
  unsigned seconds = o->redis_failover_s < 3600 ? o->redis_failover_s : 3600;
  if (rb_cluster_start(node, &co) != 0) {
    bench_missed("failover");
    bench_suite_end("redis-failover");
    return 1;
  }
  header(o, node, seconds);
  failover f = {.node = node};
  int rc = run_kvact(o, &f, seconds);
  rb_cluster_stop(node);
  bench_suite_end("redis-failover");
  return rc;
}
