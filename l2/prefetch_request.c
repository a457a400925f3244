/*
 * prefetch_request.c — one prefetch request through the state machine of
 * LMCache's PrefetchController, for the keys that missed in L1 (keys[0, n)
 * here):
 *
 *  LOOKUP   lookup_and_lock on every usable tier; wait for all.
 *  plan     the prefetch policy picks at most one tier per key; the plan is
 *           trimmed to its contiguous prefix [0, p) (prefix-only loading).
 *  RESERVE  L1 reserve_write(NEW, temporary unless write-back) of [0, p).
 *  HOLD     keys whose reservation says KVA_KEY_NOT_WRITABLE are in L1
 *           already (an L1 hit past the L1 prefix's gap, another
 *           prefetch's object): read-locked where they are (1 +
 *           extra_readers) instead of ending the prefix there.
 *           The plan is re-trimmed to the reserved or held prefix [0, q);
 *           held keys are not loaded from any tier.
 *           Phase-1 unlock: every L2 lock not in the final plan.
 *  DROP     buffers reserved past the reservation gap are removed.
 *  LOAD     one load per tier into the reserved buffers; wait for all.
 *           Phase-2 unlock: every key of the final plan, loaded or not.
 *  COMMIT   finish_write_and_reserve_read of the loaded keys of the
 *           loaded-or-held prefix [0, r): write lock -> 1 + extra_readers
 *           read locks, atomically.
 *  UNREAD   read locks past the caller's prefix [0, hits) are released:
 *           held keys past a gap, committed keys past a commit failure
 *           (an object force-deleted under us).
 *  ABORT    buffers of [r, q) (failed loads, loads past the gap) and of
 *           failed commits are
 *           removed unseen: never readable, never stored back.
 *
 * Lock invariants: each L2 lock a lookup took is released exactly once, by
 * the phase-1 or the phase-2 unlock, which every path reaches (lock counts
 * stack across holders, so a second UNLOCK would release another holder's
 * lock); L1 write locks are held only between RESERVE and COMMIT / DROP /
 * ABORT; the caller gets read locks on exactly [0, hits). A tier whose
 * send fails (stopped) counts as answering "none".
 */
#include <string.h>

#include "actors/log.h"
#include "l2/prefetch_internal.h"

/* Puts key i (and the id of its L1 object) at position j of the gathered
 * arrays that L1 requests on a subset of the keys use. */
static void gather(pf_req *q, size_t i, size_t j) {
  q->lkeys[j] = q->keys[i];
  q->lids[j] = q->ids[i];
}

/* Sends the tier one UNLOCK for the keys it locked in the lookup that are
 * (planned) or are not (!planned) loaded from it by the final plan [0, q).
 * Phase 1 sends one half and phase 2 the other, so each lock is released
 * exactly once (docs/invariants.md I-PC-2): tier locks stack across
 * holders, and a key unlocked twice would lose another holder's lock. */
static void unlock_where(pc *c, pf_req *q, uint32_t tier, bool planned) {
  size_t k = 0;
  for (size_t i = 0; i < q->n; i++) {
    if (!kva_bit_get(q->found[tier], i)) continue;
    bool in_plan = i < q->q && q->plan[i] == (int8_t)tier;
    if (in_plan == planned) q->lkeys[k++] = q->keys[i];
  }
  if (k && kva_send(c->tiers->t[tier].actor, KVA_L2_UNLOCK, q->lkeys,
                    (uint32_t)(k * sizeof(kva_key)), c->self, 0) != KVA_OK)
    LOG_ERROR("prefetch: tier %s is gone; %zu keys stay locked there", c->tiers->t[tier].name, k);
}

/* Phase 1: keys locked by a lookup but not loaded from that tier. */
static void unlock_unplanned(pc *c, pf_req *q) {
  for (uint32_t t = 0; t < c->tiers->n; t++)
    if (q->asked >> t & 1) unlock_where(c, q, t, false);
}

/* Phase 2: every key of the plan (its locks were kept for the load). */
static void unlock_planned(pc *c, pf_req *q) {
  for (uint32_t t = 0; t < c->tiers->n; t++)
    if (q->asked >> t & 1) unlock_where(c, q, t, true);
}

