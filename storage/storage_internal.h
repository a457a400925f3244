/*
 * storage_internal.h — the storage facade: the engine-facing calls of
 * kvact.h, built on ports and messages to the storage actors.
 *
 *   lifecycle.c     start/shutdown with the runtime
 *   lifecycle_l2.c  start and drain of the L2 tiers and controllers
 *   sessions.c      the session pool, the handle table, request/reply
 *   calls.c         write, delete, touch, clear, memcheck, stats
 *   prefetch.c      prefetch handles and reads
 *   tiers.c         lookup, pins, freeze, bypass, flush, l2_contains
 *   chunk_keys.c    kva_chunk_keys
 *   gpu_link.c      what gpu/ needs of the facade (gpu/storage_link.h)
 */
#ifndef KVA_STORAGE_INTERNAL_H
#define KVA_STORAGE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvact.h"
#include "l1/l1_manager.h"
#include "l2/prober.h"
#include "l2/prefill.h"
#include "l2/tiers.h"

/* A reply port plus what an asynchronous request needs to outlive the call
 * that started it. Sessions are pooled: a blocking call borrows one for its
 * duration, a prefetch holds one until its result is read. */
typedef struct session {
  kva_storage *s;
  kva_port *port;
  uint64_t tag;      /* tag of the request in flight */
  uint32_t gen;      /* bumped at every release: stale handles are refused */
  uint32_t state;    /* SESSION_* (atomic) */
  uint32_t index;    /* in the process-wide handle table (storage.c) */
  l1_req req;        /* a prefetch's request */
  kva_layout layout; /* a prefetch's copy of its layout */
  kva_key *keys;     /* a prefetch's copy of its keys */
  size_t keys_cap;
  bool warm; /* a prefetch's KVA_PREFETCH_WARM: its hits are released as it is read */
  struct session *next_free;
  struct session *next_all;
} session;

enum { SESSION_FREE = 0, SESSION_CALL = 1, SESSION_PREFETCH = 2 };

#define MAX_SESSIONS 16384u /* blocking calls + unread prefetches at once */

struct kva_storage {
  kva_runtime *rt;
  l1_manager *l1m;
  kva_actor *l1, *evictor;
  l2_tiers tiers;                /* n = 0: no L2 */
  kva_actor *store, *prefetcher; /* the controllers; NULL without L2 */
  prober *prober;
  prefill_rates prefill; /* the engines' prefill rates, for the load plan */
  double plan_margin;    /* config load_plan.margin */
  uint32_t closed;       /* atomic: shutdown began */
  uint32_t inflight;     /* atomic: calls between their closed check and reply */
  pthread_mutex_t lock;  /* the session lists */
  session *free_head, *free_tail, *all;
  uint32_t nsessions;
  struct client_conn *client; /* client.socket: the daemon's storage, through l1 */
};

/* The session of a handle's table index, or NULL (any index is safe). */
session *session_at(uint32_t index);
/* Takes a session out of the table (when it is freed). */
void session_forget(session *ss);
/* Borrow/return a session; NULL when MAX_SESSIONS are in use or on ENOMEM. */
session *session_take(kva_storage *s);
void session_put(session *ss);
/* Waits on the session's port for the reply to its request in flight
 * (tag ss->tag); KVA_ETIMEDOUT after timeout_ms (< 0: forever). */
int session_await(session *ss, int timeout_ms);
/* Enter/leave a call: KVA_ESHUTDOWN once shutdown began. */
int storage_enter(kva_storage *s);
void storage_leave(kva_storage *s);
/* Runs fn(s, ss, arg) as a call (KVA_ESHUTDOWN once shutdown began) with a
 * borrowed session (KVA_EAGAIN when none is left). */
int storage_with_session(kva_storage *s, int (*fn)(kva_storage *, session *, void *), void *arg);
/* Sends a request to the L1 manager and waits for its reply. */
int storage_call(kva_storage *s, uint32_t type, l1_req *r);
/* Sends `type` with payload &ptr to `to` from the session's port, tag
 * ss->tag (to a client's connection, by client_conn_send). */
int session_send(session *ss, kva_actor *to, uint32_t type, const void *ptr);
/* Sends `type` with payload &ptr to `to` from the session's port and waits
 * for the reply (any type, same tag). */
int session_ask(session *ss, kva_actor *to, uint32_t type, const void *ptr, int timeout_ms);
/* tiers.c: KVA_L2_STATS of tier t into *out; KVA_EIO when the
 * adapter answers with an error. */
int storage_tier_stats(kva_storage *s, session *ss, uint32_t t, kva_l2_stats *out);
/* lifecycle_l2.c: spawn adapters, controllers and prober after L1; at
 * shutdown, drain the controllers and release the read locks of prefetches
 * nobody read. */
int storage_start_l2(kva_storage *s, const kva_config *c);
void storage_drain(kva_storage *s);
/* A call across the daemon's tiers (client mode): one CL_CALL to the
 * connection; returns the call's result. */
struct client_call;
int storage_remote(kva_storage *s, struct client_call *c);
/* Validation shared by the calls that take keys: KVA_EINVAL for a NULL
 * storage or array, n = 0, an invalid key, or a key named twice (logged
 * with `call`'s name and both indexes: the one rule for repeated keys,
 * checked before anything is sent, so in-process and client storages
 * refuse the same calls); KVA_ENOMEM when the repeat check cannot
 * allocate. */
int storage_check_keys(const kva_storage *s, const kva_key *k, size_t n, const char *call);

#endif
