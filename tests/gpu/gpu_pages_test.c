/*
 * gpu_pages_test.c — KVA_KV_PAGES on the host device (kvact.h "GPU copy"):
 * whole pages (one block of one layer) moved bit for bit between a paged
 * cache and KV_PAGES chunks, with blocks contiguous per layer (vLLM's
 * LB.. layouts) and strided (BL..: blocks-first, layers interleaved, with
 * and without padding), bf16 and fp16, skipped blocks, partial last chunks
 * and blocks; slot runs that are not whole blocks refused, nothing kept.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "kvact.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/fixture.h"

#define H KVA_DEVICE_HOST

/* Where a layer's pages sit in one backing buffer. */
typedef struct pages_geom {
  const char *name;
  kva_dtype dtype;
  uint32_t layers, blocks, block_size;
  uint64_t page_bytes;
  uint64_t block_stride; /* block b to b + 1 of a layer */
  uint64_t layer_offset; /* layer l's first page to layer l + 1's */
} pages_geom;

typedef struct pages_cache {
  kva_paged_kv d;
  void *layers[TEST_MAX_LAYERS];
  uint8_t *buf;
  size_t len;
} pages_cache;

/* LB..: each layer's blocks back to back, the layers one after another. */
static pages_geom layers_first(kva_dtype dt, uint64_t page) {
  return (pages_geom){"layers-first", dt, 3, 12, 4, page, page, 12 * page};
}

/* BL..: each block holds every layer's page (plus `pad` bytes). */
static pages_geom blocks_first(kva_dtype dt, uint64_t page, uint64_t pad) {
  return (pages_geom){
      pad ? "blocks-first padded" : "blocks-first", dt, 3, 12, 4, page, 3 * page + pad, page};
}

static void pages_init(pages_cache *c, const pages_geom *g) {
  memset(c, 0, sizeof(*c));
  c->len = (g->layers - 1) * g->layer_offset + (g->blocks - 1) * g->block_stride + g->page_bytes;
  c->buf = aligned_alloc(64, (c->len + 63) & ~(size_t)63);
  ck_assert_ptr_nonnull(c->buf);
  memset(c->buf, 0, c->len);
  for (uint32_t l = 0; l < g->layers; l++) c->layers[l] = c->buf + l * g->layer_offset;
  c->d = (kva_paged_kv){.device = H,
                        .format = KVA_KV_PAGES,
                        .dtype = g->dtype,
                        .num_layers = g->layers,
                        .num_blocks = g->blocks,
                        .block_size = g->block_size,
                        .layers = c->layers,
                        .block_stride = g->block_stride,
                        .page_bytes = g->page_bytes};
}

static void pages_fill(pages_cache *c, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < c->len; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
    c->buf[i] = (uint8_t)(x >> 24);
  }
}

/* The page of (layer, block), computed from the geometry alone. */
static uint8_t *page_at(const pages_geom *g, const pages_cache *c, uint32_t l, uint64_t block) {
  return c->buf + l * g->layer_offset + block * g->block_stride;
}

/* Token t of a request lives in block table[t / bs] (-1: skipped). */
static void table_slots(const int64_t *table, uint32_t bs, int64_t *slots, size_t n) {
  for (size_t t = 0; t < n; t++)
    slots[t] = table[t / bs] < 0 ? -1 : table[t / bs] * bs + (int64_t)(t % bs);
}

/* Checks every stored chunk against the source's pages (zeros for a
 * skipped block); the chunks stay read-locked for the load. */
static void check_chunks(kva_storage *s, const pages_geom *g, const pages_cache *src,
                         const kva_key *k, size_t n, uint32_t ct, const int64_t *slots,
                         size_t ntok) {
  kva_buf bufs[8];
  ck_assert_uint_le(n, 8);
  ck_assert_int_eq(kva_read_prefetched(s, k, n, bufs), KVA_OK);
  for (size_t c = 0; c < n; c++) {
    size_t first = c * ct, tokens = ntok - first < ct ? ntok - first : ct;
    uint32_t pages = (uint32_t)((tokens + g->block_size - 1) / g->block_size);
    ck_assert_uint_eq(bufs[c].len, g->layers * pages * g->page_bytes);
    for (uint32_t l = 0; l < g->layers; l++)
      for (uint32_t p = 0; p < pages; p++) {
        const uint8_t *got = (uint8_t *)bufs[c].ptr + (l * pages + p) * g->page_bytes;
        int64_t slot = slots[first + p * g->block_size];
        for (uint64_t i = 0; slot < 0 && i < g->page_bytes; i++) ck_assert_uint_eq(got[i], 0);
        if (slot >= 0)
          ck_assert_msg(
              !memcmp(got, page_at(g, src, l, (uint64_t)slot / g->block_size), g->page_bytes),
              "%s: chunk %zu layer %u page %u differs", g->name, c, l, p);
      }
  }
}

