/*
 * prefetch_request.c — one prefetch request through the state machine of
 * LMCache's PrefetchController, for the keys that missed in L1 (keys[0, n)
 * here):
 *
 *  LOOKUP   lookup_and_lock on every usable tier; wait for all.
 *  plan     the prefetch policy picks at most one tier per key; the plan is
 *           trimmed to its contiguous prefix [0, nplanned) (prefix-only
 *           loading).
 *  RESERVE  L1 reserve_write(NEW, temporary unless write-back) of
 *           [0, nplanned).
 *  HOLD     keys whose reservation says KVA_KEY_NOT_WRITABLE are in L1
 *           already (an L1 hit past the L1 prefix's gap, another
 *           prefetch's object): read-locked where they are (1 +
 *           extra_readers) instead of ending the prefix there.
 *           The plan is re-trimmed to the reserved or held prefix
 *           [0, nreserved); held keys are not loaded from any tier.
 *           Phase-1 unlock: every L2 lock not in the final plan.
 *  DROP     buffers reserved past the reservation gap are removed.
 *  LOAD     one load per tier into the reserved buffers; wait for all.
 *           A key marked absent from its tier (l2/absent.h: its newest
 *           version did not reach it) counts as not loaded.
 *           Phase-2 unlock: every key of the final plan, loaded or not.
 *  COMMIT   finish_write_and_reserve_read of the loaded keys of the
 *           loaded-or-held prefix [0, nfilled): write lock -> 1 +
 *           extra_readers read locks, atomically.
 *  UNREAD   read locks past the caller's prefix [0, hits) are released:
 *           held keys past a gap, committed keys past a commit failure
 *           (an object force-deleted under us).
 *  ABORT    buffers of [nfilled, nreserved) (failed loads, loads past the
 *           gap) and of failed commits are removed unseen: never
 *           readable, never stored back.
 *
 * Lock invariants (docs/invariants.md I-PC-2 to I-PC-4): each L2 lock a
 * lookup took is released exactly once, by the phase-1 or the phase-2
 * unlock, which every path reaches (lock counts stack across holders, so a
 * second UNLOCK would release another holder's lock); L1 write locks are
 * held only between RESERVE and COMMIT / DROP / ABORT; the caller gets read
 * locks on exactly [0, hits). A tier whose send fails (stopped) counts as
 * answering "none".
 */
#include <string.h>

#include "actors/log.h"
#include "l2/load_plan.h"
#include "l2/prefetch_internal.h"

/* Puts key i (and the id of its L1 object) at position j of the gathered
 * arrays that L1 requests on a subset of the keys use. */
static void gather(prefetch_req *req, size_t i, size_t j) {
  req->lkeys[j] = req->keys[i];
  req->lids[j] = req->ids[i];
}

/* Sends the tier one UNLOCK for the keys it locked in the lookup that are
 * (planned) or are not (!planned) loaded from it by the final plan
 * [0, nreserved).
 * Phase 1 sends one half and phase 2 the other, so each lock is released
 * exactly once (docs/invariants.md I-PC-2): tier locks stack across
 * holders, and a key unlocked twice would lose another holder's lock. */
static void unlock_where(prefetch_controller *c, prefetch_req *req, uint32_t tier, bool planned) {
  size_t k = 0;
  for (size_t i = 0; i < req->n; i++) {
    if (!kva_bit_get(req->found[tier], i)) continue;
    bool in_plan = i < req->nreserved && req->plan[i] == (int8_t)tier;
    if (in_plan == planned) req->lkeys[k++] = req->keys[i];
  }
  if (k && kva_send(c->tiers->t[tier].actor, KVA_L2_UNLOCK, req->lkeys,
                    (uint32_t)(k * sizeof(kva_key)), c->self, 0) != KVA_OK)
    LOG_ERROR("prefetch: tier %s is gone; %zu keys stay locked there", c->tiers->t[tier].name, k);
}

