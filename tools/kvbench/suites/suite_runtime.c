/*
 * suite_runtime.c — kvbench --suite runtime: message throughput of the
 * actor runtime against CAF and raw ck_ring, measured in the same run.
 *
 * Every kvact measure is written the way its CAF twin is (tools/bench/):
 * ping-pong between two actors, fan-in from four senders that send in
 * bursts of 64 and then re-schedule themselves, a token passed round a
 * ring of 100 actors. Figures are medians over --reps repetitions.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvact.h"
#include "tools/kvbench/bench.h"
#include "tools/kvbench/malloc_count.h"

enum { M_PING = KVA_MSG_USER, M_PONG, M_DATA, M_GO, M_DONE, M_TOKEN };
#define FANIN_SENDERS 4
#define FANIN_BURST 64
#define RING_ACTORS 100

typedef struct cost {
  uint64_t messages, mallocs, eventfd_writes, wakes, overflowed, mutes;
} cost;

/* Starts the clock and the counters. */
typedef struct measure {
  kva_runtime *rt;
  uint64_t t0, mallocs0;
  kva_runtime_counters c0;
} measure;

static void measure_begin(measure *m, kva_runtime *rt) {
  m->rt = rt;
  kva_runtime_get_counters(rt, &m->c0);
  m->mallocs0 = malloc_count();
  m->t0 = bench_now_ns();
}

static double measure_end(measure *m, uint64_t messages, cost *out) {
  double secs = (double)(bench_now_ns() - m->t0) / 1e9;
  kva_runtime_counters c1;
  kva_runtime_get_counters(m->rt, &c1);
  out->messages += messages;
  out->mallocs += malloc_count() - m->mallocs0;
  out->eventfd_writes += c1.eventfd_writes - m->c0.eventfd_writes;
  out->wakes += c1.worker_wakes - m->c0.worker_wakes;
  out->overflowed += c1.overflowed - m->c0.overflowed;
  out->mutes += c1.mutes - m->c0.mutes;
  return (double)messages / secs;
}

static void wait_done(kva_port *p) {
  kva_msg m;
  if (kva_port_recv(p, &m, NULL, 0, 600000) != KVA_OK) {
    fprintf(stderr, "kvbench: a measure did not finish\n");
    exit(1);
  }
}

/* ---- ping-pong ---- */
typedef struct pp {
  kva_actor *peer;
  kva_port *done;
  uint64_t left;
} pp;

static void pp_receive(kva_actor *self, void *state, const kva_msg *m) {
  pp *s = state;
  if (m->type == M_PONG && --s->left == 0) {
    kva_send(kva_port_actor(s->done), M_DONE, NULL, 0, self, 0);
    return;
  }
  kva_send(s->peer, m->type == M_PING ? M_PONG : M_PING, NULL, 0, self, 0);
}
static const kva_behavior pp_behavior = {"bench.pingpong", pp_receive, NULL};

/* settings: NULL, or runtime.trace = true for the traced variant */
static double pingpong_with(int workers, uint64_t n, cost *c, const char *const *settings) {
  kva_runtime *rt = bench_start_with(workers, 0, settings);
  kva_port *done = kva_port_open(rt, "bench.done");
  pp a = {.done = done, .left = n}, b = {.done = done};
  kva_actor *pa = kva_spawn(rt, &pp_behavior, &a, NULL),
            *pb = kva_spawn(rt, &pp_behavior, &b, NULL);
  a.peer = pb;
  b.peer = pa;
  measure m;
  measure_begin(&m, rt);
  kva_send(pb, M_PING, NULL, 0, pa, 0);
  wait_done(done);
  double r = measure_end(&m, 2 * n, c);
  kva_runtime_shutdown(rt);
  return r;
}

static double run_pingpong(int workers, uint64_t n, cost *c) {
  return pingpong_with(workers, n, c, NULL);
}

/* Every send and receive recorded into the trace ring (nobody reads it:
 * the lanes wrap), what tracing costs the hot path. */
static double run_pingpong_traced(int workers, uint64_t n, cost *c) {
  static const char *const traced[] = {"runtime.trace", "true", NULL};
  return pingpong_with(workers, n, c, traced);
}

/* ---- fan-in ---- */
typedef struct sink {
  kva_port *done;
  uint64_t left;
} sink;

