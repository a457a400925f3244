/*
 * cuda_device.c — a CUDA ordinal as a copy device: `gpu.streams` streams,
 * jobs round-robin over them, kernels and runtime calls reached through
 * libkvact_cuda.so (cuda_api.h).
 *
 * A job is: its tables (layer pointers, chunk table, slot mapping) copied
 * into the stream's scratch buffer, then one launch for a gather (every
 * layer and chunk), or one launch per layer for a scatter. Reports go
 * through a second, "notify" stream: after each layer the copy stream
 * records an event, the notify stream waits for it and runs a host
 * function that reports the layer; a last one reports the job done. A host
 * function holds back the work queued behind it on its stream, so keeping
 * them off the copy stream keeps the copies back to back. Host functions
 * run on CUDA's callback thread: the copy actor's thread never waits for
 * the GPU.
 *
 * Where the library is looked for: $KVACT_CUDA_LIB, then
 * gpu/libkvact_cuda.so relative to the working directory (Bazel runfiles:
 * tests and `bazel run`), then libkvact_cuda.so on the loader's path.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "actors/log.h"
#include "common/array.h"
#include "gpu/backend.h"
#include "gpu/cuda_api.h"
#include "gpu/cuda_lib.h"
#include "kvact.h"

typedef struct cuda_stream {
  void *stream;  /* the copies */
  void *notify;  /* waits for the copies' events, runs the host functions */
  void *scratch; /* device copy of the current job's tables */
  size_t scratch_len;
  void **events; /* one per layer + 1; re-recording one is safe once the
                    notify stream's wait for it was queued */
  uint32_t nevents;
} cuda_stream;

typedef struct job_ctx job_ctx;

typedef struct cuda_device {
  gpu_backend base; /* first: the backend pointer is the device pointer */
  const cuda_api *api;
  int ordinal;
  uint32_t nstreams;
  uint32_t next; /* round-robin; only the copy actor's thread submits */
  cuda_stream *streams;
  pthread_mutex_t ctx_lock; /* free_ctx: the actor takes, callbacks give */
  job_ctx *free_ctx;
} cuda_device;

/* What the host functions of one job need; pooled per device, given back
 * by the last one (no allocation per job once the pool is warm). */
typedef struct layer_cb {
  job_ctx *ctx;
  uint32_t layer;
} layer_cb;
struct job_ctx {
  copy_job *j;
  int result;
  cuda_device *d;
  job_ctx *next_free;
  uint32_t cap;      /* layers[] holds cap entries */
  layer_cb layers[]; /* >= g.num_layers */
};

/* A context for a job of nlayers layers, from the pool or new. */
static job_ctx *ctx_take(cuda_device *d, uint32_t nlayers) {
  pthread_mutex_lock(&d->ctx_lock);
  job_ctx *ctx = d->free_ctx;
  if (ctx) d->free_ctx = ctx->next_free;
  pthread_mutex_unlock(&d->ctx_lock);
  if (ctx && ctx->cap < nlayers) {
    free(ctx);
    ctx = NULL;
  }
  uint32_t cap = ctx ? ctx->cap : nlayers;
  if (!ctx && !(ctx = malloc(sizeof(*ctx) + nlayers * sizeof(layer_cb)))) return NULL;
  *ctx = (job_ctx){.d = d, .cap = cap};
  return ctx;
}

static void ctx_give(job_ctx *ctx) {
  cuda_device *d = ctx->d;
  pthread_mutex_lock(&d->ctx_lock);
  ctx->next_free = d->free_ctx;
  d->free_ctx = ctx;
  pthread_mutex_unlock(&d->ctx_lock);
}

static void on_layer(void *arg) {
  layer_cb *cb = arg;
  if (cb->ctx->result == KVA_OK && cb->ctx->j->layer_done)
    cb->ctx->j->layer_done(cb->ctx->j, cb->layer);
}

static void on_done(void *arg) {
  job_ctx *ctx = arg;
  copy_job *j = ctx->j;
  int result = ctx->result;
  ctx_give(ctx); /* before done: the job's owner may destroy the device after it */
  j->done(j, result);
}

static size_t align16(size_t n) {
  return (n + 15) & ~(size_t)15;
}

/* The widest word every row (or page, and block stride) and base pointer
 * of the job is aligned to. */
