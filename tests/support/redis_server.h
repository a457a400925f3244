/*
 * redis_server.h — real redis-server processes for the redis suites: one
 * server on a free loopback port, or a 3-master Redis Cluster, started in
 * a directory under $TEST_TMPDIR, killed and restarted at will, always
 * stopped at the end (atexit, and PR_SET_PDEATHSIG should the test process
 * be killed), plus a blocking hiredis client to poke them from the test.
 */
#ifndef KVA_TESTS_REDIS_SERVER_H
#define KVA_TESTS_REDIS_SERVER_H

#include <stdbool.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#define RS_MAX_ARGS 16

typedef struct rs_server {
  int port;
  pid_t pid; /* 0: not running */
  char dir[512];
  int nextra;
  const char *extra[RS_MAX_ARGS]; /* more redis-server arguments (static strings) */
} rs_server;

/* Starts redis-server on a free port (both it and port + 10000, the
 * cluster bus, free) with the NULL-terminated extra arguments, and waits
 * until it answers PING. Fails the test when it does not come up. */
void rs_start(rs_server *s, ...);
/* SIGKILL and reap (no save: the data is gone). */
void rs_kill(rs_server *s);
/* Starts it again on the same port with the same arguments. */
void rs_restart(rs_server *s);
void rs_stop(rs_server *s);

/* One command on a fresh blocking connection (AUTH first when password is
 * not NULL); the reply (freeReplyObject it), NULL when the server does not
 * answer. Binary-safe argv form and printf form. */
redisReply *rs_cmd_argv(int port, const char *password, int argc, const char **argv,
                        const size_t *lens);
redisReply *rs_cmd(int port, const char *fmt, ...);
/* rs_cmd, asserting a status or integer reply; the reply is freed. */
void rs_ok(int port, const char *fmt, ...);

/* A 3-master cluster (no replicas): slots split evenly, every node aware of
 * the others and reporting cluster_state:ok. */
typedef struct rs_cluster {
  rs_server node[3];
  char id[3][48]; /* node ids */
} rs_cluster;
void rs_cluster_start(rs_cluster *c);
void rs_cluster_stop(rs_cluster *c);
/* Index of the node that serves slot, from node 0's CLUSTER SLOTS. */
int rs_cluster_owner(const rs_cluster *c, int slot);
/* Waits (5 s) until every node agrees that slot belongs to node `owner`. */
void rs_cluster_wait_owner(const rs_cluster *c, int slot, int owner);
/* Keys in a node: DBSIZE. */
long long rs_dbsize(int port);

/* 3 masters (node[0..2], slots split evenly) each with one replica
 * (node[3 + i] replicates node[i]), started with cluster-node-timeout
 * node_timeout_ms and cluster-require-full-coverage as asked; returns once
 * every node reports cluster_state:ok and knows all six, and every replica
 * is connected and caught up. */
typedef struct rs_cluster6 {
  rs_server node[6];
  char id[6][48];
} rs_cluster6;
void rs_cluster6_start(rs_cluster6 *c, const char *node_timeout_ms, bool full_coverage);
void rs_cluster6_stop(rs_cluster6 *c);
/* Waits (10 s) until each live master's replica has all it wrote. */
void rs_cluster6_wait_replicated(const rs_cluster6 *c);
/* CLUSTER INFO of port says cluster_state:ok; INFO replication says
 * role:master. */
bool rs_cluster_state_ok(int port);
bool rs_is_master(int port);

#endif
