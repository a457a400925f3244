/*
 * storage_input_test.c — bad input to the storage facade: every refused
 * call returns a clear status and changes nothing (stats, statuses, locks
 * all as before); a key repeated in one batch is refused the same way.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "kvact.h"
#include "tests/support/fixture.h"
#include "tests/support/storage_client.h"

/* ---- bad input ---------------------------------------------------------- */

/* A store with some state to lose: keys 0..3 written, 0 and 1 read-locked,
 * key 4 write-locked (reserved, not finished). */
static kva_runtime *busy_store(kva_storage **out) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  kva_buf b;
  int st;
  key_range(k, 0, 5);
  fixture_write(s, 0, 4, &l);
  ck_assert_uint_eq(prefetch(s, k, 2, 0), 2);
  ck_assert_int_eq(kva_reserve_write(s, &k[4], 1, &l, KVA_WRITE_NEW, &b, &st), 1);
  *out = s;
  return rt;
}

static void busy_store_release(kva_storage *s) {
  kva_key k[5];
  int st;
  key_range(k, 0, 5);
  ck_assert_int_eq(kva_finish_write(s, &k[4], 1, &st), 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  fixture_memcheck_clean(s);
}

/* Every call that takes keys refuses (k, n) with KVA_EINVAL; a prefetch
 * handle is not even made. */
static void every_keyed_call_refuses(kva_storage *s, const kva_key *k, size_t n,
                                     const kva_layout *l, kva_buf *b, int *st) {
  kva_prefetch *h = NULL;
  static kva_layout lay[256];
  memset(lay, 0x11, sizeof(lay));
  ck_assert_int_eq(kva_reserve_write(s, k, n, l, KVA_WRITE_ALL, b, st), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_write(s, k, n, st), KVA_EINVAL);
  ck_assert_int_eq(kva_delete(s, k, n, 1, st), KVA_EINVAL);
  ck_assert_int_eq(kva_touch(s, k, n), KVA_EINVAL);
  ck_assert_int_eq(kva_submit_prefetch(s, k, n, l, 0, &h), KVA_EINVAL);
  ck_assert_ptr_null(h);
  ck_assert_int_eq(kva_read_prefetched(s, k, n, b), KVA_EINVAL);
  ck_assert_int_eq(kva_read_prefetched_layouts(s, k, n, b, lay), KVA_EINVAL);
  ck_assert_uint_eq(lay[0].ntensors, 0x11111111u); /* untouched */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, n, 0), KVA_EINVAL);
}

