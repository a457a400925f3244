/*
 * lifecycle_l2.c — the L2 side of the storage manager's life: one adapter
 * actor per l2[] entry (by registered type), then the store controller,
 * the prefetch controller and the prober; at shutdown, the drain that lets
 * both controllers release every lock they hold (docs/invariants.md I-SD-2)
 * while all actors are still running, and the release of the read locks
 * of prefetches whose results nobody read.
 *
 * Actors stop newest first, so the controllers and the prober stop before
 * the adapters, and the adapters before the L1 manager frees the pool.
 */
#include <stdio.h>
#include <string.h>

#include "actors/log.h"
#include "actors/runtime_internal.h"
#include "config/config_internal.h"
#include "l2/prefetch_controller.h"
#include "l2/registry.h"
#include "l2/store_controller.h"
#include "storage/storage_internal.h"

#define DRAIN_TIMEOUT_MS 30000

static int start_adapter(kva_storage *s, const kva_config *c, size_t i) {
  const kva_config_node *node = config_l2_node(c, i);
  const char *type = "", *name = "";
  kva_config_node_str(node, "type", &type);
  kva_config_node_str(node, "name", &name);
  kva_l2_factory f = l2_factory_find(type);
  if (!f) {
    LOG_ERROR("l2[%zu].type: no adapter registered as \"%s\" (kva_l2_register it before "
              "kva_runtime_start)",
              i, type);
    return KVA_ECONFIG;
  }
  char err[256] = "";
  kva_actor *a = f(s->rt, node, err, sizeof(err));
  if (!a) {
    LOG_ERROR("l2[%zu] (%s): %s", i, name, err[0] ? err : "the adapter did not start");
    return KVA_ECONFIG;
  }
  l2_tier *t = &s->tiers.t[s->tiers.n++];
  snprintf(t->name, sizeof(t->name), "%s", name);
  t->actor = a;
  if (l2_absent_init(&t->absent, 0) != KVA_OK) {
    LOG_ERROR("l2[%zu] (%s): no memory for its absent marks", i, name);
    return KVA_ENOMEM;
  }
  t->absent.name = t->name;
  t->has_nodes = strcmp(type, "redis") == 0; /* answers KVA_L2_NODES (kvact.h) */
  return KVA_OK;
}

static int find_policies(const kva_config *c, kva_store_policy *sp, kva_prefetch_policy *pp) {
  char names[256];
  const char *name = config_str(c, "store_policy");
  if (store_policy_find(name, sp) != KVA_OK) {
    store_policy_names(" ", names, sizeof(names));
    LOG_ERROR("store_policy: no store policy named \"%s\" (registered: %s)", name, names);
    return KVA_ECONFIG;
  }
  name = config_str(c, "prefetch_policy");
  if (prefetch_policy_find(name, pp) != KVA_OK) {
    prefetch_policy_names(" ", names, sizeof(names));
    LOG_ERROR("prefetch_policy: no prefetch policy named \"%s\" (registered: %s)", name, names);
    return KVA_ECONFIG;
  }
  return KVA_OK;
}

int storage_start_l2(kva_storage *s, const kva_config *c) {
  kva_store_policy sp;
  kva_prefetch_policy pp;
  int rc = find_policies(c, &sp, &pp);
  for (size_t i = 0; rc == KVA_OK && i < config_l2_count(c); i++) {
    if (s->tiers.n == L2_MAX_TIERS) break; /* the schema allows no more */
    rc = start_adapter(s, c, i);
  }
  if (rc != KVA_OK || s->tiers.n == 0) return rc;
  s->tiers.bypass_after = (uint32_t)config_i64(c, "l2_bypass_failures");
  prefetch_opts po = {.policy = pp,
                      .max_in_flight = (uint32_t)config_i64(c, "prefetch_max_in_flight"),
                      .writeback = config_bool(c, "prefetch_writeback"),
                      .plan_loads = strcmp(pp.name, PREFETCH_LOAD_OR_RECOMPUTE) == 0,
                      .margin = config_f64(c, "load_plan.margin"),
                      .prefill = &s->prefill};
  uint64_t probe_ns = (uint64_t)config_i64(c, "l2_probe_interval_ms") * 1000000u;
  s->store = store_controller_spawn(s->rt, s->l1, &s->tiers, &sp);
  s->prefetcher = prefetch_controller_spawn(s->rt, s->l1, &s->tiers, &po);
  s->prober = prober_new(&s->tiers, probe_ns);
  kva_actor *probe = s->prober ? prober_spawn(s->rt, s->prober) : NULL;
  if (!s->store || !s->prefetcher || !probe) {
    LOG_ERROR("storage: cannot start the L2 controllers: out of memory");
    return KVA_ENOMEM;
  }
  actor_set_lendable(s->store);
  actor_set_lendable(s->prefetcher);
  l1_manager_set_store(s->l1m, s->store);
  l1_manager_set_prefetcher(s->l1m, s->prefetcher);
  kva_send(probe, PROBE_START, NULL, 0, NULL, 0);
  return KVA_OK;
}

/* ---- shutdown ----------------------------------------------------------- */

static void drain_controller(session *ss, kva_actor *a, uint32_t type, const char *what) {
  if (!a) return;
  int rc = session_ask(ss, a, type, NULL, DRAIN_TIMEOUT_MS);
  if (rc != KVA_OK)
    LOG_ERROR("storage: the %s did not finish its work in %d ms (%s); its locks stay", what,
              DRAIN_TIMEOUT_MS, kva_strerror(rc));
}

/* A prefetch whose result nobody read holds read locks on its prefix for
 * a reader that will never come: wait for its answer, then release them. */
static void release_unread(kva_storage *s, session *ss, session *call) {
  if (__atomic_load_n(&ss->state, __ATOMIC_ACQUIRE) != SESSION_PREFETCH) return;
  if (session_await(ss, DRAIN_TIMEOUT_MS) != KVA_OK) {
    LOG_ERROR("storage: a prefetch did not finish in %d ms; its locks stay", DRAIN_TIMEOUT_MS);
    return;
  }
  if (ss->req.result == KVA_OK && ss->req.hits) {
    l1_req r = {.keys = ss->keys, .n = ss->req.hits, .readers = ss->req.readers};
    session_ask(call, s->l1, L1_FINISH_READ, &r, -1);
  }
  session_put(ss);
}

void storage_drain(kva_storage *s) {
  session *call = session_take(s);
  if (!call) {
    LOG_ERROR("storage: no session left to drain with; locks of work in flight stay");
    return;
  }
  drain_controller(call, s->prefetcher, PC_DRAIN, "prefetch controller");
  drain_controller(call, s->store, SC_DRAIN, "store controller");
  pthread_mutex_lock(&s->lock);
  session *all = s->all;
  pthread_mutex_unlock(&s->lock);
  for (session *ss = all; ss; ss = ss->next_all)
    if (ss != call) release_unread(s, ss, call);
  session_put(call);
}
