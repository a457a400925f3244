/*
 * prober.h — the prober actor (prober.c): every l2_probe_interval_ms it
 * asks each automatically bypassed tier, and each tier whose lookup round
 * trip the load plan has not measured for a while, to look up a key kvact
 * never stores; the first answer without error clears that tier's bypass,
 * and every answer measures the tier's round trip.
 */
#ifndef KVA_L2_PROBER_H
#define KVA_L2_PROBER_H

#include "common/msg_ids.h"
#include "kvact.h"
#include "l2/tiers.h"

enum { PROBE_START = MSG_PROBE_BASE }; /* facade -> prober: start the tick (no payload) */

/* The prober's state is owned by the caller and freed with prober_free
 * after the runtime has stopped (an adapter may still be reading a probe
 * request while the prober itself stops). NULL on ENOMEM. */
typedef struct prober prober;
prober *prober_new(l2_tiers *tiers, uint64_t interval_ns);
kva_actor *prober_spawn(kva_runtime *rt, prober *p);
void prober_free(prober *p);

#endif
