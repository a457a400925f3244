/*
 * prefetch_controller.c — the prefetch controller actor: takes prefetches
 * the L1 manager hands off (their L1 prefix is read-locked already), runs
 * at most max_in_flight of them at once through prefetch_request.c and
 * queues the rest in arrival order, and answers each one exactly once, on
 * the facade's port, as if the L1 manager had answered (L1_REPLY, with
 * r->hits = L1 hits + L2 hits).
 *
 * Replies from tiers and from the L1 manager carry the request's tag
 * (slot | generation << 16); one whose tag or payload matches no request in
 * that step is dropped with a warning, so a confused adapter cannot make
 * the controller touch a finished request.
 *
 * Shutdown (PC_DRAIN): queued requests are answered with their L1 hits
 * only; requests in flight run to their end, releasing every L1 and L2 lock
 * on the way (docs/invariants.md I-SD-2); then PC_DONE. Hand-offs arriving
 * later are answered at once.
 *
 * With load_or_recompute (opts.plan_loads) the controller's stats slot
 * (kvinspect) is labelled so, with the gauges "skipped_slow" (keys found
 * and left to the engine, counting up) and the same per tier, for the
 * first three tiers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/gauges.h"
#include "actors/log.h"
#include "l2/prefetch_internal.h"

uint64_t pf_now(const prefetch_controller *c) {
  return kva_runtime_now_ns(kva_actor_runtime(c->self));
}

void pf_count_skipped(prefetch_controller *c, const uint32_t *per_tier) {
  uint64_t all = 0;
  for (uint32_t t = 0; t < c->tiers->n; t++) {
    if (!per_tier[t]) continue;
    all += per_tier[t];
    uint64_t v =
        __atomic_add_fetch(&c->tiers->t[t].skipped_slow_keys, per_tier[t], __ATOMIC_RELAXED);
    if (t + 1 < KVA_STATS_GAUGES) actor_stats_gauge(c->self, t + 1, v);
  }
  if (all)
    actor_stats_gauge(c->self, 0,
                      __atomic_add_fetch(&c->tiers->skipped_slow_keys, all, __ATOMIC_RELAXED));
}

uint64_t pf_tag(const prefetch_controller *c, const prefetch_req *req) {
  return ((uint64_t)c->gen[req->slot] << 16) | req->slot;
}

void pf_send_l1(prefetch_controller *c, prefetch_req *req, uint32_t type) {
  l1_req *r = &req->l1;
  if (kva_send(c->l1, type, &r, sizeof(r), c->self, pf_tag(c, req)) != KVA_OK)
    LOG_ERROR("prefetch: the L1 manager is gone; a prefetch is abandoned");
}

/* ---- requests ----------------------------------------------------------- */

static bool req_reserve(prefetch_req *req, size_t n) {
  if (n <= req->cap) return true;
  size_t bm = (n + 7) / 8;
  size_t size = 2 * L2_MAX_TIERS * bm + n /* plan */ + n /* loaded */ + n /* src */ +
                n * sizeof(int) + 2 * n * sizeof(kva_buf) + 2 * n * sizeof(uint64_t) +
                n * sizeof(kva_key) + n * sizeof(uint32_t) + 64;
  uint8_t *b = malloc(size);
  if (!b) return false;
  free(req->block);
  req->block = b;
  req->cap = n;
  /* the widest members first, so each stays aligned */
  req->bufs = (kva_buf *)b;
  b += n * sizeof(kva_buf);
  req->lbufs = (kva_buf *)b;
  b += n * sizeof(kva_buf);
  req->ids = (uint64_t *)b;
  b += n * sizeof(uint64_t);
  req->lids = (uint64_t *)b;
  b += n * sizeof(uint64_t);
  req->lkeys = (kva_key *)b; /* 4-byte aligned, like everything after it */
  b += n * sizeof(kva_key);
  req->status = (int *)b;
  b += n * sizeof(int);
  req->lidx = (uint32_t *)b;
  b += n * sizeof(uint32_t);
  for (uint32_t t = 0; t < L2_MAX_TIERS; t++, b += 2 * bm) {
    req->found[t] = b;
    req->lbits[t] = b + bm;
  }
  req->plan = (int8_t *)b;
  req->loaded = b + n;
  req->src = b + 2 * n;
  return true;
}

