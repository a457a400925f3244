/*
 * kv_geom.h — where a token's row lives, in a paged KV cache and in a
 * KV_2LTD chunk. Shared by the host device (C) and the CUDA kernels (nvcc),
 * so both compute the very same offsets.
 *
 * A row is one token's heads * head_dim elements of K or V, contiguous in
 * both layouts; every copy is a row copy. GEOM_PAGES copies pages instead:
 * one block of one layer, contiguous in the cache (its blocks block_stride
 * apart) and in a KV_PAGES chunk [layers, blocks of the chunk, page].
 */
#ifndef KVA_GPU_KV_GEOM_H
#define KVA_GPU_KV_GEOM_H

#include <stdint.h>

#ifdef __CUDACC__
#define GEOM_FN static inline __host__ __device__
#else
#define GEOM_FN static inline
#endif

enum { GEOM_FLASH = 0, GEOM_FLASHINFER = 1, GEOM_PAGES = 2 }; /* = kva_kv_format */

typedef struct kv_geom {
  uint32_t format;     /* GEOM_FLASH / GEOM_FLASHINFER / GEOM_PAGES */
  uint32_t num_layers; /* L */
  uint32_t num_blocks;
  uint32_t block_size;
  uint64_t row_bytes;    /* heads * head_dim * element size; 0 for pages */
  uint64_t block_stride; /* GEOM_PAGES: bytes between a layer's blocks */
  uint64_t page_bytes;   /* GEOM_PAGES: one block of one layer */
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

/* Pages (blocks) of a chunk of `tokens` tokens: a partial last block
 * moves its whole page. */
GEOM_FN uint32_t geom_chunk_pages(const kv_geom *g, uint32_t tokens) {
  return (uint32_t)(((uint64_t)tokens + g->block_size - 1) / g->block_size);
}

/* Byte offset, inside one layer of the paged cache, of block `block`'s
 * page. */
GEOM_FN uint64_t geom_page_offset(const kv_geom *g, uint64_t block) {
  return block * g->block_stride;
}

/* Byte offset, inside a KV_PAGES chunk of `pages` pages, of page p of
 * layer l. */
GEOM_FN uint64_t geom_chunk_page_offset(const kv_geom *g, uint32_t l, uint32_t pages, uint32_t p) {
  return ((uint64_t)l * pages + p) * g->page_bytes;
}

/* Slots per layer: a slot_mapping entry must be below this. */
GEOM_FN uint64_t geom_slots(const kv_geom *g) {
  return (uint64_t)g->num_blocks * g->block_size;
}

#endif
