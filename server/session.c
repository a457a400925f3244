/*
 * session.c — one actor per client connection of kvactd.
 *
 * Message (type)                 | Action
 * -------------------------------|--------------------------------------------
 * SRV_SESSION_START              | watch the connection; arm the hello
 *                                | deadline (server.hello_timeout_ms)
 * KVA_MSG_FD_READY (connection)  | flush replies; read frames: P_HELLO first
 *                                | (another version: P_REFUSED), answered by
 *                                | P_WELCOME with the pool's memfd; a
 *                                | request naming a key twice refused
 *                                | (KVA_EINVAL); each other request checked
 *                                | against this client's ledger and sent
 *                                | to the L1 manager as an
 *                                | l1_req of a slot, or to a control thread;
 *                                | EOF, an error or a bad frame: close
 * L1_REPLY (tag = slot)          | ledger updated from the outputs, reply
 *                                | frame sent (closing: none; once no slot
 *                                | is busy, the ledger is given back)
 * SRV_CTL_DONE (tag = slot)      | the same for a control call
 * SRV_CLOSE                      | close (kvactd stops)
 * KVA_MSG_TIMER (hello deadline) | no hello yet: P_REFUSED saying why, close
 *
 * KVA_MSG_FD_READY (pidfd)       | a held session's process exited: give back
 *
 * Closing (docs/invariants.md I-MP-1, I-MP-4): the socket is closed; every
 * write reservation is aborted by object id (never stored, never
 * readable), every read lock released and every pin dropped, also those
 * of the slots still in flight once they are answered; then the actor
 * stops. A connection lost in disorder by a live process keeps its ledger
 * until that process exits.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "actors/gauges.h"
#include "actors/log.h"
#include "common/array.h"
#include "common/key.h"
#include "server/session_internal.h"
#include "storage/storage_internal.h"

const pool *pool_of(const srv_session *ss) {
  return l1_manager_pool(ss->sv->s->l1m);
}

void publish_totals(srv_session *ss) {
  __atomic_store_n(&ss->wl, ss->led.writes, __ATOMIC_RELAXED);
  __atomic_store_n(&ss->rl, ss->led.reads, __ATOMIC_RELAXED);
  __atomic_store_n(&ss->pins, ss->led.pins, __ATOMIC_RELAXED);
  actor_stats_gauge(ss->self, 1, ss->led.writes); /* kvinspect's, named at welcome */
  actor_stats_gauge(ss->self, 2, ss->led.reads);
  actor_stats_gauge(ss->self, 3, ss->led.pins);
}

/* ---- slots ----------------------------------------------------------------- */

slot *slot_take(srv_session *ss) {
  if (ss->busy >= MAX_BUSY) return NULL;
  slot *s;
  if (ss->nfree) {
    s = ss->slots[ss->free_ids[--ss->nfree]];
  } else {
    if (!ARRAY_GROW(ss->slots, &ss->slots_cap, ss->nslots + 1) ||
        !ARRAY_GROW(ss->free_ids, &ss->free_cap, ss->nslots + 1))
      return NULL;
    if (!(s = calloc(1, sizeof(*s)))) return NULL;
    s->index = (uint32_t)ss->nslots;
    ss->slots[ss->nslots++] = s;
  }
  ss->busy++;
  return s;
}

void slot_put(srv_session *ss, slot *s) {
  s->state = SL_FREE;
  ss->free_ids[ss->nfree++] = s->index;
  ss->busy--;
}

/* Room for n entries in each array the request needs. */
bool slot_room(slot *s, size_t n) {
  size_t k = n ? n : 1;
  return ARRAY_GROW(s->keys, &s->keys_cap, k) && ARRAY_GROW(s->sub, &s->sub_cap, k) &&
         ARRAY_GROW(s->status, &s->status_cap, k) &&
         ARRAY_GROW(s->sub_status, &s->sub_status_cap, k) && ARRAY_GROW(s->bufs, &s->bufs_cap, k) &&
         ARRAY_GROW(s->ids, &s->ids_cap, k) && ARRAY_GROW(s->pos, &s->pos_cap, k) &&
         ARRAY_GROW(s->held, &s->held_cap, k);
}

/* ---- replies --------------------------------------------------------------- */

void close_conn(srv_session *ss, const char *why);

