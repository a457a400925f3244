/*
 * store_controller.c — the store controller actor: every finished write of
 * an ordinary L1 object is copied to the L2 tiers its store policy names.
 *
 * One store task = the keys of one L1_WRITTEN message that share a layout
 * and a target tier. Its steps, one message each:
 *
 *   RESERVING  L1_RESERVE_READ    read-lock the objects (gone ones are skipped)
 *   STORING    KVA_L2_STORE       the tier copies the bytes
 *   RELEASING  L1_FINISH_READ     always, whatever the store's result; on
 *                                 success with the policy's L1 deletions,
 *                                 which L1 applies in the same step to
 *                                 objects left unlocked (no writer can
 *                                 slip in between release and delete)
 *
 * Objects are released by id (from the reservation), so a task releases
 * the very objects it locked even if one was force-deleted and its key
 * written again meanwhile.
 *
 * Lock invariant (docs/invariants.md I-SC-1): an object is read-locked
 * exactly while a task holds it between RESERVING and RELEASING; every task
 * reaches RELEASING (a failed or refused store included), and at shutdown
 * (SC_DRAIN) queued tasks are dropped before they lock anything while tasks
 * in flight run to the end, so no read lock outlives the controller.
 *
 * At most MAX_INFLIGHT tasks hold locks at once; the rest wait, unlocked
 * (evictable: an object evicted before its task starts is simply not
 * stored). Temporary objects and objects loaded by prefetches never reach
 * here: the L1 manager reports only finish_write of ordinary objects.
 *
 * Coalescing (docs/invariants.md I-SC-7, store_pending.h): per tier a key
 * has at most one store queued and one in flight. A write of a key whose
 * store is queued joins that store (it locks the newest object when it
 * starts); a write of a key whose store is in flight marks it, and the key
 * is queued once more when that store is over. So rewrites of a key behind
 * a slow tier cost one store and one read lock, not one per version, and
 * two versions of a key never race to one tier. The reservation names the
 * task's layout: an object of the key rewritten with another layout is
 * skipped (and stored by the store its own write queued), never sent under
 * the wrong layout.
 */
#include "l2/store_controller.h"

#include <stdlib.h>
#include <string.h>

#include "actors/log.h"
#include "common/array.h"
#include "common/key.h"
#include "l1/l1_manager.h"
#include "l2/store_pending.h"

#define MAX_INFLIGHT 64u

enum { RESERVING = 1, STORING, RELEASING };

typedef struct store_task {
  struct store_task *next; /* queue or free list */
  uint64_t seq;            /* of the L1_WRITTEN it came from */
  uint32_t tier, state, slot;
  int stored; /* the tier's result */
  kva_layout layout;
  kva_key *keys;
  uint64_t *ids;
  kva_buf *bufs;
  int *status;
  uint8_t *del;
  uint8_t *stored_bits; /* STORE: which keys the tier stored (KVA_EUNAVAIL) */
  size_t n, cap;
  l1_req l1;
  kva_l2_req l2;
} store_task;

typedef struct waiter {
  kva_actor *to;
  uint64_t tag, upto; /* replies once every task of seq <= upto is done */
} waiter;

/* The store controller actor's state. */
typedef struct store_controller {
  kva_actor *self, *l1;
  l2_tiers *tiers;
  kva_store_policy policy;
  uint64_t seq;
  store_task *head, *tail, *free_tasks; /* queued, recycled */
  store_task *slots[MAX_INFLIGHT];
  uint32_t gen[MAX_INFLIGHT], ninflight;
  waiter *waiters; /* grown on demand: every flush waits its turn */
  uint32_t nwaiters, capwaiters;
  kva_actor *drain_to;
  uint64_t drain_tag;
  bool draining;
  /* scratch for grouping one message */
  uint8_t *targets;
  kva_key *group;
  size_t scratch_cap;
  pending_index pending; /* keys with a store queued or in flight, per tier */
} store_controller;

/* ---- tasks -------------------------------------------------------------- */

