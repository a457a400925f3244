/*
 * l1_manager_test2.c — the L1 manager, continued (see l1_manager_test.c for
 * the helpers and the mapping of LMCache's observations): LMCache scenarios
 * 43-77, then kvact's own rules — duplicate keys in a batch, locks that
 * never expire, clear, and every state transition in deterministic mode
 * checked against stats and memcheck.
 */
#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "kvact.h"
#include "storage_internal.h"
#include "tests/support/fixture.h"

#define MiB (1024ull * 1024ull)
#define BASIC_BYTES 204800u

/* Defined in l1_manager_test.c. */
int req_reserve_write(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l,
                      kva_write_mode mode, int temporary, kva_buf *b, int *st);
int req_finish_write(kva_storage *s, const uint64_t *ids, size_t n, int *st);
int req_fwarr(kva_storage *s, const uint64_t *ids, size_t n, uint32_t readers, kva_buf *b, int *st);
int req_reserve_read(kva_storage *s, const uint64_t *ids, size_t n, uint32_t readers, kva_buf *b,
                     int *st);
int req_finish_read(kva_storage *s, const uint64_t *ids, size_t n, uint32_t readers, int *st);
int req_delete(kva_storage *s, const uint64_t *ids, size_t n, int force, int *st);
int req_read(kva_storage *s, const uint64_t *ids, size_t n, kva_buf *b);
int req_prefetch(kva_storage *s, const uint64_t *ids, size_t n, uint32_t readers, size_t *hits);
int req_touch(kva_storage *s, const uint64_t *ids, size_t n);
int req_clear(kva_storage *s, int force);
int reserve_write1(kva_storage *s, uint64_t id, kva_write_mode mode, int temp, kva_buf *b);
int finish_write1(kva_storage *s, uint64_t id);
int fwarr1(kva_storage *s, uint64_t id, uint32_t readers, kva_buf *b);
int reserve_read1(kva_storage *s, uint64_t id, uint32_t readers, kva_buf *b);
int finish_read1(kva_storage *s, uint64_t id, uint32_t readers);
int delete1(kva_storage *s, uint64_t id, int force);
int read1(kva_storage *s, uint64_t id, kva_buf *b);
void put_ready(kva_storage *s, uint64_t id, int temp);
void put_write_locked(kva_storage *s, uint64_t id);
bool is_present(kva_storage *s, uint64_t id);
bool is_read_locked(kva_storage *s, uint64_t id);
bool is_readable(kva_storage *s, uint64_t id);
bool is_writable(kva_storage *s, uint64_t id);
bool is_evictable(kva_storage *s, uint64_t id);
void expect_stats(kva_storage *s, uint64_t objects, uint64_t wl, uint64_t rl, uint64_t temp);
void expect_memcheck_locked(kva_storage *s, const char *what);
void expect_buf(kva_buf b);
void expect_no_buf(kva_buf b);
kva_runtime *start_storage(kva_storage **s);
void stop_storage(kva_runtime *rt);

/* ---- delete (43-50) ------------------------------------------------------ */

