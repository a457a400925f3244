/*
 * server.c — kvactd's server: the socket file, the listener, the control
 * threads, the metrics endpoint and the list of live sessions.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "actors/log.h"
#include "actors/runtime_internal.h"
#include "config/config_internal.h"
#include "server/server_internal.h"
#include "wire/protocol.h"
#include "wire/sock.h"

#define STOP_WAIT_MS 10000 /* sessions releasing their locks at shutdown */

/* A socket file already at path: a live daemon's (refuse), a dead one's
 * (remove it), or not a socket at all (refuse: never delete a user's
 * file). */
static int clear_path(const char *path, const struct sockaddr_un *a) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? KVA_OK : KVA_ECONFIG;
  if (!S_ISSOCK(st.st_mode)) {
    LOG_ERROR("kvactd: %s exists and is not a socket; not replacing it", path);
    return KVA_ECONFIG;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return KVA_ECONFIG;
  int live = connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0 || errno == EAGAIN;
  close(fd);
  if (live) {
    LOG_ERROR("kvactd: a daemon already serves %s; not starting a second one", path);
    return KVA_ECONFIG;
  }
  LOG_INFO("kvactd: replacing the stale socket %s of a daemon that is gone", path);
  return unlink(path) == 0 || errno == ENOENT ? KVA_OK : KVA_ECONFIG;
}

