/*
 * suite_gpu.c — kvbench --suite gpu: kva_kv_store (gather) and kva_kv_load
 * (scatter) bandwidth for a llama3-8b shape (32 layers, 8 KV heads x 128,
 * bf16, block_size 16, 256-token chunks of 32 MiB, the paged blocks in a
 * shuffled order), against a plain copy of the same bytes in the same run:
 *
 *  - with a CUDA device: anchor=cudaMemcpyAsync, contiguous device memory
 *    <-> page-locked host memory, D2H for the store and H2D for the load;
 *    the target is 0.95;
 *  - without one (no driver, no GPU, no libkvact_cuda.so): the host device
 *    (KVA_DEVICE_HOST) against memcpy, and a "# no CUDA device" line says
 *    so.
 *
 * store is timed from kva_kv_store to kva_op_wait (reserve, gather,
 * finish_write); load from kva_kv_load to kva_op_wait (read, scatter per
 * layer, read-lock release), with the prefetch untimed. load-layer0 is the
 * time until kva_op_wait_layer(0) returns against the whole load: how much
 * sooner an engine can start its first layer. --reps repetitions, medians.
 * mallocs_per_op: heap allocations of the whole process during the timed
 * stores and loads (pooled ops: 0 once warm; 0 too in sanitizer builds,
 * which do not count).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "gpu/cuda_lib.h"
#include "kvact.h"
#include "tools/kvbench/bench.h"
#include "tools/kvbench/malloc_count.h"

#define LAYERS 32
#define HEADS 8
#define HEAD_DIM 128
#define BLOCK 16
#define CHUNK_TOKENS 256
#define TARGET 0.95
#define GB 1e9
#define MAX_REPS 64

typedef struct gpu_bench {
  int device; /* 0, or KVA_DEVICE_HOST */
  const cuda_api *api;
  void *stream;
  kva_runtime *rt;
  kva_storage *s;
  void *layers[LAYERS];
  size_t layer_bytes;
  kva_kv *kv;
  uint32_t nchunks, nblocks;
  size_t ntokens, bytes; /* tokens moved; their K and V bytes */
  int64_t *slots;
  kva_key *keys;
  void *anchor_src, *anchor_dst; /* device and pinned host, or two host buffers */
} gpu_bench;

static void die(const char *what, int rc) {
  fprintf(stderr, "kvbench: gpu: %s: %s\n", what, kva_strerror(rc));
  exit(1);
}

/* Device 0 when CUDA can serve it, else the host device. */
static int pick_device(gpu_bench *b) {
  b->api = cuda_lib_api();
  if (b->api && cuda_device_probe(0) == KVA_OK) return 0;
  b->api = NULL;
  return KVA_DEVICE_HOST;
}

static void *dev_alloc(gpu_bench *b, size_t n) {
  void *p = NULL;
  if (b->device == KVA_DEVICE_HOST) {
    p = aligned_alloc(4096, n);
    if (p) memset(p, 0x5a, n); /* fault the pages in before any timing */
  } else if (b->api->device_alloc(b->device, &p, n) != 0) {
    p = NULL;
  }
  if (!p) die("out of memory", KVA_ENOMEM);
  return p;
}

static void dev_free(gpu_bench *b, void *p) {
  if (b->device == KVA_DEVICE_HOST)
    free(p);
  else
    b->api->device_free(b->device, p);
}

/* A token's slot: its block taken from a shuffled block table. */
static void make_slots(gpu_bench *b) {
  uint32_t *table = malloc(b->nblocks * sizeof(*table));
  b->slots = malloc(b->ntokens * sizeof(*b->slots));
  if (!table || !b->slots) die("out of memory", KVA_ENOMEM);
  for (uint32_t i = 0; i < b->nblocks; i++) table[i] = i;
  uint64_t x = 88172645463325252ull;
  for (uint32_t i = b->nblocks - 1; i > 0; i--) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    uint32_t j = (uint32_t)(x % (i + 1)), t = table[i];
    table[i] = table[j];
    table[j] = t;
  }
  for (size_t t = 0; t < b->ntokens; t++)
    b->slots[t] = (int64_t)table[t / BLOCK] * BLOCK + (int64_t)(t % BLOCK);
  free(table);
}