static prefetch_req *req_get(prefetch_controller *c, size_t n) {
  prefetch_req *req = c->free_reqs;
  if (req)
    c->free_reqs = req->next;
  else if (!(req = calloc(1, sizeof(*req))))
    return NULL;
  if (!req_reserve(req, n)) {
    req->next = c->free_reqs;
    c->free_reqs = req;
    return NULL;
  }
  req->next = NULL;
  return req;
}

static void req_free(prefetch_req *req) {
  free(req->block);
  free(req);
}

/* Answers the facade; the request goes back to the free list. */
static void answer(prefetch_controller *c, prefetch_req *req) {
  req->user->hits = req->base + req->hits;
  req->user->result = KVA_OK;
  if (req->reply_to) kva_send(req->reply_to, L1_REPLY, NULL, 0, c->self, req->reply_tag);
  req->next = c->free_reqs;
  c->free_reqs = req;
}

/* ---- slots -------------------------------------------------------------- */

static void start_next(prefetch_controller *c) {
  while (c->head && c->ninflight < c->o.max_in_flight) {
    prefetch_req *req = c->head;
    c->head = req->next;
    if (!c->head) c->tail = NULL;
    uint32_t slot = 0;
    while (c->slots[slot]) slot++;
    c->slots[slot] = req;
    req->slot = slot;
    c->ninflight++;
    pf_start(c, req);
  }
}

static void check_drained(prefetch_controller *c) {
  if (!c->draining || c->ninflight || !c->drain_to) return;
  kva_send(c->drain_to, PC_DONE, NULL, 0, c->self, c->drain_tag);
  c->drain_to = NULL;
}

void pf_finish(prefetch_controller *c, prefetch_req *req) {
  c->slots[req->slot] = NULL;
  c->gen[req->slot]++;
  c->ninflight--;
  answer(c, req);
  start_next(c);
  check_drained(c);
}

/* The request a reply's tag names, or NULL. */
static prefetch_req *req_of(prefetch_controller *c, uint64_t tag) {
  uint32_t slot = (uint32_t)(tag & 0xffff);
  if (slot >= c->o.max_in_flight || !c->slots[slot] || c->gen[slot] != (uint32_t)(tag >> 16))
    return NULL;
  return c->slots[slot];
}

/* ---- receive ------------------------------------------------------------ */

static void on_handoff(prefetch_controller *c, const kva_msg *msg) {
  if (msg->len != sizeof(l1_handoff)) return;
  const l1_handoff *h = msg->data;
  l1_req *u = h->r;
  size_t n = u->n - u->hits;
  prefetch_req *req = req_get(c, n);
  if (!req) { /* answer with what L1 had: nothing is lost, L2 is skipped */
    LOG_WARN("prefetch: out of memory; a prefetch is answered from L1 only");
    u->result = KVA_OK;
    kva_send(h->reply_to, L1_REPLY, NULL, 0, c->self, h->tag);
    return;
  }
  req->user = u;
  req->reply_to = h->reply_to;
  req->reply_tag = h->tag;
  req->base = u->hits;
  req->keys = u->keys + u->hits;
  req->n = n;
  req->state = PF_QUEUED;
  req->waiting = req->asked = 0;
  req->nplanned = req->nreserved = req->nfilled = req->hits = 0;
  l2_count(&c->tiers->prefetch_requests, 1);
  if (c->draining || !u->layout) {
    answer(c, req);
    return;
  }
  if (c->tail)
    c->tail->next = req;
  else
    c->head = req;
  c->tail = req;
  start_next(c);
}

