/*
 * ring_anchor: raw ck_ring MPSC throughput, one producer thread and one
 * consumer thread, as the ceiling for kvact's mailbox (which is a ck_ring).
 *
 * Two variants, both on a ring of RING_SLOTS slots (ck 0.7.1 holds
 * RING_SLOTS - 1 entries), both sides spinning with ck_pr_stall() on
 * full/empty:
 *   mpsc-1p1c-ptr  ck_ring_enqueue_mpsc / ck_ring_dequeue_mpsc of a pointer
 *   mpsc-1p1c-64B  CK_RING_PROTOTYPE typed MPSC copying a 64-byte envelope,
 *                  the size of a kvact mailbox envelope
 *
 * stdout carries exactly one line per variant (parsed by kvbench):
 *   anchor=ck_ring measure=<name> msgs_per_s=<number> median_of=<R>
 * or, with --json, one JSON object per line with the same keys. Diagnostics
 * go to stderr. Exit 1 if the consumer saw a value out of order.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ck_pr.h>
#include <ck_ring.h>

#define RING_SLOTS 1024 /* power of two, as ck_ring_init requires */
#define MAX_REPS 1000

/* Stand-in for a kvact mailbox envelope: 64 bytes, one cache line. */
typedef struct envelope {
  uint64_t seq;      /* 1-based sequence number, checked by the consumer */
  uint64_t words[7]; /* filler; words[6] mirrors seq to catch torn copies */
} envelope;

_Static_assert(sizeof(envelope) == 64, "envelope must be 64 bytes");

CK_RING_PROTOTYPE(envelope, envelope)

typedef struct options {
  uint64_t messages; /* messages per rep */
  int reps;          /* repetitions; the median is printed */
  int slot_bytes;    /* 0: both variants, 8: pointer only, 64: envelope only */
  bool json;         /* JSON lines instead of key=value lines */
  bool verbose;      /* per-rep figures on stderr */
} options;

/* One rep's shared state; the ring and its buffers are reinitialised per rep. */
typedef struct bench {
  ck_ring_t ring CK_CC_CACHELINE;
  ck_ring_buffer_t ptr_slots[RING_SLOTS] CK_CC_CACHELINE;
  envelope env_slots[RING_SLOTS] CK_CC_CACHELINE;
  uint64_t messages;   /* messages the producer sends */
  uint64_t mismatches; /* values the consumer saw out of order */
  atomic_bool go;      /* released by main once both threads exist */
} bench;

static void wait_for_go(bench *b) {
  /* Acquire pairs with main's release so ring init is visible before use. */
  while (!atomic_load_explicit(&b->go, memory_order_acquire)) ck_pr_stall();
}

static void *ptr_producer(void *arg) {
  bench *b = arg;
  wait_for_go(b);
  const uint64_t n = b->messages;
  for (uint64_t i = 1; i <= n; i++)
    while (!ck_ring_enqueue_mpsc(&b->ring, b->ptr_slots, (void *)(uintptr_t)i)) ck_pr_stall();
  return NULL;
}

static void *ptr_consumer(void *arg) {
  bench *b = arg;
  uint64_t mismatches = 0;
  wait_for_go(b);
  const uint64_t n = b->messages;
  for (uint64_t want = 1; want <= n; want++) {
    void *v;
    while (!ck_ring_dequeue_mpsc(&b->ring, b->ptr_slots, &v)) ck_pr_stall();
    mismatches += (uintptr_t)v != want;
  }
  b->mismatches = mismatches; /* published to main by pthread_join */
  return NULL;
}

static void *env_producer(void *arg) {
  bench *b = arg;
  envelope e = {0};
  wait_for_go(b);
  const uint64_t n = b->messages;
  for (uint64_t i = 1; i <= n; i++) {
    e.seq = i;
    e.words[6] = i;
    while (!ck_ring_enqueue_mpsc_envelope(&b->ring, b->env_slots, &e)) ck_pr_stall();
  }
  return NULL;
}

