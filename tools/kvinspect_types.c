/*
 * kvinspect_types.c — names of kvact's own message types for traces (the
 * numbers come from the headers that define them, so they cannot drift).
 */
#include <stdio.h>

#include "gpu/copy_actor.h"
#include "l1/eviction_controller.h"
#include "l1/l1_manager.h"
#include "l2/adapters/mock/mock.h"
#include "l2/prefetch_controller.h"
#include "l2/prober.h"
#include "l2/store_controller.h"
#include "tools/kvinspect.h"

#define NAME(t)                                                                                    \
  { t, #t }

static const struct {
  uint32_t type;
  const char *name;
} names[] = {
    NAME(KVA_MSG_FD_READY), NAME(KVA_MSG_TIMER),
    NAME(KVA_MSG_STOP),     NAME(L1_RESERVE_WRITE),
    NAME(L1_FINISH_WRITE),  NAME(L1_RESERVE_READ),
    NAME(L1_FINISH_READ),   NAME(L1_FINISH_WRITE_AND_RESERVE_READ),
    NAME(L1_DELETE),        NAME(L1_TOUCH),
    NAME(L1_CLEAR),         NAME(L1_PREFETCH),
    NAME(L1_READ),          NAME(L1_MEMCHECK),
    NAME(L1_STATS),         NAME(L1_LOOKUP),
    NAME(L1_UNPIN),         NAME(L1_INSPECT),
    NAME(L1_ABORT_WRITE),   NAME(L1_EVICT),
    NAME(L1_CANDIDATES),    NAME(L1_WRITTEN),
    NAME(L1_HANDOFF),       NAME(L1_REPLY),
    NAME(EC_NOTE),          NAME(EC_DEMAND),
    NAME(EC_EVICT_DONE),    NAME(EC_START),
    NAME(KVA_L2_STORE),     NAME(KVA_L2_LOOKUP_AND_LOCK),
    NAME(KVA_L2_LOAD),      NAME(KVA_L2_UNLOCK),
    NAME(KVA_L2_STATS),     NAME(KVA_L2_DONE),
    NAME(MOCK_CONTROL),     NAME(SC_FLUSH),
    NAME(SC_DRAIN),         NAME(SC_DONE),
    NAME(PC_DRAIN),         NAME(PC_DONE),
    NAME(PROBE_START),      NAME(COPY_START),
    NAME(COPY_SUBMIT),
};

const char *kvi_type_name(uint32_t type, char *buf, size_t len) {
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (names[i].type == type) return names[i].name;
  snprintf(buf, len, type >= KVA_MSG_USER ? "user %u" : "msg %u", type);
  return buf;
}
