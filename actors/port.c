/*
 * port.c — mailboxes for threads that are not actors (the serving engine's).
 *
 * A port is an actor without a receive: its mailbox is drained by the
 * owning thread in kva_port_recv. Its eventfd is readable while messages
 * wait, so it can sit in the engine's own epoll loop: a sender that wins
 * the scheduled flag rings it (sched.c); the owner clears it and releases
 * the flag once it has seen the mailbox empty, re-ringing if a message
 * slipped in meanwhile.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <ck_pr.h>

#include "actors/clock.h"
#include "actors/runtime_internal.h"

#define PORT_SPIN_NS 50000u /* how long a receiver waits before sleeping */

struct kva_port {
  kva_actor *a;
  uint64_t spin_ns; /* PORT_SPIN_NS, or what port_set_spin said */
};

static void port_no_receive(kva_actor *self, void *state, const kva_msg *m) {
  (void)self, (void)state, (void)m;
}

kva_port *port_open_with(kva_runtime *rt, const char *name, uint32_t capacity) {
  if (!rt || ck_pr_load_32(&rt->spawning_closed) || runtime_forked(rt)) return NULL;
  kva_port *p = calloc(1, sizeof(*p));
  if (!p) return NULL;
  kva_behavior b = {.name = name ? name : "port", .receive = port_no_receive};
  kva_spawn_opts o = {.mailbox_capacity = capacity};
  p->a = actor_create(rt, &b, p, &o, ACTOR_PORT);
  if (!p->a) {
    free(p);
    return NULL;
  }
  p->spin_ns = PORT_SPIN_NS;
  return p;
}

void port_set_spin(kva_port *p, uint64_t ns) {
  p->spin_ns = ns;
}

kva_port *kva_port_open(kva_runtime *rt, const char *name) {
  return port_open_with(rt, name, 0);
}

kva_actor *kva_port_actor(kva_port *p) {
  return p ? p->a : NULL;
}
int kva_port_fd(const kva_port *p) {
  return p ? p->a->efd : KVA_EINVAL;
}

/* Nothing to read (or the last message was taken): make the doorbell
 * readable exactly while messages wait. */
static void port_settle(kva_actor *a) {
  doorbell_clear(a);
  /* only the owner gives a port's flag back (and kva_port_close, on this
   * same thread): a flag seen free stays ours to ignore, a sender taking
   * it now rings the doorbell itself */
  if (ck_pr_load_32(&a->scheduled) && sched_release(a)) doorbell_ring(a);
}

/* A request from the port's thread to `to`, which that thread lends itself
 * to (sched_lend_begin): up to max_turns turns made ready by the send run
 * here, until the reply is in when `receiving` (sched_lend_end). The
 * port's flag is held meanwhile, as in spin_for_message, so a reply rings
 * no doorbell; `receiving` says the caller receives next (kva_port_recv
 * settles the flag once it took the reply); otherwise the flag is settled
 * here, and a reply already in rings the doorbell, so that the port's fd
 * stays readable exactly while messages wait. */
int port_send_lent(kva_port *p, kva_actor *to, uint32_t type, const void *data, uint32_t len,
                   uint64_t tag, uint32_t max_turns, bool receiving) {
  worker_ctx w;
  if (!sched_lend_begin(p->a->rt, &w)) return kva_send(to, type, data, len, p->a, tag);
  bool held = sched_take(p->a); /* lost: a sender rang already */
  int rc = kva_send(to, type, data, len, p->a, tag);
  sched_lend_end(&w, p->a, rc == KVA_OK ? max_turns : 0, receiving);
  if (held && (!receiving || rc != KVA_OK || mailbox_empty(&p->a->mb))) port_settle(p->a);
  return rc;
}

static void copy_out(kva_actor *a, const mailbox_env *e, kva_msg *out, void *buf, uint32_t buflen) {
  const void *src = e->len <= MAILBOX_INLINE_BYTES ? (const void *)e->u.inl : e->u.heap;
  uint32_t n = e->len < buflen ? e->len : buflen;
  if (n) memcpy(buf, src, n);
  out->type = e->type;
  out->len = e->len;
  out->from = env_from(e);
  out->tag = e->tag;
  out->data = buf;
  if (e->len > MAILBOX_INLINE_BYTES) payload_pool_put(a->rt->pool, e->u.heap);
  stats_slot *st = a->stats;
  ck_pr_store_64(&st->enqueued, st->dequeued + 1 + mailbox_depth(&a->mb));
  ck_pr_fence_store(); /* enqueued before dequeued, as in actor_run_batch */
  ck_pr_store_64(&st->dequeued, st->dequeued + 1);
}

