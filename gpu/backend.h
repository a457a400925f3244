/*
 * backend.h — what a copy actor drives: a device that runs copy jobs
 * asynchronously and reports back through callbacks.
 *
 *   host_device.c  KVA_DEVICE_HOST: CPU threads over host memory
 *   cuda_device.c  a CUDA ordinal: streams and kernels (kv_kernels.cu),
 *                  reached through dlopen (cuda_api.h)
 *
 * The two run the same job the same way: a gather copies every layer and
 * then calls done; a scatter copies layer by layer, calls layer_done after
 * each (the layer's bytes are in place), then done. Callbacks run on a
 * thread of the backend (a host stream thread, CUDA's callback thread):
 * they must be short and must not call back into the backend.
 */
#ifndef KVA_GPU_BACKEND_H
#define KVA_GPU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/kv_geom.h"

enum { COPY_GATHER = 0, COPY_SCATTER = 1 };

/* One L1 chunk object of a job: tokens [first, first + tokens) of the
 * request. Plain data: the CUDA backend copies the array to the device. */
typedef struct copy_chunk {
  void *buf;      /* KV_2LTD bytes in L1 */
  uint64_t first; /* index of its first token in the slot mapping */
  uint32_t tokens;
  uint32_t pad;
} copy_chunk;

typedef struct copy_job copy_job;
struct copy_job {
  int dir; /* COPY_GATHER (paged cache -> chunks) or COPY_SCATTER */
  kv_geom g;
  void *const *layers; /* g.num_layers paged-cache base pointers */
  const copy_chunk *chunks;
  uint32_t nchunks;
  uint32_t max_tokens;  /* the largest chunk's tokens (kernel grid size) */
  const int64_t *slots; /* slot_mapping of the whole request */
  uint64_t ntokens;     /* entries in slots */
  void (*layer_done)(copy_job *j, uint32_t layer); /* scatter only; may be NULL */
  void (*done)(copy_job *j, int result);           /* KVA_OK or KVA_EIO */
  void *arg;                                       /* the submitter's */
  copy_job *next;                                  /* the backend's, while the job is queued */
};

typedef struct gpu_backend gpu_backend;
struct gpu_backend {
  const char *name;
  /* Queues j; callbacks follow later, never from inside submit. A
   * negative return means j was refused and no callback will come. */
  int (*submit)(gpu_backend *b, copy_job *j);
  /* Waits for every submitted job's callbacks, then frees the backend. */
  void (*destroy)(gpu_backend *b);
};

/* The host device with `streams` copy threads (jobs go round-robin; one
 * stream runs its jobs in order). NULL on ENOMEM or a thread that would
 * not start. */
gpu_backend *host_device_create(uint32_t streams);
/* CUDA ordinal `device` with `streams` streams. KVA_ENOTSUP (and a log
 * line saying why) without the kernel library, a driver or that device. */
int cuda_device_create(int device, uint32_t streams, gpu_backend **out);
/* The checks of cuda_device_create without opening anything: KVA_OK,
 * KVA_ENOTSUP (logged) or KVA_EINVAL for a negative ordinal. */
int cuda_device_probe(int device);

/* The copy of one job, on the CPU: used by the host device (host_copy.c). */
void host_copy_layer(const copy_job *j, uint32_t layer);

#endif
