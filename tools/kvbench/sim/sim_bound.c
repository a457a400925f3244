/*
 * sim_bound.c — the lower bound of a simulated turn's TTFT, and the
 * bandwidths it is computed from, measured in the same run before the
 * runtime starts.
 *
 * A turn's hits must come out of their tiers, whole chunks at a time (a
 * tier holds a chunk's layers together), and be copied into the paged
 * cache; its misses must be prefilled, and the engine computes layer l of
 * the misses once layer l of the hits is in the cache. So, at the
 * hardware's speed:
 *
 *   fetch = sum over L2 tiers of (the turn's hits from it) * chunk / bw(tier)
 *   copy  = hits * chunk / bw(copy)        L1 -> the paged cache
 *   pre   = misses' tokens / prefill rate
 *   rest  = the copy that cannot hide behind the fetch: copy when nothing
 *           is fetched, else max(one chunk's copy, copy - fetch)
 *   bound = fetch + max(rest, pre) + min(rest, pre) / layers
 *
 * (the prefill's first layer needs every hit's first layer, so it starts
 * after the last fetched chunk has landed; from there the rest of the
 * copy and the prefill overlap layer by layer: the longer one, plus one
 * layer of the shorter one). Bandwidths:
 *   copy:  memcpy of one chunk between two prefaulted buffers, best of 5;
 *   disk:  tools/bench/uring_anchor.c reading 16 chunks, 8 in flight, with
 *          O_DIRECT from a file in the tier's directory (the tier's own
 *          file is in use), the faster of the plain and the slot shape,
 *          best of 3 after a write pass;
 *   mock:  its configured bandwidth_bytes_per_s (0: unlimited);
 *   other: not measured, counted as unlimited (the report says so).
 */
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "l2/load_plan.h"
#include "tools/bench/uring_anchor.h"
#include "tools/kvbench/bench.h"
#include "tools/kvbench/sim/sim.h"

#define PROBE_CHUNKS 16
#define PROBE_DEPTH 8

static double copy_bw(size_t bytes) {
  uint8_t *a = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
  uint8_t *b = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
  double best = 0;
  if (a && b) {
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    for (int r = 0; r < 5; r++) {
      uint64_t t0 = bench_now_ns();
      memcpy(b, a, bytes);
      double s = (double)(bench_now_ns() - t0) / 1e9;
      if (s > 0 && (double)bytes / s > best) best = (double)bytes / s;
    }
  }
  free(a);
  free(b);
  return best;
}

/* A scratch file's path in the directory of the tier's path ("" = $TMPDIR). */
static void scratch_path(const char *tier_path, char *out, size_t cap) {
  char dir[4096];
  if (tier_path && tier_path[0]) {
    snprintf(dir, sizeof dir, "%s", tier_path);
    snprintf(dir, sizeof dir, "%s", dirname(dir));
  } else {
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s", t && t[0] ? t : "/tmp");
  }
  snprintf(out, cap, "%s/kvbench-bound-%d.tmp", dir, (int)getpid());
}

static double disk_bw(const char *tier_path, size_t chunk) {
  char path[4200];
  scratch_path(tier_path, path, sizeof path);
  uint64_t block = (chunk + 4095) & ~(uint64_t)4095;
  uring_anchor *a = NULL;
  double best = 0, s;
  if (uring_anchor_open(&a, path, 0, block, PROBE_CHUNKS, PROBE_DEPTH) == 0 &&
      uring_anchor_run(a, URING_ANCHOR_SLOT, 1, &s) == 0) /* the write pass */
    for (int r = 0; r < 3; r++)
      for (int shape = 0; shape < 2; shape++)
        if (uring_anchor_run(a, shape ? URING_ANCHOR_SLOT : URING_ANCHOR_PURE, 0, &s) == 0 &&
            s > 0 && (double)(block * PROBE_CHUNKS) / s > best)
          best = (double)(block * PROBE_CHUNKS) / s;
  if (a) uring_anchor_close(a);
  unlink(path);
  return best;
}

