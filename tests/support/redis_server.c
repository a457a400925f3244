/*
 * redis_server.c — redis-server processes for the redis suites (see
 * redis_server.h).
 */
#include "tests/support/redis_server.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RUNNING 16

static pid_t running[MAX_RUNNING];
static bool atexit_set;

static void sleep_ms(unsigned ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Whatever a failed test left running goes with the process. */
static void kill_all(void) {
  for (int i = 0; i < MAX_RUNNING; i++)
    if (running[i] > 0) {
      kill(running[i], SIGKILL);
      waitpid(running[i], NULL, 0);
      running[i] = 0;
    }
}

static void track(pid_t pid, bool add) {
  if (!atexit_set) atexit(kill_all);
  atexit_set = true;
  for (int i = 0; i < MAX_RUNNING; i++)
    if (add ? running[i] == 0 : running[i] == pid) {
      running[i] = add ? pid : 0;
      return;
    }
}

static bool port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
  if (fd >= 0) close(fd);
  return ok;
}

/* A port in [20000, 30000) whose cluster bus port (+10000) is free too. */
static int free_port(void) {
  static unsigned seed;
  if (!seed) seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
  for (int tries = 0; tries < 1000; tries++) {
    int port = 20000 + (int)(rand_r(&seed) % 10000);
    if (port_free(port) && port_free(port + 10000)) return port;
  }
  ck_abort_msg("no free port pair for redis-server");
  return -1;
}

static void exec_server(const rs_server *s) {
  char port[16], log[600];
  snprintf(port, sizeof(port), "%d", s->port);
  snprintf(log, sizeof(log), "%s/redis.log", s->dir);
  const char *argv[32 + RS_MAX_ARGS] = {"redis-server",
                                        "--port",
                                        port,
                                        "--bind",
                                        "127.0.0.1",
                                        "--save",
                                        "",
                                        "--appendonly",
                                        "no",
                                        "--daemonize",
                                        "no",
                                        "--dir",
                                        s->dir,
                                        "--logfile",
                                        log,
                                        "--protected-mode",
                                        "no"};
  int n = 17;
  for (int i = 0; i < s->nextra; i++) argv[n++] = s->extra[i];
  argv[n] = NULL;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  execvp("redis-server", (char *const *)argv);
  execv("/usr/bin/redis-server", (char *const *)argv);
  _exit(127);
}

static bool answers(int port) {
  redisReply *r = rs_cmd(port, "PING");
  bool ok = r != NULL; /* PONG, or NOAUTH from a server with a password: it is up */
  freeReplyObject(r);
  return ok;
}

static void spawn(rs_server *s) {
  mkdir(s->dir, 0700);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) exec_server(s);
  s->pid = pid;
  track(pid, true);
  for (int i = 0; i < 500; i++) {
    if (answers(s->port)) return;
    if (waitpid(pid, NULL, WNOHANG) == pid) break;
    sleep_ms(10);
  }
  ck_abort_msg("redis-server on port %d did not come up (see %s/redis.log)", s->port, s->dir);
}

void rs_start(rs_server *s, ...) {
  memset(s, 0, sizeof(*s));
  va_list ap;
  va_start(ap, s);
  for (const char *a; s->nextra < RS_MAX_ARGS && (a = va_arg(ap, const char *)) != NULL;)
    s->extra[s->nextra++] = a;
  va_end(ap);
  s->port = free_port();
  const char *tmp = getenv("TEST_TMPDIR");
  snprintf(s->dir, sizeof(s->dir), "%s/redis-%d", tmp ? tmp : "/tmp", s->port);
  spawn(s);
}

void rs_kill(rs_server *s) {
  if (s->pid <= 0) return;
  kill(s->pid, SIGKILL);
  waitpid(s->pid, NULL, 0);
  track(s->pid, false);
  s->pid = 0;
}

void rs_restart(rs_server *s) {
  rs_kill(s);
  spawn(s);
}

void rs_stop(rs_server *s) {
  rs_kill(s);
}

