/*
 * l1_concurrency_test.c — many engine threads on one L1 manager (LMCache's
 * test_l1_manager.py scenarios 65-68, and one winner among writers of one
 * key): each batch is atomic because the manager handles one message at a
 * time.
 */
#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/l1_client.h"

/* ---- thread safety (65-68): 4 workers, callers on their own threads ----- */

#define THREADS 8
#define READERS 10

typedef struct caller {
  kva_storage *s;
  uint64_t base; /* its first key */
  int rc, st;    /* of its last request */
  int failures;  /* requests that did not do what they should */
  kva_buf b[5];
} caller;

static kva_runtime *start_threaded(kva_storage **s) {
  kva_runtime *rt = fixture_storage(4, 128 * MiB, NULL);
  *s = kva_storage_of(rt);
  return rt;
}

static void run_callers(caller *c, int n, void *(*fn)(void *)) {
  pthread_t th[16];
  for (int i = 0; i < n; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, fn, &c[i]), 0);
  for (int i = 0; i < n; i++) ck_assert_int_eq(pthread_join(th[i], NULL), 0);
}

static bool all_bytes(kva_buf b, unsigned char v) {
  const unsigned char *p = b.ptr;
  for (size_t i = 0; i < b.len; i++)
    if (p[i] != v) return false;
  return true;
}

/* Five keys in one call, filled with the thread's number. */
static void *write_five(void *p) {
  caller *c = p;
  uint64_t ids[5];
  int st[5];
  kva_layout l = fixture_layout_basic();
  for (int i = 0; i < 5; i++) ids[i] = c->base + (uint64_t)i;
  if (req_reserve_write(c->s, ids, 5, &l, KVA_WRITE_NEW, 0, c->b, st) != 5) {
    c->failures++;
    return NULL;
  }
  for (int i = 0; i < 5; i++) memset(c->b[i].ptr, (int)(c->base / 1000), c->b[i].len);
  if (req_finish_write(c->s, ids, 5, st) != 5) c->failures++;
  return NULL;
}

START_TEST(concurrent_writers_of_distinct_keys_all_succeed) { /* 65 */
  kva_storage *s;
  kva_runtime *rt = start_threaded(&s);
  caller c[THREADS];
  for (int t = 0; t < THREADS; t++) c[t] = (caller){.s = s, .base = (uint64_t)t * 1000};
  run_callers(c, THREADS, write_five);
  for (int t = 0; t < THREADS; t++) ck_assert_int_eq(c[t].failures, 0);
  expect_stats(s, THREADS * 5, 0, 0, 0);
  for (int t = 0; t < THREADS; t++) { /* every buffer kept its own bytes */
    for (int i = 0; i < 5; i++) {
      kva_buf b;
      ck_assert_int_eq(reserve_read1(s, c[t].base + (uint64_t)i, 1, &b), KVA_OK);
      ck_assert_ptr_eq(b.ptr, c[t].b[i].ptr);
      ck_assert(all_bytes(b, (unsigned char)t));
      ck_assert_int_eq(finish_read1(s, c[t].base + (uint64_t)i, 1), KVA_OK);
    }
  }
  stop_storage(rt);
}
END_TEST

static void *reserve_read_shared(void *p) {
  caller *c = p;
  c->rc = req_reserve_read(c->s, &c->base, 1, 1, &c->b[0], &c->st);
  if (c->rc != 1 || c->st != KVA_OK) c->failures++;
  return NULL;
}

START_TEST(concurrent_readers_of_one_key_all_succeed) { /* 66 */
  kva_storage *s;
  kva_runtime *rt = start_threaded(&s);
  caller c[READERS];
  put_ready(s, 42, 0);
  for (int t = 0; t < READERS; t++) c[t] = (caller){.s = s, .base = 42};
  run_callers(c, READERS, reserve_read_shared);
  for (int t = 0; t < READERS; t++) {
    ck_assert_int_eq(c[t].failures, 0);
    ck_assert_ptr_eq(c[t].b[0].ptr, c[0].b[0].ptr);
  }
  expect_stats(s, 1, 0, 1, 0);
  ck_assert_int_eq(finish_read1(s, 42, READERS - 1), KVA_OK);
  ck_assert(is_read_locked(s, 42));
  ck_assert_int_eq(finish_read1(s, 42, 1), KVA_OK);
  ck_assert(!is_read_locked(s, 42));
  stop_storage(rt);
}
END_TEST

