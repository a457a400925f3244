/*
 * disk_adapter.c — the disk L2 adapter actor ("disk"): the L2 adapter
 * protocol of kvact.h over a file of fixed slots, io_uring and an
 * in-memory index (disk.h, disk_internal.h).
 *
 * Accepts                              | Sends
 * -------------------------------------+-----------------------------------
 * DISK_START (self, first message)     | (watches the ring's eventfd)
 * KVA_L2_STORE, KVA_L2_LOAD           | KVA_L2_DONE to msg->from, same tag
 *   (kva_l2_req *)                     |   and pointer, once every I/O of
 *                                      |   the request completed
 * KVA_L2_STATS                         | KVA_L2_DONE at once (in memory)
 * KVA_L2_NODES                         | KVA_L2_DONE at once, KVA_ENOTSUP
 * KVA_L2_LOOKUP_AND_LOCK               | KVA_L2_DONE at once, or once a
 *                                      |   probe read answered (see below)
 * KVA_L2_UNLOCK (kva_key[n])           |
 * KVA_MSG_FD_READY (ring eventfd)      | the replies of completed requests
 * KVA_MSG_TIMER (submit retry)         |
 * DISK_HASHED (disk_hasher.c)          | DISK_HASH to its disk_hasher
 *
 * Invariants:
 *  - every request with a sender is answered exactly once, after the
 *    kernel is done with its buffers (on_stop waits for the I/O in flight);
 *  - a slot is served only after its bytes in L1 verified against its
 *    header; a slot that failed verification is never served again;
 *  - a slot locked by LOOKUP_AND_LOCK, or being loaded, is neither evicted
 *    nor rewritten; UNLOCK of an unknown or unlocked key is ignored;
 *  - requests allocate nothing in the steady state (tasks, ops and bounce
 *    buffers are pooled).
 *
 * Health: the lookups are answered from memory, so they would report a
 * dying disk healthy and reset the tier's failure count between failed
 * loads (and clear an automatic bypass at the prober's first lookup).
 * While the last I/O to complete failed, a LOOKUP_AND_LOCK therefore
 * reads the superblock block first and answers with that read's result
 * (its bits are the index's either way).
 *
 * Deterministic mode (runtime.workers = 0): fd readiness is only polled
 * there when nothing else is ready, and a port waiting for a reply gives
 * up when nothing is ready and no timer is due. So after each message the
 * adapter waits for its own I/O before returning: replies then depend only
 * on the order of messages, as replays need.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "l2/adapters/disk/disk_internal.h"

#define DISK_START (KVA_L2_ADAPTER_MSG + 18) /* the adapter to itself */
#define DISK_EFD_TAG 1
#define DISK_RETRY_NS 1000000ull /* resubmit after the kernel said EAGAIN */

/* ---- pools -------------------------------------------------------------- */

static disk_task *task_get(disk *d, const kva_msg *msg, kva_l2_req *r) {
  disk_task *t = d->free_tasks;
  if (t)
    d->free_tasks = t->next_free;
  else if (!(t = calloc(1, sizeof(*t))))
    return NULL;
  if (r->n > t->capk) {
    disk_tkey *k = realloc(t->k, r->n * sizeof(*k));
    if (!k) {
      t->next_free = d->free_tasks;
      d->free_tasks = t;
      return NULL; /* not live yet */
    }
    t->k = k;
    t->capk = r->n;
  }
  memset(t->k, 0, r->n * sizeof(*t->k));
  t->type = msg->type;
  t->to = msg->from;
  t->tag = msg->tag;
  t->req = r;
  t->fp = r->layout ? kva_layout_fingerprint(r->layout) : 0;
  t->pending = 0;
  t->jobs = 0;
  t->gen++;
  t->live_prev = NULL;
  t->live_next = d->live;
  if (d->live) d->live->live_prev = t;
  d->live = t;
  return t;
}

void disk_task_finish(disk *d, disk_task *t, int result) {
  kva_l2_req *r = t->req;
  assert(!t->jobs); /* the hasher may still read the L1 bytes */
  if (t->live_prev)
    t->live_prev->live_next = t->live_next;
  else
    d->live = t->live_next;
  if (t->live_next) t->live_next->live_prev = t->live_prev;
  r->result = result;
  kva_send(t->to, KVA_L2_DONE, &r, sizeof(r), d->self, t->tag); /* ESHUTDOWN: gone */
  t->req = NULL;
  t->next_free = d->free_tasks;
  d->free_tasks = t;
}