/* Phase 1: keys locked by a lookup but not loaded from that tier. */
static void unlock_unplanned(prefetch_controller *c, prefetch_req *req) {
  for (uint32_t t = 0; t < c->tiers->n; t++)
    if (req->asked >> t & 1) unlock_where(c, req, t, false);
}

/* Phase 2: every key of the plan (its locks were kept for the load). */
static void unlock_planned(prefetch_controller *c, prefetch_req *req) {
  for (uint32_t t = 0; t < c->tiers->n; t++)
    if (req->asked >> t & 1) unlock_where(c, req, t, true);
}

/* load_or_recompute: a tier whose lookup cannot pay for itself (too slow
 * for any chunk, or a round trip longer than all it could save) is not
 * asked (load_plan_worth_asking). A prefetch the caller planned
 * (KVA_PREFETCH_AS_PLANNED) is not judged again: every tier is asked. */
static int worth_asking(prefetch_controller *c, prefetch_req *req, uint32_t t) {
  if (!c->o.plan_loads || req->user->as_planned) return 1;
  load_plan_tier lt;
  l2_meter_plan(&c->tiers->t[t].meter, pf_now(c), &lt);
  return load_plan_worth_asking(&lt, (double)req->key_bytes, req->chunk_s, req->n, c->o.margin, 0);
}

void pf_start(prefetch_controller *c, prefetch_req *req) {
  req->state = PF_LOOKUP;
  req->asked = 0;
  req->waiting = 0;
  req->sent_ns = pf_now(c);
  req->key_bytes = kva_layout_bytes(req->user->layout);
  req->chunk_s = c->o.plan_loads && !req->user->as_planned
                     ? prefill_chunk_s(c->o.prefill, req->keys[0].model)
                     : 0;
  for (uint32_t t = 0; t < c->tiers->n; t++) {
    memset(req->found[t], 0, (req->n + 7) / 8);
    if (!l2_usable(c->tiers, t)) continue;
    if (!worth_asking(c, req, t)) {
      l2_count(&c->tiers->t[t].lookups_skipped, 1);
      continue;
    }
    req->look[t] = (kva_l2_req){.keys = req->keys,
                                .n = req->n,
                                .bits = req->found[t],
                                .prev = req->base ? req->keys - 1 : NULL};
    kva_l2_req *r = &req->look[t];
    if (kva_send(c->tiers->t[t].actor, KVA_L2_LOOKUP_AND_LOCK, &r, sizeof(r), c->self,
                 pf_tag(c, req)) != KVA_OK)
      continue;
    req->asked |= 1u << t;
    req->waiting++;
  }
  if (req->waiting == 0) pf_finish(c, req);
}

/* load_or_recompute: the length of the planned prefix [0, nplanned) worth
 * loading, given the caller's L1 hits before it (req->base), each tier's
 * meter and the model's prefill rate (load_plan.h). One round trip is
 * left to pay: the load. */
static size_t worth_loading(prefetch_controller *c, prefetch_req *req) {
  load_plan_tier views[L2_MAX_TIERS];
  l2_plan_views(c->tiers, pf_now(c), views);
  load_plan_in in = {.n = req->base + req->nplanned,
                     .h = req->base,
                     .tier = req->plan,
                     .ntiers = c->tiers->n,
                     .tiers = views,
                     .chunk_bytes = (double)req->key_bytes,
                     .chunk_compute_s = req->chunk_s,
                     .layers = 1,
                     .round_trips = 1,
                     .margin = c->o.margin};
  load_plan_out out;
  if (load_plan(&in, &out) != KVA_OK) return req->nplanned; /* cannot judge: load as planned */
  pf_count_skipped(c, out.skipped);
  return out.k - req->base;
}

