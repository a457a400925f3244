/*
 * l2_shutdown_test.c — shutdown with work in flight releases every L1 and
 * L2 lock (docs/invariants.md I-SD-2): prefetches and stores still running
 * against a slow mock, prefetches done but never read, and a thread
 * blocked in kva_wait_prefetch while another shuts the runtime down.
 *
 * Locks are judged by what the actors say when they stop: the L1 manager
 * warns about objects still locked, each controller about work still in
 * flight, the mock about lookup locks still held, and storage_drain about
 * work it gave up on (l2_log_lock_warnings). Before shutdown, kva_memcheck
 * and L1_INSPECT show the locks are really held, so the tests do not pass
 * by shutting down an idle runtime.
 */
#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "l1/l1_manager.h"
#include "storage/storage_internal.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define MiB (1024u * 1024u)
#define SLOW_US 200000u       /* 200 ms per mock operation: work stays in flight */
#define NPF 8u                /* prefetches in flight, 2 keys each */
#define STORE_SLOW_US 500000u /* per STORE: two tasks keep a tier busy 1 s */

/* Loop tests run threaded (_i = 0) and deterministic (_i = 1). */
static const int workers[] = {2, 0};

static void submit_pairs(kva_storage *s, kva_prefetch **h) {
  kva_layout l = fixture_layout_basic();
  for (uint64_t i = 0; i < NPF; i++) {
    uint64_t ids[2] = {2 * i, 2 * i + 1};
    h[i] = l2_submit(s, ids, 2, &l, 0);
  }
}

/* A storage with one mock tier holding keys [0, 2 * NPF) (version 0), at
 * most 4 prefetches past their lookup, and the mock slowed down to SLOW_US
 * after the seeding; log lines are captured from here on. Then NPF
 * prefetches of two keys each (submit_pairs). */
static kva_runtime *start_prefetches(int nworkers, kva_prefetch **h) {
  kva_runtime *rt = l2_start(nworkers, 64 * MiB, 1, "", "prefetch_max_in_flight=4", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 2 * NPF, &l);
  l2_set_latency(s, 0, SLOW_US);
  l2_log_start(KVA_LOG_WARN);
  submit_pairs(s, h);
  return rt;
}

/* Lets what was just submitted reach the runtime's actors, then asserts
 * pred: deterministic mode runs until idle (virtual time stands still, so
 * nothing that waits for the mock completes), threaded mode polls for up
 * to 5 s. */
static void settle(kva_runtime *rt, bool threaded, bool (*pred)(kva_storage *s, void *arg),
                   const char *what) {
  kva_storage *s = kva_storage_of(rt);
  if (!threaded) kva_runtime_run_until_idle(rt);
  ck_assert_msg(threaded ? l2_wait_until(pred, s, NULL, 5000) : pred(s, NULL), "%s", what);
}

/* The mock holds lookup locks: the first prefetches reached it. */
static bool l2_locked(kva_storage *s, void *arg) {
  return l2_stats(s, 0).keys_locked > 0;
}

/* Shuts down; how long that took, in milliseconds. */
static unsigned timed_shutdown(kva_runtime *rt) {
  uint64_t t0 = fixture_now_ns();
  kva_runtime_shutdown(rt);
  return (unsigned)((fixture_now_ns() - t0) / 1000000u);
}

/* Shuts down, fails on a hang (> limit_ms) or on any lock warning. */
static void shutdown_clean(kva_runtime *rt, unsigned limit_ms) {
  unsigned ms = timed_shutdown(rt);
  l2_log_stop();
  ck_assert_msg(ms < limit_ms, "shutdown took %u ms", ms);
  ck_assert_msg(l2_log_lock_warnings() == 0, "locks left at shutdown:\n%s", l2_log_text());
}

START_TEST(shutdown_with_prefetches_in_flight_releases_all_locks) {
  kva_prefetch *h[NPF];
  kva_runtime *rt = start_prefetches(2, h);
  settle(rt, true, l2_locked, "no prefetch reached the mock");
  shutdown_clean(rt, 10000);
}
END_TEST

/* The handles are never read: after shutdown they are gone with the
 * storage. Virtual time stands still unless the drain waits for a reply,
 * so the prefetches are exactly where this test put them. */
START_TEST(deterministic_shutdown_with_prefetches_in_flight) {
  kva_prefetch *h[NPF];
  kva_runtime *rt = start_prefetches(0, h);
  kva_storage *s = kva_storage_of(rt);
  kva_runtime_run_until_idle(rt);
  ck_assert_uint_eq(l2_stats(s, 0).keys_locked, 8); /* 4 lookups of 2 keys */
  /* lookups answered at 200 ms; the loads share the mock's channel */
  kva_runtime_advance(rt, 250u * 1000000u);
  char report[256];
  ck_assert_int_eq(kva_memcheck(s, report, sizeof(report)), KVA_EIO);
  ck_assert_int_ne(l2_l1_state(s, 0) & L1_WRITE_LOCKED, 0); /* a load buffer */
  shutdown_clean(rt, 10000);
}
END_TEST

