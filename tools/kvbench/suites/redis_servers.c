/*
 * redis_servers.c — redis-server processes for kvbench's redis suite
 * (redis_servers.h). A cluster is made by hand, as tests/support does:
 * servers with cluster-enabled, CLUSTER ADDSLOTSRANGE on each master, MEET,
 * then (with replicas) CLUSTER REPLICATE on each replica, then a wait for
 * cluster_state:ok everywhere and every replica in sync. The bus port is a
 * free port of its own (cluster-port), since port + 10000 may be past 65535.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/kvbench/bench.h"
#include "tools/kvbench/suites/redis_servers.h"

extern char **environ;

/* A loopback port nobody listens on now. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

/* redis-cli's first line of output for `args` on sv, into out. */
static int cli(const rb_server *sv, const char *args, char *out, size_t cap) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "redis-cli -h '%s' -p %d %s 2>/dev/null", sv->host, sv->port, args);
  return bench_capture(cmd, out, cap);
}

static int server_ping(const rb_server *sv) {
  char out[64];
  return cli(sv, "ping", out, sizeof out) == 0 && strncmp(out, "PONG", 4) == 0 ? 0 : -1;
}

static int spawn_server(rb_server *sv, char *const *argv) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  int rc = posix_spawnp(&sv->pid, "redis-server", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    fprintf(stderr, "kvbench: cannot start redis-server: %s\n", strerror(rc));
    sv->pid = 0;
    return -1;
  }
  for (int i = 0; i < 500; i++) {
    if (server_ping(sv) == 0) return 0;
    usleep(10000);
  }
  fprintf(stderr, "kvbench: redis-server on port %d did not answer PING\n", sv->port);
  return -1;
}

/* A server on a free port; cluster (o not NULL): with cluster-enabled, a
 * bus port and o's node timeout. A replicated cluster's masters send their
 * first sync at once: redis 7 waits repl-diskless-sync-delay (5 s) for more
 * replicas to share it, and a replica never synced will not fail over. */
static int start(rb_server *sv, const rb_cluster_opts *o) {
  snprintf(sv->host, sizeof sv->host, "127.0.0.1");
  snprintf(sv->dir, sizeof sv->dir, "/tmp/kvbench-redis.XXXXXX");
  if (!mkdtemp(sv->dir) || (sv->port = free_port()) < 0) return -1;
  int bus = sv->bus = o ? free_port() : 0;
  if (bus < 0) return -1;
  char port[16], busport[16], timeout[16];
  snprintf(port, sizeof port, "%d", sv->port);
  snprintf(busport, sizeof busport, "%d", bus);
  snprintf(timeout, sizeof timeout, "%d", o ? o->node_timeout_ms : 0);
  char *argv[24] = {"redis-server", "--port", port,    "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no",     "--dir", sv->dir,  "--logfile", ""};
  int n = 13;
  if (o) {
    argv[n++] = "--cluster-enabled", argv[n++] = "yes";
    argv[n++] = "--cluster-port", argv[n++] = busport;
  }
  if (o && o->node_timeout_ms > 0) argv[n++] = "--cluster-node-timeout", argv[n++] = timeout;
  if (o && o->replicas) argv[n++] = "--repl-diskless-sync-delay", argv[n++] = "0";
  argv[n] = NULL;
  return spawn_server(sv, argv);
}

int rb_server_start(rb_server *sv) {
  return start(sv, NULL);
}

void rb_server_kill(rb_server *sv) {
  if (sv->pid > 0) {
    kill(sv->pid, SIGKILL);
    waitpid(sv->pid, NULL, 0);
  }
  sv->pid = 0;
}

void rb_server_stop(rb_server *sv) {
  if (sv->pid > 0) {
    kill(sv->pid, SIGTERM);
    waitpid(sv->pid, NULL, 0);
  }
  sv->pid = 0;
  if (sv->dir[0]) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sv->dir);
    if (system(cmd) != 0) fprintf(stderr, "kvbench: could not remove %s\n", sv->dir);
  }
  sv->dir[0] = 0;
}

int rb_server_parse(rb_server *sv, const char *addr) {
  const char *colon = strrchr(addr, ':');
  if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof sv->host) return -1;
  memcpy(sv->host, addr, (size_t)(colon - addr));
  sv->host[colon - addr] = 0;
  sv->port = atoi(colon + 1);
  return sv->port > 0 && sv->port < 65536 && !strpbrk(sv->host, "'\"\\ ") ? 0 : -1;
}