void send_frame(srv_session *ss, const proto_rep *r, uint64_t id) {
  if (ss->fd < 0) return;
  size_t size = proto_rep_size(r);
  uint8_t *dst = size ? wire_reserve(&ss->out, size, OUT_LIMIT) : NULL;
  if (!dst || proto_rep_put(dst, size, r, id) != size) {
    close_conn(ss, dst ? "a reply that cannot be encoded" : "the client reads no replies");
    return;
  }
  wire_commit(&ss->out, size);
  int rc = wire_flush(ss->fd, &ss->out, -1);
  if (rc < 0) close_conn(ss, strerror(-rc));
}

void reply_result(srv_session *ss, uint16_t type, uint64_t id, int result) {
  proto_rep r = {.type = type, .result = result};
  send_frame(ss, &r, id);
}

/* The spans of bufs[0..n) in the pool (ok: else n empty spans). */
proto_span *spans_of(srv_session *ss, slot *s, uint32_t n, bool ok) {
  /* the sub-batch's key array is free at reply time: reused for spans */
  size_t need = (n * sizeof(proto_span) + sizeof(kva_key) - 1) / sizeof(kva_key);
  if (!ARRAY_GROW(s->sub, &s->sub_cap, need ? need : 1)) return NULL;
  proto_span *sp = (proto_span *)(void *)s->sub;
  for (uint32_t i = 0; i < n; i++)
    sp[i] = ok && s->bufs[i].ptr
                ? (proto_span){pool_offset_of(pool_of(ss), s->bufs[i].ptr), s->bufs[i].len}
                : (proto_span){0, 0};
  return sp;
}

/* ---- the hello deadline ------------------------------------------------------ */

/* A connection holds one of server.max_clients' slots from its accept:
 * one that says nothing would hold it forever. */
static void hello_arm(srv_session *ss) {
  uint64_t ns = (uint64_t)ss->sv->hello_timeout_ms * 1000000u;
  ss->hello_timer = kva_timer(ss->self, ns, 0, 0);
  if (ss->hello_timer < 0) close_conn(ss, "cannot arm its hello deadline");
}

/* Welcomed, or closing: the deadline's timer (a timerfd) is given back at
 * once; a tick already queued finds the session welcomed or closing. */
void hello_done(srv_session *ss) {
  if (ss->hello_timer >= 0) kva_timer_cancel(ss->self, ss->hello_timer);
  ss->hello_timer = -1;
}

static void hello_overdue(srv_session *ss) {
  char msg[160];
  ss->hello_timer = -1; /* a one-shot timer is freed when it fires */
  if (ss->welcomed || ss->closing) return;
  snprintf(msg, sizeof(msg), "no hello within %u ms of connecting (server.hello_timeout_ms)",
           ss->sv->hello_timeout_ms);
  server_refuse(ss->fd, KVA_ETIMEDOUT, msg);
  close_conn(ss, msg);
}

/* ---- frames from the client ------------------------------------------------- */

static void welcome(srv_session *ss, const proto_req *q) {
  const pool *p = pool_of(ss);
  proto_rep r = {.type = P_HELLO,
                 .pool_bytes = pool_capacity(p),
                 .pid = (uint32_t)getpid(),
                 .max_keys = PROTO_MAX_KEYS};
  size_t size = proto_rep_size(&r);
  uint8_t *dst = wire_reserve(&ss->out, size, OUT_LIMIT);
  if (!dst || proto_rep_put(dst, size, &r, 0) != size) {
    close_conn(ss, "cannot encode the welcome");
    return;
  }
  wire_commit(&ss->out, size);
  int rc = wire_flush(ss->fd, &ss->out, pool_fd(p)); /* the memfd rides on the first byte */
  if (rc != 0) {
    close_conn(ss, rc < 0 ? strerror(-rc) : "the welcome did not fit the socket");
    return;
  }
  ss->welcomed = true;
  hello_done(ss);
  ss->idle = false;
  server_session_welcomed(ss->sv);
  char label[KVA_STATS_LABEL];
  snprintf(label, sizeof(label), "pid %d uid %u", (int)ss->pid, (unsigned)ss->uid);
  actor_stats_label(ss->self, label, "requests write_locks read_locks pins");
  LOG_INFO("kvactd: client pid %d uid %u connected (its pid says %u)", (int)ss->pid,
           (unsigned)ss->uid, q->pid);
}

