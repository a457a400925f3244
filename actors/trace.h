/*
 * trace.h — the trace ring: send and receive events recorded into the stats
 * segment (actors/stats.h) while tracing is on, read from outside the
 * process by `kvinspect trace`, which writes Chrome/Perfetto trace JSON.
 *
 * Tracing is on while the header's trace_on word is non-zero: bit
 * TRACE_ON_CONFIG from runtime.trace = true (for the runtime's whole life),
 * bit TRACE_ON_LEASE set by a reader, which keeps pushing trace_until_ns
 * (CLOCK_MONOTONIC) forward while it records; the first event after that
 * deadline clears the bit, so a reader that dies stops the tracing it
 * started within its lease. Off, the cost is one load per send and per
 * receive.
 *
 * Layout: trace_lanes lanes of TRACE_LANE_BYTES header + trace_lane_events
 * events (a power of two) at trace_offset from the segment's start. A
 * thread writes to one lane (threads are spread over the lanes in the order
 * they first record), reserving an index with one fetch-and-add on the
 * lane's head, so any number of writers share a lane without a lock. An
 * event is four 64-bit words, each written with an atomic store:
 *   w[0] seq: index + 1 once the event is complete (0 while it is written)
 *   w[1] ts: CLOCK_MONOTONIC ns (receive: its start; send: the send)
 *   w[2] dur_ns << 32 | message type  (dur 0 for a send)
 *   w[3] actor | peer << 16 | kind << 32 | flags << 40 | tag << 48
 * where actor is the stats slot index of the receiver (TRACE_RECV) or the
 * sender (TRACE_SEND) and peer the other end (TRACE_NOBODY when unknown).
 * The ring overwrites its oldest events: a reader that falls a lap behind,
 * or finds seq changed while it copied, counts the event as lost.
 *
 * Flows: a send is recorded only when the message goes to an actor (not a
 * port) from a named sender, and its envelope is then marked with a tag
 * 1..TRACE_TAGS (the low bits of `from`, see runtime_internal.h) naming
 * the header's trace_epoch at the send; the send event and the receive of
 * the marked message (TRACE_MARKED) both carry the tag. Messages from one
 * sender to one receiver arrive in the order they were sent, so within one
 * tag the n-th marked receive at B from A is the n-th recorded send from A
 * to B — which is how kvinspect draws flow arrows. A reader that lost
 * events (the ring lapped it) bumps trace_epoch: the sends after it carry
 * a new tag, so the lost events shift the pairing of the old tag only,
 * which the reader then leaves without arrows.
 */
#ifndef KVA_ACTORS_TRACE_H
#define KVA_ACTORS_TRACE_H

#include <ck_pr.h>
#include <stdbool.h>
#include <stdint.h>

#define TRACE_LANES 16u
#define TRACE_LANE_EVENTS 16384u /* per lane: 512 KiB, touched only when tracing */
#define TRACE_LANE_BYTES 64u     /* the lane header: head, then padding */
#define TRACE_EVENT_WORDS 4u
#define TRACE_NOBODY 0xffffu /* no stats slot (a private slot, or no sender) */
#define TRACE_TAGS 31u       /* envelope tags 1..31: actors are 64-byte aligned */

enum { TRACE_ON_CONFIG = 1u, TRACE_ON_LEASE = 2u };
enum { TRACE_RECV = 1u, TRACE_SEND = 2u };
enum {
  TRACE_MARKED = 1u,  /* RECV: the message's send was recorded */
  TRACE_IN_RECV = 2u, /* SEND: sent from inside the sender's own receive */
};

typedef struct trace_lane {
  uint64_t head; /* events reserved so far (fetch-and-add) */
  uint64_t pad[TRACE_LANE_BYTES / 8 - 1];
  uint64_t ev[][TRACE_EVENT_WORDS];
} trace_lane;

/* The writer's view of one segment's ring (owned by stats.c). */
typedef struct trace_ring {
  uint32_t *on;        /* the header's trace_on word */
  uint64_t *until_ns;  /* the header's lease deadline */
  uint32_t *epoch;     /* the header's trace_epoch */
  char *lanes;         /* the first lane */
  uint32_t nlanes;     /* TRACE_LANES */
  uint32_t lane_mask;  /* events per lane - 1 */
  uint64_t lane_bytes; /* header + events */
} trace_ring;

/* One event decoded by a reader. */
typedef struct trace_event {
  uint64_t ts_ns;
  uint32_t dur_ns;
  uint32_t type;
  uint16_t actor, peer;
  uint8_t kind, flags;
  uint8_t tag; /* SEND, marked RECV: the epoch tag, 1..TRACE_TAGS */
} trace_event;

static inline trace_lane *trace_lane_at(char *lanes, uint64_t lane_bytes, uint32_t i) {
  return (trace_lane *)(lanes + (uint64_t)i * lane_bytes);
}

/* Whether events are recorded now (t may be NULL: no ring); the one load
 * every send and receive pays. */
static inline bool trace_active(const trace_ring *t) {
  return t && ck_pr_load_32(t->on) != 0;
}
/* The envelope tag of an epoch. */
static inline uint32_t trace_tag(uint32_t epoch) {
  return epoch % TRACE_TAGS + 1;
}
/* A send of `type` from slot `from` to slot `to`: its tag if recorded (the
 * caller then marks the envelope with it), else 0. */
uint32_t trace_send(trace_ring *t, uint32_t from, uint32_t to, uint32_t type, bool in_recv);
/* A receive by slot `actor` of a message from slot `peer` (TRACE_NOBODY
 * when none) that started at start_ns (CLOCK_MONOTONIC) and took dur_ns;
 * tag: the envelope's mark, 0 for an unmarked message. */
void trace_recv(trace_ring *t, uint32_t actor, uint32_t peer, uint32_t type, uint64_t start_ns,
                uint64_t dur_ns, uint32_t tag);
/* Decodes the words of one event (the reader checks seq itself). */
void trace_decode(const uint64_t w[TRACE_EVENT_WORDS], trace_event *out);

#endif
