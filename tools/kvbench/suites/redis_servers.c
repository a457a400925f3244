/*
 * redis_servers.c — redis-server processes for kvbench's redis suite
 * (redis_servers.h). A cluster is made by hand, as tests/support does:
 * three servers with cluster-enabled, CLUSTER ADDSLOTSRANGE on each, MEET,
 * then a wait for cluster_state:ok. The bus port is a free port of its own
 * (cluster-port), since port + 10000 may be past 65535.
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

/* A server on a free port; cluster: with cluster-enabled and a bus port. */
static int start(rb_server *sv, int cluster) {
  snprintf(sv->host, sizeof sv->host, "127.0.0.1");
  snprintf(sv->dir, sizeof sv->dir, "/tmp/kvbench-redis.XXXXXX");
  if (!mkdtemp(sv->dir) || (sv->port = free_port()) < 0) return -1;
  int bus = sv->bus = cluster ? free_port() : 0;
  if (bus < 0) return -1;
  char port[16], busport[16];
  snprintf(port, sizeof port, "%d", sv->port);
  snprintf(busport, sizeof busport, "%d", bus);
  char *argv[] = {"redis-server",
                  "--port",
                  port,
                  "--bind",
                  "127.0.0.1",
                  "--save",
                  "",
                  "--appendonly",
                  "no",
                  "--dir",
                  sv->dir,
                  "--logfile",
                  "",
                  cluster ? "--cluster-enabled" : NULL,
                  "yes",
                  "--cluster-port",
                  busport,
                  NULL};
  return spawn_server(sv, argv);
}

int rb_server_start(rb_server *sv) {
  return start(sv, 0);
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

static int cluster_ok(const rb_server *node) {
  char out[4096];
  for (int i = 0; i < RB_MASTERS; i++)
    if (cli(&node[i], "cluster info", out, sizeof out) != 0 || !strstr(out, "cluster_state:ok"))
      return 0;
  return 1;
}

/* Slots split evenly, every node met by node 0, then up to 10 s for the
 * cluster to agree. */
static int form(rb_server *node) {
  char args[128], out[256];
  for (int i = 0; i < RB_MASTERS; i++) {
    int first = 16384 * i / RB_MASTERS, last = 16384 * (i + 1) / RB_MASTERS - 1;
    snprintf(args, sizeof args, "cluster addslotsrange %d %d", first, last);
    if (cli(&node[i], args, out, sizeof out) != 0 || strncmp(out, "OK", 2) != 0) return -1;
    snprintf(args, sizeof args, "cluster meet 127.0.0.1 %d %d", node[i].port, node[i].bus);
    if (i && (cli(&node[0], args, out, sizeof out) != 0 || strncmp(out, "OK", 2) != 0)) return -1;
  }
  for (int t = 0; t < 1000; t++) {
    if (cluster_ok(node)) return 0;
    usleep(10000);
  }
  fprintf(stderr, "kvbench: the cluster did not reach cluster_state:ok\n");
  return -1;
}

int rb_cluster_start(rb_server *node) {
  for (int i = 0; i < RB_MASTERS; i++)
    if (start(&node[i], 1) != 0) {
      rb_cluster_stop(node);
      return -1;
    }
  if (form(node) == 0) return 0;
  rb_cluster_stop(node);
  return -1;
}

void rb_cluster_stop(rb_server *node) {
  for (int i = 0; i < RB_MASTERS; i++) rb_server_stop(&node[i]);
}
