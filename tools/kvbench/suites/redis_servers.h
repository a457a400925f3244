/*
 * redis_servers.h — the redis-server processes of kvbench's redis suite:
 * one server, or a Redis Cluster of three masters, on free loopback ports
 * (persistence off, files in a temporary directory), or a server the user
 * names (--redis-addr).
 */
#ifndef KVA_TOOLS_KVBENCH_REDIS_SERVERS_H
#define KVA_TOOLS_KVBENCH_REDIS_SERVERS_H

#include <sys/types.h>

#define RB_MASTERS 3

typedef struct rb_server {
  char host[256];
  int port;
  int bus;   /* cluster bus port, or 0 */
  pid_t pid; /* ours, or 0 for --redis-addr */
  char dir[64];
} rb_server;

/* A standalone server started here and answering PING: 0, or -1. */
int rb_server_start(rb_server *sv);
/* --redis-addr HOST:PORT: 0, or -1 when malformed. */
int rb_server_parse(rb_server *sv, const char *addr);
void rb_server_stop(rb_server *sv);

/* RB_MASTERS masters, slots split evenly, cluster_state:ok on each: 0, or
 * -1 (what did start is stopped). */
int rb_cluster_start(rb_server *node);
void rb_cluster_stop(rb_server *node);

#endif
