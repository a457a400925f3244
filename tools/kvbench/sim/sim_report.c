/*
 * sim_report.c — the simulation's per-second ticks and progress line,
 * final report (text, and JSON to a file and with --json to stdout) and
 * chart: tools/kvbench/report.py's (matplotlib) over the JSON report, or
 * a one-panel SVG drawn here when Debian's python3 has no matplotlib.
 */
#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/sim/sim.h"

#define SIM_PYTHON "/usr/bin/python3" /* Debian's: the one python3-matplotlib is for */
#define SIM_REPORT_PY "tools/kvbench/report.py"
#define SIM_NO_MATPLOTLIB 3 /* report.py's exit status when matplotlib does not import */

extern char **environ;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double sim_pct(double *v, size_t n, double p) {
  if (!n) return 0;
  qsort(v, n, sizeof(double), cmp_double);
  size_t i = (size_t)(p / 100 * (double)(n - 1) + 0.5);
  return v[i < n ? i : n - 1];
}

static double ratio(uint64_t a, uint64_t b) {
  return b ? (double)a / (double)b : 0;
}

/* Each tier's bytes read and written so far: L1's from the engines' counts,
 * an L2 tier's from kva_l2_get_tier_stats (the last tick's where it cannot
 * answer, so that no traffic is lost or counted twice). */
static void tier_totals(const sim_opts *o, kva_storage *s, sim_stats *st, uint64_t *rd,
                        uint64_t *wr) {
  kva_layout l = sim_layout(o->model);
  size_t cb = kva_layout_bytes(&l);
  char name[SIM_MAX_TIERS][32];
  pthread_mutex_lock(&st->mu);
  uint32_t n = st->ntiers;
  memcpy(name, st->tier_name, sizeof name);
  memcpy(rd, st->ticked_read, sizeof st->ticked_read);
  memcpy(wr, st->ticked_written, sizeof st->ticked_written);
  rd[0] = st->hit_chunks * cb;
  wr[0] = st->stored_chunks * cb;
  pthread_mutex_unlock(&st->mu);
  for (uint32_t t = 1; t < n; t++) {
    kva_l2_tier_stats ts = {0};
    int rc = kva_l2_get_tier_stats(s, name[t], &ts);
    if (rc != KVA_OK && rc != KVA_EIO) continue; /* KVA_EIO: all but the adapter's part */
    rd[t] = ts.loaded_bytes;
    wr[t] = ts.stored_bytes;
    /* a tier the probe could not measure (redis): the tier meter's rate,
     * measured in the same run, from the first second it has one */
    pthread_mutex_lock(&st->mu);
    if (t < st->bw_shared.ntiers && ts.bytes_per_s > 0 &&
        strcmp(st->bw_shared.how[t], "unlimited") != 0) {
      st->bw_shared.bw[t] = ts.bytes_per_s; /* what the tier's loads got */
      snprintf(st->bw_shared.how[t], sizeof st->bw_shared.how[t], "meter");
    }
    if (t < st->bw.ntiers && ts.bytes_per_s > 0 &&
        (st->bw.bw[t] <= 0 || strcmp(st->bw.how[t], "meter") == 0) &&
        strcmp(st->bw.how[t], "unlimited") != 0) {
      st->bw.bw[t] = ts.bytes_per_s;
      snprintf(st->bw.how[t], sizeof st->bw.how[t], "meter");
    }
    pthread_mutex_unlock(&st->mu);
  }
}

void sim_tick(const sim_opts *o, kva_storage *s, sim_stats *st, size_t sec) {
  uint64_t rd[SIM_MAX_TIERS], wr[SIM_MAX_TIERS];
  tier_totals(o, s, st, rd, wr);
  sim_second *p = &st->sec[sec < SIM_MAX_SECONDS ? sec : SIM_MAX_SECONDS - 1];
  pthread_mutex_lock(&st->mu);
  for (uint32_t t = 0; t < SIM_MAX_TIERS; t++) {
    p->tier_read[t] += rd[t] - st->ticked_read[t];
    p->tier_written[t] += wr[t] - st->ticked_written[t];
    st->ticked_read[t] = rd[t];
    st->ticked_written[t] = wr[t];
  }
  pthread_mutex_unlock(&st->mu);
}

