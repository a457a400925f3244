/*
 * runtime_internal.h — the structures shared by the files of actors/.
 *
 * Who owns what:
 *  - an actor's behaviour state and its consumer side of the mailbox belong
 *    to whichever thread holds the actor's `scheduled` flag and runs it;
 *  - `scheduled` (0/1) is the one bit that decides who dispatches an actor:
 *    a sender that flips it 0 -> 1 must dispatch (run queue push, doorbell
 *    or ready list); the runner clears it only when it has seen the mailbox
 *    empty, and re-checks after clearing (the wake-up protocol, sched.c);
 *  - everything else in the runtime is guarded by the lock named next to it.
 *
 * Lifetime of an actor's memory. `refs` counts who may still touch it:
 *  - its life: 1 from spawn until on_stop has run (actor_finish), or until
 *    kva_port_close for a port;
 *  - its scheduled flag while it is held: whoever wins it 0 -> 1 takes a
 *    reference (sched_take), and the release gives it back (sched_release;
 *    sched_drop for a dead pinned actor or port): a releaser still reads
 *    the mailbox after R1, when another thread may have run the last turn;
 *  - each send in progress (kva_send, actor_send_internal, the poller's);
 *  - a pooled actor muted on it (mute_target), until that actor's turn ends;
 *  - a pinned actor's thread, until it is joined (zombies, actor.c);
 *  - runtime shutdown while it stops the actor.
 * Whoever drops the last frees it (actor_free): mailbox drained, eventfd
 * closed, stats slot given back, unlinked from the runtime's list. So an
 * actor that stops gives back everything it held, and spawning and
 * stopping actors forever keeps the runtime flat. Holding a kva_actor
 * pointer is not a reference: a caller may use one only while it knows the
 * actor has not stopped (kvact.h, kva_actor_stop).
 */
#ifndef KVA_ACTORS_RUNTIME_INTERNAL_H
#define KVA_ACTORS_RUNTIME_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <ck_pr.h>

#include "actors/stats.h"
#include "kvact.h"
#include "mailbox/mailbox.h"
#include "mailbox/payload_pool.h"

enum { ACTOR_POOLED = 0, ACTOR_PINNED = 1, ACTOR_PORT = 2 };
/* Life of an actor: OPEN accepts sends; CLOSED (after its STOP message was
 * received) refuses them while the queue drains; DEAD after on_stop. */
enum { LIFE_OPEN = 0, LIFE_CLOSED = 1, LIFE_DEAD = 2 };

struct kva_actor {
  mailbox mb;
  uint32_t scheduled; /* atomic; see the top of this file */
  uint32_t life;      /* atomic LIFE_* */
  uint32_t kind;      /* ACTOR_*, fixed at spawn */
  uint32_t stop_sent; /* atomic: kva_actor_stop already queued STOP */
  /* its turns may run on a lending thread (sched.c); set before its first message */
  uint32_t lendable;
  kva_runtime *rt;
  kva_behavior beh; /* copied at spawn */
  void *state;
  int efd;           /* eventfd doorbell */
  uint32_t rung;     /* atomic: the doorbell was rung and not yet cleared */
  stats_slot *stats; /* counters, in the shared segment when it has room */
  uint32_t trace_id; /* the slot's index for trace events (TRACE_NOBODY: none) */
  /* Muting (Pony's rule). mute_target is written by this actor's own
   * receive when a send overflowed; parked_on/park_next under rt->mute_lock. */
  kva_actor *mute_target;
  kva_actor *parked_on;
  kva_actor *park_next;
  pthread_t thread; /* pinned actors */
  int has_thread;
  /* rt->actors list, newest first, and rt->zombies (under rt->reg_lock) */
  kva_actor *next_all, *prev_all;
  kva_actor *next_zombie;
  /* atomic: who may still touch it (top of this file). A line of its own:
   * senders update it, and must not bounce the mailbox's or the flag's */
  uint32_t refs __attribute__((aligned(64)));
};

typedef struct poller poller;
typedef struct det_state det_state;

