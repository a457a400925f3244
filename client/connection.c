/*
 * connection.c — a client's connection to kvactd (connection.h).
 *
 * Callers do not hand their requests to a thread: client_conn_send, under
 * the connection's lock, puts the request in a slot named by the frame id
 * and writes the frame to the socket from the caller's own thread. One
 * reader thread per connection owns the rest: connect and hello (with
 * back-off from 20 ms to 1 s while the daemon is away), the welcome and
 * its pool mapping, the replies (each fills its request and rings its
 * sender's port with L1_REPLY), the late reply of an abandoned request
 * (undone: P_ABORT_WRITE / P_FINISH_READ / P_UNPIN), the deadlines
 * (client.timeout_ms: KVA_ETIMEDOUT, misses for prefetches and lookups),
 * and the output the socket could not take at once. A round trip so
 * wakes the daemon and then one thread here, not three. A daemon of
 * another protocol version refuses the hello: until a daemon welcomes
 * this client (or none answers at all), its calls answer KVA_ENOTSUP.
 *
 * Message (type)                 | Action
 * -------------------------------|--------------------------------------------
 * L1_* (l1_req *), CL_CALL       | client_conn_send (the copy actors' ends
 *   (client_call *)              | of kva_kv_* come this way)
 * (stop)                         | the reader stops; P_BYE, close: the daemon
 *                                | releases at once
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "actors/clock.h"
#include "actors/log.h"
#include "client/connection.h"
#include "common/array.h"
#include "l1/host_pin.h"
#include "l1/l1_manager.h"
#include "wire/sock.h"

#define MAX_SLOTS 32768u             /* requests in flight (sessions + copy actors' ends) */
#define OUT_LIMIT ((size_t)64 << 20) /* bytes queued for a daemon that does not read */
#define RETRY_MIN_MS 20
#define RETRY_MAX_MS 1000

enum { DOWN, HELLO, UP };
enum { SLOT_FREE, SLOT_CALLER, SLOT_ABANDONED, SLOT_RELEASE };

/* One request in flight. A request that takes locks (reserve, prefetch,
 * pinned lookup) keeps a copy of its keys, so that the late reply of an
 * abandoned one can be undone; every request keeps how many keys it
 * asked (n), which its reply, late or not, must answer. */
typedef struct slot {
  uint64_t id;
  uint32_t state, kind; /* SLOT_*, the L1_* type or CL_CALL */
  uint16_t ptype;
  kva_actor *from;
  uint64_t tag;
  l1_req *r;
  client_call *c;
  uint64_t deadline_ns;
  kva_key *keys;
  size_t keys_cap;
  uint32_t n, readers;
  uint32_t nodes_cap;     /* TIER_NODES: the entries asked */
  uint32_t layouts_asked; /* READ: its reply carries layouts (PROTO_READ_LAYOUTS) */
  uint32_t next_free;
} slot;

typedef struct reply_to {
  kva_actor *to;
  uint64_t tag;
} reply_to;

typedef struct mapping {
  void *base;
  uint64_t bytes;
  int pinned;
  pthread_t populate; /* fills the page tables in the background */
  bool populating;
} mapping;

struct client_conn {
  kva_actor *self;
  struct sockaddr_un addr;
  int timeout_ms;
  pthread_mutex_t lock; /* all below but the reader's own */
  int fd, state;
  uint32_t up; /* atomic: state == UP */
  uint64_t hello_deadline_ns, retry_at_ns;
  int retry_ms;
  bool refused_logged, stop;
  int other_version; /* KVA_ENOTSUP: the daemon speaks another protocol version */
  mapping pool;      /* the current connection's */
  mapping *old;
  size_t nold, old_cap;
  wire_buf out;
  slot *slots;
  uint32_t free_head, nused; /* free list (UINT32_MAX = empty), slots ever used */
  uint32_t inflight;
  uint64_t seq;
  reply_to *ans; /* answers to deliver (by the reader, out of the lock) */
  size_t nans, ans_cap;
  /* the reader thread's own */
  reply_to *deliv;
  size_t deliv_cap;
  pthread_t reader;
  int wake_fd; /* eventfd: output waits, or stop */
  wire_buf in;
  int fd_in;       /* the memfd that came with P_WELCOME */
  int32_t *status; /* decode scratch, PROTO_MAX_KEYS each */
  proto_span *spans;
  kva_layout *layouts; /* decode scratch of READs with layouts, grown to their n */
  size_t layouts_cap;
  char text[PROTO_MAX_TEXT + 1];
};