/* Which of the request's lookups or loads this reply is, or NULL. */
static const kva_l2_req *l2_reply_of(prefetch_controller *c, prefetch_req *req,
                                     const kva_msg *msg) {
  if (msg->len != sizeof(void *)) return NULL;
  const kva_l2_req *r = *(kva_l2_req *const *)msg->data;
  const kva_l2_req *base = req->state == PF_LOOKUP ? req->look
                           : req->state == PF_LOAD ? req->load
                                                   : NULL;
  if (!base || r < base || r >= base + c->tiers->n) return NULL;
  return r;
}

static void on_drain(prefetch_controller *c, const kva_msg *msg) {
  c->draining = true;
  while (c->head) {
    prefetch_req *req = c->head;
    c->head = req->next;
    answer(c, req);
  }
  c->tail = NULL;
  c->drain_to = msg->from;
  c->drain_tag = msg->tag;
  check_drained(c);
}

static void pc_receive(kva_actor *self, void *state, const kva_msg *msg) {
  prefetch_controller *c = state;
  prefetch_req *req;
  const kva_l2_req *r;
  switch (msg->type) {
  case L1_HANDOFF:
    on_handoff(c, msg);
    break;
  case KVA_L2_DONE:
    if ((req = req_of(c, msg->tag)) && (r = l2_reply_of(c, req, msg)))
      pf_on_l2(c, req, r);
    else
      LOG_WARN("prefetch: dropped a tier reply that matches no request in flight");
    break;
  case L1_REPLY:
    if ((req = req_of(c, msg->tag))) pf_on_l1(c, req);
    break;
  case PC_DRAIN:
    on_drain(c, msg);
    break;
  default:
    LOG_WARN("prefetch: dropped message type %u", msg->type);
  }
}

static void pc_on_stop(kva_actor *self, void *state) {
  prefetch_controller *c = state;
  if (c->ninflight)
    LOG_WARN("prefetch: stopping with %u requests in flight (their locks stay)", c->ninflight);
  for (uint32_t i = 0; i < c->o.max_in_flight; i++)
    if (c->slots[i]) req_free(c->slots[i]);
  for (prefetch_req *req = c->head, *next; req; req = next) {
    next = req->next;
    req_free(req);
  }
  for (prefetch_req *req = c->free_reqs, *next; req; req = next) {
    next = req->next;
    req_free(req);
  }
  free(c->slots);
  free(c->gen);
  free(c);
}

static const kva_behavior pc_behavior = {
    .name = "prefetch_controller",
    .receive = pc_receive,
    .on_stop = pc_on_stop,
};

kva_actor *prefetch_controller_spawn(kva_runtime *rt, kva_actor *l1, l2_tiers *tiers,
                                     const prefetch_opts *o) {
  prefetch_controller *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->l1 = l1;
  c->tiers = tiers;
  c->o = *o;
  if (c->o.max_in_flight == 0) c->o.max_in_flight = 1;
  if (c->o.max_in_flight > 65535) c->o.max_in_flight = 65535;
  c->slots = calloc(c->o.max_in_flight, sizeof(*c->slots));
  c->gen = calloc(c->o.max_in_flight, sizeof(*c->gen));
  kva_actor *a = c->slots && c->gen ? kva_spawn(rt, &pc_behavior, c, NULL) : NULL;
  if (!a) {
    free(c->slots);
    free(c->gen);
    free(c);
    return NULL;
  }
  c->self = a;
  if (c->o.plan_loads) {
    char names[KVA_STATS_GAUGE_NAMES] = "skipped_slow";
    for (uint32_t t = 0; t < tiers->n && t + 1 < KVA_STATS_GAUGES; t++) {
      size_t len = strlen(names);
      snprintf(names + len, sizeof(names) - len, " %s", tiers->t[t].name);
    }
    actor_stats_label(a, "load_or_recompute", names);
  }
  return a;
}
