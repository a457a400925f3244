/*
 * suite_redis.c — kvbench --suite redis: store and load bandwidth of 1 MiB
 * and 8 MiB objects through kvact's redis tier, against redis-benchmark
 * SET and GET of the same value size on the same server, in the same run:
 *
 *  - the server: a redis-server this suite starts on a free loopback port
 *    (no persistence), or --redis-addr HOST:PORT;
 *  - store: N objects (--redis-objects, 64) reserved and filled, timed from
 *    finish_write to kva_flush's return (the adapter pipelines SETs, at most
 *    PIPELINE in flight on its one connection);
 *  - load: with L1 cleared, a prefetch of the N keys timed to its wait
 *    (pipelined EXISTS, then GETs), every object checked;
 *  - anchor: redis-benchmark -c 1 -P PIPELINE -d SIZE -n N -t set / get:
 *    one client, the same pipelining depth and value size; its requests
 *    per second times the size is its bandwidth.
 *
 * ratio = kvact / anchor, target 0.8 both ways. kvact's values carry a
 * header (key, layout, checksum) of a few hundred bytes more than the
 * anchor's. The reps interleave (anchor, kvact) so both share the
 * machine's drift; medians are reported.
 */
#include <arpa/inet.h>
#include <errno.h>
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
#include "tools/kvbench/tier_side.h"

#define MiB (1024ull * 1024ull)
#define PIPELINE 16
#define TARGET 0.8
#define GB 1e9
#define TIER "redis0"
#define MAX_REPS 64

extern char **environ;

typedef struct server {
  char host[256];
  int port;
  pid_t pid; /* ours, or 0 for --redis-addr */
  char dir[64];
} server;

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

static int server_ping(const server *sv) {
  char cmd[400], out[64];
  snprintf(cmd, sizeof cmd, "redis-cli -h '%s' -p %d ping 2>/dev/null", sv->host, sv->port);
  return bench_capture(cmd, out, sizeof out) == 0 && strncmp(out, "PONG", 4) == 0 ? 0 : -1;
}

/* Starts redis-server on a free port (persistence off, its files in a
 * temporary directory) and waits until it answers PING. */
static int server_start(server *sv) {
  snprintf(sv->host, sizeof sv->host, "127.0.0.1");
  snprintf(sv->dir, sizeof sv->dir, "/tmp/kvbench-redis.XXXXXX");
  if (!mkdtemp(sv->dir) || (sv->port = free_port()) < 0) return -1;
  char port[16];
  snprintf(port, sizeof port, "%d", sv->port);
  char *argv[] = {"redis-server", "--port", port,    "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no",     "--dir", sv->dir,  "--logfile", "",       NULL};
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

static void server_stop(server *sv) {
  if (sv->pid > 0) {
    kill(sv->pid, SIGTERM);
    waitpid(sv->pid, NULL, 0);
  }
  if (sv->dir[0]) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sv->dir);
    if (system(cmd) != 0) fprintf(stderr, "kvbench: could not remove %s\n", sv->dir);
  }
}

/* --redis-addr HOST:PORT */
static int server_parse(server *sv, const char *addr) {
  const char *colon = strrchr(addr, ':');
  if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof sv->host) return -1;
  memcpy(sv->host, addr, (size_t)(colon - addr));
  sv->host[colon - addr] = 0;
  sv->port = atoi(colon + 1);
  return sv->port > 0 && sv->port < 65536 && !strpbrk(sv->host, "'\"\\ ") ? 0 : -1;
}

/* redis-benchmark's SET or GET bandwidth in GB/s, or -1. */
static double anchor_pass(const server *sv, const char *test, uint64_t size, unsigned n) {
  char cmd[600], out[4096];
  snprintf(cmd, sizeof cmd,
           "redis-benchmark -h '%s' -p %d -c 1 -P %d -d %llu -n %u -t %s --csv 2>/dev/null",
           sv->host, sv->port, PIPELINE, (unsigned long long)size, n, test);
  if (bench_capture(cmd, out, sizeof out) != 0) return -1;
  char want[16];
  snprintf(want, sizeof want, "\"%s\",\"", strcmp(test, "set") == 0 ? "SET" : "GET");
  const char *p = strstr(out, want);
  double rps = p ? atof(p + strlen(want)) : -1;
  return rps > 0 ? rps * (double)size / GB : -1;
}

