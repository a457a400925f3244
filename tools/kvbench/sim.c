/*
 * sim.c — the serving-engine simulation: --threads engine threads each run
 * their share of --conversations multi-turn conversations, one turn at a
 * time in turn. Each engine keeps a paged KV cache in the vLLM flash
 * layout (per layer [2, blocks, 16, heads, head_dim], bf16) registered with
 * kva_kv_register: in device 0's memory when CUDA can serve it, else in
 * host memory (KVA_DEVICE_HOST). A turn keys the whole history
 * (kva_chunk_keys), prefetches, loads the hits into the paged cache with
 * kva_kv_load and checks their bytes, "computes" the misses (sleeps for
 * their prefill time and writes each new chunk's KV, a pattern derived
 * from its key, into the cache) and stores the new full chunks from the
 * cache with kva_kv_store.
 *
 * The cache holds SIM_PAGES chunks: a turn's hits load, and its new chunks
 * store, in batches that fit it, each batch on blocks taken from the
 * engine's block allocator (a stack, shuffled at the start, so a batch's
 * blocks are scattered and differ from the ones its chunks were stored
 * from) and given back once its op is waited for.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/array.h"
#include "gpu/cuda_lib.h"
#include "gpu/op.h"
#include "tools/kvbench/bench.h"
#include "tools/kvbench/sim.h"

#define SIM_PAGES 8        /* chunks the engine's paged KV cache holds */
#define SIM_STORE_BATCH 4  /* keys a store: a reservation is all or nothing */
#define SIM_BLOCK 16       /* tokens per block of the paged cache */
#define SIM_MAX_LAYERS 128 /* of a model */

static const sim_model models[] = {
    {"llama3-8b", 32, 8, 128},
    {"llama3-70b", 80, 8, 128},
    {"qwen2.5-7b", 28, 4, 128},
    {"tiny", 2, 2, 64},
};

typedef struct sim_conv {
  int32_t *tokens;
  size_t n;
  int turns_left;
} sim_conv;

/* An engine's paged KV cache and its block allocator. On the host device
 * `mirror` is the cache itself; on a CUDA device it is a host copy that
 * the engine writes and checks, moved whole layers at a time (untimed). */
typedef struct sim_cache {
  int device;
  const cuda_api *api; /* CUDA only */
  void *stream;
  uint32_t nlayers, nblocks;
  size_t row, layer_bytes; /* bytes of one token's K (or V) in a layer */
  void *layers[SIM_MAX_LAYERS];
  uint8_t *mirror[SIM_MAX_LAYERS];
  kva_kv *kv;
  uint32_t *free_blocks, nfree;
  uint32_t batch[SIM_PAGES * SIM_CHUNK / SIM_BLOCK]; /* blocks of the batch */
  uint32_t nbatch;
  int64_t slots[SIM_PAGES * SIM_CHUNK]; /* the batch's slot mapping */
} sim_cache;

typedef struct sim_engine {
  const sim_opts *o;
  kva_storage *s;
  sim_stats *st;
  kva_layout layout;
  size_t chunk_bytes;
  uint64_t rng, start_ns;
  const int32_t *prompts; /* --prompts x SIM_PROMPT tokens, shared */
  sim_conv *convs;
  int nconvs;
  sim_cache *cache;
  volatile int *stop;
  pthread_t th;
} sim_engine;

