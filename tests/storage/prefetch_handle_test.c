/*
 * prefetch_handle_test.c — the prefetch handle API: query, wait with a
 * timeout, the eventfd, extra readers, read_prefetched's all-or-nothing
 * rule, and handles that are consumed, stale, foreign or made up.
 */
#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/storage_client.h"

START_TEST(consumed_prefetch_handle_is_refused) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[2];
  key_range(k, 0, 2);
  fixture_write(s, 0, 2, &l);
  /* consumed by wait */
  kva_prefetch *h;
  size_t hits;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 2, &l, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 2);
  hits = 42;
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 0, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 100, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_prefetch_eventfd(h), KVA_EINVAL);
  ck_assert_uint_eq(hits, 42);
  /* consumed by query */
  ck_assert_int_eq(kva_submit_prefetch(s, k, 2, &l, 0, &h), KVA_OK);
  int rc;
  while ((rc = kva_query_prefetch(s, h, &hits)) == KVA_EAGAIN) {
  }
  ck_assert_int_eq(rc, KVA_OK);
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_wait_prefetch(s, h, -1, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_prefetch_eventfd(h), KVA_EINVAL);
  /* two prefetches, two lock each */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* A handle is its session's address; see storage_read.c. */
/* The session a handle names: its low 32 bits (storage_read.c). */
static uintptr_t handle_session(const kva_prefetch *h) {
  return (uintptr_t)h & 0xffffffffu;
}

/* A stale handle stays refused while its session serves other prefetches,
 * and it never returns the new prefetch's result. */
