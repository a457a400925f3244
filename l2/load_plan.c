/*
 * load_plan.c — load_plan.h's formula: the prefix worth loading, and the
 * split, by trying every k (and m) in one pass each. n is a request's
 * chunks (tens), so O(n · ntiers) is nothing beside one tier round trip.
 */
#include "l2/load_plan.h"

#include <math.h>
#include <string.h>

#include "kvact.h"

static int finite_nonneg(double x) {
  return isfinite(x) && x >= 0;
}

static int check(const load_plan_in *in) {
  if (!in || in->h > in->n || in->ntiers > LOAD_PLAN_MAX_TIERS || !(in->margin >= 0) ||
      !(in->margin < 1) || !finite_nonneg(in->chunk_bytes) || !finite_nonneg(in->chunk_compute_s) ||
      !finite_nonneg(in->copy_bytes_per_s))
    return KVA_EINVAL;
  if (in->h < in->n && (!in->tier || !in->tiers || in->ntiers == 0)) return KVA_EINVAL;
  for (size_t i = 0; i < in->n - in->h; i++)
    if (in->tier[i] < 0 || (uint32_t)in->tier[i] >= in->ntiers) return KVA_EINVAL;
  for (uint32_t t = 0; t < in->ntiers; t++) {
    const load_plan_tier *r = &in->tiers[t];
    if (!finite_nonneg(r->bytes_per_s) || !finite_nonneg(r->latency_s) ||
        !finite_nonneg(r->queued_bytes))
      return KVA_EINVAL;
  }
  return KVA_OK;
}

/* Seconds until tier t has delivered `bytes` more after its queue; 0 for
 * a tier that is not measured (R_t = 0: counted as free, so loaded). */
static double arrival(const load_plan_in *in, uint32_t t, double bytes) {
  const load_plan_tier *r = &in->tiers[t];
  if (r->bytes_per_s <= 0) return 0;
  double keep = 1 - in->margin;
  return in->round_trips * r->latency_s / keep +
         (r->queued_bytes + bytes) / (keep * r->bytes_per_s);
}

/* T(k), given F(k). */
static double total(const load_plan_in *in, size_t k, double f) {
  double copy = in->copy_bytes_per_s > 0 ? in->chunk_bytes / in->copy_bytes_per_s : 0;
  double rest = 0;
  if (k > 0) rest = f == 0 ? (double)k * copy : fmax(copy, (double)k * copy - f);
  double pre = (double)(in->n - k) * in->chunk_compute_s;
  uint32_t layers = in->layers ? in->layers : 1;
  return f + fmax(rest, pre) + fmin(rest, pre) / layers;
}

static void plan_prefix(const load_plan_in *in, load_plan_out *out) {
  double bytes[LOAD_PLAN_MAX_TIERS] = {0};
  double f = 0;
  size_t best = in->h;
  double best_s = total(in, in->h, 0);
  out->recompute_s = best_s;
  for (size_t k = in->h + 1; k <= in->n; k++) {
    uint32_t t = (uint32_t)in->tier[k - 1 - in->h];
    bytes[t] += in->chunk_bytes;
    f = fmax(f, arrival(in, t, bytes[t])); /* FIFO: the tier's later chunks land later */
    double s = total(in, k, f);
    if (s <= best_s || in->chunk_compute_s == 0) { /* a tie, or no rate known: load more */
      best = k;
      best_s = s;
    }
  }
  out->k = best;
  out->load_s = best_s;
  for (size_t i = best; i < in->n; i++) out->skipped[in->tier[i - in->h]]++;
}

/* Tsplit(m) for every m, loads of [m, n) from the back: s_t(m) grows as m
 * goes down, so the pass runs from m = n to 0. */
/* The front of a split at m: the L1 hits among [0, m) copied, the rest
 * computed after them. */
static double front(const load_plan_in *in, size_t m, double copy) {
  size_t l1 = m < in->h ? m : in->h;
  return (double)l1 * copy + (double)(m - l1) * in->chunk_compute_s;
}

static void plan_split(const load_plan_in *in, load_plan_out *out) {
  double copy = in->copy_bytes_per_s > 0 ? in->chunk_bytes / in->copy_bytes_per_s : 0;
  double bytes[LOAD_PLAN_MAX_TIERS] = {0};
  double back = 0;
  out->split_at = in->n;
  out->split_s = front(in, in->n, copy);
  for (size_t m = in->n; m-- > 0;) {
    double a = copy;
    if (m >= in->h) {
      uint32_t t = (uint32_t)in->tier[m - in->h];
      bytes[t] += in->chunk_bytes;
      back = fmax(back, arrival(in, t, bytes[t]));
    }
    a += back;
    double s = fmax(front(in, m, copy), a);
    if (s < out->split_s) {
      out->split_at = m;
      out->split_s = s;
    }
  }
}

int load_plan(const load_plan_in *in, load_plan_out *out) {
  if (!out || check(in) != KVA_OK) return KVA_EINVAL;
  load_plan_out o;
  memset(&o, 0, sizeof o);
  plan_prefix(in, &o);
  plan_split(in, &o);
  *out = o;
  return KVA_OK;
}

int load_plan_worth_asking(const load_plan_tier *t, double chunk_bytes, double chunk_compute_s,
                           size_t chunks, double margin, int can_split) {
  if (!t || t->bytes_per_s <= 0 || chunk_compute_s <= 0 || chunks == 0 || !(margin >= 0) ||
      !(margin < 1))
    return 1;
  double keep = 1 - margin, c = chunk_compute_s;
  double s = chunk_bytes / (keep * t->bytes_per_s), lookup = t->latency_s / keep;
  if (can_split) return lookup < (double)chunks * c * c / (c + s);
  return s < c && lookup < (double)chunks * (c - s);
}

size_t load_plan_tiers_of(const kva_tier_hits *found, uint32_t ntiers, int8_t *tier, size_t cap) {
  size_t n = 0;
  for (uint32_t t = 1; t < found->ntiers && t < ntiers; t++)
    for (size_t j = 0; j < found->tier[t].hits && n < cap; j++) tier[n++] = (int8_t)(t - 1);
  return n;
}
