/*
 * prober.c — health probes of automatically bypassed tiers, and round-trip
 * probes of tiers the load plan stopped asking (prober.h).
 *
 * One probe per tier at a time: a LOOKUP_AND_LOCK of a key no client
 * writes (model "kvact.probe"). A tier that answers with KVA_OK is back;
 * should it report the key as found and locked, the lock is given back.
 * Manual bypasses are never cleared here. A usable tier whose measured
 * lookup round trip is older than METER_STALE_NS (the plans stopped
 * asking it: its round trip was too long to pay) gets the same probe, off
 * every request's path, and its answer's round trip refreshes the tier
 * meter (meter.h).
 *
 * Accepts                              | Sends
 * -------------------------------------+-----------------------------------
 * PROBE_START (the facade, once)       | (arms the probe interval timer)
 * KVA_MSG_TIMER (probe interval)       | KVA_L2_LOOKUP_AND_LOCK of the probe
 *                                      |   key to each bypassed tier, and
 *                                      |   each tier whose round trip is
 *                                      |   stale, not already being probed
 * KVA_L2_DONE (a probe's answer)       | KVA_L2_UNLOCK of the probe key when
 *                                      |   the tier found it; the tier's
 *                                      |   health and round trip updated
 *
 * Invariants: one probe per tier in flight; a probe's lock is always given
 * back; only automatic bypasses change here.
 */
#include "l2/prober.h"

#include <stdlib.h>
#include <string.h>

#include "actors/log.h"

typedef struct prober {
  kva_actor *self;
  l2_tiers *tiers;
  uint64_t interval_ns;
  kva_key key;
  uint8_t bits[L2_MAX_TIERS];
  kva_l2_req req[L2_MAX_TIERS];
  bool busy[L2_MAX_TIERS];
  uint64_t sent_ns[L2_MAX_TIERS];
} prober;

static uint64_t now_ns(const prober *p) {
  return kva_runtime_now_ns(kva_actor_runtime(p->self));
}

static void tick(prober *p) {
  uint64_t now = now_ns(p);
  for (uint32_t t = 0; t < p->tiers->n; t++) {
    if (p->busy[t]) continue;
    bool health = __atomic_load_n(&p->tiers->t[t].bypass_auto, __ATOMIC_RELAXED);
    if (!health && !(l2_usable(p->tiers, t) && l2_meter_lookup_stale(&p->tiers->t[t].meter, now)))
      continue;
    p->sent_ns[t] = now;
    p->bits[t] = 0;
    p->req[t] = (kva_l2_req){.keys = &p->key, .n = 1, .bits = &p->bits[t]};
    kva_l2_req *r = &p->req[t];
    if (kva_send(p->tiers->t[t].actor, KVA_L2_LOOKUP_AND_LOCK, &r, sizeof(r), p->self, t) == KVA_OK)
      p->busy[t] = true;
  }
}

static void on_answer(prober *p, const kva_msg *msg) {
  uint64_t t = msg->tag;
  if (t >= p->tiers->n || !p->busy[t] || msg->len != sizeof(void *) ||
      *(kva_l2_req *const *)msg->data != &p->req[t])
    return;
  p->busy[t] = false;
  if (p->bits[t])
    kva_send(p->tiers->t[t].actor, KVA_L2_UNLOCK, &p->key, sizeof(p->key), p->self, 0);
  if (p->req[t].result == KVA_OK) {
    uint64_t now = now_ns(p);
    l2_meter_lookup(&p->tiers->t[t].meter, now - p->sent_ns[t], now);
    l2_recovered(p->tiers, (uint32_t)t);
  }
}

static void prober_receive(kva_actor *self, void *state, const kva_msg *msg) {
  prober *p = state;
  if (msg->type == PROBE_START)
    kva_timer(self, p->interval_ns, p->interval_ns, 0);
  else if (msg->type == KVA_MSG_TIMER)
    tick(p);
  else if (msg->type == KVA_L2_DONE)
    on_answer(p, msg);
}

static const kva_behavior prober_behavior = {
    .name = "l2_prober",
    .receive = prober_receive,
};

prober *prober_new(l2_tiers *tiers, uint64_t interval_ns) {
  prober *p = calloc(1, sizeof(*p));
  if (!p) return NULL;
  p->tiers = tiers;
  p->interval_ns = interval_ns ? interval_ns : 1000000000ull;
  strcpy(p->key.model, "kvact.probe");
  p->key.hash_len = 1;
  return p;
}

kva_actor *prober_spawn(kva_runtime *rt, prober *p) {
  p->self = kva_spawn(rt, &prober_behavior, p, NULL);
  return p->self;
}

void prober_free(prober *p) {
  free(p);
}
