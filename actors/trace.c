/*
 * trace.c — writing events into the trace ring (layout in trace.h).
 */
#include "actors/trace.h"

#include "actors/clock.h"

static uint32_t next_lane;             /* atomic: lanes handed to threads so far */
static __thread uint32_t thread_lane1; /* this thread's lane + 1; 0 = none yet */

static trace_lane *my_lane(trace_ring *t) {
  if (!thread_lane1) thread_lane1 = ck_pr_faa_32(&next_lane, 1) % TRACE_LANES + 1;
  return trace_lane_at(t->lanes, t->lane_bytes, (thread_lane1 - 1) % t->nlanes);
}

/* The lease a reader holds ends at *until_ns: the first event after it
 * clears the bit (a CAS, so a renewal racing with us is not lost: the
 * reader sets the bit again at its next renewal). */
static bool lease_expired(trace_ring *t, uint64_t now_ns) {
  uint32_t on = ck_pr_load_32(t->on);
  if (on != TRACE_ON_LEASE || now_ns <= ck_pr_load_64(t->until_ns)) return false;
  ck_pr_cas_32(t->on, on, 0);
  return true;
}

static void put(trace_ring *t, uint64_t ts, uint64_t w2, uint64_t w3) {
  trace_lane *l = my_lane(t);
  uint64_t i = ck_pr_faa_64(&l->head, 1);
  uint64_t *ev = l->ev[i & t->lane_mask];
  ck_pr_store_64(&ev[0], 0); /* a reader now sees the slot as being written */
  ck_pr_fence_store();
  ck_pr_store_64(&ev[1], ts);
  ck_pr_store_64(&ev[2], w2);
  ck_pr_store_64(&ev[3], w3);
  ck_pr_fence_store(); /* the words before the commit */
  ck_pr_store_64(&ev[0], i + 1);
}

static uint64_t who(uint32_t actor, uint32_t peer, uint32_t kind, uint32_t flags, uint32_t tag) {
  return (uint64_t)(actor & 0xffff) | (uint64_t)(peer & 0xffff) << 16 | (uint64_t)kind << 32 |
         (uint64_t)flags << 40 | (uint64_t)(tag & 0xff) << 48;
}

uint32_t trace_send(trace_ring *t, uint32_t from, uint32_t to, uint32_t type, bool in_recv) {
  uint64_t now = clock_mono_ns();
  if (from == TRACE_NOBODY || to == TRACE_NOBODY || lease_expired(t, now)) return 0;
  uint32_t tag = trace_tag(ck_pr_load_32(t->epoch));
  put(t, now, type, who(from, to, TRACE_SEND, in_recv ? TRACE_IN_RECV : 0, tag));
  return tag;
}

void trace_recv(trace_ring *t, uint32_t actor, uint32_t peer, uint32_t type, uint64_t start_ns,
                uint64_t dur_ns, uint32_t tag) {
  if (actor == TRACE_NOBODY || lease_expired(t, start_ns + dur_ns)) return;
  uint64_t dur = dur_ns > UINT32_MAX ? UINT32_MAX : dur_ns;
  put(t, start_ns, dur << 32 | type, who(actor, peer, TRACE_RECV, tag ? TRACE_MARKED : 0, tag));
}

void trace_decode(const uint64_t w[TRACE_EVENT_WORDS], trace_event *out) {
  out->ts_ns = w[1];
  out->dur_ns = (uint32_t)(w[2] >> 32);
  out->type = (uint32_t)w[2];
  out->actor = (uint16_t)w[3];
  out->peer = (uint16_t)(w[3] >> 16);
  out->kind = (uint8_t)(w[3] >> 32);
  out->flags = (uint8_t)(w[3] >> 40);
  out->tag = (uint8_t)(w[3] >> 48);
}
