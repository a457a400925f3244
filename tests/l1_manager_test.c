/*
 * l1_manager_test.c — the L1 manager actor through the facade's request
 * path (storage_call), ported from LMCache's
 * tests/v1/distributed/test_l1_manager.py (scenario numbers in comments).
 * This file: the request helpers (shared with l1_manager_test2.c) and
 * scenarios 1-42; l1_manager_test2.c: 43-77 and kvact's own rules.
 *
 * Mapping of LMCache's observations onto what kvact lets a caller see:
 *  - unsafe_read           -> L1_READ. kvact's L1_READ is all or nothing:
 *    on a problem it releases one read lock of each good key. A one-key
 *    L1_READ of a key that is not read-locked therefore changes nothing, so
 *    is_read_locked() below is a pure probe.
 *  - get_object_state None -> !is_present() (L1_TOUCH counts keys present).
 *  - available_for_read    -> is_readable(): a read lock can be taken (it is
 *    given back at once). Never used on an unlocked temporary object, which
 *    the give-back would free.
 *  - available_for_write   -> is_writable(): reserve_write(UPDATE) succeeds
 *    (and finish_write gives the lock back).
 *  - is_key_evictable      -> is_evictable(): present, not read-locked and
 *    readable, i.e. a non-forced delete would succeed (confirmed by a real
 *    delete where that is harmless).
 *  - close()               -> kva_runtime_shutdown (ASan checks the frees).
 *  - extra_count x         -> readers = 1 + x.
 * LMCache's TTLs (write_ttl 600 s, read_ttl 300 s, "an expired lock counts as
 * unlocked") have no kvact analogue: kvact's locks never expire
 * (locks_never_expire_in_virtual_time checks that instead).
 */
#include <check.h>
#include <stdbool.h>
#include <string.h>

#include "kvact.h"
#include "storage_internal.h"
#include "tests/support/fixture.h"

#define MiB (1024ull * 1024ull)
#define BASIC_BYTES 204800u /* fixture_layout_basic, a whole number of pages */
#define MAXK 16
#define WORKERS 2 /* threaded runtime for the single-caller scenarios */

/* ---- requests (non-static: l1_manager_test2.c declares them) ------------ */

/* Sends one request for keys fixture_key(ids[i]) and returns its result. */
static int req(kva_storage *s, uint32_t type, const uint64_t *ids, size_t n, l1_req *r) {
  kva_key k[MAXK];
  ck_assert_uint_le(n, MAXK);
  for (size_t i = 0; i < n; i++) k[i] = fixture_key(ids[i]);
  r->keys = k;
  r->n = n;
  return storage_call(s, type, r);
}

int req_reserve_write(kva_storage *s, const uint64_t *ids, size_t n, const kva_layout *l,
                      kva_write_mode mode, int temporary, kva_buf *b, int *st) {
  l1_req r = {.layout = l, .mode = (int)mode, .temporary = temporary, .bufs = b, .status = st};
  return req(s, L1_RESERVE_WRITE, ids, n, &r);
}

int req_finish_write(kva_storage *s, const uint64_t *ids, size_t n, int *st) {
  l1_req r = {.status = st};
  return req(s, L1_FINISH_WRITE, ids, n, &r);
}

int req_fwarr(kva_storage *s, const uint64_t *ids, size_t n, uint32_t readers, kva_buf *b,
              int *st) {
  l1_req r = {.readers = readers, .bufs = b, .status = st};
  return req(s, L1_FINISH_WRITE_AND_RESERVE_READ, ids, n, &r);
}

int req_reserve_read(kva_storage *s, const uint64_t *ids, size_t n, uint32_t readers, kva_buf *b,
                     int *st) {
  l1_req r = {.readers = readers, .bufs = b, .status = st};
  return req(s, L1_RESERVE_READ, ids, n, &r);
}

