/*
 * gpu_cuda_test.c — the round trips of gpu_test.c on CUDA device 0, each
 * compared bit for bit with the same trip on the host device (chunk bytes
 * in L1 and the destination cache). Needs a GPU and a page-locked L1:
 * tagged manual, never run by CI.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
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

Suite *kva_test_suite(void) {
  Suite *s = suite_create("gpu_cuda");
  TCase *t = tcase_create("cuda");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, cuda_matches_host_for_every_format_and_dtype);
  tcase_add_test(t, cuda_matches_host_for_odd_rows);
  tcase_add_test(t, cuda_load_reports_layers_in_order);
  suite_add_tcase(s, t);
  return s;
}
