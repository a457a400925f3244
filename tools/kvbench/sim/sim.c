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
 * The cache holds a whole conversation (SIM_PAGES chunks): a turn's hits
 * load in one kva_kv_load, and the engine computes the misses layer by
 * layer as the hits' layers land (kva_op_wait_layer), as vLLM does with
 * wait_for_layer_load; its new chunks store in batches. Each load or store
 * takes its blocks from the engine's block allocator (a stack, shuffled at
 * the start, so a batch's blocks are scattered and differ from the ones
 * its chunks were stored from) and gives them back once its op is waited
 * for. Each turn also gets its TTFT's lower bound (sim_bound.c).
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
#include "tools/kvbench/sim/sim.h"
#include "tools/kvbench/sim/sim_cache.h"

#define SIM_STORE_BATCH 4 /* keys a store: a reservation is all or nothing */
#define SIM_PIPE 4        /* keys a prefetch: a turn's loads start as each lands */

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
  int planned; /* kva_plan_load answers here (not a client of kvactd) */
  volatile int *stop;
  pthread_t th;
} sim_engine;

static uint64_t rng_range(uint64_t *x, uint64_t lo, uint64_t hi) {
  return lo + sim_rng_next(x) % (hi - lo + 1);
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
  for (size_t i = 0; i < add; i++) c->tokens[c->n++] = (int32_t)(sim_rng_next(&e->rng) % 128000);
}

/* Waits for op; its status, or the call's error. */
static int op_finish(int rc, kva_op *op) {
  int st = rc;
  if (rc == KVA_OK && (rc = kva_op_wait(op, -1, &st)) != KVA_OK) st = rc;
  return st;
}

/* A turn's prefetches and loads. Times in seconds from the first submit. */
typedef struct sim_fetch {
  uint64_t t0;
  size_t hits, lo;              /* the range's chunks loaded: [lo, lo + hits) */
  size_t fhits, nfront_ops;     /* the split's L1 front: [0, fhits), its first ops */
  double front_copied;          /* the front's loads done */
  double pf;                    /* every prefetch done */
  double first, last, copied;   /* the first and the last load's call; every load done */
  double ready[SIM_MAX_LAYERS]; /* from the last load's call until its layer l is in the cache */
  uint64_t bad, errs;
} sim_fetch;

static double since(const sim_fetch *f) {
  return secs(bench_now_ns() - f->t0);
}

/* Waits for the loads, the last one layer by layer; the first error. */
static int fetch_wait(sim_engine *e, sim_fetch *f, kva_op **op, size_t nops) {
  int rc = KVA_OK;
  for (size_t j = 0; j < nops; j++) {
    int lrc = KVA_OK;
    for (uint32_t l = 0; j + 1 == nops && lrc == KVA_OK && l < e->cache->nlayers; l++) {
      lrc = kva_op_wait_layer(op[j], l, -1);
      f->ready[l] = since(f) - f->last;
    }
    int st = op_finish(KVA_OK, op[j]);
    if (rc == KVA_OK) rc = st != KVA_OK ? st : lrc;
    if (j + 1 == f->nfront_ops) f->front_copied = since(f);
  }
  f->copied = since(f);
  return rc;
}

/* Prefetches keys [from, to) SIM_PIPE at a time, all submitted at once
 * (from the back when `back`: the split engine's loads meet its compute
 * in the middle), after the keys [0, front) in order (the split's L1
 * hits, copied rather than computed), and loads each batch's hits into
 * the paged cache as soon as its prefetch is done, while the later
 * batches are still read from their tiers (the loads run in order on the
 * copy actor). In order, a batch after a gap is not part of the prefix:
 * its read locks are released unread; from the back, a batch short of
 * keys ends the loads there (its chunks and those before it are
 * computed). The keys were judged worth loading already (kva_plan_load),
 * so the policy does not judge each batch again (KVA_PREFETCH_AS_PLANNED).
 * Then waits for the loads and checks their bytes; a failed load (or
 * copy) makes the turn a miss, its chunks counted in errs, every lock
 * released. f->fhits counts the front's chunks loaded ([0, fhits)),
 * f->hits the range's ([lo, lo + hits)). */
typedef struct sim_batch {
  size_t off, len;
  int front;
} sim_batch;

