/*
 * gpu_test.c — the GPU copy API on the host device (kvact.h "GPU copy"):
 * store -> load round trips bit-exact for every format and dtype, slot
 * mappings with holes, partial chunks and scattered blocks, skipped keys,
 * layer-wise loads, failing loads that leave no lock, a CUDA device
 * asked for where there is none, and ops recycled by their kv's pool.
 */
#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/op.h"
#include "kvact.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/fixture.h"

#define H KVA_DEVICE_HOST

/* 20 tokens over blocks 5, 2, 11, 7, 0 (block_size 4): not contiguous,
 * not in order; tokens 3 and 9 skipped. Chunks of 8: 8 + 8 + 4 tokens. */
static void scattered_slots(int64_t *slots, size_t n) {
  static const int64_t table[] = {5, 2, 11, 7, 0};
  for (size_t t = 0; t < n; t++) slots[t] = table[t / 4] * 4 + (int64_t)(t % 4);
  slots[3] = -1;
  slots[9] = -1;
}

static trip_case small_case(kva_kv_format f, kva_dtype dt, const int64_t *slots, size_t n) {
  return (trip_case){.device = H,
                     .format = f,
                     .dtype = dt,
                     .layers = 3,
                     .blocks = 16,
                     .block_size = 4,
                     .heads = 2,
                     .head_dim = 8,
                     .chunk_tokens = 8,
                     .slots = slots,
                     .ntokens = n,
                     .seed = 7};
}

static const kva_dtype dtypes[] = {KVA_DT_BF16, KVA_DT_F16, KVA_DT_F32, KVA_DT_FP8_E4M3,
                                   KVA_DT_FP8_E5M2};

START_TEST(round_trip_is_bit_exact_for_every_format_and_dtype) {
  int64_t slots[20];
  scattered_slots(slots, 20);
  for (int f = KVA_KV_FLASH; f <= KVA_KV_FLASHINFER; f++)
    for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
      trip_case tc = small_case((kva_kv_format)f, dtypes[d], slots, 20);
      tc.seed = 100 + (uint64_t)f * 10 + d;
      trip_run(&tc, NULL);
    }
}
END_TEST

START_TEST(holes_everywhere_and_a_one_token_last_chunk) {
  int64_t slots[17];
  for (size_t t = 0; t < 17; t++) slots[t] = t % 3 == 1 ? -1 : (int64_t)(63 - t * 3);
  trip_case tc = small_case(KVA_KV_FLASHINFER, KVA_DT_BF16, slots, 17);
  trip_run(&tc, NULL);
}
END_TEST

START_TEST(a_chunk_of_only_holes_stores_zeros) {
  int64_t slots[12];
  for (size_t t = 0; t < 12; t++) slots[t] = t < 8 ? -1 : (int64_t)t;
  trip_case tc = small_case(KVA_KV_FLASH, KVA_DT_F32, slots, 12);
  trip_run(&tc, NULL);
}
END_TEST

START_TEST(rows_that_are_not_a_multiple_of_sixteen_bytes) {
  int64_t slots[20];
  scattered_slots(slots, 20);
  trip_case tc = small_case(KVA_KV_FLASH, KVA_DT_FP8_E4M3, slots, 20);
  tc.heads = 3;
  tc.head_dim = 5; /* 15-byte rows */
  trip_run(&tc, NULL);
}
END_TEST

/* ---- store and load scenarios on one runtime --------------------------- */

typedef struct env {
  kva_runtime *rt;
  kva_storage *s;
  test_cache src, dst;
  kva_kv *ks, *kd;
} env;

static void env_start(env *e, uint32_t layers, uint32_t blocks) {
  e->rt = gpu_test_runtime(H);
  e->s = kva_storage_of(e->rt);
  cache_init(&e->src, H, KVA_KV_FLASH, KVA_DT_BF16, layers, blocks, 16, 8, 128);
  cache_init(&e->dst, H, KVA_KV_FLASH, KVA_DT_BF16, layers, blocks, 16, 8, 128);
  cache_fill(&e->src, 42);
  ck_assert_int_eq(kva_kv_register(e->s, &e->src.d, &e->ks), KVA_OK);
  ck_assert_int_eq(kva_kv_register(e->s, &e->dst.d, &e->kd), KVA_OK);
}

