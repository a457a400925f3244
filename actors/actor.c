/*
 * actor.c — spawning, sending, delivering and stopping actors.
 *
 * Message types below 16 belong to the runtime (KVA_MSG_FD_READY, _TIMER,
 * _STOP) and are refused from users; 16..1023 are kvact's own protocols
 * (L2 adapters, storage), 1024 and up are the user's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <ck_pr.h>

#include "actors/clock.h"
#include "actors/log.h"
#include "actors/runtime_internal.h"
#include "mailbox/backoff.h"
#include "mailbox/tsan.h"

#define MSG_RUNTIME_MAX 16u

/* The actor whose receive runs on this thread, or NULL. */
static __thread kva_actor *rt_current;
__thread int rt_internal_thread;

kva_actor *actor_create(kva_runtime *rt, const kva_behavior *b, void *state,
                        const kva_spawn_opts *o, uint32_t kind) {
  kva_actor *a = aligned_alloc(64, (sizeof(*a) + 63) & ~(size_t)63);
  if (!a) return NULL;
  memset(a, 0, sizeof(*a));
  a->rt = rt;
  a->beh = *b;
  a->state = state;
  a->kind = kind;
  uint32_t stats_kind = kind == ACTOR_PORT     ? STATS_KIND_PORT
                        : kind == ACTOR_PINNED ? STATS_KIND_PINNED
                                               : STATS_KIND_ACTOR;
  a->stats = stats_claim(rt->stats, b->name, stats_kind);
  a->trace_id = a->stats ? stats_index(rt->stats, a->stats) : TRACE_NOBODY;
  uint32_t cap = o && o->mailbox_capacity ? o->mailbox_capacity : rt->mailbox_capacity;
  a->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (!a->stats || a->efd < 0 || mailbox_init(&a->mb, &a->stats->ring, cap) != 0) {
    if (a->efd >= 0) close(a->efd);
    free(a);
    return NULL;
  }
  a->refs = 1; /* its life */
  pthread_mutex_lock(&rt->reg_lock);
  ck_pr_inc_32(&rt->nactors); /* atomic: actor_free gives it back unlocked */
  a->next_all = rt->actors;
  if (rt->actors) rt->actors->prev_all = a;
  rt->actors = a;
  pthread_mutex_unlock(&rt->reg_lock);
  return a;
}

kva_actor *kva_spawn(kva_runtime *rt, const kva_behavior *b, void *state, const kva_spawn_opts *o) {
  if (!rt || !b || !b->receive) return NULL;
  if (ck_pr_load_32(&rt->spawning_closed) || runtime_forked(rt)) return NULL;
  actor_reap_zombies(rt);
  if (ck_pr_load_32(&rt->nactors) + 1 >= rt->runq_cap) {
    LOG_ERROR("spawn %s: at most %u live actors per runtime", b->name ? b->name : "?",
              rt->runq_cap - 1);
    return NULL;
  }
  uint32_t kind = o && o->pinned ? ACTOR_PINNED : ACTOR_POOLED;
  kva_actor *a = actor_create(rt, b, state, o, kind);
  if (a && kind == ACTOR_PINNED && !rt->det && pinned_start(a) != 0) {
    ck_pr_store_32(&a->life, LIFE_DEAD);
    actor_unref(a); /* never ran: nobody else holds it */
    return NULL;
  }
  return a;
}

/* Unlinks a from the runtime and gives back what it holds. Its messages
 * still queued (sends that raced with its end) are dropped unread. */
void actor_free(kva_actor *a) {
  kva_runtime *rt = a->rt;
  pthread_mutex_lock(&rt->reg_lock);
  if (a->prev_all)
    a->prev_all->next_all = a->next_all;
  else
    rt->actors = a->next_all;
  if (a->next_all) a->next_all->prev_all = a->prev_all;
  rt->retired_delivered += ck_pr_load_64(&a->stats->dequeued);
  pthread_mutex_unlock(&rt->reg_lock);
  mailbox_destroy(&a->mb, rt->pool);
  close(a->efd);
  stats_release(rt->stats, a->stats);
  free(a);
  /* last: a count that went down means all of it was given back */
  ck_pr_dec_32(&rt->nactors);
}

void actor_unref(kva_actor *a) {
  TSAN_RELEASE(&a->refs); /* what we did to it before whoever frees it */
  /* faa is a full barrier on x86, not by ck's contract: release before
   * the decrement, acquire after the last one, as every refcount */
  ck_pr_fence_release();
  if (ck_pr_faa_32(&a->refs, UINT32_MAX) != 1) return;
  ck_pr_fence_acquire();
  TSAN_ACQUIRE(&a->refs);
  actor_free(a);
}

/* A stopped pinned actor's thread parks the actor here on its way out
 * (pinned.c); whoever spawns next, or shutdown, joins it and drops the
 * thread's reference. */
void actor_reap_zombies(kva_runtime *rt) {
  if (!ck_pr_load_ptr(&rt->zombies)) return;
  pthread_mutex_lock(&rt->reg_lock);
  kva_actor *z = rt->zombies;
  rt->zombies = NULL;
  pthread_mutex_unlock(&rt->reg_lock);
  for (kva_actor *next; z; z = next) {
    next = z->next_zombie;
    pinned_join(z);
    actor_unref(z);
  }
}