START_TEST(memcheck_fails_while_prefetches_hold_locks_then_passes) {
  kva_prefetch *h[NPF];
  kva_runtime *rt = start_prefetches(workers[_i], h);
  kva_storage *s = kva_storage_of(rt);
  settle(rt, workers[_i] != 0, l2_locked, "no prefetch reached the mock");
  char report[256] = "";
  ck_assert_int_eq(kva_memcheck(s, report, sizeof(report)), KVA_EIO);
  ck_assert_msg(report[0] != '\0', "memcheck failed without a report");
  for (uint64_t i = 0; i < NPF; i++) {
    size_t hits = 0;
    int wait_ms = workers[_i] ? 10000 : 60000; /* virtual: 16 loads queue on one channel */
    ck_assert_int_eq(kva_wait_prefetch(s, h[i], wait_ms, &hits), KVA_OK);
    ck_assert_uint_eq(hits, 2);
    l2_read_release_range(s, 2 * i, 2, 0);
  }
  l2_assert_unlocked(s);
  fixture_memcheck_clean(s);
  shutdown_clean(rt, 10000);
}
END_TEST

/* Whether a store task holds one of the keys write_slow_stores wrote. */
static bool store_locked(kva_storage *s, void *arg) {
  for (uint64_t id = 100; id < 108; id++)
    if (l2_readers(s, id) > 0) return true;
  return false;
}

/* Two writes of four keys: two store tasks per tier, STORE_SLOW_US each on
 * a mock's one channel. A read lock of theirs is seen before shutdown
 * (any key's: on a loaded machine the first task may be done already). */
static void write_slow_stores(kva_runtime *rt, bool threaded) {
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  for (uint64_t i = 0; i < 2; i++) l2_write_range(s, 100 + 4 * i, 4, &l, 1);
  settle(rt, threaded, store_locked, "no store task holds a lock");
}

START_TEST(shutdown_with_stores_in_flight_releases_all_locks) {
  kva_runtime *rt = l2_start(workers[_i], 64 * MiB, 1, "", NULL);
  l2_set_latency(kva_storage_of(rt), 0, STORE_SLOW_US);
  l2_log_start(KVA_LOG_WARN);
  write_slow_stores(rt, workers[_i] != 0);
  shutdown_clean(rt, 10000);
}
END_TEST

/* Stores and prefetches in flight at once, on two slow tiers. */
START_TEST(shutdown_with_stores_and_prefetches_in_flight) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 2, "", "prefetch_max_in_flight=4", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 1, 0, 2 * NPF, &l);
  l2_set_latency(s, 0, STORE_SLOW_US);
  l2_set_latency(s, 1, STORE_SLOW_US);
  l2_log_start(KVA_LOG_WARN);
  kva_prefetch *h[NPF];
  submit_pairs(s, h);
  write_slow_stores(rt, true);
  shutdown_clean(rt, 10000);
}
END_TEST

/* Waits (threaded mode) until the prefetch's port says it is done, without
 * taking its result. */
static void wait_done_unread(kva_prefetch *h) {
  struct pollfd p = {.fd = kva_prefetch_eventfd(h), .events = POLLIN};
  ck_assert_int_ge(p.fd, 0);
  ck_assert_int_eq(poll(&p, 1, 10000), 1);
}

/* Prefetches answered from L1 only, from L2 only, from both, and one with
 * extra readers: all done, none read. */
static void submit_unread(kva_storage *s, kva_prefetch **h) {
  kva_layout l = fixture_layout_basic();
  l2_write_range(s, 200, 4, &l, 1);
  l2_flush(s);
  l2_seed_range(s, 0, 0, 2 * NPF, &l);
  uint64_t a[2] = {200, 201}, b[3] = {0, 1, 2}, c[3] = {202, 3, 4}, d[1] = {200};
  h[0] = l2_submit(s, a, 2, &l, 0);
  h[1] = l2_submit(s, b, 3, &l, 0);
  h[2] = l2_submit(s, c, 3, &l, 0);
  h[3] = l2_submit(s, d, 1, &l, 2);
}

static void expect_unread_locks(kva_storage *s) {
  ck_assert_int_eq(l2_readers(s, 200), 4); /* 1 from h[0], 3 from h[3] */
  ck_assert_int_eq(l2_readers(s, 201), 1);
  ck_assert_int_eq(l2_readers(s, 0), 1);
  ck_assert_int_eq(l2_readers(s, 2), 1);
  ck_assert_int_eq(l2_readers(s, 202), 1);
  ck_assert_int_eq(l2_readers(s, 4), 1);
  ck_assert_int_eq(l2_readers(s, 203), 0);
  char report[256];
  ck_assert_int_eq(kva_memcheck(s, report, sizeof(report)), KVA_EIO);
}

