/*
 * malloc_count.h — allocations made by this process so far.
 */
#ifndef KVA_TOOLS_MALLOC_COUNT_H
#define KVA_TOOLS_MALLOC_COUNT_H
#include <stdint.h>
uint64_t malloc_count(void);
#endif