void sim_progress(const sim_opts *o, sim_stats *st, size_t sec, double t, int tty) {
  pthread_mutex_lock(&st->mu);
  uint64_t turns = st->turns, hits = st->hit_chunks, chunks = st->chunks, bad = st->wrong_bytes;
  sim_second p = st->sec[sec < SIM_MAX_SECONDS ? sec : SIM_MAX_SECONDS - 1];
  pthread_mutex_unlock(&st->mu);
  int done = (int)(20 * (t < o->duration_s ? t / o->duration_s : 1));
  char bar[21], last[96] = "last s: no turn";
  for (int i = 0; i < 20; i++) bar[i] = i < done ? '#' : '.';
  bar[20] = 0;
  if (p.turns)
    snprintf(last, sizeof last, "last s: hit %5.1f%%  TTFT %6.1f / %6.1f ms with / without",
             100 * ratio(p.hit_chunks, p.chunks), p.ttft_sum_s / (double)p.turns * 1e3,
             p.ttft_base_sum_s / (double)p.turns * 1e3);
  fprintf(stderr, "%s[%s] %5.1f/%.0f s  turns %llu  hit ratio %5.1f%%  %-56s  wrong bytes %llu%s",
          tty ? "\r" : "", bar, t, o->duration_s, (unsigned long long)turns,
          100 * ratio(hits, chunks), last, (unsigned long long)bad, tty ? "" : "\n");
}

/* The figures both reports print, from the stats and their deltas. */
typedef struct sim_figs {
  double hit, p50, p95, p99, ttft, ttft_base, ttft_bound, store_gbs, read_gbs;
  double ttft99, ttft_base99, ttft_bound99, found, plan50, plan99, shared50;
  uint64_t skipped; /* found chunks the plans left to recompute, all tiers */
  uint64_t stored_bytes, l1_read_bytes, l2_loaded_bytes, l2_stored_bytes;
} sim_figs;

static sim_figs figs(const sim_result *r) {
  sim_stats *st = r->st;
  size_t n = st->nsamples, cb = r->chunk_bytes;
  sim_figs f = {.hit = ratio(st->hit_chunks, st->chunks),
                .p50 = sim_pct(st->prefetch_s, n, 50),
                .p95 = sim_pct(st->prefetch_s, n, 95),
                .p99 = sim_pct(st->prefetch_s, n, 99),
                .ttft = sim_pct(st->ttft_s, n, 50),
                .ttft_base = sim_pct(st->ttft_base_s, n, 50),
                .ttft_bound = sim_pct(st->ttft_bound_s, n, 50),
                .ttft99 = sim_pct(st->ttft_s, n, 99),
                .plan50 = sim_pct(st->plan_s, n, 50),
                .shared50 = sim_pct(st->ttft_bound_shared_s, n, 50),
                .plan99 = sim_pct(st->plan_s, n, 99),
                .ttft_base99 = sim_pct(st->ttft_base_s, n, 99),
                .ttft_bound99 = sim_pct(st->ttft_bound_s, n, 99),
                .found = ratio(st->found_chunks, st->chunks),
                .stored_bytes = st->stored_chunks * cb,
                .l1_read_bytes = (st->ntiers ? st->tier_hits[0] : 0) * cb,
                .l2_loaded_bytes = (r->after.l2_loaded_keys - r->before.l2_loaded_keys) * cb,
                .l2_stored_bytes = (r->after.l2_stored_keys - r->before.l2_stored_keys) * cb};
  f.store_gbs = st->store_s > 0 ? (double)f.stored_bytes / st->store_s / 1e9 : 0;
  f.read_gbs = st->read_s > 0 ? (double)(st->hit_chunks * cb) / st->read_s / 1e9 : 0;
  for (uint32_t t = 0; t < SIM_MAX_TIERS; t++) f.skipped += st->tier_skipped[t];
  return f;
}

