/*
 * redis_conn.c — the redis adapter's connections (redis_internal.h): one
 * hiredis async context per node, driven by the runtime's poller through
 * hiredis's event hooks, the pipeline, per-command deadlines and the
 * reconnect back-off.
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
 * after any hiredis call n->ac is re-read, never a stale copy. We free a
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

static void redis_node_drop(redis_node *n, int result, const char *reason);

/* Deadlines and back-off run on real time in both modes (the runtime's
 * virtual time stands still while a deterministic adapter waits). */
static uint64_t redis_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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
  c->node = n;
  redis_list_push(&n->queue, c);
}

void redis_flight_done(redis_node *n, redis_cmd *c) {
  redis_list_remove(&n->flight, c);
  n->flight_bytes -= c->bytes;
}

static void cmd_fail(redis *r, redis_cmd *c, int result) {
  redis_task *t = c->task;
  redis_cmd_put(r, c);
  redis_task_step(r, t, result);
}

static void fail_queue(redis_node *n, int result) {
  while (n->queue.head) {
    redis_cmd *c = n->queue.head;
    redis_list_remove(&n->queue, c);
    cmd_fail(n->r, c, result);
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
  redis_node *n = calloc(1, sizeof(*n));
  if (!n) return NULL;
  n->r = r;
  n->id = r->nnodes;
  snprintf(n->addr.host, sizeof(n->addr.host), "%s", host);
  n->addr.port = port;
  n->drop_result = KVA_EIO;
  r->nodes[r->nnodes++] = n;
  return n;
}

static uint64_t fd_tag(const redis_node *n) {
  return (uint64_t)n->gen << 16 | n->id;
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
  redis_node *n = privdata;
  redisAsyncContext *ac = n->ac;
  if (!ac) return;
  bool clean = (ac->c.flags & REDIS_CONNECTED) && !n->reason;
  if (n->watched) kva_unwatch_fd(n->r->self, ac->c.fd);
  n->watched = false;
  if (n->drop_result != KVA_ESHUTDOWN) lost(n, n->reason ? n->reason : ac->errstr);
  n->ac = NULL;
  n->kill = false;
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
  redis_node *n = ac->data;
  if (status != REDIS_OK) return; /* hiredis frees it: ev_cleanup */
  n->backoff_ns = 0;
  if (n->warned)
    kva_log(KVA_LOG_INFO, "%s: redis %s:%d: connected again", n->r->cfg.name, n->addr.host,
            n->addr.port);
  n->warned = false;
}

static void on_auth(redisAsyncContext *ac, void *reply, void *privdata) {
  redis_node *n = privdata;
  const redisReply *rep = reply;
  if (!rep || rep->type != REDIS_REPLY_ERROR) return;
  kva_log(KVA_LOG_ERROR, "%s: redis %s:%d: AUTH refused: %s", n->r->cfg.name, n->addr.host,
          n->addr.port, rep->str);
  n->kill = true; /* the commands behind it fail with NOAUTH; then the pump drops it */
}

static void hooks(redisAsyncContext *ac, redis_node *n) {
  ac->data = n;
  ac->ev.data = n;
  ac->ev.addRead = ac->ev.delRead = ac->ev.addWrite = ac->ev.delWrite = ev_noop;
  ac->ev.cleanup = ev_cleanup;
}

/* A non-blocking dial; AUTH goes first in the pipeline. False when it
 * failed at once (the back-off has started). */
static bool dial(redis_node *n) {
  redis *r = n->r;
  redisAsyncContext *ac = redisAsyncConnect(n->addr.host, n->addr.port);
  if (!ac || ac->err) {
    lost(n, ac ? ac->errstr : "out of memory");
    if (ac) redisAsyncFree(ac);
    backoff(n);
    return false;
  }
  n->ac = ac;
  n->gen++;
  n->reason = NULL;
  hooks(ac, n);
  if (!r->det && kva_watch_fd(r->self, ac->c.fd, WATCH_EVENTS, fd_tag(n)) != KVA_OK) {
    redis_node_drop(n, KVA_EIO, "cannot watch the socket");
    return false;
  }
  n->watched = !r->det;
  redisAsyncSetConnectCallback(ac, on_connect);
  const char *argv[3];
  size_t lens[3];
  int argc = redis_auth_argv(&r->cfg, argv, lens);
  if (argc) redisAsyncCommandArgv(ac, on_auth, n, argc, argv, lens);
  return true;
}

/* Drops n's connection: every command on it fails with `result`. */
static void redis_node_drop(redis_node *n, int result, const char *reason) {
  if (!n->ac) return;
  n->drop_result = result;
  n->reason = reason;
  redisAsyncFree(n->ac); /* callbacks with NULL replies, then ev_cleanup */
  n->drop_result = KVA_EIO;
  n->reason = NULL;
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
static void read_all(redis_node *n, bool hup) {
  redisAsyncContext *ac = n->ac;
  do {
    redisAsyncHandleRead(ac);
  } while (n->ac == ac && readable(ac->c.fd) > 0);
  if (n->ac == ac && hup) redisAsyncHandleRead(ac);
  if (n->ac == ac && hup) redis_node_drop(n, KVA_EIO, "connection closed");
}

/* Until hiredis's buffer is empty or the kernel takes nothing more. */
static void write_all(redis_node *n) {
  redisAsyncContext *ac = n->ac;
  for (;;) {
    bool was = connected(ac);
    size_t before = sdslen(ac->c.obuf);
    if (was && before == 0) return;
    redisAsyncHandleWrite(ac); /* completes a dial first */
    if (n->ac != ac || !connected(ac)) return;
    size_t after = sdslen(ac->c.obuf);
    if (after == 0 || (was && after == before)) return;
  }
}

static void on_events(redis_node *n, uint32_t events) {
  if (!n->ac) return;
  if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) write_all(n);
  if (n->ac && (events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)))
    read_all(n, (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) != 0);
}