static store_task *task_get(store_controller *c, size_t n) {
  store_task *t = c->free_tasks;
  if (t)
    c->free_tasks = t->next;
  else if (!(t = calloc(1, sizeof(*t))))
    return NULL;
  if (n > t->cap) {
    size_t cap = array_next_cap(t->cap, n, sizeof(kva_key)); /* the largest entries */
    bool ok = cap && ARRAY_RESIZE(t->keys, cap);
    ok = cap && ARRAY_RESIZE(t->bufs, cap) && ok;
    ok = cap && ARRAY_RESIZE(t->status, cap) && ok;
    ok = cap && ARRAY_RESIZE(t->del, cap) && ok;
    ok = cap && ARRAY_RESIZE(t->ids, cap) && ok;
    ok = cap && ARRAY_RESIZE(t->stored_bits, (cap + 7) / 8) && ok;
    if (!ok) {
      t->next = c->free_tasks;
      c->free_tasks = t;
      return NULL;
    }
    t->cap = cap;
  }
  t->n = 0;
  t->next = NULL;
  return t;
}

static void task_free(store_task *t) {
  free(t->keys);
  free(t->bufs);
  free(t->status);
  free(t->del);
  free(t->ids);
  free(t->stored_bits);
  free(t);
}

/* The runtime's clock, for the tier meters (meter.h). */
static uint64_t now_ns(const store_controller *c) {
  return kva_runtime_now_ns(kva_actor_runtime(c->self));
}

static uint64_t tag_of(const store_controller *c, const store_task *t) {
  return ((uint64_t)c->gen[t->slot] << 16) | t->slot;
}

/* The in-flight task a reply's tag names, or NULL for a stale tag. */
static store_task *task_of(store_controller *c, uint64_t tag) {
  uint32_t slot = (uint32_t)(tag & 0xffff);
  if (slot >= MAX_INFLIGHT || !c->slots[slot] || c->gen[slot] != (uint32_t)(tag >> 16)) return NULL;
  return c->slots[slot];
}

static void send_l1(store_controller *c, store_task *t, uint32_t type) {
  l1_req *r = &t->l1;
  if (kva_send(c->l1, type, &r, sizeof(r), c->self, tag_of(c, t)) != KVA_OK)
    LOG_ERROR("store: the L1 manager is gone; a store task is abandoned");
}

/* ---- accounting (kva_l2_tier_keys) --------------------------------------- */

/* keys[0, n) written toward tier did not reach it (but those whose bit is
 * set in skip, when given), for the reason `counter` counts (one of the
 * tier's k_* fields); all but failed stores are the storage's
 * l2_store_skipped too. Each is marked absent there: the tier's older
 * version of it, if any, is no longer served (absent.h). */
static void unstored(store_controller *c, uint32_t tier, uint64_t *counter, const kva_key *keys,
                     size_t n, const uint8_t *skip) {
  size_t k = n;
  for (size_t i = 0; skip && i < n; i++) k -= (size_t)kva_bit_get(skip, i);
  if (!k) return;
  l2_count(counter, k);
  if (counter != &c->tiers->t[tier].k_failed) l2_count(&c->tiers->store_skipped, k);
  l2_absent_mark_many(&c->tiers->t[tier].absent, keys, n, skip);
}

/* ---- flush and drain ---------------------------------------------------- */

static uint64_t oldest_open(const store_controller *c) {
  uint64_t min = UINT64_MAX;
  for (const store_task *t = c->head; t; t = t->next)
    if (t->seq < min) min = t->seq;
  for (uint32_t i = 0; i < MAX_INFLIGHT; i++)
    if (c->slots[i] && c->slots[i]->seq < min) min = c->slots[i]->seq;
  return min;
}

static void answer_waiters(store_controller *c) {
  if (c->nwaiters == 0) return;
  uint64_t open = oldest_open(c);
  uint32_t kept = 0;
  for (uint32_t i = 0; i < c->nwaiters; i++) {
    waiter *w = &c->waiters[i];
    if (w->upto < open || c->draining)
      kva_send(w->to, SC_DONE, NULL, 0, c->self, w->tag);
    else
      c->waiters[kept++] = *w;
  }
  c->nwaiters = kept;
}

static void check_drained(store_controller *c) {
  if (!c->draining || c->ninflight || !c->drain_to) return;
  kva_send(c->drain_to, SC_DONE, NULL, 0, c->self, c->drain_tag);
  c->drain_to = NULL;
}

/* ---- the pipeline ------------------------------------------------------- */

static void start_next(store_controller *c);
static void enqueue(store_controller *c, store_task *t);

/* A task of the keys of `done` (tier, layout) written again while their
 * store was in flight: one per layout, grown key by key; NULL on ENOMEM. */
