/*
 * gpu_cuda_test.c — the round trips of gpu_test.c, and KVA_KV_PAGES trips,
 * on CUDA device 0, each compared bit for bit with the same trip on the
 * host device (chunk bytes in L1 and the destination cache). Needs a GPU and a page-locked L1:
 * tagged manual, never run by CI.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "gpu/cuda_lib.h"
#include "kvact.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/fixture.h"

static void same_on_both(trip_case tc) {
  ck_assert_msg(cuda_device_probe(0) == KVA_OK, "no usable CUDA device 0 (see the log line)");
  trip_result host, cuda;
  tc.device = KVA_DEVICE_HOST;
  trip_run(&tc, &host);
  tc.device = 0;
  trip_run(&tc, &cuda);
  ck_assert_uint_eq(host.chunks_len, cuda.chunks_len);
  ck_assert_uint_eq(host.dst_len, cuda.dst_len);
  ck_assert_msg(memcmp(host.chunks, cuda.chunks, host.chunks_len) == 0, "chunks differ");
  ck_assert_msg(memcmp(host.dst, cuda.dst, host.dst_len) == 0, "loaded caches differ");
  trip_result_free(&host);
  trip_result_free(&cuda);
}

static trip_case base_case(kva_kv_format f, kva_dtype dt, const int64_t *slots, size_t n) {
  return (trip_case){.format = f,
                     .dtype = dt,
                     .layers = 4,
                     .blocks = 64,
                     .block_size = 16,
                     .heads = 8,
                     .head_dim = 128,
                     .chunk_tokens = 32,
                     .slots = slots,
                     .ntokens = n,
                     .seed = 11};
}

/* 100 tokens over shuffled blocks with holes: chunks of 32, the last 4. */
static void shuffled_slots(int64_t *slots, size_t n) {
  for (size_t t = 0; t < n; t++) slots[t] = (int64_t)(((t / 16) * 37 % 64) * 16 + t % 16);
  for (size_t t = 5; t < n; t += 13) slots[t] = -1;
}

START_TEST(cuda_matches_host_for_every_format_and_dtype) {
  static const kva_dtype dts[] = {KVA_DT_BF16, KVA_DT_F16, KVA_DT_F32, KVA_DT_FP8_E4M3,
                                  KVA_DT_FP8_E5M2};
  int64_t slots[100];
  shuffled_slots(slots, 100);
  for (int f = KVA_KV_FLASH; f <= KVA_KV_FLASHINFER; f++)
    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
      trip_case tc = base_case((kva_kv_format)f, dts[d], slots, 100);
      tc.seed = 200 + (uint64_t)f * 10 + d;
      same_on_both(tc);
    }
}
END_TEST

START_TEST(cuda_matches_host_for_odd_rows) {
  int64_t slots[100];
  shuffled_slots(slots, 100);
  trip_case tc = base_case(KVA_KV_FLASHINFER, KVA_DT_FP8_E4M3, slots, 100);
  tc.heads = 3;
  tc.head_dim = 5; /* 15-byte rows: the byte-wide kernel */
  same_on_both(tc);
  tc.dtype = KVA_DT_F16; /* 30-byte rows: bytes again */
  same_on_both(tc);
  tc.dtype = KVA_DT_F32; /* 60-byte rows: 4-byte words */
  same_on_both(tc);
}
END_TEST