static void sink_receive(kva_actor *self, void *state, const kva_msg *m) {
  sink *s = state;
  if (--s->left == 0) kva_send(kva_port_actor(s->done), M_DONE, NULL, 0, self, 0);
}
static const kva_behavior sink_behavior = {"bench.sink", sink_receive, NULL};

typedef struct sender {
  kva_actor *to;
  uint64_t left;
} sender;

static void sender_receive(kva_actor *self, void *state, const kva_msg *m) {
  sender *s = state;
  for (int i = 0; i < FANIN_BURST && s->left; i++, s->left--)
    kva_send(s->to, M_DATA, &s->left, sizeof(s->left), self, 0);
  if (s->left) kva_send(self, M_GO, NULL, 0, self, 0);
}
static const kva_behavior sender_behavior = {"bench.sender", sender_receive, NULL};

/* Runs one fan-in round of n messages over the actors already spawned. */
static void fanin_round(sink *k, sender *s, kva_actor **sa, kva_port *done, uint64_t n) {
  k->left = n;
  for (int i = 0; i < FANIN_SENDERS; i++) {
    s[i].left = n / FANIN_SENDERS + (i == 0 ? n % FANIN_SENDERS : 0);
    kva_send(sa[i], M_GO, NULL, 0, NULL, 0);
  }
  wait_done(done);
}

static double run_fanin(int workers, uint64_t n, cost *c) {
  kva_runtime *rt = bench_start(workers, 0);
  kva_port *done = kva_port_open(rt, "bench.done");
  sink k = {.done = done};
  kva_actor *ka = kva_spawn(rt, &sink_behavior, &k, NULL);
  sender s[FANIN_SENDERS];
  kva_actor *sa[FANIN_SENDERS];
  for (int i = 0; i < FANIN_SENDERS; i++) {
    s[i] = (sender){ka, 0};
    sa[i] = kva_spawn(rt, &sender_behavior, &s[i], NULL);
  }
  /* a first round grows the overflow queue's node pool: steady state is
   * what the second round measures */
  fanin_round(&k, s, sa, done, n / 4 ? n / 4 : 1);
  measure m;
  measure_begin(&m, rt);
  fanin_round(&k, s, sa, done, n);
  double r = measure_end(&m, n, c);
  kva_runtime_shutdown(rt);
  return r;
}

/* ---- token ring ---- */
typedef struct ring_node {
  kva_actor *next;
  kva_port *done;
} ring_node;

static void ring_receive(kva_actor *self, void *state, const kva_msg *m) {
  ring_node *r = state;
  uint64_t left;
  memcpy(&left, m->data, sizeof(left));
  if (left == 0) {
    kva_send(kva_port_actor(r->done), M_DONE, NULL, 0, self, 0);
    return;
  }
  left--;
  kva_send(r->next, M_TOKEN, &left, sizeof(left), self, 0);
}
static const kva_behavior ring_behavior = {"bench.ring", ring_receive, NULL};

static double run_ring(int workers, uint64_t hops, cost *c) {
  kva_runtime *rt = bench_start(workers, 0);
  kva_port *done = kva_port_open(rt, "bench.done");
  ring_node nodes[RING_ACTORS];
  kva_actor *actors[RING_ACTORS];
  for (int i = 0; i < RING_ACTORS; i++) {
    nodes[i].done = done;
    actors[i] = kva_spawn(rt, &ring_behavior, &nodes[i], NULL);
  }
  for (int i = 0; i < RING_ACTORS; i++) nodes[i].next = actors[(i + 1) % RING_ACTORS];
  measure m;
  measure_begin(&m, rt);
  uint64_t left = hops;
  kva_send(actors[0], M_TOKEN, &left, sizeof(left), NULL, 0);
  wait_done(done);
  double r = measure_end(&m, hops, c);
  kva_runtime_shutdown(rt);
  return r;
}

typedef double (*runner)(int workers, uint64_t n, cost *c);

static double median_of(const bench_opts *o, runner fn, uint64_t n, cost *c) {
  double v[64];
  int reps = o->reps < 64 ? o->reps : 64;
  fn(o->workers, n / 10 ? n / 10 : 1, &(cost){0}); /* warm-up, not counted */
  for (int i = 0; i < reps; i++) v[i] = fn(o->workers, n, c);
  return bench_median(v, reps);
}