/* dst after the load: the source's pages where b maps them, zeros
 * everywhere else (other layers' pages and padding included). */
static void check_loaded(const pages_geom *g, const pages_cache *src, const pages_cache *dst,
                         const int64_t *a, const int64_t *b, size_t ntok) {
  uint8_t *want = calloc(1, dst->len);
  for (size_t t = 0; t < ntok; t += g->block_size) {
    if (b[t] < 0) continue;
    for (uint32_t l = 0; l < g->layers; l++)
      memcpy(want + l * g->layer_offset + (uint64_t)b[t] / g->block_size * g->block_stride,
             page_at(g, src, l, (uint64_t)a[t] / g->block_size), g->page_bytes);
  }
  ck_assert_msg(!memcmp(want, dst->buf, dst->len), "%s: the cache differs after load", g->name);
  free(want);
}

/* Store from src with block table ta, load into a zeroed dst with tb:
 * chunks and cache bit-exact, memcheck clean. */
static void pages_trip(const pages_geom *g, uint32_t ct, const int64_t *ta, const int64_t *tb,
                       size_t ntok, uint64_t seed) {
  kva_runtime *rt = gpu_test_runtime(H);
  kva_storage *s = kva_storage_of(rt);
  pages_cache src, dst;
  pages_init(&src, g);
  pages_init(&dst, g);
  pages_fill(&src, seed);
  int64_t a[64], b[64];
  ck_assert_uint_le(ntok, 64);
  table_slots(ta, g->block_size, a, ntok);
  table_slots(tb, g->block_size, b, ntok);
  kva_kv *ks = NULL, *kd = NULL;
  ck_assert_int_eq(kva_kv_register(s, &src.d, &ks), KVA_OK);
  ck_assert_int_eq(kva_kv_register(s, &dst.d, &kd), KVA_OK);
  size_t n = (ntok + ct - 1) / ct;
  kva_key k[8];
  gpu_test_keys(k, seed * 1000, n);
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_store(s, ks, k, n, ct, a, ntok, &op), KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  ck_assert_uint_eq(gpu_test_prefetch(s, k, n), n);
  check_chunks(s, g, &src, k, n, ct, a, ntok);
  ck_assert_int_eq(kva_kv_load(s, kd, k, n, ct, b, ntok, &op), KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  check_loaded(g, &src, &dst, a, b, ntok);
  fixture_memcheck_clean(s);
  kva_kv_unregister(ks);
  kva_kv_unregister(kd);
  free(src.buf);
  free(dst.buf);
  kva_runtime_shutdown(rt);
}

/* Blocks of 4 tokens, chunks of 8 (2 pages): 5 blocks out of order, the
 * third skipped; 19 tokens make chunks of 8 + 8 + 3, the last one a
 * partial chunk of one partial block. */
static const int64_t table_a[] = {5, 2, -1, 7, 0};
static const int64_t table_b[] = {9, 11, -1, 3, 6};

START_TEST(round_trip_is_bit_exact_for_contiguous_and_strided_pages) {
  static const kva_dtype dts[] = {KVA_DT_BF16, KVA_DT_F16};
  for (size_t d = 0; d < 2; d++) {
    uint64_t page = 2 /* heads */ * 4 /* tokens */ * 32 /* K|V */ * 2; /* bytes */
    pages_geom gs[] = {layers_first(dts[d], page), blocks_first(dts[d], page, 0),
                       blocks_first(dts[d], page, 64)};
    for (size_t i = 0; i < 3; i++) {
      pages_trip(&gs[i], 8, table_a, table_b, 16, 10 + d * 3 + i); /* whole chunks */
      pages_trip(&gs[i], 8, table_a, table_b, 19, 20 + d * 3 + i); /* partial last chunk */
    }
  }
}
END_TEST

/* 1 head x 4 tokens x 3 elements: 24-byte pages take the memcpy path;
 * one chunk of 1 token moves one whole page. */
START_TEST(pages_that_are_not_a_multiple_of_sixteen_bytes) {
  pages_geom g = blocks_first(KVA_DT_F16, 24, 0);
  pages_trip(&g, 8, table_a, table_b, 19, 31);
  pages_trip(&g, 4, table_a, table_b, 1, 32);
}
END_TEST

START_TEST(the_chunk_layout_is_layers_pages_page) {
  kva_runtime *rt = gpu_test_runtime(H);
  pages_geom g = blocks_first(KVA_DT_BF16, 256, 0);
  pages_cache c;
  pages_init(&c, &g);
  kva_kv *kv = NULL;
  ck_assert_int_eq(kva_kv_register(kva_storage_of(rt), &c.d, &kv), KVA_OK);
  kva_layout l = kva_kv_chunk_layout(kv, 8);
  ck_assert_uint_eq(l.ntensors, 1);
  ck_assert_uint_eq(l.tensor[0].ndim, 3);
  ck_assert_uint_eq(l.tensor[0].shape[0], 3);
  ck_assert_uint_eq(l.tensor[0].shape[1], 2);
  ck_assert_uint_eq(l.tensor[0].shape[2], 128);
  ck_assert_int_eq(l.tensor[0].dtype, KVA_DT_BF16);
  l = kva_kv_chunk_layout(kv, 5); /* a partial chunk: its blocks, rounded up */
  ck_assert_uint_eq(l.tensor[0].shape[1], 2);
  ck_assert_uint_eq(kva_layout_bytes(&l), 3 * 2 * 256);
  kva_kv_unregister(kv);
  free(c.buf);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(a_bad_pages_description_is_refused) {
  kva_runtime *rt = gpu_test_runtime(H);
  kva_storage *s = kva_storage_of(rt);
  pages_geom g = blocks_first(KVA_DT_BF16, 256, 0);
  pages_cache c;
  pages_init(&c, &g);
  kva_paged_kv bad;
  kva_kv *kv = NULL;
  uint64_t *fields[] = {&bad.page_bytes, &bad.page_bytes, &bad.block_stride, &bad.block_stride};
  uint64_t values[] = {0, 255 /* half an element */, 255 /* pages overlap */, UINT64_MAX / 4};
  for (size_t i = 0; i < 4; i++) {
    bad = c.d;
    *fields[i] = values[i];
    ck_assert_int_eq(kva_kv_register(s, &bad, &kv), KVA_EINVAL);
  }
  bad = c.d;
  bad.num_heads = bad.head_dim = 0; /* not read for pages */
  ck_assert_int_eq(kva_kv_register(s, &bad, &kv), KVA_OK);
  kva_kv_unregister(kv);
  free(c.buf);
  kva_runtime_shutdown(rt);
}
END_TEST

/* Each mapping breaks the whole-block rule once; the store and the load
 * are refused before anything is reserved or read. */
START_TEST(slot_runs_that_are_not_whole_blocks_are_refused) {
  kva_runtime *rt = gpu_test_runtime(H);
  kva_storage *s = kva_storage_of(rt);
  pages_geom g = layers_first(KVA_DT_BF16, 256);
  pages_cache c;
  pages_init(&c, &g);
  kva_kv *kv = NULL;
  ck_assert_int_eq(kva_kv_register(s, &c.d, &kv), KVA_OK);
  kva_key k[2];
  gpu_test_keys(k, 0, 2);
  int64_t good[16];
  table_slots(table_a, 4, good, 16);
  struct {
    size_t at;
    int64_t slot;
  } breaks[] = {
      {0, 21}, /* a block's first slot is not block-aligned: 21 of block 5 */
      {4, 9},  /* starts at offset 1 of block 2 */
      {6, 11}, /* out of order inside block 2 (8, 9, 11, 11) */
      {13, 3}, /* the run jumps to block 0 in the middle of block 7 */
      {9, 5},  /* a skipped block (8..11) with a slot set */
      {8, 0},  /* block 0's first slot, the rest of the run -1 */
  };
  kva_op *op = NULL;
  for (size_t i = 0; i < sizeof(breaks) / sizeof(breaks[0]); i++) {
    int64_t slots[16];
    memcpy(slots, good, sizeof(slots));
    slots[breaks[i].at] = breaks[i].slot;
    ck_assert_int_eq(kva_kv_store(s, kv, k, 2, 8, slots, 16, &op), KVA_EINVAL);
    ck_assert_int_eq(kva_kv_load(s, kv, k, 2, 8, slots, 16, &op), KVA_EINVAL);
  }
  /* chunks that are not whole blocks: 6 tokens of blocks of 4 */
  ck_assert_int_eq(kva_kv_store(s, kv, k, 2, 6, good, 12, &op), KVA_EINVAL);
  ck_assert_ptr_null(op);
  /* the good mapping passes */
  ck_assert_int_eq(kva_kv_store(s, kv, k, 2, 8, good, 16, &op), KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  kva_storage_stats st;
  ck_assert_int_eq(kva_storage_get_stats(s, &st), KVA_OK);
  ck_assert_uint_eq(st.l1_objects, 2);
  fixture_memcheck_clean(s);
  kva_kv_unregister(kv);
  free(c.buf);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("gpu_pages");
  TCase *t = tcase_create("host");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, round_trip_is_bit_exact_for_contiguous_and_strided_pages);
  tcase_add_test(t, pages_that_are_not_a_multiple_of_sixteen_bytes);
  tcase_add_test(t, the_chunk_layout_is_layers_pages_page);
  tcase_add_test(t, a_bad_pages_description_is_refused);
  tcase_add_test(t, slot_runs_that_are_not_whole_blocks_are_refused);
  suite_add_tcase(s, t);
  return s;
}
