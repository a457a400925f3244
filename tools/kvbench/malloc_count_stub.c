/*
 * malloc_count_stub.c — malloc_count() in kvbench, the binary without the
 * interposer: glibc's malloc stays unwrapped for the simulation and the
 * suites that count nothing, and the counting suites read "unavailable"
 * if kvbench_counted could not be executed.
 */
#include "tools/kvbench/malloc_count.h"

uint64_t malloc_count(void) {
  return MALLOC_COUNT_NONE;
}
