/*
 * l2_disk_test.c — the disk tier's protocol: round trips through the whole
 * stack (threaded and deterministic), lookup bitmaps, locks against
 * replacement and eviction, LRU eviction of unlocked slots, duplicate
 * keys, all-or-nothing stores, aligned and misaligned buffers, I/O errors.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "l2/adapters/disk/disk_io.h"
#include "tests/l2/l2_disk_test.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"

static kva_runtime *start(int workers, const char *name, uint32_t nslots, char *path) {
  dt_path(path, 512, name);
  return l2_start_disk(workers, DT_L1, dt_json(path, dt_capacity(nslots), ""), NULL);
}

static void round_trip(int workers, const char *name) {
  char path[512];
  kva_runtime *rt = start(workers, name, 256, path);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = dt_layout();
  dt_write_flush_clear(s, 0, 200, &l, 3);
  ck_assert_uint_eq(dt_read_back(s, 0, 200, &l, 3), 200);
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.objects, 200);
  ck_assert_uint_eq(st.bytes, 200ull * DT_LEN);
  ck_assert_uint_eq(st.loads, 200);
  ck_assert_uint_eq(st.load_failures, 0);
  ck_assert_uint_eq(st.store_failures, 0);
  l2_finish(rt);
}

START_TEST(many_keys_round_trip_byte_exact) {
  round_trip(2, "round_trip.kvd");
}
END_TEST

START_TEST(many_keys_round_trip_in_deterministic_mode) {
  round_trip(0, "round_trip_det.kvd");
}
END_TEST

/* A layout of whole blocks (no tail) sizes the slots of a fresh tier. */
START_TEST(whole_block_objects_size_a_fresh_tier) {
  char path[512], json[1024];
  dt_path(path, sizeof(path), "whole_blocks.kvd");
  snprintf(json, sizeof(json), "\"path\":\"%s\",\"capacity_bytes\":16777216", path);
  kva_runtime *rt = l2_start_disk(1, DT_L1, json, NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = fixture_layout_basic(); /* 204,800 bytes = 50 blocks */
  dt_write_flush_clear(s, 0, 20, &l, 1);
  ck_assert_uint_eq(dt_read_back(s, 0, 20, &l, 1), 20);
  ck_assert_uint_eq(dt_super_read(path).slot_bytes, 4096 + 204800);
  l2_finish(rt);
}
END_TEST

START_TEST(lookup_bitmap_has_misses_in_between) {
  char path[512];
  kva_runtime *rt = start(1, "bitmap.kvd", 16, path);
  kva_storage *s = kva_storage_of(rt);
  const uint64_t even[] = {0, 2, 4, 6, 8}, all[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  ck_assert_int_eq(dt_store(s, even, 5, 0, false), KVA_OK);
  uint8_t bits[2];
  ck_assert_uint_eq(dt_lock(s, all, 10, bits), 5);
  ck_assert_uint_eq(bits[0], 0x55); /* keys 0 2 4 6 */
  ck_assert_uint_eq(bits[1], 0x01); /* key 8 */
  ck_assert_uint_eq(l2_stats(s, 0).keys_locked, 5);
  ck_assert_uint_eq(l2_stats(s, 0).lookups, 10);
  l2_unlock(s, 0, even, 5);
  l2_unlock(s, 0, all, 10); /* unlocked and unknown keys are ignored */
  l2_finish(rt);
}
END_TEST

START_TEST(aligned_and_misaligned_buffers_load_exact_bytes) {
  char path[512];
  kva_runtime *rt = start(1, "aligned.kvd", 8, path);
  kva_storage *s = kva_storage_of(rt);
  const uint64_t a[] = {1, 2}, m[] = {3, 4}, all[] = {1, 2, 3, 4};
  ck_assert_int_eq(dt_store(s, a, 2, 5, true), KVA_OK);
  ck_assert_int_eq(dt_store(s, m, 2, 6, false), KVA_OK);
  uint8_t bits[1];
  ck_assert_int_eq(dt_load(s, a, 2, 5, false, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0x3);
  ck_assert_int_eq(dt_load(s, m, 2, 6, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0x3);
  /* another size is a miss that leaves the slot alone */
  ck_assert_int_eq(dt_load(s, all, 4, 0, true, DT_LEN - 1, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0);
  ck_assert_int_eq(dt_load(s, m, 2, 6, false, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0x3);
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.loads, 10);
  ck_assert_uint_eq(st.load_failures, 4);
  ck_assert_uint_eq(st.objects, 4);
  l2_finish(rt);
}
END_TEST

/* One STORE per key: keys that are not a chain (a STORE's keys are one,
 * see disk_store.c), so plain LRU order applies between them. */
static void store_each(kva_storage *s, const uint64_t *ids, size_t n, uint32_t v) {
  for (size_t i = 0; i < n; i++) ck_assert_int_eq(dt_store(s, &ids[i], 1, v, true), KVA_OK);
}

/* Four slots; key 0 is the least recently stored but locked. */
START_TEST(a_lock_blocks_replacement_and_eviction_until_unlock) {
  char path[512];
  kva_runtime *rt = start(1, "locks.kvd", 4, path);
  kva_storage *s = kva_storage_of(rt);
  const uint64_t first[] = {0, 1, 2, 3}, k0 = 0, k4 = 4, k5 = 5, rest[] = {2, 3, 4};
  uint8_t bits[1];
  store_each(s, first, 4, 0);
  ck_assert_uint_eq(dt_lock(s, &k0, 1, bits), 1);
  ck_assert_int_eq(dt_store(s, &k0, 1, 1, true), KVA_EAGAIN);
  ck_assert_int_eq(dt_store(s, &k4, 1, 0, true), KVA_OK); /* evicts 1, not 0 */
  ck_assert(dt_has(s, 0) && !dt_has(s, 1) && dt_has(s, 4));
  ck_assert_uint_eq(dt_lock(s, rest, 3, bits), 3);
  ck_assert_int_eq(dt_store(s, &k5, 1, 0, true), KVA_ENOMEM); /* every slot locked */
  l2_unlock(s, 0, &k0, 1);
  ck_assert_int_eq(dt_store(s, &k5, 1, 0, true), KVA_OK); /* now 0 goes */
  ck_assert(!dt_has(s, 0) && dt_has(s, 5));
  ck_assert_int_eq(dt_load(s, &k4, 1, 0, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 1);
  l2_unlock(s, 0, rest, 3);
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.evictions, 2);
  ck_assert_uint_eq(st.store_failures, 2);
  ck_assert_uint_eq(st.objects, 4);
  l2_finish(rt);
}
END_TEST

START_TEST(full_tier_evicts_the_least_recently_used_unlocked_slot) {
  char path[512];
  kva_runtime *rt = start(1, "lru.kvd", 4, path);
  kva_storage *s = kva_storage_of(rt);
  const uint64_t first[] = {0, 1, 2, 3}, k4 = 4, k5 = 5;
  store_each(s, first, 4, 0);
  ck_assert(dt_has(s, 0)); /* a lock and its unlock make 0 the most recent */
  ck_assert_int_eq(dt_store(s, &k4, 1, 0, true), KVA_OK);
  ck_assert_int_eq(dt_store(s, &k5, 1, 0, true), KVA_OK);
  ck_assert(dt_has(s, 0) && !dt_has(s, 1) && !dt_has(s, 2) && dt_has(s, 3));
  ck_assert(dt_has(s, 4) && dt_has(s, 5));
  ck_assert_uint_eq(l2_stats(s, 0).evictions, 2);
  l2_finish(rt);
}
END_TEST

START_TEST(duplicate_keys_in_one_store_are_stored_once) {
  char path[512];
  kva_runtime *rt = start(1, "dup.kvd", 2, path);
  kva_storage *s = kva_storage_of(rt);
  const uint64_t ids[] = {7, 7, 8, 7};
  ck_assert_int_eq(dt_store(s, ids, 4, 2, true), KVA_OK); /* fits 2 slots */
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.objects, 2);
  ck_assert_uint_eq(st.bytes, 2 * DT_LEN);
  ck_assert_uint_eq(st.stores, 1);
  ck_assert_uint_eq(st.evictions, 0);
  uint8_t bits[1];
  ck_assert_int_eq(dt_load(s, ids, 3, 2, true, DT_LEN, bits), KVA_OK);
  ck_assert_uint_eq(bits[0], 0x7);
  l2_finish(rt);
}
END_TEST

START_TEST(a_store_that_does_not_fit_changes_nothing) {
  char path[512];
  kva_runtime *rt = start(1, "nofit.kvd", 2, path);
  kva_storage *s = kva_storage_of(rt);
  const uint64_t three[] = {1, 2, 3}, one = 9;
  ck_assert_int_eq(dt_store(s, &one, 1, 0, true), KVA_OK);
  ck_assert_int_eq(dt_store(s, three, 3, 0, true), KVA_ENOMEM);
  ck_assert(dt_has(s, 9) && !dt_has(s, 1));
  /* bigger than a slot: refused too */
  kva_layout big = fixture_layout_bytes(3 * DT_SLOT);
  kva_key k = fixture_key(10);
  kva_buf b = {calloc(1, 3 * DT_SLOT), 3 * DT_SLOT};
  kva_l2_req r = {.keys = &k, .n = 1, .layout = &big, .bufs = &b};
  ck_assert_int_eq(l2_ask(s, 0, KVA_L2_STORE, &r), KVA_ENOMEM);
  free(b.ptr);
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.objects, 1);
  ck_assert_uint_eq(st.store_failures, 2);
  l2_finish(rt);
}
END_TEST

/* A file cut short under the tier: the reads come back short, which is an
 * I/O error; the keys are misses and their slots are dropped. */
START_TEST(a_read_error_is_a_miss_and_fails_the_load) {
  char path[512];
  kva_runtime *rt = start(1, "ioerr.kvd", 4, path);
  kva_storage *s = kva_storage_of(rt);
  const uint64_t ids[] = {0, 1};
  ck_assert_int_eq(dt_store(s, ids, 2, 0, true), KVA_OK);
  l2_log_start(KVA_LOG_WARN);
  ck_assert_int_eq(truncate(path, (off_t)(2 * DISK_BLOCK)), 0);
  uint8_t bits[1];
  ck_assert_int_eq(dt_load(s, ids, 2, 0, true, DT_LEN, bits), KVA_EIO);
  ck_assert_uint_eq(bits[0], 0);
  ck_assert(!dt_has(s, 0) && !dt_has(s, 1));
  kva_l2_stats st = l2_stats(s, 0);
  ck_assert_uint_eq(st.load_failures, 2);
  ck_assert_uint_eq(st.objects, 0);
  ck_assert_uint_eq(l2_log_count("dropped"), 2);
  l2_log_stop();
  l2_finish(rt);
}
END_TEST

static bool not_bypassed(kva_storage *s, void *arg) {
  return kva_tier_bypassed(s, "disk0") == 0;
}

/* Through the whole stack: failing loads count toward the tier's health,
 * and so do lookups while the disk fails (they probe it). */
START_TEST(read_errors_bypass_the_tier) {
  char path[512];
  dt_path(path, sizeof(path), "bypass.kvd");
  kva_runtime *rt = l2_start_disk(1, DT_L1, dt_json(path, dt_capacity(8), ""),
                                  "l2_bypass_failures=2", "l2_probe_interval_ms=20", NULL);
  kva_storage *s = kva_storage_of(rt);
  kva_layout l = dt_layout();
  dt_write_flush_clear(s, 0, 4, &l, 0);
  ck_assert_int_eq(truncate(path, 0), 0);
  l2_log_start(KVA_LOG_WARN);
  for (uint64_t id = 0; id < 2; id++) ck_assert_uint_eq(l2_prefetch(s, &id, 1, &l, 0), 0);
  ck_assert_int_eq(kva_tier_bypassed(s, "disk0"), 1);
  ck_assert_uint_eq(l2_log_count("bypassed"), 1);
  l2_log_stop();
  l2_sleep_ms(100);
  ck_assert_int_eq(kva_tier_bypassed(s, "disk0"), 1);         /* the probes fail too */
  ck_assert_int_eq(truncate(path, (off_t)dt_capacity(8)), 0); /* the disk is back */
  ck_assert(l2_wait_until(not_bypassed, s, NULL, 5000));
  l2_finish(rt);
}
END_TEST

/* ---- the I/O engine (a pipe never answers unless written to) -------------- */

typedef struct io_seen {
  int res[32];
  intptr_t who[32];
  int n;
} io_seen;

static void io_done(disk_op *op, void *arg) {
  io_seen *seen = arg;
  seen->who[seen->n] = (intptr_t)op->ctx;
  seen->res[seen->n++] = op->res;
}

START_TEST(an_io_past_its_deadline_completes_timed_out) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  disk_io io;
  io_seen seen = {.n = 0};
  char err[256], buf[16];
  ck_assert_int_eq(disk_io_init(&io, p[0], 4, 50, io_done, &seen, err, sizeof(err)), KVA_OK);
  disk_op op = {.iov = {{buf, sizeof(buf)}}, .niov = 1, .ctx = (void *)1};
  uint64_t t0 = fixture_now_ns();
  disk_io_queue(&io, &op);
  while (disk_io_busy(&io)) disk_io_wait(&io);
  uint64_t ms = (fixture_now_ns() - t0) / 1000000;
  ck_assert_int_eq(seen.n, 1);
  ck_assert_int_eq(seen.res[0], -ETIMEDOUT);
  ck_assert_uint_ge(ms, 40);
  ck_assert_uint_lt(ms, 5000);
  disk_io_destroy(&io);
  close(p[0]);
  close(p[1]);
}
END_TEST

START_TEST(ios_beyond_the_depth_wait_in_order_without_blocking) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  disk_io io;
  io_seen seen = {.n = 0};
  char err[256], buf[5][16], data[80];
  ck_assert_int_eq(disk_io_init(&io, p[0], 2, 5000, io_done, &seen, err, sizeof(err)), KVA_OK);
  disk_op op[5];
  for (int i = 0; i < 5; i++) {
    op[i] = (disk_op){.iov = {{buf[i], 16}}, .niov = 1, .ctx = (void *)(intptr_t)i};
    disk_io_queue(&io, &op[i]);
  }
  ck_assert_int_eq(disk_io_submit(&io), KVA_OK);
  ck_assert_uint_eq(io.inflight, 2);
  ck_assert_uint_eq(io.npend, 3);
  memset(data, 'x', sizeof(data));
  ck_assert_int_eq(write(p[1], data, sizeof(data)), (ssize_t)sizeof(data));
  while (disk_io_busy(&io)) disk_io_wait(&io);
  ck_assert_int_eq(seen.n, 5);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(seen.res[i], 0);
  ck_assert(seen.who[2] == 2 && seen.who[3] == 3 && seen.who[4] == 4); /* queued ones in order */
  disk_io_destroy(&io);
  close(p[0]);
  close(p[1]);
}
END_TEST

/* Reads queued behind a store batch's payload writes go into the kernel
 * first, within the read budget (at least one read: one larger than the
 * budget runs alone), and the writes take a quarter of that budget (at
 * least one write) while reads are there; with no read left, the writes
 * get the whole depth again. The budget is lowered to 8 KiB so that 4 KiB
 * operations show it. */
START_TEST(reads_go_first_within_their_budget_and_writes_keep_a_share) {
  char path[] = "/tmp/kva-disk-io-XXXXXX", err[256];
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  unlink(path);
  static char buf[12][4096], big[3][12288];
  ck_assert_int_eq(pwrite(fd, big[0], sizeof(big[0]), 0), (ssize_t)sizeof(big[0]));
  disk_io io;
  io_seen seen = {.n = 0};
  ck_assert_int_eq(disk_io_init(&io, fd, 8, 5000, io_done, &seen, err, sizeof(err)), KVA_OK);
  ck_assert_uint_eq(io.read_budget, DISK_IO_READ_BYTES);
  io.read_budget = 8192;
  disk_op op[12];
  for (int i = 0; i < 12; i++) { /* 9 payload writes, then 3 reads */
    op[i] = (disk_op){.write = i < 9,
                      .off = 4096 * (uint64_t)(i < 9 ? i + 3 : 0),
                      .iov = {{buf[i], 4096}},
                      .niov = 1,
                      .ctx = (void *)(intptr_t)i};
    disk_io_queue(&io, &op[i]);
  }
  ck_assert_int_eq(disk_io_submit(&io), KVA_OK);
  ck_assert_uint_eq(io.inflight_reads, 2);  /* 8 KiB of reads */
  ck_assert_uint_eq(io.inflight_writes, 1); /* 2 KiB of writes: at least one */
  ck_assert_uint_eq(io.npend, 9);
  while (disk_io_busy(&io)) disk_io_wait(&io);
  ck_assert_int_eq(seen.n, 12);
  for (int i = 0; i < 12; i++) ck_assert_int_eq(seen.res[i], 0);
  for (int i = 0; i < 3; i++) { /* reads of 12 KiB: one at a time */
    op[i] = (disk_op){.iov = {{big[i], sizeof(big[i])}}, .niov = 1, .ctx = (void *)(intptr_t)i};
    disk_io_queue(&io, &op[i]);
  }
  ck_assert_int_eq(disk_io_submit(&io), KVA_OK);
  ck_assert_uint_eq(io.inflight_reads, 1);
  while (disk_io_busy(&io)) disk_io_wait(&io);
  ck_assert_int_eq(seen.n, 15);
  for (int i = 0; i < 8; i++) { /* writes alone: the whole depth */
    op[i] = (disk_op){.write = true,
                      .off = 4096 * (uint64_t)(i + 3),
                      .iov = {{buf[i], 4096}},
                      .niov = 1,
                      .ctx = (void *)(intptr_t)i};
    disk_io_queue(&io, &op[i]);
  }
  ck_assert_int_eq(disk_io_submit(&io), KVA_OK);
  ck_assert_uint_eq(io.inflight_writes, 8);
  while (disk_io_busy(&io)) disk_io_wait(&io);
  disk_io_destroy(&io);
  close(fd);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *su = suite_create("l2_disk");
  TCase *tc = tcase_create("disk");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, many_keys_round_trip_byte_exact);
  tcase_add_test(tc, many_keys_round_trip_in_deterministic_mode);
  tcase_add_test(tc, whole_block_objects_size_a_fresh_tier);
  tcase_add_test(tc, lookup_bitmap_has_misses_in_between);
  tcase_add_test(tc, aligned_and_misaligned_buffers_load_exact_bytes);
  tcase_add_test(tc, a_lock_blocks_replacement_and_eviction_until_unlock);
  tcase_add_test(tc, full_tier_evicts_the_least_recently_used_unlocked_slot);
  tcase_add_test(tc, duplicate_keys_in_one_store_are_stored_once);
  tcase_add_test(tc, a_store_that_does_not_fit_changes_nothing);
  tcase_add_test(tc, a_read_error_is_a_miss_and_fails_the_load);
  tcase_add_test(tc, read_errors_bypass_the_tier);
  tcase_add_test(tc, an_io_past_its_deadline_completes_timed_out);
  tcase_add_test(tc, ios_beyond_the_depth_wait_in_order_without_blocking);
  tcase_add_test(tc, reads_go_first_within_their_budget_and_writes_keep_a_share);
  suite_add_tcase(su, tc);
  return su;
}