static store_task *requeue_task(store_controller *c, store_task *rq, const store_task *done,
                                const kva_layout *layout, size_t room) {
  if (rq && layout_fingerprint(&rq->layout) == layout_fingerprint(layout)) return rq;
  if (rq) enqueue(c, rq);
  if (!(rq = task_get(c, room))) return NULL;
  rq->tier = done->tier;
  rq->layout = *layout;
  rq->seq = UINT64_MAX;
  return rq;
}

/* Keys of task t whose store is over (stored, failed, or not locked):
 * each leaves the index, or, written again meanwhile, is queued once more
 * (not while draining: nothing new is stored then). */
static void settle_keys(store_controller *c, store_task *t, const kva_key *keys, size_t n) {
  store_task *rq = NULL;
  for (size_t i = 0; i < n; i++) {
    store_pending *e = pending_find(&c->pending, &keys[i], t->tier);
    if (!e) continue;
    const kva_layout *layout = e->again_layout ? e->again_layout : &t->layout;
    store_task *next = e->again && !c->draining ? requeue_task(c, rq, t, layout, n) : NULL;
    if (!next) { /* a version written meanwhile is not stored: shutdown, or no memory */
      if (e->again) unstored(c, t->tier, &c->tiers->t[t->tier].k_dropped, &keys[i], 1, NULL);
      pending_drop(&c->pending, e);
      continue;
    }
    rq = next;
    rq->keys[rq->n++] = keys[i];
    if (e->again_seq < rq->seq) rq->seq = e->again_seq; /* flushes after it wait for it */
    e->layout_fp = layout_fingerprint(layout);
    free(e->again_layout);
    e->again_layout = NULL;
    e->queued = true;
    e->again = false;
  }
  if (rq) enqueue(c, rq);
}

static void task_done(store_controller *c, store_task *t) {
  settle_keys(c, t, t->keys, t->n);
  c->slots[t->slot] = NULL;
  c->gen[t->slot]++;
  c->ninflight--;
  t->next = c->free_tasks;
  c->free_tasks = t;
  start_next(c);
  answer_waiters(c);
  check_drained(c);
}

static void start_task(store_controller *c, store_task *t) {
  uint32_t slot = 0;
  while (c->slots[slot]) slot++; /* ninflight < MAX_INFLIGHT: one is free */
  c->slots[slot] = t;
  t->slot = slot;
  c->ninflight++;
  t->state = RESERVING;
  for (size_t i = 0; i < t->n; i++) { /* in flight: a write from now on marks it again */
    store_pending *e = pending_find(&c->pending, &t->keys[i], t->tier);
    if (e) e->queued = false;
  }
  /* the layout: an object of another (the key rewritten) is not locked */
  t->l1 = (l1_req){.keys = t->keys,
                   .n = t->n,
                   .layout = &t->layout,
                   .readers = 1,
                   .bufs = t->bufs,
                   .ids = t->ids,
                   .own = 1,
                   .status = t->status};
  send_l1(c, t, L1_RESERVE_READ);
}

static void start_next(store_controller *c) {
  while (c->head && c->ninflight < MAX_INFLIGHT) {
    store_task *t = c->head;
    c->head = t->next;
    if (!c->head) c->tail = NULL;
    start_task(c, t);
  }
}

/* Releases the read locks, by id; after a successful store, with the
 * policy's deletions applied by L1 in the same step. */
static void release(store_controller *c, store_task *t) {
  const uint8_t *del = NULL;
  if (t->stored == KVA_OK || t->stored == KVA_EUNAVAIL) {
    memset(t->del, 0, t->n);
    c->policy.select_l1_deletions(c->policy.arg, t->tier, t->keys, t->n, t->del);
    for (size_t i = 0; i < t->n; i++) {
      if (t->stored != KVA_OK && !kva_bit_get(t->stored_bits, i)) t->del[i] = 0; /* not stored */
      if (t->del[i]) del = t->del;
    }
  }
  t->state = RELEASING;
  t->l1 = (l1_req){.keys = t->keys,
                   .n = t->n,
                   .readers = 1,
                   .ids = t->ids,
                   .own = 1,
                   .del = del,
                   .status = t->status};
  send_l1(c, t, L1_FINISH_READ);
}

