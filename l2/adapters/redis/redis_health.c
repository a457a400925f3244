/*
 * redis_health.c — the health of a Redis Cluster's nodes (redis_internal.h):
 * a dead master costs its own slots, not the tier.
 *
 * A cluster tier is as many servers as it has masters, and one of them
 * failing must not stop the others (issue 35). So health is kept per node,
 * here, and the adapter answers a request some of whose keys' node is down
 * with KVA_EUNAVAIL (kvact.h): the other keys were served, and the
 * controllers' health of the whole tier (l2/tiers.c) is not touched.
 *
 *   NODE_OK        commands go to it.
 *   NODE_FAILED    a dial failed or a connection was dropped by an error or
 *                  a timeout; commands still go (the back-off of
 *                  redis_conn.c spaces out the dials).
 *   NODE_BYPASSED  REDIS_NODE_BYPASS_AFTER failures in a row: its commands
 *                  fail at once with KVA_EUNAVAIL, no dial, no timeout to
 *                  wait. Every REDIS_PROBE_NS a PING goes to it on its first
 *                  connection (dialled for it), bounded by the command
 *                  timeout; the first reply makes it NODE_OK.
 *
 * Any reply from a node (redis_ops.c) makes it NODE_OK again. A close by
 * the server (a restart, a SIGKILL: the kernel closes the socket) is no
 * failure by itself; the dial after it, refused, is.
 *
 * The slot map follows the promotion. While a node that the map gives
 * slots to is not NODE_OK, CLUSTER SLOTS is read again from a healthy
 * connected node every REDIS_MAP_REFRESH_NS (one in flight, dropped when
 * unanswered within the timeout): once the cluster has promoted the
 * replica, the next read moves the slots to it, and the keys of those
 * slots are served again, no later than REDIS_MAP_REFRESH_NS after a
 * healthy node reports the promotion. A failed node whose slots moved away
 * keeps being probed (it may come back as a replica) but costs nothing.
 *
 * One server (not a cluster): none of this; its failures are the tier's,
 * as before (the controllers bypass the tier and the prober probes it).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "l2/adapters/redis/redis_internal.h"

uint64_t redis_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int redis_node_down_result(const redis *r, int single) {
  return r->cfg.cluster ? KVA_EUNAVAIL : single;
}

void redis_node_failed(redis_node *n, const char *why) {
  redis *r = n->r;
  if (!r->cfg.cluster) return;
  n->fails++;
  if (n->state == NODE_OK) {
    n->state = NODE_FAILED;
    n->failed_since = redis_now();
    n->outages++;
    r->nfailed++;
    r->map_next = 0; /* read the map at once: the slots may have moved */
  }
  if (n->state == NODE_FAILED && n->fails >= REDIS_NODE_BYPASS_AFTER) {
    n->state = NODE_BYPASSED;
    n->probe_at = redis_now() + REDIS_PROBE_NS;
    kva_log(KVA_LOG_WARN,
            "%s: redis %s:%d failed %u times in a row (last: %s): its %u slots are bypassed "
            "until it answers a PING; the other nodes are served",
            r->cfg.name, n->addr.host, n->addr.port, n->fails, why && *why ? why : "?", n->slots);
  }
}

void redis_node_ok(redis_node *n) {
  redis *r = n->r;
  if (n->state == NODE_BYPASSED)
    kva_log(KVA_LOG_INFO, "%s: redis %s:%d answered: no longer bypassed", r->cfg.name, n->addr.host,
            n->addr.port);
  n->state = NODE_OK;
  n->fails = 0;
  n->probing = false;
  r->nfailed--;
}

/* ---- probes ------------------------------------------------------------- */

static void on_probe(redisAsyncContext *ac, void *reply, void *privdata) {
  (void)ac;
  redis_node *n = privdata;
  n->probing = false;
  n->probe_at = redis_now() + REDIS_PROBE_NS;
  if (reply) redis_node_answered(n); /* any reply: the server is there */
}

/* A PING on the node's first connection, dialled for it when closed (the
 * back-off does not apply: the probe interval spaces them). */
static void probe(redis *r, redis_node *n, uint64_t now) {
  redis_conn *k = &n->conns[0];
  if (!k->ac && !redis_conn_dial(k)) {
    n->probe_at = now + REDIS_PROBE_NS;
    return;
  }
  if (redisAsyncCommand(k->ac, on_probe, n, "PING") != REDIS_OK) {
    n->probe_at = now + REDIS_PROBE_NS;
    return;
  }
  n->probing = true;
  n->probe_deadline = now + r->cfg.timeout_ns;
}

