/*
 * redis_adapter.c — the Redis L2 adapter actor ("redis"): the L2 adapter
 * protocol of kvact.h over hiredis async contexts, one per node (redis.h,
 * redis_internal.h).
 *
 * Accepts                              | Sends
 * -------------------------------------+-----------------------------------
 * REDIS_START (self, first message)    | (arms the timeout tick)
 * KVA_L2_STORE, KVA_L2_LOAD,          | KVA_L2_DONE to msg->from, same tag
 *   KVA_L2_LOOKUP_AND_LOCK             |   and pointer, once every command
 *                                      |   of the request is answered or
 *                                      |   failed
 * KVA_L2_STATS, KVA_L2_NODES          | KVA_L2_DONE at once
 * KVA_L2_UNLOCK (kva_key[n])           |
 * KVA_MSG_FD_READY (a node's socket)   | the replies of finished requests
 * KVA_MSG_TIMER (the timeout tick)     | (timed-out connections dropped)
 * KVA_MSG_TIMER (the health tick,      | PING to a bypassed node, CLUSTER
 *   cluster only)                      |   SLOTS while a node is failed
 *                                      |   (redis_health.c); the nodes'
 *                                      |   health in kvinspect's label
 *
 * Invariants:
 *  - every request with a sender is answered exactly once: each command
 *    of it is answered by its server, or failed by a drop of its
 *    connection (hiredis calls its callback with NULL), by the back-off,
 *    or at stop; the task replies when its last command is settled;
 *  - a key's bit is set only for bytes that verified (redis_ops.c), or,
 *    in a STORE, for a key the server said OK to;
 *  - cluster: a command whose node is down fails with KVA_EUNAVAIL, and a
 *    request answers KVA_EUNAVAIL only when every other failure of it was
 *    one too (redis_health.c);
 *  - a key locked by LOOKUP_AND_LOCK is not replaced by a STORE of this
 *    adapter until as many UNLOCKs came; UNLOCK is local and never fails;
 *  - hiredis contexts are touched only from this actor's receive and
 *    on_stop (hiredis is not thread-safe; the runtime runs an actor on one
 *    thread at a time and orders its turns).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "l2/adapters/redis/redis_internal.h"

#define REDIS_START (KVA_L2_ADAPTER_MSG + 21) /* the adapter to itself */
#define TICK_MIN_NS 1000000ull
#define TICK_TIMEOUT 0u /* timer tags */
#define TICK_HEALTH 1u
#define TICK_MAX_NS 250000000ull

/* ---- tasks -------------------------------------------------------------- */

void redis_cmd_put(redis *r, redis_cmd *c) {
  c->next = r->free_cmds;
  r->free_cmds = c;
}

static redis_task *task_get(redis *r, const kva_msg *msg, kva_l2_req *req) {
  redis_task *t = r->free_tasks;
  if (t)
    r->free_tasks = t->next;
  else if (!(t = malloc(sizeof(*t))))
    return NULL;
  *t = (redis_task){.type = msg->type,
                    .to = msg->from,
                    .tag = msg->tag,
                    .req = req,
                    .fp = req->layout ? kva_layout_fingerprint(req->layout) : 0,
                    .result = KVA_OK,
                    .next = r->live};
  if (r->live) r->live->prev = t;
  r->live = t;
  return t;
}

static size_t bits_set(const uint8_t *bits, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += (size_t)kva_bit_get(bits, i);
  return k;
}

static void count(redis *r, const redis_task *t, int result) {
  const kva_l2_req *req = t->req;
  if (t->type == KVA_L2_STORE) {
    r->stats.stores++;
    if (result != KVA_OK) r->stats.store_failures++;
    if (result == KVA_OK || result == KVA_EUNAVAIL) { /* EUNAVAIL: the keys stored */
      r->stats.objects += t->stored_keys;
      r->stats.bytes += t->stored;
    }
  } else if (t->type == KVA_L2_LOAD) {
    r->stats.loads += req->n;
    r->stats.load_failures += req->n - bits_set(req->bits, req->n);
  } else {
    r->stats.lookups += req->n;
  }
}

static void task_finish(redis *r, redis_task *t, int result) {
  kva_l2_req *req = t->req;
  if (t->prev)
    t->prev->next = t->next;
  else
    r->live = t->next;
  if (t->next) t->next->prev = t->prev;
  count(r, t, result);
  req->result = result;
  kva_send(t->to, KVA_L2_DONE, &req, sizeof(req), r->self, t->tag); /* ESHUTDOWN: gone */
  t->next = r->free_tasks;
  r->free_tasks = t;
}

