/*
 * kvinspect_trace.c — `kvinspect trace PID`: records the trace rings of a
 * kvact process (actors/trace.h) for a while and writes Chrome/Perfetto
 * trace JSON: one track per actor, a slice per receive, flow arrows from
 * each recorded send to its receive.
 *
 * Recording: the ring is turned on with a lease (TRACE_ON_LEASE and a
 * deadline pushed forward at every poll), so tracing stops by itself soon
 * after this tool exits, however it exits. The lanes are drained every
 * millisecond; events overwritten before we read them are counted as lost,
 * and a poll that lost some bumps the segment's trace epoch: the tag the
 * lost events may have carried gets no arrows, the sends after the bump
 * carry a new one and get their arrows again.
 */
#include <ck_pr.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/clock.h"
#include "actors/trace.h"
#include "common/array.h"
#include "tools/kvinspect.h"

#define LEASE_NS 2000000000ull /* a dead recorder stops the tracing within this */
#define POLL_NS 1000000ull

typedef struct rec_event {
  trace_event ev;
  uint32_t seg; /* index into the segments */
} rec_event;

typedef struct recording {
  kvi_segment *segs;
  int nsegs;
  uint64_t **cursor; /* [seg][lane]: the next event to read */
  rec_event *ev;
  size_t n, cap, max;
  uint64_t lost;                      /* overwritten, or changed while copied */
  uint64_t not_kept;                  /* over --max-events */
  int lost_now;                       /* this poll lost events */
  uint8_t (*tainted)[TRACE_TAGS + 1]; /* [seg][tag]: pairs of the tag may be shifted */
  uint8_t (*used)[TRACE_TAGS + 1];    /* [seg][tag]: current at some point of this recording */
} recording;

static trace_ring ring_of(const kvi_segment *s) {
  return stats_trace_view((stats_header *)s->hdr);
}

/* Whether the segment holds a ring this tool can read. */
static int check_ring(const kvi_segment *s) {
  const stats_header *h = s->hdr;
  if (h->trace_offset == 0 || h->trace_lanes == 0 ||
      h->trace_event_bytes != TRACE_EVENT_WORDS * 8 ||
      (h->trace_lane_events & (h->trace_lane_events - 1)) != 0 ||
      h->trace_offset + h->trace_lanes * ring_of(s).lane_bytes > s->bytes) {
    fprintf(stderr, "kvinspect trace: /dev/shm/%s has no trace ring this kvinspect can read\n",
            s->name);
    return -1;
  }
  return 0;
}

static void keep(recording *r, uint32_t seg, const trace_event *e) {
  if (r->n == r->max) {
    r->not_kept++;
    return;
  }
  if (!ARRAY_GROW(r->ev, &r->cap, r->n + 1)) {
    r->max = r->n; /* keep what we have; count the rest */
    r->not_kept++;
    return;
  }
  r->ev[r->n++] = (rec_event){*e, seg};
}

/* Reads one lane from *cursor up to its head. An event still being written
 * stops the pass (it is read next time) unless `final`. */
static void drain_lane(recording *r, uint32_t seg, trace_lane *l, uint64_t mask, uint64_t *cursor,
                       int final) {
  uint64_t head = ck_pr_load_64(&l->head), events = mask + 1;
  if (head - *cursor > events) { /* lapped: the oldest are gone */
    r->lost += head - *cursor - events;
    r->lost_now |= r->n < r->max; /* once full, a loss cannot shift what was kept */
    *cursor = head - events;
  }
  for (; *cursor < head; ++*cursor) {
    uint64_t *w = l->ev[*cursor & mask], words[TRACE_EVENT_WORDS];
    uint64_t seq = ck_pr_load_64(&w[0]);
    if (seq < *cursor + 1 && !final) return; /* being written */
    if (seq != *cursor + 1) {
      r->lost++;
      r->lost_now |= r->n < r->max; /* once full, a loss cannot shift what was kept */
      continue;
    }
    ck_pr_fence_load();
    for (unsigned i = 1; i < TRACE_EVENT_WORDS; i++) words[i] = ck_pr_load_64(&w[i]);
    ck_pr_fence_load();
    if (ck_pr_load_64(&w[0]) != seq) { /* overwritten while we copied */
      r->lost++;
      r->lost_now |= r->n < r->max; /* once full, a loss cannot shift what was kept */
      continue;
    }
    trace_event e;
    trace_decode(words, &e);
    keep(r, seg, &e);
  }
}

/* Taints every segment's current tag and, with `bump`, moves the senders
 * to the next tag — only to one this recording has not used, so that a
 * tag's taint always means one stretch of time; once all are used, the
 * current one stays (tainted: no more arrows). */