static size_t batches(size_t front, size_t from, size_t to, int back, sim_batch *b) {
  size_t n = 0;
  for (size_t off = 0; off < front; off += SIM_PIPE)
    b[n++] = (sim_batch){off, front - off < SIM_PIPE ? front - off : SIM_PIPE, 1};
  if (back)
    for (size_t end = to; end > from; end = end - from < SIM_PIPE ? from : end - SIM_PIPE)
      b[n++] = (sim_batch){end - from < SIM_PIPE ? from : end - SIM_PIPE,
                           end - from < SIM_PIPE ? end - from : SIM_PIPE, 0};
  else
    for (size_t off = from; off < to; off += SIM_PIPE)
      b[n++] = (sim_batch){off, to - off < SIM_PIPE ? to - off : SIM_PIPE, 0};
  return n;
}

static void turn_fetch(sim_engine *e, const kva_key *keys, size_t front, size_t from, size_t to,
                       int back, sim_fetch *f) {
  sim_cache *c = e->cache;
  sim_batch b[2 * (SIM_MAX_KEYS / SIM_PIPE + 1)];
  kva_prefetch *h[2 * (SIM_MAX_KEYS / SIM_PIPE + 1)];
  kva_op *op[2 * (SIM_MAX_KEYS / SIM_PIPE + 1)];
  size_t nb = batches(front, from, to, back, b), sub = 0, nops = 0;
  kva_prefetch_opts po = {.flags = e->planned ? KVA_PREFETCH_AS_PLANNED : 0};
  cache_map(c, to);
  for (size_t i = 0; i < front; i++) cache_poison(c, i);
  for (size_t i = from; i < to; i++) cache_poison(c, i);
  int rc = cache_push(c) ? KVA_EIO : KVA_OK, prefix[2] = {1, 1};
  f->lo = back ? to : from;
  for (; rc == KVA_OK && sub < nb; sub++)
    if ((rc = kva_submit_prefetch_with(e->s, keys + b[sub].off, b[sub].len, &e->layout, &po,
                                       &h[sub])) != KVA_OK)
      break;
  for (size_t j = 0; j < sub; j++) {
    size_t off = b[j].off, m = b[j].len, got = 0;
    int *open = &prefix[b[j].front];
    /* an engine waits for each prefetch: a timed-out handle would keep its
     * read locks for nobody */
    if (kva_wait_prefetch(e->s, h[j], -1, &got) != KVA_OK) got = 0;
    int use = got && *open && rc == KVA_OK && (b[j].front || !back || got == m);
    if (got && !use) kva_finish_read_prefetched(e->s, keys + off, got, 0);
    if (use) {
      f->last = since(f);
      if (!nops) f->first = f->last;
      /* a refused call released the locks it was given */
      rc = kva_kv_load(e->s, c->kv, keys + off, got, SIM_CHUNK, c->slots + off * SIM_CHUNK,
                       got * SIM_CHUNK, &op[nops]);
      if (rc == KVA_OK && b[j].front)
        nops++, f->fhits += got, f->nfront_ops = nops;
      else if (rc == KVA_OK)
        nops++, f->hits += got, f->lo = back ? off : f->lo;
    }
    if (got < m) *open = 0;
  }
  f->pf = since(f);
  int wrc = fetch_wait(e, f, op, nops);
  if (rc == KVA_OK) rc = wrc;
  if (rc == KVA_OK && (f->hits || f->fhits) && cache_pull(c)) rc = KVA_EIO;
  for (size_t i = 0; rc == KVA_OK && i < f->fhits; i++) f->bad += cache_check(c, i, &keys[i]);
  for (size_t i = f->lo; rc == KVA_OK && i < f->lo + f->hits; i++)
    f->bad += cache_check(c, i, &keys[i]);
  cache_unmap(c);
  if (rc != KVA_OK) {
    f->errs += f->hits + f->fhits ? f->hits + f->fhits : 1;
    f->hits = f->fhits = 0;
    f->bad = 0;
  }
}

/* When the engine's prefill of the misses (pre_s seconds, the layers in
 * order) ends, counted from the load's call: layer l starts once the hits'
 * layer l is in the cache (ready[l]) and the layer before it is done. */