static bool port_take(kva_actor *a, kva_msg *out, void *buf, uint32_t buflen) {
  mailbox_env e;
  bool drained;
  uint64_t depth = mailbox_depth(&a->mb);
  if (depth > a->stats->peak_depth) ck_pr_store_64(&a->stats->peak_depth, depth);
  if (!mailbox_pop(&a->mb, &e, &drained)) return false;
  copy_out(a, &e, out, buf, buflen);
  if (drained) sched_mute_release(a);
  if (mailbox_empty(&a->mb)) port_settle(a);
  return true;
}

static int det_recv(kva_port *p, kva_msg *out, void *buf, uint32_t buflen, int timeout_ms) {
  kva_runtime *rt = p->a->rt;
  uint64_t limit =
      timeout_ms < 0 ? UINT64_MAX : kva_runtime_now_ns(rt) + (uint64_t)timeout_ms * 1000000ull;
  for (;;) {
    if (port_take(p->a, out, buf, buflen)) return KVA_OK;
    if (det_step(rt)) continue;
    if (kva_runtime_run_until_idle(rt) > 0) continue;
    uint64_t deadline;
    if (!poller_det_next_timer(rt, &deadline) || deadline > limit) break;
    kva_runtime_advance(rt, deadline - kva_runtime_now_ns(rt));
  }
  return port_take(p->a, out, buf, buflen) ? KVA_OK : KVA_ETIMEDOUT;
}

static int wait_readable(int fd, uint64_t deadline_ns) {
  for (;;) {
    int ms = -1;
    if (deadline_ns != UINT64_MAX) {
      uint64_t now = clock_mono_ns();
      if (now >= deadline_ns) return 0;
      ms = (int)((deadline_ns - now + 999999) / 1000000);
    }
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int r = poll(&pf, 1, ms);
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return 0;
  }
}

/* Before sleeping in poll(), wait a little on the mailbox itself while
 * holding the dispatch flag: a reply that arrives meanwhile finds the flag
 * taken and rings no doorbell, so a quick request/reply costs no syscall
 * on either side (the facade's calls are answered in microseconds). */
static void spin_for_message(kva_actor *a, uint64_t spin_ns, uint64_t deadline_ns) {
  /* the owner takes the flag only to keep senders from ringing; the
   * port's turns all run on this thread (sched_take's fence is spare) */
  if (!sched_take(a)) return; /* a sender already dispatched */
  uint64_t now = clock_mono_ns(), end = now + spin_ns;
  if (end > deadline_ns) end = deadline_ns;
  for (unsigned i = 0; mailbox_empty(&a->mb); i++) {
    if (i % 64 == 63 && clock_mono_ns() >= end) break;
    ck_pr_stall();
  }
  port_settle(a); /* gives the flag back; rings if a message slipped in */
}

int kva_port_recv(kva_port *p, kva_msg *out, void *buf, uint32_t buflen, int timeout_ms) {
  if (!p || !out || (buflen && !buf)) return KVA_EINVAL;
  if (runtime_forked(p->a->rt)) return KVA_ESHUTDOWN; /* fork.c: nobody would answer */
  if (p->a->rt->det) return det_recv(p, out, buf, buflen, timeout_ms);
  uint64_t deadline =
      timeout_ms < 0 ? UINT64_MAX : clock_mono_ns() + (uint64_t)timeout_ms * 1000000ull;
  if (port_take(p->a, out, buf, buflen)) return KVA_OK;
  if (timeout_ms != 0 && p->spin_ns) spin_for_message(p->a, p->spin_ns, deadline);
  for (;;) {
    if (port_take(p->a, out, buf, buflen)) return KVA_OK;
    port_settle(p->a);
    if (port_take(p->a, out, buf, buflen)) return KVA_OK;
    if (!wait_readable(p->a->efd, deadline)) return KVA_ETIMEDOUT;
  }
}

/* Sends from now on fail; those in progress hold their reference, and the
 * last one out frees the actor record (runtime_internal.h). A reply that
 * rang the doorbell and was never read holds the flag: given back here
 * (a Dekker pair with dispatch_to's check of DEAD). */
void kva_port_close(kva_port *p) {
  if (!p) return;
  kva_actor *a = p->a;
  a->state = NULL; /* ports left open are freed by runtime shutdown */
  free(p);
  ck_pr_store_32(&a->life, LIFE_DEAD);
  ck_pr_fence_memory(); /* DEAD before the flag is read */
  sched_drop(a);
  if (!ck_pr_load_32(&a->rt->spawning_closed)) actor_unref(a); /* its life (actor_finish) */
}
