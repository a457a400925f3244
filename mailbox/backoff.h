/*
 * backoff.h — how kvact waits for another thread without a kernel object:
 * spin briefly (the other side is usually running), then yield (it may be
 * preempted: with more threads than cores it needs our CPU), then, for
 * waits that can be long, sleep. Used by the ring commit, the overflow
 * lock and senders blocked on a full mailbox.
 */
#ifndef KVA_MAILBOX_BACKOFF_H
#define KVA_MAILBOX_BACKOFF_H

#include <ck_pr.h>
#include <sched.h>
#include <time.h>

#define BACKOFF_SPINS 128u
#define BACKOFF_YIELDS 256u

/* i counts the failed attempts so far; may_sleep allows the last stage. */
static inline void backoff_wait(unsigned int i, int may_sleep) {
  if (i < BACKOFF_SPINS) {
    ck_pr_stall();
  } else if (i < BACKOFF_YIELDS || !may_sleep) {
    sched_yield();
  } else {
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  }
}

#endif