START_TEST(cuda_load_reports_layers_in_order) {
  ck_assert_int_eq(cuda_device_probe(0), KVA_OK);
  kva_runtime *rt = gpu_test_runtime(0);
  kva_storage *s = kva_storage_of(rt);
  test_cache src, dst;
  cache_init(&src, 0, KVA_KV_FLASH, KVA_DT_BF16, 8, 64, 16, 8, 128);
  cache_init(&dst, 0, KVA_KV_FLASH, KVA_DT_BF16, 8, 64, 16, 8, 128);
  cache_fill(&src, 5);
  kva_kv *ks, *kd;
  ck_assert_int_eq(kva_kv_register(s, &src.d, &ks), KVA_OK);
  ck_assert_int_eq(kva_kv_register(s, &dst.d, &kd), KVA_OK);
  kva_key k[4];
  gpu_test_keys(k, 0, 4);
  int64_t slots[1024];
  for (size_t t = 0; t < 1024; t++) slots[t] = (int64_t)(1023 - t);
  kva_op *op;
  ck_assert_int_eq(kva_kv_store(s, ks, k, 4, 256, slots, 1024, &op), KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  ck_assert_uint_eq(gpu_test_prefetch(s, k, 4), 4);
  ck_assert_int_eq(kva_kv_load(s, kd, k, 4, 256, slots, 1024, &op), KVA_OK);
  uint8_t *want = malloc(src.layer_bytes), *got = malloc(src.layer_bytes);
  for (uint32_t l = 0; l < 8; l++) {
    ck_assert_int_eq(kva_op_wait_layer(op, l, 10000), KVA_OK);
    cache_get_layer(&src, l, want);
    cache_get_layer(&dst, l, got);
    ck_assert_msg(memcmp(want, got, src.layer_bytes) == 0, "layer %u reported early", l);
  }
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  free(want);
  free(got);
  fixture_memcheck_clean(s);
  kva_kv_unregister(ks);
  kva_kv_unregister(kd);
  cache_free(&src);
  cache_free(&dst);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- KVA_KV_PAGES: one buffer of 4 layers x 64 blocks of 16 tokens ---- */

typedef struct pages_case {
  kva_dtype dtype;
  uint64_t page, block_stride, layer_offset;
} pages_case;

static size_t pages_len(const pages_case *pc) {
  return 3 * pc->layer_offset + 63 * pc->block_stride + pc->page;
}

/* A buffer of len bytes on device (host memory for KVA_DEVICE_HOST)
 * holding host's bytes. */
static void *pages_put(int device, const uint8_t *host, size_t len) {
  void *p = NULL;
  if (device == KVA_DEVICE_HOST) {
    p = aligned_alloc(64, (len + 63) & ~(size_t)63);
    memcpy(p, host, len);
    return p;
  }
  const cuda_api *a = cuda_lib_api();
  ck_assert_int_eq(a->device_alloc(device, &p, len), 0);
  ck_assert_int_eq(a->memcpy_async(p, host, len, CUDA_H2D, NULL), 0);
  ck_assert_int_eq(a->stream_sync(NULL), 0);
  return p;
}

/* Copies p's len bytes into host (none when host is NULL), then frees p. */
static void pages_take(int device, void *p, uint8_t *host, size_t len) {
  if (device == KVA_DEVICE_HOST) {
    if (host) memcpy(host, p, len);
    free(p);
    return;
  }
  const cuda_api *a = cuda_lib_api();
  if (host) {
    ck_assert_int_eq(a->memcpy_async(host, p, len, CUDA_D2H, NULL), 0);
    ck_assert_int_eq(a->stream_sync(NULL), 0);
  }
  a->device_free(device, p);
}

static void pages_register(kva_storage *s, const pages_case *pc, int device, uint8_t *buf,
                           void **layers, kva_kv **out) {
  for (uint32_t l = 0; l < 4; l++) layers[l] = buf + l * pc->layer_offset;
  kva_paged_kv d = {.device = device,
                    .format = KVA_KV_PAGES,
                    .dtype = pc->dtype,
                    .num_layers = 4,
                    .num_blocks = 64,
                    .block_size = 16,
                    .layers = layers,
                    .block_stride = pc->block_stride,
                    .page_bytes = pc->page};
  ck_assert_int_eq(kva_kv_register(s, &d, out), KVA_OK);
}

/* Stores 100 tokens (chunks of 32: the last of one partial block) over
 * shuffled blocks, one skipped, and loads them into a zeroed buffer at
 * other blocks: the chunks' bytes and the loaded buffer. */
static void pages_trip(const pages_case *pc, int device, trip_result *out) {
  size_t len = pages_len(pc);
  uint8_t *host = malloc(len);
  uint64_t x = 99;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
    host[i] = (uint8_t)(x >> 24);
  }
  kva_runtime *rt = gpu_test_runtime(device);
  kva_storage *s = kva_storage_of(rt);
  void *src = pages_put(device, host, len), *ls[4], *ld[4];
  memset(host, 0, len);
  void *dst = pages_put(device, host, len);
  kva_kv *ks, *kd;
  pages_register(s, pc, device, src, ls, &ks);
  pages_register(s, pc, device, dst, ld, &kd);
  int64_t a[100], b[100];
  for (size_t t = 0; t < 100; t++) {
    a[t] = (int64_t)((t / 16) * 37 % 64) * 16 + (int64_t)(t % 16);
    b[t] = (int64_t)((t / 16) * 11 % 64) * 16 + (int64_t)(t % 16);
    if (t / 16 == 2) a[t] = b[t] = -1;
  }
  kva_key k[4];
  gpu_test_keys(k, 500, 4);
  kva_op *op;
  ck_assert_int_eq(kva_kv_store(s, ks, k, 4, 32, a, 100, &op), KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  ck_assert_uint_eq(gpu_test_prefetch(s, k, 4), 4);
  kva_buf bufs[4];
  ck_assert_int_eq(kva_read_prefetched(s, k, 4, bufs), KVA_OK);
  memset(out, 0, sizeof(*out));
  for (int c = 0; c < 4; c++) out->chunks_len += bufs[c].len;
  out->chunks = malloc(out->chunks_len);
  for (size_t c = 0, at = 0; c < 4; at += bufs[c].len, c++)
    memcpy(out->chunks + at, bufs[c].ptr, bufs[c].len);
  ck_assert_int_eq(kva_kv_load(s, kd, k, 4, 32, b, 100, &op), KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  fixture_memcheck_clean(s);
  kva_kv_unregister(ks);
  kva_kv_unregister(kd);
  out->dst = host;
  out->dst_len = len;
  pages_take(device, dst, host, len);
  pages_take(device, src, NULL, len);
  kva_runtime_shutdown(rt);
}

START_TEST(cuda_matches_host_for_pages) {
  ck_assert_msg(cuda_device_probe(0) == KVA_OK, "no usable CUDA device 0 (see the log line)");
  uint64_t big = 8 * 16 * 256 * 2; /* llama3-8b: 8 heads x 16 tokens x K|V 256, bf16 */
  pages_case cases[] = {
      {KVA_DT_BF16, big, big, 64 * big},     /* layers-first (LB..) */
      {KVA_DT_F16, big, 4 * big, big},       /* blocks-first (BL..) */
      {KVA_DT_BF16, big, 4 * big + 64, big}, /* blocks-first, padded */
      {KVA_DT_F16, 24, 4 * 24 + 8, 24},      /* 24-byte pages: 4-byte words */
      {KVA_DT_F16, 30, 30, 64 * 30},         /* 30-byte pages: bytes */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    trip_result host, cuda;
    pages_trip(&cases[i], KVA_DEVICE_HOST, &host);
    pages_trip(&cases[i], 0, &cuda);
    ck_assert_uint_eq(host.chunks_len, cuda.chunks_len);
    ck_assert_msg(memcmp(host.chunks, cuda.chunks, host.chunks_len) == 0, "case %zu: chunks", i);
    ck_assert_msg(memcmp(host.dst, cuda.dst, host.dst_len) == 0, "case %zu: loaded", i);
    trip_result_free(&host);
    trip_result_free(&cuda);
  }
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("gpu_cuda");
  TCase *t = tcase_create("cuda");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, cuda_matches_host_for_every_format_and_dtype);
  tcase_add_test(t, cuda_matches_host_for_odd_rows);
  tcase_add_test(t, cuda_load_reports_layers_in_order);
  tcase_add_test(t, cuda_matches_host_for_pages);
  suite_add_tcase(s, t);
  return s;
}