/* The first failure wins, except that a failure of the request itself
 * wins over KVA_EUNAVAIL (some keys' node down, the rest served). */
void redis_task_step(redis *r, redis_task *t, int result) {
  if (result != KVA_OK &&
      (t->result == KVA_OK || (t->result == KVA_EUNAVAIL && result != KVA_EUNAVAIL)))
    t->result = result;
  if (--t->pending == 0) task_finish(r, t, t->result);
}

/* ---- requests ----------------------------------------------------------- */

static void reply_now(redis *r, const kva_msg *msg, kva_l2_req *req) {
  kva_send(msg->from, KVA_L2_DONE, &req, sizeof(req), r->self, msg->tag);
}

static void on_stats(redis *r, const kva_msg *msg, kva_l2_req *req) {
  kva_l2_stats *s = req->stats;
  *s = r->stats;
  s->capacity_bytes = r->cfg.capacity;
  s->keys_locked = r->locks.total;
  req->result = KVA_OK;
  reply_now(r, msg, req);
}

/* Locked keys are never replaced: the whole task is refused. */
static bool store_locked(const redis *r, const kva_l2_req *req) {
  for (size_t i = 0; r->locks.total && i < req->n; i++)
    if (redis_locked(&r->locks, &req->keys[i])) return true;
  return false;
}

static void on_task(redis *r, const kva_msg *msg, kva_l2_req *req) {
  redis_task *t = task_get(r, msg, req);
  if (!t) {
    kva_log(KVA_LOG_WARN, "%s: out of memory for a request of %zu keys", r->cfg.name, req->n);
    req->result = KVA_ENOMEM;
    reply_now(r, msg, req);
  } else if (msg->type == KVA_L2_STORE && store_locked(r, req)) {
    task_finish(r, t, KVA_EAGAIN);
  } else if (!redis_task_start(r, t)) {
    task_finish(r, t, KVA_ENOMEM);
  }
}

static void on_request(redis *r, const kva_msg *msg) {
  if (!msg->from) {
    kva_log(KVA_LOG_WARN, "%s: request %u without a sender to answer: dropped", r->cfg.name,
            msg->type);
    return;
  }
  kva_l2_req *req = kva_l2_req_of(msg);
  const char *bad = kva_l2_req_problem(msg->type, req);
  if (bad) {
    kva_log(KVA_LOG_WARN, "%s: request %u refused: %s", r->cfg.name, msg->type, bad);
    if (req) req->result = KVA_EINVAL;
    reply_now(r, msg, req);
  } else if (msg->type == KVA_L2_STATS) {
    on_stats(r, msg, req);
  } else if (msg->type == KVA_L2_NODES) {
    redis_nodes_report(r, req);
    reply_now(r, msg, req);
  } else {
    on_task(r, msg, req);
  }
}

/* Fire and forget; keys copied out because the payload may be unaligned. */
static void on_unlock(redis *r, const kva_msg *msg) {
  if (msg->len % sizeof(kva_key) != 0) {
    kva_log(KVA_LOG_WARN, "%s: UNLOCK of %u bytes is not a whole number of keys: ignored",
            r->cfg.name, msg->len);
    return;
  }
  for (uint32_t off = 0; off < msg->len; off += sizeof(kva_key)) {
    kva_key k;
    memcpy(&k, (const char *)msg->data + off, sizeof(k));
    if (kva_key_valid(&k)) redis_unlock(&r->locks, &k);
  }
}

/* ---- the actor ---------------------------------------------------------- */

/* A quarter of the timeout: a dead server is noticed within 1.25 timeouts.
 * A cluster has a second tick, for its nodes' health (redis_health.c:
 * PINGs and slot map reads while a node is failed; nothing otherwise). */
static void start_tick(redis *r) {
  uint64_t ns = r->cfg.timeout_ns / 4;
  ns = ns < TICK_MIN_NS ? TICK_MIN_NS : ns > TICK_MAX_NS ? TICK_MAX_NS : ns;
  r->tick = kva_timer(r->self, ns, ns, TICK_TIMEOUT);
  if (r->tick < 0) kva_log(KVA_LOG_ERROR, "%s: no timer: commands will not time out", r->cfg.name);
  if (!r->cfg.cluster) return;
  r->health_tick = kva_timer(r->self, REDIS_HEALTH_TICK_NS, REDIS_HEALTH_TICK_NS, TICK_HEALTH);
  if (r->health_tick < 0)
    kva_log(KVA_LOG_ERROR, "%s: no timer: failed nodes are probed only when requests come",
            r->cfg.name);
}