disk_xop *disk_xop_get(disk *d, disk_task *t, size_t key, uint32_t stage) {
  disk_xop *x = d->free_xops;
  if (x)
    d->free_xops = x->next_free;
  else if (!(x = malloc(sizeof(*x))))
    return NULL;
  memset(x, 0, sizeof(*x));
  x->op.ctx = x;
  x->task = t;
  x->key = key;
  x->stage = stage;
  return x;
}

void disk_xop_put(disk *d, disk_xop *x) {
  disk_bounce_put(&d->bounce, x->hdr, DISK_BLOCK);
  disk_bounce_put(&d->bounce, x->tail, DISK_BLOCK);
  disk_bounce_put(&d->bounce, x->big, x->big_bytes);
  x->hdr = x->tail = x->big = NULL;
  x->next_free = d->free_xops;
  d->free_xops = x;
}

static void probe_done(disk *d, disk_xop *x) {
  disk_task *t = x->task;
  int res = x->op.res;
  disk_xop_put(d, x);
  disk_task_finish(d, t, res == 0 ? KVA_OK : res == -ETIMEDOUT ? KVA_ETIMEDOUT : KVA_EIO);
}

/* disk_io's completion callback. */
static void on_io_done(disk_op *op, void *arg) {
  disk *d = arg;
  disk_xop *x = op->ctx;
  d->failing = op->res != 0;
  if (x->stage == XOP_LOAD)
    disk_load_done(d, x);
  else if (x->stage == XOP_PROBE)
    probe_done(d, x);
  else
    disk_store_done(d, x);
}

/* ---- validation --------------------------------------------------------- */

static void reply_now(disk *d, const kva_msg *msg, kva_l2_req *r) {
  kva_send(msg->from, KVA_L2_DONE, &r, sizeof(r), d->self, msg->tag);
}

/* ---- the requests ------------------------------------------------------- */

/* While failing: a read of block 0 decides the result (see the top). */
static bool probe(disk *d, const kva_msg *msg, kva_l2_req *r) {
  disk_task *t = task_get(d, msg, r);
  disk_xop *x = t ? disk_xop_get(d, t, 0, XOP_PROBE) : NULL;
  if (x) x->hdr = disk_bounce_get(&d->bounce, DISK_BLOCK);
  if (!x || !x->hdr) {
    if (x) disk_xop_put(d, x);
    if (t) disk_task_finish(d, t, KVA_EIO); /* no memory for the probe: still failing */
    return t != NULL;
  }
  x->op.iov[0] = (struct iovec){x->hdr, DISK_BLOCK};
  x->op.niov = 1;
  x->op.off = 0;
  t->pending = 1;
  disk_io_queue(&d->io, &x->op);
  return true;
}

/* Locks the keys found; each key continues the one before it in the
 * request (a prefetch looks a chain up in order), the first continues
 * r->prev when set, which the index notes for the chain order of eviction
 * (disk_index.h). */
static void on_lookup(disk *d, const kva_msg *msg, kva_l2_req *r) {
  uint64_t prev = r->prev ? kva_key_hash(r->prev) : 0;
  for (size_t i = 0; d->formatted && i < r->n; i++) {
    uint64_t h = kva_key_hash(&r->keys[i]);
    uint32_t id = disk_index_find(&d->ix, &r->keys[i], h);
    if (i > 0 || r->prev) disk_index_follows(&d->ix, id, h, prev);
    prev = h;
    if (id == DISK_NONE) continue;
    disk_index_lock(&d->ix, id);
    kva_bit_set(r->bits, i);
  }
  d->stats.lookups += r->n;
  r->result = KVA_OK;
  if (!d->failing || !probe(d, msg, r)) reply_now(d, msg, r);
}

static void on_stats(disk *d, const kva_msg *msg, kva_l2_req *r) {
  kva_l2_stats *s = r->stats;
  *s = d->stats;
  s->objects = d->ix.nvalid;
  s->bytes = d->ix.bytes;
  s->capacity_bytes = d->formatted ? d->super.nslots * disk_slot_capacity(d->super.slot_bytes) : 0;
  s->keys_locked = d->ix.locks;
  s->evictions = d->ix.evictions;
  r->result = KVA_OK;
  reply_now(d, msg, r);
}

static void on_io_request(disk *d, const kva_msg *msg, kva_l2_req *r) {
  disk_task *t = task_get(d, msg, r);
  if (!t) {
    kva_log(KVA_LOG_WARN, "%s: out of memory for a request of %zu keys", d->cfg.name, r->n);
    r->result = KVA_ENOMEM;
    reply_now(d, msg, r);
  } else if (msg->type == KVA_L2_STORE) {
    disk_store_start(d, t);
  } else {
    disk_load_start(d, t);
  }
}

