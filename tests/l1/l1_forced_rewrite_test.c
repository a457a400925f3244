/*
 * l1_forced_rewrite_test.c — a key force-deleted (or cleared) while an
 * engine holds it, then written again: every call by key still reaches the
 * object its caller locked, nobody reads another holder's bytes, no lock
 * outlives its holder, and memory is never reused under a holder.
 *
 * Each test runs twice: _i = 0 removes the key with kva_delete(force),
 * _i = 1 with kva_clear(force). The tests accept either answer kvact.h
 * allows to the re-write (refused while the old object is held, or a new
 * object) and check the bytes and locks that follow from it.
 */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "l1/l1_manager.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define OBJ_BYTES (64u * 1024u)

static void force_remove(kva_storage *s, uint64_t id, int how) {
  if (how == 0)
    ck_assert_int_eq(l2_delete_one(s, id, 1), KVA_OK);
  else
    ck_assert_int_ge(kva_clear(s, 1), 1);
}

/* Reserves key id (KVA_WRITE_NEW); KVA_OK with *buf, or the key's status. */
static int reserve(kva_storage *s, uint64_t id, const kva_layout *l, kva_buf *buf) {
  kva_key k = fixture_key(id);
  int st = -1;
  int rc = kva_reserve_write(s, &k, 1, l, KVA_WRITE_NEW, buf, &st);
  ck_assert_int_eq(rc, st == KVA_OK ? 1 : 0);
  return st;
}

/* The prefetched bytes of key id, which must be version v. */
static kva_buf read_own(kva_storage *s, uint64_t id, uint32_t v) {
  kva_key k = fixture_key(id);
  kva_buf b = {0};
  ck_assert_int_eq(kva_read_prefetched(s, &k, 1, &b), KVA_OK);
  ck_assert_uint_eq(b.len, OBJ_BYTES);
  ck_assert_msg(l2_matches(b.ptr, b.len, id, v), "key %lu: not the version %u its reader locked",
                (unsigned long)id, v);
  return b;
}

static void release(kva_storage *s, uint64_t id) {
  kva_key k = fixture_key(id);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
}

/* Reader A holds K; K is force-deleted and written again; reader C
 * prefetches K. A reads its own bytes, A's release leaves C's lock alone,
 * and C's buffer survives a non-forced delete and other writes. */
START_TEST(a_reader_of_a_deleted_key_keeps_its_object_and_no_other) {
  kva_runtime *rt = l2_start(0, 64u * 1024u * 1024u, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ_BYTES);
  uint64_t k = 7, other = 8;
  l2_write_l1_only(s, &k, 1, &l, 1);
  ck_assert_int_eq(kva_set_freeze(s, 1), KVA_OK);     /* L2 keeps out of it */
  ck_assert_uint_eq(l2_prefetch(s, &k, 1, &l, 0), 1); /* A */
  force_remove(s, k, _i);
  kva_buf w;
  bool rewritten = reserve(s, k, &l, &w) == KVA_OK;
  if (rewritten) {
    l2_fill(w.ptr, w.len, k, 2);
    ck_assert_int_eq(l2_finish_one(s, k), KVA_OK);
  }
  size_t c_hits = l2_prefetch(s, &k, 1, &l, 0); /* C */
  ck_assert_uint_le(c_hits, rewritten ? 1 : 0);
  kva_buf cb = {0};
  if (c_hits) cb = read_own(s, k, 2);
  read_own(s, k, 1); /* A */
  release(s, k);
  if (c_hits) {
    ck_assert_int_eq(l2_delete_one(s, k, 0), KVA_KEY_LOCKED); /* C still holds it */
    l2_write(s, &other, 1, &l, 3);
    ck_assert(l2_matches(cb.ptr, cb.len, k, 2));
    release(s, k);
  }
  ck_assert_int_eq(kva_set_freeze(s, 0), KVA_OK);
  l2_finish(rt);
}
END_TEST

/* Writer A holds K; K is force-deleted; writer B reserves K and fills half
 * of it. A's finish must not publish B's buffer: KVA_KEY_NOT_EXIST. */
START_TEST(a_writer_of_a_deleted_key_never_publishes_another_buffer) {
  kva_runtime *rt = l2_start(0, 64u * 1024u * 1024u, 1, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ_BYTES);
  uint64_t k = 9;
  kva_buf a, b;
  ck_assert_int_eq(reserve(s, k, &l, &a), KVA_OK);
  l2_fill(a.ptr, a.len, k, 1);
  force_remove(s, k, _i);
  bool b_holds = reserve(s, k, &l, &b) == KVA_OK;
  if (b_holds) l2_fill(b.ptr, b.len / 2, k, 2);
  ck_assert_int_eq(l2_finish_one(s, k), KVA_KEY_NOT_EXIST); /* A */
  if (b_holds) {
    l2_fill(b.ptr, b.len, k, 2);
    ck_assert_int_eq(l2_finish_one(s, k), KVA_OK);
  }
  l2_flush(s);
  ck_assert_int_eq(kva_clear(s, 0), b_holds ? 1 : 0);
  size_t hits = l2_prefetch(s, &k, 1, &l, 0); /* from L2 now */
  ck_assert_uint_eq(hits, b_holds ? 1 : 0);
  if (hits) {
    read_own(s, k, 2);
    release(s, k);
  }
  l2_finish(rt);
}
END_TEST