/* Every lookup is in: plan, trim to the prefix, reserve the buffers. */
static void plan(prefetch_controller *c, prefetch_req *req) {
  const uint8_t *found[L2_MAX_TIERS];
  for (uint32_t t = 0; t < c->tiers->n; t++) found[t] = req->found[t];
  /* an entry the policy leaves unset is "not loaded": the array is reused
   * across requests (or fresh from malloc), so it starts all -1 */
  memset(req->plan, -1, req->n);
  c->o.policy.select_load_plan(c->o.policy.arg, req->n, c->tiers->n, found, req->plan);
  req->nplanned = 0;
  while (req->nplanned < req->n) { /* a plan entry the tier did not lock is no plan */
    int8_t t = req->plan[req->nplanned];
    if (t < 0 || (uint32_t)t >= c->tiers->n || !kva_bit_get(req->found[t], req->nplanned)) break;
    req->nplanned++;
  }
  if (c->o.plan_loads && !req->user->as_planned && req->nplanned)
    req->nplanned = worth_loading(c, req);
  for (size_t i = req->nplanned; i < req->n; i++) req->plan[i] = -1;
  if (req->nplanned == 0) {
    req->nreserved = 0;
    unlock_unplanned(c, req);
    pf_finish(c, req);
    return;
  }
  req->state = PF_RESERVE;
  req->l1 = (l1_req){.keys = req->keys,
                     .n = req->nplanned,
                     .layout = req->user->layout,
                     .mode = KVA_WRITE_NEW,
                     .temporary = !c->o.writeback,
                     .bufs = req->bufs,
                     .ids = req->ids,
                     .status = req->status};
  pf_send_l1(c, req, L1_RESERVE_WRITE);
}

static void start_loads(prefetch_controller *c, prefetch_req *req) {
  req->state = PF_LOAD;
  req->waiting = 0;
  memset(req->loaded, 0, req->nreserved);
  size_t off = 0, key_bytes = req->key_bytes;
  uint64_t now = pf_now(c);
  for (uint32_t t = 0; t < c->tiers->n; t++) {
    size_t first = off;
    for (size_t i = 0; i < req->nreserved; i++) {
      if (req->plan[i] != (int8_t)t) continue;
      req->lkeys[off] = req->keys[i];
      req->lbufs[off] = req->bufs[i];
      req->lidx[off] = (uint32_t)i;
      off++;
    }
    if (off == first) continue;
    memset(req->lbits[t], 0, (off - first + 7) / 8);
    req->load[t] = (kva_l2_req){.keys = req->lkeys + first,
                                .n = off - first,
                                .layout = req->user->layout,
                                .bufs = req->lbufs + first,
                                .bits = req->lbits[t]};
    kva_l2_req *r = &req->load[t];
    if (kva_send(c->tiers->t[t].actor, KVA_L2_LOAD, &r, sizeof(r), c->self, pf_tag(c, req)) ==
        KVA_OK) {
      l2_meter_sent(&c->tiers->t[t].meter, 1, r->n * key_bytes, now);
      req->waiting++;
    }
  }
  if (req->waiting == 0) pf_on_l2(c, req, NULL);
}

/* Every planned key is settled (PF_SRC_*): re-trim to [0, nreserved),
 * phase-1 unlock (held keys are loaded from no tier), drop the buffers past
 * the gap, then load. Keys held past the gap keep their read locks until
 * release_rest. */
static void trim_settled(prefetch_controller *c, prefetch_req *req) {
  req->nreserved = 0;
  while (req->nreserved < req->nplanned && req->src[req->nreserved] != PF_SRC_NONE)
    req->nreserved++;
  for (size_t i = 0; i < req->nreserved; i++)
    if (req->src[i] == PF_SRC_L1) req->plan[i] = -1;
  unlock_unplanned(c, req);
  size_t k = 0;
  for (size_t i = req->nreserved; i < req->nplanned; i++)
    if (req->src[i] == PF_SRC_BUF) gather(req, i, k++);
  if (k) {
    req->state = PF_DROP;
    req->l1 = (l1_req){.keys = req->lkeys, .n = k, .ids = req->lids, .status = req->status};
    pf_send_l1(c, req, L1_ABORT_WRITE);
    return;
  }
  start_loads(c, req);
}

