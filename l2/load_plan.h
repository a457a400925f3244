/*
 * load_plan.h — whether a found prefix is worth loading or cheaper to
 * recompute (issue 30; docs/load-plan.md gives the formula and its
 * symbols). Pure arithmetic on rates the caller measured: no actor, no
 * lock, no allocation.
 *
 * A prefix of n chunks was found: the first h in L1, chunk i >= h on tier
 * tier[i - h]. Loading chunks [0, k) and computing [k, n) gives a time to the
 * end of the prefix's prefill of
 *
 *   A_t(k)  = rt·L_t/(1-mu) + (Q_t + b_t(k)) / ((1-mu)·R_t)   tier t's last chunk of [h, k) in L1
 *   F(k)    = max over the tiers of [h, k) of A_t(k)           (0 when k <= h)
 *   rest(k) = the copy into the engine's cache not hidden behind F:
 *             0 if k = 0; k·B/Rc if F = 0; else max(B/Rc, k·B/Rc - F)
 *   pre(k)  = (n - k)·C
 *   T(k)    = F(k) + max(rest, pre) + min(rest, pre)/layers
 *
 * (b_t(k): bytes of the chunks of [h, k) on tier t, FIFO behind Q_t; rt:
 * round trips still to pay; C: seconds to compute one chunk.) The plan
 * loads k* = argmin over k in [h, n] of T(k), the larger k on a tie: L1
 * hits are always kept. The chunks of [k*, n) are "skipped as slower than
 * recompute", counted per tier. An unknown rate loads everything found
 * (R_t = 0: a tier not yet measured; C = 0: no prefill rate known).
 *
 * The split ("compute or load? why not both"): the engine computes
 * chunks [0, m) from the front while [m, n) load from the back, the L1
 * hits among [0, m) copied rather than computed:
 * Tsplit(m) = max(front(m), Aback(m)), front(m) = min(m, h)·B/Rc +
 * (m - min(m, h))·C, Aback(m) = max over tiers of
 * rt·L_t/(1-mu) + (Q_t + s_t(m))/((1-mu)·R_t) + B/Rc (s_t(m): bytes of
 * [m, n) on tier t; 0 when m = n); m* = argmin. Only an engine that
 * controls its own compute order can do it (kvbench's simulated one).
 */
#ifndef KVA_L2_LOAD_PLAN_H
#define KVA_L2_LOAD_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#define LOAD_PLAN_MAX_TIERS 8

typedef struct load_plan_tier {
  double bytes_per_s;  /* R_t: throughput while busy; 0 = not measured (load) */
  double latency_s;    /* L_t: one round trip */
  double queued_bytes; /* Q_t: bytes sent to it and not yet answered */
} load_plan_tier;

typedef struct load_plan_in {
  size_t n;                    /* chunks found: [0, n) */
  size_t h;                    /* the first h of them are in L1 (h <= n) */
  const int8_t *tier;          /* tier[i - h]: the tier of chunk i, h <= i < n */
  uint32_t ntiers;             /* 1..LOAD_PLAN_MAX_TIERS (0 when h == n) */
  const load_plan_tier *tiers; /* ntiers of them */
  double chunk_bytes;          /* B */
  double chunk_compute_s;      /* C = chunk tokens / prefill rate; 0 = unknown (load) */
  double copy_bytes_per_s;     /* Rc: L1 -> the engine's cache; 0 = not measured (free) */
  uint32_t layers;             /* layers the copy overlaps with the compute; 0 = 1 */
  uint32_t round_trips;        /* rt: tier round trips still to pay (lookup, load) */
  double margin;               /* mu, in [0, 1): rates count (1 - mu) of their value */
} load_plan_in;

typedef struct load_plan_out {
  size_t k;                              /* load [0, k), compute [k, n) */
  uint32_t skipped[LOAD_PLAN_MAX_TIERS]; /* chunks of [k, n), per tier */
  double load_s;                         /* T(k) */
  double recompute_s;                    /* T(h): only the L1 hits loaded */
  size_t split_at;                       /* m* */
  double split_s;                        /* Tsplit(m*) */
} load_plan_out;

/* 0, or KVA_EINVAL for an input the formula cannot take (h > n, a tier
 * index out of range, a negative or non-finite rate, a margin outside
 * [0, 1)); *out is then untouched. */
int load_plan(const load_plan_in *in, load_plan_out *out);

/* The tiers of a found prefix as kva_lookup reports it (the L1 hits,
 * then each L2 tier's run after the tiers before it): tier[j] for chunk
 * h + j, the L2 tier's index, for the L2 tiers among found->tier[1,
 * ntiers); at most cap entries. Returns their count: load_plan_in's n - h. */
size_t load_plan_tiers_of(const kva_tier_hits *found, uint32_t ntiers, int8_t *tier, size_t cap);

/* Whether a lookup of up to `chunks` keys on tier t is worth its round
 * trip, before it is sent: 0 when nothing the tier could hold would be
 * loaded, or when the round trip alone costs more than the most the tier
 * could save (every key found there):
 *   prefix engine: s = B/((1-mu)R_t) >= C (no chunk of the tier arrives
 *                  before it could be computed, load_plan never loads it),
 *                  or L_t/(1-mu) >= chunks·(C - s);
 *   split engine:  L_t/(1-mu) >= chunks·C·C/(C + s) (the split's saving
 *                  over recomputing, for one tier with nothing queued).
 * 1 for an unmeasured tier (R_t = 0), an unknown prefill rate (C = 0) or no
 * chunks. The tier's queue does not count here: it may drain by the load,
 * and load_plan weighs it once the tier has answered. */
int load_plan_worth_asking(const load_plan_tier *t, double chunk_bytes, double chunk_compute_s,
                           size_t chunks, double margin, int can_split);

#endif