/* Writer A holds K; K is force-deleted; a prefetch loads K from L2 (1 ms
 * per request). A's finish must not land on the load's buffer: the load
 * serves L2's bytes or misses, and no lock is left behind. */
START_TEST(a_writer_of_a_deleted_key_leaves_a_prefetch_of_it_alone) {
  kva_runtime *rt = l2_start(0, 64u * 1024u * 1024u, 1, "\"latency_us\":1000", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ_BYTES);
  uint64_t k = 11;
  l2_seed(s, 0, &k, 1, &l, 1);
  kva_buf a;
  ck_assert_int_eq(reserve(s, k, &l, &a), KVA_OK);
  l2_fill(a.ptr, a.len, k, 5);
  force_remove(s, k, _i);
  kva_prefetch *h = l2_submit(s, &k, 1, &l, 0);
  kva_runtime_run_until_idle(rt);
  kva_runtime_advance(rt, 1500000u); /* the lookup is answered */
  ck_assert_int_eq(l2_finish_one(s, k), KVA_KEY_NOT_EXIST);
  size_t hits = l2_wait(s, h);
  if (hits) {
    read_own(s, k, 1);
    release(s, k);
  }
  ck_assert_uint_eq(l2_prefetch(s, &k, 1, &l, 0), 1); /* K is loadable again */
  read_own(s, k, 1);
  release(s, k);
  l2_finish(rt);
}
END_TEST

/* Without write-back a prefetched object is temporary; a pin keeps it
 * alive past its last read release, and kva_unpin finds it. */
START_TEST(a_pin_keeps_a_temporary_object_alive) {
  kva_runtime *rt = l2_start_no_writeback(0, 1, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ_BYTES);
  uint64_t k = 13;
  l2_seed(s, 0, &k, 1, &l, 1);
  ck_assert_uint_eq(l2_prefetch(s, &k, 1, &l, 0), 1);
  ck_assert_int_ne(l2_l1_state(s, k) & L1_TEMPORARY, 0);
  kva_tier_hits th = l2_lookup_range(s, k, 1, 1);
  ck_assert_uint_eq(th.tier[0].hits, 1);
  l2_read_release(s, &k, 1, 1, 0);
  ck_assert_int_ne(l2_l1_state(s, k), L1_ABSENT);
  kva_key key = fixture_key(k);
  ck_assert_int_eq(kva_unpin(s, &key, 1), 1);
  ck_assert_int_eq(l2_l1_state(s, k), L1_ABSENT); /* it went with its last pin */
  l2_finish(rt);
}
END_TEST

/* I-L1-12: a pinned object survives a forced delete (KVA_KEY_LOCKED) and a
 * forced clear (which takes the unpinned one beside it); unpinned, a forced
 * delete takes it. A prefetch still finds it in between. */
START_TEST(a_forced_delete_or_clear_leaves_a_pinned_object) {
  kva_runtime *rt = l2_start(0, 64u * 1024u * 1024u, 0, "", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(OBJ_BYTES);
  for (uint64_t id = 21; id <= 22; id++) {
    kva_buf b;
    ck_assert_int_eq(reserve(s, id, &l, &b), KVA_OK);
    l2_fill(b.ptr, b.len, id, 1);
    kva_key k = fixture_key(id);
    int st = -1;
    ck_assert_int_eq(kva_finish_write(s, &k, 1, &st), 1);
  }
  kva_key pinned = fixture_key(21);
  kva_tier_hits th;
  ck_assert_int_eq(kva_lookup(s, &pinned, 1, 1, &th), KVA_OK);
  ck_assert_uint_eq(th.tier[0].hits, 1);
  int st = -1;
  ck_assert_int_eq(kva_delete(s, &pinned, 1, 1, &st), 0);
  ck_assert_int_eq(st, KVA_KEY_LOCKED);
  ck_assert_int_eq(kva_clear(s, 1), 1); /* key 22 only */
  ck_assert_int_eq(l2_l1_state(s, 22), L1_ABSENT);
  ck_assert_int_ne(l2_l1_state(s, 21), L1_ABSENT);
  ck_assert_uint_eq(l2_prefetch(s, (uint64_t[]){21}, 1, &l, 0), 1);
  read_own(s, 21, 1);
  release(s, 21);
  ck_assert_int_eq(kva_unpin(s, &pinned, 1), 1);
  ck_assert_int_eq(kva_delete(s, &pinned, 1, 1, &st), 1);
  ck_assert_int_eq(l2_l1_state(s, 21), L1_ABSENT);
  l2_finish(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l1_forced_rewrite");
  TCase *tc = tcase_create("forced");
  tcase_set_timeout(tc, 30);
  tcase_add_loop_test(tc, a_reader_of_a_deleted_key_keeps_its_object_and_no_other, 0, 2);
  tcase_add_loop_test(tc, a_writer_of_a_deleted_key_never_publishes_another_buffer, 0, 2);
  tcase_add_loop_test(tc, a_writer_of_a_deleted_key_leaves_a_prefetch_of_it_alone, 0, 2);
  tcase_add_test(tc, a_pin_keeps_a_temporary_object_alive);
  tcase_add_test(tc, a_forced_delete_or_clear_leaves_a_pinned_object);
  suite_add_tcase(su, tc);
  return su;
}
