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
 */
#include <stdlib.h>
#include <string.h>

#include "actors/log.h"
#include "l2/prefetch_internal.h"

uint64_t pf_tag(const pc *c, const pf_req *q) {
  return ((uint64_t)c->gen[q->slot] << 16) | q->slot;
}

void pf_send_l1(pc *c, pf_req *q, uint32_t type) {
  l1_req *r = &q->l1;
  if (kva_send(c->l1, type, &r, sizeof(r), c->self, pf_tag(c, q)) != KVA_OK)
    LOG_ERROR("prefetch: the L1 manager is gone; a prefetch is abandoned");
}

/* ---- requests ----------------------------------------------------------- */

static bool req_reserve(pf_req *q, size_t n) {
  if (n <= q->cap) return true;
  size_t bm = (n + 7) / 8;
  size_t size = 2 * L2_MAX_TIERS * bm + n /* plan */ + n /* loaded */ + n /* src */ +
                n * sizeof(int) + 2 * n * sizeof(kva_buf) + 2 * n * sizeof(uint64_t) +
                n * sizeof(kva_key) + n * sizeof(uint32_t) + 64;
  uint8_t *b = malloc(size);
  if (!b) return false;
  free(q->block);
  q->block = b;
  q->cap = n;
  /* the widest members first, so each stays aligned */
  q->bufs = (kva_buf *)b;
  b += n * sizeof(kva_buf);
  q->lbufs = (kva_buf *)b;
  b += n * sizeof(kva_buf);
  q->ids = (uint64_t *)b;
  b += n * sizeof(uint64_t);
  q->lids = (uint64_t *)b;
  b += n * sizeof(uint64_t);
  q->lkeys = (kva_key *)b; /* 4-byte aligned, like everything after it */
  b += n * sizeof(kva_key);
  q->status = (int *)b;
  b += n * sizeof(int);
  q->lidx = (uint32_t *)b;
  b += n * sizeof(uint32_t);
  for (uint32_t t = 0; t < L2_MAX_TIERS; t++, b += 2 * bm) {
    q->found[t] = b;
    q->lbits[t] = b + bm;
  }
  q->plan = (int8_t *)b;
  q->loaded = b + n;
  q->src = b + 2 * n;
  return true;
}

static pf_req *req_get(pc *c, size_t n) {
  pf_req *q = c->free_reqs;
  if (q)
    c->free_reqs = q->next;
  else if (!(q = calloc(1, sizeof(*q))))
    return NULL;
  if (!req_reserve(q, n)) {
    q->next = c->free_reqs;
    c->free_reqs = q;
    return NULL;
  }
  q->next = NULL;
  return q;
}

static void req_free(pf_req *q) {
  free(q->block);
  free(q);
}

/* Answers the facade; the request goes back to the free list. */
static void answer(pc *c, pf_req *q) {
  q->user->hits = q->base + q->hits;
  q->user->result = KVA_OK;
  if (q->reply_to) kva_send(q->reply_to, L1_REPLY, NULL, 0, c->self, q->reply_tag);
  q->next = c->free_reqs;
  c->free_reqs = q;
}

/* ---- slots -------------------------------------------------------------- */

static void start_next(pc *c) {
  while (c->head && c->ninflight < c->o.max_in_flight) {
    pf_req *q = c->head;
    c->head = q->next;
    if (!c->head) c->tail = NULL;
    uint32_t slot = 0;
    while (c->slots[slot]) slot++;
    c->slots[slot] = q;
    q->slot = slot;
    c->ninflight++;
    pf_start(c, q);
  }
}

static void check_drained(pc *c) {
  if (!c->draining || c->ninflight || !c->drain_to) return;
  kva_send(c->drain_to, PC_DONE, NULL, 0, c->self, c->drain_tag);
  c->drain_to = NULL;
}

void pf_finish(pc *c, pf_req *q) {
  c->slots[q->slot] = NULL;
  c->gen[q->slot]++;
  c->ninflight--;
  answer(c, q);
  start_next(c);
  check_drained(c);
}