/* Reserved. A key L1 holds already (KVA_KEY_NOT_WRITABLE: an L1 hit past
 * the L1 prefix's gap) does not end the prefix: no tier can load it while
 * L1 keeps it, so ending there would cut every prefetch of it at that key.
 * Up to the first other failure, such keys are read-locked in place (HOLD). */
static void on_reserved(prefetch_controller *c, prefetch_req *req) {
  bool ok = req->l1.result >= 0, open = ok;
  size_t k = 0;
  for (size_t i = 0; i < req->nplanned; i++) {
    int st = ok ? req->status[i] : KVA_EIO;
    req->src[i] = st == KVA_OK ? PF_SRC_BUF : PF_SRC_NONE;
    if (open && st == KVA_KEY_NOT_WRITABLE) {
      req->lkeys[k] = req->keys[i];
      req->lidx[k++] = (uint32_t)i;
    } else if (st != KVA_OK) {
      open = false;
    }
  }
  if (!k) {
    trim_settled(c, req);
    return;
  }
  req->state = PF_HOLD;
  req->l1 = (l1_req){.keys = req->lkeys,
                     .n = k,
                     .readers = req->user->readers,
                     .ids = req->lids,
                     .status = req->status};
  pf_send_l1(c, req, L1_RESERVE_READ);
}

static void on_held(prefetch_controller *c, prefetch_req *req) {
  for (size_t j = 0; req->l1.result >= 0 && j < req->l1.n; j++)
    if (req->status[j] == KVA_OK) {
      req->src[req->lidx[j]] = PF_SRC_L1;
      req->ids[req->lidx[j]] = req->lids[j];
    }
  trim_settled(c, req);
}

/* Removes the buffers still write-locked: those of [nfilled, nreserved),
 * and those of [0, nfilled) whose commit failed (a force-deleted object: L1
 * removes it when its writer lets go), then answers. */
static void abort_rest(prefetch_controller *c, prefetch_req *req) {
  size_t k = 0;
  for (size_t i = 0; i < req->nreserved; i++)
    if (req->src[i] == PF_SRC_BUF && (i >= req->nfilled || !req->loaded[i])) gather(req, i, k++);
  if (!k) {
    pf_finish(c, req);
    return;
  }
  req->state = PF_ABORT;
  req->l1 = (l1_req){.keys = req->lkeys, .n = k, .ids = req->lids, .status = req->status};
  pf_send_l1(c, req, L1_ABORT_WRITE);
}

/* Read locks the caller does not get: keys committed in [hits, nfilled) and
 * keys held anywhere past hits. Then the buffers. */
static void release_rest(prefetch_controller *c, prefetch_req *req) {
  size_t k = 0;
  for (size_t i = req->hits; i < req->nplanned; i++)
    if ((i < req->nfilled && req->loaded[i]) || req->src[i] == PF_SRC_L1) gather(req, i, k++);
  if (!k) {
    abort_rest(c, req);
    return;
  }
  req->state = PF_UNREAD;
  req->l1 = (l1_req){.keys = req->lkeys,
                     .n = k,
                     .readers = req->user->readers,
                     .ids = req->lids,
                     .status = req->status};
  pf_send_l1(c, req, L1_FINISH_READ);
}

/* Every load is in: phase-2 unlock, then commit the loaded keys of the
 * loaded-or-held prefix [0, nfilled). */
