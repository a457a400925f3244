/*
 * gpu_cuda_backend_test.c — the CUDA copy device (gpu/cuda_device.c) over
 * a fake CUDA library (gpu_fake_cuda.c, via $KVACT_CUDA_LIB): tables,
 * events, the notify stream and the reports, compared with the host
 * device, on machines without a GPU.
 */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "kvact.h"

enum { LAYERS = 4, BLOCKS = 32, BS = 8, ROW = 64, CT = 16, NTOK = 40 };

/* A job's callbacks, recorded. */
typedef struct watch {
  copy_job job;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uint32_t layers_seen; /* layers reported, in order */
  int bad_order, done, result;
} watch;

static void on_layer(copy_job *j, uint32_t layer) {
  watch *w = (watch *)j;
  pthread_mutex_lock(&w->lock);
  w->bad_order |= layer != w->layers_seen || w->done;
  w->layers_seen++;
  pthread_mutex_unlock(&w->lock);
}

static void on_done(copy_job *j, int result) {
  watch *w = (watch *)j;
  pthread_mutex_lock(&w->lock);
  w->done = 1;
  w->result = result;
  pthread_cond_broadcast(&w->cond);
  pthread_mutex_unlock(&w->lock);
}

typedef struct world {
  void *layers[LAYERS];
  copy_chunk chunks[3];
  int64_t slots[NTOK];
  kv_geom g;
} world;

static void world_init(world *w, int format, int fill) {
  w->g = (kv_geom){.format = (uint32_t)format,
                   .num_layers = LAYERS,
                   .num_blocks = BLOCKS,
                   .block_size = BS,
                   .row_bytes = ROW};
  size_t lb = 2 * BLOCKS * BS * ROW;
  for (int l = 0; l < LAYERS; l++) {
    w->layers[l] = aligned_alloc(64, lb);
    for (size_t i = 0; i < lb; i++) ((uint8_t *)w->layers[l])[i] = fill ? (uint8_t)(i * 7 + l) : 0;
  }
  for (int t = 0; t < NTOK; t++) w->slots[t] = t % 7 == 3 ? -1 : (int64_t)((t * 5) % (BLOCKS * BS));
  for (int c = 0; c < 3; c++) {
    uint32_t tokens = c < 2 ? CT : NTOK - 2 * CT;
    w->chunks[c] = (copy_chunk){.buf = aligned_alloc(64, 2 * LAYERS * tokens * ROW),
                                .first = (uint64_t)c * CT,
                                .tokens = tokens};
    memset(w->chunks[c].buf, 0xee, 2 * LAYERS * tokens * ROW);
  }
}

static void world_free(world *w) {
  for (int l = 0; l < LAYERS; l++) free(w->layers[l]);
  for (int c = 0; c < 3; c++) free(w->chunks[c].buf);
}

/* Runs one job of w on b and waits for its report. */
static void run(gpu_backend *b, world *w, int dir, watch *out) {
  memset(out, 0, sizeof(*out));
  pthread_mutex_init(&out->lock, NULL);
  pthread_cond_init(&out->cond, NULL);
  out->job = (copy_job){.dir = dir,
                        .g = w->g,
                        .layers = w->layers,
                        .chunks = w->chunks,
                        .nchunks = 3,
                        .max_tokens = CT,
                        .slots = w->slots,
                        .ntokens = NTOK,
                        .layer_done = on_layer,
                        .done = on_done};
  ck_assert_int_eq(b->submit(b, &out->job), KVA_OK);
  pthread_mutex_lock(&out->lock);
  while (!out->done) pthread_cond_wait(&out->cond, &out->lock);
  pthread_mutex_unlock(&out->lock);
  ck_assert_int_eq(out->result, KVA_OK);
  ck_assert(!out->bad_order);
}

static void same_as_host(int format) {
  gpu_backend *cuda = NULL, *host = host_device_create(1);
  ck_assert_int_eq(cuda_device_create(0, 2, &cuda), KVA_OK);
  world a, b;
  world_init(&a, format, 1);
  world_init(&b, format, 1);
  watch w;
  run(cuda, &a, COPY_GATHER, &w);
  ck_assert_uint_eq(w.layers_seen, 0);
  run(host, &b, COPY_GATHER, &w);
  for (int c = 0; c < 3; c++)
    ck_assert(memcmp(a.chunks[c].buf, b.chunks[c].buf, 2 * LAYERS * a.chunks[c].tokens * ROW) == 0);
  world fresh;
  world_init(&fresh, format, 0);
  for (int c = 0; c < 3; c++) free(fresh.chunks[c].buf);
  memcpy(fresh.chunks, a.chunks, sizeof(fresh.chunks)); /* scatter a's chunks */
  run(cuda, &fresh, COPY_SCATTER, &w);
  ck_assert_uint_eq(w.layers_seen, LAYERS);
  for (int l = 0; l < LAYERS; l++)
    for (int t = 0; t < NTOK; t++) {
      if (a.slots[t] < 0) continue;
      for (uint32_t kv = 0; kv < 2; kv++) {
        uint64_t off = geom_paged_offset(&a.g, kv, (uint64_t)a.slots[t]);
        ck_assert(memcmp((char *)fresh.layers[l] + off, (char *)a.layers[l] + off, ROW) == 0);
      }
    }
  for (int l = 0; l < LAYERS; l++) free(fresh.layers[l]);
  cuda->destroy(cuda);
  host->destroy(host);
  world_free(&a);
  world_free(&b);
}

START_TEST(cuda_device_flash_matches_the_host_device) {
  same_as_host(GEOM_FLASH);
}
END_TEST

START_TEST(cuda_device_flashinfer_matches_the_host_device) {
  same_as_host(GEOM_FLASHINFER);
}
END_TEST

START_TEST(many_jobs_in_flight_over_two_streams) {
  gpu_backend *cuda = NULL;
  ck_assert_int_eq(cuda_device_create(0, 2, &cuda), KVA_OK);
  world a;
  world_init(&a, GEOM_FLASH, 1);
  watch w[8];
  for (int i = 0; i < 8; i++) {
    memset(&w[i], 0, sizeof(w[i]));
    pthread_mutex_init(&w[i].lock, NULL);
    pthread_cond_init(&w[i].cond, NULL);
    w[i].job = (copy_job){.dir = COPY_SCATTER,
                          .g = a.g,
                          .layers = a.layers,
                          .chunks = a.chunks,
                          .nchunks = 3,
                          .max_tokens = CT,
                          .slots = a.slots,
                          .ntokens = NTOK,
                          .layer_done = on_layer,
                          .done = on_done};
    ck_assert_int_eq(cuda->submit(cuda, &w[i].job), KVA_OK);
  }
  cuda->destroy(cuda); /* waits for every report */
  for (int i = 0; i < 8; i++) {
    ck_assert(w[i].done);
    ck_assert_uint_eq(w[i].layers_seen, LAYERS);
    ck_assert(!w[i].bad_order);
  }
  world_free(&a);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("gpu_cuda_backend");
  TCase *t = tcase_create("fake");
  tcase_add_test(t, cuda_device_flash_matches_the_host_device);
  tcase_add_test(t, cuda_device_flashinfer_matches_the_host_device);
  tcase_add_test(t, many_jobs_in_flight_over_two_streams);
  suite_add_tcase(s, t);
  return s;
}
