/*
 * l2_disk_hasher_test.c — the disk tier's checksums shared with its
 * disk_hasher actor: batches larger than the jobs it may have out, keys
 * verified by either actor failing alike, the same bytes in deterministic
 * mode (no hasher), and shutdown with the hasher stopped first.
 */
#include <check.h>
#include <stdio.h>

#include "tests/l2/l2_disk_test.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

#define BIG_BATCH 200u /* more keys for the hasher than DISK_HASH_MAX_OUT */

static kva_runtime *reopen(int workers, const char *path, uint32_t nslots) {
  return l2_start_disk(workers, DT_L1, dt_json(path, dt_capacity(nslots), ""), NULL);
}

static void big_batch(int workers, const char *name) {
  char path[512];
  dt_path(path, sizeof(path), name);
  uint64_t ids[BIG_BATCH];
  uint8_t bits[(BIG_BATCH + 7) / 8] = {0};
  for (uint64_t i = 0; i < BIG_BATCH; i++) ids[i] = i;
  kva_runtime *rt = reopen(workers, path, 256);
  kva_storage *s = kva_storage_of(rt);
  ck_assert_int_eq(dt_store(s, ids, BIG_BATCH, 5, true), KVA_OK);
  ck_assert_int_eq(dt_load(s, ids, BIG_BATCH, 5, true, DT_LEN, bits), KVA_OK);
  for (size_t i = 0; i < BIG_BATCH; i++) ck_assert_msg(kva_bit_get(bits, i), "key %zu", i);
  ck_assert_int_eq(dt_store(s, ids, BIG_BATCH, 6, false), KVA_OK); /* rewrite, misaligned */
  ck_assert_int_eq(dt_load(s, ids, BIG_BATCH, 6, false, DT_LEN, bits), KVA_OK);
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.objects, BIG_BATCH);
  ck_assert_uint_eq(st.load_failures, 0);
  ck_assert_uint_eq(st.store_failures, 0);
  l2_finish(rt);
}

START_TEST(a_batch_beyond_the_hasher_jobs_round_trips_byte_exact) {
  big_batch(2, "hasher_big.kvd");
}
END_TEST

START_TEST(a_batch_round_trips_in_deterministic_mode_without_a_hasher) {
  big_batch(0, "hasher_big_det.kvd");
}
END_TEST

/* Keys 2 (summed by the adapter) and 3 (by the hasher) are damaged: both
 * are misses of the same load, their neighbours load. */
START_TEST(a_damaged_payload_fails_whichever_actor_summed_it) {
  char path[512];
  dt_path(path, sizeof(path), "hasher_flip.kvd");
  const uint64_t ids[] = {0, 1, 2, 3, 4, 5, 6, 7};
  kva_runtime *rt = reopen(2, path, 16);
  ck_assert_int_eq(dt_store(kva_storage_of(rt), ids, 8, 7, true), KVA_OK);
  l2_finish(rt);
  for (uint64_t id = 2; id <= 3; id++) {
    uint64_t off = dt_slot_of(path, id);
    ck_assert_uint_ne(off, 0);
    dt_flip_byte(path, off + DISK_BLOCK + 4321);
  }
  rt = reopen(2, path, 16);
  kva_storage *s = kva_storage_of(rt);
  uint8_t bits[1] = {0};
  ck_assert_int_eq(dt_load(s, ids, 8, 7, true, DT_LEN, bits), KVA_OK);
  for (size_t i = 0; i < 8; i++) ck_assert_int_eq(kva_bit_get(bits, i), i != 2 && i != 3);
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.load_failures, 2);
  ck_assert_uint_eq(st.objects, 6); /* both dropped */
  l2_finish(rt);
}
END_TEST

/* Shutdown right after stores and loads were answered, many times: the
 * hasher stops first and the adapter's stop never waits for it. */
START_TEST(shutdown_after_shared_work_stops_cleanly) {
  char path[512];
  dt_path(path, sizeof(path), "hasher_stop.kvd");
  const uint64_t ids[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  for (uint32_t round = 0; round < 8; round++) {
    kva_runtime *rt = reopen(2, path, 16);
    kva_storage *s = kva_storage_of(rt);
    uint8_t bits[2] = {0};
    if (round) ck_assert_int_eq(dt_load(s, ids, 12, round - 1, true, DT_LEN, bits), KVA_OK);
    ck_assert_int_eq(dt_store(s, ids, 12, round, round % 2 == 0), KVA_OK);
    l2_finish(rt);
  }
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_disk_hasher");
  TCase *tc = tcase_create("hasher");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, a_batch_beyond_the_hasher_jobs_round_trips_byte_exact);
  tcase_add_test(tc, a_batch_round_trips_in_deterministic_mode_without_a_hasher);
  tcase_add_test(tc, a_damaged_payload_fails_whichever_actor_summed_it);
  tcase_add_test(tc, shutdown_after_shared_work_stops_cleanly);
  suite_add_tcase(su, tc);
  return su;
}