/* The request a reply's tag names, or NULL. */
static pf_req *req_of(pc *c, uint64_t tag) {
  uint32_t slot = (uint32_t)(tag & 0xffff);
  if (slot >= c->o.max_in_flight || !c->slots[slot] || c->gen[slot] != (uint32_t)(tag >> 16))
    return NULL;
  return c->slots[slot];
}

/* ---- receive ------------------------------------------------------------ */

static void on_handoff(pc *c, const kva_msg *msg) {
  if (msg->len != sizeof(l1_handoff)) return;
  const l1_handoff *h = msg->data;
  l1_req *u = h->r;
  size_t n = u->n - u->hits;
  pf_req *q = req_get(c, n);
  if (!q) { /* answer with what L1 had: nothing is lost, L2 is skipped */
    LOG_WARN("prefetch: out of memory; a prefetch is answered from L1 only");
    u->result = KVA_OK;
    kva_send(h->reply_to, L1_REPLY, NULL, 0, c->self, h->tag);
    return;
  }
  q->user = u;
  q->reply_to = h->reply_to;
  q->reply_tag = h->tag;
  q->base = u->hits;
  q->keys = u->keys + u->hits;
  q->n = n;
  q->state = PF_QUEUED;
  q->waiting = q->asked = 0;
  q->p = q->q = q->r = q->hits = 0;
  l2_count(&c->tiers->prefetch_requests, 1);
  if (c->draining || !u->layout) {
    answer(c, q);
    return;
  }
  if (c->tail)
    c->tail->next = q;
  else
    c->head = q;
  c->tail = q;
  start_next(c);
}

/* Which of the request's lookups or loads this reply is, or NULL. */
static const kva_l2_req *l2_reply_of(pc *c, pf_req *q, const kva_msg *msg) {
  if (msg->len != sizeof(void *)) return NULL;
  const kva_l2_req *r = *(kva_l2_req *const *)msg->data;
  const kva_l2_req *base = q->state == PF_LOOKUP ? q->look : q->state == PF_LOAD ? q->load : NULL;
  if (!base || r < base || r >= base + c->tiers->n) return NULL;
  return r;
}

static void on_drain(pc *c, const kva_msg *msg) {
  c->draining = true;
  while (c->head) {
    pf_req *q = c->head;
    c->head = q->next;
    answer(c, q);
  }
  c->tail = NULL;
  c->drain_to = msg->from;
  c->drain_tag = msg->tag;
  check_drained(c);
}

static void pc_receive(kva_actor *self, void *state, const kva_msg *msg) {
  pc *c = state;
  pf_req *q;
  const kva_l2_req *r;
  switch (msg->type) {
  case L1_HANDOFF:
    on_handoff(c, msg);
    break;
  case KVA_L2_DONE:
    if ((q = req_of(c, msg->tag)) && (r = l2_reply_of(c, q, msg)))
      pf_on_l2(c, q, r);
    else
      LOG_WARN("prefetch: dropped a tier reply that matches no request in flight");
    break;
  case L1_REPLY:
    if ((q = req_of(c, msg->tag))) pf_on_l1(c, q);
    break;
  case PC_DRAIN:
    on_drain(c, msg);
    break;
  default:
    LOG_WARN("prefetch: dropped message type %u", msg->type);
  }
}

static void pc_on_stop(kva_actor *self, void *state) {
  pc *c = state;
  if (c->ninflight)
    LOG_WARN("prefetch: stopping with %u requests in flight (their locks stay)", c->ninflight);
  for (uint32_t i = 0; i < c->o.max_in_flight; i++)
    if (c->slots[i]) req_free(c->slots[i]);
  for (pf_req *q = c->head, *next; q; q = next) {
    next = q->next;
    req_free(q);
  }
  for (pf_req *q = c->free_reqs, *next; q; q = next) {
    next = q->next;
    req_free(q);
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
  pc *c = calloc(1, sizeof(*c));
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
  return a;
}