/* target: the ratio's lower bound, or 0 for none (issue 2's targets:
 * ping-pong and fan-in 3x CAF, fan-in 0.4x a bare ck_ring). */
static void print_line(const char *name, double kvact, const char *anchor, double a,
                       double target) {
  char measure[64];
  snprintf(measure, sizeof(measure), "%s/%s", name, anchor);
  if (a > 0)
    printf("measure=%s kvact=%.4g anchor=%s:%.4g ratio=%.2f", name, kvact, anchor, a, kvact / a);
  else
    printf("measure=%s kvact=%.4g anchor=%s:unavailable ratio=n/a", name, kvact, anchor);
  if (target > 0)
    bench_target(measure, NULL, a > 0 ? kvact / a : NAN, ">=", target);
  else
    bench_no_target();
  printf("\n");
  fflush(stdout);
}

int suite_runtime(const bench_opts *o) {
  static char caf[8192], ring[8192];
  char cmd[1024];
  snprintf(cmd, sizeof(cmd),
           "%s/caf_bench --workers %d --reps %d --pingpong %llu --fanin %llu --ring-hops %llu",
           o->anchors, o->workers, o->reps, (unsigned long long)o->pingpong,
           (unsigned long long)o->fanin, (unsigned long long)o->ring_hops);
  if (bench_capture(cmd, caf, sizeof(caf)) != 0) fprintf(stderr, "kvbench: %s failed\n", cmd);
  snprintf(cmd, sizeof(cmd), "%s/ring_anchor --reps %d --messages %llu", o->anchors, o->reps,
           (unsigned long long)o->ring_msgs);
  if (bench_capture(cmd, ring, sizeof(ring)) != 0) fprintf(stderr, "kvbench: %s failed\n", cmd);
  printf("suite=runtime workers=%d reps=%d (medians)\n", o->workers, o->reps);
  cost pc = {0}, fc = {0}, rc = {0};
  double ping = median_of(o, run_pingpong, o->pingpong, &pc);
  print_line("ping-pong", ping, "caf", bench_parse(caf, "ping-pong"), 3);
  double fan = median_of(o, run_fanin, o->fanin, &fc);
  print_line("fan-in", fan, "caf", bench_parse(caf, "fan-in"), 3);
  print_line("fan-in", fan, "ck_ring", bench_parse(ring, "mpsc-1p1c-ptr"), 0.4);
  double tok = median_of(o, run_ring, o->ring_hops, &rc);
  print_line("token-ring", tok, "caf", bench_parse(caf, "token-ring"), 0);
  cost tc = {0};
  double traced = median_of(o, run_pingpong_traced, o->pingpong, &tc);
  printf("measure=ping-pong-traced kvact=%.4g untraced=%.4g ratio=%.2f", traced, ping,
         traced / ping);
  bench_print_mallocs("mallocs_per_msg", bench_mallocs_per(tc.mallocs, tc.messages), 6);
  bench_no_target();
  printf("\n");
  const struct {
    const char *name;
    cost *c;
  } costs[] = {{"ping-pong", &pc}, {"fan-in", &fc}, {"token-ring", &rc}};
  for (int i = 0; i < 3; i++) {
    double n = (double)costs[i].c->messages;
    const cost *k = costs[i].c;
    double mallocs = bench_mallocs_per(k->mallocs, k->messages);
    printf("measure=%s", costs[i].name);
    bench_print_mallocs("mallocs_per_msg", mallocs, 6);
    printf(" eventfd_writes_per_msg=%.6f worker_wakes_per_msg=%.6f overflowed_per_msg=%.4f "
           "mutes_per_msg=%.6f",
           (double)k->eventfd_writes / n, (double)k->wakes / n, (double)k->overflowed / n,
           (double)k->mutes / n);
    /* 0 mallocs per message in steady state (a pool's growth now and then
     * rounds to 0 at 6 decimals); fan-in: <= 0.01 eventfd writes */
    char m[64];
    snprintf(m, sizeof(m), "%s-mallocs", costs[i].name);
    bench_target(m, "mallocs_per_msg", mallocs, "<=", 1e-5);
    if (costs[i].c == &fc)
      bench_target("fan-in-eventfd-writes", "eventfd_writes_per_msg", (double)k->eventfd_writes / n,
                   "<=", 0.01);
    printf("\n");
  }
  bench_suite_end("runtime");
  return 0;
}
