/*
 * control.c — the control threads: the calls of a session that span the
 * daemon's tiers (lookup with its L2 walk, memcheck and stats of the
 * whole storage, flush, freeze, bypass, L2 contains, a tier's stats,
 * keys and nodes) run here
 * through the in-process facade, which blocks, so no scheduler worker
 * ever waits for them. Thread 0 takes lookups, thread 1 the rest: a flush
 * that waits for its deadline holds up no lookup.
 */
#include <stdio.h>
#include <string.h>

#include "actors/log.h"
#include "server/server_internal.h"
#include "wire/protocol.h"

static void run_job(ctl_job *j) {
  kva_storage *s = j->s;
  switch (j->type) {
  case P_LOOKUP:
    j->result = kva_lookup(s, j->keys, j->n, (int)j->flag, &j->lookup);
    break;
  case P_MEMCHECK: /* a client waits for the stores itself (P_FLUSH) */
    j->result = kva_memcheck_with(s, &(kva_memcheck_opts){.callers_only = (int)j->flag},
                                  &j->memcheck, j->text, j->report_len);
    break;
  case P_STATS:
    j->result = kva_storage_get_stats(s, &j->stats);
    break;
  case P_FLUSH:
    j->result = kva_flush(s, j->timeout_ms);
    break;
  case P_FREEZE:
    j->result = kva_set_freeze(s, (int)j->flag);
    break;
  case P_SET_BYPASS:
    j->result = kva_set_tier_bypass(s, j->tier, (int)j->flag);
    break;
  case P_BYPASSED:
    j->result = kva_tier_bypassed(s, j->tier);
    break;
  case P_L2_CONTAINS:
    j->result = kva_l2_contains(s, j->tier, j->keys);
    break;
  case P_TIER_STATS:
    j->result = kva_l2_get_tier_stats(s, j->tier, &j->tier_stats);
    break;
  case P_TIER_KEYS:
    j->result = kva_l2_get_tier_keys(s, j->tier, &j->tier_keys);
    break;
  case P_TIER_NODES:
    j->result = kva_l2_get_tier_nodes(s, j->tier, j->nodes, j->cap, &j->nodes_n, &j->map_age_s);
    break;
  default:
    j->result = KVA_ENOTSUP;
    break;
  }
}

static void *control_main(void *arg) {
  kva_port *port = arg;
  for (;;) {
    kva_msg m;
    ctl_job *j = NULL;
    if (kva_port_recv(port, &m, &j, sizeof(j), -1) != KVA_OK || m.type == SRV_CTL_QUIT) return NULL;
    if (m.type != SRV_CTL_JOB || m.len != sizeof(j)) continue;
    run_job(j);
    kva_send(m.from, SRV_CTL_DONE, NULL, 0, NULL, m.tag);
  }
}

int control_start(server *sv) {
  for (int t = 0; t < CTL_THREADS; t++) {
    sv->ctl_port[t] = kva_port_open(sv->rt, t == 0 ? "kvactd_lookups" : "kvactd_control");
    if (!sv->ctl_port[t]) return KVA_ENOMEM;
    if (pthread_create(&sv->ctl[t], NULL, control_main, sv->ctl_port[t]) != 0) {
      kva_port_close(sv->ctl_port[t]);
      sv->ctl_port[t] = NULL;
      return KVA_ENOMEM;
    }
    sv->nctl = t + 1;
  }
  return KVA_OK;
}

void control_stop(server *sv) {
  for (int t = 0; t < sv->nctl; t++)
    kva_send(kva_port_actor(sv->ctl_port[t]), SRV_CTL_QUIT, NULL, 0, NULL, 0);
  for (int t = 0; t < sv->nctl; t++) pthread_join(sv->ctl[t], NULL);
  sv->nctl = 0;
}

int control_submit(server *sv, int t, ctl_job *job, kva_actor *to, uint64_t tag) {
  if (t >= sv->nctl) return KVA_ESHUTDOWN;
  return kva_send(kva_port_actor(sv->ctl_port[t]), SRV_CTL_JOB, &job, sizeof(job), to, tag);
}