START_TEST(stale_handle_is_refused_after_its_session_is_reused) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  key_range(k, 0, 3);
  fixture_write(s, 0, 3, &l);
  kva_prefetch *old;
  size_t hits;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 1, &l, 0, &old), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s, old, 5000, &hits), KVA_OK);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 1, 0), 1);
  int reused = 0;
  for (int i = 0; i < 64; i++) {
    kva_prefetch *h;
    ck_assert_int_eq(kva_submit_prefetch(s, k, 3, &l, 0, &h), KVA_OK);
    ck_assert_ptr_ne(h, old);
    reused += handle_session(h) == handle_session(old);
    hits = 42;
    ck_assert_int_eq(kva_query_prefetch(s, old, &hits), KVA_EINVAL);
    ck_assert_int_eq(kva_wait_prefetch(s, old, 10, &hits), KVA_EINVAL);
    ck_assert_int_eq(kva_prefetch_eventfd(old), KVA_EINVAL);
    ck_assert_uint_eq(hits, 42);
    ck_assert_int_ge(kva_prefetch_eventfd(h), 0);
    ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK); /* still its result */
    ck_assert_uint_eq(hits, 3);
    ck_assert_int_eq(kva_finish_read_prefetched(s, k, 3, 0), 3);
  }
  ck_assert_int_gt(reused, 0);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(made_up_or_foreign_handle_is_refused) {
  kva_runtime *rt = start_store(), *rt2 = start_store();
  kva_storage *s = kva_storage_of(rt), *s2 = kva_storage_of(rt2);
  kva_layout l = fixture_layout_basic();
  kva_key k = fixture_key(0);
  fixture_write(s, 0, 1, &l);
  size_t hits = 42;
  /* made-up values, aligned or not, are looked up and refused, never read */
  const uintptr_t made_up[] = {0x1234, 0x1240, 0x7fff00001000, 1, 0xffffffffffffffff};
  for (size_t i = 0; i < sizeof(made_up) / sizeof(made_up[0]); i++) {
    kva_prefetch *bogus = (kva_prefetch *)made_up[i];
    ck_assert_int_eq(kva_query_prefetch(s, bogus, &hits), KVA_EINVAL);
    ck_assert_int_eq(kva_wait_prefetch(s, bogus, 10, &hits), KVA_EINVAL);
    ck_assert_int_eq(kva_prefetch_eventfd(bogus), KVA_EINVAL);
  }
  ck_assert_uint_eq(hits, 42);
  /* a live handle of another storage, or with no storage, is refused and
   * stays usable with its own */
  kva_prefetch *h;
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, &l, 0, &h), KVA_OK);
  ck_assert_int_eq(kva_wait_prefetch(s2, h, 10, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_query_prefetch(s2, h, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_wait_prefetch(NULL, h, 10, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_query_prefetch(NULL, h, &hits), KVA_EINVAL);
  ck_assert_uint_eq(hits, 42);
  ck_assert_int_eq(kva_wait_prefetch(s, h, 5000, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
  fixture_memcheck_clean(s);
  fixture_memcheck_clean(s2);
  kva_runtime_shutdown(rt2);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- the prefetch handle API -------------------------------------------- */

START_TEST(prefetch_eventfd_is_readable_when_done) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  key_range(k, 0, 5);
  fixture_write(s, 0, 5, &l);
  kva_prefetch *h;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 5, &l, 0, &h), KVA_OK);
  int fd = kva_prefetch_eventfd(h);
  ck_assert_int_ge(fd, 0);
  struct pollfd p = {.fd = fd, .events = POLLIN};
  ck_assert_int_eq(poll(&p, 1, 5000), 1);
  ck_assert(p.revents & POLLIN);
  size_t hits = 0;
  int rc;
  while ((rc = kva_query_prefetch(s, h, &hits)) == KVA_EAGAIN) {
  }
  ck_assert_int_eq(rc, KVA_OK);
  ck_assert_uint_eq(hits, 5);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 5, 0), 5);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* In deterministic mode nothing runs until the caller drives it: the
 * eventfd turns readable once the scheduler has run. */
START_TEST(prefetch_eventfd_turns_readable_when_the_scheduler_runs) {
  kva_runtime *rt = fixture_storage(0, 64 * MiB, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  key_range(k, 0, 3);
  fixture_write(s, 0, 3, &l);
  kva_prefetch *h;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 3, &l, 0, &h), KVA_OK);
  struct pollfd p = {.fd = kva_prefetch_eventfd(h), .events = POLLIN};
  ck_assert_int_ge(p.fd, 0);
  ck_assert_int_eq(poll(&p, 1, 0), 0);
  ck_assert_int_gt(kva_runtime_run_until_idle(rt), 0);
  ck_assert_int_eq(poll(&p, 1, 0), 1);
  size_t hits = 0;
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 3);
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 3, 0), 3);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(query_polls_until_done_then_refuses) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[4];
  key_range(k, 0, 4);
  fixture_write(s, 0, 3, &l);
  kva_prefetch *h;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 4, &l, 0, &h), KVA_OK);
  size_t hits = 0;
  int rc;
  uint64_t deadline = fixture_now_ns() + 5000000000ull;
  while ((rc = kva_query_prefetch(s, h, &hits)) == KVA_EAGAIN) {
    ck_assert_uint_eq(hits, 0);
    ck_assert_uint_lt(fixture_now_ns(), deadline);
  }
  ck_assert_int_eq(rc, KVA_OK);
  ck_assert_uint_eq(hits, 3);
  ck_assert_int_eq(kva_query_prefetch(s, h, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 3, 0), 3);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(wait_with_timeout_returns_the_result) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[4];
  key_range(k, 0, 4);
  fixture_write(s, 0, 4, &l);
  const int timeouts[] = {-1, 1, 1000};
  for (int t = 0; t < 3; t++) {
    kva_prefetch *h;
    size_t hits = 0;
    ck_assert_int_eq(kva_submit_prefetch(s, k, 4, &l, 0, &h), KVA_OK);
    int rc;
    while ((rc = kva_wait_prefetch(s, h, timeouts[t], &hits)) == KVA_ETIMEDOUT) {
    }
    ck_assert_int_eq(rc, KVA_OK);
    ck_assert_uint_eq(hits, 4);
    ck_assert_int_eq(kva_wait_prefetch(s, h, timeouts[t], &hits), KVA_EINVAL);
    ck_assert_int_eq(kva_finish_read_prefetched(s, k, 4, 0), 4);
  }
  /* timeout 0: a wait that gives up at once, with the same answer */
  kva_prefetch *h;
  size_t hits = 0;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 4, &l, 0, &h), KVA_OK);
  int rc;
  while ((rc = kva_wait_prefetch(s, h, 0, &hits)) == KVA_ETIMEDOUT) {
  }
  ck_assert_int_eq(rc, KVA_OK);
  ck_assert_uint_eq(hits, 4);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 4, 0), 4);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* Keeps the L1 manager busy with large UPDATE batches of missing keys
 * (each refused key by key, changing nothing) until told to stop. */