int rb_cluster_state_ok(const rb_server *sv) {
  char out[4096];
  if (cli(sv, "cluster info", out, sizeof out) != 0 || !strstr(out, "cluster_state:")) return -1;
  return strstr(out, "cluster_state:ok") != NULL;
}

int rb_is_master(const rb_server *sv) {
  char out[4096];
  if (cli(sv, "info replication", out, sizeof out) != 0) return -1;
  return strstr(out, "role:master") ? 1 : strstr(out, "role:slave") ? 0 : -1;
}

/* What `info replication` says holds "field:value" (value entire). */
static int replication_says(const rb_server *sv, const char *field_value) {
  char out[4096], want[64];
  snprintf(want, sizeof want, "%s\r", field_value);
  return cli(sv, "info replication", out, sizeof out) == 0 && strstr(out, want) != NULL;
}

/* Every node ok, and with replicas every master serving its one replica
 * and every replica's link up (synced: a replica whose link never came up
 * counts its data as too old to fail over). */
static int cluster_ready(const rb_server *node, int replicas) {
  int n = RB_MASTERS * (1 + replicas);
  for (int i = 0; i < n; i++)
    if (rb_cluster_state_ok(&node[i]) != 1) return 0;
  for (int i = 0; replicas && i < RB_MASTERS; i++)
    if (!replication_says(&node[i], "connected_slaves:1") ||
        !replication_says(&node[RB_MASTERS + i], "master_link_status:up"))
      return 0;
  return 1;
}

static int ok_reply(const rb_server *sv, const char *args) {
  char out[256];
  return cli(sv, args, out, sizeof out) == 0 && strncmp(out, "OK", 2) == 0;
}

/* Slots split evenly among the masters, every node met by node 0. */
static int assign_and_meet(rb_server *node, int n) {
  char args[128];
  for (int i = 0; i < n; i++) {
    int first = 16384 * i / RB_MASTERS, last = 16384 * (i + 1) / RB_MASTERS - 1;
    snprintf(args, sizeof args, "cluster addslotsrange %d %d", first, last);
    if (i < RB_MASTERS && !ok_reply(&node[i], args)) return -1;
    snprintf(args, sizeof args, "cluster meet 127.0.0.1 %d %d", node[i].port, node[i].bus);
    if (i && !ok_reply(&node[0], args)) return -1;
  }
  return 0;
}

/* Each replica follows its master, retried for up to 10 s: REPLICATE
 * answers "Unknown node" until gossip has brought the master's id there. */
static int replicate(rb_server *node) {
  char id[128], args[192];
  for (int i = 0; i < RB_MASTERS; i++) {
    if (cli(&node[i], "cluster myid", id, sizeof id) != 0) return -1;
    id[strcspn(id, "\r\n")] = 0;
    snprintf(args, sizeof args, "cluster replicate %s", id);
    int t = 0;
    while (!ok_reply(&node[RB_MASTERS + i], args) && ++t < 1000) usleep(10000);
    if (t == 1000) {
      fprintf(stderr, "kvbench: port %d did not become a replica of port %d\n",
              node[RB_MASTERS + i].port, node[i].port);
      return -1;
    }
  }
  return 0;
}

/* Met, replicated, then up to 20 s for the cluster to agree. */
static int form(rb_server *node, int replicas) {
  if (assign_and_meet(node, RB_MASTERS * (1 + replicas)) != 0) return -1;
  if (replicas && replicate(node) != 0) return -1;
  for (int t = 0; t < 2000; t++) {
    if (cluster_ready(node, replicas)) return 0;
    usleep(10000);
  }
  fprintf(stderr, "kvbench: the cluster did not reach cluster_state:ok%s\n",
          replicas ? " with its replicas in sync" : "");
  return -1;
}

int rb_cluster_start(rb_server *node, const rb_cluster_opts *o) {
  rb_cluster_opts none = {0};
  if (!o) o = &none;
  int replicas = o->replicas ? 1 : 0;
  for (int i = 0; i < RB_MASTERS * (1 + replicas); i++)
    if (start(&node[i], o) != 0) {
      rb_cluster_stop(node);
      return -1;
    }
  if (form(node, replicas) == 0) return 0;
  rb_cluster_stop(node);
  return -1;
}

void rb_cluster_stop(rb_server *node) {
  for (int i = 0; i < RB_MAX_NODES; i++) rb_server_stop(&node[i]);
}