static void env_stop(env *e) {
  fixture_memcheck_clean(e->s);
  kva_kv_unregister(e->ks);
  kva_kv_unregister(e->kd);
  cache_free(&e->src);
  cache_free(&e->dst);
  kva_runtime_shutdown(e->rt);
}

static void identity_slots(int64_t *slots, size_t n) {
  for (size_t t = 0; t < n; t++) slots[t] = (int64_t)t;
}

static void store_ok(env *e, const kva_key *k, size_t n, const int64_t *slots, size_t ntok) {
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_store(e->s, e->ks, k, n, 16, slots, ntok, &op), KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
}

/* The first byte of chunk k, as stored in L1. */
static uint8_t chunk_byte(env *e, const kva_key *k) {
  ck_assert_uint_eq(gpu_test_prefetch(e->s, k, 1), 1);
  kva_buf b;
  ck_assert_int_eq(kva_read_prefetched(e->s, k, 1, &b), KVA_OK);
  uint8_t v = *(uint8_t *)b.ptr;
  kva_finish_read_prefetched(e->s, k, 1, 0);
  return v;
}

START_TEST(keys_already_present_are_skipped) {
  env e;
  env_start(&e, 2, 8);
  kva_key k[4];
  gpu_test_keys(k, 0, 4);
  int64_t slots[64];
  identity_slots(slots, 64);
  store_ok(&e, k, 2, slots, 32);
  uint8_t before = chunk_byte(&e, &k[0]);
  cache_fill(&e.src, 43); /* new bytes: a rewrite of chunk 0 would show */
  kva_storage_stats a, b;
  kva_storage_get_stats(e.s, &a);
  store_ok(&e, k, 4, slots, 64);
  kva_storage_get_stats(e.s, &b);
  ck_assert_uint_eq(b.reserved - a.reserved, 2); /* chunks 2 and 3 only */
  ck_assert_uint_eq(b.l1_objects, 4);
  ck_assert_uint_eq(chunk_byte(&e, &k[0]), before);
  const uint8_t *layer0 = e.src.layers[0]; /* chunk 2 starts with token 32's K row */
  ck_assert_uint_eq(chunk_byte(&e, &k[2]), layer0[ref_paged_offset(&e.src, 0, 32)]);
  env_stop(&e);
}
END_TEST

START_TEST(a_store_of_present_keys_only_completes_at_once) {
  env e;
  env_start(&e, 2, 8);
  kva_key k[2];
  gpu_test_keys(k, 0, 2);
  int64_t slots[32];
  identity_slots(slots, 32);
  store_ok(&e, k, 2, slots, 32);
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_store(e.s, e.ks, k, 2, 16, slots, 32, &op), KVA_OK);
  struct pollfd p = {.fd = kva_op_eventfd(op), .events = POLLIN};
  ck_assert_int_eq(poll(&p, 1, 5000), 1);
  ck_assert_int_eq(kva_op_wait_layer(op, 1, 0), KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  env_stop(&e);
}
END_TEST

/* A pooled actor that waits for an op holds a worker the op's completion
 * may need (the L1 manager's replies to the copy actor): kva_op_wait and
 * kva_op_wait_layer with a timeout are refused there, and the op is left
 * to its owner, who waits for it as usual; a poll (timeout 0) is allowed. */
typedef struct op_waiter {
  kva_op *op;
  kva_port *report;
} op_waiter;

static void op_waiter_receive(kva_actor *self, void *state, const kva_msg *m) {
  op_waiter *w = state;
  int rc[3] = {kva_op_wait(w->op, -1, &(int){0}), kva_op_wait_layer(w->op, 0, 1000),
               kva_op_wait_layer(w->op, 0, 0)};
  kva_send(kva_port_actor(w->report), KVA_MSG_USER + 1, rc, sizeof(rc), self, m->tag);
}

