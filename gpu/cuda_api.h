/*
 * cuda_api.h — the C interface of libkvact_cuda.so (kv_kernels.cu), the
 * one piece of kvact built by nvcc and the only one that touches the CUDA
 * runtime for copies.
 *
 * kvact opens it with dlopen() (cuda_device.c) instead of linking it, for
 * the reason l1/host_pin.c gives: no kvact binary, test or sanitizer build
 * depends on CUDA being installed, and a machine without a driver only
 * learns it when a CUDA device is asked for. The library links the shared
 * libcudart, so it and host_pin.c share one CUDA runtime (one set of
 * page-locked ranges). Functions return 0 or a cudaError_t value.
 */
#ifndef KVA_GPU_CUDA_API_H
#define KVA_GPU_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVA_CUDA_API_VERSION 3u /* 3: kv_geom has pages (GEOM_PAGES) */
#define KVA_CUDA_API_SYMBOL "kvact_cuda_api_v3"

enum { CUDA_H2D = 1, CUDA_D2H = 2, CUDA_D2D = 3 }; /* = cudaMemcpyKind */

/* The device pointers a launch reads; copied to the device by the caller
 * (stream-ordered, so one scratch buffer per stream can be reused). */
typedef struct cuda_launch {
  kv_geom g;
  void *const *layers;      /* device copy of the layer pointers */
  const copy_chunk *chunks; /* device copy of the chunk table */
  const int64_t *slots;     /* device copy of the slot mapping */
  uint32_t nchunks, max_tokens;
  uint32_t layer_first, layer_count; /* the layers this launch copies */
  int dir;                           /* COPY_GATHER / COPY_SCATTER */
  uint32_t vec_bytes;                /* 16, 4 or 1: what every row/page and pointer allows */
} cuda_launch;

typedef struct cuda_api {
  uint32_t version; /* KVA_CUDA_API_VERSION */
  int (*device_count)(int *n);
  const char *(*error_string)(int err);
  /* 1 when the device reads page-locked host memory at its host address */
  int (*host_pointer_ok)(int device, int *ok);
  int (*stream_create)(int device, void **stream);
  int (*stream_destroy)(int device, void *stream); /* synchronizes first */
  int (*stream_sync)(void *stream);
  int (*device_alloc)(int device, void **p, size_t n);
  int (*device_free)(int device, void *p);
  int (*host_alloc)(void **p, size_t n); /* page-locked (benchmarks) */
  int (*host_free)(void *p);
  int (*memcpy_async)(void *dst, const void *src, size_t n, int kind, void *stream);
  /* fn(arg) on CUDA's callback thread once the stream's earlier work is done */
  int (*host_func)(void *stream, void (*fn)(void *), void *arg);
  int (*launch)(int device, void *stream, const cuda_launch *l);
  /* events without timing: a marker one stream records, another waits for */
  int (*event_create)(int device, void **event);
  int (*event_destroy)(void *event);
  int (*event_record)(void *event, void *stream);
  int (*stream_wait_event)(void *stream, void *event);
} cuda_api;

typedef const cuda_api *(*cuda_api_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
