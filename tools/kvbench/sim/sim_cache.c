/*
 * sim_cache.c — a simulated engine's paged KV cache: per layer [2, blocks,
 * SIM_BLOCK, heads, head_dim] bf16 (vLLM's flash layout) in device 0's
 * memory or host memory, registered with kva_kv_register; a block
 * allocator (a stack, shuffled at the start, so a batch's blocks are
 * scattered and differ from the ones its chunks were stored from); and the
 * pattern every chunk's KV follows, derived from its key, so a load is
 * checked byte for byte.
 */
#include <stdlib.h>
#include <string.h>

#include "tools/kvbench/sim/sim_cache.h"

/* The 8-byte word at index w of the chunk stored under k (a KV_2LTD
 * object [2, layers, SIM_CHUNK, row]). */
static uint64_t pattern_word(const kva_key *k, size_t w) {
  uint64_t h;
  memcpy(&h, k->hash, sizeof h);
  return h ^ (w * 0x9E3779B97F4A7C15ull);
}

/* The index in its chunk of the first word of token t's row of (kv, l). */
static size_t pattern_row(const sim_cache *c, uint32_t kv, uint32_t l, uint32_t t) {
  return (((size_t)kv * c->nlayers + l) * SIM_CHUNK + t) * (c->row / 8);
}

/* Byte offset of (kv, slot) in a layer of the flash layout. */
static size_t cache_offset(const sim_cache *c, uint32_t kv, int64_t slot) {
  return ((size_t)kv * c->nblocks * SIM_BLOCK + (size_t)slot) * c->row;
}

/* Host memory -> the device's cache (CUDA only; untimed). */
int cache_push(sim_cache *c) {
  if (c->device == KVA_DEVICE_HOST) return 0;
  for (uint32_t l = 0; l < c->nlayers; l++)
    if (c->api->memcpy_async(c->layers[l], c->mirror[l], c->layer_bytes, CUDA_H2D, c->stream))
      return -1;
  return c->api->stream_sync(c->stream) ? -1 : 0;
}

/* The device's cache -> host memory (CUDA only; untimed). */
int cache_pull(sim_cache *c) {
  if (c->device == KVA_DEVICE_HOST) return 0;
  for (uint32_t l = 0; l < c->nlayers; l++)
    if (c->api->memcpy_async(c->mirror[l], c->layers[l], c->layer_bytes, CUDA_D2H, c->stream))
      return -1;
  return c->api->stream_sync(c->stream) ? -1 : 0;
}

/* Blocks for m chunks from the allocator, and the slot mapping of their
 * tokens (chunk i's token t: the batch's token i * SIM_CHUNK + t). */
void cache_map(sim_cache *c, size_t m) {
  c->nbatch = (uint32_t)(m * SIM_CHUNK / SIM_BLOCK);
  for (uint32_t b = 0; b < c->nbatch; b++) c->batch[b] = c->free_blocks[--c->nfree];
  for (size_t t = 0; t < m * SIM_CHUNK; t++)
    c->slots[t] = (int64_t)c->batch[t / SIM_BLOCK] * SIM_BLOCK + (int64_t)(t % SIM_BLOCK);
}

/* The batch's blocks back, in the order taken: the stack's order churns. */
void cache_unmap(sim_cache *c) {
  for (uint32_t b = 0; b < c->nbatch; b++) c->free_blocks[c->nfree++] = c->batch[b];
  c->nbatch = 0;
}

/* Writes chunk i of the batch (key k): every token's K and V rows in every
 * layer hold the words of k's chunk object. */
void cache_fill(sim_cache *c, size_t i, const kva_key *k) {
  for (uint32_t kv = 0; kv < 2; kv++)
    for (uint32_t l = 0; l < c->nlayers; l++)
      for (uint32_t t = 0; t < SIM_CHUNK; t++) {
        uint64_t *row =
            (uint64_t *)(c->mirror[l] + cache_offset(c, kv, c->slots[i * SIM_CHUNK + t]));
        size_t w0 = pattern_row(c, kv, l, t);
        for (size_t w = 0; w < c->row / 8; w++) row[w] = pattern_word(k, w0 + w);
      }
}

/* The rows a load is checked on: the first, middle and last token of a
 * chunk, K and V of every layer. */
static const uint32_t check_tokens[] = {0, SIM_CHUNK / 2, SIM_CHUNK - 1};

