/*
 * session_close.c — the end of a kvactd session's connection
 * (docs/invariants.md I-MP-1, I-MP-4): in order (P_BYE, kvactd stopping)
 * or with its process gone, the ledger is given back at once, one request
 * at a time while the requests still in flight finish; in disorder with
 * its process alive, the ledger waits for that process to exit.
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
#include "server/session_internal.h"
#include "storage/storage_internal.h"

/* ---- closing ---------------------------------------------------------------- */

/* Gives the ledger back, one request at a time, while the requests still
 * in flight finish (what they take joins the ledger; a READ in flight,
 * which can release locks, is waited for); stops the actor once the
 * ledger is empty and nothing is in flight. */
void release_step(srv_session *ss) {
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
    server_session_gone(ss->sv, ss, ss->idle);
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
void close_conn_as(srv_session *ss, const char *why, bool orderly) {
  if (ss->closing) return;
  ss->closing = true;
  snprintf(ss->why, sizeof(ss->why), "%s", why);
  hello_done(ss);
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

void close_conn(srv_session *ss, const char *why) {
  close_conn_as(ss, why, false);
}

/* The held session's process exited (or kvactd stops): give back. */
void unhold(srv_session *ss) {
  if (!ss->held) return;
  ss->held = false;
  kva_unwatch_fd(ss->self, ss->pidfd);
  release_step(ss);
}
