/*
 * pinned.c — actors with a thread of their own (GPU copy engines, blocking
 * I/O). The thread sleeps in poll() on the actor's eventfd; senders ring it
 * only when they win the scheduled flag (sched.c), so a busy pinned actor
 * costs no syscall per message either.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>

#include <ck_pr.h>

#include "actors/log.h"
#include "actors/runtime_internal.h"

static void wait_doorbell(kva_actor *a) {
  struct pollfd p = {.fd = a->efd, .events = POLLIN};
  while (poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
  doorbell_clear(a);
}

/* The actor stopped: its thread leaves it to be joined (a zombie, whose
 * reference is the thread's) and gives the flag back. Senders that take
 * the flag from now on see it dead and give it back (sched.c). */
static void pinned_exit(kva_actor *a) {
  kva_runtime *rt = a->rt;
  pthread_mutex_lock(&rt->reg_lock);
  a->next_zombie = rt->zombies;
  ck_pr_store_ptr(&rt->zombies, a);
  pthread_mutex_unlock(&rt->reg_lock);
  sched_drop(a);
}

static void *pinned_main(void *arg) {
  kva_actor *a = arg;
  kva_runtime *rt = a->rt;
  for (;;) {
    wait_doorbell(a);
    /* we hold the scheduled flag from here until sched_release */
    for (;;) {
      bool more = actor_run_batch(a, rt->batch);
      if (a->mute_target) { /* pinned senders overflow but are not parked */
        actor_unref(a->mute_target);
        a->mute_target = NULL;
      }
      if (ck_pr_load_32(&a->life) == LIFE_DEAD) {
        pinned_exit(a);
        return NULL;
      }
      if (more) sched_mute_release(a); /* P3 (sched.c); sched_release has its own */
      if (!more && !sched_release(a)) break;
    }
  }
}

int pinned_start(kva_actor *a) {
  int rc = runtime_thread_create(&a->thread, pinned_main, a);
  if (rc != 0) {
    LOG_ERROR("cannot start the thread of pinned actor %s: %s", kva_actor_name(a), strerror(rc));
    return KVA_ENOMEM;
  }
  a->has_thread = 1;
  actor_ref(a); /* the thread's, dropped once it is joined */
  return KVA_OK;
}

void pinned_join(kva_actor *a) {
  if (!a->has_thread) return;
  pthread_join(a->thread, NULL);
  a->has_thread = 0;
}
