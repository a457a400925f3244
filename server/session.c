/*
 * session.c — one actor per client connection of kvactd.
 *
 * Message (type)                 | Action
 * -------------------------------|--------------------------------------------
 * SRV_SESSION_START              | watch the connection
 * KVA_MSG_FD_READY (connection)  | flush replies; read frames: P_HELLO first
 *                                | (another version: P_REFUSED), answered by
 *                                | P_WELCOME with the pool's memfd; each
 *                                | request checked against this client's
 *                                | ledger and sent to the L1 manager as an
 *                                | l1_req of a slot, or to a control thread;
 *                                | EOF, an error or a bad frame: close
 * L1_REPLY (tag = slot)          | ledger updated from the outputs, reply
 *                                | frame sent (closing: none; once no slot
 *                                | is busy, the ledger is given back)
 * SRV_CTL_DONE (tag = slot)      | the same for a control call
 * SRV_CLOSE                      | close (kvactd stops)
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
#include <stdbool.h>
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
#include "l1/l1_manager.h"
#include "l1/pool.h"
#include "server/ledger.h"
#include "server/server_internal.h"
#include "storage/storage_internal.h"
#include "wire/sock.h"

#define MAX_BUSY 4096u               /* requests of one client in flight */
#define OUT_LIMIT ((size_t)64 << 20) /* replies queued for a client that does not read */

enum { SL_FREE, SL_L1, SL_CTL, SL_READ_FAIL, SL_RELEASE };

/* One request of the client in flight (or one release of ours). */
typedef struct slot {
  uint32_t index; /* in the session's slots: the tag of its messages */
  uint32_t state;
  uint16_t ptype;
  uint64_t id; /* the client's */
  uint64_t t0_ns;
  l1_req req;
  kva_layout layout;
  kva_key *keys; /* the client's keys (n_client), then a sub-batch's */
  kva_key *sub;
  uint32_t n_client, readers, flag;
  int *status, *sub_status;
  kva_buf *bufs;
  uint64_t *ids;
  uint32_t *pos;
  size_t keys_cap, sub_cap, status_cap, sub_status_cap, bufs_cap, ids_cap, pos_cap;
  ctl_job job;
  char *text;
} slot;