static void bench_setup(gpu_bench *b, const bench_opts *o, int quick) {
  b->device = pick_device(b);
  b->nchunks = quick ? 2 : 4;
  b->ntokens = (size_t)b->nchunks * CHUNK_TOKENS;
  b->nblocks = (uint32_t)(2 * b->ntokens / BLOCK); /* half of the blocks used */
  size_t row = HEADS * HEAD_DIM * 2;
  b->bytes = 2 * LAYERS * b->ntokens * row;
  b->layer_bytes = 2 * (size_t)b->nblocks * BLOCK * row;
  const char *pinned[] = {"l1.pinned", "true", "l2", "[]", NULL};
  const char *plain[] = {"l2", "[]", NULL};
  b->rt = bench_start_with(o->workers, 2 * b->bytes + (64u << 20),
                           b->device == KVA_DEVICE_HOST ? plain : pinned);
  b->s = kva_storage_of(b->rt);
  for (int l = 0; l < LAYERS; l++) b->layers[l] = dev_alloc(b, b->layer_bytes);
  kva_paged_kv d = {.device = b->device,
                    .format = KVA_KV_FLASH,
                    .dtype = KVA_DT_BF16,
                    .num_layers = LAYERS,
                    .num_blocks = b->nblocks,
                    .block_size = BLOCK,
                    .num_heads = HEADS,
                    .head_dim = HEAD_DIM,
                    .layers = b->layers};
  int rc = kva_kv_register(b->s, &d, &b->kv);
  if (rc != KVA_OK) die("kva_kv_register", rc);
  make_slots(b);
  b->keys = calloc(b->nchunks, sizeof(*b->keys));
  for (uint32_t i = 0; i < b->nchunks; i++) b->keys[i] = bench_key("kvbench-gpu", i);
  b->anchor_src = dev_alloc(b, b->bytes);
  if (b->device == KVA_DEVICE_HOST) {
    b->anchor_dst = dev_alloc(b, b->bytes);
  } else if (b->api->host_alloc(&b->anchor_dst, b->bytes) != 0 ||
             b->api->stream_create(b->device, &b->stream) != 0) {
    die("cudaHostAlloc/cudaStreamCreate", KVA_EIO);
  }
}

static void bench_teardown(gpu_bench *b) {
  kva_kv_unregister(b->kv);
  for (int l = 0; l < LAYERS; l++) dev_free(b, b->layers[l]);
  dev_free(b, b->anchor_src);
  if (b->device == KVA_DEVICE_HOST) {
    free(b->anchor_dst);
  } else {
    b->api->host_free(b->anchor_dst);
    b->api->stream_destroy(b->device, b->stream);
  }
  kva_runtime_shutdown(b->rt);
  free(b->slots);
  free(b->keys);
}

static double op_wait_s(kva_op *op, uint64_t t0, const char *what) {
  int st = KVA_OK, rc = kva_op_wait(op, 60000, &st);
  if (rc != KVA_OK || st != KVA_OK) die(what, rc != KVA_OK ? rc : st);
  return (bench_now_ns() - t0) / 1e9;
}

/* Allocations of the whole process inside kva_kv_store / kva_kv_load
 * and their kva_op_wait (copy actor, L1 manager and backend included),
 * over the timed repetitions. */
static uint64_t op_mallocs, op_count;

/* One store of every chunk into an empty L1; seconds. */
static double time_store(gpu_bench *b) {
  kva_clear(b->s, 0);
  kva_op *op = NULL;
  uint64_t m0 = malloc_count(), t0 = bench_now_ns();
  int rc = kva_kv_store(b->s, b->kv, b->keys, b->nchunks, CHUNK_TOKENS, b->slots, b->ntokens, &op);
  if (rc != KVA_OK) die("kva_kv_store", rc);
  double s = op_wait_s(op, t0, "store");
  op_mallocs += malloc_count() - m0;
  op_count++;
  return s;
}

/* One load of every (stored) chunk; seconds, and until layer 0 landed. */
static double time_load(gpu_bench *b, double *layer0) {
  kva_prefetch *h = NULL;
  size_t hits = 0;
  int rc = kva_submit_prefetch(b->s, b->keys, b->nchunks, NULL, 0, &h);
  if (rc != KVA_OK || (rc = kva_wait_prefetch(b->s, h, 60000, &hits)) != KVA_OK ||
      hits != b->nchunks)
    die("prefetch", rc != KVA_OK ? rc : KVA_EIO);
  kva_op *op = NULL;
  uint64_t m0 = malloc_count(), t0 = bench_now_ns();
  rc = kva_kv_load(b->s, b->kv, b->keys, b->nchunks, CHUNK_TOKENS, b->slots, b->ntokens, &op);
  if (rc != KVA_OK) die("kva_kv_load", rc);
  if ((rc = kva_op_wait_layer(op, 0, 60000)) != KVA_OK) die("kva_op_wait_layer", rc);
  *layer0 = (bench_now_ns() - t0) / 1e9;
  double s = op_wait_s(op, t0, "load");
  op_mallocs += malloc_count() - m0;
  op_count++;
  return s;
}

