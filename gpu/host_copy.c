/*
 * host_copy.c — gather and scatter on the CPU, one layer at a time: the
 * host device's copy, and the reference the CUDA kernels are compared with
 * bit for bit (tests/gpu/gpu_cuda_test.c).
 *
 * A row is heads * head_dim elements (2 KiB for llama3-8b in bf16), a page
 * one block of one layer (KVA_KV_PAGES: 64 KiB for llama3-8b, blocks of 16
 * tokens); both are copied bytewise, so every dtype of the same size is
 * the same copy. Rows and pages whose length and addresses are multiples
 * of 16 bytes go through non-temporal 16-byte stores, as glibc's memcpy
 * does for a copy this large: the bytes are not read back soon by this
 * thread, and streaming them saves the read-for-ownership of every
 * destination line (about 2x against memcpy of each 2 KiB row). Others
 * use memcpy.
 */
#include <emmintrin.h>
#include <stdint.h>
#include <string.h>

#include "gpu/backend.h"

static void row_copy(void *dst, const void *src, uint64_t n) {
  if (((uintptr_t)dst | (uintptr_t)src | n) % 16) {
    memcpy(dst, src, n);
    return;
  }
  __m128i *d = dst;
  const __m128i *s = src;
  for (uint64_t i = 0; i < n / 16; i++) _mm_stream_si128(&d[i], _mm_load_si128(&s[i]));
}

static void row_zero(void *dst, uint64_t n) {
  memset(dst, 0, n);
}

/* Paged cache -> chunks; a token whose slot is -1 is stored as zeros, so
 * a chunk never carries stale pool bytes to L2. */
static void gather_chunk(const copy_job *j, const copy_chunk *c, uint32_t l) {
  const kv_geom *g = &j->g;
  const char *layer = j->layers[l];
  for (uint32_t kv = 0; kv < 2; kv++) {
    for (uint32_t t = 0; t < c->tokens; t++) {
      char *dst = (char *)c->buf + geom_chunk_offset(g, kv, l, c->tokens, t);
      int64_t slot = j->slots[c->first + t];
      if (slot < 0)
        row_zero(dst, g->row_bytes);
      else
        row_copy(dst, layer + geom_paged_offset(g, kv, (uint64_t)slot), g->row_bytes);
    }
  }
}

/* Chunks -> paged cache; a token whose slot is -1 is not written. */
static void scatter_chunk(const copy_job *j, const copy_chunk *c, uint32_t l) {
  const kv_geom *g = &j->g;
  char *layer = j->layers[l];
  for (uint32_t kv = 0; kv < 2; kv++) {
    for (uint32_t t = 0; t < c->tokens; t++) {
      int64_t slot = j->slots[c->first + t];
      if (slot < 0) continue;
      const char *src = (const char *)c->buf + geom_chunk_offset(g, kv, l, c->tokens, t);
      row_copy(layer + geom_paged_offset(g, kv, (uint64_t)slot), src, g->row_bytes);
    }
  }
}

/* Paged cache -> a KV_PAGES chunk, page by page; a skipped block (slot
 * -1, kv_io.c checked the run) is stored as zeros. */
static void gather_pages(const copy_job *j, const copy_chunk *c, uint32_t l) {
  const kv_geom *g = &j->g;
  const char *layer = j->layers[l];
  uint32_t pages = geom_chunk_pages(g, c->tokens);
  for (uint32_t p = 0; p < pages; p++) {
    char *dst = (char *)c->buf + geom_chunk_page_offset(g, l, pages, p);
    int64_t slot = j->slots[c->first + (uint64_t)p * g->block_size];
    if (slot < 0)
      row_zero(dst, g->page_bytes);
    else
      row_copy(dst, layer + geom_page_offset(g, (uint64_t)slot / g->block_size), g->page_bytes);
  }
}

/* A KV_PAGES chunk -> paged cache; a skipped block is not written. */
static void scatter_pages(const copy_job *j, const copy_chunk *c, uint32_t l) {
  const kv_geom *g = &j->g;
  char *layer = j->layers[l];
  uint32_t pages = geom_chunk_pages(g, c->tokens);
  for (uint32_t p = 0; p < pages; p++) {
    int64_t slot = j->slots[c->first + (uint64_t)p * g->block_size];
    if (slot < 0) continue;
    const char *src = (const char *)c->buf + geom_chunk_page_offset(g, l, pages, p);
    row_copy(layer + geom_page_offset(g, (uint64_t)slot / g->block_size), src, g->page_bytes);
  }
}

static void copy_chunk_layer(const copy_job *j, const copy_chunk *c, uint32_t l) {
  if (j->g.format == GEOM_PAGES)
    (j->dir == COPY_GATHER ? gather_pages : scatter_pages)(j, c, l);
  else
    (j->dir == COPY_GATHER ? gather_chunk : scatter_chunk)(j, c, l);
}

/* The fence orders the streaming stores before the layer is reported (a
 * reader on another thread must see its bytes). */
void host_copy_layer(const copy_job *j, uint32_t layer) {
  for (uint32_t i = 0; i < j->nchunks; i++) copy_chunk_layer(j, &j->chunks[i], layer);
  _mm_sfence();
}
