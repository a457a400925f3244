/*
 * malloc_count.h — allocations made by this process so far. kvbench_counted
 * (and tests/wire's protocol_test) link malloc_count.c, which interposes
 * malloc process-wide; kvbench links malloc_count_stub.c and answers
 * MALLOC_COUNT_NONE, re-executing kvbench_counted for the suites that
 * count (main.c).
 */
#ifndef KVA_TOOLS_MALLOC_COUNT_H
#define KVA_TOOLS_MALLOC_COUNT_H
#include <stdint.h>
#define MALLOC_COUNT_NONE UINT64_MAX /* this process counts nothing */
uint64_t malloc_count(void);
#endif
