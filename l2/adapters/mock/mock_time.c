/*
 * mock_time.c — the mock adapter's time emulation: completion times, the
 * queue of replies waiting for them, and the one timer that delivers them.
 *
 * Model: STOREs and LOADs share one channel. A transfer starts at
 * max(arrival, busy_until) and completes latency + bytes / bandwidth
 * later; the bytes are copied at arrival, and if the copy itself ran past
 * that completion, the end of the copy is the completion. A LOOKUP costs
 * the latency only and does not take the channel. A reply whose completion
 * has passed leaves at once; the others wait in a min-heap on (completion,
 * arrival), so replies leave in completion order.
 *
 * Cost: with no latency and no bandwidth limit (and nothing waiting) no
 * clock is read and no timer armed, so a request costs no syscall. A
 * threaded-mode kva_timer is a timerfd (several syscalls), so only one is
 * armed, for the earliest pending reply, and re-armed when it fires or an
 * earlier reply is queued. In deterministic mode the clock is virtual, so
 * the times are exact and tests move them with kva_runtime_advance.
 */
#include <stdlib.h>

#include "l2/adapters/mock/mock_internal.h"

#define MOCK_QUEUE_MIN 64u

uint64_t mock_now(const mock *m) {
  return kva_runtime_now_ns(m->rt);
}

bool mock_emulating(const mock *m) {
  return m->latency_ns || m->bandwidth || m->nq;
}

static uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t s;
  return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}

/* Nanoseconds to move `bytes`, rounded up so a reply is never early. */
static uint64_t transfer_ns(const mock *m, uint64_t bytes) {
  if (!m->bandwidth || !bytes) return 0;
  unsigned __int128 ns = ((unsigned __int128)bytes * 1000000000u + m->bandwidth - 1) / m->bandwidth;
  return ns > UINT64_MAX ? UINT64_MAX : (uint64_t)ns;
}

static void send_done(mock *m, kva_actor *to, uint64_t tag, kva_l2_req *r) {
  int rc = kva_send(to, KVA_L2_DONE, &r, sizeof(r), m->self, tag);
  /* a sender that stopped first no longer waits; anything else is a bug */
  if (rc != KVA_OK && rc != KVA_ESHUTDOWN)
    kva_log(KVA_LOG_WARN, "%s: reply (tag %llu) not sent: %s", m->name, (unsigned long long)tag,
            kva_strerror(rc));
}

/* ---- the min-heap of pending replies ------------------------------------ */

static bool before(const mock_reply *a, const mock_reply *b) {
  return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static void swap(mock_reply *a, mock_reply *b) {
  mock_reply t = *a;
  *a = *b;
  *b = t;
}

static bool queue_push(mock *m, const mock_reply *r) {
  if (m->nq == m->capq) {
    size_t cap = m->capq ? m->capq * 2 : MOCK_QUEUE_MIN;
    mock_reply *q = realloc(m->q, cap * sizeof(*q));
    if (!q) return false;
    m->q = q;
    m->capq = cap;
  }
  size_t i = m->nq++;
  m->q[i] = *r;
  while (i > 0 && before(&m->q[i], &m->q[(i - 1) / 2])) {
    swap(&m->q[i], &m->q[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  return true;
}

static mock_reply queue_pop(mock *m) {
  mock_reply top = m->q[0];
  m->q[0] = m->q[--m->nq];
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, min = i;
    if (l < m->nq && before(&m->q[l], &m->q[min])) min = l;
    if (r < m->nq && before(&m->q[r], &m->q[min])) min = r;
    if (min == i) break;
    swap(&m->q[i], &m->q[min]);
    i = min;
  }
  return top;
}

/* ---- delivery ----------------------------------------------------------- */

/* Sends every reply whose completion time is <= now, earliest first. */
static void flush_due(mock *m, uint64_t now) {
  while (m->nq && m->q[0].at <= now) {
    mock_reply r = queue_pop(m);
    send_done(m, r.to, r.tag, r.req);
  }
}

void mock_flush_all(mock *m) {
  flush_due(m, UINT64_MAX);
}

/* Keeps exactly one timer armed for the earliest pending reply. Called
 * after flush_due(now), so that reply is in the future. */
static void timer_sync(mock *m, uint64_t now) {
  if (m->timer_id >= 0 && (m->nq == 0 || m->timer_at > m->q[0].at)) {
    kva_timer_cancel(m->self, m->timer_id);
    m->timer_id = -1;
  }
  if (m->timer_id >= 0 || m->nq == 0) return;
  uint64_t at = m->q[0].at;
  int id = kva_timer(m->self, at > now ? at - now : 0, 0, ++m->timer_tag);
  if (id < 0) {
    /* early is better than never: the protocol needs every reply */
    kva_log(KVA_LOG_WARN, "%s: no timer (%s): pending replies sent early", m->name,
            kva_strerror(id));
    mock_flush_all(m);
    return;
  }
  m->timer_id = id;
  m->timer_at = at;
}

/* Answers at `at`: now if that has passed, else from the queue. */
static void reply_at(mock *m, kva_actor *to, uint64_t tag, kva_l2_req *r, uint64_t at,
                     uint64_t now) {
  flush_due(m, now);
  mock_reply p = {.at = at, .seq = m->seq++, .to = to, .tag = tag, .req = r};
  if (at <= now) {
    send_done(m, to, tag, r); /* everything still queued completes later */
  } else if (!queue_push(m, &p)) {
    kva_log(KVA_LOG_WARN, "%s: reply queue full (out of memory): reply sent early", m->name);
    send_done(m, to, tag, r);
  }
  timer_sync(m, now);
}

void mock_reply_channel(mock *m, const kva_msg *msg, kva_l2_req *r, uint64_t t0, uint64_t bytes) {
  if (!mock_emulating(m)) {
    send_done(m, msg->from, msg->tag, r);
    return;
  }
  uint64_t start = t0 > m->busy_until ? t0 : m->busy_until;
  uint64_t at = sat_add(sat_add(start, m->latency_ns), transfer_ns(m, bytes));
  uint64_t now = mock_now(m);
  if (now > at) at = now; /* the copy itself took longer */
  m->busy_until = at;
  reply_at(m, msg->from, msg->tag, r, at, now);
}

void mock_reply_lookup(mock *m, const kva_msg *msg, kva_l2_req *r, uint64_t t0) {
  if (!mock_emulating(m)) {
    send_done(m, msg->from, msg->tag, r);
    return;
  }
  reply_at(m, msg->from, msg->tag, r, sat_add(t0, m->latency_ns), t0);
}

void mock_reply_now(mock *m, kva_actor *to, uint64_t tag, kva_l2_req *r) {
  if (m->nq) flush_due(m, mock_now(m));
  send_done(m, to, tag, r);
}

void mock_reply_control(mock *m, kva_actor *to, uint64_t tag) {
  if (m->nq) flush_due(m, mock_now(m));
  int rc = kva_send(to, KVA_L2_DONE, NULL, 0, m->self, tag);
  if (rc != KVA_OK && rc != KVA_ESHUTDOWN)
    kva_log(KVA_LOG_WARN, "%s: control reply not sent: %s", m->name, kva_strerror(rc));
}

void mock_on_timer(mock *m, uint64_t tag) {
  if (tag == m->timer_tag) m->timer_id = -1; /* a one-shot: it is gone */
  uint64_t now = mock_now(m);
  flush_due(m, now);
  timer_sync(m, now);
}
