/*
 * listener.c — the listener actor: accepts kvactd's clients.
 *
 * Message (type)                 | Action
 * -------------------------------|--------------------------------------------
 * SRV_ACCEPT_START               | watch the listening socket
 * KVA_MSG_FD_READY (socket)      | accept until EAGAIN; each peer's uid
 *                                | (SO_PEERCRED) must be the daemon's or in
 *                                | server.allowed_uids, and at most
 *                                | server.max_clients sessions live: else
 *                                | P_REFUSED (saying how many of them are
 *                                | idle: no hello yet) and close; otherwise
 *                                | one session actor for it
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actors/log.h"
#include "server/server_internal.h"

static int uid_allowed(const server *sv, uid_t uid) {
  if (uid == sv->uid) return 1;
  for (size_t i = 0; i < sv->nallowed; i++)
    if (sv->allowed[i] == uid) return 1;
  return 0;
}

static void admit(server *sv, int fd) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  char msg[256];
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    LOG_WARN("kvactd: a peer without credentials (%s): refused", strerror(errno));
    close(fd);
    return;
  }
  if (!uid_allowed(sv, cred.uid)) {
    LOG_WARN("kvactd: refused pid %d uid %u: not the daemon's uid nor in server.allowed_uids",
             (int)cred.pid, (unsigned)cred.uid);
    snprintf(msg, sizeof(msg), "uid %u is not allowed by kvactd (server.allowed_uids)",
             (unsigned)cred.uid);
    server_refuse(fd, KVA_EINVAL, msg);
    close(fd);
    return;
  }
  uint32_t idle, n = server_session_count(sv, &idle);
  if (n >= sv->max_clients) {
    LOG_WARN("kvactd: refused pid %d: %u clients already (server.max_clients), %u of them idle",
             (int)cred.pid, n, idle);
    snprintf(msg, sizeof(msg),
             "kvactd serves %u clients already (server.max_clients), %u of them idle (connected "
             "without a hello yet; each is closed %u ms after it connected, "
             "server.hello_timeout_ms)",
             n, idle, sv->hello_timeout_ms);
    server_refuse(fd, KVA_EAGAIN, msg);
    close(fd);
    return;
  }
  if (session_spawn(sv, fd, cred.pid, cred.uid) != KVA_OK) {
    LOG_ERROR("kvactd: cannot start a session for pid %d: out of memory", (int)cred.pid);
    server_refuse(fd, KVA_ENOMEM, "kvactd is out of memory");
    close(fd);
  }
}

static void accept_all(server *sv) {
  for (;;) {
    int fd = accept4(sv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) LOG_ERROR("kvactd: accept: %s", strerror(errno));
      return;
    }
    if (!__atomic_load_n(&sv->accepting, __ATOMIC_ACQUIRE)) {
      close(fd);
      continue;
    }
    admit(sv, fd);
  }
}

static void receive(kva_actor *self, void *state, const kva_msg *m) {
  server *sv = state;
  if (m->type == SRV_ACCEPT_START) {
    if (kva_watch_fd(self, sv->listen_fd, EPOLLIN, 0) != KVA_OK)
      LOG_ERROR("kvactd: cannot watch the listening socket; no client will be served");
    accept_all(sv); /* a client that connected before the watch */
  } else if (m->type == KVA_MSG_FD_READY) {
    accept_all(sv);
  }
}

static void on_stop(kva_actor *self, void *state) {
  server *sv = state;
  kva_unwatch_fd(self, sv->listen_fd);
}

static const kva_behavior behavior = {"kvactd_listener", receive, on_stop};

kva_actor *listener_spawn(server *sv) {
  kva_actor *a = kva_spawn(sv->rt, &behavior, sv, NULL);
  if (a) kva_send(a, SRV_ACCEPT_START, NULL, 0, NULL, 0);
  return a;
}
