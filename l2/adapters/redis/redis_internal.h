/*
 * redis_internal.h — the redis adapter's state, shared by its files:
 *
 *   redis_adapter.c  the actor: dispatch, tasks and replies, STATS,
 *                    UNLOCK, stop, spawn
 *   redis_ops.c      requests as commands: EXISTS / SET / GET, their
 *                    replies, value verification, redirects
 *   redis_conn.c     node connections (`connections` per node, a key
 *                    always on the same one): hiredis event hooks, reads
 *                    and writes, the pipeline, timeouts, back-off
 *   redis_cluster.c  hash slots (CRC16), the slot map, MOVED / ASK
 *   redis_health.c   a cluster node's health: failed, bypassed, probed
 *                    with PING; the slot map re-read while one is failed
 *   redis_start.c    config, and the synchronous check at start (AUTH)
 *   redis_locks.c    client-side lookup lock counts
 *   redis_value.c    the value format's check (redis_value.h: pure)
 */
#ifndef KVA_L2_REDIS_INTERNAL_H
#define KVA_L2_REDIS_INTERNAL_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "kvact.h"
#include "l2/adapters/redis/redis.h"

#define REDIS_SLOTS 16384u
#define REDIS_NO_NODE UINT16_MAX
#define REDIS_MAX_NODES 1024u
#define REDIS_MAX_SEEDS 16u
#define REDIS_HOST_MAX 256u
#define REDIS_KEY_MAX 512u     /* namespace + ':' + the printed key */
#define REDIS_NS_MAX 256u      /* namespace bytes */
#define REDIS_MAX_REDIRECTS 5u /* MOVED / ASK hops of one command */
/* Value bytes in flight per connection (at least one command): hiredis
 * moves what is left of its output buffer to the front after every partial
 * write, so a deep buffer of big values costs a memmove per write; a few
 * MiB per connection, with several connections, keeps the server busy. */
#define REDIS_FLIGHT_BYTES (2u << 20)
#define REDIS_BACKOFF_MIN_NS 50000000ull
#define REDIS_BACKOFF_MAX_NS 2000000000ull
/* Cluster node health (redis_health.c): failures in a row that bypass a
 * node, how often a bypassed node is sent a PING, how often the slot map
 * is read again while a node that holds slots is failed, and the health
 * tick that drives both. */
#define REDIS_NODE_BYPASS_AFTER 3u
#define REDIS_PROBE_NS 200000000ull
#define REDIS_MAP_REFRESH_NS 100000000ull
#define REDIS_HEALTH_TICK_NS 50000000ull

typedef struct redis_addr {
  char host[REDIS_HOST_MAX];
  int port;
} redis_addr;

typedef struct redis_cfg {
  char name[32];
  redis_addr seeds[REDIS_MAX_SEEDS];
  uint32_t nseeds;
  bool cluster;
  char username[REDIS_HOST_MAX], password[REDIS_HOST_MAX];
  char ns[REDIS_NS_MAX + 1];
  uint32_t pipeline;    /* commands in flight per connection */
  uint32_t connections; /* connections per node */
  uint64_t timeout_ns;
  uint64_t capacity;
} redis_cfg;

enum { CMD_EXISTS = 0, CMD_SET = 1, CMD_GET = 2 };

struct redis_task;
struct redis_conn;

/* One command of a task (one key). Pooled. */
typedef struct redis_cmd {
  struct redis_task *task;
  size_t key;   /* index in the request */
  uint8_t kind; /* CMD_* */
  uint8_t redirects;
  bool asking;             /* an ASK redirect: ASKING goes first */
  uint64_t deadline;       /* set when handed to hiredis */
  uint64_t bytes;          /* value bytes it moves (pipeline accounting) */
  struct redis_conn *conn; /* where it is queued or in flight */
  struct redis_cmd *prev, *next;
} redis_cmd;

typedef struct redis_list {
  redis_cmd *head, *tail;
  size_t n;
} redis_list;

