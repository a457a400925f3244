/*
 * stats.c — create, fill and remove the shared-memory stats segment (the
 * segments that killed processes left are removed in stats_owner.c).
 */
#include "actors/stats.h"

#include <ck_pr.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/array.h"

typedef struct private_slot {
  struct private_slot *next;
  stats_slot slot;
} private_slot;

struct stats_segment {
  stats_header *hdr;
  stats_slot *slots;
  size_t bytes;
  int shared;
  char name[64];
  pthread_mutex_t lock; /* guards the private list and the free slots */
  private_slot *privates;
  /* slots given back by stopped actors, reused before new ones: spawning
   * and stopping actors forever keeps the segment and the heap flat */
  stats_slot **free;
  size_t nfree, free_cap;
  trace_ring trace; /* lanes == NULL without a ring */
};

static uint32_t segment_seq; /* atomic: distinguishes runtimes of one process */

static void *map_segment(stats_segment *s) {
  unsigned n = ck_pr_faa_32(&segment_seq, 1);
  snprintf(s->name, sizeof(s->name), "/kvact.%d.%u", (int)getpid(), n);
  int fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {
    /* the name holds our pid and our own counter, so an existing segment
     * was left by a dead process that had this pid (killed before its
     * shutdown unlinked it): reclaim it */
    shm_unlink(s->name);
    fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  if (fd < 0) return NULL;
  void *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)s->bytes) == 0)
    p = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(s->name);
    return NULL;
  }
  return p;
}

static size_t slots_end(uint32_t max_slots) {
  size_t end = sizeof(stats_header) + (size_t)max_slots * sizeof(stats_slot);
  return (end + 4095) & ~(size_t)4095; /* the lanes start on a page */
}

static uint64_t lane_bytes(uint32_t events, uint32_t event_bytes) {
  return TRACE_LANE_BYTES + (uint64_t)events * event_bytes;
}

trace_ring stats_trace_view(stats_header *h) {
  return (trace_ring){.on = &h->trace_on,
                      .until_ns = &h->trace_until_ns,
                      .epoch = &h->trace_epoch,
                      .lanes = (char *)h + h->trace_offset,
                      .nlanes = h->trace_lanes,
                      .lane_mask = h->trace_lane_events - 1,
                      .lane_bytes = lane_bytes(h->trace_lane_events, h->trace_event_bytes)};
}

/* The ring's fields in the header, and the writer's view of them. The
 * lanes' pages stay untouched (and cost no memory) until events arrive. */
static void trace_setup(stats_segment *s, uint32_t max_slots, bool trace) {
  stats_header *h = s->hdr;
  h->trace_offset = slots_end(max_slots);
  h->trace_lanes = TRACE_LANES;
  h->trace_lane_events = TRACE_LANE_EVENTS;
  h->trace_event_bytes = TRACE_EVENT_WORDS * 8;
  h->trace_on = trace ? TRACE_ON_CONFIG : 0;
  s->trace = stats_trace_view(h);
}

stats_segment *stats_open(int shared, uint32_t max_slots, bool trace) {
  stats_segment *s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->bytes =
      slots_end(max_slots) + TRACE_LANES * lane_bytes(TRACE_LANE_EVENTS, TRACE_EVENT_WORDS * 8);
  if (shared) stats_reclaim(); /* what killed processes left, before we add ours */
  void *p = shared ? map_segment(s) : NULL;
  s->shared = p != NULL;
  if (!p) { /* private, or shm unavailable: the slots only, no trace ring */
    s->bytes = sizeof(stats_header) + (size_t)max_slots * sizeof(stats_slot);
    p = calloc(1, s->bytes);
  }
  if (!p) {
    free(s);
    return NULL;
  }
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  s->hdr = p;
  s->slots = (stats_slot *)(s->hdr + 1);
  s->hdr->header_bytes = sizeof(stats_header);
  s->hdr->slot_bytes = sizeof(stats_slot);
  s->hdr->max_slots = max_slots;
  stats_owner_fill(s->hdr);
  s->hdr->start_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  s->hdr->version = KVA_STATS_VERSION;
  if (s->shared) trace_setup(s, max_slots, trace);
  ck_pr_fence_store(); /* the magic goes last: readers trust the header after it */
  ck_pr_store_64(&s->hdr->magic, KVA_STATS_MAGIC);
  pthread_mutex_init(&s->lock, NULL);
  return s;
}

