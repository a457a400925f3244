/*
 * redis_servers.h — the redis-server processes of kvbench's redis suite:
 * one server, or a Redis Cluster of three masters (optionally with one
 * replica each), on free loopback ports (persistence off, files in a
 * temporary directory), or a server the user names (--redis-addr).
 */
#ifndef KVA_TOOLS_KVBENCH_REDIS_SERVERS_H
#define KVA_TOOLS_KVBENCH_REDIS_SERVERS_H

#include <sys/types.h>

#define RB_MASTERS 3
#define RB_MAX_NODES (2 * RB_MASTERS) /* the masters, then one replica each */

typedef struct rb_server {
  char host[256];
  int port;
  int bus;   /* cluster bus port, or 0 */
  pid_t pid; /* ours and running, or 0 (--redis-addr, stopped, killed) */
  char dir[64];
} rb_server;

/* How a cluster is made. */
typedef struct rb_cluster_opts {
  int replicas;        /* 0, or 1: node[RB_MASTERS + i] replicates node[i] */
  int node_timeout_ms; /* cluster-node-timeout; 0 = redis's default (15 s) */
} rb_cluster_opts;

/* A standalone server started here and answering PING: 0, or -1. */
int rb_server_start(rb_server *sv);
/* --redis-addr HOST:PORT: 0, or -1 when malformed. */
int rb_server_parse(rb_server *sv, const char *addr);
/* SIGKILL, as a crash would: no shutdown, no goodbye to the cluster. Its
 * directory stays for rb_server_stop to remove. */
void rb_server_kill(rb_server *sv);
void rb_server_stop(rb_server *sv);

/* RB_MASTERS masters (node[0..RB_MASTERS)), slots split evenly, and the
 * replicas o asks for (o NULL: none, redis's node timeout); 0 once every
 * node says cluster_state:ok and every master has its replica connected,
 * or -1 (what did start is stopped). node has RB_MAX_NODES entries, zeroed. */
int rb_cluster_start(rb_server *node, const rb_cluster_opts *o);
/* Stops every node of the RB_MAX_NODES that runs or has a directory. */
void rb_cluster_stop(rb_server *node);
/* What sv's CLUSTER INFO says: 1 cluster_state:ok, 0 another state, -1 no
 * answer. */
int rb_cluster_state_ok(const rb_server *sv);
/* What sv's INFO replication says: 1 role:master, 0 role:slave, -1 no
 * answer. */
int rb_is_master(const rb_server *sv);

#endif
