/*
 * mp_test.c — multi-process mode with real processes: kvactd exec'd from
 * //tools:kvactd, clients forked from this binary (each starts its own
 * runtime after the fork), raw sockets for the misbehaving peers.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvact.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/server/scrape.h"
#include "tests/support/fixture.h"
#include "wire/protocol.h"

#define TIMEOUT_MS 1000 /* client.timeout_ms of the clients here */

static char sock_path[108];
static char disk_path[256];

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static int raw_connect(void) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  strcpy(a.sun_path, sock_path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* kvactd on sock_path with a mock tier (latency_us, 0 = none) and, when
 * disk is set, a disk tier on disk_path; returns its pid once it accepts. */
static pid_t daemon_start_with(int latency_us, int disk, const char *extra) {
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
    execl("tools/kvactd", "kvactd", "--quiet", "-o", sock_kv, "-o", "l1.size_bytes=67108864",
          "-o", "l1.hugepages=false", "-o", "l1.prefault=false", "-o", "l1.pinned=false", "-o",
          mock, "-o", extra ? extra : "server.max_clients=64", (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 2000; i++) {
    int fd = raw_connect();
    if (fd >= 0) {
      close(fd);
      return pid;
    }
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) ck_abort_msg("kvactd exited at start (%d)", st);
    sleep_ms(5);
  }
  ck_abort_msg("kvactd did not accept in 10 s");
  return -1;
}

static pid_t daemon_start(void) {
  return daemon_start_with(0, 0, NULL);
}

static int daemon_stop(pid_t pid, int sig) {
  kill(pid, sig);
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  return st;
}

static kva_runtime *client_start(void) {
  kva_config *c = kva_config_default();
  char t[16];
  snprintf(t, sizeof(t), "%d", TIMEOUT_MS);
  ck_assert_int_eq(kva_config_set(c, "client.socket", sock_path), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "client.timeout_ms", t), KVA_OK);
  ck_assert_int_eq(kva_config_set(c, "runtime.workers", "2"), KVA_OK);
  kva_runtime *rt = NULL;
  ck_assert_int_eq(kva_runtime_start(c, &rt), KVA_OK);
  kva_config_free(c);
  ck_assert_ptr_nonnull(kva_storage_of(rt));
  return rt;
}

/* Waits until the client's storage answers (it connects asynchronously). */
static void client_wait_up(kva_storage *s) {
  kva_storage_stats st;
  for (int i = 0; i < 1000; i++) {
    if (kva_storage_get_stats(s, &st) == KVA_OK) return;
    sleep_ms(10);
  }
  ck_abort_msg("the client did not reach kvactd in 10 s");
}

static void fill_pattern(uint8_t *p, size_t len, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (uint8_t)x;
  }
}

static int check_pattern(const uint8_t *p, size_t len, uint64_t seed) {
  uint8_t *want = malloc(len);
  fill_pattern(want, len, seed);
  int eq = memcmp(p, want, len) == 0;
  free(want);
  return eq;
}

