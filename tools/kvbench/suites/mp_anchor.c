/*
 * mp_anchor.c — the anchors of kvbench --suite mp (mp_anchor.h): raw
 * AF_UNIX stream round trips and ZeroMQ REQ/REP over ipc://, each between
 * two processes, each at its best: blocking calls on fixed buffers, no
 * allocation, framing or decoding while the clock runs.
 *
 * Every server is a forked child that answers each request with a reply
 * of fixed size and exits when its client closes (unix) or sends an empty
 * message (zmq); the batch's clients race through mp_race. Latencies are
 * kept in an array allocated before the clock starts and sorted after.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/suites/mp_anchor.h"

static int fail(const char *what) {
  fprintf(stderr, "kvbench: mp anchor: %s: %s\n", what, strerror(errno));
  return -1;
}

/* All n bytes: 1, or 0 at end of stream before the first byte, -1 on an
 * error or a stream cut inside the message. */
static int recv_full(int fd, uint8_t *b, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = recv(fd, b + got, n - got, 0);
    if (r > 0)
      got += (size_t)r;
    else if (r == 0)
      return got == 0 ? 0 : -1;
    else if (errno != EINTR)
      return -1;
  }
  return 1;
}

/* MSG_NOSIGNAL: a dead peer is an error here, not a SIGPIPE. */
static int send_full(int fd, const uint8_t *b, size_t n) {
  for (size_t put = 0; put < n;) {
    ssize_t w = send(fd, b + put, n - put, MSG_NOSIGNAL);
    if (w > 0)
      put += (size_t)w;
    else if (w < 0 && errno != EINTR)
      return -1;
  }
  return 0;
}

/* ---- raw AF_UNIX stream ---------------------------------------------------- */

/* The server child: one reply per request until the client closes. */
static _Noreturn void unix_serve(int fd, size_t req_bytes, size_t rep_bytes) {
  static uint8_t req[MP_BATCH_REQ_BYTES], rep[MP_BATCH_REP_BYTES];
  int r;
  while ((r = recv_full(fd, req, req_bytes)) == 1)
    if (send_full(fd, rep, rep_bytes) != 0) _exit(1);
  _exit(r == 0 ? 0 : 1);
}

/* Forks a server of these sizes; the parent's end of the socketpair in
 * *fd. The server's pid, or -1. */
static pid_t unix_server_start(size_t req_bytes, size_t rep_bytes, int *fd) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return fail("socketpair");
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    unix_serve(sv[1], req_bytes, rep_bytes);
  }
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    return fail("fork");
  }
  *fd = sv[0];
  return pid;
}

/* n round trips on fd; with lat, each one's nanoseconds. */
static int unix_round_trips(int fd, size_t req_bytes, size_t rep_bytes, size_t n, uint64_t *lat) {
  static uint8_t req[MP_BATCH_REQ_BYTES], rep[MP_BATCH_REP_BYTES];
  for (size_t i = 0; i < n; i++) {
    uint64_t t0 = lat ? bench_now_ns() : 0;
    if (send_full(fd, req, req_bytes) != 0 || recv_full(fd, rep, rep_bytes) != 1) return -1;
    if (lat) lat[i] = bench_now_ns() - t0;
  }
  return 0;
}

int anchor_unix_rtt(size_t iters, rtt_result *out) {
  uint64_t *lat = iters ? malloc(iters * sizeof(*lat)) : NULL;
  int fd = -1;
  pid_t srv = lat ? unix_server_start(MP_RTT_REQ_BYTES, MP_RTT_REP_BYTES, &fd) : -1;
  int rc = srv < 0 ? -1 : unix_round_trips(fd, MP_RTT_REQ_BYTES, MP_RTT_REP_BYTES, MP_WARMUP, NULL);
  uint64_t t0 = bench_now_ns();
  if (rc == 0) rc = unix_round_trips(fd, MP_RTT_REQ_BYTES, MP_RTT_REP_BYTES, iters, lat);
  uint64_t ns = bench_now_ns() - t0;
  if (fd >= 0) close(fd);
  if (srv >= 0 && mp_reap(srv) != 0) rc = -1;
  if (rc == 0)
    mp_rtt_finish(lat, iters, ns, out);
  else
    fprintf(stderr, "kvbench: mp anchor: unix round trips failed\n");
  free(lat);
  return rc;
}

/* ---- ZeroMQ REQ/REP over ipc:// -------------------------------------------- */

/* The server child: binds, says 'r' (or 'x') on ready_w, answers each
 * request; an empty request is answered and ends it. */
static _Noreturn void zmq_serve(const char *endpoint, int ready_w) {
  static uint8_t req[MP_RTT_REQ_BYTES], rep[MP_RTT_REP_BYTES];
  void *ctx = zmq_ctx_new(), *s = ctx ? zmq_socket(ctx, ZMQ_REP) : NULL;
  int ok = s && zmq_bind(s, endpoint) == 0, stop = 0;
  if (write(ready_w, ok ? "r" : "x", 1) != 1) ok = 0;
  while (ok && !stop) {
    int n = zmq_recv(s, req, sizeof(req), 0);
    if (n < 0 && errno == EINTR) continue;
    stop = n == 0;
    ok = n >= 0 && zmq_send(s, rep, sizeof(rep), 0) == (int)sizeof(rep);
  }
  if (s) zmq_close(s);
  if (ctx) zmq_ctx_term(ctx);
  _exit(ok ? 0 : 1);
}

