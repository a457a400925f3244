/*
 * mp_support.c — what the multi-process suites share (mp_support.h).
 */
#include "tests/server/mp_support.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/fixture.h"
#include "wire/protocol.h"
#include "wire/sock.h"

char sock_path[108];
char disk_path[256];

void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

int raw_connect(void) {
  struct sockaddr_un a;
  ck_assert_int_eq(wire_unix_addr(sock_path, &a), KVA_OK);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* kvactd on sock_path with a mock tier (latency_us, 0 = none) and, when
 * disk is set, a disk tier on disk_path, plus the "key=value" settings of
 * extra (NULL-terminated, at most 8); returns its pid once it accepts. */
/* daemon_start_opts; a kvactd that exits at start is an abort, or, with
 * exited, -1 and its wait status there. */
static pid_t daemon_spawn(int latency_us, int disk, const char *const *extra, int *exited) {
  char lat[64], mock[512];
  snprintf(lat, sizeof(lat), "%d", latency_us);
  if (disk)
    snprintf(mock, sizeof(mock),
             "l2=[{\"type\":\"disk\",\"path\":\"%s\",\"capacity_bytes\":268435456}]", disk_path);
  else
    snprintf(mock, sizeof(mock), "l2=[{\"type\":\"mock\",\"latency_us\":%s}]", lat);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    char sock_kv[160];
    snprintf(sock_kv, sizeof(sock_kv), "server.socket=%s", sock_path);
    const char *argv[32] = {"kvactd", "--quiet",
                            "-o",     sock_kv,
                            "-o",     "l1.size_bytes=67108864",
                            "-o",     "l1.hugepages=false",
                            "-o",     "l1.prefault=false",
                            "-o",     "l1.pinned=false",
                            "-o",     mock};
    size_t n = 14;
    for (size_t i = 0; extra && extra[i] && n + 3 < 32; i++) {
      argv[n++] = "-o";
      argv[n++] = extra[i];
    }
    argv[n] = NULL;
    execv("tools/kvactd", (char *const *)argv);
    _exit(127);
  }
  for (int i = 0; i < 2000; i++) {
    int fd = raw_connect();
    if (fd >= 0) {
      close(fd);
      return pid;
    }
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      if (exited) {
        *exited = st;
        return -1;
      }
      ck_abort_msg("kvactd exited at start (%d)", st);
    }
    sleep_ms(5);
  }
  ck_abort_msg("kvactd did not accept in 10 s");
  return -1;
}

pid_t daemon_start_opts(int latency_us, int disk, const char *const *extra) {
  return daemon_spawn(latency_us, disk, extra, NULL);
}

int daemon_start_fails(const char *const *extra) {
  int st = 0;
  pid_t pid = daemon_spawn(0, 0, extra, &st);
  if (pid > 0) {
    daemon_stop(pid, SIGKILL);
    ck_abort_msg("kvactd started; it should have refused its config");
  }
  return st;
}

int free_tcp_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

/* A port free when chosen can be taken (by any outgoing connection of the
 * host) before kvactd binds it: kvactd then exits at start, and another
 * port is tried. */
pid_t daemon_start_metrics(const char *extra, int *port) {
  for (int tries = 0; tries < 8; tries++) {
    char addr[64];
    *port = free_tcp_port();
    snprintf(addr, sizeof(addr), "server.metrics_addr=127.0.0.1:%d", *port);
    const char *const opts[] = {addr, extra ? extra : "server.max_clients=64", NULL};
    int st = 0;
    pid_t pid = daemon_spawn(0, 0, opts, &st);
    if (pid > 0) return pid;
  }
  ck_abort_msg("kvactd could not bind a metrics port in 8 tries");
  return -1;
}

pid_t daemon_start_with(int latency_us, int disk, const char *extra) {
  const char *const opts[] = {extra ? extra : "server.max_clients=64", NULL};
  return daemon_start_opts(latency_us, disk, opts);
}

pid_t daemon_start(void) {
  return daemon_start_with(0, 0, NULL);
}