/* ---- a blocking client -------------------------------------------------- */

static redisContext *dial(int port, const char *password) {
  struct timeval tv = {.tv_sec = 2};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (!c || c->err) {
    redisFree(c);
    return NULL;
  }
  redisSetTimeout(c, tv);
  if (password) freeReplyObject(redisCommand(c, "AUTH %s", password));
  return c;
}

redisReply *rs_cmd_argv(int port, const char *password, int argc, const char **argv,
                        const size_t *lens) {
  redisContext *c = dial(port, password);
  if (!c) return NULL;
  redisReply *r = redisCommandArgv(c, argc, argv, lens);
  redisFree(c);
  return r;
}

redisReply *rs_cmd(int port, const char *fmt, ...) {
  redisContext *c = dial(port, NULL);
  if (!c) return NULL;
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  redisFree(c);
  return r;
}

void rs_ok(int port, const char *fmt, ...) {
  redisContext *c = dial(port, NULL);
  ck_assert_msg(c != NULL, "redis on port %d unreachable", port);
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  redisFree(c);
  ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "redis %d: %s: %s", port, fmt,
                r ? r->str : "no reply");
  freeReplyObject(r);
}

long long rs_dbsize(int port) {
  redisReply *r = rs_cmd(port, "DBSIZE");
  ck_assert_ptr_nonnull(r);
  long long n = r->integer;
  freeReplyObject(r);
  return n;
}

/* ---- a cluster ---------------------------------------------------------- */

static bool cluster_ok(int port) {
  redisReply *r = rs_cmd(port, "CLUSTER INFO");
  bool ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") &&
            strstr(r->str, "cluster_known_nodes:3");
  freeReplyObject(r);
  return ok;
}

static void node_id(int port, char *out, size_t len) {
  redisReply *r = rs_cmd(port, "CLUSTER MYID");
  ck_assert_msg(r && r->type == REDIS_REPLY_STRING, "CLUSTER MYID on %d", port);
  snprintf(out, len, "%s", r->str);
  freeReplyObject(r);
}

void rs_cluster_start(rs_cluster *c) {
  memset(c, 0, sizeof(*c));
  for (int i = 0; i < 3; i++) {
    rs_start(&c->node[i], "--cluster-enabled", "yes", "--cluster-node-timeout", "5000", NULL);
    node_id(c->node[i].port, c->id[i], sizeof(c->id[i]));
  }
  const int first[3] = {0, 5461, 10923}, last[3] = {5460, 10922, 16383};
  for (int i = 0; i < 3; i++) {
    rs_ok(c->node[i].port, "CLUSTER ADDSLOTSRANGE %d %d", first[i], last[i]);
    if (i) rs_ok(c->node[0].port, "CLUSTER MEET 127.0.0.1 %d", c->node[i].port);
  }
  for (int t = 0; t < 3000; t++) { /* 30 s: a loaded 2-core CI machine */
    if (cluster_ok(c->node[0].port) && cluster_ok(c->node[1].port) && cluster_ok(c->node[2].port))
      return;
    sleep_ms(10);
  }
  ck_abort_msg("the cluster did not reach cluster_state:ok");
}

void rs_cluster_stop(rs_cluster *c) {
  for (int i = 0; i < 3; i++) rs_stop(&c->node[i]);
}

static int owner_from(const rs_cluster *c, int port, int slot) {
  redisReply *r = rs_cmd(port, "CLUSTER SLOTS");
  int owner = -1;
  for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
    redisReply *e = r->element[i];
    if (slot < e->element[0]->integer || slot > e->element[1]->integer) continue;
    for (int k = 0; k < 3; k++)
      if (e->element[2]->element[1]->integer == c->node[k].port) owner = k;
  }
  freeReplyObject(r);
  return owner;
}

int rs_cluster_owner(const rs_cluster *c, int slot) {
  return owner_from(c, c->node[0].port, slot);
}