struct kva_runtime {
  kva_config *cfg;
  uint32_t fork_gen; /* runtime_fork_gen when it started (fork.c) */
  int pid;           /* the process that started it */
  uint32_t workers;  /* 0 = deterministic mode */
  uint32_t batch;
  uint32_t mailbox_capacity;
  stats_segment *stats;
  trace_ring *trace; /* the stats segment's trace ring, NULL when private */
  payload_pool *pool;

  pthread_mutex_t reg_lock; /* actors list, zombies, retired_delivered */
  kva_actor *actors;
  uint32_t nactors;           /* atomic: actors and ports not yet fully freed */
  kva_actor *zombies;         /* stopped pinned actors whose thread is to be joined */
  uint64_t retired_delivered; /* messages received by actors already freed */
  uint32_t spawning_closed;   /* atomic: shutdown began, kva_spawn refuses */

  /* threaded scheduler (sched.c) */
  ck_ring_t runq;
  ck_ring_buffer_t *runq_buf;
  uint32_t runq_cap;
  pthread_t *threads;
  uint32_t nthreads;
  uint32_t sleepers; /* atomic: workers asleep or about to sleep */
  uint32_t spinning; /* atomic: workers polling the run queue */
  uint32_t wake_seq; /* atomic futex word */
  uint32_t stop_workers;
  uint64_t spin_ns; /* how long an idle worker polls the run queue before sleeping */

  det_state *det; /* deterministic mode (det.c), NULL otherwise */
  void *storage;  /* the storage facade (root), NULL without storage actors */
  void *server;   /* kvactd's listener (server/), NULL unless server.socket */
  poller *poll;   /* epoll thread, fd watches, timers (poller.c) */

  pthread_mutex_t mute_lock; /* parked list and every actor's parked_on */
  kva_actor *parked;

  /* counters (atomic, relaxed) */
  uint64_t n_overflowed, n_blocked, n_mutes, n_eventfd_writes, n_wakes, n_sleeps;
};

/* An envelope's sender. Its low 5 bits (actors are 64-byte aligned) hold
 * the trace tag of a message whose send was traced (actors/trace.h). */
#define ENV_TAG_MASK ((uintptr_t)31)
_Static_assert(TRACE_TAGS <= ENV_TAG_MASK, "a trace tag fits in the envelope's low bits");
static inline kva_actor *env_from(const mailbox_env *e) {
  return (kva_actor *)((uintptr_t)e->from & ~ENV_TAG_MASK);
}
static inline uint32_t env_trace_tag(const mailbox_env *e) {
  return (uint32_t)((uintptr_t)e->from & ENV_TAG_MASK);
}

/* Set on the runtime's own non-actor threads (poller): never block a send. */
extern __thread int rt_internal_thread;

/* actor.c */
bool actor_run_batch(kva_actor *a, uint32_t max); /* true if more may wait */
bool actor_in_turn(void);                         /* this thread runs a turn now */
/* Lets a's turns run on a thread that lends itself to its request
 * (sched.c): only the runtime's own storage actors, whose receives never
 * block nor write to a socket, and run no plug-in code but pure policies.
 * Call before a's first message. */
void actor_set_lendable(kva_actor *a);
/* ... of a pooled actor: it must not block (the reply may need its worker) */
bool actor_in_pooled_turn(void);
/* References (the top of this file). The last unref frees the actor. */
static inline void actor_ref(kva_actor *a) {
  ck_pr_inc_32(&a->refs);
}
void actor_unref(kva_actor *a);
void actor_free(kva_actor *a);            /* unlinks and frees, whatever its refs (shutdown) */
void actor_reap_zombies(kva_runtime *rt); /* joins stopped pinned threads */
int actor_send_internal(kva_actor *to, uint32_t type, const void *data, uint32_t len, uint64_t tag);
kva_actor *actor_create(kva_runtime *rt, const kva_behavior *b, void *state,
                        const kva_spawn_opts *o, uint32_t kind);

/* sched.c */
/* after a push: dispatch if idle; crowded = the push may have crowded it */
void sched_notify(kva_actor *a, bool crowded);
/* runner: clear scheduled and give its reference back; true if it must
 * go on (it took the flag again, with a new reference); on false the
 * caller may touch `a` only if it holds a reference of its own */
