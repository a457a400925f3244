/*
 * listener.c — the listener actor: accepts kvactd's clients.
 *
 * Message (type)                 | Action
 * -------------------------------|--------------------------------------------
 * SRV_ACCEPT_START               | watch the listening socket
 * KVA_MSG_FD_READY (socket)      | accept until EAGAIN; each peer must be
 *                                | admitted (admission.c: its uid, gid or
 *                                | groups against the daemon's uid,
 *                                | server.allowed_uids and
 *                                | server.allowed_groups), and at most
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

static void admit(server *sv, int fd) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  char msg[256];
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    LOG_WARN("kvactd: a peer without credentials (%s): refused", strerror(errno));
    close(fd);
    return;
  }
  if (!admission_allows(sv, fd, &cred)) {
    LOG_WARN("kvactd: refused pid %d uid %u gid %u: not the daemon's uid nor in "
             "server.allowed_uids, and in no group of server.allowed_groups",
             (int)cred.pid, (unsigned)cred.uid, (unsigned)cred.gid);
    snprintf(msg, sizeof(msg),
             "uid %u is not allowed by kvactd: it is not in server.allowed_uids and none of its "
             "groups is in server.allowed_groups",
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
