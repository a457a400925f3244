/*
 * call_anchor — the C side of python/bench/bench.py's call-overhead
 * measure: the time of one batched storage call made straight from C.
 *
 *   call_anchor [--iters N] [--keys N] [--model M] [--chunk-tokens T]
 *               [--shape D,D,...] [--gap-us G] [-o key=value ...]
 *
 * Starts an embedded runtime (the embedded default plus the -o settings,
 * applied in order), makes --keys chunk keys of the tokens 0, 1, 2, ...
 * (kva_chunk_keys, no salt, full chunks only: the keys kvact.chunk_keys
 * makes of the same arguments), writes one bfloat16 object of --shape per
 * key, then times N iterations of each call below, none of which changes
 * the storage's state (per call: the median over batches of 100 calls):
 *   lookup<n>    kva_lookup, no pin
 *   prefetch<n>  kva_submit_prefetch + kva_wait_prefetch + kva_finish_read_prefetched
 *   write<n>     kva_reserve_write (KVA_WRITE_ALL: the objects are reused) + kva_finish_write
 * --gap-us G: a busy pause of G microseconds after each call, not timed
 * (what a caller doing other work between calls leaves the runtime's
 * workers: long enough, and they go to sleep, so the call pays their
 * wake-up). Prints `keys=<n> first=<hex> last=<hex>` (the hashes of the first and
 * last key, for the caller to check its keys are these) and one
 * `call=<name> us_per_call=<float> iters=<N> gap_us=<G>` line per call.
 * Exit status 1: bad arguments or config; 2: a call failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvact.h"

#define MAX_KEYS 1024
#define ERRLEN 256
#define BATCH 100
#define MAX_BATCHES 100000

typedef struct anchor {
  kva_runtime *rt;
  kva_storage *s;
  kva_layout layout;
  size_t n;
  kva_key keys[MAX_KEYS];
  kva_buf bufs[MAX_KEYS];
  int status[MAX_KEYS];
} anchor;

typedef struct options {
  long iters, keys, chunk_tokens;
  double gap_us;
  const char *model, *shape;
} options;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* 0 when every key hit, else KVA_EIO (or the call's refusal). */
static int call_lookup(anchor *a) {
  kva_tier_hits hits;
  int rc = kva_lookup(a->s, a->keys, a->n, 0, &hits);
  return rc < 0 ? rc : hits.total == a->n ? 0 : KVA_EIO;
}

static int call_prefetch(anchor *a) {
  kva_prefetch *h;
  size_t hits = 0;
  int rc = kva_submit_prefetch(a->s, a->keys, a->n, &a->layout, 0, &h);
  if (rc == 0) rc = kva_wait_prefetch(a->s, h, -1, &hits);
  if (rc == 0 && hits != a->n) return KVA_EIO;
  if (rc == 0) rc = kva_finish_read_prefetched(a->s, a->keys, a->n, 0);
  return rc < 0 ? rc : (size_t)rc == a->n ? 0 : KVA_EIO;
}

static int call_write(anchor *a) {
  int rc = kva_reserve_write(a->s, a->keys, a->n, &a->layout, KVA_WRITE_ALL, a->bufs, a->status);
  if (rc >= 0 && (size_t)rc != a->n) return KVA_EIO;
  if (rc >= 0) rc = kva_finish_write(a->s, a->keys, a->n, a->status);
  return rc < 0 ? rc : (size_t)rc == a->n ? 0 : KVA_EIO;
}

static const struct {
  const char *name;
  int (*fn)(anchor *a);
} CALLS[] = {{"lookup", call_lookup}, {"prefetch", call_prefetch}, {"write", call_write}};

