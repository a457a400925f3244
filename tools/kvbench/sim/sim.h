/*
 * sim.h — kvbench's serving-engine simulation (what it runs with no
 * --suite): engine threads run multi-turn conversations against the
 * storage facade, moving KV between their paged caches and L1 with
 * kva_kv_load / kva_kv_store, and a report says what kvact saved.
 */
#ifndef KVA_TOOLS_SIM_H
#define KVA_TOOLS_SIM_H

#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#define SIM_CHUNK 256       /* tokens per chunk (one key) */
#define SIM_PROMPT 1024     /* tokens of each shared system prompt */
#define SIM_MAX_TOKENS 8192 /* a conversation ends before its history passes this */
#define SIM_MAX_KEYS (SIM_MAX_TOKENS / SIM_CHUNK + 1)
#define SIM_MAX_SECONDS 3600 /* per-second series kept for the chart */
#define SIM_MAX_TIERS 8
#define SIM_BOUND_TARGET 1.25 /* measured TTFT p50 / its bound's p50, at most */

typedef struct sim_model {
  const char *name;
  uint32_t layers, heads, head_dim; /* bf16 */
} sim_model;

/* --engine: how the simulated engine uses a turn's load plan; its names,
 * in this order, in sim_engine_names (sim_main.c) */
#define SIM_ENGINES 4
extern const char *const sim_engine_names[SIM_ENGINES];
enum {
  SIM_ENGINE_AUTO = 0, /* the plan's best: the prefix worth loading, or the split */
  SIM_ENGINE_PREFIX,   /* the prefix worth loading (what vLLM can do) */
  SIM_ENGINE_SPLIT,    /* compute the front while loading the back, always */
  SIM_ENGINE_ALL,      /* load everything found (kvact before the plan) */
};

typedef struct sim_opts {
  const sim_model *model;
  const char *engine_name; /* --engine */
  int engine;              /* SIM_ENGINE_*, from it */
  int conversations, threads, prompts;
  uint64_t seed;
  double prefill_tps, duration_s;
  int json;
  const char *svg;    /* the chart's path (NULL: the default) */
  int simple_chart;   /* KVBENCH_CHART=simple: sim_write_svg's, not report.py's */
  int clients;        /* --clients: engine processes (0 = this process alone) */
  const char *socket; /* --socket: a running kvactd's (NULL: --clients starts one) */
  int proc;           /* this engine process's index: its conversations' seeds */
  int quiet;          /* no progress line */
} sim_opts;

/* Per-second series, one point per second of the run (counted from when
 * the engines start): a turn counts in the second it finished in; the
 * tiers' traffic in the second sim_tick closed when it saw it. */
typedef struct sim_second {
  uint64_t turns, hit_chunks, found_chunks, chunks;
  uint64_t tier_hits[SIM_MAX_TIERS];  /* used, as sim_stats.tier_hits */
  uint64_t tier_found[SIM_MAX_TIERS]; /* found, as sim_stats.tier_found */
  /* bytes: L1 = read by the engines' loads and written by their stores;
   * an L2 tier = loaded into L1 and stored from it */
  uint64_t tier_read[SIM_MAX_TIERS], tier_written[SIM_MAX_TIERS];
  double ttft_sum_s, ttft_base_sum_s, ttft_bound_sum_s;
} sim_second;

/* Every chunk key the engines used, with the key before it in its chain
 * (sim_prefix.c); guarded by mu. */
typedef struct sim_chains {
  pthread_mutex_t mu;
  struct reg_entry *e;
  uint32_t n, cap;
  int32_t *table; /* open addressing: indexes into e, -1 = empty */
  uint32_t tcap;
} sim_chains;

/* The bandwidths a turn's TTFT bound is computed from (sim_bound.c),
 * bytes/s: [0] L1 -> the paged cache, then l2[] in order; 0 = unlimited
 * or unmeasured, how[] says which. */
typedef struct sim_bw {
  double copy;
  double bw[SIM_MAX_TIERS];
  char how[SIM_MAX_TIERS][16];
  uint32_t ntiers;
} sim_bw;