struct srv_session {
  srv_session *next;
  server *sv;
  kva_actor *self;
  int fd;
  int pidfd; /* the peer process (pidfd_open at accept), or -1 */
  pid_t pid;
  uid_t uid;
  wire_buf in, out;
  bool welcomed, closing;
  bool held; /* closed in disorder with its process alive: the ledger waits for its exit */
  slot **slots;
  size_t nslots, slots_cap;
  uint32_t *free_ids;
  size_t nfree, free_cap;
  uint32_t busy, reads_busy; /* slots in flight; of them, READs */
  bool releasing;            /* a release of the ledger is in flight */
  ledger led;
  uint64_t requests;            /* atomic */
  uint64_t wl, rl, pins;        /* atomic copies of the ledger's totals */
  uint64_t rel_w, rel_r, rel_p; /* given back at close */
  char why[160];
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const pool *pool_of(const srv_session *ss) {
  return l1_manager_pool(ss->sv->s->l1m);
}

static void publish_totals(srv_session *ss) {
  __atomic_store_n(&ss->wl, ss->led.writes, __ATOMIC_RELAXED);
  __atomic_store_n(&ss->rl, ss->led.reads, __ATOMIC_RELAXED);
  __atomic_store_n(&ss->pins, ss->led.pins, __ATOMIC_RELAXED);
  actor_stats_gauge(ss->self, 1, ss->led.writes); /* kvinspect's, named at welcome */
  actor_stats_gauge(ss->self, 2, ss->led.reads);
  actor_stats_gauge(ss->self, 3, ss->led.pins);
}

/* ---- slots ----------------------------------------------------------------- */

static slot *slot_take(srv_session *ss) {
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

static void slot_put(srv_session *ss, slot *s) {
  s->state = SL_FREE;
  ss->free_ids[ss->nfree++] = s->index;
  ss->busy--;
}

/* Room for n entries in each array the request needs. */
static bool slot_room(slot *s, size_t n) {
  size_t k = n ? n : 1;
  return ARRAY_GROW(s->keys, &s->keys_cap, k) && ARRAY_GROW(s->sub, &s->sub_cap, k) &&
         ARRAY_GROW(s->status, &s->status_cap, k) &&
         ARRAY_GROW(s->sub_status, &s->sub_status_cap, k) && ARRAY_GROW(s->bufs, &s->bufs_cap, k) &&
         ARRAY_GROW(s->ids, &s->ids_cap, k) && ARRAY_GROW(s->pos, &s->pos_cap, k);
}

/* ---- replies --------------------------------------------------------------- */

static void close_conn(srv_session *ss, const char *why);

static void send_frame(srv_session *ss, const proto_rep *r, uint64_t id) {
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

static void reply_result(srv_session *ss, uint16_t type, uint64_t id, int result) {
  proto_rep r = {.type = type, .result = result};
  send_frame(ss, &r, id);
}

/* The spans of bufs[0..n) in the pool (ok: else n empty spans). */
static proto_span *spans_of(srv_session *ss, slot *s, uint32_t n, bool ok) {
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

/* ---- closing ---------------------------------------------------------------- */

static void send_l1(srv_session *ss, slot *s, uint32_t type);

/* Gives the ledger back, one request at a time, while the requests still
 * in flight finish (what they take joins the ledger; a READ in flight,
 * which can release locks, is waited for); stops the actor once the
 * ledger is empty and nothing is in flight. */
static void release_step(srv_session *ss) {
  if (ss->releasing || ss->reads_busy || ss->held) return;
  ledger *l = &ss->led;
  slot *s = l->n ? slot_take(ss) : NULL;
  if (l->n && !s) return; /* MAX_BUSY in flight: the next reply calls again */
  if (s && !slot_room(s, l->n)) {
    LOG_ERROR("kvactd: out of memory releasing the locks of pid %d; they stay", (int)ss->pid);
    slot_put(ss, s);
    ledger_free(l);
    s = NULL;
  }
  if (!s && ss->busy) return;
  if (!s) {
    LOG_INFO("kvactd: client pid %d uid %u disconnected (%s): released %lu write reservations, "
             "%lu read locks, %lu pins",
             (int)ss->pid, (unsigned)ss->uid, ss->why, (unsigned long)ss->rel_w,
             (unsigned long)ss->rel_r, (unsigned long)ss->rel_p);
    server_session_gone(ss->sv, ss);
    kva_actor_stop(ss->self);
    return;
  }
  s->state = SL_RELEASE;
  uint32_t n = 0, type, readers = 0;
  ledger_entry *e;
  size_t i = 0;
  if (l->writes) {
    type = L1_ABORT_WRITE;
    while ((e = ledger_next(l, &i)))
      if (e->write_id) {
        s->keys[n] = e->key;
        s->ids[n++] = e->write_id;
      }
    for (uint32_t j = 0; j < n; j++) ledger_set_write(l, ledger_get(l, &s->keys[j]), 0);
    ss->rel_w += n;
  } else if (l->reads) {
    type = L1_FINISH_READ;
    while ((e = ledger_next(l, &i)))
      if (e->reads && (!readers || e->reads == readers)) {
        readers = e->reads;
        s->keys[n++] = e->key;
      }
    for (uint32_t j = 0; j < n; j++)
      ledger_add_reads(l, ledger_get(l, &s->keys[j]), -(int64_t)readers);
    ss->rel_r += (uint64_t)n * readers;
  } else {
    type = L1_UNPIN;
    while ((e = ledger_next(l, &i)))
      if (e->pins) s->keys[n++] = e->key;
    for (uint32_t j = 0; j < n; j++) ledger_add_pins(l, ledger_get(l, &s->keys[j]), -1);
    ss->rel_p += n;
  }
  publish_totals(ss);
  ss->releasing = true;
  s->req = (l1_req){.keys = s->keys,
                    .n = n,
                    .readers = readers,
                    .status = s->status,
                    .ids = type == L1_ABORT_WRITE ? s->ids : NULL};
  send_l1(ss, s, type);
}

static bool peer_alive(const srv_session *ss) {
  struct pollfd p = {.fd = ss->pidfd, .events = POLLIN};
  return ss->pidfd >= 0 && poll(&p, 1, 0) == 0; /* readable once it has exited */
}

/* Ends the connection. In order (P_BYE, kvactd stopping) or with the peer
 * process gone, the ledger is given back now. In disorder (EOF without
 * P_BYE, an error, a bad frame) while the process lives, its threads may
 * still be writing or reading buffers it was given: the ledger is kept
 * until the process exits (docs/invariants.md I-MP-4), so no buffer is
 * ever reused under it. */
static void close_conn_as(srv_session *ss, const char *why, bool orderly) {
  if (ss->closing) return;
  ss->closing = true;
  snprintf(ss->why, sizeof(ss->why), "%s", why);
  if (ss->fd >= 0) {
    kva_unwatch_fd(ss->self, ss->fd);
    close(ss->fd);
    ss->fd = -1;
  }
  wire_buf_free(&ss->in);
  wire_buf_free(&ss->out);
  if (!orderly && (ss->led.n || ss->busy) && peer_alive(ss) &&
      kva_watch_fd(ss->self, ss->pidfd, EPOLLIN, 1) == KVA_OK) {
    ss->held = true;
    LOG_WARN("kvactd: client pid %d lost its connection (%s) but lives: its locks are kept until "
             "it exits",
             (int)ss->pid, why);
    return;
  }
  release_step(ss);
}

static void close_conn(srv_session *ss, const char *why) {
  close_conn_as(ss, why, false);
}

/* The held session's process exited (or kvactd stops): give back. */
static void unhold(srv_session *ss) {
  if (!ss->held) return;
  ss->held = false;
  kva_unwatch_fd(ss->self, ss->pidfd);
  release_step(ss);
}

/* ---- requests to the L1 manager --------------------------------------------- */

static void send_l1(srv_session *ss, slot *s, uint32_t type) {
  l1_req *r = &s->req;
  if (kva_send(ss->sv->s->l1, type, &r, sizeof(r), ss->self, s->index) == KVA_OK) return;
  /* the L1 manager is gone: kvactd is stopping and nothing is held any more */
  if (s->state == SL_RELEASE) ss->releasing = false;
  if (type == L1_READ && s->state == SL_L1) ss->reads_busy--;
  slot_put(ss, s);
  if (s->state != SL_RELEASE && s->state != SL_READ_FAIL)
    reply_result(ss, s->ptype, s->id, KVA_ESHUTDOWN);
  if (ss->closing) release_step(ss);
}

/* FINISH_WRITE / ABORT_WRITE: the keys this client reserved, by object
 * id; any other key is KVA_KEY_WRONG_STATE and untouched. */
static uint32_t pick_writes(srv_session *ss, slot *s) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < s->n_client; i++) {
    ledger_entry *e = ledger_find(&ss->led, &s->keys[i]);
    s->status[i] = KVA_KEY_WRONG_STATE;
    if (!e || !e->write_id) continue;
    s->sub[m] = s->keys[i];
    s->ids[m] = e->write_id;
    s->pos[m++] = i;
    ledger_set_write(&ss->led, e, 0); /* released by this request, whatever comes first */
  }
  return m;
}

/* FINISH_READ: keys holding at least `readers` of this client's read
 * locks; UNPIN: keys it pinned. */
static uint32_t pick_held(srv_session *ss, slot *s, bool pins) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < s->n_client; i++) {
    ledger_entry *e = ledger_find(&ss->led, &s->keys[i]);
    s->status[i] = KVA_KEY_WRONG_STATE;
    if (!e || (pins ? e->pins == 0 : e->reads < s->readers)) continue;
    s->sub[m] = s->keys[i];
    s->pos[m++] = i;
    if (pins) /* released by this request, whatever comes first */
      ledger_add_pins(&ss->led, e, -1);
    else
      ledger_add_reads(&ss->led, e, -(int64_t)s->readers);
  }
  return m;
}