typedef struct busy_ctx {
  kva_storage *s;
  int stop;   /* atomic */
  int rounds; /* atomic: batches completed */
  int ready;  /* atomic: about to send the first batch */
} busy_ctx;

#define BUSY_KEYS 300000

static void *busy_main(void *arg) {
  busy_ctx *c = arg;
  kva_layout l = fixture_layout_basic();
  kva_key *k = malloc(BUSY_KEYS * sizeof(*k));
  kva_buf *b = malloc(BUSY_KEYS * sizeof(*b));
  int *st = malloc(BUSY_KEYS * sizeof(*st));
  if (!k || !b || !st) abort();
  key_range(k, 1000000, BUSY_KEYS);
  __atomic_store_n(&c->ready, 1, __ATOMIC_RELEASE);
  while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
    if (kva_reserve_write(c->s, k, BUSY_KEYS, &l, KVA_WRITE_UPDATE, b, st) != 0) abort();
    __atomic_add_fetch(&c->rounds, 1, __ATOMIC_RELAXED);
  }
  free(k);
  free(b);
  free(st);
  return NULL;
}

/* A wait that times out leaves the handle usable. The L1 manager is kept
 * busy so that the prefetch is still queued when the wait gives up. */
START_TEST(wait_timeout_keeps_the_handle) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[2];
  key_range(k, 0, 2);
  fixture_write(s, 0, 2, &l);
  busy_ctx c = {.s = s};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, busy_main, &c), 0);
  while (!__atomic_load_n(&c.ready, __ATOMIC_ACQUIRE)) sched_yield();
  int timed_out = 0, again = 0;
  uint64_t deadline = fixture_now_ns() + 20000000000ull;
  while (!timed_out && fixture_now_ns() < deadline) {
    kva_prefetch *h;
    size_t hits = 42;
    ck_assert_int_eq(kva_submit_prefetch(s, k, 2, &l, 0, &h), KVA_OK);
    int rc = kva_query_prefetch(s, h, &hits);
    if (rc == KVA_EAGAIN) {
      again++;
      ck_assert_uint_eq(hits, 42);
      rc = kva_wait_prefetch(s, h, 1, &hits);
      if (rc == KVA_ETIMEDOUT) {
        timed_out = 1;
        ck_assert_uint_eq(hits, 42);
        ck_assert_int_ge(kva_prefetch_eventfd(h), 0);
        rc = kva_wait_prefetch(s, h, -1, &hits);
      }
    }
    ck_assert_int_eq(rc, KVA_OK);
    ck_assert_uint_eq(hits, 2);
    ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  }
  __atomic_store_n(&c.stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  ck_assert_msg(timed_out, "no wait timed out (%d EAGAIN, %d busy rounds)", again, c.rounds);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* 1 + extra_readers locks per key: each finish with extra 0 drops one. */
START_TEST(extra_readers_hold_one_plus_extra_locks) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[2];
  key_range(k, 0, 2);
  fixture_write(s, 0, 2, &l);
  ck_assert_uint_eq(prefetch(s, k, 2, 2), 2);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
    ck_assert_uint_eq(stats_of(s).l1_read_locked, 2);
    ck_assert_int_eq(update_count(s, k, 2), 0);
  }
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 0);
  /* a release with nothing held: wrong state, nothing released */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 0);
  ck_assert_int_eq(update_count(s, k, 2), 2);
  /* prefetches stack their locks */
  ck_assert_uint_eq(prefetch(s, k, 2, 1), 2);
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 1), 2);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 1, 0), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* LMCache quirk kept: a failed read releases ONE lock of each good key,
 * whatever extra_readers the prefetch took. */