int daemon_stop(pid_t pid, int sig) {
  kill(pid, sig);
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  return st;
}

kva_runtime *client_start(void) {
  return client_start_with(TIMEOUT_MS, 2);
}

kva_runtime *client_start_with(int timeout_ms, int workers) {
  kva_config *c = kva_config_default();
  char t[16], w[16];
  snprintf(t, sizeof(t), "%d", timeout_ms);
  snprintf(w, sizeof(w), "%d", workers);
  ck_assert_int_eq(kva_config_set(c, "client.socket", sock_path), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "client.timeout_ms", t), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "runtime.workers", w), KVA_OK);
  kva_runtime *rt = NULL;
  ck_assert_int_eq(kva_runtime_start(c, &rt), KVA_OK);
  kva_config_free(c);
  ck_assert_ptr_nonnull(kva_storage_of(rt));
  return rt;
}

/* Waits until the client's storage answers (it connects asynchronously). */
kva_runtime *client_up(void) {
  kva_runtime *rt = client_start();
  client_wait_up(kva_storage_of(rt));
  return rt;
}

void client_wait_up(kva_storage *s) {
  kva_storage_stats st;
  for (int i = 0; i < 1000; i++) {
    if (kva_storage_get_stats(s, &st) == KVA_OK) return;
    sleep_ms(10);
  }
  ck_abort_msg("the client did not reach kvactd in 10 s");
}

void fill_pattern(uint8_t *p, size_t len, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (uint8_t)x;
  }
}

int check_pattern(const uint8_t *p, size_t len, uint64_t seed) {
  uint8_t *want = malloc(len);
  fill_pattern(want, len, seed);
  int eq = memcmp(p, want, len) == 0;
  free(want);
  return eq;
}

/* Writes keys [first, first + n) with their patterns. */
void write_keys(kva_storage *s, uint64_t first, size_t n, size_t bytes) {
  kva_layout l = fixture_layout_bytes(bytes);
  for (size_t i = 0; i < n; i++) {
    kva_key k = fixture_key(first + i);
    kva_buf b;
    int st = -99;
    ck_assert_int_eq(kva_reserve_write(s, &k, 1, &l, KVA_WRITE_NEW, &b, &st), 1);
    ck_assert_uint_eq(b.len, bytes);
    fill_pattern(b.ptr, bytes, first + i);
    ck_assert_int_eq(kva_finish_write(s, &k, 1, &st), 1);
  }
}

/* Writes keys [first, first + n) in one batch (one store task). */
void write_batch(kva_storage *s, uint64_t first, size_t n, size_t bytes) {
  kva_layout l = fixture_layout_bytes(bytes);
  kva_key *k = calloc(n, sizeof(*k));
  kva_buf *b = calloc(n, sizeof(*b));
  int *st = calloc(n, sizeof(*st));
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(first + i);
  ck_assert_int_eq(kva_reserve_write(s, k, n, &l, KVA_WRITE_NEW, b, st), (int)n);
  for (size_t i = 0; i < n; i++) fill_pattern(b[i].ptr, bytes, first + i);
  ck_assert_int_eq(kva_finish_write(s, k, n, st), (int)n);
  free(k);
  free(b);
  free(st);
}

size_t prefetch_hits(kva_storage *s, const kva_key *k, size_t n, const kva_layout *l) {
  kva_prefetch *h;
  size_t hits = 0;
  ck_assert_int_eq(kva_submit_prefetch(s, k, n, l, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  return hits;
}

/* Prefetches, reads, checks and releases keys [first, first + n). */
size_t read_keys(kva_storage *s, uint64_t first, size_t n, size_t bytes) {
  size_t ok = 0;
  for (size_t i = 0; i < n; i++) {
    kva_key k = fixture_key(first + i);
    kva_prefetch *h;
    size_t hits = 0;
    ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, NULL, 0, &h), KVA_OK);
    ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
    if (hits != 1) continue;
    kva_buf b;
    ck_assert_int_eq(kva_read_prefetched(s, &k, 1, &b), KVA_OK);
    ck_assert_uint_eq(b.len, bytes);
    ck_assert_msg(check_pattern(b.ptr, bytes, first + i), "key %lu: wrong bytes",
                  (unsigned long)(first + i));
    ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
    ok++;
  }
  return ok;
}