int req_finish_read(kva_storage *s, const uint64_t *ids, size_t n, uint32_t readers, int *st) {
  l1_req r = {.readers = readers, .status = st};
  return req(s, L1_FINISH_READ, ids, n, &r);
}

int req_delete(kva_storage *s, const uint64_t *ids, size_t n, int force, int *st) {
  l1_req r = {.force = force, .status = st};
  return req(s, L1_DELETE, ids, n, &r);
}

int req_read(kva_storage *s, const uint64_t *ids, size_t n, kva_buf *b) {
  l1_req r = {.bufs = b};
  return req(s, L1_READ, ids, n, &r);
}

int req_prefetch(kva_storage *s, const uint64_t *ids, size_t n, uint32_t readers, size_t *hits) {
  l1_req r = {.readers = readers};
  int rc = req(s, L1_PREFETCH, ids, n, &r);
  *hits = r.hits;
  return rc;
}

int req_touch(kva_storage *s, const uint64_t *ids, size_t n) {
  l1_req r = {0};
  return req(s, L1_TOUCH, ids, n, &r);
}

int req_clear(kva_storage *s, int force) {
  l1_req r = {.force = force};
  return storage_call(s, L1_CLEAR, &r);
}

/* One-key forms: the key's status (the result must agree with it). The
 * status is passed by address: it is read after the call has filled it. */
static int one(int result, const int *status) {
  ck_assert_int_eq(result, (*status == KVA_OK ? 1 : 0));
  return *status;
}

int reserve_write1(kva_storage *s, uint64_t id, kva_write_mode mode, int temp, kva_buf *b) {
  kva_layout l = fixture_layout_basic();
  kva_buf tmp;
  int st = -100;
  return one(req_reserve_write(s, &id, 1, &l, mode, temp, b ? b : &tmp, &st), &st);
}

int finish_write1(kva_storage *s, uint64_t id) {
  int st = -100;
  return one(req_finish_write(s, &id, 1, &st), &st);
}

int fwarr1(kva_storage *s, uint64_t id, uint32_t readers, kva_buf *b) {
  int st = -100;
  return one(req_fwarr(s, &id, 1, readers, b, &st), &st);
}

int reserve_read1(kva_storage *s, uint64_t id, uint32_t readers, kva_buf *b) {
  int st = -100;
  return one(req_reserve_read(s, &id, 1, readers, b, &st), &st);
}

int finish_read1(kva_storage *s, uint64_t id, uint32_t readers) {
  int st = -100;
  return one(req_finish_read(s, &id, 1, readers, &st), &st);
}

int delete1(kva_storage *s, uint64_t id, int force) {
  int st = -100;
  return one(req_delete(s, &id, 1, force, &st), &st);
}

/* L1_READ of one key: KVA_OK or the key's problem. */
int read1(kva_storage *s, uint64_t id, kva_buf *b) {
  kva_buf tmp;
  return req_read(s, &id, 1, b ? b : &tmp);
}

/* LMCache's "ready(k)" / "temp-ready(k)": reserve_write + finish_write. */
void put_ready(kva_storage *s, uint64_t id, int temp) {
  ck_assert_int_eq(reserve_write1(s, id, KVA_WRITE_ALL, temp, NULL), KVA_OK);
  ck_assert_int_eq(finish_write1(s, id), KVA_OK);
}

void put_write_locked(kva_storage *s, uint64_t id) {
  ck_assert_int_eq(reserve_write1(s, id, KVA_WRITE_ALL, 0, NULL), KVA_OK);
}

/* ---- observations ------------------------------------------------------- */

bool is_present(kva_storage *s, uint64_t id) {
  return req_touch(s, &id, 1) == 1;
}

bool is_read_locked(kva_storage *s, uint64_t id) {
  int rc = read1(s, id, NULL);
  ck_assert(rc == KVA_OK || rc == KVA_KEY_NOT_READABLE || rc == KVA_KEY_NOT_EXIST);
  return rc == KVA_OK;
}

