/*
 * suite_redis.c — kvbench --suite redis: store and load bandwidth of 1 MiB
 * and 8 MiB objects through kvact's redis tier, against the best that
 * redis-benchmark reaches on the same server in the same run; once on one
 * server, once on a cluster of three masters (redis_servers.h), then a
 * failover pass (redis_failover.c: a master killed under a workload):
 *
 *  - the server: a redis-server this suite starts on a free loopback port
 *    (no persistence), or --redis-addr HOST:PORT (then no cluster pass and
 *    no failover pass: it kills a server, so only one it started);
 *  - store: N objects (--redis-objects, 64) reserved and filled, timed from
 *    finish_write to kva_flush's return;
 *  - load: with L1 cleared, a prefetch of the N keys timed to its wait
 *    (pipelined EXISTS, then GETs), every object checked;
 *  - kvact's tier runs with its defaults (connections, pipeline), or
 *    --redis-connections / --redis-pipeline;
 *  - anchor: redis-benchmark -t set / get -d SIZE swept over -c 1/2/4/8
 *    (per master in the cluster: --cluster -c 3/6/12/24) x -P 1/4/16, each
 *    point max(c x P, 128 MiB / SIZE) requests (bounded: the sweep of a rep
 *    moves a few GB); its requests per second times the size is its
 *    bandwidth. Each point's median over the reps is taken and the best
 *    point per size and direction is the anchor (its -c and -P printed).
 *
 * ratio = kvact / anchor, target >= 0.8 both ways. kvact's values carry a
 * header (key, layout, checksum) of a few hundred bytes more than the
 * anchor's. The reps interleave (SET sweep, kvact store, GET sweep, kvact
 * load) so both share the machine's drift.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/suites/redis_servers.h"
#include "tools/kvbench/suites/suite_redis.h"
#include "tools/kvbench/suites/tier_side.h"

#define MiB (1024ull * 1024ull)
#define TARGET 0.8
#define GB 1e9
#define MAX_REPS 64
#define POINT_BYTES (128 * MiB) /* an anchor point moves at least this much */

static const int sweep_c[] = {1, 2, 4, 8}, sweep_p[] = {1, 4, 16};
#define NC 4
#define NP 3

/* Where the suite runs: one server, or RB_MASTERS masters. */
typedef struct topo {
  const char *label; /* "" or "cluster-" in the measure names */
  rb_server *nodes;
  int nnodes;
  int cluster;
} topo;

enum { KV_STORE, KV_LOAD, NKV };
enum { A_SET, A_GET, NA };

typedef struct size_run {
  uint64_t size;
  double kv[NKV][MAX_REPS];
  double anchor[NA][NC][NP][MAX_REPS];
  int reps;
} size_run;

/* redis-benchmark's SET or GET bandwidth in GB/s at -c c -P p, or -1. */
static double anchor_pass(const topo *t, const char *test, uint64_t size, int c, int p) {
  char cmd[600], out[4096];
  unsigned n = (unsigned)(POINT_BYTES / size);
  if (n < (unsigned)(c * p)) n = (unsigned)(c * p);
  snprintf(cmd, sizeof cmd,
           "redis-benchmark -h '%s' -p %d%s -c %d -P %d -d %llu -n %u -t %s --csv 2>/dev/null",
           t->nodes[0].host, t->nodes[0].port, t->cluster ? " --cluster" : "", c, p,
           (unsigned long long)size, n, test);
  if (bench_capture(cmd, out, sizeof out) != 0) return -1;
  char want[16];
  snprintf(want, sizeof want, "\"%s\",\"", strcmp(test, "set") == 0 ? "SET" : "GET");
  const char *s = strstr(out, want);
  double rps = s ? atof(s + strlen(want)) : -1;
  return rps > 0 ? rps * (double)size / GB : -1;
}

static void sweep(const topo *t, size_run *r, int a, int rep) {
  for (int i = 0; i < NC; i++)
    for (int j = 0; j < NP; j++)
      r->anchor[a][i][j][rep] =
          anchor_pass(t, a == A_SET ? "set" : "get", r->size, sweep_c[i] * t->nnodes, sweep_p[j]);
}

static double med(const double *v, int reps) {
  double tmp[MAX_REPS];
  memcpy(tmp, v, sizeof(double) * (size_t)reps);
  return bench_median(tmp, reps);
}