/* A request naming a key twice is refused before the ledger is consulted
 * or anything is sent: the one rule of every call that takes keys
 * (kvact.h, "Batched calls"), checked here too for a client that is not
 * kvact's own (a kvact client refuses such a call itself). True when
 * refused. */
static bool refused_repeat(srv_session *ss, slot *s, const proto_req *q, uint64_t id) {
  if (!q->keys || q->n < 2) return false;
  char call[40], why[KVA_KEY_TEXT_MAX + 200];
  snprintf(call, sizeof(call), "request type %u", q->type);
  int rc = key_repeat_problem(q->keys, q->n, call, why, sizeof(why));
  if (rc == KVA_OK) return false;
  if (rc == KVA_EINVAL) LOG_WARN("kvactd: client pid %d: %s", (int)ss->pid, why);
  slot_put(ss, s);
  reply_result(ss, q->type, id, rc);
  return true;
}

static void on_frame(srv_session *ss, const proto_hdr *h, const uint8_t *p) {
  char why[160];
  slot *s = slot_take(ss);
  /* a frame of len bytes holds at most len / PROTO_KEY_BYTES keys */
  if (!s || !slot_room(s, h->len / PROTO_KEY_BYTES + 1)) {
    if (s) slot_put(ss, s);
    if (ss->welcomed && h->type < P_TYPE_END) {
      reply_result(ss, h->type, h->id, KVA_EAGAIN);
      return;
    }
    close_conn(ss, "out of memory");
    return;
  }
  proto_req q;
  if (proto_req_get(h, p, s->keys, s->keys_cap, &q, why, sizeof(why)) != PROTO_OK) {
    slot_put(ss, s);
    char msg[200];
    snprintf(msg, sizeof(msg), "a malformed frame (%s)", why);
    close_conn(ss, msg);
    return;
  }
  if (q.type == P_BYE) {
    slot_put(ss, s);
    close_conn_as(ss, "goodbye", true);
    return;
  }
  if (!ss->welcomed || q.type == P_HELLO) {
    slot_put(ss, s);
    if (!ss->welcomed && q.type == P_HELLO)
      welcome(ss, &q);
    else
      close_conn(ss, ss->welcomed ? "a second hello" : "a request before the hello");
    return;
  }
  actor_stats_gauge(ss->self, 0, __atomic_add_fetch(&ss->requests, 1, __ATOMIC_RELAXED));
  if (refused_repeat(ss, s, &q, h->id)) return;
  s->state = SL_L1;
  s->ptype = q.type;
  s->id = h->id;
  s->n_client = q.n;
  s->readers = q.readers;
  s->flag = q.flag;
  if (is_ctl(q.type) && !(q.type == P_LOOKUP && lookup_starts_in_l1(ss->sv->s, &q)))
    start_ctl(ss, s, &q);
  else
    start_l1(ss, s, &q);
}

static void on_readable(srv_session *ss) {
  for (;;) {
    int rc = wire_fill(ss->fd, &ss->in, NULL);
    proto_hdr h;
    const uint8_t *p;
    char why[128];
    int f = 1;
    while (!ss->closing && (f = wire_next(&ss->in, &h, &p, why, sizeof(why))) == PROTO_OK)
      on_frame(ss, &h, p);
    if (ss->closing) return;
    if (f == PROTO_EVERSION && !ss->welcomed) {
      char msg[160];
      snprintf(msg, sizeof(msg), "protocol version %u, kvactd speaks version %u", h.version,
               PROTO_VERSION);
      server_refuse(ss->fd, KVA_ENOTSUP, msg);
      close_conn(ss, msg);
      return;
    }
    if (f < 0) {
      char msg[200];
      snprintf(msg, sizeof(msg), "%s (%s)",
               f == PROTO_EMAGIC ? "a peer that speaks no kvact protocol" : "a bad frame", why);
      close_conn(ss, msg);
      return;
    }
    if (rc <= 0) {
      close_conn(ss, rc == 0 ? "closed" : strerror(-rc));
      return;
    }
    if (rc == 1) return;
  }
}

/* ---- the actor --------------------------------------------------------------- */