static void wake_reader(client_conn *c) {
  uint64_t one = 1;
  if (write(c->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
    LOG_ERROR("client: cannot wake the reader: %s", strerror(errno));
}

/* ---- answering the sender ------------------------------------------------ */

static bool takes_locks(uint16_t ptype) {
  return ptype == P_RESERVE_WRITE || ptype == P_PREFETCH || ptype == P_LOOKUP;
}

/* The answer of a request the daemon will not (or not in time) give:
 * prefetches and lookups miss, everything else gets err. */
static void fail_outputs(slot *s, int err) {
  if (s->kind == CL_CALL) {
    client_call *c = s->c;
    c->result = err;
    if (c->req.type == P_LOOKUP && c->lookup) {
      memset(c->lookup, 0, sizeof(*c->lookup));
      strcpy(c->lookup->tier[0].name, "L1");
      c->lookup->ntiers = 1;
      c->result = KVA_OK;
    }
    return;
  }
  l1_req *r = s->r;
  if (s->kind == L1_PREFETCH) {
    r->result = KVA_OK;
    r->hits = 0;
    return;
  }
  r->result = err;
  if (s->kind == L1_MEMCHECK && r->report_len)
    snprintf(r->report, r->report_len, "kvactd: %s", kva_strerror(err));
}

/* Answers are delivered by the reader once it has let go of the lock: a
 * send to a full actor mailbox waits, and must not wait holding it. */
static void answer(client_conn *c, slot *s) {
  if (ARRAY_GROW(c->ans, &c->ans_cap, c->nans + 1)) {
    c->ans[c->nans++] = (reply_to){s->from, s->tag};
    return;
  }
  kva_send(s->from, L1_REPLY, NULL, 0, c->self, s->tag); /* out of memory: at once */
}

/* The reader, lock held: sends the queued answers without it. */
static void deliver(client_conn *c) {
  while (c->nans) {
    size_t n = c->nans;
    if (!ARRAY_GROW(c->deliv, &c->deliv_cap, n)) return; /* the next turn tries again */
    memcpy(c->deliv, c->ans, n * sizeof(*c->ans));
    c->nans = 0;
    pthread_mutex_unlock(&c->lock);
    for (size_t i = 0; i < n; i++)
      kva_send(c->deliv[i].to, L1_REPLY, NULL, 0, c->self, c->deliv[i].tag);
    pthread_mutex_lock(&c->lock);
  }
}

/* ---- slots ----------------------------------------------------------------- */

static slot *slot_take(client_conn *c) {
  uint32_t i;
  if (c->free_head != UINT32_MAX) {
    i = c->free_head;
    c->free_head = c->slots[i].next_free;
  } else if (c->nused < MAX_SLOTS) {
    i = c->nused++;
  } else {
    return NULL;
  }
  slot *s = &c->slots[i];
  s->id = (++c->seq << 16) | i;
  c->inflight++;
  return s;
}

static void slot_put(client_conn *c, slot *s) {
  s->state = SLOT_FREE;
  s->id = 0;
  s->r = NULL;
  s->c = NULL;
  s->from = NULL;
  s->next_free = c->free_head;
  c->free_head = (uint32_t)(s - c->slots);
  c->inflight--;
}

/* ---- the socket (under the lock) --------------------------------------------- */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

typedef struct span_arg {
  void *base;
  uint64_t bytes;
} span_arg;

/* Maps every page of the pool into this process's page tables, as the
 * daemon's l1.prefault does for its own mapping, so the engine's first
 * write of each page does not fault. In the background: a large pool
 * takes seconds. Without MADV_POPULATE_WRITE pages fault in on first use. */
static void *populate_main(void *arg) {
  span_arg a = *(span_arg *)arg;
  free(arg);
  madvise(a.base, a.bytes, MADV_POPULATE_WRITE);
  return NULL;
}

static void populate(mapping *m) {
  span_arg *a = malloc(sizeof(*a));
  if (!a) return;
  *a = (span_arg){m->base, m->bytes};
  m->populating = pthread_create(&m->populate, NULL, populate_main, a) == 0;
  if (!m->populating) free(a);
}

static void unmap(mapping *m) {
  if (!m->base) return;
  if (m->populating) pthread_join(m->populate, NULL);
  if (m->pinned) host_unpin(m->base);
  munmap(m->base, m->bytes);
  *m = (mapping){0};
}

static void retry_later(client_conn *c) {
  c->retry_at_ns = clock_mono_ns() + (uint64_t)c->retry_ms * 1000000u;
  c->retry_ms = c->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : c->retry_ms * 2;
}

/* Ends the connection: what was in flight fails (the daemon releases its
 * locks), the pool stays mapped for the buffers still held. */
static void drop(client_conn *c, const char *why) {
  if (c->fd < 0) return;
  if (c->state == UP) LOG_WARN("client: lost kvactd at %s: %s", c->addr.sun_path, why);
  close(c->fd);
  c->fd = -1;
  if (c->fd_in >= 0) close(c->fd_in);
  c->fd_in = -1;
  c->state = DOWN;
  __atomic_store_n(&c->up, 0, __ATOMIC_RELEASE);
  if (c->pool.base) {
    if (ARRAY_GROW(c->old, &c->old_cap, c->nold + 1))
      c->old[c->nold++] = c->pool;
    else
      LOG_ERROR("client: out of memory keeping an old pool mapped; it stays mapped, untracked");
    c->pool = (mapping){0};
  }
  c->in.off = c->in.len = 0;
  c->out.off = c->out.len = 0;
  for (uint32_t i = 0; i < c->nused; i++) {
    slot *s = &c->slots[i];
    if (s->state == SLOT_FREE) continue;
    if (s->state == SLOT_CALLER) {
      fail_outputs(s, KVA_ESHUTDOWN);
      answer(c, s);
    }
    slot_put(c, s);
  }
  retry_later(c);
}

/* Queues one frame of q with id; false when it cannot be encoded or the
 * output is over its limit. */
static bool queue_frame(client_conn *c, const proto_req *q, uint64_t id) {
  size_t size = proto_req_size(q);
  uint8_t *dst = size ? wire_reserve(&c->out, size, OUT_LIMIT) : NULL;
  if (!dst || proto_req_put(dst, size, q, id) != size) return false;
  wire_commit(&c->out, size);
  return true;
}

/* Writes what the socket takes; the rest waits for the reader's POLLOUT. */
static void flush(client_conn *c) {
  if (c->fd < 0 || c->out.off == c->out.len) return;
  int rc = wire_flush(c->fd, &c->out, -1);
  if (rc < 0)
    drop(c, strerror(-rc));
  else if (rc == 1)
    wake_reader(c);
}

static void try_connect(client_conn *c) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&c->addr, sizeof(c->addr)) != 0) {
    if (fd >= 0) close(fd);
    c->other_version = 0; /* no daemon at all now */
    retry_later(c);
    return;
  }
  c->fd = fd;
  c->state = HELLO;
  c->hello_deadline_ns = clock_mono_ns() + (uint64_t)c->timeout_ms * 1000000u;
  proto_req hello = {.type = P_HELLO, .pid = (uint32_t)getpid()};
  if (!queue_frame(c, &hello, 0)) {
    drop(c, "cannot encode the hello");
    return;
  }
  flush(c);
}

