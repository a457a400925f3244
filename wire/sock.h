/*
 * sock.h — frames over a nonblocking Unix stream socket, for the client's
 * connection actor and the daemon's sessions: an input buffer filled until
 * EAGAIN and cut into frames, an output buffer flushed until EAGAIN, and a
 * file descriptor passed with SCM_RIGHTS (the pool's memfd).
 */
#ifndef KVA_WIRE_SOCK_H
#define KVA_WIRE_SOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include "wire/protocol.h"

typedef struct wire_buf {
  uint8_t *b;
  size_t off, len, cap; /* bytes b[off, len) are pending */
} wire_buf;

/* The address of the Unix socket at path: KVA_OK, or KVA_EINVAL when the
 * path does not fit sun_path. */
int wire_unix_addr(const char *path, struct sockaddr_un *a);

void wire_buf_free(wire_buf *w);
/* Room for n more bytes at the end (compacting or growing; at most limit
 * pending bytes in all): where to write them, or NULL. wire_commit adds
 * the n bytes written there. */
uint8_t *wire_reserve(wire_buf *w, size_t n, size_t limit);
void wire_commit(wire_buf *w, size_t n);
/* Writes w's pending bytes (fd, if >= 0, passed with the first byte):
 * 0 when all are written, 1 when the socket is full (the rest stays),
 * or -errno. */
int wire_flush(int sock, wire_buf *w, int fd);
/* Reads what the socket has into w, growing it to PROTO_HDR_BYTES +
 * PROTO_MAX_PAYLOAD at most: 1 = nothing more for now (EAGAIN), 2 = w is
 * full (take its frames, then fill again), 0 = the peer closed, -errno on
 * an error. A descriptor passed with the bytes goes
 * to *fd_in (one kept; closed if *fd_in already held one). */
int wire_fill(int sock, wire_buf *w, int *fd_in);
/* The next complete frame of w: PROTO_OK with *h and *payload (valid until
 * wire_next is called again or w changes), 1 when the frame is not all
 * there yet, or the header's PROTO_E* error (why set). The frame is
 * consumed by the call. */
int wire_next(wire_buf *w, proto_hdr *h, const uint8_t **payload, char *why, size_t whylen);
/* After wire_next's PROTO_EVERSION for header h: a P_REFUSED of another
 * version (its layout is the same in every version) whose payload is at
 * most 8 + PROTO_MAX_TEXT bytes is taken as wire_next takes a frame
 * (PROTO_OK with *payload, or 1 while not all there); any other frame
 * stays PROTO_EVERSION. */
int wire_next_refusal(wire_buf *w, const proto_hdr *h, const uint8_t **payload);

#endif
