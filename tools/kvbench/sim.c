/*
 * sim.c — the serving-engine simulation: --threads engine threads each run
 * their share of --conversations multi-turn conversations, one turn at a
 * time in turn. A turn keys the whole history (kva_chunk_keys), prefetches,
 * copies the hits into the engine's paged KV buffer and checks their bytes,
 * "computes" the misses (sleeps for their prefill time, fills the pages
 * with a pattern derived from each key) and stores the new full chunks.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/sim.h"

#define SIM_PAGES 8    /* chunk-sized pages of each engine's paged KV buffer */
#define SIM_CHECK 4096 /* bytes checked at each end of a chunk read */

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
  uint8_t *pages; /* SIM_PAGES x chunk_bytes: the engine's paged KV */
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

/* The 8-byte word at index w of the chunk stored under k. */
static uint64_t pattern_word(const kva_key *k, size_t w) {
  uint64_t h;
  memcpy(&h, k->hash, sizeof h);
  return h ^ (w * 0x9E3779B97F4A7C15ull);
}

static void pattern_fill(const kva_key *k, uint8_t *p, size_t bytes) {
  uint64_t *w = (uint64_t *)p;
  for (size_t i = 0; i < bytes / 8; i++) w[i] = pattern_word(k, i);
}

/* Wrong bytes among the first and last SIM_CHECK bytes of a chunk. */
static uint64_t pattern_check(const kva_key *k, const uint8_t *p, size_t bytes) {
  uint64_t bad = 0, words = bytes / 8, span = SIM_CHECK / 8 < words ? SIM_CHECK / 8 : words;
  for (uint64_t i = 0; i < words; i = (i + 1 == span && words > 2 * span) ? words - span : i + 1) {
    uint64_t want = pattern_word(k, i), have;
    memcpy(&have, p + i * 8, 8);
    for (int b = 0; b < 8; b++) bad += ((want >> (8 * b)) & 0xff) != ((have >> (8 * b)) & 0xff);
  }
  return bad;
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

/* Copies the prefetched hits into the paged buffer, checks them, releases
 * their read locks. Returns the seconds the copy took. */
static double turn_read(sim_engine *e, const kva_key *keys, size_t hits, uint64_t *bad) {
  kva_buf bufs[SIM_MAX_KEYS];
  uint64_t t0 = bench_now_ns();
  int rc = kva_read_prefetched(e->s, keys, hits, bufs);
  if (rc != KVA_OK) return -1; /* it released the locks itself */
  for (size_t i = 0; i < hits; i++) {
    uint8_t *page = e->pages + (i % SIM_PAGES) * e->chunk_bytes;
    if (bufs[i].len != e->chunk_bytes) {
      *bad += e->chunk_bytes;
      continue;
    }
    memcpy(page, bufs[i].ptr, e->chunk_bytes);
    *bad += pattern_check(&keys[i], page, e->chunk_bytes);
  }
  double dt = secs(bench_now_ns() - t0);
  kva_finish_read_prefetched(e->s, keys, hits, 0);
  return dt;
}

/* Stores the full chunks [from, n): fills each page with its pattern (the
 * "computed" KV), reserves L1 buffers 4 keys a batch (small batches: a
 * reservation is all or nothing), copies the pages in and finishes the
 * batch in one call — two round trips to the L1 manager per batch. */
static void turn_store(sim_engine *e, const kva_key *keys, size_t from, size_t n) {
  for (size_t b = from; b < n; b += 4) {
    size_t m = n - b < 4 ? n - b : 4, k = 0;
    kva_buf bufs[4];
    kva_key done[4];
    int status[4], fin[4];
    for (size_t i = 0; i < m; i++) /* the "computed" KV, before the clock starts */
      pattern_fill(&keys[b + i], e->pages + ((b + i) % SIM_PAGES) * e->chunk_bytes, e->chunk_bytes);
    uint64_t t0 = bench_now_ns();
    int rc = kva_reserve_write(e->s, keys + b, m, &e->layout, KVA_WRITE_NEW, bufs, status);
    uint64_t skipped = 0, oom = 0, errs = rc < 0;
    for (size_t i = 0; rc >= 0 && i < m; i++) {
      if (status[i] != KVA_OK) {
        skipped += status[i] == KVA_KEY_NOT_WRITABLE;
        oom += status[i] == KVA_OUT_OF_MEMORY;
        continue;
      }
      memcpy(bufs[i].ptr, e->pages + ((b + i) % SIM_PAGES) * e->chunk_bytes, e->chunk_bytes);
      done[k++] = keys[b + i];
    }
    int stored = k ? kva_finish_write(e->s, done, k, fin) : 0;
    if (stored < 0) stored = 0;
    errs += k - (size_t)stored;
    pthread_mutex_lock(&e->st->mu);
    e->st->stored_chunks += (uint64_t)stored;
    e->st->store_skipped += skipped;
    e->st->store_oom += oom;
    e->st->errors += errs;
    e->st->store_s += secs(bench_now_ns() - t0);
    pthread_mutex_unlock(&e->st->mu);
  }
}

static void stats_sample(sim_stats *st, double pf, double ttft, double base) {
  if (st->nsamples == st->cap) {
    size_t cap = st->cap ? 2 * st->cap : 4096;
    double *a = realloc(st->prefetch_s, cap * sizeof(double));
    double *b = a ? realloc(st->ttft_s, cap * sizeof(double)) : NULL;
    double *c = b ? realloc(st->ttft_base_s, cap * sizeof(double)) : NULL;
    if (a) st->prefetch_s = a;
    if (b) st->ttft_s = b;
    if (!c) return;
    st->ttft_base_s = c;
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
  size_t hits = 0;
  double pf = 0, rd = 0;
  uint64_t bad = 0;
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
    if (hits && (rd = turn_read(e, keys, hits, &bad)) < 0) rd = 0, hits = 0, bad = 0;
  }
  double miss_s = (double)(c->n - hits * SIM_CHUNK) / e->o->prefill_tps;
  sleep_s(miss_s);
  if (n > hits) turn_store(e, keys, hits, n);
  pthread_mutex_lock(&e->st->mu);
  e->st->wrong_bytes += bad;
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
                        .rng = o->seed * 1000003 + (uint64_t)t + 1,
                        .start_ns = start,
                        .prompts = prompts,
                        .stop = stop};
    e[t].nconvs = o->conversations / o->threads + (t < o->conversations % o->threads);
    e[t].convs = calloc((size_t)e[t].nconvs, sizeof(sim_conv));
    e[t].pages = malloc(SIM_PAGES * bytes);
    if (!e[t].convs || !e[t].pages) return -1;
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
    free(e[t].pages);
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
  int ok = prompts && e && engines_init(o, s, st, e, prompts, &stop, start) == 0;
  for (size_t i = 0; prompts && i < (size_t)o->prompts * SIM_PROMPT; i++)
    prompts[i] = (int32_t)(rng_next(&seed) % 128000);
  int started = 0;
  st->conversations = (uint64_t)o->conversations;
  for (; ok && started < o->threads; started++)
    if (pthread_create(&e[started].th, NULL, engine_run, &e[started])) break;
  int tty = isatty(2);
  for (double t = 0; ok && started && t < o->duration_s;) {
    double step = o->duration_s - t < 1 ? o->duration_s - t : 1;
    sleep_s(step);
    t = secs(bench_now_ns() - start);
    sim_progress(o, st, t, tty);
  }
  __atomic_store_n(&stop, 1, __ATOMIC_RELAXED); /* a flag polled between turns: no ordering */
  for (int t = 0; t < started; t++) pthread_join(e[t].th, NULL);
  if (tty && ok) fputc('\n', stderr);
  double elapsed = secs(bench_now_ns() - start);
  if (e) engines_free(e, o->threads);
  free(e);
  free(prompts);
  return ok && started == o->threads ? elapsed : -1;
}