/* Writes keys [first, first + n) with their patterns. */
static void write_keys(kva_storage *s, uint64_t first, size_t n, size_t bytes) {
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
static void write_batch(kva_storage *s, uint64_t first, size_t n, size_t bytes) {
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

/* Prefetches, reads, checks and releases keys [first, first + n). */
static size_t read_keys(kva_storage *s, uint64_t first, size_t n, size_t bytes) {
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

static void setup(void) {
  snprintf(sock_path, sizeof(sock_path), "/tmp/kvact-mp-test-%d.sock", (int)getpid());
  snprintf(disk_path, sizeof(disk_path), "/tmp/kvact-mp-test-%d.disk", (int)getpid());
  unlink(sock_path);
  unlink(disk_path);
  signal(SIGPIPE, SIG_IGN);
}

static void teardown(void) {
  unlink(sock_path);
  unlink(disk_path);
}

/* A child process's body, then _exit with its result (0 = ok). */
/* Forks a client process that starts its runtime once a byte arrives on
 * gate_fd (-1: at once). Children are forked while this process has no
 * thread (a fork of a threaded process may inherit a held lock), so a
 * test that needs a runtime of its own forks its children first. */
static pid_t fork_client_gated(int (*body)(kva_storage *s, int arg, int out_fd), int arg,
                               int out_fd, int gate_fd) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    char go;
    if (gate_fd >= 0 && read(gate_fd, &go, 1) != 1) _exit(9);
    kva_runtime *rt = client_start();
    client_wait_up(kva_storage_of(rt));
    int rc = body(kva_storage_of(rt), arg, out_fd);
    kva_runtime_shutdown(rt);
    _exit(rc);
  }
  return pid;
}

static pid_t fork_client(int (*body)(kva_storage *s, int arg, int out_fd), int arg, int out_fd) {
  return fork_client_gated(body, arg, out_fd, -1);
}

static int child_status(pid_t pid) {
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- N clients share one pool ------------------------------------------------ */

#define SHARE_KEYS 64
#define SHARE_BYTES 65536

static int writer_body(kva_storage *s, int i, int out_fd) {
  write_keys(s, (uint64_t)i * 1000, SHARE_KEYS, SHARE_BYTES);
  return 0;
}

static int reader_body(kva_storage *s, int i, int out_fd) {
  /* reads the chunks of the writer before it, byte-exact */
  int other = (i + 3) % 4;
  return read_keys(s, (uint64_t)other * 1000, SHARE_KEYS, SHARE_BYTES) == SHARE_KEYS ? 0 : 1;
}

START_TEST(clients_read_each_others_chunks_byte_exact) {
  pid_t d = daemon_start();
  pid_t w[4], r[4];
  for (int i = 0; i < 4; i++) w[i] = fork_client(writer_body, i, -1);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(child_status(w[i]), 0);
  for (int i = 0; i < 4; i++) r[i] = fork_client(reader_body, i, -1);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(child_status(r[i]), 0);
  kva_runtime *rt = client_start();
  kva_storage *s = kva_storage_of(rt);
  client_wait_up(s);
  kva_storage_stats st;
  ck_assert_int_eq(kva_storage_get_stats(s, &st), KVA_OK);
  ck_assert_uint_eq(st.l1_objects, 4 * SHARE_KEYS);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
  ck_assert_int_ne(access(sock_path, F_OK), 0); /* the socket is removed */
}
END_TEST

/* ---- a client killed while holding locks -------------------------------------- */

#define HELD 100

/* Takes HELD write reservations, HELD read locks, HELD pins and HELD
 * prefetches that wait on the slow tier, then reports and waits to die. */
static int holder_body(kva_storage *s, int base, int out_fd) {
  kva_layout l = fixture_layout_bytes(4096);
  kva_key k[HELD];
  kva_buf b[HELD];
  int st[HELD];
  for (int i = 0; i < HELD; i++) k[i] = fixture_key((uint64_t)base + i); /* reserved, unfinished */
  if (kva_reserve_write(s, k, HELD, &l, KVA_WRITE_NEW, b, st) != HELD) return 2;
  for (int i = 0; i < HELD; i++) memset(b[i].ptr, 0xee, 4096);
  for (int i = 0; i < HELD; i++) k[i] = fixture_key(5000 + i); /* the survivor's chunks */
  kva_prefetch *h;
  size_t hits = 0;
  if (kva_submit_prefetch(s, k, HELD, &l, 0, &h) != KVA_OK) return 3;
  if (kva_wait_prefetch(s, h, 5000, &hits) != KVA_OK || hits != HELD) return 4;
  kva_tier_hits th;
  if (kva_lookup(s, k, HELD, 1, &th) != KVA_OK || th.tier[0].hits != HELD) return 5;
  for (int i = 0; i < HELD; i++) k[i] = fixture_key(7000 + i); /* only in the slow tier */
  for (int i = 0; i < HELD; i++)
    if (kva_submit_prefetch(s, &k[i], 1, &l, 0, &h) != KVA_OK) return 6;
  char c = 'r';
  if (write(out_fd, &c, 1) != 1) return 7;
  pause();
  return 0;
}

START_TEST(a_killed_client_leaves_no_lock_and_loses_nothing) {
  pid_t d = daemon_start_with(100000, 0, NULL); /* the mock tier answers in 0.1 s */
  int p[2], gate[2];
  ck_assert_int_eq(pipe(p), 0);
  ck_assert_int_eq(pipe(gate), 0);
  pid_t c = fork_client_gated(holder_body, 9000, p[1], gate[0]);
  kva_runtime *rt = client_start();
  kva_storage *s = kva_storage_of(rt);
  client_wait_up(s);
  write_batch(s, 5000, HELD, 4096);
  /* keys 7000.. exist in L2 only: written, flushed, then dropped from L1 */
  write_batch(s, 7000, HELD, 4096);
  ck_assert_int_eq(kva_flush(s, 900), KVA_OK);
  kva_key k7[HELD];
  int st[HELD];
  for (int i = 0; i < HELD; i++) k7[i] = fixture_key(7000 + i);
  ck_assert_int_eq(kva_delete(s, k7, HELD, 0, st), HELD);
  /* the survivor holds a read lock of its own through it all */
  kva_key mine = fixture_key(5000);
  kva_prefetch *h;
  size_t hits;
  ck_assert_int_eq(kva_submit_prefetch(s, &mine, 1, NULL, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 1);

  ck_assert_int_eq(write(gate[1], "g", 1), 1);
  char ready = 0;
  ck_assert_int_eq(read(p[0], &ready, 1), 1);
  ck_assert_int_eq(ready, 'r');
  kill(c, SIGKILL);
  ck_assert_int_eq(child_status(c), 128 + SIGKILL);

  /* the daemon releases everything but the survivor's lock, soon */
  kva_buf b;
  ck_assert_int_eq(kva_read_prefetched(s, &mine, 1, &b), KVA_OK);
  ck_assert(check_pattern(b.ptr, 4096, 5000));
  ck_assert_int_eq(kva_finish_read_prefetched(s, &mine, 1, 0), 1);
  char report[256] = "";
  int rc = KVA_EIO;
  for (int i = 0; i < 2000 && rc != KVA_OK; i++) { /* the slow prefetches end first */
    rc = kva_memcheck(s, report, sizeof(report));
    if (rc != KVA_OK) sleep_ms(10);
  }
  ck_assert_msg(rc == KVA_OK, "locks left after the kill: %s", report);
  /* the reservations were never stored nor readable; the rest is intact */
  ck_assert_uint_eq(read_keys(s, 9000, HELD, 4096), 0);
  ck_assert_uint_eq(read_keys(s, 5000, HELD, 4096), HELD);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- the daemon killed and restarted under a client --------------------------- */

START_TEST(a_client_survives_the_daemon_restarting) {
  pid_t d = daemon_start_with(0, 1, NULL);
  kva_runtime *rt = client_start();
  kva_storage *s = kva_storage_of(rt);
  client_wait_up(s);
  write_keys(s, 100, 16, 8192);
  ck_assert_int_eq(kva_flush(s, 900), KVA_OK);
  /* a read lock held across the crash: its bytes stay mapped */
  kva_key k = fixture_key(100);
  kva_prefetch *h;
  size_t hits;
  kva_buf held;
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, NULL, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_int_eq(kva_read_prefetched(s, &k, 1, &held), KVA_OK);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0); /* graceful: the disk index is saved */
  ck_assert(check_pattern(held.ptr, 8192, 100));

  /* meanwhile: errors and misses, never a hang */
  kva_layout l = fixture_layout_bytes(8192);
  kva_buf b;
  int st;
  kva_key k2 = fixture_key(200);
  ck_assert_int_lt(kva_reserve_write(s, &k2, 1, &l, KVA_WRITE_NEW, &b, &st), 0);
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, NULL, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 0);
  kva_tier_hits th;
  ck_assert_int_eq(kva_lookup(s, &k, 1, 0, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 0);

  d = daemon_start_with(0, 1, NULL);
  client_wait_up(s);
  /* the disk tier kept the chunks: they come back through a prefetch */
  kva_key ks[16];
  for (int i = 0; i < 16; i++) ks[i] = fixture_key(100 + i);
  ck_assert_int_eq(kva_submit_prefetch(s, ks, 16, &l, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 16);
  kva_buf bs[16];
  ck_assert_int_eq(kva_read_prefetched(s, ks, 16, bs), KVA_OK);
  for (int i = 0; i < 16; i++) ck_assert(check_pattern(bs[i].ptr, 8192, 100 + i));
  ck_assert_int_eq(kva_finish_read_prefetched(s, ks, 16, 0), 16);
  /* the lock of the old daemon is not the new one's: refused, harmless */
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 0);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- the socket file ------------------------------------------------------------ */

START_TEST(a_second_daemon_on_the_same_socket_refuses_to_start) {
  pid_t d = daemon_start();
  pid_t d2 = fork();
  if (d2 == 0) {
    char sock_kv[160];
    snprintf(sock_kv, sizeof(sock_kv), "server.socket=%s", sock_path);
    execl("tools/kvactd", "kvactd", "--quiet", "-o", sock_kv, "-o", "l1.size_bytes=16777216",
          (char *)NULL);
    _exit(127);
  }
  int st = 0;
  ck_assert_int_eq(waitpid(d2, &st, 0), d2);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
  int fd = raw_connect(); /* the first one still serves */
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

START_TEST(a_stale_socket_file_is_replaced) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  strcpy(a.sun_path, sock_path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  close(fd); /* a dead daemon's file: nobody listens */
  pid_t d = daemon_start();
  struct stat sb;
  ck_assert_int_eq(stat(sock_path, &sb), 0);
  ck_assert_uint_eq(sb.st_mode & 0777, 0600);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- peers that misbehave --------------------------------------------------------- */

/* Reads one frame: its type and text (REFUSED's message), or -1 at EOF. */
static int read_frame(int fd, char *text, size_t cap) {
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

static int eof_soon(int fd) {
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char c;
  ssize_t k;
  while ((k = read(fd, &c, 1)) > 0) {
  }
  return k == 0;
}

START_TEST(malformed_frames_close_only_their_connection) {
  pid_t d = daemon_start();
  kva_runtime *rt = client_start();
  kva_storage *s = kva_storage_of(rt);
  client_wait_up(s);
  write_keys(s, 1, 4, 4096);
  /* garbage: another protocol */
  int fd = raw_connect();
  ck_assert_int_eq(write(fd, "GET / HTTP/1.1\r\n\r\n", 18), 18);
  ck_assert(eof_soon(fd));
  close(fd);
  /* a request before the hello */
  uint8_t frame[PROTO_HDR_BYTES + 4];
  proto_hdr_put(frame, P_CLEAR, 4, 1);
  memset(frame + PROTO_HDR_BYTES, 0, 4);
  fd = raw_connect();
  ck_assert_int_eq(write(fd, frame, sizeof(frame)), (ssize_t)sizeof(frame));
  ck_assert(eof_soon(fd));
  close(fd);
  /* an oversized length */
  proto_hdr_put(frame, P_HELLO, PROTO_MAX_PAYLOAD + 1, 1);
  fd = raw_connect();
  ck_assert_int_eq(write(fd, frame, PROTO_HDR_BYTES), PROTO_HDR_BYTES);
  ck_assert(eof_soon(fd));
  close(fd);
  /* a hello, then a truncated reserve, then the peer goes away */
  uint8_t big[4096];
  proto_req hello = {.type = P_HELLO, .pid = 1};
  size_t n = proto_req_put(big, sizeof(big), &hello, 0);
  kva_key k = fixture_key(99);
  kva_layout l = fixture_layout_bytes(4096);
  proto_req res = {.type = P_RESERVE_WRITE, .n = 1, .layout = l, .keys = &k};
  size_t m = proto_req_put(big + n, sizeof(big) - n, &res, 7);
  fd = raw_connect();
  ck_assert_int_eq(write(fd, big, n + m - 10), (ssize_t)(n + m - 10));
  sleep_ms(50);
  close(fd);
  /* a hello, then a reserve whose key is invalid */
  big[n + PROTO_HDR_BYTES + 8 + PROTO_LAYOUT_BYTES + 63] = 'x'; /* model loses its NUL */
  memset(big + n + PROTO_HDR_BYTES + 8 + PROTO_LAYOUT_BYTES, 'm', 64);
  fd = raw_connect();
  ck_assert_int_eq(write(fd, big, n + m), (ssize_t)(n + m));
  char text[256];
  ck_assert_int_eq(read_frame(fd, text, sizeof(text)), P_HELLO); /* the welcome */
  ck_assert(eof_soon(fd));
  close(fd);
  /* the well-behaved client never noticed */
  ck_assert_uint_eq(read_keys(s, 1, 4, 4096), 4);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

START_TEST(a_client_of_another_protocol_version_is_told_why) {
  pid_t d = daemon_start();
  uint8_t frame[PROTO_HDR_BYTES + 8];
  proto_req hello = {.type = P_HELLO, .pid = 1};
  ck_assert_uint_eq(proto_req_put(frame, sizeof(frame), &hello, 0), sizeof(frame));
  frame[4] = PROTO_VERSION + 1; /* the version field, little endian */
  int fd = raw_connect();
  ck_assert_int_eq(write(fd, frame, sizeof(frame)), (ssize_t)sizeof(frame));
  char text[256] = "";
  ck_assert_int_eq(read_frame(fd, text, sizeof(text)), P_REFUSED);
  ck_assert_msg(strstr(text, "version"), "refusal without the reason: %s", text);
  close(fd);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

START_TEST(a_peer_of_another_uid_is_refused) {
  if (getuid() != 0) return; /* needs setuid */
  pid_t d = daemon_start_with(0, 0, "server.socket_mode=511"); /* the file lets anyone in */
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t c = fork();
  if (c == 0) {
    if (setuid(65534) != 0) _exit(3);
    int fd = raw_connect();
    uint8_t frame[PROTO_HDR_BYTES + 8];
    proto_req hello = {.type = P_HELLO, .pid = 1};
    proto_req_put(frame, sizeof(frame), &hello, 0);
    if (fd < 0) _exit(4);
    /* the daemon may refuse before the hello is written (EPIPE): its
     * refusal is read either way */
    if (write(fd, frame, sizeof(frame)) < 0 && errno != EPIPE && errno != ECONNRESET) _exit(7);
    char text[256] = "";
    int t = read_frame(fd, text, sizeof(text));
    if (write(p[1], text, strlen(text) + 1) < 0) _exit(5);
    _exit(t == P_REFUSED ? 0 : 6);
  }
  ck_assert_int_eq(child_status(c), 0);
  char text[256] = "";
  ck_assert_int_gt(read(p[0], text, sizeof(text) - 1), 0);
  ck_assert_msg(strstr(text, "uid 65534"), "refusal: %s", text);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

START_TEST(a_client_without_a_daemon_starts_and_gets_errors) {
  kva_runtime *rt = client_start();
  kva_storage *s = kva_storage_of(rt);
  kva_key k = fixture_key(1);
  kva_layout l = fixture_layout_bytes(4096);
  kva_buf b;
  int st = 0;
  ck_assert_int_eq(kva_reserve_write(s, &k, 1, &l, KVA_WRITE_NEW, &b, &st), KVA_ESHUTDOWN);
  kva_prefetch *h;
  size_t hits = 7;
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, NULL, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 0);
  char report[128];
  ck_assert_int_eq(kva_memcheck(s, report, sizeof(report)), KVA_ESHUTDOWN);
  /* the daemon comes up later: the client finds it */
  pid_t d = daemon_start();
  client_wait_up(s);
  write_keys(s, 1, 1, 4096);
  ck_assert_uint_eq(read_keys(s, 1, 1, 4096), 1);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- kva_kv_* in two processes ------------------------------------------------- */

#define KV_CHUNKS 4
#define KV_TOKENS 64 /* 4 chunks of 16 */

static void kv_cache(test_cache *c) {
  cache_init(c, KVA_DEVICE_HOST, KVA_KV_FLASH, KVA_DT_BF16, 2, 8, 16, 2, 64);
}

static void kv_slots(int64_t *slots) {
  for (int t = 0; t < KV_TOKENS; t++) slots[t] = KV_TOKENS - 1 - t; /* reversed: not a copy by luck */
}

static int kv_storer_body(kva_storage *s, int arg, int out_fd) {
  test_cache c;
  kv_cache(&c);
  cache_fill(&c, 42);
  kva_kv *kv = NULL;
  if (kva_kv_register(s, &c.d, &kv) != KVA_OK) return 2;
  kva_key k[KV_CHUNKS];
  gpu_test_keys(k, 0, KV_CHUNKS);
  int64_t slots[KV_TOKENS];
  kv_slots(slots);
  kva_op *op = NULL;
  if (kva_kv_store(s, kv, k, KV_CHUNKS, 16, slots, KV_TOKENS, &op) != KVA_OK) return 3;
  int st = -99;
  if (kva_op_wait(op, 10000, &st) != KVA_OK || st != KVA_OK) return 4;
  kva_kv_unregister(kv);
  cache_free(&c);
  return 0;
}

START_TEST(kv_store_in_one_process_and_kv_load_in_another_are_bit_exact) {
  pid_t d = daemon_start();
  ck_assert_int_eq(child_status(fork_client(kv_storer_body, 0, -1)), 0);
  kva_runtime *rt = client_start();
  kva_storage *s = kva_storage_of(rt);
  client_wait_up(s);
  test_cache want, got;
  kv_cache(&want);
  cache_fill(&want, 42);
  kv_cache(&got);
  kva_kv *kv = NULL;
  ck_assert_int_eq(kva_kv_register(s, &got.d, &kv), KVA_OK);
  kva_key k[KV_CHUNKS];
  gpu_test_keys(k, 0, KV_CHUNKS);
  ck_assert_uint_eq(gpu_test_prefetch(s, k, KV_CHUNKS), KV_CHUNKS);
  int64_t slots[KV_TOKENS];
  kv_slots(slots);
  kva_op *op = NULL;
  ck_assert_int_eq(kva_kv_load(s, kv, k, KV_CHUNKS, 16, slots, KV_TOKENS, &op), KVA_OK);
  ck_assert_int_eq(gpu_test_wait(op), KVA_OK);
  /* the cache has 8 x 16 = 128 slots; the 64 loaded are the storer's, the
   * rest stayed zero */
  for (uint32_t l = 0; l < 2; l++) {
    for (uint32_t kvh = 0; kvh < 2; kvh++)
      for (uint64_t slot = 0; slot < 128; slot++) {
        size_t off = ref_paged_offset(&got, kvh, slot);
        const uint8_t *g = (const uint8_t *)got.layers[l] + off;
        const uint8_t *w = (const uint8_t *)want.layers[l] + off;
        uint8_t zero[256] = {0};
        ck_assert_msg(memcmp(g, slot < KV_TOKENS ? w : zero, got.row_bytes) == 0,
                      "layer %u kv %u slot %lu differs", l, kvh, (unsigned long)slot);
      }
  }
  kva_kv_unregister(kv);
  cache_free(&want);
  cache_free(&got);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- a daemon that stops answering ---------------------------------------------- */

/* Polls the daemon's memcheck until clean (10 s at most). */
static void memcheck_soon(kva_storage *s) {
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
static void wait_stopped(pid_t pid) {
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

START_TEST(calls_to_a_stopped_daemon_time_out_and_late_locks_are_given_back) {
  pid_t d = daemon_start();
  kva_runtime *rt = client_start();
  kva_storage *s = kva_storage_of(rt);
  client_wait_up(s);
  write_keys(s, 1, 1, 4096);
  kill(d, SIGSTOP);
  wait_stopped(d);
  kva_key a = fixture_key(1), b = fixture_key(2);
  kva_layout l = fixture_layout_bytes(4096);
  kva_buf buf;
  int st = -99;
  ck_assert_int_eq(kva_reserve_write(s, &b, 1, &l, KVA_WRITE_NEW, &buf, &st), KVA_ETIMEDOUT);
  kva_prefetch *h;
  size_t hits = 7;
  ck_assert_int_eq(kva_submit_prefetch(s, &a, 1, NULL, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, -1, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 0); /* a miss, in client.timeout_ms */
  kva_tier_hits th;
  ck_assert_int_eq(kva_lookup(s, &a, 1, 1, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 0);
  kill(d, SIGCONT);
  /* the daemon now grants the reservation, the read lock and the pin; the
   * client gives them back as their late replies arrive */
  memcheck_soon(s);
  ck_assert_uint_eq(read_keys(s, 2, 1, 4096), 0); /* b was never written */
  ck_assert_uint_eq(read_keys(s, 1, 1, 4096), 1);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- a live process whose connection breaks --------------------------------------- */

/* Speaks the protocol by hand: a hello, one reservation, then garbage
 * that makes the daemon close the connection; then it lives on. */
static void raw_reserver(int ready_fd) {
  uint8_t buf[4096];
  proto_req hello = {.type = P_HELLO, .pid = (uint32_t)getpid()};
  size_t n = proto_req_put(buf, sizeof(buf), &hello, 0);
  kva_key k = fixture_key(77);
  proto_req res = {.type = P_RESERVE_WRITE, .n = 1, .layout = fixture_layout_bytes(4096), .keys = &k};
  n += proto_req_put(buf + n, sizeof(buf) - n, &res, 5);
  int fd = raw_connect();
  if (fd < 0 || write(fd, buf, n) != (ssize_t)n) _exit(2);
  char text[64];
  if (read_frame(fd, text, sizeof(text)) != P_HELLO) _exit(3);
  sleep_ms(200); /* the reservation's reply */
  if (write(fd, "garbage!", 8) != 8) _exit(4);
  char c = 'r';
  if (write(ready_fd, &c, 1) != 1) _exit(5);
  pause();
  _exit(0);
}

START_TEST(a_live_process_keeps_its_locks_until_it_exits) {
  pid_t d = daemon_start();
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t c = fork();
  if (c == 0) raw_reserver(p[1]);
  char ready = 0;
  ck_assert_int_eq(read(p[0], &ready, 1), 1);
  kva_runtime *rt = client_start();
  kva_storage *s = kva_storage_of(rt);
  client_wait_up(s);
  sleep_ms(200); /* the daemon has closed that connection by now */
  char report[256] = "";
  ck_assert_int_eq(kva_memcheck(s, report, sizeof(report)), KVA_EIO);
  ck_assert_msg(strstr(report, "write-locked"), "%s", report); /* its buffer is still its own */
  kill(c, SIGKILL);
  ck_assert_int_eq(child_status(c), 128 + SIGKILL);
  memcheck_soon(s);
  ck_assert_uint_eq(read_keys(s, 77, 1, 4096), 0); /* never readable */
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- lookups ------------------------------------------------------------------------ */

START_TEST(lookups_from_l1_and_through_the_tiers_answer_as_in_process) {
  pid_t d = daemon_start();
  kva_runtime *rt = client_start();
  kva_storage *s = kva_storage_of(rt);
  client_wait_up(s);
  write_batch(s, 1, 5, 4096);
  ck_assert_int_eq(kva_flush(s, 900), KVA_OK);
  kva_key k[6];
  int st[6];
  for (int i = 0; i < 6; i++) k[i] = fixture_key(1 + i);
  ck_assert_int_eq(kva_delete(s, &k[4], 1, 0, st), 1); /* key 5: in the mock tier only */
  kva_tier_hits th;
  /* all in L1: answered by the L1 manager, the tier listed with none */
  ck_assert_int_eq(kva_lookup(s, k, 4, 0, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 4);
  ck_assert_uint_eq(th.ntiers, 2);
  ck_assert_str_eq(th.tier[0].name, "L1");
  ck_assert_uint_eq(th.tier[0].hits, 4);
  ck_assert_uint_eq(th.tier[1].hits, 0);
  /* past L1: the tier walk finds key 5, key 6 is nowhere */
  ck_assert_int_eq(kva_lookup(s, k, 6, 0, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 5);
  ck_assert_uint_eq(th.tier[0].hits, 4);
  ck_assert_uint_eq(th.tier[1].hits, 1);
  /* pinned through the walk: the L1 hits get one pin each */
  ck_assert_int_eq(kva_lookup(s, k, 6, 1, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 5);
  ck_assert_int_eq(kva_unpin(s, k, 4), 4);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

START_TEST(a_daemon_without_tiers_pins_its_l1_hits) {
  pid_t d = daemon_start_with(0, 0, "l2=[]");
  kva_runtime *rt = client_start();
  kva_storage *s = kva_storage_of(rt);
  client_wait_up(s);
  write_batch(s, 1, 3, 4096);
  kva_key k[4];
  for (int i = 0; i < 4; i++) k[i] = fixture_key(1 + i);
  kva_tier_hits th;
  ck_assert_int_eq(kva_lookup(s, k, 4, 1, &th), KVA_OK);
  ck_assert_uint_eq(th.total, 3);
  ck_assert_uint_eq(th.ntiers, 1);
  char report[256];
  ck_assert_int_eq(kva_memcheck(s, report, sizeof(report)), KVA_EIO); /* three pins held */
  ck_assert_int_eq(kva_unpin(s, k, 4), 3);                          /* key 4 was never pinned */
  ck_assert_int_eq(kva_unpin(s, k, 3), 0);                          /* nor twice */
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- metrics ------------------------------------------------------------------- */

START_TEST(the_daemons_metrics_match_its_stats_and_clients) {
  int port = 20000 + (int)(getpid() % 20000);
  char addr[64];
  snprintf(addr, sizeof(addr), "server.metrics_addr=127.0.0.1:%d", port);
  pid_t d = daemon_start_with(0, 0, addr);
  kva_runtime *rt = client_start();
  kva_storage *s = kva_storage_of(rt);
  client_wait_up(s);
  write_keys(s, 1, 8, 4096);
  ck_assert_uint_eq(read_keys(s, 1, 8, 4096), 8);
  /* one read lock and one pin held while the page is read */
  kva_key k = fixture_key(1);
  kva_prefetch *h;
  size_t hits;
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, NULL, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  kva_tier_hits th;
  ck_assert_int_eq(kva_lookup(s, &k, 1, 1, &th), KVA_OK);
  kva_storage_stats st;
  ck_assert_int_eq(kva_storage_get_stats(s, &st), KVA_OK);
  static char page[1 << 16];
  scrape_metrics(port, page, sizeof(page));
  ck_assert_uint_gt(scrape_check_format(page), 10);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l1_objects"), st.l1_objects);
  ck_assert_uint_eq(scrape_u64(page, "kvact_l1_hits_total"), st.hits);
  ck_assert_uint_eq(scrape_u64(page, "kvact_clients_connected"), 1);
  char sample[160];
  snprintf(sample, sizeof(sample), "kvact_client_locks{pid=\"%d\",uid=\"%u\",kind=\"read\"}",
           (int)getpid(), (unsigned)getuid());
  ck_assert_uint_eq(scrape_u64(page, sample), 1);
  snprintf(sample, sizeof(sample), "kvact_client_locks{pid=\"%d\",uid=\"%u\",kind=\"pin\"}",
           (int)getpid(), (unsigned)getuid());
  ck_assert_uint_eq(scrape_u64(page, sample), 1);
  ck_assert_uint_ge(scrape_u64(page, "kvact_prefetch_latency_seconds_count"), 9);
  ck_assert_int_eq(kva_unpin(s, &k, 1), 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("mp");
  TCase *tc = tcase_create("mp");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, clients_read_each_others_chunks_byte_exact);
  tcase_add_test(tc, a_killed_client_leaves_no_lock_and_loses_nothing);
  tcase_add_test(tc, a_client_survives_the_daemon_restarting);
  tcase_add_test(tc, a_second_daemon_on_the_same_socket_refuses_to_start);
  tcase_add_test(tc, a_stale_socket_file_is_replaced);
  tcase_add_test(tc, malformed_frames_close_only_their_connection);
  tcase_add_test(tc, a_client_of_another_protocol_version_is_told_why);
  tcase_add_test(tc, a_peer_of_another_uid_is_refused);
  tcase_add_test(tc, a_client_without_a_daemon_starts_and_gets_errors);
  tcase_add_test(tc, kv_store_in_one_process_and_kv_load_in_another_are_bit_exact);
  tcase_add_test(tc, the_daemons_metrics_match_its_stats_and_clients);
  tcase_add_test(tc, calls_to_a_stopped_daemon_time_out_and_late_locks_are_given_back);
  tcase_add_test(tc, a_live_process_keeps_its_locks_until_it_exits);
  tcase_add_test(tc, lookups_from_l1_and_through_the_tiers_answer_as_in_process);
  tcase_add_test(tc, a_daemon_without_tiers_pins_its_l1_hits);
  suite_add_tcase(s, tc);
  return s;
}