/* The objects are read-locked (those still there): hand them to the tier. */
static void on_reserved(store_controller *c, store_task *t) {
  size_t k = 0;
  l2_tier *tier = &c->tiers->t[t->tier];
  /* a request refused as a whole (out of memory in L1) locked nothing and
   * left status[] as it was: nothing to store, nothing to release */
  if (t->l1.result < 0) unstored(c, t->tier, &tier->k_dropped, t->keys, t->n, NULL);
  for (size_t i = 0; i < t->n; i++) {
    if (t->l1.result < 0 || t->status[i] != KVA_OK) {
      if (t->l1.result >= 0) unstored(c, t->tier, &tier->k_gone, &t->keys[i], 1, NULL);
      settle_keys(c, t, &t->keys[i], 1); /* not locked: its store is over */
      continue;
    }
    t->keys[k] = t->keys[i];
    t->bufs[k] = t->bufs[i];
    t->ids[k] = t->ids[i];
    k++;
  }
  t->n = k;
  if (k == 0) {
    task_done(c, t);
    return;
  }
  t->state = STORING;
  memset(t->stored_bits, 0, (t->n + 7) / 8);
  t->l2 = (kva_l2_req){
      .keys = t->keys, .n = t->n, .layout = &t->layout, .bufs = t->bufs, .bits = t->stored_bits};
  kva_l2_req *r = &t->l2;
  int rc = kva_send(c->tiers->t[t->tier].actor, KVA_L2_STORE, &r, sizeof(r), c->self, tag_of(c, t));
  if (rc == KVA_OK)
    l2_meter_sent(&c->tiers->t[t->tier].meter, 0, t->n * kva_layout_bytes(&t->layout), now_ns(c));
  if (rc != KVA_OK) { /* the tier is gone: release what we hold */
    t->stored = rc;
    unstored(c, t->tier, &tier->k_failed, t->keys, t->n, NULL);
    release(c, t);
  }
}

/* The keys of t the tier stored: all (KVA_OK), those whose bit is set
 * (KVA_EUNAVAIL: the others' server is down), or none. */
static size_t stored_keys(const store_task *t) {
  if (t->stored == KVA_OK) return t->n;
  if (t->stored != KVA_EUNAVAIL) return 0;
  size_t k = 0;
  for (size_t i = 0; i < t->n; i++) k += (size_t)kva_bit_get(t->stored_bits, i);
  return k;
}

static void on_stored(store_controller *c, store_task *t) {
  l2_tier *tier = &c->tiers->t[t->tier];
  t->stored = t->l2.result;
  size_t k = stored_keys(t);
  uint64_t key_bytes = kva_layout_bytes(&t->layout);
  l2_meter_done(&tier->meter, 0, t->n * key_bytes, k * key_bytes, now_ns(c));
  l2_health(c->tiers, t->tier, t->stored);
  l2_count(&c->tiers->store_tasks, 1);
  l2_count(&c->tiers->stored_keys, k);
  l2_count(&tier->stored_keys, k);
  l2_count(&tier->stored_bytes, k * key_bytes);
  /* a key stored is no longer absent there; the others are, now */
  if (k)
    l2_absent_clear_many(&tier->absent, t->keys, t->n, t->stored == KVA_OK ? NULL : t->stored_bits);
  if (t->stored == KVA_EUNAVAIL)
    unstored(c, t->tier, &tier->k_unavailable, t->keys, t->n, t->stored_bits);
  else if (t->stored != KVA_OK)
    unstored(c, t->tier, &tier->k_failed, t->keys, t->n, NULL);
  if (t->stored != KVA_OK) l2_count(&c->tiers->store_failures, 1);
  release(c, t);
}

static void on_l1_reply(store_controller *c, store_task *t) {
  switch (t->state) {
  case RESERVING:
    on_reserved(c, t);
    break;
  case RELEASING:
    task_done(c, t);
    break;
  default:
    LOG_WARN("store: unexpected L1 reply in state %u", t->state);
  }
}

/* ---- new writes --------------------------------------------------------- */

static bool grow_scratch(store_controller *c, size_t n) {
  if (n <= c->scratch_cap) return true;
  size_t cap = array_next_cap(c->scratch_cap, n, sizeof(*c->group));
  bool t = cap && ARRAY_RESIZE(c->targets, cap);
  bool g = cap && ARRAY_RESIZE(c->group, cap);
  if (!t || !g) return false;
  c->scratch_cap = cap;
  return true;
}

static void enqueue(store_controller *c, store_task *t) {
  if (c->tail)
    c->tail->next = t;
  else
    c->head = t;
  c->tail = t;
}