static void receive(redis *r, const kva_msg *msg) {
  switch (msg->type) {
  case REDIS_START: /* deterministic mode waits inside receive: no tick */
    if (!r->det) start_tick(r);
    break;
  case KVA_MSG_TIMER: /* the timeout tick, or the health tick: the pump follows */
    if (msg->tag == TICK_TIMEOUT)
      redis_on_tick(r);
    else
      redis_health_show(r);
    break;
  case KVA_MSG_FD_READY:
    redis_on_fd(r, msg);
    break;
  case KVA_L2_STORE:
  case KVA_L2_LOOKUP_AND_LOCK:
  case KVA_L2_LOAD:
  case KVA_L2_STATS:
  case KVA_L2_NODES:
    on_request(r, msg);
    break;
  case KVA_L2_UNLOCK:
    on_unlock(r, msg);
    break;
  default:
    kva_log(KVA_LOG_WARN, "%s: unknown message type %u ignored", r->cfg.name, msg->type);
    break;
  }
}

static void redis_receive(kva_actor *self, void *state, const kva_msg *msg) {
  redis *r = state;
  redis_sigpipe g;
  redis_sigpipe_block(&g); /* hiredis may write to a peer that is gone */
  receive(r, msg);
  redis_pump(r);
  redis_sigpipe_restore(&g);
}

static void redis_free(redis *r) {
  redis_nodes_free(r);
  redis_locks_free(&r->locks);
  while (r->free_tasks) {
    redis_task *t = r->free_tasks;
    r->free_tasks = t->next;
    free(t);
  }
  while (r->free_cmds) {
    redis_cmd *c = r->free_cmds;
    r->free_cmds = c->next;
    free(c);
  }
  free(r->scratch);
  free(r);
}

/* Every context freed (its commands fail: the requests are answered),
 * every queued command failed, then the memory. */
static void redis_on_stop(kva_actor *self, void *state) {
  redis *r = state;
  redis_sigpipe g;
  redis_sigpipe_block(&g);
  if (r->tick >= 0) kva_timer_cancel(self, r->tick);
  if (r->health_tick >= 0) kva_timer_cancel(self, r->health_tick);
  redis_nodes_close(r, KVA_ESHUTDOWN);
  redis_sigpipe_restore(&g);
  if (r->live) kva_log(KVA_LOG_ERROR, "%s: a request outlived its commands at stop", r->cfg.name);
  if (r->locks.total)
    kva_log(KVA_LOG_WARN, "%s: stopped with %llu lookup locks still held", r->cfg.name,
            (unsigned long long)r->locks.total);
  redis_free(r);
}

/* ---- spawn -------------------------------------------------------------- */

static kva_actor *fail(redis *r, char *err, size_t errlen, const char *why) {
  if (err && errlen) snprintf(err, errlen, "%s", why);
  if (r) redis_free(r);
  return NULL;
}

/* The seeds are the first nodes: without cluster only the first one. */
static bool add_seeds(redis *r) {
  uint32_t n = r->cfg.cluster ? r->cfg.nseeds : 1;
  for (uint32_t i = 0; i < n; i++)
    if (!redis_node_get(r, r->cfg.seeds[i].host, r->cfg.seeds[i].port)) return false;
  return true;
}

kva_actor *redis_adapter_spawn(kva_runtime *rt, const kva_config_node *cfg, char *err,
                               size_t errlen) {
  char why[512] = "";
  redis *r = calloc(1, sizeof(*r));
  if (!rt || !r) return fail(r, err, errlen, rt ? "redis: out of memory" : "redis: no runtime");
  r->tick = r->health_tick = -1;
  r->det = kva_runtime_deterministic(rt);
  memset(r->slots, 0xff, sizeof(r->slots));
  const char *bad = redis_read_config(&r->cfg, cfg);
  if (bad) return fail(r, err, errlen, bad);
  if (!add_seeds(r)) return fail(r, err, errlen, "redis: out of memory");
  if (redis_check_start(r, why, sizeof(why)) != KVA_OK) return fail(r, err, errlen, why);
  kva_behavior b = {.name = r->cfg.name, .receive = redis_receive, .on_stop = redis_on_stop};
  kva_actor *a = r->self = kva_spawn(rt, &b, r, NULL);
  if (!a) return fail(r, err, errlen, "redis: cannot spawn the actor");
  kva_send(a, REDIS_START, NULL, 0, NULL, 0); /* first in its mailbox: nobody else knows it */
  return a;
}