bool is_readable(kva_storage *s, uint64_t id) {
  int st = reserve_read1(s, id, 1, NULL);
  if (st != KVA_OK) {
    ck_assert(st == KVA_KEY_NOT_READABLE || st == KVA_KEY_NOT_EXIST);
    return false;
  }
  ck_assert_int_eq(finish_read1(s, id, 1), KVA_OK);
  return true;
}

bool is_writable(kva_storage *s, uint64_t id) {
  int st = reserve_write1(s, id, KVA_WRITE_UPDATE, 0, NULL);
  if (st != KVA_OK) {
    ck_assert_int_eq(st, KVA_KEY_NOT_WRITABLE);
    return false;
  }
  ck_assert_int_eq(finish_write1(s, id), KVA_OK);
  return true;
}

bool is_evictable(kva_storage *s, uint64_t id) {
  return is_present(s, id) && !is_read_locked(s, id) && is_readable(s, id);
}

void expect_stats(kva_storage *s, uint64_t objects, uint64_t wl, uint64_t rl, uint64_t temp) {
  kva_storage_stats st;
  ck_assert_int_eq(kva_storage_get_stats(s, &st), KVA_OK);
  ck_assert_uint_eq(st.l1_objects, objects);
  ck_assert_uint_eq(st.l1_write_locked, wl);
  ck_assert_uint_eq(st.l1_read_locked, rl);
  ck_assert_uint_eq(st.l1_temporary, temp);
  ck_assert_uint_eq(st.l1_used_bytes, objects * BASIC_BYTES);
}

/* memcheck while locks are held: KVA_EIO and a report saying which. */
void expect_memcheck_locked(kva_storage *s, const char *what) {
  char report[512];
  ck_assert_int_eq(kva_memcheck(s, report, sizeof(report)), KVA_EIO);
  ck_assert_msg(strstr(report, what) != NULL, "report \"%s\" lacks \"%s\"", report, what);
  ck_assert_ptr_null(strstr(report, "at once"));
}

void expect_buf(kva_buf b) {
  ck_assert_ptr_nonnull(b.ptr);
  ck_assert_uint_eq(b.len, BASIC_BYTES);
  memset(b.ptr, 0x5a, b.len); /* the memory is ours to use (ASan) */
}

void expect_no_buf(kva_buf b) {
  ck_assert_ptr_null(b.ptr);
  ck_assert_uint_eq(b.len, 0);
}

kva_runtime *start_storage(kva_storage **s) {
  kva_runtime *rt = fixture_storage(WORKERS, 128 * MiB, NULL);
  *s = kva_storage_of(rt);
  return rt;
}

void stop_storage(kva_runtime *rt) {
  fixture_memcheck_clean(kva_storage_of(rt));
  kva_runtime_shutdown(rt);
}

/* ---- reserve_read (1-7) -------------------------------------------------- */