START_TEST(an_actor_may_not_wait_for_an_op) {
  env e;
  env_start(&e, 2, 8);
  kva_key k[2];
  gpu_test_keys(k, 0, 2);
  int64_t slots[32];
  identity_slots(slots, 32);
  op_waiter w = {NULL, kva_port_open(e.rt, "report")};
  ck_assert_int_eq(kva_kv_store(e.s, e.ks, k, 2, 16, slots, 32, &w.op), KVA_OK);
  kva_behavior b = {.name = "op_waiter", .receive = op_waiter_receive};
  kva_actor *a = kva_spawn(e.rt, &b, &w, NULL);
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq(kva_send(a, KVA_MSG_USER, NULL, 0, NULL, 0), KVA_OK);
  int rc[3];
  fixture_recv(w.report, rc, sizeof(rc), 10000);
  ck_assert_int_eq(rc[0], KVA_EINVAL);
  ck_assert_int_eq(rc[1], KVA_EINVAL);
  ck_assert(rc[2] == KVA_OK || rc[2] == KVA_ETIMEDOUT); /* a poll: landed or not yet */
  ck_assert_int_eq(gpu_test_wait(w.op), KVA_OK);        /* the op is still the engine's */
  kva_port_close(w.report);
  env_stop(&e);
}
END_TEST

/* 600 chunks of 128 KiB cannot fit a 64 MiB L1: reservations are all or
 * nothing, so the op reports KVA_ENOMEM and nothing is left behind. */
START_TEST(a_store_that_does_not_fit_reports_enomem) {
  env e;
  env_start(&e, 2, 8);
  enum { N = 600 };
  kva_key *k = calloc(N, sizeof(*k));
  int64_t *slots = malloc(N * 16 * sizeof(*slots));
  gpu_test_keys(k, 0, N);
  for (size_t t = 0; t < N * 16; t++) slots[t] = (int64_t)(t % 128); /* reads may repeat */
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_store(e.s, e.ks, k, N, 16, slots, N * 16, &op), KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_ENOMEM);
  kva_storage_stats st;
  kva_storage_get_stats(e.s, &st);
  ck_assert_uint_eq(st.l1_objects, 0);
  free(k);
  free(slots);
  env_stop(&e);
}
END_TEST

/* Every layer is in place when its wait returns, the op later. */
START_TEST(a_load_reports_each_layer_once_it_has_landed) {
  env e;
  const uint32_t L = 8;
  env_start(&e, L, 16); /* 256 slots, every one of them mapped */
  kva_key k[16];
  gpu_test_keys(k, 0, 16);
  int64_t slots[256];
  for (size_t t = 0; t < 256; t++) slots[t] = (int64_t)(255 - t); /* blocks backwards */
  store_ok(&e, k, 16, slots, 256);
  ck_assert_uint_eq(gpu_test_prefetch(e.s, k, 16), 16);
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_load(e.s, e.kd, k, 16, 16, slots, 256, &op), KVA_OK);
  for (uint32_t l = 0; l < L; l++) {
    ck_assert_int_eq(kva_op_wait_layer(op, l, 10000), KVA_OK);
    for (uint32_t j = 0; j <= l; j++) ck_assert_int_eq(kva_op_wait_layer(op, j, 0), KVA_OK);
    ck_assert_msg(cache_layer_equal(&e.src, &e.dst, l), "layer %u reported early", l);
  }
  ck_assert_int_eq(kva_op_wait_layer(op, L, 0), KVA_EINVAL);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  env_stop(&e);
}
END_TEST

START_TEST(a_load_of_keys_not_prefetched_fails_cleanly) {
  env e;
  env_start(&e, 2, 8);
  kva_key k[3];
  gpu_test_keys(k, 0, 3);
  int64_t slots[48];
  identity_slots(slots, 48);
  store_ok(&e, k, 3, slots, 48);
  ck_assert_uint_eq(gpu_test_prefetch(e.s, k, 2), 2); /* chunk 2 not locked */
  kva_op *op = NULL;
  int rc = kva_kv_load(e.s, e.kd, k, 3, 16, slots, 48, &op);
  ck_assert_int_ne(rc, KVA_OK);
  ck_assert_ptr_null(op);
  uint8_t *got = malloc(e.dst.layer_bytes), *zero = calloc(1, e.dst.layer_bytes);
  for (uint32_t l = 0; l < 2; l++) {
    cache_get_layer(&e.dst, l, got);
    ck_assert(memcmp(got, zero, e.dst.layer_bytes) == 0);
  }
  kva_key unknown[1];
  gpu_test_keys(unknown, 99, 1);
  ck_assert_int_ne(kva_kv_load(e.s, e.kd, unknown, 1, 16, slots, 16, &op), KVA_OK);
  free(got);
  free(zero);
  env_stop(&e); /* memcheck: the locks of chunks 0 and 1 were released */
}
END_TEST

