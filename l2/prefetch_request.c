/*
 * prefetch_request.c — one prefetch request through the seed 002 state
 * machine, for the keys that missed in L1 (keys[0, n) here):
 *
 *  LOOKUP   lookup_and_lock on every usable tier; wait for all.
 *  plan     the prefetch policy picks at most one tier per key; the plan is
 *           trimmed to its contiguous prefix [0, p) (prefix-only loading).
 *  RESERVE  L1 reserve_write(NEW, temporary unless write-back) of [0, p);
 *           the plan is re-trimmed to the reserved prefix [0, q).
 *           Phase-1 unlock: every L2 lock not in the final plan.
 *  DROP     buffers reserved past the reservation gap are removed.
 *  LOAD     one load per tier into the reserved buffers; wait for all.
 *           Phase-2 unlock: every planned key, loaded or not.
 *  COMMIT   finish_write_and_reserve_read of the loaded prefix [0, r):
 *           write lock -> 1 + extra_readers read locks, atomically.
 *  UNREAD   read locks past a commit gap are released (only when an
 *           object was force-deleted under us).
 *  ABORT    buffers of [r, q) (failed loads, loads past the gap) are
 *           removed unseen: never readable, never stored back.
 *
 * Lock invariants: L2 locks are held only between LOOKUP and the phase-1
 * or phase-2 unlock, which every path reaches; L1 write locks only between
 * RESERVE and COMMIT / DROP / ABORT; the caller gets read locks on exactly
 * [0, hits). A tier whose send fails (stopped) counts as answering "none".
 */
#include <string.h>

#include "actors/log.h"
#include "l2/prefetch_internal.h"

/* Sends one UNLOCK per tier for the keys chosen by keep(i) among those the
 * tier locked. */
static void unlock_where(pc *c, pf_req *q, uint32_t tier, size_t from) {
  size_t k = 0;
  for (size_t i = 0; i < q->n; i++) {
    if (!kva_bit_get(q->found[tier], i)) continue;
    bool planned = i < from && q->plan[i] == (int8_t)tier;
    if (!planned) q->lkeys[k++] = q->keys[i];
  }
  if (k && kva_send(c->tiers->t[tier].actor, KVA_L2_UNLOCK, q->lkeys,
                    (uint32_t)(k * sizeof(kva_key)), c->self, 0) != KVA_OK)
    LOG_ERROR("prefetch: tier %s is gone; %zu keys stay locked there", c->tiers->t[tier].name, k);
}

/* Phase 1: keys locked by a lookup but not loaded from that tier. */
static void unlock_unplanned(pc *c, pf_req *q) {
  for (uint32_t t = 0; t < c->tiers->n; t++)
    if (q->asked >> t & 1) unlock_where(c, q, t, q->q);
}

/* Phase 2: every key of the plan (its locks were kept for the load). */
static void unlock_planned(pc *c, pf_req *q) {
  for (uint32_t t = 0; t < c->tiers->n; t++)
    if (q->asked >> t & 1) unlock_where(c, q, t, 0);
}

void pf_start(pc *c, pf_req *q) {
  q->state = PF_LOOKUP;
  q->asked = 0;
  q->waiting = 0;
  for (uint32_t t = 0; t < c->tiers->n; t++) {
    memset(q->found[t], 0, (q->n + 7) / 8);
    if (!l2_usable(c->tiers, t)) continue;
    q->look[t] = (kva_l2_req){.keys = q->keys, .n = q->n, .bits = q->found[t]};
    kva_l2_req *r = &q->look[t];
    if (kva_send(c->tiers->t[t].actor, KVA_L2_LOOKUP_AND_LOCK, &r, sizeof(r), c->self,
                 pf_tag(c, q)) != KVA_OK)
      continue;
    q->asked |= 1u << t;
    q->waiting++;
  }
  if (q->waiting == 0) pf_finish(c, q);
}

/* Every lookup is in: plan, trim to the prefix, reserve the buffers. */
static void plan(pc *c, pf_req *q) {
  const uint8_t *found[L2_MAX_TIERS];
  for (uint32_t t = 0; t < c->tiers->n; t++) found[t] = q->found[t];
  c->o.policy.select_load_plan(c->o.policy.arg, q->n, c->tiers->n, found, q->plan);
  q->p = 0;
  while (q->p < q->n) { /* a plan entry the tier did not lock is no plan */
    int8_t t = q->plan[q->p];
    if (t < 0 || (uint32_t)t >= c->tiers->n || !kva_bit_get(q->found[t], q->p)) break;
    q->p++;
  }
  for (size_t i = q->p; i < q->n; i++) q->plan[i] = -1;
  if (q->p == 0) {
    q->q = 0;
    unlock_unplanned(c, q);
    pf_finish(c, q);
    return;
  }
  q->state = PF_RESERVE;
  q->l1 = (l1_req){.keys = q->keys,
                   .n = q->p,
                   .layout = q->user->layout,
                   .mode = KVA_WRITE_NEW,
                   .temporary = !c->o.writeback,
                   .bufs = q->bufs,
                   .status = q->status};
  pf_send_l1(c, q, L1_RESERVE_WRITE);
}