static uint32_t job_vec_bytes(const copy_job *j) {
  uintptr_t bits = (uintptr_t)(j->g.row_bytes | j->g.page_bytes | j->g.block_stride);
  for (uint32_t l = 0; l < j->g.num_layers; l++) bits |= (uintptr_t)j->layers[l];
  for (uint32_t c = 0; c < j->nchunks; c++) bits |= (uintptr_t)j->chunks[c].buf;
  return bits % 16 == 0 ? 16 : bits % 4 == 0 ? 4 : 1;
}

/* Makes the stream's scratch hold n bytes. Freeing waits for the device,
 * which is why scratch only grows. */
static int scratch_reserve(cuda_device *d, cuda_stream *st, size_t n) {
  if (st->scratch_len >= n) return 0;
  if (st->scratch) d->api->device_free(d->ordinal, st->scratch);
  st->scratch = NULL;
  st->scratch_len = 0;
  size_t want = n < (1u << 20) ? (1u << 20) : n;
  int rc = d->api->device_alloc(d->ordinal, &st->scratch, want);
  if (!rc) st->scratch_len = want;
  return rc;
}

/* Copies the job's tables into scratch and fills the launch's pointers. */
static int upload_tables(cuda_device *d, cuda_stream *st, const copy_job *j, cuda_launch *l) {
  size_t lb = align16(j->g.num_layers * sizeof(void *));
  size_t cb = align16(j->nchunks * sizeof(copy_chunk));
  size_t sb = j->ntokens * sizeof(int64_t);
  int rc = scratch_reserve(d, st, lb + cb + sb);
  if (rc) return rc;
  char *base = st->scratch;
  const cuda_api *a = d->api;
  if ((rc = a->memcpy_async(base, j->layers, j->g.num_layers * sizeof(void *), CUDA_H2D,
                            st->stream)) ||
      (rc = a->memcpy_async(base + lb, j->chunks, j->nchunks * sizeof(copy_chunk), CUDA_H2D,
                            st->stream)) ||
      (rc = a->memcpy_async(base + lb + cb, j->slots, sb, CUDA_H2D, st->stream)))
    return rc;
  *l = (cuda_launch){.g = j->g,
                     .layers = (void *const *)base,
                     .chunks = (const copy_chunk *)(base + lb),
                     .slots = (const int64_t *)(base + lb + cb),
                     .nchunks = j->nchunks,
                     .max_tokens = j->max_tokens,
                     .dir = j->dir,
                     .vec_bytes = job_vec_bytes(j)};
  return 0;
}

/* Makes the stream's event pool hold n events. */
static int events_reserve(cuda_device *d, cuda_stream *st, uint32_t n) {
  if (st->nevents >= n) return 0;
  if (!ARRAY_RESIZE(st->events, n)) return KVA_ENOMEM;
  void **ev = st->events;
  for (; st->nevents < n; st->nevents++) {
    int rc = d->api->event_create(d->ordinal, &ev[st->nevents]);
    if (rc) return rc;
  }
  return 0;
}

/* The notify stream's work after this point waits for the copy stream's
 * work queued so far (event i marks it). */
static int notify_after_copies(cuda_device *d, cuda_stream *st, uint32_t i) {
  int rc = d->api->event_record(st->events[i], st->stream);
  return rc ? rc : d->api->stream_wait_event(st->notify, st->events[i]);
}

/* The launches and layer reports of a job; the first CUDA error stops it. */
static int enqueue_copies(cuda_device *d, cuda_stream *st, job_ctx *ctx, cuda_launch *l) {
  const copy_job *j = ctx->j;
  if (j->dir == COPY_GATHER) {
    l->layer_first = 0;
    l->layer_count = j->g.num_layers;
    return d->api->launch(d->ordinal, st->stream, l);
  }
  for (uint32_t i = 0; i < j->g.num_layers; i++) {
    l->layer_first = i;
    l->layer_count = 1;
    ctx->layers[i] = (layer_cb){ctx, i};
    int rc = d->api->launch(d->ordinal, st->stream, l);
    if (!rc) rc = notify_after_copies(d, st, i);
    if (!rc) rc = d->api->host_func(st->notify, on_layer, &ctx->layers[i]);
    if (rc) return rc;
  }
  return 0;
}

/* Queues the job's report, behind everything it queued on the copy stream
 * (a failed job too: its buffers must not be given back while a kernel
 * may still write them). */