void setup(void) {
  snprintf(sock_path, sizeof(sock_path), "/tmp/kvact-mp-test-%d.sock", (int)getpid());
  snprintf(disk_path, sizeof(disk_path), "/tmp/kvact-mp-test-%d.disk", (int)getpid());
  unlink(sock_path);
  unlink(disk_path);
  signal(SIGPIPE, SIG_IGN);
}

void teardown(void) {
  unlink(sock_path);
  unlink(disk_path);
}

/* A child process's body, then _exit with its result (0 = ok). */
/* Forks a client process that starts its runtime once a byte arrives on
 * gate_fd (-1: at once). Children are forked while this process has no
 * thread (a fork of a threaded process may inherit a held lock), so a
 * test that needs a runtime of its own forks its children first. */
pid_t fork_client_gated(int (*body)(kva_storage *s, int arg, int out_fd), int arg, int out_fd,
                        int gate_fd) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    char go;
    if (gate_fd >= 0 && read(gate_fd, &go, 1) != 1) _exit(9);
    kva_runtime *rt = client_up();
    int rc = body(kva_storage_of(rt), arg, out_fd);
    kva_runtime_shutdown(rt);
    _exit(rc);
  }
  return pid;
}

pid_t fork_client(int (*body)(kva_storage *s, int arg, int out_fd), int arg, int out_fd) {
  return fork_client_gated(body, arg, out_fd, -1);
}

int child_status(pid_t pid) {
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int read_frame(int fd, char *text, size_t cap) {
  uint8_t buf[PROTO_HDR_BYTES + 8 + PROTO_MAX_TEXT];
  size_t have = 0;
  proto_hdr h;
  for (;;) {
    ssize_t k = read(fd, buf + have, sizeof(buf) - have);
    if (k <= 0) return -1;
    have += (size_t)k;
    if (have < PROTO_HDR_BYTES) continue;
    if (proto_hdr_get(buf, &h, NULL, 0) < PROTO_EVERSION) return -2;
    if (have >= PROTO_HDR_BYTES + h.len) break;
  }
  proto_rep r = {.type = P_HELLO, .text = text, .text_cap = (uint32_t)cap};
  if (proto_rep_get(&h, buf + PROTO_HDR_BYTES, 1u << 30, &r, NULL, 0) != PROTO_OK) return -3;
  return r.type;
}

int eof_soon(int fd) {
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char c;
  ssize_t k;
  while ((k = read(fd, &c, 1)) > 0) {
  }
  return k == 0;
}

void memcheck_soon(kva_storage *s) {
  char report[256] = "";
  int rc = KVA_EIO;
  for (int i = 0; i < 1000 && rc != KVA_OK; i++) {
    rc = kva_memcheck(s, report, sizeof(report));
    if (rc != KVA_OK) sleep_ms(10);
  }
  ck_assert_msg(rc == KVA_OK, "locks left: %s", report);
}

/* Waits until every thread of pid is stopped (a group stop is not
 * instantaneous: a thread finishes what it is doing first). */
void wait_stopped(pid_t pid) {
  char path[64];
  for (int tries = 0; tries < 1000; tries++) {
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *dir = opendir(path);
    ck_assert_ptr_nonnull(dir);
    int running = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
      if (e->d_name[0] == '.') continue;
      char stat[320], buf[256] = "";
      snprintf(stat, sizeof(stat), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
      FILE *f = fopen(stat, "r");
      if (f && fgets(buf, sizeof(buf), f)) {
        const char *p = strrchr(buf, ')'); /* the state follows the command */
        if (p && p[1] == ' ' && p[2] != 'T' && p[2] != 't') running++;
      }
      if (f) fclose(f);
    }
    closedir(dir);
    if (!running) return;
    sleep_ms(1);
  }
  ck_abort_msg("kvactd did not stop");
}