START_TEST(read_prefetched_failure_releases_one_lock_per_good_key) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  kva_buf b[5];
  key_range(k, 0, 5);
  fixture_write(s, 0, 5, &l);
  ck_assert_uint_eq(prefetch(s, k + 1, 4, 2), 4); /* 3 locks each */
  ck_assert_int_eq(kva_read_prefetched(s, k, 5, b), KVA_KEY_NOT_READABLE);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 4);
  ck_assert_int_eq(kva_read_prefetched(s, k, 5, b), KVA_KEY_NOT_READABLE);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 4);
  ck_assert_int_eq(kva_read_prefetched(s, k + 1, 4, b), KVA_OK); /* one lock left */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k + 1, 4, 0), 4);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 0);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* The error is the first problematic key's, and every good key still
 * loses one lock. */
START_TEST(read_prefetched_reports_the_first_problem) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[3];
  kva_buf b[3];
  fixture_write(s, 0, 2, &l);
  const uint64_t unlocked_first[] = {1, 0, 9}; /* 1 locked, 0 unlocked, 9 missing */
  keys_of(k, unlocked_first, 3);
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1);
  ck_assert_int_eq(kva_read_prefetched(s, k, 3, b), KVA_KEY_NOT_READABLE);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 0);
  const uint64_t missing_first[] = {1, 9, 0};
  keys_of(k, missing_first, 3);
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1);
  ck_assert_int_eq(kva_read_prefetched(s, k, 3, b), KVA_KEY_NOT_EXIST);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 0);
  /* a write-locked key is not readable, and keeps its write lock */
  kva_key w = fixture_key(5);
  kva_buf wb;
  int st;
  ck_assert_int_eq(kva_reserve_write(s, &w, 1, &l, KVA_WRITE_NEW, &wb, &st), 1);
  k[1] = w;
  ck_assert_uint_eq(prefetch(s, k, 1, 0), 1);
  ck_assert_int_eq(kva_read_prefetched(s, k, 2, b), KVA_KEY_NOT_READABLE);
  kva_storage_stats x = stats_of(s);
  ck_assert_uint_eq(x.l1_read_locked, 0);
  ck_assert_uint_eq(x.l1_write_locked, 1);
  ck_assert_int_eq(kva_finish_write(s, &w, 1, &st), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("prefetch_handle_test");
  TCase *tc = tcase_create("prefetch_api");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, consumed_prefetch_handle_is_refused);
  tcase_add_test(tc, stale_handle_is_refused_after_its_session_is_reused);
  tcase_add_test(tc, made_up_or_foreign_handle_is_refused);
  tcase_add_test(tc, prefetch_eventfd_is_readable_when_done);
  tcase_add_test(tc, prefetch_eventfd_turns_readable_when_the_scheduler_runs);
  tcase_add_test(tc, query_polls_until_done_then_refuses);
  tcase_add_test(tc, wait_with_timeout_returns_the_result);
  tcase_add_test(tc, wait_timeout_keeps_the_handle);
  tcase_add_test(tc, extra_readers_hold_one_plus_extra_locks);
  tcase_add_test(tc, read_prefetched_failure_releases_one_lock_per_good_key);
  tcase_add_test(tc, read_prefetched_reports_the_first_problem);
  suite_add_tcase(s, tc);
  return s;
}
