/*
 * redis_conn.c — the redis adapter's connections (redis_internal.h):
 * `connections` hiredis async contexts per node, driven by the runtime's
 * poller through hiredis's event hooks, the pipeline, per-command
 * deadlines and the reconnect back-off.
 *
 * Several connections. One connection is one stream the server parses in
 * order, and a big value pipelined behind another costs the server a copy
 * (it can take a bulk argument as its value without copying only when it
 * starts its query buffer); several connections with few commands each is
 * how redis-benchmark moves big values fastest. A key's commands all go
 * to one connection of its node, picked by the key's hash, so a key's
 * order of operations (STORE v1, STORE v2, LOAD) is the order they were
 * queued; keys of a batch spread over the connections. The back-off and
 * the outage warning are the node's: a server that refuses one
 * connection refuses them all.
 *
 * Events. The poller's watches are edge-triggered and a watch cannot be
 * changed, so each connection is watched once, for EPOLLIN | EPOLLOUT |
 * EPOLLRDHUP, from dial to drop; hiredis's add/del hooks then need do
 * nothing. Edge-triggered means: on an event we read until the socket is
 * empty (hiredis reads 16 KiB per call, so we loop while FIONREAD says
 * more is there) and write until hiredis's buffer is empty or the kernel
 * takes no more (the next EPOLLOUT edge resumes). Commands are appended to
 * hiredis's buffer during a message and written once at its end (pump),
 * so a batch of commands leaves in few writes.
 *
 * Lifetimes. hiredis frees a context itself when the connection fails: it
 * calls every pending callback with a NULL reply, then our cleanup hook
 * (which forgets the context and starts the back-off), then frees it. So
 * after any hiredis call k->ac is re-read, never a stale copy. We free a
 * context only outside hiredis's callbacks (timeouts, AUTH refused, stop).
 *
 * Timeouts. hiredis 0.14 has none: every command gets a deadline when it
 * is handed to hiredis; a tick (timeout/4) drops a connection whose oldest
 * command is past it. Replies come in order, so the oldest is the head of
 * the flight list.
 *
 * Deterministic mode: nothing is watched; after each message the adapter
 * polls its sockets itself until no command is in flight (or they timed
 * out), so replies depend only on the order of messages.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <time.h>

#include <hiredis/sds.h>

#include "l2/adapters/redis/redis_internal.h"

#define WATCH_EVENTS (EPOLLIN | EPOLLOUT | EPOLLRDHUP)

/* Deadlines and back-off run on real time in both modes (the runtime's
 * virtual time stands still while a deterministic adapter waits):
 * redis_now (redis_health.c). */

static bool sigpipe_pending(void) {
  sigset_t pend;
  return sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE);
}

void redis_sigpipe_block(redis_sigpipe *g) {
  g->skip = kva_thread_sigpipe_blocked(); /* a runtime thread: blocked for good */
  if (g->skip) return;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, &g->old);
  g->pending_before = sigpipe_pending();
}

void redis_sigpipe_restore(redis_sigpipe *g) {
  if (g->skip) return;
  if (!g->pending_before && sigpipe_pending()) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    struct timespec zero = {0, 0};
    sigtimedwait(&set, NULL, &zero); /* ours: taken back before it is unblocked */
  }
  pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* ---- lists -------------------------------------------------------------- */

static void redis_list_push(redis_list *l, redis_cmd *c) {
  c->next = NULL;
  c->prev = l->tail;
  if (l->tail)
    l->tail->next = c;
  else
    l->head = c;
  l->tail = c;
  l->n++;
}

static void redis_list_remove(redis_list *l, redis_cmd *c) {
  if (c->prev)
    c->prev->next = c->next;
  else
    l->head = c->next;
  if (c->next)
    c->next->prev = c->prev;
  else
    l->tail = c->prev;
  c->prev = c->next = NULL;
  l->n--;
}

void redis_node_enqueue(redis_node *n, redis_cmd *c) {
  uint64_t h = kva_key_hash(&c->task->req->keys[c->key]);
  c->conn = &n->conns[h % n->nconns];
  redis_list_push(&c->conn->queue, c);
}