/* The best point's median; its -c and -P. */
static double best(const topo *t, const size_run *r, int a, int *c, int *p) {
  double b = -1;
  for (int i = 0; i < NC; i++)
    for (int j = 0; j < NP; j++) {
      double m = med(r->anchor[a][i][j], r->reps);
      if (m > b) b = m, *c = sweep_c[i] * t->nnodes, *p = sweep_p[j];
    }
  return b;
}

/* The sweep's medians, for the record. */
static void print_sweep(const topo *t, const size_run *r, int a) {
  printf("measure=%sanchor-sweep-%s-%lluMiB", t->label, a == A_SET ? "set" : "get",
         (unsigned long long)(r->size / MiB));
  for (int i = 0; i < NC; i++)
    for (int j = 0; j < NP; j++)
      printf(" c%dP%d=%.3g", sweep_c[i] * t->nnodes, sweep_p[j], med(r->anchor[a][i][j], r->reps));
  printf(" unit=GB/s\n");
}

static void report(const topo *t, const size_run *r, const tier_side *k, int kvm, int a) {
  int c = 0, p = 0;
  double kv = k->ok ? med(r->kv[kvm], r->reps) : -1, an = best(t, r, a, &c, &p);
  char measure[64];
  snprintf(measure, sizeof measure, "%s%s-%lluMiB", t->label, kvm == KV_STORE ? "store" : "load",
           (unsigned long long)(r->size / MiB));
  printf("measure=%s", measure);
  printf(kv > 0 ? " kvact=%.3g" : " kvact=unavailable", kv);
  if (an > 0)
    printf(" anchor=redis-benchmark-%s-c%d-P%d:%.3g", a == A_SET ? "set" : "get", c, p, an);
  else
    printf(" anchor=redis-benchmark-%s:unavailable", a == A_SET ? "set" : "get");
  if (kv > 0 && an > 0)
    printf(" ratio=%.2f", kv / an);
  else
    printf(" ratio=n/a");
  bench_target(measure, NULL, kv > 0 && an > 0 ? kv / an : NAN, ">=", TARGET);
  printf(" unit=GB/s\n");
}

void redis_tier_json(const bench_opts *o, const rb_server *nodes, int n, int cluster,
                     int timeout_ms, char *out, size_t len) {
  int w = snprintf(out, len, "[{\"type\":\"redis\",\"name\":\"" REDIS_TIER "\",\"addrs\":[");
  for (int i = 0; i < n; i++)
    w += snprintf(out + w, len - (size_t)w, "%s\"%s:%d\"", i ? "," : "", nodes[i].host,
                  nodes[i].port);
  w += snprintf(out + w, len - (size_t)w, "],\"cluster\":%s", cluster ? "true" : "false");
  if (o->redis_connections)
    w += snprintf(out + w, len - (size_t)w, ",\"connections\":%u", o->redis_connections);
  if (o->redis_pipeline)
    w += snprintf(out + w, len - (size_t)w, ",\"pipeline\":%u", o->redis_pipeline);
  snprintf(out + w, len - (size_t)w, ",\"timeout_ms\":%d,\"namespace\":\"kvbench\"}]", timeout_ms);
}

/* The bandwidth passes' tier: every node a seed, a timeout no pass
 * reaches. */
static void tier_json(const bench_opts *o, const topo *t, char *out, size_t len) {
  redis_tier_json(o, t->nodes, t->nnodes, t->cluster, 60000, out, len);
}

static void kv_pass(tier_side *k, size_run *r, int slot, int fill, int store) {
  double secs = 0;
  int rc = store ? tier_side_store(k, fill, &secs) : tier_side_load(k, fill, &secs);
  if (k->ok && rc == 0)
    r->kv[store ? KV_STORE : KV_LOAD][slot] = (double)k->n * (double)r->size / secs / GB;
}

/* One size: a warm-up pass of kvact, then reps of (SET sweep, kvact
 * store, GET sweep, kvact load). */