START_TEST(a_load_of_chunks_with_another_layout_fails_cleanly) {
  env e;
  env_start(&e, 2, 8);
  kva_key k[1];
  gpu_test_keys(k, 0, 1);
  int64_t slots[16];
  identity_slots(slots, 16);
  kva_layout wrong = fixture_layout_bytes(100);
  kva_buf b;
  int st;
  ck_assert_int_eq(kva_reserve_write(e.s, k, 1, &wrong, KVA_WRITE_NEW, &b, &st), 1);
  ck_assert_int_eq(kva_finish_write(e.s, k, 1, &st), 1);
  ck_assert_uint_eq(gpu_test_prefetch(e.s, k, 1), 1);
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_load(e.s, e.kd, k, 1, 16, slots, 16, &op), KVA_EINVAL);
  env_stop(&e);
}
END_TEST

/* ---- the op pool --------------------------------------------------------- */

static op_pool_stats pool_of(kva_kv *kv) {
  op_pool_stats ps;
  op_pool_get_stats(kv, &ps);
  return ps;
}

/* Every op came back, and no more were ever made than were out at once. */
static void assert_pool_settled(kva_kv *kv) {
  op_pool_stats ps = pool_of(kv);
  ck_assert_uint_eq(ps.out, 0);
  ck_assert_uint_eq(ps.free_ops, ps.made);
  ck_assert_uint_le(ps.made, ps.peak_out);
}

/* Threads storing and loading disjoint slots of the same caches at once
 * (two stream threads, one copy actor, the L1 manager in between). */
typedef struct worker_arg {
  env *e;
  uint32_t id;
} worker_arg;

static void *store_load_worker(void *p) {
  worker_arg *w = p;
  kva_key k[4];
  gpu_test_keys(k, 100 * (w->id + 1), 4);
  int64_t slots[64];
  for (size_t t = 0; t < 64; t++) slots[t] = (int64_t)(w->id * 64 + t);
  for (int round = 0; round < 5; round++) {
    kva_op *op = NULL;
    if (kva_kv_store(w->e->s, w->e->ks, k, 4, 16, slots, 64, &op) != KVA_OK) return p;
    if (gpu_test_wait(op) != KVA_OK) return p;
    if (gpu_test_prefetch(w->e->s, k, 4) != 4) return p;
    if (kva_kv_load(w->e->s, w->e->kd, k, 4, 16, slots, 64, &op) != KVA_OK) return p;
    if (gpu_test_wait(op) != KVA_OK) return p;
  }
  return NULL;
}