void redis_flight_done(redis_conn *k, redis_cmd *c) {
  redis_list_remove(&k->flight, c);
  k->flight_bytes -= c->bytes;
}

static void cmd_fail(redis *r, redis_cmd *c, int result) {
  redis_task *t = c->task;
  redis_cmd_put(r, c);
  redis_task_step(r, t, result);
}

static void fail_queue(redis_conn *k, int result) {
  if (result == KVA_EUNAVAIL) k->node->failed_cmds += k->queue.n;
  while (k->queue.head) {
    redis_cmd *c = k->queue.head;
    redis_list_remove(&k->queue, c);
    cmd_fail(k->node->r, c, result);
  }
}

/* ---- nodes -------------------------------------------------------------- */

redis_node *redis_node_get(redis *r, const char *host, int port) {
  for (uint16_t i = 0; i < r->nnodes; i++)
    if (r->nodes[i]->addr.port == port && strcmp(r->nodes[i]->addr.host, host) == 0)
      return r->nodes[i];
  if (r->nnodes >= REDIS_MAX_NODES) return NULL;
  redis_node **nodes = realloc(r->nodes, (r->nnodes + 1u) * sizeof(*nodes));
  if (!nodes) return NULL;
  r->nodes = nodes;
  uint16_t nconns = (uint16_t)r->cfg.connections;
  redis_node *n = calloc(1, sizeof(*n) + nconns * sizeof(n->conns[0]));
  if (!n) return NULL;
  n->r = r;
  n->id = r->nnodes;
  snprintf(n->addr.host, sizeof(n->addr.host), "%s", host);
  n->addr.port = port;
  n->nconns = nconns;
  for (uint16_t i = 0; i < nconns; i++)
    n->conns[i] = (redis_conn){.node = n, .idx = i, .drop_result = KVA_EIO};
  r->nodes[r->nnodes++] = n;
  return n;
}

/* gen | connection | node: an event of a closed connection is told apart. */
static uint64_t fd_tag(const redis_conn *k) {
  return (uint64_t)k->gen << 32 | (uint64_t)k->idx << 16 | k->node->id;
}

/* The next dial waits: 50 ms after an outage begins, doubling to 2 s. */
static void backoff(redis_node *n) {
  if (n->backoff_ns < REDIS_BACKOFF_MIN_NS) n->backoff_ns = REDIS_BACKOFF_MIN_NS;
  n->retry_at = redis_now() + n->backoff_ns;
  n->backoff_ns *= 2;
  if (n->backoff_ns > REDIS_BACKOFF_MAX_NS) n->backoff_ns = REDIS_BACKOFF_MAX_NS;
}

static void lost(redis_node *n, const char *why) {
  if (n->warned) return;
  n->warned = true;
  kva_log(KVA_LOG_WARN, "%s: redis %s:%d: %s; its commands fail until it answers again",
          n->r->cfg.name, n->addr.host, n->addr.port, why && *why ? why : "connection failed");
}

/* hiredis's cleanup hook: the context is about to be freed (its pending
 * callbacks have run). Called at most once per context by our use.
 *
 * A connection that worked and was closed or reset (a restart, an idle
 * timeout) is dialled again at the next command: only a dial that fails
 * starts the back-off. One we dropped ourselves (a timeout, AUTH refused)
 * backs off at once, so a hung or refusing server is not hammered. In
 * cluster mode a lost node may mean a failover: the map is read again. */
static void ev_cleanup(void *privdata) {
  redis_conn *k = privdata;
  redis_node *n = k->node;
  redisAsyncContext *ac = k->ac;
  if (!ac) return;
  bool clean = (ac->c.flags & REDIS_CONNECTED) && !k->reason;
  if (k->watched) kva_unwatch_fd(n->r->self, ac->c.fd);
  k->watched = false;
  if (k->drop_result != KVA_ESHUTDOWN) lost(n, k->reason ? k->reason : ac->errstr);
  if (!clean && k->drop_result != KVA_ESHUTDOWN)
    redis_node_failed(n, k->reason ? k->reason : ac->errstr);
  k->ac = NULL;
  redis_write_reset(k); /* the splices' commands were failed with it */
  k->kill = false;
  k->kill_why = NULL;
  n->r->map_stale = n->r->cfg.cluster;
  if (clean)
    n->retry_at = 0;
  else
    backoff(n);
}