static void on_welcome(client_conn *c, const proto_hdr *h, const uint8_t *p) {
  proto_rep rep = {.type = P_HELLO, .text = c->text, .text_cap = sizeof(c->text)};
  int rc = proto_rep_get(h, p, 0, &rep, c->text, sizeof(c->text));
  if (rc != PROTO_OK) {
    drop(c, "a bad welcome");
    return;
  }
  if (rep.type == P_REFUSED) {
    if (!c->refused_logged)
      LOG_ERROR("client: kvactd at %s refused this client: %s", c->addr.sun_path, c->text);
    c->refused_logged = true;
    c->other_version = h->version != PROTO_VERSION ? KVA_ENOTSUP : 0;
    c->retry_ms = RETRY_MAX_MS;
    drop(c, "refused");
    return;
  }
  void *base = c->fd_in >= 0 && rep.pool_bytes
                   ? mmap(NULL, rep.pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd_in, 0)
                   : MAP_FAILED;
  if (c->fd_in >= 0) close(c->fd_in);
  c->fd_in = -1;
  if (base == MAP_FAILED) {
    drop(c, "cannot map the daemon's pool");
    return;
  }
  c->pool = (mapping){.base = base, .bytes = rep.pool_bytes};
  populate(&c->pool);
  /* the copy actors of a CUDA client DMA into this mapping */
  c->pool.pinned = host_pin_available() && host_pin(base, rep.pool_bytes) == KVA_OK;
  c->state = UP;
  c->retry_ms = RETRY_MIN_MS;
  c->refused_logged = false;
  c->other_version = 0;
  __atomic_store_n(&c->up, 1, __ATOMIC_RELEASE);
  LOG_INFO("client: connected to kvactd (pid %u) at %s, pool %lu bytes", rep.pid, c->addr.sun_path,
           (unsigned long)rep.pool_bytes);
}