static double layered_prefill(const double *ready, uint32_t layers, double pre_s) {
  double done = 0;
  for (uint32_t l = 0; l < layers; l++) done = (ready[l] > done ? ready[l] : done) + pre_s / layers;
  return done;
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

/* One turn's sample: prefetch, TTFT, its bound, TTFT without kvact. */
typedef struct sim_sample {
  double pf, ttft, bound, base, plan, bound_shared;
} sim_sample;

static void stats_sample(sim_stats *st, const sim_sample *x) {
  if (st->nsamples == st->cap) {
    size_t cap = array_next_cap(st->cap, st->nsamples + 1, sizeof(double));
    if (!cap || !ARRAY_RESIZE(st->prefetch_s, cap) || !ARRAY_RESIZE(st->ttft_s, cap) ||
        !ARRAY_RESIZE(st->plan_s, cap) || !ARRAY_RESIZE(st->ttft_base_s, cap) ||
        !ARRAY_RESIZE(st->ttft_bound_s, cap) || !ARRAY_RESIZE(st->ttft_bound_shared_s, cap))
      return;
    st->cap = cap;
  }
  st->prefetch_s[st->nsamples] = x->pf;
  st->plan_s[st->nsamples] = x->plan;
  st->ttft_s[st->nsamples] = x->ttft;
  st->ttft_bound_s[st->nsamples] = x->bound;
  st->ttft_bound_shared_s[st->nsamples] = x->bound_shared;
  st->ttft_base_s[st->nsamples++] = x->base;
}

/* The tier of each found chunk, as kva_lookup's per-tier prefix counts
 * name them: chunks [0, found.tier[0].hits) in L1, then tier 1's, ... */
static uint32_t tier_of(const kva_tier_hits *th, size_t i) {
  for (uint32_t t = 0; t < th->ntiers; t++) {
    if (i < th->tier[t].hits) return t;
    i -= th->tier[t].hits;
  }
  return th->ntiers ? th->ntiers - 1 : 0;
}

/* Chunks [lo, lo + n) counted into out by the tier each was found in. */
static void count_tiers(const kva_tier_hits *th, size_t lo, size_t n, size_t *out) {
  for (size_t i = lo; i < lo + n; i++) out[tier_of(th, i)]++;
}

static void stats_tiers(sim_stats *st, const kva_tier_hits *th) {
  for (uint32_t t = st->ntiers; t < th->ntiers && t < SIM_MAX_TIERS; t++, st->ntiers++)
    memcpy(st->tier_name[t], th->tier[t].name, sizeof st->tier_name[t]);
}

/* What a turn found, used and left, per tier. */
typedef struct sim_turn_tiers {
  size_t found[SIM_MAX_TIERS], used[SIM_MAX_TIERS], skipped[SIM_MAX_TIERS];
  size_t nfound, split_computed;
  int split;
} sim_turn_tiers;

static void stats_turn(sim_engine *e, const kva_tier_hits *th, const sim_turn_tiers *tt, size_t n,
                       size_t hits, const sim_sample *x) {
  sim_stats *st = e->st;
  pthread_mutex_lock(&st->mu);
  size_t sec = (size_t)secs(bench_now_ns() - e->start_ns);
  if (sec >= SIM_MAX_SECONDS) sec = SIM_MAX_SECONDS - 1;
  st->turns++;
  st->chunks += n;
  st->hit_chunks += hits;
  st->found_chunks += tt->nfound;
  st->split_turns += tt->split != 0;
  st->split_computed += tt->split_computed;
  stats_tiers(st, th);
  for (uint32_t t = 0; t < SIM_MAX_TIERS; t++) {
    st->tier_hits[t] += tt->used[t];
    st->tier_found[t] += tt->found[t];
    st->tier_skipped[t] += tt->skipped[t];
  }
  stats_sample(st, x);
  st->sec[sec].turns++;
  st->sec[sec].chunks += n;
  st->sec[sec].hit_chunks += hits;
  st->sec[sec].found_chunks += tt->nfound;
  st->sec[sec].ttft_sum_s += x->ttft;
  st->sec[sec].ttft_base_sum_s += x->base;
  st->sec[sec].ttft_bound_sum_s += x->bound;
  for (uint32_t t = 0; t < SIM_MAX_TIERS; t++) {
    st->sec[sec].tier_hits[t] += tt->used[t];
    st->sec[sec].tier_found[t] += tt->found[t];
  }
  pthread_mutex_unlock(&st->mu);
}

/* The turn's plan: kva_plan_load in-process; a client of kvactd looks up
 * and takes everything found (the daemon's policy judges each prefetch). */
static void turn_plan(sim_engine *e, const kva_key *keys, size_t n, kva_load_plan *p) {
  memset(p, 0, sizeof *p);
  if (e->planned) {
    unsigned can_split = e->o->engine == SIM_ENGINE_AUTO || e->o->engine == SIM_ENGINE_SPLIT;
    if (kva_plan_load(e->s, keys, n, &e->layout, can_split ? KVA_PLAN_SPLIT : 0, p) == KVA_OK)
      return;
    memset(p, 0, sizeof *p);
  }
  if (kva_lookup(e->s, keys, n, 0, &p->found) != KVA_OK) memset(&p->found, 0, sizeof p->found);
  p->worth = p->found.total;
  p->split_at = p->found.total;
}

/* One turn of c: the user's text, then the engine's work, then the reply.
 * The engine plans (kva_plan_load) and then either loads the prefix worth
 * loading, overlapping the rest's prefill with the copy layer by layer
 * (slept for what the copy did not already take), or, when the plan says
 * the split is faster (--engine auto or split), computes the front of the
 * found prefix while its back loads from the tiers, then the rest. TTFT
 * counts from the plan. */
static void engine_turn(sim_engine *e, sim_conv *c) {
  kva_key keys[SIM_MAX_KEYS];
  kva_load_plan p;
  sim_turn_tiers tt = {0};
  conv_append(e, c, 128, 512);
  size_t n =
      kva_chunk_keys(e->o->model->name, 0, NULL, c->tokens, c->n, SIM_CHUNK, 0, keys, SIM_MAX_KEYS);
  sim_chains_note(&e->st->chains, keys, n);
  sim_fetch f = {.t0 = bench_now_ns()};
  double tps = e->o->prefill_tps, chunk_s = SIM_CHUNK / tps;
  uint32_t layers = e->cache->nlayers;
  memset(&p, 0, sizeof p);
  if (n) turn_plan(e, keys, n, &p);
  double planned_at = since(&f);
  size_t found = p.found.total;
  int split = found && (e->o->engine == SIM_ENGINE_SPLIT ||
                        (e->o->engine == SIM_ENGINE_AUTO && e->planned &&
                         p.split_s < p.load_s * 0.98 && p.split_at < found));
  size_t l1 = p.found.ntiers ? p.found.tier[0].hits : 0;
  if (split) { /* the L1 hits in front copied, [split_at, found) from the back */
    turn_fetch(e, keys, l1 < p.split_at ? l1 : p.split_at, p.split_at, found, 1, &f);
  } else if (n) {
    size_t k = e->o->engine == SIM_ENGINE_ALL ? found : p.worth;
    if (k) turn_fetch(e, keys, 0, 0, k, 0, &f);
  }
  size_t hits = f.hits + f.fhits;
  count_tiers(&p.found, 0, f.fhits, tt.used);
  count_tiers(&p.found, f.lo, f.hits, tt.used);
  for (uint32_t t = 1; t < p.found.ntiers && t < SIM_MAX_TIERS; t++) tt.skipped[t] = p.skipped[t];
  tt.split = split;
  sim_sample x = {.pf = f.pf, .plan = planned_at, .base = (double)c->n / tps};
  if (split) {
    /* [fhits, lo) computed once the front's L1 hits were copied, while the
     * back loaded; then the rest */
    tt.split_computed = f.lo - f.fhits;
    double front = (f.fhits ? f.front_copied : planned_at) + (double)(f.lo - f.fhits) * chunk_s;
    double tail = (double)(c->n - (f.lo + f.hits) * SIM_CHUNK) / tps;
    x.ttft = (front > f.copied ? front : f.copied) + tail;
  } else {
    double pre = (double)(c->n - hits * SIM_CHUNK) / tps;
    x.ttft = hits ? f.last + layered_prefill(f.ready, layers, pre) : since(&f) + pre;
  }
  sleep_s(x.ttft - since(&f)); /* the prefill the loads did not already cover */
  /* What the tiers hold, for the found counts and the bound: the plan's
   * lookup, or, where it did not ask a tier (its lookup could not pay),
   * a lookup made now, after the turn's TTFT (not part of it). */
  kva_tier_hits held = p.found;
  if (p.not_asked && kva_lookup(e->s, keys, n, 0, &held) != KVA_OK) held = p.found;
  count_tiers(&held, 0, held.total, tt.found);
  tt.nfound = held.total;
  double tail = (double)(c->n - held.total * SIM_CHUNK) / tps;
  pthread_mutex_lock(&e->st->mu); /* the progress loop refreshes a metered rate */
  sim_bw bw = e->st->bw, shared = e->st->bw_shared;
  pthread_mutex_unlock(&e->st->mu);
  x.bound = sim_bound_best(&bw, &held, e->chunk_bytes, chunk_s, tail, layers);
  x.bound_shared = sim_bound_best(&shared, &held, e->chunk_bytes, chunk_s, tail, layers);
  double rd = hits ? f.copied - f.first : 0;
  /* what the engine computed: [hits, n), or the split's middle and tail */
  if (!split && n > hits) turn_store(e, keys, hits, n);
  if (split && f.lo > f.fhits) turn_store(e, keys, f.fhits, f.lo);
  if (split && n > f.lo + f.hits) turn_store(e, keys, f.lo + f.hits, n);
  pthread_mutex_lock(&e->st->mu);
  e->st->wrong_bytes += f.bad;
  e->st->errors += f.errs;
  e->st->read_s += rd;
  pthread_mutex_unlock(&e->st->mu);
  stats_turn(e, &held, &tt, n, hits, &x);
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

/* Each engine's cache on st->device; when the first one cannot be
 * registered on a CUDA device, every engine's goes to the host device. */
static int engines_init(const sim_opts *o, kva_storage *s, sim_stats *st, sim_engine *e,
                        const int32_t *prompts, volatile int *stop) {
  kva_layout l = sim_layout(o->model);
  size_t bytes = kva_layout_bytes(&l);
  for (int t = 0; t < o->threads; t++) {
    e[t] = (sim_engine){.o = o,
                        .s = s,
                        .st = st,
                        .layout = l,
                        .chunk_bytes = bytes,
                        .rng = o->seed * 1000003 + ((uint64_t)o->proc << 32) + (uint64_t)t + 1,
                        .prompts = prompts,
                        .stop = stop};
    /* the simulated engine knows its prefill rate exactly; a client of
     * kvactd cannot report it, nor plan (KVA_ENOTSUP) */
    e[t].planned = kva_report_prefill(s, o->model->name, SIM_CHUNK, (uint64_t)o->prefill_tps,
                                      1000000000u) == KVA_OK;
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
  for (size_t i = 0; prompts && i < (size_t)o->prompts * SIM_PROMPT; i++)
    prompts[i] = (int32_t)(sim_rng_next(&seed) % 128000);
  int ok = prompts && e && engines_init(o, s, st, e, prompts, &stop) == 0;
  int started = 0;
  st->conversations = (uint64_t)o->conversations;
  /* the run starts once the engines' caches are ready: prefaulting and
   * registering them (seconds for a large model) is no second of it */
  uint64_t start = bench_now_ns();
  for (; ok && started < o->threads; started++) {
    e[started].start_ns = start;
    if (pthread_create(&e[started].th, NULL, engine_run, &e[started])) break;
  }
  int tty = isatty(2);
  /* a tick at each whole second (and at the end) closes the second before
   * it; an absolute schedule, so the ticks do not drift */
  for (size_t k = 1; ok && started; k++) {
    double end = (double)k < o->duration_s ? (double)k : o->duration_s;
    sleep_s(end - secs(bench_now_ns() - start));
    sim_tick(o, s, st, k - 1);
    if (!o->quiet) sim_progress(o, st, k - 1, secs(bench_now_ns() - start), tty);
    if (end >= o->duration_s) break;
  }
  __atomic_store_n(&stop, 1, __ATOMIC_RELAXED); /* a flag polled between turns: no ordering */
  for (int t = 0; t < started; t++) pthread_join(e[t].th, NULL);
  if (tty && ok && !o->quiet) fputc('\n', stderr);
  double elapsed = secs(bench_now_ns() - start);
  if (ok && started) /* the turns that finished after the last tick */
    sim_tick(o, s, st, elapsed > 1 ? (size_t)ceil(elapsed) - 1 : 0);
  if (e) engines_free(e, o->threads);
  free(e);
  free(prompts);
  return ok && started == o->threads ? elapsed : -1;
}