enum { KV_STORE, KV_LOAD, A_SET, A_GET, NMEASURES };

typedef struct size_run {
  uint64_t size;
  double gbps[NMEASURES][MAX_REPS];
  int reps;
} size_run;

static double med(const size_run *r, int m) {
  double tmp[MAX_REPS];
  memcpy(tmp, r->gbps[m], sizeof(double) * (size_t)r->reps);
  return bench_median(tmp, r->reps);
}

static void report(const size_run *r, const tier_side *k, const char *what, int kvm, int am,
                   const char *anchor) {
  double kv = k->ok ? med(r, kvm) : -1, a = med(r, am);
  printf("measure=%s-%lluMiB", what, (unsigned long long)(r->size / MiB));
  if (kv > 0)
    printf(" kvact=%.3g", kv);
  else
    printf(" kvact=unavailable");
  if (a > 0)
    printf(" anchor=%s:%.3g", anchor, a);
  else
    printf(" anchor=%s:unavailable", anchor);
  if (kv > 0 && a > 0)
    printf(" ratio=%.2f", kv / a);
  else
    printf(" ratio=n/a");
  printf(" target=%.1f unit=GB/s\n", TARGET);
}

/* The tier's JSON for the server. */
static void tier_json(const server *sv, char *out, size_t len) {
  snprintf(out, len,
           "[{\"type\":\"redis\",\"name\":\"" TIER "\",\"addrs\":[\"%s:%d\"],\"pipeline\":%d,"
           "\"timeout_ms\":60000,\"namespace\":\"kvbench\"}]",
           sv->host, sv->port, PIPELINE);
}

/* One size: a warm-up pass, then reps of (anchor SET, kvact store, anchor
 * GET, kvact load). */
static void run_size(const bench_opts *o, const server *sv, size_run *r, unsigned n, int reps) {
  char tier[600];
  tier_json(sv, tier, sizeof tier);
  tier_side k = {0};
  char model[32];
  snprintf(model, sizeof model, "kvbench-redis-%llu", (unsigned long long)(r->size / MiB));
  tier_side_start(&k, o->workers, model, n, r->size, TIER, tier);
  for (int rep = -1; rep < reps; rep++) {
    int slot = rep < 0 ? 0 : rep, fill = 5 + 3 * (rep + 1);
    double secs = 0;
    r->gbps[A_SET][slot] = anchor_pass(sv, "set", r->size, n);
    if (k.ok && tier_side_store(&k, fill, &secs) == 0)
      r->gbps[KV_STORE][slot] = (double)n * (double)r->size / secs / GB;
    r->gbps[A_GET][slot] = anchor_pass(sv, "get", r->size, n);
    if (k.ok && tier_side_load(&k, fill, &secs) == 0)
      r->gbps[KV_LOAD][slot] = (double)n * (double)r->size / secs / GB;
    if (rep >= 0) r->reps = rep + 1;
  }
  report(r, &k, "store", KV_STORE, A_SET, "redis-benchmark-set");
  report(r, &k, "load", KV_LOAD, A_GET, "redis-benchmark-get");
  if (!k.ok) printf("# kvact side unavailable: %s\n", k.why);
  fflush(stdout);
  tier_side_stop(&k);
}

int suite_redis(const bench_opts *o) {
  int reps = o->reps < MAX_REPS ? o->reps : MAX_REPS;
  server sv = {0};
  if (o->redis_addr ? server_parse(&sv, o->redis_addr) : server_start(&sv)) {
    if (o->redis_addr) fprintf(stderr, "kvbench: --redis-addr wants HOST:PORT\n");
    server_stop(&sv);
    return 1;
  }
  char version[128] = "unknown";
  if (bench_capture("redis-server --version 2>/dev/null", version, sizeof version) == 0)
    version[strcspn(version, "\n")] = 0;
  printf("suite=redis workers=%d reps=%d (medians) server=%s:%d%s objects=%u pipeline=%d "
         "clients=1 version=\"%s\"\n",
         o->workers, reps, sv.host, sv.port, sv.pid ? " (started by kvbench)" : "",
         o->redis_objects, PIPELINE, version);
  fflush(stdout);
  static size_run runs[2] = {{.size = 1 * MiB}, {.size = 8 * MiB}};
  for (int i = 0; i < 2; i++) run_size(o, &sv, &runs[i], o->redis_objects, reps);
  server_stop(&sv);
  return 0;
}
