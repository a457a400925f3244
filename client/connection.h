/*
 * connection.h — a client's connection to kvactd (client.socket), which
 * speaks the L1 manager's messages (l1/l1_manager.h).
 *
 * The storage facade of a client process sends its L1 requests here
 * instead of to an L1 manager: the same l1_req payload, answered with
 * L1_REPLY and the same tag once the daemon's reply has been written into
 * the request. The facade calls client_conn_send from the caller's thread
 * (the frame goes out at once); the copy actors of kva_kv_* send the same
 * messages to client_conn_actor. Calls that span
 * the daemon's tiers (lookup, flush, bypass, tier stats ...) come as
 * CL_CALL with a client_call. Every request is answered within
 * client.timeout_ms: a daemon that is down (never started, killed,
 * restarting) gets KVA_ESHUTDOWN at once, or misses for prefetches and
 * lookups; one that does not answer in time, KVA_ETIMEDOUT (misses for
 * prefetches and lookups), and whatever its late reply locked is released.
 * The actor reconnects by itself with back-off and maps each pool the
 * daemon passes; a pool of an earlier connection stays mapped until the
 * runtime shuts down, so buffers handed out from it never dangle.
 */
#ifndef KVA_CLIENT_CONNECTION_H
#define KVA_CLIENT_CONNECTION_H

#include <stdint.h>

#include "common/msg_ids.h"
#include "kvact.h"
#include "wire/protocol.h"

enum {
  CL_CALL = MSG_CLIENT_BASE, /* payload client_call *; reply L1_REPLY, same tag */
  CL_CONNECT,                /* to itself: (re)connect now */
};
MSG_RANGE_CHECK(CL_CALL, CL_CONNECT, MSG_CLIENT_BASE, MSG_SERVER_BASE, "the client connection's");

/* A call across the daemon's tiers; lives with the sender until the reply. */
typedef struct client_call {
  proto_req req;                 /* in: type and arguments */
  int result;                    /* out: the call's return value */
  kva_tier_hits *lookup;         /* out: LOOKUP */
  kva_l2_tier_stats *tier_stats; /* out: TIER_STATS */
  kva_l2_tier_keys *tier_keys;   /* out: TIER_KEYS */
  kva_l2_node_stats *nodes;      /* out: TIER_NODES, req.cap of them (NULL when 0) */
  uint32_t nodes_n;              /* out: TIER_NODES, the tier's servers */
  double map_age_s;              /* out: TIER_NODES */
} client_call;

typedef struct client_conn client_conn;

/* Spawns the connection actor for socket path (its first connect is
 * under way when this returns). NULL when out of memory or path is too
 * long for a Unix socket address. */
client_conn *client_conn_spawn(kva_runtime *rt, const char *path, int timeout_ms);
kva_actor *client_conn_actor(client_conn *c);
/* What a message of type with payload (l1_req * or client_call *) to the
 * actor does, from any thread: the request goes to the daemon, and
 * L1_REPLY with tag comes to from (a port or an actor) exactly once.
 * Always KVA_OK (a refused request is answered with its error). */
int client_conn_send(client_conn *c, uint32_t type, const void *payload, kva_actor *from,
                     uint64_t tag);
/* 1 while connected and welcomed by a daemon (a hint: it can change at
 * once). */
int client_conn_up(const client_conn *c);

#endif
