/*
 * clock.c — tick calibration (see clock.h).
 */
#include "actors/clock.h"

#include <pthread.h>
#include <time.h>

static double ns_per_tick = 1.0;
static pthread_once_t calibrated = PTHREAD_ONCE_INIT;

uint64_t clock_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__)
static void calibrate_once(void) {
  /* 2 ms is enough for ~0.1% accuracy; a histogram of log2 buckets needs
   * far less */
  uint64_t n0 = clock_mono_ns(), t0 = clock_ticks();
  while (clock_mono_ns() - n0 < 2000000) {
  }
  uint64_t n1 = clock_mono_ns(), t1 = clock_ticks();
  if (t1 > t0) ns_per_tick = (double)(n1 - n0) / (double)(t1 - t0);
}
#else
uint64_t clock_ticks(void) {
  return clock_mono_ns();
}
static void calibrate_once(void) {}
#endif

void clock_calibrate(void) {
  pthread_once(&calibrated, calibrate_once);
}

uint64_t clock_ticks_to_ns(uint64_t ticks) {
  return (uint64_t)((double)ticks * ns_per_tick);
}
