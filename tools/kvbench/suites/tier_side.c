/*
 * tier_side.c — the kvact side of the L2 tier suites (tier_side.h).
 */
#include "tools/kvbench/suites/tier_side.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/kvbench/bench.h"

#define MiB (1024ull * 1024ull)

static int fail(tier_side *k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (k->ok) vsnprintf(k->why, sizeof(k->why), fmt, ap);
  va_end(ap);
  k->ok = 0;
  return -1;
}

static void alloc_keys(tier_side *k, const char *model, unsigned n, uint64_t chunk_bytes) {
  k->n = n;
  k->chunk_bytes = chunk_bytes;
  k->keys = calloc(n, sizeof(*k->keys));
  k->bufs = calloc(n, sizeof(*k->bufs));
  k->status = calloc(n, sizeof(*k->status));
  if (!k->keys || !k->bufs || !k->status) {
    fprintf(stderr, "kvbench: out of memory\n");
    exit(1);
  }
  for (unsigned i = 0; i < n; i++) k->keys[i] = bench_key(model, i);
  k->layout = bench_layout_bytes(chunk_bytes);
}

void tier_side_start(tier_side *k, int workers, const char *model, unsigned n, uint64_t chunk_bytes,
                     const char *tier, const char *tier_json) {
  uint64_t l1 = 1024 * MiB;
  if ((uint64_t)n * chunk_bytes + 64 * MiB > l1) l1 = (uint64_t)n * chunk_bytes + 64 * MiB;
  tier_side_start_l1(k, workers, model, n, chunk_bytes, tier, tier_json, l1);
}

void tier_side_start_l1(tier_side *k, int workers, const char *model, unsigned n,
                        uint64_t chunk_bytes, const char *tier, const char *tier_json,
                        uint64_t l1_bytes) {
  char err[256];
  const char *const settings[] = {"l1.hugepages", "true", "prefetch_writeback", "false", "l2",
                                  tier_json,      NULL};
  alloc_keys(k, model, n, chunk_bytes);
  k->tier = tier;
  k->ok = 1;
  int rc = bench_try_start_with(workers, l1_bytes, settings, &k->rt, err, sizeof(err));
  if (rc != KVA_OK) {
    fail(k, "kva_runtime_start: %s%s%s", kva_strerror(rc), err[0] ? ": " : "", err);
    return;
  }
  k->s = kva_storage_of(k->rt);
  if (kva_tier_bypassed(k->s, tier) < 0)
    fail(k, "the runtime started without the %s tier (not in this build)", tier);
}

static int stats(tier_side *k, kva_storage_stats *st) {
  int rc = kva_storage_get_stats(k->s, st);
  return rc == KVA_OK ? 0 : fail(k, "storage_get_stats: %s", kva_strerror(rc));
}

int tier_side_store(tier_side *k, int fill, double *secs) {
  kva_storage_stats st0, st1;
  if (stats(k, &st0)) return -1;
  int rc = kva_reserve_write(k->s, k->keys, k->n, &k->layout, KVA_WRITE_NEW, k->bufs, k->status);
  if (rc != (int)k->n) return fail(k, "reserve_write: %d of %u", rc, k->n);
  for (unsigned i = 0; i < k->n; i++)
    memset(k->bufs[i].ptr, (fill + (int)i) & 0xff, k->chunk_bytes);
  uint64_t t0 = bench_now_ns();
  rc = kva_finish_write(k->s, k->keys, k->n, k->status);
  if (rc != (int)k->n) return fail(k, "finish_write: %d of %u", rc, k->n);
  if ((rc = kva_flush(k->s, TIER_SIDE_WAIT_MS)) != KVA_OK)
    return fail(k, "flush: %s", kva_strerror(rc));
  *secs = (double)(bench_now_ns() - t0) / 1e9;
  if (stats(k, &st1)) return -1;
  uint64_t stored = st1.l2_stored_keys - st0.l2_stored_keys;
  if (stored != k->n)
    return fail(k, "store: %llu of %u keys stored (failed tasks %llu, skipped %llu, bypassed %d)",
                (unsigned long long)stored, k->n,
                (unsigned long long)(st1.l2_store_failures - st0.l2_store_failures),
                (unsigned long long)(st1.l2_store_skipped - st0.l2_store_skipped),
                kva_tier_bypassed(k->s, k->tier));
  return 0;
}

/* Whether chunk i came back as written (bytes fill + i): its first, middle
 * and last byte, enough to catch another key's object, an older store of
 * the key or a short read without costing as much as the load itself. */
static int check(tier_side *k, unsigned i, int fill) {
  const unsigned char *p = k->bufs[i].ptr;
  unsigned char want = (unsigned char)(fill + (int)i);
  uint64_t cb = k->chunk_bytes;
  if (k->bufs[i].len != cb || p[0] != want || p[cb / 2] != want || p[cb - 1] != want)
    return fail(k, "load: chunk %u came back wrong", i);
  return 0;
}

int tier_side_load(tier_side *k, int fill, double *secs) {
  int rc = kva_clear(k->s, 0);
  if (rc != (int)k->n) return fail(k, "clear: %d of %u", rc, k->n);
  kva_prefetch *h;
  size_t hits = 0;
  uint64_t t0 = bench_now_ns();
  rc = kva_submit_prefetch(k->s, k->keys, k->n, &k->layout, 0, &h);
  if (rc != KVA_OK) return fail(k, "submit_prefetch: %s", kva_strerror(rc));
  if ((rc = kva_wait_prefetch(k->s, h, TIER_SIDE_WAIT_MS, &hits)) != KVA_OK)
    return fail(k, "wait_prefetch: %s", kva_strerror(rc));
  *secs = (double)(bench_now_ns() - t0) / 1e9;
  if (hits != k->n) {
    kva_storage_stats st;
    kva_storage_get_stats(k->s, &st);
    if (hits) kva_finish_read_prefetched(k->s, k->keys, hits, 0);
    return fail(k, "load: %zu of %u keys loaded (load failures since start %llu)", hits, k->n,
                (unsigned long long)st.l2_load_failures);
  }
  if ((rc = kva_read_prefetched(k->s, k->keys, k->n, k->bufs)) != KVA_OK)
    return fail(k, "read_prefetched: %d", rc);
  int bad = 0;
  for (unsigned i = 0; i < k->n && !bad; i++) bad = check(k, i, fill);
  kva_finish_read_prefetched(k->s, k->keys, k->n, 0);
  return bad;
}

void tier_side_stop(tier_side *k) {
  if (k->rt) kva_runtime_shutdown(k->rt);
  free(k->keys);
  free(k->bufs);
  free(k->status);
}
