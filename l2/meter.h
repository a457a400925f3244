/*
 * meter.h — what one L2 tier is doing, measured by the two controllers
 * that talk to it (issue 30; docs/load-plan.md): the bytes sent to it and
 * not yet answered (its queue, loads and stores together), its throughput
 * while busy and its lookup round trip. The load plan (load_plan.h) reads
 * them to decide whether a chunk arrives from the tier before the engine
 * could compute it.
 *
 * Throughput is bytes moved over time busy (some request outstanding), so
 * a tier that is idle half the time is not taken for a slow one; it is
 * folded into an exponential average (weight METER_ALPHA) once at least
 * METER_WINDOW_NS of busy time has gathered. Clock: kva_runtime_now_ns
 * (virtual in deterministic mode, so tests see exact rates).
 *
 * One small mutex per tier: the prefetch and store controllers may run on
 * two threads at once, and a planner reads all fields together. Each call
 * is one uncontended lock, per tier request (not per key): no syscall, no
 * allocation.
 */
#ifndef KVA_L2_METER_H
#define KVA_L2_METER_H

#include <pthread.h>
#include <stdint.h>

#define METER_WINDOW_NS 20000000ull /* 20 ms of busy time per rate sample */
#define METER_ALPHA 0.3

typedef struct l2_meter {
  pthread_mutex_t mu;
  uint32_t inflight;       /* requests sent, not answered */
  uint64_t inflight_bytes; /* their bytes */
  uint64_t busy_since;     /* when inflight last went 0 -> 1, or the last fold */
  uint64_t acc_busy_ns, acc_bytes;
  double bytes_per_s; /* 0 = not measured yet */
  double latency_s;   /* lookup round trip; 0 = not measured yet */
} l2_meter;

/* What a planner reads, at one instant. */
typedef struct l2_meter_view {
  double bytes_per_s, latency_s, queued_bytes;
} l2_meter_view;

void l2_meter_init(l2_meter *m);
void l2_meter_destroy(l2_meter *m);
/* A request carrying (or fetching) bytes was sent at now. */
void l2_meter_sent(l2_meter *m, uint64_t bytes, uint64_t now);
/* That request was answered at now: `bytes` as sent, `moved` of them
 * actually stored or loaded (a failed request moves none). */
void l2_meter_done(l2_meter *m, uint64_t bytes, uint64_t moved, uint64_t now);
/* A lookup's round trip. */
void l2_meter_lookup(l2_meter *m, uint64_t ns);
void l2_meter_read(l2_meter *m, l2_meter_view *out);

#endif