/* A write of k (layout fp) to a tier that has a store of k queued or in
 * flight: it joins the queued one (same layout), or marks the key to be
 * queued again after the one in flight (or after the queued one, whose
 * reservation skips an object of another layout). False: k has none, and
 * is tracked now when there is memory for it. A write that joins a store
 * or a mark already there is counted coalesced here; the one that sets
 * the mark is counted where its store ends (settle_keys). */
static bool coalesced(store_controller *c, const kva_key *k, uint32_t tier,
                      const kva_layout *layout, uint64_t fp) {
  store_pending *e = pending_find(&c->pending, k, tier);
  if (!e) {
    if (!pending_add(&c->pending, k, tier, fp))
      LOG_WARN("store: out of memory; a key's stores to %s are not coalesced",
               c->tiers->t[tier].name);
    return false;
  }
  if ((e->queued && e->layout_fp == fp && !e->again) || e->again)
    l2_count(&c->tiers->t[tier].k_coalesced, 1);
  if (e->queued && e->layout_fp == fp && !e->again) return true;
  if (!e->again) e->again_seq = c->seq;
  e->again = true;
  free(e->again_layout);
  e->again_layout = NULL;
  /* out of memory: queued again with the old layout, whose reservation
   * then skips this version (not stored, nothing else) */
  if (fp != e->layout_fp && (e->again_layout = malloc(sizeof(*layout)))) *e->again_layout = *layout;
  return true;
}

/* The group's keys from i on that the policy sends to tier did not reach
 * it, for the reason `counter` counts. */
static void unstored_targets(store_controller *c, uint32_t tier, uint64_t *counter, size_t i,
                             size_t n) {
  for (; i < n; i++)
    if (c->targets[i] >> tier & 1) unstored(c, tier, counter, &c->group[i], 1, NULL);
}

/* The keys of the group that the policy sends to tier, counted written;
 * when they cannot go (frozen, bypassed), counted for that reason too. */
static size_t targeted(store_controller *c, uint32_t tier, size_t n, bool frozen) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += c->targets[i] >> tier & 1;
  l2_tier *lt = &c->tiers->t[tier];
  l2_count(&lt->k_written, k);
  if (k && (frozen || !l2_usable(c->tiers, tier))) {
    unstored_targets(c, tier, frozen ? &lt->k_frozen : &lt->k_bypassed, 0, n);
    return 0;
  }
  return k;
}

/* One layout's keys: the policy picks tiers, one task per usable tier
 * (none while frozen: only counted). */
static void plan_group(store_controller *c, const kva_layout *layout, size_t n, bool frozen) {
  memset(c->targets, 0, n);
  c->policy.select_targets(c->policy.arg, c->group, n, c->tiers->n, c->targets);
  uint64_t fp = layout_fingerprint(layout);
  for (uint32_t tier = 0; tier < c->tiers->n; tier++) {
    size_t left = targeted(c, tier, n, frozen);
    store_task *t = NULL;
    for (size_t i = 0; left && i < n; i++) {
      if (!(c->targets[i] >> tier & 1)) continue;
      if (!t && !(t = task_get(c, n))) {
        LOG_WARN("store: out of memory; %zu keys not stored to %s", n, c->tiers->t[tier].name);
        unstored_targets(c, tier, &c->tiers->t[tier].k_dropped, i, n);
        break;
      }
      left--;
      if (coalesced(c, &c->group[i], tier, layout, fp)) continue;
      t->keys[t->n++] = c->group[i];
    }
    if (t && t->n == 0) { /* every key joined a store already there */
      t->next = c->free_tasks;
      c->free_tasks = t;
      t = NULL;
    }
    if (!t) continue;
    t->seq = c->seq;
    t->tier = tier;
    t->layout = *layout;
    enqueue(c, t);
  }
}

static void on_written(store_controller *c, const kva_msg *msg) {
  const l1_written *h = msg->data;
  if (msg->len < sizeof(*h)) return;
  size_t need = sizeof(*h) + (size_t)h->nlayouts * sizeof(kva_layout) +
                (size_t)h->n * sizeof(l1_written_entry);
  if (msg->len != need) {
    LOG_WARN("store: dropped a malformed L1_WRITTEN (%u bytes)", msg->len);
    return;
  }
  if (c->draining || c->tiers->n == 0) return;
  bool frozen = l2_frozen(c->tiers); /* planned only to be counted */
  const kva_layout *layouts = (const kva_layout *)(h + 1);
  const l1_written_entry *e = (const l1_written_entry *)(layouts + h->nlayouts);
  if (!grow_scratch(c, h->n)) {
    LOG_WARN("store: out of memory; %u keys not stored", h->n);
    return;
  }
  c->seq++;
  for (uint32_t li = 0; li < h->nlayouts; li++) {
    size_t n = 0;
    for (uint32_t i = 0; i < h->n; i++)
      if (e[i].layout == li) c->group[n++] = e[i].key;
    if (n) plan_group(c, &layouts[li], n, frozen);
  }
  start_next(c);
}