static void ev_noop(void *privdata) {
  (void)privdata;
}

static void on_connect(const redisAsyncContext *ac, int status) {
  redis_node *n = ((redis_conn *)ac->data)->node;
  if (status != REDIS_OK) return; /* hiredis frees it: ev_cleanup */
  n->backoff_ns = 0;
  if (n->warned)
    kva_log(KVA_LOG_INFO, "%s: redis %s:%d: connected again", n->r->cfg.name, n->addr.host,
            n->addr.port);
  n->warned = false;
}

static void on_auth(redisAsyncContext *ac, void *reply, void *privdata) {
  redis_conn *k = privdata;
  const redis_node *n = k->node;
  const redisReply *rep = reply;
  if (!rep || rep->type != REDIS_REPLY_ERROR) return;
  kva_log(KVA_LOG_ERROR, "%s: redis %s:%d: AUTH refused: %s", n->r->cfg.name, n->addr.host,
          n->addr.port, rep->str);
  k->kill = true; /* the commands behind it fail with NOAUTH; then the pump drops it */
}

static void hooks(redisAsyncContext *ac, redis_conn *k) {
  ac->data = k;
  ac->ev.data = k;
  ac->ev.addRead = ac->ev.delRead = ac->ev.addWrite = ac->ev.delWrite = ev_noop;
  ac->ev.cleanup = ev_cleanup;
}

bool redis_conn_dial(redis_conn *k) {
  redis_node *n = k->node;
  redis *r = n->r;
  redisAsyncContext *ac = redisAsyncConnect(n->addr.host, n->addr.port);
  if (!ac || ac->err) {
    const char *why = ac ? ac->errstr : "out of memory";
    lost(n, why);
    redis_node_failed(n, why);
    if (ac) redisAsyncFree(ac);
    backoff(n);
    return false;
  }
  k->ac = ac;
  k->gen++;
  redis_write_reset(k);
  k->reason = NULL;
  /* keep the reader's buffer once it has grown: by default hiredis frees
   * an idle one over 16 KiB, so every large GET reply read into fresh
   * pages (a page fault and a page clear every 4 KiB) */
  ac->c.reader->maxbuf = 0;
  hooks(ac, k);
  if (!r->det && kva_watch_fd(r->self, ac->c.fd, WATCH_EVENTS, fd_tag(k)) != KVA_OK) {
    redis_conn_drop(k, KVA_EIO, "cannot watch the socket");
    return false;
  }
  k->watched = !r->det;
  redisAsyncSetConnectCallback(ac, on_connect);
  const char *argv[3];
  size_t lens[3];
  int argc = redis_auth_argv(&r->cfg, argv, lens);
  if (argc) redisAsyncCommandArgv(ac, on_auth, k, argc, argv, lens);
  return true;
}

void redis_conn_drop(redis_conn *k, int result, const char *reason) {
  if (!k->ac) return;
  k->drop_result = result;
  k->reason = reason;
  redisAsyncFree(k->ac); /* callbacks with NULL replies, then ev_cleanup */
  k->drop_result = KVA_EIO;
  k->reason = NULL;
}

/* ---- reading and writing ------------------------------------------------ */

static int readable(int fd) {
  int bytes = 0;
  return ioctl(fd, FIONREAD, &bytes) == 0 ? bytes : 0;
}

static bool connected(const redisAsyncContext *ac) {
  return (ac->c.flags & REDIS_CONNECTED) != 0;
}

/* Until the socket is empty; once more after a hang-up, so hiredis sees
 * the end of the stream and fails what is pending. */
static void read_all(redis_conn *k, bool hup) {
  redisAsyncContext *ac = k->ac;
  do {
    redisAsyncHandleRead(ac);
  } while (k->ac == ac && readable(ac->c.fd) > 0);
  if (k->ac == ac && hup) redisAsyncHandleRead(ac);
  if (k->ac == ac && hup) redis_conn_drop(k, KVA_EIO, "connection closed");
}