/* ---- requests -------------------------------------------------------------- */

static uint16_t ptype_of(uint32_t kind) {
  switch (kind) {
  case L1_RESERVE_WRITE:
    return P_RESERVE_WRITE;
  case L1_FINISH_WRITE:
    return P_FINISH_WRITE;
  case L1_ABORT_WRITE:
    return P_ABORT_WRITE;
  case L1_DELETE:
    return P_DELETE;
  case L1_TOUCH:
    return P_TOUCH;
  case L1_CLEAR:
    return P_CLEAR;
  case L1_PREFETCH:
    return P_PREFETCH;
  case L1_READ:
    return P_READ;
  case L1_FINISH_READ:
    return P_FINISH_READ;
  case L1_UNPIN:
    return P_UNPIN;
  case L1_MEMCHECK:
    return P_MEMCHECK;
  case L1_STATS:
    return P_STATS;
  default:
    return 0;
  }
}

/* The frame of an L1 request. */
static int req_of(uint16_t ptype, const l1_req *r, proto_req *q) {
  *q = (proto_req){.type = ptype, .n = (uint32_t)r->n, .keys = r->keys, .readers = r->readers};
  if (r->n > PROTO_MAX_KEYS) return KVA_EINVAL;
  switch (ptype) {
  case P_RESERVE_WRITE:
    if (r->temporary || r->ids) return KVA_ENOTSUP;
    q->mode = (uint32_t)r->mode;
    q->layout = *r->layout;
    break;
  case P_DELETE:
  case P_CLEAR:
    q->flag = r->force != 0;
    break;
  case P_PREFETCH:
    q->flag = (r->layout != NULL) | (r->as_planned ? PROTO_PREFETCH_AS_PLANNED : 0);
    if (r->layout) q->layout = *r->layout;
    break;
  case P_READ:
    q->flag = r->layouts ? PROTO_READ_LAYOUTS : 0;
    break;
  case P_MEMCHECK:
    q->report_len = r->report_len < PROTO_MAX_TEXT ? (uint32_t)r->report_len : PROTO_MAX_TEXT;
    q->flag = r->callers_only != 0;
    break;
  default:
    break;
  }
  return KVA_OK;
}

static bool keep_keys(slot *s, const kva_key *k, size_t n) {
  if (!ARRAY_GROW(s->keys, &s->keys_cap, n)) return false;
  memcpy(s->keys, k, n * sizeof(*k));
  s->n = (uint32_t)n;
  return true;
}