bool sched_release(kva_actor *a);
/* wins the flag 0 -> 1 with its reference; the caller then owns the actor */
bool sched_take(kva_actor *a);
/* a dead pinned actor or port: the flag's holder gives it back, if it
 * still holds it (CAS: it may have been given back already), with its
 * reference */
void sched_drop(kva_actor *a);
/* a turn that left messages ended: release the senders muted on target
 * if it is calm (sched.c, P3) */
void sched_mute_release(kva_actor *target);
int sched_start(kva_runtime *rt);
void sched_stop(kva_runtime *rt);
void doorbell_ring(kva_actor *a);
void doorbell_clear(kva_actor *a);

/* A worker's state (sched.c): the actor it runs after the current turn,
 * and how many turns in a row came from that slot. */
typedef struct worker_ctx {
  kva_runtime *rt;
  kva_actor *next;
  uint32_t streak;
} worker_ctx;
/* A thread of the engine's lends itself to the turns its send makes ready
 * (sched.c): begin before the send (false: this thread may not lend);
 * end runs them, at most max_turns, while `waiter` has no mail (when
 * `waiting`) and then only those cheaper here than a hand-over. */
bool sched_lend_begin(kva_runtime *rt, worker_ctx *w);
void sched_lend_end(worker_ctx *w, const kva_actor *waiter, uint32_t max_turns, bool waiting);

/* port.c: a send from the port's thread that lends it (sched_lend_begin)
 * to what the send made ready, until the reply is in or max_turns ran;
 * receiving = kva_port_recv follows at once. kva_send's result. */
int port_send_lent(kva_port *p, kva_actor *to, uint32_t type, const void *data, uint32_t len,
                   uint64_t tag, uint32_t max_turns, bool receiving);

/* thread.c: a runtime thread (worker, pinned actor), SIGPIPE blocked in it
 * for good; rt_sigpipe_blocked is 1 on such threads. pthread_create's
 * result. */
int runtime_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);
extern __thread int rt_sigpipe_blocked;

/* pinned.c */
int pinned_start(kva_actor *a);
void pinned_join(kva_actor *a);

/* det.c */
int det_create(kva_runtime *rt, uint64_t seed);
void det_destroy(kva_runtime *rt);
void det_ready(kva_runtime *rt, kva_actor *a);
bool det_step(kva_runtime *rt); /* deliver one message; false when idle */

/* poller.c */
int poller_create(kva_runtime *rt);
void poller_stop(kva_runtime *rt); /* cancels every watch and timer, joins */
void poller_destroy(kva_runtime *rt);
void poller_forget_actor(kva_runtime *rt, kva_actor *a);
bool poller_det_poll(kva_runtime *rt); /* det mode: fds ready now */
bool poller_det_next_timer(kva_runtime *rt, uint64_t *deadline);
bool poller_det_fire_due(kva_runtime *rt, uint64_t now); /* fires the earliest due */

/* fork.c: a runtime belongs to the process that started it. In a child
 * made by fork() (its threads did not follow) runtime_forked is true at
 * once (a pthread_atfork handler, no syscall per call): its calls are
 * refused with KVA_ESHUTDOWN, said once in the log. */
uint32_t runtime_fork_gen(void);
bool runtime_forked(const kva_runtime *rt);

/* runtime.c: kva_runtime_start/_shutdown without the storage actors (the
 * facade at the root adds them, keeping actors/ free of storage) */
int runtime_create(const kva_config *cfg, kva_runtime **out);
void runtime_destroy(kva_runtime *rt);

/* port.c: a port with a mailbox of `capacity` (for the storage facade's
 * many small reply ports) */
kva_port *port_open_with(kva_runtime *rt, const char *name, uint32_t capacity);
/* How long kva_port_recv spins on the mailbox before sleeping (default
 * 50 us, the facade's in-process replies; 0 = sleep at once, for replies
 * that cross a socket). Before the port's first receive. */
void port_set_spin(kva_port *p, uint64_t ns);

#endif
