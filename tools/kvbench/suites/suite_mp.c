/*
 * suite_mp.c — kvbench --suite mp: multi-process mode (an engine process
 * asking a kvact daemon over its Unix socket), against the anchors of
 * mp_anchor.h measured in the same run:
 *
 *  - rtt-1key: one single-key prefetch's frames (MP_RTT_REQ_BYTES out,
 *    MP_RTT_REP_BYTES back), one round trip at a time, p50/p99 and round
 *    trips per second: raw AF_UNIX stream (the limit), ZeroMQ REQ/REP over
 *    ipc:// (LMCache's transport), and kvact: kva_submit_prefetch +
 *    kva_wait_prefetch of one resident key from a client process. The
 *    release (kva_finish_read_prefetched) is a second round trip, timed
 *    apart (release_*) and not in the rate; ratio_raw = kvact / raw
 *    (target >= 0.6), ratio_zmq = kvact / zmq (target >= 2);
 *  - batch64-<c>client: c client processes at once, each with 64 keys per
 *    call, --mp-iters / 10 calls each, key-ops per second in total: kvact's
 *    kva_lookup (pin 0, all 64 resident; target >= 1e6) and kva_touch
 *    (touch=), against c raw clients sending frames of the same sizes
 *    (MP_BATCH_REQ_BYTES, MP_BATCH_REP_BYTES back) to their own servers;
 *  - cycle-<size>: the write+read cycle of one chunk (reserve_write,
 *    memset, finish_write, prefetch, read, memcpy out, release, delete)
 *    through the daemon's shared pool from a client, against the same
 *    cycle in a runtime of its own (no socket); --cycle-bytes / 4 per rep
 *    and size; ratio target >= 0.9.
 *
 * One daemon (mp_kvact.h) serves the whole suite; every kvact client is a
 * child process, so this one never holds a runtime and forks freely. Reps
 * interleave kvact and its anchors so they share the machine's drift;
 * figures are medians over --reps.
 */
#include <stdio.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/suites/mp_anchor.h"
#include "tools/kvbench/suites/mp_kvact.h"

#define MAX_REPS 64
#define MiB (1024ull * 1024ull)
#define RTT_VS_RAW 0.6
#define RTT_VS_ZMQ 2.0
#define BATCH_TARGET 1e6
#define CYCLE_TARGET 0.9

/* Each rep's figures of one way of doing a round trip. */
typedef struct rtt_reps {
  double p50[MAX_REPS], p99[MAX_REPS], rate[MAX_REPS];
} rtt_reps;

static void rtt_keep(const rtt_result *x, rtt_reps *v, int r) {
  v->p50[r] = x->p50_us;
  v->p99[r] = x->p99_us;
  v->rate[r] = x->rate_per_s;
}

static int anchor_rep(int (*anchor)(size_t, rtt_result *), size_t iters, rtt_reps *v, int r) {
  rtt_result x;
  if (anchor(iters, &x) != 0) return -1;
  rtt_keep(&x, v, r);
  return 0;
}

static double rtt_mallocs[MAX_REPS]; /* per round trip, in the client process */

static int kvact_rep(const mp_daemon *d, size_t iters, rtt_reps *trip, rtt_reps *release, int r) {
  rtt_result t, l;
  if (kvact_rtt(d, iters, &t, &l, &rtt_mallocs[r]) != 0) return -1;
  rtt_keep(&t, trip, r);
  rtt_keep(&l, release, r);
  return 0;
}

static void print_rtt(const char *anchor, rtt_reps *v, int reps) {
  printf("measure=rtt-1key anchor=%s p50_us=%.2f p99_us=%.2f rate=%.4g unit=round-trips/s", anchor,
         bench_median(v->p50, reps), bench_median(v->p99, reps), bench_median(v->rate, reps));
}

static void print_kvact_rtt(rtt_reps *trip, rtt_reps *release, double raw, double zmq, int reps) {
  print_rtt("kvact", trip, reps);
  double rate = bench_median(trip->rate, reps);
  printf(" release_p50_us=%.2f release_p99_us=%.2f ratio_raw=%.2f",
         bench_median(release->p50, reps), bench_median(release->p99, reps), rate / raw);
  bench_target("rtt-1key/unix-stream", "ratio_raw", rate / raw, ">=", RTT_VS_RAW);
  printf(" ratio_zmq=%.2f", rate / zmq);
  bench_target("rtt-1key/zmq", "ratio_zmq", rate / zmq, ">=", RTT_VS_ZMQ);
  double mallocs = bench_median(rtt_mallocs, reps) / 2;
  bench_print_mallocs("mallocs_per_call", mallocs, 4);
  bench_target("rtt-1key-mallocs", "mallocs_per_call", mallocs, "<=", 0);
  printf("\n");
}