START_TEST(concurrent_stores_and_loads_land_where_they_should) {
  env e;
  env_start(&e, 2, 16); /* 256 slots: 4 threads x 64 */
  pthread_t th[4];
  worker_arg w[4];
  for (uint32_t i = 0; i < 4; i++) {
    w[i] = (worker_arg){&e, i};
    ck_assert_int_eq(pthread_create(&th[i], NULL, store_load_worker, &w[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(th[i], &r);
    ck_assert_ptr_null(r);
  }
  assert_pool_settled(e.ks);
  assert_pool_settled(e.kd);
  ck_assert_uint_le(pool_of(e.ks).made, 4);
  for (uint32_t l = 0; l < 2; l++) ck_assert(cache_layer_equal(&e.src, &e.dst, l));
  env_stop(&e);
}
END_TEST

START_TEST(bad_requests_are_refused) {
  env e;
  env_start(&e, 2, 8);
  kva_key k[2];
  gpu_test_keys(k, 0, 2);
  int64_t slots[32];
  identity_slots(slots, 32);
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_store(e.s, e.ks, k, 2, 16, slots, 16, &op), KVA_EINVAL); /* 1 chunk */
  ck_assert_int_eq(kva_kv_store(e.s, e.ks, k, 1, 16, slots, 17, &op), KVA_EINVAL);
  ck_assert_int_eq(kva_kv_store(e.s, e.ks, k, 2, 0, slots, 32, &op), KVA_EINVAL);
  slots[5] = 8 * 16; /* one past the last slot */
  ck_assert_int_eq(kva_kv_store(e.s, e.ks, k, 2, 16, slots, 32, &op), KVA_EINVAL);
  slots[5] = -2;
  ck_assert_int_eq(kva_kv_load(e.s, e.ks, k, 2, 16, slots, 32, &op), KVA_EINVAL);
  ck_assert_ptr_null(op);
  kva_paged_kv bad = e.src.d;
  kva_kv *kv = NULL;
  bad.head_dim = 0;
  ck_assert_int_eq(kva_kv_register(e.s, &bad, &kv), KVA_EINVAL);
  bad = e.src.d;
  bad.format = (kva_kv_format)7;
  ck_assert_int_eq(kva_kv_register(e.s, &bad, &kv), KVA_EINVAL);
  ck_assert_ptr_null(kv);
  kva_layout l = kva_kv_chunk_layout(e.ks, 16);
  ck_assert_uint_eq(kva_layout_bytes(&l), 2 * 2 * 16 * 8 * 128 * 2);
  env_stop(&e);
}
END_TEST

/* A chunk key named twice: refused whole (docs/invariants.md I-L1-11),
 * also when the repeat is the partial last chunk, which a store reserves
 * in a call of its own; nothing is reserved. Before, the first chunk was
 * stored and the repeat skipped as "present". */
START_TEST(a_repeated_chunk_key_is_refused_and_nothing_is_reserved) {
  env e;
  env_start(&e, 2, 8);
  kva_key k[2];
  gpu_test_keys(k, 0, 2);
  k[1] = k[0];
  int64_t slots[32];
  identity_slots(slots, 32);
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_store(e.s, e.ks, k, 2, 16, slots, 20, &op), KVA_EINVAL); /* partial */
  ck_assert_int_eq(kva_kv_store(e.s, e.ks, k, 2, 16, slots, 32, &op), KVA_EINVAL);
  ck_assert_int_eq(kva_kv_load(e.s, e.ks, k, 2, 16, slots, 32, &op), KVA_EINVAL);
  ck_assert_ptr_null(op);
  kva_storage_stats st;
  ck_assert_int_eq(kva_storage_get_stats(e.s, &st), KVA_OK);
  ck_assert_uint_eq(st.l1_objects, 0);
  env_stop(&e);
}
END_TEST

START_TEST(a_cuda_device_without_a_usable_gpu_is_unsupported) {
  env e;
  env_start(&e, 2, 8); /* L1 not page-locked, and no GPU in CI */
  kva_paged_kv d = e.src.d;
  d.device = 0;
  kva_kv *kv = NULL;
  ck_assert_int_eq(kva_kv_register(e.s, &d, &kv), KVA_ENOTSUP);
  ck_assert_ptr_null(kv);
  env_stop(&e);
}
END_TEST

START_TEST(a_deterministic_runtime_is_unsupported) {
  kva_runtime *rt = fixture_storage(0, 16ull << 20, NULL);
  test_cache c;
  cache_init(&c, H, KVA_KV_FLASH, KVA_DT_F16, 1, 4, 4, 1, 8);
  kva_kv *kv = NULL;
  ck_assert_int_eq(kva_kv_register(kva_storage_of(rt), &c.d, &kv), KVA_ENOTSUP);
  cache_free(&c);
  kva_runtime_shutdown(rt);
}
END_TEST

/* A kv still registered at shutdown: the copy actor stops with the
 * runtime, and unregistering afterwards only frees memory. */
START_TEST(unregister_after_shutdown_is_safe) {
  env e;
  env_start(&e, 2, 8);
  kva_key k[1];
  gpu_test_keys(k, 0, 1);
  int64_t slots[16];
  identity_slots(slots, 16);
  store_ok(&e, k, 1, slots, 16);
  kva_runtime_shutdown(e.rt);
  kva_kv_unregister(e.ks);
  kva_kv_unregister(e.kd);
  cache_free(&e.src);
  cache_free(&e.dst);
}
END_TEST

/* A store of 37.5 MiB is still copying when the runtime shuts down: the
 * shutdown waits for it to end in L1, so its wait gives its status instead
 * of never returning. */
START_TEST(an_op_in_flight_at_shutdown_completes) {
  env e;
  env_start(&e, 2, 8);
  enum { N = 300 };
  kva_key *k = calloc(N, sizeof(*k));
  int64_t *slots = malloc(N * 16 * sizeof(*slots));
  gpu_test_keys(k, 0, N);
  for (size_t t = 0; t < N * 16; t++) slots[t] = (int64_t)(t % 128);
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_store(e.s, e.ks, k, N, 16, slots, N * 16, &op), KVA_OK);
  kva_runtime_shutdown(e.rt);
  int status = -1;
  ck_assert_int_eq(kva_op_wait(op, 10000, &status), KVA_OK);
  ck_assert_int_eq(status, KVA_OK);
  kva_kv_unregister(e.ks);
  kva_kv_unregister(e.kd);
  cache_free(&e.src);
  cache_free(&e.dst);
  free(k);
  free(slots);
}
END_TEST