static void next_epoch(recording *r, int bump) {
  for (int s = 0; s < r->nsegs; s++) {
    uint32_t *epoch = ring_of(&r->segs[s]).epoch;
    uint32_t e = ck_pr_load_32(epoch);
    r->tainted[s][trace_tag(e)] = 1;
    r->used[s][trace_tag(e)] = 1;
    if (!bump || r->used[s][trace_tag(e + 1)]) continue;
    r->used[s][trace_tag(e + 1)] = 1;
    ck_pr_store_32(epoch, e + 1); /* only readers write it, one at a time */
  }
}

/* Reads every lane; a final pass also takes events left half-written. */
static void drain(recording *r, int final) {
  r->lost_now = 0;
  for (int s = 0; s < r->nsegs; s++) {
    trace_ring t = ring_of(&r->segs[s]);
    for (uint32_t i = 0; i < t.nlanes; i++)
      drain_lane(r, (uint32_t)s, trace_lane_at(t.lanes, t.lane_bytes, i), t.lane_mask,
                 &r->cursor[s][i], final);
  }
  if (r->lost_now) next_epoch(r, !final);
}

/* Starts every lane's cursor at its head (only new events), or a lap
 * behind it (what the ring holds now) when `history`. */
static int start_cursors(recording *r, int history) {
  r->cursor = calloc((unsigned)r->nsegs, sizeof(*r->cursor));
  r->tainted = calloc((unsigned)r->nsegs, sizeof(*r->tainted));
  r->used = calloc((unsigned)r->nsegs, sizeof(*r->used));
  if (!r->cursor || !r->tainted || !r->used) return -1;
  for (int s = 0; s < r->nsegs; s++) {
    trace_ring t = ring_of(&r->segs[s]);
    r->cursor[s] = calloc(t.nlanes, sizeof(uint64_t));
    if (!r->cursor[s]) return -1;
    for (uint32_t i = 0; i < t.nlanes; i++) {
      uint64_t head = ck_pr_load_64(&trace_lane_at(t.lanes, t.lane_bytes, i)->head);
      uint64_t events = (uint64_t)t.lane_mask + 1;
      r->cursor[s][i] = !history ? head : head > events ? head - events : 0;
    }
  }
  return 0;
}

/* Holds the lease: deadline first, then the bit, so a writer that sees
 * the bit sees a deadline in the future. */
static void lease_renew(recording *r) {
  uint64_t until = clock_mono_ns() + LEASE_NS;
  for (int s = 0; s < r->nsegs; s++) {
    trace_ring t = ring_of(&r->segs[s]);
    ck_pr_store_64(t.until_ns, until);
    ck_pr_fence_store();
    ck_pr_or_32(t.on, TRACE_ON_LEASE);
  }
}

