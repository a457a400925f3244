/*
 * kv.c — kva_kv_register/unregister and kva_kv_chunk_layout (kvact.h "GPU
 * copy"): checking a paged cache's description and binding it to the copy
 * actor of its device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/log.h"
#include "actors/runtime_internal.h"
#include "gpu/backend.h"
#include "gpu/kv_internal.h"
#include "gpu/op.h"
#include "common/key.h"
#include "gpu/storage_link.h"

_Static_assert((int)GEOM_FLASH == (int)KVA_KV_FLASH &&
                   (int)GEOM_FLASHINFER == (int)KVA_KV_FLASHINFER &&
                   (int)GEOM_PAGES == (int)KVA_KV_PAGES,
               "kv_geom formats are kva_kv_format values");

/* Token formats: heads and head_dim positive, the per-layer element count
 * and a row's bytes free of overflow. */
static int kv_check_rows(const kva_paged_kv *d, uint64_t es) {
  uint64_t n = 2, row;
  if (!d->num_heads || !d->head_dim) return KVA_EINVAL;
  if (__builtin_mul_overflow(es * d->num_heads, (uint64_t)d->head_dim, &row) ||
      __builtin_mul_overflow(n * d->num_blocks, (uint64_t)d->block_size, &n) ||
      __builtin_mul_overflow(n, row, &n))
    return KVA_EINVAL;
  return KVA_OK;
}

/* KVA_KV_PAGES: whole elements per page, pages that do not overlap, the
 * last block's end free of overflow (heads and head_dim are not read). */
static int kv_check_pages(const kva_paged_kv *d, uint64_t es) {
  uint64_t end;
  if (!d->page_bytes || d->page_bytes % es || d->block_stride < d->page_bytes) return KVA_EINVAL;
  if (__builtin_mul_overflow((uint64_t)(d->num_blocks - 1), d->block_stride, &end) ||
      __builtin_add_overflow(end, d->page_bytes, &end))
    return KVA_EINVAL;
  return KVA_OK;
}

/* Every number positive, the format's own checks, every layer pointer
 * set. */
static int kv_check_desc(const kva_paged_kv *d) {
  if (!d ||
      (d->format != KVA_KV_FLASH && d->format != KVA_KV_FLASHINFER && d->format != KVA_KV_PAGES))
    return KVA_EINVAL;
  uint64_t es = dtype_size(d->dtype);
  if (!es || !d->num_layers || !d->num_blocks || !d->block_size || !d->layers) return KVA_EINVAL;
  int rc = d->format == KVA_KV_PAGES ? kv_check_pages(d, es) : kv_check_rows(d, es);
  if (rc != KVA_OK) return rc;
  for (uint32_t l = 0; l < d->num_layers; l++)
    if (!d->layers[l]) return KVA_EINVAL;
  return KVA_OK;
}

/* Whether config gpu.devices ("all" or a list of ordinals) names device. */
static int kv_device_allowed(const kva_config *c, int device) {
  const char *all;
  if (kva_config_get_str(c, "gpu.devices", &all) == KVA_OK) return 1;
  for (int i = 0; i < 1024; i++) {
    char path[32];
    int64_t v;
    snprintf(path, sizeof(path), "gpu.devices[%d]", i);
    if (kva_config_get_i64(c, path, &v) != KVA_OK) return 0;
    if (v == device) return 1;
  }
  return 0;
}

/* What the CUDA zero-copy path needs before a device is opened: a device
 * the config serves and an L1 pool the GPU can reach. */
static int kv_check_cuda(kva_storage *s, int device) {
  kva_storage_stats st;
  if (device < 0) return KVA_EINVAL;
  if (!kv_device_allowed(storage_link_runtime(s)->cfg, device)) {
    LOG_WARN("gpu: CUDA device %d is not in gpu.devices", device);
    return KVA_ENOTSUP;
  }
  int rc = cuda_device_probe(device);
  if (rc != KVA_OK) return rc;
  if (kva_storage_get_stats(s, &st) != KVA_OK || !st.l1_pinned) {
    LOG_WARN("gpu: CUDA device %d needs a page-locked L1 (l1.pinned)", device);
    return KVA_ENOTSUP;
  }
  return KVA_OK;
}

static uint32_t kv_streams(const kva_runtime *rt) {
  int64_t v = 2;
  kva_config_get_i64(rt->cfg, "gpu.streams", &v);
  return v > 0 ? (uint32_t)v : 1;
}