/* One request in progress. Pooled. */
typedef struct redis_task {
  uint32_t type;
  kva_actor *to;
  uint64_t tag;
  kva_l2_req *req;
  uint64_t fp;                    /* kva_layout_fingerprint (STORE, LOAD) */
  uint32_t pending;               /* commands not answered yet */
  int result;                     /* first failure, else KVA_OK */
  uint64_t stored;                /* STORE: payload bytes of the SETs that succeeded */
  uint64_t stored_keys;           /* STORE: keys of those SETs */
  struct redis_task *prev, *next; /* live list, or the free list */
} redis_task;

/* One connection of a node: a hiredis async context and its commands.
 * Every command of a key goes to the same connection of its node (the
 * key's hash picks it), so a key's commands are sent and answered in the
 * order they were queued. */
/* A large SET's payload, written from L1 after `at` bytes of the output
 * buffer (redis_write.c); `sent` counts its bytes and the CRLF after it. */
typedef struct redis_splice {
  size_t at;
  const void *p;
  size_t len, sent;
} redis_splice;

typedef struct redis_conn {
  struct redis_node *node;
  uint16_t idx;          /* in node->conns */
  redisAsyncContext *ac; /* NULL: no connection */
  size_t woff;           /* bytes of ac->c.obuf already written (redis_write.c) */
  redis_splice *sp;      /* payloads spliced into the stream, [sp_head, sp_n) pending */
  uint32_t sp_head, sp_n, sp_cap;
  uint32_t gen;      /* bumped per connection: a stale fd event is told apart */
  bool watched;      /* its fd is watched by the poller */
  int drop_result;   /* what the commands failed by a drop report */
  redis_list queue;  /* waiting for a pipeline slot, in order */
  redis_list flight; /* handed to hiredis, oldest first */
  uint64_t flight_bytes;
  bool kill;            /* AUTH was refused (or a splice failed): dropped at the next pump */
  const char *kill_why; /* NULL: AUTH refused */
  const char *reason;   /* why we drop it (NULL: hiredis's own error) */
} redis_conn;

/* A cluster node's health (redis_health.c). */
enum { NODE_OK = 0, NODE_FAILED = 1, NODE_BYPASSED = 2 };

/* One server. Never freed before the adapter stops. Its outage state
 * (back-off, the warning, its health) is the server's, shared by its
 * connections. */
typedef struct redis_node {
  struct redis *r;
  uint16_t id;
  redis_addr addr;
  uint64_t retry_at;   /* back-off: not dialled before (CLOCK_MONOTONIC ns) */
  uint64_t backoff_ns; /* the next back-off; 0 after a connect that worked */
  bool warned;         /* this outage was logged */
  /* health (cluster only; redis_health.c) */
  uint8_t state;         /* NODE_* */
  uint32_t fails;        /* failures in a row: failed dials, dropped connections */
  uint64_t failed_since; /* when state left NODE_OK */
  uint64_t outages;      /* times state left NODE_OK */
  uint64_t failed_cmds;  /* commands failed by its outages */
  uint32_t slots;        /* slots the map gives it now */
  bool probing;          /* a PING is in flight on conns[0] */
  uint64_t probe_at;     /* bypassed: the next PING not before */
  uint64_t probe_deadline;
  uint16_t nconns; /* cfg.connections */
  redis_conn conns[];
} redis_node;

typedef struct redis_lock_entry {
  kva_key key;
  uint64_t hash;
  uint32_t count;
  struct redis_lock_entry *next;
} redis_lock_entry;

typedef struct redis_locks {
  redis_lock_entry **b;
  size_t nb, nkeys;
  uint64_t total; /* sum of the counts */
} redis_locks;

