/*
 * l1_client.c — requests to the L1 manager through the facade's request
 * path (storage_call), and the observations the L1 suites make with them
 * (see l1_client.h for how LMCache's observations map onto them).
 */
#include "tests/support/l1_client.h"

#include <check.h>
#include <string.h>

#include "storage/storage_internal.h"
#include "tests/support/fixture.h"

#define MAXK 16

/* ---- requests ------------------------------------------------------------ */

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

/* ---- observations -------------------------------------------------------- */

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
  kva_runtime *rt = fixture_storage(L1_CLIENT_WORKERS, 128 * MiB, NULL);
  *s = kva_storage_of(rt);
  return rt;
}

void stop_storage(kva_runtime *rt) {
  fixture_memcheck_clean(kva_storage_of(rt));
  kva_runtime_shutdown(rt);
}
