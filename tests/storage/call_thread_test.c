/*
 * call_thread_test.c — a facade call is served on the calling thread when
 * the L1 manager is idle (the thread lends itself to the turns its request
 * makes ready, actors/sched.c), and that changes nothing a caller can see:
 * no worker is woken for it, a prefetch answered meanwhile still makes its
 * eventfd readable; and a pooled actor, which may not lend nor wait, has
 * its blocking calls refused.
 *
 * runtime.spin_us = 0 puts idle workers to sleep at once, so a request
 * that went through the run queue would show as a worker wake-up.
 */
#include <check.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/storage_client.h"

#define CALLS 2000
enum { T_ASK = KVA_MSG_USER, T_FOUND };

static kva_runtime *start_sleepy(void) {
  kva_runtime *rt = fixture_storage(2, 64ull << 20, "runtime.spin_us=0", NULL);
  kva_runtime_counters c;
  for (int i = 0; i < 2000; i++) { /* both workers asleep before we count */
    kva_runtime_get_counters(rt, &c);
    if (c.worker_sleeps >= 2) break;
    usleep(1000);
  }
  return rt;
}

static uint64_t wakes(kva_runtime *rt) {
  kva_runtime_counters c;
  kva_runtime_get_counters(rt, &c);
  return c.worker_wakes;
}

START_TEST(calls_on_an_idle_l1_wake_no_worker) {
  kva_runtime *rt = start_sleepy();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(4096);
  fixture_write(s, 0, 4, &l);
  usleep(20000); /* the write's note to the eviction controller handled */
  kva_key k[4];
  key_range(k, 0, 4);
  uint64_t before = wakes(rt);
  for (int i = 0; i < CALLS; i++) {
    kva_tier_hits h;
    ck_assert_int_eq(kva_lookup(s, k, 4, 0, &h), KVA_OK);
    ck_assert_uint_eq(h.total, 4);
    kva_prefetch *p;
    size_t hits = 0;
    ck_assert_int_eq(kva_submit_prefetch(s, k, 4, &l, 0, &p), KVA_OK);
    ck_assert_int_eq(kva_wait_prefetch(s, p, -1, &hits), KVA_OK);
    ck_assert_uint_eq(hits, 4);
    kva_buf b[4];
    ck_assert_int_eq(kva_read_prefetched(s, k, 4, b), KVA_OK);
    ck_assert_int_eq(kva_finish_read_prefetched(s, k, 4, 0), 4);
  }
  /* four requests a round, none through a sleeping worker (the eviction
   * controller's timer may wake one now and then) */
  uint64_t woken = wakes(rt) - before;
  ck_assert_msg(woken < CALLS / 20, "%lu worker wake-ups for %d rounds", (unsigned long)woken,
                CALLS);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(a_prefetch_answered_during_its_submit_has_a_readable_eventfd) {
  kva_runtime *rt = start_sleepy();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(4096);
  fixture_write(s, 0, 1, &l);
  kva_key k = fixture_key(0);
  for (int i = 0; i < 100; i++) {
    kva_prefetch *p;
    ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, &l, 0, &p), KVA_OK);
    /* the L1 manager answered inside the submit: the fd is readable now,
     * and an engine's epoll loop that waits on it wakes */
    struct pollfd pf = {.fd = kva_prefetch_eventfd(p), .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, 5000), 1);
    size_t hits = 0;
    ck_assert_int_eq(kva_query_prefetch(s, p, &hits), KVA_OK);
    ck_assert_uint_eq(hits, 1);
    ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
  }
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* An actor that makes a facade call from its receive and reports its
 * result and the keys found. */
typedef struct caller_state {
  kva_storage *s;
  kva_port *report;
} caller_state;

typedef struct caller_said {
  int rc;
  int found;
} caller_said;

static void caller_receive(kva_actor *self, void *state, const kva_msg *m) {
  caller_state *c = state;
  kva_key k = fixture_key(m->tag);
  kva_tier_hits h = {0};
  caller_said r = {.rc = kva_lookup(c->s, &k, 1, 0, &h)};
  r.found = (int)h.total;
  kva_send(kva_port_actor(c->report), T_FOUND, &r, sizeof(r), self, m->tag);
}

/* A pooled actor that waited for the L1 manager would hold the worker the
 * manager was made ready on (a deadlock with one worker, or with the
 * worker's next slot): its blocking calls are refused at once and change
 * nothing. A pinned actor has a thread of its own to wait on: its calls
 * are answered (by the workers; it may not lend either). */
START_TEST(an_actors_blocking_calls_are_refused_unless_it_is_pinned) {
  kva_runtime *rt = start_sleepy();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(4096);
  fixture_write(s, 0, 8, &l);
  kva_port *report = kva_port_open(rt, "report");
  caller_state c = {s, report};
  kva_behavior b = {.name = "caller", .receive = caller_receive};
  for (int pinned = 0; pinned < 2; pinned++) {
    kva_spawn_opts o = {.pinned = pinned};
    kva_actor *a = kva_spawn(rt, &b, &c, &o);
    ck_assert_ptr_nonnull(a);
    for (uint64_t i = 0; i < 16; i++) {
      ck_assert_int_eq(kva_send(a, T_ASK, NULL, 0, NULL, i), KVA_OK);
      caller_said r = {-100, -100};
      kva_msg m = fixture_recv(report, &r, sizeof(r), 10000);
      ck_assert_uint_eq(m.tag, i);
      ck_assert_int_eq(r.rc, pinned ? KVA_OK : KVA_EINVAL);
      ck_assert_int_eq(r.found, pinned && i < 8 ? 1 : 0);
    }
    kva_actor_stop(a);
  }
  kva_port_close(report);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("call_thread");
  TCase *tc = tcase_create("lend");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, calls_on_an_idle_l1_wake_no_worker);
  tcase_add_test(tc, a_prefetch_answered_during_its_submit_has_a_readable_eventfd);
  tcase_add_test(tc, an_actors_blocking_calls_are_refused_unless_it_is_pinned);
  suite_add_tcase(s, tc);
  return s;
}
