/*
 * store_controller.h — the store controller actor (store_controller.c):
 * copies finished L1 writes to the L2 tiers (LMCache's StoreController;
 * docs/invariants.md I-SC-1 to I-SC-7).
 *
 * Accepts                          | Sends
 * ---------------------------------+------------------------------------
 * L1_WRITTEN (from the L1 manager) | L1_RESERVE_READ, L1_FINISH_READ
 * L1_REPLY, KVA_L2_DONE            |   (with the policy's L1 deletions)
 * SC_FLUSH, SC_DRAIN (facade)      |   to the L1 manager
 *                                  | KVA_L2_STORE to the tiers
 *                                  | SC_DONE to the facade (a flush's
 *                                  |   or the drain's answer)
 */
#ifndef KVA_L2_STORE_CONTROLLER_H
#define KVA_L2_STORE_CONTROLLER_H

#include "common/msg_ids.h"
#include "kvact.h"
#include "l2/tiers.h"

enum {
  SC_FLUSH =
      MSG_SC_BASE, /* no payload; SC_DONE (same tag) once every store queued before it is done */
  SC_DRAIN,        /* shutdown: drop queued stores, finish those in flight, then SC_DONE */
  SC_DONE = MSG_SC_BASE + 15,
};
MSG_RANGE_CHECK(SC_FLUSH, SC_DONE, MSG_SC_BASE, MSG_PC_BASE, "the store controller's");

/* NULL on ENOMEM. tiers outlives the actor. */
kva_actor *store_controller_spawn(kva_runtime *rt, kva_actor *l1, l2_tiers *tiers,
                                  const kva_store_policy *policy);

#endif