void sim_report_text(const sim_result *r) {
  sim_stats *st = r->st;
  sim_figs f = figs(r);
  const sim_opts *o = r->o;
  printf("kvbench: %s (%u layers, %u KV heads, head dim %u, bf16), chunk %u tokens = %.1f MiB\n",
         o->model->name, o->model->layers, o->model->heads, o->model->head_dim, SIM_CHUNK,
         (double)r->chunk_bytes / 1048576);
  printf("  %.1f s, %d engine threads: %llu requests (turns), %llu conversations\n", r->elapsed_s,
         o->threads, (unsigned long long)st->turns, (unsigned long long)st->conversations);
  if (st->device == KVA_DEVICE_HOST)
    printf("  paged KV cache   vLLM flash layout, host memory (KVA_DEVICE_HOST: no usable CUDA "
           "device 0), kva_kv_load / kva_kv_store\n");
  else
    printf("  paged KV cache   vLLM flash layout, CUDA device %d, kva_kv_load / kva_kv_store\n",
           st->device);
  printf("  hit ratio        %5.1f%% used (%llu of %llu chunks), %.1f%% found; %llu found chunks "
         "left to recompute as slower (the load plan, --engine %s); %llu turns split, %llu "
         "chunks computed in front of their loads\n",
         100 * f.hit, (unsigned long long)st->hit_chunks, (unsigned long long)st->chunks,
         100 * f.found, (unsigned long long)f.skipped, sim_engine_names[o->engine],
         (unsigned long long)st->split_turns, (unsigned long long)st->split_computed);
  for (uint32_t t = 0; t < st->ntiers; t++) {
    printf("    %-14s %5.1f%% used, %5.1f%% found (%llu chunks used, %llu skipped, %.1f MiB read",
           st->tier_name[t], 100 * ratio(st->tier_hits[t], st->chunks),
           100 * ratio(st->tier_found[t], st->chunks), (unsigned long long)st->tier_hits[t],
           (unsigned long long)st->tier_skipped[t],
           (double)(st->tier_hits[t] * r->chunk_bytes) / 1048576);
    const kva_l2_tier_stats *ts = &r->tier[t];
    if (t > 0)
      printf("; %.1f MiB stored, %.1f MiB loaded, holds %llu objects = %.1f MiB",
             (double)ts->stored_bytes / 1048576, (double)ts->loaded_bytes / 1048576,
             (unsigned long long)ts->adapter.objects, (double)ts->adapter.bytes / 1048576);
    printf(")\n");
  }
  if (st->ntiers > 1)
    printf("  L2 resident chunks usable as a prefix: %.1f%% (%llu of %llu); from L2 alone "
           "%.1f%% (%llu)\n",
           100 * ratio(r->l2.usable, r->l2.resident), (unsigned long long)r->l2.usable,
           (unsigned long long)r->l2.resident, 100 * ratio(r->l2.usable_alone, r->l2.resident),
           (unsigned long long)r->l2.usable_alone);
  printf("  stored           %.1f MiB into L1 (%llu chunks; %llu already there, %llu out of "
         "memory), %.1f MiB to L2, %.1f MiB loaded from L2\n",
         (double)f.stored_bytes / 1048576, (unsigned long long)st->stored_chunks,
         (unsigned long long)st->store_skipped, (unsigned long long)st->store_oom,
         (double)f.l2_stored_bytes / 1048576, (double)f.l2_loaded_bytes / 1048576);
  printf("  throughput       store %.2f GB/s (kva_kv_store), read of prefetched %.2f GB/s "
         "(kva_kv_load), until the op is waited for\n",
         f.store_gbs, f.read_gbs);
  printf("  prefetch latency p50 %.3f ms  p95 %.3f ms  p99 %.3f ms (from the plan: kva_plan_load "
         "p50 %.3f ms, p99 %.3f ms)\n",
         f.p50 * 1e3, f.p95 * 1e3, f.p99 * 1e3, f.plan50 * 1e3, f.plan99 * 1e3);
  printf("  simulated TTFT   p50 %.1f ms with kvact, %.1f ms without; p99 %.1f / %.1f ms (prefill "
         "at %.0f tokens/s)\n",
         f.ttft * 1e3, f.ttft_base * 1e3, f.ttft99 * 1e3, f.ttft_base99 * 1e3, o->prefill_tps);
  double over = f.ttft_bound > 0 ? f.ttft / f.ttft_bound : 0;
  printf("  TTFT bound       p50 %.1f ms (p99 %.1f) at the hardware's speed, the best of loading, "
         "recomputing and the split: measured/bound %.2f target=<=%.2f ok=%s\n",
         f.ttft_bound * 1e3, f.ttft_bound99 * 1e3, over, SIM_BOUND_TARGET,
         over <= SIM_BOUND_TARGET ? "yes" : "no");
  printf("  bound, shared    p50 %.1f ms at the rates the tiers' loads got in this run (the tier "
         "meter; the disk shared by the engines and the write-behind): measured/bound %.2f\n",
         f.shared50 * 1e3, f.shared50 > 0 ? f.ttft / f.shared50 : 0);
  printf("  bound from      ");
  for (uint32_t t = 0; t < st->bw.ntiers; t++)
    printf(" %s %.2f GB/s (%s)%s", t ? st->tier_name[t] : "copy", st->bw.bw[t] / 1e9, st->bw.how[t],
           t + 1 < st->bw.ntiers ? "," : "");
  printf("\n");
  /* the bound gives each turn a tier to itself; how busy each one was
   * says how far that is from a run where engines share it */
  for (uint32_t t = 1; t < st->ntiers && t < st->bw.ntiers; t++) {
    const kva_l2_tier_stats *ts = &r->tier[t];
    if (st->bw.bw[t] <= 0 || r->elapsed_s <= 0) continue;
    double rd = (double)ts->loaded_bytes / r->elapsed_s;
    double wr = (double)ts->stored_bytes / r->elapsed_s;
    printf("  tier traffic     %s read %.2f GB/s + wrote %.2f GB/s on average = %.2f of its "
           "measured read rate; the load plan's meter at the end: %.2f GB/s, round trip %.3f "
           "ms, %llu lookups not sent\n",
           st->tier_name[t], rd / 1e9, wr / 1e9, (rd + wr) / st->bw.bw[t], ts->bytes_per_s / 1e9,
           ts->latency_s * 1e3, (unsigned long long)ts->lookups_skipped);
  }
  printf("  wrong bytes      %llu, errors %llu\n", (unsigned long long)st->wrong_bytes,
         (unsigned long long)st->errors);
  if (!(over > 0 && over <= SIM_BOUND_TARGET)) bench_missed("ttft-bound");
  if (st->wrong_bytes) bench_missed("wrong-bytes"); /* target 0, always */
  if (st->errors) bench_missed("errors");
  bench_suite_end("sim");
}