/* The sending actor is muted on `to` after its receive (sched.c): pooled
 * actors only, never on a port (its thread is no actor that releases). */
static void mute_sender_on(kva_actor *to) {
  kva_actor *cur = rt_current;
  if (!cur || cur == to || cur->kind != ACTOR_POOLED || to->kind == ACTOR_PORT || to->rt->det ||
      cur->mute_target == to)
    return;
  /* a reference: the mute outlives this send (sched_after_turn drops it) */
  actor_ref(to);
  if (cur->mute_target) actor_unref(cur->mute_target);
  cur->mute_target = to;
}

/* Ring full (or overflow queue in use). Actors and the runtime's own
 * threads must never wait here — two actors filling each other's mailboxes
 * would deadlock their workers — so their message goes to the overflow
 * queue and the sending actor is muted after its receive. Other threads
 * (the engine's, ports) wait for room: that is the back-pressure. */
static int push_slow(kva_actor *to, const mailbox_env *e) {
  kva_runtime *rt = to->rt;
  ck_pr_inc_64(&to->stats->backpressure);
  if (rt_current || rt_internal_thread || rt->det) {
    if (mailbox_push_overflow(&to->mb, e) != 0) return KVA_ENOMEM;
    ck_pr_inc_64(&to->stats->overflowed);
    ck_pr_inc_64(&rt->n_overflowed);
    mute_sender_on(to);
    return KVA_OK;
  }
  ck_pr_inc_64(&rt->n_blocked);
  uint32_t depth;
  for (unsigned i = 0;; i++) {
    if (mailbox_try_push(&to->mb, e, &depth)) return KVA_OK;
    if (ck_pr_load_32(&to->life) == LIFE_DEAD) return KVA_ESHUTDOWN;
    backoff_wait(i, 1);
  }
}

/* Records the send when tracing, and marks the envelope with its trace tag
 * (env_trace_tag) so that its receive can be paired with it. Messages to ports are not
 * traced: a port's receive is not an actor's turn. */
static void trace_push(kva_actor *to, mailbox_env *e) {
  kva_actor *from = e->from;
  if (!from || from->rt != to->rt || to->kind == ACTOR_PORT) return;
  uint32_t tag =
      trace_send(to->rt->trace, from->trace_id, to->trace_id, e->type, rt_current == from);
  e->from = (kva_actor *)((uintptr_t)from | tag);
}

static int actor_push(kva_actor *to, uint32_t type, const void *data, uint32_t len, kva_actor *from,
                      uint64_t tag) {
  mailbox_env e;
  e.type = type;
  e.len = len;
  e.from = from;
  e.tag = tag;
  if (trace_active(to->rt->trace)) trace_push(to, &e);
  if (len <= MAILBOX_INLINE_BYTES) {
    if (len) memcpy(e.u.inl, data, len);
  } else {
    e.u.heap = payload_pool_get(to->rt->pool, len);
    if (!e.u.heap) return KVA_ENOMEM;
    memcpy(e.u.heap, data, len);
  }
  /* crowded: the receiver may have to be woken from a mute (sched_notify) */
  uint32_t depth;
  bool crowded;
  if (mailbox_try_push(&to->mb, &e, &depth)) {
    crowded = depth >= mailbox_low_mark(&to->mb);
    if (depth >= mailbox_high_mark(&to->mb)) mute_sender_on(to);
  } else {
    int rc = push_slow(to, &e);
    if (rc != KVA_OK) {
      if (len > MAILBOX_INLINE_BYTES) payload_pool_put(to->rt->pool, e.u.heap);
      return rc;
    }
    crowded = true;
  }
  sched_notify(to, crowded);
  return KVA_OK;
}

int kva_send(kva_actor *to, uint32_t type, const void *data, uint32_t len, kva_actor *from,
             uint64_t tag) {
  if (!to || (len && !data) || len > KVA_MSG_MAX || type < MSG_RUNTIME_MAX) return KVA_EINVAL;
  if (runtime_forked(to->rt)) return KVA_ESHUTDOWN; /* fork.c */
  /* the send's reference: `to` may stop meanwhile, and is not freed
   * under us. Acquire-free load of life: a send racing with stop may still
   * get in, and is then delivered before on_stop (see actor_run_batch) */
  actor_ref(to);
  int rc = ck_pr_load_32(&to->life) == LIFE_OPEN ? actor_push(to, type, data, len, from, tag)
                                                 : KVA_ESHUTDOWN;
  actor_unref(to);
  return rc;
}

int actor_send_internal(kva_actor *to, uint32_t type, const void *data, uint32_t len,
                        uint64_t tag) {
  actor_ref(to);
  int rc = ck_pr_load_32(&to->life) != LIFE_DEAD ? actor_push(to, type, data, len, NULL, tag)
                                                 : KVA_ESHUTDOWN;
  actor_unref(to);
  return rc;
}