static void *env_consumer(void *arg) {
  bench *b = arg;
  uint64_t mismatches = 0;
  wait_for_go(b);
  const uint64_t n = b->messages;
  for (uint64_t want = 1; want <= n; want++) {
    envelope e;
    while (!ck_ring_dequeue_mpsc_envelope(&b->ring, b->env_slots, &e)) ck_pr_stall();
    mismatches += e.seq != want || e.words[6] != want;
  }
  b->mismatches = mismatches;
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * One rep: both threads are created and parked first, so the timed span is
 * only the transfer. Returns msgs/s, or a negative value on failure.
 */
static double run_once(bench *b, void *(*prod)(void *), void *(*cons)(void *)) {
  pthread_t p, c;
  ck_ring_init(&b->ring, RING_SLOTS);
  b->mismatches = 0;
  atomic_store_explicit(&b->go, false, memory_order_relaxed); /* threads not yet started */
  if (pthread_create(&c, NULL, cons, b) != 0) return -1.0;
  if (pthread_create(&p, NULL, prod, b) != 0) {
    b->messages = 0; /* nothing to consume; published by the release below */
    atomic_store_explicit(&b->go, true, memory_order_release);
    pthread_join(c, NULL);
    return -1.0;
  }
  double t0 = now_s();
  /* Release: ring init above must be visible to both threads. */
  atomic_store_explicit(&b->go, true, memory_order_release);
  pthread_join(p, NULL);
  pthread_join(c, NULL);
  double dt = now_s() - t0;
  return b->mismatches ? -2.0 : (double)b->messages / dt;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

static void report(const options *o, const char *name, double rate) {
  if (o->json)
    printf("{\"anchor\":\"ck_ring\",\"measure\":\"%s\",\"msgs_per_s\":%.0f,\"median_of\":%d}\n",
           name, rate, o->reps);
  else
    printf("anchor=ck_ring measure=%s msgs_per_s=%.0f median_of=%d\n", name, rate, o->reps);
  fflush(stdout);
}

/* Runs one variant o->reps times and prints the median; returns 0 or 1. */
static int run_variant(bench *b, const options *o, const char *name, void *(*prod)(void *),
                       void *(*cons)(void *)) {
  double rates[MAX_REPS];
  for (int r = 0; r < o->reps; r++) {
    b->messages = o->messages;
    rates[r] = run_once(b, prod, cons);
    if (rates[r] == -2.0) {
      fprintf(stderr, "ring_anchor: %s rep %d: %" PRIu64 " values out of order\n", name, r,
              b->mismatches);
      return 1;
    }
    if (rates[r] < 0) {
      fprintf(stderr, "ring_anchor: %s rep %d: pthread_create failed\n", name, r);
      return 1;
    }
    if (o->verbose) fprintf(stderr, "ring_anchor: %s rep %d: %.0f msgs/s\n", name, r, rates[r]);
  }
  report(o, name, median(rates, o->reps));
  return 0;
}

static void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--messages N] [--reps R] [--slot-bytes 8|64] [--json] [--verbose]\n"
          "  without --slot-bytes both variants run\n",
          argv0);
}

static bool parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min || v > max) return false;
  *out = v;
  return true;
}

/* Returns 0 on success, -EINVAL on a bad argument. */
static int parse_args(int argc, char **argv, options *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : "";
    uint64_t v = 0;
    if (strcmp(a, "--json") == 0) {
      o->json = true;
    } else if (strcmp(a, "--verbose") == 0) {
      o->verbose = true;
    } else if (strcmp(a, "--messages") == 0 && parse_u64(val, 1, UINT64_MAX, &v)) {
      o->messages = v, i++;
    } else if (strcmp(a, "--reps") == 0 && parse_u64(val, 1, MAX_REPS, &v)) {
      o->reps = (int)v, i++;
    } else if (strcmp(a, "--slot-bytes") == 0 && parse_u64(val, 8, 64, &v) && (v == 8 || v == 64)) {
      o->slot_bytes = (int)v, i++;
    } else {
      return -EINVAL;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  options o = {.messages = 10000000, .reps = 5};
  if (parse_args(argc, argv, &o) != 0) {
    usage(argv[0]);
    return 2;
  }
  bench *b = aligned_alloc(CK_MD_CACHELINE, sizeof(bench));
  if (b == NULL) {
    fprintf(stderr, "ring_anchor: out of memory\n");
    return 1;
  }
  int rc = 0;
  if (o.slot_bytes != 64) rc |= run_variant(b, &o, "mpsc-1p1c-ptr", ptr_producer, ptr_consumer);
  if (rc == 0 && o.slot_bytes != 8)
    rc |= run_variant(b, &o, "mpsc-1p1c-64B", env_producer, env_consumer);
  free(b);
  return rc;
}
