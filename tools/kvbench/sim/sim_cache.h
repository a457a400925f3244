/*
 * sim_cache.h — a simulated engine's paged KV cache (sim_cache.c): vLLM's
 * flash layout per layer, registered with kva_kv_register, a block
 * allocator, and the KV pattern the engine writes and checks.
 */
#ifndef KVA_TOOLS_SIM_CACHE_H
#define KVA_TOOLS_SIM_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/cuda_lib.h"
#include "kvact.h"
#include "tools/kvbench/sim/sim.h"

#define SIM_PAGES SIM_MAX_KEYS /* chunks the engine's paged KV cache holds */
#define SIM_BLOCK 16           /* tokens per block of the paged cache */
#define SIM_MAX_LAYERS 128     /* of a model */

/* An engine's paged KV cache and its block allocator. On the host device
 * `mirror` is the cache itself; on a CUDA device it is a host copy that
 * the engine writes and checks, moved whole layers at a time (untimed). */
typedef struct sim_cache {
  int device;
  const cuda_api *api; /* CUDA only */
  void *stream;
  uint32_t nlayers, nblocks;
  size_t row, layer_bytes; /* bytes of one token's K (or V) in a layer */
  void *layers[SIM_MAX_LAYERS];
  uint8_t *mirror[SIM_MAX_LAYERS];
  kva_kv *kv;
  uint32_t *free_blocks, nfree;
  uint32_t batch[SIM_PAGES * SIM_CHUNK / SIM_BLOCK]; /* blocks of the batch */
  uint32_t nbatch;
  int64_t slots[SIM_PAGES * SIM_CHUNK]; /* the batch's slot mapping */
} sim_cache;

static inline uint64_t sim_rng_next(uint64_t *x) { /* splitmix64 */
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Allocates, prefaults and registers the cache on device (KVA_DEVICE_HOST
 * or a CUDA ordinal); its blocks shuffled by seed. */
int cache_init(sim_cache *c, const sim_model *m, kva_storage *s, int device, uint64_t seed);
void cache_free(sim_cache *c);
/* Host memory <-> the device's cache (CUDA only; untimed); 0 or -1. */
int cache_push(sim_cache *c);
int cache_pull(sim_cache *c);
/* Blocks for m chunks from the allocator and the slot mapping of their
 * tokens (chunk i's token t: slots[i * SIM_CHUNK + t]); back with unmap. */
void cache_map(sim_cache *c, size_t m);
void cache_unmap(sim_cache *c);
/* Chunk i of the mapping: written with key k's KV, overwritten where it
 * is checked, and its wrong bytes there against k's KV. */
void cache_fill(sim_cache *c, size_t i, const kva_key *k);
void cache_poison(sim_cache *c, size_t i);
uint64_t cache_check(const sim_cache *c, size_t i, const kva_key *k);

#endif
