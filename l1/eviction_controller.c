/*
 * eviction_controller.c — the eviction controller actor: keeps the L1
 * eviction policy up to date from the L1 manager's notes, evicts by
 * watermark, and answers the manager's demand-eviction questions.
 *
 * Accepts                          | Sends
 * ---------------------------------+------------------------------------
 * EC_START (arm the tick)          |
 * EC_NOTE (evict_note)             | L1_EVICT (a page of candidates) when
 * KVA_MSG_TIMER (tick)             |   usage >= trigger_watermark
 * EC_EVICT_DONE (evict_done)       | L1_EVICT (next page) while the round
 *                                  |   target is not met
 * EC_DEMAND (evict_demand)         | L1_CANDIDATES (a page) to the sender
 *
 * Invariants:
 *  - the policy only changes on notes, so choosing candidates (for a round
 *    or a demand) has no side effect, and the manager's view and ours agree
 *    at every note boundary (the manager sends its notes before asking);
 *  - deletes are never forced: the manager skips objects locked meanwhile;
 *  - at most one watermark round is in flight; a round frees
 *    eviction.ratio of the bytes in use (at least one object), like
 *    LMCache's int(n * ratio) for objects of one size; ratio 0 turns
 *    watermark eviction off (demand eviction still works).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "l1/eviction_controller.h"
#include "l1/l1_manager.h"
#include "l1/policy.h"

typedef struct evictor {
  kva_actor *self, *l1;
  const policy_ops *ops;
  policy *pol;
  double watermark, ratio;
  uint64_t interval_ns;
  uint64_t used, capacity; /* as of the last note */
  bool round;              /* an L1_EVICT is in flight */
  uint64_t round_left;     /* bytes the round still has to free */
  struct {
    evict_list l;
    uint64_t ids[EVICT_PAGE];
  } page;
  uint64_t bytes[EVICT_PAGE];
} evictor;

static void apply_note(evictor *e, const evict_note *n, uint32_t len) {
  if (len < sizeof(*n) || (len - sizeof(*n)) / sizeof(n->e[0]) < n->n) return;
  for (uint32_t i = 0; i < n->n; i++) {
    const evict_note_entry *x = &n->e[i];
    if (x->op == NOTE_CREATED)
      e->ops->on_created(e->pol, x->id, x->bytes);
    else if (x->op == NOTE_TOUCHED)
      e->ops->on_touched(e->pol, x->id);
    else if (x->op == NOTE_REMOVED)
      e->ops->on_removed(e->pol, x->id);
  }
  e->used = n->used;
  e->capacity = n->capacity;
}

/* Fills the page with candidates after `after`; returns its size. */
static uint32_t fill_page(evictor *e, uint64_t after, uint64_t target) {
  size_t n = e->ops->candidates(e->pol, after, e->page.ids, e->bytes, EVICT_PAGE);
  e->page.l.target = target;
  e->page.l.n = (uint32_t)n;
  e->page.l.end = n < EVICT_PAGE;
  return (uint32_t)(sizeof(e->page.l) + n * sizeof(uint64_t));
}

static void send_round_page(evictor *e, uint64_t after) {
  uint32_t len = fill_page(e, after, e->round_left);
  e->round = e->page.l.n > 0 && kva_send(e->l1, L1_EVICT, &e->page, len, e->self, 0) == KVA_OK;
}

static void maybe_start_round(evictor *e) {
  if (e->round || e->capacity == 0 || e->ratio <= 0 || e->ops->count(e->pol) == 0) return;
  if ((double)e->used < e->watermark * (double)e->capacity) return;
  e->round_left = (uint64_t)(e->ratio * (double)e->used);
  if (e->round_left == 0) e->round_left = 1; /* at least one object */
  send_round_page(e, 0);
}

static void on_evict_done(evictor *e, const evict_done *d) {
  e->round_left = d->freed >= e->round_left ? 0 : e->round_left - d->freed;
  e->round = false;
  if (e->round_left > 0 && d->exhausted) send_round_page(e, d->after);
}

static void on_demand(evictor *e, const kva_msg *m) {
  const evict_demand *d = m->data;
  uint32_t len = fill_page(e, d->after, d->deficit);
  kva_send(m->from, L1_CANDIDATES, &e->page, len, e->self, m->tag);
}

static void ec_receive(kva_actor *self, void *state, const kva_msg *m) {
  evictor *e = state;
  switch (m->type) {
  case EC_NOTE:
    apply_note(e, m->data, m->len);
    maybe_start_round(e);
    break;
  case KVA_MSG_TIMER:
    maybe_start_round(e);
    break;
  case EC_EVICT_DONE:
    if (m->len == sizeof(evict_done)) on_evict_done(e, m->data);
    break;
  case EC_DEMAND:
    if (m->len == sizeof(evict_demand) && m->from) on_demand(e, m);
    break;
  case EC_START:
    kva_timer(self, e->interval_ns, e->interval_ns, 0);
    break;
  default:
    break;
  }
}

static void ec_on_stop(kva_actor *self, void *state) {
  evictor *e = state;
  e->ops->destroy(e->pol);
  free(e);
}

static const kva_behavior ec_behavior = {
    .name = "eviction_controller",
    .receive = ec_receive,
    .on_stop = ec_on_stop,
};

kva_actor *eviction_controller_spawn(kva_runtime *rt, kva_actor *l1, const eviction_opts *o,
                                     char *err, size_t errlen) {
  const policy_ops *ops = policy_find(o->policy);
  if (!ops) {
    snprintf(err, errlen, "eviction.policy: no policy named \"%s\"", o->policy);
    return NULL;
  }
  evictor *e = calloc(1, sizeof(*e));
  if (!e || !(e->pol = ops->create())) {
    free(e);
    snprintf(err, errlen, "eviction: out of memory");
    return NULL;
  }
  e->l1 = l1;
  e->ops = ops;
  e->watermark = o->watermark;
  e->ratio = o->ratio;
  e->interval_ns = o->interval_ns;
  e->self = kva_spawn(rt, &ec_behavior, e, NULL);
  if (!e->self) {
    ops->destroy(e->pol);
    free(e);
    snprintf(err, errlen, "eviction: cannot spawn the eviction controller actor");
    return NULL;
  }
  kva_send(e->self, EC_START, NULL, 0, NULL, 0);
  return e->self;
}