void pf_start(pc *c, pf_req *q) {
  q->state = PF_LOOKUP;
  q->asked = 0;
  q->waiting = 0;
  for (uint32_t t = 0; t < c->tiers->n; t++) {
    memset(q->found[t], 0, (q->n + 7) / 8);
    if (!l2_usable(c->tiers, t)) continue;
    q->look[t] = (kva_l2_req){
        .keys = q->keys, .n = q->n, .bits = q->found[t], .prev = q->base ? q->keys - 1 : NULL};
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
  /* an entry the policy leaves unset is "not loaded": the array is reused
   * across requests (or fresh from malloc), so it starts all -1 */
  memset(q->plan, -1, q->n);
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
                   .ids = q->ids,
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

/* Every planned key is settled (PF_SRC_*): re-trim to [0, q), phase-1
 * unlock (held keys are loaded from no tier), drop the buffers past the
 * gap, then load. Keys held past the gap keep their read locks until
 * release_rest. */
static void trim_settled(pc *c, pf_req *q) {
  q->q = 0;
  while (q->q < q->p && q->src[q->q] != PF_SRC_NONE) q->q++;
  for (size_t i = 0; i < q->q; i++)
    if (q->src[i] == PF_SRC_L1) q->plan[i] = -1;
  unlock_unplanned(c, q);
  size_t k = 0;
  for (size_t i = q->q; i < q->p; i++)
    if (q->src[i] == PF_SRC_BUF) gather(q, i, k++);
  if (k) {
    q->state = PF_DROP;
    q->l1 = (l1_req){.keys = q->lkeys, .n = k, .ids = q->lids, .status = q->status};
    pf_send_l1(c, q, L1_ABORT_WRITE);
    return;
  }
  start_loads(c, q);
}

/* Reserved. A key L1 holds already (KVA_KEY_NOT_WRITABLE: an L1 hit past
 * the L1 prefix's gap) does not end the prefix: no tier can load it while
 * L1 keeps it, so ending there would cut every prefetch of it at that key.
 * Up to the first other failure, such keys are read-locked in place (HOLD). */
static void on_reserved(pc *c, pf_req *q) {
  bool ok = q->l1.result >= 0, open = ok;
  size_t k = 0;
  for (size_t i = 0; i < q->p; i++) {
    int st = ok ? q->status[i] : KVA_EIO;
    q->src[i] = st == KVA_OK ? PF_SRC_BUF : PF_SRC_NONE;
    if (open && st == KVA_KEY_NOT_WRITABLE) {
      q->lkeys[k] = q->keys[i];
      q->lidx[k++] = (uint32_t)i;
    } else if (st != KVA_OK) {
      open = false;
    }
  }
  if (!k) {
    trim_settled(c, q);
    return;
  }
  q->state = PF_HOLD;
  q->l1 = (l1_req){
      .keys = q->lkeys, .n = k, .readers = q->user->readers, .ids = q->lids, .status = q->status};
  pf_send_l1(c, q, L1_RESERVE_READ);
}

static void on_held(pc *c, pf_req *q) {
  for (size_t j = 0; q->l1.result >= 0 && j < q->l1.n; j++)
    if (q->status[j] == KVA_OK) {
      q->src[q->lidx[j]] = PF_SRC_L1;
      q->ids[q->lidx[j]] = q->lids[j];
    }
  trim_settled(c, q);
}

/* Removes the buffers still write-locked: those of [r, q), and those of
 * [0, r) whose commit failed (a force-deleted object: L1 removes it when
 * its writer lets go), then answers. */
static void abort_rest(pc *c, pf_req *q) {
  size_t k = 0;
  for (size_t i = 0; i < q->q; i++)
    if (q->src[i] == PF_SRC_BUF && (i >= q->r || !q->loaded[i])) gather(q, i, k++);
  if (!k) {
    pf_finish(c, q);
    return;
  }
  q->state = PF_ABORT;
  q->l1 = (l1_req){.keys = q->lkeys, .n = k, .ids = q->lids, .status = q->status};
  pf_send_l1(c, q, L1_ABORT_WRITE);
}

/* Read locks the caller does not get: keys committed in [hits, r) and keys
 * held anywhere past hits. Then the buffers. */
static void release_rest(pc *c, pf_req *q) {
  size_t k = 0;
  for (size_t i = q->hits; i < q->p; i++)
    if ((i < q->r && q->loaded[i]) || q->src[i] == PF_SRC_L1) gather(q, i, k++);
  if (!k) {
    abort_rest(c, q);
    return;
  }
  q->state = PF_UNREAD;
  q->l1 = (l1_req){
      .keys = q->lkeys, .n = k, .readers = q->user->readers, .ids = q->lids, .status = q->status};
  pf_send_l1(c, q, L1_FINISH_READ);
}

/* Every load is in: phase-2 unlock, then commit the loaded keys of the
 * loaded-or-held prefix [0, r). */
static void on_loaded(pc *c, pf_req *q) {
  unlock_planned(c, q);
  size_t nbuf = 0, nloaded = 0, k = 0, per_tier[L2_MAX_TIERS] = {0};
  for (size_t i = 0; i < q->q; i++) {
    if (q->src[i] != PF_SRC_BUF) continue;
    nbuf++;
    nloaded += q->loaded[i];
    if (q->loaded[i]) per_tier[q->plan[i]]++;
  }
  size_t key_bytes = kva_layout_bytes(q->user->layout);
  for (uint32_t t = 0; t < c->tiers->n; t++) {
    if (!per_tier[t]) continue;
    l2_count(&c->tiers->t[t].loaded_keys, per_tier[t]);
    l2_count(&c->tiers->t[t].loaded_bytes, per_tier[t] * key_bytes);
  }
  l2_count(&c->tiers->loaded_keys, nloaded);
  l2_count(&c->tiers->load_failures, nbuf - nloaded);
  q->r = 0;
  while (q->r < q->q && (q->loaded[q->r] || q->src[q->r] == PF_SRC_L1)) q->r++;
  for (size_t i = 0; i < q->r; i++)
    if (q->src[i] == PF_SRC_BUF) gather(q, i, k++);
  if (!k) {
    q->hits = q->r;
    release_rest(c, q);
    return;
  }
  q->state = PF_COMMIT;
  q->l1 = (l1_req){
      .keys = q->lkeys, .n = k, .readers = q->user->readers, .ids = q->lids, .status = q->status};
  pf_send_l1(c, q, L1_FINISH_WRITE_AND_RESERVE_READ);
}

/* Committed: a key whose commit failed is lost (force-deleted under us);
 * the caller's prefix ends at the first key neither committed nor held. */
static void on_committed(pc *c, pf_req *q) {
  size_t j = 0;
  for (size_t i = 0; i < q->r; i++)
    if (q->src[i] == PF_SRC_BUF && (q->l1.result < 0 || q->status[j++] != KVA_OK)) q->loaded[i] = 0;
  q->hits = 0;
  while (q->hits < q->r && (q->loaded[q->hits] || q->src[q->hits] == PF_SRC_L1)) q->hits++;
  release_rest(c, q);
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
  case PF_HOLD:
    on_held(c, q);
    break;
  case PF_DROP:
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
