/*
 * mp_peers_test.c — multi-process mode with real processes, the peers:
 * the socket file (replaced when stale, left alone when another
 * daemon's), malformed frames and other protocols and versions, a client
 * before its daemon, a daemon that stops answering, a live process whose
 * connection breaks, the metrics (mp_support.h). Peers of other uids and
 * groups: mp_admission_test.c.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvact.h"
#include "tests/server/mp_support.h"
#include "tests/server/scrape.h"
#include "tests/support/fixture.h"
#include "wire/protocol.h"
#include "wire/sock.h"

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
  struct sockaddr_un a;
  ck_assert_int_eq(wire_unix_addr(sock_path, &a), KVA_OK);
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

/* The file was removed under the first daemon and a second one started
 * on the same path: stopping the first leaves the second's file. */
START_TEST(a_stopping_daemon_leaves_a_socket_file_it_does_not_own) {
  pid_t d1 = daemon_start();
  ck_assert_int_eq(unlink(sock_path), 0);
  pid_t d2 = daemon_start(); /* it answers on the path now */
  struct stat before, after;
  ck_assert_int_eq(lstat(sock_path, &before), 0);
  ck_assert_int_eq(daemon_stop(d1, SIGTERM), 0);
  ck_assert_msg(lstat(sock_path, &after) == 0, "the first daemon removed the second's socket");
  ck_assert(after.st_dev == before.st_dev && after.st_ino == before.st_ino);
  kva_runtime *rt = client_up(); /* the second one still serves */
  kva_storage *s = kva_storage_of(rt);
  write_keys(s, 1, 1, 4096);
  ck_assert_uint_eq(read_keys(s, 1, 1, 4096), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d2, SIGTERM), 0);
  ck_assert_msg(lstat(sock_path, &after) != 0, "the second daemon left its own socket behind");
}
END_TEST

/* ---- peers that misbehave --------------------------------------------------------- */

START_TEST(malformed_frames_close_only_their_connection) {
  pid_t d = daemon_start();
  kva_runtime *rt = client_up();
  kva_storage *s = kva_storage_of(rt);
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

/* ---- a daemon that stops answering ---------------------------------------------- */

START_TEST(calls_to_a_stopped_daemon_time_out_and_late_locks_are_given_back) {
  pid_t d = daemon_start();
  kva_runtime *rt = client_up();
  kva_storage *s = kva_storage_of(rt);
  write_keys(s, 1, 1, 4096);
  kva_key a = fixture_key(1), b = fixture_key(2);
  ck_assert_uint_eq(prefetch_hits(s, &a, 1, NULL), 1); /* held across the stop */
  kill(d, SIGSTOP);
  wait_stopped(d);
  kva_layout l = fixture_layout_bytes(4096), got;
  kva_buf buf;
  int st = -99;
  /* calls whose replies carry an entry per key: answered late, they must
   * still be taken for what they are */
  ck_assert_int_eq(kva_read_prefetched(s, &a, 1, &buf), KVA_ETIMEDOUT);
  memset(&got, 0x11, sizeof(got));
  ck_assert_int_eq(kva_read_prefetched_layouts(s, &a, 1, &buf, &got), KVA_ETIMEDOUT);
  ck_assert_uint_eq(got.ntensors, 0x11111111u); /* untouched */
  ck_assert_int_eq(kva_delete(s, &b, 1, 0, &st), KVA_ETIMEDOUT);
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
  /* the late replies are decoded as the requests asked (their keys, a
   * read's layouts): the connection stays, and with it the read lock
   * taken before the stop */
  ck_assert_int_eq(kva_read_prefetched_layouts(s, &a, 1, &buf, &got), KVA_OK);
  fixture_assert_layout_eq(&got, &l);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &a, 1, 0), 1);
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
  proto_req res = {
      .type = P_RESERVE_WRITE, .n = 1, .layout = fixture_layout_bytes(4096), .keys = &k};
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
  kva_runtime *rt = client_up();
  kva_storage *s = kva_storage_of(rt);
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

/* ---- metrics ------------------------------------------------------------------- */

START_TEST(the_daemons_metrics_match_its_stats_and_clients) {
  int port;
  pid_t d = daemon_start_metrics(NULL, &port);
  kva_runtime *rt = client_up();
  kva_storage *s = kva_storage_of(rt);
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
  Suite *s = suite_create("mp_peers");
  TCase *tc = tcase_create("mp_peers");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, a_second_daemon_on_the_same_socket_refuses_to_start);
  tcase_add_test(tc, a_stale_socket_file_is_replaced);
  tcase_add_test(tc, a_stopping_daemon_leaves_a_socket_file_it_does_not_own);
  tcase_add_test(tc, malformed_frames_close_only_their_connection);
  tcase_add_test(tc, a_client_of_another_protocol_version_is_told_why);
  tcase_add_test(tc, a_client_without_a_daemon_starts_and_gets_errors);
  tcase_add_test(tc, the_daemons_metrics_match_its_stats_and_clients);
  tcase_add_test(tc, calls_to_a_stopped_daemon_time_out_and_late_locks_are_given_back);
  tcase_add_test(tc, a_live_process_keeps_its_locks_until_it_exits);
  suite_add_tcase(s, tc);
  return s;
}
