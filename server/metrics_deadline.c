/*
 * metrics_deadline.c — a deadline on every request of the metrics
 * endpoint (metrics_deadline.h).
 *
 * The table holds one entry per open connection: its socket and when its
 * clock started. libmicrohttpd's thread adds and removes entries through
 * its callbacks; our thread (the sweeper) sleeps until the earliest
 * deadline and shuts the sockets past it down. Both hold `lock`.
 *
 * Why shutting a socket down from another thread is safe: libmicrohttpd
 * tells MHD_CONNECTION_NOTIFY_CLOSED before it closes the socket (daemon.c
 * MHD_cleanup_connections, and the failure path of a new connection), and
 * that callback waits for `lock` to remove the entry. So while an entry is
 * in the table under `lock`, its fd is still that connection's socket,
 * never a number reused by another file.
 */
#include "server/metrics_deadline.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "kvact.h"

typedef struct entry {
  bool used;
  bool swept;     /* shut down: libmicrohttpd closes it soon */
  int fd;         /* the connection's socket, -1 when libmicrohttpd did not say */
  uint64_t since; /* ms (CLOCK_MONOTONIC): accept, or the previous answer */
  int next_free;
} entry;

struct metrics_deadline {
  pthread_mutex_t lock;
  pthread_cond_t wake; /* a new entry (the sweeper may be waiting for none), or stop */
  pthread_t sweeper;
  bool stop;
  uint32_t timeout_ms;
  uint32_t max;
  entry *e;
  int free_head;
};

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- the sweeper ---------------------------------------------------------------- */

/* Under the lock: shuts down the connections past their deadline; returns
 * the earliest deadline still ahead (UINT64_MAX: none). */
static uint64_t sweep(metrics_deadline *d, uint64_t now, uint32_t *swept) {
  uint64_t next = UINT64_MAX;
  for (uint32_t i = 0; i < d->max; i++) {
    entry *e = &d->e[i];
    if (!e->used || e->swept || e->fd < 0) continue;
    uint64_t due = e->since + d->timeout_ms;
    if (now < due) {
      next = due < next ? due : next;
      continue;
    }
    shutdown(e->fd, SHUT_RDWR); /* libmicrohttpd reads the end and closes it */
    e->swept = true;
    (*swept)++;
  }
  return next;
}

static void wait_until(metrics_deadline *d, uint64_t due_ms) {
  if (due_ms == UINT64_MAX) {
    pthread_cond_wait(&d->wake, &d->lock);
    return;
  }
  struct timespec ts = {(time_t)(due_ms / 1000u), (long)(due_ms % 1000u) * 1000000};
  pthread_cond_timedwait(&d->wake, &d->lock, &ts);
}

static void *sweeper_main(void *arg) {
  metrics_deadline *d = arg;
  pthread_mutex_lock(&d->lock);
  while (!d->stop) {
    uint32_t swept = 0;
    uint64_t next = sweep(d, now_ms(), &swept);
    if (swept)
      kva_log(KVA_LOG_WARN,
              "metrics: closed %u connections without a request answered within %u ms "
              "(server.metrics_timeout_ms)",
              swept, d->timeout_ms);
    wait_until(d, next);
  }
  pthread_mutex_unlock(&d->lock);
  return NULL;
}

/* ---- start and stop ----------------------------------------------------------------- */

static bool init_sync(metrics_deadline *d) {
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca) != 0) return false;
  bool ok =
      pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&d->wake, &ca) == 0;
  pthread_condattr_destroy(&ca);
  if (ok && pthread_mutex_init(&d->lock, NULL) != 0) {
    pthread_cond_destroy(&d->wake);
    ok = false;
  }
  return ok;
}

metrics_deadline *metrics_deadline_start(uint32_t max, uint32_t timeout_ms) {
  metrics_deadline *d = calloc(1, sizeof(*d));
  if (!d) return NULL;
  d->e = calloc(max ? max : 1, sizeof(*d->e));
  if (!d->e || !init_sync(d)) {
    free(d->e);
    free(d);
    return NULL;
  }
  d->max = max;
  d->timeout_ms = timeout_ms;
  d->free_head = -1;
  for (uint32_t i = max; i-- > 0;) {
    d->e[i].next_free = d->free_head;
    d->free_head = (int)i;
  }
  if (pthread_create(&d->sweeper, NULL, sweeper_main, d) != 0) {
    d->stop = true; /* no thread to join */
    metrics_deadline_free(d);
    return NULL;
  }
  return d;
}

void metrics_deadline_stop(metrics_deadline *d) {
  pthread_mutex_lock(&d->lock);
  bool running = !d->stop;
  d->stop = true;
  pthread_cond_signal(&d->wake);
  pthread_mutex_unlock(&d->lock);
  if (running) pthread_join(d->sweeper, NULL);
}

void metrics_deadline_free(metrics_deadline *d) {
  if (!d) return;
  pthread_cond_destroy(&d->wake);
  pthread_mutex_destroy(&d->lock);
  free(d->e);
  free(d);
}

/* ---- libmicrohttpd's callbacks (its thread) -------------------------------------------- */

static void track(metrics_deadline *d, struct MHD_Connection *c, void **ctx) {
  const union MHD_ConnectionInfo *fd =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  pthread_mutex_lock(&d->lock);
  /* never full: libmicrohttpd holds at most max connections, and forgets
   * one here before it counts it closed */
  if (d->free_head >= 0) {
    entry *e = &d->e[d->free_head];
    d->free_head = e->next_free;
    *e = (entry){.used = true, .fd = fd ? fd->connect_fd : -1, .since = now_ms(), .next_free = -1};
    *ctx = e;
    pthread_cond_signal(&d->wake);
  }
  pthread_mutex_unlock(&d->lock);
}

static void forget(metrics_deadline *d, void **ctx) {
  entry *e = *ctx;
  if (!e) return;
  pthread_mutex_lock(&d->lock);
  e->used = false;
  e->next_free = d->free_head;
  d->free_head = (int)(e - d->e);
  pthread_mutex_unlock(&d->lock);
  *ctx = NULL;
}

void metrics_deadline_notify(void *cls, struct MHD_Connection *c, void **ctx,
                             enum MHD_ConnectionNotificationCode code) {
  if (code == MHD_CONNECTION_NOTIFY_STARTED)
    track(cls, c, ctx);
  else
    forget(cls, ctx);
}

void metrics_deadline_answered(void *cls, struct MHD_Connection *c, void **request,
                               enum MHD_RequestTerminationCode why) {
  metrics_deadline *d = cls;
  (void)request;
  (void)why;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  entry *e = ci ? ci->socket_context : NULL;
  if (!e) return;
  pthread_mutex_lock(&d->lock);
  e->since = now_ms(); /* the next request's clock; later than every deadline ahead */
  pthread_mutex_unlock(&d->lock);
}