static void start_loads(pc *c, pf_req *q) {
  q->state = PF_LOAD;
  q->waiting = 0;
  memset(q->loaded, 0, q->q);
  size_t off = 0;
  for (uint32_t t = 0; t < c->tiers->n; t++) {
    size_t first = off;
    for (size_t i = 0; i < q->q; i++) {
      if (q->plan[i] != (int8_t)t) continue;
      q->lkeys[off] = q->keys[i];
      q->lbufs[off] = q->bufs[i];
      q->lidx[off] = (uint32_t)i;
      off++;
    }
    if (off == first) continue;
    memset(q->lbits[t], 0, (off - first + 7) / 8);
    q->load[t] = (kva_l2_req){.keys = q->lkeys + first,
                              .n = off - first,
                              .layout = q->user->layout,
                              .bufs = q->lbufs + first,
                              .bits = q->lbits[t]};
    kva_l2_req *r = &q->load[t];
    if (kva_send(c->tiers->t[t].actor, KVA_L2_LOAD, &r, sizeof(r), c->self, pf_tag(c, q)) == KVA_OK)
      q->waiting++;
  }
  if (q->waiting == 0) pf_on_l2(c, q, NULL);
}

/* Reserved: re-trim to the reserved prefix, phase-1 unlock, drop the
 * buffers past the gap, then load. */
static void on_reserved(pc *c, pf_req *q) {
  q->q = 0;
  if (q->l1.result >= 0)
    while (q->q < q->p && q->status[q->q] == KVA_OK) q->q++;
  unlock_unplanned(c, q);
  size_t k = 0;
  if (q->l1.result >= 0)
    for (size_t i = q->q; i < q->p; i++)
      if (q->status[i] == KVA_OK) q->lkeys[k++] = q->keys[i];
  if (k) {
    q->state = PF_DROP;
    q->l1 = (l1_req){.keys = q->lkeys, .n = k, .status = q->status};
    pf_send_l1(c, q, L1_ABORT_WRITE);
    return;
  }
  if (q->q == 0)
    pf_finish(c, q);
  else
    start_loads(c, q);
}

/* Removes the buffers of [r, q), then answers. */
static void abort_rest(pc *c, pf_req *q) {
  if (q->r >= q->q) {
    pf_finish(c, q);
    return;
  }
  q->state = PF_ABORT;
  q->l1 = (l1_req){.keys = q->keys + q->r, .n = q->q - q->r, .status = q->status};
  pf_send_l1(c, q, L1_ABORT_WRITE);
}

/* Every load is in: phase-2 unlock, then commit the loaded prefix. */
static void on_loaded(pc *c, pf_req *q) {
  unlock_planned(c, q);
  q->r = 0;
  while (q->r < q->q && q->loaded[q->r]) q->r++;
  size_t nloaded = 0;
  for (size_t i = 0; i < q->q; i++) nloaded += q->loaded[i];
  l2_count(&c->tiers->loaded_keys, nloaded);
  l2_count(&c->tiers->load_failures, q->q - nloaded);
  if (q->r == 0) {
    abort_rest(c, q);
    return;
  }
  q->state = PF_COMMIT;
  q->l1 = (l1_req){.keys = q->keys, .n = q->r, .readers = q->user->readers, .status = q->status};
  pf_send_l1(c, q, L1_FINISH_WRITE_AND_RESERVE_READ);
}

/* Committed: the caller's prefix ends at the first commit failure; read
 * locks taken past it are released. */
static void on_committed(pc *c, pf_req *q) {
  q->hits = 0;
  if (q->l1.result >= 0)
    while (q->hits < q->r && q->status[q->hits] == KVA_OK) q->hits++;
  size_t k = 0;
  if (q->l1.result >= 0)
    for (size_t i = q->hits; i < q->r; i++)
      if (q->status[i] == KVA_OK) q->lkeys[k++] = q->keys[i];
  if (k) {
    q->state = PF_UNREAD;
    q->l1 = (l1_req){.keys = q->lkeys, .n = k, .readers = q->user->readers, .status = q->status};
    pf_send_l1(c, q, L1_FINISH_READ);
    return;
  }
  abort_rest(c, q);
}

void pf_on_l2(pc *c, pf_req *q, const kva_l2_req *r) {
  uint32_t t = 0;
  if (r) {
    const kva_l2_req *base = q->state == PF_LOOKUP ? q->look : q->load;
    t = (uint32_t)(r - base);
    l2_health(c->tiers, t, r->result);
    if (q->state == PF_LOAD)
      for (size_t j = 0; j < r->n; j++)
        if (kva_bit_get(r->bits, j)) q->loaded[q->lidx[(size_t)(r->keys - q->lkeys) + j]] = 1;
    q->waiting--;
  }
  if (q->waiting) return;
  if (q->state == PF_LOOKUP)
    plan(c, q);
  else
    on_loaded(c, q);
}

void pf_on_l1(pc *c, pf_req *q) {
  switch (q->state) {
  case PF_RESERVE:
    on_reserved(c, q);
    break;
  case PF_DROP:
    if (q->q == 0)
      pf_finish(c, q);
    else
      start_loads(c, q);
    break;
  case PF_COMMIT:
    on_committed(c, q);
    break;
  case PF_UNREAD:
    abort_rest(c, q);
    break;
  case PF_ABORT:
    pf_finish(c, q);
    break;
  default:
    LOG_WARN("prefetch: unexpected L1 reply in state %u", q->state);
  }
}
