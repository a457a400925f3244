/*
 * mp_lockout_test.c — multi-process mode with real processes: peers that
 * would lock every other out by holding connections and saying nothing
 * (or too little, too slowly): client connections that never say hello,
 * metrics connections that trickle a request (mp_support.h, trickle.h).
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kvact.h"
#include "tests/server/mp_support.h"
#include "tests/server/scrape.h"
#include "tests/server/trickle.h"
#include "tests/support/fixture.h"
#include "wire/protocol.h"

static char page[SCRAPE_MAX];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- client connections without a hello -------------------------------------
 */

#define HELLO_MS 300
#define PEERS 8 /* more than server.max_clients (4): some are refused, the daemon full */

/* Whether the daemon closes fd within 5 s: EOF, or a reset (a Unix
 * socket closed with bytes of ours unread, half a hello, says so). */
static int closed_soon(int fd) {
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char c;
  ssize_t k;
  while ((k = read(fd, &c, 1)) > 0) {
  }
  return k == 0 || errno == ECONNRESET;
}

START_TEST(idle_connections_are_closed_after_hello_deadline) {
  char hello_kv[64];
  snprintf(hello_kv, sizeof(hello_kv), "server.hello_timeout_ms=%d", HELLO_MS);
  const char *const opts[] = {"server.max_clients=4", hello_kv, NULL};
  pid_t d = daemon_start_opts(0, 0, opts);
  /* PEERS connections that say nothing, or half a hello */
  uint8_t hello[64];
  proto_req q = {.type = P_HELLO, .pid = (uint32_t)getpid()};
  size_t hello_len = proto_req_put(hello, sizeof(hello), &q, 0);
  int fd[PEERS];
  for (int i = 0; i < PEERS; i++) {
    fd[i] = raw_connect();
    ck_assert_int_ge(fd[i], 0);
    if (i % 2) ck_assert_int_eq(write(fd[i], hello, hello_len / 2), (ssize_t)(hello_len / 2));
  }
  /* each is closed, told why: the full daemon's refusal, or the deadline
   * (generous bounds: 5 s for a deadline of 300 ms) */
  int full = 0;
  for (int i = 0; i < PEERS; i++) {
    struct timeval tv = {5, 0};
    setsockopt(fd[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char text[PROTO_MAX_TEXT + 1] = "";
    int t = read_frame(fd[i], text, sizeof(text));
    ck_assert_msg(t == P_REFUSED, "peer %d: no refusal within 5 s (%d)", i, t);
    ck_assert_msg(closed_soon(fd[i]), "peer %d: still open 5 s after its refusal", i);
    close(fd[i]);
    if (strstr(text, "server.max_clients")) {
      /* every connection it serves is one of these: idle */
      ck_assert_msg(strstr(text, "4 of them idle"), "refusal without the idle count: %s", text);
      full++;
    } else {
      ck_assert_msg(strstr(text, "hello") && strstr(text, "server.hello_timeout_ms"),
                    "closed without a reason: %s", text);
    }
  }
  ck_assert_int_ge(full, 1);
  /* a client gets in, and its connection outlives the deadline: a read
   * lock taken before it is released on the same connection after it */
  kva_runtime *rt = client_up();
  kva_storage *s = kva_storage_of(rt);
  write_keys(s, 1, 1, 4096);
  kva_key k = fixture_key(1);
  kva_prefetch *h;
  size_t hits = 0;
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, NULL, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 1);
  sleep_ms(4 * HELLO_MS);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
  ck_assert_uint_eq(read_keys(s, 1, 1, 4096), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- metrics connections that trickle
 * -------------------------------------------- */

/* Scrapes until an answer comes, as a scraper does at its next interval
 * (curl waits 10 s each time); fails after limit_s. Returns the seconds
 * it took. */
static double scrape_within(int port, double limit_s) {
  double t0 = now_s();
  for (;;) {
    int status = 0;
    int rc = scrape_url("GET", "127.0.0.1", port, "/metrics", page, sizeof(page), &status);
    if (rc == 0 && status == 200) return now_s() - t0;
    ck_assert_msg(now_s() - t0 < limit_s, "no scrape answered in %.0f s (curl %d, HTTP %d)",
                  limit_s, rc, status);
    sleep_ms(100);
  }
}

START_TEST(trickling_connections_do_not_block_a_scrape) {
  int port;
  pid_t d = daemon_start_metrics(NULL, &port); /* every metrics limit at its default */
  scrape_within(port, 10); /* the endpoint is up (it starts after the socket listens) */
  /* more than libmicrohttpd's default limit of 16, each byte well within
   * its default inactivity timeout of 10 s, from the scraper's address */
  trickle *t = trickle_start(NULL, port, 40, 200);
  sleep_ms(200); /* connected, and trickling */
  double took = scrape_within(port, 20);
  ck_assert_uint_gt(scrape_check_format(page), 10);
  trickle_stop(t);
  fprintf(stderr, "a scrape behind 40 trickling connections: answered in %.1f s\n", took);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("mp_lockout");
  TCase *tc = tcase_create("mp_lockout");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, idle_connections_are_closed_after_hello_deadline);
  tcase_add_test(tc, trickling_connections_do_not_block_a_scrape);
  suite_add_tcase(s, tc);
  return s;
}