void redis_on_fd(redis *r, const kva_msg *msg) {
  kva_fd_event ev;
  if (msg->len != sizeof(ev)) return;
  memcpy(&ev, msg->data, sizeof(ev));
  uint16_t id = (uint16_t)(msg->tag & 0xffff);
  if (id >= r->nnodes) return;
  redis_node *n = r->nodes[id];
  if (n->ac && fd_tag(n) == msg->tag) on_events(n, ev.events);
}

/* ---- the pipeline ------------------------------------------------------- */

/* Whether the head of the queue may go now: up to `pipeline` commands and
 * REDIS_FLIGHT_BYTES of values in flight (always at least one). */
static bool room(const redis *r, const redis_node *n) {
  const redis_cmd *c = n->queue.head;
  return c && n->flight.n < r->cfg.pipeline &&
         (n->flight.n == 0 || n->flight_bytes + c->bytes <= REDIS_FLIGHT_BYTES);
}

static void hand_off(redis *r, redis_node *n, uint64_t now) {
  while (n->ac && room(r, n)) {
    redis_cmd *c = n->queue.head;
    redis_list_remove(&n->queue, c);
    if (!redis_cmd_send(r, n, c)) {
      cmd_fail(r, c, KVA_EIO);
      continue;
    }
    c->deadline = now + r->cfg.timeout_ns;
    redis_list_push(&n->flight, c);
    n->flight_bytes += c->bytes;
  }
}

static void pump_node(redis *r, redis_node *n, uint64_t now) {
  if (n->kill) redis_node_drop(n, KVA_EIO, "AUTH refused");
  if (n->queue.n && !n->ac && (now < n->retry_at || !dial(n))) {
    fail_queue(n, KVA_EIO); /* in back-off: fail fast rather than wait */
    return;
  }
  hand_off(r, n, now);
  if (n->ac && connected(n->ac)) write_all(n);
}

static bool busy(const redis *r) {
  for (uint16_t i = 0; i < r->nnodes; i++)
    if (r->nodes[i]->flight.n || r->nodes[i]->queue.n) return true;
  return false;
}

/* Cluster: after a node was lost, ask a node still connected for the map
 * (the next MOVED would do it too, but a failed master sends none). */
static void refresh_stale_map(redis *r) {
  for (uint16_t i = 0; r->map_stale && !r->refreshing && i < r->nnodes; i++) {
    redis_node *n = r->nodes[i];
    if (!n->ac || !connected(n->ac)) continue;
    redis_slots_refresh(r, n);
    r->map_stale = false;
  }
}

static void pump_all(redis *r) {
  uint64_t now = redis_now();
  refresh_stale_map(r);
  /* a node may be added (a redirect) while we go: re-read nnodes */
  for (uint16_t i = 0; i < r->nnodes; i++) pump_node(r, r->nodes[i], now);
}

static void expire(redis *r, uint64_t now) {
  for (uint16_t i = 0; i < r->nnodes; i++) {
    redis_node *n = r->nodes[i];
    if (n->ac && n->flight.head && n->flight.head->deadline <= now)
      redis_node_drop(n, KVA_ETIMEDOUT, "no reply within timeout_ms: connection dropped");
  }
}

void redis_on_tick(redis *r) {
  expire(r, redis_now());
}

/* Deterministic mode: poll the sockets until nothing is queued or in
 * flight (each round expires what is past its deadline). */
static void det_wait(redis *r) {
  struct pollfd pf[64];
  uint16_t ids[64];
  while (busy(r)) {
    nfds_t k = 0;
    uint64_t now = redis_now(), first = UINT64_MAX;
    for (uint16_t i = 0; i < r->nnodes && k < 64; i++) {
      redis_node *n = r->nodes[i];
      if (!n->ac) continue;
      bool out = !connected(n->ac) || sdslen(n->ac->c.obuf) > 0;
      pf[k] = (struct pollfd){.fd = n->ac->c.fd, .events = (short)(POLLIN | (out ? POLLOUT : 0))};
      ids[k++] = i;
      if (n->flight.head && n->flight.head->deadline < first) first = n->flight.head->deadline;
    }
    int ms = first == UINT64_MAX ? 10 : first <= now ? 0 : (int)((first - now) / 1000000 + 1);
    if (poll(pf, k, ms) > 0)
      for (nfds_t j = 0; j < k; j++) {
        uint32_t ev =
            (pf[j].revents & POLLIN ? EPOLLIN : 0) | (pf[j].revents & POLLOUT ? EPOLLOUT : 0) |
            (pf[j].revents & POLLERR ? EPOLLERR : 0) | (pf[j].revents & POLLHUP ? EPOLLHUP : 0);
        if (ev) on_events(r->nodes[ids[j]], ev);
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
  for (uint16_t i = 0; i < r->nnodes; i++) {
    redis_node_drop(r->nodes[i], result, NULL);
    fail_queue(r->nodes[i], result);
  }
}

void redis_nodes_free(redis *r) {
  for (uint16_t i = 0; i < r->nnodes; i++) free(r->nodes[i]);
  free(r->nodes);
  r->nodes = NULL;
  r->nnodes = 0;
}
