/*
 * gpu_test_util.c — see gpu_test_util.h.
 */
#include "tests/gpu/gpu_test_util.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda_lib.h"
#include "tests/support/fixture.h"

#define SENTINEL_STATUS 0x5a5a /* a status no op reports */

static size_t dtype_bytes(kva_dtype dt) {
  return dt == KVA_DT_F32 ? 4 : (dt == KVA_DT_F16 || dt == KVA_DT_BF16) ? 2 : 1;
}

static const cuda_api *cuda(void) {
  const cuda_api *a = cuda_lib_api();
  ck_assert_ptr_nonnull(a);
  return a;
}

void cache_init(test_cache *c, int device, kva_kv_format f, kva_dtype dt, uint32_t layers,
                uint32_t blocks, uint32_t block_size, uint32_t heads, uint32_t head_dim) {
  ck_assert_uint_le(layers, TEST_MAX_LAYERS);
  memset(c, 0, sizeof(*c));
  c->d = (kva_paged_kv){.device = device,
                        .format = f,
                        .dtype = dt,
                        .num_layers = layers,
                        .num_blocks = blocks,
                        .block_size = block_size,
                        .num_heads = heads,
                        .head_dim = head_dim,
                        .layers = c->layers};
  c->row_bytes = dtype_bytes(dt) * heads * head_dim;
  c->layer_bytes = 2 * (size_t)blocks * block_size * c->row_bytes;
  for (uint32_t l = 0; l < layers; l++) {
    if (device == KVA_DEVICE_HOST)
      c->layers[l] = aligned_alloc(64, c->layer_bytes);
    else
      ck_assert_int_eq(cuda()->device_alloc(device, &c->layers[l], c->layer_bytes), 0);
    ck_assert_ptr_nonnull(c->layers[l]);
  }
  cache_zero(c);
}

static void cache_put_layer(test_cache *c, uint32_t l, const void *host) {
  if (c->d.device == KVA_DEVICE_HOST) {
    memcpy(c->layers[l], host, c->layer_bytes);
    return;
  }
  ck_assert_int_eq(cuda()->memcpy_async(c->layers[l], host, c->layer_bytes, CUDA_H2D, NULL), 0);
  ck_assert_int_eq(cuda()->stream_sync(NULL), 0);
}

void cache_get_layer(const test_cache *c, uint32_t l, void *host) {
  if (c->d.device == KVA_DEVICE_HOST) {
    memcpy(host, c->layers[l], c->layer_bytes);
    return;
  }
  ck_assert_int_eq(cuda()->memcpy_async(host, c->layers[l], c->layer_bytes, CUDA_D2H, NULL), 0);
  ck_assert_int_eq(cuda()->stream_sync(NULL), 0);
}

int cache_layer_equal(const test_cache *a, const test_cache *b, uint32_t l) {
  uint8_t *x = malloc(a->layer_bytes), *y = malloc(b->layer_bytes);
  ck_assert(x && y && a->layer_bytes == b->layer_bytes);
  cache_get_layer(a, l, x);
  cache_get_layer(b, l, y);
  int eq = memcmp(x, y, a->layer_bytes) == 0;
  free(x);
  free(y);
  return eq;
}

void cache_fill(test_cache *c, uint64_t seed) {
  uint8_t *buf = malloc(c->layer_bytes);
  ck_assert_ptr_nonnull(buf);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (uint32_t l = 0; l < c->d.num_layers; l++) {
    for (size_t i = 0; i < c->layer_bytes; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
      buf[i] = (uint8_t)(x >> 24);
    }
    cache_put_layer(c, l, buf);
  }
  free(buf);
}

void cache_zero(test_cache *c) {
  uint8_t *buf = calloc(1, c->layer_bytes);
  ck_assert_ptr_nonnull(buf);
  for (uint32_t l = 0; l < c->d.num_layers; l++) cache_put_layer(c, l, buf);
  free(buf);
}

void cache_free(test_cache *c) {
  for (uint32_t l = 0; l < c->d.num_layers; l++) {
    if (c->d.device == KVA_DEVICE_HOST)
      free(c->layers[l]);
    else
      cuda()->device_free(c->d.device, c->layers[l]);
  }
}

size_t ref_paged_offset(const test_cache *c, uint32_t kv, uint64_t slot) {
  size_t bs = c->d.block_size, block = slot / bs, off = slot % bs;
  if (c->d.format == KVA_KV_FLASH) /* [2][blocks][bs][row] */
    return ((kv * (size_t)c->d.num_blocks + block) * bs + off) * c->row_bytes;
  return ((block * 2 + kv) * bs + off) * c->row_bytes; /* [blocks][2][bs][row] */
}

kva_runtime *gpu_test_runtime(int device) {
  if (device == KVA_DEVICE_HOST) return fixture_storage(2, 64ull << 20, NULL);
  return fixture_storage(2, 64ull << 20, "l1.pinned=true", NULL);
}

void gpu_test_keys(kva_key *k, uint64_t first, size_t n) {
  for (size_t i = 0; i < n; i++) {
    k[i] = fixture_key(first + i);
    strcpy(k[i].model, "gpu_test");
  }
}

size_t gpu_test_prefetch(kva_storage *s, const kva_key *k, size_t n) {
  kva_prefetch *h = NULL;
  size_t hits = 0;
  ck_assert_int_eq(kva_submit_prefetch(s, k, n, NULL, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 10000, &hits), KVA_OK);
  return hits;
}

int gpu_test_wait(kva_op *op) {
  int st = SENTINEL_STATUS;
  ck_assert_int_eq(kva_op_wait(op, 10000, &st), KVA_OK);
  return st;
}

