/*
 * prefetch_controller.h — the prefetch controller actor
 * (prefetch_controller.c, prefetch_request.c): loads the part of a
 * prefetch that missed in L1 from the L2 tiers (LMCache's
 * PrefetchController; docs/invariants.md I-PC-1 to I-PC-7).
 *
 * Accepts                              | Sends
 * -------------------------------------+-----------------------------------
 * L1_HANDOFF (from the L1 manager)     | KVA_L2_LOOKUP_AND_LOCK, KVA_L2_LOAD,
 * KVA_L2_DONE, L1_REPLY                |   KVA_L2_UNLOCK to the tiers
 * PC_DRAIN (facade, at shutdown)       | L1_RESERVE_WRITE, L1_RESERVE_READ,
 *                                      |   L1_ABORT_WRITE,
 *                                      |   L1_FINISH_WRITE_AND_RESERVE_READ,
 *                                      |   L1_FINISH_READ to the L1 manager
 *                                      | L1_REPLY to the prefetch's port
 *                                      | PC_DONE to the facade
 */
#ifndef KVA_L2_PREFETCH_CONTROLLER_H
#define KVA_L2_PREFETCH_CONTROLLER_H

#include "common/msg_ids.h"
#include "kvact.h"
#include "l2/prefill.h"
#include "l2/tiers.h"

enum {
  PC_DRAIN =
      MSG_PC_BASE, /* answer queued requests with their L1 hits, finish those in flight, PC_DONE */
  PC_DONE = MSG_PC_BASE + 15,
};
MSG_RANGE_CHECK(PC_DRAIN, PC_DONE, MSG_PC_BASE, MSG_PROBE_BASE, "the prefetch controller's");

typedef struct prefetch_opts {
  kva_prefetch_policy policy;
  uint32_t max_in_flight; /* requests past their lookup at once; the rest wait in order */
  int writeback;          /* loaded objects stay as ordinary objects (else temporary) */
  /* load_or_recompute: the policy's plan is cut to the prefix worth
   * loading (load_plan.h) at these prefill rates and margin */
  int plan_loads;
  double margin;
  prefill_rates *prefill;
} prefetch_opts;

/* NULL on ENOMEM. tiers outlives the actor. */
kva_actor *prefetch_controller_spawn(kva_runtime *rt, kva_actor *l1, l2_tiers *tiers,
                                     const prefetch_opts *o);

#endif