static kva_kv *kv_new(kva_storage *s, const kva_paged_kv *d) {
  kva_kv *kv = calloc(1, sizeof(*kv));
  if (!kv || !(kv->layers = calloc(d->num_layers, sizeof(void *)))) {
    free(kv);
    return NULL;
  }
  kv->s = s;
  kv->desc = *d;
  memcpy(kv->layers, d->layers, d->num_layers * sizeof(void *));
  kv->desc.layers = kv->layers;
  int pages = d->format == KVA_KV_PAGES;
  kv->g = (kv_geom){.format = (uint32_t)d->format, /* GEOM_* = kva_kv_format */
                    .num_layers = d->num_layers,
                    .num_blocks = d->num_blocks,
                    .block_size = d->block_size,
                    .row_bytes =
                        pages ? 0 : (uint64_t)dtype_size(d->dtype) * d->num_heads * d->head_dim,
                    .block_stride = pages ? d->block_stride : 0,
                    .page_bytes = pages ? d->page_bytes : 0};
  pthread_mutex_init(&kv->lock, NULL);
  pthread_cond_init(&kv->idle, NULL);
  return kv;
}

static void kv_free(kva_kv *kv) {
  op_pool_free(kv->free_ops);
  pthread_cond_destroy(&kv->idle);
  pthread_mutex_destroy(&kv->lock);
  free(kv->layers);
  free(kv);
}

int kva_kv_register(kva_storage *s, const kva_paged_kv *d, kva_kv **out) {
  if (!s || !out) return KVA_EINVAL;
  int rc = kv_check_desc(d);
  if (rc == KVA_OK && d->device != KVA_DEVICE_HOST) rc = kv_check_cuda(s, d->device);
  if (rc != KVA_OK) return rc;
  kva_runtime *rt = storage_link_runtime(s);
  if (rt->workers == 0) {
    LOG_WARN("gpu: copy devices need a threaded runtime (runtime.workers > 0)");
    return KVA_ENOTSUP;
  }
  kva_kv *kv = kv_new(s, d);
  if (!kv) return KVA_ENOMEM;
  kv->fork_gen = rt->fork_gen;
  if ((rc = storage_link_enter(s)) == KVA_OK) {
    rc = devices_acquire(rt, storage_link_l1(s), d->device, kv_streams(rt), kv, &kv->dev);
    storage_link_leave(s);
  }
  if (rc != KVA_OK) {
    kv_free(kv);
    return rc;
  }
  *out = kv;
  return KVA_OK;
}

void kva_kv_unregister(kva_kv *kv) {
  if (!kv) return;
  kv_wait_idle(kv);
  devices_release(kv->dev, kv);
  /* ops not yet waited for still point at kv: the last op_return frees it */
  pthread_mutex_lock(&kv->lock);
  kv->unregistered = 1;
  int idle = kv->ops_out == 0;
  pthread_mutex_unlock(&kv->lock);
  if (idle) kv_free(kv);
}

void kv_destroy(kva_kv *kv) {
  kv_free(kv);
}

void kv_op_started(kva_kv *kv) {
  pthread_mutex_lock(&kv->lock);
  kv->inflight++;
  pthread_mutex_unlock(&kv->lock);
}

void kv_wait_idle(kva_kv *kv) {
  pthread_mutex_lock(&kv->lock);
  while (kv->inflight) pthread_cond_wait(&kv->idle, &kv->lock);
  pthread_mutex_unlock(&kv->lock);
}

void kv_op_finished(kva_kv *kv) {
  pthread_mutex_lock(&kv->lock);
  if (--kv->inflight == 0) pthread_cond_broadcast(&kv->idle);
  pthread_mutex_unlock(&kv->lock);
}

/* KV_PAGES: [layers, pages of the chunk, page elements]. */
static kva_layout kv_pages_layout(const kva_kv *kv, uint32_t chunk_tokens) {
  kva_layout l = {0};
  const kva_paged_kv *d = &kv->desc;
  l.ntensors = 1;
  l.tensor[0].ndim = 3;
  l.tensor[0].dtype = d->dtype;
  l.tensor[0].shape[0] = d->num_layers;
  l.tensor[0].shape[1] = geom_chunk_pages(&kv->g, chunk_tokens);
  l.tensor[0].shape[2] = d->page_bytes / dtype_size(d->dtype);
  return l;
}

kva_layout kva_kv_chunk_layout(const kva_kv *kv, uint32_t chunk_tokens) {
  kva_layout l = {0};
  if (!kv || !chunk_tokens) return l;
  if (kv->desc.format == KVA_KV_PAGES) return kv_pages_layout(kv, chunk_tokens);
  const kva_paged_kv *d = &kv->desc;
  l.ntensors = 1;
  l.tensor[0].ndim = 4;
  l.tensor[0].dtype = d->dtype;
  l.tensor[0].shape[0] = 2;
  l.tensor[0].shape[1] = d->num_layers;
  l.tensor[0].shape[2] = chunk_tokens;
  l.tensor[0].shape[3] = (uint64_t)d->num_heads * d->head_dim;
  return l;
}
