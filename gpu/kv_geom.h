/*
 * kv_geom.h — where a token's row lives, in a paged KV cache and in a
 * KV_2LTD chunk. Shared by the host device (C) and the CUDA kernels (nvcc),
 * so both compute the very same offsets.
 *
 * A row is one token's heads * head_dim elements of K or V, contiguous in
 * both layouts; every copy is a row copy.
 */
#ifndef KVA_GPU_KV_GEOM_H
#define KVA_GPU_KV_GEOM_H

#include <stdint.h>

#ifdef __CUDACC__
#define GEOM_FN static inline __host__ __device__
#else
#define GEOM_FN static inline
#endif

enum { GEOM_FLASH = 0, GEOM_FLASHINFER = 1 }; /* = kva_kv_format */

typedef struct kv_geom {
  uint32_t format;     /* GEOM_FLASH / GEOM_FLASHINFER */
  uint32_t num_layers; /* L */
  uint32_t num_blocks;
  uint32_t block_size;
  uint64_t row_bytes; /* heads * head_dim * element size */
} kv_geom;

/* Byte offset, inside one layer of the paged cache, of the row of token
 * slot `slot` for k (0) or v (1). */
GEOM_FN uint64_t geom_paged_offset(const kv_geom *g, uint32_t kv, uint64_t slot) {
  if (g->format == GEOM_FLASH) /* [2, blocks, block_size, row] */
    return ((uint64_t)kv * g->num_blocks * g->block_size + slot) * g->row_bytes;
  /* [blocks, 2, block_size, row] */
  uint64_t block = slot / g->block_size, off = slot % g->block_size;
  return ((block * 2 + kv) * g->block_size + off) * g->row_bytes;
}

/* Byte offset, inside a KV_2LTD chunk of `tokens` tokens, of the row of
 * token t of layer l for k (0) or v (1). */
GEOM_FN uint64_t geom_chunk_offset(const kv_geom *g, uint32_t kv, uint32_t l, uint32_t tokens,
                                   uint32_t t) {
  return (((uint64_t)kv * g->num_layers + l) * tokens + t) * g->row_bytes;
}

/* Tokens of chunk c when chunks hold chunk_tokens and the request ntokens. */
GEOM_FN uint32_t geom_chunk_tokens(uint32_t chunk_tokens, uint64_t ntokens, uint32_t c) {
  uint64_t first = (uint64_t)c * chunk_tokens;
  uint64_t left = ntokens - first;
  return left < chunk_tokens ? (uint32_t)left : chunk_tokens;
}

/* Slots per layer: a slot_mapping entry must be below this. */
GEOM_FN uint64_t geom_slots(const kv_geom *g) {
  return (uint64_t)g->num_blocks * g->block_size;
}

#endif