/* 300 rounds of two stores, then two loads, in flight at once: each kv's
 * pool makes two ops (and their arrays) in the first round and none
 * after; the bytes still land right. */
START_TEST(ops_are_pooled_and_the_pool_stops_at_the_peak_in_flight) {
  env e;
  env_start(&e, 2, 16); /* 256 slots: two requests of 8 chunks x 16 tokens */
  int64_t slots[256];
  identity_slots(slots, 256);
  kva_key k[16];
  gpu_test_keys(k, 0, 16);
  for (int round = 0; round < 300; round++) {
    kva_clear(e.s, 0);
    kva_op *op[2];
    for (int i = 0; i < 2; i++)
      ck_assert_int_eq(kva_kv_store(e.s, e.ks, k + 8 * i, 8, 16, slots + 128 * i, 128, &op[i]),
                       KVA_OK);
    for (int i = 0; i < 2; i++) ck_assert_int_eq(gpu_test_wait(op[i]), KVA_OK);
    ck_assert_uint_eq(gpu_test_prefetch(e.s, k, 16), 16);
    for (int i = 0; i < 2; i++)
      ck_assert_int_eq(kva_kv_load(e.s, e.kd, k + 8 * i, 8, 16, slots + 128 * i, 128, &op[i]),
                       KVA_OK);
    if (round % 2) { /* half of the rounds complete through the eventfd */
      struct pollfd p = {.fd = kva_op_eventfd(op[1]), .events = POLLIN};
      ck_assert_int_eq(poll(&p, 1, 5000), 1);
    }
    for (int i = 0; i < 2; i++) ck_assert_int_eq(gpu_test_wait(op[i]), KVA_OK);
    if (round == 0) {
      op_pool_stats ps = pool_of(e.ks);
      ck_assert_uint_eq(ps.made, 2);
      ck_assert_uint_eq(ps.grown, 2);
    }
  }
  kva_kv *kvs[2] = {e.ks, e.kd};
  for (int i = 0; i < 2; i++) {
    op_pool_stats ps = pool_of(kvs[i]);
    ck_assert_uint_eq(ps.made, 2);
    ck_assert_uint_eq(ps.grown, 2); /* the same request sizes: no regrowth */
    ck_assert_uint_eq(ps.peak_out, 2);
    assert_pool_settled(kvs[i]);
  }
  for (uint32_t l = 0; l < 2; l++) ck_assert(cache_layer_equal(&e.src, &e.dst, l));
  env_stop(&e);
}
END_TEST

/* A recycled op's eventfd was reset: an op that completes at once (its
 * keys are present) is not readable before kva_op_eventfd asks, and is
 * readable once it has; a larger request regrows the op's arrays. */