/* READ: every key must hold a read lock of this client. If one does not,
 * one lock of each key that does is released (as in-process) and the
 * answer is KVA_KEY_NOT_READABLE. */
static void start_read(srv_session *ss, slot *s) {
  uint32_t m = 0;
  bool all = true;
  for (uint32_t i = 0; i < s->n_client; i++) {
    ledger_entry *e = ledger_find(&ss->led, &s->keys[i]);
    if (e && e->reads)
      s->sub[m++] = s->keys[i];
    else
      all = false;
  }
  if (all) {
    s->req = (l1_req){.keys = s->keys, .n = s->n_client, .bufs = s->bufs};
    ss->reads_busy++;
    send_l1(ss, s, L1_READ);
    return;
  }
  s->state = SL_READ_FAIL;
  for (uint32_t j = 0; j < m; j++) {
    ledger_entry *e = ledger_find(&ss->led, &s->sub[j]);
    if (e) ledger_add_reads(&ss->led, e, -1);
  }
  if (m == 0) {
    proto_rep rep = {.type = P_READ,
                     .result = KVA_KEY_NOT_READABLE,
                     .n = s->n_client,
                     .spans = spans_of(ss, s, s->n_client, false)};
    slot_put(ss, s);
    if (rep.spans)
      send_frame(ss, &rep, s->id);
    else
      close_conn(ss, "out of memory");
    return;
  }
  s->req = (l1_req){.keys = s->sub, .n = m, .readers = 1};
  send_l1(ss, s, L1_FINISH_READ);
}