/* hiredis completes the dial; then redis_write.c writes. hiredis's
 * handler would write the buffer as soon as the dial completes, shifting
 * it under our splices' offsets: it is shown an empty buffer for that
 * call. A dial that fails frees the context, and the empty buffer with it. */
static void write_all(redis_conn *k) {
  redisAsyncContext *ac = k->ac;
  if (!connected(ac)) {
    sds keep = ac->c.obuf, empty = sdsempty();
    if (!empty) return; /* out of memory: the next event tries again */
    ac->c.obuf = empty;
    redisAsyncHandleWrite(ac); /* completes the dial, or fails it */
    if (k->ac != ac) {
      sdsfree(keep);
      return;
    }
    sdsfree(ac->c.obuf);
    ac->c.obuf = keep;
    if (!connected(ac)) return;
  }
  if (k->kill) return; /* a head without its payload must not leave (redis_ops.c) */
  if (redis_write_some(k) != KVA_OK)
    redis_conn_drop(k, KVA_EIO, "write failed: connection dropped");
}

static void on_events(redis_conn *k, uint32_t events) {
  if (!k->ac) return;
  if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) write_all(k);
  if (k->ac && (events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)))
    read_all(k, (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) != 0);
}

void redis_on_fd(redis *r, const kva_msg *msg) {
  kva_fd_event ev;
  if (msg->len != sizeof(ev)) return;
  memcpy(&ev, msg->data, sizeof(ev));
  uint16_t id = (uint16_t)(msg->tag & 0xffff), idx = (uint16_t)(msg->tag >> 16 & 0xffff);
  if (id >= r->nnodes || idx >= r->nodes[id]->nconns) return;
  redis_conn *k = &r->nodes[id]->conns[idx];
  if (k->ac && fd_tag(k) == msg->tag) on_events(k, ev.events);
}

redis_conn *redis_node_connected(redis_node *n) {
  for (uint16_t i = 0; i < n->nconns; i++)
    if (n->conns[i].ac && connected(n->conns[i].ac)) return &n->conns[i];
  return NULL;
}

/* ---- the pipeline ------------------------------------------------------- */

/* Whether the head of k's queue may go now: up to `pipeline` commands and
 * REDIS_FLIGHT_BYTES of values in flight (always at least one). */
static bool room(const redis *r, const redis_conn *k) {
  const redis_cmd *c = k->queue.head;
  return c && k->flight.n < r->cfg.pipeline &&
         (k->flight.n == 0 || k->flight_bytes + c->bytes <= REDIS_FLIGHT_BYTES);
}

static void hand_off(redis *r, redis_conn *k, uint64_t now) {
  while (k->ac && room(r, k)) {
    redis_cmd *c = k->queue.head;
    redis_list_remove(&k->queue, c);
    if (!redis_cmd_send(r, k, c)) {
      cmd_fail(r, c, KVA_EIO);
      continue;
    }
    c->deadline = now + r->cfg.timeout_ns;
    redis_list_push(&k->flight, c);
    k->flight_bytes += c->bytes;
  }
}

static void pump_conn(redis *r, redis_conn *k, uint64_t now) {
  if (k->kill) redis_conn_drop(k, KVA_EIO, k->kill_why ? k->kill_why : "AUTH refused");
  if (k->queue.n && k->node->state == NODE_BYPASSED) {
    fail_queue(k, KVA_EUNAVAIL); /* the other nodes go on (redis_health.c) */
  } else if (k->queue.n && !k->ac && (now < k->node->retry_at || !redis_conn_dial(k))) {
    fail_queue(k, redis_node_down_result(r, KVA_EIO)); /* in back-off: fail fast */
    return;
  }
  hand_off(r, k, now);
  if (k->ac && connected(k->ac)) write_all(k);
}

static bool busy(const redis *r) {
  for (uint16_t i = 0; i < r->nnodes; i++)
    for (uint16_t j = 0; j < r->nodes[i]->nconns; j++)
      if (r->nodes[i]->conns[j].flight.n || r->nodes[i]->conns[j].queue.n) return true;
  return false;
}

/* Cluster: after a node was lost, ask a node still connected for the map
 * (the next MOVED would do it too, but a failed master sends none). */
