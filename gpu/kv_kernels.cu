/*
 * kv_kernels.cu — libkvact_cuda.so: paged-KV gather/scatter kernels and the
 * few CUDA runtime calls the CUDA copy device needs (cuda_api.h).
 *
 * One launch copies every chunk of a job for a range of layers (all of
 * them for a store; one per launch for a load, so each layer can be
 * reported as it lands). Chunks live in page-locked L1 memory that the GPU
 * reads and writes at its host address (zero copy): the D2H of a store
 * goes straight from the paged cache into the L1 pool, with no staging
 * buffer and no second copy. Rows (one token's heads * head_dim elements)
 * are contiguous on both sides and are copied in 16-byte words when the
 * row length and every base pointer allow it. KVA_KV_PAGES copies pages
 * (one block of one layer) the same way, a thread block per page.
 *
 * Slot semantics follow LMCache's multi_layer_kv_transfer: slot = block *
 * block_size + offset, -1 skips the token (a store writes zeros there).
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "gpu/cuda_api.h"

namespace {

/* The rows of the grid: x = token groups, y = chunk, z = layer * 2 + kv.
 * Threads: x = words of a row, y = tokens of the group. */
template <typename W> __global__ void kv_copy_kernel(cuda_launch l) {
  const copy_chunk c = l.chunks[blockIdx.y];
  uint32_t t = blockIdx.x * blockDim.y + threadIdx.y;
  if (t >= c.tokens) return;
  uint32_t layer = l.layer_first + blockIdx.z / 2, kv = blockIdx.z % 2;
  int64_t slot = l.slots[c.first + t];
  uint64_t words = l.g.row_bytes / sizeof(W);
  W *chunk = (W *)((char *)c.buf + geom_chunk_offset(&l.g, kv, layer, c.tokens, t));
  if (slot < 0) {
    if (l.dir == COPY_GATHER)
      for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) chunk[i] = W{};
    return;
  }
  W *paged = (W *)((char *)l.layers[layer] + geom_paged_offset(&l.g, kv, (uint64_t)slot));
  if (l.dir == COPY_GATHER)
    for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) chunk[i] = paged[i];
  else
    for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) paged[i] = chunk[i];
}

/* KVA_KV_PAGES: grid x = pages of a chunk, y = chunk, z = layer; the
 * threads of a block stride over the words of one page. A page whose block
 * is skipped (slot -1, kv_io.c checked the run) is zeros in a gather. */
template <typename W> __global__ void kv_page_kernel(cuda_launch l) {
  const copy_chunk c = l.chunks[blockIdx.y];
  uint32_t pages = geom_chunk_pages(&l.g, c.tokens), p = blockIdx.x;
  if (p >= pages) return;
  uint32_t layer = l.layer_first + blockIdx.z;
  int64_t slot = l.slots[c.first + (uint64_t)p * l.g.block_size];
  uint64_t words = l.g.page_bytes / sizeof(W);
  W *chunk = (W *)((char *)c.buf + geom_chunk_page_offset(&l.g, layer, pages, p));
  if (slot < 0) {
    if (l.dir == COPY_GATHER)
      for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) chunk[i] = W{};
    return;
  }
  W *paged =
      (W *)((char *)l.layers[layer] + geom_page_offset(&l.g, (uint64_t)slot / l.g.block_size));
  if (l.dir == COPY_GATHER)
    for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) chunk[i] = paged[i];
  else
    for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) paged[i] = chunk[i];
}

template <typename W> int launch_pages_as(void *stream, const cuda_launch *l) {
  dim3 grid(geom_chunk_pages(&l->g, l->max_tokens), l->nchunks, l->layer_count);
  kv_page_kernel<W><<<grid, 256, 0, (cudaStream_t)stream>>>(*l);
  return (int)cudaGetLastError();
}