START_TEST(a_recycled_op_has_a_reset_eventfd) {
  env e;
  env_start(&e, 2, 8);
  kva_key k[4];
  gpu_test_keys(k, 0, 4);
  int64_t slots[64];
  identity_slots(slots, 64);
  store_ok(&e, k, 2, slots, 32);
  for (int i = 0; i < 3; i++) {
    kva_op *op = NULL;
    ck_assert_int_eq(kva_kv_store(e.s, e.ks, k, 2, 16, slots, 32, &op), KVA_OK);
    ck_assert_int_eq(kva_op_wait_layer(op, 1, 5000), KVA_OK); /* complete */
    int fd = op->efd;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, 0), 0);
    ck_assert_int_eq(kva_op_eventfd(op), fd);
    ck_assert_int_eq(poll(&p, 1, 0), 1);
    ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  }
  op_pool_stats ps = pool_of(e.ks);
  ck_assert_uint_eq(ps.made, 1);
  ck_assert_uint_eq(ps.grown, 1);
  /* 4 chunks of 16 fit the first arrays (4 chunks, 64 slots); 5 do not */
  kva_key k5[5];
  int64_t slots5[80];
  identity_slots(slots5, 80);
  gpu_test_keys(k5, 10, 5);
  store_ok(&e, k5, 5, slots5, 80);
  ps = pool_of(e.ks);
  ck_assert_uint_eq(ps.made, 1);
  ck_assert_uint_eq(ps.grown, 2);
  assert_pool_settled(e.ks);
  env_stop(&e);
}
END_TEST

/* An op waited for after its kv was unregistered goes back to a pool that
 * is freed with it (no leak under ASan, no use after free). */
START_TEST(an_op_waited_for_after_unregister_frees_the_kv) {
  env e;
  env_start(&e, 2, 8);
  kva_key k[2];
  gpu_test_keys(k, 0, 2);
  int64_t slots[32];
  identity_slots(slots, 32);
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_store(e.s, e.ks, k, 2, 16, slots, 32, &op), KVA_OK);
  kva_kv_unregister(e.ks); /* waits for the copy, not for kva_op_wait */
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  kva_kv_unregister(e.kd);
  fixture_memcheck_clean(e.s);
  cache_free(&e.src);
  cache_free(&e.dst);
  kva_runtime_shutdown(e.rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("gpu");
  TCase *t = tcase_create("host");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, round_trip_is_bit_exact_for_every_format_and_dtype);
  tcase_add_test(t, holes_everywhere_and_a_one_token_last_chunk);
  tcase_add_test(t, a_chunk_of_only_holes_stores_zeros);
  tcase_add_test(t, rows_that_are_not_a_multiple_of_sixteen_bytes);
  tcase_add_test(t, keys_already_present_are_skipped);
  tcase_add_test(t, a_store_of_present_keys_only_completes_at_once);
  tcase_add_test(t, a_store_that_does_not_fit_reports_enomem);
  tcase_add_test(t, an_actor_may_not_wait_for_an_op);
  tcase_add_test(t, a_load_reports_each_layer_once_it_has_landed);
  tcase_add_test(t, a_load_of_keys_not_prefetched_fails_cleanly);
  tcase_add_test(t, a_load_of_chunks_with_another_layout_fails_cleanly);
  tcase_add_test(t, concurrent_stores_and_loads_land_where_they_should);
  tcase_add_test(t, bad_requests_are_refused);
  tcase_add_test(t, a_repeated_chunk_key_is_refused_and_nothing_is_reserved);
  tcase_add_test(t, a_cuda_device_without_a_usable_gpu_is_unsupported);
  tcase_add_test(t, a_deterministic_runtime_is_unsupported);
  tcase_add_test(t, unregister_after_shutdown_is_safe);
  tcase_add_test(t, an_op_in_flight_at_shutdown_completes);
  tcase_add_test(t, ops_are_pooled_and_the_pool_stops_at_the_peak_in_flight);
  tcase_add_test(t, a_recycled_op_has_a_reset_eventfd);
  tcase_add_test(t, an_op_waited_for_after_unregister_frees_the_kv);
  suite_add_tcase(s, t);
  return s;
}