typedef struct redis {
  kva_actor *self;
  bool det; /* deterministic runtime: the I/O is waited for inside receive */
  redis_cfg cfg;
  redis_node **nodes;
  uint16_t nnodes;
  uint16_t slots[REDIS_SLOTS]; /* cluster: slot -> node id (REDIS_NO_NODE: ask a seed) */
  bool refreshing;             /* a CLUSTER SLOTS is in flight */
  bool map_stale;              /* a node was lost: read the map again */
  redis_conn *refresh_conn;    /* where the CLUSTER SLOTS is in flight */
  uint32_t refresh_gen;        /* of that connection */
  uint64_t refresh_deadline;   /* dropped when unanswered by then */
  uint64_t map_next;           /* a node is failed: the map is read again at */
  uint64_t map_at;             /* the last map applied (CLOCK_MONOTONIC ns; 0: none) */
  uint32_t nfailed;            /* nodes whose state is not NODE_OK */
  int health_tick;             /* the health timer id, or -1 */
  char shown[320];             /* the label kvinspect shows now */
  redis_locks locks;
  redis_task *live, *free_tasks;
  redis_cmd *free_cmds;
  int tick;     /* the timeout timer id, or -1 */
  uint64_t seq; /* header sequence numbers */
  kva_l2_stats stats;
  bool warned_value; /* a bad value was logged (once per adapter) */
  bool warned_error; /* an error reply was logged (once per adapter) */
  char *scratch;     /* SET: the formatted command */
  size_t scratch_cap;
} redis;

/* redis_adapter.c */
void redis_cmd_put(redis *r, redis_cmd *c);
/* A task's command is answered: result < 0 fails the task (the first
 * failure wins); the last answer sends the reply. */
void redis_task_step(redis *r, redis_task *t, int result);

/* redis_ops.c */
/* Commands of a request, queued on their nodes; false when out of memory
 * (then nothing was queued). */
bool redis_task_start(redis *r, redis_task *t);
/* Hands c to hiredis on its connection; false when hiredis refused it. */
bool redis_cmd_send(redis *r, redis_conn *k, redis_cmd *c);

/* redis_conn.c */
redis_node *redis_node_get(redis *r, const char *host, int port); /* NULL when full / ENOMEM */
/* Queues c on the connection of n that its key always uses. */
void redis_node_enqueue(redis_node *n, redis_cmd *c);
/* A command left its connection's flight list (answered or failed). */
void redis_flight_done(redis_conn *k, redis_cmd *c);
/* A non-blocking dial of k; AUTH goes first in the pipeline. False when
 * it failed at once (the back-off has started). */
bool redis_conn_dial(redis_conn *k);
/* Drops k: every command on it fails with `result`. */
void redis_conn_drop(redis_conn *k, int result, const char *reason);
/* A connection of n that is up, or NULL. */
redis_conn *redis_node_connected(redis_node *n);
/* After every message: connects, hands queued commands to hiredis up to
 * the pipeline, writes; fails what cannot go (back-off). Deterministic
 * mode waits here until nothing is in flight. */
void redis_pump(redis *r);
void redis_on_fd(redis *r, const kva_msg *msg);
void redis_on_tick(redis *r);
/* Drops every connection and fails every queued command (on_stop). */
void redis_nodes_close(redis *r, int result);
void redis_nodes_free(redis *r);
/* hiredis writes with write(2): a peer that is gone raises SIGPIPE, whose
 * default action kills the process. A library must not change the
 * process's disposition. The runtime's own threads keep SIGPIPE blocked
 * (actors/thread.c); any other thread (deterministic mode runs actors on
 * the caller's) blocks it around our hiredis calls and takes back a
 * SIGPIPE they raised (one it had pending before stays pending). */
typedef struct redis_sigpipe {
  sigset_t old;
  bool pending_before;
  bool skip; /* on the runtime's own threads SIGPIPE is blocked already */
} redis_sigpipe;
void redis_sigpipe_block(redis_sigpipe *g);
void redis_sigpipe_restore(redis_sigpipe *g);