/* Lookups start on the L1 manager: with no tier to walk (none, or
 * frozen) that is the whole answer, pins included; without a pin, an L1
 * that holds every key is too. Anything else goes to a control thread
 * (kva_lookup's walk of the tiers). */
static bool tiers_walked(const kva_storage *st) {
  return st->tiers.n > 0 && !l2_frozen(&st->tiers);
}

static bool lookup_starts_in_l1(const kva_storage *st, const proto_req *q) {
  return !tiers_walked(st) || !q->flag;
}

static void start_l1(srv_session *ss, slot *s, const proto_req *q) {
  kva_storage *st = ss->sv->s;
  uint32_t m;
  switch (q->type) {
  case P_RESERVE_WRITE:
    s->layout = q->layout;
    s->req = (l1_req){.keys = s->keys,
                      .n = q->n,
                      .layout = &s->layout,
                      .mode = (int)q->mode,
                      .bufs = s->bufs,
                      .status = s->status,
                      .ids = s->ids};
    send_l1(ss, s, L1_RESERVE_WRITE);
    return;
  case P_FINISH_WRITE:
  case P_ABORT_WRITE:
    if ((m = pick_writes(ss, s)) == 0) break;
    s->req = (l1_req){.keys = s->sub, .n = m, .ids = s->ids, .status = s->sub_status};
    send_l1(ss, s, q->type == P_FINISH_WRITE ? L1_FINISH_WRITE : L1_ABORT_WRITE);
    return;
  case P_DELETE:
    s->req = (l1_req){.keys = s->keys, .n = q->n, .force = (int)q->flag, .status = s->status};
    send_l1(ss, s, L1_DELETE);
    return;
  case P_TOUCH:
    s->req = (l1_req){.keys = s->keys, .n = q->n};
    send_l1(ss, s, L1_TOUCH);
    return;
  case P_CLEAR:
    s->req = (l1_req){.force = (int)q->flag};
    send_l1(ss, s, L1_CLEAR);
    return;
  case P_PREFETCH:
    s->layout = q->layout;
    s->t0_ns = now_ns();
    s->req = (l1_req){.keys = s->keys,
                      .n = q->n,
                      .layout = q->flag ? &s->layout : NULL,
                      .readers = q->readers,
                      .l2 = q->flag && st->prefetcher && !l2_frozen(&st->tiers)};
    send_l1(ss, s, L1_PREFETCH);
    return;
  case P_READ:
    start_read(ss, s);
    return;
  case P_LOOKUP:
    s->req = (l1_req){.keys = s->keys, .n = q->n, .pin = (int)q->flag};
    send_l1(ss, s, L1_LOOKUP);
    return;
  case P_FINISH_READ:
    if ((m = pick_held(ss, s, false)) == 0) break;
    s->req = (l1_req){.keys = s->sub, .n = m, .readers = q->readers, .status = s->sub_status};
    send_l1(ss, s, L1_FINISH_READ);
    return;
  case P_UNPIN:
    if ((m = pick_held(ss, s, true)) == 0) break;
    s->req = (l1_req){.keys = s->sub, .n = m, .status = s->sub_status};
    send_l1(ss, s, L1_UNPIN);
    return;
  }
  /* nothing of this client's to release */
  proto_rep r = {.type = q->type, .n = s->n_client, .status = s->status};
  slot_put(ss, s);
  send_frame(ss, &r, s->id);
}

