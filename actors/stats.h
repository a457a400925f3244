/*
 * stats.h — the per-process shared-memory stats segment read by kvinspect.
 *
 * Layout (version KVA_STATS_VERSION; all integers little-endian, native
 * alignment): one stats_header, then max_slots stats_slot records, then
 * (shared segments only) the trace ring of actors/trace.h. A slot
 * is claimed by an actor or port at spawn and given back when it is freed
 * (shown FREE, then reused by a later spawn). Each slot holds
 * the mailbox's live ck_ring counters themselves (so depth = p_tail -
 * c_head is exact at any instant with zero cost to the hot path) and
 * counters written only by the actor's consumer. Readers in other
 * processes see torn-free 32/64-bit values but no cross-field snapshot.
 * An actor may also publish its own label and gauges there (actors/gauges.h):
 * the label and the gauges' names change under label_seq, a sequence lock
 * (odd while they are being written).
 *
 * The segment is /dev/shm/kvact.<pid>.<n> (mode 0600), created at runtime
 * start and unlinked at shutdown. A process killed before its shutdown
 * leaves it behind: the header names its owner (pid, start time, pid
 * namespace), so the next runtime start, in any process, removes it once
 * that owner is gone (stats_owner.c). With runtime.stats = false the same
 * records live in private memory.
 */
#ifndef KVA_ACTORS_STATS_H
#define KVA_ACTORS_STATS_H

#include <ck_ring.h>
#include <stdbool.h>
#include <stdint.h>

#include "actors/trace.h"

#define KVA_STATS_MAGIC 0x3153544341564b00ull /* "\0KVACTS1" */
#define KVA_STATS_VERSION 4u /* 2: the trace ring; 3: the owner; 4: the actor's gauges */
#define KVA_STATS_HIST 32    /* receive-time buckets: [2^i, 2^(i+1)) ns */
#define KVA_STATS_NAME 48
#define KVA_STATS_LABEL 32       /* an instance label: "pid 1234 uid 0" */
#define KVA_STATS_GAUGE_NAMES 64 /* the gauges' names, separated by spaces */
#define KVA_STATS_GAUGES 4

enum { STATS_SLOT_FREE = 0, STATS_SLOT_LIVE = 1, STATS_SLOT_STOPPED = 2 };
enum { STATS_KIND_ACTOR = 0, STATS_KIND_PINNED = 1, STATS_KIND_PORT = 2 };

typedef struct stats_header {
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes; /* sizeof(stats_header) */
  uint32_t slot_bytes;   /* sizeof(stats_slot) */
  uint32_t max_slots;
  uint32_t nslots; /* slots claimed so far (atomic, only grows) */
  uint32_t pid;
  uint64_t start_ns; /* CLOCK_MONOTONIC at creation */
  /* the trace ring (actors/trace.h); trace_offset 0 = none */
  uint64_t trace_offset;      /* bytes from the segment's start to lane 0 */
  uint32_t trace_lanes;       /* lanes */
  uint32_t trace_lane_events; /* events per lane, a power of two */
  uint32_t trace_on;          /* atomic TRACE_ON_* bits */
  uint32_t trace_event_bytes; /* bytes per event */
  uint64_t trace_until_ns;    /* atomic: TRACE_ON_LEASE ends (CLOCK_MONOTONIC) */
  uint32_t trace_epoch;       /* atomic: bumped by a reader that lost events */
  uint32_t trace_pad;
  /* the owner beyond its pid, which another process may get once it dies */
  uint64_t owner_start; /* its start time: /proc/<pid>/stat field 22; 0 = unknown */
  uint64_t owner_pidns; /* inode of its /proc/self/ns/pid; 0 = unknown */
} stats_header;

typedef struct stats_slot {
  ck_ring_t ring; /* the mailbox counters: c_head, p_tail, p_head, size, mask */
  char name[KVA_STATS_NAME];
  uint32_t state;         /* STATS_SLOT_* */
  uint32_t kind;          /* STATS_KIND_* */
  uint64_t dequeued;      /* messages received (consumer-written) */
  uint64_t enqueued;      /* dequeued + depth, as of the consumer's last turn */
  uint64_t peak_depth;    /* deepest mailbox seen at a turn start */
  uint64_t overflowed;    /* messages that went to the overflow queue */
  uint64_t backpressure;  /* sends that had to wait or overflow */
  uint64_t turns;         /* scheduler turns (batches) */
  uint64_t recv_ns_total; /* time spent in receive */
  uint64_t hist[KVA_STATS_HIST];
  /* the actor's own (actors/gauges.h), written only from its receive */
  uint32_t label_seq; /* atomic: odd while the two strings change */
  uint32_t label_pad;
  char label[KVA_STATS_LABEL];             /* its instance; "" = none */
  char gauge_names[KVA_STATS_GAUGE_NAMES]; /* one name per gauge, by spaces */
  uint64_t gauge[KVA_STATS_GAUGES];        /* gauge 0 counts up; the others are levels */
} stats_slot;

typedef struct stats_segment stats_segment;

/* shared = 1 maps /dev/shm/kvact.<pid>.<n> with a trace ring, tracing
 * from the start when trace is true; 0 uses private memory (no ring). */
stats_segment *stats_open(int shared, uint32_t max_slots, bool trace);
void stats_close(stats_segment *s);
/* A zeroed slot, or a private one (never NULL unless out of memory) when
 * the segment is full; private slots are freed by stats_close. */
stats_slot *stats_claim(stats_segment *s, const char *name, uint32_t kind);
/* Gives a stopped actor's slot back: shown free at once, reused by a
 * later claim (its mailbox ring must no longer be used). */
void stats_release(stats_segment *s, stats_slot *slot);
const char *stats_name(const stats_segment *s); /* NULL when private */
/* The slot's index in the segment, TRACE_NOBODY for a private slot. */
uint32_t stats_index(const stats_segment *s, const stats_slot *slot);
trace_ring *stats_trace(stats_segment *s); /* NULL when private */
/* The ring described by a header's trace fields (the writer's view, and a
 * reader's over a mapped segment; check the fields before using it). */
trace_ring stats_trace_view(stats_header *h);
void stats_record_recv(stats_slot *slot, uint64_t ns);

/* ---- owners (stats_owner.c) --------------------------------------------- */

/* Whose segment is it: a running process; one that exited but is not yet
 * reaped (a zombie); gone (no such pid, or the pid now names a process that
 * started at another time); or unknown (another pid namespace, whose pids
 * are not ours to look up, or a header we cannot read). */
enum { STATS_OWNER_LIVE, STATS_OWNER_EXITED, STATS_OWNER_GONE, STATS_OWNER_UNKNOWN };

/* Process pid's start time (clock ticks since boot) and whether it is a
 * zombie, from /proc/<pid>/stat; -errno (ENOENT: no such process). */
int stats_proc_start(int pid, uint64_t *start, bool *zombie);
uint64_t stats_pidns_self(void); /* inode of /proc/self/ns/pid, 0 if unknown */
/* Writes this process into the header's pid and owner fields. */
void stats_owner_fill(stats_header *h);
/* The state of the owner of a current-layout header found under pid's name. */
int stats_owner_state(const stats_header *h, int pid);
const char *stats_owner_name(int state); /* "live", "exited", "gone", "unknown" */
/* Removes every /dev/shm/kvact.<pid>.<n> of the current layout whose owner
 * is gone; returns how many. Segments of live, exited or unknown owners,
 * and those of other layouts, stay. */
unsigned stats_reclaim(void);

#endif
