/*
 * det.c — deterministic mode (runtime.workers = 0).
 *
 * Every actor runs on the calling thread. The ready list is chosen from by
 * a PRNG seeded from runtime.seed and one message is delivered per step, so
 * the interleaving depends only on the seed and the program: a failing
 * interleaving is replayed by running again with the same seed. Timers run
 * on virtual time, moved only by kva_runtime_advance.
 */
#include <stdlib.h>
#include <time.h>

#include <ck_pr.h>

#include "actors/runtime_internal.h"
#include "common/array.h"

struct det_state {
  kva_actor **ready;
  size_t n, cap;
  uint64_t rng;
  uint64_t now; /* virtual ns */
};

int det_create(kva_runtime *rt, uint64_t seed) {
  det_state *d = calloc(1, sizeof(*d));
  if (!d) return KVA_ENOMEM;
  d->rng = seed ^ 0x9e3779b97f4a7c15ull;
  rt->det = d;
  return KVA_OK;
}

void det_destroy(kva_runtime *rt) {
  if (!rt->det) return;
  free(rt->det->ready);
  free(rt->det);
  rt->det = NULL;
}

/* splitmix64: tiny, fast, and good enough to pick among ready actors */
static uint64_t det_next(det_state *d) {
  uint64_t z = (d->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void det_ready(kva_runtime *rt, kva_actor *a) {
  det_state *d = rt->det;
  if (!ARRAY_GROW(d->ready, &d->cap, d->n + 1)) abort(); /* cannot lose a ready actor */
  d->ready[d->n++] = a;
}

bool det_step(kva_runtime *rt) {
  det_state *d = rt->det;
  if (d->n == 0) return false;
  size_t i = (size_t)(det_next(d) % d->n);
  kva_actor *a = d->ready[i];
  d->ready[i] = d->ready[--d->n]; /* taken out while it runs */
  bool more = actor_run_batch(a, 1);
  if (more || sched_release(a)) det_ready(rt, a);
  return true;
}

int64_t kva_runtime_run_until_idle(kva_runtime *rt) {
  if (!rt || !rt->det) return KVA_ENOTSUP;
  int64_t n = 0;
  for (;;) {
    while (det_step(rt)) n++;
    if (poller_det_fire_due(rt, rt->det->now)) continue;
    if (poller_det_poll(rt)) continue;
    return n;
  }
}

int64_t kva_runtime_advance(kva_runtime *rt, uint64_t ns) {
  if (!rt || !rt->det) return KVA_ENOTSUP;
  det_state *d = rt->det;
  uint64_t target = d->now + ns, deadline;
  int64_t n = kva_runtime_run_until_idle(rt);
  while (poller_det_next_timer(rt, &deadline) && deadline <= target) {
    if (deadline > d->now) d->now = deadline;
    n += kva_runtime_run_until_idle(rt);
  }
  d->now = target;
  return n + kva_runtime_run_until_idle(rt);
}

int kva_runtime_deterministic(const kva_runtime *rt) {
  return rt && rt->det;
}

uint64_t kva_runtime_now_ns(const kva_runtime *rt) {
  if (!rt) return 0;
  if (rt->det) return rt->det->now;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