void sim_bw_probe(const kva_config *c, size_t chunk, sim_bw *out) {
  *out = (sim_bw){.copy = copy_bw(chunk)};
  snprintf(out->how[0], sizeof out->how[0], "memcpy");
  out->bw[0] = out->copy;
  for (uint32_t t = 0; t + 1 < SIM_MAX_TIERS; t++) {
    char key[64];
    const char *type, *path = "";
    int64_t v = 0;
    snprintf(key, sizeof key, "l2[%u].type", t);
    if (kva_config_get_str(c, key, &type) != KVA_OK) break;
    out->ntiers = t + 2;
    char *how = out->how[t + 1];
    if (strcmp(type, "disk") == 0) {
      snprintf(key, sizeof key, "l2[%u].path", t);
      kva_config_get_str(c, key, &path);
      out->bw[t + 1] = disk_bw(path, chunk);
      snprintf(how, sizeof out->how[0], "%s", out->bw[t + 1] > 0 ? "io_uring" : "unmeasured");
    } else if (strcmp(type, "mock") == 0) {
      snprintf(key, sizeof key, "l2[%u].bandwidth_bytes_per_s", t);
      kva_config_get_i64(c, key, &v);
      out->bw[t + 1] = (double)v;
      snprintf(how, sizeof out->how[0], "%s", v ? "configured" : "unlimited");
    } else {
      snprintf(how, sizeof out->how[0], "unmeasured");
    }
  }
  if (out->ntiers == 0) out->ntiers = 1;
}

double sim_bound(const sim_bw *bw, const size_t *tier_hits, size_t chunk, double pre_s,
                 uint32_t layers) {
  double fetch = 0, copy = 0;
  size_t hits = 0;
  for (uint32_t t = 0; t < bw->ntiers; t++) {
    hits += tier_hits[t];
    if (t > 0 && bw->bw[t] > 0) fetch += (double)(tier_hits[t] * chunk) / bw->bw[t];
  }
  if (bw->copy > 0) copy = (double)(hits * chunk) / bw->copy;
  double rest = copy;
  if (fetch > 0 && bw->copy > 0) {
    double one = (double)chunk / bw->copy;
    rest = copy - fetch > one ? copy - fetch : one;
  }
  double hi = rest > pre_s ? rest : pre_s, lo = rest > pre_s ? pre_s : rest;
  return fetch + hi + (layers ? lo / layers : lo);
}

double sim_bound_best(const sim_bw *bw, const kva_tier_hits *found, size_t chunk, double chunk_s,
                      double tail_s, uint32_t layers) {
  size_t hits[SIM_MAX_TIERS] = {0};
  int8_t tier[SIM_MAX_KEYS];
  size_t h = found->ntiers ? found->tier[0].hits : 0;
  /* chunks of a tier the probe does not know are left out */
  size_t n = h + load_plan_tiers_of(found, bw->ntiers, tier, SIM_MAX_KEYS);
  /* loading [0, k), k = 0..n: the chunks of [0, k) counted per tier */
  double best = sim_bound(bw, hits, chunk, (double)n * chunk_s + tail_s, layers);
  for (size_t k = 1; k <= n; k++) {
    hits[k <= h ? 0 : (uint32_t)tier[k - 1 - h] + 1]++;
    double b = sim_bound(bw, hits, chunk, (double)(n - k) * chunk_s + tail_s, layers);
    if (b < best) best = b;
  }
  /* the split, at the same rates: no latency, nothing queued, no margin */
  load_plan_tier tiers[LOAD_PLAN_MAX_TIERS] = {{0}};
  for (uint32_t t = 1; t < bw->ntiers && t <= LOAD_PLAN_MAX_TIERS; t++)
    tiers[t - 1].bytes_per_s = bw->bw[t];
  load_plan_in in = {.n = n,
                     .h = h,
                     .tier = tier,
                     .ntiers = bw->ntiers > 1 ? bw->ntiers - 1 : 1,
                     .tiers = tiers,
                     .chunk_bytes = (double)chunk,
                     .chunk_compute_s = chunk_s,
                     .copy_bytes_per_s = bw->copy,
                     .layers = layers};
  load_plan_out out;
  if (load_plan(&in, &out) == KVA_OK && out.split_s + tail_s < best) best = out.split_s + tail_s;
  return best;
}
