/*
 * meter.h — what one L2 tier is doing, measured by the two controllers
 * that talk to it (issue 30; docs/load-plan.md): the bytes sent to it and
 * not yet answered, its throughput while busy and its lookup round trip.
 * The load plan (load_plan.h) reads them to decide whether a chunk arrives
 * from the tier before the engine could compute it.
 *
 * Two gauges, one over all traffic (loads and stores) and one over loads
 * alone. Throughput is bytes moved over time busy (some request of the
 * kind outstanding), so a tier idle half the time is not taken for a slow
 * one. The loads' gauge is the one a load waits on: time a load spends
 * queued behind stores counts as busy time, so a tier that serves stores
 * first (a FIFO: the mock, a Redis connection) shows a lower load rate
 * while it stores, and one that serves loads first (the disk tier's read
 * budget) does not. A planner reads the loads' rate and queue once a load
 * was measured, and all traffic's before (a tier that only stored so far);
 * a load rate no load has refreshed for a while is measured again
 * (l2_meter_plan).
 *
 * Each rate is folded into an exponential average (weight METER_ALPHA)
 * once at least METER_WINDOW_NS of busy time has gathered. The round trip
 * is an exponential average that rises fast (0.5) and falls slowly (0.1):
 * a lookup that waited behind a burst of stores is what the next one
 * should expect. Clock:
 * kva_runtime_now_ns (virtual in deterministic mode, so tests see exact
 * rates). One small mutex per tier: the prefetch and store controllers may
 * run on two threads at once, and a planner reads all fields together.
 * Each call is one uncontended lock, per tier request (not per key): no
 * syscall, no allocation.
 */
#ifndef KVA_L2_METER_H
#define KVA_L2_METER_H

#include <pthread.h>
#include <stdint.h>

#include "l2/load_plan.h"

#define METER_WINDOW_NS 20000000ull /* 20 ms of busy time per rate sample */
#define METER_ALPHA 0.3
#define METER_STALE_NS 5000000000ull /* a rate or round trip this old is measured again */

/* Requests of one kind in flight and their busy-time throughput. */
typedef struct l2_gauge {
  uint32_t inflight;       /* requests sent, not answered */
  uint64_t inflight_bytes; /* their bytes */
  uint64_t busy_since;     /* when inflight last went 0 -> 1, or the last fold */
  uint64_t acc_busy_ns, acc_bytes;
  uint64_t last_ns;   /* the last request sent or answered */
  double bytes_per_s; /* 0 = not measured yet */
} l2_gauge;

typedef struct l2_meter {
  pthread_mutex_t mu;
  l2_gauge all, loads;
  double latency_s;        /* lookup round trip; 0 = not measured yet */
  uint64_t last_lookup_ns; /* when the last one was answered */
  uint64_t explored_ns;    /* the last plan let through to measure again */
} l2_meter;

void l2_meter_init(l2_meter *m);
void l2_meter_destroy(l2_meter *m);
/* A request carrying (a store) or fetching (a load) bytes was sent at now. */
void l2_meter_sent(l2_meter *m, int load, uint64_t bytes, uint64_t now);
/* That request was answered at now: `bytes` as sent, `moved` of them
 * actually stored or loaded (a failed request moves none). */
void l2_meter_done(l2_meter *m, int load, uint64_t bytes, uint64_t moved, uint64_t now);
/* A lookup's round trip, answered at now. */
void l2_meter_lookup(l2_meter *m, uint64_t ns, uint64_t now);
/* What a planner reads, at one instant: the loads' rate and queue once
 * measured, else all traffic's (see above), and the round trip. */
void l2_meter_read(l2_meter *m, load_plan_tier *out);
/* 1 when the round trip was measured but not for METER_STALE_NS: the
 * prober measures it again, off every request's path (prober.c). */
int l2_meter_lookup_stale(l2_meter *m, uint64_t now);
/* l2_meter_read for a plan at now. A tier the plans have kept from
 * loading for METER_STALE_NS (its last load rate too slow) would never be
 * measured again: once per METER_STALE_NS, one plan sees the gauge of all
 * traffic instead of the loads' (its rate, and everything queued, stores
 * included, which a load might wait behind); if that plan loads, the load
 * measures the tier anew. (The round trip of a tier the plans stopped
 * asking is kept fresh by the prober.) */
void l2_meter_plan(l2_meter *m, uint64_t now, load_plan_tier *out);

#endif