/* Seconds of the run the per-second series covers: every second begun
 * (the last one partial), at least 1. */
static size_t run_seconds(const sim_result *r) {
  size_t n = (size_t)ceil(r->elapsed_s);
  if (n < 1) n = 1;
  return n > SIM_MAX_SECONDS ? SIM_MAX_SECONDS : n;
}

/* Second p's entry of each tier: its hits, and its traffic (sim_second). */
static json_t *second_tiers_json(const sim_stats *st, const sim_second *p) {
  json_t *a = json_array();
  for (uint32_t t = 0; a && t < st->ntiers; t++)
    json_array_append_new(
        a, json_pack("{s:s,s:I,s:f,s:I,s:I,s:I}", "name", st->tier_name[t], "hit_chunks",
                     (json_int_t)p->tier_hits[t], "hit_ratio", ratio(p->tier_hits[t], p->chunks),
                     "found_chunks", (json_int_t)p->tier_found[t], "bytes_read",
                     (json_int_t)p->tier_read[t], "bytes_written", (json_int_t)p->tier_written[t]));
  return a;
}

/* A mean in ms of second p's turns, null in a second without one. */
static json_t *mean_ms(double sum_s, const sim_second *p) {
  return p->turns ? json_real(sum_s / (double)p->turns * 1e3) : json_null();
}

/* The per-second series, one entry per second of the run (a second in
 * which no turn finished has turns 0 and null means): what the charts
 * draw. */