/* Chunk [first, first + tokens) as KV_2LTD, from host snapshots of the
 * source layers: the oracle for both devices. */
static void ref_chunk(const test_cache *c, uint8_t *const *snap, const int64_t *slots, size_t first,
                      uint32_t tokens, uint8_t *out) {
  uint32_t L = c->d.num_layers;
  for (uint32_t kv = 0; kv < 2; kv++)
    for (uint32_t l = 0; l < L; l++)
      for (uint32_t t = 0; t < tokens; t++) {
        uint8_t *dst = out + (((size_t)kv * L + l) * tokens + t) * c->row_bytes;
        int64_t slot = slots[first + t];
        if (slot < 0)
          memset(dst, 0, c->row_bytes);
        else
          memcpy(dst, snap[l] + ref_paged_offset(c, kv, (uint64_t)slot), c->row_bytes);
      }
}

static void append(uint8_t **buf, size_t *len, const void *p, size_t n) {
  *buf = realloc(*buf, *len + n);
  ck_assert_ptr_nonnull(*buf);
  memcpy(*buf + *len, p, n);
  *len += n;
}

/* Stores the source's tokens and checks every chunk against the oracle
 * (the chunks stay read-locked by the prefetch, for the load). */
static void trip_store(kva_storage *s, kva_kv *ks, const test_cache *src, const trip_case *tc,
                       const kva_key *k, size_t n, uint8_t *const *snap, trip_result *out) {
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_store(s, ks, k, n, tc->chunk_tokens, tc->slots, tc->ntokens, &op),
                   KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  ck_assert_uint_eq(gpu_test_prefetch(s, k, n), n);
  kva_buf *bufs = calloc(n, sizeof(*bufs));
  ck_assert_int_eq(kva_read_prefetched(s, k, n, bufs), KVA_OK);
  for (size_t c = 0; c < n; c++) {
    size_t first = c * tc->chunk_tokens, left = tc->ntokens - first;
    uint32_t tokens = left < tc->chunk_tokens ? (uint32_t)left : tc->chunk_tokens;
    size_t len = 2 * (size_t)tc->layers * tokens * src->row_bytes;
    ck_assert_uint_eq(bufs[c].len, len);
    uint8_t *ref = malloc(len);
    ref_chunk(src, snap, tc->slots, first, tokens, ref);
    ck_assert_msg(memcmp(bufs[c].ptr, ref, len) == 0, "chunk %zu differs from the reference", c);
    if (out) append(&out->chunks, &out->chunks_len, bufs[c].ptr, len);
    free(ref);
  }
  free(bufs);
}

/* Loads the chunks into dst and checks it: mapped rows from the source,
 * zeros elsewhere. */
static void trip_load(kva_storage *s, kva_kv *kd, const test_cache *dst, const trip_case *tc,
                      const kva_key *k, size_t n, uint8_t *const *snap, trip_result *out) {
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_load(s, kd, k, n, tc->chunk_tokens, tc->slots, tc->ntokens, &op), KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  uint8_t *want = malloc(dst->layer_bytes), *got = malloc(dst->layer_bytes);
  for (uint32_t l = 0; l < tc->layers; l++) {
    memset(want, 0, dst->layer_bytes);
    for (size_t t = 0; t < tc->ntokens; t++) {
      if (tc->slots[t] < 0) continue;
      for (uint32_t kv = 0; kv < 2; kv++) {
        size_t off = ref_paged_offset(dst, kv, (uint64_t)tc->slots[t]);
        memcpy(want + off, snap[l] + off, dst->row_bytes);
      }
    }
    cache_get_layer(dst, l, got);
    ck_assert_msg(memcmp(want, got, dst->layer_bytes) == 0, "layer %u differs after load", l);
    if (out) append(&out->dst, &out->dst_len, got, dst->layer_bytes);
  }
  free(want);
  free(got);
}

void trip_run(const trip_case *tc, trip_result *out) {
  if (out) memset(out, 0, sizeof(*out));
  kva_runtime *rt = gpu_test_runtime(tc->device);
  kva_storage *s = kva_storage_of(rt);
  test_cache src, dst;
  cache_init(&src, tc->device, tc->format, tc->dtype, tc->layers, tc->blocks, tc->block_size,
             tc->heads, tc->head_dim);
  cache_init(&dst, tc->device, tc->format, tc->dtype, tc->layers, tc->blocks, tc->block_size,
             tc->heads, tc->head_dim);
  cache_fill(&src, tc->seed);
  uint8_t *snap[TEST_MAX_LAYERS];
  for (uint32_t l = 0; l < tc->layers; l++) {
    snap[l] = malloc(src.layer_bytes);
    cache_get_layer(&src, l, snap[l]);
  }
  kva_kv *ks = NULL, *kd = NULL;
  ck_assert_int_eq(kva_kv_register(s, &src.d, &ks), KVA_OK);
  ck_assert_int_eq(kva_kv_register(s, &dst.d, &kd), KVA_OK);
  size_t n = (tc->ntokens + tc->chunk_tokens - 1) / tc->chunk_tokens;
  kva_key *k = calloc(n, sizeof(*k));
  gpu_test_keys(k, tc->seed * 1000, n);
  trip_store(s, ks, &src, tc, k, n, snap, out);
  trip_load(s, kd, &dst, tc, k, n, snap, out);
  fixture_memcheck_clean(s);
  kva_kv_unregister(ks);
  kva_kv_unregister(kd);
  for (uint32_t l = 0; l < tc->layers; l++) free(snap[l]);
  free(k);
  cache_free(&src);
  cache_free(&dst);
  kva_runtime_shutdown(rt);
}

void trip_result_free(trip_result *r) {
  free(r->chunks);
  free(r->dst);
}