static int bind_socket(server *sv, const kva_config *c) {
  struct sockaddr_un a;
  snprintf(sv->path, sizeof(sv->path), "%s", config_str(c, "server.socket"));
  if (wire_unix_addr(config_str(c, "server.socket"), &a) != KVA_OK) {
    LOG_ERROR("kvactd: server.socket is longer than a Unix socket path may be (%zu bytes)",
              sizeof(a.sun_path) - 1);
    return KVA_ECONFIG;
  }
  int rc = clear_path(sv->path, &a);
  if (rc != KVA_OK) return rc;
  sv->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct stat st;
  if (sv->listen_fd < 0 || bind(sv->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      lstat(sv->path, &st) != 0 ||
      chmod(sv->path, (mode_t)config_i64(c, "server.socket_mode")) != 0 ||
      listen(sv->listen_fd, 128) != 0) {
    LOG_ERROR("kvactd: cannot serve on %s: %s", sv->path, strerror(errno));
    return KVA_ECONFIG;
  }
  /* the file bind made: the only one server_stop_accepting removes */
  sv->sock_dev = st.st_dev;
  sv->sock_ino = st.st_ino;
  sv->sock_bound = true;
  return KVA_OK;
}

/* Removes the socket file if it is still the one this daemon bound. Its
 * file may have been removed and the path bound by a second daemon since
 * (the first then serves no one new): removing that one's file would
 * leave the second unreachable. The check and the unlink are two steps;
 * a file replaced between them is still removed (no call unlinks by
 * inode). */
static void remove_own_socket(server *sv) {
  struct stat st;
  if (!sv->sock_bound) return;
  if (lstat(sv->path, &st) != 0) {
    if (errno != ENOENT) LOG_WARN("kvactd: cannot check %s: %s", sv->path, strerror(errno));
    return;
  }
  if (st.st_dev != sv->sock_dev || st.st_ino != sv->sock_ino) {
    LOG_WARN("kvactd: %s is no longer the socket this daemon made (another daemon's?): "
             "leaving it",
             sv->path);
    return;
  }
  if (unlink(sv->path) != 0 && errno != ENOENT)
    LOG_WARN("kvactd: cannot remove %s: %s", sv->path, strerror(errno));
}

static int start_metrics(server *sv, const kva_config *c) {
  const char *addr = config_str(c, "server.metrics_addr");
  if (!addr[0]) return KVA_OK;
  char err[256] = "";
  metrics_source src = {
      .s = sv->s, .clients = server_clients, .arg = sv, .prefetch = &sv->prefetch_latency};
  metrics_limits lim = {.connections = (uint32_t)config_i64(c, "server.metrics_max_connections"),
                        .per_ip = (uint32_t)config_i64(c, "server.metrics_max_connections_per_ip"),
                        .timeout_ms = (uint32_t)config_i64(c, "server.metrics_timeout_ms")};
  sv->metrics = metrics_start(addr, &src, &lim, err, sizeof(err));
  if (!sv->metrics) {
    LOG_ERROR("kvactd: server.metrics_addr %s: %s", addr, err);
    return KVA_ECONFIG;
  }
  LOG_INFO("kvactd: metrics at http://%s/metrics (readable by anyone who can reach it: it lists "
           "the clients' pids and uids)",
           addr);
  return KVA_OK;
}

int server_start(kva_runtime *rt, kva_storage *s, server **out) {
  server *sv = calloc(1, sizeof(*sv));
  if (!sv) return KVA_ENOMEM;
  *out = sv;
  const kva_config *c = rt->cfg;
  sv->rt = rt;
  sv->s = s;
  sv->listen_fd = -1;
  sv->uid = getuid();
  sv->max_clients = (uint32_t)config_i64(c, "server.max_clients");
  sv->hello_timeout_ms = (uint32_t)config_i64(c, "server.hello_timeout_ms");
  pthread_mutex_init(&sv->lock, NULL);
  int rc = admission_load(sv, c);
  if (rc == KVA_OK) rc = bind_socket(sv, c);
  if (rc == KVA_OK) rc = control_start(sv);
  if (rc == KVA_OK) rc = start_metrics(sv, c);
  /* accepting before the listener runs: a peer it accepts at once (one
   * that connected as soon as the socket listened) is served, not closed */
  if (rc == KVA_OK) __atomic_store_n(&sv->accepting, 1, __ATOMIC_RELEASE);
  if (rc == KVA_OK && !(sv->listener = listener_spawn(sv))) rc = KVA_ENOMEM;
  if (rc != KVA_OK) return rc;
  LOG_INFO("kvactd: serving on %s (mode %04o, at most %u clients, hello within %u ms)", sv->path,
           (unsigned)config_i64(c, "server.socket_mode"), sv->max_clients, sv->hello_timeout_ms);
  return KVA_OK;
}

void server_stop_accepting(server *sv) {
  if (!__atomic_exchange_n(&sv->accepting, 0, __ATOMIC_ACQ_REL)) return;
  remove_own_socket(sv);
  if (sv->listener) kva_actor_stop(sv->listener);
}

void server_stop(server *sv) {
  if (sv->listen_fd >= 0) server_stop_accepting(sv);
  if (sv->metrics) metrics_stop(sv->metrics);
  sv->metrics = NULL;
  pthread_mutex_lock(&sv->lock);
  for (srv_session *ss = sv->sessions; ss; ss = session_next(ss)) session_close(ss);
  pthread_mutex_unlock(&sv->lock);
  struct timespec pause = {0, 1000000};
  for (int waited = 0; __atomic_load_n(&sv->nsessions, __ATOMIC_ACQUIRE); waited++) {
    if (waited == STOP_WAIT_MS) {
      LOG_ERROR("kvactd: %u sessions did not end in %d ms; their locks stay",
                __atomic_load_n(&sv->nsessions, __ATOMIC_ACQUIRE), STOP_WAIT_MS);
      break;
    }
    nanosleep(&pause, NULL);
  }
  control_stop(sv);
}

void server_free(server *sv) {
  if (sv->listen_fd >= 0) close(sv->listen_fd);
  admission_free(sv);
  pthread_mutex_destroy(&sv->lock);
  free(sv);
}

size_t server_clients(void *arg, metrics_client *out, size_t cap) {
  server *sv = arg;
  size_t n = 0;
  pthread_mutex_lock(&sv->lock);
  for (srv_session *ss = sv->sessions; ss; ss = session_next(ss), n++)
    if (n < cap) session_describe(ss, &out[n]);
  pthread_mutex_unlock(&sv->lock);
  return n;
}

void server_refuse(int fd, int code, const char *msg) {
  uint8_t buf[PROTO_HDR_BYTES + 8 + PROTO_MAX_TEXT];
  proto_rep r = {.type = P_REFUSED,
                 .result = code,
                 .text = (char *)msg,
                 .text_len = (uint32_t)strnlen(msg, PROTO_MAX_TEXT)};
  size_t len = proto_rep_put(buf, sizeof(buf), &r, 0);
  if (len && send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
    LOG_INFO("kvactd: could not tell a refused peer why: %s", strerror(errno));
}

void server_session_added(server *sv, srv_session *ss) {
  pthread_mutex_lock(&sv->lock);
  session_link(ss, sv->sessions);
  sv->sessions = ss;
  __atomic_add_fetch(&sv->nsessions, 1, __ATOMIC_RELEASE);
  sv->nidle++;
  pthread_mutex_unlock(&sv->lock);
}

void server_session_welcomed(server *sv) {
  pthread_mutex_lock(&sv->lock);
  sv->nidle--;
  pthread_mutex_unlock(&sv->lock);
}

/* Both counts change under the lock with the list, so that a refusal's
 * snapshot (server_session_count) never shows a session gone from one
 * and not from the other. */
void server_session_gone(server *sv, srv_session *ss, bool idle) {
  pthread_mutex_lock(&sv->lock);
  srv_session **p = &sv->sessions;
  while (*p && *p != ss) p = session_next_ref(*p);
  if (*p) *p = session_next(ss);
  __atomic_sub_fetch(&sv->nsessions, 1, __ATOMIC_RELEASE);
  if (idle) sv->nidle--;
  pthread_mutex_unlock(&sv->lock);
}

uint32_t server_session_count(server *sv, uint32_t *idle) {
  pthread_mutex_lock(&sv->lock);
  uint32_t n = __atomic_load_n(&sv->nsessions, __ATOMIC_RELAXED); /* relaxed: under the lock */
  *idle = sv->nidle;
  pthread_mutex_unlock(&sv->lock);
  return n;
}
