/*
 * lifecycle.c — the storage manager's life with the runtime: start and
 * shutdown (the sessions its calls borrow are in sessions.c).
 *
 * A client's storage (client.socket) is the connection actor alone.
 * Start: the L1 manager, then the eviction controller (newer actors stop
 * first, so the controller is gone before the manager frees the pool).
 * Shutdown: refuse new calls, wait for the calls already past that check
 * (each is waiting for a reply the manager will still send), then the
 * runtime stops the actors, then the sessions are freed.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/log.h"
#include "actors/runtime_internal.h"
#include "client/connection.h"
#include "config/config_internal.h"
#include "gpu/copy_actor.h"
#include "l1/eviction_controller.h"
#include "common/key.h"
#include "storage/storage.h"
#include "storage/storage_internal.h"

/* l1_manager_opts.pinned takes l1.pinned as config_bool_auto reads it. */
_Static_assert(CONFIG_FALSE == 0 && CONFIG_TRUE == 1 && CONFIG_AUTO == -1,
               "pinned: 0 = never, 1 = must, -1 = auto (l1/pool.h)");

static int start_l1(kva_storage *s, const kva_config *c) {
  char err[256] = "";
  l1_manager_opts o = {.size_bytes = (uint64_t)config_i64(c, "l1.size_bytes"),
                       .reserve_bytes = (uint64_t)config_i64(c, "l1.reserve_bytes"),
                       .align_bytes = (uint64_t)config_i64(c, "l1.align_bytes"),
                       .numa_node = (int)config_i64(c, "l1.numa_node"),
                       .pinned = config_bool_auto(c, "l1.pinned"),
                       .hugepages = config_bool(c, "l1.hugepages"),
                       .prefault = config_bool(c, "l1.prefault"),
                       .shared = config_str(c, "server.socket")[0] != 0};
  s->l1m = l1_manager_spawn(s->rt, &o, err, sizeof(err));
  if (!s->l1m) {
    LOG_ERROR("storage: %s", err[0] ? err : "cannot start the L1 manager");
    return KVA_ECONFIG;
  }
  s->l1 = l1_manager_actor(s->l1m);
  actor_set_lendable(s->l1); /* engine threads may run its turns (sessions.c) */
  return KVA_OK;
}

static int start_evictor(kva_storage *s, const kva_config *c) {
  char err[256] = "";
  eviction_opts o = {.policy = config_str(c, "eviction.policy"),
                     .watermark = config_f64(c, "eviction.trigger_watermark"),
                     .ratio = config_f64(c, "eviction.ratio"),
                     .interval_ns = (uint64_t)config_i64(c, "eviction.interval_ms") * 1000000u};
  s->evictor = eviction_controller_spawn(s->rt, s->l1, &o, err, sizeof(err));
  if (!s->evictor) {
    LOG_ERROR("storage: %s", err);
    return KVA_ECONFIG;
  }
  actor_set_lendable(s->evictor);
  l1_manager_set_evictor(s->l1m, s->evictor);
  return KVA_OK;
}

/* A client's storage: no actor of its own but the connection, which
 * stands where the L1 manager would (client/connection.h). */
static int start_client(kva_storage *s, const kva_config *c) {
  if (s->rt->workers == 0) {
    LOG_ERROR("storage: client.socket needs scheduler threads (runtime.workers > 0)");
    return KVA_ECONFIG;
  }
  s->client = client_conn_spawn(s->rt, config_str(c, "client.socket"),
                                (int)config_i64(c, "client.timeout_ms"));
  if (!s->client) {
    LOG_ERROR("storage: cannot start the connection to %s (path too long, or out of memory)",
              config_str(c, "client.socket"));
    return KVA_ECONFIG;
  }
  s->l1 = client_conn_actor(s->client);
  return KVA_OK;
}

int storage_open(kva_runtime *rt, kva_storage **out) {
  kva_storage *s = calloc(1, sizeof(*s));
  if (!s) return KVA_ENOMEM;
  s->rt = rt;
  pthread_mutex_init(&s->lock, NULL);
  for (uint32_t t = 0; t < L2_MAX_TIERS; t++) l2_meter_init(&s->tiers.t[t].meter);
  prefill_init(&s->prefill, config_f64(rt->cfg, "load_plan.prefill_tokens_per_s"),
               (uint32_t)config_i64(rt->cfg, "load_plan.chunk_tokens"));
  s->plan_margin = config_f64(rt->cfg, "load_plan.margin");
  if (storage_is_client(rt->cfg)) {
    int rc = start_client(s, rt->cfg);
    if (rc != KVA_OK) {
      storage_free(s);
      return rc;
    }
    *out = s;
    return KVA_OK;
  }
  int rc = start_l1(s, rt->cfg);
  if (rc == KVA_OK) rc = start_evictor(s, rt->cfg);
  if (rc == KVA_OK) rc = storage_start_l2(s, rt->cfg);
  if (rc != KVA_OK) {
    /* actors already spawned are stopped and freed by the runtime */
    storage_free(s);
    return rc;
  }
  *out = s;
  return KVA_OK;
}

int storage_enter(kva_storage *s) {
  if (runtime_forked(s->rt)) return KVA_ESHUTDOWN; /* a child of fork() (actors/fork.c) */
  /* seq_cst increment, then the closed check: storage_close stores closed,
   * then reads inflight, so one of the two sees the other (Dekker) */
  __atomic_add_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&s->closed, __ATOMIC_SEQ_CST)) {
    storage_leave(s);
    return KVA_ESHUTDOWN;
  }
  return KVA_OK;
}

void storage_leave(kva_storage *s) {
  __atomic_sub_fetch(&s->inflight, 1, __ATOMIC_RELEASE);
}

int storage_is_client(const kva_config *c) {
  return config_str(c, "client.socket")[0] != 0;
}

/* Refuses new calls, waits for those running. */
void storage_close(kva_storage *s) {
  __atomic_store_n(&s->closed, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST)) sched_yield();
  storage_drain(s);
  gpu_drain(s->rt); /* GPU copies in flight end in L1 while it still runs */
}

/* After the runtime has stopped the actors. */
void storage_free(kva_storage *s) {
  for (session *ss = s->all, *next; ss; ss = next) {
    next = ss->next_all;
    session_forget(ss);
    free(ss->keys);
    free(ss); /* its port is freed with the runtime */
  }
  prober_free(s->prober);
  for (uint32_t t = 0; t < L2_MAX_TIERS; t++) {
    l2_meter_destroy(&s->tiers.t[t].meter);
    l2_absent_destroy(&s->tiers.t[t].absent); /* nothing when never initialised */
  }
  prefill_destroy(&s->prefill);
  pthread_mutex_destroy(&s->lock);
  free(s);
}
