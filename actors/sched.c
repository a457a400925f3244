/*
 * sched.c — the scheduler: who runs a ready actor, and how sleeping
 * threads are woken without losing a wake-up.
 *
 * The wake-up protocol, step by step (a Dekker pair on two locations):
 *
 *   sender (sched_notify)                 runner (sched_release)
 *   S1 push the message (ring commit      R1 store scheduled = 0
 *      or overflow append)                R2 full fence
 *   S2 full fence                         R3 read the mailbox: empty?
 *   S3 read scheduled; if 0, CAS 0 -> 1      if not, CAS 0 -> 1 and go on
 *      and, if the CAS won, dispatch
 *
 * Each side writes its location before reading the other's, with a full
 * fence between, so at least one side sees the other's write: either the
 * sender sees scheduled == 0 and dispatches, or the runner sees the message
 * and keeps running. The CAS makes sure exactly one of them takes the
 * actor. Its turns follow one another: a release fence before R1, an
 * acquire fence after the winning CAS (sched_take), since ck_pr's CAS and
 * stores order nothing by themselves. "Dispatch" depends on where the
 * actor lives:
 *   pooled  — push onto the run queue (lock-free ck_ring MPMC) and wake a
 *             sleeping worker only if none is spinning: no syscall per
 *             message while the system is busy;
 *   pinned, port — ring the actor's eventfd (its thread sleeps on it);
 *   deterministic mode — append to the ready list.
 *
 * Worker sleep uses the same pattern on (run queue, sleepers): a worker
 * announces itself in `sleepers`, fences, re-checks the queue, and only
 * then waits on the futex word `wake_seq`, whose value it read before
 * announcing; a waker bumps `wake_seq` before FUTEX_WAKE, so a wake that
 * lands between the re-check and the wait makes the wait return at once.
 *
 * Muting (Pony's rule, with marks on the ring; the marks are in mailbox.h).
 * A pooled actor is muted — its turn ends after the receive, and it is
 * parked — when one of its sends landed at the receiver's high mark or had
 * to overflow (actor.c). It is unparked when the receiver ends a turn calm
 * (not crowded: ring below the low mark, overflow queue empty), or every
 * MUTE_RELEASE_TURNS turns of a receiver that stays crowded (threads that
 * block rather than mute may keep it so; the muted must not starve).
 *
 * Why parking never deadlocks:
 *  P1 an actor parks on a target only if, under mute_lock, the target is
 *     crowded and the actor is not (try_park); it re-checks both after
 *     publishing parked_on and the parked list, behind a full fence.
 *  P2 a parked actor that becomes crowded is woken: a push that can make
 *     it so (it reports a depth at or above the low mark, or it overflowed)
 *     reads parked_on after its full fence S2 (sched_notify); against
 *     try_park's re-check this is a Dekker pair. The depth a push reports
 *     bounds the consumer's from above, and a parked actor does not consume.
 *  P3 a target ends every turn with the check of sched_mute_release (full
 *     fence, then the parked list) before it may park itself; against
 *     try_park's re-check of the target, a Dekker pair.
 *  So every parked actor is calm or has a wake-up coming (P1, P2). A
 *  crowded target holds messages, hence is scheduled: unless parked itself
 *  it runs turns, each ending with P3, until one ends calm or the turn
 *  count releases. A target that parks is calm (P1), and became calm by
 *  consuming, in a turn whose end (P3) released what was parked on it: a
 *  parked actor's target is never parked for good, so parking forms no
 *  cycle, and every chain ends at a target that runs.
 */
#include <errno.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ck_pr.h>
#include <ck_ring.h>

#include "actors/clock.h"
#include "actors/log.h"
#include "actors/runtime_internal.h"
#include "mailbox/ring_commit.h"
#include "mailbox/tsan.h"