template <typename W> int launch_as(void *stream, const cuda_launch *l) {
  if (l->g.format == GEOM_PAGES) return launch_pages_as<W>(stream, l);
  uint64_t words = l->g.row_bytes / sizeof(W);
  uint32_t tx = words < 256 ? (uint32_t)words : 256;
  uint32_t ty = 256 / tx;
  dim3 block(tx, ty);
  dim3 grid((l->max_tokens + ty - 1) / ty, l->nchunks, l->layer_count * 2);
  kv_copy_kernel<W><<<grid, block, 0, (cudaStream_t)stream>>>(*l);
  return (int)cudaGetLastError();
}

int api_launch(int device, void *stream, const cuda_launch *l) {
  int rc = (int)cudaSetDevice(device);
  if (rc) return rc;
  if (l->nchunks == 0 || l->max_tokens == 0 || l->layer_count == 0) return 0;
  if (l->nchunks > 65535 || l->layer_count > 65535 / 2) /* grid y and z limits */
    return (int)cudaErrorInvalidConfiguration;
  if (l->vec_bytes == 16) return launch_as<uint4>(stream, l);
  if (l->vec_bytes == 4) return launch_as<uint32_t>(stream, l);
  return launch_as<uint8_t>(stream, l);
}

int api_device_count(int *n) {
  return (int)cudaGetDeviceCount(n);
}
const char *api_error_string(int err) {
  return cudaGetErrorString((cudaError_t)err);
}

int api_host_pointer_ok(int device, int *ok) {
  return (int)cudaDeviceGetAttribute(ok, cudaDevAttrCanUseHostPointerForRegisteredMem, device);
}

int api_stream_create(int device, void **stream) {
  int rc = (int)cudaSetDevice(device);
  if (rc) return rc;
  cudaStream_t s;
  rc = (int)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (!rc) *stream = s;
  return rc;
}

int api_stream_destroy(int device, void *stream) {
  cudaSetDevice(device);
  cudaStreamSynchronize((cudaStream_t)stream);
  return (int)cudaStreamDestroy((cudaStream_t)stream);
}

int api_stream_sync(void *stream) {
  return (int)cudaStreamSynchronize((cudaStream_t)stream);
}

int api_device_alloc(int device, void **p, size_t n) {
  int rc = (int)cudaSetDevice(device);
  return rc ? rc : (int)cudaMalloc(p, n);
}

int api_device_free(int device, void *p) {
  cudaSetDevice(device);
  return (int)cudaFree(p);
}

int api_host_alloc(void **p, size_t n) {
  return (int)cudaHostAlloc(p, n, cudaHostAllocDefault);
}
int api_host_free(void *p) {
  return (int)cudaFreeHost(p);
}

int api_memcpy_async(void *dst, const void *src, size_t n, int kind, void *stream) {
  return (int)cudaMemcpyAsync(dst, src, n, (cudaMemcpyKind)kind, (cudaStream_t)stream);
}

int api_host_func(void *stream, void (*fn)(void *), void *arg) {
  return (int)cudaLaunchHostFunc((cudaStream_t)stream, fn, arg);
}

int api_event_create(int device, void **event) {
  int rc = (int)cudaSetDevice(device);
  cudaEvent_t e;
  if (!rc) rc = (int)cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (!rc) *event = e;
  return rc;
}

int api_event_destroy(void *event) {
  return (int)cudaEventDestroy((cudaEvent_t)event);
}

int api_event_record(void *event, void *stream) {
  return (int)cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
}

int api_stream_wait_event(void *stream, void *event) {
  return (int)cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0);
}

const cuda_api api = {
    KVA_CUDA_API_VERSION, api_device_count,  api_error_string,
    api_host_pointer_ok,  api_stream_create, api_stream_destroy,
    api_stream_sync,      api_device_alloc,  api_device_free,
    api_host_alloc,       api_host_free,     api_memcpy_async,
    api_host_func,        api_launch,        api_event_create,
    api_event_destroy,    api_event_record,  api_stream_wait_event,
};

} // namespace

extern "C" __attribute__((visibility("default"))) const cuda_api *kvact_cuda_api_v3(void) {
  return &api;
}