void rs_cluster_wait_owner(const rs_cluster *c, int slot, int owner) {
  for (int t = 0; t < 500; t++) {
    if (owner_from(c, c->node[0].port, slot) == owner &&
        owner_from(c, c->node[1].port, slot) == owner &&
        owner_from(c, c->node[2].port, slot) == owner)
      return;
    sleep_ms(10);
  }
  ck_abort_msg("slot %d did not move to node %d", slot, owner);
}

/* ---- a cluster with replicas -------------------------------------------- */

/* The reply of cmd on port (a text reply) holds `want`. */
static bool info_has(int port, const char *cmd, const char *want) {
  redisReply *r = rs_cmd(port, cmd);
  bool ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, want);
  freeReplyObject(r);
  return ok;
}

bool rs_cluster_state_ok(int port) {
  return info_has(port, "CLUSTER INFO", "cluster_state:ok");
}

bool rs_is_master(int port) {
  return info_has(port, "INFO replication", "role:master");
}

/* The replica of master m has every byte m has written: its offset in
 * m's INFO replication equals m's master_repl_offset. */
static bool replicated(int port) {
  redisReply *r = rs_cmd(port, "INFO replication");
  bool ok = false;
  const char *mo = r && r->type != REDIS_REPLY_ERROR ? strstr(r->str, "master_repl_offset:") : NULL;
  const char *so = r && r->type != REDIS_REPLY_ERROR ? strstr(r->str, "slave0:") : NULL;
  if (mo && so) {
    long long m = atoll(mo + strlen("master_repl_offset:"));
    const char *off = strstr(so, "offset=");
    ok = off && atoll(off + strlen("offset=")) == m;
  }
  freeReplyObject(r);
  return ok;
}

void rs_cluster6_wait_replicated(const rs_cluster6 *c) {
  for (int t = 0; t < 1000; t++) {
    bool all = true;
    for (int i = 0; i < 3 && all; i++) all = c->node[i].pid == 0 || replicated(c->node[i].port);
    if (all) return;
    sleep_ms(10);
  }
  ck_abort_msg("a replica did not catch up with its master");
}

void rs_cluster6_start(rs_cluster6 *c, const char *node_timeout_ms, bool full_coverage) {
  memset(c, 0, sizeof(*c));
  for (int i = 0; i < 6; i++) {
    rs_start(&c->node[i], "--cluster-enabled", "yes", "--cluster-node-timeout", node_timeout_ms,
             "--cluster-require-full-coverage", full_coverage ? "yes" : "no", NULL);
    node_id(c->node[i].port, c->id[i], sizeof(c->id[i]));
  }
  const int first[3] = {0, 5461, 10923}, last[3] = {5460, 10922, 16383};
  for (int i = 0; i < 3; i++)
    rs_ok(c->node[i].port, "CLUSTER ADDSLOTSRANGE %d %d", first[i], last[i]);
  for (int i = 1; i < 6; i++) rs_ok(c->node[0].port, "CLUSTER MEET 127.0.0.1 %d", c->node[i].port);
  /* a replica can follow its master once it knows it */
  for (int i = 3; i < 6; i++) {
    int t = 0;
    while (!info_has(c->node[i].port, "CLUSTER NODES", c->id[i - 3]) && t++ < 1000) sleep_ms(10);
    rs_ok(c->node[i].port, "CLUSTER REPLICATE %s", c->id[i - 3]);
  }
  for (int t = 0; t < 2000; t++) {
    bool ok = true;
    for (int i = 0; i < 6 && ok; i++)
      ok = rs_cluster_state_ok(c->node[i].port) &&
           info_has(c->node[i].port, "CLUSTER INFO", "cluster_known_nodes:6");
    for (int i = 0; i < 3 && ok; i++)
      ok = info_has(c->node[i].port, "INFO replication", "connected_slaves:1") &&
           replicated(c->node[i].port);
    if (ok) return;
    sleep_ms(10);
  }
  ck_abort_msg("the cluster of 3 masters and 3 replicas did not come up");
}

void rs_cluster6_stop(rs_cluster6 *c) {
  for (int i = 0; i < 6; i++) rs_stop(&c->node[i]);
}
