/*
 * lifecycle.c — the storage manager's life with the runtime: start and
 * shutdown (the sessions its calls borrow are in sessions.c).
 *
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
#include "config/config_internal.h"
#include "gpu/copy_actor.h"
#include "l1/eviction_controller.h"
#include "common/key.h"
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
                       .prefault = config_bool(c, "l1.prefault")};
  s->l1m = l1_manager_spawn(s->rt, &o, err, sizeof(err));
  if (!s->l1m) {
    LOG_ERROR("storage: %s", err[0] ? err : "cannot start the L1 manager");
    return KVA_ECONFIG;
  }
  s->l1 = l1_manager_actor(s->l1m);
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
  l1_manager_set_evictor(s->l1m, s->evictor);
  return KVA_OK;
}

static void storage_free(kva_storage *s);

static int storage_start(kva_runtime *rt, kva_storage **out) {
  kva_storage *s = calloc(1, sizeof(*s));
  if (!s) return KVA_ENOMEM;
  s->rt = rt;
  pthread_mutex_init(&s->lock, NULL);
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

/* Refuses new calls, waits for those running. */
static void storage_close(kva_storage *s) {
  __atomic_store_n(&s->closed, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST)) sched_yield();
  storage_drain(s);
  gpu_drain(s->rt); /* GPU copies in flight end in L1 while it still runs */
}

/* After the runtime has stopped the actors. */
static void storage_free(kva_storage *s) {
  for (session *ss = s->all, *next; ss; ss = next) {
    next = ss->next_all;
    session_forget(ss);
    free(ss->keys);
    free(ss); /* its port is freed with the runtime */
  }
  prober_free(s->prober);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* ---- the runtime with its storage --------------------------------------- */

int kva_runtime_start(const kva_config *cfg, kva_runtime **out) {
  int rc = runtime_create(cfg, out);
  if (rc != KVA_OK) return rc;
  kva_runtime *rt = *out;
  if (config_i64(rt->cfg, "l1.size_bytes") == 0) return KVA_OK;
  kva_storage *s = NULL;
  rc = storage_start(rt, &s);
  if (rc != KVA_OK) {
    runtime_destroy(rt);
    *out = NULL;
    return rc;
  }
  rt->storage = s;
  return KVA_OK;
}

void kva_runtime_shutdown(kva_runtime *rt) {
  if (!rt) return;
  kva_storage *s = rt->storage;
  if (s) storage_close(s);
  runtime_destroy(rt);
  if (s) storage_free(s);
}

kva_storage *kva_storage_of(kva_runtime *rt) {
  return rt ? rt->storage : NULL;
}