static void probe_nodes(redis *r, uint64_t now) {
  for (uint16_t i = 0; i < r->nnodes; i++) {
    redis_node *n = r->nodes[i];
    if (n->state != NODE_BYPASSED) continue;
    if (n->probing && now >= n->probe_deadline)
      redis_conn_drop(&n->conns[0], KVA_ETIMEDOUT, "PING unanswered within timeout_ms");
    else if (!n->probing && now >= n->probe_at)
      probe(r, n, now);
  }
}

/* ---- the slot map while a node is failed -------------------------------- */

static bool holds_failed_slots(const redis *r) {
  for (uint16_t i = 0; i < r->nnodes; i++)
    if (r->nodes[i]->state != NODE_OK && r->nodes[i]->slots) return true;
  return false;
}

static void refresh_map(redis *r, uint64_t now) {
  if (r->refreshing) {
    redis_conn *k = r->refresh_conn;
    if (now >= r->refresh_deadline && k && k->ac && k->gen == r->refresh_gen)
      redis_conn_drop(k, KVA_ETIMEDOUT, "CLUSTER SLOTS unanswered within timeout_ms");
    return;
  }
  if (now < r->map_next || !holds_failed_slots(r)) return;
  for (uint16_t i = 0; i < r->nnodes && !r->refreshing; i++)
    if (r->nodes[i]->state == NODE_OK) redis_slots_refresh(r, r->nodes[i]);
  r->map_next = now + REDIS_MAP_REFRESH_NS;
}

void redis_health_pump(redis *r, uint64_t now) {
  if (!r->cfg.cluster || (r->nfailed == 0 && !r->refreshing)) return;
  probe_nodes(r, now);
  refresh_map(r, now);
}

/* ---- KVA_L2_NODES -------------------------------------------------------- */

static int public_state(const redis *r, const redis_node *n) {
  if (!r->cfg.cluster) return n->warned ? KVA_L2_NODE_FAILED : KVA_L2_NODE_OK;
  return n->state == NODE_BYPASSED ? KVA_L2_NODE_BYPASSED
         : n->state == NODE_FAILED ? KVA_L2_NODE_FAILED
                                   : KVA_L2_NODE_OK;
}

void redis_nodes_report(const redis *r, kva_l2_req *req) {
  uint64_t now = redis_now();
  uint16_t n = r->cfg.cluster ? r->nnodes : 1;
  for (uint16_t i = 0; i < n && i < req->nodes_cap; i++) {
    const redis_node *nd = r->nodes[i];
    kva_l2_node_stats *o = &req->nodes[i];
    memset(o, 0, sizeof(*o));
    snprintf(o->addr, sizeof(o->addr), "%s:%d", nd->addr.host, nd->addr.port);
    o->state = public_state(r, nd);
    o->slots = r->cfg.cluster ? nd->slots : 0;
    o->failed_s =
        r->cfg.cluster && nd->state != NODE_OK ? (double)(now - nd->failed_since) / 1e9 : 0;
    o->outages = nd->outages;
    o->failures = nd->fails;
    o->failed_cmds = nd->failed_cmds;
  }
  req->nodes_n = n;
  req->map_age_s = r->cfg.cluster && r->map_at ? (double)(now - r->map_at) / 1e9 : -1;
  req->result = KVA_OK;
}

/* ---- kvinspect ----------------------------------------------------------- */

void redis_health_show(redis *r) {
  uint64_t now = redis_now(), failed_cmds = 0;
  uint32_t ok = 0, failed = 0, bypassed = 0;
  const redis_node *first = NULL; /* the first node not OK, named in the label */
  for (uint16_t i = 0; i < r->nnodes; i++) {
    const redis_node *n = r->nodes[i];
    failed_cmds += n->failed_cmds;
    ok += n->state == NODE_OK;
    failed += n->state == NODE_FAILED;
    bypassed += n->state == NODE_BYPASSED;
    if (n->state != NODE_OK && !first) first = n;
  }
  char label[320]; /* cut to 31 bytes by the slot */
  if (first)
    snprintf(label, sizeof(label), "%u/%u ok; %s %s:%d", ok, (unsigned)r->nnodes,
             first->state == NODE_BYPASSED ? "byp" : "fail", first->addr.host, first->addr.port);
  else
    snprintf(label, sizeof(label), "%u/%u nodes ok", ok, (unsigned)r->nnodes);
  if (strcmp(label, r->shown) != 0) { /* the strings change rarely: keep the seqlock quiet */
    kva_actor_label(r->self, label, "failed_cmds failed bypassed map_age_ms");
    snprintf(r->shown, sizeof(r->shown), "%s", label);
  }
  kva_actor_gauge(r->self, 0, failed_cmds);
  kva_actor_gauge(r->self, 1, failed);
  kva_actor_gauge(r->self, 2, bypassed);
  kva_actor_gauge(r->self, 3, r->map_at ? (now - r->map_at) / 1000000u : 0);
}