/* Forks the server and waits until it is bound. Its pid, or -1. */
static pid_t zmq_server_start(const char *endpoint) {
  int p[2];
  if (pipe(p) != 0) return fail("pipe");
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    zmq_serve(endpoint, p[1]);
  }
  close(p[1]);
  char c = 0;
  if (pid >= 0 && (read(p[0], &c, 1) != 1 || c != 'r')) {
    mp_reap(pid);
    pid = -1;
    errno = EADDRNOTAVAIL;
  }
  close(p[0]);
  return pid < 0 ? fail("zmq server") : pid;
}

static int zmq_round_trips(void *s, size_t n, uint64_t *lat) {
  static uint8_t req[MP_RTT_REQ_BYTES], rep[MP_RTT_REP_BYTES];
  for (size_t i = 0; i < n; i++) {
    uint64_t t0 = lat ? bench_now_ns() : 0;
    if (zmq_send(s, req, sizeof(req), 0) != (int)sizeof(req) ||
        zmq_recv(s, rep, sizeof(rep), 0) != (int)sizeof(rep))
      return -1;
    if (lat) lat[i] = bench_now_ns() - t0;
  }
  return 0;
}

/* The empty request that ends the server, and its answer. */
static int zmq_stop(void *s) {
  uint8_t rep[MP_RTT_REP_BYTES] = {0};
  return zmq_send(s, rep, 0, 0) == 0 && zmq_recv(s, rep, sizeof(rep), 0) >= 0 ? 0 : -1;
}

/* The client side, in this process, after the server is bound. */
static int zmq_client(const char *endpoint, size_t iters, uint64_t *lat, uint64_t *ns) {
  void *ctx = zmq_ctx_new(), *s = ctx ? zmq_socket(ctx, ZMQ_REQ) : NULL;
  int linger = 0;
  int rc = s && zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger)) == 0 &&
                   zmq_connect(s, endpoint) == 0
               ? zmq_round_trips(s, MP_WARMUP, NULL)
               : -1;
  uint64_t t0 = bench_now_ns();
  if (rc == 0) rc = zmq_round_trips(s, iters, lat);
  *ns = bench_now_ns() - t0;
  if (rc == 0) rc = zmq_stop(s);
  if (rc != 0)
    fprintf(stderr, "kvbench: mp anchor: zmq round trips failed: %s\n", zmq_strerror(zmq_errno()));
  if (s) zmq_close(s);
  if (ctx) zmq_ctx_term(ctx);
  return rc;
}

int anchor_zmq_rtt(size_t iters, rtt_result *out) {
  char path[64], endpoint[80];
  snprintf(path, sizeof(path), "/tmp/kvbench-mp-%d.ipc", (int)getpid());
  snprintf(endpoint, sizeof(endpoint), "ipc://%s", path);
  unlink(path);
  uint64_t *lat = iters ? malloc(iters * sizeof(*lat)) : NULL, ns = 0;
  pid_t srv = lat ? zmq_server_start(endpoint) : -1;
  int rc = srv < 0 ? -1 : zmq_client(endpoint, iters, lat, &ns);
  if (srv >= 0 && mp_reap(srv) != 0) rc = -1;
  if (rc == 0) mp_rtt_finish(lat, iters, ns, out);
  free(lat);
  unlink(path);
  return rc;
}

/* ---- batched round trips from several client processes --------------------- */

/* A racing client (mp_race): its own server, a warm-up, then `*iters`
 * timed round trips. */
static int batch_client(int rank, void *arg, int ready_w, int go_r) {
  size_t iters = *(const size_t *)arg;
  int fd = -1;
  (void)rank;
  pid_t srv = unix_server_start(MP_BATCH_REQ_BYTES, MP_BATCH_REP_BYTES, &fd);
  int ok = srv >= 0 &&
           unix_round_trips(fd, MP_BATCH_REQ_BYTES, MP_BATCH_REP_BYTES, MP_WARMUP, NULL) == 0;
  ok = mp_client_ready(ready_w, go_r, ok) &&
       unix_round_trips(fd, MP_BATCH_REQ_BYTES, MP_BATCH_REP_BYTES, iters, NULL) == 0;
  ok = mp_client_done(ready_w, ok);
  if (fd >= 0) close(fd);
  if (srv >= 0 && mp_reap(srv) != 0) ok = 0;
  return ok ? 0 : 1;
}

int anchor_unix_batch(int clients, size_t iters, double *keyops_per_s) {
  uint64_t ns;
  if (!iters || mp_race(clients, batch_client, &iters, &ns) != 0) {
    fprintf(stderr, "kvbench: mp anchor: a batch of %d clients failed\n", clients);
    return -1;
  }
  *keyops_per_s = (double)clients * (double)iters * MP_BATCH_KEYS / ((double)ns / 1e9);
  return 0;
}
