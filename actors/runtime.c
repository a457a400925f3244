/*
 * runtime.c — starting and shutting down a runtime.
 *
 * Shutdown order, and why:
 *  1. refuse new spawns and ports;
 *  2. stop the poller: no new timer or fd messages;
 *  3. wait until quiescent (no message queued, no actor running);
 *  4. stop actors newest first, one at a time, each fully (queued messages,
 *     then on_stop) and the system quiescent again before the next: storage
 *     controllers are spawned after the L1 manager, so they stop first and
 *     their on_stop can still release locks held in older actors;
 *  5. join the workers and pinned threads, free everything. Actors that
 *     stop from step 1 on keep their record until here (actor_finish), so
 *     that an on_stop may still send to an actor stopped before it.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ck_pr.h>

#include "actors/clock.h"
#include "actors/log.h"
#include "actors/runtime_internal.h"
#include "config/config_internal.h"

#define RUNQ_CAP (1u << 16) /* also the actor limit of one runtime */
#define STATS_SLOTS 4096u

static int runtime_init(kva_runtime *rt) {
  bool stats_on = config_bool(rt->cfg, "runtime.stats");
  rt->workers = (uint32_t)config_i64(rt->cfg, "runtime.workers"); /* CPUs resolved at load */
  rt->batch = (uint32_t)config_i64(rt->cfg, "runtime.batch");
  rt->mailbox_capacity = (uint32_t)config_i64(rt->cfg, "runtime.mailbox_capacity");
  rt->runq_cap = RUNQ_CAP;
  rt->fork_gen = runtime_fork_gen();
  rt->pid = (int)getpid();
  rt->spin_ns = (uint64_t)config_i64(rt->cfg, "runtime.spin_us") * 1000u;
  pthread_mutex_init(&rt->reg_lock, NULL);
  pthread_mutex_init(&rt->mute_lock, NULL);
  clock_calibrate();
  rt->stats = stats_open(stats_on, STATS_SLOTS, config_bool(rt->cfg, "runtime.trace"));
  rt->pool = payload_pool_create();
  if (!rt->stats || !rt->pool) return KVA_ENOMEM;
  rt->trace = stats_trace(rt->stats);
  if (rt->workers == 0) {
    int rc = det_create(rt, (uint64_t)config_i64(rt->cfg, "runtime.seed"));
    if (rc != KVA_OK) return rc;
  }
  int rc = poller_create(rt);
  if (rc != KVA_OK) return rc;
  return rt->det ? KVA_OK : sched_start(rt);
}

static void runtime_free(kva_runtime *rt) {
  poller_destroy(rt);
  if (rt->threads) sched_stop(rt);
  actor_reap_zombies(rt);
  for (kva_actor *a = rt->actors; a; a = a->next_all) pinned_join(a);
  /* no thread of the runtime is left: what is still listed (ports never
   * closed, actors a caller still counted on) goes, whatever its refs */
  for (kva_actor *a = rt->actors, *next; a; a = next) {
    next = a->next_all;
    if (a->kind == ACTOR_PORT) free(a->state); /* a port never closed */
    actor_free(a);
  }
  det_destroy(rt);
  payload_pool_destroy(rt->pool);
  stats_close(rt->stats);
  pthread_mutex_destroy(&rt->reg_lock);
  pthread_mutex_destroy(&rt->mute_lock);
  kva_config_free(rt->cfg);
  free(rt);
}

int runtime_create(const kva_config *cfg, kva_runtime **out) {
  if (!out) return KVA_EINVAL;
  *out = NULL;
  kva_runtime *rt = calloc(1, sizeof(*rt));
  if (!rt) return KVA_ENOMEM;
  rt->cfg = cfg ? config_copy(cfg) : kva_config_default();
  if (!rt->cfg) {
    free(rt);
    return KVA_ENOMEM;
  }
  int rc = runtime_init(rt);
  if (rc != KVA_OK) {
    runtime_free(rt);
    return rc;
  }
  *out = rt;
  return KVA_OK;
}