static void lease_end(recording *r) {
  for (int s = 0; s < r->nsegs; s++) ck_pr_and_32(ring_of(&r->segs[s]).on, ~TRACE_ON_LEASE);
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Records for `seconds`, or until the process exits (checked every
 * 100 polls); returns the seconds recorded. */
static double record(recording *r, int pid, double seconds) {
  if (seconds <= 0) { /* what the ring holds now */
    drain(r, 1);
    return 0;
  }
  uint64_t start = clock_mono_ns(), end = start + (uint64_t)(seconds * 1e9);
  next_epoch(r, 1); /* messages marked before us (runtime.trace) have sends we missed */
  lease_renew(r);
  for (unsigned polls = 1; clock_mono_ns() < end; polls++) {
    sleep_ns(POLL_NS);
    drain(r, 0);
    lease_renew(r);
    if (polls % 100 == 0 && !kvi_alive(pid)) {
      fprintf(stderr, "kvinspect trace: process %d exited; writing what was recorded\n", pid);
      break;
    }
  }
  lease_end(r);
  sleep_ns(POLL_NS); /* events being written when the lease ended */
  drain(r, 1);
  return (double)(clock_mono_ns() - start) / 1e9;
}

/* ---- the JSON ------------------------------------------------------------ */

static int by_time(const void *pa, const void *pb) {
  const rec_event *a = pa, *b = pb;
  if (a->ev.ts_ns != b->ev.ts_ns) return a->ev.ts_ns < b->ev.ts_ns ? -1 : 1;
  return (a->ev.kind > b->ev.kind) - (a->ev.kind < b->ev.kind); /* a receive before a send in it */
}

/* The pair a send or a marked receive belongs to: segment, tag, sender,
 * receiver. */
static uint64_t pair_of(const rec_event *e) {
  uint64_t from = e->ev.kind == TRACE_SEND ? e->ev.actor : e->ev.peer;
  uint64_t to = e->ev.kind == TRACE_SEND ? e->ev.peer : e->ev.actor;
  return (uint64_t)e->seg << 40 | (uint64_t)e->ev.tag << 32 | from << 16 | to;
}

static const rec_event *flow_events;

/* Sends and marked receives of one pair together, each in time order. */
static int by_pair(const void *pa, const void *pb) {
  const rec_event *a = &flow_events[*(const size_t *)pa], *b = &flow_events[*(const size_t *)pb];
  uint64_t x = pair_of(a), y = pair_of(b);
  if (x != y) return x < y ? -1 : 1;
  if (a->ev.kind != b->ev.kind) return a->ev.kind == TRACE_SEND ? -1 : 1;
  size_t i = *(const size_t *)pa, j = *(const size_t *)pb;
  return (i > j) - (i < j); /* the events are in time order already */
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static const char *actor_name(const recording *r, uint32_t seg, uint32_t slot) {
  const kvi_segment *s = &r->segs[seg];
  if (slot >= s->hdr->max_slots) return "?";
  return s->slots[slot].name; /* NUL-terminated by the runtime's snprintf */
}

typedef struct writer {
  FILE *f;
  const recording *r;
  uint64_t t0; /* ns: the origin of ts */
  int first;
} writer;

static void begin_event(writer *w) {
  fputs(w->first ? "\n  " : ",\n  ", w->f);
  w->first = 0;
}

static double us(const writer *w, uint64_t ns) {
  return ns >= w->t0 ? (double)(ns - w->t0) / 1e3 : 0;
}

static void write_names(writer *w, const uint8_t *used) {
  for (int s = 0; s < w->r->nsegs; s++) {
    const kvi_segment *seg = &w->r->segs[s];
    begin_event(w);
    fprintf(w->f,
            "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"kvact %u "
            "runtime %u\"}}",
            s, seg->hdr->pid, seg->seq);
    for (uint32_t i = 0; i < seg->hdr->max_slots; i++) {
      if (!used[(size_t)s * 65536 + i]) continue;
      begin_event(w);
      fprintf(w->f,
              "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%u,\"args\":{\"name\":", s,
              i);
      json_string(w->f, seg->slots[i].name);
      fputs("}}", w->f);
    }
  }
}

static void write_slice(writer *w, const rec_event *e, const char *cat, double dur_us) {
  char type[64];
  begin_event(w);
  fprintf(w->f, "{\"ph\":\"X\",\"cat\":\"%s\",\"name\":", cat);
  json_string(w->f, kvi_type_name(e->ev.type, type, sizeof type));
  fprintf(w->f, ",\"pid\":%u,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"type\":%u", e->seg,
          e->ev.actor, us(w, e->ev.ts_ns), dur_us, e->ev.type);
  if (e->ev.peer != TRACE_NOBODY) {
    fputs(e->ev.kind == TRACE_SEND ? ",\"to\":" : ",\"from\":", w->f);
    json_string(w->f, actor_name(w->r, e->seg, e->ev.peer));
  }
  fputs("}}", w->f);
}

static void write_flow(writer *w, const rec_event *send, const rec_event *recv, uint64_t id) {
  /* a send made outside a receive (a port, an engine thread) gets a
   * 1 ns slice of its own for the arrow to start from */
  if (!(send->ev.flags & TRACE_IN_RECV)) write_slice(w, send, "send", 0.001);
  begin_event(w);
  fprintf(w->f,
          "{\"ph\":\"s\",\"cat\":\"flow\",\"name\":\"message\",\"id\":%llu,\"pid\":%u,\"tid\":%u,"
          "\"ts\":%.3f}",
          (unsigned long long)id, send->seg, send->ev.actor, us(w, send->ev.ts_ns));
  begin_event(w);
  fprintf(w->f,
          "{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"flow\",\"name\":\"message\",\"id\":%llu,"
          "\"pid\":%u,\"tid\":%u,\"ts\":%.3f}",
          (unsigned long long)id, recv->seg, recv->ev.actor, us(w, recv->ev.ts_ns));
}

/* Pairs the n-th recorded send of a pair with its n-th marked receive (per
 * sender FIFO), within one tag. A tag that may have lost events gets no
 * arrows; otherwise a pair still stops at its first send that is not older
 * than its receive or of another type. */
static uint64_t write_flows(writer *w, uint64_t *unpaired) {
  const recording *r = w->r;
  size_t *idx = malloc((r->n + 1) * sizeof(size_t)), m = 0;
  if (!idx) return 0;
  for (size_t i = 0; i < r->n; i++) {
    const trace_event *e = &r->ev[i].ev;
    if (e->kind == TRACE_SEND || (e->kind == TRACE_RECV && (e->flags & TRACE_MARKED))) idx[m++] = i;
  }
  flow_events = r->ev;
  qsort(idx, m, sizeof(size_t), by_pair);
  uint64_t flows = 0;
  for (size_t a = 0; a < m;) {
    size_t b = a, sends;
    while (b < m && pair_of(&r->ev[idx[b]]) == pair_of(&r->ev[idx[a]])) b++;
    for (sends = a; sends < b && r->ev[idx[sends]].ev.kind == TRACE_SEND; sends++) {
    }
    size_t nsend = sends - a, nrecv = b - sends, k = 0;
    const rec_event *first = &r->ev[idx[a]];
    if (r->tainted[first->seg][first->ev.tag]) nsend = 0; /* its pairing may be shifted */
    for (; k < nsend && k < nrecv; k++) {
      const rec_event *s = &r->ev[idx[a + k]], *v = &r->ev[idx[sends + k]];
      if (s->ev.ts_ns > v->ev.ts_ns || s->ev.type != v->ev.type) break;
      write_flow(w, s, v, ++flows);
    }
    *unpaired += (sends - a - k) + (nrecv - k);
    a = b;
  }
  free(idx);
  return flows;
}

/* Writes the recording to path; prints the summary. */
static int write_trace(recording *r, const char *path, uint64_t t0, double seconds) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "kvinspect trace: %s: %s\n", path, strerror(errno));
    return 1;
  }
  qsort(r->ev, r->n, sizeof(*r->ev), by_time);
  if (r->n && (seconds <= 0 || r->ev[0].ev.ts_ns < t0)) t0 = r->ev[0].ev.ts_ns;
  uint8_t *used = calloc((size_t)r->nsegs * 65536, 1);
  if (!used) {
    fclose(f);
    return 1;
  }
  size_t actors = 0;
  for (size_t i = 0; i < r->n; i++) {
    uint8_t *u = &used[(size_t)r->ev[i].seg * 65536 + r->ev[i].ev.actor];
    actors += !*u;
    *u = 1;
  }
  writer w = {f, r, t0, 1};
  fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f);
  write_names(&w, used);
  uint64_t slices = 0, unpaired = 0;
  for (size_t i = 0; i < r->n; i++) {
    if (r->ev[i].ev.kind != TRACE_RECV) continue;
    write_slice(&w, &r->ev[i], "receive", (double)r->ev[i].ev.dur_ns / 1e3);
    slices++;
  }
  uint64_t flows = write_flows(&w, &unpaired);
  fprintf(f,
          "\n],\"otherData\":{\"pid\":%u,\"seconds\":%.3f,\"events\":%zu,\"receives\":%llu,"
          "\"flows\":%llu,\"unpaired\":%llu,\"lost\":%llu,\"not_kept\":%llu}}\n",
          r->segs[0].hdr->pid, seconds, r->n, (unsigned long long)slices, (unsigned long long)flows,
          (unsigned long long)unpaired, (unsigned long long)r->lost,
          (unsigned long long)r->not_kept);
  free(used);
  if (fclose(f) != 0) {
    fprintf(stderr, "kvinspect trace: %s: %s\n", path, strerror(errno));
    return 1;
  }
  printf("kvinspect trace: %llu receives by %zu actors, %llu flows, %llu events lost, %llu not "
         "kept -> %s (open in https://ui.perfetto.dev or chrome://tracing)\n",
         (unsigned long long)slices, actors, (unsigned long long)flows, (unsigned long long)r->lost,
         (unsigned long long)r->not_kept, path);
  return 0;
}

int kvi_trace(int pid, double seconds, const char *path, size_t max_events) {
  recording r = {.max = max_events};
  if (kvi_open_all(pid, &r.segs, &r.nsegs, 1) != 0) return 1;
  int rc = 1;
  for (int s = 0; s < r.nsegs; s++)
    if (check_ring(&r.segs[s]) != 0) goto out;
  if (start_cursors(&r, seconds <= 0) != 0) {
    fprintf(stderr, "kvinspect trace: out of memory\n");
    goto out;
  }
  uint64_t t0 = clock_mono_ns();
  rc = write_trace(&r, path, t0, record(&r, pid, seconds));
out:
  for (int s = 0; r.cursor && s < r.nsegs; s++) free(r.cursor[s]);
  free(r.cursor);
  free(r.tainted);
  free(r.used);
  free(r.ev);
  kvi_close_all(r.segs, r.nsegs);
  return rc;
}