/* A request into a slot and onto the socket, under the lock. */
static int start_request(client_conn *c, slot *tmp, const proto_req *q) {
  if (c->state != UP && c->other_version) return c->other_version;
  if (c->state == DOWN) return KVA_ESHUTDOWN;
  slot *s = slot_take(c);
  if (!s) return KVA_EAGAIN;
  bool locks = takes_locks(tmp->ptype) && (tmp->ptype != P_LOOKUP || q->flag);
  if (locks && !keep_keys(s, q->keys, q->n)) {
    slot_put(c, s);
    return KVA_ENOMEM;
  }
  if (!queue_frame(c, q, s->id)) {
    slot_put(c, s);
    return KVA_EAGAIN;
  }
  uint64_t id = s->id;
  /* the keys asked, kept or not: a late reply is checked against them */
  uint32_t n = q->n;
  *s = (slot){.id = id,
              .state = SLOT_CALLER,
              .kind = tmp->kind,
              .ptype = tmp->ptype,
              .from = tmp->from,
              .tag = tmp->tag,
              .r = tmp->r,
              .c = tmp->c,
              .deadline_ns = clock_mono_ns() + (uint64_t)c->timeout_ms * 1000000u,
              .keys = s->keys,
              .keys_cap = s->keys_cap,
              .n = n,
              .readers = q->readers,
              .nodes_cap = q->cap,
              .layouts_asked = tmp->ptype == P_READ && (q->flag & PROTO_READ_LAYOUTS)};
  flush(c);
  return KVA_OK;
}

int client_conn_send(client_conn *c, uint32_t type, const void *payload, kva_actor *from,
                     uint64_t tag) {
  slot tmp = {.kind = type, .from = from, .tag = tag};
  proto_req q;
  int rc = KVA_OK;
  if (type == CL_CALL) {
    tmp.c = (client_call *)payload;
    q = tmp.c->req;
    tmp.ptype = q.type;
  } else {
    tmp.r = (l1_req *)payload;
    tmp.ptype = ptype_of(type);
    rc = tmp.ptype ? req_of(tmp.ptype, tmp.r, &q) : KVA_ENOTSUP;
  }
  pthread_mutex_lock(&c->lock);
  if (rc == KVA_OK) rc = start_request(c, &tmp, &q);
  if (rc != KVA_OK) fail_outputs(&tmp, rc);
  bool others = c->nans > 0; /* a drop on this thread failed other requests */
  pthread_mutex_unlock(&c->lock);
  if (others) wake_reader(c);
  if (rc != KVA_OK) kva_send(from, L1_REPLY, NULL, 0, c->self, tag);
  return KVA_OK;
}

/* ---- replies (the reader, under the lock) ------------------------------------ */

/* Sends our own request undoing what a late reply locked (the slot turns
 * into that request; its reply only frees it). */
static void undo(client_conn *c, slot *s, uint16_t ptype, uint32_t n) {
  proto_req q = {.type = ptype, .n = n, .keys = s->keys, .readers = s->readers};
  s->state = SLOT_RELEASE;
  s->ptype = ptype; /* its reply is checked as this request's */
  s->n = n;
  s->id = (++c->seq << 16) | (uint64_t)(s - c->slots);
  s->deadline_ns = UINT64_MAX;
  if (n == 0 || !queue_frame(c, &q, s->id)) {
    if (n) LOG_ERROR("client: cannot release the locks of a late reply; they last until reconnect");
    slot_put(c, s);
  }
}

/* The late reply of an abandoned request: what it took is given back. */
static void on_late(client_conn *c, slot *s, const proto_rep *rep) {
  if (rep->result < 0) {
    slot_put(c, s);
    return;
  }
  if (s->ptype == P_RESERVE_WRITE) {
    uint32_t j = 0;
    for (uint32_t i = 0; i < rep->n; i++)
      if (rep->status[i] == KVA_OK) s->keys[j++] = s->keys[i];
    undo(c, s, P_ABORT_WRITE, j);
  } else if (s->ptype == P_PREFETCH) {
    undo(c, s, P_FINISH_READ, (uint32_t)rep->hits);
  } else if (s->ptype == P_LOOKUP && rep->lookup) {
    undo(c, s, P_UNPIN, (uint32_t)rep->lookup->tier[0].hits);
  } else {
    slot_put(c, s);
  }
}

/* Where the outputs of a reply without a caller go (a late one's nodes
 * are checked, not kept). */