START_TEST(shutdown_releases_read_locks_of_prefetches_nobody_read) {
  kva_runtime *rt = l2_start(workers[_i], 64 * MiB, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  l2_log_start(KVA_LOG_WARN);
  kva_prefetch *h[4];
  submit_unread(s, h);
  if (workers[_i])
    for (int i = 0; i < 4; i++) wait_done_unread(h[i]);
  else
    kva_runtime_run_until_idle(rt);
  expect_unread_locks(s);
  shutdown_clean(rt, 10000);
}
END_TEST

/* ---- a waiter blocked in kva_wait_prefetch(-1) during shutdown ----------- */

typedef struct waiter {
  kva_storage *s;
  kva_prefetch *h;
  int rc;
  size_t hits;
} waiter;

/* Touches nothing after the wait returns: the storage may be gone. */
static void *wait_forever(void *arg) {
  waiter *w = arg;
  w->rc = kva_wait_prefetch(w->s, w->h, -1, &w->hits);
  return NULL;
}

/* Two prefetches in flight, unread, and a third queued behind them
 * (prefetch_max_in_flight=2) that thread *t waits for with *w; the mock
 * takes latency_us per operation. */
static kva_runtime *start_waiter(uint64_t latency_us, waiter *w, pthread_t *t) {
  kva_runtime *rt = l2_start(2, 64 * MiB, 1, "", "prefetch_max_in_flight=2", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  l2_seed_range(s, 0, 0, 6, &l);
  l2_set_latency(s, 0, latency_us);
  l2_log_start(KVA_LOG_WARN);
  uint64_t a[2] = {0, 1}, b[2] = {2, 3}, c[2] = {4, 5};
  l2_submit(s, a, 2, &l, 0);
  l2_submit(s, b, 2, &l, 0);
  *w = (waiter){.s = s, .h = l2_submit(s, c, 2, &l, 0), .rc = 1};
  ck_assert_int_eq(pthread_create(t, NULL, wait_forever, w), 0);
  return rt;
}

/* Shutdown waits for the waiter's call, whose prefetch still runs to its
 * end, so the waiter gets its hits. Those read locks belong to the waiter,
 * who can no longer release them: the L1 manager's warning names exactly
 * them. */
START_TEST(waiter_in_wait_prefetch_returns_when_shutdown_runs) {
  waiter w;
  pthread_t t;
  kva_runtime *rt = start_waiter(SLOW_US, &w, &t);
  kva_storage *s = kva_storage_of(rt);
  /* the waiter is inside its call once the facade counts it */
  uint64_t deadline = fixture_now_ns() + 5000000000ull;
  while (__atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST) == 0 && fixture_now_ns() < deadline)
    sched_yield();
  ck_assert_uint_gt(__atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST), 0);
  l2_sleep_ms(20);
  unsigned ms = timed_shutdown(rt);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  l2_log_stop();
  ck_assert_msg(ms < 10000, "shutdown took %u ms", ms);
  ck_assert_int_eq(w.rc, KVA_OK);
  ck_assert_uint_eq(w.hits, 2);
  ck_assert_msg(l2_log_count("l1: stopping with 0 write-locked and 2 read-locked objects") == 1 &&
                    l2_log_lock_warnings() == 1,
                "expected only the waiter's 2 read locks:\n%s", l2_log_text());
}
END_TEST

/* The same with the waiter's result read before shutdown: no lock is left
 * anywhere. (The waiter releases its locks before the main thread shuts
 * down, so only the controllers' own work is in flight.) */
START_TEST(waiter_that_released_its_locks_leaves_none) {
  waiter w;
  pthread_t t;
  kva_runtime *rt = start_waiter(SLOW_US / 4, &w, &t);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_int_eq(w.rc, KVA_OK);
  ck_assert_uint_eq(w.hits, 2);
  l2_read_release_range(kva_storage_of(rt), 4, 2, 0);
  shutdown_clean(rt, 10000);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_shutdown");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, shutdown_with_prefetches_in_flight_releases_all_locks);
  tcase_add_test(tc, deterministic_shutdown_with_prefetches_in_flight);
  tcase_add_loop_test(tc, memcheck_fails_while_prefetches_hold_locks_then_passes, 0, 2);
  tcase_add_loop_test(tc, shutdown_with_stores_in_flight_releases_all_locks, 0, 2);
  tcase_add_test(tc, shutdown_with_stores_and_prefetches_in_flight);
  tcase_add_loop_test(tc, shutdown_releases_read_locks_of_prefetches_nobody_read, 0, 2);
  tcase_add_test(tc, waiter_in_wait_prefetch_returns_when_shutdown_runs);
  tcase_add_test(tc, waiter_that_released_its_locks_leaves_none);
  suite_add_tcase(su, tc);
  return su;
}