START_TEST(reserve_read_of_absent_key_is_not_exist) { /* 1 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  ck_assert_int_eq(reserve_read1(s, 12345, 1, &b), KVA_KEY_NOT_EXIST);
  expect_no_buf(b);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_read_of_write_locked_key_is_not_readable) { /* 2 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  put_write_locked(s, 12345);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, &b), KVA_KEY_NOT_READABLE);
  expect_no_buf(b);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_read_of_ready_key_returns_its_buffer) { /* 3 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b;
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, &b), KVA_OK);
  expect_buf(b);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_read_gives_each_key_its_own_status) { /* 4 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {1, 2, 3};
  kva_buf b[3];
  int st[3];
  put_ready(s, 1, 0);
  put_write_locked(s, 3);
  ck_assert_int_eq(req_reserve_read(s, ids, 3, 1, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  expect_buf(b[0]);
  ck_assert_int_eq(st[1], KVA_KEY_NOT_EXIST);
  expect_no_buf(b[1]);
  ck_assert_int_eq(st[2], KVA_KEY_NOT_READABLE);
  expect_no_buf(b[2]);
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  ck_assert_int_eq(finish_write1(s, 3), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_read_stacks_and_key_stays_readable) { /* 5 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert(is_readable(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 3), KVA_OK);
  ck_assert(!is_read_locked(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_read_with_extra_readers_needs_as_many_releases) { /* 6 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b;
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 3, &b), KVA_OK);
  expect_buf(b);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(is_read_locked(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(is_read_locked(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_read_locked(s, 12345));
  ck_assert(is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_read_takes_one_lock_by_default) { /* 7 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_read_locked(s, 12345));
  stop_storage(rt);
}
END_TEST

/* ---- L1_READ, LMCache's unsafe_read (8-15) ------------------------------- */

START_TEST(read_of_absent_key_is_not_exist) { /* 8 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  ck_assert_int_eq(read1(s, 12345, &b), KVA_KEY_NOT_EXIST);
  expect_no_buf(b);
  stop_storage(rt);
}
END_TEST

START_TEST(read_of_unlocked_ready_key_is_not_readable) { /* 9 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  put_ready(s, 12345, 0);
  ck_assert_int_eq(read1(s, 12345, &b), KVA_KEY_NOT_READABLE);
  expect_no_buf(b);
  stop_storage(rt);
}
END_TEST

START_TEST(read_of_write_locked_key_is_not_readable) { /* 10 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  put_write_locked(s, 12345);
  ck_assert_int_eq(read1(s, 12345, &b), KVA_KEY_NOT_READABLE);
  expect_no_buf(b);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(read_of_read_locked_key_returns_its_buffer) { /* 11 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b;
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(read1(s, 12345, &b), KVA_OK);
  expect_buf(b);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(read_returns_the_buffer_reserve_read_returned) { /* 12 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf a, b;
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, &a), KVA_OK);
  ck_assert_int_eq(read1(s, 12345, &b), KVA_OK);
  ck_assert_ptr_eq(a.ptr, b.ptr);
  ck_assert_uint_eq(a.len, b.len);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(repeated_reads_take_no_lock_so_one_release_frees_a_temporary) { /* 13 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(read1(s, 12345, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_present(s, 12345));
  expect_stats(s, 0, 0, 0, 0);
  stop_storage(rt);
}
END_TEST

/* LMCache returns a per-key result; kvact's L1_READ is all or nothing and,
 * on a problem, releases one read lock of each good key (here key 1). */
START_TEST(read_of_a_batch_fails_on_first_problem_and_releases_good_keys) { /* 14 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {1, 2, 3};
  kva_buf b[3];
  put_ready(s, 1, 0);
  put_ready(s, 3, 0);
  ck_assert_int_eq(reserve_read1(s, 1, 1, NULL), KVA_OK);
  ck_assert_int_eq(read1(s, 1, &b[0]), KVA_OK); /* one key at a time: */
  expect_buf(b[0]);
  ck_assert_int_eq(read1(s, 2, NULL), KVA_KEY_NOT_EXIST);
  ck_assert_int_eq(read1(s, 3, NULL), KVA_KEY_NOT_READABLE);
  ck_assert_int_eq(req_read(s, ids, 3, b), KVA_KEY_NOT_EXIST); /* the batch */
  for (int i = 0; i < 3; i++) expect_no_buf(b[i]);
  ck_assert(!is_read_locked(s, 1));
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_KEY_WRONG_STATE);
  ck_assert(is_evictable(s, 3));
  stop_storage(rt);
}
END_TEST

START_TEST(read_works_only_between_reserve_and_finish) { /* 15 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b;
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(read1(s, 12345, &b), KVA_OK);
  expect_buf(b);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert_int_eq(read1(s, 12345, NULL), KVA_KEY_NOT_READABLE);
  stop_storage(rt);
}
END_TEST

/* ---- finish_read (16-25) ------------------------------------------------- */

START_TEST(finish_read_of_absent_key_is_not_exist) { /* 16 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_KEY_NOT_EXIST);
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_after_reserve_read_succeeds) { /* 17 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_without_read_lock_is_wrong_state) { /* 18 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_KEY_WRONG_STATE);
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_of_write_locked_key_is_wrong_state) { /* 19 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 12345);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_frees_a_temporary_at_its_last_reader) { /* 20 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert(is_present(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_counts_down_stacked_reads_of_a_temporary) { /* 21 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(is_present(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_with_extra_readers_releases_them_all) { /* 22 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 3, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 3), KVA_OK);
  ck_assert(!is_read_locked(s, 12345));
  ck_assert(is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_with_fewer_readers_keeps_the_rest) { /* 23 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 3, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 2), KVA_OK);
  ck_assert(is_read_locked(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  ck_assert(!is_read_locked(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(finish_read_with_extra_readers_frees_a_temporary) { /* 24 */
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

START_TEST(temporary_survives_a_partial_release) { /* 25 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  ck_assert_int_eq(reserve_read1(s, 12345, 4, NULL), KVA_OK);
  ck_assert_int_eq(finish_read1(s, 12345, 2), KVA_OK);
  ck_assert(is_present(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 2), KVA_OK);
  ck_assert(!is_present(s, 12345));
  stop_storage(rt);
}
END_TEST

/* ---- reserve_write (26-33) ----------------------------------------------- */

START_TEST(reserve_write_of_new_key_returns_a_buffer) { /* 26 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b;
  ck_assert_int_eq(reserve_write1(s, 12345, KVA_WRITE_ALL, 0, &b), KVA_OK);
  expect_buf(b);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_write_of_write_locked_key_is_not_writable) { /* 27 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  put_write_locked(s, 12345);
  ck_assert_int_eq(reserve_write1(s, 12345, KVA_WRITE_ALL, 0, &b), KVA_KEY_NOT_WRITABLE);
  expect_no_buf(b);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_write_of_read_locked_key_is_not_writable) { /* 28 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  put_ready(s, 12345, 0);
  ck_assert_int_eq(reserve_read1(s, 12345, 1, NULL), KVA_OK);
  ck_assert_int_eq(reserve_write1(s, 12345, KVA_WRITE_ALL, 0, &b), KVA_KEY_NOT_WRITABLE);
  expect_no_buf(b);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_write_of_temporary_key_is_not_writable) { /* 29 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 1);
  ck_assert_int_eq(reserve_write1(s, 12345, KVA_WRITE_ALL, 0, NULL), KVA_KEY_NOT_WRITABLE);
  ck_assert_int_eq(delete1(s, 12345, 0), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_write_of_several_keys_gives_distinct_buffers) { /* 30 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {0, 1, 2, 3, 4};
  kva_layout l = fixture_layout_basic();
  kva_buf b[5];
  int st[5];
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_ALL, 0, b, st), 5);
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(st[i], KVA_OK);
    expect_buf(b[i]);
    for (int j = 0; j < i; j++) ck_assert_ptr_ne(b[i].ptr, b[j].ptr);
  }
  ck_assert_int_eq(req_finish_write(s, ids, 5, st), 5);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_write_that_does_not_fit_fails_every_new_key) { /* 31 */
  kva_runtime *rt = fixture_storage(WORKERS, 64 * MiB, NULL);
  kva_storage *s = kva_storage_of(rt);
  uint64_t ids[10];
  kva_layout l = fixture_layout_large();
  kva_buf b[10];
  int st[10];
  for (int i = 0; i < 10; i++) ids[i] = (uint64_t)i;
  ck_assert_int_eq(req_reserve_write(s, ids, 10, &l, KVA_WRITE_ALL, 0, b, st), 0);
  for (int i = 0; i < 10; i++) {
    ck_assert_int_eq(st[i], KVA_OUT_OF_MEMORY);
    expect_no_buf(b[i]);
  }
  kva_storage_stats ss;
  ck_assert_int_eq(kva_storage_get_stats(s, &ss), KVA_OK);
  ck_assert_uint_eq(ss.l1_objects, 0);
  ck_assert_uint_eq(ss.l1_used_bytes, 0);
  ck_assert_uint_eq(ss.out_of_memory, 10);
  stop_storage(rt);
}
END_TEST

START_TEST(reserve_write_new_refuses_existing_keys) { /* 32 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {0, 1, 2, 3, 4};
  kva_layout l = fixture_layout_basic();
  kva_buf b[5];
  int st[5];
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_NEW, 0, b, st), 5);
  ck_assert_int_eq(req_finish_write(s, ids, 5, st), 5);
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_NEW, 0, b, st), 0);
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(st[i], KVA_KEY_NOT_WRITABLE);
    expect_no_buf(b[i]);
  }
  stop_storage(rt);
}
END_TEST

/* UPDATE of a missing key is KVA_KEY_NOT_WRITABLE, as in LMCache. */
START_TEST(reserve_write_update_needs_existing_keys_and_reuses_their_buffers) { /* 33 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {0, 1, 2, 3, 4};
  kva_layout l = fixture_layout_basic();
  kva_buf b[5], first[5];
  int st[5];
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_UPDATE, 0, b, st), 0);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(st[i], KVA_KEY_NOT_WRITABLE);
  for (int i = 0; i < 5; i++) expect_no_buf(b[i]);
  ck_assert_int_eq(req_finish_write(s, ids, 5, st), 0);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(st[i], KVA_KEY_NOT_EXIST);
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_NEW, 0, first, st), 5);
  ck_assert_int_eq(req_finish_write(s, ids, 5, st), 5);
  ck_assert_int_eq(req_reserve_write(s, ids, 5, &l, KVA_WRITE_UPDATE, 0, b, st), 5);
  for (int i = 0; i < 5; i++) ck_assert_ptr_eq(b[i].ptr, first[i].ptr);
  ck_assert_int_eq(req_finish_write(s, ids, 5, st), 5);
  stop_storage(rt);
}
END_TEST

/* kvact's rule: an existing object is reused only with the same layout. */
START_TEST(reserve_write_of_existing_key_with_another_layout_is_not_writable) {
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t id = 7;
  kva_layout other = fixture_layout_bytes(4096);
  kva_buf b;
  int st;
  put_ready(s, id, 0);
  ck_assert_int_eq(req_reserve_write(s, &id, 1, &other, KVA_WRITE_ALL, 0, &b, &st), 0);
  ck_assert_int_eq(st, KVA_KEY_NOT_WRITABLE);
  ck_assert(is_writable(s, id));
  stop_storage(rt);
}
END_TEST

/* ---- finish_write (34-36) ------------------------------------------------ */

START_TEST(finish_write_of_absent_key_is_not_exist) { /* 34 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_KEY_NOT_EXIST);
  stop_storage(rt);
}
END_TEST

START_TEST(finish_write_makes_the_key_readable_and_writable) { /* 35 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_write_locked(s, 12345);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_OK);
  ck_assert(is_readable(s, 12345));
  ck_assert(is_writable(s, 12345));
  stop_storage(rt);
}
END_TEST

START_TEST(finish_write_twice_is_wrong_state) { /* 36 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  put_ready(s, 12345, 0);
  ck_assert_int_eq(finish_write1(s, 12345), KVA_KEY_WRONG_STATE);
  stop_storage(rt);
}
END_TEST

/* ---- finish_write_and_reserve_read (37-42) ------------------------------- */

START_TEST(fwarr_turns_the_write_lock_into_a_read_lock) { /* 37 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b;
  put_write_locked(s, 12345);
  ck_assert_int_eq(fwarr1(s, 12345, 1, &b), KVA_OK);
  expect_buf(b);
  expect_stats(s, 1, 0, 1, 0);
  ck_assert(is_read_locked(s, 12345));
  ck_assert(is_readable(s, 12345));
  ck_assert(!is_writable(s, 12345));
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(fwarr_of_absent_key_is_not_exist) { /* 38 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  ck_assert_int_eq(fwarr1(s, 12345, 1, &b), KVA_KEY_NOT_EXIST);
  expect_no_buf(b);
  stop_storage(rt);
}
END_TEST

START_TEST(fwarr_of_ready_key_is_wrong_state) { /* 39 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf b = {(void *)1, 1};
  put_ready(s, 12345, 0);
  ck_assert_int_eq(fwarr1(s, 12345, 1, &b), KVA_KEY_WRONG_STATE);
  expect_no_buf(b);
  ck_assert(!is_read_locked(s, 12345));
  stop_storage(rt);
}
END_TEST

/* LMCache #40 forces a read lock onto a write-locked object; kvact's
 * invariant (write-locked xor read-locked) makes that state unreachable.
 * Checked instead: no request reaches it, and fwarr of an object already
 * read-locked (reached legally) is KVA_KEY_WRONG_STATE. */
START_TEST(no_request_makes_an_object_write_and_read_locked) { /* 40 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t id = 12345;
  size_t hits = 99;
  put_write_locked(s, id);
  ck_assert_int_eq(reserve_read1(s, id, 1, NULL), KVA_KEY_NOT_READABLE);
  ck_assert_int_eq(req_prefetch(s, &id, 1, 1, &hits), KVA_OK);
  ck_assert_uint_eq(hits, 0);
  expect_stats(s, 1, 1, 0, 0);
  expect_memcheck_locked(s, "1 write-locked and 0 read-locked");
  ck_assert_int_eq(fwarr1(s, id, 1, NULL), KVA_OK);
  ck_assert_int_eq(fwarr1(s, id, 1, NULL), KVA_KEY_WRONG_STATE);
  ck_assert_int_eq(reserve_write1(s, id, KVA_WRITE_ALL, 0, NULL), KVA_KEY_NOT_WRITABLE);
  ck_assert_int_eq(finish_write1(s, id), KVA_KEY_WRONG_STATE);
  expect_stats(s, 1, 0, 1, 0);
  expect_memcheck_locked(s, "0 write-locked and 1 read-locked");
  ck_assert_int_eq(finish_read1(s, id, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(fwarr_gives_each_key_its_own_status) { /* 41 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  uint64_t ids[] = {1, 2, 3};
  kva_buf b[3];
  int st[3];
  put_write_locked(s, 1);
  put_ready(s, 3, 0);
  ck_assert_int_eq(req_fwarr(s, ids, 3, 1, b, st), 1);
  ck_assert_int_eq(st[0], KVA_OK);
  expect_buf(b[0]);
  ck_assert_int_eq(st[1], KVA_KEY_NOT_EXIST);
  expect_no_buf(b[1]);
  ck_assert_int_eq(st[2], KVA_KEY_WRONG_STATE);
  expect_no_buf(b[2]);
  ck_assert_int_eq(finish_read1(s, 1, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

START_TEST(read_works_after_fwarr) { /* 42 */
  kva_storage *s;
  kva_runtime *rt = start_storage(&s);
  kva_buf a, b;
  put_write_locked(s, 12345);
  ck_assert_int_eq(fwarr1(s, 12345, 1, &a), KVA_OK);
  ck_assert_int_eq(read1(s, 12345, &b), KVA_OK);
  expect_buf(b);
  ck_assert_ptr_eq(a.ptr, b.ptr);
  ck_assert_int_eq(finish_read1(s, 12345, 1), KVA_OK);
  stop_storage(rt);
}
END_TEST

void l1_manager_add_more_tests(Suite *s);

Suite *kva_test_suite(void) {
  Suite *s = suite_create("l1_manager");
  TCase *tc = tcase_create("lmcache_port");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, reserve_read_of_absent_key_is_not_exist);
  tcase_add_test(tc, reserve_read_of_write_locked_key_is_not_readable);
  tcase_add_test(tc, reserve_read_of_ready_key_returns_its_buffer);
  tcase_add_test(tc, reserve_read_gives_each_key_its_own_status);
  tcase_add_test(tc, reserve_read_stacks_and_key_stays_readable);
  tcase_add_test(tc, reserve_read_with_extra_readers_needs_as_many_releases);
  tcase_add_test(tc, reserve_read_takes_one_lock_by_default);
  tcase_add_test(tc, read_of_absent_key_is_not_exist);
  tcase_add_test(tc, read_of_unlocked_ready_key_is_not_readable);
  tcase_add_test(tc, read_of_write_locked_key_is_not_readable);
  tcase_add_test(tc, read_of_read_locked_key_returns_its_buffer);
  tcase_add_test(tc, read_returns_the_buffer_reserve_read_returned);
  tcase_add_test(tc, repeated_reads_take_no_lock_so_one_release_frees_a_temporary);
  tcase_add_test(tc, read_of_a_batch_fails_on_first_problem_and_releases_good_keys);
  tcase_add_test(tc, read_works_only_between_reserve_and_finish);
  tcase_add_test(tc, finish_read_of_absent_key_is_not_exist);
  tcase_add_test(tc, finish_read_after_reserve_read_succeeds);
  tcase_add_test(tc, finish_read_without_read_lock_is_wrong_state);
  tcase_add_test(tc, finish_read_of_write_locked_key_is_wrong_state);
  tcase_add_test(tc, finish_read_frees_a_temporary_at_its_last_reader);
  tcase_add_test(tc, finish_read_counts_down_stacked_reads_of_a_temporary);
  tcase_add_test(tc, finish_read_with_extra_readers_releases_them_all);
  tcase_add_test(tc, finish_read_with_fewer_readers_keeps_the_rest);
  tcase_add_test(tc, finish_read_with_extra_readers_frees_a_temporary);
  tcase_add_test(tc, temporary_survives_a_partial_release);
  tcase_add_test(tc, reserve_write_of_new_key_returns_a_buffer);
  tcase_add_test(tc, reserve_write_of_write_locked_key_is_not_writable);
  tcase_add_test(tc, reserve_write_of_read_locked_key_is_not_writable);
  tcase_add_test(tc, reserve_write_of_temporary_key_is_not_writable);
  tcase_add_test(tc, reserve_write_of_several_keys_gives_distinct_buffers);
  tcase_add_test(tc, reserve_write_that_does_not_fit_fails_every_new_key);
  tcase_add_test(tc, reserve_write_new_refuses_existing_keys);
  tcase_add_test(tc, reserve_write_update_needs_existing_keys_and_reuses_their_buffers);
  tcase_add_test(tc, reserve_write_of_existing_key_with_another_layout_is_not_writable);
  tcase_add_test(tc, finish_write_of_absent_key_is_not_exist);
  tcase_add_test(tc, finish_write_makes_the_key_readable_and_writable);
  tcase_add_test(tc, finish_write_twice_is_wrong_state);
  tcase_add_test(tc, fwarr_turns_the_write_lock_into_a_read_lock);
  tcase_add_test(tc, fwarr_of_absent_key_is_not_exist);
  tcase_add_test(tc, fwarr_of_ready_key_is_wrong_state);
  tcase_add_test(tc, no_request_makes_an_object_write_and_read_locked);
  tcase_add_test(tc, fwarr_gives_each_key_its_own_status);
  tcase_add_test(tc, read_works_after_fwarr);
  suite_add_tcase(s, tc);
  l1_manager_add_more_tests(s);
  return s;
}