/* The calls that span the tiers go to a control thread. */
static void start_ctl(srv_session *ss, slot *s, const proto_req *q) {
  ctl_job *j = &s->job;
  *j = (ctl_job){.s = ss->sv->s,
                 .type = q->type,
                 .keys = s->keys,
                 .n = q->n,
                 .flag = q->flag,
                 .timeout_ms = q->timeout_ms,
                 .report_len = q->report_len};
  memcpy(j->tier, q->tier, sizeof(j->tier));
  if (q->type == P_MEMCHECK && q->report_len) {
    if (!s->text && !(s->text = malloc(PROTO_MAX_TEXT))) j->report_len = 0;
    j->text = s->text;
  }
  s->state = SL_CTL;
  if (control_submit(ss->sv, q->type == P_LOOKUP ? 0 : 1, j, ss->self, s->index) != KVA_OK) {
    slot_put(ss, s);
    reply_result(ss, q->type, s->id, KVA_ESHUTDOWN);
  }
}

static bool is_ctl(uint16_t type) {
  return type == P_LOOKUP || type == P_MEMCHECK || type == P_STATS || type == P_FLUSH ||
         type == P_FREEZE || type == P_SET_BYPASS || type == P_BYPASSED || type == P_L2_CONTAINS ||
         type == P_TIER_STATS;
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
  char label[KVA_STATS_LABEL];
  snprintf(label, sizeof(label), "pid %d uid %u", (int)ss->pid, (unsigned)ss->uid);
  actor_stats_label(ss->self, label, "requests write_locks read_locks pins");
  LOG_INFO("kvactd: client pid %d uid %u connected (its pid says %u)", (int)ss->pid,
           (unsigned)ss->uid, q->pid);
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

/* ---- replies from the L1 manager and the control threads --------------------- */

static void start_ctl(srv_session *ss, slot *s, const proto_req *q);

/* An L1 lookup's answer as kva_lookup gives it: L1's hits, then every
 * tier (up to the report's room) with none. */
static void lookup_of_l1(const kva_storage *st, size_t hits, kva_tier_hits *out) {
  memset(out, 0, sizeof(*out));
  strcpy(out->tier[0].name, "L1");
  out->tier[0].hits = out->total = hits;
  out->ntiers = 1;
  const uint32_t room = (uint32_t)(sizeof(out->tier) / sizeof(out->tier[0]));
  for (uint32_t t = 0; t < st->tiers.n && out->ntiers < room; t++)
    memcpy(out->tier[out->ntiers++].name, st->tiers.t[t].name, sizeof(out->tier[0].name));
}

/* What the reply of slot s tells the ledger, then its frame. */
static void on_l1_reply(srv_session *ss, slot *s) {
  ledger *l = &ss->led;
  l1_req *r = &s->req;
  proto_rep rep = {.type = s->ptype, .result = r->result, .n = s->n_client, .status = s->status};
  switch (s->state == SL_RELEASE || s->state == SL_READ_FAIL ? 0 : s->ptype) {
  case 0:
    if (s->state == SL_RELEASE) ss->releasing = false;
    if (s->state == SL_READ_FAIL) {
      rep = (proto_rep){.type = P_READ, .result = KVA_KEY_NOT_READABLE, .n = s->n_client};
      rep.spans = spans_of(ss, s, s->n_client, false);
    }
    break;
  case P_RESERVE_WRITE:
    for (size_t i = 0; i < r->n; i++) {
      if (s->status[i] != KVA_OK) continue;
      ledger_entry *e = ledger_get(l, &s->keys[i]);
      if (e)
        ledger_set_write(l, e, s->ids[i]);
      else
        LOG_ERROR("kvactd: out of memory: a reservation of pid %d is not tracked", (int)ss->pid);
    }
    rep.spans = spans_of(ss, s, s->n_client, true);
    break;
  case P_FINISH_WRITE:
  case P_ABORT_WRITE:
    rep.result = 0;
    for (size_t j = 0; j < r->n; j++) {
      int st = s->sub_status[j];
      s->status[s->pos[j]] = st;
      rep.result += st == KVA_OK;
      ledger_entry *e = st == KVA_KEY_WRONG_STATE ? ledger_get(l, &r->keys[j]) : NULL;
      if (e) ledger_set_write(l, e, s->ids[j]); /* not released: still ours */
    }
    break;
  case P_LOOKUP:
    if (r->result == KVA_OK && r->hits < r->n && tiers_walked(ss->sv->s) && !ss->closing) {
      /* L1 misses some: the tiers are walked by kva_lookup */
      proto_req q = {.type = P_LOOKUP, .n = s->n_client, .flag = s->flag};
      start_ctl(ss, s, &q);
      return;
    }
    if (r->result == KVA_OK && r->pin) /* the L1 hits are pinned, one pin each */
      for (size_t i = 0; i < r->hits; i++) {
        ledger_entry *e = ledger_get(l, &s->keys[i]);
        if (e) ledger_add_pins(l, e, 1);
      }
    lookup_of_l1(ss->sv->s, r->result == KVA_OK ? r->hits : 0, &s->job.lookup);
    rep.lookup = &s->job.lookup;
    break;
  case P_PREFETCH:
    rep.hits = r->result == KVA_OK ? r->hits : 0;
    for (size_t i = 0; i < rep.hits; i++) {
      ledger_entry *e = ledger_get(l, &s->keys[i]);
      if (e) ledger_add_reads(l, e, s->readers);
    }
    latency_observe(&ss->sv->prefetch_latency, now_ns() - s->t0_ns);
    break;
  case P_READ:
    ss->reads_busy--;
    if (r->result != KVA_OK) /* the manager released one lock of each key holding one */
      for (size_t i = 0; i < r->n; i++) {
        ledger_entry *e = ledger_find(l, &r->keys[i]);
        if (e) ledger_add_reads(l, e, -1);
      }
    rep.spans = spans_of(ss, s, s->n_client, r->result == KVA_OK);
    break;
  default:
    break;
  }
  publish_totals(ss);
  bool answer = s->state != SL_RELEASE;
  if (answer && !ss->closing && (rep.spans || (s->ptype != P_READ && s->ptype != P_RESERVE_WRITE)))
    send_frame(ss, &rep, s->id);
  else if (answer && !ss->closing)
    close_conn(ss, "out of memory");
  slot_put(ss, s);
  if (ss->closing) release_step(ss);
}

static void on_ctl_done(srv_session *ss, slot *s) {
  ctl_job *j = &s->job;
  proto_rep rep = {.type = s->ptype, .result = j->result, .n = s->n_client};
  if (s->ptype == P_LOOKUP) {
    rep.lookup = &j->lookup;
    if (j->result == KVA_OK && j->flag) /* the L1 hits are pinned, one pin each */
      for (size_t i = 0; i < j->lookup.tier[0].hits; i++) {
        ledger_entry *e = ledger_get(&ss->led, &s->keys[i]);
        if (e) ledger_add_pins(&ss->led, e, 1);
      }
    publish_totals(ss);
  } else if (s->ptype == P_STATS) {
    rep.stats = &j->stats;
  } else if (s->ptype == P_TIER_STATS) {
    rep.tier_stats = &j->tier_stats;
  } else if (s->ptype == P_MEMCHECK) {
    rep.text = j->text;
    rep.text_len = j->text ? (uint32_t)strnlen(j->text, j->report_len) : 0;
  }
  if (!ss->closing) send_frame(ss, &rep, s->id);
  slot_put(ss, s);
  if (ss->closing) release_step(ss);
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
      on_readable(ss);
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
    free(s->text);
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
  *ss = (srv_session){.sv = sv, .fd = fd, .pid = pid, .uid = uid};
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

void session_describe(const srv_session *ss, server_client *out) {
  *out = (server_client){.pid = (uint32_t)ss->pid,
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