typedef struct scratch {
  kva_tier_hits lookup;
  kva_l2_tier_stats tier_stats;
  kva_l2_tier_keys tier_keys;
  kva_storage_stats stats;
} scratch;

/* Where a reply's outputs go: the caller's request, or scratch for a late
 * one. */
static void rep_targets(client_conn *c, slot *s, proto_rep *rep, scratch *x) {
  *rep = (proto_rep){.type = s->ptype,
                     .n = s->state == SLOT_CALLER && s->r ? (uint32_t)s->r->n : s->n,
                     .status = c->status,
                     .spans = c->spans,
                     .lookup = &x->lookup,
                     .tier_stats = &x->tier_stats,
                     .tier_keys = &x->tier_keys,
                     .stats = &x->stats,
                     .nodes_cap = s->nodes_cap,
                     .layouts_asked = s->layouts_asked,
                     .text = c->text,
                     .text_cap = sizeof(c->text)};
  if (s->state != SLOT_CALLER) return; /* a late READ's layouts: checked, not kept */
  if (s->c) {
    rep->n = s->c->req.n;
    if (s->c->lookup) rep->lookup = s->c->lookup;
    if (s->c->tier_stats) rep->tier_stats = s->c->tier_stats;
    if (s->c->tier_keys) rep->tier_keys = s->c->tier_keys;
    rep->nodes = s->c->nodes;
  } else if (s->r->stats) {
    rep->stats = s->r->stats;
  } else if (s->r->memcheck) {
    rep->memcheck = s->r->memcheck;
  } else if (s->layouts_asked && ARRAY_GROW(c->layouts, &c->layouts_cap, rep->n ? rep->n : 1)) {
    rep->layouts = c->layouts; /* NULL (out of memory): fill_request says so */
  }
}

/* The buffers of a reply's spans, in this client's mapping of the pool. */
static void fill_bufs(client_conn *c, l1_req *r, const proto_rep *rep) {
  for (uint32_t i = 0; i < rep->n; i++) {
    const proto_span *sp = &c->spans[i];
    r->bufs[i] = sp->len ? (kva_buf){(uint8_t *)c->pool.base + sp->off, sp->len} : (kva_buf){0};
  }
}

/* A READ's layouts, when it asked for them. False (KVA_ENOMEM, nothing
 * filled, its locks still held as after a timeout) when a read that
 * succeeded had no room to decode them into; one that failed has none
 * (zeros, as in-process). */
static bool fill_layouts(l1_req *r, const proto_rep *rep) {
  if (!r->layouts || !rep->n) return true;
  if (rep->layouts) {
    memcpy(r->layouts, rep->layouts, rep->n * sizeof(*r->layouts));
  } else if (rep->result != KVA_OK) {
    memset(r->layouts, 0, rep->n * sizeof(*r->layouts));
  } else {
    r->result = KVA_ENOMEM;
    return false;
  }
  return true;
}

static void fill_request(client_conn *c, slot *s, const proto_rep *rep) {
  if (s->c) {
    s->c->result = rep->result;
    if (rep->result >= 0 && s->ptype == P_TIER_NODES) {
      s->c->nodes_n = rep->nodes_n;
      s->c->map_age_s = rep->map_age_s;
    }
    return;
  }
  l1_req *r = s->r;
  r->result = rep->result;
  if (rep->result < 0 && s->kind != L1_MEMCHECK) return;
  switch (s->kind) {
  case L1_READ:
    if (fill_layouts(r, rep)) fill_bufs(c, r, rep);
    break;
  case L1_RESERVE_WRITE:
    fill_bufs(c, r, rep);
    /* fall through */
  case L1_FINISH_WRITE:
  case L1_ABORT_WRITE:
  case L1_DELETE:
    if (r->status)
      for (uint32_t i = 0; i < rep->n; i++) r->status[i] = rep->status[i];
    break;
  case L1_PREFETCH:
    r->hits = rep->hits;
    break;
  case L1_MEMCHECK:
    if (r->report_len) snprintf(r->report, r->report_len, "%s", c->text);
    break;
  default:
    break;
  }
}