static void pause_briefly(void) {
  struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

/* One pass over all actors: are they idle, and how many messages have
 * they received in total? */
static bool scan_idle(kva_runtime *rt, uint64_t *delivered) {
  bool idle = true;
  pthread_mutex_lock(&rt->reg_lock);
  *delivered = rt->retired_delivered;
  for (kva_actor *a = rt->actors; a; a = a->next_all) {
    if (a->kind == ACTOR_PORT) continue;
    *delivered += ck_pr_load_64(&a->stats->dequeued);
    if (ck_pr_load_32(&a->life) == LIFE_DEAD) continue;
    if (ck_pr_load_32(&a->scheduled) || !mailbox_empty(&a->mb)) idle = false;
  }
  pthread_mutex_unlock(&rt->reg_lock);
  return idle;
}

/* Two idle scans with no message delivered in between: nothing was in
 * flight at the first scan that could wake an actor behind our back
 * (an enqueue makes its target non-idle until it is delivered). */
static void runtime_wait_quiescent(kva_runtime *rt) {
  if (rt->det) {
    kva_runtime_run_until_idle(rt);
    return;
  }
  uint64_t d1, d2;
  for (;;) {
    if (scan_idle(rt, &d1) && scan_idle(rt, &d2) && d1 == d2) return;
    pause_briefly();
  }
}

/* The newest actor that is still running (no port), with a reference
 * that keeps it while shutdown stops it; NULL when none is left. */
static kva_actor *newest_running(kva_runtime *rt) {
  pthread_mutex_lock(&rt->reg_lock);
  kva_actor *a = rt->actors;
  while (a && (a->kind == ACTOR_PORT || ck_pr_load_32(&a->life) == LIFE_DEAD)) a = a->next_all;
  if (a) actor_ref(a);
  pthread_mutex_unlock(&rt->reg_lock);
  return a;
}

/* Stops a (its reference held) and waits until it and all it set off are
 * done. */
static void stop_one(kva_runtime *rt, kva_actor *a) {
  kva_actor_stop(a);
  while (ck_pr_load_32(&a->life) != LIFE_DEAD) {
    if (rt->det)
      kva_runtime_run_until_idle(rt);
    else
      pause_briefly();
  }
  ck_pr_fence_acquire(); /* pairs with actor_finish: on_stop is over */
  actor_unref(a);
  runtime_wait_quiescent(rt);
}

void runtime_destroy(kva_runtime *rt) {
  if (!rt) return;
  ck_pr_store_32(&rt->spawning_closed, 1);
  poller_stop(rt);
  runtime_wait_quiescent(rt);
  /* actors free themselves as they stop: the list is walked afresh,
   * under its lock, for each */
  for (kva_actor *a; (a = newest_running(rt));) stop_one(rt, a);
  pthread_mutex_lock(&rt->reg_lock);
  for (kva_actor *a = rt->actors; a; a = a->next_all) ck_pr_store_32(&a->life, LIFE_DEAD);
  pthread_mutex_unlock(&rt->reg_lock);
  runtime_free(rt);
}

void kva_runtime_get_counters(kva_runtime *rt, kva_runtime_counters *out) {
  memset(out, 0, sizeof(*out));
  if (!rt) return;
  actor_reap_zombies(rt); /* so that `actors` counts only what is still held */
  pthread_mutex_lock(&rt->reg_lock);
  out->delivered = rt->retired_delivered;
  out->actors = ck_pr_load_32(&rt->nactors);
  for (kva_actor *a = rt->actors; a; a = a->next_all)
    out->delivered += ck_pr_load_64(&a->stats->dequeued);
  pthread_mutex_unlock(&rt->reg_lock);
  out->overflowed = ck_pr_load_64(&rt->n_overflowed);
  out->blocked_sends = ck_pr_load_64(&rt->n_blocked);
  out->mutes = ck_pr_load_64(&rt->n_mutes);
  out->eventfd_writes = ck_pr_load_64(&rt->n_eventfd_writes);
  out->worker_wakes = ck_pr_load_64(&rt->n_wakes);
  out->worker_sleeps = ck_pr_load_64(&rt->n_sleeps);
}

const char *kva_runtime_stats_name(const kva_runtime *rt) {
  return rt && rt->stats ? stats_name(rt->stats) : NULL;
}