void kva_actor_stop(kva_actor *a) {
  if (!a || a->kind == ACTOR_PORT) return;
  if (!ck_pr_cas_32(&a->stop_sent, 0, 1)) return;
  actor_send_internal(a, KVA_MSG_STOP, NULL, 0, 0);
}

void kva_actor_hold(kva_actor *a) {
  if (a) actor_ref(a);
}

void kva_actor_release(kva_actor *a) {
  if (a) actor_unref(a);
}

int kva_actor_eventfd(const kva_actor *a) {
  return a ? a->efd : KVA_EINVAL;
}
const char *kva_actor_name(const kva_actor *a) {
  return a ? a->stats->name : NULL;
}
kva_runtime *kva_actor_runtime(const kva_actor *a) {
  return a ? a->rt : NULL;
}

static void actor_deliver(kva_actor *a, const mailbox_env *e) {
  kva_msg m;
  m.type = e->type;
  m.len = e->len;
  m.from = env_from(e);
  m.tag = e->tag;
  m.data = e->len <= MAILBOX_INLINE_BYTES ? (const void *)e->u.inl : e->u.heap;
  if (e->type == KVA_MSG_STOP) {
    /* the runtime's own request (users cannot send type < 16): from now on
     * sends are refused, what is queued still arrives, then on_stop */
    ck_pr_store_32(&a->life, LIFE_CLOSED);
    return;
  }
  trace_ring *tr = trace_active(a->rt->trace) ? a->rt->trace : NULL;
  uint64_t start_ns = tr ? clock_mono_ns() : 0;
  uint64_t t0 = clock_ticks();
  a->beh.receive(a, a->state, &m);
  uint64_t ns = clock_ticks_to_ns(clock_ticks() - t0);
  stats_record_recv(a->stats, ns);
  if (tr) {
    uint32_t peer = m.from && m.from->rt == a->rt ? m.from->trace_id : TRACE_NOBODY;
    trace_recv(tr, a->trace_id, peer, m.type, start_ns, ns, env_trace_tag(e));
  }
}

static void actor_finish(kva_actor *a) {
  poller_forget_actor(a->rt, a);
  if (a->beh.on_stop) a->beh.on_stop(a, a->state);
  ck_pr_store_32(&a->stats->state, STATS_SLOT_STOPPED);
  /* release, pairs with the acquire in stop_one (runtime.c): everything
   * on_stop did comes before a thread that reads DEAD goes on */
  ck_pr_fence_release();
  ck_pr_store_32(&a->life, LIFE_DEAD);
  /* its life: the runner's reference (scheduled) keeps it for now. While
   * the runtime shuts down, every actor is kept until runtime_free, so
   * that an on_stop may still send to one stopped before it. */
  if (!ck_pr_load_32(&a->rt->spawning_closed)) actor_unref(a);
}

static void release_payload(kva_actor *a, const mailbox_env *e) {
  if (e->len > MAILBOX_INLINE_BYTES) payload_pool_put(a->rt->pool, e->u.heap);
}

bool actor_in_turn(void) {
  return rt_current != NULL;
}

void actor_set_lendable(kva_actor *a) {
  if (a && a->kind == ACTOR_POOLED) a->lendable = 1;
}

bool actor_in_pooled_turn(void) {
  return rt_current && rt_current->kind == ACTOR_POOLED && !rt_current->rt->det;
}

bool actor_run_batch(kva_actor *a, uint32_t max) {
  /* TSan cannot see the hand-off through the scheduled flag and the run
   * queue (ck atomics): announce that this turn follows the previous one,
   * before the first access to the actor */
  TSAN_ACQUIRE(a);
  stats_slot *st = a->stats;
  uint64_t depth = mailbox_depth(&a->mb);
  if (depth > st->peak_depth) ck_pr_store_64(&st->peak_depth, depth);
  ck_pr_store_64(&st->turns, st->turns + 1);
  bool dead = ck_pr_load_32(&a->life) == LIFE_DEAD;
  kva_actor *outer = rt_current; /* det mode may nest (port_recv in receive) */
  rt_current = a;
  uint32_t n = 0;
  mailbox_env e;
  bool drained; /* muted senders are released at the end of the turn instead */
  while (n < max && mailbox_pop(&a->mb, &e, &drained)) {
    /* a send that raced with the end of the actor: nobody can receive it */
    if (!dead) actor_deliver(a, &e);
    release_payload(a, &e);
    n++;
    /* muted by a send: end the turn now, so that the mute takes effect
     * before our next message (often our own re-arm) sends more */
    if (a->mute_target) break;
  }
  uint32_t left = mailbox_depth(&a->mb);
  /* enqueued first: a reader that sees the new dequeued sees it too */
  ck_pr_store_64(&st->enqueued, st->dequeued + n + left);
  ck_pr_fence_store();
  ck_pr_store_64(&st->dequeued, st->dequeued + n);
  if (!dead && left == 0 && ck_pr_load_32(&a->life) == LIFE_CLOSED) {
    actor_finish(a);
    left = mailbox_depth(&a->mb); /* on_stop may have raced with a sender */
  }
  rt_current = outer;
  return left > 0;
}