/* The same bytes copied plainly: D2H (or memcpy) for the store's anchor,
 * H2D for the load's. */
static double time_anchor(gpu_bench *b, int to_host) {
  uint64_t t0 = bench_now_ns();
  if (b->device == KVA_DEVICE_HOST) {
    if (to_host)
      memcpy(b->anchor_dst, b->anchor_src, b->bytes);
    else
      memcpy(b->anchor_src, b->anchor_dst, b->bytes);
  } else {
    void *dst = to_host ? b->anchor_dst : b->anchor_src;
    void *src = to_host ? b->anchor_src : b->anchor_dst;
    if (b->api->memcpy_async(dst, src, b->bytes, to_host ? CUDA_D2H : CUDA_H2D, b->stream) ||
        b->api->stream_sync(b->stream))
      die("cudaMemcpyAsync", KVA_EIO);
  }
  return (bench_now_ns() - t0) / 1e9;
}

static void print_bw(const gpu_bench *b, const char *measure, double kv_s, double anchor_s) {
  const char *anchor = b->device == KVA_DEVICE_HOST ? "memcpy" : "cudaMemcpyAsync";
  double kv = b->bytes / kv_s / GB, a = b->bytes / anchor_s / GB;
  char m[64];
  snprintf(m, sizeof m, "%s-%ux%uMiB", measure, b->nchunks,
           (unsigned)(b->bytes / b->nchunks >> 20));
  printf("measure=%s kvact=%.3g anchor=%s:%.3g ratio=%.2f", m, kv, anchor, a, kv / a);
  bench_target(m, NULL, kv / a, ">=", TARGET);
  printf(" ms=%.1f unit=GB/s\n", kv_s * 1e3);
}

int suite_gpu(const bench_opts *o) {
  gpu_bench b = {0};
  int reps = o->reps < MAX_REPS ? o->reps : MAX_REPS;
  bench_setup(&b, o, o->cycle_bytes < (1ull << 30)); /* --quick shrinks cycle_bytes */
  printf("suite=gpu workers=%d reps=%d (medians) device=%s shape=llama3-8b layers=%d "
         "kv_heads=%d head_dim=%d dtype=bf16 format=flash block_size=%d chunk_tokens=%d\n",
         o->workers, reps, b.device == KVA_DEVICE_HOST ? "host" : "cuda:0", LAYERS, HEADS, HEAD_DIM,
         BLOCK, CHUNK_TOKENS);
  if (b.device == KVA_DEVICE_HOST)
    printf("# no CUDA device: the host device (KVA_DEVICE_HOST) against memcpy\n");
  double st[MAX_REPS], sa[MAX_REPS], ld[MAX_REPS], la[MAX_REPS], l0[MAX_REPS];
  time_store(&b); /* warm-up: first touch of the L1 pages, the op pool */
  double warm;
  time_load(&b, &warm);
  time_anchor(&b, 1);
  op_mallocs = op_count = 0;
  for (int r = 0; r < reps; r++) {
    sa[r] = time_anchor(&b, 1);
    st[r] = time_store(&b);
    la[r] = time_anchor(&b, 0);
    ld[r] = time_load(&b, &l0[r]);
  }
  double load_s = bench_median(ld, reps), layer0_s = bench_median(l0, reps);
  print_bw(&b, "store-gather", bench_median(st, reps), bench_median(sa, reps));
  print_bw(&b, "load-scatter", load_s, bench_median(la, reps));
  printf("measure=load-layer0 layer0_ms=%.2f load_ms=%.2f ratio=%.3f", layer0_s * 1e3, load_s * 1e3,
         layer0_s / load_s);
  bench_no_target(); /* how early layer 0 is usable: read, not judged */
  printf(" unit=ms\n");
  double per_op = bench_mallocs_per(op_mallocs, op_count);
  printf("measure=ops ops=%llu", (unsigned long long)op_count);
  bench_print_mallocs("mallocs_per_op", per_op, 6);
  bench_target("ops-mallocs", NULL, per_op, "<=", 0);
  printf("\n");
  bench_suite_end("gpu");
  bench_teardown(&b);
  return 0;
}