static void refresh_stale_map(redis *r) {
  for (uint16_t i = 0; r->map_stale && !r->refreshing && i < r->nnodes; i++) {
    if (!redis_node_connected(r->nodes[i])) continue;
    redis_slots_refresh(r, r->nodes[i]);
    r->map_stale = false;
  }
}

static void pump_all(redis *r) {
  uint64_t now = redis_now();
  refresh_stale_map(r);
  redis_health_pump(r, now);
  /* a node may be added (a redirect) while we go: re-read nnodes */
  for (uint16_t i = 0; i < r->nnodes; i++)
    for (uint16_t j = 0; j < r->nodes[i]->nconns; j++) pump_conn(r, &r->nodes[i]->conns[j], now);
}

static void expire(redis *r, uint64_t now) {
  for (uint16_t i = 0; i < r->nnodes; i++)
    for (uint16_t j = 0; j < r->nodes[i]->nconns; j++) {
      redis_conn *k = &r->nodes[i]->conns[j];
      if (k->ac && k->flight.head && k->flight.head->deadline <= now)
        redis_conn_drop(k, KVA_ETIMEDOUT, "no reply within timeout_ms: connection dropped");
    }
}

void redis_on_tick(redis *r) {
  expire(r, redis_now());
}

#define DET_FDS 256 /* deterministic mode polls this many connections at most */

/* The pollfds of the open connections (at most DET_FDS); *first is the
 * earliest deadline in flight. */
static nfds_t det_fds(redis *r, struct pollfd *pf, redis_conn **conns, uint64_t *first) {
  nfds_t k = 0;
  *first = UINT64_MAX;
  for (uint16_t i = 0; i < r->nnodes; i++)
    for (uint16_t j = 0; j < r->nodes[i]->nconns && k < DET_FDS; j++) {
      redis_conn *c = &r->nodes[i]->conns[j];
      if (!c->ac) continue;
      bool out = !connected(c->ac) || redis_write_pending(c);
      pf[k] = (struct pollfd){.fd = c->ac->c.fd, .events = (short)(POLLIN | (out ? POLLOUT : 0))};
      conns[k++] = c;
      if (c->flight.head && c->flight.head->deadline < *first) *first = c->flight.head->deadline;
    }
  return k;
}

/* Deterministic mode: poll the sockets until nothing is queued or in
 * flight (each round expires what is past its deadline). */
static void det_wait(redis *r) {
  struct pollfd pf[DET_FDS];
  redis_conn *conns[DET_FDS];
  while (busy(r)) {
    uint64_t now = redis_now(), first;
    nfds_t k = det_fds(r, pf, conns, &first);
    int ms = first == UINT64_MAX ? 10 : first <= now ? 0 : (int)((first - now) / 1000000 + 1);
    if (poll(pf, k, ms) > 0)
      for (nfds_t j = 0; j < k; j++) {
        uint32_t ev =
            (pf[j].revents & POLLIN ? EPOLLIN : 0) | (pf[j].revents & POLLOUT ? EPOLLOUT : 0) |
            (pf[j].revents & POLLERR ? EPOLLERR : 0) | (pf[j].revents & POLLHUP ? EPOLLHUP : 0);
        if (ev) on_events(conns[j], ev);
      }
    expire(r, redis_now());
    pump_all(r);
  }
}

void redis_pump(redis *r) {
  pump_all(r);
  if (r->det) det_wait(r);
}

/* ---- stop --------------------------------------------------------------- */

void redis_nodes_close(redis *r, int result) {
  for (uint16_t i = 0; i < r->nnodes; i++)
    for (uint16_t j = 0; j < r->nodes[i]->nconns; j++) {
      redis_conn_drop(&r->nodes[i]->conns[j], result, NULL);
      fail_queue(&r->nodes[i]->conns[j], result);
    }
}

void redis_nodes_free(redis *r) {
  for (uint16_t i = 0; i < r->nnodes; i++) {
    for (uint16_t j = 0; j < r->nodes[i]->nconns; j++) redis_write_free(&r->nodes[i]->conns[j]);
    free(r->nodes[i]);
  }
  free(r->nodes);
  r->nodes = NULL;
  r->nnodes = 0;
}