static void futex_wait(uint32_t *addr, uint32_t val) {
  syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(uint32_t *addr, int n) {
  syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static void wake_worker(kva_runtime *rt) {
  /* full fence: the run-queue push (or, for a spinner that found work, the
   * spinning decrement) must be visible before we read the counters; pairs
   * with the fence in worker_sleep */
  ck_pr_fence_memory();
  if (ck_pr_load_32(&rt->spinning) > 0 || ck_pr_load_32(&rt->sleepers) == 0) return;
  ck_pr_inc_32(&rt->wake_seq); /* makes a racing FUTEX_WAIT return */
  futex_wake(&rt->wake_seq, 1);
  ck_pr_inc_64(&rt->n_wakes);
}

void doorbell_ring(kva_actor *a) {
  uint64_t one = 1;
  ck_pr_store_32(&a->rung, 1);
  /* store fence: rung = 1 before the counter the write raises, so a
   * clearer that swapped out 0 did so before our store: its next clear
   * swaps out our 1 and reads the counter */
  ck_pr_fence_store();
  ssize_t r = write(a->efd, &one, sizeof(one));
  (void)r; /* EAGAIN only at a counter of 2^64-2: already readable */
  ck_pr_inc_64(&a->rt->n_eventfd_writes);
}

/* Clears the eventfd only if it was rung since the last clear: the common
 * case (a port that got its reply while spinning) costs no syscall. */
void doorbell_clear(kva_actor *a) {
  if (!ck_pr_fas_32(&a->rung, 0)) return;
  ck_pr_fence_atomic_load(); /* the swap before the counter is read */
  uint64_t v;
  /* EAGAIN: the ringer set rung but its write has not landed yet; keep rung
   * so that the next clear reads what it writes (no order needed: ringers
   * only ever store 1, and the owner is the only clearer) */
  if (read(a->efd, &v, sizeof(v)) < 0) ck_pr_store_32(&a->rung, 1);
}

/* The worker running on this thread (worker_ctx, runtime_internal.h):
 * its `next` slot holds the actor it will run after the current turn
 * (Go's runnext). An actor made ready by a message sent from a worker runs
 * next on that same worker, cache-hot and without waking anybody; the
 * actor it displaces goes to the shared queue. `streak` bounds how long
 * two actors can keep one worker to themselves. A thread lending itself
 * (sched_lend_begin) is a worker for that time. */
static __thread worker_ctx *this_worker;

#define RUNNEXT_STREAK 64u
/* A receiver that stays crowded releases its muted senders this often. */
#define MUTE_RELEASE_TURNS 16u

static void runq_push(kva_runtime *rt, kva_actor *a) {
  /* cannot fail: an actor is in the queue at most once and the queue
   * holds every actor (spawn enforces it) */
  unsigned int ticket;
  void **slot;
  while (!(slot = ck_ring_enqueue_reserve_mpmc(&rt->runq, rt->runq_buf, &ticket))) ck_pr_stall();
  /* TSan: the slot's producer a lap ago released it before committing,
   * and its entry was consumed before our reservation (see runq_pop for
   * the consumers, whose slot reads TSan does not check) */
  TSAN_ACQUIRE(slot);
  *slot = a;
  TSAN_RELEASE(slot);
  ring_commit(&rt->runq, ticket);
  wake_worker(rt);
}

/* local = the actor may take this worker's next slot. */
static void dispatch_to(kva_actor *a, bool local) {
  kva_runtime *rt = a->rt;
  bool bell = a->kind == ACTOR_PORT || (a->kind == ACTOR_PINNED && !rt->det);
  /* a dead port or pinned actor has no thread that would release the
   * flag: give it back here. Against kva_port_close (DEAD, full fence,
   * then the flag) a Dekker pair with our take: one of us sees the other,
   * and the CAS in sched_drop lets only one give it back. */
  if (bell && ck_pr_load_32(&a->life) == LIFE_DEAD) {
    sched_drop(a);
    return;
  }
  /* what we did to the actor happens before its next turn (and its free:
   * nothing of a is read after this) */
  TSAN_RELEASE(a);
  if (bell) {
    doorbell_ring(a);
  } else if (rt->det) {
    det_ready(rt, a);
  } else if (local && this_worker && this_worker->rt == rt) {
    kva_actor *displaced = this_worker->next;
    this_worker->next = a;
    if (displaced) runq_push(rt, displaced);
  } else {
    runq_push(rt, a);
  }
}

static void dispatch(kva_actor *a) {
  dispatch_to(a, false);
}

/* The winner of the CAS on scheduled owns the actor, and may run it on
 * this thread (the next slot): acquire, pairs with the release before R1
 * of whoever ran it last. */
bool sched_take(kva_actor *a) {
  if (!ck_pr_cas_32(&a->scheduled, 0, 1)) return false;
  ck_pr_fence_acquire();
  TSAN_ACQUIRE(a); /* the flag's last holder released it (sched_release) */
  /* the flag's reference, given back with the flag: its holder may touch
   * the actor after another thread ran its last turn (sched_release's
   * R2-R3). On a line of its own (refs), this costs a tenth of a
   * ping-pong's message rate where the line shared with the flag cost
   * half of it. */
  actor_ref(a);
  return true;
}

/* The CAS winner gives back whichever take it ends. */
void sched_drop(kva_actor *a) {
  if (ck_pr_cas_32(&a->scheduled, 1, 0)) actor_unref(a);
}

static void unpark_where(kva_runtime *rt, kva_actor *target, kva_actor *only);

void sched_notify(kva_actor *a, bool crowded) {
  ck_pr_fence_memory(); /* S2: the push before the read of scheduled */
  if (ck_pr_load_32(&a->scheduled)) {
    /* P2: a parked actor holds its scheduled flag; the common case reads
     * nothing more, and takes no lock */
    if (crowded && ck_pr_load_ptr(&a->parked_on)) unpark_where(a->rt, NULL, a);
    return;
  }
  if (sched_take(a)) dispatch_to(a, true); /* S3 */
}

bool sched_release(kva_actor *a) {
  TSAN_RELEASE(a);                  /* the turn is over: the next runner may start after it */
  ck_pr_fence_release();            /* the turn's loads and stores before R1 */
  ck_pr_store_32(&a->scheduled, 0); /* R1 */
  ck_pr_fence_memory();             /* R2, and P3's fence: the turn ended with the mailbox empty */
  if (ck_pr_load_ptr(&a->rt->parked)) unpark_where(a->rt, a, NULL);
  bool again = !mailbox_empty(&a->mb) && sched_take(a); /* R3: lost = a sender dispatched */
  actor_unref(a); /* the flag we held: may free a that stopped */
  return again;
}

static bool try_park(kva_actor *a, kva_actor *target) {
  kva_runtime *rt = a->rt;
  bool parked = false;
  pthread_mutex_lock(&rt->mute_lock);
  if (mailbox_crowded(&target->mb) && !mailbox_crowded(&a->mb) &&
      ck_pr_load_32(&target->life) != LIFE_DEAD) {
    ck_pr_store_ptr(&a->parked_on, target);
    a->park_next = rt->parked;
    ck_pr_store_ptr(&rt->parked, a);
    parked = true;
    ck_pr_inc_64(&rt->n_mutes);
  }
  pthread_mutex_unlock(&rt->mute_lock);
  if (!parked) return false;
  /* Two Dekker pairs: parked_on and parked are published, then both
   * mailboxes are re-read (the full fence between). A sender that crowded
   * us meanwhile either sees parked_on (P2) or we see its message; a target
   * that calmed down meanwhile either sees parked (P3) or we see it calm.
   * Either way someone unparks us (both may: harmless). */
  ck_pr_fence_memory();
  if (mailbox_crowded(&a->mb) || !mailbox_crowded(&target->mb)) unpark_where(rt, NULL, a);
  return true;
}

/* Unlinks every parked actor matching `target` (or exactly `only`) and
 * dispatches it; they still hold their scheduled flag. */
static void unpark_where(kva_runtime *rt, kva_actor *target, kva_actor *only) {
  kva_actor *wake = NULL;
  pthread_mutex_lock(&rt->mute_lock);
  for (kva_actor **pp = &rt->parked; *pp;) {
    kva_actor *p = *pp;
    if ((target && p->parked_on == target) || p == only) {
      *pp = p->park_next;
      ck_pr_store_ptr(&p->parked_on, NULL);
      p->park_next = wake;
      wake = p;
    } else {
      pp = &p->park_next;
    }
  }
  pthread_mutex_unlock(&rt->mute_lock);
  for (kva_actor *p = wake, *next; p; p = next) {
    next = p->park_next;
    p->park_next = NULL;
    dispatch(p);
  }
}

void sched_mute_release(kva_actor *target) {
  /* P3: our pops before the read of parked (pairs with try_park): a sender
   * that parked on us meanwhile is seen here or sees us calm */
  ck_pr_fence_memory();
  if (ck_pr_load_ptr(&target->rt->parked) == NULL) return; /* common case */
  if (mailbox_crowded(&target->mb) && target->stats->turns % MUTE_RELEASE_TURNS != 0) return;
  unpark_where(target->rt, target, NULL);
}

static void sched_after_turn(kva_actor *a, bool more) {
  kva_actor *target = a->mute_target;
  a->mute_target = NULL;
  /* P3 before we may park; a turn that emptied the mailbox has its check
   * in sched_release */
  if (more || target) sched_mute_release(a);
  bool parked = target && try_park(a, target);
  /* A crowded actor keeps its worker for another turn, up to the runnext
   * streak: its senders are being muted on it and only its progress
   * releases them. Others go to the back. */
  if (!parked) { /* parked: a is another thread's from here */
    if (more)
      dispatch_to(a, mailbox_crowded(&a->mb));
    else if (sched_release(a))
      dispatch(a);
  }
  if (target) actor_unref(target); /* the mute's reference (mute_sender_on) */
}

/* ck's multi-consumer dequeue reads a slot before its CAS on c_head says
 * whether the read counts: a consumer that loses the CAS may have read a
 * slot that a producer, a lap later, was rewriting, and throws the value
 * away. That read is racy by design and made harmless by a CAS TSan cannot
 * see (inline asm), so the TSan build does not check the accesses of this
 * one call (the slot read, the store to *a, and the ring's mask); the
 * actor itself is handed over by annotations on it: dispatch_to released
 * it before the push, we acquire it once taken. */
static bool runq_pop(kva_runtime *rt, kva_actor **a) {
  TSAN_IGNORE_BEGIN();
  bool taken = ck_ring_dequeue_mpmc(&rt->runq, rt->runq_buf, a);
  TSAN_IGNORE_END();
  if (taken) TSAN_ACQUIRE(*a);
  return taken;
}

/* Spins on the run queue before sleeping, but at most half the workers
 * (at least one) at a time, as Go does: spinning workers on every core
 * would starve the engine's own threads (on a 2-core machine, the thread
 * copying KV bytes between two facade calls). */
static bool worker_spin(kva_runtime *rt, kva_actor **a) {
  bool found = false;
  uint32_t max_spinning = rt->workers > 1 ? rt->workers / 2 : 1;
  /* the count pairs with wake_worker, which skips the futex only when it
   * sees a spinner: a Dekker pair like worker_sleep's, so the increment
   * comes before our reads of the run queue */
  if (ck_pr_faa_32(&rt->spinning, 1) >= max_spinning) {
    ck_pr_dec_32(&rt->spinning);
    return false;
  }
  ck_pr_fence_atomic_load();
  uint64_t end = clock_mono_ns() + rt->spin_ns;
  for (uint32_t i = 0; !ck_pr_load_32(&rt->stop_workers); i++) {
    if ((found = runq_pop(rt, a))) break;
    if (i % 64 == 63 && clock_mono_ns() >= end) break;
    ck_pr_stall();
  }
  ck_pr_dec_32(&rt->spinning);
  if (found) {
    /* A pusher that saw us spinning skipped the wake-up, but we take only
     * one actor: if more wait, pass the wake-up on (Go's rule for a
     * spinning thread that finds work). wake_worker fences first. */
    if (ck_ring_size(&rt->runq) > 0) wake_worker(rt);
  }
  return found;
}

static void worker_sleep(kva_runtime *rt) {
  uint32_t seq = ck_pr_load_32(&rt->wake_seq);
  /* the futex word before the announcement: a waker that sees us bumps it
   * after our read, so a wait on the old value returns at once */
  ck_pr_fence_load_atomic();
  ck_pr_inc_32(&rt->sleepers);
  ck_pr_fence_memory(); /* announce before re-checking (pairs with wake_worker) */
  if (ck_ring_size(&rt->runq) == 0 && !ck_pr_load_32(&rt->stop_workers)) {
    ck_pr_inc_64(&rt->n_sleeps);
    futex_wait(&rt->wake_seq, seq);
  }
  ck_pr_dec_32(&rt->sleepers);
}

/* The next slot first, unless it has had its streak: then it goes to the
 * back of the shared queue so that queued actors get their turn. */
static bool take_next(worker_ctx *w, kva_actor **a) {
  if (!w->next) return false;
  if (w->streak >= RUNNEXT_STREAK) {
    kva_actor *n = w->next;
    w->next = NULL;
    w->streak = 0;
    runq_push(w->rt, n);
    return false;
  }
  *a = w->next;
  w->next = NULL;
  w->streak++;
  return true;
}

static void *worker_main(void *arg) {
  kva_runtime *rt = arg;
  worker_ctx w = {.rt = rt};
  this_worker = &w;
  kva_actor *a;
  for (;;) {
    if (take_next(&w, &a)) {
      sched_after_turn(a, actor_run_batch(a, rt->batch));
      continue;
    }
    w.streak = 0;
    if (runq_pop(rt, &a) || worker_spin(rt, &a)) {
      sched_after_turn(a, actor_run_batch(a, rt->batch));
      continue;
    }
    if (ck_pr_load_32(&rt->stop_workers)) break;
    worker_sleep(rt);
  }
  this_worker = NULL;
  return NULL;
}

/* Lending. A thread of the engine's that sends a request and will wait
 * for the reply would otherwise wake a worker (a futex, which on a VM
 * costs the waker tens of microseconds when the worker's vCPU is idle)
 * and sleep itself: instead it runs the turns its send made ready, as a
 * worker would. sched_lend_begin makes this thread a worker for that time,
 * so that the send's sched_notify puts the receiver in its next slot, and
 * what the receiver's turn makes ready goes there too; sched_lend_end runs
 * them, one message a turn, at most max_turns, and only those of actors
 * marked lendable (actor_set_lendable: the storage actors, never an L2
 * adapter, which may be a plug-in and may write to sockets: adapters run
 * on the runtime's threads only, where SIGPIPE is blocked):
 *  - while the reply is not in (`waiting`: the caller would wait anyway);
 *  - after it, or for a caller that does not wait, only what is cheaper to
 *    run here than to hand over: no worker is spinning (one would take it
 *    for free), the actor's receives have averaged under LEND_CHEAP_NS,
 *    and LEND_AFTER_NS has not passed since the first of these turns (an
 *    eviction note, say, but not an L2 adapter's copy);
 * and hands what is left to the run queue. Nothing else changes: an actor
 * runs only once its scheduled flag is won (S3/R3), its turns still follow
 * one another (the same fences and TSan hand-off as a worker's next slot),
 * and a turn run here ends as a worker's does (sched_after_turn: muting,
 * P3). Only threads that are none of the runtime's and not inside a turn
 * lend: a worker or an actor that waited here would hold up its queue. */
#define LEND_CHEAP_NS 5000u
#define LEND_AFTER_NS 20000u

bool sched_lend_begin(kva_runtime *rt, worker_ctx *w) {
  if (rt->det || this_worker || rt_internal_thread || actor_in_turn()) return false;
  w->rt = rt;
  w->next = NULL;
  w->streak = 0;
  this_worker = w;
  return true;
}

static bool cheap_here(const kva_actor *a) {
  uint64_t n = ck_pr_load_64(&a->stats->dequeued);
  return n > 0 && ck_pr_load_64(&a->stats->recv_ns_total) < n * LEND_CHEAP_NS &&
         ck_pr_load_32(&a->rt->spinning) == 0;
}

void sched_lend_end(worker_ctx *w, const kva_actor *waiter, uint32_t max_turns, bool waiting) {
  kva_runtime *rt = w->rt;
  uint64_t extra_since = 0; /* first turn run for the cheapness alone */
  for (uint32_t t = 0; w->next && w->next->lendable && t < max_turns; t++) {
    kva_actor *a = w->next;
    if (t > 0 && !(waiting && mailbox_empty(&waiter->mb))) {
      if (!cheap_here(a)) break;
      uint64_t now = clock_mono_ns();
      if (!extra_since) extra_since = now;
      if (now - extra_since > LEND_AFTER_NS) break;
    }
    w->next = NULL;
    /* one message a turn: the caller goes back as soon as its reply is
     * in, and what others queued behind it goes to a worker */
    sched_after_turn(a, actor_run_batch(a, 1));
  }
  this_worker = NULL;
  if (w->next) runq_push(rt, w->next);
}

int sched_start(kva_runtime *rt) {
  rt->runq_buf = calloc(rt->runq_cap, sizeof(ck_ring_buffer_t));
  rt->threads = calloc(rt->workers, sizeof(pthread_t));
  if (!rt->runq_buf || !rt->threads) return KVA_ENOMEM;
  ck_ring_init(&rt->runq, rt->runq_cap);
  for (uint32_t i = 0; i < rt->workers; i++) {
    int rc = runtime_thread_create(&rt->threads[i], worker_main, rt);
    if (rc != 0) {
      LOG_ERROR("cannot start worker %u: %s", i, strerror(rc));
      return KVA_ENOMEM;
    }
    rt->nthreads++;
  }
  return KVA_OK;
}

void sched_stop(kva_runtime *rt) {
  ck_pr_store_32(&rt->stop_workers, 1);
  ck_pr_fence_memory();
  ck_pr_inc_32(&rt->wake_seq);
  futex_wake(&rt->wake_seq, (int)rt->nthreads);
  for (uint32_t i = 0; i < rt->nthreads; i++) pthread_join(rt->threads[i], NULL);
  rt->nthreads = 0;
  free(rt->threads);
  free(rt->runq_buf);
  rt->threads = NULL;
  rt->runq_buf = NULL;
}
