/*
 * server_internal.h — what the server's files share:
 *
 *   server.c    start/stop, the socket file, the list of sessions
 *   listener.c  the listener actor (accept)
 *   admission.c who may connect: peer credentials against the allowed
 *               uids and groups
 *   session*.c  one actor per connection: frames, requests, its ledger
 *               (session_internal.h)
 *   control.c   the control threads: calls that span the tiers
 *   ledger.c    the locks of one connection
 *   metrics.c   the Prometheus endpoint
 */
#ifndef KVA_SERVER_SERVER_INTERNAL_H
#define KVA_SERVER_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/msg_ids.h"
#include "kvact.h"
#include "server/metrics.h"
#include "server/server.h"

enum {
  SRV_ACCEPT_START = MSG_SERVER_BASE, /* to the listener: watch the socket */
  SRV_SESSION_START,                  /* to a session: watch its connection */
  SRV_CLOSE,                          /* to a session: end (server stop) */
  SRV_CTL_JOB,                        /* to a control thread: payload ctl_job * */
  SRV_CTL_DONE,                       /* to a session: the job of tag is done */
  SRV_CTL_QUIT,                       /* to a control thread: exit */
};
MSG_RANGE_CHECK(SRV_ACCEPT_START, SRV_CTL_QUIT, MSG_SERVER_BASE, MSG_SERVER_END, "the server's");

typedef struct srv_session srv_session;

/* A call the control threads make for a session through the facade. */
typedef struct ctl_job {
  kva_storage *s;
  uint16_t type; /* P_* */
  const kva_key *keys;
  uint32_t n, flag;
  int32_t timeout_ms;
  uint32_t report_len;
  char tier[32];
  int result;
  kva_tier_hits lookup;
  kva_storage_stats stats;
  kva_l2_tier_stats tier_stats;
  kva_l2_tier_keys tier_keys;
  kva_memcheck_report memcheck; /* MEMCHECK (flag: callers_only) */
  char *text;                   /* MEMCHECK: report_len bytes */
  kva_l2_node_stats *nodes;     /* TIER_NODES: cap entries (zeroed) */
  uint32_t cap;
  size_t nodes_n; /* TIER_NODES: out */
  double map_age_s;
} ctl_job;

#define CTL_THREADS 2 /* 0: lookups; 1: the rest (a flush may take long) */

struct server {
  kva_runtime *rt;
  kva_storage *s;
  char path[108];
  int listen_fd;
  bool sock_bound;    /* path is a socket file this daemon made: */
  dev_t sock_dev;     /* its device */
  ino_t sock_ino;     /* and inode (removed at stop only while they match) */
  uint32_t accepting; /* atomic */
  uid_t uid;          /* the daemon's: always admitted */
  uid_t *allowed;     /* server.allowed_uids */
  size_t nallowed;
  gid_t *groups; /* server.allowed_groups, resolved at start */
  size_t ngroups;
  uint32_t max_clients;
  uint32_t hello_timeout_ms;
  uint32_t nidle; /* of the sessions, those without a hello yet (under lock) */
  kva_actor *listener;
  pthread_t ctl[CTL_THREADS];
  kva_port *ctl_port[CTL_THREADS];
  int nctl;
  metrics *metrics;
  latency_hist prefetch_latency;
  pthread_mutex_t lock; /* sessions list */
  srv_session *sessions;
  uint32_t nsessions; /* live, zombies included (changed under lock; atomic reads) */
  uint64_t next_id;
};

/* listener.c */
kva_actor *listener_spawn(server *sv);
/* admission.c: reads server.allowed_uids and resolves the names of
 * server.allowed_groups (KVA_ECONFIG, logged, for a name no group has);
 * whether an accepted peer (fd, its SO_PEERCRED) is admitted, once per
 * connection; frees what admission_load read. */
struct ucred;
int admission_load(server *sv, const kva_config *c);
bool admission_allows(const server *sv, int fd, const struct ucred *cred);
void admission_free(server *sv);
/* session.c: spawns the session of an accepted connection (fd is its). */
int session_spawn(server *sv, int fd, pid_t pid, uid_t uid);
void session_close(srv_session *ss); /* from any thread: SRV_CLOSE */
void session_describe(const srv_session *ss, metrics_client *out);
/* control.c */
int control_start(server *sv);
void control_stop(server *sv);
/* Hands job to control thread t; its SRV_CTL_DONE goes to `to` with tag. */
int control_submit(server *sv, int t, ctl_job *job, kva_actor *to, uint64_t tag);
/* The sessions list (under sv->lock). */
srv_session *session_next(const srv_session *ss);
srv_session **session_next_ref(srv_session *ss);
void session_link(srv_session *ss, srv_session *next);
/* server.c: a session began (session_spawn), was welcomed, ended (its
 * last message; idle: it never said hello). A session is idle (counted in
 * sv->nidle) from its start to its welcome, or to its end without one.
 * server_session_count: the sessions and, in *idle, the idle ones, both
 * at one instant. */
void server_session_added(server *sv, srv_session *ss);
void server_session_welcomed(server *sv);
void server_session_gone(server *sv, srv_session *ss, bool idle);
uint32_t server_session_count(server *sv, uint32_t *idle);
/* Writes a P_REFUSED frame to a fresh connection, best effort. */
void server_refuse(int fd, int code, const char *msg);

#endif