/* Everything the engine threads measure; guarded by mu. */
typedef struct sim_stats {
  pthread_mutex_t mu;
  uint64_t turns, conversations, chunks, hit_chunks, l1_hits;
  uint64_t tier_hits[SIM_MAX_TIERS]; /* used (loaded): [0] = L1, then l2[] in order */
  uint64_t tier_found[SIM_MAX_TIERS], tier_skipped[SIM_MAX_TIERS]; /* found; left by the plan */
  uint64_t found_chunks, split_turns, split_computed; /* split: front chunks computed */
  char tier_name[SIM_MAX_TIERS][32];
  uint32_t ntiers;
  int device; /* the engines' paged caches: KVA_DEVICE_HOST or a CUDA ordinal */
  uint64_t stored_chunks, store_skipped, store_oom, wrong_bytes, errors;
  double store_s, read_s; /* time in kva_kv_store / kva_kv_load until their op is waited for */
  double *prefetch_s, *ttft_s, *ttft_base_s, *ttft_bound_s; /* one sample per turn */
  double *plan_s; /* the turn's kva_plan_load (or kva_lookup), one per turn */
  /* the bound at the rates the tiers' loads got in this run (the tier
   * meter, sampled each second; the probe's before the first sample) */
  double *ttft_bound_shared_s;
  sim_bw bw_shared;
  sim_bw bw; /* set before the engines start */
  size_t nsamples, cap;
  sim_second sec[SIM_MAX_SECONDS];
  uint64_t ticked_read[SIM_MAX_TIERS], ticked_written[SIM_MAX_TIERS]; /* at the last tick */
  sim_chains chains;
} sim_stats;

/* The chunks the L2 tiers hold at the end (each tier counted on its own),
 * those usable as a prefix (every chunk before it loadable from L1 or an
 * L2 tier), and those usable from their tier alone. */
typedef struct sim_prefix_counts {
  uint64_t resident, usable, usable_alone;
} sim_prefix_counts;

/* The run's result, handed to the report. */
typedef struct sim_result {
  const sim_opts *o;
  size_t chunk_bytes;
  double elapsed_s;
  kva_storage_stats before, after;
  kva_l2_tier_stats tier[SIM_MAX_TIERS]; /* [t] for st->tier_name[t], t >= 1, at the end */
  sim_prefix_counts l2;                  /* at the end */
  sim_stats *st;
} sim_result;

/* sim_main.c: the simulation of opts with the model named `model`, on the
 * config file (NULL: the embedded default) and the -o settings; the exit
 * status (2: the options refused, after saying why) */
int sim_main(const sim_opts *opts, const char *model, const char *file, char **sets, int nsets);
/* sim_main.c: the config (the embedded default or file, then the -o
 * settings; sets are left as given) and the engines' device */
kva_config *sim_config(const char *file, char **sets, int nsets, int device);
int sim_device(void);
/* sim_clients.c: --clients (o->clients engine processes against one kvactd,
 * then as many embedded instances); the exit status */
int sim_clients(const sim_opts *o, const char *file, char **sets, int nsets);
/* sim.c */
kva_layout sim_layout(const sim_model *m);
const sim_model *sim_model_find(const char *name);
/* st->device: the device asked for, then the one used */
double sim_run(const sim_opts *o, kva_storage *s, sim_stats *st);
/* sim_bound.c: the bandwidths of the config's tiers, measured now (before
 * the runtime starts: the probes use the disk alone) */
void sim_bw_probe(const kva_config *c, size_t chunk_bytes, sim_bw *out);
/* The lower bound of a turn's TTFT: tier_hits[t] chunks from tier t
 * (bw's order), pre_s seconds of prefill for the misses. */
double sim_bound(const sim_bw *bw, const size_t *tier_hits, size_t chunk_bytes, double pre_s,
                 uint32_t layers);
/* The best of every way to serve a turn whose prefix `found` was found:
 * loading [0, k) for each k (k = 0: recomputing it all) and the split
 * (load_plan.h), at bw's rates; chunk_s per chunk computed, tail_s for the
 * tokens past the found prefix. */
double sim_bound_best(const sim_bw *bw, const kva_tier_hits *found, size_t chunk_bytes,
                      double chunk_s, double tail_s, uint32_t layers);
/* sim_prefix.c */
/* Records a turn's keys (its whole history, in order). */
void sim_chains_note(sim_chains *c, const kva_key *keys, size_t n);
/* Over the L2 tiers of st (kva_l2_contains, and kva_lookup for L1): 0, or
 * the first error. */
int sim_chains_usable(sim_chains *c, kva_storage *s, const sim_stats *st, sim_prefix_counts *out);
void sim_chains_free(sim_chains *c);
/* sim_report.c */
/* Closes second sec of the series (the tiers' traffic since the last
 * tick); the progress line, t seconds in, with second sec's figures. */
void sim_tick(const sim_opts *o, kva_storage *s, sim_stats *st, size_t sec);
void sim_progress(const sim_opts *o, sim_stats *st, size_t sec, double t, int tty);
void sim_report_text(const sim_result *r);
int sim_report_json(const sim_result *r, const char *path);
/* The chart at r->o->svg from the JSON report at json: report.py's, or
 * sim_write_svg's when matplotlib is missing; says which; 0 or -1. */
int sim_write_chart(const sim_result *r, const char *json);
int sim_write_svg(const sim_result *r, const char *path);
double sim_pct(double *v, size_t n, double p); /* sorts v */

#endif
