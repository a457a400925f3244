/*
 * sock.c — frames over a nonblocking Unix stream socket (sock.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire/sock.h"

#define WIRE_MAX_FRAME ((size_t)PROTO_HDR_BYTES + PROTO_MAX_PAYLOAD)

int wire_unix_addr(const char *path, struct sockaddr_un *a) {
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  if (strlen(path) >= sizeof(a->sun_path)) return KVA_EINVAL;
  memcpy(a->sun_path, path, strlen(path) + 1);
  return KVA_OK;
}

void wire_buf_free(wire_buf *w) {
  free(w->b);
  *w = (wire_buf){0};
}

uint8_t *wire_reserve(wire_buf *w, size_t n, size_t limit) {
  size_t pending = w->len - w->off;
  if (n > limit || pending > limit - n) return NULL;
  if (w->off && w->len + n > w->cap) { /* compact first */
    memmove(w->b, w->b + w->off, pending);
    w->off = 0;
    w->len = pending;
  }
  if (w->len + n > w->cap) {
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->len + n) cap *= 2;
    uint8_t *b = realloc(w->b, cap);
    if (!b) return NULL;
    w->b = b;
    w->cap = cap;
  }
  return w->b + w->len;
}

void wire_commit(wire_buf *w, size_t n) {
  w->len += n;
}

int wire_flush(int sock, wire_buf *w, int fd) {
  while (w->off < w->len) {
    struct iovec iov = {w->b + w->off, w->len - w->off};
    union {
      struct cmsghdr h;
      char space[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
      memset(&ctl, 0, sizeof(ctl));
      mh.msg_control = ctl.space;
      mh.msg_controllen = sizeof(ctl.space);
      struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    ssize_t k = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -errno;
    }
    fd = -1; /* passed with the first bytes */
    w->off += (size_t)k;
  }
  w->off = w->len = 0;
  return 0;
}

/* Keeps the first descriptor of a control message, closes any other. */
static void take_fds(struct msghdr *mh, int *fd_in) {
  for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < nfd; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (fd_in && *fd_in < 0)
        *fd_in = fd;
      else
        close(fd);
    }
  }
}

int wire_fill(int sock, wire_buf *w, int *fd_in) {
  for (;;) {
    size_t pending = w->len - w->off;
    size_t room = pending < WIRE_MAX_FRAME ? WIRE_MAX_FRAME - pending : 0;
    if (room == 0) return 2; /* a whole frame is there: take it, then fill again */
    size_t want = room < 65536 ? room : 65536;
    uint8_t *dst = wire_reserve(w, want, WIRE_MAX_FRAME);
    if (!dst) return -ENOMEM;
    union {
      struct cmsghdr h;
      char space[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct iovec iov = {dst, want};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.space,
                        .msg_controllen = sizeof(ctl.space)};
    ssize_t k = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -errno;
    }
    take_fds(&mh, fd_in);
    if (k == 0) return 0;
    wire_commit(w, (size_t)k);
  }
}

int wire_next(wire_buf *w, proto_hdr *h, const uint8_t **payload, char *why, size_t whylen) {
  size_t pending = w->len - w->off;
  uint8_t magic[4] = {PROTO_MAGIC & 0xff, (PROTO_MAGIC >> 8) & 0xff, (PROTO_MAGIC >> 16) & 0xff,
                      PROTO_MAGIC >> 24};
  /* a peer of another protocol is told apart by its first bytes */
  if (memcmp(w->b + w->off, magic, pending < 4 ? pending : 4) != 0) {
    if (why && whylen) snprintf(why, whylen, "not a kvact frame");
    return PROTO_EMAGIC;
  }
  if (pending < PROTO_HDR_BYTES) return 1;
  int rc = proto_hdr_get(w->b + w->off, h, why, whylen);
  if (rc != PROTO_OK) return rc;
  if (pending < PROTO_HDR_BYTES + (size_t)h->len) return 1;
  *payload = w->b + w->off + PROTO_HDR_BYTES;
  w->off += PROTO_HDR_BYTES + h->len;
  if (w->off == w->len) w->off = w->len = 0; /* payload still readable: no compaction here */
  return PROTO_OK;
}

int wire_next_refusal(wire_buf *w, const proto_hdr *h, const uint8_t **payload) {
  if (h->type != P_REFUSED || h->len > 8u + PROTO_MAX_TEXT) return PROTO_EVERSION;
  if (w->len - w->off < PROTO_HDR_BYTES + (size_t)h->len) return 1;
  *payload = w->b + w->off + PROTO_HDR_BYTES;
  w->off += PROTO_HDR_BYTES + h->len;
  if (w->off == w->len) w->off = w->len = 0;
  return PROTO_OK;
}