static void receive(kva_actor *self, void *state, const kva_msg *m) {
  srv_session *ss = state;
  slot *s = m->tag < ss->nslots ? ss->slots[m->tag] : NULL;
  switch (m->type) {
  case SRV_SESSION_START:
    if (kva_watch_fd(self, ss->fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP, 0) != KVA_OK)
      close_conn(ss, "cannot watch the connection");
    else
      hello_arm(ss);
    if (!ss->closing) on_readable(ss);
    break;
  case KVA_MSG_TIMER:
    hello_overdue(ss);
    break;
  case KVA_MSG_FD_READY: {
    kva_fd_event ev;
    memcpy(&ev, m->data, sizeof(ev));
    if (ss->held && ev.fd == ss->pidfd) {
      snprintf(ss->why + strlen(ss->why), sizeof(ss->why) - strlen(ss->why), ", then exited");
      unhold(ss);
      break;
    }
    if (ss->fd < 0 || ev.fd != ss->fd) break;
    if (ev.events & EPOLLOUT) {
      int rc = wire_flush(ss->fd, &ss->out, -1);
      if (rc < 0) close_conn(ss, strerror(-rc));
    }
    if (ss->fd >= 0 && (ev.events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP))) on_readable(ss);
    break;
  }
  case L1_REPLY:
    if (s && s->state != SL_FREE) on_l1_reply(ss, s);
    break;
  case SRV_CTL_DONE:
    if (s && s->state == SL_CTL) on_ctl_done(ss, s);
    break;
  case SRV_CLOSE:
    close_conn_as(ss, "kvactd is stopping", true);
    unhold(ss);
    break;
  default:
    break;
  }
}

static void on_stop(kva_actor *self, void *state) {
  srv_session *ss = state;
  if (ss->fd >= 0) close(ss->fd);
  if (ss->pidfd >= 0) close(ss->pidfd);
  for (size_t i = 0; i < ss->nslots; i++) {
    slot *s = ss->slots[i];
    free(s->keys);
    free(s->sub);
    free(s->status);
    free(s->sub_status);
    free(s->bufs);
    free(s->ids);
    free(s->pos);
    free(s->held);
    free(s->layouts);
    free(s->text);
    free(s->nodes);
    free(s);
  }
  free(ss->slots);
  free(ss->free_ids);
  ledger_free(&ss->led);
  wire_buf_free(&ss->in);
  wire_buf_free(&ss->out);
  free(ss);
}

static const kva_behavior behavior = {"kvactd_session", receive, on_stop};

int session_spawn(server *sv, int fd, pid_t pid, uid_t uid) {
  srv_session *ss = calloc(1, sizeof(*ss));
  if (!ss) return KVA_ENOMEM;
  *ss = (srv_session){.sv = sv, .fd = fd, .pid = pid, .uid = uid, .idle = true, .hello_timer = -1};
  ss->pidfd = (int)syscall(SYS_pidfd_open, pid, 0); /* -1 on old kernels: released at once */
  ss->self = kva_spawn(sv->rt, &behavior, ss, NULL);
  if (!ss->self) {
    free(ss);
    return KVA_ENOMEM;
  }
  server_session_added(sv, ss);
  kva_send(ss->self, SRV_SESSION_START, NULL, 0, NULL, 0);
  return KVA_OK;
}

void session_close(srv_session *ss) {
  kva_send(ss->self, SRV_CLOSE, NULL, 0, NULL, 0);
}

void session_describe(const srv_session *ss, metrics_client *out) {
  *out = (metrics_client){.pid = (uint32_t)ss->pid,
                          .uid = (uint32_t)ss->uid,
                          .requests = __atomic_load_n(&ss->requests, __ATOMIC_RELAXED),
                          .write_locks = __atomic_load_n(&ss->wl, __ATOMIC_RELAXED),
                          .read_locks = __atomic_load_n(&ss->rl, __ATOMIC_RELAXED),
                          .pins = __atomic_load_n(&ss->pins, __ATOMIC_RELAXED)};
}

srv_session *session_next(const srv_session *ss) {
  return ss->next;
}

srv_session **session_next_ref(srv_session *ss) {
  return &ss->next;
}

void session_link(srv_session *ss, srv_session *next) {
  ss->next = next;
}