static void on_reply(client_conn *c, const proto_hdr *h, const uint8_t *p) {
  uint32_t i = (uint32_t)(h->id & 0xffff);
  slot *s = i < c->nused ? &c->slots[i] : NULL;
  if (!s || s->state == SLOT_FREE || s->id != h->id) {
    drop(c, "a reply to no request");
    return;
  }
  scratch x;
  proto_rep rep;
  rep_targets(c, s, &rep, &x);
  c->text[0] = 0;
  char why[128];
  if (proto_rep_get(h, p, c->pool.bytes, &rep, why, sizeof(why)) != PROTO_OK ||
      rep.type == P_REFUSED) {
    drop(c, why);
    return;
  }
  if (s->state == SLOT_ABANDONED) {
    on_late(c, s, &rep);
    return;
  }
  if (s->state == SLOT_CALLER) {
    fill_request(c, s, &rep);
    answer(c, s);
  }
  slot_put(c, s);
}

/* The next frame; before the welcome, a refusal of another protocol
 * version too (wire_next_refusal), so that its reason is read. */
static int next_frame(client_conn *c, proto_hdr *h, const uint8_t **p, char *why, size_t whylen) {
  int f = wire_next(&c->in, h, p, why, whylen);
  if (f != PROTO_EVERSION || c->state != HELLO) return f;
  int r = wire_next_refusal(&c->in, h, p);
  return r == PROTO_EVERSION ? f : r;
}

static void on_readable(client_conn *c) {
  for (;;) {
    int rc = wire_fill(c->fd, &c->in, &c->fd_in);
    proto_hdr h;
    const uint8_t *p;
    char why[128];
    int f = 1;
    while (c->fd >= 0 && (f = next_frame(c, &h, &p, why, sizeof(why))) == PROTO_OK) {
      if (c->state == HELLO)
        on_welcome(c, &h, p);
      else
        on_reply(c, &h, p);
    }
    if (c->fd < 0) return;
    if (f < 0) {
      drop(c, why);
      return;
    }
    if (rc <= 0) {
      drop(c, rc == 0 ? "the daemon closed the connection" : strerror(-rc));
      return;
    }
    if (rc == 1) {
      flush(c); /* the undos of late replies */
      return;
    }
  }
}

/* Requests past their deadline are answered; their replies, if they come,
 * are undone. A hello that got no welcome in time drops the socket. */
static void sweep(client_conn *c) {
  uint64_t now = clock_mono_ns();
  if (c->state == HELLO && now > c->hello_deadline_ns) {
    drop(c, "no welcome in client.timeout_ms");
    return;
  }
  for (uint32_t i = 0; i < c->nused && c->inflight; i++) {
    slot *s = &c->slots[i];
    if (s->state != SLOT_CALLER || now < s->deadline_ns) continue;
    fail_outputs(s, KVA_ETIMEDOUT);
    answer(c, s);
    s->r = NULL;
    s->c = NULL;
    s->state = SLOT_ABANDONED;
  }
}

/* ---- the reader thread ------------------------------------------------------- */