/* ---- receive ------------------------------------------------------------ */

/* Room for one more waiter: the list grows on demand, so every flush waits
 * for its stores however many threads flush at once (docs/invariants.md
 * I-SC-6). False only when it cannot grow; on_flush then answers early,
 * with a warning. */
static bool waiters_room(store_controller *c) {
  if (c->nwaiters < c->capwaiters) return true;
  size_t cap = c->capwaiters;
  if (c->capwaiters == UINT32_MAX || !ARRAY_GROW(c->waiters, &cap, (size_t)c->nwaiters + 1))
    return false;
  c->capwaiters = cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
  return true;
}

static void on_flush(store_controller *c, const kva_msg *msg) {
  if (!msg->from) return;
  if (!waiters_room(c)) { /* answer early rather than drop */
    LOG_WARN("store: out of memory; a flush is answered before its stores are done");
    kva_send(msg->from, SC_DONE, NULL, 0, c->self, msg->tag);
    return;
  }
  c->waiters[c->nwaiters++] = (waiter){msg->from, msg->tag, c->seq};
  answer_waiters(c);
}

static void on_drain(store_controller *c, const kva_msg *msg) {
  c->draining = true;
  while (c->head) {
    store_task *t = c->head;
    c->head = t->next;
    unstored(c, t->tier, &c->tiers->t[t->tier].k_dropped, t->keys, t->n, NULL);
    settle_keys(c, t, t->keys, t->n); /* draining: they leave the index */
    t->next = c->free_tasks;
    c->free_tasks = t;
  }
  c->tail = NULL;
  c->drain_to = msg->from;
  c->drain_tag = msg->tag;
  answer_waiters(c);
  check_drained(c);
}

static void sc_receive(kva_actor *self, void *state, const kva_msg *msg) {
  store_controller *c = state;
  store_task *t;
  switch (msg->type) {
  case L1_WRITTEN:
    on_written(c, msg);
    break;
  case L1_REPLY:
    if ((t = task_of(c, msg->tag))) on_l1_reply(c, t);
    break;
  case KVA_L2_DONE:
    t = task_of(c, msg->tag);
    if (t && t->state == STORING && msg->len == sizeof(void *) &&
        *(kva_l2_req *const *)msg->data == &t->l2)
      on_stored(c, t);
    else
      LOG_WARN("store: dropped a reply that matches no store in flight");
    break;
  case SC_FLUSH:
    on_flush(c, msg);
    break;
  case SC_DRAIN:
    on_drain(c, msg);
    break;
  default:
    LOG_WARN("store: dropped message type %u", msg->type);
  }
}

static void sc_on_stop(kva_actor *self, void *state) {
  store_controller *c = state;
  if (c->ninflight)
    LOG_WARN("store: stopping with %u stores in flight (their read locks stay)", c->ninflight);
  for (uint32_t i = 0; i < MAX_INFLIGHT; i++)
    if (c->slots[i]) task_free(c->slots[i]);
  for (store_task *t = c->head, *next; t; t = next) {
    next = t->next;
    task_free(t);
  }
  for (store_task *t = c->free_tasks, *next; t; t = next) {
    next = t->next;
    task_free(t);
  }
  free(c->targets);
  free(c->group);
  free(c->waiters);
  pending_free(&c->pending);
  free(c);
}

static const kva_behavior sc_behavior = {
    .name = "store_controller",
    .receive = sc_receive,
    .on_stop = sc_on_stop,
};

kva_actor *store_controller_spawn(kva_runtime *rt, kva_actor *l1, l2_tiers *tiers,
                                  const kva_store_policy *policy) {
  store_controller *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->l1 = l1;
  c->tiers = tiers;
  c->policy = *policy;
  kva_actor *a = kva_spawn(rt, &sc_behavior, c, NULL);
  if (!a) {
    free(c);
    return NULL;
  }
  c->self = a; /* before any message: nobody knows the actor yet */
  return a;
}