/* redis_health.c */
uint64_t redis_now(void); /* CLOCK_MONOTONIC ns */
/* A failure of n: a dial that failed, a connection dropped by an error or
 * a timeout (not a close by the server, nor our stop). */
void redis_node_failed(redis_node *n, const char *why);
/* n answered a command (any reply): it is healthy again. */
void redis_node_ok(redis_node *n);
static inline void redis_node_answered(redis_node *n) {
  if (n->state != NODE_OK) redis_node_ok(n);
}
/* What a command fails with when its node cannot take it: KVA_EUNAVAIL
 * for a cluster (its other nodes go on), `single` for one server. */
int redis_node_down_result(const redis *r, int single);
/* KVA_L2_NODES: every node's health, and the map's age, into req. A
 * single server is FAILED while its outage lasts (logged, not answered
 * since), else OK. */
void redis_nodes_report(const redis *r, kva_l2_req *req);
/* Cluster: the nodes' health as kvinspect shows the adapter: label
 * "2/3 ok; byp host:port" (the first node not OK: byp or fail), gauges failed_cmds
 * (all nodes'), failed, bypassed, map_age_ms. On the health tick. */
void redis_health_show(redis *r);
/* After every message (redis_pump), at most every few ms: PINGs to
 * bypassed nodes, probe timeouts, the slot map read again while a node
 * that holds slots is failed. */
void redis_health_pump(redis *r, uint64_t now);

/* redis_cluster.c */
/* Gives slot s to node id (REDIS_NO_NODE: none), keeping slot counts. */
void redis_slot_set(redis *r, uint16_t s, uint16_t id);
/* The node a key goes to: its slot's (cluster) or the first seed's. */
redis_node *redis_route(redis *r, const char *key, size_t len);
/* Applies a CLUSTER SLOTS reply to the map; `from` names hosts the reply
 * leaves empty. KVA_OK or KVA_EIO (not a slots reply). */
int redis_slots_apply(redis *r, const redisReply *reply, const redis_addr *from);
/* "MOVED 3999 127.0.0.1:6381" / "ASK ...": true, with the slot and
 * address, for a redirect. An empty endpoint ("MOVED 3999 :6381", Redis
 * 7's unknown endpoint) is `from`'s host, the node that answered. */
bool redis_redirect_parse(const char *s, size_t len, const redis_addr *from, bool *ask,
                          uint16_t *slot, redis_addr *to);
/* Asks n for CLUSTER SLOTS (at most one in flight). */
void redis_slots_refresh(redis *r, redis_node *n);

/* redis_start.c */
const char *redis_read_config(redis_cfg *c, const kva_config_node *cfg);
/* Dials the seeds synchronously: KVA_OK (reachable, or unreachable with a
 * warning), KVA_ECONFIG with err set (AUTH refused, not a cluster). */
int redis_check_start(redis *r, char *err, size_t errlen);
/* "AUTH [user] pass" as argv; 0 when no password is set. */
int redis_auth_argv(const redis_cfg *c, const char **argv, size_t *lens);

/* redis_locks.c */
bool redis_lock(redis_locks *l, const kva_key *k); /* false on ENOMEM */
void redis_unlock(redis_locks *l, const kva_key *k);
bool redis_locked(const redis_locks *l, const kva_key *k);
void redis_locks_free(redis_locks *l);

/* redis_write.c: the connection's writer. Once connected, the only
 * writer of ac->c.obuf's bytes. splice: p[0..len) and CRLF follow what the
 * buffer holds now (false: out of memory); some: writes until done or the
 * kernel takes no more (KVA_EIO: the connection is broken); pending: bytes
 * wait; reset at a new connection, free at the adapter's stop. */
bool redis_write_splice(redis_conn *k, const void *p, size_t len);
int redis_write_some(redis_conn *k);
bool redis_write_pending(const redis_conn *k);
void redis_write_reset(redis_conn *k);
void redis_write_free(redis_conn *k);

#endif