static void *reader_main(void *arg) {
  client_conn *c = arg;
  int sweep_ms = c->timeout_ms / 8 < 2 ? 2 : c->timeout_ms / 8 > 100 ? 100 : c->timeout_ms / 8;
  pthread_mutex_lock(&c->lock);
  while (!c->stop) {
    if (c->fd < 0 && clock_mono_ns() >= c->retry_at_ns) try_connect(c);
    deliver(c);
    int fd = c->fd;
    struct pollfd pf[2] = {
        {.fd = c->wake_fd, .events = POLLIN},
        {.fd = fd, .events = (short)(POLLIN | (c->out.off < c->out.len ? POLLOUT : 0))}};
    int timeout = sweep_ms;
    if (c->fd < 0) {
      uint64_t now = clock_mono_ns();
      int retry = c->retry_at_ns > now ? (int)((c->retry_at_ns - now) / 1000000u) + 1 : 0;
      if (retry < timeout) timeout = retry;
    }
    pthread_mutex_unlock(&c->lock);
    int n = poll(pf, fd >= 0 ? 2 : 1, timeout);
    pthread_mutex_lock(&c->lock);
    if (n > 0 && (pf[0].revents & POLLIN)) {
      uint64_t v;
      if (read(c->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN) break;
    }
    if (fd >= 0 && fd == c->fd && n > 0) { /* a drop meanwhile closed it */
      if (pf[1].revents & POLLOUT) flush(c);
      if (c->fd >= 0 && (pf[1].revents & (POLLIN | POLLERR | POLLHUP))) on_readable(c);
    }
    sweep(c);
    deliver(c);
  }
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

/* ---- the actor --------------------------------------------------------------- */

static void receive(kva_actor *self, void *state, const kva_msg *m) {
  void *payload = NULL;
  if (m->len == sizeof(payload)) memcpy(&payload, m->data, sizeof(payload));
  client_conn_send(state, m->type, payload, m->from, m->tag);
}

static void on_stop(kva_actor *self, void *state) {
  client_conn *c = state;
  pthread_mutex_lock(&c->lock);
  c->stop = true;
  pthread_mutex_unlock(&c->lock);
  wake_reader(c);
  pthread_join(c->reader, NULL);
  if (c->fd >= 0) { /* the runtime shuts down: an orderly end, whatever is queued */
    uint8_t bye[PROTO_HDR_BYTES];
    proto_hdr_put(bye, P_BYE, 0, 0);
    if (send(c->fd, bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(bye))
      LOG_WARN(
          "client: could not say goodbye to kvactd; it keeps this process's locks until it exits");
    close(c->fd);
  }
  if (c->fd_in >= 0) close(c->fd_in);
  close(c->wake_fd);
  unmap(&c->pool);
  for (size_t i = 0; i < c->nold; i++) unmap(&c->old[i]);
  for (uint32_t i = 0; i < c->nused; i++) free(c->slots[i].keys);
  free(c->old);
  free(c->ans);
  free(c->deliv);
  free(c->slots);
  free(c->status);
  free(c->spans);
  free(c->layouts);
  wire_buf_free(&c->in);
  wire_buf_free(&c->out);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

static const kva_behavior behavior = {"client_conn", receive, on_stop};

static void conn_free(client_conn *c) {
  if (c->wake_fd >= 0) close(c->wake_fd);
  free(c->slots);
  free(c->status);
  free(c->spans);
  free(c->layouts);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

client_conn *client_conn_spawn(kva_runtime *rt, const char *path, int timeout_ms) {
  client_conn *c = calloc(1, sizeof(*c));
  if (!c || wire_unix_addr(path, &c->addr) != KVA_OK) {
    free(c);
    return NULL;
  }
  c->timeout_ms = timeout_ms;
  c->fd = c->fd_in = -1;
  c->retry_ms = RETRY_MIN_MS;
  c->free_head = UINT32_MAX;
  pthread_mutex_init(&c->lock, NULL);
  c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  c->slots = calloc(MAX_SLOTS, sizeof(*c->slots));
  c->status = malloc(PROTO_MAX_KEYS * sizeof(*c->status));
  c->spans = malloc(PROTO_MAX_KEYS * sizeof(*c->spans));
  if (c->wake_fd < 0 || !c->slots || !c->status || !c->spans) {
    conn_free(c);
    return NULL;
  }
  /* the first connect, here: a daemon that is up serves the first call */
  try_connect(c);
  if (pthread_create(&c->reader, NULL, reader_main, c) != 0) {
    if (c->fd >= 0) close(c->fd);
    conn_free(c);
    return NULL;
  }
  c->self = kva_spawn(rt, &behavior, c, NULL);
  if (!c->self) {
    pthread_mutex_lock(&c->lock);
    c->stop = true;
    pthread_mutex_unlock(&c->lock);
    wake_reader(c);
    pthread_join(c->reader, NULL);
    if (c->fd >= 0) close(c->fd);
    conn_free(c);
    return NULL;
  }
  return c;
}

kva_actor *client_conn_actor(client_conn *c) {
  return c->self;
}

int client_conn_up(const client_conn *c) {
  return (int)__atomic_load_n(&c->up, __ATOMIC_ACQUIRE);
}