/* Overwrites chunk i's checked rows, so only the load can make them right. */
void cache_poison(sim_cache *c, size_t i) {
  for (uint32_t kv = 0; kv < 2; kv++)
    for (uint32_t l = 0; l < c->nlayers; l++)
      for (size_t x = 0; x < sizeof check_tokens / sizeof check_tokens[0]; x++)
        memset(c->mirror[l] + cache_offset(c, kv, c->slots[i * SIM_CHUNK + check_tokens[x]]), 0xa5,
               c->row);
}

/* Wrong bytes among chunk i's checked rows. */
uint64_t cache_check(const sim_cache *c, size_t i, const kva_key *k) {
  uint64_t bad = 0;
  for (uint32_t kv = 0; kv < 2; kv++)
    for (uint32_t l = 0; l < c->nlayers; l++)
      for (size_t x = 0; x < sizeof check_tokens / sizeof check_tokens[0]; x++) {
        uint32_t t = check_tokens[x];
        const uint8_t *row = c->mirror[l] + cache_offset(c, kv, c->slots[i * SIM_CHUNK + t]);
        size_t w0 = pattern_row(c, kv, l, t);
        for (size_t w = 0; w < c->row / 8; w++) {
          uint64_t want = pattern_word(k, w0 + w), have;
          memcpy(&have, row + w * 8, 8);
          for (int b = 0; have != want && b < 8; b++)
            bad += ((want >> (8 * b)) & 0xff) != ((have >> (8 * b)) & 0xff);
        }
      }
  return bad;
}

/* Allocates, prefaults and registers an engine's paged cache on device
 * (KVA_DEVICE_HOST or a CUDA ordinal). */
int cache_init(sim_cache *c, const sim_model *m, kva_storage *s, int device, uint64_t seed) {
  c->device = device;
  c->nlayers = m->layers;
  c->nblocks = SIM_PAGES * SIM_CHUNK / SIM_BLOCK;
  c->row = (size_t)m->heads * m->head_dim * 2;
  c->layer_bytes = 2 * (size_t)c->nblocks * SIM_BLOCK * c->row;
  if (device != KVA_DEVICE_HOST &&
      (!(c->api = cuda_lib_api()) || c->api->stream_create(device, &c->stream)))
    return KVA_ENOTSUP;
  for (uint32_t l = 0; l < c->nlayers; l++) {
    if (!(c->mirror[l] = aligned_alloc(4096, c->layer_bytes))) return KVA_ENOMEM;
    memset(c->mirror[l], 0, c->layer_bytes); /* fault the pages in before any timing */
    if (device == KVA_DEVICE_HOST)
      c->layers[l] = c->mirror[l];
    else if (c->api->device_alloc(device, &c->layers[l], c->layer_bytes))
      return KVA_ENOMEM;
  }
  if (!(c->free_blocks = malloc(c->nblocks * sizeof(uint32_t)))) return KVA_ENOMEM;
  for (uint32_t i = 0; i < c->nblocks; i++) c->free_blocks[i] = i;
  for (uint32_t i = c->nblocks - 1; i > 0; i--) { /* scattered from the start */
    uint32_t j = (uint32_t)(sim_rng_next(&seed) % (i + 1)), x = c->free_blocks[i];
    c->free_blocks[i] = c->free_blocks[j];
    c->free_blocks[j] = x;
  }
  c->nfree = c->nblocks;
  kva_paged_kv d = {.device = device,
                    .format = KVA_KV_FLASH,
                    .dtype = KVA_DT_BF16,
                    .num_layers = c->nlayers,
                    .num_blocks = c->nblocks,
                    .block_size = SIM_BLOCK,
                    .num_heads = m->heads,
                    .head_dim = m->head_dim,
                    .layers = c->layers};
  return kva_kv_register(s, &d, &c->kv);
}

void cache_free(sim_cache *c) {
  if (c->kv) kva_kv_unregister(c->kv);
  for (uint32_t l = 0; l < c->nlayers; l++) {
    if (c->device != KVA_DEVICE_HOST && c->layers[l]) c->api->device_free(c->device, c->layers[l]);
    free(c->mirror[l]);
  }
  if (c->stream) c->api->stream_destroy(c->device, c->stream);
  free(c->free_blocks);
  *c = (sim_cache){0};
}
