/*
 * redis_write.c — a connection's writer: hiredis's output buffer, with the
 * payloads of large SETs spliced in from L1 memory instead of copied.
 *
 * hiredis 0.14 keeps one output buffer per context: every command is
 * appended (a copy), a partly written buffer is shifted down by a memmove
 * of the rest at every write, and a written one is freed, so the next
 * command grows a fresh one (page faults). For a 1 MiB value that was two
 * copies in our process and a memmove per socket write, on a machine
 * whose other core runs the server. Now, once connected, this file does
 * the writing: from k->woff on, clearing the buffer (its allocation kept)
 * once all of it is out, and a SET of a large value appends only its
 * head (the RESP framing, the key and the value's slot header) through
 * hiredis, which queues its reply callback in order, and registers a
 * splice: "after buffer offset `at`, the payload at p, then CRLF". The
 * writer sends the buffer up to a splice, the splice, the buffer on, in
 * one sendmsg; the payload stays valid until the SET's reply, since the
 * store holds its L1 read lock until then. The byte stream is exactly the
 * one hiredis would have written.
 *
 * Splices are kept in order of `at` (appends only grow the buffer), in an
 * array reused across commands; they are dropped with the connection.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <hiredis/sds.h>

#include "l2/adapters/redis/redis_internal.h"

#define WRITE_IOVS 64

static const char crlf[2] = {'\r', '\n'};

void redis_write_reset(redis_conn *k) {
  k->woff = 0;
  k->sp_head = k->sp_n = 0;
}

void redis_write_free(redis_conn *k) {
  free(k->sp);
  k->sp = NULL;
  k->sp_cap = 0;
  redis_write_reset(k);
}

bool redis_write_splice(redis_conn *k, const void *p, size_t len) {
  if (k->sp_head == k->sp_n) k->sp_head = k->sp_n = 0; /* all written: reuse from 0 */
  if (k->sp_n == k->sp_cap) {
    uint32_t cap = k->sp_cap ? 2 * k->sp_cap : 16;
    redis_splice *s = realloc(k->sp, cap * sizeof(*s));
    if (!s) return false;
    k->sp = s;
    k->sp_cap = cap;
  }
  k->sp[k->sp_n++] = (redis_splice){.at = sdslen(k->ac->c.obuf), .p = p, .len = len};
  return true;
}

bool redis_write_pending(const redis_conn *k) {
  return k->ac && (sdslen(k->ac->c.obuf) > k->woff || k->sp_head < k->sp_n);
}

/* The iovecs of what is left, in stream order, at most WRITE_IOVS. */
static int gather(const redis_conn *k, struct iovec *iov) {
  const char *b = k->ac->c.obuf;
  size_t len = sdslen(k->ac->c.obuf), pos = k->woff;
  int n = 0;
  uint32_t i = k->sp_head;
  for (; i < k->sp_n && n + 3 <= WRITE_IOVS; i++) {
    const redis_splice *s = &k->sp[i];
    if (pos < s->at) iov[n++] = (struct iovec){(void *)(b + pos), s->at - pos};
    pos = s->at;
    if (s->sent < s->len)
      iov[n++] = (struct iovec){(void *)((const char *)s->p + s->sent), s->len - s->sent};
    size_t t = s->sent > s->len ? s->sent - s->len : 0;
    iov[n++] = (struct iovec){(void *)(crlf + t), sizeof(crlf) - t};
  }
  /* the buffer after the last splice, once every splice is in the list */
  if (i == k->sp_n && n < WRITE_IOVS && pos < len)
    iov[n++] = (struct iovec){(void *)(b + pos), len - pos};
  return n;
}

/* Moves the written mark over w bytes of the stream. */
static void consume(redis_conn *k, size_t w) {
  size_t len = sdslen(k->ac->c.obuf);
  while (w > 0) {
    redis_splice *s = k->sp_head < k->sp_n ? &k->sp[k->sp_head] : NULL;
    size_t take;
    if (s && k->woff < s->at) {
      take = s->at - k->woff < w ? s->at - k->woff : w;
      k->woff += take;
    } else if (s) {
      size_t left = s->len + sizeof(crlf) - s->sent;
      take = left < w ? left : w;
      s->sent += take;
      if (s->sent == s->len + sizeof(crlf)) k->sp_head++;
    } else {
      take = len - k->woff < w ? len - k->woff : w;
      k->woff += take;
    }
    w -= take;
  }
}

int redis_write_some(redis_conn *k) {
  for (;;) {
    struct iovec iov[WRITE_IOVS];
    int n = gather(k, iov);
    if (n == 0) break;
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(k->ac->c.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w <= 0) return KVA_EIO;
    consume(k, (size_t)w);
  }
  /* what is written of the buffer goes: all of it (the allocation kept),
   * or, once it is most of the buffer, with one memmove; splices move
   * with it */
  sds b = k->ac->c.obuf;
  size_t len = sdslen(b), cut = 0;
  if (k->woff == len && k->sp_head == k->sp_n) {
    sdsclear(b);
    k->woff = 0;
    k->sp_head = k->sp_n = 0;
  } else if (k->woff > len / 2) {
    cut = k->woff;
    sdsrange(b, (int)cut, -1);
    k->woff = 0;
    for (uint32_t i = k->sp_head; i < k->sp_n; i++) k->sp[i].at -= cut;
  }
  return KVA_OK;
}