static int bench_rtt(const bench_opts *o, const mp_daemon *d, int reps) {
  static rtt_reps unix_raw, zmq, trip, release;
  for (int r = 0; r < reps; r++)
    if (anchor_rep(anchor_unix_rtt, o->mp_iters, &unix_raw, r) != 0 ||
        anchor_rep(anchor_zmq_rtt, o->mp_iters, &zmq, r) != 0 ||
        kvact_rep(d, o->mp_iters, &trip, &release, r) != 0)
      return -1;
  double raw_rate = bench_median(unix_raw.rate, reps), zmq_rate = bench_median(zmq.rate, reps);
  print_rtt("unix-stream", &unix_raw, reps);
  printf("\n");
  print_rtt("zmq-reqrep-ipc", &zmq, reps);
  printf("\n");
  print_kvact_rtt(&trip, &release, raw_rate, zmq_rate, reps);
  fflush(stdout);
  return 0;
}

static int bench_batch(const bench_opts *o, const mp_daemon *d, int reps) {
  static const int clients[] = {1, 2, 4};
  size_t iters = o->mp_iters / 10 + 1;
  for (int c = 0; c < 3; c++) {
    double raw[MAX_REPS], lookup[MAX_REPS], touch[MAX_REPS];
    for (int r = 0; r < reps; r++)
      if (anchor_unix_batch(clients[c], iters, &raw[r]) != 0 ||
          kvact_batch(d, clients[c], iters, 0, &lookup[r]) != 0 ||
          kvact_batch(d, clients[c], iters, 1, &touch[r]) != 0)
        return -1;
    double k = bench_median(lookup, reps), a = bench_median(raw, reps);
    char m[32];
    snprintf(m, sizeof m, "batch64-%dclient", clients[c]);
    printf("measure=%s kvact=%.4g anchor=unix-stream:%.4g ratio=%.3g", m, k, a, k / a);
    bench_target(m, NULL, k, ">=", BATCH_TARGET);
    printf(" unit=key-ops/s call=lookup touch=%.4g\n", bench_median(touch, reps));
    fflush(stdout);
  }
  return 0;
}

static int bench_cycle(const bench_opts *o, const mp_daemon *d, int reps) {
  static const size_t sizes[] = {8 * MiB, 32 * MiB};
  uint64_t total = o->cycle_bytes / 4;
  for (int z = 0; z < 2; z++) {
    double client[MAX_REPS], own[MAX_REPS];
    for (int r = 0; r < reps; r++)
      if (kvact_cycle(d, sizes[z], total, &client[r]) != 0 ||
          kvact_cycle(NULL, sizes[z], total, &own[r]) != 0)
        return -1;
    double k = bench_median(client, reps), a = bench_median(own, reps);
    char m[32];
    snprintf(m, sizeof m, "cycle-%lluMiB", (unsigned long long)(sizes[z] / MiB));
    printf("measure=%s kvact=%.3g anchor=in-process:%.3g ratio=%.3g", m, k / 1e9, a / 1e9, k / a);
    bench_target(m, NULL, k / a, ">=", CYCLE_TARGET);
    printf(" unit=GB/s\n");
    fflush(stdout);
  }
  return 0;
}

int suite_mp(const bench_opts *o) {
  int reps = o->reps < MAX_REPS ? o->reps : MAX_REPS;
  printf("suite=mp reps=%d (medians) iters=%llu rtt_bytes=%u/%u batch_bytes=%u/%u\n", reps,
         (unsigned long long)o->mp_iters, MP_RTT_REQ_BYTES, MP_RTT_REP_BYTES, MP_BATCH_REQ_BYTES,
         MP_BATCH_REP_BYTES);
  fflush(stdout);
  mp_daemon d;
  if (mp_daemon_start(&d) != 0) return 1;
  int rc =
      bench_rtt(o, &d, reps) != 0 || bench_batch(o, &d, reps) != 0 || bench_cycle(o, &d, reps) != 0;
  if (mp_daemon_stop(&d) != 0) {
    fprintf(stderr, "kvbench: mp: the daemon did not shut down cleanly\n");
    rc = 1;
  }
  if (rc) bench_missed("mp");
  bench_suite_end("mp");
  return rc;
}