static void on_request(disk *d, const kva_msg *msg) {
  if (!msg->from) {
    kva_log(KVA_LOG_WARN, "%s: request %u without a sender to answer: dropped", d->cfg.name,
            msg->type);
    return;
  }
  kva_l2_req *r = kva_l2_req_of(msg);
  const char *bad = kva_l2_req_problem(msg->type, r);
  if (bad) {
    kva_log(KVA_LOG_WARN, "%s: request %u refused: %s", d->cfg.name, msg->type, bad);
    if (r) r->result = KVA_EINVAL;
    reply_now(d, msg, r);
  } else if (msg->type == KVA_L2_LOOKUP_AND_LOCK) {
    on_lookup(d, msg, r);
  } else if (msg->type == KVA_L2_STATS) {
    on_stats(d, msg, r);
  } else if (msg->type == KVA_L2_NODES) { /* one device, no servers */
    r->result = KVA_ENOTSUP;
    reply_now(d, msg, r);
  } else {
    on_io_request(d, msg, r);
  }
}

/* Fire and forget; keys copied out because the payload may be unaligned. */
static void on_unlock(disk *d, const kva_msg *msg) {
  if (msg->len % sizeof(kva_key) != 0) {
    kva_log(KVA_LOG_WARN, "%s: UNLOCK of %u bytes is not a whole number of keys: ignored",
            d->cfg.name, msg->len);
    return;
  }
  for (uint32_t off = 0; d->formatted && off < msg->len; off += sizeof(kva_key)) {
    kva_key k;
    memcpy(&k, (const char *)msg->data + off, sizeof(k));
    if (!kva_key_valid(&k)) continue;
    uint32_t id = disk_index_find_any(&d->ix, &k, kva_key_hash(&k));
    if (id != DISK_NONE) disk_index_unlock(&d->ix, id);
  }
}

/* ---- the actor ---------------------------------------------------------- */

/* After every message: hand queued I/O to the kernel. What the kernel
 * refused (EAGAIN, EBUSY) stays in the ring; no completion may come to
 * retry it, so a timer does. Deterministic mode waits for the I/O here. */
static void pump(disk *d) {
  if (!d->io_ok) return;
  if (d->det) {
    while (disk_io_busy(&d->io)) disk_io_wait(&d->io);
    return;
  }
  if (disk_io_submit(&d->io) != KVA_OK && d->retry_timer < 0)
    d->retry_timer = kva_timer(d->self, DISK_RETRY_NS, 0, 0);
}

static void disk_receive(kva_actor *self, void *state, const kva_msg *msg) {
  disk *d = state;
  switch (msg->type) {
  case DISK_START: /* deterministic mode waits in pump: no fd readiness to replay */
    if (!d->det && kva_watch_fd(self, d->io.efd, EPOLLIN, DISK_EFD_TAG) != KVA_OK)
      kva_log(KVA_LOG_ERROR, "%s: cannot watch the io_uring eventfd", d->cfg.name);
    break;
  case KVA_MSG_FD_READY:
    disk_io_reap(&d->io);
    break;
  case KVA_MSG_TIMER:
    d->retry_timer = -1;
    break;
  case DISK_HASHED:
    disk_hash_received(d, msg);
    break;
  case KVA_L2_STORE:
  case KVA_L2_LOOKUP_AND_LOCK:
  case KVA_L2_LOAD:
  case KVA_L2_STATS:
  case KVA_L2_NODES:
    on_request(d, msg);
    break;
  case KVA_L2_UNLOCK:
    on_unlock(d, msg);
    break;
  default:
    kva_log(KVA_LOG_WARN, "%s: unknown message type %u ignored", d->cfg.name, msg->type);
    break;
  }
  pump(d);
}

static void disk_free(disk *d) {
  if (d->io_ok) disk_io_destroy(&d->io);
  disk_index_destroy(&d->ix);
  disk_bounce_destroy(&d->bounce);
  while (d->free_tasks) {
    disk_task *t = d->free_tasks;
    d->free_tasks = t->next_free;
    free(t->k);
    free(t);
  }
  while (d->free_xops) {
    disk_xop *x = d->free_xops;
    d->free_xops = x->next_free;
    free(x);
  }
  free(d->dedup);
  free(d);
}