START_TEST(null_pointers_are_refused_and_change_nothing) {
  kva_storage *s;
  kva_runtime *rt = busy_store(&s);
  kva_layout l = fixture_layout_basic();
  kva_key k[5];
  kva_buf b[5];
  int st[5];
  key_range(k, 0, 5);
  kva_storage_stats before = stats_of(s);
  fill_status(st, 5);
  memset(b, 0x11, sizeof(b));
  kva_write_mode mode = KVA_WRITE_ALL;
  ck_assert_int_eq(kva_reserve_write(NULL, k, 5, &l, mode, b, st), KVA_EINVAL);
  ck_assert_int_eq(kva_reserve_write(s, NULL, 5, &l, mode, b, st), KVA_EINVAL);
  ck_assert_int_eq(kva_reserve_write(s, k, 5, NULL, mode, b, st), KVA_EINVAL);
  ck_assert_int_eq(kva_reserve_write(s, k, 5, &l, mode, NULL, st), KVA_EINVAL);
  ck_assert_int_eq(kva_reserve_write(s, k, 5, &l, mode, b, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_write(NULL, k, 5, st), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_write(s, NULL, 5, st), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_write(s, k, 5, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_delete(NULL, k, 5, 1, st), KVA_EINVAL);
  ck_assert_int_eq(kva_delete(s, NULL, 5, 1, st), KVA_EINVAL);
  ck_assert_int_eq(kva_delete(s, k, 5, 1, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_touch(NULL, k, 5), KVA_EINVAL);
  ck_assert_int_eq(kva_touch(s, NULL, 5), KVA_EINVAL);
  ck_assert_int_eq(kva_read_prefetched(NULL, k, 2, b), KVA_EINVAL);
  ck_assert_int_eq(kva_read_prefetched(s, NULL, 2, b), KVA_EINVAL);
  ck_assert_int_eq(kva_read_prefetched(s, k, 2, NULL), KVA_EINVAL);
  kva_layout lay[2];
  ck_assert_int_eq(kva_read_prefetched_layouts(NULL, k, 2, b, lay), KVA_EINVAL);
  ck_assert_int_eq(kva_read_prefetched_layouts(s, NULL, 2, b, lay), KVA_EINVAL);
  ck_assert_int_eq(kva_read_prefetched_layouts(s, k, 2, NULL, lay), KVA_EINVAL);
  ck_assert_int_eq(kva_read_prefetched_layouts(s, k, 2, b, NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_read_prefetched(NULL, k, 2, 0), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_read_prefetched(s, NULL, 2, 0), KVA_EINVAL);
  kva_prefetch *h = (kva_prefetch *)&h;
  ck_assert_int_eq(kva_submit_prefetch(NULL, k, 4, &l, 0, &h), KVA_EINVAL);
  ck_assert_int_eq(kva_submit_prefetch(s, NULL, 4, &l, 0, &h), KVA_EINVAL);
  ck_assert_int_eq(kva_submit_prefetch(s, k, 4, &l, 0, NULL), KVA_EINVAL);
  ck_assert_ptr_eq(h, (kva_prefetch *)&h);
  size_t hits = 77;
  ck_assert_int_eq(kva_query_prefetch(s, NULL, &hits), KVA_EINVAL);
  ck_assert_int_eq(kva_wait_prefetch(s, NULL, 10, &hits), KVA_EINVAL);
  ck_assert_uint_eq(hits, 77);
  ck_assert_int_eq(kva_prefetch_eventfd(NULL), KVA_EINVAL);
  ck_assert_int_eq(kva_clear(NULL, 1), KVA_EINVAL);
  char report[64];
  ck_assert_int_eq(kva_memcheck(NULL, report, sizeof(report)), KVA_EINVAL);
  ck_assert_int_eq(kva_memcheck(s, NULL, sizeof(report)), KVA_EINVAL);
  kva_storage_stats x;
  ck_assert_int_eq(kva_storage_get_stats(NULL, &x), KVA_EINVAL);
  ck_assert_int_eq(kva_storage_get_stats(s, NULL), KVA_EINVAL);
  assert_status_untouched(st, 5);
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  busy_store_release(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(empty_batch_is_refused) {
  kva_storage *s;
  kva_runtime *rt = busy_store(&s);
  kva_layout l = fixture_layout_basic();
  kva_key k[1] = {fixture_key(0)};
  kva_buf b[1];
  int st[1];
  kva_storage_stats before = stats_of(s);
  fill_status(st, 1);
  every_keyed_call_refuses(s, k, 0, &l, b, st);
  assert_status_untouched(st, 1);
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  busy_store_release(s);
  kva_runtime_shutdown(rt);
}
END_TEST

enum { BAD_AT, BAD_NO_NUL, BAD_EMPTY, BAD_HASH0, BAD_HASH33, NBAD };

static kva_key bad_key(int which) {
  kva_key k = fixture_key(2);
  switch (which) {
  case BAD_AT:
    strcpy(k.model, "test@model");
    break;
  case BAD_NO_NUL:
    memset(k.model, 'm', sizeof(k.model));
    break;
  case BAD_EMPTY:
    k.model[0] = '\0';
    break;
  case BAD_HASH0:
    k.hash_len = 0;
    break;
  case BAD_HASH33:
    k.hash_len = 33;
    break;
  }
  return k;
}

/* One invalid key in the middle of a batch of valid ones refuses the whole
 * call: force-delete would otherwise have removed the rest. */
START_TEST(invalid_key_anywhere_refuses_the_whole_batch) {
  kva_storage *s;
  kva_runtime *rt = busy_store(&s);
  kva_layout l = fixture_layout_basic();
  kva_storage_stats before = stats_of(s);
  for (int which = 0; which < NBAD; which++) {
    kva_key k[5];
    kva_buf b[5];
    int st[5];
    key_range(k, 0, 5);
    k[2] = bad_key(which);
    fill_status(st, 5);
    every_keyed_call_refuses(s, k, 5, &l, b, st);
    assert_status_untouched(st, 5);
  }
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  busy_store_release(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* A valid key with a 63-byte model and a 32-byte hash is accepted. */
START_TEST(longest_model_and_hash_are_accepted) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_bytes(4096);
  kva_key k = fixture_key(0);
  memset(k.model, 'm', 63);
  k.model[63] = '\0';
  k.hash_len = 32;
  memset(k.hash, 0xab, 32);
  kva_buf b;
  int st;
  ck_assert_int_eq(kva_reserve_write(s, &k, 1, &l, KVA_WRITE_NEW, &b, &st), 1);
  ck_assert_int_eq(kva_finish_write(s, &k, 1, &st), 1);
  ck_assert_uint_eq(prefetch_l(s, &k, 1, &l, 0), 1);
  ck_assert_int_eq(kva_finish_read_prefetched(s, &k, 1, 0), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

enum {
  LAY_NT0,
  LAY_NT5,
  LAY_NDIM7,
  LAY_SHAPE0,
  LAY_DTYPE,
  LAY_OVERFLOW,
  LAY_SECOND_BAD,
  LAY_SUM_OVERFLOW,
  NLAY
};

static kva_layout bad_layout(int which) {
  kva_layout l = fixture_layout_basic();
  switch (which) {
  case LAY_NT0:
    l.ntensors = 0;
    break;
  case LAY_NT5:
    l.ntensors = 5;
    break;
  case LAY_NDIM7:
    l.tensor[0].ndim = 7;
    break;
  case LAY_SHAPE0:
    l.tensor[0].shape[1] = 0;
    break;
  case LAY_DTYPE:
    l.tensor[0].dtype = (kva_dtype)(KVA_DT_FP8_E5M2 + 1);
    break;
  case LAY_OVERFLOW:
    l.tensor[0].ndim = 2;
    l.tensor[0].shape[0] = 1ull << 40;
    l.tensor[0].shape[1] = 1ull << 40;
    l.tensor[0].dtype = KVA_DT_U8;
    break;
  case LAY_SECOND_BAD: /* first tensor fine, second with an unknown dtype */
    l.ntensors = 2;
    l.tensor[1] = l.tensor[0];
    l.tensor[1].dtype = (kva_dtype)99;
    break;
  case LAY_SUM_OVERFLOW: /* each tensor 2^62 bytes: valid alone, not summed */
    l.ntensors = 4;
    for (int t = 0; t < 4; t++) {
      l.tensor[t].ndim = 2;
      l.tensor[t].shape[0] = 1ull << 31;
      l.tensor[t].shape[1] = 1ull << 31;
      l.tensor[t].dtype = KVA_DT_U8;
    }
    break;
  }
  return l;
}

START_TEST(invalid_layouts_are_refused) {
  kva_storage *s;
  kva_runtime *rt = busy_store(&s);
  kva_storage_stats before = stats_of(s);
  ck_assert_uint_eq(kva_layout_bytes(NULL), 0);
  for (int which = 0; which < NLAY; which++) {
    kva_layout l = bad_layout(which);
    ck_assert_msg(kva_layout_bytes(&l) == 0, "layout %d has %zu bytes", which,
                  kva_layout_bytes(&l));
    kva_key k[5];
    kva_buf b[5];
    int st[5];
    key_range(k, 5, 5); /* new keys: a valid layout would create them */
    fill_status(st, 5);
    for (kva_write_mode m = KVA_WRITE_NEW; m <= KVA_WRITE_ALL; m++)
      ck_assert_int_eq(kva_reserve_write(s, k, 5, &l, m, b, st), KVA_EINVAL);
    kva_prefetch *h = NULL;
    ck_assert_int_eq(kva_submit_prefetch(s, k, 5, &l, 0, &h), KVA_EINVAL);
    ck_assert_ptr_null(h);
    assert_status_untouched(st, 5);
  }
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  busy_store_release(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* Sizes of valid layouts: a scalar is one element, each tensor starts on a
 * 64-byte boundary. */
START_TEST(layout_bytes_counts_tensors_on_64_byte_boundaries) {
  kva_layout l;
  memset(&l, 0, sizeof(l));
  l.ntensors = 1;
  l.tensor[0].ndim = 0;
  l.tensor[0].dtype = KVA_DT_F32;
  ck_assert_uint_eq(kva_layout_bytes(&l), 4);
  l.ntensors = 2;
  l.tensor[0].ndim = 1;
  l.tensor[0].shape[0] = 10;
  l.tensor[0].dtype = KVA_DT_U8;
  l.tensor[1].ndim = 1;
  l.tensor[1].shape[0] = 3;
  l.tensor[1].dtype = KVA_DT_F32;
  ck_assert_uint_eq(kva_layout_bytes(&l), 64 + 12);
  l.ntensors = 1;
  l.tensor[0].ndim = 6;
  for (int d = 0; d < 6; d++) l.tensor[0].shape[d] = 2;
  l.tensor[0].dtype = KVA_DT_BF16;
  ck_assert_uint_eq(kva_layout_bytes(&l), 128);
  kva_layout basic = fixture_layout_basic(), large = fixture_layout_large();
  ck_assert_uint_eq(kva_layout_bytes(&basic), 204800);
  ck_assert_uint_eq(kva_layout_bytes(&large), 8 * MiB);
  /* and the store hands out buffers of exactly that length */
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  memset(&l, 0, sizeof(l));
  l.ntensors = 2;
  l.tensor[0].ndim = 1;
  l.tensor[0].shape[0] = 10;
  l.tensor[0].dtype = KVA_DT_U8;
  l.tensor[1].ndim = 0;
  l.tensor[1].dtype = KVA_DT_F16;
  kva_key k = fixture_key(1);
  kva_buf b;
  int st;
  ck_assert_int_eq(kva_reserve_write(s, &k, 1, &l, KVA_WRITE_NEW, &b, &st), 1);
  ck_assert_uint_eq(b.len, 66);
  ck_assert_int_eq(kva_finish_write(s, &k, 1, &st), 1);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(invalid_write_mode_is_refused) {
  kva_storage *s;
  kva_runtime *rt = busy_store(&s);
  kva_layout l = fixture_layout_basic();
  kva_key k[6];
  kva_buf b[6];
  int st[6];
  key_range(k, 0, 6);
  fill_status(st, 6);
  kva_storage_stats before = stats_of(s);
  ck_assert_int_eq(kva_reserve_write(s, k, 6, &l, (kva_write_mode)3, b, st), KVA_EINVAL);
  ck_assert_int_eq(kva_reserve_write(s, k, 6, &l, (kva_write_mode)-1, b, st), KVA_EINVAL);
  assert_status_untouched(st, 6);
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  busy_store_release(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(extra_readers_above_127_is_refused) {
  kva_runtime *rt = start_store();
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k[2];
  key_range(k, 0, 2);
  fixture_write(s, 0, 2, &l);
  kva_prefetch *h = NULL;
  ck_assert_int_eq(kva_submit_prefetch(s, k, 2, &l, 128, &h), KVA_EINVAL);
  ck_assert_ptr_null(h);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 0);
  /* 127 is the largest: 128 locks, which a release of 128 undoes */
  ck_assert_uint_eq(prefetch(s, k, 2, 127), 2);
  kva_storage_stats before = stats_of(s);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 128), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, UINT32_MAX), KVA_EINVAL);
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 126), 2);
  ck_assert_uint_eq(stats_of(s).l1_read_locked, 2); /* one lock left each */
  ck_assert_int_eq(kva_finish_read_prefetched(s, k, 2, 0), 2);
  fixture_memcheck_clean(s);
  kva_runtime_shutdown(rt);
}
END_TEST

/* Log lines that name a repeated key, with the call and both indexes. */
static int repeat_lines;
static char last_line[512];

static void count_repeats(int level, const char *msg, void *arg) {
  if (level == KVA_LOG_WARN && strstr(msg, "are the same key")) {
    repeat_lines++;
    snprintf(last_line, sizeof(last_line), "%s", msg);
  }
}

/* A key named twice, wherever it is and whatever else is wrong with the
 * batch (a missing key, a lock), makes every call that takes keys return
 * KVA_EINVAL with nothing changed (statuses untouched, no lock taken or
 * released, no handle), and says why in one log line naming the call and
 * both indexes. kvact.h, "Batched calls"; docs/invariants.md I-L1-11. */
START_TEST(a_repeated_key_anywhere_refuses_every_call_and_changes_nothing) {
  kva_storage *s;
  kva_runtime *rt = busy_store(&s);
  kva_layout l = fixture_layout_basic();
  kva_storage_stats before = stats_of(s);
  enum { BIG = 200 }; /* more than the check's table on the stack */
  static kva_key k[BIG];
  static kva_buf b[BIG];
  static int st[BIG];
  const struct {
    size_t n, a, b; /* keys[b] repeats keys[a]; keys 0..n-1 otherwise distinct */
  } cases[] = {{2, 0, 1}, {5, 0, 4}, {5, 3, 4}, {5, 1, 2}, {BIG, 7, BIG - 1}, {BIG, 150, 151}};
  kva_log_set(count_repeats, NULL, KVA_LOG_WARN);
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    key_range(k, 0, cases[c].n); /* 0, 1: read-locked; 4: write-locked; 5..: missing */
    k[cases[c].b] = k[cases[c].a];
    fill_status(st, cases[c].n);
    repeat_lines = 0;
    every_keyed_call_refuses(s, k, cases[c].n, &l, b, st);
    kva_tier_hits th;
    ck_assert_int_eq(kva_lookup(s, k, cases[c].n, 1, &th), KVA_EINVAL);
    ck_assert_int_eq(kva_unpin(s, k, cases[c].n), KVA_EINVAL);
    assert_status_untouched(st, cases[c].n);
    ck_assert_int_eq(repeat_lines, 10); /* one line per call */
    char want[64];
    snprintf(want, sizeof(want), "keys[%zu] and keys[%zu]", cases[c].a, cases[c].b);
    ck_assert_msg(strstr(last_line, "kva_unpin: ") && strstr(last_line, want), "%s", last_line);
  }
  kva_log_set(NULL, NULL, KVA_LOG_WARN);
  kva_storage_stats after = stats_of(s);
  assert_same_stats(&before, &after);
  busy_store_release(s);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(runtime_without_l1_has_no_storage) {
  kva_runtime *rt = fixture_runtime(2, NULL); /* l1.size_bytes = 0 */
  ck_assert_ptr_null(kva_storage_of(rt));
  ck_assert_ptr_null(kva_storage_of(NULL));
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic();
  kva_key k = fixture_key(0);
  kva_buf b;
  int st = SENTINEL;
  kva_prefetch *h = NULL;
  ck_assert_int_eq(kva_reserve_write(s, &k, 1, &l, KVA_WRITE_NEW, &b, &st), KVA_EINVAL);
  ck_assert_int_eq(kva_finish_write(s, &k, 1, &st), KVA_EINVAL);
  ck_assert_int_eq(kva_submit_prefetch(s, &k, 1, &l, 0, &h), KVA_EINVAL);
  ck_assert_int_eq(kva_clear(s, 0), KVA_EINVAL);
  ck_assert_int_eq(st, SENTINEL);
  ck_assert_ptr_null(h);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("storage_input_test");
  TCase *tc = tcase_create("bad_input");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, null_pointers_are_refused_and_change_nothing);
  tcase_add_test(tc, empty_batch_is_refused);
  tcase_add_test(tc, invalid_key_anywhere_refuses_the_whole_batch);
  tcase_add_test(tc, longest_model_and_hash_are_accepted);
  tcase_add_test(tc, invalid_layouts_are_refused);
  tcase_add_test(tc, layout_bytes_counts_tensors_on_64_byte_boundaries);
  tcase_add_test(tc, invalid_write_mode_is_refused);
  tcase_add_test(tc, extra_readers_above_127_is_refused);
  tcase_add_test(tc, a_repeated_key_anywhere_refuses_every_call_and_changes_nothing);
  tcase_add_test(tc, runtime_without_l1_has_no_storage);
  suite_add_tcase(s, tc);
  return s;
}