static json_t *per_second_json(const sim_result *r) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < run_seconds(r); i++) {
    const sim_second *p = &r->st->sec[i];
    json_array_append_new(
        a, json_pack("{s:I,s:I,s:I,s:I,s:I,s:f,s:o,s:o,s:o,s:o}", "second", (json_int_t)i, "turns",
                     (json_int_t)p->turns, "chunks", (json_int_t)p->chunks, "hit_chunks",
                     (json_int_t)p->hit_chunks, "found_chunks", (json_int_t)p->found_chunks,
                     "hit_ratio", ratio(p->hit_chunks, p->chunks), "ttft_mean_ms",
                     mean_ms(p->ttft_sum_s, p), "ttft_mean_ms_without_kvact",
                     mean_ms(p->ttft_base_sum_s, p), "ttft_mean_ms_bound",
                     mean_ms(p->ttft_bound_sum_s, p), "tiers", second_tiers_json(r->st, p)));
  }
  return a;
}

/* n samples in ms (figs() has sorted them). */
static json_t *samples_ms(const double *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_real(v[i] * 1e3));
  return a;
}

/* The JSON report, written to path, and to stdout with --json. */
int sim_report_json(const sim_result *r, const char *path) {
  sim_stats *st = r->st;
  sim_figs f = figs(r);
  char dev[16] = "host";
  if (st->device != KVA_DEVICE_HOST) snprintf(dev, sizeof dev, "cuda:%d", st->device);
  json_t *tiers = json_array();
  for (uint32_t t = 0; t < st->ntiers; t++) {
    json_t *tier =
        json_pack("{s:s,s:I,s:f,s:I,s:I,s:I}", "name", st->tier_name[t], "hit_chunks",
                  (json_int_t)st->tier_hits[t], "hit_ratio", ratio(st->tier_hits[t], st->chunks),
                  "found_chunks", (json_int_t)st->tier_found[t], "skipped_chunks",
                  (json_int_t)st->tier_skipped[t], "bytes_read",
                  (json_int_t)(st->tier_hits[t] * r->chunk_bytes));
    const kva_l2_tier_stats *ts = &r->tier[t];
    if (t > 0)
      json_object_update_new(tier, json_pack("{s:I,s:I,s:I,s:I}", "bytes_stored",
                                             (json_int_t)ts->stored_bytes, "bytes_loaded",
                                             (json_int_t)ts->loaded_bytes, "objects_held",
                                             (json_int_t)ts->adapter.objects, "bytes_held",
                                             (json_int_t)ts->adapter.bytes));
    json_array_append_new(tiers, tier);
  }
  json_t *bw = json_array();
  for (uint32_t t = 0; t < st->bw.ntiers; t++)
    json_array_append_new(bw, json_pack("{s:s,s:f,s:s}", "tier", t ? st->tier_name[t] : "copy",
                                        "gb_per_s", st->bw.bw[t] / 1e9, "how", st->bw.how[t]));
  json_t *j = json_pack(
      "{s:s,s:I,s:f,s:I,s:I,s:I,s:I,s:f,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:f,"
      "s:I,s:I,s:s,s:s,s:I,s:I,s:f,s:I,s:f}",
      "model", r->o->model->name, "chunk_bytes", (json_int_t)r->chunk_bytes, "elapsed_s",
      r->elapsed_s, "requests", (json_int_t)st->turns, "conversations",
      (json_int_t)st->conversations, "chunks", (json_int_t)st->chunks, "hit_chunks",
      (json_int_t)st->hit_chunks, "hit_ratio", f.hit, "tiers", tiers, "stored_chunks",
      (json_int_t)st->stored_chunks, "bytes_stored", (json_int_t)f.stored_bytes, "store_skipped",
      (json_int_t)st->store_skipped, "store_out_of_memory", (json_int_t)st->store_oom,
      "l2_bytes_stored", (json_int_t)f.l2_stored_bytes, "l2_bytes_loaded",
      (json_int_t)f.l2_loaded_bytes, "store_gb_per_s", f.store_gbs, "read_gb_per_s", f.read_gbs,
      "prefetch_p50_ms", f.p50 * 1e3, "prefetch_p95_ms", f.p95 * 1e3, "prefetch_p99_ms",
      f.p99 * 1e3, "ttft_p50_ms", f.ttft * 1e3, "ttft_p50_ms_without_kvact", f.ttft_base * 1e3,
      "wrong_bytes", (json_int_t)st->wrong_bytes, "errors", (json_int_t)st->errors, "svg",
      r->o->svg, "device", dev, "l2_resident_chunks", (json_int_t)r->l2.resident,
      "l2_usable_chunks", (json_int_t)r->l2.usable, "l2_usable_ratio",
      ratio(r->l2.usable, r->l2.resident), "l2_usable_alone_chunks", (json_int_t)r->l2.usable_alone,
      "l2_usable_alone_ratio", ratio(r->l2.usable_alone, r->l2.resident));
  if (j) json_object_set_new(j, "per_second", per_second_json(r));
  if (j) { /* the load plan's (issue 30) */
    json_object_update_new(
        j, json_pack("{s:s,s:f,s:f,s:I,s:f,s:I,s:I,s:I,s:f,s:f,s:f}", "engine",
                     sim_engine_names[r->o->engine], "plan_p50_ms", f.plan50 * 1e3, "plan_p99_ms",
                     f.plan99 * 1e3, "found_chunks", (json_int_t)st->found_chunks, "found_ratio",
                     f.found, "skipped_chunks", (json_int_t)f.skipped, "split_turns",
                     (json_int_t)st->split_turns, "split_computed_chunks",
                     (json_int_t)st->split_computed, "ttft_p99_ms", f.ttft99 * 1e3,
                     "ttft_p99_ms_without_kvact", f.ttft_base99 * 1e3, "ttft_bound_p99_ms",
                     f.ttft_bound99 * 1e3));
  }
  if (j)
    json_object_update_new(
        j, json_pack("{s:f,s:f,s:f,s:f,s:o}", "ttft_bound_shared_p50_ms", f.shared50 * 1e3,
                     "ttft_bound_p50_ms", f.ttft_bound * 1e3, "ttft_over_bound",
                     f.ttft_bound > 0 ? f.ttft / f.ttft_bound : 0, "ttft_bound_target",
                     SIM_BOUND_TARGET, "bound_bandwidths", bw));
  if (j) /* every turn's, sorted: the distributions' charts */
    json_object_set_new(j, "ttft_samples_ms",
                        json_pack("{s:o,s:o,s:o}", "with_kvact",
                                  samples_ms(st->ttft_s, st->nsamples), "without_kvact",
                                  samples_ms(st->ttft_base_s, st->nsamples), "bound",
                                  samples_ms(st->ttft_bound_s, st->nsamples)));
  if (!j) return -1;
  int rc = json_dump_file(j, path, JSON_INDENT(2));
  if (rc) fprintf(stderr, "kvbench: %s could not be written\n", path);
  if (!rc && r->o->json) {
    rc = json_dumpf(j, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
  }
  json_decref(j);
  return rc;
}

/* report.py: beside the binary (bazel-bin/tools/kvbench/kvbench_report.py,
 * a copy), else in the runfiles tree bazel run and bazel test start in,
 * else in a source tree kvbench runs from; 0 or -1. */
static int report_py(char *out, size_t n) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  self[len > 0 ? len : 0] = 0;
  snprintf(out, n, "%s/kvbench_report.py", dirname(self));
  if (len > 0 && access(out, R_OK) == 0) return 0;
  const char *rel[] = {"tools/kvbench/kvbench_report.py", SIM_REPORT_PY};
  for (int i = 0; i < 2; i++)
    if (access(rel[i], R_OK) == 0) return snprintf(out, n, "%s", rel[i]) < 0 ? -1 : 0;
  return -1;
}

