/*
 * meter.c — meter.h's tier meter: queue levels, busy-time throughputs and
 * a round trip, each rate an exponential average.
 */
#include "l2/meter.h"

static double ewma(double old, double sample) {
  return old == 0 ? sample : old + METER_ALPHA * (sample - old);
}

void l2_meter_init(l2_meter *m) {
  *m = (l2_meter){0};
  pthread_mutex_init(&m->mu, NULL);
}

void l2_meter_destroy(l2_meter *m) {
  pthread_mutex_destroy(&m->mu);
}

static void sent(l2_gauge *g, uint64_t bytes, uint64_t now) {
  g->last_ns = now;
  if (g->inflight++ == 0) g->busy_since = now;
  g->inflight_bytes += bytes;
}

/* Folds the busy time and bytes gathered so far into the rate, once
 * there is a window of them. */
static void fold(l2_gauge *g, uint64_t now) {
  uint64_t busy = g->acc_busy_ns + (g->inflight && now > g->busy_since ? now - g->busy_since : 0);
  if (busy < METER_WINDOW_NS || g->acc_bytes == 0) return;
  g->bytes_per_s = ewma(g->bytes_per_s, (double)g->acc_bytes * 1e9 / (double)busy);
  g->acc_busy_ns = g->acc_bytes = 0;
  g->busy_since = now;
}

static void done(l2_gauge *g, uint64_t bytes, uint64_t moved, uint64_t now) {
  g->last_ns = now;
  if (g->inflight) g->inflight--;
  g->inflight_bytes -= bytes < g->inflight_bytes ? bytes : g->inflight_bytes;
  g->acc_bytes += moved;
  if (g->inflight == 0 && now > g->busy_since) {
    g->acc_busy_ns += now - g->busy_since;
    g->busy_since = now;
  }
  fold(g, now);
}

void l2_meter_sent(l2_meter *m, int load, uint64_t bytes, uint64_t now) {
  pthread_mutex_lock(&m->mu);
  sent(&m->all, bytes, now);
  if (load) sent(&m->loads, bytes, now);
  pthread_mutex_unlock(&m->mu);
}

void l2_meter_done(l2_meter *m, int load, uint64_t bytes, uint64_t moved, uint64_t now) {
  pthread_mutex_lock(&m->mu);
  done(&m->all, bytes, moved, now);
  if (load) done(&m->loads, bytes, moved, now);
  pthread_mutex_unlock(&m->mu);
}

void l2_meter_lookup(l2_meter *m, uint64_t ns, uint64_t now) {
  pthread_mutex_lock(&m->mu);
  /* up fast, down slowly: a round trip that just waited behind a burst
   * of stores is the one to expect next, until a run of quick ones */
  double x = (double)ns * 1e-9, w = x > m->latency_s ? 0.5 : 0.1;
  m->latency_s = m->latency_s == 0 ? x : m->latency_s + w * (x - m->latency_s);
  m->last_lookup_ns = now;
  pthread_mutex_unlock(&m->mu);
}

/* The loads' gauge once it has a rate, else all traffic's. Under mu. */
static load_plan_tier view(const l2_meter *m, const l2_gauge *g) {
  return (load_plan_tier){g->bytes_per_s, m->latency_s, (double)g->inflight_bytes};
}

void l2_meter_read(l2_meter *m, load_plan_tier *out) {
  pthread_mutex_lock(&m->mu);
  *out = view(m, m->loads.bytes_per_s > 0 ? &m->loads : &m->all);
  pthread_mutex_unlock(&m->mu);
}

void l2_meter_plan(l2_meter *m, uint64_t now, load_plan_tier *out) {
  pthread_mutex_lock(&m->mu);
  const l2_gauge *g = m->loads.bytes_per_s > 0 ? &m->loads : &m->all;
  if (g == &m->loads && m->loads.inflight == 0 && now - m->loads.last_ns > METER_STALE_NS &&
      now - m->explored_ns > METER_STALE_NS) {
    m->explored_ns = now;
    g = &m->all; /* judged on all traffic instead: what a load would wait behind */
  }
  *out = view(m, g);
  pthread_mutex_unlock(&m->mu);
}

int l2_meter_lookup_stale(l2_meter *m, uint64_t now) {
  pthread_mutex_lock(&m->mu);
  int stale = m->latency_s > 0 && now - m->last_lookup_ns > METER_STALE_NS;
  pthread_mutex_unlock(&m->mu);
  return stale;
}