static void on_loaded(prefetch_controller *c, prefetch_req *req) {
  unlock_planned(c, req);
  size_t nbuf = 0, nloaded = 0, k = 0, per_tier[L2_MAX_TIERS] = {0};
  for (size_t i = 0; i < req->nreserved; i++) {
    if (req->src[i] != PF_SRC_BUF) continue;
    nbuf++;
    nloaded += req->loaded[i];
    if (req->loaded[i]) per_tier[req->plan[i]]++;
  }
  size_t key_bytes = req->key_bytes;
  for (uint32_t t = 0; t < c->tiers->n; t++) {
    if (!per_tier[t]) continue;
    l2_count(&c->tiers->t[t].loaded_keys, per_tier[t]);
    l2_count(&c->tiers->t[t].loaded_bytes, per_tier[t] * key_bytes);
  }
  l2_count(&c->tiers->loaded_keys, nloaded);
  l2_count(&c->tiers->load_failures, nbuf - nloaded);
  req->nfilled = 0;
  while (req->nfilled < req->nreserved &&
         (req->loaded[req->nfilled] || req->src[req->nfilled] == PF_SRC_L1))
    req->nfilled++;
  for (size_t i = 0; i < req->nfilled; i++)
    if (req->src[i] == PF_SRC_BUF) gather(req, i, k++);
  if (!k) {
    req->hits = req->nfilled;
    release_rest(c, req);
    return;
  }
  req->state = PF_COMMIT;
  req->l1 = (l1_req){.keys = req->lkeys,
                     .n = k,
                     .readers = req->user->readers,
                     .ids = req->lids,
                     .status = req->status};
  pf_send_l1(c, req, L1_FINISH_WRITE_AND_RESERVE_READ);
}

/* Committed: a key whose commit failed is lost (force-deleted under us);
 * the caller's prefix ends at the first key neither committed nor held. */
static void on_committed(prefetch_controller *c, prefetch_req *req) {
  size_t j = 0;
  for (size_t i = 0; i < req->nfilled; i++)
    if (req->src[i] == PF_SRC_BUF && (req->l1.result < 0 || req->status[j++] != KVA_OK))
      req->loaded[i] = 0;
  req->hits = 0;
  while (req->hits < req->nfilled && (req->loaded[req->hits] || req->src[req->hits] == PF_SRC_L1))
    req->hits++;
  release_rest(c, req);
}

void pf_on_l2(prefetch_controller *c, prefetch_req *req, const kva_l2_req *r) {
  uint32_t t = 0;
  if (r) {
    const kva_l2_req *base = req->state == PF_LOOKUP ? req->look : req->load;
    t = (uint32_t)(r - base);
    l2_health(c->tiers, t, r->result);
    l2_meter *m = &c->tiers->t[t].meter;
    uint64_t now = pf_now(c);
    if (req->state == PF_LOOKUP) {
      if (r->result >= 0) l2_meter_lookup(m, now - req->sent_ns, now);
    } else {
      /* a key whose newest version did not reach the tier: the copy it
       * loaded is older, not loaded (absent.h). Filtered here, not at the
       * lookup, so that a key L1 holds past a gap still continues the
       * prefix (it is obtained from L1, never loaded). Its tier lock goes
       * back with the others' (phase-2 unlock). */
      l2_absent_filter(&c->tiers->t[t].absent, r->keys, r->n, r->bits, NULL);
      size_t moved = 0;
      for (size_t j = 0; j < r->n; j++)
        if (kva_bit_get(r->bits, j)) {
          req->loaded[req->lidx[(size_t)(r->keys - req->lkeys) + j]] = 1;
          moved++;
        }
      l2_meter_done(m, 1, r->n * req->key_bytes, moved * req->key_bytes, now);
    }
    req->waiting--;
  }
  if (req->waiting) return;
  if (req->state == PF_LOOKUP)
    plan(c, req);
  else
    on_loaded(c, req);
}

void pf_on_l1(prefetch_controller *c, prefetch_req *req) {
  switch (req->state) {
  case PF_RESERVE:
    on_reserved(c, req);
    break;
  case PF_HOLD:
    on_held(c, req);
    break;
  case PF_DROP:
    start_loads(c, req);
    break;
  case PF_COMMIT:
    on_committed(c, req);
    break;
  case PF_UNREAD:
    abort_rest(c, req);
    break;
  case PF_ABORT:
    pf_finish(c, req);
    break;
  default:
    LOG_WARN("prefetch: unexpected L1 reply in state %u", req->state);
  }
}
