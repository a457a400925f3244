/*
 * thread.c — the runtime's own threads (workers, pinned actors): created
 * with SIGPIPE blocked.
 *
 * An actor that writes to a socket (the redis adapter, through hiredis's
 * write(2)) raises SIGPIPE when the peer is gone, and SIGPIPE's default
 * action kills the process. A library must not change the process's
 * disposition, but the threads it creates are its own: there SIGPIPE stays
 * blocked for good (a raised one is discarded with the thread), and
 * rt_sigpipe_blocked (kva_thread_sigpipe_blocked for adapters) tells
 * socket code it need not guard each call.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include "actors/runtime_internal.h"

__thread int rt_sigpipe_blocked;

int kva_thread_sigpipe_blocked(void) {
  return rt_sigpipe_blocked;
}

typedef struct start {
  void *(*fn)(void *);
  void *arg;
} start;

static void *thread_main(void *p) {
  start s = *(start *)p;
  free(p);
  rt_sigpipe_blocked = 1; /* inherited from the creator's mask, below */
  return s.fn(s.arg);
}

int runtime_thread_create(pthread_t *t, void *(*fn)(void *), void *arg) {
  start *s = malloc(sizeof(*s));
  if (!s) return ENOMEM;
  *s = (start){fn, arg};
  sigset_t pipe, old;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &old);
  int rc = pthread_create(t, NULL, thread_main, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) free(s);
  return rc;
}
