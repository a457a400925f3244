/*
 * tier_side.h — the kvact side of the L2 tier suites (disk, redis): a
 * runtime with one L2 tier, n objects of chunk_bytes each, stored through
 * L1 and the store controller and loaded back through prefetches, timed.
 */
#ifndef KVA_TOOLS_KVBENCH_TIER_SIDE_H
#define KVA_TOOLS_KVBENCH_TIER_SIDE_H

#include <stdint.h>

#include "kvact.h"

#define TIER_SIDE_WAIT_MS 120000 /* a pass that takes longer counts as hung */

typedef struct tier_side {
  kva_runtime *rt;
  kva_storage *s;
  const char *tier; /* its name in the config */
  kva_layout layout;
  uint64_t chunk_bytes;
  kva_key *keys;
  kva_buf *bufs;
  int *status;
  unsigned n;
  int ok;        /* 1 while the kvact side works */
  char why[512]; /* why it does not */
} tier_side;

/* Starts a runtime (workers, L1 big enough for the n objects and at least
 * 1 GiB, huge pages, prefetched objects temporary) whose l2 is tier_json,
 * a one-element array naming the tier `tier`; keys come from `model`. On
 * failure k->ok is 0 and k->why says why. */
void tier_side_start(tier_side *k, int workers, const char *model, unsigned n, uint64_t chunk_bytes,
                     const char *tier, const char *tier_json);
/* The same with an L1 of l1_bytes, for a workload that keeps fewer objects
 * in L1 than it has keys (they are read from L2 or evicted). */
void tier_side_start_l1(tier_side *k, int workers, const char *model, unsigned n,
                        uint64_t chunk_bytes, const char *tier, const char *tier_json,
                        uint64_t l1_bytes);
/* Writes the chunks (chunk i = bytes fill + i) and stores them; *secs is
 * the time from finish_write to kva_flush's return. 0, or -1 (k->why). */
int tier_side_store(tier_side *k, int fill, double *secs);
/* Clears L1 and loads the chunks back, checking them; *secs is the time
 * from submit to wait's return. 0, or -1 (k->why). */
int tier_side_load(tier_side *k, int fill, double *secs);
void tier_side_stop(tier_side *k);

#endif
