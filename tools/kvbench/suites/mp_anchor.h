/*
 * mp_anchor.h — the anchors of kvbench --suite mp: what a round trip
 * between two processes costs without kvact, over the transports kvactd
 * could use, with the message sizes of kvact's wire protocol.
 *
 *  - unix: blocking send/recv on an AF_UNIX SOCK_STREAM socketpair between
 *    this process and a forked server process that answers every request
 *    (the limit for kvactd's socket: no framing, no decoding, no actor);
 *  - zmq: libzmq REQ/REP over ipc:// between this process and a forked
 *    server process (LMCache's transport), zmq_send/zmq_recv on fixed
 *    buffers.
 *
 * Sizes are those of wire/protocol.h frames (24-byte header, keys of 105
 * bytes, a layout of 228): a single-key P_PREFETCH request and its reply;
 * a 64-key request of "u32 n, keys" (FINISH_WRITE, DELETE, ...) and a
 * reply of "i32 result, u32 n, i32 status[n]".
 */
#ifndef KVA_TOOLS_MP_ANCHOR_H
#define KVA_TOOLS_MP_ANCHOR_H

#include <stddef.h>

#include "tools/kvbench/suites/mp_proc.h"

#define MP_HDR_BYTES 24u
#define MP_KEY_BYTES 105u
#define MP_LAYOUT_BYTES 228u
/* P_PREFETCH of one key: u32 n, u32 readers, u32 has_layout, layout, key */
#define MP_RTT_REQ_BYTES (MP_HDR_BYTES + 12u + MP_LAYOUT_BYTES + MP_KEY_BYTES)
/* its reply: i32 result, u64 hits */
#define MP_RTT_REP_BYTES (MP_HDR_BYTES + 12u)
#define MP_BATCH_KEYS 64u
#define MP_BATCH_REQ_BYTES (MP_HDR_BYTES + 4u + MP_BATCH_KEYS * MP_KEY_BYTES)
#define MP_BATCH_REP_BYTES (MP_HDR_BYTES + 8u + MP_BATCH_KEYS * 4u)
/* Round trips before the clock starts (connections, caches, page faults). */
#define MP_WARMUP 1000u

/* Round trips of MP_RTT_REQ_BYTES / MP_RTT_REP_BYTES, `iters` of them
 * timed one by one after MP_WARMUP: 0, or -1 when a socket, fork or
 * server failed (a message on stderr). */
int anchor_unix_rtt(size_t iters, rtt_result *out);
int anchor_zmq_rtt(size_t iters, rtt_result *out);

/* `clients` client processes at once, each with its own server process,
 * `iters` round trips of MP_BATCH_REQ_BYTES / MP_BATCH_REP_BYTES each,
 * all started together after their warm-up: key-ops per second in total
 * (MP_BATCH_KEYS per round trip). 0 or -1 as above. */
int anchor_unix_batch(int clients, size_t iters, double *keyops_per_s);

#endif