static void run_size(const bench_opts *o, const topo *t, size_run *r, unsigned n, int reps) {
  char tier[2048], model[48];
  tier_json(o, t, tier, sizeof tier);
  tier_side k = {0};
  snprintf(model, sizeof model, "kvbench-redis-%s%llu", t->label,
           (unsigned long long)(r->size / MiB));
  tier_side_start(&k, o->workers, model, n, r->size, REDIS_TIER, tier);
  for (int rep = -1; rep < reps; rep++) {
    int slot = rep < 0 ? 0 : rep, fill = 5 + 3 * (rep + 1);
    if (rep >= 0) sweep(t, r, A_SET, rep);
    kv_pass(&k, r, slot, fill, 1);
    if (rep >= 0) sweep(t, r, A_GET, rep);
    kv_pass(&k, r, slot, fill, 0);
    if (rep >= 0) r->reps = rep + 1;
  }
  print_sweep(t, r, A_SET);
  print_sweep(t, r, A_GET);
  report(t, r, &k, KV_STORE, A_SET);
  report(t, r, &k, KV_LOAD, A_GET);
  if (!k.ok) printf("# kvact side unavailable: %s\n", k.why);
  fflush(stdout);
  tier_side_stop(&k);
}

static void run_topo(const bench_opts *o, const topo *t, int reps) {
  static size_run runs[2];
  runs[0] = (size_run){.size = 1 * MiB};
  runs[1] = (size_run){.size = 8 * MiB};
  for (int i = 0; i < 2; i++) run_size(o, t, &runs[i], o->redis_objects, reps);
}

void redis_version(char *out, size_t len) {
  if (bench_capture("redis-server --version 2>/dev/null", out, len) == 0)
    out[strcspn(out, "\n")] = 0;
  else
    snprintf(out, len, "unknown");
}

static void header(const bench_opts *o, const topo *t, int reps) {
  char version[128];
  redis_version(version, sizeof version);
  printf("suite=redis%s workers=%d reps=%d (medians) server=%s:%d%s masters=%d objects=%u "
         "connections=%s pipeline=%s version=\"%s\"\n",
         t->cluster ? "-cluster" : "", o->workers, reps, t->nodes[0].host, t->nodes[0].port,
         t->nodes[0].pid ? " (started by kvbench)" : "", t->nnodes, o->redis_objects,
         o->redis_connections ? "set" : "default", o->redis_pipeline ? "set" : "default", version);
  if (o->redis_connections || o->redis_pipeline)
    printf("# tier: connections=%u pipeline=%u (0 = default)\n", o->redis_connections,
           o->redis_pipeline);
  fflush(stdout);
}

static int run_cluster(const bench_opts *o, int reps) {
  rb_server nodes[RB_MAX_NODES] = {0};
  if (rb_cluster_start(nodes, NULL) != 0) {
    bench_missed("cluster");
    bench_suite_end("redis-cluster");
    return 1;
  }
  topo t = {.label = "cluster-", .nodes = nodes, .nnodes = RB_MASTERS, .cluster = 1};
  header(o, &t, reps);
  run_topo(o, &t, reps);
  rb_cluster_stop(nodes);
  bench_suite_end("redis-cluster");
  return 0;
}

/* --redis-only-failover with a flag that skips the failover pass. */
static int conflicting(const bench_opts *o) {
  if (!o->redis_only_failover || !(o->redis_addr || o->redis_no_cluster || o->redis_no_failover))
    return 0;
  fprintf(stderr, "kvbench: --redis-only-failover runs the pass that --redis-addr, "
                  "--redis-no-cluster and --redis-no-failover skip\n");
  return 1;
}

/* One server, then the cluster, then the failover pass: the cluster passes
 * need servers of their own, and the failover pass kills one it started,
 * so --redis-addr runs the first alone. */
int suite_redis(const bench_opts *o) {
  if (conflicting(o)) return 2;
  if (o->redis_only_failover) return redis_failover(o);
  int reps = o->reps < MAX_REPS ? o->reps : MAX_REPS;
  rb_server sv = {0};
  if (o->redis_addr ? rb_server_parse(&sv, o->redis_addr) : rb_server_start(&sv)) {
    if (o->redis_addr) fprintf(stderr, "kvbench: --redis-addr wants HOST:PORT\n");
    rb_server_stop(&sv);
    return 1;
  }
  topo t = {.label = "", .nodes = &sv, .nnodes = 1};
  header(o, &t, reps);
  run_topo(o, &t, reps);
  rb_server_stop(&sv);
  bench_suite_end("redis");
  if (o->redis_addr || o->redis_no_cluster) return 0;
  int rc = run_cluster(o, reps);
  return o->redis_no_failover ? rc : rc | redis_failover(o);
}