static void disk_on_stop(kva_actor *self, void *state) {
  disk *d = state;
  disk_hash_settle(d);       /* no hasher reply can reach us now */
  kva_actor_stop(d->hasher); /* stopped already when the runtime shuts down */
  while (d->io_ok && disk_io_busy(&d->io)) disk_io_wait(&d->io); /* answers what is left */
  if (d->ix.locks)
    kva_log(KVA_LOG_WARN, "%s: stopped with %llu lookup locks still held", d->cfg.name,
            (unsigned long long)d->ix.locks);
  if (d->io_ok && !d->det) kva_unwatch_fd(self, d->io.efd);
  disk_close(d);
  disk_free(d);
}

/* ---- config and spawn --------------------------------------------------- */

/* cfg is effective (kvact.h): every key is there, at its schema default
 * when the config left it out, and passed the schema's checks; NULL reads
 * the schema defaults. So nothing here repeats a default or a range: what
 * stays is what the schema cannot say (the path's length, the slot
 * geometry). */
static const char *read_config(disk *d, const kva_config_node *cfg) {
  const char *name = "", *path = "";
  uint64_t queue_depth = 0, timeout_ms = 0;
  int o_direct = 0, persist = 0;
  disk_cfg *c = &d->cfg;
  if (!cfg && !(cfg = kva_config_node_default("disk"))) return "disk: out of memory";
  kva_config_node_str(cfg, "name", &name);
  kva_config_node_str(cfg, "path", &path);
  kva_config_node_u64(cfg, "capacity_bytes", &c->capacity);
  kva_config_node_u64(cfg, "slot_bytes", &c->slot_bytes);
  kva_config_node_bool(cfg, "o_direct", &o_direct);
  kva_config_node_bool(cfg, "persist", &persist);
  kva_config_node_u64(cfg, "queue_depth", &queue_depth);
  kva_config_node_u64(cfg, "timeout_ms", &timeout_ms);
  c->o_direct = o_direct;
  c->persist = persist;
  c->queue_depth = (uint32_t)queue_depth; /* at most 4096 */
  c->timeout_ms = (uint32_t)timeout_ms;   /* at most an hour */
  snprintf(c->name, sizeof(c->name), "%s", name);
  if (strlen(path) >= sizeof(c->path)) return "path: longer than PATH_MAX";
  snprintf(c->path, sizeof(c->path), "%s", path);
  if (c->slot_bytes && (c->slot_bytes % DISK_BLOCK || c->slot_bytes < 2 * DISK_BLOCK))
    return "slot_bytes: expected 0 or a multiple of 4096 of at least 8192";
  return NULL;
}

/* A start that failed: nothing to persist (a temporary file has no name:
 * closing it frees it). */
static kva_actor *fail(disk *d, char *err, size_t errlen, const char *why) {
  if (err && errlen && why) snprintf(err, errlen, "%s", why);
  if (!d) return NULL;
  if (d->fd >= 0) close(d->fd);
  disk_free(d);
  return NULL;
}

kva_actor *disk_adapter_spawn(kva_runtime *rt, const kva_config_node *cfg, char *err,
                              size_t errlen) {
  char why[512] = "";
  disk *d = calloc(1, sizeof(*d));
  if (d) d->fd = d->retry_timer = -1;
  if (!rt || !d) return fail(d, err, errlen, rt ? "disk: out of memory" : "disk: no runtime");
  d->det = kva_runtime_deterministic(rt);
  const char *bad = read_config(d, cfg);
  if (bad) return fail(d, err, errlen, bad);
  if (disk_open(d, why, sizeof(why)) != KVA_OK) return fail(d, err, errlen, why);
  if (disk_io_init(&d->io, d->fd, d->cfg.queue_depth, d->cfg.timeout_ms, on_io_done, d, why,
                   sizeof(why)) != KVA_OK)
    return fail(d, err, errlen, why);
  d->io_ok = true;
  kva_behavior b = {.name = d->cfg.name, .receive = disk_receive, .on_stop = disk_on_stop};
  kva_actor *a = d->self = kva_spawn(rt, &b, d, NULL);
  if (!a) return fail(d, err, errlen, "disk: cannot spawn the actor");
  /* spawned after the adapter, so stopped before it (see disk_hasher.c);
   * deterministic mode sums everything inside the adapter's messages */
  if (!d->det && !(d->hasher = disk_hasher_spawn(rt)))
    kva_log(KVA_LOG_WARN, "%s: no disk_hasher: every checksum on the adapter", d->cfg.name);
  kva_send(a, DISK_START, NULL, 0, NULL, 0); /* first in its mailbox: nobody else knows it */
  return a;
}
