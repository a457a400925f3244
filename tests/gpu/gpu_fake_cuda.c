/*
 * gpu_fake_cuda.c — libgpu_fake_cuda.so: the interface of libkvact_cuda.so
 * (gpu/cuda_api.h) over host memory, so the CUDA copy device's control
 * flow (gpu/cuda_device.c: tables, events, the notify stream, host
 * functions, reports) runs without a GPU.
 *
 * "Device" memory is host memory; copies and launches run at once, in
 * the caller's thread, which keeps every stream order trivially; host
 * functions are queued to one callback thread, as CUDA runs them on its
 * own thread after the work queued before them.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda_api.h"

typedef struct fake_cb {
  void (*fn)(void *);
  void *arg;
  struct fake_cb *next;
} fake_cb;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* queue, idle */
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t drained = PTHREAD_COND_INITIALIZER;
static fake_cb *head, *tail;
static int running; /* a callback is executing */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *callback_main(void *unused) {
  for (;;) {
    pthread_mutex_lock(&lock);
    while (!head) pthread_cond_wait(&wake, &lock);
    fake_cb *cb = head;
    head = cb->next;
    if (!head) tail = NULL;
    running = 1;
    pthread_mutex_unlock(&lock);
    cb->fn(cb->arg);
    free(cb);
    pthread_mutex_lock(&lock);
    running = 0;
    if (!head) pthread_cond_broadcast(&drained);
    pthread_mutex_unlock(&lock);
  }
  return NULL;
}

static void start_thread(void) {
  pthread_t t;
  pthread_create(&t, NULL, callback_main, NULL);
  pthread_detach(t);
}

static int host_func(void *stream, void (*fn)(void *), void *arg) {
  pthread_once(&once, start_thread);
  fake_cb *cb = malloc(sizeof(*cb));
  if (!cb) return 2; /* cudaErrorMemoryAllocation */
  *cb = (fake_cb){fn, arg, NULL};
  pthread_mutex_lock(&lock);
  if (tail)
    tail->next = cb;
  else
    head = cb;
  tail = cb;
  pthread_cond_signal(&wake);
  pthread_mutex_unlock(&lock);
  return 0;
}

/* Waits until every queued host function has run. */
static int sync_all(void *stream) {
  pthread_mutex_lock(&lock);
  while (head || running) pthread_cond_wait(&drained, &lock);
  pthread_mutex_unlock(&lock);
  return 0;
}

static void copy_rows(const cuda_launch *l, const copy_chunk *c, uint32_t layer) {
  const kv_geom *g = &l->g;
  for (uint32_t kv = 0; kv < 2; kv++)
    for (uint32_t t = 0; t < c->tokens; t++) {
      char *chunk = (char *)c->buf + geom_chunk_offset(g, kv, layer, c->tokens, t);
      int64_t slot = l->slots[c->first + t];
      if (slot < 0) {
        if (l->dir == COPY_GATHER) memset(chunk, 0, g->row_bytes);
        continue;
      }
      char *paged = (char *)l->layers[layer] + geom_paged_offset(g, kv, (uint64_t)slot);
      if (l->dir == COPY_GATHER)
        memcpy(chunk, paged, g->row_bytes);
      else
        memcpy(paged, chunk, g->row_bytes);
    }
}

static void copy_pages(const cuda_launch *l, const copy_chunk *c, uint32_t layer) {
  const kv_geom *g = &l->g;
  uint32_t pages = geom_chunk_pages(g, c->tokens);
  for (uint32_t p = 0; p < pages; p++) {
    char *chunk = (char *)c->buf + geom_chunk_page_offset(g, layer, pages, p);
    int64_t slot = l->slots[c->first + (uint64_t)p * g->block_size];
    if (slot < 0) {
      if (l->dir == COPY_GATHER) memset(chunk, 0, g->page_bytes);
      continue;
    }
    char *paged = (char *)l->layers[layer] + geom_page_offset(g, (uint64_t)slot / g->block_size);
    if (l->dir == COPY_GATHER)
      memcpy(chunk, paged, g->page_bytes);
    else
      memcpy(paged, chunk, g->page_bytes);
  }
}

static int launch(int device, void *stream, const cuda_launch *l) {
  if (l->vec_bytes != 16 && l->vec_bytes != 4 && l->vec_bytes != 1) return 1;
  for (uint32_t i = 0; i < l->nchunks; i++)
    for (uint32_t layer = l->layer_first; layer < l->layer_first + l->layer_count; layer++)
      (l->g.format == GEOM_PAGES ? copy_pages : copy_rows)(l, &l->chunks[i], layer);
  return 0;
}

static int device_count(int *n) {
  *n = 1;
  return 0;
}
static const char *error_string(int err) {
  return "fake CUDA error";
}
static int host_pointer_ok(int device, int *ok) {
  *ok = 1;
  return 0;
}
static int stream_create(int device, void **stream) {
  *stream = malloc(1);
  return *stream ? 0 : 2;
}
static int stream_destroy(int device, void *stream) {
  sync_all(stream);
  free(stream);
  return 0;
}
static int device_alloc(int device, void **p, size_t n) {
  *p = malloc(n);
  return *p ? 0 : 2;
}
static int device_free(int device, void *p) {
  free(p);
  return 0;
}
static int host_alloc(void **p, size_t n) {
  return device_alloc(0, p, n);
}
static int host_free(void *p) {
  return device_free(0, p);
}
static int memcpy_async(void *dst, const void *src, size_t n, int kind, void *stream) {
  memcpy(dst, src, n);
  return 0;
}
static int event_create(int device, void **event) {
  return stream_create(device, event);
}
static int event_destroy(void *event) {
  free(event);
  return 0;
}
static int event_record(void *event, void *stream) {
  return 0;
}
static int stream_wait_event(void *stream, void *event) {
  return 0;
}

static const cuda_api api = {
    .version = KVA_CUDA_API_VERSION,
    .device_count = device_count,
    .error_string = error_string,
    .host_pointer_ok = host_pointer_ok,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_sync = sync_all,
    .device_alloc = device_alloc,
    .device_free = device_free,
    .host_alloc = host_alloc,
    .host_free = host_free,
    .memcpy_async = memcpy_async,
    .host_func = host_func,
    .launch = launch,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .stream_wait_event = stream_wait_event,
};

__attribute__((visibility("default"))) const cuda_api *kvact_cuda_api_v3(void) {
  return &api;
}
