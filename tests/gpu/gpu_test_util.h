/*
 * gpu_test_util.h — paged caches on a device, an independent reference of
 * the KV_2LTD gather, and a store -> load round trip, shared by the host
 * suite (gpu_test.c) and the CUDA suite (gpu_cuda_test.c).
 */
#ifndef KVA_TESTS_GPU_TEST_UTIL_H
#define KVA_TESTS_GPU_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#define TEST_MAX_LAYERS 8

/* A paged cache in host memory (KVA_DEVICE_HOST) or CUDA device memory. */
typedef struct test_cache {
  kva_paged_kv d;
  void *layers[TEST_MAX_LAYERS];
  size_t layer_bytes;
  size_t row_bytes;
} test_cache;

void cache_init(test_cache *c, int device, kva_kv_format f, kva_dtype dt, uint32_t layers,
                uint32_t blocks, uint32_t block_size, uint32_t heads, uint32_t head_dim);
void cache_fill(test_cache *c, uint64_t seed); /* pseudo-random bytes */
void cache_zero(test_cache *c);
void cache_get_layer(const test_cache *c, uint32_t l, void *host); /* layer_bytes */
/* Whether layer l of a and b (same shape) hold the same bytes. */
int cache_layer_equal(const test_cache *a, const test_cache *b, uint32_t l);
void cache_free(test_cache *c);
/* Byte offset of (kv, slot) in a layer, computed independently of gpu/. */
size_t ref_paged_offset(const test_cache *c, uint32_t kv, uint64_t slot);

/* One round trip: a source cache of `device` filled with seed, its tokens
 * stored as chunks (checked against the reference), prefetched, loaded
 * into a zeroed destination cache (checked: mapped rows equal the
 * source's, every other byte zero), memcheck clean. */
typedef struct trip_case {
  int device;
  kva_kv_format format;
  kva_dtype dtype;
  uint32_t layers, blocks, block_size, heads, head_dim;
  uint32_t chunk_tokens;
  const int64_t *slots;
  size_t ntokens;
  uint64_t seed;
} trip_case;
/* What a trip produced, for comparing devices bit for bit. */
typedef struct trip_result {
  uint8_t *chunks; /* every chunk's bytes, back to back */
  size_t chunks_len;
  uint8_t *dst; /* every destination layer, back to back */
  size_t dst_len;
} trip_result;
void trip_run(const trip_case *tc, trip_result *out); /* out may be NULL */
void trip_result_free(trip_result *r);

/* kva_storage of a 2-worker runtime with a 64 MiB L1, pinned for CUDA. */
kva_runtime *gpu_test_runtime(int device);
/* Keys of chunks [first, first + n) of model "gpu_test". */
void gpu_test_keys(kva_key *k, uint64_t first, size_t n);
/* submit + wait of a prefetch; returns the hit count. */
size_t gpu_test_prefetch(kva_storage *s, const kva_key *k, size_t n);
/* kva_op_wait forever; returns the op's status. */
int gpu_test_wait(kva_op *op);

#endif