static void pause_us(double us) {
  for (double end = now_us() + us; now_us() < end;)
    ;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Microseconds per call of CALLS[i]: the median over batches of BATCH calls
 * (fewer when iters is smaller), so that a batch the scheduler preempted
 * does not count; after one untimed call, which checks the call works. */
static int time_call(anchor *a, size_t i, long iters, double gap_us) {
  long batch = iters < BATCH ? iters : BATCH, nbatch = iters / batch;
  double us[MAX_BATCHES];
  int rc = CALLS[i].fn(a);
  nbatch = nbatch > MAX_BATCHES ? MAX_BATCHES : nbatch;
  for (long b = 0; rc == 0 && b < nbatch; b++) {
    double busy = 0;
    for (long it = 0; rc == 0 && it < batch; it++) {
      double t0 = now_us();
      rc = CALLS[i].fn(a);
      busy += now_us() - t0;
      pause_us(gap_us);
    }
    us[b] = busy / batch;
  }
  if (rc != 0) {
    fprintf(stderr, "call_anchor: %s: %s\n", CALLS[i].name, kva_strerror(rc));
    return 2;
  }
  qsort(us, nbatch, sizeof us[0], cmp_double);
  printf("call=%s%zu us_per_call=%.3f iters=%ld gap_us=%g\n", CALLS[i].name, a->n, us[nbatch / 2],
         nbatch * batch, gap_us);
  return 0;
}

static void print_hash(const char *label, const kva_key *k) {
  printf(" %s=", label);
  for (unsigned i = 0; i < k->hash_len; i++) printf("%02x", k->hash[i]);
}

/* Layout: one bfloat16 tensor of the comma-separated shape; 0 if it is not one. */
static int parse_layout(const char *shape, kva_layout *l) {
  memset(l, 0, sizeof *l);
  l->ntensors = 1;
  l->tensor[0].dtype = KVA_DT_BF16;
  for (const char *p = shape; *p;) {
    char *end;
    unsigned long long d = strtoull(p, &end, 10);
    if (end == p || l->tensor[0].ndim == 6 || (*end && *end != ',')) return 0;
    l->tensor[0].shape[l->tensor[0].ndim++] = d;
    p = *end ? end + 1 : end;
  }
  return kva_layout_bytes(l) != 0;
}

/* The keys of tokens 0 .. keys * chunk_tokens - 1. */
static int make_keys(anchor *a, const options *o) {
  size_t ntokens = (size_t)o->keys * o->chunk_tokens;
  int32_t *tokens = malloc(ntokens * sizeof *tokens);
  if (!tokens) return 0;
  for (size_t t = 0; t < ntokens; t++) tokens[t] = (int32_t)t;
  a->n = kva_chunk_keys(o->model, 0, NULL, tokens, ntokens, (uint32_t)o->chunk_tokens, 0, a->keys,
                        MAX_KEYS);
  free(tokens);
  return a->n == (size_t)o->keys;
}

/* Applies "-o key=value"; 0 (and a message) when it does not validate. */
static int set_option(kva_config *c, char *kv) {
  char err[ERRLEN] = "";
  char *eq = strchr(kv, '=');
  if (!eq) {
    fprintf(stderr, "call_anchor: -o %s: want key=value\n", kv);
    return 0;
  }
  *eq = '\0';
  if (kva_config_set_err(c, kv, eq + 1, err, sizeof err) != 0) {
    fprintf(stderr, "call_anchor: -o %s: %s\n", kv, err);
    return 0;
  }
  return 1;
}

static int parse_args(int argc, char **argv, options *o, kva_config *c) {
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!val) return 0;
    if (!strcmp(arg, "--iters"))
      o->iters = atol(val);
    else if (!strcmp(arg, "--keys"))
      o->keys = atol(val);
    else if (!strcmp(arg, "--chunk-tokens"))
      o->chunk_tokens = atol(val);
    else if (!strcmp(arg, "--model"))
      o->model = val;
    else if (!strcmp(arg, "--shape"))
      o->shape = val;
    else if (!strcmp(arg, "--gap-us"))
      o->gap_us = atof(val);
    else if (strcmp(arg, "-o") || !set_option(c, argv[i + 1]))
      return 0;
    i++;
  }
  return o->iters > 0 && o->gap_us >= 0 && o->keys > 0 && o->keys <= MAX_KEYS &&
         o->chunk_tokens > 0;
}

/* Writes one object per key (its bytes left as the pool has them). */
static int write_keys(anchor *a) {
  int rc = kva_reserve_write(a->s, a->keys, a->n, &a->layout, KVA_WRITE_NEW, a->bufs, a->status);
  if (rc >= 0 && (size_t)rc == a->n) rc = kva_finish_write(a->s, a->keys, a->n, a->status);
  return rc >= 0 && (size_t)rc == a->n;
}

static int run(anchor *a, const options *o, const kva_config *c) {
  int rc = kva_runtime_start(c, &a->rt);
  if (rc != 0 || !(a->s = kva_storage_of(a->rt))) {
    fprintf(stderr, "call_anchor: kva_runtime_start: %s\n", kva_strerror(rc ? rc : KVA_EINVAL));
    return 2;
  }
  int ret = write_keys(a) ? 0 : 2;
  if (ret) fprintf(stderr, "call_anchor: writing the %zu keys failed\n", a->n);
  printf("keys=%zu", a->n);
  print_hash("first", &a->keys[0]);
  print_hash("last", &a->keys[a->n - 1]);
  printf("\n");
  for (size_t i = 0; ret == 0 && i < sizeof CALLS / sizeof CALLS[0]; i++)
    ret = time_call(a, i, o->iters, o->gap_us);
  kva_runtime_shutdown(a->rt);
  return ret;
}

int main(int argc, char **argv) {
  static anchor a;
  options o = {
      .iters = 10000, .keys = 64, .chunk_tokens = 256, .model = "bench", .shape = "2,2,16,64"};
  kva_config *c = kva_config_default();
  if (!c) return 1;
  int ret = 1;
  if (!parse_args(argc, argv, &o, c) || !parse_layout(o.shape, &a.layout) || !make_keys(&a, &o))
    fprintf(stderr,
            "usage: call_anchor [--iters N] [--keys N<=%d] [--model M] [--chunk-tokens T] "
            "[--shape D,D,...] [--gap-us G] [-o key=value ...]\n",
            MAX_KEYS);
  else
    ret = run(&a, &o, c);
  kva_config_free(c);
  return ret;
}