void stats_close(stats_segment *s) {
  if (!s) return;
  if (s->shared) {
    munmap(s->hdr, s->bytes);
    shm_unlink(s->name);
  } else {
    free(s->hdr);
  }
  for (private_slot *p = s->privates, *next; p; p = next) {
    next = p->next;
    free(p);
  }
  free(s->free);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

static stats_slot *claim_private(stats_segment *s) {
  private_slot *p = aligned_alloc(64, (sizeof(*p) + 63) & ~(size_t)63);
  if (!p) return NULL;
  memset(p, 0, sizeof(*p));
  pthread_mutex_lock(&s->lock);
  p->next = s->privates;
  s->privates = p;
  pthread_mutex_unlock(&s->lock);
  return &p->slot;
}

/* A slot a stopped actor gave back, or NULL. */
static stats_slot *claim_free(stats_segment *s) {
  pthread_mutex_lock(&s->lock);
  stats_slot *slot = s->nfree ? s->free[--s->nfree] : NULL;
  pthread_mutex_unlock(&s->lock);
  return slot;
}

stats_slot *stats_claim(stats_segment *s, const char *name, uint32_t kind) {
  stats_slot *slot = claim_free(s);
  if (!slot) {
    uint32_t i = ck_pr_load_32(&s->hdr->nslots) < s->hdr->max_slots
                     ? ck_pr_faa_32(&s->hdr->nslots, 1)
                     : s->hdr->max_slots;
    if (i < s->hdr->max_slots) {
      slot = &s->slots[i];
    } else {
      ck_pr_store_32(&s->hdr->nslots, s->hdr->max_slots); /* undo the overshoot */
      slot = claim_private(s);
      if (!slot) return NULL;
    }
  }
  snprintf(slot->name, sizeof(slot->name), "%s", name ? name : "actor");
  slot->kind = kind;
  ck_pr_fence_store(); /* name and kind before the slot shows as live */
  ck_pr_store_32(&slot->state, STATS_SLOT_LIVE);
  return slot;
}

/* The slot shows as free at once (kvinspect's table skips it), then its
 * counters are zeroed for its next actor. The name stays until then: a
 * trace recorded before names its events by slot. No room on the free
 * list (out of memory): the slot is lost, which costs memory, never
 * correctness. */
void stats_release(stats_segment *s, stats_slot *slot) {
  ck_pr_store_32(&slot->state, STATS_SLOT_FREE);
  ck_pr_fence_store(); /* free before the counters go back to zero */
  memset((char *)slot + offsetof(stats_slot, dequeued), 0,
         sizeof(*slot) - offsetof(stats_slot, dequeued));
  pthread_mutex_lock(&s->lock);
  if (ARRAY_GROW(s->free, &s->free_cap, s->nfree + 1)) s->free[s->nfree++] = slot;
  pthread_mutex_unlock(&s->lock);
}

const char *stats_name(const stats_segment *s) {
  return s->shared ? s->name : NULL;
}

uint32_t stats_index(const stats_segment *s, const stats_slot *slot) {
  uintptr_t first = (uintptr_t)s->slots, at = (uintptr_t)slot; /* may be a private slot */
  if (at < first || at >= first + (uintptr_t)s->hdr->max_slots * sizeof(stats_slot))
    return TRACE_NOBODY;
  uint32_t i = (uint32_t)((at - first) / sizeof(stats_slot));
  return i < TRACE_NOBODY ? i : TRACE_NOBODY;
}

trace_ring *stats_trace(stats_segment *s) {
  return s->trace.lanes ? &s->trace : NULL;
}

static unsigned log2_bucket(uint64_t ns) {
  unsigned b = ns ? 63u - (unsigned)__builtin_clzll(ns) : 0;
  return b < KVA_STATS_HIST ? b : KVA_STATS_HIST - 1;
}

/* Only the actor's consumer writes its slot: plain read-modify-write with
 * atomic stores so a reader in another process never sees a torn value. */
void stats_record_recv(stats_slot *slot, uint64_t ns) {
  unsigned b = log2_bucket(ns);
  ck_pr_store_64(&slot->hist[b], slot->hist[b] + 1);
  ck_pr_store_64(&slot->recv_ns_total, slot->recv_ns_total + ns);
}