static uint64_t rng_next(uint64_t *x) { /* splitmix64 */
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t rng_range(uint64_t *x, uint64_t lo, uint64_t hi) {
  return lo + rng_next(x) % (hi - lo + 1);
}

/* The 8-byte word at index w of the chunk stored under k (a KV_2LTD
 * object [2, layers, SIM_CHUNK, row]). */
static uint64_t pattern_word(const kva_key *k, size_t w) {
  uint64_t h;
  memcpy(&h, k->hash, sizeof h);
  return h ^ (w * 0x9E3779B97F4A7C15ull);
}

/* The index in its chunk of the first word of token t's row of (kv, l). */
static size_t pattern_row(const sim_cache *c, uint32_t kv, uint32_t l, uint32_t t) {
  return (((size_t)kv * c->nlayers + l) * SIM_CHUNK + t) * (c->row / 8);
}

/* Byte offset of (kv, slot) in a layer of the flash layout. */
static size_t cache_offset(const sim_cache *c, uint32_t kv, int64_t slot) {
  return ((size_t)kv * c->nblocks * SIM_BLOCK + (size_t)slot) * c->row;
}

static double secs(uint64_t ns) {
  return (double)ns / 1e9;
}

static void sleep_s(double s) {
  if (s <= 0) return;
  struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

/* A fresh conversation: a shared system prompt, then 2..8 turns. */
static void conv_start(sim_engine *e, sim_conv *c) {
  int p = (int)rng_range(&e->rng, 0, (uint64_t)e->o->prompts - 1);
  memcpy(c->tokens, e->prompts + (size_t)p * SIM_PROMPT, SIM_PROMPT * sizeof(int32_t));
  c->n = SIM_PROMPT;
  c->turns_left = (int)rng_range(&e->rng, 2, 8);
}

static void conv_append(sim_engine *e, sim_conv *c, uint64_t lo, uint64_t hi) {
  size_t add = (size_t)rng_range(&e->rng, lo, hi);
  for (size_t i = 0; i < add; i++) c->tokens[c->n++] = (int32_t)(rng_next(&e->rng) % 128000);
}

/* ---- the paged cache -------------------------------------------------- */

/* Host memory -> the device's cache (CUDA only; untimed). */
static int cache_push(sim_cache *c) {
  if (c->device == KVA_DEVICE_HOST) return 0;
  for (uint32_t l = 0; l < c->nlayers; l++)
    if (c->api->memcpy_async(c->layers[l], c->mirror[l], c->layer_bytes, CUDA_H2D, c->stream))
      return -1;
  return c->api->stream_sync(c->stream) ? -1 : 0;
}

/* The device's cache -> host memory (CUDA only; untimed). */
static int cache_pull(sim_cache *c) {
  if (c->device == KVA_DEVICE_HOST) return 0;
  for (uint32_t l = 0; l < c->nlayers; l++)
    if (c->api->memcpy_async(c->mirror[l], c->layers[l], c->layer_bytes, CUDA_D2H, c->stream))
      return -1;
  return c->api->stream_sync(c->stream) ? -1 : 0;
}

/* Blocks for m chunks from the allocator, and the slot mapping of their
 * tokens (chunk i's token t: the batch's token i * SIM_CHUNK + t). */
static void cache_map(sim_cache *c, size_t m) {
  c->nbatch = (uint32_t)(m * SIM_CHUNK / SIM_BLOCK);
  for (uint32_t b = 0; b < c->nbatch; b++) c->batch[b] = c->free_blocks[--c->nfree];
  for (size_t t = 0; t < m * SIM_CHUNK; t++)
    c->slots[t] = (int64_t)c->batch[t / SIM_BLOCK] * SIM_BLOCK + (int64_t)(t % SIM_BLOCK);
}

/* The batch's blocks back, in the order taken: the stack's order churns. */
static void cache_unmap(sim_cache *c) {
  for (uint32_t b = 0; b < c->nbatch; b++) c->free_blocks[c->nfree++] = c->batch[b];
  c->nbatch = 0;
}

/* Writes chunk i of the batch (key k): every token's K and V rows in every
 * layer hold the words of k's chunk object. */
static void cache_fill(sim_cache *c, size_t i, const kva_key *k) {
  for (uint32_t kv = 0; kv < 2; kv++)
    for (uint32_t l = 0; l < c->nlayers; l++)
      for (uint32_t t = 0; t < SIM_CHUNK; t++) {
        uint64_t *row =
            (uint64_t *)(c->mirror[l] + cache_offset(c, kv, c->slots[i * SIM_CHUNK + t]));
        size_t w0 = pattern_row(c, kv, l, t);
        for (size_t w = 0; w < c->row / 8; w++) row[w] = pattern_word(k, w0 + w);
      }
}

/* The rows a load is checked on: the first, middle and last token of a
 * chunk, K and V of every layer. */
static const uint32_t check_tokens[] = {0, SIM_CHUNK / 2, SIM_CHUNK - 1};

/* Overwrites chunk i's checked rows, so only the load can make them right. */
static void cache_poison(sim_cache *c, size_t i) {
  for (uint32_t kv = 0; kv < 2; kv++)
    for (uint32_t l = 0; l < c->nlayers; l++)
      for (size_t x = 0; x < sizeof check_tokens / sizeof check_tokens[0]; x++)
        memset(c->mirror[l] + cache_offset(c, kv, c->slots[i * SIM_CHUNK + check_tokens[x]]), 0xa5,
               c->row);
}

/* Wrong bytes among chunk i's checked rows. */
static uint64_t cache_check(const sim_cache *c, size_t i, const kva_key *k) {
  uint64_t bad = 0;
  for (uint32_t kv = 0; kv < 2; kv++)
    for (uint32_t l = 0; l < c->nlayers; l++)
      for (size_t x = 0; x < sizeof check_tokens / sizeof check_tokens[0]; x++) {
        uint32_t t = check_tokens[x];
        const uint8_t *row = c->mirror[l] + cache_offset(c, kv, c->slots[i * SIM_CHUNK + t]);
        size_t w0 = pattern_row(c, kv, l, t);
        for (size_t w = 0; w < c->row / 8; w++) {
          uint64_t want = pattern_word(k, w0 + w), have;
          memcpy(&have, row + w * 8, 8);
          for (int b = 0; have != want && b < 8; b++)
            bad += ((want >> (8 * b)) & 0xff) != ((have >> (8 * b)) & 0xff);
        }
      }
  return bad;
}

/* Waits for op; its status, or the call's error. */
static int op_finish(int rc, kva_op *op) {
  int st = rc;
  if (rc == KVA_OK && (rc = kva_op_wait(op, -1, &st)) != KVA_OK) st = rc;
  return st;
}

/* Loads the prefetched hits into the paged cache, SIM_PAGES chunks a
 * kva_kv_load, and checks them; each op releases its keys' read locks.
 * Returns the seconds in kva_kv_load and kva_op_wait, or -1 after a
 * failed load (the locks left are released, *errs counts its chunks). */
static double turn_load(sim_engine *e, const kva_key *keys, size_t hits, uint64_t *bad,
                        uint64_t *errs) {
  sim_cache *c = e->cache;
  double dt = 0;
  for (size_t b = 0; b < hits; b += SIM_PAGES) {
    size_t m = hits - b < SIM_PAGES ? hits - b : SIM_PAGES;
    cache_map(c, m);
    for (size_t i = 0; i < m; i++) cache_poison(c, i);
    int rc = cache_push(c) ? KVA_EIO : KVA_OK;
    kva_op *op = NULL;
    int called = rc == KVA_OK; /* the op, or a refused call, releases the batch's locks */
    uint64_t t0 = bench_now_ns();
    if (called) rc = kva_kv_load(e->s, c->kv, keys + b, m, SIM_CHUNK, c->slots, m * SIM_CHUNK, &op);
    rc = op_finish(rc, op);
    dt += secs(bench_now_ns() - t0);
    if (rc == KVA_OK && cache_pull(c)) rc = KVA_EIO;
    for (size_t i = 0; rc == KVA_OK && i < m; i++) *bad += cache_check(c, i, &keys[b + i]);
    cache_unmap(c);
    if (rc != KVA_OK) {
      size_t rest = hits - b - (called ? m : 0);
      if (rest) kva_finish_read_prefetched(e->s, keys + hits - rest, rest, 0);
      *errs += m;
      return -1;
    }
  }
  return dt;
}

/* Stores the full chunks [from, n): writes each one's KV into the paged
 * cache (the "computed" KV, before the clock starts), then kva_kv_store
 * of SIM_STORE_BATCH keys at a time from there, timed until its op is
 * waited for. */
static void turn_store(sim_engine *e, const kva_key *keys, size_t from, size_t n) {
  sim_cache *c = e->cache;
  for (size_t b = from; b < n; b += SIM_STORE_BATCH) {
    size_t m = n - b < SIM_STORE_BATCH ? n - b : SIM_STORE_BATCH;
    cache_map(c, m);
    for (size_t i = 0; i < m; i++) cache_fill(c, i, &keys[b + i]);
    int rc = cache_push(c) ? KVA_EIO : KVA_OK;
    kva_op *op = NULL;
    uint32_t copied = 0, present = 0, no_room = 0;
    uint64_t t0 = bench_now_ns();
    if (rc == KVA_OK)
      rc = kva_kv_store(e->s, c->kv, keys + b, m, SIM_CHUNK, c->slots, m * SIM_CHUNK, &op);
    if (rc == KVA_OK) op_store_counts(op, &copied, &present, &no_room);
    rc = op_finish(rc, op);
    double dt = secs(bench_now_ns() - t0);
    cache_unmap(c);
    uint64_t errs = rc == KVA_OK || rc == KVA_ENOMEM ? 0 : m;
    pthread_mutex_lock(&e->st->mu);
    e->st->stored_chunks += errs ? 0 : copied;
    e->st->store_skipped += present;
    e->st->store_oom += no_room;
    e->st->errors += errs;
    e->st->store_s += dt;
    pthread_mutex_unlock(&e->st->mu);
  }
}

static void stats_sample(sim_stats *st, double pf, double ttft, double base) {
  if (st->nsamples == st->cap) {
    size_t cap = array_next_cap(st->cap, st->nsamples + 1, sizeof(double));
    if (!cap || !ARRAY_RESIZE(st->prefetch_s, cap) || !ARRAY_RESIZE(st->ttft_s, cap) ||
        !ARRAY_RESIZE(st->ttft_base_s, cap))
      return;
    st->cap = cap;
  }
  st->prefetch_s[st->nsamples] = pf;
  st->ttft_s[st->nsamples] = ttft;
  st->ttft_base_s[st->nsamples++] = base;
}

/* Splits the prefetch hits over the tiers that kva_lookup named. */
static void stats_tiers(sim_stats *st, const kva_tier_hits *th, size_t hits) {
  for (uint32_t t = st->ntiers; t < th->ntiers && t < SIM_MAX_TIERS; t++, st->ntiers++)
    memcpy(st->tier_name[t], th->tier[t].name, sizeof st->tier_name[t]);
  for (uint32_t t = 0; t < th->ntiers && t < SIM_MAX_TIERS && hits; t++) {
    size_t h = th->tier[t].hits < hits ? th->tier[t].hits : hits;
    if (t == th->ntiers - 1) h = hits; /* what moved between lookup and prefetch */
    st->tier_hits[t] += h;
    hits -= h;
  }
}

static void stats_turn(sim_engine *e, const kva_tier_hits *th, size_t n, size_t hits, double pf,
                       double ttft, double base) {
  sim_stats *st = e->st;
  pthread_mutex_lock(&st->mu);
  size_t sec = (size_t)secs(bench_now_ns() - e->start_ns);
  if (sec >= SIM_MAX_SECONDS) sec = SIM_MAX_SECONDS - 1;
  st->turns++;
  st->chunks += n;
  st->hit_chunks += hits;
  stats_tiers(st, th, hits);
  stats_sample(st, pf, ttft, base);
  st->sec[sec].turns++;
  st->sec[sec].chunks += n;
  st->sec[sec].hit_chunks += hits;
  st->sec[sec].ttft_sum_s += ttft;
  st->sec[sec].ttft_base_sum_s += base;
  pthread_mutex_unlock(&st->mu);
}

/* One turn of c: the user's text, then the engine's work, then the reply. */
static void engine_turn(sim_engine *e, sim_conv *c) {
  kva_key keys[SIM_MAX_KEYS];
  kva_tier_hits th = {0};
  conv_append(e, c, 128, 512);
  size_t n =
      kva_chunk_keys(e->o->model->name, 0, NULL, c->tokens, c->n, SIM_CHUNK, 0, keys, SIM_MAX_KEYS);
  sim_chains_note(&e->st->chains, keys, n);
  size_t hits = 0;
  double pf = 0, rd = 0;
  uint64_t bad = 0, errs = 0;
  if (n) {
    kva_lookup(e->s, keys, n, 0, &th);
    kva_prefetch *h;
    uint64_t t0 = bench_now_ns();
    int rc = kva_submit_prefetch(e->s, keys, n, &e->layout, 0, &h);
    /* an engine waits for its prefetch: a timed-out handle would keep its
     * read locks for nobody */
    if (rc == KVA_OK) rc = kva_wait_prefetch(e->s, h, -1, &hits);
    pf = secs(bench_now_ns() - t0);
    if (rc != KVA_OK) hits = 0;
    if (hits && (rd = turn_load(e, keys, hits, &bad, &errs)) < 0) rd = 0, hits = 0, bad = 0;
  }
  double miss_s = (double)(c->n - hits * SIM_CHUNK) / e->o->prefill_tps;
  sleep_s(miss_s);
  if (n > hits) turn_store(e, keys, hits, n);
  pthread_mutex_lock(&e->st->mu);
  e->st->wrong_bytes += bad;
  e->st->errors += errs;
  e->st->read_s += rd;
  pthread_mutex_unlock(&e->st->mu);
  stats_turn(e, &th, n, hits, pf, pf + rd + miss_s, (double)c->n / e->o->prefill_tps);
  conv_append(e, c, 64, 256);
  if (--c->turns_left == 0 || c->n + 512 + 256 > SIM_MAX_TOKENS) {
    conv_start(e, c);
    pthread_mutex_lock(&e->st->mu);
    e->st->conversations++;
    pthread_mutex_unlock(&e->st->mu);
  }
}

static void *engine_run(void *arg) {
  sim_engine *e = arg;
  /* relaxed: a flag polled between turns, nothing is published with it */
  for (int i = 0; !__atomic_load_n(e->stop, __ATOMIC_RELAXED); i = (i + 1) % e->nconvs)
    engine_turn(e, &e->convs[i]);
  return NULL;
}

kva_layout sim_layout(const sim_model *m) {
  kva_layout l = {.ntensors = 1};
  l.tensor[0].ndim = 4;
  l.tensor[0].shape[0] = 2; /* K, V */
  l.tensor[0].shape[1] = m->layers;
  l.tensor[0].shape[2] = SIM_CHUNK;
  l.tensor[0].shape[3] = (uint64_t)m->heads * m->head_dim;
  l.tensor[0].dtype = KVA_DT_BF16;
  return l;
}

const sim_model *sim_model_find(const char *name) {
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    if (strcmp(models[i].name, name) == 0) return &models[i];
  return NULL;
}

/* Allocates, prefaults and registers an engine's paged cache on device
 * (KVA_DEVICE_HOST or a CUDA ordinal). */
static int cache_init(sim_cache *c, const sim_model *m, kva_storage *s, int device, uint64_t seed) {
  c->device = device;
  c->nlayers = m->layers;
  c->nblocks = SIM_PAGES * SIM_CHUNK / SIM_BLOCK;
  c->row = (size_t)m->heads * m->head_dim * 2;
  c->layer_bytes = 2 * (size_t)c->nblocks * SIM_BLOCK * c->row;
  if (device != KVA_DEVICE_HOST &&
      (!(c->api = cuda_lib_api()) || c->api->stream_create(device, &c->stream)))
    return KVA_ENOTSUP;
  for (uint32_t l = 0; l < c->nlayers; l++) {
    if (!(c->mirror[l] = aligned_alloc(4096, c->layer_bytes))) return KVA_ENOMEM;
    memset(c->mirror[l], 0, c->layer_bytes); /* fault the pages in before any timing */
    if (device == KVA_DEVICE_HOST)
      c->layers[l] = c->mirror[l];
    else if (c->api->device_alloc(device, &c->layers[l], c->layer_bytes))
      return KVA_ENOMEM;
  }
  if (!(c->free_blocks = malloc(c->nblocks * sizeof(uint32_t)))) return KVA_ENOMEM;
  for (uint32_t i = 0; i < c->nblocks; i++) c->free_blocks[i] = i;
  for (uint32_t i = c->nblocks - 1; i > 0; i--) { /* scattered from the start */
    uint32_t j = (uint32_t)(rng_next(&seed) % (i + 1)), x = c->free_blocks[i];
    c->free_blocks[i] = c->free_blocks[j];
    c->free_blocks[j] = x;
  }
  c->nfree = c->nblocks;
  kva_paged_kv d = {.device = device,
                    .format = KVA_KV_FLASH,
                    .dtype = KVA_DT_BF16,
                    .num_layers = c->nlayers,
                    .num_blocks = c->nblocks,
                    .block_size = SIM_BLOCK,
                    .num_heads = m->heads,
                    .head_dim = m->head_dim,
                    .layers = c->layers};
  return kva_kv_register(s, &d, &c->kv);
}

static void cache_free(sim_cache *c) {
  if (c->kv) kva_kv_unregister(c->kv);
  for (uint32_t l = 0; l < c->nlayers; l++) {
    if (c->device != KVA_DEVICE_HOST && c->layers[l]) c->api->device_free(c->device, c->layers[l]);
    free(c->mirror[l]);
  }
  if (c->stream) c->api->stream_destroy(c->device, c->stream);
  free(c->free_blocks);
  *c = (sim_cache){0};
}

/* Each engine's cache on st->device; when the first one cannot be
 * registered on a CUDA device, every engine's goes to the host device. */
static int engines_init(const sim_opts *o, kva_storage *s, sim_stats *st, sim_engine *e,
                        const int32_t *prompts, volatile int *stop, uint64_t start) {
  kva_layout l = sim_layout(o->model);
  size_t bytes = kva_layout_bytes(&l);
  for (int t = 0; t < o->threads; t++) {
    e[t] = (sim_engine){.o = o,
                        .s = s,
                        .st = st,
                        .layout = l,
                        .chunk_bytes = bytes,
                        .rng = o->seed * 1000003 + ((uint64_t)o->proc << 32) + (uint64_t)t + 1,
                        .start_ns = start,
                        .prompts = prompts,
                        .stop = stop};
    e[t].nconvs = o->conversations / o->threads + (t < o->conversations % o->threads);
    e[t].convs = calloc((size_t)e[t].nconvs, sizeof(sim_conv));
    e[t].cache = calloc(1, sizeof(sim_cache));
    if (!e[t].convs || !e[t].cache) return -1;
    int rc = cache_init(e[t].cache, o->model, s, st->device, e[t].rng);
    if (rc != KVA_OK && t == 0 && st->device != KVA_DEVICE_HOST) {
      cache_free(e[t].cache);
      st->device = KVA_DEVICE_HOST;
      rc = cache_init(e[t].cache, o->model, s, st->device, e[t].rng);
    }
    if (rc != KVA_OK) {
      fprintf(stderr, "kvbench: the engine's paged cache: %s\n", kva_strerror(rc));
      return -1;
    }
    for (int i = 0; i < e[t].nconvs; i++) {
      if (!(e[t].convs[i].tokens = malloc(SIM_MAX_TOKENS * sizeof(int32_t)))) return -1;
      conv_start(&e[t], &e[t].convs[i]);
    }
  }
  return 0;
}

static void engines_free(sim_engine *e, int n) {
  for (int t = 0; t < n; t++) {
    for (int i = 0; e[t].convs && i < e[t].nconvs; i++) free(e[t].convs[i].tokens);
    free(e[t].convs);
    if (e[t].cache) cache_free(e[t].cache);
    free(e[t].cache);
  }
}

/* Runs the engines for --duration seconds with a progress line every
 * second; returns the seconds they ran, or -1 when memory ran out. */
double sim_run(const sim_opts *o, kva_storage *s, sim_stats *st) {
  uint64_t seed = o->seed ^ 0x5eed;
  int32_t *prompts = malloc((size_t)o->prompts * SIM_PROMPT * sizeof(int32_t));
  sim_engine *e = calloc((size_t)o->threads, sizeof(sim_engine));
  volatile int stop = 0;
  uint64_t start = bench_now_ns();
  for (size_t i = 0; prompts && i < (size_t)o->prompts * SIM_PROMPT; i++)
    prompts[i] = (int32_t)(rng_next(&seed) % 128000);
  int ok = prompts && e && engines_init(o, s, st, e, prompts, &stop, start) == 0;
  int started = 0;
  st->conversations = (uint64_t)o->conversations;
  for (; ok && started < o->threads; started++)
    if (pthread_create(&e[started].th, NULL, engine_run, &e[started])) break;
  int tty = isatty(2);
  for (double t = 0; ok && started && t < o->duration_s;) {
    double step = o->duration_s - t < 1 ? o->duration_s - t : 1;
    sleep_s(step);
    t = secs(bench_now_ns() - start);
    if (!o->quiet) sim_progress(o, st, t, tty);
  }
  __atomic_store_n(&stop, 1, __ATOMIC_RELAXED); /* a flag polled between turns: no ordering */
  for (int t = 0; t < started; t++) pthread_join(e[t].th, NULL);
  if (tty && ok && !o->quiet) fputc('\n', stderr);
  double elapsed = secs(bench_now_ns() - start);
  if (e) engines_free(e, o->threads);
  free(e);
  free(prompts);
  return ok && started == o->threads ? elapsed : -1;
}