static int enqueue_done(cuda_device *d, cuda_stream *st, job_ctx *ctx) {
  uint32_t last = ctx->j->g.num_layers;
  if (last >= st->nevents || notify_after_copies(d, st, last)) {
    d->api->stream_sync(st->stream); /* no event: wait here, rarely */
    ctx->result = KVA_EIO;
  }
  return d->api->host_func(st->notify, on_done, ctx);
}

static int cuda_submit(gpu_backend *b, copy_job *j) {
  cuda_device *d = (cuda_device *)b;
  cuda_stream *st = &d->streams[d->next++ % d->nstreams];
  job_ctx *ctx = ctx_take(d, j->g.num_layers);
  if (!ctx) return KVA_ENOMEM;
  ctx->j = j;
  cuda_launch l;
  int rc = events_reserve(d, st, j->g.num_layers + 1);
  if (!rc) rc = upload_tables(d, st, j, &l);
  if (!rc) rc = enqueue_copies(d, st, ctx, &l);
  if (rc) {
    LOG_ERROR("gpu: CUDA device %d: copy failed: %s", d->ordinal, d->api->error_string(rc));
    ctx->result = KVA_EIO;
  }
  if (enqueue_done(d, st, ctx) == 0) return KVA_OK;
  /* the notify stream is broken: let the layer reports already queued run
   * out before their context goes */
  d->api->stream_sync(st->stream);
  d->api->stream_sync(st->notify);
  ctx_give(ctx);
  return KVA_EIO;
}

static void cuda_destroy(gpu_backend *b) {
  cuda_device *d = (cuda_device *)b;
  for (uint32_t i = 0; i < d->nstreams; i++) {
    cuda_stream *st = &d->streams[i];
    if (st->stream) d->api->stream_destroy(d->ordinal, st->stream);
    if (st->notify) d->api->stream_destroy(d->ordinal, st->notify);
    for (uint32_t e = 0; e < st->nevents; e++) d->api->event_destroy(st->events[e]);
    free(st->events);
    if (st->scratch) d->api->device_free(d->ordinal, st->scratch);
  }
  while (d->free_ctx) {
    job_ctx *next = d->free_ctx->next_free;
    free(d->free_ctx);
    d->free_ctx = next;
  }
  pthread_mutex_destroy(&d->ctx_lock);
  free(d->streams);
  free(d);
}

/* KVA_OK when the ordinal names a device that reads registered host memory
 * at its host address (the zero-copy path); else KVA_ENOTSUP, logged. */
static int cuda_check_device(const cuda_api *api, int device) {
  if (device < 0) return KVA_EINVAL;
  int n = 0, rc = api->device_count(&n);
  if (rc) {
    LOG_WARN("gpu: no CUDA device %d: %s", device, api->error_string(rc));
    return KVA_ENOTSUP;
  }
  int ok = 0;
  if (device >= n || api->host_pointer_ok(device, &ok) || !ok) {
    LOG_WARN("gpu: CUDA device %d: %s", device,
             device >= n ? "no such device" : "cannot use host pointers of registered memory");
    return KVA_ENOTSUP;
  }
  return KVA_OK;
}

int cuda_device_create(int device, uint32_t streams, gpu_backend **out) {
  const cuda_api *api = cuda_lib_api();
  if (!api) return KVA_ENOTSUP;
  int rc = cuda_check_device(api, device);
  if (rc) return rc;
  cuda_device *d = calloc(1, sizeof(*d));
  if (!d || !(d->streams = calloc(streams ? streams : 1, sizeof(cuda_stream)))) {
    free(d);
    return KVA_ENOMEM;
  }
  d->base = (gpu_backend){.name = "cuda", .submit = cuda_submit, .destroy = cuda_destroy};
  d->api = api;
  d->ordinal = device;
  pthread_mutex_init(&d->ctx_lock, NULL);
  d->nstreams = streams ? streams : 1;
  for (uint32_t i = 0; i < d->nstreams; i++) {
    if ((rc = api->stream_create(device, &d->streams[i].stream)) ||
        (rc = api->stream_create(device, &d->streams[i].notify))) {
      LOG_ERROR("gpu: CUDA device %d: no stream: %s", device, api->error_string(rc));
      cuda_destroy(&d->base);
      return KVA_ENOTSUP;
    }
  }
  *out = &d->base;
  return KVA_OK;
}

int cuda_device_probe(int device) {
  const cuda_api *api = cuda_lib_api();
  return api ? cuda_check_device(api, device) : KVA_ENOTSUP;
}
