/*
 * kvinspect.h — shared types of kvinspect's files: kvinspect.c (options,
 * the refresh loop), kvinspect_segment.c (finding, mapping and sampling the
 * stats segments of a process), kvinspect_show.c (the table and JSON),
 * kvinspect_trace.c (`kvinspect trace`: the trace ring to Chrome/Perfetto
 * JSON) and kvinspect_types.c (names of kvact's message types).
 */
#ifndef KVA_TOOLS_KVINSPECT_H
#define KVA_TOOLS_KVINSPECT_H

#include <stddef.h>
#include <stdint.h>

#include "actors/stats.h"

/* One actor's (or port's) row, from two samples of its slot. */
typedef struct kvi_row {
  char name[KVA_STATS_NAME];
  const char *kind;      /* "actor", "pinned", "port" */
  const char *state;     /* "live", "stopped"; "stale" when its process is dead */
  uint64_t depth;        /* p_tail - c_head of the live ring */
  uint64_t peak_depth;   /* deepest mailbox at a turn start */
  uint64_t enqueued;     /* as of the consumer's last turn */
  uint64_t dequeued;     /* messages received */
  double rate;           /* dequeued per second over the last interval */
  uint64_t p50_ns;       /* receive time: upper bound of the p50 bucket, 0 = none */
  uint64_t p99_ns;       /* same for p99 */
  uint64_t overflowed;   /* messages that went to the overflow queue */
  uint64_t backpressure; /* sends that had to wait or overflow */
  uint64_t turns;        /* scheduler turns */
  /* the actor's own label and gauges (actors/gauges.h); label "" = none */
  char label[KVA_STATS_LABEL];
  /* the gauges' names, copies: qsort moves rows, so no pointers into one */
  char gauge_name[KVA_STATS_GAUGES][KVA_STATS_GAUGE_NAMES];
  unsigned ngauges; /* named gauges: the ones shown */
  uint64_t gauge[KVA_STATS_GAUGES];
  double gauge0_rate; /* gauge 0 (a counter) per second over the last interval */
} kvi_row;

/* One mapped segment /dev/shm/kvact.<pid>.<n> (read-only unless traced). */
typedef struct kvi_segment {
  char name[64];           /* "kvact.<pid>.<n>" */
  unsigned seq;            /* <n> */
  const stats_header *hdr; /* the mapping */
  const stats_slot *slots; /* hdr + header_bytes */
  size_t bytes;            /* mapping length */
  uint64_t *prev_dequeued; /* max_slots counters of the previous sample */
  uint64_t *prev_gauge0;   /* max_slots gauge 0s of the previous sample */
  kvi_row *rows;           /* max_slots rows; nrows filled by kvi_sample */
  uint32_t nrows;
  double uptime_s; /* since the runtime created the segment */
  int owner;       /* STATS_OWNER_* of the process that made it, when mapped */
} kvi_segment;

/* A segment its process left behind: exited (a zombie) or gone. */
int kvi_stale(const kvi_segment *s);

enum { KVI_SORT_NAME, KVI_SORT_DEPTH, KVI_SORT_RATE, KVI_SORT_P99 };

/* Whether process pid still runs: it exists and is not a zombie (a
 * process that exited but was not yet reaped by its parent). */
int kvi_alive(int pid);
/* How many /dev/shm/kvact.<pid>.* there are (-1: /dev/shm unreadable). */
int kvi_segment_count(int pid);
/* Maps every segment of pid into *out (sorted by <n>), writable for
 * `kvinspect trace` (which turns tracing on); on failure prints the reason
 * to stderr and returns -1. */
int kvi_open_all(int pid, kvi_segment **out, int *count, int writable);
void kvi_close_all(kvi_segment *segs, int count);
/* Remembers every slot's dequeued counter and gauge 0 (the start of an
 * interval). */
void kvi_mark(kvi_segment *s);
/* Fills s->rows from the slots, rates over `seconds` since kvi_mark. */
void kvi_sample(kvi_segment *s, double seconds);
void kvi_sort(kvi_segment *s, int key);

void kvi_show_table(int pid, const kvi_segment *segs, int count, int interval_ms,
                    const char *sort_name, int clear);
/* Returns 0, or -1 when jansson failed. */
int kvi_show_json(int pid, const kvi_segment *segs, int count, int interval_ms);

/* Records the trace rings of pid for `seconds` (0: what they hold now)
 * into Chrome/Perfetto JSON at path. Returns the exit status. */
int kvi_trace(int pid, double seconds, const char *path, size_t max_events);
/* "L1_RESERVE_WRITE", or "msg N" / "user N" written into buf. */
const char *kvi_type_name(uint32_t type, char *buf, size_t len);

#endif
