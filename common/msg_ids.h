/*
 * msg_ids.h — who owns which internal message ids. Each range belongs to
 * the actor that receives (or, for replies, sends) its messages; its
 * header numbers its messages from the range's base and asserts they stay
 * inside. Message ids are only compared within one actor's receive, so the
 * ranges need not be disjoint for correctness; they are, so that a trace
 * (kvinspect trace) names every id without ambiguity.
 *
 *   1..15      the runtime (kvact.h: KVA_MSG_FD_READY, _TIMER, _STOP)
 *   64..95     the L1 manager's requests     l1/l1_manager.h
 *   96..119    the eviction controller       l1/eviction_controller.h
 *   120..127   the L1 manager's notices and reply
 *   256..271   the L2 adapter protocol       kvact.h (KVA_L2_*)
 *   272..319   adapters' own messages        kvact.h (KVA_L2_ADAPTER_MSG)
 *   320..351   the store controller          l2/store_controller.h
 *   352..383   the prefetch controller       l2/prefetch_controller.h
 *   384..415   the prober                    l2/prober.h
 *   512..543   the copy actors               gpu/copy_actor.h
 *   544..559   a client's connection         client/connection.h
 *   560..591   kvactd's listener and sessions server/server_internal.h
 *   1024..     users' actors                 kvact.h (KVA_MSG_USER)
 */
#ifndef KVA_COMMON_MSG_IDS_H
#define KVA_COMMON_MSG_IDS_H

#include "kvact.h"

enum {
  MSG_L1_BASE = 64,
  MSG_EC_BASE = 96,
  MSG_L1_NOTICE_BASE = 120,
  MSG_L1_END = 128,
  MSG_SC_BASE = 320,
  MSG_PC_BASE = 352,
  MSG_PROBE_BASE = 384,
  MSG_PROBE_END = 416,
  MSG_COPY_BASE = 512,
  MSG_COPY_END = 544,
  MSG_CLIENT_BASE = 544,
  MSG_SERVER_BASE = 560,
  MSG_SERVER_END = 592,
};

/* Whether first..last lies inside [base, end). */
#define MSG_RANGE_CHECK(first, last, base, end, what)                                              \
  _Static_assert((int)(first) >= (int)(base) && (int)(last) < (int)(end),                          \
                 what " message ids outside their range")

_Static_assert((int)KVA_L2_DONE < (int)KVA_L2_ADAPTER_MSG &&
                   (int)KVA_L2_ADAPTER_MSG_END <= (int)MSG_SC_BASE,
               "the L2 protocol and the adapters' own ids below the store controller's");
_Static_assert((int)MSG_SERVER_END <= (int)KVA_MSG_USER, "internal ids below the users' ids");

#endif
