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

void l2_meter_lookup(l2_meter *m, uint64_t ns) {
  pthread_mutex_lock(&m->mu);
  m->latency_s = ewma(m->latency_s, (double)ns * 1e-9);
  pthread_mutex_unlock(&m->mu);
}

void l2_meter_read(l2_meter *m, l2_meter_view *out) {
  pthread_mutex_lock(&m->mu);
  const l2_gauge *g = m->loads.bytes_per_s > 0 ? &m->loads : &m->all;
  *out = (l2_meter_view){g->bytes_per_s, m->latency_s, (double)g->inflight_bytes};
  pthread_mutex_unlock(&m->mu);
}

void l2_meter_plan(l2_meter *m, uint64_t now, l2_meter_view *out) {
  pthread_mutex_lock(&m->mu);
  const l2_gauge *g = m->loads.bytes_per_s > 0 ? &m->loads : &m->all;
  *out = (l2_meter_view){g->bytes_per_s, m->latency_s, (double)g->inflight_bytes};
  if (m->loads.bytes_per_s > 0 && m->loads.inflight == 0 &&
      now - m->loads.last_ns > METER_STALE_NS && now - m->explored_ns > METER_STALE_NS) {
    m->explored_ns = now;
    out->bytes_per_s = 0;
  }
  pthread_mutex_unlock(&m->mu);
}
