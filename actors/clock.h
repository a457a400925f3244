/*
 * clock.h — cheap timestamps for receive-time statistics.
 *
 * clock_ticks() is rdtsc on x86-64 (a few ns, no syscall, no vDSO call);
 * clock_ticks_to_ns() converts with a factor calibrated once per process
 * against CLOCK_MONOTONIC. Elsewhere both fall back to CLOCK_MONOTONIC.
 */
#ifndef KVA_ACTORS_CLOCK_H
#define KVA_ACTORS_CLOCK_H

#include <stdint.h>

#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t clock_ticks(void) {
  return __rdtsc();
}
#else
uint64_t clock_ticks(void);
#endif
uint64_t clock_ticks_to_ns(uint64_t ticks);
uint64_t clock_mono_ns(void);
void clock_calibrate(void); /* idempotent; call before the first conversion */

#endif