/* Runs SIM_PYTHON report.py JSON SVG; its exit status (SIM_NO_MATPLOTLIB
 * too when python3 cannot start). Its output goes to a temporary file
 * (stdout carries the JSON report with --json), passed on to stderr
 * unless matplotlib was missing: kvbench says that in its own words. */
static int run_report_py(const char *py, const char *json, const char *svg) {
  FILE *log = tmpfile();
  if (!log) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fileno(log), 1);
  posix_spawn_file_actions_adddup2(&fa, fileno(log), 2);
  char *argv[] = {SIM_PYTHON, (char *)py, (char *)json, (char *)svg, NULL};
  pid_t pid;
  int status = 0, rc = posix_spawn(&pid, SIM_PYTHON, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  while (rc == 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  rc = rc ? SIM_NO_MATPLOTLIB : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  char buf[4096];
  size_t got;
  rewind(log);
  while (rc != SIM_NO_MATPLOTLIB && (got = fread(buf, 1, sizeof buf, log)) > 0)
    fwrite(buf, 1, got, stderr);
  fclose(log);
  return rc;
}

int sim_write_chart(const sim_result *r, const char *json) {
  const char *svg = r->o->svg;
  char py[4096];
  int found = !r->o->simple_chart && report_py(py, sizeof py) == 0;
  int rc = found ? run_report_py(py, json, svg) : -1;
  if (rc == 0) {
    fprintf(stderr, "kvbench: report %s, chart %s (matplotlib)\n", json, svg);
    return 0;
  }
  char why[160] = "KVBENCH_CHART=simple";
  if (!r->o->simple_chart && !found)
    snprintf(why, sizeof why, "kvbench_report.py not found beside kvbench, nor %s", SIM_REPORT_PY);
  else if (rc == SIM_NO_MATPLOTLIB)
    snprintf(why, sizeof why, "`apt-get install python3-matplotlib` would give the full report");
  else if (!r->o->simple_chart)
    snprintf(why, sizeof why, "report.py failed with status %d, its output above", rc);
  int bad = sim_write_svg(r, svg);
  fprintf(stderr, "kvbench: report %s, chart %s %s (%s)\n", json, svg,
          bad ? "could not be written" : "hand-drawn", why);
  return bad ? -1 : 0;
}

/* Hit ratio (left axis, 0..100%) and mean TTFT with and without kvact
 * (right axis) per second, as polylines. */
int sim_write_svg(const sim_result *r, const char *path) {
  sim_stats *st = r->st;
  size_t n = run_seconds(r); /* the last, partial second too */
  double tmax = 1e-3;
  for (size_t i = 0; i < n; i++)
    if (st->sec[i].turns && st->sec[i].ttft_base_sum_s / (double)st->sec[i].turns > tmax)
      tmax = st->sec[i].ttft_base_sum_s / (double)st->sec[i].turns;
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  const double W = 720, H = 360, L = 60, R = 60, T = 40, B = 40, pw = W - L - R, ph = H - T - B;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
          "<text x=\"%.0f\" y=\"24\" font-family=\"sans-serif\" font-size=\"14\">kvbench: %s, "
          "hit ratio and mean simulated TTFT per second</text>\n"
          "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
          "stroke=\"#888\"/>\n",
          W, H, L, r->o->model->name, L, T, pw, ph);
  fprintf(f,
          "<text x=\"4\" y=\"%.0f\" font-size=\"11\" fill=\"#1f77b4\">100%%</text>\n"
          "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" fill=\"#d62728\">%.0f ms</text>\n"
          "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">%zu s</text>\n",
          T + 4, W - R + 4, T + 4, tmax * 1e3, W - R - 20, H - B + 16, n);
  const char *color[3] = {"#1f77b4", "#d62728", "#999"};
  const char *label[3] = {"hit ratio", "TTFT with kvact", "TTFT without"};
  for (int s = 0; s < 3; s++) {
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color[s]);
    for (size_t i = 0; i < n; i++) {
      const sim_second *p = &st->sec[i];
      if (!p->turns) continue; /* no turn finished in that second: no point */
      double turns = p->turns ? (double)p->turns : 1;
      double y = s == 0 ? ratio(p->hit_chunks, p->chunks)
                        : (s == 1 ? p->ttft_sum_s : p->ttft_base_sum_s) / turns / tmax;
      double x = L + (n > 1 ? pw * (double)i / (double)(n - 1) : pw / 2);
      fprintf(f, "%.1f,%.1f ", x, T + ph * (1 - (y > 1 ? 1 : y)));
    }
    fprintf(f, "\"/>\n<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" fill=\"%s\">%s</text>\n",
            L + 10 + 150 * s, H - 8, color[s], label[s]);
  }
  fputs("</svg>\n", f);
  return fclose(f) ? -1 : 0;
}