START_TEST(delete_of_absent_key_is_not_exist) { /* 43 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert_int_eq(delete1(s, 12345, 0), KVA_KEY_NOT_EXIST);
  stop_storage(rt);
}
END_TEST

START_TEST(delete_removes_a_ready_key) { /* 44 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(delete1(s, 12345, 0), KVA_OK);
  ck_assert(!is_present(s, 12345));
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

START_TEST(delete_of_write_locked_key_is_locked) { /* 45 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 12345);
  ck_assert_int_eq(delete1(s, 12345, 0), KVA_KEY_LOCKED);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(delete_of_read_locked_key_is_locked) { /* 46 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(delete1(s, 12345, 0), KVA_KEY_LOCKED);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(delete_gives_each_key_its_own_status) { /* 47 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {1, 2, 3};
  int st[3];
  put_ready(s, 1, 0);
  put_write_locked(s, 3);
  ck_assert_int_eq(req_delete(s, ids, 3, 0, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_NOT_EXIST);
  ck_assert_int_eq(st[2], KVA_KEY_LOCKED);
  ck_assert_int_eq(finish_write1(s, 3), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(forced_delete_removes_a_write_locked_key) { /* 48 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 1);
  ck_assert_int_eq(delete1(s, 1, 0), KVA_KEY_LOCKED);
  ck_assert_int_eq(delete1(s, 1, 1), KVA_OK);
  ck_assert(!is_present(s, 1));
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

START_TEST(forced_delete_removes_a_read_locked_key) { /* 49 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  ck_assert_int_eq(reserve_read1(s, 1, 1, NULL), KVA_OK);
  ck_assert_int_eq(delete1(s, 1, 0), KVA_KEY_LOCKED);
  ck_assert_int_eq(delete1(s, 1, 1), KVA_OK);
  ck_assert(!is_present(s, 1));
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

START_TEST(forced_delete_of_absent_key_is_not_exist) { /* 50 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert_int_eq(delete1(s, 999, 1), KVA_KEY_NOT_EXIST);
  stop_storage(rt);
}
END_TEST

/* ---- object state (51-54) ------------------------------------------------ */

START_TEST(absent_key_has_no_state) { /* 51 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert(!is_present(s, 12345));
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

START_TEST(ready_key_is_readable_and_writable) { /* 52 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert(is_present(s, 12345));
  ck_assert(is_readable(s, 12345));
  ck_assert(is_writable(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(write_locked_key_is_neither_readable_nor_writable) { /* 53 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 12345);
  ck_assert(is_present(s, 12345));
  ck_assert(!is_readable(s, 12345));
  ck_assert(!is_writable(s, 12345));
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(read_locked_key_is_readable_but_not_writable) { /* 54 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert(is_readable(s, 12345));
  ck_assert(!is_writable(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

/* ---- close = runtime shutdown (55-57) ------------------------------------ */

START_TEST(shutdown_of_an_empty_manager) { /* 55 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  stop_storage(rt);
}
END_TEST

/* The one test that shuts down with locks held: that is its point (the
 * manager frees them; ASan would see a leak). */
START_TEST(shutdown_frees_write_locked_objects) { /* 56 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {0, 1, 2, 3, 4};
  kva_layout l = fixture_layout_basic();
  kva_buf b[5];
  int st[5];
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_ALL, 0, b, st), 5);
  expect_memcheck_locked(s, "5 write-locked and 0 read-locked");
  kva_runtime_shutdown(rt);
}
END_TEST

/* LMCache queries the manager after close(); kvact's storage goes with its
 * runtime, so: objects do not outlive it, and a new runtime starts empty. */
START_TEST(objects_do_not_outlive_their_runtime) { /* 57 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert(is_present(s, 12345));
  stop_storage(rt);
  rt = start_storage(&s);
  ck_assert(!is_present(s, 12345));
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

/* ---- lifecycles (58-64) -------------------------------------------------- */

START_TEST(full_write_read_cycle) { /* 58 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert(!is_present(s, 12345));
  put_write_locked(s, 12345);
  ck_assert(!is_readable(s, 12345));
  ck_assert(!is_writable(s, 12345));
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  ck_assert(is_readable(s, 12345));
  ck_assert(is_writable(s, 12345));
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert(is_readable(s, 12345));
  ck_assert(!is_writable(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(is_readable(s, 12345));
  ck_assert(is_writable(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(full_cycle_with_reads_keeps_the_object) { /* 59 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(read1(s, 12345, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(ready_object_can_be_deleted) { /* 60 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(delete1(s, 12345, 0), KVA_OK);
  ck_assert(!is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(temporary_object_lives_until_its_read_is_finished) { /* 61 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  expect_stats(s, 1, 0, 0, 1);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_present(s, 12345));
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

START_TEST(temporary_object_survives_reads_until_released) { /* 62 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(read1(s, 12345, NULL), KVA_OK);
  ck_assert(is_present(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(multi_reader_cycle_leaves_the_object_writable) { /* 63 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 4, NULL), KVA_OK);
  ck_assert_int_eq(read1(s, 12345, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 4), KVA_OK);
  ck_assert(is_writable(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(multi_reader_temporary_goes_with_its_last_reader) { /* 64 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  ck_assert_int_eq(reserve_read1(s, 12345, 3, NULL), KVA_OK);
  ck_assert(is_present(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 3), KVA_OK);
  ck_assert(!is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

/* ---- is_key_evictable (69-77) -------------------------------------------- */

START_TEST(ready_key_is_evictable) { /* 69 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  ck_assert(is_evictable(s, 1));
  ck_assert_int_eq(delete1(s, 1, 0), KVA_OK); /* what evictable promises */
  stop_storage(rt);
}
END_TEST

START_TEST(write_locked_key_is_not_evictable) { /* 70 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 1);
  ck_assert(!is_evictable(s, 1));
  ck_assert_int_eq(finish_write1(s, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(read_locked_key_is_not_evictable) { /* 71 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  ck_assert_int_eq(reserve_read1(s, 1, 1, NULL), KVA_OK);
  ck_assert(!is_evictable(s, 1));
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(absent_key_is_not_evictable) { /* 72 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert(!is_evictable(s, 999));
  stop_storage(rt);
}
END_TEST

START_TEST(key_is_evictable_again_after_finish_read) { /* 73 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  ck_assert_int_eq(reserve_read1(s, 1, 1, NULL), KVA_OK);
  ck_assert(!is_evictable(s, 1));
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  ck_assert(is_evictable(s, 1));
  stop_storage(rt);
}
END_TEST

START_TEST(key_becomes_evictable_at_finish_write) { /* 74 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 1);
  ck_assert(!is_evictable(s, 1));
  ck_assert_int_eq(finish_write1(s, 1), KVA_OK);
  ck_assert(is_evictable(s, 1));
  stop_storage(rt);
}
END_TEST

START_TEST(evictability_is_per_key) { /* 75 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  put_write_locked(s, 2);
  put_ready(s, 3, 0);
  ck_assert_int_eq(reserve_read1(s, 3, 1, NULL), KVA_OK);
  ck_assert(is_evictable(s, 1));
  ck_assert(!is_evictable(s, 2));
  ck_assert(!is_evictable(s, 3));
  ck_assert_int_eq(finish_write1(s, 2), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 3, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(deleted_key_is_not_evictable) { /* 76 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  ck_assert_int_eq(delete1(s, 1, 0), KVA_OK);
  ck_assert(!is_evictable(s, 1));
  stop_storage(rt);
}
END_TEST

START_TEST(key_is_evictable_only_when_every_reader_left) { /* 77 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  ck_assert_int_eq(reserve_read1(s, 1, 3, NULL), KVA_OK);
  ck_assert(!is_evictable(s, 1));
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  ck_assert(!is_evictable(s, 1));
  ck_assert_int_eq(finish_read1(s, 1, 2), KVA_OK);
  ck_assert(is_evictable(s, 1));
  stop_storage(rt);
}
END_TEST

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

/* ---- kvact: a key repeated in one batch ---------------------------------- */

START_TEST(repeated_key_in_reserve_write_is_wrong_state) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  kva_layout l = fixture_layout_basic();
  kva_buf b[2];
  int st[2];
  ck_assert_int_eq(req_reserve_write(s, ids, 2, &l, KVA_WRITE_NEW, 0, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  expect_buf(b[0]);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  expect_no_buf(b[1]);
  expect_stats(s, 1, 1, 0, 0); /* one block, not two */
  ck_assert_int_eq(finish_write1(s, 5), KVA_OK);
  ck_assert_int_eq(req_reserve_write(s, ids, 2, &l, KVA_WRITE_ALL, 0, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(finish_write1(s, 5), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_key_in_finish_write_and_fwarr_is_wrong_state) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  kva_buf b[2];
  int st[2];
  put_write_locked(s, 5);
  ck_assert_int_eq(req_finish_write(s, ids, 2, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(reserve_write1(s, 5, KVA_WRITE_UPDATE, 0, NULL), KVA_OK);
  ck_assert_int_eq(req_fwarr(s, ids, 2, 1, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  expect_no_buf(b[1]);
  expect_stats(s, 1, 0, 1, 0);
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK); /* one lock was taken, not two */
  ck_assert(!is_read_locked(s, 5));
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_key_in_reserve_and_finish_read_is_wrong_state) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  kva_buf b[2];
  int st[2];
  put_ready(s, 5, 0);
  ck_assert_int_eq(req_reserve_read(s, ids, 2, 1, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  expect_no_buf(b[1]);
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK);
  ck_assert(!is_read_locked(s, 5));
  ck_assert_int_eq(reserve_read1(s, 5, 2, NULL), KVA_OK);
  ck_assert_int_eq(req_finish_read(s, ids, 2, 1, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  ck_assert(is_read_locked(s, 5)); /* one release, one lock left */
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_locked_key_in_delete_is_wrong_state) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  int st[2];
  put_write_locked(s, 5);
  ck_assert_int_eq(req_delete(s, ids, 2, 0, st), 0);
  ck_assert_int_eq(st[0], KVA_KEY_LOCKED);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(finish_write1(s, 5), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_key_in_delete_is_wrong_state_after_removal) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  int st[2];
  put_ready(s, 5, 0);
  ck_assert_int_eq(req_delete(s, ids, 2, 0, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  stop_storage(rt);
}
END_TEST

/* The first occurrence frees the temporary; the second is still a repeat. */
START_TEST(repeated_key_in_finish_read_is_wrong_state_after_temporary_freed) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 5};
  int st[2];
  put_ready(s, 5, 1);
  ck_assert_int_eq(reserve_read1(s, 5, 1, NULL), KVA_OK);
  ck_assert_int_eq(req_finish_read(s, ids, 2, 1, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  ck_assert_int_eq(st[1], KVA_KEY_WRONG_STATE);
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_key_makes_prefetch_and_read_invalid) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {5, 6, 5}, absent[] = {5, 9, 9};
  kva_buf b[3];
  size_t hits = 99;
  put_ready(s, 5, 0);
  put_ready(s, 6, 0);
  ck_assert_int_eq(req_prefetch(s, ids, 3, 1, &hits), KVA_EINVAL);
  ck_assert_int_eq(req_prefetch(s, absent, 3, 1, &hits), KVA_EINVAL);
  expect_stats(s, 2, 0, 0, 0); /* nothing locked */
  ck_assert_int_eq(reserve_read1(s, 5, 1, NULL), KVA_OK);
  ck_assert_int_eq(reserve_read1(s, 6, 1, NULL), KVA_OK);
  ck_assert_int_eq(req_read(s, ids, 3, b), KVA_EINVAL);
  ck_assert_int_eq(req_read(s, absent, 3, b), KVA_EINVAL);
  ck_assert(is_read_locked(s, 5)); /* nothing released */
  ck_assert(is_read_locked(s, 6));
  ck_assert_int_eq(finish_read1(s, 5, 1), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 6, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

/* ---- kvact: no TTL, clear, every transition ------------------------------ */

/* Replaces LMCache's TTL behaviour: 700 s of virtual time (past both
 * default TTLs) change nothing. */
START_TEST(locks_never_expire_in_virtual_time) {
  kva_runtime *rt = fixture_storage(0, 128 * MiB, NULL);
  kva_storage *s = kva_storage_of(rt);
  put_write_locked(s, 1);
  put_ready(s, 2, 0);
  ck_assert_int_eq(reserve_read1(s, 2, 1, NULL), KVA_OK);
  ck_assert_int_ge(kva_runtime_advance(rt, 700ull * 1000000000ull), 0);
  ck_assert(!is_readable(s, 1));
  ck_assert(is_read_locked(s, 2));
  ck_assert_int_eq(delete1(s, 1, 0), KVA_KEY_LOCKED);
  ck_assert_int_eq(delete1(s, 2, 0), KVA_KEY_LOCKED);
  expect_stats(s, 2, 1, 1, 0);
  ck_assert_int_eq(finish_write1(s, 1), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 2, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(clear_keeps_locked_objects_unless_forced) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 1, 0);
  put_write_locked(s, 2);
  put_ready(s, 3, 0);
  ck_assert_int_eq(reserve_read1(s, 3, 1, NULL), KVA_OK);
  put_ready(s, 4, 1);
  ck_assert_int_eq(req_clear(s, 0), 2);
  ck_assert(!is_present(s, 1));
  ck_assert(is_present(s, 2));
  ck_assert(is_present(s, 3));
  ck_assert(!is_present(s, 4));
  expect_stats(s, 2, 1, 1, 0);
  ck_assert_int_eq(req_clear(s, 1), 2);
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

static void expect_clean(kva_storage *s, uint64_t objects, uint64_t temp) {
  expect_stats(s, objects, 0, 0, temp);
  fixture_memcheck_clean(s);
}

START_TEST(every_state_transition_in_deterministic_mode) {
  kva_runtime *rt = fixture_storage(0, 128 * MiB, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_buf w, r;
  /* absent -> write-locked -> ready -> read-locked(3) -> ready -> deleted */
  ck_assert(!is_present(s, 1));
  expect_clean(s, 0, 0);
  ck_assert_int_eq(reserve_write1(s, 1, KVA_WRITE_NEW, 0, &w), KVA_OK);
  expect_stats(s, 1, 1, 0, 0);
  expect_memcheck_locked(s, "1 write-locked and 0 read-locked");
  ck_assert_int_eq(finish_write1(s, 1), KVA_OK);
  expect_clean(s, 1, 0);
  ck_assert_int_eq(reserve_read1(s, 1, 2, &r), KVA_OK);
  ck_assert_ptr_eq(r.ptr, w.ptr);
  ck_assert_int_eq(reserve_read1(s, 1, 1, NULL), KVA_OK);
  expect_stats(s, 1, 0, 1, 0);
  expect_memcheck_locked(s, "0 write-locked and 1 read-locked");
  ck_assert_int_eq(finish_read1(s, 1, 2), KVA_OK);
  expect_stats(s, 1, 0, 1, 0);
  expect_memcheck_locked(s, "0 write-locked and 1 read-locked");
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  expect_clean(s, 1, 0);
  ck_assert_int_eq(delete1(s, 1, 0), KVA_OK);
  expect_clean(s, 0, 0);
  /* temporary: write-locked -> ready -> read-locked -> gone */
  ck_assert_int_eq(reserve_write1(s, 2, KVA_WRITE_NEW, 1, NULL), KVA_OK);
  expect_stats(s, 1, 1, 0, 1);
  expect_memcheck_locked(s, "1 write-locked and 0 read-locked");
  ck_assert_int_eq(finish_write1(s, 2), KVA_OK);
  expect_clean(s, 1, 1);
  ck_assert_int_eq(reserve_read1(s, 2, 1, NULL), KVA_OK);
  expect_stats(s, 1, 0, 1, 1);
  expect_memcheck_locked(s, "0 write-locked and 1 read-locked");
  ck_assert_int_eq(finish_read1(s, 2, 1), KVA_OK);
  ck_assert(!is_present(s, 2));
  expect_clean(s, 0, 0);
  /* write-locked -> read-locked(2) in one step -> ready */
  ck_assert_int_eq(reserve_write1(s, 3, KVA_WRITE_NEW, 0, &w), KVA_OK);
  expect_stats(s, 1, 1, 0, 0);
  ck_assert_int_eq(fwarr1(s, 3, 2, &r), KVA_OK);
  ck_assert_ptr_eq(r.ptr, w.ptr);
  expect_stats(s, 1, 0, 1, 0);
  expect_memcheck_locked(s, "0 write-locked and 1 read-locked");
  ck_assert_int_eq(finish_read1(s, 3, 2), KVA_OK);
  expect_clean(s, 1, 0);
  /* a temporary the same way (an L2 load): gone at its last reader */
  ck_assert_int_eq(reserve_write1(s, 4, KVA_WRITE_NEW, 1, NULL), KVA_OK);
  expect_stats(s, 2, 1, 0, 1);
  ck_assert_int_eq(fwarr1(s, 4, 1, NULL), KVA_OK);
  expect_stats(s, 2, 0, 1, 1);
  expect_memcheck_locked(s, "0 write-locked and 1 read-locked");
  ck_assert_int_eq(finish_read1(s, 4, 1), KVA_OK);
  expect_clean(s, 1, 0);
  ck_assert_int_eq(delete1(s, 3, 0), KVA_OK);
  expect_clean(s, 0, 0);
  stop_storage(rt);
}
END_TEST

void l1_manager_add_more_tests(Suite *s) {
  TCase *tc = tcase_create("lmcache_port_2");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, delete_of_absent_key_is_not_exist);
  tcase_add_test(tc, delete_removes_a_ready_key);
  tcase_add_test(tc, delete_of_write_locked_key_is_locked);
  tcase_add_test(tc, delete_of_read_locked_key_is_locked);
  tcase_add_test(tc, delete_gives_each_key_its_own_status);
  tcase_add_test(tc, forced_delete_removes_a_write_locked_key);
  tcase_add_test(tc, forced_delete_removes_a_read_locked_key);
  tcase_add_test(tc, forced_delete_of_absent_key_is_not_exist);
  tcase_add_test(tc, absent_key_has_no_state);
  tcase_add_test(tc, ready_key_is_readable_and_writable);
  tcase_add_test(tc, write_locked_key_is_neither_readable_nor_writable);
  tcase_add_test(tc, read_locked_key_is_readable_but_not_writable);
  tcase_add_test(tc, shutdown_of_an_empty_manager);
  tcase_add_test(tc, shutdown_frees_write_locked_objects);
  tcase_add_test(tc, objects_do_not_outlive_their_runtime);
  tcase_add_test(tc, full_write_read_cycle);
  tcase_add_test(tc, full_cycle_with_reads_keeps_the_object);
  tcase_add_test(tc, ready_object_can_be_deleted);
  tcase_add_test(tc, temporary_object_lives_until_its_read_is_finished);
  tcase_add_test(tc, temporary_object_survives_reads_until_released);
  tcase_add_test(tc, multi_reader_cycle_leaves_the_object_writable);
  tcase_add_test(tc, multi_reader_temporary_goes_with_its_last_reader);
  tcase_add_test(tc, ready_key_is_evictable);
  tcase_add_test(tc, write_locked_key_is_not_evictable);
  tcase_add_test(tc, read_locked_key_is_not_evictable);
  tcase_add_test(tc, absent_key_is_not_evictable);
  tcase_add_test(tc, key_is_evictable_again_after_finish_read);
  tcase_add_test(tc, key_becomes_evictable_at_finish_write);
  tcase_add_test(tc, evictability_is_per_key);
  tcase_add_test(tc, deleted_key_is_not_evictable);
  tcase_add_test(tc, key_is_evictable_only_when_every_reader_left);
  suite_add_tcase(s, tc);
  TCase *th = tcase_create("threads");
  tcase_set_timeout(th, 120);
  tcase_add_test(th, concurrent_writers_of_distinct_keys_all_succeed);
  tcase_add_test(th, concurrent_readers_of_one_key_all_succeed);
  tcase_add_test(th, concurrent_reads_of_one_read_locked_key_all_succeed);
  tcase_add_test(th, concurrent_mixed_operations_leave_nothing_behind);
  tcase_add_test(th, concurrent_writers_of_one_key_have_one_winner);
  suite_add_tcase(s, th);
  TCase *kv = tcase_create("kvact_rules");
  tcase_set_timeout(kv, 60);
  tcase_add_test(kv, repeated_key_in_reserve_write_is_wrong_state);
  tcase_add_test(kv, repeated_key_in_finish_write_and_fwarr_is_wrong_state);
  tcase_add_test(kv, repeated_key_in_reserve_and_finish_read_is_wrong_state);
  tcase_add_test(kv, repeated_locked_key_in_delete_is_wrong_state);
  tcase_add_test(kv, repeated_key_in_delete_is_wrong_state_after_removal);
  tcase_add_test(kv, repeated_key_in_finish_read_is_wrong_state_after_temporary_freed);
  tcase_add_test(kv, repeated_key_makes_prefetch_and_read_invalid);
  tcase_add_test(kv, locks_never_expire_in_virtual_time);
  tcase_add_test(kv, clear_keeps_locked_objects_unless_forced);
  tcase_add_test(kv, every_state_transition_in_deterministic_mode);
  suite_add_tcase(s, kv);
}
