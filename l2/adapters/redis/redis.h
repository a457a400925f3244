/*
 * redis.h — the Redis L2 adapter ("redis"): one hiredis async context per
 * server (node), owned by the adapter actor and driven by the runtime's
 * poller; pipelined commands; one server or a Redis Cluster.
 *
 * Keys: "<namespace>:<model>@<kv_rank hex>@<group>@<hash hex>" (kvact.h's
 * kva_key_format behind the namespace), sent with lengths (binary-safe).
 * Values: the 168-byte object header the disk tier also uses (l2/adapters/object_header.h: magic,
 * version, the full key, layout fingerprint, payload length, xxh3-64 of the
 * payload, the header's own checksum) followed by the payload. A value
 * whose header does not match the key, layout and length asked for, or
 * whose payload checksum is wrong, or a reply of another type, is a miss:
 * never served.
 *
 *   STORE            one SET per key; all keys OK = KVA_OK, else the task
 *                    fails (KVA_EIO, KVA_ETIMEDOUT); KVA_EAGAIN at once when
 *                    a key of the task is lookup-locked here
 *   LOOKUP_AND_LOCK  one EXISTS per key; found keys are locked client-side
 *                    (counts in this adapter); a command that failed makes
 *                    the result KVA_EIO / KVA_ETIMEDOUT (bits still say what
 *                    was locked)
 *   LOAD             one GET per key, verified before its bytes reach L1;
 *                    result KVA_EIO / KVA_ETIMEDOUT when a command failed
 *   UNLOCK           local: one lock per key released, at once
 *
 * Failures (refused, reset, timeout past timeout_ms): the connection is
 * dropped and every command on it fails. A connection that worked and was
 * closed is dialled again at the next command; a failed dial, a timeout or
 * a refused AUTH start a back-off (50 ms doubling to 2 s; reset by a
 * connect that works) during which the node's commands fail at once.
 * Failed results feed the tier's health, so the tier is bypassed and
 * probed until it answers. In cluster mode a lost node makes the adapter
 * read CLUSTER SLOTS again from a node still connected (failover).
 *
 * Start: the adapter dials the first reachable address synchronously.
 * A refused AUTH (or NOAUTH without a password) fails kva_runtime_start
 * with a message naming the address and the server's words; an unreachable
 * server is only a warning: the tier starts failing and recovers when the
 * server comes. Cluster mode reads CLUSTER SLOTS there (else learns the
 * map from MOVED replies).
 *
 * Stats: objects and bytes count the SETs that succeeded since start (the
 * server may hold more or fewer); capacity_bytes is the configured value,
 * not enforced (the server's maxmemory governs).
 */
#ifndef KVA_L2_REDIS_H
#define KVA_L2_REDIS_H

#include <stddef.h>

#include "kvact.h"

/* The factory registered as "redis" (kva_l2_factory). */
kva_actor *redis_adapter_spawn(kva_runtime *rt, const kva_config_node *cfg, char *err,
                               size_t errlen);

#endif
