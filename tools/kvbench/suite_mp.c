/*
 * suite_mp.c — kvbench --suite mp: the round trips of multi-process mode
 * (an engine process asking kvactd over its Unix socket), against the
 * anchors of mp_anchor.h measured in the same run:
 *
 *  - rtt-1key: one single-key prefetch's frames (MP_RTT_REQ_BYTES out,
 *    MP_RTT_REP_BYTES back), one round trip at a time, p50/p99 and round
 *    trips per second: raw AF_UNIX stream (the limit) and ZeroMQ REQ/REP
 *    over ipc:// (LMCache's transport);
 *  - batch64-<c>client: c client processes at once, each sending 64 keys'
 *    frames (MP_BATCH_REQ_BYTES, MP_BATCH_REP_BYTES back) to its own raw
 *    server, key-ops per second in total; --mp-iters / 10 round trips each.
 *
 * Reps interleave the anchors so they share the machine's drift; figures
 * are medians over --reps.
 */
#include <stdio.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/mp_anchor.h"

#define MAX_REPS 64

/* Each rep's figures of one anchor. */
typedef struct rtt_reps {
  double p50[MAX_REPS], p99[MAX_REPS], rate[MAX_REPS];
} rtt_reps;

static int rtt_rep(int (*anchor)(size_t, rtt_result *), size_t iters, rtt_reps *v, int r) {
  rtt_result x;
  if (anchor(iters, &x) != 0) return -1;
  v->p50[r] = x.p50_us;
  v->p99[r] = x.p99_us;
  v->rate[r] = x.rate_per_s;
  return 0;
}

static void print_rtt(const char *anchor, rtt_reps *v, int reps) {
  printf("measure=rtt-1key anchor=%s p50_us=%.2f p99_us=%.2f rate=%.4g unit=round-trips/s\n",
         anchor, bench_median(v->p50, reps), bench_median(v->p99, reps),
         bench_median(v->rate, reps));
}

static int bench_rtt(const bench_opts *o, int reps) {
  static rtt_reps unix_raw, zmq;
  for (int r = 0; r < reps; r++)
    if (rtt_rep(anchor_unix_rtt, o->mp_iters, &unix_raw, r) != 0 ||
        rtt_rep(anchor_zmq_rtt, o->mp_iters, &zmq, r) != 0)
      return -1;
  /* kvact's figures are added by the session that builds kvactd: the same
   * round trip as kva_submit_prefetch + kva_wait_prefetch of one resident
   * key through client.socket, with ratios to both anchors. */
  print_rtt("unix-stream", &unix_raw, reps);
  print_rtt("zmq-reqrep-ipc", &zmq, reps);
  fflush(stdout);
  return 0;
}

static int bench_batch(const bench_opts *o, int reps) {
  static const int clients[] = {1, 2, 4};
  for (int c = 0; c < 3; c++) {
    double v[MAX_REPS];
    for (int r = 0; r < reps; r++)
      if (anchor_unix_batch(clients[c], o->mp_iters / 10 + 1, &v[r]) != 0) return -1;
    /* kvact's figures are added by the session that builds kvactd: 64-key
     * calls from as many client processes, kvact=... ratio=... */
    printf("measure=batch64-%dclient anchor=unix-stream:%.4g unit=key-ops/s\n", clients[c],
           bench_median(v, reps));
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
  if (bench_rtt(o, reps) != 0 || bench_batch(o, reps) != 0) return 1;
  return 0;
}
