/*
 * trickle.c — see trickle.h.
 */
#include "tests/server/trickle.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define REQUEST "GET /metrics HTTP/1.1\r\nX-Trickle: "

struct trickle {
  int n, period_ms;
  int *fd;
  size_t *sent; /* bytes of the request each connection has sent */
  char *closed; /* per connection: the server closed it */
  int nclosed;  /* atomic */
  int stop;     /* atomic */
  pthread_t thread;
};

static int connect_from(const char *src, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  if (src) {
    ck_assert_int_eq(inet_pton(AF_INET, src, &a.sin_addr), 1);
    ck_assert_msg(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "bind %s: %s", src,
                  strerror(errno));
  }
  a.sin_port = htons((uint16_t)port);
  ck_assert_int_eq(inet_pton(AF_INET, "127.0.0.1", &a.sin_addr), 1);
  int rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
  ck_assert_msg(rc == 0 || errno == EINPROGRESS, "connect: %s", strerror(errno));
  return fd;
}

static void mark_closed(trickle *t, int i) {
  t->closed[i] = 1;
  __atomic_add_fetch(&t->nclosed, 1, __ATOMIC_RELEASE); /* read by trickle_closed */
}

/* One byte more of connection i's endless request, unless the server
 * closed it (whatever it answered is read and dropped). */
static void step(trickle *t, int i) {
  char buf[512];
  ssize_t k;
  while ((k = recv(t->fd[i], buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
  }
  if (k == 0 || (k < 0 && (errno == ECONNRESET || errno == EPIPE || errno == ECONNREFUSED))) {
    mark_closed(t, i);
    return;
  }
  char c = t->sent[i] < strlen(REQUEST) ? REQUEST[t->sent[i]] : 'a';
  if (send(t->fd[i], &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
    t->sent[i]++;
  else if (errno == ECONNRESET || errno == EPIPE)
    mark_closed(t, i);
  /* EAGAIN, ENOTCONN: still connecting (the server's backlog); next time */
}

static void *run(void *arg) {
  trickle *t = arg;
  struct timespec pause = {t->period_ms / 1000, (long)(t->period_ms % 1000) * 1000000};
  while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
    for (int i = 0; i < t->n; i++)
      if (!t->closed[i]) step(t, i);
    nanosleep(&pause, NULL);
  }
  return NULL;
}

trickle *trickle_start(const char *src, int port, int n, int period_ms) {
  trickle *t = calloc(1, sizeof(*t));
  ck_assert_ptr_nonnull(t);
  t->n = n;
  t->period_ms = period_ms;
  t->fd = calloc((size_t)n, sizeof(*t->fd));
  t->sent = calloc((size_t)n, sizeof(*t->sent));
  t->closed = calloc((size_t)n, 1);
  ck_assert(t->fd && t->sent && t->closed);
  for (int i = 0; i < n; i++) t->fd[i] = connect_from(src, port);
  ck_assert_int_eq(pthread_create(&t->thread, NULL, run, t), 0);
  return t;
}

int trickle_closed(trickle *t) {
  return __atomic_load_n(&t->nclosed, __ATOMIC_ACQUIRE);
}

void trickle_stop(trickle *t) {
  __atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
  pthread_join(t->thread, NULL);
  for (int i = 0; i < t->n; i++) close(t->fd[i]);
  free(t->fd);
  free(t->sent);
  free(t->closed);
  free(t);
}
