/*
 * meter.c — meter.h's tier meter: a queue level, a busy-time throughput
 * and a round trip, each an exponential average.
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

void l2_meter_sent(l2_meter *m, uint64_t bytes, uint64_t now) {
  pthread_mutex_lock(&m->mu);
  if (m->inflight++ == 0) m->busy_since = now;
  m->inflight_bytes += bytes;
  pthread_mutex_unlock(&m->mu);
}

/* Folds the busy time and bytes gathered so far into the rate, once
 * there is a window of them. */
static void fold(l2_meter *m, uint64_t now) {
  uint64_t busy = m->acc_busy_ns + (m->inflight && now > m->busy_since ? now - m->busy_since : 0);
  if (busy < METER_WINDOW_NS || m->acc_bytes == 0) return;
  m->bytes_per_s = ewma(m->bytes_per_s, (double)m->acc_bytes * 1e9 / (double)busy);
  m->acc_busy_ns = m->acc_bytes = 0;
  m->busy_since = now;
}

void l2_meter_done(l2_meter *m, uint64_t bytes, uint64_t moved, uint64_t now) {
  pthread_mutex_lock(&m->mu);
  if (m->inflight) m->inflight--;
  m->inflight_bytes -= bytes < m->inflight_bytes ? bytes : m->inflight_bytes;
  m->acc_bytes += moved;
  if (m->inflight == 0 && now > m->busy_since) {
    m->acc_busy_ns += now - m->busy_since;
    m->busy_since = now;
  }
  fold(m, now);
  pthread_mutex_unlock(&m->mu);
}

void l2_meter_lookup(l2_meter *m, uint64_t ns) {
  pthread_mutex_lock(&m->mu);
  m->latency_s = ewma(m->latency_s, (double)ns * 1e-9);
  pthread_mutex_unlock(&m->mu);
}

void l2_meter_read(l2_meter *m, l2_meter_view *out) {
  pthread_mutex_lock(&m->mu);
  *out = (l2_meter_view){m->bytes_per_s, m->latency_s, (double)m->inflight_bytes};
  pthread_mutex_unlock(&m->mu);
}