static void *read_shared(void *p) {
  caller *c = p;
  c->rc = req_read(c->s, &c->base, 1, &c->b[0]);
  if (c->rc != KVA_OK) c->failures++;
  return NULL;
}

START_TEST(concurrent_reads_of_one_read_locked_key_all_succeed) { /* 67 */
  kva_storage *s;
  kva_runtime *rt = start_threaded(&s);
  caller c[READERS];
  kva_buf b;
  put_ready(s, 42, 0);
  ck_assert_int_eq(reserve_read1(s, 42, 1, &b), KVA_OK);
  for (int t = 0; t < READERS; t++) c[t] = (caller){.s = s, .base = 42};
  run_callers(c, READERS, read_shared);
  for (int t = 0; t < READERS; t++) {
    ck_assert_int_eq(c[t].failures, 0);
    ck_assert_ptr_eq(c[t].b[0].ptr, b.ptr);
  }
  ck_assert_int_eq(finish_read1(s, 42, 1), KVA_OK);
  ck_assert(!is_read_locked(s, 42));
  stop_storage(rt);
}
END_TEST

/* Per key: write, read it twice under a read lock, delete. */
static void *mixed_ops(void *p) {
  caller *c = p;
  kva_layout l = fixture_layout_basic();
  for (uint64_t i = 0; i < 10; i++) {
    uint64_t id = c->base + i;
    kva_buf b;
    int st;
    if (req_reserve_write(c->s, &id, 1, &l, KVA_WRITE_ALL, 0, &b, &st) != 1 ||
        req_finish_write(c->s, &id, 1, &st) != 1)
      c->failures++;
    if (req_reserve_read(c->s, &id, 1, 1, &b, &st) == 1) {
      for (int r = 0; r < 2; r++) c->failures += req_read(c->s, &id, 1, &b) != KVA_OK;
      c->failures += req_finish_read(c->s, &id, 1, 1, &st) != 1;
    } else {
      c->failures++;
    }
    c->failures += req_delete(c->s, &id, 1, 0, &st) != 1;
  }
  return NULL;
}

START_TEST(concurrent_mixed_operations_leave_nothing_behind) { /* 68 */
  kva_storage *s;
  kva_runtime *rt = start_threaded(&s);
  caller c[THREADS];
  for (int t = 0; t < THREADS; t++) c[t] = (caller){.s = s, .base = (uint64_t)t * 1000};
  run_callers(c, THREADS, mixed_ops);
  for (int t = 0; t < THREADS; t++) ck_assert_int_eq(c[t].failures, 0);
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

static void *write_key_7(void *p) {
  caller *c = p;
  uint64_t id = 7;
  kva_layout l = fixture_layout_basic();
  c->rc = req_reserve_write(c->s, &id, 1, &l, KVA_WRITE_NEW, 0, &c->b[0], &c->st);
  return NULL;
}

/* kvact: each batch is atomic, so racing NEW writers of a key see one winner. */
START_TEST(concurrent_writers_of_one_key_have_one_winner) {
  kva_storage *s;
  kva_runtime *rt = start_threaded(&s);
  caller c[THREADS];
  int winners = 0;
  for (int t = 0; t < THREADS; t++) c[t] = (caller){.s = s};
  run_callers(c, THREADS, write_key_7);
  for (int t = 0; t < THREADS; t++) {
    winners += c[t].rc == 1;
    ck_assert_int_eq(c[t].st, c[t].rc == 1 ? KVA_OK : KVA_KEY_NOT_WRITABLE);
  }
  ck_assert_int_eq(winners, 1);
  expect_stats(s, 1, 1, 0, 0);
  ck_assert_int_eq(finish_write1(s, 7), KVA_OK);
  stop_storage(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l1_concurrency_test");
  TCase *tc_threads = tcase_create("threads");
  tcase_set_timeout(tc_threads, 120);
  tcase_add_test(tc_threads, concurrent_writers_of_distinct_keys_all_succeed);
  tcase_add_test(tc_threads, concurrent_readers_of_one_key_all_succeed);
  tcase_add_test(tc_threads, concurrent_reads_of_one_read_locked_key_all_succeed);
  tcase_add_test(tc_threads, concurrent_mixed_operations_leave_nothing_behind);
  tcase_add_test(tc_threads, concurrent_writers_of_one_key_have_one_winner);
  suite_add_tcase(s, tc_threads);
  return s;
}
